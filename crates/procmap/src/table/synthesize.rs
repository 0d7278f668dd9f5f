//! Reading the processes alive before recording started from /proc, in effect from time 0.

use tracing::debug;

use crate::files::MappedFile;
use crate::owner::read_status;
use crate::proc_fs::{makedev, parse_maps_line};
use crate::ProcError;

use super::{set_at, ProcessTable};

/// ESRCH: reading /proc of a process that is exiting.
const ESRCH: i32 = 3;

impl ProcessTable {
    /// Read a process alive before recording started from /proc: its threads' names, its
    /// owner ([`owner_of`](crate::owner_of)) and real uid, and its executable mappings, all in
    /// effect from time 0.
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
        let owner = status.map(|(owner, _)| owner);
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
        if let Some(owner) = owner {
            set_at(&mut process.uids, 0, owner);
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
}
