//! Routing samples to time windows by their own timestamps.
//!
//! Records of different CPUs are ordered only to within a drain round, so a window is closed
//! only once every ring has been drained past its end by a margin (`grace`); a sample that still
//! arrives for a closed window (a ring left unread for longer than that) goes to the oldest open
//! window and is counted as late.
//!
//! Windows of a length also count each stack's samples per second (`profile::WindowSeconds`),
//! on a grid of the wall clock's seconds: second 0 of a window begins when the UNIX time was
//! the whole second its start falls in (read when the window opens, so that a step of the
//! wall clock moves the grid of the windows after it), so that seconds of different windows,
//! and the buckets a reader draws on whole UNIX seconds, line up.

use std::collections::VecDeque;

use profile::{RawStacks, SampleOrigin, Stack};

/// One open window.
pub(crate) struct OpenWindow {
    /// Start (CLOCK_MONOTONIC ns, inclusive).
    pub start: u64,
    /// End (exclusive).
    pub end: u64,
    /// Its stacks.
    pub stacks: RawStacks,
}

/// The open windows, oldest first.
pub(crate) struct Windows {
    /// Window length in ns (None: one window for the whole session).
    length: Option<u64>,
    /// Start of window 0.
    origin: u64,
    open: VecDeque<OpenWindow>,
    /// Index of the window at `open[0]`.
    first_index: u64,
    /// Samples that arrived after their window closed.
    pub late: u64,
}

impl Windows {
    /// Windows of `length` ns from `origin` (None: one window that never ends by itself).
    pub(crate) fn new(length: Option<u64>, origin: u64) -> Windows {
        Windows {
            length: length.filter(|&l| l > 0),
            origin,
            open: VecDeque::new(),
            first_index: 0,
            late: 0,
        }
    }

    fn bounds(&self, index: u64) -> (u64, u64) {
        match self.length {
            Some(len) => {
                let start = self.origin.saturating_add(index.saturating_mul(len));
                (start, start.saturating_add(len))
            }
            None => (0, u64::MAX),
        }
    }

    /// Count a sample of `stack` taken at `time`; true when the stack is new to its window.
    pub(crate) fn add(&mut self, origin: &SampleOrigin, stack: &Stack<'_>) -> bool {
        let time = origin.time;
        let index = match self.length {
            Some(len) => time.saturating_sub(self.origin) / len,
            None => 0,
        };
        let at = if index < self.first_index {
            self.late += 1;
            0
        } else {
            (index - self.first_index) as usize
        };
        while self.open.len() <= at {
            let (start, end) = self.bounds(self.first_index + self.open.len() as u64);
            self.open.push_back(OpenWindow {
                start,
                end,
                stacks: self.new_stacks(start),
            });
        }
        self.open[at].stacks.add(origin, stack)
    }

    /// The stacks of a window starting at `start`: counted per second too when windows have
    /// a length.
    fn new_stacks(&self, start: u64) -> RawStacks {
        match self.length {
            Some(_) => RawStacks::with_seconds(wall_second_before(start)),
            None => RawStacks::new(),
        }
    }

    /// Take the oldest window if it ended at least `grace` ns before `now`, or by
    /// `read_through`: a time every ring was read after (0: none known).
    pub(crate) fn pop_closed(
        &mut self,
        now: u64,
        grace: u64,
        read_through: u64,
    ) -> Option<OpenWindow> {
        self.length?;
        let (start, end) = match self.open.front() {
            Some(w) => (w.start, w.end),
            // Nothing sampled: windows still pass (an empty one is closed, so that time
            // goes on).
            None => self.bounds(self.first_index),
        };
        if end.saturating_add(grace) > now && end > read_through {
            return None;
        }
        self.first_index += 1;
        Some(self.open.pop_front().unwrap_or_else(|| OpenWindow {
            start,
            end,
            stacks: self.new_stacks(start),
        }))
    }

    /// Take every open window (at the end of the session), oldest first.
    pub(crate) fn drain_all(&mut self) -> impl Iterator<Item = OpenWindow> + '_ {
        self.first_index += self.open.len() as u64;
        self.open.drain(..)
    }

    /// Start of the oldest window still open (or yet to open): samples from here on may still
    /// need the process model.
    pub(crate) fn oldest_open_start(&self) -> u64 {
        self.open
            .front()
            .map_or_else(|| self.bounds(self.first_index).0, |w| w.start)
    }

    /// The windows open now, oldest first (a window not sampled yet is not among them).
    pub(crate) fn open(&self) -> impl Iterator<Item = &OpenWindow> + '_ {
        self.open.iter()
    }

    /// Distinct stacks held in open windows, and their bytes.
    pub(crate) fn held(&self) -> (usize, usize) {
        self.open.iter().fold((0, 0), |(n, b), w| {
            (n + w.stacks.len(), b + w.stacks.heap_bytes())
        })
    }
}

