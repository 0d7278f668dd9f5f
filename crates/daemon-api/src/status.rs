//! `GET /v1/status`: what the daemon is doing and what it costs ([`Status`]), as JSON. Tests
//! and tools wait on its fields (`newest_slice_end_ns`, `naming_backlog`, `slices_written`)
//! rather than for a fixed time.

use serde::{Deserialize, Serialize};

/// `GET /v1/status`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// profilerd's version.
    pub version: String,
    /// The event sampled on (`cycles` or `cpu-clock`).
    pub event: String,
    /// CPUs sampled.
    pub cpus: usize,
    /// Samples per second per CPU.
    pub frequency: u64,
    /// Whether kernel frames are sampled.
    pub kernel: bool,
    /// Slice length, seconds.
    pub slice_seconds: f64,
    /// Whether the drain loop reported within the last 5 s.
    pub sampling: bool,
    /// Seconds since start.
    pub uptime_seconds: f64,
    /// Samples read since start.
    pub samples: u64,
    /// Samples the kernel dropped since start.
    pub lost: u64,
    /// Slices named since start.
    pub slices_named: u64,
    /// Slices dropped because naming fell behind.
    pub slices_dropped: u64,
    /// Slices waiting to be named.
    pub naming_backlog: u64,
    /// Slices written since start.
    pub slices_written: u64,
    /// Failed writes (full disk) since start.
    pub write_errors: u64,
    /// Slices kept in memory until the disk takes them.
    pub slices_unwritten: u64,
    /// Roll-ups written (and in the index in place of their slices) since start.
    #[serde(default)]
    pub rollups_written: u64,
    /// Slice files found corrupt or truncated (skipped) since start.
    pub corrupt_slices: u64,
    /// Slices on disk.
    pub slices_kept: usize,
    /// Bytes of slices on disk.
    pub bytes_kept: u64,
    /// End of the newest slice on disk, UNIX ns (0: none).
    pub newest_slice_end_ns: u64,
    /// Snapshots of the open slices named for queries since start.
    pub open_snapshots: u64,
    /// Snapshots asked that the pipeline could not name (its queue full, or sampling over).
    pub open_snapshots_refused: u64,
    /// Seconds the naming thread spent naming them (wall clock).
    pub open_naming_seconds: f64,
    /// When the last snapshot was taken, UNIX ns (0: none).
    pub open_taken_ns: u64,
    /// Processes tracked by the process model.
    pub processes: usize,
    /// Threads tracked.
    pub threads: usize,
    /// Files mapped by tracked processes.
    pub files: usize,
    /// Binaries held open.
    pub pinned_files: usize,
    /// Mappings refused since sampling started because their process held the process
    /// model's cap (131,072 a process): a count over all processes, as `processes` is,
    /// naming none, so every peer sees it.
    #[serde(default)]
    pub mappings_dropped: u64,
    /// Context switches out since sampling started, with `[sampling] off_cpu` (0 without):
    /// every one is seen (a switch record); a capped share of them sampled with a stack.
    #[serde(default)]
    pub switches_seen: u64,
    /// Switch-out stacks sampled.
    #[serde(default)]
    pub switches_sampled: u64,
    /// Switches the sampled ones stood for beyond themselves (their time scaled).
    #[serde(default)]
    pub switches_scaled: u64,
    /// Switch samples and records the kernel dropped (a full ring).
    #[serde(default)]
    pub switches_lost: u64,
    /// Threads off CPU now whose switch-out stack waits for their switch back in.
    #[serde(default)]
    pub off_cpu_waiting: usize,
    /// Open symbolizers.
    pub symbolizers: usize,
    /// Their estimated bytes.
    pub symbolizer_bytes: u64,
    /// User addresses whose names are cached (see docs/daemon.md, "Cost").
    #[serde(default)]
    pub names: usize,
    /// Bytes of those names, as counted against their bound.
    #[serde(default)]
    pub name_bytes: usize,
    /// Addresses looked up in their files (DWARF, symbol tables) since start: each address is
    /// looked up once, then named from the cache.
    #[serde(default)]
    pub name_lookups: u64,
    /// Resident memory of the daemon, bytes (ring buffers are not resident memory).
    pub resident_bytes: u64,
    /// The daemon's CPU time since start, seconds.
    pub cpu_seconds: f64,
    /// The overhead budget: what it sees and did.
    #[serde(flatten)]
    pub budget: BudgetStatus,
    /// Connections open on the API socket.
    #[serde(default)]
    pub connections_open: usize,
    /// Connections refused at `api.max_connections` or `api.max_connections_per_user` since
    /// start.
    #[serde(default)]
    pub connections_refused: u64,
    /// Queries running (until their blocking work ends).
    #[serde(default)]
    pub queries_running: usize,
    /// Queries refused at `api.max_queries_per_user` or `api.max_concurrent_queries`.
    #[serde(default)]
    pub queries_refused: u64,
    /// Stacks dropped from slices and roll-ups by the per-uid share (`storage.max_share_per_uid`) since
    /// start, every uid.
    #[serde(default)]
    pub uid_share_dropped_stacks: u64,
    /// Samples those stacks held.
    #[serde(default)]
    pub uid_share_dropped_samples: u64,
    /// The same per uid, for the uids that dropped within the retention window: every uid for
    /// root and the admin group, the asking user's own otherwise.
    #[serde(default)]
    pub uid_share_dropped: Vec<UidDrops>,
    /// The asking user.
    pub peer_uid: u32,
    /// Whether the asking user sees everything.
    pub peer_is_admin: bool,
}

/// The budget's part of `GET /v1/status` (flattened into it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BudgetStatus {
    /// `within`; else what is over: `cpu` (the frequency is lowered), `memory`, or
    /// `cpu+memory`.
    pub budget: String,
    /// The frequency the configuration asks for (`frequency` is the one in effect).
    pub configured_frequency: u64,
    /// The sampling pipeline's own CPU use (drain and naming threads, their housekeeping
    /// excluded) over the last window, percent of one core.
    pub budget_cpu_percent: f64,
    /// The cap (`budget.max_cpu_percent`).
    pub budget_max_cpu_percent: f64,
    /// Resident memory plus pinned ring buffers, bytes.
    pub budget_memory_bytes: u64,
    /// The cap (`budget.max_resident`).
    pub budget_max_resident: u64,
    /// Pinned ring buffer memory (VmPin + VmLck), bytes.
    pub pinned_bytes: u64,
    /// Times the budget changed the sampling frequency.
    pub budget_frequency_changes: u64,
    /// Times the symbol caches were shed.
    pub budget_cache_sheds: u64,
}

/// One uid's drops, as status shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UidDrops {
    /// The uid (None: processes whose uid was not known).
    pub uid: Option<u32>,
    /// Stacks dropped from slices and roll-ups.
    pub stacks: u64,
    /// Samples they held.
    pub samples: u64,
    /// Estimated bytes of slice and roll-up files they would have taken.
    pub bytes: u64,
    /// When the last was dropped, UNIX ns.
    pub last_ns: u64,
}
