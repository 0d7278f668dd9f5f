//! An hour's roll-up built one slice at a time, in a compact form: each slice is folded in as
//! it is written (or read back), so that the end of the hour costs only the encoding
//! (`rollup_writer.rs`), never a re-read of its slices nor a whole [`crate::store::rollup::Rollup`]
//! in memory.
//!
//! Compact form: frame names, frame sequences, label strings, ancestor chains and threads
//! (every label of a stack) are interned once each; a stack is the fixed-size key
//! (sequence, kernel frames, thread) with its totals and a chain of (member, count) entries in
//! one arena. Members sampled at different frequencies (the budget or a reload changed it
//! within the hour) are folded as any: each member's period is kept, and once the hour's
//! CPU time no longer follows from counts and one period, each entry's CPU time too. Its
//! memory is accounted for and bounded: past the bound the fold fails and the hour stays as
//! slices (as a roll-up too large to write does).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};

use hashbrown::HashTable;

use crate::slice::Slice;

/// Why a slice could not be folded into the hour's roll-up (the hour then stays as slices).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// The compact form would take more than its bound.
    #[error("the roll-up would take {bytes} bytes in memory (bound {limit})")]
    TooLarge {
        /// Bytes it would take.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// A member that does not start after the previous one.
    #[error("a slice out of order")]
    OutOfOrder,
}

/// Make room for `more` items in `v`, growing by a quarter (not doubling: an hour's tables
/// are large, and doubling would leave up to half of them unused).
fn room<T>(v: &mut Vec<T>, more: usize) {
    if v.capacity() - v.len() < more {
        v.reserve_exact(more.max(v.capacity() / 4).max(64));
    }
}

/// Bytes a [`HashTable<u32>`] of this capacity takes (an id and a control byte a bucket).
fn table_bytes(t: &HashTable<u32>) -> usize {
    t.capacity() * 5
}

/// Values stored once, in order of first appearance, found by a table of their ids.
#[derive(Debug)]
pub(crate) struct Table<T> {
    items: Vec<T>,
    ids: HashTable<u32>,
    state: RandomState,
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            items: Vec::new(),
            ids: HashTable::new(),
            state: RandomState::new(),
        }
    }
}

impl<T: Hash + Eq> Table<T> {
    /// The id of `item`, stored on first sight.
    pub(crate) fn intern(&mut self, item: T) -> u32 {
        let Table { items, ids, state } = self;
        let hash = state.hash_one(&item);
        if let Some(&id) = ids.find(hash, |&id| items[id as usize] == item) {
            return id;
        }
        let id = items.len() as u32;
        room(items, 1);
        items.push(item);
        ids.insert_unique(hash, id, |&id| state.hash_one(&items[id as usize]));
        id
    }

    /// Every item, by id.
    pub(crate) fn items(&self) -> &[T] {
        &self.items
    }

    pub(crate) fn memory(&self) -> usize {
        self.items.capacity() * std::mem::size_of::<T>() + table_bytes(&self.ids)
    }
}

/// Runs of values (names, frame sequences) stored end to end in one buffer, each once, found
/// by a table of their ids.
#[derive(Debug)]
pub(crate) struct Arena<T> {
    data: Vec<T>,
    /// Where each run ends in `data` (it starts where the previous one ends).
    ends: Vec<u32>,
    ids: HashTable<u32>,
    state: RandomState,
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Arena {
            data: Vec::new(),
            ends: Vec::new(),
            ids: HashTable::new(),
            state: RandomState::new(),
        }
    }
}

/// The run `id` of an arena's buffer.
fn run<'a, T>(data: &'a [T], ends: &[u32], id: u32) -> &'a [T] {
    let start = if id == 0 { 0 } else { ends[id as usize - 1] };
    &data[start as usize..ends[id as usize] as usize]
}

impl<T: Hash + Eq + Copy> Arena<T> {
    /// The id of `key`, stored on first sight.
    pub(crate) fn intern(&mut self, key: &[T]) -> u32 {
        let Arena {
            data,
            ends,
            ids,
            state,
        } = self;
        let hash = state.hash_one(key);
        if let Some(&id) = ids.find(hash, |&id| run(data, ends, id) == key) {
            return id;
        }
        let id = ends.len() as u32;
        room(data, key.len());
        data.extend_from_slice(key);
        room(ends, 1);
        ends.push(data.len() as u32);
        ids.insert_unique(hash, id, |&id| state.hash_one(run(data, ends, id)));
        id
    }

