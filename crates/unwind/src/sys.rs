//! The crate's only `unsafe`: mapping a binary read-only so unwind sections are not copied.

use std::fs::File;
use std::io;
use std::path::Path;

use memmap2::Mmap;

/// Map `path`, opened with `access` (without blocking, a regular file only), read-only.
pub(crate) fn map_file(path: &Path, access: &procmap::Access) -> io::Result<Mmap> {
    let file: File = access.open(path)?;
    // SAFETY: a read-only private mapping; binaries are not modified in place while mapped by a
    // running process (the loader maps them too). If one were truncated, reads could fault: the
    // same exposure as the kernel's own mapping of it.
    unsafe { Mmap::map(&file) }
}

/// A read-only anonymous mapping holding a copy of `bytes` (so an in-memory image is held the
/// same way as a mapped file).
pub(crate) fn copy_to_map(bytes: &[u8]) -> io::Result<Mmap> {
    let mut map = memmap2::MmapMut::map_anon(bytes.len().max(1))?;
    map[..bytes.len()].copy_from_slice(bytes);
    map.make_read_only()
}
