//! A sorted address -> name table with names in one arena string.
//!
//! Shared by ELF symbol tables and kallsyms. Built once; lookups are a
//! binary search with no allocation.

/// Symbol binding, in order of preference among aliases.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Binding {
    Global,
    Weak,
    Local,
}

/// A symbol offered to [`TableBuilder`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidate {
    pub start: u64,
    /// Size from the symbol table; 0 when unknown.
    pub size: u64,
    /// A size-0 symbol never extends past this (end of its section).
    pub limit: u64,
    pub binding: Binding,
    /// Caller data carried to the chosen entry (kallsyms: module index).
    pub tag: u32,
}

/// One address in the finished table (aliases collapsed).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Entry {
    pub start: u64,
    /// Exclusive end of the range this entry answers for.
    pub end: u64,
    pub size: u64,
    name_off: u32,
    name_len: u32,
    pub tag: u32,
}

/// Collects candidates and their names, then sorts and collapses them.
#[derive(Default)]
pub(crate) struct TableBuilder {
    names: String,
    items: Vec<(Candidate, u32, u32)>,
}

impl TableBuilder {
    /// Add a candidate named `name`. Returns false (and adds nothing) when
    /// the arena would outgrow u32 offsets.
    pub fn push(&mut self, c: Candidate, name: &str) -> bool {
        let (Ok(off), Ok(len)) = (u32::try_from(self.names.len()), u32::try_from(name.len()))
        else {
            return false;
        };
        if off.checked_add(len).is_none() {
            return false;
        }
        self.names.push_str(name);
        self.items.push((c, off, len));
        true
    }

    /// Number of candidates pushed so far.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Sort by address and keep one entry per address: global over weak
    /// over local, then a name not starting with `_`, then the shorter name,
    /// then the lexicographically smaller one.
    pub fn build(mut self) -> Table {
        let names = std::mem::take(&mut self.names);
        let name = |off: u32, len: u32| &names[off as usize..(off + len) as usize];
        // Names are compared only between aliases (same address): most comparisons are
        // decided by the address alone.
        self.items.sort_unstable_by(|a, b| {
            a.0.start.cmp(&b.0.start).then_with(|| {
                let (an, bn) = (name(a.1, a.2), name(b.1, b.2));
                a.0.binding
                    .cmp(&b.0.binding)
                    .then_with(|| an.starts_with('_').cmp(&bn.starts_with('_')))
                    .then_with(|| an.len().cmp(&bn.len()))
                    .then_with(|| an.cmp(bn))
            })
        });

        let mut arena = String::new();
        let mut entries: Vec<Entry> = Vec::new();
        let mut limits: Vec<u64> = Vec::new();
        let mut i = 0;
        while i < self.items.len() {
            let (best, off, len) = self.items[i];
            let mut size = best.size;
            let mut limit = best.limit;
            let mut j = i + 1;
            while j < self.items.len() && self.items[j].0.start == best.start {
                size = size.max(self.items[j].0.size);
                limit = limit.max(self.items[j].0.limit);
                j += 1;
            }
            let name_off = arena.len() as u32; // fits: arena <= original arena
            arena.push_str(name(off, len));
            entries.push(Entry {
                start: best.start,
                end: best.start.saturating_add(size),
                size,
                name_off,
                name_len: len,
                tag: best.tag,
            });
            limits.push(limit);
            i = j;
        }
        // Size-0 symbols reach up to the next symbol, within their section.
        for k in 0..entries.len() {
            if entries[k].size == 0 {
                let next = entries.get(k + 1).map_or(u64::MAX, |e| e.start);
                entries[k].end = next.min(limits[k]);
            }
        }
        arena.shrink_to_fit();
        entries.shrink_to_fit();
        Table::Owned {
            names: arena,
            entries,
        }
    }
}

/// The finished, immutable table: built in memory, or read in place from its serialized form
/// (an on-disk cache, mapped: nothing is copied or allocated to load it).
#[derive(Debug)]
pub(crate) enum Table {
    /// Built by [`TableBuilder`].
    Owned { names: String, entries: Vec<Entry> },
    /// The bytes [`Table::write_to`] wrote, at `layout` within `data`.
    Serialized { data: Bytes, layout: Layout },
}

impl Default for Table {
    fn default() -> Table {
        Table::Owned {
            names: String::new(),
            entries: Vec::new(),
        }
    }
}

