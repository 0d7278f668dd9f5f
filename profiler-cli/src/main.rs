//! profctl: record a live system, process or command into a flamegraph. `main` parses the
//! command line (`cli`), runs one of `commands/`, and turns the result into an exit status.

mod cli;
mod commands;
mod daemon_client;
mod error;
mod history;
mod input;
mod output;
mod render;
mod time;
mod timeline;

use std::process::ExitCode;

use clap::Parser;

use crate::commands::{diff, flamegraph, record, status, symbolize, top, ui};

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    let socket = cli.socket.as_deref();
    let result = match cli.command {
        cli::Command::Record(args) => record::run(args, socket, cli.quiet, cli.verbose),
        cli::Command::Symbolize(args) => symbolize::run(args),
        cli::Command::Flamegraph(args) => flamegraph::run(&args, socket, cli.quiet),
        cli::Command::Top(args) => top::run(&args, socket, cli.quiet),
        cli::Command::Diff(args) => diff::run(&args, socket, cli.quiet),
        cli::Command::Timeline(args) => commands::timeline::run(&args, socket, cli.quiet),
        cli::Command::Status => status::run(socket),
        cli::Command::Ui(args) => ui::run(&args, socket, cli.quiet),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("profctl: error: {}", output::printable(&format!("{err:#}")));
            if err.downcast_ref::<error::UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Log to standard error at the level `-v`/`-q` ask for (`PROFCTL_LOG` overrides), every
/// control character escaped.
fn init_logging(verbose: u8, quiet: bool) {
    let default = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, _) => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("PROFCTL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| output::Escaping(std::io::stderr()))
        // No colours: log lines carry names other users chose, and every control character
        // in them is escaped by the writer (colours would be too).
        .with_ansi(false)
        .with_target(false)
        .without_time()
        .init();
}
