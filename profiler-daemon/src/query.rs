//! Queries over the history: folded stacks (or one merged slice, for pprof) for a time range,
//! filtered by process (and descendants), command name, user and cgroup, and by what the
//! asking user may see.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use daemon_api::history::MAX_BOUNDED_FRAMES;

use crate::access::Visibility;
use crate::bounded;
use crate::config::Api;
use crate::filter::Filter;
use crate::folding::Folding;
use crate::measure::{hide_kernel_frames, Measure, MeasureSlices};
use crate::memory_release;
pub(crate) use crate::slice::samples_of;
use crate::slice::{Slice, SliceError};
use crate::store::open::Querier;
use crate::store::query_cache::StackTotals;
use crate::store::{SliceMeta, Store};

/// Why a query was not answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The answer would be larger than allowed.
    #[error(
        "the answer is larger than {0} bytes: narrow the time range or filter by pid, comm or uid"
    )]
    TooLarge(u64),
    /// The query took longer than allowed.
    #[error("the query took longer than {0:?}: narrow the time range")]
    TooSlow(std::time::Duration),
    /// The client went away.
    #[error("the client went away")]
    Cancelled,
    /// A stored file of the range decodes to more than the answer may hold (the bound of a
    /// query's working memory).
    #[error(
        "a stored file of the range decodes to more than {0} bytes, what api.max_response_bytes lets a query hold"
    )]
    FileTooLarge(u64),
}

/// Read one slice of a selection for a query of `measure` within `bounds`, projected on
/// it (its stacks' `cpu_ns` the measure's time: [`Measure::project`]): `Ok(None)` when it is
/// gone or unreadable (counted in `skipped`), an error when it would decode to more than the
/// answer may hold.
pub fn read_for_query(
    store: &Store,
    meta: &SliceMeta,
    ((since_ns, until_ns), measure): ((u64, u64), Measure),
    bounds: &Bounds,
    skipped: &mut u64,
) -> Result<Option<Slice>, QueryError> {
    match store.read_in_within(meta, since_ns, until_ns, bounds.max_bytes) {
        Ok(slice) => Ok(slice.map(|s| measure.project(s))),
        Err(SliceError::OverLimit(n)) => Err(QueryError::FileTooLarge(n)),
        Err(_) => {
            *skipped += 1;
            Ok(None)
        }
    }
}

/// Asks for the memory a query freed to be given back to the system when dropped
/// ([`memory_release::request`]: on a thread of its own, not on the answer's path): glibc
/// keeps it in the arena of the thread that ran the query (a blocking-pool thread), where
/// nothing else reuses it (a 1-hour query of a busy host's history left 56 MB so:
/// docs/daemon.md, "RSS"). Every query of this module holds one from its start, so that it
/// is dropped after everything the query made; a new kind of query does the same.
pub struct ReleaseMemory;

impl Drop for ReleaseMemory {
    fn drop(&mut self) {
        memory_release::request();
    }
}

/// A query's answer.
#[derive(Debug, Default)]
pub struct Folded {
    /// Folded lines (`comm;outermost;…;leaf count`), sorted, each ending in a newline.
    pub text: String,
    /// Samples in it.
    pub samples: u64,
    /// Slices read.
    pub slices: u64,
    /// Slices skipped as corrupt or truncated.
    pub skipped: u64,
    /// Of the slices read, the open ones (not written yet: `store/open.rs`).
    pub open: u64,
    /// The answer holds every sample taken before this time (UNIX ns; see
    /// [`crate::store::Selection::complete_until_ns`]).
    pub complete_until_ns: u64,
    /// The frequency the counts are in: the highest of the slices read (None: none read).
    /// Slices sampled at a lower one (the budget lowered it, or a reload changed it) count
    /// each stack for the CPU time it stands for, in samples at this frequency. Off-CPU and
    /// wall-clock counts are microseconds instead.
    pub frequency: Option<u64>,
    /// What the counts measure.
    pub measure: Measure,
    /// Of a bounded answer: the width applied, in counts (frames of fewer were merged).
    pub min_width: Option<u64>,
    /// Of a bounded answer: the frames merged, in all.
    pub merged_frames: u64,
}

