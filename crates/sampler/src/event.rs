//! Which event to sample on, and the `perf_event_attr` for it.

use std::fmt;
use std::io;

use perf_event_open_sys::bindings::{self as b, perf_event_attr};

use crate::record::SampleFormat;
use crate::sys;

/// The event that drives sampling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Hardware CPU cycles (needs a PMU).
    Cycles,
    /// The software cpu-clock timer (works everywhere, including VMs without a PMU).
    CpuClock,
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EventKind::Cycles => "cycles",
            EventKind::CpuClock => "cpu-clock",
        })
    }
}

/// How each event is set up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AttrSpec {
    pub kind: EventKind,
    pub frequency: u64,
    pub include_kernel: bool,
    pub inherit: bool,
    pub enable_on_exec: bool,
    pub wakeup_watermark: u32,
    /// Bytes of side-band records written before the kernel wakes the reader (1: every
    /// record).
    pub sideband_watermark: u32,
    pub format: SampleFormat,
    /// Bytes of user stack to copy per sample (with `format.user_stack`).
    pub stack_bytes: u32,
    /// Leave the user part out of the kernel's callchain (DWARF-only unwinding).
    pub exclude_callchain_user: bool,
    /// Asked for: no samples of the idle task (applied to cpu-clock only, see
    /// [`AttrSpec::idle_excluded`]).
    pub exclude_idle: bool,
}

impl AttrSpec {
    /// Whether the sampling event leaves out the idle task: `exclude_idle` is honoured by
    /// software events only (`perf_swevent_hrtimer` drops the sample when the idle task is
    /// current). Cycles do not run in the halted idle loop anyway, and a hardware PMU may
    /// refuse the bit.
    pub(crate) fn idle_excluded(&self) -> bool {
        self.exclude_idle && self.kind == EventKind::CpuClock
    }
}

/// Build the sampling attr: `frequency` Hz with the format's sample type, `sample_id_all`,
/// CLOCK_MONOTONIC, woken by the watermark. Side-band records come from a separate event
/// ([`build_sideband_attr`]).
pub(crate) fn build_attr(spec: &AttrSpec) -> perf_event_attr {
    let mut attr = perf_event_attr {
        size: std::mem::size_of::<perf_event_attr>() as u32,
        ..Default::default()
    };
    match spec.kind {
        EventKind::Cycles => {
            attr.type_ = b::PERF_TYPE_HARDWARE;
            attr.config = b::PERF_COUNT_HW_CPU_CYCLES as u64;
        }
        EventKind::CpuClock => {
            attr.type_ = b::PERF_TYPE_SOFTWARE;
            attr.config = b::PERF_COUNT_SW_CPU_CLOCK as u64;
        }
    }
    attr.__bindgen_anon_1.sample_freq = spec.frequency;
    attr.sample_type = spec.format.sample_type();
    attr.sample_regs_user = spec.format.user_regs_mask;
    if spec.format.user_stack {
        attr.sample_stack_user = spec.stack_bytes;
    }
    attr.set_exclude_callchain_user(spec.exclude_callchain_user as u64);
    attr.set_freq(1);
    attr.set_disabled(1);
    attr.set_inherit(spec.inherit as u64);
    attr.set_enable_on_exec(spec.enable_on_exec as u64);
    attr.set_exclude_kernel(!spec.include_kernel as u64);
    attr.set_exclude_callchain_kernel(!spec.include_kernel as u64);
    attr.set_exclude_hv(1);
    attr.set_exclude_idle(spec.idle_excluded() as u64);
    attr.set_sample_id_all(1);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    attr.set_watermark(1);
    attr.__bindgen_anon_2.wakeup_watermark = spec.wakeup_watermark;
    // read() of the event answers {value, lost}: the samples the kernel dropped, including
    // those no LOST record reports yet (a ring full at the very end). Cleared again by
    // `sys::perf_event_open` on kernels before 6.0, which refuse it.
    attr.read_format = u64::from(b::PERF_FORMAT_LOST);
    attr
}

