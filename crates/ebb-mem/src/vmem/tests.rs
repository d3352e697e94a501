use super::*;
use proptest::prelude::*;
use std::vec::Vec;

const G: usize = 0x1000;

#[test]
fn first_fit_alignment_and_coalescing() {
    let mut v = VMemAllocator::new(0x10_0000..0x20_0000, G).unwrap();
    let a = v.alloc(G, G).unwrap();
    assert_eq!(a, 0x10_0000..0x10_1000);
    let b = v.alloc(3 * G, 0x4000).unwrap();
    assert_eq!(b, 0x10_4000..0x10_7000);
    let c = v.alloc(1, 1).unwrap();
    assert_eq!(
        c,
        0x10_1000..0x10_2000,
        "first fit takes the gap left by alignment"
    );
    v.free(a.clone()).unwrap();
    v.free(c.clone()).unwrap();
    v.free(b.clone()).unwrap();
    assert!(v.free_ranges().eq(std::iter::once(0x10_0000..0x20_0000)));
    assert_eq!(v.free(b.clone()), Err(VMemError::NotAllocated(b)));
}

#[test]
fn bad_requests_and_exhaustion_are_errors() {
    assert_eq!(
        VMemAllocator::new(0..0, G).unwrap_err(),
        VMemError::InvalidWindow
    );
    assert_eq!(
        VMemAllocator::new(0..G, 3).unwrap_err(),
        VMemError::InvalidWindow
    );
    let mut v = VMemAllocator::new(0..4 * G, G).unwrap();
    assert_eq!(v.alloc(0, G), Err(VMemError::InvalidRequest));
    assert_eq!(v.alloc(G, 3), Err(VMemError::InvalidRequest));
    assert!(matches!(
        v.alloc(5 * G, G),
        Err(VMemError::Exhausted { .. })
    ));
    assert!(matches!(
        v.alloc(usize::MAX, G),
        Err(VMemError::Exhausted { .. })
    ));
    v.reserve(G..2 * G).unwrap();
    assert_eq!(v.reserve(G..3 * G), Err(VMemError::NotFree(G..3 * G)));
    assert!(matches!(
        v.alloc(3 * G, G),
        Err(VMemError::Exhausted { .. })
    ));
    assert_eq!(v.largest_free(), 2 * G);
    assert!(v.free(4 * G..5 * G).is_err());
    v.free(G..2 * G).unwrap();
    assert_eq!(v.free_bytes(), 4 * G);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 2 } else { 128 }))]

    /// Random allocations and frees: ranges never overlap, are aligned, lie in the window,
    /// free space is accounted exactly, and everything coalesces back to one range.
    #[test]
    fn vmem_matches_model(ops in proptest::collection::vec((any::<bool>(), 1usize..20, 0u32..4, any::<usize>()), 1..if cfg!(miri) { 20 } else { 200 })) {
        let window = 0x4000_0000..0x4000_0000 + 256 * G;
        let mut v = VMemAllocator::new(window.clone(), G).unwrap();
        let mut live: Vec<Range<usize>> = Vec::new();
        for (alloc, pages, align_log, pick) in ops {
            if alloc || live.is_empty() {
                let align = G << align_log;
                if let Ok(r) = v.alloc(pages * G, align) {
                    prop_assert!(r.start % align == 0 && r.len() == pages * G);
                    prop_assert!(window.start <= r.start && r.end <= window.end);
                    prop_assert!(live.iter().all(|o| r.end <= o.start || o.end <= r.start));
                    live.push(r);
                }
            } else {
                let r = live.swap_remove(pick % live.len());
                v.free(r).unwrap();
            }
            let used: usize = live.iter().map(|r| r.len()).sum();
            prop_assert_eq!(v.free_bytes() + used, window.len());
        }
        for r in live {
            v.free(r).unwrap();
        }
        prop_assert!(v.free_ranges().eq([window]));
    }
}
