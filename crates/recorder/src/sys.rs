//! The crate's only `unsafe`: forking a command that waits for its events, waiting for it,
//! signals, the clock, and whether a directory carries a POSIX ACL.
//!
//! std's `Command::spawn` returns only after the child has called exec, so a child cannot be
//! held between fork and exec through it; this module forks by hand (as perf does). After
//! fork the child calls only async-signal-safe functions: close, read, execv, write, _exit.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// A forked child held before exec.
pub(crate) struct HeldChild {
    /// The child's pid.
    pub pid: u32,
    /// Writing a byte here lets the child exec; closing it makes the child exit.
    gate: Option<OwnedFd>,
    /// The child writes its exec errno here; EOF (close-on-exec) means exec succeeded.
    exec_error: OwnedFd,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Fork a child that runs `program` with `argv` (argv[0] included) once released.
pub(crate) fn fork_held(program: &CString, argv: &[CString]) -> io::Result<HeldChild> {
    let (gate_read, gate_write) = pipe()?;
    let (error_read, error_write) = pipe()?;
    // Everything the child needs is prepared before fork: it must not allocate.
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let (gate_fd, error_fd) = (gate_read.as_raw_fd(), error_write.as_raw_fd());
    // SAFETY: fork has no memory preconditions; in the child branch below only
    // async-signal-safe calls are made on data prepared above, and the child never returns
    // into Rust code (it execs or _exits).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: in the child: raw descriptors and pointers prepared before fork, all valid.
        unsafe {
            libc::close(gate_write.as_raw_fd());
            libc::close(error_read.as_raw_fd());
            let mut byte = 0u8;
            loop {
                let n = libc::read(gate_fd, (&mut byte as *mut u8).cast(), 1);
                if n == 1 {
                    break;
                }
                if n == 0 || *libc::__errno_location() != libc::EINTR {
                    // The parent gave up (its events failed to open): never run unprofiled.
                    libc::_exit(126);
                }
            }
            libc::execv(program.as_ptr(), argv_ptrs.as_ptr());
            let errno = *libc::__errno_location();
            libc::write(error_fd, (&errno as *const i32).cast(), 4);
            libc::_exit(127);
        }
    }
    drop(gate_read);
    drop(error_write);
    Ok(HeldChild {
        pid: pid as u32,
        gate: Some(gate_write),
        exec_error: error_read,
    })
}

impl HeldChild {
    /// Let the child exec; returns the exec error if it failed.
    pub(crate) fn release(&mut self) -> io::Result<()> {
        let Some(gate) = self.gate.take() else {
            return Ok(());
        };
        let byte = 1u8;
        // SAFETY: writing one byte from a valid local to an open pipe.
        if unsafe { libc::write(gate.as_raw_fd(), (&byte as *const u8).cast(), 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
        let mut errno = 0i32;
        loop {
            // SAFETY: reading at most 4 bytes into a valid local i32.
            let n = unsafe {
                libc::read(
                    self.exec_error.as_raw_fd(),
                    (&mut errno as *mut i32).cast(),
                    4,
                )
            };
            match n {
                0 => return Ok(()),
                4 => return Err(io::Error::from_raw_os_error(errno)),
                _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => continue,
                _ => return Err(io::Error::other("lost track of the child's exec")),
            }
        }
    }

    /// Whether the child is still held before exec.
    pub(crate) fn is_held(&self) -> bool {
        self.gate.is_some()
    }
}

/// Wait (blocking) for process `pid` to exit.
pub(crate) fn wait_pid(pid: u32) -> io::Result<ExitStatus> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes the status into a valid local.
        let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
        if r == pid as libc::pid_t {
            return Ok(ExitStatus::from_raw(status));
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Send `signal` to process `pid`.
pub(crate) fn kill(pid: u32, signal: i32) -> io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid as libc::pid_t, signal) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Raise this process's open-files limit to its hard limit; returns the limit in effect.
/// (The recorder keeps one descriptor per mapped binary.)
pub(crate) fn raise_open_file_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a valid local rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads a valid local rlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return raised.rlim_cur;
        }
    }
    limit.rlim_cur
}

/// `getrusage(RUSAGE_SELF)`: resources used by every thread of this process; with
/// `this_thread_only`, `getrusage(RUSAGE_THREAD)`: those of the calling thread.
pub(crate) fn rusage(this_thread_only: bool) -> io::Result<libc::rusage> {
    let who = if this_thread_only {
        libc::RUSAGE_THREAD
    } else {
        libc::RUSAGE_SELF
    };
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage for the kernel to fill.
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usage)
}

/// CLOCK_MONOTONIC now, in ns: the clock samples are stamped with.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, which outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// Give memory the allocator holds free back to the kernel (glibc keeps freed heap in its
/// arenas); a long recording calls it after dropping caches, so that its resident size
/// follows what it holds.
pub(crate) fn release_free_memory() {
    // glibc's malloc only: other allocators return memory by themselves or not at all.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it takes no pointer.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// This process's effective user id.
pub(crate) fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// Which POSIX ACL of a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclKind {
    /// Who may use the directory itself (`system.posix_acl_access`).
    Access,
    /// What files created in it inherit (`system.posix_acl_default`).
    Default,
}

impl AclKind {
    fn attribute(self) -> &'static std::ffi::CStr {
        match self {
            AclKind::Access => c"system.posix_acl_access",
            AclKind::Default => c"system.posix_acl_default",
        }
    }
}

impl std::fmt::Display for AclKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AclKind::Access => "an access ACL",
            AclKind::Default => "a default ACL",
        })
    }
}

/// Whether `path` (not followed if a symbolic link) carries the ACL `kind`. A file system
/// without ACLs has none.
pub(crate) fn has_acl(path: &std::path::Path, kind: AclKind) -> io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: both names are NUL-terminated strings that outlive the call; a null buffer of
    // size 0 asks only for the attribute's size, nothing is written.
    let rc = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            kind.attribute().as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    if rc >= 0 {
        return Ok(true);
    }
    match io::Error::last_os_error() {
        e if matches!(e.raw_os_error(), Some(libc::ENODATA | libc::EOPNOTSUPP)) => Ok(false),
        e => Err(e),
    }
}