/// The CLOCK_MONOTONIC time at which the wall clock (UNIX time) read the whole second that
/// the monotonic time `t` falls in, as the two clocks stand now.
fn wall_second_before(t: u64) -> u64 {
    const NANOS: u64 = 1_000_000_000;
    let mono = crate::sys::monotonic_ns();
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    // The wall clock's lead over the monotonic one, modulo a second.
    let lead = (unix % NANOS + NANOS - mono % NANOS) % NANOS;
    let into_second = (t % NANOS + lead) % NANOS;
    t.saturating_sub(into_second)
}

#[cfg(test)]
mod tests {
    use super::*;
    use profile::StackEnd;

    const S: Stack<'static> = Stack {
        kernel: &[],
        user: &[0x10],
        user_end: StackEnd::FramePointer,
    };

    fn at(time: u64) -> SampleOrigin {
        SampleOrigin {
            pid: 1,
            tid: 1,
            time,
            period: 1,
            ..SampleOrigin::default()
        }
    }

    #[test]
    fn a_window_closes_once_every_ring_was_read_after_its_end_without_the_grace() {
        let mut w = Windows::new(Some(100), 1000);
        w.add(&at(1050), &S);
        w.add(&at(1150), &S);
        assert!(
            w.pop_closed(1150, 1000, 1099).is_none(),
            "read only up to before its end"
        );
        let w0 = w
            .pop_closed(1150, 1000, 1100)
            .expect("read through its end");
        assert_eq!((w0.start, w0.end, w0.stacks.samples()), (1000, 1100, 1));
        assert!(
            w.pop_closed(1150, 1000, 1100).is_none(),
            "the next one is still open"
        );
    }

    #[test]
    fn samples_go_to_the_window_of_their_timestamp_whatever_the_arrival_order() {
        let mut w = Windows::new(Some(100), 1000);
        w.add(&at(1250), &S); // window 2
        w.add(&at(1050), &S); // window 0, arrives later
        w.add(&at(1150), &S); // window 1
        assert!(
            w.pop_closed(1105, 10, 0).is_none(),
            "window 0 ends at 1100 + grace"
        );
        let w0 = w.pop_closed(1110, 10, 0).expect("window 0 closes");
        assert_eq!((w0.start, w0.end, w0.stacks.samples()), (1000, 1100, 1));
        // A straggler for window 0 goes to the oldest open window and is counted late.
        w.add(&at(1099), &S);
        assert_eq!(w.late, 1);
        let w1 = w.pop_closed(1300, 10, 0).unwrap();
        assert_eq!((w1.start, w1.stacks.samples()), (1100, 2));
        let w2 = w.pop_closed(1310, 10, 0).unwrap();
        assert_eq!((w2.start, w2.stacks.samples()), (1200, 1));
        assert!(w.pop_closed(1310, 10, 0).is_none());
        // An idle stretch still closes (empty) windows, so time goes on.
        let w3 = w.pop_closed(1410, 10, 0).unwrap();
        assert_eq!((w3.start, w3.stacks.samples()), (1300, 0));
        assert_eq!(w.oldest_open_start(), 1400);
    }

    #[test]
    fn one_window_never_closes_by_itself() {
        let mut w = Windows::new(None, 5);
        w.add(&at(10), &S);
        w.add(&at(u64::MAX - 1), &S);
        assert!(w.pop_closed(u64::MAX, 0, 0).is_none());
        let all: Vec<OpenWindow> = w.drain_all().collect();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].stacks.samples(), 2);
    }

    #[test]
    fn windows_of_a_length_count_by_wall_clock_second() {
        let now = crate::sys::monotonic_ns();
        let mut w = Windows::new(Some(10_000_000_000), now);
        w.add(&at(now + 2_500_000_000), &S);
        w.add(&at(now + 2_600_000_000), &S);
        w.add(&at(now + 7_000_000_000), &S);
        let window = w.drain_all().next().unwrap();
        let seconds = window.stacks.seconds().expect("per second");
        // Second 0 began at a whole second of the wall clock, at most a second before.
        assert!(seconds.start <= now && now - seconds.start < 1_000_000_000);
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let grid_unix = seconds.start + (unix - crate::sys::monotonic_ns());
        let off = grid_unix % 1_000_000_000;
        assert!(
            !(5_000_000..=995_000_000).contains(&off),
            "{off} ns past a second"
        );
        let (_, stats) = window.stacks.iter().next().unwrap();
        let counts: u32 = seconds.of(stats.index()).iter().map(|c| c.count).sum();
        assert_eq!(counts, 3);
        // One window for the whole session: no per-second counts.
        let mut one = Windows::new(None, 5);
        one.add(&at(10), &S);
        assert!(one.drain_all().next().unwrap().stacks.seconds().is_none());
    }
}
