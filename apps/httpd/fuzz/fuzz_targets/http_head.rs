//! Arbitrary bytes as a request head; see `httpd_fuzz::run_head` for the checks.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    httpd_fuzz::run_head(data);
});
