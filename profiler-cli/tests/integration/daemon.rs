//! profilerd end to end: the daemon on a temporary socket and state directory, the split
//! workload, and `profctl flamegraph --since` asked of it: shares against the workload's own
//! measurement; persistence across SIGTERM and restart (same counts, the open slice flushed);
//! a corrupt slice skipped and reported; access with a real unprivileged user.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::*;

/// The daemon binary: `PROFILERD_TEST_BIN`, else beside profctl (built by
/// `cargo test --workspace`, or `cargo build -p profiler-daemon`), refused when older than
/// its sources (cargo builds profctl for these tests, not profilerd: a daemon left from an
/// earlier build would be tested in silence).
pub(crate) fn profilerd() -> PathBuf {
    if let Some(p) = std::env::var_os("PROFILERD_TEST_BIN").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    static CHECKED: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let path = profctl().with_file_name("profilerd");
            let built = fs::metadata(&path).and_then(|m| m.modified());
            let Ok(built) = built else {
                panic!(
                    "{} is missing: build it with `cargo build -p profiler-daemon` (cargo test \
                     --workspace does)",
                    path.display()
                );
            };
            if let Some((source, changed)) = newest_daemon_source() {
                assert!(
                    changed <= built,
                    "{} is older than its source {}: build it with `cargo build -p \
                     profiler-daemon` (cargo test --workspace does)",
                    path.display(),
                    source.display()
                );
            }
            path
        })
        .clone()
}

/// The most recently changed source file of profilerd (its crate's and the libraries'
/// `src/` and manifests), and when.
fn newest_daemon_source() -> Option<(PathBuf, SystemTime)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    let mut dirs = vec![root.join("profiler-daemon")];
    dirs.extend(
        fs::read_dir(root.join("crates"))
            .ok()?
            .flatten()
            .map(|e| e.path()),
    );
    let mut newest: Option<(PathBuf, SystemTime)> = None;
    let mut note = |path: PathBuf| {
        if let Ok(changed) = fs::metadata(&path).and_then(|m| m.modified()) {
            if newest.as_ref().is_none_or(|(_, t)| changed > *t) {
                newest = Some((path, changed));
            }
        }
    };
    let mut pending: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        note(dir.join("Cargo.toml"));
        pending.push(dir.join("src"));
    }
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => pending.push(path),
                Ok(t) if t.is_file() => note(path),
                _ => {}
            }
        }
    }
    newest
}

pub(crate) fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The CPU budget out of the way: a debug build of the daemon costs more than the default
/// cap, and the tests judge shares at [`FREQ`] (daemon_ops tests the budget).
pub(crate) const BUDGET_OFF: &str = "[budget]\nmax_cpu_percent = 10000\n\n";

/// The unit's `CapabilityBoundingSet=` (systemd/profilerd.service), as names without the
/// `CAP_` prefix, lower case (what setpriv takes).
pub(crate) fn unit_capabilities() -> Vec<String> {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/profilerd.service");
    let text = fs::read_to_string(&unit).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .unwrap_or_else(|| panic!("no CapabilityBoundingSet= in {}", unit.display()));
    line.split_whitespace()
        .map(|c| {
            let name = c.strip_prefix("CAP_").unwrap_or_else(|| panic!("{c}"));
            name.to_ascii_lowercase()
        })
        .collect()
}

/// `program` run as the unit runs the daemon: root holding only the unit's bounding set (no
/// inheritable or ambient capabilities) under no_new_privs, so that the tests see what the
/// shipped unit allows, and the two cannot drift.
pub(crate) fn under_the_unit(program: &Path) -> Command {
    let bounding: Vec<String> = unit_capabilities()
        .iter()
        .map(|c| format!("+{c}"))
        .collect();
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--bounding-set=-all,{}", bounding.join(",")))
        .args([
            "--inh-caps=-all",
            "--ambient-caps=-all",
            "--no-new-privs",
            "--",
        ])
        .arg(program);
    cmd
}

/// A running profilerd with its own socket, state and cache directories under `dir`.
pub(crate) struct Daemon {
    pub(crate) process: Spawned,
    pub(crate) socket: PathBuf,
    pub(crate) config: PathBuf,
}

