//! One framehop unwinder per address space, kept in step with the process's mappings and
//! shared by processes forked from one another until either maps new code (see
//! [`crate::space`]); the unwind sections of each binary read once, on the loader thread, and
//! shared.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use framehop::{CacheNative, FrameAddress, MayAllocateDuringUnwind, UnwindRegsNative, Unwinder};
use procmap::{FileId, Mapping, ProcessTable};
use rustc_hash::FxBuildHasher;
use sampler::UserRegs;
use tracing::{debug, trace};

use crate::go_frame::{self, GoStep};
use crate::loader::{DebugFileFinder, LoadRequest, Loader};
use crate::modules::module_parts;
use crate::sections::UnwindSections;
use crate::signal_frame;
use crate::space::{AddressSpace, NativeUnwinder, PendingModule, Spaces};
use profile::StackEnd;

mod loads;

/// Frames beyond this depth are cut (and the stack counted truncated): guards against loops.
pub const MAX_FRAMES: usize = 1024;

/// Bounds on what [`Unwinders`] holds and queues.
#[derive(Clone, Copy, Debug)]
pub struct UnwindLimits {
    /// Binaries whose unwind sections (or the fact that they have none) are kept. Beyond it,
    /// the least recently used binaries that no process's unwinder uses are dropped (read
    /// again if a process maps them later).
    pub max_files: usize,
    /// Bytes of mappings held by kept sections (see [`UnwindSections::mapped_bytes`]), bounded
    /// the same way.
    pub max_mapped_bytes: u64,
    /// Binaries queued to the loader thread at once; more wait in the unwinders for room.
    pub max_queued_loads: usize,
}

impl Default for UnwindLimits {
    fn default() -> Self {
        UnwindLimits {
            max_files: 4096,
            max_mapped_bytes: 8 << 30,
            max_queued_loads: 256,
        }
    }
}

/// What [`Unwinders`] holds, for bounds and status.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwinderSizes {
    /// Processes with an unwinder.
    pub processes: usize,
    /// Distinct unwinders among them: a forked child uses its parent's until either maps
    /// new code.
    pub address_spaces: usize,
    /// Binaries whose unwind sections are held.
    pub sections: usize,
    /// Binaries known to have no unwind information (kept so they are not read again).
    pub without_sections: usize,
    /// Bytes of the mappings those sections are read from.
    pub mapped_bytes: u64,
    /// Binaries asked for and not read yet (queued to the loader or waiting for room).
    pub pending_loads: usize,
    /// Binaries dropped to stay within [`UnwindLimits`].
    pub evicted: u64,
    /// Loads that panicked (a bug; the binary was treated as having no unwind information).
    pub load_panics: u64,
}

/// A binary's entry.
enum FileEntry {
    /// Asked of the loader. `request` is held here while the loader's queue is full.
    Pending { request: Option<LoadRequest> },
    /// Read.
    Ready(Ready),
}

struct Ready {
    /// None: the binary has no unwind information (or could not be read).
    sections: Option<Arc<UnwindSections>>,
    /// [`UnwindSections::mapped_bytes`].
    bytes: u64,
    /// Address spaces with a module from these sections.
    users: u32,
    /// When last looked up (a tick of [`Unwinders::clock`]), for eviction.
    last_used: u64,
    /// Tells this entry from an earlier one of the same file (dropped, then read again), so
    /// that a process that used the earlier one does not count as a user of this one.
    generation: u64,
}

/// The sections for one mapping, as far as they are known.
enum Lookup {
    /// Read; the entry's file and generation when it has one (not the vDSO).
    Ready(Arc<UnwindSections>, Option<(FileId, u64)>),
    /// Being read.
    Pending,
    /// No unwind information.
    None,
}

