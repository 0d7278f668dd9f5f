//! Robustness of pprof decoding and folding against garbage, on stable: the input handling of
//! the cargo-fuzz target (`fuzz/fuzz_targets/pprof_decode.rs`) run over pseudo-random inputs
//! from a fixed seed, raw and as edits of a well-formed profile (plain and gzipped). No input
//! may panic or take long.

#[path = "support/fuzz_pprof.rs"]
mod fuzz_pprof;

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

/// A small well-formed profile: inline frames, a mapping with a build-id, labels.
fn template() -> pprof::proto::Profile {
    let mut b = pprof::Builder::new(1_001_001);
    let m = b.mapping(&pprof::MappingSpec {
        file: "/usr/bin/app",
        build_id: Some("0123abcd"),
        ..Default::default()
    });
    let leaf = b.location(
        m,
        0x1234,
        &[
            pprof::LineSpec {
                function: "inl",
                file: Some("a.c"),
                line: 3,
            },
            pprof::LineSpec {
                function: "outer",
                file: Some("a.c"),
                line: 20,
            },
        ],
    );
    let main = b.location(
        m,
        0x99,
        &[pprof::LineSpec {
            function: "main",
            ..Default::default()
        }],
    );
    b.add_sample(
        &[leaf, main],
        7,
        &pprof::Labels {
            pid: Some(1),
            tid: Some(2),
            comm: Some("app"),
            uid: Some(0),
            cgroup: Some("/system.slice/x.service"),
        },
    );
    b.set_time(1, 2);
    b.finish()
}

#[test]
fn garbage_profiles_never_panic() {
    let mut rng = Rng(0x5eed_0000_9970_f001);
    let started = Instant::now();
    let raw = pprof::encode(&template());
    let gz = pprof::encode_gz(&template());
    assert_eq!(fuzz_pprof::run(&raw), 14, "the template folds (twice)");
    let mut folded_some = 0;
    for i in 0..20_000 {
        let mut input = match i % 3 {
            0 => raw.clone(),
            1 => gz.clone(),
            _ => (0..rng.next() % 256).map(|_| rng.next() as u8).collect(),
        };
        if i % 3 != 2 && !input.is_empty() {
            for _ in 0..(1 + rng.next() % 6) {
                let at = (rng.next() as usize) % input.len();
                input[at] = rng.next() as u8;
            }
            if rng.next() % 4 == 0 {
                input.truncate((rng.next() as usize) % input.len());
            }
        }
        if fuzz_pprof::run(&input) > 0 {
            folded_some += 1;
        }
    }
    // Some edits still decode and fold: the folding code was reached, not only the decoder.
    assert!(folded_some > 100, "only {folded_some} inputs folded");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}
