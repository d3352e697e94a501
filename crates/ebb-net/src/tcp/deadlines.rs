//! `DeadlineHeap`: connections' timer deadlines, earliest first — the far ones (beyond
//! the ring of [`DeadlineWheel`](super::deadline_wheel::DeadlineWheel), which holds the
//! near ones and asks this heap for the rest).
//!
//! An indexed binary min-heap ordered by `(deadline, FourTuple)`, the order the former
//! `BTreeSet<(Instant, FourTuple)>` had, so connections due at the same instant are still
//! visited in four-tuple order. Each connection records where it sits
//! ([`Filed::heap_slot`]) and under which deadline ([`Filed::deadline`]), so moving its deadline
//! is one sift from its own slot: no search, no allocation once the heap's `Vec` has grown,
//! and with one connection per layer no comparison at all. Refiling happens on every change
//! of a connection's earliest deadline (twice per request/response exchange), which made
//! the ordered set's remove + insert a measurable share of each segment's cost.
//!
//! Invariants: `entries[i].conn.heap_slot == i` for every entry; a connection not in the
//! heap has `heap_slot == NOT_FILED` and `deadline == None`; a connection in the heap has
//! `deadline == Some(entries[slot].at)`; every parent's key is `<=` its children's.

use alloc::rc::Rc;
use alloc::vec::Vec;
use core::cell::Cell;

use ebb_core::Instant;

use super::conn_table::{FourTuple, Keyed};

/// What the heap needs of a connection: its four-tuple (the tie-break) and the two cells
/// where it records its place, which only the heap writes.
pub(super) trait Filed: Keyed {
    /// The deadline it is filed under (`None`: not in the heap).
    fn deadline(&self) -> &Cell<Option<Instant>>;
    /// Its index in the heap (`NOT_FILED` when not there).
    fn heap_slot(&self) -> &Cell<usize>;
}

/// [`Filed::heap_slot`] of a connection that is not in the heap.
pub(super) const NOT_FILED: usize = usize::MAX;

struct Entry<C> {
    at: Instant,
    tuple: FourTuple,
    conn: Rc<C>,
}

impl<C> Entry<C> {
    /// Whether `self` sorts before `other` by `(at, tuple)`: the four-tuple is compared
    /// only on a tie.
    #[inline]
    fn before(&self, other: &Entry<C>) -> bool {
        self.at < other.at || (self.at == other.at && self.tuple < other.tuple)
    }
}

/// The layer's connections with an armed timer, earliest deadline first.
pub(super) struct DeadlineHeap<C> {
    entries: Vec<Entry<C>>,
}

impl<C> Default for DeadlineHeap<C> {
    fn default() -> Self {
        DeadlineHeap {
            entries: Vec::new(),
        }
    }
}

impl<C: Filed> DeadlineHeap<C> {
    /// The earliest deadline of any connection.
    pub(super) fn first(&self) -> Option<Instant> {
        self.entries.first().map(|e| e.at)
    }

    /// Files `conn` under `next` (`None`: takes it out). A no-op when already filed so.
    pub(super) fn set(&mut self, conn: &Rc<C>, next: Option<Instant>) {
        if conn.deadline().get() == next {
            return;
        }
        conn.deadline().set(next);
        let slot = conn.heap_slot().get();
        match (slot == NOT_FILED, next) {
            (true, None) => {}
            (true, Some(at)) => {
                let slot = self.entries.len();
                conn.heap_slot().set(slot);
                self.entries.push(Entry {
                    at,
                    tuple: *conn.tuple(),
                    conn: conn.clone(),
                });
                self.sift_up(slot);
            }
            (false, Some(at)) => {
                let earlier = at < self.entries[slot].at;
                self.entries[slot].at = at;
                if earlier {
                    self.sift_up(slot);
                } else {
                    self.sift_down(slot);
                }
            }
            (false, None) => {
                self.remove_at(slot);
            }
        }
    }

    /// Takes out the earliest connection if its deadline is at or before `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<Rc<C>> {
        if self.entries.first()?.at > now {
            return None;
        }
        let conn = self.remove_at(0);
        conn.deadline().set(None);
        Some(conn)
    }

    /// Removes the entry at `slot`, restoring the heap order; returns its connection with
    /// its slot cleared.
    fn remove_at(&mut self, slot: usize) -> Rc<C> {
        let last = self.entries.len() - 1;
        self.swap(slot, last);
        let removed = match self.entries.pop() {
            Some(entry) => entry.conn,
            None => unreachable!("slot {slot} was filed, so the heap is not empty"),
        };
        removed.heap_slot().set(NOT_FILED);
        if slot < self.entries.len() {
            // The entry moved into `slot` came from the bottom: it may belong above or
            // below.
            if slot > 0 && self.entries[slot].before(&self.entries[(slot - 1) / 2]) {
                self.sift_up(slot);
            } else {
                self.sift_down(slot);
            }
        }
        removed
    }

    fn swap(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        self.entries.swap(a, b);
        self.entries[a].conn.heap_slot().set(a);
        self.entries[b].conn.heap_slot().set(b);
    }

    /// Moves the entry at `slot` up to its place. Only the entries passed over get their
    /// slot written on the way; the moving one gets it once at the end.
    fn sift_up(&mut self, mut slot: usize) {
        while slot > 0 {
            let parent = (slot - 1) / 2;
            if !self.entries[slot].before(&self.entries[parent]) {
                break;
            }
            self.entries.swap(parent, slot);
            self.entries[slot].conn.heap_slot().set(slot);
            slot = parent;
        }
        self.entries[slot].conn.heap_slot().set(slot);
    }

    /// Moves the entry at `slot` down to its place, bottom-up (Floyd): first down the
    /// path of smaller children all the way to a leaf (one comparison per level), then
    /// back up (usually one comparison). A deadline that moves later mostly moves to
    /// about the latest of all (re-armed `now` + a constant, while the others were armed
    /// earlier), so its place is near a leaf: this takes about a third of the
    /// comparisons of stopping on the way down (two per level).
    fn sift_down(&mut self, mut slot: usize) {
        let len = self.entries.len();
        if 2 * slot + 1 >= len {
            // A leaf (with one connection, always): already in place.
            return;
        }
        loop {
            let left = 2 * slot + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.entries[right].before(&self.entries[left]) {
                right
            } else {
                left
            };
            self.entries.swap(slot, child);
            self.entries[slot].conn.heap_slot().set(slot);
            slot = child;
        }
        self.sift_up(slot);
    }
}

