//! The recording's half of opening symbolizers ahead: when a new distinct stack is counted
//! (never per sample), find the files its user frames are in and ask the symbol service to
//! open them ([`symbolize::service::PreloadQueue`]); the service's own thread does the work.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use procmap::{FileId, ProcessTable};
use rustc_hash::FxBuildHasher;
use symbolize::service::{ContentKey, PreloadQueue, PreloadRequest};
use symbolize::FrameCache;

use procmap::{live_path, PinnedFiles};

/// Files remembered as asked for; past this the memory is emptied (asking again costs a
/// request, which the service drops for a file it holds).
const MAX_REQUESTED: usize = 1 << 16;

/// Sends the files of new stacks to the symbol service.
pub(crate) struct Preloader {
    queue: PreloadQueue,
    requested: HashSet<FileId, FxBuildHasher>,
    /// Content keys of the files seen (one `fstat` per file), emptied with `requested`.
    content: HashMap<FileId, Option<ContentKey>, FxBuildHasher>,
}

impl Preloader {
    /// Ask `queue` (a [`symbolize::service::SymbolFeed`]'s) to open files ahead; the service
    /// opens them with its own debug search.
    pub(crate) fn start(queue: PreloadQueue) -> Preloader {
        Preloader {
            queue,
            requested: HashSet::default(),
            content: HashMap::default(),
        }
    }

    /// A new distinct stack: ask for the files its user frames (code addresses) are in.
    pub(crate) fn new_stack(
        &mut self,
        processes: &ProcessTable,
        pinned: &PinnedFiles,
        frame_cache: &mut FrameCache,
        pid: u32,
        time: u64,
        user: &[u64],
    ) {
        for &entry in user {
            let Some(mapping) = processes.find_mapping(pid, entry, time) else {
                continue;
            };
            if self.requested.contains(&mapping.file) {
                continue;
            }
            let file = processes.files().get(mapping.file);
            if file.is_pseudo() {
                continue;
            }
            if self.requested.len().max(self.content.len()) >= MAX_REQUESTED {
                self.requested.clear();
                self.content.clear();
            }
            let content = self
                .content
                .entry(mapping.file)
                .or_insert_with(|| {
                    let held = pinned.handle(mapping.file)?;
                    ContentKey::of(file.build_id.as_deref(), &held)
                })
                .clone();
            // Frames an earlier run saw need no symbolizer.
            let offset = mapping.file_offset(entry);
            if let Some(id) = content.as_ref().and_then(ContentKey::cache_id) {
                if frame_cache.contains(&id, offset, false)
                    || frame_cache.contains(&id, offset, true)
                {
                    continue;
                }
            }
            self.requested.insert(mapping.file);
            let plain = PathBuf::from(file.path.trim_end_matches(" (deleted)"));
            // The pinned descriptor first: it was checked to be the mapped file, where the
            // path may name another one now (a symlink to a file the process's user could
            // not read); the live path only says where to look for a debuglink.
            let (read_from, path) = match (
                live_path(pid, mapping, &file.path),
                pinned.path(mapping.file),
            ) {
                (live, Some(fd)) => (fd, live.unwrap_or(plain)),
                (Some(live), None) => (live.clone(), live),
                (None, None) => (plain.clone(), plain),
            };
            // Copies of a file the service holds (a redeployed binary) are not opened again.
            self.queue.request(PreloadRequest {
                file: mapping.file.0,
                content,
                read_from,
                path,
                build_id: file.build_id.clone(),
                warm_offset: offset,
            });
        }
    }
}
