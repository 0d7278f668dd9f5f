//! Tests of the slice and its file format (`slice.rs`).

use super::*;

/// A slice of three stacks starting at `start_ns`: labels of every kind, kernel frames, a
/// truncated stack.
pub(crate) fn example(start_ns: u64) -> Slice {
    Slice {
        start_ns,
        end_ns: start_ns + 10_000_000_000,
        period_ns: 10_101_010,
        names: [
            "main",
            "work",
            "hot_a",
            "entry_SYSCALL_64",
            "do_sys",
            "[truncated]",
        ]
        .map(String::from)
        .to_vec(),
        stacks: vec![
            SliceStack {
                frames: vec![0, 1, 2],
                kernel_frames: 0,
                pid: 100,
                tid: 101,
                process_start: 5,
                comm: Some("split".into()),
                uid: Some(1000),
                share_uid: None,
                ancestors: vec![90, 1],
                cgroup: Some("/user.slice/user-1000.slice/session-1.scope".into()),
                count: 30,
                cpu_ns: 30 * 10_101_010,
                off_cpu_ns: 0,
                seconds: Default::default(),
            },
            SliceStack {
                frames: vec![5, 0, 3, 4],
                kernel_frames: 2,
                pid: 200,
                tid: 200,
                process_start: 0,
                comm: None,
                uid: None,
                share_uid: None,
                ancestors: Vec::new(),
                cgroup: None,
                count: 7,
                cpu_ns: 7 * 10_101_010,
                off_cpu_ns: 0,
                seconds: Default::default(),
            },
            SliceStack {
                // "main" also as a kernel frame: its own location.
                frames: vec![0, 0],
                kernel_frames: 1,
                pid: 1,
                tid: 1,
                process_start: 0,
                comm: Some("init".into()),
                uid: Some(0),
                share_uid: None,
                ancestors: Vec::new(),
                cgroup: None,
                count: 1,
                cpu_ns: 10_101_010,
                off_cpu_ns: 0,
                seconds: Default::default(),
            },
        ],
    }
}

/// Give each CPU stack of `slice` per-second counts: its count spread over up to three of
/// the slice's seconds, chosen by `salt` and the stack.
pub(crate) fn spread_seconds(slice: &mut Slice, salt: u64) {
    let seconds = crate::seconds::seconds_in((slice.start_ns, slice.end_ns));
    for (k, st) in slice.stacks.iter_mut().enumerate() {
        if st.off_cpu_ns > 0 || st.count == 0 {
            st.seconds = Default::default();
            continue;
        }
        let first = (salt + 3 * k as u64) % seconds;
        let mut picked: Vec<u32> = (0..3).map(|j| ((first + 4 * j) % seconds) as u32).collect();
        picked.sort_unstable();
        picked.dedup();
        let n = (picked.len() as u64).min(st.count);
        let pairs: Vec<(u32, u64)> = picked[..n as usize]
            .iter()
            .enumerate()
            .map(|(j, &sec)| {
                let part = st.count / n + u64::from((j as u64) < st.count % n);
                (sec, part)
            })
            .collect();
        st.seconds = crate::seconds::SecondCounts::encode(pairs);
    }
}

#[test]
fn per_second_counts_round_trip_and_must_add_up() {
    let mut slice = example(1_700_000_000_000_000_000);
    spread_seconds(&mut slice, 7);
    assert!(slice.stacks.iter().all(|s| !s.seconds.is_empty()));
    let decoded = Slice::decode(&slice.encode()).unwrap();
    assert_eq!(decoded, slice);
    // Counts per second that do not add up to the stack's count: refused.
    let mut bad = slice.clone();
    bad.stacks[0].count += 1;
    bad.stacks[0].cpu_ns += bad.period_ns;
    assert!(matches!(
        Slice::decode(&bad.encode()),
        Err(SliceError::Invalid(_))
    ));
}

#[test]
fn a_named_window_keeps_its_stacks_seconds_on_the_wall_clocks_grid() {
    use profile::{
        NormalizedStack, NormalizedWindow, SecondCount, StackEnd, StackWeight, ThreadLabels,
    };
    const S: u64 = 1_000_000_000;
    // A window from monotonic 50.4 s; the wall clock 1_700_000_000.3 s ahead: it starts at
    // UNIX 1_700_000_050.7 s, and its grid's second 0 began at UNIX 1_700_000_050 s
    // (monotonic 49.7 s).
    let offset = 1_700_000_000 * S + 300_000_000;
    let mut seconds = profile::WindowSeconds::new(49 * S + 700_000_000);
    let c = |second, count| SecondCount { second, count };
    seconds.push(&[c(0, 2), c(3, 5)]);
    let window = NormalizedWindow {
        start: 50 * S + 400_000_000,
        end: 60 * S + 400_000_000,
        threads: vec![ThreadLabels {
            pid: 7,
            tid: 7,
            ..ThreadLabels::default()
        }],
        stacks: vec![NormalizedStack {
            thread: 0,
            frames_start: 0,
            kernel_len: 0,
            user_len: 0,
            user_end: StackEnd::Complete,
            count: 7,
            period: 7 * 1_000_000,
            weight: StackWeight::OnCpu,
        }],
        seconds: Some(seconds),
        ..NormalizedWindow::default()
    };
    let profile = profile::Profile::new();
    let named = [NamedStack {
        frames: Vec::new(),
        kernel_frames: 0,
    }];
    let slice = Slice::from_named(
        &window,
        &profile,
        &named,
        1_000_000,
        EventKind::CpuClock,
        offset,
    );
    assert_eq!(slice.start_ns, 1_700_000_050 * S + 700_000_000);
    assert_eq!(
        slice.stacks[0].seconds.iter().collect::<Vec<_>>(),
        [(0, 2), (3, 5)],
        "second 0: the one its start falls in"
    );
    // The grid read a moment off (its clocks read at another time than the naming's).
    let mut early = window.clone();
    early.seconds.as_mut().unwrap().start -= 2_000_000;
    let slice = Slice::from_named(
        &early,
        &profile,
        &named,
        1_000_000,
        EventKind::CpuClock,
        offset,
    );
    assert_eq!(slice.stacks[0].seconds.iter().next(), Some((0, 2)));
}

