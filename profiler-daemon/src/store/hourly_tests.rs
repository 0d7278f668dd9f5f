//! Tests of the hourly roll-ups: queries across a rolled-up hour, crashes between a roll-up
//! and its members' deletion, corrupt roll-ups, hours built incrementally and from files.

use super::*;
use crate::access::Visibility;
use crate::filter::Filter;
use crate::query::{add_slice, folded, folded_as, folded_from_files, Bounds, Folded};
use crate::slice::Slice;
use crate::store::rollup::tests::{slice, H};
use crate::store::rollup::Rollup;
use crate::store::{rollup_file_name, ROLLUP_SUFFIX as SUFFIX};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const S: u64 = 1_000_000_000;

/// The naming thread's and the housekeeper's roll-up state, run in the test's thread.
pub(crate) struct Pending {
    pub(crate) hourly: Arc<Hourly>,
    pub(crate) incremental: Incremental,
}

impl Pending {
    pub(crate) fn new(store: &Arc<Store>) -> Pending {
        let hourly = Hourly::new(Arc::clone(store));
        let incremental = Incremental::new(Arc::clone(&hourly));
        Pending {
            hourly,
            incremental,
        }
    }

    /// The housekeeper's work, until none is left.
    pub(crate) fn settle(&self) {
        while self.hourly.step() {}
    }
}

/// Write `s` as the naming thread does (the slice, then folded into its hour), then let the
/// housekeeper do what that made due.
fn write(store: &Store, pending: &mut Pending, s: &Slice) {
    store.write(s, H).unwrap();
    pending.incremental.after_write(s);
    pending.settle();
}

