//! Per-unit DWARF lookups through `.debug_aranges`.
//!
//! addr2line's context parses the header, root entry and abbreviation table of every unit of
//! a file before answering its first lookup: about 25 ms for libc's debug file, paid by every
//! profile that meets one new libc address. GCC writes `.debug_aranges`, which says which
//! unit covers an address, so only that unit is parsed here: its bytes of `.debug_info` become
//! a one-unit file for its own addr2line context. Only units whose abbreviations use no
//! reference out of the unit (`DW_FORM_ref_addr`, supplementary-file and type-signature forms)
//! are served this way. Units without aranges (rustc writes none for its own) are found by
//! the ranges of their root entries, read once on the first address no arange covers. For the
//! units that refer outside themselves, and when some unit's ranges cannot be read, the caller
//! falls back to the whole-file context, so answers never differ from it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use gimli::{constants, EndianSlice, Reader as _, RunTimeEndian, Section as _};

type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

/// One address range of a unit: `[begin, end)` is covered by the unit at `unit`.
#[derive(Clone, Copy, Debug)]
struct UnitRange {
    begin: u64,
    end: u64,
    unit: usize,
}

/// Units parsed and kept at once per file. A unit's context holds its parsed line program,
/// functions and inline tree (up to megabytes for a large Rust codegen unit); a long-lived
/// service names each address once (names are cached by address above this), so a unit
/// evicted here is parsed again only when an address it has not named yet comes.
const MAX_PARSED_UNITS: usize = 32;

/// Deepest nesting of debugging entries (the unit's root at 0) a unit may have to be named
/// through DWARF. addr2line parses a function's inline tree (`DW_TAG_inlined_subroutine`
/// within lexical blocks within ...) recursively, one call per level, so a hostile file
/// nesting thousands of levels would overflow the naming thread's stack and abort the
/// process. A unit nested deeper is never handed to addr2line: its addresses get no DWARF
/// frames (no inlined frames, no lines), and the symbol tables name their function. Real
/// code stays far below: profilerd's own debug build (rustc) nests 41 levels at most.
pub(crate) const MAX_DIE_DEPTH: isize = 256;

/// A unit's context, or `None` when the unit must go through the whole file.
struct CachedUnit<'a> {
    context: Option<addr2line::Context<Reader<'a>>>,
    /// The unit nests its entries deeper than [`MAX_DIE_DEPTH`]: DWARF names none of its
    /// addresses.
    too_deep: bool,
    /// Bytes of `.debug_info` of the unit.
    bytes: u64,
    /// When it was last used (a count of lookups).
    used: u64,
}

/// The parsed units, at most [`MAX_PARSED_UNITS`] with a context.
#[derive(Default)]
struct UnitContexts<'a> {
    units: HashMap<usize, CachedUnit<'a>>,
    /// Lookups so far.
    clock: u64,
    /// Entries with a context.
    parsed: usize,
    /// `clock` at the last [`UnitIndex::release_idle`].
    released_at: u64,
    /// Units found no deeper than [`MAX_DIE_DEPTH`] once (by offset): parsed again after a
    /// release without reading every entry again. At most one per unit of the file.
    shallow: HashSet<usize>,
}

/// Units found by address through `.debug_aranges`, each parsed on first use, the least
/// recently used dropped past [`MAX_PARSED_UNITS`].
pub(crate) struct UnitIndex<'a> {
    dwarf: gimli::Dwarf<Reader<'a>>,
    /// Sorted by `begin`.
    ranges: Vec<UnitRange>,
    /// Units that have aranges (by offset).
    with_aranges: std::collections::HashSet<usize>,
    /// The ranges of the units that have no aranges, from their root entries
    /// (`DW_AT_low_pc`/`DW_AT_high_pc`, `DW_AT_ranges`), sorted, consecutive ranges of one
    /// unit merged; `None` when some unit's ranges cannot be read (then such addresses go to
    /// the whole-file index). Read on the first address no arange covers: it walks every unit
    /// header, which touches every page of `.debug_info`. rustc writes no aranges for its own
    /// units, so without this every Rust frame would go through the whole-file index, which
    /// keeps every unit's ranges and every unit it ever parsed.
    rest: std::sync::OnceLock<Option<Vec<UnitRange>>>,
    /// By unit offset.
    contexts: Mutex<UnitContexts<'a>>,
    /// Bytes of `.debug_info` of the units held parsed (a size estimate of the index).
    parsed_bytes: AtomicU64,
    /// Units whose every entry was read to check their depth (for tests and statistics).
    depth_scans: AtomicU64,
    /// Unit contexts built so far, a unit built again after a release counted again (for
    /// statistics).
    built: AtomicU64,
}

