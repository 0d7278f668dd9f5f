//! What CPU queries of the history read, kept folded per stored file: each file (a slice or
//! a roll-up) is decoded once and its CPU stacks kept as ids into tables shared by every file
//! (names sanitized, a stack's command name and frames interned once, with and without its
//! kernel frames), with the uid and the CPU time of each (a roll-up's, per member too), so
//! that a query of a range already read adds up arrays instead of decoding its files again
//! (an hour of 10-s slices at 999 Hz: 280 files of 15-20 ms each). `query::folded` uses it
//! for the queries it can answer so (CPU time, filtered at most by uid); the answers are the
//! ones the files give, stack for stack.
//!
//! Bounds: its memory (tables and folded files) is counted; a file is kept only while the
//! whole stays within the query's bound (`api.max_response_bytes`, what one query may hold),
//! else it is folded for the query alone. `fold` adds every file's names and stacks to the
//! shared tables, kept or not, so during a query the tables are bounded only by the distinct
//! stacks of its range. Everything is dropped at the next query when the whole passes the
//! bound, and when no query came for [`IDLE`]: checked at the next query and by the roll-up
//! housekeeper (`hourly.rs`) between its rounds, later while it writes or catches up a
//! roll-up. Files no longer in the store's index (expired, rolled up, set aside) are
//! forgotten at each query.
//! Files are immutable once named: a name is never reused for other content.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::access::Visibility;
use crate::folding::comm_of;
use crate::measure::user_frames;
use crate::slice::{SliceError, SliceStack};
use crate::store::rollup::Rollup;
use crate::store::rollup_builder::{Arena, Strings};
use crate::store::{SliceMeta, Store};

/// Everything is dropped when no query used the cache for this long.
pub const IDLE: Duration = Duration::from_secs(120);

/// The cache (one per store).
#[derive(Debug, Default)]
pub struct QueryCache {
    inner: Mutex<Inner>,
}

/// A stored file: (start, end, roll-up).
type FileKey = (u64, u64, bool);

#[derive(Debug, Default)]
struct Inner {
    /// Bumped when the tables are dropped: folds of another generation hold other ids.
    generation: u64,
    names: Strings,
    /// Stacks: the command name's id, then the frames' (outermost first).
    stacks: Arena<u32>,
    /// Bytes of each stack's folded text (names and separators), by stack id.
    text: Vec<u32>,
    files: FxHashMap<FileKey, Arc<FileFold>>,
    /// Bytes of the folds in `files`.
    file_bytes: usize,
    used: Option<Instant>,
}

impl Inner {
    fn bytes(&self) -> usize {
        self.names.memory() + self.stacks.memory() + self.text.capacity() * 4 + self.file_bytes
    }

    fn clear(&mut self) {
        *self = Inner {
            generation: self.generation + 1,
            ..Inner::default()
        };
    }
}

/// One CPU stack of a file, folded.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// The stack with every frame.
    all: u32,
    /// The stack as a user who may not see kernel frames sees it.
    user: u32,
    /// The process's uid, if known.
    uid: Option<u32>,
    /// Samples (the roll-up's member counts add up to it).
    count: u64,
    /// CPU time, ns.
    cpu_ns: u64,
}

/// One file's CPU stacks, folded (ids of the cache's tables of one generation).
#[derive(Debug)]
pub struct FileFold {
    generation: u64,
    entries: Vec<Entry>,
    /// Of a roll-up's entries (one per stack of the file, in order): entry `i`'s
    /// `(member, count)` pairs are `pairs[starts[i]..starts[i + 1]]`; empty for a plain
    /// slice (its entries merged by stack and uid).
    pairs: Vec<(u32, u64)>,
    starts: Vec<u32>,
    /// The CPU time of each pair, when the roll-up keeps it (its frequency changed).
    pair_cpu: Option<Vec<u64>>,
    members: Vec<(u64, u64)>,
    member_periods: Vec<u64>,
    period_ns: u64,
}

/// CPU time per stack id, as a query adds it up.
#[derive(Debug, Default)]
pub struct StackTotals {
    /// CPU time, ns, by stack id.
    pub cpu_ns: Vec<u64>,
    /// The ids with some (in order of first sight).
    pub touched: Vec<u32>,
}

