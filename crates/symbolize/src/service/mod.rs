//! A long-lived service naming the frames of normalized windows
//! ([`profile::NormalizedWindow`]), for a recording or for a daemon that runs for weeks.
//!
//! What it keeps between windows is bounded ([`Limits`]), each by a rule of its own:
//! - open symbolizers (`files.rs`): an LRU by count and estimated bytes, one per source
//!   (`sources.rs`: copies of a binary with the same build-id, size and owner are one),
//!   closed after a minute unused (the names they gave stay cached);
//! - names of user addresses by (source, offset), and of kernel addresses (`names.rs`,
//!   `kernel.rs`): two generations, bounded by entries and bytes of names;
//! - JIT perf maps (`jit.rs`): by (pid, process start), an LRU by count and bytes, each map
//!   refused past a size; read again when the file changed, at most once per window;
//! - files opened ahead (`preload.rs`): a bounded queue, at most as many results as files
//!   may be open;
//! - debuginfod failures (`debuginfod.rs`): per build-id, and a back-off per server outage.
//!
//! Its owner says when things go away: [`SymbolService::evict_file`] once no process maps a
//! file, [`SymbolService::evict_process`] when a process exits, [`SymbolService::shed`] to
//! fall to the minimum under memory pressure. [`SymbolService::sizes`] tells what it holds.

mod debuginfod;
mod files;
mod jit;
mod kernel;
mod lru;
mod names;
mod options;
mod preload;
mod sources;
mod stack;
mod stats;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use profile::{
    Frame, FrameId, NormalizedWindow, Profile, StackEnd, ThreadLabels, WaitKind, WindowFile,
};
use rustc_hash::FxBuildHasher;
use tracing::debug;

pub use options::{Limits, ServiceOptions};
pub use preload::{PreloadQueue, PreloadRequest};
pub use sources::ContentKey;
pub use stats::{ResolveStats, ServiceSizes, UserSymbolStats};

use self::debuginfod::{Backoff, DebugInfoSource, Fetcher};
use self::files::OpenFiles;
use self::jit::JitMaps;
use self::kernel::{KernelLoader, KernelNames};
use self::names::{NameCache, Names, SourceLine};
use self::sources::SourceId;
use self::stack::WindowNames;
use crate::{ElfFile, FileOffset, FrameCache, ResolvedFrame};

/// What a recording hands the service while it records: files to open ahead, and the
/// signal to start loading kernel symbols. Get one from [`SymbolService::feed`].
#[derive(Clone)]
pub struct SymbolFeed {
    /// Where the files that new stacks pass through are sent, to be opened ahead.
    pub preloaded: PreloadQueue,
    kernel: KernelLoader,
}

impl SymbolFeed {
    /// Start loading kernel symbols in the background.
    pub fn load_kernel_symbols(&self) {
        self.kernel.start();
    }
}

/// One stack of a window as [`SymbolService::symbolize_stacks`] names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedStack {
    /// Its frames, outermost first (without the command name; inlined functions are frames of
    /// their own), as ids of the names in the profile returned with it.
    pub frames: Vec<FrameId>,
    /// How many of the last (innermost) frames are kernel frames.
    pub kernel_frames: u32,
}

/// One line of a [`LocatedFrame`]: a function and where in its source the code is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocatedLine {
    /// The frame's name in the profile returned with it (with `file:line` when the service
    /// puts lines in names).
    pub name: FrameId,
    /// The function's name alone (without `file:line`).
    pub function: Box<str>,
    /// The source file, when known (and looked up: [`ServiceOptions::source_locations`]).
    pub file: Option<Box<str>>,
    /// The source line, 0 when unknown.
    pub line: u32,
}

/// One frame of a [`LocatedStack`]: where it was sampled and the functions there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocatedFrame {
    /// The window's frame (kernel address, file and offset, anonymous or unmapped address);
    /// None for a marker the service adds (`[truncated]`, `[unknown]` for an empty stack).
    pub site: Option<Frame>,
    /// The functions at this address, innermost first: the code executing, then each
    /// function it was inlined into (as pprof's `Location.line` orders them).
    pub lines: Vec<LocatedLine>,
}

