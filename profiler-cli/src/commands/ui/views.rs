//! What the page shows of one range's stacks, as JSON: the flame graph (whole, or focused on
//! a function: its callees merged over every call site), a search's matched share, the top
//! functions (self and total), a function's sandwich (callers above, callees below) and a
//! diff against another range. Each narrowed by the function filter: only stacks through it.

use std::fmt::Write as _;

use serde_json::json;

use crate::commands::ui::stacks::Stacks;
use crate::commands::ui::tree::{Merged, Tree, Weighted};

/// Rows of the top table at most.
pub const MAX_ROWS: usize = 2000;

/// Which stacks of a range every view reads.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    /// The stacks.
    pub stacks: &'a Stacks,
    /// Only stacks through this function (its name id); `Err` when no stack holds it.
    pub function: Option<Result<u32, ()>>,
}

impl<'a> View<'a> {
    /// `stacks`, narrowed to those through the function named `function`.
    pub fn new(stacks: &'a Stacks, function: Option<&str>) -> View<'a> {
        View {
            stacks,
            function: function.map(|f| stacks.id_of(f).ok_or(())),
        }
    }

    /// The stacks selected, with their counts.
    pub fn selected(&self) -> impl Iterator<Item = (&'a [u32], u64)> + '_ {
        let stacks = self.stacks;
        let function = self.function;
        stacks.stacks.iter().filter_map(move |(key, count)| {
            let keep = match function {
                None => true,
                Some(Err(())) => false,
                Some(Ok(f)) => stacks.functions(key).contains(&f),
            };
            keep.then_some((&key[..], *count))
        })
    }

    /// Samples selected.
    pub fn total(&self) -> u64 {
        match self.function {
            None => self.stacks.total,
            Some(_) => self.selected().map(|(_, c)| c).sum(),
        }
    }
}

/// The flame graph of `view`.
pub fn flame(view: &View<'_>, min_share: f64) -> String {
    let stacks: Vec<Weighted<&[u32]>> = view.selected().map(|(k, c)| (k, c, 0)).collect();
    let merged = Merged {
        frames: &view.stacks.merged,
        min: view.stacks.min_width,
    };
    Tree::build(stacks).to_json(&view.stacks.names, merged, min_share, false)
}

/// Where `f` first occurs among the functions of `key` (the outermost call).
fn first_call(stacks: &Stacks, key: &[u32], f: u32) -> Option<usize> {
    let skip = key.len() - stacks.functions(key).len();
    key[skip..].iter().position(|&x| x == f).map(|i| i + skip)
}

/// The callees of the function `f` (its id), merged over every call site: a tree whose root
/// frame is `f`.
fn callees<'a>(view: &View<'a>, f: u32) -> Tree<&'a [u32]> {
    let stacks: Vec<Weighted<&[u32]>> = view
        .selected()
        .filter_map(|(k, c)| first_call(view.stacks, k, f).map(|i| (&k[i..], c, 0)))
        .collect();
    Tree::build(stacks)
}

/// The callers of `f`, merged over every call: a tree whose root frame is `f`, its children
/// its callers, theirs their callers.
fn callers(view: &View<'_>, f: u32) -> Tree<Vec<u32>> {
    let stacks: Vec<Weighted<Vec<u32>>> = view
        .selected()
        .filter_map(|(k, c)| {
            let i = first_call(view.stacks, k, f)?;
            Some((k[..=i].iter().rev().copied().collect(), c, 0))
        })
        .collect();
    Tree::build(stacks)
}

/// The flame graph focused on the function `name`: its callees from every call site.
pub fn focus(view: &View<'_>, name: &str, min_share: f64) -> Option<String> {
    let f = view.stacks.id_of(name)?;
    Some(callees(view, f).to_json(&view.stacks.names, Merged::default(), min_share, false))
}

/// The samples whose stack has a frame containing `query` and their share, percent.
pub fn search(view: &View<'_>, query: &str) -> String {
    let matches: Vec<bool> = view
        .stacks
        .names
        .iter()
        .map(|n| n.contains(query))
        .collect();
    let (mut matched, mut total) = (0u64, 0u64);
    for (key, count) in view.selected() {
        total += count;
        if key.iter().any(|&f| matches[f as usize]) {
            matched += count;
        }
    }
    let functions = matches.iter().filter(|&&m| m).count();
    json!({
        "query": query,
        "matched": matched,
        "total": total,
        "percent": if total == 0 { 0.0 } else { 100.0 * matched as f64 / total as f64 },
        "functions": functions,
    })
    .to_string()
}

