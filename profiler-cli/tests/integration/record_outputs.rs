//! `profctl record --pid N` writes the kind of file each output option asks for, and its
//! summary counts samples, whether profilerd records it (its socket answers) or profctl does
//! (`--embedded`): `-o x.pb.gz` and `--format pprof` a pprof profile that `go tool pprof -top`
//! reads (with the sample types and labels of profctl's own pprof), `-o x.svg` a well-formed
//! SVG, `--folded` folded stacks. In each, the summary's sample count equals the file's and is
//! within 10% of duration × frequency × busy threads: the recording's duration (as its summary
//! says, within 10% of the 2 s asked), and the busy threads of the workload (burner: one
//! thread) as measured, its CPU time over the run's wall time, since on a shared 2-CPU machine
//! other work takes part of that one thread's CPU (nice does not help across autogroups).

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use crate::daemon::Daemon;

/// Seconds each recording lasts (eight recordings: a second and a half of a busy thread at
/// 999 Hz is some 1,500 samples, enough for counts judged within 10%: their sampling noise is
/// under 3%).
const SECONDS: &str = "1.5";

/// What a file should be.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Pprof,
    Svg,
    Folded,
}

/// Nanoseconds process `pid`'s main thread has run (`/proc/PID/schedstat`).
fn cpu_ns(pid: u32) -> u64 {
    let text = fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// The sample count and seconds of the summary line (`profctl: N samples in S s …`).
fn summary_samples(stderr: &str) -> (u64, f64) {
    stderr
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("profctl: ")?;
            let (n, rest) = rest.split_once(" samples in ")?;
            let (seconds, _) = rest.split_once(" s ")?;
            Some((n.parse().ok()?, seconds.parse().ok()?))
        })
        .unwrap_or_else(|| panic!("no sample count in the summary:\n{stderr}"))
}

/// `go tool pprof -top` of `path` (checks it reads the file); its output.
fn go_pprof_top(path: &Path) -> String {
    let out = Command::new("go")
        .args([
            "tool",
            "pprof",
            "-symbolize=none",
            "-top",
            "-sample_index=samples",
        ])
        .arg(path)
        .env("HOME", path.parent().unwrap())
        .output()
        .expect("run go tool pprof (install golang-go)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "go tool pprof -top {} failed:\n{text}",
        path.display()
    );
    text
}

