//! A slice: the named stacks of one time window, with their labels, and its file format
//! (a gzipped pprof profile; see docs/daemon.md, "Slice format").

use std::collections::HashMap;
use std::io::{Read, Write};

use prost::Message;

use profile::FrameId;
use sampler::EventKind;
use symbolize::service::NamedStack;

use crate::seconds::{first_second, SecondCounts, NANOS};
use crate::slice_proto as proto;

/// Format version, in the profile's first comment (`profilerd slice v1`).
pub const FORMAT_COMMENT: &str = "profilerd slice v1";

/// The pprof sample type of off-CPU time in slice files (unit nanoseconds): a third value,
/// only in slices that hold some.
pub const OFF_CPU_TYPE: &str = "off_cpu";

/// Largest slice file read back, compressed and decompressed (a bound on what a corrupt or
/// planted file can cost).
pub const MAX_SLICE_BYTES: u64 = 256 << 20;

/// One time window of named stacks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Slice {
    /// Start of the window, UNIX time in ns.
    pub start_ns: u64,
    /// End of the window (exclusive), UNIX time in ns.
    pub end_ns: u64,
    /// Nanoseconds of CPU time one sample stands for at the frequency in effect at the
    /// slice's end (1e9 / frequency); the pprof `period`. The budget or a reload may have
    /// changed the frequency during the slice: [`SliceStack::cpu_ns`] says what each stack
    /// stands for.
    pub period_ns: u64,
    /// Frame names, indexed by [`SliceStack::frames`].
    pub names: Vec<String>,
    /// The stacks.
    pub stacks: Vec<SliceStack>,
}

/// One stack of a slice with its labels.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SliceStack {
    /// Frames, outermost first, as indices into [`Slice::names`].
    pub frames: Vec<u32>,
    /// How many of the last (innermost) frames are kernel frames.
    pub kernel_frames: u32,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The process's start (its FORK record's time, monotonic ns; 0 when it was running before
    /// sampling began): with pid, names one process across pid reuse.
    pub process_start: u64,
    /// The thread's command name, if known.
    pub comm: Option<String>,
    /// Who may see the stack, if known: the process's uid when its real, effective and saved
    /// uids are that one and it is dumpable, else `u32::MAX` (`procmap::UNKNOWN_UID`: only
    /// admins see it).
    pub uid: Option<u32>,
    /// The uid whose share of retention the stack counts against (`store/share.rs`) when it
    /// is not `uid`'s: the process's real uid, where the stack is withheld from that user (a
    /// set-uid program they ran, one they made not dumpable). Never who sees it. None: `uid`'s (and in files written before it was kept).
    pub share_uid: Option<u32>,
    /// The pids of the processes that created this one, parent first, as far as known.
    pub ancestors: Vec<u32>,
    /// The process's cgroup (v2 path, e.g. `/system.slice/nginx.service`), if it was read.
    pub cgroup: Option<String>,
    /// Samples.
    pub count: u64,
    /// CPU time the samples stand for, ns (the pprof `cpu/nanoseconds` value): on cpu-clock,
    /// each sample weighted with the period in effect when it was taken; on cycles, `count`
    /// times the slice's `period_ns`. Queries weigh stacks by it, so that slices sampled at
    /// different frequencies add up right.
    pub cpu_ns: u64,
    /// Time off CPU, ns (the pprof `off_cpu/nanoseconds` value), of an off-CPU stack (its
    /// innermost frame names the wait kind; `count` is this time in µs, rounded up, so that
    /// a roll-up's per-member counts keep each member's time; `cpu_ns` 0);
    /// 0 for a CPU stack. Only with `[sampling] off_cpu` (the history's `measure=off_cpu` and `wall`).
    pub off_cpu_ns: u64,
    /// A CPU stack's samples per second of the slice (adding up to `count`; see
    /// `seconds.rs`); of a roll-up's stack, numbered across its members. Empty when not known
    /// (off-CPU stacks, slices written before they were kept, answers merged from several
    /// slices).
    pub seconds: SecondCounts,
}

