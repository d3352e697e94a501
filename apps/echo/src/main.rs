//! `echo`: a TCP echo server on Ebbflow, one source for both runtimes.
//!
//! Every core listens on the same port and owns the connections it accepts. Received
//! IOBufs go straight back out, without copying (`ebb_bytestream::Echo`: when a slow
//! reader lets echoed data pile up, the server stops reading that connection until it
//! drains, so TCP pushes back on the sender).
//!
//! Hosted it listens through Linux sockets on 127.0.0.1:7000 (or ebb-net over a TAP
//! device with `--tap`); native, ebb-net on the VM's virtio-net device on port 7 (the
//! image has an address of its own: `ebb run echo --net user -p 7000:7`). Prints
//! `echo: listening on ADDR (BACKEND, N cores)` when ready.

#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use ebb::net;
use ebb_bytestream::Echo;

/// The default port: the echo service's own natively, where the image has an address of
/// its own; hosted the process shares the host's ports, where 7 needs root.
const DEFAULT_PORT: u16 = if cfg!(target_os = "none") { 7 } else { 7000 };

const USAGE: &str = "usage: echo [--port N] [network options]";

async fn app_main() -> i32 {
    let (port, net) = match net::server_options(&ebb::args(), DEFAULT_PORT, USAGE) {
        Ok(options) => options,
        Err(e) => {
            ebb::eprintln!("echo: {e}");
            return 2;
        }
    };
    let network = match net::start(net).await {
        Ok(network) => network,
        Err(e) => {
            ebb::eprintln!("echo: cannot start the network: {e}");
            return 1;
        }
    };
    let listener = match network
        .listen(port, |conn| conn.set_handler(Echo::default()))
        .await
    {
        Ok(listener) => listener,
        Err(e) => {
            ebb::eprintln!("echo: cannot listen on port {}: {e}", port);
            return 1;
        }
    };
    let cores = ebb::num_cores();
    ebb::println!(
        "echo: listening on {} ({network}, {cores} core{})",
        listener.local_addr(),
        if cores == 1 { "" } else { "s" }
    );
    // Serve until the process or VM is stopped.
    core::future::pending::<i32>().await
}

ebb::main!(app_main);
