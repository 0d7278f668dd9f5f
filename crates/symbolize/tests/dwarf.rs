//! `FileSymbolizer`: inline frames and lines from DWARF, separate debug
//! files (build-id, debuglink, extra dirs), compressed sections and
//! MiniDebugInfo, checked against `addr2line -f -i -C`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{build_inline, have, hex, run};
use symbolize::{crc32, DebugSearch, FileOffset, FileSymbolizer, ResolvedFrame, SymbolAddr};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("symbolize-dwarf-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
}

/// A search that never looks at the real system's debug directory.
fn isolated(extra_dirs: Vec<PathBuf>) -> DebugSearch {
    DebugSearch {
        extra_dirs,
        system_debug_dir: PathBuf::new(),
        debug_files: vec![],
        section_cache: None,
        symbol_cache: None,
    }
}

/// (address, size) of a symbol from `nm -S`.
fn nm_symbol(bin: &Path, name: &str) -> (u64, u64) {
    for line in run("nm", &["-S", &s(bin)]).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 4 && f[3] == name {
            return (
                u64::from_str_radix(f[0], 16).unwrap(),
                u64::from_str_radix(f[1], 16).unwrap(),
            );
        }
    }
    panic!("{name} not in nm output of {}", bin.display());
}

/// One addr2line frame: function, file, line.
#[derive(Clone, Debug, PartialEq, Eq)]
struct A2lFrame {
    function: String,
    file: Option<String>,
    line: Option<u32>,
}

