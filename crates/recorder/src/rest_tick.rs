//! The longer drain tick at rest, and when the rings allow it.

use std::time::Duration;

use crate::options::defaults::ring_seconds;

/// The drain interval after a round without side-band records
/// ([`crate::RecordOptions::drain_interval_at_rest`]), taken only while a sample ring holds
/// two of them at the frequency in effect: past that (a high frequency, rings capped at
/// their largest or cut by the locked-memory limit) a ring would be read only at its
/// watermark, with less room left for the reader's lateness than the loop's own tick leaves.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RestTick {
    /// The interval at rest.
    pub interval: Duration,
    /// Data pages of each sample ring, as mapped.
    pub ring_pages: usize,
    /// Bytes of stack copied with each sample (0 when none is).
    pub stack_bytes: u32,
}

impl RestTick {
    /// The tick after a round at rest, at `frequency` Hz, where the loop's own is `tick`.
    pub fn after_rest(&self, frequency: u64, tick: Duration) -> Duration {
        let held = ring_seconds(self.ring_pages, frequency, self.stack_bytes);
        if held >= 2.0 * self.interval.as_secs_f64() {
            self.interval.max(tick)
        } else {
            tick
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::defaults::ring_pages_streaming;

    const TICK: Duration = Duration::from_millis(500);

    fn rest(ring_pages: usize, stack_bytes: u32) -> RestTick {
        RestTick {
            interval: Duration::from_secs(1),
            ring_pages,
            stack_bytes,
        }
    }

    #[test]
    fn the_rest_tick_only_where_a_ring_holds_two_of_them() {
        let stack = 16 * 1024;
        // 99 Hz: rings sized for it hold two seconds.
        let at_99 = rest(ring_pages_streaming(99, stack), stack);
        assert_eq!(at_99.after_rest(99, TICK), Duration::from_secs(1));
        // 499 Hz: the largest ring (8 MiB) holds 0.94 s of 17 KiB samples.
        let at_499 = rest(ring_pages_streaming(499, stack), stack);
        assert_eq!(at_499.after_rest(499, TICK), TICK);
        // Rings opened at 99 Hz, the frequency raised live: the loop's tick.
        assert_eq!(at_99.after_rest(300, TICK), TICK);
        // The locked-memory limit cut the rings to 256 pages (1 MiB, 0.6 s at 99 Hz).
        assert_eq!(rest(256, stack).after_rest(99, TICK), TICK);
        // Callchains only: 256 pages hold 10 s at 99 Hz.
        assert_eq!(rest(256, 0).after_rest(99, TICK), Duration::from_secs(1));
    }
}
