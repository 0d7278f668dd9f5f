//! Changing the sampling frequency of a running recording, and weighting each sample with the
//! period in effect when it was taken.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sampler::EventKind;

/// A handle on the sampling frequency of a running recording
/// ([`crate::RecordOptions::frequency_control`]): another thread asks for a frequency, and the
/// drain loop applies it after its current round with `PERF_EVENT_IOC_PERIOD`, without
/// reopening the events (no gap in the samples, nothing re-read from /proc).
#[derive(Clone, Debug, Default)]
pub struct FrequencyControl(Arc<Rates>);

#[derive(Debug, Default)]
struct Rates {
    /// The frequency asked for and not applied yet (0: none).
    requested: AtomicU64,
    /// The frequency the events sample at (0: not open yet).
    in_effect: AtomicU64,
}

impl FrequencyControl {
    /// A handle for one recording.
    pub fn new() -> FrequencyControl {
        FrequencyControl::default()
    }

    /// Ask for `hz` samples per second per CPU (0 is ignored). Applied at the end of the drain
    /// round in progress (at most a drain interval away), lowered to the kernel's
    /// `perf_event_max_sample_rate`; [`FrequencyControl::in_effect`] then tells. The last of
    /// several requests made meanwhile wins.
    pub fn request(&self, hz: u64) {
        if hz > 0 {
            self.0.requested.store(hz, Ordering::Relaxed);
        }
    }

    /// The frequency the events sample at now (0 before the recording opened them).
    pub fn in_effect(&self) -> u64 {
        self.0.in_effect.load(Ordering::Relaxed)
    }

    /// Whether a request waits to be applied.
    pub(crate) fn pending(&self) -> bool {
        let requested = self.0.requested.load(Ordering::Relaxed);
        requested != 0 && requested != self.in_effect()
    }

    /// The request waiting, taken.
    pub(crate) fn take(&self) -> Option<u64> {
        Some(self.0.requested.swap(0, Ordering::Relaxed)).filter(|&hz| hz != 0)
    }

    pub(crate) fn set_in_effect(&self, hz: u64) {
        self.0.in_effect.store(hz, Ordering::Relaxed);
    }
}

/// The period each sample stands for.
///
/// A cpu-clock event keeps reporting the period it was opened with after
/// `PERF_EVENT_IOC_PERIOD` (the kernel sets its hrtimer's `last_period` once, when the event
/// is created; measured on Linux 6.18: 1 ms reported at 1000 Hz, and still after changes to
/// 100 and 500 Hz). After a change, its samples are weighted with the period in effect when
/// they were taken (their own timestamps against the time of the change). A cycles event in
/// frequency mode reports the cycles since its previous sample, which stay right across
/// changes, and is left alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SamplePeriods {
    /// Since this time (CLOCK_MONOTONIC ns), samples stand for `ns` each.
    current: Option<(u64, u64)>,
    /// Before it: what the previous change set (None: the period the samples report).
    before: Option<u64>,
}

impl SamplePeriods {
    /// The period of a sample taken at `time` that reports `reported`.
    pub(crate) fn of(&self, time: u64, reported: u64) -> u64 {
        match self.current {
            Some((since, ns)) if time >= since => ns,
            Some(_) => self.before.unwrap_or(reported),
            None => reported,
        }
    }

    /// The events of `kind` sample at `hz` from `at` (CLOCK_MONOTONIC ns) on.
    pub(crate) fn changed(&mut self, kind: EventKind, hz: u64, at: u64) {
        if kind != EventKind::CpuClock || hz == 0 {
            return;
        }
        self.before = self.current.map(|(_, ns)| ns);
        // The period the kernel's hrtimer runs at (the argument `Sampler::set_frequency`
        // passes, at least the kernel's 10 µs).
        self.current = Some((at, (1_000_000_000 / hz).max(10_000)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_wait_until_applied() {
        let control = FrequencyControl::new();
        assert!(!control.pending());
        control.set_in_effect(999);
        control.request(0);
        assert!(!control.pending(), "0 is ignored");
        control.request(999);
        assert!(!control.pending(), "already in effect");
        control.request(200);
        control.request(100);
        assert!(control.pending());
        assert_eq!(control.take(), Some(100), "the last request wins");
        assert_eq!(control.take(), None);
        control.set_in_effect(100);
        assert_eq!(control.clone().in_effect(), 100, "clones share the state");
    }

    #[test]
    fn cpu_clock_samples_take_the_period_of_their_time() {
        let mut p = SamplePeriods::default();
        assert_eq!(p.of(5, 1_000_000), 1_000_000, "no change: as reported");
        p.changed(EventKind::CpuClock, 100, 1_000);
        assert_eq!(p.of(999, 1_000_000), 1_000_000, "taken before the change");
        assert_eq!(p.of(1_000, 1_000_000), 10_000_000);
        p.changed(EventKind::CpuClock, 500, 2_000);
        assert_eq!(p.of(1_500, 1_000_000), 10_000_000, "between two changes");
        assert_eq!(p.of(2_500, 1_000_000), 2_000_000);
        p.changed(EventKind::CpuClock, 1_000_000, 3_000);
        assert_eq!(p.of(3_000, 1), 10_000, "the kernel's shortest period");

        let mut cycles = SamplePeriods::default();
        cycles.changed(EventKind::Cycles, 100, 1_000);
        assert_eq!(cycles.of(2_000, 123_456), 123_456, "cycles as reported");
    }
}
