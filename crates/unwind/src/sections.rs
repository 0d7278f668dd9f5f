//! The unwind sections of a binary (.eh_frame, .eh_frame_hdr, .debug_frame, .text) and its
//! PT_LOAD segments, shared zero-copy through one mapping of the file.

use std::ops::{Deref, Range};
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;
use object::{Object, ObjectSection, ObjectSegment};

use crate::sys;

/// A byte range of a mapped file: the data type handed to framehop.
#[derive(Clone)]
pub struct SectionData {
    map: Arc<Mmap>,
    range: Range<usize>,
}

impl Deref for SectionData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[self.range.clone()]
    }
}

/// One section: where the file says it is loaded (SVMA range), and its bytes.
#[derive(Clone)]
pub struct Section {
    /// Address range as stated in the file.
    pub svma: Range<u64>,
    /// The bytes.
    pub data: SectionData,
}

/// A PT_LOAD segment: file range and address.
#[derive(Clone, Copy, Debug)]
pub struct LoadSegment {
    /// File offset.
    pub offset: u64,
    /// Bytes in the file.
    pub file_size: u64,
    /// Address as stated in the file.
    pub vaddr: u64,
    /// Alignment (p_align).
    pub align: u64,
    /// Whether the segment is executable.
    pub executable: bool,
}

/// What unwinding needs from one binary.
#[derive(Clone)]
pub struct UnwindSections {
    /// `.text`.
    pub text: Option<Section>,
    /// `.eh_frame`.
    pub eh_frame: Option<Section>,
    /// `.eh_frame_hdr` (the binary-search index of .eh_frame).
    pub eh_frame_hdr: Option<Section>,
    /// `.debug_frame`.
    pub debug_frame: Option<Section>,
    /// PT_LOAD segments.
    pub segments: Vec<LoadSegment>,
}

impl UnwindSections {
    /// Read the sections of the ELF file at `path`.
    pub fn load(path: &Path) -> Result<UnwindSections, String> {
        let map = Arc::new(
            sys::map_file(path).map_err(|e| format!("cannot map {}: {e}", path.display()))?,
        );
        let file = object::File::parse(&map[..])
            .map_err(|e| format!("cannot parse {}: {e}", path.display()))?;
        let base = map.as_ptr() as usize;
        let section = |name: &str| -> Option<Section> {
            let s = file.section_by_name(name)?;
            // Compressed sections (.debug_frame can be) are left out rather than copied.
            if !matches!(
                s.compressed_file_range().ok()?.format,
                object::CompressionFormat::None
            ) {
                return None;
            }
            let bytes = s.data().ok()?;
            if bytes.is_empty() {
                return None;
            }
            let start = bytes.as_ptr() as usize - base;
            Some(Section {
                svma: s.address()..s.address() + s.size(),
                data: SectionData {
                    map: map.clone(),
                    range: start..start + bytes.len(),
                },
            })
        };
        let segments = file
            .segments()
            .filter_map(|seg| {
                let (offset, file_size) = seg.file_range();
                let executable = match seg.flags() {
                    object::SegmentFlags::Elf { p_flags } => p_flags & object::elf::PF_X != 0,
                    _ => false,
                };
                Some(LoadSegment {
                    offset,
                    file_size,
                    vaddr: seg.address(),
                    align: seg.align(),
                    executable,
                })
                .filter(|_| file_size > 0)
            })
            .collect();
        let eh_frame = section(".eh_frame");
        let eh_frame_hdr = section(".eh_frame_hdr").filter(|hdr| match &eh_frame {
            Some(eh_frame) => eh_frame_hdr_is_sound(hdr, eh_frame),
            None => false,
        });
        Ok(UnwindSections {
            text: section(".text"),
            eh_frame,
            eh_frame_hdr,
            debug_frame: section(".debug_frame"),
            segments,
        })
    }

