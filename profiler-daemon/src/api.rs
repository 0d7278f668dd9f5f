//! The HTTP API on a Unix socket: status, folded stacks of the history, Prometheus metrics.
//! Every request is authorized with the peer's credentials as they were at `connect(2)`
//! (SO_PEERCRED, SO_PEERGROUPS): root and the admin group see everything; any other user sees
//! only stacks of processes of their own uid, without kernel frames.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use tokio::net::UnixListener;
use tokio::sync::Semaphore;

use crate::daemon::{unix_now_ns, Shared};
use crate::query::{self, Filter, QueryError, Visibility};

/// Who is asking: the peer's credentials at `connect(2)`.
#[derive(Clone, Debug)]
pub struct Peer {
    /// Effective uid (`u32::MAX` when it could not be read: such a peer sees nothing).
    pub uid: u32,
    /// Effective gid.
    pub gid: u32,
    /// Supplementary groups (empty when they could not be read).
    pub groups: Vec<u32>,
    /// Process id (logged only: it may be reused).
    pub pid: Option<i32>,
}

impl Connected<axum::serve::IncomingStream<'_, UnixListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, UnixListener>) -> Peer {
        let io = stream.io();
        match io.peer_cred() {
            Ok(cred) => Peer {
                uid: cred.uid(),
                gid: cred.gid(),
                groups: crate::sys::peer_groups(io).unwrap_or_default(),
                pid: cred.pid(),
            },
            Err(err) => {
                tracing::warn!(%err, "cannot read a peer's credentials; it will see nothing");
                Peer {
                    uid: u32::MAX,
                    gid: u32::MAX,
                    groups: Vec::new(),
                    pid: None,
                }
            }
        }
    }
}

/// What the API handlers share.
pub struct ApiState {
    /// The daemon's shared state.
    pub shared: Arc<Shared>,
    /// The admin group's gid, if one is configured (changes on reload).
    pub admin_gid: Arc<crate::reload::GroupId>,
    /// Bounds concurrent queries.
    pub queries: Semaphore,
    /// On-demand recordings.
    pub recordings: crate::recording::Recordings,
}

impl ApiState {
    /// Whether `peer` sees everything.
    pub fn is_admin(&self, peer: &Peer) -> bool {
        peer.uid == 0
            || self
                .admin_gid
                .get()
                .is_some_and(|g| peer.gid == g || peer.groups.contains(&g))
    }

    /// What `peer` may see.
    pub fn visibility(&self, peer: &Peer) -> Visibility {
        if self.is_admin(peer) {
            Visibility::All
        } else {
            Visibility::OwnOnly(peer.uid)
        }
    }
}

/// A group name or number, resolved through `/etc/group` (no NSS lookups in the daemon).
pub fn resolve_group(group: &str) -> Result<u32> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    let text = std::fs::read_to_string("/etc/group").context("reading /etc/group")?;
    for line in text.lines() {
        let mut fields = line.split(':');
        if fields.next() == Some(group) {
            if let Some(gid) = fields.nth(1).and_then(|g| g.parse().ok()) {
                return Ok(gid);
            }
        }
    }
    bail!("no group {group:?} in /etc/group")
}

/// Bind the API socket at `path`: its directory is created if missing; a socket left by a
/// daemon that is gone is replaced, one that answers is an error; mode 0666, or 0660 and
/// owned by `group` when set.
pub fn bind(path: &Path, group: Option<u32>) -> Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the socket's directory {}", dir.display()))?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            bail!("{} exists and is not a socket", path.display());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!("another profilerd answers on {}", path.display());
        }
        std::fs::remove_file(path)
            .with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    let mode = if group.is_some() { 0o660 } else { 0o666 };
    if let Some(gid) = group {
        std::os::unix::fs::chown(path, None, Some(gid))
            .with_context(|| format!("giving {} to group {gid}", path.display()))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", path.display()))?;
    Ok(listener)
}

