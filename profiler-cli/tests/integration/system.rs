//! `profctl record` with no target: the whole system, as root. The workload running beside it
//! appears under its own comm with its hot functions, and kernel frames are named.

use std::process::Command;
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
    // Beside other tests: it judges names (the workload's and the kernel's) and a floor of
    // half the samples the workload's own CPU time stands for; other tests only add samples.
    let _guard = sampling_shared_long();
    let w = workloads();
    let dir = scratch();
    let measured = dir.path().join("measured.txt");
    let folded = dir.path().join("system.folded");
    let mut cmd = Command::new(&w.split);
    cmd.arg("forever").arg(&measured);
    let mut workload = Spawned::spawn(cmd, "split forever");
    wait_for(
        "the workload's first report",
        Duration::from_secs(10),
        || match measured.exists() {
            true => Ok(()),
            false => Err(format!("no {}", measured.display())),
        },
    );
    // The workload's own CPU time around the recording (its file is rewritten every ~100 ms):
    // on a busy machine it gets less than a CPU, and the sample count is judged against what
    // it really ran.
    let cpu_before: u64 = read_measured(&measured).values().sum();
    let started = std::time::Instant::now();
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
    // The workload's next report covers the whole recording.
    let at_end: u64 = read_measured(&measured).values().sum();
    let cpu_after = wait_for(
        "the workload's next report",
        Duration::from_secs(10),
        || match read_measured(&measured).values().sum::<u64>() {
            now if now > at_end => Ok(now),
            now => Err(format!("{now} ns")),
        },
    );
    let cpu_around = cpu_after - cpu_before;
    let wall_around = started.elapsed().as_secs_f64();
    send_signal(workload.pid(), "TERM");
    let _ = workload.wait_timeout(Duration::from_secs(5));
    run.assert_success("record (whole system) --duration 2");
    let stacks = read_folded(&folded);
    assert_names(&stacks, "split", &HOT);
    // The workload ran for the whole 2 s, on at most a CPU, less when other work shares the
    // machine: expect FREQ samples per second of the CPU time it measured around profctl's
    // run, scaled to the 2 s recorded (profctl's start-up and naming are outside them). Half
    // of that is the floor.
    let split = comm_total(&stacks, "split");
    let cpu_recorded = cpu_around as f64 / 1e9 * (2.0 / wall_around).min(1.0);
    let expected = FREQ_HZ * cpu_recorded;
    assert!(
        split as f64 >= 0.5 * expected,
        "split has {split} samples, expected about {expected:.0} (it ran {:.2} s of CPU in \
         {wall_around:.2} s around profctl's run)\n{}",
        cpu_around as f64 / 1e9,
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
