//! # The item store
//!
//! What memcached 1.6 keeps and how its commands change it, for every core of the
//! server at once: one [`Store`] (`Send + Sync`) shared by all cores.
//!
//! ## Layout and concurrency
//!
//! The key space is split by hash into [`StoreConfig::shards`] shards. Each shard has
//!
//! * an [`RcuHashMap`] from key to item (`Arc<Item>`): **reads take no lock** — a `get`
//!   runs a closure under an RCU read guard, checks expiry and `flush_all`, sets the
//!   item's CLOCK reference bit (a relaxed load, and a store only if it was clear) and
//!   returns an [`IOBufChain`] of the value's buffers (reference counts, no byte
//!   copied, no allocation for a value in up to three pieces);
//! * a spin mutex over the shard's writer state, the CLOCK ring. **Every write takes
//!   its shard's mutex** for the whole read-modify-write (so `cas`, `incr`, `append`,
//!   `add` are atomic per key, as memcached's per-item locks make them), and only then
//!   the map's own writer lock, which writers therefore never contend for. Writes to
//!   different shards proceed in parallel: shards are the "per-bucket" write locks.
//!   Why not per-core shards: a key's owner would then be one core, and every other
//!   core's request for it would have to hop there; shared shards keep every request on
//!   the core that received it, and reads do not care about shards at all.
//!
//! Keys are hashed with the RCU map's default hasher (foldhash, seeded from address-space
//! randomization): fast, but only as resistant to deliberately colliding keys as ASLR
//! is unpredictable (memcached's own hash is not keyed at all). A secretly keyed hasher
//! would need a seed source the store does not have.
//!
//! Removed and replaced items stay readable by readers that found them until an RCU
//! grace period ends (the map retires them through `call_rcu`), so their memory is
//! freed a little after they stop being accounted.
//!
//! ## Memory limit and eviction: CLOCK
//!
//! Every item is accounted what it occupies — [`ITEM_OVERHEAD`], its key's allocation and
//! its value's buffers, each at the allocator's real size ([`allocation_size`]: a
//! 600 KiB buffer in one piece would take a 1 MiB block) — in one global counter
//! that never exceeds [`StoreConfig::memory_limit`]: a write *reserves* the growth it
//! needs (compare-and-swap) before linking, and evicts until the reservation fits.
//! Eviction is CLOCK (second chance), not an LRU list, because an LRU list must be
//! relinked on every hit — a write to shared state, under a lock, on the read path.
//! CLOCK only needs the hit to set a per-item bit. Each shard keeps its items in a ring
//! of slots (`Vec<Option<Arc<Item>>>`, an item's slot fixed for its life) and a hand;
//! the hand clears set bits and evicts the first item whose bit is clear. An expired or
//! flushed item under the hand is taken whatever its bit (counted `reclaimed`, not
//! `evictions`). Which shard gives up an item rotates over all shards (a global
//! cursor), which approximates one CLOCK over the whole cache: a write's shard is not
//! made to pay for the others. The writer holds its own shard's mutex and only
//! `try_lock`s the others, so eviction never deadlocks; a shard that is busy is
//! skipped. If nothing can be evicted the write fails with
//! [`StoreError::OutOfMemory`]. It fails the same way when the memory itself refuses
//! (see "Values"), after evicting as much as it needed, so that the memory is free for
//! the next try once readers have moved on: a request pays, never the node.
//!
//! ## Time
//!
//! Operations take the time as a parameter ([`Ctx::now`], Unix seconds) — the store
//! reads no clock, so tests are deterministic. Expiry follows memcached's `realtime()`
//! ([`absolute_expiry`]); an item is expired when `exptime != 0 && exptime <= now`.
//! Expired items are removed lazily when an operation finds them, by the CLOCK hand,
//! and by [`Store::sweep`], which an idle handler calls with a small budget.
//!
//! `flush_all` follows memcached 1.6: without a delay every item existing at the call
//! is invalid (we compare CAS ids, which grow with every store); with a delay the
//! flush time `F` is computed like an exptime and, from second `F - 1` on, items
//! stored in or before second `F - 1` are invalid (memcached's `oldest_live = F - 1`
//! and `item->time <= oldest_live`).
//!
//! ## Values
//!
//! Values come in and go out as [`IOBufChain`]s and are kept as their buffers (one
//! inline, or a boxed slice when in pieces): a hit hands out the stored buffers
//! themselves, so the reply sends them without a copy. A value whose buffers are much
//! larger than the value (a small value cut out of a large receive buffer, which would
//! pin the whole buffer) is copied once when stored, and so is a value in several
//! buffers (arriving in frames, appended to). A copy
//! goes into pieces of at most [`VALUE_PIECE`] bytes (16 KiB blocks, [`Packing`]), so
//! no value needs a large contiguous block — after small items have fragmented a fixed
//! native heap, evicting them frees 16 KiB blocks, never reliably a 1 MiB one — and the
//! pieces come from the store's [`ItemMemory`]: fallible buffers, refused while the
//! node's free memory is below its reserve (see `memory.rs`). A copy is made only
//! after the accounting reserved its size.
//! `IOBuf` regions are reference-counted like `Arc<[u8]>`, so values are `Send + Sync`
//! and may be shared across cores.
//!
//! ## Allocation
//!
//! Items (the `Arc<Item>`, the key, the map node, copied values) come from the global
//! allocator — values through the fallible [`ItemMemory`], the small rest infallibly,
//! covered by the reserve: Ebbflow's per-core slab allocator (ebb-mem) in both runtimes — natively the
//! image's, hosted the server binary's (its default feature `ebb-allocator`). Measured
//! hosted: this store on two cores 1.3–1.5× faster with it than with glibc's malloc
//! (`tests/store_bench_*`), the whole server at parity (`bench/scripts/memcached-allocator.sh`).
//!
//! ## Using it (the server glue)
//!
//! * Build one store at start-up with the runtime's RCU domain
//!   (`ebb::Handle::current()?.rcu().clone()`) and `StoreConfig::cores =
//!   ebb::num_cores()`, and share it (`Arc<Store>`) with every core.
//! * Call operations on cores, inside events, with `Ctx::new(unix_now, core_index)`.
//!   Off a core they still work but reads take the map's lock (see [`RcuHashMap`]).
//! * Install an idle handler on each core that calls [`Store::sweep`] with a small
//!   budget (e.g. 64 slots); only one core sweeps at a time.
//! * Map the outcomes to replies: [`StoreOutcome`], [`DeleteOutcome`],
//!   [`ArithOutcome`], and [`StoreError`] for the `SERVER_ERROR`s.
//!
//! ## Invariants
//!
//! * An item is linked in its shard's map **iff** it sits in its own slot of the
//!   shard's ring (`clock[item.slot]` points to it); both change only under the shard
//!   mutex. So "still linked?" is one pointer comparison.
//! * `used` (the global accounted bytes) equals the sum of linked items' sizes, plus
//!   reservations in flight, and never exceeds the memory limit.
//! * CAS ids come from one global counter: unique across cores and increasing, never 0.
//! * Nothing here panics on any input; refusals are values ([`StoreError`], the
//!   outcome enums).

