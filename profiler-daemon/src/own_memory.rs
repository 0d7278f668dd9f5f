//! The daemon's own memory as the budget reads it every tick: from `/proc/self/statm` and
//! `/proc/self/status` held open and read again in place (a `pread` each, no path walk, no
//! open or close), the status (whose rendering costs most) only every few ticks.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Ticks between two readings of the pinned memory from `/proc/self/status`: it changes only
/// when ring buffers are mapped or unmapped (at start, on CPU hotplug, for an on-demand
/// recording), and lags by at most this many ticks.
const PINNED_EVERY: u64 = 6;

/// Most bytes of a /proc file read (statm is one line; status some 1.5 KiB).
const MAX_PROC_FILE: usize = 8192;

/// Reads resident and pinned memory of this process; see [`OwnMemory::read`].
#[derive(Debug)]
pub struct OwnMemory {
    statm: Option<File>,
    status: Option<File>,
    page_size: u64,
    /// VmPin + VmLck at the last reading of the status, bytes.
    pinned: u64,
    reads: u64,
    buf: Vec<u8>,
}

impl OwnMemory {
    /// Open the files (a file that cannot be opened reads as 0).
    pub fn open() -> OwnMemory {
        OwnMemory {
            statm: File::open("/proc/self/statm").ok(),
            status: File::open("/proc/self/status").ok(),
            page_size: recorder::page_size(),
            pinned: 0,
            reads: 0,
            buf: vec![0; MAX_PROC_FILE],
        }
    }

    /// Resident and pinned memory of this process: (VmRSS + VmPin + VmLck, VmPin + VmLck).
    ///
    /// The ring buffers are pinned, not resident: VmPin counts the part past the user's
    /// `perf_event_mlock_kb` allowance (516 KiB per CPU by default), which is charged to the
    /// user rather than to the process; VmLck counts locked memory. The pinned part is read
    /// at the first call and every [`PINNED_EVERY`] calls.
    pub fn read(&mut self) -> (u64, u64) {
        if self.reads % PINNED_EVERY == 0 {
            if let Some(status) = read_in_place(self.status.as_ref(), &mut self.buf) {
                self.pinned = status_kb(status, "VmPin:") + status_kb(status, "VmLck:");
                self.pinned *= 1024;
            }
        }
        self.reads += 1;
        let resident = read_in_place(self.statm.as_ref(), &mut self.buf)
            .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
            * self.page_size;
        (resident + self.pinned, self.pinned)
    }
}

/// The text of `file` read from its start into `buf`.
fn read_in_place<'b>(file: Option<&File>, buf: &'b mut [u8]) -> Option<&'b str> {
    let n = file?.read_at(buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()
}

/// A `Field:   N kB` line of a status file, in kB (0 when absent).
fn status_kb(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_again_in_place_follows_the_resident_memory() {
        let mut memory = OwnMemory::open();
        let (before, pinned) = memory.read();
        assert!(before > 0);
        let held = vec![1u8; 64 << 20];
        let (after, pinned_after) = memory.read();
        std::hint::black_box(&held);
        assert!(after >= before + (60 << 20), "{before} -> {after}");
        assert_eq!(pinned, pinned_after);
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let rss = status_kb(&status, "VmRSS:") * 1024;
        assert!(rss.abs_diff(after - pinned) < 4 << 20, "{rss} {after}");
    }

    #[test]
    fn status_fields_in_kb() {
        let status = "Name:\tx\nVmPin:\t  12 kB\nVmLck:\t       0 kB\n";
        assert_eq!(status_kb(status, "VmPin:"), 12);
        assert_eq!(status_kb(status, "VmLck:"), 0);
        assert_eq!(status_kb(status, "VmRSS:"), 0);
    }
}
