//! `profctl ui` in a real browser (Debian's chromium, driven by its chromedriver): a daemon
//! with a history of two programs in turn (the burner, then split); the page opened from the
//! link profctl printed shows both in the timeline; a drag over split's burst draws split's
//! functions and none of the burner's; a search's matched share agrees with `profctl top` of
//! the same range; the sandwich of `work` names its caller and callees; the burner's burst as
//! the diff's other range marks `hot_a` grown; requests without the session cookie or with a
//! foreign Host are refused, the page asks nothing of any other origin; and the same views of
//! the range written as pprof (`profctl ui --input x.pb.gz`). The programs and the profctl
//! commands that read the daemon (`ui`, `top`, `flamegraph`) run as a user of this test's own
//! ([`UI_USER`]), who sees only the test's processes, so the test shares the machine with
//! others; the file is shown by the user running the tests. The screenshot it takes is
//! docs/ui.png, and the files test's docs/ui-files.png (`PROFCTL_BLESS=1` writes them there).

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;
use crate::daemon::{unix_now, Daemon};
use crate::daemon_serve::as_user;
use crate::webdriver::{wait_until, Browser};

/// The user whose programs the daemon's ui test looks at: a user of that test alone, whose
/// view holds nothing of the tests running beside it.
const UI_USER: &str = "profctl-ui";

/// Who runs a program.
#[derive(Clone, Copy)]
enum RunAs<'a> {
    /// The user running the tests.
    Tester,
    /// Another user, in a directory of theirs.
    User {
        /// Their uid.
        uid: u32,
        /// Their gid.
        gid: u32,
        /// The directory the program runs in.
        dir: &'a Path,
    },
}

impl RunAs<'_> {
    /// `program`, to be run as this user.
    fn command(self, program: &Path) -> Command {
        match self {
            RunAs::Tester => Command::new(program),
            RunAs::User { uid, gid, dir } => as_user(uid, gid, program, dir),
        }
    }
}

/// A running `profctl ui` and the link it printed.
struct UiServer {
    child: Child,
    url: String,
    port: u16,
}

impl UiServer {
    /// `profctl [--socket S] ui ARGS --no-open` run as `who`, once it printed its link.
    fn start(who: RunAs<'_>, socket: Option<&Path>, args: &[&str]) -> UiServer {
        let mut cmd = who.command(profctl());
        if let Some(socket) = socket {
            cmd.arg("--socket").arg(socket);
        }
        let mut child = cmd
            .arg("ui")
            .args(args)
            .arg("--no-open")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run profctl ui");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        if !line.starts_with("http://127.0.0.1:") {
            let _ = child.kill();
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("profctl ui printed no link: {line:?}\n{err}");
        }
        let url = line.trim().to_string();
        let port = url["http://127.0.0.1:".len()..]
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        UiServer { child, url, port }
    }
}

impl Drop for UiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `GET path` of the ui server with this Host and Cookie header: (status, body).
fn raw_get(port: u16, path: &str, host: &str, cookie: Option<&str>) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let cookie = cookie.map_or(String::new(), |c| format!("Cookie: profctl_ui={c}\r\n"));
    write!(s, "GET {path} HTTP/1.0\r\nHost: {host}\r\n{cookie}\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// Runs `program args` as `who` and returns its (start, end), UNIX seconds.
fn burst(who: RunAs<'_>, program: &Path, args: &[&str]) -> (f64, f64) {
    let start = unix_now();
    tool(who.command(program).args(args));
    (start, unix_now())
}

/// The names of the frames drawn in the flame graph box `css`.
fn frames(browser: &Browser, css: &str) -> Vec<String> {
    let v = browser.eval(
        "return [...document.querySelectorAll(arguments[0] + ' .fr')].map(e => e.dataset.name);",
        json!([css]),
    );
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap_or_default().to_string())
        .collect()
}