/// Self and total samples of each function (each sample counted once per function, however
/// deep the recursion), the `limit` first by `by_total` or by self.
pub fn top(view: &View<'_>, by_total: bool, limit: usize) -> String {
    let n = view.stacks.names.len();
    let (mut own, mut all) = (vec![0u64; n], vec![0u64; n]);
    // The stack a name was last counted in (a generation, not a set per stack).
    let mut seen = vec![usize::MAX; n];
    let mut samples = 0;
    for (i, (key, count)) in view.selected().enumerate() {
        samples += count;
        let functions = view.stacks.functions(key);
        for &f in functions {
            if seen[f as usize] != i {
                seen[f as usize] = i;
                all[f as usize] += count;
            }
        }
        if let Some(&leaf) = functions.last() {
            own[leaf as usize] += count;
        }
    }
    let mut rows: Vec<usize> = (0..n).filter(|&f| all[f] > 0).collect();
    let key = |f: usize| {
        if by_total {
            (all[f], own[f])
        } else {
            (own[f], all[f])
        }
    };
    rows.sort_by(|&a, &b| key(b).cmp(&key(a)).then(a.cmp(&b)));
    let functions = rows.len();
    rows.truncate(limit.min(MAX_ROWS));
    let mut out = String::from("{\"rows\":[");
    for (i, &f) in rows.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(
            out,
            "[{},{},{}]",
            serde_json::to_string(&view.stacks.names[f]).unwrap_or_default(),
            own[f],
            all[f]
        );
    }
    let _ = write!(
        out,
        "],\"total\":{samples},\"functions\":{functions},\"by\":\"{}\"}}",
        if by_total { "total" } else { "self" }
    );
    out
}

/// The sandwich of the function `name`: its callers (a tree rooted at it, callers as
/// children) and its callees, with its self and total samples; None when no stack has it.
pub fn sandwich(view: &View<'_>, name: &str, min_share: f64) -> Option<String> {
    let f = view.stacks.id_of(name)?;
    let up = callers(view, f);
    let down = callees(view, f);
    let mut own = 0;
    for (key, count) in view.selected() {
        if view.stacks.functions(key).last() == Some(&f) {
            own += count;
        }
    }
    let names = &view.stacks.names;
    Some(format!(
        "{{\"function\":{},\"self\":{own},\"total\":{},\"samples\":{},\"callers\":{},\"callees\":{}}}",
        serde_json::to_string(name).unwrap_or_default(),
        down.total(),
        view.total(),
        up.to_json(names, Merged::default(), min_share, false),
        down.to_json(names, Merged::default(), min_share, false)
    ))
}

