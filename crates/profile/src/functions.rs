//! Per-function figures of a [`Profile`]: self and total samples of every function, and the
//! functions whose share changed most between two profiles (what `profctl top` and
//! `profctl diff` print, and what the daemon can serve).

use std::collections::{HashMap, HashSet};

use crate::profile::{FrameId, Profile};

/// One function's samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FunctionCounts {
    /// The function (frame name).
    pub name: String,
    /// Samples with it as the innermost frame.
    pub self_samples: u64,
    /// Samples with it anywhere on the stack (once per sample, however deep the recursion).
    pub total_samples: u64,
}

/// How [`function_counts`] orders its rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FunctionOrder {
    /// By self samples, then total, then name.
    #[default]
    BySelf,
    /// By total samples, then self, then name.
    ByTotal,
}

/// Self and total samples of every function of `profile`, by self (then total, then name);
/// with `comm_root`, each stack's root frame (the command name) is not a function.
pub fn function_counts(profile: &Profile, comm_root: bool) -> Vec<FunctionCounts> {
    let mut counts: HashMap<FrameId, (u64, u64)> = HashMap::new();
    let mut seen = HashSet::new();
    for (stack, count) in profile.stacks() {
        let frames = if comm_root && !stack.is_empty() {
            &stack[1..]
        } else {
            stack
        };
        seen.clear();
        for &f in frames {
            if seen.insert(f) {
                counts.entry(f).or_default().1 += count;
            }
        }
        if let Some(&leaf) = frames.last() {
            counts.entry(leaf).or_default().0 += count;
        }
    }
    let mut out: Vec<FunctionCounts> = counts
        .into_iter()
        .map(|(id, (s, t))| FunctionCounts {
            name: profile.name(id).to_string(),
            self_samples: s,
            total_samples: t,
        })
        .collect();
    sort_functions(&mut out, FunctionOrder::BySelf);
    out
}

/// Sort `rows` in `order` (most first; ties by the other count, then by name).
pub fn sort_functions(rows: &mut [FunctionCounts], order: FunctionOrder) {
    match order {
        FunctionOrder::BySelf => rows.sort_by(|a, b| {
            b.self_samples
                .cmp(&a.self_samples)
                .then(b.total_samples.cmp(&a.total_samples))
                .then(a.name.cmp(&b.name))
        }),
        FunctionOrder::ByTotal => rows.sort_by(|a, b| {
            b.total_samples
                .cmp(&a.total_samples)
                .then(b.self_samples.cmp(&a.self_samples))
                .then(a.name.cmp(&b.name))
        }),
    }
}

/// One side of a comparison: a profile, and whether its stacks' roots are command names.
#[derive(Clone, Copy, Debug)]
pub struct Side<'a> {
    /// The stacks.
    pub profile: &'a Profile,
    /// Whether each stack's root frame is the command name (not a function).
    pub comm_root: bool,
}

/// One function's change of self samples from before to after.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// The function.
    pub name: String,
    /// Self share before, percent (or samples, not normalized).
    pub before: f64,
    /// Self share after.
    pub after: f64,
}

/// The `n` functions whose self samples changed most from `before` to `after`, as shares of
/// each side's total (percent) or raw counts when not `normalize`, largest change first
/// (ties by name); functions that did not change are left out.
pub fn largest_changes(
    before: Side<'_>,
    after: Side<'_>,
    normalize: bool,
    n: usize,
) -> Vec<Change> {
    let scale = |p: &Profile| {
        if normalize {
            100.0 / p.total().max(1) as f64
        } else {
            1.0
        }
    };
    let (sb, sa) = (scale(before.profile), scale(after.profile));
    let mut by_name: HashMap<String, (f64, f64)> = HashMap::new();
    for r in function_counts(before.profile, before.comm_root) {
        by_name.entry(r.name).or_default().0 = r.self_samples as f64 * sb;
    }
    for r in function_counts(after.profile, after.comm_root) {
        by_name.entry(r.name).or_default().1 = r.self_samples as f64 * sa;
    }
    let mut changes: Vec<Change> = by_name
        .into_iter()
        .map(|(name, (before, after))| Change {
            name,
            before,
            after,
        })
        .filter(|c| c.before != c.after)
        .collect();
    changes.sort_by(|a, b| {
        (b.after - b.before)
            .abs()
            .total_cmp(&(a.after - a.before).abs())
            .then(a.name.cmp(&b.name))
    });
    changes.truncate(n);
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(lines: &[(&[&str], u64)]) -> Profile {
        let mut p = Profile::new();
        for (frames, n) in lines {
            let ids: Vec<_> = frames.iter().map(|f| p.intern(f)).collect();
            p.add(&ids, *n);
        }
        p
    }

    #[test]
    fn self_and_total_count_each_sample_once() {
        let p = profile(&[
            (&["app", "main", "rec", "rec", "leaf"], 3),
            (&["app", "main", "rec"], 1),
        ]);
        let rows = function_counts(&p, true);
        let get = |n: &str| rows.iter().find(|r| r.name == n).unwrap().clone();
        assert_eq!(
            (get("leaf").self_samples, get("leaf").total_samples),
            (3, 3)
        );
        assert_eq!((get("rec").self_samples, get("rec").total_samples), (1, 4));
        assert_eq!(
            (get("main").self_samples, get("main").total_samples),
            (0, 4)
        );
        assert!(rows.iter().all(|r| r.name != "app"));
        assert_eq!(rows[0].name, "leaf");
        let with_root = function_counts(&p, false);
        assert_eq!(
            with_root
                .iter()
                .find(|r| r.name == "app")
                .unwrap()
                .total_samples,
            4
        );
    }

    #[test]
    fn order_by_total() {
        let p = profile(&[(&["app", "main", "a"], 3), (&["app", "main"], 1)]);
        let mut rows = function_counts(&p, true);
        assert_eq!(rows[0].name, "a");
        sort_functions(&mut rows, FunctionOrder::ByTotal);
        assert_eq!(rows[0].name, "main");
        assert_eq!((rows[0].self_samples, rows[0].total_samples), (1, 4));
    }

    #[test]
    fn changes_are_shares_and_sorted() {
        let before = profile(&[(&["app", "main", "a"], 75), (&["app", "main", "b"], 25)]);
        let after = profile(&[(&["app", "main", "a"], 50), (&["app", "main", "b"], 150)]);
        let side = |profile| Side {
            profile,
            comm_root: true,
        };
        let c = largest_changes(side(&before), side(&after), true, 10);
        assert_eq!(c.len(), 2);
        assert!((c[0].after - c[0].before).abs() == 50.0, "{c:?}");
        let b = c.iter().find(|c| c.name == "b").unwrap();
        assert_eq!((b.before, b.after), (25.0, 75.0));
        let raw = largest_changes(side(&before), side(&after), false, 1);
        assert_eq!(raw[0].name, "b");
        assert_eq!((raw[0].before, raw[0].after), (25.0, 150.0));
        let same = largest_changes(side(&before), side(&before), true, 10);
        assert!(same.is_empty(), "{same:?}");
    }
}
