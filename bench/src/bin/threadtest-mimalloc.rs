//! Hoard threadtest with mimalloc. Needs `--features mimalloc`.

#[path = "../threadtest.rs"]
mod threadtest;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    threadtest::run("mimalloc");
}
