use super::*;

/// A name of `len` characters nobody else has (hard to compress, as a hostile user's are).
fn long_name(seed: u64, len: usize) -> String {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (b'a' + ((x >> 33) % 26) as u8) as char
        })
        .collect()
}

fn stack(uid: Option<u32>, frames: Vec<u32>, count: u64) -> SliceStack {
    SliceStack {
        frames,
        pid: uid.unwrap_or(7),
        tid: uid.unwrap_or(7),
        comm: Some("w".into()),
        uid,
        count,
        cpu_ns: count * 1_001_001,
        ..SliceStack::default()
    }
}

/// A slice where uid 1000 runs a small known workload (`main;work;hot_a` 300 samples,
/// `main;work;hot_b` 100) and uid `hostile` `deep` stacks of one sample each, 40 frames deep
/// through 200 distinct 2000-character names, and one hot stack of 500 samples.
fn contested(hostile: u32, deep: usize) -> Slice {
    let mut names: Vec<String> = ["main", "work", "hot_a", "hot_b"]
        .map(String::from)
        .to_vec();
    let mut stacks = vec![
        stack(Some(1000), vec![0, 1, 2], 300),
        stack(Some(1000), vec![0, 1, 3], 100),
    ];
    let first = names.len() as u32;
    names.extend((0..200).map(|i| long_name(i, 2000)));
    stacks.push(stack(Some(hostile), vec![0, first], 500));
    for i in 0..deep as u32 {
        let frames = (0..40).map(|d| first + (i * 7 + d * 13) % 200).collect();
        stacks.push(stack(Some(hostile), frames, 1));
    }
    Slice {
        start_ns: 1_700_000_000_000_000_000,
        end_ns: 1_700_000_001_000_000_000,
        period_ns: 1_001_001,
        names,
        stacks,
    }
}

#[test]
fn the_measure_is_the_file_size() {
    let slice = contested(1001, 100);
    let (measured, file) = (file_bytes(&slice), slice.encode().len() as u64);
    assert_eq!(measured, file);
}

fn samples_of(slice: &Slice, uid: u32) -> u64 {
    slice
        .stacks
        .iter()
        .filter(|s| s.uid == Some(uid))
        .map(|s| s.count)
        .sum()
}

#[test]
fn the_budget_spreads_max_bytes_over_the_slices_of_max_age() {
    const S: u64 = 1_000_000_000;
    // The defaults: 1 GiB over 3 days of 10 s slices.
    assert_eq!(slice_budget(1 << 30, 259_200 * S, 10 * S), 41_425);
    assert_eq!(slice_budget(2 << 20, 60 * S, S), 34_952);
    // No overflow, no division by zero.
    assert_eq!(slice_budget(u64::MAX, S, 10 * S), u64::MAX);
    assert_eq!(slice_budget(100, 0, 1), 100);
}

#[test]
fn the_water_level_keeps_small_parts_whole_and_cuts_the_big_ones_equally() {
    assert_eq!(water_level(vec![100, 10, 20], 60), 30);
    assert_eq!(water_level(vec![100, 90, 10], 60), 25);
    assert_eq!(water_level(vec![10, 20], 60), u64::MAX);
    assert_eq!(water_level(Vec::new(), 60), u64::MAX);
    assert_eq!(water_level(vec![100], 60), 60);
}

#[test]
fn a_slice_within_its_budget_is_kept_whole_without_being_measured() {
    let mut slice = contested(1001, 20);
    let before = slice.clone();
    let drops = apply(&mut slice, u64::MAX / 2, 25, |_| panic!("measured"));
    assert!(drops.is_empty());
    assert_eq!(slice, before);
    // Over the estimate but within the budget once compressed: kept whole too.
    let file = file_bytes(&slice);
    assert!(apply(&mut slice, file, 25, file_bytes).is_empty());
    assert_eq!(slice, before);
}

#[test]
fn the_hostile_uid_loses_its_fewest_sample_stacks_and_the_other_keeps_everything() {
    let mut slice = contested(1001, 400);
    let whole = file_bytes(&slice);
    let budget = whole / 8;
    let drops = apply(&mut slice, budget, 25, file_bytes);
    assert_eq!(drops.len(), 1, "{drops:?}");
    let d = drops[0];
    assert_eq!(d.uid, Some(1001));
    assert!(d.stacks > 100, "{d:?}");
    assert_eq!(d.samples, d.stacks, "only one-sample stacks were dropped");
    // uid 1000's workload is whole; the hostile uid's hot stack stays.
    assert_eq!(samples_of(&slice, 1000), 400);
    assert_eq!(samples_of(&slice, 1001), 500 + 400 - d.samples);
    assert!(slice.stacks.iter().any(|s| s.count == 500));
    // Names no stack uses are gone, and the rest still name the same frames.
    assert!(slice.names.len() < 204);
    let names_of = |s: &SliceStack| -> Vec<&str> {
        s.frames
            .iter()
            .map(|&f| slice.names[f as usize].as_str())
            .collect()
    };
    assert_eq!(names_of(&slice.stacks[0]), ["main", "work", "hot_a"]);
    assert!(Slice::decode(&slice.encode()).is_ok());
    // The file now fits its budget, give or take the estimate.
    let after = file_bytes(&slice);
    assert!(
        after <= budget + budget / 4,
        "{after} bytes for a budget of {budget} (whole: {whole})"
    );
    assert!(d.bytes > 0 && d.bytes <= whole, "{d:?}");
}

