//! Naming user-space addresses: the mapped file's symbolizer (DWARF inline frames, symbol
//! tables, separate debug files, debuginfod), the vdso, JIT perf maps.
//!
//! Each mapped file is opened once, and each distinct (file, offset) symbolized once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use std::os::fd::AsRawFd;
use std::sync::Mutex;

use procmap::FileId;
use profile::{Frame, FrameId, NormalizedWindow, Profile, WindowFile};
use rustc_hash::FxBuildHasher;
use symbolize::{DebugSearch, ElfFile, FileOffset, FileSymbolizer, FrameCache, ResolvedFrame};
use tracing::{debug, warn};

use crate::jit_map::JitMap;
use crate::preload::Preloaded;

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

impl UserSymbolStats {
    /// Add the counts of `other`.
    pub fn merge(&mut self, other: &UserSymbolStats) {
        self.files += other.files;
        self.cache_hits += other.cache_hits;
        self.cache_misses += other.cache_misses;
        self.cache_resets += other.cache_resets;
        self.debuginfod_fetched += other.debuginfod_fetched;
        self.debuginfod_failures
            .extend(other.debuginfod_failures.iter().cloned());
        self.jit_frames += other.jit_frames;
        self.frame_cache_hits += other.frame_cache_hits;
    }

    /// What was counted since `before` (a snapshot of the same counters).
    pub(crate) fn since(&self, before: &UserSymbolStats) -> UserSymbolStats {
        UserSymbolStats {
            files: self.files - before.files,
            cache_hits: self.cache_hits - before.cache_hits,
            cache_misses: self.cache_misses - before.cache_misses,
            cache_resets: self.cache_resets - before.cache_resets,
            debuginfod_fetched: self.debuginfod_fetched - before.debuginfod_fetched,
            debuginfod_failures: self.debuginfod_failures[before.debuginfod_failures.len()..]
                .to_vec(),
            jit_frames: self.jit_frames - before.jit_frames,
            frame_cache_hits: self.frame_cache_hits - before.frame_cache_hits,
        }
    }
}

/// A run of names in the arena, outermost first.
#[derive(Clone, Copy)]
struct Span {
    start: u32,
    len: u32,
    named: bool,
}

/// Names user frames; lives as long as the symbolizer that owns it, across windows.
pub(crate) struct UserSymbols {
    /// Frames of earlier runs, by build-id and offset (saved by [`UserSymbols::save`]).
    pub frame_cache: FrameCache,
    /// Symbolizers opened ahead by the preloader, taken from here on first use.
    preloaded: Arc<Mutex<Preloaded>>,
    options: ResolveOptions,
    files: HashMap<FileId, Option<Arc<FileSymbolizer>>, FxBuildHasher>,
    vdso: Option<Option<Arc<ElfFile>>>,
    jit: HashMap<u32, Option<JitMap>, FxBuildHasher>,
    /// Names by (file, offset), independent of any one profile.
    cache: HashMap<(FileId, u64), Span, FxBuildHasher>,
    arena: Vec<Box<str>>,
    scratch: Vec<ResolvedFrame>,
    debuginfod: Option<debuginfod::Client>,
    pub stats: UserSymbolStats,
}

