//! `profctl record --pid N` through profilerd: when its socket answers (and no option only the
//! embedded recorder has was given), the daemon records the process on perf events of its own
//! (`POST /v1/recordings`), profctl waits (Ctrl-C stops the recording early, as embedded), then
//! fetches the recording as pprof (`GET /v1/recordings/ID/pprof`) and writes the same kinds of
//! file as an embedded recording: that pprof profile for `-o x.pb.gz` or `--format pprof`,
//! and folded stacks and an SVG made from it, counted in samples.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use daemon_api::recording::{RecordingRequest, RecordingState, RecordingStatus, RECORDINGS, STOP};

use super::options::RecordOutputs;
use crate::cli::{CallGraphArg, EventArg, RecordArgs};
use crate::daemon_client::{answers, check, request, socket_path, Answer};
use crate::input::from_pprof;
use crate::output::{printable, write_atomically};
use crate::render::{shown, write_outputs, Outputs, WhenEmpty};

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
    } else if args.switch_cap != recorder::defaults::SWITCH_CAP {
        Some("--switch-cap")
    } else if (args.off_cpu || args.wall) && can_sample_switches() {
        // This user may open the context-switch event: the kernel frames stay visible.
        Some(if args.off_cpu { "--off-cpu" } else { "--wall" })
    } else {
        None
    }
}

/// Whether this user may sample context switches itself (CAP_PERFMON, root, or
/// perf_event_paranoid <= 1); otherwise `--off-cpu` and `--wall` go through profilerd.
fn can_sample_switches() -> bool {
    sampler::is_privileged() || sampler::paranoid_level().is_some_and(|p| p < 2)
}

/// Record through profilerd when that applies; None when the recording is to be made here.
pub fn run_if_daemon(
    args: &RecordArgs,
    socket_arg: Option<&Path>,
    quiet: bool,
) -> Result<Option<ExitCode>> {
    // `-- COMMAND` goes through the daemon only for what this user cannot record itself:
    // off-CPU and wall-clock time at perf_event_paranoid 2.
    let command_through_daemon =
        !args.command.is_empty() && (args.off_cpu || args.wall) && !can_sample_switches();
    if args.pid.is_none() && !command_through_daemon {
        return Ok(None);
    }
    if args.embedded {
        return Ok(None);
    }
    let socket = socket_path(socket_arg);
    let named = socket_arg.is_some() || std::env::var_os(daemon_api::SOCKET_ENV).is_some();
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
    record(args, args.pid, &socket, quiet).map(Some)
}

/// The daemon's JSON answer as `T`.
fn json<T: serde::de::DeserializeOwned>(answer: &Answer) -> Result<T> {
    serde_json::from_slice(&answer.body).context("reading profilerd's answer")
}

/// The `POST /v1/recordings` body for `args`.
fn request_body(args: &RecordArgs, pid: u32) -> RecordingRequest {
    RecordingRequest {
        pid,
        frequency: Some(args.frequency),
        duration: args.duration.map(|d| d.as_secs_f64()),
        descendants: true,
        kernel: Some(!args.no_kernel),
        measure: args.measure(),
        on_exec: false,
    }
}

