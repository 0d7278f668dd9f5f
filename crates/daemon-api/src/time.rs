//! A time as a query parameter (`since`, `until` of the history queries): an instant, sent as
//! `@UNIX-SECONDS`, or a time before the daemon's now, sent as `-DURATION`. The two cannot be
//! mistaken for each other: a time before 1970 is refused ([`TimeError::BeforeEpoch`]), never
//! read as a time ago.
//!
//! Forms read (older clients' included):
//! - `@1700000000.25`: UNIX seconds, fractions allowed (what profctl sends); `@-5` is
//!   refused as before the epoch;
//! - `1700000000.25`, `1.7e9`: a non-negative number, UNIX seconds as well;
//! - `-600`, `-1e3`: a negative number, that many seconds before now;
//! - `-10m`, `-1.5h`: a duration in the grammar of [`crate::duration`] before now.
//!
//! Times past what nanoseconds since 1970 can hold saturate (`@1e20` is the last instant,
//! `-1e20` the epoch itself).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::duration::{parse_duration, scaled_decimal, DurationBounds};

/// What a time parameter looks like, for messages.
pub const EXPECTED: &str =
    "@UNIX-SECONDS (fractions allowed), or -DURATION for that long before now (-600, -10m)";

/// Nanoseconds in a second.
const NS_PER_SECOND: u64 = 1_000_000_000;

/// A time parameter: an instant, or a time before now (resolved by the daemon with its
/// clock, [`TimeParam::resolve`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeParam {
    /// An instant: nanoseconds since 1970-01-01 00:00:00 UTC. Sent as `@SECONDS`.
    At(u64),
    /// This long before the daemon's now. Sent as `-SECONDS`.
    Ago(Duration),
}

/// Why a time parameter was refused. The messages quote what was given.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// An instant before the UNIX epoch (1970-01-01 00:00:00 UTC).
    #[error("{text:?} is before 1970-01-01 00:00:00 UTC (the UNIX epoch): profilerd keeps no time before it")]
    BeforeEpoch {
        /// What was given.
        text: String,
    },
    /// Not one of the forms.
    #[error("{text:?} is not a time: expected {EXPECTED}")]
    NotATime {
        /// What was given.
        text: String,
    },
}

impl TimeParam {
    /// The instant `seconds` after the epoch (fractions kept to the nanosecond, huge values
    /// saturated), or why it cannot be one: before the epoch, or not a number.
    pub fn at_unix_seconds(seconds: f64) -> Result<TimeParam, TimeError> {
        if seconds.is_nan() {
            return Err(TimeError::NotATime {
                text: seconds.to_string(),
            });
        }
        if seconds < 0.0 {
            return Err(TimeError::BeforeEpoch {
                text: format!("@{seconds}"),
            });
        }
        // `as` saturates: +inf and 1e20 are the last instant.
        Ok(TimeParam::At((seconds * 1e9) as u64))
    }

    /// The instant, UNIX ns, with `now_ns` the daemon's now (a time ago reaching past the
    /// epoch is the epoch).
    pub fn resolve(self, now_ns: u64) -> u64 {
        match self {
            TimeParam::At(ns) => ns,
            TimeParam::Ago(d) => {
                now_ns.saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            }
        }
    }
}

/// `ns` as seconds with the fraction that is there (`1700000000`, `1700000000.25`).
fn seconds(ns: u128) -> String {
    let (whole, fraction) = (
        ns / u128::from(NS_PER_SECOND),
        ns % u128::from(NS_PER_SECOND),
    );
    if fraction == 0 {
        return whole.to_string();
    }
    let digits = format!("{fraction:09}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

impl fmt::Display for TimeParam {
    /// The wire form: `@SECONDS` or `-SECONDS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TimeParam::At(ns) => write!(f, "@{}", seconds(u128::from(*ns))),
            TimeParam::Ago(d) => write!(f, "-{}", seconds(d.as_nanos())),
        }
    }
}

impl FromStr for TimeParam {
    type Err = TimeError;

    /// Any of the forms in the module's doc.
    fn from_str(text: &str) -> Result<TimeParam, TimeError> {
        let trimmed = text.trim();
        let not_a_time = || TimeError::NotATime {
            text: text.to_string(),
        };
        if let Some(unix) = trimmed.strip_prefix('@') {
            let unix = unix.trim_start();
            if unix.starts_with('-') {
                return Err(TimeError::BeforeEpoch {
                    text: text.to_string(),
                });
            }
            if let Some(ns) = scaled_decimal(unix, u128::from(NS_PER_SECOND)) {
                return Ok(TimeParam::At(u64::try_from(ns).unwrap_or(u64::MAX)));
            }
            return match unix.parse::<f64>() {
                Ok(v) if v.is_finite() => TimeParam::at_unix_seconds(v),
                _ => Err(not_a_time()),
            };
        }
        // The numeric forms older clients send: seconds, or negative: seconds ago.
        if let Ok(v) = trimmed.parse::<f64>() {
            if !v.is_finite() {
                return Err(not_a_time());
            }
            if v >= 0.0 && !trimmed.starts_with('-') {
                return TimeParam::at_unix_seconds(v);
            }
            return Ok(TimeParam::Ago(
                Duration::try_from_secs_f64(-v).unwrap_or(Duration::MAX),
            ));
        }
        if let Some(ago) = trimmed.strip_prefix('-') {
            return parse_duration(ago, DurationBounds::ANY)
                .map(TimeParam::Ago)
                .map_err(|_| not_a_time());
        }
        Err(not_a_time())
    }
}

