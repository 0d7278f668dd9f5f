//! `profctl flamegraph`: a flamegraph (and folded stacks) of a file (`--input`) or of a time
//! range of profilerd's history (`--since`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use crate::cli::FlamegraphArgs;
use crate::daemon_client::socket_path;
use crate::history::{folded_range, RangeFilter, RangeProfile};
use crate::output::printable;
use crate::render::{write_outputs, Outputs, WhenEmpty};
use crate::time::{now_unix, resolve_range};

/// Default flamegraph path when neither -o nor --folded is given.
const DEFAULT_SVG: &str = "profile.svg";

/// Run `profctl flamegraph`: from `--input` when given, else from the daemon at `socket`.
pub fn run(args: &FlamegraphArgs, socket: Option<&Path>, quiet: bool) -> Result<ExitCode> {
    match &args.input {
        Some(input) => from_file(args, input, quiet),
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
    } = folded_range(&socket, since, until, &RangeFilter::of(&args.filter))?;
    let samples = profile.total();
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
            "{event} at {frequency} Hz, {:.0} s from {since:.0} (UNIX), {samples} samples in {slices} slices{}",
            until - since,
            if kernel { "" } else { ", user space only" }
        )),
        ..Default::default()
    };
    let empty = WhenEmpty::Skip("no samples in that range");
    let written = write_outputs(&outputs, &profile, &options, empty)?;
    if !quiet {
        eprintln!(
            "profctl: via profilerd ({}): {samples} samples in {slices} slices over {:.0} s ({event} at {frequency} Hz{})",
            printable(&socket.display().to_string()),
            until - since,
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
