//! Interned mapped files: each distinct (path, build-id, dev/ino) gets a small id.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

/// Id of a [`MappedFile`] in its [`FileTable`]. Ids are handed out by a counter and never
/// reused, so an id released by [`crate::ProcessTable::prune`] never names another file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u32);

/// A file (or pseudo-file such as `[vdso]`) that some process maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedFile {
    /// The path as the mapping names it (inside the process's mount namespace).
    pub path: String,
    /// GNU build-id from the MMAP2 record, when the kernel gave one.
    pub build_id: Option<Vec<u8>>,
    /// Device and inode, when known (from MMAP2 without build-id, or /proc maps).
    pub dev_ino: Option<(u64, u64)>,
}

impl MappedFile {
    /// A file known by its path alone (no build-id, device or inode).
    pub fn with_path(path: impl Into<String>) -> MappedFile {
        MappedFile {
            path: path.into(),
            build_id: None,
            dev_ino: None,
        }
    }

    /// The last component of the path (`libc.so.6`), for unnamed frames.
    pub fn basename(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }

    /// Whether this is a kernel pseudo-mapping like `[vdso]` or an anonymous region (the
    /// kernel names anonymous executable memory `//anon`).
    pub fn is_pseudo(&self) -> bool {
        !self.path.starts_with('/') || self.path.starts_with("//anon")
    }
}

impl MappedFile {
    /// Its identity, borrowed.
    pub fn parts(&self) -> FileParts<'_> {
        FileParts {
            path: &self.path,
            build_id: self.build_id.as_deref(),
            dev_ino: self.dev_ino,
        }
    }
}

/// A mapped file's identity, borrowed (as a record states it), so that finding the id of a
/// file already known allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileParts<'a> {
    /// The path as the mapping names it.
    pub path: &'a str,
    /// GNU build-id, when known.
    pub build_id: Option<&'a [u8]>,
    /// Device and inode, when known.
    pub dev_ino: Option<(u64, u64)>,
}

impl FileParts<'_> {
    /// An owned copy.
    pub fn to_owned_file(self) -> MappedFile {
        MappedFile {
            path: self.path.to_string(),
            build_id: self.build_id.map(<[u8]>::to_vec),
            dev_ino: self.dev_ino,
        }
    }
}

/// The key of [`FileTable`]'s index, looked up by [`FileParts`]: owned and borrowed keys
/// hash and compare by the same parts.
trait FileKey {
    fn key(&self) -> FileParts<'_>;
}

impl FileKey for MappedFile {
    fn key(&self) -> FileParts<'_> {
        self.parts()
    }
}

impl FileKey for FileParts<'_> {
    fn key(&self) -> FileParts<'_> {
        *self
    }
}

impl<'a> std::borrow::Borrow<dyn FileKey + 'a> for MappedFile {
    fn borrow(&self) -> &(dyn FileKey + 'a) {
        self
    }
}

impl std::hash::Hash for dyn FileKey + '_ {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl PartialEq for dyn FileKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for dyn FileKey + '_ {}

impl std::hash::Hash for MappedFile {
    /// As its [`FileParts`], which the index is also looked up by.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.parts().hash(state);
    }
}

/// What [`FileTable::get`] answers for an id that was released: an unnamed pseudo-file.
static RELEASED: MappedFile = MappedFile {
    path: String::new(),
    build_id: None,
    dev_ino: None,
};

/// Interner of mapped files.
#[derive(Debug, Default)]
pub struct FileTable {
    files: FxHashMap<FileId, MappedFile>,
    index: HashMap<MappedFile, FileId>,
    next: u32,
}

impl FileTable {
    /// The id of `file`, adding it if new.
    pub fn intern(&mut self, file: MappedFile) -> FileId {
        match self.index.get(&file.parts() as &dyn FileKey) {
            Some(&id) => id,
            None => self.insert(file),
        }
    }

    /// The id of the file `parts` names, adding it if new (allocating only then).
    pub fn intern_parts(&mut self, parts: FileParts<'_>) -> FileId {
        match self.index.get(&parts as &dyn FileKey) {
            Some(&id) => id,
            None => self.insert(parts.to_owned_file()),
        }
    }

    fn insert(&mut self, file: MappedFile) -> FileId {
        let id = FileId(self.next);
        // 2^32 distinct files: at a thousand new files a second, 50 days; wrapping would
        // make an old holder's id name a new file, so stay on the last id instead.
        self.next = self.next.saturating_add(1);
        self.files.insert(id, file.clone());
        self.index.insert(file, id);
        id
    }

    /// The file behind `id`. An id released by pruning reads as an unnamed pseudo-file
    /// (empty path); use [`FileTable::try_get`] to tell.
    pub fn get(&self, id: FileId) -> &MappedFile {
        self.files.get(&id).unwrap_or(&RELEASED)
    }

    /// The file behind `id`, unless it was released.
    pub fn try_get(&self, id: FileId) -> Option<&MappedFile> {
        self.files.get(&id)
    }

    /// Forget `id`; a later mapping of the same file gets a new id.
    pub(crate) fn release(&mut self, id: FileId) -> bool {
        match self.files.remove(&id) {
            Some(file) => {
                self.index.remove(&file);
                true
            }
            None => false,
        }
    }

    /// The ids held, in no particular order.
    pub fn ids(&self) -> impl Iterator<Item = FileId> + '_ {
        self.files.keys().copied()
    }

    /// Number of files held.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether no file is held.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> MappedFile {
        MappedFile::with_path(path)
    }

    #[test]
    fn released_ids_are_never_reused() {
        let mut t = FileTable::default();
        let a = t.intern(file("/a"));
        assert_eq!(t.intern(file("/a")), a);
        assert!(t.release(a));
        assert!(t.try_get(a).is_none());
        assert_eq!(t.get(a).path, "");
        assert!(t.get(a).is_pseudo());
        let again = t.intern(file("/a"));
        assert_ne!(again, a, "a released id must not come back");
        let b = t.intern(file("/b"));
        assert!(b != a && b != again);
        assert_eq!(t.len(), 2);
    }
}
