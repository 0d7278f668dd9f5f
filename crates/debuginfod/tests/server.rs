//! Integration tests against elfutils' real `debuginfod` server on loopback,
//! plus small fake servers for the failure cases.
//!
//! Needs the `debuginfod` Debian package (and `cc`, `objcopy`); the tests fail,
//! not skip, when it is missing.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use debuginfod::{Artifact, Client, DebuginfodConfig, FetchError};
use object::Object;

/// Fails the test with an install hint when `tool` is not on PATH.
fn require_tool(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "`{tool}` not found on PATH: install the `{package}` package \
         (apt-get install {package}); CI installs it"
    );
}

fn run(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The URL of a port nothing listens on: on 127.0.0.2, where no other test of this file
/// binds, so that a port freed here cannot be taken by a fake server running beside it
/// (they bind 127.0.0.1, and the kernel may hand out the same port number).
fn closed_url() -> String {
    let l = TcpListener::bind("127.0.0.2:0").unwrap();
    format!("http://127.0.0.2:{}", l.local_addr().unwrap().port())
}

fn build_id_of(path: &Path) -> Vec<u8> {
    let data = fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.build_id().unwrap().expect("no build-id note").to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A C program compiled with `-g`, and its debug info split off with
/// `objcopy --only-keep-debug` into `<dir>/debug/`.
struct Fixture {
    dir: tempfile::TempDir,
    debug_file: PathBuf,
    build_id: Vec<u8>,
}

fn fixture() -> Fixture {
    require_tool("cc", "gcc");
    require_tool("objcopy", "binutils");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("hello.c");
    fs::write(
        &src,
        "#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n",
    )
    .unwrap();
    let exe = dir.path().join("hello");
    run(Command::new("cc")
        .args(["-g", "-O0", "-Wl,--build-id", "-o"])
        .arg(&exe)
        .arg(&src));
    let debug_dir = dir.path().join("debug");
    fs::create_dir(&debug_dir).unwrap();
    let debug_file = debug_dir.join("hello.debug");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&exe)
        .arg(&debug_file));
    let build_id = build_id_of(&exe);
    assert_eq!(build_id_of(&debug_file), build_id);
    Fixture {
        dir,
        debug_file,
        build_id,
    }
}

/// A running `debuginfod` child; killed on drop.
struct Server {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `debuginfod` scanning `<fixture>/debug` and waits until it
    /// serves the fixture's build-id (bounded: ~20 s).
    fn start(fx: &Fixture) -> Server {
        require_tool("debuginfod", "debuginfod");
        let port = free_port();
        let log = fx.dir.path().join("server.log");
        let log_file = fs::File::create(&log).unwrap();
        let child = Command::new("debuginfod")
            .arg("-p")
            .arg(port.to_string())
            .arg("-F")
            .arg("-d")
            .arg(fx.dir.path().join("db.sqlite"))
            .args(["-t", "1", "-g", "0"])
            .arg(fx.dir.path().join("debug"))
            // Keep the server from federating to servers named in our env.
            .env_remove("DEBUGINFOD_URLS")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .expect("cannot start debuginfod");
        let mut server = Server {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        };

        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .into();
        let base = server.url.clone();
        let status = |path: &str| {
            agent
                .get(format!("{base}{path}"))
                .call()
                .ok()
                .map(|r| r.status().as_u16())
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while status("/metrics") != Some(200) {
            server.check_alive();
            assert!(
                Instant::now() < deadline,
                "debuginfod did not answer /metrics within 20 s"
            );
            thread::sleep(Duration::from_millis(100));
        }
        let path = format!("/buildid/{}/debuginfo", hex(&fx.build_id));
        while status(&path) != Some(200) {
            server.check_alive();
            assert!(
                Instant::now() < deadline,
                "debuginfod did not index the fixture within 20 s; log:\n{}",
                fs::read_to_string(&server.log).unwrap_or_default()
            );
            thread::sleep(Duration::from_millis(100));
        }
        server
    }

    fn check_alive(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!(
                "debuginfod exited early ({status}); log:\n{}",
                fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }

    /// Number of requests for `needle` in the server's log.
    fn requests_for(&self, needle: &str) -> usize {
        fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" GET ") && l.contains(needle))
            .count()
    }
}

fn config(urls: Vec<String>, cache_dir: &Path, timeout: Duration) -> DebuginfodConfig {
    DebuginfodConfig {
        urls,
        cache_dir: cache_dir.to_owned(),
        timeout,
        connect_timeout: Duration::from_secs(2),
    }
}

