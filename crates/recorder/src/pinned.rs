//! Binaries held open from the moment their mapping is seen, so that they can be read after
//! their process exited, from inside its mount namespace, or after being deleted.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;

use procmap::{FileId, Mapping};
use rustc_hash::FxBuildHasher;

use crate::user_symbols::live_path;

/// Binaries held open from the moment their mapping is seen, so that they can be read after
/// the process exited, from inside its mount namespace, or after being deleted.
#[derive(Debug, Default)]
pub struct PinnedFiles {
    files: HashMap<FileId, Option<File>, FxBuildHasher>,
    limit: usize,
}

impl PinnedFiles {
    /// Keep at most `limit` files open.
    pub(crate) fn new(limit: usize) -> PinnedFiles {
        PinnedFiles {
            files: HashMap::default(),
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
        let file = live_path(pid, mapping, path).and_then(|p| File::open(p).ok());
        if file.is_none() {
            tracing::debug!(pid, path, "could not pin the binary");
        }
        self.files.insert(mapping.file, file);
    }

    /// A path that opens the pinned file (`/proc/self/fd/N`), if it was pinned.
    pub fn path(&self, file: FileId) -> Option<std::path::PathBuf> {
        let fd = self.files.get(&file)?.as_ref()?.as_raw_fd();
        Some(format!("/proc/self/fd/{fd}").into())
    }

    /// Files held open.
    pub fn len(&self) -> usize {
        self.files.values().filter(|f| f.is_some()).count()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
