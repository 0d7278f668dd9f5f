//! The open slices: what the sampling pipeline holds and has not written yet (the slice being
//! filled, the one in its close grace, those waiting to be named), named on demand so that a
//! query sees samples up to about a second old. Never written to disk: after SIGKILL they are
//! lost, as before.
//!
//! A query whose range reaches past the newest slice written asks for a snapshot unless the
//! last one is recent enough (within [`FRESH_LAG`] of what it wants), and unless the same
//! user has used up its snapshots (a burst of [`SNAPSHOT_BURST`], then one per
//! [`SNAPSHOT_SPACING`]: it then waits for the next, or for another user's snapshot, so that
//! one user's loop of queries costs at most one snapshot per spacing while a few queries in a
//! row wait for nothing); the pipeline's drain loop wakes, reads every ring and hands each open window on, normalized, through the naming
//! queue behind the closed slices already in it (so when the snapshot is named, every slice
//! closed before it is written); the naming thread names it and publishes it here. Queries
//! that come meanwhile wait for the same snapshot: one is named for any number of them. A
//! published snapshot lives in the index beside the files, so that a query sees a window
//! either as an open slice or, once written, as its file, never both: writing a slice drops
//! the open slice it supersedes under the same lock.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use crate::slice::Slice;
use crate::store::{unix_now_ns, Index, Selection, SliceMeta, Store};

/// How old (from what a query asks) a snapshot of the open slices may be and still answer it:
/// queries within a second share one.
pub const FRESH_LAG: Duration = Duration::from_secs(1);

/// How often one user's queries may ask for a snapshot of the open slices, past a burst of
/// [`SNAPSHOT_BURST`]: a user who has used them up waits for the next (or for a snapshot
/// another asked for) before asking again. The snapshots' work is not the sampling
/// pipeline's (the budget counts it as housekeeping), but it is CPU a loop of queries would
/// otherwise spend every [`FRESH_LAG`].
pub const SNAPSHOT_SPACING: Duration = Duration::from_secs(2);

/// Snapshots one user may ask for at once (a token bucket of this size, one token back per
/// [`SNAPSHOT_SPACING`]): a few queries in a row (`profctl top` after `profctl flamegraph`)
/// wait for nothing.
pub const SNAPSHOT_BURST: f64 = 2.0;

/// Who a query asks snapshots of the open slices for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Querier {
    /// The daemon itself (tests, internal reads): never spaced.
    #[default]
    Daemon,
    /// A user of the API socket, by uid: spaced by [`SNAPSHOT_SPACING`] past a burst.
    User(u32),
    /// The scrape listener: never spaced (a scrape needs the open slices as they stand at
    /// the end of its window; `scrape.max_concurrent` and its whole seconds bound it), but
    /// it starts from a snapshot taken within [`FRESH_LAG`] when there is one.
    Scrape,
}

/// Longest a query waits for a snapshot to be named; past it, it is answered with what is
/// there (the newest slice written and the last snapshot). Naming takes tens of
/// milliseconds once the symbol service knows what runs, but the first slices after a start
/// name every process running (seconds, in a debug build or under load).
pub const FRESH_WAIT: Duration = Duration::from_secs(10);

/// The open slices as named at one time.
#[derive(Debug, Default)]
pub struct OpenSlices {
    /// When the snapshot was taken (UNIX ns): the slices hold every sample taken before it.
    pub taken_ns: u64,
    /// The open slices, oldest first, each ending at `taken_ns` at the latest (a slice still
    /// being filled ends there, not at its window's end); empty ones left out.
    pub slices: Vec<Arc<Slice>>,
}

impl OpenSlices {
    /// The slice that was being filled when the snapshot was taken (its window reaches past
    /// `taken_ns`), if it had samples.
    pub fn filling(&self) -> Option<&Arc<Slice>> {
        self.slices.last().filter(|s| s.end_ns >= self.taken_ns)
    }
}

/// Asks the pipeline for a snapshot; false when it cannot come (sampling is not running).
pub type Asker = Arc<dyn Fn() -> bool + Send + Sync>;

