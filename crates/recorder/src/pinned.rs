//! Binaries held open from the moment their mapping is seen, so that they can be read after
//! their process exited, from inside its mount namespace, or after being deleted.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use procmap::{FileId, Mapping};
use rustc_hash::FxBuildHasher;

use crate::user_symbols::live_path;

/// Binaries held open from the moment their mapping is seen, so that they can be read after
/// the process exited, from inside its mount namespace, or after being deleted.
#[derive(Debug, Default)]
pub struct PinnedFiles {
    files: HashMap<FileId, Arc<File>, FxBuildHasher>,
    /// Files that could not be opened yet, with the number of attempts: a process that exited
    /// before its mapping was read must not stop the next process mapping the same file from
    /// being pinned.
    failed: HashMap<FileId, u32, FxBuildHasher>,
    limit: usize,
}

/// Attempts to pin one file before giving up on it (each new mapping of it is one attempt).
const MAX_PIN_ATTEMPTS: u32 = 32;

impl PinnedFiles {
    /// Keep at most `limit` files open.
    pub(crate) fn new(limit: usize) -> PinnedFiles {
        PinnedFiles {
            files: HashMap::default(),
            failed: HashMap::default(),
            limit,
        }
    }

    /// Open the binary of a new mapping through the live process, once per file.
    pub(crate) fn pin(&mut self, pid: u32, mapping: &Mapping, path: &str) {
        if self.files.len() >= self.limit
            || self.files.contains_key(&mapping.file)
            || !path.starts_with('/')
            || path.starts_with("//anon")
        {
            return;
        }
        let attempts = self.failed.get(&mapping.file).copied().unwrap_or(0);
        if attempts >= MAX_PIN_ATTEMPTS {
            return;
        }
        match live_path(pid, mapping, path).and_then(|p| File::open(p).ok()) {
            Some(file) => {
                self.failed.remove(&mapping.file);
                self.files.insert(mapping.file, Arc::new(file));
            }
            None => {
                tracing::debug!(pid, path, attempts, "could not pin the binary");
                self.failed.insert(mapping.file, attempts + 1);
            }
        }
    }

    /// A path that opens the pinned file (`/proc/self/fd/N`), if it was pinned.
    pub fn path(&self, file: FileId) -> Option<std::path::PathBuf> {
        let fd = self.files.get(&file)?.as_raw_fd();
        Some(format!("/proc/self/fd/{fd}").into())
    }

    /// The open file, shared: a holder keeps it open after it is unpinned.
    pub fn handle(&self, file: FileId) -> Option<Arc<File>> {
        self.files.get(&file).cloned()
    }

    /// Files held open.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(file: u32) -> Mapping {
        Mapping {
            start: 0x1000,
            end: 0x2000,
            pgoff: 0,
            file: FileId(file),
            since: 0,
            until: u64::MAX,
        }
    }

    #[test]
    fn a_failed_pin_is_retried_by_the_next_mapping_of_the_file() {
        let exe = std::env::current_exe().unwrap();
        let path = exe.to_str().unwrap();
        let mut pinned = PinnedFiles::new(16);
        // No process has pid u32::MAX - 1: the first process "exited" before it was read.
        pinned.pin(u32::MAX - 1, &mapping(7), path);
        assert!(pinned.path(FileId(7)).is_none());
        pinned.pin(std::process::id(), &mapping(7), path);
        let through = pinned
            .path(FileId(7))
            .expect("the second mapping pins the file");
        assert_eq!(
            std::fs::metadata(through).unwrap().len(),
            std::fs::metadata(&exe).unwrap().len()
        );
    }

    #[test]
    fn a_file_that_never_opens_is_given_up() {
        let mut pinned = PinnedFiles::new(16);
        for _ in 0..MAX_PIN_ATTEMPTS + 5 {
            pinned.pin(std::process::id(), &mapping(3), "/nonexistent/profctl-test");
        }
        assert_eq!(pinned.failed[&FileId(3)], MAX_PIN_ATTEMPTS);
        assert!(pinned.is_empty());
    }
}
