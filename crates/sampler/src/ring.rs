//! Reading records out of a perf ring buffer: the safe parser half.
//!
//! The kernel writes records into a power-of-two data area and advances `data_head`; we read
//! from `data_tail` up to it and then publish the new tail. A record may straddle the end of the
//! area: its two parts are copied into a scratch buffer so callers always see one slice.
//! Malformed headers (size zero, not a multiple of 8, or larger than what is available) cannot
//! be skipped record by record, since the next record's position is unknown: the rest of the
//! batch is dropped and counted, and reading resumes at `data_head`, where the kernel writes
//! whole records again.

use crate::sys::RingMap;

/// Size of `struct perf_event_header`.
pub const HEADER_SIZE: usize = 8;

/// One record as it sits in the ring buffer, header decoded, body borrowed.
#[derive(Clone, Copy, Debug)]
pub struct RawRecord<'a> {
    /// `perf_event_header.type` (PERF_RECORD_*).
    pub kind: u32,
    /// `perf_event_header.misc` flags.
    pub misc: u16,
    /// The bytes after the header.
    pub body: &'a [u8],
}

/// Counters kept by a ring reader.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Records handed to the caller.
    pub records: u64,
    /// Records reassembled from two parts because they straddled the end of the buffer.
    pub wrapped: u64,
    /// Batches cut short by a malformed header (their remaining bytes were skipped).
    pub malformed: u64,
    /// Bytes skipped because of malformed headers.
    pub skipped_bytes: u64,
}

/// Read every whole record between `tail` and `head` of `data` (a power-of-two ring area),
/// calling `on_record` for each, and return the tail to publish (always `head`).
pub fn read_records(
    data: &[u8],
    tail: u64,
    head: u64,
    scratch: &mut Vec<u8>,
    stats: &mut RingStats,
    on_record: &mut dyn FnMut(RawRecord<'_>),
) -> u64 {
    read_records_guided(data, tail, head, scratch, stats, &mut |record| {
        on_record(record);
        0
    })
}

/// [`read_records`], with `on_record` answering how many bytes of each record, from its
/// start, it read (0: not known): that much of the next record, and a little more, is loaded
/// ahead of time (at most [`PREFETCH_BYTES`]; [`PREFETCH_BYTES`] after an answer of 0). A
/// consumer that unwinds a copied stack reads its first few hundred bytes of 16 KiB:
/// loading the lines it does not read costs as much as those it does.
pub fn read_records_guided(
    data: &[u8],
    tail: u64,
    head: u64,
    scratch: &mut Vec<u8>,
    stats: &mut RingStats,
    on_record: &mut dyn FnMut(RawRecord<'_>) -> usize,
) -> u64 {
    let size = data.len() as u64;
    if size == 0 || !size.is_power_of_two() {
        return head;
    }
    let mask = size - 1;
    if head < tail || head - tail > size {
        stats.malformed += 1;
        stats.skipped_bytes += head.wrapping_sub(tail).min(size);
        return head;
    }
    let mut pos = tail;
    // Ring position up to which lines were prefetched: with small records, the window of one
    // covers the next several, and their lines are not asked for twice.
    let mut prefetched_to = pos;
    // Bytes of the next record to load ahead: as many as the consumer read of the last one.
    let mut ahead = PREFETCH_BYTES;
    while pos < head {
        let available = head - pos;
        let header = match read_wrapped(data, pos & mask, HEADER_SIZE, scratch) {
            Some(bytes) if available >= HEADER_SIZE as u64 => {
                let h: [u8; 8] = bytes.try_into().unwrap_or([0; 8]);
                h
            }
            _ => {
                stats.malformed += 1;
                stats.skipped_bytes += available;
                return head;
            }
        };
        let kind = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]);
        let misc = u16::from_ne_bytes([header[4], header[5]]);
        let record_size = u16::from_ne_bytes([header[6], header[7]]) as u64;
        if record_size < HEADER_SIZE as u64 || record_size % 8 != 0 || record_size > available {
            stats.malformed += 1;
            stats.skipped_bytes += available;
            return head;
        }
        let offset = pos & mask;
        let wrapped = offset + record_size > size;
        let bytes = if wrapped {
            stats.wrapped += 1;
            read_wrapped(data, offset, record_size as usize, scratch).unwrap_or(&[])
        } else {
            &data[offset as usize..(offset + record_size) as usize]
        };
        stats.records += 1;
        prefetched_to = prefetch_next(
            data,
            pos + record_size,
            record_size,
            ahead,
            head,
            prefetched_to,
        );
        let reach = on_record(RawRecord {
            kind,
            misc,
            body: &bytes[HEADER_SIZE..],
        });
        ahead = match reach as u64 {
            0 => PREFETCH_BYTES,
            read => read.saturating_add(REACH_MARGIN).min(PREFETCH_BYTES),
        };
        pos += record_size;
    }
    head
}

