//! [`RcuHashMap`]: a chained hash map whose reads take no locks.
//!
//! Layout: the map points (`AtomicPtr`) to a [`Table`], an array of bucket heads; each
//! bucket is a singly linked list of immutable [`Node`]s (only `next` ever changes).
//!
//! * **Readers** (on a core) load the table pointer and follow `next` pointers with
//!   Acquire loads, and nothing else: no lock, no read-modify-write, no store.
//! * **Writers** serialize on one spin mutex per map, build a new node completely, then
//!   publish it with a single Release store of a bucket head or a `next` pointer.
//!   Insert-new prepends; replace swaps a new node in place of the old one (the new
//!   node's `next` is the old one's); remove points the predecessor past the node.
//!   An unlinked node is retired with `call_rcu` and freed after a grace period.
//! * **Growth**: when `len` exceeds the bucket count the writer builds a table twice
//!   as large filled with *copies* of every entry, publishes it with one Release store
//!   of the table pointer, and retires the whole old table. Readers that loaded the
//!   old pointer finish on the old table, which is intact and frozen (no writer
//!   touches a retired table). Copying is what makes this simple and obviously correct:
//!   a node is linked in exactly one table, so no node is ever reachable from two
//!   chains with different `next` pointers, which in-place "unzipping" schemes only
//!   avoid by waiting for grace periods mid-resize — impossible here, because a
//!   non-preemptive core may not block. The cost is `K: Clone + V: Clone` and O(n)
//!   allocation per doubling (amortized O(1) per insert). The map never shrinks.
//!
//! Why one mutex per map rather than striped bucket locks: a resize must exclude every
//! writer anyway, writes are short (no allocation-heavy work except during growth),
//! and readers, the common case for a connection table or a cache, never touch the
//! lock. Writers on different cores contend only with each other, and a hot map can be
//! sharded into several maps by the user.
//!
//! Invariants:
//! * A node reachable from a table's buckets is owned by that table (freed by
//!   `Table::drop`); an unlinked node or a replaced table is owned by exactly one
//!   pending RCU callback. Nothing is reachable from two owners.
//! * Nodes are immutable once published, except their `next` pointer, which only the
//!   writer holding the mutex stores to, and never on a node that is already unlinked
//!   or in a retired table.
//! * References handed to user closures never outlive the closure call, hence never
//!   outlive the read window (the event-loop iteration).

use super::domain::RcuDomain;
use crate::percore::current_core;
use alloc::boxed::Box;
use alloc::sync::Arc;
use core::borrow::Borrow;
use core::hash::{BuildHasher, Hash};
use core::marker::PhantomData;
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use spin::Mutex;

/// Default hasher builder: [`foldhash`]'s fast, `no_std` `RandomState`. Its seed comes
/// from address-space randomization (no OS randomness without `std`), so it resists
/// hash flooding only as well as ASLR is unpredictable; for keys chosen by a remote
/// party (e.g. connection tuples) pass a secretly seeded builder to
/// [`RcuHashMap::with_hasher`], e.g. `foldhash::fast::SeedableRandomState::with_seed`.
pub type DefaultHashBuilder = foldhash::fast::RandomState;

/// Smallest bucket count; always a power of two.
const MIN_BUCKETS: usize = 8;

struct Node<K, V> {
    next: AtomicPtr<Node<K, V>>,
    hash: u64,
    key: K,
    value: V,
}

struct Table<K, V> {
    /// Power-of-two length; a key lives in bucket `hash & (len - 1)`.
    buckets: Box<[AtomicPtr<Node<K, V>>]>,
    /// The table owns its nodes: `Send`/`Sync` follow `K` and `V`.
    _owns: PhantomData<Box<Node<K, V>>>,
}

impl<K, V> Table<K, V> {
    fn new(buckets: usize) -> Self {
        debug_assert!(buckets.is_power_of_two());
        Table {
            buckets: (0..buckets)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
            _owns: PhantomData,
        }
    }

