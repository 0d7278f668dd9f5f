//! Naming user-space addresses: the mapped file's symbolizer (DWARF inline frames, symbol
//! tables, separate debug files, debuginfod), the vdso, JIT perf maps.
//!
//! Each mapped file is opened once, and each distinct (file, offset) symbolized once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use procmap::{FileId, MappedFile, Mapping, ProcessTable};
use profile::{FrameId, Profile};
use rustc_hash::FxBuildHasher;
use symbolize::{DebugSearch, ElfFile, FileOffset, FileSymbolizer, FrameCache, ResolvedFrame};
use tracing::{debug, warn};

use crate::jit_map::JitMap;
use crate::preload::Preloaded;
use procmap::{live_path, PinnedFiles};

/// How user frames are named.
#[derive(Clone, Debug)]
pub struct ResolveOptions {
    /// Put `file:line` on frames that have it.
    pub lines: bool,
    /// Where separate debug files are looked for.
    pub debug_search: DebugSearch,
    /// Fetch missing debug info from these debuginfod servers (None: don't).
    pub debuginfod: Option<debuginfod::DebuginfodConfig>,
    /// Most (file, offset) → frames entries kept; the cache is emptied when it is full.
    pub address_cache_entries: usize,
}

impl Default for ResolveOptions {
    fn default() -> Self {
        ResolveOptions {
            lines: false,
            debug_search: crate::with_user_caches(DebugSearch::system()),
            debuginfod: debuginfod::DebuginfodConfig::from_env(),
            address_cache_entries: 1 << 20,
        }
    }
}

/// Counters of user symbolization.
#[derive(Clone, Debug, Default)]
pub struct UserSymbolStats {
    /// Files opened (symbolizers built).
    pub files: usize,
    /// Address cache hits and misses.
    pub cache_hits: u64,
    /// Address cache misses (addresses symbolized).
    pub cache_misses: u64,
    /// Times the address cache was emptied because it was full.
    pub cache_resets: u64,
    /// Debug files fetched from debuginfod.
    pub debuginfod_fetched: u64,
    /// What could not be fetched, and why (one line each).
    pub debuginfod_failures: Vec<String>,
    /// Frames named from JIT perf maps.
    pub jit_frames: u64,
    /// Addresses answered from the on-disk frame cache (frames of earlier runs).
    pub frame_cache_hits: u64,
}

/// A run of frames in the arena, outermost first.
#[derive(Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
    named: bool,
}

pub(crate) struct UserSymbols<'a> {
    pinned: &'a PinnedFiles,
    /// Frames of earlier runs, by build-id and offset (saved at the end).
    pub frame_cache: &'a mut FrameCache,
    /// Symbolizers opened while recording.
    preloaded: Preloaded,
    options: ResolveOptions,
    files: HashMap<FileId, Option<Arc<FileSymbolizer>>, FxBuildHasher>,
    vdso: Option<Option<Arc<ElfFile>>>,
    jit: HashMap<u32, Option<JitMap>, FxBuildHasher>,
    cache: HashMap<(FileId, u64), Span, FxBuildHasher>,
    arena: Vec<FrameId>,
    scratch: Vec<ResolvedFrame>,
    debuginfod: Option<debuginfod::Client>,
    pub stats: UserSymbolStats,
}

