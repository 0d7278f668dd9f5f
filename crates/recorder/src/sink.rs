//! The per-record path: decode, build each sample's stack, count it in its time window; feed
//! side-band records to the process model (and to the unwinders and pinned files, which follow
//! it); close windows whose time has passed.

use std::collections::HashMap;

use procmap::{FileParts, ProcessTable};
use profile::{SampleOrigin, StackWeight};
use rustc_hash::FxBuildHasher;
use sampler::{decode_with, RawRecord, Record, RecordSink, Sample, SampleFormat, Sampler};
use symbolize::FrameCache;
use unwind::StackBuilder;

use crate::normalize::normalize;
use crate::offcpu::OffCpu;
use crate::preload::Preloader;
use crate::rate::SamplePeriods;
use crate::report::{ClosedWindow, Progress, RecordingStats, Tracked};
use crate::windows::Windows;
use procmap::PinnedFiles;

/// A number per live thread that changes whenever the thread's identity does: it is created
/// (FORK: possibly on a reused tid), renamed or exec'd (COMM). Samples are counted per
/// (thread, context), so that one group never mixes two identities (they are named at the
/// group's first sample time). Records of different CPUs are ordered only to within a drain
/// round, so a sample read after its thread's change but taken before it lands in the new
/// context; it is still named by its own time.
#[derive(Default)]
pub(crate) struct ThreadContexts {
    /// Live threads' contexts (bounded by [`MAX_THREAD_CONTEXTS`]).
    current: HashMap<u32, u32, FxBuildHasher>,
    next: u32,
}

impl ThreadContexts {
    /// The context of `tid` now (a new one for a thread not seen yet).
    fn of(&mut self, tid: u32) -> u32 {
        if self.current.len() >= MAX_THREAD_CONTEXTS {
            // EXIT records were lost (a full ring): start afresh; samples are only split more.
            self.current.clear();
        }
        let next = &mut self.next;
        *self.current.entry(tid).or_insert_with(|| {
            *next = next.wrapping_add(1);
            *next
        })
    }

    /// `tid` changed identity.
    fn changed(&mut self, tid: u32) {
        self.next = self.next.wrapping_add(1);
        self.current.insert(tid, self.next);
    }

    /// `tid` exited: forget it (the map holds live threads only).
    fn exited(&mut self, tid: u32) {
        self.current.remove(&tid);
    }
}

/// Most threads whose context is kept (far above the threads a machine runs at once).
const MAX_THREAD_CONTEXTS: usize = 1 << 20;

/// How often the online CPUs are compared with those sampled (a read of a sysfs file).
const CPU_CHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// How long after a sample's timestamp the kernel may still be writing it to its ring (the
/// record is written in the interrupt that took it; a virtual CPU may be held up in between).
/// A window closes once a round that began this long after its end has read every ring.
const RING_WRITE_MARGIN_NS: u64 = 50_000_000;

