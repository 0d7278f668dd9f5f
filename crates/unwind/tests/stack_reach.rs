//! The unwinder tells how far into a sample's stack copy it read (the ring reader loads about
//! that much of the next sample ahead of time): as far as the outermost frame it reached, no
//! further, and nothing for a sample without a copy.

#[path = "support/fuzz_input.rs"]
mod fuzz_input;

use std::time::Duration;

use fuzz_input::{template, template_frames, Input, FAKE_PID, MAP_START};
use procmap::{MappedFile, ProcessTable};
use unwind::{StackEnd, Unwinders};

/// The template of `depth` frames, mapped into a fresh table and unwinder, its sections read.
fn mapped(depth: usize, name: &str) -> (ProcessTable, Unwinders, Input) {
    let input = template(depth);
    let path = std::env::temp_dir().join(format!("unwind-reach-{name}-{}", std::process::id()));
    let elf = input.elf();
    std::fs::write(&path, &elf).expect("write input file");
    let mut table = ProcessTable::new();
    let mut u = Unwinders::new();
    let file = MappedFile {
        path: path.to_str().expect("utf-8 path").to_string(),
        build_id: None,
        dev_ino: None,
    };
    let len = (elf.len() as u64 + 0xfff) & !0xfff;
    let mapping = table.add_mapping(FAKE_PID, 0, MAP_START, len, 0, file);
    u.on_mapping(&table, FAKE_PID, &mapping);
    let mut out = Vec::new();
    u.unwind(&table, FAKE_PID, 1, &input.regs, &input.stack, &mut out);
    assert!(
        u.wait_loaded(Duration::from_secs(10)),
        "the binary was not read"
    );
    let _ = std::fs::remove_file(&path);
    (table, u, input)
}

#[test]
fn the_reach_is_as_deep_as_the_frames_read() {
    for depth in [2, 5] {
        let (table, mut u, input) = mapped(depth, &format!("d{depth}"));
        let mut out = Vec::new();
        let end = u.unwind(&table, FAKE_PID, 2, &input.regs, &input.stack, &mut out);
        assert_eq!((end, &out), (StackEnd::Complete, &template_frames(depth)));
        // Each frame is 16 bytes [saved rbp, return address], innermost first; the outermost
        // frame's return address is undefined: the last word read is the return address into
        // it, the second-outermost frame's, so the outermost frame's 16 bytes are not read.
        let reach = u.stack_reach();
        assert_eq!(
            (reach, input.stack.len()),
            (16 * (depth - 1), 16 * depth),
            "depth {depth}"
        );
        // A copy longer than the stack: the unwind reads no further.
        let mut longer = input.stack.clone();
        longer.extend_from_slice(&[0u8; 4096]);
        u.unwind(&table, FAKE_PID, 3, &input.regs, &longer, &mut out);
        assert_eq!(u.stack_reach(), reach, "depth {depth}");
        // A sample without a stack copy: nothing read (not the last sample's reach).
        u.unwind(&table, FAKE_PID, 4, &input.regs, &[], &mut out);
        assert_eq!(u.stack_reach(), 0, "depth {depth}");
    }
}
