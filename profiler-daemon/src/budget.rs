//! The overhead budget (`[budget]`): the daemon measures what it costs and stays within caps.
//!
//! Every [`tick`] (six times a window) it reads the sampling pipeline's own CPU time (the
//! drain and naming threads, less the housekeeping they do for the daemon: `pipeline_cpu.rs`;
//! roll-ups, queries and recordings are not made cheaper by sampling less) and the process's
//! memory (VmRSS, plus the ring buffers' pinned pages, VmPin and VmLck, which VmRSS does not
//! count). CPU use is averaged over `budget.window`, counted from the last change (so that a
//! change is judged by what followed it) and from the end of a first window of warm-up (start
//! costs: kernel symbols, /proc, first symbolizers). Then:
//!
//! - over `max_cpu_percent` for two windows in a row (a sustained cost, not a burst): the
//!   sampling frequency is lowered in proportion to the lesser excess, with a margin, down to
//!   `min_frequency`, without reopening the events ([`recorder::FrequencyControl`]:
//!   `PERF_EVENT_IOC_PERIOD`);
//! - while the frequency is below `sampling.frequency`, three windows after the last lowering:
//!   raised step by step, one step per window, by half at most, and only as far as the
//!   measured cost, taken as proportional to the frequency, predicts stays under 70% of the
//!   cap;
//! - over `max_resident`: the naming thread sheds the symbol caches (symbolizers, names, JIT
//!   maps; read again when needed), at most once per window.
//!
//! Every change is logged with its cause (each thread's share, the housekeeping left out, the
//! whole process's), counted, and shown in `/v1/status` (`budget*`) and `/metrics`.
//! Slices record the frequency in effect and each stack's CPU time, so shares stay right
//! across changes (see `slice.rs`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::config::{Budget, Config};
use crate::metric::Metric;
use crate::pipeline_cpu::{PipelineCpu, Recent};