/// Add the stacks of `slice` that `filter` and `visibility` admit to `lines` (their CPU time,
/// ns: [`SliceStack::cpu_ns`]), with no bound; returns their samples. For tests and small
/// inputs: queries use [`Folding`], which stops at its bound.
#[cfg(test)]
pub fn add_slice(
    lines: &mut HashMap<String, u64>,
    slice: &Slice,
    filter: &Filter,
    visibility: Visibility,
) -> u64 {
    let mut folding = Folding::new(u64::MAX);
    let samples = folding
        .add_slice(slice, filter, visibility)
        .unwrap_or_default();
    for (line, totals) in folding.lines() {
        *lines.entry(line).or_default() += totals.cpu_ns;
    }
    samples
}

/// Set when the client that asked went away: the query stops at its next check.
#[derive(Clone, Debug, Default)]
pub struct Cancel(Option<Arc<AtomicBool>>);

impl Cancel {
    /// A flag, and a guard that sets it when dropped (held by the request's handler, which is
    /// dropped when its client goes away).
    pub fn new() -> (Cancel, CancelOnDrop) {
        let flag = Arc::new(AtomicBool::new(false));
        (Cancel(Some(Arc::clone(&flag))), CancelOnDrop(flag))
    }

    /// Whether it was set.
    pub fn is_set(&self) -> bool {
        self.0.as_ref().is_some_and(|f| f.load(Ordering::Relaxed))
    }
}

/// Sets its [`Cancel`] when dropped.
#[derive(Debug)]
pub struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What one query may cost.
#[derive(Clone, Debug)]
pub struct Bounds {
    /// Largest answer.
    pub max_bytes: u64,
    /// When the query must have ended.
    pub deadline: Instant,
    /// The time allowed (for the message).
    pub timeout: std::time::Duration,
    /// Set when the client went away.
    pub cancel: Cancel,
    /// Whom snapshots of the open slices are asked for (a user's are spaced).
    pub querier: Querier,
}

impl Bounds {
    /// An error if the query must stop: past its deadline, or its client went away.
    pub fn check(&self) -> Result<(), QueryError> {
        if self.cancel.is_set() {
            return Err(QueryError::Cancelled);
        }
        if Instant::now() > self.deadline {
            return Err(QueryError::TooSlow(self.timeout));
        }
        Ok(())
    }

    /// The bounds `[api]` sets, for a query starting now.
    pub fn from_api(api: &Api) -> Bounds {
        Bounds::new(api.max_response_bytes.0, api.request_timeout.0)
    }

    /// At most `max_bytes` and `timeout` from now, not cancelled.
    pub fn new(max_bytes: u64, timeout: std::time::Duration) -> Bounds {
        Bounds {
            max_bytes,
            timeout,
            deadline: Instant::now() + timeout,
            cancel: Cancel::default(),
            querier: Querier::Daemon,
        }
    }
}

/// Folded stacks of `[since_ns, until_ns)` from `store`, within `bounds`: every stack, exact.
#[cfg(test)]
pub fn folded(
    store: &Store,
    since_ns: u64,
    until_ns: u64,
    filter: &Filter,
    visibility: Visibility,
    bounds: &Bounds,
) -> Result<Folded, QueryError> {
    folded_as(
        store,
        (since_ns, until_ns),
        filter,
        visibility,
        bounds,
        None,
    )
}

/// [`folded`], or with `minwidth` (a fraction of the samples: 0.001 for 0.1%) bounded as a
/// flame graph drawn at that width ([`bounded`]: narrow frames merged, samples kept). CPU
/// queries filtered at most by uid add up the store's folded files (`store/query_cache.rs`);
/// the others, and those whose cache was dropped meanwhile, read the files.
pub fn folded_as(
    store: &Store,
    range: (u64, u64),
    filter: &Filter,
    visibility: Visibility,
    bounds: &Bounds,
    minwidth: Option<f64>,
) -> Result<Folded, QueryError> {
    let _release = ReleaseMemory;
    let selection = store.select_for(bounds.querier, range.0, range.1);
    if by_cache(filter) {
        if let Some(out) = folded_cached(
            store, &selection, range, filter, visibility, bounds, minwidth,
        )? {
            return Ok(out);
        }
        tracing::debug!("the query cache was dropped during the query: reading the files");
    }
    folded_read(
        store, &selection, range, filter, visibility, bounds, minwidth,
    )
}