/// Everything the drain loop fills.
pub(crate) struct Collector<'p> {
    pub windows: Windows,
    pub processes: ProcessTable,
    pub stats: RecordingStats,
    pub progress: &'p mut dyn FnMut(Progress),
    /// Receives each window as it closes, normalized.
    pub on_window: &'p mut dyn FnMut(ClosedWindow),
    /// How long after its end a window is closed at the latest (records of all CPUs have
    /// been read by then, unless rounds stall).
    pub close_grace: u64,
    /// When the drain round under way began (CLOCK_MONOTONIC ns): every ring is read after
    /// it, so a window that ended [`RING_WRITE_MARGIN_NS`] before it closes at the round's end.
    pub round_begun_ns: u64,
    pub started: std::time::Instant,
    /// When progress was last reported (since `started`).
    pub last_progress: std::time::Duration,
    /// When the current drain round read its first record (for `stats.longest_round`).
    pub round_started: Option<std::time::Instant>,
    pub format: SampleFormat,
    pub stacks: StackBuilder,
    /// Files released from the process model since the last window closed.
    pub released_files: Vec<u32>,
    /// Processes forgotten by the process model since the last window closed.
    pub ended_processes: Vec<(u32, u64)>,
    /// What each thread is now, so that its samples before and after a change of identity
    /// are counted apart.
    pub contexts: ThreadContexts,
    /// Whole system: open events on CPUs that come online (checked every
    /// [`CPU_CHECK_INTERVAL`]).
    pub follow_cpus: bool,
    /// When the online CPUs were last compared with the events' (since `started`).
    pub last_cpu_check: std::time::Duration,
    /// The online CPUs differ from the events': the drain loop pauses so that the recording
    /// reopens them.
    pub cpus_changed: bool,
    /// Mapped binaries opened as soon as their mapping was seen (see [`PinnedFiles`]).
    pub pinned: PinnedFiles,
    /// Opens symbolizers in the background for binaries that new stacks pass through.
    pub preloader: Option<Preloader>,
    /// Frames of earlier runs (addresses found there need no symbolizer).
    pub frame_cache: FrameCache,
    /// Changes of frequency asked while recording: the drain loop pauses to apply them.
    pub frequency_control: Option<crate::FrequencyControl>,
    /// The frequency in effect.
    pub frequency: u64,
    /// The last change of frequency: when it took effect (CLOCK_MONOTONIC ns) and the
    /// frequency before it, so that a window that ended before it (and closed after it, a
    /// close grace later) is handed on with the frequency its samples were taken at.
    pub frequency_change: Option<(u64, u64)>,
    /// The period each sample stands for (see [`SamplePeriods`]).
    pub periods: SamplePeriods,
    /// Off-CPU intervals, when context switches are sampled.
    pub off_cpu: Option<OffCpu>,
    /// Count CPU samples (false when only off-CPU time is recorded).
    pub on_cpu: bool,
    /// Snapshots of the open windows asked while recording.
    pub snapshots: Option<crate::SnapshotControl>,
    /// When the current drain round read its first record (CLOCK_MONOTONIC ns): every sample
    /// taken before it is read by the end of the round.
    pub round_started_ns: Option<u64>,
    /// The drain interval after a round without side-band records, where the rings allow it.
    pub rest_tick: Option<crate::rest_tick::RestTick>,
    /// The current round read a side-band record (a process started, mapped a file,
    /// was renamed or ended): the next tick is the loop's own, not `rest_tick`.
    pub sideband_in_round: bool,
    /// How many bytes of the last record were read (see [`RecordSink::last_record_reach`]).
    pub last_reach: usize,
}

/// How many bytes of sample `s`'s record its stack took to build, `stack_reach` of them in its
/// stack copy (0, not known, when no copy was read: the ring's default).
fn reach_of(s: &Sample<'_>, stack_reach: usize) -> usize {
    if stack_reach == 0 {
        0
    } else {
        s.user_stack_at + stack_reach
    }
}

/// Where sample `s` comes from, standing for `period` ns of time of kind `weight`.
fn origin_of(
    processes: &ProcessTable,
    contexts: &mut ThreadContexts,
    s: &Sample<'_>,
    period: u64,
    weight: StackWeight,
) -> SampleOrigin {
    SampleOrigin {
        pid: s.pid,
        tid: s.tid,
        process_start: processes
            .process_key(s.pid, s.time)
            .map_or(0, |k| k.start_time),
        thread_context: contexts.of(s.tid),
        time: s.time,
        period,
        weight,
    }
}