impl StackTotals {
    fn add(&mut self, id: u32, ns: u64) {
        let i = id as usize;
        if i >= self.cpu_ns.len() {
            self.cpu_ns.resize((i + 1).max(self.cpu_ns.len() * 2), 0);
        }
        if self.cpu_ns[i] == 0 && ns > 0 {
            self.touched.push(id);
        }
        self.cpu_ns[i] += ns;
    }
}

impl FileFold {
    /// Bytes it holds.
    fn bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.pairs.capacity() * 16
            + self.starts.capacity() * 4
            + self.pair_cpu.as_ref().map_or(0, |c| c.capacity() * 8)
            + self.members.capacity() * 16
            + self.member_periods.capacity() * 8
            + 128
    }

    /// Add what a query of `[since_ns, until_ns)` reads of this file to `totals`, each stack
    /// that `visibility` and `uid` (a filter) admit, as the user sees it: exactly what the
    /// file read and restricted to the range gives ([`Rollup::restrict`]). Returns the
    /// period its counts are in (the shortest of the members read, for a roll-up).
    pub fn add_to(
        &self,
        (since_ns, until_ns): (u64, u64),
        visibility: Visibility,
        uid: Option<u32>,
        totals: &mut StackTotals,
    ) -> u64 {
        let admits = |e: &Entry| {
            let own = match visibility {
                Visibility::All => true,
                Visibility::OwnOnly(u) => e.uid == Some(u),
            };
            own && uid.is_none_or(|u| e.uid == Some(u))
        };
        let id = |e: &Entry| match visibility {
            Visibility::All => e.all,
            Visibility::OwnOnly(_) => e.user,
        };
        let inside: Vec<bool> = self
            .members
            .iter()
            .map(|&(start, end)| start < until_ns && end > since_ns)
            .collect();
        let period = self
            .member_periods
            .iter()
            .zip(&inside)
            .filter(|&(&p, &i)| i && p > 0)
            .map(|(&p, _)| p)
            .min()
            .unwrap_or(self.period_ns);
        if self.pairs.is_empty() || inside.iter().all(|&i| i) {
            for e in self.entries.iter().filter(|e| admits(e)) {
                totals.add(id(e), e.cpu_ns);
            }
            return period;
        }
        for (i, e) in self.entries.iter().enumerate() {
            if !admits(e) {
                continue;
            }
            let (lo, hi) = (self.starts[i] as usize, self.starts[i + 1] as usize);
            let pairs = &self.pairs[lo..hi];
            let count: u64 = pairs
                .iter()
                .filter(|&&(m, _)| inside[m as usize])
                .map(|&(_, c)| c)
                .sum();
            if count == 0 {
                continue;
            }
            let cpu_ns = match &self.pair_cpu {
                Some(cpu) => pairs
                    .iter()
                    .zip(&cpu[lo..hi])
                    .filter(|&(&(m, _), _)| inside[m as usize])
                    .map(|(_, &ns)| ns)
                    .sum(),
                None => {
                    (u128::from(e.cpu_ns) * u128::from(count) / u128::from(e.count.max(1))) as u64
                }
            };
            totals.add(id(e), cpu_ns);
        }
        period
    }
}

/// The cache's tables of one generation, to name what a query added up.
pub struct Tables<'a>(&'a Inner);

impl Tables<'_> {
    /// Stack `id`: its command name's id, then its frames'.
    pub fn stack(&self, id: u32) -> &[u32] {
        self.0.stacks.get(id)
    }

    /// Name `id`.
    pub fn name(&self, id: u32) -> &str {
        self.0.names.get(id)
    }

    /// Bytes of stack `id`'s folded text (names and separators).
    pub fn text_bytes(&self, id: u32) -> u64 {
        u64::from(self.0.text[id as usize])
    }
}

/// Intern `key` (name ids) as a stack, counting its text once.
fn intern_stack(inner: &mut Inner, key: &[u32]) -> u32 {
    let id = inner.stacks.intern(key);
    if id as usize == inner.text.len() {
        let text: usize = key.iter().map(|&n| inner.names.get(n).len() + 1).sum();
        inner.text.push(text.min(u32::MAX as usize) as u32);
    }
    id
}

