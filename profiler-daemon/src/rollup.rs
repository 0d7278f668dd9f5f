//! Hourly roll-ups: the slices of one past hour merged into one file, so that a query over a
//! day reads 24 files instead of 8640.
//!
//! A roll-up is `<start_ns>-<end_ns>.hour.pb.gz` beside the slices: a slice file (same pprof
//! layout, `comment[0]` `profilerd slice v1`, so pprof tools read it) whose stacks are the
//! member slices' stacks merged (one per thread and stack, count = the hour's total), with
//! `comment[1]` `profilerd rollup v1`, `comment[2..]` the member slices' `<start>-<end>` (UNIX
//! ns), and on each sample a field of profilerd's own (100, which pprof tools skip): packed
//! (member index, count in that member) pairs. (As labels, the pairs made an hour's file six
//! times slower to decode.) A query reads from a roll-up exactly the samples of the members
//! that overlap its range, so its answer is the one the member slices gave.
//!
//! Durability: the roll-up is written atomically (temporary file, fsync, rename, fsync of the
//! directory) and indexed in place of its members in one step; the member files are deleted
//! [`MEMBER_GRACE`] later (queries that selected them before may still read them). A crash in
//! between leaves both: at start, a slice listed as a member of a roll-up is deleted.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::Path;
use std::time::Instant;

use tracing::{info, warn};

use crate::slice::{Slice, SliceError, SliceStack, MAX_SLICE_BYTES};
use crate::store::{read_bounded, Store};

/// `comment[1]` of a roll-up.
pub const ROLLUP_COMMENT: &str = "profilerd rollup v1";

/// File name suffix of a roll-up.
pub const SUFFIX: &str = ".hour.pb.gz";

/// The span rolled up into one file.
pub const HOUR_NS: u64 = 3_600_000_000_000;

/// Member files stay on disk this long after their roll-up replaced them in the index (longer
/// than a query may run, `api.request_timeout` at most 30 s by default).
pub const MEMBER_GRACE: std::time::Duration = std::time::Duration::from_secs(120);

/// A roll-up: the merged stacks and, per stack, its count in each member slice.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rollup {
    /// The merged stacks; each stack's count is its total over the members.
    pub slice: Slice,
    /// The member slices' `(start_ns, end_ns)`, oldest first.
    pub members: Vec<(u64, u64)>,
    /// Per stack of `slice` (same order): `(member index, count)`.
    pub counts: Vec<Vec<(u32, u64)>>,
}

/// The hour (its start, UNIX ns) a slice starting at `start_ns` belongs to.
pub fn hour_of(start_ns: u64) -> u64 {
    start_ns - start_ns % HOUR_NS
}

/// `(start, end)` of a roll-up file name.
pub fn parse_name(name: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(SUFFIX)?;
    let (start, end) = stem.split_once('-')?;
    let (start, end) = (start.parse().ok()?, end.parse().ok()?);
    (start < end).then_some((start, end))
}

/// The file name of a roll-up.
pub fn file_name(start_ns: u64, end_ns: u64) -> String {
    format!("{start_ns}-{end_ns}{SUFFIX}")
}

/// Identity of a stack across slices: everything but its count.
type StackKey = (
    Vec<u32>,
    u32,
    u32,
    u32,
    u64,
    Option<String>,
    Option<u32>,
    Vec<u32>,
    Option<String>,
);

