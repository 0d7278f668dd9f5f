//! profilerd's configuration: a TOML file (`config/profilerd.toml` is the documented default),
//! overridden by command-line flags. Unknown keys, wrong types and bad values are errors that
//! name the file, the line and what was expected.
//!
//! Here: the whole configuration, its errors, reading it. The sections are in `sections.rs`,
//! the values' types and how they are read in `values.rs`, the checks of values that must go
//! together in `validate.rs`.

mod sections;
mod validate;
mod values;

use std::path::Path;

use serde::Deserialize;

pub use sections::{Access, Api, Budget, Log, Recordings, Sampling, Scrape, Storage};
pub use validate::MAX_REQUEST_TIMEOUT;
pub use values::Frequency;

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
                    "off_cpu",
                ][..],
            ),
            (
                "storage",
                &[
                    "state_dir",
                    "cache_dir",
                    "max_age",
                    "max_bytes",
                    "max_share_per_uid",
                ][..],
            ),
            (
                "api",
                &[
                    "socket",
                    "max_range",
                    "max_response_bytes",
                    "request_timeout",
                    "max_concurrent_queries",
                    "max_queries_per_user",
                    "max_connections",
                    "max_connections_per_user",
                    "idle_timeout",
                ][..],
            ),
            (
                "budget",
                &["max_cpu_percent", "max_resident", "min_frequency", "window"][..],
            ),
            ("log", &["level"][..]),
            (
                "recordings",
                &[
                    "max_concurrent",
                    "max_per_user",
                    "max_bytes",
                    "max_duration",
                    "max_frequency",
                ][..],
            ),
            (
                "scrape",
                &[
                    "allow_unauthenticated",
                    "max_connections",
                    "max_concurrent",
                    "max_seconds",
                    "layout_labels",
                ][..],
            ),
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
            ("[storage]\nmax_share_per_uid = 0\n", 2, "from 1 to 100"),
            ("[storage]\nmax_share_per_uid = 101\n", 2, "from 1 to 100"),
            ("[storage]\nmax_share_per_uid = \"half\"\n", 2, "percentage"),
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
            (
                "[scrape]\nlisten = \"127.0.0.1:6060\"\n",
                "scrape.token_file",
            ),
            (
                "[scrape]\nlisten = \"0.0.0.0:6060\"\nallow_unauthenticated = true\n",
                "loopback",
            ),
            ("[budget]\nwindow = \"5s\"\n", "budget.window"),
        ] {
            let err = parse(text).expect_err(text).to_string();
            assert!(
                err.starts_with("/etc/profilerd/test.toml: ") && err.contains(expect),
                "{text:?}: {err}"
            );
        }
    }
}
