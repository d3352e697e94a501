//! Semantics of every operation (memcached 1.6's, checked against its source and its
//! `t/*.t` tests), memory pressure, and a model test against a `BTreeMap`.
//!
//! These run on test threads that are not Ebbflow cores: the RCU map then takes its
//! writer lock for reads instead of a read guard (correct, just not lock-free), and
//! retired items are freed when the domain is dropped. Semantics are the same.

extern crate std;

use super::*;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

const T0: UnixTime = 1_700_000_000;

fn store_with(config: StoreConfig) -> Store {
    Store::new(config, Arc::new(RcuDomain::new(1)))
}

/// The accounted size of an item whose value is one exact-size buffer (what `buf`
/// makes): the item, its key's allocation and the value's region, at the allocator's
/// rounding.
fn item_size(key_len: usize, value_len: usize) -> usize {
    ITEM_OVERHEAD
        + super::item::key_allocation(key_len)
        + allocation_size(value_len + ebb::iobuf::REGION_OVERHEAD)
}

fn store() -> Store {
    store_with(StoreConfig::default())
}

fn cx(now: UnixTime) -> Ctx {
    Ctx::new(now, 0)
}

fn buf(data: &[u8]) -> IOBufChain {
    IOBuf::copy_from_slice(data).into()
}

fn set(s: &Store, now: UnixTime, key: &[u8], flags: u32, exptime: i64, data: &[u8]) -> u64 {
    match s.set(cx(now), key, flags, exptime, buf(data)) {
        Ok(StoreOutcome::Stored { cas }) => cas,
        other => panic!("set {key:?}: {other:?}"),
    }
}

fn value(s: &Store, now: UnixTime, key: &[u8]) -> Option<Vec<u8>> {
    s.get(cx(now), key).map(|h| h.value.to_vec())
}

fn incr(s: &Store, now: UnixTime, key: &[u8], incr: bool, delta: u64) -> ArithOutcome {
    s.arith(
        cx(now),
        key,
        Arith {
            incr,
            delta,
            initial: None,
            cas: 0,
        },
    )
    .unwrap()
}

#[test]
fn set_get_and_gets() {
    let s = store();
    let cas = set(&s, T0, b"k", 42, 0, b"hello");
    let hit = s.get(cx(T0), b"k").unwrap();
    assert_eq!(hit.flags, 42);
    assert_eq!(hit.cas, cas);
    assert_eq!(hit.value.to_vec(), b"hello");
    assert_eq!(s.get(cx(T0), b"other"), None);
    // A set replaces, with a new CAS id.
    let cas2 = set(&s, T0, b"k", 1, 0, b"bye");
    assert_ne!(cas, cas2);
    assert_eq!(value(&s, T0, b"k").unwrap(), b"bye");
    let st = s.stats();
    assert_eq!((st.cmd_get, st.get_hits, st.get_misses), (3, 2, 1));
    assert_eq!((st.cmd_set, st.total_items, st.curr_items), (2, 2, 1));
}

#[test]
fn get_is_zero_copy() {
    let s = store();
    let stored = IOBuf::copy_from_slice(b"the value's own storage");
    s.set(cx(T0), b"k", 0, 0, stored.clone().into()).unwrap();
    let hit = s.get(cx(T0), b"k").unwrap();
    let front = hit.value.front().unwrap();
    assert!(front.shares_storage_with(&stored));
    assert_eq!(hit.value.segment_count(), 1);
}

#[test]
fn get_with_lends_the_item_and_counts_as_a_get() {
    let s = store();
    let stored = IOBuf::copy_from_slice(b"lent, not cloned");
    let StoreOutcome::Stored { cas } = s.set(cx(T0), b"k", 9, 10, stored.clone().into()).unwrap()
    else {
        panic!("not stored")
    };
    let seen = s
        .get_with(cx(T0), b"k", |item| {
            assert!(item.value[0].shares_storage_with(&stored));
            (item.flags, item.cas, item.value.len())
        })
        .unwrap();
    assert_eq!(seen, (9, cas, 1));
    assert_eq!(s.get_with(cx(T0), b"other", |_| ()), None);
    // Expired: a miss, counted and removed as `get` does, and `f` never runs.
    assert_eq!(
        s.get_with(cx(T0 + 10), b"k", |_| unreachable!("expired")),
        None
    );
    let st = s.stats();
    assert_eq!((st.cmd_get, st.get_hits, st.get_misses), (3, 1, 2));
    assert_eq!((st.get_expired, st.curr_items), (1, 0));
}

#[test]
fn wasteful_values_are_compacted() {
    let s = store();
    // A 10-byte value viewed inside a 64 KiB receive buffer is copied out of it, so
    // that it does not pin the whole buffer.
    let mut view = IOBuf::copy_from_slice(&[7u8; 65536]);
    view.trim_back(65526).unwrap();
    s.set(cx(T0), b"k", 0, 0, view.clone().into()).unwrap();
    let hit = s.get(cx(T0), b"k").unwrap();
    assert!(!hit.value.front().unwrap().shares_storage_with(&view));
    assert_eq!(hit.value.to_vec(), [7u8; 10]);
}

#[test]
fn keys_are_checked() {
    let s = store();
    let long = [b'k'; KEY_MAX_LENGTH + 1];
    assert_eq!(
        s.set(cx(T0), &long, 0, 0, buf(b"v")),
        Err(StoreError::BadKey)
    );
    assert_eq!(s.set(cx(T0), b"", 0, 0, buf(b"v")), Err(StoreError::BadKey));
    assert_eq!(s.get(cx(T0), &long), None);
    set(&s, T0, &long[..KEY_MAX_LENGTH], 0, 0, b"v");
    assert_eq!(value(&s, T0, &long[..KEY_MAX_LENGTH]).unwrap(), b"v");
}

#[test]
fn relative_expiry_boundary() {
    let s = store();
    set(&s, T0, b"k", 0, 10, b"v");
    assert!(value(&s, T0 + 9, b"k").is_some());
    // exptime <= now: expired exactly at T0 + 10.
    assert!(value(&s, T0 + 10, b"k").is_none());
    let st = s.stats();
    assert_eq!((st.get_expired, st.curr_items), (1, 0));
}

#[test]
fn absolute_expiry_beyond_30_days() {
    let s = store();
    // Over 30 days: an absolute Unix time.
    set(&s, T0, b"abs", 0, i64::from(T0) + 100, b"v");
    assert!(value(&s, T0 + 99, b"abs").is_some());
    assert!(value(&s, T0 + 100, b"abs").is_none());
    // Exactly 30 days is relative.
    set(&s, T0, b"rel", 0, REALTIME_MAXDELTA, b"v");
    assert!(value(&s, T0 + 2_591_999, b"rel").is_some());
    assert!(value(&s, T0 + 2_592_000, b"rel").is_none());
    // An absolute time in the past: stored, but already expired.
    set(&s, T0, b"past", 0, REALTIME_MAXDELTA + 1, b"v");
    assert!(value(&s, T0, b"past").is_none());
}

#[test]
fn negative_exptime_is_immediately_expired() {
    let s = store();
    set(&s, T0, b"k", 0, 0, b"old");
    set(&s, T0, b"k", 0, -1, b"new");
    assert!(value(&s, T0, b"k").is_none());
    assert_eq!(s.stats().curr_items, 0);
}

