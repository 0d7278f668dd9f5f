//! `profctl timeline` end to end: bursts of CPU (8 s busy, 20 s idle, 6 s busy) under a real
//! daemon, asked for one second after the second burst, in a time zone other than UTC: the
//! workload's cores in every bucket inside a burst and in the pause; `--since HH:MM:SS`
//! selects the buckets the duration form does; the terminal chart; the SVG rendered by a real
//! headless browser (chromium) and its picture checked; the range as pprof (`flamegraph -o
//! range.pb.gz`, `--format pprof`) read by go tool pprof with its labels; an unprivileged user
//! sees none of root's CPU.
//!
//! Its workload is a copy of the burner under a name no other test uses ([`NAME`]), every
//! query is filtered to it, and each bucket inside a burst is judged against the cores the
//! burner got in it (read from `/proc` at the bucket's edges): a busy machine moves nothing
//! judged.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;
use crate::daemon::{unix_now, Daemon, BUDGET_OFF};
use crate::daemon_ops::write_ops_config;
use crate::daemon_serve::as_user;
use crate::pprof_files::go_pprof;

/// The burner's name here (its comm): no other test runs a program of this name.
const NAME: &str = "tl_burner";

/// The time zone profctl runs in (not UTC, half-hour offset).
const TZ: &str = "Asia/Kolkata";

/// The timeline's colour of its first group (profiler-cli/src/timeline/svg.rs).
const FIRST_COLOUR: [u8; 3] = [0xd9, 0x48, 0x0f];

/// Lets time pass until `lead` seconds before a multiple of `bucket` (UNIX time), so that a
/// burst started then covers a whole bucket.
fn wait_before_boundary(bucket: f64, lead: f64) {
    let now = unix_now();
    let mut next = (now / bucket).ceil() * bucket - lead;
    if next < now {
        next += bucket;
    }
    hold_until(next);
}

/// A burst of the burner: when it ran, and the cores it got in each whole 5-s bucket.
struct Burst {
    /// Its start and end, UNIX seconds.
    span: (f64, f64),
    /// (bucket start, the burner's cores in that bucket) for every bucket it ran wholly across.
    cores: Vec<(f64, f64)>,
}

impl Burst {
    /// The cores the burner got in the bucket starting at `start`, if it ran across it.
    fn cores_in(&self, start: f64) -> Option<f64> {
        self.cores.iter().find(|(s, _)| *s == start).map(|c| c.1)
    }
}

/// Runs `burner` for `seconds` of CPU, reading its CPU time at every 5-s boundary it runs
/// across (on a shared machine it gets what it gets, and each bucket is judged against that).
fn burst(burner: &Path, seconds: u32) -> Burst {
    let mut cmd = Command::new(burner);
    cmd.arg(seconds.to_string());
    let start = unix_now();
    let mut child = Spawned::spawn(cmd, NAME);
    let pid = child.pid();
    let mut marks = Vec::new();
    let mut edge = (start / 5.0).ceil() * 5.0;
    loop {
        let left = Duration::from_secs_f64((edge - unix_now()).max(0.0));
        if let Some(run) = child.wait_timeout(left) {
            run.assert_success(NAME);
            break;
        }
        marks.push((edge, cpu_seconds(pid)));
        edge += 5.0;
        assert!(
            edge - start < scaled(Duration::from_secs(120)).as_secs_f64(),
            "{NAME} ran {seconds} CPU-s for more than 120 s"
        );
    }
    let end = unix_now();
    let cores = marks
        .windows(2)
        .map(|w| (w[0].0, (w[1].1 - w[0].1) / 5.0))
        .collect();
    Burst {
        span: (start, end),
        cores,
    }
}

/// `profctl timeline ARGS` in [`TZ`]; its stdout.
fn timeline(socket: &Path, args: &[&str], cwd: &Path) -> String {
    let mut all = vec!["--socket", socket.to_str().unwrap(), "timeline"];
    all.extend_from_slice(args);
    tool(
        Command::new(profctl())
            .args(&all)
            .env("TZ", TZ)
            .current_dir(cwd),
    )
}

