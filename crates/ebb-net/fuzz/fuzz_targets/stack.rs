//! The whole stack: the input is a flags byte and a sequence of (time step, application
//! action, frame) records replayed into a `Stack` with the real TCP layer, a listener, an
//! established and a connecting connection, a UDP socket (or the DHCP client); the
//! invariants are checked after every record. See `ebb_net_fuzz` (the crate's `src/lib.rs`)
//! for the input format and the starting state.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ebb_net_fuzz::Harness::run(data);
});