mod classes;
mod item;
mod memory;
mod numeric;
mod stats;
#[cfg(test)]
mod tests;

pub use classes::{CLASS_COUNTERS, ClassCounter, ClassStats, MAX_CLASSES};
pub use item::{REALTIME_MAXDELTA, UnixTime, absolute_expiry};
pub use memory::{FailingMemory, HeapMemory, ItemMemory, Packing, VALUE_PIECE, allocation_size};
pub use stats::Stats;

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use classes::{CLASS_COUNTER_ORDER, ClassCounters, class_of};
use core::hash::BuildHasher;
use core::mem::size_of;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use ebb::rcu::{DefaultHashBuilder, RcuDomain, RcuHashMap};
use ebb::{IOBuf, IOBufChain};
use item::{Item, ItemKey, KeyRef, Value};
use stats::{Counter, Counters};

/// The longest key memcached accepts.
pub const KEY_MAX_LENGTH: usize = 250;

/// memcached's default item size limit (`-I`): 1 MiB.
pub const DEFAULT_ITEM_SIZE_MAX: usize = 1024 * 1024;

/// memcached's default memory limit (`-m 64`): 64 MiB.
pub const DEFAULT_MEMORY_LIMIT: usize = 64 * 1024 * 1024;

/// Bytes accounted to every item on top of its key's allocation and its value's
/// buffers: the item itself (flags, times, CAS, the value's buffer handle, CLOCK bits)
/// with its `Arc` counts, its map node (link, hash, key and value pointers), its share
/// of the map's bucket array (the table holds up to two buckets per entry), and its
/// ring slot and free-list entry. (memcached's own per-item header is about 50 bytes
/// plus slab-class rounding.)
pub const ITEM_OVERHEAD: usize = size_of::<Item>()
    + 2 * size_of::<usize>()
    + 4 * size_of::<usize>()
    + 2 * size_of::<usize>()
    + 2 * size_of::<usize>()
    + 2 * size_of::<usize>();

/// The size memcached 1.6 (64-bit, CAS enabled) checks against `-I` for an item:
/// its 48-byte header, the key and a NUL, the flags (4 bytes, unless 0), the value and
/// its CRLF, and the 8-byte CAS (`item_size_ok` in memcached's `items.c`). Our own
/// accounting differs ([`ITEM_OVERHEAD`]); this only decides "too large", so that
/// clients find the same largest value as with memcached.
pub const fn memcached_item_size(key_len: usize, flags: u32, value_len: usize) -> usize {
    let flags_len = if flags == 0 { 0 } else { 4 };
    48usize
        .saturating_add(key_len)
        .saturating_add(1)
        .saturating_add(flags_len)
        .saturating_add(value_len)
        .saturating_add(2)
        .saturating_add(8)
}

/// How a store is set up (memcached's command-line options).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// `-m`, in bytes: the most the items may account for.
    pub memory_limit: usize,
    /// `-I`, in bytes: the largest item, measured as memcached measures it
    /// ([`memcached_item_size`]: key, value and memcached's header).
    pub item_size_max: usize,
    /// `false` is memcached's `-M`: when full, refuse stores instead of evicting.
    pub evict: bool,
    /// Number of shards (independent write locks); rounded up to a power of two,
    /// between 1 and 1024.
    pub shards: usize,
    /// Number of cores that will use the store: one statistics block each.
    pub cores: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            memory_limit: DEFAULT_MEMORY_LIMIT,
            item_size_max: DEFAULT_ITEM_SIZE_MAX,
            evict: true,
            shards: 64,
            cores: 1,
        }
    }
}

/// When and where an operation runs: the glue passes `now` (Unix seconds) and the
/// calling core's index (`ebb::core_id().index()`), which picks its statistics block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctx {
    /// The current Unix time, seconds.
    pub now: UnixTime,
    /// The calling core's index (any value works; distinct cores should differ).
    pub core: usize,
}

impl Ctx {
    /// An operation at `now` on core `core`.
    pub const fn new(now: UnixTime, core: usize) -> Self {
        Ctx { now, core }
    }
}

/// A key found by a read: what `get`/`gets`/`gat` reply with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The client's flags.
    pub flags: u32,
    /// The CAS unique id (for `gets`/`gats` and binary replies).
    pub cas: u64,
    /// The value: the stored buffers themselves, shared.
    pub value: IOBufChain,
}

/// A live item as [`Store::get_with`] lends it: borrowed for the call, not kept.
#[derive(Clone, Copy, Debug)]
pub struct ItemView<'a> {
    /// The client's flags.
    pub flags: u32,
    /// The CAS unique id.
    pub cas: u64,
    /// The value's buffers, in order (none empty, or one empty buffer).
    pub value: &'a [IOBuf],
}

/// A key found by a meta get (`mg`): the hit and what the meta flags report about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaHit {
    /// Flags, CAS id and value.
    pub hit: Hit,
    /// The item's absolute expiry (0: never) as found, before any new TTL was set.
    pub exptime: UnixTime,
    /// When the item was stored (memcached's `l` reports the last access instead).
    pub time: UnixTime,
    /// Whether a read had returned the item before this one (memcached's `h`).
    pub fetched: bool,
}

/// What a meta arithmetic (`ma`) did besides [`ArithOutcome`]: the TTL to report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaArith {
    /// The item's absolute expiry (0: never) before `touch` was applied; 0 for an item
    /// just created (memcached creates it immortal, then applies `N`/`T`).
    pub exptime: UnixTime,
    /// The item was created from [`Arith::initial`].
    pub created: bool,
}

/// Why a write could not be done at all (as opposed to a refusal by the command's
/// semantics, which the outcome enums report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// The key is empty or longer than [`KEY_MAX_LENGTH`].
    BadKey,
    /// The item exceeds `item_size_max` (memcached: `SERVER_ERROR object too large
    /// for cache`).
    TooLarge,
    /// There is no room and nothing could be evicted (memcached: `SERVER_ERROR out of
    /// memory storing object`).
    OutOfMemory,
}

/// The storage commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Store unconditionally.
    Set,
    /// Store only if the key is absent (an expired or flushed item counts as absent).
    Add,
    /// Store only if the key is present.
    Replace,
    /// Add the data after the present value, keeping its flags and expiry.
    Append,
    /// Add the data before the present value, keeping its flags and expiry.
    Prepend,
    /// Store only if the present item's CAS id is the one given.
    Cas(u64),
}

/// What a storage command did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOutcome {
    /// `STORED`, with the new item's CAS id.
    Stored {
        /// The CAS id of the stored item.
        cas: u64,
    },
    /// `NOT_STORED`: the condition of add/replace/append/prepend did not hold (also
    /// an append/prepend whose result would be too large or does not fit: memcached
    /// answers those with `NOT_STORED` too).
    NotStored,
    /// `EXISTS`: cas (or a binary append/prepend) with a different CAS id.
    Exists,
    /// `NOT_FOUND`: cas on an absent key.
    NotFound,
}

