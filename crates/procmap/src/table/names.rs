//! The interned thread names: each distinct name once, rebuilt when most are no longer used.

use crate::process::NO_NAME;

use super::ProcessTable;

/// Interned names are rebuilt when fewer than half are in use, beyond this many.
pub(super) const MIN_NAMES_TO_REBUILD: usize = 64;

impl ProcessTable {
    pub(super) fn intern_name(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.name_ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.to_string());
        self.name_ids.insert(name.to_string(), id);
        id
    }

    /// Rebuild the name intern table when most of it is unused; returns how many went.
    pub(super) fn rebuild_names(&mut self) -> usize {
        if self.names.len() < MIN_NAMES_TO_REBUILD {
            return 0;
        }
        let mut used = vec![false; self.names.len()];
        for thread in self.threads.values() {
            for &(_, id) in &thread.names {
                if id != NO_NAME {
                    used[id as usize] = true;
                }
            }
        }
        let in_use = used.iter().filter(|&&u| u).count();
        if in_use * 2 >= self.names.len() {
            return 0;
        }
        let mut new_id = vec![NO_NAME; self.names.len()];
        let old = std::mem::take(&mut self.names);
        self.name_ids.clear();
        for (id, name) in old.into_iter().enumerate() {
            if used[id] {
                new_id[id] = self.names.len() as u32;
                self.name_ids.insert(name.clone(), new_id[id]);
                self.names.push(name);
            }
        }
        for thread in self.threads.values_mut() {
            for (_, id) in &mut thread.names {
                if *id != NO_NAME {
                    *id = new_id[*id as usize];
                }
            }
        }
        used.len() - in_use
    }
}
