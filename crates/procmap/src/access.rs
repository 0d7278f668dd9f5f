//! Opening files that other users control with their access, not root's.
//!
//! Root's profiler reads files whose paths other users choose: a mapped binary as its process
//! sees it (`/proc/PID/root/...`), the debug files found beside a user's binary. Opened as
//! root, a symlink (or a symlinked directory) there could name a file only root may read, and
//! its symbols or lines would end up in the profile. [`Access::open`] opens such a path on a
//! short-lived thread that has taken the user's filesystem uid, gid and groups (per-thread
//! credentials on Linux), so the kernel checks every directory, symlink and the file itself
//! as for that user; the descriptor is then used as usual. Every open is non-blocking (a FIFO
//! at the path cannot hang it) and keeps only a regular file.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::sys;

/// The uid and gid the kernel's overflow user has: the access for a file nobody vouches for.
const NOBODY: u32 = 65534;

/// Whose access a path is opened with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// This process's own: for paths the profiler's user chose (options, its caches, the
    /// system debug directory) and for descriptors it holds (`/proc/self/fd/N`).
    Own,
    /// A user's.
    User {
        /// Filesystem uid.
        uid: u32,
        /// Filesystem gid.
        gid: u32,
        /// Supplementary groups.
        groups: Vec<u32>,
    },
}

impl Access {
    /// The access of the process `pid` (its filesystem uid and gid and its groups, from
    /// `/proc/PID/status`); [`Access::Own`] for a process of root when this process is root;
    /// [`Access::nobody`] when the process is gone.
    pub fn of_process(pid: u32) -> Access {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
            return Access::nobody();
        };
        let field = |name: &str| -> Option<Vec<u32>> {
            let line = status.lines().find_map(|l| l.strip_prefix(name))?;
            line.split_whitespace().map(|v| v.parse().ok()).collect()
        };
        // Uid: real effective saved filesystem.
        let (Some(uids), Some(gids)) = (field("Uid:"), field("Gid:")) else {
            return Access::nobody();
        };
        let (Some(&uid), Some(&gid)) = (uids.get(3), gids.get(3)) else {
            return Access::nobody();
        };
        let groups = field("Groups:").unwrap_or_default();
        Access::user(uid, gid, groups)
    }

    /// The access of `file`'s owner (its uid and the file's group, no other groups): for
    /// files found beside it, in directories the owner may write.
    pub fn owner_of(meta: &std::fs::Metadata) -> Access {
        Access::user(meta.uid(), meta.gid(), Vec::new())
    }

    /// The overflow user's (65534): for a path no live process vouches for.
    pub fn nobody() -> Access {
        Access::user(NOBODY, NOBODY, Vec::new())
    }

    /// `uid`'s access; [`Access::Own`] when that is root's and this process is root.
    pub fn user(uid: u32, gid: u32, groups: Vec<u32>) -> Access {
        if uid == 0 && sys::geteuid() == 0 {
            Access::Own
        } else {
            Access::User { uid, gid, groups }
        }
    }

    /// The access for opening `path`, a file of another process: [`Access::Own`] for a
    /// descriptor this process holds (`/proc/self/fd/N`), the process's for a path through
    /// `/proc/PID/` (its root or its `map_files`), else [`Access::nobody`].
    pub fn for_path(path: &Path) -> Access {
        let mut parts = path.components().skip(1).map(|c| c.as_os_str().to_str());
        match (path.is_absolute(), parts.next(), parts.next()) {
            (true, Some(Some("proc")), Some(Some("self"))) if path.starts_with("/proc/self/fd") => {
                Access::Own
            }
            (true, Some(Some("proc")), Some(Some(pid))) => match pid.parse() {
                Ok(pid) => Access::of_process(pid),
                Err(_) => Access::nobody(),
            },
            _ => Access::nobody(),
        }
    }

    /// Open `path` for reading with this access, without blocking and without following
    /// anything this access could not; only a regular file is kept (anything else is an
    /// `InvalidInput` error). When this process cannot take the user's ids (it lacks
    /// CAP_SETUID/CAP_SETGID), the file is opened with its own access and kept only if its
    /// mode lets the user read it.
    pub fn open(&self, path: &Path) -> io::Result<File> {
        let Access::User { uid, gid, groups } = self else {
            return open_regular(path);
        };
        if *uid == sys::geteuid() && *uid != 0 {
            // Not root, and the file's user is this process's: its access is ours.
            return open_regular(path);
        }
        let switched = std::thread::scope(|scope| {
            let opener = std::thread::Builder::new()
                .name("profctl-open-as".to_owned())
                .spawn_scoped(scope, || -> Option<io::Result<File>> {
                    // The thread ends right after the open: its credentials go with it.
                    sys::become_fs_user(*uid, *gid, groups).ok()?;
                    Some(open_regular(path))
                })?;
            opener
                .join()
                .map_err(|_| io::Error::other("the thread opening a file as its user panicked"))
        })?;
        if let Some(opened) = switched {
            return opened;
        }
        // Without the right to take the user's ids: the file's own mode decides.
        let file = open_regular(path)?;
        let meta = file.metadata()?;
        let mode = meta.mode();
        let readable = if meta.uid() == *uid {
            mode & 0o400 != 0
        } else if meta.gid() == *gid || groups.contains(&meta.gid()) {
            mode & 0o040 != 0
        } else {
            mode & 0o004 != 0
        };
        if readable {
            Ok(file)
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("uid {uid} may not read it"),
            ))
        }
    }
}

