//! One framehop unwinder per process, kept in step with the process's mappings.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::ops::Range;

use framehop::{
    CacheNative, ExplicitModuleSectionInfo, FrameAddress, MayAllocateDuringUnwind, Module,
    UnwindRegsNative, Unwinder, UnwinderNative,
};
use procmap::{FileId, Mapping, ProcessTable};
use rustc_hash::FxBuildHasher;
use sampler::UserRegs;
use tracing::{debug, trace};

use crate::cfi_scan::in_sorted_ranges;
use crate::sections::{SectionData, UnwindSections};
use crate::signal_frame;
use profile::StackEnd;

/// Frames beyond this depth are cut (and the stack counted truncated): guards against loops.
pub const MAX_FRAMES: usize = 1024;

type NativeUnwinder = UnwinderNative<SectionData, MayAllocateDuringUnwind>;

/// Given a binary's path (as this process can open it), the path of its separate debug file.
pub type DebugFileFinder = Box<dyn Fn(&Path) -> Option<PathBuf> + Send + Sync>;

struct ProcessUnwinder {
    unwinder: NativeUnwinder,
    /// Start addresses of the modules added, to avoid adding one twice.
    modules: Vec<u64>,
    /// Signal trampolines of the process's modules (process addresses).
    trampolines: Vec<Range<u64>>,
    /// For modules whose `.debug_frame` is read instead of `.eh_frame`: an unwinder over their
    /// `.eh_frame`, used for the code ranges in `alternate_ranges` (process addresses, sorted).
    alternate: NativeUnwinder,
    alternate_ranges: Vec<Range<u64>>,
}

impl ProcessUnwinder {
    fn new() -> ProcessUnwinder {
        ProcessUnwinder {
            unwinder: NativeUnwinder::new(),
            modules: Vec::new(),
            trampolines: Vec::new(),
            alternate: NativeUnwinder::new(),
            alternate_ranges: Vec::new(),
        }
    }

    fn add(&mut self, start: u64, parts: ModuleParts) {
        if self.modules.contains(&start) {
            return;
        }
        self.unwinder.add_module(parts.module);
        self.modules.push(start);
        self.trampolines.extend(parts.trampolines);
        if let Some((module, ranges)) = parts.alternate {
            self.alternate.add_module(module);
            self.alternate_ranges.extend(ranges);
            self.alternate_ranges.sort_by_key(|r| r.start);
        }
    }

    fn is_trampoline(&self, address: u64) -> bool {
        self.trampolines.iter().any(|r| r.contains(&address))
    }

    /// The unwinder holding the rules for `lookup`.
    fn unwinder_for(&self, lookup: u64) -> &NativeUnwinder {
        if !self.alternate_ranges.is_empty() && in_sorted_ranges(&self.alternate_ranges, lookup) {
            &self.alternate
        } else {
            &self.unwinder
        }
    }
}

/// What one mapping adds to a process's unwinders.
struct ModuleParts {
    module: Module<SectionData>,
    trampolines: Vec<Range<u64>>,
    alternate: Option<(Module<SectionData>, Vec<Range<u64>>)>,
}

