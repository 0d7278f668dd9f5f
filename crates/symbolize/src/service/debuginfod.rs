//! Asking debuginfod for missing debug info without letting a slow or down server stall
//! naming: each build-id whose fetch failed is not asked again for a while, and after a
//! server stops answering (timeout, no connection), or answers with an error only slowly,
//! nothing is asked for the rest of the window nor before a back-off has passed (doubling while
//! it keeps failing, reset by an answer): a server taking 8 s to answer 500 costs 8 s once per
//! back-off, not once per file.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use debuginfod::FetchError;
use rustc_hash::FxBuildHasher;
use tracing::{debug, warn};

use super::stats::UserSymbolStats;

/// Build-ids remembered as failed; past this, those older than the retry delay are forgotten.
const MAX_FAILED: usize = 4096;

/// A failed fetch that took at least this long suspends the server like a timeout.
const SLOW_FAILURE: Duration = Duration::from_secs(1);

/// Where debug info comes from: a [`debuginfod::Client`], or a stand-in in tests.
pub(crate) trait DebugInfoSource: Send {
    /// The debug file of `build_id` (blocking, bounded by the source's own timeout).
    fn fetch(&self, build_id: &[u8]) -> Result<PathBuf, FetchError>;
}

impl DebugInfoSource for debuginfod::Client {
    fn fetch(&self, build_id: &[u8]) -> Result<PathBuf, FetchError> {
        debuginfod::Client::fetch(self, build_id, debuginfod::Artifact::DebugInfo)
    }
}

/// How long failures are remembered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    /// After a server stops answering, not asked again before this (doubled each time it
    /// fails again, up to `max`).
    pub first: Duration,
    /// The longest back-off.
    pub max: Duration,
    /// A build-id whose fetch failed is not asked again before this.
    pub retry_build_id: Duration,
}

/// A debuginfod source with its failures remembered.
pub(crate) struct Fetcher {
    source: Option<Box<dyn DebugInfoSource>>,
    backoff: Backoff,
    /// The next back-off after a server failure.
    next_backoff: Duration,
    /// The window in which the server stopped answering, and when it may be asked again.
    suspended: Option<(u64, Instant)>,
    failed: HashMap<Vec<u8>, Instant, FxBuildHasher>,
}

impl Fetcher {
    /// A fetcher asking `source` (None: never fetches).
    pub(crate) fn new(source: Option<Box<dyn DebugInfoSource>>, backoff: Backoff) -> Fetcher {
        Fetcher {
            source,
            backoff,
            next_backoff: backoff.first,
            suspended: None,
            failed: HashMap::default(),
        }
    }

    /// Whether a fetch could be tried now, in `window` (a source is set and not suspended).
    pub(crate) fn available(&self, window: u64, now: Instant) -> bool {
        self.source.is_some()
            && match self.suspended {
                Some((w, until)) => w != window && now >= until,
                None => true,
            }
    }

    /// The debug file of `build_id` (of the binary at `path`, for messages), fetched in
    /// `window` at `now`; None when there is none, it failed, or asking is suspended.
    /// Failures are counted in `stats`.
    pub(crate) fn fetch(
        &mut self,
        build_id: &[u8],
        path: &str,
        window: u64,
        now: Instant,
        stats: &mut UserSymbolStats,
    ) -> Option<PathBuf> {
        if !self.available(window, now) {
            return None;
        }
        if let Some(&when) = self.failed.get(build_id) {
            if now.saturating_duration_since(when) < self.backoff.retry_build_id {
                return None;
            }
            self.failed.remove(build_id);
        }
        let source = self.source.as_ref()?;
        let started = Instant::now();
        let result = source.fetch(build_id);
        let slow = started.elapsed() >= SLOW_FAILURE;
        match result {
            Ok(fetched) => {
                debug!(file = path, debug = %fetched.display(), "debug info from debuginfod");
                stats.debuginfod_fetched += 1;
                self.answered();
                Some(fetched)
            }
            Err(FetchError::NotFound { .. }) => {
                self.answered();
                None
            }
            Err(err) => {
                let server_down =
                    slow || matches!(err, FetchError::Timeout { .. } | FetchError::Connect { .. });
                stats.debuginfod_failures.push(format!("{path}: {err}"));
                self.remember_failure(build_id, now);
                if server_down {
                    let backoff = self.next_backoff;
                    warn!(%err, backoff_s = backoff.as_secs(), "debuginfod does not answer, or only slowly; not asking it again in this window, nor before the back-off");
                    self.suspended = Some((window, now + backoff));
                    self.next_backoff = (backoff * 2).min(self.backoff.max);
                }
                None
            }
        }
    }

    /// A server answered: it is up.
    fn answered(&mut self) {
        self.suspended = None;
        self.next_backoff = self.backoff.first;
    }

