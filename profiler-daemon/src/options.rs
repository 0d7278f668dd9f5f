//! The recorder's options for the daemon's configuration: the continuous system-wide stream,
//! an on-demand recording of one process, and the frequencies the ring buffers and the kernel
//! allow.

use std::time::Duration;

use recorder::{RecordOptions, RecordTarget};
use sampler::EventKind;
use tracing::warn;

use crate::config::Config;

/// The recorder's options for the daemon's stream (every CPU, one window per slice).
pub fn record_options(config: &Config, event: EventKind) -> RecordOptions {
    let s = &config.sampling;
    let cache = &config.storage.cache_dir;
    let mut options = RecordOptions::new(RecordTarget::System);
    options.frequency = s.frequency.0;
    options.include_kernel = s.kernel;
    options.call_graph = s.call_graph.to_recorder();
    options.stack_bytes = s.stack_bytes.0;
    options.event = sampler::EventChoice::Force(event);
    options.window = Some(s.slice.0);
    options.drain_interval = recorder::defaults::WINDOW_DRAIN_INTERVAL;
    options.drain_interval_at_rest = Some(recorder::defaults::WINDOW_REST_INTERVAL);
    options.ring_pages = match options.call_graph {
        recorder::CallGraph::Fp => sampler::defaults::RING_PAGES,
        _ => recorder::defaults::ring_pages_streaming(options.frequency, options.stack_bytes),
    };
    options.preload_symbols = Some(daemon_debug_search(config));
    options.frame_cache_dir = Some(cache.join("frames"));
    // Off CPU too: CPU samples and every interval off CPU (blocked or preempted), so that
    // a query may ask for either or both (`measure=off_cpu`, `wall`).
    if s.off_cpu {
        options.measure = recorder::Measure::Wall;
    }
    options
}

/// The recorder's options for an on-demand recording of process `pid` (one window, no frame
/// cache of its own).
pub fn recording_options(
    config: &Config,
    event: EventKind,
    pid: u32,
    frequency: u64,
    duration: Duration,
    kernel: bool,
) -> RecordOptions {
    let mut options = record_options(config, event);
    options.target = RecordTarget::Pid(pid);
    options.frequency = frequency;
    options.duration = Some(duration);
    options.include_kernel = kernel;
    options.window = None;
    options.measure = recorder::Measure::Cpu;
    options.drain_interval = Duration::from_millis(250);
    options.drain_interval_at_rest = None;
    options.frame_cache_dir = None;
    options.ring_pages = match options.call_graph {
        recorder::CallGraph::Fp => sampler::defaults::RING_PAGES,
        _ => recorder::defaults::ring_pages_with_stacks(options.frequency, options.stack_bytes),
    };
    options
}

/// The debug-file search with the daemon's caches.
pub fn daemon_debug_search(config: &Config) -> symbolize::DebugSearch {
    let cache = &config.storage.cache_dir;
    symbolize::DebugSearch {
        section_cache: Some(cache.join("dwarf")),
        symbol_cache: Some(cache.join("symbols")),
        ..symbolize::DebugSearch::system()
    }
}

/// The highest sampling frequency that the ring buffers of a recording opened with
/// `options` hold as well as ones sized for it would: raising the frequency past it needs a
/// restart (larger rings).
pub fn ring_frequency_limit(options: &RecordOptions) -> u64 {
    const MAX: u64 = 100_000;
    let pages = |hz: u64| match options.call_graph {
        recorder::CallGraph::Fp => sampler::defaults::RING_PAGES,
        _ => recorder::defaults::ring_pages_streaming(hz, options.stack_bytes),
    };
    if pages(MAX) <= options.ring_pages {
        return MAX;
    }
    // The pages grow with the frequency: the highest that needs no more than those opened.
    let (mut lo, mut hi) = (1, MAX);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if pages(mid) <= options.ring_pages {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo.max(options.frequency)
}

/// The frequency `config` asks for, within the kernel's maximum and `ring_limit`, logging
/// why when lower.
pub fn target_frequency(config: &Config, ring_limit: u64) -> u64 {
    let asked = config.sampling.frequency.0;
    let mut hz = asked;
    if let Some(max) = sampler::max_sample_rate().filter(|&m| m > 0) {
        if hz > max {
            warn!("sampling.frequency {hz} Hz is above the kernel's maximum: {max} Hz (kernel.perf_event_max_sample_rate)");
            hz = max;
        }
    }
    if hz > ring_limit {
        warn!("sampling.frequency {asked} Hz needs larger ring buffers than those opened at start: {ring_limit} Hz until profilerd is restarted");
        hz = ring_limit;
    }
    hz
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_limit_follows_the_pages_opened() {
        let mut options = recorder::RecordOptions::new(recorder::RecordTarget::System);
        options.stack_bytes = 16 * 1024;
        options.frequency = 99;
        options.ring_pages = recorder::defaults::ring_pages_streaming(99, 16 * 1024);
        let limit = ring_frequency_limit(&options);
        assert!((99..999).contains(&limit), "{limit}");
        assert_eq!(
            recorder::defaults::ring_pages_streaming(limit, 16 * 1024),
            options.ring_pages
        );
        assert!(
            recorder::defaults::ring_pages_streaming(limit + 1, 16 * 1024) > options.ring_pages
        );
        // Rings at their largest: any frequency.
        options.frequency = 999;
        options.ring_pages = recorder::defaults::ring_pages_streaming(999, 16 * 1024);
        assert_eq!(ring_frequency_limit(&options), 100_000);
    }
}