/// What a delete did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// `DELETED`.
    Deleted,
    /// `NOT_FOUND`.
    NotFound,
    /// `EXISTS` (binary delete with a CAS id that differs).
    Exists,
}

/// An `incr`/`decr` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arith {
    /// Increment (wrapping at 2^64) or decrement (stopping at 0).
    pub incr: bool,
    /// The amount.
    pub delta: u64,
    /// Binary protocol: when the key is absent, create it with this value and exptime
    /// (flags 0) instead of answering `NOT_FOUND`. The glue passes `None` for the text
    /// protocol and for a binary exptime of `0xffffffff`.
    pub initial: Option<(u64, i64)>,
    /// Binary protocol: operate only if the item's CAS id is this one (0: any).
    pub cas: u64,
}

/// What an `incr`/`decr` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArithOutcome {
    /// The new value (or the initial value, when created) and the item's CAS id.
    Value {
        /// The number now stored.
        value: u64,
        /// The item's new CAS id.
        cas: u64,
    },
    /// `NOT_FOUND`.
    NotFound,
    /// `CLIENT_ERROR cannot increment or decrement non-numeric value`.
    NonNumeric,
    /// The CAS id differed (binary only).
    Exists,
}

/// What a write decided, given the key's live item (if any).
/// What [`Store::mutate`] wrote: the new item's CAS id and size class.
#[derive(Clone, Copy, Debug)]
struct Written {
    cas: u64,
    class: u8,
}

enum Plan {
    /// Leave the key as it is.
    Keep,
    /// Replace (or create) the key's item.
    Write {
        flags: u32,
        exptime: UnixTime,
        value: IOBufChain,
    },
    /// Remove the key's item.
    Remove,
}

/// One shard's writer state, under its mutex.
#[derive(Default)]
struct Ring {
    /// CLOCK slots; `clock[i]` is the linked item whose `slot` is `i`, if any.
    clock: Vec<Option<Arc<Item>>>,
    /// Empty slots to reuse.
    free: Vec<usize>,
    /// The CLOCK hand: the next slot to look at.
    hand: usize,
}

impl Ring {
    fn alloc_slot(&mut self) -> usize {
        self.free.pop().unwrap_or_else(|| {
            self.clock.push(None);
            self.clock.len() - 1
        })
    }

    /// Whether `item` is the linked item of its slot (hence linked in the map).
    fn holds(&self, item: &Arc<Item>) -> bool {
        self.clock
            .get(item.slot)
            .and_then(Option::as_ref)
            .is_some_and(|s| Arc::ptr_eq(s, item))
    }
}

struct Shard {
    map: RcuHashMap<KeyRef, Arc<Item>>,
    ring: spin::Mutex<Ring>,
}

/// Keeps a value on its own cache line(s).
#[repr(align(128))]
struct Padded<T>(T);

/// Written on every store (under different shard locks): apart from what reads read.
struct WriteShared {
    /// Bytes accounted to linked items plus reservations in flight.
    used: AtomicUsize,
    /// Linked items.
    items: AtomicUsize,
    /// The next CAS id.
    next_cas: AtomicU64,
    /// Where eviction looks next (a shard index, modulo the shard count).
    evict_cursor: AtomicUsize,
}

/// Read by every read, written only by `flush_all`.
struct FlushState {
    /// memcached's `oldest_live` (0: none): from this second on, items stored at or
    /// before it are invalid.
    oldest_live: AtomicU32,
    /// Items whose CAS id is below this are invalid (immediate `flush_all`).
    oldest_cas: AtomicU64,
}

/// The item store. See the module documentation.
pub struct Store {
    config: StoreConfig,
    /// Where copied values get their memory, and whether there is room for more.
    memory: Arc<dyn ItemMemory>,
    shards: Box<[Shard]>,
    hasher: DefaultHashBuilder,
    shared: Padded<WriteShared>,
    flush: Padded<FlushState>,
    counters: Counters,
    /// The size classes' chunk sizes, by id ([`classes`]).
    chunk_sizes: Box<[usize]>,
    /// What is counted per size class.
    class_counters: ClassCounters,
    /// Where the next sweep starts: (shard, slot).
    sweep_at: spin::Mutex<(usize, usize)>,
}

// The store is shared by every core: its values, and so the store, must be `Send +
// Sync` (they are: an `IOBuf` region is an `Arc<Vec<u8>>` or a static slice).
const _: () = {
    const fn shared_across_cores<T: Send + Sync>() {}
    shared_across_cores::<IOBuf>();
    shared_across_cores::<IOBufChain>();
    shared_across_cores::<Store>();
};

impl Store {
    /// An empty store whose removed items wait for `domain`'s grace periods (the
    /// runtime's domain: `ebb::Handle::current()` gives it on a core).
    pub fn new(config: StoreConfig, domain: Arc<RcuDomain>) -> Self {
        Self::with_memory(config, domain, Arc::new(HeapMemory::default()))
    }

    /// An empty store whose copied values come from `memory` (the server's
    /// [`HeapMemory`] with the node's reserve, or a [`FailingMemory`] under test).
    pub fn with_memory(
        config: StoreConfig,
        domain: Arc<RcuDomain>,
        memory: Arc<dyn ItemMemory>,
    ) -> Self {
        let shards = config.shards.clamp(1, 1024).next_power_of_two();
        let config = StoreConfig { shards, ..config };
        // One hasher for the shard index and every shard's map, so a read hashes its
        // key once (`shard_for`, then `RcuHashMap::get_hashed`). The index takes the
        // hash's high bits, the maps' buckets its low bits: they do not correlate.
        let hasher = DefaultHashBuilder::default();
        Store {
            memory,
            shards: (0..shards)
                .map(|_| Shard {
                    map: RcuHashMap::with_hasher(domain.clone(), hasher.clone()),
                    ring: spin::Mutex::new(Ring::default()),
                })
                .collect(),
            hasher,
            shared: Padded(WriteShared {
                used: AtomicUsize::new(0),
                items: AtomicUsize::new(0),
                next_cas: AtomicU64::new(1),
                evict_cursor: AtomicUsize::new(0),
            }),
            flush: Padded(FlushState {
                oldest_live: AtomicU32::new(0),
                oldest_cas: AtomicU64::new(0),
            }),
            counters: Counters::new(config.cores),
            chunk_sizes: classes::chunk_sizes(),
            class_counters: ClassCounters::new(config.cores),
            sweep_at: spin::Mutex::new((0, 0)),
            config,
        }
    }

    /// The configuration (with the shard count as rounded).
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// The shard of `key`, or `None` for a key memcached would refuse.
    fn shard_for(&self, key: &[u8]) -> Option<(usize, &Shard)> {
        self.shard_and_hash(key)
            .map(|(index, shard, _)| (index, shard))
    }

    /// [`shard_for`](Self::shard_for), and the key's hash, which is also the shard's
    /// map's (see [`Store::with_memory`]).
    fn shard_and_hash(&self, key: &[u8]) -> Option<(usize, &Shard, u64)> {
        if key.is_empty() || key.len() > KEY_MAX_LENGTH {
            return None;
        }
        // The high bits: the map picks buckets with the low bits of the same hash, and
        // shards must not correlate with buckets.
        let hash = self.hasher.hash_one(key);
        let index = (hash >> 40) as usize & (self.shards.len() - 1);
        self.shards.get(index).map(|s| (index, s, hash))
    }

