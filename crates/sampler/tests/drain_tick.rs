//! The drain loop's tick only fills gaps: a round started by a ring or by `wake` postpones
//! it, so that a loop woken more often than its tick (at rest, by the rings' watermarks) makes
//! no round of the tick's own. Here `wake` is notified every 100 ms, with a 500-ms tick, on
//! the rings of a sleeping child (which never wake the loop): every round but the tick's
//! first (at once) and the last (after stop) must follow a notification.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sampler::{drain_until_woken, RawRecord, RecordSink, Sampler, SamplerConfig, Target};

/// The loop's tick.
const TICK: Duration = Duration::from_millis(500);

/// Time between notifications.
const EVERY: Duration = Duration::from_millis(100);

/// How long the loop runs.
const RUN: Duration = Duration::from_secs(3);

#[path = "support/sleeper.rs"]
mod sleeper;
use sleeper::Sleeper;

/// Counts the rounds that no notification preceded (since the round before).
struct Rounds {
    notified: Arc<AtomicU64>,
    seen: u64,
    rounds: u32,
    unprompted: u32,
}

impl RecordSink for Rounds {
    fn on_record(&mut self, _: RawRecord<'_>) {}
    fn on_round(&mut self, _: &Sampler) {
        self.rounds += 1;
        let notified = self.notified.load(Ordering::Acquire);
        if notified == self.seen {
            self.unprompted += 1;
        }
        self.seen = notified;
    }
}

#[test]
fn rounds_started_by_a_wake_postpone_the_tick() {
    let child = Sleeper::start();
    let mut config = SamplerConfig::new(Target::Process {
        pid: child.0.id(),
        enable_on_exec: false,
    });
    config.frequency = 99;
    let mut sampler = Sampler::open(&config).expect("open events on a child");
    sampler.enable().unwrap();
    let notified = Arc::new(AtomicU64::new(0));
    let mut sink = Rounds {
        notified: notified.clone(),
        seen: 0,
        rounds: 0,
        unprompted: 0,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let wake = Arc::new(tokio::sync::Notify::new());
    let notifier = {
        let (wake, notified) = (wake.clone(), notified.clone());
        std::thread::spawn(move || {
            // The longest time between two notifications: a tick may fill a gap that long.
            let mut longest = Duration::ZERO;
            let mut last = Instant::now();
            let start = last;
            while start.elapsed() < RUN + Duration::from_millis(500) {
                std::thread::sleep(EVERY);
                longest = longest.max(last.elapsed());
                last = Instant::now();
                notified.fetch_add(1, Ordering::Release);
                wake.notify_one();
            }
            longest
        })
    };
    runtime.block_on(async {
        let stop = tokio::time::sleep(RUN);
        drain_until_woken(&mut sampler, stop, TICK, Some(&wake), &mut sink)
            .await
            .unwrap();
    });
    let longest = notifier.join().unwrap();
    let report = format!(
        "{} rounds, {} not after a notification, {} notifications, longest gap {longest:?}",
        sink.rounds,
        sink.unprompted,
        notified.load(Ordering::Acquire)
    );
    eprintln!("{report}");
    assert!(
        sink.rounds >= 10,
        "the notifications started rounds: {report}"
    );
    if longest < TICK {
        // The tick's first round (at once) and the round after stop; without the
        // postponement, one more every tick (6 in the run).
        assert!(
            sink.unprompted <= 2,
            "the tick made rounds of its own between notifications: {report}"
        );
    } else {
        eprintln!("a gap between notifications was longer than the tick: not judged");
    }
}
