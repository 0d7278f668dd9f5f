//! `profctl record`: run a recording in this process (embedded mode) and write its outputs.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use recorder::{Recording, ResolveStats};

use crate::cli::RecordArgs;
use crate::output::{check_writable, write_atomically};

/// Default flamegraph path when neither -o nor --folded is given.
const DEFAULT_SVG: &str = "profile.svg";

/// Run `profctl record`.
pub fn run(args: RecordArgs, quiet: bool, verbose: u8) -> Result<ExitCode> {
    let cpu_at_start = recorder::ProcessUsage::now().cpu();
    let started_unix = std::time::SystemTime::now();
    let mut options = args.to_options();
    // -o is pprof by its extension or --format, else SVG.
    let pprof_path = args.output.clone().filter(|p| {
        crate::cli::OutputFormat::of(p, args.format) == crate::cli::OutputFormat::Pprof
    });
    let svg_path = match (&args.output, &args.folded) {
        (None, None) => Some(DEFAULT_SVG.into()),
        (svg, _) => svg.clone().filter(|_| pprof_path.is_none()),
    };
    args.validate()?;
    // Find unwritable outputs before recording, not after.
    for path in svg_path
        .iter()
        .chain(args.folded.iter())
        .chain(pprof_path.iter())
    {
        check_writable(path)?;
    }
    let mut signals = Signals::watch()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;

    let live = !quiet && std::io::stderr().is_terminal();
    if options.window.is_some() {
        options.drain_interval = recorder::defaults::WINDOW_DRAIN_INTERVAL;
    }
    if live {
        options.drain_interval = recorder::defaults::LIVE_DRAIN_INTERVAL;
    }
    let bar = if live {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} recording {msg}").expect("valid template"),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut progress = |p: recorder::Progress| {
        bar.set_message(format!(
            "{:.1} s, {} samples, {} lost (Ctrl-C to stop)",
            p.elapsed.as_secs_f64(),
            p.samples,
            p.lost
        ));
        bar.tick();
    };
    // Windows are named on a thread of their own as they close, so that draining never waits
    // for symbolization.
    let resolve_options = recorder::ResolveOptions {
        // pprof keeps each frame's source file and line.
        source_locations: pprof_path.is_some(),
        ..args.resolve_options()
    };
    let symbolizer = recorder::Symbolizer::new(resolve_options, options.frame_cache_dir.clone());
    let pprof_out = pprof_path
        .is_some()
        .then(|| crate::pprof_out::PprofOut::new(1_000_000_000 / options.frequency.max(1)));
    let feed = symbolizer.feed();
    let (windows, closed) = std::sync::mpsc::channel::<recorder::ClosedWindow>();
    let streaming = options.window.is_some() && !quiet;
    let naming = std::thread::Builder::new()
        .name("symbolize".into())
        .spawn(move || name_windows(symbolizer, closed, streaming, pprof_out))
        .context("starting the symbolizer thread")?;
    let recording = runtime.block_on(async {
        let stop = signals.first();
        let mut on_window = |w: recorder::ClosedWindow| {
            let _ = windows.send(w);
        };
        recorder::record(&options, Some(&feed), stop, &mut progress, &mut on_window).await
    });
    drop(windows);
    // From here a signal ends profctl at once (naming or writing may take long).
    signals.sampling_over();
    bar.finish_and_clear();
    let post_started = std::time::Instant::now();
    let named = naming.join();
    let recording = recording.context("recording failed")?;
    let (profile, resolve_stats, pprof_out) =
        named.map_err(|_| anyhow::anyhow!("the symbolizer thread panicked"))?;
    for note in &recording.notes {
        if !quiet {
            eprintln!(
                "profctl: note: {}",
                crate::output::printable(&note.to_string())
            );
        }
    }
    let cpu_at_resolved = recorder::ProcessUsage::now().cpu();
    let stacks_quality = stack_quality(&resolve_stats);
    let mut written = Vec::new();
    // Each output on its own: one that fails does not lose the other.
    let mut failures = Vec::new();
    if let Some(path) = &args.folded {
        match write_atomically(path, |out| profile.write_folded(out).map_err(Into::into))
            .with_context(|| format!("writing folded stacks to {}", printable_path(path)))
        {
            Ok(()) => written.push(printable_path(path)),
            Err(e) => failures.push(e),
        }
    }
    if let (Some(path), Some(out)) = (&pprof_path, pprof_out) {
        let start_ns = started_unix
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let pprof = out.finish(
            start_ns,
            recording.duration.as_nanos() as u64,
            recording.frequency,
            &recording.event.to_string(),
        );
        match write_atomically(path, |out| Ok(out.write_all(&pprof::encode_gz(&pprof))?))
            .with_context(|| format!("writing the pprof profile to {}", printable_path(path)))
        {
            Ok(()) => written.push(printable_path(path)),
            Err(e) => failures.push(e),
        }
    }
    if let Some(path) = &svg_path {
        if profile.total() == 0 {
            eprintln!(
                "profctl: no samples were recorded; not writing {}",
                printable_path(path)
            );
        } else {
            let options = profile::SvgOptions {
                title: title(&args),
                subtitle: Some(subtitle(&recording, stacks_quality.as_deref())),
            };
            match write_atomically(path, |out| {
                profile.write_svg(out, &options).map_err(Into::into)
            })
            .with_context(|| format!("writing the flamegraph to {}", printable_path(path)))
            {
                Ok(()) => written.push(printable_path(path)),
                Err(e) => failures.push(e),
            }
        }
    }
    if !quiet {
        print_summary(
            &recording,
            &resolve_stats,
            &written,
            post_started.elapsed(),
            verbose > 0,
        );
        if verbose > 1 {
            let marks = &recording.cpu_marks;
            let ms = |from: Duration, to: Duration| to.saturating_sub(from).as_secs_f64() * 1e3;
            eprintln!(
                "profctl: own CPU by phase: start {:.2} ms, open events {:.2} ms, sampling {:.2} ms ({:.2} ms draining), symbolize {:.2} ms, write {:.2} ms",
                cpu_at_start.as_secs_f64() * 1e3,
                ms(cpu_at_start, marks.events_enabled),
                ms(marks.events_enabled, marks.sampling_ended),
                marks.drain_thread.as_secs_f64() * 1e3,
                ms(marks.sampling_ended, cpu_at_resolved),
                ms(cpu_at_resolved, recorder::ProcessUsage::now().cpu()),
            );
        }
    }
    if let Some(first) = failures.into_iter().next() {
        if !written.is_empty() {
            eprintln!(
                "profctl: wrote {} despite the error below",
                written.join(", ")
            );
        }
        return Err(first);
    }
    Ok(ExitCode::SUCCESS)
}

