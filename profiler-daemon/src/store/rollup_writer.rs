//! Writes a [`RollupBuilder`] as a roll-up file, one protobuf message at a time into gzip:
//! the file [`crate::store::rollup::Rollup::decode`] reads (the same profile as
//! `Rollup::encode` of the same slices), without a whole `pprof::Profile` in memory.
//!
//! A protobuf message's repeated fields may be written one element at a time and in any
//! order of fields, so the samples, locations, functions and strings are each encoded into a
//! small buffer and passed on to the gzip encoder. The string table's layout is fixed in
//! advance (the fixed strings, then the names, label strings, ancestor chains and members),
//! so that a sample's labels are known before the table is written.

use std::io::{self, Write};

use prost::encoding::{encode_key, encode_varint, WireType};
use prost::Message;

use crate::seconds::SecondCounts;
use crate::slice::{FORMAT_COMMENT, MAX_SLICE_BYTES, OFF_CPU_TYPE};
use crate::slice_proto as pprof;
use crate::store::rollup::ROLLUP_COMMENT;
use crate::store::rollup_builder::{RollupBuilder, Thread};

/// The strings every roll-up starts its table with, in this order.
const FIXED: [&str; 19] = [
    "",
    "samples",
    "count",
    "cpu",
    "nanoseconds",
    "[kernel.kallsyms]",
    FORMAT_COMMENT,
    ROLLUP_COMMENT,
    "pid",
    "tid",
    "process_start",
    "comm",
    "uid",
    "ppid",
    "ancestors",
    "cgroup",
    "kernel_frames",
    OFF_CPU_TYPE,
    "share_uid",
];

/// Index of a fixed string.
fn fixed(s: &str) -> i64 {
    FIXED.iter().position(|&f| f == s).expect("a fixed string") as i64
}

/// Bytes buffered before they are passed to the gzip encoder.
const FLUSH_AT: usize = 64 << 10;

/// The protobuf bytes on their way to gzip, counted (a roll-up must decompress to at most
/// [`MAX_SLICE_BYTES`] to be read back).
struct Out<W: Write> {
    gz: flate2::write::GzEncoder<W>,
    buf: Vec<u8>,
    raw: u64,
}

impl<W: Write> Out<W> {
    fn flush_if_full(&mut self) -> io::Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.raw += self.buf.len() as u64;
        if self.raw > MAX_SLICE_BYTES {
            return Err(io::Error::other(format!(
                "the roll-up would take more than {} MiB decompressed",
                MAX_SLICE_BYTES >> 20
            )));
        }
        self.gz.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    fn message(&mut self, tag: u32, m: &impl Message) -> io::Result<()> {
        prost::encoding::message::encode(tag, m, &mut self.buf);
        self.flush_if_full()
    }

    fn string(&mut self, s: &str) -> io::Result<()> {
        encode_key(6, WireType::LengthDelimited, &mut self.buf);
        encode_varint(s.len() as u64, &mut self.buf);
        self.buf.extend_from_slice(s.as_bytes());
        self.flush_if_full()
    }

    fn int64(&mut self, tag: u32, v: i64) {
        prost::encoding::int64::encode(tag, &v, &mut self.buf);
    }
}

/// Where each table starts in the string table.
struct Layout {
    names: i64,
    strings: i64,
    chains: i64,
    members: i64,
}

