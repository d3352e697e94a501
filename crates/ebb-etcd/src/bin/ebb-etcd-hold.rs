//! `ebb-etcd-hold`: joins an application's etcd store as a front end, registers one node
//! under its lease, says so, and holds the lease until it is killed — what the expiry test
//! kills, and a quick way to see membership by hand:
//!
//! ```sh
//! ebb-etcd-hold --endpoints http://127.0.0.1:2379 --prefix /ebbflow/demo --node 5 --ttl 2
//! ```

use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use ebb_dist::node::NodeId;
use ebb_etcd::{EtcdConfig, EtcdIdMap};

struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future on this thread (it waits for the bridge thread only).
fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    let mut future = std::pin::pin!(future);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
            .unwrap_or_else(|| {
                eprintln!(
                    "usage: ebb-etcd-hold --endpoints URL[,URL...] --prefix P --node N [--ttl S]"
                );
                std::process::exit(2)
            })
    };
    let endpoints = value("--endpoints").split(',').map(String::from).collect();
    let mut config = EtcdConfig::new(endpoints, value("--prefix"));
    if args.iter().any(|a| a == "--ttl") {
        let ttl: u64 = value("--ttl").parse().unwrap_or(5);
        config.lease_ttl = Duration::from_secs(ttl);
    }
    let node: u32 = value("--node").parse().unwrap_or_else(|_| {
        eprintln!("ebb-etcd-hold: --node takes a number");
        std::process::exit(2)
    });
    let map = match EtcdIdMap::connect(config) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("ebb-etcd-hold: {e}");
            std::process::exit(1)
        }
    };
    if let Err(e) = block_on(map.register_node(NodeId(node), b"held".to_vec())) {
        eprintln!("ebb-etcd-hold: cannot register node {node}: {e}");
        std::process::exit(1)
    }
    println!("registered node {node} under lease {:x}", map.lease());
    loop {
        std::thread::park();
    }
}
