//! Fuzz pprof decoding and folding: arbitrary bytes are decoded as a pprof profile (gzipped or
//! not) and folded, and read as folded stacks (see crates/pprof/tests/support/fuzz_pprof.rs,
//! shared with the stable test crates/pprof/tests/fuzz_pprof.rs). It must never panic, and
//! the size bounds must hold.
//!
//!   cd fuzz && cargo +nightly fuzz run pprof_decode -- -max_total_time=60

#![no_main]

#[path = "../../crates/pprof/tests/support/fuzz_pprof.rs"]
mod fuzz_pprof;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzz_pprof::run(data);
});
