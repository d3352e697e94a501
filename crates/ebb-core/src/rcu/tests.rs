//! Tests of the RCU domain and map: deterministic single-thread simulations of several
//! cores, a model-based property test, and a multi-threaded stress test.

use super::{RcuDomain, RcuHashMap};
use crate::CoreId;
use crate::percore::{current_core, set_current_core};
use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::collections::HashMap;

/// Runs `f` with the calling thread acting as `core`, then restores its identity:
/// how one thread simulates several cores.
fn as_core<R>(core: u32, f: impl FnOnce() -> R) -> R {
    let previous = current_core();
    set_current_core(Some(CoreId(core)));
    let r = f();
    set_current_core(previous);
    r
}

/// Reports a QS for simulated core `core`.
fn qs(domain: &RcuDomain, core: u32) {
    as_core(core, || domain.quiescent_state(CoreId(core)));
}

/// Puts simulated core `core` to sleep.
fn idle(domain: &RcuDomain, core: u32) {
    as_core(core, || domain.enter_idle(CoreId(core)));
}

/// A callback that counts its runs.
fn counting(counter: &Arc<AtomicUsize>) -> Box<dyn FnOnce() + Send> {
    let counter = counter.clone();
    Box::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
    })
}

#[test]
fn callback_waits_for_every_core() {
    let domain = RcuDomain::new(3);
    let ran = Arc::new(AtomicUsize::new(0));
    domain.call_rcu(Some(CoreId(0)), counting(&ran));
    assert_eq!(domain.pending_callbacks(), 1);
    // Core 0's QS assigns the callback a grace period and starts it; cores 1 and 2
    // have not passed a QS since.
    qs(&domain, 0);
    qs(&domain, 1);
    qs(&domain, 0);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    assert_eq!(domain.completed_grace_periods(), 0);
    qs(&domain, 2);
    assert_eq!(domain.completed_grace_periods(), 1);
    // Completed, but callbacks run on their own core at its next QS.
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    qs(&domain, 1);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    qs(&domain, 0);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert_eq!(domain.pending_callbacks(), 0);
}

