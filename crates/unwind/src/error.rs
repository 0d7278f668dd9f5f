//! The crate's errors, each naming the file it is about.

use std::path::PathBuf;

/// Why a binary's unwind sections could not be read.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum UnwindError {
    /// The file could not be opened or mapped.
    #[error("cannot map {}: {source}", path.display())]
    Map {
        /// The file in question.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not an ELF file that can be read (truncated, corrupt, another format).
    #[error("cannot parse {} as ELF: {source}", path.display())]
    Parse {
        /// The file in question.
        path: PathBuf,
        /// What the ELF reader found wrong.
        #[source]
        source: object::Error,
    },
    /// An in-memory ELF image (the vDSO) could not be copied into a mapping of its own.
    #[error("cannot copy the {what} ({len} bytes) into a mapping: {source}")]
    CopyImage {
        /// Which image.
        what: &'static str,
        /// Its size.
        len: usize,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An in-memory ELF image (the vDSO) is not ELF that can be read.
    #[error("cannot parse the {what} as ELF: {source}")]
    ParseImage {
        /// Which image.
        what: &'static str,
        /// What the ELF reader found wrong.
        #[source]
        source: object::Error,
    },
}
