//! Go programs, end to end (the gostack workload, built here with Debian's `go`):
//!
//! - whole stacks through a frameless leaf (`main.main;main.work;main.caller;main.leaf`),
//!   unwound with `.debug_frame` (a default build) or Go's `pcsp` table (built with
//!   `-ldflags='-s -w'`), in `auto` and `dwarf` modes, where the kernel's frame-pointer walk
//!   skips `main.caller`; the stack-quality summary counts them whole;
//! - names, files, lines and inlined calls of a stripped build (from `.gopclntab`) against
//!   `go tool addr2line` and against the DWARF of the default build, on thousands of
//!   addresses, also with the section headers removed (the table found by its header).
//!
//! Go is required: when `go` is missing the tests fail (scripts/test installs golang-go).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::common::*;
use crate::unwind::{assert_share_of, quality, record};

struct GoWorkloads {
    /// The default build: `.symtab`, DWARF (and `.debug_frame`).
    full: PathBuf,
    /// `-ldflags='-s -w'`: no `.symtab`, no DWARF; `.gopclntab` only.
    stripped: PathBuf,
    /// The stripped build with its section headers removed.
    no_sections: PathBuf,
}

/// `go` with a cache and module settings of the test's own (no network, no toolchain
/// download).
fn go(dir: &Path) -> Command {
    let mut cmd = Command::new("go");
    cmd.env("GOCACHE", dir.join("gocache"))
        .env("GOPATH", dir.join("gopath"))
        .env("GOFLAGS", "-mod=mod")
        .env("GOPROXY", "off")
        .env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0");
    cmd
}

fn go_build(dir: &Path, out: &Path, ldflags: &str) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/gostack");
    let tmp = out.with_extension(format!("{}.tmp", std::process::id()));
    let mut cmd = go(dir);
    cmd.current_dir(&src).arg("build").arg("-o").arg(&tmp);
    if !ldflags.is_empty() {
        cmd.arg(format!("-ldflags={ldflags}"));
    }
    let output = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run `go` ({e}): Go is required for these tests; scripts/test installs golang-go")
    });
    assert!(
        output.status.success(),
        "go build {} failed ({}):\n{}",
        src.display(),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    fs::rename(&tmp, out).expect("rename built workload");
}

/// The ELF file at `from` with its section headers removed (e_shoff, e_shnum, e_shstrndx
/// zeroed), written executable at `to`.
fn without_section_headers(from: &Path, to: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mut elf = fs::read(from).expect("read the stripped build");
    assert_eq!(&elf[..5], b"\x7fELF\x02", "a 64-bit ELF file");
    elf[0x28..0x30].fill(0);
    elf[0x3c..0x40].fill(0);
    fs::write(to, &elf).expect("write the build without section headers");
    fs::set_permissions(to, fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn go_workloads() -> &'static GoWorkloads {
    static BUILT: OnceLock<GoWorkloads> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profctl-go-workloads");
        fs::create_dir_all(&dir).expect("create workload dir");
        // Names of at most 15 bytes: they are the comm of the folded stacks.
        let w = GoWorkloads {
            full: dir.join("gofull"),
            stripped: dir.join("gostrip"),
            no_sections: dir.join("gonosect"),
        };
        go_build(&dir, &w.full, "");
        go_build(&dir, &w.stripped, "-s -w");
        without_section_headers(&w.stripped, &w.no_sections);
        let sections = tool(Command::new("readelf").arg("-SW").arg(&w.stripped));
        assert!(
            sections.contains(".gopclntab")
                && !sections.contains(".symtab")
                && !sections.contains(".debug_"),
            "the stripped build keeps only .gopclntab:\n{sections}"
        );
        let sections = tool(Command::new("readelf").arg("-SW").arg(&w.full));
        assert!(
            sections.contains(".debug_frame") && !sections.contains(".eh_frame"),
            "the default build has .debug_frame and no .eh_frame:\n{sections}"
        );
        // main.leaf has no frame: it starts with no stack adjustment and no frame pointer.
        let leaf = tool(
            go(&dir)
                .args(["tool", "objdump", "-s", "^main.leaf$"])
                .arg(&w.full),
        );
        assert!(
            !leaf.contains("SUBQ") && !leaf.contains("PUSHQ BP") && !leaf.contains("CALL"),
            "main.leaf has a frame or calls something:\n{leaf}"
        );
        let caller = tool(
            go(&dir)
                .args(["tool", "objdump", "-s", "^main.caller$"])
                .arg(&w.full),
        );
        assert!(
            caller.contains("CALL main.leaf(SB)"),
            "main.caller calls main.leaf:\n{caller}"
        );
        w
    })
}