/// Open `path` for reading without blocking (a FIFO, a device or a terminal at the path must
/// not hang or become the controlling terminal) and keep it only if it is a regular file.
fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    sys::clear_nonblock(&file)?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn is_root() -> bool {
        sys::geteuid() == 0
    }

    /// A root-only file, a file another user may read, and a symlink to each that the other
    /// user owns: with the user's access only what the user may read opens; with our own,
    /// both.
    #[test]
    fn a_users_access_does_not_reach_root_only_files() {
        if !is_root() {
            eprintln!("note: not root: cannot take another user's ids; skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "root only").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let public = dir.path().join("public");
        std::fs::write(&public, "anyone").unwrap();
        std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let user = Access::User {
            uid: 4242,
            gid: 4242,
            groups: Vec::new(),
        };
        let err = user.open(&secret).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
        assert_eq!(
            user.open(&link).unwrap_err().kind(),
            io::ErrorKind::PermissionDenied
        );
        assert!(user.open(&public).is_ok());
        assert!(Access::Own.open(&link).is_ok());
        // The thread's ids went with it: this thread still opens the secret.
        assert!(open_regular(&secret).is_ok());
        // A directory only root may enter hides what is in it, even when the file is public.
        let closed = dir.path().join("closed");
        std::fs::create_dir(&closed).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(closed.join("inner"), "x").unwrap();
        std::fs::set_permissions(closed.join("inner"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert!(user.open(&closed.join("inner")).is_err());
        assert!(Access::Own.open(&closed.join("inner")).is_ok());
    }

    #[test]
    fn a_fifo_neither_blocks_nor_opens() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let err = Access::Own.open(&fifo).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        let err = Access::nobody().open(&fifo).unwrap_err();
        assert!(matches!(
            err.kind(),
            io::ErrorKind::InvalidInput | io::ErrorKind::PermissionDenied
        ));
    }

    #[test]
    fn the_access_follows_the_path() {
        assert_eq!(Access::for_path(Path::new("/proc/self/fd/3")), Access::Own);
        let me = Access::for_path(Path::new(&format!(
            "/proc/{}/root/bin/sh",
            std::process::id()
        )));
        if is_root() {
            assert_eq!(me, Access::Own);
        } else {
            assert!(matches!(me, Access::User { uid, .. } if uid == sys::geteuid()));
        }
        assert_eq!(Access::for_path(Path::new("/usr/bin/sh")), Access::nobody());
        assert_eq!(
            Access::for_path(Path::new("/proc/x/root/y")),
            Access::nobody()
        );
    }
}