impl Rollup {
    /// Merge `slices` (oldest first, not overlapping, of one period).
    pub fn build(slices: &[Slice]) -> Rollup {
        let mut names: Vec<String> = Vec::new();
        let mut name_ids: HashMap<&str, u32> = HashMap::new();
        let mut stack_ids: HashMap<StackKey, usize> = HashMap::new();
        let mut stacks: Vec<SliceStack> = Vec::new();
        let mut counts: Vec<Vec<(u32, u64)>> = Vec::new();
        let mut members = Vec::with_capacity(slices.len());
        let mut remap: Vec<u32> = Vec::new();
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
                        ancestors: s.ancestors.clone(),
                        cgroup: s.cgroup.clone(),
                        count: 0,
                        cpu_ns: 0,
                    });
                    counts.push(Vec::new());
                }
                stacks[i].count += s.count;
                stacks[i].cpu_ns += s.cpu_ns;
                match counts[i].last_mut() {
                    Some((last, c)) if *last == m as u32 => *c += s.count,
                    _ => counts[i].push((m as u32, s.count)),
                }
            }
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
        }
    }

    /// The roll-up file's bytes (gzipped pprof).
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
        for (sample, counts) in p.sample.iter_mut().zip(&self.counts) {
            sample.slice_counts = counts.iter().flat_map(|&(m, c)| [m as u64, c]).collect();
        }
        crate::slice::encode_profile(&p)
    }

    /// A roll-up from its file's bytes; anything inconsistent is an error.
    pub fn decode(bytes: &[u8]) -> Result<Rollup, SliceError> {
        let p = crate::slice::decode_profile(bytes)?;
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
            counts.push(these);
        }
        Ok(Rollup {
            slice,
            members,
            counts,
        })
    }

    /// The stacks of the members that overlap `[since_ns, until_ns)` (a slice overlapping the
    /// range counts whole, as when the members were files of their own), as one slice.
    pub fn restrict(mut self, since_ns: u64, until_ns: u64) -> Slice {
        let inside: Vec<bool> = self
            .members
            .iter()
            .map(|&(start, end)| start < until_ns && end > since_ns)
            .collect();
        if inside.iter().all(|&i| i) {
            return self.slice;
        }
        let mut stacks = Vec::with_capacity(self.slice.stacks.len());
        for (mut stack, counts) in self.slice.stacks.drain(..).zip(&self.counts) {
            let all = stack.count;
            stack.count = counts
                .iter()
                .filter(|&&(m, _)| inside[m as usize])
                .map(|&(_, c)| c)
                .sum();
            // CPU time in proportion (exact while the hour's frequency did not change).
            stack.cpu_ns = (u128::from(stack.cpu_ns) * u128::from(stack.count)
                / u128::from(all.max(1))) as u64;
            if stack.count > 0 {
                stacks.push(stack);
            }
        }
        self.slice.stacks = stacks;
        self.slice
    }
}

/// Is the slice `span` listed as a member of `rollup`?
pub fn is_member(rollup: &Rollup, span: (u64, u64)) -> bool {
    rollup.members.binary_search(&span).is_ok()
}

/// Hours rolled up at most per slice written (history from before roll-ups existed is rolled
/// up over several slices, not in one long pause of the naming thread).
const HOURS_PER_WRITE: usize = 8;

/// Hours that could not be rolled up, remembered so that they are not retried at every write.
const SKIPPED_KEPT: usize = 256;

/// Roll-up work in progress: member files waiting for their grace to pass, hours not rolled up.
#[derive(Debug, Default)]
pub struct Pending {
    /// Members replaced by a roll-up at that instant, deleted after [`MEMBER_GRACE`].
    members: VecDeque<(Instant, Vec<(u64, u64)>)>,
    /// Hours left as slices (members of different periods, too large, unreadable members).
    skipped: BTreeSet<u64>,
}

/// After a slice starting at `newest_start_ns` was written: delete members whose grace passed,
/// then roll up each past hour (before the hour of `newest_start_ns`) that has two or more
/// plain slices and no roll-up yet. Runs on the writer's thread.
pub fn roll_past_hours(store: &Store, newest_start_ns: u64) {
    let due: Vec<(u64, u64)> = {
        let mut pending = store.rolled();
        let mut due = Vec::new();
        while let Some((at, _)) = pending.members.front() {
            if at.elapsed() < MEMBER_GRACE {
                break;
            }
            due.extend(pending.members.pop_front().expect("front").1);
        }
        due
    };
    store.remove_plain(&due);

    let current = hour_of(newest_start_ns);
    let mut hours: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for key in store.plain_slices_before(current) {
        hours.entry(hour_of(key.0)).or_default().push(key);
    }
    let mut rolled = 0;
    for (hour, members) in hours {
        if rolled == HOURS_PER_WRITE {
            break;
        }
        if members.len() < 2
            || store.rolled().skipped.contains(&hour)
            || store.has_rollup_in(hour, hour + HOUR_NS)
        {
            continue;
        }
        rolled += 1;
        if let Err(why) = roll_hour(store, &members) {
            warn!(hour_start_ns = hour, %why, "hour left as slices, not rolled up");
            let mut pending = store.rolled();
            pending.skipped.insert(hour);
            while pending.skipped.len() > SKIPPED_KEPT {
                pending.skipped.pop_first();
            }
        }
    }
}