#[test]
fn fetch_from_real_server_then_from_cache() {
    let fx = fixture();
    let server = Server::start(&fx);
    let cache = tempfile::tempdir().unwrap();
    // A dead server first: the client must move on to the next URL.
    let dead = closed_url();
    let client = Client::new(config(
        vec![dead, format!("{}/", server.url)],
        cache.path(),
        Duration::from_secs(10),
    ));

    assert_eq!(client.cached(&fx.build_id, Artifact::DebugInfo), None);
    let path = client
        .fetch(&fx.build_id, Artifact::DebugInfo)
        .expect("fetch");
    assert_eq!(path, cache.path().join(hex(&fx.build_id)).join("debuginfo"));
    assert_eq!(build_id_of(&path), fx.build_id);
    assert_eq!(fs::read(&path).unwrap(), fs::read(&fx.debug_file).unwrap());
    assert_eq!(
        client.cached(&fx.build_id, Artifact::DebugInfo),
        Some(path.clone())
    );
    // No temporary files left behind.
    let entries: Vec<_> = fs::read_dir(path.parent().unwrap()).unwrap().collect();
    assert_eq!(entries.len(), 1, "{entries:?}");

    // With the server gone, the cache answers.
    drop(server);
    let again = client
        .fetch(&fx.build_id, Artifact::DebugInfo)
        .expect("cached fetch");
    assert_eq!(again, path);
}

#[test]
fn unknown_build_id_is_not_found_and_negatively_cached() {
    let fx = fixture();
    let server = Server::start(&fx);
    let cache = tempfile::tempdir().unwrap();
    let client = Client::new(config(
        vec![server.url.clone()],
        cache.path(),
        Duration::from_secs(10),
    ));
    let unknown = [0xde, 0xad, 0xbe, 0xef, 0x00, 0x11, 0x22, 0x33];
    let unknown_hex = hex(&unknown);

    match client.fetch(&unknown, Artifact::DebugInfo) {
        Err(FetchError::NotFound { build_id }) => assert_eq!(build_id, unknown_hex),
        other => panic!("expected NotFound, got {other:?}"),
    }
    let marker = cache.path().join(&unknown_hex).join("debuginfo");
    let meta = fs::metadata(&marker).expect("negative cache marker");
    assert_eq!(meta.len(), 0);
    assert_eq!(client.cached(&unknown, Artifact::DebugInfo), None);

    // The server saw exactly one request (its log line may lag the response).
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.requests_for(&unknown_hex) < 1 && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(server.requests_for(&unknown_hex), 1);

    // Second call: answered from the negative cache, no request.
    let err = client.fetch(&unknown, Artifact::DebugInfo).unwrap_err();
    assert!(matches!(err, FetchError::NotFound { .. }), "{err:?}");
    assert!(err.to_string().contains(&unknown_hex), "{err}");
    thread::sleep(Duration::from_millis(300));
    assert_eq!(server.requests_for(&unknown_hex), 1);

    // Even with the server gone it is still NotFound, not a connect error.
    drop(server);
    let err = client.fetch(&unknown, Artifact::DebugInfo).unwrap_err();
    assert!(matches!(err, FetchError::NotFound { .. }), "{err:?}");

    // An expired marker is ignored: the client asks again (and now fails to connect).
    fs::set_permissions(&marker, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let old = std::time::SystemTime::now() - Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(&marker)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let err = client.fetch(&unknown, Artifact::DebugInfo).unwrap_err();
    assert!(matches!(err, FetchError::Connect { .. }), "{err:?}");
}

#[test]
fn server_down_is_a_quick_connect_error() {
    let cache = tempfile::tempdir().unwrap();
    let url = closed_url();
    let client = Client::new(config(
        vec![url.clone()],
        cache.path(),
        Duration::from_secs(10),
    ));
    let start = Instant::now();
    let err = client
        .fetch(&[1, 2, 3, 4], Artifact::Executable)
        .unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}",
        start.elapsed()
    );
    match &err {
        FetchError::Connect { url: u, .. } => assert!(u.starts_with(&url), "{u}"),
        other => panic!("expected Connect, got {other:?}"),
    }
    assert!(err.to_string().contains(&url), "{err}");
    // Failures other than 404 are not negatively cached.
    assert!(!cache.path().join("01020304").join("executable").exists());
}

/// Runs `handle` on every connection to a loopback listener, in a thread that
/// stops by itself after `life`. Returns the URL.
fn fake_server(life: Duration, handle: fn(TcpStream, Instant)) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    thread::spawn(move || {
        let end = Instant::now() + life;
        while Instant::now() < end {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false).unwrap();
                    thread::spawn(move || handle(stream, end));
                }
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    url
}

