//! `GET /v1/folded`: folded stacks of a time range of the history, filtered, and limited to
//! what the asking user may see.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::connect_info::ConnectInfo;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use daemon_api::history::{
    from_query, BadQuery, RangeParams, MAX_WIDTH_PERCENT, MIN_WIDTH_PERCENT,
};
use daemon_api::{header as name, TimeParam};

use crate::access::Visibility;
use crate::config::Config;
use crate::filter::Filter;
use crate::http::answer::Held;
use crate::http::common::{error, ApiState, Peer};
use crate::http::limits::Slot;
use crate::measure::Measure;
use crate::query::{self, Folded};
use crate::state::unix_now_ns;
use crate::store::open::Querier;

/// `[since, until)` of a query, in UNIX ns, or why it is refused: `until` defaults to now,
/// `since` to 10 minutes before `until`, a time ago is resolved with the daemon's clock.
pub fn range(
    since: Option<TimeParam>,
    until: Option<TimeParam>,
    config: &Config,
) -> Result<(u64, u64), String> {
    let now = unix_now_ns();
    let until = until.map_or(now, |t| t.resolve(now));
    let since = since.map_or(until.saturating_sub(600_000_000_000), |t| t.resolve(now));
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
/// caller may see, a query slot (held until the blocking work ends: move it into that work,
/// and from there into the answer's body, `answer::Held`, which holds it until sent),
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

/// Accept a history query of `peer` for `since`..`until` and `filter`: a known peer, a valid range and filter, a free query slot; else the answer
/// that says why not.
pub fn accept(
    state: &ApiState,
    peer: &Peer,
    (since, until): (Option<TimeParam>, Option<TimeParam>),
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
            filter.measure
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

/// The range and filter `params` ask for.
pub fn split(params: RangeParams) -> ((Option<TimeParam>, Option<TimeParam>), Filter) {
    let filter = Filter {
        pid: params.pid,
        descendants: params.descendants,
        comm: params.comm,
        uid: params.uid,
        cgroup: params.cgroup,
        measure: params.measure.unwrap_or_default(),
    };
    ((params.since, params.until), filter)
}

/// What the range and filter parameters take, for the answer to a query string that cannot
/// be read.
pub const RANGE_PARAMETERS: &str = "since, until (@UNIX-SECONDS, or -DURATION: that long before now, e.g. -600 or -10m; a time before 1970 is refused), pid, descendants (true or false), comm, uid, cgroup, measure (cpu, off_cpu or wall)";

/// The answer to a query string that cannot be read: what is wrong (the parameter named), and
/// what the route takes (`expected`).
pub fn bad_query(why: &BadQuery, expected: &str) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        format!("bad query: {why}; expected {expected}"),
    )
}

/// The range and filter of a `/v1/folded` or `/v1/pprof` query string, or the answer that
/// says what is wrong with it.
pub fn range_params(query: Option<&str>) -> Result<RangeParams, Box<Response>> {
    from_query(query.unwrap_or_default()).map_err(|why| {
        Box::new(bad_query(
            &why,
            &format!("{RANGE_PARAMETERS}, minwidth (folded only: percent)"),
        ))
    })
}

/// `minwidth` (percent) as a fraction, or the answer refusing it.
fn min_share(percent: f64) -> Result<f64, Box<Response>> {
    if !(MIN_WIDTH_PERCENT..=MAX_WIDTH_PERCENT).contains(&percent) {
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            format!(
                "minwidth must be from {MIN_WIDTH_PERCENT} to {MAX_WIDTH_PERCENT} (percent of the samples)"
            ),
        )));
    }
    Ok(percent / 100.0)
}

