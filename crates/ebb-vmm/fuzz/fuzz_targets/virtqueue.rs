//! Arbitrary bytes as a virtqueue: a configuration, a descriptor table and an available
//! ring in guest memory, walked by `walk_chain` and served by `DeviceQueue` (pop,
//! push_used, the EVENT_IDX fields) as the device's I/O thread would. Nothing may panic;
//! every accepted chain lies inside guest memory and outside the MMIO window, is no
//! longer than the queue and adds up to at most 4 GiB (see `ebb_vmm_fuzz::virtqueue`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    // One guest memory for every run; `run` clears it first.
    static MEM: OnceLock<std::sync::Mutex<ebb_vmm::guest::GuestMem>> = OnceLock::new();
    let mem = MEM.get_or_init(|| std::sync::Mutex::new(ebb_vmm_fuzz::virtqueue::guest_memory()));
    let mem = mem.lock().unwrap_or_else(|e| e.into_inner());
    let _ = ebb_vmm_fuzz::virtqueue::run(data, &mem);
});
