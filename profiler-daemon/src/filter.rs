//! What a query, a recording or a scrape selects: a process and its threads, optionally its
//! descendants, command name, user, cgroup; and what the asking user may see of it.

use crate::access::Visibility;
use crate::cgroup::{in_cgroup, MAX_CGROUP_BYTES};
use crate::slice::SliceStack;

/// What is selected; every field that is set must match.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this process (all its threads).
    pub pid: Option<u32>,
    /// With `pid`: also the processes it and its descendants created.
    pub descendants: bool,
    /// Only threads with this command name.
    pub comm: Option<String>,
    /// Only processes of this user.
    pub uid: Option<u32>,
    /// Only processes in this cgroup (v2 path) or under it.
    pub cgroup: Option<String>,
    /// Which time of the history (CPU samples, off-CPU or wall-clock time): a slice read for
    /// a query keeps the stacks that hold some ([`crate::measure::Measure::project`]).
    pub measure: crate::measure::Measure,
}

impl Filter {
    /// Whether `s` is selected and visible.
    pub fn admits(&self, s: &SliceStack, visibility: Visibility) -> bool {
        if let Visibility::OwnOnly(uid) = visibility {
            if s.uid != Some(uid) {
                return false;
            }
        }
        self.pid
            .is_none_or(|pid| s.pid == pid || (self.descendants && s.ancestors.contains(&pid)))
            && self.uid.is_none_or(|uid| s.uid == Some(uid))
            && self
                .comm
                .as_deref()
                .is_none_or(|comm| s.comm.as_deref() == Some(comm))
            && self
                .cgroup
                .as_deref()
                .is_none_or(|want| s.cgroup.as_deref().is_some_and(|c| in_cgroup(c, want)))
    }

    /// A check of the parameters: a cgroup must be an absolute path.
    pub fn check(&self) -> Result<(), String> {
        if let Some(c) = &self.cgroup {
            if !c.starts_with('/') || c.len() > MAX_CGROUP_BYTES {
                return Err(format!(
                    "cgroup must be an absolute cgroup path such as /system.slice/nginx.service (at most {MAX_CGROUP_BYTES} bytes)"
                ));
            }
        }
        if self.descendants && self.pid.is_none() {
            return Err("descendants needs a pid".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_and_visibility() {
        let s = SliceStack {
            pid: 30,
            ancestors: vec![20, 10, 1],
            uid: Some(1000),
            comm: Some("c".into()),
            cgroup: Some("/user.slice/x.scope".into()),
            ..Default::default()
        };
        let f = |pid, descendants| Filter {
            pid: Some(pid),
            descendants,
            ..Filter::default()
        };
        assert!(f(30, false).admits(&s, Visibility::All));
        assert!(!f(10, false).admits(&s, Visibility::All));
        assert!(f(10, true).admits(&s, Visibility::All));
        assert!(!f(11, true).admits(&s, Visibility::All));
        assert!(!f(10, true).admits(&s, Visibility::OwnOnly(1001)));
        let by_cgroup = Filter {
            cgroup: Some("/user.slice".into()),
            ..Filter::default()
        };
        assert!(by_cgroup.admits(&s, Visibility::OwnOnly(1000)));
        assert!(by_cgroup.check().is_ok());
        assert!(Filter {
            cgroup: Some("user.slice".into()),
            ..Filter::default()
        }
        .check()
        .is_err());
    }
}