/// `GET /v1/folded`.
pub async fn folded(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    RawQuery(query): RawQuery,
) -> Response {
    let params = match range_params(query.as_deref()) {
        Ok(params) => params,
        Err(refused) => return *refused,
    };
    let minwidth = match params.minwidth.map(min_share).transpose() {
        Ok(minwidth) => minwidth,
        Err(refused) => return *refused,
    };
    let (range, filter) = split(params);
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
        // The slot is held until the blocking work ends (not released when the client goes
        // away), then until the answer is sent.
        (
            slot,
            query::folded_as(
                &store,
                (since, until),
                &filter,
                visibility,
                &bounds,
                minwidth,
            ),
        )
    })
    .await;
    let (slot, folded) = match answer {
        Ok((slot, Ok(f))) => (slot, f),
        Ok((_, Err(e))) => return e.into_response(),
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "the query failed"),
    };
    tracing::debug!(
        uid = peer.uid,
        pid = peer.pid,
        slices = folded.slices,
        samples = folded.samples,
        bytes = folded.text.len(),
        min_width = folded.min_width,
        ms = started.elapsed().as_millis() as u64,
        "folded query"
    );
    let kernel = visibility == Visibility::All && config.sampling.kernel;
    let mut headers = headers(
        &state,
        &folded,
        (since, until),
        kernel,
        "text/plain; charset=utf-8",
    );
    if let Some(min) = folded.min_width {
        headers.insert(name::MIN_WIDTH_SAMPLES, HeaderValue::from(min));
        headers.insert(name::MERGED_FRAMES, HeaderValue::from(folded.merged_frames));
    }
    let body = Held::body(folded.text.into_bytes(), slot);
    (StatusCode::OK, headers, body).into_response()
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
        (name::SLICES, folded.slices),
        (name::SKIPPED_SLICES, folded.skipped),
        (name::SAMPLES, folded.samples),
        (name::SINCE_NS, since),
        (name::UNTIL_NS, until),
        (
            name::FREQUENCY,
            folded.frequency.unwrap_or(state.shared.frequency()),
        ),
        (name::KERNEL_FRAMES, kernel as u64),
        (name::OPEN_SLICES, folded.open),
        (name::COMPLETE_UNTIL_NS, folded.complete_until_ns),
    ] {
        headers.insert(name, HeaderValue::from(value));
    }
    // What the counts are: `cpu` (samples), `off_cpu` or `wall` (microseconds).
    headers.insert(
        name::MEASURE,
        HeaderValue::from_static(folded.measure.as_str()),
    );
    headers.insert(
        name::EVENT,
        HeaderValue::from_str(&state.shared.event.to_string())
            .unwrap_or(HeaderValue::from_static("unknown")),
    );
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer `range_params` gives for `query`: its status and body.
    fn refused(query: &str) -> (StatusCode, String) {
        let response = *range_params(Some(query)).expect_err(query);
        let status = response.status();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let body = runtime
            .block_on(axum::body::to_bytes(response.into_body(), 1 << 20))
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[test]
    fn a_time_before_the_epoch_is_refused_naming_its_parameter() {
        let (status, body) = refused("since=%40-3600");
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(
            body.starts_with("profilerd: bad query: since: \"@-3600\" is before 1970-01-01"),
            "{body}"
        );
        let (_, body) = refused("since=%401700000000&until=%40-1");
        assert!(body.contains("until: \"@-1\" is before 1970"), "{body}");
        let (_, body) = refused("since=yesterday");
        assert!(
            body.contains("since: \"yesterday\" is not a time"),
            "{body}"
        );
    }

    #[test]
    fn minwidth_is_a_percent_within_its_bounds() {
        assert_eq!(min_share(0.1).unwrap(), 0.001);
        for bad in [0.0, -1.0, 50.5, f64::NAN, f64::INFINITY] {
            let status = min_share(bad).map(|_| ()).unwrap_err().status();
            assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        }
    }

    #[test]
    fn older_clients_forms_keep_their_meaning() {
        let params = range_params(Some("since=-600&until=1700000000.5")).unwrap();
        let now = 1_800_000_000_000_000_000;
        assert_eq!(params.since.unwrap().resolve(now), now - 600_000_000_000);
        assert_eq!(
            params.until.unwrap().resolve(now),
            1_700_000_000_500_000_000
        );
        // Huge and odd times saturate or are refused.
        let params = range_params(Some("since=-1e20&until=1e20")).unwrap();
        assert_eq!(params.since.unwrap().resolve(now), 0);
        assert_eq!(params.until.unwrap().resolve(now), u64::MAX);
        assert!(range_params(Some("since=NaN")).is_err());
        assert_eq!(range_params(None).unwrap(), RangeParams::default());
    }
}
