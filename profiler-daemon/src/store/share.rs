//! The per-uid share of a slice, so that one user's huge slices (many distinct deep stacks
//! with long names) cannot shrink every other user's history.
//!
//! Retention keeps `storage.max_bytes` of slices, and a slice lives as a file until its hour's
//! roll-up replaces it: for an hour of slices (or all of `max_age`, when shorter) to fit, a
//! slice may take `max_bytes × slice length / that span` bytes, its budget ([`slice_budget`]). When a closed slice's file would be larger than its budget, the budget
//! is shared out between the uids in the slice, max-min fair: a uid that needs less than an
//! equal part keeps all of it, the rest is split equally among the others, and no uid is cut
//! below `storage.max_share_per_uid` percent of the budget. A uid over its part loses its
//! stacks with the fewest samples first until it fits; what it lost is counted per uid
//! (`uid_drops.rs`). uid 0 is a uid like the others (root's processes keep the same
//! guaranteed part, no more); stacks of an unknown uid share one part.
//!
//! A uid's part is estimated from the uncompressed size of what it adds to the file (its
//! stacks, and the text of every name its stacks use, each name charged to every uid that
//! uses it: alone, it would need it), scaled by the slice's own compression ratio.

use std::collections::HashMap;

use crate::slice::{Slice, SliceStack};

/// Estimated bytes one stack adds to a slice file besides its frames and strings: its sample
/// entry, two values and its numeric labels.
const STACK_BYTES: u64 = 48;

/// Estimated bytes one frame of a stack adds (a location id).
const FRAME_BYTES: u64 = 2;

/// Estimated bytes one name adds besides its text: its function, location and string-table
/// entries.
const NAME_BYTES: u64 = 24;

/// The bytes a slice of `slice_ns` may take for `max_bytes` to hold `span_ns` of slices.
pub fn slice_budget(max_bytes: u64, span_ns: u64, slice_ns: u64) -> u64 {
    let budget = u128::from(max_bytes) * u128::from(slice_ns) / u128::from(span_ns.max(1));
    budget.min(u128::from(u64::MAX)) as u64
}

/// The bytes of `slice`'s file (as [`Slice::encode`] writes it), counted without keeping
/// them. (A faster gzip level is no cheaper for long names, and measures them half as large
/// again.)
pub fn file_bytes(slice: &Slice) -> u64 {
    use std::io::Write;
    /// Counts what is written, keeps nothing.
    struct Count(u64);
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let raw = prost::Message::encode_to_vec(&slice.to_pprof());
    let mut gz = flate2::write::GzEncoder::new(Count(0), flate2::Compression::default());
    // Writing to a counter cannot fail.
    let _ = gz.write_all(&raw);
    gz.finish().map_or(raw.len() as u64, |c| c.0)
}

/// What one uid lost to the share in one slice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UidDrop {
    /// The uid (None: stacks whose uid was not known).
    pub uid: Option<u32>,
    /// Stacks dropped.
    pub stacks: u64,
    /// Samples those stacks held.
    pub samples: u64,
    /// Estimated bytes of the slice file they would have taken.
    pub bytes: u64,
}

/// One uid's stacks in a slice and their estimated bytes.
#[derive(Default)]
struct UidPart {
    /// Indices into the slice's stacks.
    stacks: Vec<usize>,
    /// Uses of each name by these stacks.
    names: HashMap<u32, u32>,
    /// Estimated bytes (uncompressed).
    bytes: u64,
}

impl UidPart {
    fn add(&mut self, index: usize, stack: &SliceStack, names: &[String]) {
        self.stacks.push(index);
        self.bytes += stack_bytes(stack);
        for &f in &stack.frames {
            let uses = self.names.entry(f).or_insert(0);
            if *uses == 0 {
                self.bytes += name_bytes(names, f);
            }
            *uses += 1;
        }
    }

    fn remove(&mut self, stack: &SliceStack, names: &[String]) {
        self.bytes = self.bytes.saturating_sub(stack_bytes(stack));
        for f in &stack.frames {
            if let Some(uses) = self.names.get_mut(f) {
                *uses -= 1;
                if *uses == 0 {
                    self.names.remove(f);
                    self.bytes = self.bytes.saturating_sub(name_bytes(names, *f));
                }
            }
        }
    }
}