impl SliceStack {
    /// The uid whose share of retention the stack counts against: its process's real uid
    /// ([`SliceStack::share_uid`]), else its owner ([`SliceStack::uid`]); None when neither is
    /// known.
    pub fn charged_uid(&self) -> Option<u32> {
        self.share_uid.or(self.uid)
    }
}

impl Slice {
    /// Forget what describes the host's layout (cgroup paths, parent and ancestor pids), for
    /// profiles that leave the host (`scrape.layout_labels = false`).
    pub fn drop_layout_labels(&mut self) {
        for stack in &mut self.stacks {
            stack.ancestors.clear();
            stack.cgroup = None;
        }
    }

    /// CPU samples in the slice (off-CPU stacks left out).
    pub fn samples(&self) -> u64 {
        self.stacks
            .iter()
            .filter(|s| s.off_cpu_ns == 0)
            .map(|s| s.count)
            .sum()
    }

    /// Whether any stack holds time off CPU.
    pub fn has_off_cpu(&self) -> bool {
        self.stacks.iter().any(|s| s.off_cpu_ns > 0)
    }

    /// A named window as a slice: frames by name, labels kept, times in UNIX ns. `period_ns`:
    /// what one sample stands for at the frequency in effect at the window's end; on
    /// cpu-clock, each stack's CPU time is the sum of its samples' own periods (exact across a
    /// change of frequency), on cycles (whose periods are cycles) its count times `period_ns`.
    pub fn from_named(
        window: &profile::NormalizedWindow,
        profile: &profile::Profile,
        stacks: &[NamedStack],
        period_ns: u64,
        event: EventKind,
        unix_offset_ns: u64,
    ) -> Slice {
        let mut names: Vec<String> = Vec::new();
        let mut ids: HashMap<FrameId, u32> = HashMap::new();
        let mut out = Vec::with_capacity(stacks.len());
        // The window's seconds in the slice's: its second 0 is the whole UNIX second its
        // start falls in; the recorder's grid began at a whole second too (as its clocks
        // stood then: rounded to the nearest).
        let start_ns = window.start.saturating_add(unix_offset_ns);
        let shift = window.seconds.as_ref().map_or(0, |s| {
            let grid = s
                .start
                .saturating_add(unix_offset_ns)
                .saturating_add(NANOS / 2)
                / NANOS;
            grid as i64 - (first_second(start_ns) / NANOS) as i64
        });
        for (i, (stack, named)) in window.stacks.iter().zip(stacks).enumerate() {
            let thread = &window.threads[stack.thread as usize];
            let frames = named
                .frames
                .iter()
                .map(|&id| {
                    *ids.entry(id).or_insert_with(|| {
                        names.push(profile.name(id).to_string());
                        names.len() as u32 - 1
                    })
                })
                .collect();
            out.push(SliceStack {
                frames,
                kernel_frames: named.kernel_frames,
                pid: thread.pid,
                tid: thread.tid,
                process_start: thread.process_start,
                comm: thread.comm.clone(),
                uid: thread.uid,
                share_uid: thread.real_uid.filter(|&real| Some(real) != thread.uid),
                ancestors: thread.ancestors.clone(),
                cgroup: None,
                // An off-CPU stack counts its microseconds, so that a roll-up's per-member
                // counts keep each member's time.
                count: if stack.weight.is_off_cpu() {
                    stack.period.div_ceil(1000).max(1)
                } else {
                    stack.count
                },
                cpu_ns: match event {
                    _ if stack.weight.is_off_cpu() => 0,
                    EventKind::CpuClock => stack.period,
                    EventKind::Cycles => stack.count.saturating_mul(period_ns),
                },
                // At least 1 ns: what tells an off-CPU stack apart.
                off_cpu_ns: if stack.weight.is_off_cpu() {
                    stack.period.max(1)
                } else {
                    0
                },
                // An off-CPU interval is counted at its switch out, not over the seconds it
                // lasted: its stack keeps its slice's resolution.
                seconds: if stack.weight.is_off_cpu() {
                    SecondCounts::default()
                } else {
                    shifted(window.seconds_of(i), shift)
                },
            });
        }
        Slice {
            start_ns: window.start.saturating_add(unix_offset_ns),
            end_ns: window.end.saturating_add(unix_offset_ns),
            period_ns,
            names,
            stacks: out,
        }
    }

