//! On-demand recordings of one process: `POST /v1/recordings`, `GET /v1/recordings/ID` (and
//! `/folded`, `/pprof`), `DELETE /v1/recordings/ID`.
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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::api::{error, ApiState, Peer};
use crate::daemon::{unix_now_ns, Shared};
use crate::filter::{Filter, Visibility};
use crate::slice::Slice;

/// Finished recordings kept for their owners to fetch; past this the oldest is dropped.
const FINISHED_KEPT: usize = 16;

/// How long a finished recording is kept.
const FINISHED_FOR: Duration = Duration::from_secs(600);

/// Longest `?wait=` on a recording's status.
const MAX_WAIT: Duration = Duration::from_secs(60);

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
    request: Request,
    kernel: bool,
    visibility: Visibility,
    started_ns: u64,
    stop: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    state: Mutex<Phase>,
    done: tokio::sync::Notify,
    finished_at: Mutex<Option<Instant>>,
}

enum Phase {
    Running,
    Done(Box<Outcome>),
    Failed(String),
}

/// What a finished recording holds.
struct Outcome {
    slice: Slice,
    samples_read: u64,
    lost: u64,
    event: String,
    frequency: u64,
    seconds: f64,
    stopped_early: bool,
}

/// `POST /v1/recordings` body.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The process to record.
    pub pid: u32,
    /// Samples per second (default: the daemon's frequency).
    #[serde(default)]
    pub frequency: Option<u64>,
    /// Seconds to record (fractions allowed; default and most: `recordings.max_duration`).
    #[serde(default)]
    pub duration: Option<f64>,
    /// Keep the processes the process creates while recording (as `profctl record --pid`
    /// does); without it only the process's own threads.
    #[serde(default)]
    pub descendants: bool,
    /// Sample kernel frames (root and the admin group only; default true for them).
    #[serde(default)]
    pub kernel: Option<bool>,
}

/// `GET /v1/recordings/ID`.
#[derive(Debug, Serialize)]
pub struct RecordingStatus {
    /// The recording's id.
    pub id: u64,
    /// `running`, `done` or `failed`.
    pub state: &'static str,
    /// The process.
    pub pid: u32,
    /// Frequency asked.
    pub frequency: u64,
    /// Duration asked, seconds.
    pub duration: f64,
    /// Whether descendants are kept.
    pub descendants: bool,
    /// Whether kernel frames are sampled.
    pub kernel: bool,
    /// Start, UNIX ns.
    pub started_ns: u64,
    /// When done: samples in the result.
    pub samples: Option<u64>,
    /// When done: samples read (before the selection).
    pub samples_read: Option<u64>,
    /// When done: samples the kernel dropped.
    pub lost: Option<u64>,
    /// When done: the event sampled on.
    pub event: Option<String>,
    /// When done: the frequency in effect.
    pub frequency_used: Option<u64>,
    /// When done: seconds sampled.
    pub seconds: Option<f64>,
    /// When done: whether it was stopped before its duration (DELETE, or the process exited).
    pub stopped_early: Option<bool>,
    /// When failed: why.
    pub error: Option<String>,
}

