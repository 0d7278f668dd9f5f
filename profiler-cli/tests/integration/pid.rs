//! `profctl record --pid N --duration 5 -o out.svg --folded out.folded`:
//! attaching to an already running process. The recording stops by itself
//! after the duration, the flamegraph is well-formed SVG and both outputs
//! name the workload's hot functions.

use std::process::Command;
use std::time::Duration;

use crate::common::*;

#[test]
fn record_pid_for_duration_writes_svg_and_folded() {
    // Names, outputs and a duration's lower bound, not shares: beside other tests.
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    let folded = dir.path().join("out.folded");
    let svg = dir.path().join("out.svg");
    let measured_path = dir.path().join("measured.txt");

    let mut cmd = Command::new(&w.split);
    cmd.arg("forever").arg(&measured_path);
    let mut workload = Spawned::spawn(cmd, "split forever");
    // Wait until the workload is in its main loop (first periodic report).
    wait_for(
        "the workload's first report",
        Duration::from_secs(10),
        || match measured_path.exists() {
            true => Ok(()),
            false => Err(format!("no {}", measured_path.display())),
        },
    );

    let pid = workload.pid().to_string();
    let run = run_profctl(
        [
            "record",
            "--pid",
            &pid,
            "--freq",
            FREQ,
            "--duration",
            "5",
            "-o",
            svg.to_str().unwrap(),
            "--folded",
            folded.to_str().unwrap(),
        ],
        dir.path(),
        Duration::from_secs(40),
    );
    let still_running = workload.child.try_wait().expect("try_wait").is_none();
    send_signal(workload.pid(), "TERM");
    let _ = workload.wait_timeout(Duration::from_secs(5));

    run.assert_success("record --pid --duration 5");
    assert!(
        still_running,
        "the attached workload did not survive the recording"
    );
    assert!(
        run.elapsed >= Duration::from_millis(4500),
        "--duration 5 returned after only {:.1?}",
        run.elapsed
    );

    let stacks = read_folded(&folded);
    assert_names(&stacks, "split", &HOT);

    let text = check_svg(&svg);
    for f in HOT {
        assert!(
            text.lines().any(|l| l.starts_with(f)),
            "the flamegraph has no frame titled {f}"
        );
    }
}
