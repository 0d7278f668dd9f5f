//! What this machine and kernel allow: online CPUs, the event picked automatically,
//! `perf_event_paranoid`, the highest sampling rate, and whether this process is privileged.

use std::collections::BTreeSet;
use std::io;

use crate::event::{cycles_available, EventKind};
#[cfg(doc)]
use crate::EventChoice;

/// The kernel's list of online CPUs.
const ONLINE_CPUS: &str = "/sys/devices/system/cpu/online";

/// CPUs the kernel reports online (`/sys/devices/system/cpu/online`, e.g. "0-3,6").
pub fn online_cpus() -> io::Result<Vec<u32>> {
    parse_online(&std::fs::read_to_string(ONLINE_CPUS)?)
}

/// The online CPUs' list held open, for a check every few seconds: each [`OnlineCpus::read`]
/// is one read at offset 0 (sysfs makes the text anew for it), no path lookup.
pub(crate) struct OnlineCpus {
    file: std::fs::File,
}

impl OnlineCpus {
    /// Open the list.
    pub(crate) fn open() -> io::Result<OnlineCpus> {
        Ok(OnlineCpus {
            file: std::fs::File::open(ONLINE_CPUS)?,
        })
    }

    /// The CPUs online now.
    pub(crate) fn read(&self) -> io::Result<Vec<u32>> {
        use std::os::unix::fs::FileExt;
        // sysfs writes at most a page of text for an attribute.
        let mut buf = [0u8; 8192];
        let n = self.file.read_at(&mut buf, 0)?;
        parse_online(&String::from_utf8_lossy(&buf[..n]))
    }
}

/// `text` of the online CPUs' list as CPUs.
fn parse_online(text: &str) -> io::Result<Vec<u32>> {
    parse_cpu_list(text.trim())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("bad cpu list {text:?}")))
}

/// Parse a kernel CPU list ("0-3,5,7-8"): ascending, without duplicates; None when malformed.
fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = BTreeSet::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?);
                if a > b {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => {
                cpus.insert(part.parse().ok()?);
            }
        }
    }
    Some(cpus.into_iter().collect())
}

/// The event [`EventChoice::Auto`] picks on this machine: hardware cycles when a counting
/// probe of them opens, else the software cpu-clock (for a caller that must say which before
/// it opens a session, such as the daemon's status).
pub fn auto_event() -> EventKind {
    match cycles_available() {
        Ok(()) => EventKind::Cycles,
        Err(_) => EventKind::CpuClock,
    }
}

/// The kernel's perf_event_paranoid level.
pub fn paranoid_level() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The highest sampling frequency the kernel currently allows.
pub fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether this process may sample the whole system (root, CAP_PERFMON or CAP_SYS_ADMIN).
pub fn is_privileged() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    const CAP_PERFMON: u32 = 38;
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    effective & (1 << CAP_SYS_ADMIN) != 0 || effective & (1 << CAP_PERFMON) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_held_list_reads_again_what_the_path_gives() {
        let held = OnlineCpus::open().unwrap();
        let by_path = online_cpus().unwrap();
        assert!(!by_path.is_empty());
        assert_eq!(held.read().unwrap(), by_path);
        assert_eq!(held.read().unwrap(), by_path, "read again from its start");
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("0-3,5,7-8"), Some(vec![0, 1, 2, 3, 5, 7, 8]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(
            parse_cpu_list("5,0-1,1"),
            Some(vec![0, 1, 5]),
            "sorted, once each"
        );
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("x"), None);
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("0-"), None);
        assert_eq!(parse_cpu_list("1,,2"), Some(vec![1, 2]));
    }
}