    /// The slice as a pprof profile.
    pub fn to_pprof(&self) -> proto::Profile {
        let mut strings = Strings::default();
        strings.get(""); // index 0 is always ""
        let samples_t = strings.get("samples");
        let count_u = strings.get("count");
        let cpu_t = strings.get("cpu");
        let ns_u = strings.get("nanoseconds");
        let kernel_file = strings.get("[kernel.kallsyms]");
        // Off-CPU time as a third value, only in slices that hold some: a CPU-only slice is
        // written as before.
        let off_cpu = self.has_off_cpu();
        let off_cpu_t = off_cpu.then(|| strings.get(OFF_CPU_TYPE));
        let comment = strings.get(FORMAT_COMMENT);
        let keys = LabelKeys::new(&mut strings);
        let mut function = Vec::with_capacity(self.names.len());
        for (i, name) in self.names.iter().enumerate() {
            let name = strings.get(name);
            function.push(proto::Function {
                id: i as u64 + 1,
                name,
                system_name: name,
                ..Default::default()
            });
        }
        let mut locations = Locations::default();
        let sample = self
            .stacks
            .iter()
            .map(|stack| proto::Sample {
                location_id: locations.of(stack),
                value: if off_cpu {
                    vec![
                        stack.count as i64,
                        stack.cpu_ns as i64,
                        stack.off_cpu_ns as i64,
                    ]
                } else {
                    vec![stack.count as i64, stack.cpu_ns as i64]
                },
                label: keys.labels(stack, &mut strings, ns_u),
                slice_counts: Vec::new(),
                second_counts: stack.seconds.0.clone(),
                slice_cpu_ns: Vec::new(),
            })
            .collect();
        let mut sample_type = vec![
            proto::ValueType {
                r#type: samples_t,
                unit: count_u,
            },
            proto::ValueType {
                r#type: cpu_t,
                unit: ns_u,
            },
        ];
        if let Some(off_cpu_t) = off_cpu_t {
            sample_type.push(proto::ValueType {
                r#type: off_cpu_t,
                unit: ns_u,
            });
        }
        proto::Profile {
            sample_type,
            sample,
            mapping: vec![proto::Mapping {
                id: 1,
                filename: kernel_file,
                has_functions: true,
                ..Default::default()
            }],
            location: locations.table,
            function,
            string_table: strings.table,
            time_nanos: self.start_ns as i64,
            duration_nanos: self.end_ns.saturating_sub(self.start_ns) as i64,
            period_type: Some(proto::ValueType {
                r#type: cpu_t,
                unit: ns_u,
            }),
            period: self.period_ns as i64,
            comment: vec![comment],
            ..Default::default()
        }
    }

    /// The slice file's bytes: the pprof profile, gzipped.
    pub fn encode(&self) -> Vec<u8> {
        encode_profile(&self.to_pprof())
    }

    /// [`Slice::encode`] for a file: [`SliceError::TooLarge`] when it would hold more than
    /// [`MAX_SLICE_BYTES`] decompressed, which no reader takes back.
    pub fn encode_for_file(&self) -> Result<Vec<u8>, SliceError> {
        let raw = self.to_pprof().encode_to_vec();
        if raw.len() as u64 > MAX_SLICE_BYTES {
            return Err(SliceError::TooLarge);
        }
        Ok(gzip(&raw))
    }

    /// A slice from a slice file's bytes; a truncated or corrupt file (gzip CRC or length,
    /// protobuf, or references out of range) is an error.
    pub fn decode(bytes: &[u8]) -> Result<Slice, SliceError> {
        Slice::decode_within(bytes, MAX_SLICE_BYTES)
    }

    /// [`Slice::decode`], refusing ([`SliceError::OverLimit`]) a file that decompresses to
    /// more than `limit` bytes before decoding it.
    pub fn decode_within(bytes: &[u8], limit: u64) -> Result<Slice, SliceError> {
        Slice::from_pprof(&decode_profile_within(bytes, limit)?)
    }