/// How often the budget is checked: six readings per `budget.window`, from one a second to
/// one every five seconds (the default window of 30 s).
pub fn tick(window: Duration) -> Duration {
    (window / 6).clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// What the budget saw and did, shared with the API and the naming thread.
#[derive(Debug, Default)]
pub struct BudgetState {
    /// The frequency the configuration asks for (after the kernel's and the rings' limits).
    target_frequency: AtomicU64,
    /// CPU percent of one core over the last window (f64 bits).
    cpu_percent: AtomicU64,
    /// VmRSS + VmPin + VmLck, bytes.
    memory_bytes: AtomicU64,
    /// VmPin + VmLck, bytes.
    pinned_bytes: AtomicU64,
    /// The frequency is below the target because of the CPU cap.
    cpu_limited: AtomicBool,
    /// Memory was over the cap at the last check.
    memory_over: AtomicBool,
    /// Times the budget changed the frequency.
    frequency_changes: AtomicU64,
    /// Times the symbol caches were shed.
    cache_sheds: AtomicU64,
    /// The naming thread should shed the caches.
    shed_requested: AtomicBool,
    /// What the sampling pipeline's threads cost (the CPU the cap applies to).
    pub pipeline: PipelineCpu,
}

/// The budget's part of `GET /v1/status` (flattened into it), declared in `daemon-api`.
pub use daemon_api::status::BudgetStatus;

impl BudgetState {
    /// A state whose target is `frequency`.
    pub fn new(frequency: u64) -> BudgetState {
        let state = BudgetState::default();
        state.target_frequency.store(frequency, Ordering::Relaxed);
        state
    }

    /// The frequency the configuration asks for.
    pub fn target_frequency(&self) -> u64 {
        self.target_frequency.load(Ordering::Relaxed)
    }

    /// Set the frequency the configuration asks for (on reload).
    pub fn set_target_frequency(&self, hz: u64) {
        self.target_frequency.store(hz, Ordering::Relaxed);
    }

    /// Whether the caches should be shed now (the request is taken).
    pub fn take_shed_request(&self) -> bool {
        self.shed_requested.swap(false, Ordering::Relaxed)
    }

    /// Count a shed done by the naming thread.
    pub fn shed_done(&self) {
        self.cache_sheds.fetch_add(1, Ordering::Relaxed);
    }

    /// For status and metrics; `caps` from the configuration in effect.
    pub fn status(&self, caps: &Budget) -> BudgetStatus {
        let cpu = self.cpu_limited.load(Ordering::Relaxed);
        let memory = self.memory_over.load(Ordering::Relaxed);
        BudgetStatus {
            budget: match (cpu, memory) {
                (false, false) => "within",
                (true, false) => "cpu",
                (false, true) => "memory",
                (true, true) => "cpu+memory",
            }
            .to_string(),
            configured_frequency: self.target_frequency(),
            budget_cpu_percent: f64::from_bits(self.cpu_percent.load(Ordering::Relaxed)),
            budget_max_cpu_percent: caps.max_cpu_percent.0,
            budget_memory_bytes: self.memory_bytes.load(Ordering::Relaxed),
            budget_max_resident: caps.max_resident.0,
            pinned_bytes: self.pinned_bytes.load(Ordering::Relaxed),
            budget_frequency_changes: self.frequency_changes.load(Ordering::Relaxed),
            budget_cache_sheds: self.cache_sheds.load(Ordering::Relaxed),
        }
    }
}

/// The budget's Prometheus metrics.
pub const METRICS: &[Metric<BudgetStatus>] = &[
    Metric {
        name: "configured_frequency_hertz",
        kind: "gauge",
        help: "Samples per second per CPU the configuration asks for.",
        value: |b| b.configured_frequency as f64,
    },
    Metric {
        name: "budget_cpu_percent",
        kind: "gauge",
        help: "The sampling pipeline's own CPU over the budget window (housekeeping excluded), percent of one core.",
        value: |b| b.budget_cpu_percent,
    },
    Metric {
        name: "budget_max_cpu_percent",
        kind: "gauge",
        help: "The CPU cap, percent of one core.",
        value: |b| b.budget_max_cpu_percent,
    },
    Metric {
        name: "budget_memory_bytes",
        kind: "gauge",
        help: "Resident memory plus pinned ring buffers.",
        value: |b| b.budget_memory_bytes as f64,
    },
    Metric {
        name: "budget_max_resident_bytes",
        kind: "gauge",
        help: "The memory cap.",
        value: |b| b.budget_max_resident as f64,
    },
    Metric {
        name: "pinned_memory_bytes",
        kind: "gauge",
        help: "Pinned ring buffer memory (VmPin + VmLck).",
        value: |b| b.pinned_bytes as f64,
    },
    Metric {
        name: "budget_cpu_limited",
        kind: "gauge",
        help: "1 while the CPU cap holds the frequency below the configured one.",
        value: |b| f64::from(u8::from(b.budget.contains("cpu"))),
    },
    Metric {
        name: "budget_memory_over",
        kind: "gauge",
        help: "1 while memory is over the cap.",
        value: |b| f64::from(u8::from(b.budget.contains("memory"))),
    },
    Metric {
        name: "budget_frequency_changes_total",
        kind: "counter",
        help: "Times the budget changed the sampling frequency.",
        value: |b| b.budget_frequency_changes as f64,
    },
    Metric {
        name: "budget_cache_sheds_total",
        kind: "counter",
        help: "Times the symbol caches were shed.",
        value: |b| b.budget_cache_sheds as f64,
    },
];

/// The caps, as the controller uses them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Caps {
    /// Percent of one core.
    pub max_cpu_percent: f64,
    /// Bytes.
    pub max_memory: u64,
    /// The lowest frequency the budget sets (at most `target`).
    pub min_frequency: u64,
    /// The frequency asked for: never exceeded, raised back to.
    pub target: u64,
    /// Seconds.
    pub window: f64,
}

/// One reading of what the daemon uses.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reading {
    /// Seconds since the controller started.
    pub time: f64,
    /// CPU time used since the process started, seconds.
    pub cpu: f64,
    /// Resident plus pinned memory, bytes.
    pub memory: u64,
}

/// What to do after a reading.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Decision {
    /// Change the frequency to this.
    pub frequency: Option<u64>,
    /// Shed the symbol caches.
    pub shed: bool,
    /// CPU use over the span judged, percent of one core (None: no span yet).
    pub cpu_percent: Option<f64>,
    /// Whether the frequency stays below the target because of the CPU cap.
    pub cpu_limited: bool,
    /// Whether memory is over the cap.
    pub memory_over: bool,
}

/// The budget's decisions, from readings (no I/O: tested on its own).
#[derive(Debug, Default)]
pub struct Controller {
    /// Readings since the last change (or the end of the warm-up), oldest first; bounded by
    /// [`SUSTAIN_WINDOWS`] windows (one reading per tick).
    history: VecDeque<Reading>,
    /// No judgement before this (seconds since start): the first window is warm-up.
    warm_until: Option<f64>,
    /// When the caches were last shed.
    last_shed: Option<f64>,
    /// Whether the frequency is held below the target by the CPU cap.
    limited: bool,
    /// When the frequency was last lowered for CPU.
    last_lowered: Option<f64>,
}

