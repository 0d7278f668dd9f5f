//! Writing and pruning the on-disk caches (kallsyms, frames, symbol tables, decompressed
//! sections): files are replaced by rename, never rewritten in place, so a process that has
//! one mapped keeps reading the old bytes.

use std::path::{Path, PathBuf};

/// Write `bytes` to `path` through a temporary file in the same directory (created if
/// missing) renamed over it.
pub(crate) fn write_replacing(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Remove the least recently modified entries of `dir` that `counts` accepts, beyond the
/// newest `keep` (files or directories). Failures are ignored: pruning is best effort.
pub(crate) fn keep_newest(dir: &Path, keep: usize, counts: impl Fn(&Path) -> bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| counts(p))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    if found.len() <= keep {
        return;
    }
    found.sort();
    for (_, old) in &found[..found.len() - keep] {
        let _ = if old.is_dir() {
            std::fs::remove_dir_all(old)
        } else {
            std::fs::remove_file(old)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
