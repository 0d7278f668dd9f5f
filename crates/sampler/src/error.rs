//! Errors of the sampler.

use std::io;

/// Why sampling could not start or continue.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    /// The kernel refused the events for lack of privilege.
    #[error(
        "permission denied opening perf events for {scope} (kernel.perf_event_paranoid = {paranoid}).\n\
         {hint}"
    )]
    PermissionDenied {
        /// What was being profiled: "the whole system", "process 1234".
        scope: String,
        /// The current perf_event_paranoid level, or "unknown".
        paranoid: String,
        /// What would allow it.
        hint: &'static str,
    },
    /// Context switches cannot be sampled by this user: the switch-out sample is taken in
    /// the kernel, and the kernel refuses kernel-mode events to an unprivileged user at
    /// `perf_event_paranoid` 2 (with user space only the event would count nothing).
    #[error(
        "off-CPU and wall-clock profiles need the kernel's context-switch event, which \
         kernel.perf_event_paranoid = {paranoid} denies to a user without CAP_PERFMON \
         (limited to user space it counts nothing). \
         Record through profilerd, which records a user's own processes for them (start it, \
         or point --socket at it); or lower kernel.perf_event_paranoid to 1 \
         (sysctl kernel.perf_event_paranoid=1); or grant CAP_PERFMON."
    )]
    SwitchesNotPermitted {
        /// The current perf_event_paranoid level, or "unknown".
        paranoid: String,
    },
    /// The target process does not exist (any more).
    #[error("no such process: {pid} (it may have exited)")]
    NoSuchProcess {
        /// The process id asked for.
        pid: u32,
    },
    /// Neither the hardware cycles event nor the software cpu-clock event could be opened.
    #[error("no usable sampling event: cycles failed ({cycles}), cpu-clock failed ({cpu_clock})")]
    NoEvent {
        /// Why cycles failed.
        cycles: io::Error,
        /// Why cpu-clock failed.
        cpu_clock: io::Error,
    },
    /// The requested frequency is not usable.
    #[error("invalid sampling frequency {requested} Hz: {why}")]
    Frequency {
        /// Requested frequency.
        requested: u64,
        /// Why it is invalid.
        why: String,
    },
    /// The user stack copy size is out of range.
    #[error("user stack copy must be a positive multiple of 8 bytes up to {max}, got {bytes}")]
    StackSize {
        /// Bytes asked for.
        bytes: u32,
        /// The largest allowed.
        max: u32,
    },
    /// Mapping a ring buffer failed.
    #[error("mmap of a {pages}-page ring buffer failed: {source}")]
    RingMap {
        /// Data pages asked for.
        pages: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The ring buffer size is not a power of two number of pages.
    #[error("ring buffer size must be a power of two number of pages, got {pages}")]
    RingSize {
        /// Pages asked for.
        pages: usize,
    },
    /// Some other failure of perf_event_open.
    #[error("perf_event_open for {what} failed: {source}")]
    Open {
        /// Which event (pid, cpu).
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The operation applies to whole-system sessions only.
    #[error("{what} is supported for whole-system sampling only")]
    SystemOnly {
        /// The operation.
        what: &'static str,
    },
    /// mmap or an ioctl on an event failed.
    #[error("{what} failed: {source}")]
    Io {
        /// The operation.
        what: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}