/// The API's routes.
pub fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .route("/v1/status", get(status))
        .route("/v1/folded", get(folded))
        .route("/metrics", get(metrics))
        .merge(crate::recording::routes())
        .with_state(state)
}

/// `GET /v1/status`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Status {
    /// profilerd's version.
    pub version: String,
    /// The event sampled on (`cycles` or `cpu-clock`).
    pub event: String,
    /// CPUs sampled.
    pub cpus: usize,
    /// Samples per second per CPU.
    pub frequency: u64,
    /// Whether kernel frames are sampled.
    pub kernel: bool,
    /// Slice length, seconds.
    pub slice_seconds: f64,
    /// Whether the drain loop reported within the last 5 s.
    pub sampling: bool,
    /// Seconds since start.
    pub uptime_seconds: f64,
    /// Samples read since start.
    pub samples: u64,
    /// Samples the kernel dropped since start.
    pub lost: u64,
    /// Slices named since start.
    pub slices_named: u64,
    /// Slices dropped because naming fell behind.
    pub slices_dropped: u64,
    /// Slices waiting to be named.
    pub naming_backlog: u64,
    /// Slices written since start.
    pub slices_written: u64,
    /// Failed writes (full disk) since start.
    pub write_errors: u64,
    /// Slices kept in memory until the disk takes them.
    pub slices_unwritten: u64,
    /// Slice files found corrupt or truncated (skipped) since start.
    pub corrupt_slices: u64,
    /// Slices on disk.
    pub slices_kept: usize,
    /// Bytes of slices on disk.
    pub bytes_kept: u64,
    /// End of the newest slice on disk, UNIX ns (0: none).
    pub newest_slice_end_ns: u64,
    /// Processes tracked by the process model.
    pub processes: usize,
    /// Threads tracked.
    pub threads: usize,
    /// Files mapped by tracked processes.
    pub files: usize,
    /// Binaries held open.
    pub pinned_files: usize,
    /// Open symbolizers.
    pub symbolizers: usize,
    /// Their estimated bytes.
    pub symbolizer_bytes: u64,
    /// Resident memory of the daemon, bytes (ring buffers are not resident memory).
    pub resident_bytes: u64,
    /// The daemon's CPU time since start, seconds.
    pub cpu_seconds: f64,
    /// The overhead budget: what it sees and did.
    #[serde(flatten)]
    pub budget: crate::budget::BudgetStatus,
    /// The asking user.
    pub peer_uid: u32,
    /// Whether the asking user sees everything.
    pub peer_is_admin: bool,
}

fn status_of(state: &ApiState, peer: &Peer) -> Status {
    let s = &state.shared;
    let (slices_kept, bytes_kept) = s.store.totals();
    let tracked = s.tracked.lock().map(|t| *t).unwrap_or_default();
    let symbols = s.symbols.lock().map(|t| *t).unwrap_or_default();
    let c = &s.store.counters;
    Status {
        version: env!("CARGO_PKG_VERSION").to_string(),
        event: s.event.to_string(),
        cpus: s.cpus,
        frequency: s.frequency(),
        kernel: s.config.sampling.kernel,
        slice_seconds: s.config.sampling.slice.0.as_secs_f64(),
        sampling: s.drain_alive(Duration::from_secs(5)),
        uptime_seconds: unix_now_ns().saturating_sub(s.started_ns) as f64 / 1e9,
        samples: s.samples.load(Ordering::Relaxed),
        lost: s.lost.load(Ordering::Relaxed),
        slices_named: s.slices_named.load(Ordering::Relaxed),
        slices_dropped: s.slices_dropped.load(Ordering::Relaxed),
        naming_backlog: s.naming_backlog.load(Ordering::Relaxed),
        slices_written: c.written.load(Ordering::Relaxed),
        write_errors: c.write_errors.load(Ordering::Relaxed),
        slices_unwritten: s.unwritten.load(Ordering::Relaxed),
        corrupt_slices: c.corrupt.load(Ordering::Relaxed),
        slices_kept,
        bytes_kept,
        newest_slice_end_ns: s.store.newest_end(),
        processes: tracked.processes,
        threads: tracked.threads,
        files: tracked.files,
        pinned_files: tracked.pinned,
        symbolizers: symbols.symbolizers,
        symbolizer_bytes: symbols.symbolizer_bytes,
        resident_bytes: recorder::resident_bytes().unwrap_or(0),
        cpu_seconds: recorder::ProcessUsage::now().cpu().as_secs_f64(),
        budget: s.budget.status(&s.live().budget),
        peer_uid: peer.uid,
        peer_is_admin: state.is_admin(peer),
    }
}

