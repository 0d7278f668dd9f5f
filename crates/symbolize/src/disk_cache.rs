//! Writing and pruning the on-disk caches (kallsyms, frames, symbol tables, decompressed
//! sections): files are replaced by rename, never rewritten in place, so a process that has
//! one mapped keeps reading the old bytes.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// A temporary file older than this is a leftover of a killed process, removed when its
/// directory is pruned.
const STALE_TEMPORARY: Duration = Duration::from_secs(600);

/// Write `bytes` to `path` through a temporary file in the same directory (created if
/// missing, mode 0700) renamed over it. The temporary is created new (O_EXCL, O_NOFOLLOW,
/// mode 0600), never opened through a name something else put there.
pub(crate) fn write_replacing(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(format!(".tmp{}-{n}", std::process::id()));
    let tmp = path.with_file_name(name);
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Whether `name` is one [`write_replacing`] gives its temporaries (`NAME.tmpPID-N`), or an
/// older release's (`NAME.tmpPID`).
fn is_temporary(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    name.rsplit_once(".tmp").is_some_and(|(_, rest)| {
        !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit() || b == b'-')
    })
}

/// Bytes under `path`: a file's size, or the sum of the files directly in a directory.
/// Symbolic links count nothing.
fn entry_bytes(path: &Path, meta: &std::fs::Metadata) -> u64 {
    if meta.is_file() {
        return meta.len();
    }
    if !meta.is_dir() {
        return 0;
    }
    std::fs::read_dir(path).map_or(0, |entries| {
        entries
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum()
    })
}

fn remove(path: &Path, meta: &std::fs::Metadata) {
    // `remove_dir_all` removes a symbolic link itself, never what it points to; a directory
    // here is checked not to be one (symlink_metadata).
    let _ = if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
}

/// Remove the least recently modified entries of `dir` that `counts` accepts, beyond the
/// newest `keep` (files or directories). Failures are ignored: pruning is best effort.
pub(crate) fn keep_newest(dir: &Path, keep: usize, counts: impl Fn(&Path) -> bool) {
    prune(dir, keep, u64::MAX, counts);
}

/// [`keep_newest`], also removing the oldest entries until those kept hold at most
/// `max_bytes` (a directory entry counts the files directly in it), symbolic links (nothing
/// profctl makes; never followed), and temporaries left by killed processes.
pub(crate) fn prune(dir: &Path, keep: usize, max_bytes: u64, counts: impl Fn(&Path) -> bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = SystemTime::now();
    let mut found: Vec<(SystemTime, PathBuf, std::fs::Metadata)> = Vec::new();
    for e in entries.flatten() {
        let path = e.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        if meta.file_type().is_symlink() {
            let _ = std::fs::remove_file(&path);
        } else if is_temporary(&e.file_name()) {
            if now.duration_since(modified).unwrap_or_default() > STALE_TEMPORARY {
                remove(&path, &meta);
            }
        } else if counts(&path) {
            found.push((modified, path, meta));
        }
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.cmp(&a.1)));
    let mut bytes = 0u64;
    for (i, (_, path, meta)) in found.iter().enumerate() {
        bytes = bytes.saturating_add(entry_bytes(path, meta));
        if i >= keep || bytes > max_bytes {
            remove(path, meta);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn replaced_files_and_pruned_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/a.bin");
        write_replacing(&path, b"one").unwrap();
        write_replacing(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        assert_eq!(
            std::fs::read_dir(dir.path().join("sub")).unwrap().count(),
            1,
            "no temporary left"
        );

        for i in 0..6 {
            std::fs::write(dir.path().join(format!("{i}.x")), b"").unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::fs::write(dir.path().join("other"), b"").unwrap();
        keep_newest(dir.path(), 4, |p| p.extension().is_some_and(|e| e == "x"));
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["2.x", "3.x", "4.x", "5.x", "other", "sub"]);
    }

    #[test]
    fn byte_bound_stale_temporaries_and_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(dir.path().join(format!("{i}.x")), vec![0u8; 1000]).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // A leftover temporary of a killed process (old), and a fresh one (a live writer's).
        let stale = dir.path().join("a.x.tmp4242");
        std::fs::write(&stale, b"left").unwrap();
        let old = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        std::fs::write(dir.path().join("b.x.tmp4243-0"), b"live").unwrap();
        // A symlink planted to a directory outside: removed, its target untouched.
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep"), b"k").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("z.x")).unwrap();
        prune(dir.path(), 100, 2500, |p| {
            p.extension().is_some_and(|e| e == "x")
        });
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["3.x", "4.x", "b.x.tmp4243-0"]);
        assert!(outside.path().join("keep").exists());
        assert!(is_temporary(std::ffi::OsStr::new("ab.frames.tmp12-3")));
        assert!(!is_temporary(std::ffi::OsStr::new("ab.frames")));
    }
}
