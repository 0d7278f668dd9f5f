//! Fuzz ELF and DWARF symbolization: arbitrary bytes are opened as a binary (symbols, notes,
//! compressed sections, DWARF; no debug-file search) and asked for frames with lines (see
//! crates/symbolize/tests/support/fuzz_elf.rs, shared with the stable test
//! crates/symbolize/tests/fuzz_elf.rs). It must never panic, and answers stay bounded. Seed
//! the corpus with real binaries (`cp /bin/true corpus/elf_symbolize/`).
//!
//!   cd fuzz && cargo +nightly fuzz run elf_symbolize -- -max_total_time=60

#![no_main]

#[path = "../../crates/symbolize/tests/support/fuzz_elf.rs"]
mod fuzz_elf;

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;

thread_local! {
    static HARNESS: RefCell<fuzz_elf::Harness> = RefCell::new({
        let dir = std::env::temp_dir().join(format!("elf-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create fuzz scratch dir");
        fuzz_elf::Harness::new(&dir)
    });
}

fuzz_target!(|data: &[u8]| {
    HARNESS.with(|h| h.borrow_mut().run(data));
});
