//! profilerd under hostile local users, round 3 (issue 35), each attack played by a real
//! unprivileged user against a real daemon under the unit's capabilities: slow readers of
//! large answers (what their unsent answers hold, and that they are closed), scrapes that wait
//! out their window holding no place, and parameters at the edges of what a route takes.

use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use crate::common::*;
use crate::daemon::{number_in, unix_now, Daemon, BUDGET_OFF};
use crate::daemon_limits::{is_root, shared_scratch, User, OTHER_USER};
use crate::daemon_ops::write_ops_config;
use crate::daemon_serve::{free_port, scrape_get};

/// The slow reader: on the socket `argv[1]`, opens `argv[3]` connections one after another,
/// each asking `GET argv[2]` and reading only the answer's head (its status and length), with
/// a small receive buffer, then reading nothing more. Writes the status codes to `argv[4]`
/// once all are open; when the file `argv[5]` appears, reads what each 200 connection still
/// gives until it is closed, and writes `RECEIVED LENGTH` per such connection to `argv[6]`.
const SLOW_READERS: &str = r#"
import os, socket, sys, time
path, target, n, codes_file, go_file, result_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
held = []
codes = []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(path)
    s.settimeout(120)
    s.sendall(("GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n" % target).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    lines = head.decode(errors="replace").split("\r\n")
    code = lines[0].split()[1] if lines[0] else "none"
    length = 0
    for line in lines[1:]:
        if line.lower().startswith("content-length:"):
            length = int(line.split(":")[1])
    codes.append(code)
    held.append((s, code, length))
def publish(name, text):
    open(name + ".tmp", "w").write(text)
    os.rename(name + ".tmp", name)
publish(codes_file, " ".join(codes))
while not os.path.exists(go_file):
    time.sleep(0.05)
out = []
for s, code, length in held:
    if code != "200":
        continue
    got = 0
    try:
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
    except socket.timeout:
        pass
    out.append("%d %d" % (got, length))
publish(result_file, "\n".join(out))
"#;

/// `GET argv[2]` on the socket `argv[1]`, timed: prints the status code and the seconds from
/// connecting to the last byte of the answer.
const TIMED_GET: &str = r#"
import socket, sys, time
t0 = time.monotonic()
s = socket.socket(socket.AF_UNIX)
s.settimeout(60)
s.connect(sys.argv[1])
s.sendall(("GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n" % sys.argv[2]).encode())
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
print(data.split(b" ")[1].decode() if data else "none", time.monotonic() - t0)
if data and not data.startswith(b"HTTP/1.0 200") and not data.startswith(b"HTTP/1.1 200"):
    sys.stderr.write(data[-400:].decode(errors="replace"))
"#;

/// The Python the test users run.
const PYTHON: &str = "/usr/bin/python3";

/// Characters in the long name of this file's longnames build: a recording of a few hundred
/// samples of it folds to tens of MB.
const LONG_NAME: usize = 2000;

/// A field of `/proc/PID/status`, in bytes.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    kb << 10
}

/// `GET path` on `socket` as root: the status code and the body's length.
fn get_length(socket: &Path, path: &str) -> (u16, usize) {
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(scaled(Duration::from_secs(120))))
        .unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: profilerd\r\n\r\n").unwrap();
    let mut bytes = Vec::new();
    s.read_to_end(&mut bytes).unwrap();
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an answer");
    let head = String::from_utf8_lossy(&bytes[..end]);
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (code, bytes.len() - end - 4)
}

/// The id in a recording's status.
fn recording_id(body: &str) -> u64 {
    body.split("\"id\":")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no id in {body}"))
}

/// A finished recording of `pid` by `user` whose folded answer is from 8 to 60 MiB: the
/// recording's id and its answer's size. Recorded again, longer or shorter, until it is.
fn large_recording(daemon: &Daemon, user: &User, pid: u32) -> (u64, usize) {
    let mut seconds = 2.0f64;
    let mut last = String::new();
    for _ in 0..5 {
        let (code, body) = user.http(
            &daemon.socket,
            "POST",
            "/v1/recordings",
            Some(&format!(
                "{{\"pid\":{pid},\"frequency\":49,\"duration\":{seconds:.2}}}"
            )),
        );
        assert_eq!(code, 201, "{body}");
        let id = recording_id(&body);
        let (code, body) = user.http(
            &daemon.socket,
            "GET",
            &format!("/v1/recordings/{id}?wait=60"),
            None,
        );
        assert!(code == 200 && body.contains("\"done\""), "{code} {body}");
        // Root (an admin) may fetch it too: its size, read whole.
        let (code, size) = get_length(&daemon.socket, &format!("/v1/recordings/{id}/folded"));
        last = format!("{seconds:.2} s: {code}, {size} bytes");
        match code {
            200 if (8 << 20..60 << 20).contains(&size) => return (id, size),
            200 => seconds *= (24u64 << 20) as f64 / size.max(1) as f64,
            413 => seconds /= 4.0,
            _ => panic!("{last}"),
        }
        seconds = seconds.clamp(0.05, 20.0);
    }
    panic!("no recording folded to 8-60 MiB; the last: {last}");
}

