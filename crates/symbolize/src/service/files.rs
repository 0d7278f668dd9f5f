//! The symbolizers of mapped files, opened once and kept in an LRU bounded by count and by
//! estimated bytes ([`FileSymbolizer::estimated_bytes`], which grows as lookups parse more
//! DWARF units, so a symbolizer is weighed again after each lookup). Dropping one releases
//! its mappings, and so the disk space of a deleted binary that nothing else holds.
//!
//! Symbolizers are kept by source ([`super::sources`]): copies of one binary share the
//! symbolizer of the copy opened first, until that copy is released (then the symbolizer is
//! closed, so that it does not keep a deleted copy's space, and the next copy that needs one
//! opens it again). The preloader is told which sources the service knows, and opens no
//! copy of them ahead: their names are cached.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use profile::WindowFile;
use tracing::{debug, warn};

use super::debuginfod::Fetcher;
use super::lru::Lru;
use super::preload::{Opened, PreloadQueue, Preloaded, Preloader};
use super::sources::{SourceId, Sources};
use super::stats::UserSymbolStats;
use crate::{DebugSearch, FileSymbolizer};

/// Weight of a file remembered as unreadable.
const UNREADABLE_WEIGHT: u64 = 256;

/// A symbolizer not used for this long is closed: the names it gave stay cached, so a
/// binary whose frames are all named needs no open file, mapping or DWARF index.
const IDLE_CLOSE: Duration = Duration::from_secs(60);

/// A symbolizer held, and the file it was opened from.
struct Held {
    opened: Opened,
    /// The window file id it reads.
    origin: u32,
}

/// Open symbolizers by source.
pub(crate) struct OpenFiles {
    lru: Lru<SourceId, Held>,
    /// The LRU's use counter at the start of recent windows, oldest first: what was not
    /// used since the newest mark older than [`IDLE_CLOSE`] is closed.
    marks: VecDeque<(Instant, u64)>,
    sources: Sources,
    preloader: Preloader,
    search: DebugSearch,
    fetcher: Fetcher,
    /// The LRU's use counter at the last [`OpenFiles::trim`]: symbolizers used after it were
    /// used since.
    trimmed_at: u64,
    /// Lookups in symbolizers (DWARF, Go table, symbol tables) since the service started.
    lookups: u64,
    /// DWARF indexes (units, whole files) those lookups built, again after each release, and
    /// those the preloader built warming the files it opened (counted when taken).
    indexes_built: u64,
}

fn weight(held: &Held) -> u64 {
    held.opened.as_ref().map_or(UNREADABLE_WEIGHT, |s| {
        s.estimated_bytes().max(UNREADABLE_WEIGHT)
    })
}

impl OpenFiles {
    /// At most `max_files` symbolizers of `max_bytes` estimated bytes in all, opened with
    /// `search`, missing debug info fetched through `fetcher`; the preloader queues at most
    /// `preload_queue` requests, and builds no DWARF index for the build-ids in
    /// `symbol_table_only`.
    pub(crate) fn new(
        max_files: usize,
        max_bytes: u64,
        search: DebugSearch,
        fetcher: Fetcher,
        preload_queue: usize,
        symbol_table_only: Vec<Box<[u8]>>,
    ) -> OpenFiles {
        OpenFiles {
            lru: Lru::new(max_files, max_bytes),
            marks: VecDeque::new(),
            sources: Sources::default(),
            preloader: Preloader::new(search.clone(), symbol_table_only, preload_queue, max_files),
            search,
            fetcher,
            trimmed_at: 0,
            lookups: 0,
            indexes_built: 0,
        }
    }

    /// Where recordings send files to open ahead.
    pub(crate) fn preload_queue(&self) -> PreloadQueue {
        self.preloader.queue()
    }

    /// The source of `file`: the key of names cached for it.
    pub(crate) fn source(&mut self, file: &WindowFile) -> SourceId {
        self.sources.of(file)
    }

    /// The key of `source`, while one of its files is not released.
    pub(crate) fn key(&self, source: SourceId) -> Option<&super::sources::SourceKey> {
        self.sources.key(source)
    }

