//! Running one recording until it is told to stop.

use std::future::Future;
use std::time::{Duration, Instant};

use procmap::ProcessTable;
use sampler::{
    drain_until_woken, DrainEnd, EventChoice, EventKind, RecordSink, Sampler, SamplerConfig,
    SidebandWakeup, StackCapture, SwitchSampling, Target,
};
use tracing::{debug, info, warn};
use unwind::{StackBuilder, Unwinders};

use crate::error::RecordError;
use crate::launch::Launched;
use crate::offcpu::{Keep, OffCpu};
use crate::options::{defaults, CallGraph, Measure, RecordOptions, RecordTarget};
use crate::preload::Preloader;
use crate::rate::SamplePeriods;
use crate::report::{ClosedWindow, CpuMarks, Progress, RecordingStats};
use crate::resolve::SymbolFeed;
use crate::sink::Collector;
use crate::windows::Windows;
use procmap::PinnedFiles;

/// What a recording did; its samples went to the window callback.
pub struct Recording {
    /// Counters.
    pub stats: RecordingStats,
    /// The event sampled on.
    pub event: EventKind,
    /// The frequency in effect.
    pub frequency: u64,
    /// Whether kernel frames were collected.
    pub kernel_included: bool,
    /// How long sampling ran.
    pub duration: Duration,
    /// Things the user should know (event fallback, frequency cap, kernel excluded).
    pub notes: Vec<String>,
    /// Exit status of the profiled command, if one was run and it exited.
    pub command_status: Option<std::process::ExitStatus>,
    /// How user stacks were walked.
    pub call_graph: CallGraph,
    /// Bytes of user stack copied with each sample (for DWARF unwinding; unused with
    /// [`CallGraph::Fp`]).
    pub stack_bytes: u32,
    /// This process's CPU time when the events were enabled and when sampling ended.
    pub cpu_marks: CpuMarks,
    /// What time was measured.
    pub measure: Measure,
}

