//! Off-CPU intervals: a thread's stack at switch-out (a sample of the context-switch event)
//! weighted by the time until its switch back in (a switch record).
//!
//! Records of different CPUs are ordered only within a drain round, and a thread often blocks
//! on one CPU and wakes on another: the round's switch records and samples are kept (stacks
//! copied into an arena), sorted by time when the round ends, and only then matched.
//!
//! Switches are sampled one in a period (raised when they come faster than a cap, see
//! [`SwitchCap`]), while every switch has a switch record: a sample stands for the switches
//! out of its thread on its CPU since that thread's previous sample on that CPU, counted from
//! the records, and its time off CPU is scaled by that count. Counting, rather than trusting
//! the period set, keeps the scale right for threads whose inherited event kept an older
//! period. Counting per CPU follows the kernel, whose period counter is per event, and a
//! thread's events are one per CPU: counted per thread alone, a thread that naps on one CPU
//! and waits on the other had one wait's samples stand for the other's switches too.

use std::collections::HashMap;

use profile::{SampleOrigin, Stack, StackEnd, StackWeight};
use rustc_hash::FxBuildHasher;

/// Which off-CPU intervals a recording keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keep {
    /// Only blocked time (`--off-cpu`).
    Blocked,
    /// Blocked and preempted time (`--wall`).
    AllOffCpu,
}

/// Counters of the context switches of a recording.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Switches out of the recorded threads (switch records: every one).
    pub seen: u64,
    /// Switch-out samples (stacks) read.
    pub sampled: u64,
    /// Switches the samples stood for beyond themselves (unsampled switches out of the same
    /// thread on the same CPU since its previous sample there, when the period was raised
    /// under the cap): their time is the sampled one's, scaled. Switches after a thread's
    /// last sample on a CPU stand in no sample: `seen - sampled - scaled` of them.
    pub scaled: u64,
    /// Switch samples and records the kernel dropped (a full ring).
    pub lost: u64,
    /// Sampled intervals with no end seen (a switch record lost or out of order): dropped.
    pub unmatched: u64,
    /// Time off CPU counted, in ns (blocked, and preempted when kept).
    pub off_cpu_ns: u64,
}

enum Event {
    /// A switch-out sample: its stack at `arena[start..start + len]`.
    Sample {
        origin: SampleOrigin,
        start: usize,
        kernel_len: usize,
        len: usize,
        user_end: StackEnd,
        cpu: u32,
    },
    Out {
        preempted: bool,
        cpu: u32,
    },
    In,
    Exit,
}

/// A sampled switch-out whose thread has not run again yet.
struct Pending {
    origin: SampleOrigin,
    frames: Vec<u64>,
    kernel_len: usize,
    user_end: StackEnd,
    preempted: bool,
    /// The switch record of this switch-out was seen.
    out_seen: bool,
}

/// Least time between two decisions on the switch sampling period.
const CAP_INTERVAL_NS: u64 = 50_000_000;

/// Keeps switch samples under a rate: from the switches seen (every one has a switch record)
/// since the last decision, the period that brings the samples under `cap` per second.
/// The period applies to each thread's event on each CPU, so the samples of all threads
/// together come at about the switch rate divided by the period.
#[derive(Clone, Copy, Debug)]
struct SwitchCap {
    cap: u64,
    period: u64,
    since: Option<u64>,
    seen_then: u64,
    /// A new period decided and not applied yet.
    change: Option<u64>,
}

impl SwitchCap {
    /// At `now`, with `seen` switches so far: a new period when the rate calls for one
    /// (raised as soon as the samples would pass the cap, lowered when it halves).
    fn check(&mut self, now: u64, seen: u64) {
        let Some(since) = self.since else {
            (self.since, self.seen_then) = (Some(now), seen);
            return;
        };
        let elapsed = now.saturating_sub(since);
        if elapsed < CAP_INTERVAL_NS {
            return;
        }
        let rate = (seen - self.seen_then) as f64 * 1e9 / elapsed as f64;
        (self.since, self.seen_then) = (Some(now), seen);
        let want = ((rate / self.cap.max(1) as f64).ceil() as u64).max(1);
        if want > self.period || want * 2 <= self.period {
            let period = prime_at_least(want);
            self.period = period;
            self.change = Some(period);
        }
    }
}