    fn remember_failure(&mut self, build_id: &[u8], now: Instant) {
        if self.failed.len() >= MAX_FAILED {
            let retry = self.backoff.retry_build_id;
            self.failed
                .retain(|_, when| now.saturating_duration_since(*when) < retry);
            if self.failed.len() >= MAX_FAILED {
                self.failed.clear();
            }
        }
        self.failed.insert(build_id.to_vec(), now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    /// Answers from a script, counting the requests.
    struct Scripted {
        answers: Mutex<Vec<Result<PathBuf, FetchError>>>,
        asked: Arc<AtomicUsize>,
    }

    impl DebugInfoSource for Scripted {
        fn fetch(&self, _: &[u8]) -> Result<PathBuf, FetchError> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            self.answers.lock().unwrap().remove(0)
        }
    }

    fn timeout() -> Result<PathBuf, FetchError> {
        Err(FetchError::Timeout {
            url: "http://127.0.0.1:1/x".into(),
        })
    }

    fn fetcher(answers: Vec<Result<PathBuf, FetchError>>) -> (Fetcher, Arc<AtomicUsize>) {
        let asked = Arc::new(AtomicUsize::new(0));
        let source = Scripted {
            answers: Mutex::new(answers),
            asked: asked.clone(),
        };
        let backoff = Backoff {
            first: Duration::from_secs(60),
            max: Duration::from_secs(240),
            retry_build_id: Duration::from_secs(600),
        };
        (Fetcher::new(Some(Box::new(source)), backoff), asked)
    }

    #[test]
    fn a_timeout_suspends_for_the_window_and_the_backoff_then_asks_again() {
        let (mut f, asked) = fetcher(vec![timeout(), timeout(), Ok("/d".into())]);
        let mut stats = UserSymbolStats::default();
        let t0 = Instant::now();
        assert_eq!(f.fetch(b"aa", "/a", 1, t0, &mut stats), None);
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        assert_eq!(stats.debuginfod_failures.len(), 1);
        // Same window, another build-id: not asked, even once the back-off has passed (a
        // recording named as one window meets at most one timeout).
        assert_eq!(f.fetch(b"bb", "/b", 1, t0, &mut stats), None);
        let after_backoff = t0 + Duration::from_secs(3600);
        assert_eq!(f.fetch(b"bb", "/b", 1, after_backoff, &mut stats), None);
        // Next window, before the back-off: not asked.
        let early = t0 + Duration::from_secs(30);
        assert_eq!(f.fetch(b"bb", "/b", 2, early, &mut stats), None);
        assert_eq!(asked.load(Ordering::SeqCst), 1);
        // After the back-off, in a later window: asked again; it fails, the back-off doubles.
        let later = t0 + Duration::from_secs(61);
        assert_eq!(f.fetch(b"bb", "/b", 3, later, &mut stats), None);
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        assert!(!f.available(4, later + Duration::from_secs(100)));
        assert!(f.available(4, later + Duration::from_secs(121)));
        // Up again: answers, and the back-off is reset.
        let fetched = f.fetch(b"cc", "/c", 4, later + Duration::from_secs(121), &mut stats);
        assert_eq!(fetched, Some(PathBuf::from("/d")));
        assert_eq!(stats.debuginfod_fetched, 1);
        assert_eq!(f.next_backoff, Duration::from_secs(60));
    }

    /// Answers every request with a 500 after a delay.
    struct SlowErrors(Arc<AtomicUsize>);

    impl DebugInfoSource for SlowErrors {
        fn fetch(&self, _: &[u8]) -> Result<PathBuf, FetchError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(SLOW_FAILURE + Duration::from_millis(50));
            Err(FetchError::Http {
                url: "http://127.0.0.1:1/x".into(),
                status: 500,
            })
        }
    }

    /// Issue 11, item 11: a server answering errors slowly costs one slow answer per
    /// back-off, not one per file.
    #[test]
    fn a_slow_error_suspends_the_server() {
        let asked = Arc::new(AtomicUsize::new(0));
        let backoff = Backoff {
            first: Duration::from_secs(60),
            max: Duration::from_secs(240),
            retry_build_id: Duration::from_secs(600),
        };
        let mut f = Fetcher::new(Some(Box::new(SlowErrors(asked.clone()))), backoff);
        let mut stats = UserSymbolStats::default();
        let t0 = Instant::now();
        for id in [&b"aa"[..], b"bb", b"cc"] {
            assert_eq!(f.fetch(id, "/x", 1, t0, &mut stats), None);
        }
        assert_eq!(
            asked.load(Ordering::SeqCst),
            1,
            "asked again after a slow error"
        );
        assert!(!f.available(2, t0 + Duration::from_secs(30)));
    }

    #[test]
    fn a_failed_build_id_is_not_asked_again_before_its_retry_delay() {
        let http = || {
            Err(FetchError::Http {
                url: "http://127.0.0.1:1/x".into(),
                status: 500,
            })
        };
        let (mut f, asked) = fetcher(vec![http(), Ok("/d".into()), Ok("/e".into())]);
        let mut stats = UserSymbolStats::default();
        let t0 = Instant::now();
        assert_eq!(f.fetch(b"aa", "/a", 1, t0, &mut stats), None);
        // Not a server failure: other build-ids are still asked in the same window.
        assert!(f.available(1, t0));
        assert_eq!(f.fetch(b"aa", "/a", 2, t0, &mut stats), None);
        assert_eq!(
            asked.load(Ordering::SeqCst),
            1,
            "the failed build-id was asked again"
        );
        assert_eq!(
            f.fetch(b"bb", "/b", 2, t0, &mut stats),
            Some(PathBuf::from("/d"))
        );
        let later = t0 + Duration::from_secs(601);
        assert_eq!(
            f.fetch(b"aa", "/a", 3, later, &mut stats),
            Some(PathBuf::from("/e"))
        );
        assert_eq!(asked.load(Ordering::SeqCst), 3);
    }
}