/// Unwinds user stacks of many processes, sharing parsed unwind sections between them.
///
/// Binaries are read on a loader thread owned by the unwinders (started at the first one):
/// [`Unwinders::unwind`] and [`Unwinders::on_mapping`] never wait for a file. Until a
/// binary's sections have arrived, a stack that reaches its code ends there as
/// [`StackEnd::Unknown`]; arrivals are taken in at the start of each call, and added to every
/// process unwinder that maps the binary.
pub struct Unwinders {
    files: HashMap<FileId, FileEntry, FxBuildHasher>,
    /// The vDSO's sections (the kernel maps the same image into every process).
    vdso: Option<Arc<UnwindSections>>,
    loader: Loader,
    /// Requests sent and not answered yet.
    in_flight: usize,
    /// Files whose request waits for room in the loader's queue, oldest first.
    deferred: VecDeque<FileId>,
    /// The address space of each process with an unwinder.
    spaces: Spaces,
    /// Pending modules across all address spaces.
    waiting: usize,
    cache: CacheNative<MayAllocateDuringUnwind>,
    limits: UnwindLimits,
    /// Ready entries, and those of them with sections.
    ready_files: usize,
    with_sections: usize,
    /// Sum of the Ready entries' `bytes`.
    held_bytes: u64,
    /// Ticks on every lookup: recency for eviction, generations of entries.
    clock: u64,
    evicted: u64,
    load_panics: u64,
    /// How far into the stack copy the last unwind read, in bytes from its start.
    stack_reach: Cell<usize>,
}

impl Default for Unwinders {
    fn default() -> Self {
        Unwinders::new()
    }
}

impl Unwinders {
    /// No process known yet; [`UnwindLimits::default`].
    pub fn new() -> Unwinders {
        Unwinders::with_limits(UnwindLimits::default())
    }

    /// No process known yet; what is held bounded by `limits`.
    pub fn with_limits(limits: UnwindLimits) -> Unwinders {
        Unwinders {
            files: HashMap::default(),
            vdso: None,
            loader: Loader::new(limits.max_queued_loads),
            in_flight: 0,
            deferred: VecDeque::new(),
            spaces: Spaces::default(),
            waiting: 0,
            cache: CacheNative::new(),
            limits,
            ready_files: 0,
            with_sections: 0,
            held_bytes: 0,
            clock: 0,
            evicted: 0,
            load_panics: 0,
            stack_reach: Cell::new(0),
        }
    }

    /// The vDSO's ELF image (as read from this process's `AT_SYSINFO_EHDR`): its call-frame
    /// information unwinds samples taken in it. Without it, such samples end as unknown
    /// wherever the vDSO's frame pointer is not set up. Parsed on the calling thread (a
    /// few pages in memory, no file).
    pub fn set_vdso_image(&mut self, image: &[u8]) {
        match UnwindSections::from_image(image) {
            Ok(s) if s.has_unwind_info() => self.vdso = Some(Arc::new(s)),
            Ok(_) => debug!("the vDSO has no unwind sections"),
            Err(err) => debug!(%err, "cannot read the vDSO's unwind sections"),
        }
    }

    /// How to find a binary's separate debug file (by build-id, debuglink, debug directories:
    /// as symbols are found). Asked, on the loader thread, only for binaries whose own
    /// call-frame information misses most of their code; their `.debug_frame` is then read
    /// from the debug file. Applies to binaries read from now on.
    pub fn set_debug_file_finder(&mut self, finder: DebugFileFinder) {
        self.loader.set_finder(finder);
    }

    /// A process mapped new code: add it if the process's unwinder exists already. Either
    /// way, the binary's sections are asked for now if they are not held, so that they are
    /// likely there by the time the process's samples are unwound.
    pub fn on_mapping(&mut self, table: &ProcessTable, pid: u32, mapping: &Mapping) {
        self.take_loaded();
        let lookup = self.section_for(table, pid, mapping);
        if let Some(change) = self.spaces.for_change(pid) {
            if change.copied {
                self.waiting += change.space.pending.len();
                count_users(&mut self.files, change.space, 1);
            }
            add_lookup(
                change.space,
                &mut self.files,
                &mut self.waiting,
                lookup,
                mapping,
            );
        }
    }

