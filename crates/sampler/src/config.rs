//! What a sampling session is asked for (target, event, frequency, stacks, side-band and
//! switch records) and what it got.

use crate::event::EventKind;
use crate::record::SampleFormat;
#[cfg(doc)]
use crate::Sampler;

/// The largest user stack copy: a sample record's size is a u16, and registers and the
/// callchain need room too.
pub const MAX_STACK_BYTES: u32 = 60 * 1024;

/// What to sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every process on every CPU (needs CAP_PERFMON or perf_event_paranoid <= 0).
    System,
    /// One process: all its threads, and threads and children created while recording.
    Process {
        /// Process id.
        pid: u32,
        /// Start counting only when the process calls exec (for a command launched by us).
        enable_on_exec: bool,
    },
}

/// Which event to sample on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EventChoice {
    /// Hardware cycles where the machine has a PMU, else software cpu-clock.
    #[default]
    Auto,
    /// Force one event.
    Force(EventKind),
}

/// Defaults shared by the CLI and the daemon.
pub mod defaults {
    /// Sampling frequency in Hz (an odd number, to avoid lockstep with timers).
    pub const FREQUENCY: u64 = 999;
    /// Data pages per ring buffer (a power of two): 512 KiB with 4 KiB pages.
    pub const RING_PAGES: usize = 128;
    /// Bytes written before the kernel wakes the reader.
    pub const WAKEUP_WATERMARK: u32 = 64 * 1024;
    /// Data pages of each side-band ring (mmap, comm, fork, exit records: small and rare).
    pub const SIDEBAND_RING_PAGES: usize = 32;
    /// The reader is woken when a quarter of a ring is filled.
    pub const WAKEUP_PERCENT: u8 = 25;
}

/// When the side-band ring (mmap, comm, fork and exit records) wakes the reader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SidebandWakeup {
    /// At every record (a 1-byte watermark): a new process's mappings are read within one
    /// wake-up, while the process most likely still runs. Under fork/exec churn this is
    /// several wake-ups per process.
    #[default]
    EveryRecord,
    /// Once this many bytes of records wait in a CPU's side-band ring (at most three
    /// quarters of it, at least 1); fewer wait for the drain loop's tick.
    Bytes(u32),
}

impl SidebandWakeup {
    /// The `wakeup_watermark` for a side-band ring of `ring_bytes`.
    pub(crate) fn watermark(self, ring_bytes: usize) -> u32 {
        match self {
            SidebandWakeup::EveryRecord => 1,
            SidebandWakeup::Bytes(bytes) => {
                let most = u32::try_from(ring_bytes / 4 * 3).unwrap_or(u32::MAX);
                bytes.clamp(1, most.max(1))
            }
        }
    }
}

/// Copying user registers and stack with each sample, for DWARF unwinding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackCapture {
    /// Bytes of stack copied per sample (a multiple of 8, below 64 KiB).
    pub stack_bytes: u32,
    /// Keep the kernel's frame-pointer user callchain too (to splice where the copy runs out).
    pub keep_fp_callchain: bool,
}

/// Sampling context switches (off-CPU and wall-clock profiles): of a process's threads, or
/// (for [`Target::System`]) on every CPU, where the kernel's switch records are its
/// CPU-wide ones (decoded alike: the record's thread is the one switched out or in).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchSampling {
    /// Sample one switch-out in this many (1: every one); changed while sampling with
    /// [`Sampler::set_switch_period`]. Every switch is still seen by its switch record.
    pub period: u64,
    /// Also sample on-CPU time with the sampling event (false: switches only).
    pub cpu_samples: bool,
}

