//! Two ring ends over a window a hostile peer scribbles on: see `ebb_shm_fuzz::run`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ebb_shm_fuzz::run(data);
});
