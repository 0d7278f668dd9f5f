//! What the sampling pipeline's own threads cost in CPU, which the budget judges: the drain
//! and naming threads register themselves, their CPU time is read from their CPU-time clocks
//! (`pthread_getcpuclockid`: one `clock_gettime` each, where a schedstat file cost an open,
//! a stat, reads and a close every budget tick), and their housekeeping (the naming thread's
//! roll-up folds, retention, symbol trims, cache saves and naming of snapshots of the open
//! slices; the drain thread's normalizing of those snapshots) is timed with the thread's CPU
//! clock and subtracted. Queries, recordings, the API, and the housekeeping thread are not counted.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The registered threads and the housekeeping they did.
#[derive(Debug, Default)]
pub struct PipelineCpu {
    /// (name, CPU-time clock) of the threads of the pipeline.
    threads: Mutex<Vec<(&'static str, libc::clockid_t)>>,
    /// CPU ns the registered threads spent on housekeeping.
    housekeeping_ns: AtomicU64,
}

/// The CPU time of the pipeline's threads so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PipelineReading {
    /// Each registered thread's CPU time, ns.
    pub threads: Vec<(&'static str, u64)>,
    /// The part of it that was housekeeping, ns.
    pub housekeeping_ns: u64,
}

impl PipelineReading {
    /// The pipeline's own CPU time (housekeeping excluded), seconds.
    pub fn sampling_seconds(&self) -> f64 {
        let all: u64 = self.threads.iter().map(|t| t.1).sum();
        all.saturating_sub(self.housekeeping_ns) as f64 / 1e9
    }
}

impl PipelineCpu {
    /// Count the calling thread as part of the pipeline.
    pub fn register_this_thread(&self, name: &'static str) {
        match crate::sys::this_thread_cpu_clock() {
            Ok(clock) => self
                .threads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((name, clock)),
            Err(err) => {
                tracing::warn!(thread = name, %err, "no CPU-time clock: the thread's CPU is not counted in the budget");
            }
        }
    }

    /// Run `f`, scheduled housekeeping of a registered thread, and subtract the CPU it took.
    pub fn housekeeping<T>(&self, f: impl FnOnce() -> T) -> T {
        let before = thread_cpu();
        let out = f();
        let spent = thread_cpu().saturating_sub(before);
        self.housekeeping_ns
            .fetch_add(spent.as_nanos() as u64, Ordering::Relaxed);
        out
    }

    /// Count `spent`, CPU time a registered thread measured itself spending on housekeeping
    /// (the drain thread's normalizing of a snapshot of the open slices, timed by the
    /// recorder), as [`PipelineCpu::housekeeping`] counts what it runs.
    pub fn add_housekeeping(&self, spent: Duration) {
        self.housekeeping_ns
            .fetch_add(spent.as_nanos() as u64, Ordering::Relaxed);
    }

    /// The registered threads' CPU time now (a thread gone counts 0).
    pub fn read(&self) -> PipelineReading {
        let threads = self
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|&(name, clock)| (name, crate::sys::clock_ns(clock).unwrap_or(0)))
            .collect();
        PipelineReading {
            threads,
            housekeeping_ns: self.housekeeping_ns.load(Ordering::Relaxed),
        }
    }
}

/// The calling thread's CPU time (getrusage of the thread).
fn thread_cpu() -> Duration {
    recorder::ProcessUsage::this_thread().cpu()
}

/// The readings of the last window, to say what a change of frequency came from.
#[derive(Debug, Default)]
pub struct Recent {
    /// (seconds, the pipeline's reading, the whole process's CPU seconds), oldest first.
    readings: VecDeque<(f64, PipelineReading, f64)>,
}

impl Recent {
    /// Add a reading at `time` (seconds); keep `window` seconds of them.
    pub fn push(&mut self, time: f64, reading: PipelineReading, process_cpu: f64, window: f64) {
        self.readings.push_back((time, reading, process_cpu));
        while self.readings.get(1).is_some_and(|r| time - r.0 >= window) {
            self.readings.pop_front();
        }
    }

    /// Percent of one core each thread, the housekeeping and the whole process took over the
    /// readings kept: `drain=1.20% symbolize=0.40% housekeeping=2.10% (not counted)
    /// process=4.00%`.
    pub fn cause(&self) -> String {
        let (Some(a), Some(b)) = (self.readings.front(), self.readings.back()) else {
            return String::new();
        };
        let span = (b.0 - a.0).max(1e-9);
        let pct = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1e9 / span * 100.0;
        let mut out = String::new();
        for (name, ns) in &b.1.threads {
            let before = a.1.threads.iter().find(|t| t.0 == *name).map_or(0, |t| t.1);
            out.push_str(&format!("{name}={:.2}% ", pct(before, *ns)));
        }
        out.push_str(&format!(
            "housekeeping={:.2}% (not counted) process={:.2}% over {span:.0} s",
            pct(a.1.housekeeping_ns, b.1.housekeeping_ns),
            (b.2 - a.2).max(0.0) / span * 100.0
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(d: Duration) {
        let until = thread_cpu() + d;
        let mut x = 0u64;
        while thread_cpu() < until {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }

    #[test]
    fn housekeeping_is_subtracted_and_other_threads_are_not_counted() {
        let cpu = PipelineCpu::default();
        cpu.register_this_thread("test");
        let before = cpu.read();
        spin(Duration::from_millis(60));
        cpu.housekeeping(|| spin(Duration::from_millis(120)));
        // Another thread's work is not the pipeline's.
        std::thread::spawn(|| spin(Duration::from_millis(100)))
            .join()
            .unwrap();
        let after = cpu.read();
        let own = after.sampling_seconds() - before.sampling_seconds();
        assert!((0.05..0.1).contains(&own), "{own} s");
        let kept = (after.housekeeping_ns - before.housekeeping_ns) as f64 / 1e9;
        assert!((0.11..0.15).contains(&kept), "{kept} s");
    }
}
