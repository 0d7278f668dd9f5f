//! Local history: one file per slice under `<state_dir>/slices/`, named
//! `<start_ns>-<end_ns>.pb.gz` (UNIX ns), and hourly roll-ups beside them
//! (`<start_ns>-<end_ns>.hour.pb.gz`), written atomically (a temporary name, fsync, rename,
//! fsync of the directory), and an in-memory index of them by time, rebuilt from the directory
//! at start without reading the files. Retention by age and bytes runs after each write and at
//! start; it and the per-uid share of slices and roll-ups are in `retention`. A file that cannot be read back is skipped, reported, counted, and renamed aside
//! (`.corrupt`, the newest 16 kept).
//!
//! Beside the files, the open slices (`open`): what the pipeline has not written yet, named on
//! demand; [`Store::select_for`] lists both.
//!
//! Beneath the store: the slice format (`slice.rs`) and the roll-up format (`rollup`). Above
//! it: when hours are rolled up (`hourly`).

pub mod hourly;
pub mod open;
pub mod query_cache;
mod retention;
pub mod rollup;
pub mod rollup_builder;
pub mod rollup_share;
pub mod rollup_writer;
pub mod share;
pub mod uid_drops;

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{info, warn};

use crate::slice::{Slice, SliceError, MAX_SLICE_BYTES};
use crate::store::open::{Asker, OpenState};
use crate::store::rollup::{is_member, Rollup};
use crate::store::uid_drops::UidDropCounters;

/// File name suffix of a plain slice.
const SLICE_SUFFIX: &str = ".pb.gz";

/// File name suffix of a roll-up.
pub const ROLLUP_SUFFIX: &str = ".hour.pb.gz";

/// Corrupt files kept aside for inspection; older ones are deleted.
const CORRUPT_KEPT: usize = 16;

/// One stored slice, or an open one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceMeta {
    /// Start, UNIX ns.
    pub start_ns: u64,
    /// End (exclusive), UNIX ns.
    pub end_ns: u64,
    /// File size (0 for an open slice).
    pub bytes: u64,
    /// An hourly roll-up of slices (`rollup`), not one slice.
    pub rollup: bool,
    /// An open slice (not written yet: `open`), as named when the last snapshot was taken;
    /// [`Store::read_in`] returns it as a plain slice would be.
    pub open: Option<Arc<Slice>>,
}

/// The slices on disk, by start time, and the open ones; shared between the writer and the
/// API.
#[derive(Debug, Default)]
pub(crate) struct Index {
    slices: BTreeMap<(u64, u64), u64>,
    bytes: u64,
    /// Which entries of `slices` are roll-ups.
    rollups: BTreeSet<(u64, u64)>,
    /// The open slices, and the requests for them.
    open: OpenState,
}

impl Index {
    /// End of the newest slice written (UNIX ns), 0 when none.
    fn newest_end(&self) -> u64 {
        // Slices do not overlap: the last to start ends last.
        self.slices.last_key_value().map_or(0, |(&(_, end), _)| end)
    }
}

/// Counters of the store.
#[derive(Debug, Default)]
pub struct StoreCounters {
    /// Slices written since start.
    pub written: AtomicU64,
    /// Writes that failed (a full disk: the slice is kept in memory and written later).
    pub write_errors: AtomicU64,
    /// Slice files found unreadable (corrupt or truncated) since start.
    pub corrupt: AtomicU64,
    /// Slices deleted by retention since start.
    pub expired: AtomicU64,
    /// Roll-ups written and indexed (in place of their members) since start.
    pub rollups_written: AtomicU64,
}

/// The slice store.
pub struct Store {
    dir: PathBuf,
    index: Mutex<Index>,
    /// Retention: ns of age, bytes (changed on reload).
    max_age_ns: AtomicU64,
    max_bytes: AtomicU64,
    /// `storage.max_share_per_uid`, for roll-ups (changed on reload).
    share_per_uid: AtomicU8,
    /// Counters, for status and metrics.
    pub counters: StoreCounters,
    /// What the per-uid share dropped (`share.rs`), per uid.
    pub uid_drops: UidDropCounters,
    /// Notified when a snapshot of the open slices is published or refused.
    fresh: Condvar,
    /// Asks the pipeline for a snapshot of the open slices (None: no pipeline).
    asker: Mutex<Option<Asker>>,
    /// What CPU queries read, folded per file (`query_cache`).
    query_cache: query_cache::QueryCache,
}

