//! Arbitrary bytes as a guest image: parsed, laid out, paged, loaded and symbolized as
//! the monitor does before it creates a VM. Nothing may panic; an accepted image must load.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    // One guest memory for every run (a segment write is all the target changes in it).
    static MEM: OnceLock<std::sync::Mutex<ebb_vmm::guest::GuestMem>> = OnceLock::new();
    let mem = MEM.get_or_init(|| std::sync::Mutex::new(ebb_vmm_fuzz::guest_memory()));
    let mem = mem.lock().unwrap_or_else(|e| e.into_inner());
    let _ = ebb_vmm_fuzz::load(data, &mem);
});
