//! An hour's roll-up built one slice at a time, in a compact form: each slice is folded in as
//! it is written (or read back), so that the end of the hour costs only the encoding
//! (`rollup_writer.rs`), never a re-read of its slices nor a whole [`crate::rollup::Rollup`]
//! in memory.
//!
//! Compact form: frame names, frame sequences, label strings, ancestor chains and threads
//! (every label of a stack) are interned once each; a stack is the fixed-size key
//! (sequence, kernel frames, thread) with its totals and a chain of (member, count) entries in
//! one arena. Its memory is accounted for and bounded: past the bound the fold fails and the
//! hour stays as slices (as a roll-up too large to write does).

use std::collections::HashMap;
use std::hash::Hash;

use crate::slice::Slice;

/// Why a slice could not be folded into the hour's roll-up (the hour then stays as slices).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// The slices of the hour do not share one sampling period.
    #[error("the sampling frequency changed within the hour")]
    PeriodChanged,
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

/// "No entry" in the entry arena.
const NONE: u32 = u32::MAX;

/// Values interned once, by id in order of first appearance.
#[derive(Debug)]
pub(crate) struct Interner<K: ?Sized> {
    ids: HashMap<Box<K>, u32>,
    /// Heap bytes of the keys (their boxes), for the memory bound.
    heap: usize,
}

impl<K: ?Sized> Default for Interner<K> {
    fn default() -> Self {
        Interner {
            ids: HashMap::new(),
            heap: 0,
        }
    }
}

/// A key's heap size, for the memory bound.
pub(crate) trait HeapSize {
    /// Bytes of heap the boxed key takes.
    fn heap_size(&self) -> usize;
}

impl HeapSize for str {
    fn heap_size(&self) -> usize {
        self.len()
    }
}

impl HeapSize for [u32] {
    fn heap_size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

/// Malloc's own overhead per allocation (glibc: a 16-byte minimum chunk granularity).
const ALLOC_OVERHEAD: usize = 16;

impl<K: ?Sized + Eq + Hash + HeapSize> Interner<K>
where
    Box<K>: for<'a> From<&'a K>,
{
    /// The id of `key`, interned on first sight.
    fn intern(&mut self, key: &K) -> u32 {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = self.ids.len() as u32;
        self.heap += key.heap_size() + ALLOC_OVERHEAD;
        self.ids.insert(Box::from(key), id);
        id
    }

    /// Every key, by id.
    pub(crate) fn ordered(&self) -> Vec<&K> {
        let mut out: Vec<Option<&K>> = vec![None; self.ids.len()];
        for (k, &id) in &self.ids {
            out[id as usize] = Some(k);
        }
        out.into_iter().map(|k| k.expect("dense ids")).collect()
    }

    /// How many keys.
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Bytes of memory taken (table and keys).
    fn memory(&self) -> usize {
        self.heap + self.ids.capacity() * (std::mem::size_of::<(Box<K>, u32)>() + 1)
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
    /// The process's effective uid, if known.
    pub uid: Option<u32>,
    /// The command name's id in `strings`, plus one (0: unknown).
    pub comm: u32,
    /// The cgroup's id in `strings`, plus one (0: unknown).
    pub cgroup: u32,
    /// The ancestors' id in `chains`.
    pub ancestors: u32,
}

/// A merged stack: its identity, its totals and its first and last (member, count) entry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stack {
    /// The hour's total count.
    pub count: u64,
    /// The hour's total CPU time, ns.
    pub cpu_ns: u64,
    /// The frame sequence's id in `sequences`.
    pub sequence: u32,
    /// How many innermost frames are kernel frames.
    pub kernel_frames: u32,
    /// The thread's id in `threads`.
    pub thread: u32,
    /// First entry in the arena.
    pub head: u32,
    /// Last entry in the arena.
    tail: u32,
}

/// One stack's count in one member slice; `next` chains the stack's entries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    /// Samples in that member.
    pub count: u64,
    /// The member's index.
    pub member: u32,
    /// The stack's next entry, or [`NONE`].
    pub next: u32,
}

