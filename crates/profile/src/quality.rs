//! How good the unwound stacks are: per recording and per binary.

use std::collections::BTreeMap;

use crate::stack::StackEnd;

/// Counts of stack ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndCounts {
    /// Whole stacks.
    pub complete: u64,
    /// Whole thanks to splicing with the frame-pointer chain.
    pub spliced: u64,
    /// Ended in a truncation marker.
    pub truncated: u64,
    /// Ended at an address that could not be unwound.
    pub unknown: u64,
}

impl EndCounts {
    /// Count `n` stacks ending in `end` (ends that were not unwound are not counted).
    pub fn add(&mut self, end: StackEnd, n: u64) {
        match end {
            StackEnd::Complete => self.complete += n,
            StackEnd::Spliced => self.spliced += n,
            StackEnd::Truncated => self.truncated += n,
            StackEnd::Unknown => self.unknown += n,
            StackEnd::FramePointer | StackEnd::NoUserStack => {}
        }
    }

    /// Add the counts of `other`.
    pub fn merge(&mut self, other: &EndCounts) {
        self.complete += other.complete;
        self.spliced += other.spliced;
        self.truncated += other.truncated;
        self.unknown += other.unknown;
    }

    /// Stacks counted.
    pub fn total(&self) -> u64 {
        self.complete + self.spliced + self.truncated + self.unknown
    }

    /// "97.1% whole (95.0% unwound, 2.1% spliced), 2.0% truncated, 0.9% unknown".
    pub fn describe(&self) -> String {
        let total = self.total().max(1) as f64;
        let pct = |n: u64| 100.0 * n as f64 / total;
        format!(
            "{:.1}% whole ({:.1}% unwound to the first frame, {:.1}% spliced), {:.1}% truncated, {:.1}% unknown",
            pct(self.complete + self.spliced),
            pct(self.complete),
            pct(self.spliced),
            pct(self.truncated),
            pct(self.unknown)
        )
    }
}

/// Stack ends per recording and per binary (the binary where each stack stopped).
#[derive(Clone, Debug, Default)]
pub struct UnwindQuality {
    /// All stacks.
    pub overall: EndCounts,
    /// By the name of the binary holding the outermost unwound frame.
    pub by_binary: BTreeMap<String, EndCounts>,
}

impl UnwindQuality {
    /// Count `n` stacks of `binary` ending in `end` (ends that were not unwound are ignored).
    pub fn add(&mut self, binary: &str, end: StackEnd, n: u64) {
        if !end.is_unwound() {
            return;
        }
        self.overall.add(end, n);
        match self.by_binary.get_mut(binary) {
            Some(counts) => counts.add(end, n),
            None => {
                let mut counts = EndCounts::default();
                counts.add(end, n);
                self.by_binary.insert(binary.to_string(), counts);
            }
        }
    }

    /// Add the counts of `other`.
    pub fn merge(&mut self, other: &UnwindQuality) {
        self.overall.merge(&other.overall);
        for (binary, counts) in &other.by_binary {
            self.by_binary
                .entry(binary.clone())
                .or_default()
                .merge(counts);
        }
    }

    /// The binaries with the most incomplete stacks first.
    pub fn worst_binaries(&self, n: usize) -> Vec<(&str, &EndCounts)> {
        let mut v: Vec<_> = self
            .by_binary
            .iter()
            .map(|(k, c)| (k.as_str(), c))
            .collect();
        v.sort_by_key(|(_, c)| std::cmp::Reverse(c.truncated + c.unknown));
        v.retain(|(_, c)| c.truncated + c.unknown > 0);
        v.truncate(n);
        v
    }
}
