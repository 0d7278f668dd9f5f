//! Writing output files so that a failure never leaves a half-written file behind, and so that
//! another user who controls the output's directory or path cannot make profctl (often root)
//! write anywhere else.
//!
//! Rules (see docs/security.md):
//! - a regular file (or no file) at the path is replaced by renaming a new file into place;
//!   the new file is created beside it under a random name with `O_CREAT | O_EXCL |
//!   O_NOFOLLOW`, so a symlink or file planted at a predictable name is never opened, and what
//!   the path pointed to before (a symlink's target, a hard link) is never written into;
//! - anything else at the path is written in place only when it is this user's own: a FIFO,
//!   socket or terminal owned by the effective uid, the null device, or the very file standard
//!   output or error already is; a directory, a block device or another user's FIFO is refused
//!   before recording starts;
//! - a FIFO is opened without blocking: one with no reader is an error, not a hang;
//! - the writability probe creates no name in the directory (`O_TMPFILE`, else a random name).

use std::fs::{File, Metadata, OpenOptions};
use std::io::{BufWriter, ErrorKind, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};

/// Temporary files being written, removed by [`remove_pending_temporaries`] when a signal
/// ends profctl before they were renamed into place.
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Remove the temporary files of writes still under way (called before exiting on a signal).
pub fn remove_pending_temporaries() {
    let pending = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    for path in pending.iter() {
        let _ = std::fs::remove_file(path);
    }
}

/// What is at an output path now, and how it will be written.
enum Target {
    /// Nothing, or a regular file: a new file is renamed into place.
    Replace,
    /// One of this user's own FIFOs, sockets or terminals, or the null device: written in
    /// place through the descriptor that was checked (an `O_PATH` descriptor).
    InPlace(File),
}

/// The effective uid of this process (the owner of `/proc/self`).
fn effective_uid() -> Result<u32> {
    Ok(std::fs::metadata("/proc/self")
        .context("reading /proc/self")?
        .uid())
}

/// Linux's major and minor device numbers of `rdev`.
fn major_minor(rdev: u64) -> (u64, u64) {
    (
        ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff),
        (rdev & 0xff) | ((rdev >> 12) & !0xff),
    )
}

/// Whether `meta` is the file standard output or standard error already is.
fn is_own_stdio(meta: &Metadata) -> bool {
    ["/proc/self/fd/1", "/proc/self/fd/2"].iter().any(|fd| {
        std::fs::metadata(fd).is_ok_and(|m| m.dev() == meta.dev() && m.ino() == meta.ino())
    })
}

/// A name for the kind of file `meta` describes, for error messages.
fn kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

/// Look at what `path` names now (following symlinks, opening nothing for I/O) and decide.
fn target(path: &Path) -> Result<Target> {
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path);
    let handle = match opened {
        Ok(f) => f,
        // No file, or a dangling symlink (renaming replaces the link, never its target).
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Target::Replace),
        Err(e) => return Err(e).with_context(|| format!("cannot open {}", path.display())),
    };
    let meta = handle
        .metadata()
        .with_context(|| format!("cannot stat {}", path.display()))?;
    let t = meta.file_type();
    if t.is_file() {
        return Ok(Target::Replace);
    }
    if t.is_dir() {
        bail!("{} is a directory, not an output file", path.display());
    }
    let null_device = t.is_char_device() && major_minor(meta.rdev()) == (1, 3);
    let own =
        (t.is_fifo() || t.is_socket() || t.is_char_device()) && meta.uid() == effective_uid()?;
    if null_device || own || (!t.is_block_device() && is_own_stdio(&meta)) {
        return Ok(Target::InPlace(handle));
    }
    bail!(
        "refusing to write {}: it is a {} owned by uid {}; profctl writes only regular files \
         (replaced, never written through) or a FIFO, socket or terminal of its own user",
        path.display(),
        kind(&meta),
        meta.uid()
    )
}

/// The directory a new file at `path` goes into.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A random 64-bit number for temporary names (not predictable by another user).
fn random_suffix(attempt: u32) -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one((
        std::process::id(),
        attempt,
        std::time::SystemTime::now(),
    ))
}

/// Create a new file beside `path` under a random name, never opening anything already there
/// (`O_EXCL`, `O_NOFOLLOW`).
fn create_temporary(path: &Path) -> Result<(PathBuf, File)> {
    let name = path
        .file_name()
        .context("the output path has no file name")?;
    let dir = parent_dir(path);
    let mut last = None;
    for attempt in 0..16 {
        let tmp = dir.join(format!(
            ".{}.{:016x}.tmp",
            name.to_string_lossy(),
            random_suffix(attempt)
        ));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&tmp)
        {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e).with_context(|| format!("creating {}", tmp.display())),
        }
    }
    Err(last.expect("at least one attempt")).with_context(|| {
        format!(
            "cannot create a temporary file in {}: every name tried exists",
            dir.display()
        )
    })
}

/// Fail early when `path` is something profctl will not write (a directory, another user's
/// FIFO, a device) or its directory cannot take a new file. Creates no name in the directory.
pub fn check_writable(path: &Path) -> Result<()> {
    if let Target::InPlace(_) = target(path)? {
        return Ok(());
    }
    let dir = parent_dir(path);
    let unwritable = || {
        format!(
            "cannot write {}: {} is not a writable directory",
            path.display(),
            dir.display()
        )
    };
    // An unnamed file: nothing another user could have planted a link at.
    let probe = OpenOptions::new()
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir);
    match probe {
        Ok(_) => Ok(()),
        // Filesystems without O_TMPFILE: a new file under a random name.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::EISDIR)
            ) =>
        {
            let (tmp, _file) = create_temporary(path).with_context(unwritable)?;
            let _ = std::fs::remove_file(&tmp);
            Ok(())
        }
        Err(e) => Err(e).with_context(unwritable),
    }
}

