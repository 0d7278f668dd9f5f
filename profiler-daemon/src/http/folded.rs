//! `GET /v1/folded`: folded stacks of a time range of the history, filtered, and limited to
//! what the asking user may see.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::access::Visibility;
use crate::config::Config;
use crate::filter::Filter;
use crate::http::common::{error, ApiState, Peer};
use crate::http::limits::Slot;
use crate::measure::Measure;
use crate::query::{self, Folded};
use crate::state::unix_now_ns;
use crate::store::open::Querier;

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
    /// `cpu` (default), `off_cpu` or `wall` (needs `[sampling] off_cpu`): counts are then
    /// microseconds.
    pub measure: Option<Measure>,
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

/// `[since, until)` of a query (`since`, `until` as [`FoldedParams`] takes them), in UNIX
/// ns, or why it is refused.
pub fn range(
    since: Option<f64>,
    until: Option<f64>,
    config: &Config,
) -> Result<(u64, u64), String> {
    let now = unix_now_ns();
    let until = match until.map(|v| time_ns(v, now)) {
        None => now,
        Some(Some(t)) => t,
        Some(None) => return Err("bad until".into()),
    };
    let since = match since.map(|v| time_ns(v, now)) {
        None => until.saturating_sub(600_000_000_000),
        Some(Some(t)) => t,
        Some(None) => return Err("bad since".into()),
    };
    if since >= until {
        return Err("since must be before until".into());
    }
    let max_range = config.api.max_range.0;
    if until - since > max_range.as_nanos() as u64 {
        return Err(format!(
            "the time range is longer than {max_range:?} (api.max_range)"
        ));
    }
    Ok((since, until))
}

/// A history query (folded, pprof, timeline) once accepted: its range, filter and what the
/// caller may see, a query slot (held until the blocking work ends: move it into that work),
/// and bounds whose cancel flag is set when `cancel_on_drop`, kept by the handler, is dropped
/// with it (the client went away).
pub struct Accepted {
    /// The configuration in effect.
    pub config: Arc<Config>,
    /// `[since, until)`, UNIX ns.
    pub range: (u64, u64),
    /// What the query selects.
    pub filter: Filter,
    /// What the caller may see.
    pub visibility: Visibility,
    /// The caller's query slot.
    pub slot: Slot,
    /// Size, time and cancellation bounds.
    pub bounds: query::Bounds,
    /// Sets the bounds' cancel flag when dropped.
    pub cancel_on_drop: query::CancelOnDrop,
}

/// Accept a history query of `peer` for `since`..`until` (as [`FoldedParams`] takes them)
/// and `filter`: a known peer, a valid range and filter, a free query slot; else the answer
/// that says why not.
pub fn accept(
    state: &ApiState,
    peer: &Peer,
    (since, until): (Option<f64>, Option<f64>),
    filter: Filter,
) -> Result<Accepted, Box<Response>> {
    let bad = |message: String| Box::new(error(StatusCode::BAD_REQUEST, message));
    if peer.uid == u32::MAX {
        return Err(Box::new(error(StatusCode::FORBIDDEN, "unknown peer")));
    }
    let config = state.shared.live();
    let range = range(since, until, &config).map_err(bad)?;
    filter.check().map_err(bad)?;
    if filter.measure != Measure::Cpu && !config.sampling.off_cpu {
        return Err(bad(format!(
            "measure={}: this profilerd keeps no off-CPU time in its history; set `off_cpu = true` under [sampling] in its configuration (and restart it), or record a process with `profctl record --off-cpu|--wall`",
            filter.measure.sample_type()
        )));
    }
    let slot = state
        .admit_query(peer, &config.api)
        .map_err(|refused| Box::new(refused.into_response()))?;
    let mut bounds = query::Bounds::from_api(&config.api);
    let (cancel, cancel_on_drop) = query::Cancel::new();
    bounds.cancel = cancel;
    bounds.querier = Querier::User(peer.uid);
    Ok(Accepted {
        visibility: state.visibility(peer),
        config,
        range,
        filter,
        slot,
        bounds,
        cancel_on_drop,
    })
}

impl FoldedParams {
    /// The range and filter asked for.
    pub fn split(self) -> ((Option<f64>, Option<f64>), Filter) {
        let filter = Filter {
            pid: self.pid,
            descendants: self.descendants.unwrap_or(false),
            comm: self.comm,
            uid: self.uid,
            cgroup: self.cgroup,
            measure: self.measure.unwrap_or_default(),
        };
        ((self.since, self.until), filter)
    }
}

/// The answer to a query string `FoldedParams` cannot hold (`/v1/folded`, `/v1/pprof`).
pub const BAD_FOLDED_QUERY: &str = "bad query: expected since, until (UNIX seconds, or negative: seconds ago), pid, descendants (true or false), comm, uid, cgroup, measure (cpu, off_cpu or wall)";

/// `GET /v1/folded`.
pub async fn folded(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    params: Result<Query<FoldedParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(params)) = params else {
        return error(StatusCode::BAD_REQUEST, BAD_FOLDED_QUERY);
    };
    let (range, filter) = params.split();
    let Accepted {
        config,
        range: (since, until),
        filter,
        visibility,
        slot,
        bounds,
        cancel_on_drop: _cancel_on_drop,
    } = match accept(&state, &peer, range, filter) {
        Ok(accepted) => accepted,
        Err(refused) => return *refused,
    };
    let store = Arc::clone(&state.shared.store);
    let started = Instant::now();
    let answer = tokio::task::spawn_blocking(move || {
        // The slot is held until the blocking work ends, not until the client goes away.
        let _slot = slot;
        query::folded(&store, since, until, &filter, visibility, &bounds)
    })
    .await;
    let folded = match answer {
        Ok(Ok(f)) => f,
        Ok(Err(e)) => return e.into_response(),
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
    let kernel = visibility == Visibility::All && config.sampling.kernel;
    let headers = headers(
        &state,
        &folded,
        (since, until),
        kernel,
        "text/plain; charset=utf-8",
    );
    (StatusCode::OK, headers, folded.text).into_response()
}

/// The answer's headers: what was read, the range, the frequency and event, whether kernel
/// frames are in it.
pub(super) fn headers(
    state: &ApiState,
    folded: &Folded,
    (since, until): (u64, u64),
    kernel: bool,
    content_type: &'static str,
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
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
        ("x-profilerd-kernel-frames", kernel as u64),
        ("x-profilerd-open-slices", folded.open),
        ("x-profilerd-complete-until-ns", folded.complete_until_ns),
    ] {
        headers.insert(name, HeaderValue::from(value));
    }
    // What the counts are: `cpu` (samples), `off_cpu` or `wall` (microseconds).
    headers.insert(
        "x-profilerd-measure",
        HeaderValue::from_static(folded.measure.sample_type()),
    );
    headers.insert(
        "x-profilerd-event",
        HeaderValue::from_str(&state.shared.event.to_string())
            .unwrap_or(HeaderValue::from_static("unknown")),
    );
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_and_odd_times_saturate_or_are_refused() {
        let now = 1_700_000_000_000_000_000;
        assert_eq!(time_ns(1e20, now), Some(u64::MAX));
        assert_eq!(time_ns(-1e20, now), Some(0));
        assert_eq!(time_ns(f64::NAN, now), None);
        assert_eq!(time_ns(-10.0, now), Some(now - 10_000_000_000));
    }
}
