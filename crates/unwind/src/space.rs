//! The unwinder of one address space, and the registry that lets processes forked from one
//! another share it: a child uses its parent's as of the fork (no copy) until either of them
//! maps new code, which gives that one a copy of its own first.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;

use framehop::{MayAllocateDuringUnwind, Unwinder, UnwinderNative};
use procmap::FileId;
use rustc_hash::FxBuildHasher;

use crate::cfi_scan::in_sorted_ranges;
use crate::go_frame::GoModule;
use crate::modules::ModuleParts;
use crate::section::SectionData;

pub(crate) type NativeUnwinder = UnwinderNative<SectionData, MayAllocateDuringUnwind>;

/// The modules of one address space: framehop's unwinders and what the walk needs besides.
/// Every lookup a sample makes here is a binary search or a hash, never a scan of the modules
/// (a process may map tens of thousands).
#[derive(Clone)]
pub(crate) struct AddressSpace {
    pub unwinder: NativeUnwinder,
    /// Start addresses of the modules added, to avoid adding one twice.
    modules: HashSet<u64, FxBuildHasher>,
    /// The entries (file and generation, see `Ready::generation` in `process`) that modules
    /// come from: this space is one of their users, once each.
    pub files: HashSet<(FileId, u64), FxBuildHasher>,
    /// Mappings whose file's sections were still being read when they were seen, by start
    /// address: added when the sections arrive.
    pub pending: BTreeMap<u64, PendingModule>,
    /// Signal trampolines of the modules (process addresses, sorted by start).
    trampolines: Vec<Range<u64>>,
    /// For modules whose `.debug_frame` is read instead of `.eh_frame`: an unwinder over their
    /// `.eh_frame`, used for the code ranges in `alternate_ranges` (process addresses, sorted).
    alternate: NativeUnwinder,
    alternate_ranges: Vec<Range<u64>>,
    /// Go binaries among the modules (see [`GoModule`]), sorted by start address.
    go: Vec<GoModule>,
}

/// A mapping waiting for its file's sections.
#[derive(Clone, Copy)]
pub(crate) struct PendingModule {
    pub file: FileId,
    pub end: u64,
    pub pgoff: u64,
}

/// Insert `item` into `items`, sorted by `key`.
fn insert_sorted<T>(items: &mut Vec<T>, item: T, key: impl Fn(&T) -> u64) {
    let at = items.partition_point(|i| key(i) <= key(&item));
    items.insert(at, item);
}

impl AddressSpace {
    pub fn new() -> AddressSpace {
        AddressSpace {
            unwinder: NativeUnwinder::new(),
            modules: HashSet::default(),
            files: HashSet::default(),
            pending: BTreeMap::new(),
            trampolines: Vec::new(),
            alternate: NativeUnwinder::new(),
            alternate_ranges: Vec::new(),
            go: Vec::new(),
        }
    }

    /// Whether a module starting at `start` is present.
    pub fn has_module(&self, start: u64) -> bool {
        self.modules.contains(&start)
    }

    /// Modules added.
    pub fn module_count(&self) -> usize {
        self.modules.len()
    }

    /// Add a module; false if one starting there is present already.
    pub fn add(&mut self, start: u64, parts: ModuleParts) -> bool {
        if !self.modules.insert(start) {
            return false;
        }
        self.unwinder.add_module(parts.module);
        for t in parts.trampolines {
            insert_sorted(&mut self.trampolines, t, |r| r.start);
        }
        if let Some(go) = parts.go {
            insert_sorted(&mut self.go, go, |m| m.avma.start);
        }
        if let Some((module, ranges)) = parts.alternate {
            self.alternate.add_module(module);
            for r in ranges {
                insert_sorted(&mut self.alternate_ranges, r, |r| r.start);
            }
        }
        true
    }

    /// Whether `address` is in a mapping whose binary's sections are being read (a lookup in
    /// the pending mappings by start address; nothing when none is pending).
    pub fn is_pending(&self, address: u64) -> bool {
        !self.pending.is_empty()
            && self
                .pending
                .range(..=address)
                .next_back()
                .is_some_and(|(_, m)| address < m.end)
    }

    /// The Go binary mapped at `address`, if any.
    pub fn go_module(&self, address: u64) -> Option<&GoModule> {
        let i = self.go.partition_point(|m| m.avma.start <= address);
        self.go[..i].last().filter(|m| m.avma.contains(&address))
    }