impl Entry {
    fn status(&self) -> RecordingStatus {
        let r = &self.request;
        let mut status = RecordingStatus {
            id: self.id,
            state: "running",
            pid: r.pid,
            frequency: r.frequency.unwrap_or(0),
            duration: r.duration.unwrap_or(0.0),
            descendants: r.descendants,
            kernel: self.kernel,
            started_ns: self.started_ns,
            samples: None,
            samples_read: None,
            lost: None,
            event: None,
            frequency_used: None,
            seconds: None,
            stopped_early: None,
            error: None,
        };
        match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            Phase::Running => {}
            Phase::Done(o) => {
                status.state = "done";
                status.samples = Some(o.slice.samples());
                status.samples_read = Some(o.samples_read);
                status.lost = Some(o.lost);
                status.event = Some(o.event.clone());
                status.frequency_used = Some(o.frequency);
                status.seconds = Some(o.seconds);
                status.stopped_early = Some(o.stopped_early);
            }
            Phase::Failed(e) => {
                status.state = "failed";
                status.error = Some(e.clone());
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

    fn finish(&self, state: Phase) {
        self.stop.lock().unwrap_or_else(|e| e.into_inner()).take();
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
        *self.finished_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.done.notify_waiters();
    }
}

impl Recordings {
    /// Drop finished recordings past their time or past [`FINISHED_KEPT`].
    fn expire(table: &mut HashMap<u64, Arc<Entry>>) {
        let finished_at = |e: &Entry| *e.finished_at.lock().unwrap_or_else(|e| e.into_inner());
        table.retain(|_, e| finished_at(e).is_none_or(|t| t.elapsed() < FINISHED_FOR));
        let mut finished: Vec<(Instant, u64)> = table
            .values()
            .filter_map(|e| Some((finished_at(e)?, e.id)))
            .collect();
        if finished.len() > FINISHED_KEPT {
            finished.sort();
            for (_, id) in &finished[..finished.len() - FINISHED_KEPT] {
                table.remove(id);
            }
        }
    }

    /// The recording `id` if `peer` may see it (its owner, or an admin).
    fn get(&self, id: u64, peer: &Peer, admin: bool) -> Option<Arc<Entry>> {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        Recordings::expire(&mut table);
        table
            .get(&id)
            .filter(|e| admin || e.owner == peer.uid)
            .cloned()
    }

    /// Stop every running recording (their results are still named and kept).
    pub fn stop_all(&self) {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        for e in table.values() {
            if let Some(stop) = e.stop.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = stop.send(());
            }
        }
    }
}

/// The recordings' routes.
pub fn routes() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/v1/recordings", post(create))
        .route("/v1/recordings/{id}", get(status).delete(remove))
        .route("/v1/recordings/{id}/folded", get(folded))
        .route("/v1/recordings/{id}/pprof", get(pprof))
}

/// The effective uid of the process a pidfd names (read through /proc, then the pidfd checked
/// again, so that a pid reused meanwhile is not taken for it). None: it exited.
fn uid_of(pid: u32, pidfd: &std::os::fd::OwnedFd) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    crate::sys::pidfd_alive(pidfd).then_some(uid)
}

