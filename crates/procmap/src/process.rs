//! One process incarnation and one thread, as the table holds them: a process's executable
//! mappings over time (split by later mappings, ended by execs and exits, shared with a child
//! as of a fork), its execs, owners and parent; a thread's names over time.

use std::sync::Arc;

use crate::files::FileId;
use crate::Owner;
#[cfg(doc)]
use crate::{ProcessTable, TableStats, UNKNOWN_UID};

/// Time meaning "still in effect".
pub(crate) const FOREVER: u64 = u64::MAX;

/// Name id of "no name known" (a thread forked from a parent whose name is unknown), so that a
/// reused tid does not show the name of the thread that had it before.
pub(crate) const NO_NAME: u32 = u32::MAX;

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

    pub(crate) fn holds_at(&self, time: u64) -> bool {
        self.since <= time && time < self.until
    }

    /// The part `start..end` of this mapping (inside it), in effect during `since..until`.
    pub(crate) fn part(&self, start: u64, end: u64, since: u64, until: u64) -> Mapping {
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
pub(crate) struct Entry {
    pub(crate) map: Mapping,
    pub(crate) origin: u64,
}

/// One process incarnation.
#[derive(Debug)]
pub(crate) struct Process {
    pub(crate) start: u64,
    /// Times of EXIT records of its main thread, sorted: the first is its own; later ones
    /// come from later processes on the pid whose FORK has not arrived yet.
    pub(crate) exits: Vec<u64>,
    /// Latest record of one of its other threads (FORK, COMM, EXIT): the main thread can
    /// exit (`pthread_exit`) while the others go on, and the process ends with its last thread.
    pub(crate) last_thread_record: u64,
    /// Start of the next process on the pid, which this one ended before.
    pub(crate) next_start: Option<u64>,
    /// Times of its execs, sorted.
    pub(crate) execs: Vec<u64>,
    /// Sorted by `start`; no two hold the same address at the same time. Mappings from
    /// before [`Process::end`] stop holding then (applied at lookup, so that a late record
    /// of a thread that outlived the main thread can move the end). Shared with a parent
    /// or child as of a fork, copied at the first change of either ([`Arc::make_mut`]).
    pub(crate) mappings: Arc<Vec<Entry>>,
    /// The longest mapping ever in `mappings`: an overlap with a..b can only come from one
    /// starting after a minus this.
    pub(crate) longest: u64,
    /// No entry ever in `mappings` has a later `origin` than this, nor a finite `until`
    /// later than this: at a fork at or after it, every entry holding at the fork holds for
    /// good, none is of a record after the fork, and the child can share the list as is.
    pub(crate) settled: u64,
    /// Mappings not added because the process held [`MAX_MAPPINGS`] (taken into
    /// [`TableStats::mappings_dropped`] by the table).
    pub(crate) dropped: u64,
    /// (time, owner), sorted by time: the uid whose user may trace it, or [`UNKNOWN_UID`],
    /// and its real uid.
    pub(crate) uids: Vec<(u64, Owner)>,
    /// The time of the last exec whose uid was not read yet. Read when the process is first
    /// sampled after it ([`ProcessTable::read_exec_uid`]); most short-lived processes never
    /// are.
    pub(crate) exec_uid_unread: Option<u64>,
    /// The pid of the process that created it (its FORK record's, or `PPid:` in /proc for a
    /// process read there), when known. Not changed by reparenting: "descendants of N" are
    /// the processes N and its descendants created.
    pub(crate) parent: Option<u32>,
}

impl Process {
    pub(crate) fn new(start: u64) -> Process {
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

    /// Its owner at `time` (the first one known, for a time before it), when known.
    pub(crate) fn owner_at(&self, time: u64) -> Option<Owner> {
        let at = self.uids.partition_point(|&(t, _)| t <= time);
        self.uids.get(at.saturating_sub(1)).map(|&(_, owner)| owner)
    }

    /// When the process ended, when known: its last thread's exit, or the next start.
    pub(crate) fn end(&self) -> Option<u64> {
        let exit = self.exits.first().map(|&e| e.max(self.last_thread_record));
        match (exit, self.next_start) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether `e` holds at `time` in a process that ended at `end`. Records at or after the
    /// end come from a later process on the pid whose FORK has not arrived yet: they hold.
    pub(crate) fn holds(e: &Entry, time: u64, end: Option<u64>) -> bool {
        e.map.holds_at(time) && end.is_none_or(|end| time < end || e.origin >= end)
    }

    /// When a mapping whose record is from `origin` stops holding because of an exec (u64::MAX:
    /// no later exec is known).
    pub(crate) fn lifetime_end(&self, origin: u64) -> u64 {
        self.execs[self.execs.partition_point(|&e| e <= origin)..]
            .first()
            .copied()
            .unwrap_or(FOREVER)
    }

    /// End at `time` every mapping recorded before it (an exec).
    pub(crate) fn end_mappings_before(&mut self, time: u64) {
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
    pub(crate) fn shareable_at(&self, time: u64) -> bool {
        self.settled <= time && self.end().is_none_or(|end| end > time)
    }

    /// Whether a mapping held overlaps a..b: a binary search, then the few that start within
    /// the longest mapping's length before a.
    pub(crate) fn any_overlap(&self, a: u64, b: u64) -> bool {
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
    pub(crate) fn insert_sorted(&mut self, entry: Entry) {
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
    pub(crate) fn insert_mapping(&mut self, map: Mapping) -> Mapping {
        let origin = map.since;
        let until = self.lifetime_end(origin).min(map.until);
        // The common case (a new process's first mappings, or new code beside the old):
        // nothing held overlaps, and the mapping goes in whole, with nothing to cut.
        if !self.any_overlap(map.start, map.end) {
            let added = Mapping { until, ..map };
            if origin < until {
                self.insert_sorted(Entry { map: added, origin });
            }
            return added;
        }
        let mut pieces = self.cut_earlier_records(map.start, map.end, origin);
        let added = self.cut_by_later_records(map, until, &mut pieces);
        for piece in pieces {
            self.insert_sorted(piece);
        }
        added
    }

    /// Mappings of records before `origin` lose a..b from `origin` on: those that held before
    /// it end then, those that did not go; returns the parts outside a..b, which go on holding
    /// (to be inserted).
    fn cut_earlier_records(&mut self, a: u64, b: u64, origin: u64) -> Vec<Entry> {
        let mut pieces = Vec::new();
        let mut i = 0;
        while i < self.mappings.len() {
            let e = self.mappings[i];
            let overlaps = e.map.start < b && a < e.map.end;
            if !overlaps || e.origin >= origin || e.map.until <= origin {
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
        pieces
    }

    /// Mappings of later records (or of the same time, which arrived first) keep their ranges
    /// from their own time on: cut the new `map` (holding until `until` at most) level by
    /// level, one level per later record time. Pushes its parts onto `pieces`; returns it as
    /// added (`until`: the first level that cut it).
    fn cut_by_later_records(&self, map: Mapping, until: u64, pieces: &mut Vec<Entry>) -> Mapping {
        let (a, b, origin) = (map.start, map.end, map.since);
        let mut later: Vec<(u64, u64, u64)> = self
            .mappings
            .iter()
            .filter(|e| e.map.start < b && a < e.map.end && e.origin >= origin && e.origin < until)
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
            let (next, cut) = cut_level(&live, &later[level_at..level_end], level, &map, pieces);
            if cut && first {
                added.until = level;
                first = false;
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
        added
    }

    /// The mapping containing `addr` at `time`.
    pub(crate) fn find(&self, addr: u64, time: u64) -> Option<&Mapping> {
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
    pub(crate) fn holds_records_after_end(&self, end: u64) -> bool {
        // No entry is of a record later than `settled`: no scan of a list (shared, maybe, by
        // thousands of forked children) when none can be.
        (self.settled >= end && self.mappings.iter().any(|e| e.origin >= end))
            || self.execs.last().is_some_and(|&t| t >= end)
            || self.exits.last().is_some_and(|&t| t > end)
    }
}

/// One level of [`Process::cut_by_later_records`]: the parts of `live` (start, end, since)
/// that `cuts` (start, end of later records from `level`) overlap hold until `level` (pushed
/// onto `pieces` as parts of `map` when they held before it), and what the cuts leave of them
/// holds from `level` on. Returns the parts holding from now on, and whether any was cut.
fn cut_level(
    live: &[(u64, u64, u64)],
    cuts: &[(u64, u64, u64)],
    level: u64,
    map: &Mapping,
    pieces: &mut Vec<Entry>,
) -> (Vec<(u64, u64, u64)>, bool) {
    let mut next = Vec::with_capacity(live.len());
    let mut cut = false;
    for &(s, e, since) in live {
        if !cuts.iter().any(|&(_, cs, ce)| cs < e && s < ce) {
            next.push((s, e, since));
            continue;
        }
        if since < level {
            pieces.push(Entry {
                map: map.part(s, e, since, level),
                origin: map.since,
            });
        }
        cut = true;
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
    (next, cut)
}

/// What a child takes of its parent's mappings at a fork.
pub(crate) enum Inherited {
    /// The parent's list as it is, with its `longest` and `settled`.
    Shared(Arc<Vec<Entry>>, u64, u64),
    /// The mappings holding at the fork, in effect from it.
    Copied(Vec<Mapping>),
}

/// A thread: its process, the time it started, when it exited, and its names over time.
#[derive(Debug)]
pub(crate) struct Thread {
    pub(crate) pid: u32,
    /// Time of its FORK record (0: unknown).
    pub(crate) start: u64,
    /// Time of its EXIT record, when it exited after `start`.
    pub(crate) exit: Option<u64>,
    /// (time, name id), sorted by time.
    pub(crate) names: Vec<(u64, u32)>,
}

impl Thread {
    pub(crate) fn new(pid: u32, start: u64) -> Thread {
        Thread {
            pid,
            start,
            exit: None,
            names: Vec::new(),
        }
    }

    pub(crate) fn add_name(&mut self, time: u64, name: u32) {
        let at = self.names.partition_point(|&(t, _)| t <= time);
        self.names.insert(at, (time, name));
    }

    /// The latest time something is known of this thread.
    pub(crate) fn last_seen(&self) -> u64 {
        let named = self.names.last().map_or(0, |&(t, _)| t);
        self.start.max(named).max(self.exit.unwrap_or(0))
    }
}