/// A path as printed: control characters escaped (another user may have chosen it).
fn printable_path(path: &std::path::Path) -> String {
    crate::output::printable(&path.display().to_string()).into_owned()
}

/// SIGINT and SIGTERM: the first one during sampling ends the recording (outputs are still
/// written); a second one, or any after sampling ended (naming frames, writing outputs),
/// ends profctl at once with status 130, removing its temporary files. Watched on a thread of
/// its own, so that no blocked open or long symbolization can swallow a signal.
struct Signals {
    first: Option<tokio::sync::oneshot::Receiver<()>>,
    over: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Signals {
    /// Install the handlers (before anything is started, so no signal is missed) and start
    /// the watching thread.
    fn watch() -> Result<Signals> {
        use std::sync::atomic::{AtomicBool, Ordering};
        use tokio::signal::unix::{signal, SignalKind};
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the signal runtime")?;
        let (mut interrupt, mut terminate) = {
            let _entered = runtime.enter();
            (
                signal(SignalKind::interrupt()).context("watching SIGINT")?,
                signal(SignalKind::terminate()).context("watching SIGTERM")?,
            )
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let over = std::sync::Arc::new(AtomicBool::new(false));
        let seen_over = std::sync::Arc::clone(&over);
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                let mut tx = Some(tx);
                runtime.block_on(async {
                    loop {
                        let name = tokio::select! {
                            _ = interrupt.recv() => "SIGINT",
                            _ = terminate.recv() => "SIGTERM",
                        };
                        if !seen_over.load(Ordering::SeqCst) {
                            if let Some(tx) = tx.take() {
                                tracing::debug!("{name}: ending the recording");
                                let _ = tx.send(());
                                continue;
                            }
                        }
                        crate::output::remove_pending_temporaries();
                        eprintln!("profctl: {name}: stopping now; outputs not written");
                        std::process::exit(130);
                    }
                })
            })
            .context("starting the signal thread")?;
        Ok(Signals {
            first: Some(rx),
            over,
        })
    }

