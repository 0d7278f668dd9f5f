//! profilerd's roll-ups end to end: a daemon sampling a busy machine (the process churn of
//! tests/workloads/churn.c: 50 execs a second, a redeployed service, renamed threads, a JIT) at
//! 299 Hz crosses roll-up boundaries (the period shortened to seconds with
//! `PROFILERD_TEST_ROLLUP_SECONDS`, 1-s slices) under a CPU cap set just above its steady
//! cost: the roll-ups must not lower the sampling frequency, and a rolled-up period answers
//! the query its slices answered. (Before roll-ups were built as slices were written, each
//! roll-up re-read its period's files on the naming thread, a burst that went over such a
//! cap. The frequency leaves the debug build's naming thread room: at 999 Hz it falls behind
//! on this machine with or without roll-ups, and the bursts only delay it.)

use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::daemon::{unix_now, Daemon};

/// The roll-up period of this test, seconds (each roll-up holds this many 1-s slices).
const PERIOD: u64 = 60;

/// The sampling frequency of this test.
const HZ: u64 = 299;

/// `storage.max_age` in periods: as many roll-ups as the defaults keep (3 days of hours), so
/// that a roll-up's per-uid share has the budget an hour's has (half of `max_bytes` over
/// them), and none of these is cut.
const ROLLUPS_KEPT: u64 = 72;

/// A GET over the daemon's socket: (headers, body) of a 200 answer.
pub(crate) fn get(socket: &Path, path: &str) -> (String, String) {
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: profilerd\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.0 200"), "{head}\n{body}");
    (head.to_lowercase(), body.to_string())
}

/// A header's value.
pub(crate) fn header(head: &str, name: &str) -> String {
    head.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The roll-up files under `dir`: (start, end) in seconds.
pub(crate) fn rollups(dir: &Path) -> Vec<(f64, f64)> {
    fs::read_dir(dir.join("state/slices"))
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let (a, b) = name.strip_suffix(".hour.pb.gz")?.split_once('-')?;
            Some((a.parse::<f64>().ok()? / 1e9, b.parse::<f64>().ok()? / 1e9))
        })
        .collect()
}

fn write_config(dir: &Path, cap: f64) -> std::path::PathBuf {
    let config = dir.join("profilerd.toml");
    let text = format!(
        "[sampling]\nfrequency = {HZ}\nslice = \"1s\"\n\n[storage]\nstate_dir = \"{}\"\ncache_dir = \"{}\"\nmax_age = \"{}s\"\n\n[api]\nsocket = \"{}\"\n\n[budget]\nmax_cpu_percent = {cap:.3}\nwindow = \"2s\"\nmax_resident = \"8GiB\"\n",
        dir.join("state").display(),
        dir.join("cache").display(),
        ROLLUPS_KEPT * PERIOD,
        dir.join("profilerd.sock").display()
    );
    let tmp = config.with_extension("tmp");
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, &config).unwrap();
    config
}

/// The churn driver (tests/workloads/churn.c), built once.
pub(crate) fn churn() -> std::path::PathBuf {
    let out = workloads().dir.join("churn");
    if !out.exists() {
        compile_with(
            "churn.c",
            &out,
            &["-O1", "-g", "-fno-omit-frame-pointer", "-Wall"],
            &["-pthread"],
        );
    }
    out
}

