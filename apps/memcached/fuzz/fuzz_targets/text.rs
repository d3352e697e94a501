//! Arbitrary bytes as a text-protocol connection's input, in arbitrary segments; see
//! `memcached_fuzz` for the input format and the checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    memcached_fuzz::run(data, false);
});
