//! `profctl symbolize`: name addresses the way the recorder does, for users and for checks.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use symbolize::{
    DebugSearch, ElfLayout, FileOffset, FileSymbolizer, FrameCache, ResolvedFrame, SymbolAddr,
};

use crate::cli::SymbolizeArgs;

/// Run `profctl symbolize`.
pub fn run(args: SymbolizeArgs) -> Result<ExitCode> {
    let mut search = DebugSearch::system();
    search.extra_dirs = args.debug_dirs.clone();
    if !args.no_cache {
        search = recorder::with_user_caches(search);
    }
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
            let cache_dir = if args.no_cache {
                None
            } else {
                recorder::frame_cache_dir()
            };
            symbolize_elf(path, &addresses, &search, cache_dir, &mut out)?;
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

/// `symbolize` always prints file:line, so its frames are cached with lines.
const LINES: bool = true;

/// `--elf`: each address's frames from the frame cache (by build-id and file offset) when an
/// earlier run or `profctl record` left them there; the binary is opened, and its DWARF
/// indexed, only when some address is missing. New frames are saved for the next run.
///
/// Without a cache directory, a build-id, or for an address whose file offset is unknown
/// (outside every `PT_LOAD`'s file bytes), addresses are resolved from the binary, uncached.
/// Output is the same either way, in input order.
fn symbolize_elf(
    path: &Path,
    addresses: &[u64],
    search: &DebugSearch,
    cache_dir: Option<PathBuf>,
    out: &mut impl Write,
) -> Result<()> {
    // The cheap pre-pass: program headers and build-id note only.
    let layout = cache_dir
        .as_ref()
        .and_then(|_| match ElfLayout::read(path) {
            Ok(layout) => Some(layout),
            Err(err) => {
                tracing::debug!(%err, "no frame cache for this file");
                None
            }
        });
    let build_id = layout.as_ref().and_then(ElfLayout::build_id);
    let mut cache = FrameCache::new(cache_dir.filter(|_| build_id.is_some()));
    // Each address's cache key (build-id, file offset); None: not cacheable.
    let keys: Vec<Option<(&[u8], u64)>> = addresses
        .iter()
        .map(|&addr| {
            let offset = layout.as_ref()?.addr_to_file_offset(SymbolAddr(addr))?;
            Some((build_id?, offset.0))
        })
        .collect();
    let uncached = keys.iter().filter(|k| k.is_none()).count();
    let misses = keys
        .iter()
        .flatten()
        .filter(|&&(id, offset)| !cache.contains(id, offset, LINES))
        .count();
    if build_id.is_some() {
        tracing::debug!(
            addresses = addresses.len(),
            misses,
            uncached,
            "frame cache looked up"
        );
    }
    // Opened before anything is printed, so that an unreadable file fails as it always did.
    let symbolizer = if misses + uncached > 0 {
        tracing::debug!(file = %path.display(), "opening the binary for addresses not in the frame cache");
        Some(
            FileSymbolizer::open(path, None, search)
                .with_context(|| format!("opening {}", path.display()))?,
        )
    } else {
        None
    };
    let mut frames = Vec::new();
    for (&addr, &key) in addresses.iter().zip(&keys) {
        if let Some((id, offset)) = key {
            if let Some(cached) = cache.get(id, offset, LINES) {
                print_frames(out, addr, cached)?;
                continue;
            }
        }
        let symbolizer = symbolizer
            .as_ref()
            .expect("the binary is opened when some address is not cached");
        symbolizer.frames_into(SymbolAddr(addr), LINES, &mut frames);
        // As the recorder does: only frames from a file with DWARF are kept, since names
        // from a symbol table alone would hide debug info installed later.
        if let Some((id, offset)) = key {
            if symbolizer.has_dwarf() && !frames.is_empty() {
                cache.insert(id, offset, LINES, &frames);
            }
        }
        print_frames(out, addr, &frames)?;
    }
    // Writes only the files new frames went into.
    if let Err(err) = cache.save() {
        tracing::warn!(%err, "cannot save the frame cache");
    }
    Ok(())
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
