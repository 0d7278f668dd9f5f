//! The per-file symbolizer: a binary plus every debug-info source found for it, naming an
//! address from DWARF (inline frames and source lines), the Go function table, or the
//! symbol tables, in that order.
//!
//! [`FileSymbolizer::open`] finds the sources (cheaply: headers, notes and
//! symbol tables only; see [`DebugSearch`]); the DWARF sections are mapped, decompressed and
//! indexed on the first [`FileSymbolizer::frames`] call.

use std::path::Path;

use memmap2::Mmap;
use procmap::Access;

use crate::address::{FileOffset, SymbolAddr};
use crate::debug_search::{
    find_sup, inspect, plain_file_name, DwarfSource, Found, Inspect, SearchFrom,
};
use crate::demangle::function_name;
use crate::dwarf::{Dwarf, DwarfFile};
use crate::elf::{map_file_as, ElfFile, FileIdentity};
use crate::error::{hex, Error};
use crate::frame::cut_name;

pub use crate::debug_search::{crc32, DebugSearch, MAX_DEBUGLINK_BYTES};
pub use crate::frame::{ResolvedFrame, MAX_FRAME_NAME};

/// A binary plus all its debug info sources, opened once, DWARF parsed
/// lazily.
///
/// `Send + Sync`: methods take `&self`; the DWARF index is built once
/// behind a `OnceLock` and lookups are serialized by a `Mutex` (addr2line's
/// context caches parsed units internally and is not `Sync`).
pub struct FileSymbolizer {
    elf: ElfFile,
    /// When `elf` is a debug file standing in for an unreadable binary: its
    /// `PT_LOAD` file offsets are meaningless (objcopy zeroes them), so
    /// they are reconstructed as (offset, vaddr, size).
    rebuilt_segments: Option<Vec<(u64, u64, u64)>>,
    /// Symbol tables of the debug sources, in search order.
    extra_symbols: Vec<ElfFile>,
    sources: Vec<String>,
    dwarf: Option<Dwarf>,
    /// Never use the per-unit index (see [`FileSymbolizer::set_whole_file_dwarf`]).
    whole_file_dwarf: bool,
    /// A Go binary's function table: frames where DWARF has none (stripped binaries).
    go: Option<gosym::GoTable<Mmap>>,
}

/// The binary itself, opened, when it is the one profiled.
struct OwnBinary {
    elf: ElfFile,
    info: Inspect,
    map: Mmap,
    identity: FileIdentity,
    go: Option<gosym::GoTable<Mmap>>,
}

/// The binary read from `read_from` (named `path`), if readable and its build-id is
/// `expected_build_id` (when given); its Go function table too.
fn open_binary(
    read_from: &Path,
    path: &Path,
    expected_build_id: Option<&[u8]>,
    search: &DebugSearch,
    access: &Access,
) -> Result<OwnBinary, Error> {
    let opened = map_file_as(read_from, access).and_then(|(map, identity)| {
        let elf = ElfFile::parse_cached(
            &map,
            &path.display().to_string(),
            search.symbol_cache.as_deref().map(|dir| (dir, identity)),
        )?;
        Ok((elf, map, identity))
    });
    let (elf, map, identity) = match opened {
        Ok(o) => o,
        Err(err) => {
            tracing::debug!(%err, "cannot read binary; looking for its debug file only");
            return Err(err);
        }
    };
    let info = inspect(&map);
    match (expected_build_id, elf.build_id()) {
        (Some(want), got) if got != Some(want) => {
            let err = Error::BuildIdMismatch {
                path: path.to_owned(),
                expected: hex(want),
                found: got.map_or_else(|| "none".to_owned(), hex),
            };
            tracing::debug!(%err, "binary is not the one profiled; looking for its debug file only");
            Err(err)
        }
        _ => {
            let go = crate::go::open_table(read_from, &map);
            Ok(OwnBinary {
                elf,
                info,
                map,
                identity,
                go,
            })
        }
    }
}