/// [`folded_as`] reading the files, never the query cache (what the cache is tested against).
#[cfg(test)]
pub fn folded_from_files(
    store: &Store,
    range: (u64, u64),
    filter: &Filter,
    visibility: Visibility,
    bounds: &Bounds,
    minwidth: Option<f64>,
) -> Result<Folded, QueryError> {
    let selection = store.select_for(bounds.querier, range.0, range.1);
    folded_read(
        store, &selection, range, filter, visibility, bounds, minwidth,
    )
}

/// Whether the query cache answers `filter`: CPU time, filtered at most by uid.
fn by_cache(filter: &Filter) -> bool {
    filter.pid.is_none()
        && filter.comm.is_none()
        && filter.cgroup.is_none()
        && filter.measure == Measure::Cpu
}

/// The unit of the counts: the period of the slices read (CPU), or a microsecond.
fn unit_of(out: &mut Folded, period_ns: u64, measure: Measure) -> u64 {
    if period_ns != u64::MAX {
        out.frequency = Some((1_000_000_000 / period_ns).max(1));
    }
    out.measure = measure;
    if measure.in_microseconds() {
        1000
    } else {
        period_ns
    }
}

/// `selection` read through the store's query cache; None when the cache was dropped meanwhile.
fn folded_cached(
    store: &Store,
    selection: &crate::store::Selection,
    range: (u64, u64),
    filter: &Filter,
    visibility: Visibility,
    bounds: &Bounds,
    minwidth: Option<f64>,
) -> Result<Option<Folded>, QueryError> {
    let generation = store.cache_begin(bounds.max_bytes);
    let mut out = Folded {
        complete_until_ns: selection.complete_until_ns,
        ..Folded::default()
    };
    let mut totals = StackTotals::default();
    let mut period_ns = u64::MAX;
    for meta in &selection.slices {
        bounds.check()?;
        let fold = match store.cached_fold(meta, bounds.max_bytes) {
            Ok(Some(fold)) => fold,
            Ok(None) => continue,
            Err(SliceError::OverLimit(n)) => return Err(QueryError::FileTooLarge(n)),
            Err(_) => {
                out.skipped += 1;
                continue;
            }
        };
        if fold.generation() != generation {
            return Ok(None);
        }
        out.slices += 1;
        out.open += meta.open.is_some() as u64;
        let period = fold.add_to(range, visibility, filter.uid, &mut totals);
        if period > 0 {
            period_ns = period_ns.min(period);
        }
    }
    bounds.check()?;
    let unit_ns = unit_of(&mut out, period_ns, filter.measure);
    let max_bytes = bounds.max_bytes;
    let done = store.cache_tables(generation, |tables| {
        if minwidth.is_none() {
            // The bound of the answer's text, as `Folding` counts it.
            let bytes: u64 = totals
                .touched
                .iter()
                .map(|&id| tables.text_bytes(id) + 22)
                .sum();
            if bytes > max_bytes {
                return Err(QueryError::TooLarge(max_bytes));
            }
        }
        let stacks = totals
            .touched
            .iter()
            .map(|&id| (tables.stack(id), totals.cpu_ns[id as usize]))
            .collect();
        finish(
            &mut out,
            stacks,
            &|id| tables.name(id),
            unit_ns,
            minwidth,
            max_bytes,
        )
    });
    let (cache_bytes, cache_files) = store.cache_size();
    tracing::debug!(cache_bytes, cache_files, "query cache after a query");
    match done {
        None => Ok(None),
        Some(result) => result.map(|()| Some(out)),
    }
}

