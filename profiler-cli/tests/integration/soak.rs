//! Soak tests of the streaming pipeline a whole-machine daemon runs for weeks:
//! `profctl record --window SECS` over the whole system (root only).
//!
//! * `churn_soak_stays_bounded_and_names_every_window`: while `churn` (tests/workloads/churn.c)
//!   forks and execs 50 short processes a second, deploys a new copy of a service binary every
//!   2 s (deleting the old one), renames threads in a cycle and grows a JIT map, every window's
//!   figures (memory, descriptors, processes, files, pinned binaries, unwinders, unwind
//!   sections, symbolizers when reported) stay under stated bounds and come back near the
//!   baseline once the churn stops; no descriptor or mapping of profctl's keeps a deleted
//!   deploy binary alive; hot functions are named in every window and in the folded output.
//! * `pid_reuse_names_the_new_process_from_its_own_binary`: a process on a reused pid, with
//!   the same addresses as the previous one, is named from its own binary and comm.
//!
//! The soak collects every failed check and reports them together with the figures of every
//! window, so that one run shows all that is wrong (and the bounds can be recalibrated from it).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::common::*;

fn is_root() -> bool {
    fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

const WORKLOAD_CFLAGS: &[&str] = &[
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
    "-fno-optimize-sibling-calls",
    "-Wall",
];

/// This module's workloads, built once per test run next to the common ones.
struct SoakWorkloads {
    /// `churn drive SECONDS OUTFILE [RATE [DEPLOY_SECS]]`
    churn: PathBuf,
    /// `reuse_a drive REUSE_B CYCLES A_SECONDS B_SECONDS OUTFILE`
    reuse_a: PathBuf,
    /// reuse.c with -DREUSE_B: `reuse_b run SECONDS` (b_hot)
    reuse_b: PathBuf,
}

fn soak_workloads() -> &'static SoakWorkloads {
    static BUILT: OnceLock<SoakWorkloads> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profctl-workloads");
        fs::create_dir_all(&dir).expect("create workload dir");
        let w = SoakWorkloads {
            churn: dir.join("churn"),
            reuse_a: dir.join("reuse_a"),
            reuse_b: dir.join("reuse_b"),
        };
        compile_with("churn.c", &w.churn, WORKLOAD_CFLAGS, &["-pthread"]);
        compile_with("reuse.c", &w.reuse_a, WORKLOAD_CFLAGS, &[]);
        compile_with("reuse.c", &w.reuse_b, WORKLOAD_CFLAGS, &["-DREUSE_B"]);
        w
    })
}

// ------------------------------------------------------------------------------------------
// Window lines

/// One `profctl: window A-B s: ...` line.
#[derive(Debug, Clone)]
struct WindowLine {
    start: f64,
    end: f64,
    /// `hottest:` entries: name and percent.
    hottest: Vec<(String, u32)>,
    /// Every `N name` field (`samples`, `stacks`, `processes`, `files`, `pinned`, `unwinders`,
    /// `unwind sections`, `symbolizers`, `open fds`, `MB resident`, `ms CPU`, and whatever
    /// is added later), by name.
    fields: BTreeMap<String, f64>,
}

impl WindowLine {
    fn get(&self, field: &str) -> Option<f64> {
        self.fields.get(field).copied()
    }
}

/// Parses the window lines of profctl's stderr. Fields are found by name (`N name` items
/// separated by `, ` in `; `-separated groups; `tracking ` is a group's prefix), so that
/// fields added later, in any group, are tolerated.
fn parse_windows(stderr: &str) -> Vec<WindowLine> {
    let mut out = Vec::new();
    for line in stderr.lines() {
        let Some(rest) = line.strip_prefix("profctl: window ") else {
            continue;
        };
        let Some((span, rest)) = rest.split_once(" s: ") else {
            panic!("window line without its time span: {line:?}");
        };
        let (start, end) = span
            .split_once('-')
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .unwrap_or_else(|| panic!("bad window span in {line:?}"));
        let mut fields = BTreeMap::new();
        let mut hottest = Vec::new();
        for group in rest.split("; ") {
            if let Some(list) = group.strip_prefix("hottest: ") {
                if list != "-" {
                    for entry in list.split("%, ") {
                        let entry = entry.strip_suffix('%').unwrap_or(entry);
                        let (name, pct) = entry
                            .rsplit_once(' ')
                            .unwrap_or_else(|| panic!("bad hottest entry {entry:?} in {line:?}"));
                        let pct = pct
                            .parse()
                            .unwrap_or_else(|_| panic!("bad percent in {entry:?} in {line:?}"));
                        hottest.push((name.to_string(), pct));
                    }
                }
                continue;
            }
            let group = group.strip_prefix("tracking ").unwrap_or(group);
            for item in group.split(", ") {
                if let Some((n, name)) = item.split_once(' ') {
                    if let Ok(n) = n.parse::<f64>() {
                        fields.insert(name.to_string(), n);
                    }
                }
            }
        }
        out.push(WindowLine {
            start,
            end,
            hottest,
            fields,
        });
    }
    out
}

