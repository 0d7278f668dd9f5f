//! Opening the symbolizers of binaries that samples land in while recording goes on, in a
//! background thread, so that little is left to do when the recording ends.
//!
//! The sink asks for a file when a new distinct stack passes through it (never per sample);
//! the thread opens the file's [`FileSymbolizer`] and builds its DWARF index with a first lookup.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use procmap::{FileId, ProcessTable};
use rustc_hash::FxBuildHasher;
use sampler::context;
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
    worker: Option<JoinHandle<Preloaded>>,
    queued: HashSet<FileId, FxBuildHasher>,
}

impl Preloader {
    /// Start the thread; `search` is where debug files are looked for.
    pub(crate) fn start(search: DebugSearch) -> Preloader {
        let (tx, rx) = mpsc::channel::<Job>();
        let worker = std::thread::Builder::new()
            .name("symbol-preload".into())
            .spawn(move || {
                let mut done = Preloaded::default();
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
                    done.insert(job.file, opened);
                }
                done
            })
            .ok();
        Preloader {
            jobs: worker.as_ref().map(|_| tx),
            worker,
            queued: HashSet::default(),
        }
    }

    /// A new distinct stack: queue the files its user frames are in.
    pub(crate) fn new_stack(
        &mut self,
        processes: &ProcessTable,
        pinned: &PinnedFiles,
        frame_cache: &mut FrameCache,
        pid: u32,
        time: u64,
        chain: &[u64],
    ) {
        let Some(jobs) = &self.jobs else { return };
        let mut in_user = false;
        let mut first = true;
        for &entry in chain {
            if context::is_marker(entry) {
                in_user = entry == context::USER;
                continue;
            }
            // As `resolve` looks them up: every entry but the sampled instruction is a return
            // address, named at the call (address − 1).
            let entry = if first {
                entry
            } else {
                entry.saturating_sub(1)
            };
            first = false;
            if !in_user {
                continue;
            }
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

    /// Stop taking work, wait for what is queued, and hand over the results.
    pub(crate) fn finish(mut self) -> Preloaded {
        drop(self.jobs.take());
        self.worker
            .take()
            .and_then(|w| w.join().ok())
            .unwrap_or_default()
    }
}
