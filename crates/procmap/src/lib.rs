//! The process model: which processes and threads exist, what they are called, and what is
//! mapped where in their address spaces, over time.
//!
//! Records from different CPUs arrive out of order, so nothing here assumes order: every
//! mapping and name carries the time from which it holds (and a mapping the time at which it
//! stopped holding), and lookups take the time of the sample being resolved.

mod access;
mod build_id;
mod files;
mod owner;
mod pinned;
mod proc_fs;
mod process;
mod sys;
mod table;

pub use access::Access;
pub use files::{FileId, FileParts, FileTable, MappedFile};
pub use owner::{owner_of, Owner, UNKNOWN_UID};
pub use pinned::{live_path, live_path_of, PinStats, PinnedFiles};
pub use proc_fs::{parse_maps_line, MapsLine};
pub use process::{Mapping, ProcessKey, MAX_MAPPINGS};
pub use table::{ProcessTable, Pruned, TableSizes, TableStats};

/// Errors reading a process from /proc.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// The process no longer exists.
    #[error("process {pid} vanished while reading /proc/{pid}")]
    Vanished {
        /// Process id.
        pid: u32,
    },
    /// Reading a /proc file failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
