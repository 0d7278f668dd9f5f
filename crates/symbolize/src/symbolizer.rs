//! A binary plus every debug-info source found for it, with inline frames
//! and source lines from DWARF.
//!
//! [`FileSymbolizer::open`] finds the sources (cheaply: headers, notes and
//! symbol tables only); the DWARF sections are mapped, decompressed and
//! indexed on the first [`FileSymbolizer::frames`] call.

use std::path::{Component, Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use gimli::{EndianSlice, RunTimeEndian};
use memmap2::Mmap;
use object::{CompressionFormat, Object, ObjectSection};

use crate::address::{FileOffset, SymbolAddr};
use crate::demangle::{demangle, function_name};
use procmap::Access;

use crate::elf::{map_file_as, ElfFile, FileIdentity};
use crate::error::{hex, Error};
use crate::frame::cut_name;

pub use crate::frame::{ResolvedFrame, MAX_FRAME_NAME};

/// Where to look for separate debug files.
#[derive(Clone, Debug, Default)]
pub struct DebugSearch {
    /// Extra directories (`--debug-dir`), searched last: each for
    /// `<dir>/.build-id/xx/rest.debug` and `<dir>/<debuglink name>`.
    pub extra_dirs: Vec<PathBuf>,
    /// The system debug directory, normally `/usr/lib/debug`: searched for
    /// `.build-id/xx/rest.debug` and for `<dir of binary>/<debuglink name>`.
    /// Empty: not searched.
    pub system_debug_dir: PathBuf,
    /// Debug files to try last, matched by build-id only (for example fetched from a
    /// debuginfod server).
    pub debug_files: Vec<PathBuf>,
    /// Where the decompressed DWARF sections of large compressed debug files are kept, by
    /// build-id; None: decompressed again by every process.
    pub section_cache: Option<PathBuf>,
    /// Where the symbol tables of large binaries are kept once parsed, by build-id and file
    /// size; None: parsed again by every process.
    pub symbol_cache: Option<PathBuf>,
}

impl DebugSearch {
    /// The system's debug directory (`/usr/lib/debug`) and no extra ones.
    pub fn system() -> DebugSearch {
        DebugSearch {
            extra_dirs: Vec::new(),
            system_debug_dir: PathBuf::from("/usr/lib/debug"),
            debug_files: Vec::new(),
            section_cache: None,
            symbol_cache: None,
        }
    }
}

/// CRC-32 (IEEE 802.3, as zlib computes it): the checksum a
/// `.gnu_debuglink` section records for its debug file.
pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

/// A debug file named by `.gnu_debuglink` is CRC-checked (read whole) only up to this size;
/// a larger one is skipped (a multi-GB sparse file would cost seconds of reading).
pub const MAX_DEBUGLINK_BYTES: u64 = 1 << 30;

/// The mapped ELF file holding the DWARF, and its dwz supplementary file.
struct DwarfOwner {
    main: DwarfFile,
    sup: Option<DwarfFile>,
    /// The access `main` was read with.
    access: Access,
}

struct DwarfFile {
    name: String,
    map: Mmap,
    /// Which file `map` is (the section cache's key, with the build-id).
    identity: FileIdentity,
    /// Compressed sections, decompressed (or mapped from the section cache) on first use.
    decompressed: OnceLock<Vec<(gimli::SectionId, crate::section_cache::SectionBytes)>>,
    /// The section cache directory (without the build-id part), if any.
    section_cache: Option<PathBuf>,
}

type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

/// The whole-file addr2line context: built on the first lookup that needs it, dropped when a
/// [`FileSymbolizer::release_idle`] finds it unused since the one before (it holds every
/// unit's ranges and every unit it parsed: megabytes for a large binary).
enum WholeContext<'a> {
    /// Not built (or dropped while idle).
    Unbuilt,
    /// The DWARF cannot be indexed; not tried again.
    Unusable,
    /// Built; `used` since the last [`FileSymbolizer::release_idle`].
    Built {
        ctx: Box<addr2line::Context<Reader<'a>>>,
        used: bool,
    },
}

/// The lazily built addr2line contexts, borrowing [`DwarfOwner`].
struct DwarfState<'a> {
    /// The whole-file context.
    whole: Mutex<WholeContext<'a>>,
    /// The per-unit index from `.debug_aranges`; `None` inside when the file cannot use it.
    units: OnceLock<Option<crate::unit_index::UnitIndex<'a>>>,
    /// Bytes of `.debug_info` the whole-file context covers, once built (a size estimate).
    whole_bytes: std::sync::atomic::AtomicU64,
}

