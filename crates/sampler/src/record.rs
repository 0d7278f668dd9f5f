//! Decoding PERF_RECORD_* bodies for the sample layout this crate asks for.
//!
//! Pure functions over byte slices: a record shorter than its layout implies decodes to
//! [`Record::Malformed`], never a panic.

use perf_event_open_sys::bindings as b;

use crate::regs::UserRegs;
use crate::ring::RawRecord;

/// The `sample_type` every event of this crate uses.
pub const SAMPLE_TYPE: u64 = (b::PERF_SAMPLE_IP
    | b::PERF_SAMPLE_TID
    | b::PERF_SAMPLE_TIME
    | b::PERF_SAMPLE_CPU
    | b::PERF_SAMPLE_PERIOD
    | b::PERF_SAMPLE_CALLCHAIN) as u64;

/// Bytes of the `sample_id` trailer (`sample_id_all`) for [`SAMPLE_TYPE`]: pid/tid, time, cpu/res.
const SAMPLE_ID_SIZE: usize = 8 + 8 + 8;

/// The `sample_type` bits the context-switch event leaves out: PERF_SAMPLE_PERIOD. With it,
/// the kernel samples every software event whatever the period set (`perf_swevent_event`
/// in kernel/events/core.c: "sample_type & PERF_SAMPLE_PERIOD && !freq" overflows at each
/// event), so a period could not cap the switch samples.
pub(crate) const SWITCH_SAMPLE_TYPE_OMITS: u64 = b::PERF_SAMPLE_PERIOD as u64;

/// The record kind a sample from a context-switch event is handed on with (beyond the
/// kernel's PERF_RECORD_* numbers, which stay below 0x10000): decoded as
/// [`Record::SwitchSample`], whose layout has no period (see `SWITCH_SAMPLE_TYPE_OMITS`).
pub const SWITCH_SAMPLE: u32 = 0x1_0000 | b::PERF_RECORD_SAMPLE;

/// The record kind a LOST record of a context-switch event's ring is handed on with:
/// decoded as [`Record::SwitchesLost`].
pub const SWITCH_LOST: u32 = 0x1_0000 | b::PERF_RECORD_LOST;

/// The kind a record read from a context-switch event's ring is handed on with: its samples
/// become [`SWITCH_SAMPLE`], its LOST records [`SWITCH_LOST`], other records keep theirs.
pub(crate) fn switch_kind(kind: u32) -> u32 {
    match kind {
        b::PERF_RECORD_SAMPLE => SWITCH_SAMPLE,
        b::PERF_RECORD_LOST => SWITCH_LOST,
        other => other,
    }
}

/// Where and when a non-sample record happened (the `sample_id_all` trailer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleId {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp (the event's clock).
    pub time: u64,
    /// CPU that wrote the record.
    pub cpu: u32,
}

/// The callchain of a sample: raw u64 entries, leaf first, with PERF_CONTEXT_* markers.
#[derive(Clone, Copy, Debug)]
pub struct Callchain<'a> {
    bytes: &'a [u8],
}

impl<'a> Callchain<'a> {
    /// Number of entries (markers included).
    pub fn len(&self) -> usize {
        self.bytes.len() / 8
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The entries, leaf first.
    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        self.bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
    }
}

/// What a sample carries beyond [`SAMPLE_TYPE`]: user registers and a copy of the user stack,
/// for DWARF unwinding.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleFormat {
    /// `sample_regs_user` (0: PERF_SAMPLE_REGS_USER not requested).
    pub user_regs_mask: u64,
    /// Whether PERF_SAMPLE_STACK_USER was requested.
    pub user_stack: bool,
}

impl SampleFormat {
    /// Callchains only.
    pub const BASIC: SampleFormat = SampleFormat {
        user_regs_mask: 0,
        user_stack: false,
    };

    /// Registers and stack for unwinding on this architecture.
    pub const UNWIND: SampleFormat = SampleFormat {
        user_regs_mask: crate::regs::UNWIND_REGS_MASK,
        user_stack: true,
    };

