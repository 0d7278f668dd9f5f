//! An hour (an 18-s roll-up period here, `PROFILERD_TEST_ROLLUP_SECONDS`) in which the budget
//! lowers the sampling frequency (a cap set below the daemon's cost) and then raises it again
//! (the cap lifted) rolls up like any other, and the roll-up answers a query over part of the
//! period exactly as its slices did. (Such an hour used to stay as slices: "the sampling
//! frequency changed within the hour".)

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use crate::daemon::{unix_now, Daemon};
use crate::daemon_rollup::{get, header, indexed_rollups};

/// The roll-up period of this test, seconds: [`NEEDED`] and 2 s more (a period whose first
/// seconds are past waits for the next: the shorter the period, the shorter that wait). The
/// range starts at most 2 s into the period, so it is 10 s or more long: more than 10 slices.
const PERIOD: u64 = 18;

/// Seconds of a period the test needs from its first change: the frequency lowered and
/// raised again (a few budget windows of [`WINDOW`]: two over the cap lower it, raising starts
/// three after the lowering), then more than 10 slices before the range's end, which is 6 s
/// before the period's.
const NEEDED: u64 = 16;

/// The budget's window, seconds: one slice, the shortest the daemon takes (it reads the
/// pipeline's CPU once a second at any window up to 6 s). Lowering takes two windows over the
/// cap and raising starts three after it, so windows of 2 s took twice as long and the period
/// had to be 22 s; with 1-s windows the frequency was lowered and raised 3.4-6.3 s after the
/// cap was set in three runs here.
const WINDOW: u64 = 1;

/// The cap that lowers the frequency: a hundredth of a percent of a core, under any cost the
/// daemon can have.
const UNDER_ANY_COST: f64 = 0.01;

fn write_config(dir: &Path, cap: f64) -> PathBuf {
    let config = dir.join("profilerd.toml");
    let text = format!(
        "[sampling]\nfrequency = 999\nslice = \"1s\"\n\n[storage]\nstate_dir = \"{}\"\ncache_dir = \"{}\"\nmax_age = \"{}s\"\n\n[api]\nsocket = \"{}\"\n\n[budget]\nmax_cpu_percent = {cap:.3}\nwindow = \"{WINDOW}s\"\nmax_resident = \"8GiB\"\n",
        dir.join("state").display(),
        dir.join("cache").display(),
        // As many periods as the defaults keep hours (3 days): a roll-up's per-uid share
        // then has an hour's budget, as in daemon_rollup.
        72 * PERIOD,
        dir.join("profilerd.sock").display()
    );
    let tmp = config.with_extension("tmp");
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, &config).unwrap();
    config
}

fn number(s: &std::collections::BTreeMap<String, String>, key: &str) -> f64 {
    s[key]
        .parse()
        .unwrap_or_else(|_| panic!("{key}: {:?}", s[key]))
}

#[test]
fn daemon_an_hour_whose_frequency_the_budget_changed_rolls_up_and_answers_as_its_slices() {
    // Beside other tests: the cap is set far under any cost the daemon can have (0.01% of a
    // core), so that it lowers the frequency however busy the machine is, and what is judged
    // (the roll-up against the slices) is exact.
    let _guard = sampling_shared_long();
    let dir = scratch();
    let w = workloads();
    let mut cmd = Command::new(&w.split);
    cmd.arg("forever").arg(dir.path().join("split.measured"));
    let _split = Spawned::spawn(cmd, "split");
    let config = write_config(dir.path(), 10_000.0);
    let period = PERIOD.to_string();
    let daemon = Daemon::start_with(
        &config,
        &[("PROFILERD_TEST_ROLLUP_SECONDS", Path::new(&period))],
    );
    let configured = daemon.number("configured_frequency");

    // Within one period, from `a` (this period, when NEEDED seconds of it are left, else the
    // next from its start): the cap set under the cost lowers the frequency, the cap lifted
    // raises it again.
    let now = unix_now();
    let mut p0 = (now as u64) / PERIOD * PERIOD;
    let mut a = now.ceil() as u64 + 1;
    if a + NEEDED > p0 + PERIOD {
        p0 += PERIOD;
        a = p0 + 1;
    }
    hold_until(a as f64 - 0.5);
    let changes = daemon.number("budget_frequency_changes");
    write_config(dir.path(), UNDER_ANY_COST);
    assert!(send_signal(daemon.process.pid(), "HUP"));
    daemon.wait_status("the frequency lowered", Duration::from_secs(20), |s| {
        number(s, "frequency") < configured as f64
    });
    let lowered = daemon.number("frequency");
    write_config(dir.path(), 10_000.0);
    assert!(send_signal(daemon.process.pid(), "HUP"));
    daemon.wait_status("the frequency raised", Duration::from_secs(20), |s| {
        number(s, "frequency") > lowered as f64
    });
    let changed = unix_now();
    assert!(
        changed < (p0 + PERIOD - 6) as f64,
        "the budget took {:.1} s to lower and raise the frequency, from {:.1} s into the {PERIOD}-s period",
        changed - a as f64 + 0.5,
        a as f64 - 0.5 - p0 as f64
    );
    assert!(daemon.number("budget_frequency_changes") >= changes + 2);

    // Part of the period, across both changes, while its slices are files; then rolled up.
    let b = p0 + PERIOD - 6;
    let range = format!("/v1/folded?since={a}&until={b}");
    daemon.wait_slices_through(b as f64);
    let (head, before) = get(&daemon.socket, &range);
    assert!(
        header(&head, daemon_api::header::SLICES)
            .parse::<u64>()
            .unwrap()
            > 10
    );
    crate::poll::wait_for(
        "the period rolled up and indexed",
        Duration::from_secs(2 * PERIOD + 30),
        || match indexed_rollups(&daemon, dir.path())? {
            r if r.iter().any(|r| r.0 <= a as f64 && r.1 >= b as f64) => Ok(()),
            r => Err(format!("roll-ups {r:?}")),
        },
    );
    let (head, rolled) = get(&daemon.socket, &range);
    assert_eq!(
        header(&head, daemon_api::header::SLICES),
        "1",
        "read from the roll-up"
    );
    let log = daemon.stop();
    assert!(!log.contains("hour left as slices"), "{log}");
    assert!(!before.is_empty());
    assert_eq!(before, rolled, "the roll-up answers as its slices did");
    eprintln!(
        "{configured} Hz lowered to {lowered} Hz and raised {:.1} s after the cap was set, {:.1} s into the {PERIOD}-s period; {} folded lines",
        changed - a as f64 + 0.5,
        changed - p0 as f64,
        before.lines().count()
    );
}
