//! The drain loop of a recording: draining the rings into the [`Collector`] until the
//! recording ends, pausing to follow the online CPUs and to apply changes of frequency and of
//! the switch sampling period asked meanwhile.

use std::future::Future;
use std::time::Duration;

use sampler::{drain_until_woken, DrainEnd, RecordSink, Sampler};
use tracing::{debug, info, warn};

use crate::error::RecordError;
use crate::sink::Collector;

/// Drain until `stop`; when the online CPUs changed (whole system), the loop pauses, their
/// events are opened or closed, and draining goes on; likewise when a new frequency was asked
/// through [`crate::FrequencyControl`].
pub(crate) async fn drain_following_cpus(
    sampler: &mut Sampler,
    stop: impl Future<Output = ()>,
    tick: Duration,
    collector: &mut Collector<'_>,
) -> Result<(), RecordError> {
    tokio::pin!(stop);
    let snapshots = collector.snapshots.clone();
    if let Some(control) = &snapshots {
        control.set_running(true);
    }
    let wake = snapshots.as_ref().map(|c| c.waker());
    let result = drain_rounds(sampler, &mut stop, tick, wake, collector).await;
    if let Some(control) = &snapshots {
        control.set_running(false);
    }
    result
}

/// The drain loop of [`drain_following_cpus`].
async fn drain_rounds(
    sampler: &mut Sampler,
    mut stop: impl Future<Output = ()> + Unpin,
    tick: Duration,
    wake: Option<&tokio::sync::Notify>,
    collector: &mut Collector<'_>,
) -> Result<(), RecordError> {
    while drain_until_woken(sampler, &mut stop, tick, wake, collector).await? == DrainEnd::Paused {
        if collector.cpus_changed {
            match sampler.reopen_missing_cpus(&mut |r| collector.on_record(r)) {
                Ok(change) => {
                    info!(opened = ?change.opened, closed = ?change.closed, "online CPUs changed")
                }
                Err(err) => warn!(%err, "cannot follow the CPUs that came online"),
            }
            collector.cpus_changed = false;
        }
        let requested = collector.frequency_control.as_ref().and_then(|c| c.take());
        if let Some(hz) = requested {
            change_frequency(sampler, collector, hz);
        }
        let period = collector
            .off_cpu
            .as_mut()
            .and_then(|o| o.take_period_change());
        if let Some(period) = period {
            match sampler.set_switch_period(period) {
                Ok(()) => debug!(period, "switch sampling period changed"),
                Err(err) => warn!(%err, period, "cannot change the switch sampling period"),
            }
        }
    }
    Ok(())
}

/// Make the events sample at `hz` (the rings were just drained: samples taken before the
/// change are weighted with the old period, those after with the new).
fn change_frequency(sampler: &mut Sampler, collector: &mut Collector<'_>, hz: u64) {
    let from = sampler.info().frequency;
    match sampler.set_frequency(hz) {
        Ok(frequency) => {
            let at = crate::sys::monotonic_ns();
            collector
                .periods
                .changed(sampler.info().event, frequency, at);
            collector.frequency_change = Some((at, from));
            collector.frequency = frequency;
            debug!(from, to = frequency, "sampling frequency changed");
        }
        Err(err) => warn!(%err, hz, "cannot change the sampling frequency"),
    }
    if let Some(control) = &collector.frequency_control {
        control.set_in_effect(sampler.info().frequency);
    }
}
