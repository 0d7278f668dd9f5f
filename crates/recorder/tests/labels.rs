//! Thread labels of streamed windows on the real kernel: a process that a root parent forks
//! and that execs as another user is labelled with that user's uid (read from /proc when it
//! is first sampled after the exec), its parent's samples with root's.
//!
//! Needs root (whole-system sampling, and switching to uid 65534 with `setpriv`).

use std::process::Command;
use std::time::Duration;

use recorder::{RecordOptions, RecordTarget};

/// The unprivileged user the exec'd process runs as (Debian's `nobody`).
const NOBODY: u32 = 65534;

#[test]
fn a_process_exec_d_as_another_user_carries_its_uid() {
    if own_euid() != 0 {
        panic!("this test samples the whole system and switches users: run it as root");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut options = RecordOptions::new(RecordTarget::System);
    options.frequency = 499;
    options.window = Some(Duration::from_secs(1));
    options.drain_interval = recorder::defaults::WINDOW_DRAIN_INTERVAL;
    options.duration = Some(Duration::from_millis(3500));
    options.preload_symbols = None;
    // A shell loop exec'd as `nobody` by a root parent (setpriv switches, then execs),
    // burning CPU for 2.5 s, started once sampling runs.
    let child = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(500));
        Command::new("setpriv")
            .args([
                &format!("--reuid={NOBODY}"),
                &format!("--regid={NOBODY}"),
                "--clear-groups",
                "--",
                "sh",
                "-c",
                "end=$(($(date +%s) + 3)); while [ $(date +%s) -lt $end ]; do :; done",
            ])
            .status()
            .expect("setpriv runs")
    });
    let mut uids_of_sh = Vec::new();
    let mut on_window = |closed: recorder::ClosedWindow| {
        for stack in &closed.window.stacks {
            let thread = &closed.window.threads[stack.thread as usize];
            if thread.comm.as_deref() == Some("sh") {
                uids_of_sh.push((thread.uid, stack.count));
            }
        }
    };
    runtime
        .block_on(recorder::record(
            &options,
            None,
            std::future::pending(),
            &mut |_| {},
            &mut on_window,
        ))
        .expect("recording");
    assert!(child.join().unwrap().success(), "the workload ran");
    let samples: u64 = uids_of_sh.iter().map(|&(_, n)| n).sum();
    assert!(samples > 100, "the shell loop was sampled: {uids_of_sh:?}");
    let as_nobody: u64 = uids_of_sh
        .iter()
        .filter(|&&(uid, _)| uid == Some(NOBODY))
        .map(|&(_, n)| n)
        .sum();
    assert_eq!(
        as_nobody, samples,
        "every sample of the shell is labelled with uid {NOBODY}: {uids_of_sh:?}"
    );
}

fn own_euid() -> u32 {
    // The euid from /proc, without unsafe code in a test.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2)?.parse().ok())
        })
        .unwrap_or(u32::MAX)
}
