//! The budget controller's tests, without I/O: simulated daemons whose CPU use is a function
//! of the frequency.

use super::*;

const CAPS: Caps = Caps {
    max_cpu_percent: 2.0,
    max_memory: 100,
    min_frequency: 9,
    target: 999,
    window: 10.0,
};

/// A daemon whose CPU use is `fixed + per_hz * frequency` percent, run for `seconds`
/// (one reading per second) from frequency `start`; returns the frequencies it went
/// through and the controller.
fn simulate(
    controller: &mut Controller,
    caps: &Caps,
    start: u64,
    seconds: u32,
    cost: impl Fn(u64) -> f64,
) -> Vec<u64> {
    let mut frequency = start;
    let mut cpu = 0.0;
    let mut seen = vec![frequency];
    for t in 0..seconds {
        cpu += cost(frequency) / 100.0;
        let d = controller.step(
            Reading {
                time: f64::from(t),
                cpu,
                memory: 0,
            },
            frequency,
            caps,
        );
        if let Some(f) = d.frequency {
            assert!(f >= caps.min_frequency.min(caps.target) && f <= caps.target);
            frequency = f;
            seen.push(f);
        }
    }
    seen
}

#[test]
fn over_the_cpu_cap_the_frequency_comes_down_until_under() {
    // 0.2% fixed, 0.01% per Hz: 999 Hz costs 10.2%, the cap (2%) allows 180 Hz.
    let cost = |f: u64| 0.2 + 0.01 * f as f64;
    let mut c = Controller::default();
    let seen = simulate(&mut c, &CAPS, 999, 200, cost);
    let last = *seen.last().unwrap();
    assert!(cost(last) <= CAPS.max_cpu_percent, "{seen:?}");
    assert!(last >= 90, "not lowered much too far: {seen:?}");
    // Nothing before the warm-up window and a full window after it.
    assert_eq!(seen[0], 999);
    assert!(seen.len() <= 6, "settles in a few steps: {seen:?}");
    // Stable once under: no oscillation.
    let more = simulate(&mut c, &CAPS, last, 100, cost);
    assert!(more.len() <= 2, "{more:?}");
}

#[test]
fn the_frequency_never_goes_below_the_minimum() {
    let mut c = Controller::default();
    let seen = simulate(&mut c, &CAPS, 999, 300, |_| 5.0);
    assert_eq!(*seen.last().unwrap(), 9, "{seen:?}");
}

#[test]
fn when_load_drops_the_frequency_goes_back_up_step_by_step() {
    let mut c = Controller::default();
    let heavy = simulate(&mut c, &CAPS, 999, 100, |f| 0.02 * f as f64);
    let low = *heavy.last().unwrap();
    assert!(low < 999);
    // Load drops: each sample costs a twentieth of what it did (999 Hz: half the cap).
    let seen = simulate(&mut c, &CAPS, low, 300, |f| 0.001 * f as f64);
    assert_eq!(*seen.last().unwrap(), 999, "{seen:?}");
    for pair in seen.windows(2) {
        assert!(
            pair[1] * 2 <= pair[0] * 3,
            "steps of half at most: {seen:?}"
        );
    }
    assert!(seen.len() >= 3, "more than one step: {seen:?}");
    // Where the target would cost 90% of the cap, raised until 70% of it at least.
    let mut c = Controller::default();
    let low = *simulate(&mut c, &CAPS, 999, 100, |f| 0.02 * f as f64)
        .last()
        .unwrap();
    let cost = |f: u64| 0.0018 * f as f64;
    let last = *simulate(&mut c, &CAPS, low, 600, cost).last().unwrap();
    assert!(
        cost(last) >= 0.7 * CAPS.max_cpu_percent - 0.01 && cost(last) <= CAPS.max_cpu_percent,
        "{last} Hz"
    );
}

#[test]
fn a_lower_target_applies_at_once_and_memory_sheds_once_per_window() {
    let mut c = Controller::default();
    let caps = Caps { target: 99, ..CAPS };
    let r = |time: f64, memory| Reading {
        time,
        cpu: 0.0,
        memory,
    };
    let d = c.step(r(0.0, 50), 999, &caps);
    assert_eq!(d.frequency, Some(99));
    assert!(!d.shed && !d.memory_over);
    let d = c.step(r(1.0, 500), 99, &caps);
    assert!(d.shed && d.memory_over);
    assert!(
        !c.step(r(5.0, 500), 99, &caps).shed,
        "not twice in a window"
    );
    assert!(c.step(r(11.0, 500), 99, &caps).shed);
    assert!(!c.step(r(12.0, 50), 99, &caps).memory_over);
}

#[test]
fn a_burst_within_one_window_does_not_lower_the_frequency() {
    // 1% steady (half the cap), and once a minute a burst of 1.5 s of CPU in one second:
    // each window holding a burst averages 16%, the one before it 1%.
    let mut c = Controller::default();
    let mut cpu = 0.0;
    for t in 0..600u32 {
        cpu += 0.01 + if t % 60 == 45 { 1.5 } else { 0.0 };
        let r = Reading {
            time: f64::from(t),
            cpu,
            memory: 0,
        };
        let d = c.step(r, 999, &CAPS);
        assert_eq!(d.frequency, None, "at {t} s: {d:?}");
    }
    // The same cost for two windows in a row is sustained: lowered.
    let mut c = Controller::default();
    let seen = simulate(&mut c, &CAPS, 999, 60, |_| 16.0);
    assert!(seen.len() > 1, "{seen:?}");
}
