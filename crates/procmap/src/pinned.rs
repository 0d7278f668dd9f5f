//! Binaries held open from the moment their mapping is seen, so that they can be read after
//! their process exited, from inside its mount namespace, or after being deleted.
//!
//! The profiler runs as root and opens paths that other users control, so every open is
//! non-blocking (a FIFO swapped in at the path cannot hang it), refuses anything but a regular
//! file, and checks the file is the one the kernel reported mapped (device and inode, or
//! build-id) whenever the record said which.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustc_hash::FxHashMap;
use tracing::debug;

use crate::build_id::read_build_id;
use crate::{Access, FileId, MappedFile, Mapping};

/// The file as the live process sees it: a deleted file through its map_files, any other
/// through its root (it may live in another mount namespace), else through its map_files (a
/// path read from /proc/PID/maps is as this process sees it: a chrooted process's host
/// path, which its root does not have). Never the plain path: what it names is nobody's to
/// vouch for. None once the process is gone.
pub fn live_path(pid: u32, mapping: &Mapping, path: &str) -> Option<PathBuf> {
    live_path_of(pid, mapping.start, mapping.end, path)
}

/// [`live_path`] of the file `path` that process `pid` maps at `start..end`.
pub fn live_path_of(pid: u32, start: u64, end: u64, path: &str) -> Option<PathBuf> {
    if path.strip_suffix(" (deleted)").is_none() {
        let through_root = PathBuf::from(format!("/proc/{pid}/root{path}"));
        if through_root.exists() {
            return Some(through_root);
        }
    }
    let mapped = map_files(pid, start, end);
    mapped.exists().then_some(mapped)
}

/// `/proc/PID/map_files/START-END`: the file mapped there, whatever its path now names.
fn map_files(pid: u32, start: u64, end: u64) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}"))
}

/// Counters of [`PinnedFiles`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinStats {
    /// Files pinned.
    pub pinned: u64,
    /// Of those, opened at their plain path after their process was gone (identity checked).
    pub from_plain_path: u64,
    /// Opens refused: not a regular file, or not the file that was mapped.
    pub refused: u64,
    /// Files closed to make room under the descriptor cap (oldest mapping seen first).
    pub evicted: u64,
    /// Files closed by [`PinnedFiles::unpin`].
    pub unpinned: u64,
}

