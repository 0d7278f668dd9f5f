//! `profctl record` with no target: the whole system, as root. The workload running beside it
//! appears under its own comm with its hot functions, and kernel frames are named.

use std::process::Command;
use std::thread;
use std::time::Duration;

use crate::common::*;

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

#[test]
fn whole_system_recording_names_a_running_workload_and_the_kernel() {
    if !is_root() {
        eprintln!(
            "note: not root: the whole-system recording is covered by the nonroot test's refusal"
        );
        return;
    }
    let _guard = sampling_lock();
    let w = workloads();
    let dir = scratch();
    let measured = dir.path().join("measured.txt");
    let folded = dir.path().join("system.folded");
    let mut cmd = Command::new(&w.split);
    cmd.arg("forever").arg(&measured);
    let mut workload = Spawned::spawn(cmd, "split forever");
    for _ in 0..100 {
        if measured.exists() {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let run = run_profctl(
        [
            "record",
            "--duration",
            "2",
            "--freq",
            FREQ,
            "--folded",
            folded.to_str().unwrap(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    send_signal(workload.pid(), "TERM");
    let _ = workload.wait_timeout(Duration::from_secs(5));
    run.assert_success("record (whole system) --duration 2");
    let stacks = read_folded(&folded);
    assert_names(&stacks, "split", &HOT);
    // The workload kept one CPU busy for the whole 2 s: about 2 × FREQ samples of its own,
    // whatever else (idle, other tests' compilers) ran on the other CPU. Half is the floor.
    let split = comm_total(&stacks, "split");
    let expected = 2.0 * FREQ_HZ;
    assert!(
        split as f64 >= 0.5 * expected,
        "split has {split} samples, expected about {expected:.0}\n{}",
        comm_summary(&stacks)
    );
    // Whole-system recordings include kernel frames, named from kallsyms.
    assert!(
        stacks
            .iter()
            .any(|s| s.frames.iter().any(|f| f.starts_with("entry_SYSCALL")
                || f.starts_with("asm_")
                || f == "do_syscall_64"
                || f.contains("idle"))),
        "no named kernel frame in a whole-system recording\n{}",
        top_lines(&stacks, 20)
    );
}