impl Daemon {
    pub(crate) fn write_config(dir: &Path, extra: &str) -> PathBuf {
        let config = dir.join("profilerd.toml");
        fs::write(
            &config,
            format!(
                "[sampling]\nfrequency = {FREQ}\nslice = \"1s\"\n\n[storage]\nstate_dir = \"{}\"\ncache_dir = \"{}\"\n\n[api]\nsocket = \"{}\"\n\n{BUDGET_OFF}{extra}",
                dir.join("state").display(),
                dir.join("cache").display(),
                dir.join("profilerd.sock").display()
            ),
        )
        .unwrap();
        config
    }

    pub(crate) fn start(config: &Path) -> Daemon {
        Daemon::start_with(config, &[])
    }

    pub(crate) fn start_with(config: &Path, env: &[(&str, &Path)]) -> Daemon {
        let mut cmd = under_the_unit(&profilerd());
        cmd.arg("--config").arg(config);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let process = Spawned::spawn(cmd, "profilerd");
        let text = fs::read_to_string(config).unwrap();
        let socket = text
            .lines()
            .find_map(|l| l.strip_prefix("socket = \""))
            .map(|s| PathBuf::from(s.trim_end_matches('"')))
            .unwrap();
        let mut daemon = Daemon {
            process,
            socket,
            config: config.to_path_buf(),
        };
        daemon.wait_sampling();
        daemon
    }

