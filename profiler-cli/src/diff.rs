//! `profctl diff`: a differential flamegraph of two profiles (files or ranges of profilerd's
//! history), drawn by inferno (grown red, shrunk blue), and a summary of the largest changes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::cli::{parse_time, TimeArg, UsageError};
use crate::daemon_client::{self, RangeFilter};
use crate::output::{check_writable, printable, write_atomically};
use crate::top::function_counts;

/// `profctl diff --help` examples.
pub const EXAMPLES: &str = "Examples:
  profctl diff before.pb.gz after.pb.gz -o diff.svg        two pprof files (or folded stacks)
  profctl diff --before 10m..5m --after 5m..0 -o diff.svg  two ranges of profilerd's history
  profctl diff --before 1h..50m after.folded --comm nginx  a range against a file

Colours: red frames grew from BEFORE to AFTER, blue ones shrank (the deeper the colour, the
larger the change). Each frame is drawn as wide as AFTER has it. BEFORE's counts are scaled to
AFTER's total samples first, so that shares are compared, unless --no-normalize.";

/// Arguments of `profctl diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The profiles' files (pprof or folded), BEFORE then AFTER; a side given as a range
    /// (--before, --after) takes no file.
    #[arg(value_name = "FILE", num_args = 0..=2)]
    pub files: Vec<PathBuf>,
    /// BEFORE as a range of profilerd's history: `SINCE..UNTIL`, each as `flamegraph --since`
    /// takes it (`10m..5m`, `@1700000000..@1700000300`; `0` is now).
    #[arg(long, value_name = "RANGE", value_parser = parse_range)]
    pub before: Option<(TimeArg, TimeArg)>,
    /// AFTER as a range of profilerd's history.
    #[arg(long, value_name = "RANGE", value_parser = parse_range)]
    pub after: Option<(TimeArg, TimeArg)>,
    /// Only this process (ranges).
    #[arg(short, long, value_name = "PID", conflicts_with_all = ["comm", "uid"])]
    pub pid: Option<u32>,
    /// Only threads with this command name (ranges).
    #[arg(long, value_name = "NAME", conflicts_with = "uid")]
    pub comm: Option<String>,
    /// Only processes of this user (ranges).
    #[arg(long, value_name = "UID")]
    pub uid: Option<u32>,
    /// Write the differential SVG flamegraph here (default: diff.svg).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write the differential folded stacks here (`stack before after`).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
    /// Compare raw sample counts, not shares of each side's total.
    #[arg(long)]
    pub no_normalize: bool,
    /// Functions listed in the summary.
    #[arg(short = 'n', long, value_name = "N", default_value_t = 10)]
    pub limit: usize,
}

/// `SINCE..UNTIL`.
fn parse_range(text: &str) -> Result<(TimeArg, TimeArg), String> {
    let (since, until) = text
        .split_once("..")
        .ok_or_else(|| format!("expected SINCE..UNTIL (e.g. 10m..5m), got {text:?}"))?;
    Ok((parse_time(since)?, parse_time(until)?))
}

/// One side of the diff, loaded.
struct Side {
    profile: profile::Profile,
    comm_root: bool,
    what: String,
}

fn load_side(
    file: Option<&Path>,
    range: Option<(TimeArg, TimeArg)>,
    filter: &RangeFilter,
    socket: Option<&Path>,
) -> Result<Side> {
    if let Some(path) = file {
        let loaded = crate::input::load(path)?;
        return Ok(Side {
            profile: loaded.profile,
            comm_root: loaded.comm_root,
            what: printable(&path.display().to_string()).into_owned(),
        });
    }
    let (since, until) = range.expect("a side is a file or a range");
    let socket = daemon_client::socket_path(socket);
    let now = daemon_client::now_unix();
    let (since, until) = (since.unix_seconds(now), until.unix_seconds(now));
    let range = daemon_client::folded_range(&socket, since, until, filter)?;
    Ok(Side {
        profile: range.profile,
        comm_root: true,
        what: format!("profilerd {since:.0}..{until:.0} (UNIX)"),
    })
}

/// One function's change.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The function.
    pub name: String,
    /// Self share before, percent (or samples, not normalized).
    pub before: f64,
    /// Self share after.
    pub after: f64,
}

/// The functions whose self samples changed most, as shares of each side's total (or raw
/// counts when not `normalize`), largest change first.
pub fn largest_changes(
    before: &profile::Profile,
    before_root: bool,
    after: &profile::Profile,
    after_root: bool,
    normalize: bool,
    n: usize,
) -> Vec<Change> {
    let scale = |p: &profile::Profile| {
        if normalize {
            100.0 / p.total().max(1) as f64
        } else {
            1.0
        }
    };
    let (sb, sa) = (scale(before), scale(after));
    let mut by_name: std::collections::HashMap<String, (f64, f64)> = Default::default();
    for r in function_counts(before, before_root) {
        by_name.entry(r.name).or_default().0 = r.self_samples as f64 * sb;
    }
    for r in function_counts(after, after_root) {
        by_name.entry(r.name).or_default().1 = r.self_samples as f64 * sa;
    }
    let mut changes: Vec<Change> = by_name
        .into_iter()
        .map(|(name, (before, after))| Change {
            name,
            before,
            after,
        })
        .filter(|c| c.before != c.after)
        .collect();
    changes.sort_by(|a, b| {
        (b.after - b.before)
            .abs()
            .total_cmp(&(a.after - a.before).abs())
            .then(a.name.cmp(&b.name))
    });
    changes.truncate(n);
    changes
}

