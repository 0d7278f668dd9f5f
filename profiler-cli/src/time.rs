//! Times on the command line (`--since`, `--until`, `--before`, `--after`): parsing, turning
//! them into a range of UNIX seconds, and showing times in local time. Local time is the
//! system's (`TZ`, else `/etc/localtime`), through jiff.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;
use jiff::Timestamp;

use daemon_api::{parse_duration, DurationBounds, DurationError};

use crate::error::UsageError;

/// What every time flag's help says it takes.
pub const FORMS: &str = "a duration ago (90s, 10m, 2h, 1d), @UNIX-SECONDS, a local time today \
(14:02, 14:02:30; yesterday when that is still to come), a local date and time \
(2026-11-26 14:02[:30]) or RFC 3339 with an offset (2026-11-26T14:02:00+01:00)";

/// A time on the command line: some time ago, absolute, or a local wall-clock time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimeArg {
    /// This long before now.
    Ago(Duration),
    /// UNIX time in seconds.
    Unix(f64),
    /// A local time of day: today, or yesterday when today's is still to come.
    Clock(Time),
    /// A local date and time.
    Local(DateTime),
}

impl TimeArg {
    /// UNIX time in seconds, with `now` the current one and `tz` the local time zone.
    pub fn unix_seconds_in(self, now: f64, tz: &TimeZone) -> Result<f64, UsageError> {
        let unix_of = |dt: DateTime| {
            tz.to_ambiguous_timestamp(dt)
                .compatible()
                .map(|t| t.as_millisecond() as f64 / 1e3)
                .map_err(|e| UsageError(format!("{dt} in local time: {e}")))
        };
        match self {
            TimeArg::Ago(d) => Ok(now - d.as_secs_f64()),
            TimeArg::Unix(t) => Ok(t),
            TimeArg::Local(dt) => unix_of(dt),
            TimeArg::Clock(time) => {
                let today = local_datetime(now, tz).date();
                let at = unix_of(today.to_datetime(time))?;
                if at <= now {
                    return Ok(at);
                }
                let yesterday = today
                    .yesterday()
                    .map_err(|e| UsageError(format!("the day before {today}: {e}")))?;
                unix_of(yesterday.to_datetime(time))
            }
        }
    }
}

/// `--since`/`--until`: see [`FORMS`].
pub fn parse_time(text: &str) -> Result<TimeArg, String> {
    let text = text.trim();
    if let Some(unix) = text.strip_prefix('@') {
        return match unix.parse::<f64>() {
            Ok(t) if t.is_finite() && t >= 0.0 => Ok(TimeArg::Unix(t)),
            _ => Err(format!("not UNIX seconds: {text:?}")),
        };
    }
    if text.contains(':') {
        return parse_wall_clock(text);
    }
    parse_ago(text)
}

/// `HH:MM[:SS]`, `YYYY-MM-DD HH:MM[:SS]` (or with a `T`), RFC 3339 with an offset.
fn parse_wall_clock(text: &str) -> Result<TimeArg, String> {
    let bad = || {
        format!("not a time: {text:?}; expected HH:MM[:SS], YYYY-MM-DD HH:MM[:SS] or RFC 3339 (2026-11-26T14:02:00+01:00)")
    };
    if !text.contains('-') {
        return clock_time(text).map(TimeArg::Clock).ok_or_else(bad);
    }
    // With an offset (Z, +01:00): an instant.
    if let Ok(t) = text.parse::<Timestamp>() {
        return Ok(TimeArg::Unix(t.as_millisecond() as f64 / 1e3));
    }
    let (date, time) = text.split_once([' ', 'T', 't']).ok_or_else(bad)?;
    let date: Date = date.parse().map_err(|_| bad())?;
    let time = clock_time(time).ok_or_else(bad)?;
    Ok(TimeArg::Local(date.to_datetime(time)))
}

/// `HH:MM` or `HH:MM:SS` (fractions of a second allowed), two-digit fields.
fn clock_time(text: &str) -> Option<Time> {
    let mut fields = text.splitn(3, ':');
    let field = |f: Option<&str>| -> Option<i8> {
        let f = f?;
        if f.len() != 2 || !f.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        f.parse().ok()
    };
    let hour = field(fields.next())?;
    let minute = field(fields.next())?;
    let (second, nanos) = match fields.next() {
        None => (0, 0),
        Some(s) => {
            let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
            let nanos = if fraction.is_empty() {
                0
            } else {
                if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                format!("{fraction:0<9}").parse().ok()?
            };
            (field(Some(whole))?, nanos)
        }
    };
    Time::new(hour, minute, second, nanos).ok()
}

