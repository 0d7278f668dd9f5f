//! `Sampler::set_frequency` changes the rate of the open events: a spinning child sampled at
//! 1000 Hz, then at 100 Hz, gets about ten times fewer samples per second of its own CPU time.
//! Rates are judged against the child's CPU time (/proc/PID/stat), not the wall clock, so a
//! busy machine only makes the measurement longer, not wrong.

use std::process::{Child, Command};
use std::time::Duration;

use sampler::{decode, Record, Sampler, SamplerConfig, Target};

/// Kills the child even when an assertion fails.
struct Spinner(Child);

impl Drop for Spinner {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// User plus system CPU time of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the parenthesised comm: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // In USER_HZ: 100 on every architecture this crate runs on.
    ticks as f64 / 100.0
}

/// Samples of `pid` waiting in the rings.
fn count_samples(sampler: &mut Sampler, pid: u32) -> u64 {
    let mut n = 0;
    sampler.drain(&mut |raw| {
        if let Record::Sample(s) = decode(raw) {
            n += u64::from(s.pid == pid);
        }
    });
    n
}

/// Let the child run until it has used `cpu` seconds of CPU (or 20 s passed); returns the
/// samples it got and the CPU time it used meanwhile.
fn measure(sampler: &mut Sampler, pid: u32, cpu: f64) -> (u64, f64) {
    count_samples(sampler, pid);
    let start = cpu_seconds(pid);
    let mut samples = 0;
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(100));
        // Drained as it goes, so the ring never fills.
        samples += count_samples(sampler, pid);
        if cpu_seconds(pid) - start >= cpu {
            break;
        }
    }
    samples += count_samples(sampler, pid);
    (samples, cpu_seconds(pid) - start)
}

#[test]
fn set_frequency_changes_the_rate_of_open_events() {
    let child = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let spinner = Spinner(child);
    let pid = spinner.0.id();
    let mut config = SamplerConfig::new(Target::Process {
        pid,
        enable_on_exec: false,
    });
    config.frequency = 1000;
    let mut sampler = Sampler::open(&config).expect("open events on a child");
    assert_eq!(sampler.info().frequency, 1000);
    sampler.enable().unwrap();

    let (fast, fast_cpu) = measure(&mut sampler, pid, 1.0);
    assert_eq!(sampler.set_frequency(100).unwrap(), 100);
    assert_eq!(
        sampler.info().frequency,
        100,
        "info reports the new frequency"
    );
    let (slow, slow_cpu) = measure(&mut sampler, pid, 1.0);
    sampler.disable();

    let fast_rate = fast as f64 / fast_cpu;
    let slow_rate = slow as f64 / slow_cpu;
    let report = format!(
        "{} event: {fast} samples in {fast_cpu:.2} CPU-s at 1000 Hz ({fast_rate:.0}/s), \
         {slow} in {slow_cpu:.2} CPU-s at 100 Hz ({slow_rate:.0}/s)",
        sampler.info().event
    );
    eprintln!("{report}");
    assert!(
        fast_cpu >= 0.5 && slow_cpu >= 0.5,
        "the child hardly ran: {report}"
    );
    assert!(
        (500.0..=1500.0).contains(&fast_rate),
        "about 1000 samples per CPU-second expected before the change: {report}"
    );
    assert!(
        (40.0..=200.0).contains(&slow_rate),
        "about 100 samples per CPU-second expected after the change: {report}"
    );

    assert!(
        matches!(
            sampler.set_frequency(0),
            Err(sampler::SamplerError::Frequency { .. })
        ),
        "0 Hz is refused"
    );
    assert_eq!(
        sampler.info().frequency,
        100,
        "a refused change changes nothing"
    );
}
