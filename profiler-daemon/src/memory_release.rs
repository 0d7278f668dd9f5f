//! Giving the heap a query freed back to the system off its answer's path: the query asks
//! ([`request`]) and returns; one thread ("memory-release") gives it back, once for all the
//! requests made while it worked.
//!
//! glibc's `malloc_trim` walks every arena, taking each one's lock, while the other queries
//! allocate in theirs. Done by each query before it answered, a query of a range holding no
//! slice was found (in a debugger) still trimming after 30 s beside two long queries, in a
//! daemon held to 2% of a CPU; and queries ending together trimmed the same arenas in turn.

use std::sync::{Condvar, Mutex, OnceLock};

/// One thread that runs `release` whenever asked, coalescing the requests made while it runs
/// (the release after them covers them all). Started at the first request; it lives as long
/// as the process, parked while nothing is asked.
pub struct Releaser {
    pending: Mutex<bool>,
    wake: Condvar,
    /// Whether the thread runs (set at the first request).
    thread: OnceLock<bool>,
    release: fn(),
}

/// The daemon's: returns freed heap to the kernel ([`recorder::release_free_memory`]).
static HEAP: Releaser = Releaser::new(recorder::release_free_memory);

/// Ask for the heap freed so far to be given back to the system, soon, on the
/// "memory-release" thread (here, when that thread cannot be started).
pub fn request() {
    HEAP.request();
}

impl Releaser {
    /// A releaser running `release`; no thread until the first request.
    pub const fn new(release: fn()) -> Releaser {
        Releaser {
            pending: Mutex::new(false),
            wake: Condvar::new(),
            thread: OnceLock::new(),
            release,
        }
    }

    /// Ask for a release: the thread runs one after this call, or one already asked for and
    /// not yet begun covers it.
    pub fn request(&'static self) {
        let running = *self.thread.get_or_init(|| {
            std::thread::Builder::new()
                .name("memory-release".into())
                .spawn(move || self.run())
                .map_err(|e| {
                    tracing::warn!(error = %e, "no memory-release thread: queries release their memory themselves")
                })
                .is_ok()
        });
        if !running {
            (self.release)();
            return;
        }
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.wake.notify_one();
    }

    fn run(&self) {
        loop {
            {
                let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                while !*pending {
                    pending = self.wake.wait(pending).unwrap_or_else(|e| e.into_inner());
                }
                *pending = false;
            }
            (self.release)();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::time::{Duration, Instant};

    /// Polls `done` for up to 10 s.
    fn within_10s(done: impl Fn() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if done() {
                return true;
            }
            std::thread::yield_now();
        }
        done()
    }

    static RAN: AtomicU32 = AtomicU32::new(0);
    static ON_ITS_THREAD: AtomicBool = AtomicBool::new(false);
    static GO: AtomicBool = AtomicBool::new(false);

    fn held_release() {
        ON_ITS_THREAD.store(
            std::thread::current().name() == Some("memory-release"),
            Ordering::SeqCst,
        );
        RAN.fetch_add(1, Ordering::SeqCst);
        // Until GO, or 5 s (so that a release run by the caller fails the test, not hangs it).
        let end = Instant::now() + Duration::from_secs(5);
        while !GO.load(Ordering::SeqCst) && Instant::now() < end {
            std::thread::yield_now();
        }
    }

    static HELD: Releaser = Releaser::new(held_release);

    #[test]
    fn a_request_returns_at_once_and_those_made_during_a_release_are_one_more() {
        // The release blocks until GO: were it run by the caller, this would wait 5 s.
        HELD.request();
        assert!(within_10s(|| RAN.load(Ordering::SeqCst) == 1), "released");
        assert!(
            ON_ITS_THREAD.load(Ordering::SeqCst),
            "on the memory-release thread"
        );
        for _ in 0..10 {
            HELD.request();
        }
        GO.store(true, Ordering::SeqCst);
        assert!(within_10s(|| RAN.load(Ordering::SeqCst) == 2), "one more");
        // Nothing asked since: no third.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(
            RAN.load(Ordering::SeqCst),
            2,
            "ten requests during one release"
        );
    }
}
