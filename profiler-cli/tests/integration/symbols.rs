//! Symbolization end to end: what a user sees in the folded output of `profctl record` (and in
//! `profctl symbolize`) for code whose names come from somewhere other than a plain `.symtab`:
//!
//! - DWARF inline frames: always_inline functions three deep (`hot;inl1;inl2;inl3`);
//! - a separate debug file found through `.gnu_debuglink`, and refused when its CRC is wrong or
//!   it belongs to another build;
//! - compressed DWARF (`-gz=zlib`) in a binary without `.symtab`;
//! - `profctl symbolize --elf` against binutils `addr2line` on ~1000 addresses, and its use of
//!   the frame cache;
//! - debuginfod (Debian's real server on loopback; a closed port; a server that never answers);
//! - JIT perf maps (`/tmp/perf-PID.map`);
//! - a binary deleted while it runs (`--pid`);
//! - a short-lived process whose binary is only visible in its own mount namespace.
//!
//! The workloads (`symwork.c`, `jitmap.c`) are built here with their own flags into their own
//! directory; the stripped, split and copied variants are made per test in a scratch dir.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;

/// The inline chain of symwork, outermost first.
const CHAIN: [&str; 4] = ["hot", "inl1", "inl2", "inl3"];
/// Share of the samples under `hot` that must show the whole chain.
const MIN_CHAIN_SHARE: f64 = 0.90;

const SYM_CFLAGS: &[&str] = &[
    "-O2",
    "-g",
    "-fno-omit-frame-pointer",
    "-Wall",
    "-Wl,--build-id",
];

struct SymWorkloads {
    /// symwork.c, -O2 -g (symbols and DWARF in the file).
    symwork: PathBuf,
    /// symwork.c with -DVARIANT=1: another build of the same program.
    symwork_variant: PathBuf,
    /// symwork.c with -gz=zlib (compressed DWARF sections).
    symwork_gz: PathBuf,
    /// jitmap.c.
    jitmap: PathBuf,
}

fn sym_compile(src: &str, out: &Path, extra: &[&str]) {
    compile_with(src, out, SYM_CFLAGS, extra);
}

/// The jitmap workload (built with the symbol workloads).
pub fn jitmap_workload() -> &'static Path {
    &sym_workloads().jitmap
}

fn sym_workloads() -> &'static SymWorkloads {
    static BUILT: OnceLock<SymWorkloads> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profctl-symbols");
        fs::create_dir_all(&dir).expect("create workload dir");
        let w = SymWorkloads {
            symwork: dir.join("symwork"),
            symwork_variant: dir.join("symwork_variant"),
            symwork_gz: dir.join("symwork_gz"),
            jitmap: dir.join("jitmap"),
        };
        sym_compile("symwork.c", &w.symwork, &[]);
        sym_compile("symwork.c", &w.symwork_variant, &["-DVARIANT=1"]);
        sym_compile("symwork.c", &w.symwork_gz, &["-gz=zlib"]);
        sym_compile("jitmap.c", &w.jitmap, &[]);
        w
    })
}

/// `readelf -SW` of a file.
fn sections(path: &Path) -> String {
    tool(Command::new("readelf").arg("-SW").arg(path))
}

/// Whether `path` has no `.symtab` section.
fn has_no_symtab(path: &Path) -> bool {
    !sections(path).contains(" .symtab ")
}

/// The GNU build-id of `path`, hex (from `readelf -n`).
fn build_id_hex(path: &Path) -> String {
    let notes = tool(Command::new("readelf").arg("-n").arg(path));
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{} has no build-id note:\n{notes}", path.display()))
        .trim()
        .to_string()
}

/// Copies `src` to `dst` (executable).
fn copy_exe(src: &Path, dst: &Path) {
    fs::copy(src, dst)
        .unwrap_or_else(|e| panic!("copy {} → {}: {e}", src.display(), dst.display()));
}

/// `objcopy --only-keep-debug BIN DEBUG` then `strip --strip-all BIN`: `bin` keeps neither
/// `.symtab` nor DWARF, `debug` has both.
fn split_debug(bin: &Path, debug: &Path) {
    tool(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(bin)
            .arg(debug),
    );
    tool(Command::new("strip").arg("--strip-all").arg(bin));
    assert!(
        has_no_symtab(bin) && !sections(bin).contains(".debug_info"),
        "strip left symbols or DWARF in {}:\n{}",
        bin.display(),
        sections(bin)
    );
}

/// A unique folded output name in `dir`.
fn folded_path(dir: &Path) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    dir.join(format!("out{}.folded", N.fetch_add(1, Ordering::Relaxed)))
}

