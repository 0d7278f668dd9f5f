//! What time a recording or a history query measures: CPU samples, time blocked off CPU, or
//! wall-clock time (both); what each stack of a slice holds of it; and what a user who may
//! not see kernel frames sees of a stack (its user frames and, off CPU, the frame naming the
//! wait kind): [`visible_frames`] and [`hide_kernel_frames`], the one rule every query,
//! recording and scrape path applies.
//!
//! A slice of the continuous stream sampled with `[sampling] off_cpu` holds CPU stacks
//! (`cpu_ns`) and off-CPU stacks (`off_cpu_ns`, innermost frame `[off-cpu: KIND]`, preempted
//! time as `[off-cpu: preempted]`). A query projects each slice it reads onto its measure
//! ([`MeasureSlices::project`]): the stacks that hold some of it, each with that time as its
//! `cpu_ns`, so that folding, merging and the timeline weigh stacks as they always did.

pub use daemon_api::Measure;

use crate::access::Visibility;
use crate::slice::{Slice, SliceStack};

/// The wait-kind frame of preempted time (left out of `off_cpu`, kept in `wall`).
fn preempted_name() -> &'static str {
    profile::WaitKind::Preempted.frame()
}

/// What a [`Measure`] (declared in `daemon-api`, with its wire names) takes of a slice's
/// stacks.
pub trait MeasureSlices {
    /// The time `stack` holds of this measure, ns (None: none of it); `preempted` is the
    /// index of the preempted wait-kind frame in the slice's names, if there.
    fn time_of(self, stack: &SliceStack, preempted: Option<u32>) -> Option<u64>;

    /// `slice` with only the stacks that hold some of this measure, each with that time as
    /// its `cpu_ns` (and no `off_cpu_ns`). A slice without off-CPU stacks is returned as it
    /// is for [`Measure::Cpu`] (the cost of a CPU query is unchanged).
    fn project(self, slice: Slice) -> Slice;

    /// `slice`, whose `cpu_ns` holds this measure's time (see [`MeasureSlices::project`]), as
    /// a gzipped pprof file whose second sample type names the measure (`off_cpu`, `wall`).
    fn pprof_bytes(self, slice: &Slice) -> Vec<u8>;
}

impl MeasureSlices for Measure {
    fn time_of(self, stack: &SliceStack, preempted: Option<u32>) -> Option<u64> {
        let off_cpu = stack.off_cpu_ns > 0;
        match self {
            Measure::Cpu => (!off_cpu).then_some(stack.cpu_ns),
            Measure::OffCpu => {
                let was_preempted =
                    preempted.is_some() && stack.frames.last() == preempted.as_ref();
                (off_cpu && !was_preempted).then_some(stack.off_cpu_ns)
            }
            Measure::Wall if off_cpu => Some(stack.off_cpu_ns),
            Measure::Wall => Some(stack.cpu_ns),
        }
    }

    fn project(self, mut slice: Slice) -> Slice {
        if !slice.has_off_cpu() {
            if self == Measure::OffCpu {
                slice.stacks.clear();
            }
            return slice;
        }
        let preempted = preempted_frame(&slice.names);
        slice
            .stacks
            .retain_mut(|s| match self.time_of(s, preempted) {
                Some(ns) => {
                    s.cpu_ns = ns;
                    s.off_cpu_ns = 0;
                    true
                }
                None => false,
            });
        slice
    }

    fn pprof_bytes(self, slice: &Slice) -> Vec<u8> {
        if self == Measure::Cpu {
            return slice.encode();
        }
        let mut p = slice.to_pprof();
        p.string_table.push(self.as_str().to_string());
        let name = p.string_table.len() as i64 - 1;
        if let Some(t) = p.sample_type.get_mut(1) {
            t.r#type = name;
        }
        if let Some(t) = p.period_type.as_mut() {
            t.r#type = name;
        }
        crate::slice::encode_profile(&p)
    }
}

/// The index of the preempted wait-kind frame in `names`.
pub fn preempted_frame(names: &[String]) -> Option<u32> {
    names
        .iter()
        .position(|n| n == preempted_name())
        .map(|i| i as u32)
}

/// What a user who may not see kernel frames sees of `stack` (frames outermost first, names
/// in `names`): its user frames, and the innermost frame when it names the wait kind of an
/// off-CPU stack (it comes after the kernel frames, which [`SliceStack::kernel_frames`] does
/// not count).
pub fn user_frames<'a>(stack: &'a SliceStack, names: &[String]) -> (&'a [u32], Option<u32>) {
    let marker = stack.frames.last().copied().filter(|&f| {
        names
            .get(f as usize)
            .is_some_and(|n| profile::WaitKind::is_marker(n))
    });
    let hidden = stack.kernel_frames as usize + usize::from(marker.is_some());
    let keep = stack.frames.len() - hidden.min(stack.frames.len());
    (&stack.frames[..keep], marker)
}

/// The frames of `stack` that `visibility` shows, outermost first, and the wait-kind frame
/// that follows them (kept after the user frames, see [`user_frames`]): every frame for
/// [`Visibility::All`]. The one rule for what a user sees of a stack: every path that reads
/// frames for a user (folding, merging, the timeline's `function=`, recordings, `subtract`)
/// reads them through this or [`hide_kernel_frames`].
pub fn visible_frames<'a>(
    stack: &'a SliceStack,
    names: &[String],
    visibility: Visibility,
) -> (&'a [u32], Option<u32>) {
    match visibility {
        Visibility::All => (&stack.frames, None),
        Visibility::OwnOnly(_) => user_frames(stack, names),
    }
}