/// One stack of a window as [`SymbolService::symbolize_located`] names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocatedStack {
    /// Index into the window's threads.
    pub thread: u32,
    /// Samples.
    pub count: u64,
    /// Sum of the samples' periods (for an off-CPU stack, its time off CPU in ns).
    pub period: u64,
    /// Frames, innermost first: kernel frames, then user frames (and, for an off-CPU stack,
    /// the frame naming its wait kind innermost).
    pub frames: Vec<LocatedFrame>,
}

/// Names the frames of normalized windows. Long-lived: what it opened and named for one window
/// serves the next ones, within its [`Limits`].
pub struct SymbolService {
    lines: bool,
    /// Weigh stacks by time, not samples (see [`ServiceOptions::time_weights`]).
    time_weights: bool,
    source_locations: bool,
    /// Build-ids named from their symbol tables alone ([`ServiceOptions::symbol_table_only`]).
    symbol_table_only: Vec<Box<[u8]>>,
    files: OpenFiles,
    /// Names by source (copies of a file share them) and file offset.
    names: NameCache<(SourceId, u64)>,
    kernel: KernelNames,
    jit: JitMaps,
    vdso: Option<Option<Arc<ElfFile>>>,
    /// Frames of earlier runs, by build-id and offset (saved by [`SymbolService::save_caches`]).
    frame_cache: FrameCache,
    scratch: Vec<ResolvedFrame>,
    /// Most frames kept of one stack, inlined ones included ([`Limits::stack_frames`]).
    stack_frames: usize,
    /// Windows named so far (the current one's number while naming).
    window: u64,
    /// Counters of the window being named.
    stats: UserSymbolStats,
}

impl SymbolService {
    /// A service naming frames as `options` say, keeping DWARF frames between runs in
    /// `frame_cache_dir` (None: not kept).
    pub fn new(options: ServiceOptions, frame_cache_dir: Option<PathBuf>) -> SymbolService {
        let source = options
            .debuginfod
            .clone()
            .map(|c| Box::new(::debuginfod::Client::new(c)) as Box<dyn DebugInfoSource>);
        SymbolService::with_debug_info_source(options, frame_cache_dir, source)
    }

    fn with_debug_info_source(
        options: ServiceOptions,
        frame_cache_dir: Option<PathBuf>,
        source: Option<Box<dyn DebugInfoSource>>,
    ) -> SymbolService {
        let limits = options.limits;
        let fetcher = Fetcher::new(
            source,
            Backoff {
                first: limits.debuginfod_backoff,
                max: limits.debuginfod_max_backoff,
                retry_build_id: limits.debuginfod_retry,
            },
        );
        SymbolService {
            lines: options.lines,
            time_weights: options.time_weights,
            source_locations: options.source_locations,
            files: OpenFiles::new(
                limits.open_files,
                limits.open_file_bytes,
                options.debug_search,
                fetcher,
                limits.preload_queue,
                options.symbol_table_only.clone(),
            ),
            symbol_table_only: options.symbol_table_only,
            names: NameCache::new(limits.names, limits.name_bytes),
            kernel: KernelNames::new(
                KernelLoader::new(options.kernel_cache_dir),
                limits.kernel_names,
                limits.kernel_name_bytes,
            ),
            jit: JitMaps::new(
                limits.jit_maps,
                limits.jit_bytes,
                limits.jit_file_bytes,
                limits.jit_entries,
            ),
            vdso: None,
            frame_cache: FrameCache::new(frame_cache_dir),
            scratch: Vec::new(),
            stack_frames: limits.stack_frames.max(1),
            window: 0,
            stats: UserSymbolStats::default(),
        }
    }

