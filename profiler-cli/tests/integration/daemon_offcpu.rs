//! profilerd's continuous off-CPU sampling (`[sampling] off_cpu = true`): the waits
//! workload (one thread about 20 % on CPU in `spin`, 30 % in nanosleep from `nap`, 50 %
//! blocked reading a pipe from `wait_pipe`, measured by itself) runs as the test user while
//! the daemon samples the whole system; `profctl flamegraph --wall` and `--off-cpu` over its
//! time range must give the split, to root with kernel frames and the wait kinds, and to the
//! user with only their own processes, user frames and the wait-kind frame (no frame the
//! profile marks as the kernel's). Without the
//! setting, the history query names it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use crate::daemon::{kernel_frames_in, unix_now, Daemon};
use crate::daemon_serve::as_user;

/// Allowed distance between measured and profiled shares, in points: off-CPU time is every
/// switch's; the on-CPU part of wall-clock time is sampled (999 Hz).
const POINTS: f64 = 3.0;

/// A daemon configuration under `dir` with `[sampling] off_cpu` set to `on`, walking stacks
/// by frame pointers (the waits workload keeps them; every context switch of the machine is
/// sampled, and a debug build of the daemon unwinding each by DWARF falls behind when other
/// work keeps the machine busy: see docs/offcpu.md, "Continuous").
fn config_with_off_cpu(dir: &Path, on: bool) -> std::path::PathBuf {
    let config = Daemon::write_config(dir, "");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replacen(
        "slice = \"1s\"\n",
        &format!("slice = \"1s\"\noff_cpu = {on}\ncall_graph = \"fp\"\n"),
        1,
    );
    std::fs::write(&config, text).unwrap();
    config
}

/// Share in percent of `comm`'s total held by the stacks through `frame`.
fn share(stacks: &[Stack], comm: &str, frame: &str) -> f64 {
    100.0 * frame_count(stacks, comm, frame) as f64 / comm_total(stacks, comm).max(1) as f64
}

/// Each function of `names` has its measured share of their sum, within [`POINTS`]: the
/// profile's share of the same sum, not of the whole process, whose start and end (long on a
/// busy machine, waiting for a CPU) lie outside what the functions measured.
fn assert_split(who: &str, stacks: &[Stack], measured: &BTreeMap<String, u64>, names: &[&str]) {
    let total: u64 = names.iter().map(|n| measured[*n]).sum();
    let profiled: u64 = names.iter().map(|n| frame_count(stacks, "waits", n)).sum();
    let mut report = format!(
        "{names:?} hold {:.1}% of the process's time in the profile\n",
        100.0 * profiled as f64 / comm_total(stacks, "waits").max(1) as f64
    );
    let mut bad = Vec::new();
    for name in names {
        let m = 100.0 * measured[*name] as f64 / total as f64;
        let p = 100.0 * frame_count(stacks, "waits", name) as f64 / profiled.max(1) as f64;
        report.push_str(&format!("{name}: measured {m:.1}%, profile {p:.1}%\n"));
        if (m - p).abs() > POINTS {
            bad.push(*name);
        }
    }
    eprintln!("{who}:\n{report}");
    assert!(
        bad.is_empty(),
        "{who}: shares of {bad:?} off by more than {POINTS} points:\n{report}top lines:\n{}",
        top_lines(stacks, 15)
    );
}

/// `profctl flamegraph --since @A --until @B ARGS --folded NAME` in `dir` run by `user` (None:
/// root), which must succeed: the stacks and stderr.
fn history(
    socket: &Path,
    user: Option<(u32, u32)>,
    dir: &Path,
    (since, until): (f64, f64),
    args: &[&str],
    name: &str,
) -> (Vec<Stack>, String) {
    let mut cmd = match user {
        Some((uid, gid)) => as_user(uid, gid, profctl(), dir),
        None => {
            let mut c = Command::new(profctl());
            c.current_dir(dir);
            c
        }
    };
    cmd.arg("--socket")
        .arg(socket)
        .args(["flamegraph", "--since", &format!("@{since:.3}")])
        .args(["--until", &format!("@{until:.3}"), "--folded", name])
        .args(args);
    let run = Spawned::spawn(cmd, "profctl flamegraph").wait_or_panic(Duration::from_secs(60));
    run.assert_success(&format!("flamegraph {args:?} as {user:?}"));
    (read_folded(&dir.join(name)), run.stderr)
}