    /// The run `id`.
    pub(crate) fn get(&self, id: u32) -> &[T] {
        run(&self.data, &self.ends, id)
    }

    /// How many runs.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Every run, by id.
    pub(crate) fn ordered(&self) -> Vec<&[T]> {
        (0..self.ends.len() as u32).map(|id| self.get(id)).collect()
    }

    pub(crate) fn memory(&self) -> usize {
        self.data.capacity() * std::mem::size_of::<T>()
            + self.ends.capacity() * 4
            + table_bytes(&self.ids)
    }
}

/// Strings interned as runs of bytes (every run is a whole string, so valid UTF-8).
#[derive(Debug, Default)]
pub(crate) struct Strings(Arena<u8>);

impl Strings {
    /// The id of `s`, stored on first sight.
    pub(crate) fn intern(&mut self, s: &str) -> u32 {
        self.0.intern(s.as_bytes())
    }

    /// How many strings.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The string `id`.
    pub(crate) fn get(&self, id: u32) -> &str {
        std::str::from_utf8(self.0.get(id)).unwrap_or("")
    }

    /// Every string, by id.
    pub(crate) fn ordered(&self) -> Vec<&str> {
        (0..self.0.len() as u32)
            .map(|id| std::str::from_utf8(self.0.get(id)).unwrap_or(""))
            .collect()
    }

    pub(crate) fn memory(&self) -> usize {
        self.0.memory()
    }
}

/// Every label of a stack but its frames: one per thread of a process (interned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Thread {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The process's start (monotonic ns).
    pub process_start: u64,
    /// Who may see it, if known ([`SliceStack::uid`](crate::slice::SliceStack::uid)).
    pub uid: Option<u32>,
    /// The uid it is charged to when not `uid`
    /// ([`SliceStack::share_uid`](crate::slice::SliceStack::share_uid)).
    pub share_uid: Option<u32>,
    /// The command name's id in `strings`, plus one (0: unknown).
    pub comm: u32,
    /// The cgroup's id in `strings`, plus one (0: unknown).
    pub cgroup: u32,
    /// The ancestors' id in `chains`.
    pub ancestors: u32,
}

/// A merged stack: its identity and its totals.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stack {
    /// The hour's total count.
    pub count: u64,
    /// The hour's total CPU time, ns.
    pub cpu_ns: u64,
    /// The hour's total time off CPU, ns (an off-CPU stack's).
    pub off_cpu_ns: u64,
    /// The frame sequence's id in `sequences`.
    pub sequence: u32,
    /// How many innermost frames are kernel frames.
    pub kernel_frames: u32,
    /// The thread's id in `threads`.
    pub thread: u32,
}

/// One stack's count in one member slice (the member: where it lies in `entries`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    /// The stack.
    pub stack: u32,
    /// Samples in that member (a count past `u32::MAX` takes several entries).
    pub count: u32,
}

/// One stack's samples in one second of one member (the member: where it lies in
/// `seconds`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SecondEntry {
    /// The stack.
    pub stack: u32,
    /// The second of its member (0: the wall-clock second the member's start falls in).
    pub second: u32,
    /// Samples in it (a count past `u32::MAX` takes several entries).
    pub count: u32,
}

