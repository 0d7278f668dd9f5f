//! SVG flamegraphs through the `inferno` crate.

use std::borrow::Cow;
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

/// Whether XML 1.0 allows `c` in text (its `Char` production; Rust has no surrogates).
fn xml_char(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || (c >= ' ' && c != '\u{fffe}' && c != '\u{ffff}')
}

/// `text` with every character XML does not allow (other control characters, U+FFFE,
/// U+FFFF: a thread may name itself so) replaced by U+FFFD, so that the SVG stays
/// well-formed whatever names a profile holds.
fn xml_text(text: &str) -> Cow<'_, str> {
    if text.chars().all(xml_char) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| if xml_char(c) { c } else { '\u{fffd}' })
            .collect(),
    )
}

/// Render sorted folded lines.
pub(crate) fn render(
    lines: &[String],
    out: impl Write,
    options: &SvgOptions,
) -> Result<(), ProfileError> {
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = xml_text(&options.title).into_owned();
    opts.subtitle = options
        .subtitle
        .as_deref()
        .map(|s| xml_text(s).into_owned());
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
    let lines: Vec<Cow<'_, str>> = lines.iter().map(|l| xml_text(l)).collect();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(|l| l.as_ref()), out).map_err(
        |source| ProfileError::Write {
            what: "SVG flamegraph",
            source,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// Whether python3's XML parser takes `svg` (None: no python3 here).
    fn well_formed(svg: &[u8]) -> Option<Result<(), String>> {
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import sys, xml.dom.minidom as m; m.parseString(sys.stdin.buffer.read())",
            ])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        child.stdin.take()?.write_all(svg).ok()?;
        let out = child.wait_with_output().ok()?;
        Some(if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        })
    }

    /// Names with U+FFFE, U+FFFF and control characters (a comm is whatever a thread set)
    /// in frames, title and subtitle: the SVG still parses as XML.
    #[test]
    fn xml_invalid_characters_in_names_keep_the_svg_well_formed() {
        let lines = vec![
            "bad\u{ffff}comm;main;f\u{fffe}n 3".to_string(),
            "ok;main;g\u{1}h\u{b} 2".to_string(),
        ];
        let options = SvgOptions {
            title: "t\u{ffff}".to_string(),
            subtitle: Some("s\u{fffe}\u{c}".to_string()),
            ..SvgOptions::default()
        };
        let mut svg = Vec::new();
        render(&lines, &mut svg, &options).unwrap();
        let text = String::from_utf8(svg.clone()).unwrap();
        assert!(
            text.contains("bad\u{fffd}comm"),
            "the name is kept, its bad character replaced"
        );
        match well_formed(&svg) {
            Some(result) => result.unwrap(),
            None => eprintln!("note: no python3: the XML parse is skipped"),
        }
        assert!(!text.contains('\u{ffff}') && !text.contains('\u{fffe}'));
    }
}