    /// A slice from a pprof profile written by [`Slice::to_pprof`].
    pub fn from_pprof(p: &proto::Profile) -> Result<Slice, SliceError> {
        let string = |i: i64| -> Result<&str, SliceError> {
            usize::try_from(i)
                .ok()
                .and_then(|i| p.string_table.get(i))
                .map(String::as_str)
                .ok_or(SliceError::Invalid("a string index out of range"))
        };
        if p.comment.first().map(|&c| string(c)).transpose()? != Some(FORMAT_COMMENT) {
            return Err(SliceError::Invalid("not a profilerd v1 slice"));
        }
        let mut names = Vec::with_capacity(p.function.len());
        for (i, f) in p.function.iter().enumerate() {
            if f.id != i as u64 + 1 {
                return Err(SliceError::Invalid("function ids out of order"));
            }
            names.push(string(f.name)?.to_string());
        }
        let mut location_function = Vec::with_capacity(p.location.len());
        for (i, l) in p.location.iter().enumerate() {
            let function = l.line.first().map(|l| l.function_id).unwrap_or(0);
            if l.id != i as u64 + 1 || function == 0 || function > names.len() as u64 {
                return Err(SliceError::Invalid(
                    "a location out of order or out of range",
                ));
            }
            location_function.push(function as u32 - 1);
        }
        // Each string as a label key, once (not a comparison of texts per label).
        let keys: Vec<LabelKey> = p.string_table.iter().map(|s| LabelKey::of(s)).collect();
        let mut stacks = Vec::with_capacity(p.sample.len());
        for s in &p.sample {
            let mut frames = Vec::with_capacity(s.location_id.len());
            for &id in s.location_id.iter().rev() {
                let f = usize::try_from(id)
                    .ok()
                    .and_then(|id| id.checked_sub(1))
                    .and_then(|i| location_function.get(i))
                    .ok_or(SliceError::Invalid("a sample's location out of range"))?;
                frames.push(*f);
            }
            let count =
                s.value
                    .first()
                    .copied()
                    .filter(|&c| c >= 0)
                    .ok_or(SliceError::Invalid("a sample without a count"))? as u64;
            let cpu_ns = match s.value.get(1) {
                Some(&ns) if ns >= 0 => ns as u64,
                Some(_) => return Err(SliceError::Invalid("a sample with negative CPU time")),
                None => count.saturating_mul(p.period.max(0) as u64),
            };
            // Slices written without off-CPU time hold none.
            let off_cpu_ns = match s.value.get(2) {
                Some(&ns) if ns >= 0 => ns as u64,
                Some(_) => return Err(SliceError::Invalid("a sample with negative off-CPU time")),
                None => 0,
            };
            let seconds = SecondCounts(s.second_counts.clone());
            if !seconds.is_empty() && !seconds.check(count) {
                return Err(SliceError::Invalid(
                    "a sample's counts per second do not add up to its count",
                ));
            }
            let mut stack = SliceStack {
                frames,
                count,
                cpu_ns,
                off_cpu_ns,
                seconds,
                ..Default::default()
            };
            for label in &s.label {
                let num = u32::try_from(label.num).ok();
                let key = usize::try_from(label.key)
                    .ok()
                    .and_then(|k| keys.get(k))
                    .ok_or(SliceError::Invalid("a string index out of range"))?;
                match key {
                    LabelKey::Pid => stack.pid = num.unwrap_or(0),
                    LabelKey::Tid => stack.tid = num.unwrap_or(0),
                    LabelKey::Uid => stack.uid = num,
                    LabelKey::ShareUid => stack.share_uid = num,
                    LabelKey::ProcessStart => stack.process_start = label.num.max(0) as u64,
                    LabelKey::KernelFrames => {
                        stack.kernel_frames = num.unwrap_or(0).min(stack.frames.len() as u32)
                    }
                    LabelKey::Comm => stack.comm = Some(string(label.str)?.to_string()),
                    LabelKey::Cgroup => stack.cgroup = Some(string(label.str)?.to_string()),
                    LabelKey::Ancestors => {
                        stack.ancestors = string(label.str)?
                            .split(' ')
                            .filter_map(|p| p.parse().ok())
                            .collect()
                    }
                    LabelKey::Other => {}
                }
            }
            stacks.push(stack);
        }
        Ok(Slice {
            start_ns: p.time_nanos.max(0) as u64,
            end_ns: (p.time_nanos.max(0) as u64).saturating_add(p.duration_nanos.max(0) as u64),
            period_ns: p.period.max(0) as u64,
            names,
            stacks,
        })
    }
}

