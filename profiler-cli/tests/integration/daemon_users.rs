//! profilerd against hostile local users, each played by a real unprivileged user
//! (`profctl-test`) against a daemon under the unit's capability set: set-uid programs they
//! run stay out of their view; a root process in its own mount and pid namespaces, chrooted
//! into a directory only root may read, is named; a process with tens of thousands of
//! executable mappings that keeps forking does not stall draining; deep stacks with long
//! names neither stall slices nor hold SIGTERM; a file name with a line break logs one line.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use crate::daemon::{flamegraph, unix_now, Daemon};
use crate::daemon_serve::as_user;

/// The test user (created if missing) and a directory of theirs under `dir` (which is made
/// enterable by them); None (the test says why) when this is not root.
pub(crate) fn test_user_dir(dir: &Path) -> Option<(u32, u32, PathBuf)> {
    if id(&["-u"]) != Some(0) {
        eprintln!("note: not root: cannot play another user; skipped");
        return None;
    }
    let (uid, gid) = ensure_test_user();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    let user_dir = dir.join("user");
    fs::create_dir(&user_dir).unwrap();
    std::os::unix::fs::chown(&user_dir, Some(uid), Some(gid)).unwrap();
    Some((uid, gid, user_dir))
}

/// `profctl flamegraph --since @A --until @B --folded` as the test user: their view.
pub(crate) fn folded_as_user(
    (uid, gid): (u32, u32),
    user_dir: &Path,
    socket: &Path,
    range: (f64, f64),
    name: &str,
) -> Vec<Stack> {
    let mut cmd = as_user(uid, gid, &profctl(), user_dir);
    cmd.arg("--socket").arg(socket).args([
        "flamegraph",
        "--since",
        &format!("@{:.3}", range.0),
        "--until",
        &format!("@{:.3}", range.1),
        "--folded",
        name,
    ]);
    let run = Spawned::spawn(cmd, "profctl (user)").wait_or_panic(Duration::from_secs(60));
    run.assert_success("the user's flamegraph");
    read_folded(&user_dir.join(name))
}

/// Set-uid root programs a user runs in a loop (`mount`, `passwd -S`, most living less than
/// a drain interval): none of their stacks are in that user's view; admins see them.
#[test]
fn daemon_setuid_programs_stay_out_of_their_users_view() {
    let _guard = sampling_lock();
    let dir = scratch();
    let Some((uid, gid, user_dir)) = test_user_dir(dir.path()) else {
        return;
    };
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);
    let t0 = unix_now();
    let mut sh = as_user(uid, gid, Path::new("/bin/sh"), &user_dir);
    sh.arg("-c").arg(
        "end=$(($(date +%s) + 4)); while [ $(date +%s) -lt $end ]; do \
         mount >/dev/null; passwd -S >/dev/null 2>&1; done",
    );
    Spawned::spawn(sh, "set-uid loop").wait_or_panic(Duration::from_secs(60));
    let t1 = unix_now();
    daemon.wait_slices_through(t1);
    let range = (t0 - 0.5, t1 + 0.5);
    let setuid = |stacks: &[Stack]| comm_total(stacks, "mount") + comm_total(stacks, "passwd");
    let (_, all) = flamegraph(&daemon.socket, range, &[], &dir.path().join("all.folded"));
    assert!(
        setuid(&all) > 0,
        "the admin sees no mount or passwd stacks: the test played nothing\n{}",
        comm_summary(&all)
    );
    let own = folded_as_user((uid, gid), &user_dir, &daemon.socket, range, "own.folded");
    assert_eq!(
        setuid(&own),
        0,
        "set-uid root programs in the user's view:\n{}",
        comm_summary(&own)
    );
    assert!(
        comm_total(&own, "sh") > 0,
        "the user does not see their own shell:\n{}",
        comm_summary(&own)
    );
    daemon.stop();
}
