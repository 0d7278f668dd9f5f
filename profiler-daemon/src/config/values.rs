//! The configuration's value types (durations, sizes, frequencies, counts, …): each range-checked
//! as it is read, with a message saying what was expected.

use std::fmt;
use std::time::Duration;

use daemon_api::DurationBounds;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A percentage of one core: more than 0, at most 10000.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Percent(pub f64);

/// A tracing filter, checked when read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFilter(pub String);

/// A sampling frequency in Hz: 1 to 100000.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frequency(pub u64);

/// A duration: `"10s"`, `"5m"`, `"2h"`, `"3d"`, `"1.5m"`, `"500ms"` (or a number of
/// seconds); more than zero, at most 10 years.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seconds(pub Duration);

/// A size in bytes: `"64MiB"`, `"1GiB"`, `"512KiB"`, `"10MB"` (or a number of bytes); more
/// than zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

/// Bytes of user stack copied per sample: a multiple of 8, 0 to 61440.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackBytes(pub u32);

/// A share of a whole, in percent: 1 to 100.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SharePercent(pub u8);

/// A queue length or a count: 1 to 1024.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLen(pub usize);

/// How user stacks are walked.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CallGraphName {
    /// Frame pointers, followed by the kernel.
    Fp,
    /// DWARF unwinding of a copy of the user stack.
    Dwarf,
    /// DWARF, continued from the frame-pointer chain where the copy runs out.
    Auto,
}

impl CallGraphName {
    /// The recorder's value.
    pub fn to_recorder(self) -> recorder::CallGraph {
        match self {
            CallGraphName::Fp => recorder::CallGraph::Fp,
            CallGraphName::Dwarf => recorder::CallGraph::Dwarf,
            CallGraphName::Auto => recorder::CallGraph::Auto,
        }
    }
}

/// Parse a duration as the config spells it: the grammar profctl's flags take too
/// (`daemon_api::duration`), more than zero and at most 10 years.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    daemon_api::parse_duration(text, DurationBounds::POSITIVE).map_err(|e| e.to_string())
}

/// Parse a size as the config spells it.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let expected = "a size such as \"64MiB\" or \"1GiB\"";
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not {expected}"))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: expected {expected}"
            ))
        }
    };
    match value.checked_mul(scale) {
        Some(0) | None => Err(format!(
            "{text:?} is out of range: expected {expected}, more than zero"
        )),
        Some(n) => Ok(n),
    }
}

/// A visitor taking a string (parsed by `parse`) or an integer (checked by `int`).
struct TextOrInt<T> {
    expecting: &'static str,
    parse: fn(&str) -> Result<T, String>,
    int: fn(i64) -> Result<T, String>,
}

impl<T> Visitor<'_> for TextOrInt<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.parse)(v).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        (self.int)(v).map_err(E::custom)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        (self.int)(i64::try_from(v).unwrap_or(i64::MAX)).map_err(E::custom)
    }
}

/// A visitor taking an integer in `min..=max`.
struct IntIn {
    expecting: &'static str,
    min: i64,
    max: i64,
}

impl Visitor<'_> for IntIn {
    type Value = i64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
        if (self.min..=self.max).contains(&v) {
            Ok(v)
        } else {
            Err(E::custom(format!(
                "{v} is out of range: expected {}",
                self.expecting
            )))
        }
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
        self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Seconds, D::Error> {
        d.deserialize_any(TextOrInt {
            expecting: daemon_api::duration::EXPECTED,
            parse: |s| parse_duration(s).map(Seconds),
            // Seconds, through the same grammar and bounds (and messages).
            int: |n| parse_duration(&n.to_string()).map(Seconds),
        })
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        d.deserialize_any(TextOrInt {
            expecting: "a size such as \"64MiB\" or \"1GiB\" (or bytes), more than zero",
            parse: |s| parse_bytes(s).map(Bytes),
            int: |n| {
                if n > 0 {
                    Ok(Bytes(n as u64))
                } else {
                    Err(format!(
                        "{n} is out of range: expected a size of more than zero bytes"
                    ))
                }
            },
        })
    }
}

impl<'de> Deserialize<'de> for Frequency {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Frequency, D::Error> {
        d.deserialize_i64(IntIn {
            expecting: "a frequency in Hz, from 1 to 100000",
            min: 1,
            max: 100_000,
        })
        .map(|n| Frequency(n as u64))
    }
}

impl<'de> Deserialize<'de> for Percent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Percent, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Percent;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a percentage of one core, more than 0 and at most 10000")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Percent, E> {
                if v.is_finite() && v > 0.0 && v <= 10_000.0 {
                    Ok(Percent(v))
                } else {
                    Err(E::custom(format!(
                        "{v} is out of range: expected a percentage of one core, more than 0 and at most 10000"
                    )))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Percent, E> {
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Percent, E> {
                self.visit_f64(v as f64)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for LogFilter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<LogFilter, D::Error> {
        let text = String::deserialize(d)?;
        // A bare word is a target to tracing ("loud" would log everything of a target named
        // so): only level names stand alone; every other part is `target=level`.
        const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];
        let parts_ok = text.split(',').all(|part| {
            let part = part.trim();
            LEVELS.contains(&part.to_ascii_lowercase().as_str())
                || part.split_once('=').is_some_and(|(target, level)| {
                    !target.trim().is_empty()
                        && LEVELS.contains(&level.trim().to_ascii_lowercase().as_str())
                })
        });
        match tracing_subscriber::EnvFilter::try_new(&text) {
            Ok(_) if parts_ok => Ok(LogFilter(text)),
            _ => Err(de::Error::custom(format!(
                "{text:?} is not a log filter: expected error, warn, info, debug or trace, or a tracing filter such as \"info,recorder=debug\""
            ))),
        }
    }
}

impl<'de> Deserialize<'de> for QueueLen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<QueueLen, D::Error> {
        d.deserialize_i64(IntIn {
            expecting: "a count from 1 to 1024",
            min: 1,
            max: 1024,
        })
        .map(|n| QueueLen(n as usize))
    }
}

impl<'de> Deserialize<'de> for SharePercent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SharePercent, D::Error> {
        d.deserialize_i64(IntIn {
            expecting: "a percentage from 1 to 100",
            min: 1,
            max: 100,
        })
        .map(|n| SharePercent(n as u8))
    }
}

impl<'de> Deserialize<'de> for StackBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StackBytes, D::Error> {
        let n = d.deserialize_i64(IntIn {
            expecting: "bytes of stack per sample, a multiple of 8 from 0 to 61440",
            min: 0,
            max: sampler::MAX_STACK_BYTES as i64,
        })?;
        if n % 8 != 0 {
            return Err(de::Error::custom(format!(
                "{n} is not a multiple of 8: expected bytes of stack per sample, a multiple of 8 from 0 to 61440"
            )));
        }
        Ok(StackBytes(n as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("3d"), Ok(Duration::from_secs(259_200)));
        assert!(parse_duration("").is_err());
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("2GB"), Ok(2_000_000_000));
        assert!(parse_bytes("-1").is_err());
    }
}
