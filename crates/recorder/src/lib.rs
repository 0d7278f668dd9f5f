//! Recording, end to end: open the sampling events, follow the processes, count each sample's
//! stack in the time window of its timestamp, hand each closed window on normalized
//! ([`profile::NormalizedWindow`]), and name its frames with a long-lived [`Symbolizer`]
//! (`symbolize`'s service, re-exported).
//!
//! `profctl record` (embedded mode) drives this directly; the daemon reuses the same pieces.

mod cache_root;
mod drain_loop;
mod error;
mod launch;
mod normalize;
mod offcpu;
mod options;
mod preload;
mod rate;
mod recording;
mod report;
mod resolve;
mod rest_tick;
mod sampler_config;
mod sink;
mod snapshot;
mod stop;
mod sys;
mod unwinders;
mod usage;
mod windows;

pub use error::RecordError;
pub use launch::Launched;
pub use offcpu::SwitchStats;
pub use options::{defaults, CallGraph, Measure, RecordOptions, RecordTarget};
pub use procmap::PinnedFiles;
pub use rate::FrequencyControl;
pub use recording::{record, Recording};
pub use report::{ClosedWindow, CpuMarks, Progress, RecordingStats, Tracked};
pub use resolve::{
    resolve_options, ResolveOptions, ResolveStats, SymbolFeed, Symbolizer, UserSymbolStats,
};
pub use snapshot::{OpenSnapshot, SnapshotControl};
pub use usage::{
    anonymous_resident_bytes, open_fds, page_size, release_free_memory, resident_bytes,
    ProcessUsage,
};

pub use cache_root::{check_cache_root, check_private_dir, AclKind, CacheRootError};

/// profctl's cache directory: `$XDG_CACHE_HOME/profctl`, else `~/.cache/profctl` (kernel
/// symbols per boot, frames per build-id, decompressed debug sections per build-id); None
/// when neither is set, or when the directory is not this user's alone (see
/// [`check_cache_root`]; checked once per process, with a warning).
pub fn user_cache_dir() -> Option<std::path::PathBuf> {
    static ROOT: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| cache_root::safe_cache_root(cache_dir_from_env()?))
        .clone()
}

/// `$XDG_CACHE_HOME/profctl`, else `$HOME/.cache/profctl`, unchecked.
fn cache_dir_from_env() -> Option<std::path::PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| std::path::PathBuf::from(h).join(".cache"))
        });
    base.map(|b| b.join("profctl"))
}

/// Where frames named from DWARF are kept between runs (`frames/` under [`user_cache_dir`]).
pub fn frame_cache_dir() -> Option<std::path::PathBuf> {
    user_cache_dir().map(|d| d.join("frames"))
}

/// `search` with profctl's on-disk caches of decompressed debug sections (`dwarf/`) and
/// parsed symbol tables (`symbols/`) under [`user_cache_dir`].
pub fn with_user_caches(search: symbolize::DebugSearch) -> symbolize::DebugSearch {
    let dir = user_cache_dir();
    symbolize::DebugSearch {
        section_cache: dir.as_ref().map(|d| d.join("dwarf")),
        symbol_cache: dir.map(|d| d.join("symbols")),
        ..search
    }
}