/// Waits until the flame graph was drawn more than `drawn` times; the new count.
fn wait_flame(browser: &Browser, drawn: u64) -> u64 {
    wait_until("the flame graph drawn", Duration::from_secs(60), || {
        let v = browser.eval(
            "return [document.getElementById('flame').dataset.ready, document.getElementById('error').textContent];",
            json!([]),
        );
        let ready: u64 = v[0].as_str().and_then(|s| s.parse().ok()).unwrap_or(0);
        if ready > drawn {
            Ok(ready)
        } else {
            Err(format!("drawn {ready} times; error: {}", v[1]))
        }
    })
}

/// Drags over `(from, to)` (UNIX seconds) of the timeline, scrolled into view first (the
/// page maps pixels to times: the range it selected is read back with [`selected`]).
fn drag_over(browser: &Browser, (from, to): (f64, f64)) {
    let v = browser.eval(
        "const s = document.getElementById('timeline'); s.scrollIntoView({block: 'center'}); const r = s.getBoundingClientRect();
         return [r.left, r.top, r.height, +s.dataset.left, +s.dataset.plotWidth, +s.dataset.since, +s.dataset.until];",
        json!([]),
    );
    let n = |i: usize| v[i].as_f64().unwrap();
    let (left, top, height, plot_left, plot_w, since, until) =
        (n(0), n(1), n(2), n(3), n(4), n(5), n(6));
    // Times outside the timeline (a clock that moved on while it stood still) at its edges.
    let x = |t: f64| left + plot_left + ((t - since) / (until - since)).clamp(0.0, 1.0) * plot_w;
    browser.drag(x(from), x(to), top + height / 2.0);
}

/// The range selected (`base`: the diff's other range), UNIX seconds.
fn selected(browser: &Browser, base: bool) -> Option<(f64, f64)> {
    let v = browser.eval(
        "const d = document.getElementById('range-bar').dataset; return arguments[0] ? [d.baseSince, d.baseUntil] : [d.since, d.until];",
        json!([base]),
    );
    let t = |i: usize| v[i].as_str()?.parse::<f64>().ok();
    Some((t(0)?, t(1)?))
}

/// `profctl top`'s total share of `function` over `since..until` as `who` sees it, percent.
fn top_total_share(
    who: RunAs<'_>,
    socket: &Path,
    (since, until): (f64, f64),
    function: &str,
) -> f64 {
    let out = tool(who.command(profctl()).args([
        "--socket",
        socket.to_str().unwrap(),
        "top",
        "--since",
        &format!("@{since:.3}"),
        "--until",
        &format!("@{until:.3}"),
        "-n",
        "100000",
    ]));
    let row = out
        .lines()
        .find(|l| l.split_whitespace().last() == Some(function))
        .unwrap_or_else(|| panic!("no {function} in profctl top:\n{out}"));
    row.split_whitespace()
        .nth(3)
        .unwrap()
        .trim_end_matches('%')
        .parse()
        .unwrap()
}

/// Types `query` into the search box; the matched share the page shows, percent.
fn search(browser: &Browser, query: &str) -> f64 {
    browser.type_into("#search", query);
    wait_until(
        "the search's matched share",
        Duration::from_secs(30),
        || {
            let v = browser.eval(
            "const m = document.getElementById('matched').dataset; return [m.query, m.percent];",
            json!([]),
        );
            match (v[0].as_str(), v[1].as_str()) {
                (Some(q), Some(p)) if q == query => Ok(p.parse::<f64>().unwrap()),
                _ => Err(format!("{v}")),
            }
        },
    )
}

/// Opens the sandwich of `function` from the top table (sorted by total first, so that a
/// function with no samples of its own is listed); (callers, callees) drawn.
fn sandwich(browser: &Browser, function: &str) -> (Vec<String>, Vec<String>) {
    browser.click("#top th[data-by=\"total\"]");
    wait_until("the top table by total", Duration::from_secs(30), || {
        let v = browser.eval(
            "return !!document.querySelector('#top th.sorted[data-by=\"total\"]') && !!document.querySelector(`#top tr[data-name=\"${arguments[0]}\"]`);",
            json!([function]),
        );
        (v == true)
            .then_some(())
            .ok_or_else(|| format!("{function} not listed yet"))
    });
    browser.click(&format!("#top tr[data-name=\"{function}\"] .open-sandwich"));
    wait_until("the sandwich drawn", Duration::from_secs(30), || {
        let name = browser.eval(
            "const s = document.getElementById('sandwich'); return s.hidden ? null : s.dataset.name;",
            json!([]),
        );
        let (up, down) = (frames(browser, "#callers"), frames(browser, "#callees"));
        if name == function && up.len() > 1 && down.len() > 1 {
            Ok((up, down))
        } else {
            Err(format!("{name}: {up:?} / {down:?}"))
        }
    })
}

