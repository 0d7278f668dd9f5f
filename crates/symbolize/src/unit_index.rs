//! Per-unit DWARF lookups through `.debug_aranges`.
//!
//! addr2line's context parses the header, root entry and abbreviation table of every unit of
//! a file before answering its first lookup: about 25 ms for libc's debug file, paid by every
//! profile that meets one new libc address. GCC writes `.debug_aranges`, which says which
//! unit covers an address, so only that unit is parsed here: its bytes of `.debug_info` become
//! a one-unit file for its own addr2line context. Only units whose abbreviations use no
//! reference out of the unit (`DW_FORM_ref_addr`, supplementary-file and type-signature forms)
//! are served this way; for the others, and for addresses no arange covers, the caller falls
//! back to the whole-file context, so answers never differ from it.

use std::collections::HashMap;
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

/// Units found by address through `.debug_aranges`, each parsed on first use.
pub(crate) struct UnitIndex<'a> {
    dwarf: gimli::Dwarf<Reader<'a>>,
    /// Sorted by `begin`.
    ranges: Vec<UnitRange>,
    /// Units that have aranges (by offset).
    with_aranges: std::collections::HashSet<usize>,
    /// Whether every unit of `.debug_info` has aranges: then an address no range covers is
    /// in no unit (the whole-file index takes a unit's ranges from its aranges too). Found
    /// out on the first such address: it walks every unit header, which touches every page
    /// of `.debug_info`.
    complete: std::sync::OnceLock<bool>,
    /// By unit offset: its context, or `None` when the unit must go through the whole file.
    contexts: Mutex<HashMap<usize, Option<addr2line::Context<Reader<'a>>>>>,
    /// Bytes of `.debug_info` of the units parsed so far (a size estimate of the index).
    parsed_bytes: AtomicU64,
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
            complete: std::sync::OnceLock::new(),
            contexts: Mutex::new(HashMap::new()),
            parsed_bytes: AtomicU64::new(0),
        })
    }

    fn complete(&self) -> bool {
        *self.complete.get_or_init(|| {
            let mut units = self.dwarf.debug_info.units();
            loop {
                match units.next() {
                    Ok(Some(header)) => {
                        let covered = header
                            .offset()
                            .as_debug_info_offset()
                            .is_some_and(|o| self.with_aranges.contains(&o.0));
                        if !covered {
                            return false;
                        }
                    }
                    Ok(None) => return true,
                    Err(_) => return false,
                }
            }
        })
    }

    /// Units parsed so far.
    pub(crate) fn units_parsed(&self) -> usize {
        self.contexts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|c| c.is_some())
            .count()
    }

    /// Bytes of `.debug_info` in the units parsed so far.
    pub(crate) fn parsed_bytes(&self) -> u64 {
        self.parsed_bytes.load(Ordering::Relaxed)
    }

    /// Run `f` on the one-unit context of the unit covering `addr`. False when the caller
    /// must ask the whole-file index instead (no arange covers `addr` but some unit has none,
    /// or the unit refers outside itself); true without calling `f` when no unit covers it.
    pub(crate) fn with_unit_context(
        &self,
        addr: u64,
        f: impl FnOnce(&addr2line::Context<Reader<'a>>),
    ) -> bool {
        let Some(unit) = self.unit_for(addr) else {
            return self.complete();
        };
        let mut contexts = self.contexts.lock().unwrap_or_else(|e| e.into_inner());
        let ctx = contexts
            .entry(unit)
            .or_insert_with(|| self.unit_context(unit));
        match ctx {
            Some(ctx) => {
                f(ctx);
                true
            }
            None => false,
        }
    }

    /// The unit offset whose arange holds `addr` (the last range starting at or before it
    /// that also ends after it; overlapping ranges are checked backwards).
    fn unit_for(&self, addr: u64) -> Option<usize> {
        let after = self.ranges.partition_point(|r| r.begin <= addr);
        self.ranges[..after]
            .iter()
            .rev()
            .take(8)
            .find(|r| addr < r.end)
            .map(|r| r.unit)
    }

    fn unit_context(&self, offset: usize) -> Option<addr2line::Context<Reader<'a>>> {
        let base = &self.dwarf;
        let header = base
            .debug_info
            .header_from_offset(gimli::DebugInfoOffset(offset))
            .ok()?;
        if !self_contained(base, &header) {
            tracing::trace!(offset, "unit refers outside itself; whole-file index");
            return None;
        }
        let info: &'a [u8] = base.debug_info.reader().slice();
        let end = offset.checked_add(header.length_including_self())?;
        let unit_bytes = info.get(offset..end)?;
        self.parsed_bytes
            .fetch_add(unit_bytes.len() as u64, Ordering::Relaxed);
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
        addr2line::Context::from_dwarf(dwarf).ok()
    }
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