/// `selection`'s files read and folded.
fn folded_read(
    store: &Store,
    selection: &crate::store::Selection,
    (since_ns, until_ns): (u64, u64),
    filter: &Filter,
    visibility: Visibility,
    bounds: &Bounds,
    minwidth: Option<f64>,
) -> Result<Folded, QueryError> {
    let mut folding = Folding::new(bounds.max_bytes);
    let mut out = Folded {
        complete_until_ns: selection.complete_until_ns,
        ..Folded::default()
    };
    // The shortest period of the slices read: the counts are given in samples of it.
    let mut period_ns = u64::MAX;
    for meta in &selection.slices {
        bounds.check()?;
        let Some(slice) = read_for_query(
            store,
            meta,
            ((since_ns, until_ns), filter.measure),
            bounds,
            &mut out.skipped,
        )?
        else {
            continue;
        };
        out.slices += 1;
        out.open += meta.open.is_some() as u64;
        if slice.period_ns > 0 {
            period_ns = period_ns.min(slice.period_ns);
        }
        folding
            .add_slice(&slice, filter, visibility)
            .map_err(|_| QueryError::TooLarge(bounds.max_bytes))?;
    }
    bounds.check()?;
    let unit_ns = unit_of(&mut out, period_ns, filter.measure);
    let stacks = folding.keyed().map(|(key, t)| (key, t.cpu_ns)).collect();
    finish(
        &mut out,
        stacks,
        &|id| folding.name(id),
        unit_ns,
        minwidth,
        bounds.max_bytes,
    )?;
    Ok(out)
}

/// The answer's text from its stacks (name ids, command name first, each with its time in
/// ns): each in counts of `unit_ns` (a stack of none left out), every one as a line sorted
/// by text, or with `minwidth` bounded ([`bounded::bound`]); an answer over `max_bytes` is
/// refused.
fn finish<'n>(
    out: &mut Folded,
    stacks: Vec<(&[u32], u64)>,
    name: &dyn Fn(u32) -> &'n str,
    unit_ns: u64,
    minwidth: Option<f64>,
    max_bytes: u64,
) -> Result<(), QueryError> {
    let counted = stacks
        .into_iter()
        .map(|(key, ns)| (key, samples_of(ns, unit_ns)))
        .filter(|&(_, count)| count > 0);
    let lines = match minwidth {
        Some(share) => {
            let b = bounded::bound(counted.collect(), share, MAX_BOUNDED_FRAMES, &|id| {
                name(id).to_string()
            });
            out.min_width = Some(b.min);
            out.merged_frames = b.merged_frames;
            b.lines
        }
        None => {
            let mut lines: Vec<(String, u64)> = counted
                .map(|(key, count)| {
                    let mut line = String::new();
                    for (i, &id) in key.iter().enumerate() {
                        if i > 0 {
                            line.push(';');
                        }
                        line.push_str(name(id));
                    }
                    (line, count)
                })
                .collect();
            lines.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            lines
        }
    };
    let bytes: usize = lines.iter().map(|(l, _)| l.len() + 22).sum();
    out.text.reserve(bytes.min(max_bytes as usize));
    for (line, count) in lines {
        out.samples += count;
        let _ = writeln!(out.text, "{line} {count}");
        if out.text.len() as u64 > max_bytes {
            return Err(QueryError::TooLarge(max_bytes));
        }
    }
    Ok(())
}