    /// The symbolizer of `file` (None: it cannot be read), opening it if neither it nor a
    /// copy of it is open.
    pub(crate) fn symbolizer(
        &mut self,
        file: &WindowFile,
        window: u64,
        now: Instant,
        stats: &mut UserSymbolStats,
    ) -> Option<Arc<FileSymbolizer>> {
        let source = self.sources.of(file);
        if let Some(hit) = self.lru.get(&source) {
            return hit.opened.clone();
        }
        let key = self.sources.key(source)?.clone();
        let (opened, origin) = match self.preloader.take(&key) {
            // Opened ahead; files without DWARF still go through `open` when debuginfod may
            // supply it.
            Some(Preloaded {
                origin,
                opened: Some(ready),
            }) if self.complete(&ready, window, now) => {
                // What its warming built counts with the lookups' indexes.
                self.indexes_built += ready.dwarf_indexes_built();
                (Some(ready), origin)
            }
            _ if file.path.starts_with('/') => (self.open(file, window, now, stats), file.id),
            _ => (None, file.id),
        };
        stats.files += opened.is_some() as usize;
        self.insert(
            source,
            Held {
                opened: opened.clone(),
                origin,
            },
            stats,
        );
        opened
    }

    /// At the start of a window: close the symbolizers not used for [`IDLE_CLOSE`].
    pub(crate) fn close_idle(&mut self, now: Instant, stats: &mut UserSymbolStats) {
        self.marks.push_back((now, self.lru.tick()));
        let mut cutoff = None;
        while let Some(&(at, tick)) = self.marks.front() {
            if now.duration_since(at) < IDLE_CLOSE {
                break;
            }
            cutoff = Some(tick);
            self.marks.pop_front();
        }
        if let Some(tick) = cutoff {
            for (_, held) in self.lru.remove_unused_since(tick) {
                debug!(file = held.origin, "symbolizer closed (idle)");
                stats.files_evicted += 1;
            }
        }
    }

    /// Take what the preloader opened (at the start of a window).
    pub(crate) fn adopt_preloaded(
        &mut self,
        window: u64,
        now: Instant,
        stats: &mut UserSymbolStats,
    ) {
        // Results for files no window has named yet stay with the preloader: the window
        // that needs them takes them by key (taking them here would drop them unused and open
        // the file a second time).
        let sources = &self.sources;
        let taken = self
            .preloader
            .take_where(|origin| sources.source_of_file(origin).is_some());
        for (key, preloaded) in taken {
            let Some(ready) = preloaded.opened else {
                continue;
            };
            // The file it was opened from has no source when it was released meanwhile.
            let Some(source) = self.sources.source_of_file(preloaded.origin) else {
                continue;
            };
            if self.sources.key(source) != Some(&key)
                || self.lru.peek(&source).is_some()
                || !self.complete(&ready, window, now)
            {
                continue;
            }
            stats.files += 1;
            self.indexes_built += ready.dwarf_indexes_built();
            let held = Held {
                opened: Some(ready),
                origin: preloaded.origin,
            };
            self.insert(source, held, stats);
        }
    }

    /// Whether a symbolizer opened ahead is as good as opening the file now: it has DWARF,
    /// or debuginfod could not be asked for it anyway.
    fn complete(&self, ready: &FileSymbolizer, window: u64, now: Instant) -> bool {
        ready.has_dwarf() || !self.fetcher.available(window, now)
    }

    fn insert(&mut self, source: SourceId, held: Held, stats: &mut UserSymbolStats) {
        let w = weight(&held);
        if let Some(key) = self.sources.key(source) {
            self.preloader.set_open(key, true);
        }
        let dropped = self.lru.insert(source, held, w);
        self.dropped(dropped, stats);
    }

    fn dropped(&mut self, dropped: Vec<(SourceId, Held)>, stats: &mut UserSymbolStats) {
        // The source stays known to the preloader: its names are cached, and an address
        // they miss opens the file when a window needs it.
        for (_, held) in dropped {
            debug!(
                file = held.origin,
                "symbolizer closed (least recently used)"
            );
            stats.files_evicted += 1;
        }
    }

    /// Weigh the symbolizer of `source` again (after lookups that may have parsed DWARF).
    pub(crate) fn reweigh(&mut self, source: SourceId, stats: &mut UserSymbolStats) {
        let Some(held) = self.lru.peek(&source) else {
            return;
        };
        let w = weight(held);
        let dropped = self.lru.reweigh(&source, w);
        self.dropped(dropped, stats);
    }

    /// No process maps `file` any more: close the symbolizer opened from it (so that it
    /// holds no released file; a copy still mapped opens it again when a window needs an
    /// address its cached names miss), and forget sources idle too long. True if a
    /// symbolizer was closed.
    pub(crate) fn evict(&mut self, file: u32) -> bool {
        self.preloader.forget_origin(file);
        let Some(released) = self.sources.release(file) else {
            return false;
        };
        for (source, key) in &released.dropped {
            self.preloader.forget(key);
            self.lru.remove(source);
        }
        let opened_from_it = self
            .lru
            .peek(&released.source)
            .is_some_and(|held| held.origin == file);
        opened_from_it && self.lru.remove(&released.source).is_some()
    }

