//! The timeline tells the second at the default slice length (10 s): a thread busy 8 s,
//! paused 10 s, busy 8 s (tests/workloads/bursts.c, its edges at .37 s past a second, so
//! never on a bucket's boundary; it measures the CPU it got in each second), under a daemon at
//! 499 Hz whose roll-up period is shortened to 20 s. `profctl timeline --bucket 1s` and
//! `--bucket 5s` show at least 0.8 of the thread's measured cores (in that bucket: on a shared
//! machine the thread gets what it gets) in every bucket wholly inside a burst,
//! under 0.05 in every bucket wholly inside the pause, and say the data's resolution is a
//! second; once the periods are rolled up, the roll-ups answer the same at their own
//! resolution, a second. (A slice's CPU used to be spread evenly over its 10 s: 0.62-0.85 of
//! a core inside bursts, 0.15-0.20 in the pause.)
//!
//! The pause is one slice long: it lies across two 10-s slices, the one holding the first
//! burst's end and the one holding the second's start, so every bucket of the pause lies in a
//! slice holding part of a burst (if the pause begins y s into its slice, that slice holds
//! min(y, 8) s of burst and the next min(10 - y, 8): one of them 5 s or more, which spread
//! over its slice puts half a core in its pause buckets). A 20-s pause only added a middle
//! slice of pause alone, whose buckets read 0 however a slice's CPU is spread, and whose
//! outer slices held the same shares of burst.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::daemon::{number_in, unix_now, Daemon};
use crate::daemon_rename::config_default_slices;
use crate::daemon_rollup::indexed_rollups;

/// The slice length, seconds: the default.
const SLICE: f64 = 10.0;

/// The roll-up period of this test, seconds: two 10-s slices, so that a roll-up merges slices.
/// The bursts' last period is rolled up when the slice that reaches its end is written: the
/// bursts' last slice, or the one after it.
const PERIOD: u64 = 20;

/// A burst's length, seconds: seven whole seconds, and the first burst (begun 2.37 s past a
/// multiple of 5, [`PHASE`]) holds a whole 5-s bucket.
const BUSY: u64 = 8;

/// The pause's length, seconds: one slice (see the module's comment).
const PAUSE: u64 = 10;

/// Where the schedule starts: this many seconds past a multiple of 5.
const PHASE: &str = "2.37";

/// The bursts workload, built once.
fn bursts() -> PathBuf {
    let out = workloads().dir.join("bursts");
    compile_with(
        "bursts.c",
        &out,
        &["-O1", "-g", "-fno-omit-frame-pointer", "-Wall"],
        &[],
    );
    out
}

/// A burst as the workload ran it: (start, end) UNIX seconds.
#[derive(Clone, Copy, Debug)]
struct Burst {
    start: f64,
    end: f64,
}

/// What the workload measured: its bursts, and the CPU seconds it used in each wall-clock
/// second it was busy in.
struct Measured {
    bursts: Vec<Burst>,
    seconds: BTreeMap<u64, f64>,
}

impl Measured {
    /// The thread's cores over `[start, start + length)` (whole seconds).
    fn cores(&self, start: u64, length: u64) -> f64 {
        self.seconds
            .range(start..start + length)
            .map(|(_, c)| c)
            .sum::<f64>()
            / length as f64
    }
}

fn read_measured_bursts(path: &Path) -> Measured {
    let mut out = Measured {
        bursts: Vec::new(),
        seconds: BTreeMap::new(),
    };
    for l in fs::read_to_string(path).unwrap().lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f[0] {
            "busy" => {
                let (start, end): (f64, f64) = (f[1].parse().unwrap(), f[2].parse().unwrap());
                out.bursts.push(Burst { start, end });
            }
            "second" => {
                let cpu = f[2].parse::<f64>().unwrap() / 1e9;
                *out.seconds.entry(f[1].parse().unwrap()).or_default() += cpu;
            }
            other => panic!("{other} in {}", path.display()),
        }
    }
    out
}

/// `profctl timeline --json --comm bursts --bucket B` over `range`: the answer.
fn timeline(socket: &Path, range: (f64, f64), bucket: u64) -> Value {
    let since = format!("@{:.3}", range.0);
    let until = format!("@{:.3}", range.1);
    let bucket = format!("{bucket}s");
    let out = tool(Command::new(profctl()).args([
        "--socket",
        socket.to_str().unwrap(),
        "timeline",
        "--json",
        "--comm",
        "bursts",
        "--bucket",
        &bucket,
        "--since",
        &since,
        "--until",
        &until,
    ]));
    serde_json::from_str(&out).expect("JSON")
}

/// The thread's cores per bucket: (start, cores).
fn cores(answer: &Value) -> Vec<(f64, f64)> {
    answer["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| {
            (
                b["start"].as_f64().unwrap(),
                b["cpu"]["bursts"].as_f64().unwrap_or(0.0),
            )
        })
        .collect()
}

