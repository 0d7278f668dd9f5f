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

/// This process's effective uid.
pub(crate) fn geteuid() -> u32 {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

/// Give the calling thread, and only it, the filesystem identity of `uid`/`gid` with exactly
/// the supplementary `groups`: every later path lookup, symlink and permission check on this
/// thread is the user's. Changing the filesystem uid from 0 also drops the thread's
/// filesystem capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, ...). The thread must not
/// be used for anything else afterwards (it is meant to be a short-lived one). Fails without
/// CAP_SETUID/CAP_SETGID, or when the kernel did not take the ids.
pub(crate) fn become_fs_user(uid: u32, gid: u32, groups: &[u32]) -> io::Result<()> {
    // SAFETY: the raw system call (not glibc's setgroups, which changes every thread of the
    // process) changes only this thread's credentials; `groups` is a valid slice of gid_t
    // (u32) for the length passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_setgroups,
            groups.len() as libc::size_t,
            groups.as_ptr() as *const libc::gid_t,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: setfsgid/setfsuid take plain integers and change only this thread's filesystem
    // ids (they are per-thread system calls in glibc); an id of u32::MAX (-1) is invalid, so
    // the call changes nothing and returns the current id, which checks the change took.
    let (fsgid, fsuid) = unsafe {
        libc::setfsgid(gid);
        let fsgid = libc::setfsgid(u32::MAX) as u32;
        libc::setfsuid(uid);
        (fsgid, libc::setfsuid(u32::MAX) as u32)
    };
    if fsgid != gid || fsuid != uid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("could not take uid {uid} and gid {gid} to open a file"),
        ));
    }
    Ok(())
}
