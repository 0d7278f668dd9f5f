//! Waiting, in one place: the only code in these tests that sleeps.
//!
//! A test waits for a condition (a `/v1/status` field, a file, a process state) with
//! [`wait_for`], never for a fixed time; [`hold`] lets a measured span of wall time pass where
//! the span itself is what is measured (a workload's run beside a daemon whose CPU is read).
//!
//! Every deadline is multiplied by one factor, `PROFCTL_TEST_TIME_SCALE` (a positive number,
//! 1 by default): on a slow or shared machine set it to 2 or 3 rather than widening deadlines
//! one by one. A deadline is a bound on a failure's wait, never what a test measures, so
//! scaling it changes no assertion.

use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

/// The environment variable that scales every deadline of these tests.
pub const TIME_SCALE_VAR: &str = "PROFCTL_TEST_TIME_SCALE";

/// The factor every deadline is multiplied by: [`TIME_SCALE_VAR`], 1 when unset.
pub fn time_scale() -> f64 {
    static SCALE: OnceLock<f64> = OnceLock::new();
    *SCALE.get_or_init(|| match std::env::var(TIME_SCALE_VAR) {
        Ok(text) => match text.trim().parse::<f64>() {
            Ok(scale) if scale.is_finite() && scale > 0.0 => scale,
            _ => panic!("{TIME_SCALE_VAR}={text:?}: expected a positive number such as 2"),
        },
        Err(_) => 1.0,
    })
}

/// `limit` multiplied by [`time_scale`].
pub fn scaled(limit: Duration) -> Duration {
    limit.mul_f64(time_scale())
}

/// How often a condition is checked: often at first, then every 200 ms.
fn interval(attempt: u32) -> Duration {
    Duration::from_millis(match attempt {
        0..=9 => 20,
        10..=29 => 50,
        _ => 200,
    })
}

/// Checks `state` until it returns `Ok`, for at most `limit` scaled by [`time_scale`], and
/// returns its value; panics naming `what`, the time waited and the last `Err` (the state the
/// test saw, for the failure message).
pub fn wait_for<T>(what: &str, limit: Duration, mut state: impl FnMut() -> Result<T, String>) -> T {
    let limit = scaled(limit);
    let start = Instant::now();
    let mut attempt = 0;
    loop {
        let last = match state() {
            Ok(value) => return value,
            Err(last) => last,
        };
        let waited = start.elapsed();
        if waited >= limit {
            panic!("{what}: not within {limit:.1?} (waited {waited:.1?}); last seen: {last}");
        }
        thread::sleep(interval(attempt).min(limit - waited));
        attempt += 1;
    }
}

/// Checks `state` until it returns `Some`, for at most `limit` (unscaled: the caller's own
/// measure of time, such as a process given a bounded time to exit); `None` when it did not.
pub fn poll_until<T>(limit: Duration, mut state: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    let mut attempt = 0;
    loop {
        if let Some(value) = state() {
            return Some(value);
        }
        let waited = start.elapsed();
        if waited >= limit {
            return None;
        }
        thread::sleep(interval(attempt).min(limit - waited));
        attempt += 1;
    }
}

/// Lets `span` of wall time pass (not scaled): for a span that is itself the measurement,
/// such as the window over which a daemon's CPU is read. Never a wait for something to happen.
pub fn hold(span: Duration) {
    thread::sleep(span);
}

/// Lets time pass until `seconds` have passed since `start` (no wait if they have).
pub fn hold_until_elapsed(start: Instant, seconds: f64) {
    let left = seconds - start.elapsed().as_secs_f64();
    if left > 0.0 {
        hold(Duration::from_secs_f64(left));
    }
}

/// Lets time pass until the wall clock reads `unix_seconds` (no wait if it already has).
pub fn hold_until(unix_seconds: f64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64();
    if unix_seconds > now {
        hold(Duration::from_secs_f64(unix_seconds - now));
    }
}
