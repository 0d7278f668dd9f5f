//! DWARF unwinding (`--call-graph dwarf|auto`) against frame pointers (`fp`), end to end:
//!
//! - the split workload built without frame pointers: DWARF keeps main;work;mid;hot_b and the
//!   measured CPU split, where the kernel's frame-pointer walk loses the callers;
//! - a comparator called by Debian's libc `qsort` (libc has no frame pointers): the stack
//!   reaches main through libc's internals;
//! - a recursion deeper than the 16 KiB stack copy (built with frame pointers): `auto` continues
//!   from the kernel's frame-pointer chain to main (exactly DEPTH recursive frames), `dwarf`
//!   alone ends the stack in `[truncated]` and never in wrong frames;
//! - the stack-quality line of the summary and the SVG subtitle.
//!
//! The workloads are built here (own flags, own directory) rather than in `common::workloads`.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::*;

/// Recursion depth of the deeprec workload (its `recurse` frames are ~288 bytes: ~31 KiB).
const DEPTH: usize = 110;

/// Frame-pointer build, as the shared workloads use.
const FP_FLAGS: &[&str] = &[
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
    "-fno-optimize-sibling-calls",
    "-Wall",
];

/// No frame pointers; sibling calls off so that `mid` stays a frame of its own.
pub(crate) const NO_FP_FLAGS: &[&str] = &[
    "-O2",
    "-g",
    "-fomit-frame-pointer",
    "-fno-optimize-sibling-calls",
    "-Wall",
];

struct UnwindWorkloads {
    /// split.c without frame pointers.
    split_nofp: PathBuf,
    /// qsort_cmp.c (frame pointers in the program; libc has none).
    qsort: PathBuf,
    /// deeprec.c with frame pointers.
    deeprec: PathBuf,
}

/// The disassembly of `func` in `bin` (objdump).
fn disassemble(bin: &Path, func: &str) -> String {
    let out = Command::new("objdump")
        .arg("-d")
        .arg("--no-show-raw-insn")
        .arg(bin)
        .output()
        .expect("failed to run objdump (binutils)");
    assert!(out.status.success(), "objdump -d {} failed", bin.display());
    let text = String::from_utf8_lossy(&out.stdout);
    let header = format!("<{func}>:");
    let mut body = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line.ends_with(&header) {
            inside = true;
        } else if inside && line.trim().is_empty() {
            break;
        }
        if inside {
            body.push_str(line);
            body.push('\n');
        }
    }
    assert!(!body.is_empty(), "{} has no function {func}", bin.display());
    body
}

/// Asserts that `caller` in `bin` really calls `callee` (not inlined, not a tail jump).
pub(crate) fn assert_calls(bin: &Path, caller: &str, callee: &str) {
    let body = disassemble(bin, caller);
    assert!(
        body.lines()
            .any(|l| l.contains("call") && l.contains(&format!("<{callee}"))),
        "{caller} does not call {callee} in {} (inlined or tail-called?):\n{body}",
        bin.display()
    );
}

fn unwind_workloads() -> &'static UnwindWorkloads {
    static BUILT: OnceLock<UnwindWorkloads> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profctl-unwind-workloads");
        fs::create_dir_all(&dir).expect("create workload dir");
        let w = UnwindWorkloads {
            split_nofp: dir.join("split_nofp"),
            qsort: dir.join("qsort_cmp"),
            deeprec: dir.join("deeprec"),
        };
        compile_with("split.c", &w.split_nofp, NO_FP_FLAGS, &["-pthread"]);
        compile_with("qsort_cmp.c", &w.qsort, FP_FLAGS, &[]);
        compile_with("deeprec.c", &w.deeprec, FP_FLAGS, &[]);
        // The call paths the tests look for must exist in the machine code.
        assert_calls(&w.split_nofp, "main", "work");
        assert_calls(&w.split_nofp, "main", "hot_c");
        assert_calls(&w.split_nofp, "work", "hot_a");
        assert_calls(&w.split_nofp, "work", "mid");
        assert_calls(&w.split_nofp, "mid", "hot_b");
        assert_calls(&w.qsort, "main", "qsort");
        assert_calls(&w.deeprec, "recurse", "recurse");
        assert_calls(&w.deeprec, "recurse", "bottom");
        // And the no-FP build really has no frame pointers in the hot path: no function there
        // starts with the frame-pointer prologue `push %rbp; mov %rsp,%rbp`.
        for f in ["main", "work", "mid", "hot_a", "hot_b", "hot_c"] {
            let body = disassemble(&w.split_nofp, f);
            let insns: Vec<&str> = body
                .lines()
                .skip(1)
                .take(2)
                .map(|l| l.split_once(':').map_or("", |x| x.1).trim())
                .collect();
            assert!(
                !(insns.len() == 2
                    && insns[0].starts_with("push")
                    && insns[0].ends_with("%rbp")
                    && insns[1].starts_with("mov")
                    && insns[1].ends_with("%rsp,%rbp")),
                "{f} sets up a frame pointer in the no-FP build:\n{body}"
            );
        }
        w
    })
}

