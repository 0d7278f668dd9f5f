//! Shared helpers for the end-to-end tests: building the C workloads,
//! running `profctl` with a time limit, parsing folded stacks, computing
//! per-function shares and asserting them with a readable message, and the
//! process-wide lock that keeps sampling-accuracy tests from running beside other sampling
//! tests (the test machine has only 2 CPUs).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

pub use crate::poll::{
    hold, hold_until, hold_until_elapsed, poll_until, scaled, time_scale, wait_for,
};

/// Sampling frequency used by every test.
pub const FREQ: &str = "999";
pub const FREQ_HZ: f64 = 999.0;
/// Allowed distance between measured and profiled shares, in percentage points.
pub const SHARE_TOLERANCE_POINTS: f64 = 5.0;
/// The functions of the split workload, in reporting order.
pub const HOT: [&str; 3] = ["hot_a", "hot_b", "hot_c"];

/// How many tests holding [`sampling_shared`] run at once. More would each get too little of
/// the test machine's 2 CPUs for their deadlines; fewer leave the CPUs idle while they wait
/// on a daemon's slices. `scripts/test` runs this binary with a thread per test
/// (`RUST_TEST_THREADS`): every test waits at the lock at once, and [`Turn`] orders them.
pub const SHARED_AT_ONCE: usize = 3;

/// What a test waits for at the sampling lock, in the order the lock serves waiting tests
/// (`scripts/test` starts every test of this binary at once, so the order is the lock's, not
/// the harness's): the shared tests first, the long ones among them before the rest, so that
/// no long test is left running with idle places beside it at the end; then the tests whose
/// stacks are megabytes, together; then the tests that run alone, one after another. A test
/// that cannot be served now never holds up a later kind that can (a shared test waiting for
/// megabyte-stack tests to end lets nothing else in).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Turn {
    /// [`sampling_shared_long`].
    LongShared = 0,
    /// [`sampling_shared`].
    Shared = 1,
    /// [`sampling_shared_huge_stacks`].
    HugeStacks = 2,
    /// [`sampling_lock`].
    Alone = 3,
}

const TURNS: [Turn; 4] = [
    Turn::LongShared,
    Turn::Shared,
    Turn::HugeStacks,
    Turn::Alone,
];

/// Who holds the sampling lock (one test alone, or up to [`SHARED_AT_ONCE`] shared tests of
/// one kind: megabyte stacks or not) and how many tests wait for each [`Turn`].
struct Holders {
    alone: bool,
    shared: usize,
    huge_stacks: bool,
    waiting: [usize; 4],
}

impl Holders {
    /// Whether a test waiting for `turn` could take the lock as it is held now.
    fn open_to(&self, turn: Turn) -> bool {
        let huge = turn == Turn::HugeStacks;
        match turn {
            Turn::Alone => !self.alone && self.shared == 0,
            _ => {
                !self.alone
                    && self.shared < SHARED_AT_ONCE
                    && (self.shared == 0 || self.huge_stacks == huge)
            }
        }
    }

    /// Whether a test waiting for `turn` takes the lock now: it is open to it, and to no test
    /// waiting for an earlier turn.
    fn serves(&self, turn: Turn) -> bool {
        self.open_to(turn)
            && TURNS[..turn as usize]
                .iter()
                .all(|&earlier| self.waiting[earlier as usize] == 0 || !self.open_to(earlier))
    }

    /// Takes the lock for `turn`.
    fn take(&mut self, turn: Turn) {
        if turn == Turn::Alone {
            self.alone = true;
        } else {
            self.shared += 1;
            self.huge_stacks = turn == Turn::HugeStacks;
        }
    }
}

static HOLDERS: Mutex<Holders> = Mutex::new(Holders {
    alone: false,
    shared: 0,
    huge_stacks: false,
    waiting: [0; 4],
});
static RELEASED: Condvar = Condvar::new();

/// Locks the holders, recovering from poisoning (a failed test must not fail the rest).
fn holders() -> MutexGuard<'static, Holders> {
    HOLDERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until the lock serves `turn`, then takes it.
fn acquire(turn: Turn) -> SamplingHold {
    let mut state = holders();
    state.waiting[turn as usize] += 1;
    while !state.serves(turn) {
        state = RELEASED.wait(state).unwrap_or_else(|e| e.into_inner());
    }
    state.waiting[turn as usize] -= 1;
    state.take(turn);
    drop(state);
    // A test of a later turn may be served now that this one no longer waits.
    RELEASED.notify_all();
    SamplingHold::taken(turn == Turn::Alone)
}