self_cell::self_cell!(
    struct DwarfCell {
        owner: DwarfOwner,
        #[not_covariant]
        dependent: DwarfState,
    }
);

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
    dwarf: Option<DwarfCell>,
    /// Never use the per-unit index (see [`FileSymbolizer::set_whole_file_dwarf`]).
    whole_file_dwarf: bool,
    /// A Go binary's function table: frames where DWARF has none (stripped binaries).
    go: Option<gosym::GoTable<Mmap>>,
}

/// Facts about an ELF image needed to look for its debug info.
#[derive(Default)]
struct Inspect {
    build_id: Option<Vec<u8>>,
    has_dwarf: bool,
    debuglink: Option<(String, u32)>,
    altlink: Option<(Vec<u8>, Vec<u8>)>,
    mini_debug_info: Option<Vec<u8>>,
}

fn inspect(data: &[u8]) -> Inspect {
    let Ok(obj) = object::File::parse(data) else {
        return Inspect::default();
    };
    let has_dwarf = obj
        .section_by_name(".debug_info")
        .is_some_and(|s| s.file_range().is_some_and(|(_, size)| size > 0));
    Inspect {
        build_id: obj.build_id().ok().flatten().map(<[u8]>::to_vec),
        has_dwarf,
        debuglink: obj
            .gnu_debuglink()
            .ok()
            .flatten()
            .map(|(name, crc)| (String::from_utf8_lossy(name).into_owned(), crc)),
        altlink: obj
            .gnu_debugaltlink()
            .ok()
            .flatten()
            .map(|(name, id)| (name.to_vec(), id.to_vec())),
        mini_debug_info: obj
            .section_by_name(".gnu_debugdata")
            .and_then(|s| s.data().ok())
            .filter(|d| !d.is_empty())
            .map(<[u8]>::to_vec),
    }
}

/// A separate debug file that matched.
struct DebugFile {
    map: Mmap,
    identity: FileIdentity,
    elf: ElfFile,
    info: Inspect,
}

/// What a candidate debug file must match.
#[derive(Clone, Copy)]
struct Want<'a> {
    /// Required build-id (`None`: the file may have any or none).
    build_id: Option<&'a [u8]>,
    /// False: a file without any build-id passes (debuglink: the CRC
    /// decides); one with another build-id still fails.
    build_id_required: bool,
    /// Required CRC-32 of the whole file.
    crc: Option<u32>,
    /// Where parsed symbol tables are kept ([`DebugSearch::symbol_cache`]).
    symbol_cache: Option<&'a Path>,
}

/// A debug file at `path`, opened with `access` (the binary's owner's, for a path beside a
/// binary another user owns), if it matches `want`. A candidate found with a user's access
/// must also be that user's or root's: another user's file never names this binary's frames.
fn try_debug_file(path: &Path, want: Want<'_>, access: &Access) -> Option<DebugFile> {
    let (map, identity) = match map_file_as(path, access) {
        Ok(m) => m,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            tracing::debug!(candidate = %path.display(), "no debug file here");
            return None;
        }
        Err(err) => {
            tracing::debug!(candidate = %path.display(), %err, "cannot read debug file");
            return None;
        }
    };
    if let Access::User { uid, .. } = access {
        if identity.uid() != *uid && identity.uid() != 0 {
            tracing::debug!(
                candidate = %path.display(),
                owner = identity.uid(),
                "debug file owned by neither the binary's owner nor root; ignored"
            );
            return None;
        }
    }
    let info = inspect(&map);
    if let Some(want_id) = want.build_id {
        let missing_ok = !want.build_id_required && info.build_id.is_none();
        if !missing_ok && info.build_id.as_deref() != Some(want_id) {
            tracing::debug!(
                candidate = %path.display(),
                expected = %hex(want_id),
                found = %info.build_id.as_deref().map_or_else(|| "none".to_owned(), hex),
                "debug file has the wrong build-id; ignored"
            );
            return None;
        }
    }
    if let Some(want_crc) = want.crc {
        if map.len() as u64 > MAX_DEBUGLINK_BYTES {
            tracing::warn!(
                candidate = %path.display(),
                bytes = map.len(),
                limit = MAX_DEBUGLINK_BYTES,
                "debuglink file too large to check its CRC; skipped"
            );
            return None;
        }
        let found = crc32(&map);
        if found != want_crc {
            tracing::debug!(
                candidate = %path.display(),
                expected = format_args!("{want_crc:08x}"),
                found = format_args!("{found:08x}"),
                "debug file has the wrong CRC; ignored"
            );
            return None;
        }
    }
    let cache = want.symbol_cache.map(|dir| (dir, identity));
    let elf = match ElfFile::parse_cached(&map, &path.display().to_string(), cache) {
        Ok(e) => e,
        Err(err) => {
            tracing::debug!(candidate = %path.display(), %err, "cannot parse debug file");
            return None;
        }
    };
    tracing::debug!(debug_file = %path.display(), dwarf = info.has_dwarf, "debug file matches");
    Some(DebugFile {
        map,
        identity,
        elf,
        info,
    })
}