/// Unwinds user stacks of many processes, sharing parsed unwind sections between them.
pub struct Unwinders {
    sections: HashMap<FileId, Option<Arc<UnwindSections>>, FxBuildHasher>,
    /// The vDSO's sections (the kernel maps the same image into every process).
    vdso: Option<Arc<UnwindSections>>,
    /// Finds the separate debug file of a binary, for binaries whose call-frame information
    /// is there (see [`Unwinders::set_debug_file_finder`]).
    debug_files: Option<DebugFileFinder>,
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
            vdso: None,
            debug_files: None,
            processes: HashMap::default(),
            cache: CacheNative::new(),
        }
    }

    /// The vDSO's ELF image (as read from this process's `AT_SYSINFO_EHDR`): its call-frame
    /// information unwinds samples taken in it. Without it, such samples end as unknown
    /// wherever the vDSO's frame pointer is not set up.
    pub fn set_vdso_image(&mut self, image: &[u8]) {
        match UnwindSections::from_image(image) {
            Ok(s) if s.has_unwind_info() => self.vdso = Some(Arc::new(s)),
            Ok(_) => debug!("the vDSO has no unwind sections"),
            Err(err) => debug!(%err, "cannot read the vDSO's unwind sections"),
        }
    }

    /// How to find a binary's separate debug file (by build-id, debuglink, debug directories:
    /// as symbols are found). Asked only for binaries whose own call-frame information misses
    /// most of their code; their `.debug_frame` is then read from the debug file.
    pub fn set_debug_file_finder(&mut self, finder: DebugFileFinder) {
        self.debug_files = Some(finder);
    }

    /// A process mapped new code: add it if the process's unwinder exists already.
    pub fn on_mapping(&mut self, table: &ProcessTable, pid: u32, mapping: &Mapping) {
        if self.processes.contains_key(&pid) {
            if let Some(parts) = self.module(table, pid, mapping) {
                let p = self.processes.get_mut(&pid).expect("checked above");
                p.add(mapping.start, parts);
            }
        }
    }

    /// Processes with an unwinder, and binaries whose unwind sections are held.
    pub fn sizes(&self) -> (usize, usize) {
        (self.processes.len(), self.sections.len())
    }

    /// A file no process maps any more: drop its unwind sections (the mapping of the binary
    /// they hold). Processes still holding them through their modules keep them until they
    /// exit or exec.
    pub fn forget_file(&mut self, file: FileId) {
        self.sections.remove(&file);
    }

    /// A process exec'd or exited: forget its address space (rebuilt on its next sample).
    pub fn forget(&mut self, pid: u32) {
        self.processes.remove(&pid);
    }

    /// Unwind one sampled user stack into `out`, leaf first, as code addresses (see
    /// [`profile::Stack`]): the sampled instruction, then each caller's call site (return
    /// address − 1), except that frames entered other than by a call (a signal trampoline,
    /// the instruction a signal interrupted) are exact. `stack` is the copy starting at
    /// `regs.sp`.
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
        let mut uregs = native_regs(regs);
        let mut address = FrameAddress::InstructionPointer(regs.ip);
        out.push(regs.ip);
        let end_at = |addr: u64| {
            if addr >= copied_end {
                StackEnd::Truncated
            } else {
                StackEnd::Unknown
            }
        };
        loop {
            if out.len() >= MAX_FRAMES {
                return StackEnd::Truncated;
            }
            if !process.trampolines.is_empty() && process.is_trampoline(address.address()) {
                match signal_frame::interrupted_regs(uregs.sp(), &mut read_stack) {
                    Ok(Some((ip, interrupted))) if ip != 0 => {
                        // The trampoline was entered by a return, not a call, and the
                        // interrupted instruction is exact: neither is a call site.
                        if address.is_return_address() {
                            if let Some(last) = out.last_mut() {
                                *last = address.address();
                            }
                        }
                        out.push(ip);
                        uregs = interrupted;
                        address = FrameAddress::InstructionPointer(ip);
                        continue;
                    }
                    Ok(_) => return StackEnd::Unknown,
                    Err(addr) => return end_at(addr),
                }
            }
            let unwinder = process.unwinder_for(address.address_for_lookup());
            match unwinder.unwind_frame(address, &mut uregs, &mut self.cache, &mut read_stack) {
                Ok(Some(return_address)) => match FrameAddress::from_return_address(return_address)
                {
                    Some(next) => {
                        out.push(next.address_for_lookup());
                        address = next;
                    }
                    None => return StackEnd::Unknown,
                },
                Ok(None) => return StackEnd::Complete,
                Err(framehop::Error::CouldNotReadStack(addr)) => return end_at(addr),
                Err(e) => {
                    trace!(pid, ip = regs.ip, sp = regs.sp, at = address.address(), depth = out.len(), error = %e, "a frame that cannot be unwound ends the stack");
                    return StackEnd::Unknown;
                }
            }
        }
    }

    fn build(&mut self, table: &ProcessTable, pid: u32, time: u64) -> ProcessUnwinder {
        let mut p = ProcessUnwinder::new();
        let mappings: Vec<Mapping> = table.mappings_at(pid, time).copied().collect();
        for mapping in &mappings {
            if let Some(parts) = self.module(table, pid, mapping) {
                p.add(mapping.start, parts);
            }
        }
        debug!(pid, modules = p.modules.len(), "built unwinder");
        p
    }

    fn module(&mut self, table: &ProcessTable, pid: u32, mapping: &Mapping) -> Option<ModuleParts> {
        let file = table.files().get(mapping.file);
        let sections = if file.path == "[vdso]" {
            self.vdso.clone()?
        } else {
            self.section_for(pid, mapping.file, file)?
        };
        let bias = sections.bias(mapping.start, mapping.pgoff)?;
        let name = file.basename().to_string();
        let avma = mapping.start..mapping.end;
        let in_process = |r: &Range<u64>| r.start.wrapping_add(bias)..r.end.wrapping_add(bias);
        let alternate =
            (sections.prefer_debug_frame && !sections.eh_frame_ranges.is_empty()).then(|| {
                let module = Module::new(
                    name.clone(),
                    avma.clone(),
                    bias,
                    section_info(&sections, CallFrameSection::EhFrame),
                );
                (
                    module,
                    sections.eh_frame_ranges.iter().map(in_process).collect(),
                )
            });
        let primary = if sections.prefer_debug_frame {
            CallFrameSection::DebugFrame
        } else {
            CallFrameSection::EhFrame
        };
        Some(ModuleParts {
            module: Module::new(name, avma, bias, section_info(&sections, primary)),
            trampolines: sections.signal_trampolines.iter().map(in_process).collect(),
            alternate,
        })
    }

    /// The unwind sections of a mapped file, loaded once per file.
    fn section_for(
        &mut self,
        pid: u32,
        id: FileId,
        file: &procmap::MappedFile,
    ) -> Option<Arc<UnwindSections>> {
        self.sections
            .entry(id)
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
                    Ok(mut s) => {
                        if s.may_lack_call_frame_info() {
                            add_separate_debug_frame(&mut s, &path, self.debug_files.as_ref());
                        }
                        s.has_unwind_info().then(|| Arc::new(s))
                    }
                    Err(err) => {
                        debug!(%err, "no unwind sections");
                        None
                    }
                }
            })
            .clone()
    }
}

