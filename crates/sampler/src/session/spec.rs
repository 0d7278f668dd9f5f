//! What a session asks the kernel for: the configuration checked, then the event, frequency
//! and kernel sampling the machine allows, as one [`AttrSpec`] (each change noted for the
//! user).

use crate::config::{EventChoice, SamplerConfig, Target, MAX_STACK_BYTES};
use crate::error::SamplerError;
use crate::event::{cycles_available, AttrSpec, EventKind};
use crate::record::SampleFormat;
use crate::system::{is_privileged, max_sample_rate, paranoid_level};

use super::clamp_frequency;

/// Refuse ring sizes that are not a power of two, a stack copy the kernel would refuse, and a
/// frequency of 0.
pub(super) fn check_config(config: &SamplerConfig) -> Result<(), SamplerError> {
    for pages in [config.ring_pages, config.sideband_ring_pages] {
        if pages == 0 || !pages.is_power_of_two() {
            return Err(SamplerError::RingSize { pages });
        }
    }
    if let Some(capture) = config.stack_capture {
        if capture.stack_bytes == 0
            || capture.stack_bytes % 8 != 0
            || capture.stack_bytes > MAX_STACK_BYTES
        {
            return Err(SamplerError::StackSize {
                bytes: capture.stack_bytes,
                max: MAX_STACK_BYTES,
            });
        }
    }
    if config.frequency == 0 {
        return Err(SamplerError::Frequency {
            requested: 0,
            why: "must be at least 1".into(),
        });
    }
    Ok(())
}

/// The events' attributes for `config` on this machine: the frequency lowered to the
/// kernel's maximum, the event picked, kernel sampling dropped when privileges require it
/// (each change pushed onto `notes`); context switches refused when not permitted. The
/// wake-up watermarks are set per ring size when the rings are opened.
pub(super) fn attr_spec(
    config: &SamplerConfig,
    notes: &mut Vec<String>,
) -> Result<AttrSpec, SamplerError> {
    let max = max_sample_rate();
    let frequency = clamp_frequency(config.frequency, max);
    if frequency != config.frequency {
        notes.push(format!(
            "frequency lowered from {} Hz to the kernel's maximum of {frequency} Hz \
             (kernel.perf_event_max_sample_rate)",
            config.frequency
        ));
    }
    let kind = event_kind(config.event, notes);
    let paranoid = paranoid_level();
    if config.switches.is_some() && paranoid.is_none_or(|p| p >= 2) && !is_privileged() {
        return Err(SamplerError::SwitchesNotPermitted {
            paranoid: paranoid.map_or_else(|| "unknown".to_string(), |p| p.to_string()),
        });
    }
    Ok(AttrSpec {
        kind,
        frequency,
        include_kernel: kernel_allowed(config, notes),
        inherit: matches!(config.target, Target::Process { .. }),
        enable_on_exec: matches!(
            config.target,
            Target::Process {
                enable_on_exec: true,
                ..
            }
        ),
        // Set per ring size in `open_with`.
        wakeup_watermark: config.wakeup_watermark,
        sideband_watermark: 1,
        format: if config.stack_capture.is_some() {
            SampleFormat::UNWIND
        } else {
            SampleFormat::BASIC
        },
        stack_bytes: config.stack_capture.map_or(0, |c| c.stack_bytes),
        exclude_callchain_user: config.stack_capture.is_some_and(|c| !c.keep_fp_callchain),
        exclude_idle: config.exclude_idle,
    })
}

/// The event `choice` names; for `auto`, hardware cycles if a counting probe opens, else
/// cpu-clock (noted).
fn event_kind(choice: EventChoice, notes: &mut Vec<String>) -> EventKind {
    match choice {
        EventChoice::Force(kind) => kind,
        EventChoice::Auto => match cycles_available() {
            Ok(()) => EventKind::Cycles,
            Err(err) => {
                notes.push(format!(
                    "no hardware cycles event ({err}); sampling on the software cpu-clock"
                ));
                EventKind::CpuClock
            }
        },
    }
}

/// Whether kernel frames are sampled: as asked, but not for an unprivileged user's process
/// under `perf_event_paranoid >= 2` (noted).
fn kernel_allowed(config: &SamplerConfig, notes: &mut Vec<String>) -> bool {
    let mut include_kernel = config.include_kernel;
    if include_kernel
        && !matches!(config.target, Target::System)
        && paranoid_level().unwrap_or(2) >= 2
        && !is_privileged()
    {
        include_kernel = false;
        notes.push("kernel frames excluded: kernel.perf_event_paranoid >= 2 allows an unprivileged user only user space".into());
    }
    include_kernel
}