/// An hour's roll-up in the making (see the module's documentation).
#[derive(Debug)]
pub struct RollupBuilder {
    /// The bound on [`RollupBuilder::memory`].
    limit: usize,
    /// The members' `(start_ns, end_ns)` (as the index knows them), oldest first.
    pub(crate) members: Vec<(u64, u64)>,
    /// The members' common period (ns per sample).
    pub(crate) period_ns: u64,
    /// Frame names (function names).
    pub(crate) names: Interner<str>,
    /// Frame sequences, outermost first, as name ids.
    pub(crate) sequences: Interner<[u32]>,
    /// Command names and cgroup paths.
    pub(crate) strings: Interner<str>,
    /// Ancestor chains (pids, parent first).
    pub(crate) chains: Interner<[u32]>,
    /// Threads (every label of a stack).
    threads: HashMap<Thread, u32>,
    /// Stacks by (sequence, kernel frames, thread).
    stack_ids: HashMap<[u32; 3], u32>,
    /// Stacks, in order of first appearance.
    pub(crate) stacks: Vec<Stack>,
    /// The (member, count) entries of every stack.
    pub(crate) entries: Vec<Entry>,
    /// Scratch: a slice's name ids in the hour's, and a stack's frames.
    remap: Vec<u32>,
    frames: Vec<u32>,
}

impl RollupBuilder {
    /// An empty roll-up whose compact form may take at most `limit` bytes.
    pub fn new(limit: usize) -> RollupBuilder {
        let mut chains = Interner::default();
        chains.intern(&[][..]); // id 0: no ancestors
        RollupBuilder {
            limit,
            members: Vec::new(),
            period_ns: 0,
            names: Interner::default(),
            sequences: Interner::default(),
            strings: Interner::default(),
            chains,
            threads: HashMap::new(),
            stack_ids: HashMap::new(),
            stacks: Vec::new(),
            entries: Vec::new(),
            remap: Vec::new(),
            frames: Vec::new(),
        }
    }

    /// The members folded so far, `(start_ns, end_ns)`, oldest first.
    pub fn members(&self) -> &[(u64, u64)] {
        &self.members
    }

