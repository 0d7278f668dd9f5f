//! profilerd: continuous whole-system profiling with local history, served over a Unix socket.
//!
//! Samples every CPU continuously, names each closed slice (10 s by default) on a thread of
//! its own, keeps slices on disk, and answers queries for folded stacks of a time range,
//! authorized per request with the peer's credentials. See docs/daemon.md.

mod api;
mod budget;
mod config;
mod daemon;
mod filter;
mod pprof;
mod query;
mod recording;
mod reload;
mod rollup;
// Not yet used by the store: wired in once the store's restructuring has landed.
#[allow(dead_code)]
mod rollup_builder;
#[allow(dead_code)]
mod rollup_writer;
mod scrape;
mod slice;
mod store;
mod sys;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};
use tracing::info;

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
    /// (overrides scrape.listen; loopback recommended).
    #[arg(long, value_name = "ADDR:PORT")]
    pprof_listen: Option<String>,
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
    let set_log_filter = reload::init_logging(&config.log.level.0);
    match run(config, args, set_log_filter) {
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
    config.check("the configuration with the command-line flags")?;
    Ok(config)
}

fn absolute(path: &std::path::Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn run(config: Config, args: Args, set_log_filter: reload::SetLogFilter) -> Result<()> {
    let admin_gid = config
        .access
        .admin_group
        .as_deref()
        .map(api::resolve_group)
        .transpose()
        .context("access.admin_group")?;
    let socket_gid = config
        .api
        .socket_group
        .as_deref()
        .map(api::resolve_group)
        .transpose()
        .context("api.socket_group")?;
    let event = sampler::auto_event();
    let frequency = reload::target_frequency(&config, u64::MAX);
    let cpus = sampler::online_cpus().map(|c| c.len()).unwrap_or(0);
    let store = store::Store::open(
        &config.storage.state_dir,
        config.storage.max_age.0,
        config.storage.max_bytes.0,
        daemon::unix_now_ns(),
    )
    .with_context(|| {
        format!(
            "opening the history under {}",
            config.storage.state_dir.display()
        )
    })?;
    std::fs::create_dir_all(&config.storage.cache_dir).with_context(|| {
        format!(
            "creating the cache directory {}",
            config.storage.cache_dir.display()
        )
    })?;
    let scrape_token = config
        .scrape
        .token_file
        .as_deref()
        .map(scrape::read_token)
        .transpose()?;
    let mut config = config;
    config.sampling.frequency = config::Frequency(frequency);
    let max_queries = config.api.max_concurrent_queries.0;
    let socket_path = config.api.socket.clone();
    let admin_gid = Arc::new(reload::GroupId::new(admin_gid));
    let reloader = reload::Reloader {
        load: Box::new(move || load_config(&args)),
        set_log_filter,
        ring_limit: reload::ring_frequency_limit(&daemon::record_options(&config, event)),
        admin_gid: Arc::clone(&admin_gid),
    };
    let shared = Arc::new(daemon::Shared {
        live: reload::LiveConfig::new(config.clone()),
        config,
        store,
        event,
        cpus,
        rate: recorder::FrequencyControl::new(),
        budget: budget::BudgetState::new(frequency),
        started_ns: daemon::unix_now_ns(),
        samples: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        slices_named: AtomicU64::new(0),
        slices_dropped: AtomicU64::new(0),
        naming_backlog: AtomicU64::new(0),
        unwritten: AtomicU64::new(0),
        tracked: Mutex::new(Default::default()),
        symbols: Mutex::new(Default::default()),
        heartbeat_ns: AtomicU64::new(0),
        sampling_ended: AtomicBool::new(false),
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let mut terminate = signal(SignalKind::terminate()).context("watching SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("watching SIGINT")?;
        let mut hangup = signal(SignalKind::hangup()).context("watching SIGHUP")?;
        let listener = api::bind(&socket_path, socket_gid)?;
        let mut pipeline = daemon::Pipeline::start(Arc::clone(&shared))?;
        info!(
            event = %event,
            frequency,
            cpus,
            slice_seconds = shared.config.sampling.slice.0.as_secs_f64(),
            socket = %socket_path.display(),
            state_dir = %shared.config.storage.state_dir.display(),
            "profilerd started"
        );
        let state = Arc::new(api::ApiState {
            shared: Arc::clone(&shared),
            admin_gid,
            queries: tokio::sync::Semaphore::new(max_queries),
            recordings: Default::default(),
        });
        let scrape_server = match shared.config.scrape.listen.as_deref() {
            Some(addr) => {
                let scrape_state = Arc::new(scrape::ScrapeState {
                    api: Arc::clone(&state),
                    token: scrape_token,
                    profiles: tokio::sync::Semaphore::new(shared.config.scrape.max_concurrent.0),
                });
                let addr = addr.parse().context("scrape.listen")?;
                Some(scrape::serve(addr, scrape_state, std::future::pending()).await?)
            }
            None => None,
        };
        let recordings_state = Arc::clone(&state);
        let (api_stop_tx, api_stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(api::serve(listener, state, async {
            let _ = api_stop_rx.await;
        }));
        let budget = tokio::spawn(budget::run(Arc::clone(&shared)));
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let watchdog = sd_notify::watchdog_enabled();
        let mut last_ping = tokio::time::Instant::now();
        let mut ready = false;
        let reason = loop {
            tokio::select! {
                _ = terminate.recv() => break "SIGTERM",
                _ = interrupt.recv() => break "SIGINT",
                _ = hangup.recv() => reload::reload(&reloader, &shared),
                _ = tick.tick() => {
                    if pipeline.sampling_finished() {
                        break "sampling ended";
                    }
                    let alive = shared.drain_alive(Duration::from_secs(5));
                    if !ready && alive {
                        ready = true;
                        let _ = sd_notify::notify(&[
                            sd_notify::NotifyState::Ready,
                            sd_notify::NotifyState::Status("sampling"),
                        ]);
                    }
                    if let Some(interval) = watchdog {
                        // Pinged only while the drain loop reports: a wedged drain stops the
                        // pings, and systemd restarts the daemon.
                        if alive && last_ping.elapsed() >= interval / 3 {
                            last_ping = tokio::time::Instant::now();
                            let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                        }
                    }
                }
            }
        };
        info!("{reason}: stopping (the open slice is named and written first)");
        recordings_state.recordings.stop_all();
        if let Some(server) = scrape_server {
            server.abort();
        }
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
        budget.abort();
        let stopped = tokio::task::spawn_blocking(move || pipeline.stop())
            .await
            .context("stopping")?;
        let _ = api_stop_tx.send(());
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        let _ = std::fs::remove_file(&socket_path);
        stopped?;
        info!("profilerd stopped");
        Ok(())
    })
}
