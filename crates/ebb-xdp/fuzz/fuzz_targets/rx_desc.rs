//! ebb-xdp's checks on kernel-written ring contents: see `ebb_xdp_fuzz::check`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ebb_xdp_fuzz::check(data);
});
