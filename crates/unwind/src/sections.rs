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
                Some(LoadSegment {
                    offset,
                    file_size,
                    vaddr: seg.address(),
                })
                .filter(|_| file_size > 0)
            })
            .collect();
        Ok(UnwindSections {
            text: section(".text"),
            eh_frame: section(".eh_frame"),
            eh_frame_hdr: section(".eh_frame_hdr"),
            debug_frame: section(".debug_frame"),
            segments,
        })
    }

    /// The load bias of a mapping of this file at `start` with file offset `pgoff`: the value
    /// added to file addresses to get process addresses.
    pub fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        let seg = self
            .segments
            .iter()
            .find(|s| s.offset <= pgoff && pgoff < s.offset + s.file_size)
            .or_else(|| self.segments.iter().find(|s| s.offset & !0xfff == pgoff))?;
        let svma = seg.vaddr.wrapping_add(pgoff.wrapping_sub(seg.offset));
        Some(start.wrapping_sub(svma))
    }

    /// Whether there is any unwind information at all.
    pub fn has_unwind_info(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }
}