    /// Waits until the daemon answers and its drain loop runs.
    pub(crate) fn wait_sampling(&mut self) {
        let process = &mut self.process;
        let socket = &self.socket;
        wait_for("profilerd sampling", Duration::from_secs(30), || {
            if let Some(run) = process.wait_timeout(Duration::ZERO) {
                panic!(
                    "profilerd exited early ({})\n--- stderr ---\n{}",
                    run.status, run.stderr
                );
            }
            match status_of(socket) {
                Some(s) if s.get("sampling").is_some_and(|v| v == "true") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
    }

    /// `GET /v1/status` as this process's user, as `key → value` strings (`status_of`).
    pub(crate) fn status(&self) -> Option<BTreeMap<String, String>> {
        status_of(&self.socket)
    }

    pub(crate) fn number(&self, key: &str) -> u64 {
        let s = self.status().expect("status");
        s[key]
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("{key}: {:?}", s[key])) as u64
    }

    /// Waits until a slice ending at or after `t` (UNIX seconds) is on disk.
    pub(crate) fn wait_slices_through(&self, t: f64) {
        self.wait_status(
            &format!("a slice through {t:.3}"),
            Duration::from_secs(30),
            |s| number_in(s, "newest_slice_end_ns") as f64 >= t * 1e9,
        );
    }

    /// Waits until `done` holds of `/v1/status` (as this process's user), for at most
    /// `limit` (scaled); panics naming `what`, the last status seen and the end of the log.
    pub(crate) fn wait_status(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&BTreeMap<String, String>) -> bool,
    ) -> BTreeMap<String, String> {
        let limit = scaled(limit);
        let mut last = None;
        poll_until(limit, || {
            let status = self.status();
            let met = status.as_ref().is_some_and(&done);
            last = status;
            met.then(|| last.clone().unwrap())
        })
        .unwrap_or_else(|| {
            panic!(
                "{what}: not within {limit:.1?}\nlast status: {last:?}\n--- end of the log ---\n{}",
                self.log_tail(40)
            )
        })
    }

    /// The last `lines` lines of the daemon's log so far, for failure messages.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let log = self.process.stderr_now();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Waits until the start-up work has passed (the first naming after a start names every
    /// process running: seconds in a debug build): a slice that began after this call is
    /// written. Slices are named in the order they closed, so every slice queued before it,
    /// the start-up's included, is behind it. (Not `naming_backlog` 0: a debug build naming
    /// the builds of a shared machine at 4999 Hz may keep a queue for good.)
    pub(crate) fn wait_start_up_named(&self) {
        let called = unix_now();
        self.wait_status(
            "a slice begun after the start-up work written",
            Duration::from_secs(60),
            |s| {
                let slice = s
                    .get("slice_seconds")
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(1.0);
                number_in(s, "newest_slice_end_ns") as f64 >= (called + slice) * 1e9
            },
        );
    }

    /// A status field as text.
    pub(crate) fn text(&self, key: &str) -> String {
        self.status().expect("status")[key].clone()
    }

    /// A status field as a number with a fraction.
    pub(crate) fn float(&self, key: &str) -> f64 {
        let text = self.text(key);
        text.parse()
            .unwrap_or_else(|_| panic!("{key}: {text:?} is not a number"))
    }

    /// SIGTERM; the daemon must exit 0 within 30 s. Returns its stderr.
    pub(crate) fn stop(self) -> String {
        self.stop_within(Duration::from_secs(30))
    }

    /// SIGTERM; the daemon must exit 0 within `limit`. Returns its stderr.
    pub(crate) fn stop_within(mut self, limit: Duration) -> String {
        assert!(send_signal(self.process.pid(), "TERM"));
        let run = self.process.wait_or_panic(limit);
        assert!(
            run.status.success(),
            "profilerd exited with {} after SIGTERM\n{}",
            run.status,
            run.stderr
        );
        run.stderr
    }
}

/// `GET /v1/status` on `socket` as this process's user: its top-level fields as `key → value`
/// strings (a string as itself, anything else as its JSON text). Parsed as JSON: the nested
/// `uid_share_dropped` entries have keys of their own (`samples`, `stacks`) that must not
/// stand for the daemon's.
pub(crate) fn status_of(socket: &Path) -> Option<BTreeMap<String, String>> {
    let body = http_get(socket, "/v1/status")?;
    let fields: BTreeMap<String, serde_json::Value> = serde_json::from_str(&body).ok()?;
    Some(
        fields
            .into_iter()
            .map(|(k, v)| match v {
                serde_json::Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect(),
    )
}

/// A status field as a number (0 when missing or not a number).
pub(crate) fn number_in(status: &BTreeMap<String, String>, key: &str) -> u64 {
    status
        .get(key)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0) as u64
}

/// A minimal HTTP/1.0 GET over the Unix socket (the test's own client, not profctl's).
pub(crate) fn http_get(socket: &Path, path: &str) -> Option<String> {
    let mut s = std::os::unix::net::UnixStream::connect(socket).ok()?;
    s.set_read_timeout(Some(scaled(Duration::from_secs(10))))
        .ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: profilerd\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200").then(|| body.to_string())
}

/// `profctl --socket S flamegraph --since @A --until @B ARGS --folded OUT`, returning the
/// run and the stacks.
pub(crate) fn flamegraph(
    socket: &Path,
    range: (f64, f64),
    args: &[&str],
    out: &Path,
) -> (Run, Vec<Stack>) {
    let since = format!("@{:.3}", range.0);
    let until = format!("@{:.3}", range.1);
    let mut all: Vec<&str> = vec![
        "--socket",
        socket.to_str().unwrap(),
        "flamegraph",
        "--since",
        &since,
        "--until",
        &until,
        "--folded",
        out.to_str().unwrap(),
    ];
    all.extend_from_slice(args);
    let run = run_profctl(&all, out.parent().unwrap(), Duration::from_secs(60));
    run.assert_success(&format!("profctl {}", all.join(" ")));
    let stacks = read_folded(out);
    (run, stacks)
}

pub(crate) fn folded_map(stacks: &[Stack]) -> BTreeMap<String, u64> {
    stacks.iter().map(|s| (s.line(), s.count)).collect()
}

/// The pprof profile at `path` (a slice file, `profctl flamegraph -o X.pb.gz`, a recording's
/// `-o X.pb.gz`), decoded.
pub(crate) fn read_pprof(path: &Path) -> pprof::proto::Profile {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    pprof::decode(&bytes).unwrap_or_else(|e| panic!("{}: not pprof: {e}", path.display()))
}

/// The names of the kernel frames of the pprof profile at `path`, as the profile marks them
/// (never by their names: a user function may share one with the kernel, as split.c's
/// `flush_thread` does): a sample's innermost `kernel_frames` (its label) frames, and every
/// frame at a location in the `[kernel.kallsyms]` mapping. Sorted, each once.
pub(crate) fn kernel_frames_in(path: &Path) -> Vec<String> {
    let p = read_pprof(path);
    let text = |i: i64| p.string_table.get(i as usize).cloned().unwrap_or_default();
    let kernel_mappings: HashSet<u64> = p
        .mapping
        .iter()
        .filter(|m| text(m.filename) == "[kernel.kallsyms]")
        .map(|m| m.id)
        .collect();
    let function: BTreeMap<u64, String> = p.function.iter().map(|f| (f.id, text(f.name))).collect();
    let location: BTreeMap<u64, &pprof::proto::Location> =
        p.location.iter().map(|l| (l.id, l)).collect();
    let names = |id: &u64| -> Vec<String> {
        location[id]
            .line
            .iter()
            .map(|l| function.get(&l.function_id).cloned().unwrap_or_default())
            .collect()
    };
    let mut kernel: Vec<String> = Vec::new();
    for sample in &p.sample {
        let labelled = sample
            .label
            .iter()
            .find(|l| text(l.key) == "kernel_frames")
            .map_or(0, |l| l.num.max(0) as usize);
        // Locations are leaf first: the kernel's come first.
        for (i, id) in sample.location_id.iter().enumerate() {
            if i < labelled || kernel_mappings.contains(&location[id].mapping_id) {
                kernel.extend(names(id));
            }
        }
    }
    kernel.sort();
    kernel.dedup();
    kernel
}

/// Whether the slice file at `path` holds samples of process `pid`.
pub(crate) fn slice_holds_pid(path: &Path, pid: u32) -> bool {
    let p = read_pprof(path);
    let text = |i: i64| p.string_table.get(i as usize).map(String::as_str);
    p.sample.iter().any(|s| {
        s.label
            .iter()
            .any(|l| text(l.key) == Some("pid") && l.num == i64::from(pid))
    })
}

/// CPU time of `pid` (user + system, from `/proc/PID/stat`), seconds.
pub(crate) fn cpu_seconds(pid: u32) -> f64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    (f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()) as f64 / 100.0
}

#[test]
fn daemon_history_shares_persistence_and_corrupt_slices() {
    // Shared: every query selects the workload's pid, its shares are judged against what it
    // measured itself, and the rest compares the daemon's answers with each other (a busy
    // machine slows them and shifts nothing judged).
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);