#[test]
fn add_replace() {
    let s = store();
    let add = |k: &[u8], v: &[u8], now| s.store(cx(now), Mode::Add, k, 0, 10, buf(v)).unwrap();
    assert!(matches!(add(b"k", b"1", T0), StoreOutcome::Stored { .. }));
    assert_eq!(add(b"k", b"2", T0), StoreOutcome::NotStored);
    assert_eq!(value(&s, T0, b"k").unwrap(), b"1");
    // Add on an expired item succeeds.
    assert!(matches!(
        add(b"k", b"3", T0 + 10),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(value(&s, T0 + 10, b"k").unwrap(), b"3");

    let replace = |k: &[u8], v: &[u8]| s.store(cx(T0), Mode::Replace, k, 5, 0, buf(v)).unwrap();
    assert_eq!(replace(b"absent", b"x"), StoreOutcome::NotStored);
    assert!(value(&s, T0, b"absent").is_none());
    assert!(matches!(replace(b"k", b"4"), StoreOutcome::Stored { .. }));
    let hit = s.get(cx(T0), b"k").unwrap();
    assert_eq!((hit.flags, hit.value.to_vec()), (5, b"4".to_vec()));
    // Replace on an expired item fails.
    assert_eq!(
        s.store(cx(T0), Mode::Replace, b"e", 0, -1, buf(b"x"))
            .unwrap(),
        StoreOutcome::NotStored
    );
}

#[test]
fn append_prepend_keep_flags_and_expiry() {
    let s = store();
    assert_eq!(
        s.store(cx(T0), Mode::Append, b"k", 0, 0, buf(b"x"))
            .unwrap(),
        StoreOutcome::NotStored
    );
    let cas = set(&s, T0, b"k", 7, 100, b"mid");
    let out = s
        .store(cx(T0), Mode::Append, b"k", 99, 0, buf(b"-end"))
        .unwrap();
    let StoreOutcome::Stored { cas: cas2 } = out else {
        panic!("{out:?}")
    };
    assert_ne!(cas, cas2);
    s.store(cx(T0), Mode::Prepend, b"k", 98, 5, buf(b"start-"))
        .unwrap();
    let hit = s.get(cx(T0), b"k").unwrap();
    assert_eq!(hit.value.to_vec(), b"start-mid-end");
    assert_eq!(hit.flags, 7);
    // The expiry stayed T0 + 100, not 5 seconds.
    assert!(value(&s, T0 + 99, b"k").is_some());
    assert!(value(&s, T0 + 100, b"k").is_none());
}

#[test]
fn appends_are_repacked() {
    let s = store();
    let first = IOBuf::copy_from_slice(b"a");
    s.set(cx(T0), b"k", 0, 0, first.clone().into()).unwrap();
    s.store(cx(T0), Mode::Append, b"k", 0, 0, buf(b"b"))
        .unwrap();
    // Two buffers would pin two allocations: the value is copied into one.
    let hit = s.get(cx(T0), b"k").unwrap();
    assert_eq!(hit.value.segment_count(), 1);
    assert!(!hit.value.front().unwrap().shares_storage_with(&first));
    for _ in 0..20 {
        s.store(cx(T0), Mode::Append, b"k", 0, 0, buf(b"c"))
            .unwrap();
        assert_eq!(s.get(cx(T0), b"k").unwrap().value.segment_count(), 1);
    }
    let mut want = b"ab".to_vec();
    want.extend_from_slice(&[b'c'; 20]);
    assert_eq!(value(&s, T0, b"k").unwrap(), want);
}

#[test]
fn cas_semantics() {
    let s = store();
    let cas_op = |k: &[u8], unique: u64, v: &[u8]| {
        s.store(cx(T0), Mode::Cas(unique), k, 0, 0, buf(v)).unwrap()
    };
    assert_eq!(cas_op(b"k", 1, b"x"), StoreOutcome::NotFound);
    let c1 = set(&s, T0, b"k", 0, 0, b"v1");
    assert_eq!(cas_op(b"k", c1 + 1000, b"x"), StoreOutcome::Exists);
    let StoreOutcome::Stored { cas: c2 } = cas_op(b"k", c1, b"v2") else {
        panic!()
    };
    assert_eq!(value(&s, T0, b"k").unwrap(), b"v2");
    // The old id is stale now.
    assert_eq!(cas_op(b"k", c1, b"v3"), StoreOutcome::Exists);
    assert_eq!(s.get(cx(T0), b"k").unwrap().cas, c2);
    let st = s.stats();
    assert_eq!((st.cas_hits, st.cas_badval, st.cas_misses), (1, 2, 1));
}

#[test]
fn cas_ids_are_unique_across_operations_and_touch_keeps_them() {
    let s = store();
    let mut seen = std::collections::BTreeSet::new();
    let mut note = |c: u64| assert!(c != 0 && seen.insert(c), "cas {c} reused");
    note(set(&s, T0, b"a", 0, 0, b"1"));
    note(set(&s, T0, b"b", 0, 0, b"1"));
    note(set(&s, T0, b"a", 0, 0, b"2"));
    if let StoreOutcome::Stored { cas } = s
        .store(cx(T0), Mode::Append, b"a", 0, 0, buf(b"0"))
        .unwrap()
    {
        note(cas);
    }
    if let ArithOutcome::Value { cas, .. } = incr(&s, T0, b"a", true, 1) {
        note(cas);
    }
    let before = s.get(cx(T0), b"a").unwrap().cas;
    assert!(s.touch(cx(T0), b"a", 100));
    assert_eq!(s.get(cx(T0), b"a").unwrap().cas, before);
}

#[test]
fn delete() {
    let s = store();
    assert_eq!(s.delete(cx(T0), b"k", 0), DeleteOutcome::NotFound);
    let cas = set(&s, T0, b"k", 0, 0, b"v");
    assert_eq!(s.delete(cx(T0), b"k", cas + 1), DeleteOutcome::Exists);
    assert_eq!(s.delete(cx(T0), b"k", cas), DeleteOutcome::Deleted);
    assert_eq!(s.get(cx(T0), b"k"), None);
    set(&s, T0, b"k", 0, 10, b"v");
    assert_eq!(s.delete(cx(T0 + 10), b"k", 0), DeleteOutcome::NotFound);
    let st = s.stats();
    assert_eq!(
        (st.delete_hits, st.delete_misses, st.curr_items, st.bytes),
        (1, 3, 0, 0)
    );
}

#[test]
fn touch_and_gat() {
    let s = store();
    assert!(!s.touch(cx(T0), b"k", 10));
    set(&s, T0, b"k", 3, 10, b"v");
    assert!(s.touch(cx(T0 + 5), b"k", 100));
    assert!(value(&s, T0 + 104, b"k").is_some());
    assert!(value(&s, T0 + 105, b"k").is_none());
    set(&s, T0, b"g", 3, 10, b"v");
    let hit = s.gat(cx(T0 + 1), b"g", 0).unwrap();
    assert_eq!((hit.flags, hit.value.to_vec()), (3, b"v".to_vec()));
    // exptime 0: never expires now.
    assert!(value(&s, T0 + 1_000_000, b"g").is_some());
    assert_eq!(s.gat(cx(T0), b"none", 0), None);
    let st = s.stats();
    assert_eq!((st.cmd_touch, st.touch_hits, st.touch_misses), (4, 2, 2));
    // gat counts as a touch only (the gets above: 2 hits, 1 miss).
    assert_eq!((st.cmd_get, st.get_hits, st.get_misses), (3, 2, 1));
}

#[test]
fn incr_decr() {
    let s = store();
    assert_eq!(incr(&s, T0, b"n", true, 1), ArithOutcome::NotFound);
    set(&s, T0, b"n", 9, 0, b"1");
    assert!(matches!(
        incr(&s, T0, b"n", true, 1),
        ArithOutcome::Value { value: 2, .. }
    ));
    assert!(matches!(
        incr(&s, T0, b"n", true, 8),
        ArithOutcome::Value { value: 10, .. }
    ));
    assert_eq!(value(&s, T0, b"n").unwrap(), b"10");
    // Decrement shrinking the digits keeps the length: padded with spaces.
    assert!(matches!(
        incr(&s, T0, b"n", false, 1),
        ArithOutcome::Value { value: 9, .. }
    ));
    assert_eq!(value(&s, T0, b"n").unwrap(), b"9 ");
    // ... and the padded value still reads as a number.
    assert!(matches!(
        incr(&s, T0, b"n", true, 91),
        ArithOutcome::Value { value: 100, .. }
    ));
    assert_eq!(value(&s, T0, b"n").unwrap(), b"100");
    // Decrement floors at zero.
    assert!(matches!(
        incr(&s, T0, b"n", false, 1000),
        ArithOutcome::Value { value: 0, .. }
    ));
    assert_eq!(value(&s, T0, b"n").unwrap(), b"0  ");
    // Flags are kept.
    assert_eq!(s.get(cx(T0), b"n").unwrap().flags, 9);
    // Increment wraps at 2^64.
    set(&s, T0, b"max", 0, 0, b"18446744073709551615");
    assert!(matches!(
        incr(&s, T0, b"max", true, 1),
        ArithOutcome::Value { value: 0, .. }
    ));
    set(&s, T0, b"big", 0, 0, b"0");
    assert!(matches!(
        incr(&s, T0, b"big", true, 18446744073709551610),
        ArithOutcome::Value {
            value: 18446744073709551610,
            ..
        }
    ));
    assert_eq!(value(&s, T0, b"big").unwrap(), b"18446744073709551610");
    // Non-numeric values.
    set(&s, T0, b"text", 0, 0, b"hi");
    assert_eq!(incr(&s, T0, b"text", true, 1), ArithOutcome::NonNumeric);
    set(&s, T0, b"empty", 0, 0, b"");
    assert_eq!(incr(&s, T0, b"empty", false, 1), ArithOutcome::NonNumeric);
    set(&s, T0, b"neg", 0, 0, b"-1");
    assert_eq!(incr(&s, T0, b"neg", true, 1), ArithOutcome::NonNumeric);
    set(&s, T0, b"over", 0, 0, b"18446744073709551616");
    assert_eq!(incr(&s, T0, b"over", true, 1), ArithOutcome::NonNumeric);
    let st = s.stats();
    assert_eq!((st.incr_hits, st.incr_misses, st.decr_hits), (5, 1, 2));
}

#[test]
fn incr_keeps_expiry() {
    let s = store();
    set(&s, T0, b"n", 0, 10, b"5");
    incr(&s, T0 + 5, b"n", true, 1);
    assert!(value(&s, T0 + 9, b"n").is_some());
    assert!(value(&s, T0 + 10, b"n").is_none());
    assert_eq!(incr(&s, T0 + 10, b"n", true, 1), ArithOutcome::NotFound);
}

#[test]
fn binary_arith_initial_and_cas() {
    let s = store();
    let op = |initial, cas| Arith {
        incr: true,
        delta: 5,
        initial,
        cas,
    };
    // Absent with an initial value: created with it (the delta is not applied).
    let out = s.arith(cx(T0), b"n", op(Some((100, 10)), 0)).unwrap();
    let ArithOutcome::Value { value: 100, cas } = out else {
        panic!("{out:?}")
    };
    let hit = s.get(cx(T0), b"n").unwrap();
    assert_eq!(
        (hit.flags, hit.cas, hit.value.to_vec()),
        (0, cas, b"100".to_vec())
    );
    assert!(value(&s, T0 + 10, b"n").is_none());
    let cas = set(&s, T0, b"m", 0, 0, b"1");
    assert_eq!(
        s.arith(cx(T0), b"m", op(None, cas + 1)).unwrap(),
        ArithOutcome::Exists
    );
    assert!(matches!(
        s.arith(cx(T0), b"m", op(None, cas)).unwrap(),
        ArithOutcome::Value { value: 6, .. }
    ));
}

#[test]
fn flush_all_now() {
    let s = store();
    set(&s, T0, b"a", 0, 0, b"1");
    set(&s, T0, b"b", 0, 0, b"2");
    s.flush_all(cx(T0), 0);
    // Items stored in the same second before the flush are gone too.
    assert!(value(&s, T0, b"a").is_none());
    // Items stored after the flush, in the same second, are visible.
    set(&s, T0, b"c", 0, 0, b"3");
    assert_eq!(value(&s, T0, b"c").unwrap(), b"3");
    assert!(matches!(
        s.store(cx(T0), Mode::Add, b"b", 0, 0, buf(b"x")).unwrap(),
        StoreOutcome::Stored { .. }
    ));
    assert_eq!(s.stats().get_flushed, 1);
}

#[test]
fn flush_all_with_delay() {
    let s = store();
    set(&s, T0, b"a", 0, 0, b"1");
    s.flush_all(cx(T0), 10);
    // memcached: oldest_live = T0 + 9, effective once now >= T0 + 9.
    assert!(value(&s, T0 + 8, b"a").is_some());
    set(&s, T0 + 8, b"b", 0, 0, b"2");
    assert!(value(&s, T0 + 9, b"a").is_none());
    assert!(value(&s, T0 + 9, b"b").is_none());
    // Stored after the flush time: visible.
    set(&s, T0 + 10, b"c", 0, 0, b"3");
    assert!(value(&s, T0 + 10, b"c").is_some());
    assert!(value(&s, T0 + 1000, b"c").is_some());
}

#[test]
fn sweep_removes_expired_items_incrementally() {
    let s = store_with(StoreConfig {
        shards: 4,
        ..StoreConfig::default()
    });
    for i in 0..100u32 {
        let exptime = if i % 2 == 0 { 10 } else { 0 };
        set(&s, T0, format!("k{i}").as_bytes(), 0, exptime, b"v");
    }
    assert_eq!(s.sweep(cx(T0 + 5), 1000), 0);
    let mut removed = 0;
    let mut calls = 0;
    while removed < 50 {
        removed += s.sweep(cx(T0 + 10), 7);
        calls += 1;
        assert!(calls < 100, "sweep does not progress");
    }
    assert!(calls > 1, "the budget bounds one call");
    assert_eq!(removed, 50);
    assert_eq!(s.stats().curr_items, 50);
    assert_eq!(s.stats().expired_unfetched, 50);
    // An empty store's sweep returns.
    let empty = store();
    assert_eq!(empty.sweep(cx(T0), 10), 0);
}

#[test]
fn too_large_items_are_refused() {
    let s = store_with(StoreConfig {
        item_size_max: 1024,
        ..StoreConfig::default()
    });
    // memcached's measure: 48 + key + 1 + value + 2 + 8 (flags 0).
    let fits = 1024 - 48 - 1 - 1 - 2 - 8;
    assert_eq!(memcached_item_size(1, 0, fits), 1024);
    assert_eq!(memcached_item_size(1, 7, fits), 1028);
    assert_eq!(
        s.set(cx(T0), b"k", 7, 0, buf(&vec![1; fits])),
        Err(StoreError::TooLarge)
    );
    set(&s, T0, b"k", 0, 0, &vec![1; fits]);
    assert_eq!(
        s.set(cx(T0), b"k", 0, 0, buf(&vec![1; fits + 1])),
        Err(StoreError::TooLarge)
    );
    // A failed set removes the stale value, like memcached.
    assert!(value(&s, T0, b"k").is_none());
    set(&s, T0, b"a", 0, 0, &vec![1; fits - 1]);
    // An append that would be too large is NOT_STORED and keeps the old value.
    assert_eq!(
        s.store(cx(T0), Mode::Append, b"a", 0, 0, buf(b"xy"))
            .unwrap(),
        StoreOutcome::NotStored
    );
    assert_eq!(value(&s, T0, b"a").unwrap().len(), fits - 1);
}

#[test]
fn no_eviction_mode_reports_out_of_memory() {
    let item = item_size(2, 1000);
    let s = store_with(StoreConfig {
        memory_limit: 3 * item,
        evict: false,
        ..StoreConfig::default()
    });
    for k in [b"k1", b"k2", b"k3"] {
        set(&s, T0, k, 0, 0, &[0; 1000]);
    }
    assert_eq!(
        s.set(cx(T0), b"k4", 0, 0, buf(&[0; 1000])),
        Err(StoreError::OutOfMemory)
    );
    // Overwriting with the same size needs no more room.
    set(&s, T0, b"k1", 0, 0, &[1; 1000]);
    assert_eq!(s.stats().outofmemory, 1);
    assert_eq!(s.stats().bytes as usize, 3 * item);
}

/// A value that checks itself: its key's hash repeated, with the length encoded.
fn checked_value(i: u32, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut x = i.wrapping_mul(2_654_435_761) | 1;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v.push(x as u8);
    }
    v
}

#[test]
fn memory_pressure_evicts_within_the_limit() {
    let limit = 256 * 1024;
    let s = store_with(StoreConfig {
        memory_limit: limit,
        shards: 8,
        ..StoreConfig::default()
    });
    let mut inserted = 0usize;
    let mut i = 0u32;
    while inserted < 2 * limit {
        let len = 100 + (i as usize * 37) % 2000;
        let key = format!("key:{i}");
        set(&s, T0, key.as_bytes(), i, 0, &checked_value(i, len));
        inserted += len + ITEM_OVERHEAD;
        let st = s.stats();
        assert!(st.bytes as usize <= limit, "{} > {limit}", st.bytes);
        // Read some keys back, so that CLOCK has reference bits to honour.
        if i.is_multiple_of(3) {
            let _ = s.get(cx(T0), format!("key:{}", i / 2).as_bytes());
        }
        i += 1;
    }
    let st = s.stats();
    assert!(st.evictions > 0);
    assert_eq!(st.evictions, u64::from(i) - st.curr_items);
    let mut present = 0;
    for j in 0..i {
        let len = 100 + (j as usize * 37) % 2000;
        if let Some(hit) = s.get(cx(T0), format!("key:{j}").as_bytes()) {
            assert_eq!(hit.flags, j);
            assert_eq!(
                hit.value.to_vec(),
                checked_value(j, len),
                "key:{j} corrupted"
            );
            present += 1;
        }
    }
    assert_eq!(present, st.curr_items);
    // The cache is reasonably full: eviction did not empty it.
    assert!(
        st.bytes as usize > limit / 2,
        "only {} bytes used",
        st.bytes
    );
}

#[test]
fn an_item_larger_than_the_cache_evicts_nothing() {
    let s = store_with(StoreConfig {
        memory_limit: 4096,
        ..StoreConfig::default()
    });
    set(&s, T0, b"small", 0, 0, b"v");
    assert_eq!(
        s.set(cx(T0), b"big", 0, 0, buf(&[0; 5000])),
        Err(StoreError::OutOfMemory)
    );
    assert!(value(&s, T0, b"small").is_some());
    assert_eq!(s.stats().evictions, 0);
}

#[test]
fn expired_items_are_reclaimed_before_live_ones() {
    let item = item_size(2, 100);
    let s = store_with(StoreConfig {
        memory_limit: 4 * item,
        shards: 1,
        ..StoreConfig::default()
    });
    set(&s, T0, b"k1", 0, 0, &[0; 100]);
    set(&s, T0, b"k2", 0, 5, &[0; 100]);
    set(&s, T0, b"k3", 0, 0, &[0; 100]);
    set(&s, T0, b"k4", 0, 0, &[0; 100]);
    // k1 is referenced, k2 expired: the hand spares k1 and takes k2 back.
    assert!(value(&s, T0, b"k1").is_some());
    set(&s, T0 + 5, b"k5", 0, 0, &[0; 100]);
    let st = s.stats();
    assert_eq!((st.evictions, st.reclaimed), (0, 1));
    assert!(value(&s, T0 + 5, b"k1").is_some());
}

mod model {
    //! The store against a `BTreeMap` model, without eviction (the limit is large).
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    struct Entry {
        flags: u32,
        exptime: UnixTime,
        cas: u64,
        value: Vec<u8>,
    }

    #[derive(Clone, Debug)]
    enum Op {
        Get(u8),
        Store(u8, u8, u32, i64, Vec<u8>),
        Cas(u8, bool, Vec<u8>),
        Delete(u8),
        Touch(u8, i64),
        Arith(u8, bool, u64),
        Advance(u8),
        Flush,
    }

    fn op() -> impl Strategy<Value = Op> {
        let key = 0u8..6;
        let exptime = prop_oneof![Just(0i64), 1i64..20, Just(-1i64)];
        let data = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..12),
            (0u64..1000).prop_map(|n| n.to_string().into_bytes()),
        ];
        prop_oneof![
            3 => key.clone().prop_map(Op::Get),
            3 => (key.clone(), 0u8..5, any::<u32>(), exptime.clone(), data.clone())
                .prop_map(|(k, m, f, e, d)| Op::Store(k, m, f, e, d)),
            1 => (key.clone(), any::<bool>(), data).prop_map(|(k, g, d)| Op::Cas(k, g, d)),
            1 => key.clone().prop_map(Op::Delete),
            1 => (key.clone(), exptime).prop_map(|(k, e)| Op::Touch(k, e)),
            2 => (key, any::<bool>(), 0u64..50).prop_map(|(k, i, d)| Op::Arith(k, i, d)),
            1 => (0u8..8).prop_map(Op::Advance),
            1 => Just(Op::Flush),
        ]
    }

    fn live(model: &BTreeMap<u8, Entry>, k: u8, now: UnixTime) -> Option<&Entry> {
        model.get(&k).filter(|e| e.exptime == 0 || e.exptime > now)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        #[test]
        fn behaves_like_the_model(ops in proptest::collection::vec(op(), 1..200)) {
            let s = store_with(StoreConfig { shards: 2, ..StoreConfig::default() });
            let mut model: BTreeMap<u8, Entry> = BTreeMap::new();
            let mut now = T0;
            for op in ops {
                let c = cx(now);
                match op {
                    Op::Get(k) => {
                        let got = s.get(c, &[k]);
                        let want = live(&model, k, now);
                        prop_assert_eq!(got.as_ref().map(|h| h.value.to_vec()), want.map(|e| e.value.clone()));
                        prop_assert_eq!(got.as_ref().map(|h| (h.flags, h.cas)), want.map(|e| (e.flags, e.cas)));
                    }
                    Op::Store(k, m, flags, exptime, data) => {
                        let mode = [Mode::Set, Mode::Add, Mode::Replace, Mode::Append, Mode::Prepend][usize::from(m)];
                        let out = s.store(c, mode, &[k], flags, exptime, buf(&data)).unwrap();
                        let cur = live(&model, k, now).cloned();
                        let abs = absolute_expiry(exptime, now);
                        let expect = match (mode, cur) {
                            (Mode::Set, _) | (Mode::Add, None) | (Mode::Replace, Some(_)) => Some((flags, abs, data)),
                            (Mode::Append, Some(e)) => Some((e.flags, e.exptime, [e.value, data].concat())),
                            (Mode::Prepend, Some(e)) => Some((e.flags, e.exptime, [data, e.value].concat())),
                            _ => None,
                        };
                        match (expect, out) {
                            (Some((flags, exptime, value)), StoreOutcome::Stored { cas }) => {
                                model.insert(k, Entry { flags, exptime, cas, value });
                            }
                            (None, StoreOutcome::NotStored) => {}
                            (e, o) => prop_assert!(false, "{:?}: expected {:?}, got {:?}", mode, e, o),
                        }
                    }
                    Op::Cas(k, good, data) => {
                        let cur = live(&model, k, now).cloned();
                        let unique = match (&cur, good) {
                            (Some(e), true) => e.cas,
                            (Some(e), false) => e.cas + 1_000_000,
                            (None, _) => 1,
                        };
                        let out = s.store(c, Mode::Cas(unique), &[k], 1, 0, buf(&data)).unwrap();
                        match (cur, good, out) {
                            (None, _, StoreOutcome::NotFound) => {}
                            (Some(_), false, StoreOutcome::Exists) => {}
                            (Some(_), true, StoreOutcome::Stored { cas }) => {
                                model.insert(k, Entry { flags: 1, exptime: 0, cas, value: data });
                            }
                            (cur, good, out) => prop_assert!(false, "cas {:?} {:?} -> {:?}", cur, good, out),
                        }
                    }
                    Op::Delete(k) => {
                        let want = live(&model, k, now).is_some();
                        model.remove(&k);
                        prop_assert_eq!(s.delete(c, &[k], 0) == DeleteOutcome::Deleted, want);
                    }
                    Op::Touch(k, exptime) => {
                        let want = live(&model, k, now).is_some();
                        prop_assert_eq!(s.touch(c, &[k], exptime), want);
                        if want && let Some(e) = model.get_mut(&k) {
                            e.exptime = absolute_expiry(exptime, now);
                        }
                    }
                    Op::Arith(k, up, delta) => {
                        let out = s.arith(c, &[k], Arith { incr: up, delta, initial: None, cas: 0 }).unwrap();
                        match live(&model, k, now).cloned() {
                            None => prop_assert_eq!(out, ArithOutcome::NotFound),
                            Some(e) => match numeric::parse_u64([&e.value[..]]) {
                                None => prop_assert_eq!(out, ArithOutcome::NonNumeric),
                                Some(n) => {
                                    let v = if up { n.wrapping_add(delta) } else { n.saturating_sub(delta) };
                                    let ArithOutcome::Value { value, cas } = out else {
                                        return Err(TestCaseError::fail(format!("arith: {out:?}")));
                                    };
                                    prop_assert_eq!(value, v);
                                    model.insert(k, Entry { cas, value: numeric::render(v, e.value.len()).to_vec(), ..e });
                                }
                            },
                        }
                    }
                    Op::Advance(d) => now += UnixTime::from(d),
                    Op::Flush => {
                        s.flush_all(c, 0);
                        model.clear();
                    }
                }
                // Gauges: the store's items include dead ones not yet removed.
                let st = s.stats();
                prop_assert!(st.curr_items as usize >= model.values().filter(|e| e.exptime == 0 || e.exptime > now).count());
            }
            // After a full sweep only live items remain, exactly the model's.
            while s.sweep(cx(now), 64) > 0 {}
            s.sweep(cx(now), 10_000);
            let live_count = model.values().filter(|e| e.exptime == 0 || e.exptime > now).count();
            prop_assert_eq!(s.stats().curr_items as usize, live_count);
        }
    }
}