/// `10m`, `90s`, `2h`, `1d`, `500ms` ago: a duration in daemon-api's grammar, at most 100
/// years.
fn parse_ago(text: &str) -> Result<TimeArg, String> {
    match parse_duration(text, DurationBounds::AGO) {
        Ok(d) => Ok(TimeArg::Ago(d)),
        // Not even a number: say every form a time may take.
        Err(DurationError::NotADuration { .. }) => Err(format!("expected {FORMS}; got {text:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// `--bucket`: a duration of whole seconds (`5s`, `1m`, `1h`), in seconds.
pub fn parse_bucket(text: &str) -> Result<u64, String> {
    parse_duration(text, DurationBounds::WHOLE_SECONDS)
        .map(|d| d.as_secs())
        .map_err(|e| e.to_string())
}

/// `--duration`, `--window`: a duration of more than zero (`10`, `1.5`, `90s`, `10m`), at most
/// 10 years.
pub fn parse_positive(text: &str) -> Result<Duration, String> {
    parse_duration(text, DurationBounds::POSITIVE).map_err(|e| e.to_string())
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

/// The system's time zone (`TZ`, else `/etc/localtime`; UTC when neither can be read).
pub fn local_zone() -> TimeZone {
    TimeZone::try_system().unwrap_or(TimeZone::UTC)
}

/// `since..until` (until: now when not given) in UNIX seconds, as of `now` in the system's
/// time zone; a range that does not start before it ends is a usage error.
pub fn resolve_range(
    since: TimeArg,
    until: Option<TimeArg>,
    now: f64,
) -> Result<(f64, f64), UsageError> {
    resolve_range_in(since, until, now, &local_zone())
}

/// [`resolve_range`] in the time zone `tz`.
pub fn resolve_range_in(
    since: TimeArg,
    until: Option<TimeArg>,
    now: f64,
    tz: &TimeZone,
) -> Result<(f64, f64), UsageError> {
    let since = since.unix_seconds_in(now, tz)?;
    let until = match until {
        Some(u) => u.unix_seconds_in(now, tz)?,
        None => now,
    };
    for (what, t) in [("start", since), ("end", until)] {
        // profilerd would take a negative time for seconds ago; there is no history before.
        if t < 0.0 {
            return Err(UsageError(format!(
                "the {what} of a range ({}) is before 1970-01-01 00:00:00 UTC, the UNIX epoch: profilerd keeps no time before it",
                local_label(t, tz)
            )));
        }
    }
    if since >= until {
        return Err(UsageError(format!(
            "the start of a range ({}) must be before its end ({})",
            local_label(since, tz),
            local_label(until, tz)
        )));
    }
    Ok((since, until))
}

/// `unix` (seconds) as a local date and time in `tz`.
fn local_datetime(unix: f64, tz: &TimeZone) -> DateTime {
    let t = Timestamp::from_millisecond((unix * 1e3) as i64).unwrap_or(Timestamp::UNIX_EPOCH);
    t.to_zoned(tz.clone()).datetime()
}

/// `unix` as `YYYY-MM-DD HH:MM:SS` in `tz`.
fn local_label(unix: f64, tz: &TimeZone) -> String {
    local_datetime(unix, tz).strftime("%F %T").to_string()
}

/// `unix` as the local time of day, `HH:MM:SS`.
pub fn local_clock(unix: f64, tz: &TimeZone) -> String {
    local_datetime(unix, tz).strftime("%T").to_string()
}

/// A range in local time, for summaries and subtitles: `2026-11-26 14:02:00 to 14:12:00 UTC+01`
/// (the end's date only when it differs), with the zone's abbreviation.
pub fn local_range(since: f64, until: f64, tz: &TimeZone) -> String {
    let (a, b) = (local_datetime(since, tz), local_datetime(until, tz));
    let end = if a.date() == b.date() {
        b.strftime("%T").to_string()
    } else {
        b.strftime("%F %T").to_string()
    };
    let zone = Timestamp::from_millisecond((until * 1e3) as i64)
        .map(|t| t.to_zoned(tz.clone()).strftime("%Z").to_string())
        .unwrap_or_default();
    format!("{} to {end} {zone}", a.strftime("%F %T"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-03-29 00:00:30 in Europe/Berlin (CET, UTC+1), as UNIX seconds.
    fn just_after_midnight(tz: &TimeZone) -> f64 {
        let dt: DateTime = "2026-03-29T00:00:30".parse().unwrap();
        tz.to_ambiguous_timestamp(dt)
            .compatible()
            .unwrap()
            .as_second() as f64
    }

    #[test]
    fn durations_and_unix_times() {
        let tz = TimeZone::UTC;
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
        let (since, until) =
            resolve_range_in(parse_time("10m").unwrap(), None, 1000.0, &tz).expect("a range");
        assert_eq!((since, until), (400.0, 1000.0));
        let err = resolve_range_in(
            parse_time("1m").unwrap(),
            parse_time("2m").ok(),
            1000.0,
            &tz,
        );
        assert!(err.unwrap_err().0.contains("must be before its end"));
        assert_eq!(parse_bucket("5s"), Ok(5));
        assert_eq!(parse_bucket("2m"), Ok(120));
        assert_eq!(parse_bucket("60"), Ok(60));
        assert!(parse_bucket("500ms").is_err());
        assert!(parse_bucket("1.5s").is_err());
        // One grammar: what --bucket takes, --duration takes (with fractions).
        assert_eq!(parse_positive("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_positive("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_positive("250ms"), Ok(Duration::from_millis(250)));
        for bad in ["0", "-3", "1e20", "inf", "10x", ""] {
            assert!(parse_positive(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_time("10x").unwrap_err(),
            "unknown unit \"x\" in \"10x\": expected ms, s, m or min, h or d"
        );
        assert!(parse_time("yesterday")
            .unwrap_err()
            .starts_with("expected a duration ago"));
    }

    #[test]
    fn a_time_before_1970_is_refused() {
        let tz = TimeZone::UTC;
        let now = 1_700_000_000.0;
        for (since, until) in [
            ("1969-12-31 23:00", None),
            ("1969-12-31T23:00:00Z", None),
            ("1969-12-31 22:00", Some("1969-12-31 23:00")),
        ] {
            let err = resolve_range_in(
                parse_time(since).unwrap(),
                until.map(|u| parse_time(u).unwrap()),
                now,
                &tz,
            )
            .unwrap_err()
            .0;
            assert!(
                err.contains("1969-12-31") && err.contains("before 1970-01-01 00:00:00 UTC"),
                "{since}: {err}"
            );
        }
        // The epoch itself is a time profilerd may be asked for.
        assert!(resolve_range_in(parse_time("@0").unwrap(), None, now, &tz).is_ok());
    }

    #[test]
    fn wall_clock_times_in_a_zone_other_than_utc() {
        let tz = TimeZone::get("Europe/Berlin").unwrap();
        let now = just_after_midnight(&tz);
        let at = |text: &str| parse_time(text).unwrap().unix_seconds_in(now, &tz).unwrap();
        // Today's 00:00:10 has passed: 20 s ago.
        assert_eq!(at("00:00:10"), now - 20.0);
        // 23:59 is still to come today: yesterday's, 90 s ago.
        assert_eq!(at("23:59"), now - 90.0);
        // 00:01 too: yesterday's, a day less 30 s ago.
        assert_eq!(at("00:01"), now - 86_400.0 + 30.0);
        // A local date and time, and the same instant in RFC 3339 and as UNIX seconds.
        assert_eq!(at("2026-03-28 23:59:00"), now - 90.0);
        assert_eq!(at("2026-03-28T23:59"), now - 90.0);
        assert_eq!(at("2026-03-28T22:59:00Z"), now - 90.0);
        assert_eq!(at("2026-03-29T00:59:00+02:00"), now - 90.0);
        // That night the clocks go forward at 02:00: 03:30 is 1.5 h after 01:00.
        let one = at("2026-03-29 01:00");
        assert_eq!(at("2026-03-29 03:30") - one, 5400.0);
        // A range given in local time reads back in it.
        let (since, until) =
            resolve_range_in(parse_time("23:59").unwrap(), None, now, &tz).unwrap();
        assert_eq!(
            local_range(since, until, &tz),
            "2026-03-28 23:59:00 to 2026-03-29 00:00:30 CET"
        );
        assert_eq!(local_clock(until, &tz), "00:00:30");
        for bad in [
            "24:00",
            "1:02",
            "12:60",
            "2026-13-01 10:00",
            "10:00:00.1234567890",
        ] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_time("12:34:56.5"),
            Ok(TimeArg::Clock(Time::new(12, 34, 56, 500_000_000).unwrap()))
        );
    }

    #[test]
    fn the_system_zone_follows_tz() {
        // Only this test sets TZ; jiff reads it whenever the system zone is asked for.
        std::env::set_var("TZ", "Asia/Kolkata");
        let tz = local_zone();
        assert_eq!(tz.iana_name(), Some("Asia/Kolkata"));
        let now = 1_700_000_000.0; // 2023-11-15 03:43:20 IST
        assert_eq!(local_clock(now, &tz), "03:43:20");
        let (since, _) = resolve_range(parse_time("03:40").unwrap(), None, now).unwrap();
        assert_eq!(since, now - 200.0);
    }
}