/// Is a `hottest:` or folded name unnamed: `binary+0x...`, `[unknown]` or `[anonymous]`?
fn unnamed(name: &str) -> bool {
    name.contains("+0x") || name == "[unknown]" || name == "[anonymous]"
}

// ------------------------------------------------------------------------------------------
// The churn soak

/// Window length of the soak recording.
const SOAK_WINDOW_SECS: f64 = 2.0;
/// Recording before the churn starts: the baseline windows.
const BASELINE_SECS: f64 = 6.0;
/// How long the churn runs: some 1,250 execs and 16 deploys (a leak of one item per exec
/// stands far above the bounds below, one per deploy above the recovery slacks of files,
/// pinned binaries, unwind sections and open fds), and at least 10 whole windows in it, with
/// a window and a half to spare.
const CHURN_SECS: f64 = 25.0;
/// The whole recording; what follows the churn (22 s) shows the recovery: the windows from
/// [`RECOVERY_AFTER_SECS`] after it to [`SHUTDOWN_SLACK_SECS`] before the end, five of them
/// when the churn ends on time (four are needed: one more for a churn that ends late). 26 s
/// gave seven; in a run here every figure was back at its value of the recovery 4 s after the
/// churn.
const SOAK_RECORD_SECS: f64 = BASELINE_SECS + CHURN_SECS + 22.0;
/// Short processes started per second.
const CHURN_RATE: u32 = 50;
/// Seconds between deploys (about 16 generations in the churn).
const DEPLOY_SECS: f64 = 1.5;
/// The churn's children exit after this much CPU in churn_child_hot.
const CHILD_CPU_SECS: f64 = 0.005;
/// Recording time is counted from profctl's first window, which opens a little after the test
/// spawned profctl (its start-up): windows are classified with this much slack.
const STARTUP_SLACK_SECS: f64 = 1.5;
/// Windows starting this long after the churn stopped show the recovery: processes that
/// exited are released once no open window can hold their samples (a window plus the close
/// grace), which leaves some seconds for slower releases (files, pinned binaries, symbolizers).
const RECOVERY_AFTER_SECS: f64 = 6.0;
/// Windows ending within this much of the end of the recording are left out of the recovery:
/// the last ones close after sampling stopped, with the events' descriptors already closed.
const SHUTDOWN_SLACK_SECS: f64 = 3.0;

/// A bound on one window field: during the churn, `value <= baseline + churn_slack`; in the
/// recovery windows, `min(value) <= baseline + recovery_slack`. The baseline is the largest
/// value of the windows before the churn.
///
/// How they were chosen. What a pipeline that releases what exited must hold: the churn's 4
/// long-lived processes, 2 service generations in flight, and the ~50 short processes a second
/// that exited while a window that may hold their samples is open (2-3 windows of 2 s): all
/// of the same binary and libc, but for the deploys. Before the pipeline released anything,
/// each deploy leaked a file, a pinned descriptor, an unwind section and ~0.9 MB, and every
/// exec an unwinder. Measured on the 2-CPU test machine at `-F 999`, quiet machine, debug
/// build, with files released as windows close:
///
/// | field           | baseline | max in churn | min after |
/// |-----------------|----------|--------------|-----------|
/// | processes       | 66       | 210          | 68        |
/// | files           | 17       | 25           | 17        |
/// | pinned          | 0        | 6            | 0         |
/// | unwinders       | 2        | 9            | 3         |
/// | unwind sections | 5        | 12           | 6         |
/// | symbolizers     | 3        | 10           | 4         |
/// | open fds        | 21       | 27           | 21        |
/// | MB resident     | 182      | 219          | 206       |
/// | MB anonymous    | 78.7     | 93.2         | 90.5      |
///
/// The slacks sit above what the churn legitimately holds and well below a leak of one item
/// per exec (1,250), and for most fields below one per deploy (16); another user's compiler
/// adds files and memory of its own (its binaries and their symbols): run the soak on an
/// otherwise quiet machine for a meaningful verdict (the report gives the share of samples
/// taken by other processes).
struct Bound {
    field: &'static str,
    churn_slack: f64,
    recovery_slack: f64,
}

