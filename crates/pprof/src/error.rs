//! Why a pprof profile could not be read or converted.

/// Errors reading pprof profiles and folded stacks.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum PprofError {
    /// The input starts as gzip but is truncated or corrupt (bad CRC or length).
    #[error("corrupt or truncated gzip data: {0}")]
    Gzip(#[source] std::io::Error),
    /// The profile is larger than the bound, decompressed.
    #[error("the profile is larger than {} MiB decompressed; refusing to read it", limit >> 20)]
    TooLarge {
        /// The bound, in bytes.
        limit: u64,
    },
    /// The bytes are not a protobuf `Profile` message.
    #[error("not a pprof profile: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// A profile whose references do not hold (a string index, a location or function id that
    /// names nothing).
    #[error("invalid pprof profile: {0}")]
    Invalid(String),
    /// A folded-stacks line that is not `frame;frame;... count`.
    #[error("folded stacks, line {line}: {reason}")]
    Folded {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
}
