//! Names of frames, cached by key across windows in a compact form, in two generations.
//!
//! An address named once stays named: naming it again would read DWARF again (the expensive
//! part of naming), so the cache is what makes a long-lived service's work proportional to
//! what is new. It is compact because it holds every address ever sampled while in use:
//! each generation interns the names its entries use (a function's name is held once however
//! many of its addresses were sampled) and keeps an entry as a few integers: where its frames
//! start in one array of name ids, how many there are, and where their source lines start.
//!
//! New entries go into the young generation; when it reaches half of either bound (entries,
//! bytes), the old generation is dropped and the young one becomes old. An entry found in the
//! old generation moves back to the young one. So the cache never holds more than its bounds
//! (plus the one entry being inserted), what is in use stays, and what has not been used for
//! a generation goes half a cache at a time, never all at once. Nothing else empties it but
//! [`NameCache::clear`] (the service's owner decides when: a reload of kernel symbols, or
//! memory pressure through [`NameCache::shed`], which drops one generation at a time).

use std::collections::HashMap;
use std::hash::Hash;

use indexmap::IndexSet;
use rustc_hash::FxBuildHasher;

/// Bytes counted per interned name besides its text: the set's slot, index and hash, the
/// box.
const NAME_OVERHEAD: usize = 40;
/// Bytes counted per entry besides its key and value: the hash map's control byte and its
/// spare slots (a table is at most 7/8 full, and grows by doubling).
const SLOT_OVERHEAD: usize = 16;

/// Where a frame's code is: its source file, when known, and line (0: unknown).
pub(crate) type SourceLine = (Option<Box<str>>, u32);

/// No source file (in a line's file id).
const NO_FILE: u32 = u32::MAX;
/// An entry without source lines (in its `lines` start).
const NO_LINES: u32 = u32::MAX;
/// Most frames (and lines) one generation indexes: a `u32` start, below [`NO_LINES`], and
/// room for one more entry of `u16::MAX` names.
const MAX_FRAMES: usize = (u32::MAX - u16::MAX as u32 - 1) as usize;

/// The names found for one key (on a miss), outermost first, before they are cached.
pub(crate) struct Names {
    /// The names, outermost first.
    pub(crate) names: Vec<Box<str>>,
    /// Each name's source file and line, when asked for
    /// ([`super::ServiceOptions::source_locations`]).
    pub(crate) sources: Option<Vec<SourceLine>>,
    /// Whether these are real names (not `file+0x…` or `[unknown]`).
    pub(crate) named: bool,
}

/// One cached key: its frames are `frames[start..start + len]` of its generation.
#[derive(Clone, Copy, Debug)]
struct Entry {
    start: u32,
    /// Where its lines start in its generation's `lines`, or [`NO_LINES`].
    lines: u32,
    len: u16,
    named: bool,
}

/// One generation: its entries, their frames end to end, and the names they use, once each.
struct Generation<K> {
    entries: HashMap<K, Entry, FxBuildHasher>,
    /// Name ids (indexes in `names`) of every entry's frames, outermost first.
    frames: Vec<u32>,
    /// (source file's name id or [`NO_FILE`], line) of the entries that keep lines.
    lines: Vec<(u32, u32)>,
    names: IndexSet<Box<str>, FxBuildHasher>,
    /// Bytes of the names' text.
    text: usize,
}

impl<K: Hash + Eq + Copy> Generation<K> {
    fn new() -> Self {
        Generation {
            entries: HashMap::default(),
            frames: Vec::new(),
            lines: Vec::new(),
            names: IndexSet::default(),
            text: 0,
        }
    }

    /// What it holds, in bytes, as counted against the bound: its entries, frames, lines and
    /// names (an estimate from their numbers: vectors may hold spare capacity too).
    fn bytes(&self) -> usize {
        self.entries.len() * Self::SLOT
            + self.frames.len() * std::mem::size_of::<u32>()
            + self.lines.len() * std::mem::size_of::<(u32, u32)>()
            + self.names.len() * NAME_OVERHEAD
            + self.text
    }

    /// Bytes counted per entry.
    const SLOT: usize = std::mem::size_of::<(K, Entry)>() + SLOT_OVERHEAD;

    /// What adding an entry of `names` (with their `lines`) would add at most, in bytes,
    /// before any vector grows.
    fn added_bytes(names: &[&str], lines: bool) -> usize {
        let per_frame = std::mem::size_of::<u32>()
            + if lines {
                std::mem::size_of::<(u32, u32)>()
            } else {
                0
            };
        Self::SLOT
            + names.len() * per_frame
            + names.iter().map(|n| n.len() + NAME_OVERHEAD).sum::<usize>()
    }

