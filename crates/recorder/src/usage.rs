//! What profctl itself costs: its own CPU time and scheduling counts, for `-v` summaries and
//! benchmarks (the profiler profiled).

use std::time::Duration;

/// Resources used so far by every thread of this process (not by the commands it runs).
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessUsage {
    /// CPU time in user mode.
    pub user: Duration,
    /// CPU time in the kernel on the process's behalf.
    pub system: Duration,
    /// Times a thread gave up the CPU to wait (epoll, locks, IO).
    pub voluntary_switches: u64,
    /// Times a thread was preempted.
    pub involuntary_switches: u64,
    /// Page faults served without IO.
    pub minor_faults: u64,
}

impl ProcessUsage {
    /// The usage of the whole process at this moment; zero when the kernel refuses (never
    /// expected).
    pub fn now() -> ProcessUsage {
        Self::read(false)
    }

    /// The usage of the calling thread alone at this moment.
    pub fn this_thread() -> ProcessUsage {
        Self::read(true)
    }

    fn read(this_thread_only: bool) -> ProcessUsage {
        let Ok(u) = crate::sys::rusage(this_thread_only) else {
            return ProcessUsage::default();
        };
        let time = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        ProcessUsage {
            user: time(u.ru_utime),
            system: time(u.ru_stime),
            voluntary_switches: u.ru_nvcsw as u64,
            involuntary_switches: u.ru_nivcsw as u64,
            minor_faults: u.ru_minflt as u64,
        }
    }

    /// User plus system time.
    pub fn cpu(&self) -> Duration {
        self.user + self.system
    }
}

/// Return free heap memory to the kernel (after caches were dropped), so that resident memory
/// follows what is held.
pub fn release_free_memory() {
    crate::sys::release_free_memory();
}

/// This process's resident memory in bytes (`VmRSS`), when /proc tells: the second field
/// of `/proc/self/statm`, the same counters as `/proc/self/status` without rendering the
/// rest of it (read after every slice and by every status request).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size())
}

/// The anonymous part of [`resident_bytes`] (`RssAnon`): memory the process holds, without
/// the pages of files it maps (binaries and debug info being read), which the kernel may
/// reclaim.
pub fn anonymous_resident_bytes() -> Option<u64> {
    status_kb("RssAnon:").map(|kb| kb * 1024)
}

fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The system page size in bytes.
pub fn page_size() -> u64 {
    sampler::page_size() as u64
}

/// File descriptors this process has open.
pub fn open_fds() -> Option<usize> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_grows_with_work() {
        let before = ProcessUsage::now();
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(30) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = ProcessUsage::now();
        assert!(after.cpu() >= before.cpu() + Duration::from_millis(10));
    }

    #[test]
    fn resident_bytes_agree_with_vm_rss() {
        // 64 MiB touched: both readings see it, within what the allocator moves meanwhile.
        let held = vec![1u8; 64 << 20];
        let statm = resident_bytes().unwrap();
        let status = status_kb("VmRSS:").unwrap() * 1024;
        std::hint::black_box(&held);
        assert!(statm >= 64 << 20, "{statm}");
        assert!(
            statm.abs_diff(status) < 4 << 20,
            "statm {statm}, status {status}"
        );
    }
}
