//! How good the unwound stacks are: per recording and per binary.

use std::collections::BTreeMap;

/// How one user stack ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackEnd {
    /// Reached the thread's first frame (`_start`, `clone`): the stack is whole.
    Complete,
    /// The copied stack ran out before the outermost frame; continued from the kernel's
    /// frame-pointer chain.
    Spliced,
    /// The copied stack ran out and nothing could continue it: ends in a truncation marker.
    Truncated,
    /// Unwinding hit an address it could not unwind (no unwind info, garbage, a bad rule).
    Unknown,
    /// No user registers or stack came with the sample (kernel thread, or the copy failed).
    NoUserStack,
}

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
    /// Count `n` stacks ending in `end`.
    pub fn add(&mut self, end: StackEnd, n: u64) {
        match end {
            StackEnd::Complete => self.complete += n,
            StackEnd::Spliced => self.spliced += n,
            StackEnd::Truncated => self.truncated += n,
            StackEnd::Unknown => self.unknown += n,
            StackEnd::NoUserStack => {}
        }
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
