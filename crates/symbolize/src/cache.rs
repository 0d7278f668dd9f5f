//! Parse each file once, keyed by build-id or by path and inode.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::elf::ElfFile;
use crate::error::{hex, Error};

/// Which file: by build-id when known, else by path plus device and inode.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FileKey {
    /// The file's GNU build-id bytes.
    BuildId(Vec<u8>),
    /// The separate debug file (symbols only) of the file with this build-id.
    DebugFile(Vec<u8>),
    /// The file's path with the device and inode it had.
    Path {
        /// Path as seen by the profiled process.
        path: PathBuf,
        /// Device number.
        dev: u64,
        /// Inode number.
        ino: u64,
    },
}

/// Parsed files (and parse failures) by [`FileKey`].
///
/// Unbounded: entries stay until the cache is dropped.
#[derive(Debug, Default)]
pub struct SymbolCache {
    files: HashMap<FileKey, Result<Arc<ElfFile>, Arc<Error>>>,
}

impl SymbolCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The parsed file for `key`, opening `open_path` the first time only.
    ///
    /// Failures are cached too, so a corrupt file is reported once. When
    /// `key` is a build-id and the file's build-id differs, the file is not
    /// trusted: the result is [`Error::BuildIdMismatch`].
    pub fn get(&mut self, key: &FileKey, open_path: &Path) -> Result<Arc<ElfFile>, Arc<Error>> {
        if let Some(hit) = self.files.get(key) {
            return hit.clone();
        }
        let result = open_checked(key, open_path).map(Arc::new).map_err(Arc::new);
        if let Err(e) = &result {
            tracing::debug!(error = %e, "cannot symbolize file");
        }
        self.files.insert(key.clone(), result.clone());
        result
    }

    /// Number of keys cached, failures included.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// Where Debian, Fedora and others install a separate debug file for a build-id:
/// `/usr/lib/debug/.build-id/xx/rest.debug`.
pub fn build_id_debug_path(build_id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = build_id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    Some(PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{first:02x}/{}.debug",
        hex(rest)
    )))
}

fn open_checked(key: &FileKey, path: &Path) -> Result<ElfFile, Error> {
    let file = ElfFile::open(path)?;
    if let FileKey::BuildId(expected) | FileKey::DebugFile(expected) = key {
        if file.build_id() != Some(expected.as_slice()) {
            return Err(Error::BuildIdMismatch {
                path: path.to_owned(),
                expected: hex(expected),
                found: file.build_id().map_or_else(|| "none".to_owned(), hex),
            });
        }
    }
    Ok(file)
}