/// `rollup`'s CPU stacks folded into `inner`'s tables.
fn fold(inner: &mut Inner, rollup: &Rollup) -> FileFold {
    let slice = &rollup.slice;
    let mut remap: Vec<Option<u32>> = vec![None; slice.names.len()];
    let mut comms: FxHashMap<(Option<&str>, u32), u32> = FxHashMap::default();
    let unknown = inner.names.intern("[unknown]");
    let mut key = Vec::new();
    let mut name_of = |inner: &mut Inner, f: u32| match remap.get(f as usize) {
        Some(Some(id)) => *id,
        Some(None) => {
            let id = inner
                .names
                .intern(&profile::sanitize_frame(&slice.names[f as usize]));
            remap[f as usize] = Some(id);
            id
        }
        None => unknown,
    };
    let mut stack_of =
        |inner: &mut Inner, key: &mut Vec<u32>, comm: u32, frames: &[u32], marker: Option<u32>| {
            key.clear();
            key.push(comm);
            for &f in frames.iter().chain(&marker) {
                let id = name_of(inner, f);
                key.push(id);
            }
            if frames.is_empty() && marker.is_none() {
                key.push(unknown);
            }
            intern_stack(inner, key)
        };
    let rolled = rollup.members.len() > 1 || rollup.member_cpu.is_some();
    let mut entries: Vec<Entry> = Vec::new();
    let mut merged: FxHashMap<(u32, u32, Option<u32>), usize> = FxHashMap::default();
    let mut pairs = Vec::new();
    let mut starts = vec![0u32];
    let mut pair_cpu: Option<Vec<u64>> = rollup.member_cpu.as_ref().map(|_| Vec::new());
    for (i, s) in slice.stacks.iter().enumerate() {
        // CPU stacks only (what `Measure::Cpu` projects a slice on).
        if s.off_cpu_ns > 0 {
            continue;
        }
        let comm_key = (s.comm.as_deref(), if s.comm.is_some() { 0 } else { s.pid });
        let comm = match comms.get(&comm_key) {
            Some(&id) => id,
            None => {
                let id = inner.names.intern(&comm_of(s));
                comms.insert(comm_key, id);
                id
            }
        };
        let all = stack_of(inner, &mut key, comm, &s.frames, None);
        let (frames, marker) = user_frames(s, &slice.names);
        let user = stack_of(inner, &mut key, comm, frames, marker);
        let entry = Entry {
            all,
            user,
            uid: s.uid,
            count: s.count,
            cpu_ns: s.cpu_ns,
        };
        if rolled {
            entries.push(entry);
            pairs.extend_from_slice(&rollup.counts[i]);
            if let (Some(out), Some(cpu)) = (&mut pair_cpu, &rollup.member_cpu) {
                out.extend_from_slice(&cpu[i]);
            }
            starts.push(pairs.len() as u32);
        } else {
            add_merged(&mut entries, &mut merged, entry, s);
        }
    }
    if !rolled {
        starts.clear();
    }
    FileFold {
        generation: inner.generation,
        entries,
        pairs,
        starts,
        pair_cpu,
        members: rollup.members.clone(),
        member_periods: rollup.member_periods.clone(),
        period_ns: slice.period_ns,
    }
}

/// Add `entry` (of `s`) to a plain slice's entries, merged with one of the same stacks and uid.
fn add_merged(
    entries: &mut Vec<Entry>,
    merged: &mut FxHashMap<(u32, u32, Option<u32>), usize>,
    entry: Entry,
    s: &SliceStack,
) {
    match merged.get(&(entry.all, entry.user, s.uid)) {
        Some(&i) => {
            entries[i].count += entry.count;
            entries[i].cpu_ns += entry.cpu_ns;
        }
        None => {
            merged.insert((entry.all, entry.user, s.uid), entries.len());
            entries.push(entry);
        }
    }
}

