//! Call trees built from stacks (a flame graph's frames, a function's callers or callees, a
//! diff of two ranges) and their bounded JSON: frames narrower than a minimum width are
//! merged, per parent, into one frame that says how many it stands for (as inferno's
//! `--minwidth` leaves them out, but with their samples kept), and the width is raised until
//! at most [`MAX_NODES`] frames are sent.

use std::fmt::Write as _;

/// Most frames one answer holds.
pub const MAX_NODES: usize = 6000;

/// The root's name id.
const ROOT: u32 = u32::MAX;

/// One frame of a tree.
#[derive(Debug)]
struct Node {
    name: u32,
    value: u64,
    base: u64,
    children: Vec<u32>,
}

/// A call tree: frame 0 is the root (all stacks).
#[derive(Debug)]
pub struct Tree {
    nodes: Vec<Node>,
}

/// One stack for [`Tree::build`]: frames (root first), its count, and its count on the other
/// side of a diff.
pub type Weighted<K> = (K, u64, u64);

impl Tree {
    /// The tree of `stacks` (name ids, root first). Siblings come in the order of their ids.
    pub fn build<K: AsRef<[u32]>>(mut stacks: Vec<Weighted<K>>) -> Tree {
        stacks.sort_unstable_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        let mut nodes = vec![Node {
            name: ROOT,
            value: 0,
            base: 0,
            children: Vec::new(),
        }];
        // The nodes of the previous stack's frames.
        let mut path: Vec<u32> = Vec::new();
        let mut previous: &[u32] = &[];
        for (key, value, base) in &stacks {
            let frames = key.as_ref();
            let common = frames
                .iter()
                .zip(previous)
                .take_while(|(a, b)| a == b)
                .count();
            path.truncate(common);
            for &name in &frames[common..] {
                let id = nodes.len() as u32;
                nodes.push(Node {
                    name,
                    value: 0,
                    base: 0,
                    children: Vec::new(),
                });
                let parent = path.last().copied().unwrap_or(0) as usize;
                nodes[parent].children.push(id);
                path.push(id);
            }
            for &n in path.iter().chain(std::iter::once(&0)) {
                nodes[n as usize].value += value;
                nodes[n as usize].base += base;
            }
            previous = frames;
        }
        Tree { nodes }
    }

    /// The root's count.
    pub fn total(&self) -> u64 {
        self.nodes[0].value
    }

    /// Frames kept at `min` (each frame at least `min` wide; the rest merged, one merged
    /// frame per parent).
    fn kept(&self, node: usize, min: u64) -> usize {
        let mut merged = false;
        let mut n = 1;
        for &c in &self.nodes[node].children {
            if self.nodes[c as usize].value >= min {
                n += self.kept(c as usize, min);
            } else {
                merged = true;
            }
        }
        n + merged as usize
    }

    /// The tree as JSON, frames narrower than `min_share` of the root merged (the width
    /// raised until at most [`MAX_NODES`] frames remain); `names` names the ids, `diff` adds
    /// each frame's count on the other side.
    pub fn to_json(&self, names: &[String], min_share: f64, diff: bool) -> String {
        let total = self.total();
        let mut min = ((total as f64 * min_share).ceil() as u64).max(1);
        while self.kept(0, min) > MAX_NODES {
            min = min.saturating_mul(2);
        }
        let mut out = Json {
            text: String::new(),
            used: Vec::new(),
            index: std::collections::HashMap::new(),
            nodes: 0,
            merged_frames: 0,
            diff,
        };
        out.text.push_str("{\"tree\":");
        out.node(self, 0, min);
        let names: Vec<&str> = out
            .used
            .iter()
            .map(|&i| names[i as usize].as_str())
            .collect();
        let _ = write!(
            out.text,
            ",\"names\":{},\"total\":{total},\"base_total\":{},\"min_value\":{min},\"nodes\":{},\"merged_frames\":{}}}",
            serde_json::to_string(&names).unwrap_or_else(|_| "[]".into()),
            self.nodes[0].base,
            out.nodes,
            out.merged_frames
        );
        out.text
    }
}

/// A tree being written as JSON.
struct Json {
    text: String,
    /// Name ids in the order of their first use (the answer's name table).
    used: Vec<u32>,
    index: std::collections::HashMap<u32, u32>,
    nodes: usize,
    merged_frames: usize,
    diff: bool,
}

impl Json {
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
    fn node(&mut self, tree: &Tree, node: usize, min: u64) {
        self.nodes += 1;
        let n = &tree.nodes[node];
        let name = self.name(n.name);
        let _ = write!(self.text, "{{\"n\":{name},\"v\":{}", n.value);
        if self.diff {
            let _ = write!(self.text, ",\"b\":{}", n.base);
        }
        let (mut small, mut small_value, mut small_base) = (0usize, 0u64, 0u64);
        let mut first = true;
        for &c in &n.children {
            let child = &tree.nodes[c as usize];
            if child.value < min {
                small += 1;
                small_value += child.value;
                small_base += child.base;
                continue;
            }
            self.text.push_str(if first { ",\"c\":[" } else { "," });
            first = false;
            self.node(tree, c as usize, min);
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
        let json: Value = serde_json::from_str(&tree.to_json(&names(4), 0.0, true)).unwrap();
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
        let json: Value = serde_json::from_str(&tree.to_json(&names(102), 0.005, false)).unwrap();
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
    fn the_width_rises_until_the_frame_cap_holds() {
        let stacks: Vec<Weighted<Vec<u32>>> = (0..(3 * MAX_NODES as u32))
            .map(|i| (vec![i], 1 + u64::from(i % 7), 0))
            .collect();
        let tree = Tree::build(stacks);
        let json: Value =
            serde_json::from_str(&tree.to_json(&names(3 * MAX_NODES), 0.0, false)).unwrap();
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
