//! Issue 23: a binary whose DWARF nests `DW_TAG_inlined_subroutine` thousands deep must not
//! overflow the naming thread's stack (addr2line parses a function's inline tree
//! recursively, one call per level). The binary is generated and built with gcc; the address
//! is named on a thread with a 128-KiB stack in a child process, since an overflow aborts the
//! whole process. gcc's time grows with the square of the depth, so the stack is made small
//! rather than the depth large: with symbolize optimized (addr2line's generic parsing is
//! compiled into it), 1,000 levels overflow 128 KiB without either depth check, where 3,000
//! levels did not overflow std's default 2 MiB.

mod common;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{have, run};
use symbolize::{DebugSearch, FileSymbolizer, SymbolAddr};

/// Levels of inlining in the generated binary.
const DEPTH: usize = 1000;

/// The naming thread's stack: small, so that a modest depth (cheap to build) would overflow it.
const STACK: usize = 128 << 10;

/// The child's environment variable: the binary to name.
const CHILD: &str = "SYMBOLIZE_DEEP_INLINE_CHILD";

/// C source with `depth` always-inline functions each calling the next, all inlined into
/// `outer`.
fn source(depth: usize) -> String {
    let mut c = String::from("volatile int sink;\n");
    c.push_str("static inline __attribute__((always_inline)) void f0(int x) { sink = x; }\n");
    for i in 1..depth {
        let _ = writeln!(
            c,
            "static inline __attribute__((always_inline)) void f{i}(int x) {{ f{}(x + 1); sink = x; }}",
            i - 1
        );
    }
    let _ = writeln!(
        c,
        "__attribute__((noinline)) void outer(int x) {{ f{}(x); }}\nint main(void) {{ outer(1); return 0; }}",
        depth - 1
    );
    c
}

/// The deep binary, built once per depth into the target's temporary directory (`-O0`:
/// always-inline functions are inlined at every level, and gcc is much faster than at `-O2`).
fn build(depth: usize) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deep-inline");
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join(format!("deep-{depth}"));
    if !bin.exists() {
        let src = dir.join(format!("deep-{depth}.c"));
        std::fs::write(&src, source(depth)).unwrap();
        let tmp = dir.join(format!("deep-{depth}.tmp"));
        run(
            "gcc",
            &[
                "-O0",
                "-g",
                "-o",
                &tmp.display().to_string(),
                &src.display().to_string(),
            ],
        );
        std::fs::rename(&tmp, &bin).unwrap();
    }
    bin
}

/// `outer`'s address from `nm`.
fn outer(bin: &Path) -> u64 {
    run("nm", &[&bin.display().to_string()])
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == "outer").then(|| u64::from_str_radix(f[0], 16).unwrap())
        })
        .expect("outer in nm")
}

/// The child: name addresses in `outer` on a thread with a [`STACK`] stack, through the per-unit
/// index and the whole-file context, and print the outermost names.
fn child(bin: &Path) {
    let bin = bin.to_path_buf();
    let names = std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(move || {
            let search = DebugSearch {
                extra_dirs: vec![],
                system_debug_dir: PathBuf::new(),
                debug_files: vec![],
                section_cache: None,
                symbol_cache: None,
            };
            let start = outer(&bin);
            let mut names = Vec::new();
            // Through the per-unit index, then through the whole-file context.
            for whole in [false, true] {
                let mut sym = FileSymbolizer::open(&bin, None, &search).unwrap();
                sym.set_whole_file_dwarf(whole);
                for off in (0..64u64).step_by(8) {
                    let frames = sym.frames(SymbolAddr(start + off), true);
                    names.push(
                        frames
                            .first()
                            .map(|f| f.function.clone())
                            .unwrap_or_default(),
                    );
                }
            }
            names
        })
        .unwrap()
        .join()
        .unwrap();
    for name in names {
        println!("NAMED {name}");
    }
}

#[test]
fn deeply_nested_inline_dwarf_names_the_outer_function_without_overflowing() {
    if let Some(bin) = std::env::var_os(CHILD) {
        child(Path::new(&bin));
        return;
    }
    if !have("gcc") {
        eprintln!("skipped: no gcc");
        return;
    }
    let bin = build(DEPTH);
    let dump = run(
        "readelf",
        &["--debug-dump=info", &bin.display().to_string()],
    );
    let inlined = dump.matches("DW_TAG_inlined_subroutine").count();
    assert!(
        inlined >= DEPTH - 1,
        "gcc emitted {inlined} inlined subroutines"
    );
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "deeply_nested_inline_dwarf_names_the_outer_function_without_overflowing",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, &bin)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the child died naming {} levels of inlining: {:?}\n{}",
        DEPTH,
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The harness's own "test ... " line may precede the first name on its line.
    let names: Vec<&str> = stdout
        .split("NAMED ")
        .skip(1)
        .map(|rest| rest.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(names.len(), 16, "{stdout}");
    assert!(names.iter().all(|n| *n == "outer"), "{names:?}");
}
