//! Fuzz DWARF unwinding: arbitrary bytes become .text/.eh_frame/.eh_frame_hdr sections (raw, or
//! edits to a well-formed template), user registers and a stack copy (see
//! crates/unwind/tests/support/fuzz_input.rs, shared with the stable test
//! crates/unwind/tests/fuzz_unwind.rs), written as a small ELF file and unwound with the real
//! `unwind::Unwinders` through a `ProcessTable`. It must never panic, hang, or return more than
//! `MAX_FRAMES` frames.
//!
//!   cd fuzz && cargo +nightly fuzz run unwind_sections -- -max_total_time=60

#![no_main]

#[path = "../../crates/unwind/tests/support/fuzz_input.rs"]
mod fuzz_input;

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;

thread_local! {
    static HARNESS: RefCell<fuzz_input::Harness> = RefCell::new({
        let dir = std::env::temp_dir().join(format!("unwind-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create fuzz scratch dir");
        fuzz_input::Harness::new(&dir)
    });
}

fuzz_target!(|data: &[u8]| {
    let input = fuzz_input::Input::from_bytes(data);
    let (frames, end) = HARNESS.with(|h| h.borrow_mut().unwind(&input));
    assert!(frames.len() <= unwind::MAX_FRAMES);
    if frames.len() == unwind::MAX_FRAMES {
        assert_eq!(end, unwind::StackEnd::Truncated);
    }
    if let Some(&first) = frames.first() {
        assert_eq!(first, input.regs.ip);
    }
});
