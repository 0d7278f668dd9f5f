//! The unwind sections of a binary (.eh_frame, .eh_frame_hdr, .debug_frame, .text) and its
//! PT_LOAD segments, shared zero-copy through one mapping of the file.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;
use object::{Object, ObjectSection, ObjectSegment};
use procmap::Access;

use crate::cfi_scan;
use crate::error::UnwindError;
use crate::section::{Section, SectionData};
use crate::sys;

/// Largest compressed `.debug_frame` that is decompressed (corrupt sizes are refused).
const MAX_DECOMPRESSED: u64 = 64 << 20;
/// Most a compressed `.debug_frame` may expand relative to its compressed bytes (real call
/// frame information compresses a few times; a bomb thousands).
const MAX_RATIO: u64 = 64;

/// A compressed section's bytes, trusting neither its declared size nor its stream: refused
/// when it declares more than [`MAX_DECOMPRESSED`] or [`MAX_RATIO`] times its compressed size
/// (at least 1 MiB), and stopped as soon as it expands past what it declared.
fn decompress_bounded(c: &object::CompressedData<'_>) -> Option<Vec<u8>> {
    use std::io::Read;
    let cap = (c.data.len() as u64)
        .saturating_mul(MAX_RATIO)
        .clamp(1 << 20, MAX_DECOMPRESSED);
    let declared = c.uncompressed_size;
    if declared > cap {
        tracing::warn!(
            declared,
            cap,
            "compressed .debug_frame over its cap; skipped"
        );
        return None;
    }
    let mut out = Vec::with_capacity(declared as usize);
    let mut input = c.data;
    match c.format {
        object::CompressionFormat::Zlib => {
            flate2::read::ZlibDecoder::new(input)
                .take(declared + 1)
                .read_to_end(&mut out)
                .ok()?;
        }
        object::CompressionFormat::Zstandard => {
            while !input.is_empty() && out.len() as u64 <= declared {
                let left = declared + 1 - out.len() as u64;
                ruzstd::StreamingDecoder::new(&mut input)
                    .ok()?
                    .take(left)
                    .read_to_end(&mut out)
                    .ok()?;
            }
        }
        _ => return None,
    }
    (out.len() as u64 == declared).then_some(out)
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
    /// Code ranges (file addresses) of signal trampolines, from `.eh_frame` FDEs whose CIE
    /// has the `S` augmentation.
    pub signal_trampolines: Vec<Range<u64>>,
    /// True when `.debug_frame` describes code that `.eh_frame` does not (a binary built with
    /// `-fno-asynchronous-unwind-tables -g`: its `.eh_frame` holds only the C runtime's start
    /// files). The unwinder then reads `.debug_frame`, and `.eh_frame` only for
    /// [`UnwindSections::eh_frame_ranges`].
    pub prefer_debug_frame: bool,
    /// When [`UnwindSections::prefer_debug_frame`]: the code ranges (file addresses, sorted)
    /// that `.eh_frame` describes.
    pub eh_frame_ranges: Vec<Range<u64>>,
    /// A Go binary's function table (`.gopclntab`): its stack-pointer deltas unwind Go code
    /// when the binary has no call-frame information (stripped of `.debug_frame`), and it
    /// says which functions are the outermost frames of Go stacks.
    pub go: Option<Arc<gosym::GoTable<SectionData>>>,
}

impl UnwindSections {
    /// Read the sections of the ELF file at `path`.
    pub fn load(path: &Path) -> Result<UnwindSections, UnwindError> {
        Self::load_as(path, &Access::Own)
    }