    fn bucket(&self, hash: u64) -> &AtomicPtr<Node<K, V>> {
        // Truncating the hash is intended: only its low bits select the bucket.
        &self.buckets[(hash as usize) & (self.buckets.len() - 1)]
    }
}

impl<K, V> Drop for Table<K, V> {
    fn drop(&mut self) {
        for head in self.buckets.iter_mut() {
            let mut next = *head.get_mut();
            while !next.is_null() {
                // Soundness: `next` is linked in this table, which owns it (module
                // invariant); the table is dropped either by the map's own drop
                // (exclusive access, no readers) or by an RCU callback after a grace
                // period (no readers left), and each node is visited once.
                // SAFETY: by the argument just above.
                let mut node = unsafe { Box::from_raw(next) };
                next = *node.next.get_mut();
            }
        }
    }
}

/// Iterates over one chain for the duration `'r` of a read.
struct Chain<'r, K, V> {
    next: *const Node<K, V>,
    _read: PhantomData<&'r Node<K, V>>,
}

impl<'r, K, V> Iterator for Chain<'r, K, V> {
    type Item = &'r Node<K, V>;

    fn next(&mut self) -> Option<&'r Node<K, V>> {
        if self.next.is_null() {
            return None;
        }
        // Soundness: `self.next` was loaded (Acquire, so the node's contents are
        // visible) during the read `'r` from a table or node that was alive then. A
        // node unlinked after that load is only freed after a grace period, which
        // cannot end before this read's core passes a quiescent state, and `'r` ends
        // before that: it is confined to a read closure run under a read guard (see
        // `RcuHashMap::read`). Without a guard the writer lock is held, so nothing is
        // unlinked at all.
        // SAFETY: by the argument just above.
        let node = unsafe { &*self.next };
        self.next = node.next.load(Ordering::Acquire);
        Some(node)
    }
}

/// An unlinked node or table, owned by the RCU callback that frees it.
struct Retired<T>(NonNull<T>);

// SAFETY: a `Retired<T>` is the only owner of its `T` (it was unlinked; readers only
// borrow it until the grace period ends, which is before `free` can run), so sending
// it sends a `T`.
unsafe impl<T: Send> Send for Retired<T> {}

