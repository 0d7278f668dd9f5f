//! The one duration grammar of profctl's flags (`--duration`, `--window`, `--bucket`, a time
//! ago in `--since`), profilerd's configuration keys (`sampling.slice`, `storage.max_age`, …)
//! and a time ago in the history queries (`since=-10m`).
//!
//! A duration is a decimal number (fractions allowed: `1.5m`) and a unit: `ms`, `s`, `m` or
//! `min`, `h`, `d`; a bare number is seconds. Spaces around it and between the number and
//! the unit are allowed. Each use has its own [`DurationBounds`] (more than zero, whole
//! seconds, at most some years), checked by [`parse_duration`] with one set of messages.
//! The number is read exactly (no floating point): `0.1s` is 100 ms.

use std::fmt;
use std::time::Duration;

/// What a duration looks like, for messages.
pub const EXPECTED: &str =
    "a number of seconds or a number with a unit (ms, s, m or min, h, d), such as 500ms, 90s, 1.5m, 2h or 3d";

/// Nanoseconds in a second.
const NS_PER_SECOND: u128 = 1_000_000_000;

/// A day, in seconds.
const DAY: u64 = 86_400;

/// A year (365 days), in seconds.
const YEAR: u64 = 365 * DAY;

/// Why a duration was refused. The messages quote what was given.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a number with an optional unit.
    #[error("{text:?} is not a duration: expected {EXPECTED}")]
    NotADuration {
        /// What was given.
        text: String,
    },
    /// A number with a unit this grammar does not have.
    #[error("unknown unit {unit:?} in {text:?}: expected ms, s, m or min, h or d")]
    UnknownUnit {
        /// What was given.
        text: String,
        /// The unit.
        unit: String,
    },
    /// Outside this use's bounds (negative durations included).
    #[error("{text:?} is out of range: expected a duration {range}")]
    OutOfRange {
        /// What was given.
        text: String,
        /// The bounds, in words (`of more than zero, at most 10 years`).
        range: String,
    },
    /// A fraction of a second where only whole seconds are taken.
    #[error("{text:?} is not a whole number of seconds: expected a duration {range}")]
    NotWholeSeconds {
        /// What was given.
        text: String,
        /// The bounds, in words.
        range: String,
    },
}

/// The bounds of a duration for one use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurationBounds {
    /// The shortest accepted; [`Duration::ZERO`] accepts zero, one nanosecond means "more
    /// than zero".
    pub min: Duration,
    /// The longest accepted.
    pub max: Duration,
    /// Only whole seconds (`1.5s` refused, `0.5m` taken).
    pub whole_seconds: bool,
}

impl DurationBounds {
    /// More than zero, at most 10 years: profilerd's configuration keys, `profctl record
    /// --duration` and `--window`.
    pub const POSITIVE: DurationBounds = DurationBounds {
        min: Duration::from_nanos(1),
        max: Duration::from_secs(10 * YEAR),
        whole_seconds: false,
    };

    /// Zero to 100 years: a time ago (`--since 10m`, `--before 10m..0`).
    pub const AGO: DurationBounds = DurationBounds {
        min: Duration::ZERO,
        max: Duration::from_secs(100 * YEAR),
        whole_seconds: false,
    };

    /// Whole seconds, at least one, at most 100 years: a timeline's bucket (`--bucket`).
    pub const WHOLE_SECONDS: DurationBounds = DurationBounds {
        min: Duration::from_secs(1),
        max: Duration::from_secs(100 * YEAR),
        whole_seconds: true,
    };

    /// Any length (saturating at [`Duration::MAX`]): a time ago on the wire, which the daemon
    /// bounds as a time (`since=-1e20` is the epoch).
    pub const ANY: DurationBounds = DurationBounds {
        min: Duration::ZERO,
        max: Duration::MAX,
        whole_seconds: false,
    };

    /// The bounds in words: `of more than zero, at most 10 years`.
    pub fn describe(&self) -> String {
        let lower = if self.min.is_zero() {
            String::new()
        } else if self.min == Duration::from_nanos(1) {
            "of more than zero, ".to_string()
        } else {
            format!("of at least {}, ", Spelled(self.min))
        };
        let whole = if self.whole_seconds {
            "in whole seconds, "
        } else {
            ""
        };
        if self.max == Duration::MAX {
            let text = format!("{lower}{whole}").trim_end_matches(", ").to_string();
            return if text.is_empty() {
                "of zero or more".to_string()
            } else {
                text
            };
        }
        format!("{lower}{whole}at most {}", Spelled(self.max))
    }

