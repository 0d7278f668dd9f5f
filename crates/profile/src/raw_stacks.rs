//! Counting raw (unsymbolized) stacks on the per-sample path.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

/// Words before the callchain in a key: pid and tid packed into one.
const HEADER_WORDS: usize = 1;

/// What is known about one distinct raw stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawStackStats {
    /// Samples.
    pub count: u64,
    /// Sum of the samples' periods.
    pub period: u64,
    /// Time of the first sample (the process model is consulted at this time).
    pub first_time: u64,
}

/// A distinct stack as sampled: thread plus raw callchain (leaf first, with context markers).
#[derive(Clone, Copy, Debug)]
pub struct RawStack<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Callchain entries, leaf first.
    pub callchain: &'a [u64],
}

/// Sample counts per distinct (thread, callchain).
#[derive(Debug, Default)]
pub struct RawStacks {
    map: HashMap<Box<[u64]>, RawStackStats, FxBuildHasher>,
    scratch: Vec<u64>,
    samples: u64,
}

impl RawStacks {
    /// An empty table.
    pub fn new() -> RawStacks {
        RawStacks::default()
    }

    /// Count one sample. Allocates only for a stack not seen before; returns true for such a
    /// new stack (see [`RawStacks::last_callchain`]).
    pub fn add(
        &mut self,
        pid: u32,
        tid: u32,
        time: u64,
        period: u64,
        callchain: impl Iterator<Item = u64>,
    ) -> bool {
        self.samples += 1;
        self.scratch.clear();
        self.scratch.push((pid as u64) << 32 | tid as u64);
        self.scratch.extend(callchain);
        if let Some(stats) = self.map.get_mut(&self.scratch[..]) {
            stats.count += 1;
            stats.period += period;
            stats.first_time = stats.first_time.min(time);
            return false;
        }
        self.map.insert(
            self.scratch.as_slice().into(),
            RawStackStats {
                count: 1,
                period,
                first_time: time,
            },
        );
        true
    }

    /// The callchain of the sample [`RawStacks::add`] counted last.
    pub fn last_callchain(&self) -> &[u64] {
        self.scratch.get(HEADER_WORDS..).unwrap_or(&[])
    }

    /// Every distinct stack with its counts.
    pub fn iter(&self) -> impl Iterator<Item = (RawStack<'_>, &RawStackStats)> {
        self.map.iter().map(|(key, stats)| {
            let packed = key[0];
            (
                RawStack {
                    pid: (packed >> 32) as u32,
                    tid: packed as u32,
                    callchain: &key[HEADER_WORDS..],
                },
                stats,
            )
        })
    }

    /// Samples counted.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Distinct stacks.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Forget everything (after a flush).
    pub fn clear(&mut self) {
        self.map.clear();
        self.samples = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_identical_stacks_once() {
        let mut r = RawStacks::new();
        assert!(r.add(1, 2, 50, 10, [3u64, 4, 5].into_iter()));
        assert_eq!(r.last_callchain(), &[3, 4, 5]);
        assert!(!r.add(1, 2, 40, 10, [3u64, 4, 5].into_iter()));
        r.add(1, 3, 60, 10, [3u64, 4, 5].into_iter());
        r.add(1, 2, 60, 10, [3u64, 4].into_iter());
        assert_eq!(r.len(), 3);
        assert_eq!(r.samples(), 4);
        let (stack, stats) = r
            .iter()
            .find(|(s, _)| s.tid == 2 && s.callchain.len() == 3)
            .unwrap();
        assert_eq!(
            (stack.pid, stats.count, stats.period, stats.first_time),
            (1, 2, 20, 40)
        );
    }
}
