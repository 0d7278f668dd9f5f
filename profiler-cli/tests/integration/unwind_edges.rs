//! DWARF unwinding at its edges, each on a workload built without frame pointers
//! (`tests/workloads/edges.c`) so only call-frame information can walk it:
//!
//! - a signal handler: stacks go through the kernel's signal frame (`__restore_rt`) back
//!   into the interrupted code and on to main;
//! - a thread: stacks end cleanly at the thread's first frame (`clone3`/`clone`);
//! - the vDSO (`clock_gettime`): unwound with the vDSO's own call-frame information;
//! - a PLT stub: samples in it are named `edge_tiny@plt` and still reach main;
//! - a binary whose code is described only in `.debug_frame` (built with
//!   `-fno-asynchronous-unwind-tables`; its `.eh_frame` holds only the C runtime's start files),
//!   and the same binary stripped, its `.debug_frame` in a separate debug file found by
//!   debuglink or by build-id under `--debug-dir`.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::common::*;
use crate::unwind::{assert_calls, assert_share_of, quality, record, NO_FP_FLAGS};

struct EdgeWorkloads {
    /// edges.c, linked against libedges.so (next to it).
    edges: PathBuf,
    /// split.c with call-frame information in `.debug_frame` only.
    split_debug_frame: PathBuf,
}

fn edge_workloads() -> &'static EdgeWorkloads {
    static BUILT: OnceLock<EdgeWorkloads> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profctl-edge-workloads");
        fs::create_dir_all(&dir).expect("create workload dir");
        let w = EdgeWorkloads {
            edges: dir.join("edges"),
            split_debug_frame: dir.join("split_dbgframe"),
        };
        let lib = dir.join("libedges.so");
        compile_with("edges_lib.c", &lib, NO_FP_FLAGS, &["-shared", "-fPIC"]);
        let libdir = format!("-L{}", dir.display());
        compile_with(
            "edges.c",
            &w.edges,
            NO_FP_FLAGS,
            &[
                "-pthread",
                &libdir,
                // The library comes before the program on the command line: keep it anyway.
                "-Wl,--no-as-needed",
                "-ledges",
                "-Wl,-rpath,$ORIGIN",
            ],
        );
        compile_with(
            "split.c",
            &w.split_debug_frame,
            NO_FP_FLAGS,
            &[
                "-pthread",
                "-fno-asynchronous-unwind-tables",
                "-fno-unwind-tables",
            ],
        );
        assert_calls(&w.edges, "signal_handler", "signal_hot");
        assert_calls(&w.edges, "thread_body", "thread_hot");
        assert_calls(&w.edges, "plt_loop", "edge_tiny@plt");
        for f in ["work", "mid"] {
            assert_calls(
                &w.split_debug_frame,
                f,
                if f == "work" { "mid" } else { "hot_b" },
            );
        }
        // The premise of the .debug_frame case: the program's own code has no .eh_frame entry.
        let frames = Command::new("readelf")
            .arg("--debug-dump=frames")
            .arg(&w.split_debug_frame)
            .output()
            .expect("run readelf (binutils)");
        let text = String::from_utf8_lossy(&frames.stdout);
        assert!(
            text.contains("Contents of the .debug_frame section"),
            "{} has no .debug_frame",
            w.split_debug_frame.display()
        );
        w
    })
}

fn record_edges(mode: &str, what: &str, seconds: &str) -> (Run, Vec<Stack>) {
    let w = edge_workloads();
    let dir = scratch();
    let (run, stacks, _) = record(
        dir.path(),
        mode,
        &[],
        &w.edges,
        &[OsStr::new(what), OsStr::new(seconds)],
    );
    (run, stacks)
}

fn position(s: &Stack, frame: &str) -> Option<usize> {
    s.frames.iter().position(|f| f == frame)
}

#[test]
fn signal_handler_stacks_continue_into_the_interrupted_code() {
    let _guard = sampling_shared();
    let (run, stacks) = record_edges("dwarf", "signal", "3");
    // main ... signal_loop ... [trampoline] signal_handler signal_hot, nothing unnamed.
    assert_share_of(
        &stacks,
        "edges",
        "signal_hot",
        0.95,
        "--call-graph dwarf: a signal handler's stack continues through the signal frame \
         into signal_loop and main",
        |s| {
            let (Some(m), Some(l), Some(h)) = (
                position(s, "main"),
                position(s, "signal_loop"),
                position(s, "signal_handler"),
            ) else {
                return false;
            };
            m < l && l < h && s.frames[..h].iter().all(|f| !f.starts_with('['))
        },
    );
    let q = quality(&run, "dwarf");
    assert!(
        q.unknown <= 1.0,
        "signal workload: {}% of stacks ended at an unknown frame: {q:?}\n{}",
        q.unknown,
        run.stderr
    );
}

#[test]
fn thread_stacks_end_at_the_threads_first_frame() {
    let _guard = sampling_shared();
    let (run, stacks) = record_edges("dwarf", "thread", "2");
    assert_share_of(
        &stacks,
        "edges",
        "thread_hot",
        0.95,
        "--call-graph dwarf: a thread's stack starts at clone/clone3, start_thread",
        |s| {
            matches!(
                s.frames.first().map(String::as_str),
                Some("clone3" | "clone")
            ) && s.has_path(&["start_thread", "thread_body", "thread_hot"])
                && s.frames.iter().all(|f| !f.starts_with('['))
        },
    );
    let q = quality(&run, "dwarf");
    assert!(
        q.unwound >= 95.0,
        "thread workload: only {}% of stacks reached the first frame: {q:?}\n{}",
        q.unwound,
        run.stderr
    );
}