/// `profctl record -F FREQ --folded OUT ARGS…` in `cwd`, with `DEBUGINFOD_URLS` removed from
/// the environment unless `envs` sets it; returns the run and the folded stacks (checking
/// exit status 0).
fn record(
    cwd: &Path,
    args: &[&OsStr],
    envs: &[(&str, OsString)],
    limit: Duration,
) -> (Run, Vec<Stack>) {
    let folded = folded_path(cwd);
    let mut cmd = Command::new(profctl());
    cmd.current_dir(cwd)
        .env_remove("DEBUGINFOD_URLS")
        .arg("record")
        .args(["-F", FREQ, "--folded"])
        .arg(&folded)
        .args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let run = Spawned::spawn(cmd, "profctl record").wait_or_panic(limit);
    run.assert_success("profctl record");
    let stacks = read_folded(&folded);
    (run, stacks)
}

fn os<S: AsRef<OsStr> + ?Sized>(s: &S) -> &OsStr {
    s.as_ref()
}

/// Samples of `comm` under `hot`, and of those the ones showing `hot;inl1;inl2;inl3`.
fn chain_counts(stacks: &[Stack], comm: &str) -> (u64, u64) {
    let under_hot = frame_count(stacks, comm, "hot");
    let chain = stacks
        .iter()
        .filter(|s| s.comm == comm && s.has_path(&CHAIN))
        .map(|s| s.count)
        .sum();
    (under_hot, chain)
}

/// Asserts that `comm` has at least `min_samples` samples under `hot` and that at least
/// [`MIN_CHAIN_SHARE`] of them show the whole inline chain, in order.
fn assert_chain(stacks: &[Stack], comm: &str, min_samples: u64, run: &Run) {
    let (under_hot, chain) = chain_counts(stacks, comm);
    let context = format!(
        "comm {comm:?}: {} samples, {under_hot} under hot, {chain} with hot;inl1;inl2;inl3 \
         (comms: {})\ntop folded lines:\n{}--- profctl stderr ---\n{}",
        comm_total(stacks, comm),
        comm_summary(stacks),
        top_lines(stacks, 15),
        run.stderr
    );
    assert!(
        under_hot >= min_samples,
        "too few samples under `hot` (want ≥ {min_samples}): the function is not named\n{context}"
    );
    let share = chain as f64 / under_hot as f64;
    assert!(
        share >= MIN_CHAIN_SHARE,
        "only {:.1}% of the samples under hot show hot;inl1;inl2;inl3 (want ≥ {:.0}%)\n{context}",
        share * 100.0,
        MIN_CHAIN_SHARE * 100.0
    );
}

/// Asserts that `comm` has samples, that none of them names a symwork function, and that most
/// of them carry an unnamed `BASENAME+0x…` frame.
fn assert_unnamed(stacks: &[Stack], comm: &str, basename: &str, what: &str, run: &Run) {
    let total = comm_total(stacks, comm);
    let named: Vec<String> = stacks
        .iter()
        .filter(|s| s.comm == comm)
        .filter(|s| CHAIN.iter().chain(&["main"]).any(|f| s.has(f)))
        .map(Stack::line)
        .collect();
    let prefix = format!("{basename}+0x");
    let unnamed: u64 = stacks
        .iter()
        .filter(|s| s.comm == comm && s.frames.iter().any(|f| f.starts_with(&prefix)))
        .map(|s| s.count)
        .sum();
    let context = format!(
        "comm {comm:?}: {total} samples, {unnamed} with a `{prefix}…` frame (comms: {})\n\
         top folded lines:\n{}--- profctl stderr ---\n{}",
        comm_summary(stacks),
        top_lines(stacks, 15),
        run.stderr
    );
    assert!(total >= 200, "too few samples of {comm:?}\n{context}");
    assert!(
        named.is_empty(),
        "{what}: it was used anyway, its functions are named:\n  {}\n{context}",
        named.join("\n  ")
    );
    assert!(
        unnamed as f64 >= 0.9 * total as f64,
        "{what}: expected its frames as `{prefix}…`\n{context}"
    );
}

/// Test 1: always_inline functions three deep inside a noinline `hot`, -O2 -g.
#[test]
fn inline_chain_three_deep() {
    let _lock = sampling_shared();
    let w = sym_workloads();
    let dir = scratch();
    let (run, stacks) = record(
        dir.path(),
        &[os("--"), w.symwork.as_os_str(), os("1.5")],
        &[],
        Duration::from_secs(60),
    );
    assert_chain(&stacks, "symwork", (1.5 * FREQ_HZ * 0.5) as u64, &run);
}