    /// Fold `slice`, known to the index as `span`, in as the next member. On an error the
    /// builder is left unusable (the hour stays as slices); nothing is half-added to a stack.
    pub fn fold(&mut self, slice: &Slice, span: (u64, u64)) -> Result<(), BuildError> {
        if self
            .members
            .last()
            .is_some_and(|&(start, _)| span.0 <= start)
        {
            return Err(BuildError::OutOfOrder);
        }
        if self.members.is_empty() {
            self.period_ns = slice.period_ns;
        } else if slice.period_ns != self.period_ns {
            return Err(BuildError::PeriodChanged);
        }
        let member = self.members.len() as u32;
        self.members.push(span);
        self.remap.clear();
        for name in &slice.names {
            let id = self.names.intern(name);
            self.remap.push(id);
        }
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
                comm: s.comm.as_deref().map_or(0, |c| self.strings.intern(c) + 1),
                cgroup: s
                    .cgroup
                    .as_deref()
                    .map_or(0, |c| self.strings.intern(c) + 1),
                ancestors: self.chains.intern(&s.ancestors),
            };
            let next = self.threads.len() as u32;
            let thread = *self.threads.entry(thread).or_insert(next);
            self.add(sequence, s.kernel_frames, thread, member, s.count, s.cpu_ns);
        }
        let bytes = self.memory();
        if bytes > self.limit {
            return Err(BuildError::TooLarge {
                bytes,
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// Add `count` samples (`cpu_ns`) of member `member` to the stack (sequence, kernel
    /// frames, thread), created on first sight.
    fn add(
        &mut self,
        sequence: u32,
        kernel_frames: u32,
        thread: u32,
        member: u32,
        count: u64,
        cpu_ns: u64,
    ) {
        let next = self.stacks.len() as u32;
        let i = *self
            .stack_ids
            .entry([sequence, kernel_frames, thread])
            .or_insert(next);
        if i == next {
            self.stacks.push(Stack {
                count: 0,
                cpu_ns: 0,
                sequence,
                kernel_frames,
                thread,
                head: NONE,
                tail: NONE,
            });
        }
        let stack = &mut self.stacks[i as usize];
        stack.count += count;
        stack.cpu_ns += cpu_ns;
        if stack.tail != NONE && self.entries[stack.tail as usize].member == member {
            self.entries[stack.tail as usize].count += count;
            return;
        }
        let e = self.entries.len() as u32;
        self.entries.push(Entry {
            count,
            member,
            next: NONE,
        });
        if stack.tail == NONE {
            stack.head = e;
        } else {
            self.entries[stack.tail as usize].next = e;
        }
        stack.tail = e;
    }

    /// Bytes of memory the compact form takes (tables at their capacity, keys, malloc's
    /// overhead per key): what [`RollupBuilder::new`]'s bound applies to.
    pub fn memory(&self) -> usize {
        use std::mem::size_of;
        let table = |cap: usize, entry: usize| cap * (entry + 1);
        self.names.memory()
            + self.sequences.memory()
            + self.strings.memory()
            + self.chains.memory()
            + table(self.threads.capacity(), size_of::<(Thread, u32)>())
            + table(self.stack_ids.capacity(), size_of::<([u32; 3], u32)>())
            + self.stacks.capacity() * size_of::<Stack>()
            + self.entries.capacity() * size_of::<Entry>()
            + self.members.capacity() * size_of::<(u64, u64)>()
    }

    /// Threads by id.
    pub(crate) fn threads(&self) -> Vec<Thread> {
        let mut out = vec![None; self.threads.len()];
        for (t, &id) in &self.threads {
            out[id as usize] = Some(*t);
        }
        out.into_iter().map(|t| t.expect("dense ids")).collect()
    }

    /// A stack's (member, count) entries, oldest member first.
    pub(crate) fn entries_of(&self, stack: &Stack) -> impl Iterator<Item = &Entry> + '_ {
        let mut e = stack.head;
        std::iter::from_fn(move || {
            let entry = self.entries.get(e as usize)?;
            e = entry.next;
            Some(entry)
        })
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
        for stack in &b.stacks {
            let entries: Vec<_> = b.entries_of(stack).collect();
            assert_eq!(entries.iter().map(|e| e.count).sum::<u64>(), stack.count);
            assert!(entries.windows(2).all(|w| w[0].member < w[1].member));
        }
        // Merged as a whole roll-up merges them: fewer stacks than the slices hold.
        let whole = crate::rollup::Rollup::build(&slices);
        assert_eq!(b.stacks.len(), whole.slice.stacks.len());
        assert!(b.stacks.len() < slices.iter().map(|s| s.stacks.len()).sum());
    }

    #[test]
    fn a_change_of_period_an_old_slice_or_the_bound_stop_the_fold() {
        let mut b = RollupBuilder::new(1 << 30);
        let s0 = slice(0);
        b.fold(&s0, (s0.start_ns, s0.end_ns)).unwrap();
        assert_eq!(
            b.fold(&s0, (s0.start_ns, s0.end_ns)),
            Err(BuildError::OutOfOrder)
        );
        let mut s1 = slice(1);
        s1.period_ns += 1;
        assert_eq!(
            b.fold(&s1, (s1.start_ns, s1.end_ns)),
            Err(BuildError::PeriodChanged)
        );
        let mut small = RollupBuilder::new(1000);
        assert!(matches!(
            small.fold(&s0, (s0.start_ns, s0.end_ns)),
            Err(BuildError::TooLarge { limit: 1000, .. })
        ));
    }
}