mod multicore {
    //! Two real cores of the hosted runtime share a store under memory pressure: reads
    //! go through RCU read guards (the lock-free path), writes and evictions race on
    //! the same keys, and quiescent states let the RCU domain free replaced items.
    use super::*;
    use ebb::CoreId;

    /// A self-describing value: `[key, version, len]` then a pattern derived from them,
    /// so a reader can tell whether what it got is intact without knowing who wrote it.
    fn make(key: u32, version: u32, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len.max(12));
        v.extend_from_slice(&key.to_le_bytes());
        v.extend_from_slice(&version.to_le_bytes());
        v.extend_from_slice(&(len as u32).to_le_bytes());
        let mut x = key.wrapping_mul(0x9e37_79b9) ^ version.wrapping_mul(0x85eb_ca6b) | 1;
        while v.len() < len.max(12) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            v.push(x as u8);
        }
        v
    }

    fn intact(key: u32, data: &[u8]) -> bool {
        let word = |i: usize| {
            data.get(i..i + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        match (word(0), word(4), word(8)) {
            (Some(k), Some(version), Some(len)) => {
                k == key
                    && len as usize == data.len().max(12)
                    && make(k, version, len as usize) == data
            }
            _ => false,
        }
    }

    async fn worker(store: Arc<Store>, core: usize, limit: usize) -> (u64, u64) {
        let mut rng = 0x2545_f491_u32 ^ (core as u32 + 1).wrapping_mul(0x9e37_79b9);
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 17;
            rng ^= rng << 5;
            rng
        };
        let (mut hits, mut writes) = (0u64, 0u64);
        for i in 0..20_000u32 {
            let key = next() % 400;
            let name = format!("key:{key}");
            let c = Ctx::new(T0, core);
            match next() % 8 {
                0..=2 => {
                    let len = 12 + (next() as usize % 1500);
                    let data = make(key, i * 2 + core as u32, len);
                    let out = store.set(c, name.as_bytes(), key, 0, buf(&data));
                    assert!(matches!(out, Ok(StoreOutcome::Stored { .. })), "{out:?}");
                    writes += 1;
                }
                3 => {
                    store.delete(c, name.as_bytes(), 0);
                }
                _ => {
                    if let Some(hit) = store.get(c, name.as_bytes()) {
                        assert_eq!(hit.flags, key);
                        assert!(intact(key, &hit.value.to_vec()), "key:{key} torn");
                        hits += 1;
                    }
                }
            }
            assert!(store.stats().bytes as usize <= limit);
            if i % 64 == 0 {
                // An event-loop iteration: this core's quiescent state.
                ebb::yield_now().await;
            }
        }
        (hits, writes)
    }

    /// Increments `counter` `n` times with incr and `cas` times with a gets/cas loop.
    async fn bump(store: Arc<Store>, core: usize, n: u32) -> u32 {
        let c = Ctx::new(T0, core);
        let mut retries = 0;
        for i in 0..n {
            let out = store.arith(
                c,
                b"counter",
                Arith {
                    incr: true,
                    delta: 1,
                    initial: None,
                    cas: 0,
                },
            );
            assert!(matches!(out, Ok(ArithOutcome::Value { .. })), "{out:?}");
            loop {
                let hit = store.get(c, b"cas-counter").expect("present");
                let n = numeric::parse_u64(hit.value.segments()).expect("numeric");
                let next = format!("{}", n + 1);
                match store.store(
                    c,
                    Mode::Cas(hit.cas),
                    b"cas-counter",
                    0,
                    0,
                    buf(next.as_bytes()),
                ) {
                    Ok(StoreOutcome::Stored { .. }) => break,
                    Ok(StoreOutcome::Exists) => retries += 1,
                    other => panic!("cas: {other:?}"),
                }
            }
            if i % 16 == 0 {
                ebb::yield_now().await;
            }
        }
        retries
    }

    #[test]
    fn concurrent_incr_and_cas_lose_no_update() {
        let config = ebb::Config {
            cores: 2,
            pin: false,
            idle_poll: core::time::Duration::ZERO,
        };
        let n = 5_000;
        let (counter, cas_counter, retries) = ebb::run(config, move || async move {
            let domain = ebb::Handle::current().expect("on a core").rcu().clone();
            let store = Arc::new(Store::new(
                StoreConfig {
                    cores: 2,
                    ..StoreConfig::default()
                },
                domain,
            ));
            set(&store, T0, b"counter", 0, 0, b"0");
            set(&store, T0, b"cas-counter", 0, 0, b"0");
            let other = store.clone();
            let theirs = ebb::spawn_local_on(CoreId(1), move || bump(other, 1, n));
            let mine = bump(store.clone(), 0, n).await;
            let theirs = theirs.await.expect("core 1 ran");
            let read = |k: &[u8]| store.get(cx(T0), k).map(|h| h.value.to_vec());
            let result = (read(b"counter"), read(b"cas-counter"), mine + theirs);
            ebb::shutdown();
            result
        })
        .expect("the runtime ran");
        let total = (2 * n).to_string().into_bytes();
        assert_eq!(counter.as_deref(), Some(&total[..]));
        assert_eq!(cas_counter.as_deref(), Some(&total[..]));
        std::println!("cas retries: {retries}");
    }

    #[test]
    fn two_cores_share_the_store_under_eviction() {
        let limit = 128 * 1024;
        let config = ebb::Config {
            cores: 2,
            pin: false,
            idle_poll: core::time::Duration::ZERO,
        };
        let (mine, theirs, stats, grace_periods) = ebb::run(config, move || async move {
            let domain = ebb::Handle::current().expect("on a core").rcu().clone();
            let store = Arc::new(Store::new(
                StoreConfig {
                    memory_limit: limit,
                    shards: 8,
                    cores: 2,
                    ..StoreConfig::default()
                },
                domain.clone(),
            ));
            let other = store.clone();
            let theirs = ebb::spawn_local_on(CoreId(1), move || worker(other, 1, limit));
            let mine = worker(store.clone(), 0, limit).await;
            let theirs = theirs.await.expect("core 1 ran");
            let stats = store.stats();
            ebb::shutdown();
            (mine, theirs, stats, domain.completed_grace_periods())
        })
        .expect("the runtime ran");
        assert!(
            mine.0 > 0 && theirs.0 > 0,
            "both cores hit: {mine:?} {theirs:?}"
        );
        assert!(stats.evictions > 0, "{stats:?}");
        assert!(stats.bytes as usize <= limit);
        assert!(grace_periods > 0, "replaced items were reclaimed");
    }
}

