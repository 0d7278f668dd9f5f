//! Input handling shared by the cargo-fuzz target `fuzz/fuzz_targets/elf_symbolize.rs` and the
//! seeded stable test `crates/symbolize/tests/fuzz_elf.rs`: arbitrary bytes are written as a
//! file, opened as a binary (symbols, notes, debuglink, compressed sections, DWARF) with no
//! debug-file search, and asked for frames with lines at addresses taken from the input and
//! from its symbols. Nothing may panic, and every answer must be bounded.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use symbolize::{DebugSearch, FileOffset, FileSymbolizer, SymbolAddr};

/// Most frames one address may resolve to (inline depth), far above any real binary's.
pub const MAX_FRAMES: usize = 4096;

/// Scratch file the input is written to.
pub struct Harness {
    path: PathBuf,
}

impl Harness {
    /// A harness writing its input under `dir`.
    pub fn new(dir: &Path) -> Harness {
        Harness {
            path: dir.join("input.elf"),
        }
    }

    /// Open `data` as a binary and name a few addresses; returns the frames named.
    pub fn run(&mut self, data: &[u8]) -> usize {
        std::fs::write(&self.path, data).expect("write fuzz input");
        let Ok(sym) = FileSymbolizer::open(&self.path, None, &DebugSearch::default()) else {
            return 0;
        };
        let mut addrs: Vec<SymbolAddr> = Vec::new();
        // Addresses from the input's own bytes, as file offsets and as symbol addresses.
        for chunk in data.chunks(8).take(16) {
            let mut v = [0u8; 8];
            v[..chunk.len()].copy_from_slice(chunk);
            let v = u64::from_le_bytes(v);
            addrs.push(SymbolAddr(v));
            if let Some(a) = sym.file_offset_to_addr(FileOffset(v % (data.len() as u64 + 1))) {
                addrs.push(a);
            }
        }
        for offset in (0..data.len() as u64).step_by(997).take(64) {
            if let Some(a) = sym.file_offset_to_addr(FileOffset(offset)) {
                addrs.push(a);
            }
        }
        let mut named = 0;
        for addr in addrs {
            for lines in [false, true] {
                let frames = sym.frames(addr, lines);
                assert!(frames.len() <= MAX_FRAMES, "{} frames", frames.len());
                named += frames.len();
            }
        }
        std::hint::black_box(sym.estimated_bytes());
        named
    }
}
