//! The directories the daemon writes in (the history, the caches, the socket's): used only
//! when nobody but root can plant, read or swap anything in them.
//!
//! A directory another user created first (`--state-dir /tmp/pd`) could carry a default ACL
//! that every slice inherits, or let that user plant and delete slices or swap the freshly
//! bound socket for a symlink. So every existing directory above must be root's and writable
//! by nobody else (unless sticky, as `/tmp`), and the directory itself a real directory (not a
//! symbolic link) owned by the daemon's user, writable by nobody else, without an ACL. A
//! missing directory is created with the mode asked for.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::sys::{has_acl, AclKind};

/// Why a directory is not used.
#[derive(Debug, thiserror::Error)]
pub enum UntrustedDir {
    /// Not a directory, or a symbolic link.
    #[error("{} is not a directory (or is a symbolic link)", .0.display())]
    NotADirectory(PathBuf),
    /// Owned by a user other than root (or the daemon's user).
    #[error("{} is owned by uid {owner}; profilerd uses only directories owned by root", path.display())]
    Owner {
        /// The directory.
        path: PathBuf,
        /// Its owner.
        owner: u32,
    },
    /// Writable by its group or by others (and not sticky).
    #[error("{} is writable by its group or by other users (mode {mode:o})", path.display())]
    Writable {
        /// The directory.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// Carries a POSIX ACL that could give other users access to what is written in it.
    #[error("{} carries {kind}; remove it (setfacl -b -k) or choose another directory", path.display())]
    Acl {
        /// The directory.
        path: PathBuf,
        /// Which ACL.
        kind: AclKind,
    },
    /// Could not be inspected or created.
    #[error("cannot use {}: {source}", path.display())]
    Io {
        /// The directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Check (creating it with `create_mode` if missing) that `dir` is the daemon's alone, as the
/// module says; `owner` is the daemon's effective uid.
pub fn ensure_trusted_dir(dir: &Path, create_mode: u32, owner: u32) -> Result<(), UntrustedDir> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| UntrustedDir::Io { path, source }
    };
    let trusted_owner = |uid: u32| uid == 0 || uid == owner;
    for above in dir
        .ancestors()
        .skip(1)
        .filter(|d| !d.as_os_str().is_empty())
    {
        let meta = match std::fs::metadata(above) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(above)(e)),
        };
        if !meta.is_dir() {
            return Err(UntrustedDir::NotADirectory(above.into()));
        }
        if !trusted_owner(meta.uid()) {
            return Err(UntrustedDir::Owner {
                path: above.into(),
                owner: meta.uid(),
            });
        }
        let mode = meta.permissions().mode();
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(UntrustedDir::Writable {
                path: above.into(),
                mode: mode & 0o7777,
            });
        }
    }
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(create_mode)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(dir)(e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(io(dir))?;
    if !meta.file_type().is_dir() {
        return Err(UntrustedDir::NotADirectory(dir.into()));
    }
    if !trusted_owner(meta.uid()) {
        return Err(UntrustedDir::Owner {
            path: dir.into(),
            owner: meta.uid(),
        });
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(UntrustedDir::Writable {
            path: dir.into(),
            mode: mode & 0o7777,
        });
    }
    for kind in [AclKind::Access, AclKind::Default] {
        if has_acl(dir, kind).map_err(io(dir))? {
            return Err(UntrustedDir::Acl {
                path: dir.into(),
                kind,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn missing_directories_are_created_and_unsafe_ones_refused() {
        let uid = crate::sys::effective_uid();
        let top = tempfile::tempdir().unwrap();
        set_mode(top.path(), 0o755);
        let dir = top.path().join("state/slices");
        ensure_trusted_dir(&dir, 0o750, uid).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o750);
        // Accepted again as it is.
        ensure_trusted_dir(&dir, 0o750, uid).unwrap();

        set_mode(&dir, 0o770);
        let err = ensure_trusted_dir(&dir, 0o750, uid).unwrap_err();
        assert!(matches!(err, UntrustedDir::Writable { .. }), "{err}");
        assert!(err.to_string().contains("slices"), "{err}");
        set_mode(&dir, 0o750);

        // A directory above writable by others (not sticky) lets them swap what is below.
        set_mode(&top.path().join("state"), 0o777);
        let err = ensure_trusted_dir(&dir, 0o750, uid).unwrap_err();
        assert!(matches!(err, UntrustedDir::Writable { .. }), "{err}");
        // Sticky, as /tmp: accepted.
        set_mode(&top.path().join("state"), 0o1777);
        ensure_trusted_dir(&dir, 0o750, uid).unwrap();
        set_mode(&top.path().join("state"), 0o755);

        // A symbolic link in place of the directory.
        let link = top.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let err = ensure_trusted_dir(&link, 0o750, uid).unwrap_err();
        assert!(matches!(err, UntrustedDir::NotADirectory(_)), "{err}");

        // Owned by another user.
        if uid == 0 {
            let theirs = top.path().join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let err = ensure_trusted_dir(&theirs, 0o750, uid).unwrap_err();
            assert!(
                matches!(err, UntrustedDir::Owner { owner: 65534, .. }),
                "{err}"
            );
        }
    }
}
