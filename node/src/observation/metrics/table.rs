//! The table from event names to their metrics series: looked up for every request and
//! tick on both sides, so a look-up takes no lock and no reference count.
//!
//! Open addressing over slots that are set once and never cleared (a node's series live
//! as long as the node, and there are at most `max` of them): a reader probes from the
//! name's hash until it finds the name or an empty slot. Writers insert under a mutex, into
//! the first empty slot of the name's probe, so a name is always found before any empty
//! slot of its probe. The table has twice as many slots as names, rounded up to a power of
//! two, so every probe meets an empty slot.
//!
//! It replaced a `parking_lot::RwLock<HashMap<_, Arc<_>>>`: the read lock and the `Arc`'s
//! count were four atomic read-modify-writes a look-up, about 20 ns of each side's request
//! at 100 in flight (`perf`, `node-native-ctx` with `ZERONODE_CTX=meta,metrics`).

use std::hash::BuildHasher;
use std::sync::OnceLock;

use parking_lot::Mutex;

/// A slot: empty, or a name and its value (boxed, so an empty slot is two words).
type Slot<T> = OnceLock<Box<(Box<str>, T)>>;

/// Names and their values, at most `max` of them.
pub(crate) struct Table<T> {
    slots: Box<[Slot<T>]>,
    hasher: foldhash::fast::RandomState,
    /// Held to insert: how many slots are set.
    len: Mutex<usize>,
    max: usize,
}

impl<T> Table<T> {
    /// An empty table for up to `max` names.
    pub(crate) fn new(max: usize) -> Table<T> {
        let slots = (max.max(1) * 2).next_power_of_two();
        Table {
            slots: (0..slots).map(|_| OnceLock::new()).collect(),
            hasher: foldhash::fast::RandomState::default(),
            len: Mutex::new(0),
            max,
        }
    }

    /// Where `name` is, or the empty slot where its probe ends.
    fn probe(&self, name: &str) -> Result<usize, usize> {
        let mask = self.slots.len() - 1;
        // The hash, cut to the table's size (a power of two).
        let mut at = self.hasher.hash_one(name) as usize & mask;
        loop {
            match self.slots[at].get() {
                None => return Err(at),
                Some(entry) if &*entry.0 == name => return Ok(at),
                Some(_) => at = (at + 1) & mask,
            }
        }
    }

    /// The index of `name`'s value, inserting `make()` for it while there is room; `None`
    /// once `max` names are in.
    pub(crate) fn find_or_insert(&self, name: &str, make: impl FnOnce() -> T) -> Option<usize> {
        if let Ok(at) = self.probe(name) {
            return Some(at);
        }
        let mut len = self.len.lock();
        // Again under the lock: another thread may have put it in meanwhile.
        let empty = match self.probe(name) {
            Ok(at) => return Some(at),
            Err(empty) => empty,
        };
        if *len >= self.max {
            return None;
        }
        // Only inserters set slots, one at a time, and this one was seen empty.
        let _ = self.slots[empty].set(Box::new((name.into(), make())));
        *len += 1;
        Some(empty)
    }

    /// The value at an index [`find_or_insert`](Self::find_or_insert) gave.
    pub(crate) fn get(&self, at: usize) -> Option<&T> {
        self.slots.get(at)?.get().map(|entry| &entry.1)
    }

    /// How many names are in.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        *self.len.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_their_values_and_the_table_stops_at_its_bound() {
        let table = Table::new(100);
        let ids: Vec<_> = (0..100)
            .map(|i| table.find_or_insert(&format!("event-{i}"), || i).unwrap())
            .collect();
        assert_eq!(table.len(), 100);
        for (i, &at) in ids.iter().enumerate() {
            assert_eq!(table.get(at), Some(&i));
            let again = table.find_or_insert(&format!("event-{i}"), || unreachable!());
            assert_eq!(again, Some(at), "found, not made again");
        }
        assert_eq!(table.find_or_insert("one-more", || 0), None);
        assert_eq!(table.len(), 100);
        assert_eq!(table.get(usize::MAX), None);
    }

    #[test]
    fn threads_inserting_the_same_names_get_one_value_each() {
        let table = std::sync::Arc::new(Table::new(64));
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let table = std::sync::Arc::clone(&table);
                std::thread::spawn(move || {
                    (0..64)
                        .map(|i| table.find_or_insert(&format!("e{i}"), || (t, i)).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let seen: Vec<Vec<usize>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert!(
            seen.windows(2).all(|w| w[0] == w[1]),
            "every thread found the same slots"
        );
        assert_eq!(table.len(), 64);
        for (i, &at) in seen[0].iter().enumerate() {
            assert_eq!(table.get(at).map(|v| v.1), Some(i));
        }
    }
}
