//! Names of frames, cached by key across windows, in two generations.
//!
//! New entries go into the young generation; when it reaches half of either bound (entries,
//! bytes of names), the old generation is dropped and the young one becomes old. An entry
//! found in the old generation moves back to the young one. So the cache never holds more
//! than its bounds (plus the one entry being inserted), what is in use stays, and what has
//! not been used for a generation goes half a cache at a time, never all at once.

use std::collections::HashMap;
use std::hash::Hash;

use rustc_hash::FxBuildHasher;

/// Bytes counted per entry besides its names: the key, the slot, the boxed slice.
const ENTRY_OVERHEAD: usize = 64;
/// Bytes counted per name besides its text: the boxed string's pointer and length.
const NAME_OVERHEAD: usize = 16;

/// The names one address stands for, outermost first (a function and the calls inlined into
/// it), and whether they are real names (not `file+0x…` or `[unknown]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Names {
    names: Box<[Box<str>]>,
    /// Each name's source file and line (0: unknown), when asked for
    /// ([`super::ServiceOptions::source_locations`]); else empty.
    sources: Box<[SourceLine]>,
    named: bool,
}

/// Where a frame's code is: its source file, when known, and line (0: unknown).
pub(crate) type SourceLine = (Option<Box<str>>, u32);

impl Names {
    /// Names, outermost first.
    pub(crate) fn new(names: Vec<Box<str>>, named: bool) -> Names {
        Names {
            names: names.into_boxed_slice(),
            sources: Box::new([]),
            named,
        }
    }

    /// Names, outermost first, with the source file and line of each.
    pub(crate) fn with_sources(
        names: Vec<Box<str>>,
        sources: Vec<SourceLine>,
        named: bool,
    ) -> Names {
        debug_assert_eq!(names.len(), sources.len());
        Names {
            names: names.into_boxed_slice(),
            sources: sources.into_boxed_slice(),
            named,
        }
    }

    /// The source file and line of name `i`, when kept.
    pub(crate) fn source(&self, i: usize) -> Option<&SourceLine> {
        self.sources.get(i)
    }

    /// One name.
    pub(crate) fn one(name: &str, named: bool) -> Names {
        Names::new(vec![name.into()], named)
    }

    /// The names, outermost first.
    pub(crate) fn names(&self) -> &[Box<str>] {
        &self.names
    }

    /// Whether these are real names.
    pub(crate) fn named(&self) -> bool {
        self.named
    }

    /// What the entry is counted as in the cache's byte bound.
    fn bytes(&self) -> usize {
        ENTRY_OVERHEAD
            + self
                .names
                .iter()
                .map(|n| n.len() + NAME_OVERHEAD)
                .sum::<usize>()
            + self
                .sources
                .iter()
                .map(|(f, _)| f.as_ref().map_or(0, |f| f.len()) + NAME_OVERHEAD + 8)
                .sum::<usize>()
    }
}

/// A cache of [`Names`] by key, bounded by entries and by bytes (see the module doc).
pub(crate) struct NameCache<K> {
    young: HashMap<K, Names, FxBuildHasher>,
    old: HashMap<K, Names, FxBuildHasher>,
    young_bytes: usize,
    old_bytes: usize,
    max_entries: usize,
    max_bytes: usize,
    /// Entries dropped with an old generation, since the cache was made.
    evicted: u64,
}

impl<K: Hash + Eq + Copy> NameCache<K> {
    /// An empty cache holding at most `max_entries` entries and `max_bytes` bytes of names.
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> Self {
        NameCache {
            young: HashMap::default(),
            old: HashMap::default(),
            young_bytes: 0,
            old_bytes: 0,
            max_entries,
            max_bytes,
            evicted: 0,
        }
    }

    /// The names of `key`, if cached.
    pub(crate) fn get(&mut self, key: &K) -> Option<&Names> {
        if self.young.contains_key(key) {
            return self.young.get(key);
        }
        let names = self.old.remove(key)?;
        self.old_bytes -= names.bytes();
        Some(self.insert(*key, names))
    }

