//! The crate's only `unsafe`: mapping a binary read-only so unwind sections are not copied.

use std::fs::File;
use std::io;
use std::path::Path;

use memmap2::Mmap;

/// Map `path` read-only.
pub(crate) fn map_file(path: &Path) -> io::Result<Mmap> {
    let file = File::open(path)?;
    // SAFETY: a read-only private mapping; binaries are not modified in place while mapped by a
    // running process (the loader maps them too). If one were truncated, reads could fault: the
    // same exposure as the kernel's own mapping of it.
    unsafe { Mmap::map(&file) }
}
