//! The per-record path: decode, unwind, count samples, feed side-band records to the process
//! model (and the unwinders, which follow it).

use procmap::{MappedFile, ProcessTable};
use profile::RawStacks;
use sampler::{context, decode_with, RawRecord, Record, RecordSink, Sample, SampleFormat, Sampler};
use unwind::{splice, StackEnd, Unwinders};

use crate::preload::Preloader;
use crate::recording::{Progress, RecordingStats};
use procmap::PinnedFiles;
use symbolize::FrameCache;

/// Markers this crate puts at the outer end of an unwound user chain (beside the kernel's
/// PERF_CONTEXT_* values, which they do not collide with).
pub(crate) mod end_marker {
    /// The copy ran out: nothing known beyond (shown as a `[truncated]` frame).
    pub const TRUNCATED: u64 = sampler::context::TRUNCATED;
    /// Unwinding stopped at an address it could not unwind.
    pub const UNKNOWN: u64 = sampler::context::TRUNCATED + 1;
    /// Whole, thanks to the frame-pointer chain.
    pub const SPLICED: u64 = sampler::context::TRUNCATED + 2;
    /// Whole: reached the thread's first frame.
    pub const COMPLETE: u64 = sampler::context::TRUNCATED + 3;
}

/// Everything the drain loop fills.
pub(crate) struct Collector<'p> {
    pub stacks: RawStacks,
    pub processes: ProcessTable,
    pub stats: RecordingStats,
    pub progress: &'p mut dyn FnMut(Progress),
    pub started: std::time::Instant,
    /// When progress was last reported (since `started`).
    pub last_progress: std::time::Duration,
    pub format: SampleFormat,
    /// Present when user stacks are unwound with DWARF.
    pub unwinders: Option<Unwinders>,
    /// Splice with the kernel's frame-pointer chain where the copy runs out.
    pub splice: bool,
    /// Scratch: unwound user frames, the kernel's user frames, and the assembled chain.
    pub unwound: Vec<u64>,
    pub fp_user: Vec<u64>,
    pub chain: Vec<u64>,
    /// Mapped binaries opened as soon as their mapping was seen (see [`PinnedFiles`]).
    pub pinned: PinnedFiles,
    /// Opens symbolizers in the background for binaries that new stacks pass through.
    pub preloader: Option<Preloader>,
    /// Frames of earlier runs (addresses found there need no symbolizer).
    pub frame_cache: FrameCache,
}

impl Collector<'_> {
    fn sample(&mut self, s: &Sample<'_>) {
        self.stats.samples += 1;
        let (Some(unwinders), Some(regs)) = (self.unwinders.as_mut(), s.user_regs.as_ref()) else {
            // Frame-pointer mode, or no user context (a kernel thread): the kernel's chain.
            if s.callchain.is_empty() {
                let marker = if s.in_kernel {
                    context::KERNEL
                } else {
                    context::USER
                };
                let new =
                    self.stacks
                        .add(s.pid, s.tid, s.time, s.period, [marker, s.ip].into_iter());
                self.after_add(new, s);
            } else {
                let new = self
                    .stacks
                    .add(s.pid, s.tid, s.time, s.period, s.callchain.iter());
                self.after_add(new, s);
            }
            return;
        };
        let mut end = unwinders.unwind(
            &self.processes,
            s.pid,
            s.time,
            regs,
            s.user_stack,
            &mut self.unwound,
        );
        // Keep the kernel part of the kernel's chain; its user part (frame pointers) is only
        // used to continue where the copied stack ran out.
        self.chain.clear();
        let mut entries = s.callchain.iter();
        for entry in entries.by_ref() {
            if entry == context::USER {
                break;
            }
            self.chain.push(entry);
        }
        if end == StackEnd::Truncated && self.splice {
            self.fp_user.clear();
            self.fp_user.extend(entries);
            if splice(&mut self.unwound, &self.fp_user) {
                end = StackEnd::Spliced;
            }
        }
        self.chain.push(context::USER);
        self.chain.extend_from_slice(&self.unwound);
        self.chain.push(match end {
            StackEnd::Complete => end_marker::COMPLETE,
            StackEnd::Spliced => end_marker::SPLICED,
            StackEnd::Truncated => end_marker::TRUNCATED,
            StackEnd::Unknown | StackEnd::NoUserStack => end_marker::UNKNOWN,
        });
        let new = self
            .stacks
            .add(s.pid, s.tid, s.time, s.period, self.chain.iter().copied());
        self.after_add(new, s);
    }

    /// A stack not seen before: have its binaries' symbols opened in the background.
    fn after_add(&mut self, new: bool, s: &Sample<'_>) {
        if let (true, Some(preloader)) = (new, self.preloader.as_mut()) {
            preloader.new_stack(
                &self.processes,
                &self.pinned,
                &mut self.frame_cache,
                s.pid,
                s.time,
                self.stacks.last_callchain(),
            );
        }
    }
}

impl RecordSink for Collector<'_> {
    fn on_record(&mut self, raw: RawRecord<'_>) {
        match decode_with(raw, &self.format) {
            Record::Sample(s) => self.sample(&s),
            Record::Mmap2(m) => {
                if m.prot & libc::PROT_EXEC as u32 == 0 {
                    return;
                }
                let file = MappedFile {
                    path: String::from_utf8_lossy(m.filename).into_owned(),
                    build_id: m.build_id.map(<[u8]>::to_vec),
                    dev_ino: m
                        .dev_ino
                        .map(|(major, minor, ino)| (libc::makedev(major, minor), ino)),
                };
                let mapping = self
                    .processes
                    .add_mapping(m.pid, m.id.time, m.addr, m.len, m.pgoff, file);
                self.pinned
                    .pin(m.pid, &mapping, &String::from_utf8_lossy(m.filename));
                if let Some(unwinders) = self.unwinders.as_mut() {
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
                self.processes
                    .set_comm(pid, tid, id.time, &String::from_utf8_lossy(comm), exec);
                if exec {
                    if let Some(unwinders) = self.unwinders.as_mut() {
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
            } => self.processes.fork(pid, ppid, tid, ptid, time),
            Record::Exit { pid, tid, time, .. } => {
                self.processes.exit(pid, tid, time);
                if pid == tid {
                    if let Some(unwinders) = self.unwinders.as_mut() {
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

    fn on_round(&mut self, sampler: &Sampler) {
        self.stats.drain_rounds += 1;
        let ring = sampler.ring_stats();
        self.stats.malformed_batches = ring.malformed;
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
