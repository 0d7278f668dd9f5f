//! profilerd serving more than its history: `profctl record --pid` through the daemon (shares
//! against the workload's own measurement, "via profilerd", a real user recording its own
//! process and refused root's), the descendants filter, and the scrape listener read by the
//! real `go tool pprof` (proportions, a bearer token, two scrapes at once).

use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use crate::common::*;
use crate::daemon::{flamegraph, kernel_frames_in, unix_now, Daemon};

/// `split forever MEASURED` started, waiting until its first report.
fn start_split(mut cmd: Command, measured: &Path, name: &str) -> Spawned {
    cmd.arg("forever").arg(measured);
    let workload = Spawned::spawn(cmd, name);
    wait_for(
        &format!("{name}'s first report"),
        Duration::from_secs(10),
        || match fs::metadata(measured) {
            Ok(m) if m.len() > 0 => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    workload
}

/// What the workload measured between two reads of its report.
pub(crate) fn measured_since(before: &BTreeMap<String, u64>, path: &Path) -> BTreeMap<String, u64> {
    let after = read_measured(path);
    after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(before.get(k).copied().unwrap_or(0)),
            )
        })
        .collect()
}

/// A report read whole (the workload rewrites it every 100 ms).
pub(crate) fn read_report(path: &Path) -> BTreeMap<String, u64> {
    wait_for(
        &format!("a whole report in {}", path.display()),
        Duration::from_secs(2),
        || {
            let m = read_measured(path);
            match HOT.iter().all(|f| m.contains_key(*f)) {
                true => Ok(m),
                false => Err(format!("{m:?}")),
            }
        },
    )
}

/// `program` run as `uid`:`gid` (no supplementary groups) in `cwd`, through setpriv.
pub(crate) fn as_user(uid: u32, gid: u32, program: &Path, cwd: &Path) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .arg("--clear-groups")
        .arg("--")
        .arg(program);
    c.current_dir(cwd);
    c
}

