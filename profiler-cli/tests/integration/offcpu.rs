//! `profctl record --off-cpu` and `--wall` as root: the waits workload's thread spends about
//! 20 % of its wall time on CPU in `spin`, 30 % in nanosleep from `nap` and 50 % blocked
//! reading a pipe from `wait_pipe`, each measured by the thread itself. The wall-clock
//! profile must give the three shares, the off-CPU profile the two blocked ones in
//! proportion and `spin` next to nothing, within 2 points, with frame-pointer and DWARF
//! unwinding; a lock-contention run must show the futex wait under the function that took
//! the lock.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

/// Allowed distance between measured and profiled shares, in points.
const POINTS: f64 = 2.0;

/// Seconds the split workload runs.
const SECONDS: &str = "2.5";

/// How a recording is made.
#[derive(Clone, Copy)]
enum How {
    /// `--pid` of a workload started first, frame pointers, inline system calls.
    PidFp,
    /// `-- COMMAND`, DWARF, the C library's read() and nanosleep().
    CommandDwarf,
}

/// Record `waits split` with `mode` (`--wall`, `--off-cpu`): the folded stacks, the
/// workload's measurement, profctl's stderr.
fn record_split(dir: &Path, mode: &str, how: How) -> (Vec<Stack>, BTreeMap<String, u64>, String) {
    let w = workloads();
    let folded = dir.join(format!("{mode}.folded"));
    let measured = dir.join(format!("{mode}.measured"));
    let svg = dir.join(format!("{mode}.svg"));
    let mut args: Vec<std::ffi::OsString> = vec![
        "record".into(),
        mode.into(),
        "--folded".into(),
        folded.clone().into(),
        "-o".into(),
        svg.clone().into(),
    ];
    let run = match how {
        How::PidFp => {
            let mut cmd = Command::new(&w.waits);
            cmd.args(["split", SECONDS]).arg(&measured);
            let mut workload = Spawned::spawn(cmd, "waits");
            args.extend(["--call-graph".into(), "fp".into(), "--pid".into()]);
            args.push(workload.pid().to_string().into());
            let run = run_profctl(&args, dir, Duration::from_secs(60));
            workload
                .wait_or_panic(Duration::from_secs(30))
                .assert_success("waits split");
            run
        }
        How::CommandDwarf => {
            args.extend(["--call-graph".into(), "dwarf".into(), "--".into()]);
            args.extend([w.waits.clone().into(), "split".into(), SECONDS.into()]);
            args.extend([measured.clone().into(), "--libc".into()]);
            run_profctl(&args, dir, Duration::from_secs(60))
        }
    };
    run.assert_success(&format!("record {mode}"));
    assert!(
        run.stderr.contains("counts are microseconds")
            && run.stderr.contains("context switches seen"),
        "the summary says what the counts are and what was seen:\n{}",
        run.stderr
    );
    let svg_text = check_svg(&svg);
    assert!(
        svg_text.contains("[off-cpu: "),
        "the SVG marks blocked time"
    );
    let raw = std::fs::read_to_string(&svg).unwrap();
    assert!(
        raw.contains("rgb(80,140,230)"),
        "off-CPU frames have their own colour"
    );
    (read_folded(&folded), read_measured(&measured), run.stderr)
}

/// Share in percent of `comm`'s total held by the stacks through `frame`.
fn share(stacks: &[Stack], comm: &str, frame: &str) -> f64 {
    100.0 * frame_count(stacks, comm, frame) as f64 / comm_total(stacks, comm).max(1) as f64
}

/// Assert that each function of `measured` has its measured share of their sum, within
/// [`POINTS`].
fn assert_split(stacks: &[Stack], measured: &BTreeMap<String, u64>, names: &[&str]) {
    assert_split_within(POINTS, stacks, measured, names);
}

