//! The stacks of one range or file as the page's views read them: names interned in
//! alphabetical order (so that a tree built from sorted stacks lists siblings alphabetically,
//! as inferno draws them), each stack a sequence of name ids, root first, with its count.

use rustc_hash::FxHashMap;

/// Frames past this depth are cut (a stack deeper than this ends at its 512th frame): the
/// trees built from stacks are walked recursively.
pub const MAX_DEPTH: usize = 512;

/// What the daemon (or the file) said of the stacks.
#[derive(Clone, Debug, Default)]
pub struct About {
    /// Slices read (daemon).
    pub slices: u64,
    /// Sampling frequency, Hz (daemon; 0: unknown).
    pub frequency: u64,
    /// The event sampled on (daemon).
    pub event: String,
    /// Whether kernel frames are included (daemon).
    pub kernel: bool,
    /// "pprof" or "folded" (a file), or "profilerd".
    pub kind: String,
}

/// Stacks with interned names.
#[derive(Debug, Default)]
pub struct Stacks {
    /// Names, sorted.
    pub names: Vec<String>,
    /// Each stack's name ids, root first, and its count; sorted by ids.
    pub stacks: Vec<(Box<[u32]>, u64)>,
    /// The sum of the counts.
    pub total: u64,
    /// Whether each stack's root is the thread's command name (not a function).
    pub comm_root: bool,
    /// Stacks cut at [`MAX_DEPTH`].
    pub cut: u64,
    /// Where they come from.
    pub about: About,
    /// Of a bounded answer of profilerd (`minwidth`): by name id, the frames each merged
    /// frame stands for (0: a function); empty otherwise.
    pub merged: Vec<u64>,
    /// Of a bounded answer: the width profilerd applied, in counts (0 otherwise).
    pub min_width: u64,
}

/// Builds [`Stacks`]: names interned as they come, renumbered in order at the end.
struct Builder<'a> {
    ids: FxHashMap<&'a str, u32>,
    names: Vec<&'a str>,
    stacks: Vec<(Box<[u32]>, u64)>,
    total: u64,
    cut: u64,
}

impl<'a> Builder<'a> {
    fn new() -> Builder<'a> {
        Builder {
            ids: FxHashMap::default(),
            names: Vec::new(),
            stacks: Vec::new(),
            total: 0,
            cut: 0,
        }
    }

    fn add(&mut self, frames: impl Iterator<Item = &'a str>, count: u64) {
        let mut key = Vec::new();
        for name in frames {
            if key.len() == MAX_DEPTH {
                self.cut += 1;
                break;
            }
            let next = self.names.len() as u32;
            let id = *self.ids.entry(name).or_insert(next);
            if id == next {
                self.names.push(name);
            }
            key.push(id);
        }
        self.total += count;
        self.stacks.push((key.into_boxed_slice(), count));
    }

    fn finish(self, comm_root: bool, about: About) -> Stacks {
        let mut order: Vec<u32> = (0..self.names.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| self.names[a as usize].cmp(self.names[b as usize]));
        let mut rank = vec![0u32; order.len()];
        for (r, &id) in order.iter().enumerate() {
            rank[id as usize] = r as u32;
        }
        let mut stacks = self.stacks;
        for (key, _) in &mut stacks {
            for id in key.iter_mut() {
                *id = rank[*id as usize];
            }
        }
        // Sorted once here, so that the trees of the whole range sort a sorted list.
        stacks.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Stacks {
            names: order
                .iter()
                .map(|&id| self.names[id as usize].to_string())
                .collect(),
            stacks,
            total: self.total,
            comm_root,
            cut: self.cut,
            about,
            merged: Vec::new(),
            min_width: 0,
        }
    }
}

impl Stacks {
    /// Folded lines (`comm;outermost;…;leaf count`) as profilerd answers them; lines that are
    /// not folded stacks are skipped.
    pub fn from_folded(text: &str, about: About) -> Stacks {
        let mut builder = Builder::new();
        for line in text.lines() {
            let Some((stack, count)) = line.trim_end().rsplit_once(' ') else {
                continue;
            };
            let Ok(count) = count.parse::<u64>() else {
                continue;
            };
            builder.add(stack.split(';'), count);
        }
        builder.finish(true, about)
    }

    /// A bounded answer of profilerd (`/v1/folded?minwidth=`, its width `min_width` in
    /// counts): folded lines whose merged frames are named by
    /// [`daemon_api::history::merged_frame`].
    pub fn from_bounded(text: &str, about: About, min_width: u64) -> Stacks {
        let mut stacks = Stacks::from_folded(text, about);
        stacks.merged = stacks
            .names
            .iter()
            .map(|n| daemon_api::history::merged_frames_of(n).unwrap_or(0))
            .collect();
        stacks.min_width = min_width;
        stacks
    }

    /// The stacks of a profile read from a file.
    pub fn from_profile(profile: &profile::Profile, comm_root: bool, about: About) -> Stacks {
        let mut builder = Builder::new();
        for (frames, count) in profile.stacks() {
            builder.add(frames.iter().map(|&f| profile.name(f)), count);
        }
        builder.finish(comm_root, about)
    }

    /// The id of the function named `name`, if any stack holds it.
    pub fn id_of(&self, name: &str) -> Option<u32> {
        self.names
            .binary_search_by(|n| n.as_str().cmp(name))
            .ok()
            .map(|i| i as u32)
    }

    /// The frames of `stack` that are functions (without the command-name root).
    pub fn functions<'s>(&self, stack: &'s [u32]) -> &'s [u32] {
        if self.comm_root && !stack.is_empty() {
            &stack[1..]
        } else {
            stack
        }
    }

    /// Bytes held, roughly (for the cache's bound).
    pub fn bytes(&self) -> u64 {
        let names: usize = self.names.iter().map(|n| n.len() + 24).sum();
        let stacks: usize = self.stacks.iter().map(|(k, _)| 4 * k.len() + 24).sum();
        (names + stacks) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_lines_intern_sorted_names() {
        let s = Stacks::from_folded("b;main;z 3\na;main;y 2\nnot a line\n", About::default());
        assert_eq!(s.names, ["a", "b", "main", "y", "z"]);
        assert_eq!(s.total, 5);
        assert_eq!(s.stacks.len(), 2);
        // Sorted: a;main;y before b;main;z.
        assert_eq!(&*s.stacks[0].0, &[0, 2, 3]);
        assert_eq!(&*s.stacks[1].0, &[1, 2, 4]);
        assert_eq!(s.id_of("main"), Some(2));
        assert_eq!(s.id_of("nope"), None);
        assert_eq!(s.functions(&s.stacks[1].0), &[2, 4]);
    }

    #[test]
    fn deep_stacks_are_cut() {
        let line = format!("{} 1\n", vec!["f"; MAX_DEPTH + 5].join(";"));
        let s = Stacks::from_folded(&line, About::default());
        assert_eq!(s.stacks[0].0.len(), MAX_DEPTH);
        assert_eq!(s.cut, 1);
    }
}