fn query(store: &Store, since: u64, until: u64) -> Folded {
    let bounds = Bounds::new(1 << 30, std::time::Duration::from_secs(60));
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
fn history(store: &Store, pending: &mut Pending, upto: u64) {
    for i in 0..upto {
        write(store, pending, &slice(i));
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
    let mut pending = Pending::new(&store);
    history(&store, &mut pending, 389);
    assert_eq!(files(dir.path(), SUFFIX), 1);
    // The slice that reaches the end of the hour H rolls it up.
    write(&store, &mut pending, &slice(389));
    assert_eq!(files(dir.path(), SUFFIX), 2);
    write(&store, &mut pending, &slice(390));
    write(&store, &mut pending, &slice(391));
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
    history(&store, &mut Pending::new(&store), 392);
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
    history(&store, &mut Pending::new(&store), 392);
    let rollup = store
        .select(H, H + 1)
        .slices
        .into_iter()
        .find(|m| m.rollup)
        .unwrap();
    let path = dir
        .path()
        .join("slices")
        .join(rollup_file_name(rollup.start_ns, rollup.end_ns));
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

/// The roll-up file of the hour starting at `hour`, decoded.
fn rollup_of(store: &Store, hour: u64) -> Rollup {
    let meta = store
        .select(hour, hour + 1)
        .slices
        .into_iter()
        .find(|m| m.rollup)
        .expect("a roll-up");
    let path = store.path_of(meta.start_ns, meta.end_ns, true);
    Rollup::decode(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn an_hour_built_as_it_was_written_and_one_built_from_its_files_are_the_same_roll_up() {
    let slices: Vec<Slice> = (30..390).map(slice).collect();
    let whole = Rollup::build(&slices);
    let day = Duration::from_secs(86_400);
    // Incrementally: every slice of H written by this daemon, from the first.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), day, 1 << 40, H).unwrap();
    let mut pending = Pending::new(&store);
    history(&store, &mut pending, 391);
    assert_eq!(rollup_of(&store, H), whole);
    // From the files: the daemon restarted 20 minutes into H (its slices of H before the
    // restart are on disk; it builds nothing of H, the housekeeper rolls H up once past).
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), day, 1 << 40, H).unwrap();
    for i in 30..150 {
        store.write(&slice(i), H).unwrap();
    }
    let mut pending = Pending::new(&store);
    for i in 150..390 {
        write(&store, &mut pending, &slice(i));
    }
    assert!(!store.select(H, H + 1).slices[0].rollup, "not past yet");
    write(&store, &mut pending, &slice(390));
    assert_eq!(rollup_of(&store, H), whole);
    // The next hour, begun by this daemon, is built as it goes.
    assert_eq!(
        pending.incremental.current.as_ref().map(|c| c.0),
        Some(H + 3600 * S)
    );
}

#[test]
fn an_hour_is_rolled_up_once_the_slice_reaching_its_end_is_written() {
    let day = Duration::from_secs(86_400);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), day, 1 << 40, H).unwrap();
    let mut pending = Pending::new(&store);
    // Slices 30 to 389 are the hour H; 389 ends at its end.
    history(&store, &mut pending, 389);
    assert!(
        !store.select(H, H + 1).slices[0].rollup,
        "the hour's last slice is not written yet"
    );
    write(&store, &mut pending, &slice(389));
    let whole = Rollup::build(&(30..390).map(slice).collect::<Vec<_>>());
    assert_eq!(
        rollup_of(&store, H),
        whole,
        "no slice of the next hour needed"
    );
    assert_eq!(
        store.select(H, H + 3600 * S).slices.len(),
        1,
        "the roll-up in its slices' place"
    );
    assert!(pending.incremental.current.is_none());
    // The next hour's first slice starts its roll-up as before.
    write(&store, &mut pending, &slice(390));
    assert_eq!(
        pending.incremental.current.as_ref().map(|c| c.0),
        Some(H + 3600 * S)
    );
}

/// Slice `i` of a history whose frequency the budget changed: slices 100 to 159 at a tenth
/// of it, slice 200 with a change within it (half its stacks' samples at the lower
/// frequency: their CPU time is no longer their count times its period).
fn slice_at_changing_frequency(i: u64) -> Slice {
    let mut s = slice(i);
    if (100..160).contains(&i) {
        s.period_ns *= 10;
        for st in &mut s.stacks {
            st.count = st.count.div_ceil(10);
            st.cpu_ns = st.count * s.period_ns;
        }
    }
    if i == 200 {
        for st in s.stacks.iter_mut().step_by(2) {
            st.cpu_ns += 9 * (st.count / 2) * s.period_ns;
        }
    }
    crate::slice::tests::spread_seconds(&mut s, i);
    s
}

#[test]
fn an_hour_whose_frequency_changed_rolls_up_and_answers_as_its_slices() {
    let day = Duration::from_secs(86_400);
    let slices: Vec<Slice> = (0..392).map(slice_at_changing_frequency).collect();
    // The slices as files of their own: the answers to match.
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = Store::open(plain_dir.path(), day, 1 << 40, H).unwrap();
    for s in &slices {
        plain.write(s, H).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), day, 1 << 40, H).unwrap();
    let mut pending = Pending::new(&store);
    for s in &slices {
        write(&store, &mut pending, s);
    }
    // The hour H is one roll-up, the one merging its slices whole gives.
    let rolled = rollup_of(&store, H);
    assert_eq!(rolled, Rollup::build(&slices[30..390]));
    assert!(rolled.member_cpu.is_some());
    assert_eq!(rolled.slice.period_ns, slice(0).period_ns);
    let sel = store.select(H, H + 3600 * S);
    assert_eq!(sel.slices.len(), 1);
    assert!(sel.slices[0].rollup);
    let mut cut = ranges();
    // Ranges over the slow slices alone, and across the change.
    cut.extend([
        (H + 705 * S, H + 1195 * S),
        (H + 1195 * S, H + 1215 * S),
        (H + 1700 * S, H + 1720 * S),
    ]);
    for (a, b) in cut {
        let (got, want) = (query(&store, a, b), query(&plain, a, b));
        assert_eq!(got.text, want.text, "range {a}..{b}");
        assert_eq!(got.frequency, want.frequency, "range {a}..{b}");
        assert!(want.samples > 0, "range {a}..{b}");
    }
}