/// The samples of a pprof file, checked: gzipped, read by `go tool pprof -top`, sample types
/// `samples/count` and `cpu/nanoseconds`, pid, tid and comm labels on every sample.
fn pprof_samples(path: &Path, what: &str) -> u64 {
    let bytes = fs::read(path).unwrap();
    assert!(
        bytes.starts_with(&[0x1f, 0x8b]),
        "{what}: {} is not a gzipped pprof profile (starts {:?})",
        path.display(),
        String::from_utf8_lossy(&bytes[..bytes.len().min(40)])
    );
    let top = go_pprof_top(path);
    assert!(
        top.contains("child_hot"),
        "{what}: go tool pprof -top:\n{top}"
    );
    let p = pprof::decode(&bytes).unwrap_or_else(|e| panic!("{what}: not pprof: {e}"));
    let s = |i: i64| p.string_table[i as usize].as_str();
    let types: Vec<(&str, &str)> = p
        .sample_type
        .iter()
        .map(|t| (s(t.r#type), s(t.unit)))
        .collect();
    assert_eq!(
        types[..2],
        [("samples", "count"), ("cpu", "nanoseconds")],
        "{what}: sample types"
    );
    for sample in &p.sample {
        let keys: Vec<&str> = sample.label.iter().map(|l| s(l.key)).collect();
        for key in ["pid", "tid", "comm"] {
            assert!(
                keys.contains(&key),
                "{what}: a sample without {key}: {keys:?}"
            );
        }
    }
    p.sample.iter().map(|s| s.value[0] as u64).sum()
}

/// The samples of an SVG flamegraph (well-formed XML): its root frame's `all (N samples, 100%)`.
fn svg_samples(path: &Path, what: &str) -> u64 {
    check_svg(path);
    let text = fs::read_to_string(path).unwrap();
    let root = "<title>all (";
    let start = text
        .find(root)
        .unwrap_or_else(|| panic!("{what}: no root frame in the SVG"))
        + root.len();
    let end = start + text[start..].find(" samples, 100%)").unwrap();
    text[start..end].replace(',', "").parse().unwrap()
}

/// The samples of a file of `kind`, checked.
fn file_samples(kind: Kind, path: &Path, what: &str) -> u64 {
    match kind {
        Kind::Pprof => pprof_samples(path, what),
        Kind::Svg => svg_samples(path, what),
        Kind::Folded => {
            let stacks = read_folded(path);
            assert!(
                stacks.iter().all(|s| s.comm == "burner"),
                "{what}: {}",
                top_lines(&stacks, 10)
            );
            stacks.iter().map(|s| s.count).sum()
        }
    }
}

#[test]
fn record_outputs_are_the_kind_asked_for_with_and_without_the_daemon() {
    let _guard = sampling_lock();
    let w = workloads();
    let dir = scratch();
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);
    let socket = daemon.socket.to_str().unwrap().to_string();
    let mut burner = Command::new(&w.burner);
    burner.arg("100000");
    let burner = Spawned::spawn(burner, "burner");
    let pid = burner.pid().to_string();
    let cases: [(&str, &[&str], Kind); 4] = [
        ("x.pb.gz", &["-o"], Kind::Pprof),
        ("x.prof", &["--format", "pprof", "-o"], Kind::Pprof),
        ("x.svg", &["-o"], Kind::Svg),
        ("x.folded", &["--folded"], Kind::Folded),
    ];
    let asked: f64 = SECONDS.parse().unwrap();
    let mut failures = Vec::new();
    // Each kind through the daemon and embedded at once (two sampling events on the same
    // pid, each counting every sample): both are judged against the burner's CPU over the
    // pair's run.
    for (name, option, kind) in cases {
        let args_of = |embedded: bool| {
            let via = if embedded { "embedded" } else { "daemon" };
            let path = dir.path().join(format!("{via}-{name}"));
            let mut args: Vec<String> = ["--socket", &socket, "record", "--pid", &pid]
                .into_iter()
                .map(String::from)
                .collect();
            args.extend(["--freq", FREQ, "--duration", SECONDS].map(String::from));
            if embedded {
                args.push("--embedded".into());
            }
            args.extend(option.iter().map(|o| o.to_string()));
            args.push(path.to_str().unwrap().to_string());
            (embedded, path, args)
        };
        let (cpu_before, t0) = (cpu_ns(burner.pid()), std::time::Instant::now());
        let runs = std::thread::scope(|scope| {
            let pair = [false, true].map(|embedded| {
                let (embedded, path, args) = args_of(embedded);
                let dir = dir.path();
                scope.spawn(move || {
                    let run = run_profctl(&args, dir, Duration::from_secs(90));
                    (embedded, path, args, run)
                })
            });
            pair.map(|h| h.join().expect("a recording's thread"))
        });
        let busy = (cpu_ns(burner.pid()) - cpu_before) as f64 / 1e9 / t0.elapsed().as_secs_f64();
        for (embedded, path, args, run) in runs {
            let via = if embedded { "embedded" } else { "daemon" };
            let what = format!("{} ({via})", args[2..].join(" "));
            run.assert_success(&what);
            let marker = if embedded {
                ", embedded"
            } else {
                "via profilerd at"
            };
            assert!(run.stderr.contains(marker), "{what}:\n{}", run.stderr);
            let (said, seconds) = summary_samples(&run.stderr);
            let in_file = file_samples(kind, &path, &what);
            let busy_threads = busy.min(1.0);
            let expected = seconds * FREQ_HZ * busy_threads;
            eprintln!(
                "{what}: summary {said} samples in {seconds} s, file {in_file}, expected \
                 {expected:.0} ({seconds} s x {FREQ_HZ} Hz x {busy_threads:.2} busy threads)"
            );
            if said != in_file
                || (said as f64 - expected).abs() > 0.1 * expected
                || (seconds - asked).abs() > 0.1 * asked
            {
                failures.push(format!(
                    "{what}: the summary says {said} samples in {seconds} s, the file holds \
                     {in_file}, expected {expected:.0} ± 10% ({busy_threads:.2} busy threads)\n{}",
                    run.stderr
                ));
            }
        }
    }
    drop(burner);
    daemon.stop();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