#[test]
fn uid_0_is_a_uid_like_the_others() {
    let mut slice = contested(0, 400);
    let budget = file_bytes(&slice) / 8;
    let drops = apply(&mut slice, budget, 25, file_bytes);
    assert_eq!(drops.iter().map(|d| d.uid).collect::<Vec<_>>(), [Some(0)]);
    assert_eq!(samples_of(&slice, 1000), 400);
}

#[test]
fn each_uid_keeps_its_share_when_several_are_over() {
    // Two hostile uids with the same load: cut alike, each to about half the budget, which
    // is above the 25 % share.
    let mut slice = contested(1001, 300);
    let mut other = contested(1002, 300);
    slice.stacks.extend(other.stacks.drain(2..));
    let budget = file_bytes(&slice) / 6;
    let drops = apply(&mut slice, budget, 25, file_bytes);
    assert_eq!(drops.len(), 2, "{drops:?}");
    let (a, b) = (drops[0].stacks as f64, drops[1].stacks as f64);
    assert!((a - b).abs() <= 0.1 * a.max(b), "{drops:?}");
    assert_eq!(samples_of(&slice, 1000), 400);
    // With a share of 100 %, neither is cut below the whole budget: the slice stays over it.
    let mut slice2 = contested(1001, 300);
    let mut other = contested(1002, 300);
    slice2.stacks.extend(other.stacks.drain(2..));
    let drops100 = apply(&mut slice2, budget, 100, file_bytes);
    let cut = |d: &[UidDrop]| d.iter().map(|d| d.stacks).sum::<u64>();
    assert!(cut(&drops100) < cut(&drops), "{drops100:?} vs {drops:?}");
}

#[test]
fn stacks_of_unknown_uids_share_one_part() {
    let mut slice = contested(1001, 400);
    for s in slice.stacks.iter_mut().skip(2) {
        s.uid = None;
    }
    let budget = file_bytes(&slice) / 8;
    let drops = apply(&mut slice, budget, 25, file_bytes);
    assert_eq!(drops.iter().map(|d| d.uid).collect::<Vec<_>>(), [None]);
    assert_eq!(samples_of(&slice, 1000), 400);
}

/// The owner of a process no user may trace (`procmap::UNKNOWN_UID`): admins see it.
const UNKNOWN_UID: u32 = u32::MAX;

/// A user's program they made not dumpable (or execute-only) or a set-uid program they ran
/// is seen by admins only (uid unknown), and charged to its real uid: its deep stacks (2
/// samples each) are cut from that uid's part, never from the part that another user's
/// process nobody may trace has (its real uid not known): 20 stacks of one sample each, all
/// kept. Charged to who sees them, both are in one part and those one-sample stacks go first.
#[test]
fn a_process_withheld_from_its_user_is_charged_to_its_real_uid() {
    let mut slice = contested(1001, 400);
    for s in slice.stacks.iter_mut().skip(2) {
        s.uid = Some(UNKNOWN_UID);
        s.share_uid = Some(1001);
        s.count = s.count.max(2);
    }
    for i in 0..20 {
        let mut s = stack(Some(UNKNOWN_UID), vec![0, 1, 2 + i % 2], 1);
        s.pid = 5000 + i;
        s.tid = s.pid;
        slice.stacks.push(s);
    }
    let budget = file_bytes(&slice) / 8;
    let drops = apply(&mut slice, budget, 25, file_bytes);
    assert_eq!(
        drops.iter().map(|d| d.uid).collect::<Vec<_>>(),
        [Some(1001)],
        "{drops:?}"
    );
    assert!(drops[0].stacks > 100, "{drops:?}");
    let others: u64 = slice
        .stacks
        .iter()
        .filter(|s| s.pid >= 5000)
        .map(|s| s.count)
        .sum();
    assert_eq!(others, 20, "the other process nobody may trace lost stacks");
    assert_eq!(samples_of(&slice, 1000), 400);
    // Who may see what is unchanged: the kept stacks are still admins' only, and the uid
    // charged survives the file.
    let read = Slice::decode(&slice.encode()).unwrap();
    assert!(read
        .stacks
        .iter()
        .filter(|s| s.share_uid == Some(1001))
        .all(|s| s.uid == Some(UNKNOWN_UID)));
    assert!(read.stacks.iter().any(|s| s.charged_uid() == Some(1001)));
    assert_eq!(read, slice);
}
