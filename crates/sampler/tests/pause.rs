//! A sink can pause the drain loop (`RecordSink::pause_draining`), as a caller must to change
//! the set of rings (CPU hotplug): `drain_until` returns `DrainEnd::Paused` with the events
//! still sampling, and a second call with the same `stop` carries on until it resolves.

use std::process::{Child, Command};
use std::time::Duration;

use sampler::{
    decode, drain_until, now_ns, DrainEnd, RawRecord, Record, RecordSink, Sampler, SamplerConfig,
    Target,
};

struct Spinner(Child);

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Pausing {
    pid: u32,
    rounds: u32,
    pause_after: Option<u32>,
    /// Timestamps of the child's samples.
    times: Vec<u64>,
}

impl RecordSink for Pausing {
    fn on_record(&mut self, raw: RawRecord<'_>) {
        if let Record::Sample(s) = decode(raw) {
            if s.pid == self.pid {
                self.times.push(s.time);
            }
        }
    }
    fn on_round(&mut self, _: &Sampler) {
        self.rounds += 1;
    }
    fn pause_draining(&mut self) -> bool {
        self.pause_after == Some(self.rounds)
    }
}

#[test]
fn a_paused_drain_loop_resumes_with_the_events_running() {
    let spinner = Spinner(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap(),
    );
    let pid = spinner.0.id();
    let mut config = SamplerConfig::new(Target::Process {
        pid,
        enable_on_exec: false,
    });
    config.frequency = 199;
    let mut sampler = Sampler::open(&config).expect("open events on a child");
    sampler.enable().unwrap();
    let mut sink = Pausing {
        pid,
        rounds: 0,
        pause_after: Some(1),
        times: Vec::new(),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let tick = Duration::from_millis(20);
    runtime.block_on(async {
        let stop = tokio::time::sleep(Duration::from_secs(2));
        tokio::pin!(stop);
        let end = drain_until(&mut sampler, &mut stop, tick, &mut sink)
            .await
            .unwrap();
        assert_eq!(end, DrainEnd::Paused);
        assert_eq!(sink.rounds, 1, "returned after the round that asked");
        // Paused: nothing reads the rings, the events go on writing.
        let paused_from = now_ns();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let paused_to = now_ns();
        sink.pause_after = None;
        let end = drain_until(&mut sampler, &mut stop, tick, &mut sink)
            .await
            .unwrap();
        assert_eq!(end, DrainEnd::Stopped);
        assert!(sink.rounds > 2, "the second call drained until stop");
        let during = sink
            .times
            .iter()
            .filter(|&&t| t > paused_from && t < paused_to)
            .count();
        assert!(
            during > 0,
            "no sample of the child while the loop was paused: the events stopped"
        );
    });
    drop(spinner);
}
