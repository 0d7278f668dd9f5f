//! Symbolized stacks with their counts.

use std::collections::HashMap;
use std::io::Write;

use rustc_hash::FxBuildHasher;

use crate::folded::sanitize_frame;
use crate::svg::{self, SvgOptions};
use crate::ProfileError;

/// An interned frame name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FrameId(u32);

/// Stacks of named frames (root first; by convention the thread's comm is the root) and counts.
#[derive(Debug, Default)]
pub struct Profile {
    names: Vec<String>,
    ids: HashMap<String, FrameId, FxBuildHasher>,
    stacks: HashMap<Vec<FrameId>, u64, FxBuildHasher>,
    total: u64,
}

impl Profile {
    /// An empty profile.
    pub fn new() -> Profile {
        Profile::default()
    }

    /// The id of frame `name` (sanitized for the folded format).
    pub fn intern(&mut self, name: &str) -> FrameId {
        let name = sanitize_frame(name);
        if let Some(&id) = self.ids.get(name.as_ref()) {
            return id;
        }
        let id = FrameId(self.names.len() as u32);
        self.names.push(name.to_string());
        self.ids.insert(name.into_owned(), id);
        id
    }

    /// The name of `id`.
    pub fn name(&self, id: FrameId) -> &str {
        &self.names[id.0 as usize]
    }

    /// Add `count` samples of `stack` (root first).
    pub fn add(&mut self, stack: &[FrameId], count: u64) {
        self.total += count;
        if let Some(c) = self.stacks.get_mut(stack) {
            *c += count;
        } else {
            self.stacks.insert(stack.to_vec(), count);
        }
    }

    /// Add every stack of `other` to this profile.
    pub fn merge(&mut self, other: &Profile) {
        let mut stack = Vec::new();
        for (frames, count) in other.stacks() {
            stack.clear();
            stack.extend(frames.iter().map(|&id| self.intern(other.name(id))));
            self.add(&stack, count);
        }
    }

    /// The names and counts of the `n` frames with the most samples of their own (leaf
    /// frames), most first.
    pub fn hottest(&self, n: usize) -> Vec<(&str, u64)> {
        let mut self_counts: HashMap<FrameId, u64, FxBuildHasher> = HashMap::default();
        for (stack, &count) in &self.stacks {
            if let Some(&leaf) = stack.last() {
                *self_counts.entry(leaf).or_default() += count;
            }
        }
        let mut v: Vec<(&str, u64)> = self_counts
            .into_iter()
            .map(|(id, count)| (self.name(id), count))
            .collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v.truncate(n);
        v
    }

    /// Samples in the profile.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Distinct stacks.
    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    /// Every stack with its count, in no particular order.
    pub fn stacks(&self) -> impl Iterator<Item = (&[FrameId], u64)> {
        self.stacks.iter().map(|(s, &c)| (s.as_slice(), c))
    }

    /// Folded lines (`a;b;c 12`), sorted, as flamegraph tools expect.
    pub fn folded_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .stacks
            .iter()
            .map(|(stack, count)| {
                let mut line = String::new();
                for (i, id) in stack.iter().enumerate() {
                    if i > 0 {
                        line.push(';');
                    }
                    line.push_str(self.name(*id));
                }
                line.push(' ');
                line.push_str(&count.to_string());
                line
            })
            .collect();
        lines.sort_unstable();
        lines
    }

    /// Write the folded stacks.
    pub fn write_folded(&self, mut out: impl Write) -> Result<(), ProfileError> {
        let write = |source| ProfileError::Write {
            what: "folded stacks",
            source,
        };
        for line in self.folded_lines() {
            writeln!(out, "{line}").map_err(write)?;
        }
        out.flush().map_err(write)
    }

    /// Write an SVG flamegraph.
    pub fn write_svg(&self, out: impl Write, options: &SvgOptions) -> Result<(), ProfileError> {
        if self.total == 0 {
            return Err(ProfileError::Empty);
        }
        svg::render(&self.folded_lines(), out, options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_profile() -> Profile {
        let mut p = Profile::new();
        let (comm, main, a, b) = (
            p.intern("app"),
            p.intern("main"),
            p.intern("a"),
            p.intern("b;c"),
        );
        p.add(&[comm, main, a], 3);
        p.add(&[comm, main, b], 1);
        p.add(&[comm, main, a], 2);
        p
    }

    #[test]
    fn merging_profiles_adds_counts_by_name() {
        let mut a = sample_profile();
        let mut b = Profile::new();
        let (x, main, a_frame) = (b.intern("app"), b.intern("main"), b.intern("a"));
        b.add(&[x, main, a_frame], 4);
        a.merge(&b);
        assert_eq!(a.total(), 10);
        assert_eq!(a.folded_lines(), vec!["app;main;a 9", "app;main;b:c 1"]);
        assert_eq!(a.hottest(1), vec![("a", 9)]);
    }

    #[test]
    fn folded_output_merges_and_sorts() {
        let p = sample_profile();
        assert_eq!(p.total(), 6);
        assert_eq!(p.folded_lines(), vec!["app;main;a 5", "app;main;b:c 1"]);
        let mut out = Vec::new();
        p.write_folded(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "app;main;a 5\napp;main;b:c 1\n"
        );
    }

    #[test]
    fn svg_names_the_frames_and_the_subtitle() {
        let p = sample_profile();
        let mut out = Vec::new();
        let options = SvgOptions {
            title: "test".into(),
            subtitle: Some("cpu-clock at 999 Hz".into()),
            ..SvgOptions::default()
        };
        p.write_svg(&mut out, &options).unwrap();
        let svg = String::from_utf8(out).unwrap();
        assert!(svg.starts_with("<?xml"), "{}", &svg[..100]);
        assert!(
            svg.contains(">main<") || svg.contains("main ("),
            "frame names appear"
        );
        assert!(svg.contains("cpu-clock at 999 Hz"));
        assert!(matches!(
            Profile::new().write_svg(Vec::new(), &options),
            Err(ProfileError::Empty)
        ));
    }
}
