//! How a [`super::SymbolService`] names frames, and the bounds of what it keeps.

use std::path::PathBuf;
use std::time::Duration;

use crate::DebugSearch;

/// How frames are named.
#[derive(Clone, Debug)]
pub struct ServiceOptions {
    /// Put `file:line` on frames that have it.
    pub lines: bool,
    /// Look up each frame's source file and line even when [`ServiceOptions::lines`] does not
    /// put them in names, for [`super::SymbolService::symbolize_located`] (pprof output).
    pub source_locations: bool,
    /// Where separate debug files are looked for (by the naming thread and the preloader).
    pub debug_search: DebugSearch,
    /// Fetch missing debug info from these debuginfod servers (None: don't).
    pub debuginfod: Option<debuginfod::DebuginfodConfig>,
    /// Where kernel symbols are cached per boot ([`crate::KernelSymbols::load_cached`]);
    /// None: `/proc/kallsyms` is parsed every time.
    pub kernel_cache_dir: Option<PathBuf>,
    /// Weigh each stack by its time (period / 1000: microseconds for cpu-clock samples and
    /// off-CPU stacks) instead of its samples, for off-CPU and wall-clock profiles.
    pub time_weights: bool,
    /// Binaries, by GNU build-id, whose frames are named from their symbol tables alone: no
    /// DWARF is read for them, so their frames have no inlined calls and no lines. A service
    /// that samples itself lists its own binary: naming its own frames through DWARF costs
    /// more than the frames are worth, and the naming is sampled in turn.
    pub symbol_table_only: Vec<Box<[u8]>>,
    /// Bounds of what the service keeps.
    pub limits: Limits,
}

impl Default for ServiceOptions {
    /// No lines, the system's debug directory without on-disk caches, no debuginfod, default
    /// bounds. (Nothing is read from the environment: callers that want `DEBUGINFOD_URLS`
    /// say so, as `recorder::resolve_options` does.)
    fn default() -> Self {
        ServiceOptions {
            lines: false,
            source_locations: false,
            debug_search: DebugSearch::system(),
            debuginfod: None,
            kernel_cache_dir: None,
            time_weights: false,
            symbol_table_only: Vec::new(),
            limits: Limits::default(),
        }
    }
}

/// Bounds of what a [`super::SymbolService`] keeps between windows. Counts and byte sizes
/// are each a bound of their own: whichever is reached first evicts.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Files with an open symbolizer, least recently used closed first.
    pub open_files: usize,
    /// Estimated bytes of those symbolizers ([`crate::FileSymbolizer::estimated_bytes`]);
    /// the one in use is kept even when it alone is larger.
    pub open_file_bytes: u64,
    /// User addresses (file, offset) whose names are cached.
    pub names: usize,
    /// Bytes of cached user names (text plus a per-entry overhead).
    pub name_bytes: usize,
    /// Kernel addresses whose names are cached.
    pub kernel_names: usize,
    /// Bytes of cached kernel names.
    pub kernel_name_bytes: usize,
    /// Processes whose JIT map (or the lack of one) is remembered.
    pub jit_maps: usize,
    /// Bytes of JIT maps held, all processes together.
    pub jit_bytes: u64,
    /// A JIT map file larger than this is refused.
    pub jit_file_bytes: u64,
    /// A JIT map with more entries than this is refused.
    pub jit_entries: usize,
    /// Files waiting to be opened ahead; requests past this are dropped (the file is then
    /// opened when a window needs it).
    pub preload_queue: usize,
    /// After a debuginfod server stops answering, it is not asked again for the rest of the
    /// window nor before this; doubled each time it fails again, up to
    /// `debuginfod_max_backoff`.
    pub debuginfod_backoff: Duration,
    /// Most frames of one stack named, kernel and inlined frames included: the innermost
    /// are kept, the rest cut and marked `[truncated]`. Bounds a window's naming work to this
    /// many frames per sample.
    pub stack_frames: usize,
    /// The longest debuginfod back-off.
    pub debuginfod_max_backoff: Duration,
    /// A build-id whose fetch failed is not asked again before this.
    pub debuginfod_retry: Duration,
}

/// [`Limits::stack_frames`] by default: every kernel frame the kernel gives (127) and every
/// user frame the unwinder gives (1024), with room for inlined functions.
pub const DEFAULT_STACK_FRAMES: usize = 4096;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            open_files: 128,
            open_file_bytes: 1 << 30,
            names: 1 << 20,
            name_bytes: 64 << 20,
            kernel_names: 1 << 16,
            kernel_name_bytes: 8 << 20,
            jit_maps: 1024,
            jit_bytes: 256 << 20,
            jit_file_bytes: 64 << 20,
            jit_entries: 1 << 20,
            preload_queue: 1024,
            stack_frames: DEFAULT_STACK_FRAMES,
            debuginfod_backoff: Duration::from_secs(60),
            debuginfod_max_backoff: Duration::from_secs(3600),
            debuginfod_retry: Duration::from_secs(600),
        }
    }
}
