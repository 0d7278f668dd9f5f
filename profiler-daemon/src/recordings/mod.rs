//! On-demand recordings of one process: the manager behind `POST /v1/recordings`,
//! `GET /v1/recordings/ID` (and `/folded`, `/pprof`), `POST /v1/recordings/ID/stop` and
//! `DELETE /v1/recordings/ID` (the handlers: `http/recordings.rs`). Knows users by uid, not by
//! connection.
//!
//! Each recording runs on perf events and a thread of its own (the recorder's per-process
//! mode: the process's threads, and the processes it creates while recording, followed by the
//! kernel's inherit), at the frequency asked, for exactly the duration asked, and is named by
//! a symbol service of its own when it ends. Not served from the daemon's stream: that one
//! runs at the daemon's frequency (99 Hz by default, too coarse for a few seconds of one
//! process) and is kept in slices (10 s), which a recording of a few seconds would not line up
//! with. Bounded by `[recordings]` (`max_concurrent`, `max_duration`, `max_frequency`).
//!
//! Access: any user may record a process whose effective uid is theirs (read at request time
//! through a pidfd, so that a pid reused meanwhile is refused, and checked again once the
//! events are open); root and the admin group any process. A user's recording has no kernel
//! frames (the kernel is not sampled) and keeps only stacks of processes of their uid (a
//! set-uid child is left out).

mod thread;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::access::Visibility;
use crate::config::Config;
use crate::filter::Filter;
use crate::folding::Folding;
use crate::measure::MeasureSlices;
use crate::slice::Slice;
use crate::state::{unix_now_ns, Shared};

use thread::{run, uid_of};

/// Finished recordings kept per user for them to fetch; past this the user's oldest is
/// dropped (never another user's).
const FINISHED_PER_USER: usize = 4;

/// How long a finished recording is kept.
const FINISHED_FOR: Duration = Duration::from_secs(600);

/// Longest `?wait=` on a recording's status.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// The recordings, running and finished.
#[derive(Default)]
pub struct Recordings {
    next_id: AtomicU64,
    table: Mutex<HashMap<u64, Arc<Entry>>>,
}

/// One recording.
struct Entry {
    id: u64,
    owner: u32,
    request: RecordingRequest,
    kernel: bool,
    visibility: Visibility,
    started_ns: u64,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    state: Mutex<Phase>,
    done: tokio::sync::Notify,
    /// The recording's events are open.
    sampling: std::sync::atomic::AtomicBool,
    finished_at: Mutex<Option<Instant>>,
}

/// Where a recording is. A finished one's outcome is shared: readers clone it under the state
/// lock and render it after releasing the lock, so that a render (seconds for a large result)
/// never holds up the status, inserts and removals that take the lock on the API's thread.
enum Phase {
    Running,
    Done(Arc<Outcome>),
    Failed(String),
}

/// What a finished recording holds.
struct Outcome {
    slice: Slice,
    /// What time the slice's stacks hold.
    measure: Measure,
    samples_read: u64,
    /// Samples (µs for off-CPU and wall-clock time) of the recorded processes the requester
    /// may not see: not theirs as the kernel judges who may trace a process.
    samples_hidden: u64,
    lost: u64,
    event: String,
    frequency: u64,
    seconds: f64,
    stopped_early: bool,
    truncated: bool,
}

pub use crate::measure::Measure;
/// The request, status and states of a recording, as profctl and profilerd exchange them.
pub use daemon_api::recording::{RecordingRequest, RecordingState, RecordingStatus};

/// Who asks: a uid, and whether it sees everything.
#[derive(Clone, Copy, Debug)]
pub struct Requester {
    /// Effective uid.
    pub uid: u32,
    /// Root or the admin group.
    pub admin: bool,
}

