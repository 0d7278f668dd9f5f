//! The daemon's stream: the sampling thread (the recorder's drain loop, closing a slice every
//! `sampling.slice`), the naming thread (a long-lived symbol service naming each closed
//! slice, the store writing it, then folding it into its hour's roll-up), and the
//! housekeeping thread at the lowest priority (writing finished roll-ups, catching up hours
//! from their files: `store/hourly.rs`). The first two register with the budget
//! (`pipeline_cpu.rs`), their housekeeping timed apart.
//!
//! The drain never waits: closed slices go to the naming thread through a bounded queue
//! (`sampling.naming_queue`); when it is full the slice is dropped, logged and counted (what
//! it says about released files and ended processes is carried to the next one, so that the
//! symbol service still lets them go). Both threads report through [`Shared`]'s counters;
//! they never wait on the API, the budget or the recordings.
//!
//! Snapshots of the open slices (`store/open.rs`): a query asks the store, the store asks the
//! drain loop (`recorder::SnapshotControl`), which wakes, reads every ring and queues the open
//! windows, normalized, behind the closed slices already queued (one snapshot at most in the
//! queue, in a place of its own: a closed slice never loses its place to one); the naming
//! thread names them with the same symbol service and publishes them in the store. Their
//! cost is the queries' (housekeeping to the budget, on both threads: the drain thread's
//! normalizing, timed by the recorder, and the naming), never the drain's wait.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Context, Result};
use recorder::{ClosedWindow, RecordOptions, SnapshotControl, Symbolizer};
use tracing::{info, warn};

use crate::cgroup::CgroupCache;
use crate::options::{daemon_debug_search, record_options};
use crate::slice::Slice;
use crate::state::{unix_now_ns, Shared};
use crate::store::hourly::{Hourly, Incremental};

/// Slices kept in memory while the disk refuses them (full): past this, the oldest is dropped.
const UNWRITTEN_KEPT: usize = 64;

/// Most frames kept of a stack, kernel and inlined ones included (the innermost; the rest is
/// cut and marked `[truncated]`): naming a slice costs at most this many frames per sample,
/// whatever depth and names a user's program has.
pub const STACK_FRAMES: usize = 256;

/// Bytes the names of user addresses may take in the symbol service (two generations, see
/// `symbolize::service`): a part of the daemon's resident target (64 MiB), and far more than
/// the addresses a machine runs through in a generation (some 40 bytes an address, each
/// function's name held once).
pub const NAME_BYTES: usize = 16 << 20;

/// After SIGTERM, slices still waiting are named for this long; those left are dropped,
/// counted and logged, so that the daemon stops within systemd's patience whatever users
/// made it sample.
const NAMING_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(2);

/// After SIGTERM, the housekeeping thread is waited for this long, then left to the process's
/// exit: at the lowest priority a busy machine may give it no CPU for minutes, and whatever
/// roll-up it is making is made again from its files after the next start (what it wrote is
/// written atomically: `store/hourly.rs`).
const HOUSEKEEPING_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Windows named between two saves of the frame cache.
const SAVE_CACHES_EVERY: u64 = 360;

/// What the naming thread is handed.
enum ToName {
    /// A closed slice.
    Closed(Box<ClosedWindow>),
    /// A snapshot of the open windows, oldest first, taken at `taken` (monotonic ns).
    Open {
        windows: Vec<ClosedWindow>,
        taken: u64,
    },
}

/// The running sampling and naming threads.
pub struct Pipeline {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Set at [`Pipeline::stop`]: the naming thread then has [`NAMING_AT_EXIT`] left.
    stopping: Arc<AtomicBool>,
    sampling: Option<JoinHandle<Result<recorder::Recording>>>,
    naming: Option<JoinHandle<()>>,
    hourly: Arc<Hourly>,
    housekeeper: Option<JoinHandle<()>>,
}