    /// The load bias of a mapping of this file at `start` with file offset `pgoff`: the value
    /// added to file addresses to get process addresses.
    ///
    /// The mapping starts at the page holding its segment's first byte, which may also hold the
    /// end of the previous segment (linkers such as lld pack them so), so the segment is the
    /// one that starts in the mapping's first page, an executable one first.
    pub fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        let starts_in_first_page = |s: &&LoadSegment| {
            [0x1000, s.align.max(1)]
                .iter()
                .any(|&page| s.offset - s.offset % page == pgoff)
        };
        let seg = self
            .segments
            .iter()
            .filter(starts_in_first_page)
            .max_by_key(|s| s.executable)
            .or_else(|| {
                self.segments
                    .iter()
                    .find(|s| s.offset <= pgoff && pgoff < s.offset + s.file_size)
            })?;
        let svma = seg.vaddr.wrapping_add(pgoff.wrapping_sub(seg.offset));
        Some(start.wrapping_sub(svma))
    }

    /// Whether there is any unwind information at all.
    pub fn has_unwind_info(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }
}

/// Whether `.eh_frame_hdr`'s search table points only into `.eh_frame`. A table entry
/// pointing before it makes the unwinder's offset arithmetic underflow; such a header is left
/// out (the unwinder then indexes `.eh_frame` itself).
fn eh_frame_hdr_is_sound(hdr: &Section, eh_frame: &Section) -> bool {
    use gimli::{BaseAddresses, EhFrameHdr, NativeEndian, Pointer};
    let bases = BaseAddresses::default()
        .set_eh_frame_hdr(hdr.svma.start)
        .set_eh_frame(eh_frame.svma.start);
    let Ok(parsed) = EhFrameHdr::new(&hdr.data, NativeEndian).parse(&bases, 8) else {
        return false;
    };
    let inside = |p: Pointer| matches!(p, Pointer::Direct(a) if eh_frame.svma.contains(&a));
    if !inside(parsed.eh_frame_ptr()) {
        return false;
    }
    let Some(table) = parsed.table() else {
        return true;
    };
    let mut entries = table.iter(&bases);
    loop {
        match entries.next() {
            Ok(Some((_, fde))) if inside(fde) => {}
            Ok(None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(offset: u64, vaddr: u64, file_size: u64, executable: bool) -> LoadSegment {
        LoadSegment {
            offset,
            file_size,
            vaddr,
            align: 0x1000,
            executable,
        }
    }

    fn sections(segments: Vec<LoadSegment>) -> UnwindSections {
        UnwindSections {
            text: None,
            eh_frame: None,
            eh_frame_hdr: None,
            debug_frame: None,
            segments,
        }
    }

    #[test]
    fn bias_uses_the_segment_that_starts_in_the_mapped_page() {
        // lld: the text segment starts mid-page, right after the read-only segment, and its
        // addresses are one page ahead of its offsets.
        let s = sections(vec![
            seg(0, 0, 0xc33e8, false),
            seg(0xc33f0, 0xc43f0, 0x23a250, true),
        ]);
        let start = 0x5594_2ae8_a000;
        let bias = s.bias(start, 0xc3000).unwrap();
        assert_eq!(
            start + 0x3f0 - bias,
            0xc43f0,
            "the segment's first byte maps to its vaddr"
        );
    }

    #[test]
    fn bias_of_a_classic_layout() {
        // GNU ld: offsets and addresses agree; the mapping starts at the segment.
        let s = sections(vec![
            seg(0, 0, 0x1000, false),
            seg(0x1000, 0x1000, 0x2000, true),
        ]);
        assert_eq!(s.bias(0x7f00_0000_1000, 0x1000), Some(0x7f00_0000_0000));
        // A non-PIE executable: bias 0.
        let s = sections(vec![
            seg(0, 0x400000, 0x1000, false),
            seg(0x1000, 0x401000, 0x2000, true),
        ]);
        assert_eq!(s.bias(0x401000, 0x1000), Some(0));
    }
}
