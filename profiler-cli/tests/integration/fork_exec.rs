//! `profctl record -- ./forker`: the recorded command forks and execs a child
//! (`burner`). The child is followed, and its samples appear under its own
//! comm with its own function; the parent's samples keep the parent's comm.

use std::time::Duration;

use crate::common::*;

#[test]
fn record_command_follows_fork_and_exec() {
    // Beside other tests: it records its own command only, and judges comms, names and
    // floors of half the samples the CPU seconds its processes burn stand for.
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    let folded = dir.path().join("out.folded");
    let (parent_secs, child_secs) = (0.7, 1.5);

    let run = run_profctl(
        [
            "record".as_ref(),
            "--freq".as_ref(),
            FREQ.as_ref(),
            "--folded".as_ref(),
            folded.as_os_str(),
            "--".as_ref(),
            w.forker.as_os_str(),
            w.burner.as_os_str(),
            parent_secs.to_string().as_ref(),
            child_secs.to_string().as_ref(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    run.assert_success("record -- forker burner");

    let stacks = read_folded(&folded);
    let context = format!(
        "comms: {}\ntop folded lines:\n{}",
        comm_summary(&stacks),
        top_lines(&stacks, 20)
    );

    // The child: its own comm, its own function.
    let child = frame_count(&stacks, "burner", "child_hot");
    assert!(
        child > 0,
        "no line of comm \"burner\" names child_hot\n{context}"
    );
    let expected_child = child_secs * FREQ_HZ;
    assert!(
        child as f64 >= 0.5 * expected_child,
        "child_hot has {child} samples under \"burner\", expected about {expected_child:.0}\n{context}"
    );
    // The parent: its own comm.
    let parent = frame_count(&stacks, "forker", "parent_hot");
    let expected_parent = parent_secs * FREQ_HZ;
    assert!(
        parent as f64 >= 0.5 * expected_parent,
        "parent_hot has {parent} samples under \"forker\", expected about {expected_parent:.0}\n{context}"
    );
    // Nothing mixed up: each function only under its own process's comm.
    let misfiled: Vec<Stack> = stacks
        .iter()
        .filter(|s| {
            (s.has("child_hot") && s.comm != "burner")
                || (s.has("parent_hot") && s.comm != "forker")
        })
        .cloned()
        .collect();
    assert!(
        misfiled.is_empty(),
        "lines attributed to the wrong comm:\n{}\n{context}",
        top_lines(&misfiled, 10)
    );
}
