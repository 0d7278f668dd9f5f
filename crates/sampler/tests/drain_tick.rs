//! The drain loop's tick only fills gaps: a round started by a ring or by `wake` postpones
//! it, so that a loop woken more often than its tick (at rest, by the rings' watermarks) makes
//! no round of the tick's own. Here `wake` is notified every 100 ms, with a 500-ms tick, on
//! the rings of a sleeping child (which never wake the loop): every round but the tick's
//! first (at once) and the last (after stop) must follow a notification.

use std::process::{Child, Command};
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

struct Sleeper(Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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
    let child = Sleeper(Command::new("sleep").arg("30").spawn().unwrap());
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

/// Counts rounds and asks for `next` between them ([`RecordSink::next_tick`]).
struct Spaced {
    next: Duration,
    rounds: u32,
}

impl RecordSink for Spaced {
    fn on_record(&mut self, _: RawRecord<'_>) {}
    fn on_round(&mut self, _: &Sampler) {
        self.rounds += 1;
    }
    fn next_tick(&mut self, _tick: Duration) -> Duration {
        self.next
    }
}

/// Rounds of a loop left alone (a sleeping child's rings, no wake) come at the sink's next
/// tick: a sink that asks 1.5 s after every round gets three in 3 s (at once, at 1.5 s, and
/// after stop), where the 500-ms tick makes seven.
#[test]
fn a_sink_at_rest_spaces_the_rounds_it_asks_for() {
    let child = Sleeper(Command::new("sleep").arg("30").spawn().unwrap());
    let mut config = SamplerConfig::new(Target::Process {
        pid: child.0.id(),
        enable_on_exec: false,
    });
    config.frequency = 99;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let rounds = |next: Duration| {
        let mut sampler = Sampler::open(&config).expect("open events on a child");
        sampler.enable().unwrap();
        let mut sink = Spaced { next, rounds: 0 };
        runtime.block_on(async {
            let stop = tokio::time::sleep(RUN);
            drain_until_woken(&mut sampler, stop, TICK, None, &mut sink)
                .await
                .unwrap();
        });
        sink.rounds
    };
    let at_tick = rounds(TICK);
    let spaced = rounds(TICK * 3);
    assert!(
        (6..=8).contains(&at_tick),
        "{at_tick} rounds at the 500-ms tick in 3 s"
    );
    assert!(
        (2..=4).contains(&spaced),
        "{spaced} rounds with 1.5 s asked between them in 3 s"
    );
}