#[test]
fn qs_before_the_grace_period_starts_does_not_count() {
    let domain = RcuDomain::new(2);
    let ran = Arc::new(AtomicUsize::new(0));
    domain.call_rcu(Some(CoreId(0)), counting(&ran));
    // Core 1 passes a QS, but the GP only starts at core 0's QS below.
    qs(&domain, 1);
    qs(&domain, 0);
    qs(&domain, 0);
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    qs(&domain, 1);
    qs(&domain, 0);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[test]
fn idle_cores_do_not_block_grace_periods() {
    let domain = RcuDomain::new(4);
    idle(&domain, 2);
    idle(&domain, 3);
    let ran = Arc::new(AtomicUsize::new(0));
    domain.call_rcu(Some(CoreId(1)), counting(&ran));
    qs(&domain, 1);
    qs(&domain, 0);
    qs(&domain, 1);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    assert!(domain.is_idle(CoreId(3)));

    // A core that goes idle while a GP waits for it releases the GP.
    domain.exit_idle(CoreId(2));
    domain.call_rcu(Some(CoreId(1)), counting(&ran));
    qs(&domain, 1); // starts a GP needing 0, 1, 2 (3 is idle)
    qs(&domain, 0);
    qs(&domain, 1);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    idle(&domain, 2);
    qs(&domain, 1);
    assert_eq!(ran.load(Ordering::SeqCst), 2);
}

#[test]
fn all_idle_but_requester_completes_immediately() {
    let domain = RcuDomain::new(3);
    idle(&domain, 1);
    idle(&domain, 2);
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..5 {
        domain.call_rcu(Some(CoreId(0)), counting(&ran));
        qs(&domain, 0);
        qs(&domain, 0);
    }
    assert_eq!(ran.load(Ordering::SeqCst), 5);
}

#[test]
fn off_core_callbacks_are_adopted_by_a_core() {
    let domain = RcuDomain::new(2);
    let ran = Arc::new(AtomicUsize::new(0));
    domain.call_rcu(None, counting(&ran));
    // An id outside the domain counts as off core too.
    domain.call_rcu(Some(CoreId(7)), counting(&ran));
    assert_eq!(domain.pending_callbacks(), 2);
    qs(&domain, 1); // adopts both, starts a GP
    qs(&domain, 0);
    qs(&domain, 1);
    qs(&domain, 1);
    assert_eq!(ran.load(Ordering::SeqCst), 2);
    assert_eq!(domain.pending_callbacks(), 0);
}

#[test]
fn callbacks_may_queue_callbacks() {
    let domain = Arc::new(RcuDomain::new(2));
    let ran = Arc::new(AtomicUsize::new(0));
    let inner = counting(&ran);
    let d = domain.clone();
    domain.call_rcu(
        Some(CoreId(0)),
        Box::new(move || d.call_rcu(Some(CoreId(0)), inner)),
    );
    for _ in 0..6 {
        qs(&domain, 0);
        qs(&domain, 1);
    }
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[test]
fn later_batches_wait_for_a_later_grace_period() {
    let domain = RcuDomain::new(2);
    let first = Arc::new(AtomicUsize::new(0));
    let second = Arc::new(AtomicUsize::new(0));
    domain.call_rcu(Some(CoreId(0)), counting(&first));
    qs(&domain, 0); // GP 1 starts
    domain.call_rcu(Some(CoreId(0)), counting(&second));
    qs(&domain, 0); // GP 1 running: second batch targets GP 2
    qs(&domain, 1); // GP 1 done, GP 2 started by the completer
    qs(&domain, 0);
    assert_eq!(first.load(Ordering::SeqCst), 1);
    assert_eq!(second.load(Ordering::SeqCst), 0);
    qs(&domain, 1);
    qs(&domain, 0);
    assert_eq!(second.load(Ordering::SeqCst), 1);
}

#[test]
fn drop_runs_remaining_callbacks() {
    let ran = Arc::new(AtomicUsize::new(0));
    {
        let domain = RcuDomain::new(2);
        domain.call_rcu(Some(CoreId(0)), counting(&ran));
        qs(&domain, 0); // waiting for core 1
        domain.call_rcu(Some(CoreId(1)), counting(&ran)); // never assigned
        domain.call_rcu(None, counting(&ran)); // never adopted
        assert_eq!(domain.pending_callbacks(), 3);
    }
    assert_eq!(ran.load(Ordering::SeqCst), 3);
}

#[test]
fn read_guards_only_on_active_cores() {
    let domain = RcuDomain::new(2);
    set_current_core(None);
    assert!(domain.read_guard().is_none(), "not a core");
    as_core(5, || {
        assert!(domain.read_guard().is_none(), "not a core of this domain")
    });
    as_core(1, || {
        let outer = domain.read_guard();
        assert!(outer.is_some());
        let inner = domain.read_guard();
        assert!(inner.is_some(), "sections nest");
        drop(inner);
        drop(outer);
        domain.quiescent_state(CoreId(1));
        domain.enter_idle(CoreId(1));
        assert!(domain.read_guard().is_none(), "idle core");
        domain.exit_idle(CoreId(1));
        assert!(domain.read_guard().is_some());
    });
}

#[test]
#[should_panic(expected = "inside an RCU read-side critical section")]
fn quiescent_state_inside_a_read_panics() {
    let domain = Arc::new(RcuDomain::new(1));
    set_current_core(Some(CoreId(0)));
    let map = RcuHashMap::new(domain.clone());
    map.insert(1u8, 1u8);
    map.get(&1, |_| domain.quiescent_state(CoreId(0)));
}

#[test]
#[should_panic(expected = "reported by the thread running as the core")]
fn quiescent_state_for_another_core_panics() {
    let domain = RcuDomain::new(2);
    as_core(0, || domain.quiescent_state(CoreId(1)));
}

#[test]
fn domain_and_map_are_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<RcuDomain>();
    check::<RcuHashMap<u64, alloc::string::String>>();
}

// ---------------------------------------------------------------------------------
// Map unit tests (single thread, acting as core 0 of a one-core domain).
// ---------------------------------------------------------------------------------

/// Runs `f` as core 0 of a fresh one-core domain, then restores the thread.
fn on_core0<R>(f: impl FnOnce(&Arc<RcuDomain>) -> R) -> R {
    let domain = Arc::new(RcuDomain::new(1));
    set_current_core(Some(CoreId(0)));
    let r = f(&domain);
    set_current_core(None);
    r
}

#[test]
fn a_lookup_with_the_maps_own_hash_finds_what_get_finds() {
    use core::hash::BuildHasher;
    on_core0(|domain| {
        let map: RcuHashMap<alloc::string::String, u32> = RcuHashMap::new(domain.clone());
        for i in 0..100u32 {
            map.insert(alloc::format!("k{i}"), i);
        }
        for i in 0..101u32 {
            let key = alloc::format!("k{i}");
            let hash = map.hasher().hash_one(key.as_str());
            assert_eq!(
                map.get_hashed(hash, key.as_str(), |v| *v),
                map.get_cloned(key.as_str())
            );
        }
    });
}

#[test]
fn map_basic_operations() {
    on_core0(|domain| {
        let map: RcuHashMap<alloc::string::String, u32> = RcuHashMap::new(domain.clone());
        assert!(map.is_empty());
        assert!(!map.insert("a".into(), 1));
        assert!(!map.insert("b".into(), 2));
        assert!(map.insert("a".into(), 3));
        assert_eq!(map.len(), 2);
        // Borrow-style lookups with &str.
        assert_eq!(map.get_cloned("a"), Some(3));
        assert_eq!(map.get("b", |v| v * 10), Some(20));
        assert!(map.contains_key("b"));
        assert!(!map.contains_key("c"));
        assert!(map.remove("b"));
        assert!(!map.remove("b"));
        assert_eq!(map.len(), 1);
        let mut seen = Vec::new();
        map.for_each(|k, v| seen.push((k.clone(), *v)));
        assert_eq!(seen, [("a".into(), 3)]);
        map.clear();
        assert!(map.is_empty());
        assert_eq!(map.get_cloned("a"), None);
        qs(domain, 0);
        qs(domain, 0);
        assert_eq!(domain.pending_callbacks(), 0);
    });
}

/// Counts live instances; a use after drop trips the canary.
struct Tracked {
    id: u64,
    live: Arc<AtomicUsize>,
    alive: AtomicBool,
}

impl Tracked {
    fn new(id: u64, live: &Arc<AtomicUsize>) -> Self {
        live.fetch_add(1, Ordering::SeqCst);
        Tracked {
            id,
            live: live.clone(),
            alive: AtomicBool::new(true),
        }
    }
}

impl Clone for Tracked {
    fn clone(&self) -> Self {
        Tracked::new(self.id, &self.live)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        assert!(self.alive.swap(false, Ordering::SeqCst), "double drop");
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

#[test]
fn map_retires_after_grace_period_and_drop_frees_everything() {
    let live = Arc::new(AtomicUsize::new(0));
    let domain = Arc::new(RcuDomain::new(2));
    set_current_core(Some(CoreId(0)));
    let map = RcuHashMap::new(domain.clone());
    for i in 0..100 {
        map.insert(i, Tracked::new(i, &live));
    }
    assert!(map.bucket_count() >= 100, "the table grew");
    map.insert(5, Tracked::new(5, &live)); // replaces
    map.remove(&6);
    // Old copies from growth and the replaced/removed values wait for a GP.
    assert!(live.load(Ordering::SeqCst) > 100);
    assert!(domain.pending_callbacks() > 0);
    qs(&domain, 0);
    qs(&domain, 1);
    qs(&domain, 0);
    assert_eq!(domain.pending_callbacks(), 0);
    assert_eq!(live.load(Ordering::SeqCst), 99);
    map.get(&7, |v| assert!(v.alive.load(Ordering::SeqCst) && v.id == 7));
    // Leave retired garbage behind, then drop map and domain.
    map.remove(&7);
    map.insert(8, Tracked::new(80, &live));
    drop(map);
    assert_eq!(
        live.load(Ordering::SeqCst),
        2,
        "only the retired ones remain"
    );
    drop(domain);
    assert_eq!(live.load(Ordering::SeqCst), 0);
    set_current_core(None);
}

#[test]
fn off_core_map_use_falls_back_to_the_lock() {
    let domain = Arc::new(RcuDomain::new(1));
    set_current_core(None);
    let map = RcuHashMap::new(domain.clone());
    for i in 0..50u32 {
        map.insert(i, i);
    }
    assert_eq!(map.get(&7, |v| *v), Some(7));
    let mut sum = 0;
    map.for_each(|_, v| sum += v);
    assert_eq!(sum, (0..50).sum());
    assert!(domain.pending_callbacks() > 0);
    qs(&domain, 0);
    qs(&domain, 0);
    qs(&domain, 0);
    assert_eq!(domain.pending_callbacks(), 0);
}

mod model {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
        Get(u16),
        Quiescent,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Keys from a small range so that replaces and removes hit.
        prop_oneof![
            4 => (0..300u16, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => (0..300u16).prop_map(Op::Remove),
            3 => (0..300u16).prop_map(Op::Get),
            1 => Just(Op::Quiescent),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: if cfg!(miri) { 2 } else { 64 },
            failure_persistence: None,
            ..ProptestConfig::default()
        })]
        #[test]
        fn behaves_like_std_hashmap(ops in proptest::collection::vec(op(), 1..600)) {
            let domain = Arc::new(RcuDomain::new(2));
            set_current_core(Some(CoreId(0)));
            let map = RcuHashMap::with_capacity(domain.clone(), 1);
            let mut model = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        prop_assert_eq!(map.insert(k, v), model.insert(k, v).is_some());
                    }
                    Op::Remove(k) => prop_assert_eq!(map.remove(&k), model.remove(&k).is_some()),
                    Op::Get(k) => {
                        prop_assert_eq!(map.get_cloned(&k), model.get(&k).copied());
                        prop_assert_eq!(map.contains_key(&k), model.contains_key(&k));
                    }
                    Op::Quiescent => {
                        qs(&domain, 0);
                        qs(&domain, 1);
                    }
                }
                prop_assert_eq!(map.len(), model.len());
            }
            let mut all = HashMap::new();
            let mut duplicates = 0;
            map.for_each(|k, v| duplicates += usize::from(all.insert(*k, *v).is_some()));
            prop_assert_eq!(duplicates, 0);
            prop_assert_eq!(all, model);
            set_current_core(None);
        }
    }
}