    // End to end: the split workload's shares, from the history.
    let measured_path = dir.path().join("measured.txt");
    let t0 = unix_now();
    let mut split = Command::new(&w.split);
    split.arg("2.5").arg(&measured_path);
    let mut split = Spawned::spawn(split, "split");
    let pid = split.pid();
    let pid_arg = pid.to_string();
    let only_split: &[&str] = &["--pid", &pid_arg];
    split.wait_or_panic(Duration::from_secs(60));
    let t1 = unix_now();
    daemon.wait_slices_through(t1);
    let range = (t0 - 0.5, t1 + 0.5);
    let first = dir.path().join("first.folded");
    let (run, stacks) = flamegraph(&daemon.socket, range, only_split, &first);
    assert!(run.stderr.contains("via profilerd"), "{}", run.stderr);
    let measured = read_measured(&measured_path);
    assert_names(&stacks, "split", &HOT);
    assert_shares(&stacks, "split", &measured);
    let before = folded_map(&stacks);
    // Besides split, only the moment between its fork and its exec (named after the test's
    // thread): a few samples.
    let others: u64 = stacks
        .iter()
        .filter(|s| s.comm != "split")
        .map(|s| s.count)
        .sum();
    assert!(others <= 5, "{}", comm_summary(&stacks));

    // SIGTERM while a burner runs: the open slice is written before the daemon exits. The
    // slices closed before it are written first (naming keeps up), so that what is judged is
    // the open slice, not a backlog a busy machine left (at SIGTERM a backlog is named for
    // 2 s at most, then dropped and counted).
    let mut burner = Command::new(&w.burner);
    burner.arg("30");
    let burner_at = unix_now();
    let burner = Spawned::spawn(burner, "burner");
    daemon.wait_status(
        "the slices caught up with the present, the burner running",
        Duration::from_secs(60),
        |s| {
            let newest = number_in(s, "newest_slice_end_ns") as f64 / 1e9;
            // No backlog: the newest slice is as recent as a 1-s slice and its 2.1-s close
            // grace (docs/daemon.md) allow, with 0.4 s of naming.
            newest >= burner_at + 0.5 && newest >= unix_now() - 3.5
        },
    );
    let stopped_at = unix_now();
    let config_path = daemon.config.clone();
    let log = daemon.stop();
    drop(burner);
    assert!(log.contains("stopping"), "{log}");

