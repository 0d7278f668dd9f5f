//! Times on the command line (`--since`, `--until`, `--before`, `--after`): parsing, and
//! turning them into a range of UNIX seconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::UsageError;

/// A time on the command line: some time ago, or absolute.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimeArg {
    /// This long before now.
    Ago(Duration),
    /// UNIX time in seconds.
    Unix(f64),
}

impl TimeArg {
    /// UNIX time in seconds, with `now` the current one.
    pub fn unix_seconds(self, now: f64) -> f64 {
        match self {
            TimeArg::Ago(d) => now - d.as_secs_f64(),
            TimeArg::Unix(t) => t,
        }
    }
}

/// `--since`/`--until`: `10m`, `90s`, `2h`, `1d`, `500ms`, or `@UNIX-SECONDS`.
pub fn parse_time(text: &str) -> Result<TimeArg, String> {
    if let Some(unix) = text.strip_prefix('@') {
        return match unix.parse::<f64>() {
            Ok(t) if t.is_finite() && t >= 0.0 => Ok(TimeArg::Unix(t)),
            _ => Err(format!("not UNIX seconds: {text:?}")),
        };
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| {
        format!("expected a duration ago (10m, 2h, 90s, 1d) or @UNIX-SECONDS, got {text:?}")
    })?;
    let scale = match unit {
        "ms" => 1e-3,
        "s" | "" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => {
            return Err(format!(
                "unknown unit in {text:?}: expected ms, s, m, h or d"
            ))
        }
    };
    let secs = value * scale;
    if !secs.is_finite() || secs > 100.0 * 365.0 * 86_400.0 {
        return Err(format!("out of range: {text:?}"));
    }
    Ok(TimeArg::Ago(Duration::from_secs_f64(secs)))
}

/// `--before`/`--after`: `SINCE..UNTIL`, each as [`parse_time`] takes it.
pub fn parse_range(text: &str) -> Result<(TimeArg, TimeArg), String> {
    let (since, until) = text
        .split_once("..")
        .ok_or_else(|| format!("expected SINCE..UNTIL (e.g. 10m..5m), got {text:?}"))?;
    Ok((parse_time(since)?, parse_time(until)?))
}

/// Now, in UNIX seconds.
pub fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `since..until` (until: now when not given) in UNIX seconds, as of `now`; a range that
/// does not start before it ends is a usage error.
pub fn resolve_range(
    since: TimeArg,
    until: Option<TimeArg>,
    now: f64,
) -> Result<(f64, f64), UsageError> {
    let since = since.unix_seconds(now);
    let until = until.map_or(now, |u| u.unix_seconds(now));
    if since >= until {
        return Err(UsageError(format!(
            "the start of a range ({since:.0}) must be before its end ({until:.0})"
        )));
    }
    Ok((since, until))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_ranges() {
        assert_eq!(parse_time("90s"), Ok(TimeArg::Ago(Duration::from_secs(90))));
        assert_eq!(
            parse_time("2h"),
            Ok(TimeArg::Ago(Duration::from_secs(7200)))
        );
        assert_eq!(parse_time("@1700000000"), Ok(TimeArg::Unix(1.7e9)));
        assert!(parse_time("10x").is_err());
        assert!(parse_time("@-1").is_err());
        assert!(parse_range("10m..5m").is_ok());
        assert!(parse_range("10m").is_err());
        let (since, until) = resolve_range(parse_time("10m").unwrap(), None, 1000.0).unwrap();
        assert_eq!((since, until), (400.0, 1000.0));
        let err = resolve_range(parse_time("1m").unwrap(), parse_time("2m").ok(), 1000.0);
        assert!(err.unwrap_err().0.contains("must be before its end"));
    }
}