// ---------------------------------------------------------------------------------
// Multi-threaded stress test.
// ---------------------------------------------------------------------------------

const CANARY_ALIVE: u64 = 0xA11C_E5A1_1CE5_A11C;
const CANARY_DEAD: u64 = 0xDEAD_DEAD_DEAD_DEAD;

/// Per-run counters (tests run in parallel, so not statics).
#[derive(Default)]
struct Stats {
    created: AtomicUsize,
    dropped: AtomicUsize,
    /// Corrupt reads and double drops.
    bad: AtomicUsize,
}

/// A value whose fields are tied by a checksum, with a canary overwritten on drop.
struct Checked {
    key: u64,
    payload: u64,
    check: u64,
    canary: AtomicU64,
    stats: Arc<Stats>,
}

impl Checked {
    fn new(key: u64, payload: u64, stats: &Arc<Stats>) -> Self {
        stats.created.fetch_add(1, Ordering::SeqCst);
        Checked {
            key,
            payload,
            check: key.rotate_left(17) ^ payload ^ 0x5555,
            canary: AtomicU64::new(CANARY_ALIVE),
            stats: stats.clone(),
        }
    }

    /// Checks the value read for `key`; records a failure in the stats.
    fn verify(&self, key: u64) {
        let ok = self.canary.load(Ordering::Relaxed) == CANARY_ALIVE
            && self.key == key
            && self.check == key.rotate_left(17) ^ self.payload ^ 0x5555;
        if !ok {
            self.stats.bad.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Clone for Checked {
    fn clone(&self) -> Self {
        Checked::new(self.key, self.payload, &self.stats)
    }
}

impl Drop for Checked {
    fn drop(&mut self) {
        if self.canary.swap(CANARY_DEAD, Ordering::SeqCst) != CANARY_ALIVE {
            self.stats.bad.fetch_add(1, Ordering::SeqCst); // double drop
        }
        self.stats.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

/// xorshift64*: a tiny deterministic PRNG per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

struct StressConfig {
    cores: u32,
    iterations: u32,
    keys: u64,
    /// Every how many iterations a core sleeps (enter_idle / sleep / exit_idle).
    idle_every: u32,
    sleep: std::time::Duration,
}

/// N threads run "event loops" as cores 0..N: reads that verify what they see, one
/// random write, then a QS, sometimes an idle period. An off-core thread writes and
/// reads through the lock fallback. Checks that nothing read was corrupt or freed, and
/// that every value is dropped exactly once by the time the domain is gone.
fn run_stress(config: StressConfig) {
    let StressConfig {
        cores,
        iterations,
        keys,
        idle_every,
        sleep,
    } = config;
    let stats = Arc::new(Stats::default());
    let domain = Arc::new(RcuDomain::new(cores as usize));
    let map = Arc::new(RcuHashMap::with_capacity(domain.clone(), 1));
    let reads = Arc::new(AtomicUsize::new(0));
    let stop_helper = Arc::new(AtomicBool::new(false));

    let helper = {
        let map = map.clone();
        let stop = stop_helper.clone();
        let stats = stats.clone();
        std::thread::spawn(move || {
            let mut rng = Rng(99);
            while !stop.load(Ordering::Relaxed) {
                let key = rng.next() % keys;
                if rng.next().is_multiple_of(2) {
                    map.insert(key, Checked::new(key, rng.next(), &stats));
                } else {
                    map.get(&key, |v| v.verify(key));
                }
                std::thread::sleep(sleep * 4);
            }
        })
    };

    let threads: Vec<_> = (0..cores)
        .map(|i| {
            let domain = domain.clone();
            let map = map.clone();
            let reads = reads.clone();
            let stats = stats.clone();
            std::thread::spawn(move || {
                let core = CoreId(i);
                set_current_core(Some(core));
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ u64::from(i + 1));
                let mut local_reads = 0;
                for iteration in 0..iterations {
                    // One event: several reads, one write.
                    for _ in 0..4 {
                        let key = rng.next() % keys;
                        map.get(&key, |v| {
                            local_reads += 1;
                            v.verify(key);
                        });
                    }
                    if iteration % 512 == 7 {
                        map.for_each(|k, v| v.verify(*k));
                    }
                    let key = rng.next() % keys;
                    if rng.next().is_multiple_of(3) {
                        map.remove(&key);
                    } else {
                        map.insert(key, Checked::new(key, rng.next(), &stats));
                    }
                    domain.quiescent_state(core);
                    if iteration % idle_every == idle_every - 1 {
                        domain.enter_idle(core);
                        std::thread::sleep(sleep);
                        domain.exit_idle(core);
                    }
                }
                // This core stops: an extended QS forever, so the others go on.
                domain.enter_idle(core);
                set_current_core(None);
                reads.fetch_add(local_reads, Ordering::SeqCst);
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    stop_helper.store(true, Ordering::Relaxed);
    helper.join().unwrap();

    assert_eq!(
        stats.bad.load(Ordering::SeqCst),
        0,
        "corrupt read or double drop"
    );
    assert!(reads.load(Ordering::SeqCst) > 0);
    assert!(
        domain.completed_grace_periods() > 0,
        "grace periods progressed"
    );
    let len = map.len();
    let mut count = 0;
    map.for_each(|_, _| count += 1);
    assert_eq!(count, len);
    let live = stats.created.load(Ordering::SeqCst) - stats.dropped.load(Ordering::SeqCst);
    assert!(live >= len, "nothing reachable was freed");
    drop(map);
    assert_eq!(Arc::strong_count(&domain), 1);
    drop(domain);
    assert_eq!(
        stats.created.load(Ordering::SeqCst),
        stats.dropped.load(Ordering::SeqCst),
        "every value dropped exactly once, nothing leaked"
    );
    assert_eq!(stats.bad.load(Ordering::SeqCst), 0);
}

#[test]
#[cfg_attr(miri, ignore)]
fn stress_concurrent_readers_writers_and_idle() {
    run_stress(StressConfig {
        cores: 4,
        iterations: 50_000,
        keys: 1024,
        idle_every: 97,
        sleep: std::time::Duration::from_micros(50),
    });
}

/// A small version of the stress test, sized for Miri (which checks data races and
/// explores weak-memory behaviours) but run natively too.
#[test]
fn stress_small() {
    run_stress(StressConfig {
        cores: 3,
        iterations: if cfg!(miri) { 60 } else { 2_000 },
        keys: 16,
        idle_every: 7,
        sleep: std::time::Duration::from_micros(1),
    });
}

#[test]
fn try_insert_claims_once_and_remove_if_releases_only_its_own_claim() {
    let domain = Arc::new(RcuDomain::new(2));
    let map: RcuHashMap<u32, u32> = RcuHashMap::new(domain);
    as_core(0, || {
        assert!(map.try_insert(7, 0), "first claim wins");
        assert!(!map.try_insert(7, 1), "second claim loses");
        assert_eq!(map.get_cloned(&7), Some(0), "and leaves the winner's value");
        assert!(
            !map.remove_if(&7, |&owner| owner == 1),
            "not core 1's to release"
        );
        assert_eq!(map.get_cloned(&7), Some(0));
        assert!(map.remove_if(&7, |&owner| owner == 0));
        assert!(!map.contains_key(&7));
        assert!(!map.remove_if(&7, |_| true), "absent");
        assert!(map.try_insert(7, 1), "free again");
        assert_eq!(map.len(), 1);
    });
}

#[test]
fn concurrent_claims_have_exactly_one_winner_per_key() {
    // Fewer keys under Miri, which interprets every step of the four threads.
    let keys: u32 = if cfg!(miri) { 200 } else { 2_000 };
    let domain = Arc::new(RcuDomain::new(4));
    let map = Arc::new(RcuHashMap::<u32, u32>::new(domain));
    let wins: Vec<_> = (0..4u32)
        .map(|core| {
            let map = map.clone();
            std::thread::spawn(move || (0..keys).filter(|&key| map.try_insert(key, core)).count())
        })
        .collect();
    let total: usize = wins
        .into_iter()
        .map(|t| t.join().expect("claimer panicked"))
        .sum();
    assert_eq!(total, keys as usize, "every key claimed exactly once");
    assert_eq!(map.len(), keys as usize);
}
