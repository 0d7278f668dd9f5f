//! The per-uid share of an hour's roll-up, as `share.rs` is of a slice: so that one user's
//! huge hours cannot shrink every other user's history once slices become roll-ups.
//!
//! A roll-up lives until `storage.max_age`; for the roll-ups of all of it to fit half of
//! `storage.max_bytes` (the other half is the slices', `share.rs`), an hour's roll-up may take
//! `max_bytes / 2 × hour / max_age` bytes, its budget (`Store::apply_rollup_share`). When the
//! roll-up would be larger, the budget is shared out between its uids exactly as a slice's
//! is (max-min fair, no uid cut below `storage.max_share_per_uid` percent), the stacks
//! weighed with their counts in every member; a uid over its part loses its stacks with the
//! fewest samples in the hour first, and what it lost is counted per uid (`uid_drops.rs`).
//!
//! Cost: nothing when the members' files together fit the budget (a roll-up holds each name
//! and stack once, never more than its members); otherwise the roll-up is encoded to count
//! its bytes and, when over, rebuilt with the stacks kept, and measured again (a cut is
//! estimated from the compression before it): at most three rounds, on the housekeeper's
//! thread, at the lowest priority.

use crate::store::rollup_builder::RollupBuilder;
use crate::store::share::{
    in_estimated, to_file_bytes, ByteCount, UidDrop, UidParts, Weighed, FRAME_BYTES, NAME_BYTES,
    STACK_BYTES,
};

/// Estimated bytes one count of a stack in one member, or in one second, adds to a roll-up (an
/// index and a count, packed).
const ENTRY_BYTES: u64 = 4;

/// The bytes of `builder`'s roll-up file, counted without keeping them (None: it could not
/// be encoded; the writer will say why).
pub fn file_bytes(builder: &RollupBuilder) -> Option<u64> {
    let mut count = ByteCount(0);
    builder.write_to(&mut count).ok()?;
    Some(count.0)
}

/// Rounds of measuring and cutting at most: a cut's bytes are estimated from the roll-up's
/// compression before it, and the names that go compress differently from the stacks.
const ROUNDS: usize = 3;

/// Keep `builder`'s roll-up within `budget` bytes of file by the share (see the module's
/// comment): `members_bytes` is what its members' files take, `share_percent` what each uid
/// keeps whatever others do, `file_bytes` measures a roll-up (not called when the members fit
/// the budget; after each cut, at most [`ROUNDS`] times in all). Returns the roll-up to write
/// and what each uid lost (none when it fits: then the roll-up is `builder` itself).
pub fn apply(
    mut builder: RollupBuilder,
    budget: u64,
    members_bytes: u64,
    share_percent: u8,
    file_bytes: impl Fn(&RollupBuilder) -> Option<u64>,
) -> (RollupBuilder, Vec<UidDrop>) {
    let mut lost: Vec<UidDrop> = Vec::new();
    if members_bytes <= budget {
        return (builder, lost);
    }
    for _ in 0..ROUNDS {
        let Some(file) = file_bytes(&builder).filter(|&f| f > budget) else {
            break;
        };
        let Some((kept, drops)) = cut(&builder, budget, file, share_percent) else {
            break;
        };
        builder = kept;
        for d in drops {
            match lost.iter_mut().find(|l| l.uid == d.uid) {
                Some(l) => {
                    l.stacks += d.stacks;
                    l.samples += d.samples;
                    l.bytes += d.bytes;
                }
                None => lost.push(d),
            }
        }
    }
    lost.sort_by_key(|d| d.uid);
    (builder, lost)
}