impl UserSymbols {
    pub(crate) fn new(
        options: ResolveOptions,
        preloaded: Arc<Mutex<Preloaded>>,
        frame_cache: FrameCache,
    ) -> UserSymbols {
        let debuginfod = options.debuginfod.clone().map(debuginfod::Client::new);
        UserSymbols {
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

    /// Push the frames of user `frame` of a stack of `pid` in `window` onto `out`, innermost
    /// first (the order of a leaf-first stack). Returns whether they are real names.
    pub(crate) fn push_frames(
        &mut self,
        profile: &mut Profile,
        window: &NormalizedWindow,
        pid: u32,
        frame: Frame,
        out: &mut Vec<FrameId>,
    ) -> bool {
        let (file, offset) = match frame {
            Frame::File { file, offset } => (&window.files[file as usize], offset),
            Frame::Anonymous(addr) | Frame::Unmapped(addr) => {
                if let Some(name) = self.jit_lookup(pid, addr) {
                    self.stats.jit_frames += 1;
                    out.push(profile.intern(&name));
                    return true;
                }
                out.push(profile.intern(match frame {
                    Frame::Anonymous(_) => "[anonymous]",
                    _ => "[unknown]",
                }));
                return false;
            }
            Frame::Kernel(_) => {
                out.push(profile.intern("[kernel]"));
                return false;
            }
        };
        let key = (FileId(file.id), offset);
        let span = match self.cache.get(&key) {
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
                let span = self.symbolize(file, offset);
                self.cache.insert(key, span);
                span
            }
        };
        let names = &self.arena[span.start as usize..(span.start + span.len) as usize];
        out.extend(names.iter().rev().map(|name| profile.intern(name)));
        span.named
    }

    fn jit_lookup(&mut self, pid: u32, addr: u64) -> Option<String> {
        let map = self.jit.entry(pid).or_insert_with(|| JitMap::load(pid));
        map.as_ref()?.lookup(addr).map(str::to_string)
    }

    fn push_name(&mut self, name: &str) {
        self.arena.push(name.into());
    }

    fn symbolize(&mut self, file: &WindowFile, offset: u64) -> Span {
        let start = self.arena.len() as u32;
        let mut named = false;
        if file.path == "[vdso]" {
            if let Some(vdso) = self.vdso() {
                if let Some(sym) = vdso
                    .file_offset_to_addr(FileOffset(offset))
                    .and_then(|a| vdso.symbol(a))
                {
                    self.push_name(&symbolize::function_name(sym.name));
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
                    .symbolizer(file)
                    .and_then(|s| s.elf().build_id().map(<[u8]>::to_vec));
            }
            let cached = build_id
                .as_deref()
                .and_then(|id| self.frame_cache.get(id, offset, lines));
            if let Some(frames) = cached {
                self.scratch.clear();
                self.scratch.extend_from_slice(frames);
            } else if let Some(symbolizer) = self.symbolizer(file) {
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
                        self.push_name(&format!("{}+{:#x}", file.basename(), addr.0));
                    }
                }
            } else {
                self.scratch.clear();
            }
            let scratch = std::mem::take(&mut self.scratch);
            for frame in &scratch {
                match (&frame.file, frame.line) {
                    (Some(path), Some(line)) if lines => {
                        self.push_name(&format!("{} ({path}:{line})", frame.function))
                    }
                    _ => self.push_name(&frame.function),
                }
            }
            named = !scratch.is_empty();
            self.scratch = scratch;
        }
        if self.arena.len() as u32 == start {
            self.push_name(&format!("{}+{:#x}", file.basename(), offset));
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

    /// The symbolizer of a window file, opened once per file.
    fn symbolizer(&mut self, file: &WindowFile) -> Option<Arc<FileSymbolizer>> {
        let id = FileId(file.id);
        if let Some(hit) = self.files.get(&id) {
            return hit.clone();
        }
        let preloaded = self
            .preloaded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        if let Some(Some(ready)) = preloaded {
            // Opened while recording; files without DWARF still go through `open` when
            // debuginfod may supply it.
            if ready.has_dwarf() || self.debuginfod.is_none() {
                self.stats.files += 1;
                self.files.insert(id, Some(ready.clone()));
                return Some(ready);
            }
        }
        let opened = if file.path.starts_with('/') {
            self.open(file)
        } else {
            None
        };
        self.stats.files += opened.is_some() as usize;
        self.files.insert(id, opened.clone());
        opened
    }

    fn open(&mut self, file: &WindowFile) -> Option<Arc<FileSymbolizer>> {
        // The file as a live process sees it (its debuglink is searched beside that path);
        // else the descriptor pinned when the mapping was seen; else the path as we see it.
        let plain = PathBuf::from(file.path.trim_end_matches(" (deleted)"));
        let live = file.live_path.clone().filter(|p| p.exists());
        let (read_from, path) = match (live, &file.pinned) {
            (Some(live), _) => (live.clone(), live),
            (None, Some(pinned)) => (
                PathBuf::from(format!("/proc/self/fd/{}", pinned.as_raw_fd())),
                plain,
            ),
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