/// `/usr/lib/debug/.build-id/xx/rest.debug` under `dir`.
fn build_id_path_in(dir: &Path, build_id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = build_id.split_first()?;
    if rest.is_empty() {
        return None;
    }
    Some(
        dir.join(".build-id")
            .join(format!("{first:02x}"))
            .join(format!("{}.debug", hex(rest))),
    )
}

/// `/proc/PID/root/usr/bin` → `/usr/bin`: the directory as the process sees it.
fn without_proc_root(dir: &Path) -> PathBuf {
    let mut comps = dir.components();
    let is_proc_root = matches!(
        (comps.next(), comps.next(), comps.next(), comps.next()),
        (Some(Component::RootDir), Some(Component::Normal(p)), Some(Component::Normal(pid)), Some(Component::Normal(r)))
            if p == "proc" && r == "root" && pid.to_str().is_some_and(|s| s.bytes().all(|b| b.is_ascii_digit()))
    );
    if is_proc_root {
        Path::new("/").join(comps.as_path())
    } else {
        dir.to_path_buf()
    }
}

/// A debuglink name must be a plain file name: no directories, no `..`.
fn plain_file_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != "." && name != ".."
}

/// Decompress `.gnu_debugdata` (xz), bounded (see [`crate::decompress::xz`]).
fn xz_decompress(data: &[u8], binary: &Path) -> Option<Vec<u8>> {
    match crate::decompress::xz(data) {
        Ok(out) => Some(out),
        Err(err @ crate::decompress::DecompressError::TooLarge { .. }) => {
            tracing::warn!(file = %binary.display(), %err, "MiniDebugInfo (.gnu_debugdata) skipped");
            None
        }
        Err(err) => {
            tracing::debug!(file = %binary.display(), %err, "cannot decompress .gnu_debugdata");
            None
        }
    }
}

/// Search state while opening.
struct Found {
    extra_symbols: Vec<ElfFile>,
    sources: Vec<String>,
    /// The file with DWARF, and the access it was read with (its dwz file is read so too).
    dwarf: Option<(String, Mmap, FileIdentity, Inspect, Access)>,
}

impl Found {
    /// Record a matching debug file; true when it has DWARF (search done).
    fn add(&mut self, label: String, file: DebugFile, access: &Access) -> bool {
        tracing::debug!(source = %label, "debug info source found");
        self.sources.push(label);
        let DebugFile {
            map,
            identity,
            elf,
            info,
        } = file;
        let name = elf.name().to_owned();
        self.extra_symbols.push(elf);
        if info.has_dwarf {
            self.dwarf = Some((name, map, identity, info, access.clone()));
            true
        } else {
            false
        }
    }
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
        let mut found = Found {
            extra_symbols: Vec::new(),
            sources: Vec::new(),
            dwarf: None,
        };
        // The binary itself.
        let mut binary_err = None;
        let mut binary: Option<(ElfFile, Inspect, Mmap, FileIdentity)> = None;
        let mut go = None;
        match map_file_as(read_from, access).and_then(|(map, identity)| {
            let elf = ElfFile::parse_cached(
                &map,
                &path.display().to_string(),
                search.symbol_cache.as_deref().map(|dir| (dir, identity)),
            )?;
            Ok((elf, map, identity))
        }) {
            Ok((elf, map, identity)) => {
                let info = inspect(&map);
                match (expected_build_id, elf.build_id()) {
                    (Some(want), got) if got != Some(want) => {
                        let err = Error::BuildIdMismatch {
                            path: path.to_owned(),
                            expected: hex(want),
                            found: got.map_or_else(|| "none".to_owned(), hex),
                        };
                        tracing::debug!(%err, "binary is not the one profiled; looking for its debug file only");
                        binary_err = Some(err);
                    }
                    _ => {
                        go = crate::go::open_table(read_from, &map);
                        binary = Some((elf, info, map, identity));
                    }
                }
            }
            Err(err) => {
                tracing::debug!(%err, "cannot read binary; looking for its debug file only");
                binary_err = Some(err);
            }
        }
        let build_id: Option<Vec<u8>> = binary
            .as_ref()
            .and_then(|(elf, _, _, _)| elf.build_id().map(<[u8]>::to_vec))
            .or_else(|| expected_build_id.map(<[u8]>::to_vec));
        let mut elf_own = None;
        let mut debuglink = None;
        let mut mini = None;
        // Whose access files beside the binary are read with.
        let mut beside = access.clone();
        if let Some((elf, info, map, identity)) = binary {
            if let owner @ Access::User { .. } = identity.owner() {
                beside = owner;
            }
            tracing::debug!(binary = %path.display(), dwarf = info.has_dwarf, "debug info source: the binary");
            found.sources.push("binary".to_owned());
            debuglink = info.debuglink.clone().filter(|(n, _)| plain_file_name(n));
            mini = info.mini_debug_info.clone();
            if info.has_dwarf {
                found.dwarf = Some((elf.name().to_owned(), map, identity, info, beside.clone()));
            }
            elf_own = Some(elf);
        }
        let system = &search.system_debug_dir;
        let done = |f: &Found| f.dwarf.is_some();

