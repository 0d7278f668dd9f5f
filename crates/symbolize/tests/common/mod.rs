//! Shared helpers for the integration tests: build the C/C++ fixtures with
//! the system toolchain and ask binutils for the ground truth.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Run a command and return its stdout; panic with stderr on failure.
pub fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Whether `cmd` can be started.
pub fn have(cmd: &str) -> bool {
    Command::new(cmd).arg("--version").output().is_ok()
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// The fixture binaries, built once per test process.
///
/// They live in a temporary directory under cargo's `CARGO_TARGET_TMPDIR`:
/// a `static` is never dropped, so each test process leaves its directory
/// behind, and the next run removes those older than ten minutes.
pub struct Fixtures {
    /// The directory holding the fixtures.
    pub dir: PathBuf,
    /// PIE linked against `lib`.
    pub pie: PathBuf,
    /// Non-PIE build of the same program.
    pub nopie: PathBuf,
    /// The shared library.
    pub lib: PathBuf,
    /// `strip`ped copy of the shared library.
    pub lib_stripped: PathBuf,
    /// `strip`ped copy of the PIE.
    pub pie_stripped: PathBuf,
    /// Shared object with only STT_NOTYPE code labels.
    pub notype: PathBuf,
    /// The C++ program, when g++ is available.
    pub cxx: Option<PathBuf>,
}

/// Build `tests/fixtures/inline.c` (three always-inline calls nested in `hot`) as `dir/name`
/// with `-O2 -g` and a build-id, plus `extra` flags.
pub fn build_inline(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let mut args = vec!["-O2", "-g", "-Wl,--build-id"];
    args.extend_from_slice(extra);
    let (o, src) = (out.display().to_string(), fixture("inline.c"));
    args.extend_from_slice(&["-o", &o, &src]);
    run("cc", &args);
    out
}

/// Build (once) and return the fixtures.
pub fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(build)
}

const PREFIX: &str = "symbolize-fixtures-";

fn remove_stale(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age.as_secs() > 600);
        if old && e.file_name().to_string_lossy().starts_with(PREFIX) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn build() -> Fixtures {
    let parent = Path::new(env!("CARGO_TARGET_TMPDIR"));
    remove_stale(parent);
    let dir = tempfile::Builder::new()
        .prefix(PREFIX)
        .tempdir_in(parent)
        .expect("tempdir")
        .keep();
    let d = dir.as_path();
    let p = |n: &str| d.join(n);
    let s = |p: &PathBuf| p.display().to_string();
    let (lib, pie, nopie) = (p("libfixture.so"), p("prog_pie"), p("prog_nopie"));
    let rpath = format!("-Wl,-rpath,{}", d.display());
    let ldir = format!("-L{}", d.display());
    let build_id = "-Wl,--build-id";
    run(
        "cc",
        &[
            "-O1",
            "-g",
            "-fPIC",
            "-shared",
            build_id,
            "-o",
            &s(&lib),
            &fixture("lib.c"),
        ],
    );
    run(
        "cc",
        &[
            "-O1",
            "-g",
            "-fPIE",
            "-pie",
            "-DWITH_LIB",
            build_id,
            "-o",
            &s(&pie),
            &fixture("prog.c"),
            &ldir,
            "-lfixture",
            &rpath,
        ],
    );
    run(
        "cc",
        &[
            "-O1",
            "-g",
            "-fno-pie",
            "-no-pie",
            "-DWITH_LIB",
            build_id,
            "-o",
            &s(&nopie),
            &fixture("prog.c"),
            &ldir,
            "-lfixture",
            &rpath,
        ],
    );
    let (lib_stripped, pie_stripped) = (p("libfixture.stripped.so"), p("prog_pie.stripped"));
    run("strip", &["-o", &s(&lib_stripped), &s(&lib)]);
    run("strip", &["-o", &s(&pie_stripped), &s(&pie)]);
    let notype = p("notype.so");
    run(
        "cc",
        &[
            "-nostdlib",
            "-shared",
            "-o",
            &s(&notype),
            &fixture("notype.s"),
        ],
    );
    let cxx = if have("g++") {
        let cxx = p("cxx");
        run(
            "g++",
            &["-O1", "-g", build_id, "-o", &s(&cxx), &fixture("cxx.cpp")],
        );
        Some(cxx)
    } else {
        eprintln!("g++ not found: skipping the C++ fixture");
        None
    };
    Fixtures {
        dir: dir.clone(),
        pie,
        nopie,
        lib,
        lib_stripped,
        pie_stripped,
        notype,
        cxx,
    }
}