/// Test 2: Debug info in a separate file found through `.gnu_debuglink`, used only when it matches.
#[test]
fn debuglink_used_only_when_it_matches() {
    let _lock = sampling_shared();
    let w = sym_workloads();
    let dir = scratch();
    let d = dir.path();

    // A good pair: stripped binary + debug file next to it, linked with its CRC.
    let good_dir = d.join("good");
    fs::create_dir(&good_dir).unwrap();
    let good = good_dir.join("sw_dbglink");
    let good_debug = good_dir.join("sw_dbglink.debug");
    copy_exe(&w.symwork, &good);
    split_debug(&good, &good_debug);
    tool(
        Command::new("objcopy")
            .arg(format!("--add-gnu-debuglink={}", good_debug.display()))
            .arg(&good),
    );
    assert!(sections(&good).contains(".gnu_debuglink"));

    // Same, then bytes appended to the debug file: its CRC no longer matches.
    let crc_dir = d.join("badcrc");
    fs::create_dir(&crc_dir).unwrap();
    let badcrc = crc_dir.join("sw_badcrc");
    let badcrc_debug = crc_dir.join("sw_badcrc.debug");
    copy_exe(&w.symwork, &badcrc);
    split_debug(&badcrc, &badcrc_debug);
    tool(
        Command::new("objcopy")
            .arg(format!("--add-gnu-debuglink={}", badcrc_debug.display()))
            .arg(&badcrc),
    );
    fs::OpenOptions::new()
        .append(true)
        .open(&badcrc_debug)
        .unwrap()
        .write_all(b"not part of the debug file")
        .unwrap();

    // Same, then the debug file replaced by the one of another build, under the same name.
    let other_dir = d.join("other");
    fs::create_dir(&other_dir).unwrap();
    let other = other_dir.join("sw_otherb");
    let other_debug = other_dir.join("sw_otherb.debug");
    copy_exe(&w.symwork, &other);
    split_debug(&other, &other_debug);
    tool(
        Command::new("objcopy")
            .arg(format!("--add-gnu-debuglink={}", other_debug.display()))
            .arg(&other),
    );
    tool(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(&w.symwork_variant)
            .arg(&other_debug),
    );
    assert_ne!(
        build_id_hex(&other_debug),
        build_id_hex(&other),
        "the variant build has the same build-id"
    );

    // One recording each: within a recording, frames are shared between files of the same
    // build-id (sw_badcrc is the very same build as sw_dbglink), so the bad copy would be
    // named by the good one's frames, rightly, and the check would prove nothing.
    let record_one = |bin: &Path| {
        record(
            d,
            &[os("--"), bin.as_os_str(), os("1.0")],
            &[],
            Duration::from_secs(60),
        )
    };
    let (run, stacks) = record_one(&good);
    assert_chain(&stacks, "sw_dbglink", 400, &run);
    let (run, stacks) = record_one(&badcrc);
    assert_unnamed(
        &stacks,
        "sw_badcrc",
        "sw_badcrc",
        "the debug file with a wrong CRC must not be used",
        &run,
    );
    let (run, stacks) = record_one(&other);
    assert_unnamed(
        &stacks,
        "sw_otherb",
        "sw_otherb",
        "the debug file of another build must not be used",
        &run,
    );
}

/// Test 3: Compressed DWARF (`-gz=zlib`) in a binary without `.symtab`: names from the DWARF.
#[test]
fn compressed_dwarf_without_symtab() {
    let _lock = sampling_shared();
    let w = sym_workloads();
    let dir = scratch();
    let bin = dir.path().join("sw_zdwarf");
    let mut strip = Command::new("strip");
    strip.arg("--strip-all");
    for s in [
        "info", "abbrev", "line", "str", "line_str", "aranges", "rnglists", "loclists", "ranges",
        "loc",
    ] {
        strip.arg(format!("--keep-section=.debug_{s}"));
    }
    tool(strip.arg("-o").arg(&bin).arg(&w.symwork_gz));
    let secs = sections(&bin);
    assert!(has_no_symtab(&bin), "still a .symtab:\n{secs}");
    let info = secs
        .lines()
        .find(|l| l.contains(" .debug_info "))
        .unwrap_or_else(|| panic!("no .debug_info left:\n{secs}"));
    // The flags column holds `C` (SHF_COMPRESSED).
    assert!(
        info.split_whitespace().any(|f| f == "C"),
        ".debug_info is not compressed: {info}"
    );
    let (run, stacks) = record(
        dir.path(),
        &[os("--"), bin.as_os_str(), os("1.5")],
        &[],
        Duration::from_secs(60),
    );
    assert_chain(&stacks, "sw_zdwarf", (1.5 * FREQ_HZ * 0.5) as u64, &run);
}