    /// Give `pid` its unwinder now, from the mappings the table holds (a process read from
    /// /proc before recording), so that its binaries are asked for before its first sample
    /// rather than at it: a process that is rarely on CPU is drained seconds apart, and every
    /// sample until its binaries arrive would end as [`StackEnd::Unknown`]. Nothing is done
    /// when it has one.
    pub fn prepare(&mut self, table: &ProcessTable, pid: u32) {
        self.take_loaded();
        if !self.spaces.contains(pid) {
            self.build_or_share(table, pid, u64::MAX - 1);
        }
    }

    /// A process forked from `parent` at `time` (after [`ProcessTable::fork`]): when the
    /// table shares the parent's mappings with it as of the fork, it shares the parent's
    /// unwinder too (no copy; either gets one of its own when it maps new code). Otherwise
    /// it gets one when it is first sampled. Whatever `pid` had before is forgotten.
    pub fn on_fork(&mut self, table: &ProcessTable, pid: u32, parent: u32, time: u64) {
        self.forget(pid);
        if pid != parent && table.shares_mappings(pid, parent, time) {
            self.spaces.share(pid, parent);
        }
    }

    /// What is held: processes, sections, pending loads (see [`UnwinderSizes`]).
    pub fn sizes(&self) -> UnwinderSizes {
        UnwinderSizes {
            processes: self.spaces.processes(),
            address_spaces: self.spaces.len(),
            sections: self.with_sections,
            without_sections: self.ready_files - self.with_sections,
            mapped_bytes: self.held_bytes,
            pending_loads: self.in_flight + self.deferred.len(),
            evicted: self.evicted,
            load_panics: self.load_panics,
        }
    }

    /// A file no process maps any more: drop its unwind sections (the mapping of the binary
    /// they hold), or forget that it was asked for. Processes still holding them through
    /// their modules keep them until they exit or exec.
    pub fn forget_file(&mut self, file: FileId) {
        if let Some(FileEntry::Ready(r)) = self.files.remove(&file) {
            self.dropped(&r);
        }
        // A deferred request of the file is skipped when its turn comes (no Pending entry);
        // an answer already on its way is not kept.
    }

    /// A process exec'd or exited: forget its address space (rebuilt on its next sample).
    /// The space itself goes with the last process that shares it (O(1) before that).
    pub fn forget(&mut self, pid: u32) {
        let Some(space) = self.spaces.remove(pid) else {
            return;
        };
        self.waiting -= space.pending.len();
        let unused = count_users(&mut self.files, &space, -1);
        // Only when something became evictable: over the limits with every file in use, an
        // exit must not cost a scan of all files.
        if unused && self.over_limits() {
            self.evict();
        }
    }

    /// Forget the unwinders of processes for which `keep` is false (those the process model
    /// no longer knows): a sample read after its process's EXIT record rebuilds an unwinder
    /// that no later record would forget.
    pub fn retain_processes(&mut self, mut keep: impl FnMut(u32) -> bool) {
        let gone: Vec<u32> = self.spaces.pids().filter(|&pid| !keep(pid)).collect();
        for pid in gone {
            self.forget(pid);
        }
    }

