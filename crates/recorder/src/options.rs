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
    /// A process held before its exec by whoever started it (see [`crate::Launched`]): as
    /// [`RecordTarget::Pid`], counted from its exec on.
    PidAtExec(u32),
    /// A command started for the recording; the recording ends when it exits.
    Command(Vec<OsString>),
}

/// What time a recording measures: declared with its wire names in `daemon-api`, which
/// profctl and profilerd share.
pub use daemon_api::Measure;

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

impl std::fmt::Display for CallGraph {
    /// The mode as `--call-graph` spells it: `fp`, `dwarf` or `auto`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CallGraph::Fp => "fp",
            CallGraph::Dwarf => "dwarf",
            CallGraph::Auto => "auto",
        })
    }
}

/// Defaults shared by the CLI and the daemon.
pub mod defaults {
    /// Bytes of user stack copied per sample for DWARF unwinding (see docs/unwinding.md).
    pub const STACK_BYTES: u32 = 16 * 1024;
    /// Context switches sampled per second at most, in off-CPU and wall-clock recordings
    /// (every switch is still counted; see [`crate::RecordOptions::switch_cap`]).
    pub const SWITCH_CAP: u64 = 10_000;
    /// Longest time a record waits in a ring buffer when no progress is shown.
    pub const DRAIN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
    /// The drain interval when recording in windows (`RecordOptions::window`) while
    /// processes start, map files or end (side-band records came in the last round), and
    /// whenever the rings leave too little room at their watermark for the rest tick. A
    /// window closes the rest tick and 100 ms after its end.
    pub const WINDOW_DRAIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(500);
    /// The drain interval when recording in windows after a round without side-band
    /// records (no process started, mapped a file or ended: nothing whose files must be
    /// opened while they exist): longer than a busy CPU's ring takes to reach its watermark
    /// at 99 Hz (1.8 s, see [`ring_pages_streaming`]), so that at rest the watermarks alone
    /// start the rounds (`RecordOptions::drain_interval_at_rest`).
    pub const WINDOW_REST_INTERVAL: std::time::Duration = std::time::Duration::from_secs(2);
    /// Seconds of samples a streaming ring holds (see [`ring_pages_streaming`]).
    const STREAMING_RING_SECONDS: f64 = 2.0;
    /// Bytes of side-band records that wake the reader when recording in windows: more than
    /// the side-band ring holds, so that it is read at the drain tick and woken only when
    /// three quarters full (a fork/exec storm), never per process.
    pub const SIDEBAND_WATERMARK: u32 = u32::MAX;
    /// Data pages of each side-band ring when recording in windows (1 MiB with 4 KiB pages):
    /// under a churn of 50 execs a second (about 3 KiB of mmap, comm, fork and exit records
    /// each), the three-quarter watermark is reached about every 5 s per CPU, not at every
    /// 96 KiB (several times a second) as with the 32 pages of a single recording.
    pub const SIDEBAND_RING_PAGES_STREAMING: usize = 256;
    /// The drain interval while a live progress line is shown.
    pub const LIVE_DRAIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
    /// Most ring buffer pages chosen by [`ring_pages_with_stacks`] (8 MiB per CPU).
    pub const RING_PAGES_WITH_STACKS: usize = 2048;
    /// Fewest ring buffer pages chosen by [`ring_pages_with_stacks`] (1 MiB per CPU).
    const MIN_RING_PAGES_WITH_STACKS: usize = 256;
    /// When stacks are copied, the reader is woken when three quarters of a ring are filled,
    /// if the quarter left holds a tenth of a second of samples (see
    /// [`wakeup_percent_with_stacks`]).
    pub const WAKEUP_PERCENT_WITH_STACKS: u8 = 75;

    /// Bytes per second of sample records per CPU at `frequency` with `stack_bytes` copied.
    fn stack_bytes_per_second(frequency: u64, stack_bytes: u32) -> f64 {
        /// Sample record bytes besides the stack copy (header, ids, callchain, registers).
        const RECORD_OVERHEAD: f64 = 1024.0;
        frequency as f64 * (f64::from(stack_bytes) + RECORD_OVERHEAD)
    }

    /// Seconds of samples a ring of `ring_pages` holds at `frequency` Hz with `stack_bytes`
    /// of stack copied per sample (0 when none is).
    pub fn ring_seconds(ring_pages: usize, frequency: u64, stack_bytes: u32) -> f64 {
        (ring_pages * 4096) as f64 / stack_bytes_per_second(frequency.max(1), stack_bytes)
    }

