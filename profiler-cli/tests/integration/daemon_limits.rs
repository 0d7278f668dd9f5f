//! profilerd against local users who spend its resources, each played by a real unprivileged
//! user against a real daemon: held connections (capped per user, idle ones closed; another
//! user still answered), folded answers of deep stacks with long names, from the history and
//! from a recording (the daemon in a memory cgroup answers 413, and stays alive), recordings (a byte budget that
//! truncates, a slot per user and one kept for admins), query slots (held by slow history
//! queries until their work ends, one kept for admins), and a scrape listener without a token
//! refused.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::cgroup::{CpuCgroup, MemoryCgroup};
use crate::common::*;
use crate::daemon::{number_in, profilerd, unix_now, Daemon, BUDGET_OFF};
use crate::daemon_ops::write_ops_config;
use crate::daemon_serve::as_user;

/// The second user, for what one user must not take from another.
pub(crate) const OTHER_USER: &str = "profctl-test2";

/// The Python the test users run (root's may live under its home).
const PYTHON: &str = "/usr/bin/python3";

/// Holds `argv[2]` connections to the socket `argv[1]`, writes how many to `argv[3]`, then
/// sleeps.
const HOLD: &str = r#"
import socket, sys, time
held = []
for _ in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    held.append(s)
open(sys.argv[3] + ".tmp", "w").write(str(len(held)))
import os; os.rename(sys.argv[3] + ".tmp", sys.argv[3])
time.sleep(600)
"#;

