//! pprof out and in: `profctl record -o out.pb.gz` checked with the real `go tool pprof`
//! against the folded stacks of the same recording (function names, inline frames, build-ids,
//! labels, sample counts); round trips through `go tool pprof -proto` and folded stacks;
//! `profctl top --input`; and `profctl diff` of two recordings whose split changed.
//!
//! The workload (`tests/workloads/inlined.c`, built -O2 -g) spends a share set on its command
//! line in `hot_a`, and the rest in `outer_b`, whose loop is the always_inline `inl_spin`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::*;

/// The inlined workload, built once.
pub(crate) fn inlined() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let out = workloads().dir.join("inlined");
        compile_with(
            "inlined.c",
            &out,
            &["-O2", "-g", "-fno-omit-frame-pointer", "-Wall"],
            &[],
        );
        out
    })
}

/// `go tool pprof ARGS` (Debian's golang-go; scripts/test installs it); its stdout.
pub(crate) fn go_pprof(args: &[&str], file: &Path) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof", "-symbolize=none"])
        .args(args)
        .arg(file)
        .env("HOME", std::env::temp_dir())
        .output()
        .expect(
            "`go` is needed for the pprof tests: apt-get install golang-go (scripts/test does)",
        );
    assert!(
        out.status.success(),
        "go tool pprof {args:?} {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Record `inlined SECONDS PERCENT_A` (exec'd by a shell that writes its pid first) to a
/// pprof file and folded stacks; returns (pprof, folded, the workload's pid).
fn record_inlined(dir: &Path, tag: &str, percent_a: u32) -> (PathBuf, PathBuf, u32) {
    let pb = dir.join(format!("{tag}.pb.gz"));
    let folded = dir.join(format!("{tag}.folded"));
    let pidfile = dir.join(format!("{tag}.pid"));
    let script = format!(
        "echo $$ > '{}'; exec '{}' 2 {percent_a}",
        pidfile.display(),
        inlined().display()
    );
    let run = run_profctl(
        [
            "record".as_ref(),
            "--freq".as_ref(),
            FREQ.as_ref(),
            "-o".as_ref(),
            pb.as_os_str(),
            "--folded".as_ref(),
            folded.as_os_str(),
            "--".as_ref(),
            "sh".as_ref(),
            "-c".as_ref(),
            script.as_ref() as &std::ffi::OsStr,
        ],
        dir,
        Duration::from_secs(60),
    );
    run.assert_success("record -o .pb.gz -- inlined");
    let pid = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (pb, folded, pid)
}

/// One sample block of `go tool pprof -traces`: labels, count, frames (leaf first, with
/// ` (inline)` kept).
#[derive(Debug)]
struct Trace {
    labels: BTreeMap<String, String>,
    count: u64,
    frames: Vec<String>,
}

fn parse_traces(text: &str) -> Vec<Trace> {
    let mut out = Vec::new();
    for block in text.split("-----------+-------------------------------------------------------") {
        let mut labels = BTreeMap::new();
        let mut count = None;
        let mut frames = Vec::new();
        for line in block.lines() {
            let t = line.trim();
            if t.is_empty() {
                continue;
            }
            if count.is_none() {
                if let Some((n, frame)) = t.split_once(char::is_whitespace) {
                    if let Ok(n) = n.parse::<u64>() {
                        count = Some(n);
                        frames.push(frame.trim().to_string());
                        continue;
                    }
                }
                if let Some((k, v)) = t.split_once(':') {
                    if !k.contains(' ') {
                        labels.insert(k.to_string(), v.trim().to_string());
                    }
                }
            } else {
                frames.push(t.to_string());
            }
        }
        if let Some(count) = count {
            out.push(Trace {
                labels,
                count,
                frames,
            });
        }
    }
    out
}

/// Folded lines (`comm;outer;…;leaf` → count) of folded stacks.
fn folded_map(stacks: &[Stack]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for s in stacks {
        let line = s.line();
        let (stack, _) = line.rsplit_once(' ').unwrap();
        *m.entry(stack.to_string()).or_default() += s.count;
    }
    m
}

/// Self samples by leaf frame name.
fn self_counts(stacks: &[Stack]) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for s in stacks {
        *m.entry(s.frames.last().unwrap().clone()).or_default() += s.count;
    }
    m
}

/// The GNU build-id of `binary`, by readelf.
fn build_id(binary: &Path) -> String {
    let notes = tool(Command::new("readelf").arg("-n").arg(binary));
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("the workload has a build-id")
        .trim()
        .to_string()
}