const BOUNDS: &[Bound] = &[
    // Held exited processes: ~200 on a quiet machine, ~560 once while other work ran (slower
    // closing of windows); a leak adds 50 a second, 1,250 by the end of the churn.
    Bound {
        field: "processes",
        churn_slack: 1000.0,
        recovery_slack: 40.0,
    },
    // Deploy generations in flight and what held processes map: a handful, but a window
    // whose predecessors close late holds more (one CI run's window: files 17 -> 38, pinned
    // 0 -> 19, unwind sections 6 -> 28, back to 28, 10 and 19 the window after). A leak per
    // exec adds 1,250 here; one per deploy is caught after the churn (recovery).
    Bound {
        field: "files",
        churn_slack: 30.0,
        recovery_slack: 10.0,
    },
    Bound {
        field: "pinned",
        churn_slack: 30.0,
        recovery_slack: 10.0,
    },
    // Processes with a DWARF unwinder, dropped on exit; long-lived processes sampled for the
    // first time add some (+10 measured); a leak adds one per short process sampled with DWARF.
    Bound {
        field: "unwinders",
        churn_slack: 100.0,
        recovery_slack: 30.0,
    },
    Bound {
        field: "unwind sections",
        churn_slack: 30.0,
        recovery_slack: 10.0,
    },
    // Reported only by builds that evict symbolizers; checked when present. What the churn
    // left goes at a trim of what was unused since the one before, so some of it outlives
    // the few windows after the churn.
    Bound {
        field: "symbolizers",
        churn_slack: 20.0,
        recovery_slack: 16.0,
    },
    // Pinned binaries are descriptors: as `pinned`.
    Bound {
        field: "open fds",
        churn_slack: 30.0,
        recovery_slack: 10.0,
    },
    // Resident memory, MB: names, stacks, process model and symbolizers held for the churn
    // (+35 MB measured at its peak in a release build, +45 MB in a debug one). It includes
    // the pages of the files profctl maps: in a whole-system recording it names its own
    // frames, and every function of its own sampled for the first time touches more of its
    // debug information (far larger in a debug build), which stays resident, reclaimable,
    // after the churn (+20 MB release, +31 MB debug measured). One CI run, whose symbolize
    // thread took twice its usual samples (its own debug frames, named as they came), peaked
    // at +140 MB in the churn's first window (+93 MB of file pages, +47 MB anonymous) and was
    // back at +22 MB 6 s later. What profctl holds is the anonymous part, bounded below.
    Bound {
        field: "MB resident",
        churn_slack: 160.0,
        recovery_slack: 48.0,
    },
    // Anonymous resident memory, MB: what profctl itself holds (heap: names cached, windows'
    // stacks, process model, unwinders, and the merged profile it will write, which grows
    // with the distinct stacks seen). Measured after the churn: +11.8 MB run alone, +17.3 MB
    // in the whole suite, where other tests' processes run beside it and get sampled too, and
    // +24.5 MB in the CI run above, which saw more distinct stacks of profctl's own: the heap
    // grew from 79.5 to 97.5 MB during the churn, 11.6 MB of it in one window (as a table
    // doubles), and then held still for the 28 s after it. A leak of 40 KB per exec adds 50.
    Bound {
        field: "MB anonymous",
        churn_slack: 64.0,
        recovery_slack: 36.0,
    },
];

/// Share of a churn comm group's samples whose leaf may be unnamed (binary+0x..., [unknown],
/// [anonymous]): a process's first instructions after exec, before its mappings are known.
const UNNAMED_LEAF_SHARE: f64 = 0.03;