/// The DWARF of `source`, with the dwz supplementary file it names (if found).
fn open_dwarf(source: DwarfSource, search: &DebugSearch) -> Dwarf {
    let DwarfSource {
        name,
        map,
        identity,
        altlink,
        access,
    } = source;
    let sup = altlink
        .as_ref()
        .and_then(|(file, id)| find_sup(Path::new(&name), file, id, search, &access))
        .map(|(name, map, identity)| {
            DwarfFile::new(name, map, identity, search.section_cache.clone())
        });
    let main = DwarfFile::new(name, map, identity, search.section_cache.clone());
    Dwarf::new(main, sup, access)
}

impl FileSymbolizer {
    /// Open the binary at `path` (as the process sees it, e.g.
    /// `/proc/PID/root/usr/bin/x`) and find its debug info, in this order:
    /// the binary itself; `<system>/.build-id/xx/rest.debug`;
    /// `.gnu_debuglink` next to the binary, in its `.debug/` folder and
    /// under `<system>/<dir of binary>` (CRC checked, build-id too when both
    /// have one); MiniDebugInfo (`.gnu_debugdata`); then each extra
    /// directory's `.build-id/xx/rest.debug` and `<dir>/<debuglink name>`.
    /// The search stops at the first source with DWARF; every matching
    /// source's symbol table is kept as a fallback.
    ///
    /// `expected_build_id` is the build-id the kernel reported (None if
    /// unknown). When the binary cannot be read, or its build-id differs,
    /// a debug file with that build-id stands in for it.
    ///
    /// Reads only headers, notes and symbol tables (plus whole debuglink
    /// candidates, for their CRC); DWARF is indexed on the first
    /// [`FileSymbolizer::frames`] call.
    pub fn open(
        path: &Path,
        expected_build_id: Option<&[u8]>,
        search: &DebugSearch,
    ) -> Result<FileSymbolizer, Error> {
        Self::open_as(path, path, expected_build_id, search, &Access::Own)
    }

    /// [`FileSymbolizer::open`] reading the binary from `read_from` (for example a held
    /// descriptor, `/proc/self/fd/N`) with `access`, while looking for debuglink files beside
    /// `path`. Files found beside the binary (debuglink targets, its `.debug/` directory,
    /// dwz files a debug file names) are read with the access of the binary's owner when that
    /// is not root, else with `access`, and a candidate must be the owner's or root's; the
    /// system, extra and explicit debug files are read with this process's own access.
    pub fn open_as(
        read_from: &Path,
        path: &Path,
        expected_build_id: Option<&[u8]>,
        search: &DebugSearch,
        access: &Access,
    ) -> Result<FileSymbolizer, Error> {
        let (binary, binary_err) =
            match open_binary(read_from, path, expected_build_id, search, access) {
                Ok(b) => (Some(b), None),
                Err(err) => (None, Some(err)),
            };
        let build_id: Option<Vec<u8>> = binary
            .as_ref()
            .and_then(|b| b.elf.build_id().map(<[u8]>::to_vec))
            .or_else(|| expected_build_id.map(<[u8]>::to_vec));
        let mut found = Found::default();
        let (mut elf_own, mut go, mut debuglink, mut mini) = (None, None, None, None);
        // Whose access files beside the binary are read with.
        let mut beside = access.clone();
        if let Some(b) = binary {
            if let owner @ Access::User { .. } = b.identity.owner() {
                beside = owner;
            }
            tracing::debug!(binary = %path.display(), dwarf = b.info.has_dwarf, "debug info source: the binary");
            found.sources.push("binary".to_owned());
            debuglink = b.info.debuglink.filter(|(n, _)| plain_file_name(n));
            mini = b.info.mini_debug_info;
            if b.info.has_dwarf {
                found.dwarf = Some(DwarfSource {
                    name: b.elf.name().to_owned(),
                    map: b.map,
                    identity: b.identity,
                    altlink: b.info.altlink,
                    access: beside.clone(),
                });
            }
            elf_own = Some(b.elf);
            go = b.go;
        }
        let from = SearchFrom {
            path,
            build_id: build_id.as_deref(),
            debuglink: debuglink.as_ref(),
            mini_debug_info: mini.as_deref(),
            beside: &beside,
        };
        found.search(&from, search);

        let Found {
            mut extra_symbols,
            sources,
            dwarf,
        } = found;
        let mut rebuilt_segments = None;
        let elf = match elf_own {
            Some(e) => e,
            None if !extra_symbols.is_empty() => {
                let e = extra_symbols.remove(0);
                rebuilt_segments = Some(rebuild_offsets(e.load_segments()));
                e
            }
            None => {
                return Err(binary_err.unwrap_or_else(|| Error::NotElf {
                    name: path.display().to_string(),
                }))
            }
        };
        Ok(FileSymbolizer {
            elf,
            rebuilt_segments,
            extra_symbols,
            sources,
            dwarf: dwarf.map(|source| open_dwarf(source, search)),
            whole_file_dwarf: false,
            go,
        })
    }