    /// The feed a recording fills for this service.
    pub fn feed(&self) -> SymbolFeed {
        SymbolFeed {
            preloaded: self.files.preload_queue(),
            kernel: self.kernel.loader().clone(),
        }
    }

    /// Name every stack of `window` into a profile whose stacks start with the thread's
    /// command name.
    pub fn symbolize(&mut self, window: &NormalizedWindow) -> (Profile, ResolveStats) {
        self.symbolize_into(window, None, None)
    }

    /// As [`SymbolService::symbolize`], and also each stack of `window` with its frames
    /// located: where each was sampled, and the functions there (inlined ones apart) with
    /// their source files and lines (looked up when [`ServiceOptions::source_locations`] or
    /// [`ServiceOptions::lines`] is set), for output formats that keep them (pprof).
    pub fn symbolize_located(
        &mut self,
        window: &NormalizedWindow,
    ) -> (Profile, Vec<LocatedStack>, ResolveStats) {
        let mut located = Vec::with_capacity(window.stacks.len());
        let (profile, stats) = self.symbolize_into(window, None, Some(&mut located));
        (profile, located, stats)
    }

    /// As [`SymbolService::symbolize`], and also each stack of `window` on its own, in the
    /// order of `window.stacks`, with its labels kept apart (for a store that filters by
    /// process or user): its names are the returned profile's.
    pub fn symbolize_stacks(
        &mut self,
        window: &NormalizedWindow,
    ) -> (Profile, Vec<NamedStack>, ResolveStats) {
        let mut named = Vec::with_capacity(window.stacks.len());
        let (profile, stats) = self.symbolize_into(window, Some(&mut named), None);
        (profile, named, stats)
    }

    fn symbolize_into(
        &mut self,
        window: &NormalizedWindow,
        mut named_stacks: Option<&mut Vec<NamedStack>>,
        mut located_stacks: Option<&mut Vec<LocatedStack>>,
    ) -> (Profile, ResolveStats) {
        self.window += 1;
        self.stats = UserSymbolStats::default();
        let now = Instant::now();
        let evicted_before = self.names.evicted() + self.kernel.evicted();
        let frame_cache_hits_before = self.frame_cache.hits;
        self.files.close_idle(now, &mut self.stats);
        self.files
            .adopt_preloaded(self.window, now, &mut self.stats);
        self.kernel.refresh_if_modules_changed();

        let mut profile = Profile::new();
        let unknown = profile.intern("[unknown]");
        let truncated = profile.intern("[truncated]");
        let mut kernel_ids: HashMap<u64, (FrameId, bool), FxBuildHasher> = HashMap::default();
        let mut stats = ResolveStats {
            unwind: window.quality.clone(),
            ..ResolveStats::default()
        };
        let mut frames: Vec<FrameId> = Vec::with_capacity(256);
        let locating = located_stacks.is_some();
        let mut located: Vec<LocatedFrame> = Vec::new();
        let mut sources: Vec<SourceLine> = Vec::new();
        let mut named_here = WindowNames::default();
        for stack in &window.stacks {
            frames.clear();
            located.clear();
            let thread = &window.threads[stack.thread as usize];
            let (kernel, user) = window.frames_of(stack);
            let mut unnamed = 0u64;
            for frame in kernel {
                if let Frame::Kernel(addr) = *frame {
                    let (id, named) = *kernel_ids.entry(addr).or_insert_with(|| {
                        let names = self.kernel.name(addr);
                        (profile.intern(names.name(0)), names.named())
                    });
                    frames.push(id);
                    unnamed += !named as u64;
                    if locating {
                        located.push(LocatedFrame {
                            site: Some(*frame),
                            lines: vec![LocatedLine {
                                name: id,
                                function: profile.name(id).into(),
                                file: None,
                                line: 0,
                            }],
                        });
                    }
                }
            }
            let kernel_frames = frames.len() as u32;
            let located_out = locating.then_some((&mut located, &mut sources));
            let user_named = self.push_user_stack(
                &mut profile,
                window,
                thread,
                user,
                now,
                &mut frames,
                located_out,
                &mut named_here,
            );
            unnamed += user_named.unnamed;
            let marker = |id: FrameId, profile: &Profile| LocatedFrame {
                site: None,
                lines: vec![LocatedLine {
                    name: id,
                    function: profile.name(id).into(),
                    file: None,
                    line: 0,
                }],
            };
            if stack.user_end == StackEnd::Truncated || user_named.capped {
                frames.push(truncated);
                if locating {
                    located.push(marker(truncated, &profile));
                }
            }
            if frames.is_empty() {
                frames.push(unknown);
                unnamed += 1;
                if locating {
                    located.push(marker(unknown, &profile));
                }
            }
            if stack.weight.is_off_cpu() {
                let names = frames.iter().map(|&id| profile.name(id));
                let kind = WaitKind::classify(stack.weight, names);
                let id = profile.intern(kind.frame());
                frames.insert(0, id);
                if locating {
                    located.insert(0, marker(id, &profile));
                }
            }
            stats.frames += frames.len() as u64 * stack.count;
            stats.unnamed += unnamed * stack.count;
            let comm = match &thread.comm {
                Some(name) => profile.intern(name),
                None if thread.pid == 0 => profile.intern("swapper"),
                None => profile.intern(&format!("[pid {}]", thread.pid)),
            };
            frames.push(comm);
            frames.reverse();
            let weight = if self.time_weights {
                stack.period.saturating_add(500) / 1000
            } else {
                stack.count
            };
            profile.add(&frames, weight);
            if let Some(out) = named_stacks.as_deref_mut() {
                out.push(NamedStack {
                    frames: frames[1..].to_vec(),
                    kernel_frames,
                });
            }
            if let Some(out) = located_stacks.as_deref_mut() {
                out.push(LocatedStack {
                    thread: stack.thread,
                    count: stack.count,
                    period: stack.period,
                    frames: std::mem::take(&mut located),
                });
            }
        }
        stats.kernel_addresses = kernel_ids.len() as u64;
        self.stats.cache_evictions = self.names.evicted() + self.kernel.evicted() - evicted_before;
        self.stats.frame_cache_hits = self.frame_cache.hits - frame_cache_hits_before;
        stats.user = std::mem::take(&mut self.stats);
        (profile, stats)
    }

