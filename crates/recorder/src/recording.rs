//! Running one recording until it is told to stop, in steps: launch the command and open the
//! events ([`record`]), read the processes already running, set up the drain loop's state
//! ([`start_collector`]), drain until the recording ends ([`drain`]), and count what was lost
//! and close the last windows ([`finish`]).

use std::future::Future;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use procmap::{PinnedFiles, ProcessTable};
use sampler::{EventKind, Sampler, Target};
use tracing::{debug, info, warn};

use crate::drain_loop::drain_following_cpus;
use crate::error::RecordError;
use crate::launch::Launched;
use crate::offcpu::{Keep, OffCpu};
use crate::options::{CallGraph, Measure, RecordOptions, RecordTarget};
use crate::preload::Preloader;
use crate::rate::SamplePeriods;
use crate::report::{ClosedWindow, CpuMarks, Progress, RecordingStats};
use crate::resolve::SymbolFeed;
use crate::sampler_config::{sampler_config, sampler_target};
use crate::sink::Collector;
use crate::stop::recording_ends;
use crate::unwinders::stack_builder;
use crate::windows::Windows;

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
    let target = sampler_target(&options.target, launched.as_ref())?;
    // On failure, dropping `launched` kills the held child.
    let mut sampler = Sampler::open(&sampler_config(options, target.clone()))?;
    sampler.enable()?;
    let marks = StartMarks::now();
    // Reading kallsyms takes tens of milliseconds of kernel time: do it while sampling.
    if let (true, Some(feed)) = (sampler.info().kernel_included, feed) {
        feed.load_kernel_symbols();
    }
    let processes = read_running_processes(&target);
    if let Some(child) = &mut launched {
        child.release()?;
    }
    let mut collector = start_collector(Start {
        options,
        feed,
        target: &target,
        processes,
        sampler: &sampler,
        started: marks.started,
        progress,
        on_window,
    });
    if let Some(control) = &options.frequency_control {
        control.set_in_effect(sampler.info().frequency);
    }
    for note in &sampler.info().notes {
        info!("{note}");
    }
    let command_status = drain(&mut sampler, &mut collector, options, stop, &mut launched).await?;
    Ok(finish(
        sampler,
        collector,
        launched.as_mut(),
        command_status,
        options,
        &marks,
    ))
}

/// What was measured when the events were enabled.
struct StartMarks {
    started: Instant,
    /// This process's CPU time then.
    events_enabled: Duration,
    /// This thread's (the drain thread's) CPU time then.
    drain_thread: Duration,
}

impl StartMarks {
    fn now() -> StartMarks {
        StartMarks {
            started: Instant::now(),
            events_enabled: crate::ProcessUsage::now().cpu(),
            drain_thread: crate::ProcessUsage::this_thread().cpu(),
        }
    }
}

