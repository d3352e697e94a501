//! The store's throughput with the system allocator; see `common/store_bench.rs`.

mod common {
    pub mod store_bench;
}

#[test]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
fn store_throughput_system_allocator() {
    let stats = common::store_bench::measure("system allocator");
    assert_eq!(common::store_bench::check(&stats), Ok(()));
}
