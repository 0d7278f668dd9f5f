//! `profctl record --pid N` through profilerd: when its socket answers (and no option only the
//! embedded recorder has was given), the daemon records the process on perf events of its own
//! (`POST /v1/recordings`), profctl waits (Ctrl-C stops the recording early, as embedded), then
//! fetches the folded stacks and writes the same outputs as an embedded recording.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use crate::cli::{CallGraphArg, EventArg, RecordArgs};
use crate::daemon_client::{answers, check, request, socket_path, Answer};
use crate::output::{check_writable, printable, write_atomically};

/// Why a `--pid` recording is made here rather than by the daemon, if it is.
fn embedded_only(args: &RecordArgs) -> Option<&'static str> {
    if args.window.is_some() {
        Some("--window")
    } else if args.lines {
        Some("--lines")
    } else if !args.debug_dirs.is_empty() {
        Some("--debug-dir")
    } else if args.ring_pages.is_some() {
        Some("--ring-pages")
    } else if args.event != EventArg::Auto {
        Some("--event")
    } else if args.call_graph != CallGraphArg::Auto {
        Some("--call-graph")
    } else if args.stack_size != recorder::defaults::STACK_BYTES {
        Some("--stack-size")
    } else {
        None
    }
}

/// Record through profilerd when that applies; None when the recording is to be made here.
pub fn run_if_daemon(
    args: &RecordArgs,
    socket_arg: Option<&Path>,
    quiet: bool,
) -> Result<Option<ExitCode>> {
    let Some(pid) = args.pid else {
        return Ok(None);
    };
    if args.embedded {
        return Ok(None);
    }
    let socket = socket_path(socket_arg);
    let named = socket_arg.is_some() || std::env::var_os("PROFILERD_SOCKET").is_some();
    if !answers(&socket) {
        if named && !quiet {
            eprintln!(
                "profctl: note: profilerd does not answer at {}; recording embedded",
                printable(&socket.display().to_string())
            );
        }
        return Ok(None);
    }
    if let Some(option) = embedded_only(args) {
        tracing::info!("{option} is not available through profilerd: recording embedded");
        return Ok(None);
    }
    record(args, pid, &socket, quiet).map(Some)
}

/// A field of the daemon's JSON.
fn field<'a>(value: &'a serde_json::Value, key: &str) -> &'a serde_json::Value {
    value.get(key).unwrap_or(&serde_json::Value::Null)
}

fn json(answer: &Answer) -> Result<serde_json::Value> {
    serde_json::from_slice(&answer.body).context("reading profilerd's answer")
}

fn record(args: &RecordArgs, pid: u32, socket: &Path, quiet: bool) -> Result<ExitCode> {
    let svg_path = match (&args.output, &args.folded) {
        (None, None) => Some(std::path::PathBuf::from("profile.svg")),
        (svg, _) => svg.clone(),
    };
    for path in svg_path.iter().chain(args.folded.iter()) {
        check_writable(path)?;
    }
    let mut body = serde_json::json!({
        "pid": pid,
        "frequency": args.frequency,
        "descendants": true,
        "kernel": !args.no_kernel,
    });
    if let Some(d) = args.duration {
        body["duration"] = serde_json::json!(d.as_secs_f64());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let (status, folded) = runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt()).context("watching SIGINT")?;
        let mut terminate = signal(SignalKind::terminate()).context("watching SIGTERM")?;
        let created = request(
            socket,
            "POST",
            "/v1/recordings",
            Some(body.to_string().into_bytes()),
        )
        .await?;
        if created.status != 201 {
            check(&created)?;
        }
        let created = json(&created)?;
        let Some(id) = field(&created, "id").as_u64() else {
            bail!("profilerd's answer has no recording id");
        };
        let path = format!("/v1/recordings/{id}");
        let mut stopping = false;
        let wait_path = format!("{path}?wait=30");
        let status = loop {
            let wait = request(socket, "GET", &wait_path, None);
            tokio::select! {
                answer = wait => {
                    let answer = answer?;
                    check(&answer)?;
                    let status = json(&answer)?;
                    if field(&status, "state").as_str() != Some("running") {
                        break status;
                    }
                }
                _ = interrupt.recv(), if !stopping => {
                    stopping = true;
                    let answer = request(socket, "DELETE", &path, None).await?;
                    if !(200..300).contains(&answer.status) {
                        check(&answer)?;
                    }
                }
                _ = terminate.recv(), if !stopping => {
                    stopping = true;
                    let _ = request(socket, "DELETE", &path, None).await?;
                }
            }
        };
        if field(&status, "state").as_str() == Some("failed") {
            bail!(
                "profilerd's recording failed: {}",
                printable(field(&status, "error").as_str().unwrap_or("unknown error"))
            );
        }
        let folded = request(socket, "GET", &format!("{path}/folded"), None).await?;
        check(&folded)?;
        // Fetched: the daemon need not keep it.
        let _ = request(socket, "DELETE", &path, None).await;
        Ok::<_, anyhow::Error>((status, folded))
    })?;
    let text = String::from_utf8_lossy(&folded.body);
    let mut profile = profile::Profile::new();
    let mut frames = Vec::new();
    for line in text.lines() {
        let Some((names, count)) = profile::parse_folded_line(line) else {
            continue;
        };
        frames.clear();
        frames.extend(names.into_iter().map(|n| profile.intern(n)));
        profile.add(&frames, count);
    }
    let samples = profile.total();
    let seconds = field(&status, "seconds").as_f64().unwrap_or(0.0);
    let frequency = field(&status, "frequency_used").as_u64().unwrap_or(0);
    let lost = field(&status, "lost").as_u64().unwrap_or(0);
    let event = field(&status, "event")
        .as_str()
        .unwrap_or("unknown")
        .to_string();
    let kernel = field(&status, "kernel").as_bool().unwrap_or(false);
    let shown_socket = printable(&socket.display().to_string()).into_owned();
    let mut written = Vec::new();
    if let Some(path) = &args.folded {
        write_atomically(path, |out| profile.write_folded(out).map_err(Into::into))
            .with_context(|| format!("writing folded stacks to {}", path.display()))?;
        written.push(printable(&path.display().to_string()).into_owned());
    }
    if let Some(path) = &svg_path {
        if samples == 0 {
            eprintln!(
                "profctl: no samples were recorded; not writing {}",
                printable(&path.display().to_string())
            );
        } else {
            let options = profile::SvgOptions {
                title: format!("profctl: process {pid}"),
                subtitle: Some(format!(
                    "{event} at {frequency} Hz, {seconds:.1} s, {samples} samples, {lost} lost{}; via profilerd",
                    if kernel { "" } else { ", user space only" }
                )),
            };
            write_atomically(path, |out| {
                profile.write_svg(out, &options).map_err(Into::into)
            })
            .with_context(|| format!("writing the flamegraph to {}", path.display()))?;
            written.push(printable(&path.display().to_string()).into_owned());
        }
    }
    if !quiet {
        eprintln!(
            "profctl: {samples} samples in {seconds:.1} s ({event} at {frequency} Hz{}), {lost} lost, via profilerd at {shown_socket}",
            if kernel { ", with kernel frames" } else { ", user space only" }
        );
        if written.is_empty() {
            eprintln!("profctl: no files written");
        } else {
            eprintln!("profctl: wrote {}", written.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}