/// `addr2line -a -f -i -C -e bin` for all `addrs` (fed on stdin), each
/// chain innermost first as addr2line prints it.
fn addr2line_frames(bin: &Path, addrs: &[u64]) -> Vec<Vec<A2lFrame>> {
    use std::io::Write;
    let mut child = Command::new("addr2line")
        .args(["-a", "-f", "-i", "-C", "-e", &s(bin)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("addr2line");
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let mut chains: Vec<Vec<A2lFrame>> = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(l) = lines.next() {
        if l.starts_with("0x") {
            chains.push(Vec::new());
            continue;
        }
        let loc = lines.next().unwrap_or("??:0");
        let loc = loc.split(" (discriminator").next().unwrap();
        let (file, line) = loc.rsplit_once(':').unwrap_or((loc, "?"));
        chains.last_mut().unwrap().push(A2lFrame {
            function: l.to_string(),
            file: (file != "??").then(|| file.to_string()),
            line: line.parse().ok().filter(|&n| n != 0),
        });
    }
    assert_eq!(chains.len(), addrs.len(), "addr2line output: {text}");
    chains
}

fn names(frames: &[ResolvedFrame]) -> Vec<&str> {
    frames.iter().map(|f| f.function.as_str()).collect()
}

/// The ground truth from `reference` (a binary with DWARF) for every byte
/// of `hot`, and a check of `sym` against it: inline chains, files, lines.
/// Returns how many addresses had the full three-deep chain.
fn check_inline_chain(sym: &FileSymbolizer, reference: &Path) -> usize {
    let (start, size) = nm_symbol(reference, "hot");
    let addrs: Vec<u64> = (start..start + size).collect();
    let truth = addr2line_frames(reference, &addrs);
    let mut deep = 0;
    for (&a, chain) in addrs.iter().zip(&truth) {
        let ours = sym.frames(SymbolAddr(a), true);
        let theirs: Vec<&str> = chain.iter().rev().map(|f| f.function.as_str()).collect();
        assert_eq!(
            names(&ours),
            theirs,
            "{a:#x}: ours {ours:?}, addr2line {chain:?}"
        );
        for (o, t) in ours.iter().zip(chain.iter().rev()) {
            assert_eq!(o.line, t.line, "{a:#x}: ours {ours:?}, addr2line {chain:?}");
            assert_eq!(o.file, t.file, "{a:#x}: ours {ours:?}, addr2line {chain:?}");
        }
        let inlined: Vec<bool> = ours.iter().map(|f| f.inlined).collect();
        let mut want = vec![true; ours.len()];
        want[0] = false;
        assert_eq!(inlined, want, "{a:#x}");
        if theirs == ["hot", "inl1", "inl2", "inl3"] {
            deep += 1;
        }
    }
    assert!(deep > 0, "no address of hot is inside inl3");
    // Without lines: same names, no locations.
    let ours = sym.frames(SymbolAddr(start), false);
    assert!(ours.iter().all(|f| f.file.is_none() && f.line.is_none()));
    deep
}

#[test]
fn inline_frames_outermost_first() {
    let dir = tempdir();
    let bin = build_inline(dir.path(), "inl", &[]);
    let sym = FileSymbolizer::open(&bin, None, &isolated(vec![])).unwrap();
    assert_eq!(sym.sources(), ["binary"]);
    let deep = check_inline_chain(&sym, &bin);
    eprintln!("{deep} addresses inside inl3");
    // One address in full, for the record.
    let (start, size) = nm_symbol(&bin, "hot");
    let a = (start..start + size)
        .find(|&a| sym.frames(SymbolAddr(a), false).len() == 4)
        .unwrap();
    let f = sym.frames(SymbolAddr(a), true);
    assert_eq!(names(&f), ["hot", "inl1", "inl2", "inl3"]);
    assert!(f[3].file.as_deref().unwrap().ends_with("inline.c"));
    assert_eq!(f[3].line, Some(5), "{f:?}"); // inl3's body
    assert_eq!(f[2].line, Some(6), "{f:?}"); // inl2 calls inl3
    assert_eq!(f[1].line, Some(7), "{f:?}"); // inl1 calls inl2
    assert_eq!(f[0].line, Some(8), "{f:?}"); // hot calls inl1
                                             // A plain function: one frame.
    let (secret, _) = nm_symbol(&bin, "secret_static");
    assert_eq!(
        names(&sym.frames(SymbolAddr(secret), false)),
        ["secret_static"]
    );
    // Outside any function: nothing.
    assert!(sym.frames(SymbolAddr(1), true).is_empty());
}

/// `prog` stripped with its debug file `prog.debug` beside it (debuglink).
struct Split {
    dir: tempfile::TempDir,
    /// Unstripped original (ground truth).
    full: PathBuf,
    stripped: PathBuf,
    debug: PathBuf,
    build_id: Vec<u8>,
}

fn split() -> Split {
    let dir = tempdir();
    let full = build_inline(dir.path(), "full", &[]);
    let work = dir.path().join("bin");
    std::fs::create_dir(&work).unwrap();
    let stripped = work.join("prog");
    let debug = work.join("prog.debug");
    run("objcopy", &["--only-keep-debug", &s(&full), &s(&debug)]);
    run("strip", &["--strip-all", "-o", &s(&stripped), &s(&full)]);
    // Run in the debug file's directory: objcopy reads it to compute the CRC.
    let out = Command::new("objcopy")
        .current_dir(&work)
        .args(["--add-gnu-debuglink=prog.debug", "prog"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = common::readelf_build_id(&full).unwrap();
    let build_id = (0..id.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&id[i..i + 2], 16).unwrap())
        .collect();
    Split {
        dir,
        full,
        stripped,
        debug,
        build_id,
    }
}

fn build_id_file(root: &Path, id: &[u8]) -> PathBuf {
    root.join(".build-id")
        .join(format!("{:02x}", id[0]))
        .join(format!("{}.debug", hex(&id[1..])))
}

fn put(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::rename(from, to).unwrap();
}

/// Nothing of the stripped binary is named by itself.
fn assert_unnamed(sym: &FileSymbolizer, full: &Path) {
    let (hot, _) = nm_symbol(full, "hot");
    let (secret, _) = nm_symbol(full, "secret_static");
    assert!(sym.frames(SymbolAddr(hot), true).is_empty());
    assert!(sym.frames(SymbolAddr(secret), true).is_empty());
}

#[test]
fn debuglink_next_to_binary() {
    let sp = split();
    let sym = FileSymbolizer::open(&sp.stripped, None, &isolated(vec![])).unwrap();
    assert_eq!(
        sym.sources(),
        [
            "binary".to_string(),
            format!("debuglink {}", sp.debug.display())
        ]
    );
    check_inline_chain(&sym, &sp.full);
    let (secret, _) = nm_symbol(&sp.full, "secret_static");
    assert_eq!(
        names(&sym.frames(SymbolAddr(secret), false)),
        ["secret_static"]
    );
}

#[test]
fn debuglink_in_dot_debug() {
    let sp = split();
    let moved = sp.stripped.parent().unwrap().join(".debug/prog.debug");
    put(&sp.debug, &moved);
    let sym = FileSymbolizer::open(&sp.stripped, None, &isolated(vec![])).unwrap();
    assert_eq!(sym.sources()[1], format!("debuglink {}", moved.display()));
    check_inline_chain(&sym, &sp.full);
}

#[test]
fn debuglink_under_system_dir() {
    let sp = split();
    let system = sp.dir.path().join("sysdebug");
    let bin_dir = sp.stripped.parent().unwrap();
    let moved = system
        .join(bin_dir.strip_prefix("/").unwrap())
        .join("prog.debug");
    put(&sp.debug, &moved);
    let search = DebugSearch {
        extra_dirs: vec![],
        system_debug_dir: system,
        debug_files: vec![],
        section_cache: None,
        symbol_cache: None,
    };
    let sym = FileSymbolizer::open(&sp.stripped, None, &search).unwrap();
    assert_eq!(sym.sources()[1], format!("debuglink {}", moved.display()));
    check_inline_chain(&sym, &sp.full);
}

#[test]
fn build_id_in_system_dir() {
    let sp = split();
    let system = sp.dir.path().join("sysdebug");
    let moved = build_id_file(&system, &sp.build_id);
    put(&sp.debug, &moved);
    let search = DebugSearch {
        extra_dirs: vec![],
        system_debug_dir: system,
        debug_files: vec![],
        section_cache: None,
        symbol_cache: None,
    };
    let sym = FileSymbolizer::open(&sp.stripped, None, &search).unwrap();
    assert_eq!(
        sym.sources()[1],
        format!("build-id dir {}", moved.display())
    );
    check_inline_chain(&sym, &sp.full);
}

#[test]
fn build_id_in_extra_dir() {
    let sp = split();
    let extra = sp.dir.path().join("extra");
    let moved = build_id_file(&extra, &sp.build_id);
    put(&sp.debug, &moved);
    // The system dir holds nothing for it.
    let search = DebugSearch {
        extra_dirs: vec![sp.dir.path().join("missing"), extra],
        system_debug_dir: sp.dir.path().join("sysdebug"),
        debug_files: vec![],
        section_cache: None,
        symbol_cache: None,
    };
    let sym = FileSymbolizer::open(&sp.stripped, None, &search).unwrap();
    assert_eq!(sym.sources()[1], format!("extra dir {}", moved.display()));
    check_inline_chain(&sym, &sp.full);
}

#[test]
fn explicit_debug_file_matched_by_build_id() {
    let sp = split();
    // As a debuginfod client caches it: <cache>/<build-id>/debuginfo, a name no debuglink names.
    let fetched = sp
        .dir
        .path()
        .join("cache")
        .join(hex(&sp.build_id))
        .join("debuginfo");
    put(&sp.debug, &fetched);
    let search = DebugSearch {
        debug_files: vec![fetched.clone()],
        section_cache: None,
        symbol_cache: None,
        ..isolated(vec![])
    };
    let sym = FileSymbolizer::open(&sp.stripped, None, &search).unwrap();
    assert_eq!(
        sym.sources()[1],
        format!("debug file {}", fetched.display())
    );
    check_inline_chain(&sym, &sp.full);
    // Without it, nothing names the stripped binary.
    let bare = FileSymbolizer::open(&sp.stripped, None, &isolated(vec![])).unwrap();
    assert_unnamed(&bare, &sp.full);
}

#[test]
fn debuglink_name_in_extra_dir() {
    let sp = split();
    let extra = sp.dir.path().join("extra");
    let moved = extra.join("prog.debug");
    put(&sp.debug, &moved);
    let sym = FileSymbolizer::open(&sp.stripped, None, &isolated(vec![extra])).unwrap();
    assert_eq!(sym.sources()[1], format!("extra dir {}", moved.display()));
    check_inline_chain(&sym, &sp.full);
}

#[test]
fn binary_gone_debug_file_by_build_id() {
    let sp = split();
    let extra = sp.dir.path().join("extra");
    put(&sp.debug, &build_id_file(&extra, &sp.build_id));
    let gone = sp.dir.path().join("deleted-binary");
    let sym = FileSymbolizer::open(&gone, Some(&sp.build_id), &isolated(vec![extra])).unwrap();
    assert_eq!(sym.sources().len(), 1);
    assert_eq!(sym.elf().build_id(), Some(sp.build_id.as_slice()));
    // The debug file's program headers still translate offsets.
    let (hot, _) = nm_symbol(&sp.full, "hot");
    let segs = common::load_segments(&sp.full);
    let &(off, vaddr, _, _) = segs
        .iter()
        .find(|&&(_, v, _, m)| hot >= v && hot < v + m)
        .unwrap();
    let addr = sym
        .file_offset_to_addr(FileOffset(hot - vaddr + off))
        .unwrap();
    assert_eq!(addr, SymbolAddr(hot));
    check_inline_chain(&sym, &sp.full);
    // Without any debug file: the binary's own error.
    assert!(FileSymbolizer::open(&gone, Some(&sp.build_id), &isolated(vec![])).is_err());
}

#[test]
fn binary_replaced_is_not_trusted() {
    let sp = split();
    let err = FileSymbolizer::open(&sp.stripped, Some(&[1, 2, 3, 4]), &isolated(vec![]))
        .expect_err("a binary with another build-id is not the profiled one");
    assert!(err.to_string().contains("build-id mismatch"), "{err}");
}

#[test]
fn wrong_crc_is_ignored() {
    let sp = split();
    // Same build-id, different bytes: the CRC no longer matches.
    let mut data = std::fs::read(&sp.debug).unwrap();
    data.extend_from_slice(b"tampered");
    std::fs::write(&sp.debug, &data).unwrap();
    let sym = FileSymbolizer::open(&sp.stripped, None, &isolated(vec![])).unwrap();
    assert_eq!(sym.sources(), ["binary"]);
    assert_unnamed(&sym, &sp.full);
    // Still found (and used) by build-id.
    let extra = sp.dir.path().join("extra");
    std::fs::create_dir_all(build_id_file(&extra, &sp.build_id).parent().unwrap()).unwrap();
    std::fs::copy(&sp.debug, build_id_file(&extra, &sp.build_id)).unwrap();
    let sym = FileSymbolizer::open(&sp.stripped, None, &isolated(vec![extra])).unwrap();
    assert_eq!(sym.sources().len(), 2, "{:?}", sym.sources());
    check_inline_chain(&sym, &sp.full);
}

#[test]
fn wrong_build_id_is_ignored() {
    let sp = split();
    // Same code, another build-id.
    let other = build_inline(
        sp.dir.path(),
        "other",
        &["-Wl,--build-id=0x0123456789abcdef0123456789abcdef01234567"],
    );
    let other_debug = sp.dir.path().join("other.debug");
    run(
        "objcopy",
        &["--only-keep-debug", &s(&other), &s(&other_debug)],
    );
    std::fs::remove_file(&sp.debug).unwrap();
    // Under the real build-id's name in an extra dir.
    let extra = sp.dir.path().join("extra");
    let target = build_id_file(&extra, &sp.build_id);
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::copy(&other_debug, &target).unwrap();
    // And under the debuglink name, with the CRC the link asks for
    // (forged by patching the link), so only the build-id can reject it.
    let link_dir = sp.dir.path().join("linked");
    std::fs::create_dir_all(&link_dir).unwrap();
    std::fs::copy(&other_debug, link_dir.join("prog.debug")).unwrap();
    let mut bin = std::fs::read(&sp.stripped).unwrap();
    let crc = crc32(&std::fs::read(&other_debug).unwrap());
    let pos = bin
        .windows(b"prog.debug\0".len())
        .position(|w| w == b"prog.debug\0")
        .unwrap();
    let crc_at = (pos + b"prog.debug\0".len()).next_multiple_of(4);
    bin[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    let patched = sp.dir.path().join("patched");
    std::fs::write(&patched, &bin).unwrap();

    let sym = FileSymbolizer::open(&patched, None, &isolated(vec![extra, link_dir])).unwrap();
    assert_eq!(sym.sources(), ["binary"]);
    assert_unnamed(&sym, &sp.full);
}

/// Compressed debug sections: `kind` names the test for skipping.
fn check_compressed(kind: &str, make: impl FnOnce(&Path) -> Option<PathBuf>) {
    let dir = tempdir();
    let reference = build_inline(dir.path(), "ref", &[]);
    let Some(bin) = make(dir.path()) else {
        eprintln!("{kind}: not supported by this toolchain; skipped");
        return;
    };
    let sym = FileSymbolizer::open(&bin, None, &isolated(vec![])).unwrap();
    assert!(sym.has_dwarf());
    let deep = check_inline_chain(&sym, &reference);
    eprintln!("{kind}: {deep} addresses three deep, all agree");
}

fn sections(bin: &Path) -> String {
    run("readelf", &["-SW", "-t", &s(bin)])
}

#[test]
fn compressed_zlib() {
    check_compressed("-gz=zlib", |d| {
        let bin = build_inline(d, "gz", &["-gz=zlib"]);
        assert!(sections(&bin).contains("ZLIB"), "{}", sections(&bin));
        Some(bin)
    });
}

#[test]
fn compressed_zstd() {
    check_compressed("zstd", |d| {
        let plain = build_inline(d, "plain", &[]);
        let bin = d.join("zstd");
        let gcc = Command::new("cc")
            .args([
                "-O2",
                "-g",
                "-gz=zstd",
                "-o",
                &s(&bin),
                &fixture("inline.c"),
            ])
            .output()
            .unwrap();
        if gcc.status.success() {
            return Some(bin);
        }
        let objcopy = Command::new("objcopy")
            .args(["--compress-debug-sections=zstd", &s(&plain), &s(&bin)])
            .output()
            .unwrap();
        (objcopy.status.success() && sections(&bin).contains("ZSTD")).then_some(bin)
    });
}

#[test]
fn compressed_legacy_zdebug() {
    check_compressed(".zdebug", |d| {
        let plain = build_inline(d, "plain", &[]);
        let bin = d.join("zdebug");
        let ok = Command::new("objcopy")
            .args(["--compress-debug-sections=zlib-gnu", &s(&plain), &s(&bin)])
            .status()
            .unwrap()
            .success();
        (ok && sections(&bin).contains(".zdebug_info")).then_some(bin)
    });
}

#[test]
fn mini_debug_info() {
    if !have("xz") {
        eprintln!("xz not installed: MiniDebugInfo test skipped");
        return;
    }
    let dir = tempdir();
    let d = dir.path();
    let full = build_inline(d, "full", &[]);
    // As Fedora's find-debuginfo does it.
    let defined = |args: &[&str]| -> Vec<String> {
        let mut a = vec!["--format=posix", "--defined-only"];
        a.extend_from_slice(args);
        let f = s(&full);
        a.push(&f);
        run("nm", &a)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 2 && matches!(f[1], "T" | "t")).then(|| f[0].to_string())
            })
            .collect()
    };
    let dynsyms = defined(&["-D"]);
    let keep: Vec<String> = defined(&[])
        .into_iter()
        .filter(|n| !dynsyms.contains(n))
        .collect();
    assert!(keep.iter().any(|n| n == "secret_static"));
    let keep_file = d.join("keep_symbols");
    std::fs::write(&keep_file, keep.join("\n") + "\n").unwrap();
    let debug = d.join("debug");
    let mini = d.join("mini_debuginfo");
    run("objcopy", &["--only-keep-debug", &s(&full), &s(&debug)]);
    run(
        "objcopy",
        &[
            "-S",
            "--remove-section",
            ".gdb_index",
            "--remove-section",
            ".comment",
            &format!("--keep-symbols={}", keep_file.display()),
            &s(&debug),
            &s(&mini),
        ],
    );
    run("xz", &["-f", &s(&mini)]);
    let bin = d.join("prog");
    run("strip", &["--strip-all", "-o", &s(&bin), &s(&full)]);
    let stripped = FileSymbolizer::open(&bin, None, &isolated(vec![])).unwrap();
    assert_unnamed(&stripped, &full);
    run(
        "objcopy",
        &[
            &format!("--add-section=.gnu_debugdata={}.xz", mini.display()),
            &s(&bin),
        ],
    );
    let sym = FileSymbolizer::open(&bin, None, &isolated(vec![])).unwrap();
    assert_eq!(sym.sources(), ["binary", "minidebuginfo"]);
    assert!(!sym.has_dwarf());
    for name in ["secret_static", "hot"] {
        let (a, size) = nm_symbol(&full, name);
        for probe in [a, a + size / 2, a + size - 1] {
            assert_eq!(
                sym.frames(SymbolAddr(probe), true),
                [ResolvedFrame {
                    function: name.to_string(),
                    file: None,
                    line: None,
                    inlined: false
                }]
            );
        }
    }
}

/// Addresses spread over the executable sections of `bin`.
fn spread_addresses(bin: &Path, count: u64) -> Vec<u64> {
    let out = run("readelf", &["-SW", &s(bin)]);
    let mut ranges = Vec::new();
    for l in out.lines() {
        let l = l.trim_start();
        let Some(rest) = l.strip_prefix('[') else {
            continue;
        };
        let f: Vec<&str> = rest
            .split_once(']')
            .map(|x| x.1)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if f.len() > 6 && f[0] == ".text" {
            let addr = u64::from_str_radix(f[2], 16).unwrap();
            let size = u64::from_str_radix(f[4], 16).unwrap();
            ranges.push((addr, size));
        }
    }
    let total: u64 = ranges.iter().map(|r| r.1).sum();
    assert!(total > 0);
    let step = (total / count).max(1);
    let mut addrs = Vec::new();
    for (a, size) in ranges {
        let mut x = a + step / 3;
        while x < a + size && (addrs.len() as u64) < count {
            addrs.push(x);
            x += step;
        }
    }
    addrs
}

/// Function names and inline chains against `addr2line -f -i -C`.
/// Returns (agreeing, compared).
fn agreement(bin: &Path, addrs: &[u64], normalize: impl Fn(&str) -> String) -> (usize, usize) {
    let sym = FileSymbolizer::open(bin, None, &isolated(vec![])).unwrap();
    let truth = addr2line_frames(bin, addrs);
    let (mut agree, mut compared) = (0, 0);
    let (mut shown, mut padding) = (0, 0);
    for (&a, chain) in addrs.iter().zip(&truth) {
        if chain.iter().all(|f| f.function == "??") {
            continue; // addr2line knows nothing
        }
        if chain.len() == 1 && sym.elf().symbol(SymbolAddr(a)).is_none() {
            // Padding between functions: no symbol covers it, and binutils
            // names it after the symbol before it.
            padding += 1;
            continue;
        }
        compared += 1;
        let ours: Vec<String> = sym
            .frames(SymbolAddr(a), false)
            .iter()
            .map(|f| normalize(&f.function))
            .collect();
        let theirs: Vec<String> = chain.iter().rev().map(|f| normalize(&f.function)).collect();
        if ours == theirs {
            agree += 1;
        } else if shown < 30 {
            shown += 1;
            eprintln!("{a:#x}: ours {ours:?}\n          addr2line {theirs:?}");
        }
    }
    eprintln!("{}: {padding} padding addresses skipped", bin.display());
    (agree, compared)
}

#[test]
fn agreement_with_addr2line_cxx() {
    if !have("g++") {
        eprintln!("g++ not found: skipped");
        return;
    }
    let dir = tempdir();
    let bin = dir.path().join("cxx");
    run("g++", &["-O2", "-g", "-o", &s(&bin), &fixture("cxx.cpp")]);
    let (start, size) = {
        let out = run("readelf", &["-SW", &s(&bin)]);
        let l = out.lines().find(|l| l.contains(" .text ")).unwrap();
        let f: Vec<&str> = l.split(']').nth(1).unwrap().split_whitespace().collect();
        (
            u64::from_str_radix(f[2], 16).unwrap(),
            u64::from_str_radix(f[4], 16).unwrap(),
        )
    };
    // Every byte of a small .text.
    let addrs: Vec<u64> = (start..start + size).collect();
    let (agree, compared) = agreement(&bin, &addrs, |n| n.to_string());
    let pct = 100.0 * agree as f64 / compared as f64;
    eprintln!("C++ -O2: {agree}/{compared} agree ({pct:.2}%)");
    assert!(pct >= 99.0);
}

/// The test binary itself: Rust with full DWARF and much inlining.
#[test]
fn agreement_with_addr2line_rust() {
    let exe = std::env::current_exe().unwrap();
    let addrs = spread_addresses(&exe, 300);
    // addr2line and rustc-demangle differ on a few spellings.
    let normalize = |n: &str| {
        let mut n = n.to_string();
        // Legacy-mangled names: binutils keeps the `::h<hash>` suffix.
        if let Some(i) = n.rfind("::h") {
            let h = &n[i + 3..];
            if h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()) {
                n.truncate(i);
            }
        }
        n
    };
    let (agree, compared) = agreement(&exe, &addrs, normalize);
    let pct = 100.0 * agree as f64 / compared as f64;
    eprintln!("Rust test binary: {agree}/{compared} agree ({pct:.2}%)");
    assert!(compared >= 250, "only {compared} addresses compared");
    assert!(pct >= 99.0);
}

