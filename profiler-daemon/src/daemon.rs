//! The daemon's threads: sampling (the recorder's drain loop, closing a slice every
//! `sampling.slice`), naming (a long-lived symbol service naming each closed slice and the
//! store writing it), and what they share with the API (counters, the store).
//!
//! The drain never waits: closed slices go to the naming thread through a bounded queue
//! (`sampling.naming_queue`); when it is full the slice is dropped, logged and counted (what
//! it says about released files and ended processes is carried to the next one, so that the
//! symbol service still lets them go). The API only reads counters and the store.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use profile::FrameId;
use recorder::{ClosedWindow, RecordOptions, RecordTarget, Symbolizer};
use sampler::EventKind;
use symbolize::service::NamedStack;
use tracing::{info, warn};

use crate::config::Config;
use crate::slice::{Slice, SliceStack};
use crate::store::Store;

/// Slices kept in memory while the disk refuses them (full): past this, the oldest is dropped.
const UNWRITTEN_KEPT: usize = 64;

/// Windows named between two saves of the frame cache.
const SAVE_CACHES_EVERY: u64 = 360;

/// What the threads and the API share.
pub struct Shared {
    /// The configuration the daemon started with: keys that need a restart are read here.
    /// Keys that a reload changes live are read from [`Shared::live`].
    pub config: Config,
    /// The configuration in effect (replaced on SIGHUP).
    pub live: crate::reload::LiveConfig,
    /// The history.
    pub store: Arc<Store>,
    /// The event sampled on.
    pub event: EventKind,
    /// CPUs sampled (online at start).
    pub cpus: usize,
    /// Changes the sampling frequency while sampling; tells the frequency in effect.
    pub rate: recorder::FrequencyControl,
    /// The overhead budget's state.
    pub budget: crate::budget::BudgetState,
    /// When the daemon started, UNIX ns.
    pub started_ns: u64,
    /// Samples read.
    pub samples: AtomicU64,
    /// Samples the kernel dropped.
    pub lost: AtomicU64,
    /// Slices named.
    pub slices_named: AtomicU64,
    /// Slices dropped because naming fell behind.
    pub slices_dropped: AtomicU64,
    /// Slices waiting to be named.
    pub naming_backlog: AtomicU64,
    /// Slices waiting to be written (the disk refused them).
    pub unwritten: AtomicU64,
    /// The recorder's process model at the last closed slice.
    pub tracked: Mutex<recorder::Tracked>,
    /// The symbol service's sizes at the last named slice.
    pub symbols: Mutex<symbolize::service::ServiceSizes>,
    /// Monotonic ns of the drain loop's last progress (0: not started).
    pub heartbeat_ns: AtomicU64,
    /// Whether sampling ended (on stop or error).
    pub sampling_ended: AtomicBool,
}

impl Shared {
    /// Samples per second per CPU in effect now (the budget or a reload may change it).
    pub fn frequency(&self) -> u64 {
        match self.rate.in_effect() {
            0 => self.budget.target_frequency(),
            hz => hz,
        }
    }

    /// The configuration in effect now.
    pub fn live(&self) -> Arc<Config> {
        self.live.get()
    }

    /// Replace the configuration in effect (on reload).
    pub fn set_live(&self, config: Config) {
        self.live.set(config);
    }

    /// Whether the drain loop reported within `within`.
    pub fn drain_alive(&self, within: Duration) -> bool {
        let beat = self.heartbeat_ns.load(Ordering::Relaxed);
        beat != 0
            && !self.sampling_ended.load(Ordering::Relaxed)
            && sampler::now_ns().saturating_sub(beat) < within.as_nanos() as u64
    }
}

/// UNIX time now, in ns.
pub fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The running sampling and naming threads.
pub struct Pipeline {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    sampling: Option<JoinHandle<Result<recorder::Recording>>>,
    naming: Option<JoinHandle<()>>,
}