impl Serialize for TimeParam {
    /// The wire form, as a string.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TimeParam {
    /// A string in any of the forms, or (JSON) a number as older clients' numeric form.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TimeParam, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TimeParam;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TimeParam, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<TimeParam, E> {
                v.to_string().parse().map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TimeParam, E> {
                v.to_string().parse().map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TimeParam, E> {
                v.to_string().parse().map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<TimeParam, TimeError> {
        text.parse()
    }

    #[test]
    fn absolute_and_relative_forms() {
        let s = 1_000_000_000;
        assert_eq!(parsed("@1700000000"), Ok(TimeParam::At(1_700_000_000 * s)));
        assert_eq!(
            parsed("@1700000000.25"),
            Ok(TimeParam::At(1_700_000_000 * s + s / 4))
        );
        assert_eq!(parsed("@1.7e9"), Ok(TimeParam::At(1_700_000_000 * s)));
        assert_eq!(parsed("@0"), Ok(TimeParam::At(0)));
        // Older clients' numbers: absolute when not negative, seconds ago when negative.
        assert_eq!(
            parsed("1700000000.5"),
            Ok(TimeParam::At(1_700_000_000 * s + s / 2))
        );
        assert_eq!(parsed("-600"), Ok(TimeParam::Ago(Duration::from_secs(600))));
        assert_eq!(parsed("-0"), Ok(TimeParam::Ago(Duration::ZERO)));
        assert_eq!(parsed("-10m"), Ok(TimeParam::Ago(Duration::from_secs(600))));
        assert_eq!(
            parsed("-1.5h"),
            Ok(TimeParam::Ago(Duration::from_secs(5400)))
        );
        // Huge times saturate.
        assert_eq!(parsed("@1e20"), Ok(TimeParam::At(u64::MAX)));
        assert_eq!(parsed("1e20"), Ok(TimeParam::At(u64::MAX)));
        assert_eq!(
            parsed(&format!("@{}", "9".repeat(30))),
            Ok(TimeParam::At(u64::MAX))
        );
        assert_eq!(parsed("-1e20").unwrap().resolve(5 * s), 0);
        assert_eq!(parsed("-2").unwrap().resolve(5 * s), 3 * s);
        assert_eq!(parsed("@2").unwrap().resolve(5 * s), 2 * s);
    }

    #[test]
    fn a_time_before_the_epoch_is_refused_not_read_as_a_time_ago() {
        for text in ["@-3600", "@ -1", "@-0.5", "@-1e3"] {
            assert_eq!(
                parsed(text),
                Err(TimeError::BeforeEpoch { text: text.into() }),
                "{text}"
            );
        }
        assert_eq!(
            parsed("@-3600").unwrap_err().to_string(),
            "\"@-3600\" is before 1970-01-01 00:00:00 UTC (the UNIX epoch): profilerd keeps no time before it"
        );
        assert!(matches!(
            TimeParam::at_unix_seconds(-3600.0),
            Err(TimeError::BeforeEpoch { .. })
        ));
        for bad in [
            "", "@", "@x", "@nan", "@inf", "nan", "inf", "-inf", "x", "-x", "10m", "-3 weeks",
        ] {
            assert!(
                matches!(parsed(bad), Err(TimeError::NotATime { .. })),
                "{bad}: {:?}",
                parsed(bad)
            );
        }
    }

    #[test]
    fn the_wire_form_reads_back() {
        for t in [
            TimeParam::At(0),
            TimeParam::At(1_700_000_000_123_000_000),
            TimeParam::At(u64::MAX),
            TimeParam::Ago(Duration::from_millis(1500)),
        ] {
            assert_eq!(parsed(&t.to_string()), Ok(t));
        }
        assert_eq!(
            TimeParam::At(1_700_000_000_250_000_000).to_string(),
            "@1700000000.25"
        );
        assert_eq!(TimeParam::Ago(Duration::from_secs(600)).to_string(), "-600");
        assert_eq!(
            TimeParam::at_unix_seconds(1_700_000_000.5)
                .unwrap()
                .to_string(),
            "@1700000000.5"
        );
    }
}