/// Parses `addr2line -a -f -i` output: per address, the function names, innermost first.
fn parse_addr2line(text: &str) -> BTreeMap<u64, Vec<String>> {
    let mut out: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut current = None;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(hex) = line.strip_prefix("0x") {
            let addr = u64::from_str_radix(hex, 16).expect("addr2line address line");
            out.insert(addr, Vec::new());
            current = Some(addr);
            continue;
        }
        let addr = current.expect("addr2line output before any address");
        out.get_mut(&addr).unwrap().push(line.to_string());
        lines.next(); // file:line
    }
    out
}

/// Parses `profctl symbolize` output: `ADDR` lines, then `    function at file:line` lines.
fn parse_profctl_symbolize(text: &str) -> BTreeMap<u64, Vec<String>> {
    let mut out: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    let mut current = None;
    for line in text.lines() {
        if let Some(frame) = line.strip_prefix("    ") {
            let addr = current.expect("profctl symbolize: frame before any address");
            let frame = frame.strip_suffix(" (inlined)").unwrap_or(frame);
            let name = frame.rsplit_once(" at ").map_or(frame, |(n, _)| n);
            out.get_mut(&addr).unwrap().push(name.to_string());
        } else if !line.trim().is_empty() {
            let hex = line.trim().trim_start_matches("0x");
            let addr = u64::from_str_radix(hex, 16)
                .unwrap_or_else(|_| panic!("profctl symbolize: bad address line {line:?}"));
            out.insert(addr, Vec::new());
            current = Some(addr);
        }
    }
    out
}