#[test]
fn dwarf_is_parsed_lazily() {
    let exe = std::env::current_exe().unwrap();
    let size = std::fs::metadata(&exe).unwrap().len();
    let t = std::time::Instant::now();
    let sym = FileSymbolizer::open(&exe, None, &isolated(vec![])).unwrap();
    let open_time = t.elapsed();
    assert!(sym.has_dwarf());
    assert!(!sym.dwarf_parsed(), "open() must not index DWARF");
    // A function of the symbolize crate's `symbolizer` module (built with DWARF): the
    // dependencies, built without debug info, fill much of .text, where the symbol table
    // alone names an address and no DWARF is read.
    let own_addr = run("nm", &[&s(&exe)])
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3
                && f[1].eq_ignore_ascii_case("t")
                && f[2].starts_with("_ZN9symbolize10symbolizer"))
            .then(|| u64::from_str_radix(f[0], 16).ok())
            .flatten()
        })
        .expect("a function of the symbolize crate in the symbol table");
    let t = std::time::Instant::now();
    let frames = sym.frames(SymbolAddr(own_addr), true);
    let first = t.elapsed();
    assert!(sym.dwarf_parsed());
    assert!(!frames.is_empty());
    eprintln!(
        "{} ({} MiB): open {open_time:?}, first frames() {first:?}",
        exe.display(),
        size >> 20
    );
}

