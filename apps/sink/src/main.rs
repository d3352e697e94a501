//! `sink`: byte-stream endpoints on Ebbflow, over Linux sockets or ebb-net on TAP.
//!
//! * default: listen, and for each connection print
//!   `sink: N bytes sha256 HEX from PEER` when it closes (`--once`: exit after one);
//! * `--echo`: listen, and send back everything each connection sends (no report);
//! * `--connect ADDR --send N`: connect, send N bytes of the pattern (see
//!   `sink::pattern`), print `sink: sent N bytes sha256 HEX to PEER`;
//! * `--connect ADDR --receive`: connect, receive until the peer's FIN, print
//!   `sink: N bytes sha256 HEX from PEER`.
//!
//! The handlers are the library's, the same over both backends.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use ebb_core::event;
use ebb_core::future::promise;
use ebb_core::net::{CloseReason, TcpConnection, TcpErrorKind, TcpHandler};
use ebb_hosted::netstack::Placement;
use sink::net_args::{NetArgs, run_app};
use sink::pattern::Pattern;
use sink::{Echo, PatternSender, ReportFn, Sink, StreamReport};

#[derive(Parser, Debug)]
#[command(about = "TCP sink / pattern sender on the Ebbflow hosted runtime")]
struct Args {
    /// Address to listen on (Linux sockets; ebb-net listens on its interface address).
    #[arg(long, default_value = "127.0.0.1")]
    addr: IpAddr,
    /// Port to listen on.
    #[arg(long, default_value_t = 9000)]
    port: u16,
    /// Exit after the first connection closes.
    #[arg(long)]
    once: bool,
    /// Echo what each connection sends instead of counting it (latency tests).
    #[arg(long, conflicts_with_all = ["connect", "once"])]
    echo: bool,
    /// Connect to this address instead of listening.
    #[arg(long, value_name = "ADDR")]
    connect: Option<SocketAddr>,
    /// With --connect: send this many pattern bytes.
    #[arg(
        long,
        value_name = "N",
        requires = "connect",
        conflicts_with = "receive"
    )]
    send: Option<u64>,
    /// With --connect: receive until the peer closes.
    #[arg(long, requires = "connect")]
    receive: bool,
    /// Cores for the Linux-socket backend (ebb-net runs on one).
    #[arg(long)]
    cores: Option<usize>,
    #[command(flatten)]
    net: NetArgs,
}

/// The two connection types, installed the same way.
trait Installable: TcpConnection {
    fn install(&self, handler: impl TcpHandler);
}

impl Installable for ebb_hosted::tcp::TcpConn {
    fn install(&self, handler: impl TcpHandler) {
        self.set_handler(handler)
    }
}

impl Installable for ebb_hosted::netstack::TcpConn {
    fn install(&self, handler: impl TcpHandler) {
        self.set_handler(handler)
    }
}

fn print_report(report: &StreamReport, sent: bool) {
    if sent {
        println!(
            "sink: sent {} bytes sha256 {} to {}",
            report.bytes, report.sha256, report.peer
        );
    } else {
        println!(
            "sink: {} bytes sha256 {} from {}",
            report.bytes, report.sha256, report.peer
        );
    }
    if report.reason != CloseReason::Normal {
        println!("sink: connection with {} {}", report.peer, report.reason);
    }
    let _ = std::io::stdout().flush();
}

/// Installs the mode's handler on a connected `conn`; resolves when it closes.
async fn run_client(conn: impl Installable, send: Option<u64>) -> Result<(), String> {
    let (tx, rx) = promise::<StreamReport>();
    let report: ReportFn = Box::new(move |r| {
        let _ = tx.set(r);
    });
    let peer = conn.peer_addr();
    match send {
        Some(n) => {
            let mut sender = PatternSender::new(Pattern::get(), peer, n, report);
            sender.start(&conn);
            conn.install(sender);
        }
        None => conn.install(Sink::new(peer, report)),
    }
    let report = rx.await.map_err(|e| e.to_string())?;
    print_report(&report, send.is_some());
    if report.reason == CloseReason::Normal {
        Ok(())
    } else {
        Err(format!("connection {}", report.reason))
    }
}

