//! `hello`: the smallest Ebbflow app, written once for both runtimes. It greets from core
//! 0 with the core count and its arguments, asks every core for its id to show they all
//! run an event loop, and exits 0.
//!
//! `ebb run hello -- a b` runs it natively under KVM when `/dev/kvm` is usable, hosted
//! otherwise.

#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use alloc::vec::Vec;

async fn app_main() -> i32 {
    let cores = ebb::num_cores();
    ebb::println!(
        "hello: hello from Ebbflow on {cores} core(s), args {:?}",
        ebb::args()
    );
    let replies = (0..cores as u32).map(|c| ebb::run_on(ebb::CoreId(c), || ebb::core_id().0));
    let mut answered = Vec::new();
    for reply in replies {
        match reply.await {
            Ok(core) => answered.push(core),
            Err(e) => {
                ebb::println!("hello: a core did not answer: {e}");
                return 1;
            }
        }
    }
    ebb::println!("hello: cores {answered:?} answered");
    0
}

ebb::main!(app_main);
