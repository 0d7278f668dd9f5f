//! Talking to profilerd over its Unix socket (HTTP/1.1): `profctl flamegraph` (the daemon
//! serves folded stacks, profctl renders them) and `profctl status`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use http_body_util::BodyExt;

use crate::cli::FlamegraphArgs;
use crate::output::{check_writable, printable, write_atomically};

/// profilerd's socket when neither `--socket` nor `PROFILERD_SOCKET` names one.
pub const DEFAULT_SOCKET: &str = "/run/profilerd/profilerd.sock";

/// Largest answer read from the daemon.
const MAX_BODY: usize = 512 << 20;

/// Longest wait for an answer.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The daemon's socket: `--socket`, else `$PROFILERD_SOCKET`, else [`DEFAULT_SOCKET`].
pub fn socket_path(arg: Option<&Path>) -> PathBuf {
    if let Some(p) = arg {
        return p.to_path_buf();
    }
    match std::env::var_os("PROFILERD_SOCKET") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_SOCKET),
    }
}

/// An answer of the daemon.
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Headers.
    pub headers: hyper::HeaderMap,
    /// Body.
    pub body: Vec<u8>,
}

impl Answer {
    /// A numeric header.
    pub fn number(&self, name: &str) -> Option<u64> {
        self.headers.get(name)?.to_str().ok()?.parse().ok()
    }
}

/// `GET path_and_query` on the daemon at `socket`.
pub fn get(socket: &Path, path_and_query: &str) -> Result<Answer> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let request = async {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .with_context(|| {
                format!(
                "cannot reach profilerd at {} (is it running? `profctl record` records without it)",
                printable(&socket.display().to_string())
            )
            })?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .context("talking to profilerd")?;
        let connection = tokio::spawn(connection);
        let request = hyper::Request::builder()
            .uri(path_and_query)
            .header(hyper::header::HOST, "profilerd")
            .body(http_body_util::Empty::<hyper::body::Bytes>::new())
            .context("building the request")?;
        let response = sender
            .send_request(request)
            .await
            .context("asking profilerd")?;
        let (parts, body) = response.into_parts();
        let body = http_body_util::Limited::new(body, MAX_BODY)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading profilerd's answer: {e}"))?
            .to_bytes();
        connection.abort();
        Ok::<_, anyhow::Error>(Answer {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: body.to_vec(),
        })
    };
    runtime.block_on(async {
        tokio::time::timeout(TIMEOUT, request)
            .await
            .map_err(|_| anyhow::anyhow!("profilerd did not answer within {TIMEOUT:?}"))?
    })
}

/// The answer's body as an error, unless it is a success.
fn check(answer: &Answer) -> Result<()> {
    if answer.status == 200 {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&answer.body);
    bail!(
        "profilerd answered {}: {}",
        answer.status,
        printable(text.trim().trim_start_matches("profilerd: "))
    )
}

/// Percent-encode a query value.
fn encode(value: &str) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Which processes a range query keeps.
#[derive(Clone, Debug, Default)]
pub struct RangeFilter {
    /// Only this process.
    pub pid: Option<u32>,
    /// Only threads with this command name.
    pub comm: Option<String>,
    /// Only processes of this user.
    pub uid: Option<u32>,
}

/// The stacks of a time range of the daemon's history, and what the daemon said of them.
pub struct RangeProfile {
    /// The stacks (comm root first).
    pub profile: profile::Profile,
    /// Slices read.
    pub slices: u64,
    /// Slices skipped as corrupt.
    pub skipped: u64,
    /// Sampling frequency, Hz.
    pub frequency: u64,
    /// The event sampled on.
    pub event: String,
    /// Whether kernel frames are included.
    pub kernel: bool,
}