impl RollupBuilder {
    /// Write the roll-up (gzipped pprof) to `out`; returns the protobuf's size, uncompressed.
    /// An error past [`MAX_SLICE_BYTES`] uncompressed (the roll-up could not be read back).
    pub fn write_to<W: Write>(&self, out: W) -> io::Result<u64> {
        let mut out = Out {
            gz: flate2::write::GzEncoder::new(out, flate2::Compression::default()),
            buf: Vec::with_capacity(FLUSH_AT + 4096),
            raw: 0,
        };
        let names = self.names.ordered();
        let strings = self.strings.ordered();
        let chains = self.chains.ordered();
        let names_at = FIXED.len() as i64;
        let layout = Layout {
            names: names_at,
            strings: names_at + names.len() as i64,
            chains: names_at + (names.len() + strings.len()) as i64,
            members: names_at + (names.len() + strings.len() + chains.len()) as i64,
        };
        // Off-CPU time as a third value only in an hour that holds some (as a slice).
        let off_cpu = self.stacks.iter().any(|s| s.off_cpu_ns > 0);
        let types = [
            ("samples", "count"),
            ("cpu", "nanoseconds"),
            (OFF_CPU_TYPE, "nanoseconds"),
        ];
        for (t, u) in &types[..if off_cpu { 3 } else { 2 }] {
            let vt = pprof::ValueType {
                r#type: fixed(t),
                unit: fixed(u),
            };
            out.message(1, &vt)?;
        }
        let locations = self.write_samples(&mut out, &layout, &chains)?;
        out.message(
            3,
            &pprof::Mapping {
                id: 1,
                filename: fixed("[kernel.kallsyms]"),
                has_functions: true,
                ..Default::default()
            },
        )?;
        for (i, &(frame, kernel)) in locations.iter().enumerate() {
            let location = pprof::Location {
                id: i as u64 + 1,
                mapping_id: kernel as u64,
                line: vec![pprof::Line {
                    function_id: u64::from(frame) + 1,
                    ..Default::default()
                }],
                ..Default::default()
            };
            out.message(4, &location)?;
        }
        for i in 0..names.len() {
            let name = layout.names + i as i64;
            let function = pprof::Function {
                id: i as u64 + 1,
                name,
                system_name: name,
                ..Default::default()
            };
            out.message(5, &function)?;
        }
        for s in FIXED.iter().chain(&names).chain(&strings) {
            out.string(s)?;
        }
        let mut chain = String::new();
        for c in &chains {
            chain.clear();
            for (k, pid) in c.iter().enumerate() {
                if k > 0 {
                    chain.push(' ');
                }
                chain.push_str(&pid.to_string());
            }
            out.string(&chain)?;
        }
        for &(start, end) in &self.members {
            out.string(&format!("{start}-{end}"))?;
        }
        self.write_header(&mut out, &layout)?;
        out.flush()?;
        out.gz.finish()?.flush()?;
        Ok(out.raw)
    }

    /// The profile's scalar fields and comments.
    fn write_header<W: Write>(&self, out: &mut Out<W>, layout: &Layout) -> io::Result<()> {
        let start = self.members.first().map_or(0, |m| m.0);
        let end = self.members.last().map_or(0, |m| m.1);
        out.int64(9, start as i64);
        out.int64(10, end.saturating_sub(start) as i64);
        out.message(
            11,
            &pprof::ValueType {
                r#type: fixed("cpu"),
                unit: fixed("nanoseconds"),
            },
        )?;
        out.int64(12, self.period_ns as i64);
        let mut comments = vec![fixed(FORMAT_COMMENT), fixed(ROLLUP_COMMENT)];
        comments.extend((0..self.members.len() as i64).map(|m| layout.members + m));
        prost::encoding::int64::encode_packed(13, &comments, &mut out.buf);
        prost::encoding::uint64::encode_packed(100, &self.member_periods, &mut out.buf);
        Ok(())
    }