/// The open slices' part of the store's index.
#[derive(Debug, Default)]
pub(super) struct OpenState {
    /// The last snapshot published, less the slices written since.
    pub snapshot: Option<Arc<OpenSlices>>,
    /// When a snapshot was asked and not answered yet.
    pub asked: Option<Instant>,
    /// Requests the pipeline could not serve (its queue full, or sampling over).
    pub refused: u64,
    /// Snapshots published.
    pub published: u64,
    /// The snapshots each user may still ask for, as of when: a token bucket (see
    /// [`SNAPSHOT_BURST`]). Full buckets are dropped as requests come: at most the users that
    /// asked within the last `SNAPSHOT_BURST` spacings.
    pub allowance: HashMap<u32, (f64, Instant)>,
}

impl OpenState {
    /// When the last snapshot was taken (UNIX ns; 0: none).
    pub fn taken_ns(&self) -> u64 {
        self.snapshot.as_ref().map_or(0, |s| s.taken_ns)
    }

    /// The snapshots `uid` may ask for at `now` (its bucket refilled).
    fn tokens(&self, uid: u32, now: Instant) -> f64 {
        self.allowance
            .get(&uid)
            .map_or(SNAPSHOT_BURST, |&(tokens, at)| {
                let back = now.duration_since(at).as_secs_f64() / SNAPSHOT_SPACING.as_secs_f64();
                (tokens + back).min(SNAPSHOT_BURST)
            })
    }

    /// How long `querier` must still wait before it may ask for a snapshot (None: it may now).
    fn spacing_left(&self, querier: Querier) -> Option<Duration> {
        let Querier::User(uid) = querier else {
            return None;
        };
        let missing = 1.0 - self.tokens(uid, Instant::now());
        (missing > 0.0).then(|| SNAPSHOT_SPACING.mul_f64(missing))
    }

    /// `querier` asked for a snapshot at `now`: one token of its bucket taken.
    fn note_asked(&mut self, querier: Querier, now: Instant) {
        let Querier::User(uid) = querier else {
            return;
        };
        let left = self.tokens(uid, now) - 1.0;
        // A bucket refilled by now is as good as none.
        self.allowance.retain(|_, &mut (tokens, at)| {
            now.duration_since(at) < SNAPSHOT_SPACING.mul_f64(SNAPSHOT_BURST - tokens)
        });
        self.allowance.insert(uid, (left.max(0.0), now));
    }

    /// Drop the open slices that the written slice `key` supersedes.
    pub fn written(&mut self, key: (u64, u64)) {
        let Some(snapshot) = &self.snapshot else {
            return;
        };
        if !snapshot.slices.iter().any(|s| supersedes(key, s)) {
            return;
        }
        self.snapshot = Some(Arc::new(OpenSlices {
            taken_ns: snapshot.taken_ns,
            slices: snapshot
                .slices
                .iter()
                .filter(|s| !supersedes(key, s))
                .cloned()
                .collect(),
        }));
    }
}

/// Whether the written slice `key` is the open slice `open`, written: its range holds the
/// middle of the open slice's. (The two are the same window, their UNIX times converted from
/// the samples' clock at different moments: they differ by microseconds, never by half a
/// window.)
pub(super) fn supersedes(key: (u64, u64), open: &Slice) -> bool {
    let middle = middle(open);
    key.0 <= middle && middle < key.1
}

/// The middle of a slice's range.
pub(super) fn middle(slice: &Slice) -> u64 {
    slice.start_ns + (slice.end_ns.saturating_sub(slice.start_ns)) / 2
}

/// What queries and the pipeline ask of the store about the open slices.
impl Store {
    /// The slices for `[since_ns, until_ns)`: the files overlapping it and the open slices
    /// (not written yet) overlapping it, oldest first; what every query reads. When the range
    /// reaches past the newest slice written, the open slices are named first, unless the last
    /// snapshot of them holds every sample up to [`FRESH_LAG`] before `until_ns` (or now):
    /// this waits (at most [`FRESH_WAIT`]) while the pipeline names them, so call it from a
    /// blocking thread. Ranges in the past never wait. For tests (not spaced): queries
    /// call [`Store::select_for`] with whom they ask for.
    #[cfg(test)]
    pub fn select(&self, since_ns: u64, until_ns: u64) -> Selection {
        self.select_for(Querier::Daemon, since_ns, until_ns)
    }

