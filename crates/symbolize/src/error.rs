//! Errors, each naming the file it is about.

use std::path::PathBuf;

/// Why a file (or the kernel symbol table) could not be used.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened, stat'ed, mapped or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file in question.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file starts like an ELF file but is truncated or corrupt.
    #[error("cannot parse ELF file {name}: {message}")]
    Parse {
        /// The file's path or the name given to [`crate::ElfFile::parse`].
        name: String,
        /// What was wrong.
        message: String,
    },
    /// The file does not start with the ELF magic bytes.
    #[error("{name} is not an ELF file")]
    NotElf {
        /// The file's path or the name given to [`crate::ElfFile::parse`].
        name: String,
    },
    /// The file on disk is not the one the build-id asked for.
    #[error("build-id mismatch for {}: expected {expected}, found {found}", path.display())]
    BuildIdMismatch {
        /// The file that was opened.
        path: PathBuf,
        /// The build-id asked for, in lowercase hex.
        expected: String,
        /// The file's build-id in lowercase hex, or `none`.
        found: String,
    },
}

/// Lowercase hex of `bytes`, as `readelf -n` prints a build-id.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
