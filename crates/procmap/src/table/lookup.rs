//! What samples ask of the table, at the sample's time: a mapping, the mappings, whether two
//! processes share theirs, a process's identity, owner, parent and ancestors, a thread's name.

use std::sync::Arc;

use crate::process::{Mapping, Process, ProcessKey, NO_NAME};
use crate::Owner;
#[cfg(doc)]
use crate::UNKNOWN_UID;

use super::ProcessTable;

impl ProcessTable {
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
        self.owner(pid, time).map(|o| o.uid)
    }

    /// The owner of the process on `pid` at `time` ([`ProcessTable::uid`]) with its real uid
    /// (whose share its stacks count against): read, inherited and kept as the owner is,
    /// except that an exec keeps the real uid (execve never changes it) until it is read.
    pub fn owner(&self, pid: u32, time: u64) -> Option<Owner> {
        self.process_at(pid, time)?.owner_at(time)
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

    pub(super) fn name_id_at(&self, tid: u32, time: u64) -> Option<u32> {
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
}
