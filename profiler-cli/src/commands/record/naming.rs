//! Naming an embedded recording's windows as they close (on a thread of their own), merging
//! them into one profile (and pprof), and the line printed per window with `--window`.

use recorder::ResolveStats;

use super::pprof_out::PprofOut;

/// Least time between two returns of free heap to the kernel while naming windows.
const TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// Name every window as it arrives and merge them; with `report`, print a line per window.
pub fn name_windows(
    mut symbolizer: recorder::Symbolizer,
    windows: std::sync::mpsc::Receiver<recorder::ClosedWindow>,
    report: bool,
    mut pprof: Option<PprofOut>,
) -> (profile::Profile, ResolveStats, Option<PprofOut>) {
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