    /// The full `sample_type`.
    pub fn sample_type(&self) -> u64 {
        let mut t = SAMPLE_TYPE;
        if self.user_regs_mask != 0 {
            t |= b::PERF_SAMPLE_REGS_USER as u64;
        }
        if self.user_stack {
            t |= b::PERF_SAMPLE_STACK_USER as u64;
        }
        t
    }
}

/// A PERF_RECORD_SAMPLE.
#[derive(Clone, Copy, Debug)]
pub struct Sample<'a> {
    /// Instruction pointer.
    pub ip: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp.
    pub time: u64,
    /// CPU.
    pub cpu: u32,
    /// Event period this sample stands for (ns for cpu-clock, cycles for cycles).
    pub period: u64,
    /// Whether the sample hit kernel mode (header misc).
    pub in_kernel: bool,
    /// Call chain, leaf first.
    pub callchain: Callchain<'a>,
    /// User registers, when requested and the thread has a user context.
    pub user_regs: Option<UserRegs>,
    /// The copied user stack, starting at the sampled stack pointer (may be empty).
    pub user_stack: &'a [u8],
    /// Where `user_stack` begins in the record, in bytes from the record's start (header
    /// included); 0 without one.
    pub user_stack_at: usize,
}

/// A PERF_RECORD_MMAP2: an executable mapping.
#[derive(Clone, Copy, Debug)]
pub struct Mmap2<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset of `addr`.
    pub pgoff: u64,
    /// GNU build-id of the file, when the kernel supplied one.
    pub build_id: Option<&'a [u8]>,
    /// Device major/minor and inode, when no build-id was supplied.
    pub dev_ino: Option<(u32, u32, u64)>,
    /// Protection bits (PROT_*).
    pub prot: u32,
    /// Mapping flags (MAP_*).
    pub flags: u32,
    /// Path of the mapped file, or a pseudo-name such as `[vdso]`.
    pub filename: &'a [u8],
    /// When it happened.
    pub id: SampleId,
}