/// Test 4: `profctl symbolize --elf` agrees with binutils `addr2line -f -i -C` on function names
/// and inline chains, on ~1000 addresses spread evenly over `.text` of the profctl debug
/// binary (Rust, DWARF, lots of inlining).
///
/// Padding between functions: an address is kept only if it lies inside a function symbol
/// with a size (`nm -S`: t/T/w/W) and addr2line names it (not `??`); the number dropped is
/// printed.
#[test]
fn symbolize_elf_agrees_with_addr2line() {
    let bin = Path::new(env!("CARGO_BIN_EXE_profctl"));
    let secs = sections(bin);
    let text = secs
        .lines()
        .find(|l| l.contains(" .text "))
        .expect("no .text section");
    let fields: Vec<&str> = text.split(']').nth(1).unwrap().split_whitespace().collect();
    let start = u64::from_str_radix(fields[2], 16).unwrap();
    let size = u64::from_str_radix(fields[4], 16).unwrap();

    let nm = tool(Command::new("nm").args(["-S", "--defined-only"]).arg(bin));
    let mut funcs: Vec<(u64, u64)> = nm
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 4 || !matches!(f[2], "t" | "T" | "w" | "W") {
                return None;
            }
            let a = u64::from_str_radix(f[0], 16).ok()?;
            let s = u64::from_str_radix(f[1], 16).ok()?;
            (s > 0).then_some((a, a + s))
        })
        .collect();
    funcs.sort_unstable();
    let in_function = |addr: u64| {
        let i = funcs.partition_point(|f| f.0 <= addr);
        funcs[..i].iter().rev().take(64).any(|f| addr < f.1)
    };

    const N: u64 = 1000;
    let all: Vec<u64> = (0..N).map(|i| start + i * size / N).collect();
    let addrs: Vec<u64> = all.iter().copied().filter(|&a| in_function(a)).collect();
    let padding = all.len() - addrs.len();
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();

    let run_with_stdin = |cmd: &mut Command| -> String {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
        let mut stdin = child.stdin.take().unwrap();
        let input = input.clone();
        let writer = thread::spawn(move || stdin.write_all(input.as_bytes()));
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        assert!(
            out.status.success(),
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let reference = parse_addr2line(&run_with_stdin(
        Command::new("addr2line")
            .args(["-a", "-f", "-i", "-C", "-e"])
            .arg(bin),
    ));
    // Its own cache directory: frames must come from this binary, not from an earlier run,
    // and the user's cache is left alone.
    let cache = tempfile::tempdir().expect("cache dir");
    let ours = parse_profctl_symbolize(&run_with_stdin(
        Command::new(profctl())
            .args(["symbolize", "-q", "--elf"])
            .arg(bin)
            .env("XDG_CACHE_HOME", cache.path()),
    ));

    let mut compared = 0usize;
    let mut unknown = 0usize;
    let mut disagreements = Vec::new();
    for a in &addrs {
        let want = reference
            .get(a)
            .unwrap_or_else(|| panic!("addr2line printed nothing for {a:#x}"));
        if want.is_empty() || want[0] == "??" {
            unknown += 1;
            continue;
        }
        compared += 1;
        let got = ours.get(a).cloned().unwrap_or_default();
        if &got != want {
            disagreements.push(format!(
                "{a:#x}\n  addr2line: {}\n  profctl:   {}",
                want.join(" ← "),
                got.join(" ← ")
            ));
        }
    }
    let agree = compared - disagreements.len();
    let share = agree as f64 / compared.max(1) as f64;
    println!(
        "{agree}/{compared} addresses agree ({:.2}%); {padding} of {N} outside any sized \
         function symbol and {unknown} named ?? by addr2line were not compared",
        share * 100.0
    );
    for d in disagreements.iter().take(30) {
        println!("{d}");
    }
    assert!(
        compared >= 800,
        "only {compared} addresses compared (padding {padding}, ?? {unknown})"
    );
    assert!(
        share >= 0.99,
        "profctl symbolize agrees with addr2line on only {:.2}% of {compared} addresses \
         (want ≥ 99%); first disagreements:\n{}",
        share * 100.0,
        disagreements
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// What `profctl symbolize -vv --elf` logs when it opens the binary (some address is not in
/// the frame cache).
const OPENS_BINARY: &str = "opening the binary for addresses not in the frame cache";

/// Test 4b: `profctl symbolize --elf` keeps frames in the frame cache shared with the recorder
/// (`$XDG_CACHE_HOME/profctl/frames/<build-id>.frames`): a second run over the same addresses
/// prints the same thing without opening the binary; a corrupt cache file is ignored (and
/// rewritten); `--no-cache` neither reads nor writes it; addresses that cannot be cached are
/// named as without the cache.
#[test]
fn symbolize_elf_frame_cache() {
    let w = sym_workloads();
    let dir = scratch();
    let bin = dir.path().join("symwork");
    copy_exe(&w.symwork, &bin);
    let build_id = build_id_hex(&bin);

    // First, middle and last byte of every sized function symbol, and every other byte of
    // `hot` (for its inline chain).
    let nm = tool(Command::new("nm").args(["-S", "--defined-only"]).arg(&bin));
    let mut addrs: Vec<String> = Vec::new();
    for l in nm.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 4 || !matches!(f[2], "t" | "T") {
            continue;
        }
        let (Ok(a), Ok(size)) = (u64::from_str_radix(f[0], 16), u64::from_str_radix(f[1], 16))
        else {
            continue;
        };
        if size > 0 {
            addrs.extend([a, a + size / 2, a + size - 1].map(|x| format!("{x:#x}")));
        }
        if f[3] == "hot" {
            addrs.extend((a..a + size).step_by(2).map(|x| format!("{x:#x}")));
        }
    }
    assert!(
        addrs.len() >= 9,
        "too few function symbols in symwork:\n{nm}"
    );

    let cache = tempfile::tempdir().expect("cache dir");
    let frames_dir = cache.path().join("profctl").join("frames");
    let frames_file = frames_dir.join(format!("{build_id}.frames"));
    let symbolize = |extra: &[&str], addrs: &[String]| -> (String, String) {
        let out = Command::new(profctl())
            .args(["-vv", "symbolize"])
            .args(extra)
            .arg("--elf")
            .arg(&bin)
            .args(addrs)
            .env("XDG_CACHE_HOME", cache.path())
            .env_remove("PROFCTL_LOG")
            .output()
            .expect("run profctl symbolize");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "profctl symbolize {extra:?} failed ({}): {stderr}",
            out.status
        );
        (String::from_utf8(out.stdout).expect("utf-8 output"), stderr)
    };

    // --no-cache on an empty cache: the reference output, and no cache file.
    let (reference, log) = symbolize(&["--no-cache"], &addrs);
    assert!(
        log.contains(OPENS_BINARY),
        "--no-cache did not open the binary:\n{log}"
    );
    assert!(
        !frames_dir.exists(),
        "--no-cache wrote to the frame cache: {:?}",
        fs::read_dir(&frames_dir).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );
    assert_eq!(
        reference.lines().filter(|l| l.starts_with("0x")).count(),
        addrs.len(),
        "one address line per address:\n{reference}"
    );
    assert!(
        reference.contains("    hot at ") && reference.contains(" (inlined)"),
        "symwork's inline chain is not in the output:\n{reference}"
    );

    // First run: resolved from the binary, and saved under the readelf build-id.
    let (first, log) = symbolize(&[], &addrs);
    assert_eq!(first, reference, "output differs when the cache is filled");
    assert!(
        log.contains(OPENS_BINARY),
        "empty cache, yet the binary was not opened:\n{log}"
    );
    assert!(
        frames_file.is_file(),
        "no {} after the first run; the cache holds {:?}",
        frames_file.display(),
        fs::read_dir(&frames_dir).map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
    );

    // Second run: every address from the cache, the binary not opened.
    let (second, log) = symbolize(&[], &addrs);
    assert_eq!(second, reference, "output differs when read from the cache");
    assert!(
        !log.contains(OPENS_BINARY),
        "every address is cached, yet the binary was opened:\n{log}"
    );

    // --no-cache with a full cache: not read.
    let (uncached, log) = symbolize(&["--no-cache"], &addrs);
    assert_eq!(uncached, reference);
    assert!(
        log.contains(OPENS_BINARY),
        "--no-cache read the frame cache:\n{log}"
    );

    // A corrupt cache file is ignored, then rewritten.
    let garbage = b"PCFRM001 this is not a frame cache".to_vec();
    fs::write(&frames_file, &garbage).unwrap();
    let (after_corrupt, log) = symbolize(&[], &addrs);
    assert_eq!(
        after_corrupt, reference,
        "output differs with a corrupt cache"
    );
    assert!(
        log.contains(OPENS_BINARY),
        "a corrupt cache answered:\n{log}"
    );
    assert_ne!(
        fs::read(&frames_file).unwrap(),
        garbage,
        "the corrupt cache was not rewritten"
    );
    let (again, log) = symbolize(&[], &addrs);
    assert_eq!(again, reference);
    assert!(
        !log.contains(OPENS_BINARY),
        "the rewritten cache did not answer:\n{log}"
    );

    // An address outside every PT_LOAD segment cannot be cached: named from the binary, with
    // the cached ones around it, in input order.
    let mut mixed = addrs.clone();
    mixed.insert(1, "0x7fff00000000".to_string());
    let (with_cache, log) = symbolize(&[], &mixed);
    assert!(
        log.contains(OPENS_BINARY),
        "an uncacheable address was not resolved:\n{log}"
    );
    assert_eq!(with_cache, symbolize(&["--no-cache"], &mixed).0);
    assert!(
        with_cache.contains("0x7fff00000000\n    ?? at ??:0\n"),
        "unexpected output for an address outside the file:\n{with_cache}"
    );
}

/// A symwork copy stripped of everything (no .symtab, no DWARF, no debuglink), with its
/// debug file in `<dir>/served/` only.
struct DebuginfodFixture {
    bin: PathBuf,
    served: PathBuf,
    build_id: String,
}

fn debuginfod_fixture(dir: &Path, name: &str) -> DebuginfodFixture {
    let w = sym_workloads();
    let served = dir.join("served");
    fs::create_dir(&served).unwrap();
    let bin = dir.join(name);
    copy_exe(&w.symwork, &bin);
    split_debug(&bin, &served.join(format!("{name}.debug")));
    assert!(!sections(&bin).contains(".gnu_debuglink"));
    let build_id = build_id_hex(&bin);
    DebuginfodFixture {
        bin,
        served,
        build_id,
    }
}

/// HTTP status of `GET path` on 127.0.0.1:port (None: no answer).
fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head).ok()?;
    let line = String::from_utf8_lossy(&head[..n]).into_owned();
    line.split_whitespace().nth(1)?.parse().ok()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `debuginfod` serving `fx.served`; killed on drop.
