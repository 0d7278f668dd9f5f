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

/// Clock ticks a second in /proc's times (`USER_HZ`, 100 on Linux).
pub(crate) fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf takes a plain integer and reads no memory of ours.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// `clock`'s time now, ns.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec to the valid, exclusively borrowed `ts`.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// CLOCK_MONOTONIC now, ns (the clock of the samples' and records' times).
#[cfg(test)]
pub(crate) fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// How far CLOCK_BOOTTIME (the clock of a process's start in /proc) is ahead of
/// CLOCK_MONOTONIC now, ns: the time the machine spent suspended.
pub(crate) fn boottime_lead_ns() -> u64 {
    let mono = clock_ns(libc::CLOCK_MONOTONIC);
    clock_ns(libc::CLOCK_BOOTTIME).saturating_sub(mono)
}