    /// Let go of what no lookup used since the last call: the resident pages of the mapped
    /// files of symbolizers not used since, and the DWARF indexes (whole-file, per unit) not
    /// used since. What the next lookups need again stays.
    pub(crate) fn trim(&mut self) {
        for (held, used) in self.lru.values_used_since(self.trimmed_at) {
            if let Some(symbolizer) = &held.opened {
                if !used {
                    symbolizer.release_resident_pages();
                }
                symbolizer.release_idle();
            }
        }
        self.trimmed_at = self.lru.tick();
    }

    /// Let go of the resident pages of every open symbolizer's mapped files (nothing parsed
    /// is dropped).
    pub(crate) fn release_resident_pages(&self) {
        for held in self.lru.values() {
            if let Some(symbolizer) = &held.opened {
                symbolizer.release_resident_pages();
            }
        }
    }

    /// Count a lookup in a symbolizer, which built `indexes` DWARF indexes.
    pub(crate) fn count_lookup(&mut self, indexes: u64) {
        self.lookups += 1;
        self.indexes_built += indexes;
    }

    /// DWARF indexes built by lookups since the service started, and by the preloader's
    /// warming of the files taken from it.
    pub(crate) fn indexes_built(&self) -> u64 {
        self.indexes_built
    }

    /// Lookups in symbolizers since the service started.
    pub(crate) fn lookups(&self) -> u64 {
        self.lookups
    }

    /// Close every symbolizer, drop what was opened ahead, and forget every file.
    pub(crate) fn clear(&mut self) {
        self.marks.clear();
        self.preloader.clear();
        self.lru.clear();
        self.sources.clear();
    }

    /// Files held, their estimated bytes, and results of the preloader not yet taken.
    pub(crate) fn sizes(&self) -> (usize, u64, usize) {
        (self.lru.len(), self.lru.weight(), self.preloader.sizes().0)
    }

    /// Files seen and not released, and the sources they make.
    pub(crate) fn sources(&self) -> (usize, usize) {
        self.sources.sizes()
    }

    fn open(
        &mut self,
        file: &WindowFile,
        window: u64,
        now: Instant,
        stats: &mut UserSymbolStats,
    ) -> Option<Arc<FileSymbolizer>> {
        // The descriptor pinned when the mapping was seen, checked to be the mapped file (the
        // path may name another file now: a symlink to one the process's user could not
        // read); else the file as a live process sees it; else the path as we see it. The
        // debuglink is searched beside the path the process sees.
        let plain = PathBuf::from(file.path.trim_end_matches(" (deleted)"));
        let live = file
            .live
            .and_then(|m| procmap::live_path_of(m.pid, m.start, m.end, &file.path));
        let (read_from, path) = match (live, &file.pinned) {
            (live, Some(pinned)) => (
                PathBuf::from(format!("/proc/self/fd/{}", pinned.as_raw_fd())),
                live.unwrap_or(plain),
            ),
            (Some(live), None) => (live.clone(), live),
            (None, None) => (plain.clone(), plain),
        };
        // Our own access for the pinned descriptor; the process's through its root; else
        // nobody's (no process vouches for what the path names now).
        let access = procmap::Access::for_path(&read_from);
        let build_id = file.build_id.as_deref();
        let opened = FileSymbolizer::open_as(&read_from, &path, build_id, &self.search, &access);
        let needs_debug_info = match &opened {
            Ok(s) => !s.has_dwarf(),
            Err(_) => true,
        };
        let build_id = build_id
            .map(<[u8]>::to_vec)
            .or_else(|| opened.as_ref().ok()?.elf().build_id().map(<[u8]>::to_vec));
        if let (true, Some(id)) = (needs_debug_info, build_id) {
            if let Some(fetched) = self.fetcher.fetch(&id, &file.path, window, now, stats) {
                let mut search = self.search.clone();
                search.debug_files.push(fetched);
                match FileSymbolizer::open_as(&read_from, &path, Some(&id), &search, &access) {
                    Ok(s) => return Some(Arc::new(s)),
                    Err(err) => {
                        warn!(file = %file.path, %err, "the debug info from debuginfod is unusable")
                    }
                }
            }
        }
        match opened {
            Ok(s) => {
                debug!(file = %file.path, sources = ?s.sources(), "symbol sources");
                Some(Arc::new(s))
            }
            Err(err) => {
                if file.path.ends_with(" (deleted)") {
                    debug!(file = %file.path, %err, "cannot read a deleted file");
                } else {
                    warn!(file = %file.path, %err, "cannot read symbols; its frames stay unnamed");
                }
                None
            }
        }
    }
}