impl<'a> UnitIndex<'a> {
    /// The index over `dwarf`'s aranges; `None` when the file has none.
    pub(crate) fn new(dwarf: gimli::Dwarf<Reader<'a>>) -> Option<UnitIndex<'a>> {
        let mut ranges = Vec::new();
        let mut with_aranges = std::collections::HashSet::new();
        let mut headers = dwarf.debug_aranges.headers();
        while let Ok(Some(header)) = headers.next() {
            let unit = header.debug_info_offset().0;
            with_aranges.insert(unit);
            let mut entries = header.entries();
            while let Ok(Some(entry)) = entries.next() {
                let range = entry.range();
                if range.begin < range.end {
                    ranges.push(UnitRange {
                        begin: range.begin,
                        end: range.end,
                        unit,
                    });
                }
            }
        }
        if ranges.is_empty() {
            return None;
        }
        ranges.sort_unstable_by_key(|r| (r.begin, r.end));
        Some(UnitIndex {
            dwarf,
            ranges,
            with_aranges,
            rest: std::sync::OnceLock::new(),
            contexts: Mutex::new(UnitContexts::default()),
            parsed_bytes: AtomicU64::new(0),
            depth_scans: AtomicU64::new(0),
            built: AtomicU64::new(0),
        })
    }

    /// The ranges of the units without aranges (see [`UnitIndex::rest`]).
    fn rest(&self) -> Option<&[UnitRange]> {
        self.rest
            .get_or_init(|| ranges_from_unit_entries(&self.dwarf, &self.with_aranges))
            .as_deref()
    }

    /// Units held parsed now.
    pub(crate) fn units_parsed(&self) -> usize {
        self.contexts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .parsed
    }

    /// How many times a unit's entries were all read to check its depth.
    pub(crate) fn depth_scans(&self) -> u64 {
        self.depth_scans.load(Ordering::Relaxed)
    }

    /// Unit contexts built so far (a unit built again after a release or an eviction counts
    /// again).
    pub(crate) fn built(&self) -> u64 {
        self.built.load(Ordering::Relaxed)
    }

    /// Bytes of `.debug_info` in the units held parsed now.
    pub(crate) fn parsed_bytes(&self) -> u64 {
        self.parsed_bytes.load(Ordering::Relaxed)
    }

    /// Run `f` on the one-unit context of the unit covering `addr`. False when the caller
    /// must ask the whole-file index instead (the unit refers outside itself, or no arange
    /// covers `addr` and the root entries' ranges cannot be read); true without calling `f`
    /// when no unit covers it.
    pub(crate) fn with_unit_context(
        &self,
        addr: u64,
        f: impl FnOnce(&addr2line::Context<Reader<'a>>),
    ) -> bool {
        let unit = match unit_for(&self.ranges, addr) {
            Some(unit) => unit,
            None => match self.rest() {
                Some(rest) => match unit_for(rest, addr) {
                    Some(unit) => unit,
                    // No unit covers `addr`: nothing names it.
                    None => return true,
                },
                None => return false,
            },
        };
        let mut contexts = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        contexts.clock += 1;
        let now = contexts.clock;
        if !contexts.units.contains_key(&unit) {
            let checked = contexts.shallow.contains(&unit);
            let (context, bytes, too_deep) = self.unit_context(unit, checked);
            if !too_deep {
                contexts.shallow.insert(unit);
            }
            if context.is_some() {
                self.built.fetch_add(1, Ordering::Relaxed);
                if contexts.parsed >= MAX_PARSED_UNITS {
                    self.evict_least_used(&mut contexts);
                }
                contexts.parsed += 1;
                self.parsed_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            contexts.units.insert(
                unit,
                CachedUnit {
                    context,
                    too_deep,
                    bytes,
                    used: now,
                },
            );
        }
        let Some(cached) = contexts.units.get_mut(&unit) else {
            return false;
        };
        cached.used = now;
        if cached.too_deep {
            // Nothing from DWARF (see [`MAX_DIE_DEPTH`]); the symbol tables name it.
            return true;
        }
        match &cached.context {
            Some(ctx) => {
                f(ctx);
                true
            }
            None => false,
        }
    }

    /// Drop the parsed units no lookup used since the last call; returns how many.
    pub(crate) fn release_idle(&self) -> usize {
        let mut contexts = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        let since = contexts.released_at;
        let mut freed = 0;
        contexts.units.retain(|_, unit| {
            let idle = unit.context.is_some() && unit.used <= since;
            if idle {
                freed += 1;
                self.parsed_bytes.fetch_sub(unit.bytes, Ordering::Relaxed);
            }
            !idle
        });
        contexts.parsed -= freed;
        contexts.released_at = contexts.clock;
        freed
    }

    /// Drop the parsed unit used least recently.
    fn evict_least_used(&self, contexts: &mut UnitContexts<'a>) {
        let oldest = contexts
            .units
            .iter()
            .filter(|(_, u)| u.context.is_some())
            .min_by_key(|(_, u)| u.used)
            .map(|(&offset, _)| offset);
        if let Some(unit) = oldest.and_then(|offset| contexts.units.remove(&offset)) {
            contexts.parsed -= 1;
            self.parsed_bytes.fetch_sub(unit.bytes, Ordering::Relaxed);
        }
    }

    /// The one-unit context of the unit at `offset` (`None` when it refers outside itself or
    /// cannot be read), its bytes of `.debug_info`, and whether it nests deeper than
    /// [`MAX_DIE_DEPTH`] (then no context, and no whole-file lookup either). The depth is
    /// checked here, unless `depth_checked` (found shallow before), never per lookup.
    fn unit_context(
        &self,
        offset: usize,
        depth_checked: bool,
    ) -> (Option<addr2line::Context<Reader<'a>>>, u64, bool) {
        let base = &self.dwarf;
        let header = base
            .debug_info
            .header_from_offset(gimli::DebugInfoOffset(offset));
        let Ok(header) = header else {
            return (None, 0, false);
        };
        if !depth_checked {
            self.depth_scans.fetch_add(1, Ordering::Relaxed);
            if nested_too_deep(base, &header) {
                tracing::warn!(
                    offset,
                    max = MAX_DIE_DEPTH,
                    "DWARF unit nested too deep; not named through DWARF"
                );
                return (None, 0, true);
            }
        }
        if !self_contained(base, &header) {
            tracing::trace!(offset, "unit refers outside itself; whole-file index");
            return (None, 0, false);
        }
        let info: &'a [u8] = base.debug_info.reader().slice();
        let Some(unit_bytes) = offset
            .checked_add(header.length_including_self())
            .and_then(|end| info.get(offset..end))
        else {
            return (None, 0, false);
        };
        let endian = base.debug_info.reader().endian();
        let dwarf = gimli::Dwarf {
            debug_abbrev: base.debug_abbrev,
            debug_addr: base.debug_addr,
            debug_aranges: EndianSlice::new(&[], endian).into(),
            debug_info: EndianSlice::new(unit_bytes, endian).into(),
            debug_line: base.debug_line,
            debug_line_str: base.debug_line_str,
            debug_str: base.debug_str,
            debug_str_offsets: base.debug_str_offsets,
            debug_types: base.debug_types,
            locations: base.locations,
            ranges: base.ranges,
            file_type: base.file_type,
            sup: None,
            abbreviations_cache: Default::default(),
        };
        (
            addr2line::Context::from_dwarf(dwarf).ok(),
            unit_bytes.len() as u64,
            false,
        )
    }
}

/// Whether the unit's debugging entries nest deeper than [`MAX_DIE_DEPTH`]. One iterative
/// pass over the entries, their attributes skipped unread; it stops at the first entry that
/// cannot be read (addr2line reads no further either).
fn nested_too_deep(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    header: &gimli::UnitHeader<Reader<'_>>,
) -> bool {
    let scan = || -> gimli::Result<bool> {
        let abbrevs = dwarf.abbreviations(header)?;
        let mut entries = header.entries_raw(&abbrevs, None)?;
        while !entries.is_empty() {
            if entries.next_depth() > MAX_DIE_DEPTH {
                return Ok(true);
            }
            if let Some(abbrev) = entries.read_abbreviation()? {
                entries.skip_attributes(abbrev.attributes())?;
            }
        }
        Ok(false)
    };
    scan().unwrap_or(false)
}

/// Whether some unit of `dwarf` nests deeper than [`MAX_DIE_DEPTH`] (see
/// [`nested_too_deep`]); the scan stops at the first unit header that cannot be read.
pub(crate) fn any_unit_too_deep(dwarf: &gimli::Dwarf<Reader<'_>>) -> bool {
    let mut units = dwarf.units();
    loop {
        match units.next() {
            Ok(Some(header)) if nested_too_deep(dwarf, &header) => return true,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return false,
        }
    }
}

/// The unit offset whose range in `ranges` (sorted by `begin`) holds `addr`: the last range
/// starting at or before it that also ends after it (overlapping ranges are checked
/// backwards, a few).
fn unit_for(ranges: &[UnitRange], addr: u64) -> Option<usize> {
    let after = ranges.partition_point(|r| r.begin <= addr);
    ranges[..after]
        .iter()
        .rev()
        .take(8)
        .find(|r| addr < r.end)
        .map(|r| r.unit)
}

/// Bytes between two ranges of one unit that merging may cover (the padding between
/// functions); a wider gap stays a gap.
const MERGE_GAP: u64 = 64;

/// The ranges of every unit not in `with_aranges`, from its root entry, sorted by `begin`,
/// consecutive ranges of the same unit merged across padding (a codegen unit's functions mostly sit
/// together, so a few ranges per unit remain); `None` when a unit cannot be read.
fn ranges_from_unit_entries(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    with_aranges: &std::collections::HashSet<usize>,
) -> Option<Vec<UnitRange>> {
    let mut out = Vec::new();
    let mut headers = dwarf.debug_info.units();
    while let Some(header) = headers.next().ok()? {
        let offset = header.offset().as_debug_info_offset()?.0;
        if with_aranges.contains(&offset) {
            continue;
        }
        let unit = dwarf.unit(header).ok()?;
        let mut ranges = dwarf.unit_ranges(&unit).ok()?;
        while let Some(range) = ranges.next().ok()? {
            if range.begin < range.end {
                out.push(UnitRange {
                    begin: range.begin,
                    end: range.end,
                    unit: offset,
                });
            }
        }
    }
    out.sort_unstable_by_key(|r| (r.begin, r.end));
    let mut merged: Vec<UnitRange> = Vec::with_capacity(out.len() / 4);
    for range in out {
        match merged.last_mut() {
            Some(last) if last.unit == range.unit && range.begin <= last.end + MERGE_GAP => {
                last.end = last.end.max(range.end)
            }
            _ => merged.push(range),
        }
    }
    merged.shrink_to_fit();
    tracing::trace!(ranges = merged.len(), "unit ranges from root entries");
    Some(merged)
}

/// Whether no attribute form of the unit's abbreviations refers outside the unit.
fn self_contained(
    dwarf: &gimli::Dwarf<Reader<'_>>,
    header: &gimli::UnitHeader<Reader<'_>>,
) -> bool {
    let Some(table) = dwarf
        .debug_abbrev
        .reader()
        .slice()
        .get(header.debug_abbrev_offset().0..)
    else {
        return false;
    };
    let mut r = EndianSlice::new(table, dwarf.debug_abbrev.reader().endian());
    forms_self_contained(&mut r).unwrap_or(false)
}

/// Walks one abbreviation table (code, tag, children flag, then (attribute, form) pairs up to
/// (0, 0); a zero code ends the table) and rejects forms that point outside the unit.
fn forms_self_contained(r: &mut Reader<'_>) -> gimli::Result<bool> {
    loop {
        if r.read_uleb128()? == 0 {
            return Ok(true);
        }
        r.read_uleb128()?; // tag
        r.read_u8()?; // has children
        loop {
            let name = r.read_uleb128()?;
            let form = constants::DwForm(r.read_uleb128_u16()?);
            if name == 0 && form.0 == 0 {
                break;
            }
            if matches!(
                form,
                constants::DW_FORM_ref_addr
                    | constants::DW_FORM_ref_sig8
                    | constants::DW_FORM_ref_sup4
                    | constants::DW_FORM_ref_sup8
                    | constants::DW_FORM_strp_sup
                    | constants::DW_FORM_GNU_ref_alt
                    | constants::DW_FORM_GNU_strp_alt
                    | constants::DW_FORM_indirect
            ) {
                return Ok(false);
            }
            if form == constants::DW_FORM_implicit_const {
                r.read_sleb128()?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uleb(out: &mut Vec<u8>, mut v: u64) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn table(forms: &[u16]) -> Vec<u8> {
        let mut t = Vec::new();
        uleb(&mut t, 1);
        uleb(&mut t, constants::DW_TAG_subprogram.0.into());
        t.push(0);
        for &f in forms {
            uleb(&mut t, constants::DW_AT_name.0.into());
            uleb(&mut t, f.into());
            if f == constants::DW_FORM_implicit_const.0 {
                t.push(0x7f); // SLEB -1
            }
        }
        t.extend_from_slice(&[0, 0, 0]);
        t
    }

    fn check(bytes: &[u8]) -> gimli::Result<bool> {
        forms_self_contained(&mut EndianSlice::new(bytes, RunTimeEndian::Little))
    }

    #[test]
    fn unit_local_forms_are_self_contained() {
        let forms = [
            constants::DW_FORM_strp.0,
            constants::DW_FORM_ref4.0,
            constants::DW_FORM_implicit_const.0,
            constants::DW_FORM_sec_offset.0,
        ];
        assert!(check(&table(&forms)).unwrap());
    }

    #[test]
    fn references_out_of_the_unit_are_not() {
        for form in [
            constants::DW_FORM_ref_addr,
            constants::DW_FORM_GNU_ref_alt,
            constants::DW_FORM_ref_sup4,
            constants::DW_FORM_indirect,
        ] {
            let t = table(&[constants::DW_FORM_strp.0, form.0]);
            assert!(!check(&t).unwrap(), "{form}");
        }
    }

    #[test]
    fn a_truncated_table_is_an_error() {
        let t = table(&[constants::DW_FORM_strp.0]);
        for cut in 1..t.len() {
            assert!(check(&t[..cut]).is_err(), "cut at {cut}");
        }
    }
}
