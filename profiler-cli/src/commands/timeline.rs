//! `profctl timeline`: CPU over time from profilerd's history, as a chart in the terminal, an
//! SVG (`-o`) or the daemon's JSON (`--json`).

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use daemon_api::history::GroupBy;
use daemon_api::Measure;

use crate::cli::{GroupByArg, TimelineArgs};
use crate::daemon_client::socket_path;
use crate::history::{timeline_range, RangeFilter, TimelineQuery};
use crate::output::{check_writable, printable, write_atomically};
use crate::render::shown;
use crate::time::{local_range, local_zone, now_unix, resolve_range};
use crate::timeline::{chart, svg, Timeline};

/// Run `profctl timeline` against the daemon at `socket`.
pub fn run(args: &TimelineArgs, socket: Option<&Path>, quiet: bool) -> Result<ExitCode> {
    let socket = socket_path(socket);
    if let Some(path) = &args.output {
        check_writable(path)?;
    }
    let since = args.range.since.expect("clap requires --since");
    let (since, until) = resolve_range(since, args.range.until, now_unix())?;
    let by = match args.by {
        GroupByArg::Comm => GroupBy::Comm,
        GroupByArg::Pid => GroupBy::Pid,
        GroupByArg::Uid => GroupBy::Uid,
        GroupByArg::Cgroup => GroupBy::Cgroup,
    };
    let query = TimelineQuery {
        bucket: args.bucket,
        by,
        top: args.top,
        function: args.function.clone(),
    };
    let (json, slice_seconds) = timeline_range(
        &socket,
        (since, until),
        &RangeFilter {
            measure: args.measure.measure(),
            ..RangeFilter::of(&args.filter)
        },
        &query,
    )?;
    if args.json {
        let mut out = std::io::stdout().lock();
        out.write_all(&json)?;
        out.write_all(b"\n")?;
        return Ok(ExitCode::SUCCESS);
    }
    let timeline = Timeline::parse(&json).map_err(anyhow::Error::msg)?;
    let tz = local_zone();
    let range = local_range(since, until, &tz);
    // Off-CPU and wall-clock time are threads' time: a second per second is one thread.
    let (time, unit) = match args.measure.measure() {
        Some(Measure::OffCpu) => ("time off CPU", "threads"),
        Some(Measure::Wall) => ("wall-clock time", "threads"),
        Some(Measure::Cpu) | None => ("CPU", "cores"),
    };
    let what = match &args.function {
        Some(f) => format!(
            "{time} with {} on the stack, by {}",
            printable(f),
            by.as_str()
        ),
        None => format!("{time} by {}", by.as_str()),
    };
    // A daemon that does not say keeps no per-second counts: its slices are its resolution.
    let resolution = timeline
        .resolution_seconds
        .unwrap_or(slice_seconds.ceil() as u64)
        .max(1);
    let subtitle = format!(
        "{range}, {} buckets of {} s, in {unit}, at {resolution}-s resolution",
        timeline.buckets.len(),
        timeline.bucket_seconds
    );
    if !quiet {
        if let Some(note) = &timeline.note {
            eprintln!("profctl: note: {}", printable(note));
        } else if resolution > timeline.bucket_seconds {
            eprintln!(
                "profctl: note: profilerd keeps {resolution}-s slices without per-second counts: each slice's CPU is spread evenly over its buckets"
            );
        }
    }
    match &args.output {
        Some(path) => {
            let title = format!("profctl timeline: {what}");
            let text = svg::render(&timeline, &title, &subtitle, &tz);
            write_atomically(path, |out| {
                out.write_all(text.as_bytes()).map_err(Into::into)
            })
            .with_context(|| format!("writing the timeline to {}", path.display()))?;
            if !quiet {
                eprintln!("profctl: {what}, {subtitle}; wrote {}", shown(path));
            }
        }
        None => {
            println!("{what}, {subtitle}");
            print!("{}", chart::render(&timeline, chart::terminal_width(), &tz));
        }
    }
    Ok(ExitCode::SUCCESS)
}