struct DebuginfodServer {
    child: Spawned,
    port: u16,
}

impl DebuginfodServer {
    fn start(fx: &DebuginfodFixture, dir: &Path) -> DebuginfodServer {
        let port = free_port();
        let mut cmd = Command::new("debuginfod");
        cmd.arg("-p")
            .arg(port.to_string())
            .arg("-F")
            .arg("-d")
            .arg(dir.join("db.sqlite"))
            .args(["-t", "1", "-g", "0"])
            .arg(&fx.served)
            .env_remove("DEBUGINFOD_URLS");
        let mut server = DebuginfodServer {
            child: Spawned::spawn(cmd, "debuginfod"),
            port,
        };
        let path = format!("/buildid/{}/debuginfo", fx.build_id);
        wait_for(
            &format!("debuginfod serving {path}"),
            Duration::from_secs(30),
            || {
                if let Some(run) = server.child.wait_timeout(Duration::ZERO) {
                    panic!(
                        "debuginfod exited ({}): {}{}",
                        run.status, run.stderr, run.stdout
                    );
                }
                match http_status(port, &path) {
                    Some(200) => Ok(()),
                    other => Err(format!("status {other:?}")),
                }
            },
        );
        server
    }
}

/// 5a. The debug file of a stripped binary comes only from a real debuginfod server.
#[test]
fn debuginfod_names_a_stripped_binary() {
    let _lock = sampling_shared();
    let dir = scratch();
    let fx = debuginfod_fixture(dir.path(), "sw_dinfod");
    let server = DebuginfodServer::start(&fx, dir.path());
    let (run, stacks) = record(
        dir.path(),
        &[os("--"), fx.bin.as_os_str(), os("1.5")],
        &[
            (
                "DEBUGINFOD_URLS",
                format!("http://127.0.0.1:{}", server.port).into(),
            ),
            ("DEBUGINFOD_CACHE_PATH", dir.path().join("cache").into()),
        ],
        Duration::from_secs(90),
    );
    assert_chain(&stacks, "sw_dinfod", (1.5 * FREQ_HZ * 0.5) as u64, &run);
    assert!(
        dir.path()
            .join("cache")
            .join(&fx.build_id)
            .join("debuginfo")
            .is_file(),
        "the debug file is not in DEBUGINFOD_CACHE_PATH\n{}",
        run.stderr
    );
}

