//! What a recording reports as it goes and when it ends: progress, counters, closed windows
//! with the sizes of what the recording holds.

use std::time::Duration;

use profile::NormalizedWindow;

/// A live view of a running recording, for progress displays.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Time since sampling started.
    pub elapsed: Duration,
    /// Samples so far.
    pub samples: u64,
    /// Samples the kernel dropped so far.
    pub lost: u64,
}

/// Counters of a recording.
#[derive(Clone, Debug, Default)]
pub struct RecordingStats {
    /// Samples read.
    pub samples: u64,
    /// Records the kernel dropped because a ring buffer was full.
    pub lost: u64,
    /// Times the kernel throttled sampling (too many interrupts).
    pub throttled: u64,
    /// Records too short for their type (skipped).
    pub malformed_records: u64,
    /// Ring-buffer batches cut short by a malformed header (skipped).
    pub malformed_batches: u64,
    /// Times the ring buffers were drained (wake-ups by watermark, side-band record or tick).
    pub drain_rounds: u64,
    /// The longest drain round: from its first record (or its end-of-round work, when it read
    /// none) to the end of that work (closing windows, progress). A round that long leaves the
    /// rings unread, so it bounds how close they come to losing samples.
    pub longest_round: Duration,
    /// Windows closed.
    pub windows: u64,
    /// Samples read after their window had closed (counted in the oldest open window).
    pub late_samples: u64,
    /// Context switches, when they were sampled (off-CPU and wall-clock recordings).
    pub switches: crate::SwitchStats,
}

/// A window as it closes (or as it stands, for a snapshot): its stacks, normalized, and what
/// the recording tracked then.
pub struct ClosedWindow {
    /// The window's stacks.
    pub window: NormalizedWindow,
    /// Sizes of the recording's state when the window closed.
    pub tracked: Tracked,
    /// Ids of files (as in [`profile::WindowFile::id`]) that no process maps any more,
    /// released since the previous window: caches kept for them can be dropped once this
    /// window is named.
    pub released_files: Vec<u32>,
    /// Processes (pid, start time as in [`profile::ThreadLabels::process_start`]) the
    /// process model forgot since the previous window: what is kept for them (JIT maps) can
    /// go once this window is named.
    pub ended_processes: Vec<(u32, u64)>,
    /// Samples per second per CPU in effect at the window's end (it may have changed during
    /// the window; each stack's `period` is the sum of its samples' own periods).
    pub frequency: u64,
    /// Set when this is not the window closing but a snapshot of it, still open, asked
    /// through [`crate::SnapshotControl`]: its samples so far (the window closes later, whole;
    /// `released_files` and `ended_processes` are empty).
    pub snapshot: Option<crate::OpenSnapshot>,
}

/// Sizes of what a recording holds, for bounds and status.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tracked {
    /// Processes in the process model.
    pub processes: usize,
    /// Threads in the process model.
    pub threads: usize,
    /// Mappings in the process model (current and superseded ones kept for open windows).
    pub mappings: usize,
    /// Distinct mapped files in the process model.
    pub files: usize,
    /// Binaries held open.
    pub pinned: usize,
    /// Processes with a DWARF unwinder.
    pub unwinder_processes: usize,
    /// Binaries whose unwind sections are held.
    pub unwind_sections: usize,
    /// Distinct stacks in windows still open.
    pub open_stacks: usize,
    /// Bytes of those stacks.
    pub open_stack_bytes: usize,
    /// Mappings the process model refused since the recording started, because their
    /// process held [`procmap::MAX_MAPPINGS`] already (their samples stay unnamed).
    pub mappings_dropped: u64,
    /// Context switches since the recording started, when they are sampled (off-CPU and
    /// wall-clock recordings, profilerd's `off_cpu`): seen, sampled, scaled, lost.
    pub switches: crate::SwitchStats,
    /// Threads off CPU whose switch-out stack waits for their switch back in (one each at
    /// most; released at the switch in or the thread's exit).
    pub off_cpu_waiting: usize,
}

/// This process's CPU time (all threads) at the phase boundaries of a recording, for `-vv`.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuMarks {
    /// When the events were open, mapped and enabled (the command started, if one was run).
    pub events_enabled: Duration,
    /// When sampling ended and the events were closed.
    pub sampling_ended: Duration,
    /// Of the CPU time between the two, what the thread draining the rings used (the rest is
    /// background work: reading kernel symbols, opening symbolizers).
    pub drain_thread: Duration,
}
