//! The names of the headers profilerd answers with (`x-profilerd-*`), lower-case as HTTP/1.1
//! sends them through hyper. Each says which routes send it.

/// Slices (files and open slices) read for the answer (`/v1/folded`, `/v1/pprof`,
/// `/v1/timeline`, the scrape).
pub const SLICES: &str = "x-profilerd-slices";
/// Slices skipped as corrupt or truncated (`/v1/folded`, `/v1/pprof`, `/v1/timeline`).
pub const SKIPPED_SLICES: &str = "x-profilerd-skipped-slices";
/// Samples in the answer (`/v1/folded`, `/v1/pprof`, the scrape).
pub const SAMPLES: &str = "x-profilerd-samples";
/// Start of the range answered, UNIX ns (`/v1/folded`, `/v1/pprof`, `/v1/timeline`).
pub const SINCE_NS: &str = "x-profilerd-since-ns";
/// End of the range answered, UNIX ns (`/v1/folded`, `/v1/pprof`, `/v1/timeline`).
pub const UNTIL_NS: &str = "x-profilerd-until-ns";
/// The frequency the counts are in, Hz (`/v1/folded`, `/v1/pprof`, a recording's `/folded`).
pub const FREQUENCY: &str = "x-profilerd-frequency";
/// The event sampled on: `cycles` or `cpu-clock` (`/v1/folded`, `/v1/pprof`, a recording's
/// `/folded`).
pub const EVENT: &str = "x-profilerd-event";
/// `1` when kernel frames may appear in the answer, else `0` (`/v1/folded`, `/v1/pprof`).
pub const KERNEL_FRAMES: &str = "x-profilerd-kernel-frames";
/// Of the slices read, those still open, not written yet (`/v1/folded`, `/v1/pprof`).
pub const OPEN_SLICES: &str = "x-profilerd-open-slices";
/// The answer holds every sample taken before this time, UNIX ns (`/v1/folded`, `/v1/pprof`).
pub const COMPLETE_UNTIL_NS: &str = "x-profilerd-complete-until-ns";
/// What the counts are: a [`crate::Measure`]'s wire name (`/v1/folded`, `/v1/pprof`).
pub const MEASURE: &str = "x-profilerd-measure";
/// The daemon's slice length, ns (`/v1/timeline`).
pub const SLICE_NS: &str = "x-profilerd-slice-ns";
/// Seconds a recording sampled, with three decimals (a recording's `/folded`).
pub const SECONDS: &str = "x-profilerd-seconds";
/// Of a bounded answer (`/v1/folded?minwidth=`): the minimum width applied, in the answer's
/// counts (frames of fewer were merged).
pub const MIN_WIDTH_SAMPLES: &str = "x-profilerd-min-width-samples";
/// Of a bounded answer: the frames merged into the answer's merged frames, in all.
pub const MERGED_FRAMES: &str = "x-profilerd-merged-frames";
