//! Hourly roll-ups, above the store: after each slice written, member files whose grace has
//! passed are deleted, then each past hour of two or more plain slices is rolled up (the
//! format: `store/rollup.rs`). Runs on the writer's thread (the naming thread), which owns
//! the work in progress ([`Pending`]).
//!
//! Durability: the roll-up is written atomically (temporary file, fsync, rename, fsync of the
//! directory) and indexed in place of its members in one step; the member files are deleted
//! [`MEMBER_GRACE`] later (queries that selected them before may still read them). A crash in
//! between leaves both: at start, a slice listed as a member of a roll-up is deleted
//! (`Store::open`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

use tracing::{info, warn};

use crate::slice::MAX_SLICE_BYTES;
use crate::store::rollup::Rollup;
use crate::store::Store;

/// The span rolled up into one file.
pub const HOUR_NS: u64 = 3_600_000_000_000;

/// Member files stay on disk this long after their roll-up replaced them in the index (longer
/// than a query may run: `api.request_timeout`, at most 100 s).
pub const MEMBER_GRACE: std::time::Duration = std::time::Duration::from_secs(120);

// A query runs at most `api.request_timeout`, which the configuration keeps below the grace.
const _: () = assert!(MEMBER_GRACE.as_secs() > crate::config::MAX_REQUEST_TIMEOUT.as_secs());

/// The hour (its start, UNIX ns) a slice starting at `start_ns` belongs to.
pub fn hour_of(start_ns: u64) -> u64 {
    start_ns - start_ns % HOUR_NS
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
pub fn roll_past_hours(store: &Store, pending: &mut Pending, newest_start_ns: u64) {
    let mut due = Vec::new();
    while let Some((at, _)) = pending.members.front() {
        if at.elapsed() < MEMBER_GRACE {
            break;
        }
        if let Some((_, members)) = pending.members.pop_front() {
            due.extend(members);
        }
    }
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
            || pending.skipped.contains(&hour)
            || store.has_rollup_in(hour, hour + HOUR_NS)
        {
            continue;
        }
        rolled += 1;
        if let Err(why) = roll_hour(store, pending, &members) {
            warn!(hour_start_ns = hour, %why, "hour left as slices, not rolled up");
            pending.skipped.insert(hour);
            while pending.skipped.len() > SKIPPED_KEPT {
                pending.skipped.pop_first();
            }
        }
    }
}

/// Roll up `members` (one hour's plain slices, oldest first).
fn roll_hour(store: &Store, pending: &mut Pending, members: &[(u64, u64)]) -> Result<(), String> {
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
    pending
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Visibility;
    use crate::filter::Filter;
    use crate::query::{add_slice, folded, Bounds, Folded};
    use crate::slice::Slice;
    use crate::store::rollup::tests::{slice, H};
    use crate::store::{rollup_file_name, ROLLUP_SUFFIX as SUFFIX};
    use std::collections::HashMap;
    use std::path::Path;
    use std::time::Duration;

    const S: u64 = 1_000_000_000;

    /// Write `s` as the naming thread does: the slice, then the roll-ups it makes due.
    fn write(store: &Store, pending: &mut Pending, s: &Slice) {
        store.write(s, H).unwrap();
        roll_past_hours(store, pending, s.start_ns);
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
        let mut pending = Pending::default();
        history(&store, &mut pending, 390);
        assert_eq!(files(dir.path(), SUFFIX), 1);
        // The first slice of the next hour rolls up the hour H.
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
        history(&store, &mut Pending::default(), 392);
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
        history(&store, &mut Pending::default(), 392);
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
        decode_times(dir.path(), &sel.slices);
        let t = Instant::now();
        // Rolls up every past hour (a slice in the current hour is the newest).
        let mut pending = Pending::default();
        for _ in 0..4 {
            roll_past_hours(&store, &mut pending, now);
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