/// Why a recording was not started.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// A value out of range (the message says which and what was expected).
    #[error("{0}")]
    OutOfRange(String),
    /// No such process (or it exited).
    #[error("no process {0}")]
    NoProcess(u32),
    /// Another user's process, and the requester is not an admin.
    #[error("process {0} is not yours: you may record only your own processes")]
    NotYours(u32),
    /// `recordings.max_concurrent` are running (or, for a user, all but the one kept for
    /// admins).
    #[error("{0} recordings are running (recordings.max_concurrent); try again when one ends")]
    Busy(usize),
    /// The user has `recordings.max_per_user` running.
    #[error("you have {0} recordings running (recordings.max_per_user); try again when one ends")]
    BusyYours(usize),
}

/// Why a recording's result is not given.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// No such recording, or not the requester's.
    #[error("no recording {0}")]
    NotFound(u64),
    /// Still running.
    #[error("recording {0} is still running")]
    Running(u64),
    /// It failed.
    #[error("recording {0} failed: {1}")]
    Failed(u64, String),
    /// Its answer would be larger than allowed.
    #[error("the answer is larger than {0} bytes (api.max_response_bytes)")]
    TooLarge(u64),
}

/// What `DELETE` did.
#[derive(Debug)]
pub enum Removal {
    /// No such recording, or not the requester's.
    NotFound,
    /// It was running: stopped (or stopping); its result is named and kept.
    Stopping(Box<RecordingStatus>),
    /// Finished: forgotten.
    Removed,
}

/// A finished recording's folded stacks, with what they were sampled at.
#[derive(Debug)]
pub struct FoldedResult {
    /// Folded lines, sorted.
    pub text: String,
    /// The frequency in effect.
    pub frequency: u64,
    /// The event sampled on.
    pub event: String,
    /// Seconds sampled.
    pub seconds: f64,
}

impl Entry {
    fn status(&self) -> RecordingStatus {
        let r = &self.request;
        let mut status = RecordingStatus {
            id: self.id,
            state: RecordingState::Running,
            pid: r.pid,
            frequency: r.frequency.unwrap_or(0),
            duration: r.duration.unwrap_or(0.0),
            descendants: r.descendants,
            kernel: self.kernel,
            started_ns: self.started_ns,
            samples: None,
            samples_read: None,
            samples_hidden: None,
            lost: None,
            event: None,
            frequency_used: None,
            seconds: None,
            stopped_early: None,
            truncated: None,
            error: None,
            sampling: self.sampling.load(std::sync::atomic::Ordering::Relaxed),
        };
        let phase = match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            Phase::Running => None,
            Phase::Done(o) => Some(Ok(Arc::clone(o))),
            Phase::Failed(e) => Some(Err(e.clone())),
        };
        match phase {
            None => {}
            Some(Ok(o)) => {
                status.state = RecordingState::Done;
                status.samples = Some(o.slice.samples());
                status.samples_read = Some(o.samples_read);
                status.samples_hidden = Some(o.samples_hidden);
                status.lost = Some(o.lost);
                status.event = Some(o.event.clone());
                status.frequency_used = Some(o.frequency);
                status.seconds = Some(o.seconds);
                status.stopped_early = Some(o.stopped_early);
                status.truncated = Some(o.truncated);
            }
            Some(Err(e)) => {
                status.state = RecordingState::Failed;
                status.error = Some(e);
            }
        }
        status
    }

    fn running(&self) -> bool {
        matches!(
            *self.state.lock().unwrap_or_else(|e| e.into_inner()),
            Phase::Running
        )
    }

    /// Tell the recording to stop, if it still runs and was not told yet (its result is then
    /// named and kept); whether this call told it.
    fn ask_to_stop(&self) -> bool {
        let stop = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        stop.map(|stop| stop.send(())).is_some()
    }

    fn finish(&self, state: Phase) {
        self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
        *self.finished_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.done.notify_waiters();
    }
}