impl Pipeline {
    /// Start sampling and naming.
    pub fn start(shared: Arc<Shared>) -> Result<Pipeline> {
        let config = shared.live();
        let mut options = record_options(&config, shared.event);
        options.frequency = shared.budget.target_frequency();
        options.frequency_control = Some(shared.rate.clone());
        let mut service_options = recorder::ResolveOptions {
            debug_search: daemon_debug_search(&config),
            kernel_cache_dir: Some(config.storage.cache_dir.clone()),
            ..recorder::ResolveOptions::default()
        };
        service_options.limits.stack_frames = STACK_FRAMES;
        service_options.limits.name_bytes = NAME_BYTES;
        // The daemon samples itself; its own frames are named from its symbol table (see
        // docs/daemon.md, "Cost": through DWARF they were half the naming at rest).
        service_options.symbol_table_only = own_build_id().into_iter().collect();
        let symbolizer = Symbolizer::new(service_options, options.frame_cache_dir.clone());
        let feed = symbolizer.feed();
        // One place more than the closed slices have, for a snapshot of the open ones.
        let (tx, rx) = sync_channel::<ToName>(config.sampling.naming_queue.0 + 1);
        let snapshots = SnapshotControl::new();
        options.snapshots = Some(snapshots.clone());
        shared
            .store
            .serve_open_slices(Some(Arc::new(move || snapshots.request())));
        let hourly = Hourly::new(Arc::clone(&shared.store));
        let housekeeping = Arc::clone(&hourly);
        let housekeeper = std::thread::Builder::new()
            .name("housekeeping".into())
            .spawn(move || {
                // Roll-ups run on what sampling and the rest of the machine leave.
                if let Err(err) = crate::sys::lowest_priority_for_this_thread() {
                    warn!(%err, "the housekeeping thread keeps the default priority");
                }
                housekeeping.run_housekeeper()
            })
            .context("starting the housekeeping thread")?;
        let naming_shared = Arc::clone(&shared);
        let incremental = Incremental::new(Arc::clone(&hourly));
        let stopping = Arc::new(AtomicBool::new(false));
        let naming_stopping = Arc::clone(&stopping);
        let naming = std::thread::Builder::new()
            .name("symbolize".into())
            .spawn(move || {
                name_slices(
                    symbolizer,
                    rx,
                    incremental,
                    &naming_stopping,
                    &naming_shared,
                )
            })
            .context("starting the naming thread")?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let sampling_shared = Arc::clone(&shared);
        let sampling = std::thread::Builder::new()
            .name("drain".into())
            .spawn(move || {
                // However sampling ends (an error, a panic, a stop), the main loop is told.
                let _ended = SamplingEnded(&sampling_shared);
                sample(options, feed, stop_rx, tx, &sampling_shared)
            })
            .context("starting the sampling thread")?;
        Ok(Pipeline {
            stop: Some(stop_tx),
            stopping,
            sampling: Some(sampling),
            naming: Some(naming),
            hourly,
            housekeeper: Some(housekeeper),
        })
    }

    /// Whether the sampling thread has ended (an error, or after [`Pipeline::stop`]).
    pub fn sampling_finished(&self) -> bool {
        self.sampling.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Stop sampling, flush the open slice, and wait until the closed slices are named and
    /// written: those not named within [`NAMING_AT_EXIT`] are dropped (counted); the
    /// housekeeper is waited for at most [`HOUSEKEEPING_AT_EXIT`]. Returns the sampling
    /// thread's outcome.
    pub fn stop(&mut self) -> Result<()> {
        self.stopping.store(true, Ordering::Relaxed);
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
        self.hourly.stop();
        if let Some(h) = self.housekeeper.take() {
            let deadline = std::time::Instant::now() + HOUSEKEEPING_AT_EXIT;
            while !h.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            if h.is_finished() {
                h.join()
                    .map_err(|_| anyhow::anyhow!("the housekeeping thread panicked"))?;
            } else {
                warn!(
                    "stopping: the housekeeping thread (lowest priority) is still folding a \
                     roll-up; its hour is rolled up from its files after the next start"
                );
            }
        }
        let recording = sampled?;
        info!(
            samples = recording.stats.samples,
            lost = recording.stats.lost,
            late = recording.stats.late_samples,
            slices = recording.stats.windows,
            "sampling ended"
        );
        Ok(())
    }
}

/// Marks sampling as ended and tells the main loop, when dropped (the sampling thread's end).
struct SamplingEnded<'a>(&'a Shared);

impl Drop for SamplingEnded<'_> {
    fn drop(&mut self) {
        self.0.sampling_ended.store(true, Ordering::Relaxed);
        self.0.sampling_news.notify_one();
    }
}