/// A whole-file index no lookup used since the last `release_idle` is dropped, and built
/// again, with the same answers, when a lookup needs it; the depth check that reads every
/// entry of the file is not made again.
#[test]
fn an_idle_whole_file_index_is_dropped_and_built_again() {
    let exe = std::env::current_exe().unwrap();
    let mut sym = FileSymbolizer::open(&exe, None, &isolated(vec![])).unwrap();
    sym.set_whole_file_dwarf(true);
    let addrs = spread_addresses(&exe, 20);
    let before: Vec<_> = addrs
        .iter()
        .map(|&a| sym.frames(SymbolAddr(a), true))
        .collect();
    assert!(
        before.iter().any(|f| f.len() > 1),
        "no inline frames to compare"
    );
    assert_eq!(sym.dwarf_units_parsed(), (0, true));
    assert!(!sym.release_idle(), "used since the last call: kept");
    assert!(sym.dwarf_units_parsed().1);
    assert!(sym.release_idle(), "unused for a whole interval: dropped");
    assert_eq!(sym.dwarf_units_parsed(), (0, false));
    assert!(!sym.dwarf_parsed());
    let after: Vec<_> = addrs
        .iter()
        .map(|&a| sym.frames(SymbolAddr(a), true))
        .collect();
    assert!(sym.dwarf_units_parsed().1, "built again");
    assert_eq!(before, after);
    assert_eq!(
        sym.dwarf_depth_scans(),
        1,
        "the file's depth was checked once"
    );
}

