//! Timers: a per-core deadline heap, fed the time by the event loop.
//!
//! [`TimerQueue`] is a pure data structure — it never reads a clock — so its tests, and the
//! event loop's, choose exactly what time it is. Cancelled timers are removed lazily: their
//! heap entries are skipped when they surface, and the heap is rebuilt when stale entries
//! outnumber live ones, so arming and cancelling many long timers (TCP retransmissions)
//! cannot grow memory without bound.

use crate::Instant;
use alloc::collections::BinaryHeap;
use alloc::vec::Vec;
use core::cmp::Reverse;
use core::task::Waker;

/// Names one armed timer, to update or cancel it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerKey {
    slot: usize,
    generation: u64,
}

#[derive(Default)]
struct Slot {
    /// Zero when the slot is free.
    generation: u64,
    waker: Option<Waker>,
    fired: bool,
}

/// The armed timers of one core.
#[derive(Default)]
pub(crate) struct TimerQueue {
    heap: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    next_generation: u64,
    live: usize,
}

impl TimerQueue {
    /// Arms a timer that wakes `waker` once `deadline` has passed.
    pub(crate) fn insert(&mut self, deadline: Instant, waker: Waker) -> TimerKey {
        self.next_generation += 1;
        let generation = self.next_generation;
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot::default());
            self.slots.len() - 1
        });
        self.slots[slot] = Slot {
            generation,
            waker: Some(waker),
            fired: false,
        };
        self.heap.push(Reverse((deadline, generation, slot)));
        self.live += 1;
        TimerKey { slot, generation }
    }

    fn slot(&mut self, key: TimerKey) -> Option<&mut Slot> {
        self.slots
            .get_mut(key.slot)
            .filter(|s| s.generation == key.generation)
    }

    /// Whether the timer has expired.
    pub(crate) fn has_fired(&mut self, key: TimerKey) -> bool {
        self.slot(key).is_some_and(|s| s.fired)
    }

    /// Replaces the waker of a pending timer (a future polled from a new context).
    pub(crate) fn set_waker(&mut self, key: TimerKey, waker: &Waker) {
        if let Some(slot) = self.slot(key)
            && !slot.waker.as_ref().is_some_and(|w| w.will_wake(waker))
        {
            slot.waker = Some(waker.clone());
        }
    }

    /// Disarms a timer (fired or not) and frees its slot.
    pub(crate) fn remove(&mut self, key: TimerKey) {
        let Some(slot) = self.slot(key) else { return };
        let was_pending = !slot.fired;
        *slot = Slot::default();
        self.free.push(key.slot);
        if was_pending {
            self.live -= 1;
            self.compact_if_stale();
        }
    }

    /// The earliest deadline of a pending timer.
    pub(crate) fn next_deadline(&mut self) -> Option<Instant> {
        while let Some(&Reverse((deadline, generation, slot))) = self.heap.peek() {
            if self.is_pending(slot, generation) {
                return Some(deadline);
            }
            self.heap.pop();
        }
        None
    }

    /// Whether any timer is pending.
    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Fires every timer whose deadline is at or before `now`, in deadline order, waking
    /// its waker. Returns how many fired.
    pub(crate) fn expire(&mut self, now: Instant) -> usize {
        let mut fired = 0;
        while let Some(&Reverse((deadline, generation, slot))) = self.heap.peek() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            if !self.is_pending(slot, generation) {
                continue;
            }
            let entry = &mut self.slots[slot];
            entry.fired = true;
            self.live -= 1;
            fired += 1;
            if let Some(waker) = entry.waker.take() {
                waker.wake();
            }
        }
        fired
    }

    fn is_pending(&self, slot: usize, generation: u64) -> bool {
        self.slots
            .get(slot)
            .is_some_and(|s| s.generation == generation && !s.fired)
    }

    fn compact_if_stale(&mut self) {
        if self.heap.len() > 2 * self.live + 64 {
            let slots = &self.slots;
            self.heap.retain(|Reverse((_, generation, slot))| {
                slots
                    .get(*slot)
                    .is_some_and(|s| s.generation == *generation && !s.fired)
            });
        }
    }

    #[cfg(test)]
    pub(crate) fn heap_len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::sync::Arc;
    use alloc::task::Wake;
    use core::sync::atomic::{AtomicUsize, Ordering};

    struct CountingWaker(AtomicUsize);
    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<CountingWaker>, Waker) {
        let c = Arc::new(CountingWaker(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn fires_in_deadline_order_and_only_when_due() {
        let mut q = TimerQueue::default();
        let (c1, w1) = counter();
        let (c2, w2) = counter();
        let k2 = q.insert(at(20), w2);
        let k1 = q.insert(at(10), w1);
        assert_eq!(q.next_deadline(), Some(at(10)));
        assert_eq!(q.expire(at(9)), 0);
        assert_eq!(q.expire(at(10)), 1);
        assert_eq!(c1.0.load(Ordering::SeqCst), 1);
        assert!(q.has_fired(k1) && !q.has_fired(k2));
        assert_eq!(q.next_deadline(), Some(at(20)));
        assert_eq!(q.expire(at(1000)), 1);
        assert_eq!(c2.0.load(Ordering::SeqCst), 1);
        assert!(q.is_empty());
        assert_eq!(q.next_deadline(), None);
    }

    #[test]
    fn removed_timers_never_fire_and_slots_are_reused_safely() {
        let mut q = TimerQueue::default();
        let (c, w) = counter();
        let k = q.insert(at(5), w.clone());
        q.remove(k);
        let (c2, w2) = counter();
        let k2 = q.insert(at(7), w2);
        assert_eq!(k.slot, k2.slot, "slot reused");
        assert!(!q.has_fired(k), "a stale key sees nothing");
        assert_eq!(q.expire(at(100)), 1);
        assert_eq!(c.0.load(Ordering::SeqCst), 0);
        assert_eq!(c2.0.load(Ordering::SeqCst), 1);
        q.remove(k); // stale remove is harmless
        assert!(q.has_fired(k2));
    }

    #[test]
    fn cancelled_entries_are_compacted() {
        let mut q = TimerQueue::default();
        let (_c, w) = counter();
        for i in 0..10_000 {
            let k = q.insert(at(1_000 + i), w.clone());
            q.remove(k);
        }
        assert!(
            q.heap_len() <= 64 + 1,
            "heap holds {} stale entries",
            q.heap_len()
        );
        assert!(q.is_empty());
    }
}