    /// Block until every binary asked for so far has been read and added to the process
    /// unwinders that map it, or `timeout` has passed; true when nothing is pending. For
    /// tests and tools that want whole stacks from the first sample: never on a thread that
    /// drains ring buffers.
    pub fn wait_loaded(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            self.take_loaded();
            if self.in_flight == 0 && self.deferred.is_empty() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline || self.loader.is_gone() {
                return false;
            }
            if let Some(loaded) = self.loader.wait_loaded(deadline - now) {
                self.in_flight -= 1;
                self.arrived(loaded);
            }
        }
    }

    /// How far into its stack copy the last [`Unwinders::unwind`] read, in bytes from the
    /// copy's start (0: not at all).
    pub fn stack_reach(&self) -> usize {
        self.stack_reach.get()
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
        self.stack_reach.set(0);
        self.take_loaded();
        if !self.spaces.contains(pid) {
            self.build_or_share(table, pid, time);
        }
        let Some(process) = self.spaces.get(pid) else {
            return StackEnd::Unknown;
        };
        let sp = regs.sp;
        let copied_end = sp.saturating_add(stack.len() as u64);
        let reach = &self.stack_reach;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            if addr < sp || addr.checked_add(8).is_none_or(|end| end > copied_end) {
                return Err(());
            }
            let at = (addr - sp) as usize;
            reach.set(reach.get().max(at + 8));
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
            if process.is_trampoline(address.address()) {
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
            if process.is_pending(address.address_for_lookup()) {
                // The binary's sections are being read: no guess (framehop would try frame
                // pointers, which code built without them turns into made-up frames).
                return StackEnd::Unknown;
            }
            if process.has_go() {
                if let Some(go) = process.go_module(address.address_for_lookup()) {
                    match go_frame::step(
                        go,
                        address.address_for_lookup(),
                        &mut uregs,
                        &mut read_stack,
                    ) {
                        GoStep::Top => return StackEnd::Complete,
                        GoStep::Caller(0) => return StackEnd::Complete,
                        GoStep::Caller(return_address) => {
                            match FrameAddress::from_return_address(return_address) {
                                Some(next) => {
                                    out.push(next.address_for_lookup());
                                    address = next;
                                    continue;
                                }
                                None => return StackEnd::Unknown,
                            }
                        }
                        GoStep::Unknown => return StackEnd::Unknown,
                        GoStep::OutsideCopy(addr) => return end_at(addr),
                        GoStep::NotGo | GoStep::CallFrameInfo => {}
                    }
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
                Ok(None) => {
                    // framehop also stops at a zero return address or frame pointer read from
                    // the stack, which corrupt call-frame information yields anywhere: the
                    // stack is whole only when the rule itself marks the end (the return
                    // address undefined, as at `_start` and a thread's first frame).
                    return if rule_ends_stack(
                        unwinder,
                        address,
                        &uregs,
                        &mut self.cache,
                        &mut read_stack,
                    ) {
                        StackEnd::Complete
                    } else {
                        trace!(
                            pid,
                            ip = regs.ip,
                            at = address.address(),
                            depth = out.len(),
                            "a zero return address or frame pointer ends the stack"
                        );
                        StackEnd::Unknown
                    };
                }
                Err(framehop::Error::CouldNotReadStack(addr)) => return end_at(addr),
                Err(e) => {
                    trace!(pid, ip = regs.ip, sp = regs.sp, at = address.address(), depth = out.len(), error = %e, "a frame that cannot be unwound ends the stack");
                    return StackEnd::Unknown;
                }
            }
        }
    }

    /// Give `pid` an address space: its parent's when the table shares their mappings (the
    /// FORK record came before the parent had one), else one built from its mappings, which
    /// the parent then shares if it has none (its other children then cost nothing).
    fn build_or_share(&mut self, table: &ProcessTable, pid: u32, time: u64) {
        let parent = table
            .parent(pid, time)
            .filter(|&p| p != pid && table.shares_mappings(pid, p, time));
        if parent.is_some_and(|p| self.spaces.share(pid, p)) {
            return;
        }
        let space = self.build(table, pid, time);
        self.spaces.insert(pid, space);
        if let Some(parent) = parent {
            self.spaces.share(parent, pid);
        }
    }

    /// An address space holding the mappings of `pid` at `time` and now: O(mappings).
    fn build(&mut self, table: &ProcessTable, pid: u32, time: u64) -> AddressSpace {
        let mut p = AddressSpace::new();
        // The mappings in effect at the sample's time, and those in effect now: records are
        // read ahead of samples taken a little earlier (side-band rings are drained first), so
        // a mapping seen before this unwinder existed may start after `time`, and would
        // otherwise never be added.
        // Both come by start address: a binary search each, not a scan (a process with tens
        // of thousands of mappings, whose children are sampled, made this n² per child).
        let mut mappings: Vec<Mapping> = table.mappings_at(pid, time).copied().collect();
        let later: Vec<Mapping> = table
            .mappings_at(pid, u64::MAX - 1)
            .filter(|now| {
                mappings
                    .binary_search_by_key(&now.start, |m| m.start)
                    .is_err()
            })
            .copied()
            .collect();
        mappings.extend(later);
        // By start address, so that each module goes at the end of framehop's sorted list.
        mappings.sort_unstable_by_key(|m| m.start);
        for mapping in &mappings {
            let lookup = self.section_for(table, pid, mapping);
            add_lookup(&mut p, &mut self.files, &mut self.waiting, lookup, mapping);
        }
        debug!(
            pid,
            modules = p.module_count(),
            pending = p.pending.len(),
            "built unwinder"
        );
        p
    }
}