/// A decoded record.
#[derive(Clone, Copy, Debug)]
pub enum Record<'a> {
    /// A sample.
    Sample(Sample<'a>),
    /// A new executable mapping.
    Mmap2(Mmap2<'a>),
    /// A thread's command name changed; `exec` when caused by execve (a new address space).
    Comm {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// The new name.
        comm: &'a [u8],
        /// Whether an exec caused it.
        exec: bool,
        /// When.
        id: SampleId,
    },
    /// A process or thread was created.
    Fork {
        /// New process id.
        pid: u32,
        /// Parent process id.
        ppid: u32,
        /// New thread id.
        tid: u32,
        /// Parent thread id.
        ptid: u32,
        /// When.
        time: u64,
    },
    /// A process or thread exited.
    Exit {
        /// Process id.
        pid: u32,
        /// Parent process id.
        ppid: u32,
        /// Thread id.
        tid: u32,
        /// Parent thread id.
        ptid: u32,
        /// When.
        time: u64,
    },
    /// A sample of the context-switch event: the thread's stack as it was switched out. Its
    /// `period` is 0: the event's samples carry none (see `SWITCH_SAMPLE_TYPE_OMITS`); the
    /// switches a sample stands for are counted from the switch records.
    SwitchSample(Sample<'a>),
    /// A thread was switched out or back in (PERF_RECORD_SWITCH).
    Switch {
        /// Switched out (else in).
        out: bool,
        /// Switched out while still runnable (preempted), not blocked.
        preempted: bool,
        /// Which thread, when.
        id: SampleId,
    },
    /// The kernel dropped `count` records of a context-switch event's ring.
    SwitchesLost {
        /// Records lost.
        count: u64,
    },
    /// The kernel dropped `count` records because the buffer was full.
    Lost {
        /// Records lost.
        count: u64,
    },
    /// The kernel throttled (true) or unthrottled (false) the event.
    Throttle {
        /// Throttled (true) or unthrottled (false).
        throttled: bool,
        /// When.
        time: u64,
    },
    /// A record type this crate does not decode.
    Other(u32),
    /// A record shorter than its layout requires.
    Malformed(u32),
}

/// A little-endian-agnostic cursor over a record body.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn u64(&mut self) -> Option<u64> {
        let (head, rest) = self.bytes.split_first_chunk::<8>()?;
        self.bytes = rest;
        Some(u64::from_ne_bytes(*head))
    }

    fn u32(&mut self) -> Option<u32> {
        let (head, rest) = self.bytes.split_first_chunk::<4>()?;
        self.bytes = rest;
        Some(u32::from_ne_bytes(*head))
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.bytes.len() {
            return None;
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Some(head)
    }
}

/// The trailing sample_id of a non-sample record, and the body without it.
fn split_sample_id(body: &[u8]) -> Option<(&[u8], SampleId)> {
    let at = body.len().checked_sub(SAMPLE_ID_SIZE)?;
    let (rest, trailer) = body.split_at(at);
    let mut c = Cursor { bytes: trailer };
    let id = SampleId {
        pid: c.u32()?,
        tid: c.u32()?,
        time: c.u64()?,
        cpu: c.u32()?,
    };
    Some((rest, id))
}

/// A NUL-padded C string.
fn c_string(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

/// Decode a record produced by an event with [`SAMPLE_TYPE`] and `sample_id_all`.
pub fn decode(raw: RawRecord<'_>) -> Record<'_> {
    decode_with(raw, &SampleFormat::BASIC)
}

/// Decode a record produced by an event with `format`'s sample type and `sample_id_all`.
pub fn decode_with<'a>(raw: RawRecord<'a>, format: &SampleFormat) -> Record<'a> {
    decode_inner(raw, format).unwrap_or(Record::Malformed(raw.kind))
}

/// [`decode_with`]; None for a record too short for its kind.
fn decode_inner<'a>(raw: RawRecord<'a>, format: &SampleFormat) -> Option<Record<'a>> {
    let misc = raw.misc as u32;
    Some(match raw.kind {
        SWITCH_SAMPLE => Record::SwitchSample(decode_sample(raw.body, misc, format, false)?),
        SWITCH_LOST => {
            let mut c = Cursor { bytes: raw.body };
            let _id = c.u64()?;
            Record::SwitchesLost { count: c.u64()? }
        }
        // CPU-wide (a system-wide event): the next or previous thread's pid and tid come
        // first; the sample_id trailer names the thread switched, as for PERF_RECORD_SWITCH.
        b::PERF_RECORD_SWITCH | b::PERF_RECORD_SWITCH_CPU_WIDE => {
            let (_, id) = split_sample_id(raw.body)?;
            Record::Switch {
                out: misc & b::PERF_RECORD_MISC_SWITCH_OUT != 0,
                preempted: misc & b::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0,
                id,
            }
        }
        b::PERF_RECORD_SAMPLE => Record::Sample(decode_sample(raw.body, misc, format, true)?),
        b::PERF_RECORD_MMAP2 => decode_mmap2(raw.body, misc)?,
        b::PERF_RECORD_COMM => decode_comm(raw.body, misc)?,
        b::PERF_RECORD_FORK | b::PERF_RECORD_EXIT => decode_task(raw.kind, raw.body)?,
        b::PERF_RECORD_LOST => {
            let mut c = Cursor { bytes: raw.body };
            let _id = c.u64()?;
            Record::Lost { count: c.u64()? }
        }
        b::PERF_RECORD_THROTTLE | b::PERF_RECORD_UNTHROTTLE => {
            let mut c = Cursor { bytes: raw.body };
            Record::Throttle {
                throttled: raw.kind == b::PERF_RECORD_THROTTLE,
                time: c.u64()?,
            }
        }
        other => Record::Other(other),
    })
}

/// A PERF_RECORD_MMAP2 body (with its sample_id trailer).
fn decode_mmap2(body: &[u8], misc: u32) -> Option<Record<'_>> {
    let (body, id) = split_sample_id(body)?;
    let mut c = Cursor { bytes: body };
    let pid = c.u32()?;
    let tid = c.u32()?;
    let addr = c.u64()?;
    let len = c.u64()?;
    let pgoff = c.u64()?;
    let ident = c.take(24)?;
    let (build_id, dev_ino) = if misc & b::PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
        let size = (ident[0] as usize).min(20);
        (Some(&ident[4..4 + size]), None)
    } else {
        let mut i = Cursor { bytes: ident };
        (None, Some((i.u32()?, i.u32()?, i.u64()?)))
    };
    let prot = c.u32()?;
    let flags = c.u32()?;
    let filename = c_string(c.bytes);
    Some(Record::Mmap2(Mmap2 {
        pid,
        tid,
        addr,
        len,
        pgoff,
        build_id,
        dev_ino,
        prot,
        flags,
        filename,
        id,
    }))
}