    /// Every stack as a `Sample`, in order of first appearance; returns the locations the
    /// samples use, `(name id, kernel)` by location id - 1 (assigned in order of first use,
    /// as a slice's are).
    fn write_samples<W: Write>(
        &self,
        out: &mut Out<W>,
        layout: &Layout,
        chains: &[&[u32]],
    ) -> io::Result<Vec<(u32, bool)>> {
        let threads = self.threads.items();
        let sequences = self.sequences.ordered();
        let (starts, order) = self.entries_by_stack();
        let (second_starts, seconds) = self.second_counts();
        let off_cpu = self.stacks.iter().any(|s| s.off_cpu_ns > 0);
        // Location id of (name, kernel) at 2 * name + kernel; 0: none yet.
        let mut location_of = vec![0u32; 2 * self.names.len()];
        let mut locations: Vec<(u32, bool)> = Vec::new();
        let mut sample = pprof::Sample {
            location_id: Vec::new(),
            value: Vec::new(),
            label: Vec::new(),
            slice_counts: Vec::new(),
            second_counts: Default::default(),
            slice_cpu_ns: Vec::new(),
        };
        for (i, stack) in self.stacks.iter().enumerate() {
            let frames = sequences[stack.sequence as usize];
            let n = frames.len();
            let kernel_from = n - (stack.kernel_frames as usize).min(n);
            sample.location_id.clear();
            for (i, &frame) in frames.iter().enumerate().rev() {
                let kernel = i >= kernel_from;
                let slot = &mut location_of[2 * frame as usize + kernel as usize];
                if *slot == 0 {
                    locations.push((frame, kernel));
                    *slot = locations.len() as u32;
                }
                sample.location_id.push(u64::from(*slot));
            }
            sample.value.clear();
            sample
                .value
                .extend([stack.count as i64, stack.cpu_ns as i64]);
            if off_cpu {
                sample.value.push(stack.off_cpu_ns as i64);
            }
            let thread = &threads[stack.thread as usize];
            let ppid = chains[thread.ancestors as usize].first().copied();
            labels(&mut sample.label, thread, stack.kernel_frames, layout, ppid);
            sample.slice_counts.clear();
            sample.slice_cpu_ns.clear();
            for &(member, k) in &order[starts[i] as usize..starts[i + 1] as usize] {
                let count = self.entries[k as usize].count;
                sample
                    .slice_counts
                    .extend([u64::from(member), u64::from(count)]);
                if let Some(cpu) = &self.entry_cpu {
                    sample.slice_cpu_ns.push(cpu[k as usize]);
                }
            }
            let these = &seconds[second_starts[i] as usize..second_starts[i + 1] as usize];
            sample.second_counts = SecondCounts::encode(these.iter().copied()).0;
            out.message(2, &sample)?;
        }
        Ok(locations)
    }
}

/// A sample's labels, in the order a slice writes them.
fn labels(
    label: &mut Vec<pprof::Label>,
    t: &Thread,
    kernel_frames: u32,
    layout: &Layout,
    ppid: Option<u32>,
) {
    let num = |key: &str, num: i64| pprof::Label {
        key: fixed(key),
        num,
        ..Default::default()
    };
    let string = |key: &str, str: i64| pprof::Label {
        key: fixed(key),
        str,
        ..Default::default()
    };
    label.clear();
    label.push(num("pid", i64::from(t.pid)));
    label.push(num("tid", i64::from(t.tid)));
    label.push(pprof::Label {
        num_unit: fixed("nanoseconds"),
        ..num("process_start", t.process_start as i64)
    });
    label.push(num("kernel_frames", i64::from(kernel_frames)));
    if let Some(uid) = t.uid {
        label.push(num("uid", i64::from(uid)));
    }
    if let Some(uid) = t.share_uid {
        label.push(num("share_uid", i64::from(uid)));
    }
    if t.comm > 0 {
        label.push(string("comm", layout.strings + i64::from(t.comm) - 1));
    }
    if let Some(ppid) = ppid {
        label.push(num("ppid", i64::from(ppid)));
        label.push(string("ancestors", layout.chains + i64::from(t.ancestors)));
    }
    if t.cgroup > 0 {
        label.push(string("cgroup", layout.strings + i64::from(t.cgroup) - 1));
    }
}

#[cfg(test)]
mod tests {
    use crate::slice::Slice;
    use crate::store::rollup::Rollup;
    use crate::store::rollup_builder::tests::slice;
    use crate::store::rollup_builder::RollupBuilder;

    fn built(slices: &[Slice]) -> Vec<u8> {
        let mut b = RollupBuilder::new(1 << 30);
        for s in slices {
            b.fold(s, (s.start_ns, s.end_ns)).unwrap();
        }
        let mut bytes = Vec::new();
        b.write_to(&mut bytes).unwrap();
        bytes
    }

    #[test]
    fn the_streamed_roll_up_reads_back_as_the_one_built_whole() {
        for n in [1, 2, 7, 40] {
            let slices: Vec<Slice> = (0..n).map(slice).collect();
            let bytes = built(&slices);
            let whole = Rollup::build(&slices);
            assert_eq!(Rollup::decode(&bytes).unwrap(), whole, "{n} slices");
            // Still a slice to anything that reads slices.
            assert_eq!(Slice::decode(&bytes).unwrap(), whole.slice);
            // And a pprof profile to pprof tools (field 100 skipped).
            let p = ::pprof::decode(&bytes).unwrap();
            let folded = ::pprof::fold(
                &p,
                &::pprof::FoldOptions {
                    comm_root: true,
                    lines: false,
                },
            )
            .unwrap();
            assert_eq!(
                folded.iter().map(|s| s.count).sum::<u64>(),
                whole.slice.samples()
            );
        }
    }