/// Bucket starts and the burner's cores in each (as the timeline says).
fn burner_cores(json: &str) -> Vec<(f64, f64)> {
    let v: Value = serde_json::from_str(json).expect("JSON");
    assert_eq!(v["bucket_seconds"], 5, "{json}");
    v["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| {
            (
                b["start"].as_f64().expect("start"),
                b["cpu"][NAME].as_f64().unwrap_or(0.0),
            )
        })
        .collect()
}

/// `unix` as `HH:MM:SS` in [`TZ`].
fn clock_in_tz(unix: i64) -> String {
    let tz = jiff::tz::TimeZone::get(TZ).unwrap();
    let t = jiff::Timestamp::from_second(unix).unwrap();
    t.to_zoned(tz).strftime("%T").to_string()
}

#[test]
fn timeline_shows_bursts_and_the_pause_renders_in_a_browser_and_the_range_as_pprof() {
    let _guard = sampling_shared_long();
    let w = workloads();
    let dir = scratch();
    let burner = dir.path().join(NAME);
    std::fs::copy(&w.burner, &burner).unwrap();
    // 99 Hz (the default), not the other tests' 999: a debug build of the daemon naming
    // 999 samples a second takes most of a core, which the burner would have to share on a
    // small machine. Slices of a second, as in the other tests.
    let config = dir.path().join("profilerd.toml");
    write_ops_config(
        &config,
        dir.path(),
        "frequency = 99\nslice = \"1s\"\n",
        BUDGET_OFF,
    );
    let daemon = Daemon::start(&config);
    let socket = daemon.socket.clone();
    // The daemon's start (naming what runs already) out of the way of the first burst.
    daemon.wait_start_up_named();

    wait_before_boundary(5.0, 0.3);
    let first = burst(&burner, 8);
    // The pause: 20 s of the schedule.
    hold(Duration::from_secs(20));
    wait_before_boundary(5.0, 0.3);
    // Begun 0.3 s before a boundary, 6 s hold a whole 5-s bucket, as 8 s did: nothing after
    // this burst is judged, so its length beyond that bucket proved nothing.
    let second = burst(&burner, 6);
    // Asked once the second burst's last second is in a slice on disk.
    daemon.wait_slices_through(second.span.1);

    // From a bucket's middle before the first burst: both forms fall in the same bucket.
    let since = ((first.span.0 / 5.0).floor() * 5.0 - 7.5) as i64;
    let ago = format!("{}s", (unix_now() - since as f64).round());
    let json = timeline(
        &socket,
        &[
            "--json", "--bucket", "5s", "--by", "comm", "--comm", NAME, "--since", &ago,
        ],
        dir.path(),
    );
    let buckets = check_bursts(&json, &first, &second);

    // The same range as a local wall-clock time selects the same buckets.
    let clock = clock_in_tz(since);
    check_clock_form(&socket, dir.path(), &clock, since, &buckets);

    check_chart_and_svg(&socket, dir.path(), &clock, first.span.0);
    check_range_as_pprof(&socket, dir.path(), &clock);
    check_function_by_process(&socket, dir.path(), &clock, &first);

    // A user other than root sees none of root's CPU.
    check_unprivileged(&socket, &ago);
    daemon.stop();
}

/// The burner's cores: at least 0.8 of what it got (by `/proc`) in every bucket it ran wholly
/// across (one at least in each burst), under 0.05 in every bucket of the pause; the buckets.
/// The buckets judged are those the `/proc` readings cover, not those inside the burst's span:
/// its end is when the burner was seen gone, up to the wait's step after it ended.
fn check_bursts(json: &str, first: &Burst, second: &Burst) -> Vec<(f64, f64)> {
    let buckets = burner_cores(json);
    let inside = |(a, b): (f64, f64), start: f64| start >= a && start + 5.0 <= b;
    for (name, burst) in [("first", first), ("second", second)] {
        let span = burst.span;
        assert!(
            !burst.cores.is_empty(),
            "{NAME} ran across no whole bucket in the {name} burst {span:?}"
        );
        for (start, got) in &burst.cores {
            // A bucket the timeline leaves out had none of the burner's samples.
            let cores = buckets
                .iter()
                .find(|(s, _)| s == start)
                .map_or(0.0, |b| b.1);
            assert!(
                cores >= 0.8 * got,
                "{cores} cores in the bucket at {start}, inside the {name} burst {span:?}, where \
                 {NAME} got {got:.3}: {json}"
            );
        }
    }
    let pause: Vec<_> = buckets
        .iter()
        .filter(|(s, _)| inside((first.span.1, second.span.0), *s))
        .collect();
    assert!(pause.len() >= 3, "{json}");
    for (start, cores) in pause {
        assert!(
            *cores < 0.05,
            "{cores} cores at {start}, in the pause: {json}"
        );
    }

    buckets
}