    /// `d` if it is within these bounds, else the error for `text`.
    pub fn check(&self, d: Duration, text: &str) -> Result<Duration, DurationError> {
        if d < self.min || d > self.max {
            return Err(self.out_of_range(text));
        }
        if self.whole_seconds && d.subsec_nanos() != 0 {
            return Err(DurationError::NotWholeSeconds {
                text: text.to_string(),
                range: self.describe(),
            });
        }
        Ok(d)
    }

    fn out_of_range(&self, text: &str) -> DurationError {
        DurationError::OutOfRange {
            text: text.to_string(),
            range: self.describe(),
        }
    }
}

/// A duration in the grammar's own spelling, for messages: `10 years`, `3d`, `1s`, `500ms`.
struct Spelled(Duration);

impl fmt::Display for Spelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.0;
        if d.subsec_nanos() != 0 {
            return write!(f, "{}ms", d.as_millis());
        }
        let s = d.as_secs();
        match s {
            _ if s >= YEAR && s % YEAR == 0 => {
                write!(f, "{} year{}", s / YEAR, if s == YEAR { "" } else { "s" })
            }
            _ if s >= DAY && s % DAY == 0 => write!(f, "{}d", s / DAY),
            _ if s >= 3600 && s % 3600 == 0 => write!(f, "{}h", s / 3600),
            _ if s >= 60 && s % 60 == 0 => write!(f, "{}m", s / 60),
            _ => write!(f, "{s}s"),
        }
    }
}

/// Nanoseconds in one `unit`, if it is one of the grammar's (`""`: seconds).
fn unit_ns(unit: &str) -> Option<u128> {
    Some(match unit {
        "ms" => 1_000_000,
        "s" | "" => NS_PER_SECOND,
        "m" | "min" => 60 * NS_PER_SECOND,
        "h" => 3600 * NS_PER_SECOND,
        "d" => u128::from(DAY) * NS_PER_SECOND,
        _ => return None,
    })
}

/// A decimal number (`12`, `1.5`, `.5`, `5.`; digits only, at most one point) times
/// `scale`, truncated to an integer; `None` when `number` is not such a number, saturated at
/// `u128::MAX`.
pub(crate) fn scaled_decimal(number: &str, scale: u128) -> Option<u128> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.len() + fraction.len() == 0 || !digits(whole) || !digits(fraction) {
        return None;
    }
    let integer = |s: &str| {
        s.bytes().fold(0u128, |v, b| {
            v.saturating_mul(10).saturating_add(u128::from(b - b'0'))
        })
    };
    // Past 20 decimals a digit is worth less than a nanosecond of a day: dropped, so that
    // the fraction times the scale stays well inside u128.
    let fraction = &fraction[..fraction.len().min(20)];
    let parts = integer(fraction).saturating_mul(scale) / 10u128.pow(fraction.len() as u32);
    let value = integer(whole).saturating_mul(scale).saturating_add(parts);
    Some(value)
}

/// `text` (see the module's doc) within `bounds`.
pub fn parse_duration(text: &str, bounds: DurationBounds) -> Result<Duration, DurationError> {
    let trimmed = text.trim();
    if let Some(rest) = trimmed.strip_prefix('-') {
        // A negative duration is a duration out of range, not a malformed one.
        return match parse_duration(rest, DurationBounds::ANY) {
            Ok(d) if d.is_zero() => bounds.check(d, text),
            Ok(_) | Err(DurationError::OutOfRange { .. }) => Err(bounds.out_of_range(text)),
            Err(e) => Err(e.for_text(text)),
        };
    }
    let split = trimmed
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let unit = unit.trim_start();
    let scale = unit_ns(unit).ok_or_else(|| {
        if number.is_empty() {
            DurationError::NotADuration {
                text: text.to_string(),
            }
        } else {
            DurationError::UnknownUnit {
                text: text.to_string(),
                unit: unit.to_string(),
            }
        }
    })?;
    let ns = scaled_decimal(number, scale).ok_or_else(|| DurationError::NotADuration {
        text: text.to_string(),
    })?;
    // Longer than a Duration holds: the longest, which only unbounded uses take.
    let d = u64::try_from(ns / NS_PER_SECOND).map_or(Duration::MAX, |secs| {
        Duration::new(secs, (ns % NS_PER_SECOND) as u32)
    });
    bounds.check(d, text)
}