#[test]
fn without_layout_labels_no_cgroup_ppid_or_ancestors_leave() {
    let mut slice = example(1_700_000_000_000_000_000);
    let keys = |slice: &Slice| -> Vec<String> {
        let p = slice.to_pprof();
        let mut keys: Vec<String> = p
            .sample
            .iter()
            .flat_map(|s| &s.label)
            .map(|l| p.string_table[l.key as usize].clone())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    };
    assert!(keys(&slice).contains(&"cgroup".to_string()));
    assert!(keys(&slice).contains(&"ppid".to_string()));
    slice.drop_layout_labels();
    assert_eq!(
        keys(&slice),
        [
            "comm",
            "kernel_frames",
            "pid",
            "process_start",
            "tid",
            "uid"
        ]
    );
    assert_eq!(slice.samples(), 38);
}

/// A stack's real uid is kept only where it is not its owner's (a process withheld from its
/// user: set-uid, or not dumpable), as `share_uid`, and read back; its owner, who may see it,
/// stays as it was.
#[test]
fn the_real_uid_is_kept_where_it_is_not_the_owners() {
    use profile::{NormalizedStack, NormalizedWindow, StackEnd, StackWeight, ThreadLabels};
    let thread = |pid: u32, uid: Option<u32>, real_uid: Option<u32>| ThreadLabels {
        pid,
        tid: pid,
        uid,
        real_uid,
        ..ThreadLabels::default()
    };
    let window = NormalizedWindow {
        start: 1_000,
        end: 2_000,
        threads: vec![
            thread(1, Some(1000), Some(1000)),
            thread(2, Some(u32::MAX), Some(1000)),
            thread(3, Some(u32::MAX), Some(u32::MAX)),
            thread(4, None, None),
        ],
        stacks: (0..4)
            .map(|thread| NormalizedStack {
                thread,
                frames_start: 0,
                kernel_len: 0,
                user_len: 0,
                user_end: StackEnd::Complete,
                count: 1,
                period: 1_000_000,
                weight: StackWeight::OnCpu,
            })
            .collect(),
        ..NormalizedWindow::default()
    };
    let named = vec![
        NamedStack {
            frames: Vec::new(),
            kernel_frames: 0,
        };
        4
    ];
    let profile = profile::Profile::new();
    let slice = Slice::from_named(&window, &profile, &named, 1_000_000, EventKind::CpuClock, 0);
    let got: Vec<_> = slice
        .stacks
        .iter()
        .map(|s| (s.uid, s.share_uid, s.charged_uid()))
        .collect();
    assert_eq!(
        got,
        [
            (Some(1000), None, Some(1000)),
            (Some(u32::MAX), Some(1000), Some(1000)),
            (Some(u32::MAX), None, Some(u32::MAX)),
            (None, None, None),
        ]
    );
    assert_eq!(Slice::decode(&slice.encode()).unwrap(), slice);
    // Only the withheld stack carries the label.
    let p = slice.to_pprof();
    let key = p
        .string_table
        .iter()
        .position(|s| s == "share_uid")
        .unwrap() as i64;
    let carrying: Vec<usize> = (0..p.sample.len())
        .filter(|&i| p.sample[i].label.iter().any(|l| l.key == key))
        .collect();
    assert_eq!(carrying, [1]);
}

#[test]
fn a_slice_round_trips() {
    let slice = example(1_700_000_000_000_000_000);
    let bytes = slice.encode();
    assert_eq!(Slice::decode(&bytes).unwrap(), slice);
    assert_eq!(slice.samples(), 38);
}

/// A slice file written by an earlier build (tests/fixtures/slice-v1.pb.gz): it must still
/// load, whole, and read as a pprof profile through the `pprof` crate too.
#[test]
fn slices_written_by_the_old_code_still_load() {
    let old = include_bytes!("../tests/fixtures/slice-v1.pb.gz");
    let slice = Slice::decode(old).unwrap();
    // The old format had no ancestors or cgroup labels.
    let mut expected = example(1_700_000_000_000_000_000);
    for s in &mut expected.stacks {
        s.ancestors.clear();
        s.cgroup = None;
    }
    assert_eq!(slice, expected);
    assert_eq!(Slice::decode(&slice.encode()).unwrap(), slice);
    let p = pprof::decode(old).unwrap();
    let folded = pprof::fold(
        &p,
        &pprof::FoldOptions {
            comm_root: true,
            lines: false,
        },
    )
    .unwrap();
    assert_eq!(folded.iter().map(|s| s.count).sum::<u64>(), slice.samples());
}

#[test]
fn truncated_and_corrupt_files_are_errors() {
    let bytes = example(1).encode();
    for cut in [0, 1, 10, bytes.len() / 2, bytes.len() - 1] {
        assert!(Slice::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x55;
    assert!(Slice::decode(&flipped).is_err());
    // Valid gzip of something that is not a slice.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(b"\x0a\x02\x08\x01garbage").unwrap();
    assert!(Slice::decode(&gz.finish().unwrap()).is_err());
}