/// Every URL the page loaded (navigation and resources), from the browser's timing entries.
fn requested_urls(browser: &Browser) -> Vec<String> {
    let v = browser.eval(
        "return performance.getEntries().filter(e => e.entryType === 'navigation' || e.entryType === 'resource').map(e => e.name);",
        json!([]),
    );
    v.as_array()
        .unwrap()
        .iter()
        .map(|u| u.as_str().unwrap().to_string())
        .collect()
}

/// Keeps the screenshot as `name` beside the test's outputs, and in docs/ when blessing.
fn keep_screenshot(png: &[u8], name: &str) {
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    fs::write(&out, png).unwrap();
    if std::env::var_os("PROFCTL_BLESS").is_some_and(|v| v == "1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs")
            .join(name);
        fs::write(&docs, png).unwrap();
        eprintln!("wrote {}", docs.display());
    } else {
        eprintln!(
            "screenshot: {} (PROFCTL_BLESS=1 writes docs/{name})",
            out.display()
        );
    }
}

#[test]
fn ui_in_a_browser_selects_a_burst_searches_sandwiches_diffs_and_shows_files() {
    // Shared: the user sees only the test's own programs, and what is judged is names and
    // agreement between views of one history, not how many samples a busy machine leaves.
    let _guard = sampling_shared();
    let w = workloads();
    let dir = scratch();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let (uid, gid) = ensure_user(UI_USER);
    let user_dir = dir.path().join("user");
    fs::create_dir(&user_dir).unwrap();
    std::os::unix::fs::chown(&user_dir, Some(uid), Some(gid)).unwrap();
    let user = RunAs::User {
        uid,
        gid,
        dir: &user_dir,
    };
    let config = Daemon::write_config(dir.path(), "");
    let daemon = Daemon::start(&config);
    let socket = daemon.socket.clone();

    // Two programs in turn, two 1-s slices apart (the gap shapes the history).
    let first = burst(user, &w.burner, &["3"]);
    hold(Duration::from_millis(2500));
    let second = burst(user, &w.split, &["4", "measured.txt"]);
    daemon.wait_slices_through(second.1);

    let ui = UiServer::start(user, Some(&socket), &["--since", "1m"]);
    let browser = Browser::start(dir.path());
    browser.goto(&ui.url);
    // Both programs in the timeline.
    wait_until(
        "burner and split in the timeline",
        Duration::from_secs(60),
        || {
            let v = browser.eval(
            "return [...document.querySelectorAll('#timeline rect[data-group]')].map(r => r.dataset.group);",
            json!([]),
        );
            let groups: Vec<&str> = v
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            if groups.contains(&"burner") && groups.contains(&"split") {
                Ok(())
            } else {
                Err(format!("{groups:?}"))
            }
        },
    );
    // No more live refreshes: the times under the pointer stay put.
    browser.click("#live");

    // Drag over split's burst.
    drag_over(&browser, (second.0 + 0.3, second.1 - 0.3));
    let drawn = wait_flame(&browser, 0);
    let range = selected(&browser, false).expect("a range selected");
    assert!(
        range.0 >= first.1 + 1.0 && range.1 <= second.1 + 0.5 && range.1 - range.0 > 2.0,
        "selected {range:?}; split ran {second:?}, the burner {first:?}"
    );
    let names = frames(&browser, "#flame");
    for f in ["split", "work", "hot_a", "hot_b", "mid"] {
        assert!(
            names.iter().any(|n| n == f),
            "{f} not in the flame graph: {names:?}"
        );
    }
    for f in ["burner", "child_hot"] {
        assert!(
            !names.iter().any(|n| n == f),
            "{f} in split's range: {names:?}"
        );
    }
    let flame_ms = browser.eval("return document.body.dataset.flameMs;", json!([]));
    eprintln!(
        "from the end of the drag to the flame graph drawn: {flame_ms} ms ({} frames)",
        names.len()
    );

    // A search's matched share against profctl top of the same range.
    let share = search(&browser, "hot_a");
    let top = top_total_share(user, &socket, range, "hot_a");
    assert!(
        (share - top).abs() <= 2.0,
        "hot_a: matched {share}% in the page, {top}% total in profctl top"
    );
    let highlighted = browser.eval(
        "return [...document.querySelectorAll('#flame .fr.match')].map(e => e.dataset.name);",
        json!([]),
    );
    let highlighted: Vec<&str> = highlighted
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        !highlighted.is_empty() && highlighted.iter().all(|n| *n == "hot_a"),
        "the frames highlighted: {highlighted:?}"
    );
    keep_screenshot(&browser.screenshot(), "ui.png");

    // The sandwich of `work`: main calls it, it calls hot_a and mid.
    let (callers, callees) = sandwich(&browser, "work");
    assert!(callers.iter().any(|n| n == "main"), "callers: {callers:?}");
    for f in ["hot_a", "mid"] {
        assert!(callees.iter().any(|n| n == f), "callees: {callees:?}");
    }
    assert!(!callees.iter().any(|n| n == "main"), "callees: {callees:?}");

    // The burner's burst as the diff's other range: hot_a grew (from nothing).
    browser.click("#compare");
    drag_over(&browser, (first.0 + 0.3, first.1 - 0.3));
    let base = wait_until("the diff's range", Duration::from_secs(10), || {
        selected(&browser, true).ok_or_else(|| "none".to_string())
    });
    assert!(
        base.1 <= second.0,
        "the compared range {base:?} is the burner's {first:?}"
    );
    wait_until("hot_a marked grown", Duration::from_secs(60), || {
        let v = browser.eval(
            "return [...document.querySelectorAll('#flame .fr.grown')].map(e => e.dataset.name);",
            json!([]),
        );
        let grown: Vec<&str> = v
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if grown.contains(&"hot_a") {
            Ok(())
        } else {
            Err(format!("grown: {grown:?}"))
        }
    });
    let _ = drawn;

    // Only the session's requests, on a loopback Host, are served; nothing else was asked.
    let cookie = browser.cookie("profctl_ui");
    let host = format!("127.0.0.1:{}", ui.port);
    assert_eq!(raw_get(ui.port, "/api/info", &host, Some(&cookie)).0, 200);
    let (status, body) = raw_get(ui.port, "/api/info", &host, None);
    assert_eq!(status, 403, "{body}");
    let (status, body) = raw_get(ui.port, "/api/info", "rebound.example:80", Some(&cookie));
    assert_eq!(status, 403, "{body}");
    let token_path = &ui.url[format!("http://{host}").len()..];
    assert_eq!(
        raw_get(ui.port, token_path, &host, None).0,
        403,
        "the token is spent"
    );
    let (_, page) = raw_get(ui.port, "/", &host, Some(&cookie));
    assert!(
        page.contains("content-security-policy: default-src 'none'"),
        "{page}"
    );
    let urls = requested_urls(&browser);
    assert!(urls.len() >= 4, "{urls:?}");
    for url in &urls {
        assert!(
            url.starts_with(&format!("http://{host}/")),
            "a request outside 127.0.0.1: {url}"
        );
    }

    // The same range as a pprof file, shown without the daemon.
    let pb = user_dir.join("x.pb.gz");
    tool(user.command(profctl()).args([
        "--socket",
        socket.to_str().unwrap(),
        "flamegraph",
        "--since",
        &format!("@{:.3}", range.0),
        "--until",
        &format!("@{:.3}", range.1),
        "-o",
        pb.to_str().unwrap(),
    ]));
    daemon.stop();
    let files = UiServer::start(RunAs::Tester, None, &["--input", pb.to_str().unwrap()]);
    browser.goto(&files.url);
    wait_flame(&browser, 0);
    let file_names = frames(&browser, "#flame");
    // (No command names at the roots: the daemon's pprof has samples without a comm label,
    // and profctl roots a pprof file's stacks at command names only when every sample has
    // one.)
    for f in ["main", "work", "hot_a", "hot_b"] {
        assert!(
            file_names.iter().any(|n| n == f),
            "{f} not in the file's flame graph: {file_names:?}"
        );
    }
    let file_share = search(&browser, "hot_a");
    assert!(
        (file_share - share).abs() <= 1.0,
        "hot_a: {file_share}% of the file, {share}% of the range"
    );
    let rows = browser.eval(
        "return [...document.querySelectorAll('#top tbody tr')].map(r => r.dataset.name);",
        json!([]),
    );
    assert!(
        rows.as_array().unwrap().iter().any(|r| r == "hot_a"),
        "{rows}"
    );
    let (callers, callees) = sandwich(&browser, "work");
    assert!(callers.iter().any(|n| n == "main"), "callers: {callers:?}");
    assert!(callees.iter().any(|n| n == "hot_a"), "callees: {callees:?}");
}

