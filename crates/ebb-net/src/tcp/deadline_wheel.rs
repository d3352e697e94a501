//! `DeadlineWheel`: every connection's next timer deadline — what `poll` pops when timers
//! are due and what `poll_at` reads — in a hashed timer wheel for the near future and the
//! indexed [`DeadlineHeap`] for the far one.
//!
//! Most TCP deadlines are moved on every segment and never fire: a request arms the
//! delayed ACK, its response the tail loss probe or retransmission timer, the next
//! request's ACK disarms them. The heap paid a sift (a few levels of comparisons and slot
//! writes) for each move; the wheel pays an unlink and a link in a doubly linked list.
//! A connection keeps its node while disarmed (disarming is an unlink, re-arming a link,
//! no allocation or reference count); [`DeadlineWheel::forget`] frees it when the
//! connection leaves the layer.
//!
//! * The near future, ticks `[base, base + SLOTS)` of [`SLOT_NANOS`] each (about 1.07 s:
//!   delayed ACKs, tail loss probes, the first retransmission timeouts), is a ring of
//!   `SLOTS` lists of nodes, with a bitmap of the non-empty ones. A deadline's own slot
//!   is its tick (or `base`'s, if earlier) modulo `SLOTS`; the node keeps the exact
//!   deadline, so nothing fires early or late — the slot only finds it.
//! * A deadline moved later stays in the slot it is in (filed early): no unlink, no
//!   link. Only a move earlier than its slot relinks it. A scan for the earliest node
//!   moves the early nodes it passes to their own slots, and so does `base` moving past
//!   their slot; as TCP moves a deadline later on every exchange, a connection is
//!   relinked about once per its delayed-ACK time (40 ms), not twice per request.
//! * Later deadlines (keepalive, TIME-WAIT, backed-off timeouts) go to the heap. Every
//!   one of them is later than every deadline in the wheel; they move into the wheel
//!   when `base` reaches them.
//! * The earliest deadline is cached: arming can only lower it (one comparison), and it
//!   is recomputed — the first slot from `base` holding a node filed in its own slot,
//!   the earliest such node — only after the earliest connection was disarmed or moved
//!   (with one connection in the ring, its deadline is the earliest: no scan).
//! * `base` moves to the tick of `now` when `pop_due` finds nothing due, so the ring
//!   never holds a node whose tick is below `base` — except one filed while `base` was
//!   ahead of it, which sits in `base`'s slot and is due as soon as time reaches `base`.
//!
//! Connections due at the same instant are visited in four-tuple order, as with the
//! heap (and the `BTreeSet<(Instant, FourTuple)>` before it).
//!
//! Invariants: a connection with `deadline == None` is in no slot and not in the heap
//! (it may own a node, unlinked); with a deadline and `wheel_node != NO_NODE` it is
//! linked in the ring at that node, whose `at` equals its `deadline`, and not in the
//! heap; otherwise, with a deadline, it is in the heap. A node in use holds its
//! connection (`conn`); `len` counts the linked ones. Every
//! wheel node's effective tick (`max(tick(at), base)`) is in `[base, base + SLOTS)` and
//! the node is in that tick's slot or an earlier one (counting from `base`'s); every heap
//! deadline's tick is `>= base + SLOTS`. A
//! slot's bit is set exactly when its list is not empty. When `earliest_known`,
//! `earliest` is the earliest deadline of both stores.

use alloc::rc::Rc;
use alloc::vec::Vec;
use core::cell::Cell;

use ebb_core::Instant;

use super::conn_table::FourTuple;
use super::deadlines::{DeadlineHeap, Filed};

/// What the wheel needs of a connection beyond what the heap needs: where its node is.
pub(super) trait InWheel: Filed {
    /// Its node in the wheel (`NO_NODE` when not there).
    fn wheel_node(&self) -> &Cell<u32>;
}

/// [`InWheel::wheel_node`] of a connection that is not in the wheel; also the end of a
/// list.
pub(super) const NO_NODE: u32 = u32::MAX;

