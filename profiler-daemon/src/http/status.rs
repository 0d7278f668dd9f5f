//! `GET /v1/status` and `/metrics`: what the daemon is doing and what it costs, as JSON for
//! a peer and as Prometheus metrics (served on the Unix socket and on the scrape listener).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::ConnectInfo;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::budget;
use crate::http::common::{ApiState, Peer};
use crate::metric::{self, Metric};
use crate::state::{unix_now_ns, Shared};
use crate::store::uid_drops::UidDrops;

/// `GET /v1/status`'s answer, declared in `daemon-api`.
pub use daemon_api::status::Status;

/// The daemon's status as `peer` asks for it.
fn status_of(state: &ApiState, peer: &Peer) -> Status {
    let mut status = snapshot(&state.shared);
    status.peer_uid = peer.uid;
    status.peer_is_admin = state.is_admin(peer);
    status.connections_open = state.connections.open();
    status.connections_refused = state.connections.refused.load(Ordering::Relaxed);
    status.queries_running = state.queries.open();
    status.queries_refused = state.queries.refused.load(Ordering::Relaxed);
    let (uid, admin) = (peer.uid, status.peer_is_admin);
    status.uid_share_dropped = state
        .shared
        .store
        .uid_drops
        .list(|u| admin || u == Some(uid));
    status
}

/// The daemon's status, for no one in particular (`peer_uid` 0, `peer_is_admin` false).
pub fn snapshot(s: &Shared) -> Status {
    let config = s.live();
    let (slices_kept, bytes_kept) = s.store.totals();
    let tracked = s.tracked.lock().map(|t| *t).unwrap_or_default();
    let symbols = s.symbols.lock().map(|t| *t).unwrap_or_default();
    let c = &s.store.counters;
    let (_, open_refused, open_taken) = s.store.open_slice_counts();
    Status {
        version: env!("CARGO_PKG_VERSION").to_string(),
        event: s.event.to_string(),
        cpus: s.cpus,
        frequency: s.frequency(),
        kernel: config.sampling.kernel,
        slice_seconds: config.sampling.slice.0.as_secs_f64(),
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
        rollups_written: c.rollups_written.load(Ordering::Relaxed),
        corrupt_slices: c.corrupt.load(Ordering::Relaxed),
        slices_kept,
        bytes_kept,
        newest_slice_end_ns: s.store.newest_end(),
        open_snapshots: s.open_named.load(Ordering::Relaxed),
        open_snapshots_refused: open_refused,
        open_naming_seconds: s.open_naming_us.load(Ordering::Relaxed) as f64 / 1e6,
        open_taken_ns: open_taken,
        processes: tracked.processes,
        threads: tracked.threads,
        files: tracked.files,
        pinned_files: tracked.pinned,
        mappings_dropped: tracked.mappings_dropped,
        switches_seen: tracked.switches.seen,
        switches_sampled: tracked.switches.sampled,
        switches_scaled: tracked.switches.scaled,
        switches_lost: tracked.switches.lost,
        off_cpu_waiting: tracked.off_cpu_waiting,
        symbolizers: symbols.symbolizers,
        symbolizer_bytes: symbols.symbolizer_bytes,
        names: symbols.names,
        name_bytes: symbols.name_bytes,
        name_lookups: symbols.lookups,
        resident_bytes: recorder::resident_bytes().unwrap_or(0),
        cpu_seconds: recorder::ProcessUsage::now().cpu().as_secs_f64(),
        budget: s.budget.status(&config.budget),
        connections_open: 0,
        connections_refused: 0,
        queries_running: 0,
        queries_refused: 0,
        uid_share_dropped_stacks: s.store.uid_drops.stacks.load(Ordering::Relaxed),
        uid_share_dropped_samples: s.store.uid_drops.samples.load(Ordering::Relaxed),
        uid_share_dropped: Vec::new(),
        peer_uid: 0,
        peer_is_admin: false,
    }
}

