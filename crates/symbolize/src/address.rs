//! The two address spaces this crate translates between.

/// Offset into a file on disk (from a mapping's pgoff).
///
/// The profiler computes it as `addr - map_start + pgoff` for a sampled
/// absolute address inside a file-backed mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileOffset(pub u64);

/// A virtual address as the ELF file states it (the address space of
/// symbols and `PT_LOAD` `p_vaddr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SymbolAddr(pub u64);