/// Per-unit indexes are bounded: over thousands of spread addresses of this binary (Rust,
/// whose units have no `.debug_aranges`: their ranges come from the units' root entries),
/// at most 32 units stay parsed, and the answers equal the whole-file index's; a unit
/// parsed again after a release is not scanned for its depth again.
#[test]
fn per_unit_indexes_are_bounded_and_agree_with_the_whole_file_index() {
    let exe = std::env::current_exe().unwrap();
    let lazy = FileSymbolizer::open(&exe, None, &isolated(vec![])).unwrap();
    let mut whole = FileSymbolizer::open(&exe, None, &isolated(vec![])).unwrap();
    whole.set_whole_file_dwarf(true);
    let addrs = spread_addresses(&exe, 2000);
    let mut inline = 0;
    for &a in &addrs {
        let frames = lazy.frames(SymbolAddr(a), true);
        inline += usize::from(frames.len() > 1);
        assert_eq!(frames, whole.frames(SymbolAddr(a), true), "{a:#x}");
    }
    let (units, _) = lazy.dwarf_units_parsed();
    eprintln!("{units} units held parsed, {inline} addresses with inline frames");
    assert!(units > 0 && units <= 32, "{units} units held parsed");
    assert!(inline > 100, "only {inline} addresses with inline frames");
    // Idle units go at the second release (the first finds them used since the start).
    let last = lazy.frames(SymbolAddr(addrs[0]), true);
    lazy.release_idle();
    assert!(lazy.dwarf_units_parsed().0 >= 1);
    lazy.release_idle();
    assert_eq!(lazy.dwarf_units_parsed().0, 0, "idle units are dropped");
    let scans = lazy.dwarf_depth_scans();
    assert!(scans > 0, "the units' depth was checked");
    assert_eq!(lazy.frames(SymbolAddr(addrs[0]), true), last);
    assert_eq!(
        lazy.dwarf_depth_scans(),
        scans,
        "a unit parsed again is not scanned for its depth again"
    );
}