    /// Push the frames of user `frame` of a stack of `thread` in `window` onto `out`,
    /// innermost first (the order of a leaf-first stack), and with `sources`, their source
    /// files and lines in the same order (when kept). Returns whether they are names.
    #[allow(clippy::too_many_arguments)]
    fn push_user_frames(
        &mut self,
        profile: &mut Profile,
        window: &NormalizedWindow,
        thread: &ThreadLabels,
        frame: Frame,
        now: Instant,
        out: &mut Vec<FrameId>,
        mut sources: Option<&mut Vec<SourceLine>>,
    ) -> bool {
        if let Some(s) = sources.as_deref_mut() {
            s.clear();
        }
        let (file, offset) = match frame {
            Frame::File { file, offset } => (&window.files[file as usize], offset),
            Frame::Anonymous(addr) | Frame::Unmapped(addr) => {
                if let Some(name) = self.jit.lookup(thread, addr, self.window, &mut self.stats) {
                    self.stats.jit_frames += 1;
                    out.push(profile.intern(name));
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
        let source = self.files.source(file);
        let key = (source, offset);
        if self.names.get(&key).is_some() {
            self.stats.cache_hits += 1;
        } else {
            self.stats.cache_misses += 1;
            let found = self.name_file_offset(file, source, offset, now);
            self.names.insert_names(key, &found);
        }
        let names = self.names.get(&key).expect("just cached");
        out.extend(names.names().rev().map(|name| profile.intern(name)));
        if let Some(s) = sources {
            s.extend((0..names.len()).rev().map(|i| {
                names
                    .source(i)
                    .map_or((None, 0), |(file, line)| (file.map(Into::into), line))
            }));
        }
        names.named()
    }

    /// Name `offset` of `file`, one of `source` (a cache miss).
    fn name_file_offset(
        &mut self,
        file: &WindowFile,
        source: SourceId,
        offset: u64,
        now: Instant,
    ) -> Names {
        tracing::trace!(file = %file.path, offset, "address named");
        let mut names: Vec<Box<str>> = Vec::new();
        let mut sources: Vec<SourceLine> = Vec::new();
        let mut named = false;
        if file.path == "[vdso]" {
            if let Some(vdso) = self.vdso() {
                if let Some(sym) = vdso
                    .file_offset_to_addr(FileOffset(offset))
                    .and_then(|a| vdso.symbol(a))
                {
                    names.push(crate::function_name(sym.name).into());
                    named = true;
                }
            }
        } else {
            // Lines are looked up for names, or for located frames.
            let lines = self.lines || self.source_locations;
            let window = self.window;
            // A mapping read from /proc (a process running before sampling began) carries no
            // build-id: the file's own is checked once it is open.
            let table_only = file
                .build_id
                .as_deref()
                .is_some_and(|id| listed(&self.symbol_table_only, id));
            // Frames seen by an earlier run come from the frame cache, without opening the
            // file. Its entries are keyed by content (build-id, size and owner), so a file
            // that only claims another's build-id never reads or writes that one's frames.
            let cache_id = self
                .files
                .key(source)
                .and_then(|k| k.content())
                .and_then(ContentKey::cache_id);
            let cached = cache_id
                .as_deref()
                .filter(|_| !table_only)
                .and_then(|id| self.frame_cache.get(id, offset, lines));
            self.scratch.clear();
            if let Some(frames) = cached {
                self.scratch.extend_from_slice(frames);
            } else if let Some(symbolizer) =
                self.files.symbolizer(file, window, now, &mut self.stats)
            {
                if let Some(addr) = symbolizer.file_offset_to_addr(FileOffset(offset)) {
                    let table_only = table_only
                        || symbolizer
                            .elf()
                            .build_id()
                            .is_some_and(|id| listed(&self.symbol_table_only, id));
                    let built = symbolizer.dwarf_indexes_built();
                    match table_only {
                        true => symbolizer.symbol_frames_into(addr, &mut self.scratch),
                        false => symbolizer.frames_into(addr, lines, &mut self.scratch),
                    }
                    self.files
                        .count_lookup(symbolizer.dwarf_indexes_built().saturating_sub(built));
                    // Only frames from DWARF are kept: names from a symbol table alone would
                    // hide debug info installed later.
                    if let (Some(id), false, true, false) = (
                        &cache_id,
                        self.scratch.is_empty(),
                        symbolizer.has_dwarf(),
                        table_only,
                    ) {
                        self.frame_cache.insert(id, offset, lines, &self.scratch);
                    }
                    if self.scratch.is_empty() {
                        names.push(format!("{}+{:#x}", file.basename(), addr.0).into());
                    }
                }
                drop(symbolizer);
                // The lookup may have parsed more DWARF.
                self.files.reweigh(source, &mut self.stats);
            }
            for frame in &self.scratch {
                names.push(match (&frame.file, frame.line) {
                    (Some(path), Some(line)) if self.lines => {
                        format!("{} ({path}:{line})", frame.function).into()
                    }
                    _ => frame.function.as_str().into(),
                });
                if self.source_locations {
                    sources.push((
                        frame.file.as_deref().map(Into::into),
                        frame.line.unwrap_or(0),
                    ));
                }
            }
            named = !self.scratch.is_empty();
        }
        if names.is_empty() {
            names.push(format!("{}+{:#x}", file.basename(), offset).into());
        }
        let sources = self.source_locations.then(|| {
            sources.resize(names.len(), (None, 0));
            sources
        });
        Names {
            names,
            sources,
            named,
        }
    }

    fn vdso(&mut self) -> Option<Arc<ElfFile>> {
        self.vdso
            .get_or_insert_with(|| match crate::vdso::own_vdso_image() {
                Ok(bytes) => ElfFile::parse(&bytes, "[vdso]").map(Arc::new).ok(),
                Err(err) => {
                    debug!(%err, "cannot read the vdso image");
                    None
                }
            })
            .clone()
    }

    /// Keep the frames named so far on disk, for later runs.
    pub fn save_caches(&mut self) {
        if let Err(err) = self.frame_cache.save() {
            debug!(%err, "cannot save the frame cache");
        }
    }

    /// No process maps the file `file_id` ([`profile::WindowFile::id`]) any more: close the
    /// symbolizer read from it (releasing its mappings, and so a deleted binary's disk space
    /// if nothing else holds it) and drop what was opened ahead for it. Its cached names,
    /// shared with its copies, age out with their generation. Returns whether a symbolizer
    /// was closed.
    pub fn evict_file(&mut self, file_id: u32) -> bool {
        self.files.evict(file_id)
    }

    /// The process (`pid`, `process_start`) exited: drop its JIT map. Returns whether one
    /// was held.
    pub fn evict_process(&mut self, pid: u32, process_start: u64) -> bool {
        self.jit.evict(pid, process_start)
    }

    /// Shrink to what later windows need, keeping every cached name: let go of what no
    /// window used since the last call. The pages of mapped files (debug files, decompressed
    /// sections, symbol tables) that naming made resident, of symbolizers (and the kernel's
    /// symbols) no lookup used since (they stay in the page cache, and a later lookup faults
    /// what it reads back in), and the DWARF indexes (whole-file, per unit) no lookup used
    /// since (built again on need). A service calls this every few windows, so that its
    /// resident set holds what it keeps using, not every page it read or every index it once
    /// built, and what the windows keep needing is neither read nor parsed again each time.
    pub fn trim(&mut self) {
        self.files.trim();
        self.kernel.release_resident_pages(false);
    }

    /// Let go of the resident pages of every mapped file, used or not (under memory
    /// pressure: what the next lookups read is faulted back in from the page cache). Nothing
    /// parsed is dropped: see [`SymbolService::trim`].
    pub fn release_resident_pages(&mut self) {
        self.files.release_resident_pages();
        self.kernel.release_resident_pages(true);
    }

    /// Drop the caches to their minimum (under memory pressure): symbolizers and what was
    /// opened ahead, JIT maps, kernel names; and the cached names of user addresses not used
    /// since the last shed or generation (the rest become the old generation: two sheds in a
    /// row drop them all). Naming goes on, opening and reading again.
    pub fn shed(&mut self) {
        self.files.clear();
        self.names.shed();
        self.kernel.clear();
        self.jit.clear();
    }

    /// What the service holds now.
    pub fn sizes(&self) -> ServiceSizes {
        let (symbolizers, symbolizer_bytes, preloaded) = self.files.sizes();
        let (files, sources) = self.files.sources();
        let (jit_maps, jit_bytes) = self.jit.sizes();
        ServiceSizes {
            symbolizers,
            symbolizer_bytes,
            preloaded,
            files,
            sources,
            names: self.names.len(),
            name_bytes: self.names.bytes(),
            lookups: self.files.lookups(),
            dwarf_indexes_built: self.files.indexes_built(),
            kernel_names: self.kernel.sizes().0,
            kernel_reloads: self.kernel.reloads(),
            jit_maps,
            jit_bytes,
        }
    }
}

/// Whether `id` is one of the build-ids named from their symbol tables alone.
fn listed(symbol_table_only: &[Box<[u8]>], id: &[u8]) -> bool {
    symbol_table_only.iter().any(|own| **own == *id)
}

impl std::fmt::Debug for SymbolService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymbolService")
            .field("window", &self.window)
            .field("sizes", &self.sizes())
            .finish_non_exhaustive()
    }
}
