//! Call trees built from stacks (a flame graph's frames, a function's callers or callees, a
//! diff of two ranges) and their bounded JSON: frames narrower than a minimum width are
//! merged, per parent, into one frame that says how many it stands for (as inferno's
//! `--minwidth` leaves them out, but with their samples kept), and the width is raised until
//! at most [`MAX_NODES`] frames are sent.

use std::fmt::Write as _;

/// Most frames one answer holds (as many as profilerd's bounded answers: the page draws
/// what the daemon sent).
pub const MAX_NODES: usize = daemon_api::history::MAX_BOUNDED_FRAMES;

/// Frames profilerd already merged (of a bounded answer, `/v1/folded?minwidth=`): by name
/// id, the frames each merged frame stands for (0: a function); and the width the daemon
/// applied, in counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct Merged<'a> {
    /// By name id: frames merged into it (0 for a function). Empty: none.
    pub frames: &'a [u64],
    /// The daemon's width, the least this tree's can be.
    pub min: u64,
}

impl Merged<'_> {
    /// The frames `name` stands for when the daemon merged it, else 0.
    fn of(&self, name: u32) -> u64 {
        self.frames.get(name as usize).copied().unwrap_or(0)
    }
}

/// The root's name id.
const ROOT: u32 = u32::MAX;

/// A call tree over sorted stacks. Stacks that share a prefix are neighbours, so each frame
/// is a run of stacks: its count is a difference of prefix sums, and its children are found
/// by binary search within the run. Only the frames kept are ever visited: no frame is built
/// for the merged ones, whatever the number of stacks.
#[derive(Debug)]
pub struct Tree<K> {
    stacks: Vec<Weighted<K>>,
    /// `values[i]`: the counts of the stacks before `i`; `bases` the same of the other side.
    values: Vec<u64>,
    bases: Vec<u64>,
}

/// One stack for [`Tree::build`]: frames (root first), its count, and its count on the other
/// side of a diff.
pub type Weighted<K> = (K, u64, u64);

/// A frame: the run of stacks `[lo, hi)` that share its first `depth` frames.
#[derive(Clone, Copy, Debug)]
struct Run {
    lo: usize,
    hi: usize,
    depth: usize,
    name: u32,
}

impl<K: AsRef<[u32]>> Tree<K> {
    /// The tree of `stacks` (name ids, root first). Siblings come in the order of their ids.
    pub fn build(mut stacks: Vec<Weighted<K>>) -> Tree<K> {
        stacks.sort_unstable_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        let mut values = Vec::with_capacity(stacks.len() + 1);
        let mut bases = Vec::with_capacity(stacks.len() + 1);
        let (mut v, mut b) = (0u64, 0u64);
        values.push(0);
        bases.push(0);
        for (_, value, base) in &stacks {
            v += value;
            b += base;
            values.push(v);
            bases.push(b);
        }
        Tree {
            stacks,
            values,
            bases,
        }
    }

    /// The root's count.
    pub fn total(&self) -> u64 {
        self.values[self.stacks.len()]
    }

    fn value(&self, run: Run) -> u64 {
        self.values[run.hi] - self.values[run.lo]
    }

    fn base(&self, run: Run) -> u64 {
        self.bases[run.hi] - self.bases[run.lo]
    }

    fn root(&self) -> Run {
        Run {
            lo: 0,
            hi: self.stacks.len(),
            depth: 0,
            name: ROOT,
        }
    }

    /// Calls `each` with every child of `run`, in order.
    fn children(&self, run: Run, mut each: impl FnMut(Run)) {
        let d = run.depth;
        let frames = |i: usize| self.stacks[i].0.as_ref();
        // Stacks that end here come first (a prefix sorts before its extensions).
        let mut i =
            run.lo + self.stacks[run.lo..run.hi].partition_point(|s| s.0.as_ref().len() <= d);
        while i < run.hi {
            let name = frames(i)[d];
            let j = i + self.stacks[i..run.hi].partition_point(|s| s.0.as_ref()[d] <= name);
            each(Run {
                lo: i,
                hi: j,
                depth: d + 1,
                name,
            });
            i = j;
        }
    }