/// No frame a user may not see: the kernel's, as the pprof profile at `pprof` marks them.
fn assert_no_kernel_frames(who: &str, pprof: &Path) {
    let kernel = kernel_frames_in(pprof);
    assert!(kernel.is_empty(), "{who}: kernel frames shown: {kernel:?}");
}

/// The blocked time of `frame` is named `kind` (the innermost frame).
fn assert_wait_kind(who: &str, stacks: &[Stack], frame: &str, kind: &str) {
    let with = frame_count(stacks, "waits", frame) as f64;
    let named: u64 = stacks
        .iter()
        .filter(|s| s.comm == "waits" && s.has(frame) && s.frames.last().unwrap() == kind)
        .map(|s| s.count)
        .sum();
    assert!(
        with > 0.0 && named as f64 >= 0.95 * with,
        "{who}: {frame}: {named} of {with} µs under {kind}\n{}",
        top_lines(stacks, 15)
    );
}

#[test]
fn continuous_off_cpu_gives_the_wall_split_to_root_and_to_the_user() {
    if id(&["-u"]) != Some(0) {
        eprintln!("note: needs root (to start profilerd and become the test user)");
        return;
    }
    let _guard = sampling_lock();
    let (uid, gid) = ensure_test_user();
    let dir = tempfile::Builder::new()
        .prefix("profctl-daemon-offcpu-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let config = config_with_off_cpu(dir.path(), true);
    let daemon = Daemon::start(&config);
    let user_dir = dir.path().join("user");
    std::fs::create_dir(&user_dir).unwrap();
    std::os::unix::fs::chown(&user_dir, Some(uid), Some(gid)).unwrap();

    // The user's workload, and root's own waiting beside it (a shell waiting for sleeps).
    let measured = user_dir.join("split.measured");
    let t0 = unix_now();
    let mut root_waits = Command::new("sh");
    root_waits.args(["-c", "for i in 1 2 3 4 5 6; do sleep 0.5; done"]);
    let mut root_waits = Spawned::spawn(root_waits, "sh (root)");
    let mut w = as_user(uid, gid, &workloads().waits, &user_dir);
    w.args(["split", "3"]).arg(&measured);
    Spawned::spawn(w, "waits (user)")
        .wait_or_panic(Duration::from_secs(60))
        .assert_success("waits split");
    root_waits
        .wait_or_panic(Duration::from_secs(30))
        .assert_success("sh");
    let t1 = unix_now();
    daemon.wait_slices_through(t1);
    let measured = read_measured(&measured);
    let range = (t0 - 0.2, t1 + 0.2);
    // The switches are counted in the status: every one seen, those sampled under the cap.
    let (seen, sampled) = (
        daemon.number("switches_seen"),
        daemon.number("switches_sampled"),
    );
    assert!(
        seen > 100 && sampled > 0 && sampled <= seen,
        "switches seen {seen}, sampled {sampled}"
    );

    // Root: the three shares in wall-clock time, the two waits off CPU, named from the
    // kernel's functions; root's own waits are there too.
    let (wall, stderr) = history(
        &daemon.socket,
        None,
        dir.path(),
        range,
        &["--wall"],
        "w.folded",
    );
    assert!(stderr.contains("µs of wall-clock time"), "{stderr}");
    assert_split(
        "root --wall",
        &wall,
        &measured,
        &["spin", "nap", "wait_pipe"],
    );
    let (off, stderr) = history(
        &daemon.socket,
        None,
        dir.path(),
        range,
        &["--off-cpu"],
        "o.folded",
    );
    assert!(stderr.contains("µs off CPU"), "{stderr}");
    assert_split("root --off-cpu", &off, &measured, &["nap", "wait_pipe"]);
    let spin = share(&off, "waits", "spin");
    assert!(
        spin < 1.0,
        "spin is on CPU: {spin:.1}% off CPU\n{}",
        top_lines(&off, 15)
    );
    assert_wait_kind("root", &off, "nap", "[off-cpu: sleep]");
    assert_wait_kind("root", &off, "wait_pipe", "[off-cpu: io]");
    assert!(
        off.iter().any(|s| s.comm == "sh" || s.comm == "sleep"),
        "root's own waits are missing:\n{}",
        comm_summary(&off)
    );
    // The timeline of the time off CPU holds the flamegraph's: over whole seconds (a bucket
    // cut by the range gives its time over the part inside) a second wider on each side, so
    // that every slice of the workload lies inside.
    let timeline = run_profctl(
        [
            "--socket",
            daemon.socket.to_str().unwrap(),
            "timeline",
            "--off-cpu",
            "--json",
            "--comm",
            "waits",
            "--bucket",
            "1s",
            "--since",
            &format!("@{}", range.0.floor() - 1.0),
            "--until",
            &format!("@{}", range.1.ceil() + 1.0),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    timeline.assert_success("timeline --off-cpu");
    let json: serde_json::Value = serde_json::from_str(&timeline.stdout).unwrap();
    let seconds: f64 = json["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["cpu"]["waits"].as_f64())
        .sum::<f64>()
        * json["bucket_seconds"].as_f64().unwrap();
    let folded_seconds = comm_total(&off, "waits") as f64 / 1e6;
    assert!(
        (seconds - folded_seconds).abs() <= 0.15 * folded_seconds,
        "the timeline holds {seconds:.2} s off CPU, the flamegraph {folded_seconds:.2} s"
    );
    // The CPU history is as it was: no off-CPU stack in it.
    let (cpu, _) = history(&daemon.socket, None, dir.path(), range, &[], "c.folded");
    assert!(
        frame_count(&cpu, "waits", "spin") > 0,
        "{}",
        top_lines(&cpu, 10)
    );
    assert!(
        cpu.iter()
            .all(|s| !s.frames.iter().any(|f| f.starts_with("[off-cpu: "))),
        "off-CPU stacks in the CPU history:\n{}",
        top_lines(&cpu, 10)
    );

    // The user: their own processes, user frames and the wait kind; the same split.
    let user = Some((uid, gid));
    for (mode, names) in [
        ("--wall", &["spin", "nap", "wait_pipe"][..]),
        ("--off-cpu", &["nap", "wait_pipe"][..]),
    ] {
        let name = format!("user{mode}.folded");
        let (stacks, _) = history(&daemon.socket, user, &user_dir, range, &[mode], &name);
        let who = format!("user {mode}");
        assert_split(&who, &stacks, &measured, names);
        // The same range as pprof, asked apart: folded stacks written beside a pprof profile
        // count samples, not the time that the split above is judged in.
        let pprof = format!("user{mode}.pb.gz");
        let args = [mode, "-o", &pprof];
        history(
            &daemon.socket,
            user,
            &user_dir,
            range,
            &args,
            "pprof.folded",
        );
        assert_no_kernel_frames(&who, &user_dir.join(&pprof));
        assert!(
            stacks.iter().all(|s| s.comm != "sh" && s.comm != "sleep"),
            "{who}: root's processes shown:\n{}",
            comm_summary(&stacks)
        );
        assert_wait_kind(&who, &stacks, "nap", "[off-cpu: sleep]");
    }
    daemon.stop();
}

#[test]
fn without_off_cpu_the_history_query_names_the_setting() {
    let _guard = sampling_shared();
    let dir = scratch();
    let config = config_with_off_cpu(dir.path(), false);
    let daemon = Daemon::start(&config);
    for mode in ["--off-cpu", "--wall"] {
        let run = run_profctl(
            [
                "--socket",
                daemon.socket.to_str().unwrap(),
                "flamegraph",
                mode,
                "--since",
                "10s",
                "--folded",
                "x.folded",
            ],
            dir.path(),
            Duration::from_secs(30),
        );
        assert!(!run.status.success(), "{mode} succeeded:\n{}", run.stderr);
        assert!(
            run.stderr.contains("off_cpu = true") && run.stderr.contains("[sampling]"),
            "{mode}: the error does not name the setting:\n{}",
            run.stderr
        );
        assert!(!dir.path().join("x.folded").exists());
    }
    assert_eq!(
        daemon.number("switches_seen"),
        0,
        "switches counted without off_cpu"
    );
    daemon.stop();
}
