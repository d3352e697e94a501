//! Arbitrary bytes as a binary-protocol connection's input (after the 0x80 that selects
//! the protocol), in arbitrary segments; see `memcached_fuzz` for the format and checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    memcached_fuzz::run(data, true);
});
