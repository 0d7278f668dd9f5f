//! Input handling shared by the cargo-fuzz target `fuzz/fuzz_targets/ring_records.rs` and the
//! seeded stable test `crates/sampler/tests/fuzz_records.rs`: arbitrary bytes become a ring
//! buffer's data area and a tail/head pair, every record read from it is decoded with both
//! sample formats, and every field of what decodes is touched. Nothing may panic, and reading
//! must stay within the ring.

#![allow(dead_code)]

use sampler::{decode_with, read_records, Record, RingStats, SampleFormat};

/// Ring sizes tried (the data area is a power of two).
const SIZES: [usize; 4] = [64, 512, 4096, 65536];

/// Read and decode every record `data` holds as a ring; returns the records seen.
pub fn run(data: &[u8]) -> u64 {
    if data.len() < 10 {
        return 0;
    }
    let size = SIZES[data[0] as usize % SIZES.len()];
    let tail = u64::from(u16::from_le_bytes([data[1], data[2]]));
    let span = u64::from(u16::from_le_bytes([data[3], data[4]]));
    // Mostly a sane head; sometimes one past the ring (must be counted, not read).
    let head = if data[5] & 0x80 != 0 {
        tail.wrapping_add(span)
    } else {
        tail + span % (size as u64 + 1)
    };
    let format = SampleFormat {
        user_regs_mask: if data[6] & 1 != 0 {
            sampler::UNWIND_REGS_MASK
        } else {
            u64::from(data[7])
        },
        user_stack: data[6] & 2 != 0,
    };
    let mut ring = vec![0u8; size];
    for (i, b) in data[10..].iter().enumerate().take(size) {
        ring[(tail as usize + i) % size] = *b;
    }
    let mut scratch = Vec::new();
    let mut stats = RingStats::default();
    let mut seen = 0u64;
    let new_tail = read_records(&ring, tail, head, &mut scratch, &mut stats, &mut |raw| {
        assert!(raw.body.len() <= size, "a record larger than the ring");
        seen += 1;
        for f in [format, SampleFormat::BASIC, SampleFormat::UNWIND] {
            touch(&decode_with(raw, &f));
        }
    });
    assert!(new_tail <= head.max(tail), "reading went past head");
    seen
}

/// Read every field, so that a lazily wrong slice would be found.
fn touch(record: &Record<'_>) {
    let text = format!("{record:?}");
    std::hint::black_box(text.len());
    if let Record::Sample(s) = record {
        let n = s.callchain.iter().fold(0u64, |a, x| a ^ x);
        std::hint::black_box((n, s.callchain.len(), s.user_stack.len(), s.user_regs));
    }
}