/// The folded stacks of `since..until` (UNIX seconds) from the daemon at `socket`.
pub fn folded_range(
    socket: &Path,
    since: f64,
    until: f64,
    filter: &RangeFilter,
) -> Result<RangeProfile> {
    if since >= until {
        return Err(crate::cli::UsageError(format!(
            "the start of a range ({since:.0}) must be before its end ({until:.0})"
        ))
        .into());
    }
    let mut query = format!("/v1/folded?since={since:.3}&until={until:.3}");
    if let Some(pid) = filter.pid {
        query.push_str(&format!("&pid={pid}"));
    }
    if let Some(comm) = &filter.comm {
        query.push_str(&format!("&comm={}", encode(comm)));
    }
    if let Some(uid) = filter.uid {
        query.push_str(&format!("&uid={uid}"));
    }
    let answer = get(socket, &query)?;
    check(&answer)?;
    let text = String::from_utf8_lossy(&answer.body);
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
    Ok(RangeProfile {
        profile,
        slices: answer.number("x-profilerd-slices").unwrap_or(0),
        skipped: answer.number("x-profilerd-skipped-slices").unwrap_or(0),
        frequency: answer.number("x-profilerd-frequency").unwrap_or(0),
        event: answer
            .headers
            .get("x-profilerd-event")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("unknown")
            .to_string(),
        kernel: answer.number("x-profilerd-kernel-frames") == Some(1),
    })
}

/// Now, in UNIX seconds.
pub fn now_unix() -> f64 {
    now_seconds()
}

/// `profctl flamegraph`.
pub fn flamegraph(args: &FlamegraphArgs, socket: Option<&Path>, quiet: bool) -> Result<ExitCode> {
    let socket = socket_path(socket);
    let svg_path = match (&args.output, &args.folded) {
        (None, None) => Some(PathBuf::from("profile.svg")),
        (svg, _) => svg.clone(),
    };
    for path in svg_path.iter().chain(args.folded.iter()) {
        check_writable(path)?;
    }
    let now = now_seconds();
    let since = args
        .since
        .expect("clap requires --since without --input")
        .unix_seconds(now);
    let until = args.until.map_or(now, |u| u.unix_seconds(now));
    let filter = RangeFilter {
        pid: args.pid,
        comm: args.comm.clone(),
        uid: args.uid,
    };
    let RangeProfile {
        profile,
        slices,
        skipped,
        frequency,
        event,
        kernel,
    } = folded_range(&socket, since, until, &filter)?;
    let samples = profile.total();
    let mut written = Vec::new();
    if let Some(path) = &args.folded {
        write_atomically(path, |out| profile.write_folded(out).map_err(Into::into))
            .with_context(|| format!("writing folded stacks to {}", path.display()))?;
        written.push(printable(&path.display().to_string()).into_owned());
    }
    if let Some(path) = &svg_path {
        if samples == 0 {
            eprintln!(
                "profctl: no samples in that range; not writing {}",
                printable(&path.display().to_string())
            );
        } else {
            let filter = match (&args.pid, &args.comm, &args.uid) {
                (Some(pid), _, _) => format!(", process {pid}"),
                (_, Some(comm), _) => format!(", command {comm}"),
                (_, _, Some(uid)) => format!(", uid {uid}"),
                _ => String::new(),
            };
            let options = profile::SvgOptions {
                title: format!("profctl: via profilerd{filter}"),
                subtitle: Some(format!(
                    "{event} at {frequency} Hz, {:.0} s from {since:.0} (UNIX), {samples} samples in {slices} slices{}",
                    until - since,
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
            "profctl: via profilerd ({}): {samples} samples in {slices} slices over {:.0} s ({event} at {frequency} Hz{})",
            printable(&socket.display().to_string()),
            until - since,
            if kernel { ", with kernel frames" } else { ", user space only" }
        );
        if skipped > 0 {
            eprintln!("profctl: note: {skipped} slices were skipped as corrupt or truncated (see profilerd's log)");
        }
        if written.is_empty() {
            eprintln!("profctl: no files written");
        } else {
            eprintln!("profctl: wrote {}", written.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `profctl status`: the daemon's status, one `key: value` a line.
pub fn status(socket: Option<&Path>) -> Result<ExitCode> {
    let socket = socket_path(socket);
    let answer = get(&socket, "/v1/status")?;
    check(&answer)?;
    let value: serde_json::Value =
        serde_json::from_slice(&answer.body).context("reading profilerd's status")?;
    let Some(fields) = value.as_object() else {
        bail!("profilerd's status is not an object");
    };
    println!("profilerd at {}", printable(&socket.display().to_string()));
    for (key, value) in fields {
        let shown = match value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        println!("  {key}: {}", printable(&shown));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_and_encoding() {
        assert_eq!(
            socket_path(Some(Path::new("/tmp/x.sock"))),
            PathBuf::from("/tmp/x.sock")
        );
        assert_eq!(encode("a b;c/é"), "a%20b%3Bc%2F%C3%A9");
    }
}
