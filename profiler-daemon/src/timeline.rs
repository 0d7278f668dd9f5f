//! The CPU timeline of a time range: each bucket's CPU in cores, by group (command name,
//! process, user or cgroup), the top groups kept and the rest as "other"; optionally only the
//! CPU spent with a function on the stack. Read from the same stored files as the other
//! queries (`query`), each member slice of a roll-up placed at its own time, each stack's CPU
//! in the wall-clock seconds its samples fell in (`seconds.rs`): 1-s resolution whatever the
//! slice length. A stack without per-second counts (a slice written before they were kept,
//! off-CPU time) is spread evenly over its slice, whose span is then the answer's resolution
//! ([`Timeline::resolution_ns`]: the coarsest of what it drew from).

use std::collections::HashMap;

use crate::access::Visibility;
use crate::filter::Filter;
use crate::folding::comm_of;
use crate::measure::{visible_frames, MeasureSlices};
use crate::query::{Bounds, QueryError};
use crate::seconds::{member_seconds, second_span, NANOS};
use crate::slice::{SliceError, SliceStack};
use crate::store::Store;

/// Most buckets one timeline may have.
pub const MAX_BUCKETS: u64 = 20_000;

/// The group the rest is summed in.
pub use daemon_api::history::OTHER;

/// What the CPU is grouped by (`by=`).
pub use daemon_api::history::GroupBy;

/// The group of `s` under `by` (a process: its pid; named after its main thread by
/// [`Sums::name`]).
fn group_key(by: GroupBy, s: &SliceStack) -> String {
    match by {
        GroupBy::Comm => comm_of(s),
        GroupBy::Pid => s.pid.to_string(),
        GroupBy::Uid => s.uid.map_or("unknown".into(), |u| u.to_string()),
        GroupBy::Cgroup => s.cgroup.clone().unwrap_or_else(|| "unknown".into()),
    }
}

/// What a timeline shows.
#[derive(Clone, Debug)]
pub struct Request {
    /// Range, UNIX ns: `[since, until)`.
    pub since_ns: u64,
    /// End of the range.
    pub until_ns: u64,
    /// Bucket length, ns (buckets start at multiples of it, UNIX time).
    pub bucket_ns: u64,
    /// Grouping.
    pub by: GroupBy,
    /// Groups kept; the rest is [`OTHER`].
    pub top: usize,
    /// Only CPU with this function on the stack.
    pub function: Option<String>,
}

/// One bucket: its start (UNIX seconds) and its CPU in cores by group.
#[derive(Debug, Default, PartialEq, serde::Serialize)]
pub struct Bucket {
    /// Start, UNIX seconds.
    pub start: u64,
    /// Cores by group.
    pub cpu: std::collections::BTreeMap<String, f64>,
}

/// A timeline and what was read for it.
#[derive(Debug, Default)]
pub struct Timeline {
    /// The buckets, oldest first (every bucket of the range, empty ones included).
    pub buckets: Vec<Bucket>,
    /// Files read.
    pub slices: u64,
    /// Files skipped as corrupt or truncated.
    pub skipped: u64,
    /// The coarsest time resolution of the data drawn, ns: a second, or the span of a slice
    /// whose stacks have no per-second counts (a second when nothing was drawn).
    pub resolution_ns: u64,
}

/// What a process's group is named after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Named {
    /// Nothing yet (or not a process).
    Not,
    /// A thread other than the main one.
    Thread,
    /// The main thread.
    Main,
}

/// CPU ns by (group, bucket), with the groups' names.
#[derive(Default)]
struct Sums {
    groups: HashMap<String, u32>,
    names: Vec<String>,
    /// Per group (by pid): what it is named after.
    named: Vec<Named>,
    cpu: HashMap<(u32, u32), f64>,
}

impl Sums {
    /// Add `cpu_ns` spent evenly over `[start, end)` (ns) to `group`'s buckets, counting only
    /// the part inside the range.
    fn add(&mut self, group: u32, cpu_ns: f64, (start, end): (u64, u64), request: &Request) {
        let lo = start.max(request.since_ns);
        let hi = end.min(request.until_ns);
        if lo >= hi || end <= start {
            return;
        }
        let per_ns = cpu_ns / (end - start) as f64;
        let first = request.since_ns / request.bucket_ns * request.bucket_ns;
        let mut b = (lo - first) / request.bucket_ns;
        loop {
            let b_start = first + b * request.bucket_ns;
            if b_start >= hi {
                break;
            }
            let b_end = b_start + request.bucket_ns;
            let overlap = hi.min(b_end) - lo.max(b_start);
            *self.cpu.entry((group, b as u32)).or_default() += per_ns * overlap as f64;
            b += 1;
        }
    }