/// Every bucket wholly inside a burst at least 0.8 of the thread's measured cores in it,
/// every bucket wholly inside the pause under 0.05, the answer at 1-s resolution, its buckets
/// as asked.
fn check(answer: &Value, bucket: u64, measured: &Measured, what: &str) {
    let bursts = &measured.bursts;
    let text = answer.to_string();
    assert_eq!(answer["bucket_seconds"], bucket, "{what}: {text}");
    assert_eq!(answer["resolution_seconds"], 1, "{what}: {text}");
    assert!(answer.get("note").is_none(), "{what}: {text}");
    let b = bucket as f64;
    let inside = |start: f64, (a, z): (f64, f64)| start >= a && start + b <= z;
    let (mut busy, mut idle) = (0, 0);
    for (start, c) in cores(answer) {
        if bursts.iter().any(|x| inside(start, (x.start, x.end))) {
            busy += 1;
            let got = measured.cores(start as u64, bucket);
            assert!(
                c >= 0.8 * got,
                "{what}: {c} cores in the bucket at {start}, inside a burst; the thread measured {got:.3} in it: {text}"
            );
        }
        if inside(start, (bursts[0].end, bursts[1].start)) {
            idle += 1;
            assert!(
                c < 0.05,
                "{what}: {c} cores in the bucket at {start}, inside the pause: {text}"
            );
        }
    }
    let whole = (BUSY as f64 / b).floor() as usize - 1;
    assert!(
        busy >= 2 * whole && idle >= (PAUSE as f64 / b) as usize - 1,
        "{what}: {busy} buckets inside the bursts, {idle} inside the pause: {text}"
    );
}

#[test]
fn daemon_timeline_tells_the_second_at_the_default_slice_length() {
    let _guard = sampling_shared_long();
    let dir = scratch();
    let config = config_default_slices(dir.path(), "");
    let text = fs::read_to_string(&config).unwrap();
    fs::write(
        &config,
        text.replacen(&format!("frequency = {FREQ}"), "frequency = 499", 1),
    )
    .unwrap();
    // The daemon started in the first half of a period (slices begin where it started), so
    // that its first slice shares its period with the second: a period's roll-up is begun by
    // its first slice written, and a period holding the first slice alone is never rolled up.
    let p = PERIOD as f64;
    let now = unix_now();
    if now % p > 8.0 {
        hold_until((now / p).ceil() * p);
    }
    let before = unix_now();
    let period = PERIOD.to_string();
    let daemon = Daemon::start_with(
        &config,
        &[("PROFILERD_TEST_ROLLUP_SECONDS", Path::new(&period))],
    );
    let sampling = unix_now();
    assert_eq!(
        daemon.number("slice_seconds"),
        SLICE as u64,
        "the default slice length"
    );
    // Then the bursts begin as soon as the daemon samples, not once a first slice is written
    // (10 s, and the start's naming of every process running, some 4 s in a debug build):
    // that naming runs as the first slice closes, beside a burst or the pause, on the other
    // CPU; it delays when the slice is written, not what it holds, and every bucket is judged
    // against the CPU the thread measured in it. The bursts' last slices are then rolled up
    // 40 s after the start (they lie in the second period, rolled up once its last slice is
    // written). If the start took so long that the first slice may not share
    // its period, the bursts begin after it, as they always did.
    if (before / p).floor() != (sampling / p).floor() || sampling % p >= SLICE {
        daemon.wait_status("a first slice written", Duration::from_secs(60), |s| {
            number_in(s, "slices_written") >= 1
        });
    }

    let measured = dir.path().join("bursts.out");
    let mut cmd = Command::new(bursts());
    cmd.arg(&measured)
        .arg(PHASE)
        .args([BUSY, PAUSE, BUSY].map(|s| s.to_string()));
    Spawned::spawn(cmd, "bursts")
        .wait_or_panic(scaled(Duration::from_secs(120)))
        .assert_success("bursts");
    let measured = read_measured_bursts(&measured);
    let bursts = &measured.bursts;
    assert_eq!(bursts.len(), 2);
    eprintln!(
        "bursts: {bursts:?}; the thread's CPU seconds in each second: {:?}",
        measured.seconds
    );
    let range = (bursts[0].start - 12.0, bursts[1].end + 3.0);

    // Fresh: the slices written and the one still open.
    let mut fresh = Vec::new();
    for bucket in [1, 5] {
        let answer = timeline(&daemon.socket, range, bucket);
        let lost = daemon.number("lost");
        check(
            &answer,
            bucket,
            &measured,
            &format!("--bucket {bucket}s ({lost} samples lost by the daemon)"),
        );
        fresh.push(cores(&answer));
    }
    // What is left is exact: the roll-ups of seconds already written against the slices'
    // answers above.

    // Once every period of the range is rolled up: the same, at the roll-ups' resolution.
    wait_for(
        "the bursts' periods rolled up and indexed",
        Duration::from_secs(3 * PERIOD + 60),
        || {
            let rolled = indexed_rollups(&daemon, dir.path())?;
            let covered = |t: f64| rolled.iter().any(|r| r.0 <= t && t < r.1);
            match covered(bursts[0].start) && covered(bursts[1].end - 0.5) {
                true => Ok(()),
                false => Err(format!("roll-ups {rolled:?}")),
            }
        },
    );
    eprintln!(
        "the daemon sampled from {sampling:.3}; the bursts ran {:.1}-{:.1} s after, and were rolled up {:.1} s after the second",
        bursts[0].start - sampling,
        bursts[1].end - sampling,
        unix_now() - bursts[1].end
    );
    for (k, bucket) in [1, 5].into_iter().enumerate() {
        let answer = timeline(&daemon.socket, range, bucket);
        check(
            &answer,
            bucket,
            &measured,
            &format!("rolled up, --bucket {bucket}s"),
        );
        for ((s, a), (_, b)) in fresh[k].iter().zip(cores(&answer)) {
            assert!(
                (a - b).abs() < 0.011,
                "the bucket at {s}: {a} cores from the slices, {b} from the roll-ups"
            );
        }
    }
    daemon.stop();
}