    /// The binary's own symbols and `PT_LOAD` translation (the debug file's,
    /// when the binary itself could not be used).
    pub fn elf(&self) -> &ElfFile {
        &self.elf
    }

    /// Translate a file offset of the binary to its virtual address; see
    /// [`ElfFile::file_offset_to_addr`].
    ///
    /// When only a debug file was found (binary deleted or replaced), its
    /// program headers carry no file offsets; they are rebuilt the way GNU
    /// ld lays segments out (each at the first offset past the previous
    /// segment congruent to its address modulo 4 KiB), which holds for
    /// usual binaries but is a best effort.
    pub fn file_offset_to_addr(&self, offset: FileOffset) -> Option<SymbolAddr> {
        match &self.rebuilt_segments {
            None => self.elf.file_offset_to_addr(offset),
            Some(segs) => segs
                .iter()
                .find(|&&(off, _, len)| offset.0 >= off && offset.0 - off < len)
                .map(|&(off, vaddr, _)| SymbolAddr(vaddr.wrapping_add(offset.0 - off))),
        }
    }

    /// The separate debug file the DWARF comes from (found by build-id, debuglink, an extra
    /// directory or debuginfod); None when the DWARF is the binary's own, or there is none.
    pub fn debug_file(&self) -> Option<&Path> {
        let name = self.dwarf.as_ref()?.name();
        (name != self.elf.name()).then(|| Path::new(name))
    }

    /// [`FileSymbolizer::debug_file`] and the access it was read with (to open it again as
    /// it was found: a path beside another user's binary with that user's access).
    pub fn debug_file_access(&self) -> Option<(&Path, &Access)> {
        let dwarf = self.dwarf.as_ref()?;
        (dwarf.name() != self.elf.name()).then(|| (Path::new(dwarf.name()), dwarf.access()))
    }

    /// Which sources were found, in search order: `binary`,
    /// `build-id dir PATH`, `debuglink PATH`, `minidebuginfo`,
    /// `extra dir PATH`.
    pub fn sources(&self) -> &[String] {
        &self.sources
    }

    /// Whether the DWARF index has been built (by a
    /// [`FileSymbolizer::frames`] call); false also when there is no DWARF.
    pub fn dwarf_parsed(&self) -> bool {
        self.dwarf.as_ref().is_some_and(Dwarf::parsed)
    }

    /// How many DWARF units were indexed one by one (found through `.debug_aranges`), and
    /// whether the whole-file index was built: for tests and statistics.
    pub fn dwarf_units_parsed(&self) -> (usize, bool) {
        self.dwarf.as_ref().map_or((0, false), Dwarf::units_parsed)
    }

    /// How many DWARF indexes were built so far: unit contexts and whole-file ones, each one
    /// built again after a release counted again (for statistics: what trims cost).
    pub fn dwarf_indexes_built(&self) -> u64 {
        self.dwarf.as_ref().map_or(0, Dwarf::indexes_built)
    }

    /// How many times DWARF entries were all read to check their nesting depth: the whole
    /// file's for its index, once at most, and each unit's for its own, once per unit
    /// however often the indexes are dropped and built again (for tests and statistics).
    pub fn dwarf_depth_scans(&self) -> u64 {
        self.dwarf.as_ref().map_or(0, Dwarf::depth_scans)
    }