    /// When to wake the reader, in percent of a ring of `ring_pages`, when stacks are
    /// copied: at three quarters when the quarter left holds a tenth of a second of samples,
    /// else at half, else at a quarter (a ring the user or the locked-memory limit made
    /// small keeps its room for the reader's lateness).
    pub fn wakeup_percent_with_stacks(ring_pages: usize, frequency: u64, stack_bytes: u32) -> u8 {
        let tenth = stack_bytes_per_second(frequency, stack_bytes) * 0.1;
        let ring = (ring_pages * 4096) as f64;
        if ring / 4.0 >= tenth {
            WAKEUP_PERCENT_WITH_STACKS
        } else if ring / 2.0 >= tenth {
            50
        } else {
            25
        }
    }

    /// Ring buffer pages per CPU when `stack_bytes` of stack are copied with each sample at
    /// `frequency` Hz: the quarter of a ring left when the reader is woken (at three
    /// quarters) holds at least a tenth of a second of samples, the reader's allowed
    /// lateness; a power of two between 256 and [`RING_PAGES_WITH_STACKS`].
    ///
    /// Each wake-up costs tens of µs of CPU in a VM, more than the kernel zeroing a few
    /// more ring pages once. Measured at 999 Hz with 16 KiB stacks (profctl's own CPU for a
    /// 5 s recording, median of 14 interleaved runs): 2048 pages woken at three quarters
    /// 13.9 ms (22 wake-ups), 1024 pages woken at half 15.1 ms (48); earlier, 2048 at a
    /// quarter 15.6 ms, 512 at half 17.1 ms.
    pub fn ring_pages_with_stacks(frequency: u64, stack_bytes: u32) -> usize {
        /// Seconds of samples a whole ring holds.
        const RING_SECONDS: f64 = 0.4;
        let bytes = stack_bytes_per_second(frequency, stack_bytes) * RING_SECONDS;
        let pages = (bytes / 4096.0).ceil().min(RING_PAGES_WITH_STACKS as f64) as usize;
        pages
            .next_power_of_two()
            .clamp(MIN_RING_PAGES_WITH_STACKS, RING_PAGES_WITH_STACKS)
    }