        // 1. <system>/.build-id/xx/rest.debug
        if !done(&found) && !system.as_os_str().is_empty() {
            if let Some(p) = build_id
                .as_deref()
                .and_then(|id| build_id_path_in(system, id))
            {
                let want = Want {
                    build_id: build_id.as_deref(),
                    build_id_required: true,
                    crc: None,
                    symbol_cache: search.symbol_cache.as_deref(),
                };
                if let Some(f) = try_debug_file(&p, want, &Access::Own) {
                    found.add(format!("build-id dir {}", p.display()), f, &Access::Own);
                }
            }
        }
        // 2. .gnu_debuglink
        let link_want = |crc| Want {
            build_id: build_id.as_deref(),
            build_id_required: false,
            crc: Some(crc),
            symbol_cache: search.symbol_cache.as_deref(),
        };
        if let (false, Some((name, crc))) = (done(&found), &debuglink) {
            let dir = path.parent().unwrap_or(Path::new("/"));
            // Beside the binary: with its owner's access; under the system directory: ours.
            let mut candidates = vec![
                (dir.join(name), &beside),
                (dir.join(".debug").join(name), &beside),
            ];
            if !system.as_os_str().is_empty() {
                let rel = without_proc_root(dir);
                let rel = rel.strip_prefix("/").unwrap_or(&rel);
                candidates.push((system.join(rel).join(name), &Access::Own));
            }
            for (p, reader) in candidates {
                // A debuglink naming the binary itself is no debug file.
                if p == path {
                    continue;
                }
                if let Some(f) = try_debug_file(&p, link_want(*crc), reader) {
                    if found.add(format!("debuglink {}", p.display()), f, reader) {
                        break;
                    }
                }
            }
        }
        // 3. MiniDebugInfo
        if let (false, Some(xz)) = (done(&found), &mini) {
            if let Some(data) = xz_decompress(xz, path) {
                let name = format!("{} [.gnu_debugdata]", path.display());
                match ElfFile::parse(&data, &name) {
                    Ok(mini_elf) => match (mini_elf.build_id(), build_id.as_deref()) {
                        (Some(a), Some(b)) if a != b => {
                            tracing::debug!("MiniDebugInfo has another build-id; ignored");
                        }
                        _ => {
                            tracing::debug!(binary = %path.display(), symbols = mini_elf.symbol_count(), "debug info source: MiniDebugInfo");
                            found.sources.push("minidebuginfo".to_owned());
                            found.extra_symbols.push(mini_elf);
                        }
                    },
                    Err(err) => tracing::debug!(%err, "cannot parse MiniDebugInfo"),
                }
            }
        }
        // 4. Extra directories.
        'dirs: for dir in &search.extra_dirs {
            if done(&found) {
                break;
            }
            if let Some(p) = build_id.as_deref().and_then(|id| build_id_path_in(dir, id)) {
                let want = Want {
                    build_id: build_id.as_deref(),
                    build_id_required: true,
                    crc: None,
                    symbol_cache: search.symbol_cache.as_deref(),
                };
                if let Some(f) = try_debug_file(&p, want, &Access::Own) {
                    if found.add(format!("extra dir {}", p.display()), f, &Access::Own) {
                        break 'dirs;
                    }
                }
            }
            if let Some((name, crc)) = &debuglink {
                let p = dir.join(name);
                if let Some(f) = try_debug_file(&p, link_want(*crc), &Access::Own) {
                    if found.add(format!("extra dir {}", p.display()), f, &Access::Own) {
                        break 'dirs;
                    }
                }
            }
        }
        // 5. Explicit debug files, by build-id.
        for p in &search.debug_files {
            if done(&found) || build_id.is_none() {
                break;
            }
            let want = Want {
                build_id: build_id.as_deref(),
                build_id_required: true,
                crc: None,
                symbol_cache: search.symbol_cache.as_deref(),
            };
            if let Some(f) = try_debug_file(p, want, &Access::Own) {
                found.add(format!("debug file {}", p.display()), f, &Access::Own);
            }
        }

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
        let dwarf = dwarf.map(|(name, map, identity, info, reader)| {
            let sup = info
                .altlink
                .as_ref()
                .and_then(|(file, id)| find_sup(Path::new(&name), file, id, search, &reader));
            DwarfCell::new(
                DwarfOwner {
                    main: DwarfFile {
                        name,
                        map,
                        identity,
                        decompressed: OnceLock::new(),
                        section_cache: search.section_cache.clone(),
                    },
                    sup,
                    access: reader,
                },
                |_| DwarfState {
                    whole: Mutex::new(WholeContext::Unbuilt),
                    units: OnceLock::new(),
                    whole_bytes: Default::default(),
                },
            )
        });
        Ok(FileSymbolizer {
            elf,
            rebuilt_segments,
            extra_symbols,
            sources,
            dwarf,
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
        let name = &self.dwarf.as_ref()?.borrow_owner().main.name;
        (name != self.elf.name()).then(|| Path::new(name.as_str()))
    }

    /// [`FileSymbolizer::debug_file`] and the access it was read with (to open it again as
    /// it was found: a path beside another user's binary with that user's access).
    pub fn debug_file_access(&self) -> Option<(&Path, &Access)> {
        let owner = self.dwarf.as_ref()?.borrow_owner();
        (owner.main.name != self.elf.name())
            .then(|| (Path::new(owner.main.name.as_str()), &owner.access))
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
        self.dwarf.as_ref().is_some_and(|c| {
            c.with_dependent(|_, d| {
                d.whole_built()
                    || d.units
                        .get()
                        .is_some_and(|u| u.as_ref().is_some_and(|u| u.units_parsed() > 0))
            })
        })
    }

    /// How many DWARF units were indexed one by one (found through `.debug_aranges`), and
    /// whether the whole-file index was built: for tests and statistics.
    pub fn dwarf_units_parsed(&self) -> (usize, bool) {
        self.dwarf.as_ref().map_or((0, false), |c| {
            c.with_dependent(|_, d| {
                let units = d
                    .units
                    .get()
                    .and_then(Option::as_ref)
                    .map_or(0, |u| u.units_parsed());
                (units, d.whole_built())
            })
        })
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
        let dwarf = self.dwarf.as_ref().map_or(0, |cell| {
            cell.with_dependent(|owner, state| {
                let file = |f: &DwarfFile| {
                    let decompressed: u64 = f
                        .decompressed
                        .get()
                        .map_or(0, |v| v.iter().map(|(_, b)| b.bytes().len() as u64).sum());
                    f.map.len() as u64 + decompressed
                };
                let files = file(&owner.main) + owner.sup.as_ref().map_or(0, file);
                let units = state
                    .units
                    .get()
                    .and_then(Option::as_ref)
                    .map_or(0, |u| u.parsed_bytes());
                files + units + state.whole_bytes.load(std::sync::atomic::Ordering::Relaxed)
            })
        });
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
        if let Some(cell) = &self.dwarf {
            let owner = cell.borrow_owner();
            for file in std::iter::once(&owner.main).chain(owner.sup.as_ref()) {
                crate::sys::release_resident_pages(&file.map);
                for (_, bytes) in file.decompressed.get().into_iter().flatten() {
                    if let crate::section_cache::SectionBytes::Mapped(map) = bytes {
                        crate::sys::release_resident_pages(map);
                    }
                }
            }
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
        let Some(cell) = &self.dwarf else {
            return false;
        };
        cell.with_dependent(|_, state| {
            if let Some(units) = state.units.get().and_then(Option::as_ref) {
                units.release_idle();
            }
            let mut whole = state.whole.lock().unwrap_or_else(|e| e.into_inner());
            match &mut *whole {
                WholeContext::Built { used, .. } if *used => {
                    *used = false;
                    false
                }
                WholeContext::Built { .. } => {
                    *whole = WholeContext::Unbuilt;
                    state
                        .whole_bytes
                        .store(0, std::sync::atomic::Ordering::Relaxed);
                    true
                }
                _ => false,
            }
        })
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
        let Some(cell) = &self.dwarf else {
            return;
        };
        // No DWARF range (`[low, high)`) holds the last address; addr2line would compute
        // `addr + 1` for it (an overflow the fuzzer found).
        if addr.0 == u64::MAX {
            return;
        }
        cell.with_dependent(|owner, state| {
            let symbol = |a: u64| self.symbol(SymbolAddr(a)).map(|s| (s.start.0, s.name));
            // Only the unit holding the address is parsed when `.debug_aranges` says which
            // it is: indexing every unit of a large library costs tens of milliseconds.
            let units = match self.whole_file_dwarf {
                true => None,
                false => state
                    .units
                    .get_or_init(|| crate::unit_index::UnitIndex::new(owner_dwarf(owner)?))
                    .as_ref(),
            };
            if let Some(units) = units {
                let mut done = false;
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    done = units.with_unit_context(addr.0, |ctx| {
                        collect_frames(ctx, addr.0, with_lines, &symbol, out)
                    });
                }));
                match result {
                    Ok(()) if done => return,
                    Ok(()) => {}
                    Err(_) => {
                        out.clear();
                        tracing::debug!(file = %owner.main.name, addr = addr.0, "DWARF lookup panicked");
                        return;
                    }
                }
            }
            let mut whole = state.whole.lock().unwrap_or_else(|e| e.into_inner());
            if let WholeContext::Unbuilt = *whole {
                *whole = match build_context(owner) {
                    Some((ctx, bytes)) => {
                        state.whole_bytes.store(bytes, std::sync::atomic::Ordering::Relaxed);
                        WholeContext::Built {
                            ctx: Box::new(ctx),
                            used: true,
                        }
                    }
                    None => WholeContext::Unusable,
                };
            }
            let WholeContext::Built { ctx, used } = &mut *whole else {
                return;
            };
            *used = true;
            // gimli and addr2line return errors on corrupt input; the guard
            // is belt and braces so a bug there costs frames, not the process.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                collect_frames(ctx, addr.0, with_lines, &symbol, out)
            }));
            if result.is_err() {
                out.clear();
                tracing::debug!(file = %owner.main.name, addr = addr.0, "DWARF lookup panicked");
            }
        });
    }
}

