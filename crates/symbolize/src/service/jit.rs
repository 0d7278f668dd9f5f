//! JIT perf maps: `/tmp/perf-PID.map`, written by `node --perf-basic-prof`, the JVM's
//! perf-map-agent and others: one `START SIZE name` line (hex) per compiled function.
//!
//! A map is held per process, keyed by (pid, process start) so a reused pid never sees the
//! map of the process that had it before. An address the map does not know makes the file be
//! looked at again (at most once per window per process, never per address) and read again
//! when it changed (device, inode, size or modification time), since JITs keep appending.
//!
//! The file is chosen by the profiled process's user while the profiler runs as root, so it
//! is opened without following a final symlink and without blocking (a FIFO there must not
//! hang naming), read only when it is a regular file owned by the process's user or by root
//! (as perf does), and refused when larger than a bound or with too many entries.

use std::fs::{File, Metadata};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use profile::ThreadLabels;
use tracing::{debug, warn};

use super::lru::Lru;
use super::stats::UserSymbolStats;

/// Why a JIT map was not read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JitMapError {
    /// It could not be opened or read.
    #[error("cannot read the JIT map {}: {source}", path.display())]
    Io {
        /// The map's path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// It is a FIFO, a device, a directory or a symlink.
    #[error("the JIT map {} is not a regular file; ignored", path.display())]
    NotRegular {
        /// The map's path.
        path: PathBuf,
    },
    /// Someone other than the process's user owns it (root may, if anyone may read it).
    #[error("the JIT map {} belongs to uid {owner}, not to the process's user ({}), nor to root and readable by all; ignored", path.display(), expected.map_or_else(|| "unknown".to_string(), |u| u.to_string()))]
    Owner {
        /// The map's path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The process's uid, when known.
        expected: Option<u32>,
    },
    /// It is larger than the bound.
    #[error("the JIT map {} is {size} bytes, more than the {max} a map may have; ignored", path.display())]
    TooLarge {
        /// The map's path.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The bound.
        max: u64,
    },
    /// It has more entries than the bound.
    #[error("the JIT map {} has more than {max} entries; ignored", path.display())]
    TooManyEntries {
        /// The map's path.
        path: PathBuf,
        /// The bound.
        max: usize,
    },
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    start: u64,
    end: u64,
    name: u32,
    len: u32,
}

/// A process's JIT map, sorted by start address, names in one arena.
#[derive(Debug, Default)]
pub(crate) struct JitMap {
    entries: Vec<Entry>,
    names: String,
}

impl JitMap {
    /// Parse a perf map; malformed lines are skipped. None when it has more than
    /// `max_entries` entries.
    pub(crate) fn parse(
        mut input: impl BufRead,
        max_entries: usize,
    ) -> std::io::Result<Option<JitMap>> {
        let mut map = JitMap::default();
        let mut line = Vec::new();
        loop {
            line.clear();
            if input.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            let text = String::from_utf8_lossy(&line);
            let mut parts = text.trim_end_matches(['\n', '\r']).splitn(3, ' ');
            let hex = |s: Option<&str>| u64::from_str_radix(s?.trim_start_matches("0x"), 16).ok();
            let (Some(start), Some(size)) = (hex(parts.next()), hex(parts.next())) else {
                continue;
            };
            let name = parts.next().unwrap_or("").trim();
            if name.is_empty() || map.names.len() + name.len() > u32::MAX as usize {
                continue;
            }
            if map.entries.len() == max_entries {
                return Ok(None);
            }
            map.entries.push(Entry {
                start,
                end: start.saturating_add(size),
                name: map.names.len() as u32,
                len: name.len() as u32,
            });
            map.names.push_str(name);
        }
        // Later lines win for the same start (code regenerated at a reused address).
        map.entries.reverse();
        map.entries.sort_by_key(|e| e.start);
        map.entries.dedup_by_key(|e| e.start);
        map.entries.shrink_to_fit();
        map.names.shrink_to_fit();
        Ok(Some(map))
    }

