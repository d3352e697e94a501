extern crate std;

use super::*;
use alloc::vec;
use alloc::vec::Vec;
use core::sync::atomic::AtomicU64;
use proptest::prelude::*;

fn pair(len: usize) -> (Endpoint, Endpoint, Arc<dyn Mapping>) {
    let w: Arc<dyn Mapping> = HeapWindow::new(len).unwrap();
    let host = Endpoint::open(w.clone(), Side::Host, 0).unwrap();
    let guest = Endpoint::open(w.clone(), Side::Guest, 3).unwrap();
    (host, guest, w)
}

/// The word at `offset`, as a hostile peer would write it.
fn word(w: &Arc<dyn Mapping>, offset: usize) -> &AtomicU64 {
    // SAFETY: test windows are page-aligned and larger than the control page.
    unsafe { &*w.base().add(offset).cast::<AtomicU64>() }
}

#[test]
fn capacity_is_the_largest_power_of_two_that_fits() {
    assert_eq!(capacity_of(4096 + 8192), Some(4096));
    assert_eq!(capacity_of(4096 + 8191), None);
    assert_eq!(capacity_of((1 << 20) + 4096), Some(1 << 19));
    assert_eq!(capacity_of(1 << 20), Some(1 << 18));
    assert_eq!(capacity_of(100), None);
}

#[test]
fn a_small_or_misaligned_window_is_refused() {
    let w: Arc<dyn Mapping> = HeapWindow::new(8192).unwrap();
    assert_eq!(
        Endpoint::open(w, Side::Host, 0).unwrap_err(),
        WindowError::TooSmall(8192)
    );
}

#[test]
fn each_end_opens_once_and_sees_the_other() {
    let (host, guest, w) = pair(1 << 16);
    assert_eq!(
        Endpoint::open(w.clone(), Side::Guest, 0).unwrap_err(),
        WindowError::InUse(Side::Guest)
    );
    assert_eq!(host.peer_state(), PeerState::Is(State::Open));
    assert_eq!(host.peer_core(), 3);
    assert_eq!(guest.peer_core(), 0);
    mark_reset(w, Side::Guest).unwrap();
    assert_eq!(host.peer_state(), PeerState::Is(State::Reset));
}

#[test]
fn bytes_cross_in_order_and_wrap() {
    let (mut host, mut guest, _w) = pair(4096 + 2 * 4096);
    let mut next = 0u8;
    let mut expect = 0u8;
    for round in 0..1000 {
        let len = 1 + (round * 37) % 3000;
        let chunk: Vec<u8> = (0..len)
            .map(|_| {
                next = next.wrapping_add(1);
                next
            })
            .collect();
        assert_eq!(host.write(&chunk).unwrap(), len);
        host.publish();
        let mut out = vec![0u8; 4096];
        let n = guest.read(&mut out).unwrap();
        assert_eq!(n, len);
        for b in &out[..n] {
            expect = expect.wrapping_add(1);
            assert_eq!(*b, expect);
        }
        guest.release();
    }
}

#[test]
fn an_uninitialized_read_returns_the_bytes_it_filled_across_the_wrap() {
    let (mut host, mut guest, w) = pair(4096 + 2 * 4096);
    // Move the stream near the end of the ring, so the next read wraps.
    host.write(&[0; 4000]).unwrap();
    host.publish();
    assert_eq!(guest.read(&mut [0; 4000]).unwrap(), 4000);
    guest.release();
    let data: Vec<u8> = (0..300u32).map(|i| (i % 251) as u8).collect();
    host.write(&data).unwrap();
    host.publish();
    let mut out = [core::mem::MaybeUninit::<u8>::uninit(); 512];
    let filled = guest.read_uninit(&mut out).unwrap();
    assert_eq!(
        filled,
        &data[..],
        "the 96 bytes before the wrap and the 204 after"
    );
    guest.release();
    // Nothing waits: an empty prefix.
    assert!(guest.read_uninit(&mut out).unwrap().is_empty());
    // Lying indices are refused here as by `read`.
    word(&w, RING_TO_GUEST + PRODUCED).store(1 << 40, Ordering::Release);
    assert!(matches!(
        guest.read_uninit(&mut out),
        Err(Corrupt::Produced { .. })
    ));
}

#[test]
fn a_full_ring_takes_nothing_and_asks_for_room() {
    let (mut host, mut guest, _w) = pair(4096 + 2 * 4096);
    assert_eq!(host.write(&[7; 5000]).unwrap(), 4096);
    assert_eq!(host.write(&[7; 10]).unwrap(), 0);
    host.publish();
    assert!(!host.want_room().unwrap());
    let mut out = [0u8; 100];
    assert_eq!(guest.read(&mut out).unwrap(), 100);
    assert!(guest.release(), "the waiting producer is owed a wake");
    assert!(!guest.release(), "once");
    assert_eq!(host.room().unwrap(), 100);
}

