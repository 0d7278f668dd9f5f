//! Drain-loop wake-ups under fork/exec churn, for each `SidebandWakeup` setting.
//!
//! Samples the whole system (root) at `--hz` while a thread runs `/bin/true` `--rate` times a
//! second, for `--seconds` per setting, and reports the drain rounds per minute (each round
//! is a wake-up by a ring or by the tick), the drain thread's CPU time, how late the
//! side-band records were read, and how many `true` binaries were still reachable through
//! /proc/PID/exe when their mapping was read.
//!
//! ```text
//! cargo run --release -p sampler --example sideband_wakeups -- \
//!     [--seconds 20] [--hz 99] [--tick-ms 250] [--rate 50] every 4096 16384
//! ```
//! A setting is `every` (`SidebandWakeup::EveryRecord`) or a byte count (`Bytes(n)`).

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sampler::{
    decode, drain_until, RawRecord, Record, RecordSink, Sampler, SamplerConfig, SidebandWakeup,
    Target,
};

struct Options {
    seconds: u64,
    hz: u64,
    tick: Duration,
    rate: u64,
    settings: Vec<SidebandWakeup>,
}

fn parse_options() -> Options {
    let mut options = Options {
        seconds: 20,
        hz: 99,
        tick: Duration::from_millis(250),
        rate: 50,
        settings: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || -> u64 {
            args.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{arg} needs a number"))
        };
        match arg.as_str() {
            "--seconds" => options.seconds = value(),
            "--hz" => options.hz = value(),
            "--tick-ms" => options.tick = Duration::from_millis(value()),
            "--rate" => options.rate = value(),
            "every" => options.settings.push(SidebandWakeup::EveryRecord),
            bytes => options.settings.push(SidebandWakeup::Bytes(
                bytes
                    .parse()
                    .unwrap_or_else(|_| panic!("not a setting: {bytes}")),
            )),
        }
    }
    if options.settings.is_empty() {
        options.settings = vec![
            SidebandWakeup::EveryRecord,
            SidebandWakeup::Bytes(4096),
            SidebandWakeup::Bytes(16384),
        ];
    }
    options
}

/// CPU time of the calling thread so far (utime + stime of /proc/thread-self/stat).
fn thread_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(") ")
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // USER_HZ: 100 on every architecture Linux profilers run on.
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

#[derive(Default)]
struct Counter {
    rounds: u64,
    samples: u64,
    sideband: u64,
    /// How late each side-band record was read, in µs.
    lag_us: Vec<u64>,
    /// `true` mappings read while /proc/PID/exe still resolved, and after.
    true_alive: u64,
    true_gone: u64,
}

impl RecordSink for Counter {
    fn on_record(&mut self, raw: RawRecord<'_>) {
        let time = match decode(raw) {
            Record::Sample(_) => {
                self.samples += 1;
                return;
            }
            Record::Mmap2(m) => {
                if m.filename.ends_with(b"/true") {
                    if std::fs::read_link(format!("/proc/{}/exe", m.pid)).is_ok() {
                        self.true_alive += 1;
                    } else {
                        self.true_gone += 1;
                    }
                }
                m.id.time
            }
            Record::Comm { id, .. } => id.time,
            Record::Fork { time, .. } | Record::Exit { time, .. } => time,
            _ => return,
        };
        self.sideband += 1;
        self.lag_us
            .push(sampler::now_ns().saturating_sub(time) / 1000);
    }

    fn on_round(&mut self, _: &Sampler) {
        self.rounds += 1;
    }
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn run(options: &Options, wakeup: SidebandWakeup) {
    let mut config = SamplerConfig::new(Target::System);
    config.frequency = options.hz;
    config.sideband_wakeup = wakeup;
    let mut sampler = Sampler::open(&config).expect("whole-system events (run as root)");
    sampler.enable().unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        let interval = Duration::from_secs(1) / options.rate.max(1) as u32;
        std::thread::spawn(move || {
            let mut processes = 0u64;
            let mut next = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let _ = Command::new("/bin/true").status();
                processes += 1;
                next += interval;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            processes
        })
    };

    let mut counter = Counter::default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let cpu_before = thread_cpu();
    runtime.block_on(async {
        let stop = tokio::time::sleep(Duration::from_secs(options.seconds));
        drain_until(&mut sampler, stop, options.tick, &mut counter)
            .await
            .unwrap();
    });
    let cpu = thread_cpu() - cpu_before;
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let processes = churn.join().unwrap();

    let minutes = elapsed.as_secs_f64() / 60.0;
    let ticks = elapsed.as_secs_f64() / options.tick.as_secs_f64();
    counter.lag_us.sort_unstable();
    let setting = match wakeup {
        SidebandWakeup::EveryRecord => "every record".to_string(),
        SidebandWakeup::Bytes(n) => format!("{n} bytes"),
    };
    println!(
        "{setting:>13}: {rounds:6.0} rounds/min ({ticks_min:.0} of them ticks), drain thread \
         {cpu_ms:.0} ms CPU/min; {processes} processes ({rate:.0}/s), {sideband} side-band \
         records, {samples} samples; side-band read after p50 {p50:.1} ms, p99 {p99:.1} ms, \
         max {max:.1} ms; `true` mapping read while /proc/PID/exe resolved: {alive} of {all}",
        rounds = counter.rounds as f64 / minutes,
        ticks_min = ticks / minutes,
        cpu_ms = cpu.as_secs_f64() * 1000.0 / minutes,
        rate = processes as f64 / elapsed.as_secs_f64(),
        sideband = counter.sideband,
        samples = counter.samples,
        p50 = percentile(&counter.lag_us, 0.5) as f64 / 1000.0,
        p99 = percentile(&counter.lag_us, 0.99) as f64 / 1000.0,
        max = counter.lag_us.last().copied().unwrap_or(0) as f64 / 1000.0,
        alive = counter.true_alive,
        all = counter.true_alive + counter.true_gone,
    );
}

fn main() {
    let options = parse_options();
    println!(
        "whole system at {} Hz, tick {} ms, /bin/true {} times a second, {} s per setting",
        options.hz,
        options.tick.as_millis(),
        options.rate,
        options.seconds
    );
    for &wakeup in &options.settings {
        run(&options, wakeup);
    }
}
