//! `profctl flamegraph`: a flamegraph (and folded stacks) of a file (`--input`) or of a time
//! range of profilerd's history (`--since`); a range also as a pprof profile (`-o FILE.pb.gz`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};

use crate::cli::{FlamegraphArgs, OutputFormat};
use crate::commands::record::options::output_format;
use crate::daemon_client::socket_path;
use crate::error::UsageError;
use crate::history::{folded_range, pprof_range, RangeFilter, RangePprof, RangeProfile};
use crate::output::{check_writable, printable, write_atomically};
use crate::render::{shown, write_outputs, Outputs, WhenEmpty};
use crate::time::{local_range, local_zone, now_unix, resolve_range};

/// Default flamegraph path when neither -o nor --folded is given.
const DEFAULT_SVG: &str = "profile.svg";

/// Run `profctl flamegraph`: from `--input` when given, else from the daemon at `socket`.
pub fn run(args: &FlamegraphArgs, socket: Option<&Path>, quiet: bool) -> Result<ExitCode> {
    let pprof = args
        .output
        .as_deref()
        .is_some_and(|o| output_format(o, args.format) == OutputFormat::Pprof);
    match &args.input {
        Some(_) if pprof => Err(UsageError(
            "pprof output (-o FILE.pb.gz, --format pprof) is written for a range of profilerd's history (--since)".into(),
        )
        .into()),
        Some(input) => from_file(args, input, quiet),
        None if pprof => pprof_from_daemon(args, socket, quiet),
        None => from_daemon(args, socket, quiet),
    }
}

/// `profctl flamegraph --input FILE`: render a file, no daemon.
fn from_file(args: &FlamegraphArgs, input: &Path, quiet: bool) -> Result<ExitCode> {
    let outputs = Outputs::checked(args.output.as_deref(), args.folded.as_deref(), DEFAULT_SVG)?;
    let loaded = crate::input::load(input)?;
    let profile = &loaded.profile;
    let shown = printable(&input.display().to_string()).into_owned();
    let options = profile::SvgOptions {
        title: format!("profctl: {shown}"),
        subtitle: Some(format!("{} samples ({})", profile.total(), loaded.kind)),
        ..Default::default()
    };
    let empty = WhenEmpty::Fail(format!(
        "{shown} holds no samples; there is no flamegraph to draw"
    ));
    let written = write_outputs(&outputs, profile, &options, empty)?;
    if !quiet {
        eprintln!(
            "profctl: {shown} ({}): {} samples, {} stacks; wrote {}",
            loaded.kind,
            profile.total(),
            profile.stack_count(),
            written.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The range query's filter and measure (`--off-cpu`, `--wall`).
fn range_filter(args: &FlamegraphArgs) -> RangeFilter {
    RangeFilter {
        measure: args.measure.measure(),
        ..RangeFilter::of(&args.filter)
    }
}

/// What the counts are: samples, or microseconds off CPU or of wall-clock time.
fn unit(args: &FlamegraphArgs) -> &'static str {
    if args.measure.off_cpu {
        "µs off CPU"
    } else if args.measure.wall {
        "µs of wall-clock time"
    } else {
        "samples"
    }
}

/// `profctl flamegraph --since …`: a range of the daemon's history.
fn from_daemon(args: &FlamegraphArgs, socket: Option<&Path>, quiet: bool) -> Result<ExitCode> {
    let socket = socket_path(socket);
    let outputs = Outputs::checked(args.output.as_deref(), args.folded.as_deref(), DEFAULT_SVG)?;
    let since = args
        .range
        .since
        .expect("clap requires --since without --input");
    let (since, until) = resolve_range(since, args.range.until, now_unix())?;
    let RangeProfile {
        profile,
        slices,
        skipped,
        frequency,
        event,
        kernel,
    } = folded_range(&socket, since, until, &range_filter(args))?;
    let samples = profile.total();
    let unit = unit(args);
    let process = &args.filter.process;
    let filter = match (&process.pid, &process.comm, &process.uid) {
        (Some(pid), _, _) if args.filter.descendants => {
            format!(", process {pid} and descendants")
        }
        (Some(pid), _, _) => format!(", process {pid}"),
        (_, Some(comm), _) => format!(", command {comm}"),
        (_, _, Some(uid)) => format!(", uid {uid}"),
        _ => String::new(),
    };
    let options = profile::SvgOptions {
        title: format!("profctl: via profilerd{filter}"),
        subtitle: Some(format!(
            "{event} at {frequency} Hz, {} ({:.0} s), {samples} {unit} in {slices} slices{}",
            local_range(since, until, &local_zone()),
            until - since,
            if kernel { "" } else { ", user space only" }
        )),
        ..Default::default()
    };
    let empty = WhenEmpty::Skip("no samples in that range");
    let written = write_outputs(&outputs, &profile, &options, empty)?;
    if !quiet {
        eprintln!(
            "profctl: via profilerd ({}): {samples} {unit} in {slices} slices, {} ({event} at {frequency} Hz{})",
            printable(&socket.display().to_string()),
            local_range(since, until, &local_zone()),
            if kernel { ", with kernel frames" } else { ", user space only" }
        );
        if skipped > 0 {
            eprintln!("profctl: note: {skipped} slices were skipped as corrupt or truncated (see profilerd's log)");
        }
        if written.is_empty() {
            eprintln!("profctl: no files written");
        } else {
            eprintln!("profctl: wrote {}", written.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `profctl flamegraph --since … -o FILE.pb.gz`: a range of the daemon's history as pprof
/// (and its folded stacks with --folded).
fn pprof_from_daemon(
    args: &FlamegraphArgs,
    socket: Option<&Path>,
    quiet: bool,
) -> Result<ExitCode> {
    let socket = socket_path(socket);
    let path = args.output.as_deref().expect("pprof output has -o");
    check_writable(path)?;
    if let Some(folded) = &args.folded {
        check_writable(folded)?;
    }
    let since = args
        .range
        .since
        .expect("clap requires --since without --input");
    let (since, until) = resolve_range(since, args.range.until, now_unix())?;
    let RangePprof {
        bytes,
        samples,
        slices,
        skipped,
        frequency,
        event,
        kernel,
    } = pprof_range(&socket, since, until, &range_filter(args))?;
    let unit = unit(args);
    let mut written = Vec::new();
    if samples == 0 {
        eprintln!(
            "profctl: no samples in that range; not writing {}",
            shown(path)
        );
    } else {
        write_atomically(path, |out| out.write_all(&bytes).map_err(Into::into))
            .with_context(|| format!("writing the profile to {}", path.display()))?;
        written.push(shown(path));
        if args.folded.is_some() {
            let loaded = crate::input::parse(&bytes)?;
            let outputs = Outputs {
                svg: None,
                folded: args.folded.clone(),
            };
            let options = profile::SvgOptions::default();
            let empty = WhenEmpty::Skip("no samples in that range");
            written.extend(write_outputs(&outputs, &loaded.profile, &options, empty)?);
        }
    }
    if !quiet {
        eprintln!(
            "profctl: via profilerd ({}): {samples} {unit} in {slices} slices, {} ({event} at {frequency} Hz{}); pprof",
            printable(&socket.display().to_string()),
            local_range(since, until, &local_zone()),
            if kernel { ", with kernel frames" } else { ", user space only" }
        );
        if skipped > 0 {
            eprintln!("profctl: note: {skipped} slices were skipped as corrupt or truncated (see profilerd's log)");
        }
        if !written.is_empty() {
            eprintln!("profctl: wrote {}", written.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}
