//! A profile's files: which ones a command writes (`-o` and `--folded`, an SVG by default),
//! checked before any work, and the folded stacks and SVG flamegraph written together.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::output::{check_writable, printable, write_atomically};

/// The SVG flamegraph and folded stacks a command writes.
#[derive(Clone, Debug, Default)]
pub struct Outputs {
    /// The SVG flamegraph (`-o`, or the default when neither `-o` nor `--folded` is given).
    pub svg: Option<PathBuf>,
    /// Folded stacks (`--folded`).
    pub folded: Option<PathBuf>,
}

impl Outputs {
    /// `-o` and `--folded`, the SVG at `default_svg` when neither is given; fails when one
    /// cannot be written (checked before anything is recorded or fetched).
    pub fn checked(
        output: Option<&Path>,
        folded: Option<&Path>,
        default_svg: &str,
    ) -> Result<Outputs> {
        let outputs = Outputs {
            svg: match (output, folded) {
                (None, None) => Some(PathBuf::from(default_svg)),
                (svg, _) => svg.map(Path::to_path_buf),
            },
            folded: folded.map(Path::to_path_buf),
        };
        for path in outputs.svg.iter().chain(outputs.folded.iter()) {
            check_writable(path)?;
        }
        Ok(outputs)
    }
}

/// What to do with the SVG of a profile without samples.
pub enum WhenEmpty {
    /// Say this (`profctl: {0}; not writing PATH`) and write no SVG.
    Skip(&'static str),
    /// Fail with this message.
    Fail(String),
}

/// `path` as printed: control characters escaped (another user may have chosen it).
pub fn shown(path: &Path) -> String {
    printable(&path.display().to_string()).into_owned()
}

/// Write `profile`'s folded stacks, then its SVG flamegraph (titled by `svg`), to `outputs`;
/// the printable paths written, in that order. The first failure ends it.
pub fn write_outputs(
    outputs: &Outputs,
    profile: &profile::Profile,
    svg: &profile::SvgOptions,
    when_empty: WhenEmpty,
) -> Result<Vec<String>> {
    let mut written = Vec::new();
    if let Some(path) = &outputs.folded {
        write_atomically(path, |out| profile.write_folded(out).map_err(Into::into))
            .with_context(|| format!("writing folded stacks to {}", path.display()))?;
        written.push(shown(path));
    }
    if let Some(path) = &outputs.svg {
        if profile.total() == 0 {
            match when_empty {
                WhenEmpty::Skip(why) => {
                    eprintln!("profctl: {why}; not writing {}", shown(path));
                    return Ok(written);
                }
                WhenEmpty::Fail(message) => bail!("{message}"),
            }
        }
        write_atomically(path, |out| profile.write_svg(out, svg).map_err(Into::into))
            .with_context(|| format!("writing the flamegraph to {}", path.display()))?;
        written.push(shown(path));
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_svg_and_both_outputs() {
        let dir = tempfile::tempdir().unwrap();
        let folded = dir.path().join("x.folded");
        let svg = dir.path().join("x.svg");
        let o = Outputs::checked(None, None, "profile.svg").unwrap();
        assert_eq!(o.svg, Some(PathBuf::from("profile.svg")));
        let o = Outputs::checked(None, Some(&folded), "profile.svg").unwrap();
        assert!(o.svg.is_none());
        let o = Outputs::checked(Some(&svg), Some(&folded), "profile.svg").unwrap();
        let mut p = profile::Profile::new();
        let ids = [p.intern("app"), p.intern("main")];
        p.add(&ids, 3);
        let options = profile::SvgOptions {
            title: "t".into(),
            subtitle: None,
            ..Default::default()
        };
        let written = write_outputs(&o, &p, &options, WhenEmpty::Skip("empty")).unwrap();
        assert_eq!(written, [shown(&folded), shown(&svg)]);
        assert_eq!(std::fs::read_to_string(&folded).unwrap(), "app;main 3\n");
        let empty = profile::Profile::new();
        let err = write_outputs(&o, &empty, &options, WhenEmpty::Fail("none".into()));
        assert_eq!(err.unwrap_err().to_string(), "none");
        assert!(Outputs::checked(Some(dir.path()), None, "p.svg").is_err());
    }
}