/// The labels a slice's samples carry, by their key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LabelKey {
    Pid,
    Tid,
    Uid,
    ShareUid,
    ProcessStart,
    KernelFrames,
    Comm,
    Cgroup,
    Ancestors,
    /// Any other string (other labels are ignored).
    Other,
}

impl LabelKey {
    fn of(key: &str) -> LabelKey {
        match key {
            "pid" => LabelKey::Pid,
            "tid" => LabelKey::Tid,
            "uid" => LabelKey::Uid,
            "share_uid" => LabelKey::ShareUid,
            "process_start" => LabelKey::ProcessStart,
            "kernel_frames" => LabelKey::KernelFrames,
            "comm" => LabelKey::Comm,
            "cgroup" => LabelKey::Cgroup,
            "ancestors" => LabelKey::Ancestors,
            _ => LabelKey::Other,
        }
    }
}

/// `cpu_ns` in samples of `period_ns`, rounded to the nearest (a stack with any CPU time
/// counts at least one).
pub fn samples_of(cpu_ns: u64, period_ns: u64) -> u64 {
    if cpu_ns == 0 || period_ns == 0 || period_ns == u64::MAX {
        return 0;
    }
    ((u128::from(cpu_ns) + u128::from(period_ns / 2)) / u128::from(period_ns)).max(1) as u64
}

/// Per-second counts of a window (its grid's seconds) in a slice's seconds, `shift` later
/// (a second before the slice's first lands in it).
fn shifted(counts: &[profile::SecondCount], shift: i64) -> SecondCounts {
    let mut pairs: Vec<(u32, u64)> = Vec::with_capacity(counts.len());
    for c in counts {
        let second = (i64::from(c.second) + shift).clamp(0, i64::from(u32::MAX)) as u32;
        match pairs.last_mut() {
            Some((s, n)) if *s == second => *n += u64::from(c.count),
            _ => pairs.push((second, u64::from(c.count))),
        }
    }
    SecondCounts::encode(pairs)
}

/// A profile as a slice or roll-up file's bytes: protobuf, gzipped.
pub fn encode_profile(profile: &proto::Profile) -> Vec<u8> {
    gzip(&profile.encode_to_vec())
}

/// `raw` gzipped.
fn gzip(raw: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(raw.len() / 4),
        flate2::Compression::default(),
    );
    gz.write_all(raw).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

/// The profile in a slice or roll-up file's bytes, at most `limit` bytes unzipped and never
/// more than [`MAX_SLICE_BYTES`]; a truncated or corrupt file (gzip CRC or length, protobuf)
/// is an error. Past a `limit` lower than [`MAX_SLICE_BYTES`], [`SliceError::OverLimit`]
/// (the file may be whole: what a query may hold is smaller).
pub fn decode_profile_within(bytes: &[u8], limit: u64) -> Result<proto::Profile, SliceError> {
    let limit = limit.min(MAX_SLICE_BYTES);
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(limit + 1)
        .read_to_end(&mut raw)
        .map_err(|e| SliceError::Gzip(e.to_string()))?;
    if raw.len() as u64 > limit {
        return Err(if limit < MAX_SLICE_BYTES {
            SliceError::OverLimit(limit)
        } else {
            SliceError::TooLarge
        });
    }
    // From a shared buffer: the per-second counts are kept as slices of it, not copied.
    proto::Profile::decode(prost::bytes::Bytes::from(raw))
        .map_err(|e| SliceError::Protobuf(e.to_string()))
}

/// Why a slice file could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum SliceError {
    /// The file could not be read.
    #[error("reading: {0}")]
    Io(String),
    /// Not gzip, truncated, or a CRC mismatch.
    #[error("gzip: {0}")]
    Gzip(String),
    /// Larger than [`MAX_SLICE_BYTES`] decompressed.
    #[error("larger than {} MiB decompressed", MAX_SLICE_BYTES >> 20)]
    TooLarge,
    /// Larger decompressed than this many bytes, what a query may hold (not corrupt: left
    /// as it is).
    #[error("larger than {0} bytes decompressed, more than the query may hold")]
    OverLimit(u64),
    /// Not a pprof profile.
    #[error("protobuf: {0}")]
    Protobuf(String),
    /// A pprof profile, but not one profilerd wrote, or inconsistent.
    #[error("{0}")]
    Invalid(&'static str),
}