impl Collector<'_> {
    /// A switch-out sample: its stack waits for the thread's switch back in.
    fn switch_sample(&mut self, s: &Sample<'_>) {
        let Some(off_cpu) = self.off_cpu.as_mut() else {
            return;
        };
        let origin = origin_of(
            &self.processes,
            &mut self.contexts,
            s,
            s.period,
            StackWeight::Blocked,
        );
        let stack = self.stacks.build(&self.processes, s);
        off_cpu.sample(origin, s.cpu, &stack);
        self.last_reach = reach_of(s, self.stacks.last_stack_reach());
    }

    /// Count the off-CPU intervals the round's records closed.
    fn end_off_cpu_round(&mut self) {
        let Some(off_cpu) = self.off_cpu.as_mut() else {
            return;
        };
        let (windows, processes) = (&mut self.windows, &mut self.processes);
        off_cpu.end_round(&mut |origin, stack| {
            if windows.add(origin, stack) {
                processes.read_exec_uid(origin.pid, origin.time);
            }
        });
        off_cpu.check_rate(crate::sys::monotonic_ns());
        self.stats.switches = off_cpu.stats;
    }

    /// Close the intervals of threads still off CPU at the end of the recording.
    pub(crate) fn close_off_cpu(&mut self, end: u64) {
        let Some(off_cpu) = self.off_cpu.as_mut() else {
            return;
        };
        let windows = &mut self.windows;
        off_cpu.close_all(end, &mut |origin, stack| {
            windows.add(origin, stack);
        });
        self.stats.switches = off_cpu.stats;
    }

    fn sample(&mut self, s: &Sample<'_>) {
        if !self.on_cpu {
            return;
        }
        self.stats.samples += 1;
        let period = self.periods.of(s.time, s.period);
        let origin = origin_of(
            &self.processes,
            &mut self.contexts,
            s,
            period,
            StackWeight::OnCpu,
        );
        let stack = self.stacks.build(&self.processes, s);
        let new = self.windows.add(&origin, &stack);
        if new {
            // A process's first sample after an exec is always a new stack (its key holds
            // the thread's context, which the exec changed).
            self.processes.read_exec_uid(s.pid, s.time);
        }
        // A stack not seen before in its window: have its binaries' symbols opened in the
        // background.
        if let (true, Some(preloader)) = (new, self.preloader.as_mut()) {
            preloader.new_stack(
                &self.processes,
                &self.pinned,
                &mut self.frame_cache,
                s.pid,
                s.time,
                stack.user,
            );
        }
        self.last_reach = reach_of(s, self.stacks.last_stack_reach());
    }

    /// Normalize `window` and hand it on.
    fn close(&mut self, window: crate::windows::OpenWindow) {
        let normalized = normalize(
            &window.stacks,
            window.start,
            window.end,
            &self.processes,
            &self.pinned,
        );
        self.stats.windows += 1;
        let tracked = self.tracked();
        let frequency = self.frequency_at(window.end);
        (self.on_window)(ClosedWindow {
            window: normalized,
            tracked,
            released_files: std::mem::take(&mut self.released_files),
            ended_processes: std::mem::take(&mut self.ended_processes),
            frequency,
            snapshot: None,
        });
    }

    /// The frequency in effect at `time` (CLOCK_MONOTONIC ns), as of the last change.
    fn frequency_at(&self, time: u64) -> u64 {
        match self.frequency_change {
            Some((at, before)) if time <= at => before,
            _ => self.frequency,
        }
    }

    /// Hand on every open window as it stands, normalized, marked as a snapshot taken at
    /// `taken` (the windows stay open); one empty window when none is open.
    fn snapshot_open(&mut self, taken: u64) {
        let started = std::time::Instant::now();
        let cpu = crate::ProcessUsage::this_thread().cpu();
        let (processes, pinned) = (&self.processes, &self.pinned);
        let mut windows: Vec<profile::NormalizedWindow> = self
            .windows
            .open()
            .map(|w| normalize(&w.stacks, w.start, w.end, processes, pinned))
            .collect();
        if windows.is_empty() {
            windows.push(profile::NormalizedWindow {
                start: taken,
                end: taken,
                ..profile::NormalizedWindow::default()
            });
        }
        let tracked = self.tracked();
        let n = windows.len();
        let cpu = crate::ProcessUsage::this_thread().cpu().saturating_sub(cpu);
        for (i, window) in windows.into_iter().enumerate() {
            (self.on_window)(ClosedWindow {
                window,
                tracked,
                released_files: Vec::new(),
                ended_processes: Vec::new(),
                frequency: self.frequency,
                snapshot: Some(crate::OpenSnapshot {
                    taken,
                    last: i + 1 == n,
                    cpu,
                }),
            });
        }
        tracing::debug!(
            windows = n,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "open windows handed on"
        );
    }

    /// Sizes of what the recording holds now.
    fn tracked(&self) -> Tracked {
        let unwind = self
            .stacks
            .unwinders()
            .map(|u| u.sizes())
            .unwrap_or_default();
        let (open_stacks, open_stack_bytes) = self.windows.held();
        let sizes = self.processes.sizes();
        Tracked {
            processes: sizes.processes,
            threads: sizes.threads,
            mappings: sizes.mappings,
            files: sizes.files,
            pinned: self.pinned.len(),
            unwinder_processes: unwind.processes,
            unwind_sections: unwind.sections,
            open_stacks,
            open_stack_bytes,
            mappings_dropped: self.processes.stats().mappings_dropped,
            switches: self.off_cpu.as_ref().map(|o| o.stats).unwrap_or_default(),
            off_cpu_waiting: self.off_cpu.as_ref().map_or(0, OffCpu::waiting),
        }
    }

    /// Close every window that has ended; then forget what no open window can need.
    fn close_due(&mut self) {
        let now = crate::sys::monotonic_ns();
        // Off-CPU intervals reach their window only when the thread runs again: their windows
        // wait the whole grace.
        let read_through = match self.off_cpu {
            None => self.round_begun_ns.saturating_sub(RING_WRITE_MARGIN_NS),
            Some(_) => 0,
        };
        let mut closed = false;
        while let Some(window) = self.windows.pop_closed(now, self.close_grace, read_through) {
            self.close(window);
            closed = true;
        }
        if closed {
            self.forget_before(self.windows.oldest_open_start());
        }
    }

    /// Forget processes, mappings and files that ended before `time`: files no process maps
    /// any more are unpinned (a window that still names them holds its own handle), their
    /// unwind sections dropped, and they are passed on with the next window so that the
    /// symbolizer drops what it holds for them.
    fn forget_before(&mut self, time: u64) {
        let pruned = self.processes.prune(time);
        for &file in &pruned.released_files {
            self.pinned.unpin(file);
            if let Some(unwinders) = self.stacks.unwinders_mut() {
                unwinders.forget_file(file);
            }
        }
        self.released_files
            .extend(pruned.released_files.iter().map(|f| f.0));
        self.ended_processes
            .extend(pruned.removed.iter().map(|k| (k.pid, k.start_time)));
    }

    /// Close every window still open (at the end of the session).
    pub(crate) fn close_all(&mut self) {
        let open: Vec<_> = self.windows.drain_all().collect();
        for window in open {
            self.close(window);
        }
    }
}

