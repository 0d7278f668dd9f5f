//! The process table: process incarnations, their threads' names and their executable
//! mappings over time.
//!
//! A pid is reused once its process exited, so a process is keyed by pid *and* start time (the
//! time of its FORK record; 0 for a process first seen otherwise: read from /proc, or named by
//! a record before its FORK arrived). Lookups take the time of the sample being resolved and
//! pick the incarnation alive then. Records from different CPUs arrive out of order, so every
//! record is applied to the incarnation its own time falls in, and a FORK that arrives after
//! records of the process it starts takes those records over from the incarnation before.

use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use tracing::debug;

use crate::files::{FileId, FileParts, FileTable, MappedFile};
use crate::proc_fs::{makedev, parse_maps_line, parse_status};
use crate::ProcError;

/// The uid of a process whose owner is not known: after an exec until it is read, and for a
/// process its user may not trace (set-uid or set-gid, or not dumpable). No user has it, so
/// only those who see everything see its stacks.
pub const UNKNOWN_UID: u32 = u32::MAX;

/// Time meaning "still in effect".
const FOREVER: u64 = u64::MAX;

/// Name id of "no name known" (a thread forked from a parent whose name is unknown), so that a
/// reused tid does not show the name of the thread that had it before.
const NO_NAME: u32 = u32::MAX;

/// Most mappings one process holds (past ones not pruned yet included); more are dropped and
/// counted ([`TableStats::mappings_dropped`]), so that a process cannot make the table hold
/// unbounded memory. Twice Linux's default `vm.max_map_count`.
pub const MAX_MAPPINGS: usize = 1 << 17;

/// An executable mapping of a file into a process, in effect during `since..until` (and until
/// its process ended, which the lookups apply: `until` does not show it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Start address.
    pub start: u64,
    /// End address (exclusive).
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// The mapped file.
    pub file: FileId,
    /// Time from which the mapping holds (0: before recording started).
    pub since: u64,
    /// Time at which a later mapping or an exec took over (u64::MAX: neither did yet).
    pub until: u64,
}

impl Mapping {
    /// The file offset that `addr` (inside this mapping) comes from.
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.pgoff
    }

    fn holds_at(&self, time: u64) -> bool {
        self.since <= time && time < self.until
    }

    /// The part `start..end` of this mapping (inside it), in effect during `since..until`.
    fn part(&self, start: u64, end: u64, since: u64, until: u64) -> Mapping {
        Mapping {
            start,
            end,
            pgoff: self.pgoff + (start - self.start),
            since,
            until,
            ..*self
        }
    }
}

/// Identity of one process: a pid is reused, a (pid, start time) pair is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessKey {
    /// Process id.
    pub pid: u32,
    /// Time of the FORK record that started it (0: started before it was first seen).
    pub start_time: u64,
}

/// A mapping and the time of the record it comes from.
///
/// Pieces of a mapping split by a later overlapping one keep the time of their own record
/// (`origin`), whatever their `since`: precedence between overlapping mappings, and the end
/// of a mapping at an exec or exit, go by the record's time.
#[derive(Clone, Copy, Debug)]
struct Entry {
    map: Mapping,
    origin: u64,
}

/// One process incarnation.
#[derive(Debug)]
struct Process {
    start: u64,
    /// Times of EXIT records of its main thread, sorted: the first is its own; later ones
    /// come from later processes on the pid whose FORK has not arrived yet.
    exits: Vec<u64>,
    /// Latest record of one of its other threads (FORK, COMM, EXIT): the main thread can
    /// exit (`pthread_exit`) while the others go on, and the process ends with its last thread.
    last_thread_record: u64,
    /// Start of the next process on the pid, which this one ended before.
    next_start: Option<u64>,
    /// Times of its execs, sorted.
    execs: Vec<u64>,
    /// Sorted by `start`; no two hold the same address at the same time. Mappings from
    /// before [`Process::end`] stop holding then (applied at lookup, so that a late record
    /// of a thread that outlived the main thread can move the end). Shared with a parent
    /// or child as of a fork, copied at the first change of either ([`Arc::make_mut`]).
    mappings: Arc<Vec<Entry>>,
    /// The longest mapping ever in `mappings`: an overlap with a..b can only come from one
    /// starting after a minus this.
    longest: u64,
    /// No entry ever in `mappings` has a later `origin` than this, nor a finite `until`
    /// later than this: at a fork at or after it, every entry holding at the fork holds for
    /// good, none is of a record after the fork, and the child can share the list as is.
    settled: u64,
    /// Mappings not added because the process held [`MAX_MAPPINGS`] (taken into
    /// [`TableStats::mappings_dropped`] by the table).
    dropped: u64,
    /// (time, owner), sorted by time: the uid whose user may trace it, or [`UNKNOWN_UID`].
    uids: Vec<(u64, u32)>,
    /// The last exec whose uid was not read yet: its time and the name it took. Read when
    /// the process is first sampled after it ([`ProcessTable::read_exec_uid`]); most
    /// short-lived processes never are.
    exec_uid_unread: Option<(u64, u32)>,
    /// The pid of the process that created it (its FORK record's, or `PPid:` in /proc for a
    /// process read there), when known. Not changed by reparenting: "descendants of N" are
    /// the processes N and its descendants created.
    parent: Option<u32>,
}

impl Process {
    fn new(start: u64) -> Process {
        Process {
            parent: None,
            start,
            exits: Vec::new(),
            last_thread_record: 0,
            next_start: None,
            execs: Vec::new(),
            mappings: Arc::default(),
            longest: 0,
            settled: 0,
            dropped: 0,
            uids: Vec::new(),
            exec_uid_unread: None,
        }
    }