    // Restart: the history is there, with the same counts.
    let daemon = Daemon::start(&config_path);
    let newest = daemon.number("newest_slice_end_ns") as f64 / 1e9;
    assert!(
        newest >= stopped_at - 0.2,
        "the slice open at SIGTERM ({stopped_at:.2}) was not written: the newest ends at {newest:.2}"
    );
    let again = dir.path().join("again.folded");
    let (_, stacks) = flamegraph(&daemon.socket, range, only_split, &again);
    assert_eq!(
        folded_map(&stacks),
        before,
        "the same query after a restart gives other counts"
    );

    // A truncated slice in the range: skipped, reported and counted; the rest is served.
    let slices = dir.path().join("state/slices");
    let in_range: Vec<(PathBuf, u64)> = fs::read_dir(&slices)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let (start, _) = name.strip_suffix(".pb.gz")?.split_once('-')?;
            let start: f64 = start.parse::<u64>().ok()? as f64 / 1e9;
            (start >= range.0 - 1.0 && start < range.1)
                .then(|| (e.path(), e.metadata().unwrap().len()))
        })
        .collect();
    // The largest of the slices holding split's samples: cutting it certainly takes some of
    // them away (the largest slice of the range need not hold any).
    let victim = in_range
        .iter()
        .filter(|(path, _)| slice_holds_pid(path, pid))
        .max_by_key(|(_, len)| *len)
        .cloned();
    let (victim, len) =
        victim.unwrap_or_else(|| panic!("no slice of the range holds split: {in_range:?}"));
    let bytes = fs::read(&victim).unwrap();
    fs::write(&victim, &bytes[..len as usize / 2]).unwrap();
    let third = dir.path().join("third.folded");
    let (run, stacks) = flamegraph(&daemon.socket, range, only_split, &third);
    assert!(
        run.stderr.contains("1 slices were skipped"),
        "the corrupt slice was not reported:\n{}",
        run.stderr
    );
    let total = |m: &BTreeMap<String, u64>| m.values().sum::<u64>();
    let after = folded_map(&stacks);
    assert!(
        total(&after) < total(&before) && total(&after) > 0,
        "before {} samples, after {}",
        total(&before),
        total(&after)
    );
    assert_eq!(daemon.number("corrupt_slices"), 1);
    let status = run_profctl(
        ["--socket", daemon.socket.to_str().unwrap(), "status"],
        dir.path(),
        Duration::from_secs(30),
    );
    status.assert_success("profctl status");
    assert!(
        status.stdout.contains("corrupt_slices: 1") && status.stdout.contains("event: "),
        "{}",
        status.stdout
    );
    let log = daemon.stop();
    assert!(
        log.contains("corrupt"),
        "the corrupt slice is not in the log:\n{log}"
    );
}

/// The user of [`daemon_access_users_see_only_their_processes_without_kernel_frames`].
const ACCESS_USER: &str = "profctl-access";

