//! The symbolizers of mapped files, opened once and kept in an LRU bounded by count and by
//! estimated bytes ([`FileSymbolizer::estimated_bytes`], which grows as lookups parse more
//! DWARF units, so a symbolizer is weighed again after each lookup). Dropping one releases
//! its mappings, and so the disk space of a deleted binary that nothing else holds.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use profile::WindowFile;
use tracing::{debug, warn};

use super::debuginfod::Fetcher;
use super::lru::Lru;
use super::preload::{Opened, PreloadQueue, Preloader};
use super::stats::UserSymbolStats;
use crate::{DebugSearch, FileSymbolizer};

/// Weight of a file remembered as unreadable.
const UNREADABLE_WEIGHT: u64 = 256;

/// Open symbolizers by window file id.
pub(crate) struct OpenFiles {
    lru: Lru<u32, Opened>,
    preloader: Preloader,
    search: DebugSearch,
    fetcher: Fetcher,
}

fn weight(opened: &Opened) -> u64 {
    opened.as_ref().map_or(UNREADABLE_WEIGHT, |s| {
        s.estimated_bytes().max(UNREADABLE_WEIGHT)
    })
}

impl OpenFiles {
    /// At most `max_files` symbolizers of `max_bytes` estimated bytes in all, opened with
    /// `search`, missing debug info fetched through `fetcher`; the preloader queues at most
    /// `preload_queue` requests.
    pub(crate) fn new(
        max_files: usize,
        max_bytes: u64,
        search: DebugSearch,
        fetcher: Fetcher,
        preload_queue: usize,
    ) -> OpenFiles {
        OpenFiles {
            lru: Lru::new(max_files, max_bytes),
            preloader: Preloader::new(search.clone(), preload_queue, max_files),
            search,
            fetcher,
        }
    }

    /// Where recordings send files to open ahead.
    pub(crate) fn preload_queue(&self) -> PreloadQueue {
        self.preloader.queue()
    }

    /// The symbolizer of `file` (None: it cannot be read), opening it if it is not open.
    pub(crate) fn symbolizer(
        &mut self,
        file: &WindowFile,
        window: u64,
        now: Instant,
        stats: &mut UserSymbolStats,
    ) -> Option<Arc<FileSymbolizer>> {
        if let Some(hit) = self.lru.get(&file.id) {
            return hit.clone();
        }
        let opened = match self.preloader.take(file.id) {
            // Opened ahead; files without DWARF still go through `open` when debuginfod may
            // supply it.
            Some(Some(ready)) if self.complete(&ready, window, now) => Some(ready),
            _ if file.path.starts_with('/') => self.open(file, window, now, stats),
            _ => None,
        };
        stats.files += opened.is_some() as usize;
        self.insert(file.id, opened.clone(), stats);
        opened
    }

    /// Take what the preloader opened (at the start of a window).
    pub(crate) fn adopt_preloaded(
        &mut self,
        window: u64,
        now: Instant,
        stats: &mut UserSymbolStats,
    ) {
        for (id, opened) in self.preloader.take_all() {
            let Some(ready) = opened else { continue };
            if self.lru.peek(&id).is_some() || !self.complete(&ready, window, now) {
                continue;
            }
            stats.files += 1;
            self.insert(id, Some(ready), stats);
        }
    }

    /// Whether a symbolizer opened ahead is as good as opening the file now: it has DWARF,
    /// or debuginfod could not be asked for it anyway.
    fn complete(&self, ready: &FileSymbolizer, window: u64, now: Instant) -> bool {
        ready.has_dwarf() || !self.fetcher.available(window, now)
    }

    fn insert(&mut self, id: u32, opened: Opened, stats: &mut UserSymbolStats) {
        let w = weight(&opened);
        self.preloader.set_open(id, true);
        let dropped = self.lru.insert(id, opened, w);
        self.dropped(dropped, stats);
    }

    fn dropped(&mut self, dropped: Vec<(u32, Opened)>, stats: &mut UserSymbolStats) {
        for (id, _) in dropped {
            debug!(file = id, "symbolizer closed (least recently used)");
            self.preloader.set_open(id, false);
            stats.files_evicted += 1;
        }
    }

    /// Weigh the symbolizer of `id` again (after lookups that may have parsed DWARF).
    pub(crate) fn reweigh(&mut self, id: u32, stats: &mut UserSymbolStats) {
        let Some(opened) = self.lru.peek(&id) else {
            return;
        };
        let w = weight(opened);
        let dropped = self.lru.reweigh(&id, w);
        self.dropped(dropped, stats);
    }

    /// Close the symbolizer of `id` and forget it was asked for; true if one was open.
    pub(crate) fn evict(&mut self, id: u32) -> bool {
        self.preloader.forget(id);
        self.lru.remove(&id).is_some()
    }

    /// Close every symbolizer and drop what was opened ahead.
    pub(crate) fn clear(&mut self) {
        self.preloader.clear();
        self.lru.clear();
    }

    /// Files held, their estimated bytes, and results of the preloader not yet taken.
    pub(crate) fn sizes(&self) -> (usize, u64, usize) {
        (self.lru.len(), self.lru.weight(), self.preloader.sizes().0)
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
        let live = file.live_path.clone().filter(|p| p.exists());
        let (read_from, path) = match (live, &file.pinned) {
            (live, Some(pinned)) => (
                PathBuf::from(format!("/proc/self/fd/{}", pinned.as_raw_fd())),
                live.unwrap_or(plain),
            ),
            (Some(live), None) => (live.clone(), live),
            (None, None) => (plain.clone(), plain),
        };
        let build_id = file.build_id.as_deref();
        let opened = FileSymbolizer::open_as(&read_from, &path, build_id, &self.search);
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
                match FileSymbolizer::open_as(&read_from, &path, Some(&id), &search) {
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