/// A writer over a non-blocking descriptor that waits (briefly sleeping) while it would block:
/// a FIFO is opened without blocking so that one without a reader fails instead of hanging;
/// a reader that stops reading holds profctl only until a signal ends it.
struct Patient(File);

impl Write for Patient {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        loop {
            match self.0.write(buf) {
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(2))
                }
                other => return other,
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Write `path` through a temporary file in the same directory, renamed into place when `fill`
/// and the final flush succeed (a full disk leaves the old file, if any, untouched). One of this
/// user's own FIFOs, sockets or terminals, or the null device, is written in place; anything
/// else that is not a regular file is refused (see the module's rules).
pub fn write_atomically(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    if let Target::InPlace(handle) = target(path)? {
        use std::os::fd::AsRawFd;
        // Reopen the checked file itself (not the path again) for writing.
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(format!("/proc/self/fd/{}", handle.as_raw_fd()))
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ENXIO) => anyhow::anyhow!("no process has the FIFO open for reading"),
                _ => e.into(),
            })
            .with_context(|| format!("opening {}", path.display()))?;
        let mut out = BufWriter::new(Patient(file));
        fill(&mut out)?;
        out.flush()?;
        return Ok(());
    }
    let (tmp, file) = create_temporary(path)?;
    PENDING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(tmp.clone());
    let result = (|| {
        let mut out = BufWriter::new(Patient(file));
        fill(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?.0;
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    PENDING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|p| p != &tmp);
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

/// A writer that shows control characters other than newline and tab (terminal escapes among
/// them, C1 controls included) as `\xNN`, for log lines that carry names other users chose.
pub struct Escaping<W: Write>(pub W);

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut out = Vec::with_capacity(buf.len());
        let mut i = 0;
        while i < buf.len() {
            let b = buf[i];
            let c1 = b == 0xc2 && buf.get(i + 1).is_some_and(|n| (0x80..0xa0).contains(n));
            if c1 {
                out.extend_from_slice(format!("\\x{:02x}", buf[i + 1]).as_bytes());
                i += 2;
                continue;
            }
            if (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f {
                out.extend_from_slice(format!("\\x{b:02x}").as_bytes());
            } else {
                out.push(b);
            }
            i += 1;
        }
        self.0.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
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
    fn log_lines_escape_control_characters() {
        let mut out = Escaping(Vec::new());
        out.write_all("a\x1b]0;x\x07b\u{9b}c\td\n".as_bytes())
            .unwrap();
        assert_eq!(
            String::from_utf8(out.0).unwrap(),
            "a\\x1b]0;x\\x07b\\x9bc\td\n"
        );
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
        // The FIFO is opened without blocking: the reader must be there first.
        std::thread::sleep(std::time::Duration::from_millis(200));
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

    fn mkfifo(path: &Path) {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .unwrap();
        assert!(made.success());
    }

    #[test]
    fn a_symlink_at_the_output_is_replaced_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let out = dir.path().join("out.svg");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        check_writable(&out).unwrap();
        write_atomically(&out, |o| Ok(o.write_all(b"profile")?)).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(&out)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "profile");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            2,
            "no temporary left"
        );
    }

    #[test]
    fn another_users_fifo_a_directory_and_a_device_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("their.fifo");
        mkfifo(&fifo);
        if effective_uid().unwrap() == 0 {
            std::os::unix::fs::chown(&fifo, Some(65534), None).unwrap();
            let err = check_writable(&fifo).unwrap_err();
            assert!(
                format!("{err:#}").contains("FIFO owned by uid 65534"),
                "{err:#}"
            );
            let err = write_atomically(&fifo, |_| Ok(())).unwrap_err();
            assert!(format!("{err:#}").contains("refusing"), "{err:#}");
            // A block device (a loop device's numbers; never opened).
            let dev = dir.path().join("disk");
            let made = std::process::Command::new("mknod")
                .arg(&dev)
                .args(["b", "7", "0"])
                .status()
                .unwrap();
            if made.success() {
                let err = check_writable(&dev).unwrap_err();
                assert!(format!("{err:#}").contains("block device"), "{err:#}");
            }
        }
        let err = check_writable(dir.path()).unwrap_err();
        assert!(format!("{err:#}").contains("is a directory"), "{err:#}");
    }

    #[test]
    fn a_fifo_without_a_reader_fails_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("out.fifo");
        mkfifo(&fifo);
        let started = std::time::Instant::now();
        let err = write_atomically(&fifo, |o| Ok(o.write_all(b"x")?)).unwrap_err();
        assert!(
            format!("{err:#}").contains("no process has the FIFO open"),
            "{err:#}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn the_null_device_is_written_in_place() {
        check_writable(Path::new("/dev/null")).unwrap();
        write_atomically(Path::new("/dev/null"), |o| Ok(o.write_all(b"x")?)).unwrap();
    }

    #[test]
    fn temporary_names_are_not_predictable() {
        let a = random_suffix(0);
        let b = random_suffix(0);
        assert_ne!(a, b);
    }
}
