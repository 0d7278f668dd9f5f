//! Facts read once per binary from its call-frame sections: where its signal trampolines are,
//! and which code each section describes.

use std::ops::Range;

use gimli::{
    BaseAddresses, CieOrFde, DebugFrame, EhFrame, EhFrameOffset, LittleEndian, UnwindSection,
};

use crate::section::Section;

/// At most this many FDEs are read from one section when measuring what it covers.
const MAX_FDES: usize = 1 << 20;

fn bases(eh_frame: &Section, text: Option<&Section>) -> BaseAddresses {
    let bases = BaseAddresses::default().set_eh_frame(eh_frame.svma.start);
    match text {
        Some(text) => bases.set_text(text.svma.start),
        None => bases,
    }
}

/// The code ranges (file addresses) described by `.eh_frame` FDEs whose CIE carries the `S`
/// augmentation: signal trampolines such as glibc's `__restore_rt`, which return into the
/// kernel's `rt_sigreturn` instead of a caller.
///
/// Only the CIEs are parsed on the way through the section (FDEs are skipped by their length
/// unless they point at such a CIE), so this stays cheap on large binaries.
pub(crate) fn signal_trampolines(eh_frame: &Section, text: Option<&Section>) -> Vec<Range<u64>> {
    let data: &[u8] = &eh_frame.data;
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
    };
    let mut signal_cies: Vec<usize> = Vec::new();
    let mut signal_fdes: Vec<usize> = Vec::new();
    let mut at = 0usize;
    while let Some(length) = u32_at(at) {
        // 0 ends the section; 0xffff_ffff (64-bit DWARF) is not used in .eh_frame by any
        // toolchain we know: stop rather than guess.
        if length == 0 || length == u32::MAX {
            break;
        }
        let id_at = at + 4;
        let Some(next) = id_at
            .checked_add(length as usize)
            .filter(|&n| n <= data.len())
        else {
            break;
        };
        let Some(id) = u32_at(id_at) else { break };
        if id == 0 {
            // A CIE: version byte, then the NUL-terminated augmentation string.
            let augmentation = data.get(id_at + 5..next).unwrap_or_default();
            let augmentation = &augmentation[..augmentation
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(augmentation.len())];
            if augmentation.first() == Some(&b'z') && augmentation.contains(&b'S') {
                signal_cies.push(at);
            }
        } else if !signal_cies.is_empty() {
            // An FDE: its CIE pointer counts back from the pointer's own position.
            if let Some(cie_at) = id_at.checked_sub(id as usize) {
                if signal_cies.contains(&cie_at) {
                    signal_fdes.push(at);
                }
            }
        }
        at = next;
    }
    if signal_fdes.is_empty() {
        return Vec::new();
    }
    let section = EhFrame::new(data, LittleEndian);
    let bases = bases(eh_frame, text);
    signal_fdes
        .into_iter()
        .filter_map(|at| {
            let fde = section
                .fde_from_offset(&bases, EhFrameOffset(at), EhFrame::cie_from_offset)
                .ok()?;
            let start = fde.initial_address();
            Some(start..start.checked_add(fde.len())?)
        })
        .collect()
}

/// The code ranges (file addresses) described by the FDEs of `.eh_frame`, sorted by start.
pub(crate) fn eh_frame_fde_ranges(eh_frame: &Section, text: Option<&Section>) -> Vec<Range<u64>> {
    let section = EhFrame::new(&eh_frame.data, LittleEndian);
    let bases = bases(eh_frame, text);
    let mut ranges = Vec::new();
    let mut entries = section.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        if ranges.len() >= MAX_FDES {
            break;
        }
        if let CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                let start = fde.initial_address();
                if let Some(end) = start.checked_add(fde.len()) {
                    ranges.push(start..end);
                }
            }
        }
    }
    ranges.sort_by_key(|r| r.start);
    ranges
}

/// Whether `.debug_frame` describes code that none of `eh_frame_ranges` (sorted) covers.
pub(crate) fn debug_frame_adds_code(debug_frame: &Section, eh_frame_ranges: &[Range<u64>]) -> bool {
    let mut section = DebugFrame::new(&debug_frame.data, LittleEndian);
    section.set_address_size(8);
    let bases = BaseAddresses::default();
    let mut fdes = 0usize;
    let mut entries = section.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        if fdes >= MAX_FDES {
            break;
        }
        if let CieOrFde::Fde(partial) = entry {
            fdes += 1;
            if let Ok(fde) = partial.parse(DebugFrame::cie_from_offset) {
                if fde.len() > 0 && !in_sorted_ranges(eh_frame_ranges, fde.initial_address()) {
                    return true;
                }
            }
        }
    }
    false
}

/// Whether `address` lies in one of `ranges` (sorted by start, not overlapping).
pub(crate) fn in_sorted_ranges(ranges: &[Range<u64>], address: u64) -> bool {
    let i = ranges.partition_point(|r| r.start <= address);
    i > 0 && ranges[i - 1].contains(&address)
}

/// The FDE count an `.eh_frame_hdr` states, when encoded the way GNU ld and lld write it
/// (version 1, a 4-byte `eh_frame_ptr`, a `udata4` count); None otherwise.
pub(crate) fn eh_frame_hdr_fde_count(hdr: &Section) -> Option<u32> {
    let data: &[u8] = &hdr.data;
    let (version, ptr_enc, count_enc) = (*data.first()?, *data.get(1)?, *data.get(2)?);
    // eh_frame_ptr: any 4-byte encoding (low nibble udata4 = 3 or sdata4 = 0xb).
    if version != 1 || !matches!(ptr_enc & 0x0f, 0x03 | 0x0b) || count_enc != 0x03 {
        return None;
    }
    Some(u32::from_le_bytes(data.get(8..12)?.try_into().ok()?))
}