impl DwarfState<'_> {
    /// Whether the whole-file context is built now.
    fn whole_built(&self) -> bool {
        matches!(
            *self.whole.lock().unwrap_or_else(|e| e.into_inner()),
            WholeContext::Built { .. }
        )
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

/// Innermost-first frames from addr2line, stored outermost first.
///
/// `symbol` gives the symbol-table entry (start, raw name) containing an
/// address: like binutils, a function DWARF names without a linkage name
/// (C, C++ in an anonymous namespace, GCC clones such as `f.constprop.0`)
/// takes the symbol's name when that symbol starts where the function does.
fn collect_frames<'s>(
    ctx: &addr2line::Context<Reader<'_>>,
    probe: u64,
    with_lines: bool,
    symbol: &dyn Fn(u64) -> Option<(u64, &'s str)>,
    out: &mut Vec<ResolvedFrame>,
) {
    let mut outer_die = None;
    let mut outer_is_linkage = false;
    let mut iter = match ctx.find_frames(probe).skip_all_loads() {
        Ok(it) => it,
        Err(err) => {
            tracing::trace!(%err, probe, "DWARF lookup failed");
            return;
        }
    };
    loop {
        match iter.next() {
            Ok(Some(frame)) => {
                let raw = frame.function.as_ref().and_then(|f| f.raw_name().ok());
                outer_is_linkage = raw
                    .as_deref()
                    .is_some_and(|r| r.starts_with("_Z") || r.starts_with("_R"));
                outer_die = frame.dw_die_offset;
                let function = raw.map(|r| demangle(&r).into_owned()).unwrap_or_default();
                let (file, line) = match (with_lines, &frame.location) {
                    (true, Some(loc)) => (loc.file.map(str::to_owned), loc.line),
                    _ => (None, None),
                };
                out.push(ResolvedFrame {
                    function,
                    file,
                    line,
                    inlined: true,
                });
            }
            Ok(None) => break,
            Err(err) => {
                tracing::trace!(%err, probe, "DWARF frame walk stopped early");
                break;
            }
        }
    }
    out.reverse();
    let Some(first) = out.first_mut() else {
        return;
    };
    first.inlined = false;
    if !outer_is_linkage && !first.function.is_empty() {
        if let (Some(die), Some((start, name))) = (outer_die, symbol(probe)) {
            if function_low_pc(ctx, probe, die) == Some(start) {
                first.function = function_name(name).into_owned();
            }
        }
    }
    // Inlined calls DWARF cannot name; the outermost is named by the
    // caller from the symbol tables.
    for f in out.iter_mut().skip(1) {
        if f.function.is_empty() {
            f.function = "??".to_owned();
        }
    }
}

/// The entry address of the function DIE at `die` (in the unit holding
/// `probe`): its `DW_AT_low_pc`, else the start of its first range.
fn function_low_pc(
    ctx: &addr2line::Context<Reader<'_>>,
    probe: u64,
    die: gimli::UnitOffset<usize>,
) -> Option<u64> {
    let unit = ctx.find_dwarf_and_unit(probe).skip_all_loads()?;
    let entry = unit.entry(die).ok()?;
    if let Ok(Some(v)) = entry.attr_value(gimli::DW_AT_low_pc) {
        if let Ok(Some(a)) = unit.attr_address(v) {
            return Some(a);
        }
    }
    let mut ranges = unit.die_ranges(&entry).ok()?;
    ranges.next().ok().flatten().map(|r| r.begin)
}

/// The main file's sections for the per-unit index, or `None` when a dwz supplementary file
/// is in play (its units are referenced across files, which only the whole index follows).
fn owner_dwarf(owner: &DwarfOwner) -> Option<gimli::Dwarf<Reader<'_>>> {
    if owner.sup.is_some() {
        return None;
    }
    load_dwarf(&owner.main)
}