/// Fraction of the cap aimed at when lowering (room for noise and fixed costs).
const LOWER_MARGIN: f64 = 0.8;
/// Fraction of the cap a raise may be predicted to reach (proportionally to the frequency).
const RAISE_TO: f64 = 0.7;
/// Most a raise multiplies the frequency by.
const RAISE_STEP: f64 = 1.5;
/// Windows in a row the CPU use must be over the cap before the frequency is lowered: a
/// lowering is for a sustained cost, not a burst.
const SUSTAIN_WINDOWS: f64 = 2.0;
/// Windows after a lowering before the frequency is raised again (costs are noisy: a raise
/// right after a lowering would go back and forth).
const RAISE_HOLDOFF_WINDOWS: f64 = 3.0;

impl Controller {
    /// Take a reading; say what to do with the frequency `current` now in effect.
    pub fn step(&mut self, r: Reading, current: u64, caps: &Caps) -> Decision {
        let mut d = Decision {
            memory_over: r.memory > caps.max_memory,
            ..Decision::default()
        };
        if d.memory_over && self.last_shed.is_none_or(|t| r.time - t >= caps.window) {
            self.last_shed = Some(r.time);
            d.shed = true;
        }
        let target = caps.target.max(1);
        let floor = caps.min_frequency.clamp(1, target);
        let warm_until = *self.warm_until.get_or_insert(r.time + caps.window);
        if current > target {
            // The configuration asks for less (a reload): at once.
            self.restart(r);
            self.limited = false;
            d.frequency = Some(target);
            return d;
        }
        if r.time < warm_until {
            d.cpu_limited = self.limited;
            return d;
        }
        self.history.push_back(r);
        // Kept: two windows (a lowering needs both over the cap), and the reading before.
        let kept = SUSTAIN_WINDOWS * caps.window;
        while self.history.len() > 2 && self.history.get(1).is_some_and(|h| r.time - h.time >= kept)
        {
            self.history.pop_front();
        }
        // The last window: from the newest reading at least a window old (else the oldest).
        let mid = self
            .history
            .iter()
            .rev()
            .find(|h| r.time - h.time + 1e-9 >= caps.window)
            .copied()
            .unwrap_or(self.history[0]);
        let span = r.time - mid.time;
        if span <= 0.0 {
            d.cpu_limited = self.limited;
            return d;
        }
        let percent = (r.cpu - mid.cpu).max(0.0) / span * 100.0;
        d.cpu_percent = Some(percent);
        if span + 1e-9 >= caps.window {
            let cap = caps.max_cpu_percent;
            // Sustained: the window before the last one was over the cap too.
            let first = self.history[0];
            let earlier = (mid.time - first.time + 1e-9 >= caps.window)
                .then(|| (mid.cpu - first.cpu).max(0.0) / (mid.time - first.time) * 100.0);
            let sustained = earlier.map(|e| e.min(percent));
            if let Some(sustained) = sustained.filter(|&p| p > cap && current > floor) {
                let aimed = current as f64 * cap / sustained * LOWER_MARGIN;
                let next = (aimed as u64).clamp(floor, current - 1);
                self.limited = true;
                self.last_lowered = Some(r.time);
                self.restart(r);
                d.frequency = Some(next);
            } else if current < target
                && percent < cap * RAISE_TO
                && self
                    .last_lowered
                    .is_none_or(|t| r.time - t >= RAISE_HOLDOFF_WINDOWS * caps.window)
            {
                // Cost taken as proportional to the frequency (it is less: part of it is
                // fixed), so the prediction errs on the side of the cap.
                let predicted = if percent > 0.0 {
                    current as f64 * cap * RAISE_TO / percent
                } else {
                    f64::MAX
                };
                let next = (predicted.min(current as f64 * RAISE_STEP) as u64).min(target);
                if next > current {
                    self.limited = next < target;
                    self.restart(r);
                    d.frequency = Some(next);
                }
            } else if current >= target {
                self.limited = false;
            }
        }
        d.cpu_limited = self.limited;
        d
    }

    /// Judge from `r` on (after a change).
    fn restart(&mut self, r: Reading) {
        self.history.clear();
        self.history.push_back(r);
    }
}

