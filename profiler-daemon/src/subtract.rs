//! A profile's window as the difference of two states of the history: the samples of the
//! slices merged for a window, less what the slice being filled at the window's start held
//! then (the scrape endpoint's exact `seconds`). Stacks are matched by their frames' names and
//! their labels, since the two states were named apart.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::access::Visibility;
use crate::filter::Filter;
use crate::measure::hide_kernel_frames;
use crate::query::samples_of;
use crate::slice::{Slice, SliceStack};

/// A stack's identity in the answer: its frames as the answer's name ids, and its labels
/// (the command name as a query serves it, sanitized: [`profile::sanitize_frame`]), so that
/// the raw names of the open slice match the cleaned names of a merged answer.
type StackKey<'a> = (
    Vec<u32>,
    u32,
    u32,
    u32,
    u64,
    Option<Cow<'a, str>>,
    Option<u32>,
    &'a [u32],
    Option<&'a str>,
);

/// `s`'s key with `frames` as its frames.
fn key_with(frames: Vec<u32>, s: &SliceStack) -> StackKey<'_> {
    (
        frames,
        s.kernel_frames,
        s.pid,
        s.tid,
        s.process_start,
        s.comm.as_deref().map(profile::sanitize_frame),
        s.uid,
        &s.ancestors,
        s.cgroup.as_deref(),
    )
}

/// For each of `base`'s names, the id of the same name (as a query serves it) in `out`, if
/// `out` has it: each name cleaned and looked up once, so that a stack is matched by ids,
/// never by its names' text (a deep stack of long names costs its depth, not its bytes).
fn ids_in(out: &Slice, base: &Slice) -> (Vec<Option<u32>>, Option<u32>) {
    let ids: HashMap<&str, u32> = out
        .names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i as u32))
        .collect();
    let of = |name: &str| ids.get(profile::sanitize_frame(name).as_ref()).copied();
    (
        base.names.iter().map(|n| of(n)).collect(),
        // What a frame past the names is served as.
        ids.get("[unknown]").copied(),
    )
}