    /// Always use the whole-file DWARF index, never the per-unit one (to compare the two).
    pub fn set_whole_file_dwarf(&mut self, whole: bool) {
        self.whole_file_dwarf = whole;
    }

    /// A cheap estimate of what this symbolizer holds, in bytes: its mapped debug files
    /// (the binary's mapping, when its own DWARF is used), decompressed DWARF sections,
    /// symbol tables, and the DWARF index built so far (the bytes of `.debug_info` indexed,
    /// per unit or whole; addr2line's parsed units grow with lookups, so does this).
    pub fn estimated_bytes(&self) -> u64 {
        let tables: u64 = std::iter::once(&self.elf)
            .chain(&self.extra_symbols)
            .map(ElfFile::table_bytes)
            .sum();
        let dwarf = self.dwarf.as_ref().map_or(0, Dwarf::estimated_bytes);
        let go = self.go.as_ref().map_or(0, |t| t.table_bytes() as u64);
        tables + dwarf + go
    }

    /// Let go of the pages of its mapped files (debug files, decompressed sections, symbol
    /// and Go tables) that this process has resident. Nothing parsed is dropped; the next
    /// lookup that reads a page faults it back in from the page cache. A long-lived service
    /// calls this between batches, so that files it read once do not stay in its resident
    /// set.
    pub fn release_resident_pages(&self) {
        for elf in std::iter::once(&self.elf).chain(&self.extra_symbols) {
            elf.release_resident_pages();
        }
        if let Some(dwarf) = &self.dwarf {
            dwarf.release_resident_pages();
        }
        if let Some(go) = &self.go {
            crate::sys::release_resident_pages(go.data());
        }
    }

    /// Drop the DWARF indexes no lookup used since the last call: the whole-file one, and
    /// per-unit ones; a lookup that needs one again builds it again (tens of milliseconds for
    /// the whole index of a large binary, far less for a unit). A long-lived service calls
    /// this between batches: once its names are cached, the indexes of a large binary would
    /// hold megabytes for lookups that seldom come. Returns whether the whole-file index was
    /// dropped.
    pub fn release_idle(&self) -> bool {
        self.dwarf.as_ref().is_some_and(Dwarf::release_idle)
    }

    /// Whether some source has DWARF (`.debug_info`).
    pub fn has_dwarf(&self) -> bool {
        self.dwarf.is_some()
    }

    /// Frames for `addr`, from the outermost (the real function containing
    /// `addr`) to the innermost inlined call.
    ///
    /// Uses DWARF when it covers `addr` (linkage names demangled when
    /// present), else the symbol tables (binary, debug file, MiniDebugInfo)
    /// for one frame. Empty when nothing names it. `with_lines` adds each
    /// frame's file and line: for the innermost the line of `addr`, for the
    /// others the line of the inlined call.
    pub fn frames(&self, addr: SymbolAddr, with_lines: bool) -> Vec<ResolvedFrame> {
        let mut out = Vec::new();
        self.frames_into(addr, with_lines, &mut out);
        out
    }

    /// [`FileSymbolizer::frames`] into `out` (cleared first), to reuse its
    /// allocation.
    pub fn frames_into(&self, addr: SymbolAddr, with_lines: bool, out: &mut Vec<ResolvedFrame>) {
        self.frames_uncut(addr, with_lines, out);
        for f in out.iter_mut() {
            cut_name(&mut f.function);
            if let Some(file) = &mut f.file {
                cut_name(file);
            }
        }
    }

    /// The frame the symbol tables alone give `addr` (its function's name; no inlined calls,
    /// no line) into `out`, left empty when no symbol holds `addr`. No DWARF is read.
    pub fn symbol_frames_into(&self, addr: SymbolAddr, out: &mut Vec<ResolvedFrame>) {
        out.clear();
        if let Some(name) = self.symbol_name(addr) {
            let mut function = function_name(name).into_owned();
            cut_name(&mut function);
            out.push(ResolvedFrame {
                function,
                file: None,
                line: None,
                inlined: false,
            });
        }
    }

