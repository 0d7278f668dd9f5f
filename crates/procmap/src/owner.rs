//! Who may see a process: its owner as the kernel judges whether a user may trace it
//! (ptrace_may_access), read from /proc; and whose it is to pay for: its real uid.

use tracing::debug;

use crate::proc_fs::parse_status;

/// The uid of a process whose owner is not known: after an exec until it is read, and for a
/// process its user may not trace (set-uid or set-gid, or not dumpable). No user has it, so
/// only those who see everything see its stacks.
pub const UNKNOWN_UID: u32 = u32::MAX;

/// A process's two uids: who may see it, and who its resources are charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Who may see it ([`owner_of`]): [`UNKNOWN_UID`] when no user may trace it.
    pub uid: u32,
    /// Its real uid, the user who ran it (a set-uid program's too; execve never changes it):
    /// whose share of what the profiler keeps its stacks count against. Never a reason to
    /// show them to anyone. [`UNKNOWN_UID`] when not known.
    pub real_uid: u32,
}

impl Owner {
    /// Neither uid known.
    pub const UNKNOWN: Owner = Owner {
        uid: UNKNOWN_UID,
        real_uid: UNKNOWN_UID,
    };
}

/// The owner ([`read_owner`]) and the parent's pid of `pid`, from /proc.
pub(crate) fn read_status(pid: u32) -> Option<(Owner, Option<u32>)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let status = parse_status(&status)?;
    Some((
        Owner {
            uid: owner(pid, status.one_uid),
            real_uid: status.real_uid,
        },
        status.ppid,
    ))
}

/// Who may see the process on `pid`, judged as the kernel judges whether a user may trace it
/// (ptrace_may_access): the uid its real, effective and saved uids all are, when its real,
/// effective and saved gids are one too and it is dumpable (its /proc directory is then
/// owned by that uid; the kernel gives a process that is not to root); else [`UNKNOWN_UID`]
/// (a set-uid or set-gid program, or one that changed its ids). With it, its real uid (the
/// `Uid:` line's first id, there whatever the process's dumpability). None when /proc does
/// not have it.
fn read_owner(pid: u32) -> Option<Owner> {
    read_status(pid).map(|(owner, _)| owner)
}

/// [`read_owner`], only when the process on `pid` is the one that was there at `alive_ns`
/// (CLOCK_MONOTONIC, the records' clock): it started by then (its start time, field 22 of
/// /proc/PID/stat, read after the owner, so that a pid reused in between shows the later
/// start). Two live processes never share a pid, so a process that started by `alive_ns` and
/// is alive now is the one that was there then; a process on a reused pid started after the
/// earlier one ended. A rename (prctl PR_SET_NAME) changes nothing of this.
pub(crate) fn read_owner_if_there_at(pid: u32, alive_ns: u64) -> Option<Owner> {
    let owner = read_owner(pid)?;
    let started = read_start_ns(pid)?;
    if started > alive_ns.saturating_add(START_SLACK_NS) {
        debug!(
            pid,
            started, alive_ns, "not reading the uid of a pid another process now has"
        );
        return None;
    }
    Some(owner)
}

/// Slack for reading two clocks one after the other when converting a process's start to
/// CLOCK_MONOTONIC (the start itself is rounded down to a clock tick, which only makes it
/// earlier).
const START_SLACK_NS: u64 = 1_000_000;

/// When the process on `pid` started, CLOCK_MONOTONIC ns, rounded down to a clock tick:
/// field 22 of /proc/PID/stat (ticks of CLOCK_BOOTTIME since boot) less the time the machine
/// spent suspended so far (so never later than the true start).
pub(crate) fn read_start_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_start_ticks(&stat)?;
    let per_tick = 1_000_000_000 / crate::sys::clock_ticks_per_second();
    Some(
        ticks
            .saturating_mul(per_tick)
            .saturating_sub(crate::sys::boottime_lead_ns()),
    )
}

/// Field 22 (`starttime`) of a /proc/PID/stat line: counted after the command name's closing
/// parenthesis, the last one in the line (the name itself may hold any).
fn parse_start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields 3 onwards follow the name: field 22 is the 20th of them.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Who may see the process on `pid` now ([`UNKNOWN_UID`] when no user may trace it: see
/// [`ProcessTable::uid`](crate::ProcessTable::uid)); None when /proc does not have it.
pub fn owner_of(pid: u32) -> Option<u32> {
    read_owner(pid).map(|o| o.uid)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_is_read_after_the_last_parenthesis() {
        let line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(parse_start_ticks(line), Some(123_456));
        assert_eq!(parse_start_ticks("42 (x) S 1"), None);
        assert_eq!(parse_start_ticks("garbage"), None);
    }

    #[test]
    fn this_process_was_there_since_it_started_and_not_before() {
        let me = std::process::id();
        let started = read_start_ns(me).expect("our own start");
        let now = crate::sys::monotonic_ns();
        assert!(started <= now, "{started} > {now}");
        let owner = read_owner(me).expect("our own owner");
        assert_eq!(read_owner_if_there_at(me, now), Some(owner));
        assert_eq!(
            owner.real_uid,
            crate::sys::geteuid(),
            "our real uid is our own"
        );
        // A time before this process started names an earlier process on the pid.
        let before = started.saturating_sub(1_000_000_000);
        assert!(
            before > 0,
            "the machine booted less than a second before the test"
        );
        assert_eq!(read_owner_if_there_at(me, before), None);
    }
}
