//! Input handling shared by the cargo-fuzz target `fuzz/fuzz_targets/pprof_decode.rs` and the
//! seeded stable test `crates/pprof/tests/fuzz_pprof.rs`: arbitrary bytes are decoded as a
//! pprof profile (gzipped or not), folded every way, and read as folded stacks. Nothing may
//! panic; errors are fine.

#![allow(dead_code)]

/// Decode `data` and fold what decodes; read it as folded text too. Returns the samples folded.
pub fn run(data: &[u8]) -> u64 {
    let mut samples = 0;
    if let Ok(profile) = pprof::decode(data) {
        for (comm_root, lines) in [(false, false), (true, true)] {
            if let Ok(stacks) = pprof::fold(&profile, &pprof::FoldOptions { comm_root, lines }) {
                samples += stacks
                    .iter()
                    .map(|s| s.count)
                    .fold(0u64, u64::saturating_add);
            }
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(profile) = pprof::from_folded(text, 1_000_000, true) {
            let _ = pprof::fold(&profile, &pprof::FoldOptions::default());
        }
    }
    samples
}