/// A slot covers 2²⁰ ns (about 1.05 ms): coarse enough that re-arming a timer a few
/// microseconds later mostly stays in its slot, fine enough that a slot holds few nodes.
const SLOT_SHIFT: u32 = 20;
/// A slot's span in nanoseconds.
#[cfg(test)]
const SLOT_NANOS: u64 = 1 << SLOT_SHIFT;
/// Slots in the ring: 1024 × 1.05 ms ≈ 1.07 s, past the 200 ms minimum RTO and the 1 s
/// RTO of a connection without a round-trip sample (a SYN's, a request/response
/// exchange's whose ACKs are never timed), which would otherwise hop between the ring
/// and the heap on every exchange.
const SLOTS: u64 = 1024;
const WORDS: usize = (SLOTS / 64) as usize;

fn tick(at: Instant) -> u64 {
    at.as_nanos() >> SLOT_SHIFT
}

struct Node<C> {
    at: Instant,
    tuple: FourTuple,
    /// `None` while the node is free.
    conn: Option<Rc<C>>,
    prev: u32,
    /// The next node of the slot's list, or of the free list.
    next: u32,
    slot: u16,
}

/// The layer's connections with an armed timer, earliest deadline first.
pub(super) struct DeadlineWheel<C> {
    nodes: Vec<Node<C>>,
    /// Head of the free nodes' list.
    free: u32,
    heads: [u32; SLOTS as usize],
    occupied: [u64; WORDS],
    /// Bit `w` set when `occupied[w]` is not zero: finding the next non-empty slot looks
    /// at two words, not up to `WORDS`.
    words_used: u64,
    /// The tick of the ring's first slot.
    base: u64,
    /// Nodes in the ring.
    len: usize,
    far: DeadlineHeap<C>,
    earliest: Cell<Option<Instant>>,
    earliest_known: Cell<bool>,
}

impl<C> Default for DeadlineWheel<C> {
    fn default() -> Self {
        DeadlineWheel {
            nodes: Vec::new(),
            free: NO_NODE,
            heads: [NO_NODE; SLOTS as usize],
            occupied: [0; WORDS],
            words_used: 0,
            base: 0,
            len: 0,
            far: DeadlineHeap::default(),
            earliest: Cell::new(None),
            earliest_known: Cell::new(true),
        }
    }
}

impl<C: InWheel> DeadlineWheel<C> {
    /// The earliest deadline of any connection.
    pub(super) fn first(&mut self) -> Option<Instant> {
        if self.earliest_known.get() {
            return self.earliest.get();
        }
        let earliest = if self.len > 0 {
            let node = self.earliest_node();
            Some(self.nodes[node as usize].at)
        } else {
            self.far.first()
        };
        self.earliest.set(earliest);
        self.earliest_known.set(true);
        earliest
    }

    /// Files `conn` under `next` (`None`: disarms it). A no-op when already filed so.
    #[inline]
    pub(super) fn set(&mut self, conn: &Rc<C>, next: Option<Instant>) {
        if conn.deadline().get() != next {
            self.refile(conn, next);
        }
    }

    /// Takes `conn` out for good (it leaves the layer): frees its node.
    pub(super) fn forget(&mut self, conn: &Rc<C>) {
        let old = conn.deadline().get();
        let node = conn.wheel_node().get();
        if node == NO_NODE {
            self.far.set(conn, None);
            self.note_removed(old);
            return;
        }
        if old.is_some() {
            self.unlink(node);
            self.len -= 1;
        }
        self.free_node(node);
        conn.wheel_node().set(NO_NODE);
        conn.deadline().set(None);
        self.note_removed(old);
    }

    /// [`set`](Self::set) when the deadline changes.
    fn refile(&mut self, conn: &Rc<C>, next: Option<Instant>) {
        let old = conn.deadline().get();
        let node = conn.wheel_node().get();
        if node != NO_NODE {
            match next {
                Some(at) if self.fits(at) => {
                    // The common move: from one slot of the ring to another (or the same),
                    // or back into it (a disarmed connection keeps its node).
                    conn.deadline().set(next);
                    self.nodes[node as usize].at = at;
                    if old.is_none() {
                        self.link(node, self.slot_of(at));
                        self.len += 1;
                    } else {
                        let place = self.offset(self.nodes[node as usize].slot);
                        if tick(at).max(self.base) - self.base < place {
                            // Earlier than its slot: it must move. Later, it stays where
                            // it is until a scan reaches that slot.
                            self.unlink(node);
                            self.link(node, self.slot_of(at));
                        }
                    }
                    self.note_moved(old, at);
                    return;
                }
                None => {
                    // Disarmed: out of its slot, but the node stays the connection's.
                    self.unlink(node);
                    self.len -= 1;
                    conn.deadline().set(None);
                    self.note_removed(old);
                    return;
                }
                Some(_) => {
                    // Beyond the ring: the node goes, the heap takes it.
                    if old.is_some() {
                        self.unlink(node);
                        self.len -= 1;
                    }
                    self.free_node(node);
                    conn.wheel_node().set(NO_NODE);
                    conn.deadline().set(None);
                }
            }
        } else if old.is_some() {
            self.far.set(conn, None);
        }
        self.note_removed(old);
        if let Some(at) = next {
            self.insert(conn, at);
            self.note_added(at);
        }
    }

