//! `epoll-echo`: minimal single-threaded TCP echo server on raw epoll.
//!
//! The baseline for the loop-backend comparison (`bench/loop-backend.sh`): it
//! does per connection what `ebb-hosted`'s per-core loop does, without the
//! runtime around it: one edge-triggered epoll instance waited on with
//! `epoll_pwait2` (rustix), nonblocking sockets with TCP_NODELAY, `read` into a
//! per-connection buffer and `sendmsg` of what was read. Like the runtime, a
//! short read is taken as "socket drained" (no extra read to see `EAGAIN`);
//! the next arrival is a new edge. Unsent bytes (send buffer full) are kept
//! and flushed on the next `EPOLLOUT` edge before reading more.
//!
//! Prints `epoll-echo: listening on 127.0.0.1:PORT` once listening.

use std::io::{self, IoSlice, Write as _};
use std::net::TcpListener;

use clap::Parser;
use rustix::event::epoll;
use rustix::fd::OwnedFd;
use rustix::io::Errno;
use rustix::net::{self as rnet, SendAncillaryBuffer, SendFlags, SocketFlags};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Single-threaded edge-triggered epoll TCP echo server (benchmark baseline)"
)]
struct Args {
    /// TCP port on 127.0.0.1 (0 = pick a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Per-connection read buffer in bytes.
    #[arg(long, default_value_t = 16 * 1024)]
    buf_size: usize,
}

/// Token of the listening socket (connections use their slab index).
const LISTENER: u64 = u64::MAX;

struct Conn {
    fd: OwnedFd,
    buf: Box<[u8]>,
    /// `buf[sent..len]` still has to be written back.
    sent: usize,
    len: usize,
}

enum Flow {
    Open,
    Close,
}

fn main() -> io::Result<()> {
    let args = Args::parse();
    let _ = ebb_bench::sys::raise_fd_limit(65_536);
    let listener = TcpListener::bind(("127.0.0.1", args.port))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let listener = OwnedFd::from(listener);

    let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    epoll::add(
        &ep,
        &listener,
        epoll::EventData::new_u64(LISTENER),
        epoll::EventFlags::IN | epoll::EventFlags::ET,
    )?;
    {
        let mut out = io::stdout().lock();
        writeln!(out, "epoll-echo: listening on {addr}")?;
        out.flush()?;
    }

    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events: Vec<epoll::Event> = Vec::with_capacity(1024);
    loop {
        events.clear();
        match epoll::wait(&ep, rustix::buffer::spare_capacity(&mut events), None) {
            Ok(_) => {}
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
        for ev in &events {
            // `Event` is packed: copy the fields out before use.
            let (flags, token) = (ev.flags, ev.data.u64());
            if token == LISTENER {
                accept_all(&ep, &listener, &mut conns, &mut free, args.buf_size);
                continue;
            }
            let i = token as usize;
            let Some(c) = conns.get_mut(i).and_then(Option::as_mut) else {
                continue;
            };
            if let Flow::Close = serve(c, flags) {
                // Dropping the fd closes it, which also removes it from the epoll set.
                conns[i] = None;
                free.push(i);
            }
        }
    }
}

fn accept_all(
    ep: &OwnedFd,
    listener: &OwnedFd,
    conns: &mut Vec<Option<Conn>>,
    free: &mut Vec<usize>,
    buf_size: usize,
) {
    loop {
        let fd = match rnet::accept_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC) {
            Ok(fd) => fd,
            Err(Errno::AGAIN) => return,
            Err(Errno::INTR | Errno::CONNABORTED) => continue,
            Err(e) => {
                // E.g. EMFILE: report and keep serving; the next edge retries.
                eprintln!("epoll-echo: accept: {e}");
                return;
            }
        };
        let _ = rnet::sockopt::set_tcp_nodelay(&fd, true);
        let i = free.pop().unwrap_or_else(|| {
            conns.push(None);
            conns.len() - 1
        });
        let flags = epoll::EventFlags::IN
            | epoll::EventFlags::OUT
            | epoll::EventFlags::RDHUP
            | epoll::EventFlags::ET;
        if let Err(e) = epoll::add(ep, &fd, epoll::EventData::new_u64(i as u64), flags) {
            eprintln!("epoll-echo: epoll_ctl: {e}");
            free.push(i);
            continue;
        }
        conns[i] = Some(Conn {
            fd,
            buf: vec![0u8; buf_size].into_boxed_slice(),
            sent: 0,
            len: 0,
        });
    }
}

/// Handles one readiness edge: flush pending output, then read and echo until
/// the socket is drained or the send buffer is full.
fn serve(c: &mut Conn, flags: epoll::EventFlags) -> Flow {
    if flags.contains(epoll::EventFlags::ERR) {
        return Flow::Close;
    }
    // After a half-close or hang-up, read to EOF instead of trusting short reads.
    let hup = flags.intersects(epoll::EventFlags::RDHUP | epoll::EventFlags::HUP);
    loop {
        if c.sent < c.len {
            match flush(c) {
                Ok(true) => {}
                Ok(false) => return Flow::Open, // wait for EPOLLOUT
                Err(_) => return Flow::Close,
            }
        }
        match rustix::io::read(&c.fd, &mut c.buf[..]) {
            Ok(0) => return Flow::Close,
            Ok(n) => {
                c.sent = 0;
                c.len = n;
                match flush(c) {
                    Ok(true) => {}
                    Ok(false) => return Flow::Open,
                    Err(_) => return Flow::Close,
                }
                if n < c.buf.len() && !hup {
                    // Short read: drained; the next arrival is a new edge.
                    return Flow::Open;
                }
            }
            Err(Errno::AGAIN) => return Flow::Open,
            Err(Errno::INTR) => {}
            Err(_) => return Flow::Close,
        }
    }
}

/// Writes `buf[sent..len]`; `Ok(true)` when all of it went out, `Ok(false)`
/// when the socket's send buffer is full.
fn flush(c: &mut Conn) -> Result<bool, Errno> {
    while c.sent < c.len {
        let slices = [IoSlice::new(&c.buf[c.sent..c.len])];
        match rnet::sendmsg(
            &c.fd,
            &slices,
            &mut SendAncillaryBuffer::default(),
            SendFlags::NOSIGNAL,
        ) {
            Ok(k) => c.sent += k,
            Err(Errno::AGAIN) => return Ok(false),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}