/// Most bytes of a record loaded ahead: header, sample fields, registers and the innermost
/// frames of a copied stack.
pub const PREFETCH_BYTES: u64 = 2048;

/// Bytes loaded ahead past what the consumer read of the record before: the next sample's
/// callchain may be longer, or its stack deeper.
const REACH_MARGIN: u64 = 128;

/// Start loading the record at ring position `next` while the one before it is decoded: its
/// first `ahead` bytes (less what was prefetched already, up to `done`) and, guessing it is
/// as long as the one before (samples of one event are), its last line, where a stack copy's
/// `dyn_size` sits. Nothing at or past `head` (not written yet). Returns the new `done`.
fn prefetch_next(
    data: &[u8],
    next: u64,
    guessed_size: u64,
    ahead: u64,
    head: u64,
    done: u64,
) -> u64 {
    const LINE: u64 = 64;
    let mask = data.len() as u64 - 1;
    let end = (next + ahead).min(head);
    let mut line = next.max(done) & !(LINE - 1);
    while line < end {
        crate::sys::prefetch(data, (line & mask) as usize);
        line += LINE;
    }
    let last = next + guessed_size - 8;
    if last >= end && last < head {
        crate::sys::prefetch(data, (last & mask) as usize);
    }
    end.max(done)
}

/// `len` bytes at `offset` of the ring, copied into `scratch` only when they wrap.
fn read_wrapped<'a>(
    data: &'a [u8],
    offset: u64,
    len: usize,
    scratch: &'a mut Vec<u8>,
) -> Option<&'a [u8]> {
    let offset = offset as usize;
    if len > data.len() || offset >= data.len() {
        return None;
    }
    if offset + len <= data.len() {
        return Some(&data[offset..offset + len]);
    }
    let first = data.len() - offset;
    scratch.clear();
    scratch.extend_from_slice(&data[offset..]);
    scratch.extend_from_slice(&data[..len - first]);
    Some(&scratch[..])
}

/// One mapped perf ring buffer: the unsafe map plus the safe reader above.
pub struct RingBuffer {
    map: RingMap,
    scratch: Vec<u8>,
    stats: RingStats,
}

impl RingBuffer {
    pub(crate) fn new(map: RingMap) -> RingBuffer {
        RingBuffer {
            map,
            scratch: Vec::with_capacity(1 << 16),
            stats: RingStats::default(),
        }
    }

    /// Hand every available record to `on_record`, then free their space for the kernel.
    /// Returns the number of records read.
    pub fn drain(&mut self, on_record: &mut dyn FnMut(RawRecord<'_>)) -> u64 {
        self.drain_guided(&mut |record| {
            on_record(record);
            0
        })
    }

    /// [`RingBuffer::drain`], with `on_record` answering how many bytes of each record it
    /// read (see [`read_records_guided`]).
    pub fn drain_guided(&mut self, on_record: &mut dyn FnMut(RawRecord<'_>) -> usize) -> u64 {
        let head = self.map.load_head();
        let tail = self.map.load_tail();
        if head == tail {
            return 0;
        }
        let before = self.stats.records;
        let new_tail = read_records_guided(
            self.map.data(),
            tail,
            head,
            &mut self.scratch,
            &mut self.stats,
            on_record,
        );
        self.map.store_tail(new_tail);
        self.stats.records - before
    }

    /// Counters since the buffer was mapped.
    pub fn stats(&self) -> RingStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build a synthetic ring of `size` bytes holding `records` starting at absolute position
    /// `start`; returns (data, tail, head).
    fn ring_with(size: usize, start: u64, records: &[(u32, Vec<u8>)]) -> (Vec<u8>, u64, u64) {
        let mut data = vec![0xAAu8; size];
        let mut pos = start;
        for (kind, body) in records {
            let total = HEADER_SIZE + body.len();
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&kind.to_ne_bytes());
            bytes.extend_from_slice(&0u16.to_ne_bytes());
            bytes.extend_from_slice(&(total as u16).to_ne_bytes());
            bytes.extend_from_slice(body);
            for b in bytes {
                data[(pos as usize) % size] = b;
                pos += 1;
            }
        }
        (data, start, pos)
    }

    fn collect(data: &[u8], tail: u64, head: u64) -> (Vec<(u32, Vec<u8>)>, RingStats, u64) {
        let mut out = Vec::new();
        let mut stats = RingStats::default();
        let mut scratch = Vec::new();
        let new_tail = read_records(data, tail, head, &mut scratch, &mut stats, &mut |r| {
            out.push((r.kind, r.body.to_vec()))
        });
        (out, stats, new_tail)
    }

    fn body(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| seed.wrapping_add(i as u8)).collect()
    }

