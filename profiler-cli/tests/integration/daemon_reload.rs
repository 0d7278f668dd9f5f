//! The configuration in effect is one for every listener: a bound lowered by SIGHUP
//! (`api.max_response_bytes`) is applied at once by the Unix socket API and by the scrape
//! listener alike, as docs/daemon.md says. (And a request's absurd `?wait=` is capped, not a
//! panic.)

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;
use crate::daemon::{unix_now, Daemon};
use crate::daemon_ops::write_ops_config;
use crate::daemon_serve::free_port;

/// The status code and body of `GET path`, over the Unix socket or TCP.
fn get_status(stream: &mut dyn ReadWrite, path: &str) -> (u16, Vec<u8>) {
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).unwrap();
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP answer to {path}: {bytes:?}"));
    let head = String::from_utf8_lossy(&bytes[..end]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, bytes[end + 4..].to_vec())
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// The status code and body of `GET path` over the daemon's socket.
pub(crate) fn socket_get(socket: &Path, path: &str) -> (u16, Vec<u8>) {
    let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(scaled(Duration::from_secs(60))))
        .unwrap();
    get_status(&mut s, path)
}

fn scrape_get(port: u16, path: &str) -> (u16, Vec<u8>) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(scaled(Duration::from_secs(60))))
        .unwrap();
    get_status(&mut s, path)
}

/// The test's configuration: 499 Hz in 1-s slices, the budget out of the way, the scrape
/// listener on `port`, and `api_extra` in `[api]`.
fn write_config(config: &Path, dir: &Path, port: u16, api_extra: &str) {
    write_ops_config(
        config,
        dir,
        "frequency = 499\nslice = \"1s\"\n",
        &format!(
            "{api_extra}\n[budget]\nmax_cpu_percent = 10000\n\n[scrape]\nlisten = \"127.0.0.1:{port}\"\nallow_unauthenticated = true\n"
        ),
    );
}

#[test]
fn daemon_reload_lowers_the_response_bound_for_the_socket_api_and_the_scrape_listener() {
    let _guard = sampling_shared();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = dir.path().join("profilerd.toml");
    write_config(&config, dir.path(), port, "");
    let daemon = Daemon::start(&config);

    // A few seconds of a busy process, so that both answers hold some kilobytes: it runs
    // until the slices through its first 3 s are written.
    let mut busy = Command::new("sh");
    busy.args(["-c", "while :; do :; done"]);
    let busy = Spawned::spawn(busy, "spinner");
    let started = unix_now();
    daemon.wait_slices_through(started + 3.0);
    drop(busy);

    let folded = format!("/v1/folded?since={}", started - 1.0);
    let scrape = "/debug/pprof/profile?seconds=10&past=1";
    let (status, body) = socket_get(&daemon.socket, &folded);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(
        body.len() > 100,
        "a small folded answer: {} bytes",
        body.len()
    );
    let (status, body) = scrape_get(port, scrape);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert!(body.len() > 100, "a small scrape: {} bytes", body.len());

    // A wait too long for a Duration is capped, not a panic that drops the connection.
    let (status, body) = socket_get(&daemon.socket, "/v1/recordings/12345?wait=1e20");
    assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));

    // The bound lowered below both answers, then SIGHUP.
    write_config(&config, dir.path(), port, "max_response_bytes = \"64B\"\n");
    assert!(send_signal(daemon.process.pid(), "HUP"));
    wait_for("the reload logged", Duration::from_secs(20), || {
        let log = daemon.process.stderr_now();
        match log.contains("max_response_bytes") {
            true => Ok(()),
            false => Err(log),
        }
    });

    let (status, body) = socket_get(&daemon.socket, &folded);
    assert_eq!(
        status,
        413,
        "the socket API after the reload: {}",
        String::from_utf8_lossy(&body)
    );
    let (status, body) = scrape_get(port, scrape);
    assert_eq!(
        status,
        413,
        "the scrape listener after the reload: {}",
        String::from_utf8_lossy(&body)
    );
    daemon.stop();
}
