//! The roll-up format: the slices of one past hour merged into one file, so that a query over
//! a day reads 24 files instead of 8640. Pure: building, encoding, decoding and restricting
//! roll-ups; the store names and keeps the files (`store/mod.rs`), and `store/hourly.rs`
//! decides when an hour is rolled up.
//!
//! A roll-up is `<start_ns>-<end_ns>.hour.pb.gz` beside the slices: a slice file (same pprof
//! layout, `comment[0]` `profilerd slice v1`, so pprof tools read it) whose stacks are the
//! member slices' stacks merged (one per thread and stack, count = the hour's total), with
//! `comment[1]` `profilerd rollup v1`, `comment[2..]` the member slices' `<start>-<end>` (UNIX
//! ns), and on each sample a field of profilerd's own (100, which pprof tools skip): packed
//! (member index, count in that member) pairs. (As labels, the pairs made an hour's file six
//! times slower to decode.) The profile's own field 100 holds each member's period; the
//! roll-up's `period` is the shortest. When the CPU time of a member's stacks does not follow
//! from their counts and one period of the hour (the budget or a reload changed the
//! frequency within it), each sample's field 102 holds the CPU time of each of its pairs. A
//! query reads from a roll-up exactly the samples of the members that overlap its range, so
//! its answer is the one the member slices gave.

#[cfg(test)]
use std::collections::HashMap;

use crate::slice::{decode_profile_within, samples_of, Slice, SliceError};
#[cfg(test)]
use crate::slice::{encode_profile, SliceStack};

/// `comment[1]` of a roll-up.
pub const ROLLUP_COMMENT: &str = "profilerd rollup v1";

/// A roll-up: the merged stacks and, per stack, its count in each member slice.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rollup {
    /// The merged stacks; each stack's count is its total over the members.
    pub slice: Slice,
    /// The member slices' `(start_ns, end_ns)`, oldest first.
    pub members: Vec<(u64, u64)>,
    /// Per stack of `slice` (same order): `(member index, count)`.
    pub counts: Vec<Vec<(u32, u64)>>,
    /// Each member's period (ns per sample).
    pub member_periods: Vec<u64>,
    /// Per stack of `slice` (same order), the CPU time of each of its `counts`, when it does
    /// not follow from the counts and one period of the hour; None when it does.
    pub member_cpu: Option<Vec<Vec<u64>>>,
}

/// Identity of a stack across slices: everything but its count.
#[cfg(test)]
type StackKey = (
    Vec<u32>,
    u32,
    u32,
    u32,
    u64,
    Option<String>,
    Option<u32>,
    Option<u32>,
    Vec<u32>,
    Option<String>,
);

impl Rollup {
    /// One slice as a roll-up of itself: one member, spanning `span` (`(start_ns, end_ns)`).
    pub fn of_slice(slice: Slice, span: (u64, u64)) -> Rollup {
        Rollup {
            members: vec![span],
            counts: slice.stacks.iter().map(|s| vec![(0, s.count)]).collect(),
            member_periods: vec![slice.period_ns],
            member_cpu: None,
            slice,
        }
    }

