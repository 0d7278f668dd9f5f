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
    let mut cmd = as_user(uid, gid, profctl(), user_dir);
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
    let _guard = sampling_shared();
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

/// `deepname` built with a 4000-character function name, in the target's tmp directory.
fn deepname() -> PathBuf {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profctl-workloads/deepname");
    fs::create_dir_all(out.parent().unwrap()).unwrap();
    let name = format!("-DF=f{}", "x".repeat(3999));
    compile_with(
        "deepname.c",
        &out,
        &["-O1", "-g", "-fno-omit-frame-pointer", "-pthread"],
        &[&name],
    );
    out
}

/// The daemon's peak resident memory (VmHWM), in bytes.
fn peak_resident(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    kb << 10
}

/// Slice length of the deep-stack test (the tests' daemons' own, `Daemon::write_config`), and
/// its close grace (docs/daemon.md).
const SLICE_S: f64 = 1.0;
const GRACE_S: f64 = 2.1;

/// A user's two threads recurse up to 1000 deep through a function with a 4000-character
/// name, renaming themselves, at 999 Hz for 10 s: slices keep reaching disk (a new one at
/// least every slice, its grace and a full naming queue of six: the machine is shared), the
/// daemon's peak resident memory stays under the unit's MemoryHigh, and SIGTERM with the
/// workload still running ends the daemon within 10 s.
#[test]
fn daemon_deep_stacks_with_long_names_neither_stall_slices_nor_sigterm() {
    // Built before the lock is taken: a compile is no part of what runs alone.
    let deep = deepname();
    let _guard = sampling_lock();
    let dir = scratch();
    let Some((uid, gid, user_dir)) = test_user_dir(dir.path()) else {
        return;
    };
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);
    assert_eq!(daemon.float("slice_seconds"), SLICE_S);
    let pid = daemon.process.pid();
    // The first slice names every binary on the machine: the workload starts after it.
    daemon.wait_slices_through(unix_now());
    let _deep = Spawned::spawn(as_user(uid, gid, &deep, &user_dir), "deepname");
    // The naming queue may fill up (6 slices) while other work on the machine is named too
    // (a debug build, a shared machine); a backlog that keeps growing is a stall.
    let allowed = SLICE_S + GRACE_S + 6.0 * SLICE_S;
    // Watched for longer than the gap allowed (9.1 s), so that a stall from the first second
    // on is seen.
    let watch = watch_slices(&daemon, 10.0, allowed);
    // The worst lag once the first slices of the workload are named.
    let worst = watch
        .lags
        .iter()
        .filter(|(at, _)| *at > 2.0 * (SLICE_S + GRACE_S))
        .map(|(_, lag)| *lag)
        .fold(0.0, f64::max);
    let dropped = daemon.number("slices_dropped");
    let peak = peak_resident(pid);
    let started_stop = std::time::Instant::now();
    let log = daemon.stop_within(Duration::from_secs(10));
    let took = started_stop.elapsed();
    assert!(
        watch.stalled.is_empty(),
        "no slice reached disk for more than {allowed:.1} s, at {:?} s; lags each second: {}; {dropped} slices dropped",
        watch.stalled,
        watch.lags_text()
    );
    assert!(peak < 768 << 20, "peak resident memory {} MiB", peak >> 20);
    eprintln!(
        "deep stacks: worst lag {worst:.1} s, {dropped} slices dropped, peak RSS {} MiB, SIGTERM took {took:?}",
        peak >> 20
    );
    assert!(log.contains("stopping"), "{log}");
}

