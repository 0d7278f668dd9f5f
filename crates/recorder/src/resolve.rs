//! Turning raw stacks into named frames: kernel frames from kallsyms, user frames through the
//! process's mappings and the mapped file's symbol table.
//!
//! Runs once per distinct stack after recording (never on the per-sample path), with a cache
//! per distinct (file, offset) so each address is symbolized once.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use procmap::{FileId, Mapping, ProcessTable};
use profile::{FrameId, Profile};
use rustc_hash::FxBuildHasher;
use sampler::context;
use symbolize::{
    build_id_debug_path, demangle, ElfFile, FileKey, FileOffset, KernelSymbols, SymbolCache,
};
use tracing::{debug, warn};

use crate::recording::Recording;
use crate::sink::end_marker;
use unwind::{EndCounts, StackEnd, UnwindQuality};

/// How well the frames were named.
#[derive(Clone, Debug, Default)]
pub struct ResolveStats {
    /// Frames in all samples (weighted by sample count).
    pub frames: u64,
    /// Of those, frames that could not be named (`module+0x…` or `[unknown]`).
    pub unnamed: u64,
    /// Distinct addresses symbolized.
    pub addresses: u64,
    /// Files whose symbols were read.
    pub files: usize,
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

/// A named frame and whether the name is a real symbol.
#[derive(Clone, Copy)]
struct Frame {
    id: FrameId,
    named: bool,
}

/// A mapped file's symbol sources: the file itself and, when installed, its debug file.
#[derive(Clone)]
struct Loaded {
    elf: Arc<ElfFile>,
    debug: Option<Arc<ElfFile>>,
}

struct Resolver<'a> {
    processes: &'a ProcessTable,
    profile: Profile,
    symbols: SymbolCache,
    /// Loaded on the first kernel frame; None inside when unavailable.
    kernel: Option<Option<KernelSymbols>>,
    /// The background load started by the recording.
    kernel_loading: Option<std::thread::JoinHandle<Option<KernelSymbols>>>,
    /// Per mapped file, loaded on its first frame; None inside when unreadable.
    loaded: HashMap<FileId, Option<Loaded>, FxBuildHasher>,
    vdso: Option<Option<Arc<ElfFile>>>,
    user_frames: HashMap<(FileId, u64), Frame, FxBuildHasher>,
    kernel_frames: HashMap<u64, Frame, FxBuildHasher>,
    unknown: Frame,
    truncated: FrameId,
}