    /// A time at or before the earliest deadline, found without scanning a slot's list
    /// where it can be: the cached earliest when known; else, when the first occupied
    /// slot is not `base`'s, the start of that slot's tick — every node in it is due
    /// then or later, whether filed in its own slot or early — or the heap's first if
    /// earlier. Only a first occupied slot at `base` (which may hold deadlines from
    /// before `base`) needs the exact [`first`](Self::first).
    ///
    /// What `poll_at` reports: polling up to one slot (about 1 ms) before a deadline is
    /// harmless — [`pop_due`](Self::pop_due) then finds the exact one — while a scan
    /// after every disarmed or moved earliest deadline cost a request about 190
    /// instructions at 32 connections.
    pub(super) fn due_no_earlier_than(&mut self) -> Option<Instant> {
        if self.earliest_known.get() || self.len == 0 {
            return self.first();
        }
        let slot = self.first_occupied_slot();
        let start = (self.base % SLOTS) as usize;
        if slot == start {
            return self.first();
        }
        let ring = Instant::from_nanos((self.base + self.offset(slot as u16)) << SLOT_SHIFT);
        Some(self.far.first().map_or(ring, |far| far.min(ring)))
    }

    /// Takes out the earliest connection if its deadline is at or before `now`, in
    /// `(deadline, four-tuple)` order. When nothing is due, the ring moves on to `now`.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<Rc<C>> {
        if self.due_no_earlier_than()? > now {
            // Nothing due (see `due_no_earlier_than`): as below, without the scan.
            self.advance(tick(now));
            self.migrate();
            return None;
        }
        loop {
            let earliest = self.first()?;
            if earliest > now || self.len == 0 {
                // Nothing in the ring is due, so no node's deadline is below `now`'s
                // tick: the ring can start there. The heap's deadlines that now fit move
                // in (and may be due, if time jumped).
                self.advance(tick(now));
                if !self.migrate() || earliest > now {
                    return None;
                }
                continue;
            }
            let node = self.earliest_node();
            self.unlink(node);
            self.len -= 1;
            let Some(conn) = self.nodes[node as usize].conn.clone() else {
                unreachable!("node {node} is linked, so in use")
            };
            // It keeps its node: it is usually re-armed at once.
            conn.deadline().set(None);
            self.note_removed(Some(earliest));
            return Some(conn);
        }
    }

    /// Whether a deadline at `at` belongs in the ring.
    fn fits(&self, at: Instant) -> bool {
        tick(at) < self.base.saturating_add(SLOTS)
    }

    /// How many slots after `base`'s `slot` is.
    fn offset(&self, slot: u16) -> u64 {
        (u64::from(slot) + SLOTS - self.base % SLOTS) % SLOTS
    }

    /// Starts the ring at tick `to` (if later than `base`): the nodes of the slots it
    /// leaves behind, all filed early (nothing is due), go to their own slots.
    fn advance(&mut self, to: u64) {
        if to <= self.base {
            return;
        }
        let mut detached = NO_NODE;
        if self.len > 0 {
            for step in 0..(to - self.base).min(SLOTS) {
                let slot = ((self.base + step) % SLOTS) as usize;
                if self.occupied[slot / 64] & (1 << (slot % 64)) == 0 {
                    continue;
                }
                let mut node = self.heads[slot];
                while node != NO_NODE {
                    let next = self.nodes[node as usize].next;
                    self.nodes[node as usize].next = detached;
                    detached = node;
                    node = next;
                }
                self.heads[slot] = NO_NODE;
                self.clear_bit(slot);
            }
        }
        self.base = to;
        while detached != NO_NODE {
            let next = self.nodes[detached as usize].next;
            self.link(detached, self.slot_of(self.nodes[detached as usize].at));
            detached = next;
        }
    }

    /// The ring slot of a deadline that fits.
    fn slot_of(&self, at: Instant) -> u16 {
        (tick(at).max(self.base) % SLOTS) as u16
    }

    /// Files `conn`, in no store, under `at`.
    fn insert(&mut self, conn: &Rc<C>, at: Instant) {
        if !self.fits(at) {
            self.far.set(conn, Some(at));
            return;
        }
        let node = if self.free != NO_NODE {
            let node = self.free;
            self.free = self.nodes[node as usize].next;
            let entry = &mut self.nodes[node as usize];
            entry.at = at;
            entry.tuple = *conn.tuple();
            entry.conn = Some(conn.clone());
            node
        } else {
            let node = u32::try_from(self.nodes.len())
                .ok()
                .filter(|&n| n != NO_NODE)
                .expect("fewer than 2³² armed connections");
            self.nodes.push(Node {
                at,
                tuple: *conn.tuple(),
                conn: Some(conn.clone()),
                prev: NO_NODE,
                next: NO_NODE,
                slot: 0,
            });
            node
        };
        self.link(node, self.slot_of(at));
        self.len += 1;
        conn.wheel_node().set(node);
        conn.deadline().set(Some(at));
    }

    /// Moves the deadlines of the heap that now fit into the ring; whether any did.
    fn migrate(&mut self) -> bool {
        let mut moved = false;
        while let Some(at) = self.far.first()
            && self.fits(at)
        {
            let Some(conn) = self.far.pop_due(at) else {
                unreachable!("the heap's first deadline is due at itself")
            };
            self.insert(&conn, at);
            moved = true;
        }
        moved
    }

    /// Frees node `node` (not linked), dropping its hold on its connection.
    fn free_node(&mut self, node: u32) {
        let entry = &mut self.nodes[node as usize];
        entry.conn = None;
        entry.next = self.free;
        self.free = node;
    }

    fn link(&mut self, node: u32, slot: u16) {
        let head = self.heads[usize::from(slot)];
        if head != NO_NODE {
            self.nodes[head as usize].prev = node;
        }
        let entry = &mut self.nodes[node as usize];
        entry.prev = NO_NODE;
        entry.next = head;
        entry.slot = slot;
        self.heads[usize::from(slot)] = node;
        self.occupied[usize::from(slot / 64)] |= 1 << (slot % 64);
        self.words_used |= 1 << (slot / 64);
    }

    /// Marks `slot` empty.
    fn clear_bit(&mut self, slot: usize) {
        let word = slot / 64;
        self.occupied[word] &= !(1 << (slot % 64));
        if self.occupied[word] == 0 {
            self.words_used &= !(1 << word);
        }
    }

    fn unlink(&mut self, node: u32) {
        let Node {
            prev, next, slot, ..
        } = self.nodes[node as usize];
        if next != NO_NODE {
            self.nodes[next as usize].prev = prev;
        }
        if prev != NO_NODE {
            self.nodes[prev as usize].next = next;
        } else {
            self.heads[usize::from(slot)] = next;
            if next == NO_NODE {
                self.clear_bit(usize::from(slot));
            }
        }
    }

    /// The ring's node with the earliest `(deadline, four-tuple)`: the earliest of the
    /// nodes filed in their own slot in the first slot from `base`'s that has any. The
    /// nodes filed early that it passes move to their own slots. The ring must not be
    /// empty.
    fn earliest_node(&mut self) -> u32 {
        loop {
            let slot = self.first_occupied_slot();
            let mut best = NO_NODE;
            let mut node = self.heads[slot];
            while node != NO_NODE {
                let (next, at) = (self.nodes[node as usize].next, self.nodes[node as usize].at);
                let own = self.slot_of(at);
                if usize::from(own) != slot {
                    self.unlink(node);
                    self.link(node, own);
                } else if best == NO_NODE || {
                    let (candidate, current) =
                        (&self.nodes[node as usize], &self.nodes[best as usize]);
                    candidate.at < current.at
                        || (candidate.at == current.at && candidate.tuple < current.tuple)
                } {
                    best = node;
                }
                node = next;
            }
            if best != NO_NODE {
                return best;
            }
        }
    }

    /// The first slot with nodes, going round from `base`'s.
    fn first_occupied_slot(&self) -> usize {
        let start = (self.base % SLOTS) as usize;
        let (word, bit) = (start / 64, start % 64);
        // `base`'s word from its bit on, the words after it, those before it, then
        // `base`'s word below its bit.
        let at_or_after = self.occupied[word] & (!0u64 << bit);
        if at_or_after != 0 {
            return word * 64 + at_or_after.trailing_zeros() as usize;
        }
        let others = self.words_used & !(1u64 << word);
        if others != 0 {
            let after = others & (!0u64 << word);
            let w = if after != 0 { after } else { others }.trailing_zeros() as usize;
            return w * 64 + self.occupied[w].trailing_zeros() as usize;
        }
        let below = self.occupied[word] & !(!0u64 << bit);
        if below != 0 {
            return word * 64 + below.trailing_zeros() as usize;
        }
        unreachable!("the ring is not empty")
    }

    /// A deadline `old` left a store: if it was the earliest, the earliest is unknown.
    fn note_removed(&self, old: Option<Instant>) {
        if old.is_some() && old == self.earliest.get() {
            self.earliest_known.set(false);
        }
    }

    /// A connection's deadline moved from `old` to `at` (in the ring).
    fn note_moved(&self, old: Option<Instant>, at: Instant) {
        if self.len == 1 {
            // Alone in the ring, so before everything in the heap.
            self.earliest.set(Some(at));
            self.earliest_known.set(true);
        } else {
            self.note_removed(old);
            self.note_added(at);
        }
    }

    /// A deadline `at` was filed: the earliest, if known, is it or earlier.
    fn note_added(&self, at: Instant) {
        if self.earliest_known.get() && self.earliest.get().is_none_or(|e| at < e) {
            self.earliest.set(Some(at));
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::collections::BTreeSet;
    use core::net::{Ipv4Addr, SocketAddrV4};

    use proptest::prelude::*;

    use super::*;
    use crate::tcp::deadlines::NOT_FILED;
    use crate::tcp::layer::{ConnRecord, detached_conn};

    fn conn(port: u16) -> Rc<ConnRecord> {
        let local = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), port);
        let remote = SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), 80);
        detached_conn(FourTuple { local, remote })
    }

    fn at(nanos: u64) -> Instant {
        Instant::from_nanos(nanos)
    }

    /// The module's invariants, checked from scratch.
    fn check_invariants(wheel: &mut DeadlineWheel<ConnRecord>, conns: &[Rc<ConnRecord>]) {
        let mut in_ring = 0;
        for slot in 0..SLOTS as usize {
            let occupied = wheel.occupied[slot / 64] & (1 << (slot % 64)) != 0;
            assert_eq!(occupied, wheel.heads[slot] != NO_NODE, "slot {slot}'s bit");
            let mut prev = NO_NODE;
            let mut node = wheel.heads[slot];
            while node != NO_NODE {
                let entry = &wheel.nodes[node as usize];
                assert_eq!(entry.prev, prev);
                assert_eq!(usize::from(entry.slot), slot);
                let effective = tick(entry.at).max(wheel.base);
                assert!(effective < wheel.base + SLOTS, "node beyond the ring");
                let place = wheel.offset(slot as u16);
                assert!(
                    place <= effective - wheel.base,
                    "node filed after its deadline"
                );
                let c = entry.conn.as_ref().expect("a linked node is in use");
                assert_eq!(c.wheel_node.get(), node);
                assert_eq!(c.deadline.get(), Some(entry.at));
                assert_eq!(c.tuple, entry.tuple);
                in_ring += 1;
                prev = node;
                node = entry.next;
            }
        }
        assert_eq!(in_ring, wheel.len);
        for (w, bits) in wheel.occupied.iter().enumerate() {
            assert_eq!(
                *bits != 0,
                wheel.words_used & (1 << w) != 0,
                "word {w}'s bit"
            );
        }
        for c in conns {
            let node = c.wheel_node.get();
            if node != NO_NODE {
                let owner = wheel.nodes[node as usize].conn.as_ref();
                assert!(
                    owner.is_some_and(|o| Rc::ptr_eq(o, c)),
                    "node not the connection's"
                );
            }
            match (c.deadline.get(), node, c.heap_slot.get()) {
                (None, _, NOT_FILED) => {}
                (Some(_), node, NOT_FILED) if node != NO_NODE => {}
                (Some(d), NO_NODE, slot) if slot != NOT_FILED => {
                    assert!(tick(d) >= wheel.base + SLOTS, "a near deadline in the heap")
                }
                other => panic!("inconsistent cells {other:?}"),
            }
        }
        let earliest = conns.iter().filter_map(|c| c.deadline.get()).min();
        assert_eq!(wheel.first(), earliest);
    }

    /// Applies one step to the wheel and to the reference set (the `BTreeSet` the heap
    /// replaced, and the wheel the heap).
    fn file(
        wheel: &mut DeadlineWheel<ConnRecord>,
        reference: &mut BTreeSet<(Instant, FourTuple)>,
        c: &Rc<ConnRecord>,
        next: Option<Instant>,
    ) {
        if let Some(old) = c.deadline.get() {
            reference.remove(&(old, c.tuple));
        }
        if let Some(at) = next {
            reference.insert((at, c.tuple));
        }
        wheel.set(c, next);
    }

    /// Pops everything due at `now` from both and compares the order.
    fn pop_all(
        wheel: &mut DeadlineWheel<ConnRecord>,
        reference: &mut BTreeSet<(Instant, FourTuple)>,
        now: Instant,
    ) -> usize {
        let mut popped = 0;
        while let Some(c) = wheel.pop_due(now) {
            let expected = reference.pop_first().map(|(_, tuple)| tuple);
            assert_eq!(Some(c.tuple), expected, "pop order at {now:?}");
            assert_eq!(c.deadline.get(), None);
            popped += 1;
        }
        assert!(
            reference.first().is_none_or(|&(d, _)| d > now),
            "left a due deadline at {now:?}"
        );
        popped
    }

    #[test]
    fn fires_in_order_with_ties_by_four_tuple() {
        let conns: Vec<Rc<ConnRecord>> = (0..6).map(|i| conn(1000 + i)).collect();
        let mut wheel = DeadlineWheel::default();
        let mut reference = BTreeSet::new();
        // Two at the same instant (in reverse tuple order), two in one slot, one far.
        let plan = [
            5_000_000,
            3_000_000,
            3_000_000,
            3_000_100,
            0,
            90_000_000_000,
        ];
        for (c, &t) in conns.iter().zip(&plan).rev() {
            file(&mut wheel, &mut reference, c, Some(at(t)));
        }
        check_invariants(&mut wheel, &conns);
        assert_eq!(wheel.first(), Some(at(0)));
        assert_eq!(pop_all(&mut wheel, &mut reference, at(3_000_000)), 3);
        check_invariants(&mut wheel, &conns);
        assert_eq!(wheel.first(), Some(at(3_000_100)));
        assert_eq!(wheel.pop_due(at(3_000_099)).map(|c| c.tuple), None);
        assert_eq!(pop_all(&mut wheel, &mut reference, at(u64::MAX)), 3);
        assert_eq!(wheel.first(), None);
        check_invariants(&mut wheel, &conns);
    }

    /// A deadline re-armed later on every exchange, as TCP's are, stays in the ring
    /// (the ring moves on with `now`) and fires exactly at its last value.
    #[test]
    fn re_armed_deadline_fires_at_its_last_value() {
        let c = conn(7);
        let mut wheel = DeadlineWheel::default();
        let mut now = 0;
        for _ in 0..10_000 {
            now += 37_000; // 37 µs between exchanges
            wheel.set(&c, Some(at(now + 40_000_000)));
            assert_ne!(c.wheel_node.get(), NO_NODE, "in the ring");
            assert!(wheel.pop_due(at(now)).is_none());
            assert_eq!(wheel.first(), Some(at(now + 40_000_000)));
        }
        let last = now + 40_000_000;
        assert!(wheel.pop_due(at(last - 1)).is_none());
        assert!(wheel.pop_due(at(last)).is_some());
        assert_eq!(wheel.first(), None);
        check_invariants(&mut wheel, &[c]);
    }

    /// Moving a deadline later leaves its node where it is (filed early); a scan, or the
    /// ring moving past that slot, puts it in its own slot, and it fires at its new
    /// value, not the old.
    #[test]
    fn later_deadline_stays_filed_early_until_reached() {
        let (a, b) = (conn(1), conn(2));
        let mut wheel = DeadlineWheel::default();
        // Alone in the ring: moved on by `advance`.
        wheel.set(&a, Some(at(3 * SLOT_NANOS)));
        let slot = wheel.nodes[a.wheel_node.get() as usize].slot;
        wheel.set(&a, Some(at(100 * SLOT_NANOS)));
        assert_eq!(
            wheel.nodes[a.wheel_node.get() as usize].slot,
            slot,
            "not moved"
        );
        assert!(wheel.pop_due(at(10 * SLOT_NANOS)).is_none());
        assert_eq!(wheel.base, 10);
        assert_eq!(
            wheel.nodes[a.wheel_node.get() as usize].slot,
            100,
            "in its own slot"
        );
        check_invariants(&mut wheel, &[a.clone(), b.clone()]);
        // With another: moved on by the scan for the earliest.
        wheel.set(&b, Some(at(20 * SLOT_NANOS)));
        wheel.set(&a, Some(at(15 * SLOT_NANOS)));
        wheel.set(&a, Some(at(90 * SLOT_NANOS)));
        assert_eq!(
            wheel.nodes[a.wheel_node.get() as usize].slot,
            15,
            "not moved"
        );
        assert_eq!(wheel.first(), Some(at(20 * SLOT_NANOS)));
        assert_eq!(
            wheel.nodes[a.wheel_node.get() as usize].slot,
            90,
            "in its own slot"
        );
        assert!(wheel.pop_due(at(20 * SLOT_NANOS - 1)).is_none());
        assert_eq!(
            wheel.pop_due(at(20 * SLOT_NANOS)).map(|c| c.tuple),
            Some(b.tuple)
        );
        assert!(wheel.pop_due(at(90 * SLOT_NANOS - 1)).is_none());
        assert_eq!(
            wheel.pop_due(at(90 * SLOT_NANOS)).map(|c| c.tuple),
            Some(a.tuple)
        );
        check_invariants(&mut wheel, &[a, b]);
    }

    /// Disarming keeps the node (re-arming reuses it); `forget` frees it for the next
    /// connection and drops the wheel's hold on the connection.
    #[test]
    fn disarmed_connection_keeps_its_node_until_forgotten() {
        let (a, b) = (conn(1), conn(2));
        let mut wheel = DeadlineWheel::default();
        wheel.set(&a, Some(at(5_000_000)));
        let node = a.wheel_node.get();
        wheel.set(&a, None);
        assert_eq!(
            (a.wheel_node.get(), wheel.len, wheel.first()),
            (node, 0, None)
        );
        wheel.set(&a, Some(at(9_000_000)));
        assert_eq!(a.wheel_node.get(), node, "re-armed on its own node");
        assert_eq!(wheel.first(), Some(at(9_000_000)));
        let held = Rc::strong_count(&a);
        wheel.forget(&a);
        assert_eq!(Rc::strong_count(&a), held - 1);
        assert_eq!(
            (a.wheel_node.get(), a.deadline.get(), wheel.first()),
            (NO_NODE, None, None)
        );
        wheel.set(&b, Some(at(1)));
        assert_eq!(b.wheel_node.get(), node, "the freed node is reused");
        assert_eq!(wheel.nodes.len(), 1);
        check_invariants(&mut wheel, &[a, b]);
    }

    /// Deadlines beyond the ring wait in the heap and come into the ring as time
    /// approaches them, also when time jumps past them.
    #[test]
    fn far_deadlines_move_into_the_ring() {
        let conns: Vec<Rc<ConnRecord>> = (0..4).map(|i| conn(40 + i)).collect();
        let mut wheel = DeadlineWheel::default();
        let mut reference = BTreeSet::new();
        let hour = 3_600_000_000_000;
        file(&mut wheel, &mut reference, &conns[0], Some(at(2 * hour)));
        file(&mut wheel, &mut reference, &conns[1], Some(at(hour)));
        file(
            &mut wheel,
            &mut reference,
            &conns[2],
            Some(at(60_000_000_000)),
        );
        check_invariants(&mut wheel, &conns);
        assert_eq!(wheel.len, 0, "all far");
        // Walk to within the ring's reach of the second: it moves in.
        assert_eq!(pop_all(&mut wheel, &mut reference, at(59_900_000_000)), 0);
        check_invariants(&mut wheel, &conns);
        assert_eq!(wheel.len, 1);
        assert_eq!(pop_all(&mut wheel, &mut reference, at(60_000_000_000)), 1);
        // A jump past both remaining deadlines: both fire, in order.
        file(
            &mut wheel,
            &mut reference,
            &conns[3],
            Some(at(60_000_000_001)),
        );
        assert_eq!(pop_all(&mut wheel, &mut reference, at(3 * hour)), 3);
        check_invariants(&mut wheel, &conns);
    }

    /// The ring goes round many times: slots are reused modulo `SLOTS`, and a deadline
    /// filed behind `base` (time went backwards for it) still fires first.
    #[test]
    fn ring_wraps_around() {
        let conns: Vec<Rc<ConnRecord>> = (0..8).map(|i| conn(60 + i)).collect();
        let mut wheel = DeadlineWheel::default();
        let mut reference = BTreeSet::new();
        let mut now = 0;
        let mut fired = 0;
        for round in 0..3000u64 {
            now += 150 * SLOT_NANOS / 7;
            let c = &conns[(round % 8) as usize];
            let offset = (round * 7919) % (300 * SLOT_NANOS);
            file(&mut wheel, &mut reference, c, Some(at(now + offset)));
            if round % 97 == 0 {
                // Behind the ring's start.
                let behind = now.saturating_sub(5 * SLOT_NANOS);
                file(&mut wheel, &mut reference, &conns[7], Some(at(behind)));
            }
            fired += pop_all(&mut wheel, &mut reference, at(now));
            check_invariants(&mut wheel, &conns);
        }
        assert!(wheel.base > 10 * SLOTS, "went round: base {}", wheel.base);
        assert!(fired > 100, "fired {fired}");
    }

    #[derive(Clone, Debug)]
    enum Step {
        /// Files connection `.0` under `now + .1` nanoseconds (or takes it out).
        Set(usize, Option<u64>),
        /// Moves time on by `.0` nanoseconds and pops what is due.
        Advance(u64),
        /// Connection `.0` leaves the layer.
        Forget(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        // Offsets from a few nanoseconds (ties, one slot) to beyond the ring (the heap).
        let offset = prop_oneof![
            0u64..64,
            0..4 * SLOT_NANOS,
            0..SLOTS * SLOT_NANOS,
            SLOTS * SLOT_NANOS - 4 * SLOT_NANOS..SLOTS * SLOT_NANOS + 4 * SLOT_NANOS,
            0..1_000_000_000_000u64,
        ];
        prop_oneof![
            1 => (0usize..10).prop_map(Step::Forget),
            8 => (0usize..10, proptest::option::weighted(0.85, offset)).prop_map(|(c, o)| Step::Set(c, o)),
            2 => prop_oneof![0u64..2 * SLOT_NANOS, 0..600 * SLOT_NANOS, 0..2_000_000_000_000u64]
                .prop_map(Step::Advance),
        ]
    }

    proptest! {
        /// Against the ordered set: the same earliest deadline after every step, and the
        /// same connections popped in the same order.
        #[test]
        fn agrees_with_an_ordered_set(steps in proptest::collection::vec(step(), 1..300)) {
            let conns: Vec<Rc<ConnRecord>> = (0..10).map(|i| conn(3000 + i)).collect();
            let mut wheel = DeadlineWheel::default();
            let mut reference = BTreeSet::new();
            let mut now = 0u64;
            for s in steps {
                match s {
                    Step::Set(c, offset) => {
                        let next = offset.map(|o| at(now.saturating_add(o)));
                        file(&mut wheel, &mut reference, &conns[c], next);
                    }
                    Step::Advance(by) => {
                        now = now.saturating_add(by);
                        pop_all(&mut wheel, &mut reference, at(now));
                    }
                    Step::Forget(c) => {
                        let c = &conns[c];
                        if let Some(old) = c.deadline.get() {
                            reference.remove(&(old, c.tuple));
                        }
                        wheel.forget(c);
                        prop_assert_eq!(c.wheel_node.get(), NO_NODE);
                        prop_assert_eq!(c.heap_slot.get(), NOT_FILED);
                    }
                }
                let exact = reference.first().map(|&(d, _)| d);
                // The bound first: `first` caches the exact earliest, which it returns.
                let bound = wheel.due_no_earlier_than();
                prop_assert!(bound.is_some() == exact.is_some() && bound <= exact,
                    "bound {:?} after the earliest {:?}", bound, exact);
                prop_assert_eq!(wheel.first(), exact);
                check_invariants(&mut wheel, &conns);
            }
            pop_all(&mut wheel, &mut reference, at(u64::MAX));
            prop_assert_eq!(wheel.first(), None);
        }
    }
}
