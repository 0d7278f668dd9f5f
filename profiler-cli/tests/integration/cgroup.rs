//! cgroups of a test's own for a daemon under test: memory capped (v1 or v2), CPU time
//! throttled (v1 `cpu` or v2 `cpu.max`). Removed when dropped (the processes in them must have
//! ended by then).

use std::fs;
use std::path::{Path, PathBuf};

/// A v1 or v2 memory cgroup of the test's own, removed when dropped.
pub(crate) struct MemoryCgroup {
    dir: PathBuf,
    v1: bool,
}

impl MemoryCgroup {
    /// A cgroup capped at `bytes` of memory (and no swap).
    pub(crate) fn new(bytes: u64) -> MemoryCgroup {
        let name = format!("profctl-test-{}", std::process::id());
        let v1_root = Path::new("/sys/fs/cgroup/memory");
        let (dir, v1) = if v1_root.join("memory.limit_in_bytes").exists() {
            (v1_root.join(&name), true)
        } else {
            let root = Path::new("/sys/fs/cgroup");
            let _ = fs::write(root.join("cgroup.subtree_control"), "+memory");
            (root.join(&name), false)
        };
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let set = |file: &str, value: String| {
            let path = dir.join(file);
            if path.exists() {
                fs::write(&path, value).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            }
        };
        if v1 {
            set("memory.limit_in_bytes", bytes.to_string());
            set("memory.memsw.limit_in_bytes", bytes.to_string());
        } else {
            set("memory.max", bytes.to_string());
            set("memory.swap.max", "0".into());
        }
        MemoryCgroup { dir, v1 }
    }

    pub(crate) fn add(&self, pid: u32) {
        fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }

    /// OOM kills in the cgroup.
    pub(crate) fn oom_kills(&self) -> u64 {
        let file = if self.v1 {
            "memory.oom_control"
        } else {
            "memory.events"
        };
        fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.dir);
    }
}

/// A v1 or v2 CPU cgroup of the test's own, unthrottled until [`CpuCgroup::limit`].
pub(crate) struct CpuCgroup {
    dir: PathBuf,
    v1: bool,
}

impl CpuCgroup {
    /// A new cgroup with no CPU limit.
    pub(crate) fn new() -> CpuCgroup {
        let name = format!("profctl-test-cpu-{}", std::process::id());
        let v1_root = ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"]
            .into_iter()
            .map(Path::new)
            .find(|root| root.join("cpu.cfs_quota_us").exists());
        let (dir, v1) = match v1_root {
            Some(root) => (root.join(&name), true),
            None => {
                let root = Path::new("/sys/fs/cgroup");
                let _ = fs::write(root.join("cgroup.subtree_control"), "+cpu");
                (root.join(&name), false)
            }
        };
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        CpuCgroup { dir, v1 }
    }

    /// At most `percent` of one CPU (None: no limit), over periods of a second: the kernel
    /// hands a cgroup's quota to each CPU's queue in slices of 5 ms
    /// (`sched_cfs_bandwidth_slice_us`), so a quota under 5 ms a period (2% of the default
    /// 100-ms period) goes to one CPU's queue whole, and the daemon's threads queued on the
    /// other ran not at all for tens of seconds (its status unanswered for 30 s in a test).
    pub(crate) fn limit(&self, percent: Option<u32>) {
        let period = 1_000_000;
        let (file, value) = match (self.v1, percent) {
            (true, Some(p)) => ("cpu.cfs_quota_us", (period * p / 100).to_string()),
            (true, None) => ("cpu.cfs_quota_us", "-1".to_string()),
            (false, Some(p)) => ("cpu.max", format!("{} {period}", period * p / 100)),
            (false, None) => ("cpu.max", format!("max {period}")),
        };
        let path = self.dir.join(file);
        fs::write(&path, value).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// Move `pid` (all its threads) into the cgroup.
    pub(crate) fn add(&self, pid: u32) {
        fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.dir);
    }
}
