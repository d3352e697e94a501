//! Arbitrary bytes as what a client sends on one connection, in arbitrary segments,
//! read back at an arbitrary pace; see `httpd_fuzz` for the input format and the checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    httpd_fuzz::run_stream(data);
});