/// Record until `stop` resolves, the duration elapses, or the profiled command exits.
///
/// Samples are counted in time windows of `options.window` (one window for the whole
/// recording when None); each window is handed to `on_window`, normalized, as soon as it has
/// closed (the last ones when the recording ends). `feed`, from the [`crate::Symbolizer`]
/// that will name the windows, receives symbolizers opened ahead while recording and the
/// kernel symbols. `progress` is called after drain rounds, at most every 100 ms.
pub async fn record(
    options: &RecordOptions,
    feed: Option<&SymbolFeed>,
    stop: impl Future<Output = ()>,
    progress: &mut dyn FnMut(Progress),
    on_window: &mut dyn FnMut(ClosedWindow),
) -> Result<Recording, RecordError> {
    let mut launched = match &options.target {
        RecordTarget::Command(argv) => Some(Launched::spawn(argv)?),
        _ => None,
    };
    let target = match (&options.target, &launched) {
        (RecordTarget::System, _) => Target::System,
        (RecordTarget::Pid(pid), _) => Target::Process {
            pid: *pid,
            enable_on_exec: false,
        },
        (RecordTarget::PidAtExec(pid), _) => Target::Process {
            pid: *pid,
            enable_on_exec: true,
        },
        (RecordTarget::Command(_), Some(child)) => Target::Process {
            pid: child.pid(),
            enable_on_exec: true,
        },
        (RecordTarget::Command(_), None) => return Err(RecordError::EmptyCommand),
    };
    let measure = options.measure;
    let config = SamplerConfig {
        frequency: options.frequency,
        ring_pages: options.ring_pages,
        wakeup_percent: match options.call_graph {
            CallGraph::Fp => sampler::defaults::WAKEUP_PERCENT,
            CallGraph::Dwarf | CallGraph::Auto => crate::defaults::wakeup_percent_with_stacks(
                options.ring_pages,
                options.frequency,
                options.stack_bytes,
            ),
        },
        include_kernel: options.include_kernel,
        // Wall-clock time adds CPU samples' periods to times off CPU: they must be ns (and
        // an off-CPU recording opens no CPU event: nothing to probe).
        event: match measure {
            Measure::Cpu => options.event,
            Measure::OffCpu | Measure::Wall => EventChoice::Force(EventKind::CpuClock),
        },
        switches: measure.samples_switches().then_some(SwitchSampling {
            period: 1,
            cpu_samples: measure == Measure::Wall,
        }),
        sideband_wakeup: if options.window.is_some() {
            // Streaming (a long recording of windows): the side-band ring is read at the
            // drain tick, and wakes the reader only when three quarters full, not at every
            // record (several wake-ups per process under an exec churn); records then wait
            // up to a drain interval, and binaries of processes gone by then are pinned by
            // path once their identity matches.
            SidebandWakeup::Bytes(defaults::SIDEBAND_WATERMARK)
        } else {
            SidebandWakeup::EveryRecord
        },
        // Streaming: the kernel wakes the reader at every three quarters of the ring's worth
        // of side-band bytes written (drained or not): a larger ring, fewer wake-ups.
        sideband_ring_pages: if options.window.is_some() {
            defaults::SIDEBAND_RING_PAGES_STREAMING
        } else {
            sampler::defaults::SIDEBAND_RING_PAGES
        },
        stack_capture: match options.call_graph {
            CallGraph::Fp => None,
            CallGraph::Dwarf => Some(StackCapture {
                stack_bytes: options.stack_bytes,
                keep_fp_callchain: false,
            }),
            CallGraph::Auto => Some(StackCapture {
                stack_bytes: options.stack_bytes,
                keep_fp_callchain: true,
            }),
        },
        ..SamplerConfig::new(target.clone())
    };
    // On failure, dropping `launched` kills the held child.
    let mut sampler = Sampler::open(&config)?;
    sampler.enable()?;
    let started = Instant::now();
    let events_enabled = crate::ProcessUsage::now().cpu();
    let drain_thread_started = crate::ProcessUsage::this_thread().cpu();
    // Reading kallsyms takes tens of milliseconds of kernel time: do it while sampling.
    if let (true, Some(feed)) = (sampler.info().kernel_included, feed) {
        feed.load_kernel_symbols();
    }
    let mut processes = ProcessTable::new();
    // Processes alive before the events were enabled: read their state now, so nothing falls
    // into a gap (records from now on are in the ring buffers).
    match target {
        Target::System => {
            let n = processes.synthesize_all();
            debug!(processes = n, "read running processes from /proc");
        }
        Target::Process {
            pid,
            enable_on_exec: false,
        } => {
            if let Err(err) = processes.synthesize(pid) {
                warn!(pid, %err, "could not read the process from /proc");
            }
        }
        Target::Process { .. } => {}
    }
    if let Some(child) = &mut launched {
        child.release()?;
    }

    let switch_cap = match options.switch_cap {
        0 => u64::MAX,
        cap => cap,
    };
    let mut stacks = match options.call_graph {
        CallGraph::Fp => StackBuilder::frame_pointers(),
        CallGraph::Dwarf => StackBuilder::dwarf(unwinders(options), false),
        CallGraph::Auto => StackBuilder::dwarf(unwinders(options), true),
    };
    // A running process's binaries are read while the first samples come in, not after.
    if let (
        Target::Process {
            pid,
            enable_on_exec: false,
        },
        Some(unwinders),
    ) = (&target, stacks.unwinders_mut())
    {
        unwinders.prepare(&processes, *pid);
    }
    let window_ns = options
        .window
        .map(|w| w.as_nanos().min(u64::MAX as u128) as u64);
    let mut collector = Collector {
        windows: Windows::new(window_ns, crate::sys::monotonic_ns()),
        processes,
        stats: RecordingStats::default(),
        progress,
        on_window,
        // A ring is read at least every drain interval; records are late by at most that
        // (plus the time to drain every ring once).
        close_grace: (options.drain_interval * 2 + Duration::from_millis(100)).as_nanos() as u64,
        started,
        last_progress: Duration::ZERO,
        round_started: None,
        format: sampler.info().format,
        stacks,
        released_files: Vec::new(),
        ended_processes: Vec::new(),
        contexts: Default::default(),
        follow_cpus: matches!(target, Target::System),
        last_cpu_check: Duration::ZERO,
        cpus_changed: false,
        preloader: match (&options.preload_symbols, feed) {
            (Some(_), Some(feed)) => Some(Preloader::start(feed.preloaded.clone())),
            _ => None,
        },
        frame_cache: symbolize::FrameCache::new(options.frame_cache_dir.clone()),
        pinned: PinnedFiles::new(
            (crate::sys::raise_open_file_limit() as usize).saturating_sub(256),
        ),
        frequency_control: options.frequency_control.clone(),
        frequency: sampler.info().frequency,
        periods: SamplePeriods::default(),
        off_cpu: match measure {
            Measure::Cpu => None,
            Measure::OffCpu => Some(OffCpu::new(Keep::Blocked, switch_cap)),
            Measure::Wall => Some(OffCpu::new(Keep::AllOffCpu, switch_cap)),
        },
        on_cpu: measure != Measure::OffCpu,
        snapshots: options.snapshots.clone(),
        round_started_ns: None,
    };
    if let Some(control) = &options.frequency_control {
        control.set_in_effect(sampler.info().frequency);
    }
    let info = sampler.info().clone();
    for note in &info.notes {
        info!("{note}");
    }
    let duration = options.duration;
    let target_pid = match &options.target {
        RecordTarget::Pid(pid) | RecordTarget::PidAtExec(pid) => Some(*pid),
        _ => None,
    };
    let child_exit = async {
        match &mut launched {
            Some(child) => child.wait().await,
            None => std::future::pending().await,
        }
    };
    let command_status = {
        let mut status = None;
        let stop_all = async {
            tokio::select! {
                () = stop => {}
                () = sleep_or_forever(duration) => {}
                s = child_exit => status = s,
                () = process_gone(target_pid) => {
                    info!("the recorded process exited; recording ends");
                }
            }
        };
        drain_following_cpus(
            &mut sampler,
            stop_all,
            options.drain_interval,
            &mut collector,
        )
        .await?;
        status
    };
    let elapsed = started.elapsed();
    let frequency = sampler.info().frequency;
    if let Some(child) = &mut launched {
        if command_status.is_none() {
            child.terminate();
        }
    }
    // Samples the kernel dropped that no LOST record reported (a ring full at the very end).
    collector.stats.lost = collector.stats.lost.max(sampler.kernel_lost());
    let switches_lost = sampler.switches_lost();
    // Threads still off CPU now were so until the end.
    collector.close_off_cpu(crate::sys::monotonic_ns());
    collector.stats.switches.lost = collector.stats.switches.lost.max(switches_lost);
    drop(sampler);
    let cpu_marks = CpuMarks {
        events_enabled,
        sampling_ended: crate::ProcessUsage::now().cpu(),
        drain_thread: crate::ProcessUsage::this_thread()
            .cpu()
            .saturating_sub(drain_thread_started),
    };
    collector.close_all();
    debug!(windows = collector.stats.windows, "recording finished");
    Ok(Recording {
        stats: collector.stats,
        event: info.event,
        frequency,
        kernel_included: info.kernel_included,
        duration: elapsed,
        notes: info.notes,
        command_status,
        call_graph: options.call_graph,
        stack_bytes: options.stack_bytes,
        cpu_marks,
        measure,
    })
}