/// Read `.debug_frame` from the separate debug file of the binary at `path`, if `finder` finds
/// one.
fn add_separate_debug_frame(
    sections: &mut UnwindSections,
    path: &Path,
    finder: Option<&DebugFileFinder>,
) {
    let Some(debug_file) = finder.and_then(|find| find(path)) else {
        debug!(binary = %path.display(), "little call-frame information and no debug file");
        return;
    };
    match sections.add_debug_frame_from(&debug_file) {
        Ok(true) => {
            debug!(binary = %path.display(), debug_file = %debug_file.display(), ".debug_frame from the debug file")
        }
        Ok(false) => {
            debug!(binary = %path.display(), debug_file = %debug_file.display(), "the debug file has no .debug_frame")
        }
        Err(err) => debug!(%err, "cannot read the debug file's .debug_frame"),
    }
}

/// Which call-frame section a framehop module reads (framehop reads `.debug_frame` only when
/// it is given no `.eh_frame`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum CallFrameSection {
    EhFrame,
    DebugFrame,
}

fn section_info(
    sections: &UnwindSections,
    which: CallFrameSection,
) -> ExplicitModuleSectionInfo<SectionData> {
    let eh = which == CallFrameSection::EhFrame;
    ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: sections.text.as_ref().map(|s| s.svma.clone()),
        text: sections.text.as_ref().map(|s| s.data.clone()),
        eh_frame_svma: sections
            .eh_frame
            .as_ref()
            .filter(|_| eh)
            .map(|s| s.svma.clone()),
        eh_frame: sections
            .eh_frame
            .as_ref()
            .filter(|_| eh)
            .map(|s| s.data.clone()),
        eh_frame_hdr_svma: sections
            .eh_frame_hdr
            .as_ref()
            .filter(|_| eh)
            .map(|s| s.svma.clone()),
        eh_frame_hdr: sections
            .eh_frame_hdr
            .as_ref()
            .filter(|_| eh)
            .map(|s| s.data.clone()),
        debug_frame: sections
            .debug_frame
            .as_ref()
            .filter(|_| !eh)
            .map(|s| s.data.clone()),
        stubs_svma: None,
        stub_helper_svma: None,
        got_svma: None,
        unwind_info: None,
        text_segment_svma: None,
        text_segment: None,
    }
}

#[cfg(target_arch = "x86_64")]
fn native_regs(regs: &UserRegs) -> UnwindRegsNative {
    UnwindRegsNative::new(regs.ip, regs.sp, regs.fp)
}

#[cfg(target_arch = "aarch64")]
fn native_regs(regs: &UserRegs) -> UnwindRegsNative {
    UnwindRegsNative::new(regs.lr, regs.sp, regs.fp)
}
