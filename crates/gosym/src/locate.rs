//! Finding a Go binary's function table in its ELF file: the `.gopclntab` section, or, when
//! the section headers are gone, the table's header in the data segments; and the runtime's
//! module data, which says where function data (inline trees) is.

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};
use tracing::debug;

use crate::bytes::word_at;
use crate::error::GoSymError;
use crate::table::{GoTable, Placement, Segment, Version};

/// Bytes of data segments searched at most for a table header or the module data.
const MAX_SCAN: usize = 1 << 30;

/// Whether the ELF file `data` looks like a Go binary: it has a `.gopclntab` section or a Go
/// build-id note (`.note.go.buildid`). Reads only the headers.
pub fn is_go_binary(data: &[u8]) -> bool {
    let Ok(file) = object::File::parse(data) else {
        return false;
    };
    file.section_by_name(".gopclntab").is_some()
        || file.section_by_name(".note.go.buildid").is_some()
        || file.section_by_name(".go.buildinfo").is_some()
}

impl<B: AsRef<[u8]>> GoTable<B> {
    /// Read the function table of the ELF file `data` (the whole file): the `.gopclntab`
    /// section; or, for a Go binary whose table has no section of its own (section headers
    /// stripped, or a position-independent build), a table header found in its data segments.
    /// [`GoSymError::NotFound`] for a binary that is not Go (searched only when it has no
    /// section headers at all, or is marked as Go).
    pub fn from_elf(data: B) -> Result<GoTable<B>, GoSymError> {
        let (placement, symtab_gofunc) = {
            let bytes = data.as_ref();
            let file = object::File::parse(bytes).map_err(|e| GoSymError::Elf(e.to_string()))?;
            if !file.is_little_endian() {
                return Err(GoSymError::BadHeader("big-endian binaries are not read"));
            }
            let segments: Vec<Segment> = file
                .segments()
                .filter_map(|s| {
                    let (offset, file_size) = s.file_range();
                    let writable = match s.flags() {
                        object::SegmentFlags::Elf { p_flags } => p_flags & object::elf::PF_W != 0,
                        _ => false,
                    };
                    (file_size > 0).then_some(Segment {
                        vaddr: s.address(),
                        offset,
                        file_size,
                        writable,
                    })
                })
                .collect();
            let text = file.section_by_name(".text").map(|s| s.address());
            let section = file
                .section_by_name(".gopclntab")
                .or_else(|| file.section_by_name(".data.rel.ro.gopclntab"));
            let placement = match section.and_then(|s| s.file_range().map(|r| (s.address(), r))) {
                Some((vaddr, (offset, size))) => Placement {
                    range: offset as usize..offset.saturating_add(size) as usize,
                    vaddr,
                    segments,
                    text,
                },
                None => {
                    let no_sections = file.sections().next().is_none();
                    if !no_sections && !is_go_binary(bytes) {
                        return Err(GoSymError::NotFound);
                    }
                    scan_for_header(bytes, segments, text).ok_or(GoSymError::NotFound)?
                }
            };
            let gofunc = file
                .symbols()
                .find(|s| matches!(s.name(), Ok("go:func.*" | "go.func.*")))
                .map(|s| s.address());
            (placement, gofunc)
        };
        let mut table = GoTable::new(data, placement)?;
        if table.version() != Version::Go116 {
            let gofunc = symtab_gofunc.or_else(|| table.find_gofunc());
            if gofunc.is_none() {
                debug!("Go module data not found: inlined calls are not reported");
            }
            table.set_gofunc(gofunc);
        }
        Ok(table)
    }

    /// Read a table held on its own (its header at the start of `data`, loaded at `vaddr`):
    /// names, lines and stack deltas, no inlined calls (their trees are outside the table).
    pub fn from_pclntab(data: B, vaddr: u64) -> Result<GoTable<B>, GoSymError> {
        let len = data.as_ref().len();
        GoTable::new(
            data,
            Placement {
                range: 0..len,
                vaddr,
                segments: Vec::new(),
                text: None,
            },
        )
    }
}

/// A table header in the non-executable segments: the first offset, aligned to 4 bytes, that
/// holds a known magic, zero padding, a valid quantum and pointer size, and from which a whole
/// table reads.
fn scan_for_header(data: &[u8], segments: Vec<Segment>, text: Option<u64>) -> Option<Placement> {
    let mut scanned = 0usize;
    for seg in &segments {
        let start = usize::try_from(seg.offset).ok()?;
        let end = start.saturating_add(usize::try_from(seg.file_size).ok()?);
        let Some(bytes) = data.get(start..end.min(data.len())) else {
            continue;
        };
        if scanned >= MAX_SCAN {
            break;
        }
        scanned += bytes.len();
        for at in (0..bytes.len().saturating_sub(8)).step_by(4) {
            let head = &bytes[at..at + 8];
            let magic = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            if Version::from_magic(magic).is_err()
                || head[4] != 0
                || head[5] != 0
                || !matches!(head[6], 1 | 2 | 4)
                || !matches!(head[7], 4 | 8)
            {
                continue;
            }
            let placement = Placement {
                range: start + at..end.min(data.len()),
                vaddr: seg.vaddr + at as u64,
                segments: segments.clone(),
                text,
            };
            match GoTable::new(data, placement.clone()) {
                Ok(t) if !t.is_empty() => {
                    debug!(offset = start + at, "Go function table found by its header");
                    return Some(placement);
                }
                _ => continue,
            }
        }
    }
    None
}

impl<B: AsRef<[u8]>> GoTable<B> {
    /// `moduledata.gofunc`, from the runtime's module data in the writable segments: the
    /// record that starts with a pointer to the table's header, then the function-name table
    /// (a slice at header + its offset), and whose `text` and `minpc` agree with the table.
    fn find_gofunc(&self) -> Option<u64> {
        let data = self.data_bytes();
        let p = usize::from(self.ptr_size());
        let header = self.vaddr();
        let funcnames = header + self.funcnames_offset();
        let gofunc_word = match self.version() {
            Version::Go116 => return None,
            // pcHeader, 6 slices, findfunctab, minpc, maxpc, text, etext, 5 pairs of
            // section bounds, end, gcdata, gcbss, types, etypes, rodata: then gofunc.
            Version::Go118 => 38,
            // … and covctrs, ecovctrs (Go 1.20).
            Version::Go120 => 40,
        };
        let mut scanned = 0usize;
        for seg in self.segments().iter().filter(|s| s.writable) {
            let start = usize::try_from(seg.offset).ok()?;
            let end = start.saturating_add(usize::try_from(seg.file_size).ok()?);
            let Some(bytes) = data.get(start..end.min(data.len())) else {
                continue;
            };
            if scanned >= MAX_SCAN {
                break;
            }
            scanned += bytes.len();
            let word = |at: usize, i: usize| word_at(bytes, at + i * p, self.ptr_size());
            for at in (0..bytes.len()).step_by(p) {
                if word(at, 0) != Some(header) || word(at, 1) != Some(funcnames) {
                    continue;
                }
                let minpc = word(at, 20);
                let text = word(at, 22);
                if minpc != Some(self.pc_range().start)
                    || text.is_none_or(|t| t > self.pc_range().start)
                {
                    continue;
                }
                let gofunc = word(at, gofunc_word)?;
                debug!(gofunc, "Go module data found");
                return (gofunc != 0).then_some(gofunc);
            }
        }
        None
    }
}
