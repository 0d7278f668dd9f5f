//! The per-uid share of a slice, so that one user's huge slices (many distinct deep stacks
//! with long names) cannot shrink every other user's history.
//!
//! Retention keeps `storage.max_bytes` of files. A slice lives as a file until its hour's
//! roll-up replaces it, and two hours of slices may be on disk (the hour being filled, the one
//! waiting for its roll-up); the roll-ups of `max_age` take the other half of the bytes
//! (`rollup_share.rs`). So a slice may take a quarter of `max_bytes` × slice length / an hour
//! (or `max_age`, when shorter), its budget ([`slice_budget`], `Store::apply_share`). When a
//! closed slice's file would be larger than its budget, the budget
//! is shared out between the uids in the slice, max-min fair: a uid that needs less than an
//! equal part keeps all of it, the rest is split equally among the others, and no uid is cut
//! below `storage.max_share_per_uid` percent of the budget. A uid over its part loses its
//! stacks with the fewest samples first until it fits; what it lost is counted per uid
//! (`uid_drops.rs`). uid 0 is a uid like the others (root's processes keep the same
//! guaranteed part, no more); stacks of an unknown uid share one part.
//!
//! A stack counts against its process's real uid ([`SliceStack::charged_uid`]), not against
//! who may see it: a set-uid program a user ran, or one they made not dumpable (seen by
//! admins only), is charged to that user, and cannot fill the part that other users' such
//! processes share. Only a process whose real uid was never known (gone
//! before it was read, with no parent known) counts as unknown.
//!
//! A uid's part is estimated from the uncompressed size of what it adds to the file (its
//! stacks, and the text of every name its stacks use, each name charged to every uid that
//! uses it: alone, it would need it), scaled by the slice's own compression ratio.

use std::collections::HashMap;

use crate::slice::{Slice, SliceStack};

/// Estimated bytes one stack adds to a slice file besides its frames and strings: its sample
/// entry, two values and its numeric labels.
pub(crate) const STACK_BYTES: u64 = 48;

/// Estimated bytes one frame of a stack adds (a location id).
pub(crate) const FRAME_BYTES: u64 = 2;

/// Estimated bytes one name adds besides its text: its function, location and string-table
/// entries.
pub(crate) const NAME_BYTES: u64 = 24;

/// The bytes a slice of `slice_ns` may take for `max_bytes` to hold `span_ns` of slices.
pub fn slice_budget(max_bytes: u64, span_ns: u64, slice_ns: u64) -> u64 {
    let budget = u128::from(max_bytes) * u128::from(slice_ns) / u128::from(span_ns.max(1));
    budget.min(u128::from(u64::MAX)) as u64
}

/// Counts the bytes written to it, keeps none: a file's size without the file.
#[derive(Debug, Default)]
pub(crate) struct ByteCount(pub u64);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The bytes of `slice`'s file (as [`Slice::encode`] writes it), counted without keeping
/// them. (A faster gzip level is no cheaper for long names, and measures them half as large
/// again.)
pub fn file_bytes(slice: &Slice) -> u64 {
    use std::io::Write;
    let raw = prost::Message::encode_to_vec(&slice.to_pprof());
    let mut gz = flate2::write::GzEncoder::new(ByteCount(0), flate2::Compression::default());
    // Writing to a counter cannot fail.
    let _ = gz.write_all(&raw);
    gz.finish().map_or(raw.len() as u64, |c| c.0)
}

/// What one uid lost to the share in one slice or roll-up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UidDrop {
    /// The uid (None: stacks whose uid was not known).
    pub uid: Option<u32>,
    /// Stacks dropped.
    pub stacks: u64,
    /// Samples those stacks held.
    pub samples: u64,
    /// Estimated bytes of the file they would have taken.
    pub bytes: u64,
}

/// One stack as the share weighs it: whose it is, what it adds to a file besides its names'
/// text, the names it uses, its samples.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Weighed<'a> {
    /// The uid it is charged to (None: not known).
    pub uid: Option<u32>,
    /// Estimated bytes (uncompressed) without its names' text.
    pub bytes: u64,
    /// Its frames' name ids.
    pub names: &'a [u32],
    /// Samples.
    pub count: u64,
}

/// One uid's stacks and their estimated bytes.
#[derive(Default)]
struct UidPart {
    /// Indices into the stacks weighed.
    stacks: Vec<usize>,
    /// Uses of each name by these stacks.
    names: HashMap<u32, u32>,
    /// Estimated bytes (uncompressed).
    bytes: u64,
}

impl UidPart {
    fn add(&mut self, index: usize, stack: &Weighed<'_>, name_bytes: &dyn Fn(u32) -> u64) {
        self.stacks.push(index);
        self.bytes += stack.bytes;
        for &f in stack.names {
            let uses = self.names.entry(f).or_insert(0);
            if *uses == 0 {
                self.bytes += name_bytes(f);
            }
            *uses += 1;
        }
    }