/// [`assert_split`] within `points`.
fn assert_split_within(
    points: f64,
    stacks: &[Stack],
    measured: &BTreeMap<String, u64>,
    names: &[&str],
) {
    // Both sides are shares of the named functions' sum: the workload measures only their
    // waits, while the profile also holds the thread's other stacks (its CPU between waits,
    // its start and exit).
    let total: u64 = names.iter().map(|n| measured[*n]).sum();
    let profiled: u64 = names.iter().map(|n| frame_count(stacks, "waits", n)).sum();
    let mut report = String::new();
    let mut bad = Vec::new();
    for name in names {
        let m = 100.0 * measured[*name] as f64 / total as f64;
        let p = 100.0 * frame_count(stacks, "waits", name) as f64 / profiled.max(1) as f64;
        report.push_str(&format!("{name}: measured {m:.1}%, profile {p:.1}%\n"));
        if (m - p).abs() > points {
            bad.push(*name);
        }
    }
    assert!(
        bad.is_empty(),
        "shares of {bad:?} off by more than {points} points:\n{report}top lines:\n{}",
        top_lines(stacks, 15)
    );
}

fn wall_split(how: How) {
    // Shared: the workload's own pid or command, its shares against the time it measured
    // itself (time off CPU while runnable is `preempted`, not one of its waits).
    let _guard = sampling_shared();
    let dir = scratch();
    let (stacks, measured, stderr) = record_split(dir.path(), "--wall", how);
    assert_split(&stacks, &measured, &["spin", "nap", "wait_pipe"]);
    // The thread's stacks add up to its wall time (µs): the measured time and a little more
    // (its loop, and the start before the first round).
    let wall_us = measured.values().sum::<u64>() / 1000;
    let total = comm_total(&stacks, "waits");
    assert!(
        total >= wall_us * 97 / 100 && total <= wall_us * 110 / 100,
        "the thread's profile holds {total} µs for {wall_us} µs measured\n{stderr}"
    );
}

fn off_cpu_split(how: How) {
    // Shared, as `wall_split`.
    let _guard = sampling_shared();
    let dir = scratch();
    let (stacks, measured, _) = record_split(dir.path(), "--off-cpu", how);
    assert_split(&stacks, &measured, &["nap", "wait_pipe"]);
    let spin = share(&stacks, "waits", "spin");
    assert!(
        spin < 1.0,
        "spin runs on CPU, off-CPU share {spin:.1}%\n{}",
        top_lines(&stacks, 15)
    );
    // The waits are named from the kernel functions at switch-out.
    let kind = |frame: &str, kind: &str| {
        let with = frame_count(&stacks, "waits", frame) as f64;
        let named: u64 = stacks
            .iter()
            .filter(|s| s.comm == "waits" && s.has(frame) && s.frames.last().unwrap() == kind)
            .map(|s| s.count)
            .sum();
        assert!(
            named as f64 >= 0.95 * with,
            "{frame}: {named} of {with} µs under {kind}\n{}",
            top_lines(&stacks, 15)
        );
    };
    kind("nap", "[off-cpu: sleep]");
    kind("wait_pipe", "[off-cpu: io]");
}

#[test]
fn wall_shares_with_frame_pointers_of_a_running_pid() {
    wall_split(How::PidFp);
}

#[test]
fn wall_shares_with_dwarf_of_a_command() {
    wall_split(How::CommandDwarf);
}

#[test]
fn off_cpu_shares_with_frame_pointers_of_a_running_pid() {
    off_cpu_split(How::PidFp);
}

#[test]
fn off_cpu_shares_with_dwarf_of_a_command() {
    off_cpu_split(How::CommandDwarf);
}

