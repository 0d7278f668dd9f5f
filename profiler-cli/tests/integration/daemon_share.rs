//! Per-uid retention, played by a real unprivileged user against a real daemon under the
//! unit's capability set: one user runs a program whose every sample is a distinct deep stack
//! through many long, distinct names (huge slices), another user burns CPU in a known
//! function. With a small `storage.max_bytes`, the other user's history must still reach back
//! to the start, and the hostile user's drops are counted in their own status, not in the
//! other's: in slices, and in hours' roll-ups (the roll-up span shortened to seconds).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::RwLockWriteGuard;

use crate::common::*;
use crate::daemon::{cpu_seconds, flamegraph, http_get, unix_now, Daemon, BUDGET_OFF};
use crate::daemon_limits::{is_root, shared_scratch, User, OTHER_USER};
use crate::daemon_users::folded_as_user;

/// Functions of the hostile program.
const FUNCTIONS: usize = 200;

/// Characters of each function's name (distinct, hard to compress).
const NAME_CHARS: usize = 1000;

/// The first seconds of the run whose history the other user must keep.
const EARLY_SECONDS: f64 = 5.0;

/// C source of a program calling through [`FUNCTIONS`] functions with distinct
/// [`NAME_CHARS`]-character names, 30 to 59 deep along a random path, forever: nearly every
/// sample a distinct stack naming dozens of long names. With `hold_ms`, each path is run
/// again and again for that much CPU time before the next: a stack of several samples.
fn manynames_source(hold_ms: u32) -> String {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut name = |i: usize| -> String {
        let mut s = format!("h{i}_");
        while s.len() < NAME_CHARS {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            s.push((b'a' + ((seed >> 33) % 26) as u8) as char);
        }
        s
    };
    let names: Vec<String> = (0..FUNCTIONS).map(&mut name).collect();
    let mut c = String::from(
        "#include <stdlib.h>\nvolatile unsigned long sink;\ntypedef void (*fn)(unsigned *, int);\n",
    );
    let _ = writeln!(c, "extern fn table[{FUNCTIONS}];");
    for n in &names {
        let _ = writeln!(
            c,
            "__attribute__((noinline)) void {n}(unsigned *seed, int depth) {{\n  if (depth > 0) table[rand_r(seed) % {FUNCTIONS}](seed, depth - 1);\n  else for (int i = 0; i < 20000; i++) sink += i;\n  sink++;\n}}"
        );
    }
    let _ = writeln!(c, "fn table[{FUNCTIONS}] = {{ {} }};", names.join(", "));
    if hold_ms == 0 {
        c.push_str(
            "int main(void) {\n  unsigned seed = 1;\n  for (;;) table[rand_r(&seed) % 200](&seed, 30 + rand_r(&seed) % 30);\n}\n",
        );
        return c;
    }
    let _ = write!(
        c,
        r#"#include <time.h>
static long long cpu_ns(void) {{
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}}
int main(void) {{
  unsigned seed = 1;
  for (;;) {{
    int first = rand_r(&seed) % {FUNCTIONS}, depth = 30 + rand_r(&seed) % 30;
    unsigned path = seed, s;
    long long until = cpu_ns() + {hold_ms} * 1000000LL;
    do {{ s = path; table[first](&s, depth); }} while (cpu_ns() < until);
    seed = s;
  }}
}}
"#
    );
    c
}

/// The hostile program, built into `dir`.
fn build_manynames(dir: &Path) -> PathBuf {
    build_c(dir, "manynames", &manynames_source(0))
}

/// `source` built into `dir` as `name`.
fn build_c(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let run = Command::new("cc")
        .args([
            "-O1",
            "-fno-omit-frame-pointer",
            "-fno-optimize-sibling-calls",
        ])
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .expect("cc");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    out
}

/// Samples per second per CPU (what a debug build of the daemon names in time).
const HZ: f64 = 199.0;

/// The storage of a contest: `max_age`, `max_bytes`, the roll-up span in seconds (None: an
/// hour, never reached), and the seconds both workloads run.
struct Storage {
    max_age: &'static str,
    max_bytes: u64,
    rollup_seconds: Option<u64>,
    run_seconds: f64,
}