    /// Frames kept at `min` (each at least `min` wide and not merged by the daemon; the rest
    /// merged, one merged frame per parent), counting no further than `cap`.
    fn kept(&self, run: Run, min: u64, merged_by: Merged<'_>, cap: usize) -> usize {
        let mut n = 1;
        let mut merged = false;
        self.children(run, |child| {
            if n > cap {
                return;
            }
            if self.value(child) >= min && merged_by.of(child.name) == 0 {
                n += self.kept(child, min, merged_by, cap - n.min(cap));
            } else {
                merged = true;
            }
        });
        n + merged as usize
    }

    /// The tree as JSON, frames narrower than `min_share` of the root merged (the width
    /// raised until at most [`MAX_NODES`] frames remain, and no less than the daemon's), with
    /// the frames the daemon merged (`merged`); `names` names the ids, `diff` adds each
    /// frame's count on the other side.
    pub fn to_json(
        &self,
        names: &[String],
        merged: Merged<'_>,
        min_share: f64,
        diff: bool,
    ) -> String {
        let total = self.total();
        let mut min = ((total as f64 * min_share).ceil() as u64)
            .max(merged.min)
            .max(1);
        while self.kept(self.root(), min, merged, MAX_NODES) > MAX_NODES {
            min = min.saturating_mul(2);
        }
        let mut out = Json {
            text: String::new(),
            used: Vec::new(),
            index: std::collections::HashMap::new(),
            nodes: 0,
            merged_frames: 0,
            diff,
            merged,
        };
        out.text.push_str("{\"tree\":");
        out.node(self, self.root(), min);
        let names: Vec<&str> = out
            .used
            .iter()
            .map(|&i| names[i as usize].as_str())
            .collect();
        let _ = write!(
            out.text,
            ",\"names\":{},\"total\":{total},\"base_total\":{},\"min_value\":{min},\"nodes\":{},\"merged_frames\":{}}}",
            serde_json::to_string(&names).unwrap_or_else(|_| "[]".into()),
            self.base(self.root()),
            out.nodes,
            out.merged_frames
        );
        out.text
    }
}

/// A tree being written as JSON.
struct Json<'m> {
    text: String,
    /// Name ids in the order of their first use (the answer's name table).
    used: Vec<u32>,
    index: std::collections::HashMap<u32, u32>,
    nodes: usize,
    merged_frames: usize,
    diff: bool,
    merged: Merged<'m>,
}