    fn intern(&mut self, name: &str) -> u32 {
        if let Some(id) = self.names.get_index_of(name) {
            return id as u32;
        }
        self.text += name.len();
        self.names.insert_full(name.into()).0 as u32
    }

    /// Whether it may take one more entry (of at most `u16::MAX` names) in its frames and
    /// lines.
    fn has_room(&self) -> bool {
        self.frames.len() <= MAX_FRAMES && self.lines.len() <= MAX_FRAMES
    }

    /// Add `key`'s entry of `names` (at most `u16::MAX`, in a generation that
    /// [`Generation::has_room`]); `lines` gives each frame's source line when kept.
    fn add(
        &mut self,
        key: K,
        names: &[&str],
        lines: Option<&[(Option<&str>, u32)]>,
        named: bool,
    ) -> Entry {
        let len = names.len().min(u16::MAX as usize) as u16;
        let names = &names[..len as usize];
        let start = self.frames.len() as u32;
        let lines_start = match lines {
            Some(_) => self.lines.len() as u32,
            None => NO_LINES,
        };
        for name in names {
            let id = self.intern(name);
            self.frames.push(id);
        }
        if let Some(lines) = lines {
            for i in 0..names.len() {
                let (file, line) = lines.get(i).copied().unwrap_or((None, 0));
                let file = file.map_or(NO_FILE, |f| self.intern(f));
                self.lines.push((file, line));
            }
        }
        let entry = Entry {
            start,
            lines: lines_start,
            len,
            named,
        };
        self.entries.insert(key, entry);
        entry
    }

    /// Add `key` with the frames of `entry` in `from` (another generation).
    fn copy(&mut self, key: K, from: &Generation<K>, entry: Entry) -> Entry {
        let found = CachedNames::of(from, entry);
        let start = self.frames.len() as u32;
        for name in found.names() {
            let id = self.intern(name);
            self.frames.push(id);
        }
        let lines = match found.lines {
            Some(lines) => {
                let lines_start = self.lines.len() as u32;
                for &(file, line) in lines {
                    let file = match file {
                        NO_FILE => NO_FILE,
                        id => self.intern(from.name(id)),
                    };
                    self.lines.push((file, line));
                }
                lines_start
            }
            None => NO_LINES,
        };
        let copied = Entry {
            start,
            lines,
            ..entry
        };
        self.entries.insert(key, copied);
        copied
    }

    fn name(&self, id: u32) -> &str {
        self.names.get_index(id as usize).map_or("", |n| n)
    }
}

/// The names one cached key stands for, outermost first (a function and the calls inlined
/// into it), borrowed from the cache.
#[derive(Clone, Copy)]
pub(crate) struct CachedNames<'a> {
    frames: &'a [u32],
    lines: Option<&'a [(u32, u32)]>,
    names: &'a IndexSet<Box<str>, FxBuildHasher>,
    named: bool,
}

impl<'a> CachedNames<'a> {
    fn of<K: Hash + Eq + Copy>(generation: &'a Generation<K>, entry: Entry) -> Self {
        let (start, len) = (entry.start as usize, entry.len as usize);
        CachedNames {
            frames: &generation.frames[start..start + len],
            lines: (entry.lines != NO_LINES)
                .then(|| &generation.lines[entry.lines as usize..entry.lines as usize + len]),
            names: &generation.names,
            named: entry.named,
        }
    }

    /// How many names.
    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }

    /// Name `i`, outermost first.
    pub(crate) fn name(&self, i: usize) -> &'a str {
        self.names
            .get_index(self.frames[i] as usize)
            .map_or("", |n| n)
    }

    /// The names, outermost first.
    pub(crate) fn names(
        &self,
    ) -> impl DoubleEndedIterator<Item = &'a str> + ExactSizeIterator + 'a {
        let names = self.names;
        self.frames
            .iter()
            .map(move |&id| names.get_index(id as usize).map_or("", |n| n))
    }

    /// The source file and line of name `i`, when kept.
    pub(crate) fn source(&self, i: usize) -> Option<(Option<&'a str>, u32)> {
        let &(file, line) = self.lines?.get(i)?;
        let file = (file != NO_FILE).then(|| self.names.get_index(file as usize).map_or("", |n| n));
        Some((file, line))
    }

    /// Whether these are real names (not `file+0x…` or `[unknown]`).
    pub(crate) fn named(&self) -> bool {
        self.named
    }
}