/// The configuration: 1 s slices at [`HZ`], `storage`'s retention.
fn write_config(dir: &Path, storage: &Storage) -> PathBuf {
    let config = dir.join("profilerd.toml");
    fs::write(
        &config,
        format!(
            "[sampling]\nfrequency = {HZ}\nslice = \"1s\"\n\n[storage]\nstate_dir = \"{}\"\ncache_dir = \"{}\"\nmax_age = \"{}\"\nmax_bytes = {}\n\n[api]\nsocket = \"{}\"\n\n{BUDGET_OFF}",
            dir.join("state").display(),
            dir.join("cache").display(),
            storage.max_age,
            storage.max_bytes,
            dir.join("profilerd.sock").display()
        ),
    )
    .unwrap();
    config
}

/// The `"uid":N,"stacks":M` entries of a status body's `uid_share_dropped`: (uid, stacks).
fn uid_drops(status: &str) -> Vec<(u32, u64)> {
    let Some(list) = status
        .split("\"uid_share_dropped\":[")
        .nth(1)
        .and_then(|r| r.split(']').next())
    else {
        return Vec::new();
    };
    list.split('}')
        .filter_map(|entry| {
            let field = |key: &str| -> Option<u64> {
                entry
                    .split(&format!("\"{key}\":"))
                    .nth(1)?
                    .split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse()
                    .ok()
            };
            Some((field("uid")? as u32, field("stacks")?))
        })
        .collect()
}

/// 1 MiB of slices for 60 s of history: a slice's budget is a quarter of 1 MiB over 60 s
/// (4.4 KB).
#[test]
fn daemon_per_uid_retention_keeps_the_other_users_history() {
    let (daemon, _dir, _guard, _) = contest(&Storage {
        max_age: "60s",
        max_bytes: 1 << 20,
        rollup_seconds: None,
        run_seconds: 24.0,
    });
    daemon.stop();
}

/// Roll-ups every 3 s, 192 KiB for 90 s of history, 36 s of contest: a roll-up's budget is
/// half of 192 KiB over 90 s (3.3 KB for 3 s), a slice's a quarter over 3 s (16 KB).
/// Unshared, the hostile user's roll-ups (its 200 names once, its distinct stacks: about a
/// third of their members) outgrow the 192 KiB within the contest and take the other user's
/// first roll-ups with them.
#[test]
fn daemon_per_uid_retention_holds_in_the_hours_roll_ups() {
    let (daemon, dir, _guard, early) = contest(&Storage {
        max_age: "90s",
        max_bytes: 192 << 10,
        rollup_seconds: Some(3),
        run_seconds: 36.0,
    });
    // The early seconds were read from roll-ups: every roll-up within its budget.
    let rollups: Vec<(String, u64)> = fs::read_dir(dir.path().join("state/slices"))
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            name.ends_with(".hour.pb.gz")
                .then(|| (name, e.metadata().map_or(0, |m| m.len())))
        })
        .collect();
    assert!(rollups.len() >= 3, "roll-ups: {rollups:?}");
    let span = |name: &str| -> (f64, f64) {
        let (a, b) = name
            .strip_suffix(".hour.pb.gz")
            .and_then(|n| n.split_once('-'))
            .unwrap();
        (
            a.parse::<f64>().unwrap() / 1e9,
            b.parse::<f64>().unwrap() / 1e9,
        )
    };
    assert!(
        rollups.iter().any(|r| {
            let (a, b) = span(&r.0);
            a < early.1 && b > early.0
        }),
        "no roll-up covers the early seconds {early:?}: {rollups:?}"
    );
    let budget = (96u64 << 10) * 3 / 90;
    assert!(
        rollups.iter().all(|r| r.1 <= budget + budget / 10),
        "a roll-up over its budget of {budget} bytes: {rollups:?}"
    );
    let log = daemon.stop();
    assert!(
        log.contains("stacks over the uid's share of the hour's roll-up dropped"),
        "{log}"
    );
}

