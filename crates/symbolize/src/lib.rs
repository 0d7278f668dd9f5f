//! Address to function-name resolution from ELF symbol tables and kallsyms.
//!
//! The profiler maps a sampled address to a (file, [`FileOffset`]) pair;
//! [`ElfFile::file_offset_to_addr`] turns that into the file's own
//! [`SymbolAddr`], and [`ElfFile::symbol`] finds the function. Kernel
//! addresses go to [`KernelSymbols`].
//!
//! [`FileSymbolizer`] adds DWARF: inlined calls as frames, source lines, and
//! the search for separate debug files ([`DebugSearch`]). [`FrameCache`] keeps
//! frames between runs, per build-id and file offset; [`ElfLayout`] computes that key for a
//! file's own addresses without reading its symbols or DWARF.
//!
//! [`service::SymbolService`] is the long-lived user of all of these: it names the frames of
//! normalized windows ([`profile::NormalizedWindow`]), with bounded caches of symbolizers,
//! names and JIT maps, and opens files ahead on a thread of its own.

pub mod address;
mod debug_search;
pub mod decompress;
pub mod demangle;
mod disk_cache;
mod dwarf;
pub mod elf;
pub mod elf_layout;
pub mod error;
mod frame;
pub mod frame_cache;
mod go;
pub mod kernel;
mod section_cache;
pub mod service;
pub mod symbolizer;
mod sys;
mod table;
mod unit_index;
pub mod vdso;

pub use address::{FileOffset, SymbolAddr};
pub use debug_search::{crc32, DebugSearch};
pub use demangle::{demangle, function_name};
pub use elf::{ElfFile, Symbol};
pub use elf_layout::ElfLayout;
pub use error::Error;
pub use frame::ResolvedFrame;
pub use frame_cache::FrameCache;
pub use kernel::{KernelSymbol, KernelSymbols};
pub use service::SymbolService;
pub use symbolizer::FileSymbolizer;
pub use vdso::own_vdso_image;

#[cfg(test)]
mod tests {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn thread_safety() {
        assert_send_sync::<crate::ElfFile>();
        assert_send_sync::<crate::ElfLayout>();
        assert_send_sync::<crate::KernelSymbols>();
        assert_send_sync::<crate::Error>();
        assert_send_sync::<crate::FileSymbolizer>();
        fn assert_send<T: Send>() {}
        assert_send::<crate::SymbolService>();
        assert_send_sync::<crate::service::PreloadQueue>();
    }
}
