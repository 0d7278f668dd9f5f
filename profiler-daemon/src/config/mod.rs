//! profilerd's configuration: a TOML file (`config/profilerd.toml` is the documented default),
//! overridden by command-line flags. Unknown keys, wrong types and bad values are errors that
//! name the file, the line and what was expected.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// Where profilerd reads its configuration when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/profilerd/profilerd.toml";

/// The documented default configuration file (kept equal to [`Config::default`] by a test).
#[cfg(test)]
pub const DEFAULT_CONFIG_TEXT: &str = include_str!("../../../config/profilerd.toml");

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML, has an unknown key, a wrong type or a bad value (the
    /// message names the line and column, shows it, and says what was expected).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// toml's message: "TOML parse error at line L, column C", the line, a caret, and
        /// what was expected.
        message: String,
    },
    /// Values that are each valid but do not go together, or a bad flag.
    #[error("{origin}: {message}")]
    Invalid {
        /// The file, or the flag.
        origin: String,
        /// What is wrong and what was expected.
        message: String,
    },
}

/// The whole configuration.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// What is sampled and how.
    pub sampling: Sampling,
    /// Where and how long slices are kept.
    pub storage: Storage,
    /// The HTTP API on a Unix socket.
    pub api: Api,
    /// Who sees what.
    pub access: Access,
    /// On-demand recordings (`POST /v1/recordings`).
    pub recordings: Recordings,
    /// The opt-in TCP listener for pprof scrapers.
    pub scrape: Scrape,
    /// What the daemon itself may cost.
    pub budget: Budget,
    /// Logging.
    pub log: Log,
}

/// `[sampling]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Sampling {
    /// Samples per second per CPU.
    pub frequency: Frequency,
    /// Length of a slice: samples are kept per slice of this length.
    pub slice: Seconds,
    /// Sample kernel code and kernel call chains.
    pub kernel: bool,
    /// How user stacks are walked: "fp", "dwarf" or "auto".
    pub call_graph: CallGraphName,
    /// Bytes of user stack copied per sample (dwarf and auto).
    pub stack_bytes: StackBytes,
    /// Closed slices waiting to be named; past this, a closed slice is dropped (and counted)
    /// rather than the drain made to wait.
    pub naming_queue: QueueLen,
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling {
            frequency: Frequency(99),
            slice: Seconds(Duration::from_secs(10)),
            kernel: true,
            call_graph: CallGraphName::Auto,
            stack_bytes: StackBytes(16 * 1024),
            naming_queue: QueueLen(6),
        }
    }
}

/// `[storage]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Storage {
    /// Where slices are kept (`slices/` under it).
    pub state_dir: PathBuf,
    /// Where symbol caches are kept (kernel symbols, frames per build-id, decompressed debug
    /// sections, symbol tables).
    pub cache_dir: PathBuf,
    /// Slices older than this are deleted.
    pub max_age: Seconds,
    /// Past this many bytes of slices, the oldest are deleted.
    pub max_bytes: Bytes,
}

impl Default for Storage {
    fn default() -> Storage {
        Storage {
            state_dir: PathBuf::from("/var/lib/profilerd"),
            cache_dir: PathBuf::from("/var/cache/profilerd"),
            max_age: Seconds(Duration::from_secs(3 * 86_400)),
            max_bytes: Bytes(1 << 30),
        }
    }
}

/// `[api]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Api {
    /// The Unix socket the API listens on.
    pub socket: PathBuf,
    /// When set, only this group (name or number) may connect (socket mode 0660); otherwise
    /// every local user may (0666) and each request is authorized on its own.
    pub socket_group: Option<String>,
    /// Longest time range one query may cover.
    pub max_range: Seconds,
    /// Largest response body.
    pub max_response_bytes: Bytes,
    /// Longest time a query may take.
    pub request_timeout: Seconds,
    /// Queries answered at once; more are refused (503) until one ends.
    pub max_concurrent_queries: QueueLen,
}

impl Default for Api {
    fn default() -> Api {
        Api {
            socket: PathBuf::from("/run/profilerd/profilerd.sock"),
            socket_group: None,
            max_range: Seconds(Duration::from_secs(86_400)),
            max_response_bytes: Bytes(64 << 20),
            request_timeout: Seconds(Duration::from_secs(30)),
            max_concurrent_queries: QueueLen(2),
        }
    }
}

