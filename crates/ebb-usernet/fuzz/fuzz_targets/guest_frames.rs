//! Guest frames into the user-mode network: see `ebb_usernet_fuzz::frames` (the harness).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ebb_usernet_fuzz::frames(data);
});
