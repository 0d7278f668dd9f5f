//! Applying the side-band records to the table: MMAP2 (a mapping), COMM (a name, an exec),
//! FORK (a thread; a process's in `fork.rs`) and EXIT; and the owner after an exec, read when
//! the process is first sampled.

use crate::files::{FileParts, MappedFile};
use crate::owner::{read_owner_if_there_at, Owner, UNKNOWN_UID};
use crate::process::{Mapping, Thread, FOREVER, NO_NAME};

use super::{set_at, ProcessTable};

impl ProcessTable {
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
    /// until it is read from /proc when the process is first sampled after the exec. Its real
    /// uid stays what it was before (an exec never changes it; a set-uid bit changes the
    /// effective and saved uids only) until that read.
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
                let real_uid = process.owner_at(time).map_or(UNKNOWN_UID, |o| o.real_uid);
                let owner = Owner {
                    uid: UNKNOWN_UID,
                    real_uid,
                };
                set_at(&mut process.uids, time, owner);
            }
        }
    }

    /// The process on `pid` is sampled at `time`: if it exec'd before and its owner since the
    /// exec was not read, read it now from /proc (one small read per exec of a sampled
    /// process; see [`owner_of`](crate::owner_of)), with its real uid. Not when the process is
    /// known to have exited (its pid may name another process already), nor when the process
    /// on the pid now started after the exec (the pid was reused): the owner then stays
    /// [`UNKNOWN_UID`], its real uid the one it had before the exec. A rename since the exec
    /// does not matter.
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
        if let Some(owner) = read_owner_if_there_at(pid, exec) {
            set_at(&mut process.uids, exec, owner);
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
}