/// The process table, with the processes alive before the events were enabled read from
/// /proc now, so nothing falls into a gap (records from now on are in the ring buffers).
fn read_running_processes(target: &Target) -> ProcessTable {
    let mut processes = ProcessTable::new();
    match *target {
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
    processes
}

/// What the drain loop's state is made from (see [`start_collector`]).
struct Start<'a, 'p> {
    options: &'a RecordOptions,
    feed: Option<&'a SymbolFeed>,
    target: &'a Target,
    processes: ProcessTable,
    sampler: &'a Sampler,
    started: Instant,
    progress: &'p mut dyn FnMut(Progress),
    on_window: &'p mut dyn FnMut(ClosedWindow),
}

/// The drain loop's state at the start: no window open, the stack builder for the call-graph
/// mode (a running process's binaries read while the first samples come in, not after), the
/// symbolizers' preloader, the files pinned, and the off-CPU intervals the measure needs.
fn start_collector<'p>(start: Start<'_, 'p>) -> Collector<'p> {
    let Start {
        options,
        feed,
        target,
        processes,
        sampler,
        started,
        progress,
        on_window,
    } = start;
    let switch_cap = match options.switch_cap {
        0 => u64::MAX,
        cap => cap,
    };
    let mut stacks = stack_builder(options);
    if let (
        Target::Process {
            pid,
            enable_on_exec: false,
        },
        Some(unwinders),
    ) = (target, stacks.unwinders_mut())
    {
        unwinders.prepare(&processes, *pid);
    }
    let window_ns = options
        .window
        .map(|w| w.as_nanos().min(u64::MAX as u128) as u64);
    Collector {
        windows: Windows::new(window_ns, crate::sys::monotonic_ns()),
        processes,
        stats: RecordingStats::default(),
        progress,
        on_window,
        // A window closes at the end of the first round that began after its end (every ring
        // is read in a round), and at the latest this long after its end: a ring is read at
        // least every drain interval (the longer one at rest).
        close_grace: ((options.drain_interval * 2)
            .max(options.drain_interval_at_rest.unwrap_or_default())
            + Duration::from_millis(100))
        .as_nanos() as u64,
        round_begun_ns: 0,
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
        frequency_change: None,
        periods: SamplePeriods::default(),
        off_cpu: match options.measure {
            Measure::Cpu => None,
            Measure::OffCpu => Some(OffCpu::new(Keep::Blocked, switch_cap)),
            Measure::Wall => Some(OffCpu::new(Keep::AllOffCpu, switch_cap)),
        },
        on_cpu: options.measure != Measure::OffCpu,
        snapshots: options.snapshots.clone(),
        round_started_ns: None,
        rest_tick: options
            .drain_interval_at_rest
            .map(|interval| crate::rest_tick::RestTick {
                interval,
                ring_pages: sampler.info().ring_pages,
                watermark_bytes: sampler.info().wakeup_watermark,
                stack_bytes: if sampler.info().format.user_stack {
                    options.stack_bytes
                } else {
                    0
                },
            }),
        sideband_in_round: false,
        last_reach: 0,
    }
}

/// Drain until `stop` resolves, the duration elapses, the launched command exits (its exit
/// status is returned) or the recorded process is gone.
async fn drain(
    sampler: &mut Sampler,
    collector: &mut Collector<'_>,
    options: &RecordOptions,
    stop: impl Future<Output = ()>,
    launched: &mut Option<Launched>,
) -> Result<Option<ExitStatus>, RecordError> {
    let target_pid = match &options.target {
        RecordTarget::Pid(pid) | RecordTarget::PidAtExec(pid) => Some(*pid),
        _ => None,
    };
    let mut status = None;
    let stop_all = async {
        status = recording_ends(stop, options.duration, launched.as_mut(), target_pid).await;
    };
    drain_following_cpus(sampler, stop_all, options.drain_interval, collector).await?;
    Ok(status)
}

/// End the recording: stop the command if it still runs, count the samples and switches the
/// kernel lost, close the events, end the off-CPU intervals still open, and close every
/// window left.
fn finish(
    sampler: Sampler,
    mut collector: Collector<'_>,
    launched: Option<&mut Launched>,
    command_status: Option<ExitStatus>,
    options: &RecordOptions,
    marks: &StartMarks,
) -> Recording {
    let elapsed = marks.started.elapsed();
    let info = sampler.info().clone();
    if let Some(child) = launched {
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
        events_enabled: marks.events_enabled,
        sampling_ended: crate::ProcessUsage::now().cpu(),
        drain_thread: crate::ProcessUsage::this_thread()
            .cpu()
            .saturating_sub(marks.drain_thread),
    };
    collector.close_all();
    debug!(windows = collector.stats.windows, "recording finished");
    Recording {
        stats: collector.stats,
        event: info.event,
        frequency: info.frequency,
        kernel_included: info.kernel_included,
        duration: elapsed,
        notes: info.notes,
        command_status,
        call_graph: options.call_graph,
        stack_bytes: options.stack_bytes,
        cpu_marks,
        measure: options.measure,
    }
}
