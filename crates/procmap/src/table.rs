//! The process table: process incarnations, their threads' names and their executable
//! mappings over time.
//!
//! A pid is reused once its process exited, so a process is keyed by pid *and* start time (the
//! time of its FORK record; 0 for a process first seen otherwise: read from /proc, or named by
//! a record before its FORK arrived). Lookups take the time of the sample being resolved and
//! pick the incarnation alive then. Records from different CPUs arrive out of order, so every
//! record is applied to the incarnation its own time falls in, and a FORK that arrives after
//! records of the process it starts takes those records over from the incarnation before.
//! One incarnation's mappings, and a thread's names, are kept as `process.rs` says; who owns
//! a process is read as `owner.rs` says.
//!
//! This file holds the table and finds the incarnation of a pid at a time; the table's other
//! parts are in `table/`: applying the side-band records (`records.rs`, a process's FORK in
//! `fork.rs`), reading running processes from /proc (`synthesize.rs`), the lookups samples
//! make (`lookup.rs`), forgetting what ended (`prune.rs`) and the interned thread names
//! (`names.rs`).

use rustc_hash::FxHashMap;

use crate::files::FileTable;
use crate::process::{Process, Thread};

mod fork;
mod lookup;
mod names;
mod prune;
mod records;
mod synthesize;

pub use self::prune::Pruned;

/// Counters of what the table was told.
#[derive(Clone, Copy, Debug, Default)]
pub struct TableStats {
    /// Mappings added (from records, and read from /proc).
    pub mappings: u64,
    /// Names set (from records, including execs, and read from /proc).
    pub comms: u64,
    /// Execs.
    pub execs: u64,
    /// Processes and threads created.
    pub forks: u64,
    /// Processes and threads exited.
    pub exits: u64,
    /// Processes read from /proc.
    pub synthesized: u64,
    /// Prune passes.
    pub prunes: u64,
    /// Mappings not added because their process held [`MAX_MAPPINGS`](crate::MAX_MAPPINGS) already.
    pub mappings_dropped: u64,
    /// Forks whose child shares its parent's mappings (no copy).
    pub forks_shared: u64,
}

/// How much the table holds now (for status and soak tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableSizes {
    /// Distinct pids with at least one process incarnation.
    pub processes: usize,
    /// Process incarnations (a reused pid has several until the older ones are pruned).
    pub incarnations: usize,
    /// Threads.
    pub threads: usize,
    /// Thread-name entries (a thread has one per rename still needed).
    pub thread_names: usize,
    /// Mappings (pieces), over every incarnation.
    pub mappings: usize,
    /// Interned names.
    pub names: usize,
    /// Interned files.
    pub files: usize,
}

/// Every known process incarnation, keyed by pid; threads keyed by tid.
#[derive(Debug)]
pub struct ProcessTable {
    /// Incarnations of each pid, sorted by start time; never an empty list.
    processes: FxHashMap<u32, Vec<Process>>,
    threads: FxHashMap<u32, Thread>,
    names: Vec<String>,
    name_ids: FxHashMap<String, u32>,
    files: FileTable,
    stats: TableStats,
    /// Read uids from /proc (off in tests that use made-up pids).
    read_proc: bool,
}

impl Default for ProcessTable {
    fn default() -> ProcessTable {
        ProcessTable {
            processes: FxHashMap::default(),
            threads: FxHashMap::default(),
            names: Vec::new(),
            name_ids: FxHashMap::default(),
            files: FileTable::default(),
            stats: TableStats::default(),
            read_proc: true,
        }
    }
}

/// The incarnation that names samples at `time`: the last one started at or before it. None
/// before the first one known (an earlier process on the pid, pruned or never seen).
fn index_at(list: &[Process], time: u64) -> Option<usize> {
    list.partition_point(|p| p.start <= time).checked_sub(1)
}

impl ProcessTable {
    /// An empty table.
    pub fn new() -> ProcessTable {
        ProcessTable::default()
    }

    fn process_at(&self, pid: u32, time: u64) -> Option<&Process> {
        let list = self.processes.get(&pid)?;
        list.get(index_at(list, time)?)
    }

    fn process_at_mut(&mut self, pid: u32, time: u64) -> Option<&mut Process> {
        let list = self.processes.get_mut(&pid)?;
        let at = index_at(list, time)?;
        list.get_mut(at)
    }

    /// The incarnation a record of `pid` at `time` belongs to; one started at 0 when the
    /// record is older than every known one.
    fn process_for_record(&mut self, pid: u32, time: u64) -> &mut Process {
        let list = self.processes.entry(pid).or_default();
        let at = list.partition_point(|p| p.start <= time);
        if at == 0 {
            // `time` is before the first known start (> 0), or the pid is new.
            let mut process = Process::new(0);
            process.next_start = list.first().map(|p| p.start);
            list.insert(0, process);
            return &mut list[0];
        }
        &mut list[at - 1]
    }

    /// The interned files.
    pub fn files(&self) -> &FileTable {
        &self.files
    }

    /// Counters.
    pub fn stats(&self) -> TableStats {
        self.stats
    }

    /// Number of process incarnations known.
    pub fn process_count(&self) -> usize {
        self.processes.values().map(Vec::len).sum()
    }

    /// How much the table holds.
    pub fn sizes(&self) -> TableSizes {
        let processes = self.processes.values();
        TableSizes {
            processes: self.processes.len(),
            incarnations: processes.clone().map(Vec::len).sum(),
            mappings: processes.flatten().map(|p| p.mappings.len()).sum(),
            threads: self.threads.len(),
            thread_names: self.threads.values().map(|t| t.names.len()).sum(),
            names: self.names.len(),
            files: self.files.len(),
        }
    }
}

/// Set `series[time] = value` in a time-sorted series (replacing a value at the same time).
fn set_at<T>(series: &mut Vec<(u64, T)>, time: u64, value: T) {
    match series.binary_search_by_key(&time, |&(t, _)| t) {
        Ok(at) => series[at].1 = value,
        Err(at) => series.insert(at, (time, value)),
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
