//! Hourly roll-ups, above the store: when an hour's slices become one file, without a burst.
//!
//! - The naming thread folds each slice it writes into its hour's roll-up ([`Incremental`],
//!   a [`RollupBuilder`] in compact form), when it wrote that hour from its first slice. When
//!   a slice of a later hour comes, the finished builder is handed to the housekeeper.
//! - The housekeeper ([`Hourly::step`], on a thread of its own at the lowest priority,
//!   `pipeline.rs`) writes handed-over roll-ups as a stream, rolls up past hours that were not
//!   built as they went (the daemon started mid-hour, history from before) by folding their
//!   files one at a time with a pause after each, and deletes member files whose grace has
//!   passed.
//!
//! An hour is claimed by whoever builds it, so it is never rolled up twice. Hours that cannot
//! be rolled up (over [`BUILDER_BYTES`], unreadable members) stay as slices and are
//! remembered; members sampled at different frequencies are rolled up as any.
//!
//! Durability: the roll-up is written atomically (temporary file, fsync, rename, fsync of the
//! directory) and indexed in place of its members in one step; the member files are deleted
//! [`MEMBER_GRACE`] later (queries that selected them before may still read them). A crash in
//! between leaves both: at start, a slice listed as a member of a roll-up is deleted
//! (`Store::open`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::slice::Slice;
use crate::store::rollup_builder::RollupBuilder;
use crate::store::Store;

/// The span rolled up into one file: an hour.
pub const HOUR_NS: u64 = 3_600_000_000_000;

/// Environment variable that replaces [`HOUR_NS`] (seconds), for tests and benches that must
/// cross a roll-up boundary in minutes. Read once, here only; not a configuration key.
pub const PERIOD_ENV: &str = "PROFILERD_TEST_ROLLUP_SECONDS";

/// The span rolled up into one file: [`HOUR_NS`], unless [`PERIOD_ENV`] says otherwise.
pub fn period_ns() -> u64 {
    static PERIOD: OnceLock<u64> = OnceLock::new();
    *PERIOD.get_or_init(|| {
        std::env::var(PERIOD_ENV)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|&s| s > 0)
            .map_or(HOUR_NS, |s| {
                warn!(
                    seconds = s,
                    "{PERIOD_ENV}: roll-ups of this period, not of an hour"
                );
                s * 1_000_000_000
            })
    })
}

/// Member files stay on disk this long after their roll-up replaced them in the index (longer
/// than a query may run: `api.request_timeout`, at most 100 s).
pub const MEMBER_GRACE: Duration = Duration::from_secs(120);

/// Largest compact form of one hour's roll-up (`RollupBuilder::memory`); past it the hour
/// stays as slices.
pub const BUILDER_BYTES: usize = 128 << 20;

// A query runs at most `api.request_timeout`, which the configuration keeps below the grace.
const _: () = assert!(MEMBER_GRACE.as_secs() > crate::config::MAX_REQUEST_TIMEOUT.as_secs());

/// The hour (its start, UNIX ns) a slice starting at `start_ns` belongs to.
pub fn hour_of(start_ns: u64) -> u64 {
    start_ns - start_ns % period_ns()
}

/// Hours that could not be rolled up, remembered so that they are not retried.
const SKIPPED_KEPT: usize = 256;

/// After folding a file of a past hour, the housekeeper pauses this many times the CPU the
/// fold took (so that catching up takes at most a fifth of a core).
const CATCH_UP_PAUSE: u32 = 4;

/// Roll-up work shared by the naming thread and the housekeeper.
#[derive(Debug, Default)]
struct Work {
    /// Hours being built (by the naming thread or the housekeeper).
    claimed: BTreeSet<u64>,
    /// Hours left as slices.
    skipped: BTreeSet<u64>,
    /// Roll-ups the naming thread finished, to write, with the CPU its folds took.
    finished: VecDeque<(u64, RollupBuilder, Duration)>,
    /// Members replaced by a roll-up at that instant, deleted after [`MEMBER_GRACE`].
    members: VecDeque<(Instant, Vec<(u64, u64)>)>,
    /// Stop the housekeeper.
    stop: bool,
}

/// Roll-up state shared by the naming thread and the housekeeper.
pub struct Hourly {
    store: Arc<Store>,
    work: Mutex<Work>,
    wake: Condvar,
    /// Set by [`Hourly::stop`]: a roll-up being written is abandoned (its hour is rolled up
    /// from its files after the next start), so that stopping never waits on it.
    stopping: AtomicBool,
}

impl Hourly {
    /// Roll-ups of `store`'s hours.
    pub fn new(store: Arc<Store>) -> Arc<Hourly> {
        Arc::new(Hourly {
            store,
            work: Mutex::default(),
            wake: Condvar::new(),
            stopping: AtomicBool::new(false),
        })
    }

