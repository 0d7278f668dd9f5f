//! Ctrl-C: SIGINT to `profctl record -o .. --folded .. -- ./split 30` after
//! ~2 s ends the recording cleanly and promptly, and both outputs are still
//! written, complete and naming the hot functions.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

#[test]
fn sigint_ends_recording_and_still_writes_outputs() {
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    let folded = dir.path().join("out.folded");
    let svg = dir.path().join("out.svg");

    let mut cmd = Command::new(profctl());
    cmd.current_dir(dir.path())
        .arg("record")
        .args(["--freq", FREQ])
        .arg("-o")
        .arg(&svg)
        .arg("--folded")
        .arg(&folded)
        .arg("--")
        .arg(&w.split)
        .arg("30")
        .arg(dir.path().join("measured.txt"));
    let mut profctl = Spawned::spawn(cmd, "profctl record -- split 30");

    // Interrupted once the workload has had a second of CPU: enough samples to name.
    wait_for(
        "a second of the workload's CPU",
        Duration::from_secs(30),
        || {
            let cpu: f64 = descendants(profctl.pid())
                .into_iter()
                .map(cpu_seconds)
                .sum();
            if profctl.wait_timeout(Duration::ZERO).is_some() || cpu >= 1.0 {
                Ok(())
            } else {
                Err(format!("{cpu:.2} s of CPU"))
            }
        },
    );
    if let Some(run) = profctl.wait_timeout(Duration::ZERO) {
        panic!(
            "profctl exited before SIGINT ({})\n--- stderr ---\n{}",
            run.status, run.stderr
        );
    }
    // Remember the workload so it can be cleaned up afterwards, whatever
    // profctl does with it.
    let workload_pids = descendants(profctl.pid());

    let sent = Instant::now();
    assert!(send_signal(profctl.pid(), "INT"), "kill -INT failed");
    let run = profctl.wait_timeout(scaled(Duration::from_secs(10)));
    for p in workload_pids {
        send_signal(p, "KILL");
    }
    let Some(run) = run else {
        profctl.kill_tree();
        panic!("profctl still running 10 s after SIGINT");
    };
    let took = sent.elapsed();
    run.assert_success("record interrupted by SIGINT");
    assert!(
        took <= scaled(Duration::from_secs(5)),
        "profctl took {took:.1?} to exit after SIGINT"
    );

    let stacks = read_folded(&folded);
    assert_names(&stacks, "split", &HOT);
    check_svg(&svg);
}
