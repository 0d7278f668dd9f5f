//! The contract between profctl and profilerd: everything the two binaries exchange over the
//! daemon's socket, declared once, as tokio-console keeps `console-api` for its subscriber and
//! its CLI.
//!
//! - where the daemon listens ([`DEFAULT_SOCKET`], [`SOCKET_ENV`]);
//! - the names of the headers it answers with ([`header`]);
//! - the request parameters and answer types of the routes profctl uses: the history queries
//!   ([`history`]: `/v1/folded`, `/v1/pprof`, `/v1/timeline`), the on-demand recordings
//!   ([`recording`]) and `/v1/status` ([`status`]);
//! - what time a query or recording measures ([`Measure`]);
//! - the time and duration syntax of flags, configuration keys and query parameters
//!   ([`duration`], [`time`]).
//!
//! Types, names and parsers only: no transport, no I/O. Both sides serialize these types with
//! serde, so a field renamed here is renamed on both.

pub mod duration;
pub mod header;
pub mod history;
mod measure;
pub mod recording;
pub mod status;
pub mod time;

pub use duration::{parse_duration, DurationBounds, DurationError};
pub use measure::{Measure, UnknownMeasure};
pub use time::{TimeError, TimeParam};

/// profilerd's default socket path, as a string literal, for `concat!` in help texts (use
/// [`DEFAULT_SOCKET`] elsewhere).
#[macro_export]
macro_rules! default_socket {
    () => {
        "/run/profilerd/profilerd.sock"
    };
}

/// The socket profilerd listens on and profctl asks when neither its configuration
/// (`api.socket`) nor `--socket` / [`SOCKET_ENV`] names another.
pub const DEFAULT_SOCKET: &str = default_socket!();

/// The environment variable naming profilerd's socket for profctl (after `--socket`).
pub const SOCKET_ENV: &str = "PROFILERD_SOCKET";