    /// The time `time_ns` of stack `i` (of the measure a query asks: its CPU time, or its
    /// time off CPU) held by each member it is in: `(member, time)`. A CPU stack's CPU time
    /// per member as kept when the hour's frequency changed; else in proportion to the
    /// member's count (exact while one period holds).
    pub fn member_times(&self, i: usize, time_ns: u64) -> impl Iterator<Item = (u32, u64)> + '_ {
        let stack = &self.slice.stacks[i];
        let exact = self
            .member_cpu
            .as_ref()
            .filter(|_| stack.off_cpu_ns == 0 && time_ns == stack.cpu_ns)
            .map(|cpu| &cpu[i]);
        let all = stack.count.max(1);
        self.counts[i]
            .iter()
            .enumerate()
            .map(move |(k, &(m, count))| {
                let time = match exact {
                    Some(cpu) => cpu[k],
                    None => (u128::from(time_ns) * u128::from(count) / u128::from(all)) as u64,
                };
                (m, time)
            })
    }

    /// Merge `slices` (oldest first, not overlapping, of one period): the reference the
    /// incremental build (`rollup_builder.rs`) is tested against.
    #[cfg(test)]
    pub fn build(slices: &[Slice]) -> Rollup {
        let mut names: Vec<String> = Vec::new();
        let mut name_ids: HashMap<&str, u32> = HashMap::new();
        let mut stack_ids: HashMap<StackKey, usize> = HashMap::new();
        let mut stacks: Vec<SliceStack> = Vec::new();
        let mut counts: Vec<Vec<(u32, u64)>> = Vec::new();
        let mut cpu: Vec<Vec<u64>> = Vec::new();
        let mut seconds: Vec<Vec<(u32, u64)>> = Vec::new();
        let bases = crate::seconds::member_seconds(
            &slices
                .iter()
                .map(|s| (s.start_ns, s.end_ns))
                .collect::<Vec<_>>(),
        );
        let mut members = Vec::with_capacity(slices.len());
        let mut remap: Vec<u32> = Vec::new();
        let first_period = slices.first().map_or(0, |s| s.period_ns);
        let follows = slices.iter().all(|slice| {
            slice.period_ns == first_period
                && slice.stacks.iter().all(|s| {
                    s.off_cpu_ns > 0 || s.cpu_ns == s.count.saturating_mul(slice.period_ns)
                })
        });
        for (m, slice) in slices.iter().enumerate() {
            members.push((slice.start_ns, slice.end_ns));
            remap.clear();
            for name in &slice.names {
                let next = names.len() as u32;
                let id = *name_ids.entry(name.as_str()).or_insert(next);
                if id == next {
                    names.push(name.clone());
                }
                remap.push(id);
            }
            for s in &slice.stacks {
                let frames: Vec<u32> = s.frames.iter().map(|&f| remap[f as usize]).collect();
                let key = (
                    frames,
                    s.kernel_frames,
                    s.pid,
                    s.tid,
                    s.process_start,
                    s.comm.clone(),
                    s.uid,
                    s.share_uid,
                    s.ancestors.clone(),
                    s.cgroup.clone(),
                );
                let next = stacks.len();
                let i = *stack_ids.entry(key.clone()).or_insert(next);
                if i == next {
                    stacks.push(SliceStack {
                        frames: key.0,
                        kernel_frames: s.kernel_frames,
                        pid: s.pid,
                        tid: s.tid,
                        process_start: s.process_start,
                        comm: s.comm.clone(),
                        uid: s.uid,
                        share_uid: s.share_uid,
                        ancestors: s.ancestors.clone(),
                        cgroup: s.cgroup.clone(),
                        count: 0,
                        cpu_ns: 0,
                        off_cpu_ns: 0,
                        seconds: Default::default(),
                    });
                    counts.push(Vec::new());
                    cpu.push(Vec::new());
                    seconds.push(Vec::new());
                }
                seconds[i].extend(
                    s.seconds
                        .iter()
                        .map(|(k, c)| ((bases[m] + u64::from(k)) as u32, c)),
                );
                stacks[i].count += s.count;
                stacks[i].cpu_ns += s.cpu_ns;
                stacks[i].off_cpu_ns += s.off_cpu_ns;
                match counts[i].last_mut() {
                    Some((last, c)) if *last == m as u32 => {
                        *c += s.count;
                        *cpu[i].last_mut().unwrap() += s.cpu_ns;
                    }
                    _ => {
                        counts[i].push((m as u32, s.count));
                        cpu[i].push(s.cpu_ns);
                    }
                }
            }
        }
        for (stack, mut these) in stacks.iter_mut().zip(seconds) {
            these.sort_unstable_by_key(|p| p.0);
            let mut merged: Vec<(u32, u64)> = Vec::with_capacity(these.len());
            for (second, count) in these {
                match merged.last_mut() {
                    Some((s, c)) if *s == second => *c += count,
                    _ => merged.push((second, count)),
                }
            }
            stack.seconds = crate::seconds::SecondCounts::encode(merged);
        }
        Rollup {
            slice: Slice {
                start_ns: members.first().map_or(0, |m| m.0),
                end_ns: members.last().map_or(0, |m| m.1),
                // The shortest period of the hour: queries give counts in samples of it
                // (each stack's cpu_ns says what it stands for).
                period_ns: slices
                    .iter()
                    .map(|s| s.period_ns)
                    .filter(|&p| p > 0)
                    .min()
                    .unwrap_or(0),
                names,
                stacks,
            },
            members,
            counts,
            member_periods: slices.iter().map(|s| s.period_ns).collect(),
            member_cpu: (!follows).then_some(cpu),
        }
    }

    /// The roll-up file's bytes (gzipped pprof): the reference the streamed file
    /// (`rollup_writer.rs`) is tested against.
    #[cfg(test)]
    pub fn encode(&self) -> Vec<u8> {
        let mut p = self.slice.to_pprof();
        let mut string = |s: &str| {
            p.string_table.push(s.to_string());
            p.string_table.len() as i64 - 1
        };
        let mut comments = vec![string(ROLLUP_COMMENT)];
        for &(start, end) in &self.members {
            comments.push(string(&format!("{start}-{end}")));
        }
        p.comment.extend(comments);
        p.member_period_ns = self.member_periods.clone();
        for (i, (sample, counts)) in p.sample.iter_mut().zip(&self.counts).enumerate() {
            sample.slice_counts = counts.iter().flat_map(|&(m, c)| [m as u64, c]).collect();
            if let Some(cpu) = &self.member_cpu {
                sample.slice_cpu_ns = cpu[i].clone();
            }
        }
        encode_profile(&p)
    }

    /// A roll-up from its file's bytes; anything inconsistent is an error.
    pub fn decode(bytes: &[u8]) -> Result<Rollup, SliceError> {
        Rollup::decode_within(bytes, crate::slice::MAX_SLICE_BYTES)
    }

    /// [`Rollup::decode`], refusing ([`SliceError::OverLimit`]) a file that decompresses to
    /// more than `limit` bytes before decoding it.
    pub fn decode_within(bytes: &[u8], limit: u64) -> Result<Rollup, SliceError> {
        let p = decode_profile_within(bytes, limit)?;
        let slice = Slice::from_pprof(&p)?;
        let string = |i: i64| {
            usize::try_from(i)
                .ok()
                .and_then(|i| p.string_table.get(i))
                .map(String::as_str)
        };
        let bad = SliceError::Invalid;
        if p.comment.get(1).and_then(|&c| string(c)) != Some(ROLLUP_COMMENT) {
            return Err(bad("not a profilerd roll-up"));
        }
        debug_assert_eq!(slice.stacks.len(), p.sample.len());
        let mut members = Vec::with_capacity(p.comment.len().saturating_sub(2));
        for &c in &p.comment[2..] {
            let span = string(c)
                .and_then(|s| s.split_once('-'))
                .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
                .filter(|(a, b)| a < b)
                .ok_or(bad("a roll-up member that is not START-END"))?;
            members.push(span);
        }
        let member_periods = match p.member_period_ns.len() {
            0 => vec![slice.period_ns; members.len()],
            n if n == members.len() => p.member_period_ns.clone(),
            _ => return Err(bad("a roll-up's member periods are not one per member")),
        };
        let exact = p.sample.iter().any(|s| !s.slice_cpu_ns.is_empty());
        let mut member_cpu = Vec::with_capacity(if exact { p.sample.len() } else { 0 });
        let mut counts = Vec::with_capacity(p.sample.len());
        for (sample, stack) in p.sample.iter().zip(&slice.stacks) {
            if sample.slice_counts.len() % 2 != 0 {
                return Err(bad("a roll-up sample's counts are not pairs"));
            }
            let mut these: Vec<(u32, u64)> = Vec::with_capacity(sample.slice_counts.len() / 2);
            for pair in sample.slice_counts.chunks_exact(2) {
                let m = u32::try_from(pair[0])
                    .ok()
                    .filter(|&m| (m as usize) < members.len())
                    .ok_or(bad("a roll-up sample's member out of range"))?;
                these.push((m, pair[1]));
            }
            if these.iter().map(|&(_, c)| c).sum::<u64>() != stack.count {
                return Err(bad("a roll-up sample's counts do not add up"));
            }
            if exact {
                if sample.slice_cpu_ns.len() != these.len()
                    || sample.slice_cpu_ns.iter().sum::<u64>() != stack.cpu_ns
                {
                    return Err(bad(
                        "a roll-up sample's CPU times are not one per member, or do not add up",
                    ));
                }
                member_cpu.push(sample.slice_cpu_ns.clone());
            }
            counts.push(these);
        }
        Ok(Rollup {
            slice,
            members,
            counts,
            member_periods,
            member_cpu: exact.then_some(member_cpu),
        })
    }

    /// The stacks of the members that overlap `[since_ns, until_ns)` (a slice overlapping the
    /// range counts whole, as when the members were files of their own), as one slice,
    /// without per-second counts.
    ///
    /// The slice's period is the shortest of those members'; when they were sampled at
    /// different frequencies, each CPU stack counts its CPU time in samples of it (as a query
    /// counts slices of other frequencies).
    pub fn restrict(mut self, since_ns: u64, until_ns: u64) -> Slice {
        let inside: Vec<bool> = self
            .members
            .iter()
            .map(|&(start, end)| start < until_ns && end > since_ns)
            .collect();
        let periods = || {
            self.member_periods
                .iter()
                .zip(&inside)
                .filter(|&(&p, &i)| i && p > 0)
                .map(|(&p, _)| p)
        };
        let shortest = periods().min().unwrap_or(self.slice.period_ns);
        let mixed = periods().any(|p| p != shortest);
        let all_inside = inside.iter().all(|&i| i);
        // Numbered across the members, the per-second counts mean nothing without them: a
        // restricted roll-up is read for its stacks only (the timeline reads the members).
        for stack in &mut self.slice.stacks {
            stack.seconds = Default::default();
        }
        if all_inside && !mixed {
            return self.slice;
        }
        let mut stacks = Vec::with_capacity(self.slice.stacks.len());
        let stacks_in = std::mem::take(&mut self.slice.stacks);
        for (i, (mut stack, counts)) in stacks_in.into_iter().zip(&self.counts).enumerate() {
            if !all_inside {
                let all = stack.count;
                stack.count = counts
                    .iter()
                    .filter(|&&(m, _)| inside[m as usize])
                    .map(|&(_, c)| c)
                    .sum();
                // CPU time as kept per member (the frequency changed within the hour), else
                // in proportion (exact while it did not); off-CPU time in proportion to the
                // intervals.
                let share = |ns: u64| {
                    (u128::from(ns) * u128::from(stack.count) / u128::from(all.max(1))) as u64
                };
                stack.cpu_ns = match &self.member_cpu {
                    Some(cpu) => counts
                        .iter()
                        .zip(&cpu[i])
                        .filter(|&(&(m, _), _)| inside[m as usize])
                        .map(|(_, &ns)| ns)
                        .sum(),
                    None => share(stack.cpu_ns),
                };
                stack.off_cpu_ns = match share(stack.off_cpu_ns) {
                    0 if stack.off_cpu_ns > 0 => 1,
                    ns => ns,
                };
                if stack.count == 0 {
                    continue;
                }
            }
            if mixed && stack.off_cpu_ns == 0 {
                stack.count = samples_of(stack.cpu_ns, shortest);
            }
            stacks.push(stack);
        }
        self.slice.stacks = stacks;
        self.slice.period_ns = shortest;
        self.slice
    }
}