/// An hour's roll-up in the making (see the module's documentation).
#[derive(Debug)]
pub struct RollupBuilder {
    /// The bound on [`RollupBuilder::memory`].
    limit: usize,
    /// The members' `(start_ns, end_ns)` (as the index knows them), oldest first.
    pub(crate) members: Vec<(u64, u64)>,
    /// The shortest period of the members (ns per sample): the roll-up's `period`.
    pub(crate) period_ns: u64,
    /// Each member's period (its slice's `period_ns`).
    pub(crate) member_periods: Vec<u64>,
    /// Each entry's CPU time, ns, once some member's stacks are not each their count times
    /// one period of the hour (a change of frequency: between members, or within one); None
    /// while they are (the entries' CPU time follows from their counts).
    pub(crate) entry_cpu: Option<Vec<u64>>,
    /// Frame names (function names).
    pub(crate) names: Strings,
    /// Frame sequences, outermost first, as name ids.
    pub(crate) sequences: Arena<u32>,
    /// Command names and cgroup paths.
    pub(crate) strings: Strings,
    /// Ancestor chains (pids, parent first).
    pub(crate) chains: Arena<u32>,
    /// Threads (every label of a stack).
    pub(crate) threads: Table<Thread>,
    /// Stacks, in order of first appearance.
    pub(crate) stacks: Vec<Stack>,
    /// Stack ids by (sequence, kernel frames, thread).
    stack_ids: HashTable<u32>,
    state: RandomState,
    /// The (stack, count) entries of every member, member after member.
    pub(crate) entries: Vec<Entry>,
    /// Where each member's entries end in `entries`.
    pub(crate) member_ends: Vec<u32>,
    /// The (stack, second, count) entries of every member's per-second counts, member after
    /// member (stacks without them have none).
    pub(crate) seconds: Vec<SecondEntry>,
    /// Where each member's per-second entries end in `seconds`.
    pub(crate) second_ends: Vec<u32>,
    /// Scratch: a slice's name ids in the hour's, a stack's frames, the stacks of the slice
    /// being folded (stack → its entry).
    remap: Vec<u32>,
    frames: Vec<u32>,
    seen: HashMap<u32, usize>,
}

impl RollupBuilder {
    /// An empty roll-up whose compact form may take at most `limit` bytes.
    pub fn new(limit: usize) -> RollupBuilder {
        let mut chains = Arena::default();
        chains.intern(&[]); // id 0: no ancestors
        RollupBuilder {
            limit,
            members: Vec::new(),
            period_ns: 0,
            member_periods: Vec::new(),
            entry_cpu: None,
            names: Strings::default(),
            sequences: Arena::default(),
            strings: Strings::default(),
            chains,
            threads: Table::default(),
            stacks: Vec::new(),
            stack_ids: HashTable::new(),
            state: RandomState::new(),
            entries: Vec::new(),
            member_ends: Vec::new(),
            seconds: Vec::new(),
            second_ends: Vec::new(),
            remap: Vec::new(),
            frames: Vec::new(),
            seen: HashMap::new(),
        }
    }

    /// The members folded so far, `(start_ns, end_ns)`, oldest first.
    pub fn members(&self) -> &[(u64, u64)] {
        &self.members
    }

