//! Ranges of profilerd's history: the `GET /v1/folded` query for a time range and a filter,
//! and its answer as a [`profile::Profile`] with what the daemon said of it; the
//! `GET /v1/pprof` and `GET /v1/timeline` queries (each as a blocking call, and as the
//! request path for callers with a runtime of their own: `commands/ui`).

use std::path::Path;

use anyhow::Result;

use daemon_api::header;
use daemon_api::history::{to_query, GroupBy, RangeParams, TimelineParams};
use daemon_api::{Measure, TimeParam};

use crate::cli::{FilterArgs, ProcessArgs};
use crate::daemon_client;
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
    /// Which time: off CPU or wall-clock (counts in microseconds); None: CPU samples.
    pub measure: Option<Measure>,
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

    /// The parameters of a query for `since..until` (UNIX seconds) with this filter; a time
    /// before 1970 is an error (it cannot be asked for).
    fn params(&self, since: f64, until: f64) -> Result<RangeParams> {
        Ok(RangeParams {
            since: Some(instant(since)?),
            until: Some(instant(until)?),
            pid: self.pid,
            comm: self.comm.clone(),
            uid: self.uid,
            descendants: self.descendants,
            cgroup: self.cgroup.clone(),
            measure: self.measure,
            minwidth: None,
        })
    }
}

/// `unix` seconds as an instant for the daemon, to the millisecond (as a range is shown).
fn instant(unix: f64) -> Result<TimeParam> {
    // Refused before 1970 (and when not a number).
    TimeParam::at_unix_seconds(unix)?;
    let ms = (unix * 1e3).round() as u64;
    Ok(TimeParam::At(ms.saturating_mul(1_000_000)))
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
pub fn folded_path(since: f64, until: f64, filter: &RangeFilter) -> Result<String> {
    Ok(format!(
        "/v1/folded?{}",
        to_query(&filter.params(since, until)?)
    ))
}

/// The request for the folded stacks of `since..until` bounded as a flame graph drawn at
/// `minwidth` percent ([`RangeParams::minwidth`]): narrow frames merged, samples kept.
pub fn bounded_folded_path(
    since: f64,
    until: f64,
    filter: &RangeFilter,
    minwidth: f64,
) -> Result<String> {
    let params = RangeParams {
        minwidth: Some(minwidth),
        ..filter.params(since, until)?
    };
    Ok(format!("/v1/folded?{}", to_query(&params)))
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
    let answer = daemon_client::get(socket, &folded_path(since, until, filter)?)?.ok()?;
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
pub fn pprof_path(since: f64, until: f64, filter: &RangeFilter) -> Result<String> {
    Ok(format!(
        "/v1/pprof?{}",
        to_query(&filter.params(since, until)?)
    ))
}

/// `since..until` (UNIX seconds) from the daemon at `socket` as a pprof profile
/// (`GET /v1/pprof`).
pub fn pprof_range(
    socket: &Path,
    since: f64,
    until: f64,
    filter: &RangeFilter,
) -> Result<RangePprof> {
    let answer = daemon_client::get(socket, &pprof_path(since, until, filter)?)?.ok()?;
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
    /// Grouping.
    pub by: GroupBy,
    /// Groups kept apart from "other".
    pub top: u16,
    /// Only CPU with this function on the stack.
    pub function: Option<String>,
}

/// The daemon's timeline of `since..until` (UNIX seconds): its JSON answer, and the daemon's
/// slice length in seconds (0 when it did not say).
pub fn timeline_range(
    socket: &Path,
    range: (f64, f64),
    filter: &RangeFilter,
    query: &TimelineQuery,
) -> Result<(Vec<u8>, f64)> {
    let answer = daemon_client::get(socket, &timeline_path(range, filter, query)?)?.ok()?;
    let slice = answer.number(header::SLICE_NS).unwrap_or(0) as f64 / 1e9;
    Ok((answer.body, slice))
}

/// The request for the timeline of `since..until` (UNIX seconds).
pub fn timeline_path(
    (since, until): (f64, f64),
    filter: &RangeFilter,
    query: &TimelineQuery,
) -> Result<String> {
    let params = TimelineParams {
        bucket: query.bucket,
        by: Some(query.by),
        top: Some(query.top.into()),
        function: query.function.clone(),
        ..TimelineParams::with_range(filter.params(since, until)?)
    };
    Ok(format!("/v1/timeline?{}", to_query(&params)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_query_sends_instants_and_the_filter() {
        let filter = RangeFilter {
            pid: Some(7),
            descendants: true,
            cgroup: Some("/a b".into()),
            measure: Some(Measure::Wall),
            ..RangeFilter::default()
        };
        assert_eq!(
            to_query(&filter.params(1_700_000_000.123_4, 1_700_000_600.0).unwrap()),
            "since=%401700000000.123&until=%401700000600&pid=7&descendants=true&cgroup=%2Fa+b&measure=wall"
        );
        assert_eq!(
            to_query(&RangeFilter::default().params(0.0, 1.0).unwrap()),
            "since=%400&until=%401"
        );
    }

    #[test]
    fn a_time_before_1970_is_never_sent_as_a_time_ago() {
        // It went out as `since=-3600.000`, which profilerd reads as an hour ago.
        let err = RangeFilter::default()
            .params(-3600.0, 1_700_000_000.0)
            .unwrap_err();
        assert!(err.to_string().contains("before 1970"), "{err}");
    }
}
