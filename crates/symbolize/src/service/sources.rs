//! Which mapped files name their frames alike, so that they share one symbolizer and one set
//! of cached names.
//!
//! A service redeployed as a fresh copy of the same binary, or a library mapped from several
//! containers, is a new mapped file each time; opening, indexing and naming each copy again
//! cost most of the service's CPU under such churn. Files with the same build-id, the same
//! size and the same owner are one *source*: the first copy's symbolizer and names serve the
//! others. The owner is part of the key so that a file one user made can never name another
//! user's frames: a user's file carrying the build-id of root's libc is a source of its own.
//! A file without a build-id is one source with itself whatever process maps it: the same
//! device, inode, size, owner and modification time (so that each new process of a compiler
//! shipped without build-ids does not name its addresses again). A file that is not held
//! open is a source alone.
//!
//! A source whose files are all released stays known, idle, so that the next copy (a deploy
//! seen only in a later window) finds its names; at most [`MAX_IDLE`] idle sources are kept,
//! the longest idle dropped first.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::MetadataExt;

use profile::WindowFile;
use rustc_hash::FxBuildHasher;

/// What makes two files interchangeable for naming: the same build-id, size and owner; or,
/// for a file without a build-id, being the same file, unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContentKey {
    id: ContentId,
    size: u64,
    owner: u32,
}

/// What tells a file's content apart.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ContentId {
    /// Its GNU build-id.
    BuildId(Box<[u8]>),
    /// No build-id: the file itself (device, inode) as last modified (ns since the epoch).
    File { dev: u64, ino: u64, mtime_ns: i128 },
}

impl ContentKey {
    /// The key of `file` (held open) whose build-id is `build_id` (None or empty: the file
    /// has none); None when the file cannot be inspected (it is then a source alone).
    pub fn of(build_id: Option<&[u8]>, file: &File) -> Option<ContentKey> {
        let meta = file.metadata().ok()?;
        let id = match build_id.filter(|id| !id.is_empty()) {
            Some(id) => ContentId::BuildId(id.into()),
            None => ContentId::File {
                dev: meta.dev(),
                ino: meta.ino(),
                mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            },
        };
        Some(ContentKey {
            id,
            size: meta.size(),
            owner: meta.uid(),
        })
    }

    /// The id of this content in the [`crate::FrameCache`]: the build-id, then the size and
    /// the owner (so that frames one user's file produced never name another user's). None
    /// for a file without a build-id: the frame cache outlives the files it names, and only
    /// a build-id names the same content in a later run.
    pub fn cache_id(&self) -> Option<Vec<u8>> {
        let ContentId::BuildId(build_id) = &self.id else {
            return None;
        };
        let mut id = Vec::with_capacity(build_id.len() + 12);
        id.extend_from_slice(build_id);
        id.extend_from_slice(&self.size.to_le_bytes());
        id.extend_from_slice(&self.owner.to_le_bytes());
        Some(id)
    }
}

/// How the service and the preloader tell sources apart: by content, or by the window file
/// id of a file that is a source alone.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum SourceKey {
    /// Files with this content.
    Content(ContentKey),
    /// This file alone ([`profile::WindowFile::id`]).
    File(u32),
}

impl SourceKey {
    /// The content key, when the source is one.
    pub(crate) fn content(&self) -> Option<&ContentKey> {
        match self {
            SourceKey::Content(key) => Some(key),
            SourceKey::File(_) => None,
        }
    }

    /// The key of a file with `build_id`, held open as `pinned` (if it is), and window id
    /// `file`.
    pub(crate) fn of(file: u32, build_id: Option<&[u8]>, pinned: Option<&File>) -> SourceKey {
        pinned
            .and_then(|f| ContentKey::of(build_id, f))
            .map_or(SourceKey::File(file), SourceKey::Content)
    }
}

/// A small id for a source, the key of the service's caches. Never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SourceId(pub(crate) u32);

/// Idle sources (every file released) kept known.
pub(crate) const MAX_IDLE: usize = 4096;

struct Source {
    key: SourceKey,
    /// Files of the source not yet released.
    files: u32,
    /// When idle: its key in `Sources::idle`.
    idle_since: Option<u64>,
}