#[test]
fn pprof_output_matches_folded_in_go_tool_pprof() {
    // One recording's two outputs against each other (and the workload's 60% inlined share
    // against a floor of 30%): beside other tests.
    let _guard = sampling_shared();
    let dir = scratch();
    let (pb, folded_path, pid) = record_inlined(dir.path(), "rec", 40);
    let folded = read_folded(&folded_path);
    let ours = folded_map(&folded);
    let total: u64 = folded.iter().map(|s| s.count).sum();
    assert!(total > 1000, "too few samples: {total}");

    // -traces: every sample's stack, labels and count; summed by stack they are the folded
    // output, the `comm` label its root frame and ` (inline)` frames the inlined functions.
    let traces = parse_traces(&go_pprof(&["-traces", "-sample_index=samples"], &pb));
    let mut theirs: BTreeMap<String, u64> = BTreeMap::new();
    let mut inline_frames = 0;
    for t in &traces {
        let comm = t.labels.get("comm").expect("every sample has a comm label");
        let mut line = comm.clone();
        for f in t.frames.iter().rev() {
            line.push(';');
            let f = match f.strip_suffix(" (inline)") {
                Some(inner) => {
                    inline_frames += t.count;
                    inner
                }
                None => f,
            };
            line.push_str(f);
        }
        *theirs.entry(line).or_default() += t.count;
        if comm == "inlined" {
            assert_eq!(t.labels.get("pid"), Some(&pid.to_string()), "{t:?}");
            assert_eq!(t.labels.get("tid"), Some(&pid.to_string()), "{t:?}");
            // The uid where the recorder knows it (the test runs as root).
            if let Some(uid) = t.labels.get("uid") {
                assert_eq!(uid, "0", "{t:?}");
            }
        }
    }
    assert_eq!(
        theirs, ours,
        "go tool pprof -traces differs from the folded output"
    );
    // The inlined loop is a line of outer_b's location, not a call.
    let inl = traces
        .iter()
        .filter(|t| t.frames.first().map(String::as_str) == Some("inl_spin (inline)"))
        .map(|t| t.count)
        .sum::<u64>();
    assert!(
        inl as f64 > 0.3 * total as f64 && inline_frames >= inl,
        "inl_spin (inline) leads {inl} of {total} samples"
    );
    assert!(traces.iter().any(|t| t
        .frames
        .windows(2)
        .any(|w| w[0] == "inl_spin (inline)" && w[1] == "outer_b")));

    // -top: the flat (self) samples of the hot functions are the folded leaf counts.
    let top = go_pprof(
        &[
            "-top",
            "-sample_index=samples",
            "-nodecount=1000",
            "-nodefraction=0",
        ],
        &pb,
    );
    let leaves = self_counts(&folded);
    for name in ["hot_a", "inl_spin"] {
        let flat: u64 = top
            .lines()
            .find(|l| {
                let l = l.trim_end();
                l.ends_with(&format!(" {name}")) || l.ends_with(&format!(" {name} (inline)"))
            })
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name} not in go tool pprof -top:\n{top}"));
        assert_eq!(Some(&flat), leaves.get(name), "{name} flat in -top:\n{top}");
    }

    // -raw: the workload's mapping with its build-id, and files and inline frames noted.
    let raw = go_pprof(&["-raw"], &pb);
    let id = build_id(inlined());
    let mapping = raw
        .lines()
        .find(|l| l.contains(inlined().to_str().unwrap()) && l.contains(&id))
        .unwrap_or_else(|| panic!("no mapping of the workload with build-id {id}:\n{raw}"));
    assert!(
        mapping.contains("[FN]") && mapping.contains("[FL]") && mapping.contains("[IN]"),
        "{mapping}"
    );
    assert!(
        raw.contains("inlined.c:"),
        "source files and lines in -raw:\n{raw}"
    );

    // Round trips: go tool pprof's own re-encoding reads back to the same stacks, and so
    // do folded stacks through pprof.
    let reencoded = dir.path().join("reencoded.pb.gz");
    let out = Command::new("go")
        .args(["tool", "pprof", "-symbolize=none", "-proto", "-output"])
        .arg(&reencoded)
        .arg(&pb)
        .env("HOME", std::env::temp_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let back = dir.path().join("back.folded");
    let run = run_profctl(
        [
            "flamegraph".as_ref(),
            "--input".as_ref(),
            reencoded.as_os_str(),
            "--folded".as_ref(),
            back.as_os_str(),
        ],
        dir.path(),
        Duration::from_secs(30),
    );
    run.assert_success("flamegraph --input (go tool pprof -proto)");
    assert_eq!(folded_map(&read_folded(&back)), ours);
    let text = std::fs::read_to_string(&folded_path).unwrap();
    let p = pprof::from_folded(&text, 1_001_001, true).unwrap();
    let bytes = pprof::encode_gz(&p);
    let again = pprof::fold(
        &pprof::decode(&bytes).unwrap(),
        &pprof::FoldOptions {
            comm_root: true,
            lines: false,
        },
    )
    .unwrap();
    let mut again: Vec<String> = again
        .iter()
        .map(|s| format!("{} {}", s.frames.join(";"), s.count))
        .collect();
    again.sort();
    assert_eq!(
        again,
        text.lines().collect::<Vec<_>>(),
        "folded -> pprof -> folded"
    );

    // An SVG from the pprof file, no daemon.
    let svg = dir.path().join("from-pprof.svg");
    let run = run_profctl(
        [
            "flamegraph".as_ref(),
            "--input".as_ref(),
            pb.as_os_str(),
            "-o".as_ref(),
            svg.as_os_str(),
        ],
        dir.path(),
        Duration::from_secs(30),
    );
    run.assert_success("flamegraph --input out.pb.gz");
    let svg_text = check_svg(&svg);
    assert!(svg_text.contains("inl_spin") && svg_text.contains("hot_a"));

    // profctl top on the file: the same self counts, the two hot functions first.
    let run = run_profctl(
        [
            "top".as_ref(),
            "--input".as_ref(),
            pb.as_os_str(),
            "-n".as_ref(),
            "5".as_ref(),
        ],
        dir.path(),
        Duration::from_secs(30),
    );
    run.assert_success("top --input");
    let rows: Vec<(u64, String)> = run
        .stdout
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].parse().unwrap(), f[4..].join(" "))
        })
        .collect();
    assert_eq!(rows.len(), 5, "{}", run.stdout);
    let mut first_two: Vec<&str> = rows[..2].iter().map(|r| r.1.as_str()).collect();
    first_two.sort();
    assert_eq!(first_two, ["hot_a", "inl_spin"], "{}", run.stdout);
    for (n, name) in &rows[..2] {
        assert_eq!(Some(n), leaves.get(name), "{}", run.stdout);
    }
}

