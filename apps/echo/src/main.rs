//! `echo`: a TCP echo server on Ebbflow.
//!
//! Every core accepts connections on the same port (one listening socket per core) and owns
//! the connections it accepts. Received IOBufs are sent straight back, without copying.
//! When a slow reader lets more than [`HIGH_WATER`] bytes queue up on a connection, the
//! server closes its receive window on that connection (stops reading, so TCP pushes back on
//! the sender) and reopens it once the queue has drained below [`LOW_WATER`].

use clap::Parser;
use ebb::net::{self, CloseReason, IOBuf, TcpConnection, TcpHandler};
use std::io::Write;
use std::net::SocketAddr;

/// Stop reading from a connection with this much echo data queued for it.
const HIGH_WATER: usize = 1 << 20;
/// Resume reading once the queue is below this.
const LOW_WATER: usize = 256 << 10;

#[derive(Parser, Debug)]
#[command(about = "TCP echo server on the Ebbflow hosted runtime")]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    addr: std::net::IpAddr,
    /// Port to listen on (0 picks a free one; the chosen port is printed).
    #[arg(long, default_value_t = 7000)]
    port: u16,
    /// Number of cores (event loops); default: every CPU the process may use.
    #[arg(long)]
    cores: Option<usize>,
    /// Microseconds an idle core keeps polling its sockets before sleeping (0: sleep at once).
    #[arg(long, default_value_t = 50)]
    idle_poll_us: u64,
}

/// One connection's handler: echo, with back-pressure.
struct Echo;

impl TcpHandler for Echo {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        if conn.send(data.into()).is_err() {
            return; // the connection is failing; `closed` follows
        }
        if conn.queued_bytes() > HIGH_WATER {
            conn.set_receive_window_open(false);
        }
    }

    fn send_window_increased(&mut self, conn: &dyn TcpConnection) {
        if conn.queued_bytes() < LOW_WATER {
            conn.set_receive_window_open(true);
        }
    }

    fn closed(&mut self, _reason: CloseReason) {}
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let mut config = ebb::Config::default();
    if let Some(cores) = args.cores {
        config.cores = cores;
    }
    config.idle_poll = std::time::Duration::from_micros(args.idle_poll_us);
    let cores = config.cores;
    let addr = SocketAddr::new(args.addr, args.port);
    let result = ebb::run(config, move || async move {
        let listener = net::listen(addr, |conn| conn.set_handler(Echo))?;
        println!(
            "echo: listening on {} ({cores} cores)",
            listener.local_addr()
        );
        let _ = std::io::stdout().flush();
        // Serve until the process is stopped.
        std::future::pending::<Result<(), net::TcpErrorKind>>().await
    });
    match result {
        Ok(Ok(())) => std::process::ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("echo: cannot listen on {addr}: {e}");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("echo: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
