//! `exclude_idle`: a whole-system session on cpu-clock takes no samples of the idle task
//! (pid 0). Judged against the idle time the kernel reports for the same window
//! (/proc/uptime), so a machine busy with other work only makes the measurement longer.

use std::time::Duration;

use sampler::{decode, EventChoice, EventKind, Record, Sampler, SamplerConfig, Target};

const HZ: u64 = 199;

/// Idle time of all CPUs so far (the second field of /proc/uptime), in seconds.
fn idle_seconds() -> f64 {
    let uptime = std::fs::read_to_string("/proc/uptime").unwrap();
    uptime.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Samples of pid 0 and of everything else waiting in the rings.
fn count(sampler: &mut Sampler, idle: &mut u64, other: &mut u64) {
    sampler.drain(&mut |raw| {
        if let Record::Sample(s) = decode(raw) {
            if s.pid == 0 {
                *idle += 1;
            } else {
                *other += 1;
            }
        }
    });
}

/// Whole-system cpu-clock sampling at [`HZ`] until the machine has been idle for half a
/// CPU-second (or 60 s passed, if other work keeps it busy): (pid-0 samples, other samples,
/// idle CPU-seconds meanwhile).
fn record(exclude_idle: bool) -> (u64, u64, f64) {
    let mut config = SamplerConfig::new(Target::System);
    config.frequency = HZ;
    config.event = EventChoice::Force(EventKind::CpuClock);
    config.exclude_idle = exclude_idle;
    let mut sampler = Sampler::open(&config).expect("whole-system events (run as root)");
    assert_eq!(sampler.info().idle_excluded, exclude_idle);
    let start = idle_seconds();
    sampler.enable().unwrap();
    let (mut idle, mut other) = (0, 0);
    for _ in 0..300 {
        std::thread::sleep(Duration::from_millis(200));
        count(&mut sampler, &mut idle, &mut other);
        if idle_seconds() - start >= 0.5 {
            break;
        }
    }
    sampler.disable();
    count(&mut sampler, &mut idle, &mut other);
    (idle, other, idle_seconds() - start)
}

#[test]
fn whole_system_sampling_skips_the_idle_task() {
    assert!(
        SamplerConfig::new(Target::System).exclude_idle,
        "on by default for the whole system"
    );
    assert!(
        !SamplerConfig::new(Target::Process {
            pid: 1,
            enable_on_exec: false
        })
        .exclude_idle
    );

    let (with_idle, with_other, idle_time) = record(false);
    let (without_idle, without_other, idle_time_excluded) = record(true);
    let report = format!(
        "idle task included: {with_idle} pid-0 samples ({with_other} others) in \
         {idle_time:.2} idle CPU-s; excluded: {without_idle} pid-0 samples \
         ({without_other} others) in {idle_time_excluded:.2} idle CPU-s"
    );
    eprintln!("{report}");
    assert!(
        idle_time >= 0.2 && idle_time_excluded >= 0.2,
        "the machine was hardly idle in 60 s: {report}"
    );
    // Up to HZ samples per idle CPU-second when the idle task is sampled (about half of that
    // measured in this VM).
    assert!(
        with_idle as f64 >= 0.1 * HZ as f64 * idle_time,
        "too few idle samples without exclude_idle: {report}"
    );
    assert!(
        (without_idle as f64) <= 0.02 * HZ as f64 * idle_time_excluded + 2.0,
        "idle samples with exclude_idle: {report}"
    );
}
