//! Sampling a live Linux system with `perf_event_open`.
//!
//! [`Sampler`] opens one sampling event per CPU (or per thread and CPU for one process), each
//! with a memory-mapped ring buffer; [`drain_until`] reads them as records arrive; [`decode`]
//! turns raw records into [`Record`]s. The unsafe syscall and mmap code is confined to `sys`.

mod config;
mod drain;
mod error;
mod event;
mod record;
mod regs;
mod ring;
mod session;
mod sys;
mod system;

pub use config::{
    defaults, EventChoice, SamplerConfig, SessionInfo, SidebandWakeup, StackCapture,
    SwitchSampling, Target, MAX_STACK_BYTES,
};
pub use drain::{drain_until, drain_until_woken, DrainEnd, RecordSink};
pub use error::SamplerError;
pub use event::EventKind;
pub use record::{
    decode, decode_with, Callchain, Mmap2, Record, Sample, SampleFormat, SampleId, SAMPLE_TYPE,
    SWITCH_LOST, SWITCH_SAMPLE,
};
pub use regs::{UserRegs, UNWIND_REGS_MASK};
pub use ring::{
    read_records, read_records_guided, RawRecord, RingBuffer, RingStats, HEADER_SIZE,
    PREFETCH_BYTES,
};
pub use session::{CpuChange, Sampler};
pub use system::{auto_event, is_privileged, max_sample_rate, online_cpus, paranoid_level};

/// The system page size in bytes (the unit of ring buffer sizes).
pub fn page_size() -> usize {
    sys::page_size()
}

/// The current time on the clock of the records' timestamps (CLOCK_MONOTONIC, in ns): compare
/// with [`Sample::time`] or [`SampleId::time`] to tell how late a record is read.
pub fn now_ns() -> u64 {
    sys::monotonic_ns()
}

/// Callchain context markers (PERF_CONTEXT_*), which separate kernel and user frames.
pub mod context {
    use perf_event_open_sys::bindings as b;
    /// Kernel frames follow.
    pub const KERNEL: u64 = b::PERF_CONTEXT_KERNEL;
    /// User frames follow.
    pub const USER: u64 = b::PERF_CONTEXT_USER;
    /// Hypervisor frames follow.
    pub const HV: u64 = b::PERF_CONTEXT_HV;
    /// Guest frames follow.
    pub const GUEST: u64 = b::PERF_CONTEXT_GUEST;
    /// Entries at or above this value are markers, not addresses.
    pub const MAX: u64 = b::PERF_CONTEXT_MAX;
    /// Our own marker (not the kernel's): the user stack continues beyond what could be
    /// unwound; it ends the chain.
    pub const TRUNCATED: u64 = MAX + 1;

    /// Whether `entry` is a context marker rather than an address.
    pub fn is_marker(entry: u64) -> bool {
        entry >= MAX
    }
}