    fn remove(&mut self, stack: &Weighed<'_>, name_bytes: &dyn Fn(u32) -> u64) {
        self.bytes = self.bytes.saturating_sub(stack.bytes);
        for f in stack.names {
            if let Some(uses) = self.names.get_mut(f) {
                *uses -= 1;
                if *uses == 0 {
                    self.names.remove(f);
                    self.bytes = self.bytes.saturating_sub(name_bytes(*f));
                }
            }
        }
    }
}

/// The stacks of a slice or roll-up, by uid, with their estimated bytes: each name's text
/// charged to every uid that uses it (alone, it would need it).
pub(crate) struct UidParts<'a, 'n> {
    stacks: &'a [Weighed<'a>],
    name_bytes: &'n dyn Fn(u32) -> u64,
    parts: HashMap<Option<u32>, UidPart>,
}

impl<'a, 'n> UidParts<'a, 'n> {
    /// `stacks` by uid; `name_bytes`: the estimated bytes of a name id.
    pub fn new(stacks: &'a [Weighed<'a>], name_bytes: &'n dyn Fn(u32) -> u64) -> Self {
        let mut parts: HashMap<Option<u32>, UidPart> = HashMap::new();
        for (i, stack) in stacks.iter().enumerate() {
            parts
                .entry(stack.uid)
                .or_default()
                .add(i, stack, name_bytes);
        }
        UidParts {
            stacks,
            name_bytes,
            parts,
        }
    }

    /// Estimated bytes of every uid's part.
    pub fn estimated(&self) -> u64 {
        self.parts.values().map(|p| p.bytes).sum()
    }

    /// Cut the parts to `budget` estimated bytes, max-min fair, no uid below `share_percent`
    /// of it: which stacks are kept (by index), and what each uid lost (bytes estimated, in
    /// the units of `budget`), by uid.
    pub fn cut(mut self, budget: u64, share_percent: u8) -> (Vec<bool>, Vec<UidDrop>) {
        let floor = budget / 100 * u64::from(share_percent);
        let level = water_level(self.parts.values().map(|p| p.bytes).collect(), budget).max(floor);
        let mut drops = Vec::new();
        let mut keep = vec![true; self.stacks.len()];
        let (stacks, name_bytes) = (self.stacks, self.name_bytes);
        for (&uid, part) in self.parts.iter_mut().filter(|(_, p)| p.bytes > level) {
            let mut order = std::mem::take(&mut part.stacks);
            // The fewest samples first; of those, the costliest.
            order.sort_by_key(|&i| (stacks[i].count, std::cmp::Reverse(stacks[i].bytes)));
            let before = part.bytes;
            let mut drop = UidDrop {
                uid,
                ..UidDrop::default()
            };
            for i in order {
                if part.bytes <= level {
                    break;
                }
                part.remove(&stacks[i], name_bytes);
                keep[i] = false;
                drop.stacks += 1;
                drop.samples += stacks[i].count;
            }
            drop.bytes = before - part.bytes;
            drops.push(drop);
        }
        drops.sort_by_key(|d| d.uid);
        (keep, drops)
    }
}

/// `budget` file bytes in estimated bytes, for a file of `file` bytes estimated at
/// `estimated`: as that file compresses.
pub(crate) fn in_estimated(budget: u64, estimated: u64, file: u64) -> u64 {
    (u128::from(budget) * u128::from(estimated) / u128::from(file.max(1))) as u64
}

/// `drops`' estimated bytes in file bytes (the inverse of [`in_estimated`]).
pub(crate) fn to_file_bytes(drops: &mut [UidDrop], estimated: u64, file: u64) {
    for d in drops {
        d.bytes = (u128::from(d.bytes) * u128::from(file) / u128::from(estimated.max(1))) as u64;
    }
}

/// Estimated bytes of `stack` without its names' text.
fn stack_bytes(stack: &SliceStack) -> u64 {
    let text = stack.comm.as_ref().map_or(0, String::len)
        + stack.cgroup.as_ref().map_or(0, String::len)
        + stack.ancestors.len() * 6;
    STACK_BYTES + FRAME_BYTES * stack.frames.len() as u64 + text as u64 + stack.seconds.len() as u64
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
    let weighed: Vec<Weighed<'_>> = slice
        .stacks
        .iter()
        .map(|s| Weighed {
            uid: s.charged_uid(),
            bytes: stack_bytes(s),
            names: &s.frames,
            count: s.count,
        })
        .collect();
    let names = &slice.names;
    let name_bytes = |f: u32| names.get(f as usize).map_or(0, String::len) as u64 + NAME_BYTES;
    let parts = UidParts::new(&weighed, &name_bytes);
    let estimated = parts.estimated();
    if estimated <= budget {
        return Vec::new();
    }
    let file = file_bytes(slice).max(1);
    if file <= budget {
        return Vec::new();
    }
    let (keep, mut drops) = parts.cut(in_estimated(budget, estimated, file), share_percent);
    drop(weighed);
    let mut keep = keep.into_iter();
    slice.stacks.retain(|_| keep.next().unwrap_or(true));
    forget_unused_names(slice);
    to_file_bytes(&mut drops, estimated, file);
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