    fn work(&self) -> MutexGuard<'_, Work> {
        self.work.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remember that `hour` stays as slices (and let go of its claim).
    fn skip(&self, hour: u64, why: &dyn std::fmt::Display) {
        warn!(hour_start_ns = hour, %why, "hour left as slices, not rolled up");
        let mut work = self.work();
        work.claimed.remove(&hour);
        work.skipped.insert(hour);
        while work.skipped.len() > SKIPPED_KEPT {
            work.skipped.pop_first();
        }
    }

    /// Tell the housekeeper to stop (it finishes the file it is folding, if any, and abandons
    /// a roll-up it is writing).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.work().stop = true;
        self.wake.notify_all();
    }

    /// The housekeeper's loop: [`Hourly::step`] until there is nothing to do, the query cache
    /// dropped if idle, then wait for the naming thread (or a member's grace to pass, or 10 s),
    /// until [`Hourly::stop`].
    pub fn run_housekeeper(&self) {
        loop {
            while self.step() {}
            self.store.cache_expire();
            let work = self.work();
            if work.stop {
                return;
            }
            if !work.finished.is_empty() {
                continue; // handed over since the last step
            }
            let _ = self.wake.wait_timeout(work, Duration::from_secs(10));
        }
    }

    /// Do one piece of roll-up work: delete members whose grace passed, write a finished
    /// roll-up, or roll up one past hour that was not built incrementally. Returns whether
    /// there was work.
    pub fn step(&self) -> bool {
        let (due, finished) = {
            let mut work = self.work();
            if work.stop {
                return false;
            }
            let mut due = Vec::new();
            while work
                .members
                .front()
                .is_some_and(|(at, _)| at.elapsed() >= MEMBER_GRACE)
            {
                due.extend(work.members.pop_front().map(|m| m.1).unwrap_or_default());
            }
            (due, work.finished.pop_front())
        };
        self.store.remove_plain(&due);
        if let Some((hour, builder, folds)) = finished {
            self.write(hour, builder, folds);
            return true;
        }
        match self.next_past_hour() {
            Some((hour, members)) => {
                self.catch_up(hour, &members);
                true
            }
            None => !due.is_empty(),
        }
    }

    /// The oldest past hour (before the newest slice's) with two or more plain slices, no
    /// roll-up, not claimed nor skipped: claimed, with its slices.
    fn next_past_hour(&self) -> Option<(u64, Vec<(u64, u64)>)> {
        let plain = self.store.plain_slices_before(u64::MAX);
        let current = hour_of(plain.last()?.0);
        let mut hours: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
        for key in plain.into_iter().take_while(|k| k.0 < current) {
            hours.entry(hour_of(key.0)).or_default().push(key);
        }
        let mut work = self.work();
        let (hour, members) = hours.into_iter().find(|(hour, members)| {
            members.len() >= 2
                && !work.claimed.contains(hour)
                && !work.skipped.contains(hour)
                && !self.store.has_rollup_in(*hour, hour + period_ns())
        })?;
        work.claimed.insert(hour);
        Some((hour, members))
    }

    /// Roll up a past hour from its files, one at a time, pausing after each.
    fn catch_up(&self, hour: u64, members: &[(u64, u64)]) {
        let cpu = thread_cpu();
        let mut builder = RollupBuilder::new(BUILDER_BYTES);
        for &key in members {
            if self.work().stop {
                self.work().claimed.remove(&hour);
                return;
            }
            let before = thread_cpu();
            let folded = self
                .store
                .read_plain(key)
                .map_err(|e| format!("slice {}-{}: {e}", key.0, key.1))
                .and_then(|slice| builder.fold(&slice, key).map_err(|e| e.to_string()));
            if let Err(why) = folded {
                self.skip(hour, &why);
                return;
            }
            self.pause((thread_cpu() - before) * CATCH_UP_PAUSE);
        }
        self.write(hour, builder, thread_cpu() - cpu);
    }

    /// Wait `span`, or less if [`Hourly::stop`] comes first.
    fn pause(&self, span: Duration) {
        let until = Instant::now() + span;
        let mut work = self.work();
        while !work.stop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            work = self
                .wake
                .wait_timeout(work, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Write `builder`'s roll-up of `hour` and index it; let go of the claim, and of the
    /// builder's memory (returned to the system). `folded`: the CPU its folds took (for the
    /// log).
    fn write(&self, hour: u64, builder: RollupBuilder, folded: Duration) {
        // Held to its budget, shared out per uid (`rollup_share.rs`).
        let (builder, drops) =
            self.store
                .apply_rollup_share(builder, period_ns(), crate::store::unix_now_ns());
        for drop in drops {
            info!(
                hour_start_ns = hour,
                uid = ?drop.uid,
                stacks = drop.stacks,
                samples = drop.samples,
                bytes = drop.bytes,
                "stacks over the uid's share of the hour's roll-up dropped"
            );
        }
        self.write_rollup(hour, &builder, folded);
        drop(builder);
        recorder::release_free_memory();
    }

    /// [`Hourly::write`], the builder kept.
    fn write_rollup(&self, hour: u64, builder: &RollupBuilder, folded: Duration) {
        let (started, cpu) = (Instant::now(), thread_cpu());
        let members = builder.members();
        let (Some(first), Some(last)) = (members.first(), members.last()) else {
            self.work().claimed.remove(&hour);
            return;
        };
        if members.len() < 2 {
            self.work().claimed.remove(&hour);
            return;
        }
        let key = (first.0, last.1);
        match self.store.write_rollup_with(key, members, |file| {
            builder.write_to(Abortable {
                file,
                stop: &self.stopping,
            })
        }) {
            Ok(bytes) => {
                let mut work = self.work();
                work.claimed.remove(&hour);
                work.members.push_back((Instant::now(), members.to_vec()));
                drop(work);
                info!(
                    start_ns = key.0,
                    slices = members.len(),
                    bytes,
                    memory = builder.memory(),
                    fold_cpu_us = folded.as_micros() as u64,
                    write_cpu_ms = (thread_cpu() - cpu).as_millis() as u64,
                    ms = started.elapsed().as_millis() as u64,
                    "rolled up an hour"
                );
            }
            Err(_) if self.stopping.load(Ordering::Relaxed) => {
                info!(
                    start_ns = key.0,
                    "stopping: a roll-up left for the next start"
                );
            }
            Err(err) => self.skip(hour, &format_args!("writing the roll-up: {err}")),
        }
    }
}

/// A file that refuses writes once the daemon stops.
struct Abortable<'a> {
    file: &'a mut std::fs::File,
    stop: &'a AtomicBool,
}

