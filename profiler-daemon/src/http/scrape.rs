//! The opt-in TCP listener for pprof scrapers (`--pprof-listen ADDR:PORT`, `[scrape]`):
//! `GET /debug/pprof/profile?seconds=N` with the semantics of Go's `net/http/pprof` (seconds
//! default 30, gzipped pprof as `application/octet-stream`), and `/metrics`. Nothing else is
//! served there: never the control API.
//!
//! A profile is answered from the daemon's stream with Go's semantics: exactly the `seconds`
//! from the request to the answer. At the request the open slices are named (`store/open.rs`;
//! a snapshot taken within the last second, another scrape's or a query's, is shared) and the
//! window starts when that snapshot was taken; after `seconds` they are named again,
//! and the answer is every slice overlapping the window (files and open slices, merged) less
//! what the slice being filled at the start already held then. Any number of scrapers share
//! the one stream: a scrape opens no perf event. The `seconds` are waited out holding no
//! place; `scrape.max_concurrent` bounds the merges at once (a scrape waits for a place at
//! most `api.request_timeout`). `past=1`
//! answers at once with the latest `seconds` (the slices with at least half their length in
//! them, the open ones included). `pid` (with `descendants=true`), `comm`, `uid` and `cgroup`
//! narrow it.
//! Whoever reaches the listener sees the whole machine, kernel frames included: a token is
//! required (`scrape.token_file`; requests without `Authorization: Bearer TOKEN` get 401)
//! unless `scrape.allow_unauthenticated` is set on a loopback address (the configuration is
//! refused otherwise). The `Host` header must be an IP address or `localhost` (a page that
//! makes a browser ask through a DNS name it controls gets 403), connections are capped
//! (`scrape.max_connections`) and closed when idle (`api.idle_timeout`), and names are
//! served sanitized as in folded output.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::access::Visibility;
use crate::filter::Filter;
use crate::http::answer::Held;
use crate::http::common::error;
use crate::http::conn;
use crate::http::limits::{Caps, Limiter};
use crate::http::status::metrics_response;
use crate::query;
use crate::slice::Slice;
use crate::state::{unix_now_ns, Shared};
use crate::store::open::{Querier, FRESH_LAG};
use crate::store::{SliceMeta, Store};

/// Go's default `seconds`.
const DEFAULT_SECONDS: u64 = 30;

/// What the scrape handlers share.
pub struct ScrapeState {
    /// The daemon's shared state (status, store, the configuration in effect).
    pub shared: Arc<Shared>,
    /// The bearer token asked of every request, if one is configured.
    pub token: Option<String>,
    /// Bounds profiles merged at once (`scrape.max_concurrent`): taken after a profile's
    /// window, for its merge, not for the `seconds` waited out.
    pub profiles: Arc<Semaphore>,
    /// Connections open.
    pub connections: Arc<Limiter>,
}

/// The token in `path` (surrounding whitespace removed); an empty file is an error.
pub fn read_token(path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading scrape.token_file {}", path.display()))?;
    let token = text.trim().to_string();
    if token.is_empty() {
        anyhow::bail!("scrape.token_file {} is empty", path.display());
    }
    Ok(token)
}

/// Bind the listener at `addr` and serve until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    state: Arc<ScrapeState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<std::io::Result<()>>> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the scrape listener on {addr}"))?;
    if !addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "the scrape listener is not on loopback: whoever has the token sees every process's profile"
        );
    }
    if state.token.is_none() {
        tracing::warn!(
            %addr,
            "the scrape listener asks no token (scrape.allow_unauthenticated): every local user sees every process's profile"
        );
    }
    tracing::info!(%addr, token = state.token.is_some(), "scrape listener started");
    Ok(tokio::spawn(accept_loop(listener, state, shutdown)))
}