#[test]
fn item_overhead_is_what_the_docs_say() {
    // Printed for the record (`cargo test -- --nocapture`); bounded so that a change
    // of the item's layout that bloats it is noticed.
    std::println!("ITEM_OVERHEAD = {ITEM_OVERHEAD} bytes");
    const { assert!(ITEM_OVERHEAD >= 64 && ITEM_OVERHEAD <= 512) };
}

#[test]
fn immediate_flush_cancels_a_pending_delayed_one() {
    let s = store();
    set(&s, T0, b"a", 0, 0, b"1");
    s.flush_all(cx(T0), 100);
    s.flush_all(cx(T0 + 1), 0);
    set(&s, T0 + 1, b"b", 0, 0, b"2");
    assert!(value(&s, T0 + 1, b"a").is_none());
    // The delayed flush no longer happens.
    assert!(value(&s, T0 + 200, b"b").is_some());
    // A store by a core whose clock lags a second survives the flush.
    s.flush_all(cx(T0 + 10), 0);
    set(&s, T0 + 9, b"late", 0, 0, b"3");
    assert!(value(&s, T0 + 10, b"late").is_some());
}

#[test]
fn binary_stores_with_a_cas_id() {
    let s = store();
    let c1 = set(&s, T0, b"k", 1, 0, b"v1");
    let with = |mode, cas, data: &[u8]| {
        s.store_with_cas(cx(T0), mode, b"k", 2, 0, buf(data), cas)
            .unwrap()
    };
    // set/replace/add with an id become cas.
    assert_eq!(with(Mode::Set, c1 + 1, b"x"), StoreOutcome::Exists);
    assert_eq!(with(Mode::Add, c1 + 1, b"x"), StoreOutcome::Exists);
    let StoreOutcome::Stored { cas: c2 } = with(Mode::Replace, c1, b"v2") else {
        panic!()
    };
    // append/prepend check the id and keep the flags.
    assert_eq!(with(Mode::Append, c1, b"!"), StoreOutcome::Exists);
    assert!(matches!(
        with(Mode::Append, c2, b"!"),
        StoreOutcome::Stored { .. }
    ));
    let hit = s.get(cx(T0), b"k").unwrap();
    assert_eq!((hit.flags, hit.value.to_vec()), (2, b"v2!".to_vec()));
    assert_eq!(
        s.store_with_cas(cx(T0), Mode::Set, b"absent", 0, 0, buf(b"x"), 5)
            .unwrap(),
        StoreOutcome::NotFound
    );
    assert_eq!(s.stats().cas_badval, 2);
}