    /// Ring buffer pages per CPU when streaming windows with `stack_bytes` of stack copied
    /// per sample at `frequency` Hz: a ring holds [`STREAMING_RING_SECONDS`] of samples, so
    /// that at low frequencies its three-quarter watermark comes every 1.5 s or more while
    /// its CPU is busy, and a quarter of it (a busy reader's room) holds half a second;
    /// a power of two between 256 pages and [`RING_PAGES_WITH_STACKS`], never fewer than
    /// [`ring_pages_with_stacks`].
    pub fn ring_pages_streaming(frequency: u64, stack_bytes: u32) -> usize {
        let seconds = STREAMING_RING_SECONDS;
        let bytes = stack_bytes_per_second(frequency, stack_bytes) * seconds;
        let pages = (bytes / 4096.0).ceil().min(RING_PAGES_WITH_STACKS as f64) as usize;
        pages
            .next_power_of_two()
            .clamp(MIN_RING_PAGES_WITH_STACKS, RING_PAGES_WITH_STACKS)
            .max(ring_pages_with_stacks(frequency, stack_bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::defaults::{
        ring_pages_streaming, ring_pages_with_stacks, wakeup_percent_with_stacks,
    };

    #[test]
    fn streaming_rings_hold_two_seconds() {
        // 99 Hz x 17 KiB x 2 s = 3.4 MB: 842 pages, rounded up to 1024.
        assert_eq!(ring_pages_streaming(99, 16 * 1024), 1024);
        assert_eq!(ring_pages_streaming(19, 16 * 1024), 256);
        assert_eq!(ring_pages_streaming(999, 16 * 1024), 2048);
    }

    #[test]
    fn a_quarter_of_a_stack_ring_holds_a_tenth_of_a_second() {
        // 999 Hz x 17 KiB = 17 MB/s per CPU: 0.4 s is 1699 pages, rounded up to 2048.
        assert_eq!(ring_pages_with_stacks(999, 16 * 1024), 2048);
        assert_eq!(ring_pages_with_stacks(99, 16 * 1024), 256);
        assert_eq!(ring_pages_with_stacks(4000, 16 * 1024), 2048);
        assert_eq!(ring_pages_with_stacks(50_000, 65_528), 2048);
        assert_eq!(ring_pages_with_stacks(999, 4096), 512);
    }

    #[test]
    fn the_reader_wakes_late_only_where_the_ring_leaves_room() {
        assert_eq!(wakeup_percent_with_stacks(2048, 999, 16 * 1024), 75);
        // 4000 Hz: a quarter of 8 MiB is 30 ms of samples, half is 60 ms: a quarter.
        assert_eq!(wakeup_percent_with_stacks(2048, 4000, 16 * 1024), 25);
        assert_eq!(wakeup_percent_with_stacks(2048, 2000, 16 * 1024), 50);
        // A ring cut to 128 pages by the locked-memory limit: a quarter.
        assert_eq!(wakeup_percent_with_stacks(128, 999, 16 * 1024), 25);
    }
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
    /// whenever one fills to its watermark, and at every side-band record). Each wake-up
    /// costs CPU (about 100 µs in a VM), so it is long unless someone watches the progress.
    pub drain_interval: Duration,
    /// A longer drain interval after a round that read no side-band record (no process
    /// started, mapped a file or ended meanwhile), when set: fewer wake-ups at rest, while
    /// churn is still read at `drain_interval` (its binaries are opened while they exist).
    /// Taken only while a sample ring has room at its watermark for half a second of
    /// samples at the frequency in effect (rings at their largest, or cut by the
    /// locked-memory limit, fill faster at high frequencies). Windows close the longer
    /// interval (at least two `drain_interval`s) and 100 ms after their end.
    pub drain_interval_at_rest: Option<Duration>,
    /// How user stacks are walked.
    pub call_graph: CallGraph,
    /// Bytes of user stack copied per sample (DWARF and auto modes).
    pub stack_bytes: u32,
    /// Open the symbolizers of binaries that samples land in while recording, searching
    /// for debug files here (None: everything is opened after recording).
    pub preload_symbols: Option<symbolize::DebugSearch>,
    /// Where frames are kept between runs, per build-id (None: not kept).
    pub frame_cache_dir: Option<std::path::PathBuf>,
    /// debuginfod, whose cache is searched for the debug file of a binary whose own unwind
    /// tables miss its code (nothing is downloaded while sampling). None: not searched.
    pub debuginfod: Option<debuginfod::DebuginfodConfig>,
    /// Close a time window of samples every this long (None: one window, the whole
    /// recording).
    pub window: Option<Duration>,
    /// A handle through which the frequency can be changed while recording (None: fixed).
    pub frequency_control: Option<crate::FrequencyControl>,
    /// What time is measured (CPU, off-CPU, wall-clock).
    pub measure: Measure,
    /// A handle through which snapshots of the open windows are asked while recording
    /// (None: windows are handed on only as they close).
    pub snapshots: Option<crate::SnapshotControl>,
    /// Off-CPU and wall-clock recordings: context switches sampled (stack taken) per second
    /// at most, 0 for every one. Switches start sampled one in one; about every 50 ms the
    /// period is raised to the switch rate divided by the cap (lowered when the rate halves).
    /// Every switch still has a switch record: a sample's time off CPU is scaled by the
    /// switches of its thread it stood for.
    pub switch_cap: u64,
}

impl RecordOptions {
    /// Options with the shared defaults (nothing read from the environment: no frame cache,
    /// no debuginfod).
    pub fn new(target: RecordTarget) -> RecordOptions {
        RecordOptions {
            target,
            frequency: sampler::defaults::FREQUENCY,
            duration: None,
            include_kernel: true,
            ring_pages: sampler::defaults::RING_PAGES,
            event: EventChoice::Auto,
            drain_interval: defaults::DRAIN_INTERVAL,
            drain_interval_at_rest: None,
            call_graph: CallGraph::Auto,
            stack_bytes: defaults::STACK_BYTES,
            preload_symbols: Some(symbolize::DebugSearch::system()),
            frame_cache_dir: None,
            debuginfod: None,
            window: None,
            frequency_control: None,
            measure: Measure::Cpu,
            snapshots: None,
            switch_cap: defaults::SWITCH_CAP,
        }
    }
}
