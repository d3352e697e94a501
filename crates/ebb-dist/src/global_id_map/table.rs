//! The embedded backend's table: entries, versions and watchers, in one node's memory.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use ebb::EbbId;

use super::{IdMapError, MAX_ENTRIES, MAX_VALUE_LEN, Versioned, Watcher};

/// Names one watch, to stop it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WatchId(pub u64);

/// The GlobalIdMap's entries, as the embedded backend (and any node's cache) holds them.
/// Synchronous: the owner runs it on one core and answers remote requests from it.
#[derive(Default)]
pub struct IdMapTable {
    entries: BTreeMap<EbbId, Versioned>,
    watchers: BTreeMap<EbbId, Vec<(WatchId, Watcher)>>,
    next_watch: u64,
}

impl core::fmt::Debug for IdMapTable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("IdMapTable")
            .field("entries", &self.entries.len())
            .field("watched_ids", &self.watchers.len())
            .finish()
    }
}

impl IdMapTable {
    /// An empty table.
    pub fn new() -> IdMapTable {
        IdMapTable::default()
    }

    /// The entry for `id`.
    pub fn get(&self, id: EbbId) -> Option<&Versioned> {
        self.entries.get(&id)
    }

    /// Sets `id` to `value`, calls its watchers, and returns the new version (the current
    /// one, and no calls, when `value` is what it holds).
    pub fn set(&mut self, id: EbbId, value: Vec<u8>) -> Result<u64, IdMapError> {
        if !id.is_global() {
            return Err(IdMapError::NotGlobal(id));
        }
        if value.len() > MAX_VALUE_LEN {
            return Err(IdMapError::ValueTooLong(value.len()));
        }
        if !self.entries.contains_key(&id) && self.entries.len() >= MAX_ENTRIES {
            return Err(IdMapError::Full);
        }
        if let Some(same) = self.entries.get(&id).filter(|e| e.value == value) {
            // Versions count changes: writing what is there changes nothing (and a retried
            // write is harmless, as with the etcd backend).
            return Ok(same.version);
        }
        let version = self.entries.get(&id).map_or(1, |e| e.version + 1);
        let entry = Versioned { version, value };
        if let Some(watchers) = self.watchers.get_mut(&id) {
            for (_, w) in watchers.iter_mut() {
                w(id, &entry);
            }
        }
        self.entries.insert(id, entry);
        Ok(version)
    }

    /// Calls `on_change` on every later `set` of `id`.
    pub fn watch(&mut self, id: EbbId, on_change: Watcher) -> WatchId {
        self.next_watch += 1;
        let watch = WatchId(self.next_watch);
        self.watchers
            .entry(id)
            .or_default()
            .push((watch, on_change));
        watch
    }

    /// Stops `watch`; whether it was there.
    pub fn unwatch(&mut self, watch: WatchId) -> bool {
        let mut found = false;
        self.watchers.retain(|_, ws| {
            let before = ws.len();
            ws.retain(|(w, _)| *w != watch);
            found |= ws.len() != before;
            !ws.is_empty()
        });
        found
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::boxed::Box;
    use alloc::sync::Arc;
    use alloc::vec;

    fn gid(k: u32) -> EbbId {
        EbbId::from_u32(ebb::FIRST_GLOBAL_ID + k).unwrap()
    }

    #[test]
    fn versions_count_sets_and_watchers_see_each_in_order() {
        let mut t = IdMapTable::new();
        let seen = Arc::new(spin::Mutex::new(Vec::new()));
        let s = seen.clone();
        let w = t.watch(
            gid(1),
            Box::new(move |id, e| s.lock().push((id, e.version, e.value.clone()))),
        );
        assert_eq!(t.set(gid(1), b"a".to_vec()), Ok(1));
        assert_eq!(t.set(gid(2), b"other".to_vec()), Ok(1));
        assert_eq!(t.set(gid(1), b"b".to_vec()), Ok(2));
        assert_eq!(t.set(gid(1), b"b".to_vec()), Ok(2), "no change, no version");
        assert_eq!(t.get(gid(1)).unwrap().value, b"b");
        assert!(t.unwatch(w));
        assert!(!t.unwatch(w));
        t.set(gid(1), b"c".to_vec()).unwrap();
        assert_eq!(
            *seen.lock(),
            vec![(gid(1), 1, b"a".to_vec()), (gid(1), 2, b"b".to_vec())]
        );
    }

    #[test]
    fn limits_are_enforced() {
        let mut t = IdMapTable::new();
        let local = EbbId::from_u32(300).unwrap();
        assert_eq!(t.set(local, vec![]), Err(IdMapError::NotGlobal(local)));
        assert_eq!(
            t.set(gid(0), vec![0; MAX_VALUE_LEN + 1]),
            Err(IdMapError::ValueTooLong(MAX_VALUE_LEN + 1))
        );
        assert!(t.is_empty());
    }
}
