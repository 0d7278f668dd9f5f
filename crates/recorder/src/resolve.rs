//! Turning normalized windows into named frames: kernel frames from kallsyms, user frames from
//! the mapped file's symbolizer (see `user_symbols`).
//!
//! Runs once per distinct stack of a closed window, off the sampling thread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use profile::{Frame, FrameId, NormalizedWindow, Profile, StackEnd, UnwindQuality};
use rustc_hash::FxBuildHasher;
use symbolize::KernelSymbols;
use tracing::warn;

use crate::preload::Preloaded;
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
    /// Add the counts of `other` (another window's).
    pub fn merge(&mut self, other: &ResolveStats) {
        self.frames += other.frames;
        self.unnamed += other.unnamed;
        self.kernel_addresses += other.kernel_addresses;
        self.user.merge(&other.user);
        self.unwind.merge(&other.unwind);
    }

    /// Share of frames left unnamed, 0.0–1.0.
    pub fn unnamed_share(&self) -> f64 {
        if self.frames == 0 {
            0.0
        } else {
            self.unnamed as f64 / self.frames as f64
        }
    }
}

/// Kernel symbols, loaded once in the background and shared.
#[derive(Clone, Default)]
pub(crate) struct KernelLoader(Arc<Mutex<KernelSlot>>);

#[derive(Default)]
enum KernelSlot {
    #[default]
    NotStarted,
    Loading(std::thread::JoinHandle<Option<KernelSymbols>>),
    Ready(Option<Arc<KernelSymbols>>),
}

impl KernelLoader {
    /// Start reading /proc/kallsyms in a background thread (once; later calls do nothing).
    fn start(&self) {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*slot, KernelSlot::NotStarted) {
            if let Ok(handle) = std::thread::Builder::new()
                .name("kallsyms".into())
                .spawn(load_kernel_symbols)
            {
                *slot = KernelSlot::Loading(handle);
            }
        }
    }

    /// The kernel symbols, waiting for the background load (or loading them now).
    fn get(&self) -> Option<Arc<KernelSymbols>> {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let ready = match std::mem::take(&mut *slot) {
            KernelSlot::Ready(k) => k,
            KernelSlot::Loading(handle) => handle.join().ok().flatten().map(Arc::new),
            KernelSlot::NotStarted => load_kernel_symbols().map(Arc::new),
        };
        *slot = KernelSlot::Ready(ready.clone());
        ready
    }
}

/// What the sampling side hands the symbolizer while it records: symbolizers opened ahead and
/// the kernel symbols being loaded. Get one from [`Symbolizer::feed`].
#[derive(Clone, Default)]
pub struct SymbolFeed {
    pub(crate) preloaded: Arc<Mutex<Preloaded>>,
    pub(crate) kernel: KernelLoader,
}

impl SymbolFeed {
    /// Start loading kernel symbols in the background.
    pub fn load_kernel_symbols(&self) {
        self.kernel.start();
    }
}

/// Names the frames of normalized windows. Long-lived: what it opened and named for one window
/// serves the next ones.
pub struct Symbolizer {
    user: UserSymbols,
    feed: SymbolFeed,
    kernel: Option<Option<Arc<KernelSymbols>>>,
}

impl Symbolizer {
    /// A symbolizer naming user frames as `options` say, keeping DWARF frames between runs in
    /// `frame_cache_dir` (None: not kept).
    pub fn new(options: ResolveOptions, frame_cache_dir: Option<std::path::PathBuf>) -> Symbolizer {
        let feed = SymbolFeed::default();
        Symbolizer {
            user: UserSymbols::new(
                options,
                feed.preloaded.clone(),
                symbolize::FrameCache::new(frame_cache_dir),
            ),
            feed,
            kernel: None,
        }
    }

    /// The feed a recording fills for this symbolizer (pass it to [`crate::record`]).
    pub fn feed(&self) -> SymbolFeed {
        self.feed.clone()
    }

    fn kernel_frame(
        &mut self,
        profile: &mut Profile,
        names: &mut HashMap<u64, (FrameId, bool), FxBuildHasher>,
        addr: u64,
    ) -> (FrameId, bool) {
        if let Some(&f) = names.get(&addr) {
            return f;
        }
        let feed = &self.feed;
        let kernel = self.kernel.get_or_insert_with(|| feed.kernel.get());
        let frame = match kernel.as_ref().and_then(|k| k.lookup(addr)) {
            Some(sym) => (profile.intern(sym.name), true),
            None => (profile.intern("[kernel]"), false),
        };
        names.insert(addr, frame);
        frame
    }

    /// Symbolize every stack of `window` into a profile whose stacks start with the thread's
    /// command name.
    pub fn symbolize(&mut self, window: &NormalizedWindow) -> (Profile, ResolveStats) {
        let mut profile = Profile::new();
        let unknown = profile.intern("[unknown]");
        let truncated = profile.intern("[truncated]");
        let user_before = self.user.stats.clone();
        let frame_cache_hits_before = self.user.frame_cache.hits;
        let mut kernel_names: HashMap<u64, (FrameId, bool), FxBuildHasher> = HashMap::default();
        let mut stats = ResolveStats {
            unwind: window.quality.clone(),
            ..ResolveStats::default()
        };
        let mut frames: Vec<FrameId> = Vec::with_capacity(256);
        for stack in &window.stacks {
            frames.clear();
            let thread = &window.threads[stack.thread as usize];
            let (kernel, user) = window.frames_of(stack);
            let mut unnamed = 0u64;
            for frame in kernel {
                if let Frame::Kernel(addr) = *frame {
                    let (id, named) = self.kernel_frame(&mut profile, &mut kernel_names, addr);
                    frames.push(id);
                    unnamed += !named as u64;
                }
            }
            for &frame in user {
                let named =
                    self.user
                        .push_frames(&mut profile, window, thread.pid, frame, &mut frames);
                unnamed += !named as u64;
            }
            if stack.user_end == StackEnd::Truncated {
                frames.push(truncated);
            }
            if frames.is_empty() {
                frames.push(unknown);
                unnamed += 1;
            }
            stats.frames += frames.len() as u64 * stack.count;
            stats.unnamed += unnamed * stack.count;
            let comm = match &thread.comm {
                Some(name) => profile.intern(name),
                None if thread.pid == 0 => profile.intern("swapper"),
                None => profile.intern(&format!("[pid {}]", thread.pid)),
            };
            frames.push(comm);
            frames.reverse();
            profile.add(&frames, stack.count);
        }
        stats.kernel_addresses = kernel_names.len() as u64;
        stats.user = self.user.stats.since(&user_before);
        stats.user.frame_cache_hits = self.user.frame_cache.hits - frame_cache_hits_before;
        (profile, stats)
    }

    /// Keep the frames named so far on disk, for later runs.
    pub fn save_caches(&mut self) {
        if let Err(err) = self.user.frame_cache.save() {
            tracing::debug!(%err, "cannot save the frame cache");
        }
    }
}

/// Read /proc/kallsyms, saying why kernel frames will stay unnamed when it cannot be used.
fn load_kernel_symbols() -> Option<KernelSymbols> {
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