impl RecordSink for Collector<'_> {
    fn on_round_start(&mut self) {
        self.round_begun_ns = crate::sys::monotonic_ns();
    }

    fn pause_draining(&mut self) -> bool {
        self.cpus_changed
            || self.frequency_control.as_ref().is_some_and(|c| c.pending())
            || self
                .off_cpu
                .as_ref()
                .is_some_and(|o| o.period_change_pending())
    }

    fn last_record_reach(&self) -> usize {
        self.last_reach
    }

    fn on_record(&mut self, raw: RawRecord<'_>) {
        self.last_reach = 0;
        if self.round_started.is_none() {
            self.round_started = Some(std::time::Instant::now());
            self.round_started_ns = Some(crate::sys::monotonic_ns());
        }
        let record = decode_with(raw, &self.format);
        self.sideband_in_round |= matches!(
            record,
            Record::Mmap2(_) | Record::Comm { .. } | Record::Fork { .. } | Record::Exit { .. }
        );
        match record {
            Record::Sample(s) => self.sample(&s),
            // The idle tasks (tid 0, one per CPU) are never waited on: system-wide, their
            // switches are left out.
            Record::SwitchSample(s) if s.tid == 0 => {}
            Record::Switch { id, .. } if id.tid == 0 => {}
            Record::SwitchSample(s) => self.switch_sample(&s),
            Record::Switch { out, preempted, id } => {
                if let Some(off_cpu) = self.off_cpu.as_mut() {
                    off_cpu.switch(id.tid, id.cpu, id.time, out, preempted);
                }
            }
            Record::SwitchesLost { count } => {
                if let Some(off_cpu) = self.off_cpu.as_mut() {
                    off_cpu.stats.lost += count;
                }
            }
            Record::Mmap2(m) => {
                if m.prot & libc::PROT_EXEC as u32 == 0 {
                    return;
                }
                // Borrowed: a file already known costs no allocation.
                let path = String::from_utf8_lossy(m.filename);
                let file = FileParts {
                    path: &path,
                    build_id: m.build_id,
                    dev_ino: m
                        .dev_ino
                        .map(|(major, minor, ino)| (libc::makedev(major, minor), ino)),
                };
                let mapping = self
                    .processes
                    .add_mapping_of(m.pid, m.id.time, m.addr, m.len, m.pgoff, file);
                self.pinned
                    .pin_mapped(m.pid, &mapping, self.processes.files().get(mapping.file));
                if let Some(unwinders) = self.stacks.unwinders_mut() {
                    unwinders.on_mapping(&self.processes, m.pid, &mapping);
                }
            }
            Record::Comm {
                pid,
                tid,
                comm,
                exec,
                id,
            } => {
                self.contexts.changed(tid);
                self.processes
                    .set_comm(pid, tid, id.time, &String::from_utf8_lossy(comm), exec);
                if exec {
                    if let Some(unwinders) = self.stacks.unwinders_mut() {
                        unwinders.forget(pid);
                    }
                }
            }
            Record::Fork {
                pid,
                ppid,
                tid,
                ptid,
                time,
            } => {
                self.contexts.changed(tid);
                self.processes.fork(pid, ppid, tid, ptid, time);
                if pid != ppid {
                    // A new process: it shares its parent's unwinder as of the fork (O(1)).
                    if let Some(unwinders) = self.stacks.unwinders_mut() {
                        unwinders.on_fork(&self.processes, pid, ppid, time);
                    }
                }
            }
            Record::Exit { pid, tid, time, .. } => {
                if let Some(off_cpu) = self.off_cpu.as_mut() {
                    off_cpu.exit(tid, time);
                }
                self.contexts.exited(tid);
                self.processes.exit(pid, tid, time);
                if pid == tid {
                    if let Some(unwinders) = self.stacks.unwinders_mut() {
                        unwinders.forget(pid);
                    }
                }
            }
            Record::Lost { count } => self.stats.lost += count,
            Record::Throttle { throttled, .. } => self.stats.throttled += throttled as u64,
            Record::Malformed(_) => self.stats.malformed_records += 1,
            Record::Other(_) => {}
        }
    }

    fn next_tick(&mut self, tick: std::time::Duration) -> std::time::Duration {
        let busy = std::mem::take(&mut self.sideband_in_round);
        match self.rest_tick {
            Some(rest) if !busy => rest.after_rest(self.frequency, tick),
            _ => tick,
        }
    }

    fn on_round(&mut self, sampler: &Sampler) {
        // Two clock reads per round: at its first record (or here) and at its end.
        let started = self
            .round_started
            .take()
            .unwrap_or_else(std::time::Instant::now);
        let started_ns = self.round_started_ns.take();
        self.end_round(sampler);
        if self.snapshots.as_ref().is_some_and(|c| c.take()) {
            // Every ring was read in this round, after `started_ns`.
            let taken = started_ns.unwrap_or_else(crate::sys::monotonic_ns);
            self.snapshot_open(taken);
        }
        self.stats.longest_round = self.stats.longest_round.max(started.elapsed());
    }
}

