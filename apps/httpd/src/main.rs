//! `httpd`: a small HTTP/1.1 responder on Ebbflow (see the library docs for what it
//! answers), over Linux sockets (default, one event loop per core) or over ebb-net on a
//! TAP device (`--tap NAME --ip A/P` or `--dhcp`, optionally `--faults SPEC`; one core
//! per TAP queue, `--queues N`).
//! Prints `httpd: listening on ADDR` when ready.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use ebb_core::event;
use ebb_hosted::netstack::Placement;
use httpd::Http;
use sink::net_args::{NetArgs, run_app};

#[derive(Parser, Debug)]
#[command(about = "HTTP/1.1 responder on the Ebbflow hosted runtime")]
struct Args {
    /// Address to listen on (Linux sockets; ebb-net listens on its interface address).
    #[arg(long, default_value = "127.0.0.1")]
    addr: IpAddr,
    /// Port to listen on (Linux sockets: 0 picks a free one).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Cores for the Linux-socket backend (ebb-net runs on one per `--queues`).
    #[arg(long)]
    cores: Option<usize>,
    #[command(flatten)]
    net: NetArgs,
}

async fn serve_linux(args: Args) -> Result<(), String> {
    let addr = SocketAddr::new(args.addr, args.port);
    let listener = ebb_hosted::tcp::listen(addr, |conn| conn.set_handler(Http::default()))
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    println!("httpd: listening on {}", listener.local_addr());
    let _ = std::io::stdout().flush();
    std::future::pending::<Result<(), String>>().await
}

async fn serve_tap(args: Args, config: ebb_hosted::netstack::NetStackConfig) -> Result<(), String> {
    let stack =
        ebb_hosted::netstack::start(config).map_err(|e| format!("cannot start ebb-net: {e}"))?;
    let cidr = event::timeout(Duration::from_secs(60), stack.wait_for_address())
        .await
        .map_err(|_| "no address within 60 s".to_string())?
        .map_err(|e| e.to_string())?;
    stack.ready().await.map_err(|e| e.to_string())?;
    // Every core listens; a connection stays on the core whose queue got its SYN.
    let _listener = stack
        .listen_on_every_core(args.port, Placement::AcceptingCore, |conn| {
            conn.set_handler(Http::default())
        })
        .await
        .map_err(|e| format!("cannot listen: {e}"))?;
    println!(
        "httpd: listening on {} (ebb-net on {}, {} core(s))",
        SocketAddrV4::new(cidr.address(), args.port),
        stack.device_name().unwrap_or_default(),
        stack.cores().len()
    );
    let _ = std::io::stdout().flush();
    std::future::pending::<Result<(), String>>().await
}

fn main() -> ExitCode {
    let args = Args::parse();
    let (net, cores) = (args.net.clone(), args.cores);
    run_app("httpd", &net, cores, args, serve_tap, serve_linux)
}