/// `profctl ui --input` over two folded files of known counts (no daemon, no sampling): the
/// flame graph, the exact matched share, the top table's order and a click that focuses the
/// flame graph, the sandwich, the diff of the two files (grown and shrunk marked), and the
/// page's guard.
#[test]
fn ui_in_a_browser_shows_files_exactly() {
    let dir = scratch();
    let after = dir.path().join("after.folded");
    let before = dir.path().join("before.folded");
    fs::write(
        &after,
        "split;main;work;hot_a 600\nsplit;main;work;mid;hot_b 300\nsplit;main;hot_c 100\n",
    )
    .unwrap();
    fs::write(&before, "split;main;work;hot_a 100\nsplit;main;hot_c 900\n").unwrap();
    let ui = UiServer::start(
        RunAs::Tester,
        None,
        &["--input", after.to_str().unwrap(), before.to_str().unwrap()],
    );
    let browser = Browser::start(dir.path());
    browser.goto(&ui.url);
    wait_flame(&browser, 0);
    let names = frames(&browser, "#flame");
    for f in [
        "all", "split", "main", "work", "hot_a", "mid", "hot_b", "hot_c",
    ] {
        assert!(names.iter().any(|n| n == f), "{f}: {names:?}");
    }
    assert_eq!(search(&browser, "hot_"), 100.0);
    assert_eq!(search(&browser, "hot_b"), 30.0);
    let rows = browser.eval(
        "return [...document.querySelectorAll('#top tbody tr')].map(r => [r.dataset.name, r.cells[0].textContent, r.cells[1].textContent]);",
        json!([]),
    );
    assert_eq!(rows[0], json!(["hot_a", "60.00%", "60.00%"]), "{rows}");
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .any(|r| r == &json!(["work", "0.00%", "90.00%"])),
        "{rows}"
    );
    // A click on a function focuses the flame graph on it: its callees from every call.
    let drawn = browser.eval(
        "return +document.getElementById('flame').dataset.ready;",
        json!([]),
    );
    browser.click("#top tr[data-name=\"work\"] td.fn");
    wait_flame(&browser, drawn.as_u64().unwrap());
    let focused = frames(&browser, "#flame");
    assert!(
        focused.iter().any(|n| n == "hot_a") && !focused.iter().any(|n| n == "hot_c"),
        "{focused:?}"
    );
    browser.click("#focus-note button");
    let (callers, callees) = sandwich(&browser, "work");
    assert!(
        callers.contains(&"main".to_string()) && callers.contains(&"split".to_string()),
        "{callers:?}"
    );
    assert!(
        callees.contains(&"mid".to_string()) && !callees.contains(&"hot_c".to_string()),
        "{callees:?}"
    );
    // The second file as the diff's other side: hot_a grew (10% -> 60%), hot_c shrank.
    browser.eval(
        "const s = document.getElementById('base-file'); s.value = '1'; s.dispatchEvent(new Event('change'));",
        json!([]),
    );
    wait_until("the diff marked", Duration::from_secs(30), || {
        let v = browser.eval(
            "return [[...document.querySelectorAll('#flame .fr.grown')].map(e => e.dataset.name), [...document.querySelectorAll('#flame .fr.shrunk')].map(e => e.dataset.name)];",
            json!([]),
        );
        if v[0].as_array().unwrap().contains(&json!("hot_a"))
            && v[1].as_array().unwrap().contains(&json!("hot_c"))
        {
            Ok(())
        } else {
            Err(format!("{v}"))
        }
    });
    keep_screenshot(&browser.screenshot(), "ui-files.png");
    let host = format!("127.0.0.1:{}", ui.port);
    assert_eq!(raw_get(ui.port, "/api/info", &host, None).0, 403);
    let cookie = browser.cookie("profctl_ui");
    assert_eq!(
        raw_get(
            ui.port,
            "/api/info",
            "localhost.rebound.example",
            Some(&cookie)
        )
        .0,
        403
    );
    let (status, body) = raw_get(ui.port, "/api/top?file=7", &host, Some(&cookie));
    assert!(
        status == 400 && body.contains("file must be below 2"),
        "{body}"
    );
    for url in requested_urls(&browser) {
        assert!(url.starts_with(&format!("http://{host}/")), "{url}");
    }
}

