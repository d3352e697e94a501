//! `cluster`: one distributed Ebbflow application — a hosted front end and native nodes.
//!
//! Run hosted (the front end), it boots `--nodes` native nodes (default 2) from the
//! native build of this same app, each in the front end's own process with rootless
//! networking, and waits until each has joined (connected back through its monitor and
//! received its node id and global ids). Then:
//!
//! * a key-value workload (`--ops`, default 100,000 random gets, sets and deletes) through
//!   a map sharded over the nodes by consistent hashing, every answer checked against a
//!   model;
//! * a replicated counter that every node increments at once, with each update a call
//!   and with updates merged locally, the total checked exact;
//! * the file offload the other way: a node reads a host file through the front end's
//!   file server (`--file`, default the node image) and reports its SHA-256;
//! * with `--kill-after OPS`, the last node is killed mid-workload: the loss is reported,
//!   a call pending on it fails, and the other shards keep serving.
//!
//! With `--bench ROUNDS` it first measures the Messenger between the front end and node
//! 1 beside plain Linux TCP between two processes (see `bench.rs`).
//!
//! It prints what happened (nodes up, time to join, operations served per node) and
//! exits 0 when every check held. Natively the same image is a node: it finds the front
//! end's address and its join token on its command line (`--ebb-front-end`,
//! `--ebb-join-token`, put there by the front end's allocator).
//!
//! `ebb run cluster` builds both and runs the front end (see the README).

#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

mod node;
mod protocol;

#[cfg(not(target_os = "none"))]
mod bench;
#[cfg(not(target_os = "none"))]
mod front_end;

async fn app_main() -> i32 {
    let args = ebb::args();
    match node::role(&args) {
        Some(Ok(role)) => node::run(role.front_end, role.token, &role.rest).await,
        Some(Err(e)) => {
            ebb::eprintln!("cluster node: {e}");
            2
        }
        None => front_end_main(&args).await,
    }
}

#[cfg(not(target_os = "none"))]
async fn front_end_main(args: &[alloc::string::String]) -> i32 {
    if args.iter().any(|a| a == "--tcp-peer") {
        return bench::tcp_peer(args);
    }
    match front_end::Options::parse(args) {
        Ok(options) => front_end::run(options).await,
        Err(e) => {
            eprintln!("cluster: {e}");
            2
        }
    }
}

#[cfg(target_os = "none")]
async fn front_end_main(_args: &[alloc::string::String]) -> i32 {
    ebb::eprintln!(
        "cluster: natively this image is a node: it needs --ebb-front-end ADDR \
         --ebb-join-token T (the front end's allocator passes them)"
    );
    2
}

ebb::main!(app_main);
