//! Turning raw stacks into named frames: kernel frames from kallsyms, user frames through the
//! process's mappings and the mapped file's symbol table.
//!
//! Runs once per distinct stack after recording (never on the per-sample path), with a cache
//! per distinct (file, offset) so each address is symbolized once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use procmap::{FileId, Mapping, ProcessTable};
use profile::{FrameId, Profile};
use rustc_hash::FxBuildHasher;
use sampler::context;
use symbolize::{demangle, FileKey, FileOffset, KernelSymbols, SymbolCache};
use tracing::{debug, warn};

use crate::recording::Recording;

/// How well the frames were named.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResolveStats {
    /// Frames in all samples (weighted by sample count).
    pub frames: u64,
    /// Of those, frames that could not be named (`module+0x…` or `[unknown]`).
    pub unnamed: u64,
    /// Distinct addresses symbolized.
    pub addresses: u64,
    /// Files whose symbols were read.
    pub files: usize,
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

/// A named frame and whether the name is a real symbol.
#[derive(Clone, Copy)]
struct Frame {
    id: FrameId,
    named: bool,
}

struct Resolver<'a> {
    processes: &'a ProcessTable,
    profile: Profile,
    symbols: SymbolCache,
    kernel: Option<KernelSymbols>,
    user_frames: HashMap<(FileId, u64), Frame, FxBuildHasher>,
    kernel_frames: HashMap<u64, Frame, FxBuildHasher>,
    unknown: Frame,
    reported: std::collections::HashSet<FileId>,
}

/// Symbolize every stack of `recording` into a profile whose stacks start with the thread's
/// command name.
pub fn resolve(recording: &Recording) -> (Profile, ResolveStats) {
    let mut profile = Profile::new();
    let unknown = Frame {
        id: profile.intern("[unknown]"),
        named: false,
    };
    let kernel = if recording.kernel_included {
        match KernelSymbols::load() {
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
    } else {
        None
    };
    let mut r = Resolver {
        processes: &recording.processes,
        profile,
        symbols: SymbolCache::new(),
        kernel,
        user_frames: HashMap::default(),
        kernel_frames: HashMap::default(),
        unknown,
        reported: Default::default(),
    };
    let mut stats = ResolveStats::default();
    let mut frames: Vec<FrameId> = Vec::with_capacity(128);
    for (stack, raw) in recording.stacks.iter() {
        frames.clear();
        let time = raw.first_time;
        let mut in_kernel = false;
        let mut first = true;
        let mut unnamed = 0u64;
        for entry in stack.callchain.iter().copied() {
            if context::is_marker(entry) {
                match entry {
                    context::KERNEL => in_kernel = true,
                    context::USER => in_kernel = false,
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
            let frame = if in_kernel {
                r.kernel_frame(lookup)
            } else {
                r.user_frame(stack.pid, lookup, time)
            };
            unnamed += !frame.named as u64;
            frames.push(frame.id);
        }
        if frames.is_empty() {
            frames.push(r.unknown.id);
            unnamed += 1;
        }
        stats.frames += frames.len() as u64 * raw.count;
        stats.unnamed += unnamed * raw.count;
        let comm = match r.processes.thread_name(stack.pid, stack.tid, time) {
            Some(name) => name.to_string(),
            None if stack.pid == 0 => "swapper".to_string(),
            None => format!("[pid {}]", stack.pid),
        };
        frames.push(r.profile.intern(&comm));
        frames.reverse();
        r.profile.add(&frames, raw.count);
    }
    stats.addresses = (r.user_frames.len() + r.kernel_frames.len()) as u64;
    stats.files = r.symbols.len();
    (r.profile, stats)
}

impl Resolver<'_> {
    fn kernel_frame(&mut self, addr: u64) -> Frame {
        if let Some(&f) = self.kernel_frames.get(&addr) {
            return f;
        }
        let frame = match self.kernel.as_ref().and_then(|k| k.lookup(addr)) {
            Some(sym) => Frame {
                id: self.profile.intern(sym.name),
                named: true,
            },
            None => Frame {
                id: self.profile.intern("[kernel]"),
                named: false,
            },
        };
        self.kernel_frames.insert(addr, frame);
        frame
    }

    fn user_frame(&mut self, pid: u32, addr: u64, time: u64) -> Frame {
        let Some(mapping) = self.processes.find_mapping(pid, addr, time).copied() else {
            return self.unknown;
        };
        let offset = mapping.file_offset(addr);
        if let Some(&f) = self.user_frames.get(&(mapping.file, offset)) {
            return f;
        }
        let frame = self.symbolize(pid, &mapping, offset);
        self.user_frames.insert((mapping.file, offset), frame);
        frame
    }

    fn symbolize(&mut self, pid: u32, mapping: &Mapping, offset: u64) -> Frame {
        let file = self.processes.files().get(mapping.file);
        if file.is_pseudo() {
            let name = format!("{}+{:#x}", file.path, offset);
            return Frame {
                id: self.profile.intern(&name),
                named: false,
            };
        }
        let key = match (&file.build_id, file.dev_ino) {
            (Some(id), _) => FileKey::BuildId(id.clone()),
            (None, Some((dev, ino))) => FileKey::Path {
                path: PathBuf::from(&file.path),
                dev,
                ino,
            },
            (None, None) => FileKey::Path {
                path: PathBuf::from(&file.path),
                dev: 0,
                ino: 0,
            },
        };
        let path = open_path(pid, &file.path);
        let (name, named) = match self.symbols.get(&key, &path) {
            Ok(elf) => match elf.file_offset_to_addr(FileOffset(offset)) {
                Some(addr) => match elf.symbol(addr) {
                    Some(sym) => (demangle(sym.name).into_owned(), true),
                    None => (format!("{}+{:#x}", file.basename(), addr.0), false),
                },
                None => (format!("{}+{:#x}", file.basename(), offset), false),
            },
            Err(err) => {
                if self.reported.insert(mapping.file) {
                    warn!(file = %file.path, %err, "cannot read symbols");
                }
                (format!("{}+{:#x}", file.basename(), offset), false)
            }
        };
        Frame {
            id: self.profile.intern(&name),
            named,
        }
    }
}

/// The file as the process sees it (its own mount namespace), else as we see it.
fn open_path(pid: u32, path: &str) -> PathBuf {
    let in_root = PathBuf::from(format!("/proc/{pid}/root{path}"));
    if in_root.exists() {
        in_root
    } else {
        debug!(pid, path, "process root gone; opening the path directly");
        Path::new(path).to_path_buf()
    }
}
