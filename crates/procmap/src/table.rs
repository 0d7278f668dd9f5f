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

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use tracing::debug;

use crate::files::{FileId, FileParts, FileTable, MappedFile};
use crate::owner::{read_owner_if_there_at, read_status, UNKNOWN_UID};
use crate::proc_fs::{makedev, parse_maps_line};
use crate::process::{Entry, Inherited, Mapping, Process, ProcessKey, Thread, FOREVER, NO_NAME};
use crate::ProcError;

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

/// Interned names are rebuilt when fewer than half are in use, beyond this many.
const MIN_NAMES_TO_REBUILD: usize = 64;

impl ProcessTable {
    /// An empty table.
    pub fn new() -> ProcessTable {
        ProcessTable::default()
    }

    fn intern_name(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.name_ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.name_ids.insert(name.to_string(), id);
        id
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

    /// Record that `pid` mapped `file` at `start..start+len` (file offset `pgoff`) at `time`.
    /// Overlapped parts of older mappings stop holding at `time`. Returns the new mapping.
    pub fn add_mapping(
        &mut self,
        pid: u32,
        time: u64,
        start: u64,
        len: u64,
        pgoff: u64,
        file: MappedFile,
    ) -> Mapping {
        self.add_mapping_of(pid, time, start, len, pgoff, file.parts())
    }

    /// [`ProcessTable::add_mapping`] of a file named by borrowed parts (what an MMAP2 record
    /// says): nothing is allocated for a file already known.
    pub fn add_mapping_of(
        &mut self,
        pid: u32,
        time: u64,
        start: u64,
        len: u64,
        pgoff: u64,
        file: FileParts<'_>,
    ) -> Mapping {
        let file = self.files.intern_parts(file);
        self.stats.mappings += 1;
        let map = Mapping {
            start,
            end: start.saturating_add(len),
            pgoff,
            file,
            since: time,
            until: FOREVER,
        };
        let process = self.process_for_record(pid, time);
        let added = process.insert_mapping(map);
        let dropped = std::mem::take(&mut process.dropped);
        self.stats.mappings_dropped += dropped;
        added
    }

    /// Record a thread's new name; `exec` means the process replaced its address space: its
    /// owner is [`UNKNOWN_UID`] from the exec on (a set-uid program runs as another user),
    /// until it is read from /proc when the process is first sampled after the exec.
    pub fn set_comm(&mut self, pid: u32, tid: u32, time: u64, name: &str, exec: bool) {
        self.stats.comms += 1;
        let id = self.intern_name(name);
        let thread = self
            .threads
            .entry(tid)
            .or_insert_with(|| Thread::new(pid, 0));
        if time >= thread.start {
            thread.pid = pid;
        }
        thread.add_name(time, id);
        if tid != pid {
            self.thread_record(pid, time);
        }
        if exec {
            self.stats.execs += 1;
            let read_proc = self.read_proc;
            let process = self.process_for_record(pid, time);
            if let Err(at) = process.execs.binary_search(&time) {
                process.execs.insert(at, time);
            }
            process.end_mappings_before(time);
            if read_proc && process.exec_uid_unread.is_none_or(|t| t <= time) {
                process.exec_uid_unread = Some(time);
                set_at(&mut process.uids, time, UNKNOWN_UID);
            }
        }
    }

    /// The process on `pid` is sampled at `time`: if it exec'd before and its owner since the
    /// exec was not read, read it now from /proc (one small read per exec of a sampled
    /// process; see [`owner_of`](crate::owner_of)). Not when the process is known to have exited (its pid
    /// may name another process already), nor when the process on the pid now started after
    /// the exec (the pid was reused): the owner then stays [`UNKNOWN_UID`]. A rename since the
    /// exec does not matter.
    pub fn read_exec_uid(&mut self, pid: u32, time: u64) {
        let Some(process) = self.process_at_mut(pid, time) else {
            return;
        };
        let Some(exec) = process.exec_uid_unread else {
            return;
        };
        if exec > time {
            return;
        }
        process.exec_uid_unread = None;
        if process.end().is_some() {
            return;
        }
        if let Some(uid) = read_owner_if_there_at(pid, exec) {
            set_at(&mut process.uids, exec, uid);
        }
    }

    /// Record a new process (pid != ppid) or thread (pid == ppid) created at `time`. A new
    /// process starts a new incarnation of its pid: it inherits its parent's mappings, name
    /// and uid, never those of an earlier process on the same pid.
    pub fn fork(&mut self, pid: u32, ppid: u32, tid: u32, ptid: u32, time: u64) {
        self.stats.forks += 1;
        let parent_name = self
            .name_id_at(ptid, time)
            .or_else(|| self.name_id_at(ppid, time));
        let thread = self
            .threads
            .entry(tid)
            .or_insert_with(|| Thread::new(pid, time));
        if time >= thread.start {
            thread.pid = pid;
            thread.start = time;
            if thread.exit.is_some_and(|e| e <= time) {
                // The exit of the thread that had this tid before.
                thread.exit = None;
            }
        }
        // Inherited name (or "unknown", so that an earlier thread's name does not show), in
        // effect from the fork until a later comm.
        thread.add_name(time, parent_name.unwrap_or(NO_NAME));
        if pid != ppid {
            self.start_process(pid, ppid, time);
        } else if tid != pid {
            self.thread_record(pid, time);
        }
    }

    /// A record of a thread other than the main one: the process was alive at `time`.
    fn thread_record(&mut self, pid: u32, time: u64) {
        let process = self.process_for_record(pid, time);
        process.last_thread_record = process.last_thread_record.max(time);
    }

    fn start_process(&mut self, pid: u32, ppid: u32, time: u64) {
        // A parent that exec'd and was not sampled since has its uid read now, for the child
        // to inherit (one read per exec'd process that forks before it is sampled).
        self.read_exec_uid(ppid, time);
        // The parent's mappings as of the fork: shared as they are when every one holding at
        // the fork holds for good (the common case: an O(1) fork, whatever the parent holds);
        // else the ones holding then, copied in one pass.
        let (inherited, uid) = match self.process_at(ppid, time) {
            Some(parent) if parent.shareable_at(time) => (
                Inherited::Shared(Arc::clone(&parent.mappings), parent.longest, parent.settled),
                self.uid(ppid, time),
            ),
            Some(parent) => (
                Inherited::Copied(
                    parent
                        .mappings
                        .iter()
                        .filter(|e| Process::holds(e, time, parent.end()))
                        .map(|e| Mapping {
                            since: time,
                            until: FOREVER,
                            ..e.map
                        })
                        .collect(),
                ),
                self.uid(ppid, time),
            ),
            None => (Inherited::Copied(Vec::new()), None),
        };
        let list = self.processes.entry(pid).or_default();
        let at = list.partition_point(|p| p.start <= time);
        if at > 0 && list[at - 1].start == time {
            return; // The same FORK twice.
        }
        let mut new = Process::new(time);
        new.parent = Some(ppid);
        match at.checked_sub(1).map(|i| &mut list[i]) {
            Some(prev) => {
                // Records of the new process that arrived before its FORK went to the
                // process before it on the pid: take them over.
                if prev.mappings.iter().any(|e| e.origin >= time) {
                    let (mine, theirs): (Vec<Entry>, Vec<Entry>) =
                        prev.mappings.iter().partition(|e| e.origin >= time);
                    new.mappings = Arc::new(mine);
                    new.longest = prev.longest;
                    new.settled = prev.settled;
                    prev.mappings = Arc::new(theirs);
                }
                let split = prev.execs.partition_point(|&t| t < time);
                new.execs = prev.execs.split_off(split);
                let split = prev.uids.partition_point(|&(t, _)| t < time);
                new.uids = prev.uids.split_off(split);
                if prev.exec_uid_unread.is_some_and(|t| t >= time) {
                    new.exec_uid_unread = prev.exec_uid_unread.take();
                }
                // An exit at or after `time` is this process's (its EXIT came first); the
                // one before ended by `time` at the latest.
                let split = prev.exits.partition_point(|&t| t < time);
                new.exits = prev.exits.split_off(split);
                if prev.last_thread_record >= time {
                    // Which of the earlier records were the earlier process's is not kept.
                    new.last_thread_record = prev.last_thread_record;
                    prev.last_thread_record = 0;
                }
                new.next_start = prev.next_start;
                prev.next_start = Some(time);
            }
            None => new.next_start = list.first().map(|p| p.start),
        }
        let fresh = new.mappings.is_empty() && new.execs.is_empty();
        match inherited {
            // The common case: nothing of the child's arrived before its FORK, and the
            // parent's list can be shared (a later change of either copies it first).
            Inherited::Shared(mappings, longest, settled) if fresh => {
                self.stats.forks_shared += 1;
                new.mappings = mappings;
                new.longest = longest;
                new.settled = settled;
            }
            Inherited::Shared(mappings, ..) => {
                for e in mappings.iter().filter(|e| e.map.holds_at(time)) {
                    new.insert_mapping(Mapping {
                        since: time,
                        until: FOREVER,
                        ..e.map
                    });
                }
            }
            // The parent's mappings holding now are sorted and never overlap: a plain copy
            // (one pass, not an overlap scan per mapping).
            Inherited::Copied(inherited) if fresh => {
                new.longest = inherited.iter().map(|m| m.end - m.start).max().unwrap_or(0);
                new.settled = time;
                new.mappings = Arc::new(
                    inherited
                        .into_iter()
                        .map(|map| Entry { map, origin: time })
                        .collect(),
                );
            }
            Inherited::Copied(inherited) => {
                for map in inherited {
                    new.insert_mapping(map);
                }
            }
        }
        self.stats.mappings_dropped += std::mem::take(&mut new.dropped);
        if let Some(uid) = uid {
            if new.uids.first().is_none_or(|&(t, _)| t > time) {
                new.uids.insert(0, (time, uid));
            }
        }
        list.insert(at, new);
    }

    /// Record that a thread (or, when tid == pid, the process's main thread) exited at `time`.
    /// A process's mappings stop holding when its main thread and every thread of it seen
    /// later have exited.
    pub fn exit(&mut self, pid: u32, tid: u32, time: u64) {
        self.stats.exits += 1;
        let thread = self
            .threads
            .entry(tid)
            .or_insert_with(|| Thread::new(pid, 0));
        if time >= thread.start {
            thread.exit = Some(thread.exit.map_or(time, |e| e.max(time)));
        }
        if pid == tid {
            let process = self.process_for_record(pid, time);
            if let Err(at) = process.exits.binary_search(&time) {
                process.exits.insert(at, time);
            }
        } else {
            self.thread_record(pid, time);
        }
    }

    /// Read a process alive before recording started from /proc: its threads' names, its
    /// owner ([`owner_of`](crate::owner_of)) and its executable mappings, all in effect from time 0.
    pub fn synthesize(&mut self, pid: u32) -> Result<(), ProcError> {
        let read = |path: String| {
            std::fs::read_to_string(&path).map_err(|source| {
                if source.kind() == std::io::ErrorKind::NotFound
                    || source.raw_os_error() == Some(ESRCH)
                {
                    ProcError::Vanished { pid }
                } else {
                    ProcError::Io { path, source }
                }
            })
        };
        let maps = read(format!("/proc/{pid}/maps"))?;
        let status = read_status(pid);
        let uid = status.map(|(uid, _)| uid);
        let ppid = status.and_then(|(_, ppid)| ppid);
        let mut tids = Vec::new();
        if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            tids.extend(
                dir.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()),
            );
        }
        if tids.is_empty() {
            tids.push(pid);
        }
        for tid in tids {
            if let Ok(comm) = read(format!("/proc/{pid}/task/{tid}/comm")) {
                self.set_comm(pid, tid, 0, comm.trim_end_matches('\n'), false);
            }
        }
        for line in maps
            .lines()
            .filter_map(parse_maps_line)
            .filter(|l| l.executable)
        {
            let file = MappedFile {
                path: line.path.to_string(),
                build_id: None,
                dev_ino: (line.inode != 0).then(|| (makedev(line.dev.0, line.dev.1), line.inode)),
            };
            self.add_mapping(pid, 0, line.start, line.end - line.start, line.offset, file);
        }
        let process = self.process_for_record(pid, 0);
        if let Some(uid) = uid {
            set_at(&mut process.uids, 0, uid);
        }
        if process.parent.is_none() {
            process.parent = ppid.filter(|&p| p != 0);
        }
        self.stats.synthesized += 1;
        Ok(())
    }

    /// [`ProcessTable::synthesize`] every process in /proc; returns how many were read.
    /// Processes that vanish meanwhile are skipped.
    pub fn synthesize_all(&mut self) -> usize {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return 0;
        };
        let pids: Vec<u32> = dir
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        let mut read = 0;
        for pid in pids {
            match self.synthesize(pid) {
                Ok(()) => read += 1,
                Err(err) => debug!(pid, %err, "skipping process"),
            }
        }
        read
    }

    /// The mapping of `pid` containing `addr` at `time` (in the process on `pid` at `time`).
    pub fn find_mapping(&self, pid: u32, addr: u64, time: u64) -> Option<&Mapping> {
        self.process_at(pid, time)?.find(addr, time)
    }

    /// Every mapping of `pid` in effect at `time`, by start address.
    pub fn mappings_at(&self, pid: u32, time: u64) -> impl Iterator<Item = &Mapping> {
        self.process_at(pid, time).into_iter().flat_map(move |p| {
            let end = p.end();
            p.mappings
                .iter()
                .filter(move |e| Process::holds(e, time, end))
                .map(|e| &e.map)
        })
    }

    /// Whether the processes on `a` and `b` at `time` share one list of mappings (a child
    /// and its parent as of the fork, until either maps or unmaps something): what one holds
    /// at any time, the other does too. O(1).
    pub fn shares_mappings(&self, a: u32, b: u32, time: u64) -> bool {
        match (self.process_at(a, time), self.process_at(b, time)) {
            (Some(a), Some(b)) => Arc::ptr_eq(&a.mappings, &b.mappings),
            _ => false,
        }
    }

    /// The process on `pid` at `time`: the last one started at or before `time` (None before
    /// the first one known).
    pub fn process_key(&self, pid: u32, time: u64) -> Option<ProcessKey> {
        self.process_key_inner(pid, time)
    }

    /// Whether the latest process known on `pid` has exited (false for an unknown pid).
    pub fn has_exited(&self, pid: u32) -> bool {
        self.processes
            .get(&pid)
            .and_then(|list| list.last())
            .is_some_and(|p| p.end().is_some())
    }

    fn process_key_inner(&self, pid: u32, time: u64) -> Option<ProcessKey> {
        let process = self.process_at(pid, time)?;
        Some(ProcessKey {
            pid,
            start_time: process.start,
        })
    }

    /// The owner of the process on `pid` at `time` ([`UNKNOWN_UID`] when not known): read from /proc for processes
    /// alive at start, inherited at fork, read again after an exec when the process is first
    /// sampled ([`ProcessTable::read_exec_uid`]).
    pub fn uid(&self, pid: u32, time: u64) -> Option<u32> {
        let uids = &self.process_at(pid, time)?.uids;
        let at = uids.partition_point(|&(t, _)| t <= time);
        uids.get(at.saturating_sub(1)).map(|&(_, uid)| uid)
    }

    /// The pid of the process that created the process on `pid` at `time`, when known.
    pub fn parent(&self, pid: u32, time: u64) -> Option<u32> {
        self.process_at(pid, time)?.parent
    }

    /// The ancestors of the process on `pid` at `time`, parent first, at most `max`: each
    /// one the creator of the one before, looked up as it was when that one started.
    pub fn ancestors(&self, pid: u32, time: u64, max: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let (mut pid, mut time) = (pid, time);
        while out.len() < max {
            let Some(process) = self.process_at(pid, time) else {
                break;
            };
            let Some(parent) = process.parent.filter(|&p| p != pid && !out.contains(&p)) else {
                break;
            };
            out.push(parent);
            if process.start != 0 {
                time = process.start;
            }
            pid = parent;
        }
        out
    }

    fn name_id_at(&self, tid: u32, time: u64) -> Option<u32> {
        let thread = self.threads.get(&tid)?;
        if thread.exit.is_some_and(|e| time >= e) {
            return None; // Exited; a new thread on the tid has not been seen yet.
        }
        let names = &thread.names;
        let at = names.partition_point(|&(t, _)| t <= time);
        names
            .get(at.saturating_sub(1))
            .map(|&(_, id)| id)
            .filter(|&id| id != NO_NAME)
    }

    /// The name (comm) of thread `tid` at `time`, falling back to the process's main thread.
    pub fn thread_name(&self, pid: u32, tid: u32, time: u64) -> Option<&str> {
        let id = self
            .name_id_at(tid, time)
            .or_else(|| self.name_id_at(pid, time))?;
        Some(&self.names[id as usize])
    }

    /// The process a thread belongs to (the latest thread on `tid`), when known.
    pub fn pid_of(&self, tid: u32) -> Option<u32> {
        self.threads.get(&tid).map(|t| t.pid)
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
        // Threads: those that exited, and those of a process that is gone, exit seen or not.
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
        pruned.threads = threads_before - self.threads.len();
        for thread in self.threads.values_mut() {
            let keep_from = thread
                .names
                .partition_point(|&(t, _)| t <= before)
                .saturating_sub(1);
            thread.names.drain(..keep_from);
        }
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
        pruned.names = self.rebuild_names();
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
        pruned.released_files = released;
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

    /// Rebuild the name intern table when most of it is unused; returns how many went.
    fn rebuild_names(&mut self) -> usize {
        if self.names.len() < MIN_NAMES_TO_REBUILD {
            return 0;
        }
        let mut used = vec![false; self.names.len()];
        for thread in self.threads.values() {
            for &(_, id) in &thread.names {
                if id != NO_NAME {
                    used[id as usize] = true;
                }
            }
        }
        let in_use = used.iter().filter(|&&u| u).count();
        if in_use * 2 >= self.names.len() {
            return 0;
        }
        let mut new_id = vec![NO_NAME; self.names.len()];
        let old = std::mem::take(&mut self.names);
        self.name_ids.clear();
        for (id, name) in old.into_iter().enumerate() {
            if used[id] {
                new_id[id] = self.names.len() as u32;
                self.name_ids.insert(name.clone(), new_id[id]);
                self.names.push(name);
            }
        }
        for thread in self.threads.values_mut() {
            for (_, id) in &mut thread.names {
                if *id != NO_NAME {
                    *id = new_id[*id as usize];
                }
            }
        }
        used.len() - in_use
    }
}

/// Set `series[time] = value` in a time-sorted series (replacing a value at the same time).
fn set_at(series: &mut Vec<(u64, u32)>, time: u64, value: u32) {
    match series.binary_search_by_key(&time, |&(t, _)| t) {
        Ok(at) => series[at].1 = value,
        Err(at) => series.insert(at, (time, value)),
    }
}

/// ESRCH: reading /proc of a process that is exiting.
const ESRCH: i32 = 3;

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
