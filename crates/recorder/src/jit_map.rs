//! JIT perf maps: `/tmp/perf-PID.map`, written by `node --perf-basic-prof`, the JVM's
//! perf-map-agent and others: one `START SIZE name` line (hex) per compiled function.

use std::path::PathBuf;

/// A process's JIT map, sorted by start address.
#[derive(Debug, Default)]
pub(crate) struct JitMap {
    entries: Vec<(u64, u64, String)>,
}

impl JitMap {
    /// Parse the text of a perf map; malformed lines are skipped.
    pub(crate) fn parse(text: &str) -> JitMap {
        let mut entries: Vec<(u64, u64, String)> = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.splitn(3, ' ');
                let start = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
                let size = u64::from_str_radix(parts.next()?.trim_start_matches("0x"), 16).ok()?;
                let name = parts.next()?.trim();
                (!name.is_empty()).then(|| (start, start.saturating_add(size), name.to_string()))
            })
            .collect();
        // Later lines win for the same start (code regenerated at a reused address).
        entries.reverse();
        entries.sort_by_key(|e| e.0);
        entries.dedup_by_key(|e| e.0);
        JitMap { entries }
    }

    /// Read the map of `pid`, from the process's own /tmp first (it may live in another mount
    /// namespace), then from ours (the process may have exited).
    pub(crate) fn load(pid: u32) -> Option<JitMap> {
        let candidates = [
            PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{pid}.map")),
            PathBuf::from(format!("/tmp/perf-{pid}.map")),
        ];
        let text = candidates
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())?;
        Some(JitMap::parse(&text))
    }

    /// The function containing `addr`.
    pub(crate) fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.entries.partition_point(|e| e.0 <= addr);
        let (_, end, name) = self.entries.get(i.checked_sub(1)?)?;
        (addr < *end).then_some(name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_looks_up() {
        let map = JitMap::parse(
            "7f0000001000 20 LazyCompile:*fib /app/x.js:1\n\
             7f0000002000 10 Builtin:Add\n\
             garbage line\n\
             7f0000001000 40 LazyCompile:*fib2 /app/x.js:9\n",
        );
        assert_eq!(
            map.lookup(0x7f0000001010),
            Some("LazyCompile:*fib2 /app/x.js:9")
        );
        assert_eq!(
            map.lookup(0x7f000000103f),
            Some("LazyCompile:*fib2 /app/x.js:9")
        );
        assert_eq!(map.lookup(0x7f0000001040), None);
        assert_eq!(map.lookup(0x7f0000002005), Some("Builtin:Add"));
        assert_eq!(map.lookup(0x10), None);
    }
}