impl Recordings {
    /// Drop finished recordings past their time, and each user's past [`FINISHED_PER_USER`].
    fn expire(table: &mut HashMap<u64, Arc<Entry>>) {
        let finished_at = |e: &Entry| *e.finished_at.lock().unwrap_or_else(|e| e.into_inner());
        table.retain(|_, e| finished_at(e).is_none_or(|t| t.elapsed() < FINISHED_FOR));
        let mut finished: Vec<(u32, Instant, u64)> = table
            .values()
            .filter_map(|e| Some((e.owner, finished_at(e)?, e.id)))
            .collect();
        // Newest first per owner: each owner's past the first FINISHED_PER_USER go.
        finished.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let mut kept = 0;
        for (i, (owner, _, id)) in finished.iter().enumerate() {
            kept = if i > 0 && finished[i - 1].0 == *owner {
                kept + 1
            } else {
                1
            };
            if kept > FINISHED_PER_USER {
                table.remove(id);
            }
        }
    }

    /// The recording `id` if `who` may see it (its owner, or an admin).
    fn get(&self, id: u64, who: Requester) -> Option<Arc<Entry>> {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        Recordings::expire(&mut table);
        table
            .get(&id)
            .filter(|e| who.admin || e.owner == who.uid)
            .cloned()
    }

    /// Stop every running recording (their results are still named and kept).
    pub fn stop_all(&self) {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        for e in table.values() {
            e.ask_to_stop();
        }
    }

    /// Start recording `request` for `who` with the daemon's configuration in effect; returns
    /// the new recording's status.
    pub fn start(
        &self,
        shared: &Shared,
        request: RecordingRequest,
        who: Requester,
    ) -> Result<RecordingStatus, Refused> {
        let config = shared.live();
        let frequency = request.frequency.unwrap_or(shared.frequency());
        let duration = check_limits(&config, frequency, request.duration)?;
        let pid = request.pid;
        let pidfd = crate::sys::pidfd_open(pid).map_err(|_| Refused::NoProcess(pid))?;
        let uid = uid_of(pid, &pidfd).ok_or(Refused::NoProcess(pid))?;
        if !who.admin && uid != who.uid {
            return Err(Refused::NotYours(pid));
        }
        let kernel = who.admin && request.kernel.unwrap_or(true) && config.sampling.kernel;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let visibility = Visibility::of(who.uid, who.admin);
        let entry = self.insert(&config.recordings, who, |id| Entry {
            id,
            owner: who.uid,
            request: RecordingRequest {
                frequency: Some(frequency),
                duration: Some(duration.as_secs_f64()),
                kernel: Some(kernel),
                ..request
            },
            kernel,
            visibility,
            started_ns: unix_now_ns(),
            stop: Mutex::new(Some(stop_tx)),
            state: Mutex::new(Phase::Running),
            done: tokio::sync::Notify::new(),
            sampling: std::sync::atomic::AtomicBool::new(false),
            finished_at: Mutex::new(None),
        })?;
        let thread_entry = Arc::clone(&entry);
        let event = shared.event;
        let spawned = std::thread::Builder::new()
            .name(format!("recording-{}", entry.id))
            .spawn(move || {
                let outcome = run(&config, event, &thread_entry, duration, pidfd, stop_rx);
                thread_entry.finish(match outcome {
                    Ok(o) => Phase::Done(Arc::new(o)),
                    Err(e) => Phase::Failed(e),
                });
            });
        if let Err(err) = spawned {
            entry.finish(Phase::Failed(format!("cannot start a thread: {err}")));
        }
        tracing::info!(
            id = entry.id,
            pid,
            frequency,
            seconds = duration.as_secs_f64(),
            peer_uid = who.uid,
            "recording started"
        );
        Ok(entry.status())
    }