/// `profctl record --freq FREQ --call-graph MODE [extra] --folded F -o S -- CMD ARGS`;
/// returns the run (asserted successful), the folded stacks and the SVG's path.
pub(crate) fn record(
    dir: &Path,
    mode: &str,
    extra: &[&str],
    cmd: &Path,
    args: &[&OsStr],
) -> (Run, Vec<Stack>, PathBuf) {
    let folded = dir.join(format!("{mode}.folded"));
    let svg = dir.join(format!("{mode}.svg"));
    let mut argv: Vec<&OsStr> = vec![
        "record".as_ref(),
        "--freq".as_ref(),
        FREQ.as_ref(),
        "--call-graph".as_ref(),
        mode.as_ref(),
    ];
    argv.extend(extra.iter().map(|s| OsStr::new(*s)));
    argv.extend([
        "--folded".as_ref(),
        folded.as_os_str(),
        "-o".as_ref(),
        svg.as_os_str(),
        "--".as_ref(),
        cmd.as_os_str(),
    ]);
    argv.extend_from_slice(args);
    let run = run_profctl(argv, dir, Duration::from_secs(90));
    run.assert_success(&format!("record --call-graph {mode} -- {}", cmd.display()));
    let stacks = read_folded(&folded);
    (run, stacks, svg)
}

/// Samples of `comm` containing `frame`, and how many of those satisfy `good`; panics with
/// the heaviest bad lines unless the share is at least `min`.
pub(crate) fn assert_share_of(
    stacks: &[Stack],
    comm: &str,
    frame: &str,
    min: f64,
    what: &str,
    good: impl Fn(&Stack) -> bool,
) -> f64 {
    let with: Vec<&Stack> = stacks
        .iter()
        .filter(|s| s.comm == comm && s.has(frame))
        .collect();
    let total: u64 = with.iter().map(|s| s.count).sum();
    assert!(
        total >= 200,
        "only {total} samples of {comm:?} contain {frame} (expected hundreds)\ncomms: {}\n{}",
        comm_summary(stacks),
        top_lines(stacks, 15)
    );
    let ok: u64 = with.iter().filter(|s| good(s)).map(|s| s.count).sum();
    let share = ok as f64 / total as f64;
    let bad: Vec<Stack> = with
        .iter()
        .filter(|s| !good(s))
        .map(|s| (*s).clone())
        .collect();
    assert!(
        share >= min,
        "{what}: only {ok} of {total} samples containing {frame} ({:.1}%, want >= {:.1}%)\n\
         heaviest stacks that fail:\n{}",
        100.0 * share,
        100.0 * min,
        top_lines(&bad, 15)
    );
    share
}

/// Share (0–1) of `comm`'s samples containing `frame` that satisfy `good`.
fn share_of(stacks: &[Stack], comm: &str, frame: &str, good: impl Fn(&Stack) -> bool) -> f64 {
    let with = stacks.iter().filter(|s| s.comm == comm && s.has(frame));
    let (mut ok, mut total) = (0u64, 0u64);
    for s in with {
        total += s.count;
        if good(s) {
            ok += s.count;
        }
    }
    if total == 0 {
        0.0
    } else {
        ok as f64 / total as f64
    }
}

