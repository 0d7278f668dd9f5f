//! Counting what users hold (connections, query slots) per uid and in total, with room kept
//! for root and the admin group.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Who holds how many of something (connections, query slots): counted per uid and in
/// total, admitted within [`Caps`].
#[derive(Debug, Default)]
pub struct Limiter {
    held: Mutex<Counts>,
    /// Refused at a cap since start.
    pub refused: AtomicU64,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_uid: HashMap<u32, usize>,
}

/// The caps a newcomer is checked against.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// Held at once, past which a user (not an admin) is refused.
    pub total: usize,
    /// Held at once, past which an admin is refused.
    pub admin_total: usize,
    /// Held by one user's uid at once (`usize::MAX`: no cap).
    pub per_uid: usize,
    /// Held by one admin's uid at once.
    pub admin_per_uid: usize,
}

impl Caps {
    /// Queries: one of `total` kept for admins (when there are two or more), `per_uid` for
    /// each user; an admin is bounded by the total alone.
    pub fn queries(total: usize, per_uid: usize) -> Caps {
        Caps {
            total: total - usize::from(total >= 2),
            admin_total: total,
            per_uid,
            admin_per_uid: total,
        }
    }

    /// Connections: a user's cap, and an admin may go past the total by the same per-uid cap.
    pub fn connections(total: usize, per_uid: usize) -> Caps {
        Caps {
            total,
            admin_total: total.saturating_add(per_uid),
            per_uid,
            admin_per_uid: per_uid,
        }
    }
}

/// One held in a [`Limiter`]: released when dropped.
#[derive(Debug)]
pub struct Slot {
    owner: Arc<Limiter>,
    uid: Option<u32>,
}

impl Limiter {
    /// Count a newcomer of `uid` (None: no uid, as on TCP), unless a cap is reached.
    pub fn admit(self: &Arc<Self>, uid: Option<u32>, admin: bool, caps: Caps) -> Option<Slot> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let own = uid.map_or(0, |u| held.per_uid.get(&u).copied().unwrap_or(0));
        let (total_cap, own_cap) = if admin {
            (caps.admin_total, caps.admin_per_uid)
        } else {
            (caps.total, caps.per_uid)
        };
        if held.total >= total_cap || own >= own_cap {
            drop(held);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        held.total += 1;
        if let Some(u) = uid {
            *held.per_uid.entry(u).or_default() += 1;
        }
        Some(Slot {
            owner: Arc::clone(self),
            uid,
        })
    }

    /// Held now.
    pub fn open(&self) -> usize {
        self.held.lock().unwrap_or_else(|e| e.into_inner()).total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.owner.held.lock().unwrap_or_else(|e| e.into_inner());
        held.total -= 1;
        if let Some(u) = self.uid {
            if let Some(n) = held.per_uid.get_mut(&u) {
                *n -= 1;
                if *n == 0 {
                    held.per_uid.remove(&u);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_per_uid_and_in_total_with_room_for_admins() {
        let c = Arc::new(Limiter::default());
        let caps = Caps::connections(3, 2);
        let a1 = c.admit(Some(1000), false, caps).unwrap();
        let _a2 = c.admit(Some(1000), false, caps).unwrap();
        assert!(c.admit(Some(1000), false, caps).is_none(), "per uid");
        let _b1 = c.admit(Some(1001), false, caps).unwrap();
        assert!(c.admit(Some(1002), false, caps).is_none(), "in total");
        // Admins go past the total by their own cap.
        let _r1 = c.admit(Some(0), true, caps).unwrap();
        let _r2 = c.admit(Some(0), true, caps).unwrap();
        assert!(c.admit(Some(0), true, caps).is_none());
        assert_eq!(c.refused.load(Ordering::Relaxed), 3);
        drop(a1);
        assert!(c.admit(Some(1000), false, caps).is_none(), "still 5 open");
        assert_eq!(c.open(), 4);
    }

    #[test]
    fn one_query_slot_is_kept_for_admins() {
        let q = Arc::new(Limiter::default());
        let caps = Caps::queries(3, 1);
        let _a = q.admit(Some(1000), false, caps).unwrap();
        assert!(q.admit(Some(1000), false, caps).is_none(), "per uid");
        let _b = q.admit(Some(1001), false, caps).unwrap();
        assert!(
            q.admit(Some(1002), false, caps).is_none(),
            "kept for admins"
        );
        let _r = q.admit(Some(0), true, caps).unwrap();
        assert!(q.admit(Some(0), true, caps).is_none(), "all taken");
    }
}
