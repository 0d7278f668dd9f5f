//! `profctl ui`: a page in the browser over profilerd's history (or over files), served by
//! profctl on 127.0.0.1 to whoever holds the one-time link it prints.
//!
//! - `server`: connections, the page's files, dispatch; `guard`: token, session cookie, Host
//!   check, security headers;
//! - `api`: the page's requests; `params`: their checked parameters;
//! - `source`: stacks from the daemon (as this user, one request at a time, a few ranges
//!   cached) or from files; `stacks`: one range's stacks with sorted names;
//! - `views`: flame graph, search, top table, sandwich, diff; `tree`: call trees and their
//!   bounded JSON;
//! - `assets/`: the page (HTML, CSS and one script, all ours), built into profctl.

mod api;
mod guard;
mod params;
mod server;
mod source;
mod stacks;
mod tree;
mod views;

use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use crate::cli::UiArgs;
use crate::daemon_client::{self, socket_path};
use crate::output::printable;
use crate::time::now_unix;

use self::source::{Backend, InputFile, Source};
use self::stacks::{About, Stacks};

/// Files shown at most (`--input`).
const MAX_FILES: usize = 16;

/// The timeline's span when `--since` is not given.
const DEFAULT_SPAN: f64 = 3600.0;

/// Run `profctl ui`.
pub fn run(args: &UiArgs, socket: Option<&Path>, quiet: bool) -> Result<ExitCode> {
    let backend = if args.input.is_empty() {
        let socket = socket_path(socket);
        // Fail now, with the daemon's reason, rather than in the page.
        daemon_client::get(&socket, "/v1/status")?.ok()?;
        Backend::Daemon(socket)
    } else {
        Backend::Files(load_files(&args.input)?)
    };
    let span = match args.since {
        Some(since) => {
            let now = now_unix();
            let (since, _) = crate::time::resolve_range(since, None, now)?;
            (now - since).max(10.0)
        }
        None => DEFAULT_SPAN,
    };
    let token = guard::random_hex().context("reading random bytes for the token")?;
    let server = Arc::new(server::Server {
        guard: guard::Guard::new(token.clone()).context("reading random bytes")?,
        source: Arc::new(Source::new(backend)),
        start: api::Start { span },
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port))
            .await
            .with_context(|| format!("binding 127.0.0.1:{}", args.port))?;
        let port = listener.local_addr()?.port();
        let url = format!("http://127.0.0.1:{port}/?token={token}");
        let mut out = std::io::stdout().lock();
        writeln!(out, "{url}")?;
        out.flush()?;
        drop(out);
        if !quiet {
            eprintln!(
                "profctl: serving {} on 127.0.0.1:{port} ({} KB of page); open the link above (good for one visit); Ctrl-C stops",
                match server.source.socket() {
                    Some(s) => format!("profilerd's history at {}", printable(&s.display().to_string())),
                    None => format!("{} files", server.source.files().len()),
                },
                server::page_bytes() / 1024
            );
        }
        let launcher = if args.no_open {
            None
        } else {
            open_browser(&url, quiet)
        };
        server::serve(listener, Arc::clone(&server), stop_signal()).await;
        if let Some(dir) = launcher {
            let _ = std::fs::remove_dir_all(dir);
        }
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Read the files given with `--input`.
fn load_files(paths: &[PathBuf]) -> Result<Vec<InputFile>> {
    if paths.len() > MAX_FILES {
        bail!(
            "at most {MAX_FILES} files are shown at once; {} given",
            paths.len()
        );
    }
    paths
        .iter()
        .map(|path| {
            let loaded = crate::input::load(path)?;
            let about = About {
                kind: loaded.kind.to_string(),
                ..About::default()
            };
            Ok(InputFile {
                name: printable(&path.display().to_string()).into_owned(),
                path: path.clone(),
                stacks: Arc::new(Stacks::from_profile(
                    &loaded.profile,
                    loaded.comm_root,
                    about,
                )),
            })
        })
        .collect()
}

/// Ctrl-C or SIGTERM.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Open `url` in the user's browser (`$BROWSER`, else `xdg-open`) when there is a display,
/// through a file in a private directory that sends the browser on (the token never appears
/// on a command line other users can read); the directory, to remove at the end.
fn open_browser(url: &str, quiet: bool) -> Option<PathBuf> {
    let graphical = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()));
    let opener = std::env::var("BROWSER")
        .ok()
        .filter(|b| !b.is_empty())
        .or_else(|| graphical.then(|| "xdg-open".to_string()))?;
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!(
        "profctl-ui-{}-{}",
        std::process::id(),
        &guard::random_hex().ok()?[..8]
    ));
    let written = (|| -> std::io::Result<PathBuf> {
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let page = dir.join("open.html");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&page)?;
        write!(
            file,
            "<!doctype html><meta http-equiv=\"refresh\" content=\"0;url={url}\"><title>profctl ui</title>"
        )?;
        Ok(page)
    })();
    let page = match written {
        Ok(page) => page,
        Err(err) => {
            tracing::warn!(%err, "cannot write the page that opens the browser");
            let _ = std::fs::remove_dir_all(&dir);
            return None;
        }
    };
    let spawned = std::process::Command::new(&opener)
        .arg(&page)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        Ok(mut child) => {
            // Reaped in the background: xdg-open returns once the browser has it.
            std::thread::spawn(move || child.wait());
        }
        Err(err) if !quiet => eprintln!(
            "profctl: could not start {} ({err}); open the link yourself",
            printable(&opener)
        ),
        Err(_) => {}
    }
    Some(dir)
}