impl<T> Retired<T> {
    /// Frees the object. Only called from an RCU callback, i.e. after a grace period
    /// that began after the object was unlinked.
    fn free(self) {
        // SAFETY: the pointer came from `Box::into_raw` (see `RcuHashMap::retire`),
        // nothing else owns it, and the grace period has ended so no reader holds it.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// A hash map whose reads take no locks, for data read on every core and written
/// rarely (connection tables, caches).
///
/// Reads (`get`, `get_cloned`, `contains_key`, `for_each`) lend references to a closure
/// only, run under an [`RcuReadGuard`](super::RcuReadGuard), so a reference cannot
/// outlive the read window. They are lock-free on an active core of the map's
/// [`RcuDomain`] (see [`RcuDomain::read_guard`]); on any other thread, or on an idle
/// core, they fall back to taking the writer lock, which is correct but slow. Closures
/// passed to reads must not write to the same map (off core that would self-deadlock on
/// the writer lock).
///
/// Writes serialize on a per-map spin mutex. Removed and replaced entries are dropped
/// after a grace period, on the writing core, not returned: readers may still see them.
pub struct RcuHashMap<K, V, S = DefaultHashBuilder> {
    table: AtomicPtr<Table<K, V>>,
    len: AtomicUsize,
    writer: Mutex<()>,
    hash_builder: S,
    domain: Arc<RcuDomain>,
    /// The map owns `K`s and `V`s: `Send`/`Sync` follow theirs (`AtomicPtr` alone
    /// would make the map `Send + Sync` unconditionally).
    _owns: PhantomData<(K, V)>,
}

impl<K, V> RcuHashMap<K, V, DefaultHashBuilder> {
    /// An empty map whose retired entries wait for `domain`'s grace periods.
    pub fn new(domain: Arc<RcuDomain>) -> Self {
        Self::with_capacity_and_hasher(domain, 0, DefaultHashBuilder::default())
    }

    /// An empty map with room for `capacity` entries before it first grows.
    pub fn with_capacity(domain: Arc<RcuDomain>, capacity: usize) -> Self {
        Self::with_capacity_and_hasher(domain, capacity, DefaultHashBuilder::default())
    }
}

impl<K, V, S> RcuHashMap<K, V, S> {
    /// An empty map hashing with `hash_builder`.
    pub fn with_hasher(domain: Arc<RcuDomain>, hash_builder: S) -> Self {
        Self::with_capacity_and_hasher(domain, 0, hash_builder)
    }

    /// An empty map with room for `capacity` entries, hashing with `hash_builder`.
    pub fn with_capacity_and_hasher(
        domain: Arc<RcuDomain>,
        capacity: usize,
        hash_builder: S,
    ) -> Self {
        let buckets = capacity.max(MIN_BUCKETS).next_power_of_two();
        RcuHashMap {
            table: AtomicPtr::new(Box::into_raw(Box::new(Table::new(buckets)))),
            len: AtomicUsize::new(0),
            writer: Mutex::new(()),
            hash_builder,
            domain,
            _owns: PhantomData,
        }
    }

    /// The RCU domain this map retires entries through.
    pub fn domain(&self) -> &Arc<RcuDomain> {
        &self.domain
    }

    /// Number of entries (exact when no write is in progress).
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// Whether the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of buckets of the current table (diagnostics and tests).
    pub fn bucket_count(&self) -> usize {
        self.read(|table| table.buckets.len())
    }

    /// Runs `f` on the current table within a read-side critical section.
    ///
    /// `f` gets a reference whose lifetime is chosen by this call and cannot appear
    /// in `R`, so nothing borrowed from the table escapes the critical section.
    fn read<R>(&self, f: impl FnOnce(&Table<K, V>) -> R) -> R {
        let guard = self.domain.read_guard();
        // Not an active core of the domain: nothing protects us from reclamation, so
        // exclude writers instead. Nothing is unlinked, hence nothing freed, while we
        // hold the lock.
        let _lock = guard.is_none().then(|| self.writer.lock());
        // Soundness: the table pointer is never null, and a table is freed only after a
        // grace period following its replacement (or by `Drop`, which has `&mut
        // self`). With a read guard, that grace period cannot end before this core's
        // next quiescent state, which cannot be reported while the guard lives and
        // the guard outlives `f`; without one we hold the writer lock.
        // SAFETY: by the argument just above.
        let table = unsafe { &*self.table.load(Ordering::Acquire) };
        f(table)
    }

    fn chain<'r>(head: &'r AtomicPtr<Node<K, V>>) -> Chain<'r, K, V> {
        Chain {
            next: head.load(Ordering::Acquire),
            _read: PhantomData,
        }
    }

    /// Calls `f` on every entry. Weakly consistent under concurrent writes: each key
    /// present throughout the call is seen exactly once, keys inserted or removed
    /// meanwhile at most once, each with a value it had at some point during the call.
    pub fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        self.read(|table| {
            for head in table.buckets.iter() {
                for node in Self::chain(head) {
                    f(&node.key, &node.value);
                }
            }
        });
    }
}