    /// A future that resolves at the first signal.
    fn first(&mut self) -> impl std::future::Future<Output = ()> {
        let rx = self.first.take();
        async move {
            let signalled = match rx {
                Some(rx) => rx.await.is_ok(),
                None => false,
            };
            if !signalled {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Sampling is over: any signal from now on ends profctl.
    fn sampling_over(&self) {
        self.over.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Least time between two returns of free heap to the kernel while naming windows.
const TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Name every window as it arrives and merge them; with `report`, print a line per window.
fn name_windows(
    mut symbolizer: recorder::Symbolizer,
    windows: std::sync::mpsc::Receiver<recorder::ClosedWindow>,
    report: bool,
    mut pprof: Option<crate::pprof_out::PprofOut>,
) -> (
    profile::Profile,
    ResolveStats,
    Option<crate::pprof_out::PprofOut>,
) {
    let mut total = profile::Profile::new();
    let mut stats = ResolveStats::default();
    let mut first_start = None;
    let mut last_trim = None;
    for closed in windows {
        let (profile, window_stats) = match pprof.as_mut() {
            Some(out) => {
                let (profile, located, stats) = symbolizer.symbolize_located(&closed.window);
                out.add_window(&closed.window, &located);
                (profile, stats)
            }
            None => symbolizer.symbolize(&closed.window),
        };
        // Files no process maps any more: what the symbolizer holds for them can go.
        for &file in &closed.released_files {
            symbolizer.evict_file(file);
        }
        for &(pid, start) in &closed.ended_processes {
            symbolizer.evict_process(pid, start);
        }
        // Pages of mapped debug files stay in the page cache, not in profctl's resident set;
        // DWARF indexes no window used since the last one go.
        symbolizer.trim();
        // Heap freed by released files goes back to the kernel, at most once a minute:
        // trimming costs a walk of the heap and the page faults of growing it again.
        if !closed.released_files.is_empty()
            && last_trim.is_none_or(|t: std::time::Instant| t.elapsed() >= TRIM_INTERVAL)
        {
            recorder::release_free_memory();
            last_trim = Some(std::time::Instant::now());
        }
        if report {
            let start = *first_start.get_or_insert(closed.window.start);
            eprintln!(
                "{}",
                window_line(&closed, &profile, start, &symbolizer.sizes())
            );
        }
        if total.total() == 0 {
            total = profile;
        } else {
            total.merge(&profile);
        }
        stats.merge(&window_stats);
    }
    symbolizer.save_caches();
    (total, stats, pprof)
}

/// One line about a closed window: its time, samples, hottest functions, and the recording's
/// state then (for watching a long recording's memory and bounds).
fn window_line(
    closed: &recorder::ClosedWindow,
    profile: &profile::Profile,
    first_start: u64,
    symbols: &symbolize::service::ServiceSizes,
) -> String {
    let w = &closed.window;
    let t = &closed.tracked;
    let secs = |ns: u64| ns.saturating_sub(first_start) as f64 / 1e9;
    let total = profile.total().max(1) as f64;
    let hottest: Vec<String> = profile
        .hottest(3)
        .into_iter()
        .map(|(name, n)| {
            format!(
                "{} {:.0}%",
                crate::output::printable(name),
                100.0 * n as f64 / total
            )
        })
        .collect();
    let usage = recorder::ProcessUsage::now();
    format!(
        "profctl: window {:.1}-{:.1} s: {} samples, {} stacks; hottest: {}; tracking {} processes, {} threads, {} mappings, {} files, {} pinned, {} unwinders, {} unwind sections; {} symbolizers, {:.1} MB symbolizers (estimated), {} names cached, {} JIT maps; {} open fds, {:.1} MB resident, {:.1} MB anonymous, {:.1} ms CPU",
        secs(w.start),
        secs(w.end),
        profile.total(),
        w.stacks.len(),
        if hottest.is_empty() { "-".to_string() } else { hottest.join(", ") },
        t.processes,
        t.threads,
        t.mappings,
        t.files,
        t.pinned,
        t.unwinder_processes,
        t.unwind_sections,
        symbols.symbolizers,
        symbols.symbolizer_bytes as f64 / 1e6,
        symbols.names + symbols.kernel_names,
        symbols.jit_maps,
        recorder::open_fds().unwrap_or(0),
        recorder::resident_bytes().unwrap_or(0) as f64 / 1e6,
        recorder::anonymous_resident_bytes().unwrap_or(0) as f64 / 1e6,
        usage.cpu().as_secs_f64() * 1e3,
    )
}

fn title(args: &RecordArgs) -> String {
    match (&args.pid, args.command.is_empty()) {
        (Some(pid), _) => format!("profctl: process {pid}"),
        (None, false) => {
            let cmd: Vec<String> = args
                .command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            format!("profctl: {}", cmd.join(" "))
        }
        (None, true) => "profctl: whole system".to_string(),
    }
}

/// Event, frequency, duration, samples, lost samples and stack quality, for the SVG.
fn subtitle(r: &Recording, quality: Option<&str>) -> String {
    let mut s = format!(
        "{} at {} Hz, {:.1} s, {} samples, {} lost{}",
        r.event,
        r.frequency,
        r.duration.as_secs_f64(),
        r.stats.samples,
        r.stats.lost,
        if r.kernel_included {
            ""
        } else {
            ", user space only"
        }
    );
    if let Some(q) = quality {
        s.push_str("; stacks ");
        s.push_str(q);
    }
    s
}

/// How complete the DWARF-unwound stacks are, when they were unwound.
fn stack_quality(stats: &ResolveStats) -> Option<String> {
    let overall = &stats.unwind.overall;
    (overall.total() > 0).then(|| overall.describe())
}

fn print_summary(
    r: &Recording,
    resolved: &ResolveStats,
    written: &[String],
    post: Duration,
    verbose: bool,
) {
    // Written at once at the end: stderr is unbuffered, and each piece of each line would
    // otherwise be a write of its own.
    let mut out = String::new();
    macro_rules! say {
        ($($arg:tt)*) => {{
            let _ = writeln!(out, $($arg)*);
        }};
    }
    say!(
        "profctl: {} samples in {:.1} s ({} at {} Hz{}), {} lost, {} throttled, embedded",
        r.stats.samples,
        r.duration.as_secs_f64(),
        r.event,
        r.frequency,
        if r.kernel_included {
            ", with kernel frames"
        } else {
            ", user space only"
        },
        r.stats.lost,
        r.stats.throttled,
    );
    if r.stats.malformed_records + r.stats.malformed_batches > 0 {
        say!(
            "profctl: skipped {} malformed records and {} malformed ring batches",
            r.stats.malformed_records,
            r.stats.malformed_batches
        );
    }
    if let Some(q) = stack_quality(resolved) {
        say!("profctl: user stacks ({} unwinding): {q}", r.call_graph);
        for (binary, counts) in resolved.unwind.worst_binaries(3) {
            say!(
                "profctl:   stopped early in {}: {}",
                crate::output::printable(binary),
                counts.describe()
            );
        }
    }
    let user = &resolved.user;
    say!(
        "profctl: {:.1}% of frames unnamed ({} user addresses in {} files, {} kernel addresses)",
        resolved.unnamed_share() * 100.0,
        user.cache_misses,
        user.files,
        resolved.kernel_addresses
    );
    if user.debuginfod_fetched > 0 || !user.debuginfod_failures.is_empty() {
        say!(
            "profctl: debuginfod: {} debug files fetched",
            user.debuginfod_fetched
        );
        for failure in &user.debuginfod_failures {
            say!(
                "profctl:   could not fetch: {}",
                crate::output::printable(&failure.to_string())
            );
        }
    }
    if verbose {
        let usage = recorder::ProcessUsage::now();
        say!(
            "profctl: own CPU {:.1} ms ({:.1} ms user, {:.1} ms system), {} drain rounds (longest {:.1} ms), {} + {} context switches, {} page faults",
            usage.cpu().as_secs_f64() * 1e3,
            usage.user.as_secs_f64() * 1e3,
            usage.system.as_secs_f64() * 1e3,
            r.stats.drain_rounds,
            r.stats.longest_round.as_secs_f64() * 1e3,
            usage.voluntary_switches,
            usage.involuntary_switches,
            usage.minor_faults,
        );
        say!(
            "profctl: address cache: {} hits, {} misses, {} evicted; {} from the frame cache of earlier runs; {} JIT frames",
            user.cache_hits, user.cache_misses, user.cache_evictions, user.frame_cache_hits, user.jit_frames
        );
    }
    if let Some(status) = r.command_status {
        if !status.success() {
            say!("profctl: the command exited with {status}");
        }
    }
    if written.is_empty() {
        say!("profctl: no files written");
    } else {
        say!(
            "profctl: wrote {} ({} ms after recording ended)",
            written.join(", "),
            post.as_millis()
        );
    }
    eprint!("{out}");
}
