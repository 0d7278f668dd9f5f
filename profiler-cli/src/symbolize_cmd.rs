//! `profctl symbolize`: name addresses the way the recorder does, for users and for checks.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use symbolize::{DebugSearch, FileOffset, FileSymbolizer, ResolvedFrame, SymbolAddr};

use crate::cli::SymbolizeArgs;

/// Run `profctl symbolize`.
pub fn run(args: SymbolizeArgs) -> Result<ExitCode> {
    let mut search = DebugSearch::system();
    search.extra_dirs = args.debug_dirs.clone();
    let mut addresses = Vec::new();
    let from_stdin;
    let texts: Vec<String> = if args.addresses.is_empty() {
        from_stdin = std::io::stdin()
            .lock()
            .lines()
            .collect::<Result<Vec<_>, _>>()
            .context("reading addresses")?;
        from_stdin
            .iter()
            .flat_map(|l| l.split_whitespace().map(str::to_string))
            .collect()
    } else {
        args.addresses.clone()
    };
    for text in &texts {
        addresses.push(parse_address(text)?);
    }
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let mut frames = Vec::new();
    match (&args.elf, args.pid) {
        (Some(path), _) => {
            let symbolizer = FileSymbolizer::open(path, None, &search)
                .with_context(|| format!("opening {}", path.display()))?;
            for &addr in &addresses {
                symbolizer.frames_into(SymbolAddr(addr), true, &mut frames);
                print_frames(&mut out, addr, &frames)?;
            }
        }
        (None, Some(pid)) => {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).with_context(|| {
                format!("reading the mappings of process {pid} (does it exist?)")
            })?;
            let lines: Vec<_> = maps.lines().filter_map(procmap::parse_maps_line).collect();
            let mut opened: Vec<(String, Option<FileSymbolizer>)> = Vec::new();
            for &addr in &addresses {
                frames.clear();
                if let Some(m) = lines
                    .iter()
                    .find(|m| m.start <= addr && addr < m.end && m.path.starts_with('/'))
                {
                    let index = match opened.iter().position(|(p, _)| p == m.path) {
                        Some(i) => i,
                        None => {
                            let path = PathBuf::from(format!(
                                "/proc/{pid}/root{}",
                                m.path.trim_end_matches(" (deleted)")
                            ));
                            opened.push((
                                m.path.to_string(),
                                FileSymbolizer::open(&path, None, &search).ok(),
                            ));
                            opened.len() - 1
                        }
                    };
                    if let Some(symbolizer) = &opened[index].1 {
                        if let Some(svma) =
                            symbolizer.file_offset_to_addr(FileOffset(addr - m.start + m.offset))
                        {
                            symbolizer.frames_into(svma, true, &mut frames);
                        }
                    }
                }
                print_frames(&mut out, addr, &frames)?;
            }
        }
        (None, None) => bail!("give --pid or --elf"),
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn parse_address(text: &str) -> Result<u64> {
    let digits = text
        .trim()
        .trim_start_matches("0x")
        .trim_start_matches("0X");
    u64::from_str_radix(digits, 16).with_context(|| format!("not a hex address: {text:?}"))
}

/// One address, then its frames innermost first (as `addr2line -i` prints them):
/// `    function at file:line`, with `(inlined)` on inlined frames; `??` when unknown.
fn print_frames(out: &mut impl Write, addr: u64, frames: &[ResolvedFrame]) -> Result<()> {
    writeln!(out, "{addr:#x}")?;
    if frames.is_empty() {
        writeln!(out, "    ?? at ??:0")?;
    }
    for frame in frames.iter().rev() {
        let file = frame.file.as_deref().unwrap_or("??");
        let line = frame.line.unwrap_or(0);
        let inlined = if frame.inlined { " (inlined)" } else { "" };
        writeln!(out, "    {} at {file}:{line}{inlined}", frame.function)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_with_or_without_prefix() {
        assert_eq!(parse_address("0x1a").unwrap(), 0x1a);
        assert_eq!(parse_address("1A").unwrap(), 0x1a);
        assert!(parse_address("zz").is_err());
    }
}