/// A root process in its own mount and pid namespaces, chrooted into a directory only root
/// may enter, with its own copy of the loader and libc, started before the daemon (whose
/// /proc/PID/maps shows host paths, which do not exist inside its root): its binary is named
/// (read through its root or its map_files, with its access; never at the host path with
/// nobody's).
#[test]
fn daemon_names_a_root_process_chrooted_in_a_root_only_directory() {
    let _guard = sampling_shared();
    if id(&["-u"]) != Some(0) {
        eprintln!("note: not root: cannot chroot; skipped");
        return;
    }
    let w = workloads();
    let dir = scratch();
    // The scratch directory is 0700 root's: only root may enter it.
    let jail = dir.path().join("jail");
    for (from, to) in [
        (w.burner.clone(), "burner".to_string()),
        (
            PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
            "lib/x86_64-linux-gnu/libc.so.6".to_string(),
        ),
        (
            PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            "lib64/ld-linux-x86-64.so.2".to_string(),
        ),
    ] {
        let to = jail.join(to);
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::copy(&from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
    fs::set_permissions(&jail, fs::Permissions::from_mode(0o700)).unwrap();
    let mut jailed = Command::new("unshare");
    jailed
        .args(["--mount", "--pid", "--fork", "--kill-child", "chroot"])
        .arg(&jail)
        .args(["/burner", "100000"]);
    let mut jailed = Spawned::spawn(jailed, "chrooted burner");
    // Started before the daemon: the burner runs in its jail.
    let unshare = jailed.pid();
    wait_for("the chrooted burner runs", Duration::from_secs(10), || {
        let comms: Vec<String> = descendants(unshare)
            .iter()
            .filter_map(|p| fs::read_to_string(format!("/proc/{p}/comm")).ok())
            .map(|c| c.trim().to_string())
            .collect();
        match comms.iter().any(|c| c == "burner") {
            true => Ok(()),
            false => Err(format!("descendants: {comms:?}")),
        }
    });
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);
    let t0 = unix_now();
    // Six seconds of it, named while it runs: a file first named after its process is gone
    // can only be read at the path as the daemon sees it, with nobody's access (the
    // documented fallback; beside a 2-CPU hog the naming fell 17 s behind and the loader's
    // frames at exit were named so). It is killed once named, so no exit code runs.
    daemon.wait_slices_through(t0 + 6.0);
    let t1 = unix_now();
    daemon.wait_slices_through(t1);
    let log = daemon.process.stderr_now();
    jailed.kill_tree();
    let (_, stacks) = flamegraph(
        &daemon.socket,
        (t0 - 0.5, t1 + 0.5),
        &["--comm", "burner"],
        &dir.path().join("jail.folded"),
    );
    let total = comm_total(&stacks, "burner");
    let named: u64 = stacks
        .iter()
        .filter(|s| s.frames.iter().any(|f| f == "child_hot"))
        .map(|s| s.count)
        .sum();
    assert!(
        total > 300 && named * 2 > total,
        "the chrooted burner is not named ({named} of {total} samples in child_hot):\n{}",
        top_lines(&stacks, 10)
    );
    daemon.stop();
    assert!(!log.contains("Permission denied"), "{log}");
}

/// What [`watch_slices`] saw.
struct SliceWatch {
    /// Seconds since the watch began at which no new slice had reached disk for longer than
    /// allowed.
    stalled: Vec<f64>,
    /// Each reading: (seconds since the watch began, how far the newest slice on disk lagged
    /// behind the present).
    lags: Vec<(f64, f64)>,
}

impl SliceWatch {
    /// The lags, one a reading, for failure messages.
    fn lags_text(&self) -> String {
        let lags: Vec<String> = self.lags.iter().map(|(_, l)| format!("{l:.1}")).collect();
        lags.join(" ")
    }
}

/// Reads the newest slice on disk once a second for `seconds` (the span watched is the
/// measurement): when no new slice has reached disk for more than `allowed` seconds
/// (scaled), a stall.
fn watch_slices(daemon: &Daemon, seconds: f64, allowed: f64) -> SliceWatch {
    let allowed = allowed * time_scale();
    let started = unix_now();
    let mut watch = SliceWatch {
        stalled: Vec::new(),
        lags: Vec::new(),
    };
    let mut last = (started, daemon.number("newest_slice_end_ns") as f64 / 1e9);
    while unix_now() < started + seconds {
        hold(Duration::from_secs(1));
        let newest = daemon.number("newest_slice_end_ns") as f64 / 1e9;
        let now = unix_now();
        watch.lags.push((now - started, now - newest));
        if newest > last.1 {
            last = (now, newest);
        } else if now - last.0 > allowed {
            watch.stalled.push((now - started).round());
        }
    }
    watch
}

/// A user's process maps a file executable 60,000 times (mappings that never merge), then
/// forks children that exit at once, for 10 s: slices keep reaching disk and the drain keeps
/// up (lost samples under a tenth of those taken). Each child shares its parent's mapping list
/// and its parent's unwinder as of the fork (O(1) per child, docs/security.md); on main before
/// that, every sampled child's unwinder was built from all 60,000 mappings: 13,522 samples
/// lost against 10,408 taken.
#[test]
fn daemon_a_forking_process_with_60k_mappings_does_not_stall_draining() {
    // Built before the lock is taken: a compile is no part of what runs alone.
    let maps = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profctl-workloads/manymaps");
    fs::create_dir_all(maps.parent().unwrap()).unwrap();
    compile_with("manymaps.c", &maps, &["-O1", "-g"], &[]);
    let _guard = sampling_lock();
    let dir = scratch();
    let Some((uid, gid, user_dir)) = test_user_dir(dir.path()) else {
        return;
    };
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);
    let ready = user_dir.join("ready");
    let mut cmd = as_user(uid, gid, &maps, &user_dir);
    cmd.args(["/bin/true", "60000"]).arg(&ready);
    let _maps = Spawned::spawn(cmd, "manymaps");
    let mapped: u64 =
        wait_for(
            "manymaps mapped",
            Duration::from_secs(60),
            || match fs::read_to_string(&ready) {
                Ok(text) if text.ends_with('\n') => Ok(text.trim().parse().unwrap()),
                other => Err(format!("{other:?}")),
            },
        );
    assert!(mapped > 50_000, "only {mapped} mappings");
    // The burst of 60,000 mapping records overflows the rings once (counted as lost): the
    // forks are judged after it.
    daemon.wait_slices_through(unix_now() + 2.0);
    let (samples, lost) = (daemon.number("samples"), daemon.number("lost"));
    let allowed = 1.0 + GRACE_S + 6.0;
    // Watched for longer than the gap allowed (9.1 s), so that a stall from the first second
    // on is seen.
    let watch = watch_slices(&daemon, 10.0, allowed);
    let samples = daemon.number("samples") - samples;
    let lost = daemon.number("lost") - lost;
    assert!(
        watch.stalled.is_empty(),
        "no slice reached disk for more than {allowed:.1} s, at {:?} s; lags: {}",
        watch.stalled,
        watch.lags_text()
    );
    assert!(
        lost * 10 < samples,
        "{lost} samples lost against {samples} taken while the process forked"
    );
    eprintln!(
        "60k mappings forking: {samples} samples, {lost} lost; lags {}",
        watch.lags_text()
    );
    daemon.stop();
}
