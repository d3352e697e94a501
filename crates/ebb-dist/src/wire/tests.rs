use super::*;
use alloc::vec;
use alloc::vec::Vec;
use proptest::prelude::*;

fn id(n: u32) -> EbbId {
    EbbId::from_u32(n).unwrap()
}

fn message(kind: u16, payload: &[u8]) -> IOBufChain {
    let header = Header {
        class: FrameClass::Message,
        source: NodeId(3),
        destination: id(2100),
        kind,
        call: 0,
        len: 0,
    };
    encode(header, IOBufChain::from(IOBuf::copy_from_slice(payload))).unwrap()
}

#[test]
fn a_header_survives_the_round_trip() {
    let h = Header {
        class: FrameClass::Request,
        source: NodeId(7),
        destination: id(2049),
        kind: 0xbeef,
        call: 42,
        len: 5,
    };
    assert_eq!(Header::decode(&h.encode(), MAX_PAYLOAD), Ok(h));
}

#[test]
fn each_malformed_field_is_named() {
    let good = Header {
        class: FrameClass::Message,
        source: NodeId(1),
        destination: id(300),
        kind: 1,
        call: 0,
        len: 10,
    }
    .encode();
    let with = |i: usize, v: u8| {
        let mut b = good;
        b[i] = v;
        Header::decode(&b, MAX_PAYLOAD)
    };
    assert_eq!(with(0, b'X'), Err(WireError::BadMagic(0x5862)));
    assert_eq!(with(2, 9), Err(WireError::UnsupportedVersion(9)));
    assert_eq!(with(3, 77), Err(WireError::UnknownClass(77)));
    assert_eq!(with(15, 1), Err(WireError::ReservedNotZero(0x100)));
    assert_eq!(with(11, 1), Err(WireError::BadDestination(0x0100_012c)));
    assert!(matches!(with(16, 1), Err(WireError::BadCallId { .. })));
    assert_eq!(
        Header::decode(&good, 9),
        Err(WireError::TooLong { len: 10, max: 9 })
    );
}

#[test]
fn payloads_are_not_copied() {
    let mut d = FrameDecoder::default();
    // A small frame alone in a large buffer (a socket read, a frame buffer) too.
    let bytes = message(1, b"hello").to_vec();
    let buf = in_buffer_of(&bytes, 64 * 1024);
    let probe = buf.clone();
    d.push(buf);
    let frame = d.next_frame().unwrap().unwrap();
    assert_eq!(frame.payload.to_vec(), b"hello");
    assert!(frame.payload.front().unwrap().shares_storage_with(&probe));
}

/// `bytes` as a view into a buffer of `capacity` bytes, as a socket read or a frame
/// buffer delivers a few bytes.
fn in_buffer_of(bytes: &[u8], capacity: usize) -> IOBuf {
    let mut buf = IOBuf::try_with_capacity(capacity).unwrap();
    buf.extend_from_slice(bytes).unwrap();
    buf
}

#[test]
fn a_frame_sent_a_byte_at_a_time_occupies_about_its_size() {
    // Each byte arrives alone in a 2 KiB buffer. Kept as views, 64 KiB of payload kept
    // 128 MiB of buffers alive (a 16 MiB payload would have kept 32 GiB); compacted, the
    // frame occupies about what it holds, and decodes the same.
    let payload: Vec<u8> = (0..64 * 1024).map(|i| (i % 251) as u8).collect();
    let bytes = message(9, &payload).to_vec();
    let mut d = FrameDecoder::default();
    let mut most = 0;
    for &b in &bytes[..bytes.len() - 1] {
        d.push(in_buffer_of(&[b], 2048));
        assert_eq!(d.next_frame(), Ok(None));
        most = most.max(d.occupied());
    }
    assert!(
        most <= 2 * bytes.len() + 4096,
        "{} bytes received a byte at a time kept {most} bytes of buffers",
        bytes.len()
    );
    d.push(in_buffer_of(&bytes[bytes.len() - 1..], 2048));
    let frame = d.next_frame().unwrap().unwrap();
    assert_eq!(frame.payload.to_vec(), payload);
    assert_eq!(d.occupied(), 0);
}