/// Drain until `stop`; when the online CPUs changed (whole system), the loop pauses, their
/// events are opened or closed, and draining goes on; likewise when a new frequency was asked
/// through [`crate::FrequencyControl`].
async fn drain_following_cpus(
    sampler: &mut Sampler,
    stop: impl Future<Output = ()>,
    tick: Duration,
    collector: &mut Collector<'_>,
) -> Result<(), RecordError> {
    tokio::pin!(stop);
    let snapshots = collector.snapshots.clone();
    if let Some(control) = &snapshots {
        control.set_running(true);
    }
    let wake = snapshots.as_ref().map(|c| c.waker());
    let result = drain_rounds(sampler, &mut stop, tick, wake, collector).await;
    if let Some(control) = &snapshots {
        control.set_running(false);
    }
    result
}

/// The drain loop of [`drain_following_cpus`].
async fn drain_rounds(
    sampler: &mut Sampler,
    mut stop: impl Future<Output = ()> + Unpin,
    tick: Duration,
    wake: Option<&tokio::sync::Notify>,
    collector: &mut Collector<'_>,
) -> Result<(), RecordError> {
    while drain_until_woken(sampler, &mut stop, tick, wake, collector).await? == DrainEnd::Paused {
        if collector.cpus_changed {
            match sampler.reopen_missing_cpus(&mut |r| collector.on_record(r)) {
                Ok(change) => {
                    info!(opened = ?change.opened, closed = ?change.closed, "online CPUs changed")
                }
                Err(err) => warn!(%err, "cannot follow the CPUs that came online"),
            }
            collector.cpus_changed = false;
        }
        let requested = collector.frequency_control.as_ref().and_then(|c| c.take());
        if let Some(hz) = requested {
            change_frequency(sampler, collector, hz);
        }
        let period = collector
            .off_cpu
            .as_mut()
            .and_then(|o| o.take_period_change());
        if let Some(period) = period {
            match sampler.set_switch_period(period) {
                Ok(()) => debug!(period, "switch sampling period changed"),
                Err(err) => warn!(%err, period, "cannot change the switch sampling period"),
            }
        }
    }
    Ok(())
}