impl QueryCache {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Store {
    /// Start a query on the cache: everything dropped when it was idle for [`IDLE`] or its
    /// tables hold more than `max_bytes`, the files no longer indexed forgotten. Returns the
    /// generation the query's folds must be of.
    pub fn cache_begin(&self, max_bytes: u64) -> u64 {
        let keys: std::collections::HashSet<FileKey> = {
            let index = self.index();
            index
                .slices
                .keys()
                .map(|&(s, e)| (s, e, index.rollups.contains(&(s, e))))
                .collect()
        };
        let mut inner = self.query_cache.lock();
        let now = Instant::now();
        let idle = inner.used.is_some_and(|t| now.duration_since(t) > IDLE);
        if idle || inner.bytes() as u64 > max_bytes {
            tracing::debug!(idle, bytes = inner.bytes(), "query cache dropped");
            inner.clear();
        }
        inner.used = Some(now);
        let before = inner.files.len();
        let mut freed = 0;
        inner.files.retain(|k, f| {
            let keep = keys.contains(k);
            if !keep {
                freed += f.bytes();
            }
            keep
        });
        inner.file_bytes -= freed;
        if inner.files.len() < before {
            tracing::debug!(
                forgotten = before - inner.files.len(),
                "query cache: files no longer indexed"
            );
        }
        inner.generation
    }

    /// The fold of `meta`'s file (or open slice): the cache's, or the file read (a file
    /// decoding to more than `max_bytes` is [`SliceError::OverLimit`]) and folded, and kept
    /// when the cache stays within `max_bytes` (an open slice never is). `Ok(None)`: the file
    /// is gone. A corrupt file is an error (and set aside, as [`Store::read_members`] does).
    pub fn cached_fold(
        &self,
        meta: &SliceMeta,
        max_bytes: u64,
    ) -> Result<Option<Arc<FileFold>>, SliceError> {
        let key = (meta.start_ns, meta.end_ns, meta.rollup);
        if meta.open.is_none() {
            let mut inner = self.query_cache.lock();
            inner.used = Some(Instant::now());
            if let Some(hit) = inner.files.get(&key) {
                return Ok(Some(Arc::clone(hit)));
            }
        }
        let Some(rollup) = self.read_members(meta, max_bytes)? else {
            return Ok(None);
        };
        let mut inner = self.query_cache.lock();
        let folded = Arc::new(fold(&mut inner, &rollup));
        let bytes = folded.bytes();
        if meta.open.is_none() && (inner.bytes() + bytes) as u64 <= max_bytes {
            inner.file_bytes += bytes;
            // Two queries may fold one file at once: the second's replaces the first's.
            if let Some(before) = inner.files.insert(key, Arc::clone(&folded)) {
                inner.file_bytes -= before.bytes();
            }
        }
        Ok(Some(folded))
    }

    /// Drop the query cache if no query used it for [`IDLE`] (the housekeeper calls this
    /// between its rounds: at most 10 s apart while it is idle, later while it writes or
    /// catches up a roll-up), and give the memory back to the system.
    pub fn cache_expire(&self) {
        self.cache_expire_at(Instant::now());
    }

    /// [`Store::cache_expire`] as of `now`.
    pub(crate) fn cache_expire_at(&self, now: Instant) {
        let dropped = {
            let mut inner = self.query_cache.lock();
            let idle = inner
                .used
                .is_some_and(|t| now.saturating_duration_since(t) > IDLE);
            if idle {
                tracing::debug!(bytes = inner.bytes(), "query cache idle: dropped");
                inner.clear();
            }
            idle
        };
        if dropped {
            recorder::release_free_memory();
        }
    }

    /// `f` with the cache's tables, if they are still of `generation` (None: dropped since).
    pub fn cache_tables<T>(&self, generation: u64, f: impl FnOnce(&Tables<'_>) -> T) -> Option<T> {
        let inner = self.query_cache.lock();
        (inner.generation == generation).then(|| f(&Tables(&inner)))
    }

    /// Bytes the query cache holds, and the files it keeps.
    pub fn cache_size(&self) -> (usize, usize) {
        let inner = self.query_cache.lock();
        (inner.bytes(), inner.files.len())
    }
}

impl FileFold {
    /// The generation of the tables its ids are of.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}