/// A cache of names by key, bounded by entries and by bytes (see the module doc).
pub(crate) struct NameCache<K> {
    young: Generation<K>,
    old: Generation<K>,
    max_entries: usize,
    max_bytes: usize,
    /// Entries dropped with an old generation, since the cache was made.
    evicted: u64,
}

impl<K: Hash + Eq + Copy> NameCache<K> {
    /// An empty cache holding at most `max_entries` entries and `max_bytes` bytes.
    pub(crate) fn new(max_entries: usize, max_bytes: usize) -> Self {
        NameCache {
            young: Generation::new(),
            old: Generation::new(),
            max_entries,
            max_bytes,
            evicted: 0,
        }
    }

    /// The names of `key`, if cached.
    pub(crate) fn get(&mut self, key: &K) -> Option<CachedNames<'_>> {
        if let Some(&entry) = self.young.entries.get(key) {
            return Some(CachedNames::of(&self.young, entry));
        }
        // Used again: into the young generation, its names interned there.
        let entry = self.old.entries.remove(key)?;
        let found = CachedNames::of(&self.old, entry);
        let adding = found.len()
            * (std::mem::size_of::<u32>() + NAME_OVERHEAD + std::mem::size_of::<(u32, u32)>())
            + found.names().map(str::len).sum::<usize>()
            + Generation::<K>::SLOT;
        let entry = if self.young_is_full(adding) {
            let from = self.rotate();
            self.young.copy(*key, &from, entry)
        } else {
            let NameCache { young, old, .. } = self;
            young.copy(*key, old, entry)
        };
        Some(CachedNames::of(&self.young, entry))
    }

    /// Cache `names` (outermost first; each with its source line in `lines` when kept) for
    /// `key`; returns them as cached. An entry is at most 65535 names (the outermost are cut).
    pub(crate) fn insert(
        &mut self,
        key: K,
        names: &[&str],
        lines: Option<&[(Option<&str>, u32)]>,
        named: bool,
    ) -> CachedNames<'_> {
        let cut = names.len().saturating_sub(u16::MAX as usize);
        let (names, lines) = (&names[cut..], lines.map(|l| &l[cut.min(l.len())..]));
        // A key replaced leaves its frames in its generation until that goes (rare: a key is
        // inserted again only after a miss, that is once its entry went).
        self.old.entries.remove(&key);
        if self.young_is_full(Generation::<K>::added_bytes(names, lines.is_some())) {
            self.rotate();
        }
        let entry = self.young.add(key, names, lines, named);
        CachedNames::of(&self.young, entry)
    }

    /// [`NameCache::insert`] of names found on a miss.
    pub(crate) fn insert_names(&mut self, key: K, found: &Names) -> CachedNames<'_> {
        let names: Vec<&str> = found.names.iter().map(|n| &**n).collect();
        let lines: Option<Vec<(Option<&str>, u32)>> = found
            .sources
            .as_ref()
            .map(|s| s.iter().map(|(f, line)| (f.as_deref(), *line)).collect());
        self.insert(key, &names, lines.as_deref(), found.named)
    }

    /// Whether the young generation would pass half of a bound with `adding` more bytes and
    /// one more entry.
    fn young_is_full(&self, adding: usize) -> bool {
        self.young.entries.len() + 1 > (self.max_entries / 2).max(1)
            || self.young.bytes() + adding > self.max_bytes / 2
            || !self.young.has_room()
    }

    /// The young generation becomes old; returns the old one, dropped.
    fn rotate(&mut self) -> Generation<K> {
        self.evicted += self.old.entries.len() as u64;
        let young = std::mem::replace(&mut self.young, Generation::new());
        std::mem::replace(&mut self.old, young)
    }

    /// Under memory pressure: drop the entries not used since the last rotation (the old
    /// generation), and make the young one old, so that what the next windows use again stays
    /// and the rest goes with the next shed or rotation. Two sheds in a row empty the cache.
    pub(crate) fn shed(&mut self) {
        drop(self.rotate());
    }

    /// Empty the cache.
    pub(crate) fn clear(&mut self) {
        self.evicted += (self.young.entries.len() + self.old.entries.len()) as u64;
        self.young = Generation::new();
        self.old = Generation::new();
    }

    /// Entries cached.
    pub(crate) fn len(&self) -> usize {
        self.young.entries.len() + self.old.entries.len()
    }

    /// Bytes counted against the bound (what the cache holds).
    pub(crate) fn bytes(&self) -> usize {
        self.young.bytes() + self.old.bytes()
    }

    /// Entries dropped so far (with old generations, or by [`NameCache::clear`]).
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(i: u64) -> [String; 2] {
        [format!("outer_{i}"), format!("inner_{i}")]
    }

    fn insert(cache: &mut NameCache<u64>, key: u64, i: u64) {
        let [a, b] = names(i);
        cache.insert(key, &[&a, &b], None, true);
    }

    fn get(cache: &mut NameCache<u64>, key: u64) -> Option<Vec<String>> {
        cache
            .get(&key)
            .map(|n| n.names().map(str::to_owned).collect())
    }

    #[test]
    fn entry_bound_holds_and_old_entries_go_a_generation_at_a_time() {
        let mut cache = NameCache::new(100, usize::MAX);
        for i in 0..1000u64 {
            insert(&mut cache, i, i);
            assert!(cache.len() <= 100, "{} entries after {i}", cache.len());
        }
        // The last 50 are young, the 50 before old: both answer, and right.
        for i in 950..1000u64 {
            assert_eq!(get(&mut cache, i), Some(names(i).to_vec()), "entry {i}");
        }
        assert_eq!(
            get(&mut cache, 900),
            Some(names(900).to_vec()),
            "from the old generation"
        );
        assert_eq!(get(&mut cache, 10), None);
        // Never emptied whole: a rotation keeps the generation before.
        assert!(cache.len() > 50);
        assert_eq!(cache.evicted(), 1000 - cache.len() as u64);
    }

    #[test]
    fn byte_bound_holds_and_names_are_held_once() {
        let max_bytes = 20_000;
        let mut cache = NameCache::new(usize::MAX, max_bytes);
        for i in 0..5000u64 {
            // Seven functions, many addresses each: their names are interned once per
            // generation.
            insert(&mut cache, i, i % 7 + 100);
            assert!(
                cache.bytes() <= max_bytes,
                "{} bytes after {i}",
                cache.bytes()
            );
        }
        let per_entry = cache.bytes() / cache.len();
        assert!(per_entry < 64, "{per_entry} bytes an entry");
        assert!(cache.len() >= 200, "{} entries", cache.len());
        assert_eq!(get(&mut cache, 4999), Some(names(4999 % 7 + 100).to_vec()));
    }

    #[test]
    fn used_entries_survive_rotations() {
        let mut cache = NameCache::new(10, usize::MAX);
        insert(&mut cache, 0, 0);
        for i in 1..200u64 {
            insert(&mut cache, i, i);
            // Used once per generation: promoted back each time, never dropped.
            assert_eq!(get(&mut cache, 0), Some(names(0).to_vec()), "after {i}");
        }
    }

    #[test]
    fn source_lines_are_kept_and_moved_with_their_entry() {
        let mut cache = NameCache::new(6, usize::MAX);
        let lines = [(Some("a.rs"), 10), (None, 0)];
        cache.insert(1u64, &["outer", "inner"], Some(&lines), true);
        cache.insert(2u64, &["other"], None, false);
        let check = |cache: &mut NameCache<u64>| {
            let n = cache.get(&1).unwrap();
            assert_eq!(n.names().collect::<Vec<_>>(), ["outer", "inner"]);
            assert_eq!(n.source(0), Some((Some("a.rs"), 10)));
            assert_eq!(n.source(1), Some((None, 0)));
            assert!(n.named());
            let n = cache.get(&2).unwrap();
            assert_eq!((n.source(0), n.named()), (None, false));
        };
        check(&mut cache);
        // Into the old generation, then back into a young one.
        cache.insert(3u64, &["x"], None, true);
        cache.insert(4u64, &["y"], None, true);
        assert!(cache.young.entries.len() == 1 && cache.old.entries.len() == 3);
        check(&mut cache);
        assert_eq!(cache.young.entries.len(), 3);
    }

    #[test]
    fn shed_keeps_what_was_used_since_and_two_sheds_empty_it() {
        let mut cache = NameCache::new(100, usize::MAX);
        for i in 0..10u64 {
            insert(&mut cache, i, i);
        }
        cache.shed();
        assert_eq!(cache.len(), 10, "all were young: now old");
        assert!(get(&mut cache, 3).is_some(), "used: young again");
        cache.shed();
        assert_eq!(cache.len(), 1);
        assert_eq!(get(&mut cache, 3), Some(names(3).to_vec()));
        cache.shed();
        cache.shed();
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
    }

    #[test]
    fn clear_empties_and_counts() {
        let mut cache = NameCache::new(10, usize::MAX);
        insert(&mut cache, 1, 1);
        insert(&mut cache, 1, 2);
        assert_eq!(cache.len(), 1);
        assert_eq!(get(&mut cache, 1), Some(names(2).to_vec()));
        cache.clear();
        assert_eq!((cache.len(), cache.bytes()), (0, 0));
    }
}