/// Is the slice `span` listed as a member of `rollup`?
pub fn is_member(rollup: &Rollup, span: (u64, u64)) -> bool {
    rollup.members.binary_search(&span).is_ok()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::slice::tests::example;

    const S: u64 = 1_000_000_000;
    /// An hour's start.
    pub(crate) const H: u64 = 1_700_002_800 * S;

    /// Slice `i` of a history from `H - 5 min`: counts and stacks vary with `i`, so that a
    /// query that selected the wrong slices gives another answer.
    pub(crate) fn slice(i: u64) -> Slice {
        let mut s = example(H - 300 * S + i * 10 * S);
        s.stacks[0].count = 1 + i % 7;
        s.stacks[1].count = i % 3;
        s.stacks[1].tid = 200 + (i % 2) as u32;
        if i % 5 == 0 {
            s.names.push(format!("only_in_{i}"));
            s.stacks[2].frames = vec![0, s.names.len() as u32 - 1];
        }
        s.stacks.retain(|st| st.count > 0);
        for st in &mut s.stacks {
            st.cpu_ns = st.count * s.period_ns;
        }
        crate::slice::tests::spread_seconds(&mut s, i);
        s
    }

    #[test]
    fn a_roll_up_round_trips() {
        let slices: Vec<Slice> = (0..20).map(slice).collect();
        let rollup = Rollup::build(&slices);
        assert_eq!(Rollup::decode(&rollup.encode()).unwrap(), rollup);
        let total: u64 = slices.iter().map(Slice::samples).sum();
        assert_eq!(rollup.slice.samples(), total);
        // Merged: one stack per thread and stack, not one per slice.
        assert!(
            rollup.slice.stacks.len() < 12,
            "{}",
            rollup.slice.stacks.len()
        );
        // Still a slice to anything that reads slices (go tool pprof).
        assert_eq!(Slice::decode(&rollup.encode()).unwrap(), rollup.slice);
    }
}