async fn status(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Json<Status> {
    Json(status_of(&state, &peer))
}

/// Query parameters of `GET /v1/folded`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FoldedParams {
    /// Start: UNIX time in seconds (fractions allowed); negative: seconds before now.
    /// Default: 10 minutes before `until`.
    pub since: Option<f64>,
    /// End, as `since`. Default: now.
    pub until: Option<f64>,
    /// Only this process.
    pub pid: Option<u32>,
    /// Only threads with this command name.
    pub comm: Option<String>,
    /// Only processes of this user.
    pub uid: Option<u32>,
    /// With `pid`: also the processes it and its descendants created (`true`).
    pub descendants: Option<bool>,
    /// Only processes in this cgroup (v2 path) or under it.
    pub cgroup: Option<String>,
}

/// An error answer: `profilerd: MESSAGE`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, format!("profilerd: {}\n", message.into())).into_response()
}

/// A time parameter in UNIX ns.
fn time_ns(value: f64, now_ns: u64) -> Option<u64> {
    if !value.is_finite() {
        return None;
    }
    if value < 0.0 {
        return Some(now_ns.saturating_sub((-value * 1e9) as u64));
    }
    Some((value * 1e9) as u64)
}

async fn folded(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    params: Result<Query<FoldedParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(params)) = params else {
        return error(
            StatusCode::BAD_REQUEST,
            "bad query: expected since, until (UNIX seconds, or negative: seconds ago), pid, descendants (true or false), comm, uid, cgroup",
        );
    };
    if peer.uid == u32::MAX {
        return error(StatusCode::FORBIDDEN, "unknown peer");
    }
    let now = unix_now_ns();
    let config = state.shared.live();
    let api = &config.api;
    let until = match params.until.map(|v| time_ns(v, now)) {
        None => now,
        Some(Some(t)) => t,
        Some(None) => return error(StatusCode::BAD_REQUEST, "bad until"),
    };
    let since = match params.since.map(|v| time_ns(v, now)) {
        None => until.saturating_sub(600_000_000_000),
        Some(Some(t)) => t,
        Some(None) => return error(StatusCode::BAD_REQUEST, "bad since"),
    };
    if since >= until {
        return error(StatusCode::BAD_REQUEST, "since must be before until");
    }
    let max_range = api.max_range.0;
    if until - since > max_range.as_nanos() as u64 {
        return error(
            StatusCode::BAD_REQUEST,
            format!("the time range is longer than {max_range:?} (api.max_range)"),
        );
    }
    let filter = Filter {
        pid: params.pid,
        descendants: params.descendants.unwrap_or(false),
        comm: params.comm,
        uid: params.uid,
        cgroup: params.cgroup,
    };
    if let Err(message) = filter.check() {
        return error(StatusCode::BAD_REQUEST, message);
    }
    let Ok(_permit) = state.queries.try_acquire() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many queries at once; try again",
        );
    };
    let visibility = state.visibility(&peer);
    let bounds = query::Bounds {
        max_bytes: api.max_response_bytes.0,
        timeout: api.request_timeout.0,
        deadline: Instant::now() + api.request_timeout.0,
    };
    let store = Arc::clone(&state.shared.store);
    let started = Instant::now();
    let answer = tokio::task::spawn_blocking(move || {
        query::folded(&store, since, until, &filter, visibility, &bounds)
    })
    .await;
    let folded = match answer {
        Ok(Ok(f)) => f,
        Ok(Err(e @ QueryError::TooLarge(_))) => {
            return error(StatusCode::PAYLOAD_TOO_LARGE, e.to_string())
        }
        Ok(Err(e @ QueryError::TooSlow(_))) => {
            return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "the query failed"),
    };
    tracing::debug!(
        uid = peer.uid,
        pid = peer.pid,
        slices = folded.slices,
        samples = folded.samples,
        ms = started.elapsed().as_millis() as u64,
        "folded query"
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    for (name, value) in [
        ("x-profilerd-slices", folded.slices),
        ("x-profilerd-skipped-slices", folded.skipped),
        ("x-profilerd-samples", folded.samples),
        ("x-profilerd-since-ns", since),
        ("x-profilerd-until-ns", until),
        (
            "x-profilerd-frequency",
            folded.frequency.unwrap_or(state.shared.frequency()),
        ),
        (
            "x-profilerd-kernel-frames",
            (visibility == Visibility::All && state.shared.config.sampling.kernel) as u64,
        ),
    ] {
        headers.insert(name, HeaderValue::from(value));
    }
    headers.insert(
        "x-profilerd-event",
        HeaderValue::from_str(&state.shared.event.to_string())
            .unwrap_or(HeaderValue::from_static("unknown")),
    );
    (StatusCode::OK, headers, folded.text).into_response()
}