/// When the first test of this run took the sampling lock: the origin of the times file's
/// START column.
static FIRST_HOLD: OnceLock<Instant> = OnceLock::new();

/// A hold of the sampling lock, for the whole of one test. When `PROFCTL_TEST_TIMES` names a
/// file, its drop appends `KIND SECONDS TEST START` there (KIND `alone` or `shared`, SECONDS
/// how long the lock was held, START when it was taken, in seconds since the run's first
/// hold): how the integration binary's time is spent (README.md, "Tests").
pub struct SamplingHold {
    alone: bool,
    since: Instant,
}

impl SamplingHold {
    /// A hold taken now.
    fn taken(alone: bool) -> SamplingHold {
        let since = Instant::now();
        FIRST_HOLD.get_or_init(|| since);
        SamplingHold { alone, since }
    }
}

impl Drop for SamplingHold {
    fn drop(&mut self) {
        {
            let mut state = holders();
            if self.alone {
                state.alone = false;
            } else {
                state.shared -= 1;
            }
        }
        RELEASED.notify_all();
        let Some(path) = std::env::var_os("PROFCTL_TEST_TIMES") else {
            return;
        };
        let test = std::thread::current()
            .name()
            .unwrap_or("[unnamed]")
            .to_string();
        let first = *FIRST_HOLD.get_or_init(|| self.since);
        let line = format!(
            "{} {:.1} {test} {:.1}\n",
            if self.alone { "alone" } else { "shared" },
            self.since.elapsed().as_secs_f64(),
            self.since.duration_since(first).as_secs_f64()
        );
        // One write of one short line to a file opened for appending: lines from tests that
        // end together do not interleave.
        let written = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("PROFCTL_TEST_TIMES: cannot append to {path:?}: {e}");
        }
    }
}

/// Holds the sampling lock alone: take it for the whole of every test that judges sampling
/// accuracy against the machine's whole CPU or the daemon's own cost (shares of a whole-system
/// view, CPU budgets, memory bounds), so that no other sampling test runs beside it on the
/// test machine's 2 CPUs. It is served after every waiting shared test ([`Turn`]).
pub fn sampling_lock() -> SamplingHold {
    acquire(Turn::Alone)
}

/// Holds the sampling lock beside other such tests (at most [`SHARED_AT_ONCE`]): for a test
/// that samples (or starts a daemon) but judges nothing another test's load can move, such as
/// access rules, errors, limits, or shares measured against its own workload's CPU and
/// filtered to its own processes. It never runs beside a test holding [`sampling_lock`] or
/// [`sampling_shared_huge_stacks`].
pub fn sampling_shared() -> SamplingHold {
    acquire(Turn::Shared)
}

/// [`sampling_shared`] for a test that holds the lock for tens of seconds (waiting on a
/// daemon's slices or roll-ups): served before the other shared tests.
pub fn sampling_shared_long() -> SamplingHold {
    acquire(Turn::LongShared)
}

/// [`sampling_shared`] for a test whose workload makes stacks of megabytes: it runs beside
/// other such tests only (every daemon beside them would name those stacks too, and its
/// unfiltered answers would outgrow their bound).
pub fn sampling_shared_huge_stacks() -> SamplingHold {
    acquire(Turn::HugeStacks)
}

/// Path of the binary under test: the crate's `profctl`, unless the
/// environment variable `PROFCTL_TEST_BIN` names another build to test.
pub fn profctl() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("PROFCTL_TEST_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_profctl")),
    })
}

/// The workload binaries, built once per test run.
pub struct Workloads {
    pub dir: PathBuf,
    /// `split [--threads] [--rename] SECONDS|forever [OUTFILE]`
    pub split: PathBuf,
    /// `forker BURNER PARENT_SECONDS CHILD_SECONDS`
    pub forker: PathBuf,
    /// `burner CPU_SECONDS`
    pub burner: PathBuf,
    /// `waits split SECONDS OUTFILE [--libc] [--rename]` | `waits busy SECONDS OUTFILE RATE` |
    /// `waits lock SECONDS`
    pub waits: PathBuf,
}

const CFLAGS: &[&str] = &[
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
    "-fno-optimize-sibling-calls",
    "-Wall",
];

fn workload_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/workloads")
        .join(name)
}

