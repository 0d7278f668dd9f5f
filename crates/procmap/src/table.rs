//! The process table: processes, their threads' names and their executable mappings over time.

use std::collections::HashMap;

use tracing::debug;

use crate::files::{FileId, FileTable, MappedFile};
use crate::proc_fs::{makedev, parse_maps_line};
use crate::ProcError;

/// Time meaning "still in effect".
const FOREVER: u64 = u64::MAX;

/// An executable mapping of a file into a process, in effect during `since..until`.
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
    /// Time at which it stopped holding (u64::MAX: still holds).
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
}

#[derive(Debug, Default)]
struct Process {
    /// Sorted by `start`; entries from different times may overlap.
    mappings: Vec<Mapping>,
    exit_time: Option<u64>,
}

#[derive(Debug)]
struct Thread {
    pid: u32,
    /// (time, name id), sorted by time.
    names: Vec<(u64, u32)>,
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
}

/// Every known process, keyed by pid; threads keyed by tid.
#[derive(Debug, Default)]
pub struct ProcessTable {
    processes: HashMap<u32, Process>,
    threads: HashMap<u32, Thread>,
    names: Vec<String>,
    name_ids: HashMap<String, u32>,
    files: FileTable,
    stats: TableStats,
}

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
        let file = self.files.intern(file);
        self.stats.mappings += 1;
        let end = start.saturating_add(len);
        let process = self.processes.entry(pid).or_default();
        let mut until = FOREVER;
        let mut pieces = Vec::new();
        for m in process
            .mappings
            .iter_mut()
            .filter(|m| m.start < end && start < m.end)
        {
            if m.since >= time {
                // A newer mapping (its record arrived first) already covers part of this one.
                until = until.min(m.since);
                continue;
            }
            if m.until > time {
                // Parts of the old mapping outside the new range go on holding.
                if m.start < start {
                    pieces.push(Mapping {
                        end: start,
                        since: time,
                        ..*m
                    });
                }
                if m.end > end {
                    pieces.push(Mapping {
                        start: end,
                        pgoff: m.pgoff + (end - m.start),
                        since: time,
                        ..*m
                    });
                }
                m.until = time;
            }
        }
        let added = Mapping {
            start,
            end,
            pgoff,
            file,
            since: time,
            until,
        };
        pieces.push(added);
        for piece in pieces {
            let at = process.mappings.partition_point(|m| m.start <= piece.start);
            process.mappings.insert(at, piece);
        }
        added
    }

    /// Record a thread's new name; `exec` means the process replaced its address space.
    pub fn set_comm(&mut self, pid: u32, tid: u32, time: u64, name: &str, exec: bool) {
        self.stats.comms += 1;
        let name = self.intern_name(name);
        let thread = self.threads.entry(tid).or_insert_with(|| Thread {
            pid,
            names: Vec::new(),
        });
        thread.pid = pid;
        let at = thread.names.partition_point(|&(t, _)| t <= time);
        thread.names.insert(at, (time, name));
        if exec {
            self.stats.execs += 1;
            let process = self.processes.entry(pid).or_default();
            for m in process
                .mappings
                .iter_mut()
                .filter(|m| m.since < time && m.until > time)
            {
                m.until = time;
            }
        }
    }

    /// Record a new process (pid != ppid) or thread (pid == ppid) created at `time`.
    pub fn fork(&mut self, pid: u32, ppid: u32, tid: u32, ptid: u32, time: u64) {
        self.stats.forks += 1;
        let parent_name = self
            .name_id_at(ptid, time)
            .or_else(|| self.name_id_at(ppid, time));
        let thread = self.threads.entry(tid).or_insert_with(|| Thread {
            pid,
            names: Vec::new(),
        });
        thread.pid = pid;
        if let Some(name) = parent_name {
            // Inherited name, in effect from the fork until a later comm.
            let at = thread.names.partition_point(|&(t, _)| t <= time);
            thread.names.insert(at, (time, name));
        }
        if pid != ppid {
            let inherited: Vec<Mapping> = self
                .processes
                .get(&ppid)
                .map(|p| {
                    p.mappings
                        .iter()
                        .filter(|m| m.holds_at(time))
                        .map(|m| Mapping { since: time, ..*m })
                        .collect()
                })
                .unwrap_or_default();
            let child = self.processes.entry(pid).or_default();
            for m in inherited {
                let at = child.mappings.partition_point(|c| c.start <= m.start);
                child.mappings.insert(at, m);
            }
        }
    }

    /// Record that a thread (or, when tid == pid, the process) exited at `time`.
    pub fn exit(&mut self, pid: u32, tid: u32, time: u64) {
        self.stats.exits += 1;
        if pid == tid {
            self.processes.entry(pid).or_default().exit_time = Some(time);
        }
    }

    /// Read a process alive before recording started from /proc: its threads' names and its
    /// executable mappings, all in effect from time 0.
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
        self.processes.entry(pid).or_default();
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

    /// The mapping of `pid` containing `addr` at `time`.
    pub fn find_mapping(&self, pid: u32, addr: u64, time: u64) -> Option<&Mapping> {
        let process = self.processes.get(&pid)?;
        let upto = process.mappings.partition_point(|m| m.start <= addr);
        let candidates = process.mappings[..upto]
            .iter()
            .rev()
            .filter(|m| addr < m.end);
        let mut best: Option<&Mapping> = None;
        for m in candidates {
            if m.holds_at(time) {
                return Some(m);
            }
            // Before the first record of a process: the earliest mapping stands in.
            if time < m.since && best.is_none_or(|b| m.since < b.since) {
                best = Some(m);
            }
        }
        best
    }

    /// Every mapping of `pid` in effect at `time`, by start address.
    pub fn mappings_at(&self, pid: u32, time: u64) -> impl Iterator<Item = &Mapping> {
        self.processes
            .get(&pid)
            .into_iter()
            .flat_map(move |p| p.mappings.iter().filter(move |m| m.holds_at(time)))
    }

    fn name_id_at(&self, tid: u32, time: u64) -> Option<u32> {
        let names = &self.threads.get(&tid)?.names;
        let at = names.partition_point(|&(t, _)| t <= time);
        names.get(at.saturating_sub(1)).map(|&(_, id)| id)
    }

    /// The name (comm) of thread `tid` at `time`, falling back to the process's main thread.
    pub fn thread_name(&self, pid: u32, tid: u32, time: u64) -> Option<&str> {
        let id = self
            .name_id_at(tid, time)
            .or_else(|| self.name_id_at(pid, time))?;
        Some(&self.names[id as usize])
    }

    /// The process a thread belongs to, when known.
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

    /// Number of processes known.
    pub fn process_count(&self) -> usize {
        self.processes.len()
    }

    /// Forget processes that exited before `time` (their samples must be resolved by then).
    pub fn remove_exited(&mut self, time: u64) -> usize {
        let gone: Vec<u32> = self
            .processes
            .iter()
            .filter(|(_, p)| p.exit_time.is_some_and(|t| t < time))
            .map(|(&pid, _)| pid)
            .collect();
        for pid in &gone {
            self.processes.remove(pid);
        }
        self.threads.retain(|_, t| !gone.contains(&t.pid));
        gone.len()
    }
}

/// ESRCH: reading /proc of a process that is exiting.
const ESRCH: i32 = 3;

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> MappedFile {
        MappedFile {
            path: path.into(),
            build_id: None,
            dev_ino: None,
        }
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
        assert_eq!(t.remove_exited(100), 1);
        assert!(t.find_mapping(6, 0x1000, 55).is_none());
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