impl<'a> UserSymbols<'a> {
    pub(crate) fn new(
        options: ResolveOptions,
        pinned: &'a PinnedFiles,
        preloaded: Preloaded,
        frame_cache: &'a mut FrameCache,
    ) -> UserSymbols<'a> {
        let debuginfod = options.debuginfod.clone().map(debuginfod::Client::new);
        UserSymbols {
            pinned,
            frame_cache,
            preloaded,
            options,
            files: HashMap::default(),
            vdso: None,
            jit: HashMap::default(),
            cache: HashMap::default(),
            arena: Vec::new(),
            scratch: Vec::new(),
            debuginfod,
            stats: UserSymbolStats::default(),
        }
    }

    /// Push the frames of `addr` in `pid` at `time` onto `out`, innermost first (the order of
    /// a leaf-first stack). Returns whether they are real names.
    pub(crate) fn push_frames(
        &mut self,
        profile: &mut Profile,
        processes: &ProcessTable,
        pid: u32,
        addr: u64,
        time: u64,
        out: &mut Vec<FrameId>,
    ) -> bool {
        let mapping = processes.find_mapping(pid, addr, time).copied();
        let anonymous = mapping.is_none_or(|m| processes.files().get(m.file).is_pseudo());
        if anonymous {
            if let Some(name) = self.jit_lookup(pid, addr) {
                self.stats.jit_frames += 1;
                out.push(profile.intern(&name));
                return true;
            }
        }
        let Some(mapping) = mapping else {
            tracing::trace!(pid, addr = format_args!("{addr:#x}"), time, "no mapping");
            out.push(profile.intern("[unknown]"));
            return false;
        };
        let offset = mapping.file_offset(addr);
        let span = match self.cache.get(&(mapping.file, offset)) {
            Some(&span) => {
                self.stats.cache_hits += 1;
                span
            }
            None => {
                self.stats.cache_misses += 1;
                if self.cache.len() >= self.options.address_cache_entries {
                    self.cache.clear();
                    self.arena.clear();
                    self.stats.cache_resets += 1;
                }
                let span = self.symbolize(profile, processes, pid, &mapping, offset);
                self.cache.insert((mapping.file, offset), span);
                span
            }
        };
        let frames = &self.arena[span.start as usize..(span.start + span.len) as usize];
        out.extend(frames.iter().rev());
        span.named
    }

    fn jit_lookup(&mut self, pid: u32, addr: u64) -> Option<String> {
        let map = self.jit.entry(pid).or_insert_with(|| JitMap::load(pid));
        map.as_ref()?.lookup(addr).map(str::to_string)
    }

    fn symbolize(
        &mut self,
        profile: &mut Profile,
        processes: &ProcessTable,
        pid: u32,
        mapping: &Mapping,
        offset: u64,
    ) -> Span {
        let file = processes.files().get(mapping.file);
        let start = self.arena.len() as u32;
        let mut named = false;
        if file.path == "[vdso]" {
            if let Some(vdso) = self.vdso() {
                if let Some(sym) = vdso
                    .file_offset_to_addr(FileOffset(offset))
                    .and_then(|a| vdso.symbol(a))
                {
                    self.arena
                        .push(profile.intern(&symbolize::function_name(sym.name)));
                    named = true;
                }
            }
        } else {
            let lines = self.options.lines;
            // Frames seen by an earlier run come from the frame cache, without opening the
            // file (when the kernel gave its build-id) or at least without indexing its DWARF.
            let mut build_id = file.build_id.clone();
            if build_id.is_none() {
                build_id = self
                    .symbolizer(processes, pid, mapping)
                    .and_then(|s| s.elf().build_id().map(<[u8]>::to_vec));
            }
            let cached = build_id
                .as_deref()
                .and_then(|id| self.frame_cache.get(id, offset, lines));
            if let Some(frames) = cached {
                self.scratch.clear();
                self.scratch.extend_from_slice(frames);
            } else if let Some(symbolizer) = self.symbolizer(processes, pid, mapping) {
                self.scratch.clear();
                if let Some(addr) = symbolizer.file_offset_to_addr(FileOffset(offset)) {
                    symbolizer.frames_into(addr, lines, &mut self.scratch);
                    // Only frames from DWARF are kept: names from a symbol table alone would
                    // hide debug info installed later.
                    if let (Some(id), false, true) =
                        (&build_id, self.scratch.is_empty(), symbolizer.has_dwarf())
                    {
                        self.frame_cache.insert(id, offset, lines, &self.scratch);
                    }
                    if self.scratch.is_empty() {
                        self.arena.push(profile.intern(&format!(
                            "{}+{:#x}",
                            file.basename(),
                            addr.0
                        )));
                    }
                }
            } else {
                self.scratch.clear();
            }
            for frame in &self.scratch {
                let name = match (&frame.file, frame.line) {
                    (Some(file), Some(line)) if lines => {
                        format!("{} ({file}:{line})", frame.function)
                    }
                    _ => frame.function.clone(),
                };
                self.arena.push(profile.intern(&name));
            }
            named = !self.scratch.is_empty();
        }
        if self.arena.len() as u32 == start {
            self.arena
                .push(profile.intern(&format!("{}+{:#x}", file.basename(), offset)));
        }
        Span {
            start,
            len: self.arena.len() as u32 - start,
            named,
        }
    }

    fn vdso(&mut self) -> Option<Arc<ElfFile>> {
        self.vdso
            .get_or_insert_with(|| match own_vdso() {
                Ok(bytes) => ElfFile::parse(&bytes, "[vdso]").map(Arc::new).ok(),
                Err(err) => {
                    debug!(%err, "cannot read the vdso image");
                    None
                }
            })
            .clone()
    }

    /// The symbolizer of a mapping's file, opened once per file.
    fn symbolizer(
        &mut self,
        processes: &ProcessTable,
        pid: u32,
        mapping: &Mapping,
    ) -> Option<Arc<FileSymbolizer>> {
        if let Some(hit) = self.files.get(&mapping.file) {
            return hit.clone();
        }
        let file = processes.files().get(mapping.file);
        if let Some(Some(ready)) = self.preloaded.remove(&mapping.file) {
            // Opened while recording; files without DWARF still go through `open` when
            // debuginfod may supply it.
            if ready.has_dwarf() || self.debuginfod.is_none() {
                self.stats.files += 1;
                self.files.insert(mapping.file, Some(ready.clone()));
                return Some(ready);
            }
        }
        let opened = if file.is_pseudo() {
            None
        } else {
            self.open(pid, mapping, file)
        };
        self.stats.files += opened.is_some() as usize;
        self.files.insert(mapping.file, opened.clone());
        opened
    }

    fn open(
        &mut self,
        pid: u32,
        mapping: &Mapping,
        file: &MappedFile,
    ) -> Option<Arc<FileSymbolizer>> {
        // The file as the live process sees it (its debuglink is searched beside that path);
        // else the descriptor pinned when the mapping was seen; else the path as we see it.
        let plain = PathBuf::from(file.path.trim_end_matches(" (deleted)"));
        let (read_from, path) = match (
            live_path(pid, mapping, &file.path),
            self.pinned.path(mapping.file),
        ) {
            (Some(live), _) => (live.clone(), live),
            (None, Some(pinned)) => (pinned, plain),
            (None, None) => (plain.clone(), plain),
        };
        let build_id = file.build_id.as_deref();
        let opened =
            FileSymbolizer::open_as(&read_from, &path, build_id, &self.options.debug_search);
        let needs_debug_info = match &opened {
            Ok(s) => !s.has_dwarf(),
            Err(_) => true,
        };
        let build_id = build_id
            .map(<[u8]>::to_vec)
            .or_else(|| opened.as_ref().ok()?.elf().build_id().map(<[u8]>::to_vec));
        if let (true, Some(id)) = (needs_debug_info, build_id) {
            if let Some(fetched) = self.fetch_debug_info(&id, &file.path) {
                let mut search = self.options.debug_search.clone();
                search.debug_files.push(fetched);
                match FileSymbolizer::open_as(&read_from, &path, Some(&id), &search) {
                    Ok(s) => return Some(Arc::new(s)),
                    Err(err) => {
                        warn!(file = %file.path, %err, "the debug info from debuginfod is unusable")
                    }
                }
            }
        }
        match opened {
            Ok(s) => {
                debug!(file = %file.path, sources = ?s.sources(), "symbol sources");
                Some(Arc::new(s))
            }
            Err(err) => {
                if file.path.ends_with(" (deleted)") {
                    debug!(file = %file.path, %err, "cannot read a deleted file");
                } else {
                    warn!(file = %file.path, %err, "cannot read symbols; its frames stay unnamed");
                }
                None
            }
        }
    }

    /// Ask debuginfod for the debug info of `build_id`; after a server fails to answer
    /// (down, slow), ask no more in this run.
    fn fetch_debug_info(&mut self, build_id: &[u8], path: &str) -> Option<PathBuf> {
        let client = self.debuginfod.as_ref()?;
        match client.fetch(build_id, debuginfod::Artifact::DebugInfo) {
            Ok(fetched) => {
                debug!(file = path, debug = %fetched.display(), "debug info from debuginfod");
                self.stats.debuginfod_fetched += 1;
                Some(fetched)
            }
            Err(debuginfod::FetchError::NotFound { .. }) => None,
            Err(err) => {
                let give_up = matches!(
                    err,
                    debuginfod::FetchError::Timeout { .. } | debuginfod::FetchError::Connect { .. }
                );
                self.stats
                    .debuginfod_failures
                    .push(format!("{path}: {err}"));
                if give_up {
                    warn!(%err, "debuginfod does not answer; not asking it again in this run");
                    self.debuginfod = None;
                }
                None
            }
        }
    }
}