impl Json<'_> {
    fn name(&mut self, id: u32) -> i64 {
        if id == ROOT {
            return -1;
        }
        let next = self.used.len() as u32;
        let i = *self.index.entry(id).or_insert(next);
        if i == next {
            self.used.push(id);
        }
        i64::from(i)
    }

    /// `{"n": name, "v": count, "b": other side's count, "c": [children]}`; a merged frame
    /// is `{"n": -2, "v": …, "k": frames merged}`.
    fn node<K: AsRef<[u32]>>(&mut self, tree: &Tree<K>, run: Run, min: u64) {
        self.nodes += 1;
        let name = self.name(run.name);
        let _ = write!(self.text, "{{\"n\":{name},\"v\":{}", tree.value(run));
        if self.diff {
            let _ = write!(self.text, ",\"b\":{}", tree.base(run));
        }
        let mut kept = Vec::new();
        let (mut small, mut small_value, mut small_base) = (0usize, 0u64, 0u64);
        let merged = self.merged;
        tree.children(run, |child| {
            let by_daemon = merged.of(child.name) as usize;
            if tree.value(child) >= min && by_daemon == 0 {
                kept.push(child);
            } else {
                small += by_daemon.max(1);
                small_value += tree.value(child);
                small_base += tree.base(child);
            }
        });
        let mut first = true;
        for child in kept {
            self.text.push_str(if first { ",\"c\":[" } else { "," });
            first = false;
            self.node(tree, child, min);
        }
        if small > 0 {
            self.nodes += 1;
            self.merged_frames += small;
            self.text.push_str(if first { ",\"c\":[" } else { "," });
            first = false;
            let _ = write!(self.text, "{{\"n\":-2,\"v\":{small_value},\"k\":{small}");
            if self.diff {
                let _ = write!(self.text, ",\"b\":{small_base}");
            }
            self.text.push('}');
        }
        if !first {
            self.text.push(']');
        }
        self.text.push('}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("f{i}")).collect()
    }

    #[test]
    fn shared_prefixes_are_one_frame_and_counts_add_up() {
        let stacks: Vec<Weighted<Vec<u32>>> = vec![
            (vec![0, 1, 2], 5, 0),
            (vec![0, 1], 1, 0),
            (vec![0, 3], 4, 2),
            (vec![0, 1, 2], 0, 3),
        ];
        let tree = Tree::build(stacks);
        assert_eq!(tree.total(), 10);
        let json: Value =
            serde_json::from_str(&tree.to_json(&names(4), Merged::default(), 0.0, true)).unwrap();
        assert_eq!(json["total"], 10);
        assert_eq!(json["base_total"], 5);
        let root = &json["tree"];
        assert_eq!(root["n"], -1);
        let c0 = &root["c"][0];
        assert_eq!(json["names"][c0["n"].as_u64().unwrap() as usize], "f0");
        assert_eq!((c0["v"].as_u64(), c0["b"].as_u64()), (Some(10), Some(5)));
        let f1 = &c0["c"][0];
        assert_eq!((f1["v"].as_u64(), f1["b"].as_u64()), (Some(6), Some(3)));
        assert_eq!(f1["c"][0]["v"], 5);
        assert_eq!(c0["c"][1]["v"], 4);
        assert_eq!(json["nodes"], 5);
    }

    #[test]
    fn narrow_frames_are_merged_with_their_counts_kept() {
        // One wide frame and 100 narrow siblings of 1 sample each.
        let mut stacks: Vec<Weighted<Vec<u32>>> = vec![(vec![0, 1], 900, 0)];
        for i in 0..100 {
            stacks.push((vec![0, 2 + i], 1, 0));
        }
        let tree = Tree::build(stacks);
        let json: Value =
            serde_json::from_str(&tree.to_json(&names(102), Merged::default(), 0.005, false))
                .unwrap();
        let top = &json["tree"]["c"][0];
        let children = top["c"].as_array().unwrap();
        assert_eq!(children.len(), 2, "{children:?}");
        assert_eq!(children[1]["n"], -2);
        assert_eq!(children[1]["k"], 100);
        assert_eq!(children[1]["v"], 100);
        assert_eq!(json["merged_frames"], 100);
        assert_eq!(json["names"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn frames_the_daemon_merged_stay_merged_and_count_what_they_stand_for() {
        // f0;f1 900, and f0;[40 narrow frames] 60 as profilerd sends it (name 2).
        let stacks: Vec<Weighted<Vec<u32>>> = vec![(vec![0, 1], 900, 0), (vec![0, 2], 60, 0)];
        let tree = Tree::build(stacks);
        let frames = [0, 0, 40];
        let merged = Merged {
            frames: &frames,
            min: 7,
        };
        let mut names = names(2);
        names.push(daemon_api::history::merged_frame(40));
        let json: Value =
            serde_json::from_str(&tree.to_json(&names, merged, 0.001, false)).unwrap();
        let top = &json["tree"]["c"][0];
        assert_eq!(top["c"][1]["n"], -2, "{top}");
        assert_eq!(
            (top["c"][1]["v"].as_u64(), top["c"][1]["k"].as_u64()),
            (Some(60), Some(40))
        );
        assert_eq!(json["merged_frames"], 40);
        // The daemon's width, not the page's smaller one.
        assert_eq!(json["min_value"], 7);
    }

    #[test]
    fn the_width_rises_until_the_frame_cap_holds() {
        let stacks: Vec<Weighted<Vec<u32>>> = (0..(3 * MAX_NODES as u32))
            .map(|i| (vec![i], 1 + u64::from(i % 7), 0))
            .collect();
        let tree = Tree::build(stacks);
        let json: Value = serde_json::from_str(&tree.to_json(
            &names(3 * MAX_NODES),
            Merged::default(),
            0.0,
            false,
        ))
        .unwrap();
        let nodes = json["nodes"].as_u64().unwrap() as usize;
        assert!(nodes <= MAX_NODES, "{nodes}");
        assert!(json["min_value"].as_u64().unwrap() > 1);
        let sum: u64 = json["tree"]["c"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["v"].as_u64().unwrap())
            .sum();
        assert_eq!(sum, tree.total(), "merging keeps every sample");
    }
}
