//! Each CPU stack's samples per second of its slice: what lets the timeline tell the second
//! a burst was in although a slice lasts ten, and the form slices, roll-ups and open slices
//! keep them in.
//!
//! The seconds are those of the wall clock (UNIX time): second 0 of a slice is the whole UNIX
//! second its start falls in (so a slice of 10 s that does not start on a second spans 11 of
//! them), and the recorder counts samples on the same grid (`profile::WindowSeconds`). In a
//! roll-up, a stack's seconds are numbered across its members, member after member (member
//! `m`'s second `k` is `base(m) + k`, `base` the seconds of the members before it:
//! [`member_seconds`]), so that one list per stack holds its hour.
//!
//! Stored as pairs of varints (the gap in seconds from the previous pair, from 0 for the
//! first; the count), in a length-delimited field of each pprof sample (101, which pprof
//! tools skip), and kept so as read (a shared buffer, no allocation per stack), since only the
//! timeline reads them. A stack without them (off-CPU stacks, slices written before they were
//! kept) is spread evenly over its slice, whose span is then the resolution.

use prost::bytes::Bytes;
use prost::encoding::{decode_varint, encode_varint};

/// Nanoseconds a second.
pub const NANOS: u64 = 1_000_000_000;

/// One stack's samples per second, packed (see the module's documentation); empty when not
/// known.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SecondCounts(pub Bytes);

impl SecondCounts {
    /// `(second, count)` pairs, seconds ascending, each once, counts above 0, packed.
    pub fn encode(pairs: impl IntoIterator<Item = (u32, u64)>) -> SecondCounts {
        let mut out = Vec::new();
        let mut prev = 0u32;
        for (second, count) in pairs {
            debug_assert!(out.is_empty() || second > prev, "seconds out of order");
            debug_assert!(count > 0);
            encode_varint(u64::from(second - prev), &mut out);
            encode_varint(count, &mut out);
            prev = second;
        }
        SecondCounts(Bytes::from(out))
    }

    /// Whether no second is known.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `(second, count)` pairs (a malformed tail ends them: [`SecondCounts::check`]
    /// tells).
    pub fn iter(&self) -> SecondIter<'_> {
        SecondIter {
            rest: &self.0,
            second: 0,
        }
    }

    /// Whether the counts are well formed (seconds ascending, counts above 0) and add up to
    /// `total`.
    pub fn check(&self, total: u64) -> bool {
        let mut rest: &[u8] = &self.0;
        let (mut second, mut sum, mut first) = (0u64, 0u64, true);
        while !rest.is_empty() {
            let (Ok(gap), Ok(count)) = (decode_varint(&mut rest), decode_varint(&mut rest)) else {
                return false;
            };
            if (gap == 0 && !first) || count == 0 {
                return false;
            }
            first = false;
            second = second.saturating_add(gap);
            sum = sum.saturating_add(count);
            if second > u64::from(u32::MAX) {
                return false;
            }
        }
        sum == total
    }

    /// Bytes held.
    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// The pairs of a [`SecondCounts`].
pub struct SecondIter<'a> {
    rest: &'a [u8],
    second: u64,
}

impl Iterator for SecondIter<'_> {
    type Item = (u32, u64);

    fn next(&mut self) -> Option<(u32, u64)> {
        if self.rest.is_empty() {
            return None;
        }
        let gap = decode_varint(&mut self.rest).ok()?;
        let count = decode_varint(&mut self.rest).ok()?;
        self.second = self.second.saturating_add(gap);
        Some((u32::try_from(self.second).ok()?, count))
    }
}

/// The first wall-clock second of a slice starting at `start_ns` (UNIX ns): its second 0.
pub fn first_second(start_ns: u64) -> u64 {
    start_ns / NANOS * NANOS
}

/// How many wall-clock seconds a slice of `(start_ns, end_ns)` touches (at least one).
pub fn seconds_in((start_ns, end_ns): (u64, u64)) -> u64 {
    end_ns
        .div_ceil(NANOS)
        .saturating_sub(start_ns / NANOS)
        .max(1)
}

/// Where each member's seconds start in a roll-up's numbering (`members` oldest first), and
/// one past the last: `bases[m]..bases[m + 1]` are member `m`'s.
pub fn member_seconds(members: &[(u64, u64)]) -> Vec<u64> {
    let mut bases = Vec::with_capacity(members.len() + 1);
    let mut at = 0u64;
    bases.push(0);
    for &span in members {
        at = at.saturating_add(seconds_in(span));
        bases.push(at);
    }
    bases
}

/// Second `k` of a slice spanning `span` (UNIX ns): the part of the wall-clock second it is
/// that the slice covers, `(from, to)`.
pub fn second_span(span: (u64, u64), k: u64) -> (u64, u64) {
    let from = first_second(span.0).saturating_add(k.saturating_mul(NANOS));
    (
        from.max(span.0),
        from.saturating_add(NANOS).min(span.1).max(from.max(span.0)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_round_trip_and_bad_ones_are_told() {
        let pairs = [(0u32, 3u64), (1, 200), (9, 1), (300, 70_000)];
        let c = SecondCounts::encode(pairs);
        assert_eq!(c.iter().collect::<Vec<_>>(), pairs);
        assert!(c.check(70_204));
        assert!(!c.check(70_203));
        assert!(SecondCounts::default().check(0));
        // Truncated, a second twice, a zero count.
        let cut = SecondCounts(c.0.slice(..c.len() - 1));
        assert!(!cut.check(70_204));
        assert!(!SecondCounts(Bytes::from_static(&[0, 1, 0, 1])).check(2));
        assert!(!SecondCounts(Bytes::from_static(&[0, 0])).check(0));
    }

    #[test]
    fn seconds_of_slices_and_members() {
        const S: u64 = NANOS;
        // A 10-s slice from 100.3 s touches the seconds 100 to 110.
        let span = (100 * S + 300_000_000, 110 * S + 300_000_000);
        assert_eq!(seconds_in(span), 11);
        assert_eq!(seconds_in((100 * S, 110 * S)), 10);
        assert_eq!(second_span(span, 0), (span.0, 101 * S));
        assert_eq!(second_span(span, 5), (105 * S, 106 * S));
        assert_eq!(second_span(span, 10), (110 * S, span.1));
        let next = (span.1, span.1 + 10 * S);
        assert_eq!(member_seconds(&[span, next]), [0, 11, 22]);
    }
}
