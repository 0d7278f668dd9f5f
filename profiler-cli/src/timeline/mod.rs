//! A CPU timeline as profilerd answers it (`GET /v1/timeline`): buckets of cores by group;
//! drawn in the terminal (`chart`) or as an SVG (`svg`).

pub mod chart;
pub mod svg;

use daemon_api::history::TimelineAnswer;

/// The group profilerd sums the rest in.
pub use daemon_api::history::OTHER;

/// One bucket: its start and its CPU by group.
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    /// Start, UNIX seconds.
    pub start: u64,
    /// Cores by group.
    pub cpu: Vec<(String, f64)>,
}

impl Bucket {
    /// Cores of all groups.
    pub fn total(&self) -> f64 {
        self.cpu.iter().fold(0.0, |sum, (_, c)| sum + c)
    }

    /// Cores of `group` (0 when absent).
    pub fn of(&self, group: &str) -> f64 {
        self.cpu
            .iter()
            .find(|(g, _)| g == group)
            .map_or(0.0, |(_, c)| *c)
    }
}

/// A timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Timeline {
    /// Bucket length, seconds.
    pub bucket_seconds: u64,
    /// The coarsest time resolution of the data drawn, seconds (None: a daemon that does not
    /// say, whose slices are its resolution).
    pub resolution_seconds: Option<u64>,
    /// The daemon's note, when it widened the buckets asked for to the data's resolution.
    pub note: Option<String>,
    /// Buckets, oldest first.
    pub buckets: Vec<Bucket>,
}

impl Timeline {
    /// The daemon's JSON answer.
    pub fn parse(json: &[u8]) -> Result<Timeline, String> {
        let answer: TimelineAnswer =
            serde_json::from_slice(json).map_err(|e| format!("profilerd's timeline: {e}"))?;
        if answer.bucket_seconds == 0 {
            return Err("profilerd's timeline: a bucket of 0 seconds".into());
        }
        Ok(Timeline {
            bucket_seconds: answer.bucket_seconds,
            resolution_seconds: answer.resolution_seconds,
            note: answer.note,
            buckets: answer
                .buckets
                .into_iter()
                .map(|b| Bucket {
                    start: b.start,
                    cpu: b.cpu.into_iter().collect(),
                })
                .collect(),
        })
    }

    /// The groups, most CPU first, "other" last.
    pub fn groups(&self) -> Vec<String> {
        let mut totals: Vec<(String, f64)> = Vec::new();
        for (g, c) in self.buckets.iter().flat_map(|b| &b.cpu) {
            match totals.iter_mut().find(|(name, _)| name == g) {
                Some((_, t)) => *t += c,
                None => totals.push((g.clone(), *c)),
            }
        }
        totals.sort_by(|a, b| {
            (a.0 == OTHER)
                .cmp(&(b.0 == OTHER))
                .then(b.1.total_cmp(&a.1))
                .then_with(|| a.0.cmp(&b.0))
        });
        totals.into_iter().map(|(g, _)| g).collect()
    }

    /// The largest bucket total, cores.
    pub fn peak(&self) -> f64 {
        self.buckets.iter().map(Bucket::total).fold(0.0, f64::max)
    }
}

/// `cores` as printed: two decimals.
pub fn cores(cores: f64) -> String {
    format!("{cores:.2}")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Three 5-s buckets: a busy one, an idle one, a mixed one.
    pub fn example() -> Timeline {
        Timeline::parse(
            br#"{"bucket_seconds": 5, "resolution_seconds": 1, "buckets": [
                {"start": 1700000000, "cpu": {"burst": 1.0, "other": 0.05}},
                {"start": 1700000005, "cpu": {}},
                {"start": 1700000010, "cpu": {"burst": 0.5, "sshd": 0.25, "other": 0.1}}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn parse_and_groups() {
        let t = example();
        assert_eq!(t.bucket_seconds, 5);
        assert_eq!((t.resolution_seconds, t.note.as_deref()), (Some(1), None));
        assert_eq!(t.groups(), ["burst", "sshd", OTHER]);
        assert_eq!(t.buckets[2].of("sshd"), 0.25);
        assert!((t.peak() - 1.05).abs() < 1e-9);
        assert!(Timeline::parse(b"{}").is_err());
        assert!(Timeline::parse(br#"{"bucket_seconds": 0, "buckets": []}"#).is_err());
        assert!(Timeline::parse(
            br#"{"bucket_seconds": 5, "buckets": [{"start": 1, "cpu": {"a": "x"}}]}"#
        )
        .is_err());
        assert!(Timeline::parse(br#"{"bucket_seconds": 5, "buckets": [{"start": 1}]}"#).is_err());
    }
}