/// The stack-quality percentages of the summary line
/// `profctl: user stacks (MODE unwinding): X% whole (Y% unwound to the first frame, Z% spliced),
/// T% truncated, U% unknown`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Quality {
    pub whole: f64,
    pub unwound: f64,
    pub spliced: f64,
    pub truncated: f64,
    pub unknown: f64,
}

fn parse_quality(stderr: &str) -> Option<(String, Quality)> {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("profctl: user stacks ("))?;
    let mode = line
        .strip_prefix("profctl: user stacks (")?
        .split(' ')
        .next()?
        .to_string();
    let rest = line.split_once("): ")?.1;
    let nums: Vec<f64> = rest
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|s| !s.is_empty() && s.chars().any(|c| c.is_ascii_digit()))
        .map(|s| s.parse().ok())
        .collect::<Option<_>>()?;
    let expected_shape =
        "N% whole (N% unwound to the first frame, N% spliced), N% truncated, N% unknown";
    let shape = rest
        .split(|c: char| c.is_ascii_digit() || c == '.')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("N");
    if nums.len() != 5 || format!("N{shape}") != expected_shape {
        return None;
    }
    Some((
        mode,
        Quality {
            whole: nums[0],
            unwound: nums[1],
            spliced: nums[2],
            truncated: nums[3],
            unknown: nums[4],
        },
    ))
}

pub(crate) fn quality(run: &Run, mode: &str) -> Quality {
    let (m, q) = parse_quality(&run.stderr).unwrap_or_else(|| {
        panic!(
            "no well-formed 'profctl: user stacks (...)' line in the summary:\n{}",
            run.stderr
        )
    });
    assert_eq!(
        m, mode,
        "summary names the wrong unwinding mode:\n{}",
        run.stderr
    );
    let sum = q.unwound + q.spliced + q.truncated + q.unknown;
    assert!(
        (sum - 100.0).abs() < 0.5 && (q.whole - q.unwound - q.spliced).abs() < 0.2,
        "stack-quality percentages do not add up: {q:?}\n{}",
        run.stderr
    );
    q
}

#[test]
fn summary_quality_line_parses() {
    let line = "profctl: user stacks (dwarf unwinding): 97.1% whole (95.0% unwound to the first \
                frame, 2.1% spliced), 2.0% truncated, 0.9% unknown";
    let (mode, q) = parse_quality(line).expect("parses");
    assert_eq!(mode, "dwarf");
    assert_eq!(
        q,
        Quality {
            whole: 97.1,
            unwound: 95.0,
            spliced: 2.1,
            truncated: 2.0,
            unknown: 0.9
        }
    );
    assert!(parse_quality("profctl: user stacks (dwarf unwinding): 97.1% whole").is_none());
}

const SPLIT_PATH: [&str; 4] = ["main", "work", "mid", "hot_b"];

/// The whole path, contiguous (split.c's slice loop is a macro, so no inline frame sits
/// between main and work).
fn has_split_path(s: &Stack, tail: &[&str]) -> bool {
    s.has_path(tail)
}

#[test]
fn dwarf_unwinds_split_without_frame_pointers() {
    // Shared: it records its own command only, and judges the shares of its functions against
    // the CPU the workload measured itself (a busy machine slows it, shifting no share).
    let _guard = sampling_shared();
    let w = unwind_workloads();
    for mode in ["dwarf", "auto"] {
        let dir = scratch();
        let measured_path = dir.path().join("measured.txt");
        let (run, stacks, svg) = record(
            dir.path(),
            mode,
            &[],
            &w.split_nofp,
            &["2.5".as_ref(), measured_path.as_os_str()],
        );
        let comm = "split_nofp";
        assert_names(&stacks, comm, &HOT);
        assert_share_of(
            &stacks,
            comm,
            "hot_b",
            0.95,
            &format!("--call-graph {mode}, split without frame pointers: main;work;mid;hot_b"),
            |s| has_split_path(s, &SPLIT_PATH),
        );
        assert_share_of(
            &stacks,
            comm,
            "hot_a",
            0.95,
            &format!("--call-graph {mode}: main;work;hot_a"),
            |s| has_split_path(s, &["main", "work", "hot_a"]),
        );
        assert_shares(&stacks, comm, &read_measured(&measured_path));

        let q = quality(&run, mode);
        assert!(
            q.whole >= 95.0,
            "--call-graph {mode}: summary says only {}% of stacks whole: {q:?}\n{}",
            q.whole,
            run.stderr
        );
        let text = check_svg(&svg);
        assert!(
            text.lines()
                .any(|l| l.contains("stacks") && l.contains("% whole")),
            "SVG subtitle does not report stack quality (no 'stacks … % whole' text)"
        );
    }
}

