//! Off-CPU stacks: what a stack's weight measures, and what a thread was waiting for.

/// What the period of a stack measures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StackWeight {
    /// CPU samples: the period of the sampling event (ns for cpu-clock).
    #[default]
    OnCpu,
    /// Time off CPU, blocked (switched out asleep), in ns.
    Blocked,
    /// Time off CPU while still runnable (preempted, waiting for a CPU), in ns.
    Preempted,
}

impl StackWeight {
    const ALL: [StackWeight; 3] = [
        StackWeight::OnCpu,
        StackWeight::Blocked,
        StackWeight::Preempted,
    ];

    /// A small number for compact storage (see [`StackWeight::from_code`]).
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The weight stored as `code`; unknown codes read as [`StackWeight::OnCpu`].
    pub fn from_code(code: u8) -> StackWeight {
        StackWeight::ALL
            .get(usize::from(code))
            .copied()
            .unwrap_or_default()
    }

    /// Whether the stack stands for time off CPU.
    pub fn is_off_cpu(self) -> bool {
        self != StackWeight::OnCpu
    }
}

/// What a thread switched out was waiting for, as the flamegraph names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitKind {
    /// A timed sleep (nanosleep, clock_nanosleep).
    Sleep,
    /// A lock (a futex wait).
    Lock,
    /// Input or output: a pipe, socket, file or block device, poll/select/epoll.
    Io,
    /// Runnable but preempted: waiting for a CPU.
    Preempted,
    /// Anything else.
    Other,
}

/// Function names that tell the wait kind, innermost first in the order tried: kernel
/// functions (visible with kernel frames) before the C library's wrappers.
const KINDS: &[(&str, WaitKind)] = &[
    ("futex_wait", WaitKind::Lock),
    ("do_nanosleep", WaitKind::Sleep),
    ("hrtimer_nanosleep", WaitKind::Sleep),
    ("pipe_read", WaitKind::Io),
    ("pipe_wait", WaitKind::Io),
    ("pipe_write", WaitKind::Io),
    ("io_schedule", WaitKind::Io),
    ("unix_stream_read", WaitKind::Io),
    ("sk_wait_data", WaitKind::Io),
    ("wait_woken", WaitKind::Io),
    ("ep_poll", WaitKind::Io),
    ("do_select", WaitKind::Io),
    ("do_poll", WaitKind::Io),
    ("folio_wait", WaitKind::Io),
    // User-space names, when kernel frames are not collected.
    ("__lll_lock_wait", WaitKind::Lock),
    ("__futex_abstimed_wait", WaitKind::Lock),
    ("pthread_mutex_lock", WaitKind::Lock),
    ("pthread_cond_wait", WaitKind::Lock),
    ("clock_nanosleep", WaitKind::Sleep),
    ("nanosleep", WaitKind::Sleep),
    ("epoll_wait", WaitKind::Io),
    ("__libc_read", WaitKind::Io),
    ("__libc_write", WaitKind::Io),
    ("__GI___libc_read", WaitKind::Io),
    ("__poll", WaitKind::Io),
    ("recv", WaitKind::Io),
];

impl WaitKind {
    /// The kind of an off-CPU stack of `weight` whose frame names are `names`, innermost
    /// first (kernel frames, then user frames): preempted stacks are [`WaitKind::Preempted`];
    /// otherwise the innermost frame that names a known wait decides, else
    /// [`WaitKind::Other`].
    pub fn classify<'a>(weight: StackWeight, names: impl IntoIterator<Item = &'a str>) -> Self {
        if weight == StackWeight::Preempted {
            return WaitKind::Preempted;
        }
        for name in names {
            let bare = name.split(" (").next().unwrap_or(name);
            if let Some(&(_, kind)) = KINDS.iter().find(|(k, _)| bare.contains(k)) {
                return kind;
            }
            if bare == "read" || bare == "write" || bare == "__read" || bare == "__write" {
                return WaitKind::Io;
            }
        }
        WaitKind::Other
    }

    /// The kind's word: `sleep`, `lock`, `io`, `preempted`, `other`.
    pub fn word(self) -> &'static str {
        match self {
            WaitKind::Sleep => "sleep",
            WaitKind::Lock => "lock",
            WaitKind::Io => "io",
            WaitKind::Preempted => "preempted",
            WaitKind::Other => "other",
        }
    }

    /// The frame that marks an off-CPU stack: `[off-cpu: sleep]`.
    pub fn frame(self) -> &'static str {
        match self {
            WaitKind::Sleep => "[off-cpu: sleep]",
            WaitKind::Lock => "[off-cpu: lock]",
            WaitKind::Io => "[off-cpu: io]",
            WaitKind::Preempted => "[off-cpu: preempted]",
            WaitKind::Other => "[off-cpu: other]",
        }
    }

    /// Whether `name` is a frame made by [`WaitKind::frame`].
    pub fn is_marker(name: &str) -> bool {
        name.starts_with("[off-cpu: ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_kernel_or_user_names() {
        let k = |names: &[&str]| WaitKind::classify(StackWeight::Blocked, names.iter().copied());
        assert_eq!(
            k(&["schedule", "futex_wait_queue", "futex_wait", "do_futex"]),
            WaitKind::Lock
        );
        assert_eq!(
            k(&["schedule", "do_nanosleep", "hrtimer_nanosleep"]),
            WaitKind::Sleep
        );
        assert_eq!(k(&["schedule", "pipe_read", "vfs_read"]), WaitKind::Io);
        assert_eq!(k(&["__GI___libc_read", "main"]), WaitKind::Io);
        assert_eq!(k(&["read", "main"]), WaitKind::Io);
        assert_eq!(k(&["clock_nanosleep (x.c:3)", "main"]), WaitKind::Sleep);
        assert_eq!(k(&["schedule", "worker_thread"]), WaitKind::Other);
        assert_eq!(
            WaitKind::classify(StackWeight::Preempted, ["futex_wait"]),
            WaitKind::Preempted
        );
        assert!(WaitKind::is_marker(WaitKind::Io.frame()));
        for w in StackWeight::ALL {
            assert_eq!(StackWeight::from_code(w.code()), w);
        }
    }
}
