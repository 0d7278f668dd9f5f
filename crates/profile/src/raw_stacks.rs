//! Counting raw (unsymbolized) stacks on the per-sample path.

use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use crate::seconds::{CurrentRun, SecondTally, WindowSeconds};
use crate::stack::{Stack, StackEnd};
use crate::wait::StackWeight;

/// Words before the frames in a key: pid and tid packed into one, the process's start time,
/// the thread's context (see [`SampleOrigin`]), then the kernel part's length, the user
/// part's end and the stack's weight kind (bits 0-31, 32-39, 40-47).
const HEADER_WORDS: usize = 4;

/// Who took a sample and when.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleOrigin {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// When the process on `pid` at the sample's time was created (0: before sampling
    /// started): tells apart processes on a reused pid.
    pub process_start: u64,
    /// A number that changes whenever the thread's identity changes (renamed, exec'd, or a
    /// new thread on a reused tid).
    pub thread_context: u32,
    /// The sample's time.
    pub time: u64,
    /// The sample's period (for an off-CPU stack, the time off CPU in ns).
    pub period: u64,
    /// What the period measures.
    pub weight: StackWeight,
}

/// What is known about one distinct raw stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawStackStats {
    /// Samples.
    pub count: u64,
    /// Sum of the samples' periods.
    pub period: u64,
    /// Time of the first sample (the process model is consulted at this time).
    pub first_time: u64,
    /// The stack's index: the order it was first seen in.
    index: u32,
    /// The second its samples are being counted in (with per-second counts).
    run: CurrentRun,
}

impl RawStackStats {
    /// The stack's index: the order it was first seen in (its per-second counts are
    /// [`WindowSeconds::of`] it).
    pub fn index(&self) -> usize {
        self.index as usize
    }
}

/// A distinct stack as sampled: thread plus stack.
#[derive(Clone, Copy, Debug)]
pub struct RawStack<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The frames.
    pub stack: Stack<'a>,
    /// What the stack's period measures.
    pub weight: StackWeight,
}

/// Sample counts per distinct (thread, stack), and optionally per second.
#[derive(Debug, Default)]
pub struct RawStacks {
    map: HashMap<Box<[u64]>, RawStackStats, FxBuildHasher>,
    scratch: Vec<u64>,
    samples: u64,
    /// Per-second counts, when asked for ([`RawStacks::with_seconds`]).
    seconds: Option<SecondTally>,
}

fn decode(key: &[u64]) -> RawStack<'_> {
    let packed = key[0];
    let kernel_len = (key[3] as u32 as usize).min(key.len() - HEADER_WORDS);
    let frames = &key[HEADER_WORDS..];
    RawStack {
        pid: (packed >> 32) as u32,
        tid: packed as u32,
        stack: Stack {
            kernel: &frames[..kernel_len],
            user: &frames[kernel_len..],
            user_end: StackEnd::from_code((key[3] >> 32) as u8),
        },
        weight: StackWeight::from_code((key[3] >> 40) as u8),
    }
}

impl RawStacks {
    /// An empty table.
    pub fn new() -> RawStacks {
        RawStacks::default()
    }

    /// An empty table that also counts each stack's samples per second, of a grid whose
    /// second 0 begins at `start` (CLOCK_MONOTONIC ns; see [`WindowSeconds`]).
    pub fn with_seconds(start: u64) -> RawStacks {
        RawStacks {
            seconds: Some(SecondTally::new(start)),
            ..RawStacks::default()
        }
    }

    /// Count one sample of `stack` taken as `origin` says. Samples of different identities
    /// (see [`SampleOrigin`]) are never counted together, so each group is named by one
    /// identity. Allocates only for a stack not seen before; returns true for such a new stack.
    pub fn add(&mut self, origin: &SampleOrigin, stack: &Stack<'_>) -> bool {
        let SampleOrigin {
            pid,
            tid,
            process_start,
            thread_context,
            time,
            period,
            weight,
        } = *origin;
        self.samples += 1;
        self.scratch.clear();
        self.scratch.push((pid as u64) << 32 | tid as u64);
        self.scratch.push(process_start);
        self.scratch.push(u64::from(thread_context));
        self.scratch.push(
            stack.kernel.len() as u64
                | u64::from(stack.user_end.code()) << 32
                | u64::from(weight.code()) << 40,
        );
        self.scratch.extend_from_slice(stack.kernel);
        self.scratch.extend_from_slice(stack.user);
        if let Some(stats) = self.map.get_mut(&self.scratch[..]) {
            stats.count += 1;
            stats.period += period;
            stats.first_time = stats.first_time.min(time);
            if let Some(tally) = self.seconds.as_mut() {
                tally.count(stats.index, &mut stats.run, time);
            }
            return false;
        }
        let mut stats = RawStackStats {
            count: 1,
            period,
            first_time: time,
            index: self.map.len() as u32,
            run: CurrentRun::default(),
        };
        if let Some(tally) = self.seconds.as_mut() {
            tally.count(stats.index, &mut stats.run, time);
        }
        self.map.insert(self.scratch.as_slice().into(), stats);
        true
    }