/// The recorder's options for the daemon's configuration.
pub fn record_options(config: &Config, event: EventKind) -> RecordOptions {
    let s = &config.sampling;
    let cache = &config.storage.cache_dir;
    let mut options = RecordOptions::new(RecordTarget::System);
    options.frequency = s.frequency.0;
    options.include_kernel = s.kernel;
    options.call_graph = s.call_graph.to_recorder();
    options.stack_bytes = s.stack_bytes.0;
    options.event = sampler::EventChoice::Force(event);
    options.window = Some(s.slice.0);
    options.drain_interval = recorder::defaults::WINDOW_DRAIN_INTERVAL;
    options.ring_pages = match options.call_graph {
        recorder::CallGraph::Fp => sampler::defaults::RING_PAGES,
        _ => recorder::defaults::ring_pages_streaming(options.frequency, options.stack_bytes),
    };
    options.preload_symbols = Some(daemon_debug_search(config));
    options.frame_cache_dir = Some(cache.join("frames"));
    options
}

/// The debug-file search with the daemon's caches.
fn daemon_debug_search(config: &Config) -> symbolize::DebugSearch {
    let cache = &config.storage.cache_dir;
    symbolize::DebugSearch {
        section_cache: Some(cache.join("dwarf")),
        symbol_cache: Some(cache.join("symbols")),
        ..symbolize::DebugSearch::system()
    }
}

impl Pipeline {
    /// Start sampling and naming.
    pub fn start(shared: Arc<Shared>) -> Result<Pipeline> {
        let config = &shared.config;
        let mut options = record_options(config, shared.event);
        options.frequency = shared.budget.target_frequency();
        options.frequency_control = Some(shared.rate.clone());
        let service_options = recorder::ResolveOptions {
            debug_search: daemon_debug_search(config),
            kernel_cache_dir: Some(config.storage.cache_dir.clone()),
            ..recorder::ResolveOptions::default()
        };
        let symbolizer = Symbolizer::new(service_options, options.frame_cache_dir.clone());
        let feed = symbolizer.feed();
        let (tx, rx) = sync_channel::<ClosedWindow>(config.sampling.naming_queue.0);
        let naming_shared = Arc::clone(&shared);
        let naming = std::thread::Builder::new()
            .name("symbolize".into())
            .spawn(move || name_slices(symbolizer, rx, &naming_shared))
            .context("starting the naming thread")?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let sampling_shared = Arc::clone(&shared);
        let sampling = std::thread::Builder::new()
            .name("drain".into())
            .spawn(move || sample(options, feed, stop_rx, tx, &sampling_shared))
            .context("starting the sampling thread")?;
        Ok(Pipeline {
            stop: Some(stop_tx),
            sampling: Some(sampling),
            naming: Some(naming),
        })
    }

    /// Whether the sampling thread has ended (an error, or after [`Pipeline::stop`]).
    pub fn sampling_finished(&self) -> bool {
        self.sampling.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Stop sampling, flush the open slice, and wait until every closed slice is named and
    /// written. Returns the sampling thread's outcome.
    pub fn stop(&mut self) -> Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let sampled = match self.sampling.take() {
            Some(h) => h
                .join()
                .map_err(|_| anyhow::anyhow!("the sampling thread panicked"))?,
            None => return Ok(()),
        };
        if let Some(h) = self.naming.take() {
            h.join()
                .map_err(|_| anyhow::anyhow!("the naming thread panicked"))?;
        }
        let recording = sampled?;
        info!(
            samples = recording.stats.samples,
            lost = recording.stats.lost,
            slices = recording.stats.windows,
            "sampling ended"
        );
        Ok(())
    }
}