    fn count(&self, cx: Ctx, counter: Counter) {
        self.counters.bump(cx.core, counter);
    }

    fn count_class(&self, cx: Ctx, class: u8, counter: ClassCounter) {
        self.class_counters.bump(cx.core, class, counter);
    }

    /// Whether `flush_all` invalidated `item` as of `now`.
    fn flushed(&self, item: &Item, now: UnixTime) -> bool {
        // Relaxed: a read racing with a flush may see either side of it.
        let oldest_live = self.flush.0.oldest_live.load(Ordering::Relaxed);
        (oldest_live != 0 && item.time <= oldest_live && oldest_live <= now)
            || item.cas < self.flush.0.oldest_cas.load(Ordering::Relaxed)
    }

    /// Whether `item` is no longer visible: expired or flushed.
    fn dead(&self, item: &Item, now: UnixTime) -> bool {
        self.flushed(item, now) || item.expired(now)
    }

    // ----- reads -----

    /// `get`/`gets`: the item for `key`, if present and live. Lock-free (on a core of
    /// the store's RCU domain). An expired or flushed item is removed on the way.
    pub fn get(&self, cx: Ctx, key: &[u8]) -> Option<Hit> {
        self.read(cx, key, true).map(|m| m.hit)
    }

    /// `mg`: the item for `key` and what the meta flags report about it. With `touch`
    /// (`T`) the expiry is set, counted as a touch; otherwise counted as a get. `bump:
    /// false` (`u`) leaves the item's fetched and CLOCK bits alone.
    pub fn meta_get(&self, cx: Ctx, key: &[u8], touch: Option<i64>, bump: bool) -> Option<MetaHit> {
        let Some(exptime) = touch else {
            return self.read(cx, key, bump);
        };
        self.touch_with(cx, key, exptime, bump)
    }