impl<K, V, S> RcuHashMap<K, V, S>
where
    K: Hash + Eq,
    S: BuildHasher,
{
    fn find<'r, Q>(table: &'r Table<K, V>, hash: u64, key: &Q) -> Option<&'r Node<K, V>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        Self::chain(table.bucket(hash)).find(|n| n.hash == hash && n.key.borrow() == key)
    }

    /// Looks `key` up and, if present, returns `f` applied to its value. `f` runs
    /// inside the read-side critical section; the reference cannot escape it.
    pub fn get<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash_builder.hash_one(key);
        self.read(|table| Self::find(table, hash, key).map(|node| f(&node.value)))
    }

    /// [`get`](Self::get) with `key`'s hash computed already, by this map's
    /// [`hasher`](Self::hasher) (or a clone of it): for a caller that uses the hash for
    /// its own purposes too — picking one of several maps — so that the key is hashed
    /// once. Any other hash finds nothing (it is a lookup in the wrong bucket, never
    /// unsafe).
    pub fn get_hashed<Q, R>(&self, hash: u64, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        debug_assert_eq!(hash, self.hash_builder.hash_one(key), "not this map's hash");
        self.read(|table| Self::find(table, hash, key).map(|node| f(&node.value)))
    }

    /// The hash builder the map hashes its keys with.
    pub fn hasher(&self) -> &S {
        &self.hash_builder
    }

    /// A clone of the value for `key`.
    pub fn get_cloned<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        V: Clone,
    {
        self.get(key, V::clone)
    }

    /// Whether `key` is present.
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.get(key, |_| ()).is_some()
    }
}

impl<K, V, S> RcuHashMap<K, V, S>
where
    K: Hash + Eq + Send + 'static,
    V: Send + 'static,
    S: BuildHasher,
{
    /// The current table, for a writer. Holding the writer lock is what makes the
    /// returned reference valid: only a writer replaces (and retires) the table.
    fn table_locked<'g>(&self, _writer: &'g spin::MutexGuard<'_, ()>) -> &'g Table<K, V> {
        // SAFETY: the table is replaced and retired only under the writer lock, which
        // the caller holds for `'g`; before that it is not freed.
        unsafe { &*self.table.load(Ordering::Relaxed) }
    }

    /// Hands `boxed` (already unreachable for new readers) to an RCU callback that
    /// drops it after a grace period, on this core.
    fn retire<T: Send + 'static>(&self, boxed: NonNull<T>) {
        let retired = Retired(boxed);
        self.domain
            .call_rcu(current_core(), Box::new(move || retired.free()));
    }

    /// Removes `key`; returns whether it was present. The entry is dropped after a
    /// grace period, since readers may still be looking at it.
    pub fn remove<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_if(key, |_| true)
    }

    /// Removes `key` if its value satisfies `keep_out` (checked under the writer lock,
    /// so no other write slips in between); returns whether it removed it. For entries
    /// several writers may claim: "remove my claim, not someone else's".
    pub fn remove_if<Q>(&self, key: &Q, keep_out: impl FnOnce(&V) -> bool) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash_builder.hash_one(key);
        let guard = self.writer.lock();
        let table = self.table_locked(&guard);
        let mut link = table.bucket(hash);
        loop {
            // Relaxed: writers are ordered by the lock; readers are not our concern here.
            let Some(current) = NonNull::new(link.load(Ordering::Relaxed)) else {
                return false;
            };
            // SAFETY: `current` is linked in the current table and we hold the writer
            // lock, so it cannot be unlinked, let alone freed, while we look.
            let node = unsafe { current.as_ref() };
            if node.hash == hash && node.key.borrow() == key {
                if !keep_out(&node.value) {
                    return false;
                }
                // Release not needed for the successor (already published), but
                // harmless; readers that already passed `link` keep a valid `next`.
                link.store(node.next.load(Ordering::Relaxed), Ordering::Release);
                self.len.fetch_sub(1, Ordering::Relaxed);
                drop(guard);
                self.retire(current);
                return true;
            }
            link = &node.next;
        }
    }

    /// Removes every entry (they are dropped after a grace period). Keeps the
    /// current bucket count.
    pub fn clear(&self) {
        let guard = self.writer.lock();
        let buckets = self.table_locked(&guard).buckets.len();
        let old = self.table.swap(
            Box::into_raw(Box::new(Table::new(buckets))),
            Ordering::Release,
        );
        self.len.store(0, Ordering::Relaxed);
        drop(guard);
        if let Some(old) = NonNull::new(old) {
            self.retire(old);
        }
    }
}