    /// Whether some Go binary is mapped.
    pub fn has_go(&self) -> bool {
        !self.go.is_empty()
    }

    /// Whether `address` is in a signal trampoline.
    pub fn is_trampoline(&self, address: u64) -> bool {
        !self.trampolines.is_empty() && in_sorted_ranges(&self.trampolines, address)
    }

    /// The unwinder holding the rules for `lookup`.
    pub fn unwinder_for(&self, lookup: u64) -> &NativeUnwinder {
        if !self.alternate_ranges.is_empty() && in_sorted_ranges(&self.alternate_ranges, lookup) {
            &self.alternate
        } else {
            &self.unwinder
        }
    }
}

/// An address space and how many processes use it.
struct Shared {
    space: AddressSpace,
    processes: u32,
}

/// The address spaces of the processes with an unwinder: one per process, except that
/// processes forked from one another share one until either maps new code. Bounded by the
/// processes (at most one space each); a space goes with the last process that uses it.
#[derive(Default)]
pub(crate) struct Spaces {
    spaces: HashMap<u64, Shared, FxBuildHasher>,
    of_process: HashMap<u32, u64, FxBuildHasher>,
    next_id: u64,
}

/// What [`Spaces::for_change`] gives.
pub(crate) struct ForChange<'a> {
    pub space: &'a mut AddressSpace,
    /// The space was shared and this is a new copy (its files have one more user).
    pub copied: bool,
}

impl Spaces {
    /// Processes with a space.
    pub fn processes(&self) -> usize {
        self.of_process.len()
    }

    /// Distinct spaces.
    pub fn len(&self) -> usize {
        self.spaces.len()
    }

    /// Whether `pid` has a space.
    pub fn contains(&self, pid: u32) -> bool {
        self.of_process.contains_key(&pid)
    }

    /// The space of `pid`.
    pub fn get(&self, pid: u32) -> Option<&AddressSpace> {
        let id = self.of_process.get(&pid)?;
        self.spaces.get(id).map(|s| &s.space)
    }

    /// Give `pid` (which has none) a space of its own.
    pub fn insert(&mut self, pid: u32, space: AddressSpace) {
        let id = self.next_id;
        self.next_id += 1;
        self.spaces.insert(
            id,
            Shared {
                space,
                processes: 1,
            },
        );
        self.of_process.insert(pid, id);
    }

    /// Let `pid` (which has none) use `with`'s space; false when `with` has none.
    pub fn share(&mut self, pid: u32, with: u32) -> bool {
        let Some(&id) = self.of_process.get(&with) else {
            return false;
        };
        let Some(shared) = self.spaces.get_mut(&id) else {
            return false;
        };
        shared.processes += 1;
        self.of_process.insert(pid, id);
        true
    }

    /// The space of `pid`, to change for it alone: a copy of its own first when it is shared
    /// (O(modules), once; later changes go to the copy).
    pub fn for_change(&mut self, pid: u32) -> Option<ForChange<'_>> {
        let id = *self.of_process.get(&pid)?;
        let shared = self.spaces.get_mut(&id)?;
        if shared.processes == 1 {
            let space = &mut self.spaces.get_mut(&id)?.space;
            return Some(ForChange {
                space,
                copied: false,
            });
        }
        shared.processes -= 1;
        let copy = shared.space.clone();
        self.of_process.remove(&pid);
        self.insert(pid, copy);
        let id = self.of_process[&pid];
        let space = &mut self.spaces.get_mut(&id)?.space;
        Some(ForChange {
            space,
            copied: true,
        })
    }

    /// `pid` no longer uses its space: the space, when it was the last process using it.
    pub fn remove(&mut self, pid: u32) -> Option<AddressSpace> {
        let id = self.of_process.remove(&pid)?;
        let shared = self.spaces.get_mut(&id)?;
        shared.processes -= 1;
        if shared.processes > 0 {
            return None;
        }
        self.spaces.remove(&id).map(|s| s.space)
    }

    /// The processes with a space.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.of_process.keys().copied()
    }

    /// Every space once (changes apply to all processes sharing it).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut AddressSpace> + '_ {
        self.spaces.values_mut().map(|s| &mut s.space)
    }
}