/// Acceptance of issue 35: one user opens as many slow readers as they may (16 connections),
/// one after another, each on the largest answer they can get (a recording's folded stacks,
/// 8-60 MiB), and reads nothing but its head. Their unsent answers hold one query slot, so
/// only the first is answered (the others 503); the daemon's resident memory grows by about
/// that one answer and stays under `budget.max_resident`; another user's query and
/// `/v1/status` answer within a second; and the stalled connection is closed once it has
/// accepted nothing for the write timeout (`api.idle_timeout`, 3 s here), its slot given back.
#[test]
fn daemon_slow_readers_hold_one_answer_and_are_closed_after_the_write_timeout() {
    assert!(
        is_root(),
        "run as root: the test plays two unprivileged users"
    );
    let _guard = sampling_shared_huge_stacks();
    let dir = shared_scratch();
    let user = User::new(TEST_USER, dir.path());
    let other = User::new(OTHER_USER, dir.path());
    let longnames = dir.path().join("longnames");
    compile_with(
        "longnames.c",
        &longnames,
        &["-O1", "-fno-omit-frame-pointer", "-pthread"],
        &[&format!("-DLONG_NAME=f{}", "x".repeat(LONG_NAME - 1))],
    );
    let config = dir.path().join("profilerd.toml");
    write_ops_config(
        &config,
        dir.path(),
        "frequency = 99\nslice = \"1s\"\n",
        &format!("idle_timeout = \"3s\"\n\n{BUDGET_OFF}"),
    );
    let daemon = Daemon::start(&config);
    let pid = daemon.process.pid();

    let mut deep = user.command(&longnames);
    deep.arg("2");
    let mut deep = Spawned::spawn(deep, "longnames (user)");
    let (id, size) = large_recording(&daemon, &user, deep.pid());
    deep.kill_tree();
    drop(deep);
    let target = format!("/v1/recordings/{id}/folded");
    // Once more, so that what rendering leaves in the heap is in the baseline.
    assert_eq!(get_length(&daemon.socket, &target), (200, size));
    let max_resident = daemon.number("budget_max_resident");
    let before = status_bytes(pid, "VmRSS:");

    // The slow readers.
    let codes_file = user.dir.join("codes");
    let go_file = user.dir.join("go");
    let result_file = user.dir.join("result");
    let mut readers = user.command(Path::new(PYTHON));
    readers.arg("-c").arg(SLOW_READERS).args([
        daemon.socket.to_str().unwrap(),
        &target,
        "16",
        codes_file.to_str().unwrap(),
        go_file.to_str().unwrap(),
        result_file.to_str().unwrap(),
    ]);
    let mut readers = Spawned::spawn(readers, "slow readers (user)");
    let codes = wait_for(
        "the slow readers' answers",
        Duration::from_secs(300),
        || {
            if let Some(run) = readers.wait_timeout(Duration::ZERO) {
                panic!("the slow readers ended early: {}", run.stderr);
            }
            fs::read_to_string(&codes_file).map_err(|e| e.to_string())
        },
    );
    let resident = status_bytes(pid, "VmRSS:");
    // Another user is answered at once, query and status.
    let timed = |path: &str| -> (String, f64, String) {
        let mut get = other.command(Path::new(PYTHON));
        get.arg("-c")
            .arg(TIMED_GET)
            .args([daemon.socket.to_str().unwrap(), path]);
        let run = Spawned::spawn(get, "timed get (other user)")
            .wait_or_panic(scaled(Duration::from_secs(60)));
        let (code, seconds) = run.stdout.trim().split_once(' ').unwrap_or(("none", "0"));
        (
            code.to_string(),
            seconds.parse().unwrap_or(f64::MAX),
            format!("{path}: {}", run.stderr),
        )
    };
    // Of written slices (the range ends before the newest one written), so that what is
    // timed is the daemon's answer, not the naming of a snapshot of the open slices.
    let newest = daemon.wait_status("a slice written", Duration::from_secs(60), |s| {
        number_in(s, "newest_slice_end_ns") > 0
    })["newest_slice_end_ns"]
        .parse::<f64>()
        .unwrap()
        / 1e9;
    let range = format!(
        "/v1/folded?since=%40{:.3}&until=%40{:.3}",
        newest - 20.0,
        newest.min(unix_now() - 2.0)
    );
    let (query_code, query_s, query_said) = timed(&range);
    let (status_code, status_s, _) = timed("/v1/status");

    let codes: Vec<&str> = codes.split_whitespace().collect();
    assert_eq!(codes.len(), 16, "{codes:?}");
    assert_eq!(
        codes.iter().filter(|c| **c == "200").count(),
        1,
        "unsent answers of one user held more than one of their query slots: {codes:?}"
    );
    assert!(
        codes.iter().all(|c| *c == "200" || *c == "503"),
        "{codes:?}"
    );
    let grown = resident.saturating_sub(before);
    assert!(
        grown < 3 * size as u64 + (32 << 20),
        "the daemon's resident memory grew by {} MB with one user's answers of {} MB unread ({} MB before)",
        grown >> 20,
        size >> 20,
        before >> 20
    );
    assert!(
        resident < max_resident,
        "resident {} MB, budget.max_resident {} MB",
        resident >> 20,
        max_resident >> 20
    );
    let second = scaled(Duration::from_secs(1)).as_secs_f64();
    assert!(
        query_code == "200" && query_s < second,
        "another user's query: {query_code} in {query_s:.2} s: {query_said}"
    );
    assert!(
        status_code == "200" && status_s < second,
        "another user's status: {status_code} in {status_s:.2} s"
    );

    // The stalled connection is closed after the write timeout, and its slot comes back.
    daemon.wait_status(
        "the slow reader's slot given back",
        Duration::from_secs(60),
        |s| s.get("queries_running").is_some_and(|v| v == "0"),
    );
    fs::write(&go_file, "").unwrap();
    let run = readers.wait_or_panic(scaled(Duration::from_secs(180)));
    let result = fs::read_to_string(&result_file).unwrap_or_else(|_| run.stderr.clone());
    let (got, length) = result
        .trim()
        .split_once(' ')
        .map(|(g, l)| (g.parse::<usize>().unwrap(), l.parse::<usize>().unwrap()))
        .unwrap_or_else(|| panic!("{result}"));
    assert_eq!(length, size);
    assert!(
        got < length,
        "the slow connection was not closed: it read all {length} bytes at the end"
    );
    let (code, body) = user.http(&daemon.socket, "GET", &target, None);
    assert_eq!(
        code,
        200,
        "the user's query once their reader was closed: {}",
        &body[..body.len().min(300)]
    );
    daemon.stop();
}