#[test]
fn frame_pointers_lose_callers_without_frame_pointers() {
    // Documents what DWARF unwinding fixes: the same binary under `fp` keeps almost no path.
    let _guard = sampling_shared();
    let w = unwind_workloads();
    let dir = scratch();
    let measured_path = dir.path().join("measured.txt");
    let (run, stacks, _) = record(
        dir.path(),
        "fp",
        &[],
        &w.split_nofp,
        &["2.0".as_ref(), measured_path.as_os_str()],
    );
    let share = share_of(&stacks, "split_nofp", "hot_b", |s| {
        has_split_path(s, &SPLIT_PATH)
    });
    assert!(
        share < 0.5,
        "--call-graph fp kept main;work;mid;hot_b in {:.1}% of hot_b samples of a binary \
         without frame pointers: the workload no longer shows the breakage\n{}",
        100.0 * share,
        top_lines(&stacks, 10)
    );
    assert!(
        parse_quality(&run.stderr).is_none(),
        "fp mode printed a DWARF stack-quality line:\n{}",
        run.stderr
    );
}

#[test]
fn qsort_comparator_reaches_main_through_libc() {
    let _guard = sampling_shared();
    let w = unwind_workloads();
    for mode in ["dwarf", "auto"] {
        let dir = scratch();
        let (_run, stacks, _) = record(dir.path(), mode, &[], &w.qsort, &["2.0".as_ref()]);
        let comm = "qsort_cmp";
        assert_share_of(
            &stacks,
            comm,
            "cmp_slow",
            0.95,
            &format!("--call-graph {mode}: cmp_slow called by libc qsort, stack reaching main"),
            |s| s.has("main"),
        );
        // Through libc, not skipping it: something sits between main and the comparator.
        assert_share_of(
            &stacks,
            comm,
            "cmp_slow",
            0.95,
            &format!("--call-graph {mode}: libc frames between main and cmp_slow"),
            |s| {
                let m = s.frames.iter().position(|f| f == "main");
                let c = s.frames.iter().position(|f| f == "cmp_slow");
                match (m, c) {
                    (Some(m), Some(c)) if c > m + 1 => s.frames[m + 1..c]
                        .iter()
                        .all(|f| !f.starts_with('[') && f != "main"),
                    _ => false,
                }
            },
        );
    }
}

fn max_stack() -> usize {
    fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(127)
}

fn record_deeprec(mode: &str) -> (Run, Vec<Stack>) {
    let limit = max_stack();
    assert!(
        limit >= DEPTH + 10,
        "kernel.perf_event_max_stack is {limit}: too small for the {DEPTH}-deep recursion's \
         frame-pointer chain (needs {})",
        DEPTH + 10
    );
    let w = unwind_workloads();
    let dir = scratch();
    let depth = DEPTH.to_string();
    let (run, stacks, _) = record(
        dir.path(),
        mode,
        &[],
        &w.deeprec,
        &["2.0".as_ref(), depth.as_ref()],
    );
    (run, stacks)
}

/// Count of `recurse` frames in a stack.
fn recursion_depth(s: &Stack) -> usize {
    s.frames.iter().filter(|f| *f == "recurse").count()
}