/// Roll up `members` (one hour's plain slices, oldest first).
fn roll_hour(store: &Store, members: &[(u64, u64)]) -> Result<(), String> {
    let started = Instant::now();
    let mut slices = Vec::with_capacity(members.len());
    for &key in members {
        let mut slice = store
            .read_plain(key)
            .map_err(|e| format!("slice {}-{}: {e}", key.0, key.1))?;
        // The index (and so a query) knows a slice by its name.
        (slice.start_ns, slice.end_ns) = key;
        slices.push(slice);
    }
    if slices.windows(2).any(|w| w[0].period_ns != w[1].period_ns) {
        return Err("the sampling frequency changed within the hour".into());
    }
    let rollup = Rollup::build(&slices);
    drop(slices);
    let bytes = rollup.encode();
    if bytes.len() as u64 > MAX_SLICE_BYTES / 2 {
        return Err(format!("the roll-up would take {} bytes", bytes.len()));
    }
    let key = (rollup.slice.start_ns, rollup.slice.end_ns);
    store
        .write_rollup(&bytes, key, members)
        .map_err(|e| format!("writing the roll-up: {e}"))?;
    store
        .rolled()
        .members
        .push_back((Instant::now(), members.to_vec()));
    info!(
        start_ns = key.0,
        slices = members.len(),
        bytes = bytes.len(),
        ms = started.elapsed().as_millis() as u64,
        "rolled up an hour"
    );
    Ok(())
}