#[test]
fn silent_server_times_out() {
    let url = fake_server(Duration::from_secs(8), |stream, end| {
        // Accept, never answer; hold the connection open until the end.
        let _keep = stream;
        thread::sleep(end.saturating_duration_since(Instant::now()));
    });
    let cache = tempfile::tempdir().unwrap();
    let client = Client::new(config(
        vec![url.clone()],
        cache.path(),
        Duration::from_secs(1),
    ));
    let start = Instant::now();
    let err = client.fetch(&[0xab; 20], Artifact::DebugInfo).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, FetchError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains(&url), "{err}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[test]
fn trickling_body_times_out_and_leaves_no_file() {
    let url = fake_server(Duration::from_secs(8), |mut stream, end| {
        let mut buf = [0u8; 1024];
        let _ = stream.read(&mut buf);
        let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n\x7fELF");
        while Instant::now() < end && stream.write_all(b"x").is_ok() {
            thread::sleep(Duration::from_millis(100));
        }
    });
    let cache = tempfile::tempdir().unwrap();
    let client = Client::new(config(vec![url], cache.path(), Duration::from_secs(1)));
    let start = Instant::now();
    let err = client.fetch(&[0xcd; 20], Artifact::DebugInfo).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, FetchError::Timeout { .. }), "{err:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
    let dir = cache.path().join(hex(&[0xcd; 20]));
    let left: Vec<_> = fs::read_dir(&dir).map(|d| d.collect()).unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn non_elf_body_is_rejected() {
    let url = fake_server(Duration::from_secs(5), |mut stream, _| {
        let mut buf = [0u8; 1024];
        let _ = stream.read(&mut buf);
        let _ = stream.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\nConnection: close\r\n\r\n<html>hi</html>",
        );
    });
    let cache = tempfile::tempdir().unwrap();
    let client = Client::new(config(vec![url], cache.path(), Duration::from_secs(5)));
    let err = client.fetch(&[0xef; 20], Artifact::DebugInfo).unwrap_err();
    assert!(matches!(err, FetchError::Transfer { .. }), "{err:?}");
    assert_eq!(client.cached(&[0xef; 20], Artifact::DebugInfo), None);
}

/// Serves `body` as a 200 answer to one request on `stream`.
fn answer(mut stream: TcpStream, body: &[u8]) {
    let mut buf = [0u8; 1024];
    let _ = stream.read(&mut buf);
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
}

/// Issue 11, item 11: a server answering with a real ELF file of another build-id (garbage
/// for this request) is refused, and nothing is kept or reported as fetched.
#[test]
fn a_file_with_another_build_id_is_refused() {
    let url = fake_server(Duration::from_secs(5), |stream, _| {
        answer(stream, &fs::read("/bin/true").unwrap());
    });
    let cache = tempfile::tempdir().unwrap();
    let client = Client::new(config(
        vec![url.clone()],
        cache.path(),
        Duration::from_secs(5),
    ));
    let err = client.fetch(&[0x11; 20], Artifact::DebugInfo).unwrap_err();
    match &err {
        FetchError::WrongBuildId {
            expected, found, ..
        } => {
            assert_eq!(expected, &hex(&[0x11; 20]));
            assert_eq!(found, &hex(&build_id_of(Path::new("/bin/true"))));
        }
        other => panic!("expected WrongBuildId, got {other:?}"),
    }
    assert!(err.to_string().contains(&url), "{err}");
    assert_eq!(client.cached(&[0x11; 20], Artifact::DebugInfo), None);
    let dir = cache.path().join(hex(&[0x11; 20]));
    let left: Vec<_> = fs::read_dir(&dir).map(|d| d.collect()).unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// Issue 11, item 11: a body over the client's bound is refused as it streams in, and
/// nothing of it is kept.
#[test]
fn an_oversized_body_is_refused() {
    let url = fake_server(Duration::from_secs(5), |stream, _| {
        let mut body = b"\x7fELF".to_vec();
        body.resize(3 << 20, 0);
        answer(stream, &body);
    });
    let cache = tempfile::tempdir().unwrap();
    let mut client = Client::new(config(vec![url], cache.path(), Duration::from_secs(5)));
    client.set_max_bytes(1 << 20);
    let err = client.fetch(&[0x22; 20], Artifact::DebugInfo).unwrap_err();
    assert!(
        matches!(err, FetchError::TooLarge { limit, .. } if limit == 1 << 20),
        "{err:?}"
    );
    assert_eq!(client.cached(&[0x22; 20], Artifact::DebugInfo), None);
    let dir = cache.path().join(hex(&[0x22; 20]));
    let left: Vec<_> = fs::read_dir(&dir).map(|d| d.collect()).unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}
