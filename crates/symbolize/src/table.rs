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
        Table {
            names: arena,
            entries,
        }
    }
}

/// The finished, immutable table.
#[derive(Debug, Default)]
pub(crate) struct Table {
    names: String,
    entries: Vec<Entry>,
}

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

impl Table {
    /// Append this table in a compact binary form (for on-disk caches).
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.names.len() as u64).to_le_bytes());
        for e in &self.entries {
            for v in [e.start, e.end, e.size] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            for v in [e.name_off, e.name_len, e.tag] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out.extend_from_slice(self.names.as_bytes());
    }

    /// Read a table written by [`Table::write_to`]; None when the bytes are not one
    /// (truncated, names out of bounds, entries out of order).
    pub fn read_from(r: &mut Reader<'_>) -> Option<Table> {
        let count = usize::try_from(r.u64()?).ok()?;
        let names_len = usize::try_from(r.u64()?).ok()?;
        if count.checked_mul(36)? > r.0.len() {
            return None;
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            let (start, end, size) = (r.u64()?, r.u64()?, r.u64()?);
            let (name_off, name_len, tag) = (r.u32()?, r.u32()?, r.u32()?);
            if (name_off as usize).checked_add(name_len as usize)? > names_len {
                return None;
            }
            entries.push(Entry {
                start,
                end,
                size,
                name_off,
                name_len,
                tag,
            });
        }
        if entries.windows(2).any(|w| w[0].start > w[1].start) {
            return None;
        }
        let names = String::from_utf8(r.bytes(names_len)?.to_vec()).ok()?;
        Some(Table { names, entries })
    }

    /// The entry whose range contains `addr`: greatest start <= addr, and
    /// addr below its end (an end of `u64::MAX` means unbounded).
    pub fn lookup(&self, addr: u64) -> Option<&Entry> {
        let i = self.entries.partition_point(|e| e.start <= addr);
        let e = self.entries.get(i.checked_sub(1)?)?;
        (addr < e.end || e.end == u64::MAX).then_some(e)
    }

    /// The name of an entry of this table.
    pub fn name(&self, e: &Entry) -> &str {
        let start = e.name_off as usize;
        self.names
            .get(start..start + e.name_len as usize)
            .unwrap_or("")
    }

    /// Number of distinct addresses.
    pub fn len(&self) -> usize {
        self.entries.len()
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
        t.lookup(addr).map(|e| t.name(e))
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