/// The sources of the files the service has seen and not yet released, and up to
/// [`MAX_IDLE`] sources whose files were all released.
#[derive(Default)]
pub(crate) struct Sources {
    of_file: HashMap<u32, SourceId, FxBuildHasher>,
    by_key: HashMap<SourceKey, SourceId, FxBuildHasher>,
    sources: HashMap<SourceId, Source, FxBuildHasher>,
    /// Idle sources by the tick they became idle, oldest first.
    idle: BTreeMap<u64, SourceId>,
    tick: u64,
    next: u32,
}

/// What [`Sources::release`] found.
pub(crate) struct Released {
    /// The source the file was one of.
    pub(crate) source: SourceId,
    /// Sources dropped (idle too long), with their keys: forget what is held for them.
    pub(crate) dropped: Vec<(SourceId, SourceKey)>,
}

impl Sources {
    /// The source of `file` (inspecting it the first time it is seen).
    pub(crate) fn of(&mut self, file: &WindowFile) -> SourceId {
        if let Some(&id) = self.of_file.get(&file.id) {
            return id;
        }
        let key = SourceKey::of(file.id, file.build_id.as_deref(), file.pinned.as_deref());
        let id = match self.by_key.get(&key) {
            Some(&id) => id,
            None => {
                let id = SourceId(self.next);
                // Wrapping would let an old id name a new source: stay on the last one.
                self.next = self.next.saturating_add(1);
                self.by_key.insert(key.clone(), id);
                let source = Source {
                    key,
                    files: 0,
                    idle_since: None,
                };
                self.sources.insert(id, source);
                id
            }
        };
        if let Some(source) = self.sources.get_mut(&id) {
            source.files += 1;
            if let Some(tick) = source.idle_since.take() {
                self.idle.remove(&tick);
            }
        }
        self.of_file.insert(file.id, id);
        id
    }

    /// The source of `file`, if it was seen and not released.
    pub(crate) fn source_of_file(&self, file: u32) -> Option<SourceId> {
        self.of_file.get(&file).copied()
    }

    /// The key of source `id`, while one of its files is not released.
    pub(crate) fn key(&self, id: SourceId) -> Option<&SourceKey> {
        self.sources.get(&id).map(|s| &s.key)
    }

    /// File `file` is released: no process maps it any more. A source left without files
    /// becomes idle; the longest idle beyond [`MAX_IDLE`] are dropped. None if the file was
    /// never seen.
    pub(crate) fn release(&mut self, file: u32) -> Option<Released> {
        let id = self.of_file.remove(&file)?;
        let source = self.sources.get_mut(&id)?;
        source.files = source.files.saturating_sub(1);
        if source.files == 0 && source.idle_since.is_none() {
            self.tick += 1;
            source.idle_since = Some(self.tick);
            self.idle.insert(self.tick, id);
        }
        let mut dropped = Vec::new();
        while self.idle.len() > MAX_IDLE {
            let Some((_, oldest)) = self.idle.pop_first() else {
                break;
            };
            if let Some(source) = self.sources.remove(&oldest) {
                self.by_key.remove(&source.key);
                dropped.push((oldest, source.key));
            }
        }
        Some(Released {
            source: id,
            dropped,
        })
    }

    /// Forget every file and source (ids are not reused).
    pub(crate) fn clear(&mut self) {
        self.of_file.clear();
        self.by_key.clear();
        self.sources.clear();
        self.idle.clear();
    }