/// The string ids of the label keys.
struct LabelKeys {
    pid: i64,
    tid: i64,
    process_start: i64,
    comm: i64,
    uid: i64,
    ppid: i64,
    ancestors: i64,
    cgroup: i64,
    kernel_frames: i64,
    share_uid: i64,
}

impl LabelKeys {
    fn new(strings: &mut Strings) -> LabelKeys {
        LabelKeys {
            pid: strings.get("pid"),
            tid: strings.get("tid"),
            process_start: strings.get("process_start"),
            comm: strings.get("comm"),
            uid: strings.get("uid"),
            ppid: strings.get("ppid"),
            ancestors: strings.get("ancestors"),
            cgroup: strings.get("cgroup"),
            kernel_frames: strings.get("kernel_frames"),
            share_uid: strings.get("share_uid"),
        }
    }

    /// The labels of `stack`; `ns_u` is the id of "nanoseconds".
    fn labels(&self, stack: &SliceStack, strings: &mut Strings, ns_u: i64) -> Vec<proto::Label> {
        let num = |key, num| proto::Label {
            key,
            num,
            ..Default::default()
        };
        let mut text = |key, value: &str| proto::Label {
            key,
            str: strings.get(value),
            ..Default::default()
        };
        let mut label = vec![
            num(self.pid, stack.pid as i64),
            num(self.tid, stack.tid as i64),
            proto::Label {
                num_unit: ns_u,
                ..num(self.process_start, stack.process_start as i64)
            },
            num(self.kernel_frames, stack.kernel_frames as i64),
        ];
        if let Some(uid) = stack.uid {
            label.push(num(self.uid, uid as i64));
        }
        if let Some(uid) = stack.share_uid {
            label.push(num(self.share_uid, uid as i64));
        }
        if let Some(comm) = &stack.comm {
            label.push(text(self.comm, comm));
        }
        if let Some(&ppid) = stack.ancestors.first() {
            label.push(num(self.ppid, ppid as i64));
            let chain: Vec<String> = stack.ancestors.iter().map(u32::to_string).collect();
            label.push(text(self.ancestors, &chain.join(" ")));
        }
        if let Some(cgroup) = &stack.cgroup {
            label.push(text(self.cgroup, cgroup));
        }
        label
    }
}

/// The locations of a profile: one per (name, kernel or not); kernel ones in the kernel
/// mapping.
#[derive(Default)]
struct Locations {
    ids: HashMap<(u32, bool), u64>,
    table: Vec<proto::Location>,
}

impl Locations {
    /// The location ids of `stack`'s frames, leaf first (added as needed).
    fn of(&mut self, stack: &SliceStack) -> Vec<u64> {
        let n = stack.frames.len();
        let kernel_from = n - (stack.kernel_frames as usize).min(n);
        let mut ids = Vec::with_capacity(n);
        for (i, &frame) in stack.frames.iter().enumerate().rev() {
            let kernel = i >= kernel_from;
            let next = self.table.len() as u64 + 1;
            let id = *self.ids.entry((frame, kernel)).or_insert(next);
            if id == next {
                self.table.push(proto::Location {
                    id,
                    mapping_id: kernel as u64,
                    line: vec![proto::Line {
                        function_id: frame as u64 + 1,
                        ..Default::default()
                    }],
                    ..Default::default()
                });
            }
            ids.push(id);
        }
        ids
    }
}

#[derive(Default)]
struct Strings {
    table: Vec<String>,
    ids: HashMap<String, i64>,
}

impl Strings {
    fn get(&mut self, s: &str) -> i64 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.table.len() as i64;
        self.table.push(s.to_string());
        self.ids.insert(s.to_string(), id);
        id
    }
}

#[cfg(test)]
#[path = "slice_tests.rs"]
pub(crate) mod tests;