/// Once the daemon's recording at `path` has its events open (its status says `sampling`),
/// let the command held before its exec go on.
async fn release_when_sampling(
    socket: &Path,
    path: &str,
    command: &mut recorder::Launched,
) -> Result<()> {
    loop {
        let status: RecordingStatus = json(&request(socket, "GET", path, None).await?.ok()?)?;
        if status.sampling || status.state != RecordingState::Running {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    command.release().context("starting the command")
}

/// Stop the recording at `path` early through its stop route, never `DELETE`, which forgets a
/// recording that ended on its own meanwhile (the command exited, and the daemon saw its
/// process exit first); a daemon older than the route (404 without an error body) through
/// `DELETE`.
async fn stop_recording(socket: &Path, path: &str) -> Result<Answer> {
    let answer = request(socket, "POST", &format!("{path}{STOP}"), None).await?;
    if answer.status == 404 && answer.body.is_empty() {
        return Ok(request(socket, "DELETE", path, None).await?);
    }
    Ok(answer)
}

/// Start a recording on the daemon, wait for its end (a first SIGINT or SIGTERM stops it
/// early, through its stop route; so does the exit of `command`, which is let exec once the
/// recording samples), fetch `/v1/recordings/ID{result}` and delete the recording: its final
/// status and the result.
async fn recorded(
    socket: &Path,
    body: &RecordingRequest,
    result: &str,
    mut command: Option<&mut recorder::Launched>,
) -> Result<(RecordingStatus, Answer)> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupt = signal(SignalKind::interrupt()).context("watching SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("watching SIGTERM")?;
    let body = serde_json::to_vec(body).context("writing the recording's request")?;
    let created = request(socket, "POST", RECORDINGS, Some(body)).await?;
    if created.status != 201 {
        check(&created)?;
    }
    let created: RecordingStatus = json(&created)?;
    let path = format!("{RECORDINGS}/{}", created.id);
    let mut stopping = false;
    if let Some(command) = command.as_deref_mut() {
        release_when_sampling(socket, &path, command).await?;
    }
    let wait_path = format!("{path}?wait=30");
    let status = loop {
        let wait = request(socket, "GET", &wait_path, None);
        let exited = async {
            match command.as_deref_mut() {
                Some(c) => c.wait().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = exited, if !stopping => {
                stopping = true;
                let _ = stop_recording(socket, &path).await?;
            }
            answer = wait => {
                let status: RecordingStatus = json(&answer?.ok()?)?;
                if status.state != RecordingState::Running {
                    break status;
                }
            }
            _ = interrupt.recv(), if !stopping => {
                stopping = true;
                let answer = stop_recording(socket, &path).await?;
                if !(200..300).contains(&answer.status) {
                    check(&answer)?;
                }
            }
            _ = terminate.recv(), if !stopping => {
                stopping = true;
                let _ = stop_recording(socket, &path).await?;
            }
        }
    };
    if status.state == RecordingState::Failed {
        bail!(
            "profilerd's recording failed: {}",
            printable(status.error.as_deref().unwrap_or("unknown error"))
        );
    }
    let answer = request(socket, "GET", &format!("{path}{result}"), None)
        .await?
        .ok()?;
    // Fetched: the daemon need not keep it.
    let _ = request(socket, "DELETE", &path, None).await;
    Ok((status, answer))
}

/// What the daemon's final status says of a recording.
struct Finished {
    seconds: f64,
    frequency: u64,
    lost: u64,
    event: String,
    kernel: bool,
    /// Stopped at the daemon's byte budget for a recording.
    truncated: bool,
    /// Samples the daemon read, before it selected the recorded processes.
    samples_read: u64,
    /// Samples of the recorded processes the user may not see (µs for time measures).
    samples_hidden: u64,
}

impl Finished {
    fn of(status: &RecordingStatus) -> Finished {
        Finished {
            seconds: status.seconds.unwrap_or(0.0),
            frequency: status.frequency_used.unwrap_or(0),
            lost: status.lost.unwrap_or(0),
            event: status.event.clone().unwrap_or_else(|| "unknown".into()),
            kernel: status.kernel,
            truncated: status.truncated.unwrap_or(false),
            samples_read: status.samples_read.unwrap_or(0),
            samples_hidden: status.samples_hidden.unwrap_or(0),
        }
    }

    /// Why a recording of `pid` holds nothing, as far as the daemon's status says.
    fn why_empty(&self, pid: u32, timed: bool) -> String {
        if self.samples_hidden > 0 {
            let what = if timed { "µs" } else { "samples" };
            return format!(
                "profilerd recorded {} {what} of process {pid} and what it started, but none of \
                 a process that is yours as the kernel judges who may trace it (a set-uid or \
                 set-gid program, or one that is not dumpable); root and the daemon's \
                 access.admin_group see them",
                self.samples_hidden
            );
        }
        if self.samples_read == 0 {
            let lost = if self.lost > 0 {
                format!(" ({} lost)", self.lost)
            } else {
                String::new()
            };
            let did = if timed {
                "neither ran nor waited"
            } else {
                "did not run on a CPU"
            };
            return format!(
                "profilerd read no samples in {:.1} s{lost}: process {pid} {did} while it was \
                 recorded",
                self.seconds
            );
        }
        format!(
            "profilerd read {} samples, none of process {pid} or what it started",
            self.samples_read
        )
    }
}

/// Record process `pid` (None: the command of `args`, started held before its exec) on the
/// daemon at `socket` and write the outputs.
fn record(args: &RecordArgs, pid: Option<u32>, socket: &Path, quiet: bool) -> Result<ExitCode> {
    let outputs = RecordOutputs::of(args);
    outputs.check_writable()?;
    let mut command = match pid {
        Some(_) => None,
        None => Some(recorder::Launched::spawn(&args.command).context("starting the command")?),
    };
    let pid = pid.or(command.as_ref().map(|c| c.pid())).unwrap_or(0);
    let mut body = request_body(args, pid);
    body.on_exec = command.is_some();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let (status, answer) = runtime.block_on(recorded(socket, &body, "/pprof", command.as_mut()))?;
    if let Some(command) = command.as_mut() {
        // The recording ended first (its duration, a signal): as embedded, SIGTERM.
        command.terminate();
    }
    let pprof_bytes = answer.body;
    let timed = args.measure() != recorder::Measure::Cpu;
    let profile = profile_of(&pprof_bytes, timed)?;
    let f = Finished::of(&status);
    if profile.total() == 0 {
        eprintln!(
            "profctl: no samples: {}",
            printable(&f.why_empty(pid, timed))
        );
    }
    let options = svg_options(args, &f, profile.total(), timed);
    let written = write_recorded(&outputs, &profile, &options, &pprof_bytes)?;
    if !quiet {
        print_recorded(args, &f, &profile, socket, &written);
    }
    Ok(ExitCode::SUCCESS)
}

/// The profile of profilerd's pprof answer; `timed` (off CPU, wall-clock): counted in
/// microseconds, else in samples.
fn profile_of(pprof_bytes: &[u8], timed: bool) -> Result<profile::Profile> {
    let mut decoded = pprof::decode(pprof_bytes).context("reading profilerd's pprof profile")?;
    if timed {
        // Off CPU and wall-clock, folded stacks and the SVG count microseconds (the time
        // each stack holds, in ns, is its second value).
        for s in &mut decoded.sample {
            if let [_, ns, ..] = s.value[..] {
                s.value[0] = ns.saturating_add(500) / 1000;
            }
        }
    }
    // Folded stacks and the SVG count samples (the pprof's `samples/count` values).
    Ok(from_pprof(&decoded)
        .context("reading profilerd's pprof profile")?
        .profile)
}

/// What the summary adds when the recording stopped at the daemon's byte budget.
fn truncated_note(f: &Finished) -> &'static str {
    if f.truncated {
        ", truncated (the daemon's recordings.max_bytes)"
    } else {
        ""
    }
}

/// The SVG's title and subtitle for a recording of `samples` samples.
fn svg_options(args: &RecordArgs, f: &Finished, samples: u64, timed: bool) -> profile::SvgOptions {
    profile::SvgOptions {
        title: super::summary::title(args),
        subtitle: Some(format!(
            "{} at {} Hz, {:.1} s, {samples} samples, {} lost{}{}; via profilerd",
            f.event,
            f.frequency,
            f.seconds,
            f.lost,
            if f.kernel { "" } else { ", user space only" },
            truncated_note(f)
        )),
        microseconds: timed,
    }
}

/// Write folded stacks, then pprof (profilerd's answer as it is), then the SVG, as an
/// embedded recording writes them; returns the files written.
fn write_recorded(
    outputs: &RecordOutputs,
    profile: &profile::Profile,
    options: &profile::SvgOptions,
    pprof_bytes: &[u8],
) -> Result<Vec<String>> {
    let folded_only = Outputs {
        svg: None,
        folded: outputs.folded.clone(),
    };
    let empty = || WhenEmpty::Skip("no samples were recorded");
    let mut written = write_outputs(&folded_only, profile, options, empty())?;
    if let Some(path) = &outputs.pprof {
        write_atomically(path, |out| Ok(out.write_all(pprof_bytes)?))
            .with_context(|| format!("writing the pprof profile to {}", shown(path)))?;
        written.push(shown(path));
    }
    let svg_only = Outputs {
        svg: outputs.svg.clone(),
        folded: None,
    };
    written.extend(write_outputs(&svg_only, profile, options, empty())?);
    Ok(written)
}

/// The summary on stderr: what was recorded, how, and the files `written`.
fn print_recorded(
    args: &RecordArgs,
    f: &Finished,
    profile: &profile::Profile,
    socket: &Path,
    written: &[String],
) {
    let samples = profile.total();
    eprintln!(
        "profctl: {samples} samples in {:.1} s ({} at {} Hz{}), {} lost{}, via profilerd at {}",
        f.seconds,
        f.event,
        f.frequency,
        if f.kernel {
            ", with kernel frames"
        } else {
            ", user space only"
        },
        f.lost,
        truncated_note(f),
        printable(&socket.display().to_string())
    );
    if args.measure() != recorder::Measure::Cpu && samples > 0 {
        eprintln!(
            "profctl: {:.2} s recorded ({}); counts are microseconds",
            samples as f64 / 1e6,
            if args.off_cpu {
                "blocked"
            } else {
                "wall-clock"
            }
        );
    }
    if written.is_empty() {
        eprintln!("profctl: no files written");
    } else {
        eprintln!("profctl: wrote {}", written.join(", "));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_recording_says_why() {
        let status = |mut fields: serde_json::Value| {
            // What every status has; the test's fields on top.
            let base = serde_json::json!({
                "id": 1, "state": "done", "pid": 42, "frequency": 99, "duration": 1.0,
                "descendants": false, "kernel": false, "started_ns": 0, "sampling": false,
            });
            for (k, v) in base.as_object().unwrap() {
                fields
                    .as_object_mut()
                    .unwrap()
                    .entry(k)
                    .or_insert(v.clone());
            }
            Finished::of(&serde_json::from_value(fields).expect("a recording's status"))
        };
        let hidden = status(serde_json::json!({
            "seconds": 2.0, "samples_read": 120, "samples_hidden": 118,
        }));
        let why = hidden.why_empty(42, false);
        assert!(
            why.contains("118 samples of process 42") && why.contains("set-uid"),
            "{why}"
        );
        let idle = status(serde_json::json!({"seconds": 3.04, "samples_read": 0, "lost": 2}));
        let why = idle.why_empty(42, true);
        assert!(why.contains("no samples in 3.0 s (2 lost)"), "{why}");
        assert!(why.contains("neither ran nor waited"), "{why}");
        let others = status(serde_json::json!({"samples_read": 9}));
        assert!(others.why_empty(42, false).contains("none of process 42"));
    }
}