/// What `churn drive` wrote.
#[derive(Debug, Default)]
struct ChurnResults {
    dir: String,
    execs: u64,
    exec_ok: u64,
    deploys: u64,
    deployed: Vec<String>,
    deleted: Vec<String>,
    rename_names: Vec<String>,
    jit_map: Option<PathBuf>,
    jit_fns: Vec<String>,
    jit_skipped: Option<String>,
}

fn read_churn_results(path: &Path) -> ChurnResults {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read churn results {}: {e}", path.display()));
    let mut r = ChurnResults::default();
    for line in text.lines() {
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        let num = || value.parse::<u64>().unwrap_or(0);
        match key {
            "dir" => r.dir = value.to_string(),
            "execs" => r.execs = num(),
            "exec_ok" => r.exec_ok = num(),
            "deploys" => r.deploys = num(),
            "deployed" => r.deployed.push(value.to_string()),
            "deleted" => r.deleted.push(value.to_string()),
            "rename_names" => r.rename_names = value.split(' ').map(str::to_string).collect(),
            "jit_map" => r.jit_map = Some(PathBuf::from(value)),
            "jit_fn" => r.jit_fns.push(value.to_string()),
            "jit" => r.jit_skipped = Some(value.to_string()),
            _ => {}
        }
    }
    r
}

/// Removes the churn's JIT map when the test ends, whichever way.
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = fs::remove_file(p);
        }
    }
}

/// profctl's descriptors and mappings that refer to a deploy binary (`DIR/churn_svc_*`).
fn deploy_references(pid: u32, dir: &str) -> Vec<String> {
    let prefix = format!("{dir}/churn_svc_");
    let mut found = Vec::new();
    if let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in entries.flatten() {
            if let Ok(target) = fs::read_link(e.path()) {
                let target = target.to_string_lossy().into_owned();
                if target.starts_with(&prefix) {
                    found.push(format!(
                        "fd {} -> {target}",
                        e.file_name().to_string_lossy()
                    ));
                }
            }
        }
    }
    if let Ok(maps) = fs::read_to_string(format!("/proc/{pid}/maps")) {
        for line in maps.lines().filter(|l| l.contains(&prefix)) {
            found.push(format!("mapped: {line}"));
        }
    }
    found
}

/// Folded-output figures of one group of the churn's comms.
#[derive(Default)]
struct Group {
    samples: u64,
    unnamed_leaf: u64,
    named_hot: u64,
}