/// Why a file could not be pinned (logged at debug level).
#[derive(Debug, thiserror::Error)]
enum PinError {
    #[error("the process is gone and the mapping did not say which file it was")]
    NoIdentity,
    #[error("{0}: not a regular file")]
    NotRegular(PathBuf),
    #[error("{0}: not the file that was mapped")]
    Differs(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What a file opened at some path is, compared with the mapped one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Identity {
    Matches,
    Differs,
    /// The record said nothing to compare with.
    Unknown,
}

#[derive(Debug)]
struct Pinned {
    file: Arc<File>,
    /// When a mapping of it was last seen (key in `PinnedFiles::order`).
    tick: u64,
}

/// Attempts to pin one file before giving up on it (each new mapping of it is one attempt).
const MAX_PIN_ATTEMPTS: u32 = 32;

/// Binaries held open from the moment their mapping is seen, so that they can be read after
/// the process exited, from inside its mount namespace, or after being deleted. At most
/// `limit` are held: beyond, the one whose mapping was seen longest ago is closed.
#[derive(Debug, Default)]
pub struct PinnedFiles {
    files: FxHashMap<FileId, Pinned>,
    /// Pinned files by the time a mapping of them was last seen, oldest first.
    order: BTreeMap<u64, FileId>,
    /// Files that could not be opened yet, with the number of attempts: a process that exited
    /// before its mapping was read must not stop the next process mapping the same file from
    /// being pinned.
    failed: FxHashMap<FileId, u32>,
    limit: usize,
    tick: u64,
    stats: PinStats,
}

impl PinnedFiles {
    /// Keep at most `limit` files open.
    pub fn new(limit: usize) -> PinnedFiles {
        PinnedFiles {
            limit,
            ..PinnedFiles::default()
        }
    }

    /// Open the binary of a new mapping through the live process, once per file. Nothing
    /// says which file was mapped, so nothing is pinned once the process is gone; prefer
    /// [`PinnedFiles::pin_mapped`]. Returns whether the file is pinned.
    pub fn pin(&mut self, pid: u32, mapping: &Mapping, path: &str) -> bool {
        self.pin_inner(pid, mapping, path, None)
    }

    /// Open the binary of a new mapping, once per file: through the live process (checked
    /// against the device and inode or build-id of the record when it has them), else, when
    /// the process is gone, at its plain path in this mount namespace if it is the same file
    /// (same device and inode, or same build-id). Returns whether the file is pinned.
    pub fn pin_mapped(&mut self, pid: u32, mapping: &Mapping, file: &MappedFile) -> bool {
        self.pin_inner(pid, mapping, &file.path, Some(file))
    }

    fn pin_inner(
        &mut self,
        pid: u32,
        mapping: &Mapping,
        path: &str,
        mapped: Option<&MappedFile>,
    ) -> bool {
        if self.limit == 0 || !path.starts_with('/') || path.starts_with("//anon") {
            return false;
        }
        self.tick += 1;
        if let Some(pinned) = self.files.get_mut(&mapping.file) {
            // Seen mapped again: the last to be evicted.
            self.order.remove(&pinned.tick);
            pinned.tick = self.tick;
            self.order.insert(self.tick, mapping.file);
            return true;
        }
        let attempts = self.failed.get(&mapping.file).copied().unwrap_or(0);
        if attempts >= MAX_PIN_ATTEMPTS {
            return false;
        }
        match self.open(pid, mapping, path, mapped) {
            Ok(file) => {
                self.failed.remove(&mapping.file);
                while self.files.len() >= self.limit {
                    let Some((_, oldest)) = self.order.pop_first() else {
                        break;
                    };
                    self.files.remove(&oldest);
                    self.stats.evicted += 1;
                    debug!(file = ?oldest, "closed the pinned file seen mapped longest ago");
                }
                self.files.insert(
                    mapping.file,
                    Pinned {
                        file: Arc::new(file),
                        tick: self.tick,
                    },
                );
                self.order.insert(self.tick, mapping.file);
                self.stats.pinned += 1;
                true
            }
            Err(err) => {
                if matches!(err, PinError::NotRegular(_) | PinError::Differs(_)) {
                    self.stats.refused += 1;
                }
                debug!(pid, path, attempts, %err, "could not pin the binary");
                if self.failed.len() >= self.limit.saturating_mul(4).max(4096) {
                    // Ids whose owner never unpinned them: start counting again.
                    self.failed.clear();
                }
                self.failed.insert(mapping.file, attempts + 1);
                false
            }
        }
    }

    fn open(
        &mut self,
        pid: u32,
        mapping: &Mapping,
        path: &str,
        mapped: Option<&MappedFile>,
    ) -> Result<File, PinError> {
        let check = |file: &File, strict: bool| {
            mapped.map_or(Identity::Unknown, |m| identity(file, m, strict))
        };
        // As the live process sees it. Device numbers differ between a mapping and stat on
        // some filesystems (btrfs subvolumes, overlayfs), so only the inode is compared here.
        // With the process's access: a path the process's user made a symlink to a file that
        // user may not read does not open.
        let mut error = PinError::NoIdentity;
        if let Some(live) = live_path(pid, mapping, path) {
            let access = Access::of_process(pid);
            match open_regular(&live, &access) {
                Ok(file) if check(&file, false) != Identity::Differs => return Ok(file),
                Ok(_) => {
                    // The path names another file now (replaced since): the mapped one.
                    let mapped_at = map_files(pid, mapping.start, mapping.end);
                    if let Ok(file) = open_regular(&mapped_at, &access) {
                        if check(&file, false) == Identity::Matches {
                            return Ok(file);
                        }
                    }
                    error = PinError::Differs(live);
                }
                Err(err) => error = err,
            }
        }
        // The process is gone: the plain path, if it is the very file that was mapped.
        let Some(mapped) = mapped else {
            return Err(error);
        };
        let plain = Path::new(path.strip_suffix(" (deleted)").unwrap_or(path));
        // Root's access, but only the very file that was mapped is kept.
        let file = open_regular(plain, &Access::Own)?;
        match identity(&file, mapped, true) {
            Identity::Matches => {
                self.stats.from_plain_path += 1;
                Ok(file)
            }
            Identity::Differs => Err(PinError::Differs(plain.to_path_buf())),
            Identity::Unknown => Err(PinError::NoIdentity),
        }
    }

    /// Close `file` (its id was released by [`crate::ProcessTable::prune`]). Handles given
    /// out keep it open until dropped. Returns whether it was pinned.
    pub fn unpin(&mut self, file: FileId) -> bool {
        self.failed.remove(&file);
        match self.files.remove(&file) {
            Some(pinned) => {
                self.order.remove(&pinned.tick);
                self.stats.unpinned += 1;
                true
            }
            None => false,
        }
    }

    /// A path that opens the pinned file (`/proc/self/fd/N`), if it is pinned.
    pub fn path(&self, file: FileId) -> Option<PathBuf> {
        let fd = self.files.get(&file)?.file.as_raw_fd();
        Some(format!("/proc/self/fd/{fd}").into())
    }

    /// The pinned file itself, if it is pinned: a holder keeps it open after it is unpinned
    /// or evicted (the descriptor closes with its last holder).
    pub fn handle(&self, file: FileId) -> Option<Arc<File>> {
        self.files.get(&file).map(|p| Arc::clone(&p.file))
    }

    /// Counters.
    pub fn stats(&self) -> PinStats {
        self.stats
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

/// Open `path` for reading with `access` (see [`Access::open`]: without blocking, a regular
/// file only).
fn open_regular(path: &Path, access: &Access) -> Result<File, PinError> {
    access.open(path).map_err(|source| {
        if source.kind() == io::ErrorKind::InvalidInput {
            PinError::NotRegular(path.to_path_buf())
        } else {
            PinError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

/// Whether `file` is the mapped file: same device (when `strict_dev`) and inode, else same
/// build-id, as far as the record said.
fn identity(file: &File, mapped: &MappedFile, strict_dev: bool) -> Identity {
    if let Some((dev, ino)) = mapped.dev_ino {
        let same = file
            .metadata()
            .is_ok_and(|m| m.ino() == ino && (!strict_dev || m.dev() == dev));
        return if same {
            Identity::Matches
        } else {
            Identity::Differs
        };
    }
    let Some(expected) = mapped.build_id.as_deref().filter(|id| !id.is_empty()) else {
        return Identity::Unknown;
    };
    let found = read_build_id(file);
    // Reading moved the shared file offset; holders expect it at the start.
    let _ = (&*file).seek(SeekFrom::Start(0));
    // The kernel reports at most 20 bytes.
    match found {
        Some(id) if id[..id.len().min(20)] == *expected => Identity::Matches,
        _ => Identity::Differs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build_id::{compile_with_build_id, unhex};
    use crate::sys;
    use std::fs::OpenOptions;
    use std::os::unix::fs::OpenOptionsExt;

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

    fn mapped(path: &Path) -> MappedFile {
        MappedFile {
            path: path.to_str().unwrap().to_string(),
            build_id: None,
            dev_ino: None,
        }
    }

    fn dev_ino(path: &Path) -> Option<(u64, u64)> {
        let meta = std::fs::metadata(path).unwrap();
        Some((meta.dev(), meta.ino()))
    }

    /// A pid no process has: the process "exited" before its mapping was read.
    const GONE: u32 = u32::MAX - 1;

    /// Descriptors of this process open on `path`.
    fn open_on(path: &Path) -> usize {
        let path = path.canonicalize().unwrap();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == path))
            .count()
    }

    fn temp_file(dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, name).unwrap();
        path
    }

    #[test]
    fn a_failed_pin_is_retried_by_the_next_mapping_of_the_file() {
        let exe = std::env::current_exe().unwrap();
        let path = exe.to_str().unwrap();
        let mut pinned = PinnedFiles::new(16);
        assert!(!pinned.pin(GONE, &mapping(7), path));
        assert!(pinned.path(FileId(7)).is_none());
        assert!(pinned.pin(std::process::id(), &mapping(7), path));
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

    #[test]
    fn unpin_closes_the_descriptor_once_no_handle_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_file(dir.path(), "unpin-me");
        let mut pinned = PinnedFiles::new(16);
        assert!(pinned.pin_mapped(std::process::id(), &mapping(1), &mapped(&path)));
        assert_eq!(open_on(&path), 1);
        let handle = pinned.handle(FileId(1)).unwrap();
        assert!(!sys::is_nonblocking(&handle), "O_NONBLOCK is cleared");
        assert!(pinned.unpin(FileId(1)));
        assert!(pinned.path(FileId(1)).is_none() && pinned.handle(FileId(1)).is_none());
        assert_eq!(open_on(&path), 1, "the handle keeps it open");
        drop(handle);
        assert_eq!(open_on(&path), 0, "closed with its last holder");
        assert!(!pinned.unpin(FileId(1)));
        assert_eq!(pinned.stats().unpinned, 1);
        assert!(pinned.is_empty());
    }

    #[test]
    fn a_fifo_at_the_path_neither_blocks_nor_is_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let mut pinned = PinnedFiles::new(16);
            let live = pinned.pin(std::process::id(), &mapping(1), path.to_str().unwrap());
            let gone = pinned.pin_mapped(
                GONE,
                &mapping(2),
                &MappedFile {
                    dev_ino: dev_ino(&path),
                    ..mapped(&path)
                },
            );
            tx.send((live, gone, pinned.stats().refused)).unwrap();
        });
        match rx.recv_timeout(std::time::Duration::from_secs(10)) {
            Ok(result) => assert_eq!(result, (false, false, 2)),
            Err(_) => {
                // Let the blocked open finish before failing.
                let _ = OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&fifo);
                panic!("pinning blocked on a FIFO");
            }
        }
    }

    #[test]
    fn a_gone_process_pins_its_file_only_when_its_identity_matches() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_file(dir.path(), "plain");
        let mut pinned = PinnedFiles::new(16);
        // Nothing to check it against.
        assert!(!pinned.pin_mapped(GONE, &mapping(1), &mapped(&path)));
        // Another inode.
        let (dev, ino) = dev_ino(&path).unwrap();
        let other = MappedFile {
            dev_ino: Some((dev, ino + 1)),
            ..mapped(&path)
        };
        assert!(!pinned.pin_mapped(GONE, &mapping(2), &other));
        // Another device.
        let other = MappedFile {
            dev_ino: Some((dev + 1, ino)),
            ..mapped(&path)
        };
        assert!(!pinned.pin_mapped(GONE, &mapping(3), &other));
        // The same file.
        let same = MappedFile {
            dev_ino: dev_ino(&path),
            ..mapped(&path)
        };
        assert!(pinned.pin_mapped(GONE, &mapping(4), &same));
        assert_eq!(pinned.stats().from_plain_path, 1);
        assert_eq!(pinned.stats().refused, 2);
        // By build-id.
        let id = "00112233445566778899aabbccddeeff00112233";
        let exe = compile_with_build_id(dir.path(), id);
        let wrong = MappedFile {
            build_id: Some(unhex("ffeeddccbbaa99887766554433221100ffeeddcc")),
            ..mapped(&exe)
        };
        assert!(!pinned.pin_mapped(GONE, &mapping(5), &wrong));
        let right = MappedFile {
            build_id: Some(unhex(id)),
            ..mapped(&exe)
        };
        assert!(pinned.pin_mapped(GONE, &mapping(6), &right));
        // A deleted file's plain path, with the same build-id (reinstalled).
        let deleted = MappedFile {
            path: format!("{} (deleted)", exe.display()),
            build_id: Some(unhex(id)),
            dev_ino: None,
        };
        assert!(pinned.pin_mapped(GONE, &mapping(7), &deleted));
        assert_eq!(pinned.len(), 3);
        // The pinned descriptor reads the file from its start (the build-id was read
        // through it).
        let handle = pinned.handle(FileId(6)).unwrap();
        let mut head = [0u8; 4];
        std::io::Read::read_exact(&mut &*handle, &mut head).unwrap();
        assert_eq!(&head, b"\x7fELF");
    }

    #[test]
    fn a_live_path_naming_another_file_now_is_not_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let path = temp_file(dir.path(), "replaced");
        let (dev, ino) = dev_ino(&path).unwrap();
        let mut pinned = PinnedFiles::new(16);
        let replaced = MappedFile {
            dev_ino: Some((dev, ino + 1)),
            ..mapped(&path)
        };
        assert!(!pinned.pin_mapped(std::process::id(), &mapping(1), &replaced));
        // Only the inode is compared through the live process (device numbers of a mapping
        // and of stat differ on btrfs and overlayfs).
        let same_inode = MappedFile {
            dev_ino: Some((dev + 1, ino)),
            ..mapped(&path)
        };
        assert!(pinned.pin_mapped(std::process::id(), &mapping(2), &same_inode));
        assert_eq!(pinned.stats().from_plain_path, 0);
    }