/// At start, before the index is used: a plain slice listed as a member of a roll-up (a crash
/// came between the roll-up's write and its members' deletion) is deleted and taken out of
/// `slices`. Only roll-ups whose range holds a plain slice are decoded; an unreadable roll-up
/// keeps its members (a query then skips it and reads them).
pub fn remove_members_at_start(
    dir: &Path,
    slices: &mut BTreeMap<(u64, u64), u64>,
    rollups: &BTreeSet<(u64, u64)>,
) {
    for &(start, end) in rollups {
        let inside: Vec<(u64, u64)> = slices
            .range((start, 0)..=(end, 0))
            .map(|(&k, _)| k)
            .filter(|k| k.1 <= end && !rollups.contains(k))
            .collect();
        if inside.is_empty() {
            continue;
        }
        let rollup = match read_bounded(&dir.join(file_name(start, end)))
            .map_err(|e| SliceError::Gzip(e.to_string()))
            .and_then(|b| Rollup::decode(&b))
        {
            Ok(r) => r,
            Err(err) => {
                warn!(start_ns = start, %err, "an unreadable roll-up: its slices are kept");
                continue;
            }
        };
        let mut removed = 0;
        for key in inside {
            if is_member(&rollup, key) {
                let _ = std::fs::remove_file(dir.join(format!("{}-{}.pb.gz", key.0, key.1)));
                slices.remove(&key);
                removed += 1;
            }
        }
        if removed > 0 {
            info!(
                start_ns = start,
                removed, "deleted slices already rolled up"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::{add_slice, folded, Bounds, Filter, Folded, Visibility};
    use crate::slice::tests::example;
    use std::time::Duration;

    const S: u64 = 1_000_000_000;
    /// An hour's start.
    const H: u64 = 1_700_002_800 * S;

    /// Slice `i` of a history from `H - 5 min`: counts and stacks vary with `i`, so that a
    /// query that selected the wrong slices gives another answer.
    fn slice(i: u64) -> Slice {
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
        s
    }

    fn query(store: &Store, since: u64, until: u64) -> Folded {
        let bounds = Bounds {
            max_bytes: 1 << 30,
            deadline: Instant::now() + Duration::from_secs(60),
            timeout: Duration::from_secs(60),
        };
        folded(
            store,
            since,
            until,
            &Filter::default(),
            Visibility::All,
            &bounds,
        )
        .unwrap()
    }

    /// The answer the slices `0..upto` give as files of their own (every slice that overlaps
    /// the range counts whole).
    fn expected(since: u64, until: u64, upto: u64) -> (String, u64) {
        let mut lines = HashMap::new();
        let mut samples = 0;
        for i in 0..upto {
            let s = slice(i);
            if s.start_ns < until && s.end_ns > since {
                samples += add_slice(&mut lines, &s, &Filter::default(), Visibility::All);
            }
        }
        let mut sorted: Vec<_> = lines.into_iter().collect();
        sorted.sort_unstable();
        // add_slice sums CPU time: in samples of the (single) period of these slices.
        let period = slice(0).period_ns;
        let text = sorted
            .iter()
            .map(|(l, ns)| format!("{l} {}\n", ns / period))
            .collect();
        (text, samples)
    }

    fn files(dir: &Path, suffix: &str) -> usize {
        std::fs::read_dir(dir.join("slices"))
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                let name = name.to_str().unwrap();
                name.ends_with(suffix) && !name.ends_with(SUFFIX)
                    || suffix == SUFFIX && name.ends_with(SUFFIX)
            })
            .count()
    }

    /// 5 minutes before H, the hour H, and 5 minutes after: 420 slices.
    fn history(store: &Store, upto: u64) {
        for i in 0..upto {
            store.write(&slice(i), H).unwrap();
        }
    }

    /// Ranges that cut the rolled-up hour: inside a slice, across its start and end, the
    /// whole of it, none of it.
    fn ranges() -> Vec<(u64, u64)> {
        vec![
            (H + 903 * S, H + 2400 * S),
            (H - 100 * S, H + 15 * S),
            (H + 3595 * S, H + 3700 * S),
            (H + 3599 * S, H + 3601 * S),
            (0, u64::MAX),
            (H + 1234 * S, H + 1235 * S),
            (H + 3605 * S, H + 3615 * S),
        ]
    }

    #[test]
    fn a_query_over_part_of_a_rolled_up_hour_gives_the_same_answer() {
        let dir = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(86_400);
        let store = Store::open(dir.path(), day, 1 << 40, H).unwrap();
        // Up to the last slice of the hour H: the 5 minutes before it are rolled up.
        history(&store, 390);
        assert_eq!(files(dir.path(), SUFFIX), 1);
        // The first slice of the next hour rolls up the hour H.
        store.write(&slice(390), H).unwrap();
        store.write(&slice(391), H).unwrap();
        assert_eq!(files(dir.path(), SUFFIX), 2);
        let sel = store.select(H + 100 * S, H + 200 * S);
        assert_eq!(sel.slices.len(), 1);
        assert!(sel.slices[0].rollup);
        // The member files are still there (a query may be reading them), not in the index.
        assert_eq!(files(dir.path(), ".pb.gz"), 392);
        assert_eq!(store.totals().0, 2 + 2);
        for (a, b) in ranges() {
            let got = query(&store, a, b);
            let (text, samples) = expected(a, b, 392);
            assert_eq!(got.text, text, "range {a}..{b}");
            assert_eq!(got.samples, samples);
            assert!(samples > 0);
        }
        // The whole hour: one file read instead of 360.
        assert_eq!(query(&store, H, H + 3600 * S).slices, 1);
    }

    #[test]
    fn after_a_crash_between_roll_up_and_deletion_nothing_counts_twice() {
        let dir = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(86_400);
        let store = Store::open(dir.path(), day, 1 << 40, H).unwrap();
        history(&store, 392);
        let before = query(&store, H - 1000 * S, H + 5000 * S);
        assert_eq!(before.samples, expected(H - 1000 * S, H + 5000 * S, 392).1);
        let total = store.totals();
        // A crash now: the members are on disk beside their roll-up.
        drop(store);
        assert_eq!(files(dir.path(), ".pb.gz"), 392);
        // Another slice that lies inside the roll-up's range but is not a member (written
        // late): kept.
        let mut late = slice(100);
        late.start_ns = H + 1001 * S;
        late.end_ns = H + 1002 * S;
        std::fs::write(
            dir.path()
                .join(format!("slices/{}-{}.pb.gz", late.start_ns, late.end_ns)),
            late.encode(),
        )
        .unwrap();
        let store = Store::open(dir.path(), day, 1 << 40, H).unwrap();
        assert_eq!(files(dir.path(), ".pb.gz"), 2 + 1);
        assert_eq!(store.totals().0, total.0 + 1);
        let after = query(&store, H - 1000 * S, H + 5000 * S);
        assert_eq!(after.samples, before.samples + late.samples());
    }

    #[test]
    fn a_corrupt_roll_up_is_skipped_reported_and_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(86_400);
        let store = Store::open(dir.path(), day, 1 << 40, H).unwrap();
        history(&store, 392);
        let rollup = store
            .select(H, H + 1)
            .slices
            .into_iter()
            .find(|m| m.rollup)
            .unwrap();
        let path = dir
            .path()
            .join("slices")
            .join(file_name(rollup.start_ns, rollup.end_ns));
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 9]).unwrap();
        let answer = query(&store, H - 1000 * S, H + 5000 * S);
        assert_eq!(answer.skipped, 1);
        assert_eq!(
            store
                .counters
                .corrupt
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        // Only the slices of the next hour and the roll-up of the 5 minutes before H remain.
        assert_eq!(
            answer.samples,
            (0..30)
                .chain(390..392)
                .map(|i| slice(i).samples())
                .sum::<u64>()
        );
        assert!(!path.exists());
        // A roll-up that is not whole is refused, whatever the cut.
        for cut in [0, 10, bytes.len() / 2] {
            assert!(Rollup::decode(&bytes[..cut]).is_err());
        }
        // A slice is not a roll-up.
        assert!(Rollup::decode(&slice(1).encode()).is_err());
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

/// Query time over a day of history built from real slices, without and with roll-ups (no
/// sampling): `PROFILERD_BENCH_SLICES=DIR cargo test --release -p profiler-daemon --bin
/// profilerd query_time -- --ignored --nocapture`, DIR a `slices/` directory (bench/daemon.sh
/// with BENCH_KEEP=1 leaves one under d99/state).
#[cfg(test)]
mod bench {
    use super::*;
    use crate::pprof;
    use crate::query::{folded, Bounds, Filter, Visibility};
    use prost::Message;
    use std::io::Read;
    use std::time::Duration;

    #[test]
    #[ignore]
    fn query_time() {
        let Ok(src) = std::env::var("PROFILERD_BENCH_SLICES") else {
            return;
        };
        let mut names: Vec<_> = std::fs::read_dir(&src)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_str().unwrap().ends_with(".pb.gz"))
            .collect();
        names.sort();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("slices")).unwrap();
        let s = 1_000_000_000u64;
        let now = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 10)
            * 10
            * s;
        let n = 8641u64;
        for k in 0..n {
            let start = now - (n - k) * 10 * s;
            std::fs::hard_link(
                &names[k as usize % names.len()],
                dir.path()
                    .join(format!("slices/{start}-{}.pb.gz", start + 10 * s)),
            )
            .unwrap();
        }
        let week = Duration::from_secs(7 * 86_400);
        let store = Store::open(dir.path(), week, u64::MAX, now).unwrap();
        let bounds = Bounds {
            max_bytes: 1 << 30,
            deadline: Instant::now() + Duration::from_secs(600),
            timeout: Duration::from_secs(600),
        };
        let time = |label: &str| {
            for (range, since) in [("1h", now - 3600 * s), ("24h", now - 86_400 * s)] {
                let t = Instant::now();
                let f = folded(
                    &store,
                    since,
                    now,
                    &Filter::default(),
                    Visibility::All,
                    &bounds,
                )
                .unwrap();
                eprintln!(
                    "{label}: {range}: {:?}, {} files, {} samples, {} lines",
                    t.elapsed(),
                    f.slices,
                    f.samples,
                    f.text.lines().count()
                );
            }
        };
        time("slices");
        let sel = store.select(now - 3600 * s, now);
        let (mut read, mut fold) = (Duration::ZERO, Duration::ZERO);
        let mut lines = HashMap::new();
        for meta in &sel.slices {
            let t = Instant::now();
            let slice = store.read(meta).unwrap().unwrap();
            read += t.elapsed();
            let t = Instant::now();
            crate::query::add_slice(&mut lines, &slice, &Filter::default(), Visibility::All);
            fold += t.elapsed();
        }
        eprintln!("1h: read {read:?}, fold {fold:?}");
        let (mut gz, mut pb, mut fp, mut raw_bytes) =
            (Duration::ZERO, Duration::ZERO, Duration::ZERO, 0);
        for meta in &sel.slices {
            let bytes = std::fs::read(
                dir.path()
                    .join(format!("slices/{}-{}.pb.gz", meta.start_ns, meta.end_ns)),
            )
            .unwrap();
            let t = Instant::now();
            let mut raw = Vec::new();
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_end(&mut raw)
                .unwrap();
            gz += t.elapsed();
            raw_bytes += raw.len();
            let t = Instant::now();
            let p = pprof::Profile::decode(raw.as_slice()).unwrap();
            pb += t.elapsed();
            let t = Instant::now();
            let _ = Slice::from_pprof(&p).unwrap();
            fp += t.elapsed();
        }
        eprintln!("1h: gunzip {gz:?} ({raw_bytes} bytes), prost {pb:?}, from_pprof {fp:?}");
        let t = Instant::now();
        // Rolls up every past hour (a slice in the current hour is the newest).
        for _ in 0..4 {
            roll_past_hours(&store, now);
        }
        eprintln!("roll-up of 24 hours: {:?}", t.elapsed());
        time("roll-ups");
        let (mut read, mut fold, mut stacks, mut n) = (Duration::ZERO, Duration::ZERO, 0, 0);
        let mut lines = HashMap::new();
        for meta in store
            .select(now - 86_400 * s, now)
            .slices
            .iter()
            .filter(|m| m.rollup)
        {
            let t = Instant::now();
            let slice = store.read(meta).unwrap().unwrap();
            read += t.elapsed();
            stacks += slice.stacks.len();
            n += 1;
            let t = Instant::now();
            crate::query::add_slice(&mut lines, &slice, &Filter::default(), Visibility::All);
            fold += t.elapsed();
        }
        eprintln!("{n} roll-ups: read {read:?}, fold {fold:?}, {stacks} stacks");
        time("roll-ups, again");
    }
}
