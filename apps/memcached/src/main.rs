//! `memcached`: the server (being written; see the library).

#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

async fn app_main() -> i32 {
    ebb::eprintln!("memcached: the server is not written yet");
    1
}

ebb::main!(app_main);
