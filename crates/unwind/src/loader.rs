//! The thread that reads unwind sections: maps and parses binaries and looks for their
//! separate debug files, so that the thread draining the ring buffers never waits for file
//! work. Requests go through a bounded queue; results come back through a channel that the
//! owner polls without blocking.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use procmap::{Access, FileId, Mapping};
use tracing::{debug, warn};

use crate::sections::UnwindSections;

/// Given a binary's path (as this process can open it) and the access it is read with, the
/// path of its separate debug file and the access to read that with (see
/// [`procmap::Access`]: a file beside another user's binary is read with that user's).
pub type DebugFileFinder = Box<dyn Fn(&Path, &Access) -> Option<(PathBuf, Access)> + Send + Sync>;

/// The finder, shared with the thread (set at any time; read per load).
type SharedFinder = Arc<Mutex<Option<Arc<DebugFileFinder>>>>;

/// One binary to read.
pub(crate) struct LoadRequest {
    pub file: FileId,
    /// A process mapping it (its root is where the path is looked up first).
    pub pid: u32,
    /// One of its mappings in that process (a deleted file is read through it).
    pub mapping: Mapping,
    /// The path as the mapping names it.
    pub path: String,
}

/// What the thread read for one request.
pub(crate) struct Loaded {
    pub file: FileId,
    /// None: no unwind information (or the file could not be read).
    pub sections: Option<UnwindSections>,
    /// The load panicked (a bug, counted): treated as no unwind information.
    pub panicked: bool,
}

/// Why a request was not queued.
pub(crate) enum NotQueued {
    /// The queue is full: ask again later.
    Full(LoadRequest),
    /// There is no thread (it could not be started, or it is gone).
    NoThread,
}

enum State {
    NotStarted,
    Running {
        requests: SyncSender<LoadRequest>,
        results: Receiver<Loaded>,
    },
    /// Could not be started, or stopped: no more loads.
    Gone,
}

/// The owner's end of the loader thread (started at the first request).
pub(crate) struct Loader {
    state: State,
    finder: SharedFinder,
    queue: usize,
}

impl Loader {
    /// A loader whose queue holds at most `queue` requests.
    pub(crate) fn new(queue: usize) -> Loader {
        Loader {
            state: State::NotStarted,
            finder: Arc::new(Mutex::new(None)),
            queue: queue.max(1),
        }
    }

    /// The finder used by loads from now on.
    pub(crate) fn set_finder(&self, finder: DebugFileFinder) {
        *self.finder.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(finder));
    }

    /// Queue `request` without blocking.
    pub(crate) fn try_request(&mut self, request: LoadRequest) -> Result<(), NotQueued> {
        if matches!(self.state, State::NotStarted) {
            self.start();
        }
        let State::Running { requests, .. } = &self.state else {
            return Err(NotQueued::NoThread);
        };
        match requests.try_send(request) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(request)) => Err(NotQueued::Full(request)),
            Err(TrySendError::Disconnected(_)) => {
                self.stopped();
                Err(NotQueued::NoThread)
            }
        }
    }

    /// A load that has finished, if any (never blocks).
    pub(crate) fn try_loaded(&mut self) -> Option<Loaded> {
        let State::Running { results, .. } = &self.state else {
            return None;
        };
        match results.try_recv() {
            Ok(loaded) => Some(loaded),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => {
                self.stopped();
                None
            }
        }
    }

    /// The next load to finish, waiting at most `timeout`.
    pub(crate) fn wait_loaded(&mut self, timeout: Duration) -> Option<Loaded> {
        let State::Running { results, .. } = &self.state else {
            return None;
        };
        match results.recv_timeout(timeout) {
            Ok(loaded) => Some(loaded),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                self.stopped();
                None
            }
        }
    }

    /// Whether loads can still be made.
    pub(crate) fn is_gone(&self) -> bool {
        matches!(self.state, State::Gone)
    }

    fn start(&mut self) {
        let (requests, jobs) = mpsc::sync_channel::<LoadRequest>(self.queue);
        let (done, results) = mpsc::channel::<Loaded>();
        let finder = self.finder.clone();
        // Not joined: dropping the owner closes the queue, and the thread ends after the load
        // at hand (a slow debug-file search must not hold up the end of a recording).
        match std::thread::Builder::new()
            .name("unwind-load".into())
            .spawn(move || run(jobs, done, finder))
        {
            Ok(_) => self.state = State::Running { requests, results },
            Err(err) => {
                warn!(%err, "cannot start the unwind-section loader thread; user stacks will end at the first frame in a binary");
                self.state = State::Gone;
            }
        }
    }

    fn stopped(&mut self) {
        warn!("the unwind-section loader thread stopped; no more binaries are read");
        self.state = State::Gone;
    }
}