    #[test]
    fn record_split_across_the_wrap_point_is_reassembled() {
        let records = vec![(9, body(24, 1)), (10, body(40, 7)), (3, body(16, 90))];
        // In a 128-byte ring starting at 80: the second record (112..160) straddles the end.
        let (data, tail, head) = ring_with(128, 80 + 128 * 3, &records);
        let (out, stats, new_tail) = collect(&data, tail, head);
        assert_eq!(out, records);
        assert_eq!(stats.wrapped, 1);
        assert_eq!(stats.malformed, 0);
        assert_eq!(new_tail, head);
    }

    #[test]
    fn what_the_consumer_read_changes_no_record_handed_on() {
        let records = vec![
            (9, body(24, 1)),
            (10, body(40, 7)),
            (3, body(16, 90)),
            (9, body(200, 4)),
        ];
        // In a 512-byte ring, the last record straddles the end.
        let (data, tail, head) = ring_with(512, 300 + 512 * 2, &records);
        let (plain, _, _) = collect(&data, tail, head);
        assert_eq!(plain, records);
        for answer in [0, 8, 100, 4096, usize::MAX] {
            let mut out = Vec::new();
            let (mut stats, mut scratch) = (RingStats::default(), Vec::new());
            let new_tail =
                read_records_guided(&data, tail, head, &mut scratch, &mut stats, &mut |r| {
                    out.push((r.kind, r.body.to_vec()));
                    answer
                });
            assert_eq!((out, new_tail), (records.clone(), head), "answer {answer}");
            assert_eq!((stats.records, stats.wrapped), (4, 1), "answer {answer}");
        }
    }

    #[test]
    fn buffer_filled_to_the_last_byte() {
        let records = vec![(9, body(56, 3)), (9, body(56, 4)), (9, body(120, 5))];
        let (data, tail, head) = ring_with(256, 0, &records);
        assert_eq!(head - tail, 256, "the ring is exactly full");
        let (out, stats, _) = collect(&data, tail, head);
        assert_eq!(out, records);
        assert_eq!(stats.records, 3);
        assert_eq!(stats.malformed, 0);
    }

    #[test]
    fn full_buffer_wrapped_many_times() {
        let records: Vec<_> = (0..8).map(|i| (9, body(24, i))).collect();
        let (data, tail, head) = ring_with(256, (1 << 40) + 200, &records);
        let (out, _, _) = collect(&data, tail, head);
        assert_eq!(out, records);
    }

    #[test]
    fn zero_sized_header_is_skipped_without_panic() {
        let (mut data, tail, head) = ring_with(128, 0, &[(9, body(8, 0)), (9, body(8, 0))]);
        data[16 + 6] = 0; // size of the second record: 0
        data[16 + 7] = 0;
        let (out, stats, new_tail) = collect(&data, tail, head);
        assert_eq!(out.len(), 1);
        assert_eq!(stats.malformed, 1);
        assert_eq!(new_tail, head, "reading resumes at head");
    }

    #[test]
    fn header_larger_than_available_is_skipped() {
        let (mut data, tail, head) = ring_with(128, 0, &[(9, body(8, 0))]);
        data[6..8].copy_from_slice(&200u16.to_ne_bytes());
        let (out, stats, _) = collect(&data, tail, head);
        assert!(out.is_empty());
        assert_eq!(stats.malformed, 1);
        assert_eq!(stats.skipped_bytes, 16);
    }

    #[test]
    fn unaligned_size_and_partial_header_are_skipped() {
        let (mut data, tail, head) = ring_with(128, 0, &[(9, body(8, 0))]);
        data[6..8].copy_from_slice(&13u16.to_ne_bytes());
        assert_eq!(collect(&data, tail, head).1.malformed, 1);
        let (data, tail, _) = ring_with(128, 0, &[(9, body(8, 0))]);
        assert_eq!(
            collect(&data, tail, tail + 4).1.malformed,
            1,
            "4 bytes cannot hold a header"
        );
    }

    #[test]
    fn head_behind_tail_or_beyond_the_size_is_rejected() {
        let data = vec![0u8; 64];
        assert_eq!(collect(&data, 100, 50).1.malformed, 1);
        assert_eq!(collect(&data, 0, 1000).1.malformed, 1);
        assert_eq!(collect(&data, 8, 8).1, RingStats::default());
    }

    #[test]
    fn garbage_never_panics() {
        // A deterministic pseudo-random fill, read at many offsets.
        let mut x: u64 = 0x9E3779B97F4A7C15;
        let data: Vec<u8> = (0..512)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for tail in 0..64u64 {
            for len in [0u64, 8, 17, 256, 512] {
                let _ = collect(&data, tail * 8, tail * 8 + len);
            }
        }
    }
}