/// Build the side-band attr: a dummy software event that only reports mmap2 (with build-ids),
/// comm (with exec), fork and exit records, waking the reader past `sideband_watermark`
/// bytes; at 1 byte, at every record, so that a short-lived process's binary can still be
/// opened through /proc before it is gone.
pub(crate) fn build_sideband_attr(spec: &AttrSpec) -> perf_event_attr {
    let mut attr = perf_event_attr {
        size: std::mem::size_of::<perf_event_attr>() as u32,
        ..Default::default()
    };
    attr.type_ = b::PERF_TYPE_SOFTWARE;
    attr.config = b::PERF_COUNT_SW_DUMMY as u64;
    // The same sample_id trailer as the samples' records.
    attr.sample_type = SampleFormat::BASIC.sample_type();
    attr.set_disabled(1);
    attr.set_inherit(spec.inherit as u64);
    attr.set_enable_on_exec(spec.enable_on_exec as u64);
    attr.set_exclude_kernel(!spec.include_kernel as u64);
    attr.set_exclude_hv(1);
    attr.set_mmap(1);
    attr.set_mmap2(1);
    attr.set_build_id(1);
    attr.set_comm(1);
    attr.set_comm_exec(1);
    attr.set_task(1);
    attr.set_sample_id_all(1);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    // Woken by bytes: `wakeup_events` would not do it (the kernel counts only samples for
    // it, and other records wake the reader only past the byte watermark, half the ring when
    // none is set). A 1-byte watermark wakes the reader at every record.
    attr.set_watermark(1);
    attr.__bindgen_anon_2.wakeup_watermark = spec.sideband_watermark.max(1);
    attr
}

/// Build the context-switch attr: the software `context-switches` event sampled every
/// `period` switches, with the same callchain, registers and stack copy as CPU samples, taken
/// at switch-out; and `context_switch`, so that a PERF_RECORD_SWITCH marks every switch out
/// (with whether the thread was preempted) and back in. The sample is taken in the scheduler,
/// in kernel mode: `exclude_kernel` would drop every one, so the event always counts kernel
/// mode and only the kernel callchain follows `include_kernel` (which is why an unprivileged
/// user at `perf_event_paranoid` 2 cannot open it).
///
/// The samples carry no period: with PERF_SAMPLE_PERIOD in the sample type the kernel
/// samples every switch whatever the period (`perf_swevent_event` in kernel/events/core.c),
/// without it the event counts down its period as any other. The reader counts what a
/// sample stood for from the switch records, which mark every switch.
///
/// A period, not a frequency: the kernel adjusts a frequency's period at timer ticks from the
/// count since the last one, which a thread that is mostly asleep sees rarely, so the period
/// overshoots (measured: a thread switching 400 times a second sampled one switch in ten at
/// a 1000 Hz frequency). The recorder raises the period itself when switches come faster
/// than its cap ([`crate::Sampler::set_switch_period`]).
pub(crate) fn build_switch_attr(spec: &AttrSpec, period: u64) -> perf_event_attr {
    let mut attr = build_attr(spec);
    attr.type_ = b::PERF_TYPE_SOFTWARE;
    attr.config = b::PERF_COUNT_SW_CONTEXT_SWITCHES as u64;
    attr.sample_type &= !crate::record::SWITCH_SAMPLE_TYPE_OMITS;
    attr.__bindgen_anon_1.sample_period = period.max(1);
    attr.set_freq(0);
    attr.set_exclude_kernel(0);
    attr.set_exclude_idle(0);
    attr.set_context_switch(1);
    attr
}

/// Whether the hardware cycles event can be opened here (a counting probe on this process).
pub(crate) fn cycles_available() -> Result<(), io::Error> {
    let mut attr = perf_event_attr {
        size: std::mem::size_of::<perf_event_attr>() as u32,
        ..Default::default()
    };
    attr.type_ = b::PERF_TYPE_HARDWARE;
    attr.config = b::PERF_COUNT_HW_CPU_CYCLES as u64;
    attr.set_disabled(1);
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    sys::perf_event_open(&attr, 0, -1).map(drop)
}