/// A PERF_RECORD_COMM body (with its sample_id trailer).
fn decode_comm(body: &[u8], misc: u32) -> Option<Record<'_>> {
    let (body, id) = split_sample_id(body)?;
    let mut c = Cursor { bytes: body };
    let pid = c.u32()?;
    let tid = c.u32()?;
    Some(Record::Comm {
        pid,
        tid,
        comm: c_string(c.bytes),
        exec: misc & b::PERF_RECORD_MISC_COMM_EXEC != 0,
        id,
    })
}

/// A PERF_RECORD_FORK or PERF_RECORD_EXIT (`kind`) body.
fn decode_task(kind: u32, body: &[u8]) -> Option<Record<'_>> {
    let mut c = Cursor { bytes: body };
    let (pid, ppid, tid, ptid, time) = (c.u32()?, c.u32()?, c.u32()?, c.u32()?, c.u64()?);
    Some(if kind == b::PERF_RECORD_FORK {
        Record::Fork {
            pid,
            ppid,
            tid,
            ptid,
            time,
        }
    } else {
        Record::Exit {
            pid,
            ppid,
            tid,
            ptid,
            time,
        }
    })
}

/// A sample body of `format`'s layout; `with_period`: PERF_SAMPLE_PERIOD is in it (0 if not).
fn decode_sample<'a>(
    body: &'a [u8],
    misc: u32,
    format: &SampleFormat,
    with_period: bool,
) -> Option<Sample<'a>> {
    let mut c = Cursor { bytes: body };
    let ip = c.u64()?;
    let pid = c.u32()?;
    let tid = c.u32()?;
    let time = c.u64()?;
    let cpu = c.u32()?;
    let _res = c.u32()?;
    let period = if with_period { c.u64()? } else { 0 };
    let nr = c.u64()?;
    let bytes = c.take(usize::try_from(nr).ok()?.checked_mul(8)?)?;
    let in_kernel = misc & b::PERF_RECORD_MISC_CPUMODE_MASK == b::PERF_RECORD_MISC_KERNEL;
    let mut user_regs = None;
    if format.user_regs_mask != 0 {
        let abi = c.u64()?;
        if abi != 0 {
            let count = format.user_regs_mask.count_ones() as usize;
            user_regs = crate::regs::unwind_regs(c.take(count * 8)?, format.user_regs_mask);
        }
    }
    let mut user_stack: &[u8] = &[];
    let mut user_stack_at = 0;
    if format.user_stack {
        let size = usize::try_from(c.u64()?).ok()?;
        if size != 0 {
            user_stack_at = crate::ring::HEADER_SIZE + body.len() - c.bytes.len();
            let data = c.take(size)?;
            let dyn_size = usize::try_from(c.u64()?).ok()?;
            user_stack = &data[..dyn_size.min(size)];
        }
    }
    Some(Sample {
        ip,
        pid,
        tid,
        time,
        cpu,
        period,
        in_kernel,
        callchain: Callchain { bytes },
        user_regs,
        user_stack,
        user_stack_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push32(v: &mut Vec<u8>, x: u32) {
        v.extend_from_slice(&x.to_ne_bytes());
    }
    fn push64(v: &mut Vec<u8>, x: u64) {
        v.extend_from_slice(&x.to_ne_bytes());
    }
    fn sample_id(v: &mut Vec<u8>, pid: u32, tid: u32, time: u64, cpu: u32) {
        push32(v, pid);
        push32(v, tid);
        push64(v, time);
        push32(v, cpu);
        push32(v, 0);
    }

    #[test]
    fn decodes_switch_records_and_tagged_samples() {
        let mut v = Vec::new();
        sample_id(&mut v, 5, 6, 777, 1);
        let misc = (b::PERF_RECORD_MISC_SWITCH_OUT | b::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) as u16;
        let Record::Switch { out, preempted, id } = decode(RawRecord {
            kind: b::PERF_RECORD_SWITCH,
            misc,
            body: &v,
        }) else {
            panic!("not a switch record")
        };
        assert!(out && preempted);
        assert_eq!((id.pid, id.tid, id.time, id.cpu), (5, 6, 777, 1));
        let Record::Switch { out, .. } = decode(RawRecord {
            kind: b::PERF_RECORD_SWITCH,
            misc: 0,
            body: &v,
        }) else {
            panic!("not a switch record")
        };
        assert!(!out, "no flag: switched in");
        // CPU-wide (system-wide events): the other thread's pid and tid, then the trailer,
        // which names the thread switched out.
        let mut wide = Vec::new();
        push32(&mut wide, 9);
        push32(&mut wide, 10);
        sample_id(&mut wide, 5, 6, 777, 1);
        let Record::Switch { out, preempted, id } = decode(RawRecord {
            kind: b::PERF_RECORD_SWITCH_CPU_WIDE,
            misc: b::PERF_RECORD_MISC_SWITCH_OUT as u16,
            body: &wide,
        }) else {
            panic!("not a switch record")
        };
        assert!(out && !preempted);
        assert_eq!((id.pid, id.tid), (5, 6));
        // A sample from a switch ring keeps its layout under its own kind.
        let mut s = Vec::new();
        // No period in a switch sample's layout.
        for x in [0x1234u64, (11u64 << 32) | 10, 999, 1, 0] {
            push64(&mut s, x);
        }
        assert_eq!(switch_kind(b::PERF_RECORD_SAMPLE), SWITCH_SAMPLE);
        assert_eq!(switch_kind(b::PERF_RECORD_SWITCH), b::PERF_RECORD_SWITCH);
        let Record::SwitchSample(sample) = decode(RawRecord {
            kind: SWITCH_SAMPLE,
            misc: 0,
            body: &s,
        }) else {
            panic!("not a switch sample")
        };
        assert_eq!((sample.ip, sample.time, sample.period), (0x1234, 999, 0));
        assert!(sample.callchain.is_empty());
    }

    #[test]
    fn decodes_a_sample_with_callchain() {
        let mut v = Vec::new();
        push64(&mut v, 0x1234);
        push32(&mut v, 10);
        push32(&mut v, 11);
        push64(&mut v, 999);
        push32(&mut v, 1);
        push32(&mut v, 0);
        push64(&mut v, 1_000_000);
        push64(&mut v, 3);
        for a in [b::PERF_CONTEXT_USER, 0x1234, 0x5678] {
            push64(&mut v, a);
        }
        let Record::Sample(s) = decode(RawRecord {
            kind: b::PERF_RECORD_SAMPLE,
            misc: 2,
            body: &v,
        }) else {
            panic!("not a sample")
        };
        assert_eq!(
            (s.ip, s.pid, s.tid, s.time, s.cpu, s.period),
            (0x1234, 10, 11, 999, 1, 1_000_000)
        );
        assert_eq!(
            s.callchain.iter().collect::<Vec<_>>(),
            vec![b::PERF_CONTEXT_USER, 0x1234, 0x5678]
        );
        assert!(!s.in_kernel);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn decodes_user_regs_and_stack() {
        let mut v = Vec::new();
        for x in [0x1234u64, 10 | 11 << 32, 999, 1, 1_000_000, 1, 0x1234] {
            push64(&mut v, x);
        }
        push64(&mut v, 2); // abi: 64-bit
        for r in [0xb0u64, 0x5e, 0x1f] {
            push64(&mut v, r); // bp, sp, ip
        }
        push64(&mut v, 32); // stack size
        v.extend_from_slice(&[7u8; 32]);
        push64(&mut v, 16); // dyn_size: only 16 bytes were valid
        let format = SampleFormat::UNWIND;
        let Record::Sample(s) = decode_with(
            RawRecord {
                kind: b::PERF_RECORD_SAMPLE,
                misc: 2,
                body: &v,
            },
            &format,
        ) else {
            panic!("not a sample")
        };
        let regs = s.user_regs.expect("registers");
        assert_eq!((regs.ip, regs.sp, regs.fp), (0x1f, 0x5e, 0xb0));
        assert_eq!(s.user_stack, &[7u8; 16][..]);
        // Cut anywhere: never a panic, and never a sample with a partial stack.
        for cut in 0..v.len() {
            let r = decode_with(
                RawRecord {
                    kind: b::PERF_RECORD_SAMPLE,
                    misc: 2,
                    body: &v[..cut],
                },
                &format,
            );
            assert!(matches!(r, Record::Malformed(_)), "cut at {cut}: {r:?}");
        }
    }

    #[test]
    fn truncated_sample_is_malformed() {
        let mut v = Vec::new();
        push64(&mut v, 0x1234);
        push32(&mut v, 10);
        push32(&mut v, 11);
        push64(&mut v, 999);
        push32(&mut v, 1);
        push32(&mut v, 0);
        push64(&mut v, 1);
        push64(&mut v, u64::MAX); // nr far beyond the record
        assert!(matches!(
            decode(RawRecord {
                kind: b::PERF_RECORD_SAMPLE,
                misc: 0,
                body: &v
            }),
            Record::Malformed(9)
        ));
        for cut in 0..v.len() {
            let _ = decode(RawRecord {
                kind: b::PERF_RECORD_SAMPLE,
                misc: 0,
                body: &v[..cut],
            });
            let _ = decode(RawRecord {
                kind: b::PERF_RECORD_MMAP2,
                misc: 0x4000,
                body: &v[..cut],
            });
            let _ = decode(RawRecord {
                kind: b::PERF_RECORD_COMM,
                misc: 0,
                body: &v[..cut],
            });
        }
    }

    #[test]
    fn decodes_mmap2_with_build_id() {
        let mut v = Vec::new();
        push32(&mut v, 42);
        push32(&mut v, 43);
        push64(&mut v, 0x5555_0000);
        push64(&mut v, 0x2000);
        push64(&mut v, 0x1000);
        v.push(20);
        v.extend_from_slice(&[0, 0, 0]);
        v.extend_from_slice(&[0xab; 20]);
        push32(&mut v, 5);
        push32(&mut v, 2);
        v.extend_from_slice(b"/usr/bin/true\0\0\0");
        sample_id(&mut v, 42, 43, 77, 0);
        let Record::Mmap2(m) = decode(RawRecord {
            kind: b::PERF_RECORD_MMAP2,
            misc: 0x4000,
            body: &v,
        }) else {
            panic!("not mmap2")
        };
        assert_eq!(
            (m.pid, m.addr, m.len, m.pgoff, m.prot),
            (42, 0x5555_0000, 0x2000, 0x1000, 5)
        );
        assert_eq!(m.build_id, Some(&[0xab; 20][..]));
        assert_eq!(m.filename, b"/usr/bin/true");
        assert_eq!(m.id.time, 77);
    }

    #[test]
    fn decodes_comm_exec_and_lost() {
        let mut v = Vec::new();
        push32(&mut v, 7);
        push32(&mut v, 7);
        v.extend_from_slice(b"burner\0\0");
        sample_id(&mut v, 7, 7, 5, 1);
        match decode(RawRecord {
            kind: b::PERF_RECORD_COMM,
            misc: 0x2000,
            body: &v,
        }) {
            Record::Comm { comm, exec, id, .. } => {
                assert_eq!(comm, b"burner");
                assert!(exec);
                assert_eq!(id.time, 5);
            }
            other => panic!("{other:?}"),
        }
        let mut l = Vec::new();
        push64(&mut l, 1);
        push64(&mut l, 17);
        sample_id(&mut l, 0, 0, 0, 0);
        assert!(matches!(
            decode(RawRecord {
                kind: b::PERF_RECORD_LOST,
                misc: 0,
                body: &l
            }),
            Record::Lost { count: 17 }
        ));
    }
}
