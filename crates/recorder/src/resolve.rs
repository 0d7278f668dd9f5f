//! Naming windows: [`symbolize::SymbolService`] does it, long-lived and bounded; the recorder
//! re-exports it under the names profctl uses, with profctl's on-disk caches.

pub use symbolize::service::{
    ResolveStats, ServiceOptions as ResolveOptions, SymbolFeed, UserSymbolStats,
};
pub use symbolize::SymbolService as Symbolizer;

/// profctl's naming options, from the environment: [`ResolveOptions::default`] with profctl's
/// caches under [`crate::user_cache_dir`] (decompressed debug sections, symbol tables, kernel
/// symbols) and the debuginfod servers of `DEBUGINFOD_URLS`.
pub fn resolve_options() -> ResolveOptions {
    ResolveOptions {
        debuginfod: debuginfod::DebuginfodConfig::from_env(),
        debug_search: crate::with_user_caches(symbolize::DebugSearch::system()),
        kernel_cache_dir: crate::user_cache_dir(),
        ..ResolveOptions::default()
    }
}
