//! Ranges of profilerd's history: the `GET /v1/folded` query for a time range and a filter,
//! and its answer as a [`profile::Profile`] with what the daemon said of it; the
//! `GET /v1/pprof` and `GET /v1/timeline` queries (each as a blocking call, and as the
//! request path for callers with a runtime of their own: `commands/ui`).

use std::path::Path;

use anyhow::Result;

use crate::cli::{FilterArgs, ProcessArgs};
use crate::daemon_client::{self, encode, header};
use crate::input::folded_profile;

/// Which processes a range query keeps.
#[derive(Clone, Debug, Default)]
pub struct RangeFilter {
    /// Only this process.
    pub pid: Option<u32>,
    /// Only threads with this command name.
    pub comm: Option<String>,
    /// Only processes of this user.
    pub uid: Option<u32>,
    /// With `pid`: its descendants too.
    pub descendants: bool,
    /// Only processes in this cgroup or under it.
    pub cgroup: Option<String>,
    /// Which time: `off_cpu` or `wall` (counts in microseconds); None: CPU samples.
    pub measure: Option<&'static str>,
}

impl RangeFilter {
    /// The filter `--pid`, `--comm` and `--uid` ask for.
    pub fn of_process(args: &ProcessArgs) -> RangeFilter {
        RangeFilter {
            pid: args.pid,
            comm: args.comm.clone(),
            uid: args.uid,
            ..RangeFilter::default()
        }
    }

    /// The filter `--pid`, `--comm`, `--uid`, `--descendants` and `--cgroup` ask for.
    pub fn of(args: &FilterArgs) -> RangeFilter {
        RangeFilter {
            descendants: args.descendants,
            cgroup: args.cgroup.clone(),
            ..RangeFilter::of_process(&args.process)
        }
    }

    /// The query's parameters after `since` and `until` (`&pid=…`…).
    fn query(&self) -> String {
        let mut query = String::new();
        if let Some(pid) = self.pid {
            query.push_str(&format!("&pid={pid}"));
        }
        if let Some(comm) = &self.comm {
            query.push_str(&format!("&comm={}", encode(comm)));
        }
        if let Some(uid) = self.uid {
            query.push_str(&format!("&uid={uid}"));
        }
        if self.descendants {
            query.push_str("&descendants=true");
        }
        if let Some(cgroup) = &self.cgroup {
            query.push_str(&format!("&cgroup={}", encode(cgroup)));
        }
        if let Some(measure) = self.measure {
            query.push_str(&format!("&measure={measure}"));
        }
        query
    }
}

/// The stacks of a time range of the daemon's history, and what the daemon said of them.
pub struct RangeProfile {
    /// The stacks (comm root first).
    pub profile: profile::Profile,
    /// Slices read.
    pub slices: u64,
    /// Slices skipped as corrupt.
    pub skipped: u64,
    /// Sampling frequency, Hz.
    pub frequency: u64,
    /// The event sampled on.
    pub event: String,
    /// Whether kernel frames are included.
    pub kernel: bool,
}

/// The request for the folded stacks of `since..until` (UNIX seconds).
pub fn folded_path(since: f64, until: f64, filter: &RangeFilter) -> String {
    format!(
        "/v1/folded?since={since:.3}&until={until:.3}{}",
        filter.query()
    )
}

impl RangeProfile {
    /// The daemon's answer to [`folded_path`] (a success).
    pub fn of_answer(answer: &daemon_client::Answer) -> RangeProfile {
        RangeProfile {
            profile: folded_profile(&String::from_utf8_lossy(&answer.body)),
            slices: answer.number(header::SLICES).unwrap_or(0),
            skipped: answer.number(header::SKIPPED_SLICES).unwrap_or(0),
            frequency: answer.number(header::FREQUENCY).unwrap_or(0),
            event: answer.text(header::EVENT).unwrap_or("unknown").to_string(),
            kernel: answer.number(header::KERNEL_FRAMES) == Some(1),
        }
    }
}

