//! The daemon's life: prepare (groups, store, caches, shared state), start (the API socket,
//! the stream, the scrape listener, the budget), run until a signal or the end of sampling
//! (reloading on SIGHUP, telling systemd), and shut down in order (the open slices are named
//! and written first, for up to `pipeline::NAMING_AT_EXIT`; later ones are dropped, counted).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::task::JoinHandle;
use tracing::info;

use crate::access::{resolve_group, GroupId};
use crate::config::{Config, ConfigError, Frequency};
use crate::http::common::ApiState;
use crate::http::scrape::{self, ScrapeState};
use crate::logging::SetLogFilter;
use crate::options::{record_options, ring_frequency_limit, target_frequency};
use crate::pipeline::Pipeline;
use crate::reload::{self, Reloader};
use crate::state::{unix_now_ns, Shared};
use crate::store::Store;

/// Reads the configuration (file and flags), at start and on SIGHUP.
pub type LoadConfig = Box<dyn Fn() -> Result<Config, ConfigError> + Send + Sync>;

/// What start needs, made before the runtime.
struct Prepared {
    shared: Arc<Shared>,
    reloader: Reloader,
    socket_gid: Option<u32>,
    scrape_token: Option<String>,
}

/// What runs once started.
struct Running {
    api: Arc<ApiState>,
    pipeline: Pipeline,
    server: JoinHandle<std::io::Result<()>>,
    api_stop: tokio::sync::oneshot::Sender<()>,
    scrape: Option<JoinHandle<std::io::Result<()>>>,
    budget: Budget,
    socket_path: PathBuf,
}

/// The budget's thread and how to stop it.
struct Budget {
    stop: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

/// The signals the daemon acts on.
struct Signals {
    terminate: Signal,
    interrupt: Signal,
    hangup: Signal,
}

/// Run the daemon with `config` until SIGTERM, SIGINT or the end of sampling; `load` reads
/// the configuration again on SIGHUP.
pub fn run(config: Config, load: LoadConfig, set_log_filter: SetLogFilter) -> Result<()> {
    let prepared = prepare(config, load, set_log_filter)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let mut signals = Signals {
            terminate: signal(SignalKind::terminate()).context("watching SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("watching SIGINT")?,
            hangup: signal(SignalKind::hangup()).context("watching SIGHUP")?,
        };
        let mut running = start(&prepared).await?;
        let reason = wait(&mut running, &prepared, &mut signals).await;
        info!("{reason}: stopping (the open slices are named and written first, for up to 2 s)");
        shutdown(running).await
    })
}

/// Resolve the groups, check (making them) the state and cache directories, open the store,
/// read the scrape token, and make the shared state.
fn prepare(config: Config, load: LoadConfig, set_log_filter: SetLogFilter) -> Result<Prepared> {
    let group =
        |name: Option<&str>, key: &'static str| name.map(resolve_group).transpose().context(key);
    let admin_gid = group(config.access.admin_group.as_deref(), "access.admin_group")?;
    let socket_gid = group(config.api.socket_group.as_deref(), "api.socket_group")?;
    // Off-CPU stacks are weighted in ns: the CPU samples beside them are too (the recorder
    // samples on cpu-clock when it samples switches).
    let event = if config.sampling.off_cpu {
        sampler::EventKind::CpuClock
    } else {
        sampler::auto_event()
    };
    let frequency = target_frequency(&config, u64::MAX);
    let cpus = sampler::online_cpus().map(|c| c.len()).unwrap_or(0);
    let storage = &config.storage;
    let uid = crate::sys::effective_uid();
    for (dir, what) in [
        (storage.state_dir.clone(), "storage.state_dir"),
        (storage.state_dir.join("slices"), "storage.state_dir"),
        (storage.cache_dir.clone(), "storage.cache_dir"),
    ] {
        recorder::check_private_dir(&dir, uid, 0o750).context(what)?;
    }
    let store = Store::open(
        &storage.state_dir,
        storage.max_age.0,
        storage.max_bytes.0,
        unix_now_ns(),
    )
    .with_context(|| format!("opening the history under {}", storage.state_dir.display()))?;
    store.set_share_per_uid(storage.max_share_per_uid.0);
    let scrape_token = config
        .scrape
        .token_file
        .as_deref()
        .map(scrape::read_token)
        .transpose()?;
    let mut config = config;
    config.sampling.frequency = Frequency(frequency);
    let reloader = Reloader {
        load,
        set_log_filter,
        ring_limit: ring_frequency_limit(&record_options(&config, event)),
        admin_gid: Arc::new(GroupId::new(admin_gid)),
    };
    let shared = Arc::new(Shared::new(config, store, event, cpus, frequency));
    Ok(Prepared {
        shared,
        reloader,
        socket_gid,
        scrape_token,
    })
}

