//! The history queries' parameters and answers: `GET /v1/folded` and `GET /v1/pprof`
//! ([`RangeParams`]), `GET /v1/timeline` ([`TimelineParams`], [`TimelineAnswer`]). Query
//! strings are written with [`to_query`] and read with [`from_query`]; a parameter that cannot
//! be read is named in the error (`since: "@-3600" is before 1970…`).

use std::collections::BTreeMap;

use serde::de::{self, DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};

use crate::{Measure, TimeParam};

/// The range and filter of a history query: `GET /v1/folded` and `GET /v1/pprof` take these.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RangeParams {
    /// Start (see [`TimeParam`]). Default: 10 minutes before `until`.
    #[serde(
        default,
        deserialize_with = "field::since",
        skip_serializing_if = "Option::is_none"
    )]
    pub since: Option<TimeParam>,
    /// End. Default: now.
    #[serde(
        default,
        deserialize_with = "field::until",
        skip_serializing_if = "Option::is_none"
    )]
    pub until: Option<TimeParam>,
    /// Only this process (all its threads).
    #[serde(
        default,
        deserialize_with = "field::pid",
        skip_serializing_if = "Option::is_none"
    )]
    pub pid: Option<u32>,
    /// Only threads with this command name.
    #[serde(
        default,
        deserialize_with = "field::comm",
        skip_serializing_if = "Option::is_none"
    )]
    pub comm: Option<String>,
    /// Only processes of this user.
    #[serde(
        default,
        deserialize_with = "field::uid",
        skip_serializing_if = "Option::is_none"
    )]
    pub uid: Option<u32>,
    /// With `pid`: also the processes it and its descendants created.
    #[serde(
        default,
        deserialize_with = "field::descendants",
        skip_serializing_if = "is_false"
    )]
    pub descendants: bool,
    /// Only processes in this cgroup (a v2 path) or under it.
    #[serde(
        default,
        deserialize_with = "field::cgroup",
        skip_serializing_if = "Option::is_none"
    )]
    pub cgroup: Option<String>,
    /// What time: CPU samples (default), or `off_cpu` or `wall` in microseconds (the daemon
    /// needs `[sampling] off_cpu`).
    #[serde(
        default,
        deserialize_with = "field::measure",
        skip_serializing_if = "Option::is_none"
    )]
    pub measure: Option<Measure>,
    /// `/v1/folded` only (`/v1/pprof` refuses it): the answer bounded as a flame graph drawn
    /// at this minimum width (percent of the answer's samples, from [`MIN_WIDTH_PERCENT`] to
    /// [`MAX_WIDTH_PERCENT`]), as inferno's `--minwidth` but with nothing lost: the frames
    /// narrower than that are merged, per parent, into one frame named by [`merged_frame`]
    /// that keeps their samples, and the width is raised (doubled) until the tree has at most
    /// [`MAX_BOUNDED_FRAMES`] frames; the width applied is sent as
    /// [`crate::header::MIN_WIDTH_SAMPLES`]. Without it, every stack, exact.
    #[serde(
        default,
        deserialize_with = "field::minwidth",
        skip_serializing_if = "Option::is_none"
    )]
    pub minwidth: Option<f64>,
}

/// The smallest `minwidth` taken, percent.
pub const MIN_WIDTH_PERCENT: f64 = 0.0001;
/// The largest `minwidth` taken, percent.
pub const MAX_WIDTH_PERCENT: f64 = 50.0;
/// Most frames of a bounded answer's tree (its root, the command names, every frame kept and
/// every merged frame counted), as profctl ui sends at most to the page.
pub const MAX_BOUNDED_FRAMES: usize = 6000;

/// The name of the frame that stands for `frames` frames merged in a bounded answer
/// (`[37 narrow frames]`).
pub fn merged_frame(frames: u64) -> String {
    format!("[{frames} narrow frames]")
}

/// How many frames a name written by [`merged_frame`] stands for; None for any other name.
/// (A process can name a function so, as it can name one `[unknown]`: a reader shows such a
/// frame as merged, nothing more.)
pub fn merged_frames_of(name: &str) -> Option<u64> {
    let n = name.strip_prefix('[')?.strip_suffix(" narrow frames]")?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// What the CPU of a timeline is grouped by (`by=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupBy {
    /// The thread's command name.
    #[default]
    Comm,
    /// The process: `comm[pid]`.
    Pid,
    /// The process's user (uid).
    Uid,
    /// The process's cgroup path.
    Cgroup,
}

impl GroupBy {
    /// The wire name: `comm`, `pid`, `uid` or `cgroup`.
    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Comm => "comm",
            GroupBy::Pid => "pid",
            GroupBy::Uid => "uid",
            GroupBy::Cgroup => "cgroup",
        }
    }
}