/// The contest under `storage` (the daemon, its directory, the sampling lock, held until the
/// caller is done, and the early seconds judged, UNIX s): asserts that the other user's first seconds are whole, the
/// hostile user's own history is there, and its drops are counted where they should be.
fn contest(
    storage: &Storage,
) -> (
    Daemon,
    tempfile::TempDir,
    RwLockWriteGuard<'static, ()>,
    (f64, f64),
) {
    assert!(
        is_root(),
        "run as root: the test plays two unprivileged users"
    );
    let guard = sampling_lock();
    let dir = shared_scratch();
    let hostile = User::new(TEST_USER, dir.path());
    let other = User::new(OTHER_USER, dir.path());
    let manynames = build_manynames(dir.path());
    let config = write_config(dir.path(), storage);
    let period = storage.rollup_seconds.map(|s| s.to_string());
    let env: Vec<(&str, &Path)> = period
        .iter()
        .map(|p| ("PROFILERD_TEST_ROLLUP_SECONDS", Path::new(p.as_str())))
        .collect();
    let daemon = Daemon::start_with(&config, &env);

    let t0 = unix_now();
    let mut burner = other.command(&workloads().burner);
    burner.arg(format!("{}", storage.run_seconds + 10.0));
    let mut burner = Spawned::spawn(burner, "burner (other user)");
    let mut deep = Spawned::spawn(hostile.command(&manynames), "manynames (hostile user)");
    // The CPU time the other user's burner used over the early seconds (a span measured),
    // then the contest runs its length.
    let early = (t0 + 1.0, t0 + 1.0 + EARLY_SECONDS);
    hold_until(early.0);
    let cpu_before = cpu_seconds(burner.pid());
    hold_until(early.1);
    let early_cpu = cpu_seconds(burner.pid()) - cpu_before;
    hold_until(t0 + storage.run_seconds);
    deep.kill_tree();
    let t1 = unix_now();
    daemon.wait_slices_through(t1);
    burner.kill_tree();

    // The other user's first seconds are still in the history, whole.
    let out = dir.path().join("early.folded");
    let uid = other.uid.to_string();
    let (_, stacks) = flamegraph(&daemon.socket, early, &["--uid", &uid], &out);
    let hot = frame_count(&stacks, "burner", "child_hot");
    let expected = early_cpu * HZ;
    assert!(
        expected >= 20.0 && hot as f64 >= 0.6 * expected,
        "the other user's first {EARLY_SECONDS} s hold {hot} samples of child_hot, expected about {expected:.0} (the burner's {early_cpu:.2} CPU seconds): their history was shortened\n{}",
        comm_summary(&stacks)
    );
    // The hostile user's own history is there too, cut to its share.
    let out = dir.path().join("hostile.folded");
    let uid = hostile.uid.to_string();
    let (_, stacks) = flamegraph(&daemon.socket, (t0, t1), &["--uid", &uid], &out);
    assert!(
        comm_total(&stacks, "manynames") > 0,
        "{}",
        comm_summary(&stacks)
    );

    // The drops: in the hostile user's own status, not in the other's; all of them for root
    // (status and metrics).
    let (code, body) = hostile.http(&daemon.socket, "GET", "/v1/status", None);
    assert_eq!(code, 200, "{body}");
    let mine = uid_drops(&body);
    assert!(
        mine.len() == 1 && mine[0].0 == hostile.uid && mine[0].1 > 100,
        "the hostile user's drops are not counted in their status: {mine:?}\n{body}"
    );
    let (code, body) = other.http(&daemon.socket, "GET", "/v1/status", None);
    assert_eq!(code, 200, "{body}");
    assert!(
        uid_drops(&body).iter().all(|&(u, _)| u == other.uid),
        "another user's drops are shown: {body}"
    );
    let root = http_get(&daemon.socket, "/v1/status").unwrap();
    assert!(
        uid_drops(&root).iter().any(|&(u, _)| u == hostile.uid),
        "{root}"
    );
    assert!(daemon.number("uid_share_dropped_stacks") >= mine[0].1);
    let metrics = http_get(&daemon.socket, "/metrics").unwrap();
    let series = format!(
        "profilerd_uid_share_dropped_stacks_total{{uid=\"{}\"}}",
        hostile.uid
    );
    assert!(metrics.contains(&series), "{metrics}");
    // Within the retention's bytes.
    assert!(daemon.number("bytes_kept") <= storage.max_bytes);
    (daemon, dir, guard, early)
}

/// Functions of [`rare_source`]'s program.
const RARE_FUNCTIONS: usize = 40;

