//! Ethernet II: check, read every field, parse, emit, and compare bytes and reprs.
#![no_main]

use ebb_net::wire::ethernet::{Frame, Repr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(frame) = Frame::new_checked(data) else {
        return;
    };
    let _ = (frame.dst_addr(), frame.src_addr(), frame.ethertype());
    let payload = frame.payload();
    let Ok(repr) = Repr::parse(&frame) else {
        return;
    };
    let mut buf = vec![0u8; repr.buffer_len(payload.len())];
    let mut out = Frame::new_unchecked(&mut buf[..]);
    repr.emit(&mut out);
    out.payload_mut().copy_from_slice(payload);
    // Every header bit is in the repr, so the frame comes back byte for byte.
    assert_eq!(&buf[..], data);
    let again = Repr::parse(&Frame::new_checked(&buf[..]).unwrap()).unwrap();
    assert_eq!(again, repr);
});
