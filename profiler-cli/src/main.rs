//! profctl: record a live system, process or command into a flamegraph.

mod cli;
mod daemon_client;
mod diff;
mod input;
mod output;
mod pprof_out;
mod record;
mod symbolize_cmd;
mod top;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    init_logging(cli.verbose, cli.quiet);
    let result = match cli.command {
        cli::Command::Record(args) => record::run(args, cli.quiet, cli.verbose),
        cli::Command::Symbolize(args) => symbolize_cmd::run(args),
        cli::Command::Flamegraph(args) => match &args.input {
            Some(input) => input::flamegraph(&args, input, cli.quiet),
            None => daemon_client::flamegraph(&args, cli.socket.as_deref(), cli.quiet),
        },
        cli::Command::Top(args) => top::run(&args, cli.socket.as_deref(), cli.quiet),
        cli::Command::Diff(args) => diff::run(&args, cli.socket.as_deref(), cli.quiet),
        cli::Command::Status => daemon_client::status(cli.socket.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("profctl: error: {}", output::printable(&format!("{err:#}")));
            if err.downcast_ref::<cli::UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

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
