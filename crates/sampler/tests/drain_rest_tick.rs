//! A sink at rest spaces the drain loop's rounds ([`RecordSink::next_tick`]): on the rings of
//! a sleeping child (which never wake the loop) and with no wake, the rounds come at the tick
//! the sink asks for. Its own binary: run beside `drain_tick.rs`, whose count of rounds the
//! tick made is judged to the round, it took CPU from that test's notifier.

use std::time::Duration;

use sampler::{drain_until_woken, RawRecord, RecordSink, Sampler, SamplerConfig, Target};

/// The loop's tick.
const TICK: Duration = Duration::from_millis(500);

/// How long the loop runs.
const RUN: Duration = Duration::from_secs(3);

#[path = "support/sleeper.rs"]
mod sleeper;
use sleeper::Sleeper;

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
    let child = Sleeper::start();
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