#[test]
fn daemon_record_pid_shares_access_and_descendants() {
    // Shared: every recording and query selects the test's own pids, and shares are judged
    // against what its workload measured over the same time (a busy machine slows them and
    // shifts nothing judged); the descendants' counts are floors far under their CPU.
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);
    let socket = daemon.socket.to_str().unwrap().to_string();

    // profctl record --pid through the daemon: shares within 5 points of the workload's own
    // measurement over the same time.
    let measured_path = dir.path().join("measured.txt");
    let split = start_split(Command::new(&w.split), &measured_path, "split");
    let pid = split.pid().to_string();
    let before = read_report(&measured_path);
    let folded = dir.path().join("record.folded");
    let svg = dir.path().join("record.svg");
    let run = run_profctl(
        [
            "--socket",
            &socket,
            "record",
            "--pid",
            &pid,
            "--freq",
            FREQ,
            "--duration",
            "3",
            "-o",
            svg.to_str().unwrap(),
            "--folded",
            folded.to_str().unwrap(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    let measured = measured_since(&before, &measured_path);
    run.assert_success("record --pid through profilerd");
    assert!(
        run.stderr.contains(&format!("via profilerd at {socket}")),
        "the summary does not say the daemon recorded:\n{}",
        run.stderr
    );
    let stacks = read_folded(&folded);
    assert_names(&stacks, "split", &HOT);
    assert_shares(&stacks, "split", &measured);
    assert!(
        stacks.iter().all(|s| s.comm == "split"),
        "{}",
        top_lines(&stacks, 10)
    );
    let text = check_svg(&svg);
    assert!(
        text.contains("via profilerd"),
        "the SVG does not say how it was recorded"
    );

    // --embedded records here, and says so.
    let run = run_profctl(
        [
            "--socket",
            &socket,
            "record",
            "--embedded",
            "--pid",
            &pid,
            "--freq",
            FREQ,
            "--duration",
            "1",
            "--folded",
            dir.path().join("embedded.folded").to_str().unwrap(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    run.assert_success("record --embedded");
    assert!(
        run.stderr.contains(", embedded") && !run.stderr.contains("via profilerd"),
        "{}",
        run.stderr
    );
    // No daemon at the socket named: embedded, with a note.
    let run = run_profctl(
        [
            "--socket",
            dir.path().join("none.sock").to_str().unwrap(),
            "record",
            "--pid",
            &pid,
            "--duration",
            "0.5",
            "--folded",
            dir.path().join("absent.folded").to_str().unwrap(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    run.assert_success("record --pid with no daemon");
    assert!(
        run.stderr.contains("does not answer") && run.stderr.contains(", embedded"),
        "{}",
        run.stderr
    );

    // A real user records their own process through the daemon, without kernel frames, and
    // is refused root's.
    if id(&["-u"]) == Some(0) {
        let (uid, gid) = ensure_test_user();
        let user_dir = dir.path().join("user");
        fs::create_dir(&user_dir).unwrap();
        std::os::unix::fs::chown(&user_dir, Some(uid), Some(gid)).unwrap();
        let user_measured = user_dir.join("measured.txt");
        let user_split = start_split(
            as_user(uid, gid, &w.split, &user_dir),
            &user_measured,
            "split (user)",
        );
        let profctl_as_user = |args: &[&str]| {
            let mut cmd = as_user(uid, gid, profctl(), &user_dir);
            cmd.args(["--socket", &socket]).args(args);
            Spawned::spawn(cmd, "profctl (user)").wait_or_panic(Duration::from_secs(60))
        };
        let user_pid = user_split.pid().to_string();
        let run = profctl_as_user(&[
            "record",
            "--pid",
            &user_pid,
            "--freq",
            FREQ,
            "--duration",
            "2",
            "--folded",
            "own.folded",
            "-o",
            "own.pb.gz",
        ]);
        run.assert_success("the user records their own process through profilerd");
        assert!(
            run.stderr.contains("via profilerd") && run.stderr.contains("user space only"),
            "{}",
            run.stderr
        );
        let own = read_folded(&user_dir.join("own.folded"));
        assert_names(&own, "split", &HOT);
        // Kernel frames as the profile marks them: split.c's flush_thread is a user
        // function that the kernel has a function of the same name as.
        let kernel = kernel_frames_in(&user_dir.join("own.pb.gz"));
        assert!(
            kernel.is_empty(),
            "the user's recording has kernel frames: {kernel:?}"
        );
        let run = profctl_as_user(&[
            "record",
            "--pid",
            &pid,
            "--duration",
            "1",
            "--folded",
            "root.folded",
        ]);
        assert!(
            !run.status.success() && run.stderr.contains("not yours"),
            "recording root's process as a user was not refused ({}):\n{}",
            run.status,
            run.stderr
        );
        assert!(!user_dir.join("root.folded").exists());
        drop(user_split);
    }
    drop(split);

    // Descendants: forker burns in parent_hot, then runs burner as its child.
    let t0 = unix_now();
    let mut forker = Command::new(&w.forker);
    forker.arg(&w.burner).arg("1").arg("1");
    let mut forker = Spawned::spawn(forker, "forker");
    let forker_pid = forker.pid().to_string();
    forker.wait_or_panic(Duration::from_secs(60));
    let t1 = unix_now();
    daemon.wait_slices_through(t1);
    let range = (t0 - 0.5, t1 + 0.5);
    let (_, own) = flamegraph(
        &daemon.socket,
        range,
        &["--pid", &forker_pid],
        &dir.path().join("forker.folded"),
    );
    let (run, tree) = flamegraph(
        &daemon.socket,
        range,
        &["--pid", &forker_pid, "--descendants"],
        &dir.path().join("tree.folded"),
    );
    assert!(comm_total(&own, "forker") > 0, "{}", comm_summary(&own));
    assert_eq!(
        comm_total(&own, "burner"),
        0,
        "--pid alone selects the child too: {}",
        comm_summary(&own)
    );
    // What --pid selects, --descendants selects too.
    let total = |stacks: &[Stack]| stacks.iter().map(|s| s.count).sum::<u64>();
    assert!(
        total(&tree) >= total(&own),
        "own:\n{}\ntree:\n{}",
        top_lines(&own, 30),
        top_lines(&tree, 30)
    );
    assert!(
        comm_total(&tree, "burner") > 100,
        "--descendants misses the child (1 s of CPU at {FREQ} Hz): {}\n{}",
        comm_summary(&tree),
        run.stderr
    );
    // Besides forker and burner, only the moments between a fork and its exec (named after
    // the parent's thread, or by pid): a few samples.
    let others: u64 = tree
        .iter()
        .filter(|s| s.comm != "forker" && s.comm != "burner")
        .map(|s| s.count)
        .sum();
    assert!(others <= 5, "{}", comm_summary(&tree));
    daemon.stop();
}

/// A free TCP port on loopback (bound then released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` on the scrape listener with an optional bearer token: (status, body).
pub(crate) fn scrape_get(port: u16, path: &str, token: Option<&str>) -> (u16, Vec<u8>) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(scaled(Duration::from_secs(60))))
        .unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n"
    )
    .unwrap();
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).unwrap();
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&bytes[..end]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, bytes[end + 4..].to_vec())
}

/// A 5-minute profile asked of the scrape listener on `port` (with the token), its answer
/// not read: the stream, non-blocking.
fn long_profile(port: u16) -> std::net::TcpStream {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /debug/pprof/profile?seconds=300 HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer s3cret-token\r\n\r\n"
    )
    .unwrap();
    s.set_nonblocking(true).unwrap();
    s
}

/// `go tool pprof -top -cum -sample_index=samples URL`: (cum samples by function, output).
fn go_pprof_top(url: &str, home: &Path) -> (BTreeMap<String, u64>, String) {
    let out = Command::new("go")
        // The answer comes once the slices covering the window are named, a slice and its
        // close grace after the window: more than pprof waits by default for 2 s (3 s).
        .args([
            "tool",
            "pprof",
            "-timeout",
            "60",
            "-top",
            "-cum",
            "-sample_index=samples",
            url,
        ])
        .env("HOME", home)
        .env("PPROF_TMPDIR", home)
        .env("GOFLAGS", "-mod=mod")
        .output()
        .expect("run go tool pprof (install golang-go)");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "go tool pprof failed:\n{text}");
    let mut cum = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 6 && f[1].ends_with('%') && f[4].ends_with('%') {
            if let Ok(n) = f[3].parse::<u64>() {
                cum.insert(f[5..].join(" "), n);
            }
        }
    }
    (cum, text)
}