/// (offset, size) of a section from `readelf -SW`.
fn section_range(bin: &Path, name: &str) -> (usize, usize) {
    let out = run("readelf", &["-SW", &s(bin)]);
    let l = out
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == name))
        .unwrap();
    let f: Vec<&str> = l.split(']').nth(1).unwrap().split_whitespace().collect();
    (
        usize::from_str_radix(f[3], 16).unwrap(),
        usize::from_str_radix(f[4], 16).unwrap(),
    )
}

#[test]
fn corrupt_dwarf_gives_fewer_frames_not_a_crash() {
    let dir = tempdir();
    let bin = build_inline(dir.path(), "inl", &[]);
    let data = std::fs::read(&bin).unwrap();
    let (hot, hot_size) = nm_symbol(&bin, "hot");
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut outcomes = BTreeMap::new();
    for section in [".debug_info", ".debug_abbrev", ".debug_line", ".debug_str"] {
        let (off, size) = section_range(&bin, section);
        for round in 0..12 {
            let mut bad = data.clone();
            match round % 3 {
                // Garbage everywhere.
                0 => bad[off..off + size]
                    .iter_mut()
                    .for_each(|b| *b = rnd() as u8),
                // A few flipped bytes.
                1 => {
                    for _ in 0..8 {
                        let i = off + (rnd() as usize % size);
                        bad[i] ^= 1 << (rnd() % 8);
                    }
                }
                // Huge lengths in the headers.
                _ => bad[off..off + size.min(16)].fill(0xff),
            }
            let path = dir.path().join(format!("bad{section}{round}"));
            std::fs::write(&path, &bad).unwrap();
            let Ok(sym) = FileSymbolizer::open(&path, None, &isolated(vec![])) else {
                continue;
            };
            for a in hot..hot + hot_size {
                let f = sym.frames(SymbolAddr(a), true);
                *outcomes.entry(f.len()).or_insert(0) += 1;
                // The symbol table still names the outermost frame.
                if let Some(first) = f.first() {
                    assert!(!first.function.is_empty());
                }
            }
        }
    }
    eprintln!("frame counts over corrupt inputs: {outcomes:?}");
}

