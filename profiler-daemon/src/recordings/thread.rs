//! The recording thread: sample one process on perf events of its own, name what was
//! sampled, and keep what the requester may see.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sampler::EventKind;

use super::{Entry, Measure, Outcome};
use crate::access::Visibility;
use crate::config::Config;
use crate::filter::Filter;
use crate::measure::{hide_kernel_frames, MeasureSlices};
use crate::options::recording_options;
use crate::slice::Slice;
use crate::state::unix_now_ns;

/// The owner of the process a pidfd names, judged as the kernel judges who may trace it
/// ([`procmap::owner_of`]: its real, effective and saved ids one user's, and dumpable; else
/// [`procmap::UNKNOWN_UID`], which only admins match), read through /proc, then the pidfd
/// checked again, so that a pid reused meanwhile is not taken for it. None: it exited.
pub(super) fn uid_of(pid: u32, pidfd: &OwnedFd) -> Option<u32> {
    let uid = procmap::owner_of(pid)?;
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
    options.measure = request.measure;
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
    let sampled = sample(
        &options,
        &symbolizer,
        &pidfd,
        &entry.sampling,
        stop,
        config.recordings.max_bytes.0,
    )?;
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
    let mut names = HashMap::new();
    let mut hidden = 0;
    for closed in &sampled.windows {
        let (profile, stacks, _) = symbolizer.symbolize_stacks(&closed.window);
        let slice = Slice::from_named(&closed.window, &profile, &stacks, period_ns, event, offset);
        // Each stack's time of the recording's measure as its CPU time (the pprof's second
        // value): off-CPU stacks hold theirs apart in a slice.
        let slice = request.measure.project(slice);
        hidden += append(&mut out, &mut names, slice, &filter, entry.visibility);
    }
    let elapsed = recording.duration.as_secs_f64();
    tracing::info!(
        id = entry.id,
        samples = out.samples(),
        hidden,
        seconds = elapsed,
        "recording done"
    );
    Ok(Outcome {
        measure: request.measure,
        samples_read: recording.stats.samples,
        samples_hidden: hidden,
        lost: recording.stats.lost,
        event: recording.event.to_string(),
        frequency: recording.frequency,
        seconds: elapsed,
        stopped_early: sampled.stopped
            || sampled.truncated
            || elapsed + 0.5 < duration.as_secs_f64(),
        truncated: sampled.truncated,
        slice: out,
    })
}

/// What the recorder gave back.
struct Sampled {
    recording: recorder::Recording,
    windows: Vec<recorder::ClosedWindow>,
    /// Stopped before its duration (DELETE, shutdown).
    stopped: bool,
    /// Stopped at the byte budget.
    truncated: bool,
}

/// How often a recording's samples are closed into a window, whose size counts against the
/// recording's byte budget.
const WINDOW: Duration = Duration::from_secs(1);

/// Bytes a window holds (its stacks, frames, threads and files), as counted against the
/// budget.
fn window_bytes(w: &profile::NormalizedWindow) -> u64 {
    let names: usize = w
        .threads
        .iter()
        .map(|t| t.comm.as_ref().map_or(0, String::len) + 64)
        .sum();
    (std::mem::size_of_val(&w.frames[..])
        + std::mem::size_of_val(&w.stacks[..])
        + std::mem::size_of_val(&w.files[..])
        + std::mem::size_of_val(&w.threads[..])
        + names) as u64
}

/// Sample with `options` until the duration ends, `stop`, or the windows closed hold more
/// than `max_bytes`; an error unless the process the pidfd names was alive once its events
/// were open.
fn sample(
    options: &recorder::RecordOptions,
    symbolizer: &recorder::Symbolizer,
    pidfd: &OwnedFd,
    sampling: &AtomicBool,
    stop: tokio::sync::oneshot::Receiver<()>,
    max_bytes: u64,
) -> Result<Sampled, String> {
    let mut options = options.clone();
    options.window = Some(WINDOW);
    let options = &options;
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
    let over_budget = tokio::sync::Notify::new();
    let truncated = AtomicBool::new(false);
    let mut bytes = 0u64;
    let mut on_window = |w: recorder::ClosedWindow| {
        if truncated.load(Ordering::Relaxed) {
            return;
        }
        bytes += window_bytes(&w.window);
        windows.push(w);
        if bytes > max_bytes {
            truncated.store(true, Ordering::Relaxed);
            over_budget.notify_one();
        }
    };
    let recording = runtime.block_on(async {
        let stop = async {
            tokio::select! {
                _ = stop => stopped.store(true, Ordering::Relaxed),
                _ = over_budget.notified() => {}
            }
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
        truncated: truncated.load(Ordering::Relaxed),
    })
}

/// Add the stacks of `slice` that `filter` and `visibility` admit to `out` (kernel frames
/// removed unless everything is visible; an off-CPU stack keeps its innermost frame, which
/// names the wait kind, after them); `names` are `out`'s names by text, so that each is kept
/// once however many windows hold it. Returns the samples `filter` selects that
/// `visibility` hides.
fn append(
    out: &mut Slice,
    names: &mut HashMap<String, u32>,
    slice: Slice,
    filter: &Filter,
    visibility: Visibility,
) -> u64 {
    let local = slice.names;
    let mut kept = Vec::new();
    let mut hidden = 0;
    for mut s in slice.stacks {
        if !filter.admits(&s, visibility) {
            if filter.admits(&s, Visibility::All) {
                hidden += s.count;
            }
            continue;
        }
        hide_kernel_frames(&mut s, &local, visibility);
        // Seconds of its window: the recording is one profile.
        s.seconds = Default::default();
        kept.push(s);
    }
    let mut intern = |n: String| {
        *names.entry(n).or_insert_with_key(|n| {
            out.names.push(n.clone());
            out.names.len() as u32 - 1
        })
    };
    let mut remap: Vec<u32> = local.into_iter().map(&mut intern).collect();
    // A frame with no name (never made by the namer) reads as such.
    remap.push(intern("[unknown]".to_string()));
    let unknown = remap[remap.len() - 1];
    for mut s in kept {
        for f in s.frames.iter_mut() {
            *f = remap.get(*f as usize).copied().unwrap_or(unknown);
        }
        out.stacks.push(s);
    }
    hidden
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slice::SliceStack;

    /// Stacks of the recorded process the requester may not see (its owner unknown: a set-uid
    /// program) are counted as hidden, not kept; another process's are neither.
    #[test]
    fn what_the_requester_may_not_see_is_counted_apart() {
        let stack = |pid: u32, uid: Option<u32>, count: u64| SliceStack {
            frames: vec![0],
            pid,
            tid: pid,
            uid,
            count,
            cpu_ns: count * 1_000_000,
            ..SliceStack::default()
        };
        let slice = Slice {
            names: vec!["main".into()],
            stacks: vec![
                stack(10, Some(1000), 5),
                stack(10, Some(procmap::UNKNOWN_UID), 7),
                stack(10, None, 2),
                stack(11, Some(0), 100),
            ],
            ..Slice::default()
        };
        let filter = Filter {
            pid: Some(10),
            ..Filter::default()
        };
        let mut out = Slice::default();
        let hidden = append(
            &mut out,
            &mut HashMap::new(),
            slice.clone(),
            &filter,
            Visibility::OwnOnly(1000),
        );
        assert_eq!((out.samples(), hidden), (5, 9));
        let mut all = Slice::default();
        let hidden = append(
            &mut all,
            &mut HashMap::new(),
            slice,
            &filter,
            Visibility::All,
        );
        assert_eq!((all.samples(), hidden), (14, 0));
    }
}
