//! profilerd: the continuous profiling daemon.
//!
//! Not yet implemented: the daemon will reuse the `sampler`, `procmap`, `symbolize` and `profile`
//! crates unchanged. Until then, `profctl record` records on its own (embedded mode).

use std::process::ExitCode;

fn main() -> ExitCode {
    eprintln!(
        "profilerd: the daemon is not implemented yet; use `profctl record` (embedded mode) instead"
    );
    ExitCode::from(2)
}