/// Frames (outermost first) of a deeprec stack up to and including `bottom`: what the user
/// part may hold. Anything after `bottom` is the kernel's (interrupt entry and the like).
fn user_part(s: &Stack) -> &[String] {
    match s.frames.iter().rposition(|f| f == "bottom") {
        Some(i) => &s.frames[..=i],
        None => &s.frames,
    }
}

const LIBC_START: [&str; 4] = [
    "_start",
    "__libc_start_main",
    "__libc_start_main_impl",
    "__libc_start_call_main",
];

#[test]
fn deep_recursion_auto_splices_to_main() {
    let _guard = sampling_shared();
    let (run, stacks) = record_deeprec("auto");
    let comm = "deeprec";
    assert_share_of(
        &stacks,
        comm,
        "bottom",
        0.95,
        &format!("--call-graph auto, {DEPTH}-deep recursion: main;{DEPTH} x recurse;bottom"),
        |s| {
            let u = user_part(s);
            recursion_depth(s) == DEPTH
                && u.iter().all(|f| {
                    f == "recurse"
                        || f == "bottom"
                        || f == "main"
                        || LIBC_START.contains(&f.as_str())
                })
                && s.has_path(&["main", "recurse"])
                && s.has_path(&["recurse", "bottom"])
        },
    );
    let q = quality(&run, "auto");
    assert!(
        q.whole >= 95.0 && q.spliced >= 90.0,
        "auto on a stack deeper than the copy: want >= 95% whole, nearly all spliced; got {q:?}\n{}",
        run.stderr
    );
}

#[test]
fn deep_recursion_dwarf_alone_ends_truncated() {
    let _guard = sampling_shared();
    let (run, stacks) = record_deeprec("dwarf");
    let comm = "deeprec";
    // Truncated stacks start with the marker and hold only recursion frames below it.
    assert_share_of(
        &stacks,
        comm,
        "bottom",
        0.95,
        "--call-graph dwarf, stack deeper than the copy: deeprec;[truncated];recurse;…;bottom",
        |s| {
            let u = user_part(s);
            u.first().map(String::as_str) == Some("[truncated]")
                && u.len() >= 3
                && u[1..u.len() - 1].iter().all(|f| f == "recurse")
                && u.last().map(String::as_str) == Some("bottom")
                && (8..DEPTH).contains(&recursion_depth(s))
        },
    );
    // Never wrong frames: every frame of every deeprec stack is one we expect.
    let mut wrong: BTreeMap<String, u64> = BTreeMap::new();
    // Samples outside the recursion (process start and exit, the clock read) whose stack
    // holds an unknown frame: honest, not wrong, but rare. Seen once in about ten runs: a
    // sample at libc's first call of strrchr during start-up, whose return address was in
    // no known mapping.
    let mut unknown_outside = 0u64;
    let mut samples = 0u64;
    for s in stacks.iter().filter(|s| s.comm == comm) {
        samples += s.count;
        let u = user_part(s);
        let has_bottom = s.has("bottom");
        if !has_bottom && u.iter().any(|f| f == "[unknown]") {
            unknown_outside += s.count;
            continue;
        }
        for (i, f) in u.iter().enumerate() {
            let ok = f == "recurse"
                || f == "bottom"
                || f == "main"
                || LIBC_START.contains(&f.as_str())
                || (f == "[truncated]" && i == 0)
                // stacks outside bottom may end in anything named
                || (!has_bottom && !f.starts_with('['));
            if !ok {
                *wrong.entry(f.clone()).or_default() += s.count;
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "--call-graph dwarf: unexpected frames in deeprec stacks {wrong:?}\n{}",
        top_lines(&stacks, 10)
    );
    assert!(
        unknown_outside * 200 <= samples,
        "--call-graph dwarf: {unknown_outside} of {samples} deeprec samples outside the \
         recursion hold an unknown frame (want at most 0.5%)\n{}",
        top_lines(&stacks, 10)
    );
    let q = quality(&run, "dwarf");
    assert!(
        q.truncated >= 90.0,
        "--call-graph dwarf on a stack deeper than the copy: want >= 90% truncated; got {q:?}\n{}",
        run.stderr
    );
}
