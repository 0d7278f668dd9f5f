//! `GET /v1/pprof`: a time range of the history as one pprof profile (gzipped), with the
//! labels of the slices (pid, tid, comm, uid, process start, cgroup, ancestors); the
//! parameters, access rules and bounds of `/v1/folded`.

use std::sync::Arc;

use axum::extract::connect_info::ConnectInfo;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::access::Visibility;
use crate::http::answer::Held;
use crate::http::common::{error, ApiState, Peer};
use crate::http::folded::{accept, headers, range_params, split, Accepted};
use crate::measure::MeasureSlices;
use crate::query::{self, QueryError};

/// `GET /v1/pprof`.
pub async fn pprof(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    RawQuery(query): RawQuery,
) -> Response {
    let params = match range_params(query.as_deref()) {
        Ok(params) => params,
        Err(refused) => return *refused,
    };
    if params.minwidth.is_some() {
        return error(
            StatusCode::BAD_REQUEST,
            "minwidth bounds a folded answer (/v1/folded); a pprof profile is always whole",
        );
    }
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
    let max_bytes = bounds.max_bytes;
    let store = Arc::clone(&state.shared.store);
    let measure = filter.measure;
    let answer = tokio::task::spawn_blocking(move || {
        // The slot is held until the blocking work ends (not released when the client goes
        // away), then until the answer is sent.
        let slices = store.select_for(bounds.querier, since, until).slices;
        query::merged(
            &store,
            &slices,
            (since, until),
            &filter,
            visibility,
            &bounds,
        )
        .map(|(mut slice, counts)| {
            // The profile spans the range asked for.
            slice.start_ns = since;
            slice.end_ns = until;
            let bytes = measure.pprof_bytes(&slice);
            (bytes, counts, slice.period_ns)
        })
        .map(|answer| (slot, answer))
    })
    .await;
    let (slot, (bytes, mut counts, period_ns)) = match answer {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => return e.into_response(),
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "the query failed"),
    };
    if bytes.len() as u64 > max_bytes {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            QueryError::TooLarge(max_bytes).to_string(),
        );
    }
    let kernel = visibility == Visibility::All && config.sampling.kernel;
    // The counts are in samples of the first slice's period.
    counts.frequency = (period_ns > 0).then(|| (1_000_000_000 / period_ns).max(1));
    let headers = headers(
        &state,
        &counts,
        (since, until),
        kernel,
        "application/octet-stream",
    );
    (StatusCode::OK, headers, Held::body(bytes, slot)).into_response()
}
