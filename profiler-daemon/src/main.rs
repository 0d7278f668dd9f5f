//! profilerd: continuous whole-system profiling with local history, served over a Unix socket.
//!
//! Samples every CPU continuously, names each closed slice (10 s by default) on a thread of
//! its own, keeps slices on disk, and answers queries for folded stacks of a time range,
//! authorized per request with the peer's credentials. See docs/daemon.md.
//!
//! This file reads the flags and the configuration; `service.rs` runs the daemon. The layers,
//! each importing only those below it:
//!
//! ```text
//! main.rs, service.rs     flags, configuration; start, signals, systemd, shutdown
//! http/                   routes: status + /metrics, folded, timeline, recordings, scrape (TCP)
//! reload.rs, recordings/  SIGHUP; on-demand recordings of one process
//! pipeline.rs             drain thread -> bounded queue -> naming thread -> store
//! state.rs                Shared: live configuration, store, counters, clock
//! timeline.rs, query.rs, budget.rs, options.rs, pipeline_cpu.rs,
//!                         store/ (hourly -> mod -> rollup_share -> share, rollup_writer ->
//!                         rollup_builder, rollup)
//! bounded.rs              a folded answer bounded at a minimum width (/v1/folded?minwidth=)
//! store/query_cache.rs    the files CPU queries read, kept folded per file
//! slice.rs, filter.rs, cgroup.rs, access.rs, config/, metric.rs, logging.rs, sys.rs
//! ```

mod access;
mod bounded;
mod budget;
mod cgroup;
mod config;
mod filter;
mod folding;
mod http;
mod logging;
mod measure;
mod memory_release;
mod metric;
mod options;
mod own_memory;
mod pipeline;
mod pipeline_cpu;
mod query;
mod recordings;
mod reload;
mod seconds;
mod service;
mod slice;
mod slice_proto;
mod state;
mod store;
mod subtract;
mod sys;
mod timeline;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::config::{Config, ConfigError, DEFAULT_CONFIG_PATH};

/// profilerd: the continuous profiling daemon.
#[derive(Debug, Parser)]
#[command(name = "profilerd", version, about)]
struct Args {
    /// The configuration file (default /etc/profilerd/profilerd.toml; when that file does not
    /// exist, the built-in defaults, which config/profilerd.toml documents).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The API's Unix socket (overrides api.socket).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Where slices are kept (overrides storage.state_dir).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Samples per second per CPU (overrides sampling.frequency).
    #[arg(long, value_name = "HZ")]
    freq: Option<u64>,
    /// Serve pprof scrapers (`/debug/pprof/profile`, `/metrics`) over TCP at ADDR:PORT
    /// (overrides scrape.listen; needs scrape.token_file, or scrape.allow_unauthenticated on
    /// loopback).
    #[arg(long, value_name = "ADDR:PORT")]
    pprof_listen: Option<String>,
    /// The file holding the token every scrape must send as `Authorization: Bearer TOKEN`
    /// (overrides scrape.token_file).
    #[arg(long, value_name = "PATH")]
    pprof_token_file: Option<PathBuf>,
    /// Check the configuration (file and flags), print it on success, and exit: 0 when valid,
    /// 1 when not.
    #[arg(long)]
    check_config: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let config = match load_config(&args) {
        Ok(c) => c,
        Err(err) => {
            eprintln!("profilerd: invalid configuration: {err}");
            return ExitCode::FAILURE;
        }
    };
    if args.check_config {
        println!("{config:#?}");
        eprintln!("profilerd: configuration is valid");
        return ExitCode::SUCCESS;
    }
    let set_log_filter = logging::init_logging(&config.log.level.0);
    let load = Box::new(move || load_config(&args));
    match service::run(config, load, set_log_filter) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(&format!("{err:#}"))]);
            eprintln!("profilerd: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The configuration file (if any) with the flags applied (at start and on SIGHUP).
fn load_config(args: &Args) -> Result<Config, ConfigError> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => {
            let path = PathBuf::from(DEFAULT_CONFIG_PATH);
            if path.exists() {
                Config::load(&path)?
            } else {
                Config::default()
            }
        }
    };
    if let Some(socket) = &args.socket {
        config.api.socket = absolute(socket);
    }
    if let Some(dir) = &args.state_dir {
        config.storage.state_dir = absolute(dir);
    }
    if let Some(hz) = args.freq {
        if !(1..=100_000).contains(&hz) {
            return Err(ConfigError::Invalid {
                origin: "--freq".into(),
                message: format!(
                    "{hz} is out of range: expected a frequency in Hz, from 1 to 100000"
                ),
            });
        }
        config.sampling.frequency = config::Frequency(hz);
    }
    if let Some(addr) = &args.pprof_listen {
        config.scrape.listen = Some(addr.clone());
    }
    if let Some(path) = &args.pprof_token_file {
        config.scrape.token_file = Some(absolute(path));
    }
    config.check("the configuration with the command-line flags")?;
    Ok(config)
}

fn absolute(path: &std::path::Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}
