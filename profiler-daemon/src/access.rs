//! Who sees what: the admin group (which may change on reload), group names resolved through
//! `/etc/group`, what a user may see, and the API socket's group and mode.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context, Result};

/// What the asking user may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visibility {
    /// Everything (root, the admin group, the scrape listener).
    All,
    /// Only stacks of processes of this uid, without kernel frames.
    OwnOnly(u32),
}

impl Visibility {
    /// What a user `uid` sees: everything when `admin`, else their own processes.
    pub fn of(uid: u32, admin: bool) -> Visibility {
        if admin {
            Visibility::All
        } else {
            Visibility::OwnOnly(uid)
        }
    }
}

/// A group id that can change while running (`access.admin_group`).
#[derive(Debug)]
pub struct GroupId(AtomicU64);

impl GroupId {
    const NONE: u64 = u64::MAX;

    /// `gid`, or none.
    pub fn new(gid: Option<u32>) -> GroupId {
        GroupId(AtomicU64::new(gid.map_or(Self::NONE, u64::from)))
    }

    /// The group now.
    pub fn get(&self) -> Option<u32> {
        u32::try_from(self.0.load(Ordering::Relaxed)).ok()
    }

    /// Change it.
    pub fn set(&self, gid: Option<u32>) {
        self.0
            .store(gid.map_or(Self::NONE, u64::from), Ordering::Relaxed);
    }

    /// Whether a user with effective gid `gid` and supplementary `groups` is in the group.
    pub fn contains(&self, gid: u32, groups: &[u32]) -> bool {
        self.get().is_some_and(|g| gid == g || groups.contains(&g))
    }
}

/// Whether a user (`uid`, `gid`, supplementary `groups`) sees everything: root and members of
/// the admin group.
pub fn is_admin(admin_gid: &GroupId, uid: u32, gid: u32, groups: &[u32]) -> bool {
    uid == 0 || admin_gid.contains(gid, groups)
}

/// A group name or number, resolved through `/etc/group` (no NSS lookups in the daemon).
pub fn resolve_group(group: &str) -> Result<u32> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    let text = std::fs::read_to_string("/etc/group").context("reading /etc/group")?;
    for line in text.lines() {
        let mut fields = line.split(':');
        if fields.next() == Some(group) {
            if let Some(gid) = fields.nth(1).and_then(|g| g.parse().ok()) {
                return Ok(gid);
            }
        }
    }
    bail!("no group {group:?} in /etc/group")
}

/// Give the API socket to `gid` (mode 0660), or to every local user (0666) when None. The
/// socket's directory is root's alone (`recorder::check_private_dir`); a symbolic link in its place is
/// refused, not followed.
pub fn set_socket_group(socket: &Path, gid: Option<u32>) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::symlink_metadata(socket)
        .with_context(|| format!("inspecting {}", socket.display()))?;
    if !meta.file_type().is_socket() {
        bail!("{} is not a socket", socket.display());
    }
    if let Some(gid) = gid {
        std::os::unix::fs::lchown(socket, None, Some(gid))
            .with_context(|| format!("giving {} to group {gid}", socket.display()))?;
    }
    let mode = if gid.is_some() { 0o660 } else { 0o666 };
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting the mode of {}", socket.display()))
}
