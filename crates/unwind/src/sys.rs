//! The crate's only `unsafe`: mapping a binary read-only so unwind sections are not copied;
//! the loader thread's priority.

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

/// Bring the calling thread back to nice 0 when it started below: a helper started by a
/// thread that runs ahead of users' threads (profilerd's drain) does not itself run ahead.
/// Raising a nice value needs no privilege.
pub(crate) fn not_ahead_of_default_priority() {
    // SAFETY: errno is this thread's own; getpriority and setpriority take integers only, and
    // who = 0 is the calling thread on Linux (-1 is a valid nice value: errno tells an error).
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        if nice < 0 && *libc::__errno_location() == 0 {
            libc::setpriority(libc::PRIO_PROCESS, 0, 0);
        }
    }
}