/// `METHOD PATH [BODY]` on the socket `argv[1]`: prints the status line's code and the body.
/// The client waits up to 200 s for the answer (a throttled daemon's longest request timeout
/// is 100 s; a CI run saw a 60-s client give up before the answer came).
const HTTP: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(200)
s.connect(sys.argv[1])
body = sys.argv[4] if len(sys.argv) > 4 else ""
s.sendall(("%s %s HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (sys.argv[2], sys.argv[3], len(body), body)).encode())
data = b""
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
head, _, rest = data.partition(b"\r\n\r\n")
print(head.split()[1].decode() if head else "none")
print(rest.decode(errors="replace"))
"#;

/// Connects to the socket `argv[1]`, sends nothing, and prints `closed` when the daemon
/// closes the connection (within 60 s), `open` otherwise.
const IDLE: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(60)
try:
    print("closed" if s.recv(1) == b"" else "data")
except socket.timeout:
    print("open")
"#;

/// A test user with a directory of their own under `dir`.
pub(crate) struct User {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) dir: PathBuf,
}

impl User {
    pub(crate) fn new(name: &str, dir: &Path) -> User {
        let (uid, gid) = ensure_user(name);
        let home = dir.join(name);
        fs::create_dir(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
        User {
            uid,
            gid,
            dir: home,
        }
    }

    pub(crate) fn command(&self, program: &Path) -> Command {
        as_user(self.uid, self.gid, program, &self.dir)
    }

    fn python(&self, script: &str, args: &[&str]) -> Command {
        let mut c = self.command(Path::new(PYTHON));
        c.arg("-c").arg(script).args(args);
        c
    }

    /// `METHOD PATH [BODY]` on the API socket as this user: (status code, body).
    pub(crate) fn http(
        &self,
        socket: &Path,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, String) {
        let mut args = vec![socket.to_str().unwrap(), method, path];
        args.extend(body);
        let run = Spawned::spawn(self.python(HTTP, &args), "http (user)")
            .wait_or_panic(Duration::from_secs(90));
        let (code, body) = run.stdout.split_once('\n').unwrap_or(("none", ""));
        (code.trim().parse().unwrap_or(0), body.to_string())
    }

    fn profctl(&self, socket: &Path, args: &[&str]) -> Run {
        let mut cmd = self.command(profctl());
        cmd.arg("--socket").arg(socket).args(args);
        Spawned::spawn(cmd, "profctl (user)").wait_or_panic(Duration::from_secs(120))
    }
}

/// Only root can play other users.
pub(crate) fn is_root() -> bool {
    id(&["-u"]) == Some(0)
}

/// A scratch directory other users may enter.
pub(crate) fn shared_scratch() -> tempfile::TempDir {
    let dir = scratch();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Sockets `pid` holds open (its other descriptors, pinned binaries and perf events,
/// change with what runs).
fn socket_count(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

#[test]
fn daemon_connections_are_capped_per_user_and_idle_ones_closed() {
    assert!(
        is_root(),
        "run as root: the test plays two unprivileged users"
    );
    let _guard = sampling_shared();
    let dir = shared_scratch();
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);
    let pid = daemon.process.pid();
    let hog = User::new(TEST_USER, dir.path());
    let other = User::new(OTHER_USER, dir.path());
    let before = socket_count(pid);

    // One user opens 600 connections and holds them.
    let ready = hog.dir.join("held");
    let mut holder = Spawned::spawn(
        hog.python(
            HOLD,
            &[
                daemon.socket.to_str().unwrap(),
                "600",
                ready.to_str().unwrap(),
            ],
        ),
        "holder",
    );
    wait_for(
        "the holder's 600 connections",
        Duration::from_secs(60),
        || {
            assert!(
                holder.wait_timeout(Duration::ZERO).is_none(),
                "the holder ended early: {}",
                holder.stderr_now()
            );
            match ready.exists() {
                true => Ok(()),
                false => Err("not all connected".into()),
            }
        },
    );
    // Another user and root are still answered.
    let (code, body) = other.http(&daemon.socket, "GET", "/v1/status", None);
    assert_eq!(code, 200, "another user's status: {body}");
    // The cap per user (16 by default) holds, however many the user asked for.
    let held = socket_count(pid).saturating_sub(before);
    assert!(
        held <= 16 + 2,
        "the daemon holds {held} more sockets with 600 connections held by one user"
    );
    let status = daemon.status().expect("root's status");
    let refused = status
        .get("connections_refused")
        .cloned()
        .unwrap_or_default();
    assert!(
        refused.parse::<u64>().is_ok_and(|n| n >= 500),
        "connections_refused: {refused:?}"
    );
    holder.kill_tree();
    drop(holder);

    // An idle connection is closed (api.idle_timeout, 10 s by default).
    let run = Spawned::spawn(
        other.python(IDLE, &[daemon.socket.to_str().unwrap()]),
        "idle connection",
    )
    .wait_or_panic(Duration::from_secs(90));
    assert_eq!(run.stdout.trim(), "closed", "{}", run.stderr);
    daemon.stop();
}

/// Characters in longnames' function name.
const LONG_NAME: usize = 40_000;

/// longnames.c built into `dir`: stacks up to 120 deep through one function with a
/// [`LONG_NAME`]-character name, on threads renamed all the time (each folded line is up to
/// about 5 MB of text, and nearly every sample a line of its own; naming costs what one name
/// costs).
fn build_longnames(dir: &Path) -> PathBuf {
    let out = dir.join("longnames");
    let name = format!("-DLONG_NAME=f{}", "x".repeat(LONG_NAME - 1));
    compile_with(
        "longnames.c",
        &out,
        &["-O1", "-fno-omit-frame-pointer", "-pthread"],
        &[&name],
    );
    out
}

#[test]
fn daemon_folded_query_of_deep_long_names_stays_within_its_bound() {
    assert!(
        is_root(),
        "run as root: the test plays an unprivileged user"
    );
    let _guard = sampling_shared_huge_stacks();
    let dir = shared_scratch();
    let user = User::new(TEST_USER, dir.path());
    let longnames = build_longnames(dir.path());
    let config = dir.path().join("profilerd.toml");
    write_ops_config(
        &config,
        dir.path(),
        "frequency = 499\nslice = \"2s\"\n",
        &format!("max_response_bytes = \"16MiB\"\n\n{BUDGET_OFF}"),
    );
    let daemon = Daemon::start(&config);
    let cgroup = MemoryCgroup::new(512 << 20);
    cgroup.add(daemon.process.pid());

    let mut deep = user.command(&longnames);
    deep.arg("2");
    let mut deep = Spawned::spawn(deep, "longnames (user)");
    let t0 = unix_now();
    // The user records their own process meanwhile: its folded result has the same bound.
    // 6 s: beside a two-CPU hog, 3 s gave 16.6 MB, just under the 16 MiB.
    let (code, body) = user.http(
        &daemon.socket,
        "POST",
        "/v1/recordings",
        Some(&format!(
            "{{\"pid\":{},\"frequency\":99,\"duration\":6}}",
            deep.pid()
        )),
    );
    assert_eq!(code, 201, "{body}");
    let id: u64 = body
        .split("\"id\":")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no id in {body}"));
    let (code, body) = user.http(
        &daemon.socket,
        "GET",
        &format!("/v1/recordings/{id}?wait=60"),
        None,
    );
    assert!(code == 200 && body.contains("\"done\""), "{code} {body}");
    let (code, body) = user.http(
        &daemon.socket,
        "GET",
        &format!("/v1/recordings/{id}/folded"),
        None,
    );
    assert!(
        code == 413 && body.contains("larger than"),
        "the recording's folded stacks were not refused as too large: {code}, {} bytes",
        body.len()
    );
    // Its history too: the workload runs until the slices through its first 3 s are written.
    daemon.wait_slices_through(t0 + 3.0);
    deep.kill_tree();
    drop(deep);
    // The user's own query over those seconds: refused as too large, at once, by a daemon
    // that stays alive within its memory.
    let since = format!("@{:.3}", t0 - 1.0);
    let run = user.profctl(
        &daemon.socket,
        &["flamegraph", "--since", &since, "--folded", "deep.folded"],
    );
    assert!(
        !run.status.success() && run.stderr.contains("larger than"),
        "the query of deep stacks with long names was not refused as too large ({}):\n{}",
        run.status,
        run.stderr
    );
    assert_eq!(cgroup.oom_kills(), 0, "the daemon's cgroup saw an OOM kill");
    assert!(daemon.status().is_some(), "the daemon no longer answers");
    // What the bound admits is still answered: one process, a short range.
    let run = user.profctl(
        &daemon.socket,
        &[
            "flamegraph",
            "--since",
            "@1",
            "--until",
            "@2",
            "--folded",
            "none.folded",
        ],
    );
    assert!(!run.stderr.contains("larger than"), "{}", run.stderr);
    daemon.stop();
}

#[test]
fn daemon_recordings_have_a_byte_budget_and_a_slot_per_user() {
    assert!(
        is_root(),
        "run as root: the test plays two unprivileged users"
    );
    let _guard = sampling_shared();
    let w = workloads();
    let dir = shared_scratch();
    let config = Daemon::write_config(dir.path(), "[recordings]\nmax_bytes = \"4KiB\"\n");
    let daemon = Daemon::start(&config);
    let user = User::new(TEST_USER, dir.path());
    let other = User::new(OTHER_USER, dir.path());
    let mut own = user.command(&w.burner);
    own.arg("600");
    let own = Spawned::spawn(own, "burner (user)");
    let mut others = other.command(&w.burner);
    others.arg("600");
    let others = Spawned::spawn(others, "burner (other user)");

    // A recording past its byte budget (a few windows of one process here) stops early, says
    // so, and keeps what it holds.
    let run = user.profctl(
        &daemon.socket,
        &[
            "record",
            "--pid",
            &own.pid().to_string(),
            "--freq",
            "4999",
            "--duration",
            "60",
            "--folded",
            "own.folded",
        ],
    );
    run.assert_success("a recording past its byte budget");
    assert!(
        run.stderr.contains("truncated") && run.stderr.contains("via profilerd"),
        "{}",
        run.stderr
    );
    assert!(
        !read_folded(&user.dir.join("own.folded")).is_empty(),
        "the truncated recording kept nothing"
    );

    // One running recording per user: the same user's second is refused; another user's
    // and root's are not.
    let body = |pid: u32| format!("{{\"pid\":{pid},\"duration\":30}}");
    let (code, first) = user.http(
        &daemon.socket,
        "POST",
        "/v1/recordings",
        Some(&body(own.pid())),
    );
    assert_eq!(code, 201, "{first}");
    let (code, second) = user.http(
        &daemon.socket,
        "POST",
        "/v1/recordings",
        Some(&body(own.pid())),
    );
    assert!(
        code == 429 && second.contains("recordings.max_per_user"),
        "{code} {second}"
    );
    let (code, theirs) = other.http(
        &daemon.socket,
        "POST",
        "/v1/recordings",
        Some(&body(others.pid())),
    );
    assert_eq!(code, 201, "another user's recording: {theirs}");
    let run = run_profctl(
        [
            "--socket",
            daemon.socket.to_str().unwrap(),
            "record",
            "--pid",
            &own.pid().to_string(),
            "--duration",
            "0.5",
            "--folded",
            dir.path().join("root.folded").to_str().unwrap(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    run.assert_success("root records while users hold their slots");
    assert!(run.stderr.contains("via profilerd"), "{}", run.stderr);
    drop(own);
    drop(others);
    daemon.stop();
}

/// Query slots end to end (`api.max_concurrent_queries` 3, `api.max_queries_per_user` 2 here;
/// one slot kept for admins): a user holding both their slots with slow history queries (the
/// daemon throttled to a few percent of a CPU in a cgroup) is refused a third with the
/// daemon's message while root is answered; when one client goes away its slot comes back
/// once the cancelled work stops, the other's is held until its work ends.
#[test]
fn daemon_query_slots_are_held_by_the_work_and_one_is_kept_for_root() {
    assert!(
        is_root(),
        "run as root: the test plays an unprivileged user"
    );
    let _guard = sampling_shared_huge_stacks();
    let dir = shared_scratch();
    let user = User::new(TEST_USER, dir.path());
    let longnames = build_longnames(dir.path());
    let config = dir.path().join("profilerd.toml");
    write_ops_config(
        &config,
        dir.path(),
        "frequency = 499\nslice = \"1s\"\n",
        // The second query reads throttled for as long as the steps before take on a busy
        // machine: the longest request timeout (100 s) keeps its answer a 200 (the timeout
        // is not what is tested here; a CI run saw the default 30 s run out).
        &format!("max_concurrent_queries = 3\nmax_queries_per_user = 2\nrequest_timeout = \"100s\"\n\n{BUDGET_OFF}"),
    );
    let cgroup = CpuCgroup::new();
    let daemon = Daemon::start(&config);
    cgroup.add(daemon.process.pid());
    // The start-up's naming of every process running takes seconds in a debug build beside
    // another test; slices closed meanwhile may be dropped (a CI run waited 30 s in vain for
    // the slice through the workload's sixth second). The history is read after it.
    daemon.wait_start_up_named();
    // History to read: deep stacks of threads renamed all the time, 6 s of them (the
    // workload runs until the slices through them are written).
    let t0 = unix_now();
    let mut deep = user.command(&longnames);
    deep.arg("2");
    let mut deep = Spawned::spawn(deep, "longnames (user)");
    daemon.wait_slices_through(t0 + 6.0);
    deep.kill_tree();
    let t1 = unix_now();
    daemon.wait_slices_through(t1);
    // A query of those seconds that folds nothing (no such command) but reads every slice.
    let slow = format!("/v1/folded?since={t0:.3}&until={t1:.3}&comm=nothing-of-this-name");
    cgroup.limit(Some(2));
    let socket = daemon.socket.to_str().unwrap();
    let mut first = Spawned::spawn(user.python(HTTP, &[socket, "GET", &slow]), "query 1");
    let mut second = Spawned::spawn(user.python(HTTP, &[socket, "GET", &slow]), "query 2");
    daemon.wait_status("the user's two queries run", Duration::from_secs(30), |s| {
        number_in(s, "queries_running") == 2
    });

    // Both of the user's slots are taken: the third is refused, with the daemon's reason.
    let (code, body) = user.http(&daemon.socket, "GET", &slow, None);
    assert!(
        code == 503 && body.contains("api.max_queries_per_user"),
        "the user's third query: {code} {body}"
    );
    // The refusal took no slot. (Read through wait_status: the throttled daemon may take
    // longer than a status request's timeout to answer one.)
    daemon.wait_status("the refusal took no slot", Duration::from_secs(30), |s| {
        number_in(s, "queries_running") == 2 && number_in(s, "queries_refused") >= 1
    });
    // Root gets the slot kept for admins, answered though throttled: a range an hour before
    // the workload, which holds no slice, so that what is judged is the slot, not how fast
    // the throttled daemon reads.
    let small = format!(
        "/v1/folded?since={:.3}&until={:.3}&comm=nothing-of-this-name",
        t0 - 3600.0,
        t0 - 3599.0
    );
    let mut root = Command::new(PYTHON);
    root.arg("-c").arg(HTTP).args([socket, "GET", &small]);
    let run = Spawned::spawn(root, "query (root)").wait_or_panic(Duration::from_secs(90));
    assert!(
        run.stdout.starts_with("200"),
        "root's query while the user held their slots: {}",
        run.stdout
    );

    // The first client goes away: its work is cancelled at its next slice and the slot comes
    // back; the second query's slot is held until its work ends.
    first.kill_tree();
    drop(first);
    // The second's slot is held while its work runs; its work may also have ended by now
    // (throttled or not, a machine busy elsewhere gives no order), then its answer follows:
    // one slot held at most. That a slot is held until the blocking work ends, and no longer,
    // is unit-tested (`http::limits::tests`).
    daemon.wait_status(
        "the slot of the query whose client went away comes back",
        Duration::from_secs(30),
        |s| number_in(s, "queries_running") <= 1,
    );
    cgroup.limit(None);
    let run = second.wait_or_panic(Duration::from_secs(120));
    assert!(
        run.stdout.starts_with("200"),
        "the second query: {}",
        run.stdout.chars().take(300).collect::<String>()
    );
    daemon.wait_status(
        "every slot is free once the work ended",
        Duration::from_secs(10),
        |s| number_in(s, "queries_running") == 0,
    );
    let (code, body) = user.http(&daemon.socket, "GET", &slow, None);
    assert_eq!(
        code, 200,
        "the user's query once their slots are free: {body}"
    );
    daemon.stop();
}

#[test]
fn daemon_scrape_listener_without_a_token_is_refused_unless_allowed_on_loopback() {
    let dir = scratch();
    let check = |scrape: &str| {
        let config = Daemon::write_config(dir.path(), &format!("[scrape]\n{scrape}"));
        let out = Command::new(profilerd())
            .arg("--config")
            .arg(&config)
            .arg("--check-config")
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, err) = check("listen = \"127.0.0.1:6060\"\n");
    assert!(!ok && err.contains("scrape.token_file"), "{err}");
    let (ok, err) = check("listen = \"0.0.0.0:6060\"\nallow_unauthenticated = true\n");
    assert!(!ok && err.contains("loopback"), "{err}");
    let (ok, err) = check("listen = \"127.0.0.1:6060\"\nallow_unauthenticated = true\n");
    assert!(ok, "{err}");
    let out = Command::new(profilerd())
        .args([
            "--check-config",
            "--pprof-listen",
            "127.0.0.1:6060",
            "--config",
        ])
        .arg(Daemon::write_config(dir.path(), ""))
        .output()
        .unwrap();
    assert!(!out.status.success(), "--pprof-listen without a token");
}
