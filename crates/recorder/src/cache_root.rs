//! Whether a directory is this user's alone: profctl's cache root (issue 11, item 8), and
//! profilerd's state, cache and socket directories.
//!
//! profctl keeps caches under `$XDG_CACHE_HOME/profctl` (else `~/.cache/profctl`); root may
//! run with another user's `HOME` or `XDG_CACHE_HOME` kept (`sudo -E`), and then writes into
//! the cache would follow that user's symlinks and pruning would delete in their targets. The
//! cache root is used only when it is a real directory (not a symlink) owned by the effective
//! user and writable by nobody else, and every directory above it is owned by that user or
//! root and writable by nobody else (unless sticky, as `/tmp`). A missing root is created with
//! mode 0700. A directory carrying a POSIX ACL (access or default) is refused too: a default
//! ACL would give another user every file written in it. Inside an accepted root, no other
//! user can plant or read anything.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::sys::has_acl;
pub use crate::sys::AclKind;

/// Why a cache root was refused.
#[derive(Debug, thiserror::Error)]
pub enum CacheRootError {
    /// The path or one above it is not a directory, or is a symlink (the root itself).
    #[error("{} is not a directory (or is a symbolic link)", path.display())]
    NotADirectory {
        /// The offending path.
        path: PathBuf,
    },
    /// Owned by another user.
    #[error("{} is owned by uid {owner}, not by uid {user} or root", path.display())]
    Owner {
        /// The offending path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The effective user.
        user: u32,
    },
    /// Writable by other users.
    #[error("{} is writable by other users (mode {mode:o})", path.display())]
    Writable {
        /// The offending path.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
    /// Carries a POSIX ACL that could give other users access to what is written in it.
    #[error("{} carries {kind}; remove it (setfacl -b -k) or choose another directory", path.display())]
    Acl {
        /// The offending path.
        path: PathBuf,
        /// Which ACL.
        kind: AclKind,
    },
    /// Could not be inspected or created.
    #[error("cannot use {}: {source}", path.display())]
    Io {
        /// The offending path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Check (creating it if missing, mode 0700) that `root` is safe as `uid`'s cache root.
pub fn check_cache_root(root: &Path, uid: u32) -> Result<(), CacheRootError> {
    check_private_dir(root, uid, 0o700)
}

/// Check (creating it with `create_mode` if missing) that `root` is `uid`'s alone, as the
/// module says.
pub fn check_private_dir(root: &Path, uid: u32, create_mode: u32) -> Result<(), CacheRootError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| CacheRootError::Io { path, source }
    };
    // Every existing directory above: the user's or root's, writable by nobody else unless
    // sticky.
    for dir in root
        .ancestors()
        .skip(1)
        .filter(|d| !d.as_os_str().is_empty())
    {
        let meta = match std::fs::metadata(dir) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io(dir)(e)),
        };
        if !meta.is_dir() {
            return Err(CacheRootError::NotADirectory { path: dir.into() });
        }
        if meta.uid() != uid && meta.uid() != 0 {
            return Err(CacheRootError::Owner {
                path: dir.into(),
                owner: meta.uid(),
                user: uid,
            });
        }
        let mode = meta.permissions().mode();
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Err(CacheRootError::Writable {
                path: dir.into(),
                mode: mode & 0o7777,
            });
        }
    }
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(create_mode)
        .create(root)
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io(root)(e)),
    }
    // The root itself: a real directory of this user's, writable by nobody else.
    let meta = std::fs::symlink_metadata(root).map_err(io(root))?;
    if !meta.file_type().is_dir() {
        return Err(CacheRootError::NotADirectory { path: root.into() });
    }
    if meta.uid() != uid {
        return Err(CacheRootError::Owner {
            path: root.into(),
            owner: meta.uid(),
            user: uid,
        });
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(CacheRootError::Writable {
            path: root.into(),
            mode: mode & 0o7777,
        });
    }
    for kind in [AclKind::Access, AclKind::Default] {
        if has_acl(root, kind).map_err(io(root))? {
            return Err(CacheRootError::Acl {
                path: root.into(),
                kind,
            });
        }
    }
    Ok(())
}

/// `root` when [`check_cache_root`] accepts it for the effective user; else None, with a
/// warning naming what is wrong (a debug message when it only could not be made or read).
pub(crate) fn safe_cache_root(root: PathBuf) -> Option<PathBuf> {
    match check_cache_root(&root, crate::sys::effective_uid()) {
        Ok(()) => Some(root),
        Err(err @ CacheRootError::Io { .. }) => {
            tracing::debug!(%err, "no cache directory; profctl's on-disk caches are off");
            None
        }
        Err(err) => {
            tracing::warn!(%err, "cache directory refused; profctl's on-disk caches are off");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_roots_are_refused() {
        let uid = crate::sys::effective_uid();
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        // Missing: created, 0700.
        let root = dir.path().join("a/profctl");
        check_cache_root(&root, uid).unwrap();
        let mode = std::fs::metadata(&root).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // Writable by others: refused (the root, or a non-sticky directory above it).
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            check_cache_root(&root, uid),
            Err(CacheRootError::Writable { .. })
        ));
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
        let above = dir.path().join("a");
        std::fs::set_permissions(&above, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            check_cache_root(&root, uid),
            Err(CacheRootError::Writable { .. })
        ));
        // Sticky (as /tmp): accepted.
        std::fs::set_permissions(&above, std::fs::Permissions::from_mode(0o1777)).unwrap();
        check_cache_root(&root, uid).unwrap();
        // A symlink at the root: refused, even to a good directory.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&root, &link).unwrap();
        assert!(matches!(
            check_cache_root(&link, uid),
            Err(CacheRootError::NotADirectory { .. })
        ));
        // A default ACL would hand every file made inside to another user.
        let acl = std::process::Command::new("setfacl")
            .args(["-d", "-m", "u:65534:rx"])
            .arg(&root)
            .status()
            .expect("setfacl (package acl; scripts/test installs it)");
        assert!(acl.success());
        let err = check_cache_root(&root, uid).unwrap_err();
        assert!(
            matches!(
                err,
                CacheRootError::Acl {
                    kind: AclKind::Default,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("a default ACL"), "{err}");
        let removed = std::process::Command::new("setfacl")
            .arg("-k")
            .arg(&root)
            .status()
            .unwrap();
        assert!(removed.success());
        check_cache_root(&root, uid).unwrap();
        // Another user's: refused (as another uid, or by chown when root).
        assert!(matches!(
            check_cache_root(&root, uid.wrapping_add(1)),
            Err(CacheRootError::Owner { .. })
        ));
    }
}