impl Collector<'_> {
    /// The work after each drain: counters, windows due, progress.
    fn end_round(&mut self, sampler: &Sampler) {
        self.stats.drain_rounds += 1;
        let ring = sampler.ring_stats();
        self.stats.malformed_batches = ring.malformed;
        self.stats.late_samples = self.windows.late;
        self.end_off_cpu_round();
        // Samples read after their process's EXIT record (in the same round) rebuilt its
        // unwinder: processes that exited keep none.
        if let Some(unwinders) = self.stacks.unwinders_mut() {
            let processes = &self.processes;
            unwinders.retain_processes(|pid| !processes.has_exited(pid));
        }
        self.close_due();
        let since_start = self.started.elapsed();
        if self.follow_cpus && since_start >= self.last_cpu_check + CPU_CHECK_INTERVAL {
            self.last_cpu_check = since_start;
            self.cpus_changed = sampler.online_cpus_changed();
        }
        // Progress at most every 100 ms (drain rounds can be far more frequent).
        let now = self.started.elapsed();
        if now < self.last_progress + std::time::Duration::from_millis(100)
            && now > self.last_progress
        {
            return;
        }
        self.last_progress = now;
        (self.progress)(Progress {
            elapsed: self.started.elapsed(),
            samples: self.stats.samples,
            lost: self.stats.lost,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::ThreadContexts;

    #[test]
    fn a_thread_that_changes_identity_gets_a_new_context() {
        let mut c = ThreadContexts::default();
        let first = c.of(10);
        assert_eq!(c.of(10), first, "stable while nothing happens");
        c.changed(10); // renamed, exec'd, or a new thread on the same tid
        let second = c.of(10);
        assert_ne!(second, first);
        c.exited(10);
        assert!(c.current.is_empty(), "exited threads are forgotten");
        let third = c.of(10);
        assert!(
            third != first && third != second,
            "a context is never handed out twice"
        );
    }
}
