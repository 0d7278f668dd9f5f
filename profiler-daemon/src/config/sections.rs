//! The configuration's sections (`[sampling]`, `[storage]`, …) and their defaults.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::values::{
    Bytes, CallGraphName, Frequency, LogFilter, Percent, QueueLen, Seconds, SharePercent,
    StackBytes,
};

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
    /// Also sample context switches, so that slices hold off-CPU stacks (each weighted by
    /// the time until its thread ran again) beside the CPU samples, and history queries take
    /// `measure=off_cpu` or `wall` (see docs/offcpu.md, "Continuous").
    pub off_cpu: bool,
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
            off_cpu: false,
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
    /// The share of a slice's or an hour's roll-up's budget (its part of `max_bytes`) each
    /// uid keeps whatever others do, when it is over its budget (see `store/share.rs` and
    /// `store/rollup_share.rs`).
    pub max_share_per_uid: SharePercent,
}

impl Default for Storage {
    fn default() -> Storage {
        Storage {
            state_dir: PathBuf::from("/var/lib/profilerd"),
            cache_dir: PathBuf::from("/var/cache/profilerd"),
            max_age: Seconds(Duration::from_secs(3 * 86_400)),
            max_bytes: Bytes(1 << 30),
            max_share_per_uid: SharePercent(25),
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
    /// Queries answered at once; more are refused (503) until one ends. One of them is kept
    /// for root and the admin group when there are two or more.
    pub max_concurrent_queries: QueueLen,
    /// Queries one user (uid) may have running at once.
    pub max_queries_per_user: QueueLen,
    /// Connections open at once; past this, a user's new connection is closed at once with a
    /// 503 (root and the admin group may go past it by `max_connections_per_user`).
    pub max_connections: QueueLen,
    /// Connections one user (uid) may hold open at once.
    pub max_connections_per_user: QueueLen,
    /// A connection that has not sent a whole request's headers this long after it was opened
    /// or after its last answer is closed (slow headers and idle keep-alive alike).
    pub idle_timeout: Seconds,
}

impl Default for Api {
    fn default() -> Api {
        Api {
            socket: PathBuf::from(daemon_api::DEFAULT_SOCKET),
            socket_group: None,
            max_range: Seconds(Duration::from_secs(86_400)),
            max_response_bytes: Bytes(64 << 20),
            request_timeout: Seconds(Duration::from_secs(30)),
            max_concurrent_queries: QueueLen(4),
            max_queries_per_user: QueueLen(1),
            max_connections: QueueLen(256),
            max_connections_per_user: QueueLen(16),
            idle_timeout: Seconds(Duration::from_secs(10)),
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
    /// Recordings running at once; more are refused (429) until one ends. One of them is kept
    /// for root and the admin group when there are two or more.
    pub max_concurrent: QueueLen,
    /// Recordings one user (uid) may have running at once.
    pub max_per_user: QueueLen,
    /// Most bytes of stacks one recording keeps; past it the recording stops and its result
    /// says it was truncated.
    pub max_bytes: Bytes,
    /// Longest recording.
    pub max_duration: Seconds,
    /// Highest frequency a recording may ask for.
    pub max_frequency: Frequency,
}

impl Default for Recordings {
    fn default() -> Recordings {
        Recordings {
            max_concurrent: QueueLen(4),
            max_per_user: QueueLen(1),
            max_bytes: Bytes(64 << 20),
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
    /// A file holding the bearer token scrapers must send. Unset: refused at start unless
    /// `allow_unauthenticated` is set and `listen` is a loopback address.
    pub token_file: Option<PathBuf>,
    /// Serve without a token (only on a loopback `listen`): every local user then sees every
    /// process's profile, kernel frames included.
    pub allow_unauthenticated: bool,
    /// Connections open at once; more are closed at once with a 503.
    pub max_connections: QueueLen,
    /// Profiles merged at once; more wait for a place up to `api.request_timeout`, then get
    /// a 503 (a profile's `seconds` are waited out holding no place).
    pub max_concurrent: QueueLen,
    /// Longest `seconds` a scrape may ask for.
    pub max_seconds: Seconds,
    /// Send the labels that describe the host's layout: `cgroup`, `ppid` and `ancestors`.
    /// `false`: scrapes carry only pid, tid, process_start, comm, uid and kernel_frames.
    pub layout_labels: bool,
}

impl Default for Scrape {
    fn default() -> Scrape {
        Scrape {
            listen: None,
            token_file: None,
            allow_unauthenticated: false,
            max_connections: QueueLen(64),
            max_concurrent: QueueLen(4),
            max_seconds: Seconds(Duration::from_secs(300)),
            layout_labels: true,
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