#[test]
fn lock_waits_show_the_futex_under_the_caller_that_took_the_lock() {
    // Shared: its own command, judged by the path of its futex waits.
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    let folded = dir.path().join("lock.folded");
    let pb = dir.path().join("lock.pb.gz");
    let run = run_profctl(
        [
            "record".as_ref(),
            "--off-cpu".as_ref(),
            "--folded".as_ref(),
            folded.as_os_str(),
            "-o".as_ref(),
            pb.as_os_str(),
            "--".as_ref(),
            w.waits.as_os_str(),
            "lock".as_ref(),
            "1.5".as_ref(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    run.assert_success("record --off-cpu -- waits lock");
    let stacks = read_folded(&folded);
    let total = comm_total(&stacks, "locker");
    // Time blocked in the futex wait, with take_lock above it.
    let under: u64 = stacks
        .iter()
        .filter(|s| s.comm == "locker" && s.frames.last().is_some_and(|f| f == "[off-cpu: lock]"))
        .filter(|s| {
            let at = s.frames.iter().position(|f| f == "take_lock");
            at.is_some_and(|i| s.frames[i..].iter().any(|f| f.contains("futex_wait")))
        })
        .map(|s| s.count)
        .sum();
    assert!(
        total > 0 && under as f64 >= 0.9 * total as f64,
        "{under} of {total} µs of the lockers' blocked time is a futex wait under take_lock\n{}",
        top_lines(&stacks, 15)
    );
    // pprof: a time profile of blocked nanoseconds, the same total.
    let profile = pprof::decode(&std::fs::read(&pb).unwrap()).expect("pprof decodes");
    let name = |i: i64| profile.string_table[i as usize].clone();
    let types: Vec<(String, String)> = profile
        .sample_type
        .iter()
        .map(|t| (name(t.r#type), name(t.unit)))
        .collect();
    assert_eq!(types[1], ("off_cpu".to_string(), "nanoseconds".to_string()));
    let ns: i64 = profile.sample.iter().map(|s| s.value[1]).sum();
    let folded_us: u64 = stacks.iter().map(|s| s.count).sum();
    assert!(
        (ns as f64 / 1e3 - folded_us as f64).abs() <= 0.01 * folded_us as f64 + 10.0,
        "pprof {ns} ns vs folded {folded_us} µs"
    );
}

#[test]
fn an_unprivileged_user_without_a_daemon_gets_the_reason_not_an_empty_profile() {
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok());
    if id(&["-u"]) != Some(0) || paranoid.is_some_and(|p| p < 2) {
        eprintln!("note: needs root (to become the test user) and perf_event_paranoid >= 2");
        return;
    }
    // Shared: it samples nothing (no daemon answers); it judges the message.
    let _guard = sampling_shared();
    let (uid, gid) = ensure_test_user();
    let dir = tempfile::Builder::new()
        .prefix("profctl-offcpu-user-")
        .tempdir_in("/tmp")
        .unwrap();
    std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).unwrap();
    let measured = dir.path().join("measured.txt");
    for mode in ["--off-cpu", "--wall"] {
        let mut cmd = crate::daemon_serve::as_user(uid, gid, profctl(), dir.path());
        // A socket where no daemon answers.
        cmd.args(["--socket", "/nonexistent/profilerd.sock", "record", mode])
            .args(["--folded", "out.folded", "--"])
            .arg(&workloads().waits)
            .args(["split", "1"])
            .arg(&measured);
        let run = Spawned::spawn(cmd, "profctl (user)").wait_or_panic(Duration::from_secs(60));
        assert!(
            !run.status.success(),
            "{mode} as a user at paranoid 2 succeeded:\n{}",
            run.stderr
        );
        for needed in ["kernel.perf_event_paranoid", "CAP_PERFMON", "profilerd"] {
            assert!(
                run.stderr.contains(needed),
                "{mode}: the error does not name {needed}:\n{}",
                run.stderr
            );
        }
        assert!(
            !dir.path().join("out.folded").exists() && !measured.exists(),
            "{mode}: no profile written and the command not run"
        );
    }
}

/// A user at paranoid 2 records their own process through profilerd: `--wall` gives the
/// three shares within [`POINTS`], with user frames only and the wait kind still named (from
/// the kernel part the daemon saw); `--off-cpu` the two blocked ones; and `-- COMMAND` in
/// both modes, the command held before its exec until the daemon samples, waiting in the C
/// library's read() and nanosleep() (no frame pointers: the daemon's DWARF unwinding must
/// reach `nap` and `wait_pipe` through them).
#[test]
fn an_unprivileged_user_records_off_cpu_and_wall_through_profilerd() {
    if id(&["-u"]) != Some(0) {
        eprintln!("note: needs root (to start profilerd and become the test user)");
        return;
    }
    // Shared: the user records their own pid or command through the daemon, judged as
    // `wall_split` is.
    let _guard = sampling_shared();
    let (uid, gid) = ensure_test_user();
    let dir = tempfile::Builder::new()
        .prefix("profctl-offcpu-daemon-")
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let config = crate::daemon::Daemon::write_config(dir.path(), "");
    let daemon = crate::daemon::Daemon::start(&config);
    let socket = daemon.socket.to_str().unwrap().to_string();
    let user_dir = dir.path().join("user");
    std::fs::create_dir(&user_dir).unwrap();
    std::os::unix::fs::chown(&user_dir, Some(uid), Some(gid)).unwrap();
    for (mode, names, command) in [
        ("--wall", &["spin", "nap", "wait_pipe"][..], false),
        ("--off-cpu", &["nap", "wait_pipe"][..], false),
        ("--wall", &["spin", "nap", "wait_pipe"][..], true),
        ("--off-cpu", &["nap", "wait_pipe"][..], true),
    ] {
        let tag = format!(
            "{}{}",
            mode.trim_start_matches("--"),
            if command { "-cmd" } else { "" }
        );
        let measured = user_dir.join(format!("{tag}.measured"));
        let folded = format!("{tag}.folded");
        let mut cmd = crate::daemon_serve::as_user(uid, gid, profctl(), &user_dir);
        cmd.args(["--socket", &socket, "record", mode, "--folded", &folded]);
        let mut workload = None;
        if command {
            // Held before its exec until the daemon's events are open.
            cmd.arg("--")
                .arg(&workloads().waits)
                .args(["split", "2.5"])
                .arg(&measured)
                .arg("--libc");
        } else {
            // Recorded until it exits, so that the recording covers nearly all the time the
            // thread measured (a 2-s recording of a 3-s run was 2.4 points off in a run
            // beside a two-CPU hog: the split drifts as the machine's load does).
            let mut w = crate::daemon_serve::as_user(uid, gid, &workloads().waits, &user_dir);
            w.args(["split", "2.5"]).arg(&measured);
            let w = Spawned::spawn(w, "waits (user)");
            cmd.arg("--pid").arg(w.pid().to_string());
            workload = Some(w);
        }
        let run = Spawned::spawn(cmd, "profctl (user)").wait_or_panic(Duration::from_secs(60));
        run.assert_success(&format!("record {tag} through profilerd as a user"));
        assert!(
            run.stderr.contains("via profilerd") && run.stderr.contains("microseconds"),
            "{}",
            run.stderr
        );
        if let Some(mut w) = workload {
            w.wait_or_panic(Duration::from_secs(30))
                .assert_success("waits split");
        }
        let stacks = read_folded(&user_dir.join(&folded));
        assert_split(&stacks, &read_measured(&measured), names);
        if mode == "--off-cpu" {
            let spin = share(&stacks, "waits", "spin");
            assert!(
                spin < 1.0,
                "{tag}: spin runs on CPU, off-CPU share {spin:.1}%\n{}",
                top_lines(&stacks, 10)
            );
        }
        let kernel: Vec<&Stack> = stacks
            .iter()
            .filter(|s| {
                s.frames
                    .iter()
                    .any(|f| f.starts_with("entry_SYSCALL") || f == "schedule")
            })
            .collect();
        assert!(
            kernel.is_empty(),
            "{mode}: kernel frames shown to a user: {kernel:?}"
        );
        let sleep_named = stacks
            .iter()
            .any(|s| s.has("nap") && s.frames.last().unwrap() == "[off-cpu: sleep]");
        assert!(
            sleep_named,
            "{mode}: nap's wait is not named sleep\n{}",
            top_lines(&stacks, 10)
        );
    }
}

/// Switch samples a second allowed by the cap test.
const CAP: u64 = 5000;

/// One number of the summary's switches line: the one before `word` (`seen`, `sampled`).
fn summary_count(stderr: &str, word: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.contains("context switches seen"))
        .unwrap_or_else(|| panic!("no switches line:\n{stderr}"));
    let words: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    let at = words
        .iter()
        .position(|w| *w == word)
        .unwrap_or_else(|| panic!("no {word:?} in {line}"));
    let back = if word == "seen" { 3 } else { 1 };
    words[at - back]
        .parse()
        .unwrap_or_else(|_| panic!("no count before {word:?} in {line}"))
}

/// `--switch-cap`: a process switching some 30k times a second (two threads ping-ponging
/// a pipe) beside the split thread, attached with `--pid`. The switch samples stay under the
/// cap (plus the first tenth of a second, sampled whole before the first decision) while
/// every switch is counted, and the split thread's two waits keep their measured shares
/// within [`POINTS`] although most of its switches are not sampled.
#[test]
fn switch_samples_stay_under_the_cap_and_the_split_holds() {
    // Alone: under the cap a wait's share is an estimate from the switches sampled, and how
    // close it comes moves with the machine's load (beside the hog and two shared tests it
    // was 5.6 points off, in a run of 2026-11-30).
    let _guard = sampling_lock();
    let dir = scratch();
    let w = workloads();
    let (folded, measured) = (dir.path().join("busy.folded"), dir.path().join("busy.m"));
    let seconds = 8.0;
    let mut cmd = Command::new(&w.waits);
    cmd.args(["busy", &seconds.to_string()])
        .arg(&measured)
        .arg("30000");
    let mut workload = Spawned::spawn(cmd, "waits busy");
    // Its pinger and ponger threads started (the split thread is the main one).
    wait_for(
        "the busy workload's threads",
        Duration::from_secs(10),
        || match threads_of(workload.pid()) {
            n if n >= 3 => Ok(()),
            n => Err(format!("{n} threads")),
        },
    );
    let run = run_profctl(
        [
            "record".into(),
            "--embedded".into(),
            "--off-cpu".into(),
            "--call-graph".into(),
            "fp".into(),
            "--switch-cap".into(),
            CAP.to_string().into(),
            "--folded".into(),
            std::ffi::OsString::from(&folded),
            "--pid".into(),
            workload.pid().to_string().into(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    workload
        .wait_or_panic(Duration::from_secs(30))
        .assert_success("waits busy");
    run.assert_success("record --off-cpu --switch-cap");
    let (seen, sampled) = (
        summary_count(&run.stderr, "seen"),
        summary_count(&run.stderr, "sampled"),
    );
    let recorded = seconds - 0.2;
    assert!(
        seen as f64 >= 20_000.0 * recorded,
        "a switch-heavy load: {seen} switches in {recorded} s\n{}",
        run.stderr
    );
    // The cap, and every switch of the first decision's 0.2 s (at most) sampled.
    let allowed = 1.2 * CAP as f64 * recorded + 0.2 * seen as f64 / recorded;
    assert!(
        (sampled as f64) <= allowed,
        "{sampled} switch samples in {recorded} s, cap {CAP}/s ({allowed:.0} allowed), \
         {seen} seen\n{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("more, their time scaled"),
        "the summary says the samples stood for more switches:\n{}",
        run.stderr
    );
    let stacks = read_folded(&folded);
    // Under the cap a wait's time is its sampled intervals' scaled: an estimate, judged
    // within 5 points (the uncapped tests keep 2). Beside two busy processes, 8 s under 5000
    // (some 900 samples of its waits) was off by 0.2-2.4 points in 10 runs (root mean square
    // 1.3). Counting a sample's switches per thread instead of per thread and CPU, it was off
    // by up to 5.8 (2.8), and failed a CI run at 5.5.
    assert_split_within(
        5.0,
        &stacks,
        &read_measured(&measured),
        &["nap", "wait_pipe"],
    );
    let spin = share(&stacks, "waits", "spin");
    assert!(spin < 1.0, "spin runs on CPU, off-CPU share {spin:.1}%");
}
