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

use alloc::string::{String, ToString};
use ebb::net::{self, NetConfig};
use ebb_bytestream::Echo;

/// The default port: the echo service's own natively, where the image has an address of
/// its own; hosted the process shares the host's ports, where 7 needs root.
const DEFAULT_PORT: u16 = if cfg!(target_os = "none") { 7 } else { 7000 };

const USAGE: &str = "usage: echo [--port N] [network options]";

/// What the command line asks for.
struct Options {
    port: u16,
    net: NetConfig,
}

fn parse_options() -> Result<Options, String> {
    let (net, rest) = NetConfig::from_args(&ebb::args()).map_err(|e| e.to_string())?;
    let mut port = DEFAULT_PORT;
    let mut opts = getargs::Options::new(rest.iter().map(String::as_str));
    while let Some(opt) = opts.next_opt().map_err(|e| e.to_string())? {
        match opt {
            getargs::Opt::Long("port") => {
                let value = opts.value().map_err(|e| e.to_string())?;
                port = value
                    .parse()
                    .map_err(|_| alloc::format!("bad --port {value:?}"))?;
            }
            getargs::Opt::Long("help") | getargs::Opt::Short('h') => {
                return Err(alloc::format!("{USAGE}\n{}", net::OPTIONS_HELP));
            }
            other => return Err(alloc::format!("unknown option {other}\n{USAGE}")),
        }
    }
    if let Some(extra) = opts.next_positional() {
        return Err(alloc::format!("unexpected argument {extra:?}\n{USAGE}"));
    }
    Ok(Options { port, net })
}

async fn app_main() -> i32 {
    let options = match parse_options() {
        Ok(options) => options,
        Err(e) => {
            ebb::eprintln!("echo: {e}");
            return 2;
        }
    };
    let network = match net::start(options.net).await {
        Ok(network) => network,
        Err(e) => {
            ebb::eprintln!("echo: cannot start the network: {e}");
            return 1;
        }
    };
    let listener = match network
        .listen(options.port, |conn| conn.set_handler(Echo::default()))
        .await
    {
        Ok(listener) => listener,
        Err(e) => {
            ebb::eprintln!("echo: cannot listen on port {}: {e}", options.port);
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