#[test]
fn an_unbounded_limit_does_not_overflow() {
    let s = store_with(StoreConfig {
        memory_limit: usize::MAX,
        item_size_max: usize::MAX,
        ..StoreConfig::default()
    });
    set(&s, T0, b"a", 0, 0, &[1; 100]);
    set(&s, T0, b"b", 0, 0, &[2; 100]);
    assert_eq!(s.stats().curr_items, 2);
    assert_eq!(s.stats().limit_maxbytes, u64::MAX);
}

mod eviction_model {
    //! With a small limit the store may drop any item, but never returns anything other
    //! than a key's latest value, never exceeds the limit, and never panics, whatever
    //! the keys, sizes and times.
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        Set(Vec<u8>, usize, i64),
        Get(Vec<u8>),
        Delete(Vec<u8>),
        Touch(Vec<u8>, i64),
        Advance(u8),
        Sweep(u8),
    }

    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            8 => (0u8..12).prop_map(|k| vec![b'a' + k]),
            1 => proptest::collection::vec(any::<u8>(), 0..300),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        let exptime = prop_oneof![Just(0i64), 1i64..30, any::<i64>()];
        prop_oneof![
            4 => (key(), 0usize..3000, exptime.clone()).prop_map(|(k, n, e)| Op::Set(k, n, e)),
            4 => key().prop_map(Op::Get),
            1 => key().prop_map(Op::Delete),
            1 => (key(), exptime).prop_map(|(k, e)| Op::Touch(k, e)),
            1 => any::<u8>().prop_map(Op::Advance),
            1 => any::<u8>().prop_map(Op::Sweep),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
        #[test]
        fn never_returns_stale_data(
            ops in proptest::collection::vec(op(), 1..300),
            limit in 2000usize..20_000,
            shards in 1usize..5,
        ) {
            let s = store_with(StoreConfig {
                memory_limit: limit,
                item_size_max: 4096,
                shards,
                ..StoreConfig::default()
            });
            // key -> (value, absolute expiry)
            let mut model: BTreeMap<Vec<u8>, (Vec<u8>, UnixTime)> = BTreeMap::new();
            let mut now = T0;
            let alive = |e: UnixTime, now: UnixTime| e == 0 || e > now;
            for (n, op) in ops.into_iter().enumerate() {
                let c = cx(now);
                match op {
                    Op::Set(k, len, exptime) => {
                        let data = checked_value(n as u32, len);
                        match s.set(c, &k, 0, exptime, buf(&data)) {
                            Ok(StoreOutcome::Stored { .. }) => {
                                model.insert(k, (data, absolute_expiry(exptime, now)));
                            }
                            Err(StoreError::BadKey) => {
                                prop_assert!(k.is_empty() || k.len() > KEY_MAX_LENGTH);
                            }
                            Err(StoreError::TooLarge | StoreError::OutOfMemory) => {
                                model.remove(&k);
                            }
                            Ok(other) => prop_assert!(false, "set: {:?}", other),
                        }
                    }
                    Op::Get(k) => {
                        let got = s.get(c, &k).map(|h| h.value.to_vec());
                        let want = model.get(&k).filter(|(_, e)| alive(*e, now));
                        if let Some(got) = got {
                            prop_assert_eq!(Some(&got), want.map(|(v, _)| v), "stale or corrupt");
                        }
                    }
                    Op::Delete(k) => {
                        s.delete(c, &k, 0);
                        model.remove(&k);
                    }
                    Op::Touch(k, exptime) => {
                        if s.touch(c, &k, exptime) {
                            let entry = model.get_mut(&k);
                            prop_assert!(entry.as_ref().is_some_and(|(_, e)| alive(*e, now)));
                            if let Some(entry) = entry {
                                entry.1 = absolute_expiry(exptime, now);
                            }
                        }
                    }
                    Op::Advance(d) => now += UnixTime::from(d % 16),
                    Op::Sweep(budget) => {
                        s.sweep(c, usize::from(budget));
                    }
                }
                let st = s.stats();
                prop_assert!(st.bytes as usize <= limit, "{} > {}", st.bytes, limit);
                prop_assert!(st.curr_items as usize <= model.len());
            }
        }
    }
}

