//! Robustness of ELF and DWARF symbolization against corrupt binaries, on stable: the input
//! handling of the cargo-fuzz target (`fuzz/fuzz_targets/elf_symbolize.rs`) run over edits of
//! real binaries (flipped bytes, overwritten words, truncations) from a fixed seed. No input may
//! panic, and none may take long.

mod common;
#[path = "support/fuzz_elf.rs"]
mod fuzz_elf;

use std::time::{Duration, Instant};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Per-input bound: generous for a debug build, far below a hang.
const CALL_LIMIT: Duration = Duration::from_secs(5);

#[test]
fn corrupt_binaries_never_panic() {
    let fx = common::fixtures();
    let dir = tempfile::tempdir().unwrap();
    let mut harness = fuzz_elf::Harness::new(dir.path());
    let mut rng = Rng(0x5eed_e1f0_0000_0001);
    let seeds: Vec<Vec<u8>> = [&fx.pie, &fx.lib, &fx.notype]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let original = harness.run(&seeds[0]);
    assert!(original > 0, "the uncorrupted binary names nothing");
    for i in 0..1000 {
        let mut data = seeds[i % seeds.len()].clone();
        match rng.next() % 3 {
            0 => {
                for _ in 0..(1 + rng.next() % 16) {
                    let at = (rng.next() as usize) % data.len();
                    data[at] = rng.next() as u8;
                }
            }
            1 => {
                // Overwrite aligned words with extreme values (sizes, offsets, counts).
                for _ in 0..(1 + rng.next() % 8) {
                    let at = ((rng.next() as usize) % data.len()) & !7;
                    let v =
                        [u64::MAX, 0, 1 << 40, 0x8000_0000, rng.next()][rng.next() as usize % 5];
                    let end = (at + 8).min(data.len());
                    data[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
                }
            }
            _ => {
                let keep = (rng.next() as usize) % data.len();
                data.truncate(keep.max(1));
            }
        }
        let t = Instant::now();
        harness.run(&data);
        assert!(t.elapsed() < CALL_LIMIT, "input {i} took {:?}", t.elapsed());
    }
}

/// Inputs the cargo-fuzz target found: none may panic, not even a panic the symbolizer
/// catches (libFuzzer aborts at any). `elf-fuzz-last-address.bin` asked for the frames of
/// address `u64::MAX`, which made addr2line compute `address + 1`.
/// Inputs the fuzzer found, under `tests/fixtures/hostile/`.
const FOUND: &[&str] = &["elf-fuzz-last-address.bin"];

#[test]
fn inputs_the_fuzzer_found_do_not_panic() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    const NAME: &str = "inputs_the_fuzzer_found_do_not_panic";
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().name() == Some(NAME) {
            PANICS.fetch_add(1, Ordering::SeqCst);
        }
        previous(info);
    }));
    let dir = tempfile::tempdir().unwrap();
    let mut harness = fuzz_elf::Harness::new(dir.path());
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hostile");
    for name in FOUND {
        let data = std::fs::read(fixtures.join(name)).unwrap();
        harness.run(&data);
        assert_eq!(PANICS.load(Ordering::SeqCst), 0, "{name} panicked");
    }
}
