//! Who may see a process: its owner as the kernel judges whether a user may trace it
//! (ptrace_may_access), read from /proc.

use tracing::debug;

use crate::proc_fs::parse_status;

/// The uid of a process whose owner is not known: after an exec until it is read, and for a
/// process its user may not trace (set-uid or set-gid, or not dumpable). No user has it, so
/// only those who see everything see its stacks.
pub const UNKNOWN_UID: u32 = u32::MAX;

/// The owner ([`read_owner`]) and the parent's pid of `pid`, from /proc.
pub(crate) fn read_status(pid: u32) -> Option<(u32, Option<u32>)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let status = parse_status(&status)?;
    Some((owner(pid, status.one_uid), status.ppid))
}

/// Who may see the process on `pid`, judged as the kernel judges whether a user may trace it
/// (ptrace_may_access): the uid its real, effective and saved uids all are, when its real,
/// effective and saved gids are one too and it is dumpable (its /proc directory is then
/// owned by that uid; the kernel gives a process that is not to root); else [`UNKNOWN_UID`]
/// (a set-uid or set-gid program, or one that changed its ids). With `name`, only when the
/// process is called that (None otherwise, or when /proc does not have it).
pub(crate) fn read_owner(pid: u32, name: Option<&str>) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let status = parse_status(&status)?;
    if name.is_some_and(|n| n != status.name) {
        debug!(
            pid,
            ?name,
            now = status.name,
            "not reading the uid of a renamed process"
        );
        return None;
    }
    Some(owner(pid, status.one_uid))
}

/// Who may see the process on `pid` now ([`UNKNOWN_UID`] when no user may trace it: see
/// [`ProcessTable::uid`](crate::ProcessTable::uid)); None when /proc does not have it.
pub fn owner_of(pid: u32) -> Option<u32> {
    read_owner(pid, None)
}

/// `one_uid` when the process on `pid` is dumpable (its /proc directory is that uid's).
pub(crate) fn owner(pid: u32, one_uid: Option<u32>) -> u32 {
    use std::os::unix::fs::MetadataExt;
    match one_uid {
        Some(0) => 0,
        Some(uid) => match std::fs::metadata(format!("/proc/{pid}")) {
            Ok(meta) if meta.uid() == uid => uid,
            _ => UNKNOWN_UID,
        },
        None => UNKNOWN_UID,
    }
}
