//! Stack aggregation and output.
//!
//! [`RawStacks`] counts raw callchains on the per-sample path (one hash lookup, no allocation
//! for a stack seen before); [`Profile`] holds symbolized stacks and writes folded stacks and
//! SVG flamegraphs.

mod folded;
mod profile;
mod raw_stacks;
mod svg;

pub use folded::{parse_folded_line, sanitize_frame};
pub use profile::{FrameId, Profile};
pub use raw_stacks::{RawStack, RawStackStats, RawStacks};
pub use svg::SvgOptions;

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
