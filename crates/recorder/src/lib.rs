//! One recording, end to end: open the sampling events, follow the processes, count raw stacks,
//! then symbolize them into a [`profile::Profile`].
//!
//! `profctl record` (embedded mode) drives this directly; the daemon reuses the same pieces.

mod error;
mod jit_map;
mod launch;
mod options;
mod preload;
mod recording;
mod resolve;
mod sink;
mod sys;
mod usage;
mod user_symbols;

pub use error::RecordError;
pub use options::{defaults, CallGraph, RecordOptions, RecordTarget};
pub use procmap::PinnedFiles;
pub use recording::{record, CpuMarks, Progress, Recording, RecordingStats};
pub use resolve::{resolve, ResolveStats};
pub use usage::ProcessUsage;
pub use user_symbols::{ResolveOptions, UserSymbolStats};

/// profctl's cache directory: `$XDG_CACHE_HOME/profctl`, else `~/.cache/profctl` (kernel
/// symbols per boot, frames per build-id, decompressed debug sections per build-id).
pub fn user_cache_dir() -> Option<std::path::PathBuf> {
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