/// Whether `s` is whole through the frameless leaf: from the goroutine's first frame to
/// main.leaf with its caller.
fn whole_through_leaf(s: &Stack) -> bool {
    s.frames.first().is_some_and(|f| f == "runtime.goexit")
        && (s.has_path(&["main.main", "main.work", "main.caller", "main.leaf"])
            || s.has_path(&["main.main", "main.work", "main.(*T).Method", "main.leaf"]))
}

#[test]
fn go_stacks_keep_the_caller_of_a_frameless_leaf() {
    // Whole stacks and the summary's count of them, not shares of CPU: beside other tests.
    let _guard = sampling_shared();
    let w = go_workloads();
    for (bin, comm) in [(&w.full, "gofull"), (&w.stripped, "gostrip")] {
        for mode in ["auto", "dwarf"] {
            let dir = scratch();
            let (run, stacks, _) = record(dir.path(), mode, &[], bin, &[OsStr::new("3")]);
            let what = format!("{comm} --call-graph {mode}");
            assert_share_of(&stacks, comm, "main.leaf", 0.95, &what, whole_through_leaf);
            let q = quality(&run, mode);
            assert!(
                q.whole >= 95.0,
                "{what}: the summary counts {:.1}% of stacks whole:\n{}",
                q.whole,
                run.stderr
            );
        }
    }
    // The kernel's frame-pointer walk skips the leaf's caller (what the tests above guard).
    let dir = scratch();
    let (_, stacks, _) = record(dir.path(), "fp", &[], &w.full, &[OsStr::new("3")]);
    let with_caller: u64 = stacks
        .iter()
        .filter(|s| s.comm == "gofull" && s.has_path(&["main.caller", "main.leaf"]))
        .map(|s| s.count)
        .sum();
    let leaf = frame_count(&stacks, "gofull", "main.leaf");
    assert!(
        leaf >= 200 && (with_caller as f64) < 0.5 * leaf as f64,
        "frame pointers alone were expected to lose main.caller ({with_caller} of {leaf}):\n{}",
        top_lines(&stacks, 10)
    );
}

/// Function text ranges of the default build, from `go tool nm -size`: `(start, size, name)`.
fn functions(dir: &Path, bin: &Path) -> Vec<(u64, u64, String)> {
    let nm = tool(go(dir).args(["tool", "nm", "-n", "-size"]).arg(bin));
    nm.lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
            let size: u64 = parts.next()?.parse().ok()?;
            let kind = parts.next()?;
            let name = parts.collect::<Vec<_>>().join(" ");
            (matches!(kind, "T" | "t") && size > 0).then_some((addr, size, name))
        })
        .collect()
}

/// Addresses to compare: in every function of the main package, every 3rd byte; in the
/// others, entry, middle and last byte.
fn addresses(funcs: &[(u64, u64, String)]) -> Vec<u64> {
    let mut out = Vec::new();
    for (start, size, name) in funcs {
        if name.starts_with("main.") {
            out.extend((*start..start + size).step_by(3));
        } else {
            out.extend([*start, start + size / 2, start + size - 1]);
        }
    }
    out
}

/// `go tool addr2line BIN` for `addrs`: per address (function, "file:line").
fn go_addr2line(dir: &Path, bin: &Path, addrs: &[u64]) -> Vec<(String, String)> {
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let out = pipe(go(dir).args(["tool", "addr2line"]).arg(bin), &input);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.len(),
        2 * addrs.len(),
        "go tool addr2line: two lines per address"
    );
    lines
        .chunks(2)
        .map(|c| (c[0].to_string(), c[1].to_string()))
        .collect()
}

/// One frame as `profctl symbolize` prints it: (function, "file:line", inlined).
type Frame = (String, String, bool);

/// `profctl symbolize --elf BIN` for `addrs`: per address, its frames innermost first.
fn profctl_symbolize(bin: &Path, addrs: &[u64]) -> Vec<Vec<Frame>> {
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut cmd = Command::new(profctl());
    cmd.args(["symbolize", "--no-cache", "--elf"]).arg(bin);
    let out = pipe(&mut cmd, &input);
    let mut all: Vec<Vec<Frame>> = Vec::new();
    for line in out.lines() {
        if let Some(frame) = line.strip_prefix("    ") {
            let (frame, inlined) = match frame.strip_suffix(" (inlined)") {
                Some(f) => (f, true),
                None => (frame, false),
            };
            let (func, loc) = frame.rsplit_once(" at ").expect("`function at file:line`");
            all.last_mut().expect("an address line first").push((
                func.to_string(),
                loc.to_string(),
                inlined,
            ));
        } else {
            all.push(Vec::new());
        }
    }
    assert_eq!(
        all.len(),
        addrs.len(),
        "profctl symbolize: one block per address"
    );
    all
}

