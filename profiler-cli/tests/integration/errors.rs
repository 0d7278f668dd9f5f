//! Bad input gets a clear error naming what is wrong, and a non-zero exit.

use std::fs;
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
    let _guard = sampling_shared();
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

/// Impossible options exit with status 2 before anything starts: the command is never run
/// (it would create a file), and a directory named as the output is refused at once, not
/// after the recording.
#[test]
fn impossible_options_fail_before_the_command_runs() {
    let dir = scratch();
    let marker = dir.path().join("ran");
    let command = format!("touch {}; sleep 3", marker.display());
    let out_dir = dir.path().to_str().unwrap().to_owned();
    for (args, status) in [
        (&["--duration", "1e20"][..], 2),
        (&["--duration", "inf"][..], 2),
        (&["--stack-size", "0"][..], 2),
        (&["--stack-size", "70000"][..], 2),
        (&["--ring-pages", "1"][..], 2),
        (&["--ring-pages", "3"][..], 2),
        (&["-o", out_dir.as_str()][..], 1),
        (&["--folded", out_dir.as_str()][..], 1),
    ] {
        let mut argv = vec!["record"];
        argv.extend_from_slice(args);
        argv.extend_from_slice(&["--", "sh", "-c", &command]);
        let run = run_profctl(&argv, dir.path(), Duration::from_secs(30));
        assert_eq!(
            run.status.code(),
            Some(status),
            "{args:?}: stderr: {}",
            run.stderr
        );
        assert!(!run.stderr.is_empty(), "{args:?} failed silently");
        assert!(
            !run.stderr.contains("panicked"),
            "{args:?} panicked: {}",
            run.stderr
        );
        assert!(!marker.exists(), "{args:?}: the command ran");
        assert!(
            run.elapsed < scaled(Duration::from_secs(2)),
            "{args:?} failed only after {:.1?}",
            run.elapsed
        );
    }
}

/// Each output is written on its own: when the folded stacks cannot be written (their
/// directory vanished during the recording), the flamegraph still is, and profctl says so
/// and fails.
#[test]
fn a_failing_folded_output_keeps_the_flamegraph() {
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    fs::create_dir(dir.path().join("gone")).unwrap();
    let command = format!("{} 0.5 && rmdir gone", w.burner.display());
    let run = run_profctl(
        [
            "record",
            "-o",
            "out.svg",
            "--folded",
            "gone/out.folded",
            "--",
            "sh",
            "-c",
            &command,
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    assert!(!run.status.success(), "a failed output was not reported");
    assert!(
        run.stderr.contains("gone/out.folded") && run.stderr.contains("despite the error"),
        "stderr: {}",
        run.stderr
    );
    let svg = check_svg(&dir.path().join("out.svg"));
    assert!(svg.contains("child_hot"), "the flamegraph lost the profile");
}
