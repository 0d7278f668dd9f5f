//! What the per-uid share (`share.rs`) dropped, counted per uid for status and metrics.
//!
//! Bounded: at most [`UIDS_KEPT`] uids; a uid whose last drop is older than the retention
//! window is released (its history is gone too), and when the map is full the uid that
//! dropped longest ago makes room. The totals over every uid stay exact.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::store::share::UidDrop;

/// Most uids counted at once.
pub const UIDS_KEPT: usize = 256;

/// One uid's drops, as status shows them (declared in `daemon-api`).
pub use daemon_api::status::UidDrops;

/// The drops per uid and in total.
#[derive(Debug, Default)]
pub struct UidDropCounters {
    by_uid: Mutex<HashMap<Option<u32>, UidDrops>>,
    /// Stacks dropped, every uid.
    pub stacks: AtomicU64,
    /// Samples dropped, every uid.
    pub samples: AtomicU64,
}

impl UidDropCounters {
    /// Count `drops` of a slice at `now_ns`; release the uids whose last drop came before
    /// `oldest_ns` (out of the retention window).
    pub fn record(&self, drops: &[UidDrop], now_ns: u64, oldest_ns: u64) {
        let mut map = self.by_uid.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, d| d.last_ns >= oldest_ns);
        for drop in drops {
            self.stacks.fetch_add(drop.stacks, Ordering::Relaxed);
            self.samples.fetch_add(drop.samples, Ordering::Relaxed);
            if !map.contains_key(&drop.uid) && map.len() >= UIDS_KEPT {
                let oldest = map.iter().min_by_key(|(_, d)| d.last_ns).map(|(&u, _)| u);
                if let Some(uid) = oldest {
                    map.remove(&uid);
                }
            }
            let entry = map.entry(drop.uid).or_insert_with(|| UidDrops {
                uid: drop.uid,
                ..UidDrops::default()
            });
            entry.stacks += drop.stacks;
            entry.samples += drop.samples;
            entry.bytes += drop.bytes;
            entry.last_ns = now_ns;
        }
    }

    /// The uids counted that `shown` lets through, by uid.
    pub fn list(&self, shown: impl Fn(Option<u32>) -> bool) -> Vec<UidDrops> {
        let map = self.by_uid.lock().unwrap_or_else(|e| e.into_inner());
        let mut list: Vec<UidDrops> = map.values().filter(|d| shown(d.uid)).cloned().collect();
        list.sort_by_key(|d| d.uid);
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drop(uid: u32, stacks: u64) -> UidDrop {
        UidDrop {
            uid: Some(uid),
            stacks,
            samples: stacks * 2,
            bytes: stacks * 100,
        }
    }

    #[test]
    fn drops_add_up_per_uid_and_old_uids_are_released() {
        let c = UidDropCounters::default();
        c.record(&[drop(1000, 3), drop(1001, 1)], 10, 0);
        c.record(&[drop(1000, 2)], 20, 0);
        let all = c.list(|_| true);
        assert_eq!(all.len(), 2);
        assert_eq!(
            (all[0].uid, all[0].stacks, all[0].samples),
            (Some(1000), 5, 10)
        );
        assert_eq!(all[0].last_ns, 20);
        assert_eq!(c.list(|u| u == Some(1001)).len(), 1);
        // Past the retention window of uid 1001's last drop: released; the totals stay.
        c.record(&[drop(1000, 1)], 30, 15);
        assert_eq!(c.list(|_| true).len(), 1);
        assert_eq!(c.stacks.load(Ordering::Relaxed), 7);
    }

    #[test]
    fn at_most_uids_kept_the_oldest_making_room() {
        let c = UidDropCounters::default();
        for uid in 0..UIDS_KEPT as u32 + 10 {
            c.record(&[drop(uid, 1)], u64::from(uid) + 1, 0);
        }
        let all = c.list(|_| true);
        assert_eq!(all.len(), UIDS_KEPT);
        assert_eq!(all[0].uid, Some(10), "the oldest made room");
        assert_eq!(c.stacks.load(Ordering::Relaxed), UIDS_KEPT as u64 + 10);
    }
}