fn pipe(cmd: &mut Command, input: &str) -> String {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("wait");
    writer.join().expect("writer").expect("write stdin");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Go's printed form of a name (type arguments as `[...]`), as profctl shows Go names.
fn printed(name: &str) -> String {
    match (name.find('['), name.rfind(']')) {
        (Some(a), Some(b)) if a < b => format!("{}[...]{}", &name[..a], &name[b + 1..]),
        _ => name.to_string(),
    }
}

/// Asserts that at least 99% of `total` agree, listing the first disagreements.
fn assert_agree(what: &str, agree: usize, total: usize, bad: &[String]) {
    let share = agree as f64 / total.max(1) as f64;
    assert!(
        total >= 1000 && share >= 0.99,
        "{what}: {agree} of {total} addresses agree ({:.2}%, want >= 99%); first disagreements:\n{}",
        100.0 * share,
        bad.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
    eprintln!("{what}: {agree} of {total} addresses agree");
}

#[test]
fn go_names_lines_and_inline_frames_agree_with_go_and_dwarf() {
    let w = go_workloads();
    let dir = w.full.parent().expect("workload dir");
    let funcs = functions(dir, &w.full);
    let addrs = addresses(&funcs);
    assert!(addrs.len() >= 2000, "{} addresses", addrs.len());
    let reference = go_addr2line(dir, &w.stripped, &addrs);
    // The default build lays functions out as the stripped one does (only -s -w differ).
    assert_eq!(
        go_addr2line(dir, &w.full, &addrs),
        reference,
        "the two builds place code alike"
    );

    // 1. The stripped build (and the same without section headers) against go tool addr2line:
    //    the function holding the address (the outermost frame), the innermost file:line.
    for bin in [&w.stripped, &w.no_sections] {
        let ours = profctl_symbolize(bin, &addrs);
        let (mut agree, mut bad) = (0, Vec::new());
        for ((addr, (func, loc)), frames) in addrs.iter().zip(&reference).zip(&ours) {
            let (got_func, got_loc) = match (frames.last(), frames.first()) {
                (Some(outer), Some(inner)) => (outer.0.clone(), inner.1.clone()),
                _ => ("??".to_string(), "??:0".to_string()),
            };
            let want_func = if func == "?" {
                "??".to_string()
            } else {
                printed(func)
            };
            let want_loc = if loc == "?:0" {
                "??:0".to_string()
            } else {
                loc.clone()
            };
            if got_func == want_func && got_loc == want_loc {
                agree += 1;
            } else {
                bad.push(format!(
                    "{addr:#x}: go: {want_func} {want_loc}; profctl: {got_func} {got_loc}"
                ));
            }
        }
        assert_agree(
            &format!("{} against go tool addr2line", bin.display()),
            agree,
            addrs.len(),
            &bad,
        );
    }

    // 2. Inlined calls: the stripped build's frames (from .gopclntab) against the default
    //    build's (from DWARF): every frame's function, file:line and inlined flag.
    let from_table = profctl_symbolize(&w.stripped, &addrs);
    let from_dwarf = profctl_symbolize(&w.full, &addrs);
    let (mut agree, mut bad, mut inlined) = (0, Vec::new(), 0);
    for ((addr, table), dwarf) in addrs.iter().zip(&from_table).zip(&from_dwarf) {
        if table == dwarf {
            agree += 1;
            inlined += usize::from(table.len() > 1);
        } else {
            bad.push(format!(
                "{addr:#x}:\n  .gopclntab: {table:?}\n  DWARF:      {dwarf:?}"
            ));
        }
    }
    assert_agree(".gopclntab frames against DWARF", agree, addrs.len(), &bad);
    assert!(
        inlined >= 50,
        "only {inlined} addresses have inlined frames: the inlined code was not reached"
    );
    // The names Go prints: a method, a generic function, the inlined spin.
    let names: BTreeMap<&str, usize> =
        from_table
            .iter()
            .flatten()
            .fold(BTreeMap::new(), |mut m, f| {
                *m.entry(f.0.as_str()).or_default() += 1;
                m
            });
    for want in [
        "main.(*T).Method",
        "main.Map[...]",
        "main.spin",
        "main.caller",
        "main.leaf",
    ] {
        assert!(names.contains_key(want), "no frame named {want}: {names:?}");
    }
}
