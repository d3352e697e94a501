//! `sink`: byte-stream endpoints on Ebbflow, one source for both runtimes.
//!
//! * default: listen, and for each connection print
//!   `sink: N bytes sha256 HEX from PEER` when it closes (`--once`: exit after one);
//! * `--echo`: listen, and send back everything each connection sends (no report);
//! * `--connect ADDR --send N`: connect, send N bytes of the pattern (see
//!   `ebb_bytestream::pattern`), print `sink: sent N bytes sha256 HEX to PEER`;
//! * `--connect ADDR --receive`: connect, receive until the peer's FIN, print
//!   `sink: N bytes sha256 HEX from PEER`.
//!
//! Hosted over Linux sockets (127.0.0.1:9000) or ebb-net on a TAP device (`--tap`);
//! native over ebb-net on virtio-net. The handlers are `ebb_bytestream`'s, the same on
//! every backend. Prints `sink: listening on ADDR (BACKEND, N cores)` when listening.

#![cfg_attr(target_os = "none", no_std, no_main)]

extern crate alloc;

use alloc::boxed::Box;
use alloc::format;
use alloc::string::{String, ToString};
use core::time::Duration;

use ebb::future::{Promise, PromiseFuture, promise};
use ebb::net::{self, CloseReason, Connection, NetConfig, SocketAddr, TcpConnection};
use ebb_bytestream::pattern::Pattern;
use ebb_bytestream::{Echo, PatternSender, ReportFn, Sink, StreamReport};

const USAGE: &str = "usage: sink [--port N] [--once | --echo] [network options]
       sink --connect ADDR:PORT (--send N | --receive) [network options]";

/// What the command line asks for.
enum Mode {
    /// Listen and report each connection (`once`: exit after the first).
    Sink { port: u16, once: bool },
    /// Listen and echo.
    Echo { port: u16 },
    /// Connect; send `Some(n)` pattern bytes, or receive until the peer closes.
    Connect { addr: SocketAddr, send: Option<u64> },
}

fn parse_options() -> Result<(Mode, NetConfig), String> {
    let (net, rest) = NetConfig::from_args(&ebb::args()).map_err(|e| e.to_string())?;
    let (mut port, mut once, mut echo) = (9000u16, false, false);
    let (mut connect, mut send, mut receive) = (None, None, false);
    let mut opts = getargs::Options::new(rest.iter().map(String::as_str));
    while let Some(opt) = opts.next_opt().map_err(|e| e.to_string())? {
        let mut value = || opts.value().map_err(|e| e.to_string());
        match opt {
            getargs::Opt::Long("port") => {
                let v = value()?;
                port = v.parse().map_err(|_| format!("bad --port {v:?}"))?;
            }
            getargs::Opt::Long("once") => once = true,
            getargs::Opt::Long("echo") => echo = true,
            getargs::Opt::Long("connect") => {
                let v = value()?;
                connect = Some(
                    v.parse::<SocketAddr>()
                        .map_err(|_| format!("bad --connect {v:?}: expected ADDR:PORT"))?,
                );
            }
            getargs::Opt::Long("send") => {
                let v = value()?;
                send = Some(v.parse::<u64>().map_err(|_| format!("bad --send {v:?}"))?);
            }
            getargs::Opt::Long("receive") => receive = true,
            getargs::Opt::Long("help") | getargs::Opt::Short('h') => {
                return Err(format!("{USAGE}\n{}", net::OPTIONS_HELP));
            }
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        }
    }
    if let Some(extra) = opts.next_positional() {
        return Err(format!("unexpected argument {extra:?}\n{USAGE}"));
    }
    let mode = match (connect, send, receive, echo) {
        (Some(addr), Some(_), false, false) | (Some(addr), None, true, false) if !once => {
            Mode::Connect { addr, send }
        }
        (None, None, false, true) if !once => Mode::Echo { port },
        (None, None, false, false) => Mode::Sink { port, once },
        _ => return Err(format!("conflicting options\n{USAGE}")),
    };
    Ok((mode, net))
}

fn print_report(report: &StreamReport, sent: bool) {
    let (verb, dir) = if sent { ("sent ", "to") } else { ("", "from") };
    ebb::println!(
        "sink: {verb}{} bytes sha256 {} {dir} {}",
        report.bytes,
        report.sha256,
        report.peer
    );
    if report.reason != CloseReason::Normal {
        ebb::println!("sink: connection with {} {}", report.peer, report.reason);
    }
}

/// Installs the client's handler on `conn`; resolves when the connection closes.
async fn run_client(conn: Connection, send: Option<u64>) -> Result<(), String> {
    let (tx, rx) = promise::<StreamReport>();
    let report: ReportFn = Box::new(move |r| {
        let _ = tx.set(r);
    });
    let peer = conn.peer_addr();
    match send {
        Some(n) => {
            let mut sender = PatternSender::new(Pattern::get(), peer, n, report);
            sender.start(&conn);
            conn.set_handler(sender);
        }
        None => conn.set_handler(Sink::new(peer, report)),
    }
    let report = rx.await.map_err(|e| e.to_string())?;
    print_report(&report, send.is_some());
    match report.reason {
        CloseReason::Normal => Ok(()),
        reason => Err(format!("connection {reason}")),
    }
}

/// A report callback that prints, and with `once` resolves the first time.
fn sink_report(once: Option<Promise<()>>) -> ReportFn {
    Box::new(move |r| {
        print_report(&r, false);
        if let Some(done) = once {
            let _ = done.set(());
        }
    })
}

async fn run(mode: Mode, network: &net::Network) -> Result<(), String> {
    let (port, once) = match mode {
        Mode::Connect { addr, send } => {
            let conn = network
                .connect(addr)
                .await
                .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
            return run_client(conn, send).await;
        }
        Mode::Echo { port } => (port, None),
        Mode::Sink { port, once } => (port, Some(once)),
    };
    let (done_tx, done_rx): (Promise<()>, PromiseFuture<()>) = promise();
    let first = spin::Mutex::new(once.unwrap_or(false).then_some(done_tx));
    let listener = network
        .listen(port, move |conn| {
            if once.is_none() {
                conn.set_handler(Echo::default());
                return;
            }
            let peer = conn.peer_addr();
            conn.set_handler(Sink::new(peer, sink_report(first.lock().take())));
        })
        .await
        .map_err(|e| format!("cannot listen on port {port}: {e}"))?;
    let cores = ebb::num_cores();
    ebb::println!(
        "sink: listening on {} ({network}, {cores} core{})",
        listener.local_addr(),
        if cores == 1 { "" } else { "s" }
    );
    if once == Some(true) {
        let _ = done_rx.await;
        Ok(())
    } else {
        core::future::pending().await
    }
}

async fn app_main() -> i32 {
    let (mode, net) = match parse_options() {
        Ok(options) => options,
        Err(e) => {
            ebb::eprintln!("sink: {e}");
            return 2;
        }
    };
    let network = match net::start(net).await {
        Ok(network) => network,
        Err(e) => {
            ebb::eprintln!("sink: cannot start the network: {e}");
            return 1;
        }
    };
    let result = run(mode, &network).await;
    if network.stack().is_some() {
        // Let the last ACK or FIN leave before the device closes.
        ebb::sleep(Duration::from_millis(50)).await;
        if let Some(counters) = network.shutdown() {
            ebb::eprintln!("sink: tcp {:?}", counters.tcp);
        }
    }
    match result {
        Ok(()) => 0,
        Err(e) => {
            ebb::eprintln!("sink: {e}");
            1
        }
    }
}

ebb::main!(app_main);
