//! The unwinders' side of loading: looking up a mapped binary's sections, asking the loader
//! thread for them, taking finished loads in (added to every address space waiting for them),
//! and dropping unused sections beyond the limits.

use std::sync::Arc;

use procmap::{FileId, Mapping, ProcessTable};
use tracing::debug;

use super::{FileEntry, Lookup, Ready, Unwinders};
use crate::loader::{LoadRequest, Loaded, NotQueued};
use crate::modules::module_parts;
use crate::sections::UnwindSections;

impl Unwinders {
    /// The unwind sections of a mapped file, as far as they are known; asked of the loader
    /// when the file is not known yet. Never touches the file.
    pub(super) fn section_for(
        &mut self,
        table: &ProcessTable,
        pid: u32,
        mapping: &Mapping,
    ) -> Lookup {
        let file = table.files().get(mapping.file);
        if file.path == "[vdso]" {
            return match &self.vdso {
                Some(s) => Lookup::Ready(s.clone(), None),
                None => Lookup::None,
            };
        }
        if file.is_pseudo() {
            return Lookup::None;
        }
        self.clock += 1;
        match self.files.get_mut(&mapping.file) {
            Some(FileEntry::Ready(r)) => {
                r.last_used = self.clock;
                match &r.sections {
                    Some(s) => Lookup::Ready(s.clone(), Some((mapping.file, r.generation))),
                    None => Lookup::None,
                }
            }
            Some(FileEntry::Pending { .. }) => Lookup::Pending,
            None => {
                let request = LoadRequest {
                    file: mapping.file,
                    pid,
                    mapping: *mapping,
                    path: file.path.clone(),
                };
                self.request(request)
            }
        }
    }

    /// Ask the loader for a file not known yet.
    pub(super) fn request(&mut self, request: LoadRequest) -> Lookup {
        let file = request.file;
        // Requests wait their turn behind deferred ones.
        let sent = if self.deferred.is_empty() {
            self.loader.try_request(request)
        } else {
            Err(NotQueued::Full(request))
        };
        match sent {
            Ok(()) => {
                self.in_flight += 1;
                self.files
                    .insert(file, FileEntry::Pending { request: None });
                Lookup::Pending
            }
            Err(NotQueued::Full(request)) => {
                self.deferred.push_back(file);
                self.files.insert(
                    file,
                    FileEntry::Pending {
                        request: Some(request),
                    },
                );
                Lookup::Pending
            }
            Err(NotQueued::NoThread) => {
                self.loader_gone();
                self.insert_ready(file, None);
                Lookup::None
            }
        }
    }

    /// Take in the loads that have finished and queue deferred requests (never blocks; a
    /// couple of loads and compares when nothing is pending).
    pub(super) fn take_loaded(&mut self) {
        if self.in_flight == 0 && self.deferred.is_empty() {
            return;
        }
        let mut arrived = false;
        while let Some(loaded) = self.loader.try_loaded() {
            self.in_flight -= 1;
            self.arrived(loaded);
            arrived = true;
        }
        if self.loader.is_gone() {
            self.loader_gone();
        }
        while self.in_flight < self.limits.max_queued_loads {
            let Some(file) = self.deferred.pop_front() else {
                break;
            };
            let Some(FileEntry::Pending { request }) = self.files.get_mut(&file) else {
                continue; // forgotten meanwhile
            };
            let Some(request) = request.take() else {
                continue;
            };
            match self.loader.try_request(request) {
                Ok(()) => self.in_flight += 1,
                Err(NotQueued::Full(request)) => {
                    if let Some(FileEntry::Pending { request: slot }) = self.files.get_mut(&file) {
                        *slot = Some(request);
                    }
                    self.deferred.push_front(file);
                    break;
                }
                Err(NotQueued::NoThread) => {
                    self.loader_gone();
                    break;
                }
            }
        }
        if arrived && self.over_limits() {
            self.evict();
        }
    }