    /// The function containing `addr`.
    pub(crate) fn lookup(&self, addr: u64) -> Option<&str> {
        let i = self.entries.partition_point(|e| e.start <= addr);
        let e = self.entries.get(i.checked_sub(1)?)?;
        (addr < e.end).then(|| &self.names[e.name as usize..(e.name + e.len) as usize])
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> u64 {
        (self.names.capacity() + self.entries.capacity() * std::mem::size_of::<Entry>()) as u64
    }
}

/// What identifies a version of a map file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl Stamp {
    fn of(meta: &Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
        }
    }
}

/// One process's map, and when its file was last looked at.
struct Held {
    map: Option<JitMap>,
    /// The version of the file `map` was read from (or refused at).
    stamp: Option<Stamp>,
    /// The window in which the file was last looked at.
    checked: u64,
    /// Whether a failure to open the file was reported (once per process; later ones go to
    /// the debug log).
    warned: bool,
}

/// Bytes counted for a process without a map.
const HELD_OVERHEAD: u64 = 64;

/// Where a process's map may be: paths to try in order.
pub(crate) type Locate = Box<dyn Fn(u32) -> Vec<PathBuf> + Send>;

/// perf's places: the process's own /tmp first (it may live in another mount namespace),
/// then ours (the process may have exited).
fn perf_map_paths(pid: u32) -> Vec<PathBuf> {
    vec![
        PathBuf::from(format!("/proc/{pid}/root/tmp/perf-{pid}.map")),
        PathBuf::from(format!("/tmp/perf-{pid}.map")),
    ]
}

/// The JIT maps of processes, bounded by count and bytes (least recently used dropped).
pub(crate) struct JitMaps {
    maps: Lru<(u32, u64), Held>,
    max_file_bytes: u64,
    max_entries: usize,
    locate: Locate,
}

impl JitMaps {
    /// Maps of at most `max_maps` processes and `max_bytes` in all; a file over
    /// `max_file_bytes` or `max_entries` is refused.
    pub(crate) fn new(
        max_maps: usize,
        max_bytes: u64,
        max_file_bytes: u64,
        max_entries: usize,
    ) -> JitMaps {
        JitMaps {
            maps: Lru::new(max_maps, max_bytes),
            max_file_bytes,
            max_entries,
            locate: Box::new(perf_map_paths),
        }
    }

    /// Look for maps at `locate(pid)` instead of perf's places (tests).
    #[cfg(test)]
    pub(crate) fn set_locate(&mut self, locate: Locate) {
        self.locate = locate;
    }

    /// The JIT function containing `addr` in `thread`'s process, during `window`.
    pub(crate) fn lookup(
        &mut self,
        thread: &ThreadLabels,
        addr: u64,
        window: u64,
        stats: &mut UserSymbolStats,
    ) -> Option<&str> {
        let key = (thread.pid, thread.process_start);
        let look = match self.maps.get(&key) {
            Some(held) if held.map.as_ref().is_some_and(|m| m.lookup(addr).is_some()) => false,
            Some(held) => held.checked != window,
            None => true,
        };
        if look {
            self.refresh(thread, window, stats);
        }
        self.maps.peek(&key)?.map.as_ref()?.lookup(addr)
    }

    /// Look at the file of `thread`'s process and read it if it changed.
    fn refresh(&mut self, thread: &ThreadLabels, window: u64, stats: &mut UserSymbolStats) {
        let key = (thread.pid, thread.process_start);
        let mut held = self.maps.remove(&key).unwrap_or(Held {
            map: None,
            stamp: None,
            checked: window,
            warned: false,
        });
        held.checked = window;
        match self.open(thread.pid) {
            Ok(None) => {}
            Ok(Some((path, file, meta))) => {
                let stamp = Stamp::of(&meta);
                if held.stamp != Some(stamp) {
                    held.stamp = Some(stamp);
                    match self.read(&path, file, &meta, thread) {
                        Ok(map) => {
                            debug!(path = %path.display(), entries = map.entries.len(), "JIT map read");
                            stats.jit_loads += 1;
                            held.map = Some(map);
                        }
                        Err(err) => {
                            warn!("{err}");
                            stats.jit_refused += 1;
                            held.map = None;
                        }
                    }
                }
            }
            Err(err) => {
                // Not a file we may read (a symlink, unreadable): forget what it held.
                if held.warned {
                    debug!("{err}");
                } else {
                    warn!("{err}");
                    held.warned = true;
                }
                held.map = None;
                held.stamp = None;
                stats.jit_refused += 1;
            }
        }
        let weight = HELD_OVERHEAD + held.map.as_ref().map_or(0, JitMap::bytes);
        self.maps.insert(key, held, weight);
    }

