//! The daemon's only unsafe code: reading a Unix socket peer's supplementary groups.

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