#[test]
fn vdso_stacks_reach_main() {
    let _guard = sampling_shared();
    let (_run, stacks) = record_edges("dwarf", "vdso", "3");
    // Without the vDSO's call-frame information about 1% of these end at an unknown frame
    // (samples where the vDSO's frame pointer is not set up): the bar is set above that.
    assert_share_of(
        &stacks,
        "edges",
        "__vdso_clock_gettime",
        0.995,
        "--call-graph dwarf: samples in the vDSO reach vdso_loop and main",
        |s| s.has_path(&["main", "vdso_loop"]) && s.frames.iter().all(|f| !f.starts_with('[')),
    );
}

#[test]
fn plt_stub_samples_reach_main() {
    let _guard = sampling_shared();
    let (_run, stacks) = record_edges("dwarf", "plt", "2");
    // Samples in the PLT stub between plt_loop and edge_tiny, named as objdump names it.
    let in_stub = |s: &Stack| {
        s.frames.len() >= 2
            && s.frames[s.frames.len() - 2] == "plt_loop"
            && s.frames.last().is_some_and(|leaf| leaf == "edge_tiny@plt")
    };
    let stub_samples: u64 = stacks
        .iter()
        .filter(|s| s.comm == "edges" && in_stub(s))
        .map(|s| s.count)
        .sum();
    assert!(
        stub_samples >= 20,
        "only {stub_samples} samples in the PLT stub named edge_tiny@plt (want at least 20)\n{}",
        top_lines(&stacks, 10)
    );
    assert_share_of(
        &stacks,
        "edges",
        "plt_loop",
        0.99,
        "--call-graph dwarf: samples in plt_loop, edge_tiny and the PLT stub between them reach \
         main",
        |s| s.has_path(&["main", "plt_loop"]) && s.has("_start"),
    );
}

#[test]
fn debug_frame_only_code_unwinds() {
    let _guard = sampling_shared();
    let w = edge_workloads();
    let dir = scratch();
    let (_run, stacks, _) = record(
        dir.path(),
        "dwarf",
        &[],
        &w.split_debug_frame,
        &["2.0".as_ref(), dir.path().join("measured.txt").as_os_str()],
    );
    assert_share_of(
        &stacks,
        "split_dbgframe",
        "hot_b",
        0.95,
        "--call-graph dwarf, call-frame information in .debug_frame only: main;work;mid;hot_b",
        |s| s.has_path(&["main", "work", "mid", "hot_b"]) && s.has("_start"),
    );
}

/// `objcopy`, panicking with its output on failure.
fn objcopy(args: &[&OsStr]) {
    let out = Command::new("objcopy")
        .args(args)
        .output()
        .expect("run objcopy (binutils)");
    assert!(
        out.status.success(),
        "objcopy {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The GNU build-id of `bin`, in hex (readelf -n).
fn build_id(bin: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(bin)
        .output()
        .expect("run readelf (binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{} has no build-id:\n{text}", bin.display()))
        .trim()
        .to_string()
}

#[test]
fn debug_frame_in_a_separate_debug_file_is_found() {
    let _guard = sampling_shared();
    let w = edge_workloads();
    let dir = scratch();
    // Split the .debug_frame-only build: a stripped binary with a debuglink, and its debug file.
    let debug = dir.path().join("split_dbgframe.debug");
    let stripped = dir.path().join("split_stripped");
    objcopy(&[
        "--only-keep-debug".as_ref(),
        w.split_debug_frame.as_os_str(),
        debug.as_os_str(),
    ]);
    objcopy(&[
        "--strip-debug".as_ref(),
        "--add-gnu-debuglink".as_ref(),
        debug.as_os_str(),
        w.split_debug_frame.as_os_str(),
        stripped.as_os_str(),
    ]);
    let sections = Command::new("readelf")
        .arg("-S")
        .arg(&stripped)
        .output()
        .expect("run readelf");
    assert!(
        !String::from_utf8_lossy(&sections.stdout).contains(".debug_frame"),
        "the stripped binary still has .debug_frame"
    );

    // 1. By debuglink: the debug file sits next to the binary.
    let measured = dir.path().join("measured.txt");
    let (_run, stacks, _) = record(
        dir.path(),
        "dwarf",
        &[],
        &stripped,
        &["2.0".as_ref(), measured.as_os_str()],
    );
    assert_share_of(
        &stacks,
        "split_stripped",
        "hot_b",
        0.95,
        "--call-graph dwarf, .debug_frame in a debuglink file: main;work;mid;hot_b",
        |s| s.has_path(&["main", "work", "mid", "hot_b"]) && s.has("_start"),
    );

    // 2. By build-id under --debug-dir: the debuglink target is gone.
    let id = build_id(&stripped);
    let debug_dir = dir.path().join("debug");
    let by_id = debug_dir
        .join(".build-id")
        .join(&id[..2])
        .join(format!("{}.debug", &id[2..]));
    fs::create_dir_all(by_id.parent().unwrap()).expect("create build-id dir");
    fs::rename(&debug, &by_id).expect("move the debug file under .build-id");
    let debug_dir_arg = debug_dir.display().to_string();
    let (_run, stacks, _) = record(
        dir.path(),
        "dwarf",
        &["--debug-dir", &debug_dir_arg],
        &stripped,
        &["2.0".as_ref(), measured.as_os_str()],
    );
    assert_share_of(
        &stacks,
        "split_stripped",
        "hot_b",
        0.95,
        "--call-graph dwarf, .debug_frame in --debug-dir/.build-id: main;work;mid;hot_b",
        |s| s.has_path(&["main", "work", "mid", "hot_b"]) && s.has("_start"),
    );
}