/// Accept connections within `scrape.max_connections` until `shutdown` resolves.
async fn accept_loop(
    listener: TcpListener,
    state: Arc<ScrapeState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(Arc::clone(&state));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (stream, from) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(err) => {
                    tracing::debug!(%err, "scrape accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let config = state.shared.live();
        let caps = Caps::connections(config.scrape.max_connections.0, usize::MAX);
        let Some(slot) = state.connections.admit(None, false, caps) else {
            tracing::debug!(%from, "scrape connection refused: too many open");
            conn::refuse_tcp(&stream);
            continue;
        };
        tokio::spawn(conn::serve_one(
            stream,
            app.clone(),
            from,
            config.api.idle_timeout.0,
            slot,
            stop_rx.clone(),
        ));
    }
    let _ = stop_tx.send(true);
    Ok(())
}

/// The listener's routes: `/debug/pprof/`, `/debug/pprof/profile`, `/metrics`.
pub fn router(state: Arc<ScrapeState>) -> Router {
    Router::new()
        .route("/debug/pprof/", get(index))
        .route("/debug/pprof/profile", get(profile))
        .route("/metrics", get(metrics))
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "not served here: /debug/pprof/profile and /metrics only",
            )
        })
        .with_state(state)
}

/// Whether a `Host` header names this listener the way only a local client or a configured
/// scraper does: an IP address or `localhost`, with or without a port (a DNS name could be
/// rebound to this address by a web page).
fn host_allowed(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, rest)) if rest.is_empty() || rest.starts_with(':') => addr,
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        },
    };
    name.parse::<std::net::IpAddr>().is_ok() || name.eq_ignore_ascii_case("localhost")
}

/// 403 unless the `Host` header is allowed ([`host_allowed`]); 401 unless the request
/// carries the configured token.
fn authorize(state: &ScrapeState, headers: &HeaderMap) -> Result<(), Box<Response>> {
    if let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().unwrap_or("");
        if !host_allowed(host) {
            return Err(Box::new(error(
                StatusCode::FORBIDDEN,
                "the Host header must be an IP address or localhost",
            )));
        }
    }
    let Some(token) = &state.token else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    // Compared in time independent of where they differ.
    let same = given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if same {
        Ok(())
    } else {
        Err(Box::new(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "profilerd: a bearer token is required (Authorization: Bearer TOKEN)\n",
            )
                .into_response(),
        ))
    }
}

async fn index(State(state): State<Arc<ScrapeState>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&state, &headers) {
        return *r;
    }
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "profilerd: /debug/pprof/profile?seconds=N (CPU, whole machine; past=1: from kept history; pid, descendants, comm, uid, cgroup narrow it)\n",
    )
        .into_response()
}

async fn metrics(State(state): State<Arc<ScrapeState>>, headers: HeaderMap) -> Response {
    if let Err(r) = authorize(&state, &headers) {
        return *r;
    }
    // The token holder sees every process: the per-uid series too.
    metrics_response(&state.shared, true)
}

/// The profile's parameters, parsed leniently for `seconds` as Go does.
struct ProfileParams {
    seconds: u64,
    past: bool,
    filter: Filter,
}

fn params(raw: &HashMap<String, String>) -> Result<ProfileParams, String> {
    let known = [
        "seconds",
        "past",
        "pid",
        "descendants",
        "comm",
        "uid",
        "cgroup",
    ];
    if let Some(k) = raw.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!(
            "unknown parameter {k:?}: expected {}",
            known.join(", ")
        ));
    }
    // Go: a missing, unparsable or non-positive value means 30.
    let seconds = raw
        .get("seconds")
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|&s| s > 0)
        .map_or(DEFAULT_SECONDS, |s| s as u64);
    let flag = |key: &str| -> Result<bool, String> {
        match raw.get(key).map(String::as_str) {
            None | Some("0") | Some("false") => Ok(false),
            Some("1") | Some("true") | Some("") => Ok(true),
            Some(other) => Err(format!("{key}={other:?}: expected 1 or 0")),
        }
    };
    let number = |key: &str| -> Result<Option<u32>, String> {
        raw.get(key)
            .map(|v| {
                v.parse()
                    .map_err(|_| format!("{key}={v:?}: expected a number"))
            })
            .transpose()
    };
    let filter = Filter {
        pid: number("pid")?,
        descendants: flag("descendants")?,
        comm: raw.get("comm").cloned(),
        uid: number("uid")?,
        cgroup: raw.get("cgroup").cloned(),
        // Scrapes are CPU profiles.
        measure: crate::measure::Measure::Cpu,
    };
    filter.check()?;
    Ok(ProfileParams {
        seconds,
        past: flag("past")?,
        filter,
    })
}

