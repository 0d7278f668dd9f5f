//! What naming a window counted, and what the service holds.

use profile::UnwindQuality;

/// How well the frames of a window were named.
#[derive(Clone, Debug, Default)]
pub struct ResolveStats {
    /// Frames in all samples (weighted by sample count).
    pub frames: u64,
    /// Of those, frames that could not be named (`module+0x…` or `[unknown]`).
    pub unnamed: u64,
    /// Distinct kernel addresses named.
    pub kernel_addresses: u64,
    /// User symbolization counters (files, address cache, debuginfod, JIT).
    pub user: UserSymbolStats,
    /// How DWARF-unwound stacks ended (empty in frame-pointer mode).
    pub unwind: UnwindQuality,
}

impl ResolveStats {
    /// Add the counts of `other` (another window's).
    pub fn merge(&mut self, other: &ResolveStats) {
        self.frames += other.frames;
        self.unnamed += other.unnamed;
        self.kernel_addresses += other.kernel_addresses;
        self.user.merge(&other.user);
        self.unwind.merge(&other.unwind);
    }

    /// Share of frames left unnamed, 0.0–1.0.
    pub fn unnamed_share(&self) -> f64 {
        if self.frames == 0 {
            0.0
        } else {
            self.unnamed as f64 / self.frames as f64
        }
    }
}

/// Counters of user symbolization in a window.
#[derive(Clone, Debug, Default)]
pub struct UserSymbolStats {
    /// Files opened (symbolizers built or taken from the preloader).
    pub files: usize,
    /// Symbolizers dropped to keep the open files within their bounds.
    pub files_evicted: u64,
    /// Address cache hits.
    pub cache_hits: u64,
    /// Address cache misses (addresses symbolized).
    pub cache_misses: u64,
    /// Cached names (user and kernel addresses) dropped to keep the caches within their
    /// bounds.
    pub cache_evictions: u64,
    /// Debug files fetched from debuginfod.
    pub debuginfod_fetched: u64,
    /// What could not be fetched, and why (one line each).
    pub debuginfod_failures: Vec<String>,
    /// Frames named from JIT perf maps.
    pub jit_frames: u64,
    /// JIT perf maps read (first reads and reloads of a changed file).
    pub jit_loads: u64,
    /// JIT perf maps refused (too large, not a regular file, wrong owner).
    pub jit_refused: u64,
    /// Addresses answered from the on-disk frame cache (frames of earlier runs).
    pub frame_cache_hits: u64,
}

impl UserSymbolStats {
    /// Add the counts of `other`.
    pub fn merge(&mut self, other: &UserSymbolStats) {
        self.files += other.files;
        self.files_evicted += other.files_evicted;
        self.cache_hits += other.cache_hits;
        self.cache_misses += other.cache_misses;
        self.cache_evictions += other.cache_evictions;
        self.debuginfod_fetched += other.debuginfod_fetched;
        self.debuginfod_failures
            .extend(other.debuginfod_failures.iter().cloned());
        self.jit_frames += other.jit_frames;
        self.jit_loads += other.jit_loads;
        self.jit_refused += other.jit_refused;
        self.frame_cache_hits += other.frame_cache_hits;
    }
}

/// What a [`super::SymbolService`] holds now, for status and memory budgets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServiceSizes {
    /// Files with an open symbolizer (or remembered as unreadable).
    pub symbolizers: usize,
    /// Their estimated bytes ([`crate::FileSymbolizer::estimated_bytes`]).
    pub symbolizer_bytes: u64,
    /// Symbolizers opened ahead, not yet taken.
    pub preloaded: usize,
    /// Files seen and not yet released ([`super::SymbolService::evict_file`]).
    pub files: usize,
    /// The sources those files make (copies of one binary are one source).
    pub sources: usize,
    /// User addresses whose names are cached.
    pub names: usize,
    /// Bytes of those names (as counted against the bound).
    pub name_bytes: usize,
    /// Addresses looked up in their files (DWARF, a Go function table or symbol tables) since
    /// the service started: the cache misses that were not answered by the frame cache of
    /// earlier runs. An address named once is answered by the name cache after that.
    pub lookups: u64,
    /// DWARF indexes (a unit's, or a whole file's) those lookups built since the service
    /// started, each built again after a trim dropped it counted again; with those built
    /// warming the files opened ahead, counted once such a file is taken.
    pub dwarf_indexes_built: u64,
    /// Kernel addresses whose names are cached.
    pub kernel_names: usize,
    /// Processes whose JIT map is held.
    pub jit_maps: usize,
    /// Bytes of those maps.
    pub jit_bytes: u64,
    /// Times kallsyms was read again because kernel modules were loaded or unloaded.
    pub kernel_reloads: u64,
}
