//! The daemon's only unsafe code: a Unix socket peer's supplementary groups, pidfds, the
//! calling thread's scheduling priority and CPU-time clock, and the effective uid.

use std::io;
use std::os::fd::AsRawFd;

/// Most groups read for a peer (the kernel's NGROUPS_MAX is 65536; more than this many are
/// not looked at).
const MAX_GROUPS: usize = 1024;

/// The supplementary groups of the peer of a connected Unix socket, as they were at
/// `connect(2)` (SO_PEERGROUPS, Linux 4.13).
pub fn peer_groups(socket: &impl AsRawFd) -> io::Result<Vec<u32>> {
    let mut groups = vec![0 as libc::gid_t; MAX_GROUPS];
    let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
    // SAFETY: `groups` is a writable buffer of `len` bytes that outlives the call; the kernel
    // writes at most `len` bytes and sets `len` to the bytes written (or needed, with ERANGE).
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERGROUPS,
            groups.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    groups.truncate(len as usize / std::mem::size_of::<libc::gid_t>());
    Ok(groups)
}

/// A pidfd of process `pid` (pidfd_open, Linux 5.3): it names that process and no later one
/// on the same pid.
pub fn pidfd_open(pid: u32) -> io::Result<std::os::fd::OwnedFd> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no memory
    // is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) })
}

/// Whether the process a pidfd names has not exited yet: a pidfd polls readable once its
/// process has exited. Unlike signal 0 through the pidfd, this needs no permission to signal
/// the process (CAP_KILL for another user's, which the unit does not hold).
pub fn pidfd_alive(pidfd: &impl AsRawFd) -> bool {
    let mut fds = [libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    // SAFETY: `fds` is one valid pollfd for the call; a timeout of 0 does not block.
    let rc = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
    rc == 0 || (rc == 1 && fds[0].revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) == 0)
}

/// Give the calling thread the lowest CPU priority (nice 19; on Linux a thread's nice value is
/// its own): it runs on what other work leaves.
pub fn lowest_priority_for_this_thread() -> io::Result<()> {
    // SAFETY: setpriority takes integers only; who = 0 is the calling thread on Linux.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The daemon's effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes nothing and cannot fail.
    unsafe { libc::geteuid() }
}

/// The calling thread's CPU-time clock, which any thread of this process can read.
pub fn this_thread_cpu_clock() -> io::Result<libc::clockid_t> {
    let mut clock: libc::clockid_t = 0;
    // SAFETY: pthread_self names the calling thread, alive for the call; `clock` is a valid
    // out-pointer.
    let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(clock)
}

/// `clock`'s time in ns (None once the thread whose CPU-time clock it is has exited).
pub fn clock_ns(clock: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer for the call; an unknown clock is an error return.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pidfd_is_alive_until_its_process_exits() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pidfd = pidfd_open(child.id()).unwrap();
        assert!(pidfd_alive(&pidfd));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!pidfd_alive(&pidfd));
    }
}