/// Take from `out` (an answer of [`crate::query::merged`] with the same `filter` and `visibility`) the
/// samples of `base`, an earlier state of one of the slices merged into it (the open slice as
/// it stood when a profile's window began): what remains is what was sampled since. Returns
/// the samples taken away.
pub fn subtract(out: &mut Slice, base: &Slice, filter: &Filter, visibility: Visibility) -> u64 {
    let (base_ids, unknown) = ids_in(out, base);
    let trimmed: Vec<SliceStack> = base
        .stacks
        .iter()
        .filter(|s| filter.admits(s, visibility))
        .map(|s| {
            let mut s = s.clone();
            hide_kernel_frames(&mut s, &base.names, visibility);
            if base.period_ns != out.period_ns {
                s.count = samples_of(s.cpu_ns, out.period_ns);
            }
            s
        })
        .collect();
    let mut taken: HashMap<StackKey<'_>, (u64, u64)> = HashMap::new();
    for s in &trimmed {
        // A stack with a name the answer lacks matches none of its stacks.
        let Some(frames) = s
            .frames
            .iter()
            .map(|&f| base_ids.get(f as usize).copied().unwrap_or(unknown))
            .collect::<Option<Vec<u32>>>()
        else {
            continue;
        };
        let e = taken.entry(key_with(frames, s)).or_default();
        e.0 += s.count;
        e.1 += s.cpu_ns;
    }
    let mut less: Vec<(usize, u64, u64)> = Vec::new();
    for (i, s) in out.stacks.iter().enumerate() {
        let Some(left) = taken.get_mut(&key_with(s.frames.clone(), s)) else {
            continue;
        };
        let (count, cpu_ns) = (s.count.min(left.0), s.cpu_ns.min(left.1));
        left.0 -= count;
        left.1 -= cpu_ns;
        less.push((i, count, cpu_ns));
    }
    drop(taken);
    let mut removed = 0;
    for (i, count, cpu_ns) in less {
        let s = &mut out.stacks[i];
        s.count -= count;
        s.cpu_ns -= cpu_ns;
        removed += count;
    }
    out.stacks.retain(|s| s.count > 0);
    removed
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::query::{merged, Bounds};
    use crate::slice::tests::example;
    use crate::store::Store;

    const P: u64 = 10_101_010;

    #[test]
    fn an_earlier_state_of_a_slice_is_taken_away_by_stack() {
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
        let metas = store.select(0, u64::MAX).slices;
        let bounds = Bounds::new(1 << 20, std::time::Duration::from_secs(10));
        let (mut all, counts) = merged(
            &store,
            &metas,
            (0, u64::MAX),
            &Filter::default(),
            Visibility::All,
            &bounds,
        )
        .unwrap();
        assert_eq!(counts.samples, 38);
        // The slice as it stood earlier: 10 of hot_a's 30, all of init's, with its names in
        // another order (named by another pass), and a stack it no longer has.
        let mut base = example(10_000_000_000);
        base.names.reverse();
        let n = base.names.len() as u32;
        for st in &mut base.stacks {
            for f in &mut st.frames {
                *f = n - 1 - *f;
            }
        }
        base.stacks[0].count = 10;
        base.stacks[0].cpu_ns = 10 * P;
        base.stacks.remove(1);
        let mut gone = base.stacks[0].clone();
        gone.pid = 4242;
        base.stacks.push(gone);
        let removed = subtract(&mut all, &base, &Filter::default(), Visibility::All);
        assert_eq!(removed, 10 + 1);
        assert_eq!(all.samples(), 38 - 11);
        let hot: Vec<&SliceStack> = all.stacks.iter().filter(|s| s.pid == 100).collect();
        assert_eq!((hot[0].count, hot[0].cpu_ns), (20, 20 * P));
        assert!(
            all.stacks.iter().all(|s| s.pid != 1),
            "init's stack is gone"
        );
    }

    /// `store` holding `slice` alone, and what `merged` answers of it for `filter` and
    /// `visibility`.
    fn merged_of(
        slice: &Slice,
        filter: &Filter,
        visibility: Visibility,
    ) -> (tempfile::TempDir, Slice) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(
            dir.path(),
            std::time::Duration::from_secs(1 << 30),
            1 << 30,
            0,
        )
        .unwrap();
        store.write(slice, 30_000_000_000).unwrap();
        let metas = store.select(0, u64::MAX).slices;
        let bounds = Bounds::new(1 << 24, std::time::Duration::from_secs(10));
        let (all, _) = merged(&store, &metas, (0, u64::MAX), filter, visibility, &bounds).unwrap();
        (dir, all)
    }

    #[test]
    fn raw_names_of_the_open_slice_match_the_cleaned_names_of_the_answer() {
        // Names a query serves other than they are kept: a `;`, a control character, a name
        // over the name limit; and a command name with both.
        let long = "x".repeat(5000);
        let mut slice = example(10_000_000_000);
        slice.names = [
            "main",
            "a;b",
            "ctl\u{1b}[31m",
            long.as_str(),
            "do_sys",
            "[truncated]",
        ]
        .map(String::from)
        .to_vec();
        slice.stacks[0].frames = vec![0, 1, 2, 3];
        slice.stacks[0].comm = Some("ev\u{1b}il;x".into());
        let (_dir, mut all) = merged_of(&slice, &Filter::default(), Visibility::All);
        let samples = all.samples();
        assert_eq!(samples, 38);
        // The open slice as it stood at the window's start is all of it: nothing is left,
        // nothing counted twice.
        let removed = subtract(&mut all, &slice, &Filter::default(), Visibility::All);
        assert_eq!(removed, samples, "{:?}", all.stacks);
        assert!(all.stacks.is_empty(), "{:?}", all.stacks);
    }

    #[test]
    fn a_base_stack_named_otherwise_takes_nothing_and_deep_long_names_match_by_id() {
        // A deep stack of one long name (as a hostile program has), matched whole.
        let long = format!("f{}", "x".repeat(40_000));
        let mut slice = example(10_000_000_000);
        slice.names = vec!["main".into(), long];
        slice.stacks[0].frames = [0].into_iter().chain([1; 120]).collect();
        let (_dir, mut all) = merged_of(&slice, &Filter::default(), Visibility::All);
        let samples = all.samples();
        // The same stack with one name the answer does not have: nothing of it is taken.
        let mut other = slice.clone();
        other.names.push("elsewhere".into());
        for st in &mut other.stacks {
            st.frames[0] = 2;
        }
        assert_eq!(
            subtract(&mut all, &other, &Filter::default(), Visibility::All),
            0
        );
        assert_eq!(all.samples(), samples);
        assert_eq!(
            subtract(&mut all, &slice, &Filter::default(), Visibility::All),
            samples
        );
        assert!(all.stacks.is_empty(), "{:?}", all.stacks);
    }

    #[test]
    fn a_users_off_cpu_stack_is_taken_away_as_the_answer_shows_it() {
        // [user…, kernel…, wait kind]: the user sees the wait kind after their own frames.
        let slice = Slice {
            start_ns: 10_000_000_000,
            end_ns: 20_000_000_000,
            period_ns: P,
            names: ["main", "read", "pipe_read", "[off-cpu: io]"]
                .map(String::from)
                .to_vec(),
            stacks: vec![SliceStack {
                frames: vec![0, 1, 2, 3],
                kernel_frames: 1,
                pid: 5,
                tid: 5,
                uid: Some(1000),
                comm: Some("w".into()),
                count: 40_000,
                off_cpu_ns: 40_000_000,
                ..SliceStack::default()
            }],
        };
        let filter = Filter {
            measure: crate::measure::Measure::Wall,
            ..Filter::default()
        };
        let user = Visibility::OwnOnly(1000);
        let (_dir, mut all) = merged_of(&slice, &filter, user);
        assert_eq!(all.stacks.len(), 1);
        let shown: Vec<&str> = all.stacks[0]
            .frames
            .iter()
            .map(|&f| all.names[f as usize].as_str())
            .collect();
        assert_eq!(shown, ["main", "read", "[off-cpu: io]"]);
        let removed = subtract(&mut all, &slice, &filter, user);
        assert_eq!(removed, 40_000);
        assert!(all.stacks.is_empty(), "{:?}", all.stacks);
    }
}
