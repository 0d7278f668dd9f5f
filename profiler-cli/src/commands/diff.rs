//! `profctl diff`: a differential flamegraph of two profiles (files or ranges of profilerd's
//! history), drawn by inferno (grown red, shrunk blue), and a summary of the largest changes
//! (computed by `profile::largest_changes`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use crate::cli::DiffArgs;
use crate::daemon_client::socket_path;
use crate::error::UsageError;
use crate::history::{folded_range, RangeFilter};
use crate::output::{printable, write_atomically};
use crate::render::{shown, Outputs};
use crate::time::{local_range, local_zone, now_unix, resolve_range, TimeArg};

/// One side of the diff, loaded.
struct Side {
    profile: profile::Profile,
    comm_root: bool,
    what: String,
}

impl Side {
    fn as_side(&self) -> profile::Side<'_> {
        profile::Side {
            profile: &self.profile,
            comm_root: self.comm_root,
        }
    }
}

/// A side from its file, else from its range of the daemon's history.
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
    let socket = socket_path(socket);
    let (since, until) = resolve_range(since, Some(until), now_unix())?;
    let range = folded_range(&socket, since, until, filter)?;
    Ok(Side {
        profile: range.profile,
        comm_root: true,
        what: format!("profilerd {}", local_range(since, until, &local_zone())),
    })
}

/// The files of BEFORE and AFTER: the positional files fill the sides not given as ranges.
fn side_files(args: &DiffArgs) -> Result<(Option<&Path>, Option<&Path>)> {
    let mut files = args.files.iter().map(PathBuf::as_path);
    let before = if args.before.is_none() {
        files.next()
    } else {
        None
    };
    let after = if args.after.is_none() {
        files.next()
    } else {
        None
    };
    if (args.before.is_none() && before.is_none())
        || (args.after.is_none() && after.is_none())
        || files.next().is_some()
    {
        return Err(UsageError(
            "give two sides: BEFORE and AFTER, each a file or a range (--before, --after)"
                .to_string(),
        )
        .into());
    }
    Ok((before, after))
}

/// inferno's differential folding: `stack before after` lines, BEFORE scaled to AFTER's
/// total when normalizing.
fn differential(before: &Side, after: &Side, normalize: bool) -> Result<String> {
    let folded = |p: &profile::Profile| p.folded_lines().join("\n").into_bytes();
    let mut diff = Vec::new();
    let options = inferno::differential::Options {
        normalize,
        ..Default::default()
    };
    inferno::differential::from_readers(
        options,
        folded(&before.profile).as_slice(),
        folded(&after.profile).as_slice(),
        &mut diff,
    )
    .context("comparing the profiles")?;
    String::from_utf8(diff).context("inferno's differential output")
}

/// Write the differential folded stacks and SVG; the printable paths written.
fn write_diff(
    args: &DiffArgs,
    outputs: &Outputs,
    diff: &str,
    before: &Side,
    after: &Side,
) -> Result<Vec<String>> {
    let mut written = Vec::new();
    if let Some(path) = &outputs.folded {
        write_atomically(path, |out| Ok(out.write_all(diff.as_bytes())?))
            .with_context(|| format!("writing folded stacks to {}", path.display()))?;
        written.push(shown(path));
    }
    if let Some(path) = &outputs.svg {
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
        written.push(shown(path));
    }
    Ok(written)
}

/// The summary printed to standard output: totals and the largest changes of self share.
fn summary(args: &DiffArgs, before: &Side, after: &Side) -> String {
    let changes = profile::largest_changes(
        before.as_side(),
        after.as_side(),
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
    out
}

/// Run `profctl diff`.
pub fn run(args: &DiffArgs, socket: Option<&Path>, quiet: bool) -> Result<ExitCode> {
    let (before_file, after_file) = side_files(args)?;
    let outputs = Outputs::checked(args.output.as_deref(), args.folded.as_deref(), "diff.svg")?;
    let filter = RangeFilter::of_process(&args.filter);
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
    let diff = differential(&before, &after, !args.no_normalize)?;
    let written = write_diff(args, &outputs, &diff, &before, &after)?;
    print!("{}", summary(args, &before, &after));
    if !quiet && !written.is_empty() {
        eprintln!("profctl: wrote {}", written.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}