/// The flame graph of `after` with each frame's count in `before` too (`b`): the page
/// compares shares of each side's total (grown red, shrunk blue). Frames are as wide as
/// `after` has them.
pub fn diff(after: &View<'_>, before: &View<'_>, min_share: f64) -> String {
    // Both sides' names in one sorted table.
    let (a, b) = (&after.stacks.names, &before.stacks.names);
    let mut names: Vec<String> = Vec::with_capacity(a.len() + b.len());
    let (mut map_a, mut map_b) = (vec![0u32; a.len()], vec![0u32; b.len()]);
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let id = names.len() as u32;
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x == y => {
                (map_a[i], map_b[j]) = (id, id);
                names.push(x.clone());
                (i, j) = (i + 1, j + 1);
            }
            (Some(x), Some(y)) if x < y => {
                map_a[i] = id;
                names.push(x.clone());
                i += 1;
            }
            (Some(x), None) => {
                map_a[i] = id;
                names.push(x.clone());
                i += 1;
            }
            (_, Some(y)) => {
                map_b[j] = id;
                names.push(y.clone());
                j += 1;
            }
            (None, None) => unreachable!("the loop ends first"),
        }
    }
    let remap = |key: &[u32], map: &[u32]| key.iter().map(|&f| map[f as usize]).collect();
    let mut stacks: Vec<Weighted<Vec<u32>>> = after
        .selected()
        .map(|(k, c)| (remap(k, &map_a), c, 0))
        .collect();
    stacks.extend(before.selected().map(|(k, c)| (remap(k, &map_b), 0, c)));
    Tree::build(stacks).to_json(&names, Merged::default(), min_share, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::ui::stacks::About;
    use serde_json::Value;

    fn stacks(text: &str) -> Stacks {
        Stacks::from_folded(text, About::default())
    }

    const SPLIT: &str = "split;main;work;hot_a 60\nsplit;main;work;mid;hot_b 30\nsplit;main;hot_c 10\nburner;main;child_hot 100\n";

    #[test]
    fn top_counts_self_and_total_without_the_command_name() {
        let s = stacks(SPLIT);
        let v: Value = serde_json::from_str(&top(&View::new(&s, None), false, 10)).unwrap();
        assert_eq!(v["total"], 200);
        assert_eq!(v["rows"][0], json!(["child_hot", 100, 100]));
        let by_total: Value = serde_json::from_str(&top(&View::new(&s, None), true, 1)).unwrap();
        assert_eq!(by_total["rows"][0], json!(["main", 0, 200]));
        assert!(!top(&View::new(&s, None), false, 100).contains("\"split\""));
        // Narrowed to the stacks through `work`.
        let v: Value = serde_json::from_str(&top(&View::new(&s, Some("work")), false, 10)).unwrap();
        assert_eq!(v["total"], 90);
        assert_eq!(v["rows"][0], json!(["hot_a", 60, 60]));
    }

    #[test]
    fn search_share_and_function_filter() {
        let s = stacks(SPLIT);
        let v: Value = serde_json::from_str(&search(&View::new(&s, None), "hot_")).unwrap();
        assert_eq!(
            (v["matched"].as_u64(), v["total"].as_u64()),
            (Some(100), Some(200))
        );
        assert_eq!(v["percent"], 50.0);
        let none: Value =
            serde_json::from_str(&search(&View::new(&s, Some("nowhere")), "hot_")).unwrap();
        assert_eq!(none["total"], 0);
    }

    #[test]
    fn sandwich_names_callers_and_callees() {
        let s = stacks(SPLIT);
        let v: Value =
            serde_json::from_str(&sandwich(&View::new(&s, None), "work", 0.0).unwrap()).unwrap();
        assert_eq!(
            (v["self"].as_u64(), v["total"].as_u64()),
            (Some(0), Some(90))
        );
        let name = |tree: &Value, node: &Value| {
            tree["names"][node["n"].as_u64().unwrap() as usize]
                .as_str()
                .unwrap()
                .to_string()
        };
        let up = &v["callers"];
        let work = &up["tree"]["c"][0];
        assert_eq!(name(up, work), "work");
        assert_eq!(name(up, &work["c"][0]), "main");
        assert_eq!(name(up, &work["c"][0]["c"][0]), "split");
        let down = &v["callees"];
        let work = &down["tree"]["c"][0];
        let callees: Vec<String> = work["c"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| name(down, c))
            .collect();
        assert_eq!(callees, ["hot_a", "mid"]);
        assert!(sandwich(&View::new(&s, None), "absent", 0.0).is_none());
        let focused: Value =
            serde_json::from_str(&focus(&View::new(&s, None), "main", 0.0).unwrap()).unwrap();
        assert_eq!(focused["total"], 200, "main merged over both programs");
    }

    #[test]
    fn diff_carries_both_sides() {
        let after = stacks("split;main;work;hot_a 60\nsplit;main;hot_c 40\n");
        let before = stacks("burner;main;child_hot 50\nsplit;main;hot_c 50\n");
        let v: Value = serde_json::from_str(&diff(
            &View::new(&after, None),
            &View::new(&before, None),
            0.0,
        ))
        .unwrap();
        assert_eq!(
            (v["total"].as_u64(), v["base_total"].as_u64()),
            (Some(100), Some(100))
        );
        let names: Vec<&str> = v["names"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        let roots = v["tree"]["c"].as_array().unwrap();
        // burner is only before: no width; merged, its count before kept.
        let merged = roots.iter().find(|r| r["n"] == -2).unwrap();
        assert_eq!(
            (merged["v"].as_u64(), merged["b"].as_u64()),
            (Some(0), Some(50))
        );
        assert!(!names.contains(&"burner"));
        let split = roots
            .iter()
            .find(|r| names[r["n"].as_u64().unwrap() as usize] == "split")
            .unwrap();
        assert_eq!(
            (split["v"].as_u64(), split["b"].as_u64()),
            (Some(100), Some(50))
        );
    }
}