    /// The slices for `[since_ns, until_ns)`, as [`Store::select_within`] with [`FRESH_LAG`]:
    /// what every query reads. `querier`: whom a snapshot is asked for (a user's are spaced:
    /// [`SNAPSHOT_SPACING`]).
    pub fn select_for(&self, querier: Querier, since_ns: u64, until_ns: u64) -> Selection {
        self.select_within(querier, since_ns, until_ns, FRESH_LAG)
    }

    /// [`Store::select_for`], the open slices named at most `lag` before `until_ns` (or now).
    pub fn select_within(
        &self,
        querier: Querier,
        since_ns: u64,
        until_ns: u64,
        lag: Duration,
    ) -> Selection {
        let want = until_ns.min(unix_now_ns());
        let index = self.freshen(querier, want, true, lag);
        let mut slices: Vec<SliceMeta> = index
            .slices
            .iter()
            .filter(|(&(start, end), _)| start < until_ns && end > since_ns)
            .map(|(&(start_ns, end_ns), &bytes)| SliceMeta {
                start_ns,
                end_ns,
                bytes,
                rollup: index.rollups.contains(&(start_ns, end_ns)),
                open: None,
            })
            .collect();
        if let Some(snapshot) = &index.open.snapshot {
            slices.extend(
                snapshot
                    .slices
                    .iter()
                    .filter(|s| s.start_ns < until_ns && s.end_ns > since_ns)
                    .map(|s| SliceMeta {
                        start_ns: s.start_ns,
                        end_ns: s.end_ns,
                        open: Some(Arc::clone(s)),
                        ..SliceMeta::default()
                    }),
            );
        }
        Selection {
            slices,
            complete_until_ns: index.newest_end().max(index.open.taken_ns()),
        }
    }

    /// A snapshot of the open slices taken at most `lag` ago (named for this call unless one
    /// is), as published: for answers that need what was open at one time, the scrape's start.
    /// None without a pipeline, or when none could be named within [`FRESH_WAIT`].
    pub fn open_slices(&self, querier: Querier, lag: Duration) -> Option<Arc<OpenSlices>> {
        let now = unix_now_ns();
        let index = self.freshen(querier, now, false, lag);
        index
            .open
            .snapshot
            .clone()
            .filter(|s| s.taken_ns + lag.as_nanos() as u64 >= now)
    }

