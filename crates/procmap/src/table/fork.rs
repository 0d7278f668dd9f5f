//! The FORK of a process: a new incarnation of its pid, with its parent's mappings, name and
//! uid at the fork, taking over records of it that arrived before the FORK.

use std::mem;
use std::sync::Arc;

use crate::process::{Entry, Inherited, Mapping, Process, FOREVER};
use crate::Owner;

use super::ProcessTable;

impl ProcessTable {
    /// Start the process `pid` that `ppid` created at `time`.
    pub(super) fn start_process(&mut self, pid: u32, ppid: u32, time: u64) {
        // A parent that exec'd and was not sampled since has its uid read now, for the child
        // to inherit (one read per exec'd process that forks before it is sampled).
        self.read_exec_uid(ppid, time);
        let (inherited, owner) = self.inherited_at(ppid, time);
        let list = self.processes.entry(pid).or_default();
        let at = list.partition_point(|p| p.start <= time);
        if at > 0 && list[at - 1].start == time {
            return; // The same FORK twice.
        }
        let mut new = Process::new(time);
        new.parent = Some(ppid);
        match at.checked_sub(1).map(|i| &mut list[i]) {
            Some(prev) => take_over_early_records(prev, &mut new, time),
            None => new.next_start = list.first().map(|p| p.start),
        }
        if inherit_mappings(&mut new, inherited, time) {
            self.stats.forks_shared += 1;
        }
        self.stats.mappings_dropped += mem::take(&mut new.dropped);
        if let Some(owner) = owner {
            if new.uids.first().is_none_or(|&(t, _)| t > time) {
                new.uids.insert(0, (time, owner));
            }
        }
        list.insert(at, new);
    }

    /// The parent's mappings and owner as of a fork at `time`: its mappings shared as they are
    /// when every one holding at the fork holds for good (the common case: an O(1) fork,
    /// whatever the parent holds); else the ones holding then, copied in one pass.
    fn inherited_at(&self, ppid: u32, time: u64) -> (Inherited, Option<Owner>) {
        match self.process_at(ppid, time) {
            Some(parent) if parent.shareable_at(time) => (
                Inherited::Shared(Arc::clone(&parent.mappings), parent.longest, parent.settled),
                parent.owner_at(time),
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
                parent.owner_at(time),
            ),
            None => (Inherited::Copied(Vec::new()), None),
        }
    }
}

/// Records of the process `new` started at `time` that arrived before its FORK went to `prev`,
/// the process before it on the pid: `new` takes them over.
fn take_over_early_records(prev: &mut Process, new: &mut Process, time: u64) {
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
    // An exit at or after `time` is this process's (its EXIT came first); the one before
    // ended by `time` at the latest.
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

/// Give `new`, forked at `time`, the mappings it inherited; true when it shares its parent's
/// list (no copy).
fn inherit_mappings(new: &mut Process, inherited: Inherited, time: u64) -> bool {
    let fresh = new.mappings.is_empty() && new.execs.is_empty();
    match inherited {
        // The common case: nothing of the child's arrived before its FORK, and the
        // parent's list can be shared (a later change of either copies it first).
        Inherited::Shared(mappings, longest, settled) if fresh => {
            new.mappings = mappings;
            new.longest = longest;
            new.settled = settled;
            return true;
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
    false
}