    /// The first map file of `pid` that exists, opened without following a final symlink and
    /// without blocking, with its metadata; None when there is none.
    fn open(&self, pid: u32) -> Result<Option<(PathBuf, File, Metadata)>, JitMapError> {
        for path in (self.locate)(pid) {
            let opened = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY)
                .open(&path);
            let file = match opened {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                    return Err(JitMapError::NotRegular { path })
                }
                Err(source) => return Err(JitMapError::Io { path, source }),
            };
            let meta = match file.metadata() {
                Ok(m) => m,
                Err(source) => return Err(JitMapError::Io { path, source }),
            };
            return Ok(Some((path, file, meta)));
        }
        Ok(None)
    }

    /// Read an opened map file, if it is one we may read.
    fn read(
        &self,
        path: &Path,
        file: File,
        meta: &Metadata,
        thread: &ThreadLabels,
    ) -> Result<JitMap, JitMapError> {
        if !meta.is_file() {
            return Err(JitMapError::NotRegular {
                path: path.to_owned(),
            });
        }
        let expected = thread.uid.or_else(|| process_uid(thread.pid));
        let owner = meta.uid();
        // The process's own file; or root's, when the process is root's or anyone may read it
        // (a hard link to a root-only file must not put its lines in the profile: the map is
        // read with the process's access, as perf does when run by that user).
        let world_readable = meta.mode() & 0o004 != 0;
        let allowed =
            Some(owner) == expected || (owner == 0 && (expected == Some(0) || world_readable));
        if !allowed {
            return Err(JitMapError::Owner {
                path: path.to_owned(),
                owner,
                expected,
            });
        }
        let too_large = |size| JitMapError::TooLarge {
            path: path.to_owned(),
            size,
            max: self.max_file_bytes,
        };
        if meta.size() > self.max_file_bytes {
            return Err(too_large(meta.size()));
        }
        // The file may grow while it is read: read no more than the bound allows.
        let mut limited = BufReader::new(file.take(self.max_file_bytes + 1));
        let io = |source| JitMapError::Io {
            path: path.to_owned(),
            source,
        };
        let map = JitMap::parse(&mut limited, self.max_entries).map_err(io)?;
        if limited.into_inner().limit() == 0 {
            return Err(too_large(self.max_file_bytes + 1));
        }
        map.ok_or_else(|| JitMapError::TooManyEntries {
            path: path.to_owned(),
            max: self.max_entries,
        })
    }

    /// Forget the map of the process (`pid`, `process_start`).
    pub(crate) fn evict(&mut self, pid: u32, process_start: u64) -> bool {
        self.maps.remove(&(pid, process_start)).is_some()
    }

    /// Forget every map.
    pub(crate) fn clear(&mut self) {
        self.maps.clear();
    }

    /// Processes whose map is held, and the bytes held.
    pub(crate) fn sizes(&self) -> (usize, u64) {
        let maps = self.maps.values().filter(|h| h.map.is_some()).count();
        (maps, self.maps.weight())
    }
}