/// 5b. The server is down (a closed port): the recording completes and says what it could
/// not fetch.
#[test]
fn debuginfod_down_recording_completes() {
    let _lock = sampling_shared();
    let dir = scratch();
    let fx = debuginfod_fixture(dir.path(), "sw_dinfdown");
    let port = free_port(); // bound then closed: nothing listens there
    let (run, stacks) = record(
        dir.path(),
        &[os("--"), fx.bin.as_os_str(), os("1.0")],
        &[
            ("DEBUGINFOD_URLS", format!("http://127.0.0.1:{port}").into()),
            ("DEBUGINFOD_CACHE_PATH", dir.path().join("cache").into()),
        ],
        Duration::from_secs(60),
    );
    assert!(
        comm_total(&stacks, "sw_dinfdown") > 0,
        "no samples of the workload\n{}",
        top_lines(&stacks, 10)
    );
    assert!(
        run.stderr.contains("could not fetch") && run.stderr.contains("sw_dinfdown"),
        "stderr does not say that the debug info of sw_dinfdown could not be fetched:\n{}",
        run.stderr
    );
}

/// 5c. A server that accepts and never answers: the fetch times out (the client's default,
/// 10 s: there is no environment override), the recording completes and says so.
#[test]
fn debuginfod_slow_server_times_out() {
    let _lock = sampling_shared();
    let dir = scratch();
    let fx = debuginfod_fixture(dir.path(), "sw_dinfslow");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    // Blocking accepts, each connection held open unanswered; the test's own last connection
    // (after `stop`) ends the loop.
    let holder = thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept() {
            if stop2.load(Ordering::Relaxed) {
                break;
            }
            held.push(s);
        }
        held.len()
    });
    let started = Instant::now();
    let (run, stacks) = record(
        dir.path(),
        &[os("--"), fx.bin.as_os_str(), os("1.0")],
        &[
            ("DEBUGINFOD_URLS", format!("http://127.0.0.1:{port}").into()),
            ("DEBUGINFOD_CACHE_PATH", dir.path().join("cache").into()),
        ],
        Duration::from_secs(60),
    );
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = std::net::TcpStream::connect(("127.0.0.1", port));
    let connections = holder.join().unwrap();
    assert!(
        connections > 0,
        "profctl never connected to the slow server\n{}",
        run.stderr
    );
    assert!(comm_total(&stacks, "sw_dinfslow") > 0, "no samples");
    assert!(
        run.stderr.contains("could not fetch") && run.stderr.contains("timed out"),
        "stderr does not say that the fetch timed out:\n{}",
        run.stderr
    );
    // One timeout (10 s), not one per file: after a timeout the server is not asked again.
    assert!(
        elapsed < scaled(Duration::from_secs(25)),
        "recording took {elapsed:.1?} with a server that never answers\n{}",
        run.stderr
    );
}