/// The fill colour of `name`'s widest frame in an inferno SVG (the one with the most
/// samples: a function may also appear in a few odd stacks), as (r, g, b).
pub(crate) fn fill_of(svg: &str, name: &str) -> (u32, u32, u32) {
    let prefix = format!("<title>{name} (");
    let mut best: Option<(u64, (u32, u32, u32))> = None;
    for (at, _) in svg.match_indices(&prefix) {
        let rest = &svg[at + prefix.len()..];
        let samples: u64 = rest
            .split(" samples")
            .next()
            .unwrap()
            .replace(',', "")
            .parse()
            .unwrap_or_else(|_| panic!("samples in {}", &rest[..40.min(rest.len())]));
        let fill = rest.find("fill=\"rgb(").unwrap() + "fill=\"rgb(".len();
        let end = rest[fill..].find(')').unwrap();
        let v: Vec<u32> = rest[fill..fill + end]
            .split(',')
            .map(|c| c.trim().parse().unwrap())
            .collect();
        if best.is_none_or(|(n, _)| samples > n) {
            best = Some((samples, (v[0], v[1], v[2])));
        }
    }
    best.unwrap_or_else(|| panic!("no frame {name} in the SVG"))
        .1
}

#[test]
fn diff_colours_the_grown_function_red_and_the_shrunk_one_blue() {
    // Beside other tests: it records its own command only, whose split moves by 60 points
    // (80/20 to 20/80); the colours' direction is judged, not the shares.
    let _guard = sampling_shared();
    let dir = scratch();
    let (before, _, _) = record_inlined(dir.path(), "before", 80);
    let (_, after_folded, _) = record_inlined(dir.path(), "after", 20);
    let svg = dir.path().join("diff.svg");
    let diff_folded = dir.path().join("diff.folded");
    let run = run_profctl(
        [
            "diff".as_ref(),
            before.as_os_str(),
            after_folded.as_os_str(),
            "-o".as_ref(),
            svg.as_os_str(),
            "--folded".as_ref(),
            diff_folded.as_os_str(),
        ],
        dir.path(),
        Duration::from_secs(30),
    );
    run.assert_success("diff before.pb.gz after.folded");
    check_svg(&svg);
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    let (r, _, b) = fill_of(&svg_text, "inl_spin");
    assert!(
        r == 255 && b < 255,
        "inl_spin grew: red, got rgb({r},_,{b})"
    );
    let (r, _, b) = fill_of(&svg_text, "hot_a");
    assert!(
        b == 255 && r < 255,
        "hot_a shrank: blue, got rgb({r},_,{b})"
    );
    // The summary: hot_a down and inl_spin up, and the workload's own split between them
    // moved by about 60 points (80/20 → 20/80). Judged within the pair: the kernel's share
    // of the samples (timer and scheduler frames, a quarter of them beside a two-CPU hog)
    // dilutes both, and moved their changes of the whole to 38 points in a run of
    // 2026-11-30 while the pair's split moved 50.
    let change = |name: &str| -> (f64, f64, f64) {
        let line = run
            .stdout
            .lines()
            .find(|l| l.trim_end().ends_with(&format!(" {name}")))
            .unwrap_or_else(|| panic!("{name} not in the summary:\n{}", run.stdout));
        let f: Vec<f64> = line
            .split_whitespace()
            .filter_map(|w| w.trim_end_matches('%').parse().ok())
            .collect();
        assert_eq!(f.len(), 3, "change, before and after in: {line}");
        (f[0], f[1], f[2])
    };
    let ((a, a_before, a_after), (i, i_before, i_after)) = (change("hot_a"), change("inl_spin"));
    let pair_before = 100.0 * a_before / (a_before + i_before);
    let pair_after = 100.0 * a_after / (a_after + i_after);
    assert!(
        a < 0.0 && i > 0.0 && pair_before - pair_after > 40.0,
        "hot_a {a:+}, inl_spin {i:+}; hot_a's share of the pair {pair_before:.1}% -> \
         {pair_after:.1}%:\n{}",
        run.stdout
    );
    // Differential folded stacks: `stack before after`.
    let text = std::fs::read_to_string(&diff_folded).unwrap();
    assert!(
        text.lines().all(|l| l
            .split_whitespace()
            .rev()
            .take(2)
            .all(|n| n.parse::<f64>().is_ok())),
        "{text}"
    );
}

