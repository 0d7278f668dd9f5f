//! `GET /v1/timeline`: CPU over time of a range of the history, in cores per bucket, by
//! group; with the filters, access rules and bounds of `/v1/folded`.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::connect_info::ConnectInfo;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use daemon_api::header as name;
use daemon_api::history::{from_query, TimelineAnswer, TimelineBucket, TimelineParams};

use crate::http::answer::Held;
use crate::http::common::{error, ApiState, Peer};
use crate::http::folded::{accept, bad_query, split, Accepted, RANGE_PARAMETERS};
use crate::query::QueryError;
use crate::timeline::{self, GroupBy, Request, MAX_BUCKETS};

/// Most groups a timeline shows apart from "other".
const MAX_TOP: usize = 100;

/// Longest bucket, seconds (a week).
const MAX_BUCKET_SECONDS: u64 = 7 * 86_400;

/// Longest function name asked for.
const MAX_FUNCTION_BYTES: usize = 4096;

/// Round bucket lengths, seconds.
const STEPS: [u64; 15] = [
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600,
];

/// A bucket length for `range_ns` when none is asked for: a round length giving at most
/// about 60 buckets, at least `finest_ns`.
fn default_bucket(range_ns: u64, finest_ns: u64) -> u64 {
    let want = range_ns.div_ceil(60).max(finest_ns).div_ceil(1_000_000_000);
    STEPS.iter().copied().find(|&s| s >= want).unwrap_or(86_400)
}

/// The bucket `bucket_s` widened to the data's `resolution_ns`: the shortest round length
/// (or whole second) at least as long; None when it is long enough.
fn widened(bucket_s: u64, resolution_ns: u64) -> Option<u64> {
    let resolution_s = resolution_ns.div_ceil(1_000_000_000).max(1);
    (resolution_s > bucket_s).then(|| {
        STEPS
            .iter()
            .copied()
            .find(|&s| s >= resolution_s)
            .unwrap_or(resolution_s)
            .min(MAX_BUCKET_SECONDS)
    })
}

/// The request of `params`, or why it is refused.
fn request(
    params: &TimelineParams,
    (since, until): (u64, u64),
    slice_ns: u64,
) -> Result<Request, String> {
    let bucket_s = match params.bucket {
        Some(b) if !(1..=MAX_BUCKET_SECONDS).contains(&b) => {
            return Err(format!(
                "bucket must be from 1 to {MAX_BUCKET_SECONDS} (seconds)"
            ))
        }
        Some(b) => b,
        None => default_bucket(until - since, slice_ns),
    };
    let bucket_ns = bucket_s.saturating_mul(1_000_000_000);
    // Every bucket must end within what UNIX nanoseconds in 64 bits count (the year 2554):
    // the buckets' arithmetic (a start plus a bucket) is then checked once, here.
    if until.div_ceil(bucket_ns).checked_mul(bucket_ns).is_none() {
        return Err(format!(
            "until: the last bucket of {bucket_s} s would end past the last time profilerd counts (UNIX nanoseconds in 64 bits, in the year 2554): give an earlier until or a shorter bucket"
        ));
    }
    if (until - since).div_ceil(bucket_ns) >= MAX_BUCKETS {
        return Err(format!(
            "more than {MAX_BUCKETS} buckets: use longer buckets or a shorter range"
        ));
    }
    let top = params.top.unwrap_or(5);
    if top == 0 || top > MAX_TOP {
        return Err(format!("top must be from 1 to {MAX_TOP}"));
    }
    if params
        .function
        .as_ref()
        .is_some_and(|f| f.is_empty() || f.len() > MAX_FUNCTION_BYTES)
    {
        return Err(format!(
            "function must be a name of 1 to {MAX_FUNCTION_BYTES} bytes"
        ));
    }
    Ok(Request {
        since_ns: since,
        until_ns: until,
        bucket_ns,
        by: params.by.unwrap_or(GroupBy::Comm),
        top,
        function: params.function.clone(),
    })
}

