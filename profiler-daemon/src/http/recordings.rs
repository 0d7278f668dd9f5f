//! The `/v1/recordings` routes: parse, authorize, call the recordings manager
//! (`recordings.rs`), encode.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use daemon_api::header as name;
use daemon_api::recording::{RecordingState, WaitParams};

use crate::http::answer::Held;
use crate::http::common::{error, ApiState, Peer};
use crate::http::limits::Slot;
use crate::recordings::{RecordingRequest, Refused, Removal, Unavailable, MAX_WAIT};

/// The recordings' routes.
pub fn routes() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/v1/recordings", post(create))
        .route("/v1/recordings/{id}", get(status).delete(remove))
        .route("/v1/recordings/{id}/stop", post(stop))
        .route("/v1/recordings/{id}/folded", get(folded))
        .route("/v1/recordings/{id}/pprof", get(pprof))
}

/// `POST /v1/recordings`.
async fn create(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    body: Result<Json<RecordingRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let request = match body {
        Ok(Json(request)) => request,
        // The rejection names the field that could not be read.
        Err(why) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "bad request body: {}; expected JSON {{\"pid\": N, \"frequency\": HZ, \"duration\": SECONDS, \"descendants\": BOOL, \"kernel\": BOOL, \"measure\": \"cpu\"|\"off_cpu\"|\"wall\", \"on_exec\": BOOL}}",
                    why.body_text()
                ),
            )
        }
    };
    if peer.uid == u32::MAX {
        return error(StatusCode::FORBIDDEN, "unknown peer");
    }
    let pid = request.pid;
    let who = state.requester(&peer);
    match state.recordings.start(&state.shared, request, who) {
        Ok(status) => (
            StatusCode::CREATED,
            [(header::LOCATION, format!("/v1/recordings/{}", status.id))],
            Json(status),
        )
            .into_response(),
        Err(refused) => {
            let code = match refused {
                Refused::OutOfRange(_) => StatusCode::BAD_REQUEST,
                Refused::NoProcess(_) => StatusCode::NOT_FOUND,
                Refused::NotYours(_) => {
                    tracing::info!(
                        peer_uid = peer.uid,
                        peer_pid = peer.pid,
                        pid,
                        "recording refused: another user's process"
                    );
                    StatusCode::FORBIDDEN
                }
                Refused::Busy(_) | Refused::BusyYours(_) => StatusCode::TOO_MANY_REQUESTS,
            };
            error(code, refused.to_string())
        }
    }
}

/// How long `?wait=SECONDS` waits: at most [`MAX_WAIT`]; none for a value that is not a
/// positive number.
fn wait_for(seconds: Option<f64>) -> Option<Duration> {
    seconds
        .filter(|w| w.is_finite() && *w > 0.0)
        // Capped before the conversion, which panics past u64 seconds (`?wait=1e20`).
        .map(|w| Duration::from_secs_f64(w.min(MAX_WAIT.as_secs_f64())))
}

/// The answer for a result that is not there.
fn unavailable(why: Unavailable) -> Response {
    let code = match why {
        Unavailable::NotFound(_) => StatusCode::NOT_FOUND,
        Unavailable::Running(_) => StatusCode::CONFLICT,
        Unavailable::Failed(..) => StatusCode::GONE,
        Unavailable::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
    };
    error(code, why.to_string())
}

/// `GET /v1/recordings/ID`.
async fn status(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
    params: Result<Query<WaitParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(params)) = params else {
        return error(StatusCode::BAD_REQUEST, "bad query: expected wait=SECONDS");
    };
    let wait = wait_for(params.wait);
    match state
        .recordings
        .status(id, state.requester(&peer), wait)
        .await
    {
        Some(status) => Json(status).into_response(),
        None => unavailable(Unavailable::NotFound(id)),
    }
}

/// `render` run for `peer` on the blocking pool, not on the thread that answers every request
/// and feeds the watchdog, in one of the peer's query slots (`api.max_queries_per_user`,
/// `api.max_concurrent_queries`): a render costs what a history query does. Returns the slot
/// with what was rendered (the answer's body holds it until sent: `answer::Held`), or the
/// answer that says why not when no slot is free.
async fn off_thread<T: Send + 'static>(
    state: &Arc<ApiState>,
    peer: &Peer,
    render: impl FnOnce(&ApiState) -> Result<T, Unavailable> + Send + 'static,
) -> Result<(Slot, T), Response> {
    let slot = state
        .admit_query(peer, &state.shared.live().api)
        .map_err(IntoResponse::into_response)?;
    let state = Arc::clone(state);
    // The slot is held until the blocking work ends, even when the client went away.
    let rendered = tokio::task::spawn_blocking(move || render(&state).map(|r| (slot, r)))
        .await
        .unwrap_or_else(|_| Err(Unavailable::Failed(0, "rendering failed".into())));
    rendered.map_err(unavailable)
}

/// `GET /v1/recordings/ID/folded`.
async fn folded(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
) -> Response {
    let who = state.requester(&peer);
    let max_bytes = state.shared.live().api.max_response_bytes.0;
    let rendered = off_thread(&state, &peer, move |s| {
        s.recordings.folded(id, who, max_bytes)
    })
    .await;
    match rendered {
        Ok((slot, f)) => (
            [
                (
                    header::CONTENT_TYPE,
                    "text/plain; charset=utf-8".to_string(),
                ),
                (
                    header::HeaderName::from_static(name::FREQUENCY),
                    f.frequency.to_string(),
                ),
                (header::HeaderName::from_static(name::EVENT), f.event),
                (
                    header::HeaderName::from_static(name::SECONDS),
                    format!("{:.3}", f.seconds),
                ),
            ],
            Held::body(f.text.into_bytes(), slot),
        )
            .into_response(),
        Err(refused) => refused,
    }
}

/// `GET /v1/recordings/ID/pprof`.
async fn pprof(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
) -> Response {
    let who = state.requester(&peer);
    match off_thread(&state, &peer, move |s| s.recordings.pprof(id, who)).await {
        Ok((slot, bytes)) => (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            Held::body(bytes, slot),
        )
            .into_response(),
        Err(refused) => refused,
    }
}

/// `POST /v1/recordings/ID/stop`: 202 and the status while the recording was running (it is
/// stopped), 200 and the status once it has ended (it is kept).
async fn stop(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
) -> Response {
    match state.recordings.stop(id, state.requester(&peer)) {
        None => unavailable(Unavailable::NotFound(id)),
        Some(status) if status.state == RecordingState::Running => {
            (StatusCode::ACCEPTED, Json(status)).into_response()
        }
        Some(status) => (StatusCode::OK, Json(status)).into_response(),
    }
}

/// `DELETE /v1/recordings/ID`.
async fn remove(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    Path(id): Path<u64>,
) -> Response {
    match state.recordings.remove(id, state.requester(&peer)) {
        Removal::NotFound => unavailable(Unavailable::NotFound(id)),
        Removal::Stopping(status) => (StatusCode::ACCEPTED, Json(status)).into_response(),
        Removal::Removed => StatusCode::NO_CONTENT.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_is_capped_before_it_is_converted() {
        assert_eq!(wait_for(Some(1e20)), Some(MAX_WAIT));
        assert_eq!(wait_for(Some(f64::MAX)), Some(MAX_WAIT));
        assert_eq!(wait_for(Some(2.5)), Some(Duration::from_millis(2500)));
        for none in [
            None,
            Some(-1.0),
            Some(0.0),
            Some(f64::NAN),
            Some(f64::INFINITY),
        ] {
            assert_eq!(wait_for(none), None, "{none:?}");
        }
    }
}
