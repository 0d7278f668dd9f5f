//! The one error kind `main` treats apart: a command line that parsed but makes no sense.

/// Invalid arguments found after parsing (a combination clap does not check): exit status 2,
/// like clap's own errors.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);
