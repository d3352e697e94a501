//! `httpd`: a small HTTP/1.1 responder on Ebbflow (see the library docs for what it
//! answers), one source for both runtimes.
//!
//! Hosted it listens through Linux sockets on 127.0.0.1:8080 (or ebb-net over a TAP
//! device with `--tap`, one core per TAP queue with `--queues N`); native, ebb-net on the
//! VM's virtio-net device on port 80 (`ebb run httpd --net user -p 8080:80`). Every core
//! listens; each connection is served by the core that accepted it, and watched there
//! for its timeouts (`--idle-timeout`, `--head-timeout`). Prints
//! `httpd: listening on ADDR (BACKEND, N cores)` when ready.

#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use ebb::net;
use httpd::{Http, Timeouts};

/// The default port: HTTP's own natively, where the image has an address of its own;
/// hosted the process shares the host's ports, where 80 needs root.
const DEFAULT_PORT: u16 = if cfg!(target_os = "none") { 80 } else { 8080 };

const USAGE: &str = "usage: httpd [--port N] [--idle-timeout SECONDS] [--head-timeout SECONDS] \
[network options]\n  (timeouts: 60 s without progress, 30 s for a request head)";

async fn app_main() -> i32 {
    let options = Timeouts::from_args(&ebb::args()).and_then(|(timeouts, rest)| {
        net::server_options(&rest, DEFAULT_PORT, USAGE).map(|(port, net)| (port, net, timeouts))
    });
    let (port, net, timeouts) = match options {
        Ok(options) => options,
        Err(e) => {
            ebb::eprintln!("httpd: {e}");
            return 2;
        }
    };
    let network = match net::start(net).await {
        Ok(network) => network,
        Err(e) => {
            ebb::eprintln!("httpd: cannot start the network: {e}");
            return 1;
        }
    };
    let listener = match network
        .listen(port, move |conn| {
            let http = Http::default();
            let activity = http.activity();
            conn.set_handler(http);
            // Its watchdog (on this core, the connection's) holds it until it closes.
            let _detached = ebb::spawn_local(httpd::watch(conn, activity, timeouts));
        })
        .await
    {
        Ok(listener) => listener,
        Err(e) => {
            ebb::eprintln!("httpd: cannot listen on port {port}: {e}");
            return 1;
        }
    };
    let cores = ebb::num_cores();
    ebb::println!(
        "httpd: listening on {} ({network}, {cores} core{})",
        listener.local_addr(),
        if cores == 1 { "" } else { "s" }
    );
    core::future::pending::<i32>().await
}

ebb::main!(app_main);