#[test]
fn gets_take_no_write_lock() {
    // On a core, with every shard's write lock held, gets still answer: the read
    // path touches only the RCU map (and atomics).
    let config = ebb::Config {
        cores: 1,
        pin: false,
        idle_poll: core::time::Duration::ZERO,
    };
    let hit = ebb::run(config, || async {
        let domain = ebb::Handle::current().expect("on a core").rcu().clone();
        // On an active core of the domain: the map reads under a guard, lock-free.
        assert!(domain.read_guard().is_some());
        let s = Store::new(StoreConfig::default(), domain);
        set(&s, T0, b"k", 0, 0, b"v");
        let held: Vec<_> = s.shards.iter().map(|sh| sh.ring.lock()).collect();
        let hit = s.get(cx(T0), b"k").map(|h| h.value.to_vec());
        let miss = s.get(cx(T0), b"absent");
        drop(held);
        ebb::shutdown();
        (hit, miss)
    })
    .expect("the runtime ran");
    assert_eq!(hit, (Some(b"v".to_vec()), None));
}

#[test]
fn sweep_removes_flushed_items_and_frees_their_bytes() {
    let s = store();
    for i in 0..20u32 {
        set(&s, T0, format!("k{i}").as_bytes(), 0, 0, b"value");
    }
    s.flush_all(cx(T0), 0);
    set(&s, T0, b"after", 0, 0, b"v");
    let removed = s.sweep(cx(T0), 100_000);
    assert_eq!(removed, 20);
    let st = s.stats();
    assert_eq!(st.curr_items, 1);
    assert_eq!(st.bytes as usize, item_size(5, 1));
    assert_eq!(value(&s, T0, b"after").unwrap(), b"v");
}