#[test]
fn corrupt_compressed_sections() {
    let dir = tempdir();
    let bin = build_inline(dir.path(), "gz", &["-gz=zlib"]);
    let data = std::fs::read(&bin).unwrap();
    let (hot, hot_size) = nm_symbol(&bin, "hot");
    let (off, size) = section_range(&bin, ".debug_info");
    let variants: [(usize, &[u8]); 4] = [
        (8, &[0xff; 8]),                // ch_size: 2^64 - 1
        (8, &[0, 0, 0, 0, 0, 1, 0, 0]), // ch_size: 1 TiB
        (0, &[9, 0, 0, 0]),             // unknown ch_type
        (24, &[0x55; 16]),              // garbage zlib stream
    ];
    for (at, bytes) in variants {
        let mut bad = data.clone();
        bad[off + at..off + at + bytes.len()].copy_from_slice(bytes);
        let path = dir.path().join("bad");
        std::fs::write(&path, &bad).unwrap();
        let sym = FileSymbolizer::open(&path, None, &isolated(vec![])).unwrap();
        for a in hot..hot + hot_size {
            // No DWARF left: the symbol table names the function.
            assert_eq!(names(&sym.frames(SymbolAddr(a), true)), ["hot"], "{at}");
        }
    }
    assert!(size > 32);
}