#[test]
fn daemon_access_users_see_only_their_processes_without_kernel_frames() {
    if id(&["-u"]) != Some(0) {
        eprintln!("skipped: needs root to create a user");
        return;
    }
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    // A user of this test alone: what the daemon holds for it is this test's processes (the
    // test user's, from tests beside it, can be whatever they are: stacks of 4 MB each).
    let (uid, gid) = ensure_user(ACCESS_USER);
    let user_dir = dir.path().join("user");
    fs::create_dir(&user_dir).unwrap();
    std::os::unix::fs::chown(&user_dir, Some(uid), Some(gid)).unwrap();
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);

    let as_user = |program: &Path| {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg("--")
            .arg(program);
        c.current_dir(&user_dir);
        c
    };
    // The user's split and root's burner, at the same time.
    let t0 = unix_now();
    let mut split = as_user(&w.split);
    split.arg("2");
    let mut split = Spawned::spawn(split, "split (user)");
    let mut burner = Command::new(&w.burner);
    burner.arg("2");
    let mut burner = Spawned::spawn(burner, "burner (root)");
    split.wait_or_panic(Duration::from_secs(60));
    burner.wait_or_panic(Duration::from_secs(60));
    let t1 = unix_now();
    daemon.wait_slices_through(t1);
    let range = (t0 - 0.5, t1 + 0.5);

    // Root sees both, with kernel frames (as the profile marks them).
    let root_pprof = dir.path().join("root.pb.gz");
    let (_, root_view) = flamegraph(
        &daemon.socket,
        range,
        &["-o", root_pprof.to_str().unwrap()],
        &dir.path().join("root.folded"),
    );
    assert!(
        comm_total(&root_view, "split") > 0,
        "{}",
        comm_summary(&root_view)
    );
    assert!(
        comm_total(&root_view, "burner") > 0,
        "{}",
        comm_summary(&root_view)
    );
    assert!(
        !kernel_frames_in(&root_pprof).is_empty(),
        "root's view has no kernel frame:\n{}",
        top_lines(&root_view, 20)
    );

    // The user sees their own split, not root's burner, and no kernel frame.
    let run_user = |args: &[&str], out: &str| -> (Run, Vec<Stack>) {
        let since = format!("@{:.3}", range.0);
        let until = format!("@{:.3}", range.1);
        let mut cmd = as_user(profctl());
        cmd.args(["--socket", daemon.socket.to_str().unwrap(), "flamegraph"])
            .args(["--since", &since, "--until", &until, "--folded", out])
            .args(args);
        let run = Spawned::spawn(cmd, "profctl (user)").wait_or_panic(Duration::from_secs(60));
        run.assert_success("profctl flamegraph as the test user");
        let stacks = read_folded(&user_dir.join(out));
        (run, stacks)
    };
    let (run, user_view) = run_user(&["-o", "user.pb.gz"], "user.folded");
    assert!(run.stderr.contains("user space only"), "{}", run.stderr);
    assert!(
        comm_total(&user_view, "split") > 0,
        "{}",
        comm_summary(&user_view)
    );
    assert_names(&user_view, "split", &["hot_a"]);
    assert_eq!(
        comm_total(&user_view, "burner"),
        0,
        "the user sees root's process:\n{}",
        comm_summary(&user_view)
    );
    let user_kernel = kernel_frames_in(&user_dir.join("user.pb.gz"));
    assert!(
        user_kernel.is_empty(),
        "the user sees kernel frames: {user_kernel:?}"
    );
    // Asking for root's processes by uid or command gives nothing.
    let (_, by_uid) = run_user(&["--uid", "0"], "uid0.folded");
    assert!(by_uid.is_empty(), "{}", top_lines(&by_uid, 10));
    let (_, by_comm) = run_user(&["--comm", "burner"], "burner.folded");
    assert!(by_comm.is_empty(), "{}", top_lines(&by_comm, 10));
    // Root sees the user's process, kernel frames included when it made any.
    let (_, root_split) = flamegraph(
        &daemon.socket,
        range,
        &["--uid", &uid.to_string()],
        &dir.path().join("root-user.folded"),
    );
    assert!(comm_total(&root_split, "split") >= comm_total(&user_view, "split"));
    daemon.stop();
}

