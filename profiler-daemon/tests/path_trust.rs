//! profilerd uses only directories that are root's alone (docs/security.md, "profilerd"): a
//! state, cache or socket directory that another user owns, that others may write, or that
//! carries an ACL is refused at start with its name, before anything is written in it.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `nobody`: owns the directories another user would have created first.
const OTHER_UID: u32 = 65534;

fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// Start profilerd on `state_dir` and `socket`; it must exit with status 1 naming `wrong` and
/// `why`, and leave no slice and no socket behind.
fn refused(top: &Path, state_dir: &Path, socket: &Path, wrong: &Path, why: &str) {
    let config = top.join("profilerd.toml");
    std::fs::write(
        &config,
        format!(
            "[storage]\ncache_dir = \"{}\"\n",
            top.join("cache").display()
        ),
    )
    .unwrap();
    let mut daemon = Command::new(env!("CARGO_BIN_EXE_profilerd"))
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(state_dir)
        .arg("--socket")
        .arg(socket)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run profilerd");
    // A daemon that accepts the directory runs on: stopped after a while, and a failure.
    let started = Instant::now();
    while daemon.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            daemon.kill().unwrap();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = daemon.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{} was accepted: {stderr}",
        wrong.display()
    );
    assert!(stderr.contains(&wrong.display().to_string()), "{stderr}");
    assert!(stderr.contains(why), "expected {why:?} in: {stderr}");
    assert!(
        !socket.exists(),
        "a socket was made in {}",
        socket.display()
    );
    assert!(
        !state_dir.join("slices").exists() || wrong != state_dir,
        "slices were made in the refused {}",
        state_dir.display()
    );
}

#[test]
fn directories_other_users_control_are_refused() {
    if !is_root() {
        eprintln!("skipped: needs root to make directories owned by another user");
        return;
    }
    let top = tempfile::tempdir().unwrap();
    std::fs::set_permissions(top.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let good_socket_dir = top.path().join("run");
    std::fs::create_dir(&good_socket_dir).unwrap();
    let socket = good_socket_dir.join("profilerd.sock");

    // A state directory another user created first.
    let theirs = top.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(OTHER_UID), None).unwrap();
    refused(top.path(), &theirs, &socket, &theirs, "owned by uid 65534");

    // One that others may write.
    let open = top.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    refused(
        top.path(),
        &open,
        &socket,
        &open,
        "is writable by other users (mode 777)",
    );

    // One whose default ACL would give every slice to another user.
    let acl = top.path().join("acl");
    std::fs::create_dir(&acl).unwrap();
    let setfacl = Command::new("setfacl")
        .args(["-d", "-m", &format!("u:{OTHER_UID}:rx")])
        .arg(&acl)
        .status()
        .expect("setfacl (package acl; scripts/test installs it)");
    assert!(setfacl.success());
    refused(top.path(), &acl, &socket, &acl, "carries a default ACL");

    // A symbolic link in place of the state directory.
    let good_state = top.path().join("state");
    std::fs::create_dir(&good_state).unwrap();
    let link = top.path().join("link");
    std::os::unix::fs::symlink(&good_state, &link).unwrap();
    refused(
        top.path(),
        &link,
        &socket,
        &link,
        "is not a directory (or is a symbolic link)",
    );

    // A socket directory another user owns: they could swap the socket for a symlink.
    let their_run = top.path().join("their-run");
    std::fs::create_dir(&their_run).unwrap();
    std::os::unix::fs::chown(&their_run, Some(OTHER_UID), None).unwrap();
    let their_socket = their_run.join("profilerd.sock");
    refused(
        top.path(),
        &good_state,
        &their_socket,
        &their_run,
        "owned by uid 65534",
    );
}
