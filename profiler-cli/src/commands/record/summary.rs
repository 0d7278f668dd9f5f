//! What an embedded recording says of itself: the SVG's title and subtitle, and the summary
//! printed when it ends.

use std::fmt::Write as _;
use std::time::Duration;

use profile::EndCounts;
use recorder::{Measure, Recording, ResolveStats};

use crate::cli::RecordArgs;

/// Append a line to `out`, a `String` (writing to one cannot fail).
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

/// The SVG's title: what was recorded.
pub fn title(args: &RecordArgs) -> String {
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

/// Context switches seen, sampled and lost, and what the counts are, for off-CPU and
/// wall-clock recordings (None for CPU recordings).
pub fn switches_line(r: &Recording) -> Option<String> {
    let what = match r.measure {
        Measure::Cpu => return None,
        Measure::OffCpu => "blocked",
        Measure::Wall => "off CPU",
    };
    let s = &r.stats.switches;
    let scaled = if s.scaled > 0 {
        format!(" (standing for {} more, their time scaled)", s.scaled)
    } else {
        String::new()
    };
    Some(format!(
        "{:.2} s {what}; {} context switches seen, {} sampled{scaled}, {} lost, {} unmatched; counts are microseconds",
        s.off_cpu_ns as f64 / 1e9,
        s.seen,
        s.sampled,
        s.lost,
        s.unmatched,
    ))
}

/// Event, frequency, duration, samples, lost samples and stack quality, for the SVG.
pub fn subtitle(r: &Recording, quality: Option<&str>) -> String {
    if r.measure == Measure::OffCpu {
        let mut s = format!("off-CPU, {:.1} s", r.duration.as_secs_f64());
        if let Some(line) = switches_line(r) {
            s.push_str(", ");
            s.push_str(&line);
        }
        return s;
    }
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
    if let Some(line) = switches_line(r) {
        s.push_str("; wall-clock: ");
        s.push_str(&line);
    }
    s
}

/// How complete the DWARF-unwound stacks are, when they were unwound.
pub fn stack_quality(stats: &ResolveStats) -> Option<String> {
    let overall = &stats.unwind.overall;
    (overall.total() > 0).then(|| overall.describe())
}

/// Share of truncated stacks from which the summary suggests a larger `--stack-size`.
const TRUNCATED_HINT: f64 = 0.05;

/// When many stacks ran out of the copied stack, the `--stack-size` that copies twice as much
/// (within the kernel's limit), as a line of the summary.
fn stack_size_hint(counts: &EndCounts, stack_bytes: u32) -> Option<String> {
    let truncated = counts.truncated as f64 / counts.total().max(1) as f64;
    let larger = stack_bytes.saturating_mul(2).min(sampler::MAX_STACK_BYTES);
    (truncated >= TRUNCATED_HINT && larger > stack_bytes).then(|| {
        format!(
            "{:.1}% of the stacks were deeper than the {stack_bytes} bytes copied with each sample: --stack-size {larger} copies more (at more cost per sample)",
            truncated * 100.0
        )
    })
}

/// The summary printed when the recording's outputs are written: samples, lost, stacks'
/// quality, unnamed frames, debuginfod, and (`verbose`) profctl's own costs.
pub fn print_summary(
    r: &Recording,
    resolved: &ResolveStats,
    written: &[String],
    post: Duration,
    verbose: bool,
) {
    // Written at once at the end: stderr is unbuffered, and each piece of each line would
    // otherwise be a write of its own.
    let mut out = String::new();
    recording_lines(&mut out, r);
    naming_lines(&mut out, r, resolved);
    if verbose {
        own_costs(&mut out, r, &resolved.user);
    }
    if let Some(status) = r.command_status {
        if !status.success() {
            say!(out, "profctl: the command exited with {status}");
        }
    }
    if written.is_empty() {
        say!(out, "profctl: no files written");
    } else {
        say!(
            out,
            "profctl: wrote {} ({} ms after recording ended)",
            written.join(", "),
            post.as_millis()
        );
    }
    eprint!("{out}");
}

/// What was recorded: samples (or off-CPU time), lost, throttled, switches, malformed records.
fn recording_lines(out: &mut String, r: &Recording) {
    if r.measure == Measure::OffCpu {
        say!(
            out,
            "profctl: off-CPU recording of {:.1} s{}, embedded",
            r.duration.as_secs_f64(),
            if r.kernel_included {
                ", with kernel frames"
            } else {
                ", user space only"
            },
        );
    } else {
        say!(
            out,
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
    }
    if let Some(line) = switches_line(r) {
        say!(out, "profctl: {line}");
    }
    if r.stats.malformed_records + r.stats.malformed_batches > 0 {
        say!(
            out,
            "profctl: skipped {} malformed records and {} malformed ring batches",
            r.stats.malformed_records,
            r.stats.malformed_batches
        );
    }
}

/// How well stacks were walked and frames named, and what debuginfod fetched.
fn naming_lines(out: &mut String, r: &Recording, resolved: &ResolveStats) {
    if let Some(q) = stack_quality(resolved) {
        say!(
            out,
            "profctl: user stacks ({} unwinding): {q}",
            r.call_graph
        );
        for (binary, counts) in resolved.unwind.worst_binaries(3) {
            say!(
                out,
                "profctl:   stacks ending in {}: {}",
                crate::output::printable(binary),
                counts.describe()
            );
        }
        if let Some(hint) = stack_size_hint(&resolved.unwind.overall, r.stack_bytes) {
            say!(out, "profctl:   {hint}");
        }
    }
    let user = &resolved.user;
    say!(
        out,
        "profctl: {:.1}% of frames unnamed ({} user addresses in {} files, {} kernel addresses)",
        resolved.unnamed_share() * 100.0,
        user.cache_misses,
        user.files,
        resolved.kernel_addresses
    );
    if user.debuginfod_fetched > 0 || !user.debuginfod_failures.is_empty() {
        say!(
            out,
            "profctl: debuginfod: {} debug files fetched",
            user.debuginfod_fetched
        );
        for failure in &user.debuginfod_failures {
            say!(
                out,
                "profctl:   could not fetch: {}",
                crate::output::printable(&failure.to_string())
            );
        }
    }
}

/// `-v`: profctl's own CPU, wake-ups and page faults, and its address cache.
fn own_costs(out: &mut String, r: &Recording, user: &symbolize::service::UserSymbolStats) {
    let usage = recorder::ProcessUsage::now();
    let _ = writeln!(
        out,
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
    let _ = writeln!(
        out,
        "profctl: address cache: {} hits, {} misses, {} evicted; {} from the frame cache of earlier runs; {} JIT frames",
        user.cache_hits, user.cache_misses, user.cache_evictions, user.frame_cache_hits, user.jit_frames
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(complete: u64, truncated: u64) -> EndCounts {
        EndCounts {
            complete,
            truncated,
            ..EndCounts::default()
        }
    }

    #[test]
    fn many_truncated_stacks_suggest_twice_the_stack_size_within_the_limit() {
        assert_eq!(stack_size_hint(&counts(96, 4), 16384), None);
        let hint = stack_size_hint(&counts(50, 50), 16384).unwrap();
        assert!(
            hint.starts_with("50.0% of the stacks") && hint.contains("--stack-size 32768"),
            "{hint}"
        );
        let near = stack_size_hint(&counts(50, 50), 40960).unwrap();
        assert!(
            near.contains(&format!("--stack-size {}", sampler::MAX_STACK_BYTES)),
            "{near}"
        );
        assert_eq!(
            stack_size_hint(&counts(50, 50), sampler::MAX_STACK_BYTES),
            None
        );
        assert_eq!(stack_size_hint(&EndCounts::default(), 16384), None);
    }
}