/// `stack` as `visibility` shows it ([`visible_frames`]): for a user, its kernel frames
/// removed (the wait-kind frame kept innermost) and `kernel_frames` 0.
pub fn hide_kernel_frames(stack: &mut SliceStack, names: &[String], visibility: Visibility) {
    if visibility == Visibility::All {
        return;
    }
    let (user, marker) = user_frames(stack, names);
    let keep = user.len();
    stack.frames.truncate(keep);
    stack.frames.extend(marker);
    stack.kernel_frames = 0;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slice::OFF_CPU_TYPE;

    /// A slice with a CPU stack, a blocked one and a preempted one.
    fn mixed() -> Slice {
        let names = [
            "main",
            "work",
            "read",
            "pipe_read",
            "[off-cpu: io]",
            "[off-cpu: preempted]",
        ];
        let stack = |frames: Vec<u32>, kernel_frames, cpu_ns, off_cpu_ns: u64| SliceStack {
            frames,
            kernel_frames,
            pid: 5,
            tid: 5,
            uid: Some(1000),
            comm: Some("w".into()),
            // CPU samples, or µs off CPU.
            count: if off_cpu_ns > 0 { off_cpu_ns / 1000 } else { 2 },
            cpu_ns,
            off_cpu_ns,
            ..SliceStack::default()
        };
        Slice {
            start_ns: 1,
            end_ns: 2,
            period_ns: 10_000_000,
            names: names.map(String::from).to_vec(),
            stacks: vec![
                stack(vec![0, 1], 0, 20_000_000, 0),
                stack(vec![0, 2, 3, 4], 1, 0, 50_000_000),
                stack(vec![0, 1, 5], 0, 0, 3_000_000),
            ],
        }
    }

    #[test]
    fn each_measure_keeps_its_stacks_and_their_time() {
        let times = |m: Measure| -> Vec<(Vec<u32>, u64)> {
            m.project(mixed())
                .stacks
                .into_iter()
                .map(|s| (s.frames, s.cpu_ns))
                .collect()
        };
        assert_eq!(times(Measure::Cpu), [(vec![0, 1], 20_000_000)]);
        assert_eq!(times(Measure::OffCpu), [(vec![0, 2, 3, 4], 50_000_000)]);
        assert_eq!(
            times(Measure::Wall),
            [
                (vec![0, 1], 20_000_000),
                (vec![0, 2, 3, 4], 50_000_000),
                (vec![0, 1, 5], 3_000_000)
            ]
        );
        // A slice without off-CPU stacks: nothing off CPU, CPU as it is.
        let mut cpu_only = mixed();
        cpu_only.stacks.truncate(1);
        assert!(Measure::OffCpu.project(cpu_only.clone()).stacks.is_empty());
        assert_eq!(Measure::Cpu.project(cpu_only.clone()), cpu_only);
    }

    #[test]
    fn off_cpu_time_survives_the_slice_file_and_roll_ups() {
        use crate::store::rollup::Rollup;
        use crate::store::rollup_builder::RollupBuilder;
        let slice = mixed();
        let bytes = slice.encode();
        assert_eq!(Slice::decode(&bytes).unwrap(), slice);
        // A third sample type, for pprof tools.
        let p = crate::slice::decode_profile_within(&bytes, 1 << 20).unwrap();
        let types: Vec<&str> = p
            .sample_type
            .iter()
            .map(|t| p.string_table[t.r#type as usize].as_str())
            .collect();
        assert_eq!(types, ["samples", "cpu", OFF_CPU_TYPE]);
        assert_eq!(slice.samples(), 2, "off-CPU intervals are not CPU samples");
        // A CPU-only slice is written as before: two values.
        let mut cpu_only = mixed();
        cpu_only.stacks.truncate(1);
        let p = cpu_only.to_pprof();
        assert_eq!(p.sample_type.len(), 2);
        assert!(p.sample.iter().all(|s| s.value.len() == 2));
        // An hour of two slices, streamed and whole: the off-CPU time adds up, and a range
        // of one member gets that member's.
        let mut second = mixed();
        (second.start_ns, second.end_ns) = (3, 4);
        second.stacks[1].off_cpu_ns = 10_000_000;
        second.stacks[1].count = 10_000;
        let mut b = RollupBuilder::new(1 << 30);
        for s in [&slice, &second] {
            b.fold(s, (s.start_ns, s.end_ns)).unwrap();
        }
        let mut bytes = Vec::new();
        b.write_to(&mut bytes).unwrap();
        let rollup = Rollup::decode(&bytes).unwrap();
        assert_eq!(rollup, Rollup::build(&[slice.clone(), second.clone()]));
        let blocked = |s: &Slice| -> Vec<u64> {
            Measure::OffCpu
                .project(s.clone())
                .stacks
                .iter()
                .map(|s| s.cpu_ns)
                .collect()
        };
        assert_eq!(blocked(&rollup.slice), [60_000_000]);
        assert_eq!(blocked(&rollup.clone().restrict(3, 4)), [10_000_000]);
        assert_eq!(blocked(&rollup.restrict(1, 2)), [50_000_000]);
    }

    #[test]
    fn the_off_cpu_sample_type_is_the_wire_name() {
        assert_eq!(Measure::OffCpu.as_str(), OFF_CPU_TYPE);
    }

    #[test]
    fn users_see_the_wait_kind_but_no_kernel_frame() {
        let slice = mixed();
        let (frames, marker) = user_frames(&slice.stacks[1], &slice.names);
        assert_eq!((frames, marker), (&[0, 2][..], Some(4)));
        let (frames, marker) = user_frames(&slice.stacks[0], &slice.names);
        assert_eq!((frames, marker), (&[0, 1][..], None));
    }
}
