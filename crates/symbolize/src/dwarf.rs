//! DWARF lookup for one file: its sections mapped and decompressed (bounded, cached on disk
//! when large) on first use, the per-unit and whole-file addr2line indexes built lazily and
//! dropped when idle, and an address's inline chain read as frames.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use gimli::{EndianSlice, RunTimeEndian};
use memmap2::Mmap;
use object::{CompressionFormat, Object, ObjectSection};
use procmap::Access;

use crate::demangle::{demangle, function_name};
use crate::elf::FileIdentity;
use crate::frame::ResolvedFrame;
use crate::section_cache::{SectionBytes, SectionCache};
use crate::unit_index::UnitIndex;

/// The mapped ELF file holding the DWARF, and its dwz supplementary file.
struct DwarfOwner {
    main: DwarfFile,
    sup: Option<DwarfFile>,
    /// The access `main` was read with.
    access: Access,
}

/// One mapped file whose DWARF sections are read.
pub(crate) struct DwarfFile {
    name: String,
    map: Mmap,
    /// Which file `map` is (the section cache's key, with the build-id).
    identity: FileIdentity,
    /// Compressed sections, decompressed (or mapped from the section cache) on first use.
    decompressed: OnceLock<Vec<(gimli::SectionId, SectionBytes)>>,
    /// The section cache directory (without the build-id part), if any.
    section_cache: Option<PathBuf>,
}

impl DwarfFile {
    /// The file `name`, mapped as `map`, which is `identity`; its large decompressed sections
    /// kept under `section_cache` (None: decompressed again each time).
    pub(crate) fn new(
        name: String,
        map: Mmap,
        identity: FileIdentity,
        section_cache: Option<PathBuf>,
    ) -> DwarfFile {
        DwarfFile {
            name,
            map,
            identity,
            decompressed: OnceLock::new(),
            section_cache,
        }
    }

    /// The mapping, plus what was decompressed so far, in bytes.
    fn estimated_bytes(&self) -> u64 {
        let decompressed: u64 = self
            .decompressed
            .get()
            .map_or(0, |v| v.iter().map(|(_, b)| b.bytes().len() as u64).sum());
        self.map.len() as u64 + decompressed
    }
}

type Reader<'a> = EndianSlice<'a, RunTimeEndian>;

/// The whole-file addr2line context: built on the first lookup that needs it, dropped when a
/// [`Dwarf::release_idle`] finds it unused since the one before (it holds every
/// unit's ranges and every unit it parsed: megabytes for a large binary).
enum WholeContext<'a> {
    /// Not built (or dropped while idle).
    Unbuilt,
    /// The DWARF cannot be indexed; not tried again.
    Unusable,
    /// Built; `used` since the last [`Dwarf::release_idle`].
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
    units: OnceLock<Option<UnitIndex<'a>>>,
    /// Bytes of `.debug_info` the whole-file context covers, once built (a size estimate).
    whole_bytes: AtomicU64,
    /// Whether some unit nests deeper than [`crate::unit_index::MAX_DIE_DEPTH`]: every entry
    /// of the file is read to know, once, when the whole-file context is first built; kept
    /// when that context is dropped while idle (the mapped file does not change), so that
    /// building it again costs only addr2line's own parse.
    too_deep: OnceLock<bool>,
    /// How many times that scan ran (once at most; for tests and statistics).
    depth_scans: AtomicU64,
    /// How many times the whole-file context was built (again after each idle release).
    whole_built: AtomicU64,
}

impl<'a> DwarfState<'a> {
    /// Whether the whole-file context is built now.
    fn whole_built(&self) -> bool {
        matches!(
            *self.whole.lock().unwrap_or_else(|e| e.into_inner()),
            WholeContext::Built { .. }
        )
    }

    /// The per-unit index, if built and usable.
    fn units(&self) -> Option<&UnitIndex<'a>> {
        self.units.get().and_then(Option::as_ref)
    }
}

