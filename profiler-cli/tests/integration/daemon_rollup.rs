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
use std::time::Duration;

use crate::common::*;
use crate::daemon::{number_in, unix_now, Daemon};

/// The roll-up period of this test, seconds (each roll-up holds this many 1-s slices).
const PERIOD: u64 = 6;

/// The budget's window, seconds (two readings a window).
const WINDOW: f64 = 2.0;

/// Readings of the steady cost (one a second) the cap is set from: four budget windows (the
/// highest of them is the 90th percentile).
const READINGS: usize = 8;

/// The sampling frequency of this test.
const HZ: u64 = 299;

/// `storage.max_age` in periods: as many roll-ups as the defaults keep (3 days of hours), so
/// that a roll-up's per-uid share has the budget an hour's has (half of `max_bytes` over
/// them), and none of these is cut.
const ROLLUPS_KEPT: u64 = 72;

/// A GET over the daemon's socket: (headers, body) of a 200 answer.
pub(crate) fn get(socket: &Path, path: &str) -> (String, String) {
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(scaled(Duration::from_secs(30))))
        .unwrap();
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
        "[sampling]\nfrequency = {HZ}\nslice = \"1s\"\n\n[storage]\nstate_dir = \"{}\"\ncache_dir = \"{}\"\nmax_age = \"{}s\"\n\n[api]\nsocket = \"{}\"\n\n[budget]\nmax_cpu_percent = {cap:.3}\nwindow = \"{WINDOW}s\"\nmax_resident = \"8GiB\"\n",
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

/// The roll-up files under `dir` in the daemon's index: (start, end) in seconds; Err while a
/// roll-up file is on disk that `rollups_written` does not count yet (renamed into place, not
/// yet indexed: a query may still read its slices). The state directory is the test's own:
/// every roll-up there is one this daemon wrote.
pub(crate) fn indexed_rollups(daemon: &Daemon, dir: &Path) -> Result<Vec<(f64, f64)>, String> {
    let written = daemon.number("rollups_written") as usize;
    let files = rollups(dir);
    if files.len() <= written {
        Ok(files)
    } else {
        Err(format!("{} roll-up files, {written} indexed", files.len()))
    }
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

    // The steady cost the budget judges (its 2-s window, once a second, for READINGS s, once
    // the start-up's naming of every process running is done and a window of steady work
    // named): the cap goes above its 90th percentile (the pipeline's own cost comes in bursts
    // too: naming each new process of the churn).
    daemon.wait_start_up_named();
    daemon.wait_slices_through(unix_now() + WINDOW);
    let mut readings = Vec::new();
    for _ in 0..READINGS {
        readings.push(daemon.float("budget_cpu_percent"));
        hold(Duration::from_secs(1));
    }
    readings.sort_by(f64::total_cmp);
    let median = readings[readings.len() / 2];
    let p90 = readings[readings.len() * 9 / 10];
    let cap = (median * 2.0).max(p90 * 1.5) + 4.0;
    write_config(dir.path(), cap);
    assert!(send_signal(daemon.process.pid(), "HUP"));
    daemon.wait_status("the cap applied", Duration::from_secs(10), |s| {
        s.get("budget_max_cpu_percent")
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(|v| (v - cap).abs() < 0.01)
    });
    let configured = daemon.number("configured_frequency");
    let changes = daemon.number("budget_frequency_changes");
    let dropped = daemon.number("slices_dropped");
    let rollups_at_cap = daemon.number("rollups_written");
    eprintln!(
        "steady {median:.2}% (10th percentile {:.2}%, 90th {:.2}%, highest {:.2}%); cap {cap:.2}%",
        readings[readings.len() / 10],
        readings[readings.len() * 9 / 10],
        readings[readings.len() - 1]
    );
    // From here on, every status the test reads shows the frequency unchanged.
    let steady = |s: &std::collections::BTreeMap<String, String>| {
        let (f, c) = (
            number_in(s, "frequency"),
            number_in(s, "budget_frequency_changes"),
        );
        assert!(
            f == configured && c == changes,
            "the frequency changed ({f} Hz, {c} changes; cap {cap:.2}%, steady {median:.2}%)\n--- log ---\n{}",
            daemon.process.stderr_now()
        );
    };

    // A period begun after the cap: queried while its slices are files, then rolled up.
    let p0 = ((unix_now() as u64) / PERIOD + 1) * PERIOD;
    // Its third and fourth seconds: two slices, and two more before the period ends.
    let (since, until) = (p0 + 2, p0 + PERIOD - 2);
    let range = format!("/v1/folded?since={since}&until={until}");
    daemon.wait_status(
        "the period's first four seconds written as slices",
        Duration::from_secs(2 * PERIOD + 30),
        |s| {
            steady(s);
            number_in(s, "newest_slice_end_ns") >= until * 1_000_000_000
        },
    );
    let (head, before) = get(&daemon.socket, &range);
    let read = header(&head, daemon_api::header::SLICES);
    assert!(
        read.parse::<u64>().unwrap() > 1,
        "read from slices, before the period's roll-up: {read} files"
    );
    assert!(!before.is_empty());

    // The period rolled up: the same range is read from one file, with the same answer.
    let covering = |r: &(f64, f64)| r.0 <= since as f64 && r.1 > until as f64;
    wait_for(
        "the period's roll-up indexed",
        Duration::from_secs(2 * PERIOD + 60),
        || {
            steady(&daemon.status().expect("status"));
            match indexed_rollups(&daemon, dir.path())? {
                r if r.iter().any(covering) => Ok(()),
                r => Err(format!("roll-ups {r:?}")),
            }
        },
    );
    let (head, rolled) = get(&daemon.socket, &range);
    assert_eq!(
        header(&head, daemon_api::header::SLICES),
        "1",
        "read from the roll-up"
    );
    assert_eq!(before, rolled, "the roll-up answers as its slices did");

    // Two roll-ups written since the cap: the period before the range's, handed over when
    // its last slice was written (after the cap), and the range's own. Then two windows of the
    // pipeline's work past the last, still unchanged. (A third period's roll-up used to be
    // waited for as well: a period more, with one more boundary of the same kind.)
    daemon.wait_status(
        "two roll-ups written since the cap",
        Duration::from_secs(2 * PERIOD + 60),
        |s| {
            steady(s);
            number_in(s, "rollups_written") >= rollups_at_cap + 2
        },
    );
    let rolled_at = unix_now();
    daemon.wait_status(
        "two budget windows past the last roll-up",
        Duration::from_secs(30),
        |s| {
            steady(s);
            number_in(s, "newest_slice_end_ns") as f64 >= (rolled_at + 2.0 * WINDOW + 1.0) * 1e9
        },
    );
    eprintln!(
        "slices dropped meanwhile: {}",
        daemon.number("slices_dropped") - dropped
    );
    let log = daemon.stop();
    for line in log.lines().filter(|l| l.contains("rolled up")) {
        eprintln!("{line}");
    }
}
