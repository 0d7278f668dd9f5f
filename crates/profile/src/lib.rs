//! Stack aggregation and output.
//!
//! [`Stack`] is a sampled stack as a type; [`RawStacks`] counts them on the per-sample path
//! (one hash lookup, no allocation for a stack seen before), and optionally per second
//! ([`WindowSeconds`]); a [`NormalizedWindow`] is a closed
//! time window in a self-contained form that can be symbolized anywhere; [`Profile`] holds
//! symbolized stacks and writes folded stacks and SVG flamegraphs; [`function_counts`] and
//! [`largest_changes`] sum a profile by function and compare two.

mod folded;
mod functions;
mod normalized;
mod profile;
mod quality;
mod raw_stacks;
mod seconds;
mod stack;
mod svg;
mod wait;

pub use folded::{parse_folded_line, sanitize_frame};
pub use functions::{
    function_counts, largest_changes, sort_functions, Change, FunctionCounts, FunctionOrder, Side,
};
pub use normalized::{
    Frame, LiveMapping, NormalizedStack, NormalizedWindow, ThreadLabels, WindowFile,
};
pub use profile::{FrameId, Profile};
pub use quality::{EndCounts, UnwindQuality};
pub use raw_stacks::{RawStack, RawStackStats, RawStacks, SampleOrigin};
pub use seconds::{CurrentRun, SecondCount, SecondTally, WindowSeconds};
pub use stack::{call_site, Stack, StackEnd};
pub use svg::SvgOptions;
pub use wait::{StackWeight, WaitKind};

/// Errors writing a profile.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Writing the output failed.
    #[error("writing {what}: {source}")]
    Write {
        /// Which output.
        what: &'static str,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The profile holds no samples, so there is nothing to draw.
    #[error("no samples were recorded, so there is no flamegraph to draw")]
    Empty,
}