/// Add what `lookup` found for `mapping` to `p`: a module now, or a pending one.
fn add_lookup(
    p: &mut AddressSpace,
    files: &mut HashMap<FileId, FileEntry, FxBuildHasher>,
    waiting: &mut usize,
    lookup: Lookup,
    mapping: &Mapping,
) {
    match lookup {
        Lookup::Ready(sections, entry) => {
            let Some(parts) = module_parts(&sections, mapping.start..mapping.end, mapping.pgoff)
            else {
                return;
            };
            if p.add(mapping.start, parts) {
                if let Some(entry) = entry {
                    if p.files.insert(entry) {
                        if let Some(FileEntry::Ready(r)) = files.get_mut(&entry.0) {
                            r.users += 1;
                        }
                    }
                }
            }
        }
        Lookup::Pending => {
            if p.has_module(mapping.start) || p.pending.contains_key(&mapping.start) {
                return;
            }
            p.pending.insert(
                mapping.start,
                PendingModule {
                    file: mapping.file,
                    end: mapping.end,
                    pgoff: mapping.pgoff,
                },
            );
            *waiting += 1;
        }
        Lookup::None => {}
    }
}

/// Count `space` as one more (`delta` 1) or one fewer (-1) user of the file entries its
/// modules come from; true when one of them is left without users (evictable).
fn count_users(
    files: &mut HashMap<FileId, FileEntry, FxBuildHasher>,
    space: &AddressSpace,
    delta: i32,
) -> bool {
    let mut unused = false;
    for &(file, generation) in &space.files {
        if let Some(FileEntry::Ready(r)) = files.get_mut(&file) {
            if r.generation == generation {
                r.users = r.users.saturating_add_signed(delta);
                unused |= r.users == 0;
            }
        }
    }
    unused
}

/// Whether the rule for `address` is the end of the stack itself (the return address
/// undefined), and not a zero frame pointer or return address found while applying it: the
/// rule is run again on `regs` with a non-zero frame pointer, and only the end-of-stack rule
/// ends without reading the stack (a frame-pointer rule then fails, every other one reads the
/// return address).
fn rule_ends_stack(
    unwinder: &NativeUnwinder,
    address: FrameAddress,
    regs: &UnwindRegsNative,
    cache: &mut CacheNative<MayAllocateDuringUnwind>,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> bool {
    let mut probe = *regs;
    set_probe_fp(&mut probe);
    let mut read = false;
    let mut reading = |addr: u64| {
        read = true;
        read_stack(addr)
    };
    let ended = matches!(
        unwinder.unwind_frame(address, &mut probe, cache, &mut reading),
        Ok(None)
    );
    ended && !read
}

/// A frame pointer no stack has (8): a frame-pointer rule fails on it without reading.
#[cfg(target_arch = "x86_64")]
fn set_probe_fp(regs: &mut UnwindRegsNative) {
    regs.set_bp(8);
}

#[cfg(target_arch = "aarch64")]
fn set_probe_fp(regs: &mut UnwindRegsNative) {
    regs.set_fp(8);
}

#[cfg(target_arch = "x86_64")]
fn native_regs(regs: &UserRegs) -> UnwindRegsNative {
    UnwindRegsNative::new(regs.ip, regs.sp, regs.fp)
}

#[cfg(target_arch = "aarch64")]
fn native_regs(regs: &UserRegs) -> UnwindRegsNative {
    UnwindRegsNative::new(regs.lr, regs.sp, regs.fp)
}
