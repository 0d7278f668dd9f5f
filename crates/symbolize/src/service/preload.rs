//! Opening symbolizers ahead, on a thread of their own, for the files that new stacks pass
//! through while a recording runs, so that naming a window finds them ready.
//!
//! A recording sends a [`PreloadRequest`] through the [`PreloadQueue`] (never blocking: past
//! its bound a request is dropped, and the file is opened when a window needs it). The
//! worker opens one file at a time, looks one address up (which builds its DWARF index) and
//! leaves the result for the service, which takes it when it needs the file or when a window
//! starts. Requests are told apart by source ([`super::sources`]): a copy of a file the
//! service holds, or that is queued or being opened, is not opened again. The worker waits while as many results as the service may keep open are not yet
//! taken, so what it holds is bounded too. A file the service asks for while the worker is
//! opening it is waited for, not opened twice; one still queued is opened by the service.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use rustc_hash::FxBuildHasher;
use tracing::debug;

use super::sources::{ContentKey, SourceKey};
use crate::{DebugSearch, FileOffset, FileSymbolizer};

/// A file to open ahead.
#[derive(Clone, Debug)]
pub struct PreloadRequest {
    /// The id its frames carry ([`profile::WindowFile::id`]).
    pub file: u32,
    /// Its content key ([`ContentKey::of`] of the held file), when it has one: copies with
    /// the same key are opened once.
    pub content: Option<ContentKey>,
    /// Where to read it from: the file as a live process sees it, or a held descriptor
    /// (`/proc/self/fd/N`).
    pub read_from: PathBuf,
    /// Its path as the process sees it (debuglink files are looked for beside it).
    pub path: PathBuf,
    /// The build-id the kernel reported.
    pub build_id: Option<Vec<u8>>,
    /// An offset a sample hit: looked up once, which builds the DWARF index serving it.
    pub warm_offset: u64,
}

/// Opened ahead: the symbolizer, or None when the file could not be opened.
pub(crate) type Opened = Option<Arc<FileSymbolizer>>;

impl PreloadRequest {
    fn key(&self) -> SourceKey {
        self.content
            .clone()
            .map_or(SourceKey::File(self.file), SourceKey::Content)
    }
}

/// A result of the worker: what was opened, and from which file.
pub(crate) struct Preloaded {
    /// The window file id it was opened from.
    pub(crate) origin: u32,
    /// The symbolizer, or None.
    pub(crate) opened: Opened,
}

#[derive(Default)]
struct State {
    queue: VecDeque<(SourceKey, PreloadRequest)>,
    queued: HashSet<SourceKey, FxBuildHasher>,
    /// The source the worker is opening.
    opening: Option<SourceKey>,
    /// Whether the result of `opening` is no longer wanted (the file was evicted meanwhile).
    discard_opening: bool,
    /// Results not yet taken by the service.
    done: HashMap<SourceKey, Preloaded, FxBuildHasher>,
    /// Sources the service holds: requests for them are dropped.
    open: HashSet<SourceKey, FxBuildHasher>,
    closed: bool,
    /// Requests dropped because the queue was full.
    dropped: u64,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    search: DebugSearch,
    /// Build-ids named from their symbol tables alone
    /// ([`crate::ServiceOptions::symbol_table_only`]): warmed without DWARF.
    symbol_table_only: Vec<Box<[u8]>>,
    max_queue: usize,
    max_done: usize,
    worker: Mutex<Option<JoinHandle<()>>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Where a recording sends the files to open ahead. Cheap to clone; never blocks.
#[derive(Clone)]
pub struct PreloadQueue {
    shared: Arc<Shared>,
}

impl PreloadQueue {
    /// Queue `request`, unless its file (or a copy of it) is already open, queued or being
    /// opened, or the queue is full. Returns whether it was queued. The worker thread starts
    /// on the first.
    pub fn request(&self, request: PreloadRequest) -> bool {
        let key = request.key();
        let mut state = self.shared.lock();
        if state.closed
            || state.open.contains(&key)
            || state.queued.contains(&key)
            || state.opening.as_ref() == Some(&key)
            || state.done.contains_key(&key)
        {
            return false;
        }
        if state.queue.len() >= self.shared.max_queue {
            state.dropped += 1;
            return false;
        }
        state.queued.insert(key.clone());
        state.queue.push_back((key, request));
        drop(state);
        self.start_worker();
        self.shared.changed.notify_all();
        true
    }

    fn start_worker(&self) {
        let mut worker = self.shared.worker.lock().unwrap_or_else(|e| e.into_inner());
        if worker.is_none() {
            let shared = self.shared.clone();
            match std::thread::Builder::new()
                .name("symbol-preload".into())
                .spawn(move || work(&shared))
            {
                Ok(handle) => *worker = Some(handle),
                Err(err) => debug!(%err, "cannot start the preloading thread"),
            }
        }
    }
}

impl std::fmt::Debug for PreloadQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreloadQueue").finish_non_exhaustive()
    }
}

/// The worker: open what is queued, one at a time, until closed.
fn work(shared: &Shared) {
    let mut frames = Vec::new();
    loop {
        let (key, request) = {
            let mut state = shared.lock();
            loop {
                if state.closed {
                    return;
                }
                if state.done.len() < shared.max_done {
                    if let Some((key, r)) = state.queue.pop_front() {
                        state.queued.remove(&key);
                        state.opening = Some(key.clone());
                        state.discard_opening = false;
                        break (key, r);
                    }
                }
                state = shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(|e| e.into_inner());
            }
        };
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            open(
                &request,
                &shared.search,
                &shared.symbol_table_only,
                &mut frames,
            )
        }))
        .unwrap_or(None);
        let mut state = shared.lock();
        state.opening = None;
        if !state.discard_opening && !state.open.contains(&key) {
            let origin = request.file;
            state.done.insert(key, Preloaded { origin, opened });
        }
        drop(state);
        shared.changed.notify_all();
    }
}

