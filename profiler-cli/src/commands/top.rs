//! `profctl top`: the hottest functions, self and total, of a file or a range of profilerd's
//! history, as a table (the counting is `profile::function_counts`).

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;
use profile::{function_counts, sort_functions, FunctionCounts, FunctionOrder};

use crate::cli::TopArgs;
use crate::daemon_client::socket_path;
use crate::history::{folded_range, RangeFilter};
use crate::output::printable;
use crate::time::{local_range, local_zone, now_unix, resolve_range};

/// The table `profctl top` prints: self and total samples and shares of `samples`.
pub fn table(rows: &[FunctionCounts], samples: u64) -> String {
    let pct = |n: u64| 100.0 * n as f64 / samples.max(1) as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>10} {:>7} {:>10} {:>7}  function",
        "self", "self%", "total", "total%"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:>10} {:>6.2}% {:>10} {:>6.2}%  {}",
            r.self_samples,
            pct(r.self_samples),
            r.total_samples,
            pct(r.total_samples),
            printable(&r.name)
        );
    }
    out
}

/// Run `profctl top`: from `--input` when given, else from the daemon at `socket`.
pub fn run(args: &TopArgs, socket: Option<&Path>, quiet: bool) -> Result<ExitCode> {
    let (profile, comm_root, what) = match &args.input {
        Some(path) => {
            let loaded = crate::input::load(path)?;
            let what = format!(
                "{} ({})",
                printable(&path.display().to_string()),
                loaded.kind
            );
            (loaded.profile, loaded.comm_root, what)
        }
        None => {
            let socket = socket_path(socket);
            let since = args
                .range
                .since
                .expect("clap requires --since without --input");
            let (since, until) = resolve_range(since, args.range.until, now_unix())?;
            let filter = RangeFilter {
                measure: args.measure.measure(),
                ..RangeFilter::of_process(&args.filter)
            };
            let range = folded_range(&socket, since, until, &filter)?;
            let what = format!(
                "via profilerd, {} ({:.0} s), {} slices",
                local_range(since, until, &local_zone()),
                until - since,
                range.slices
            );
            (range.profile, true, what)
        }
    };
    let mut rows = function_counts(&profile, comm_root);
    if args.by_total {
        sort_functions(&mut rows, FunctionOrder::ByTotal);
    }
    rows.truncate(args.limit);
    // Off-CPU and wall-clock counts are microseconds.
    let unit = match args.measure.measure() {
        Some(_) if args.input.is_none() => "µs",
        _ => "samples",
    };
    if !quiet {
        eprintln!("profctl: {what}: {} {unit}", profile.total());
    }
    print!("{}", table(&rows, profile.total()));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_shares() {
        let rows = [FunctionCounts {
            name: "leaf".into(),
            self_samples: 3,
            total_samples: 3,
        }];
        let t = table(&rows, 4);
        assert!(t.contains(" 75.00%  leaf"), "{t}");
        assert!(t.starts_with("      self   self%"), "{t}");
    }
}
