//! Robustness of ring-buffer reading and record decoding against garbage, on stable: the input
//! handling of the cargo-fuzz target (`fuzz/fuzz_targets/ring_records.rs`) run over pseudo-random
//! inputs from a fixed seed, raw and as edits of well-formed records. No input may panic or
//! take long.

#[path = "support/fuzz_records.rs"]
mod fuzz_records;

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

/// A well-formed PERF_RECORD_SAMPLE (BASIC format: ip, pid/tid, time, cpu, period, a callchain
/// of three entries) as the ring holds it.
fn sample_record() -> Vec<u8> {
    let mut body = Vec::new();
    for v in [
        0x401000u64,
        (7u64 << 32) | 7,
        123,
        1,
        1000,
        3,
        0x401000,
        0x401100,
        0x401200,
    ] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    let mut rec = Vec::new();
    rec.extend_from_slice(&9u32.to_le_bytes()); // PERF_RECORD_SAMPLE
    rec.extend_from_slice(&2u16.to_le_bytes()); // user
    rec.extend_from_slice(&((8 + body.len()) as u16).to_le_bytes());
    rec.extend_from_slice(&body);
    rec
}

#[test]
fn garbage_rings_never_panic() {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let started = Instant::now();
    let template = sample_record();
    let mut records = 0;
    for i in 0..20_000 {
        let mut input = vec![0u8; 10];
        for b in input.iter_mut() {
            *b = rng.next() as u8;
        }
        input[0] = (i % 4) as u8;
        if i % 2 == 0 {
            // Edits of well-formed records: a few copies, then flipped bytes.
            for _ in 0..(1 + rng.next() % 6) {
                input.extend_from_slice(&template);
            }
            input[1] = 0;
            input[2] = 0;
            let len = (input.len() - 10) as u16;
            input[3..5].copy_from_slice(&len.to_le_bytes());
            input[5] = 0;
            for _ in 0..(rng.next() % 8) {
                let at = 10 + (rng.next() as usize) % (input.len() - 10);
                input[at] = rng.next() as u8;
            }
        } else {
            for _ in 0..(rng.next() % 512) {
                input.push(rng.next() as u8);
            }
        }
        records += fuzz_records::run(&input);
    }
    assert!(
        records > 1000,
        "too few records decoded ({records}): the input never parses"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "20,000 inputs took {:?}",
        started.elapsed()
    );
}