/// `GET /v1/timeline`.
pub async fn timeline(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    RawQuery(query): RawQuery,
) -> Response {
    let params: TimelineParams = match from_query(query.as_deref().unwrap_or_default()) {
        Ok(params) => params,
        Err(why) => {
            return bad_query(
                &why,
                &format!("{RANGE_PARAMETERS}, bucket (seconds), by (comm, pid, uid or cgroup), top, function"),
            )
        }
    };
    let (range, filter) = split(params.range());
    let Accepted {
        config,
        range,
        filter,
        visibility,
        slot,
        bounds,
        cancel_on_drop: _cancel_on_drop,
    } = match accept(&state, &peer, range, filter) {
        Ok(accepted) => accepted,
        Err(refused) => return *refused,
    };
    let slice_ns = config.sampling.slice.0.as_nanos() as u64;
    // The history keeps samples per second: no default bucket is finer.
    let request = match request(&params, range, 1_000_000_000) {
        Ok(r) => r,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let max_bytes = bounds.max_bytes;
    let store = Arc::clone(&state.shared.store);
    let started = Instant::now();
    let asked = request.clone();
    let answer = tokio::task::spawn_blocking(move || {
        // The slot is held until the blocking work ends (not released when the client goes
        // away), then until the answer is sent.
        let first = timeline::timeline(&store, &asked, &filter, visibility, &bounds)?;
        // Buckets finer than what the data tells are never drawn: widened to it, and drawn
        // again (only ranges that hold slices written before per-second counts were kept).
        let Some(bucket_s) = widened(asked.bucket_ns / 1_000_000_000, first.resolution_ns) else {
            return Ok::<_, QueryError>((slot, asked, first));
        };
        let wider = Request {
            bucket_ns: bucket_s * 1_000_000_000,
            ..asked
        };
        let again = timeline::timeline(&store, &wider, &filter, visibility, &bounds)?;
        Ok((slot, wider, again))
    })
    .await;
    let (slot, drawn, answer) = match answer {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return e.into_response(),
        Err(_) => return error(StatusCode::INTERNAL_SERVER_ERROR, "the query failed"),
    };
    let resolution_seconds = answer.resolution_ns.div_ceil(1_000_000_000).max(1);
    let note = (drawn.bucket_ns != request.bucket_ns).then(|| {
        format!(
            "buckets of {} s widened to {} s: part of this range is kept at {resolution_seconds}-s resolution (slices written without per-second counts, or off-CPU time), which finer buckets would smear",
            request.bucket_ns / 1_000_000_000,
            drawn.bucket_ns / 1_000_000_000
        )
    });
    tracing::debug!(
        uid = peer.uid,
        slices = answer.slices,
        buckets = answer.buckets.len(),
        ms = started.elapsed().as_millis() as u64,
        "timeline query"
    );
    let body = TimelineAnswer {
        bucket_seconds: drawn.bucket_ns / 1_000_000_000,
        resolution_seconds: Some(resolution_seconds),
        note,
        buckets: answer
            .buckets
            .into_iter()
            .map(|b| TimelineBucket {
                start: b.start,
                cpu: b.cpu,
            })
            .collect(),
    };
    let Ok(json) = serde_json::to_vec(&body) else {
        return error(StatusCode::INTERNAL_SERVER_ERROR, "encoding the answer");
    };
    if json.len() as u64 > max_bytes {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            QueryError::TooLarge(max_bytes).to_string(),
        );
    }
    let mut headers = HeaderMap::new();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    for (name, value) in [
        (name::SLICES, answer.slices),
        (name::SKIPPED_SLICES, answer.skipped),
        (name::SINCE_NS, request.since_ns),
        (name::UNTIL_NS, request.until_ns),
        (name::SLICE_NS, slice_ns),
    ] {
        headers.insert(name, HeaderValue::from(value));
    }
    (StatusCode::OK, headers, Held::body(json, slot)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_round_and_never_finer_than_the_data() {
        let s = 1_000_000_000;
        assert_eq!(default_bucket(3600 * s, 10 * s), 60);
        assert_eq!(default_bucket(86_400 * s, 10 * s), 1800);
        assert_eq!(default_bucket(60 * s, 10 * s), 10);
        assert_eq!(default_bucket(60 * s, s), 1);
        assert_eq!(widened(5, s), None);
        assert_eq!(widened(1, s), None);
        assert_eq!(widened(5, 10 * s), Some(10));
        assert_eq!(
            widened(1, 10 * s + 300),
            Some(15),
            "a slice of a hair over 10 s"
        );
        assert_eq!(widened(60, 10 * s), None);
        let params: TimelineParams = from_query("bucket=1&top=3&by=uid").unwrap();
        let err = request(&params, (0, 86_400 * s), 10 * s).unwrap_err();
        assert!(err.contains("buckets"), "{err}");
        let r = request(&params, (0, 60 * s), 10 * s).unwrap();
        let huge: TimelineParams = from_query("bucket=1000000000000").unwrap();
        assert!(request(&huge, (0, 60 * s), 10 * s).is_err());
        assert_eq!((r.bucket_ns, r.top, r.by), (s, 3, GroupBy::Uid));
    }

    #[test]
    fn a_range_at_the_end_of_time_is_refused_not_wrapped() {
        // `?since=18446700000&until=1e20&bucket=3600`: until saturates to the last instant.
        let params: TimelineParams =
            from_query("since=18446700000&until=1e20&bucket=3600").unwrap();
        let range = super::super::folded::range(
            params.since,
            params.until,
            &crate::config::Config::default(),
        )
        .unwrap();
        let err = request(&params, range, 10_000_000_000).unwrap_err();
        assert!(err.starts_with("until: "), "{err}");
        // The last bucket that fits is taken, and every bucket's end computed.
        let last = u64::MAX / 3_600_000_000_000 * 3_600_000_000_000;
        let r = request(&params, (last - 7_200_000_000_000, last), 1).unwrap();
        let store_dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(
            store_dir.path(),
            std::time::Duration::from_secs(1 << 30),
            1 << 30,
            0,
        )
        .unwrap();
        let bounds = crate::query::Bounds::new(1 << 20, std::time::Duration::from_secs(10));
        let t = timeline::timeline(
            &store,
            &r,
            &crate::filter::Filter::default(),
            crate::access::Visibility::All,
            &bounds,
        )
        .unwrap();
        assert_eq!(t.buckets.len(), 2);
    }
}