    fn frames_uncut(&self, addr: SymbolAddr, with_lines: bool, out: &mut Vec<ResolvedFrame>) {
        out.clear();
        self.dwarf_frames(addr, with_lines, out);
        if let (true, Some(go)) = (out.is_empty(), &self.go) {
            crate::go::frames_into(go, addr.0, with_lines, out);
        }
        if out.is_empty() {
            if let Some(name) = self.symbol_name(addr) {
                out.push(ResolvedFrame {
                    function: function_name(name).into_owned(),
                    file: None,
                    line: None,
                    inlined: false,
                });
            }
        } else if out[0].function.is_empty() {
            // DWARF knows the location but not the function: the symbol
            // tables name it, or nothing does (padding between functions).
            match self.symbol_name(addr) {
                Some(name) => out[0].function = function_name(name).into_owned(),
                None => out.clear(),
            }
        }
        if let Some(go) = &self.go {
            crate::go::table_name_outermost(go, addr.0, out);
            crate::go::print_names(out);
        }
    }

    /// Whether the binary is a Go binary whose function table (`.gopclntab`) was read.
    pub fn has_go_table(&self) -> bool {
        self.go.is_some()
    }

    /// The most specific symbol (greatest start) over all symbol tables.
    fn symbol(&self, addr: SymbolAddr) -> Option<crate::Symbol<'_>> {
        self.extra_symbols
            .iter()
            .chain(std::iter::once(&self.elf))
            .filter_map(|e| e.symbol(addr))
            .fold(None, |best: Option<crate::Symbol<'_>>, s| match best {
                Some(b) if b.start >= s.start => Some(b),
                _ => Some(s),
            })
    }

    fn symbol_name(&self, addr: SymbolAddr) -> Option<&str> {
        self.symbol(addr).map(|s| s.name)
    }

    fn dwarf_frames(&self, addr: SymbolAddr, with_lines: bool, out: &mut Vec<ResolvedFrame>) {
        let Some(dwarf) = &self.dwarf else {
            return;
        };
        let symbol = |a: u64| self.symbol(SymbolAddr(a)).map(|s| (s.start.0, s.name));
        dwarf.frames_into(addr.0, with_lines, self.whole_file_dwarf, &symbol, out);
    }
}

impl std::fmt::Debug for FileSymbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSymbolizer")
            .field("elf", &self.elf)
            .field("sources", &self.sources)
            .field("dwarf_parsed", &self.dwarf_parsed())
            .finish()
    }
}

/// File offsets for `PT_LOAD` segments given as (vaddr, memsz): each
/// segment starts at the first offset at or past the end of the previous
/// one that is congruent to its address modulo the page size.
fn rebuild_offsets(segs: impl Iterator<Item = (u64, u64)>) -> Vec<(u64, u64, u64)> {
    const PAGE: u64 = 4096;
    let mut end = 0u64;
    let mut out = Vec::new();
    for (vaddr, memsz) in segs {
        let mut off = (end - end % PAGE).saturating_add(vaddr % PAGE);
        if off < end {
            off = off.saturating_add(PAGE);
        }
        out.push((off, vaddr, memsz));
        end = off.saturating_add(memsz);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_rebuilt_like_ld() {
        // readelf -l of a PIE and of its objcopy --only-keep-debug file.
        let segs = [
            (0, 0x5e0),
            (0x1000, 0x1d1),
            (0x2000, 0x108),
            (0x3e00, 0x218),
        ];
        assert_eq!(
            rebuild_offsets(segs.into_iter()),
            [
                (0, 0, 0x5e0),
                (0x1000, 0x1000, 0x1d1),
                (0x2000, 0x2000, 0x108),
                (0x2e00, 0x3e00, 0x218)
            ]
        );
        // Non-PIE, 2 MiB-aligned layout of older linkers.
        let segs = [(0x400000, 0x70c), (0x600e10, 0x230)];
        assert_eq!(
            rebuild_offsets(segs.into_iter()),
            [(0, 0x400000, 0x70c), (0xe10, 0x600e10, 0x230)]
        );
    }

    #[test]
    fn send_sync() {
        fn check<T: Send + Sync>() {}
        check::<FileSymbolizer>();
    }
}
