//! `profctl record` in this process (embedded mode): sample, name the windows as they close,
//! and write the outputs (pprof, SVG, folded), each on its own.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use recorder::{Recording, ResolveStats};

use super::naming::name_windows;
use super::options::RecordOutputs;
use super::pprof_out::PprofOut;
use super::signals::Signals;
use super::summary::{print_summary, stack_quality, subtitle, title};
use crate::cli::RecordArgs;
use crate::output::write_atomically;
use crate::render::shown;

/// A finished recording, named.
struct Recorded {
    recording: Recording,
    profile: profile::Profile,
    stats: ResolveStats,
    pprof: Option<PprofOut>,
    /// When the post-processing (naming, writing) began.
    post_started: std::time::Instant,
}

/// Run `profctl record` in this process.
pub fn run(args: RecordArgs, quiet: bool, verbose: u8) -> Result<ExitCode> {
    let cpu_at_start = recorder::ProcessUsage::now().cpu();
    let started_unix = SystemTime::now();
    let outputs = RecordOutputs::of(&args);
    args.validate()?;
    // Find unwritable outputs before recording, not after.
    outputs.check_writable()?;
    let mut recorded = record(&args, &outputs, quiet)?;
    if !quiet {
        for note in &recorded.recording.notes {
            eprintln!(
                "profctl: note: {}",
                crate::output::printable(&note.to_string())
            );
        }
    }
    let cpu_at_resolved = recorder::ProcessUsage::now().cpu();
    let post_started = recorded.post_started;
    let pprof = recorded.pprof.take();
    let (written, failures) = write_files(&args, &outputs, &recorded, pprof, started_unix);
    if !quiet {
        let r = &recorded;
        print_summary(
            &r.recording,
            &r.stats,
            &written,
            post_started.elapsed(),
            verbose > 0,
        );
        if verbose > 1 {
            print_phases(&r.recording, cpu_at_start, cpu_at_resolved);
        }
    }
    if let Some(first) = failures.into_iter().next() {
        if !written.is_empty() {
            eprintln!(
                "profctl: wrote {} despite the error below",
                written.join(", ")
            );
        }
        return Err(first);
    }
    Ok(ExitCode::SUCCESS)
}

/// A spinner with the recording's progress on a terminal, else nothing.
fn progress_bar(live: bool) -> ProgressBar {
    if !live {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} recording {msg}").expect("valid template"),
    );
    bar
}

/// Sample until the duration, the command's exit or a signal, naming windows on a thread of
/// their own as they close (so that draining never waits for symbolization).
fn record(args: &RecordArgs, outputs: &RecordOutputs, quiet: bool) -> Result<Recorded> {
    let mut options = args.to_options();
    let mut signals = Signals::watch()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let live = !quiet && std::io::stderr().is_terminal();
    if options.window.is_some() {
        options.drain_interval = recorder::defaults::WINDOW_DRAIN_INTERVAL;
        options.drain_interval_at_rest = Some(recorder::defaults::WINDOW_REST_INTERVAL);
    }
    if live {
        options.drain_interval = recorder::defaults::LIVE_DRAIN_INTERVAL;
        options.drain_interval_at_rest = None;
    }
    let bar = progress_bar(live);
    let mut progress = |p: recorder::Progress| {
        bar.set_message(format!(
            "{:.1} s, {} samples, {} lost (Ctrl-C to stop)",
            p.elapsed.as_secs_f64(),
            p.samples,
            p.lost
        ));
        bar.tick();
    };
    let resolve_options = recorder::ResolveOptions {
        // pprof keeps each frame's source file and line.
        source_locations: outputs.pprof.is_some(),
        time_weights: options.measure != recorder::Measure::Cpu,
        ..args.resolve_options()
    };
    let symbolizer = recorder::Symbolizer::new(resolve_options, options.frame_cache_dir.clone());
    let pprof_out = outputs
        .pprof
        .is_some()
        .then(|| PprofOut::for_measure(options.measure, options.frequency));
    let feed = symbolizer.feed();
    let (windows, closed) = std::sync::mpsc::channel::<recorder::ClosedWindow>();
    let streaming = options.window.is_some() && !quiet;
    let naming = std::thread::Builder::new()
        .name("symbolize".into())
        .spawn(move || name_windows(symbolizer, closed, streaming, pprof_out))
        .context("starting the symbolizer thread")?;
    let recording = runtime.block_on(async {
        let stop = signals.first();
        let mut on_window = |w: recorder::ClosedWindow| {
            let _ = windows.send(w);
        };
        recorder::record(&options, Some(&feed), stop, &mut progress, &mut on_window).await
    });
    drop(windows);
    // From here a signal ends profctl at once (naming or writing may take long).
    signals.sampling_over();
    bar.finish_and_clear();
    let post_started = std::time::Instant::now();
    let named = naming.join();
    let recording = recording.context("recording failed")?;
    let (profile, stats, pprof) =
        named.map_err(|_| anyhow::anyhow!("the symbolizer thread panicked"))?;
    Ok(Recorded {
        recording,
        profile,
        stats,
        pprof,
        post_started,
    })
}