/// Scrapes wait out their window holding no place: with `scrape.max_concurrent = 1`, a scrape
/// of the latest second (`past=1`) is answered while another's 8-second window runs.
#[test]
fn daemon_scrape_windows_hold_no_place_while_they_wait() {
    let _guard = sampling_shared();
    let dir = scratch();
    let port = free_port();
    let config = Daemon::write_config(
        dir.path(),
        &format!(
            "\n[scrape]\nlisten = \"127.0.0.1:{port}\"\nallow_unauthenticated = true\nmax_concurrent = 1\n"
        ),
    );
    let daemon = Daemon::start(&config);
    let snapshots = daemon.number("open_snapshots");
    std::thread::scope(|s| {
        let window = s.spawn(|| scrape_get(port, "/debug/pprof/profile?seconds=8", None));
        // The window has begun once its start was named.
        daemon.wait_status("the window's start", Duration::from_secs(60), |st| {
            st.get("open_snapshots")
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|n| n > snapshots)
        });
        let (code, body) = scrape_get(port, "/debug/pprof/profile?seconds=1&past=1", None);
        assert_eq!(
            code,
            200,
            "a scrape while another's window runs: {}",
            String::from_utf8_lossy(&body)
        );
        let (code, _) = window.join().unwrap();
        assert_eq!(code, 200);
    });
    daemon.stop();
}

/// Times, durations and counts at the edges of what each route takes: each is refused with a
/// 400 naming the parameter (never a panic, a 500 or a wrap), and the daemon answers on.
#[test]
fn daemon_parameters_at_their_edges_are_refused_naming_them() {
    assert!(
        is_root(),
        "run as root: the test plays an unprivileged user"
    );
    let _guard = sampling_shared();
    let dir = shared_scratch();
    let user = User::new(TEST_USER, dir.path());
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);
    let me = std::process::id();
    for (method, path, body, names) in [
        // start + bucket past u64 nanoseconds.
        (
            "GET",
            "/v1/timeline?since=18446700000&until=1e20&bucket=3600",
            None,
            "until",
        ),
        ("GET", "/v1/timeline?bucket=1e30", None, "bucket"),
        (
            "GET",
            "/v1/timeline?top=99999999999999999999999",
            None,
            "top",
        ),
        ("GET", "/v1/folded?since=%40-1", None, "since"),
        ("GET", "/v1/folded?until=nan", None, "until"),
        ("GET", "/v1/pprof?pid=-1", None, "pid"),
        ("GET", "/v1/recordings/1?wait=x", None, "wait"),
        (
            "POST",
            "/v1/recordings",
            Some(format!("{{\"pid\":{me},\"duration\":1e300}}")),
            "duration",
        ),
        (
            "POST",
            "/v1/recordings",
            Some(format!("{{\"pid\":{me},\"frequency\":1e30}}")),
            "frequency",
        ),
        (
            "POST",
            "/v1/recordings",
            Some("{\"pid\":-5}".to_string()),
            "pid",
        ),
    ] {
        let (code, answer) = user.http(&daemon.socket, method, path, body.as_deref());
        assert!(
            code == 400 && answer.contains(names),
            "{method} {path} {body:?}: {code} {answer}"
        );
    }
    let (code, _) = user.http(&daemon.socket, "GET", "/v1/status", None);
    assert_eq!(code, 200, "the daemon stopped answering");
    daemon.stop();
}
