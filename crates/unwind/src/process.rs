//! One framehop unwinder per process, kept in step with the process's mappings.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use framehop::{
    CacheNative, ExplicitModuleSectionInfo, FrameAddress, MayAllocateDuringUnwind, Module,
    UnwindRegsNative, Unwinder, UnwinderNative,
};
use procmap::{FileId, Mapping, ProcessTable};
use rustc_hash::FxBuildHasher;
use sampler::UserRegs;
use tracing::debug;

use crate::quality::StackEnd;
use crate::sections::{SectionData, UnwindSections};

/// Frames beyond this depth are cut (and the stack counted truncated): guards against loops.
pub const MAX_FRAMES: usize = 1024;

type NativeUnwinder = UnwinderNative<SectionData, MayAllocateDuringUnwind>;

struct ProcessUnwinder {
    unwinder: NativeUnwinder,
    /// Start addresses of the modules added, to avoid adding one twice.
    modules: Vec<u64>,
}

/// Unwinds user stacks of many processes, sharing parsed unwind sections between them.
pub struct Unwinders {
    sections: HashMap<FileId, Option<Arc<UnwindSections>>, FxBuildHasher>,
    processes: HashMap<u32, ProcessUnwinder, FxBuildHasher>,
    cache: CacheNative<MayAllocateDuringUnwind>,
}

impl Default for Unwinders {
    fn default() -> Self {
        Unwinders::new()
    }
}

impl Unwinders {
    /// No process known yet.
    pub fn new() -> Unwinders {
        Unwinders {
            sections: HashMap::default(),
            processes: HashMap::default(),
            cache: CacheNative::new(),
        }
    }

    /// A process mapped new code: add it if the process's unwinder exists already.
    pub fn on_mapping(&mut self, table: &ProcessTable, pid: u32, mapping: &Mapping) {
        if self.processes.contains_key(&pid) {
            if let Some(module) = self.module(table, pid, mapping) {
                let p = self.processes.get_mut(&pid).expect("checked above");
                if !p.modules.contains(&mapping.start) {
                    p.unwinder.add_module(module);
                    p.modules.push(mapping.start);
                }
            }
        }
    }

    /// A process exec'd or exited: forget its address space (rebuilt on its next sample).
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// Unwind one sampled user stack into `out` (leaf first: the sampled instruction, then
    /// return addresses). `stack` is the copy starting at `regs.sp`.
    pub fn unwind(
        &mut self,
        table: &ProcessTable,
        pid: u32,
        time: u64,
        regs: &UserRegs,
        stack: &[u8],
        out: &mut Vec<u64>,
    ) -> StackEnd {
        out.clear();
        if !self.processes.contains_key(&pid) {
            let unwinder = self.build(table, pid, time);
            self.processes.insert(pid, unwinder);
        }
        let process = self.processes.get(&pid).expect("inserted above");
        let sp = regs.sp;
        let copied_end = sp.saturating_add(stack.len() as u64);
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            if addr < sp || addr.checked_add(8).is_none_or(|end| end > copied_end) {
                return Err(());
            }
            let at = (addr - sp) as usize;
            Ok(u64::from_ne_bytes(
                stack[at..at + 8].try_into().map_err(|_| ())?,
            ))
        };
        let mut frames = process.unwinder.iter_frames(
            regs.ip,
            native_regs(regs),
            &mut self.cache,
            &mut read_stack,
        );
        loop {
            if out.len() >= MAX_FRAMES {
                return StackEnd::Truncated;
            }
            match frames.next() {
                Ok(Some(frame)) => out.push(frame_address(frame)),
                Ok(None) => return StackEnd::Complete,
                Err(framehop::Error::CouldNotReadStack(addr)) if addr >= copied_end => {
                    return StackEnd::Truncated
                }
                Err(_) => return StackEnd::Unknown,
            }
        }
    }

    fn build(&mut self, table: &ProcessTable, pid: u32, time: u64) -> ProcessUnwinder {
        let mut p = ProcessUnwinder {
            unwinder: NativeUnwinder::new(),
            modules: Vec::new(),
        };
        let mappings: Vec<Mapping> = table.mappings_at(pid, time).copied().collect();
        for mapping in &mappings {
            if let Some(module) = self.module(table, pid, mapping) {
                p.unwinder.add_module(module);
                p.modules.push(mapping.start);
            }
        }
        debug!(pid, modules = p.modules.len(), "built unwinder");
        p
    }

    fn module(
        &mut self,
        table: &ProcessTable,
        pid: u32,
        mapping: &Mapping,
    ) -> Option<Module<SectionData>> {
        let file = table.files().get(mapping.file);
        let sections = self
            .sections
            .entry(mapping.file)
            .or_insert_with(|| {
                if file.is_pseudo() {
                    return None;
                }
                let in_root = PathBuf::from(format!("/proc/{pid}/root{}", file.path));
                let path = if in_root.exists() {
                    in_root
                } else {
                    PathBuf::from(&file.path)
                };
                match UnwindSections::load(&path) {
                    Ok(s) if s.has_unwind_info() => Some(Arc::new(s)),
                    Ok(_) => None,
                    Err(err) => {
                        debug!(%err, "no unwind sections");
                        None
                    }
                }
            })
            .clone()?;
        let bias = sections.bias(mapping.start, mapping.pgoff)?;
        let info = ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: sections.text.as_ref().map(|s| s.svma.clone()),
            text: sections.text.as_ref().map(|s| s.data.clone()),
            eh_frame_svma: sections.eh_frame.as_ref().map(|s| s.svma.clone()),
            eh_frame: sections.eh_frame.as_ref().map(|s| s.data.clone()),
            eh_frame_hdr_svma: sections.eh_frame_hdr.as_ref().map(|s| s.svma.clone()),
            eh_frame_hdr: sections.eh_frame_hdr.as_ref().map(|s| s.data.clone()),
            debug_frame: sections.debug_frame.as_ref().map(|s| s.data.clone()),
            stubs_svma: None,
            stub_helper_svma: None,
            got_svma: None,
            unwind_info: None,
            text_segment_svma: None,
            text_segment: None,
        };
        Some(Module::new(
            file.basename().to_string(),
            mapping.start..mapping.end,
            bias,
            info,
        ))
    }
}

fn frame_address(frame: FrameAddress) -> u64 {
    frame.address()
}

#[cfg(target_arch = "x86_64")]
fn native_regs(regs: &UserRegs) -> UnwindRegsNative {
    UnwindRegsNative::new(regs.ip, regs.sp, regs.fp)
}

#[cfg(target_arch = "aarch64")]
fn native_regs(regs: &UserRegs) -> UnwindRegsNative {
    UnwindRegsNative::new(regs.lr, regs.sp, regs.fp)
}