/// `--since CLOCK` (the local time of `since`) selects the buckets of the duration form.
fn check_clock_form(socket: &Path, dir: &Path, clock: &str, since: i64, buckets: &[(f64, f64)]) {
    let by_clock = timeline(
        socket,
        &[
            "--json", "--bucket", "5s", "--by", "comm", "--comm", NAME, "--since", clock,
        ],
        dir,
    );
    let starts = |b: &[(f64, f64)]| b.iter().map(|(s, _)| *s).collect::<Vec<_>>();
    let by_clock = burner_cores(&by_clock);
    let n = buckets.len().min(by_clock.len());
    assert_eq!(
        starts(&by_clock)[..n],
        starts(buckets)[..n],
        "--since {clock}"
    );
    assert_eq!(by_clock[0].0, (since as f64 / 5.0).floor() * 5.0);
    for (a, b) in buckets[1..n - 1].iter().zip(&by_clock[1..n - 1]) {
        assert!((a.1 - b.1).abs() < 0.02, "{a:?} vs {b:?} (--since {clock})");
    }
}

/// The terminal chart: a row per bucket with its local time, the first burst's full bucket
/// with a bar and burner; the SVG, rendered by a real browser, holds the first group's colour.
fn check_chart_and_svg(socket: &Path, dir: &Path, clock: &str, first_start: f64) {
    // The terminal chart: a row per bucket with its local time; the burst's rows name burner.
    let chart = timeline(
        socket,
        &["--bucket", "5s", "--comm", NAME, "--since", clock],
        dir,
    );
    let busy_row = clock_in_tz((first_start / 5.0).ceil() as i64 * 5);
    let row = chart
        .lines()
        .find(|l| l.starts_with(&busy_row))
        .unwrap_or_else(|| panic!("no row at {busy_row}:\n{chart}"));
    assert!(row.contains('█') && row.contains(NAME), "{chart}");

    // The SVG, rendered by a real browser: the picture holds the first group's colour.
    let svg = dir.join("timeline.svg");
    timeline(
        socket,
        &[
            "--bucket",
            "5s",
            "--comm",
            NAME,
            "--since",
            clock,
            "-o",
            svg.to_str().unwrap(),
        ],
        dir,
    );
    let text = check_svg(&svg);
    assert!(text.contains(NAME), "{text}");
    let (coloured, other) = browser_pixels(&svg, dir);
    assert!(
        coloured > 2000 && other > 200,
        "the rendered timeline has {coloured} pixels of the burst's colour and {other} other non-white ones"
    );
}

/// The range as pprof, with the labels `record` writes, read by go tool pprof; the same with
/// --format pprof and another name.
fn check_range_as_pprof(socket: &Path, dir: &Path, clock: &str) {
    // The same range as pprof, with the labels `record` writes, read by go tool pprof.
    let pb = dir.join("range.pb.gz");
    let out = Command::new(profctl())
        .args([
            "--socket",
            socket.to_str().unwrap(),
            "flamegraph",
            "--since",
            clock,
        ])
        .args(["--comm", NAME, "-o", pb.to_str().unwrap()])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.contains("wrote"), "{said}");
    let top = go_pprof(&["-top", "-sample_index=samples"], &pb);
    let hot = top
        .lines()
        .find(|l| l.trim_end().ends_with(" child_hot"))
        .unwrap_or_else(|| panic!("no child_hot in\n{top}"));
    let flat: f64 = hot
        .split_whitespace()
        .nth(1)
        .unwrap()
        .trim_end_matches('%')
        .parse()
        .unwrap();
    assert!(flat >= 90.0, "{top}");
    let tags = go_pprof(&["-tags"], &pb);
    // (uid is on the samples too, but -tags did not list root's, a numeric label of 0.)
    for label in ["comm:", "pid:", "tid:"] {
        assert!(tags.contains(label), "{label} missing in\n{tags}");
    }
    assert!(tags.contains(NAME), "{tags}");
    let named = dir.join("range.out");
    timeline_free_pprof(socket, clock, &named);
    let again = go_pprof(&["-top", "-sample_index=samples"], &named);
    assert!(again.lines().any(|l| l == hot), "{again}");
}

