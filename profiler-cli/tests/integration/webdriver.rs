//! A small WebDriver client of the tests' own: Debian's chromedriver (`chromium-driver`,
//! installed by scripts/test) driving headless chromium, over plain HTTP on loopback.
//! Enough for the page tests: open a URL, run a script, find and click elements, type, drag
//! with a real pointer, read cookies, take a screenshot; and waiting for a condition of the
//! page (never a fixed sleep), with deadlines scaled by `PROFCTL_TEST_TIME_SCALE`.

use std::io::{BufRead, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::Spawned;
use crate::daemon_serve::free_port;
pub use crate::poll::wait_for as wait_until;

/// Where Debian's chromedriver is.
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// One request to chromedriver: (status, JSON body).
fn call(port: u16, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    try_call(port, method, path, body).unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"))
}

/// [`call`], or why the exchange failed.
fn try_call(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<(u16, Value)> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(120)))?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    // HTTP/1.1 (chromedriver answers no 1.0), the answer read by its Content-Length (it
    // keeps the connection open).
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut reader = std::io::BufReader::new(s);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut length = 0;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut bytes = vec![0; length];
    reader.read_exact(&mut bytes)?;
    let body = String::from_utf8_lossy(&bytes);
    Ok((status, serde_json::from_str(&body).unwrap_or(Value::Null)))
}

/// A chromedriver with one headless chromium session; both end when it is dropped.
pub struct Browser {
    port: u16,
    session: String,
    _driver: Spawned,
}

impl Browser {
    /// Starts chromedriver and a headless chromium (as root: without its sandbox), its
    /// profile under `dir`, with the background traffic a fresh profile makes turned off.
    pub fn start(dir: &Path) -> Browser {
        assert!(
            Path::new(CHROMEDRIVER).exists(),
            "{CHROMEDRIVER} is missing: scripts/test installs chromium-driver"
        );
        let port = free_port();
        let mut cmd = Command::new(CHROMEDRIVER);
        cmd.arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .env("HOME", dir);
        let driver = Spawned::spawn(cmd, "chromedriver");
        wait_until(
            "chromedriver ready",
            Duration::from_secs(30),
            || match try_call(port, "GET", "/status", None) {
                Ok((_, v)) if v["value"]["ready"] == true => Ok(()),
                Ok((status, v)) => Err(format!("{status} {v}")),
                Err(e) => Err(e.to_string()),
            },
        );
        let profile = dir.join("chromium-profile");
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-quic",
            "--disable-features=Translate,OptimizationHints,MediaRouter",
            "--window-size=1400,1000",
            &format!("--user-data-dir={}", profile.display()),
        ];
        let (status, answer) = call(
            port,
            "POST",
            "/session",
            Some(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args},
            }}})),
        );
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session ({status}): {answer}"))
            .to_string();
        Browser {
            port,
            session,
            _driver: driver,
        }
    }

    /// A command of the session; its `value`, or a panic with chromedriver's error.
    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, answer) = call(
            self.port,
            method,
            &format!("/session/{}{path}", self.session),
            body.as_ref(),
        );
        assert!(
            status == 200,
            "WebDriver {method} {path}: {status} {answer}"
        );
        answer["value"].clone()
    }

    /// Opens `url`.
    pub fn goto(&self, url: &str) {
        self.command("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body; `arguments` as in WebDriver) and returns its value.
    pub fn eval(&self, script: &str, args: Value) -> Value {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// The element `css` selects (the first).
    pub fn find(&self, css: &str) -> String {
        let v = self.command(
            "POST",
            "/element",
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_string()
    }

    /// Clicks the element `css` selects.
    pub fn click(&self, css: &str) {
        let el = self.find(css);
        self.command("POST", &format!("/element/{el}/click"), Some(json!({})));
    }

    /// Types `text` into the element `css` selects.
    pub fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css);
        self.command("POST", &format!("/element/{el}/clear"), Some(json!({})));
        self.command(
            "POST",
            &format!("/element/{el}/value"),
            Some(json!({ "text": text })),
        );
    }

    /// Drags the mouse from `(x0, y)` to `(x1, y)` (viewport pixels), pressed all the way.
    pub fn drag(&self, x0: f64, x1: f64, y: f64) {
        let at = |x: f64| json!({"type": "pointerMove", "duration": 150, "origin": "viewport", "x": x.round() as i64, "y": y.round() as i64});
        self.command(
            "POST",
            "/actions",
            Some(json!({"actions": [{
                "type": "pointer", "id": "mouse", "parameters": {"pointerType": "mouse"},
                "actions": [at(x0), {"type": "pointerDown", "button": 0}, at((x0 + x1) / 2.0),
                            at(x1), {"type": "pointerUp", "button": 0}],
            }]})),
        );
        self.command("DELETE", "/actions", None);
    }

    /// The value of the cookie `name` (HttpOnly ones included).
    pub fn cookie(&self, name: &str) -> String {
        let v = self.command("GET", &format!("/cookie/{name}"), None);
        v["value"]
            .as_str()
            .unwrap_or_else(|| panic!("no cookie {name}: {v}"))
            .to_string()
    }

    /// A PNG of the window.
    pub fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let v = self.command("GET", "/screenshot", None);
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64 PNG"))
            .expect("a base64 screenshot")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = try_call(
            self.port,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
    }
}