    /// Files and sources held (idle ones included).
    pub(crate) fn sizes(&self) -> (usize, usize) {
        (self.of_file.len(), self.sources.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Arc;

    fn window_file(id: u32, build_id: Option<&[u8]>, pinned: Option<&Arc<File>>) -> WindowFile {
        WindowFile {
            id,
            path: format!("/copy{id}"),
            build_id: build_id.map(<[u8]>::to_vec),
            live: None,
            pinned: pinned.cloned(),
        }
    }

    fn temp_file(bytes: &[u8]) -> (tempfile::TempDir, Arc<File>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
        let file = Arc::new(File::open(&path).unwrap());
        (dir, file)
    }

    #[test]
    fn copies_with_the_same_build_id_size_and_owner_share_a_source() {
        let (_a, a) = temp_file(b"0123456789");
        let (_b, b) = temp_file(b"abcdefghij");
        let (_c, c) = temp_file(b"longer than ten");
        let mut s = Sources::default();
        let first = s.of(&window_file(1, Some(b"id"), Some(&a)));
        assert_eq!(s.of(&window_file(2, Some(b"id"), Some(&b))), first);
        assert_ne!(s.of(&window_file(3, Some(b"id"), Some(&c))), first, "size");
        assert_ne!(s.of(&window_file(4, Some(b"other"), Some(&a))), first);
        let no_id = s.of(&window_file(5, None, Some(&a)));
        assert_ne!(no_id, first, "no build-id");
        assert_ne!(s.of(&window_file(6, Some(b"id"), None)), first, "not held");
        assert_eq!(s.sizes(), (6, 5));
        // Released one by one: the source stays known, idle, for the next copy.
        assert_eq!(s.release(1).unwrap().source, first);
        assert_eq!(s.release(2).unwrap().source, first);
        assert!(s.key(first).is_some(), "idle, still known");
        assert!(s.release(2).is_none(), "released twice");
        let (_d, d) = temp_file(b"9876543210");
        assert_eq!(
            s.of(&window_file(7, Some(b"id"), Some(&d))),
            first,
            "the next deploy"
        );
        assert_eq!(s.sizes(), (5, 5));
    }

    #[test]
    fn a_file_without_build_id_is_one_source_whatever_process_maps_it() {
        let (_a, a) = temp_file(b"0123456789");
        let (_b, b) = temp_file(b"0123456789");
        let a_again = Arc::new(a.try_clone().unwrap());
        let mut s = Sources::default();
        let first = s.of(&window_file(1, None, Some(&a)));
        // Mapped by another process: another window file id, another descriptor.
        assert_eq!(s.of(&window_file(2, None, Some(&a_again))), first);
        // Released, then mapped again by a new process (a compiler run after run).
        s.release(1);
        s.release(2);
        assert_eq!(s.of(&window_file(3, None, Some(&a_again))), first);
        // A copy with the same bytes is another file: without a build-id nothing says it
        // names alike.
        assert_ne!(s.of(&window_file(4, None, Some(&b))), first);
        let key = ContentKey::of(None, &a).unwrap();
        assert_eq!(key.cache_id(), None, "not in the frame cache");
        assert!(ContentKey::of(Some(b"id"), &a)
            .unwrap()
            .cache_id()
            .is_some());
        // Written to: another content.
        std::fs::OpenOptions::new()
            .append(true)
            .open(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(&*a)
            ))
            .unwrap()
            .write_all(b"more")
            .unwrap();
        assert_ne!(ContentKey::of(None, &a), Some(key));
    }

    #[test]
    fn idle_sources_are_bounded() {
        let (_a, a) = temp_file(b"0123456789");
        let mut s = Sources::default();
        let mut dropped = Vec::new();
        for i in 0..(MAX_IDLE as u32 + 10) {
            let id = i.to_le_bytes();
            let source = s.of(&window_file(i, Some(&id), Some(&a)));
            let released = s.release(i).unwrap();
            assert_eq!(released.source, source);
            dropped.extend(released.dropped.into_iter().map(|(id, _)| id));
        }
        assert_eq!(s.sizes(), (0, MAX_IDLE));
        assert_eq!(dropped.len(), 10, "the longest idle go first");
        assert_eq!(dropped[0], SourceId(0));
        assert!(s.key(SourceId(0)).is_none());
    }

    #[test]
    fn the_owner_is_part_of_the_key() {
        let (_a, a) = temp_file(b"0123456789");
        let key = ContentKey::of(Some(b"id"), &a).unwrap();
        let other_owner = ContentKey {
            owner: key.owner.wrapping_add(1),
            ..key.clone()
        };
        assert_ne!(key, other_owner);
        assert_eq!(key.owner, a.metadata().unwrap().uid());
    }
}