#[test]
fn debuglink_to_file_without_build_id_checked_by_crc() {
    let sp = split();
    let work = sp.stripped.parent().unwrap();
    // A debug file with no build-id note, and a binary linking to it.
    run(
        "objcopy",
        &["--remove-section=.note.gnu.build-id", &s(&sp.debug)],
    );
    assert!(common::readelf_build_id(&sp.debug).is_none());
    run(
        "objcopy",
        &["--remove-section=.gnu_debuglink", &s(&sp.stripped)],
    );
    let out = Command::new("objcopy")
        .current_dir(work)
        .args(["--add-gnu-debuglink=prog.debug", "prog"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let sym = FileSymbolizer::open(&sp.stripped, None, &isolated(vec![])).unwrap();
    assert_eq!(sym.sources().len(), 2, "{:?}", sym.sources());
    check_inline_chain(&sym, &sp.full);
}

/// Every byte of `.text` of `bin`: the frames (with file:line) found through the per-unit
/// index equal those of the whole-file index. Returns (units parsed one by one, whether the
/// per-unit lookups had to build the whole-file index).
fn per_unit_matches_whole_file(bin: &Path) -> (usize, bool) {
    let lazy = FileSymbolizer::open(bin, None, &isolated(vec![])).unwrap();
    let mut whole = FileSymbolizer::open(bin, None, &isolated(vec![])).unwrap();
    whole.set_whole_file_dwarf(true);
    let out = run("readelf", &["-SW", &s(bin)]);
    let l = out.lines().find(|l| l.contains(" .text ")).unwrap();
    let f: Vec<&str> = l.split(']').nth(1).unwrap().split_whitespace().collect();
    let start = u64::from_str_radix(f[2], 16).unwrap();
    let size = u64::from_str_radix(f[4], 16).unwrap();
    let mut named = 0;
    for a in start..start + size {
        let ours = lazy.frames(SymbolAddr(a), true);
        let reference = whole.frames(SymbolAddr(a), true);
        assert_eq!(ours, reference, "{}: {a:#x}", bin.display());
        named += ours.iter().filter(|f| f.line.is_some()).count();
    }
    assert!(
        named > 100,
        "only {named} frames with lines: no DWARF compared"
    );
    assert_eq!(whole.dwarf_units_parsed(), (0, true));
    lazy.dwarf_units_parsed()
}

#[test]
fn per_unit_index_agrees_with_whole_file_index() {
    let dir = tempdir();
    let c = build_inline(dir.path(), "inline", &[]);
    let (units, whole) = per_unit_matches_whole_file(&c);
    assert!(
        units >= 1 && !whole,
        "C: {units} units, whole index {whole}"
    );
    if have("g++") {
        let bin = dir.path().join("cxx");
        run("g++", &["-O2", "-g", "-o", &s(&bin), &fixture("cxx.cpp")]);
        let (units, whole) = per_unit_matches_whole_file(&bin);
        assert!(
            units >= 1 && !whole,
            "C++: {units} units, whole index {whole}"
        );
    }
}

#[test]
fn units_with_references_out_of_the_unit_use_the_whole_file_index() {
    // GCC's LTO output refers from its units to abstract functions in other units with
    // DW_FORM_ref_addr.
    let dir = tempdir();
    let lto = build_inline(dir.path(), "inline-lto", &["-flto", "-flto-partition=none"]);
    let dump = run("readelf", &["--debug-dump=abbrev", &s(&lto)]);
    assert!(
        dump.contains("DW_FORM_ref_addr"),
        "the LTO build has no DW_FORM_ref_addr: nothing here tests the fallback"
    );
    let (units, whole) = per_unit_matches_whole_file(&lto);
    eprintln!("LTO: {units} units alone, whole index {whole}");
    assert!(
        whole,
        "a unit with DW_FORM_ref_addr must go through the whole index"
    );
}

/// Libc's separate debug file (Debian's libc6-dbg), when installed: the per-unit index
/// answers like the whole one over spread addresses.
#[test]
fn per_unit_index_on_system_libc_debug_file() {
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    let search = DebugSearch::system();
    let Ok(lazy) = FileSymbolizer::open(libc, None, &search) else {
        eprintln!("no libc: skipped");
        return;
    };
    if !lazy.has_dwarf() {
        eprintln!("no libc debug file (libc6-dbg): skipped");
        return;
    }
    let mut whole = FileSymbolizer::open(libc, None, &search).unwrap();
    whole.set_whole_file_dwarf(true);
    let addrs = spread_addresses(libc, 3000);
    for &a in &addrs {
        assert_eq!(
            lazy.frames(SymbolAddr(a), true),
            whole.frames(SymbolAddr(a), true),
            "{a:#x}"
        );
    }
    let (units, whole_built) = lazy.dwarf_units_parsed();
    eprintln!("libc: {units} units parsed alone, whole index {whole_built}");
    // More units than are kept were met, so the answers above came through evictions too.
    assert!(units > 0 && units <= 32, "{units} units held parsed");
}
