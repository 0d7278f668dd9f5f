//! A debuginfod server that answers slowly must not slow down draining.
//!
//! A fake server on 127.0.0.1 holds every answer for [`ANSWER_DELAY`] before sending the debug
//! file. `profctl record -v --window 1` samples a stripped workload whose debug info (symbols,
//! DWARF and its call-frame information: it is built with `-fno-asynchronous-unwind-tables`, so
//! the unwinders look for its debug file too) is only on that server. Windows are named while
//! recording goes on, so the fetch starts a few seconds in and overlaps sampling. The drain
//! thread must not wait for it: no sample is lost, and no drain round lasts longer than
//! [`LONGEST_ROUND`]. Were the debug-file lookup or the symbolization done on the drain thread,
//! one round would last the server's delay, and the rings (8 MiB each, about half a second of
//! samples with 16 KiB stack copies) would overflow.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::common::*;

/// How long the fake server holds every answer.
const ANSWER_DELAY: Duration = Duration::from_secs(3);
/// The bound on every drain round (`longest … ms` in the `-v` summary): about the time the
/// quarter of a ring above its wake-up watermark takes to fill at 999 Hz with 16 KiB stack
/// copies (see docs/architecture.md, the drain loop). Rounds take a few milliseconds in a
/// debug build (under 20 ms with two CPU burners beside the workload on 2 CPUs); waiting for
/// the server would take [`ANSWER_DELAY`].
const LONGEST_ROUND: Duration = Duration::from_millis(100);
/// Workload CPU seconds. The first window (0-1 s) closes about 3 s in (its end plus the close
/// grace of two drain intervals), and its naming waits [`ANSWER_DELAY`] for the server: the
/// recording must still be sampling then.
const SECONDS: &str = "7";
/// At least this much of the server's delay must fall within the recording (else the test
/// would prove nothing).
const OVERLAP: Duration = Duration::from_secs(1);

/// No frame pointers and no `.eh_frame` for the program's code: call-frame information is in
/// `.debug_frame`, which goes to the debug file with the rest.
const CFLAGS: &[&str] = &[
    "-O2",
    "-g",
    "-fomit-frame-pointer",
    "-fno-asynchronous-unwind-tables",
    "-fno-unwind-tables",
    "-Wall",
    "-Wl,--build-id",
];

fn workload() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("profctl-slow-debuginfod");
        fs::create_dir_all(&dir).expect("create workload dir");
        let bin = dir.join("symwork_cfi");
        compile_with("symwork.c", &bin, CFLAGS, &[]);
        bin
    })
}

/// A stripped copy of the workload at `bin` (no symbols, no DWARF, no `.debug_frame`, no
/// debuglink) and its debug file's bytes; the build-id in hex.
fn stripped_copy(bin: &Path) -> (Vec<u8>, String) {
    fs::copy(workload(), bin).expect("copy the workload");
    let debug = bin.with_extension("debug");
    tool(
        Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(bin)
            .arg(&debug),
    );
    tool(Command::new("strip").arg("--strip-all").arg(bin));
    let sections = tool(Command::new("readelf").arg("-SW").arg(bin));
    for gone in [" .symtab ", ".debug_info", ".debug_frame", ".gnu_debuglink"] {
        assert!(
            !sections.contains(gone),
            "{gone} is still in {}:\n{sections}",
            bin.display()
        );
    }
    let notes = tool(Command::new("readelf").arg("-n").arg(bin));
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{} has no build-id:\n{notes}", bin.display()))
        .trim()
        .to_string();
    let bytes = fs::read(&debug).expect("read the debug file");
    fs::remove_file(&debug).expect("remove the local debug file");
    (bytes, build_id)
}

/// A debuginfod server that serves one debug file, each answer after `delay`.
struct SlowServer {
    port: u16,
    /// When each request arrived (since the server started), and its path.
    requests: Arc<Mutex<Vec<(Duration, String)>>>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl SlowServer {
    fn start(build_id: &str, debug_file: Vec<u8>, delay: Duration) -> SlowServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let port = listener.local_addr().unwrap().port();
        let requests: Arc<Mutex<Vec<(Duration, String)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(debug_file);
        let wanted = format!("/buildid/{build_id}/debuginfo");
        let started = Instant::now();
        let acceptor = {
            let (requests, stop) = (requests.clone(), stop.clone());
            thread::spawn(move || {
                // Blocking accepts; Drop wakes the last one with a connection of its own.
                while !stop.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok(_) if stop.load(Ordering::Relaxed) => break,
                        Ok((stream, _)) => {
                            let (requests, served, wanted) =
                                (requests.clone(), served.clone(), wanted.clone());
                            thread::spawn(move || {
                                answer(stream, started, &requests, &wanted, &served, delay)
                            });
                        }
                        Err(_) => break,
                    }
                }
            })
        };
        SlowServer {
            port,
            requests,
            stop,
            acceptor: Some(acceptor),
        }
    }

    fn requests(&self) -> Vec<(Duration, String)> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for SlowServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

/// Reads one HTTP request, waits `delay`, then answers with `body` if it asks for `wanted`,
/// else 404.
fn answer(
    mut stream: TcpStream,
    started: Instant,
    requests: &Mutex<Vec<(Duration, String)>>,
    wanted: &str,
    body: &[u8],
    delay: Duration,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&head);
    let path = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("")
        .to_string();
    requests
        .lock()
        .unwrap()
        .push((started.elapsed(), path.clone()));
    // The server's slowness: its answer comes `delay` after the request.
    hold(delay);
    let _ = if path == wanted {
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .and_then(|()| stream.write_all(body))
    } else {
        stream
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
    };
    let _ = stream.flush();
}