fn open(
    request: &PreloadRequest,
    search: &DebugSearch,
    symbol_table_only: &[Box<[u8]>],
    frames: &mut Vec<crate::ResolvedFrame>,
) -> Opened {
    let opened = FileSymbolizer::open_as(
        &request.read_from,
        &request.path,
        request.build_id.as_deref(),
        search,
        &procmap::Access::for_path(&request.read_from),
    )
    .ok()
    .map(Arc::new);
    if let Some(s) = &opened {
        // The first lookup builds the DWARF index; a binary named from its symbol table alone
        // has none built (it would be dropped unused at the next trim).
        if let Some(addr) = s.file_offset_to_addr(FileOffset(request.warm_offset)) {
            let table_only = s
                .elf()
                .build_id()
                .is_some_and(|id| super::listed(symbol_table_only, id));
            match table_only {
                true => s.symbol_frames_into(addr, frames),
                false => s.frames_into(addr, false, frames),
            }
        }
    }
    debug!(path = %request.path.display(), ok = opened.is_some(), "preloaded symbols");
    opened
}

/// The service's side: the queue, the worker, and the results.
pub(crate) struct Preloader {
    shared: Arc<Shared>,
}

impl Preloader {
    /// A preloader opening files with `search` (warming the DWARF index of each, but of those
    /// whose build-id is in `symbol_table_only`), queueing at most `max_queue` requests and
    /// holding at most `max_done` results not yet taken. No thread runs before a request.
    pub(crate) fn new(
        search: DebugSearch,
        symbol_table_only: Vec<Box<[u8]>>,
        max_queue: usize,
        max_done: usize,
    ) -> Preloader {
        Preloader {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
                search,
                symbol_table_only,
                max_queue,
                max_done: max_done.max(1),
                worker: Mutex::new(None),
            }),
        }
    }

    /// The queue recordings send requests to.
    pub(crate) fn queue(&self) -> PreloadQueue {
        PreloadQueue {
            shared: self.shared.clone(),
        }
    }

    /// What was opened ahead for source `key`: waits if the worker is opening it; a request
    /// still queued is dropped (the caller opens the file itself). None: not opened ahead.
    pub(crate) fn take(&self, key: &SourceKey) -> Option<Preloaded> {
        let mut state = self.shared.lock();
        if state.queued.remove(key) {
            state.queue.retain(|(k, _)| k != key);
        }
        while state.opening.as_ref() == Some(key) {
            state = self
                .shared
                .changed
                .wait(state)
                .unwrap_or_else(|e| e.into_inner());
        }
        let taken = state.done.remove(key);
        drop(state);
        self.shared.changed.notify_all();
        taken
    }

    /// The results not yet taken that were opened from a file `wanted` accepts; the others
    /// stay for [`Preloader::take`].
    pub(crate) fn take_where(
        &self,
        mut wanted: impl FnMut(u32) -> bool,
    ) -> Vec<(SourceKey, Preloaded)> {
        let mut state = self.shared.lock();
        let keys: Vec<SourceKey> = state
            .done
            .iter()
            .filter(|(_, preloaded)| wanted(preloaded.origin))
            .map(|(key, _)| key.clone())
            .collect();
        let taken: Vec<_> = keys
            .into_iter()
            .filter_map(|key| state.done.remove_entry(&key))
            .collect();
        drop(state);
        if !taken.is_empty() {
            self.shared.changed.notify_all();
        }
        taken
    }

    /// Drop the results opened from file `origin` (no process maps it any more).
    pub(crate) fn forget_origin(&self, origin: u32) {
        let mut state = self.shared.lock();
        let before = state.done.len();
        state.done.retain(|_, preloaded| preloaded.origin != origin);
        let changed = state.done.len() != before;
        drop(state);
        if changed {
            self.shared.changed.notify_all();
        }
    }

    /// Note that the service holds source `key` (`open`) or no longer does.
    pub(crate) fn set_open(&self, key: &SourceKey, open: bool) {
        let mut state = self.shared.lock();
        if open {
            state.open.insert(key.clone());
        } else {
            state.open.remove(key);
        }
    }

    /// Drop everything about source `key`: queued, being opened, opened.
    pub(crate) fn forget(&self, key: &SourceKey) {
        let mut state = self.shared.lock();
        if state.queued.remove(key) {
            state.queue.retain(|(k, _)| k != key);
        }
        if state.opening.as_ref() == Some(key) {
            state.discard_opening = true;
        }
        state.done.remove(key);
        state.open.remove(key);
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Drop every request and result.
    pub(crate) fn clear(&self) {
        let mut state = self.shared.lock();
        state.queue.clear();
        state.queued.clear();
        state.discard_opening = state.opening.is_some();
        state.done.clear();
        state.open.clear();
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Results not yet taken, and requests dropped because the queue was full.
    pub(crate) fn sizes(&self) -> (usize, u64) {
        let state = self.shared.lock();
        (state.done.len(), state.dropped)
    }
}

impl Drop for Preloader {
    /// Stop the worker (after the file it is opening) and wait for it.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.changed.notify_all();
        let worker = self
            .shared
            .worker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(worker) = worker {
            let _ = worker.join();
        }
    }
}
