//! The join handshake's control messages from a hostile peer: see
//! `ebb_dist_fuzz::control`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ebb_dist_fuzz::control(data);
});
