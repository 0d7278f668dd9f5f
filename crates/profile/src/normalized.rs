//! A closed time window of samples in a self-contained form: every frame says where its code
//! was (a kernel address, an offset in a file, an address in anonymous memory) without
//! reference to the process model, so the window can be symbolized on another thread, later,
//! after the processes it saw are gone.

use std::fs::File;
use std::sync::Arc;

use crate::quality::UnwindQuality;
use crate::seconds::{SecondCount, WindowSeconds};
use crate::stack::StackEnd;
use crate::wait::StackWeight;

/// Where one frame's code was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Frame {
    /// A kernel code address.
    Kernel(u64),
    /// A code address in a mapped file: the index of the file in [`NormalizedWindow::files`]
    /// and the file offset the address was mapped from.
    File {
        /// Index into [`NormalizedWindow::files`].
        file: u32,
        /// Offset in the file.
        offset: u64,
    },
    /// A code address in anonymous executable memory (JIT-compiled code): named from the
    /// process's JIT map, if it has one.
    Anonymous(u64),
    /// A user address in no known mapping.
    Unmapped(u64),
}

/// One mapping of a file by a process: `start..end` in process `pid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveMapping {
    /// The process that mapped the file.
    pub pid: u32,
    /// The mapping's first address.
    pub start: u64,
    /// The address after the mapping's last.
    pub end: u64,
}

/// A mapped file some frame of the window is in.
#[derive(Clone, Debug)]
pub struct WindowFile {
    /// The process model's id of the file; stable for the life of the process model and never
    /// reused, so caches may key on it.
    pub id: u32,
    /// The path as the mapping names it (inside the mapping process's mount namespace), or a
    /// pseudo-name such as `[vdso]`.
    pub path: String,
    /// GNU build-id, when the kernel reported one.
    pub build_id: Option<Vec<u8>>,
    /// Where a process that mapped the file, alive when the window closed, mapped it: the
    /// file as that process sees it is looked up from this (`procmap::live_path_of`) only
    /// when the file is opened, so a window costs no lookup per file it holds.
    pub live: Option<LiveMapping>,
    /// The file held open since its mapping was seen, if it could be (so it can be read after
    /// every process mapping it is gone, or after it was deleted).
    pub pinned: Option<Arc<File>>,
}

impl WindowFile {
    /// The last component of the path (`libc.so.6`), for unnamed frames.
    pub fn basename(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or(&self.path)
    }
}

/// Who a stack was sampled in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ThreadLabels {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// When the process was created (its FORK record's time; 0 when it predates sampling):
    /// with `pid`, identifies the process across pid reuse.
    pub process_start: u64,
    /// The thread's name (comm) at the time of the stack's first sample, when known.
    pub comm: Option<String>,
    /// Who may see the process's stacks, when known: its uid when its real, effective and
    /// saved uids are that one and it is dumpable, else `u32::MAX` (admins only).
    pub uid: Option<u32>,
    /// The process's real uid, when known: the user who ran it, set-uid or not dumpable as
    /// it may be. Whose share of retention its stacks count against; never who sees them.
    pub real_uid: Option<u32>,
    /// The pids of the processes that created this one, parent first, as far as known
    /// (bounded by the recorder): selects a process's descendants.
    pub ancestors: Vec<u32>,
}

/// One distinct stack of a window and its counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NormalizedStack {
    /// Index into [`NormalizedWindow::threads`].
    pub thread: u32,
    /// Start of the stack's frames in [`NormalizedWindow::frames`] (innermost first: kernel
    /// frames, then user frames).
    pub frames_start: u32,
    /// Number of kernel frames.
    pub kernel_len: u32,
    /// Number of user frames.
    pub user_len: u32,
    /// How the user part ended.
    pub user_end: StackEnd,
    /// Samples.
    pub count: u64,
    /// Sum of the samples' periods (for an off-CPU stack, the time off CPU in ns).
    pub period: u64,
    /// What `period` measures.
    pub weight: StackWeight,
}

/// A closed time window, normalized.
#[derive(Clone, Debug, Default)]
pub struct NormalizedWindow {
    /// Start of the window (CLOCK_MONOTONIC ns, inclusive).
    pub start: u64,
    /// End of the window (CLOCK_MONOTONIC ns, exclusive).
    pub end: u64,
    /// Files frames are in.
    pub files: Vec<WindowFile>,
    /// Threads stacks were sampled in.
    pub threads: Vec<ThreadLabels>,
    /// The frames of every stack.
    pub frames: Vec<Frame>,
    /// The distinct stacks.
    pub stacks: Vec<NormalizedStack>,
    /// How the unwound user stacks ended, overall and by the binary each stopped in.
    pub quality: UnwindQuality,
    /// Each stack's samples per second (in `stacks` order), when the recorder counted them.
    pub seconds: Option<WindowSeconds>,
}

impl NormalizedWindow {
    /// The frames of `stack`, innermost first: kernel frames, then user frames.
    pub fn frames_of(&self, stack: &NormalizedStack) -> (&[Frame], &[Frame]) {
        let start = stack.frames_start as usize;
        let kernel_end = start + stack.kernel_len as usize;
        let end = kernel_end + stack.user_len as usize;
        (
            &self.frames[start..kernel_end],
            &self.frames[kernel_end..end],
        )
    }

    /// The samples of stack `i` (an index into `stacks`) per second, when counted (else
    /// empty).
    pub fn seconds_of(&self, i: usize) -> &[SecondCount] {
        self.seconds.as_ref().map_or(&[], |s| s.of(i))
    }

    /// Samples in the window.
    pub fn samples(&self) -> u64 {
        self.stacks.iter().map(|s| s.count).sum()
    }
}