/// `[access]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Access {
    /// Members of this group (name or number) see everything, as root does. Unset: root only.
    pub admin_group: Option<String>,
}

/// `[recordings]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Recordings {
    /// Recordings running at once; more are refused (429) until one ends.
    pub max_concurrent: QueueLen,
    /// Longest recording.
    pub max_duration: Seconds,
    /// Highest frequency a recording may ask for.
    pub max_frequency: Frequency,
}

impl Default for Recordings {
    fn default() -> Recordings {
        Recordings {
            max_concurrent: QueueLen(2),
            max_duration: Seconds(Duration::from_secs(600)),
            max_frequency: Frequency(4999),
        }
    }
}

/// `[budget]`: caps on the daemon's own CPU and memory (see `budget.rs`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Budget {
    /// Most CPU time the daemon may use, in percent of one core, averaged over `window`; past
    /// it the sampling frequency is lowered (down to `min_frequency`), and raised back step by
    /// step once the daemon is well under.
    pub max_cpu_percent: Percent,
    /// Most memory: resident (VmRSS) plus pinned ring buffers (VmPin, VmLck); past it the
    /// symbol caches are shed.
    pub max_resident: Bytes,
    /// The budget never lowers the frequency below this (nor below `sampling.frequency`).
    pub min_frequency: Frequency,
    /// The span CPU use is averaged over, and the least time between two changes.
    pub window: Seconds,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            max_cpu_percent: Percent(2.0),
            max_resident: Bytes(512 << 20),
            min_frequency: Frequency(9),
            window: Seconds(Duration::from_secs(30)),
        }
    }
}

/// `[scrape]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Scrape {
    /// `ADDR:PORT` to serve `/debug/pprof/*` and `/metrics` on over TCP. Unset: no listener.
    pub listen: Option<String>,
    /// A file holding the bearer token scrapers must send. Unset: none asked.
    pub token_file: Option<PathBuf>,
    /// Profiles being answered at once; more are refused (503).
    pub max_concurrent: QueueLen,
    /// Longest `seconds` a scrape may ask for.
    pub max_seconds: Seconds,
}

impl Default for Scrape {
    fn default() -> Scrape {
        Scrape {
            listen: None,
            token_file: None,
            max_concurrent: QueueLen(4),
            max_seconds: Seconds(Duration::from_secs(300)),
        }
    }
}

/// `[log]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Log {
    /// What is logged: a level (`error`, `warn`, `info`, `debug`, `trace`) or a tracing
    /// filter (`info,recorder=debug`). `PROFILERD_LOG`, when set, takes its place.
    pub level: LogFilter,
}

impl Default for Log {
    fn default() -> Log {
        Log {
            level: LogFilter("info".into()),
        }
    }
}

/// A percentage of one core: more than 0, at most 10000.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Percent(pub f64);

/// A tracing filter, checked when read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFilter(pub String);

/// A sampling frequency in Hz: 1 to 100000.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frequency(pub u64);

/// A duration: `"10s"`, `"5m"`, `"2h"`, `"3d"` (or a number of seconds); more than zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seconds(pub Duration);

/// A size in bytes: `"64MiB"`, `"1GiB"`, `"512KiB"`, `"10MB"` (or a number of bytes); more
/// than zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bytes(pub u64);

/// Bytes of user stack copied per sample: a multiple of 8, 0 to 61440.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackBytes(pub u32);

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