/// `GET /v1/timeline`'s parameters: a range and filter as [`RangeParams`], and the buckets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TimelineParams {
    /// Start, as [`RangeParams::since`].
    #[serde(
        default,
        deserialize_with = "field::since",
        skip_serializing_if = "Option::is_none"
    )]
    pub since: Option<TimeParam>,
    /// End, as [`RangeParams::until`].
    #[serde(
        default,
        deserialize_with = "field::until",
        skip_serializing_if = "Option::is_none"
    )]
    pub until: Option<TimeParam>,
    /// Bucket length, whole seconds. Default: a round length giving about 60 buckets, none
    /// shorter than a slice.
    #[serde(
        default,
        deserialize_with = "field::bucket",
        skip_serializing_if = "Option::is_none"
    )]
    pub bucket: Option<u64>,
    /// Grouping (default: command name).
    #[serde(
        default,
        deserialize_with = "field::by",
        skip_serializing_if = "Option::is_none"
    )]
    pub by: Option<GroupBy>,
    /// Groups shown apart from "other" (default 5).
    #[serde(
        default,
        deserialize_with = "field::top",
        skip_serializing_if = "Option::is_none"
    )]
    pub top: Option<usize>,
    /// Only the CPU of stacks with a frame of this name.
    #[serde(
        default,
        deserialize_with = "field::function",
        skip_serializing_if = "Option::is_none"
    )]
    pub function: Option<String>,
    /// As [`RangeParams::pid`].
    #[serde(
        default,
        deserialize_with = "field::pid",
        skip_serializing_if = "Option::is_none"
    )]
    pub pid: Option<u32>,
    /// As [`RangeParams::comm`].
    #[serde(
        default,
        deserialize_with = "field::comm",
        skip_serializing_if = "Option::is_none"
    )]
    pub comm: Option<String>,
    /// As [`RangeParams::uid`].
    #[serde(
        default,
        deserialize_with = "field::uid",
        skip_serializing_if = "Option::is_none"
    )]
    pub uid: Option<u32>,
    /// As [`RangeParams::descendants`].
    #[serde(
        default,
        deserialize_with = "field::descendants",
        skip_serializing_if = "is_false"
    )]
    pub descendants: bool,
    /// As [`RangeParams::cgroup`].
    #[serde(
        default,
        deserialize_with = "field::cgroup",
        skip_serializing_if = "Option::is_none"
    )]
    pub cgroup: Option<String>,
    /// As [`RangeParams::measure`]; the buckets then hold that time in threads (seconds per
    /// second) instead of cores.
    #[serde(
        default,
        deserialize_with = "field::measure",
        skip_serializing_if = "Option::is_none"
    )]
    pub measure: Option<Measure>,
}

impl TimelineParams {
    /// The timeline's `range` and filter, with the rest of `self` (bucket, grouping, top
    /// groups, function) as given.
    pub fn with_range(range: RangeParams) -> TimelineParams {
        TimelineParams {
            since: range.since,
            until: range.until,
            pid: range.pid,
            comm: range.comm,
            uid: range.uid,
            descendants: range.descendants,
            cgroup: range.cgroup,
            measure: range.measure,
            ..TimelineParams::default()
        }
    }

    /// Its range and filter.
    pub fn range(&self) -> RangeParams {
        RangeParams {
            since: self.since,
            until: self.until,
            pid: self.pid,
            comm: self.comm.clone(),
            uid: self.uid,
            descendants: self.descendants,
            cgroup: self.cgroup.clone(),
            measure: self.measure,
            minwidth: None,
        }
    }
}

/// `GET /v1/timeline`'s answer (JSON).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelineAnswer {
    /// Bucket length, seconds.
    pub bucket_seconds: u64,
    /// The coarsest time resolution of the data the buckets were drawn from, whole seconds:
    /// 1, or the length of slices kept without per-second counts (None from a daemon that
    /// did not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution_seconds: Option<u64>,
    /// Why the buckets are longer than asked (the data's resolution), when they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Every bucket of the range, oldest first, empty ones included.
    pub buckets: Vec<TimelineBucket>,
}

/// One bucket of a timeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelineBucket {
    /// Start, UNIX seconds (a multiple of the bucket length).
    pub start: u64,
    /// Cores (threads, for off-CPU and wall-clock time) by group; the groups past the top
    /// ones summed as [`OTHER`].
    pub cpu: BTreeMap<String, f64>,
}

/// The group of a timeline the groups past the top ones are summed in.
pub const OTHER: &str = "other";

/// A query string that could not be read: the parameter and why (serde's message).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadQuery(pub String);

/// `params` as a query string (without the `?`), form-encoded; parameters not given are left
/// out.
pub fn to_query<T: Serialize>(params: &T) -> String {
    // Only the structs above are passed: plain fields that always encode.
    serde_urlencoded::to_string(params).unwrap_or_default()
}