/// The slices that stand for `[t0, t1)`: those with at least half their length in it; when
/// none has, the one with the most.
pub fn covering(slices: &[SliceMeta], t0: u64, t1: u64) -> Vec<SliceMeta> {
    let overlap = |m: &SliceMeta| m.end_ns.min(t1).saturating_sub(m.start_ns.max(t0));
    let kept: Vec<SliceMeta> = slices
        .iter()
        .filter(|m| 2 * overlap(m) >= m.end_ns.saturating_sub(m.start_ns).max(1))
        .cloned()
        .collect();
    if !kept.is_empty() {
        return kept;
    }
    slices
        .iter()
        .filter(|m| overlap(m) > 0)
        .max_by_key(|m| overlap(m))
        .cloned()
        .into_iter()
        .collect()
}

/// What a profile stands for: its time range, and the open slice as it stood at the start
/// (taken away from the answer).
struct Window {
    since_ns: u64,
    until_ns: u64,
    base: Option<Arc<Slice>>,
}

/// The profile's window: the latest `seconds` (`past`), or the next `seconds`, waited out
/// from when the open slices were named at the request. Dropped (and so stopped) when the
/// client goes away.
async fn window(shared: &Shared, p: &ProfileParams) -> Window {
    let length = p.seconds * 1_000_000_000;
    if p.past {
        let now = unix_now_ns();
        return Window {
            since_ns: now.saturating_sub(length),
            until_ns: now,
            base: None,
        };
    }
    let store = Arc::clone(&shared.store);
    // A snapshot taken within FRESH_LAG (another scrape's or a query's) is the window's start
    // as well as one taken for this request.
    let start = tokio::task::spawn_blocking(move || store.open_slices(Querier::Scrape, FRESH_LAG))
        .await
        .ok()
        .flatten();
    let since_ns = start.as_ref().map_or_else(unix_now_ns, |s| s.taken_ns);
    let until_ns = since_ns + length;
    let left = until_ns.saturating_sub(unix_now_ns());
    tokio::time::sleep(Duration::from_nanos(left)).await;
    Window {
        since_ns,
        until_ns,
        base: start.and_then(|s| s.filling().cloned()),
    }
}

/// The merged profile of `window`, within `bounds`, gzipped.
fn answer(
    store: &Store,
    window: &Window,
    past: bool,
    filter: &Filter,
    bounds: &query::Bounds,
    layout_labels: bool,
) -> Result<(Vec<u8>, query::Folded), query::QueryError> {
    let _release = query::ReleaseMemory;
    let (t0, t1) = (window.since_ns, window.until_ns);
    let (slices, base) = if past {
        let selection = store.select_for(Querier::Scrape, t0, t1);
        (covering(&selection.slices, t0, t1), None)
    } else {
        // Every sample up to the window's end: the open slices named after it.
        let selection = store.select_within(Querier::Scrape, t0, t1, Duration::ZERO);
        // The slice being filled at the start is taken away as it stood then, if it is read.
        let base = window.base.as_ref().filter(|b| {
            selection
                .slices
                .iter()
                .any(|m| m.start_ns <= b.start_ns + 1_000_000 && b.start_ns < m.end_ns)
        });
        (selection.slices, base)
    };
    let (mut slice, mut counts) =
        query::merged(store, &slices, (t0, t1), filter, Visibility::All, bounds)?;
    if let Some(base) = base {
        counts.samples -= crate::subtract::subtract(&mut slice, base, filter, Visibility::All);
    }
    if !past {
        // Exactly the window, as Go's profile says.
        slice.start_ns = t0;
        slice.end_ns = t1;
    }
    if !layout_labels {
        slice.drop_layout_labels();
    }
    Ok((slice.encode(), counts))
}