    /// The index, once the open slices hold every sample up to `lag` before `want_ns` (UNIX
    /// ns), or (`written_will_do`) the newest slice written reaches it, or the pipeline cannot
    /// name them, or [`FRESH_WAIT`] has passed. Asks the pipeline for a snapshot unless one is
    /// asked, once `querier`'s spacing has passed ([`SNAPSHOT_SPACING`]; another's snapshot
    /// may answer it meanwhile); at most twice (a query that came after a snapshot was taken,
    /// while it was being named, asks for the next one).
    fn freshen(
        &self,
        querier: Querier,
        want: u64,
        written_will_do: bool,
        lag: Duration,
    ) -> MutexGuard<'_, Index> {
        let deadline = Instant::now() + FRESH_WAIT;
        let lag_ns = lag.as_nanos() as u64;
        let mut index = self.index();
        let mut asked = 0;
        loop {
            if (written_will_do && want <= index.newest_end())
                || index.open.taken_ns().saturating_add(lag_ns) >= want
            {
                break;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            // A request unanswered for longer than a query waits is forgotten.
            let pending = index.open.asked.is_some_and(|at| at.elapsed() < FRESH_WAIT);
            if !pending {
                if let Some(spacing) = index.open.spacing_left(querier) {
                    // This user asked a moment ago: wait for the spacing to pass, or for a
                    // snapshot someone else asked for.
                    index = self
                        .fresh
                        .wait_timeout(index, spacing.min(left))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                    continue;
                }
                let asker = self.asker.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if asked >= 2 || !asker.is_some_and(|ask| ask()) {
                    break;
                }
                let now = Instant::now();
                index.open.asked = Some(now);
                index.open.note_asked(querier, now);
                asked += 1;
            }
            let refused = index.open.refused;
            index = self
                .fresh
                .wait_timeout(index, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            if index.open.refused != refused {
                break;
            }
        }
        index
    }

    /// Let `asker` ask the pipeline for snapshots of the open slices (None: no more; the
    /// queries waiting are answered with what there is).
    pub fn serve_open_slices(&self, asker: Option<Asker>) {
        let stopping = asker.is_none();
        *self.asker.lock().unwrap_or_else(|e| e.into_inner()) = asker;
        if stopping {
            self.refuse_open_slices();
        }
    }

    /// Publish a snapshot of the open slices (the pipeline, once named); queries waiting for
    /// it go on.
    pub fn publish_open_slices(&self, taken_ns: u64, slices: Vec<Slice>) {
        {
            let mut index = self.index();
            // Named behind every slice closed before it, so none is written yet; but a slice
            // of the same window written meanwhile (never, in order) would win.
            let slices = slices
                .into_iter()
                .filter(|s| !s.stacks.is_empty())
                .filter(|s| {
                    !index
                        .slices
                        .range(..=(middle(s), u64::MAX))
                        .next_back()
                        .is_some_and(|(&key, _)| supersedes(key, s))
                })
                .map(Arc::new)
                .collect();
            index.open.snapshot = Some(Arc::new(OpenSlices { taken_ns, slices }));
            index.open.asked = None;
            index.open.published += 1;
        }
        self.fresh.notify_all();
    }

    /// The pipeline cannot name the snapshot asked (its queue is full, or sampling ended):
    /// queries waiting for it are answered with what there is.
    pub fn refuse_open_slices(&self) {
        {
            let mut index = self.index();
            index.open.asked = None;
            index.open.refused += 1;
        }
        self.fresh.notify_all();
    }

    /// Snapshots of the open slices published and refused since start, and when the last
    /// one was taken (UNIX ns, 0: none).
    pub fn open_slice_counts(&self) -> (u64, u64, u64) {
        let index = self.index();
        (
            index.open.published,
            index.open.refused,
            index.open.taken_ns(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::{Querier, SNAPSHOT_SPACING};
    use crate::slice::tests::example;
    use crate::slice::Slice;
    use crate::store::Store;

    const S: u64 = 1_000_000_000;

    fn now() -> u64 {
        super::unix_now_ns()
    }

    fn store() -> (tempfile::TempDir, Arc<Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(86_400), 1 << 30, now()).unwrap();
        (dir, store)
    }

    /// An open slice from `start`, filled until `taken`.
    fn open_slice(start: u64, taken: u64) -> Slice {
        let mut s = example(start);
        s.end_ns = s.end_ns.min(taken);
        s
    }

    /// A stand-in for the pipeline: each request, counted, is answered after `delay` on a
    /// thread of its own with a snapshot taken when it was asked.
    fn serve(store: &Arc<Store>, window_start: u64, delay: Duration) -> Arc<AtomicU64> {
        let asked = Arc::new(AtomicU64::new(0));
        let (counter, weak) = (Arc::clone(&asked), Arc::downgrade(store));
        store.serve_open_slices(Some(Arc::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let weak = weak.clone();
            let taken = now();
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                if let Some(store) = weak.upgrade() {
                    store.publish_open_slices(taken, vec![open_slice(window_start, taken)]);
                }
            });
            true
        })));
        asked
    }

    #[test]
    fn queries_at_once_share_one_snapshot_and_see_the_open_slice() {
        let (_dir, store) = store();
        let t = now();
        let start = t - 5 * S;
        // The slice before it is written.
        store.write(&example(start - 10 * S), t).unwrap();
        let asked = serve(&store, start, Duration::from_millis(200));
        let began = Instant::now();
        let answers: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| store.select(t - 60 * S, t)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(
            asked.load(Ordering::SeqCst),
            1,
            "one snapshot for four queries"
        );
        assert!(began.elapsed() < Duration::from_secs(2));
        for sel in &answers {
            assert_eq!(sel.slices.len(), 2);
            assert!(sel.slices[0].open.is_none());
            let open = sel.slices[1].open.as_ref().expect("the open slice");
            assert_eq!(open.start_ns, start);
            assert!(sel.complete_until_ns >= t);
            // Read as a plain slice would be.
            let read = store.read_in(&sel.slices[1], 0, u64::MAX).unwrap().unwrap();
            assert_eq!(read.samples(), 38);
            // And as the timeline reads it: one member, at the span it is selected by.
            let members = store
                .read_members(&sel.slices[1], u64::MAX)
                .unwrap()
                .unwrap();
            assert_eq!(members.slice.samples(), 38);
            assert_eq!(
                members.members,
                vec![(sel.slices[1].start_ns, sel.slices[1].end_ns)]
            );
        }
        // Within the lag, the next query asks for nothing.
        let sel = store.select(t - 60 * S, now());
        assert_eq!(sel.slices.len(), 2);
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        // A range in the past never asks.
        let sel = store.select(t - 60 * S, start - 5 * S);
        assert_eq!(sel.slices.len(), 1);
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        // Once its window is written, the open slice is gone, in the same step.
        let mut written = example(start);
        written.start_ns += 3_000; // converted to UNIX time at another moment
        written.end_ns += 3_000;
        store.write(&written, now()).unwrap();
        let sel = store.select_within(Querier::Daemon, t - 60 * S, t, Duration::from_secs(3600));
        assert_eq!(sel.slices.len(), 2);
        assert!(sel.slices.iter().all(|m| m.open.is_none()));
    }

    #[test]
    fn without_a_pipeline_or_when_refused_queries_do_not_wait() {
        let (_dir, store) = store();
        let t = now();
        let began = Instant::now();
        assert!(store.select(t - 60 * S, t).slices.is_empty());
        assert!(store.open_slices(Querier::Daemon, Duration::ZERO).is_none());
        // A pipeline whose queue is full refuses at once.
        let weak = Arc::downgrade(&store);
        store.serve_open_slices(Some(Arc::new(move || {
            let weak = weak.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                if let Some(store) = weak.upgrade() {
                    store.refuse_open_slices();
                }
            });
            true
        })));
        assert!(store.select(t - 60 * S, t).slices.is_empty());
        assert!(
            began.elapsed() < Duration::from_secs(1),
            "{:?}",
            began.elapsed()
        );
        assert_eq!(store.open_slice_counts().1, 1);
    }

    #[test]
    fn a_snapshot_at_the_start_of_a_window_is_taken_then() {
        let (_dir, store) = store();
        let t = now();
        let asked = serve(&store, t - 2 * S, Duration::from_millis(20));
        let first = store
            .open_slices(Querier::Daemon, Duration::ZERO)
            .expect("a snapshot");
        assert!(first.taken_ns >= t);
        let filling = first.filling().expect("the slice being filled");
        assert_eq!(filling.end_ns, first.taken_ns);
        // Asked again with no lag allowed: another one, taken later.
        let second = store
            .open_slices(Querier::Daemon, Duration::ZERO)
            .expect("a snapshot");
        assert!(second.taken_ns > first.taken_ns);
        assert_eq!(asked.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn one_users_snapshots_are_spaced_and_others_are_not_held_by_them() {
        let (_dir, store) = store();
        let t = now();
        let asked = serve(&store, t - 2 * S, Duration::from_millis(20));
        let fresh = |who| {
            let began = Instant::now();
            let sel = store.select_within(who, t - 60 * S, now(), Duration::ZERO);
            assert!(sel.complete_until_ns > t);
            began.elapsed()
        };
        // A burst of two at once.
        assert!(fresh(Querier::User(5)) < Duration::from_secs(1));
        assert!(fresh(Querier::User(5)) < Duration::from_secs(1));
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        // The same user at once again: waits for its next snapshot, then asks.
        let waited = fresh(Querier::User(5));
        assert!(waited >= SNAPSHOT_SPACING.mul_f64(0.8), "{waited:?}");
        assert_eq!(asked.load(Ordering::SeqCst), 3);
        // Another user, and the daemon itself, are not held by that user's spacing.
        assert!(fresh(Querier::User(6)) < Duration::from_secs(1));
        assert!(fresh(Querier::Daemon) < Duration::from_secs(1));
        assert!(fresh(Querier::Scrape) < Duration::from_secs(1));
        assert_eq!(asked.load(Ordering::SeqCst), 6);
        // A user's query the last snapshot answers (within the lag) asks for nothing.
        let sel = store.select_for(Querier::User(6), t - 60 * S, now());
        assert!(sel.complete_until_ns > t);
        assert_eq!(asked.load(Ordering::SeqCst), 6);
        // Over a loop, one snapshot per spacing.
        let began = Instant::now();
        for _ in 0..3 {
            fresh(Querier::User(5));
        }
        assert!(
            began.elapsed() >= SNAPSHOT_SPACING.mul_f64(2.6),
            "{:?}",
            began.elapsed()
        );
    }
}
