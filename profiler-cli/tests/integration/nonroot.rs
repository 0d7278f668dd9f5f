//! Running as an unprivileged user. As root, the test switches to a system
//! user (`profctl-test`, created if missing) with `setpriv`; otherwise it
//! runs as the current user.
//!
//! (a) Profiling one's own command works: `record --folded F -- ./split 2`
//!     succeeds and names hot_a.
//! (b) Whole-system recording without privilege is refused with a non-zero
//!     exit and a message pointing at perf_event_paranoid / CAP_PERFMON.
//!     Skipped (with a note) when perf_event_paranoid < 1 or the current
//!     non-root user has CAP_PERFMON/CAP_SYS_ADMIN, since then it is allowed.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

fn perf_event_paranoid() -> Option<i32> {
    fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether this (non-root) process has CAP_PERFMON (38) or CAP_SYS_ADMIN (21).
fn has_perf_capability() -> bool {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 38) != 0 || caps & (1 << 21) != 0)
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
}

#[test]
fn unprivileged_user_can_profile_own_command_but_not_whole_system() {
    let _guard = sampling_shared();
    let w = workloads();
    let is_root = id(&["-u"]) == Some(0);

    // A fresh directory the (unprivileged) user can traverse, read, execute
    // and write: /tmp itself is world-traversable.
    let dir = tempfile::Builder::new()
        .prefix("profctl-nonroot-")
        .tempdir_in("/tmp")
        .expect("tempdir in /tmp");
    let bin = dir.path().join("profctl");
    let split = dir.path().join("split");
    fs::copy(profctl(), &bin).expect("copy profctl");
    fs::copy(&w.split, &split).expect("copy split");
    chmod(&bin, 0o755);
    chmod(&split, 0o755);
    chmod(dir.path(), 0o755);

    let user = if is_root {
        let (uid, gid) = ensure_test_user();
        std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).expect("chown test dir");
        Some((uid, gid))
    } else {
        None
    };
    let who = match user {
        Some((uid, gid)) => format!("user {TEST_USER} (uid {uid}, gid {gid})"),
        None => "the current (non-root) user".to_string(),
    };

    let run_as = |args: &[&str], limit: Duration| -> Run {
        let mut cmd = match user {
            Some((uid, gid)) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--clear-groups")
                    .arg("--")
                    .arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        cmd.args(args).current_dir(dir.path());
        Spawned::spawn(cmd, "profctl (unprivileged)").wait_or_panic(limit)
    };

    // (a) own command: allowed.
    let run = run_as(
        &[
            "record",
            "--freq",
            FREQ,
            "--folded",
            "out.folded",
            "--",
            "./split",
            "2",
            "measured.txt",
        ],
        Duration::from_secs(60),
    );
    run.assert_success(&format!("record -- ./split 2 as {who}"));
    let stacks = read_folded(&dir.path().join("out.folded"));
    assert_names(&stacks, "split", &["hot_a"]);

    // (b) whole system: refused, with a useful message.
    let paranoid = perf_event_paranoid();
    if paranoid.is_some_and(|p| p < 1) {
        eprintln!(
            "note: perf_event_paranoid = {paranoid:?} (< 1) allows whole-system recording \
             to anyone: skipping the whole-system denial check"
        );
        return;
    }
    if !is_root && has_perf_capability() {
        eprintln!(
            "note: the current user has CAP_PERFMON/CAP_SYS_ADMIN: skipping the \
             whole-system denial check"
        );
        return;
    }
    let run = run_as(&["record", "--duration", "1"], Duration::from_secs(30));
    assert!(
        !run.status.success(),
        "whole-system record as {who} (perf_event_paranoid = {paranoid:?}) succeeded; \
         expected a refusal\n--- stderr ---\n{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("perf_event_paranoid") || run.stderr.contains("CAP_PERFMON"),
        "whole-system refusal as {who} does not mention perf_event_paranoid or CAP_PERFMON\n\
         --- stderr ---\n{}",
        run.stderr
    );
}