async fn profile(
    State(state): State<Arc<ScrapeState>>,
    headers: HeaderMap,
    Query(raw): Query<HashMap<String, String>>,
) -> Response {
    if let Err(r) = authorize(&state, &headers) {
        return *r;
    }
    let p = match params(&raw) {
        Ok(p) => p,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let shared = Arc::clone(&state.shared);
    let config = shared.live();
    let max = config.scrape.max_seconds.0;
    if p.seconds > max.as_secs() {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "profile duration exceeds the server's limit of {} s (scrape.max_seconds)",
                max.as_secs()
            ),
        );
    }
    // The window is waited out holding no place: what a waiting scrape holds is its
    // connection (`scrape.max_connections`) and the snapshot it started from.
    let window = window(&shared, &p).await;
    // Read after the wait: a reload meanwhile applies.
    let api = shared.live().api.clone();
    // The merge takes a place, waiting for one at most `api.request_timeout`.
    let places = Arc::clone(&state.profiles);
    let permit = match tokio::time::timeout(api.request_timeout.0, places.acquire_owned()).await {
        Ok(Ok(permit)) => permit,
        _ => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many profiles at once (scrape.max_concurrent); try again",
            )
        }
    };
    let mut bounds = query::Bounds::from_api(&api);
    // Dropped with this handler when the client goes away: the merge then stops.
    let (cancel, _cancel_on_drop) = query::Cancel::new();
    bounds.cancel = cancel;
    bounds.querier = Querier::Scrape;
    let store = Arc::clone(&shared.store);
    let (filter, past) = (p.filter, p.past);
    let layout_labels = shared.live().scrape.layout_labels;
    let answer = tokio::task::spawn_blocking(move || {
        // The place is held until the blocking work ends, then until the answer is sent.
        answer(&store, &window, past, &filter, &bounds, layout_labels).map(|a| (permit, a))
    })
    .await;
    let (permit, (bytes, counts)) = match answer {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return e.into_response(),
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "the profile failed"),
    };
    tracing::debug!(
        seconds = p.seconds,
        past = p.past,
        slices = counts.slices,
        samples = counts.samples,
        "scrape answered"
    );
    (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"profile\"".to_string(),
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
            (
                header::HeaderName::from_static(daemon_api::header::SLICES),
                counts.slices.to_string(),
            ),
            (
                header::HeaderName::from_static(daemon_api::header::SAMPLES),
                counts.samples.to_string(),
            ),
        ],
        Held::body(bytes, permit),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(start: u64, end: u64) -> SliceMeta {
        SliceMeta {
            start_ns: start,
            end_ns: end,
            bytes: 1,
            ..SliceMeta::default()
        }
    }

    #[test]
    fn slices_with_half_their_length_in_the_window_stand_for_it() {
        let slices = [meta(0, 10), meta(10, 20), meta(20, 30), meta(30, 40)];
        assert_eq!(covering(&slices, 12, 31), vec![meta(10, 20), meta(20, 30)]);
        assert_eq!(covering(&slices, 15, 35), slices[1..4].to_vec());
        // A window shorter than half a slice: the slice holding most of it.
        assert_eq!(covering(&slices, 21, 23), vec![meta(20, 30)]);
        assert!(covering(&slices, 50, 60).is_empty());
    }

    #[test]
    fn parameters_follow_go_and_refuse_unknown_ones() {
        let raw = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(params(&raw(&[])).unwrap().seconds, 30);
        assert_eq!(params(&raw(&[("seconds", "-4")])).unwrap().seconds, 30);
        assert_eq!(params(&raw(&[("seconds", "x")])).unwrap().seconds, 30);
        assert_eq!(params(&raw(&[("seconds", "2")])).unwrap().seconds, 2);
        let p = params(&raw(&[("pid", "7"), ("descendants", "1"), ("past", "1")])).unwrap();
        assert!(p.past && p.filter.descendants && p.filter.pid == Some(7));
        assert!(params(&raw(&[("debug", "1")])).is_err());
        assert!(params(&raw(&[("descendants", "1")])).is_err());
        assert!(params(&raw(&[("cgroup", "x")])).is_err());
    }

    #[test]
    fn only_addresses_and_localhost_are_allowed_hosts() {
        for ok in [
            "127.0.0.1",
            "127.0.0.1:6060",
            "[::1]:6060",
            "[::1]",
            "localhost:6060",
            "10.1.2.3:80",
        ] {
            assert!(host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example:6060",
            "evil.example",
            "[::1]x",
            "127.0.0.1.nip.io",
        ] {
            assert!(!host_allowed(bad), "{bad}");
        }
    }
}
