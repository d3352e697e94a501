//! Hoard threadtest with Ebbflow's general-purpose allocator (`ebb-mem`, grown by mmap).

#[path = "../threadtest.rs"]
mod threadtest;

#[global_allocator]
static GLOBAL: ebb_mem::GeneralPurposeAllocator<ebb_mem::MmapSource> =
    ebb_mem::GeneralPurposeAllocator::new(ebb_mem::MmapSource::new());

fn main() {
    threadtest::run("ebb");
}