/// The vdso image of this process: the kernel maps the same one into every 64-bit process.
pub(crate) fn own_vdso() -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind};
    use std::os::unix::fs::FileExt;
    let base = crate::sys::vdso_base()
        .ok_or_else(|| Error::new(ErrorKind::NotFound, "no vDSO in the auxiliary vector"))?;
    let mem = std::fs::File::open("/proc/self/mem")?;
    // The image is a whole ELF file ending with its section headers (ELF64 header fields:
    // e_shoff at 0x28, e_shentsize at 0x3a, e_shnum at 0x3c).
    let mut header = [0u8; 64];
    mem.read_exact_at(&mut header, base)?;
    if &header[..4] != b"\x7fELF" {
        return Err(Error::new(
            ErrorKind::InvalidData,
            "the vDSO is not an ELF image",
        ));
    }
    let field = |at: usize, len: usize| {
        let mut bytes = [0u8; 8];
        bytes[..len].copy_from_slice(&header[at..at + len]);
        u64::from_le_bytes(bytes)
    };
    let size = field(0x28, 8) + field(0x3a, 2) * field(0x3c, 2);
    if !(64..=1 << 20).contains(&size) {
        return Err(Error::new(ErrorKind::InvalidData, "implausible vDSO size"));
    }
    let mut bytes = vec![0u8; size as usize];
    mem.read_exact_at(&mut bytes, base)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The image read through the auxiliary vector is the whole `[vdso]` mapping's ELF file.
    #[test]
    fn own_vdso_is_the_mapped_elf_image() {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let Some(mapping) = maps
            .lines()
            .filter_map(procmap::parse_maps_line)
            .find(|l| l.path == "[vdso]")
        else {
            eprintln!("skipped: this process has no vDSO");
            return;
        };
        let bytes = own_vdso().expect("the vDSO image");
        let mapped = mapping.end - mapping.start;
        assert!(bytes.len() as u64 <= mapped && bytes.len() as u64 > mapped / 4);
        let elf = ElfFile::parse(&bytes, "[vdso]").expect("the vDSO parses");
        assert!(elf.symbol_count() > 0, "the vDSO has symbols");
    }
}