self_cell::self_cell!(
    struct DwarfCell {
        owner: DwarfOwner,
        #[not_covariant]
        dependent: DwarfState,
    }
);

/// The DWARF of one binary (its own or a debug file's, with its dwz file): nothing is
/// parsed until the first [`Dwarf::frames_into`].
pub(crate) struct Dwarf {
    cell: DwarfCell,
}

impl Dwarf {
    /// The DWARF of `main` (read with `access`) and of its dwz supplementary file `sup`.
    pub(crate) fn new(main: DwarfFile, sup: Option<DwarfFile>, access: Access) -> Dwarf {
        let cell = DwarfCell::new(DwarfOwner { main, sup, access }, |_| DwarfState {
            whole: Mutex::new(WholeContext::Unbuilt),
            units: OnceLock::new(),
            whole_bytes: Default::default(),
            too_deep: OnceLock::new(),
            depth_scans: AtomicU64::new(0),
            whole_built: AtomicU64::new(0),
        });
        Dwarf { cell }
    }

    /// The name of the file holding the DWARF.
    pub(crate) fn name(&self) -> &str {
        &self.cell.borrow_owner().main.name
    }

    /// The access the file holding the DWARF was read with.
    pub(crate) fn access(&self) -> &Access {
        &self.cell.borrow_owner().access
    }

    /// Whether some index has been built (the whole-file one, or a unit).
    pub(crate) fn parsed(&self) -> bool {
        self.cell.with_dependent(|_, d| {
            d.whole_built() || d.units().is_some_and(|u| u.units_parsed() > 0)
        })
    }

    /// How many units were indexed one by one, and whether the whole-file index is built.
    pub(crate) fn units_parsed(&self) -> (usize, bool) {
        self.cell.with_dependent(|_, d| {
            let units = d.units().map_or(0, |u| u.units_parsed());
            (units, d.whole_built())
        })
    }

    /// How many times entries were all read for the nesting-depth check: of the whole file
    /// for its index (once at most), and of a unit for its own (once per unit found shallow).
    pub(crate) fn depth_scans(&self) -> u64 {
        self.cell.with_dependent(|_, d| {
            d.depth_scans.load(Ordering::Relaxed) + d.units().map_or(0, |u| u.depth_scans())
        })
    }

    /// How many indexes were built so far: unit contexts and whole-file ones, each built
    /// again after a release (or an eviction) counted again (for statistics).
    pub(crate) fn indexes_built(&self) -> u64 {
        self.cell.with_dependent(|_, d| {
            d.whole_built.load(Ordering::Relaxed) + d.units().map_or(0, UnitIndex::built)
        })
    }

    /// The mapped files, decompressed sections and the `.debug_info` bytes indexed, in bytes.
    pub(crate) fn estimated_bytes(&self) -> u64 {
        self.cell.with_dependent(|owner, state| {
            let files = owner.main.estimated_bytes()
                + owner.sup.as_ref().map_or(0, DwarfFile::estimated_bytes);
            let units = state.units().map_or(0, |u| u.parsed_bytes());
            files + units + state.whole_bytes.load(Ordering::Relaxed)
        })
    }

    /// Let go of the resident pages of the mapped files and of sections mapped from the
    /// section cache.
    pub(crate) fn release_resident_pages(&self) {
        let owner = self.cell.borrow_owner();
        for file in std::iter::once(&owner.main).chain(owner.sup.as_ref()) {
            crate::sys::release_resident_pages(&file.map);
            for (_, bytes) in file.decompressed.get().into_iter().flatten() {
                if let SectionBytes::Mapped(map) = bytes {
                    crate::sys::release_resident_pages(map);
                }
            }
        }
    }