    /// Fold `slice`, known to the index as `span`, in as the next member. On an error the
    /// builder is left unusable (the hour stays as slices).
    pub fn fold(&mut self, slice: &Slice, span: (u64, u64)) -> Result<(), BuildError> {
        if self
            .members
            .last()
            .is_some_and(|&(start, _)| span.0 <= start)
        {
            return Err(BuildError::OutOfOrder);
        }
        if self.entry_cpu.is_none() && !self.follows_from_counts(slice) {
            self.keep_entry_cpu();
        }
        self.period_ns = match self.period_ns {
            0 => slice.period_ns,
            p if slice.period_ns > 0 => p.min(slice.period_ns),
            p => p,
        };
        self.members.push(span);
        self.member_periods.push(slice.period_ns);
        self.remap.clear();
        for name in &slice.names {
            let id = self.names.intern(name);
            self.remap.push(id);
        }
        self.seen.clear();
        for s in &slice.stacks {
            self.frames.clear();
            let remap = &self.remap;
            self.frames.extend(
                s.frames
                    .iter()
                    .map(|&f| remap.get(f as usize).copied().unwrap_or(0)),
            );
            let sequence = self.sequences.intern(&self.frames);
            let thread = Thread {
                pid: s.pid,
                tid: s.tid,
                process_start: s.process_start,
                uid: s.uid,
                share_uid: s.share_uid,
                comm: s.comm.as_deref().map_or(0, |c| self.strings.intern(c) + 1),
                cgroup: s
                    .cgroup
                    .as_deref()
                    .map_or(0, |c| self.strings.intern(c) + 1),
                ancestors: self.chains.intern(&s.ancestors),
            };
            let thread = self.threads.intern(thread);
            let times = (s.cpu_ns, s.off_cpu_ns);
            let stack = self.add(sequence, s.kernel_frames, thread, s.count, times, s.cpu_ns);
            self.add_seconds(stack, s.seconds.iter());
        }
        self.member_ends.push(self.entries.len() as u32);
        self.second_ends.push(self.seconds.len() as u32);
        let bytes = self.memory();
        if bytes > self.limit {
            return Err(BuildError::TooLarge {
                bytes,
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// Add `stack`'s samples per second in the member being folded.
    fn add_seconds(&mut self, stack: u32, counts: impl Iterator<Item = (u32, u64)>) {
        for (second, mut count) in counts {
            while count > 0 {
                let part = count.min(u64::from(u32::MAX));
                room(&mut self.seconds, 1);
                self.seconds.push(SecondEntry {
                    stack,
                    second,
                    count: part as u32,
                });
                count -= part;
            }
        }
    }

    /// Each stack's samples per second over the members (numbered across them: see
    /// `seconds.rs`), seconds ascending, each once: `(starts, pairs)`, stack `i`'s at
    /// `pairs[starts[i]..starts[i + 1]]`.
    pub(crate) fn second_counts(&self) -> (Vec<u32>, Vec<(u32, u64)>) {
        let bases = crate::seconds::member_seconds(&self.members);
        let mut starts = vec![0u32; self.stacks.len() + 1];
        for e in &self.seconds {
            starts[e.stack as usize + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut next = starts.clone();
        let mut pairs = vec![(0u32, 0u64); self.seconds.len()];
        let mut member = 0usize;
        for (k, e) in self.seconds.iter().enumerate() {
            while self.second_ends[member] as usize <= k {
                member += 1;
            }
            let global = bases[member].saturating_add(u64::from(e.second));
            let at = &mut next[e.stack as usize];
            pairs[*at as usize] = (global.min(u64::from(u32::MAX)) as u32, u64::from(e.count));
            *at += 1;
        }
        // Each stack's by second, each second once (a stack twice in a slice).
        let mut merged = Vec::with_capacity(pairs.len());
        let mut out_starts = Vec::with_capacity(starts.len());
        out_starts.push(0u32);
        for i in 0..self.stacks.len() {
            let these = &mut pairs[starts[i] as usize..starts[i + 1] as usize];
            these.sort_unstable_by_key(|p| p.0);
            let first = merged.len();
            for &(second, count) in these.iter() {
                match merged[first..].last_mut() {
                    Some((s, c)) if *s == second => *c += count,
                    _ => merged.push((second, count)),
                }
            }
            out_starts.push(merged.len() as u32);
        }
        (out_starts, merged)
    }

    /// Whether every CPU stack of `slice` holds its count times the hour's one period so far
    /// (then its entries' CPU time need not be kept).
    fn follows_from_counts(&self, slice: &Slice) -> bool {
        let period = slice.period_ns;
        self.member_periods.first().is_none_or(|&p| p == period)
            && slice
                .stacks
                .iter()
                .all(|s| s.off_cpu_ns > 0 || s.cpu_ns == s.count.saturating_mul(period))
    }

    /// Start keeping each entry's CPU time: the entries so far get theirs from their counts
    /// and the one period of the members before.
    fn keep_entry_cpu(&mut self) {
        let period = self.member_periods.first().copied().unwrap_or(0);
        let stacks = &self.stacks;
        let cpu = self
            .entries
            .iter()
            .map(|e| {
                if stacks[e.stack as usize].off_cpu_ns > 0 {
                    0
                } else {
                    u64::from(e.count) * period
                }
            })
            .collect();
        self.entry_cpu = Some(cpu);
    }

    /// Add `count` samples (`(cpu_ns, off_cpu_ns)`) of the member being folded to the stack
    /// (sequence, kernel frames, thread), created on first sight; `entry_cpu` is the CPU time
    /// those samples hold in the member (kept per entry once [`RollupBuilder::entry_cpu`] is);
    /// returns its id.
    fn add(
        &mut self,
        sequence: u32,
        kernel_frames: u32,
        thread: u32,
        count: u64,
        (cpu_ns, off_cpu_ns): (u64, u64),
        entry_cpu: u64,
    ) -> u32 {
        let key = (sequence, kernel_frames, thread);
        let RollupBuilder {
            stacks,
            stack_ids,
            state,
            ..
        } = self;
        let hash = state.hash_one(key);
        let same = |s: &Stack| (s.sequence, s.kernel_frames, s.thread) == key;
        let i = match stack_ids.find(hash, |&i| same(&stacks[i as usize])) {
            Some(&i) => i,
            None => {
                let i = stacks.len() as u32;
                room(stacks, 1);
                stacks.push(Stack {
                    count: 0,
                    cpu_ns: 0,
                    off_cpu_ns: 0,
                    sequence,
                    kernel_frames,
                    thread,
                });
                stack_ids.insert_unique(hash, i, |&i| {
                    let s = &stacks[i as usize];
                    state.hash_one((s.sequence, s.kernel_frames, s.thread))
                });
                i
            }
        };
        let stack = &mut stacks[i as usize];
        stack.count += count;
        stack.cpu_ns += cpu_ns;
        stack.off_cpu_ns += off_cpu_ns;
        // Twice in one slice (never written so, but allowed): one count for the member.
        let mut rest = match self.seen.get(&i) {
            Some(&e) => {
                let entry = &mut self.entries[e];
                let room = u64::from(u32::MAX - entry.count).min(count);
                entry.count += room as u32;
                if let Some(cpu) = self.entry_cpu.as_mut() {
                    cpu[e] += entry_cpu;
                }
                count - room
            }
            None => count,
        };
        // The CPU time goes with the first entry of the member (the others, of a count past
        // u32::MAX, hold none).
        let mut cpu_left = if self.seen.contains_key(&i) {
            0
        } else {
            entry_cpu
        };
        while rest > 0 || !self.seen.contains_key(&i) {
            let part = rest.min(u64::from(u32::MAX));
            self.seen.insert(i, self.entries.len());
            room(&mut self.entries, 1);
            self.entries.push(Entry {
                stack: i,
                count: part as u32,
            });
            if let Some(cpu) = self.entry_cpu.as_mut() {
                room(cpu, 1);
                cpu.push(std::mem::take(&mut cpu_left));
            }
            rest -= part;
        }
        i
    }

    /// The roll-up of the stacks `keep` says (by id), every member kept: built anew, so that
    /// names, sequences, labels and threads only the others used are gone.
    pub(crate) fn retain(&self, keep: &[bool]) -> RollupBuilder {
        let mut out = RollupBuilder::new(self.limit);
        out.members = self.members.clone();
        out.period_ns = self.period_ns;
        out.member_periods = self.member_periods.clone();
        if self.entry_cpu.is_some() {
            out.entry_cpu = Some(Vec::new());
        }
        let mut names: HashMap<u32, u32> = HashMap::new();
        let mut sequences: HashMap<u32, u32> = HashMap::new();
        let mut threads: HashMap<u32, u32> = HashMap::new();
        let mut stacks: Vec<Option<u32>> = vec![None; self.stacks.len()];
        let mut start = 0;
        for &end in &self.member_ends {
            out.seen.clear();
            for (k, e) in self.entries[start..end as usize].iter().enumerate() {
                if !keep.get(e.stack as usize).copied().unwrap_or(true) {
                    continue;
                }
                let cpu = self.entry_cpu.as_ref().map_or(0, |c| c[start + k]);
                let old = self.stacks[e.stack as usize];
                let sequence = *sequences.entry(old.sequence).or_insert_with(|| {
                    out.frames.clear();
                    for &f in self.sequences.get(old.sequence) {
                        let id = *names
                            .entry(f)
                            .or_insert_with(|| out.names.intern(self.names.get(f)));
                        out.frames.push(id);
                    }
                    out.sequences.intern(&out.frames)
                });
                let thread = *threads.entry(old.thread).or_insert_with(|| {
                    let t = self.threads.items()[old.thread as usize];
                    let mut text = |id: u32| {
                        if id == 0 {
                            0
                        } else {
                            out.strings.intern(self.strings.get(id - 1)) + 1
                        }
                    };
                    let (comm, cgroup) = (text(t.comm), text(t.cgroup));
                    let ancestors = out.chains.intern(self.chains.get(t.ancestors));
                    out.threads.intern(Thread {
                        comm,
                        cgroup,
                        ancestors,
                        ..t
                    })
                });
                let id = out.add(
                    sequence,
                    old.kernel_frames,
                    thread,
                    u64::from(e.count),
                    (0, 0),
                    cpu,
                );
                stacks[e.stack as usize] = Some(id);
            }
            out.member_ends.push(out.entries.len() as u32);
            start = end as usize;
        }
        // The kept stacks' seconds, member by member.
        let mut start = 0;
        for &end in &self.second_ends {
            for e in &self.seconds[start..end as usize] {
                if let Some(Some(new)) = stacks.get(e.stack as usize) {
                    room(&mut out.seconds, 1);
                    out.seconds.push(SecondEntry { stack: *new, ..*e });
                }
            }
            out.second_ends.push(out.seconds.len() as u32);
            start = end as usize;
        }
        // The times are the hour's totals, not the members'.
        for (old, new) in self.stacks.iter().zip(&stacks) {
            if let Some(new) = new {
                let stack = &mut out.stacks[*new as usize];
                stack.cpu_ns = old.cpu_ns;
                stack.off_cpu_ns = old.off_cpu_ns;
            }
        }
        out
    }

    /// Bytes of memory the compact form takes (tables and buffers at their capacity): what
    /// [`RollupBuilder::new`]'s bound applies to.
    pub fn memory(&self) -> usize {
        use std::mem::size_of;
        self.names.memory()
            + self.sequences.memory()
            + self.strings.memory()
            + self.chains.memory()
            + self.threads.memory()
            + table_bytes(&self.stack_ids)
            + self.stacks.capacity() * size_of::<Stack>()
            + self.entries.capacity() * size_of::<Entry>()
            + self.member_ends.capacity() * 4
            + self.members.capacity() * size_of::<(u64, u64)>()
            + self.member_periods.capacity() * 8
            + self.seconds.capacity() * size_of::<SecondEntry>()
            + self.second_ends.capacity() * 4
            + self.entry_cpu.as_ref().map_or(0, |c| c.capacity() * 8)
    }

    /// Each stack's (member, count) pairs, oldest member first: `(starts, pairs)`, the pairs
    /// of stack `i` at `pairs[starts[i]..starts[i + 1]]` (a counting sort of the entries).
    #[cfg(test)]
    pub(crate) fn member_counts(&self) -> (Vec<u32>, Vec<(u32, u32)>) {
        let (starts, order) = self.entries_by_stack();
        let pairs = order
            .iter()
            .map(|&(m, k)| (m, self.entries[k as usize].count))
            .collect();
        (starts, pairs)
    }

    /// The entries by stack, oldest member first: `(starts, (member, entry index))`, stack
    /// `i`'s at `[starts[i]..starts[i + 1]]` (a counting sort).
    pub(crate) fn entries_by_stack(&self) -> (Vec<u32>, Vec<(u32, u32)>) {
        let mut starts = vec![0u32; self.stacks.len() + 1];
        for e in &self.entries {
            starts[e.stack as usize + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut next = starts.clone();
        let mut order = vec![(0u32, 0u32); self.entries.len()];
        let mut member = 0u32;
        for (k, e) in self.entries.iter().enumerate() {
            while self.member_ends[member as usize] as usize <= k {
                member += 1;
            }
            let at = &mut next[e.stack as usize];
            order[*at as usize] = (member, k as u32);
            *at += 1;
        }
        (starts, order)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::slice::tests::example;

    const S: u64 = 1_000_000_000;

    /// Slice `i` of a history starting at an hour: counts, threads, names and labels vary
    /// with `i`, and some stacks appear in one slice only.
    pub(crate) fn slice(i: u64) -> Slice {
        let mut s = example(1_700_002_800 * S + i * 10 * S);
        s.stacks[0].count = 1 + i % 7;
        s.stacks[1].count = i % 3;
        s.stacks[1].tid = 200 + (i % 2) as u32;
        if i % 5 == 0 {
            s.names.push(format!("only_in_{i}"));
            s.stacks[2].frames = vec![0, s.names.len() as u32 - 1];
        }
        if i % 4 == 1 {
            // A new process, as under churn, with a name first seen here.
            let mut st = s.stacks[0].clone();
            st.pid = 1000 + i as u32;
            st.tid = st.pid;
            st.comm = Some(format!("job{}", i % 3));
            st.ancestors = vec![100, 90, 1];
            st.cgroup = None;
            st.uid = None;
            s.names.insert(0, format!("start_{i}"));
            for other in &mut s.stacks {
                other.frames.iter_mut().for_each(|f| *f += 1);
            }
            st.frames = vec![0, 1, 2];
            st.kernel_frames = 1;
            s.stacks.push(st);
        }
        s.stacks.retain(|st| st.count > 0);
        for st in &mut s.stacks {
            st.cpu_ns = st.count * s.period_ns;
        }
        crate::slice::tests::spread_seconds(&mut s, i);
        s
    }

    #[test]
    fn stacks_merge_and_their_member_counts_chain_in_order() {
        let mut b = RollupBuilder::new(1 << 30);
        let slices: Vec<Slice> = (0..20).map(slice).collect();
        for s in &slices {
            b.fold(s, (s.start_ns, s.end_ns)).unwrap();
        }
        assert_eq!(b.members().len(), 20);
        let total: u64 = slices.iter().map(Slice::samples).sum();
        assert_eq!(b.stacks.iter().map(|s| s.count).sum::<u64>(), total);
        let (starts, pairs) = b.member_counts();
        for (i, stack) in b.stacks.iter().enumerate() {
            let these = &pairs[starts[i] as usize..starts[i + 1] as usize];
            assert_eq!(
                these.iter().map(|e| u64::from(e.1)).sum::<u64>(),
                stack.count
            );
            assert!(these.windows(2).all(|w| w[0].0 < w[1].0));
        }
        // Merged as a whole roll-up merges them: fewer stacks than the slices hold.
        let whole = crate::store::rollup::Rollup::build(&slices);
        assert_eq!(b.stacks.len(), whole.slice.stacks.len());
        assert!(b.stacks.len() < slices.iter().map(|s| s.stacks.len()).sum());
    }

    #[test]
    fn an_old_slice_or_the_bound_stop_the_fold() {
        let mut b = RollupBuilder::new(1 << 30);
        let s0 = slice(0);
        b.fold(&s0, (s0.start_ns, s0.end_ns)).unwrap();
        assert_eq!(
            b.fold(&s0, (s0.start_ns, s0.end_ns)),
            Err(BuildError::OutOfOrder)
        );
        let mut small = RollupBuilder::new(200);
        assert!(matches!(
            small.fold(&s0, (s0.start_ns, s0.end_ns)),
            Err(BuildError::TooLarge { limit: 200, .. })
        ));
    }

    /// Slice `i` sampled at a tenth of the frequency: a tenth of the counts, each standing
    /// for ten times the CPU time.
    pub(crate) fn slow(i: u64) -> Slice {
        let mut s = slice(i);
        s.period_ns *= 10;
        for st in &mut s.stacks {
            st.count = st.count.div_ceil(10);
            st.cpu_ns = st.count * s.period_ns;
        }
        crate::slice::tests::spread_seconds(&mut s, i);
        s
    }

    #[test]
    fn members_at_other_frequencies_keep_each_entrys_cpu_time() {
        let slices = [slice(0), slice(1), slow(2), slice(3)];
        let mut b = RollupBuilder::new(1 << 30);
        for (k, s) in slices.iter().enumerate() {
            b.fold(s, (s.start_ns, s.end_ns)).unwrap();
            assert_eq!(
                b.entry_cpu.is_some(),
                k >= 2,
                "kept from the first slow member on"
            );
        }
        assert_eq!(b.period_ns, slices[0].period_ns);
        let periods: Vec<u64> = slices.iter().map(|s| s.period_ns).collect();
        assert_eq!(b.member_periods, periods);
        // Each member's CPU time, stack by stack, as the slices hold it.
        let cpu = b.entry_cpu.as_ref().unwrap();
        let mut start = 0;
        for (m, &end) in b.member_ends.iter().enumerate() {
            let held: u64 = cpu[start..end as usize].iter().sum();
            let want: u64 = slices[m].stacks.iter().map(|s| s.cpu_ns).sum();
            assert_eq!(held, want, "member {m}");
            start = end as usize;
        }
        // Kept through a cut of the stacks (the per-uid share).
        let kept = b.retain(&vec![true; b.stacks.len()]);
        assert_eq!(kept.entry_cpu, b.entry_cpu);
        assert_eq!(kept.member_periods, b.member_periods);
        // One frequency throughout: nothing more is kept.
        let mut same = RollupBuilder::new(1 << 30);
        for s in &slices[..2] {
            same.fold(s, (s.start_ns, s.end_ns)).unwrap();
        }
        assert!(same.entry_cpu.is_none());
    }
}