/// Symbolize every stack of `recording` into a profile whose stacks start with the thread's
/// command name.
pub fn resolve(recording: &mut Recording) -> (Profile, ResolveStats) {
    let mut profile = Profile::new();
    let unknown = Frame {
        id: profile.intern("[unknown]"),
        named: false,
    };
    let truncated = profile.intern("[truncated]");
    let mut r = Resolver {
        processes: &recording.processes,
        profile,
        symbols: SymbolCache::new(),
        kernel: None,
        kernel_loading: recording.kernel_symbols.take(),
        loaded: HashMap::default(),
        vdso: None,
        user_frames: HashMap::default(),
        kernel_frames: HashMap::default(),
        unknown,
        truncated,
    };
    let mut stats = ResolveStats::default();
    let mut frames: Vec<FrameId> = Vec::with_capacity(128);
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
                        frames.push(r.truncated);
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
            let frame = if in_kernel {
                r.kernel_frame(lookup)
            } else {
                outermost_user = Some(lookup);
                r.user_frame(stack.pid, lookup, time)
            };
            unnamed += !frame.named as u64;
            frames.push(frame.id);
        }
        if frames.is_empty() {
            frames.push(r.unknown.id);
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
        let kernel = match &mut self.kernel {
            Some(kernel) => kernel,
            slot => slot.insert(match self.kernel_loading.take() {
                Some(handle) => handle.join().ok().flatten(),
                None => None,
            }),
        };
        let frame = match kernel.as_ref().and_then(|k| k.lookup(addr)) {
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
            tracing::trace!(pid, addr = format_args!("{addr:#x}"), time, "no mapping");
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
        let loaded = match self.loaded.get(&mapping.file) {
            Some(hit) => hit.clone(),
            None => {
                let loaded = self.load(pid, mapping.file);
                self.loaded.insert(mapping.file, loaded.clone());
                loaded
            }
        };
        let file = self.processes.files().get(mapping.file);
        let (name, named) = match loaded {
            Some(Loaded { elf, debug }) => match elf.file_offset_to_addr(FileOffset(offset)) {
                Some(addr) => {
                    let symbol = debug
                        .as_ref()
                        .and_then(|d| d.symbol(addr))
                        .or_else(|| elf.symbol(addr));
                    match symbol {
                        Some(sym) => (demangle(without_version(sym.name)).into_owned(), true),
                        None => (format!("{}+{:#x}", file.basename(), addr.0), false),
                    }
                }
                None => (format!("{}+{:#x}", file.basename(), offset), false),
            },
            None => (format!("{}+{:#x}", file.basename(), offset), false),
        };
        Frame {
            id: self.profile.intern(&name),
            named,
        }
    }

    /// Open a mapped file's symbol sources (once per file).
    fn load(&mut self, pid: u32, id: FileId) -> Option<Loaded> {
        let file = self.processes.files().get(id);
        if file.path == "[vdso]" {
            let vdso = self.vdso.get_or_insert_with(|| match own_vdso() {
                Ok(bytes) => ElfFile::parse(&bytes, "[vdso]").map(Arc::new).ok(),
                Err(err) => {
                    debug!(%err, "cannot read the vdso image");
                    None
                }
            });
            return vdso.clone().map(|elf| Loaded { elf, debug: None });
        }
        if file.is_pseudo() {
            return None;
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
        let elf = match self.symbols.get(&key, &open_path(pid, &file.path)) {
            Ok(elf) => elf,
            Err(err) => {
                let level_warn = !file.path.ends_with(" (deleted)");
                if level_warn {
                    warn!(file = %file.path, %err, "cannot read symbols; its frames stay unnamed");
                } else {
                    debug!(file = %file.path, %err, "cannot read symbols of a deleted file");
                }
                return None;
            }
        };
        let debug = elf.build_id().and_then(|build_id| {
            let path = build_id_debug_path(build_id)?;
            if !path.exists() {
                return None;
            }
            match self.symbols.get(&FileKey::DebugFile(build_id.to_vec()), &path) {
                Ok(debug) => {
                    debug!(file = %file.path, debug = %path.display(), "using the separate debug file");
                    Some(debug)
                }
                Err(err) => {
                    warn!(debug = %path.display(), %err, "ignoring an unusable debug file");
                    None
                }
            }
        });
        Some(Loaded { elf, debug })
    }
}

/// `clock_gettime@@GLIBC_2.17` → `clock_gettime`: symbol versions are noise in a flamegraph.
fn without_version(name: &str) -> &str {
    match name.find('@') {
        Some(at) if at > 0 => &name[..at],
        _ => name,
    }
}

/// Read /proc/kallsyms, saying why kernel frames will stay unnamed when it cannot be used.
pub(crate) fn load_kernel_symbols() -> Option<KernelSymbols> {
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
}

/// The vdso image of this process: the kernel maps the same one into every 64-bit process.
fn own_vdso() -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let line = maps
        .lines()
        .filter_map(procmap::parse_maps_line)
        .find(|l| l.path == "[vdso]")
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no [vdso] mapping"))?;
    let mut mem = std::fs::File::open("/proc/self/mem")?;
    mem.seek(SeekFrom::Start(line.start))?;
    let mut bytes = vec![0u8; (line.end - line.start) as usize];
    mem.read_exact(&mut bytes)?;
    Ok(bytes)
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
