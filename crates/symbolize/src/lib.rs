//! Address to function-name resolution from ELF symbol tables and kallsyms.
//!
//! The profiler maps a sampled address to a (file, [`FileOffset`]) pair;
//! [`ElfFile::file_offset_to_addr`] turns that into the file's own
//! [`SymbolAddr`], and [`ElfFile::symbol`] finds the function. Kernel
//! addresses go to [`KernelSymbols`]. [`SymbolCache`] parses each file once.
//!
//! [`FileSymbolizer`] adds DWARF: inlined calls as frames, source lines, and
//! the search for separate debug files ([`DebugSearch`]).

pub mod address;
pub mod cache;
pub mod demangle;
pub mod elf;
pub mod error;
pub mod frame_cache;
pub mod kernel;
pub mod symbolizer;
mod table;

pub use address::{FileOffset, SymbolAddr};
pub use cache::{build_id_debug_path, FileKey, SymbolCache};
pub use demangle::demangle;
pub use elf::{ElfFile, Symbol};
pub use error::Error;
pub use frame_cache::FrameCache;
pub use kernel::{KernelSymbol, KernelSymbols};
pub use symbolizer::{crc32, DebugSearch, FileSymbolizer, ResolvedFrame};

#[cfg(test)]
mod tests {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn thread_safety() {
        assert_send_sync::<crate::ElfFile>();
        assert_send_sync::<crate::KernelSymbols>();
        assert_send_sync::<crate::SymbolCache>();
        assert_send_sync::<crate::Error>();
        assert_send_sync::<crate::FileSymbolizer>();
    }
}