    #[test]
    fn counts_past_u32_and_a_stack_twice_in_a_slice_add_up() {
        let mut s = slice(0);
        s.stacks[0].count = u64::from(u32::MAX) + 5;
        crate::slice::tests::spread_seconds(&mut s, 0);
        // One second past u32::MAX too.
        s.stacks[0].seconds = crate::seconds::SecondCounts::encode([(2, s.stacks[0].count)]);
        let twice = s.stacks[0].clone();
        s.stacks.push(twice);
        let next = slice(1);
        let rollup = Rollup::decode(&built(&[s.clone(), next.clone()])).unwrap();
        assert_eq!(rollup.slice.samples(), s.samples() + next.samples());
        assert_eq!(rollup.restrict(0, next.start_ns).samples(), s.samples());
    }

    #[test]
    fn members_at_other_frequencies_round_trip_with_their_cpu_times() {
        use crate::store::rollup_builder::tests::slow;
        let slices: Vec<Slice> = (0..12)
            .map(|i| {
                if (4..8).contains(&i) {
                    slow(i)
                } else {
                    slice(i)
                }
            })
            .collect();
        let bytes = built(&slices);
        let whole = Rollup::build(&slices);
        assert!(whole.member_cpu.is_some());
        let read = Rollup::decode(&bytes).unwrap();
        assert_eq!(read, whole);
        // The slow members alone: their CPU time, counted at their own period.
        let (a, b) = (slices[4].start_ns, slices[8].start_ns);
        let got = read.restrict(a, b);
        assert_eq!(got.period_ns, slices[4].period_ns);
        let cpu = |s: &Slice| s.stacks.iter().map(|st| st.cpu_ns).sum::<u64>();
        assert_eq!(cpu(&got), slices[4..8].iter().map(cpu).sum::<u64>());
        assert_eq!(
            got.samples(),
            slices[4..8].iter().map(Slice::samples).sum::<u64>()
        );
        // Across the change: samples at the shortest period.
        let got = Rollup::decode(&bytes).unwrap().restrict(a, b + 1);
        assert_eq!(got.period_ns, slices[0].period_ns);
        assert_eq!(cpu(&got), slices[4..9].iter().map(cpu).sum::<u64>());
    }

    #[test]
    fn a_restricted_streamed_roll_up_gives_its_members_stacks() {
        let slices: Vec<Slice> = (0..30).map(slice).collect();
        let rollup = Rollup::decode(&built(&slices)).unwrap();
        let (a, b) = (slices[3].start_ns + 1, slices[9].start_ns);
        let got = rollup.restrict(a, b);
        let want = Rollup::build(&slices).restrict(a, b);
        assert_eq!(got, want);
        assert_eq!(
            got.samples(),
            slices[3..9].iter().map(Slice::samples).sum::<u64>()
        );
    }
}

/// What an hour's roll-up costs on real slices, the whole (`Rollup::build`) way and the
/// incremental way: `PROFILERD_BENCH_SLICES=DIR PROFILERD_BENCH_MODE=whole|incremental cargo
/// test --release -p profiler-daemon --bin profilerd rollup_cost -- --ignored --nocapture`,
/// DIR a `slices/` directory; one mode per run, so that the peak (VmHWM) is the mode's own.
#[cfg(test)]
mod cost {
    use crate::slice::Slice;
    use crate::store::rollup::Rollup;
    use crate::store::rollup_builder::RollupBuilder;
    use std::time::{Duration, Instant};

    fn kb(field: &str) -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    fn cpu() -> Duration {
        recorder::ProcessUsage::this_thread().cpu()
    }