#[test]
fn daemon_rollups_never_lower_the_frequency_and_answer_as_their_slices() {
    let _guard = sampling_lock();
    let dir = scratch();
    let config = write_config(dir.path(), 10_000.0);
    let mut load = Command::new(churn());
    load.arg("drive")
        .arg("400")
        .arg(dir.path().join("churn.out"))
        .arg("50");
    let _load = Spawned::spawn(load, "churn");
    let period = PERIOD.to_string();
    let daemon = Daemon::start_with(
        &config,
        &[("PROFILERD_TEST_ROLLUP_SECONDS", Path::new(&period))],
    );

    // The steady cost the budget judges (its 2-s window, once a second, for 40 s, after the
    // start-up's naming of every process running): the cap goes above its 90th percentile
    // (the pipeline's own cost comes in bursts too: naming each new process of the churn).
    thread::sleep(Duration::from_secs(15));
    let mut readings = Vec::new();
    let until = Instant::now() + Duration::from_secs(40);
    while Instant::now() < until {
        readings.push(daemon.float_of("budget_cpu_percent"));
        thread::sleep(Duration::from_secs(1));
    }
    readings.sort_by(f64::total_cmp);
    let median = readings[readings.len() / 2];
    let p90 = readings[readings.len() * 9 / 10];
    let cap = (median * 1.4).max(p90 * 1.2) + 2.0;
    write_config(dir.path(), cap);
    assert!(send_signal(daemon.process.pid(), "HUP"));
    let configured = daemon.number("configured_frequency");
    let changes = daemon.number("budget_frequency_changes");
    let dropped = daemon.number("slices_dropped");
    eprintln!(
        "steady {median:.2}% (10th percentile {:.2}%, 90th {:.2}%, highest {:.2}%); cap {cap:.2}%",
        readings[readings.len() / 10],
        readings[readings.len() * 9 / 10],
        readings[readings.len() - 1]
    );

    // A period begun after the cap: queried while its slices are files, then rolled up.
    let p0 = ((unix_now() as u64) / PERIOD + 1) * PERIOD;
    let range = format!("/v1/folded?since={}&until={}", p0 + 3, p0 + 15);
    let deadline = Instant::now() + Duration::from_secs(4 * PERIOD + 60);
    let mut before = None;
    let mut rolled = None;
    let mut crossed = 0;
    while Instant::now() < deadline && crossed < 2 {
        let s = daemon.status().expect("status");
        let f: u64 = s["frequency"].parse().unwrap();
        let c: u64 = s["budget_frequency_changes"].parse().unwrap();
        assert!(
            f == configured && c == changes,
            "the frequency changed ({f} Hz, {c} changes; cap {cap:.2}%, steady {median:.2}%)\n--- log ---\n{}",
            daemon.process.stderr_now()
        );
        let now = unix_now();
        if before.is_none() && now > (p0 + 16) as f64 && now < (p0 + PERIOD - 5) as f64 {
            daemon.wait_slices_through((p0 + 15) as f64);
            let (head, body) = get(&daemon.socket, &range);
            assert!(
                header(&head, daemon_api::header::SLICES)
                    .parse::<u64>()
                    .unwrap()
                    > 1
            );
            before = Some(body);
        }
        let done: Vec<_> = rollups(dir.path());
        if rolled.is_none()
            && done
                .iter()
                .any(|r| r.0 <= (p0 + 3) as f64 && r.1 > (p0 + 15) as f64)
        {
            let (head, body) = get(&daemon.socket, &range);
            assert_eq!(
                header(&head, daemon_api::header::SLICES),
                "1",
                "read from the roll-up"
            );
            rolled = Some(body);
        }
        crossed = done.iter().filter(|r| r.0 >= p0 as f64).count();
        thread::sleep(Duration::from_millis(500));
    }
    // Two windows after the last roll-up, still unchanged.
    thread::sleep(Duration::from_secs(5));
    assert_eq!(daemon.number("budget_frequency_changes"), changes);
    assert_eq!(daemon.number("frequency"), configured);
    eprintln!(
        "slices dropped meanwhile: {}",
        daemon.number("slices_dropped") - dropped
    );
    let log = daemon.stop();
    assert!(crossed >= 2, "two roll-ups after the cap\n{log}");
    let (before, rolled) = (
        before.expect("queried from slices"),
        rolled.expect("rolled"),
    );
    assert!(!before.is_empty());
    assert_eq!(before, rolled, "the roll-up answers as its slices did");
    for line in log.lines().filter(|l| l.contains("rolled up")) {
        eprintln!("{line}");
    }
}

impl Daemon {
    fn float_of(&self, key: &str) -> f64 {
        self.status().expect("status")[key].parse().unwrap()
    }
}
