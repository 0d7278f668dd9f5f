//! Interned mapped files: each distinct (path, build-id) gets a small id.

use std::collections::HashMap;

/// Index of a [`MappedFile`] in its [`FileTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileId(pub u32);

/// A file (or pseudo-file such as `[vdso]`) that some process maps.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MappedFile {
    /// The path as the mapping names it (inside the process's mount namespace).
    pub path: String,
    /// GNU build-id from the MMAP2 record, when the kernel gave one.
    pub build_id: Option<Vec<u8>>,
    /// Device and inode, when known (from MMAP2 without build-id, or /proc maps).
    pub dev_ino: Option<(u64, u64)>,
}

impl MappedFile {
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

/// Interner of mapped files.
#[derive(Debug, Default)]
pub struct FileTable {
    files: Vec<MappedFile>,
    index: HashMap<MappedFile, FileId>,
}

impl FileTable {
    /// The id of `file`, adding it if new.
    pub fn intern(&mut self, file: MappedFile) -> FileId {
        if let Some(&id) = self.index.get(&file) {
            return id;
        }
        let id = FileId(self.files.len() as u32);
        self.files.push(file.clone());
        self.index.insert(file, id);
        id
    }

    /// The file behind `id`.
    pub fn get(&self, id: FileId) -> &MappedFile {
        &self.files[id.0 as usize]
    }

    /// Number of distinct files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether no file was seen.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}
