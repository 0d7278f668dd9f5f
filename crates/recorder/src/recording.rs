//! Running one recording until it is told to stop.

use std::future::Future;
use std::time::{Duration, Instant};

use procmap::ProcessTable;
use profile::RawStacks;
use sampler::{drain_until, EventKind, Sampler, SamplerConfig, StackCapture, Target};
use tracing::{debug, info, warn};
use unwind::Unwinders;

use crate::error::RecordError;
use crate::launch::Launched;
use crate::options::{CallGraph, RecordOptions, RecordTarget};
use crate::preload::Preloader;
use crate::sink::Collector;
use procmap::PinnedFiles;

/// A live view of a running recording, for progress displays.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Time since sampling started.
    pub elapsed: Duration,
    /// Samples so far.
    pub samples: u64,
    /// Samples the kernel dropped so far.
    pub lost: u64,
}

/// Counters of a recording.
#[derive(Clone, Debug, Default)]
pub struct RecordingStats {
    /// Samples read.
    pub samples: u64,
    /// Records the kernel dropped because a ring buffer was full.
    pub lost: u64,
    /// Times the kernel throttled sampling (too many interrupts).
    pub throttled: u64,
    /// Records too short for their type (skipped).
    pub malformed_records: u64,
    /// Ring-buffer batches cut short by a malformed header (skipped).
    pub malformed_batches: u64,
    /// Times the ring buffers were drained (wake-ups by watermark, side-band record or tick).
    pub drain_rounds: u64,
}

/// The raw result of a recording, before symbolization.
pub struct Recording {
    /// Sample counts per distinct thread and callchain.
    pub stacks: RawStacks,
    /// Processes, threads and mappings seen.
    pub processes: ProcessTable,
    /// Counters.
    pub stats: RecordingStats,
    /// The event sampled on.
    pub event: EventKind,
    /// The frequency in effect.
    pub frequency: u64,
    /// Whether kernel frames were collected.
    pub kernel_included: bool,
    /// Kernel symbols, read from /proc/kallsyms in the background while recording.
    pub kernel_symbols: Option<std::thread::JoinHandle<Option<symbolize::KernelSymbols>>>,
    /// How long sampling ran.
    pub duration: Duration,
    /// Things the user should know (event fallback, frequency cap, kernel excluded).
    pub notes: Vec<String>,
    /// Exit status of the profiled command, if one was run and it exited.
    pub command_status: Option<std::process::ExitStatus>,
    /// How user stacks were walked.
    pub call_graph: CallGraph,
    /// Binaries held open since their mapping was seen.
    pub pinned: PinnedFiles,
    /// Symbolizers being opened in the background (joined by `resolve`).
    pub(crate) preloader: Option<Preloader>,
    /// Frames of earlier runs; `resolve` adds this run's and saves it.
    pub(crate) frame_cache: symbolize::FrameCache,
    /// This process's CPU time when the events were enabled and when sampling ended.
    pub cpu_marks: CpuMarks,
}

/// This process's CPU time (all threads) at the phase boundaries of a recording, for `-vv`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuMarks {
    /// When the events were open, mapped and enabled (the command started, if one was run).
    pub events_enabled: Duration,
    /// When sampling ended and the events were closed.
    pub sampling_ended: Duration,
    /// Of the CPU time between the two, what the thread draining the rings used (the rest is
    /// background work: reading kernel symbols, opening symbolizers).
    pub drain_thread: Duration,
}

/// Record until `stop` resolves, the duration elapses, or the profiled command exits.
/// `progress` is called after every drain round.
pub async fn record(
    options: &RecordOptions,
    stop: impl Future<Output = ()>,
    progress: &mut dyn FnMut(Progress),
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
        (RecordTarget::Command(_), Some(child)) => Target::Process {
            pid: child.pid(),
            enable_on_exec: true,
        },
        (RecordTarget::Command(_), None) => return Err(RecordError::EmptyCommand),
    };
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
        event: options.event,
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
    let kernel_symbols = sampler
        .info()
        .kernel_included
        .then(|| {
            std::thread::Builder::new()
                .name("kallsyms".into())
                .spawn(crate::resolve::load_kernel_symbols)
                .ok()
        })
        .flatten();
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

    let mut collector = Collector {
        stacks: RawStacks::new(),
        processes,
        stats: RecordingStats::default(),
        progress,
        started,
        last_progress: Duration::ZERO,
        format: sampler.info().format,
        unwinders: (options.call_graph != CallGraph::Fp).then(|| unwinders(options)),
        splice: options.call_graph == CallGraph::Auto,
        unwound: Vec::with_capacity(unwind::MAX_FRAMES),
        fp_user: Vec::with_capacity(256),
        chain: Vec::with_capacity(unwind::MAX_FRAMES + 256),
        preloader: options.preload_symbols.clone().map(Preloader::start),
        frame_cache: symbolize::FrameCache::new(options.frame_cache_dir.clone()),
        pinned: PinnedFiles::new(
            (crate::sys::raise_open_file_limit() as usize).saturating_sub(256),
        ),
    };
    let info = sampler.info().clone();
    for note in &info.notes {
        info!("{note}");
    }
    let duration = options.duration;
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
            }
        };
        drain_until(
            &mut sampler,
            stop_all,
            options.drain_interval,
            &mut collector,
        )
        .await?;
        status
    };
    let elapsed = started.elapsed();
    if let Some(child) = &mut launched {
        if command_status.is_none() {
            child.terminate();
        }
    }
    drop(sampler);
    let cpu_marks = CpuMarks {
        events_enabled,
        sampling_ended: crate::ProcessUsage::now().cpu(),
        drain_thread: crate::ProcessUsage::this_thread()
            .cpu()
            .saturating_sub(drain_thread_started),
    };
    debug!(unique_stacks = collector.stacks.len(), "recording finished");
    Ok(Recording {
        stacks: collector.stacks,
        processes: collector.processes,
        stats: collector.stats,
        event: info.event,
        frequency: info.frequency,
        kernel_included: info.kernel_included,
        kernel_symbols,
        duration: elapsed,
        notes: info.notes,
        command_status,
        call_graph: options.call_graph,
        pinned: collector.pinned,
        preloader: collector.preloader,
        frame_cache: collector.frame_cache,
        cpu_marks,
    })
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
/// and debuginfod's cache (no download on the sampling path).
fn unwinders(options: &RecordOptions) -> Unwinders {
    let mut unwinders = Unwinders::new();
    match crate::user_symbols::own_vdso() {
        Ok(image) => unwinders.set_vdso_image(&image),
        Err(err) => {
            tracing::debug!(%err, "cannot read the vDSO image; its frames unwind by frame pointer only")
        }
    }
    let search = options
        .preload_symbols
        .clone()
        .unwrap_or_else(symbolize::DebugSearch::system);
    let debuginfod = debuginfod::DebuginfodConfig::from_env().map(debuginfod::Client::new);
    unwinders.set_debug_file_finder(Box::new(move |binary: &std::path::Path| {
        let symbolizer = symbolize::FileSymbolizer::open(binary, None, &search).ok()?;
        if let Some(found) = symbolizer.debug_file() {
            return Some(found.to_path_buf());
        }
        let build_id = symbolizer.elf().build_id()?;
        debuginfod
            .as_ref()?
            .cached(build_id, debuginfod::Artifact::DebugInfo)
    }));
    unwinders
}