/// `profctl diff`.
pub fn run(args: &DiffArgs, socket: Option<&Path>, quiet: bool) -> Result<ExitCode> {
    let mut files = args.files.iter().map(PathBuf::as_path);
    let before_file = if args.before.is_none() {
        files.next()
    } else {
        None
    };
    let after_file = if args.after.is_none() {
        files.next()
    } else {
        None
    };
    if (args.before.is_none() && before_file.is_none())
        || (args.after.is_none() && after_file.is_none())
        || files.next().is_some()
    {
        return Err(UsageError(
            "give two sides: BEFORE and AFTER, each a file or a range (--before, --after)"
                .to_string(),
        )
        .into());
    }
    let svg_path = match (&args.output, &args.folded) {
        (None, None) => Some(PathBuf::from("diff.svg")),
        (svg, _) => svg.clone(),
    };
    for path in svg_path.iter().chain(args.folded.iter()) {
        check_writable(path)?;
    }
    let filter = RangeFilter {
        pid: args.pid,
        comm: args.comm.clone(),
        uid: args.uid,
    };
    let before = load_side(before_file, args.before, &filter, socket)?;
    let after = load_side(after_file, args.after, &filter, socket)?;
    for side in [&before, &after] {
        if side.profile.total() == 0 {
            bail!(
                "{} holds no samples; there is nothing to compare",
                side.what
            );
        }
    }
    // inferno's differential folding: `stack before after` lines, BEFORE scaled to AFTER's
    // total when normalizing.
    let folded = |p: &profile::Profile| p.folded_lines().join("\n").into_bytes();
    let mut diff = Vec::new();
    let options = inferno::differential::Options {
        normalize: !args.no_normalize,
        ..Default::default()
    };
    inferno::differential::from_readers(
        options,
        folded(&before.profile).as_slice(),
        folded(&after.profile).as_slice(),
        &mut diff,
    )
    .context("comparing the profiles")?;
    let diff = String::from_utf8(diff).context("inferno's differential output")?;
    let mut written = Vec::new();
    if let Some(path) = &args.folded {
        write_atomically(path, |out| Ok(out.write_all(diff.as_bytes())?))
            .with_context(|| format!("writing folded stacks to {}", path.display()))?;
        written.push(printable(&path.display().to_string()).into_owned());
    }
    if let Some(path) = &svg_path {
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = "profctl diff".to_string();
        opts.subtitle = Some(format!(
            "{} ({} samples) → {} ({} samples); red grew, blue shrank{}",
            before.what,
            before.profile.total(),
            after.what,
            after.profile.total(),
            if args.no_normalize {
                ", raw counts"
            } else {
                ", normalized by total samples"
            }
        ));
        opts.count_name = "samples".to_string();
        opts.deterministic = true;
        write_atomically(path, |out| {
            inferno::flamegraph::from_lines(&mut opts, diff.lines(), out)?;
            Ok(())
        })
        .with_context(|| format!("writing the flamegraph to {}", path.display()))?;
        written.push(printable(&path.display().to_string()).into_owned());
    }
    let changes = largest_changes(
        &before.profile,
        before.comm_root,
        &after.profile,
        after.comm_root,
        !args.no_normalize,
        args.limit,
    );
    let mut out = String::new();
    let unit = if args.no_normalize { "" } else { "%" };
    let _ = writeln!(
        out,
        "{} samples before, {} after; largest changes in self {}:",
        before.profile.total(),
        after.profile.total(),
        if args.no_normalize {
            "samples"
        } else {
            "share"
        }
    );
    for c in &changes {
        let _ = writeln!(
            out,
            "  {:>+9.2}{unit:1}  {:>8.2}{unit} -> {:>8.2}{unit}  {}",
            c.after - c.before,
            c.before,
            c.after,
            printable(&c.name)
        );
    }
    print!("{out}");
    if !quiet && !written.is_empty() {
        eprintln!("profctl: wrote {}", written.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(lines: &[(&[&str], u64)]) -> profile::Profile {
        let mut p = profile::Profile::new();
        for (frames, n) in lines {
            let ids: Vec<_> = frames.iter().map(|f| p.intern(f)).collect();
            p.add(&ids, *n);
        }
        p
    }

    #[test]
    fn changes_are_shares_and_sorted() {
        let before = profile(&[(&["app", "main", "a"], 75), (&["app", "main", "b"], 25)]);
        let after = profile(&[(&["app", "main", "a"], 50), (&["app", "main", "b"], 150)]);
        let c = largest_changes(&before, true, &after, true, true, 10);
        assert_eq!(c.len(), 2);
        assert!((c[0].after - c[0].before).abs() == 50.0, "{c:?}");
        let b = c.iter().find(|c| c.name == "b").unwrap();
        assert_eq!((b.before, b.after), (25.0, 75.0));
        let raw = largest_changes(&before, true, &after, true, false, 1);
        assert_eq!(raw[0].name, "b");
        assert_eq!((raw[0].before, raw[0].after), (25.0, 150.0));
        assert!(parse_range("10m..5m").is_ok());
        assert!(parse_range("10m").is_err());
    }
}