/// `GET /v1/status`.
pub async fn status(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Json<Status> {
    Json(status_of(&state, &peer))
}

/// `GET /metrics` on the Unix socket (the per-uid series for root and the admin group only).
pub async fn metrics(
    State(state): State<Arc<ApiState>>,
    ConnectInfo(peer): ConnectInfo<Peer>,
) -> Response {
    metrics_response(&state.shared, state.is_admin(&peer))
}

/// `/metrics` (the Unix socket's and the scrape listener's): the same for every peer, but for
/// the per-uid series, only `with_uids`.
pub fn metrics_response(shared: &Shared, with_uids: bool) -> Response {
    let s = snapshot(shared);
    let mut out = String::new();
    metric::write(&mut out, METRICS, &s);
    metric::write(&mut out, budget::METRICS, &s.budget);
    if with_uids {
        write_uid_drops(&mut out, &shared.store.uid_drops.list(|_| true));
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

/// The per-uid share's drops as labelled series, one per uid counted.
fn write_uid_drops(out: &mut String, drops: &[UidDrops]) {
    use std::fmt::Write as _;
    for (name, help, value) in [
        (
            "uid_share_dropped_stacks_total",
            "Stacks dropped from slices and roll-ups over the uid's share, per uid.",
            (|d: &UidDrops| d.stacks) as fn(&UidDrops) -> u64,
        ),
        (
            "uid_share_dropped_samples_total",
            "Samples of the stacks dropped over the uid's share, per uid.",
            |d: &UidDrops| d.samples,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP profilerd_{name} {help}\n# TYPE profilerd_{name} counter"
        );
        for d in drops {
            let uid = d.uid.map_or("unknown".to_string(), |u| u.to_string());
            let _ = writeln!(out, "profilerd_{name}{{uid=\"{uid}\"}} {}", value(d));
        }
    }
}

/// The daemon's Prometheus metrics (the budget's follow: [`budget::METRICS`]).
const METRICS: &[Metric<Status>] = &[
    Metric {
        name: "samples_total",
        kind: "counter",
        help: "Samples read.",
        value: |s| s.samples as f64,
    },
    Metric {
        name: "lost_samples_total",
        kind: "counter",
        help: "Samples the kernel dropped.",
        value: |s| s.lost as f64,
    },
    Metric {
        name: "slices_named_total",
        kind: "counter",
        help: "Slices named.",
        value: |s| s.slices_named as f64,
    },
    Metric {
        name: "slices_dropped_total",
        kind: "counter",
        help: "Slices dropped because naming fell behind.",
        value: |s| s.slices_dropped as f64,
    },
    Metric {
        name: "slices_written_total",
        kind: "counter",
        help: "Slices written.",
        value: |s| s.slices_written as f64,
    },
    Metric {
        name: "rollups_written_total",
        kind: "counter",
        help: "Roll-ups written.",
        value: |s| s.rollups_written as f64,
    },
    Metric {
        name: "write_errors_total",
        kind: "counter",
        help: "Slice writes that failed.",
        value: |s| s.write_errors as f64,
    },
    Metric {
        name: "corrupt_slices_total",
        kind: "counter",
        help: "Slice files found corrupt or truncated.",
        value: |s| s.corrupt_slices as f64,
    },
    Metric {
        name: "open_snapshots_total",
        kind: "counter",
        help: "Snapshots of the open slices named for queries.",
        value: |s| s.open_snapshots as f64,
    },
    Metric {
        name: "open_snapshots_refused_total",
        kind: "counter",
        help: "Snapshots of the open slices asked and not named (naming queue full).",
        value: |s| s.open_snapshots_refused as f64,
    },
    Metric {
        name: "share_dropped_stacks_total",
        kind: "counter",
        help: "Stacks dropped from slices and roll-ups over their uid's share (storage.max_share_per_uid).",
        value: |s| s.uid_share_dropped_stacks as f64,
    },
    Metric {
        name: "share_dropped_samples_total",
        kind: "counter",
        help: "Samples of the stacks dropped over their uid's share.",
        value: |s| s.uid_share_dropped_samples as f64,
    },
    Metric {
        name: "slices_kept",
        kind: "gauge",
        help: "Slices on disk.",
        value: |s| s.slices_kept as f64,
    },
    Metric {
        name: "slice_bytes_kept",
        kind: "gauge",
        help: "Bytes of slices on disk.",
        value: |s| s.bytes_kept as f64,
    },
    Metric {
        name: "naming_backlog",
        kind: "gauge",
        help: "Slices waiting to be named.",
        value: |s| s.naming_backlog as f64,
    },
    Metric {
        name: "processes_tracked",
        kind: "gauge",
        help: "Processes tracked.",
        value: |s| s.processes as f64,
    },
    Metric {
        name: "mappings_dropped_total",
        kind: "counter",
        help: "Mappings refused because their process held the process model's cap.",
        value: |s| s.mappings_dropped as f64,
    },
    Metric {
        name: "switches_seen_total",
        kind: "counter",
        help: "Context switches out seen (with sampling.off_cpu).",
        value: |s| s.switches_seen as f64,
    },
    Metric {
        name: "switches_sampled_total",
        kind: "counter",
        help: "Context switches out sampled with their stack (with sampling.off_cpu).",
        value: |s| s.switches_sampled as f64,
    },
    Metric {
        name: "switches_lost_total",
        kind: "counter",
        help: "Context switch samples and records the kernel dropped.",
        value: |s| s.switches_lost as f64,
    },
    Metric {
        name: "frequency_hertz",
        kind: "gauge",
        help: "Samples per second per CPU.",
        value: |s| s.frequency as f64,
    },
    Metric {
        name: "resident_memory_bytes",
        kind: "gauge",
        help: "Resident memory.",
        value: |s| s.resident_bytes as f64,
    },
    Metric {
        name: "name_lookups_total",
        kind: "counter",
        help: "Addresses looked up in their files (DWARF, symbol tables) to be named; once each, then cached.",
        value: |s| s.name_lookups as f64,
    },
    Metric {
        name: "cpu_seconds_total",
        kind: "counter",
        help: "CPU time used.",
        value: |s| s.cpu_seconds,
    },
    Metric {
        name: "sampling",
        kind: "gauge",
        help: "1 while the drain loop runs.",
        value: |s| s.sampling as u8 as f64,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mappings_dropped_reach_status_and_metrics() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            crate::store::Store::open(dir.path(), Duration::from_secs(3600), 1 << 20, 0).unwrap();
        let shared = Shared::new(
            crate::config::Config::default(),
            store,
            sampler::EventKind::CpuClock,
            1,
            99,
        );
        assert_eq!(snapshot(&shared).mappings_dropped, 0);
        shared.tracked.lock().unwrap().mappings_dropped = 7;
        let status = snapshot(&shared);
        assert_eq!(status.mappings_dropped, 7);
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["mappings_dropped"], 7);
        let mut out = String::new();
        metric::write(&mut out, METRICS, &status);
        assert!(
            out.contains("# TYPE profilerd_mappings_dropped_total counter\nprofilerd_mappings_dropped_total 7"),
            "{out}"
        );
    }
}
