//! `profctl top`: the hottest functions, self and total, as a table.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use crate::cli::{parse_time, TimeArg};
use crate::daemon_client::{self, RangeFilter};
use crate::output::printable;

/// `profctl top --help` examples.
pub const EXAMPLES: &str = "Examples:
  profctl top --input cpu.pb.gz                 a pprof file (profctl's, go tool pprof's, ...)
  profctl top --input app.folded --limit 5      folded stacks
  profctl top --since 10m --comm nginx          profilerd's history of the last 10 minutes

self: samples in which the function was the innermost frame; total: samples in which it was on
the stack (once per sample, however deep the recursion). The thread's command name, the root of
profctl's stacks, is not counted as a function.";

/// Arguments of `profctl top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Read this file (pprof, gzipped or not, or folded stacks) instead of asking the daemon.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["since", "until", "pid", "comm", "uid"])]
    pub input: Option<PathBuf>,
    /// Start of a range of profilerd's history, as `profctl flamegraph --since`.
    #[arg(long, value_name = "TIME", value_parser = parse_time, required_unless_present = "input")]
    pub since: Option<TimeArg>,
    /// End of the range. Default: now.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub until: Option<TimeArg>,
    /// Only this process (daemon range).
    #[arg(short, long, value_name = "PID", conflicts_with_all = ["comm", "uid"])]
    pub pid: Option<u32>,
    /// Only threads with this command name (daemon range).
    #[arg(long, value_name = "NAME", conflicts_with = "uid")]
    pub comm: Option<String>,
    /// Only processes of this user (daemon range).
    #[arg(long, value_name = "UID")]
    pub uid: Option<u32>,
    /// Rows shown.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 20)]
    pub limit: usize,
    /// Order by total instead of self.
    #[arg(long)]
    pub by_total: bool,
}

/// One function's samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionCounts {
    /// The function (frame name).
    pub name: String,
    /// Samples with it as the innermost frame.
    pub self_samples: u64,
    /// Samples with it anywhere on the stack.
    pub total_samples: u64,
}

/// Self and total samples of every function of `profile`, by self (then total, then name);
/// with `comm_root`, each stack's root frame (the command name) is not a function.
pub fn function_counts(profile: &profile::Profile, comm_root: bool) -> Vec<FunctionCounts> {
    let mut counts: HashMap<profile::FrameId, (u64, u64)> = HashMap::new();
    let mut seen = HashSet::new();
    for (stack, count) in profile.stacks() {
        let frames = if comm_root && !stack.is_empty() {
            &stack[1..]
        } else {
            stack
        };
        seen.clear();
        for &f in frames {
            if seen.insert(f) {
                counts.entry(f).or_default().1 += count;
            }
        }
        if let Some(&leaf) = frames.last() {
            counts.entry(leaf).or_default().0 += count;
        }
    }
    let mut out: Vec<FunctionCounts> = counts
        .into_iter()
        .map(|(id, (s, t))| FunctionCounts {
            name: profile.name(id).to_string(),
            self_samples: s,
            total_samples: t,
        })
        .collect();
    out.sort_by(|a, b| {
        b.self_samples
            .cmp(&a.self_samples)
            .then(b.total_samples.cmp(&a.total_samples))
            .then(a.name.cmp(&b.name))
    });
    out
}

/// The table `profctl top` prints.
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

/// `profctl top`.
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
            let socket = daemon_client::socket_path(socket);
            let now = daemon_client::now_unix();
            let since = args
                .since
                .expect("clap requires --since without --input")
                .unix_seconds(now);
            let until = args.until.map_or(now, |u| u.unix_seconds(now));
            let filter = RangeFilter {
                pid: args.pid,
                comm: args.comm.clone(),
                uid: args.uid,
            };
            let range = daemon_client::folded_range(&socket, since, until, &filter)?;
            let what = format!(
                "via profilerd, {:.0} s from {since:.0} (UNIX), {} slices",
                until - since,
                range.slices
            );
            (range.profile, true, what)
        }
    };
    let mut rows = function_counts(&profile, comm_root);
    if args.by_total {
        rows.sort_by(|a, b| {
            b.total_samples
                .cmp(&a.total_samples)
                .then(b.self_samples.cmp(&a.self_samples))
                .then(a.name.cmp(&b.name))
        });
    }
    rows.truncate(args.limit);
    if !quiet {
        eprintln!("profctl: {what}: {} samples", profile.total());
    }
    print!("{}", table(&rows, profile.total()));
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_and_total_count_each_sample_once() {
        let mut p = profile::Profile::new();
        let [app, main, rec, leaf] = ["app", "main", "rec", "leaf"].map(|n| p.intern(n));
        p.add(&[app, main, rec, rec, leaf], 3);
        p.add(&[app, main, rec], 1);
        let rows = function_counts(&p, true);
        let get = |n: &str| rows.iter().find(|r| r.name == n).unwrap().clone();
        assert_eq!(
            (get("leaf").self_samples, get("leaf").total_samples),
            (3, 3)
        );
        assert_eq!((get("rec").self_samples, get("rec").total_samples), (1, 4));
        assert_eq!(
            (get("main").self_samples, get("main").total_samples),
            (0, 4)
        );
        assert!(rows.iter().all(|r| r.name != "app"));
        assert_eq!(rows[0].name, "leaf");
        let t = table(&rows, 4);
        assert!(t.contains(" 75.00%  leaf"), "{t}");
    }
}
