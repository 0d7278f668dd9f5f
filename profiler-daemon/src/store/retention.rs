//! What the store keeps: retention by age and bytes (oldest first), and the per-uid share
//! that holds each closed slice (`share.rs`) and each hour's roll-up (`rollup_share.rs`) to
//! its part of `max_bytes`. The budgets are set here so that two hours of slices and the
//! roll-ups of `max_age` fit `max_bytes` together.

use std::fs;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::warn;

use crate::slice::Slice;
use crate::store::rollup_builder::RollupBuilder;
use crate::store::share::UidDrop;
use crate::store::{rollup_share, share, Store};

impl Store {
    /// Change the retention (the next [`Store::apply_retention`] applies it).
    pub fn set_retention(&self, max_age: Duration, max_bytes: u64) {
        self.max_age_ns.store(
            max_age.as_nanos().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
        self.max_bytes.store(max_bytes, Ordering::Relaxed);
    }

    /// Change `storage.max_share_per_uid` for the roll-ups written from now on (a slice's is
    /// passed to [`Store::apply_share`]).
    pub fn set_share_per_uid(&self, percent: u8) {
        self.share_per_uid.store(percent, Ordering::Relaxed);
    }

    /// Hold a closed slice to its budget under the retention in effect, shared out per uid
    /// (`share.rs`, `share_percent`: `storage.max_share_per_uid`); what each uid lost is
    /// counted as of `now_ns` and returned. The slices take at most a quarter of `max_bytes`
    /// a `rollup_span_ns` (an hour; `max_age` when shorter): two such spans of slices (the
    /// one being filled, the one waiting for its roll-up) and the roll-ups of `max_age`
    /// (`rollup_share.rs`) fit `max_bytes`.
    pub fn apply_share(
        &self,
        slice: &mut Slice,
        share_percent: u8,
        now_ns: u64,
        rollup_span_ns: u64,
        slice_ns: u64,
    ) -> Vec<UidDrop> {
        let max_age_ns = self.max_age_ns.load(Ordering::Relaxed);
        let budget = share::slice_budget(
            self.max_bytes.load(Ordering::Relaxed) / 4,
            max_age_ns.min(rollup_span_ns),
            slice_ns,
        );
        let drops = share::apply(slice, budget, share_percent, share::file_bytes);
        self.uid_drops
            .record(&drops, now_ns, now_ns.saturating_sub(max_age_ns));
        drops
    }

    /// Hold an hour's roll-up (of `span_ns`) to its budget, shared out per uid
    /// (`rollup_share.rs`): half of `max_bytes` over `max_age`. Returns the roll-up to write;
    /// what each uid lost is counted as of `now_ns`.
    pub(crate) fn apply_rollup_share(
        &self,
        builder: RollupBuilder,
        span_ns: u64,
        now_ns: u64,
    ) -> (RollupBuilder, Vec<UidDrop>) {
        let max_age_ns = self.max_age_ns.load(Ordering::Relaxed);
        let max_bytes = self.max_bytes.load(Ordering::Relaxed) / 2;
        let budget = share::slice_budget(max_bytes, max_age_ns.max(span_ns), span_ns);
        let members_bytes = {
            let index = self.index();
            builder
                .members()
                .iter()
                .filter_map(|m| index.slices.get(m))
                .sum()
        };
        let (builder, drops) = rollup_share::apply(
            builder,
            budget,
            members_bytes,
            self.share_per_uid.load(Ordering::Relaxed),
            rollup_share::file_bytes,
        );
        self.uid_drops
            .record(&drops, now_ns, now_ns.saturating_sub(max_age_ns));
        (builder, drops)
    }

    /// Delete slices that ended before `now_ns - max_age`, then the oldest while the total is
    /// over `max_bytes`.
    pub fn apply_retention(&self, now_ns: u64) {
        let oldest_kept = now_ns.saturating_sub(self.max_age_ns.load(Ordering::Relaxed));
        let max_bytes = self.max_bytes.load(Ordering::Relaxed);
        let mut doomed = Vec::new();
        {
            let mut index = self.index();
            while let Some((&key, &bytes)) = index.slices.iter().next() {
                let expired = key.1 < oldest_kept;
                if !expired && index.bytes <= max_bytes {
                    break;
                }
                index.slices.remove(&key);
                index.bytes -= bytes;
                doomed.push((key, index.rollups.remove(&key)));
            }
        }
        for ((start, end), rollup) in doomed {
            self.counters.expired.fetch_add(1, Ordering::Relaxed);
            if let Err(err) = fs::remove_file(self.path_of(start, end, rollup)) {
                warn!(%err, "cannot delete an expired slice");
            }
        }
    }
}
