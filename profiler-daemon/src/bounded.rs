//! A folded answer bounded as a flame graph drawn at a minimum width (`/v1/folded?minwidth=`):
//! the stacks as a call tree, each frame narrower than the width merged, per parent, with its
//! narrow siblings into one frame ([`daemon_api::history::merged_frame`]) that keeps their
//! samples, the width doubled until the tree has at most
//! [`daemon_api::history::MAX_BOUNDED_FRAMES`] frames, and the tree written back as folded
//! lines. The same rule as profctl ui's trees (`profiler-cli/src/commands/ui/tree.rs`), so
//! that the page draws what the daemon sent.
//!
//! The tree is never built: sorted stacks that share a prefix are neighbours, so a frame is
//! a run of stacks, its count a difference of prefix sums, its children found by binary
//! search; only the frames kept are visited.

use daemon_api::history::merged_frame;

/// A bounded answer's lines and what was merged.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Bounded {
    /// Folded lines (`comm;outermost;…;leaf`) with their counts, sorted by text.
    pub lines: Vec<(String, u64)>,
    /// The width applied, in counts: every frame kept has at least this many.
    pub min: u64,
    /// Frames merged, in all.
    pub merged_frames: u64,
}

/// A frame: the stacks `[lo, hi)` that share their first `depth` frames.
#[derive(Clone, Copy)]
struct Run {
    lo: usize,
    hi: usize,
    depth: usize,
}

struct Tree<'a> {
    stacks: Vec<(&'a [u32], u64)>,
    /// `sums[i]`: the counts of the stacks before `i`.
    sums: Vec<u64>,
}

impl Tree<'_> {
    fn value(&self, run: Run) -> u64 {
        self.sums[run.hi] - self.sums[run.lo]
    }

    /// The stacks of `run` that end at it (they sort first), then each child, in order.
    fn split(&self, run: Run) -> (usize, impl Iterator<Item = (u32, Run)> + '_) {
        let d = run.depth;
        let ends = run.lo + self.stacks[run.lo..run.hi].partition_point(|s| s.0.len() <= d);
        let mut i = ends;
        let children = std::iter::from_fn(move || {
            if i >= run.hi {
                return None;
            }
            let name = self.stacks[i].0[d];
            let j = i + self.stacks[i..run.hi].partition_point(|s| s.0[d] <= name);
            let child = Run {
                lo: i,
                hi: j,
                depth: d + 1,
            };
            i = j;
            Some((name, child))
        });
        (ends, children)
    }

    /// Frames kept at `min` under `run` (itself included; one merged frame per parent with
    /// narrow children), counting no further than `cap`.
    fn kept(&self, run: Run, min: u64, cap: usize) -> usize {
        let mut n = 1;
        let mut merged = false;
        for (_, child) in self.split(run).1 {
            if n > cap {
                break;
            }
            if self.value(child) >= min {
                n += self.kept(child, min, cap - n.min(cap));
            } else {
                merged = true;
            }
        }
        n + merged as usize
    }

    fn emit(
        &self,
        run: Run,
        min: u64,
        path: &mut String,
        name: &dyn Fn(u32) -> String,
        out: &mut Bounded,
    ) {
        let (ends, children) = self.split(run);
        let here = self.sums[ends] - self.sums[run.lo];
        if here > 0 && run.depth > 0 {
            out.lines.push((path.clone(), here));
        }
        let (mut small, mut small_value) = (0u64, 0u64);
        let len = path.len();
        for (id, child) in children {
            let value = self.value(child);
            if value < min {
                small += 1;
                small_value += value;
                continue;
            }
            if run.depth > 0 {
                path.push(';');
            }
            path.push_str(&name(id));
            self.emit(child, min, path, name, out);
            path.truncate(len);
        }
        if small > 0 {
            out.merged_frames += small;
            if run.depth > 0 {
                path.push(';');
            }
            path.push_str(&merged_frame(small));
            out.lines.push((path.clone(), small_value));
            path.truncate(len);
        }
    }
}

/// `stacks` (name ids, root first, each with its count; no two alike) bounded at `min_share`
/// of their total (a fraction: 0.001 for 0.1%), the width doubled until at most `max_frames`
/// frames remain; `name` names the ids.
pub fn bound(
    mut stacks: Vec<(&[u32], u64)>,
    min_share: f64,
    max_frames: usize,
    name: &dyn Fn(u32) -> String,
) -> Bounded {
    stacks.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut sums = Vec::with_capacity(stacks.len() + 1);
    let mut sum = 0u64;
    sums.push(0);
    for (_, count) in &stacks {
        sum += count;
        sums.push(sum);
    }
    let tree = Tree { stacks, sums };
    let root = Run {
        lo: 0,
        hi: tree.stacks.len(),
        depth: 0,
    };
    let mut min = ((sum as f64 * min_share).ceil() as u64).max(1);
    while tree.kept(root, min, max_frames) > max_frames {
        min = min.saturating_mul(2);
    }
    let mut out = Bounded {
        min,
        ..Bounded::default()
    };
    tree.emit(root, min, &mut String::new(), name, &mut out);
    out.lines.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use daemon_api::history::merged_frames_of;

    fn names(id: u32) -> String {
        format!("f{id}")
    }

    #[test]
    fn narrow_frames_are_merged_per_parent_and_keep_their_samples() {
        // f0;f1 900, f0;f2..f101 one each, f0 itself 5, and f3;f4 50.
        let keys: Vec<Vec<u32>> = std::iter::once(vec![0, 1])
            .chain((2..102).map(|i| vec![0, i]))
            .chain([vec![0], vec![103, 104]])
            .collect();
        let mut stacks: Vec<(&[u32], u64)> = vec![(&keys[0], 900)];
        stacks.extend(keys[1..101].iter().map(|k| (k.as_slice(), 1)));
        stacks.push((&keys[101], 5));
        stacks.push((&keys[102], 50));
        let total: u64 = stacks.iter().map(|s| s.1).sum();
        let b = bound(stacks, 0.01, 6000, &names);
        assert_eq!(b.min, (total as f64 * 0.01).ceil() as u64);
        assert_eq!(
            b.lines,
            [
                ("f0".to_string(), 5),
                ("f0;[100 narrow frames]".to_string(), 100),
                ("f0;f1".to_string(), 900),
                ("f103;f104".to_string(), 50),
            ]
        );
        assert_eq!(b.merged_frames, 100);
        assert_eq!(b.lines.iter().map(|l| l.1).sum::<u64>(), total);
        assert_eq!(merged_frames_of("[100 narrow frames]"), Some(100));
    }

    #[test]
    fn the_width_is_raised_until_the_frames_fit() {
        let keys: Vec<Vec<u32>> = (0..20_000u32).map(|i| vec![i / 100, i]).collect();
        let stacks: Vec<(&[u32], u64)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_slice(), 1 + (i % 7) as u64))
            .collect();
        let total: u64 = stacks.iter().map(|s| s.1).sum();
        let b = bound(stacks, 0.0, 6000, &names);
        assert!(b.min > 1);
        // Frames: the root, each line's frames not shared with the line before.
        let mut frames = std::collections::BTreeSet::new();
        for (line, _) in &b.lines {
            let parts: Vec<&str> = line.split(';').collect();
            for d in 1..=parts.len() {
                frames.insert(parts[..d].join(";"));
            }
        }
        assert!(frames.len() < 6000, "{}", frames.len());
        assert_eq!(b.lines.iter().map(|l| l.1).sum::<u64>(), total);
    }
}