/// Bytes held in memory or mapped from a file.
pub(crate) enum Bytes {
    /// In memory (tests build tables from bytes).
    #[cfg(test)]
    Vec(Vec<u8>),
    /// Mapped read-only.
    Map(memmap2::Mmap),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            #[cfg(test)]
            Bytes::Vec(v) => v,
            Bytes::Map(m) => m,
        }
    }
}

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} bytes", self.len())
    }
}

/// Where a serialized table's parts are within its bytes.
///
/// The form is laid out for lookups that touch few pages of a mapped file: a summary (the
/// start of every [`BLOCK`]th entry), then the starts of all entries, then the rest of each
/// entry, then the names. A lookup searches the summary (a few pages shared by all lookups),
/// one block of starts (2 KiB), and reads one entry and one name.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Layout {
    summary: usize,
    summary_len: usize,
    starts: usize,
    rest: usize,
    count: usize,
    names: usize,
    names_len: usize,
    /// The first byte after the table.
    pub end: usize,
}

/// Entries per summary block.
const BLOCK: usize = 256;
/// Bytes of the rest of one serialized entry: end, size (u64), name offset, length, tag (u32).
const REST_BYTES: usize = 28;

/// Reads little-endian integers off the front of a byte slice.
pub(crate) struct Reader<'a>(pub &'a [u8]);

impl<'a> Reader<'a> {
    pub fn u64(&mut self) -> Option<u64> {
        let (head, rest) = self.0.split_first_chunk::<8>()?;
        self.0 = rest;
        Some(u64::from_le_bytes(*head))
    }