    /// Name the process `group` `comm[pid]` after `s`: its main thread's command name, else
    /// the first thread's seen.
    fn name(&mut self, group: u32, s: &SliceStack) {
        let g = group as usize;
        let main = s.tid == s.pid;
        match self.named[g] {
            Named::Main => {}
            Named::Thread if !main => {}
            _ => {
                self.names[g] = format!("{}[{}]", comm_of(s), s.pid);
                self.named[g] = if main { Named::Main } else { Named::Thread };
            }
        }
    }

    /// The id of `name`.
    fn group(&mut self, name: String) -> u32 {
        if let Some(&id) = self.groups.get(&name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.clone());
        self.named.push(Named::Not);
        self.groups.insert(name, id);
        id
    }

    /// Rough bytes held.
    fn bytes(&self) -> u64 {
        (self.cpu.len() * 32 + self.names.iter().map(|n| 2 * n.len() + 48).sum::<usize>()) as u64
    }
}

/// The timeline of `request` from `store`, of the stacks `filter` and `visibility` admit,
/// within `bounds`.
pub fn timeline(
    store: &Store,
    request: &Request,
    filter: &Filter,
    visibility: Visibility,
    bounds: &Bounds,
) -> Result<Timeline, QueryError> {
    let _release = crate::query::ReleaseMemory;
    let mut sums = Sums::default();
    let mut out = Timeline {
        resolution_ns: NANOS,
        ..Timeline::default()
    };
    let in_range = |(a, b): (u64, u64)| a < request.until_ns && b > request.since_ns;
    for meta in &store
        .select_for(bounds.querier, request.since_ns, request.until_ns)
        .slices
    {
        bounds.check()?;
        let rollup = match store.read_members(meta, bounds.max_bytes) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(SliceError::OverLimit(n)) => return Err(QueryError::FileTooLarge(n)),
            Err(_) => {
                out.skipped += 1;
                continue;
            }
        };
        out.slices += 1;
        let bases = member_seconds(&rollup.members);
        let preempted = crate::measure::preempted_frame(&rollup.slice.names);
        let wanted: Option<Vec<bool>> = request.function.as_deref().map(|f| {
            let f = profile::sanitize_frame(f);
            let names = &rollup.slice.names;
            names
                .iter()
                .map(|n| n == f.as_ref() || profile::sanitize_frame(n) == f)
                .collect()
        });
        for (i, s) in rollup.slice.stacks.iter().enumerate() {
            if !filter.admits(s, visibility) || s.count == 0 {
                continue;
            }
            // The stack's time of the measure asked (CPU, off-CPU or wall-clock).
            let Some(time_ns) = filter.measure.time_of(s, preempted) else {
                continue;
            };
            if let Some(wanted) = &wanted {
                let (frames, marker) = visible_frames(s, &rollup.slice.names, visibility);
                if !frames
                    .iter()
                    .chain(&marker)
                    .any(|&f| wanted.get(f as usize) == Some(&true))
                {
                    continue;
                }
            }
            let group = sums.group(group_key(request.by, s));
            if request.by == GroupBy::Pid {
                sums.name(group, s);
            }
            if s.seconds.is_empty() {
                // Known per slice only: spread over each member's span.
                for (m, time) in rollup.member_times(i, time_ns) {
                    let Some(&span) = rollup.members.get(m as usize) else {
                        continue;
                    };
                    if in_range(span) {
                        out.resolution_ns = out.resolution_ns.max(span.1 - span.0);
                    }
                    sums.add(group, time as f64, span, request);
                }
                continue;
            }
            // Each member's time, shared out between its seconds by their counts.
            let mut parts = rollup.counts[i]
                .iter()
                .zip(rollup.member_times(i, time_ns))
                .map(|(&(m, count), (_, time))| (m as usize, count, time))
                .peekable();
            let mut member = 0usize;
            for (second, count) in s.seconds.iter() {
                let second = u64::from(second);
                while bases.get(member + 1).is_some_and(|&next| next <= second) {
                    member += 1;
                }
                let (Some(&span), Some(&base)) = (rollup.members.get(member), bases.get(member))
                else {
                    break;
                };
                while parts.peek().is_some_and(|p| p.0 < member) {
                    parts.next();
                }
                let Some(&(m, in_member, time)) = parts.peek() else {
                    break;
                };
                if m != member || in_member == 0 {
                    continue;
                }
                let cpu = time as f64 * count as f64 / in_member as f64;
                sums.add(group, cpu, second_span(span, second - base), request);
            }
        }
        if sums.bytes() > bounds.max_bytes {
            return Err(QueryError::TooLarge(bounds.max_bytes));
        }
    }
    out.buckets = buckets(&sums, request);
    Ok(out)
}

