//! A throughput measurement of the item store on two cores of the hosted runtime, shared
//! by the two test binaries that differ only in their `#[global_allocator]` (the system
//! allocator, and ebb-mem's per-core slab allocator), so the two can be compared:
//!
//! ```text
//! cargo test --release -p memcached --test store_bench_system -- --ignored --nocapture
//! cargo test --release -p memcached --test store_bench_ebb_mem -- --ignored --nocapture
//! ```
//!
//! Each core runs a mix over a shared key space under a memory limit that forces
//! eviction: 10 % sets of 32..1056-byte values (allocating an item, its key, its map
//! node and the value), 90 % gets. Debug builds measure nothing useful.

use ebb::rcu::RcuDomain;
use ebb::{CoreId, IOBuf};
use memcached::store::{Ctx, Store, StoreConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

const OPS_PER_CORE: u32 = 2_000_000;
const KEYS: u32 = 100_000;

async fn run_core(store: Arc<Store>, core: usize) -> (u32, Duration) {
    let mut rng = 0x2545_f491_u32 ^ (core as u32 + 1).wrapping_mul(0x9e37_79b9);
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        rng
    };
    let payload = vec![0xabu8; 1056];
    let keys: Vec<Vec<u8>> = (0..KEYS)
        .map(|k| format!("key:{k:08}").into_bytes())
        .collect();
    let mut hits = 0;
    let start = Instant::now();
    for i in 0..OPS_PER_CORE {
        let key = &keys[(next() % KEYS) as usize];
        let cx = Ctx::new(1_700_000_000, core);
        if next() % 10 == 0 {
            let len = 32 + (next() as usize % 1024);
            let value = IOBuf::copy_from_slice(&payload[..len]);
            let _ = store.set(cx, key, 0, 0, value.into());
        } else if store.get(cx, key).is_some() {
            hits += 1;
        }
        if i % 256 == 0 {
            // Let the event loop turn: RCU quiescent states, so replaced items are freed.
            ebb::yield_now().await;
        }
    }
    (hits, start.elapsed())
}

/// Fills the store, then measures; prints the result under `label` and returns the
/// store's statistics at the end (for the caller's sanity checks: a measurement of a
/// store that misbehaved is not a measurement).
pub fn measure(label: &str) -> memcached::store::Stats {
    let config = ebb::Config {
        cores: 2,
        pin: false,
        idle_poll: Duration::ZERO,
    };
    let (a, b, stats) = ebb::run(config, || async {
        let domain: Arc<RcuDomain> = ebb::Handle::current().expect("on a core").rcu().clone();
        let store = Arc::new(Store::new(
            StoreConfig {
                memory_limit: LIMIT as usize,
                cores: 2,
                ..StoreConfig::default()
            },
            domain,
        ));
        let other = store.clone();
        let b = ebb::spawn_local_on(CoreId(1), move || run_core(other, 1));
        let a = run_core(store.clone(), 0).await;
        let b = b.await.expect("core 1 ran");
        let stats = store.stats();
        ebb::shutdown();
        (a, b, stats)
    })
    .expect("the runtime ran");
    let ops = f64::from(OPS_PER_CORE);
    for (core, (hits, took)) in [a, b].into_iter().enumerate() {
        println!(
            "{label}: core {core}: {:.2} Mops/s ({hits} hits in {took:?})",
            ops / took.as_secs_f64() / 1e6
        );
    }
    println!(
        "{label}: items {} bytes {} evictions {}",
        stats.curr_items, stats.bytes, stats.evictions
    );
    assert!(a.0 > 0 && b.0 > 0, "both cores found keys: {a:?} {b:?}");
    stats
}

/// The memory limit `measure` runs under.
pub const LIMIT: u64 = 32 * 1024 * 1024;

/// What every run must show, whatever the allocator: the limit held and forced eviction.
/// `Ok` or what went wrong.
pub fn check(stats: &memcached::store::Stats) -> Result<(), String> {
    if stats.bytes > LIMIT {
        return Err(format!("over the limit: {stats:?}"));
    }
    if stats.evictions == 0 {
        return Err(format!("the mix must force eviction: {stats:?}"));
    }
    if stats.curr_items == 0 {
        return Err(format!("nothing stored: {stats:?}"));
    }
    Ok(())
}