// ----- meta commands

#[test]
fn meta_get_reports_and_touches() {
    let s = store();
    set(&s, T0, b"k", 5, 100, b"hi");
    // The first read finds it unfetched; u leaves it so.
    let m = s.meta_get(cx(T0 + 3), b"k", None, false).unwrap();
    assert_eq!(
        (m.hit.flags, m.exptime, m.time, m.fetched),
        (5, T0 + 100, T0, false)
    );
    assert!(!s.meta_get(cx(T0 + 3), b"k", None, true).unwrap().fetched);
    assert!(s.meta_get(cx(T0 + 3), b"k", None, true).unwrap().fetched);
    // T: the expiry found is reported, the new one set (counted as a touch).
    let touches = s.stats().cmd_touch;
    let m = s.meta_get(cx(T0 + 4), b"k", Some(0), true).unwrap();
    assert_eq!(m.exptime, T0 + 100);
    assert_eq!(s.stats().cmd_touch, touches + 1);
    assert_eq!(
        s.meta_get(cx(T0 + 500), b"k", None, true).unwrap().exptime,
        0
    );
    assert!(s.meta_get(cx(T0), b"k", Some(-1), true).is_some());
    assert_eq!(s.meta_get(cx(T0), b"k", None, true), None, "T-1 expired it");
}

#[test]
fn delete_if_compares_even_zero() {
    let s = store();
    let cas = set(&s, T0, b"k", 0, 0, b"v");
    assert_eq!(s.delete_if(cx(T0), b"k", Some(0)), DeleteOutcome::Exists);
    assert_eq!(
        s.delete_if(cx(T0), b"k", Some(cas + 1)),
        DeleteOutcome::Exists
    );
    assert_eq!(s.delete_if(cx(T0), b"k", Some(cas)), DeleteOutcome::Deleted);
    assert_eq!(s.delete_if(cx(T0), b"k", None), DeleteOutcome::NotFound);
}

#[test]
fn meta_arith_touches_and_creates() {
    let s = store();
    set(&s, T0, b"n", 3, 100, b"10");
    let op = Arith {
        incr: true,
        delta: 5,
        initial: None,
        cas: 0,
    };
    let (o, m) = s.meta_arith(cx(T0), b"n", op, Some(3600)).unwrap();
    assert!(matches!(o, ArithOutcome::Value { value: 15, .. }));
    assert_eq!(
        m,
        MetaArith {
            exptime: T0 + 100,
            created: false
        }
    );
    let hit = s.meta_get(cx(T0), b"n", None, false).unwrap();
    assert_eq!((hit.exptime, hit.hit.flags), (T0 + 3600, 3));
    // A miss with an initial creates it with the initial's expiry, not the touch's.
    let op = Arith {
        initial: Some((42, 50)),
        ..op
    };
    let (o, m) = s.meta_arith(cx(T0), b"new", op, Some(3600)).unwrap();
    assert!(matches!(o, ArithOutcome::Value { value: 42, .. }));
    assert!(m.created);
    assert_eq!(
        s.meta_get(cx(T0), b"new", None, false).unwrap().exptime,
        T0 + 50
    );
    assert_eq!(value(&s, T0, b"new").unwrap(), b"42");
}

// ----- memory: what items really take, and allocation failure (issue 21) -----

/// A value as the network delivers it: frame-sized pieces (1,460 bytes each).
fn framed(data: &[u8]) -> IOBufChain {
    let mut chain = IOBufChain::new();
    for part in data.chunks(1460) {
        chain.push_back(IOBuf::copy_from_slice(part));
    }
    chain
}

/// Memory whose room and buffers a test turns off and on.
#[derive(Default)]
struct Switch {
    no_room: core::sync::atomic::AtomicBool,
    no_buffers: core::sync::atomic::AtomicBool,
}

impl ItemMemory for Switch {
    fn buffer(&self, cap: usize) -> Option<IOBuf> {
        (!self.no_buffers.load(Ordering::Relaxed)).then(|| IOBuf::with_capacity(cap))
    }

    fn room_for(&self, _bytes: usize) -> bool {
        !self.no_room.load(Ordering::Relaxed)
    }
}

#[test]
fn large_values_are_kept_in_pieces_of_at_most_16_kib() {
    let s = store();
    let data = checked_value(1, 1_000_000);
    s.set(cx(T0), b"big", 0, 0, framed(&data)).unwrap();
    let hit = s.get(cx(T0), b"big").unwrap();
    assert_eq!(hit.value.to_vec(), data);
    assert!(hit.value.iter().all(|b| b.len() <= VALUE_PIECE));
    assert_eq!(hit.value.segment_count(), Packing::new(data.len()).count());
    // Accounted at what the pieces take: within 1% of the value, not a 1 MiB block.
    let bytes = s.stats().bytes as usize;
    assert!(
        bytes >= data.len() && bytes < data.len() + data.len() / 100,
        "{bytes} accounted for {} bytes",
        data.len()
    );
}