/// C source of a program that mostly sleeps: every 10 ms, 30 calls along random paths 4 to
/// 11 deep through [`RARE_FUNCTIONS`] functions, some microseconds each: a few percent of a
/// CPU, nearly every sample a stack of its own (one sample each).
fn rare_source() -> String {
    let mut c = String::from(
        "#include <stdlib.h>\n#include <time.h>\nvolatile unsigned long sink;\ntypedef void (*fn)(unsigned *, int);\n",
    );
    let _ = writeln!(c, "extern fn table[{RARE_FUNCTIONS}];");
    for i in 0..RARE_FUNCTIONS {
        let _ = writeln!(
            c,
            "__attribute__((noinline)) void rare_{i}(unsigned *seed, int depth) {{\n  if (depth > 0) table[rand_r(seed) % {RARE_FUNCTIONS}](seed, depth - 1);\n  else for (int i = 0; i < 20000; i++) sink += i;\n  sink++;\n}}"
        );
    }
    let names: Vec<String> = (0..RARE_FUNCTIONS).map(|i| format!("rare_{i}")).collect();
    let _ = writeln!(
        c,
        "fn table[{RARE_FUNCTIONS}] = {{ {} }};",
        names.join(", ")
    );
    let _ = write!(
        c,
        r#"int main(void) {{
  unsigned seed = 7;
  struct timespec nap = {{0, 10000000}};
  for (;;) {{
    for (int k = 0; k < 30; k++) table[rand_r(&seed) % {RARE_FUNCTIONS}](&seed, 4 + rand_r(&seed) % 8);
    nanosleep(&nap, 0);
  }}
}}
"#
    );
    c
}

/// The owner of a process no user may trace, as the daemon labels its stacks (admins only).
const UNKNOWN_UID: u32 = u32::MAX;

/// The uid and gid `nobody`/`nogroup`: the other user's program is set-uid to it, the hostile
/// user's set-gid to it.
const NOBODY: u32 = 65534;