/// `--function child_hot --by pid` of [`NAME`]: only the burner's process (named
/// `tl_burner[PID]`), with 0.8 of the cores it got in the first burst's whole bucket.
fn check_function_by_process(socket: &Path, dir: &Path, clock: &str, first: &Burst) {
    let json = timeline(
        socket,
        &[
            "--json",
            "--bucket",
            "5s",
            "--by",
            "pid",
            "--function",
            "child_hot",
            "--comm",
            NAME,
            "--since",
            clock,
        ],
        dir,
    );
    let v: Value = serde_json::from_str(&json).expect("JSON");
    let full = (first.span.0 / 5.0).ceil() * 5.0;
    let got = first
        .cores_in(full)
        .unwrap_or_else(|| panic!("no reading of {NAME}'s CPU across the bucket at {full}"));
    let mut seen = false;
    for b in v["buckets"].as_array().expect("buckets") {
        for (group, cores) in b["cpu"].as_object().expect("cpu") {
            assert!(
                group.starts_with(&format!("{NAME}[")) && group.ends_with(']'),
                "{group} has no child_hot: {json}"
            );
            if b["start"].as_f64() == Some(full) {
                assert!(
                    cores.as_f64().unwrap() >= 0.8 * got,
                    "{NAME} got {got:.3} cores in the bucket at {full}: {json}"
                );
                seen = true;
            }
        }
    }
    assert!(seen, "no burner in the bucket at {full}: {json}");
}

/// A user other than root sees none of root's CPU.
fn check_unprivileged(socket: &Path, ago: &str) {
    let (uid, gid) = ensure_test_user();
    let out = as_user(uid, gid, profctl(), Path::new("/"))
        .args(["--socket", socket.to_str().unwrap(), "timeline", "--json"])
        .args(["--bucket", "5s", "--since", ago])
        .output()
        .unwrap();
    let own = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        own.starts_with("{\"bucket_seconds\":5,") && !own.contains(NAME),
        "{own}"
    );
}

/// `profctl flamegraph --since SINCE --comm tl_burner -o OUT --format pprof`.
fn timeline_free_pprof(socket: &Path, since: &str, out: &Path) {
    tool(
        Command::new(profctl())
            .args([
                "--socket",
                socket.to_str().unwrap(),
                "flamegraph",
                "--since",
                since,
            ])
            .args([
                "--comm",
                NAME,
                "--format",
                "pprof",
                "-o",
                out.to_str().unwrap(),
            ]),
    );
}

/// Renders `svg` with headless chromium into a PNG; (pixels of [`FIRST_COLOUR`], other
/// pixels that are not white).
fn browser_pixels(svg: &Path, dir: &Path) -> (usize, usize) {
    let png = dir.join("timeline.png");
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1000,440",
        ])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", svg.display()))
        .env("HOME", dir)
        .output()
        .expect("run chromium (scripts/test installs it)");
    assert!(
        out.status.success() && png.exists(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::fs::File::open(&png).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let step = info.color_type.samples();
    assert!(step >= 3, "{:?}", info.color_type);
    let (mut coloured, mut other) = (0, 0);
    for p in pixels[..info.buffer_size()].chunks_exact(step) {
        let near = |c: [u8; 3]| (0..3).all(|i| p[i].abs_diff(c[i]) <= 8);
        if near(FIRST_COLOUR) {
            coloured += 1;
        } else if !near([255, 255, 255]) {
            other += 1;
        }
    }
    (coloured, other)
}