/// The stacks of `slices` that `filter` and `visibility` admit, as one slice (kernel frames
/// removed unless `visibility` is [`Visibility::All`]; of a roll-up, the samples in
/// `[since_ns, until_ns)`), within `bounds`. The merged slice
/// spans the first slice's start to the last one's end; `period_ns` is the first one's, and
/// stacks of slices sampled at another period count for their CPU time in samples of it.
pub fn merged(
    store: &Store,
    slices: &[SliceMeta],
    (since_ns, until_ns): (u64, u64),
    filter: &Filter,
    visibility: Visibility,
    bounds: &Bounds,
) -> Result<(Slice, Folded), QueryError> {
    let _release = ReleaseMemory;
    let mut out = Slice::default();
    let mut counts = Folded {
        measure: filter.measure,
        ..Folded::default()
    };
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut bytes: u64 = 0;
    for meta in slices {
        bounds.check()?;
        let Some(slice) = read_for_query(
            store,
            meta,
            ((since_ns, until_ns), filter.measure),
            bounds,
            &mut counts.skipped,
        )?
        else {
            continue;
        };
        counts.slices += 1;
        counts.open += meta.open.is_some() as u64;
        if out.start_ns == 0 {
            out.start_ns = slice.start_ns;
            out.period_ns = slice.period_ns;
        }
        out.end_ns = out.end_ns.max(slice.end_ns);
        let mut remap: Vec<Option<u32>> = vec![None; slice.names.len()];
        for s in &slice.stacks {
            if !filter.admits(s, visibility) {
                continue;
            }
            let mut stack = s.clone();
            // Seconds of its own slice: meaningless in the merged one.
            stack.seconds = Default::default();
            if slice.period_ns != out.period_ns && filter.measure == Measure::Cpu {
                // Sampled at another frequency (the budget or a reload changed it): counted
                // for its CPU time, in samples of the merged slice's period.
                stack.count = samples_of(stack.cpu_ns, out.period_ns);
            }
            hide_kernel_frames(&mut stack, &slice.names, visibility);
            for f in stack.frames.iter_mut() {
                let i = *f as usize;
                let id = match remap.get(i).copied().flatten() {
                    Some(id) => id,
                    None => {
                        let name = slice
                            .names
                            .get(i)
                            .map_or("[unknown]".into(), |n| profile::sanitize_frame(n));
                        let name: &str = &name;
                        let id = match ids.get(name) {
                            Some(&id) => id,
                            None => {
                                let id = out.names.len() as u32;
                                out.names.push(name.to_string());
                                ids.insert(name.to_string(), id);
                                bytes += 2 * name.len() as u64 + 16;
                                id
                            }
                        };
                        if let Some(r) = remap.get_mut(i) {
                            *r = Some(id);
                        }
                        id
                    }
                };
                *f = id;
            }
            if let Some(comm) = &stack.comm {
                stack.comm = Some(profile::sanitize_frame(comm).into_owned());
            }
            bytes += 8 * stack.frames.len() as u64 + 64;
            if bytes > bounds.max_bytes {
                return Err(QueryError::TooLarge(bounds.max_bytes));
            }
            counts.samples += stack.count;
            out.stacks.push(stack);
        }
    }
    Ok((out, counts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slice::tests::example;
    use prost::Message;

    const P: u64 = 10_101_010;

    #[test]
    fn slices_at_other_frequencies_count_for_their_cpu_time() {
        let dir = tempfile::tempdir().unwrap();
        let day = std::time::Duration::from_secs(86_400);
        let t0 = 1_700_000_000_000_000_000;
        let store = Store::open(dir.path(), day, 1 << 30, t0).unwrap();
        // The same CPU time sampled at 99 Hz, then at a tenth of it (the budget lowered it).
        store.write(&example(t0), t0).unwrap();
        let mut slow = example(t0 + 10_000_000_000);
        slow.period_ns = P * 10;
        for s in &mut slow.stacks {
            s.count = s.count.div_ceil(10);
            s.cpu_ns = s.count * P * 10;
        }
        store.write(&slow, t0).unwrap();
        let bounds = Bounds::new(1 << 20, std::time::Duration::from_secs(10));
        let f = folded(
            &store,
            0,
            u64::MAX,
            &Filter::default(),
            Visibility::All,
            &bounds,
        )
        .unwrap();
        assert_eq!(f.slices, 2);
        assert_eq!(f.frequency, Some(99));
        // 30 samples at 99 Hz, and 3 at 9.9 Hz standing for 30.
        assert!(f.text.contains("split;main;work;hot_a 60\n"), "{}", f.text);
        // 7 + 1 (standing for 10), 1 + 1 (standing for 10).
        assert!(f.text.contains(";do_sys 17\n"), "{}", f.text);
        assert!(f.text.contains("init;main;main 11\n"), "{}", f.text);
        assert_eq!(f.samples, 60 + 17 + 11);
        assert_eq!(samples_of(P / 3, P), 1, "any CPU time is a sample");
        assert_eq!(samples_of(0, P), 0);
    }

    #[test]
    fn merged_slices_keep_labels_and_drop_kernel_frames_for_users() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            dir.path(),
            std::time::Duration::from_secs(1 << 30),
            1 << 30,
            0,
        )
        .unwrap();
        for start in [10_000_000_000u64, 20_000_000_000] {
            store.write(&example(start), 30_000_000_000).unwrap();
        }
        let metas = store.select(0, u64::MAX).slices;
        let bounds = Bounds::new(1 << 20, std::time::Duration::from_secs(10));
        let (all, counts) = merged(
            &store,
            &metas,
            (0, u64::MAX),
            &Filter::default(),
            Visibility::All,
            &bounds,
        )
        .unwrap();
        assert_eq!((counts.slices, counts.samples), (2, 76));
        assert_eq!(all.stacks.len(), 6);
        assert_eq!(all.start_ns, 10_000_000_000);
        assert_eq!(all.end_ns, 30_000_000_000);
        // A round trip through the pprof encoding keeps it whole.
        assert_eq!(Slice::decode(&all.encode()).unwrap(), all);
        let f = Filter {
            pid: Some(90),
            descendants: true,
            ..Filter::default()
        };
        let (split, _) = merged(
            &store,
            &metas,
            (0, u64::MAX),
            &f,
            Visibility::OwnOnly(1000),
            &bounds,
        )
        .unwrap();
        assert_eq!(split.samples(), 60);
        assert!(split
            .stacks
            .iter()
            .all(|s| s.kernel_frames == 0 && s.pid == 100));
        let mut lines = HashMap::new();
        add_slice(&mut lines, &split, &Filter::default(), Visibility::All);
        // add_slice sums CPU time: 60 samples of 10_101_010 ns.
        assert_eq!(lines["split;main;work;hot_a"], 60 * P);
    }

    #[test]
    fn a_file_larger_than_the_answer_may_be_is_refused_not_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            dir.path(),
            std::time::Duration::from_secs(1 << 30),
            1 << 30,
            0,
        )
        .unwrap();
        store
            .write(&example(10_000_000_000), 30_000_000_000)
            .unwrap();
        let raw = example(10_000_000_000).to_pprof().encode_to_vec().len() as u64;
        let bounds = |max_bytes| Bounds::new(max_bytes, std::time::Duration::from_secs(10));
        let f = |b: &Bounds| folded(&store, 0, u64::MAX, &Filter::default(), Visibility::All, b);
        match f(&bounds(raw - 1)) {
            Err(QueryError::FileTooLarge(limit)) => assert_eq!(limit, raw - 1),
            other => panic!("{other:?}"),
        }
        assert_eq!(f(&bounds(raw)).unwrap().samples, 38);
        assert_eq!(
            store
                .counters
                .corrupt
                .load(std::sync::atomic::Ordering::Relaxed),
            0
        );
        assert_eq!(f(&bounds(1 << 20)).unwrap().samples, 38);
    }

    #[test]
    fn visibility_and_filters() {
        let slice = example(0);
        let mut all = HashMap::new();
        assert_eq!(
            add_slice(&mut all, &slice, &Filter::default(), Visibility::All),
            38
        );
        assert_eq!(all["split;main;work;hot_a"], 30 * P);
        assert_eq!(
            all["[pid 200];[truncated];main;entry_SYSCALL_64;do_sys"],
            7 * P
        );
        assert_eq!(all["init;main;main"], P);

        let mut own = HashMap::new();
        let n = add_slice(&mut own, &slice, &Filter::default(), Visibility::OwnOnly(0));
        assert_eq!(n, 1);
        // Never a kernel frame for a user who is not an admin.
        assert_eq!(own.keys().collect::<Vec<_>>(), ["init;main"]);

        let mut by_comm = HashMap::new();
        let f = Filter {
            comm: Some("split".into()),
            ..Filter::default()
        };
        assert_eq!(add_slice(&mut by_comm, &slice, &f, Visibility::All), 30);
        let f = Filter {
            pid: Some(200),
            ..Filter::default()
        };
        assert_eq!(
            add_slice(&mut HashMap::new(), &slice, &f, Visibility::All),
            7
        );
        // Another user's uid filter never widens what a user sees.
        let f = Filter {
            uid: Some(1000),
            ..Filter::default()
        };
        assert_eq!(
            add_slice(&mut HashMap::new(), &slice, &f, Visibility::OwnOnly(0)),
            0
        );
    }
}