impl DurationError {
    /// The same error, quoting `text`.
    fn for_text(self, text: &str) -> DurationError {
        let text = text.to_string();
        match self {
            DurationError::NotADuration { .. } => DurationError::NotADuration { text },
            DurationError::UnknownUnit { unit, .. } => DurationError::UnknownUnit { text, unit },
            DurationError::OutOfRange { range, .. } => DurationError::OutOfRange { text, range },
            DurationError::NotWholeSeconds { range, .. } => {
                DurationError::NotWholeSeconds { text, range }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positive(text: &str) -> Result<Duration, DurationError> {
        parse_duration(text, DurationBounds::POSITIVE)
    }

    #[test]
    fn units_fractions_and_bare_seconds() {
        let s = Duration::from_secs;
        assert_eq!(positive("10"), Ok(s(10)));
        assert_eq!(positive(" 10s "), Ok(s(10)));
        assert_eq!(positive("10 s"), Ok(s(10)));
        assert_eq!(positive("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(positive("1.5m"), Ok(s(90)));
        assert_eq!(positive("10min"), Ok(s(600)));
        assert_eq!(positive("2h"), Ok(s(7200)));
        assert_eq!(positive("3d"), Ok(s(259_200)));
        assert_eq!(positive(".5"), Ok(Duration::from_millis(500)));
        assert_eq!(positive("5."), Ok(s(5)));
        // Read exactly, not through floating point.
        assert_eq!(positive("0.1s"), Ok(Duration::from_millis(100)));
        assert_eq!(positive("1.1ms"), Ok(Duration::from_micros(1100)));
        assert_eq!(positive("0.000000001"), Ok(Duration::from_nanos(1)));
    }

    #[test]
    fn each_mistake_has_its_message() {
        let err = |text: &str, bounds| parse_duration(text, bounds).unwrap_err().to_string();
        assert_eq!(
            err("3 weeks", DurationBounds::POSITIVE),
            "unknown unit \"weeks\" in \"3 weeks\": expected ms, s, m or min, h or d"
        );
        assert_eq!(
            err("1e3", DurationBounds::POSITIVE),
            "unknown unit \"e3\" in \"1e3\": expected ms, s, m or min, h or d"
        );
        for bad in ["", "fast", "1.2.3s", ".", "s"] {
            assert!(
                err(bad, DurationBounds::POSITIVE).contains("is not a duration"),
                "{bad}"
            );
        }
        assert_eq!(
            err("0s", DurationBounds::POSITIVE),
            "\"0s\" is out of range: expected a duration of more than zero, at most 10 years"
        );
        assert_eq!(
            err("-3d", DurationBounds::POSITIVE),
            "\"-3d\" is out of range: expected a duration of more than zero, at most 10 years"
        );
        assert_eq!(
            err("0.0000000001", DurationBounds::POSITIVE),
            "\"0.0000000001\" is out of range: expected a duration of more than zero, at most 10 years"
        );
        assert!(err("3651d", DurationBounds::POSITIVE).contains("at most 10 years"));
        assert!(err(
            "99999999999999999999999999999999999d",
            DurationBounds::POSITIVE
        )
        .contains("out of range"));
        assert_eq!(
            err("1.5s", DurationBounds::WHOLE_SECONDS),
            "\"1.5s\" is not a whole number of seconds: expected a duration of at least 1s, in whole seconds, at most 100 years"
        );
        assert!(err("500ms", DurationBounds::WHOLE_SECONDS).contains("at least 1s"));
        assert!(err("-1", DurationBounds::AGO).contains("at most 100 years"));
    }

    #[test]
    fn bounds_per_use() {
        assert_eq!(parse_duration("0", DurationBounds::AGO), Ok(Duration::ZERO));
        assert_eq!(
            parse_duration("-0", DurationBounds::AGO),
            Ok(Duration::ZERO)
        );
        assert_eq!(
            parse_duration("36500d", DurationBounds::AGO),
            Ok(Duration::from_secs(100 * YEAR))
        );
        assert_eq!(
            parse_duration("0.5m", DurationBounds::WHOLE_SECONDS),
            Ok(Duration::from_secs(30))
        );
        assert_eq!(
            parse_duration("1e", DurationBounds::ANY).unwrap_err(),
            DurationError::UnknownUnit {
                text: "1e".into(),
                unit: "e".into()
            }
        );
        let huge = "9".repeat(40);
        assert_eq!(
            parse_duration(&huge, DurationBounds::ANY),
            Ok(Duration::MAX)
        );
    }
}
