//! Snapshots of the windows still open: another thread asks, the drain loop wakes at once,
//! reads every ring, and hands each open window on normalized as it stands (the window stays
//! open and goes on collecting; it closes as usual). What a long recording in windows needs to
//! answer "what happened in the last second?" before the window closes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A handle through which another thread asks a running recording for a snapshot of its open
/// windows ([`crate::RecordOptions::snapshots`]). Each open window is then handed to the
/// recording's window callback as a [`crate::ClosedWindow`] whose
/// [`snapshot`](crate::ClosedWindow::snapshot) is set, after a drain round started by the
/// request (not at the next tick).
#[derive(Clone, Debug, Default)]
pub struct SnapshotControl(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    /// A snapshot was asked and not taken yet.
    asked: AtomicBool,
    /// The recording's drain loop runs (requests are served).
    running: AtomicBool,
    /// Wakes the drain loop.
    wake: tokio::sync::Notify,
}

impl SnapshotControl {
    /// A handle for one recording.
    pub fn new() -> SnapshotControl {
        SnapshotControl::default()
    }

    /// Ask for a snapshot of the open windows; several requests before it is taken make one.
    /// False when no recording is draining (not started yet, or ended): nothing will come.
    pub fn request(&self) -> bool {
        if !self.0.running.load(Ordering::Acquire) {
            return false;
        }
        self.0.asked.store(true, Ordering::Release);
        self.0.wake.notify_one();
        true
    }

    /// Whether the recording's drain loop runs.
    pub fn running(&self) -> bool {
        self.0.running.load(Ordering::Acquire)
    }

    /// The request waiting, taken.
    pub(crate) fn take(&self) -> bool {
        self.0.asked.swap(false, Ordering::AcqRel)
    }

    pub(crate) fn set_running(&self, running: bool) {
        self.0.running.store(running, Ordering::Release);
    }

    /// What wakes the drain loop.
    pub(crate) fn waker(&self) -> &tokio::sync::Notify {
        &self.0.wake
    }
}

/// Marks a [`crate::ClosedWindow`] as a snapshot of a window still open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenSnapshot {
    /// When the snapshot was taken (CLOCK_MONOTONIC ns): the start of the drain round that
    /// read every ring, so the window holds every sample taken before it.
    pub taken: u64,
    /// The last window of this snapshot (the windows of one snapshot come one after the
    /// other, oldest first; a snapshot of no open window is one empty window, `last`).
    pub last: bool,
    /// The CPU time the drain thread spent normalizing the snapshot's windows: work done for
    /// whoever asked, not for sampling (a budget may count it apart).
    pub cpu: std::time::Duration,
}

#[cfg(test)]
mod tests {
    use super::SnapshotControl;

    #[test]
    fn requests_are_served_only_while_draining_and_several_make_one() {
        let control = SnapshotControl::new();
        assert!(!control.request(), "no recording drains yet");
        assert!(!control.take());
        control.set_running(true);
        assert!(control.request() && control.request());
        assert!(control.take(), "asked");
        assert!(!control.take(), "two requests, one snapshot");
        control.set_running(false);
        assert!(!control.request(), "the recording ended");
    }

    #[test]
    fn a_request_wakes_the_drain_loop_even_before_it_waits() {
        let control = SnapshotControl::new();
        control.set_running(true);
        control.request();
        // The permit is kept: the drain loop's next wait returns at once.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            tokio::time::timeout(
                std::time::Duration::from_secs(5),
                control.waker().notified(),
            )
            .await
            .expect("woken");
        });
    }
}