/// With `--lines`, folded frames carry `(file:line)`; the pprof file of the same recording keeps
/// the function names bare with the file and line apart, and folding it with lines gives the
/// folded output back.
#[test]
fn pprof_keeps_lines_apart_from_names() {
    let _guard = sampling_shared();
    let dir = scratch();
    let pb = dir.path().join("lines.pb.gz");
    let folded = dir.path().join("lines.folded");
    let run = run_profctl(
        [
            "record".as_ref(),
            "--freq".as_ref(),
            FREQ.as_ref(),
            "--lines".as_ref(),
            "--format".as_ref(),
            "pprof".as_ref(),
            "-o".as_ref(),
            pb.as_os_str(),
            "--folded".as_ref(),
            folded.as_os_str(),
            "--".as_ref(),
            inlined().as_os_str(),
            "1".as_ref(),
            "50".as_ref(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    run.assert_success("record --lines --format pprof");
    let text = std::fs::read_to_string(&folded).unwrap();
    assert!(
        text.contains("inl_spin (") && text.contains("inlined.c:"),
        "{text}"
    );
    let p = pprof::decode(&std::fs::read(&pb).unwrap()).unwrap();
    let name = |i: i64| p.string_table[i as usize].as_str();
    let inl = p
        .function
        .iter()
        .find(|f| name(f.name) == "inl_spin")
        .expect("a bare inl_spin function");
    assert!(
        name(inl.filename).ends_with("inlined.c"),
        "{}",
        name(inl.filename)
    );
    let refolded: Vec<String> = pprof::fold(
        &p,
        &pprof::FoldOptions {
            comm_root: true,
            lines: true,
        },
    )
    .unwrap()
    .iter()
    .map(|s| format!("{} {}", s.frames.join(";"), s.count))
    .collect();
    let mut refolded: Vec<String> = refolded;
    refolded.sort();
    assert_eq!(refolded, text.lines().collect::<Vec<_>>());
}
