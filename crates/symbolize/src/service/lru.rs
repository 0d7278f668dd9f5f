//! A map bounded by its number of entries and by their total weight (an estimate of the bytes
//! each holds), dropping the least recently used entries first.
//!
//! The entry just inserted or reweighed is never dropped by its own insertion, so one entry
//! heavier than the whole weight bound is still kept (alone) while it is in use.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use rustc_hash::FxBuildHasher;

struct Slot<V> {
    value: V,
    weight: u64,
    /// Tick of the last use: the key of this entry in `Lru::order`.
    used: u64,
}

/// Entries by key, least recently used dropped first when over either bound.
pub(crate) struct Lru<K, V> {
    entries: HashMap<K, Slot<V>, FxBuildHasher>,
    /// Keys by the tick of their last use, oldest first.
    order: BTreeMap<u64, K>,
    tick: u64,
    weight: u64,
    max_count: usize,
    max_weight: u64,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// An empty map holding at most `max_count` entries and `max_weight` in total.
    pub(crate) fn new(max_count: usize, max_weight: u64) -> Self {
        Lru {
            entries: HashMap::default(),
            order: BTreeMap::new(),
            tick: 0,
            weight: 0,
            max_count,
            max_weight,
        }
    }

    fn touch(&mut self, key: &K) {
        if let Some(slot) = self.entries.get_mut(key) {
            self.order.remove(&slot.used);
            self.tick += 1;
            slot.used = self.tick;
            self.order.insert(self.tick, key.clone());
        }
    }

    /// The value of `key`, now the most recently used.
    pub(crate) fn get(&mut self, key: &K) -> Option<&V> {
        self.touch(key);
        self.entries.get(key).map(|s| &s.value)
    }

