//! What the daemon's threads, tasks and listeners share: the configuration in effect, the
//! store, the counters, and the clock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sampler::EventKind;

use crate::budget::BudgetState;
use crate::config::Config;
use crate::store::Store;

/// The configuration in effect, replaced as a whole on reload. The one place every thread and
/// listener reads configuration from: keys that need a restart keep their running values in it
/// (see `reload.rs`).
#[derive(Debug)]
pub struct LiveConfig(RwLock<Arc<Config>>);

impl LiveConfig {
    /// `config` in effect.
    pub fn new(config: Config) -> LiveConfig {
        LiveConfig(RwLock::new(Arc::new(config)))
    }

    /// The configuration in effect now.
    pub fn get(&self) -> Arc<Config> {
        Arc::clone(&self.0.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Replace it.
    pub fn set(&self, config: Config) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
    }
}

/// What the threads and the API share.
pub struct Shared {
    /// The configuration in effect (replaced on SIGHUP).
    pub live: LiveConfig,
    /// The history.
    pub store: Arc<Store>,
    /// The event sampled on.
    pub event: EventKind,
    /// CPUs sampled (online at start).
    pub cpus: usize,
    /// Changes the sampling frequency while sampling; tells the frequency in effect.
    pub rate: recorder::FrequencyControl,
    /// The overhead budget's state.
    pub budget: BudgetState,
    /// When the daemon started, UNIX ns.
    pub started_ns: u64,
    /// Samples read.
    pub samples: AtomicU64,
    /// Samples the kernel dropped.
    pub lost: AtomicU64,
    /// Slices named.
    pub slices_named: AtomicU64,
    /// Slices dropped because naming fell behind.
    pub slices_dropped: AtomicU64,
    /// Slices waiting to be named.
    pub naming_backlog: AtomicU64,
    /// Slices waiting to be written (the disk refused them).
    pub unwritten: AtomicU64,
    /// The recorder's process model at the last closed slice.
    pub tracked: Mutex<recorder::Tracked>,
    /// The symbol service's sizes at the last named slice.
    pub symbols: Mutex<symbolize::service::ServiceSizes>,
    /// Monotonic ns of the drain loop's last progress (0: not started).
    pub heartbeat_ns: AtomicU64,
    /// Whether sampling ended (on stop or error).
    pub sampling_ended: AtomicBool,
    /// Told when the drain loop reports for the first time and when sampling ends: the main
    /// loop then looks (ready for systemd, or time to stop), with no tick of its own.
    pub sampling_news: tokio::sync::Notify,
    /// A snapshot of the open slices waits in the naming queue.
    pub snapshot_queued: AtomicBool,
    /// Snapshots of the open slices named.
    pub open_named: AtomicU64,
    /// Time spent naming them (µs, wall clock, on the naming thread).
    pub open_naming_us: AtomicU64,
}

impl Shared {
    /// The shared state of a daemon starting now with `config`, `store`, sampling `event` on
    /// `cpus` CPUs at `frequency`.
    pub fn new(
        config: Config,
        store: Arc<Store>,
        event: EventKind,
        cpus: usize,
        frequency: u64,
    ) -> Shared {
        Shared {
            live: LiveConfig::new(config),
            store,
            event,
            cpus,
            rate: recorder::FrequencyControl::new(),
            budget: BudgetState::new(frequency),
            started_ns: unix_now_ns(),
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
            sampling_news: tokio::sync::Notify::new(),
            snapshot_queued: AtomicBool::new(false),
            open_named: AtomicU64::new(0),
            open_naming_us: AtomicU64::new(0),
        }
    }

    /// Samples per second per CPU in effect now (the budget or a reload may change it).
    pub fn frequency(&self) -> u64 {
        match self.rate.in_effect() {
            0 => self.budget.target_frequency(),
            hz => hz,
        }
    }

    /// The configuration in effect now.
    pub fn live(&self) -> Arc<Config> {
        self.live.get()
    }

    /// Replace the configuration in effect (on reload).
    pub fn set_live(&self, config: Config) {
        self.live.set(config);
    }

    /// Whether the drain loop reported within `within`.
    pub fn drain_alive(&self, within: Duration) -> bool {
        let beat = self.heartbeat_ns.load(Ordering::Relaxed);
        beat != 0
            && !self.sampling_ended.load(Ordering::Relaxed)
            && sampler::now_ns().saturating_sub(beat) < within.as_nanos() as u64
    }
}

/// UNIX time now, in ns.
pub fn unix_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