/// Query time over a day of history built from real slices, without and with roll-ups (no
/// sampling): `PROFILERD_BENCH_SLICES=DIR cargo test --release -p profiler-daemon --bin
/// profilerd query_time -- --ignored --nocapture`, DIR a `slices/` directory (bench/daemon.sh
/// with BENCH_KEEP=1 leaves one under d99/state).
#[cfg(test)]
mod bench {
    use super::*;
    use crate::access::Visibility;
    use crate::filter::Filter;
    use crate::query::{folded, Bounds};
    use crate::slice::Slice;
    use crate::slice_proto as pprof;
    use crate::store::hourly::Instant;
    use prost::Message;
    use std::collections::HashMap;
    use std::io::Read;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    #[ignore]
    fn query_time() {
        let Ok(src) = std::env::var("PROFILERD_BENCH_SLICES") else {
            return;
        };
        let s = 1_000_000_000u64;
        let now = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 10)
            * 10
            * s;
        let (dir, store) = day_of_history(&src, now);
        let bounds = Bounds::new(1 << 30, std::time::Duration::from_secs(600));
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
        decode_times(dir.path(), &sel.slices);
        let t = Instant::now();
        // Rolls up every past hour (a slice in the current hour is the newest).
        Pending::new(&store).settle();
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

    /// A day of history (8641 slices, now back) linked from the slice files in `src`.
    fn day_of_history(src: &str, now: u64) -> (tempfile::TempDir, Arc<Store>) {
        let mut names: Vec<_> = std::fs::read_dir(src)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_str().unwrap().ends_with(".pb.gz"))
            .collect();
        names.sort();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("slices")).unwrap();
        let s = 1_000_000_000u64;
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
        (dir, store)
    }

    /// Time the steps of reading `slices` back: gunzip, protobuf, slice.
    fn decode_times(dir: &Path, slices: &[crate::store::SliceMeta]) {
        let (mut gz, mut pb, mut fp, mut raw_bytes) =
            (Duration::ZERO, Duration::ZERO, Duration::ZERO, 0);
        for meta in slices {
            let bytes =
                std::fs::read(dir.join(format!("slices/{}-{}.pb.gz", meta.start_ns, meta.end_ns)))
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
    }
}

/// The query cache (`query_cache.rs`) answers what the files answer, stack for stack: over
/// slices and a roll-up cut by the range, members at two frequencies, for root and for users
/// (their own stacks, no kernel frame), filtered by uid or not, exact or bounded; cold, then
/// warm, then after the roll-up replaced its members.
#[test]
fn the_query_cache_answers_what_the_files_answer() {
    use crate::store::rollup_builder::tests::slow;
    let dir = tempfile::tempdir().unwrap();
    let day = Duration::from_secs(86_400);
    let store = Store::open(dir.path(), day, 1 << 40, H).unwrap();
    let mut pending = Pending::new(&store);
    let at = |i: u64| if i % 11 == 3 { slow(i) } else { slice(i) };
    let bounds = Bounds::new(1 << 30, Duration::from_secs(60));
    let check = |store: &Store| {
        for (a, b) in ranges() {
            for visibility in [
                Visibility::All,
                Visibility::OwnOnly(1000),
                Visibility::OwnOnly(0),
            ] {
                for uid in [None, Some(1000), Some(0)] {
                    let mut exact_samples = None;
                    for minwidth in [None, Some(0.2)] {
                        let filter = Filter {
                            uid,
                            ..Filter::default()
                        };
                        let q =
                            |f: &dyn Fn() -> Result<Folded, crate::query::QueryError>| f().unwrap();
                        let files = q(&|| {
                            folded_from_files(store, (a, b), &filter, visibility, &bounds, minwidth)
                        });
                        let cached =
                            q(
                                &|| {
                                    folded_as(store, (a, b), &filter, visibility, &bounds, minwidth)
                                },
                            );
                        let what = format!("{a}..{b} {visibility:?} uid {uid:?} {minwidth:?}");
                        assert_eq!(cached.text, files.text, "{what}");
                        assert_eq!(
                            (
                                cached.samples,
                                cached.slices,
                                cached.frequency,
                                cached.min_width
                            ),
                            (
                                files.samples,
                                files.slices,
                                files.frequency,
                                files.min_width
                            ),
                            "{what}"
                        );
                        // Bounded or not, the same samples.
                        assert_eq!(*exact_samples.get_or_insert(files.samples), files.samples);
                        if visibility != Visibility::All {
                            assert!(!cached.text.contains("do_sys"), "{what}: {}", cached.text);
                        }
                        if visibility == Visibility::OwnOnly(1000) || uid == Some(1000) {
                            // Only uid 1000's process (split), whatever the range.
                            assert!(
                                cached.text.lines().all(|l| l.starts_with("split;")),
                                "{what}: {}",
                                cached.text
                            );
                        }
                    }
                }
            }
        }
    };
    for i in 0..390 {
        write(&store, &mut pending, &at(i));
    }
    check(&store);
    check(&store);
    let (bytes, files) = store.cache_size();
    assert!(files > 300 && bytes > 0, "{files} files, {bytes} bytes");
    // The hour H rolled up: its members are forgotten, the roll-up read.
    write(&store, &mut pending, &at(390));
    write(&store, &mut pending, &at(391));
    check(&store);
    assert!(
        store.cache_size().1 <= store.totals().0,
        "{:?} {:?}",
        store.cache_size(),
        store.totals()
    );
}