/// Test 6: A JIT perf map names code in anonymous executable memory.
#[test]
fn jit_perf_map_names_anonymous_code() {
    let _lock = sampling_shared();
    let w = sym_workloads();
    let dir = scratch();
    let folded = folded_path(dir.path());
    let mut cmd = Command::new(profctl());
    cmd.current_dir(dir.path())
        .env_remove("DEBUGINFOD_URLS")
        .arg("record")
        .args(["-F", FREQ, "--folded"])
        .arg(&folded)
        .arg("--")
        .arg(&w.jitmap)
        .arg("1.5");
    let run = Spawned::spawn(cmd, "profctl record").wait_or_panic(Duration::from_secs(60));
    // The workload prints `pid N`; its map stays for the profiler, remove it now.
    let pid = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .map(str::trim)
        .map(str::to_owned);
    if let Some(pid) = &pid {
        let _ = fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    run.assert_success("profctl record");
    assert!(
        pid.is_some(),
        "jitmap did not print its pid:\n{}",
        run.stdout
    );
    let stacks = read_folded(&folded);
    let total = comm_total(&stacks, "jitmap");
    let jitted = frame_count(&stacks, "jitmap", "jitted_hot");
    assert!(
        total as f64 >= 1.5 * FREQ_HZ * 0.5 && jitted as f64 >= 0.8 * total as f64,
        "{jitted} of {total} jitmap samples name jitted_hot (want ≥ 80%)\n\
         top folded lines:\n{}--- profctl stderr ---\n{}",
        top_lines(&stacks, 10),
        run.stderr
    );
}

/// Test 7: A binary deleted while its process runs, recorded with `--pid`.
#[test]
fn deleted_binary_still_named() {
    let _lock = sampling_shared();
    let w = sym_workloads();
    let dir = scratch();
    let bin = dir.path().join("sw_deleted");
    copy_exe(&w.symwork, &bin);
    let mut cmd = Command::new(&bin);
    cmd.arg("forever");
    let mut work = Spawned::spawn(cmd, "sw_deleted");
    let pid = work.pid();
    // Running from its binary (executed and mapped) before the file is deleted.
    wait_for(
        "the workload running from its binary",
        Duration::from_secs(10),
        || {
            if work.wait_timeout(Duration::ZERO).is_some() {
                panic!("workload exited early");
            }
            let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            match maps.contains(bin.to_str().unwrap()) && cpu_seconds(pid) > 0.0 {
                true => Ok(()),
                false => Err("not yet mapped and run".to_string()),
            }
        },
    );
    fs::remove_file(&bin).unwrap();
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(
        maps.contains("sw_deleted (deleted)"),
        "the mapping is not shown as deleted:\n{maps}"
    );
    // Recorded for 1.5 s of wall time, the workload gets what the machine gives it (beside
    // other tests or a busy machine, less than half a core): nine in ten of its samples under
    // a named `hot`, and at least 100 of them.
    let (run, stacks) = record(
        dir.path(),
        &[
            os("--pid"),
            os(&pid.to_string()),
            os("--duration"),
            os("1.5"),
        ],
        &[],
        Duration::from_secs(60),
    );
    work.kill_tree();
    let floor = ((0.9 * comm_total(&stacks, "sw_deleted") as f64) as u64).max(100);
    assert_chain(&stacks, "sw_deleted", floor, &run);
}

/// Test 8: a process that lives ~50 ms with its binary visible only in its own mount namespace
/// (bind-mounted over an empty directory); named after it exited.
#[test]
fn short_lived_process_in_private_mount_namespace() {
    let _lock = sampling_shared();
    let w = sym_workloads();
    let dir = scratch();
    let src = dir.path().join("src");
    let mnt = dir.path().join("mnt");
    fs::create_dir(&src).unwrap();
    fs::create_dir(&mnt).unwrap();
    copy_exe(&w.symwork, &src.join("sw_private"));
    let inner = format!(
        "mount --bind {} {} && exec {}/sw_private 0.05",
        src.display(),
        mnt.display(),
        mnt.display()
    );
    let script = format!("for i in 1 2 3 4 5 6 7 8; do unshare -m sh -c '{inner}' || exit 1; done");
    let (run, stacks) = record(
        dir.path(),
        &[os("--"), os("sh"), os("-c"), os(&script)],
        &[],
        Duration::from_secs(60),
    );
    assert!(
        !mnt.join("sw_private").exists(),
        "the bind mount leaked out of the private namespace"
    );
    let total = comm_total(&stacks, "sw_private");
    assert!(
        total >= 150,
        "only {total} samples of sw_private (8 × 50 ms at {FREQ} Hz)\n{}\n{}",
        top_lines(&stacks, 10),
        run.stderr
    );
    assert_chain(&stacks, "sw_private", total / 2, &run);
}
