//! `tokio-echo`: the idiomatic tokio echo server used as the comparison peer.
//!
//! Multi-thread runtime with `--workers N` worker threads; one task per
//! connection that reads into a 64 KiB buffer and `write_all`s it back, closing
//! on EOF. Accepted sockets get TCP_NODELAY (as Ebbflow's echo server does).
//! Prints `tokio-echo: listening on 127.0.0.1:PORT` once listening.

use std::io::Write as _;

use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

#[derive(Debug, Parser)]
#[command(version, about = "Idiomatic tokio TCP echo server (benchmark peer)")]
struct Args {
    /// Tokio worker threads.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// TCP port on 127.0.0.1 (0 = pick a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
}

fn main() -> std::io::Result<()> {
    let args = Args::parse();
    // Plenty of descriptors for thousands of connections (best effort).
    let _ = ebb_bench::sys::raise_fd_limit(65_536);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers.max(1))
        .enable_all()
        .build()?
        .block_on(serve(args.port))
}

async fn serve(port: u16) -> std::io::Result<()> {
    // The same accept backlog as ebb-hosted's listeners (4096). tokio's `bind` uses 1024,
    // and 1,000 simultaneous connects under load then trip Linux's SYN-flood cookies
    // (seen as resets in the echo checker's 1,000-connection test).
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(std::net::SocketAddr::from(([127, 0, 0, 1], port)))?;
    let listener = socket.listen(4096)?;
    let addr = listener.local_addr()?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "tokio-echo: listening on {addr}")?;
        out.flush()?;
    }
    loop {
        let (socket, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                // E.g. EMFILE: report and keep serving.
                eprintln!("tokio-echo: accept: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        tokio::spawn(echo(socket));
    }
}

async fn echo(mut socket: TcpStream) {
    let _ = socket.set_nodelay(true);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match socket.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if socket.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}
