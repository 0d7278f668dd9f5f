//! Errors of a recording.

/// Why a recording failed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Opening or draining the sampling events failed.
    #[error(transparent)]
    Sampler(#[from] sampler::SamplerError),
    /// The command to profile could not be started.
    #[error("cannot start {program:?}: {source}")]
    Launch {
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// No command was given after `--`.
    #[error("no command given to run")]
    EmptyCommand,
}