#[cfg(test)]
mod tests {
    use alloc::collections::BTreeSet;
    use core::net::{Ipv4Addr, SocketAddrV4};

    use super::*;
    use crate::tcp::layer::{ConnRecord, detached_conn};

    fn conn(port: u16) -> Rc<ConnRecord> {
        let local = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), port);
        let remote = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);
        detached_conn(FourTuple { local, remote })
    }

    fn check_invariants(heap: &DeadlineHeap<ConnRecord>) {
        for (slot, entry) in heap.entries.iter().enumerate() {
            assert_eq!(entry.conn.heap_slot.get(), slot);
            assert_eq!(entry.conn.deadline.get(), Some(entry.at));
            if slot > 0 {
                assert!(!entry.before(&heap.entries[(slot - 1) / 2]));
            }
        }
    }

    /// Random moves, insertions and removals, checked against the ordered set the heap
    /// replaced: same first deadline, and due connections popped in the same order.
    #[test]
    fn agrees_with_an_ordered_set() {
        let conns: Vec<Rc<ConnRecord>> = (0..12).map(|i| conn(1000 + i)).collect();
        let mut heap = DeadlineHeap::default();
        let mut reference: BTreeSet<(Instant, FourTuple)> = BTreeSet::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next_random = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for step in 0..4000 {
            let c = &conns[(next_random() % 12) as usize];
            // Few distinct instants, so ties (broken by four-tuple) are common.
            let next = match next_random() % 4 {
                0 => None,
                _ => Some(Instant::from_nanos(next_random() % 16)),
            };
            if let Some(old) = c.deadline.get() {
                reference.remove(&(old, c.tuple));
            }
            if let Some(at) = next {
                reference.insert((at, c.tuple));
            }
            heap.set(c, next);
            assert_eq!(heap.first(), reference.first().map(|&(at, _)| at));
            if step % 50 == 0 {
                let now = Instant::from_nanos(next_random() % 16);
                while let Some(popped) = heap.pop_due(now) {
                    let expected = reference.pop_first().map(|(_, tuple)| tuple);
                    assert_eq!(Some(popped.tuple), expected, "pop order at step {step}");
                    assert_eq!(popped.deadline.get(), None);
                    assert_eq!(popped.heap_slot.get(), NOT_FILED);
                }
                assert!(reference.first().is_none_or(|&(at, _)| at > now));
            }
            check_invariants(&heap);
        }
    }

    /// Many connections whose deadlines keep moving later (as a request/response
    /// exchange moves them) with an occasional earlier one: `first` is always the
    /// earliest deadline, and every deadline fires, in `(deadline, tuple)` order, at its
    /// time and not before.
    #[test]
    fn many_connections_fire_in_order() {
        let conns: Vec<Rc<ConnRecord>> = (0..64).map(|i| conn(2000 + i)).collect();
        let mut heap = DeadlineHeap::default();
        let mut seed = 0x853c_49e6_748f_ea9b_u64;
        let mut next_random = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut now = 0u64;
        let mut fired = 0;
        for round in 0..200 {
            for _ in 0..100 {
                let c = &conns[(next_random() % 64) as usize];
                let next = match next_random() % 10 {
                    // Earlier than usual (a delayed ACK before a probe).
                    0 => now + 1 + next_random() % 40,
                    // Later: a fresh deadline after everything filed so far.
                    _ => now + 200 + next_random() % 100,
                };
                heap.set(c, Some(Instant::from_nanos(next)));
                let earliest = conns.iter().filter_map(|c| c.deadline.get()).min();
                assert_eq!(heap.first(), earliest, "round {round}");
                check_invariants(&heap);
            }
            now += 150;
            let mut due: Vec<(Instant, FourTuple)> = conns
                .iter()
                .filter_map(|c| c.deadline.get().map(|d| (d, c.tuple)))
                .filter(|&(d, _)| d <= Instant::from_nanos(now))
                .collect();
            due.sort();
            let mut popped = Vec::new();
            while let Some(c) = heap.pop_due(Instant::from_nanos(now)) {
                popped.push(c.tuple);
                check_invariants(&heap);
            }
            let expected: Vec<FourTuple> = due.iter().map(|&(_, t)| t).collect();
            assert_eq!(popped, expected, "round {round}");
            fired += popped.len();
            assert!(heap.first().is_none_or(|d| d > Instant::from_nanos(now)));
        }
        assert!(fired > 1000, "deadlines fired: {fired}");
        // Everything left fires eventually.
        let left = conns.iter().filter(|c| c.deadline.get().is_some()).count();
        let mut popped = 0;
        while heap.pop_due(Instant::from_nanos(u64::MAX)).is_some() {
            popped += 1;
        }
        assert_eq!(popped, left);
        assert!(heap.entries.is_empty());
    }
}