#[test]
fn items_are_accounted_at_the_allocator_s_sizes() {
    let s = store();
    // A 1,900-byte value that fills its 2 KiB receive buffer is kept in it, and
    // accounted the whole buffer; a 900-byte one there would be copied into a 1 KiB
    // object (see `plan_value`).
    let mut frame = IOBuf::with_capacity(2048 - ebb::iobuf::REGION_OVERHEAD);
    frame.extend_from_slice(&[7; 1900]).unwrap();
    s.set(cx(T0), b"k", 0, 0, frame.clone().into()).unwrap();
    let hit = s.get(cx(T0), b"k").unwrap();
    assert!(hit.value.front().unwrap().shares_storage_with(&frame));
    drop(hit);
    let st = s.stats();
    assert_eq!(st.bytes as usize, ITEM_OVERHEAD + 2048); // a one-byte key is inline
    // A 9,000-byte value cut from a 64 KiB read is copied out: into an 8 KiB block and
    // a 1 KiB object, not 16 KiB.
    let mut read = IOBuf::with_capacity((64 << 10) - ebb::iobuf::REGION_OVERHEAD);
    read.extend_from_slice(&[1; 9000]).unwrap();
    s.set(cx(T0), b"n", 0, 0, read.into()).unwrap();
    let st2 = s.stats();
    assert_eq!(
        st2.bytes - st.bytes,
        (ITEM_OVERHEAD + Packing::new(9000).cost()) as u64
    );
    assert_eq!(Packing::new(9000).cost(), 8192 + 896 + 48);
}

#[test]
fn allocation_failure_costs_the_request_not_the_store() {
    let memory = Arc::new(Switch::default());
    let s = Store::with_memory(
        StoreConfig::default(),
        Arc::new(RcuDomain::new(1)),
        memory.clone(),
    );
    for i in 0..50u32 {
        let key = format!("small{i}");
        s.set(cx(T0), key.as_bytes(), 0, 0, framed(&checked_value(i, 100)))
            .unwrap();
    }
    let before = s.stats();
    // The allocator fails the pieces of a large value: out of memory, nothing stored,
    // the accounting given back, and as much evicted again for the next try.
    memory.no_buffers.store(true, Ordering::Relaxed);
    let large = checked_value(99, 200_000);
    assert_eq!(
        s.set(cx(T0), b"large", 0, 0, framed(&large)),
        Err(StoreError::OutOfMemory)
    );
    let after = s.stats();
    assert_eq!(after.outofmemory, 1);
    assert_eq!(value(&s, T0, b"large"), None);
    assert!(after.bytes <= before.bytes);
    assert!(after.evictions > 0, "nothing evicted to make room");
    // Below the reserve even a value kept in its own buffers is refused.
    memory.no_buffers.store(false, Ordering::Relaxed);
    memory.no_room.store(true, Ordering::Relaxed);
    assert_eq!(
        s.set(cx(T0), b"k", 0, 0, buf(b"v")),
        Err(StoreError::OutOfMemory)
    );
    // A failed set removes the key's old value, as memcached does (no stale reads).
    memory.no_room.store(false, Ordering::Relaxed);
    set(&s, T0, b"stale", 0, 0, b"old");
    memory.no_room.store(true, Ordering::Relaxed);
    assert_eq!(
        s.set(cx(T0), b"stale", 0, 0, buf(b"new")),
        Err(StoreError::OutOfMemory)
    );
    assert_eq!(value(&s, T0, b"stale"), None);
    // Memory back: the same requests succeed, every surviving value is intact.
    memory.no_room.store(false, Ordering::Relaxed);
    s.set(cx(T0), b"large", 0, 0, framed(&large)).unwrap();
    assert_eq!(value(&s, T0, b"large").unwrap(), large);
    for i in 0..50u32 {
        if let Some(v) = value(&s, T0, format!("small{i}").as_bytes()) {
            assert_eq!(v, checked_value(i, 100));
        }
    }
    assert_eq!(s.stats().outofmemory, 3);
}

#[test]
fn random_allocation_failures_never_lose_or_corrupt_a_stored_value() {
    // A soak under fault injection: a tenth of the requests for value memory fail.
    let memory = Arc::new(FailingMemory::new(HeapMemory::default(), 100_000, 21));
    let limit = 2 << 20;
    let s = Store::with_memory(
        StoreConfig {
            memory_limit: limit,
            shards: 4,
            ..StoreConfig::default()
        },
        Arc::new(RcuDomain::new(1)),
        memory.clone(),
    );
    let mut latest: BTreeMap<u32, u32> = BTreeMap::new(); // key -> version stored
    let mut refused = 0;
    for step in 0..3000u32 {
        let key = step % 400;
        let len = match (step / 500) % 3 {
            0 => 1 + (step as usize * 31) % 1024,
            1 => 100_000 + (step as usize * 7919) % 200_000,
            _ => 1 + (step as usize * 17) % 1024,
        };
        let data = checked_value(step, len);
        match s.set(cx(T0), format!("k{key}").as_bytes(), step, 0, framed(&data)) {
            Ok(StoreOutcome::Stored { .. }) => {
                latest.insert(key, step);
            }
            Err(StoreError::OutOfMemory) => {
                refused += 1;
                latest.remove(&key); // a failed set removes the old value
            }
            other => panic!("step {step}: {other:?}"),
        }
        assert!(s.stats().bytes as usize <= limit);
        if step % 7 == 0 {
            let probe = (step * 13) % 400;
            if let Some(hit) = s.get(cx(T0), format!("k{probe}").as_bytes()) {
                let version = latest
                    .get(&probe)
                    .copied()
                    .expect("a value that was removed");
                assert_eq!(hit.flags, version);
                let want = checked_value(version, hit.value.len());
                assert_eq!(hit.value.to_vec(), want, "k{probe} v{version}");
            }
        }
    }
    assert!(refused > 0 && memory.refused() > 0);
    assert_eq!(s.stats().outofmemory, refused);
    assert!(s.stats().evictions > 0);
}

/// The per-class statistics add up to the store's totals, each item in the class of its
/// accounted size, and evictions are counted in the evicted items' classes.
#[test]
fn class_stats_add_up_to_the_totals() {
    let s = store_with(StoreConfig {
        memory_limit: 256 * 1024,
        shards: 8,
        ..StoreConfig::default()
    });
    let mut i = 0u32;
    while s.stats().evictions == 0 {
        let len = if i.is_multiple_of(2) { 10 } else { 3000 };
        set(
            &s,
            T0,
            format!("key:{i}").as_bytes(),
            0,
            100,
            &vec![b'v'; len],
        );
        let _ = s.get(cx(T0), format!("key:{i}").as_bytes());
        i += 1;
    }
    let last = format!("key:{}", i - 1);
    assert_eq!(s.delete(cx(T0), last.as_bytes(), 0), DeleteOutcome::Deleted);
    let totals = s.stats();
    let classes = s.class_stats(T0 + 5);
    let sum = |f: &dyn Fn(&ClassStats) -> u64| classes.iter().map(f).sum::<u64>();
    assert_eq!(sum(&|c| c.items), totals.curr_items);
    assert_eq!(sum(&|c| c.bytes), totals.bytes);
    assert_eq!(sum(&|c| c.get(ClassCounter::GetHits)), totals.get_hits);
    assert_eq!(sum(&|c| c.get(ClassCounter::CmdSet)), u64::from(i));
    assert_eq!(sum(&|c| c.get(ClassCounter::Evicted)), totals.evictions);
    assert_eq!(
        sum(&|c| c.get(ClassCounter::EvictedNonzero)),
        totals.evictions
    );
    assert_eq!(
        sum(&|c| c.get(ClassCounter::DeleteHits)),
        totals.delete_hits
    );
    // Two sizes, two classes; each item's accounted size fits its class's chunk.
    let held: Vec<&ClassStats> = classes.iter().filter(|c| c.items > 0).collect();
    assert_eq!(held.len(), 2, "{classes:?}");
    for class in held {
        assert!(
            class.bytes <= class.items * class.chunk_size as u64,
            "{class:?}"
        );
        assert_eq!(class.age, 5);
    }
}