/// The uid of a live process (the owner of its /proc directory).
fn process_uid(pid: u32) -> Option<u32> {
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn parses_and_looks_up() {
        let text = "7f0000001000 20 LazyCompile:*fib /app/x.js:1\n\
                    7f0000002000 10 Builtin:Add\n\
                    garbage line\n\
                    7f0000001000 40 LazyCompile:*fib2 /app/x.js:9\n";
        let map = JitMap::parse(text.as_bytes(), 100).unwrap().unwrap();
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
        assert!(JitMap::parse(text.as_bytes(), 2).unwrap().is_none());
    }

    /// Maps of a test: `dir/perf-PID.map`.
    fn maps_in(dir: &Path, limits: (u64, usize)) -> JitMaps {
        let mut maps = JitMaps::new(16, 1 << 30, limits.0, limits.1);
        let dir = dir.to_owned();
        maps.set_locate(Box::new(move |pid| {
            vec![dir.join(format!("perf-{pid}.map"))]
        }));
        maps
    }

    fn thread(pid: u32, process_start: u64) -> ThreadLabels {
        ThreadLabels {
            pid,
            process_start,
            ..ThreadLabels::default()
        }
    }

    fn append(path: &Path, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn a_growing_map_is_read_again_once_per_window() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf-7.map");
        append(&path, "1000 10 first\n");
        let mut maps = maps_in(dir.path(), (1 << 20, 1000));
        let mut stats = UserSymbolStats::default();
        let t = thread(7, 0);
        assert_eq!(maps.lookup(&t, 0x1004, 1, &mut stats), Some("first"));
        assert_eq!(maps.lookup(&t, 0x2004, 1, &mut stats), None);
        append(&path, "2000 10 second\n");
        // Within the window the file is not looked at again.
        assert_eq!(maps.lookup(&t, 0x2004, 1, &mut stats), None);
        assert_eq!(stats.jit_loads, 1);
        // The next window's miss reads it again and finds the new function.
        assert_eq!(maps.lookup(&t, 0x2004, 2, &mut stats), Some("second"));
        assert_eq!(maps.lookup(&t, 0x1004, 2, &mut stats), Some("first"));
        assert_eq!(stats.jit_loads, 2);
        // Unchanged: a miss in a later window looks at the file but does not read it.
        assert_eq!(maps.lookup(&t, 0x3004, 3, &mut stats), None);
        assert_eq!(stats.jit_loads, 2);
    }

    #[test]
    fn a_reused_pid_does_not_get_the_old_process_map() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf-9.map");
        append(&path, "1000 10 old_process_fn\n");
        let mut maps = maps_in(dir.path(), (1 << 20, 1000));
        let mut stats = UserSymbolStats::default();
        let old = thread(9, 100);
        assert_eq!(
            maps.lookup(&old, 0x1004, 1, &mut stats),
            Some("old_process_fn")
        );
        // The pid is reused by a new process, which writes its own map.
        std::fs::write(&path, "5000 10 new_process_fn\n").unwrap();
        let new = thread(9, 200);
        assert_eq!(
            maps.lookup(&new, 0x5004, 1, &mut stats),
            Some("new_process_fn")
        );
        assert_eq!(maps.lookup(&new, 0x1004, 1, &mut stats), None);
        // Dropping the old process leaves the new one's map.
        assert!(maps.evict(9, 100));
        assert_eq!(maps.sizes().0, 1);
        assert_eq!(
            maps.lookup(&new, 0x5004, 1, &mut stats),
            Some("new_process_fn")
        );
    }

    #[test]
    fn an_oversized_map_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut stats = UserSymbolStats::default();
        let big = dir.path().join("perf-11.map");
        let mut text = String::new();
        for i in 0..20 {
            text.push_str(&format!("{:x} 10 function_number_{i}\n", 0x1000 + i * 0x10));
        }
        append(&big, &text);
        let mut maps = maps_in(dir.path(), (text.len() as u64 - 1, 1000));
        assert_eq!(maps.lookup(&thread(11, 0), 0x1004, 1, &mut stats), None);
        assert_eq!((stats.jit_refused, stats.jit_loads), (1, 0));
        // Under the byte bound but over the entry bound: refused too.
        let mut maps = maps_in(dir.path(), (1 << 20, 19));
        assert_eq!(maps.lookup(&thread(11, 0), 0x1004, 1, &mut stats), None);
        assert_eq!((stats.jit_refused, stats.jit_loads), (2, 0));
        // Within both bounds: read.
        let mut maps = maps_in(dir.path(), (text.len() as u64, 20));
        assert_eq!(
            maps.lookup(&thread(11, 0), 0x1004, 1, &mut stats),
            Some("function_number_0")
        );
        // Refused once, not again while the file is unchanged.
        let mut maps = maps_in(dir.path(), (10, 1000));
        let t = thread(11, 0);
        maps.lookup(&t, 0x1004, 1, &mut stats);
        maps.lookup(&t, 0x1004, 2, &mut stats);
        assert_eq!(stats.jit_refused, 3);
    }

    #[test]
    fn a_fifo_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("perf-13.map");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !made.is_ok_and(|s| s.success()) {
            eprintln!("skipped: cannot make a FIFO");
            return;
        }
        let (tx, rx) = mpsc::channel();
        let path = dir.path().to_owned();
        std::thread::spawn(move || {
            let mut maps = maps_in(&path, (1 << 20, 1000));
            let mut stats = UserSymbolStats::default();
            let found = maps
                .lookup(&thread(13, 0), 0x1000, 1, &mut stats)
                .map(str::to_owned);
            let _ = tx.send((found, stats.jit_refused));
        });
        let (found, refused) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("looking up a FIFO map blocked");
        assert_eq!((found, refused), (None, 1));
    }

    #[test]
    fn a_symlink_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        append(&target, "1000 10 through_the_link\n");
        std::os::unix::fs::symlink(&target, dir.path().join("perf-15.map")).unwrap();
        let mut maps = maps_in(dir.path(), (1 << 20, 1000));
        let mut stats = UserSymbolStats::default();
        assert_eq!(maps.lookup(&thread(15, 0), 0x1004, 1, &mut stats), None);
        assert_eq!(stats.jit_refused, 1);
    }

    #[test]
    fn only_the_process_user_or_root_may_own_the_map() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf-17.map");
        append(&path, "1000 10 owned\n");
        if std::os::unix::fs::chown(&path, Some(12345), None).is_err() {
            eprintln!("skipped: not allowed to change the owner of a file");
            return;
        }
        let mut stats = UserSymbolStats::default();
        let mut maps = maps_in(dir.path(), (1 << 20, 1000));
        let stranger = ThreadLabels {
            uid: Some(54321),
            ..thread(17, 0)
        };
        assert_eq!(maps.lookup(&stranger, 0x1004, 1, &mut stats), None);
        assert_eq!(stats.jit_refused, 1);
        let owner = ThreadLabels {
            uid: Some(12345),
            ..thread(17, 1)
        };
        assert_eq!(maps.lookup(&owner, 0x1004, 1, &mut stats), Some("owned"));
    }

    #[test]
    fn a_root_only_map_is_not_read_for_another_user() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("perf-18.map");
        append(&path, "1000 10 root_secret\n");
        if std::os::unix::fs::chown(&path, Some(0), None).is_err() {
            eprintln!("skipped: not allowed to change the owner of a file");
            return;
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut stats = UserSymbolStats::default();
        let mut maps = maps_in(dir.path(), (1 << 20, 1000));
        let user = ThreadLabels {
            uid: Some(12345),
            ..thread(18, 0)
        };
        assert_eq!(maps.lookup(&user, 0x1004, 1, &mut stats), None);
        assert_eq!(stats.jit_refused, 1);
        let root = ThreadLabels {
            uid: Some(0),
            ..thread(18, 1)
        };
        assert_eq!(
            maps.lookup(&root, 0x1004, 1, &mut stats),
            Some("root_secret")
        );
    }

    #[test]
    fn maps_are_bounded_by_count() {
        let dir = tempfile::tempdir().unwrap();
        let mut maps = JitMaps::new(3, 1 << 30, 1 << 20, 1000);
        let d = dir.path().to_owned();
        maps.set_locate(Box::new(move |pid| vec![d.join(format!("perf-{pid}.map"))]));
        let mut stats = UserSymbolStats::default();
        for pid in 0..10 {
            append(&dir.path().join(format!("perf-{pid}.map")), "1000 10 f\n");
            assert_eq!(
                maps.lookup(&thread(pid, 0), 0x1004, 1, &mut stats),
                Some("f")
            );
            assert!(maps.sizes().0 <= 3);
        }
        assert_eq!(maps.sizes().0, 3);
    }
}