/// Make the events sample at `hz` (the rings were just drained: samples taken before the
/// change are weighted with the old period, those after with the new).
fn change_frequency(sampler: &mut Sampler, collector: &mut Collector<'_>, hz: u64) {
    let from = sampler.info().frequency;
    match sampler.set_frequency(hz) {
        Ok(frequency) => {
            let at = crate::sys::monotonic_ns();
            collector
                .periods
                .changed(sampler.info().event, frequency, at);
            collector.frequency = frequency;
            debug!(from, to = frequency, "sampling frequency changed");
        }
        Err(err) => warn!(%err, hz, "cannot change the sampling frequency"),
    }
    if let Some(control) = &collector.frequency_control {
        control.set_in_effect(sampler.info().frequency);
    }
}

/// Resolves once process `pid` has exited (gone, a zombie, or its pid reused: its start time
/// changed), checked every 250 ms; never for None.
async fn process_gone(pid: Option<u32>) {
    let Some(pid) = pid else {
        return std::future::pending().await;
    };
    // (state, start time) from /proc/PID/stat; the name before them may hold spaces.
    let read = || -> Option<(char, u64)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut fields = rest.split_whitespace();
        let state = fields.next()?.chars().next()?;
        let start = fields.nth(18)?.parse().ok()?;
        Some((state, start))
    };
    let Some((_, started)) = read() else {
        return;
    };
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        match read() {
            Some((state, start)) if start == started && !matches!(state, 'Z' | 'X') => {}
            _ => return,
        }
    }
}

async fn sleep_or_forever(duration: Option<Duration>) {
    match duration {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// DWARF unwinders that know the vDSO's call-frame information (read from this process's own
/// vDSO: the kernel maps the same image into every process) and find separate debug files the
/// way symbols are found: build-id and debuglink in the system and `--debug-dir` directories,
/// and debuginfod's cache (no download). Binaries and debug files are read on the unwinders'
/// loader thread, never on the thread that drains the rings.
fn unwinders(options: &RecordOptions) -> Unwinders {
    let mut unwinders = Unwinders::new();
    match symbolize::own_vdso_image() {
        Ok(image) => unwinders.set_vdso_image(&image),
        Err(err) => {
            tracing::debug!(%err, "cannot read the vDSO image; its frames unwind by frame pointer only")
        }
    }
    let search = options
        .preload_symbols
        .clone()
        .unwrap_or_else(symbolize::DebugSearch::system);
    let debuginfod = options.debuginfod.clone().map(debuginfod::Client::new);
    // A debug file found beside another user's binary is read again with that user's access.
    unwinders.set_debug_file_finder(Box::new(move |binary: &std::path::Path, access| {
        let symbolizer =
            symbolize::FileSymbolizer::open_as(binary, binary, None, &search, access).ok()?;
        if let Some((found, reader)) = symbolizer.debug_file_access() {
            return Some((found.to_path_buf(), reader.clone()));
        }
        let build_id = symbolizer.elf().build_id()?;
        let cached = debuginfod
            .as_ref()?
            .cached(build_id, debuginfod::Artifact::DebugInfo)?;
        Some((cached, procmap::Access::Own))
    }));
    unwinders
}