/// The caps of the configuration in effect.
pub fn caps_of(config: &Config, target: u64) -> Caps {
    let b = &config.budget;
    Caps {
        max_cpu_percent: b.max_cpu_percent.0,
        max_memory: b.max_resident.0,
        min_frequency: b.min_frequency.0,
        target,
        window: b.window.0.as_secs_f64(),
    }
}

/// Check the budget every [`tick`] until `stop` says so or is dropped; apply what the
/// controller decides. `rate` tells and changes the frequency in effect, `config` gives the
/// configuration in effect, `sampling` whether the drain loop reports.
///
/// Runs on a thread of its own, woken once a tick (a futex wait): on the main thread's
/// tokio runtime, each 5-s sleep woke it three times (the timer wheel's slots on the way
/// down to the deadline).
pub fn run(
    state: &BudgetState,
    rate: &recorder::FrequencyControl,
    config: impl Fn() -> Arc<Config>,
    sampling: impl Fn() -> bool,
    stop: &std::sync::mpsc::Receiver<()>,
) {
    let mut controller = Controller::default();
    let mut recent = Recent::default();
    let started = Instant::now();
    let mut warned_floor = false;
    let mut own_memory = crate::own_memory::OwnMemory::open();
    loop {
        match stop.recv_timeout(tick(config().budget.window.0)) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let current = rate.in_effect();
        if current == 0 || !sampling() {
            continue; // not sampling (yet, or any more)
        }
        let config = config();
        let caps = caps_of(&config, state.target_frequency());
        let (memory, pinned) = own_memory.read();
        let time = started.elapsed().as_secs_f64();
        let pipeline = state.pipeline.read();
        let reading = Reading {
            time,
            cpu: pipeline.sampling_seconds(),
            memory,
        };
        let process = recorder::ProcessUsage::now().cpu().as_secs_f64();
        recent.push(time, pipeline, process, caps.window);
        let d = controller.step(reading, current, &caps);
        state.memory_bytes.store(memory, Ordering::Relaxed);
        state.pinned_bytes.store(pinned, Ordering::Relaxed);
        if let Some(p) = d.cpu_percent {
            state.cpu_percent.store(p.to_bits(), Ordering::Relaxed);
        }
        state.cpu_limited.store(d.cpu_limited, Ordering::Relaxed);
        let was_over = state.memory_over.swap(d.memory_over, Ordering::Relaxed);
        if d.shed {
            warn!(
                memory_bytes = memory,
                max_resident = caps.max_memory,
                "memory over budget: shedding the symbol caches"
            );
            state.shed_requested.store(true, Ordering::Relaxed);
        } else if was_over && !d.memory_over {
            info!(memory_bytes = memory, "memory back within budget");
        }
        let percent = d.cpu_percent.unwrap_or(0.0);
        if let Some(hz) = d.frequency {
            state.frequency_changes.fetch_add(1, Ordering::Relaxed);
            log_change(current, hz, percent, &caps, &recent.cause());
            rate.request(hz);
            warned_floor = false;
        } else if d.cpu_limited
            && !warned_floor
            && current <= caps.min_frequency
            && percent > caps.max_cpu_percent
        {
            warned_floor = true;
            warn!(
                frequency = current,
                cpu_percent = format!("{percent:.2}"),
                max_cpu_percent = caps.max_cpu_percent,
                cause = recent.cause(),
                "CPU over budget at budget.min_frequency: the frequency stays there"
            );
        }
    }
}

/// Log a change of frequency from `current` to `hz` with its cause: the sampling pipeline's
/// cost over the cap for two windows, within it again, or a new configured frequency.
fn log_change(current: u64, hz: u64, percent: f64, caps: &Caps, threads: &str) {
    let cpu_percent = format!("{percent:.2}");
    if hz < current && current > caps.target {
        info!(
            from = current,
            to = hz,
            cause = "sampling.frequency lowered by the configuration",
            "sampling frequency changed"
        );
    } else if hz < current {
        warn!(
            from = current,
            to = hz,
            cpu_percent,
            max_cpu_percent = caps.max_cpu_percent,
            cause = "the sampling pipeline's own CPU over the cap for two windows",
            threads,
            "CPU over budget: lowering the sampling frequency"
        );
    } else {
        info!(
            from = current,
            to = hz,
            cpu_percent,
            target = caps.target,
            cause = "the sampling pipeline's own CPU within the cap",
            threads,
            "CPU within budget: raising the sampling frequency"
        );
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
