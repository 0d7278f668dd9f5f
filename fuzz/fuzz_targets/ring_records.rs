//! Fuzz ring-buffer reading and record decoding: arbitrary bytes become a ring's data area and
//! a tail/head pair (see crates/sampler/tests/support/fuzz_records.rs, shared with the stable
//! test crates/sampler/tests/fuzz_records.rs); every record read is decoded with each sample
//! format. It must never panic nor read past the ring.
//!
//!   cd fuzz && cargo +nightly fuzz run ring_records -- -max_total_time=60

#![no_main]

#[path = "../../crates/sampler/tests/support/fuzz_records.rs"]
mod fuzz_records;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    fuzz_records::run(data);
});