#[cfg(test)]
mod bench {
    use super::*;
    use std::path::Path;

    /// The process's CPU time so far (all its threads, ended ones included), seconds.
    fn cpu_seconds() -> f64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
        let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        ticks / 100.0
    }

    /// By hand: `PROFILERD_BENCH_SLICES=DIR cargo test --release -p profiler-daemon --bin
    /// profilerd query_hour -- --ignored --nocapture`: an hour of 10-s slices made of DIR's
    /// slices (hard links, round robin), and the query of that hour five times: wall and CPU
    /// time (bench/ui.sh prints the same through the API).
    #[test]
    #[ignore = "a figure, by hand, on slices it is given"]
    fn query_hour() {
        let s = 1_000_000_000u64;
        if let Ok(state) = std::env::var("PROFILERD_BENCH_STATE") {
            return query_state(Path::new(&state), s);
        }
        let src = std::env::var("PROFILERD_BENCH_SLICES").expect("PROFILERD_BENCH_SLICES=DIR");
        let mut names: Vec<_> = std::fs::read_dir(&src)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(".pb.gz"))
            .collect();
        names.sort();
        let now = crate::state::unix_now_ns() / (10 * s) * (10 * s);
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("slices")).unwrap();
        for k in 0..361u64 {
            let start = now - (361 - k) * 10 * s;
            std::fs::hard_link(
                &names[k as usize % names.len()],
                dir.path()
                    .join(format!("slices/{start}-{}.pb.gz", start + 10 * s)),
            )
            .unwrap();
        }
        let week = std::time::Duration::from_secs(7 * 86_400);
        let store = Store::open(dir.path(), week, u64::MAX, now).unwrap();
        let bounds = Bounds::new(1 << 30, std::time::Duration::from_secs(600));
        for _ in 0..5 {
            let (t, c) = (Instant::now(), cpu_seconds());
            let f = folded(
                &store,
                now - 3600 * s,
                now,
                &Filter::default(),
                Visibility::All,
                &bounds,
            )
            .unwrap();
            eprintln!(
                "query of an hour: {:.0} ms, {:.0} ms of CPU, {} files, {} lines, {} bytes",
                t.elapsed().as_secs_f64() * 1e3,
                (cpu_seconds() - c) * 1e3,
                f.slices,
                f.text.lines().count(),
                f.text.len()
            );
        }
    }

    /// A state directory as it is (roll-ups included, `PROFILERD_BENCH_STATE`): its last
    /// hour, file by file (read and fold times), then as one query.
    fn query_state(state: &Path, s: u64) {
        let week = std::time::Duration::from_secs(7 * 86_400);
        let now = crate::state::unix_now_ns();
        let store = Store::open(state, week, u64::MAX, now).unwrap();
        let sel = store.select(0, u64::MAX);
        let until = sel.slices.iter().map(|m| m.end_ns).max().unwrap();
        let since = until - 3600 * s;
        let bounds = Bounds::new(1 << 30, std::time::Duration::from_secs(600));
        let mut folding = Folding::new(u64::MAX);
        for meta in store.select(since, until).slices {
            let t = Instant::now();
            let slice = store.read_in(&meta, since, until).unwrap().unwrap();
            let read = t.elapsed();
            let t = Instant::now();
            folding
                .add_slice(&slice, &Filter::default(), Visibility::All)
                .unwrap();
            if meta.rollup || read.as_millis() > 50 {
                eprintln!(
                    "{}: read {read:?} ({} stacks), fold {:?}",
                    if meta.rollup { "roll-up" } else { "slice" },
                    slice.stacks.len(),
                    t.elapsed()
                );
            }
        }
        let t = Instant::now();
        let lines = folding.lines();
        eprintln!("lines: {:?}, {} lines", t.elapsed(), lines.len());
        let t = Instant::now();
        let f = folded(
            &store,
            since,
            until,
            &Filter::default(),
            Visibility::All,
            &bounds,
        )
        .unwrap();
        eprintln!("the whole query: {:?}, {} files", t.elapsed(), f.slices);
    }
}
