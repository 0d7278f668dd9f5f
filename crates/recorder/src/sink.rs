//! The per-record path: decode, count samples, feed side-band records to the process model.

use procmap::{MappedFile, ProcessTable};
use profile::RawStacks;
use sampler::{context, decode, RawRecord, Record, RecordSink, Sampler};

use crate::recording::{Progress, RecordingStats};

/// Everything the drain loop fills.
pub(crate) struct Collector<'p> {
    pub stacks: RawStacks,
    pub processes: ProcessTable,
    pub stats: RecordingStats,
    pub progress: &'p mut dyn FnMut(Progress),
    pub started: std::time::Instant,
}

impl Collector<'_> {
    fn sample(&mut self, s: &sampler::Sample<'_>) {
        self.stats.samples += 1;
        if s.callchain.is_empty() {
            let marker = if s.in_kernel {
                context::KERNEL
            } else {
                context::USER
            };
            self.stacks
                .add(s.pid, s.tid, s.time, s.period, [marker, s.ip].into_iter());
        } else {
            self.stacks
                .add(s.pid, s.tid, s.time, s.period, s.callchain.iter());
        }
    }
}

impl RecordSink for Collector<'_> {
    fn on_record(&mut self, raw: RawRecord<'_>) {
        match decode(raw) {
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
                self.processes
                    .add_mapping(m.pid, m.id.time, m.addr, m.len, m.pgoff, file);
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
            }
            Record::Fork {
                pid,
                ppid,
                tid,
                ptid,
                time,
            } => self.processes.fork(pid, ppid, tid, ptid, time),
            Record::Exit { pid, tid, time, .. } => self.processes.exit(pid, tid, time),
            Record::Lost { count } => self.stats.lost += count,
            Record::Throttle { throttled, .. } => self.stats.throttled += throttled as u64,
            Record::Malformed(_) => self.stats.malformed_records += 1,
            Record::Other(_) => {}
        }
    }

    fn on_round(&mut self, sampler: &Sampler) {
        let ring = sampler.ring_stats();
        self.stats.malformed_batches = ring.malformed;
        (self.progress)(Progress {
            elapsed: self.started.elapsed(),
            samples: self.stats.samples,
            lost: self.stats.lost,
        });
    }
}
