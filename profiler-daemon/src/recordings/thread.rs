//! The recording thread: sample one process on perf events of its own, name what was
//! sampled, and keep what the requester may see.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sampler::EventKind;

use super::{Entry, Measure, Outcome};
use crate::access::Visibility;
use crate::config::Config;
use crate::filter::Filter;
use crate::options::recording_options;
use crate::slice::Slice;
use crate::state::unix_now_ns;

/// The effective uid of the process a pidfd names (read through /proc, then the pidfd checked
/// again, so that a pid reused meanwhile is not taken for it). None: it exited.
pub(super) fn uid_of(pid: u32, pidfd: &OwnedFd) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    crate::sys::pidfd_alive(pidfd).then_some(uid)
}

/// The recording thread: sample, name, select.
pub(super) fn run(
    config: &Config,
    event: EventKind,
    entry: &Entry,
    duration: Duration,
    pidfd: OwnedFd,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<Outcome, String> {
    let request = &entry.request;
    let frequency = request.frequency.unwrap_or(0);
    let mut options = recording_options(
        config,
        event,
        request.pid,
        frequency,
        duration,
        // Off CPU, the kernel part names the wait kind; `append` keeps it from a requester
        // who may not see kernel frames.
        entry.kernel || request.measure != Measure::Cpu,
    );
    options.measure = request.measure.recorder();
    if request.on_exec {
        options.target = recorder::RecordTarget::PidAtExec(request.pid);
    }
    let service_options = recorder::ResolveOptions {
        debug_search: options
            .preload_symbols
            .clone()
            .unwrap_or_else(symbolize::DebugSearch::system),
        kernel_cache_dir: Some(config.storage.cache_dir.clone()),
        ..recorder::ResolveOptions::default()
    };
    let mut symbolizer = recorder::Symbolizer::new(service_options, None);
    let sampled = sample(&options, &symbolizer, &pidfd, &entry.sampling, stop)?;
    let recording = &sampled.recording;
    // Off-CPU and wall-clock recordings sample on cpu-clock: periods are ns.
    let event = match request.measure {
        Measure::Cpu => event,
        _ => EventKind::CpuClock,
    };
    let period_ns = 1_000_000_000 / recording.frequency.max(1);
    let offset = unix_now_ns().saturating_sub(sampler::now_ns());
    let filter = Filter {
        pid: Some(request.pid),
        descendants: request.descendants,
        ..Filter::default()
    };
    let mut out = Slice {
        start_ns: entry.started_ns,
        end_ns: entry.started_ns + recording.duration.as_nanos() as u64,
        period_ns,
        ..Slice::default()
    };
    for closed in &sampled.windows {
        let (profile, stacks, _) = symbolizer.symbolize_stacks(&closed.window);
        let slice = Slice::from_named(&closed.window, &profile, &stacks, period_ns, event, offset);
        append(&mut out, slice, &filter, entry.visibility);
    }
    let elapsed = recording.duration.as_secs_f64();
    tracing::info!(
        id = entry.id,
        samples = out.samples(),
        seconds = elapsed,
        "recording done"
    );
    Ok(Outcome {
        measure: request.measure,
        samples_read: recording.stats.samples,
        lost: recording.stats.lost,
        event: recording.event.to_string(),
        frequency: recording.frequency,
        seconds: elapsed,
        stopped_early: sampled.stopped || elapsed + 0.5 < duration.as_secs_f64(),
        slice: out,
    })
}

/// What the recorder gave back.
struct Sampled {
    recording: recorder::Recording,
    windows: Vec<recorder::ClosedWindow>,
    /// Stopped before its duration (DELETE, shutdown).
    stopped: bool,
}

/// Sample with `options` until the duration ends or `stop`; an error unless the process the
/// pidfd names was alive once its events were open.
fn sample(
    options: &recorder::RecordOptions,
    symbolizer: &recorder::Symbolizer,
    pidfd: &OwnedFd,
    sampling: &AtomicBool,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<Sampled, String> {
    let pid = match options.target {
        recorder::RecordTarget::Pid(pid) | recorder::RecordTarget::PidAtExec(pid) => pid,
        _ => 0,
    };
    let feed = symbolizer.feed();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let stopped = AtomicBool::new(false);
    // The first progress comes after the events were opened: if the process the request
    // named is gone by then, the events may be on a process that reused its pid.
    let mut checked = false;
    let vanished = AtomicBool::new(false);
    let mut progress = |_: recorder::Progress| {
        if !checked {
            checked = true;
            if !crate::sys::pidfd_alive(pidfd) {
                vanished.store(true, Ordering::Relaxed);
            }
            sampling.store(true, Ordering::Relaxed);
        }
    };
    let mut windows = Vec::new();
    let mut on_window = |w: recorder::ClosedWindow| windows.push(w);
    let recording = runtime.block_on(async {
        let stop = async {
            let _ = stop.await;
            stopped.store(true, Ordering::Relaxed);
        };
        recorder::record(options, Some(&feed), stop, &mut progress, &mut on_window).await
    });
    let recording = recording.map_err(|e| format!("recording failed: {e}"))?;
    if vanished.load(Ordering::Relaxed) || (!checked && !crate::sys::pidfd_alive(pidfd)) {
        // Not proven to be the process asked for: nothing is returned.
        if !checked {
            return Err(format!(
                "process {pid} exited before its events were checked; nothing recorded"
            ));
        }
        return Err(format!(
            "process {pid} exited before recording began; nothing recorded"
        ));
    }
    Ok(Sampled {
        recording,
        windows,
        stopped: stopped.load(Ordering::Relaxed),
    })
}

/// Add the stacks of `slice` that `filter` and `visibility` admit to `out` (kernel frames
/// removed unless everything is visible; an off-CPU stack keeps its innermost frame, which
/// names the wait kind, after them).
fn append(out: &mut Slice, slice: Slice, filter: &Filter, visibility: Visibility) {
    let base = out.names.len() as u32;
    out.names.extend(slice.names);
    for mut s in slice.stacks {
        if !filter.admits(&s, visibility) {
            continue;
        }
        if visibility != Visibility::All {
            let marker = s
                .frames
                .last()
                .copied()
                .filter(|&f| profile::WaitKind::is_marker(&out.names[(base + f) as usize]));
            let kernel = s.kernel_frames as usize + usize::from(marker.is_some());
            let keep = s.frames.len() - kernel.min(s.frames.len());
            s.frames.truncate(keep);
            s.frames.extend(marker);
            s.kernel_frames = 0;
        }
        for f in s.frames.iter_mut() {
            *f += base;
        }
        out.stacks.push(s);
    }
}
