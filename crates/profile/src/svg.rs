//! SVG flamegraphs through the `inferno` crate.

use std::io::Write;

use crate::wait::WaitKind;
use crate::ProfileError;

/// What the flamegraph says about itself.
#[derive(Clone, Debug, Default)]
pub struct SvgOptions {
    /// The title line.
    pub title: String,
    /// A line under the title: event, frequency, duration, samples, lost.
    pub subtitle: Option<String>,
    /// Counts are microseconds (off-CPU and wall-clock profiles), not samples.
    pub microseconds: bool,
}

/// The colour of the frames naming a wait kind (`[off-cpu: io]`): blue, apart from the
/// warm colours of code.
const OFF_CPU_COLOR: inferno::flamegraph::color::Color = inferno::flamegraph::color::Color {
    r: 80,
    g: 140,
    b: 230,
};

/// Render sorted folded lines.
pub(crate) fn render(
    lines: &[String],
    out: impl Write,
    options: &SvgOptions,
) -> Result<(), ProfileError> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = options.title.clone();
    opts.subtitle = options.subtitle.clone();
    let mut off_cpu = inferno::flamegraph::color::PaletteMap::default();
    for kind in [
        WaitKind::Sleep,
        WaitKind::Lock,
        WaitKind::Io,
        WaitKind::Preempted,
        WaitKind::Other,
    ] {
        off_cpu.insert(kind.frame(), OFF_CPU_COLOR);
    }
    opts.palette_map = Some(&mut off_cpu);
    opts.count_name = if options.microseconds {
        "µs"
    } else {
        "samples"
    }
    .to_string();
    opts.deterministic = true;
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), out).map_err(
        |source| ProfileError::Write {
            what: "SVG flamegraph",
            source,
        },
    )
}