#[test]
fn daemon_scrape_with_go_tool_pprof_token_and_two_at_once() {
    if Command::new("go").arg("version").output().is_err() {
        panic!("go is missing: install golang-go (scripts/test does)");
    }
    // Shared: the shares are the test's own pid's, against what it measured over the same
    // time, and the timed pair of scrapes selects that pid too (naming other tests' processes
    // would not be this test's cost).
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    let port = free_port();
    let config = Daemon::write_config(
        dir.path(),
        &format!("\n[scrape]\nlisten = \"127.0.0.1:{port}\"\nallow_unauthenticated = true\n"),
    );
    let daemon = Daemon::start(&config);
    let measured_path = dir.path().join("measured.txt");
    let split = start_split(Command::new(&w.split), &measured_path, "split");
    let before = read_report(&measured_path);
    let url = format!(
        "http://127.0.0.1:{port}/debug/pprof/profile?seconds=2&pid={}",
        split.pid()
    );
    let (cum, text) = go_pprof_top(&url, dir.path());
    let measured = measured_since(&before, &measured_path);
    let total: u64 = HOT.iter().map(|f| cum.get(*f).copied().unwrap_or(0)).sum();
    let measured_total: u64 = HOT.iter().map(|f| measured[*f]).sum();
    // Two seconds of a busy thread at 999 Hz: about 2000 samples (less when the CPUs are
    // shared); a few hundred at least.
    assert!(
        total > 300,
        "too few samples in the scrape ({total}):\n{text}"
    );
    for f in HOT {
        let profiled = 100.0 * cum.get(f).copied().unwrap_or(0) as f64 / total.max(1) as f64;
        let m = 100.0 * measured[f] as f64 / measured_total as f64;
        // Fewer samples when the CPUs are shared: the tolerance widens with the sampling error.
        let tolerance = share_tolerance(SHARE_TOLERANCE_POINTS, m, total);
        assert!(
            (profiled - m).abs() <= tolerance,
            "{f}: measured {m:.1}%, scraped {profiled:.1}% on {total} samples (tolerance \
             {tolerance:.1} points)\n{text}"
        );
    }

    // Two scrapes of the process at once both succeed (from the one stream).
    let pair = format!("/debug/pprof/profile?seconds=2&pid={}", split.pid());
    let started = std::time::Instant::now();
    let both: Vec<(u16, Vec<u8>)> = thread::scope(|s| {
        let a = s.spawn(|| scrape_get(port, &pair, None));
        let b = s.spawn(|| scrape_get(port, &pair, None));
        vec![a.join().unwrap(), b.join().unwrap()]
    });
    for (status, body) in &both {
        assert_eq!(*status, 200, "{}", String::from_utf8_lossy(body));
        assert_eq!(&body[..2], b"\x1f\x8b", "not gzip");
    }
    // At once: their 2-s windows (each profile's time) overlap, and together they took less
    // than one after the other would (two windows and their naming: 15 s, scaled).
    let starts: Vec<f64> = both
        .iter()
        .map(|(_, body)| pprof::decode(body).expect("a pprof profile").time_nanos as f64 / 1e9)
        .collect();
    assert!(
        (starts[0] - starts[1]).abs() < 1.0,
        "the two scrapes' windows start at {starts:?}: one after the other"
    );
    assert!(
        started.elapsed() < scaled(Duration::from_secs(15)),
        "the two scrapes ran one after the other ({:.1?})",
        started.elapsed()
    );
    // The control API is not served there.
    assert_eq!(scrape_get(port, "/v1/status", None).0, 404);
    assert_eq!(scrape_get(port, "/v1/folded?since=-60", None).0, 404);
    // past=1 answers from history at once, and go tool pprof reads it.
    let (past, text) = go_pprof_top(
        &format!("http://127.0.0.1:{port}/debug/pprof/profile?seconds=3&past=1&comm=split"),
        dir.path(),
    );
    assert!(past.get("hot_a").copied().unwrap_or(0) > 0, "{text}");
    drop(split);
    daemon.stop();

    // With a token: none or a wrong one gets 401; the right one a profile.
    let token_file = dir.path().join("token");
    fs::write(&token_file, "s3cret-token\n").unwrap();
    let config = Daemon::write_config(
        dir.path(),
        &format!(
            "\n[scrape]\nlisten = \"127.0.0.1:{port}\"\ntoken_file = \"{}\"\n",
            token_file.display()
        ),
    );
    let daemon = Daemon::start(&config);
    let path = "/debug/pprof/profile?seconds=1&past=1";
    assert_eq!(scrape_get(port, path, None).0, 401);
    assert_eq!(scrape_get(port, path, Some("s3cret-tokem")).0, 401);
    assert_eq!(scrape_get(port, "/metrics", None).0, 401);
    // A Host that is a DNS name (a page rebinding it to this address) is refused, token or not.
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.0\r\nHost: evil.example:{port}\r\nAuthorization: Bearer s3cret-token\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.0 403"), "{answer}");
    let (status, body) = scrape_get(port, path, Some("s3cret-token"));
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    // A scrape waits out its window holding no place (scrape.max_concurrent counts merges,
    // not waits): with four 5-minute profiles waiting, another is answered; once their
    // clients are gone, so is the next.
    let held: Vec<std::net::TcpStream> = (0..4).map(|_| long_profile(port)).collect();
    let (status, body) = scrape_get(port, path, Some("s3cret-token"));
    assert_eq!(
        status,
        200,
        "four waiting profiles held the places: {}",
        String::from_utf8_lossy(&body)
    );
    drop(held);
    wait_for(
        "room for another once the clients went away (long before their 5 minutes)",
        Duration::from_secs(10),
        || match scrape_get(port, path, Some("s3cret-token")) {
            (200, _) => Ok(()),
            (status, body) => Err(format!("{status}: {}", String::from_utf8_lossy(&body))),
        },
    );
    let (status, body) = scrape_get(port, "/metrics", Some("s3cret-token"));
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains("profilerd_samples_total"));
    daemon.stop();
}
