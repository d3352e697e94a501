//! Stress: every core hammers every other core with `spawn_on` while all of them update
//! and read one RCU hash map. Checks that no event is lost, that readers never see a
//! freed value (a canary is overwritten on drop), and that every value is dropped exactly
//! once by the end.

use ebb_core::CoreId;
use ebb_core::event::{self, Handle, Runtime, run_on, run_on_threads, spawn_on};
use ebb_core::rcu::RcuHashMap;
use ebb_core::testing::TestPlatform;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const CORES: usize = 4;
const EVENTS_PER_CORE: u64 = 20_000;
const KEYS: u64 = 257;
const ALIVE: u64 = 0xA11C_E0FF_A11C_E0FF;
const DEAD: u64 = 0xDEAD_DEAD_DEAD_DEAD;

static CREATED: AtomicUsize = AtomicUsize::new(0);
static DROPPED: AtomicUsize = AtomicUsize::new(0);

/// A value that knows whether it is alive.
struct Canary {
    magic: u64,
    payload: u64,
    check: u64,
}

impl Canary {
    fn new(payload: u64) -> Canary {
        CREATED.fetch_add(1, Ordering::SeqCst);
        Canary {
            magic: ALIVE,
            payload,
            check: !payload,
        }
    }
    fn verify(&self) {
        assert_eq!(self.magic, ALIVE, "read a dropped value (use after free)");
        assert_eq!(self.check, !self.payload, "read a torn value");
    }
}

impl Clone for Canary {
    fn clone(&self) -> Canary {
        self.verify();
        Canary::new(self.payload)
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.verify();
        self.magic = DEAD;
        DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// One synthetic event: a few reads, one update.
fn touch(map: &RcuHashMap<u64, Canary>, seed: u64) {
    let mut rng = seed | 1;
    for _ in 0..4 {
        let key = xorshift(&mut rng) % KEYS;
        map.get(&key, |v| {
            v.verify();
            assert_eq!(v.payload % KEYS, key, "value filed under the wrong key");
        });
    }
    let key = xorshift(&mut rng) % KEYS;
    if xorshift(&mut rng).is_multiple_of(3) {
        map.remove(&key);
    } else {
        map.insert(key, Canary::new(key + KEYS * (xorshift(&mut rng) % 1000)));
    }
}

#[test]
fn cross_core_spawn_on_and_rcu_updates_lose_nothing_and_free_nothing_early() {
    let received: Arc<Vec<AtomicU64>> = Arc::new((0..CORES).map(|_| AtomicU64::new(0)).collect());
    let r = received.clone();
    let runtime = Runtime::new(TestPlatform::new(CORES), CORES).unwrap();
    let sent = run_on_threads(
        runtime,
        |_| {},
        move || async move {
            let map = Arc::new(RcuHashMap::new(Handle::current().unwrap().rcu().clone()));
            let mut senders = Vec::new();
            for core in 0..CORES {
                let (map, r) = (map.clone(), r.clone());
                senders.push(event::spawn_local_on(
                    CoreId(core as u32),
                    move || async move {
                        let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ (core as u64 + 1);
                        for i in 0..EVENTS_PER_CORE {
                            let target = (xorshift(&mut rng) % CORES as u64) as u32;
                            let (remote_map, r, seed) =
                                (map.clone(), r.clone(), xorshift(&mut rng));
                            spawn_on(CoreId(target), move || {
                                touch(&remote_map, seed);
                                r[target as usize].fetch_add(1, Ordering::Relaxed);
                            })
                            .expect("spawn_on");
                            touch(&map, seed ^ i);
                            if i % 64 == 0 {
                                event::yield_now().await;
                            }
                        }
                        EVENTS_PER_CORE
                    },
                ));
            }
            let mut sent = 0;
            for s in senders {
                sent += s.await.expect("sender ran");
            }
            // Wait until every core has run what it was sent.
            let total = || r.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>();
            while total() < sent {
                event::yield_now().await;
            }
            // Everything still in the map is checked once more from every core.
            for core in 0..CORES {
                let map = map.clone();
                run_on(CoreId(core as u32), move || map.for_each(|_, v| v.verify()))
                    .await
                    .unwrap();
            }
            sent
        },
    )
    .expect("runtime");
    let total: u64 = received.iter().map(|c| c.load(Ordering::Relaxed)).sum();
    assert_eq!(sent, CORES as u64 * EVENTS_PER_CORE);
    assert_eq!(total, sent, "events lost or duplicated");
    assert!(
        received.iter().all(|c| c.load(Ordering::Relaxed) > 0),
        "every core received events"
    );
    // The runtime (and its RCU domain) is gone: every value ever made has been dropped once.
    assert_eq!(
        CREATED.load(Ordering::SeqCst),
        DROPPED.load(Ordering::SeqCst),
        "leaked or double-dropped values"
    );
}