    /// `get`/`gets` without taking the value: `f` sees the live item (flags, CAS id and
    /// the value's buffers, borrowed) while the read holds it, and its result is
    /// returned. Counted and expired exactly as [`get`](Self::get). For a reply that
    /// copies a small value (or clones the buffers of a large one) straight from the
    /// item: no chain is built for it, no reference is taken and dropped.
    pub fn get_with<R>(&self, cx: Ctx, key: &[u8], f: impl FnOnce(ItemView<'_>) -> R) -> Option<R> {
        self.read_with(cx, key, true, |item| {
            f(ItemView {
                flags: item.flags,
                cas: item.cas,
                value: item.value.buffers(),
            })
        })
    }

    fn read(&self, cx: Ctx, key: &[u8], bump: bool) -> Option<MetaHit> {
        self.read_with(cx, key, bump, |item| MetaHit {
            hit: Hit {
                flags: item.flags,
                cas: item.cas,
                value: item.value.to_chain(),
            },
            exptime: item.exptime.load(Ordering::Relaxed),
            time: item.time,
            fetched: item.was_fetched(),
        })
    }

    /// The read behind every get: `live` runs on the live item for `key` (before this
    /// read marks it fetched); a flushed or expired one is a miss, removed on the way.
    fn read_with<R>(
        &self,
        cx: Ctx,
        key: &[u8],
        bump: bool,
        live: impl FnOnce(&Item) -> R,
    ) -> Option<R> {
        // `cmd_get` is not counted: it is `get_hits + get_misses`, one atomic less
        // on the hot path.
        let Some((_, shard, hash)) = self.shard_and_hash(key) else {
            self.count(cx, Counter::GetMisses);
            return None;
        };
        enum Found<R> {
            Live(R, u8),
            Flushed(Arc<Item>),
            Expired(Arc<Item>),
        }
        let found = shard.map.get_hashed(hash, key, |item| {
            if self.flushed(item, cx.now) {
                Found::Flushed(item.clone())
            } else if item.expired(cx.now) {
                Found::Expired(item.clone())
            } else {
                let result = live(item);
                if bump {
                    item.mark_read();
                }
                Found::Live(result, item.class)
            }
        });
        let dead = match found {
            Some(Found::Live(result, class)) => {
                self.count(cx, Counter::GetHits);
                self.count_class(cx, class, ClassCounter::GetHits);
                return Some(result);
            }
            None => None,
            Some(Found::Flushed(item)) => {
                self.count(cx, Counter::GetFlushed);
                Some(item)
            }
            Some(Found::Expired(item)) => {
                self.count(cx, Counter::GetExpired);
                Some(item)
            }
        };
        self.count(cx, Counter::GetMisses);
        if let Some(item) = dead {
            // Lazy expiry, off the hit path: only a miss on a dead item takes the lock.
            let mut ring = shard.ring.lock();
            if ring.holds(&item) {
                self.unlink_dead(cx, shard, &mut ring, &item);
            }
        }
        None
    }

    /// `touch`: sets the expiry of a live item; returns whether there was one.
    pub fn touch(&self, cx: Ctx, key: &[u8], exptime: i64) -> bool {
        self.touch_inner(cx, key, exptime).is_some()
    }

    /// `gat`/`gats`: a get that also sets the item's expiry. Counted as a touch only
    /// (`cmd_touch`, `touch_hits`/`touch_misses`), as memcached counts it.
    pub fn gat(&self, cx: Ctx, key: &[u8], exptime: i64) -> Option<Hit> {
        self.touch_inner(cx, key, exptime)
    }

    fn touch_inner(&self, cx: Ctx, key: &[u8], exptime: i64) -> Option<Hit> {
        self.touch_with(cx, key, exptime, true).map(|m| m.hit)
    }

    fn touch_with(&self, cx: Ctx, key: &[u8], exptime: i64, bump: bool) -> Option<MetaHit> {
        self.count(cx, Counter::CmdTouch);
        let exptime = absolute_expiry(exptime, cx.now);
        // Under the shard lock, so that a touch cannot revive an item that a sweep or
        // the CLOCK hand is removing as expired.
        let mut class = 0;
        let hit = self
            .mutate(cx, key, |live| {
                let hit = live.map(|item| {
                    class = item.class;
                    let old = item.exptime.swap(exptime, Ordering::Relaxed);
                    let fetched = item.was_fetched();
                    if bump {
                        item.mark_read();
                    }
                    MetaHit {
                        hit: Hit {
                            flags: item.flags,
                            cas: item.cas,
                            value: item.value.to_chain(),
                        },
                        exptime: old,
                        time: item.time,
                        fetched,
                    }
                });
                (Plan::Keep, hit)
            })
            .ok()
            .and_then(|(hit, _)| hit);
        self.count(
            cx,
            if hit.is_some() {
                Counter::TouchHits
            } else {
                Counter::TouchMisses
            },
        );
        if hit.is_some() {
            self.count_class(cx, class, ClassCounter::TouchHits);
        }
        hit
    }

    // ----- writes -----

    /// A storage command: `mode` decides whether to store `value` with `flags` and
    /// `exptime` (memcached's exptime: see [`absolute_expiry`]). Append and prepend
    /// keep the present item's flags and expiry and ignore the given ones.
    ///
    /// A `Set` that fails with an error removes the key's previous item, as memcached
    /// does, so that stale data does not outlive a failed overwrite.
    pub fn store(
        &self,
        cx: Ctx,
        mode: Mode,
        key: &[u8],
        flags: u32,
        exptime: i64,
        value: IOBufChain,
    ) -> Result<StoreOutcome, StoreError> {
        self.store_with_cas(cx, mode, key, flags, exptime, value, 0)
    }

    /// A storage command carrying a CAS id, as binary requests do. Like memcached: a
    /// nonzero `cas` turns set/add/replace into [`Mode::Cas`]`(cas)`, and makes
    /// append/prepend answer `Exists` if the item's id differs; `0` is [`store`]
    /// (`Mode::Cas` uses its own id and ignores this one).
    ///
    /// [`store`]: Self::store
    #[expect(
        clippy::too_many_arguments,
        reason = "a storage request's fields, as the protocols name them"
    )]
    pub fn store_with_cas(
        &self,
        cx: Ctx,
        mode: Mode,
        key: &[u8],
        flags: u32,
        exptime: i64,
        value: IOBufChain,
        cas: u64,
    ) -> Result<StoreOutcome, StoreError> {
        let (mode, append_cas) = match mode {
            Mode::Set | Mode::Add | Mode::Replace if cas != 0 => (Mode::Cas(cas), 0),
            Mode::Append | Mode::Prepend => (mode, cas),
            other => (other, 0),
        };
        self.count(cx, Counter::CmdSet);
        let exptime = absolute_expiry(exptime, cx.now);
        // memcached counts a cas on the present item's class.
        let mut present_class = 0;
        let result = self.mutate(cx, key, |live| {
            present_class = live.map_or(0, |item| item.class);
            Self::plan_store(mode, append_cas, live, flags, exptime, value)
        });
        let outcome = match result {
            Ok((outcome, written)) => match (outcome, written) {
                (StoreOutcome::Stored { .. }, Some(written)) => {
                    self.count_class(cx, written.class, ClassCounter::CmdSet);
                    StoreOutcome::Stored { cas: written.cas }
                }
                (StoreOutcome::Stored { .. }, None) => StoreOutcome::NotStored,
                (other, _) => other,
            },
            Err(StoreError::BadKey) => return Err(StoreError::BadKey),
            // memcached: a failed allocation for append/prepend is NOT_STORED.
            Err(_) if matches!(mode, Mode::Append | Mode::Prepend) => StoreOutcome::NotStored,
            Err(e) => {
                if mode == Mode::Set {
                    let _ = self.mutate(cx, key, |_| (Plan::Remove, ()));
                }
                return Err(e);
            }
        };
        if let Mode::Cas(_) = mode {
            self.count(
                cx,
                match outcome {
                    StoreOutcome::Stored { .. } => Counter::CasHits,
                    StoreOutcome::Exists => Counter::CasBadval,
                    _ => Counter::CasMisses,
                },
            );
            match outcome {
                StoreOutcome::Stored { .. } => {
                    self.count_class(cx, present_class, ClassCounter::CasHits)
                }
                StoreOutcome::Exists => {
                    self.count_class(cx, present_class, ClassCounter::CasBadval)
                }
                _ => {}
            }
        }
        Ok(outcome)
    }

    /// What a storage command does to the key's live item (`StoreOutcome::Stored`'s
    /// CAS is filled in by the caller).
    fn plan_store(
        mode: Mode,
        append_cas: u64,
        live: Option<&Item>,
        flags: u32,
        exptime: UnixTime,
        value: IOBufChain,
    ) -> (Plan, StoreOutcome) {
        let stored = StoreOutcome::Stored { cas: 0 };
        let write = |flags, exptime, value| Plan::Write {
            flags,
            exptime,
            value,
        };
        match (mode, live) {
            (Mode::Set, _) | (Mode::Add, None) | (Mode::Replace, Some(_)) => {
                (write(flags, exptime, value), stored)
            }
            (Mode::Add, Some(item)) => {
                // memcached bumps the present item in its LRU on a failed add.
                item.referenced.store(true, Ordering::Relaxed);
                (Plan::Keep, StoreOutcome::NotStored)
            }
            (Mode::Replace | Mode::Append | Mode::Prepend, None) => {
                (Plan::Keep, StoreOutcome::NotStored)
            }
            (Mode::Append | Mode::Prepend, Some(item))
                if append_cas != 0 && item.cas != append_cas =>
            {
                (Plan::Keep, StoreOutcome::Exists)
            }
            (Mode::Append | Mode::Prepend, Some(item)) => {
                let mut joined = IOBufChain::new();
                let mut old = item.value.to_chain();
                let mut new = value;
                if mode == Mode::Append {
                    joined.append(&mut old);
                    joined.append(&mut new);
                } else {
                    joined.append(&mut new);
                    joined.append(&mut old);
                }
                let exptime = item.exptime.load(Ordering::Relaxed);
                (write(item.flags, exptime, joined), stored)
            }
            (Mode::Cas(_), None) => (Plan::Keep, StoreOutcome::NotFound),
            (Mode::Cas(cas), Some(item)) if item.cas == cas => {
                (write(flags, exptime, value), stored)
            }
            (Mode::Cas(_), Some(_)) => (Plan::Keep, StoreOutcome::Exists),
        }
    }

    /// `set`.
    pub fn set(
        &self,
        cx: Ctx,
        key: &[u8],
        flags: u32,
        exptime: i64,
        value: IOBufChain,
    ) -> Result<StoreOutcome, StoreError> {
        self.store(cx, Mode::Set, key, flags, exptime, value)
    }

    /// `delete`: removes the key's live item. With `cas != 0` (binary protocol) only if
    /// its CAS id matches.
    pub fn delete(&self, cx: Ctx, key: &[u8], cas: u64) -> DeleteOutcome {
        self.delete_if(cx, key, (cas != 0).then_some(cas))
    }

    /// `md`: removes the key's live item, only if its CAS id is `cas` when given (`C0`
    /// matches no item: memcached's meta delete compares even a zero).
    pub fn delete_if(&self, cx: Ctx, key: &[u8], cas: Option<u64>) -> DeleteOutcome {
        let mut class = 0;
        let outcome = self
            .mutate(cx, key, |live| match live {
                None => (Plan::Keep, DeleteOutcome::NotFound),
                Some(item) if cas.is_some_and(|c| item.cas != c) => {
                    (Plan::Keep, DeleteOutcome::Exists)
                }
                Some(item) => {
                    class = item.class;
                    (Plan::Remove, DeleteOutcome::Deleted)
                }
            })
            .map_or(DeleteOutcome::NotFound, |(o, _)| o);
        if outcome == DeleteOutcome::Deleted {
            self.count_class(cx, class, ClassCounter::DeleteHits);
        }
        self.count(
            cx,
            match outcome {
                DeleteOutcome::Deleted => Counter::DeleteHits,
                _ => Counter::DeleteMisses,
            },
        );
        outcome
    }

    /// `incr`/`decr` (text and binary). The value must read as a decimal number by
    /// memcached's rules (see `numeric`); the result replaces it, space-padded to the
    /// old length when shorter (memcached's in-place update), with a new CAS id and the
    /// old flags and expiry.
    pub fn arith(&self, cx: Ctx, key: &[u8], op: Arith) -> Result<ArithOutcome, StoreError> {
        self.meta_arith(cx, key, op, None).map(|(o, _)| o)
    }

    /// `ma`: [`arith`](Self::arith), then sets the expiry of an existing item to
    /// `touch` (`T`; an item created from [`Arith::initial`] gets the initial's expiry).
    /// Also returns, for a value, the expiry before `touch` and whether it was created.
    pub fn meta_arith(
        &self,
        cx: Ctx,
        key: &[u8],
        op: Arith,
        touch: Option<i64>,
    ) -> Result<(ArithOutcome, MetaArith), StoreError> {
        let mut meta = MetaArith {
            exptime: 0,
            created: false,
        };
        let meta_ref = &mut meta;
        let (hit, miss, class_hit) = if op.incr {
            (
                Counter::IncrHits,
                Counter::IncrMisses,
                ClassCounter::IncrHits,
            )
        } else {
            (
                Counter::DecrHits,
                Counter::DecrMisses,
                ClassCounter::DecrHits,
            )
        };
        let (outcome, cas) = self.mutate(cx, key, |live| {
            let Some(item) = live else {
                self.count(cx, miss);
                return match op.initial {
                    Some((initial, exptime)) => {
                        meta_ref.created = true;
                        (
                            Plan::Write {
                                flags: 0,
                                exptime: absolute_expiry(exptime, cx.now),
                                value: numeric::render(initial, 0),
                            },
                            ArithOutcome::Value {
                                value: initial,
                                cas: 0,
                            },
                        )
                    }
                    None => (Plan::Keep, ArithOutcome::NotFound),
                };
            };
            if item.value.is_empty() {
                return (Plan::Keep, ArithOutcome::NonNumeric);
            }
            if op.cas != 0 && item.cas != op.cas {
                return (Plan::Keep, ArithOutcome::Exists);
            }
            let Some(current) = numeric::parse_u64(item.value.segments()) else {
                return (Plan::Keep, ArithOutcome::NonNumeric);
            };
            self.count(cx, hit);
            self.count_class(cx, item.class, class_hit);
            let value = if op.incr {
                current.wrapping_add(op.delta)
            } else {
                current.saturating_sub(op.delta)
            };
            let old_exptime = item.exptime.load(Ordering::Relaxed);
            meta_ref.exptime = old_exptime;
            (
                Plan::Write {
                    flags: item.flags,
                    exptime: touch.map_or(old_exptime, |t| absolute_expiry(t, cx.now)),
                    value: numeric::render(value, item.value.len()),
                },
                ArithOutcome::Value { value, cas: 0 },
            )
        })?;
        let outcome = match (outcome, cas) {
            (ArithOutcome::Value { value, .. }, Some(written)) => ArithOutcome::Value {
                value,
                cas: written.cas,
            },
            (other, _) => other,
        };
        Ok((outcome, meta))
    }

    /// `flush_all [delay]`: with `delay <= 0` every present item becomes invalid now;
    /// otherwise items become invalid from the flush time on (see the module docs).
    pub fn flush_all(&self, cx: Ctx, delay: i64) {
        self.count(cx, Counter::CmdFlush);
        let flush = &self.flush.0;
        if delay > 0 {
            let at = absolute_expiry(delay, cx.now);
            flush
                .oldest_live
                .store(at.saturating_sub(1).max(1), Ordering::Relaxed);
        } else {
            // Every CAS id handed out so far is below the counter's current value.
            let next = self.shared.0.next_cas.load(Ordering::Relaxed);
            flush.oldest_cas.fetch_max(next, Ordering::Relaxed);
            // Like memcached, an immediate flush replaces a pending delayed one.
            // memcached also sets `oldest_live = now - 1`, which only hits items the
            // CAS rule already invalidates; we leave it unset, so that an item stored
            // right after the flush by a core whose clock lags a second is not lost.
            flush.oldest_live.store(0, Ordering::Relaxed);
        }
    }

    /// Removes up to `budget` slots' worth of expired or flushed items, continuing
    /// where the previous sweep stopped; returns how many it removed. For an idle
    /// handler: each call takes one shard lock at a time, for at most `budget` slots.
    /// One sweep runs at a time: a call while another core sweeps returns 0 at once
    /// rather than spin in an idle handler.
    pub fn sweep(&self, cx: Ctx, budget: usize) -> usize {
        let Some(mut at) = self.sweep_at.try_lock() else {
            return 0;
        };
        let mut left = budget;
        let mut removed = 0;
        let mut empty_shards = 0;
        while left > 0 && empty_shards <= self.shards.len() {
            let (shard_index, slot) = *at;
            let Some(shard) = self.shards.get(shard_index) else {
                *at = (0, 0);
                continue;
            };
            let mut ring = shard.ring.lock();
            let mut slot = slot;
            while left > 0 && slot < ring.clock.len() {
                left -= 1;
                if let Some(item) = ring.clock[slot].clone()
                    && self.dead(&item, cx.now)
                {
                    self.unlink_dead(cx, shard, &mut ring, &item);
                    removed += 1;
                }
                slot += 1;
            }
            if slot >= ring.clock.len() {
                // Count shards that cost no budget, so a store of empty shards ends.
                empty_shards += usize::from(ring.clock.is_empty());
                *at = ((shard_index + 1) & (self.shards.len() - 1), 0);
            } else {
                *at = (shard_index, slot);
            }
        }
        removed
    }

    /// A snapshot of the statistics.
    pub fn stats(&self) -> Stats {
        let mut stats = self.counters.snapshot();
        stats.curr_items = self.shared.0.items.load(Ordering::Relaxed) as u64;
        stats.bytes = self.shared.0.used.load(Ordering::Relaxed) as u64;
        stats.limit_maxbytes = self.config.memory_limit as u64;
        stats
    }

    /// Every size class that holds items or has counted something, by id: the
    /// counters, and the items, bytes and oldest item found by walking every shard
    /// (each shard's lock held while its ring is read: for `stats slabs`/`stats items`,
    /// not for a hot path).
    pub fn class_stats(&self, now: UnixTime) -> Vec<ClassStats> {
        let mut classes: Vec<ClassStats> = (0..MAX_CLASSES)
            .map(|id| ClassStats {
                id: id as u8,
                chunk_size: self.chunk_sizes.get(id).copied().unwrap_or(0),
                ..ClassStats::default()
            })
            .collect();
        let mut oldest: Vec<Option<UnixTime>> = alloc::vec![None; MAX_CLASSES];
        for shard in self.shards.iter() {
            let ring = shard.ring.lock();
            for item in ring.clock.iter().flatten() {
                let id = usize::from(item.class);
                if let Some(class) = classes.get_mut(id) {
                    class.items += 1;
                    class.bytes += item.size as u64;
                    let o = &mut oldest[id];
                    *o = Some(o.map_or(item.time, |t| t.min(item.time)));
                }
            }
        }
        for class in &mut classes {
            let id = class.id;
            class.age = oldest[usize::from(id)].map_or(0, |t| now.saturating_sub(t));
            for (at, counter) in class.counters.iter_mut().enumerate() {
                *counter = self.class_counters.sum(id, CLASS_COUNTER_ORDER[at]);
            }
            class.evicted_time = self.class_counters.evicted_time(id);
        }
        classes.retain(|c| c.id != 0 && (c.items != 0 || c.counters.iter().any(|&n| n != 0)));
        classes
    }

    // ----- the write path -----

    /// Runs one write on `key` under its shard's lock: `f` sees the live item (an
    /// expired or flushed one counts as absent, and is removed) and decides; the plan
    /// is carried out. Returns `f`'s result and, if an item was written, its CAS id and
    /// size class.
    fn mutate<T>(
        &self,
        cx: Ctx,
        key: &[u8],
        f: impl FnOnce(Option<&Item>) -> (Plan, T),
    ) -> Result<(T, Option<Written>), StoreError> {
        let (index, shard) = self.shard_for(key).ok_or(StoreError::BadKey)?;
        let mut ring = shard.ring.lock();
        // Under the shard lock, no write can change the key meanwhile.
        let current = shard.map.get(key, Arc::clone);
        let dead = current.as_ref().is_some_and(|c| self.dead(c, cx.now));
        let live = if dead { None } else { current.as_deref() };
        let (plan, out) = f(live);
        let (flags, exptime, value) = match plan {
            Plan::Write {
                flags,
                exptime,
                value,
            } => (flags, exptime, value),
            Plan::Keep | Plan::Remove => {
                if let Some(c) = &current {
                    if dead {
                        self.unlink_dead(cx, shard, &mut ring, c);
                    } else if matches!(plan, Plan::Remove) {
                        self.unlink(shard, &mut ring, c);
                    }
                }
                return Ok((out, None));
            }
        };
        let old_size = current.as_ref().map_or(0, |c| c.size);
        let pinned = current.as_ref();
        // The class of the item being written, for an `outofmemory` refusal.
        let mut class = 0;
        let sized = self.size_value(key, flags, value).and_then(|planned| {
            class = class_of(&self.chunk_sizes, planned.size);
            let growth = planned.size.saturating_sub(old_size);
            self.reserve(cx, index, &mut ring, growth, pinned)?;
            match self.keep(planned.value) {
                Some(value) => Ok((planned.size, value)),
                None => {
                    // No memory for it although `-m` had room: allocator rounding the
                    // accounting missed, frees still waiting for a grace period, or the
                    // reserve. Give the reservation back, and evict as much again, so
                    // that the memory is free for the next try once readers move on.
                    self.shared.0.used.fetch_sub(growth, Ordering::Relaxed);
                    if self.config.evict {
                        self.evict_bytes(cx, index, &mut ring, pinned, planned.size);
                    }
                    Err(StoreError::OutOfMemory)
                }
            }
        });
        let (size, value) = match sized {
            Ok(sized) => sized,
            Err(e) => {
                if e == StoreError::OutOfMemory {
                    self.count(cx, Counter::OutOfMemory);
                    self.count_class(cx, class, ClassCounter::OutOfMemory);
                }
                if let Some(c) = current.as_ref().filter(|_| dead) {
                    self.unlink_dead(cx, shard, &mut ring, c);
                }
                return Err(e);
            }
        };
        // The reservation covered the growth; give back any shrinkage.
        if size < old_size {
            self.shared
                .0
                .used
                .fetch_sub(old_size - size, Ordering::Relaxed);
        }
        let slot = match &current {
            Some(c) => c.slot,
            None => ring.alloc_slot(),
        };
        let cas = self.shared.0.next_cas.fetch_add(1, Ordering::Relaxed);
        let item_class = class_of(&self.chunk_sizes, size);
        let item = Arc::new(Item {
            key: ItemKey::new(key),
            flags,
            exptime: AtomicU32::new(exptime),
            time: cx.now,
            cas,
            value,
            size,
            class: item_class,
            slot,
            referenced: AtomicBool::new(false),
            fetched: AtomicBool::new(false),
        });
        match &current {
            None => {
                self.shared.0.items.fetch_add(1, Ordering::Relaxed);
            }
            Some(c) if dead => {
                self.count(cx, Counter::Reclaimed);
                self.count_class(cx, c.class, ClassCounter::Reclaimed);
                if !c.was_fetched() {
                    self.count(cx, Counter::ExpiredUnfetched);
                    self.count_class(cx, c.class, ClassCounter::ExpiredUnfetched);
                }
            }
            Some(_) => {}
        }
        if let Some(entry) = ring.clock.get_mut(slot) {
            *entry = Some(item.clone());
        }
        shard.map.insert(KeyRef(item.clone()), item);
        self.count(cx, Counter::TotalItems);
        let written = Written {
            cas,
            class: item_class,
        };
        Ok((out, Some(written)))
    }

    /// How an item with `key` and `value` will be kept and what it will occupy, unless
    /// it exceeds `item_size_max`. Allocates nothing: the copy, if any, is made by
    /// [`keep`](Self::keep) once the memory is reserved.
    fn size_value(&self, key: &[u8], flags: u32, value: IOBufChain) -> Result<Planned, StoreError> {
        // `-I` as memcached applies it, so clients see the same largest value.
        if memcached_item_size(key.len(), flags, value.len()) > self.config.item_size_max {
            return Err(StoreError::TooLarge);
        }
        let (value, value_cost) = plan_value(value);
        // What we account: the item's own allocations and the value's buffers, each at
        // the allocator's real size. Cannot overflow: the value is at most
        // `item_size_max`.
        let size = ITEM_OVERHEAD
            .saturating_add(item::key_allocation(key.len()))
            .saturating_add(value_cost);
        Ok(Planned { size, value })
    }

    /// The value as the item will hold it: the buffers it came in, or a copy into pieces
    /// from the store's memory — `None` when that memory refuses (never a panic). Either
    /// way, not while the free memory is below the node's reserve.
    fn keep(&self, value: PlannedValue) -> Option<Value> {
        match value {
            PlannedValue::AsIs(chain) => self.memory.room_for(0).then(|| Value::from_chain(chain)),
            PlannedValue::Copy(packing, chain) => {
                if !self.memory.room_for(packing.cost()) {
                    return None;
                }
                let mut pieces = packing.copy(&chain, &*self.memory)?;
                Some(match pieces.len() {
                    0 => Value::One(IOBuf::new()),
                    1 => Value::One(pieces.pop()?),
                    _ => Value::Many(pieces.into_boxed_slice()),
                })
            }
        }
    }

    /// Reserves `need` more accounted bytes, evicting while they do not fit. `own` is
    /// the caller's shard (whose lock it holds, as `ring`); `pinned` is the item being
    /// replaced, which must not be evicted from under the write.
    fn reserve(
        &self,
        cx: Ctx,
        own: usize,
        ring: &mut Ring,
        need: usize,
        pinned: Option<&Arc<Item>>,
    ) -> Result<(), StoreError> {
        let used = &self.shared.0.used;
        let limit = self.config.memory_limit;
        if need > limit {
            // Evicting everything would not make room: do not empty the cache for it.
            return Err(StoreError::OutOfMemory);
        }
        let mut current = used.load(Ordering::Relaxed);
        loop {
            if let Some(total) = current.checked_add(need).filter(|&t| t <= limit) {
                // Relaxed: the counter orders nothing else; all that matters is that
                // the sum never exceeds the limit, which the compare-and-swap ensures.
                match used.compare_exchange_weak(
                    current,
                    total,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Ok(()),
                    Err(actual) => current = actual,
                }
                continue;
            }
            if !self.config.evict || self.evict_one(cx, own, ring, pinned).is_none() {
                return Err(StoreError::OutOfMemory);
            }
            current = used.load(Ordering::Relaxed);
        }
    }

    /// Evicts items until they account for `bytes` or none is left to evict: memory
    /// that frees once the readers that may hold them move on.
    fn evict_bytes(
        &self,
        cx: Ctx,
        own: usize,
        ring: &mut Ring,
        pinned: Option<&Arc<Item>>,
        bytes: usize,
    ) {
        let mut freed = 0;
        while freed < bytes {
            match self.evict_one(cx, own, ring, pinned) {
                Some(size) => freed += size,
                None => return,
            }
        }
    }

    /// Evicts one item from some shard, starting at the global cursor: its accounted
    /// size, or `None` if no shard had one (or the others were all busy).
    fn evict_one(
        &self,
        cx: Ctx,
        own: usize,
        own_ring: &mut Ring,
        pinned: Option<&Arc<Item>>,
    ) -> Option<usize> {
        let n = self.shards.len();
        let start = self.shared.0.evict_cursor.fetch_add(1, Ordering::Relaxed);
        for i in 0..n {
            let index = start.wrapping_add(i) & (n - 1);
            let Some(shard) = self.shards.get(index) else {
                continue;
            };
            let evicted = if index == own {
                self.evict_from(cx, shard, own_ring, pinned)
            } else if let Some(mut ring) = shard.ring.try_lock() {
                // try_lock: we hold our own shard's lock; waiting for another could
                // deadlock with a writer there that waits for ours.
                self.evict_from(cx, shard, &mut ring, None)
            } else {
                None
            };
            if evicted.is_some() {
                return evicted;
            }
        }
        None
    }

    /// Runs `shard`'s CLOCK hand until it removes one item (not `pinned`): its accounted
    /// size, or `None` if the shard has none to give.
    fn evict_from(
        &self,
        cx: Ctx,
        shard: &Shard,
        ring: &mut Ring,
        pinned: Option<&Arc<Item>>,
    ) -> Option<usize> {
        let n = ring.clock.len();
        // Two turns: the first may only clear reference bits.
        for _ in 0..2 * n {
            let at = if ring.hand < n { ring.hand } else { 0 };
            ring.hand = at + 1;
            let Some(item) = ring.clock.get(at).and_then(Option::as_ref) else {
                continue;
            };
            if pinned.is_some_and(|p| Arc::ptr_eq(p, item)) {
                continue;
            }
            let dead = self.dead(item, cx.now);
            if !dead && item.referenced.load(Ordering::Relaxed) {
                item.referenced.store(false, Ordering::Relaxed);
                continue;
            }
            let item = item.clone();
            if dead {
                self.unlink_dead(cx, shard, ring, &item);
                self.count(cx, Counter::Reclaimed);
                self.count_class(cx, item.class, ClassCounter::Reclaimed);
            } else {
                self.unlink(shard, ring, &item);
                self.count(cx, Counter::Evictions);
                self.count_class(cx, item.class, ClassCounter::Evicted);
                if item.exptime.load(Ordering::Relaxed) != 0 {
                    self.count_class(cx, item.class, ClassCounter::EvictedNonzero);
                }
                // memcached's is the time since the item's last access; ours since it
                // was stored (items keep no access time: a read writes nothing).
                self.class_counters
                    .set_evicted_time(item.class, cx.now.saturating_sub(item.time));
                if !item.was_fetched() {
                    self.count(cx, Counter::EvictedUnfetched);
                    self.count_class(cx, item.class, ClassCounter::EvictedUnfetched);
                }
            }
            return Some(item.size);
        }
        None
    }

    /// Unlinks an expired or flushed item, counting it.
    fn unlink_dead(&self, cx: Ctx, shard: &Shard, ring: &mut Ring, item: &Arc<Item>) {
        if item.expired(cx.now) && !item.was_fetched() {
            self.count(cx, Counter::ExpiredUnfetched);
            self.count_class(cx, item.class, ClassCounter::ExpiredUnfetched);
        }
        self.unlink(shard, ring, item);
    }

    /// Unlinks `item` (linked in `shard`, whose lock the caller holds as `ring`) from
    /// the map and the ring, and stops accounting it.
    fn unlink(&self, shard: &Shard, ring: &mut Ring, item: &Arc<Item>) {
        if !ring.holds(item) {
            return;
        }
        if let Some(entry) = ring.clock.get_mut(item.slot) {
            *entry = None;
        }
        ring.free.push(item.slot);
        shard.map.remove_if(&item.key[..], |v| Arc::ptr_eq(v, item));
        self.shared.0.used.fetch_sub(item.size, Ordering::Relaxed);
        self.shared.0.items.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An item's size and its value's plan, decided before any memory is reserved.
struct Planned {
    size: usize,
    value: PlannedValue,
}

/// How a value will be kept.
enum PlannedValue {
    /// In the buffers it came in (shared with the receive path, no copy).
    AsIs(IOBufChain),
    /// Copied into pieces ([`Packing`]).
    Copy(Packing, IOBufChain),
}

/// How to keep `value`, and what that occupies. As it came — no copy — when it is one
/// buffer that occupies at most an eighth more than a copy would (a value that filled
/// its receive buffer); otherwise copied into [`Packing`]'s pieces: a small value cut
/// from a large buffer would pin all of it, and a value in several buffers (one
/// arriving in frames, an append) would pin a receive buffer per frame — small slab
/// objects scattered over the heap, which evicting other items does not turn back into
/// the blocks large values need.
fn plan_value(value: IOBufChain) -> (PlannedValue, usize) {
    let packing = Packing::new(value.len());
    let copy_cost = packing.cost();
    match value.segment_count() {
        0 => (PlannedValue::AsIs(value), 0),
        1 => {
            let kept = memory::chain_cost(&value);
            if kept <= copy_cost.saturating_add(copy_cost / 8) {
                (PlannedValue::AsIs(value), kept)
            } else {
                (PlannedValue::Copy(packing, value), copy_cost)
            }
        }
        _ => (PlannedValue::Copy(packing, value), copy_cost),
    }
}
