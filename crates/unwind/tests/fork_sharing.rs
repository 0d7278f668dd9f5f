//! A forked child shares its parent's unwinder as of the fork (no copy, whatever the parent
//! maps), until either maps new code, which gives that one a copy of its own: the other does
//! not see it. The shared unwinder, and the sections it uses, go with the last of them.

#[path = "support/fuzz_input.rs"]
mod fuzz_input;

use std::path::{Path, PathBuf};
use std::time::Duration;

use fuzz_input::{avma, template, template_frames, Input, FAKE_PID, MAP_START, TEMPLATE_FUNCS};
use procmap::{MappedFile, Mapping, ProcessTable};
use unwind::{StackEnd, UnwindLimits, Unwinders};

const WAIT: Duration = Duration::from_secs(10);
const PARENT: u32 = FAKE_PID;
const CHILD: u32 = FAKE_PID - 1;
/// Where a binary the stacks never reach is mapped.
const ELSEWHERE: u64 = 0x1000_0000;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("unwind-fork-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Writes `input` as an ELF file at `path` and maps it into `pid` at `start` at `time`, in
/// the table and the unwinders.
fn map_at(
    table: &mut ProcessTable,
    u: &mut Unwinders,
    (pid, time, start): (u32, u64, u64),
    input: &Input,
    path: &Path,
) -> Mapping {
    let elf = input.elf();
    std::fs::write(path, &elf).expect("write input file");
    let file = MappedFile {
        path: path.to_str().expect("utf-8 path").to_string(),
        build_id: None,
        dev_ino: None,
    };
    let len = (elf.len() as u64 + 0xfff) & !0xfff;
    let mapping = table.add_mapping(pid, time, start, len, 0, file);
    u.on_mapping(table, pid, &mapping);
    mapping
}

/// The template sampled right after the innermost function's `push rbp`, with no frame
/// pointer: only call-frame information walks it. The expected frames.
fn needs_cfi() -> (Input, Vec<u64>) {
    let depth = TEMPLATE_FUNCS;
    let mut input = template(depth);
    input.regs.ip = avma(depth - 1, 1);
    input.regs.fp = 0;
    let mut frames = template_frames(depth);
    frames[0] = input.regs.ip;
    (input, frames)
}

fn unwind(
    u: &mut Unwinders,
    table: &ProcessTable,
    (pid, time): (u32, u64),
    input: &Input,
) -> (Vec<u64>, StackEnd) {
    let mut out = Vec::new();
    let end = u.unwind(table, pid, time, &input.regs, &input.stack, &mut out);
    (out, end)
}

/// The parent maps the template's binary at time 0 and is sampled; its sections are read.
fn sampled_parent(dir: &Path, u: &mut Unwinders) -> (ProcessTable, Input, Vec<u64>) {
    let (input, expected) = needs_cfi();
    let mut table = ProcessTable::new();
    map_at(
        &mut table,
        u,
        (PARENT, 0, MAP_START),
        &input,
        &dir.join("a.elf"),
    );
    unwind(u, &table, (PARENT, 5), &input);
    assert!(u.wait_loaded(WAIT), "the binary was not read");
    let (frames, end) = unwind(u, &table, (PARENT, 6), &input);
    assert_eq!((end, &frames), (StackEnd::Complete, &expected));
    (table, input, expected)
}

#[test]
fn a_child_shares_its_parents_unwinder_as_of_the_fork() {
    let dir = scratch("share");
    let mut u = Unwinders::new();
    let (mut table, input, expected) = sampled_parent(&dir, &mut u);
    table.fork(CHILD, PARENT, CHILD, PARENT, 10);
    u.on_fork(&table, CHILD, PARENT, 10);
    let sizes = u.sizes();
    assert_eq!((sizes.processes, sizes.address_spaces), (2, 1), "{sizes:?}");
    // The child's first sample builds nothing: the parent's modules unwind it.
    let (frames, end) = unwind(&mut u, &table, (CHILD, 20), &input);
    assert_eq!((end, &frames), (StackEnd::Complete, &expected));
    assert_eq!(u.sizes().address_spaces, 1);
    // The parent maps new code: it gets its own copy; the child keeps the shared one.
    map_at(
        &mut table,
        &mut u,
        (PARENT, 30, ELSEWHERE),
        &input,
        &dir.join("b.elf"),
    );
    let sizes = u.sizes();
    assert_eq!((sizes.processes, sizes.address_spaces), (2, 2), "{sizes:?}");
    for pid in [PARENT, CHILD] {
        let (frames, end) = unwind(&mut u, &table, (pid, 40), &input);
        assert_eq!(
            (end, &frames),
            (StackEnd::Complete, &expected),
            "pid {pid:x}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_childs_new_mapping_does_not_reach_its_parent() {
    let dir = scratch("leak");
    let (input, expected) = needs_cfi();
    let mut table = ProcessTable::new();
    let mut u = Unwinders::new();
    // The parent holds a binary the stack never reaches, and is sampled.
    map_at(
        &mut table,
        &mut u,
        (PARENT, 0, ELSEWHERE),
        &input,
        &dir.join("other.elf"),
    );
    unwind(&mut u, &table, (PARENT, 5), &input);
    table.fork(CHILD, PARENT, CHILD, PARENT, 10);
    u.on_fork(&table, CHILD, PARENT, 10);
    assert_eq!(u.sizes().address_spaces, 1);
    // Only the child maps the stack's binary.
    map_at(
        &mut table,
        &mut u,
        (CHILD, 20, MAP_START),
        &input,
        &dir.join("a.elf"),
    );
    assert!(u.wait_loaded(WAIT), "the binaries were not read");
    let sizes = u.sizes();
    assert_eq!((sizes.processes, sizes.address_spaces), (2, 2), "{sizes:?}");
    let (frames, end) = unwind(&mut u, &table, (CHILD, 30), &input);
    assert_eq!((end, &frames), (StackEnd::Complete, &expected));
    // The parent has no module there: the walk ends at the sampled instruction.
    let (frames, end) = unwind(&mut u, &table, (PARENT, 30), &input);
    assert_eq!(frames, vec![input.regs.ip], "{end:?}");
    assert_ne!(end, StackEnd::Complete);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_shared_unwinder_and_its_sections_go_with_the_last_process() {
    let dir = scratch("release");
    // No binary is kept once no unwinder uses it.
    let mut u = Unwinders::with_limits(UnwindLimits {
        max_files: 0,
        ..UnwindLimits::default()
    });
    let (mut table, input, expected) = sampled_parent(&dir, &mut u);
    table.fork(CHILD, PARENT, CHILD, PARENT, 10);
    u.on_fork(&table, CHILD, PARENT, 10);
    table.exit(CHILD, CHILD, 20);
    u.forget(CHILD);
    // The parent still uses the unwinder and its sections.
    let sizes = u.sizes();
    assert_eq!(
        (sizes.processes, sizes.address_spaces, sizes.sections),
        (1, 1, 1),
        "{sizes:?}"
    );
    let (frames, end) = unwind(&mut u, &table, (PARENT, 25), &input);
    assert_eq!((end, &frames), (StackEnd::Complete, &expected));
    table.exit(PARENT, PARENT, 30);
    u.forget(PARENT);
    let sizes = u.sizes();
    assert_eq!(
        (sizes.processes, sizes.address_spaces, sizes.sections),
        (0, 0, 0),
        "{sizes:?}"
    );
    // At least once: with no file kept, one that arrives from the loader before an unwinder
    // takes it is dropped at once and read again (2 in a CI run of 2026-11-30).
    assert!(sizes.evicted >= 1, "{sizes:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A child sampled before its parent ever was (so the FORK found no unwinder to share) builds
/// one, and the parent takes it: the parent's later children share it without a build.
#[test]
fn an_unsampled_parent_takes_its_first_sampled_childs_unwinder() {
    let dir = scratch("unsampled");
    let (input, expected) = needs_cfi();
    let mut table = ProcessTable::new();
    let mut u = Unwinders::new();
    map_at(
        &mut table,
        &mut u,
        (PARENT, 0, MAP_START),
        &input,
        &dir.join("a.elf"),
    );
    assert!(u.wait_loaded(WAIT), "the binary was not read");
    table.fork(CHILD, PARENT, CHILD, PARENT, 10);
    u.on_fork(&table, CHILD, PARENT, 10);
    assert_eq!(u.sizes().processes, 0, "nothing to share yet");
    let (frames, end) = unwind(&mut u, &table, (CHILD, 20), &input);
    assert_eq!((end, &frames), (StackEnd::Complete, &expected));
    let sizes = u.sizes();
    assert_eq!((sizes.processes, sizes.address_spaces), (2, 1), "{sizes:?}");
    let second = CHILD - 1;
    table.fork(second, PARENT, second, PARENT, 30);
    u.on_fork(&table, second, PARENT, 30);
    let (frames, end) = unwind(&mut u, &table, (second, 40), &input);
    assert_eq!((end, &frames), (StackEnd::Complete, &expected));
    let sizes = u.sizes();
    assert_eq!((sizes.processes, sizes.address_spaces), (3, 1), "{sizes:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
