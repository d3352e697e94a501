//! Decoding a peer's request when memory is short fails that request and nothing else.
//!
//! A global allocator that refuses any single allocation above a limit while the test
//! asks it to (standing in for a node whose memory is nearly full): a shard request and a
//! GlobalIdMap request carrying 1 MiB decode to an error, not an abort (serde's own
//! `Vec<u8>` would call `handle_alloc_error` and end the process), and decode again once
//! memory is back.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use ebb::{IOBuf, IOBufChain};
use ebb_dist::global_id_map::IdMapRequest;
use ebb_dist::objects::fragmented::MapRequest;
use ebb_dist::remote::{RemoteError, decode, encode};

/// Refuses allocations larger than `LIMIT` bytes (0: no limit).
struct Refusing;
static LIMIT: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged, or refused with null, which
// `GlobalAlloc` allows for `alloc`, `alloc_zeroed` and `realloc`.
unsafe impl GlobalAlloc for Refusing {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if refused(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if refused(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if refused(new_size) {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

fn refused(size: usize) -> bool {
    let limit = LIMIT.load(Ordering::Relaxed);
    limit != 0 && size > limit
}

#[global_allocator]
static ALLOCATOR: Refusing = Refusing;

/// `payload` split in two segments (the decoder then copies it into one buffer).
fn two_segments(payload: IOBufChain) -> IOBufChain {
    let bytes = payload.to_vec();
    let (a, b) = bytes.split_at(bytes.len() / 2);
    let mut chain = IOBufChain::from(IOBuf::copy_from_slice(a));
    chain.push_back(IOBuf::copy_from_slice(b));
    chain
}

#[test]
fn a_request_too_big_for_the_memory_left_is_an_error_not_an_abort() {
    let value = vec![0x5a; 1 << 20];
    let set = encode(&MapRequest::Set(b"key".to_vec(), value.clone())).unwrap();
    let id_set = encode(&IdMapRequest::Set(1, value.clone())).unwrap();
    let split = two_segments(set.clone());

    LIMIT.store(64 << 10, Ordering::Relaxed);
    let map: Result<MapRequest, _> = decode(&set);
    let ids: Result<IdMapRequest, _> = decode(&id_set);
    let copied: Result<MapRequest, _> = decode(&split);
    LIMIT.store(0, Ordering::Relaxed);

    for (what, err) in [
        ("map", map.err()),
        ("id map", ids.err()),
        ("two segments", copied.err()),
    ] {
        // postcard drops a custom error's text ("Serde Deserialization Error"): that the
        // same bytes decode below once memory is back shows the refusal was the cause.
        assert!(
            matches!(err, Some(RemoteError::BadPayload(_))),
            "{what}: expected a decode error, got {err:?}"
        );
    }
    // Memory back: the same payloads decode.
    assert!(decode::<MapRequest>(&set).is_ok());
    assert_eq!(
        decode::<MapRequest>(&split).unwrap(),
        MapRequest::Set(b"key".to_vec(), value.clone())
    );
    assert_eq!(
        decode::<IdMapRequest>(&id_set).unwrap(),
        IdMapRequest::Set(1, value)
    );
}
