//! Profiles read from bytes: a file for `flamegraph --input`, `top --input` and `diff` (a
//! pprof profile, gzipped or not, or folded stacks, told apart by their content), and the
//! folded stacks profilerd answers with.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::output::printable;

/// Largest input file read (a pprof file's decompressed size has its own bound,
/// [`pprof::MAX_DECOMPRESSED_BYTES`]).
pub const MAX_INPUT_BYTES: u64 = 256 << 20;

/// A profile read from a file.
pub struct Loaded {
    /// The stacks.
    pub profile: profile::Profile,
    /// Whether each stack's root frame is the thread's command name (profctl's folded
    /// stacks; pprof whose every sample has a `comm` label).
    pub comm_root: bool,
    /// "pprof" or "folded".
    pub kind: &'static str,
}

/// Read `path` as pprof or folded stacks.
pub fn load(path: &Path) -> Result<Loaded> {
    let shown = || printable(&path.display().to_string()).into_owned();
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", shown()))?;
    let mut bytes = Vec::new();
    file.take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", shown()))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        bail!(
            "{} is larger than {} MiB; refusing to read it",
            shown(),
            MAX_INPUT_BYTES >> 20
        );
    }
    parse(&bytes).with_context(|| format!("reading {}", shown()))
}

/// A profile from a file's bytes: gzip or binary is pprof; text whose first line is
/// `frames count` is folded stacks.
pub fn parse(bytes: &[u8]) -> Result<Loaded> {
    let gzip = bytes.starts_with(&[0x1f, 0x8b]);
    if !gzip {
        if let Ok(text) = std::str::from_utf8(bytes) {
            let first = text.lines().find(|l| !l.trim().is_empty());
            if first.is_none_or(|l| profile::parse_folded_line(l).is_some()) {
                return folded(text);
            }
        }
    }
    let p = pprof::decode(bytes).context("not folded stacks, nor a pprof profile")?;
    from_pprof(&p)
}

/// Folded stacks, every non-empty line `frame;frame;… count`.
fn folded(text: &str) -> Result<Loaded> {
    let mut profile = profile::Profile::new();
    let mut frames = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Some((names, count)) = profile::parse_folded_line(line) else {
            bail!(
                "line {}: not `frame;frame;… count`: {:?}",
                i + 1,
                printable(&line.chars().take(80).collect::<String>())
            );
        };
        frames.clear();
        frames.extend(names.into_iter().map(|n| profile.intern(n)));
        profile.add(&frames, count);
    }
    Ok(Loaded {
        profile,
        comm_root: true,
        kind: "folded",
    })
}

/// The stacks of a pprof profile: command names as roots when its samples carry them, as
/// profilerd's do (a thread whose name was never seen is rooted at its pid, a sample of no
/// thread at `[unknown]`); a profile without them (Go's own) as it is.
pub fn from_pprof(p: &pprof::proto::Profile) -> Result<Loaded> {
    let comm_key = p.string_table.iter().position(|s| s == pprof::label::COMM);
    let comm_root = p.sample.iter().any(|s| {
        s.label
            .iter()
            .any(|l| Some(l.key as usize) == comm_key && l.str != 0)
    });
    let stacks = pprof::fold(
        p,
        &pprof::FoldOptions {
            comm_root,
            lines: false,
        },
    )?;
    let mut profile = profile::Profile::new();
    let mut frames = Vec::new();
    for stack in &stacks {
        frames.clear();
        frames.extend(stack.frames.iter().map(|n| profile.intern(n)));
        profile.add(&frames, stack.count);
    }
    Ok(Loaded {
        profile,
        comm_root,
        kind: "pprof",
    })
}

/// Folded stacks from profilerd, whose lines that are not `frame;frame;… count` are skipped.
pub fn folded_profile(text: &str) -> profile::Profile {
    let mut profile = profile::Profile::new();
    let mut frames = Vec::new();
    for line in text.lines() {
        let Some((names, count)) = profile::parse_folded_line(line) else {
            continue;
        };
        frames.clear();
        frames.extend(names.into_iter().map(|n| profile.intern(n)));
        profile.add(&frames, count);
    }
    profile
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_and_pprof_are_told_apart() {
        let text = "app;main;a 5\napp;main;b 1\n";
        let folded = parse(text.as_bytes()).unwrap();
        assert_eq!(folded.kind, "folded");
        assert_eq!(folded.profile.total(), 6);
        let p = pprof::from_folded(text, 1000, true).unwrap();
        for bytes in [pprof::encode_gz(&p), pprof::encode(&p)] {
            let loaded = parse(&bytes).unwrap();
            assert_eq!(loaded.kind, "pprof");
            assert!(loaded.comm_root);
            assert_eq!(loaded.profile.folded_lines(), folded.profile.folded_lines());
        }
        let err = parse(b"app;main;a 5\nno count here\n").err().unwrap();
        assert!(format!("{err:#}").contains("line 2"), "{err:#}");
        let err = parse(b"\x00\x01garbage").err().unwrap();
        assert!(format!("{err:#}").contains("pprof"), "{err:#}");
    }
}