impl<K, V, S> RcuHashMap<K, V, S>
where
    K: Hash + Eq + Clone + Send + 'static,
    V: Clone + Send + 'static,
    S: BuildHasher,
{
    /// Inserts `key → value`; returns true if it replaced an existing entry. The old
    /// value is not returned but dropped after a grace period, since readers may still
    /// be looking at it. May grow the table (cloning every entry, hence the bounds).
    pub fn insert(&self, key: K, value: V) -> bool {
        self.write(key, value, true)
    }

    /// Inserts `key → value` only if `key` is absent; returns whether it did. The
    /// check and the insertion are one step under the writer lock: of several cores
    /// claiming the same key, exactly one succeeds.
    pub fn try_insert(&self, key: K, value: V) -> bool {
        !self.write(key, value, false)
    }

    /// Inserts, or replaces when `replace` (else leaves an existing entry alone);
    /// returns whether `key` was present.
    fn write(&self, key: K, value: V, replace: bool) -> bool {
        let hash = self.hash_builder.hash_one(&key);
        let guard = self.writer.lock();
        let table = self.table_locked(&guard);
        let head = table.bucket(hash);
        let mut link = head;
        while let Some(current) = NonNull::new(link.load(Ordering::Relaxed)) {
            // SAFETY: linked in the current table, writer lock held (as in `remove`).
            let node = unsafe { current.as_ref() };
            if node.hash == hash && node.key == key {
                if !replace {
                    return true;
                }
                let new = Box::new(Node {
                    next: AtomicPtr::new(node.next.load(Ordering::Relaxed)),
                    hash,
                    key,
                    value,
                });
                // Release: a reader that loads the new node sees its contents.
                link.store(Box::into_raw(new), Ordering::Release);
                drop(guard);
                self.retire(current);
                return true;
            }
            link = &node.next;
        }
        let new = Box::new(Node {
            next: AtomicPtr::new(head.load(Ordering::Relaxed)),
            hash,
            key,
            value,
        });
        head.store(Box::into_raw(new), Ordering::Release);
        let len = self.len.fetch_add(1, Ordering::Relaxed) + 1;
        let old = (len > table.buckets.len()).then(|| self.grow(table));
        drop(guard);
        if let Some(old) = old {
            self.retire(old);
        }
        false
    }

    /// Replaces `old` (the current table; writer lock held) by a table twice as large
    /// holding copies of every entry, and returns `old` for retirement.
    fn grow(&self, old: &Table<K, V>) -> NonNull<Table<K, V>> {
        // If a clone panics, `new` is dropped with the copies made so far and the old
        // table stays in place, untouched.
        let new = Table::new(old.buckets.len() * 2);
        for head in old.buckets.iter() {
            for node in Self::chain(head) {
                let bucket = new.bucket(node.hash);
                let copy = Box::new(Node {
                    next: AtomicPtr::new(bucket.load(Ordering::Relaxed)),
                    hash: node.hash,
                    key: node.key.clone(),
                    value: node.value.clone(),
                });
                // Relaxed: `new` is private until the Release swap below.
                bucket.store(Box::into_raw(copy), Ordering::Relaxed);
            }
        }
        // Release: readers that load the new table see all its nodes.
        let old = self
            .table
            .swap(Box::into_raw(Box::new(new)), Ordering::Release);
        NonNull::new(old).unwrap_or_else(|| unreachable!("the table pointer is never null"))
    }
}

impl<K, V, S> Drop for RcuHashMap<K, V, S> {
    fn drop(&mut self) {
        // `&mut self`: no reader can be inside the map (reads borrow it), so the
        // current table and its nodes can go now. Retired tables and nodes belong to
        // pending callbacks and are not reachable from here.
        let table = *self.table.get_mut();
        // SAFETY: the table pointer always comes from `Box::into_raw` and is owned by
        // the map; we have exclusive access and nobody reads it after this.
        drop(unsafe { Box::from_raw(table) });
    }
}
