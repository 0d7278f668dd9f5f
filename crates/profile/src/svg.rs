//! SVG flamegraphs through the `inferno` crate.

use std::io::Write;

use crate::ProfileError;

/// What the flamegraph says about itself.
#[derive(Clone, Debug, Default)]
pub struct SvgOptions {
    /// The title line.
    pub title: String,
    /// A line under the title: event, frequency, duration, samples, lost.
    pub subtitle: Option<String>,
}

/// Render sorted folded lines.
pub(crate) fn render(
    lines: &[String],
    out: impl Write,
    options: &SvgOptions,
) -> Result<(), ProfileError> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = options.title.clone();
    opts.subtitle = options.subtitle.clone();
    opts.count_name = "samples".to_string();
    opts.deterministic = true;
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out).map_err(
        |source| ProfileError::Write {
            what: "SVG flamegraph",
            source,
        },
    )
}