/// The whole-file context, and the bytes of `.debug_info` it covers.
fn build_context(owner: &DwarfOwner) -> Option<(addr2line::Context<Reader<'_>>, u64)> {
    tracing::debug!(file = %owner.main.name, "indexing DWARF");
    let mut dwarf = load_dwarf(&owner.main)?;
    let info_bytes = gimli::Section::reader(&dwarf.debug_info).len() as u64;
    if let Some(sup_dwarf) = owner.sup.as_ref().and_then(load_dwarf) {
        dwarf.set_sup(sup_dwarf);
    }
    // Units that share an abbreviation table (common in large libraries) parse it once.
    dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
    match addr2line::Context::from_dwarf(dwarf) {
        Ok(ctx) => Some((ctx, info_bytes)),
        Err(err) => {
            tracing::debug!(file = %owner.main.name, %err, "unusable DWARF");
            None
        }
    }
}

/// The gimli sections of `f`, borrowed from the mapping or from its
/// decompressed copies.
fn load_dwarf(f: &DwarfFile) -> Option<gimli::Dwarf<Reader<'_>>> {
    let obj = object::File::parse(&*f.map).ok()?;
    let endian = if obj.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let decompressed = f.decompressed.get_or_init(|| {
        let cache = f
            .section_cache
            .as_deref()
            .and_then(|dir| crate::section_cache::SectionCache::for_file(dir, &obj, &f.identity));
        let mut v = Vec::new();
        // Every section of one file together stays under the absolute cap too.
        let mut budget = crate::decompress::MAX_SECTION_BYTES;
        for id in NAMING_SECTIONS {
            let Some(sec) = obj.section_by_name(id.name()) else {
                continue;
            };
            let Ok(c) = sec.compressed_data() else {
                continue;
            };
            if c.format == CompressionFormat::None {
                continue;
            }
            let cap = crate::decompress::cap_for(c.data.len() as u64, budget);
            let cached = (c.uncompressed_size <= cap)
                .then(|| cache.as_ref()?.get(id.name(), c.uncompressed_size))
                .flatten();
            if let Some(bytes) = cached {
                budget -= bytes.bytes().len() as u64;
                v.push((id, bytes));
                continue;
            }
            match crate::decompress::section(&c, budget) {
                Ok(data) => {
                    budget -= data.len() as u64;
                    if let Some(cache) = &cache {
                        cache.put(id.name(), &data);
                    }
                    v.push((id, crate::section_cache::SectionBytes::Owned(data)));
                }
                Err(err) => {
                    // Over a cap (or corrupt): the section is left out, the file's other
                    // sections and symbols still name what they can.
                    tracing::warn!(file = %f.name, section = id.name(), %err, "compressed DWARF section skipped")
                }
            }
        }
        v
    });
    let load = |id: gimli::SectionId| -> Result<Reader<'_>, gimli::Error> {
        if let Some((_, data)) = decompressed.iter().find(|(i, _)| *i == id) {
            return Ok(EndianSlice::new(data.bytes(), endian));
        }
        if !NAMING_SECTIONS.contains(&id) {
            return Ok(EndianSlice::new(&[], endian));
        }
        let data = obj
            .section_by_name(id.name())
            .filter(|s| {
                s.compressed_data()
                    .is_ok_and(|c| c.format == CompressionFormat::None)
            })
            .and_then(|s| s.data().ok())
            .unwrap_or(&[]);
        Ok(EndianSlice::new(data, endian))
    };
    gimli::Dwarf::load(load).ok()
}

