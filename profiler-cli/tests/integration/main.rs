//! End-to-end tests of `profctl record`: real C workloads with a known,
//! self-measured split of CPU time are profiled, and the folded stacks and
//! flamegraph the user gets are checked against what the workloads measured.
//!
//! Tests that judge sampling accuracy (shares, counts, CPU) hold [`common::sampling_lock`]
//! alone; tests that sample but judge no accuracy hold [`common::sampling_shared`] and run
//! beside each other, never beside an accuracy test. Waits go through [`poll`]: a test waits
//! for a condition, never for a fixed time, and `PROFCTL_TEST_TIME_SCALE` scales every
//! deadline.

mod cgroup;
mod common;
mod daemon;
mod daemon_frequency;
mod daemon_fresh;
mod daemon_hostile;
mod daemon_limits;
mod daemon_offcpu;
mod daemon_ops;
mod daemon_reload;
mod daemon_rename;
mod daemon_rollup;
mod daemon_seconds;
mod daemon_serve;
mod daemon_share;
mod daemon_snapshots;
mod daemon_times;
mod daemon_users;
mod docs;
mod errors;
mod fork_exec;
mod go;
mod hostile;
#[path = "../../../crates/symbolize/tests/support/hostile_elf.rs"]
mod hostile_elf;
mod nonroot;
mod offcpu;
mod pid;
mod poll;
mod pprof_files;
mod record_outputs;
mod sigint;
mod slow_debuginfod;
mod soak;
mod split;
mod symbols;
mod system;
mod threads;
mod timeline;
mod ui;
mod unwind;
mod unwind_edges;
mod webdriver;