/// The least prime `>= n` (1 stays 1): a period sharing no factor with a short repeating
/// pattern of switches (a loop that sleeps, then reads) does not sample the same wait of the
/// pattern every time.
fn prime_at_least(n: u64) -> u64 {
    let is_prime = |k: u64| k >= 2 && (2..).take_while(|d| d * d <= k).all(|d| k % d != 0);
    if n <= 2 {
        return n.max(1);
    }
    (n..).find(|&k| is_prime(k)).unwrap_or(n)
}

/// A thread's unsampled switches out on one CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CpuCount {
    cpu: u32,
    switches: u64,
}

/// Matches switch-out samples with the switches back in.
pub(crate) struct OffCpu {
    keep: Keep,
    cap: SwitchCap,
    round: Vec<(u64, u32, Event)>,
    arena: Vec<u64>,
    pending: HashMap<u32, Pending, FxBuildHasher>,
    /// Per thread, per CPU it switched out on: its switches out there since its last sample
    /// there that no sample marked (a count leaves with the sample that takes it, a thread's
    /// entry with its last count or at its exit; at most one entry per recorded thread,
    /// holding at most one count per CPU).
    unsampled: HashMap<u32, Vec<CpuCount>, FxBuildHasher>,
    /// Buffers of closed intervals, reused.
    spare: Vec<Vec<u64>>,
    pub stats: SwitchStats,
}

impl OffCpu {
    /// Intervals to keep; switches sampled at most `cap` times a second (the recording
    /// starts with every switch sampled; `u64::MAX`: no cap).
    pub(crate) fn new(keep: Keep, cap: u64) -> OffCpu {
        OffCpu {
            keep,
            cap: SwitchCap {
                cap,
                period: 1,
                since: None,
                seen_then: 0,
                change: None,
            },
            round: Vec::new(),
            arena: Vec::new(),
            pending: HashMap::default(),
            unsampled: HashMap::default(),
            spare: Vec::new(),
            stats: SwitchStats::default(),
        }
    }

    /// A switch-out sample of `stack` taken on `cpu`; `origin.period` is ignored: the
    /// switches it stands for are counted from the switch records when the round ends.
    pub(crate) fn sample(&mut self, origin: SampleOrigin, cpu: u32, stack: &Stack<'_>) {
        self.stats.sampled += 1;
        let start = self.arena.len();
        self.arena.extend_from_slice(stack.kernel);
        self.arena.extend_from_slice(stack.user);
        self.round.push((
            origin.time,
            origin.tid,
            Event::Sample {
                origin,
                start,
                kernel_len: stack.kernel.len(),
                len: stack.len(),
                user_end: stack.user_end,
                cpu,
            },
        ));
    }

    /// A switch record of `tid` at `time` on `cpu`.
    pub(crate) fn switch(&mut self, tid: u32, cpu: u32, time: u64, out: bool, preempted: bool) {
        let event = if out {
            self.stats.seen += 1;
            Event::Out { preempted, cpu }
        } else {
            Event::In
        };
        self.round.push((time, tid, event));
    }

    /// `tid` exited at `time`: it will not run again.
    pub(crate) fn exit(&mut self, tid: u32, time: u64) {
        if !self.pending.is_empty() || !self.round.is_empty() {
            self.round.push((time, tid, Event::Exit));
        } else {
            self.unsampled.remove(&tid);
        }
    }