    /// The value of `key`, without counting it as a use.
    pub(crate) fn peek(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|s| &s.value)
    }

    /// Insert (or replace) `key`, then drop the least recently used others while over a
    /// bound. Returns what was dropped (a replaced value included).
    pub(crate) fn insert(&mut self, key: K, value: V, weight: u64) -> Vec<(K, V)> {
        let mut dropped: Vec<(K, V)> = self
            .remove(&key)
            .map(|v| (key.clone(), v))
            .into_iter()
            .collect();
        self.tick += 1;
        self.order.insert(self.tick, key.clone());
        self.weight += weight;
        self.entries.insert(
            key.clone(),
            Slot {
                value,
                weight,
                used: self.tick,
            },
        );
        dropped.extend(self.shrink(Some(&key)));
        dropped
    }

    /// Set the weight of `key` (what it holds grew or shrank), then drop the least recently
    /// used others while over a bound. Returns what was dropped.
    pub(crate) fn reweigh(&mut self, key: &K, weight: u64) -> Vec<(K, V)> {
        let Some(slot) = self.entries.get_mut(key) else {
            return Vec::new();
        };
        self.weight = self.weight - slot.weight + weight;
        slot.weight = weight;
        self.shrink(Some(key))
    }

    /// Remove `key`.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        let slot = self.entries.remove(key)?;
        self.order.remove(&slot.used);
        self.weight -= slot.weight;
        Some(slot.value)
    }

    /// Remove everything; returns the values.
    pub(crate) fn clear(&mut self) -> Vec<V> {
        self.order.clear();
        self.weight = 0;
        self.entries.drain().map(|(_, s)| s.value).collect()
    }

    /// Drop least recently used entries (never `keep`) while over a bound.
    fn shrink(&mut self, keep: Option<&K>) -> Vec<(K, V)> {
        let mut dropped = Vec::new();
        while self.entries.len() > self.max_count || self.weight > self.max_weight {
            let victim = self.order.values().find(|k| Some(*k) != keep).cloned();
            let Some(victim) = victim else { break };
            if let Some(value) = self.remove(&victim) {
                dropped.push((victim, value));
            }
        }
        dropped
    }

    /// The use counter now: entries used from now on have a later tick.
    pub(crate) fn tick(&self) -> u64 {
        self.tick
    }

    /// Remove every entry last used before `tick` (see [`Lru::tick`]); returns them.
    pub(crate) fn remove_unused_since(&mut self, tick: u64) -> Vec<(K, V)> {
        let mut removed = Vec::new();
        while let Some((&used, _)) = self.order.first_key_value() {
            if used > tick {
                break;
            }
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if let Some(slot) = self.entries.remove(&key) {
                self.weight -= slot.weight;
                removed.push((key, slot.value));
            }
        }
        removed
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Total weight held.
    pub(crate) fn weight(&self) -> u64 {
        self.weight
    }

    /// The values, in no order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.entries.values().map(|s| &s.value)
    }

    /// The values, in no order, each with whether it was used after `tick` (see
    /// [`Lru::tick`]).
    pub(crate) fn values_used_since(&self, tick: u64) -> impl Iterator<Item = (&V, bool)> {
        self.entries
            .values()
            .map(move |s| (&s.value, s.used > tick))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_bound_drops_least_recently_used() {
        let mut lru = Lru::new(2, u64::MAX);
        assert!(lru.insert(1, "a", 1).is_empty());
        assert!(lru.insert(2, "b", 1).is_empty());
        assert_eq!(lru.get(&1), Some(&"a")); // 2 is now the oldest
        let dropped = lru.insert(3, "c", 1);
        assert_eq!(dropped, vec![(2, "b")]);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.peek(&2), None);
        assert_eq!(lru.peek(&1), Some(&"a"));
    }

    #[test]
    fn weight_bound_drops_until_under_and_keeps_the_new_entry() {
        let mut lru = Lru::new(100, 10);
        lru.insert(1, (), 4);
        lru.insert(2, (), 4);
        assert_eq!(lru.weight(), 8);
        let dropped = lru.insert(3, (), 5);
        assert_eq!(dropped.len(), 1, "one entry dropped to get under the bound");
        assert_eq!(dropped[0].0, 1);
        assert_eq!(lru.weight(), 9);
        // Heavier than the bound alone: kept, everything else goes.
        let dropped = lru.insert(4, (), 50);
        assert_eq!(dropped.len(), 2);
        assert_eq!(lru.len(), 1);
        assert_eq!(lru.weight(), 50);
    }

    #[test]
    fn entries_unused_since_a_tick_are_removed() {
        let mut lru = Lru::new(100, u64::MAX);
        lru.insert(1, (), 1);
        lru.insert(2, (), 1);
        let mark = lru.tick();
        lru.insert(3, (), 1);
        lru.get(&1);
        let removed = lru.remove_unused_since(mark);
        assert_eq!(removed, vec![(2, ())]);
        assert_eq!((lru.len(), lru.weight()), (2, 2));
        assert!(lru.remove_unused_since(0).is_empty());
    }

    #[test]
    fn values_tell_whether_they_were_used_since_a_tick() {
        let mut lru = Lru::new(100, u64::MAX);
        lru.insert(1, 'a', 1);
        lru.insert(2, 'b', 1);
        let mark = lru.tick();
        lru.get(&2);
        let mut used: Vec<_> = lru.values_used_since(mark).map(|(v, u)| (*v, u)).collect();
        used.sort();
        assert_eq!(used, [('a', false), ('b', true)]);
    }

    #[test]
    fn reweigh_enforces_the_bound() {
        let mut lru = Lru::new(100, 10);
        lru.insert(1, (), 3);
        lru.insert(2, (), 3);
        assert!(lru.reweigh(&2, 7).is_empty());
        let dropped = lru.reweigh(&2, 8);
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].0, 1);
        assert_eq!(lru.weight(), 8);
        assert_eq!(lru.remove(&2), Some(()));
        assert_eq!((lru.len(), lru.weight()), (0, 0));
    }
}
