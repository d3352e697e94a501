//! The general-purpose allocator as this test process's `#[global_allocator]`: everything
//! the test harness, std and these tests allocate goes through it, on cores and off.
#![cfg(not(miri))] // mmap-backed; the allocator itself is covered under Miri by unit tests

use ebb_core::{CoreId, percore};
use ebb_mem::{GeneralPurposeAllocator, MmapSource};
use std::alloc::{GlobalAlloc, Layout};
use std::collections::{BTreeMap, HashMap};
use std::sync::mpsc;

#[global_allocator]
static GLOBAL: GeneralPurposeAllocator<MmapSource> =
    GeneralPurposeAllocator::new(MmapSource::new());

#[test]
fn std_collections_work_on_cores_and_off() {
    let handles: Vec<_> = (0..4u32)
        .map(|t| {
            std::thread::spawn(move || {
                // Threads 0 and 1 are cores; 2 and 3 are plain threads (off-core slot).
                if t < 2 {
                    percore::set_current_core(Some(CoreId(t)));
                }
                let mut map = HashMap::new();
                let mut tree = BTreeMap::new();
                for i in 0..20_000u64 {
                    map.insert(i, format!("value {i} on {t}"));
                    tree.insert(
                        i.wrapping_mul(0x9E37_79B9),
                        vec![i as u8; (i % 300) as usize],
                    );
                }
                for i in (0..20_000u64).step_by(2) {
                    map.remove(&i);
                }
                let big: Vec<u64> = (0..2_000_000).collect(); // 16 MB: a huge mapping
                assert_eq!(big.iter().sum::<u64>(), 1_999_999 * 2_000_000 / 2);
                assert_eq!(map.len(), 10_000);
                assert_eq!(map[&1], format!("value 1 on {t}"));
                tree.len()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 20_000);
    }
}

#[test]
fn objects_freed_on_another_core_come_back_to_their_owner() {
    let (tx, rx) = mpsc::channel::<Vec<Box<[u64; 3]>>>();
    let producer = std::thread::spawn(move || {
        percore::set_current_core(Some(CoreId(10)));
        for round in 0..50u64 {
            let batch: Vec<_> = (0..1000).map(|i| Box::new([round, i, !i])).collect();
            tx.send(batch).unwrap();
        }
    });
    let consumer = std::thread::spawn(move || {
        percore::set_current_core(Some(CoreId(11)));
        let mut n = 0;
        for batch in rx {
            for b in &batch {
                assert_eq!(b[2], !b[1]);
            }
            n += batch.len();
            drop(batch); // remote frees to core 10
        }
        n
    });
    producer.join().unwrap();
    assert_eq!(consumer.join().unwrap(), 50_000);
}

#[test]
fn failure_is_null_and_reported() {
    // Larger than the address space can map: the source refuses, alloc returns null.
    let layout = Layout::from_size_align(1 << 62, 8).unwrap();
    // SAFETY: a non-zero-size layout; null is checked and nothing is freed.
    let p = unsafe { GLOBAL.alloc(layout) };
    assert!(p.is_null());
    assert!(Vec::<u8>::new().try_reserve(1 << 62).is_err());
    let report = GLOBAL.report(Some(layout)).to_string();
    assert!(report.contains("out of memory: requested"), "{report}");
    assert!(GLOBAL.last_failure().is_some());
}