    /// Match the round's records in time order; each interval closed goes to `add` (its
    /// origin's time is the switch-out, its period the time off CPU in ns times the switches
    /// the sample stood for).
    pub(crate) fn end_round(&mut self, add: &mut dyn FnMut(&SampleOrigin, &Stack<'_>)) {
        // Stable: a sample stays before the switch record of the same instant.
        self.round.sort_by_key(|&(time, _, _)| time);
        let round = std::mem::take(&mut self.round);
        for (time, tid, event) in &round {
            match *event {
                Event::Sample {
                    mut origin,
                    start,
                    kernel_len,
                    len,
                    user_end,
                    cpu,
                } => {
                    let unsampled = self.take_unsampled(*tid, cpu);
                    self.stats.scaled += unsampled;
                    origin.period = 1 + unsampled;
                    let mut frames = self.spare.pop().unwrap_or_default();
                    frames.clear();
                    frames.extend_from_slice(&self.arena[start..start + len]);
                    let new = Pending {
                        origin,
                        frames,
                        kernel_len,
                        user_end,
                        preempted: false,
                        out_seen: false,
                    };
                    if let Some(old) = self.pending.insert(*tid, new) {
                        self.stats.unmatched += 1;
                        self.spare.push(old.frames);
                    }
                }
                Event::Out { preempted, cpu } => match self.pending.get_mut(tid) {
                    Some(p) if !p.out_seen => {
                        p.preempted = preempted;
                        p.out_seen = true;
                    }
                    pending => {
                        if pending.is_some() {
                            // Switched out again: the switch in between was not seen.
                            self.drop_pending(*tid);
                        }
                        self.count_unsampled(*tid, cpu);
                    }
                },
                Event::In => self.close(*tid, *time, add),
                Event::Exit => {
                    self.drop_pending(*tid);
                    self.unsampled.remove(tid);
                }
            }
        }
        self.round = round;
        self.round.clear();
        self.arena.clear();
    }

    /// After a round at `now`: decide whether the switch sampling period should change.
    pub(crate) fn check_rate(&mut self, now: u64) {
        self.cap.check(now, self.stats.seen);
    }

    /// Whether a new switch sampling period waits to be applied.
    pub(crate) fn period_change_pending(&self) -> bool {
        self.cap.change.is_some()
    }

    /// The new switch sampling period to apply, taken.
    pub(crate) fn take_period_change(&mut self) -> Option<u64> {
        self.cap.change.take()
    }

    /// Threads whose switch-out stack waits for their switch back in.
    pub(crate) fn waiting(&self) -> usize {
        self.pending.len()
    }

    /// Close every interval still open at `time` (the recording's end).
    pub(crate) fn close_all(&mut self, time: u64, add: &mut dyn FnMut(&SampleOrigin, &Stack<'_>)) {
        self.end_round(add);
        let tids: Vec<u32> = self.pending.keys().copied().collect();
        for tid in tids {
            self.close(tid, time, add);
        }
    }

    /// One more unsampled switch out of `tid` on `cpu`.
    fn count_unsampled(&mut self, tid: u32, cpu: u32) {
        let counts = self.unsampled.entry(tid).or_default();
        match counts.iter_mut().find(|c| c.cpu == cpu) {
            Some(c) => c.switches += 1,
            None => counts.push(CpuCount { cpu, switches: 1 }),
        }
    }

    /// The unsampled switches out of `tid` on `cpu`, taken: a thread keeps an entry only
    /// while some CPU holds a count for it.
    fn take_unsampled(&mut self, tid: u32, cpu: u32) -> u64 {
        let Some(counts) = self.unsampled.get_mut(&tid) else {
            return 0;
        };
        let Some(at) = counts.iter().position(|c| c.cpu == cpu) else {
            return 0;
        };
        let taken = counts.swap_remove(at).switches;
        if counts.is_empty() {
            self.unsampled.remove(&tid);
        }
        taken
    }

    fn drop_pending(&mut self, tid: u32) {
        if let Some(p) = self.pending.remove(&tid) {
            self.stats.unmatched += 1;
            self.spare.push(p.frames);
        }
    }

    fn close(&mut self, tid: u32, time: u64, add: &mut dyn FnMut(&SampleOrigin, &Stack<'_>)) {
        let Some(p) = self.pending.remove(&tid) else {
            return;
        };
        let weight = if p.preempted {
            StackWeight::Preempted
        } else {
            StackWeight::Blocked
        };
        let off = time.saturating_sub(p.origin.time);
        if time >= p.origin.time && (weight == StackWeight::Blocked || self.keep == Keep::AllOffCpu)
        {
            let ns = off.saturating_mul(p.origin.period.max(1));
            self.stats.off_cpu_ns += ns;
            let origin = SampleOrigin {
                period: ns,
                weight,
                ..p.origin
            };
            let stack = Stack {
                kernel: &p.frames[..p.kernel_len],
                user: &p.frames[p.kernel_len..],
                user_end: p.user_end,
            };
            add(&origin, &stack);
        }
        self.spare.push(p.frames);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(tid: u32, time: u64, period: u64) -> SampleOrigin {
        SampleOrigin {
            pid: 1,
            tid,
            time,
            period,
            ..SampleOrigin::default()
        }
    }

    const S: Stack<'static> = Stack {
        kernel: &[0xffff_1000],
        user: &[0x10, 0x20],
        user_end: StackEnd::FramePointer,
    };

    fn collect(
        off: &mut OffCpu,
        end: Option<u64>,
    ) -> Vec<(u32, u64, StackWeight, Vec<u64>, usize)> {
        let mut out = Vec::new();
        let mut add = |o: &SampleOrigin, s: &Stack<'_>| {
            let mut frames = s.kernel.to_vec();
            frames.extend_from_slice(s.user);
            out.push((o.tid, o.period, o.weight, frames, s.kernel.len()));
        };
        match end {
            Some(t) => off.close_all(t, &mut add),
            None => off.end_round(&mut add),
        }
        out
    }

    #[test]
    fn the_period_follows_the_switch_rate() {
        let mut off = OffCpu::new(Keep::Blocked, 1000);
        off.check_rate(0);
        off.stats.seen = 5_000; // 5000 in 100 ms: 50k/s, 50 times the cap
        off.check_rate(100_000_000);
        assert_eq!(off.take_period_change(), Some(53), "50, made prime");
        off.stats.seen += 4_900;
        off.check_rate(200_000_000);
        assert_eq!(off.take_period_change(), None, "49 is close enough");
        off.stats.seen += 5_800; // 58k/s
        off.check_rate(300_000_000);
        assert_eq!(off.take_period_change(), Some(59));
        off.stats.seen += 1_000;
        off.check_rate(400_000_000);
        assert_eq!(
            off.take_period_change(),
            Some(11),
            "10k/s: a tenth of the cap"
        );
        off.stats.seen += 100; // 1000/s
        off.check_rate(500_000_000);
        assert_eq!(off.take_period_change(), Some(1));
        assert_eq!(
            [2, 4, 8, 9, 14, 97, 100].map(prime_at_least),
            [2, 5, 11, 11, 17, 97, 101]
        );
    }

    #[test]
    fn without_a_cap_the_period_stays_one() {
        let mut off = OffCpu::new(Keep::Blocked, u64::MAX);
        off.check_rate(0);
        off.stats.seen = 10_000_000;
        off.check_rate(100_000_000);
        assert_eq!(off.take_period_change(), None);
    }

    #[test]
    fn a_sample_stands_for_the_switches_since_the_previous_one() {
        let mut off = OffCpu::new(Keep::Blocked, 1000);
        // 100 switches out of one thread, each blocked 10 ns; the kernel samples one in 4,
        // then (period raised) one in 10.
        let mut t = 0;
        for i in 0..100u64 {
            let sampled = if i < 40 { i % 4 == 3 } else { i % 10 == 9 };
            if sampled {
                off.sample(origin(9, t, 0), 0, &S);
            }
            off.switch(9, 0, t, true, false);
            off.switch(9, 0, t + 10, false, false);
            t += 100;
        }
        let got = collect(&mut off, None);
        let periods: Vec<u64> = got.iter().map(|g| g.1).collect();
        assert_eq!(periods[..10], [40; 10], "4 switches of 10 ns each");
        assert_eq!(periods[10..], [100; 6], "10 switches of 10 ns each");
        assert_eq!(
            (off.stats.seen, off.stats.sampled, off.stats.scaled),
            (100, 16, 84)
        );
        assert_eq!(off.stats.off_cpu_ns, 1000, "every switch's time, scaled");
        assert!(
            off.unsampled.is_empty(),
            "the last switch was sampled: no count is left, nor the thread's entry"
        );
        // A switch after the last sample waits in the thread's count until it exits.
        off.switch(9, 0, t, true, false);
        assert!(collect(&mut off, None).is_empty());
        assert_eq!(
            off.unsampled.get(&9).map(Vec::as_slice),
            Some(
                &[CpuCount {
                    cpu: 0,
                    switches: 1
                }][..]
            )
        );
        off.exit(9, t + 1);
        assert!(off.unsampled.is_empty());
    }

    #[test]
    fn a_sample_stands_for_the_switches_of_its_own_cpu() {
        let mut off = OffCpu::new(Keep::Blocked, 1000);
        // A thread naps 10 ns on CPU 0 and waits 30 ns on CPU 1, in turn, 60 times. Its
        // event on each CPU samples one in 5 of the switches there, the counters out of step.
        // Counted per thread alone, the samples on CPU 0 would stand for 7 switches and those
        // on CPU 1 for 3: the naps' time 1.4 times its truth, the waits' 0.6 times.
        let mut t = 0;
        let (mut on_cpu0, mut on_cpu1) = (0, 0);
        for i in 0..120u64 {
            let (cpu, blocked) = if i % 2 == 0 { (0, 10) } else { (1, 30) };
            let sampled = if cpu == 0 {
                on_cpu0 += 1;
                on_cpu0 % 5 == 0
            } else {
                on_cpu1 += 1;
                on_cpu1 % 5 == 1
            };
            if sampled {
                off.sample(origin(9, t, 0), cpu, &S);
            }
            off.switch(9, cpu, t, true, false);
            off.switch(9, cpu, t + blocked, false, false);
            t += 100;
        }
        let got = collect(&mut off, None);
        let nap: u64 = got.iter().filter(|g| g.1 % 30 != 0).map(|g| g.1).sum();
        let wait: u64 = got.iter().filter(|g| g.1 % 30 == 0).map(|g| g.1).sum();
        // Every nap stood for by a sample of CPU 0 (12 samples of 5), the waits from the first
        // sample of CPU 1 on (12 samples: 1 + 11 of 5).
        assert_eq!((nap, wait), (60 * 10, 56 * 30), "{got:?}");
    }

    #[test]
    fn an_interval_is_matched_whatever_the_order_records_were_read_in() {
        let mut off = OffCpu::new(Keep::Blocked, 1000);
        // Woken on another CPU whose ring was read first.
        off.switch(7, 0, 500, false, false);
        off.sample(origin(7, 100, 1), 0, &S);
        off.switch(7, 0, 101, true, false);
        let got = collect(&mut off, None);
        assert_eq!(
            got,
            vec![(
                7,
                400,
                StackWeight::Blocked,
                vec![0xffff_1000, 0x10, 0x20],
                1
            )]
        );
        assert_eq!((off.stats.seen, off.stats.sampled), (1, 1));
    }

    #[test]
    fn scaled_preempted_and_open_intervals() {
        let mut off = OffCpu::new(Keep::AllOffCpu, 1000);
        // Two switches out not sampled, then a sample: it stands for 3 switches, its time
        // counts 3 times (whatever period the sample says).
        off.switch(1, 0, 10, true, false);
        off.switch(1, 0, 20, false, false);
        off.switch(1, 0, 30, true, false);
        off.switch(1, 0, 40, false, false);
        off.sample(origin(1, 100, 0), 0, &S);
        off.switch(1, 0, 100, true, false);
        off.switch(1, 0, 200, false, false);
        // Preempted.
        off.sample(origin(2, 100, 1), 0, &S);
        off.switch(2, 0, 101, true, true);
        off.switch(2, 0, 150, false, false);
        // Still blocked at the end.
        off.sample(origin(3, 900, 1), 0, &S);
        off.switch(3, 0, 900, true, false);
        let got = collect(&mut off, Some(1000));
        let weights: Vec<(u32, u64, StackWeight)> = got.iter().map(|g| (g.0, g.1, g.2)).collect();
        assert!(
            weights.contains(&(1, 300, StackWeight::Blocked)),
            "{weights:?}"
        );
        assert!(weights.contains(&(2, 50, StackWeight::Preempted)));
        assert!(weights.contains(&(3, 100, StackWeight::Blocked)));
        assert_eq!(off.stats.scaled, 2);
        assert_eq!((off.stats.seen, off.stats.sampled), (5, 3));
        // Blocked time only: preempted intervals are left out.
        let mut off = OffCpu::new(Keep::Blocked, 1000);
        off.sample(origin(2, 100, 1), 0, &S);
        off.switch(2, 0, 101, true, true);
        off.switch(2, 0, 150, false, false);
        assert!(collect(&mut off, None).is_empty());
    }

    #[test]
    fn a_missed_switch_in_or_an_exit_drops_the_interval() {
        let mut off = OffCpu::new(Keep::Blocked, 1000);
        off.sample(origin(4, 100, 1), 0, &S);
        off.switch(4, 0, 100, true, false);
        // The switch back in was lost; the thread switched out again (unsampled).
        off.switch(4, 0, 300, true, false);
        off.switch(4, 0, 400, false, false);
        assert!(collect(&mut off, None).is_empty());
        off.sample(origin(5, 100, 1), 0, &S);
        off.switch(5, 0, 100, true, false);
        off.exit(5, 120);
        assert!(collect(&mut off, Some(1000)).is_empty());
        assert_eq!(off.stats.unmatched, 2);
    }
}
