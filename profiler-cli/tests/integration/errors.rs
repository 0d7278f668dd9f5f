//! Bad input gets a clear error naming what is wrong, and a non-zero exit.

use std::time::Duration;

use crate::common::*;

#[test]
fn vanished_pid_is_named_in_the_error() {
    let dir = scratch();
    // Pids above pid_max (at most 2^22) never exist.
    let run = run_profctl(
        ["record", "--pid", "99999999", "--duration", "1"],
        dir.path(),
        Duration::from_secs(30),
    );
    assert!(!run.status.success(), "recording a missing pid succeeded");
    assert!(
        run.stderr.contains("no such process: 99999999"),
        "stderr: {}",
        run.stderr
    );
}

#[test]
fn missing_command_is_named_in_the_error() {
    let dir = scratch();
    let run = run_profctl(
        ["record", "--", "./no-such-program-here"],
        dir.path(),
        Duration::from_secs(30),
    );
    assert!(
        !run.status.success(),
        "recording a missing command succeeded"
    );
    assert!(
        run.stderr.contains("no-such-program-here"),
        "stderr: {}",
        run.stderr
    );
    let run = run_profctl(
        ["record", "--", "definitely-not-on-path-xyz"],
        dir.path(),
        Duration::from_secs(30),
    );
    assert!(
        run.stderr.contains("command not found"),
        "stderr: {}",
        run.stderr
    );
}

#[test]
fn unwritable_output_is_named_and_nothing_is_left_behind() {
    let _guard = sampling_lock();
    let w = workloads();
    let dir = scratch();
    let run = run_profctl(
        [
            "record",
            "-o",
            "/nonexistent-dir/out.svg",
            "--",
            w.split.to_str().unwrap(),
            "0.3",
        ],
        dir.path(),
        Duration::from_secs(30),
    );
    assert!(
        !run.status.success(),
        "writing into a missing directory succeeded"
    );
    assert!(
        run.stderr.contains("/nonexistent-dir"),
        "stderr: {}",
        run.stderr
    );
}

#[test]
fn invalid_arguments_are_rejected() {
    let dir = scratch();
    for args in [
        &["record", "--freq", "0"][..],
        &["record", "--duration", "-3"][..],
        &["record", "--pid", "1", "--", "true"][..],
        &["record", "--ring-pages", "3", "--", "true"][..],
    ] {
        let run = run_profctl(args, dir.path(), Duration::from_secs(30));
        assert!(!run.status.success(), "{args:?} was accepted");
        assert!(!run.stderr.is_empty(), "{args:?} failed silently");
    }
}