    /// Keep the recording `make` makes with the next id, unless `limits` are reached: a user
    /// may run `max_per_user`, and all users together all of `max_concurrent` but one (kept
    /// for admins, when there are two or more).
    fn insert(
        &self,
        limits: &crate::config::Recordings,
        who: Requester,
        make: impl FnOnce(u64) -> Entry,
    ) -> Result<Arc<Entry>, Refused> {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        Recordings::expire(&mut table);
        let running = table.values().filter(|e| e.running()).count();
        let max = limits.max_concurrent.0;
        if running >= max || (!who.admin && running >= max - usize::from(max >= 2)) {
            return Err(Refused::Busy(running));
        }
        let own = table
            .values()
            .filter(|e| e.owner == who.uid && e.running())
            .count();
        if !who.admin && own >= limits.max_per_user.0 {
            return Err(Refused::BusyYours(own));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = Arc::new(make(id));
        table.insert(id, Arc::clone(&entry));
        Ok(entry)
    }

    /// The status of recording `id`, after waiting up to `wait` for it to end.
    pub async fn status(
        &self,
        id: u64,
        who: Requester,
        wait: Option<Duration>,
    ) -> Option<RecordingStatus> {
        let entry = self.get(id, who)?;
        if let Some(wait) = wait {
            let done = entry.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if entry.running() {
                let _ = tokio::time::timeout(wait, done).await;
            }
        }
        Some(entry.status())
    }

    /// What `with` makes of the finished recording `id`, run after the entry's lock is
    /// released (on a clone of the outcome taken under it).
    fn result<T>(
        &self,
        id: u64,
        who: Requester,
        with: impl FnOnce(&Outcome) -> T,
    ) -> Result<T, Unavailable> {
        let entry = self.get(id, who).ok_or(Unavailable::NotFound(id))?;
        let outcome = match &*entry.state.lock().unwrap_or_else(|e| e.into_inner()) {
            Phase::Running => return Err(Unavailable::Running(id)),
            Phase::Failed(e) => return Err(Unavailable::Failed(id, e.clone())),
            Phase::Done(o) => Arc::clone(o),
        };
        Ok(with(&outcome))
    }

    /// The finished recording's folded stacks (counts in samples), unless their text would
    /// pass `max_bytes`. Blocking work: called off the API's thread.
    pub fn folded(
        &self,
        id: u64,
        who: Requester,
        max_bytes: u64,
    ) -> Result<FoldedResult, Unavailable> {
        self.result(id, who, |o| {
            let mut folding = Folding::new(max_bytes);
            folding
                .add_slice(&o.slice, &Filter::default(), Visibility::All)
                .map_err(|_| Unavailable::TooLarge(max_bytes))?;
            let mut text = String::with_capacity(folding.bytes() as usize);
            for (line, totals) in folding.lines() {
                let _ = writeln!(text, "{line} {}", totals.samples);
            }
            Ok(FoldedResult {
                text,
                frequency: o.frequency,
                event: o.event.clone(),
                seconds: o.seconds,
            })
        })?
    }

    /// The finished recording as a pprof file (gzipped).
    pub fn pprof(&self, id: u64, who: Requester) -> Result<Vec<u8>, Unavailable> {
        // The slice's time per stack is the time off CPU (or wall-clock): its sample type
        // says so.
        self.result(id, who, |o| o.measure.pprof_bytes(&o.slice))
    }

    /// Stop recording `id` if it runs (its result is named and kept); one that ended is left
    /// as it is. Its status, or `None` when `who` has no such recording.
    pub fn stop(&self, id: u64, who: Requester) -> Option<RecordingStatus> {
        let entry = self.get(id, who)?;
        entry.ask_to_stop();
        Some(entry.status())
    }

    /// Stop recording `id` if it runs; forget it if it ended.
    pub fn remove(&self, id: u64, who: Requester) -> Removal {
        let Some(entry) = self.get(id, who) else {
            return Removal::NotFound;
        };
        // Running (stopped now, or before): its result is named and kept.
        if entry.ask_to_stop() || entry.running() {
            return Removal::Stopping(Box::new(entry.status()));
        }
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        Removal::Removed
    }
}

/// The frequency and duration asked, checked against `[recordings]`; the duration to record.
fn check_limits(
    config: &Config,
    frequency: u64,
    duration: Option<f64>,
) -> Result<Duration, Refused> {
    let limits = &config.recordings;
    if frequency == 0 || frequency > limits.max_frequency.0 {
        return Err(Refused::OutOfRange(format!(
            "frequency {frequency} is out of range: expected 1 to {} Hz (recordings.max_frequency)",
            limits.max_frequency.0
        )));
    }
    let max = limits.max_duration.0;
    match duration {
        None => Ok(max),
        Some(d) if d.is_finite() && d > 0.0 && d <= max.as_secs_f64() => {
            Ok(Duration::from_secs_f64(d))
        }
        Some(d) => Err(Refused::OutOfRange(format!(
            "duration {d} is out of range: expected more than 0 and at most {} s (recordings.max_duration)",
            max.as_secs()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user's running recording in `recordings`, with `stop` as its stop sender.
    fn running(
        recordings: &Recordings,
        who: Requester,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
    ) -> Arc<Entry> {
        let limits = crate::config::Recordings::default();
        recordings
            .insert(&limits, who, |id| Entry {
                id,
                owner: who.uid,
                request: RecordingRequest::default(),
                kernel: false,
                visibility: Visibility::of(who.uid, who.admin),
                started_ns: 0,
                stop: Mutex::new(stop),
                state: Mutex::new(Phase::Running),
                done: tokio::sync::Notify::new(),
                sampling: std::sync::atomic::AtomicBool::new(false),
                finished_at: Mutex::new(None),
            })
            .unwrap()
    }

    /// The user the tests' recordings belong to.
    const USER: Requester = Requester {
        uid: 1000,
        admin: false,
    };

    #[test]
    fn a_result_is_rendered_without_its_entrys_lock() {
        let recordings = Recordings::default();
        let who = USER;
        let entry = running(&recordings, who, None);
        entry.finish(Phase::Done(Arc::new(Outcome {
            slice: crate::slice::tests::example(0),
            measure: Measure::Cpu,
            samples_read: 38,
            samples_hidden: 0,
            lost: 0,
            event: "cpu-clock".into(),
            frequency: 99,
            seconds: 1.0,
            stopped_early: false,
            truncated: false,
        })));
        // While a result renders, the status, inserts and removals (which take the entry's
        // lock on the API's thread) are not held up.
        let free = recordings
            .result(entry.id, who, |_| entry.state.try_lock().is_ok())
            .unwrap();
        assert!(free, "the entry's lock was held while rendering");
        assert_eq!(entry.status().samples, Some(38));
        assert!(recordings.pprof(entry.id, who).is_ok());
    }

    #[test]
    fn stopping_a_recording_that_ended_keeps_its_result() {
        let recordings = Recordings::default();
        let who = USER;
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel();
        let entry = running(&recordings, who, Some(stop_tx));
        // Running: stopped.
        let status = recordings.stop(entry.id, who).expect("the recording");
        assert_eq!(status.state, RecordingState::Running);
        assert!(stop_rx.try_recv().is_ok(), "the recording was told to stop");
        // It ended (its process exited) before a second stop arrived: kept, as the stop
        // found it, where DELETE would have forgotten it.
        entry.finish(Phase::Failed("ended".into()));
        let status = recordings.stop(entry.id, who).expect("kept");
        assert_eq!(status.state, RecordingState::Failed);
        assert!(recordings.get(entry.id, who).is_some());
        let stranger = Requester {
            uid: USER.uid + 1,
            ..USER
        };
        assert!(recordings.stop(entry.id, stranger).is_none());
        assert!(matches!(recordings.remove(entry.id, who), Removal::Removed));
        assert!(recordings.stop(entry.id, who).is_none());
    }
}
