//! On-demand recordings of one process: `POST /v1/recordings` ([`RecordingRequest`]),
//! `GET /v1/recordings/ID[?wait=SECONDS]` ([`WaitParams`]) and the status both answer with
//! ([`RecordingStatus`]).

use serde::{Deserialize, Serialize};

use crate::Measure;

/// The route recordings are created at; a recording is at `RECORDINGS/ID`, its results at
/// `RECORDINGS/ID/folded` and `RECORDINGS/ID/pprof`.
pub const RECORDINGS: &str = "/v1/recordings";

/// Appended to a recording's route, the route that stops it: `POST RECORDINGS/ID/stop` stops
/// a running recording (its result is named and kept) and leaves a finished one as it is,
/// answering its status either way. `DELETE RECORDINGS/ID` also stops a running one, but
/// forgets one that has ended: a client stopping a recording that ended on its own meanwhile
/// (its process exited) would lose the result.
pub const STOP: &str = "/stop";

/// `POST /v1/recordings` body (JSON).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RecordingRequest {
    /// The process to record.
    pub pid: u32,
    /// Samples per second (default: the daemon's frequency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency: Option<u64>,
    /// Seconds to record (fractions allowed; default and most: `recordings.max_duration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<f64>,
    /// Keep the processes the process creates while recording (as `profctl record --pid`
    /// does); without it only the process's own threads.
    #[serde(default)]
    pub descendants: bool,
    /// Sample kernel frames (root and the admin group only; default true for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<bool>,
    /// What time to record: `cpu` (default), `off_cpu` or `wall` (see docs/offcpu.md).
    #[serde(default)]
    pub measure: Measure,
    /// The process is held before its exec by the requester (`profctl record -- COMMAND`):
    /// count from its exec on; the status says `sampling` once its events are open, and the
    /// requester then lets it exec.
    #[serde(default)]
    pub on_exec: bool,
}

/// `?wait=SECONDS` on a recording's status: answer as soon as it ends, waiting at most that
/// long (at most 60 s).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WaitParams {
    /// Seconds to wait for the recording to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<f64>,
}

/// Where a recording is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordingState {
    /// Sampling, or being named.
    #[default]
    Running,
    /// Finished: its results may be fetched.
    Done,
    /// Failed (`error` says why).
    Failed,
}

/// A recording's status (`GET /v1/recordings/ID`, and the answer to its creation).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct RecordingStatus {
    /// The recording's id.
    pub id: u64,
    /// Where it is.
    pub state: RecordingState,
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
    #[serde(default)]
    pub samples: Option<u64>,
    /// When done: samples read (before the selection).
    #[serde(default)]
    pub samples_read: Option<u64>,
    /// When done: samples of the recorded processes left out because the requester may not
    /// see them (microseconds for off-CPU and wall-clock time): processes that are not
    /// theirs as the kernel judges who may trace one (a set-uid or set-gid program, one not
    /// dumpable).
    #[serde(default)]
    pub samples_hidden: Option<u64>,
    /// When done: samples the kernel dropped.
    #[serde(default)]
    pub lost: Option<u64>,
    /// When done: the event sampled on.
    #[serde(default)]
    pub event: Option<String>,
    /// When done: the frequency in effect.
    #[serde(default)]
    pub frequency_used: Option<u64>,
    /// When done: seconds sampled.
    #[serde(default)]
    pub seconds: Option<f64>,
    /// When done: whether it was stopped before its duration (DELETE, the process exited, or
    /// `recordings.max_bytes` reached).
    #[serde(default)]
    pub stopped_early: Option<bool>,
    /// When done: whether it stopped at `recordings.max_bytes` (what was kept is served).
    #[serde(default)]
    pub truncated: Option<bool>,
    /// When failed: why.
    #[serde(default)]
    pub error: Option<String>,
    /// The recording's events are open (a process held before its exec may go on).
    #[serde(default)]
    pub sampling: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_leaves_out_what_is_not_given() {
        let request = RecordingRequest {
            pid: 7,
            frequency: Some(999),
            descendants: true,
            kernel: Some(true),
            ..RecordingRequest::default()
        };
        let json = serde_json::to_string(&request).unwrap();
        assert_eq!(
            json,
            r#"{"pid":7,"frequency":999,"descendants":true,"kernel":true,"measure":"cpu","on_exec":false}"#
        );
        assert_eq!(
            serde_json::from_str::<RecordingRequest>(&json).unwrap(),
            request
        );
        // The body older clients send.
        let old: RecordingRequest = serde_json::from_str(r#"{"pid": 3, "duration": 1.5}"#).unwrap();
        assert_eq!(
            (old.pid, old.duration, old.measure),
            (3, Some(1.5), Measure::Cpu)
        );
        assert!(serde_json::from_str::<RecordingRequest>(r#"{"pid": 3, "colour": 1}"#).is_err());
    }

    #[test]
    fn states_have_their_wire_names() {
        let status: RecordingStatus = serde_json::from_str(
            r#"{"id": 1, "state": "failed", "pid": 2, "frequency": 99, "duration": 1.0,
                "descendants": false, "kernel": false, "started_ns": 5, "error": "gone"}"#,
        )
        .unwrap();
        assert_eq!(status.state, RecordingState::Failed);
        assert_eq!(status.error.as_deref(), Some("gone"));
        assert_eq!(
            serde_json::to_string(&RecordingState::Running).unwrap(),
            "\"running\""
        );
    }
}
