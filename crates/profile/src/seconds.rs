//! Per-second counts of a window's stacks: how many samples of each distinct stack fell in
//! each second of the window, so that a window of ten seconds still tells which of them a
//! burst of CPU was in.
//!
//! The seconds are those of a grid the recorder chooses (one that starts at a second of the
//! wall clock: `start`), numbered from the grid second that holds the window's start. Counted
//! on the per-sample path by [`SecondTally`] with no allocation for a sample in the same
//! second as its stack's previous one (the common case: samples come in time order per CPU);
//! a stack's run of samples in one second is recorded when the next one falls in another.

/// Samples of one stack in one second of its window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SecondCount {
    /// The second: 0 is the grid second holding the window's start.
    pub second: u32,
    /// Samples in it.
    pub count: u32,
}

/// The per-second counts of every stack of a window, end to end: stack `i`'s at
/// `counts[starts[i]..starts[i + 1]]`, by second, each second once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WindowSeconds {
    /// Where second 0 begins (CLOCK_MONOTONIC ns): at most a second before the window's
    /// start, at a second of the wall clock when the window opened.
    pub start: u64,
    starts: Vec<u32>,
    counts: Vec<SecondCount>,
}

impl WindowSeconds {
    /// Per-second counts whose second 0 begins at `start`, no stack yet.
    pub fn new(start: u64) -> WindowSeconds {
        WindowSeconds {
            start,
            starts: vec![0],
            counts: Vec::new(),
        }
    }

    /// Add the next stack's counts (by second, each second once).
    pub fn push(&mut self, counts: &[SecondCount]) {
        self.counts.extend_from_slice(counts);
        self.starts.push(self.counts.len() as u32);
    }

    /// Stack `i`'s counts, by second (empty for a stack not pushed).
    pub fn of(&self, i: usize) -> &[SecondCount] {
        match (self.starts.get(i), self.starts.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.counts[a as usize..b as usize],
            _ => &[],
        }
    }

    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.starts.capacity() * 4 + self.counts.capacity() * std::mem::size_of::<SecondCount>()
    }
}

/// A run of samples of one stack (by its index) in one second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    stack: u32,
    second: u32,
    count: u32,
}

/// The second a stack's samples are being counted in, and how many so far (kept with the
/// stack on the per-sample path).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CurrentRun {
    second: u32,
    count: u32,
}

const NANOS: u64 = 1_000_000_000;

/// Counts samples of stacks per second of a grid starting at `start`.
#[derive(Clone, Debug)]
pub struct SecondTally {
    start: u64,
    /// The second last looked up, and its bounds (a cache: samples come in time order per
    /// CPU, so most fall in the second before them).
    cached: (u32, u64, u64),
    /// Runs that ended (their stack's next sample fell in another second).
    runs: Vec<Run>,
}

impl SecondTally {
    /// A tally of seconds from `start` (CLOCK_MONOTONIC ns).
    pub fn new(start: u64) -> SecondTally {
        SecondTally {
            start,
            cached: (0, start, start.saturating_add(NANOS)),
            runs: Vec::new(),
        }
    }

    /// The second `time` falls in (a time before the grid's start: second 0).
    fn second_of(&mut self, time: u64) -> u32 {
        let (second, lo, hi) = self.cached;
        if (lo..hi).contains(&time) {
            return second;
        }
        let second = (time.saturating_sub(self.start) / NANOS).min(u64::from(u32::MAX)) as u32;
        let lo = self.start.saturating_add(u64::from(second) * NANOS);
        self.cached = (second, lo, lo.saturating_add(NANOS));
        second
    }

    /// Count a sample at `time` of the stack `stack` (its index), whose run is `run`.
    pub fn count(&mut self, stack: u32, run: &mut CurrentRun, time: u64) {
        let second = self.second_of(time);
        if run.count > 0 && (run.second != second || run.count == u32::MAX) {
            self.runs.push(Run {
                stack,
                second: run.second,
                count: run.count,
            });
            run.count = 0;
        }
        run.second = second;
        run.count += 1;
    }

    /// Where second 0 begins.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.runs.capacity() * std::mem::size_of::<Run>()
    }

    /// The counts of `stacks` stacks by index, with each stack's current run (`current(i)`):
    /// [`WindowSeconds`] in stack index order.
    pub fn counts(&self, stacks: usize, current: impl Fn(usize) -> CurrentRun) -> WindowSeconds {
        // A counting sort of the runs by stack, then each stack's sorted by second and merged
        // (a stack's samples from several CPUs may come back to a second).
        let mut starts = vec![0u32; stacks + 1];
        for r in &self.runs {
            if let Some(s) = starts.get_mut(r.stack as usize + 1) {
                *s += 1;
            }
        }
        for i in 0..stacks {
            starts[i + 1] += starts[i] + u32::from(current(i).count > 0);
        }
        let mut next = starts.clone();
        let mut all = vec![SecondCount::default(); starts[stacks] as usize];
        let mut put = |all: &mut [SecondCount], stack: usize, second: u32, count: u32| {
            let at = &mut next[stack];
            all[*at as usize] = SecondCount { second, count };
            *at += 1;
        };
        for r in &self.runs {
            if (r.stack as usize) < stacks {
                put(&mut all, r.stack as usize, r.second, r.count);
            }
        }
        let mut out = WindowSeconds::new(self.start);
        out.counts.reserve(all.len());
        out.starts.reserve(stacks);
        for i in 0..stacks {
            let run = current(i);
            if run.count > 0 {
                put(&mut all, i, run.second, run.count);
            }
            let these = &mut all[starts[i] as usize..starts[i + 1] as usize];
            these.sort_unstable_by_key(|c| c.second);
            let first = out.counts.len();
            for c in these.iter() {
                match out.counts[first..].last_mut() {
                    Some(last) if last.second == c.second => {
                        last.count = last.count.saturating_add(c.count);
                    }
                    _ => out.counts.push(*c),
                }
            }
            out.starts.push(out.counts.len() as u32);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_counted_by_second_whatever_their_order() {
        let start = 5 * NANOS + 300;
        let mut tally = SecondTally::new(start);
        let mut runs = [CurrentRun::default(); 3];
        let at = |s: f64| start + (s * 1e9) as u64;
        // Stack 0: 2 samples in second 0, 1 in second 2, then one late for second 0.
        for (stack, t) in [(0, 0.1), (0, 0.9), (1, 0.5), (0, 2.5), (1, 0.7), (0, 0.2)] {
            tally.count(stack, &mut runs[stack as usize], at(t));
        }
        // Before the grid's start: second 0.
        tally.count(2, &mut runs[2], start - 10);
        let counts = tally.counts(3, |i| runs[i]);
        let c = |second, count| SecondCount { second, count };
        assert_eq!(counts.of(0), [c(0, 3), c(2, 1)]);
        assert_eq!(counts.of(1), [c(0, 2)]);
        assert_eq!(counts.of(2), [c(0, 1)]);
        assert_eq!(counts.of(3), []);
        assert_eq!(counts.start, start);
    }
}
