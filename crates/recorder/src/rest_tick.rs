//! The longer drain tick at rest, and when the rings allow it.

use std::time::Duration;

use crate::options::defaults::ring_seconds;

/// Seconds of samples a sample ring must still have room for when its reader is woken, for
/// the rest tick to be taken: how late the reader may be (a busy machine, a long round).
const LATENESS_ROOM_SECONDS: f64 = 0.5;

/// The drain interval after a round without side-band records
/// ([`crate::RecordOptions::drain_interval_at_rest`]).
///
/// The kernel wakes a ring's reader each time a watermark's worth of records was written
/// since it last woke it, whatever was read meanwhile: while every CPU is busy those wake-ups
/// alone read the rings, and a tick between them is a round more. So at rest the tick is
/// longer than the watermark's period, and the ring is read only at its watermark: taken
/// only while the room left in a ring at its watermark holds [`LATENESS_ROOM_SECONDS`] of
/// samples at the frequency in effect, or the ring holds two rest ticks. Past that (a high
/// frequency, rings capped at their largest or cut by the locked-memory limit), the loop's
/// own tick, which reads a ring long before its watermark.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RestTick {
    /// The interval at rest.
    pub interval: Duration,
    /// Data pages of each sample ring, as mapped.
    pub ring_pages: usize,
    /// Bytes written to a sample ring between two wake-ups.
    pub watermark_bytes: usize,
    /// Bytes of stack copied with each sample (0 when none is).
    pub stack_bytes: u32,
}

impl RestTick {
    /// The tick after a round at rest, at `frequency` Hz, where the loop's own is `tick`.
    pub fn after_rest(&self, frequency: u64, tick: Duration) -> Duration {
        let held = ring_seconds(self.ring_pages, frequency, self.stack_bytes);
        let ring_bytes = self.ring_pages * 4096;
        let room = ring_bytes.saturating_sub(self.watermark_bytes) as f64 / ring_bytes as f64;
        if held * room >= LATENESS_ROOM_SECONDS || held >= 2.0 * self.interval.as_secs_f64() {
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
    const REST: Duration = Duration::from_secs(2);

    /// A rest tick for rings of `ring_pages` woken at three quarters.
    fn rest(ring_pages: usize, stack_bytes: u32) -> RestTick {
        RestTick {
            interval: REST,
            ring_pages,
            watermark_bytes: ring_pages * 4096 / 4 * 3,
            stack_bytes,
        }
    }

    #[test]
    fn the_rest_tick_only_where_a_ring_has_room_at_its_watermark() {
        let stack = 16 * 1024;
        // 99 Hz: 1024 pages hold 2.4 s of 17-KiB samples, a quarter of it 0.6 s.
        let at_99 = rest(ring_pages_streaming(99, stack), stack);
        assert_eq!(at_99.after_rest(99, TICK), REST);
        // 499 Hz: the largest ring (8 MiB) holds 0.94 s, a quarter of it 0.23 s.
        let at_499 = rest(ring_pages_streaming(499, stack), stack);
        assert_eq!(at_499.after_rest(499, TICK), TICK);
        // Rings opened at 99 Hz, the frequency raised live: the loop's tick.
        assert_eq!(at_99.after_rest(300, TICK), TICK);
        // The locked-memory limit cut the rings to 256 pages (0.6 s at 99 Hz).
        assert_eq!(rest(256, stack).after_rest(99, TICK), TICK);
        // Callchains only: 256 pages hold 10 s at 99 Hz.
        assert_eq!(rest(256, 0).after_rest(99, TICK), REST);
        // Woken at a quarter: the ring holds two rest ticks.
        let early = RestTick {
            watermark_bytes: 256 * 4096 / 4,
            ..rest(256, 0)
        };
        assert_eq!(early.after_rest(99, TICK), REST);
    }
}