/// `L` of the summary line `profctl: N samples in …, L lost, T throttled`.
fn lost(stderr: &str) -> Option<u64> {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("profctl: ") && l.contains(" samples in "))?;
    line.split(", ")
        .find_map(|part| part.strip_suffix(" lost"))?
        .trim()
        .parse()
        .ok()
}

/// `X` of the summary line `profctl: N samples in X s (…), …`.
fn recorded(stderr: &str) -> Option<Duration> {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("profctl: ") && l.contains(" samples in "))?;
    let secs: f64 = line
        .split_once(" samples in ")?
        .1
        .split_once(" s ")?
        .0
        .parse()
        .ok()?;
    Some(Duration::from_secs_f64(secs))
}

/// The longest drain round of the `-v` summary line `profctl: own CPU … (longest X ms) …`.
fn longest_round(stderr: &str) -> Option<Duration> {
    let line = stderr.lines().find(|l| l.starts_with("profctl: own CPU"))?;
    let ms: f64 = line
        .split_once("(longest ")?
        .1
        .split_once(" ms)")?
        .0
        .parse()
        .ok()?;
    Some(Duration::from_secs_f64(ms / 1e3))
}

#[test]
fn summary_figures_parse() {
    let stderr = "profctl: 6993 samples in 7.0 s (cpu-clock at 999 Hz, with kernel frames), 0 lost, 0 throttled\n\
                  profctl: own CPU 80.1 ms (60.0 ms user, 20.1 ms system), 20 drain rounds (longest 12.5 ms), 50 + 9 context switches, 800 page faults\n";
    assert_eq!(lost(stderr), Some(0));
    assert_eq!(recorded(stderr), Some(Duration::from_secs(7)));
    assert_eq!(longest_round(stderr), Some(Duration::from_micros(12_500)));
    assert_eq!(
        lost("profctl: 1 samples in 1.0 s (x), 12 lost, 0 throttled"),
        Some(12)
    );
    assert_eq!(
        longest_round("profctl: own CPU 1 ms, 2 drain rounds, …"),
        None
    );
}

#[test]
fn slow_debuginfod_does_not_stall_draining() {
    let _lock = sampling_lock();
    let dir = scratch();
    let bin = dir.path().join("sw_slowdinf");
    let (debug_file, build_id) = stripped_copy(&bin);
    let server = SlowServer::start(&build_id, debug_file, ANSWER_DELAY);
    let folded = dir.path().join("out.folded");
    let mut cmd = Command::new(profctl());
    cmd.current_dir(dir.path())
        .env(
            "DEBUGINFOD_URLS",
            format!("http://127.0.0.1:{}", server.port),
        )
        .env("DEBUGINFOD_CACHE_PATH", dir.path().join("cache"))
        .args(["record", "-v", "-F", FREQ, "--window", "1", "--folded"])
        .arg(&folded)
        .arg("--")
        .arg(&bin)
        .arg(SECONDS);
    let started = Instant::now();
    let run = Spawned::spawn(cmd, "profctl record").wait_or_panic(Duration::from_secs(90));
    let elapsed = started.elapsed();
    run.assert_success("profctl record against a slow debuginfod");
    let requests = server.requests();
    drop(server);
    let context = format!(
        "profctl ran {elapsed:.1?}; server requests (time since start, path): {requests:?}\n\
         --- profctl stderr ---\n{}",
        run.stderr
    );

    // The premise: windows were named while recording went on, and their naming asked the
    // slow server early enough for its delay to overlap sampling.
    let windows = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("profctl: window "))
        .count();
    assert!(windows >= 5, "only {windows} window lines\n{context}");
    let wanted = format!("/buildid/{build_id}/debuginfo");
    let first_ask = requests
        .iter()
        .find(|(_, path)| *path == wanted)
        .map(|(at, _)| *at);
    // Measured from the server's start, a little before profctl's: an overestimate.
    let recorded = recorded(&run.stderr)
        .unwrap_or_else(|| panic!("no `N samples in X s` summary line\n{context}"));
    assert!(
        first_ask.is_some_and(|at| at + OVERLAP <= recorded),
        "the server was not asked for {wanted} at least {OVERLAP:?} before the recording \
         ({recorded:?}) ended\n{context}"
    );
    // And it answered: the workload's functions are named from the served debug file.
    let stacks = read_folded(&folded);
    assert!(
        frame_count(&stacks, "sw_slowdinf", "hot") > 0,
        "no sample of sw_slowdinf is named `hot`: the served debug file was not used\n\
         top folded lines:\n{}\n{context}",
        top_lines(&stacks, 10)
    );

    // The point: the drain thread never waited for the server.
    assert_eq!(
        lost(&run.stderr),
        Some(0),
        "samples were lost while debuginfod was slow (or no summary line)\n{context}"
    );
    let longest = longest_round(&run.stderr)
        .unwrap_or_else(|| panic!("no `(longest … ms)` in the -v summary\n{context}"));
    assert!(
        longest <= LONGEST_ROUND,
        "a drain round took {longest:?} (bound {LONGEST_ROUND:?}) while debuginfod answered \
         after {ANSWER_DELAY:?}: something waited for it on the drain thread\n{context}"
    );
    eprintln!(
        "slow debuginfod: longest drain round {longest:?} (bound {LONGEST_ROUND:?}), \
         server asked {:?} after start",
        first_ask.unwrap_or_default()
    );
}