    /// Cache `names` for `key`; returns them.
    pub(crate) fn insert(&mut self, key: K, names: Names) -> &Names {
        let bytes = names.bytes();
        if let Some(replaced) = self.young.remove(&key) {
            self.young_bytes -= replaced.bytes();
        }
        if let Some(replaced) = self.old.remove(&key) {
            self.old_bytes -= replaced.bytes();
        }
        let half_entries = (self.max_entries / 2).max(1);
        let half_bytes = self.max_bytes / 2;
        if self.young.len() + 1 > half_entries || self.young_bytes + bytes > half_bytes {
            self.evicted += self.old.len() as u64;
            self.old = std::mem::take(&mut self.young);
            self.old_bytes = std::mem::replace(&mut self.young_bytes, 0);
        }
        self.young_bytes += bytes;
        self.young.entry(key).insert_entry(names).into_mut()
    }

    /// Empty the cache.
    pub(crate) fn clear(&mut self) {
        self.evicted += (self.young.len() + self.old.len()) as u64;
        self.young = HashMap::default();
        self.old = HashMap::default();
        self.young_bytes = 0;
        self.old_bytes = 0;
    }

    /// Entries cached.
    pub(crate) fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Bytes counted against the bound.
    pub(crate) fn bytes(&self) -> usize {
        self.young_bytes + self.old_bytes
    }

    /// Entries dropped so far (with old generations, or by [`NameCache::clear`]).
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(i: u64) -> Names {
        Names::new(
            vec![format!("outer_{i}").into(), format!("inner_{i}").into()],
            true,
        )
    }

    #[test]
    fn entry_bound_holds_and_old_entries_go_a_generation_at_a_time() {
        let mut cache = NameCache::new(100, usize::MAX);
        for i in 0..1000u64 {
            cache.insert(i, names(i));
            assert!(cache.len() <= 100, "{} entries after {i}", cache.len());
        }
        // The last 50 are young, the 50 before old: both answer, and right.
        for i in 950..1000u64 {
            assert_eq!(cache.get(&i), Some(&names(i)), "entry {i}");
        }
        assert_eq!(
            cache.get(&900),
            Some(&names(900)),
            "from the old generation"
        );
        assert_eq!(cache.get(&10), None);
        // Never emptied whole: a rotation keeps the generation before.
        assert!(cache.len() > 50);
        assert_eq!(cache.evicted(), 1000 - cache.len() as u64);
    }

    #[test]
    fn byte_bound_holds() {
        let one = names(100).bytes();
        let max_bytes = one * 20;
        let mut cache = NameCache::new(usize::MAX, max_bytes);
        for i in 0..500u64 {
            cache.insert(i, names(i % 7 + 100));
            assert!(
                cache.bytes() <= max_bytes,
                "{} bytes after {i}",
                cache.bytes()
            );
        }
        assert!(
            cache.len() >= 10 && cache.len() <= 20,
            "{} entries",
            cache.len()
        );
    }

    #[test]
    fn used_entries_survive_rotations() {
        let mut cache = NameCache::new(10, usize::MAX);
        cache.insert(0u64, names(0));
        for i in 1..200u64 {
            cache.insert(i, names(i));
            // Used once per generation: promoted back each time, never dropped.
            assert_eq!(cache.get(&0), Some(&names(0)), "after {i}");
        }
    }

    #[test]
    fn replacing_an_entry_keeps_the_byte_count_right() {
        let mut cache = NameCache::new(10, usize::MAX);
        cache.insert(1u64, Names::one("a", true));
        cache.insert(1u64, Names::one("a much longer name", true));
        assert_eq!(cache.len(), 1);
        assert_eq!(
            cache.bytes(),
            Names::one("a much longer name", true).bytes()
        );
        cache.clear();
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
    }
}