/// A query string (without the `?`; empty: no parameters) as `T`.
pub fn from_query<T: DeserializeOwned>(query: &str) -> Result<T, BadQuery> {
    serde_urlencoded::from_str(query).map_err(|e| BadQuery(e.to_string()))
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Each parameter read with its name put before serde's message.
mod field {
    use super::*;

    fn named<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
        name: &str,
        d: D,
    ) -> Result<T, D::Error> {
        T::deserialize(d).map_err(|e| de::Error::custom(format_args!("{name}: {e}")))
    }

    macro_rules! fields {
        ($($name:ident: $t:ty),* $(,)?) => {$(
            pub fn $name<'de, D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                named(stringify!($name), d)
            }
        )*};
    }

    fields!(
        since: Option<TimeParam>,
        until: Option<TimeParam>,
        pid: Option<u32>,
        comm: Option<String>,
        uid: Option<u32>,
        descendants: bool,
        cgroup: Option<String>,
        measure: Option<Measure>,
        bucket: Option<u64>,
        by: Option<GroupBy>,
        top: Option<usize>,
        function: Option<String>,
        minwidth: Option<f64>,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_query_reads_back_and_leaves_out_what_is_not_given() {
        let params = RangeParams {
            since: Some(TimeParam::At(1_700_000_000_500_000_000)),
            until: Some(TimeParam::At(1_700_000_600_000_000_000)),
            pid: Some(7),
            comm: Some("a b;c/é".into()),
            descendants: true,
            measure: Some(Measure::OffCpu),
            ..RangeParams::default()
        };
        let query = to_query(&params);
        assert_eq!(
            query,
            "since=%401700000000.5&until=%401700000600&pid=7&comm=a+b%3Bc%2F%C3%A9&descendants=true&measure=off_cpu"
        );
        assert_eq!(from_query::<RangeParams>(&query), Ok(params));
        assert_eq!(to_query(&RangeParams::default()), "");
        assert_eq!(from_query::<RangeParams>(""), Ok(RangeParams::default()));
    }

    #[test]
    fn older_clients_forms_still_read() {
        let p: RangeParams =
            from_query("since=1700000000.000&until=-60&descendants=false&measure=cpu").unwrap();
        assert_eq!(p.since, Some(TimeParam::At(1_700_000_000_000_000_000)));
        assert_eq!(
            p.until,
            Some(TimeParam::Ago(std::time::Duration::from_secs(60)))
        );
        assert_eq!(p.measure, Some(Measure::Cpu));
        assert!(!p.descendants);
    }

    #[test]
    fn a_bad_parameter_is_named() {
        let err = |q: &str| from_query::<TimelineParams>(q).unwrap_err().to_string();
        let e = err("since=%40-3600");
        assert!(
            e.starts_with("since: \"@-3600\" is before 1970-01-01"),
            "{e}"
        );
        assert!(err("until=yesterday").starts_with("until: \"yesterday\" is not a time"));
        assert_eq!(err("pid=x"), "pid: invalid digit found in string");
        assert!(err("by=host").starts_with("by: "), "{}", err("by=host"));
        assert!(err("measure=gpu").starts_with("measure: "));
        assert!(err("descendants=maybe").starts_with("descendants: "));
        assert!(err("colour=red").contains("unknown field `colour`"));
    }

    #[test]
    fn minwidth_reads_back_and_merged_frames_name_their_count() {
        let params = RangeParams {
            minwidth: Some(0.05),
            ..RangeParams::default()
        };
        assert_eq!(to_query(&params), "minwidth=0.05");
        assert_eq!(from_query::<RangeParams>("minwidth=0.05"), Ok(params));
        assert!(from_query::<RangeParams>("minwidth=wide")
            .unwrap_err()
            .to_string()
            .starts_with("minwidth: "));
        assert_eq!(merged_frame(37), "[37 narrow frames]");
        assert_eq!(merged_frames_of(&merged_frame(37)), Some(37));
        for other in ["[unknown]", "[ narrow frames]", "[x narrow frames]", "main"] {
            assert_eq!(merged_frames_of(other), None, "{other}");
        }
    }

    #[test]
    fn a_timeline_query_reads_back() {
        let mut params = TimelineParams::with_range(RangeParams {
            since: Some(TimeParam::At(0)),
            uid: Some(1000),
            ..RangeParams::default()
        });
        params.bucket = Some(60);
        params.by = Some(GroupBy::Pid);
        params.top = Some(8);
        params.function = Some("malloc".into());
        let query = to_query(&params);
        assert_eq!(
            query,
            "since=%400&bucket=60&by=pid&top=8&function=malloc&uid=1000"
        );
        let back: TimelineParams = from_query(&query).unwrap();
        assert_eq!(back, params);
        assert_eq!(back.range().uid, Some(1000));
        let answer: TimelineAnswer = serde_json::from_str(
            r#"{"bucket_seconds": 5, "buckets": [{"start": 10, "cpu": {"a": 1.5}}]}"#,
        )
        .unwrap();
        assert_eq!(answer.buckets[0].cpu["a"], 1.5);
    }
}