/// Every bucket of the range, in cores, the top groups by CPU kept and the rest as
/// [`OTHER`].
fn buckets(sums: &Sums, request: &Request) -> Vec<Bucket> {
    let mut totals = vec![0.0; sums.names.len()];
    for (&(g, _), &cpu) in &sums.cpu {
        totals[g as usize] += cpu;
    }
    let mut order: Vec<u32> = (0..sums.names.len() as u32).collect();
    order.sort_by(|&a, &b| {
        totals[b as usize]
            .total_cmp(&totals[a as usize])
            .then_with(|| sums.names[a as usize].cmp(&sums.names[b as usize]))
    });
    let mut shown: Vec<Option<&str>> = vec![None; sums.names.len()];
    for &g in order.iter().take(request.top) {
        shown[g as usize] = Some(&sums.names[g as usize]);
    }
    let first = request.since_ns / request.bucket_ns * request.bucket_ns;
    let count = (request.until_ns - first).div_ceil(request.bucket_ns);
    let mut out: Vec<Bucket> = (0..count)
        .map(|b| Bucket {
            start: (first + b * request.bucket_ns) / 1_000_000_000,
            cpu: Default::default(),
        })
        .collect();
    for (&(g, b), &cpu_ns) in &sums.cpu {
        let Some(bucket) = out.get_mut(b as usize) else {
            continue;
        };
        let name = shown[g as usize].unwrap_or(OTHER);
        *bucket.cpu.entry(name.to_string()).or_default() += cpu_ns;
    }
    for (b, bucket) in out.iter_mut().enumerate() {
        // Cores over the part of the bucket inside the range.
        let b_start = first + b as u64 * request.bucket_ns;
        let b_end = b_start + request.bucket_ns;
        let covered = (b_end.min(request.until_ns) - b_start.max(request.since_ns)) as f64;
        for cores in bucket.cpu.values_mut() {
            *cores = (*cores / covered * 1000.0).round() / 1000.0;
        }
        bucket.cpu.retain(|_, cores| *cores > 0.0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slice::tests::example;
    use std::time::Duration;

    fn bounds() -> Bounds {
        Bounds::new(1 << 20, std::time::Duration::from_secs(10))
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn cpu_is_placed_in_the_buckets_its_slices_cover() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(1 << 30), 1 << 30, 0).unwrap();
        // Two 10-s slices at 1000 s and 1020 s (a gap between).
        for start in [1000 * S, 1020 * S] {
            let mut slice = example(start);
            slice.end_ns = start + 10 * S;
            store.write(&slice, 0).unwrap();
        }
        let request = Request {
            since_ns: 1000 * S,
            until_ns: 1030 * S,
            bucket_ns: 5 * S,
            by: GroupBy::Comm,
            top: 2,
            function: None,
        };
        let t = timeline(
            &store,
            &request,
            &Filter::default(),
            Visibility::All,
            &bounds(),
        )
        .unwrap();
        assert_eq!(t.slices, 2);
        assert_eq!(t.buckets.len(), 6);
        assert_eq!(t.buckets[0].start, 1000);
        // split: 30 samples of P ns over 10 s; the top 2 are split and [pid 200], init is
        // "other".
        let split = 30.0 * 10_101_010.0 / 10e9;
        assert!((t.buckets[0].cpu["split"] - split).abs() < 0.001, "{t:?}");
        assert!(t.buckets[0].cpu.contains_key(OTHER));
        assert_eq!(t.buckets[0].cpu.len(), 3);
        assert!(t.buckets[2].cpu.is_empty() && t.buckets[3].cpu.is_empty());
        assert_eq!(t.buckets[4].cpu, t.buckets[1].cpu);
        // Only the CPU with hot_a on the stack: split's.
        let hot = Request {
            function: Some("hot_a".into()),
            ..request.clone()
        };
        let t = timeline(&store, &hot, &Filter::default(), Visibility::All, &bounds()).unwrap();
        assert_eq!(t.buckets[0].cpu.keys().collect::<Vec<_>>(), ["split"]);
        // A user sees only their own processes.
        let t = timeline(
            &store,
            &request,
            &Filter::default(),
            Visibility::OwnOnly(0),
            &bounds(),
        )
        .unwrap();
        assert_eq!(t.buckets[0].cpu.keys().collect::<Vec<_>>(), ["init"]);
    }

    #[test]
    fn a_process_is_named_after_its_main_thread() {
        let mut sums = Sums::default();
        let thread = |tid: u32, comm: &str| SliceStack {
            pid: 7,
            tid,
            comm: Some(comm.into()),
            ..SliceStack::default()
        };
        let g = sums.group(group_key(GroupBy::Pid, &thread(8, "worker")));
        sums.name(g, &thread(8, "worker"));
        assert_eq!(sums.names[g as usize], "worker[7]");
        sums.name(g, &thread(7, "server"));
        sums.name(g, &thread(9, "other"));
        assert_eq!(sums.group("7".into()), g);
        assert_eq!(sums.names[g as usize], "server[7]");
    }

    #[test]
    fn a_slice_across_buckets_is_spread_and_partial_buckets_count_their_part() {
        let mut sums = Sums::default();
        let request = Request {
            since_ns: 7 * S,
            until_ns: 20 * S,
            bucket_ns: 5 * S,
            by: GroupBy::Pid,
            top: 5,
            function: None,
        };
        let g = sums.group("a".into());
        // 4 s of CPU over [3 s, 11 s): half a core; 3 s of it inside [7, 11).
        sums.add(g, 4e9, (3 * S, 11 * S), &request);
        let out = buckets(&sums, &request);
        assert_eq!(out.iter().map(|b| b.start).collect::<Vec<_>>(), [5, 10, 15]);
        // [7, 10): 1.5 s in 3 s; [10, 11) of [10, 15): 0.5 s in 5 s.
        assert_eq!(out[0].cpu["a"], 0.5);
        assert_eq!(out[1].cpu["a"], 0.1);
        assert!(out[2].cpu.is_empty());
    }

    /// Slices of 10 s from `H + 0.4 s` (not on whole seconds) in which one thread is busy
    /// (one core: 100 samples of 10 ms a second) in the UNIX seconds `H + 13` to `H + 20` and
    /// `H + 43` to `H + 50`, with per-second counts; slices 2 and 3 at half the frequency.
    fn bursts() -> Vec<crate::slice::Slice> {
        use crate::seconds::{second_span, seconds_in, SecondCounts};
        use crate::slice::{Slice, SliceStack};
        const H: u64 = 1_700_002_800 * S;
        let busy = |second: u64| (13..21).contains(&second) || (43..51).contains(&second);
        (0..6u64)
            .map(|k| {
                let span = (
                    H + k * 10 * S + 400_000_000,
                    H + (k + 1) * 10 * S + 400_000_000,
                );
                let period = if (2..4).contains(&k) {
                    20_000_000
                } else {
                    10_000_000
                };
                let mut pairs = Vec::new();
                for j in 0..seconds_in(span) {
                    let (a, b) = second_span(span, j);
                    let second = (a / S) - H / S;
                    let count = (b - a) / period;
                    if busy(second) && count > 0 {
                        pairs.push((j as u32, count));
                    }
                }
                let count: u64 = pairs.iter().map(|p| p.1).sum();
                Slice {
                    start_ns: span.0,
                    end_ns: span.1,
                    period_ns: period,
                    names: vec!["burn".into()],
                    stacks: vec![SliceStack {
                        frames: vec![0],
                        pid: 9,
                        tid: 9,
                        comm: Some("burner".into()),
                        count,
                        cpu_ns: count * period,
                        seconds: SecondCounts::encode(pairs),
                        ..SliceStack::default()
                    }],
                }
            })
            .filter(|s| s.stacks[0].count > 0)
            .collect()
    }

    /// The burner's cores in each bucket of `bucket` s from `H + 5 s` to `H + 60 s`, and the
    /// resolution told.
    fn burner(store: &Store, bucket: u64) -> (Vec<f64>, u64) {
        const H: u64 = 1_700_002_800 * S;
        let request = Request {
            since_ns: H + 5 * S,
            until_ns: H + 60 * S,
            bucket_ns: bucket * S,
            by: GroupBy::Comm,
            top: 5,
            function: None,
        };
        let t = timeline(
            store,
            &request,
            &Filter::default(),
            Visibility::All,
            &bounds(),
        )
        .unwrap();
        let cores = t
            .buckets
            .iter()
            .map(|b| b.cpu.get("burner").copied().unwrap_or(0.0))
            .collect();
        (cores, t.resolution_ns)
    }

    #[test]
    fn cpu_is_placed_in_the_seconds_it_was_sampled_in_whatever_the_slice() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(1 << 30), 1 << 30, 0).unwrap();
        let slices = bursts();
        for slice in &slices {
            store.write(slice, 0).unwrap();
        }
        let (cores, resolution) = burner(&store, 1);
        assert_eq!(resolution, S);
        // Buckets from H + 5: the bursts are buckets 8 to 15 and 38 to 45, whole.
        for (b, c) in cores.iter().enumerate() {
            let busy = (8..16).contains(&b) || (38..46).contains(&b);
            assert_eq!(*c, if busy { 1.0 } else { 0.0 }, "bucket {b}: {cores:?}");
        }
        let (fives, _) = burner(&store, 5);
        assert_eq!(
            fives,
            [0.0, 0.4, 1.0, 0.2, 0.0, 0.0, 0.0, 0.4, 1.0, 0.2, 0.0]
        );

        // The same slices as one roll-up (two frequencies in it): the same buckets.
        let dir = tempfile::tempdir().unwrap();
        let rolled = Store::open(dir.path(), Duration::from_secs(1 << 30), 1 << 30, 0).unwrap();
        let mut builder = crate::store::rollup_builder::RollupBuilder::new(1 << 30);
        for slice in &slices {
            builder.fold(slice, (slice.start_ns, slice.end_ns)).unwrap();
        }
        let members = builder.members().to_vec();
        let key = (members[0].0, members[members.len() - 1].1);
        rolled
            .write_rollup_with(key, &members, |file| builder.write_to(file))
            .unwrap();
        assert_eq!(burner(&rolled, 1), (cores, S));
        assert_eq!(burner(&rolled, 5).0, fives);

        // A slice written before per-second counts were kept: spread over its span, which the
        // resolution says.
        let dir = tempfile::tempdir().unwrap();
        let old = Store::open(dir.path(), Duration::from_secs(1 << 30), 1 << 30, 0).unwrap();
        // The slice from H + 10.4 s (busy from H + 13 s to its end): 7.4 s of CPU over 10 s.
        let mut slice = slices[0].clone();
        assert_eq!(slice.start_ns % (10 * S), 400_000_000);
        slice.stacks[0].seconds = Default::default();
        old.write(&slice, 0).unwrap();
        let (cores, resolution) = burner(&old, 10);
        assert_eq!(resolution, 10 * S);
        assert_eq!(cores[..3], [0.0, 0.71, 0.03], "{cores:?}");
    }

    #[test]
    fn a_users_function_filter_sees_no_kernel_frame_of_an_off_cpu_stack() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(1 << 30), 1 << 30, 0).unwrap();
        // A user's thread blocked in a pipe: [user…, kernel…, wait kind], one kernel frame.
        let names = ["main", "read", "pipe_read", "[off-cpu: io]"];
        let slice = crate::slice::Slice {
            start_ns: 1000 * S,
            end_ns: 1010 * S,
            period_ns: 10_000_000,
            names: names.map(String::from).to_vec(),
            stacks: vec![SliceStack {
                frames: vec![0, 1, 2, 3],
                kernel_frames: 1,
                pid: 5,
                tid: 5,
                uid: Some(1000),
                comm: Some("w".into()),
                count: 50_000,
                off_cpu_ns: 50_000_000,
                ..SliceStack::default()
            }],
        };
        store.write(&slice, 0).unwrap();
        let cores = |function: &str, visibility: Visibility| -> f64 {
            let request = Request {
                since_ns: 1000 * S,
                until_ns: 1010 * S,
                bucket_ns: 10 * S,
                by: GroupBy::Comm,
                top: 5,
                function: Some(function.into()),
            };
            let filter = Filter {
                measure: crate::measure::Measure::OffCpu,
                ..Filter::default()
            };
            let t = timeline(&store, &request, &filter, visibility, &bounds()).unwrap();
            t.buckets.iter().flat_map(|b| b.cpu.values()).sum()
        };
        let user = Visibility::OwnOnly(1000);
        // The user's own frames and the wait kind select the stack; the kernel frame does not.
        assert!(cores("read", user) > 0.0);
        assert!(cores("[off-cpu: io]", user) > 0.0);
        assert_eq!(
            cores("pipe_read", user),
            0.0,
            "a kernel frame seen by a user"
        );
        // Those who see everything select it by its kernel frame.
        assert!(cores("pipe_read", Visibility::All) > 0.0);
    }
}