/// The sampling thread: the recorder's drain loop until `stop`.
fn sample(
    options: RecordOptions,
    feed: recorder::SymbolFeed,
    stop: tokio::sync::oneshot::Receiver<()>,
    slices: SyncSender<ToName>,
    shared: &Shared,
) -> Result<recorder::Recording> {
    shared.budget.pipeline.register_this_thread("drain");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the sampling runtime")?;
    let stopping = AtomicBool::new(false);
    let mut progress = |p: recorder::Progress| {
        shared.samples.store(p.samples, Ordering::Relaxed);
        shared.lost.store(p.lost, Ordering::Relaxed);
        let first = shared
            .heartbeat_ns
            .swap(sampler::now_ns().max(1), Ordering::Relaxed)
            == 0;
        if first {
            shared.sampling_news.notify_one();
        }
    };
    // What a dropped slice said about files and processes that went away, for the next one.
    let mut carried_files: Vec<u32> = Vec::new();
    let mut carried_processes: Vec<(u32, u64)> = Vec::new();
    // The windows of the snapshot being handed on.
    let mut open: Vec<ClosedWindow> = Vec::new();
    let mut on_window = |mut closed: ClosedWindow| {
        if let Some(snapshot) = closed.snapshot {
            open.push(closed);
            if snapshot.last {
                // The queries' work, not sampling's: housekeeping to the budget.
                shared.budget.pipeline.add_housekeeping(snapshot.cpu);
                let windows = std::mem::take(&mut open);
                queue_snapshot(&slices, windows, snapshot.taken, &stopping, shared);
            }
            return;
        }
        closed.released_files.append(&mut carried_files);
        closed.ended_processes.append(&mut carried_processes);
        if let Ok(mut t) = shared.tracked.lock() {
            *t = closed.tracked;
        }
        shared.naming_backlog.fetch_add(1, Ordering::Relaxed);
        if stopping.load(Ordering::Relaxed) {
            // Sampling is over: the last slices may wait for naming (nothing is lost).
            let _ = slices.send(ToName::Closed(Box::new(closed)));
            return;
        }
        match slices.try_send(ToName::Closed(Box::new(closed))) {
            Ok(()) => {}
            Err(TrySendError::Full(ToName::Closed(closed))) => {
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
            Err(_) => {
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
    shared.store.serve_open_slices(None);
    let recording = result.context("sampling failed")?;
    shared
        .samples
        .store(recording.stats.samples, Ordering::Relaxed);
    shared.lost.store(recording.stats.lost, Ordering::Relaxed);
    Ok(recording)
}

/// Queue a snapshot of the open windows for naming, unless one is queued already (it answers
/// the queries waiting; those that want a later one ask again once it is published), or
/// sampling is ending or the queue is full (the store is told, so that the queries waiting
/// for it go on).
fn queue_snapshot(
    slices: &SyncSender<ToName>,
    windows: Vec<ClosedWindow>,
    taken: u64,
    stopping: &AtomicBool,
    shared: &Shared,
) {
    if stopping.load(Ordering::Relaxed) {
        shared.store.refuse_open_slices();
        return;
    }
    if shared.snapshot_queued.swap(true, Ordering::AcqRel) {
        return;
    }
    if slices.try_send(ToName::Open { windows, taken }).is_err() {
        shared.snapshot_queued.store(false, Ordering::Release);
        shared.store.refuse_open_slices();
    }
}

/// How long the naming thread waits for a slice before it looks at the budget's requests.
const SHED_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Slices named between two trims of the symbol service (a minute at the default slice).
const TRIM_EVERY: u64 = 6;

/// Resident memory past which the symbol service lets go of every mapped page it holds after
/// each slice, below the daemon's resident target of 64 MiB.
const TRIM_ABOVE: u64 = 48 << 20;

/// What the symbol service lets go of after a slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Trim {
    /// What no slice used since the last trim, mapped pages and DWARF indexes
    /// ([`recorder::Symbolizer::trim`]), then the heap freed ([`recorder::release_free_memory`]).
    unused: bool,
    /// The resident pages of every mapped file ([`recorder::Symbolizer::release_resident_pages`]):
    /// the daemon is resident past [`TRIM_ABOVE`]. Nothing parsed: the indexes the next slices
    /// use stay (parsing them again each slice, and the heap churn of it, cost more than
    /// anything else at steady state).
    pages: bool,
}

/// What the symbol service lets go of after the `named`-th slice (see [`Trim`]).
fn trim_due(named: u64) -> Trim {
    Trim {
        unused: named % TRIM_EVERY == 0,
        pages: recorder::resident_bytes().is_some_and(|r| r > TRIM_ABOVE),
    }
}

/// The GNU build-id of the running binary (None, logged, when it has none or it cannot be
/// read: its frames are then named through DWARF like any other).
fn own_build_id() -> Option<Box<[u8]>> {
    let read = symbolize::ElfLayout::read(std::path::Path::new("/proc/self/exe"));
    match read.as_ref().map(symbolize::ElfLayout::build_id) {
        Ok(Some(id)) => Some(id.into()),
        Ok(None) => {
            tracing::info!(
                "profilerd's binary has no build-id: its own frames are named through DWARF"
            );
            None
        }
        Err(err) => {
            tracing::info!(%err, "cannot read profilerd's own build-id: its own frames are named through DWARF");
            None
        }
    }
}

/// The naming thread: name each closed slice, write it, let go of what went away.
fn name_slices(
    mut symbolizer: Symbolizer,
    slices: Receiver<ToName>,
    mut rollups: Incremental,
    stopping: &AtomicBool,
    shared: &Shared,
) {
    shared.budget.pipeline.register_this_thread("symbolize");
    let mut unwritten: VecDeque<Slice> = VecDeque::new();
    let mut named: u64 = 0;
    let mut cgroups = CgroupCache::new(sampler::now_ns());
    let mut exit_deadline: Option<std::time::Instant> = None;
    let mut dropped_at_exit: u64 = 0;
    loop {
        // Woken now and then without slices, so that the budget's request to shed the caches
        // is served.
        let closed = match slices.recv_timeout(SHED_CHECK) {
            Ok(ToName::Closed(closed)) => *closed,
            Ok(ToName::Open { windows, taken }) => {
                shared.snapshot_queued.store(false, Ordering::Release);
                name_open(&mut symbolizer, &mut cgroups, &windows, taken, shared);
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {
                shed_if_asked(&mut symbolizer, shared);
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        shared.naming_backlog.fetch_sub(1, Ordering::Relaxed);
        if stopping.load(Ordering::Relaxed) {
            let deadline =
                *exit_deadline.get_or_insert_with(|| std::time::Instant::now() + NAMING_AT_EXIT);
            if std::time::Instant::now() >= deadline {
                dropped_at_exit += 1;
                shared.slices_dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
        }
        let mut slice = name_closed(&mut symbolizer, &mut cgroups, closed, named, shared);
        hold_to_share(&mut slice, shared);
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
        write_pending(shared, &mut rollups, &mut unwritten);
        shared
            .unwritten
            .store(unwritten.len() as u64, Ordering::Relaxed);
        if named % SAVE_CACHES_EVERY == 0 {
            shared
                .budget
                .pipeline
                .housekeeping(|| symbolizer.save_caches());
        }
    }
    if dropped_at_exit > 0 {
        warn!(
            slices = dropped_at_exit,
            "slices not named before exit were dropped"
        );
    }
    write_pending(shared, &mut rollups, &mut unwritten);
    if !unwritten.is_empty() {
        warn!(
            slices = unwritten.len(),
            "slices could not be written before exit"
        );
    }
    symbolizer.save_caches();
}

/// Name one closed slice, let go of the files and processes it says went away, and label its
/// stacks with their cgroups; `named` slices were named before it (the trim is every few).
fn name_closed(
    symbolizer: &mut Symbolizer,
    cgroups: &mut CgroupCache,
    closed: ClosedWindow,
    named: u64,
    shared: &Shared,
) -> Slice {
    let period_ns = 1_000_000_000 / closed.frequency.max(1);
    let (profile, stacks, stats) = symbolizer.symbolize_stacks(&closed.window);
    tracing::debug!(
        hits = stats.user.cache_hits,
        misses = stats.user.cache_misses,
        files = stats.user.files,
        frame_cache_hits = stats.user.frame_cache_hits,
        lookups = symbolizer.sizes().lookups,
        dwarf_indexes_built = symbolizer.sizes().dwarf_indexes_built,
        "slice's names (lookups and indexes built: since start)"
    );
    for &file in &closed.released_files {
        symbolizer.evict_file(file);
    }
    for &(pid, start) in &closed.ended_processes {
        symbolizer.evict_process(pid, start);
    }
    // What naming read from mapped files stays in the page cache, not in our resident
    // set; indexes no slice needed lately go, and what was freed goes back to the
    // system. Not after every slice: what the next slice needs again would be faulted
    // back in and rebuilt every time (see docs/daemon.md, "Cost").
    let trim = trim_due(named + 1);
    if trim.unused || trim.pages {
        shared.budget.pipeline.housekeeping(|| {
            if trim.unused {
                symbolizer.trim();
                recorder::release_free_memory();
            }
            if trim.pages {
                symbolizer.release_resident_pages();
            }
        });
    }
    // Monotonic (the samples' clock) to UNIX time, as of now.
    let offset = unix_now_ns().saturating_sub(sampler::now_ns());
    let mut slice = Slice::from_named(
        &closed.window,
        &profile,
        &stacks,
        period_ns,
        shared.event,
        offset,
    );
    cgroups.label(&mut slice.stacks);
    cgroups.forget(&closed.ended_processes);
    slice
}

/// Hold a closed slice to its budget, shared out per uid (`store/share.rs`); what was dropped
/// is counted per uid by the store, and logged.
fn hold_to_share(slice: &mut Slice, shared: &Shared) {
    let live = shared.live();
    let share = live.storage.max_share_per_uid.0;
    // The configured slice length, not this slice's own span: the last slice, closed at
    // SIGTERM, may be far shorter, and would get a budget too small for any of it.
    let slice_ns = live.sampling.slice.0.as_nanos().min(u128::from(u64::MAX)) as u64;
    drop(live);
    for drop in shared.store.apply_share(
        slice,
        share,
        unix_now_ns(),
        crate::store::hourly::period_ns(),
        slice_ns,
    ) {
        tracing::debug!(
            uid = ?drop.uid,
            stacks = drop.stacks,
            samples = drop.samples,
            bytes = drop.bytes,
            "stacks over the uid's share of the slice dropped"
        );
    }
}

/// Name a snapshot of the open windows taken at `taken` (monotonic ns) and publish it in the
/// store. The queries' work, not the pipeline's: housekeeping to the budget. Nothing is
/// evicted or written; what it names is cached for the slice when it closes. Past the resident
/// bound of [`TRIM_ABOVE`], the symbol service lets go of its mapped pages after it, as after a
/// slice.
fn name_open(
    symbolizer: &mut Symbolizer,
    cgroups: &mut CgroupCache,
    windows: &[ClosedWindow],
    taken: u64,
    shared: &Shared,
) {
    let started = Instant::now();
    let offset = unix_now_ns().saturating_sub(sampler::now_ns());
    let taken_ns = taken.saturating_add(offset);
    let slices: Vec<Slice> = shared.budget.pipeline.housekeeping(|| {
        let slices = windows
            .iter()
            .filter(|w| !w.window.stacks.is_empty())
            .map(|w| {
                let period_ns = 1_000_000_000 / w.frequency.max(1);
                let (profile, stacks, _stats) = symbolizer.symbolize_stacks(&w.window);
                let mut slice = Slice::from_named(
                    &w.window,
                    &profile,
                    &stacks,
                    period_ns,
                    shared.event,
                    offset,
                );
                // What was filled so far: up to when the snapshot was taken.
                slice.end_ns = slice.end_ns.min(taken_ns).max(slice.start_ns);
                cgroups.label(&mut slice.stacks);
                slice
            })
            .collect();
        if recorder::resident_bytes().is_some_and(|r| r > TRIM_ABOVE) {
            symbolizer.release_resident_pages();
        }
        slices
    });
    let (stacks, samples) = slices
        .iter()
        .fold((0, 0), |(n, c), s| (n + s.stacks.len(), c + s.samples()));
    shared.store.publish_open_slices(taken_ns, slices);
    let ms = started.elapsed().as_secs_f64() * 1e3;
    shared.open_named.fetch_add(1, Ordering::Relaxed);
    shared
        .open_naming_us
        .fetch_add((ms * 1e3) as u64, Ordering::Relaxed);
    tracing::debug!(
        windows = windows.len(),
        stacks,
        samples,
        lag_ms = unix_now_ns().saturating_sub(taken_ns) as f64 / 1e6,
        ms,
        "open slices named"
    );
}

/// Shed the symbol caches if the budget asked (memory over `budget.max_resident`).
fn shed_if_asked(symbolizer: &mut Symbolizer, shared: &Shared) {
    if !shared.budget.take_shed_request() {
        return;
    }
    let before = symbolizer.sizes();
    shared.budget.pipeline.housekeeping(|| {
        symbolizer.shed();
        recorder::release_free_memory();
    });
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

/// Write the slices waiting, oldest first, until one fails (logged once per outage); after
/// each write, retention and the slice folded into its hour's roll-up (housekeeping: not
/// counted as the pipeline's CPU).
fn write_pending(shared: &Shared, rollups: &mut Incremental, unwritten: &mut VecDeque<Slice>) {
    let (store, cpu) = (&shared.store, &shared.budget.pipeline);
    while let Some(slice) = unwritten.front() {
        match store.write_slice(slice) {
            Ok(_) => {
                cpu.housekeeping(|| {
                    store.apply_retention(unix_now_ns());
                    rollups.after_write(slice);
                });
                if unwritten.len() > 1 {
                    info!("writing slices again");
                }
                unwritten.pop_front();
            }
            Err(err) if err.kind() == std::io::ErrorKind::InvalidData => {
                // Never readable back: dropped and counted, not retried.
                shared.slices_dropped.fetch_add(1, Ordering::Relaxed);
                warn!(%err, stacks = slice.stacks.len(), "a slice too large for a file was dropped");
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