    /// When the process ended, when known: its last thread's exit, or the next start.
    fn end(&self) -> Option<u64> {
        let exit = self.exits.first().map(|&e| e.max(self.last_thread_record));
        match (exit, self.next_start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether `e` holds at `time` in a process that ended at `end`. Records at or after the
    /// end come from a later process on the pid whose FORK has not arrived yet: they hold.
    fn holds(e: &Entry, time: u64, end: Option<u64>) -> bool {
        e.map.holds_at(time) && end.is_none_or(|end| time < end || e.origin >= end)
    }

    /// When a mapping whose record is from `origin` stops holding because of an exec (u64::MAX:
    /// no later exec is known).
    fn lifetime_end(&self, origin: u64) -> u64 {
        self.execs[self.execs.partition_point(|&e| e <= origin)..]
            .first()
            .copied()
            .unwrap_or(FOREVER)
    }

    /// End at `time` every mapping recorded before it (an exec).
    fn end_mappings_before(&mut self, time: u64) {
        self.settled = self.settled.max(time);
        if !self
            .mappings
            .iter()
            .any(|e| e.origin < time && e.map.until > time)
        {
            return;
        }
        let mappings = Arc::make_mut(&mut self.mappings);
        for e in mappings.iter_mut() {
            if e.origin < time && e.map.until > time {
                e.map.until = time;
            }
        }
        mappings.retain(|e| e.map.since < e.map.until);
    }

    /// Whether a child forked at `time` can share this process's mappings as they are.
    fn shareable_at(&self, time: u64) -> bool {
        self.settled <= time && self.end().is_none_or(|end| end > time)
    }

    /// Whether a mapping held overlaps a..b: a binary search, then the few that start within
    /// the longest mapping's length before a.
    fn any_overlap(&self, a: u64, b: u64) -> bool {
        let from = self
            .mappings
            .partition_point(|e| e.map.start < a.saturating_sub(self.longest));
        let to = self.mappings.partition_point(|e| e.map.start < b);
        self.mappings[from..to.max(from)]
            .iter()
            .any(|e| e.map.start < b && a < e.map.end)
    }

    /// Insert `entry` by start address; dropped (and counted) when the process holds
    /// [`MAX_MAPPINGS`] already.
    fn insert_sorted(&mut self, entry: Entry) {
        if self.mappings.len() >= MAX_MAPPINGS {
            self.dropped += 1;
            return;
        }
        self.longest = self.longest.max(entry.map.end - entry.map.start);
        self.settled = self.settled.max(entry.origin);
        if entry.map.until != FOREVER {
            self.settled = self.settled.max(entry.map.until);
        }
        let at = self
            .mappings
            .partition_point(|m| m.map.start <= entry.map.start);
        Arc::make_mut(&mut self.mappings).insert(at, entry);
    }

    /// Add the mapping of a record from `origin` (`map.since == origin`), whatever the order
    /// in which records arrive: it takes its range over from mappings of earlier records, and
    /// leaves to mappings of later records the ranges they cover from their own time on.
    /// Returns the mapping as added (`until`: when a later record first takes part of it over).
    fn insert_mapping(&mut self, map: Mapping) -> Mapping {
        let origin = map.since;
        let (a, b) = (map.start, map.end);
        let until = self.lifetime_end(origin).min(map.until);
        let overlaps = |e: &Entry| e.map.start < b && a < e.map.end;
        // The common case (a new process's first mappings, or new code beside the old):
        // nothing held overlaps, and the mapping goes in whole, with nothing to cut.
        if !self.any_overlap(a, b) {
            let added = Mapping { until, ..map };
            if origin < until {
                self.insert_sorted(Entry { map: added, origin });
            }
            return added;
        }
        // Mappings of earlier records lose a..b from `origin` on.
        let mut pieces = Vec::new();
        let mut i = 0;
        while i < self.mappings.len() {
            let e = self.mappings[i];
            if !overlaps(&e) || e.origin >= origin || e.map.until <= origin {
                i += 1;
                continue;
            }
            // The parts outside a..b go on holding.
            let since = e.map.since.max(origin);
            if e.map.start < a {
                pieces.push(Entry {
                    map: e.map.part(e.map.start, a, since, e.map.until),
                    origin: e.origin,
                });
            }
            if e.map.end > b {
                pieces.push(Entry {
                    map: e.map.part(b, e.map.end, since, e.map.until),
                    origin: e.origin,
                });
            }
            if e.map.since < origin {
                Arc::make_mut(&mut self.mappings)[i].map.until = origin;
                self.settled = self.settled.max(origin);
                i += 1;
            } else {
                Arc::make_mut(&mut self.mappings).remove(i);
            }
        }
        // Mappings of later records (or of the same time, which arrived first) keep their
        // ranges from their own time on: cut the new one level by level.
        let mut later: Vec<(u64, u64, u64)> = self
            .mappings
            .iter()
            .filter(|e| overlaps(e) && e.origin >= origin && e.origin < until)
            .map(|e| (e.origin, e.map.start.max(a), e.map.end.min(b)))
            .collect();
        later.sort_unstable();
        // (start, end, since) of the parts of the new mapping still holding.
        let mut live = vec![(a, b, origin)];
        let mut added = Mapping { until, ..map };
        let mut first = true;
        let mut level_at = 0;
        while level_at < later.len() {
            let level = later[level_at].0;
            let level_end = later[level_at..].partition_point(|l| l.0 == level) + level_at;
            let cuts = &later[level_at..level_end];
            let mut next = Vec::with_capacity(live.len());
            for &(s, e, since) in &live {
                if !cuts.iter().any(|&(_, cs, ce)| cs < e && s < ce) {
                    next.push((s, e, since));
                    continue;
                }
                if since < level {
                    pieces.push(Entry {
                        map: map.part(s, e, since, level),
                        origin,
                    });
                }
                if first {
                    added.until = level;
                    first = false;
                }
                // What the cuts leave of s..e holds from `level` on.
                let mut at = s;
                let mut sorted: Vec<(u64, u64)> = cuts
                    .iter()
                    .filter(|&&(_, cs, ce)| cs < e && s < ce)
                    .map(|&(_, cs, ce)| (cs, ce))
                    .collect();
                sorted.sort_unstable();
                for (cs, ce) in sorted {
                    if cs > at {
                        next.push((at, cs, level));
                    }
                    at = at.max(ce);
                }
                if at < e {
                    next.push((at, e, level));
                }
            }
            live = next;
            level_at = level_end;
        }
        for (s, e, since) in live {
            if since < until {
                pieces.push(Entry {
                    map: map.part(s, e, since, until),
                    origin,
                });
            }
        }
        for piece in pieces {
            self.insert_sorted(piece);
        }
        added
    }

    /// The mapping containing `addr` at `time`.
    fn find(&self, addr: u64, time: u64) -> Option<&Mapping> {
        let upto = self.mappings.partition_point(|e| e.map.start <= addr);
        let candidates = self.mappings[..upto]
            .iter()
            .rev()
            .filter(|e| addr < e.map.end);
        let end = self.end();
        let mut best: Option<&Mapping> = None;
        for e in candidates {
            if Process::holds(e, time, end) {
                return Some(&e.map);
            }
            // Before the first record of a process whose FORK was not seen: the earliest
            // mapping stands in. After a known FORK, what the process holds is known.
            let m = &e.map;
            if self.start == 0 && time < m.since && best.is_none_or(|b| m.since < b.since) {
                best = Some(m);
            }
        }
        best
    }

    /// Whether something of a later process (whose FORK has not arrived) is held here.
    fn holds_records_after_end(&self, end: u64) -> bool {
        // No entry is of a record later than `settled`: no scan of a list (shared, maybe, by
        // thousands of forked children) when none can be.
        (self.settled >= end && self.mappings.iter().any(|e| e.origin >= end))
            || self.execs.last().is_some_and(|&t| t >= end)
            || self.exits.last().is_some_and(|&t| t > end)
    }
}

/// What a child takes of its parent's mappings at a fork.
enum Inherited {
    /// The parent's list as it is, with its `longest` and `settled`.
    Shared(Arc<Vec<Entry>>, u64, u64),
    /// The mappings holding at the fork, in effect from it.
    Copied(Vec<Mapping>),
}

/// A thread: its process, the time it started, when it exited, and its names over time.
#[derive(Debug)]
struct Thread {
    pid: u32,
    /// Time of its FORK record (0: unknown).
    start: u64,
    /// Time of its EXIT record, when it exited after `start`.
    exit: Option<u64>,
    /// (time, name id), sorted by time.
    names: Vec<(u64, u32)>,
}

impl Thread {
    fn new(pid: u32, start: u64) -> Thread {
        Thread {
            pid,
            start,
            exit: None,
            names: Vec::new(),
        }
    }

    fn add_name(&mut self, time: u64, name: u32) {
        let at = self.names.partition_point(|&(t, _)| t <= time);
        self.names.insert(at, (time, name));
    }

    /// The latest time something is known of this thread.
    fn last_seen(&self) -> u64 {
        let named = self.names.last().map_or(0, |&(t, _)| t);
        self.start.max(named).max(self.exit.unwrap_or(0))
    }
}

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
    /// Mappings not added because their process held [`MAX_MAPPINGS`] already.
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
            if read_proc && process.exec_uid_unread.is_none_or(|(t, _)| t <= time) {
                process.exec_uid_unread = Some((time, id));
                set_at(&mut process.uids, time, UNKNOWN_UID);
            }
        }
    }

    /// The process on `pid` is sampled at `time`: if it exec'd before and its owner since the
    /// exec was not read, read it now from /proc (one small read per exec of a sampled
    /// process; see [`read_owner`]). Not when the process is known to have exited (its pid
    /// may name another process already), nor when /proc shows another name than the exec
    /// gave (the process renamed itself since, or the pid was reused): the owner stays
    /// [`UNKNOWN_UID`].
    pub fn read_exec_uid(&mut self, pid: u32, time: u64) {
        let Some(process) = self.process_at_mut(pid, time) else {
            return;
        };
        let Some((exec, name)) = process.exec_uid_unread else {
            return;
        };
        if exec > time {
            return;
        }
        process.exec_uid_unread = None;
        if process.end().is_some() {
            return;
        }
        let name = self.names.get(name as usize).map(String::as_str);
        if let Some(uid) = name.and_then(|name| read_owner(pid, Some(name))) {
            if let Some(process) = self.process_at_mut(pid, time) {
                set_at(&mut process.uids, exec, uid);
            }
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
                if prev.exec_uid_unread.is_some_and(|(t, _)| t >= time) {
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
    /// owner ([`read_owner`]) and its executable mappings, all in effect from time 0.
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

/// The owner ([`read_owner`]) and the parent's pid of `pid`, from /proc.
fn read_status(pid: u32) -> Option<(u32, Option<u32>)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let status = parse_status(&status)?;
    Some((owner(pid, status.one_uid), status.ppid))
}

/// Who may see the process on `pid`, judged as the kernel judges whether a user may trace it
/// (ptrace_may_access): the uid its real, effective and saved uids all are, when its real,
/// effective and saved gids are one too and it is dumpable (its /proc directory is then
/// owned by that uid; the kernel gives a process that is not to root); else [`UNKNOWN_UID`]
/// (a set-uid or set-gid program, or one that changed its ids). With `name`, only when the
/// process is called that (None otherwise, or when /proc does not have it).
fn read_owner(pid: u32, name: Option<&str>) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let status = parse_status(&status)?;
    if name.is_some_and(|n| n != status.name) {
        debug!(
            pid,
            ?name,
            now = status.name,
            "not reading the uid of a renamed process"
        );
        return None;
    }
    Some(owner(pid, status.one_uid))
}

/// Who may see the process on `pid` now ([`UNKNOWN_UID`] when no user may trace it: see
/// [`ProcessTable::uid`]); None when /proc does not have it.
pub fn owner_of(pid: u32) -> Option<u32> {
    read_owner(pid, None)
}

/// `one_uid` when the process on `pid` is dumpable (its /proc directory is that uid's).
fn owner(pid: u32, one_uid: Option<u32>) -> u32 {
    use std::os::unix::fs::MetadataExt;
    match one_uid {
        Some(0) => 0,
        Some(uid) => match std::fs::metadata(format!("/proc/{pid}")) {
            Ok(meta) if meta.uid() == uid => uid,
            _ => UNKNOWN_UID,
        },
        None => UNKNOWN_UID,
    }
}

/// ESRCH: reading /proc of a process that is exiting.
const ESRCH: i32 = 3;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn file(path: &str) -> MappedFile {
        MappedFile::with_path(path)
    }

    #[test]
    fn exec_replaces_the_address_space_whatever_the_arrival_order() {
        let mut t = ProcessTable::new();
        t.add_mapping(10, 0, 0x1000, 0x1000, 0, file("/bin/sh"));
        // The new image's mapping arrives before the exec's comm record.
        t.add_mapping(10, 200, 0x1000, 0x1000, 0, file("/bin/burner"));
        t.set_comm(10, 10, 150, "burner", true);
        let name = |m: Option<&Mapping>| m.map(|m| t.files().get(m.file).path.clone());
        assert_eq!(
            name(t.find_mapping(10, 0x1800, 100)).as_deref(),
            Some("/bin/sh")
        );
        assert_eq!(
            name(t.find_mapping(10, 0x1800, 250)).as_deref(),
            Some("/bin/burner")
        );
        assert_eq!(t.thread_name(10, 10, 160), Some("burner"));
        assert_eq!(
            t.thread_name(10, 10, 100),
            Some("burner"),
            "earliest name stands in"
        );
    }

    #[test]
    fn overlapping_mmap_splits_the_old_mapping() {
        let mut t = ProcessTable::new();
        t.add_mapping(1, 10, 0x1000, 0x3000, 0x100000, file("/a"));
        t.add_mapping(1, 20, 0x2000, 0x1000, 0, file("/b"));
        let f = |addr, time| {
            t.find_mapping(1, addr, time)
                .map(|m| (t.files().get(m.file).path.clone(), m.file_offset(addr)))
        };
        assert_eq!(f(0x2800, 15), Some(("/a".into(), 0x101800)));
        assert_eq!(f(0x2800, 25), Some(("/b".into(), 0x800)));
        assert_eq!(f(0x1800, 25), Some(("/a".into(), 0x100800)));
        assert_eq!(f(0x3800, 25), Some(("/a".into(), 0x102800)));
        assert_eq!(f(0x5000, 25), None);
    }

    #[test]
    fn fork_copies_mappings_and_names() {
        let mut t = ProcessTable::new();
        t.set_comm(5, 5, 0, "parent", false);
        t.add_mapping(5, 1, 0x1000, 0x1000, 0, file("/bin/p"));
        t.fork(6, 5, 6, 5, 50);
        t.fork(5, 5, 7, 5, 60);
        assert_eq!(t.thread_name(6, 6, 55), Some("parent"));
        assert_eq!(t.thread_name(5, 7, 65), Some("parent"));
        assert!(t.find_mapping(6, 0x1000, 55).is_some());
        assert_eq!(t.pid_of(7), Some(5));
        t.exit(6, 6, 70);
        assert_eq!(t.prune(100).processes, 1);
        assert!(t.find_mapping(6, 0x1000, 55).is_none());
    }

    /// Whether the processes on `a` and `b` at `time` share one mapping list.
    #[test]
    fn a_child_shares_its_parents_mappings_as_of_the_fork() {
        let mut t = table_without_proc();
        t.add_mapping(5, 1, 0x1000, 0x1000, 0, file("/bin/a"));
        t.add_mapping(5, 2, 0x3000, 0x1000, 0, file("/bin/b"));
        t.fork(6, 5, 6, 5, 50);
        assert_eq!(t.stats().forks_shared, 1);
        assert!(t.shares_mappings(5, 6, 55), "no copy at the fork");
        assert_eq!(file_at(&t, 6, 0x1000, 55).as_deref(), Some("/bin/a"));
        assert_eq!(file_at(&t, 6, 0x3000, 55).as_deref(), Some("/bin/b"));
        assert_eq!(file_at(&t, 6, 0x1000, 49), None, "not before the fork");
        // Later mmaps in the parent (a new range, and one over /bin/a) are not the child's.
        t.add_mapping(5, 60, 0x8000, 0x1000, 0, file("/bin/c"));
        t.add_mapping(5, 61, 0x1000, 0x1000, 0, file("/bin/d"));
        assert!(!t.shares_mappings(5, 6, 70));
        assert_eq!(file_at(&t, 5, 0x8000, 70).as_deref(), Some("/bin/c"));
        assert_eq!(file_at(&t, 5, 0x1000, 70).as_deref(), Some("/bin/d"));
        assert_eq!(file_at(&t, 6, 0x8000, 70), None);
        assert_eq!(file_at(&t, 6, 0x1000, 70).as_deref(), Some("/bin/a"));
        assert_eq!(file_at(&t, 5, 0x1000, 55).as_deref(), Some("/bin/a"));
        // A later mmap in the child is not the parent's.
        t.add_mapping(6, 62, 0x9000, 0x1000, 0, file("/bin/e"));
        assert_eq!(file_at(&t, 6, 0x9000, 70).as_deref(), Some("/bin/e"));
        assert_eq!(file_at(&t, 5, 0x9000, 70), None);
    }

    #[test]
    fn unmapping_in_a_child_leaves_the_parent_alone() {
        let mut t = table_without_proc();
        t.add_mapping(5, 1, 0x1000, 0x1000, 0, file("/bin/a"));
        t.add_mapping(5, 2, 0x3000, 0x1000, 0, file("/bin/b"));
        t.fork(6, 5, 6, 5, 50);
        t.fork(7, 5, 7, 5, 51);
        assert!(t.shares_mappings(6, 7, 55));
        // Child 6 maps over /bin/b; child 7 execs (its whole address space goes).
        t.add_mapping(6, 60, 0x3000, 0x1000, 0, file("/bin/x"));
        t.set_comm(7, 7, 61, "other", true);
        assert_eq!(file_at(&t, 6, 0x3000, 70).as_deref(), Some("/bin/x"));
        assert_eq!(file_at(&t, 7, 0x1000, 70), None);
        assert_eq!(file_at(&t, 7, 0x1000, 60).as_deref(), Some("/bin/a"));
        for pid in [5, 6] {
            assert_eq!(file_at(&t, pid, 0x1000, 70).as_deref(), Some("/bin/a"));
        }
        assert_eq!(file_at(&t, 5, 0x3000, 70).as_deref(), Some("/bin/b"));
        // Pruning the children (exited) leaves the parent's mappings whole.
        t.exit(6, 6, 80);
        t.exit(7, 7, 81);
        assert_eq!(t.prune(100).processes, 2);
        assert_eq!(file_at(&t, 5, 0x1000, 120).as_deref(), Some("/bin/a"));
        assert_eq!(file_at(&t, 5, 0x3000, 120).as_deref(), Some("/bin/b"));
    }

    #[test]
    fn a_fork_after_out_of_order_records_of_the_parent_copies_what_held_at_the_fork() {
        let mut t = table_without_proc();
        t.add_mapping(5, 1, 0x1000, 0x1000, 0, file("/bin/a"));
        // Records of the parent from after the fork arrive before it: an mmap over /bin/a
        // and one of a new range.
        t.add_mapping(5, 70, 0x1000, 0x1000, 0, file("/bin/late"));
        t.add_mapping(5, 71, 0x8000, 0x1000, 0, file("/bin/new"));
        t.fork(6, 5, 6, 5, 50);
        assert_eq!(t.stats().forks_shared, 0);
        assert_eq!(file_at(&t, 6, 0x1000, 80).as_deref(), Some("/bin/a"));
        assert_eq!(file_at(&t, 6, 0x8000, 80), None);
        assert_eq!(file_at(&t, 5, 0x1000, 80).as_deref(), Some("/bin/late"));
    }

    #[test]
    fn many_forks_of_a_process_with_many_mappings_share_one_list() {
        let mut t = table_without_proc();
        for i in 0..60_000u64 {
            t.add_mapping(5, 1, 0x10_0000 + i * 0x2000, 0x1000, 0, file("/lib/x"));
        }
        for child in 0..1000u32 {
            let pid = 100 + child;
            let time = 10 + 2 * u64::from(child);
            t.fork(pid, 5, pid, 5, time);
            assert!(t.find_mapping(pid, 0x10_0000, time).is_some());
            t.exit(pid, pid, time + 1);
        }
        assert_eq!(t.stats().forks_shared, 1000);
        assert!(t.shares_mappings(5, 1099, 2008));
        assert_eq!(t.prune(5000).processes, 1000);
        assert_eq!(t.sizes().mappings, 60_000);
    }

    #[test]
    fn mappings_past_the_cap_are_dropped_and_counted() {
        let mut t = table_without_proc();
        for i in 0..(MAX_MAPPINGS as u64 + 5) {
            t.add_mapping(5, 1, 0x10_0000 + i * 0x2000, 0x1000, 0, file("/lib/x"));
        }
        assert_eq!(t.sizes().mappings, MAX_MAPPINGS);
        assert_eq!(t.stats().mappings_dropped, 5);
    }

    /// The file a sample of `pid` at `addr` and `time` resolves to.
    fn file_at(t: &ProcessTable, pid: u32, addr: u64, time: u64) -> Option<String> {
        t.find_mapping(pid, addr, time)
            .map(|m| t.files().get(m.file).path.clone())
    }

    /// A tiny deterministic generator (no dependency).
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            self.0 >> 33
        }
        fn shuffle<T>(&mut self, items: &mut [T]) {
            for i in (1..items.len()).rev() {
                items.swap(i, (self.next() % (i as u64 + 1)) as usize);
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Rec {
        Fork(u32, u32, u32, u32, u64),
        Comm(u32, u32, u64, String, bool),
        Mmap(u32, u64, u64, u64, String),
        Exit(u32, u32, u64),
    }

    fn apply(t: &mut ProcessTable, r: &Rec) {
        match r {
            Rec::Fork(pid, ppid, tid, ptid, time) => t.fork(*pid, *ppid, *tid, *ptid, *time),
            Rec::Comm(pid, tid, time, name, exec) => t.set_comm(*pid, *tid, *time, name, *exec),
            Rec::Mmap(pid, time, start, len, path) => {
                t.add_mapping(*pid, *time, *start, *len, 0, file(path));
            }
            Rec::Exit(pid, tid, time) => t.exit(*pid, *tid, *time),
        }
    }

    fn table_without_proc() -> ProcessTable {
        ProcessTable {
            read_proc: false,
            ..ProcessTable::new()
        }
    }

    /// The parent: pid 1, named "init", mapping /bin/init at 0x1000 from the start.
    #[test]
    fn ancestors_follow_the_forks_not_the_pid_reuse() {
        let mut t = with_parent();
        // 1 -> 10 -> 20 -> 30; then 10 exits and a new process takes pid 10 (from 1).
        t.fork(10, 1, 10, 1, 5);
        t.fork(20, 10, 20, 10, 6);
        t.fork(30, 20, 30, 20, 7);
        assert_eq!(t.parent(30, 8), Some(20));
        assert_eq!(t.ancestors(30, 8, 16), vec![20, 10, 1]);
        assert_eq!(t.ancestors(30, 8, 2), vec![20, 10]);
        t.exit(10, 10, 9);
        t.fork(10, 30, 10, 30, 50);
        // 20 was created by the first process on pid 10, itself created by 1.
        assert_eq!(t.ancestors(20, 60, 16), vec![10, 1]);
        assert_eq!(t.ancestors(10, 60, 16), vec![30, 20, 10, 1]);
        assert!(t.ancestors(1, 60, 16).is_empty());
    }

    fn with_parent() -> ProcessTable {
        let mut t = table_without_proc();
        t.set_comm(1, 1, 0, "init", false);
        t.add_mapping(1, 0, 0x1000, 0x1000, 0, file("/bin/init"));
        t
    }

    /// Process A runs /bin/a on pid 100 (with a thread 101), exits; process B forks onto pid
    /// 100 and runs /bin/b, a non-PIE binary at the same address.
    fn pid_reuse_records() -> Vec<Rec> {
        vec![
            Rec::Fork(100, 1, 100, 1, 10),
            Rec::Comm(100, 100, 20, "a".into(), true),
            Rec::Mmap(100, 21, 0x40_0000, 0x1000, "/bin/a".into()),
            Rec::Fork(100, 100, 101, 100, 30),
            Rec::Comm(100, 101, 31, "a-worker".into(), false),
            Rec::Exit(100, 101, 90),
            Rec::Exit(100, 100, 100),
            Rec::Fork(100, 1, 100, 1, 200),
            Rec::Comm(100, 100, 205, "b".into(), true),
            Rec::Mmap(100, 210, 0x40_0000, 0x1000, "/bin/b".into()),
        ]
    }

    fn check_pid_reuse(t: &ProcessTable, order: &str) {
        let a = || Some("/bin/a".to_string());
        let b = || Some("/bin/b".to_string());
        let init = || Some("/bin/init".to_string());
        // A's samples, even resolved after A exited and B started.
        assert_eq!(file_at(t, 100, 0x40_0100, 50), a(), "{order}");
        assert_eq!(file_at(t, 100, 0x40_0100, 99), a(), "{order}");
        assert_eq!(t.thread_name(100, 100, 50), Some("a"), "{order}");
        assert_eq!(t.thread_name(100, 101, 50), Some("a-worker"), "{order}");
        // Between fork and exec, A has its parent's mappings only.
        assert_eq!(file_at(t, 100, 0x1100, 15), init(), "{order}");
        assert_eq!(file_at(t, 100, 0x40_0100, 15), None, "{order}");
        assert_eq!(t.thread_name(100, 100, 15), Some("init"), "{order}");
        // Nothing on pid 100 between A's exit and B's fork.
        assert_eq!(file_at(t, 100, 0x40_0100, 150), None, "{order}");
        assert_eq!(file_at(t, 100, 0x1100, 150), None, "{order}");
        // B inherits from its parent, not from A.
        assert_eq!(file_at(t, 100, 0x1100, 202), init(), "{order}");
        assert_eq!(file_at(t, 100, 0x40_0100, 202), None, "{order}");
        assert_eq!(t.thread_name(100, 100, 202), Some("init"), "{order}");
        // B after its exec.
        assert_eq!(file_at(t, 100, 0x40_0100, 250), b(), "{order}");
        assert_eq!(file_at(t, 100, 0x1100, 250), None, "{order}");
        assert_eq!(t.thread_name(100, 100, 250), Some("b"), "{order}");
        assert_eq!(
            t.thread_name(100, 101, 250),
            Some("b"),
            "{order}: a dead thread's name falls back to the live main thread"
        );
        assert_eq!(
            t.process_key(100, 50),
            Some(ProcessKey {
                pid: 100,
                start_time: 10
            }),
            "{order}"
        );
        assert_eq!(
            t.process_key(100, 250),
            Some(ProcessKey {
                pid: 100,
                start_time: 200
            }),
            "{order}"
        );
        let at_250: Vec<String> = t
            .mappings_at(100, 250)
            .map(|m| t.files().get(m.file).path.clone())
            .collect();
        assert_eq!(at_250, ["/bin/b"], "{order}");
    }

    #[test]
    fn a_reused_pid_names_each_process_by_its_own_records() {
        let mut t = with_parent();
        for r in pid_reuse_records() {
            apply(&mut t, &r);
        }
        check_pid_reuse(&t, "in order");
        assert_eq!(t.sizes().incarnations, 2 + 1);
        // Pruning at 150 forgets A (and its worker thread); B is untouched.
        let pruned = t.prune(150);
        assert_eq!(pruned.processes, 1);
        assert_eq!(pruned.removed.len(), 1, "A, by its own key");
        assert_eq!(pruned.removed[0].pid, 100);
        assert_ne!(
            Some(pruned.removed[0]),
            t.process_key(100, 250),
            "not B, on the same pid"
        );
        assert_eq!(pruned.threads, 1, "A's worker thread");
        assert_eq!(t.sizes().incarnations, 2);
        assert_eq!(file_at(&t, 100, 0x40_0100, 250).as_deref(), Some("/bin/b"));
        assert_eq!(t.thread_name(100, 100, 250), Some("b"));
        assert_eq!(pruned.released_files.len(), 1, "/bin/a only");
        // A sample of A resolved too late is not named from B.
        assert_eq!(file_at(&t, 100, 0x40_0100, 50), None);
        assert_eq!(t.process_key(100, 50), None);
        assert!(t.files().ids().all(|id| t.files().get(id).path != "/bin/a"));
    }

    #[test]
    fn a_reused_pid_resolves_the_same_whatever_the_arrival_order() {
        let records = pid_reuse_records();
        let mut rng = Lcg(7);
        let mut orders: Vec<Vec<Rec>> = vec![records.iter().rev().cloned().collect()];
        // B's records before A's; exits before everything.
        let mut b_first = records[7..].to_vec();
        b_first.extend_from_slice(&records[..7]);
        orders.push(b_first);
        let mut exits_first: Vec<Rec> = records
            .iter()
            .filter(|r| matches!(r, Rec::Exit(..)))
            .cloned()
            .collect();
        exits_first.extend(
            records
                .iter()
                .filter(|r| !matches!(r, Rec::Exit(..)))
                .cloned(),
        );
        orders.push(exits_first);
        for _ in 0..3000 {
            let mut order = records.clone();
            rng.shuffle(&mut order);
            orders.push(order);
        }
        for order in orders {
            let mut t = with_parent();
            for r in &order {
                apply(&mut t, r);
            }
            check_pid_reuse(&t, &format!("{order:?}"));
            t.prune(150);
            assert_eq!(
                file_at(&t, 100, 0x40_0100, 250).as_deref(),
                Some("/bin/b"),
                "{order:?}"
            );
            assert_eq!(t.sizes().incarnations, 2, "{order:?}");
        }
    }

    #[test]
    fn a_process_ends_with_its_last_thread() {
        let mut t = with_parent();
        t.fork(300, 1, 300, 1, 10);
        t.add_mapping(300, 11, 0x5000, 0x1000, 0, file("/bin/c"));
        t.fork(300, 300, 301, 300, 12);
        // The main thread exits first (pthread_exit); its thread goes on until 80. The
        // thread's EXIT arrives first.
        t.exit(300, 301, 80);
        t.exit(300, 300, 50);
        assert_eq!(file_at(&t, 300, 0x5100, 60).as_deref(), Some("/bin/c"));
        assert_eq!(file_at(&t, 300, 0x5100, 85), None);
        assert_eq!(t.prune(70).processes, 0);
        assert_eq!(t.prune(100).processes, 1);
        // Without the thread's EXIT, the process stays (its thread may run) until its pid
        // is reused.
        t.fork(400, 1, 400, 1, 10);
        t.add_mapping(400, 11, 0x5000, 0x1000, 0, file("/bin/d"));
        t.fork(400, 400, 401, 400, 12);
        t.exit(400, 400, 50);
        assert_eq!(t.prune(1000).processes, 0);
        t.fork(400, 1, 400, 1, 2000);
        let pruned = t.prune(3000);
        assert_eq!((pruned.processes, pruned.threads), (1, 1));
    }

    #[test]
    fn exited_threads_of_a_live_process_are_pruned_and_a_reused_tid_is_not_misnamed() {
        let mut t = with_parent();
        t.fork(500, 1, 500, 1, 5);
        t.fork(500, 500, 501, 500, 10);
        t.set_comm(500, 501, 11, "short-lived", false);
        t.exit(500, 501, 20);
        assert_eq!(t.thread_name(500, 501, 15), Some("short-lived"));
        assert_eq!(
            t.thread_name(500, 501, 25),
            Some("init"),
            "the main thread's"
        );
        let pruned = t.prune(30);
        assert_eq!((pruned.threads, pruned.processes), (1, 0));
        assert_eq!(t.sizes().threads, 2);
        // The tid is reused by a thread of a process whose name is unknown: not the old name.
        t.set_comm(600, 600, 0, "other", false);
        t.fork(600, 600, 601, 600, 40);
        t.set_comm(600, 601, 41, "old-name", false);
        t.exit(600, 601, 50);
        t.fork(601, 9999, 601, 9999, 60);
        assert_eq!(t.thread_name(601, 601, 65), None);
        assert_eq!(t.thread_name(600, 601, 45), Some("old-name"));
    }

    #[test]
    fn exit_ends_the_mappings_and_a_late_sample_still_resolves() {
        let mut t = with_parent();
        t.fork(7, 1, 7, 1, 10);
        t.add_mapping(7, 20, 0x40_0000, 0x1000, 0, file("/bin/e"));
        t.exit(7, 7, 100);
        assert_eq!(file_at(&t, 7, 0x40_0100, 99).as_deref(), Some("/bin/e"));
        assert_eq!(file_at(&t, 7, 0x40_0100, 100), None);
        assert_eq!(t.mappings_at(7, 150).count(), 0);
        assert_eq!(
            t.mappings_at(7, 50).count(),
            2,
            "inherited /bin/init and /bin/e"
        );
    }

    #[test]
    fn an_older_mapping_arriving_late_keeps_what_later_ones_do_not_cover() {
        // /lib/x (at 10) covers 0x1000..0x5000; /lib/y (at 20) replaced 0x2000..0x3000 and
        // arrived first.
        let mut t = table_without_proc();
        t.add_mapping(1, 20, 0x2000, 0x1000, 0, file("/lib/y"));
        t.add_mapping(1, 10, 0x1000, 0x4000, 0, file("/lib/x"));
        let f = |addr, time| {
            t.find_mapping(1, addr, time)
                .map(|m| (t.files().get(m.file).path.clone(), m.file_offset(addr)))
        };
        assert_eq!(f(0x2800, 15), Some(("/lib/x".into(), 0x1800)));
        assert_eq!(f(0x2800, 25), Some(("/lib/y".into(), 0x800)));
        assert_eq!(f(0x1800, 25), Some(("/lib/x".into(), 0x800)));
        assert_eq!(f(0x4800, 25), Some(("/lib/x".into(), 0x3800)));
        // A piece of an old mapping split by a later one still ends at an exec that
        // arrives last.
        let mut t = table_without_proc();
        t.add_mapping(2, 0, 0x1000, 0x3000, 0, file("/bin/sh"));
        t.add_mapping(2, 200, 0x1000, 0x1000, 0, file("/bin/burner"));
        t.set_comm(2, 2, 150, "burner", true);
        assert_eq!(file_at(&t, 2, 0x2800, 100).as_deref(), Some("/bin/sh"));
        assert_eq!(file_at(&t, 2, 0x2800, 250), None);
        assert_eq!(file_at(&t, 2, 0x1800, 250).as_deref(), Some("/bin/burner"));
    }

    #[test]
    fn files_are_released_when_no_mapping_refers_to_them() {
        let mut t = with_parent();
        for (pid, time) in [(10, 10), (11, 20)] {
            t.fork(pid, 1, pid, 1, time);
            t.add_mapping(pid, time + 1, 0x7000, 0x1000, 0, file("/lib/shared"));
        }
        let shared = t.find_mapping(10, 0x7000, 15).unwrap().file;
        t.exit(10, 10, 30);
        assert_eq!(t.prune(40).released_files, []);
        assert_eq!(t.files().get(shared).path, "/lib/shared");
        t.exit(11, 11, 50);
        assert_eq!(t.prune(60).released_files, [shared]);
        assert!(t.files().try_get(shared).is_none());
        // The parent's file stays; nothing is released twice.
        assert_eq!(t.prune(70).released_files, []);
        assert_eq!(t.sizes().files, 1);
        // Mapped again: a new id.
        t.fork(12, 1, 12, 1, 80);
        let again = t.add_mapping(12, 81, 0x7000, 0x1000, 0, file("/lib/shared"));
        assert!(again.file > shared);
        // A file whose only mapping was superseded goes too.
        let old = t
            .add_mapping(12, 82, 0x9000, 0x1000, 0, file("/lib/old"))
            .file;
        t.add_mapping(12, 90, 0x9000, 0x1000, 0, file("/lib/new"));
        assert_eq!(t.prune(85).released_files, []);
        assert_eq!(t.prune(95).released_files, [old]);
    }

    #[test]
    fn superseded_names_are_pruned_and_the_intern_table_rebuilt() {
        let mut t = table_without_proc();
        for i in 0..1000u64 {
            t.set_comm(5, 5, i, &format!("name-{i}"), false);
        }
        assert_eq!(t.sizes().thread_names, 1000);
        let pruned = t.prune(990);
        assert_eq!(t.sizes().thread_names, 10);
        assert_eq!(pruned.names, 990);
        assert_eq!(t.sizes().names, 10);
        assert_eq!(t.thread_name(5, 5, 990), Some("name-990"));
        assert_eq!(t.thread_name(5, 5, 5000), Some("name-999"));
        // Interning still works after the rebuild.
        t.set_comm(5, 5, 2000, "name-995", false);
        assert_eq!(t.sizes().names, 10);
        assert_eq!(t.thread_name(5, 5, 2000), Some("name-995"));
    }

    #[test]
    fn uid_is_read_inherited_and_unknown_after_exec_until_read() {
        use std::os::unix::fs::MetadataExt;
        let own = std::process::id();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let parsed = parse_status(&status).unwrap();
        let euid = std::fs::metadata("/proc/self").unwrap().uid();
        assert_eq!(parsed.one_uid, Some(euid));
        let mut t = ProcessTable::new();
        t.synthesize(own).unwrap();
        assert_eq!(t.uid(own, 5), Some(euid));
        // A made-up parent with another uid.
        let (parent, child) = (u32::MAX - 3, u32::MAX - 4);
        t.process_for_record(parent, 0).uids = vec![(0, 4242)];
        t.fork(child, parent, child, parent, 10);
        assert_eq!(t.uid(child, 15), Some(4242), "inherited");
        // Exec of a process /proc does not have: unknown (it may be set-uid), and stays so.
        t.set_comm(child, child, 20, "x", true);
        assert_eq!(t.uid(child, 15), Some(4242), "before the exec");
        t.read_exec_uid(child, 25);
        assert_eq!(t.uid(child, 25), Some(UNKNOWN_UID));
        // Exec of a live process: read again, from the exec on.
        t.fork(own, parent, own, parent, 100);
        assert_eq!(t.uid(own, 105), Some(4242));
        t.set_comm(own, own, 110, "someone-else", true);
        t.read_exec_uid(own, 115);
        assert_eq!(
            t.uid(own, 115),
            Some(UNKNOWN_UID),
            "another name: not this process"
        );
        t.set_comm(own, own, 120, parsed.name, true);
        assert_eq!(
            t.uid(own, 125),
            Some(UNKNOWN_UID),
            "unknown from the exec until read"
        );
        t.read_exec_uid(own, 119);
        assert_eq!(
            t.uid(own, 125),
            Some(UNKNOWN_UID),
            "a sample before the exec reads nothing"
        );
        // A fork before the parent was sampled reads the parent's, for the child.
        let grandchild = u32::MAX - 5;
        t.fork(grandchild, own, grandchild, own, 122);
        assert_eq!(t.uid(grandchild, 123), Some(euid), "read at the fork");
        assert_eq!(t.uid(own, 125), Some(euid));
        assert_eq!(t.uid(own, 115), Some(UNKNOWN_UID));
        assert_eq!(t.uid(own, 5), Some(euid), "the synthesized process before");
        // Forgotten with its process.
        t.exit(child, child, 200);
        t.prune(300);
        assert_eq!(t.uid(child, 25), None);
    }

    /// A set-uid program's process (its saved uid is root's while it runs as the user) and
    /// one that is not dumpable belong to nobody: only admins see them.
    #[test]
    fn a_process_its_user_may_not_trace_has_no_owner() {
        assert_eq!(owner(std::process::id(), None), UNKNOWN_UID, "ids differ");
        if crate::sys::geteuid() != 0 {
            return;
        }
        // This process's /proc directory is root's: for uid 4242 it is not dumpable.
        assert_eq!(owner(std::process::id(), Some(4242)), UNKNOWN_UID);
        assert_eq!(owner(std::process::id(), Some(0)), 0);
    }

    /// 100,000 short-lived processes (fork, exec, mappings, a thread, renames, exit) on 700
    /// reused pids, records shuffled within batches of 5 processes, pruned every 1,000
    /// processes at the start of the 500th last: every size stays under a bound linear in the
    /// processes not yet prunable (checked before and after each prune), samples resolve to
    /// their own process, and the table returns to the baseline (the parent) at the end.
    #[test]
    fn churn_stays_bounded_and_returns_to_baseline() {
        const PROCESSES: u64 = 100_000;
        const PRUNE_EVERY: u64 = 1_000;
        const LAG: u64 = 500;
        const BATCH: u64 = 5;
        const SPAN: u64 = 100;
        let mut t = with_parent();
        t.add_mapping(1, 0, 0x7f00_0000, 0x10_0000, 0, file("/lib/libc.so.6"));
        t.add_mapping(1, 0, 0x7f10_0000, 0x1000, 0, file("[vdso]"));
        let baseline = t.sizes();
        // The bound with `live` processes in the table. Per process at most: 2 incarnations
        // (its own, and one started at 0 when a record of a pid not seen before arrives
        // before its FORK), 2 threads, 7 thread names (fork, exec and rename of the main
        // thread, fork and comm of the worker, +2), 3 inherited + 3 own mappings (+2 pieces),
        // 3 names in use, 2 own files. The name table is rebuilt when fewer than half are used.
        let bound = |live: u64| {
            let live = live as usize;
            TableSizes {
                processes: baseline.processes + live.min(700),
                incarnations: baseline.incarnations + 2 * live,
                threads: baseline.threads + 2 * live,
                thread_names: baseline.thread_names + 7 * live,
                mappings: baseline.mappings + 8 * live,
                names: 2 * (baseline.names + 3 * live) + MIN_NAMES_TO_REBUILD,
                files: baseline.files + 2 * live,
            }
        };
        let within = |s: TableSizes, b: TableSizes| {
            s.processes <= b.processes
                && s.incarnations <= b.incarnations
                && s.threads <= b.threads
                && s.thread_names <= b.thread_names
                && s.mappings <= b.mappings
                && s.names <= b.names
                && s.files <= b.files
        };
        let mut rng = Lcg(42);
        let mut peak = baseline;
        let mut batch = Vec::new();
        let mut released = HashSet::new();
        let mut last_file = 0;
        for i in 0..PROCESSES {
            let t0 = 1_000 + i * SPAN;
            let pid = 1_000 + (i % 700) as u32;
            let worker = 100_000 + (i % 700) as u32;
            batch.extend([
                Rec::Fork(pid, 1, pid, 1, t0),
                Rec::Comm(pid, pid, t0 + 10, format!("job-{i}"), true),
                Rec::Mmap(
                    pid,
                    t0 + 11,
                    0x40_0000,
                    0x2000,
                    format!("/bin/job-{}", i % 5000),
                ),
                Rec::Mmap(
                    pid,
                    t0 + 12,
                    0x7f00_0000,
                    0x10_0000,
                    "/lib/libc.so.6".into(),
                ),
                Rec::Mmap(pid, t0 + 13, 0x7e00_0000, 0x1000, format!("/tmp/jit-{i}")),
                Rec::Fork(pid, pid, worker, pid, t0 + 20),
                Rec::Comm(pid, worker, t0 + 21, format!("worker-{i}"), false),
                Rec::Exit(pid, worker, t0 + 30),
                Rec::Comm(pid, pid, t0 + 40, format!("renamed-{i}"), false),
                Rec::Exit(pid, pid, t0 + 50),
            ]);
            if (i + 1) % BATCH == 0 {
                rng.shuffle(&mut batch);
                for r in batch.drain(..) {
                    apply(&mut t, &r);
                }
                // Samples of the batch resolve to their own process.
                for j in i + 1 - BATCH..=i {
                    let (t0, pid) = (1_000 + j * SPAN, 1_000 + (j % 700) as u32);
                    let job = format!("/bin/job-{}", j % 5000);
                    assert_eq!(file_at(&t, pid, 0x40_1000, t0 + 45), Some(job));
                    let name = t.thread_name(pid, pid, t0 + 45).map(str::to_string);
                    assert_eq!(name, Some(format!("renamed-{j}")));
                    assert_eq!(file_at(&t, pid, 0x40_1000, t0 + 55), None);
                    let key = t.process_key(pid, t0 + 45).unwrap();
                    assert_eq!(key.start_time, t0);
                }
            }
            if (i + 1) % PRUNE_EVERY == 0 {
                // Before: what the last prune left, and the processes since.
                let s = t.sizes();
                let b = bound(LAG + PRUNE_EVERY);
                assert!(within(s, b), "{s:?} exceeds {b:?} before pruning at {i}");
                let pruned = t.prune(1_000 + (i + 1 - LAG) * SPAN);
                for id in pruned.released_files {
                    assert!(released.insert(id), "{id:?} released twice");
                }
                // After: the last LAG processes (and their batch).
                let s = t.sizes();
                let b = bound(LAG + BATCH);
                assert!(within(s, b), "{s:?} exceeds {b:?} after pruning at {i}");
                peak = TableSizes {
                    processes: peak.processes.max(s.processes),
                    incarnations: peak.incarnations.max(s.incarnations),
                    threads: peak.threads.max(s.threads),
                    thread_names: peak.thread_names.max(s.thread_names),
                    mappings: peak.mappings.max(s.mappings),
                    names: peak.names.max(s.names),
                    files: peak.files.max(s.files),
                };
                // Ids only grow.
                let max = t.files().ids().map(|f| f.0).max().unwrap_or(0);
                assert!(max >= last_file);
                last_file = max;
            }
        }
        let pruned = t.prune(1_000 + (PROCESSES + 1) * SPAN);
        for id in pruned.released_files {
            assert!(released.insert(id), "{id:?} released twice");
        }
        let end = t.sizes();
        assert_eq!(
            TableSizes {
                names: baseline.names,
                ..end
            },
            baseline,
            "back to the parent alone (peak {peak:?})"
        );
        assert!(end.names <= MIN_NAMES_TO_REBUILD, "{end:?}");
        assert_eq!(
            file_at(&t, 1, 0x1100, u64::MAX - 1).as_deref(),
            Some("/bin/init")
        );
        assert_eq!(t.thread_name(1, 1, u64::MAX - 1), Some("init"));
        eprintln!("peak {peak:?}");
    }

    #[test]
    fn synthesizes_this_process() {
        let mut t = ProcessTable::new();
        let pid = std::process::id();
        t.synthesize(pid).unwrap();
        let exe = std::env::current_exe().unwrap();
        let addr = synthesizes_this_process as fn() as usize as u64;
        let m = t
            .find_mapping(pid, addr, 5)
            .expect("test function is mapped");
        assert_eq!(t.files().get(m.file).path, exe.to_str().unwrap());
        assert!(t.thread_name(pid, pid, 5).is_some());
        assert!(matches!(
            t.synthesize(u32::MAX - 1),
            Err(ProcError::Vanished { .. })
        ));
    }
}
