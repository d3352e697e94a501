//! ebb-dist's frame decoder on a hostile byte stream: see `ebb_dist_fuzz::frames`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ebb_dist_fuzz::frames(data);
});