async fn metrics(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Response {
    metrics_response(&state, &peer)
}

/// `/metrics` (the Unix socket's and the scrape listener's).
pub fn metrics_response(state: &ApiState, peer: &Peer) -> Response {
    let s = status_of(state, peer);
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = writeln!(
            out,
            "# HELP profilerd_{name} {help}\n# TYPE profilerd_{name} {kind}\nprofilerd_{name} {value}"
        );
    };
    metric(
        "samples_total",
        "counter",
        "Samples read.",
        s.samples as f64,
    );
    metric(
        "lost_samples_total",
        "counter",
        "Samples the kernel dropped.",
        s.lost as f64,
    );
    metric(
        "slices_named_total",
        "counter",
        "Slices named.",
        s.slices_named as f64,
    );
    metric(
        "slices_dropped_total",
        "counter",
        "Slices dropped because naming fell behind.",
        s.slices_dropped as f64,
    );
    metric(
        "slices_written_total",
        "counter",
        "Slices written.",
        s.slices_written as f64,
    );
    metric(
        "write_errors_total",
        "counter",
        "Slice writes that failed.",
        s.write_errors as f64,
    );
    metric(
        "corrupt_slices_total",
        "counter",
        "Slice files found corrupt or truncated.",
        s.corrupt_slices as f64,
    );
    metric(
        "slices_kept",
        "gauge",
        "Slices on disk.",
        s.slices_kept as f64,
    );
    metric(
        "slice_bytes_kept",
        "gauge",
        "Bytes of slices on disk.",
        s.bytes_kept as f64,
    );
    metric(
        "naming_backlog",
        "gauge",
        "Slices waiting to be named.",
        s.naming_backlog as f64,
    );
    metric(
        "processes_tracked",
        "gauge",
        "Processes tracked.",
        s.processes as f64,
    );
    metric(
        "frequency_hertz",
        "gauge",
        "Samples per second per CPU.",
        s.frequency as f64,
    );
    metric(
        "resident_memory_bytes",
        "gauge",
        "Resident memory.",
        s.resident_bytes as f64,
    );
    metric(
        "cpu_seconds_total",
        "counter",
        "CPU time used.",
        s.cpu_seconds,
    );
    metric(
        "sampling",
        "gauge",
        "1 while the drain loop runs.",
        s.sampling as u8 as f64,
    );
    crate::budget::metrics(&s.budget, &mut metric);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

/// Serve `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: UnixListener,
    state: Arc<ApiState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        router(state).into_make_service_with_connect_info::<Peer>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