/// Parse a duration as the config spells it.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let expected = "a duration such as \"10s\", \"5m\", \"2h\" or \"3d\"";
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not {expected}"))?;
    let scale = match unit.trim() {
        "ms" => 1e-3,
        "s" | "" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: expected {expected}"
            ))
        }
    };
    let secs = value * scale;
    if !secs.is_finite() || secs <= 0.0 || secs > 10.0 * 365.0 * 86_400.0 {
        return Err(format!(
            "{text:?} is out of range: expected {expected}, more than zero"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
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
            expecting:
                "a duration such as \"10s\", \"5m\", \"2h\" or \"3d\" (or seconds), more than zero",
            parse: |s| parse_duration(s).map(Seconds),
            int: |n| {
                if n > 0 {
                    Ok(Seconds(Duration::from_secs(n as u64)))
                } else {
                    Err(format!(
                        "{n} is out of range: expected a duration of more than zero seconds"
                    ))
                }
            },
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

impl Config {
    /// Parse `text`, read from `path` (named in errors), and check values that go together.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.display().to_string(),
            message: e.to_string().trim_end().to_string(),
        })?;
        config.check(&path.display().to_string())?;
        Ok(config)
    }

    /// Read and parse the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Cross-field checks; `origin` names where the values came from.
    pub fn check(&self, origin: &str) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            origin: origin.to_string(),
            message,
        };
        let slice = self.sampling.slice.0;
        if slice < Duration::from_secs(1) || slice > Duration::from_secs(3600) {
            return Err(invalid(format!(
                "sampling.slice is {slice:?}: expected from 1s to 1h"
            )));
        }
        if self.storage.max_age.0 < slice {
            return Err(invalid(format!(
                "storage.max_age ({:?}) is shorter than sampling.slice ({slice:?}): expected at least one slice",
                self.storage.max_age.0
            )));
        }
        if self.api.max_range.0 < slice {
            return Err(invalid(format!(
                "api.max_range ({:?}) is shorter than sampling.slice ({slice:?})",
                self.api.max_range.0
            )));
        }
        if let Some(listen) = &self.scrape.listen {
            if listen.parse::<std::net::SocketAddr>().is_err() {
                return Err(invalid(format!(
                    "scrape.listen is {listen:?}: expected ADDR:PORT such as \"127.0.0.1:6060\" or \"[::1]:6060\""
                )));
            }
        }
        if let Some(path) = &self.scrape.token_file {
            if !path.is_absolute() {
                return Err(invalid(format!(
                    "scrape.token_file is {}: expected an absolute path",
                    path.display()
                )));
            }
        }
        if self.budget.window.0 < slice {
            return Err(invalid(format!(
                "budget.window ({:?}) is shorter than sampling.slice ({slice:?}): each slice is named at once, so CPU use must be averaged over one slice at least",
                self.budget.window.0
            )));
        }
        for (key, path) in [
            ("storage.state_dir", &self.storage.state_dir),
            ("storage.cache_dir", &self.storage.cache_dir),
            ("api.socket", &self.api.socket),
        ] {
            if !path.is_absolute() {
                return Err(invalid(format!(
                    "{key} is {}: expected an absolute path",
                    path.display()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("/etc/profilerd/test.toml"))
    }

    /// The error's message, which must name the file and line `line`.
    fn error_at(text: &str, line: usize) -> String {
        let err = parse(text).expect_err("accepted").to_string();
        assert!(
            err.starts_with("/etc/profilerd/test.toml: "),
            "the file is not named: {err}"
        );
        assert!(
            err.contains(&format!("line {line}")),
            "line {line} is not named: {err}"
        );
        err
    }

    #[test]
    fn the_default_file_is_the_default_config() {
        let parsed = parse(DEFAULT_CONFIG_TEXT).expect("the default file parses");
        assert_eq!(parsed, Config::default());
        // Every key of the code's defaults is in the file (a new key must be documented).
        let table: toml::Table = toml::from_str(DEFAULT_CONFIG_TEXT).unwrap();
        for (section, keys) in [
            (
                "sampling",
                &[
                    "frequency",
                    "slice",
                    "kernel",
                    "call_graph",
                    "stack_bytes",
                    "naming_queue",
                ][..],
            ),
            (
                "storage",
                &["state_dir", "cache_dir", "max_age", "max_bytes"][..],
            ),
            (
                "api",
                &[
                    "socket",
                    "max_range",
                    "max_response_bytes",
                    "request_timeout",
                    "max_concurrent_queries",
                ][..],
            ),
            (
                "budget",
                &["max_cpu_percent", "max_resident", "min_frequency", "window"][..],
            ),
            ("log", &["level"][..]),
        ] {
            let t = table[section].as_table().expect("section");
            for key in keys {
                assert!(
                    t.contains_key(*key),
                    "{section}.{key} is not in the default file"
                );
            }
            assert_eq!(
                t.len(),
                keys.len(),
                "[{section}] has keys the test does not know"
            );
        }
        for (section, keys) in [
            (
                "recordings",
                &["max_concurrent", "max_duration", "max_frequency"][..],
            ),
            ("scrape", &["max_concurrent", "max_seconds"][..]),
        ] {
            let t = table[section].as_table().expect("section");
            for key in keys {
                assert!(
                    t.contains_key(*key),
                    "{section}.{key} is not in the default file"
                );
            }
            assert_eq!(
                t.len(),
                keys.len(),
                "[{section}] has keys the test does not know"
            );
        }
        // Optional keys are documented, commented out.
        for key in ["socket_group", "admin_group", "listen", "token_file"] {
            assert!(DEFAULT_CONFIG_TEXT.contains(&format!("# {key} = ")));
        }
        assert_eq!(parse("").unwrap(), Config::default());
    }

    #[test]
    fn an_unknown_key_is_refused_with_its_line() {
        let err = error_at("[sampling]\nfrequency = 99\nfrequncy = 10\n", 3);
        assert!(err.contains("unknown field `frequncy`"), "{err}");
        let err = error_at("\n[samplin]\n", 2);
        assert!(err.contains("unknown field `samplin`"), "{err}");
    }

    #[test]
    fn a_wrong_type_is_refused_with_its_line() {
        let err = error_at("[sampling]\nkernel = \"yes\"\n", 2);
        assert!(err.contains("expected a boolean"), "{err}");
        let err = error_at("[sampling]\n\nfrequency = \"fast\"\n", 3);
        assert!(err.contains("frequency in Hz"), "{err}");
        let err = error_at("[api]\nsocket = 3\n", 2);
        assert!(err.contains("path"), "{err}");
    }

    #[test]
    fn bad_values_are_refused_with_their_line() {
        for (text, line, expect) in [
            ("[sampling]\nfrequency = 0\n", 2, "from 1 to 100000"),
            ("[sampling]\nfrequency = -5\n", 2, "from 1 to 100000"),
            ("[storage]\nmax_age = -1\n", 2, "more than zero"),
            ("[storage]\nmax_age = \"-3d\"\n", 2, "duration"),
            ("[storage]\nmax_age = \"3 weeks\"\n", 2, "unknown unit"),
            ("[storage]\nmax_bytes = 0\n", 2, "more than zero"),
            ("[storage]\nmax_bytes = \"1PB\"\n", 2, "unknown unit"),
            ("[sampling]\nstack_bytes = 100\n", 2, "multiple of 8"),
            ("[sampling]\nstack_bytes = 65536\n", 2, "61440"),
            ("[sampling]\ncall_graph = \"lbr\"\n", 2, "fp"),
            ("[sampling]\nnaming_queue = 0\n", 2, "from 1 to 1024"),
            ("[sampling]\nslice = \"0s\"\n", 2, "more than zero"),
            ("[budget]\nmax_cpu_percent = 0\n", 2, "percentage"),
            ("[budget]\nmax_cpu_percent = -1.5\n", 2, "percentage"),
            ("[budget]\nmax_resident = \"lots\"\n", 2, "size"),
            ("[budget]\nmin_frequency = 0\n", 2, "from 1 to 100000"),
            ("[log]\nlevel = \"loud\"\n", 2, "log filter"),
        ] {
            let err = error_at(text, line);
            assert!(err.contains(expect), "{text:?}: {err}");
        }
    }

    #[test]
    fn values_that_do_not_go_together_are_refused() {
        for (text, expect) in [
            ("[sampling]\nslice = \"2h\"\n", "sampling.slice"),
            ("[storage]\nmax_age = \"5s\"\n", "storage.max_age"),
            ("[storage]\nstate_dir = \"relative\"\n", "absolute path"),
            ("[scrape]\nlisten = \"localhost\"\n", "ADDR:PORT"),
            ("[scrape]\ntoken_file = \"token\"\n", "absolute path"),
            ("[budget]\nwindow = \"5s\"\n", "budget.window"),
        ] {
            let err = parse(text).expect_err(text).to_string();
            assert!(
                err.starts_with("/etc/profilerd/test.toml: ") && err.contains(expect),
                "{text:?}: {err}"
            );
        }
    }

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
