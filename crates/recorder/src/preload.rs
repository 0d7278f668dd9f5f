//! Opening the symbolizers of binaries that samples land in while recording goes on, in a
//! background thread, so that little is left to do when the recording ends.
//!
//! The sink asks for a file when a new distinct stack passes through it (never per sample);
//! the thread opens the file's [`FileSymbolizer`] and builds its DWARF index with a first lookup.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use procmap::{FileId, ProcessTable};
use rustc_hash::FxBuildHasher;
use symbolize::{DebugSearch, FileOffset, FileSymbolizer, FrameCache};
use tracing::debug;

use procmap::{live_path, PinnedFiles};

/// Symbolizers opened ahead, by file (None: the file could not be opened).
pub(crate) type Preloaded = HashMap<FileId, Option<Arc<FileSymbolizer>>, FxBuildHasher>;

struct Job {
    file: FileId,
    read_from: PathBuf,
    path: PathBuf,
    build_id: Option<Vec<u8>>,
    warm_offset: u64,
}

/// The background opener.
pub(crate) struct Preloader {
    jobs: Option<mpsc::Sender<Job>>,
    worker: Option<JoinHandle<()>>,
    queued: HashSet<FileId, FxBuildHasher>,
}

impl Preloader {
    /// Start the thread, which puts what it opens into `done`; `search` is where debug files
    /// are looked for.
    pub(crate) fn start(search: DebugSearch, done: Arc<Mutex<Preloaded>>) -> Preloader {
        let (tx, rx) = mpsc::channel::<Job>();
        let worker = std::thread::Builder::new()
            .name("symbol-preload".into())
            .spawn(move || {
                let mut frames = Vec::new();
                for job in rx {
                    let opened = FileSymbolizer::open_as(
                        &job.read_from,
                        &job.path,
                        job.build_id.as_deref(),
                        &search,
                    )
                    .ok()
                    .map(Arc::new);
                    if let Some(s) = &opened {
                        // The first lookup builds the DWARF index.
                        if let Some(addr) = s.file_offset_to_addr(FileOffset(job.warm_offset)) {
                            s.frames_into(addr, false, &mut frames);
                        }
                    }
                    debug!(path = %job.path.display(), ok = opened.is_some(), "preloaded symbols");
                    done.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(job.file, opened);
                }
            })
            .ok();
        Preloader {
            jobs: worker.as_ref().map(|_| tx),
            worker,
            queued: HashSet::default(),
        }
    }

    /// A new distinct stack: queue the files its user frames (code addresses) are in.
    pub(crate) fn new_stack(
        &mut self,
        processes: &ProcessTable,
        pinned: &PinnedFiles,
        frame_cache: &mut FrameCache,
        pid: u32,
        time: u64,
        user: &[u64],
    ) {
        let Some(jobs) = &self.jobs else { return };
        for &entry in user {
            let Some(mapping) = processes.find_mapping(pid, entry, time) else {
                continue;
            };
            if self.queued.contains(&mapping.file) {
                continue;
            }
            let file = processes.files().get(mapping.file);
            if file.is_pseudo() {
                continue;
            }
            // Frames an earlier run saw need no symbolizer.
            let offset = mapping.file_offset(entry);
            if let Some(id) = file.build_id.as_deref() {
                if frame_cache.contains(id, offset, false) || frame_cache.contains(id, offset, true)
                {
                    continue;
                }
            }
            self.queued.insert(mapping.file);
            let plain = PathBuf::from(file.path.trim_end_matches(" (deleted)"));
            let (read_from, path) = match (
                live_path(pid, mapping, &file.path),
                pinned.path(mapping.file),
            ) {
                (Some(live), _) => (live.clone(), live),
                (None, Some(fd)) => (fd, plain),
                (None, None) => (plain.clone(), plain),
            };
            let job = Job {
                file: mapping.file,
                read_from,
                path,
                build_id: file.build_id.clone(),
                warm_offset: offset,
            };
            let _ = jobs.send(job);
        }
    }

    /// Stop taking work and wait for what is queued.
    pub(crate) fn finish(mut self) {
        drop(self.jobs.take());
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}