    /// Drop the indexes no lookup used since the last call; whether the whole-file one was
    /// dropped.
    pub(crate) fn release_idle(&self) -> bool {
        self.cell.with_dependent(|_, state| {
            if let Some(units) = state.units() {
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
                    state.whole_bytes.store(0, Ordering::Relaxed);
                    true
                }
                _ => false,
            }
        })
    }

    /// The frames DWARF gives `addr`, outermost first, into `out` (left empty when DWARF does
    /// not cover it). Through the unit `.debug_aranges` names when it can, unless
    /// `whole_file` (then, and otherwise, through the whole-file index). `symbol` gives the
    /// symbol-table entry holding an address (see [`collect_frames`]).
    pub(crate) fn frames_into<'s>(
        &self,
        addr: u64,
        with_lines: bool,
        whole_file: bool,
        symbol: &dyn Fn(u64) -> Option<(u64, &'s str)>,
        out: &mut Vec<ResolvedFrame>,
    ) {
        // No DWARF range (`[low, high)`) holds the last address; addr2line would compute
        // `addr + 1` for it (an overflow the fuzzer found).
        if addr == u64::MAX {
            return;
        }
        self.cell.with_dependent(|owner, state| {
            // Only the unit holding the address is parsed when `.debug_aranges` says which
            // it is: indexing every unit of a large library costs tens of milliseconds.
            let units = match whole_file {
                true => None,
                false => state
                    .units
                    .get_or_init(|| UnitIndex::new(owner_dwarf(owner)?))
                    .as_ref(),
            };
            if let Some(units) = units {
                let mut done = false;
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    done = units.with_unit_context(addr, |ctx| {
                        collect_frames(ctx, addr, with_lines, symbol, out)
                    });
                }));
                match result {
                    Ok(()) if done => return,
                    Ok(()) => {}
                    Err(_) => {
                        out.clear();
                        tracing::debug!(file = %owner.main.name, addr, "DWARF lookup panicked");
                        return;
                    }
                }
            }
            let mut whole = state.whole.lock().unwrap_or_else(|e| e.into_inner());
            if let WholeContext::Unbuilt = *whole {
                state.whole_built.fetch_add(1, Ordering::Relaxed);
                *whole = match build_context(owner, state) {
                    Some((ctx, bytes)) => {
                        state.whole_bytes.store(bytes, Ordering::Relaxed);
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
                collect_frames(ctx, addr, with_lines, symbol, out)
            }));
            if result.is_err() {
                out.clear();
                tracing::debug!(file = %owner.main.name, addr, "DWARF lookup panicked");
            }
        });
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

/// The whole-file context, and the bytes of `.debug_info` it covers; `state` keeps the file's
/// depth check once made.
fn build_context<'a>(
    owner: &'a DwarfOwner,
    state: &DwarfState<'_>,
) -> Option<(addr2line::Context<Reader<'a>>, u64)> {
    tracing::debug!(file = %owner.main.name, "indexing DWARF");
    let mut dwarf = load_dwarf(&owner.main)?;
    let info_bytes = gimli::Section::reader(&dwarf.debug_info).len() as u64;
    // addr2line recurses once per level of a function's inline tree: a file with a unit
    // nested deeper than `MAX_DIE_DEPTH` gets no whole-file context (its addresses are named
    // by the symbol tables), checked the first time the context is built. This reads every
    // entry of the file (addr2line alone reads only unit headers here): about 1.1 s more for
    // profilerd's own 48 MB of debug `.debug_info` in a debug build of this crate, paid only by
    // files that need the whole-file context (units referring outside themselves), and once
    // per file: a rebuild after an idle release does not scan again.
    let too_deep = state.too_deep.get_or_init(|| {
        state.depth_scans.fetch_add(1, Ordering::Relaxed);
        crate::unit_index::any_unit_too_deep(&dwarf)
    });
    if *too_deep {
        tracing::warn!(
            file = %owner.main.name,
            max = crate::unit_index::MAX_DIE_DEPTH,
            "DWARF nested too deep; not named through DWARF"
        );
        return None;
    }
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
            .and_then(|dir| SectionCache::for_file(dir, &obj, &f.identity));
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
                    v.push((id, SectionBytes::Owned(data)));
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
