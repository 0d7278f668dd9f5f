//! `profctl record -o out.pb.gz`: the recording as a pprof profile, built window by window
//! from the symbolizer's located stacks (inline frames as a location's lines, source files,
//! mappings with build-ids, pid/tid/comm/uid labels).

use profile::{Frame, NormalizedWindow};
use symbolize::service::LocatedStack;

/// The pprof profile of a recording, as its windows are named.
pub struct PprofOut {
    builder: pprof::Builder,
    kernel_mapping: Option<u64>,
    ids: Vec<u64>,
    /// Each sample carries its own time (an off-CPU or wall-clock profile).
    timed: bool,
}

/// Hex of a build-id.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl PprofOut {
    /// An empty profile; one sample stands for `period_ns` of CPU time.
    pub fn new(period_ns: u64) -> PprofOut {
        PprofOut {
            builder: pprof::Builder::new(period_ns),
            kernel_mapping: None,
            ids: Vec::new(),
            timed: false,
        }
    }

    /// An empty time profile of sample type `kind`/nanoseconds (`off_cpu`, `wall`): each
    /// stack's value is its time (its period: ns off CPU, or of cpu-clock samples).
    pub fn timed(kind: &str) -> PprofOut {
        PprofOut {
            builder: pprof::Builder::timed(kind, 1),
            timed: true,
            ..PprofOut::new(1)
        }
    }

    /// The pprof sample type of a recording measuring `measure` (None: CPU, by the period).
    pub fn for_measure(measure: recorder::Measure, frequency: u64) -> PprofOut {
        match measure {
            recorder::Measure::Cpu => PprofOut::new(1_000_000_000 / frequency.max(1)),
            // The sample type is the measure's wire name, as profilerd's pprof names it.
            timed @ (recorder::Measure::OffCpu | recorder::Measure::Wall) => {
                PprofOut::timed(timed.as_str())
            }
        }
    }

    /// Add the stacks of `window`, located by the symbolizer (`stacks`, in the window's order).
    pub fn add_window(&mut self, window: &NormalizedWindow, stacks: &[LocatedStack]) {
        for stack in stacks {
            let thread = &window.threads[stack.thread as usize];
            self.ids.clear();
            for frame in &stack.frames {
                let (mapping, address) = match frame.site {
                    Some(Frame::Kernel(addr)) => {
                        let b = &mut self.builder;
                        let id = *self.kernel_mapping.get_or_insert_with(|| {
                            b.mapping(&pprof::MappingSpec {
                                file: "[kernel.kallsyms]",
                                ..Default::default()
                            })
                        });
                        (id, addr)
                    }
                    Some(Frame::File { file, offset }) => {
                        let f = &window.files[file as usize];
                        let build_id = f.build_id.as_deref().map(hex);
                        let id = self.builder.mapping(&pprof::MappingSpec {
                            file: &f.path,
                            build_id: build_id.as_deref(),
                            ..Default::default()
                        });
                        (id, offset)
                    }
                    Some(Frame::Anonymous(addr)) | Some(Frame::Unmapped(addr)) => (0, addr),
                    None => (0, 0),
                };
                let lines: Vec<pprof::LineSpec<'_>> = frame
                    .lines
                    .iter()
                    .map(|l| pprof::LineSpec {
                        function: &l.function,
                        file: l.file.as_deref(),
                        line: i64::from(l.line),
                    })
                    .collect();
                let id = self.builder.location(mapping, address, &lines);
                self.ids.push(id);
            }
            // The same command name as folded stacks' root frame.
            let unnamed;
            let comm = match &thread.comm {
                Some(c) => profile::sanitize_frame(c),
                None if thread.pid == 0 => "swapper".into(),
                None => {
                    unnamed = format!("[pid {}]", thread.pid);
                    unnamed.as_str().into()
                }
            };
            self.builder.add_timed_sample(
                &self.ids,
                stack.count,
                stack.period,
                &pprof::Labels {
                    pid: Some(thread.pid),
                    tid: Some(thread.tid),
                    comm: Some(&comm),
                    uid: thread.uid,
                    cgroup: None,
                },
            );
        }
    }

    /// The profile: started at `start_unix_ns`, `duration_ns` long, sampled at `frequency` Hz
    /// (`event` and the frequency in a comment).
    pub fn finish(
        mut self,
        start_unix_ns: u64,
        duration_ns: u64,
        frequency: u64,
        event: &str,
    ) -> pprof::proto::Profile {
        if !self.timed {
            self.builder.set_period(1_000_000_000 / frequency.max(1));
        }
        self.builder.set_time(start_unix_ns, duration_ns);
        self.builder
            .add_comment(&format!("profctl record: {event} at {frequency} Hz"));
        self.builder.finish()
    }
}