/// `built` copied to `dir/name`, owned by `uid` and `gid`, with `mode`.
fn install(built: &Path, dir: &Path, name: &str, (uid, gid): (u32, u32), mode: u32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    fs::copy(built, &path).unwrap();
    std::os::unix::fs::chown(&path, Some(uid), Some(gid)).unwrap();
    // After the chown, which clears a set-uid bit.
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// Samples of the process `pid` in the history over `range`, as root sees them, and a
/// summary of them.
fn pid_samples(daemon: &Daemon, range: (f64, f64), pid: u32, out: &Path) -> (u64, String) {
    let pid = pid.to_string();
    let (_, stacks) = flamegraph(&daemon.socket, range, &["--pid", &pid], out);
    (stacks.iter().map(|s| s.count).sum(), comm_summary(&stacks))
}

/// Issue 35 item 7: a program its user may not trace (one they made not dumpable, such as an
/// execute-only binary on kernels that make it so at exec, or a set-uid or set-gid program
/// they run) is seen by admins only, with the unknown uid; the per-uid share must still
/// charge its stacks to its user (its real uid), not to the part that every process nobody
/// may trace shares. (On the 6.18 test kernel an execute-only binary is dumpable, and a
/// process that calls `prctl(PR_SET_DUMPABLE, 0)` keeps its `/proc/PID` directory's owner,
/// which is how the daemon judges dumpability: both stay their user's. A set-gid program is
/// the withheld process a user can make without privileges: `chmod g+s` on their own
/// binary, for a group they are in.) The hostile user runs `manynames` (deep stacks through
/// long names, each path held 30 ms: a few samples a stack) set-gid to `nogroup`; the other
/// user runs a set-uid (to `nobody`) program that mostly sleeps, one sample a stack. 1-s
/// slices at 199 Hz, 2 MiB for 60 s (a slice's budget 8.7 KB), `max_share_per_uid` 10 %.
/// The hostile user's drops are counted to their uid, in their own status too; none to the
/// unknown uid or to the other user; who sees what is unchanged (both programs under the
/// unknown uid for root, neither in its user's view). Charged to who may see them (before
/// the fix), the drops went to uid 4294967295, where the other user's set-uid program's
/// one-sample stacks are cut first.
#[test]
fn daemon_per_uid_share_charges_a_withheld_program_to_its_real_uid() {
    assert!(
        is_root(),
        "run as root: the test plays two unprivileged users"
    );
    let _guard = sampling_shared();
    let dir = shared_scratch();
    let hostile = User::new(TEST_USER, dir.path());
    let other = User::new(OTHER_USER, dir.path());
    let deep = build_c(dir.path(), "manynames", &manynames_source(30));
    let deep = install(
        &deep,
        &hostile.dir,
        "manynames",
        (hostile.uid, NOBODY),
        0o2755,
    );
    let rare = build_c(dir.path(), "rare", &rare_source());
    let rare = install(&rare, &other.dir, "rare", (NOBODY, NOBODY), 0o4755);
    let config = dir.path().join("profilerd.toml");
    fs::write(
        &config,
        format!(
            "[sampling]\nfrequency = {HZ}\nslice = \"1s\"\n\n[storage]\nstate_dir = \"{}\"\ncache_dir = \"{}\"\nmax_age = \"60s\"\nmax_bytes = {}\nmax_share_per_uid = 10\n\n[api]\nsocket = \"{}\"\n\n{BUDGET_OFF}",
            dir.path().join("state").display(),
            dir.path().join("cache").display(),
            2 << 20,
            dir.path().join("profilerd.sock").display()
        ),
    )
    .unwrap();
    let daemon = Daemon::start(&config);

    let t0 = unix_now();
    let mut victim = Spawned::spawn(other.command(&rare), "set-uid program (other user)");
    let mut hog = Spawned::spawn(hostile.command(&deep), "set-gid manynames (hostile)");
    let (victim_pid, hog_pid) = (victim.pid(), hog.pid());
    hold_until(t0 + 20.0);
    hog.kill_tree();
    let t1 = unix_now();
    daemon.wait_slices_through(t1);
    victim.kill_tree();

    // What the daemon kept and dropped, for every assertion below.
    let root = http_get(&daemon.socket, "/v1/status").unwrap();
    let drops = uid_drops(&root);
    let (hog_kept, hog_comms) =
        pid_samples(&daemon, (t0, t1), hog_pid, &dir.path().join("hog.folded"));
    let (victim_kept, victim_comms) = pid_samples(
        &daemon,
        (t0, t1),
        victim_pid,
        &dir.path().join("victim.folded"),
    );
    let unknown = UNKNOWN_UID.to_string();
    let (_, withheld) = flamegraph(
        &daemon.socket,
        (t0, t1),
        &["--uid", &unknown],
        &dir.path().join("unknown.folded"),
    );
    let seen = format!(
        "drops by uid {drops:?}; manynames (pid {hog_pid}, uid {}): {hog_kept} samples kept ({hog_comms}); set-uid program (pid {victim_pid}, uid {}): {victim_kept} samples kept ({victim_comms}); uid {UNKNOWN_UID}: {}; slices kept {}, dropped {}, corrupt {}",
        hostile.uid,
        other.uid,
        comm_summary(&withheld),
        daemon.number("slices_kept"),
        daemon.number("slices_dropped"),
        daemon.number("corrupt_slices"),
    );
    eprintln!("{seen}");

    // Who sees what is as before: root sees the set-uid program under the unknown uid (and
    // what is kept of the set-gid one); neither user sees their program.
    let in_withheld = |pid: u32, comm: &str| {
        let unnamed = format!("[pid {pid}]");
        withheld
            .iter()
            .filter(|s| s.comm == unnamed || s.comm == comm)
            .map(|s| s.count)
            .sum::<u64>()
    };
    assert!(
        victim_kept > 0 && in_withheld(victim_pid, "rare") == victim_kept,
        "root does not see the set-uid program under uid {UNKNOWN_UID}: {seen}"
    );
    assert_eq!(
        in_withheld(hog_pid, "manynames"),
        hog_kept,
        "the set-gid program is not under uid {UNKNOWN_UID}: {seen}"
    );
    for user in [&hostile, &other] {
        let own = folded_as_user(
            (user.uid, user.gid),
            &user.dir,
            &daemon.socket,
            (t0, t1),
            "own.folded",
        );
        let theirs = |s: &Stack| {
            ["manynames", "rare"].contains(&s.comm.as_str())
                || [hog_pid, victim_pid]
                    .iter()
                    .any(|p| s.comm == format!("[pid {p}]"))
        };
        assert!(
            !own.iter().any(theirs),
            "uid {} sees the stacks of a program it may not trace:\n{}",
            user.uid,
            comm_summary(&own)
        );
    }

    // The set-gid program's stacks were charged to its user: their drops, in root's status
    // and in theirs; none to the unknown uid, none to the other user.
    assert!(
        drops.iter().any(|&(u, n)| u == hostile.uid && n > 100),
        "the set-gid program's drops are not charged to its user: {seen}\n{root}"
    );
    assert!(
        drops
            .iter()
            .all(|&(u, _)| u != UNKNOWN_UID && u != other.uid)
            && !root.contains("\"uid\":null"),
        "drops charged to the unknown uid or to the other user: {seen}\n{root}"
    );
    let (code, body) = hostile.http(&daemon.socket, "GET", "/v1/status", None);
    assert_eq!(code, 200, "{body}");
    let mine = uid_drops(&body);
    assert!(
        mine.len() == 1 && mine[0].0 == hostile.uid && mine[0].1 > 100,
        "the hostile user's drops are not in their status: {mine:?}\n{body}"
    );
    daemon.stop();
}