/// A query cache past its bound keeps no file (each query folds its files for itself) and
/// is dropped, tables and all, at the next query; answers are unchanged.
#[test]
fn a_query_cache_past_its_bound_keeps_nothing_and_answers_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let day = Duration::from_secs(86_400);
    let store = Store::open(dir.path(), day, 1 << 40, H).unwrap();
    history(&store, &mut Pending::new(&store), 60);
    let whole = (0, u64::MAX);
    let big = Bounds::new(1 << 30, Duration::from_secs(60));
    let exact = folded(
        &store,
        0,
        u64::MAX,
        &Filter::default(),
        Visibility::All,
        &big,
    )
    .unwrap();
    let (bytes, files) = store.cache_size();
    // The 30 slices before H rolled up, 30 after.
    assert_eq!(files, 31);
    let small = Bounds::new(bytes as u64 / 2, Duration::from_secs(60));
    let f = folded_as(
        &store,
        whole,
        &Filter::default(),
        Visibility::All,
        &small,
        None,
    )
    .unwrap();
    assert_eq!(f.text, exact.text);
    let (after, files) = store.cache_size();
    assert!(
        files < 31,
        "dropped at the query's start, refilled up to its bound"
    );
    assert!(after < bytes, "{after} >= {bytes}");
    let again = folded_as(
        &store,
        whole,
        &Filter::default(),
        Visibility::All,
        &small,
        None,
    );
    assert_eq!(again.unwrap().text, exact.text);
}

/// The query cache is dropped when no query used it for `query_cache::IDLE`.
#[test]
fn an_idle_query_cache_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let day = Duration::from_secs(86_400);
    let store = Store::open(dir.path(), day, 1 << 40, H).unwrap();
    history(&store, &mut Pending::new(&store), 40);
    let bounds = Bounds::new(1 << 30, Duration::from_secs(60));
    folded(
        &store,
        0,
        u64::MAX,
        &Filter::default(),
        Visibility::All,
        &bounds,
    )
    .unwrap();
    let (bytes, files) = store.cache_size();
    assert!(files > 0 && bytes > 0);
    let now = std::time::Instant::now();
    store.cache_expire_at(now);
    assert_eq!(store.cache_size().1, files, "used a moment ago: kept");
    store.cache_expire_at(now + crate::store::query_cache::IDLE + Duration::from_secs(1));
    assert_eq!(store.cache_size().1, 0);
    assert!(store.cache_size().0 < bytes);
}

#[test]
fn stopping_cuts_the_housekeepers_pause_short() {
    // The catch-up's pause after each file (four times its CPU) ends at stop: a housekeeper at
    // the lowest priority must not hold the daemon's exit for its pauses.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Duration::from_secs(86_400), 1 << 40, H).unwrap();
    let hourly = Hourly::new(Arc::clone(&store));
    let pausing = Arc::clone(&hourly);
    let started = std::time::Instant::now();
    let pause = std::thread::spawn(move || pausing.pause(Duration::from_secs(120)));
    hourly.stop();
    pause.join().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the pause went on after stop: {:?}",
        started.elapsed()
    );
    // Without a stop, it lasts its span.
    let hourly = Hourly::new(store);
    let started = std::time::Instant::now();
    hourly.pause(Duration::from_millis(50));
    assert!(started.elapsed() >= Duration::from_millis(50));
}
