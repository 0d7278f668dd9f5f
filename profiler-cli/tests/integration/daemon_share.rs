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

use crate::common::*;
use crate::daemon::{cpu_seconds, flamegraph, http_get, unix_now, Daemon, BUDGET_OFF};
use crate::daemon_limits::{is_root, shared_scratch, User, OTHER_USER};

/// Functions of the hostile program.
const FUNCTIONS: usize = 200;

/// Characters of each function's name (distinct, hard to compress).
const NAME_CHARS: usize = 1000;

/// The first seconds of the run whose history the other user must keep.
const EARLY_SECONDS: f64 = 5.0;

/// C source of a program calling through [`FUNCTIONS`] functions with distinct
/// [`NAME_CHARS`]-character names, 30 to 59 deep along a random path, forever: nearly every
/// sample a distinct stack naming dozens of long names.
fn manynames_source() -> String {
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
    c.push_str(
        "int main(void) {\n  unsigned seed = 1;\n  for (;;) table[rand_r(&seed) % 200](&seed, 30 + rand_r(&seed) % 30);\n}\n",
    );
    c
}

/// The hostile program, built into `dir`.
fn build_manynames(dir: &Path) -> PathBuf {
    let src = dir.join("manynames.c");
    fs::write(&src, manynames_source()).unwrap();
    let out = dir.join("manynames");
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

/// 512 KiB of slices for 30 s of history: a slice's budget is a quarter of 512 KiB over 30 s
/// (4.4 KB, as with 1 MiB over 60 s). Unshared, the hostile user's slices (each cut by some
/// 133 KB to its share, measured here) fill 512 KiB in 4 s: well within the 9 s of contest
/// after the early seconds, as 1 MiB was within the 18 s after them when the contest ran 24 s
/// (the bytes and the contest past the early seconds halved together).
#[test]
fn daemon_per_uid_retention_keeps_the_other_users_history() {
    let (daemon, _dir, _guard, _) = contest(&Storage {
        max_age: "30s",
        max_bytes: 512 << 10,
        rollup_seconds: None,
        run_seconds: 1.0 + EARLY_SECONDS + 9.0,
    });
    daemon.stop();
}

/// Roll-ups every 2 s, 128 KiB for 40 s of history, 20 s of contest: a roll-up's budget is
/// half of 128 KiB over 40 s (3.3 KB for 2 s), a slice's a quarter over 2 s (16 KB).
/// Unshared, the hostile user's roll-ups (its 200 names once, its distinct stacks: about
/// half of their members) outgrow the 128 KiB within the contest and take the other user's
/// first roll-ups with them (checked with the roll-up share turned off: the other user's
/// early seconds are gone).
#[test]
fn daemon_per_uid_retention_holds_in_the_hours_roll_ups() {
    let (daemon, dir, _guard, early) = contest(&Storage {
        max_age: "40s",
        max_bytes: 128 << 10,
        rollup_seconds: Some(2),
        run_seconds: 20.0,
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
    let budget = (64u64 << 10) * 2 / 40;
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
fn contest(storage: &Storage) -> (Daemon, tempfile::TempDir, SamplingHold, (f64, f64)) {
    assert!(
        is_root(),
        "run as root: the test plays two unprivileged users"
    );
    // The hostile program is compiled (a second or more) before the lock is taken.
    let dir = shared_scratch();
    let manynames = build_manynames(dir.path());
    let guard = sampling_lock();
    let hostile = User::new(TEST_USER, dir.path());
    let other = User::new(OTHER_USER, dir.path());
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