#[test]
fn well_filled_buffers_are_not_copied() {
    // A piece that fills most of its buffer is kept as it came (zero copy), wherever it
    // falls in a frame.
    let bytes = message(1, &[5u8; 3000]).to_vec();
    let (first, second) = bytes.split_at(1500);
    let (a, b) = (in_buffer_of(first, 2048), in_buffer_of(second, 2048));
    let probe = b.clone();
    let mut d = FrameDecoder::default();
    d.push(a);
    d.push(b);
    let frame = d.next_frame().unwrap().unwrap();
    assert_eq!(frame.payload.to_vec(), vec![5u8; 3000]);
    assert!(frame.payload.iter().any(|s| s.shares_storage_with(&probe)));
}

#[test]
fn an_error_is_final_and_drops_what_was_held() {
    let mut d = FrameDecoder::default();
    d.push(IOBuf::copy_from_slice(&[0u8; 64]));
    assert!(matches!(d.next_frame(), Err(WireError::BadMagic(_))));
    d.push(IOBuf::copy_from_slice(&message(1, b"x").to_vec()));
    assert!(d.next_frame().is_err());
    assert_eq!(d.buffered(), 0);
}

#[test]
fn the_limit_can_be_raised_after_a_handshake_and_a_pending_header_is_seen() {
    // Until a connection joins, only small frames; then the full limit.
    let mut d = FrameDecoder::new(4);
    let big = message(1, &[7; 100]);
    d.set_max_payload(MAX_PAYLOAD + 1);
    let bytes = big.to_vec();
    d.push(IOBuf::copy_from_slice(&bytes[..HEADER_LEN + 10]));
    assert_eq!(d.next_frame(), Ok(None));
    assert!(
        d.header_pending(),
        "the header was taken, the payload is awaited"
    );
    assert_eq!(d.buffered(), 10);
    d.push(IOBuf::copy_from_slice(&bytes[HEADER_LEN + 10..]));
    assert_eq!(d.next_frame().unwrap().unwrap().payload.len(), 100);
    assert!(!d.header_pending());
    // Lowered again, a frame above it is refused from its header.
    d.set_max_payload(4);
    d.push(IOBuf::copy_from_slice(&bytes));
    assert_eq!(d.next_frame(), Err(WireError::TooLong { len: 100, max: 4 }));
}

proptest! {
    /// Frames split at arbitrary points come out whole, in order, with their payloads.
    #[test]
    fn frames_survive_any_segmentation(
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..8),
        cuts in proptest::collection::vec(1usize..64, 1..40),
    ) {
        let mut stream = Vec::new();
        for (k, p) in payloads.iter().enumerate() {
            stream.extend(message(k as u16, p).to_vec());
        }
        let mut d = FrameDecoder::default();
        let mut got = Vec::new();
        let mut at = 0;
        let mut cut = cuts.iter().cycle();
        while at < stream.len() {
            let n = (*cut.next().unwrap()).min(stream.len() - at);
            d.push(IOBuf::copy_from_slice(&stream[at..at + n]));
            at += n;
            while let Some(f) = d.next_frame().unwrap() {
                got.push((f.header.kind, f.payload.to_vec()));
            }
        }
        let want: Vec<_> = payloads.iter().enumerate().map(|(k, p)| (k as u16, p.clone())).collect();
        prop_assert_eq!(got, want);
        prop_assert_eq!(d.buffered(), 0);
    }

    /// Random bytes either decode or fail cleanly; they never make the decoder hold more
    /// than one frame's worth.
    #[test]
    fn garbage_fails_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut d = FrameDecoder::new(64);
        d.push(IOBuf::copy_from_slice(&bytes));
        loop {
            match d.next_frame() {
                Ok(Some(f)) => prop_assert!(f.payload.len() <= 64),
                Ok(None) => break,
                Err(_) => { prop_assert_eq!(d.buffered(), 0); break }
            }
        }
        prop_assert!(d.buffered() <= HEADER_LEN + 64);
    }
}