/// The sampling thread: the recorder's drain loop until `stop`.
fn sample(
    options: RecordOptions,
    feed: recorder::SymbolFeed,
    stop: tokio::sync::oneshot::Receiver<()>,
    slices: SyncSender<ClosedWindow>,
    shared: &Shared,
) -> Result<recorder::Recording> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the sampling runtime")?;
    let stopping = AtomicBool::new(false);
    let mut progress = |p: recorder::Progress| {
        shared.samples.store(p.samples, Ordering::Relaxed);
        shared.lost.store(p.lost, Ordering::Relaxed);
        shared
            .heartbeat_ns
            .store(sampler::now_ns().max(1), Ordering::Relaxed);
    };
    // What a dropped slice said about files and processes that went away, for the next one.
    let mut carried_files: Vec<u32> = Vec::new();
    let mut carried_processes: Vec<(u32, u64)> = Vec::new();
    let mut on_window = |mut closed: ClosedWindow| {
        closed.released_files.append(&mut carried_files);
        closed.ended_processes.append(&mut carried_processes);
        if let Ok(mut t) = shared.tracked.lock() {
            *t = closed.tracked;
        }
        shared.naming_backlog.fetch_add(1, Ordering::Relaxed);
        if stopping.load(Ordering::Relaxed) {
            // Sampling is over: the last slices may wait for naming (nothing is lost).
            let _ = slices.send(closed);
            return;
        }
        match slices.try_send(closed) {
            Ok(()) => {}
            Err(TrySendError::Full(closed)) => {
                shared.naming_backlog.fetch_sub(1, Ordering::Relaxed);
                let n = shared.slices_dropped.fetch_add(1, Ordering::Relaxed) + 1;
                warn!(
                    dropped = n,
                    samples = closed.window.samples(),
                    "naming is behind: a closed slice was dropped"
                );
                carried_files = closed.released_files;
                carried_processes = closed.ended_processes;
            }
            Err(TrySendError::Disconnected(_)) => {
                shared.naming_backlog.fetch_sub(1, Ordering::Relaxed);
            }
        }
    };
    let result = runtime.block_on(async {
        let stop = async {
            let _ = stop.await;
            stopping.store(true, Ordering::Relaxed);
        };
        recorder::record(&options, Some(&feed), stop, &mut progress, &mut on_window).await
    });
    shared.sampling_ended.store(true, Ordering::Relaxed);
    let recording = result.context("sampling failed")?;
    shared
        .samples
        .store(recording.stats.samples, Ordering::Relaxed);
    shared.lost.store(recording.stats.lost, Ordering::Relaxed);
    Ok(recording)
}

