//! `profctl record -- ./split`: the single-threaded split workload, launched
//! by profctl. Checks the per-function shares against the CPU time the
//! workload measured, that the folded output names hot_a/hot_b/hot_c, and that
//! the unwinder keeps whole call paths (main;work;mid;hot_b).

use std::time::Duration;

use crate::common::*;

#[test]
fn record_command_shares_match_measured_cpu_and_paths_are_complete() {
    // Shared: it records its own command only, and judges the shares of its functions against
    // the CPU the workload measured itself (a busy machine slows it, shifting no share).
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    let folded = dir.path().join("out.folded");
    let svg = dir.path().join("out.svg");
    let measured_path = dir.path().join("measured.txt");

    let run = run_profctl(
        [
            "record".as_ref(),
            "--freq".as_ref(),
            FREQ.as_ref(),
            "-o".as_ref(),
            svg.as_os_str(),
            "--folded".as_ref(),
            folded.as_os_str(),
            "--".as_ref(),
            w.split.as_os_str(),
            "2.5".as_ref(),
            measured_path.as_os_str(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    run.assert_success("record -- split 2.5");

    let measured = read_measured(&measured_path);
    let stacks = read_folded(&folded);
    assert_names(&stacks, "split", &HOT);
    assert_shares(&stacks, "split", &measured);

    // >= 95 % of the samples in hot_b carry the whole path, in order.
    let path = ["main", "work", "mid", "hot_b"];
    let with_b: Vec<&Stack> = stacks
        .iter()
        .filter(|s| s.comm == "split" && s.has("hot_b"))
        .collect();
    let total_b: u64 = with_b.iter().map(|s| s.count).sum();
    let complete: u64 = with_b
        .iter()
        .filter(|s| s.has_path(&path))
        .map(|s| s.count)
        .sum();
    let broken: Vec<&Stack> = with_b
        .iter()
        .copied()
        .filter(|s| !s.has_path(&path))
        .collect();
    assert!(total_b > 0, "no hot_b samples");
    let frac = complete as f64 / total_b as f64;
    assert!(
        frac >= 0.95,
        "only {complete} of {total_b} hot_b samples ({:.1}%) carry main;work;mid;hot_b\n\
         stacks without the full path:\n{}",
        100.0 * frac,
        top_lines(&broken.into_iter().cloned().collect::<Vec<_>>(), 15)
    );

    check_svg(&svg);
}