async fn create(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    body: Result<Json<Request>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let Ok(Json(request)) = body else {
        return error(
            StatusCode::BAD_REQUEST,
            "bad request body: expected JSON {\"pid\": N, \"frequency\": HZ, \"duration\": SECONDS, \"descendants\": BOOL, \"kernel\": BOOL}",
        );
    };
    if peer.uid == u32::MAX {
        return error(StatusCode::FORBIDDEN, "unknown peer");
    }
    let shared = &state.shared;
    let limits = &shared.config.recordings;
    let frequency = request.frequency.unwrap_or(shared.frequency());
    if frequency == 0 || frequency > limits.max_frequency.0 {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "frequency {frequency} is out of range: expected 1 to {} Hz (recordings.max_frequency)",
                limits.max_frequency.0
            ),
        );
    }
    let max = limits.max_duration.0;
    let duration = match request.duration {
        None => max,
        Some(d) if d.is_finite() && d > 0.0 && d <= max.as_secs_f64() => Duration::from_secs_f64(d),
        Some(d) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("duration {d} is out of range: expected more than 0 and at most {} s (recordings.max_duration)", max.as_secs()),
            )
        }
    };
    let admin = state.is_admin(&peer);
    let pid = request.pid;
    let pidfd = match crate::sys::pidfd_open(pid) {
        Ok(fd) => fd,
        Err(_) => return error(StatusCode::NOT_FOUND, format!("no process {pid}")),
    };
    let Some(uid) = uid_of(pid, &pidfd) else {
        return error(StatusCode::NOT_FOUND, format!("no process {pid}"));
    };
    if !admin && uid != peer.uid {
        tracing::info!(
            peer_uid = peer.uid,
            peer_pid = peer.pid,
            pid,
            "recording refused: another user's process"
        );
        return error(
            StatusCode::FORBIDDEN,
            format!("process {pid} is not yours: you may record only your own processes"),
        );
    }
    let kernel = admin && request.kernel.unwrap_or(true) && shared.config.sampling.kernel;
    let visibility = if admin {
        Visibility::All
    } else {
        Visibility::OwnOnly(peer.uid)
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let entry = {
        let mut table = state
            .recordings
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Recordings::expire(&mut table);
        let running = table.values().filter(|e| e.running()).count();
        if running >= limits.max_concurrent.0 {
            return error(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "{running} recordings are running (recordings.max_concurrent); try again when one ends"
                ),
            );
        }
        let id = state.recordings.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = Arc::new(Entry {
            id,
            owner: peer.uid,
            request: Request {
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
            finished_at: Mutex::new(None),
        });
        table.insert(id, Arc::clone(&entry));
        entry
    };
    let thread_entry = Arc::clone(&entry);
    let thread_shared = Arc::clone(&state.shared);
    let spawned = std::thread::Builder::new()
        .name(format!("recording-{}", entry.id))
        .spawn(move || {
            let outcome = run(&thread_shared, &thread_entry, duration, pidfd, stop_rx);
            thread_entry.finish(match outcome {
                Ok(o) => Phase::Done(Box::new(o)),
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
        peer_uid = peer.uid,
        "recording started"
    );
    (
        StatusCode::CREATED,
        [(header::LOCATION, format!("/v1/recordings/{}", entry.id))],
        Json(entry.status()),
    )
        .into_response()
}

/// The recording thread: sample, name, select.
fn run(
    shared: &Shared,
    entry: &Entry,
    duration: Duration,
    pidfd: std::os::fd::OwnedFd,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<Outcome, String> {
    let request = &entry.request;
    let config = &shared.config;
    let mut options = crate::daemon::record_options(config, shared.event);
    options.target = recorder::RecordTarget::Pid(request.pid);
    options.frequency = request.frequency.unwrap_or(shared.frequency());
    options.duration = Some(duration);
    options.include_kernel = entry.kernel;
    options.window = None;
    options.drain_interval = Duration::from_millis(250);
    options.frame_cache_dir = None;
    options.ring_pages = match options.call_graph {
        recorder::CallGraph::Fp => sampler::defaults::RING_PAGES,
        _ => recorder::defaults::ring_pages_with_stacks(options.frequency, options.stack_bytes),
    };
    let service_options = recorder::ResolveOptions {
        debug_search: options
            .preload_symbols
            .clone()
            .unwrap_or_else(symbolize::DebugSearch::system),
        kernel_cache_dir: Some(config.storage.cache_dir.clone()),
        ..recorder::ResolveOptions::default()
    };
    let mut symbolizer = recorder::Symbolizer::new(service_options, None);
    let feed = symbolizer.feed();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let stopped = AtomicBool::new(false);
    // The first progress comes after the events were opened: if the process the request
    // named is gone by then, the events may be on a process that reused its pid.
    let mut checked = false;
    let vanished = AtomicBool::new(false);
    let mut progress = |_: recorder::Progress| {
        if !checked {
            checked = true;
            if !crate::sys::pidfd_alive(&pidfd) {
                vanished.store(true, Ordering::Relaxed);
            }
        }
    };
    let mut windows = Vec::new();
    let mut on_window = |w: recorder::ClosedWindow| windows.push(w);
    let recording = runtime.block_on(async {
        let stop = async {
            let _ = stop.await;
            stopped.store(true, Ordering::Relaxed);
        };
        recorder::record(&options, Some(&feed), stop, &mut progress, &mut on_window).await
    });
    let recording = recording.map_err(|e| format!("recording failed: {e}"))?;
    if vanished.load(Ordering::Relaxed) || (!checked && !crate::sys::pidfd_alive(&pidfd)) {
        // Not proven to be the process asked for: nothing is returned.
        if !checked {
            return Err(format!(
                "process {} exited before its events were checked; nothing recorded",
                request.pid
            ));
        }
        return Err(format!(
            "process {} exited before recording began; nothing recorded",
            request.pid
        ));
    }
    let period_ns = 1_000_000_000 / recording.frequency.max(1);
    let offset = unix_now_ns().saturating_sub(sampler::now_ns());
    let filter = Filter {
        pid: Some(request.pid),
        descendants: request.descendants,
        ..Filter::default()
    };
    let mut out = Slice {
        start_ns: entry.started_ns,
        end_ns: entry.started_ns + recording.duration.as_nanos() as u64,
        period_ns,
        ..Slice::default()
    };
    for closed in &windows {
        let (profile, stacks, _) = symbolizer.symbolize_stacks(&closed.window);
        let slice = crate::daemon::to_slice(
            &closed.window,
            &profile,
            &stacks,
            period_ns,
            shared.event,
            offset,
        );
        append(&mut out, slice, &filter, entry.visibility);
    }
    let elapsed = recording.duration.as_secs_f64();
    tracing::info!(
        id = entry.id,
        samples = out.samples(),
        seconds = elapsed,
        "recording done"
    );
    Ok(Outcome {
        samples_read: recording.stats.samples,
        lost: recording.stats.lost,
        event: recording.event.to_string(),
        frequency: recording.frequency,
        seconds: elapsed,
        stopped_early: stopped.load(Ordering::Relaxed) || elapsed + 0.5 < duration.as_secs_f64(),
        slice: out,
    })
}

/// Add the stacks of `slice` that `filter` and `visibility` admit to `out` (kernel frames
/// removed unless everything is visible).
fn append(out: &mut Slice, slice: Slice, filter: &Filter, visibility: Visibility) {
    let base = out.names.len() as u32;
    out.names.extend(slice.names);
    for mut s in slice.stacks {
        if !filter.admits(&s, visibility) {
            continue;
        }
        if visibility != Visibility::All {
            let keep = s.frames.len() - (s.kernel_frames as usize).min(s.frames.len());
            s.frames.truncate(keep);
            s.kernel_frames = 0;
        }
        for f in s.frames.iter_mut() {
            *f += base;
        }
        out.stacks.push(s);
    }
}

/// `?wait=SECONDS` on a recording's status: wait until it is done, at most that long.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitParams {
    /// Seconds to wait for the recording to end (at most 60).
    pub wait: Option<f64>,
}

fn not_found(id: u64) -> Response {
    error(StatusCode::NOT_FOUND, format!("no recording {id}"))
}

async fn status(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
    params: Result<Query<WaitParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(params)) = params else {
        return error(StatusCode::BAD_REQUEST, "bad query: expected wait=SECONDS");
    };
    let Some(entry) = state.recordings.get(id, &peer, state.is_admin(&peer)) else {
        return not_found(id);
    };
    if let Some(wait) = params.wait.filter(|w| w.is_finite() && *w > 0.0) {
        let wait = Duration::from_secs_f64(wait).min(MAX_WAIT);
        let done = entry.done.notified();
        tokio::pin!(done);
        done.as_mut().enable();
        if entry.running() {
            let _ = tokio::time::timeout(wait, done).await;
        }
    }
    Json(entry.status()).into_response()
}

/// The finished recording's result, or the answer to give instead.
fn result<T>(
    state: &ApiState,
    peer: &Peer,
    id: u64,
    with: impl FnOnce(&Outcome) -> T,
) -> Result<T, Box<Response>> {
    let Some(entry) = state.recordings.get(id, peer, state.is_admin(peer)) else {
        return Err(Box::new(not_found(id)));
    };
    let guard = entry.state.lock().unwrap_or_else(|e| e.into_inner());
    match &*guard {
        Phase::Running => Err(Box::new(error(
            StatusCode::CONFLICT,
            format!("recording {id} is still running"),
        ))),
        Phase::Failed(e) => Err(Box::new(error(
            StatusCode::GONE,
            format!("recording {id} failed: {e}"),
        ))),
        Phase::Done(o) => Ok(with(o)),
    }
}

async fn folded(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
) -> Response {
    let text = result(&state, &peer, id, |o| {
        let mut lines = HashMap::new();
        crate::query::add_slice(&mut lines, &o.slice, &Filter::default(), Visibility::All);
        let mut sorted: Vec<(String, u64)> = lines.into_iter().collect();
        sorted.sort_unstable();
        let mut text = String::new();
        for (line, count) in sorted {
            text.push_str(&line);
            text.push(' ');
            text.push_str(&count.to_string());
            text.push('\n');
        }
        (text, o.frequency, o.event.clone(), o.seconds)
    });
    match text {
        Ok((text, frequency, event, seconds)) => (
            [
                (
                    header::CONTENT_TYPE,
                    "text/plain; charset=utf-8".to_string(),
                ),
                (
                    header::HeaderName::from_static("x-profilerd-frequency"),
                    frequency.to_string(),
                ),
                (header::HeaderName::from_static("x-profilerd-event"), event),
                (
                    header::HeaderName::from_static("x-profilerd-seconds"),
                    format!("{seconds:.3}"),
                ),
            ],
            text,
        )
            .into_response(),
        Err(r) => *r,
    }
}

async fn pprof(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
) -> Response {
    match result(&state, &peer, id, |o| crate::scrape::encode_pprof(&o.slice)) {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(r) => *r,
    }
}

async fn remove(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
) -> Response {
    let Some(entry) = state.recordings.get(id, &peer, state.is_admin(&peer)) else {
        return not_found(id);
    };
    if let Some(stop) = entry.stop.lock().unwrap_or_else(|e| e.into_inner()).take() {
        // Running: stopped; its result is named and kept.
        let _ = stop.send(());
        return (StatusCode::ACCEPTED, Json(entry.status())).into_response();
    }
    if entry.running() {
        return (StatusCode::ACCEPTED, Json(entry.status())).into_response();
    }
    state
        .recordings
        .table
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&id);
    StatusCode::NO_CONTENT.into_response()
}
