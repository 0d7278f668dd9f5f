//! `profctl record -- ./split --threads`: two pthreads with different splits
//! (6:3:1 and 1:6:3). The profiled shares, summed over both threads, must
//! match the CPU time the threads measured themselves.

use std::time::Duration;

use crate::common::*;

#[test]
fn record_command_two_threads_shares_match_measured_cpu() {
    // Shared: it records its own command only, and judges the shares of its functions against
    // the CPU the workload measured itself (a busy machine slows it, shifting no share).
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    let folded = dir.path().join("out.folded");
    let measured_path = dir.path().join("measured.txt");

    // 1.5 s of CPU per thread: ~3 s in total.
    let run = run_profctl(
        [
            "record".as_ref(),
            "--freq".as_ref(),
            FREQ.as_ref(),
            "--folded".as_ref(),
            folded.as_os_str(),
            "--".as_ref(),
            w.split.as_os_str(),
            "--threads".as_ref(),
            "1.5".as_ref(),
            measured_path.as_os_str(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    run.assert_success("record -- split --threads 1.5");

    let measured = read_measured(&measured_path);
    let stacks = read_folded(&folded);
    assert_names(&stacks, "split", &HOT);
    assert_shares(&stacks, "split", &measured);
}
