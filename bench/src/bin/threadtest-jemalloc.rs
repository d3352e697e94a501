//! Hoard threadtest with jemalloc (tikv-jemallocator). Needs `--features tikv-jemallocator`.

#[path = "../threadtest.rs"]
mod threadtest;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    threadtest::run("jemalloc");
}
