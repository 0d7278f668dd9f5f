//! Turning raw stacks into named frames: kernel frames from kallsyms, user frames through the
//! process's mappings and the mapped file's symbolizer (see `user_symbols`).
//!
//! Runs once per distinct stack after recording (never on the per-sample path).

use std::collections::HashMap;

use procmap::ProcessTable;
use profile::{FrameId, Profile};
use rustc_hash::FxBuildHasher;
use sampler::context;
use symbolize::KernelSymbols;
use tracing::warn;
use unwind::{EndCounts, StackEnd, UnwindQuality};

use crate::recording::Recording;
use crate::sink::end_marker;
use crate::user_symbols::{ResolveOptions, UserSymbolStats, UserSymbols};

/// How well the frames were named.
#[derive(Clone, Debug, Default)]
pub struct ResolveStats {
    /// Frames in all samples (weighted by sample count).
    pub frames: u64,
    /// Of those, frames that could not be named (`module+0x…` or `[unknown]`).
    pub unnamed: u64,
    /// Distinct kernel addresses named.
    pub kernel_addresses: u64,
    /// User symbolization counters (files, address cache, debuginfod, JIT).
    pub user: UserSymbolStats,
    /// How DWARF-unwound stacks ended (empty in frame-pointer mode).
    pub unwind: UnwindQuality,
}

impl ResolveStats {
    /// Share of frames left unnamed, 0.0–1.0.
    pub fn unnamed_share(&self) -> f64 {
        if self.frames == 0 {
            0.0
        } else {
            self.unnamed as f64 / self.frames as f64
        }
    }
}

struct Resolver<'a> {
    processes: &'a ProcessTable,
    profile: Profile,
    user: UserSymbols<'a>,
    /// Loaded on the first kernel frame; None inside when unavailable.
    kernel: Option<Option<KernelSymbols>>,
    /// The background load started by the recording.
    kernel_loading: Option<std::thread::JoinHandle<Option<KernelSymbols>>>,
    kernel_frames: HashMap<u64, (FrameId, bool), FxBuildHasher>,
}

/// Symbolize every stack of `recording` into a profile whose stacks start with the thread's
/// command name.
pub fn resolve(recording: &mut Recording, options: &ResolveOptions) -> (Profile, ResolveStats) {
    let mut profile = Profile::new();
    let unknown = profile.intern("[unknown]");
    let truncated = profile.intern("[truncated]");
    let preloaded = recording
        .preloader
        .take()
        .map(|p| p.finish())
        .unwrap_or_default();
    let mut r = Resolver {
        processes: &recording.processes,
        profile,
        user: UserSymbols::new(
            options.clone(),
            &recording.pinned,
            preloaded,
            &mut recording.frame_cache,
        ),
        kernel: None,
        kernel_loading: recording.kernel_symbols.take(),
        kernel_frames: HashMap::default(),
    };
    let mut stats = ResolveStats::default();
    let mut frames: Vec<FrameId> = Vec::with_capacity(256);
    for (stack, raw) in recording.stacks.iter() {
        frames.clear();
        let time = raw.first_time;
        let mut in_kernel = false;
        let mut first = true;
        let mut unnamed = 0u64;
        let mut end = None;
        let mut outermost_user = None;
        for entry in stack.callchain.iter().copied() {
            if context::is_marker(entry) {
                match entry {
                    context::KERNEL => in_kernel = true,
                    context::USER => in_kernel = false,
                    end_marker::COMPLETE => end = Some(StackEnd::Complete),
                    end_marker::SPLICED => end = Some(StackEnd::Spliced),
                    end_marker::UNKNOWN => end = Some(StackEnd::Unknown),
                    end_marker::TRUNCATED => {
                        end = Some(StackEnd::Truncated);
                        frames.push(truncated);
                    }
                    _ => break, // guest or hypervisor frames: not ours to name
                }
                continue;
            }
            // Every entry but the sampled instruction is a return address: look up the call.
            let lookup = if first {
                entry
            } else {
                entry.saturating_sub(1)
            };
            first = false;
            let named = if in_kernel {
                let (id, named) = r.kernel_frame(lookup);
                frames.push(id);
                named
            } else {
                outermost_user = Some(lookup);
                r.user.push_frames(
                    &mut r.profile,
                    r.processes,
                    stack.pid,
                    lookup,
                    time,
                    &mut frames,
                )
            };
            unnamed += !named as u64;
        }
        if frames.is_empty() {
            frames.push(unknown);
            unnamed += 1;
        }
        if let Some(end) = end {
            stats.unwind.overall.add(end, raw.count);
            let binary = outermost_user
                .and_then(|addr| r.processes.find_mapping(stack.pid, addr, time))
                .map_or("[unknown]", |m| r.processes.files().get(m.file).basename());
            match stats.unwind.by_binary.get_mut(binary) {
                Some(counts) => counts.add(end, raw.count),
                None => {
                    let mut counts = EndCounts::default();
                    counts.add(end, raw.count);
                    stats.unwind.by_binary.insert(binary.to_string(), counts);
                }
            }
        }
        stats.frames += frames.len() as u64 * raw.count;
        stats.unnamed += unnamed * raw.count;
        let comm = match r.processes.thread_name(stack.pid, stack.tid, time) {
            Some(name) => r.profile.intern(name),
            None if stack.pid == 0 => r.profile.intern("swapper"),
            None => r.profile.intern(&format!("[pid {}]", stack.pid)),
        };
        frames.push(comm);
        frames.reverse();
        r.profile.add(&frames, raw.count);
    }
    stats.kernel_addresses = r.kernel_frames.len() as u64;
    stats.user = r.user.stats.clone();
    stats.user.frame_cache_hits = r.user.frame_cache.hits;
    if let Err(err) = r.user.frame_cache.save() {
        tracing::debug!(%err, "cannot save the frame cache");
    }
    (r.profile, stats)
}

impl Resolver<'_> {
    fn kernel_frame(&mut self, addr: u64) -> (FrameId, bool) {
        if let Some(&f) = self.kernel_frames.get(&addr) {
            return f;
        }
        let kernel = match &mut self.kernel {
            Some(kernel) => kernel,
            slot => slot.insert(match self.kernel_loading.take() {
                Some(handle) => handle.join().ok().flatten(),
                None => None,
            }),
        };
        let frame = match kernel.as_ref().and_then(|k| k.lookup(addr)) {
            Some(sym) => (self.profile.intern(sym.name), true),
            None => (self.profile.intern("[kernel]"), false),
        };
        self.kernel_frames.insert(addr, frame);
        frame
    }
}

/// Read /proc/kallsyms, saying why kernel frames will stay unnamed when it cannot be used.
pub(crate) fn load_kernel_symbols() -> Option<KernelSymbols> {
    let loaded = match crate::user_cache_dir() {
        Some(dir) => KernelSymbols::load_cached(&dir),
        None => KernelSymbols::load(),
    };
    match loaded {
        Ok(k) if !k.is_restricted() => Some(k),
        Ok(_) => {
            warn!("kernel symbol addresses are hidden (kernel.kptr_restrict); kernel frames stay unnamed");
            None
        }
        Err(err) => {
            warn!(%err, "cannot read kernel symbols; kernel frames stay unnamed");
            None
        }
    }
}