fn run(jobs: Receiver<LoadRequest>, done: mpsc::Sender<Loaded>, finder: SharedFinder) {
    for job in jobs {
        let started = Instant::now();
        let finder = finder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        // A panic while reading one (corrupt) binary must not end unwinding for all others.
        let (sections, panicked) = match std::panic::catch_unwind(AssertUnwindSafe(|| {
            load(&job, finder.as_deref())
        })) {
            Ok(sections) => (sections, false),
            Err(_) => {
                warn!(path = %job.path, "reading the unwind sections panicked; the binary is treated as having none");
                (None, true)
            }
        };
        debug!(
            path = %job.path,
            found = sections.is_some(),
            us = started.elapsed().as_micros() as u64,
            "unwind sections read"
        );
        let loaded = Loaded {
            file: job.file,
            sections,
            panicked,
        };
        if done.send(loaded).is_err() {
            return;
        }
    }
}

/// Read the unwind sections of the file `job` names, as its process sees it; for a binary with
/// little call-frame information, `.debug_frame` from its separate debug file.
///
/// The path is another user's: it is opened as the live process sees it (through its root,
/// or its `map_files` for a deleted file) with the process's access, never blocking (a FIFO
/// there is no binary). Once the process is gone, its plain path is read with our own access:
/// only call-frame information is taken from it, never a name.
fn load(job: &LoadRequest, finder: Option<&DebugFileFinder>) -> Option<UnwindSections> {
    let live = procmap::live_path(job.pid, &job.mapping, &job.path).map(|p| {
        let access = Access::of_process(job.pid);
        let sections = UnwindSections::load_as(&p, &access);
        (sections, p, access)
    });
    let loaded = match live {
        Some((Ok(s), p, access)) => Ok((s, p, access)),
        live => {
            if let Some((Err(err), ..)) = live {
                debug!(%err, "not readable through its process; trying its path");
            }
            let plain = PathBuf::from(job.path.trim_end_matches(" (deleted)"));
            UnwindSections::load_as(&plain, &Access::Own).map(|s| (s, plain, Access::Own))
        }
    };
    match loaded {
        Ok((mut s, path, access)) => {
            if s.may_lack_call_frame_info() {
                add_separate_debug_frame(&mut s, &path, &access, finder);
            }
            s.has_unwind_info().then_some(s)
        }
        Err(err) => {
            debug!(%err, "no unwind sections");
            None
        }
    }
}

/// Read `.debug_frame` from the separate debug file of the binary at `path`, if `finder` finds
/// one.
fn add_separate_debug_frame(
    sections: &mut UnwindSections,
    path: &Path,
    access: &Access,
    finder: Option<&DebugFileFinder>,
) {
    let Some((debug_file, reader)) = finder.and_then(|find| find(path, access)) else {
        debug!(binary = %path.display(), "little call-frame information and no debug file");
        return;
    };
    match sections.add_debug_frame_from_as(&debug_file, &reader) {
        Ok(true) => {
            debug!(binary = %path.display(), debug_file = %debug_file.display(), ".debug_frame from the debug file")
        }
        Ok(false) => {
            debug!(binary = %path.display(), debug_file = %debug_file.display(), "the debug file has no .debug_frame")
        }
        Err(err) => debug!(%err, "cannot read the debug file's .debug_frame"),
    }
}
