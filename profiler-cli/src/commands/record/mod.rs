//! `profctl record`: through profilerd when it answers for a `--pid` recording (`daemon`),
//! else in this process (`embedded`); each writes the outputs `-o`, `--format` and
//! `--folded` ask for.

pub mod daemon;
pub mod embedded;
pub mod naming;
pub mod options;
pub mod pprof_out;
pub mod signals;
pub mod summary;

use std::path::Path;
use std::process::ExitCode;

use anyhow::Result;

use crate::cli::RecordArgs;

/// Run `profctl record`: through the daemon at `socket` when that applies, else embedded.
pub fn run(args: RecordArgs, socket: Option<&Path>, quiet: bool, verbose: u8) -> Result<ExitCode> {
    match daemon::run_if_daemon(&args, socket, quiet)? {
        Some(code) => Ok(code),
        None => embedded::run(args, quiet, verbose),
    }
}