    /// A file's sections arrived: keep them, and add them to the processes waiting for them.
    pub(super) fn arrived(&mut self, loaded: Loaded) {
        if loaded.panicked {
            self.load_panics += 1;
        }
        let file = loaded.file;
        let sections = loaded.sections.map(Arc::new);
        // An answer to a request of a file forgotten since (or of an earlier entry) is not
        // kept, but processes waiting for the file still get it.
        let generation = match self.files.get(&file) {
            Some(FileEntry::Pending { request: None }) => {
                Some(self.insert_ready(file, sections.clone()))
            }
            _ => None,
        };
        if self.waiting == 0 {
            return;
        }
        let mut users = 0u32;
        let mut taken = Vec::new();
        // Each address space once: the processes sharing one all get the modules.
        for p in self.spaces.iter_mut() {
            taken.clear();
            p.pending.retain(|&start, m| {
                let keep = m.file != file;
                if !keep {
                    taken.push((start, *m));
                }
                keep
            });
            self.waiting -= taken.len();
            let Some(s) = &sections else { continue };
            // By start address: framehop's list grows at its end where it can.
            for &(start, m) in &taken {
                let Some(parts) = module_parts(s, start..m.end, m.pgoff) else {
                    continue;
                };
                if p.add(start, parts) {
                    if let Some(generation) = generation {
                        users += u32::from(p.files.insert((file, generation)));
                    }
                }
            }
        }
        if let Some(FileEntry::Ready(r)) = self.files.get_mut(&file) {
            r.users += users;
        }
    }

    /// Keep `sections` as `file`'s entry; its generation.
    pub(super) fn insert_ready(
        &mut self,
        file: FileId,
        sections: Option<Arc<UnwindSections>>,
    ) -> u64 {
        self.clock += 1;
        let bytes = sections.as_ref().map_or(0, |s| s.mapped_bytes());
        self.ready_files += 1;
        self.with_sections += usize::from(sections.is_some());
        self.held_bytes += bytes;
        let old = self.files.insert(
            file,
            FileEntry::Ready(Ready {
                sections,
                bytes,
                users: 0,
                last_used: self.clock,
                generation: self.clock,
            }),
        );
        if let Some(FileEntry::Ready(r)) = old {
            self.dropped(&r);
        }
        self.clock
    }

    /// Account for a Ready entry removed.
    pub(super) fn dropped(&mut self, r: &Ready) {
        self.ready_files -= 1;
        self.with_sections -= usize::from(r.sections.is_some());
        self.held_bytes -= r.bytes;
    }

    /// The loader is gone: nothing pending will arrive. Files asked for are forgotten (asked
    /// again, and found to have no sections, when next seen).
    pub(super) fn loader_gone(&mut self) {
        if self.in_flight == 0 && self.deferred.is_empty() {
            return;
        }
        self.in_flight = 0;
        self.deferred.clear();
        self.files
            .retain(|_, e| !matches!(e, FileEntry::Pending { .. }));
        for p in self.spaces.iter_mut() {
            p.pending.clear();
        }
        self.waiting = 0;
    }

    pub(super) fn over_limits(&self) -> bool {
        self.ready_files > self.limits.max_files || self.held_bytes > self.limits.max_mapped_bytes
    }

    /// Drop the least recently used files that no process unwinder uses until 7/8 of the
    /// limits are held (so that eviction does not run at every arrival).
    pub(super) fn evict(&mut self) {
        let files_goal = self.limits.max_files - self.limits.max_files / 8;
        let bytes_goal = self.limits.max_mapped_bytes - self.limits.max_mapped_bytes / 8;
        let mut unused: Vec<(u64, FileId)> = self
            .files
            .iter()
            .filter_map(|(&id, e)| match e {
                FileEntry::Ready(r) if r.users == 0 => Some((r.last_used, id)),
                _ => None,
            })
            .collect();
        unused.sort_unstable();
        let before = self.evicted;
        for (_, id) in unused {
            if self.ready_files <= files_goal && self.held_bytes <= bytes_goal {
                break;
            }
            if let Some(FileEntry::Ready(r)) = self.files.remove(&id) {
                self.dropped(&r);
                self.evicted += 1;
            }
        }
        debug!(
            evicted = self.evicted - before,
            files = self.ready_files,
            bytes = self.held_bytes,
            "dropped unused unwind sections"
        );
    }
}
