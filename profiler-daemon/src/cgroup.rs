//! The cgroup of each sampled process, read once per process on the naming thread, and how
//! cgroup paths nest.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Arc;

use crate::slice::SliceStack;

/// Whether cgroup `path` is `want` or under it (`/a/b` is under `/a`, `/ab` is not).
pub fn in_cgroup(path: &str, want: &str) -> bool {
    let want = want.trim_end_matches('/');
    want.is_empty()
        || path == want
        || path
            .strip_prefix(want)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Longest cgroup path kept (and asked for in a filter) (the kernel allows longer; such a process gets none).
pub const MAX_CGROUP_BYTES: usize = 1024;

/// Processes whose cgroup is remembered; past this the cache is emptied (and read again).
const MAX_CGROUP_ENTRIES: usize = 65_536;

/// Slack allowed between a process's start in /proc (10 ms ticks of the boot-time clock) and
/// its FORK record's time (monotonic), with the two clocks' offset read to 10 ms too.
const START_SLACK_NS: u64 = 50_000_000;

/// The cgroup of each process (pid, start) seen in named slices: read from /proc/PID/cgroup
/// the first time the process is seen, after checking that the pid still belongs to that
/// process (its start time in /proc/PID/stat); a process gone by then has none. Bounded by
/// [`MAX_CGROUP_ENTRIES`]; an entry is released when the recorder reports its process ended.
pub struct CgroupCache {
    known: HashMap<(u32, u64), Option<Arc<str>>>,
    /// Monotonic ns when the cache was made (before sampling began): a process labelled as
    /// running before sampling (start 0) must have started before it.
    began_ns: u64,
    /// Reads of /proc/PID/cgroup (for tests and status).
    pub reads: u64,
}

impl CgroupCache {
    /// An empty cache; `began_ns` is the monotonic time before sampling begins.
    pub fn new(began_ns: u64) -> CgroupCache {
        CgroupCache {
            known: HashMap::new(),
            began_ns,
            reads: 0,
        }
    }

    /// Set the cgroup of every stack of a slice.
    pub fn label(&mut self, stacks: &mut [SliceStack]) {
        if self.known.len() > MAX_CGROUP_ENTRIES {
            self.known.clear();
        }
        // The boot-time clock's lead over the monotonic one (time spent suspended).
        let offset = boot_offset_ns();
        for s in stacks.iter_mut() {
            if s.pid == 0 {
                continue;
            }
            let key = (s.pid, s.process_start);
            let began = self.began_ns;
            let reads = &mut self.reads;
            let cgroup = self
                .known
                .entry(key)
                .or_insert_with(|| {
                    *reads += 1;
                    read_cgroup(key.0, key.1, began, offset)
                })
                .clone();
            s.cgroup = cgroup.map(|c| c.to_string());
        }
    }

    /// Forget processes that ended.
    pub fn forget(&mut self, ended: &[(u32, u64)]) {
        for key in ended {
            self.known.remove(key);
        }
    }

    /// Processes remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.known.len()
    }
}

/// CLOCK_BOOTTIME minus CLOCK_MONOTONIC in ns (from /proc/uptime, to 10 ms), 0 if unknown.
fn boot_offset_ns() -> u64 {
    let mono = sampler::now_ns();
    let Ok(text) = std::fs::read_to_string("/proc/uptime") else {
        return 0;
    };
    let Some(secs) = text
        .split_whitespace()
        .next()
        .and_then(|s| s.parse::<f64>().ok())
    else {
        return 0;
    };
    ((secs * 1e9) as u64).saturating_sub(mono)
}

/// The cgroup of `pid` if it is still the process that started at `start` (monotonic ns; 0:
/// before `began`).
fn read_cgroup(pid: u32, start: u64, began: u64, boot_offset: u64) -> Option<Arc<str>> {
    let stat = read_small(&format!("/proc/{pid}/stat"), 4096)?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
    // /proc reports USER_HZ (100) ticks of the boot-time clock.
    let started = (ticks * 10_000_000).saturating_sub(boot_offset);
    let same = if start == 0 {
        started <= began + START_SLACK_NS
    } else {
        started.abs_diff(start) <= START_SLACK_NS
    };
    if !same {
        return None;
    }
    let text = read_small(&format!("/proc/{pid}/cgroup"), 16 * 1024)?;
    parse_cgroup(&text).map(Arc::from)
}

/// The cgroup v2 path of a /proc/PID/cgroup (`0::/path`), else systemd's v1 hierarchy.
pub fn parse_cgroup(text: &str) -> Option<&str> {
    let mut v1 = None;
    for line in text.lines() {
        if let Some(path) = line.strip_prefix("0::") {
            return Some(path).filter(|p| p.len() <= MAX_CGROUP_BYTES && p.starts_with('/'));
        }
        if let Some((_, path)) = line.split_once(":name=systemd:") {
            v1 = Some(path);
        }
    }
    v1.filter(|p| p.len() <= MAX_CGROUP_BYTES && p.starts_with('/'))
}

/// At most `max` bytes of a /proc file, as text.
fn read_small(path: &str, max: u64) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(max)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_paths_select_themselves_and_below() {
        assert!(in_cgroup("/system.slice/a.service", "/system.slice"));
        assert!(in_cgroup("/system.slice", "/system.slice/"));
        assert!(!in_cgroup("/system.slicex", "/system.slice"));
        assert!(in_cgroup("/anything", "/"));
        assert_eq!(
            parse_cgroup("12:cpu:/x\n1:name=systemd:/user.slice\n0::/system.slice/n.service\n"),
            Some("/system.slice/n.service")
        );
        assert_eq!(
            parse_cgroup("1:name=systemd:/user.slice\n"),
            Some("/user.slice")
        );
        assert_eq!(parse_cgroup("garbage"), None);
    }

    #[test]
    fn this_process_has_its_cgroup_read_and_a_wrong_start_has_none() {
        let mut cache = CgroupCache::new(sampler::now_ns());
        let me = std::process::id();
        let mut stacks = vec![SliceStack {
            pid: me,
            process_start: 0,
            ..Default::default()
        }];
        cache.label(&mut stacks);
        let expect = std::fs::read_to_string(format!("/proc/{me}/cgroup")).unwrap();
        assert_eq!(stacks[0].cgroup.as_deref(), parse_cgroup(&expect));
        // A process said to start in 10 s is not this one (pid reuse).
        let mut stacks = vec![SliceStack {
            pid: me,
            process_start: sampler::now_ns() + 10_000_000_000,
            ..Default::default()
        }];
        cache.label(&mut stacks);
        assert_eq!(stacks[0].cgroup, None);
        assert_eq!(cache.reads, 2);
        cache.forget(&[(me, 0)]);
        assert_eq!(cache.len(), 1);
    }
}