/// A benchmark driven by bench/ui.sh (by hand, `--ignored`): `profctl ui` on the daemon at
/// `PROFCTL_UI_BENCH_SOCKET`, a drag over the last hour of its timeline, and the page's own
/// figure from the end of the drag to the flame graph drawn, printed (`drag to flame graph:
/// N ms`), `PROFCTL_UI_BENCH_RUNS` times (5), each a range of its own. It judges no time.
/// It is ignored because it has nothing to run on by itself, not to save time: the hour of
/// a busy history it measures is what bench/ui.sh records and builds (churn.c at 999 Hz,
/// then an hour of slices); the browser tests above run in every `cargo test`.
#[test]
#[ignore = "a figure for bench/ui.sh, on a history it makes"]
fn ui_drag_to_flame_time() {
    let socket = PathBuf::from(
        std::env::var_os("PROFCTL_UI_BENCH_SOCKET")
            .expect("PROFCTL_UI_BENCH_SOCKET: the daemon's socket"),
    );
    let runs: u64 = std::env::var("PROFCTL_UI_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let dir = scratch();
    let ui = UiServer::start(RunAs::Tester, Some(&socket), &["--since", "65m"]);
    let browser = Browser::start(dir.path());
    browser.goto(&ui.url);
    wait_until("the timeline drawn", Duration::from_secs(120), || {
        let n = browser.eval(
            "return document.querySelectorAll('#timeline rect[data-group]').length;",
            json!([]),
        );
        if n.as_u64() > Some(0) {
            Ok(())
        } else {
            Err(format!("{n}"))
        }
    });
    browser.click("#live");
    let mut drawn = 0;
    for run in 0..runs {
        browser.eval("delete document.body.dataset.flameMs;", json!([]));
        let now = unix_now();
        drag_over(&browser, (now - 3600.0 - run as f64, now - 1.0));
        drawn = wait_flame(&browser, drawn);
        let ms = wait_until("the page's figure", Duration::from_secs(60), || {
            let v = browser.eval("return document.body.dataset.flameMs;", json!([]));
            v.as_str().map(str::to_string).ok_or_else(|| format!("{v}"))
        });
        let range = selected(&browser, false).expect("a range");
        let frames = frames(&browser, "#flame").len();
        println!(
            "drag to flame graph: {ms} ms ({:.0} s selected, {frames} frames)",
            range.1 - range.0
        );
    }
}