    /// The per-second counts of every stack, by [`RawStackStats::index`] (None without
    /// [`RawStacks::with_seconds`]).
    pub fn seconds(&self) -> Option<WindowSeconds> {
        let tally = self.seconds.as_ref()?;
        let mut current = vec![CurrentRun::default(); self.map.len()];
        for stats in self.map.values() {
            if let Some(c) = current.get_mut(stats.index as usize) {
                *c = stats.run;
            }
        }
        Some(tally.counts(self.map.len(), |i| current[i]))
    }

    /// Every distinct stack with its counts.
    pub fn iter(&self) -> impl Iterator<Item = (RawStack<'_>, &RawStackStats)> {
        self.map.iter().map(|(key, stats)| (decode(key), stats))
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

    /// Bytes held by the distinct stacks (keys and counts), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        let per_entry = std::mem::size_of::<Box<[u64]>>() + std::mem::size_of::<RawStackStats>();
        self.map
            .keys()
            .map(|k| k.len() * 8 + per_entry)
            .sum::<usize>()
            + self.scratch.capacity() * 8
            + self.seconds.as_ref().map_or(0, SecondTally::heap_bytes)
    }

    /// Forget everything (after a flush).
    pub fn clear(&mut self) {
        self.map.clear();
        self.samples = 0;
        if let Some(tally) = self.seconds.as_mut() {
            *tally = SecondTally::new(tally.start());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(pid: u32, tid: u32, thread_context: u32, time: u64, period: u64) -> SampleOrigin {
        SampleOrigin {
            pid,
            tid,
            process_start: 0,
            thread_context,
            time,
            period,
            weight: StackWeight::OnCpu,
        }
    }

    fn stack<'a>(kernel: &'a [u64], user: &'a [u64], user_end: StackEnd) -> Stack<'a> {
        Stack {
            kernel,
            user,
            user_end,
        }
    }

    #[test]
    fn counts_identical_stacks_once() {
        let mut r = RawStacks::new();
        let s = stack(&[], &[3, 4, 5], StackEnd::Complete);
        assert!(r.add(&origin(1, 2, 0, 50, 10), &s));
        assert!(!r.add(&origin(1, 2, 0, 40, 10), &s));
        r.add(&origin(1, 3, 0, 60, 10), &s);
        r.add(
            &origin(1, 2, 0, 60, 10),
            &stack(&[], &[3, 4], StackEnd::Complete),
        );
        assert_eq!(r.len(), 3);
        assert_eq!(r.samples(), 4);
        let (raw, stats) = r
            .iter()
            .find(|(s, _)| s.tid == 2 && s.stack.user.len() == 3)
            .unwrap();
        assert_eq!(
            (raw.pid, stats.count, stats.period, stats.first_time),
            (1, 2, 20, 40)
        );
    }

    #[test]
    fn parts_and_ends_are_kept_apart() {
        let mut r = RawStacks::new();
        // The same addresses split differently, or ending differently, are different stacks.
        r.add(
            &origin(1, 1, 0, 0, 1),
            &stack(&[7], &[8, 9], StackEnd::Truncated),
        );
        r.add(
            &origin(1, 1, 0, 0, 1),
            &stack(&[7, 8], &[9], StackEnd::Truncated),
        );
        r.add(
            &origin(1, 1, 0, 0, 1),
            &stack(&[7], &[8, 9], StackEnd::Spliced),
        );
        // The same stack in another context of the thread is another group.
        r.add(
            &origin(1, 1, 7, 0, 1),
            &stack(&[7], &[8, 9], StackEnd::Spliced),
        );
        assert_eq!(r.len(), 4);
        // Or of another process on the same pid.
        let reused = SampleOrigin {
            process_start: 99,
            ..origin(1, 1, 0, 0, 1)
        };
        r.add(&reused, &stack(&[7], &[8, 9], StackEnd::Spliced));
        assert_eq!(r.len(), 5);
        let found: Vec<Stack<'_>> = r.iter().map(|(s, _)| s.stack).collect();
        assert!(found.contains(&stack(&[7], &[8, 9], StackEnd::Truncated)));
        assert!(found.contains(&stack(&[7, 8], &[9], StackEnd::Truncated)));
        assert!(found.contains(&stack(&[7], &[8, 9], StackEnd::Spliced)));
    }

    #[test]
    fn with_seconds_each_stack_is_counted_by_second_too() {
        let start = 1_000_000_000;
        let mut r = RawStacks::with_seconds(start);
        let a = stack(&[], &[3, 4], StackEnd::Complete);
        let b = stack(&[], &[5], StackEnd::Complete);
        for (s, t) in [
            (&a, 0.2),
            (&b, 0.3),
            (&a, 1.4),
            (&a, 1.5),
            (&b, 3.0),
            (&a, 0.9),
        ] {
            let time = start + (t * 1e9) as u64;
            r.add(&origin(1, 2, 0, time, 10), s);
        }
        let seconds = r.seconds().expect("counted");
        let by = |user: usize| {
            let (_, stats) = r.iter().find(|(s, _)| s.stack.user.len() == user).unwrap();
            seconds
                .of(stats.index())
                .iter()
                .map(|c| (c.second, c.count))
                .collect::<Vec<_>>()
        };
        assert_eq!(by(2), [(0, 2), (1, 2)]);
        assert_eq!(by(1), [(0, 1), (3, 1)]);
        assert!(RawStacks::new().seconds().is_none());
    }
}