    pub fn u32(&mut self) -> Option<u32> {
        let (head, rest) = self.0.split_first_chunk::<4>()?;
        self.0 = rest;
        Some(u32::from_le_bytes(*head))
    }

    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.0.len() {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
}

fn u64_at(data: &[u8], at: usize) -> u64 {
    data.get(at..at + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn u32_at(data: &[u8], at: usize) -> u32 {
    data.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

impl Table {
    /// Let go of the resident pages of a mapped table (see [`crate::sys::release_resident_pages`]).
    pub(crate) fn release_resident_pages(&self) {
        if let Table::Serialized {
            data: Bytes::Map(map),
            ..
        } = self
        {
            crate::sys::release_resident_pages(map);
        }
    }

    /// Append this table in a compact binary form (for on-disk caches; see [`Layout`]).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        let count = self.len();
        let summary_len = count.div_ceil(BLOCK);
        let names: &[u8] = match self {
            Table::Owned { names, .. } => names.as_bytes(),
            Table::Serialized { data, layout } => {
                &data[layout.names..layout.names + layout.names_len]
            }
        };
        for v in [count, names.len(), summary_len] {
            out.extend_from_slice(&(v as u64).to_le_bytes());
        }
        for block in 0..summary_len {
            out.extend_from_slice(&self.start_of(block * BLOCK).to_le_bytes());
        }
        for i in 0..count {
            out.extend_from_slice(&self.start_of(i).to_le_bytes());
        }
        for i in 0..count {
            let e = self.entry(i);
            for v in [e.end, e.size] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            for v in [e.name_off, e.name_len, e.tag] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out.extend_from_slice(names);
    }

    /// Where the table [`Table::write_to`] wrote at `start` of `data` lies; None when the
    /// bytes cannot be one (too short for its counts). Entries are not read: a table in a
    /// cache file is used in place, and a corrupt entry answers wrongly or not at all, never
    /// out of bounds.
    pub fn layout(data: &[u8], start: usize) -> Option<Layout> {
        let mut r = Reader(data.get(start..)?);
        let count = usize::try_from(r.u64()?).ok()?;
        let names_len = usize::try_from(r.u64()?).ok()?;
        let summary_len = usize::try_from(r.u64()?).ok()?;
        if summary_len != count.div_ceil(BLOCK) {
            return None;
        }
        let summary = start + 24;
        let starts = summary.checked_add(summary_len.checked_mul(8)?)?;
        let rest = starts.checked_add(count.checked_mul(8)?)?;
        let names = rest.checked_add(count.checked_mul(REST_BYTES)?)?;
        let end = names.checked_add(names_len)?;
        (end <= data.len()).then_some(Layout {
            summary,
            summary_len,
            starts,
            rest,
            count,
            names,
            names_len,
            end,
        })
    }

    /// The table at `layout` in `data`, used in place.
    pub fn serialized(data: Bytes, layout: Layout) -> Table {
        Table::Serialized { data, layout }
    }

    fn entry(&self, i: usize) -> Entry {
        match self {
            Table::Owned { entries, .. } => entries[i],
            Table::Serialized { data, layout } => {
                let at = layout.rest + i * REST_BYTES;
                Entry {
                    start: u64_at(data, layout.starts + i * 8),
                    end: u64_at(data, at),
                    size: u64_at(data, at + 8),
                    name_off: u32_at(data, at + 16),
                    name_len: u32_at(data, at + 20),
                    tag: u32_at(data, at + 24),
                }
            }
        }
    }

    fn start_of(&self, i: usize) -> u64 {
        match self {
            Table::Owned { entries, .. } => entries[i].start,
            Table::Serialized { data, layout } => u64_at(data, layout.starts + i * 8),
        }
    }

    /// The number of entries among `range` whose start is at or before `addr` (plus
    /// `range.start`), by binary search: the entries are sorted by start.
    fn partition(
        &self,
        mut lo: usize,
        mut hi: usize,
        addr: u64,
        start: impl Fn(usize) -> u64,
    ) -> usize {
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if start(mid) <= addr {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The entry whose range contains `addr`: greatest start <= addr, and
    /// addr below its end (an end of `u64::MAX` means unbounded).
    pub fn lookup(&self, addr: u64) -> Option<Entry> {
        // How many entries start at or before `addr`: for a serialized table, first which
        // block (from the summary), then within that block.
        let (lo, hi) = match self {
            Table::Owned { .. } => (0, self.len()),
            Table::Serialized { data, layout } => {
                let blocks = self.partition(0, layout.summary_len, addr, |b| {
                    u64_at(data, layout.summary + b * 8)
                });
                let block = blocks.checked_sub(1)?;
                (block * BLOCK, ((block + 1) * BLOCK).min(layout.count))
            }
        };
        let before = self.partition(lo, hi, addr, |i| self.start_of(i));
        let e = self.entry(before.checked_sub(1)?);
        (addr < e.end || e.end == u64::MAX).then_some(e)
    }

    /// The name of an entry of this table ("" when a corrupt cache gives no valid name).
    pub fn name(&self, e: &Entry) -> &str {
        let start = e.name_off as usize;
        let end = start.saturating_add(e.name_len as usize);
        match self {
            Table::Owned { names, .. } => names.get(start..end).unwrap_or(""),
            Table::Serialized { data, layout } => {
                let names = &data[layout.names..layout.names + layout.names_len];
                names
                    .get(start..end)
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .unwrap_or("")
            }
        }
    }

    /// Number of distinct addresses.
    pub fn len(&self) -> usize {
        match self {
            Table::Owned { entries, .. } => entries.len(),
            Table::Serialized { layout, .. } => layout.count,
        }
    }

    /// Bytes the table holds: its entries and names in memory, or its mapped serialized form.
    pub fn bytes(&self) -> u64 {
        match self {
            Table::Owned { names, entries } => {
                (names.capacity() + entries.capacity() * std::mem::size_of::<Entry>()) as u64
            }
            Table::Serialized { data, .. } => data.len() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(start: u64, size: u64, binding: Binding) -> Candidate {
        Candidate {
            start,
            size,
            limit: u64::MAX,
            binding,
            tag: 0,
        }
    }

    fn build(items: &[(Candidate, &str)]) -> Table {
        let mut b = TableBuilder::default();
        for (cand, name) in items {
            assert!(b.push(*cand, name));
        }
        b.build()
    }

    fn name_at(t: &Table, addr: u64) -> Option<&str> {
        t.lookup(addr).map(|e| t.name(&e))
    }

    /// The same table, written out and read back in place.
    fn round_trip(t: &Table) -> Table {
        let mut bytes = vec![0xaa; 3];
        t.write_to(&mut bytes);
        let layout = Table::layout(&bytes, 3).unwrap();
        assert_eq!(layout.end, bytes.len());
        Table::serialized(Bytes::Vec(bytes), layout)
    }

    #[test]
    fn serialized_tables_answer_like_built_ones() {
        let t = build(&[
            (c(0x100, 0x10, Binding::Global), "a"),
            (c(0x200, 0, Binding::Global), "b"),
            (c(0x300, 4, Binding::Local), "ccc"),
        ]);
        let back = round_trip(&t);
        assert_eq!(back.len(), 3);
        for addr in [
            0,
            0xff,
            0x100,
            0x10f,
            0x110,
            0x200,
            0x2ff,
            0x300,
            0x303,
            0x304,
            u64::MAX,
        ] {
            assert_eq!(name_at(&t, addr), name_at(&back, addr), "{addr:#x}");
        }
        assert_eq!(name_at(&round_trip(&back), 0x301), Some("ccc"));
        assert_eq!(round_trip(&build(&[])).lookup(5).map(|e| e.start), None);
    }

    #[test]
    fn serialized_lookups_across_blocks() {
        let names: Vec<String> = (0..1000).map(|i| format!("f{i}")).collect();
        let items: Vec<(Candidate, &str)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (c(0x1000 + 0x10 * i as u64, 8, Binding::Global), n.as_str()))
            .collect();
        let t = build(&items);
        let back = round_trip(&t);
        for addr in (0xff0..0x1000 + 0x10 * 1001).step_by(4) {
            assert_eq!(name_at(&t, addr), name_at(&back, addr), "{addr:#x}");
        }
        assert_eq!(name_at(&back, 0x1000 + 0x10 * 256), Some("f256"));
        assert_eq!(name_at(&back, 0x1000 + 0x10 * 999 + 7), Some("f999"));
    }

    #[test]
    fn short_or_corrupt_serialized_tables() {
        let t = build(&[(c(0x100, 0x10, Binding::Global), "abc")]);
        let mut bytes = Vec::new();
        t.write_to(&mut bytes);
        for cut in 0..bytes.len() {
            assert!(Table::layout(&bytes[..cut], 0).is_none(), "cut at {cut}");
        }
        // A name offset past the names is no name, not a panic (header 24, summary 8,
        // starts 8, then end and size before the name offset).
        bytes[24 + 8 + 8 + 16] = 0xff;
        let layout = Table::layout(&bytes, 0).unwrap();
        let bad = Table::serialized(Bytes::Vec(bytes), layout);
        assert_eq!(name_at(&bad, 0x100), Some(""));
    }

    #[test]
    fn sized_and_unsized() {
        let t = build(&[
            (c(0x100, 0x10, Binding::Global), "a"),
            (c(0x200, 0, Binding::Global), "b"),
            (
                Candidate {
                    limit: 0x280,
                    ..c(0x250, 0, Binding::Local)
                },
                "c",
            ),
        ]);
        assert_eq!(name_at(&t, 0xff), None);
        assert_eq!(name_at(&t, 0x100), Some("a"));
        assert_eq!(name_at(&t, 0x10f), Some("a"));
        assert_eq!(name_at(&t, 0x110), None);
        assert_eq!(name_at(&t, 0x200), Some("b"));
        assert_eq!(name_at(&t, 0x24f), Some("b"));
        assert_eq!(name_at(&t, 0x27f), Some("c"));
        assert_eq!(name_at(&t, 0x280), None);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn alias_preference_is_deterministic() {
        let items = [
            (c(0x100, 0, Binding::Local), "local_name"),
            (c(0x100, 0x20, Binding::Weak), "weak"),
            (c(0x100, 0, Binding::Global), "_gl"),
            (c(0x100, 0, Binding::Global), "globlong"),
            (c(0x100, 0, Binding::Global), "glob"),
            (c(0x100, 0, Binding::Global), "glob"),
        ];
        let t = build(&items);
        assert_eq!(t.len(), 1);
        assert_eq!(name_at(&t, 0x100), Some("glob"));
        // size taken from the sized alias
        assert_eq!(t.lookup(0x100).unwrap().size, 0x20);
        assert_eq!(name_at(&t, 0x120), None);
        let mut rev = items;
        rev.reverse();
        assert_eq!(name_at(&build(&rev), 0x11f), Some("glob"));
    }

    #[test]
    fn empty_table() {
        let t = build(&[]);
        assert_eq!(name_at(&t, 0), None);
        assert_eq!(name_at(&t, u64::MAX), None);
    }

    #[test]
    fn extremes() {
        let t = build(&[(c(u64::MAX, 5, Binding::Global), "top")]);
        assert_eq!(name_at(&t, u64::MAX), Some("top")); // end saturates: unbounded
        let t = build(&[(c(u64::MAX - 1, 5, Binding::Global), "top")]);
        assert_eq!(name_at(&t, u64::MAX - 1), Some("top"));
    }
}