/// One line of `nm -S`.
#[derive(Clone, Debug)]
pub struct NmSym {
    pub addr: u64,
    pub size: Option<u64>,
    pub kind: char,
    pub name: String,
}

/// Defined code symbols (`t T w W i`) as `nm` prints them; `extra` adds
/// flags such as `-C` or `-D`.
pub fn nm_code(path: &Path, extra: &[&str]) -> Vec<NmSym> {
    let file = path.display().to_string();
    let mut args = vec!["-S", "--defined-only"];
    args.extend_from_slice(extra);
    args.push(&file);
    let mut out: Vec<NmSym> = Vec::new();
    for line in run("nm", &args).lines() {
        let fields: Vec<&str> = line.splitn(4, ' ').collect();
        let (addr, size, kind, name) = match fields.as_slice() {
            [a, s, k, n] if k.len() == 1 => (a, Some(s), k, n.to_string()),
            [a, k, n @ ..] if k.len() == 1 => (a, None, k, n.join(" ")),
            _ => continue,
        };
        let kind = kind.chars().next().unwrap();
        if !"tTwWi".contains(kind) {
            continue;
        }
        out.push(NmSym {
            addr: u64::from_str_radix(addr, 16).unwrap(),
            size: size.map(|s| u64::from_str_radix(s, 16).unwrap()),
            kind,
            name: name.split('@').next().unwrap().to_string(),
        });
    }
    // nm's `W` covers weak data too (e.g. data_start): keep code only.
    let exec = exec_segments(path);
    out.retain(|s| exec.iter().any(|&(v, m)| s.addr >= v && s.addr < v + m));
    out
}

/// Address -> names of the symbols there.
pub fn by_addr(syms: &[NmSym]) -> BTreeMap<u64, BTreeSet<String>> {
    let mut m: BTreeMap<u64, BTreeSet<String>> = BTreeMap::new();
    for s in syms {
        m.entry(s.addr).or_default().insert(s.name.clone());
    }
    m
}

/// `addr2line -f [-C] -e path addrs...`: the function name per address.
pub fn addr2line(path: &Path, addrs: &[u64], demangle: bool) -> Vec<String> {
    let file = path.display().to_string();
    let hex: Vec<String> = addrs.iter().map(|a| format!("{a:#x}")).collect();
    let mut args = vec!["-f", "-e", &file];
    if demangle {
        args.push("-C");
    }
    args.extend(hex.iter().map(String::as_str));
    let out = run("addr2line", &args);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2 * addrs.len(), "addr2line output: {out}");
    lines.chunks(2).map(|c| c[0].to_string()).collect()
}

/// Executable `PT_LOAD` segments as (vaddr, memsz).
pub fn exec_segments(path: &Path) -> Vec<(u64, u64)> {
    let out = run("readelf", &["-lW", &path.display().to_string()]);
    out.lines()
        .filter(|l| l.trim_start().starts_with("LOAD ") && l.contains(" E "))
        .map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .take(5)
                .map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap())
                .collect();
            (f[1], f[4])
        })
        .collect()
}

/// `PT_LOAD` headers from `readelf -lW`: (offset, vaddr, filesz, memsz).
pub fn load_segments(path: &Path) -> Vec<(u64, u64, u64, u64)> {
    let out = run("readelf", &["-lW", &path.display().to_string()]);
    out.lines()
        .filter(|l| l.trim_start().starts_with("LOAD "))
        .map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .take(5)
                .map(|x| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap())
                .collect();
            (f[0], f[1], f[3], f[4])
        })
        .collect()
}

/// The build-id `readelf -n` prints, if any.
pub fn readelf_build_id(path: &Path) -> Option<String> {
    let out = run("readelf", &["-nW", &path.display().to_string()]);
    out.lines()
        .find_map(|l| l.split_once("Build ID: "))
        .map(|(_, id)| id.trim().to_string())
}

/// Lowercase hex of bytes.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Resident kB of the shared read-only mappings of `path` (the symbolizer's: the binary's own
/// code and data are private mappings).
pub fn shared_resident_kb(path: &Path) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut ours = false;
    let mut kb = 0;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && !f.ends_with(':'))
        {
            ours = fields.get(1) == Some(&"r--s") && fields.get(5).map(Path::new) == Some(path);
        } else if ours && fields.first() == Some(&"Rss:") {
            kb += fields[1].parse::<u64>().unwrap();
        }
    }
    kb
}