/// The DWARF sections that naming and inline chains read. Location lists (`.debug_loc`,
/// `.debug_loclists`, a sixth of libc's debug file) are never read, so they are not
/// decompressed.
const NAMING_SECTIONS: [gimli::SectionId; 10] = [
    gimli::SectionId::DebugAbbrev,
    gimli::SectionId::DebugAddr,
    gimli::SectionId::DebugAranges,
    gimli::SectionId::DebugInfo,
    gimli::SectionId::DebugLine,
    gimli::SectionId::DebugLineStr,
    gimli::SectionId::DebugRanges,
    gimli::SectionId::DebugRngLists,
    gimli::SectionId::DebugStr,
    gimli::SectionId::DebugStrOffsets,
];

/// The dwz supplementary file named by `.gnu_debugaltlink`, matched by
/// build-id: the path as given (relative to the debug file's directory),
/// else by build-id under the system and extra debug directories.
///
/// The path the debug file names is read with `access` (the debug file's reader's: a user's
/// debug file may name any path); the debug directories with our own.
fn find_sup(
    debug_file: &Path,
    file: &[u8],
    id: &[u8],
    search: &DebugSearch,
    access: &Access,
) -> Option<DwarfFile> {
    let name = Path::new(std::str::from_utf8(file).ok()?);
    let mut candidates = Vec::new();
    if name.is_absolute() {
        candidates.push((name.to_path_buf(), access));
    } else if let Some(dir) = debug_file.parent() {
        candidates.push((dir.join(name), access));
    }
    for dir in std::iter::once(&search.system_debug_dir).chain(&search.extra_dirs) {
        if !dir.as_os_str().is_empty() {
            candidates.extend(build_id_path_in(dir, id).map(|p| (p, &Access::Own)));
        }
    }
    let want = Want {
        build_id: Some(id),
        build_id_required: true,
        crc: None,
        symbol_cache: search.symbol_cache.as_deref(),
    };
    for (p, reader) in candidates {
        if let Some(f) = try_debug_file(&p, want, reader) {
            tracing::debug!(sup = %p.display(), "using the dwz supplementary file");
            return Some(DwarfFile {
                name: p.display().to_string(),
                map: f.map,
                identity: f.identity,
                decompressed: OnceLock::new(),
                section_cache: search.section_cache.clone(),
            });
        }
    }
    None
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
    fn crc32_known_values() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }

    #[test]
    fn proc_root_stripped() {
        assert_eq!(
            without_proc_root(Path::new("/proc/123/root/usr/bin")),
            Path::new("/usr/bin")
        );
        assert_eq!(
            without_proc_root(Path::new("/proc/self/root/usr/bin")),
            Path::new("/proc/self/root/usr/bin")
        );
        assert_eq!(
            without_proc_root(Path::new("/usr/bin")),
            Path::new("/usr/bin")
        );
    }

    #[test]
    fn build_id_paths() {
        assert_eq!(
            build_id_path_in(Path::new("/x"), &[0xab, 0xcd, 0xef]).unwrap(),
            Path::new("/x/.build-id/ab/cdef.debug")
        );
        assert!(build_id_path_in(Path::new("/x"), &[0xab]).is_none());
    }

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
    fn names() {
        assert!(plain_file_name("a.debug"));
        assert!(!plain_file_name("../a.debug"));
        assert!(!plain_file_name(""));
        assert_eq!(crate::demangle::without_version("f@@GLIBC_2.2"), "f");
    }

    #[test]
    fn send_sync() {
        fn check<T: Send + Sync>() {}
        check::<FileSymbolizer>();
    }
}