/// Bind the API socket, start the stream, the scrape listener (if configured), the API and
/// the budget.
async fn start(prepared: &Prepared) -> Result<Running> {
    let shared = &prepared.shared;
    let config = shared.live();
    let socket_path = config.api.socket.clone();
    let listener = crate::http::bind(&socket_path, prepared.socket_gid)?;
    let pipeline = Pipeline::start(Arc::clone(shared))?;
    info!(
        event = %shared.event,
        frequency = shared.budget.target_frequency(),
        cpus = shared.cpus,
        slice_seconds = config.sampling.slice.0.as_secs_f64(),
        socket = %socket_path.display(),
        state_dir = %config.storage.state_dir.display(),
        "profilerd started"
    );
    let api = Arc::new(ApiState {
        shared: Arc::clone(shared),
        admin_gid: Arc::clone(&prepared.reloader.admin_gid),
        queries: Default::default(),
        recordings: Default::default(),
        connections: Default::default(),
    });
    let scrape = match config.scrape.listen.as_deref() {
        Some(addr) => {
            let state = Arc::new(ScrapeState {
                shared: Arc::clone(shared),
                token: prepared.scrape_token.clone(),
                profiles: Arc::new(tokio::sync::Semaphore::new(config.scrape.max_concurrent.0)),
                connections: Default::default(),
            });
            let addr = addr.parse().context("scrape.listen")?;
            Some(scrape::serve(addr, state, std::future::pending()).await?)
        }
        None => None,
    };
    let (api_stop, api_stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::http::serve(listener, Arc::clone(&api), async {
        let _ = api_stop_rx.await;
    }));
    let budget_shared = Arc::clone(shared);
    let (budget_stop, budget_stopped) = std::sync::mpsc::channel();
    let budget_thread = std::thread::Builder::new()
        .name("budget".into())
        .spawn(move || {
            let s = &budget_shared;
            crate::budget::run(
                &s.budget,
                &s.rate,
                || s.live(),
                || s.drain_alive(Duration::from_secs(5)),
                &budget_stopped,
            )
        })
        .context("starting the budget thread")?;
    let budget = Budget {
        stop: budget_stop,
        thread: budget_thread,
    };
    Ok(Running {
        api,
        pipeline,
        server,
        api_stop,
        scrape,
        budget,
        socket_path,
    })
}

/// Run until a signal to stop or the end of sampling: reload on SIGHUP, tell systemd when
/// ready (the drain's first report), ping its watchdog while the drain reports. Returns why it
/// stopped. Woken only by those: no tick but the watchdog's, when systemd asks for one.
async fn wait(running: &mut Running, prepared: &Prepared, signals: &mut Signals) -> &'static str {
    let (shared, reloader) = (&*prepared.shared, &prepared.reloader);
    let watchdog = sd_notify::watchdog_enabled();
    // Pinged at a third of systemd's interval, only while the drain loop reports: a wedged
    // drain stops the pings, and systemd restarts the daemon.
    let mut pings = watchdog.map(|interval| {
        let mut t = tokio::time::interval((interval / 3).max(Duration::from_millis(100)));
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    let mut ready = false;
    loop {
        let ping = async {
            match pings.as_mut() {
                Some(t) => t.tick().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = signals.terminate.recv() => return "SIGTERM",
            _ = signals.interrupt.recv() => return "SIGINT",
            _ = signals.hangup.recv() => reload::reload(reloader, shared),
            _ = shared.sampling_news.notified() => {
                if shared.sampling_ended.load(std::sync::atomic::Ordering::Relaxed)
                    || running.pipeline.sampling_finished()
                {
                    return "sampling ended";
                }
                if !ready && shared.drain_alive(Duration::from_secs(5)) {
                    ready = true;
                    let _ = sd_notify::notify(&[
                        sd_notify::NotifyState::Ready,
                        sd_notify::NotifyState::Status("sampling"),
                    ]);
                }
            }
            _ = ping => {
                if shared.drain_alive(Duration::from_secs(5)) {
                    let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                }
            }
        }
    }
}

/// Stop recordings, the scrape listener and the budget; stop sampling and wait until every
/// slice is named and written; then stop the API and remove the socket.
async fn shutdown(running: Running) -> Result<()> {
    let Running {
        api,
        mut pipeline,
        server,
        api_stop,
        scrape,
        budget,
        socket_path,
    } = running;
    api.recordings.stop_all();
    if let Some(server) = scrape {
        server.abort();
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    let _ = budget.stop.send(());
    let _ = budget.thread.join();
    let stopped = tokio::task::spawn_blocking(move || pipeline.stop())
        .await
        .context("stopping")?;
    let _ = api_stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    let _ = std::fs::remove_file(&socket_path);
    stopped?;
    info!("profilerd stopped");
    Ok(())
}