/// Write folded stacks, pprof and SVG, each on its own (one that fails does not lose the
/// others): the printable paths written, and the failures.
fn write_files(
    args: &RecordArgs,
    outputs: &RecordOutputs,
    recorded: &Recorded,
    pprof_out: Option<PprofOut>,
    started_unix: SystemTime,
) -> (Vec<String>, Vec<anyhow::Error>) {
    let Recorded {
        recording,
        profile,
        stats,
        ..
    } = recorded;
    let mut written = Vec::new();
    let mut failures = Vec::new();
    let mut done = |path: &std::path::Path, result: Result<()>| match result {
        Ok(()) => written.push(shown(path)),
        Err(e) => failures.push(e),
    };
    if let Some(path) = &outputs.folded {
        let result = write_atomically(path, |out| profile.write_folded(out).map_err(Into::into))
            .with_context(|| format!("writing folded stacks to {}", shown(path)));
        done(path, result);
    }
    if let (Some(path), Some(out)) = (&outputs.pprof, pprof_out) {
        let start_ns = started_unix
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let pprof = out.finish(
            start_ns,
            recording.duration.as_nanos() as u64,
            recording.frequency,
            &recording.event.to_string(),
        );
        let result = write_atomically(path, |out| Ok(out.write_all(&pprof::encode_gz(&pprof))?))
            .with_context(|| format!("writing the pprof profile to {}", shown(path)));
        done(path, result);
    }
    if let Some(path) = &outputs.svg {
        if profile.total() == 0 {
            eprintln!(
                "profctl: no samples were recorded; not writing {}",
                shown(path)
            );
        } else {
            let options = profile::SvgOptions {
                title: title(args),
                subtitle: Some(subtitle(recording, stack_quality(stats).as_deref())),
                microseconds: recording.measure != recorder::Measure::Cpu,
            };
            let result = write_atomically(path, |out| {
                profile.write_svg(out, &options).map_err(Into::into)
            })
            .with_context(|| format!("writing the flamegraph to {}", shown(path)));
            done(path, result);
        }
    }
    (written, failures)
}

/// `-vv`: profctl's own CPU time by phase.
fn print_phases(recording: &Recording, cpu_at_start: Duration, cpu_at_resolved: Duration) {
    let marks = &recording.cpu_marks;
    let ms = |from: Duration, to: Duration| to.saturating_sub(from).as_secs_f64() * 1e3;
    eprintln!(
        "profctl: own CPU by phase: start {:.2} ms, open events {:.2} ms, sampling {:.2} ms ({:.2} ms draining), symbolize {:.2} ms, write {:.2} ms",
        cpu_at_start.as_secs_f64() * 1e3,
        ms(cpu_at_start, marks.events_enabled),
        ms(marks.events_enabled, marks.sampling_ended),
        marks.drain_thread.as_secs_f64() * 1e3,
        ms(marks.sampling_ended, cpu_at_resolved),
        ms(cpu_at_resolved, recorder::ProcessUsage::now().cpu()),
    );
}