/// Estimated bytes of `stack` without its names' text.
fn stack_bytes(stack: &SliceStack) -> u64 {
    let text = stack.comm.as_ref().map_or(0, String::len)
        + stack.cgroup.as_ref().map_or(0, String::len)
        + stack.ancestors.len() * 6;
    STACK_BYTES + FRAME_BYTES * stack.frames.len() as u64 + text as u64
}

/// Estimated bytes of name `f`.
fn name_bytes(names: &[String], f: u32) -> u64 {
    names.get(f as usize).map_or(0, String::len) as u64 + NAME_BYTES
}

/// Keep `slice` within `budget` bytes of file by the share (see the module's comment):
/// `share_percent` of the budget is what each uid keeps whatever others do; `file_bytes`
/// measures a slice's file (called at most once, only when the estimate is over the budget).
/// Returns what each uid lost, none when the slice fits.
pub fn apply(
    slice: &mut Slice,
    budget: u64,
    share_percent: u8,
    file_bytes: impl FnOnce(&Slice) -> u64,
) -> Vec<UidDrop> {
    let mut parts: HashMap<Option<u32>, UidPart> = HashMap::new();
    for (i, stack) in slice.stacks.iter().enumerate() {
        parts
            .entry(stack.uid)
            .or_default()
            .add(i, stack, &slice.names);
    }
    let estimated: u64 = parts.values().map(|p| p.bytes).sum();
    if estimated <= budget {
        return Vec::new();
    }
    let file = file_bytes(slice).max(1);
    if file <= budget {
        return Vec::new();
    }
    // The budget in estimated bytes, as this slice compresses.
    let scaled = (u128::from(budget) * u128::from(estimated) / u128::from(file)) as u64;
    let floor = scaled / 100 * u64::from(share_percent);
    let level = water_level(parts.values().map(|p| p.bytes).collect(), scaled).max(floor);
    let mut drops = Vec::new();
    let mut keep = vec![true; slice.stacks.len()];
    for (&uid, part) in parts.iter_mut().filter(|(_, p)| p.bytes > level) {
        let mut order = std::mem::take(&mut part.stacks);
        // The fewest samples first; of those, the costliest.
        order.sort_by_key(|&i| {
            let s = &slice.stacks[i];
            (s.count, std::cmp::Reverse(stack_bytes(s)))
        });
        let before = part.bytes;
        let mut drop = UidDrop {
            uid,
            ..UidDrop::default()
        };
        for i in order {
            if part.bytes <= level {
                break;
            }
            part.remove(&slice.stacks[i], &slice.names);
            keep[i] = false;
            drop.stacks += 1;
            drop.samples += slice.stacks[i].count;
        }
        drop.bytes = ((before - part.bytes) as u128 * u128::from(file)
            / u128::from(estimated.max(1))) as u64;
        drops.push(drop);
    }
    let mut keep = keep.into_iter();
    slice.stacks.retain(|_| keep.next().unwrap_or(true));
    forget_unused_names(slice);
    drops.sort_by_key(|d| d.uid);
    drops
}

/// The level no uid may pass for `parts` (estimated bytes per uid) to fit `budget`, max-min
/// fair: parts under it are kept whole, the others cut to it. `u64::MAX` when all fit.
fn water_level(mut parts: Vec<u64>, budget: u64) -> u64 {
    parts.sort_unstable();
    let mut left = budget;
    let mut n = parts.len() as u64;
    for part in parts {
        if part.saturating_mul(n) > left {
            return left / n;
        }
        left -= part;
        n -= 1;
    }
    u64::MAX
}

/// Drop the names no stack of `slice` uses any more (they would still be written).
fn forget_unused_names(slice: &mut Slice) {
    let mut used = vec![false; slice.names.len()];
    for stack in &slice.stacks {
        for &f in &stack.frames {
            if let Some(u) = used.get_mut(f as usize) {
                *u = true;
            }
        }
    }
    let mut new_index = vec![0u32; used.len()];
    let mut names = Vec::with_capacity(slice.names.len());
    for (i, name) in std::mem::take(&mut slice.names).into_iter().enumerate() {
        if used[i] {
            new_index[i] = names.len() as u32;
            names.push(name);
        }
    }
    slice.names = names;
    for stack in &mut slice.stacks {
        for f in &mut stack.frames {
            *f = new_index.get(*f as usize).copied().unwrap_or(0);
        }
    }
}

#[cfg(test)]
#[path = "share_tests.rs"]
mod tests;