/// A query's selection of slices.
#[derive(Debug, Default)]
pub struct Selection {
    /// The slices overlapping the range, oldest first: files (slices and roll-ups), then the
    /// open slices.
    pub slices: Vec<SliceMeta>,
    /// The selection holds every sample taken before this time (UNIX ns): the end of the
    /// newest slice written, or when the open slices were named.
    pub complete_until_ns: u64,
}

impl Store {
    /// Open (creating) the store under `state_dir`, index what is there, delete temporary
    /// files left by a crash, and apply retention as of `now_ns`.
    pub fn open(
        state_dir: &Path,
        max_age: Duration,
        max_bytes: u64,
        now_ns: u64,
    ) -> std::io::Result<Arc<Store>> {
        let dir = state_dir.join("slices");
        fs::create_dir_all(&dir)?;
        let mut index = Index::default();
        let mut corrupt = Vec::new();
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with(".tmp-") {
                let _ = fs::remove_file(entry.path());
                continue;
            }
            if name.ends_with(".corrupt") {
                corrupt.push((
                    entry.metadata().and_then(|m| m.modified()).ok(),
                    entry.path(),
                ));
                continue;
            }
            let rollup = parse_name(name, ROLLUP_SUFFIX);
            let plain = || parse_name(name, SLICE_SUFFIX);
            let (Some(key), Ok(meta)) = (rollup.or_else(plain), entry.metadata()) else {
                continue;
            };
            if meta.is_file() {
                if rollup.is_some() {
                    index.rollups.insert(key);
                }
                index.bytes += meta.len();
                index.slices.insert(key, meta.len());
            }
        }
        remove_members_at_start(&dir, &mut index.slices, &index.rollups);
        index.bytes = index.slices.values().sum();
        corrupt.sort();
        let excess = corrupt.len().saturating_sub(CORRUPT_KEPT);
        for (_, path) in corrupt.drain(..excess) {
            let _ = fs::remove_file(path);
        }
        info!(
            slices = index.slices.len(),
            bytes = index.bytes,
            dir = %dir.display(),
            "history loaded"
        );
        let store = Arc::new(Store {
            dir,
            index: Mutex::new(index),
            max_age_ns: AtomicU64::new(max_age.as_nanos().min(u64::MAX as u128) as u64),
            max_bytes: AtomicU64::new(max_bytes),
            share_per_uid: AtomicU8::new(crate::config::Storage::default().max_share_per_uid.0),
            counters: StoreCounters::default(),
            uid_drops: UidDropCounters::default(),
            fresh: Condvar::new(),
            asker: Mutex::new(None),
            query_cache: query_cache::QueryCache::default(),
        });
        store.apply_retention(now_ns);
        Ok(store)
    }

    /// Slices and bytes kept.
    pub fn totals(&self) -> (usize, u64) {
        let index = self.index();
        (index.slices.len(), index.bytes)
    }

    /// End of the newest slice written (UNIX ns), 0 when none.
    pub fn newest_end(&self) -> u64 {
        self.index().newest_end()
    }

    /// The index, recovered if a thread panicked while holding it (every change to it is
    /// made in one step, under the lock).
    pub(crate) fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn path_of(&self, start_ns: u64, end_ns: u64, rollup: bool) -> PathBuf {
        if rollup {
            self.dir.join(rollup_file_name(start_ns, end_ns))
        } else {
            self.dir.join(slice_file_name(start_ns, end_ns))
        }
    }

    /// Write `slice` atomically and index it; then apply retention as of `now_ns`. (The writer
    /// then folds it into its hour's roll-up: `hourly::Incremental`.)
    #[cfg(test)]
    pub fn write(&self, slice: &Slice, now_ns: u64) -> std::io::Result<SliceMeta> {
        let meta = self.write_slice(slice)?;
        self.apply_retention(now_ns);
        Ok(meta)
    }

    /// Write `slice` atomically and index it (no retention). A slice that would hold more than
    /// [`MAX_SLICE_BYTES`] decompressed is refused (`InvalidData`), nothing written.
    pub fn write_slice(&self, slice: &Slice) -> std::io::Result<SliceMeta> {
        // A slice no reader could take back is refused here, not written and set aside.
        let bytes = slice
            .encode_for_file()
            .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidData, err))?;
        let path = self.path_of(slice.start_ns, slice.end_ns, false);
        if let Err(err) = self.write_file(&bytes, &path, slice.start_ns) {
            self.counters.write_errors.fetch_add(1, Ordering::Relaxed);
            return Err(err);
        }
        {
            let mut index = self.index();
            let key = (slice.start_ns, slice.end_ns);
            if let Some(old) = index.slices.insert(key, bytes.len() as u64) {
                index.bytes -= old;
            }
            index.bytes += bytes.len() as u64;
            // In the same step: a query sees the window open or written, never both.
            index.open.written(key);
        }
        self.counters.written.fetch_add(1, Ordering::Relaxed);
        Ok(SliceMeta {
            start_ns: slice.start_ns,
            end_ns: slice.end_ns,
            bytes: bytes.len() as u64,
            ..SliceMeta::default()
        })
    }

    /// Write `bytes` to `path` durably: a temporary file, fsync, rename, fsync of the
    /// directory. The temporary file is removed on failure.
    fn write_file(&self, bytes: &[u8], path: &Path, start_ns: u64) -> std::io::Result<()> {
        self.write_file_with(path, start_ns, |file| file.write_all(bytes))
            .map(|_| ())
    }

    /// Write to `path` durably what `write` writes into the file: a temporary file, fsync,
    /// rename, fsync of the directory. The temporary file is removed on failure. Returns the
    /// file's size.
    fn write_file_with(
        &self,
        path: &Path,
        start_ns: u64,
        write: impl FnOnce(&mut File) -> std::io::Result<()>,
    ) -> std::io::Result<u64> {
        let tmp = self
            .dir
            .join(format!(".tmp-{}-{}", start_ns, std::process::id()));
        let result = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o640)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            write(&mut file)?;
            file.sync_all()?;
            let bytes = file.metadata()?.len();
            fs::rename(&tmp, path)?;
            File::open(&self.dir)?.sync_all()?;
            Ok(bytes)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }

    /// Write a roll-up durably (what `write` writes into the file) and put it in the index in
    /// place of its members, in one step (a query selects either the members or the roll-up,
    /// never both). The members' files are the caller's to delete. Returns the file's size.
    pub(crate) fn write_rollup_with(
        &self,
        key: (u64, u64),
        members: &[(u64, u64)],
        write: impl FnOnce(&mut File) -> std::io::Result<u64>,
    ) -> std::io::Result<u64> {
        let path = self.path_of(key.0, key.1, true);
        let bytes = self.write_file_with(&path, key.0, |file| write(file).map(|_| ()))?;
        let mut index = self.index();
        for m in members {
            if let Some(b) = index.slices.remove(m) {
                index.bytes -= b;
            }
        }
        if let Some(old) = index.slices.insert(key, bytes) {
            index.bytes -= old;
        }
        index.rollups.insert(key);
        index.bytes += bytes;
        drop(index);
        self.counters
            .rollups_written
            .fetch_add(1, Ordering::Relaxed);
        Ok(bytes)
    }

    /// The plain slices (not roll-ups) that start before `before_ns`, oldest first.
    pub(crate) fn plain_slices_before(&self, before_ns: u64) -> Vec<(u64, u64)> {
        let index = self.index();
        index
            .slices
            .range(..(before_ns, 0))
            .map(|(&k, _)| k)
            .filter(|k| !index.rollups.contains(k))
            .collect()
    }

    /// Is there a roll-up for the hour starting at `hour_ns`?
    pub(crate) fn has_rollup_in(&self, hour_ns: u64, end_ns: u64) -> bool {
        let index = self.index();
        index
            .rollups
            .range((hour_ns, 0)..(end_ns, 0))
            .next()
            .is_some()
    }

    /// Read one plain slice file (no index change on failure).
    pub(crate) fn read_plain(&self, key: (u64, u64)) -> Result<Slice, SliceError> {
        let bytes = read_bounded(&self.path_of(key.0, key.1, false))
            .map_err(|e| SliceError::Io(e.to_string()))?;
        Slice::decode(&bytes)
    }

    /// Delete plain slice files (members of a roll-up after their grace).
    pub(crate) fn remove_plain(&self, keys: &[(u64, u64)]) {
        for &(start, end) in keys {
            match fs::remove_file(self.path_of(start, end, false)) {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => warn!(%err, "cannot delete a rolled-up slice"),
            }
        }
    }

    /// Read one slice back. `Ok(None)`: deleted meanwhile (retention). A corrupt or truncated
    /// file is logged, counted, taken out of the index and renamed aside, and is an error.
    #[cfg(test)]
    pub fn read(&self, meta: &SliceMeta) -> Result<Option<Slice>, SliceError> {
        self.read_in(meta, 0, u64::MAX)
    }

    /// [`Store::read`], keeping of a roll-up only the samples of its member slices that
    /// overlap `[since_ns, until_ns)` (a plain slice is returned whole).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn read_in(
        &self,
        meta: &SliceMeta,
        since_ns: u64,
        until_ns: u64,
    ) -> Result<Option<Slice>, SliceError> {
        self.read_in_within(meta, since_ns, until_ns, MAX_SLICE_BYTES)
    }

    /// [`Store::read_in`], refusing a file that decompresses to more than `max_decoded` bytes
    /// with [`SliceError::OverLimit`] before decoding it (what a query may hold decoded at
    /// once); such a file is not corrupt, and stays. An open slice (`meta.open`) is its
    /// snapshot.
    pub fn read_in_within(
        &self,
        meta: &SliceMeta,
        since_ns: u64,
        until_ns: u64,
        max_decoded: u64,
    ) -> Result<Option<Slice>, SliceError> {
        if let Some(open) = &meta.open {
            return Ok(Some(Slice::clone(open)));
        }
        self.read_with(meta, |bytes| {
            if meta.rollup {
                Rollup::decode_within(bytes, max_decoded).map(|r| r.restrict(since_ns, until_ns))
            } else {
                Slice::decode_within(bytes, max_decoded)
            }
        })
    }

    /// A stored file (or an open slice's snapshot) with each stack's count per member slice,
    /// for answers that place samples in time (the timeline): a roll-up as it is, a plain
    /// slice as a roll-up of itself over the span its file is indexed by. A file that decodes
    /// to more than `max_decoded` bytes is [`SliceError::OverLimit`].
    pub fn read_members(
        &self,
        meta: &SliceMeta,
        max_decoded: u64,
    ) -> Result<Option<Rollup>, SliceError> {
        let span = (meta.start_ns, meta.end_ns);
        if let Some(open) = &meta.open {
            return Ok(Some(Rollup::of_slice(Slice::clone(open), span)));
        }
        self.read_with(meta, |bytes| {
            if meta.rollup {
                return Rollup::decode_within(bytes, max_decoded);
            }
            Slice::decode_within(bytes, max_decoded).map(|slice| Rollup::of_slice(slice, span))
        })
    }

    /// Read one file and `decode` it. `Ok(None)`: deleted meanwhile (retention). A file over
    /// a decoding bound is an error and stays; a corrupt or truncated one is logged, counted,
    /// taken out of the index and renamed aside, and is an error.
    fn read_with<T>(
        &self,
        meta: &SliceMeta,
        decode: impl FnOnce(&[u8]) -> Result<T, SliceError>,
    ) -> Result<Option<T>, SliceError> {
        let path = self.path_of(meta.start_ns, meta.end_ns, meta.rollup);
        let bytes = match read_bounded(&path) {
            Ok(b) => b,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(SliceError::Io(err.to_string())),
        };
        match decode(&bytes) {
            Ok(decoded) => Ok(Some(decoded)),
            Err(err @ SliceError::OverLimit(_)) => Err(err),
            Err(err) => {
                self.counters.corrupt.fetch_add(1, Ordering::Relaxed);
                warn!(file = %path.display(), %err, "skipping a corrupt slice file (renamed to .corrupt)");
                {
                    let mut index = self.index();
                    if let Some(b) = index.slices.remove(&(meta.start_ns, meta.end_ns)) {
                        index.bytes -= b;
                    }
                    index.rollups.remove(&(meta.start_ns, meta.end_ns));
                }
                let mut aside = path.clone().into_os_string();
                aside.push(".corrupt");
                let _ = fs::rename(&path, aside);
                Err(err)
            }
        }
    }
}