impl std::io::Write for Abortable<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("stopping"));
        }
        self.file.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    recorder::ProcessUsage::this_thread().cpu()
}

/// The hour the naming thread builds as it writes its slices (owned by that thread).
pub struct Incremental {
    hourly: Arc<Hourly>,
    /// The hour, its roll-up so far, and the CPU its folds took.
    current: Option<(u64, RollupBuilder, Duration)>,
}

impl Incremental {
    /// Nothing built yet.
    pub fn new(hourly: Arc<Hourly>) -> Incremental {
        Incremental {
            hourly,
            current: None,
        }
    }

    /// After `slice` was written: fold it into its hour's roll-up. A slice that reaches the
    /// hour's end, or one of a later hour, hands the finished roll-up to the housekeeper; a
    /// slice of a later hour starts the next one, if the store
    /// holds no slice of that hour yet (else the housekeeper rolls it up once it is past). A
    /// slice of an earlier hour (written late) stays as it is.
    pub fn after_write(&mut self, slice: &Slice) {
        let hour = hour_of(slice.start_ns);
        let span = (slice.start_ns, slice.end_ns);
        match &mut self.current {
            Some((h, builder, folds)) if *h == hour => {
                let cpu = thread_cpu();
                let folded = builder.fold(slice, span);
                *folds += thread_cpu().saturating_sub(cpu);
                if let Err(err) = folded {
                    self.hourly.skip(hour, &err);
                    self.current = None;
                } else if slice.end_ns >= hour + period_ns() {
                    // The last slice that starts in this hour (they are contiguous and
                    // written in order): the roll-up is whole, the next slice need not be
                    // waited for.
                    self.hand_over();
                    self.hourly.wake.notify_all();
                }
                return;
            }
            Some((h, ..)) if *h > hour => return,
            _ => {}
        }
        self.hand_over();
        let first = self
            .hourly
            .store
            .plain_slices_before(hour + period_ns())
            .iter()
            .rev()
            .take_while(|k| k.0 >= hour)
            .all(|&k| k == span);
        if first && !self.hourly.store.has_rollup_in(hour, hour + period_ns()) {
            let cpu = thread_cpu();
            let mut builder = RollupBuilder::new(BUILDER_BYTES);
            match builder.fold(slice, span) {
                Ok(()) => {
                    self.hourly.work().claimed.insert(hour);
                    self.current = Some((hour, builder, thread_cpu().saturating_sub(cpu)));
                }
                Err(err) => self.hourly.skip(hour, &err),
            }
        }
        self.hourly.wake.notify_all();
    }

    /// Hand the hour being built, if any, to the housekeeper to write.
    fn hand_over(&mut self) {
        if let Some(done) = self.current.take() {
            self.hourly.work().finished.push_back(done);
        }
    }
}

#[cfg(test)]
#[path = "hourly_tests.rs"]
mod tests;
