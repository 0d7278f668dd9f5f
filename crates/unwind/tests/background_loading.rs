//! Unwind sections are read on the loader thread: a binary whose sections have not arrived
//! ends the stack (never a wait on the calling thread); once they arrive, every process
//! unwinder built meanwhile gets them; the debug-file finder runs on the loader thread; the
//! loader's queue and the sections held stay within their limits.

#[path = "support/fuzz_input.rs"]
mod fuzz_input;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fuzz_input::{avma, template, template_frames, Input, FAKE_PID, MAP_START, TEMPLATE_FUNCS};
use procmap::{FileId, MappedFile, Mapping, ProcessTable};
use unwind::{StackEnd, UnwindLimits, Unwinders};

const WAIT: Duration = Duration::from_secs(10);

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("unwind-bg-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Writes `input` as an ELF file at `path` and maps it into `pid` in `table`.
fn map_input(table: &mut ProcessTable, pid: u32, input: &Input, path: &Path) -> Mapping {
    let elf = input.elf();
    std::fs::write(path, &elf).expect("write input file");
    table.add_mapping(
        pid,
        0,
        MAP_START,
        (elf.len() as u64 + 0xfff) & !0xfff,
        0,
        MappedFile {
            path: path.to_str().expect("utf-8 path").to_string(),
            build_id: None,
            dev_ino: None,
        },
    )
}

/// The template of `depth` frames sampled right after the innermost function's `push rbp`,
/// with no frame pointer in the register: only call-frame information walks it (framehop's
/// frame-pointer guess for code without a module fails), and the expected frames.
fn needs_cfi(depth: usize) -> (Input, Vec<u64>) {
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
    pid: u32,
    input: &Input,
) -> (Vec<u64>, StackEnd) {
    let mut out = Vec::new();
    let end = u.unwind(table, pid, 1, &input.regs, &input.stack, &mut out);
    (out, end)
}

#[test]
fn a_binary_being_read_ends_the_stack_then_unwinds_once_it_arrives() {
    let dir = scratch("pending");
    let (input, expected) = needs_cfi(TEMPLATE_FUNCS);
    let mut table = ProcessTable::new();
    let pid = FAKE_PID;
    map_input(&mut table, pid, &input, &dir.join("a.elf"));
    let mut u = Unwinders::new();
    // The first sample builds the process's unwinder: the binary is asked for, not read.
    let (frames, end) = unwind(&mut u, &table, pid, &input);
    assert_eq!(end, StackEnd::Unknown, "{frames:x?}");
    assert_eq!(frames, vec![input.regs.ip], "only the sampled instruction");
    assert_eq!(u.sizes().pending_loads, 1);
    // The unwinder built while the binary was pending gets its module on arrival.
    assert!(u.wait_loaded(WAIT), "the binary was not read");
    let sizes = u.sizes();
    assert_eq!(
        (sizes.processes, sizes.sections, sizes.pending_loads),
        (1, 1, 0)
    );
    assert!(sizes.mapped_bytes > 0);
    let (frames, end) = unwind(&mut u, &table, pid, &input);
    assert_eq!(end, StackEnd::Complete, "{frames:x?}");
    assert_eq!(frames, expected);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_prepared_process_has_its_binaries_asked_for_before_its_first_sample() {
    let dir = scratch("prepare");
    let (input, expected) = needs_cfi(TEMPLATE_FUNCS);
    let mut table = ProcessTable::new();
    map_input(&mut table, FAKE_PID, &input, &dir.join("a.elf"));
    let mut u = Unwinders::new();
    u.prepare(&table, FAKE_PID);
    let sizes = u.sizes();
    assert_eq!(
        (sizes.processes, sizes.pending_loads),
        (1, 1),
        "the unwinder is built and the binary asked for"
    );
    assert!(u.wait_loaded(WAIT), "the binary was not read");
    // The first sample finds the sections there.
    let (frames, end) = unwind(&mut u, &table, FAKE_PID, &input);
    assert_eq!(end, StackEnd::Complete, "{frames:x?}");
    assert_eq!(frames, expected);
    // Preparing again changes nothing.
    u.prepare(&table, FAKE_PID);
    assert_eq!(u.sizes().pending_loads, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn arrivals_are_taken_in_by_unwind_without_waiting() {
    let dir = scratch("poll");
    let (input, expected) = needs_cfi(5);
    let mut table = ProcessTable::new();
    map_input(&mut table, FAKE_PID, &input, &dir.join("a.elf"));
    let mut u = Unwinders::new();
    assert_eq!(
        unwind(&mut u, &table, FAKE_PID, &input).1,
        StackEnd::Unknown
    );
    // No wait_loaded: later samples pick the sections up by themselves.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let (frames, end) = unwind(&mut u, &table, FAKE_PID, &input);
        if end == StackEnd::Complete {
            assert_eq!(frames, expected);
            break;
        }
        assert_eq!(end, StackEnd::Unknown);
        assert!(std::time::Instant::now() < deadline, "never arrived");
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_debug_file_finder_runs_on_the_loader_thread() {
    let dir = scratch("finder");
    // Code but no call-frame information: the binary may have it in a separate debug file.
    let mut input = template(3);
    input.eh_frame.clear();
    input.eh_frame_hdr.clear();
    let mut table = ProcessTable::new();
    let mapping = map_input(&mut table, FAKE_PID, &input, &dir.join("bare.elf"));
    let asked_on: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut u = Unwinders::new();
    let log = asked_on.clone();
    u.set_debug_file_finder(Box::new(
        move |_binary: &Path, _access: &procmap::Access| {
            let thread = std::thread::current();
            log.lock()
                .unwrap()
                .push(thread.name().unwrap_or("?").to_string());
            None
        },
    ));
    u.on_mapping(&table, FAKE_PID, &mapping);
    assert!(u.wait_loaded(WAIT));
    assert_eq!(*asked_on.lock().unwrap(), vec!["unwind-load".to_string()]);
    assert_eq!(u.sizes().without_sections, 1, "{:?}", u.sizes());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_full_queue_defers_requests_and_every_binary_still_arrives() {
    let dir = scratch("queue");
    let input = template(4);
    let mut table = ProcessTable::new();
    let mut u = Unwinders::with_limits(UnwindLimits {
        max_queued_loads: 1,
        ..UnwindLimits::default()
    });
    let pids: Vec<u32> = (0..6).map(|i| FAKE_PID - i).collect();
    for (i, &pid) in pids.iter().enumerate() {
        let mapping = map_input(&mut table, pid, &input, &dir.join(format!("f{i}.elf")));
        u.on_mapping(&table, pid, &mapping);
    }
    assert!(u.sizes().pending_loads > 0);
    assert!(u.wait_loaded(WAIT), "{:?}", u.sizes());
    assert_eq!(u.sizes().sections, 6);
    for &pid in &pids {
        let (frames, end) = unwind(&mut u, &table, pid, &input);
        assert_eq!(end, StackEnd::Complete, "pid {pid:x}: {frames:x?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn unused_sections_are_evicted_beyond_the_limit_and_read_again_when_needed() {
    let dir = scratch("evict");
    let input = template(4);
    let mut table = ProcessTable::new();
    let mut u = Unwinders::with_limits(UnwindLimits {
        max_files: 2,
        ..UnwindLimits::default()
    });
    let pids: Vec<u32> = (0..4).map(|i| FAKE_PID - i).collect();
    for (i, &pid) in pids.iter().enumerate() {
        map_input(&mut table, pid, &input, &dir.join(format!("f{i}.elf")));
        unwind(&mut u, &table, pid, &input);
    }
    assert!(u.wait_loaded(WAIT));
    // Every binary is in use by a process: none is dropped (the limit yields to live users).
    assert_eq!(u.sizes().sections, 4);
    assert_eq!(u.sizes().evicted, 0);
    for &pid in &pids {
        assert_eq!(unwind(&mut u, &table, pid, &input).1, StackEnd::Complete);
    }
    // The processes go: their binaries are unused, and dropped down to the limit.
    for &pid in &pids {
        u.forget(pid);
    }
    let sizes = u.sizes();
    assert!(sizes.sections <= 2, "{sizes:?}");
    assert!(sizes.evicted >= 2, "{sizes:?}");
    assert_eq!(sizes.processes, 0);
    // A new process maps every binary again: evicted ones are read again.
    for &pid in &pids {
        unwind(&mut u, &table, pid, &input);
    }
    assert!(u.wait_loaded(WAIT));
    for &pid in &pids {
        assert_eq!(unwind(&mut u, &table, pid, &input).1, StackEnd::Complete);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn forget_file_drops_the_sections() {
    let dir = scratch("forget");
    let input = template(2);
    let mut table = ProcessTable::new();
    let mapping = map_input(&mut table, FAKE_PID, &input, &dir.join("a.elf"));
    let mut u = Unwinders::new();
    u.on_mapping(&table, FAKE_PID, &mapping);
    assert!(u.wait_loaded(WAIT));
    assert_eq!(u.sizes().sections, 1);
    u.forget_file(FileId(mapping.file.0));
    let sizes = u.sizes();
    assert_eq!((sizes.sections, sizes.mapped_bytes), (0, 0), "{sizes:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Records are read ahead of samples taken a little earlier (the side-band rings are drained
/// first): a mapping seen before the process had an unwinder, starting after the sample that
/// builds it, must still be part of it.
#[test]
fn a_mapping_seen_before_an_earlier_sample_still_unwinds_it() {
    let dir = scratch("later-mapping");
    let (input, expected) = needs_cfi(TEMPLATE_FUNCS);
    let path = dir.join("late.elf");
    let elf = input.elf();
    std::fs::write(&path, &elf).expect("write input file");
    let mut table = ProcessTable::new();
    let pid = FAKE_PID;
    // The mapping's record says time 100; it is read, and handed to the unwinders, first.
    let mapping = table.add_mapping(
        pid,
        100,
        MAP_START,
        (elf.len() as u64 + 0xfff) & !0xfff,
        0,
        MappedFile {
            path: path.to_str().expect("utf-8 path").to_string(),
            build_id: None,
            dev_ino: None,
        },
    );
    let mut u = Unwinders::new();
    u.on_mapping(&table, pid, &mapping);
    assert!(u.wait_loaded(WAIT), "the binary was not read");
    // A sample taken at time 1, read after it, builds the process's unwinder.
    let (frames, end) = unwind(&mut u, &table, pid, &input);
    assert_eq!(end, StackEnd::Complete, "{frames:x?}");
    assert_eq!(frames, expected);
    let _ = std::fs::remove_dir_all(&dir);
}