/// Runs a tool, panicking with its stderr unless it succeeds; returns its stdout.
pub fn tool(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Compiles `src` (under tests/workloads) to `out` with `flags` then `extra`, via a temporary
/// name and an atomic rename so that concurrent runs of the suite never see a half-written
/// binary.
pub fn compile_with(src: &str, out: &Path, flags: &[&str], extra: &[&str]) {
    let src = workload_src(src);
    let tmp = out.with_extension(format!("{}.tmp", std::process::id()));
    let output = Command::new("cc")
        .args(flags)
        .args(extra)
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .output()
        .expect("failed to run cc (is a C compiler installed?)");
    assert!(
        output.status.success(),
        "compiling {} failed ({}):\n{}",
        src.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    fs::rename(&tmp, out).expect("rename compiled workload");
}

fn compile(src: &str, out: &Path, extra: &[&str]) {
    compile_with(src, out, CFLAGS, extra);
}

/// Builds (once per test run, into the target's tmp dir) and returns the workloads.
pub fn workloads() -> &'static Workloads {
    static BUILT: OnceLock<Workloads> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profctl-workloads");
        fs::create_dir_all(&dir).expect("create workload dir");
        let w = Workloads {
            split: dir.join("split"),
            forker: dir.join("forker"),
            burner: dir.join("burner"),
            waits: dir.join("waits"),
            dir,
        };
        compile("split.c", &w.split, &["-pthread"]);
        compile("forker.c", &w.forker, &[]);
        compile("burner.c", &w.burner, &[]);
        compile("waits.c", &w.waits, &["-pthread"]);
        w
    })
}

/// A fresh scratch directory for one test's outputs.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("profctl-test-")
        .tempdir()
        .expect("create scratch dir")
}

/// Result of one finished process.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    /// Panics with the command's output unless it exited with status 0.
    pub fn assert_success(&self, what: &str) {
        assert!(
            self.status.success(),
            "{what}: profctl exited with {} after {:.1?}\n--- stderr ---\n{}\n--- stdout ---\n{}",
            self.status,
            self.elapsed,
            self.stderr,
            self.stdout
        );
    }
}

/// Sends `signal` (e.g. "INT", "TERM", "KILL") to `pid` with kill(1).
pub fn send_signal(pid: u32, signal: &str) -> bool {
    signal_all(&[pid], signal)
}