fn sink_report(once: Option<ebb_core::future::Promise<()>>) -> ReportFn {
    Box::new(move |r| {
        print_report(&r, false);
        if let Some(done) = once {
            let _ = done.set(());
        }
    })
}

async fn main_linux(args: Args) -> Result<(), String> {
    if let Some(addr) = args.connect {
        let conn = ebb_hosted::tcp::connect(addr)
            .await
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        return run_client(conn, args.send).await;
    }
    let addr = SocketAddr::new(args.addr, args.port);
    let (done_tx, done_rx) = promise::<()>();
    let done = std::sync::Mutex::new(args.once.then_some(done_tx));
    let echo = args.echo;
    let listener = ebb_hosted::tcp::listen(addr, move |conn| {
        if echo {
            conn.set_handler(Echo::default());
            return;
        }
        let once = done.lock().ok().and_then(|mut d| d.take());
        let peer = conn.peer_addr();
        conn.set_handler(Sink::new(peer, sink_report(once)));
    })
    .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    println!("sink: listening on {}", listener.local_addr());
    let _ = std::io::stdout().flush();
    wait_or_forever(args.once, done_rx).await;
    Ok(())
}

async fn wait_or_forever(once: bool, done: ebb_core::future::PromiseFuture<()>) {
    if once {
        let _ = done.await;
    } else {
        std::future::pending::<()>().await
    }
}

async fn main_tap(args: Args, config: ebb_hosted::netstack::NetStackConfig) -> Result<(), String> {
    let stack =
        ebb_hosted::netstack::start(config).map_err(|e| format!("cannot start ebb-net: {e}"))?;
    let cidr = event::timeout(Duration::from_secs(60), stack.wait_for_address())
        .await
        .map_err(|_| "no address within 60 s".to_string())?
        .map_err(|e| e.to_string())?;
    let result = if let Some(addr) = args.connect {
        let SocketAddr::V4(v4) = addr else {
            return Err("ebb-net speaks IPv4 only".into());
        };
        match stack.connect(v4).await {
            Ok(conn) => run_client(conn, args.send).await,
            Err(e) => Err(format!("cannot connect to {addr}: {e}")),
        }
    } else {
        let (done_tx, done_rx) = promise::<()>();
        let mut once = args.once.then_some(done_tx);
        // The echo runs on every core (a connection stays where its SYN arrived); the
        // sink reports on the home core, which owns all its connections.
        let _listener = if args.echo {
            stack.ready().await.map_err(|e| e.to_string())?;
            stack
                .listen_on_every_core(args.port, Placement::AcceptingCore, |conn| {
                    conn.set_handler(Echo::default())
                })
                .await
        } else {
            stack.listen(args.port, move |conn| {
                let peer = conn.peer_addr();
                conn.set_handler(Sink::new(peer, sink_report(once.take())));
            })
        }
        .map_err(|e: TcpErrorKind| format!("cannot listen: {e}"))?;
        println!(
            "sink: listening on {} (ebb-net on {}, {} core(s))",
            SocketAddrV4::new(cidr.address(), args.port),
            stack.device_name().unwrap_or_default(),
            stack.cores().len()
        );
        let _ = std::io::stdout().flush();
        wait_or_forever(args.once, done_rx).await;
        Ok(())
    };
    // Let the last ACK/FIN leave before the device closes.
    event::sleep(Duration::from_millis(50)).await;
    if let Ok(counters) = stack.shutdown() {
        eprintln!("sink: tcp {:?}", counters.tcp);
    }
    result
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (net, cores) = (args.net.clone(), args.cores);
    run_app("sink", &net, cores, args, main_tap, main_linux)
}
