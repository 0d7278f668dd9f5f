//! Writing output files so that a failure never leaves a half-written file behind.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};

/// Whether `path` exists and is not a regular file (`/dev/null`, a FIFO, `/dev/stdout`):
/// such a path is written in place, never replaced.
fn is_special(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// Fail early when `path`'s directory does not exist or cannot take a new file.
pub fn check_writable(path: &Path) -> Result<()> {
    if is_special(path) {
        return Ok(());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let probe = dir.join(format!(".profctl-probe-{}", std::process::id()));
    File::create(&probe).with_context(|| {
        format!(
            "cannot write {}: {} is not a writable directory",
            path.display(),
            dir.display()
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Write `path` through a temporary file in the same directory, renamed into place when `fill`
/// and the final flush succeed (a full disk leaves the old file, if any, untouched). A path
/// that is not a regular file (`/dev/null`, a FIFO) is written directly.
pub fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    if is_special(path) {
        let file = File::options()
            .write(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        let mut out = BufWriter::new(file);
        fill(&mut out)?;
        out.flush()?;
        return Ok(());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .context("the output path has no file name")?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut out = BufWriter::new(file);
        fill(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// `text` with control characters (terminal escapes among them) shown as `\u{..}` escapes,
/// for printing names that other users chose (file and thread names) to a terminal.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(char::is_control) {
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
            .into()
    } else {
        text.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(printable("main"), "main");
        assert_eq!(printable("a\x1b]0;x\x07b"), "a\\u{1b}]0;x\\u{7}b");
    }

    #[test]
    fn failed_write_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        let err = write_atomically(&path, |out| {
            out.write_all(b"partial")?;
            anyhow::bail!("boom")
        });
        assert!(err.is_err());
        assert!(!path.exists());
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "temporary file removed"
        );
        write_atomically(&path, |out| Ok(out.write_all(b"whole")?)).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "whole");
    }

    #[test]
    fn special_files_are_written_in_place_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("out.fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        check_writable(&fifo).unwrap();
        write_atomically(&fifo, |out| Ok(out.write_all(b"through the pipe")?)).unwrap();
        assert_eq!(reader.join().unwrap(), "through the pipe");
        use std::os::unix::fs::FileTypeExt;
        assert!(
            std::fs::metadata(&fifo).unwrap().file_type().is_fifo(),
            "the FIFO was replaced"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
    }

    #[test]
    fn missing_directory_is_named_in_the_error() {
        let err = write_atomically(Path::new("/nonexistent-dir/out.svg"), |_| Ok(())).unwrap_err();
        assert!(format!("{err:#}").contains("/nonexistent-dir"), "{err:#}");
    }
}
