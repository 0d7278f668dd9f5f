//! What a recording asks the sampler for: the events' target and the [`SamplerConfig`] its
//! options make (event, rings, wake-ups, stack copies, context switches).

use sampler::{
    EventChoice, EventKind, SamplerConfig, SidebandWakeup, StackCapture, SwitchSampling, Target,
};

use crate::error::RecordError;
use crate::launch::Launched;
use crate::options::{defaults, CallGraph, Measure, RecordOptions, RecordTarget};

/// Whose events to open: the whole system, a running process, or the command `launched` for
/// the recording (held before its exec, so its events start at the exec).
pub(crate) fn sampler_target(
    target: &RecordTarget,
    launched: Option<&Launched>,
) -> Result<Target, RecordError> {
    Ok(match (target, launched) {
        (RecordTarget::System, _) => Target::System,
        (RecordTarget::Pid(pid), _) => Target::Process {
            pid: *pid,
            enable_on_exec: false,
        },
        (RecordTarget::PidAtExec(pid), _) => Target::Process {
            pid: *pid,
            enable_on_exec: true,
        },
        (RecordTarget::Command(_), Some(child)) => Target::Process {
            pid: child.pid(),
            enable_on_exec: true,
        },
        (RecordTarget::Command(_), None) => return Err(RecordError::EmptyCommand),
    })
}

/// The sampler's configuration for `options` on `target`.
pub(crate) fn sampler_config(options: &RecordOptions, target: Target) -> SamplerConfig {
    let measure = options.measure;
    let streaming = options.window.is_some();
    SamplerConfig {
        frequency: options.frequency,
        ring_pages: options.ring_pages,
        wakeup_percent: match options.call_graph {
            CallGraph::Fp => sampler::defaults::WAKEUP_PERCENT,
            CallGraph::Dwarf | CallGraph::Auto => crate::defaults::wakeup_percent_with_stacks(
                options.ring_pages,
                options.frequency,
                options.stack_bytes,
            ),
        },
        include_kernel: options.include_kernel,
        // Wall-clock time adds CPU samples' periods to times off CPU: they must be ns (and
        // an off-CPU recording opens no CPU event: nothing to probe).
        event: match measure {
            Measure::Cpu => options.event,
            Measure::OffCpu | Measure::Wall => EventChoice::Force(EventKind::CpuClock),
        },
        switches: measure.samples_switches().then_some(SwitchSampling {
            period: 1,
            cpu_samples: measure == Measure::Wall,
        }),
        sideband_wakeup: if streaming {
            // Streaming (a long recording of windows): the side-band ring is read at the
            // drain tick, and wakes the reader only when three quarters full, not at every
            // record (several wake-ups per process under an exec churn); records then wait
            // up to a drain interval, and binaries of processes gone by then are pinned by
            // path once their identity matches.
            SidebandWakeup::Bytes(defaults::SIDEBAND_WATERMARK)
        } else {
            SidebandWakeup::EveryRecord
        },
        // Streaming: the kernel wakes the reader at every three quarters of the ring's worth
        // of side-band bytes written (drained or not): a larger ring, fewer wake-ups.
        sideband_ring_pages: if streaming {
            defaults::SIDEBAND_RING_PAGES_STREAMING
        } else {
            sampler::defaults::SIDEBAND_RING_PAGES
        },
        stack_capture: stack_capture(options),
        ..SamplerConfig::new(target)
    }
}

/// The user stack copied with each sample: none with frame pointers, else
/// `options.stack_bytes` (keeping the kernel's frame-pointer chain in `auto`, to continue from
/// where the copy runs out).
fn stack_capture(options: &RecordOptions) -> Option<StackCapture> {
    match options.call_graph {
        CallGraph::Fp => None,
        CallGraph::Dwarf => Some(StackCapture {
            stack_bytes: options.stack_bytes,
            keep_fp_callchain: false,
        }),
        CallGraph::Auto => Some(StackCapture {
            stack_bytes: options.stack_bytes,
            keep_fp_callchain: true,
        }),
    }
}
