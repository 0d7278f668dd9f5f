//! The crate's only raw libc calls.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Clear `O_NONBLOCK` on `file` (opened with it so that a FIFO at the path cannot block the
/// open), so that reads of the regular file it turned out to be behave as usual.
pub(crate) fn clear_nonblock(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL on a descriptor that `file` keeps open for the call; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    if flags & libc::O_NONBLOCK == 0 {
        return Ok(());
    }
    // SAFETY: F_SETFL with an int argument on the same open descriptor; no memory is passed.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `O_NONBLOCK` is set on `file` (for tests).
#[cfg(test)]
pub(crate) fn is_nonblocking(file: &File) -> bool {
    // SAFETY: F_GETFL on a descriptor that `file` keeps open for the call; no memory is passed.
    let flags = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}