    /// Read the sections of the ELF file at `path`, opened with `access` (the access of the
    /// user whose path it is: see [`procmap::Access`]), without blocking.
    pub fn load_as(path: &Path, access: &Access) -> Result<UnwindSections, UnwindError> {
        let map = sys::map_file(path, access).map_err(|source| UnwindError::Map {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(Arc::new(map), Origin::File(path))
    }

    /// Read the sections of an ELF image held in memory (the vDSO, copied from this process).
    pub fn from_image(image: &[u8]) -> Result<UnwindSections, UnwindError> {
        const WHAT: &str = "in-memory image";
        let map = sys::copy_to_map(image).map_err(|source| UnwindError::CopyImage {
            what: WHAT,
            len: image.len(),
            source,
        })?;
        Self::parse(Arc::new(map), Origin::Image(WHAT))
    }

    fn parse(map: Arc<Mmap>, origin: Origin<'_>) -> Result<UnwindSections, UnwindError> {
        let file = object::File::parse(&map[..]).map_err(|source| match origin {
            Origin::File(path) => UnwindError::Parse {
                path: path.to_path_buf(),
                source,
            },
            Origin::Image(what) => UnwindError::ParseImage { what, source },
        })?;
        let base = map.as_ptr() as usize;
        let section = |name: &str| -> Option<Section> {
            let s = file.section_by_name(name)?;
            if !matches!(
                s.compressed_file_range().ok()?.format,
                object::CompressionFormat::None
            ) {
                // Only `.debug_frame` is read compressed (debug files often are): decompressed
                // once into a mapping of its own.
                if name != ".debug_frame" {
                    return None;
                }
                let bytes = decompress_bounded(&s.compressed_data().ok()?)?;
                let own = Arc::new(sys::copy_to_map(&bytes).ok()?);
                return Some(Section {
                    svma: s.address()..s.address().saturating_add(s.size()),
                    data: SectionData {
                        range: 0..bytes.len(),
                        map: own,
                    },
                });
            }
            let bytes = s.data().ok()?;
            if bytes.is_empty() {
                return None;
            }
            let start = bytes.as_ptr() as usize - base;
            Some(Section {
                svma: s.address()..s.address().saturating_add(s.size()),
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
        let text = section(".text");
        let debug_frame = section(".debug_frame");
        let go = match origin {
            Origin::File(path) => go_table(&map, &file, path),
            Origin::Image(_) => None,
        };
        let signal_trampolines = eh_frame
            .as_ref()
            .map(|eh| cfi_scan::signal_trampolines(eh, text.as_ref()))
            .unwrap_or_default();
        let mut sections = UnwindSections {
            text,
            eh_frame,
            eh_frame_hdr,
            debug_frame,
            segments,
            signal_trampolines,
            prefer_debug_frame: false,
            eh_frame_ranges: Vec::new(),
            go,
        };
        sections.choose_call_frame_section();
        Ok(sections)
    }

    /// Decide whether `.debug_frame` is read instead of `.eh_frame` (see
    /// [`UnwindSections::prefer_debug_frame`]).
    fn choose_call_frame_section(&mut self) {
        self.prefer_debug_frame = false;
        self.eh_frame_ranges = Vec::new();
        if self.eh_frame.is_none() && self.debug_frame.is_some() {
            // Only `.debug_frame` (Go binaries): framehop reads it when given no `.eh_frame`.
            self.prefer_debug_frame = true;
            return;
        }
        if let (Some(eh), Some(debug)) = (&self.eh_frame, &self.debug_frame) {
            let ranges = cfi_scan::eh_frame_fde_ranges(eh, self.text.as_ref());
            if cfi_scan::debug_frame_adds_code(debug, &ranges) {
                self.prefer_debug_frame = true;
                self.eh_frame_ranges = ranges;
            }
        }
    }

    /// Whether the binary's own call-frame information may miss most of its code: it has no
    /// `.debug_frame`, and no `.eh_frame` or a short one that describes less than half of
    /// `.text` (a stripped `-fno-asynchronous-unwind-tables` build, whose `.debug_frame` went to
    /// a separate debug file). Tiny programs can pass too (the C runtime's helpers in `.text`
    /// have no entries): the only cost is a search for a debug file.
    pub fn may_lack_call_frame_info(&self) -> bool {
        // A Go binary's function table has what unwinding needs.
        if self.debug_frame.is_some() || self.go.is_some() {
            return false;
        }
        let Some(text) = &self.text else {
            return false;
        };
        let Some(eh) = &self.eh_frame else {
            return true;
        };
        // Many FDEs: the code is described (the header says how many without a parse).
        if self
            .eh_frame_hdr
            .as_ref()
            .and_then(cfi_scan::eh_frame_hdr_fde_count)
            .is_some_and(|n| n > 64)
        {
            return false;
        }
        // Saturating: corrupt FDEs may claim any length.
        let covered = cfi_scan::eh_frame_fde_ranges(eh, Some(text))
            .iter()
            .fold(0u64, |sum, r| sum.saturating_add(r.end - r.start));
        covered < text.svma.end.saturating_sub(text.svma.start) / 2
    }

    /// Take `.debug_frame` from a separate debug file of this binary (its `.eh_frame` is kept
    /// for the code it describes). False: the debug file has no `.debug_frame`.
    pub fn add_debug_frame_from(&mut self, debug_file: &Path) -> Result<bool, UnwindError> {
        self.add_debug_frame_from_as(debug_file, &Access::Own)
    }

    /// [`UnwindSections::add_debug_frame_from`], opening the debug file with `access`.
    pub fn add_debug_frame_from_as(
        &mut self,
        debug_file: &Path,
        access: &Access,
    ) -> Result<bool, UnwindError> {
        let Some(debug_frame) = UnwindSections::load_as(debug_file, access)?.debug_frame else {
            return Ok(false);
        };
        self.debug_frame = Some(debug_frame);
        self.choose_call_frame_section();
        Ok(true)
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
        self.eh_frame.is_some() || self.debug_frame.is_some() || self.go.is_some()
    }

    /// Bytes of address space held by the mappings these sections are read from (the whole
    /// binary, the whole debug file a `.debug_frame` came from, a decompressed copy): what
    /// dropping the sections gives back once no process's unwinder uses them.
    pub fn mapped_bytes(&self) -> u64 {
        let mut maps: [(usize, usize); 5] = [(0, 0); 5];
        let sections = [
            &self.text,
            &self.eh_frame,
            &self.eh_frame_hdr,
            &self.debug_frame,
        ];
        for (slot, section) in maps.iter_mut().zip(sections) {
            if let Some(s) = section {
                *slot = s.data.mapping();
            }
        }
        if let Some(go) = &self.go {
            maps[4] = go.data().mapping();
        }
        let mut total = 0u64;
        for (i, &(addr, len)) in maps.iter().enumerate() {
            if addr != 0 && !maps[..i].iter().any(|&(a, _)| a == addr) {
                total += len as u64;
            }
        }
        total
    }
}

/// The Go function table of a Go binary (or of a binary without section headers, which may be
/// one), read in place from the binary's mapping.
fn go_table(
    map: &Arc<Mmap>,
    file: &object::File<'_>,
    path: &Path,
) -> Option<Arc<gosym::GoTable<SectionData>>> {
    if !gosym::is_go_binary(&map[..]) && file.sections().next().is_some() {
        return None;
    }
    let whole = SectionData {
        map: map.clone(),
        range: 0..map.len(),
    };
    match gosym::GoTable::from_elf(whole) {
        Ok(table) => Some(Arc::new(table)),
        Err(err) => {
            tracing::debug!(path = %path.display(), %err, "no Go function table");
            None
        }
    }
}

/// Where an ELF image came from, for errors.
#[derive(Clone, Copy)]
enum Origin<'a> {
    File(&'a Path),
    Image(&'static str),
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

    /// A zstd frame of RLE blocks: 4 bytes each expanding to 128 KiB.
    fn zstd_bomb(blocks: usize) -> Vec<u8> {
        let mut out = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x38];
        for i in 0..blocks {
            let header = ((128u32 << 10) << 3) | (1 << 1) | u32::from(i + 1 == blocks);
            out.extend_from_slice(&header.to_le_bytes()[..3]);
            out.push(0);
        }
        out
    }

    #[test]
    fn compressed_debug_frame_is_bounded() {
        let compressed = |data: &'static [u8], size| object::CompressedData {
            format: object::CompressionFormat::Zstandard,
            data,
            uncompressed_size: size,
        };
        let bomb: &'static [u8] = Box::leak(zstd_bomb(16_000).into_boxed_slice());
        // 64 KB expanding to 2 GB: declaring 1 MiB, stopped there; declaring 2 GB, refused.
        assert!(decompress_bounded(&compressed(bomb, 1 << 20)).is_none());
        assert!(decompress_bounded(&compressed(bomb, 16_000 << 17)).is_none());
        // An honest small frame decompresses.
        let small: &'static [u8] = Box::leak(zstd_bomb(2).into_boxed_slice());
        assert_eq!(
            decompress_bounded(&compressed(small, 2 << 17)).map(|v| v.len()),
            Some(2 << 17)
        );
    }

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
            signal_trampolines: Vec::new(),
            prefer_debug_frame: false,
            eh_frame_ranges: Vec::new(),
            go: None,
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