/// The naming thread: name each closed slice, write it, let go of what went away.
fn name_slices(mut symbolizer: Symbolizer, slices: Receiver<ClosedWindow>, shared: &Shared) {
    let mut unwritten: VecDeque<Slice> = VecDeque::new();
    let mut named: u64 = 0;
    let mut cgroups = crate::filter::CgroupCache::new(sampler::now_ns());
    loop {
        // Woken at least every second, so that the budget's request to shed the caches is
        // served between slices.
        let closed = match slices.recv_timeout(crate::budget::TICK) {
            Ok(closed) => closed,
            Err(RecvTimeoutError::Timeout) => {
                shed_if_asked(&mut symbolizer, shared);
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        shared.naming_backlog.fetch_sub(1, Ordering::Relaxed);
        let period_ns = 1_000_000_000 / closed.frequency.max(1);
        let (profile, stacks, _stats) = symbolizer.symbolize_stacks(&closed.window);
        for &file in &closed.released_files {
            symbolizer.evict_file(file);
        }
        for &(pid, start) in &closed.ended_processes {
            symbolizer.evict_process(pid, start);
        }
        // What naming read from mapped files stays in the page cache, not in our resident
        // set; indexes no slice needed lately go, and what was freed goes back to the
        // system: the daemon's footprint between slices is what it keeps using.
        symbolizer.trim();
        recorder::release_free_memory();
        // Monotonic (the samples' clock) to UNIX time, as of now.
        let offset = unix_now_ns().saturating_sub(sampler::now_ns());
        let mut slice = to_slice(
            &closed.window,
            &profile,
            &stacks,
            period_ns,
            shared.event,
            offset,
        );
        cgroups.label(&mut slice.stacks);
        cgroups.forget(&closed.ended_processes);
        drop(closed);
        named += 1;
        shared.slices_named.fetch_add(1, Ordering::Relaxed);
        shed_if_asked(&mut symbolizer, shared);
        if let Ok(mut s) = shared.symbols.lock() {
            *s = symbolizer.sizes();
        }
        tracing::debug!(
            samples = slice.samples(),
            stacks = slice.stacks.len(),
            names = slice.names.len(),
            "slice named"
        );
        if !slice.stacks.is_empty() {
            unwritten.push_back(slice);
            if unwritten.len() > UNWRITTEN_KEPT {
                unwritten.pop_front();
                warn!("the disk refuses slices: the oldest unwritten slice was dropped");
            }
        }
        write_pending(&shared.store, &mut unwritten);
        shared
            .unwritten
            .store(unwritten.len() as u64, Ordering::Relaxed);
        if named % SAVE_CACHES_EVERY == 0 {
            symbolizer.save_caches();
        }
    }
    write_pending(&shared.store, &mut unwritten);
    if !unwritten.is_empty() {
        warn!(
            slices = unwritten.len(),
            "slices could not be written before exit"
        );
    }
    symbolizer.save_caches();
}

/// Shed the symbol caches if the budget asked (memory over `budget.max_resident`).
fn shed_if_asked(symbolizer: &mut Symbolizer, shared: &Shared) {
    if !shared.budget.take_shed_request() {
        return;
    }
    let before = symbolizer.sizes();
    symbolizer.shed();
    recorder::release_free_memory();
    shared.budget.shed_done();
    let after = symbolizer.sizes();
    if let Ok(mut s) = shared.symbols.lock() {
        *s = after;
    }
    warn!(
        symbolizers = before.symbolizers,
        symbolizer_bytes = before.symbolizer_bytes,
        names = before.names,
        name_bytes = before.name_bytes,
        jit_maps = before.jit_maps,
        resident_bytes = recorder::resident_bytes().unwrap_or(0),
        "symbol caches shed (memory over budget)"
    );
}

/// Write the slices waiting, oldest first, until one fails (logged once per outage).
fn write_pending(store: &Store, unwritten: &mut VecDeque<Slice>) {
    while let Some(slice) = unwritten.front() {
        match store.write(slice, unix_now_ns()) {
            Ok(_) => {
                if unwritten.len() > 1 {
                    info!("writing slices again");
                }
                unwritten.pop_front();
            }
            Err(err) => {
                if unwritten.len() == 1 {
                    warn!(%err, "cannot write a slice; keeping it in memory and retrying with the next one");
                }
                break;
            }
        }
    }
}

/// A named window as a slice: frames by name, labels kept, times in UNIX ns. `period_ns`:
/// what one sample stands for at the frequency in effect when the window closed; on
/// cpu-clock, each stack's CPU time is the sum of its samples' own periods (exact across a
/// change of frequency), on cycles (whose periods are cycles) its count times `period_ns`.
pub fn to_slice(
    window: &profile::NormalizedWindow,
    profile: &profile::Profile,
    stacks: &[NamedStack],
    period_ns: u64,
    event: EventKind,
    unix_offset_ns: u64,
) -> Slice {
    let mut names: Vec<String> = Vec::new();
    let mut ids: HashMap<FrameId, u32> = HashMap::new();
    let mut out = Vec::with_capacity(stacks.len());
    for (stack, named) in window.stacks.iter().zip(stacks) {
        let thread = &window.threads[stack.thread as usize];
        let frames = named
            .frames
            .iter()
            .map(|&id| {
                *ids.entry(id).or_insert_with(|| {
                    names.push(profile.name(id).to_string());
                    names.len() as u32 - 1
                })
            })
            .collect();
        out.push(SliceStack {
            frames,
            kernel_frames: named.kernel_frames,
            pid: thread.pid,
            tid: thread.tid,
            process_start: thread.process_start,
            comm: thread.comm.clone(),
            uid: thread.uid,
            ancestors: thread.ancestors.clone(),
            cgroup: None,
            count: stack.count,
            cpu_ns: match event {
                EventKind::CpuClock => stack.period,
                EventKind::Cycles => stack.count.saturating_mul(period_ns),
            },
        });
    }
    Slice {
        start_ns: window.start.saturating_add(unix_offset_ns),
        end_ns: window.end.saturating_add(unix_offset_ns),
        period_ns,
        names,
        stacks: out,
    }
}