/// The folded stacks of `since..until` (UNIX seconds, `since` before `until`) from the daemon
/// at `socket`.
pub fn folded_range(
    socket: &Path,
    since: f64,
    until: f64,
    filter: &RangeFilter,
) -> Result<RangeProfile> {
    let answer = daemon_client::get(socket, &folded_path(since, until, filter))?.ok()?;
    Ok(RangeProfile::of_answer(&answer))
}

/// A time range of the daemon's history as a pprof profile, and what the daemon said of it.
pub struct RangePprof {
    /// The profile, gzipped, as the daemon wrote it.
    pub bytes: Vec<u8>,
    /// Samples in it.
    pub samples: u64,
    /// Slices read.
    pub slices: u64,
    /// Slices skipped as corrupt.
    pub skipped: u64,
    /// Sampling frequency, Hz.
    pub frequency: u64,
    /// The event sampled on.
    pub event: String,
    /// Whether kernel frames are included.
    pub kernel: bool,
}

/// The request for `since..until` (UNIX seconds) as a pprof profile.
pub fn pprof_path(since: f64, until: f64, filter: &RangeFilter) -> String {
    format!(
        "/v1/pprof?since={since:.3}&until={until:.3}{}",
        filter.query()
    )
}

/// `since..until` (UNIX seconds) from the daemon at `socket` as a pprof profile
/// (`GET /v1/pprof`).
pub fn pprof_range(
    socket: &Path,
    since: f64,
    until: f64,
    filter: &RangeFilter,
) -> Result<RangePprof> {
    let answer = daemon_client::get(socket, &pprof_path(since, until, filter))?.ok()?;
    Ok(RangePprof {
        samples: answer.number(header::SAMPLES).unwrap_or(0),
        slices: answer.number(header::SLICES).unwrap_or(0),
        skipped: answer.number(header::SKIPPED_SLICES).unwrap_or(0),
        frequency: answer.number(header::FREQUENCY).unwrap_or(0),
        event: answer.text(header::EVENT).unwrap_or("unknown").to_string(),
        kernel: answer.number(header::KERNEL_FRAMES) == Some(1),
        bytes: answer.body,
    })
}

/// What a timeline query asks for besides its range and filter.
#[derive(Clone, Debug)]
pub struct TimelineQuery {
    /// Bucket length, seconds (None: the daemon's choice).
    pub bucket: Option<u64>,
    /// Grouping: comm, pid, uid or cgroup.
    pub by: &'static str,
    /// Groups kept apart from "other".
    pub top: u16,
    /// Only CPU with this function on the stack.
    pub function: Option<String>,
}

/// The daemon's timeline of `since..until` (UNIX seconds): its JSON answer, and the daemon's
/// slice length in seconds (0 when it did not say).
pub fn timeline_range(
    socket: &Path,
    (since, until): (f64, f64),
    filter: &RangeFilter,
    query: &TimelineQuery,
) -> Result<(Vec<u8>, f64)> {
    let path = timeline_path((since, until), filter, query);
    let answer = daemon_client::get(socket, &path)?.ok()?;
    let slice = answer.number(header::SLICE_NS).unwrap_or(0) as f64 / 1e9;
    Ok((answer.body, slice))
}

/// The request for the timeline of `since..until` (UNIX seconds).
pub fn timeline_path(
    (since, until): (f64, f64),
    filter: &RangeFilter,
    query: &TimelineQuery,
) -> String {
    let mut path = format!(
        "/v1/timeline?since={since:.3}&until={until:.3}&by={}&top={}{}",
        query.by,
        query.top,
        filter.query()
    );
    if let Some(bucket) = query.bucket {
        path.push_str(&format!("&bucket={bucket}"));
    }
    if let Some(function) = &query.function {
        path.push_str(&format!("&function={}", encode(function)));
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_query() {
        let filter = RangeFilter {
            pid: Some(7),
            descendants: true,
            cgroup: Some("/a b".into()),
            ..RangeFilter::default()
        };
        assert_eq!(filter.query(), "&pid=7&descendants=true&cgroup=%2Fa%20b");
        assert_eq!(RangeFilter::default().query(), "");
    }
}
