//! Forgetting what no later sample can need: ended incarnations and threads, superseded
//! mappings and names, and the files no mapping refers to any more.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};
use tracing::debug;

use crate::files::FileId;
use crate::process::{Entry, Process, ProcessKey};

use super::{index_at, ProcessTable};

/// What one [`ProcessTable::prune`] forgot.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Files no remaining mapping refers to, sorted. Their ids are never handed out again;
    /// whatever other stages hold for them (pinned descriptors, unwind sections, symbolizers)
    /// can go.
    pub released_files: Vec<FileId>,
    /// Process incarnations forgotten.
    pub processes: usize,
    /// Those incarnations: what other stages hold for them (JIT maps) can go.
    pub removed: Vec<ProcessKey>,
    /// Threads forgotten.
    pub threads: usize,
    /// Mappings forgotten.
    pub mappings: usize,
    /// Interned names dropped when the intern table was rebuilt.
    pub names: usize,
}

impl ProcessTable {
    /// Forget what no sample at or after `before` can need: process incarnations and threads
    /// that ended before it, mappings that stopped holding by then, thread names superseded
    /// before it (the one in effect at `before` stays), interned names no longer used (when
    /// most are unused), and files no remaining mapping refers to (returned, for the stages
    /// that hold something per file). Every sample older than `before` must have been
    /// resolved, and every record older than it applied.
    ///
    /// A process whose main thread exited while a thread of it that has no EXIT is known
    /// stays (its other threads may go on), until the next process on its pid starts.
    pub fn prune(&mut self, before: u64) -> Pruned {
        self.stats.prunes += 1;
        let mut pruned = Pruned::default();
        let dead = self.ended_before(before);
        pruned.threads = self.prune_threads(&dead, before);
        self.prune_processes(&dead, before, &mut pruned);
        pruned.names = self.rebuild_names();
        pruned.released_files = self.release_unused_files();
        debug!(
            before,
            processes = pruned.processes,
            threads = pruned.threads,
            mappings = pruned.mappings,
            names = pruned.names,
            files = pruned.released_files.len(),
            "pruned the process table"
        );
        pruned
    }

    /// The incarnations that ended before `before`: by then their last thread exited (a
    /// thread with no exit keeps its process), or the next process on the pid started.
    fn ended_before(&self, before: u64) -> FxHashSet<ProcessKey> {
        // Earliest start of a thread with no exit, per pid.
        let mut running: FxHashMap<u32, u64> = FxHashMap::default();
        for t in self.threads.values().filter(|t| t.exit.is_none()) {
            let start = running.entry(t.pid).or_insert(t.start);
            *start = (*start).min(t.start);
        }
        let gone = |pid: u32, p: &Process| {
            p.end().is_some_and(|end| {
                end < before
                    && (p.next_start.is_some_and(|n| n < before)
                        || running.get(&pid).is_none_or(|&s| s >= end))
            })
        };
        let mut dead: FxHashSet<ProcessKey> = FxHashSet::default();
        for (&pid, list) in &self.processes {
            for p in list.iter().filter(|p| gone(pid, p)) {
                dead.insert(ProcessKey {
                    pid,
                    start_time: p.start,
                });
            }
        }
        dead
    }

    /// Forget the threads that exited before `before` and those of a `dead` process (exit
    /// seen or not), and the names of the others superseded before `before`; returns how many
    /// threads went.
    fn prune_threads(&mut self, dead: &FxHashSet<ProcessKey>, before: u64) -> usize {
        let threads_before = self.threads.len();
        let processes = &self.processes;
        self.threads.retain(|_, t| {
            // Seen last before the first process known on its pid: that one started after
            // the thread's process ended.
            let of_dead_process = processes.get(&t.pid).is_some_and(|list| {
                index_at(list, t.last_seen()).is_none_or(|i| {
                    dead.contains(&ProcessKey {
                        pid: t.pid,
                        start_time: list[i].start,
                    })
                })
            });
            !(of_dead_process || t.exit.is_some_and(|e| e < before))
        });
        for thread in self.threads.values_mut() {
            let keep_from = thread
                .names
                .partition_point(|&(t, _)| t <= before)
                .saturating_sub(1);
            thread.names.drain(..keep_from);
        }
        threads_before - self.threads.len()
    }

    /// Forget the `dead` incarnations (but for records of a later process on their pid whose
    /// FORK never came), and in the others the mappings, execs and owners superseded before
    /// `before`; counted in `pruned`.
    fn prune_processes(&mut self, dead: &FxHashSet<ProcessKey>, before: u64, pruned: &mut Pruned) {
        for (&pid, list) in self.processes.iter_mut() {
            let count = list.len();
            list.retain_mut(|p| {
                let before_len = p.mappings.len();
                let end = p.end();
                let key = ProcessKey {
                    pid,
                    start_time: p.start,
                };
                if dead.contains(&key) {
                    let end = end.unwrap_or(0);
                    if !p.holds_records_after_end(end) {
                        pruned.mappings += p.mappings.len();
                        pruned.removed.push(key);
                        return false;
                    }
                    // Records of a later process whose FORK never came stay.
                    Arc::make_mut(&mut p.mappings).retain(|e| e.origin >= end);
                }
                let keep = |e: &Entry| {
                    e.map.until > before && end.is_none_or(|end| end > before || e.origin >= end)
                };
                // A list shared with a parent or child is copied only when something goes.
                if !p.mappings.iter().all(keep) {
                    Arc::make_mut(&mut p.mappings).retain(keep);
                }
                pruned.mappings += before_len - p.mappings.len();
                let keep_from = p.execs.partition_point(|&t| t <= before).saturating_sub(1);
                p.execs.drain(..keep_from);
                let keep_from = p
                    .uids
                    .partition_point(|&(t, _)| t <= before)
                    .saturating_sub(1);
                p.uids.drain(..keep_from);
                true
            });
            pruned.processes += count - list.len();
        }
        self.processes.retain(|_, list| !list.is_empty());
    }

    /// Release the files no remaining mapping refers to; returns their ids, sorted.
    fn release_unused_files(&mut self) -> Vec<FileId> {
        // Each list once, however many processes share it.
        let mut lists: FxHashSet<*const Vec<Entry>> = FxHashSet::default();
        let used: FxHashSet<FileId> = self
            .processes
            .values()
            .flatten()
            .filter(|p| lists.insert(Arc::as_ptr(&p.mappings)))
            .flat_map(|p| p.mappings.iter().map(|e| e.map.file))
            .collect();
        let mut released: Vec<FileId> = self.files.ids().filter(|id| !used.contains(id)).collect();
        released.sort_unstable();
        for &id in &released {
            self.files.release(id);
        }
        released
    }
}