/// One cut of `builder` (a roll-up file of `file` bytes) to `budget`: the roll-up rebuilt
/// with the stacks kept, and what each uid lost; None when nothing is cut.
fn cut(
    builder: &RollupBuilder,
    budget: u64,
    file: u64,
    share_percent: u8,
) -> Option<(RollupBuilder, Vec<UidDrop>)> {
    let mut entries = vec![0u64; builder.stacks.len()];
    for e in &builder.entries {
        entries[e.stack as usize] += 1;
    }
    // A second's count weighs as much as a member's (two small varints).
    for e in &builder.seconds {
        entries[e.stack as usize] += 1;
    }
    let threads = builder.threads.items();
    let text = |id: u32| {
        if id == 0 {
            0
        } else {
            builder.strings.get(id - 1).len() as u64
        }
    };
    let weighed: Vec<Weighed<'_>> = builder
        .stacks
        .iter()
        .zip(&entries)
        .map(|(s, &n)| {
            let t = &threads[s.thread as usize];
            let names = builder.sequences.get(s.sequence);
            let labels =
                text(t.comm) + text(t.cgroup) + 6 * builder.chains.get(t.ancestors).len() as u64;
            Weighed {
                uid: t.share_uid.or(t.uid),
                bytes: STACK_BYTES + labels + FRAME_BYTES * names.len() as u64 + ENTRY_BYTES * n,
                names,
                count: s.count,
            }
        })
        .collect();
    let name_bytes = |f: u32| builder.names.get(f).len() as u64 + NAME_BYTES;
    let parts = UidParts::new(&weighed, &name_bytes);
    let estimated = parts.estimated().max(1);
    let (keep, mut drops) = parts.cut(in_estimated(budget, estimated, file), share_percent);
    if drops.iter().all(|d| d.stacks == 0) {
        return None;
    }
    to_file_bytes(&mut drops, estimated, file);
    Some((builder.retain(&keep), drops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slice::{Slice, SliceStack};

    const S: u64 = 1_000_000_000;

    /// A name of `len` letters nobody else has (hard to compress, as a hostile user's are).
    fn long_name(seed: u64, len: usize) -> String {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (b'a' + (x % 26) as u8) as char
            })
            .collect()
    }

    /// Slice `i` of an hour: uid 1000 runs `main;work;hot_a` (30 samples) and
    /// `main;work;hot_b` (10); uid 2000 has 40 stacks of one sample each through names of
    /// 1000 letters seen in no other slice, and one hot stack of 50.
    fn slice(i: u64) -> Slice {
        let mut names: Vec<String> = ["main", "work", "hot_a", "hot_b"]
            .map(String::from)
            .to_vec();
        let stack = |uid: u32, frames: Vec<u32>, count: u64| SliceStack {
            frames,
            pid: uid,
            tid: uid,
            comm: Some(format!("u{uid}")),
            uid: Some(uid),
            count,
            cpu_ns: count * 10_010_010,
            ..SliceStack::default()
        };
        let mut stacks = vec![
            stack(1000, vec![0, 1, 2], 30),
            stack(1000, vec![0, 1, 3], 10),
            stack(2000, vec![0, 1], 50),
        ];
        for k in 0..40u32 {
            names.push(long_name(i * 1000 + u64::from(k), 1000));
            stacks.push(stack(2000, vec![0, names.len() as u32 - 1], 1));
        }
        Slice {
            start_ns: 1_700_002_800 * S + i * 10 * S,
            end_ns: 1_700_002_800 * S + (i + 1) * 10 * S,
            period_ns: 10_010_010,
            names,
            stacks,
        }
    }

    fn hour(slices: u64) -> RollupBuilder {
        let mut b = RollupBuilder::new(1 << 30);
        for i in 0..slices {
            let s = slice(i);
            b.fold(&s, (s.start_ns, s.end_ns)).unwrap();
        }
        b
    }

    /// Samples of each uid, and the stacks of uid 1000 by their frames' names.
    fn by_uid(b: &RollupBuilder) -> (u64, u64, Vec<(String, u64)>) {
        let threads = b.threads.items();
        let (mut u1000, mut u2000, mut small) = (0, 0, Vec::new());
        for s in &b.stacks {
            match threads[s.thread as usize].uid {
                Some(1000) => {
                    u1000 += s.count;
                    let names: Vec<&str> = b
                        .sequences
                        .get(s.sequence)
                        .iter()
                        .map(|&f| b.names.get(f))
                        .collect();
                    small.push((names.join(";"), s.count));
                }
                _ => u2000 += s.count,
            }
        }
        small.sort();
        (u1000, u2000, small)
    }

    #[test]
    fn an_hour_within_its_budget_is_left_alone_and_not_measured() {
        let b = hour(12);
        let (same, drops) = apply(b, 1 << 20, 1 << 20, 25, |_| panic!("measured"));
        assert!(drops.is_empty());
        assert_eq!(same.members().len(), 12);
    }

    #[test]
    fn the_big_uid_loses_its_rare_stacks_and_the_small_one_keeps_its_hour() {
        let b = hour(12);
        let file = file_bytes(&b).unwrap();
        let (before_1000, before_2000, before_small) = by_uid(&b);
        // A quarter of what the hour takes: uid 1000's part is far under its equal half.
        let budget = file / 4;
        let (kept, drops) = apply(b, budget, file * 2, 25, file_bytes);
        let (after_1000, after_2000, after_small) = by_uid(&kept);
        assert_eq!((after_1000, after_small), (before_1000, before_small));
        assert_eq!(drops.len(), 1, "{drops:?}");
        let d = drops[0];
        assert_eq!(d.uid, Some(2000));
        assert_eq!(after_2000 + d.samples, before_2000);
        // Its hot stack (50 a slice) stays; rare ones go first.
        assert!(after_2000 >= 12 * 50, "{after_2000}");
        let written = file_bytes(&kept).unwrap();
        assert!(
            written <= budget + budget / 10,
            "{written} bytes for a budget of {budget} (was {file})"
        );
        // Every member kept, counts per member intact for the stacks kept.
        assert_eq!(kept.members().len(), 12);
        let (starts, pairs) = kept.member_counts();
        for (i, s) in kept.stacks.iter().enumerate() {
            let these = &pairs[starts[i] as usize..starts[i + 1] as usize];
            assert_eq!(these.iter().map(|p| u64::from(p.1)).sum::<u64>(), s.count);
            assert_eq!(s.cpu_ns, s.count * 10_010_010);
        }
    }

    /// As in a slice: uid 2000's stacks seen by admins only (a not dumpable or set-uid
    /// program) are charged to uid 2000, not to the part of processes nobody may trace, where
    /// another process's one-sample stacks (its real uid not known) keep their hour.
    #[test]
    fn a_process_withheld_from_its_user_is_charged_to_its_real_uid() {
        const UNKNOWN_UID: u32 = u32::MAX;
        let mut b = RollupBuilder::new(1 << 30);
        for i in 0..12 {
            let mut s = slice(i);
            for st in s.stacks.iter_mut().filter(|st| st.uid == Some(2000)) {
                st.uid = Some(UNKNOWN_UID);
                st.share_uid = Some(2000);
                st.count = st.count.max(2);
                st.cpu_ns = st.count * 10_010_010;
            }
            for k in 0..5 {
                s.stacks.push(SliceStack {
                    frames: vec![0, 1, 2],
                    pid: 5000 + k,
                    tid: 5000 + k,
                    uid: Some(UNKNOWN_UID),
                    count: 1,
                    cpu_ns: 10_010_010,
                    ..SliceStack::default()
                });
            }
            b.fold(&s, (s.start_ns, s.end_ns)).unwrap();
        }
        let file = file_bytes(&b).unwrap();
        let (kept, drops) = apply(b, file / 4, file * 2, 25, file_bytes);
        assert_eq!(
            drops.iter().map(|d| d.uid).collect::<Vec<_>>(),
            [Some(2000)],
            "{drops:?}"
        );
        let threads = kept.threads.items();
        let others: u64 = kept
            .stacks
            .iter()
            .filter(|s| threads[s.thread as usize].pid >= 5000)
            .map(|s| s.count)
            .sum();
        assert_eq!(
            others,
            12 * 5,
            "the other process nobody may trace lost stacks"
        );
        // Still admins' only, still charged to uid 2000 once written and read back.
        let mut bytes = Vec::new();
        kept.write_to(&mut bytes).unwrap();
        let read = crate::slice::Slice::decode(&bytes).unwrap();
        let withheld: Vec<_> = read
            .stacks
            .iter()
            .filter(|s| s.share_uid == Some(2000))
            .collect();
        assert!(!withheld.is_empty());
        assert!(withheld.iter().all(|s| s.uid == Some(UNKNOWN_UID)));
    }
}
