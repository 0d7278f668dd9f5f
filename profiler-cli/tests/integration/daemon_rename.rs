//! A user's process that names its main thread (prctl PR_SET_NAME, as servers and
//! setproctitle do) right after it starts and again a second later, under a daemon at the
//! default slice length (10 s): it stays in its owner's view. The test user sees it in their
//! flamegraph, top and timeline of the history, and records it through the daemon with
//! `record --pid`, `record --wall -- CMD` and `record --off-cpu -- CMD`, with the shares the
//! program measured itself. (The daemon used to read a process's owner after an exec only
//! while /proc showed the name the exec gave: a guard against pid reuse that a rename
//! defeats; procmap now checks the process's start time instead.)

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;
use crate::daemon::{unix_now, Daemon};
use crate::daemon_serve::{as_user, measured_since, read_report};
use crate::daemon_users::test_user_dir;

/// Allowed distance between measured and profiled shares, in points, at least (more on few
/// samples: [`share_tolerance`]).
const POINTS: f64 = 3.0;

/// A daemon configuration under `dir` at the default slice length (the other daemon tests'
/// 1-s slices taken out).
pub(crate) fn config_default_slices(dir: &Path, extra: &str) -> PathBuf {
    let config = Daemon::write_config(dir, extra);
    let text = fs::read_to_string(&config).unwrap();
    assert!(text.contains("slice = \"1s\"\n"), "{text}");
    fs::write(&config, text.replacen("slice = \"1s\"\n", "", 1)).unwrap();
    config
}

/// Each of `names`' share of the stacks through any of them (every command name: the
/// process renamed itself), against its share of their measured sum; the report. The
/// tolerance grows on few samples ([`share_tolerance`]); off-CPU and wall counts are
/// microseconds of every switch, not samples, and keep [`POINTS`].
fn assert_shares_any_comm(
    who: &str,
    stacks: &[Stack],
    measured: &BTreeMap<String, u64>,
    names: &[&str],
) {
    let through =
        |name: &str| -> u64 { stacks.iter().filter(|s| s.has(name)).map(|s| s.count).sum() };
    let total: u64 = names.iter().map(|n| through(n)).sum();
    let measured_total: u64 = names.iter().map(|n| measured[*n]).sum();
    let mut report = String::new();
    let mut bad = Vec::new();
    for name in names {
        let m = 100.0 * measured[*name] as f64 / measured_total as f64;
        let p = 100.0 * through(name) as f64 / total.max(1) as f64;
        let allowed = share_tolerance(POINTS, m, total);
        report.push_str(&format!(
            "{name}: measured {m:.1}%, profile {p:.1}% (allowed {allowed:.1} points)\n"
        ));
        if (m - p).abs() > allowed {
            bad.push(*name);
        }
    }
    eprintln!("{who}: {total} in all\n{report}");
    assert!(
        total > 0 && bad.is_empty(),
        "{who}: {total} samples through {names:?}; shares of {bad:?} off by more than \
         allowed:\n{report}comms: {}\n{}",
        comm_summary(stacks),
        top_lines(stacks, 15)
    );
}

/// profctl as the user in `user_dir`, which must succeed within a minute: the run.
fn profctl_as(user: (u32, u32), user_dir: &Path, socket: &Path, args: &[&str]) -> Run {
    let mut cmd = as_user(user.0, user.1, profctl(), user_dir);
    cmd.arg("--socket").arg(socket).args(args);
    let run = Spawned::spawn(cmd, "profctl (user)").wait_or_panic(scaled(Duration::from_secs(60)));
    run.assert_success(&format!("profctl {args:?} as the user"));
    run
}