/// Everything needed to open a sampling session.
#[derive(Clone, Debug)]
pub struct SamplerConfig {
    /// What to sample.
    pub target: Target,
    /// Samples per second per CPU (or per thread).
    pub frequency: u64,
    /// Data pages per ring buffer; a power of two.
    pub ring_pages: usize,
    /// Bytes written before the kernel wakes the reader, at least: the reader is also left
    /// asleep until `wakeup_percent` of the ring is filled, so that large samples do not
    /// wake it every few samples.
    pub wakeup_watermark: u32,
    /// The share of the ring, in percent (at most 75), written before the reader is woken;
    /// what is left is the room for the reader's lateness. Applied to the ring size finally
    /// mapped, which the locked-memory limit may have halved. Each wake-up costs tens of µs
    /// of CPU in a VM, so fewer, larger batches are cheaper.
    pub wakeup_percent: u8,
    /// Sample kernel mode and collect kernel callchains (when permitted).
    pub include_kernel: bool,
    /// Which event.
    pub event: EventChoice,
    /// Copy user registers and stack for DWARF unwinding (None: frame pointers only).
    pub stack_capture: Option<StackCapture>,
    /// Take no samples of the idle task (pid 0, `swapper`), nor of the interrupts it serves:
    /// a whole-system profile of a mostly idle machine then spends no samples, ring space or
    /// wake-ups on idle CPUs. Applies to the software cpu-clock event (the kernel ignores it
    /// for hardware events, and cycles hardly count in the halted idle loop anyway); the
    /// timer interrupts themselves go on. Default: true for [`Target::System`], false for a
    /// process (whose events never see the idle task).
    pub exclude_idle: bool,
    /// When the side-band records (new mappings, exec, fork, exit) wake the reader.
    pub sideband_wakeup: SidebandWakeup,
    /// Data pages of each CPU's side-band ring; a power of two, at most `ring_pages`. The
    /// kernel wakes the reader each time a watermark's worth of bytes has been written,
    /// whether or not the reader drained the ring meanwhile, so with
    /// [`SidebandWakeup::Bytes`] a larger ring means proportionally fewer wake-ups.
    pub sideband_ring_pages: usize,
    /// Sample context switches too, into rings of their own (see [`SwitchSampling`]), so
    /// that a burst of switches never fills the CPU samples' rings. None: CPU samples only.
    pub switches: Option<SwitchSampling>,
}

impl SamplerConfig {
    /// A configuration with the defaults for `target`.
    pub fn new(target: Target) -> SamplerConfig {
        SamplerConfig {
            frequency: defaults::FREQUENCY,
            ring_pages: defaults::RING_PAGES,
            wakeup_watermark: defaults::WAKEUP_WATERMARK,
            wakeup_percent: defaults::WAKEUP_PERCENT,
            include_kernel: true,
            event: EventChoice::Auto,
            stack_capture: None,
            exclude_idle: matches!(target, Target::System),
            sideband_wakeup: SidebandWakeup::EveryRecord,
            sideband_ring_pages: defaults::SIDEBAND_RING_PAGES,
            switches: None,
            target,
        }
    }
}

/// What was actually opened (the kernel and privileges may differ from what was asked).
#[derive(Clone, Debug)]
pub struct SessionInfo {
    /// The event sampled on.
    pub event: EventKind,
    /// The frequency in effect (changed by [`Sampler::set_frequency`]).
    pub frequency: u64,
    /// Whether kernel frames are collected.
    pub kernel_included: bool,
    /// Whether samples of the idle task are left out (see [`SamplerConfig::exclude_idle`]).
    pub idle_excluded: bool,
    /// Why something differs from the request (shown to the user).
    pub notes: Vec<String>,
    /// Number of events opened.
    pub events: usize,
    /// Number of ring buffers mapped.
    pub rings: usize,
    /// Data pages of each sample ring as mapped (fewer than asked when the locked-memory
    /// limit refused them).
    pub ring_pages: usize,
    /// Bytes written to a sample ring between two wake-ups of its reader (the kernel counts
    /// them from where it last woke the reader, not from what was read).
    pub wakeup_watermark: usize,
    /// What each sample carries.
    pub format: SampleFormat,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sideband_watermark() {
        assert_eq!(SidebandWakeup::EveryRecord.watermark(128 << 10), 1);
        assert_eq!(SidebandWakeup::Bytes(4096).watermark(128 << 10), 4096);
        assert_eq!(SidebandWakeup::Bytes(0).watermark(128 << 10), 1);
        assert_eq!(
            SidebandWakeup::Bytes(1 << 20).watermark(128 << 10),
            96 << 10,
            "three quarters of the ring at most"
        );
    }
}