/// UNIX time now, in ns.
pub(crate) fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// A file's bytes, refusing one larger than [`MAX_SLICE_BYTES`]; never follows a symlink.
pub(crate) fn read_bounded(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_SLICE_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_SLICE_BYTES {
        return Err(std::io::Error::other("larger than the largest slice"));
    }
    Ok(bytes)
}

/// The file name of a plain slice.
fn slice_file_name(start_ns: u64, end_ns: u64) -> String {
    format!("{start_ns}-{end_ns}{SLICE_SUFFIX}")
}

/// The file name of a roll-up.
pub fn rollup_file_name(start_ns: u64, end_ns: u64) -> String {
    format!("{start_ns}-{end_ns}{ROLLUP_SUFFIX}")
}

/// `(start, end)` of a file name ending in `suffix`.
fn parse_name(name: &str, suffix: &str) -> Option<(u64, u64)> {
    let stem = name.strip_suffix(suffix)?;
    let (start, end) = stem.split_once('-')?;
    let (start, end) = (start.parse().ok()?, end.parse().ok()?);
    (start < end).then_some((start, end))
}

/// At start, before the index is used: a plain slice listed as a member of a roll-up (a crash
/// came between the roll-up's write and its members' deletion) is deleted and taken out of
/// `slices`. Only roll-ups whose range holds a plain slice are decoded; an unreadable roll-up
/// keeps its members (a query then skips it and reads them).
fn remove_members_at_start(
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
        let rollup = match read_bounded(&dir.join(rollup_file_name(start, end)))
            .map_err(|e| SliceError::Io(e.to_string()))
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
                let _ = fs::remove_file(dir.join(slice_file_name(key.0, key.1)));
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
    use crate::slice::tests::example;

    const S: u64 = 1_000_000_000;
    const T0: u64 = 1_700_000_000 * S;

    /// A 10-s slice of two uids, about 100 KB of file (ordinary at 999 Hz on a few CPUs).
    fn ordinary_big_slice() -> Slice {
        let names: Vec<String> = (0..3000)
            .map(|i| format!("ns{}::function_{i}", i % 37))
            .collect();
        let stacks = (0..3000u32)
            .map(|i| crate::slice::SliceStack {
                frames: vec![i, (i * 7) % 3000, (i * 13) % 3000],
                pid: 100 + i % 2,
                tid: 100 + i % 2,
                uid: Some(i % 2 * 1000),
                count: 1,
                cpu_ns: 1_001_001,
                ..Default::default()
            })
            .collect();
        Slice {
            start_ns: T0,
            end_ns: T0 + 10 * S,
            period_ns: 1_001_001,
            names,
            stacks,
        }
    }

    #[test]
    fn the_share_budget_spans_the_hour_a_slice_lives_not_max_age() {
        let dir = tempfile::tempdir().unwrap();
        // The defaults: 3 days, 1 GiB.
        let store = Store::open(dir.path(), Duration::from_secs(259_200), 1 << 30, T0).unwrap();
        let mut slice = ordinary_big_slice();
        let bytes = share::file_bytes(&slice);
        assert!(
            bytes > 60_000,
            "the slice is {bytes} bytes: not over 10 KiB"
        );
        // A quarter of max_bytes spread over an hour of slices (728 KiB a slice): kept whole.
        let drops = store.apply_share(&mut slice, 25, T0, 3600 * S, 10 * S);
        assert!(drops.is_empty(), "an ordinary slice was cut: {drops:?}");
        assert_eq!(slice.stacks.len(), 3000);
        // Spread over all of max_age (10 KiB a slice), it would have been cut.
        let drops = store.apply_share(&mut slice, 25, T0, u64::MAX, 10 * S);
        assert!(!drops.is_empty());
        assert!(slice.stacks.len() < 3000);
    }

    #[test]
    fn written_slices_are_indexed_reloaded_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(86_400);
        let store = Store::open(dir.path(), day, 1 << 30, T0).unwrap();
        for i in 0..3 {
            store.write(&example(T0 + i * 10 * S), T0 + 40 * S).unwrap();
        }
        assert_eq!(store.totals().0, 3);
        // A crash left a temporary file: deleted at start, not indexed.
        fs::write(dir.path().join("slices/.tmp-5-1"), b"half").unwrap();
        drop(store);
        let store = Store::open(dir.path(), day, 1 << 30, T0 + 40 * S).unwrap();
        assert_eq!(store.totals().0, 3);
        assert!(!dir.path().join("slices/.tmp-5-1").exists());
        let sel = store.select(T0 + 15 * S, T0 + 25 * S);
        assert_eq!(sel.slices.len(), 2);
        let back = store.read(&sel.slices[0]).unwrap().unwrap();
        assert_eq!(back, example(T0 + 10 * S));
        assert_eq!(store.newest_end(), T0 + 30 * S);
    }

    #[test]
    fn retention_by_age_and_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(60), 1 << 30, T0).unwrap();
        for i in 0..10 {
            store.write(&example(T0 + i * 10 * S), T0).unwrap();
        }
        assert_eq!(store.totals().0, 10);
        // At T0 + 120 s, slices that ended before T0 + 60 s go.
        store.apply_retention(T0 + 120 * S);
        assert_eq!(store.totals().0, 5);
        assert_eq!(fs::read_dir(dir.path().join("slices")).unwrap().count(), 5);
        let one = store.totals().1 / 5;
        let store = Store::open(
            dir.path(),
            Duration::from_secs(86_400),
            one * 2 + one / 2,
            T0,
        )
        .unwrap();
        assert_eq!(store.totals().0, 2);
        assert_eq!(store.select(0, u64::MAX).slices[0].start_ns, T0 + 80 * S);
        // Changed while running (a reload): applied by the next retention.
        store.set_retention(Duration::from_secs(86_400), one + one / 2);
        store.apply_retention(T0);
        assert_eq!(store.totals().0, 1);
    }

    #[test]
    fn a_corrupt_slice_is_skipped_counted_and_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let day = Duration::from_secs(86_400);
        let store = Store::open(dir.path(), day, 1 << 30, T0).unwrap();
        store.write(&example(T0), T0).unwrap();
        let meta = store.write(&example(T0 + 10 * S), T0).unwrap();
        let path = dir
            .path()
            .join(format!("slices/{}-{}.pb.gz", meta.start_ns, meta.end_ns));
        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let sel = store.select(0, u64::MAX);
        assert!(store.read(&sel.slices[0]).unwrap().is_some());
        assert!(store.read(&sel.slices[1]).is_err());
        assert_eq!(store.counters.corrupt.load(Ordering::Relaxed), 1);
        assert_eq!(store.totals().0, 1);
        assert!(!path.exists());
        let mut aside = path.into_os_string();
        aside.push(".corrupt");
        assert!(Path::new(&aside).exists());
    }

    #[test]
    fn a_slice_too_large_to_read_back_is_refused_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), Duration::from_secs(86_400), u64::MAX, T0).unwrap();
        let mut huge = example(T0);
        // 257 distinct names of 1 MiB: more than a reader takes back decompressed.
        let mib = "x".repeat(1 << 20);
        let first = huge.names.len();
        huge.names.extend((0..257).map(|i| format!("{i}{mib}")));
        huge.stacks[0]
            .frames
            .extend((first..huge.names.len()).map(|i| i as u32));
        let err = store.write(&huge, T0).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
        assert!(err.to_string().contains("larger than 256 MiB"), "{err}");
        assert_eq!(store.totals(), (0, 0));
        assert_eq!(fs::read_dir(dir.path().join("slices")).unwrap().count(), 0);
        // The next slice is written as usual.
        store.write(&example(T0 + 10 * S), T0).unwrap();
        assert_eq!(store.totals().0, 1);
    }
}