    #[test]
    fn the_cap_closes_the_file_seen_mapped_longest_ago() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (1..=4)
            .map(|i| temp_file(dir.path(), &format!("lru-{i}")))
            .collect();
        let own = std::process::id();
        let mut pinned = PinnedFiles::new(3);
        for (i, path) in paths.iter().enumerate().take(3) {
            assert!(pinned.pin(own, &mapping(i as u32 + 1), path.to_str().unwrap()));
        }
        // File 1 is mapped again: file 2 is now the oldest.
        assert!(pinned.pin(own, &mapping(1), paths[0].to_str().unwrap()));
        assert!(pinned.pin(own, &mapping(4), paths[3].to_str().unwrap()));
        assert_eq!(pinned.len(), 3);
        assert!(pinned.path(FileId(2)).is_none());
        assert_eq!(open_on(&paths[1]), 0);
        for id in [1, 3, 4] {
            assert!(pinned.path(FileId(id)).is_some(), "{id}");
        }
        assert_eq!(pinned.stats().evicted, 1);
        for i in 5..50u32 {
            pinned.pin(own, &mapping(i), paths[(i % 4) as usize].to_str().unwrap());
            assert!(pinned.len() <= 3);
        }
        // No limit, no pins.
        assert!(!PinnedFiles::new(0).pin(own, &mapping(1), paths[0].to_str().unwrap()));
    }
}