#[test]
fn daemon_a_process_that_renames_itself_stays_in_its_owners_view() {
    // Shared: every query and recording is the test user's, of its own pids, judged against
    // what those processes measured over the same time (a busy machine slows them and shifts
    // nothing judged).
    let _guard = sampling_shared();
    let dir = scratch();
    let Some((uid, gid, user_dir)) = test_user_dir(dir.path()) else {
        return;
    };
    let user = (uid, gid);
    let w = workloads();
    let config = config_default_slices(dir.path(), "");
    let daemon = Daemon::start(&config);
    let socket = daemon.socket.clone();
    assert_eq!(
        daemon.number("slice_seconds"),
        10,
        "the default slice length"
    );

    // The history: split renames itself right after it starts and again a second later.
    let measured = user_dir.join("split.measured");
    let t0 = unix_now();
    let mut cmd = as_user(uid, gid, &w.split, &user_dir);
    cmd.args(["--rename", "5"]).arg(&measured);
    let mut split = Spawned::spawn(cmd, "split --rename (user)");
    let pid = split.pid().to_string();
    split
        .wait_or_panic(scaled(Duration::from_secs(60)))
        .assert_success("split --rename");
    let t1 = unix_now();
    let measured = read_measured(&measured);
    let range = [
        "--since".to_string(),
        format!("@{:.3}", t0 - 0.5),
        "--until".to_string(),
        format!("@{:.3}", t1 + 0.5),
    ];
    let range: Vec<&str> = range.iter().map(String::as_str).collect();

    let mut args = vec!["flamegraph"];
    args.extend_from_slice(&range);
    args.extend_from_slice(&["--pid", &pid, "--folded", "history.folded"]);
    profctl_as(user, &user_dir, &socket, &args);
    let stacks = read_folded(&user_dir.join("history.folded"));
    assert_shares_any_comm("flamegraph", &stacks, &measured, &HOT);
    for name in ["split-renamed", "split-again"] {
        assert!(
            comm_total(&stacks, name) > 0,
            "no samples under the name {name}: the process did not rename itself while sampled: {}",
            comm_summary(&stacks)
        );
    }

    let mut args = vec!["top"];
    args.extend_from_slice(&range);
    args.extend_from_slice(&["--pid", &pid, "-n", "10"]);
    let top = profctl_as(user, &user_dir, &socket, &args).stdout;
    for f in HOT {
        assert!(
            top.lines().any(|l| l.split_whitespace().last() == Some(f)),
            "the user's top has no {f}:\n{top}"
        );
    }

    // The timeline from 15 s before (a slice's whole CPU lies within it) until now: the
    // process's CPU, in cores times seconds, near what it measured. A bucket's cores are over
    // its part inside the range, which the first and the last bucket only partly are.
    let (since, until) = (t0 - 15.0, unix_now());
    let json = profctl_as(
        user,
        &user_dir,
        &socket,
        &[
            "timeline",
            "--json",
            "--since",
            &format!("@{since:.3}"),
            "--until",
            &format!("@{until:.3}"),
            "--pid",
            &pid,
            "--bucket",
            "5s",
        ],
    )
    .stdout;
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let bucket = v["bucket_seconds"].as_f64().expect("bucket_seconds");
    let cpu: f64 = v["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| {
            let start = b["start"].as_f64().expect("start");
            let covered = (start + bucket).min(until) - start.max(since);
            let cores: f64 = b["cpu"]
                .as_object()
                .unwrap()
                .values()
                .map(|c| c.as_f64().unwrap())
                .sum();
            cores * covered
        })
        .sum();
    let want = measured.values().sum::<u64>() as f64 / 1e9;
    assert!(
        (0.8 * want..1.3 * want).contains(&cpu),
        "the user's timeline holds {cpu:.2} s of the process's CPU, it measured {want:.2} s: {json}"
    );

    record_pid(user, &user_dir, &socket);
    for mode in ["--wall", "--off-cpu"] {
        record_command(user, &user_dir, &socket, mode);
    }
    daemon.stop();
}

/// `record --pid` through the daemon of a running `split --rename forever`: its shares over
/// the recording within [`POINTS`] of what it measured over the same time (its report read
/// before and after).
fn record_pid(user: (u32, u32), user_dir: &Path, socket: &Path) {
    let w = workloads();
    let report = user_dir.join("forever.measured");
    let mut cmd = as_user(user.0, user.1, &w.split, user_dir);
    cmd.args(["--rename", "forever"]).arg(&report);
    let mut split = Spawned::spawn(cmd, "split --rename forever (user)");
    // The second rename (a second after the start) before the recording starts.
    wait_for(
        "split's second rename",
        Duration::from_secs(10),
        || match fs::read_to_string(format!("/proc/{}/comm", split.pid())) {
            Ok(c) if c.trim() == "split-again" => Ok(()),
            other => Err(format!("comm {other:?}")),
        },
    );
    let pid = split.pid().to_string();
    let before = read_report(&report);
    let run = profctl_as(
        user,
        user_dir,
        socket,
        &[
            "record",
            "--pid",
            &pid,
            "--freq",
            FREQ,
            "-d",
            "3",
            "--folded",
            "pid.folded",
        ],
    );
    let measured = measured_since(&before, &report);
    assert!(run.stderr.contains("via profilerd"), "{}", run.stderr);
    assert!(send_signal(split.pid(), "TERM"));
    split
        .wait_or_panic(scaled(Duration::from_secs(30)))
        .assert_success("split forever");
    let stacks = read_folded(&user_dir.join("pid.folded"));
    assert_shares_any_comm("record --pid", &stacks, &measured, &HOT);
}

/// `record MODE -- waits split 2.5 M --libc --rename` through the daemon (the user may not
/// sample context switches): the waits' shares within [`POINTS`] of what it measured.
fn record_command(user: (u32, u32), user_dir: &Path, socket: &Path, mode: &str) {
    let tag = mode.trim_start_matches("--");
    let measured = user_dir.join(format!("{tag}.measured"));
    let folded = format!("{tag}.folded");
    let run = profctl_as(
        user,
        user_dir,
        socket,
        &[
            "record",
            mode,
            "--folded",
            &folded,
            "--",
            workloads().waits.to_str().unwrap(),
            "split",
            "2.5",
            measured.to_str().unwrap(),
            "--libc",
            "--rename",
        ],
    );
    assert!(
        run.stderr.contains("via profilerd") && run.stderr.contains("microseconds"),
        "{mode}: {}",
        run.stderr
    );
    let names: &[&str] = if mode == "--wall" {
        &["spin", "nap", "wait_pipe"]
    } else {
        &["nap", "wait_pipe"]
    };
    let stacks = read_folded(&user_dir.join(&folded));
    assert_shares_any_comm(
        &format!("record {mode} -- CMD"),
        &stacks,
        &read_measured(&measured),
        names,
    );
}
