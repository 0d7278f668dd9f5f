//! Folded stacks built from interned ids, within a byte bound: every name is sanitized and
//! kept once, a stack is a sequence of name ids, and the size of the text it will render to is
//! counted as each new stack is added, so that a query stops at its bound before it holds
//! more than about that much (not after turning each stack into text: depth × name length).

use rustc_hash::FxHashMap;

use crate::access::Visibility;
use crate::filter::Filter;
use crate::measure::visible_frames;
use crate::slice::{Slice, SliceStack};

/// A line's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// CPU time, ns ([`SliceStack::cpu_ns`]).
    pub cpu_ns: u64,
    /// Samples.
    pub samples: u64,
}

/// The answer would render to more than the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBound;

/// Folded stacks being built.
#[derive(Debug)]
pub struct Folding {
    names: Vec<Box<str>>,
    ids: FxHashMap<Box<str>, u32>,
    lines: FxHashMap<Box<[u32]>, Totals>,
    /// Bytes the lines will render to (each line counted with 22 bytes for its count).
    bytes: u64,
    max_bytes: u64,
    key: Vec<u32>,
}

/// Bytes counted for a line besides its names and separators: a space, up to 20 digits and a
/// newline.
const LINE_EXTRA: u64 = 22;

impl Folding {
    /// Nothing yet; adding stops with [`OverBound`] past `max_bytes` of text.
    pub fn new(max_bytes: u64) -> Folding {
        Folding {
            names: Vec::new(),
            ids: FxHashMap::default(),
            lines: FxHashMap::default(),
            bytes: 0,
            max_bytes,
            key: Vec::new(),
        }
    }

    /// Bytes the text will take (an estimate from above).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.into());
        self.ids.insert(name.into(), id);
        id
    }

    /// Add the stacks of `slice` that `filter` and `visibility` admit (kernel frames removed
    /// unless everything is visible); returns their samples, or [`OverBound`] as soon as the
    /// text would pass the bound.
    pub fn add_slice(
        &mut self,
        slice: &Slice,
        filter: &Filter,
        visibility: Visibility,
    ) -> Result<u64, OverBound> {
        // The slice's names sanitized and interned once, when first used; its command names
        // too (by the text the slice holds: most stacks share a few).
        let mut remap: Vec<Option<u32>> = vec![None; slice.names.len()];
        let mut comms: FxHashMap<(Option<&str>, u32), u32> = FxHashMap::default();
        let unknown = self.intern("[unknown]");
        let mut samples = 0;
        for s in &slice.stacks {
            if !filter.admits(s, visibility) {
                continue;
            }
            let (frames, marker) = visible_frames(s, &slice.names, visibility);
            let mut key = std::mem::take(&mut self.key);
            key.clear();
            let comm_key = (s.comm.as_deref(), if s.comm.is_some() { 0 } else { s.pid });
            let comm = match comms.get(&comm_key) {
                Some(&id) => id,
                None => {
                    let id = self.intern(&comm_of(s));
                    comms.insert(comm_key, id);
                    id
                }
            };
            key.push(comm);
            for &f in frames.iter().chain(&marker) {
                let id = match remap.get(f as usize) {
                    Some(Some(id)) => *id,
                    Some(None) => {
                        let id = self.intern(&profile::sanitize_frame(&slice.names[f as usize]));
                        remap[f as usize] = Some(id);
                        id
                    }
                    None => unknown,
                };
                key.push(id);
            }
            if frames.is_empty() && marker.is_none() {
                key.push(unknown);
            }
            let added = self.add(&key, s);
            self.key = key;
            added?;
            samples += s.count;
        }
        Ok(samples)
    }

    fn add(&mut self, key: &[u32], s: &SliceStack) -> Result<(), OverBound> {
        if let Some(t) = self.lines.get_mut(key) {
            t.cpu_ns += s.cpu_ns;
            t.samples += s.count;
            return Ok(());
        }
        let text: u64 = key
            .iter()
            .map(|&id| self.names[id as usize].len() as u64 + 1)
            .sum();
        self.bytes += text + LINE_EXTRA;
        if self.bytes > self.max_bytes {
            return Err(OverBound);
        }
        self.lines.insert(
            key.into(),
            Totals {
                cpu_ns: s.cpu_ns,
                samples: s.count,
            },
        );
        Ok(())
    }

    /// The lines as name ids (command name first) with their totals, in no order.
    pub fn keyed(&self) -> impl Iterator<Item = (&[u32], Totals)> + '_ {
        self.lines.iter().map(|(key, totals)| (&key[..], *totals))
    }

    /// Name `id` (of [`Folding::keyed`]'s lines), sanitized.
    pub fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    /// The lines as text (`comm;outermost;…;leaf`) with their totals, sorted by text.
    pub fn lines(&self) -> Vec<(String, Totals)> {
        let mut out: Vec<(String, Totals)> = self
            .lines
            .iter()
            .map(|(key, totals)| {
                let mut line = String::new();
                for (i, &id) in key.iter().enumerate() {
                    if i > 0 {
                        line.push(';');
                    }
                    line.push_str(&self.names[id as usize]);
                }
                (line, *totals)
            })
            .collect();
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// The root frame of a stack: its command name (as profctl record writes it), sanitized.
pub fn comm_of(s: &SliceStack) -> String {
    match &s.comm {
        Some(c) => profile::sanitize_frame(c).into_owned(),
        None if s.pid == 0 => "swapper".to_string(),
        None => format!("[pid {}]", s.pid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slice::tests::example;

    #[test]
    fn the_bound_stops_adding_before_the_text_is_built() {
        let slice = example(0);
        let mut all = Folding::new(u64::MAX);
        all.add_slice(&slice, &Filter::default(), Visibility::All)
            .unwrap();
        let text: u64 = all
            .lines()
            .iter()
            .map(|(l, t)| format!("{l} {}\n", t.samples).len() as u64)
            .sum();
        assert!(all.bytes() >= text, "{} < {text}", all.bytes());
        let mut small = Folding::new(all.bytes() - 1);
        assert_eq!(
            small.add_slice(&slice, &Filter::default(), Visibility::All),
            Err(OverBound)
        );
        // The same slice twice adds counts, not lines.
        let before = all.bytes();
        all.add_slice(&slice, &Filter::default(), Visibility::All)
            .unwrap();
        assert_eq!(all.bytes(), before);
    }
}