/// Sends `signal` to every process of `pids` with one kill(1), which skips a process already
/// gone; whether every one was signalled.
fn signal_all(pids: &[u32], signal: &str) -> bool {
    if pids.is_empty() {
        return true;
    }
    Command::new("kill")
        .arg(format!("-{signal}"))
        .args(pids.iter().map(u32::to_string))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Pids of all live descendants of `pid` (children first), found via /proc.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = fs::read_dir("/proc") {
        for e in entries.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            // "pid (comm) state ppid ..." - comm may contain spaces/parens.
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
                parent_of.push((p, ppid));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(cur) = frontier.pop() {
        for &(p, pp) in &parent_of {
            if pp == cur && !out.contains(&p) {
                out.push(p);
                frontier.push(p);
            }
        }
    }
    out
}

/// A spawned process whose stdout/stderr go to unnamed temp files, killed
/// (with its descendants) on drop so that a failing test leaves no CPU
/// burner behind.
pub struct Spawned {
    pub child: Child,
    stdout: File,
    stderr: File,
    started: Instant,
    pub name: String,
    /// The run's own XDG_CACHE_HOME, removed with it.
    _cache: tempfile::TempDir,
}

impl Spawned {
    pub fn spawn(mut cmd: Command, name: &str) -> Spawned {
        let stdout = tempfile::tempfile().expect("tempfile");
        let stderr = tempfile::tempfile().expect("tempfile");
        // Each run gets its own cache directory: profctl keeps kernel symbols and frames of
        // earlier runs there, and a test must not be answered by another test's run.
        let cache = tempfile::tempdir().expect("cache dir");
        cmd.env("XDG_CACHE_HOME", cache.path());
        cmd.stdin(Stdio::null())
            .stdout(stdout.try_clone().unwrap())
            .stderr(stderr.try_clone().unwrap());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("failed to spawn {name}: {e}"));
        Spawned {
            child,
            stdout,
            stderr,
            started: Instant::now(),
            name: name.to_string(),
            _cache: cache,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` (not scaled); `None` if still running then.
    pub fn wait_timeout(&mut self, limit: Duration) -> Option<Run> {
        let status = poll_until(limit, || self.child.try_wait().expect("try_wait"))?;
        Some(Run {
            status,
            stdout: read_all(&mut self.stdout),
            stderr: read_all(&mut self.stderr),
            elapsed: self.started.elapsed(),
        })
    }

    /// Waits up to `limit` scaled by [`time_scale`], else kills everything and panics with
    /// the output so far.
    pub fn wait_or_panic(&mut self, limit: Duration) -> Run {
        let limit = scaled(limit);
        if let Some(run) = self.wait_timeout(limit) {
            return run;
        }
        let threads = threads_report(self.pid());
        self.kill_tree();
        let _ = self.child.wait();
        panic!(
            "{} did not finish within {limit:?}; killed it\n--- its threads then ---\n{threads}\n\
             --- stderr ---\n{}\n--- stdout ---\n{}",
            self.name,
            read_all(&mut self.stderr),
            read_all(&mut self.stdout)
        );
    }

    /// What the process wrote to stderr so far (read without moving the file offset the
    /// process writes at).
    pub fn stderr_now(&self) -> String {
        use std::os::unix::fs::FileExt;
        let mut bytes = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match self.stderr.read_at(&mut buf, bytes.len() as u64) {
                Ok(0) | Err(_) => break,
                Ok(n) => bytes.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// SIGKILLs the descendants, then the process itself. The process is stopped first, and
    /// each generation of descendants as it is found, until a listing finds no new one: a
    /// process that forks while the tree is listed (churn.c's deployer starts a service every
    /// 2 s) leaves no child behind, running on with the sampling lock's descriptor.
    pub fn kill_tree(&mut self) {
        let root = self.pid();
        send_signal(root, "STOP");
        let mut tree: Vec<u32> = Vec::new();
        // A stopped process forks no more: each round can only find children forked before
        // their parent stopped. Bounded all the same.
        for _ in 0..100 {
            let found: Vec<u32> = descendants(root)
                .into_iter()
                .filter(|d| !tree.contains(d))
                .collect();
            if found.is_empty() {
                break;
            }
            signal_all(&found, "STOP");
            tree.extend(found);
        }
        signal_all(&tree, "KILL");
        let _ = self.child.kill();
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill_tree();
            let _ = self.child.wait();
        }
    }
}

/// Where each thread of `pid` waits, for a process that did not finish: every thread's name
/// and kernel wait channel, then `gdb`'s backtraces when gdb is installed (bounded by a
/// minute: a debug build's symbols take gdb seconds to read).
fn threads_report(pid: u32) -> String {
    let mut out = String::new();
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            let read = |f: &str| fs::read_to_string(task.path().join(f)).unwrap_or_default();
            out += &format!(
                "{} {}: {}\n",
                task.file_name().to_string_lossy(),
                read("comm").trim(),
                read("wchan")
            );
        }
    }
    let gdb = Command::new("timeout")
        .args(["60", "gdb", "-batch", "-nx", "-p", &pid.to_string()])
        .args(["-ex", "thread apply all bt 25"])
        .stdin(Stdio::null())
        .output();
    match gdb {
        Ok(o) if o.status.success() => out += &String::from_utf8_lossy(&o.stdout),
        Ok(o) => out += &format!("(gdb: {}) {}", o.status, String::from_utf8_lossy(&o.stderr)),
        Err(e) => out += &format!("(no backtraces: timeout/gdb: {e})"),
    }
    out
}

fn read_all(f: &mut File) -> String {
    let mut s = String::new();
    let _ = f.seek(SeekFrom::Start(0));
    let mut bytes = Vec::new();
    let _ = f.read_to_end(&mut bytes);
    s.push_str(&String::from_utf8_lossy(&bytes));
    s
}

/// Runs `profctl ARGS` in `cwd`, failing the test if it takes longer than `limit`.
pub fn run_profctl<I, S>(args: I, cwd: &Path, limit: Duration) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(profctl());
    cmd.args(args).current_dir(cwd);
    Spawned::spawn(cmd, "profctl").wait_or_panic(limit)
}

/// CPU time of `pid` (user + system) from `/proc/PID/stat`, seconds; 0 once it is gone.
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / 100.0
}

/// Threads of `pid` (its `/proc/PID/task` entries); 0 once it is gone.
pub fn threads_of(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// Online CPUs, from `/sys/devices/system/cpu/online` (`0-1,3` form).
pub fn online_cpus() -> usize {
    let text = fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    text.trim()
        .split(',')
        .filter(|r| !r.is_empty())
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap_or(0) + 1 - a.parse::<usize>().unwrap_or(0),
            None => 1,
        })
        .sum::<usize>()
        .max(1)
}

/// Perf ring buffers `pid` has mapped (its `anon_inode:[perf_event]` mappings).
pub fn perf_rings_mapped(pid: u32) -> usize {
    fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.ends_with("anon_inode:[perf_event]"))
        .count()
}

/// Waits until `p` (a `profctl record`) has mapped a sample ring and a side-band ring per CPU:
/// its events are enabled right after, so what the test starts next is recorded. Panics with
/// its output if it exits first.
pub fn wait_recording(p: &mut Spawned) {
    let cpus = online_cpus();
    let name = p.name.clone();
    wait_for(
        &format!("{name} mapping its perf rings"),
        Duration::from_secs(30),
        || {
            if let Some(run) = p.wait_timeout(Duration::ZERO) {
                panic!(
                    "{name} exited before recording ({})\n--- stderr ---\n{}",
                    run.status, run.stderr
                );
            }
            match perf_rings_mapped(p.pid()) {
                n if n >= 2 * cpus => Ok(()),
                n => Err(format!("{n} perf rings mapped, {cpus} CPUs")),
            }
        },
    );
}

/// One line of folded output.
#[derive(Debug, Clone)]
pub struct Stack {
    pub comm: String,
    /// Outermost first, leaf last.
    pub frames: Vec<String>,
    pub count: u64,
}

impl Stack {
    pub fn has(&self, frame: &str) -> bool {
        self.frames.iter().any(|f| f == frame)
    }

    /// Whether `seq` occurs as contiguous frames, in this order.
    pub fn has_path(&self, seq: &[&str]) -> bool {
        self.frames
            .windows(seq.len())
            .any(|w| w.iter().zip(seq).all(|(a, b)| a == b))
    }

    pub fn line(&self) -> String {
        let mut s = self.comm.clone();
        for f in &self.frames {
            s.push(';');
            s.push_str(f);
        }
        format!("{s} {}", self.count)
    }
}

/// Parses folded stacks (`comm;outer;...;leaf COUNT` per line), panicking
/// with the offending line if one is malformed.
pub fn parse_folded(text: &str) -> Vec<Stack> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (stack, count) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("folded line {}: no count: {line:?}", i + 1));
        let count: u64 = count
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("folded line {}: bad count: {line:?}", i + 1));
        let mut parts = stack.split(';');
        let comm = parts.next().unwrap_or_default().to_string();
        assert!(
            !comm.is_empty(),
            "folded line {}: empty comm: {line:?}",
            i + 1
        );
        let frames: Vec<String> = parts.map(str::to_string).collect();
        assert!(
            !frames.is_empty(),
            "folded line {}: no frames: {line:?}",
            i + 1
        );
        out.push(Stack {
            comm,
            frames,
            count,
        });
    }
    out
}

/// Reads and parses a folded file (must exist and be well formed).
pub fn read_folded(path: &Path) -> Vec<Stack> {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read folded output {}: {e}", path.display()));
    parse_folded(&text)
}

/// Reads a workload measurement file: `name NS` per line.
pub fn read_measured(path: &Path) -> BTreeMap<String, u64> {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read workload measurement {}: {e}", path.display()));
    let mut m = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (k, v) = line
            .split_once(' ')
            .unwrap_or_else(|| panic!("bad measurement line {line:?}"));
        m.insert(k.to_string(), v.trim().parse().expect("measurement ns"));
    }
    m
}

/// Total count of the lines of `comm`.
pub fn comm_total(stacks: &[Stack], comm: &str) -> u64 {
    stacks
        .iter()
        .filter(|s| s.comm == comm)
        .map(|s| s.count)
        .sum()
}

/// Count of `comm`'s lines whose frames contain `frame`.
pub fn frame_count(stacks: &[Stack], comm: &str, frame: &str) -> u64 {
    stacks
        .iter()
        .filter(|s| s.comm == comm && s.has(frame))
        .map(|s| s.count)
        .sum()
}

/// Whether any line of `comm` (any comm if `None`) names `frame`.
pub fn names_frame(stacks: &[Stack], comm: Option<&str>, frame: &str) -> bool {
    stacks
        .iter()
        .any(|s| comm.is_none_or(|c| s.comm == c) && s.has(frame))
}

/// The `n` heaviest folded lines, for failure messages.
pub fn top_lines(stacks: &[Stack], n: usize) -> String {
    let mut v: Vec<&Stack> = stacks.iter().collect();
    v.sort_by_key(|s| std::cmp::Reverse(s.count));
    let mut s = String::new();
    for st in v.iter().take(n) {
        s.push_str("  ");
        s.push_str(&st.line());
        s.push('\n');
    }
    if v.len() > n {
        s.push_str(&format!("  ... ({} more lines)\n", v.len() - n));
    }
    s
}

/// Totals per comm, heaviest first, for failure messages.
pub fn comm_summary(stacks: &[Stack]) -> String {
    let mut m: BTreeMap<&str, u64> = BTreeMap::new();
    for s in stacks {
        *m.entry(&s.comm).or_default() += s.count;
    }
    let mut v: Vec<_> = m.into_iter().collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1));
    v.iter()
        .take(10)
        .map(|(c, n)| format!("{c}={n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Asserts that for every function in `measured`, the profiler's share
/// (samples of `comm` whose stack contains it / all samples of `comm`) is
/// within [`SHARE_TOLERANCE_POINTS`] of its measured share of CPU time, and
/// that the profiler collected a plausible number of samples for `comm`.
pub fn assert_shares(stacks: &[Stack], comm: &str, measured: &BTreeMap<String, u64>) {
    let measured_total: u64 = measured.values().sum();
    assert!(
        measured_total > 0,
        "workload measured no CPU time: {measured:?}"
    );
    let total = comm_total(stacks, comm);

    let mut report = String::new();
    let mut bad = Vec::new();
    report.push_str(&format!(
        "{:<8} {:>10} {:>10}   {:>9} {:>9}\n",
        "function", "measured", "ms", "profiler", "samples"
    ));
    for (name, &ns) in measured {
        let m = 100.0 * ns as f64 / measured_total as f64;
        let c = frame_count(stacks, comm, name);
        let p = if total > 0 {
            100.0 * c as f64 / total as f64
        } else {
            0.0
        };
        report.push_str(&format!(
            "{name:<8} {m:>9.1}% {:>10.1}   {p:>8.1}% {c:>9}\n",
            ns as f64 / 1e6
        ));
        if (m - p).abs() > SHARE_TOLERANCE_POINTS {
            bad.push(format!("{name}: measured {m:.1}% vs profiler {p:.1}%"));
        }
    }
    let context = format!(
        "comm {comm:?}: {total} samples (all comms: {})\n{report}top folded lines:\n{}",
        comm_summary(stacks),
        top_lines(stacks, 20)
    );
    // cpu-clock at FREQ on the workload's own CPU time: expect about
    // seconds * FREQ samples; demand at least half of that.
    let expected = measured_total as f64 / 1e9 * FREQ_HZ;
    assert!(
        total as f64 >= 0.5 * expected,
        "too few samples for {comm:?}: {total}, expected about {expected:.0} \
         ({:.2} s of measured CPU at {FREQ} Hz)\n{context}",
        measured_total as f64 / 1e9
    );
    assert!(
        bad.is_empty(),
        "profiled shares differ from measured CPU shares by more than {SHARE_TOLERANCE_POINTS} points: {}\n{context}",
        bad.join("; ")
    );
}

/// The distance allowed between a measured share and a profiled one of `samples` samples
/// (both in percent): `points`, or four binomial standard deviations of `share` at that
/// many samples if more (a fixed tolerance fails by chance on few samples: 3 points at
/// 1,600 samples is 2.5 deviations of a 60% share).
pub fn share_tolerance(points: f64, share: f64, samples: u64) -> f64 {
    let p = (share / 100.0).clamp(0.0, 1.0);
    let deviation = 100.0 * (p * (1.0 - p) / samples.max(1) as f64).sqrt();
    points.max(4.0 * deviation)
}

/// Asserts that `comm` has lines naming each of `names`.
pub fn assert_names(stacks: &[Stack], comm: &str, names: &[&str]) {
    let missing: Vec<&&str> = names
        .iter()
        .filter(|n| !names_frame(stacks, Some(comm), n))
        .collect();
    assert!(
        missing.is_empty(),
        "folded output has no frame named {missing:?} under comm {comm:?} \
         (comms: {})\ntop folded lines:\n{}",
        comm_summary(stacks),
        top_lines(stacks, 20)
    );
}

/// Checks that `path` is a complete, well-formed SVG document (quick-xml
/// reads it to the end without error, the root element is `svg`, every
/// element is closed) and returns its concatenated text content.
pub fn check_svg(path: &Path) -> String {
    use quick_xml::events::Event;
    use quick_xml::Reader;

    let data = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read SVG {}: {e}", path.display()));
    let mut reader = Reader::from_str(&data);
    let mut depth = 0usize;
    let mut root: Option<String> = None;
    let mut text = String::new();
    loop {
        let ev = reader.read_event().unwrap_or_else(|e| {
            panic!(
                "SVG {} is not well-formed XML at byte {}: {e}",
                path.display(),
                reader.buffer_position()
            )
        });
        match ev {
            Event::Start(e) => {
                if depth == 0 {
                    assert!(root.is_none(), "SVG has more than one root element");
                    root = Some(String::from_utf8_lossy(e.name().as_ref()).into_owned());
                }
                depth += 1;
            }
            Event::Empty(e) if depth == 0 => {
                assert!(root.is_none(), "SVG has more than one root element");
                root = Some(String::from_utf8_lossy(e.name().as_ref()).into_owned());
            }
            Event::End(_) => depth -= 1,
            Event::Text(t) => {
                let t = t
                    .unescape()
                    .unwrap_or_else(|e| panic!("SVG text does not unescape: {e}"));
                text.push_str(&t);
                text.push('\n');
            }
            Event::CData(c) => {
                text.push_str(&String::from_utf8_lossy(&c));
                text.push('\n');
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(
        root.as_deref(),
        Some("svg"),
        "root element of {} is not <svg>",
        path.display()
    );
    assert_eq!(
        depth,
        0,
        "SVG {} ends with unclosed elements",
        path.display()
    );
    text
}

/// The unprivileged user tests run as (created when missing, as root).
pub const TEST_USER: &str = "profctl-test";

/// The number `id ARGS` prints (e.g. `-u`, `-u NAME`), if it names one.
pub fn id(args: &[&str]) -> Option<u32> {
    let out = Command::new("id").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// uid and gid of [`TEST_USER`], creating it if needed.
pub fn ensure_test_user() -> (u32, u32) {
    ensure_user(TEST_USER)
}

/// The uid and gid of system user `name`, created (no home, no shell) if missing.
pub fn ensure_user(name: &str) -> (u32, u32) {
    // Tests beside each other may add users at once: useradd then fails to lock /etc/passwd
    // ("try again later"), and another test may have added this one meanwhile; only the
    // lookup counts.
    wait_for(&format!("useradd {name}"), Duration::from_secs(20), || {
        if id(&["-u", name]).is_some() {
            return Ok(());
        }
        let out = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ])
            .output()
            .expect("run useradd");
        match out.status.success() || id(&["-u", name]).is_some() {
            true => Ok(()),
            false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
        }
    });
    (
        id(&["-u", name]).expect("uid of test user"),
        id(&["-g", name]).expect("gid of test user"),
    )
}

/// `kill_tree` of a shell that keeps forking (a child every few milliseconds, as a driver's
/// thread may while the tree is listed) leaves none of its children running.
#[test]
fn kill_tree_leaves_no_child_forked_while_it_lists() {
    // A name no other process has: `sleep` with this test's own duration argument.
    let marker = format!("600.{}", std::process::id());
    let mut shell = Command::new("sh");
    shell
        .arg("-c")
        .arg(format!("while :; do sleep {marker} & sleep 0.005; done"));
    let mut shell = Spawned::spawn(shell, "forking shell");
    let root = shell.pid();
    wait_for(
        "the shell's children",
        Duration::from_secs(10),
        || match descendants(root).len() {
            n if n >= 20 => Ok(()),
            n => Err(format!("{n} children")),
        },
    );
    shell.kill_tree();
    let running = || -> Vec<u32> {
        fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| {
                fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&marker))
            })
            .collect()
    };
    // Killed children are reaped by whoever inherits them: looked for until they are gone.
    let gone = poll_until(scaled(Duration::from_secs(5)), || {
        running().is_empty().then_some(())
    });
    let survivors = running();
    signal_all(&survivors, "KILL");
    assert!(
        gone.is_some(),
        "children of the killed tree still run: {survivors:?}"
    );
}
