//! The store's throughput with ebb-mem's per-core slab allocator as the process's
//! global allocator (what a native image uses); see `common/store_bench.rs`.

use ebb::mem::{HostedAllocator, MmapSource};

#[global_allocator]
static GLOBAL: HostedAllocator = HostedAllocator::new(MmapSource::new());

mod common {
    pub mod store_bench;
}

#[test]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
fn store_throughput_ebb_mem_allocator() {
    let stats = common::store_bench::measure("ebb-mem allocator");
    assert_eq!(common::store_bench::check(&stats), Ok(()));
}