#[test]
fn a_sleeping_consumer_is_woken_once() {
    let (mut host, guest, _w) = pair(1 << 16);
    assert!(!guest.arm_receive().unwrap());
    host.write(b"hi").unwrap();
    assert!(host.publish(), "the consumer sleeps");
    host.write(b"again").unwrap();
    assert!(!host.publish(), "woken already");
    assert!(guest.arm_receive().unwrap(), "bytes are there");
    guest.disarm_receive();
    assert!(!host.set_state(State::Finished));
    assert_eq!(guest.peer_state(), PeerState::Is(State::Finished));
}

#[test]
fn lying_indices_are_corrupt_not_trusted() {
    let (mut host, mut guest, w) = pair(4096 + 2 * 4096);
    // The guest claims to have produced more than the ring holds.
    word(&w, RING_TO_HOST + PRODUCED).store(4097, Ordering::Release);
    assert!(matches!(host.available(), Err(Corrupt::Produced { .. })));
    let mut out = [0u8; 16];
    assert!(host.read(&mut out).is_err());
    // ... or to have consumed what was never produced.
    host.write(b"abc").unwrap();
    host.publish();
    word(&w, RING_TO_GUEST + CONSUMED).store(10, Ordering::Release);
    assert!(matches!(host.room(), Err(Corrupt::Consumed { .. })));
    // ... or consumed going backwards after a real read.
    word(&w, RING_TO_GUEST + CONSUMED).store(0, Ordering::Release);
    assert_eq!(guest.read(&mut out).unwrap(), 3);
    guest.release();
    assert_eq!(host.room().unwrap(), 4096);
    word(&w, RING_TO_GUEST + CONSUMED).store(1, Ordering::Release);
    assert!(matches!(host.room(), Err(Corrupt::Consumed { .. })));
    // A state that is no state.
    // SAFETY: the guest end's word, in the control page.
    unsafe {
        &*w.base()
            .add(END_GUEST)
            .cast::<core::sync::atomic::AtomicU32>()
    }
    .store(99, Ordering::Release);
    assert_eq!(host.peer_state(), PeerState::Invalid(99));
}

#[test]
fn two_threads_move_a_stream_intact() {
    let (mut host, mut guest, _w) = pair(4096 + 2 * 8192);
    const TOTAL: usize = 4 << 20;
    let producer = std::thread::spawn(move || {
        let data: Vec<u8> = (0..TOTAL).map(|i| (i * 7 % 251) as u8).collect();
        let mut sent = 0;
        while sent < TOTAL {
            let end = (sent + 3001).min(TOTAL);
            let n = host.write(&data[sent..end]).unwrap();
            host.publish();
            sent += n;
            if n == 0 {
                std::thread::yield_now();
            }
        }
    });
    let mut got = 0;
    let mut buf = vec![0u8; 5000];
    while got < TOTAL {
        let n = guest.read(&mut buf).unwrap();
        for (k, b) in buf[..n].iter().enumerate() {
            assert_eq!(*b, ((got + k) * 7 % 251) as u8, "byte {}", got + k);
        }
        got += n;
        guest.release();
        if n == 0 {
            std::thread::yield_now();
        }
    }
    producer.join().unwrap();
}

proptest! {
    /// Whatever a hostile guest writes into the control page, the host's calls return
    /// (data or an error) and never copy outside the data areas.
    #[test]
    fn hostile_control_words_never_escape(words in proptest::collection::vec((0usize..512, any::<u64>()), 1..16)) {
        let (mut host, _guest, w) = pair(4096 + 2 * 4096);
        for (slot, value) in words {
            word(&w, (slot * 8) % 1024).store(value, Ordering::Relaxed);
            let mut out = [0u8; 8192];
            let _ = host.available();
            let _ = host.read(&mut out[..4096]);
            let _ = host.write(&out[..4096]);
            let _ = host.want_room();
            let _ = host.arm_receive();
            host.publish();
            host.release();
            let _ = host.peer_state();
        }
    }
}

#[test]
fn a_producer_that_takes_back_published_bytes_is_corrupt() {
    let (mut host, mut guest, w) = pair(4096 + 2 * 4096);
    guest.write(&[5; 100]).unwrap();
    guest.publish();
    // The consumer is told 100 bytes wait (and sizes its buffer for them) ...
    assert_eq!(host.available().unwrap(), 100);
    // ... then the guest moves `produced` back before the copy, so a second look at the
    // index would find only 1: the index went backwards, which is corrupt.
    word(&w, RING_TO_HOST + PRODUCED).store(1, Ordering::Release);
    let mut out = [0u8; 100];
    assert_eq!(
        host.read(&mut out),
        Err(Corrupt::ProducedBackwards {
            produced: 1,
            seen: 100
        })
    );
    assert!(host.available().is_err(), "and stays so while it says so");
    // Nothing was taken: once the index is back where it was, the 100 bytes are there.
    word(&w, RING_TO_HOST + PRODUCED).store(100, Ordering::Release);
    assert_eq!(host.read(&mut out).unwrap(), 100);
    assert_eq!(out, [5; 100]);
}