#[test]
fn daemon_tells_systemd_ready_watchdog_and_stopping() {
    let _guard = sampling_shared();
    let dir = scratch();
    let config = Daemon::write_config(dir.path(), "");
    let notify_path = dir.path().join("notify.sock");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify.set_nonblocking(true).unwrap();
    let watchdog_usec = dir.path().join("2000000");
    let daemon = Daemon::start_with(
        &config,
        &[
            ("NOTIFY_SOCKET", notify_path.as_path()),
            // A path's last component as the value: Command::env takes OsStr.
            (
                "WATCHDOG_USEC",
                Path::new(watchdog_usec.file_name().unwrap()),
            ),
        ],
    );
    let mut seen: Vec<String> = Vec::new();
    let read_until = |want: &str, limit: Duration, seen: &mut Vec<String>| {
        wait_for(&format!("{want} from profilerd"), limit, || {
            seen.extend(notifications(&notify));
            if seen.iter().any(|l| l == want) {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        })
    };
    read_until("READY=1", Duration::from_secs(10), &mut seen);
    read_until("WATCHDOG=1", Duration::from_secs(5), &mut seen);
    let ready_at = seen.iter().position(|l| l == "READY=1").unwrap();
    let watchdog_at = seen.iter().position(|l| l == "WATCHDOG=1").unwrap();
    assert!(ready_at < watchdog_at, "{seen:?}");
    daemon.stop();
    read_until("STOPPING=1", Duration::from_secs(1), &mut seen);
}

/// The lines of every notification (sd_notify datagram) waiting on `socket`, which must be
/// non-blocking.
pub(crate) fn notifications(socket: &std::os::unix::net::UnixDatagram) -> Vec<String> {
    let mut lines = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf) {
        let text = String::from_utf8_lossy(&buf[..n]);
        lines.extend(text.lines().map(String::from));
    }
    lines
}

/// `profctl top` and `profctl diff` over ranges of the daemon's history: the inlined workload
/// runs 80 % hot_a, then 20 %; the first range's top function is hot_a, and the diff of the two
/// ranges colours hot_a blue (shrank) and inl_spin red (grew).
#[test]
fn daemon_ranges_for_top_and_diff() {
    // Which range answers (the workload splits its own CPU time 80/20, then 20/80), not shares
    // within points: beside other tests.
    let _guard = sampling_shared();
    let dir = scratch();
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);
    let inlined = crate::pprof_files::inlined();
    let run_split = |percent_a: &str| {
        let mut cmd = Command::new(inlined);
        cmd.args(["2", percent_a]);
        Spawned::spawn(cmd, "inlined").wait_or_panic(Duration::from_secs(60));
    };
    let t0 = unix_now();
    run_split("80");
    let t1 = unix_now();
    run_split("20");
    let t2 = unix_now();
    daemon.wait_slices_through(t2);
    let socket = daemon.socket.to_str().unwrap().to_string();
    let (since, until) = (format!("@{t0:.3}"), format!("@{t1:.3}"));
    let run = run_profctl(
        [
            "--socket", &socket, "top", "--since", &since, "--until", &until, "--comm", "inlined",
            "-n", "3",
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    run.assert_success("top --since");
    let first = run.stdout.lines().nth(1).unwrap_or_default().to_string();
    assert!(first.ends_with(" hot_a"), "{}", run.stdout);
    let svg = dir.path().join("diff.svg");
    let before = format!("@{t0:.3}..@{t1:.3}");
    let after = format!("@{t1:.3}..@{t2:.3}");
    let run = run_profctl(
        [
            "--socket",
            &socket,
            "diff",
            "--before",
            &before,
            "--after",
            &after,
            "--comm",
            "inlined",
            "-o",
            svg.to_str().unwrap(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    run.assert_success("diff --before --after");
    let text = fs::read_to_string(&svg).unwrap();
    let (r, _, b) = crate::pprof_files::fill_of(&text, "inl_spin");
    assert!(
        r == 255 && b < 255,
        "inl_spin grew: red, got rgb({r},_,{b})"
    );
    let (r, _, b) = crate::pprof_files::fill_of(&text, "hot_a");
    assert!(
        b == 255 && r < 255,
        "hot_a shrank: blue, got rgb({r},_,{b})"
    );
    daemon.stop();
}