    /// The slice files (not roll-ups) in `dir`, in order: a benchmark's input.
    fn slice_paths(dir: &str) -> Vec<std::path::PathBuf> {
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let n = p.to_str().unwrap();
                n.ends_with(".pb.gz") && !n.ends_with(".hour.pb.gz")
            })
            .collect();
        paths.sort();
        paths
    }

    #[test]
    #[ignore]
    fn rollup_cost() {
        let (Ok(dir), Ok(mode)) = (
            std::env::var("PROFILERD_BENCH_SLICES"),
            std::env::var("PROFILERD_BENCH_MODE"),
        ) else {
            return;
        };
        let paths = slice_paths(&dir);
        let n = paths.len();
        let hwm0 = kb("VmHWM:");
        let (t, c) = (Instant::now(), cpu());
        let mut out = Vec::new();
        let mut fold = Duration::ZERO;
        let mut worst = Duration::ZERO;
        let mut memory = 0;
        if mode == "whole" {
            let slices: Vec<Slice> = paths
                .iter()
                .map(|p| Slice::decode(&std::fs::read(p).unwrap()).unwrap())
                .collect();
            let rollup = Rollup::build(&slices);
            drop(slices);
            out = rollup.encode();
        } else {
            let mut b = RollupBuilder::new(usize::MAX);
            for p in &paths {
                let s = Slice::decode(&std::fs::read(p).unwrap()).unwrap();
                let c = cpu();
                b.fold(&s, (s.start_ns, s.end_ns)).unwrap();
                let spent = cpu() - c;
                fold += spent;
                worst = worst.max(spent);
            }
            memory = b.memory();
            eprintln!(
                "names {} ({} B), sequences {} ({} B), strings {}, chains {}, threads {}, stacks {}, entries {}",
                b.names.len(),
                b.names.memory(),
                b.sequences.len(),
                b.sequences.memory(),
                b.strings.len(),
                b.chains.len(),
                b.threads.items().len(),
                b.stacks.len(),
                b.entries.len()
            );
            let c = cpu();
            b.write_to(&mut out).unwrap();
            eprintln!(
                "incremental: {n} folds {fold:?} (worst {worst:?}), compact form {:.1} MB, write {:?}",
                memory as f64 / 1e6,
                cpu() - c
            );
        }
        eprintln!(
            "{mode}: {n} slices, cpu {:?}, wall {:?}, {} bytes, VmHWM +{:.1} MB (from {:.1}), compact {:.1} MB",
            cpu() - c,
            t.elapsed(),
            out.len(),
            (kb("VmHWM:") - hwm0) as f64 / 1024.0,
            hwm0 as f64 / 1024.0,
            memory as f64 / 1e6
        );
    }

    /// What keeping each stack's samples per second costs on real slices (bench/daemon.sh
    /// runs it on its runs' slices): the slice files as written, the same slices without
    /// their per-second counts (as written before they were kept), and the roll-up of all of
    /// them each way (file and compact form). `PROFILERD_BENCH_SLICES=DIR cargo test
    /// --release -p profiler-daemon --bin profilerd seconds_cost -- --ignored --nocapture`;
    /// prints one line: `seconds_cost: slices N with W without O rollup_with RW
    /// rollup_without RO compact_with CW compact_without CO` (bytes).
    #[test]
    #[ignore]
    fn seconds_cost() {
        let Ok(dir) = std::env::var("PROFILERD_BENCH_SLICES") else {
            return;
        };
        let paths = slice_paths(&dir);
        let (mut with, mut without) = (0u64, 0u64);
        let mut b_with = RollupBuilder::new(usize::MAX);
        let mut b_without = RollupBuilder::new(usize::MAX);
        for p in &paths {
            let bytes = std::fs::read(p).unwrap();
            with += bytes.len() as u64;
            let s = Slice::decode(&bytes).unwrap();
            let span = (s.start_ns, s.end_ns);
            b_with.fold(&s, span).unwrap();
            let mut bare = s;
            for st in &mut bare.stacks {
                st.seconds = Default::default();
            }
            without += bare.encode().len() as u64;
            b_without.fold(&bare, span).unwrap();
        }
        let size = |b: &RollupBuilder| {
            let mut out = Vec::new();
            b.write_to(&mut out).unwrap();
            out.len()
        };
        println!(
            "seconds_cost: slices {} with {with} without {without} rollup_with {} rollup_without {} compact_with {} compact_without {}",
            paths.len(),
            size(&b_with),
            size(&b_without),
            b_with.memory(),
            b_without.memory()
        );
    }
}
