//! What to record and how.

use std::ffi::OsString;
use std::time::Duration;

use sampler::EventChoice;

/// What to profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordTarget {
    /// Every process.
    System,
    /// A running process, its threads and its children created while recording.
    Pid(u32),
    /// A command started for the recording; the recording ends when it exits.
    Command(Vec<OsString>),
}

/// How user stacks are walked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallGraph {
    /// The kernel follows frame pointers (cheap; broken by binaries built without them).
    Fp,
    /// Unwind a copy of the user stack with DWARF call-frame information.
    Dwarf,
    /// DWARF, continued from the frame-pointer chain where the stack copy runs out.
    #[default]
    Auto,
}

/// Defaults shared by the CLI and the daemon.
pub mod defaults {
    /// Bytes of user stack copied per sample for DWARF unwinding (see docs/unwinding.md).
    pub const STACK_BYTES: u32 = 16 * 1024;
    /// Longest time a record waits in a ring buffer when no progress is shown.
    pub const DRAIN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
    /// The drain interval while a live progress line is shown.
    pub const LIVE_DRAIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
    /// Ring buffer pages when stacks are copied: each sample is ~16 KiB instead of ~0.3 KiB.
    /// Large on purpose: the reader wakes at a quarter ring, and each wake-up costs more CPU
    /// (tens of µs in a VM) than the kernel zeroing a larger ring once (measured at 999 Hz:
    /// 512 pages 22-30 ms of profctl CPU for 5 s, 1024 pages 17-18 ms, 2048 pages 15-19 ms,
    /// 4096 pages 19 ms).
    pub const RING_PAGES_WITH_STACKS: usize = 2048;
}

/// Options of one recording.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    /// What to profile.
    pub target: RecordTarget,
    /// Samples per second.
    pub frequency: u64,
    /// Stop after this long (None: until the command exits or the stop signal).
    pub duration: Option<Duration>,
    /// Sample kernel code and kernel callchains when permitted.
    pub include_kernel: bool,
    /// Data pages per ring buffer (a power of two).
    pub ring_pages: usize,
    /// Which event.
    pub event: EventChoice,
    /// Longest time a record waits in a ring buffer before it is read (rings are also read
    /// whenever a quarter of one fills, and at every side-band record). Each wake-up costs
    /// CPU (about 100 µs in a VM), so it is long unless someone watches the progress.
    pub drain_interval: Duration,
    /// How user stacks are walked.
    pub call_graph: CallGraph,
    /// Bytes of user stack copied per sample (DWARF and auto modes).
    pub stack_bytes: u32,
    /// Open the symbolizers of binaries that samples land in while recording, searching
    /// for debug files here (None: everything is opened after recording).
    pub preload_symbols: Option<symbolize::DebugSearch>,
    /// Where frames are kept between runs, per build-id (None: not kept).
    pub frame_cache_dir: Option<std::path::PathBuf>,
}

impl RecordOptions {
    /// Options with the shared defaults.
    pub fn new(target: RecordTarget) -> RecordOptions {
        RecordOptions {
            target,
            frequency: sampler::defaults::FREQUENCY,
            duration: None,
            include_kernel: true,
            ring_pages: sampler::defaults::RING_PAGES,
            event: EventChoice::Auto,
            drain_interval: defaults::DRAIN_INTERVAL,
            call_graph: CallGraph::Auto,
            stack_bytes: defaults::STACK_BYTES,
            preload_symbols: Some(symbolize::DebugSearch::system()),
            frame_cache_dir: crate::user_cache_dir().map(|d| d.join("frames")),
        }
    }
}