#[test]
fn churn_soak_stays_bounded_and_names_every_window() {
    if !is_root() {
        eprintln!(
            "note: not root: the churn soak records the whole system, which needs root; skipped"
        );
        return;
    }
    let _guard = sampling_lock();
    let w = soak_workloads();
    let dir = scratch();
    let folded = dir.path().join("soak.folded");
    let results_path = dir.path().join("churn.txt");

    let t0 = Instant::now();
    let mut cmd = Command::new(profctl());
    cmd.args([
        "record",
        "-v",
        "--freq",
        FREQ,
        "--window",
        &SOAK_WINDOW_SECS.to_string(),
        "--duration",
        &SOAK_RECORD_SECS.to_string(),
        "--folded",
    ])
    .arg(&folded)
    .current_dir(dir.path());
    let mut profctl = Spawned::spawn(cmd, "profctl record --window");
    let profctl_pid = profctl.pid();

    // The baseline: a span of recording before the churn.
    wait_recording(&mut profctl);
    hold(Duration::from_secs_f64(BASELINE_SECS));
    let churn_start = t0.elapsed().as_secs_f64();
    let mut cmd = Command::new(&w.churn);
    cmd.arg("drive")
        .arg(CHURN_SECS.to_string())
        .arg(&results_path)
        .arg(CHURN_RATE.to_string())
        .arg(DEPLOY_SECS.to_string());
    let mut churn = Spawned::spawn(cmd, "churn drive");
    let churn_run = churn.wait_or_panic(Duration::from_secs_f64(CHURN_SECS + 30.0));
    let churn_end = t0.elapsed().as_secs_f64();
    assert!(
        churn_run.status.success(),
        "churn failed ({}):\n{}",
        churn_run.status,
        churn_run.stderr
    );
    let churn_results = read_churn_results(&results_path);
    let _jit_map = RemoveOnDrop(churn_results.jit_map.clone());

    // No process maps a deploy binary any more: profctl must let go of every one of them
    // while it is still recording. Polled until shortly before the recording ends.
    let mut held = Vec::new();
    hold_until_elapsed(t0, churn_end + RECOVERY_AFTER_SECS);
    let poll_for = (SOAK_RECORD_SECS - SHUTDOWN_SLACK_SECS - t0.elapsed().as_secs_f64()).max(0.0);
    poll_until(Duration::from_secs_f64(poll_for), || {
        held = deploy_references(profctl_pid, &churn_results.dir);
        held.is_empty().then_some(())
    });
    let held_at = t0.elapsed().as_secs_f64();
    let memory: Vec<String> = fs::read_to_string(format!("/proc/{profctl_pid}/status"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("Rss") || l.starts_with("VmHWM"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();

    let run = profctl.wait_or_panic(Duration::from_secs_f64(SOAK_RECORD_SECS + 90.0));
    run.assert_success("record --window over the churn");
    let windows = parse_windows(&run.stderr);
    let stacks = read_folded(&folded);

    let mut failures: Vec<String> = Vec::new();
    let mut report = String::new();
    let _ = writeln!(
        report,
        "churn: {} execs ({} ran to completion), {} deploys, {} JIT functions{}; ran {churn_start:.1}-{churn_end:.1} s after profctl started",
        churn_results.execs,
        churn_results.exec_ok,
        churn_results.deploys,
        churn_results.jit_fns.len(),
        churn_results
            .jit_skipped
            .as_ref()
            .map(|m| format!(" (JIT skipped: {m})"))
            .unwrap_or_default()
    );

    // ---- the workload did what it should
    let expected_execs = (CHURN_RATE as f64 * CHURN_SECS * 0.8) as u64;
    assert!(
        churn_results.exec_ok >= expected_execs,
        "the churn ran only {} children to completion, expected at least {expected_execs}\n{report}",
        churn_results.exec_ok
    );
    assert!(
        churn_results.deploys >= 10 && churn_results.deleted.len() as u64 == churn_results.deploys,
        "the churn made {} deploys and deleted {} binaries\n{report}",
        churn_results.deploys,
        churn_results.deleted.len()
    );

    // ---- classify the windows
    let phase = |wl: &WindowLine| {
        if wl.end <= churn_start - STARTUP_SLACK_SECS {
            "base"
        } else if wl.start >= churn_start && wl.end <= churn_end - STARTUP_SLACK_SECS {
            "churn"
        } else if wl.start >= churn_end + RECOVERY_AFTER_SECS
            && wl.end <= SOAK_RECORD_SECS - SHUTDOWN_SLACK_SECS
        {
            "after"
        } else {
            ""
        }
    };
    let in_phase =
        |p: &str| -> Vec<&WindowLine> { windows.iter().filter(|w| phase(w) == p).collect() };
    let (base, during, after) = (in_phase("base"), in_phase("churn"), in_phase("after"));
    let _ = writeln!(report, "windows (phase: base / churn / after):");
    for wl in &windows {
        let _ = write!(
            report,
            "  {:>5}  {:5.1}-{:5.1} s:",
            phase(wl),
            wl.start,
            wl.end
        );
        for b in BOUNDS {
            if let Some(v) = wl.get(b.field) {
                let _ = write!(report, " {v} {},", b.field);
            }
        }
        let hot: Vec<String> = wl
            .hottest
            .iter()
            .map(|(n, p)| format!("{n} {p}%"))
            .collect();
        let _ = writeln!(report, " hottest: {}", hot.join(", "));
    }
    assert!(
        base.len() >= 2 && during.len() >= 10 && after.len() >= 4,
        "too few windows to judge: {} before the churn, {} during, {} after\n{report}\n--- stderr ---\n{}",
        base.len(),
        during.len(),
        after.len(),
        run.stderr
    );

    // ---- bounds during the churn, and recovery
    let _ = writeln!(
        report,
        "bounds: field: baseline (max before) | max during churn <= bound | min after <= bound"
    );
    for b in BOUNDS {
        let base_max = base.iter().filter_map(|w| w.get(b.field)).reduce(f64::max);
        let Some(base_max) = base_max else {
            if b.field != "symbolizers" {
                failures.push(format!("no {:?} field in the window lines", b.field));
            }
            continue;
        };
        let churn_bound = base_max + b.churn_slack;
        let after_bound = base_max + b.recovery_slack;
        let during_max = during
            .iter()
            .filter_map(|w| w.get(b.field))
            .fold(f64::MIN, f64::max);
        let after_min = after
            .iter()
            .filter_map(|w| w.get(b.field))
            .fold(f64::MAX, f64::min);
        let _ = writeln!(
            report,
            "  {}: {base_max} | {during_max} <= {churn_bound} | {after_min} <= {after_bound}",
            b.field
        );
        if during_max > churn_bound {
            failures.push(format!(
                "{} rose to {during_max} during the churn: bound {churn_bound} (baseline {base_max} + {})",
                b.field, b.churn_slack
            ));
        }
        if after_min > after_bound {
            failures.push(format!(
                "{} stayed at {after_min} or more after the churn: bound {after_bound} (baseline {base_max} + {})",
                b.field, b.recovery_slack
            ));
        }
    }

    // ---- every window's hottest functions are named
    let mut unnamed_windows = Vec::new();
    for wl in &during {
        let bad: Vec<String> = wl
            .hottest
            .iter()
            .filter(|(n, _)| unnamed(n))
            .map(|(n, p)| format!("{n} {p}%"))
            .collect();
        if !bad.is_empty() {
            unnamed_windows.push(format!(
                "{:.1}-{:.1} s: {}",
                wl.start,
                wl.end,
                bad.join(", ")
            ));
        }
    }
    if !unnamed_windows.is_empty() {
        failures.push(format!(
            "{} of {} windows during the churn have unnamed functions among their hottest, e.g. {}",
            unnamed_windows.len(),
            during.len(),
            unnamed_windows
                .iter()
                .take(3)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }

    // ---- the folded output names the churn's functions, per comm group
    let deploy_comms: BTreeSet<String> = churn_results
        .deployed
        .iter()
        .filter_map(|p| Path::new(p).file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    let rename_comms: BTreeSet<&str> = churn_results
        .rename_names
        .iter()
        .map(String::as_str)
        .collect();
    let group_of = |comm: &str| -> Option<(&'static str, &'static str)> {
        if comm == "churn_burn" {
            Some(("churn_burn", "churn_child_hot"))
        } else if deploy_comms.contains(comm) {
            Some(("churn_svc_*", "service_hot"))
        } else if rename_comms.contains(comm) {
            Some(("rn_* (renamed threads)", "rename_hot"))
        } else if comm == "churn_jit" {
            Some(("churn_jit", "jit_fn_"))
        } else {
            None
        }
    };
    let mut groups: BTreeMap<&str, Group> = BTreeMap::new();
    let mut svc_generations: BTreeSet<&str> = BTreeSet::new();
    let mut rename_seen: BTreeSet<&str> = BTreeSet::new();
    let mut jit_named: BTreeSet<&str> = BTreeSet::new();
    for s in &stacks {
        let Some((group, hot)) = group_of(&s.comm) else {
            continue;
        };
        let g = groups.entry(group).or_default();
        g.samples += s.count;
        let leaf = s.frames.last().map(String::as_str).unwrap_or("");
        if unnamed(leaf) {
            g.unnamed_leaf += s.count;
        }
        if s.frames.iter().any(|f| f.starts_with(hot)) {
            g.named_hot += s.count;
            match group {
                "churn_svc_*" => {
                    svc_generations.insert(&s.comm);
                }
                "rn_* (renamed threads)" => {
                    rename_seen.insert(&s.comm);
                }
                "churn_jit" => {
                    for f in s.frames.iter().filter(|f| f.starts_with(hot)) {
                        jit_named.insert(f);
                    }
                }
                _ => {}
            }
        }
    }
    let total: u64 = stacks.iter().map(|s| s.count).sum();
    let ours: u64 = groups.values().map(|g| g.samples).sum::<u64>()
        + comm_total(&stacks, "churn_drv")
        + comm_total(&stacks, "swapper");
    let _ = writeln!(
        report,
        "other processes (neither idle nor the churn's; profctl included) took {:.1}% of {total} samples; comms: {}",
        100.0 * total.saturating_sub(ours) as f64 / total.max(1) as f64,
        comm_summary(&stacks)
    );
    let _ = writeln!(report, "folded output, per group of churn comms:");
    for (name, g) in &groups {
        let share = g.unnamed_leaf as f64 / g.samples.max(1) as f64;
        let _ = writeln!(
            report,
            "  {name}: {} samples, {} with its hot function, {:.1}% with an unnamed leaf",
            g.samples,
            g.named_hot,
            100.0 * share
        );
        if share > UNNAMED_LEAF_SHARE {
            failures.push(format!(
                "{name}: {:.1}% of {} samples have an unnamed leaf (at most {:.0}%)",
                100.0 * share,
                g.samples,
                100.0 * UNNAMED_LEAF_SHARE
            ));
        }
    }
    // churn_child_hot: ~5 ms of CPU per child; at least half of that in samples.
    let child = groups.get("churn_burn").map_or(0, |g| g.named_hot);
    let expected = churn_results.exec_ok as f64 * CHILD_CPU_SECS * FREQ_HZ;
    let _ = writeln!(
        report,
        "churn_child_hot: {child} samples (expected about {expected:.0})"
    );
    if (child as f64) < 0.5 * expected {
        failures.push(format!(
            "churn_child_hot has {child} samples under churn_burn, expected about {expected:.0}"
        ));
    }
    // service_hot under most deployed generations (each runs ~2 s at 20% of a CPU).
    let _ = writeln!(
        report,
        "service_hot under {} of {} deployed generations",
        svc_generations.len(),
        churn_results.deploys
    );
    if (svc_generations.len() as u64) * 4 < churn_results.deploys * 3 {
        failures.push(format!(
            "service_hot is named under only {} of {} deployed generations: {:?}",
            svc_generations.len(),
            churn_results.deploys,
            svc_generations
        ));
    }
    // Every thread name of the cycle, with rename_hot.
    let missing: Vec<&&str> = rename_comms
        .iter()
        .filter(|n| !rename_seen.contains(**n))
        .collect();
    let _ = writeln!(report, "renamed threads with rename_hot: {rename_seen:?}");
    if !missing.is_empty() {
        failures.push(format!(
            "no rename_hot under the thread names {missing:?} (seen: {rename_seen:?})"
        ));
    }
    // JIT functions emitted in the last quarter of the churn are named: the map was re-read.
    if churn_results.jit_skipped.is_none() {
        let n = churn_results.jit_fns.len();
        let late: Vec<&String> = churn_results.jit_fns[n * 3 / 4..].iter().collect();
        let late_named = late
            .iter()
            .filter(|f| jit_named.contains(f.as_str()))
            .count();
        let _ = writeln!(
            report,
            "JIT: {} of {n} functions named; {late_named} of the last {} (emitted in the last quarter of the churn)",
            jit_named.len(),
            late.len()
        );
        if late_named * 2 < late.len() {
            failures.push(format!(
                "only {late_named} of the {} JIT functions emitted last (of {n}) are named; named: {} functions, the last {:?}",
                late.len(),
                jit_named.len(),
                jit_named.iter().next_back()
            ));
        }
    }

    // ---- no deleted deploy binary kept alive
    let _ = writeln!(report, "profctl's memory then: {}", memory.join(", "));
    let _ = writeln!(
        report,
        "profctl's references to deploy binaries {held_at:.1} s after it started (churn ended at {churn_end:.1} s): {}",
        held.len()
    );
    if !held.is_empty() {
        failures.push(format!(
            "{} references of profctl's to deleted deploy binaries (of {} deploys) remained {:.0} s after the churn stopped, e.g.:\n    {}",
            held.len(),
            churn_results.deploys,
            held_at - churn_end,
            held.iter().take(6).cloned().collect::<Vec<_>>().join("\n    ")
        ));
    }

    eprintln!("{report}");
    assert!(
        failures.is_empty(),
        "churn soak: {} checks failed:\n  - {}\n\n{report}",
        failures.len(),
        failures.join("\n  - ")
    );
}

// ------------------------------------------------------------------------------------------
// pid reuse

/// Reuse cycles: A then B on A's pid, each time.
const REUSE_CYCLES: u32 = 4;
/// CPU seconds of A (a_hot) and of B (b_hot) per cycle.
const A_SECS: f64 = 0.3;
const B_SECS: f64 = 1.1;

#[test]
fn pid_reuse_names_the_new_process_from_its_own_binary() {
    if !is_root() {
        eprintln!(
            "note: not root: placing a process on a chosen pid (clone3 set_tid) and recording \
             the whole system need root; skipped"
        );
        return;
    }
    let _guard = sampling_lock();
    let w = soak_workloads();
    let dir = scratch();
    let folded = dir.path().join("reuse.folded");
    let pids_path = dir.path().join("pids.txt");

    let mut cmd = Command::new(profctl());
    cmd.args([
        "record",
        "--freq",
        FREQ,
        "--window",
        "1",
        "--duration",
        "60",
        "--folded",
    ])
    .arg(&folded)
    .current_dir(dir.path());
    let mut profctl = Spawned::spawn(cmd, "profctl record --window 1");
    wait_recording(&mut profctl);
    let mut cmd = Command::new(&w.reuse_a);
    cmd.arg("drive")
        .arg(&w.reuse_b)
        .arg(REUSE_CYCLES.to_string())
        .arg(A_SECS.to_string())
        .arg(B_SECS.to_string())
        .arg(&pids_path);
    let mut driver = Spawned::spawn(cmd, "reuse_a drive");
    let driven = driver.wait_or_panic(Duration::from_secs(45));
    // The driver waited for its last process: every sample of the cycles is in the rings, and
    // SIGINT ends the recording with them (the --duration is only a bound).
    send_signal(profctl.pid(), "INT");
    let run = profctl.wait_or_panic(Duration::from_secs(60));
    assert!(
        driven.status.success(),
        "the reuse driver failed ({}):\n{}",
        driven.status,
        driven.stderr
    );
    run.assert_success("record --window 1 over pid reuse");

    // The pids really were equal.
    let pids = fs::read_to_string(&pids_path).expect("reuse driver's pids");
    let cycles: Vec<Vec<&str>> = pids.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(cycles.len(), REUSE_CYCLES as usize, "pids file: {pids}");
    for c in &cycles {
        assert!(
            c.len() == 5 && c[2] == c[3] && c[4] != "failed",
            "B did not run on A's pid: {c:?} (cycle A_PID B_PID METHOD)\n{pids}"
        );
    }

    let stacks = read_folded(&folded);
    let context = format!(
        "pids:\n{pids}comms: {}\ntop folded lines:\n{}",
        comm_summary(&stacks),
        top_lines(&stacks, 20)
    );
    // Nothing mixed up: a_hot only under reuse_a, b_hot only under reuse_b.
    let misfiled: Vec<Stack> = stacks
        .iter()
        .filter(|s| {
            (s.has("a_hot") && s.comm != "reuse_a")
                || (s.has("b_hot") && s.comm != "reuse_b")
                || (s.comm == "reuse_b" && s.has("a_hot"))
        })
        .cloned()
        .collect();
    assert!(
        misfiled.is_empty(),
        "samples named from the other process on the same pid:\n{}\n{context}",
        top_lines(&misfiled, 10)
    );
    let a = frame_count(&stacks, "reuse_a", "a_hot");
    let b = frame_count(&stacks, "reuse_b", "b_hot");
    let expected_a = REUSE_CYCLES as f64 * A_SECS * FREQ_HZ;
    let expected_b = REUSE_CYCLES as f64 * B_SECS * FREQ_HZ;
    // B runs at the same addresses as A: samples of B taken in the window where A exited,
    // named as A's (comm reuse_a, a_hot from A's binary), would inflate A's count far past
    // the CPU time A spent (a window of up to 1 s of B per cycle, against 0.3 s of A). The
    // profiler cannot sample more of A than A ran: a quarter over (plus 25 samples) is noise.
    assert!(
        (a as f64) <= 1.25 * expected_a + 25.0,
        "a_hot under reuse_a has {a} samples, but A ran only {A_SECS} s x {REUSE_CYCLES} \
         (about {expected_a:.0} samples): samples of B, on A's pid, were named as A's\n\
         b_hot under reuse_b: {b} samples (expected about {expected_b:.0})\n{context}"
    );
    assert!(
        (a as f64) >= 0.5 * expected_a,
        "a_hot under reuse_a has {a} samples, expected about {expected_a:.0}\n{context}"
    );
    assert!(
        (b as f64) >= 0.75 * expected_b,
        "b_hot under reuse_b has {b} samples, expected about {expected_b:.0} \
         (a_hot under reuse_a: {a}, expected about {expected_a:.0})\n{context}"
    );
}
