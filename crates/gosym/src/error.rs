//! Why a Go function table could not be read.

/// Why a binary's `.gopclntab` could not be used. The input is a user's binary: every field is
/// checked, and anything out of bounds or inconsistent is refused with one of these.
#[non_exhaustive]
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GoSymError {
    /// The file is not an ELF file that can be read.
    #[error("not a readable ELF file: {0}")]
    Elf(String),
    /// No `.gopclntab` section, and no table header found in the data segments.
    #[error("no Go function table (.gopclntab)")]
    NotFound,
    /// The header's magic is not one of the formats read (Go 1.16 and later).
    #[error("unsupported .gopclntab magic {0:#x} (Go 1.16 and later are read)")]
    UnsupportedMagic(u32),
    /// The header's pointer size, instruction quantum or padding is not valid.
    #[error("bad .gopclntab header: {0}")]
    BadHeader(&'static str),
    /// A table the header points to lies outside the data.
    #[error(".gopclntab {what} out of bounds")]
    OutOfBounds {
        /// Which table.
        what: &'static str,
    },
    /// More functions than are read (a corrupt count).
    #[error(".gopclntab claims {0} functions, more than the limit")]
    TooManyFunctions(u64),
    /// The function table is not sorted by address.
    #[error(".gopclntab function table not sorted at entry {0}")]
    Unsorted(usize),
}
