//! `uring-echo`: minimal single-threaded TCP echo server on io_uring.
//!
//! The io_uring side of the loop-backend comparison (`bench/loop-backend.sh`),
//! the counterpart of `epoll-echo`: a multishot `ACCEPT` on the listener (re-armed
//! if the kernel ends it), and per connection exactly one operation in flight:
//! a `RECV` into the connection's buffer; on its completion a `SEND` of what
//! arrived (re-submitted for the rest after a short send); on the send's
//! completion the `RECV` is re-armed. The loop is `submit_and_wait(1)`, then
//! drain the completion queue, pushing the follow-up SQEs, which the next
//! `submit_and_wait` submits (one `io_uring_enter` per loop iteration).
//! Accepted sockets are blocking (io_uring polls them internally) with
//! TCP_NODELAY.
//!
//! `--setup defer` builds the ring with `IORING_SETUP_SINGLE_ISSUER |
//! IORING_SETUP_DEFER_TASKRUN` (completion work runs only inside our
//! `io_uring_enter`, never as an interrupting task-work), the configuration
//! recommended for one-thread-per-ring servers; `--setup plain` uses none.
//!
//! Prints `uring-echo: listening on 127.0.0.1:PORT` once listening.

use std::io::{self, Write as _};
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use clap::{Parser, ValueEnum};
use io_uring::{IoUring, cqueue, opcode, squeue, types};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Setup {
    /// No setup flags.
    Plain,
    /// IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN.
    Defer,
}

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Single-threaded io_uring TCP echo server (benchmark peer of epoll-echo)"
)]
struct Args {
    /// TCP port on 127.0.0.1 (0 = pick a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Per-connection receive buffer in bytes.
    #[arg(long, default_value_t = 16 * 1024)]
    buf_size: usize,
    /// Ring setup flags.
    #[arg(long, value_enum, default_value_t = Setup::Plain)]
    setup: Setup,
    /// Submission queue entries (the completion queue gets twice as many).
    #[arg(long, default_value_t = 4096)]
    entries: u32,
}

/// `user_data` of the multishot accept; connections use `index << 1 | op`.
const ACCEPT: u64 = u64::MAX;
const OP_RECV: u64 = 0;
const OP_SEND: u64 = 1;

struct Conn {
    fd: OwnedFd,
    /// Heap buffer: its address stays fixed while the slab `Vec` grows, so an
    /// in-flight RECV/SEND pointing into it stays valid.
    buf: Box<[u8]>,
    /// `buf[sent..len]` is being / still has to be sent.
    sent: usize,
    len: usize,
}

fn main() -> io::Result<()> {
    let args = Args::parse();
    let _ = ebb_bench::sys::raise_fd_limit(65_536);
    let listener = TcpListener::bind(("127.0.0.1", args.port))?;
    let addr = listener.local_addr()?;

    let mut builder = IoUring::<squeue::Entry, cqueue::Entry>::builder();
    if args.setup == Setup::Defer {
        builder.setup_single_issuer().setup_defer_taskrun();
    }
    let mut ring = builder.build(args.entries)?;

    let accept = opcode::AcceptMulti::new(types::Fd(listener.as_raw_fd()))
        .flags(libc::SOCK_CLOEXEC)
        .build()
        .user_data(ACCEPT);
    // SAFETY: multishot accept references no memory; `listener` outlives the ring's use.
    unsafe { ring.submission().push(&accept) }.map_err(io::Error::other)?;
    {
        let mut out = io::stdout().lock();
        writeln!(out, "uring-echo: listening on {addr}")?;
        out.flush()?;
    }

    let mut conns: Vec<Option<Conn>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let (submitter, mut sq, mut cq) = ring.split();
    loop {
        sq.sync();
        match submitter.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {} // CQ overflow: drain first
            Err(e) => return Err(e),
        }
        cq.sync();
        for cqe in &mut cq {
            let (ud, res, flags) = (cqe.user_data(), cqe.result(), cqe.flags());
            if ud == ACCEPT {
                if res >= 0 {
                    // SAFETY: a non-negative accept result is a new descriptor we now own.
                    let fd = unsafe { OwnedFd::from_raw_fd(res) };
                    let _ = rustix::net::sockopt::set_tcp_nodelay(&fd, true);
                    let i = free.pop().unwrap_or_else(|| {
                        conns.push(None);
                        conns.len() - 1
                    });
                    let c = conns[i].insert(Conn {
                        fd,
                        buf: vec![0u8; args.buf_size].into_boxed_slice(),
                        sent: 0,
                        len: 0,
                    });
                    push(&submitter, &mut sq, &recv_sqe(c, i))?;
                } else {
                    eprintln!("uring-echo: accept: {}", io::Error::from_raw_os_error(-res));
                }
                if !cqueue::more(flags) {
                    push(&submitter, &mut sq, &accept)?;
                }
                continue;
            }
            let i = (ud >> 1) as usize;
            let Some(c) = conns[i].as_mut() else {
                continue;
            };
            let next = if res <= 0 {
                // EOF or error (the only op of this connection just ended): close.
                None
            } else if ud & 1 == OP_RECV {
                c.sent = 0;
                c.len = res as usize;
                Some(send_sqe(c, i))
            } else {
                c.sent += res as usize;
                Some(if c.sent < c.len {
                    send_sqe(c, i)
                } else {
                    recv_sqe(c, i)
                })
            };
            match next {
                Some(sqe) => push(&submitter, &mut sq, &sqe)?,
                None => {
                    conns[i] = None; // closes the fd
                    free.push(i);
                }
            }
        }
    }
}

fn recv_sqe(c: &mut Conn, i: usize) -> squeue::Entry {
    opcode::Recv::new(
        types::Fd(c.fd.as_raw_fd()),
        c.buf.as_mut_ptr(),
        c.buf.len() as u32,
    )
    .build()
    .user_data((i as u64) << 1 | OP_RECV)
}

fn send_sqe(c: &Conn, i: usize) -> squeue::Entry {
    let rest = &c.buf[c.sent..c.len];
    opcode::Send::new(
        types::Fd(c.fd.as_raw_fd()),
        rest.as_ptr(),
        rest.len() as u32,
    )
    .flags(libc::MSG_NOSIGNAL)
    .build()
    .user_data((i as u64) << 1 | OP_SEND)
}

/// Queues `sqe`, submitting first if the submission queue is full.
fn push(
    submitter: &io_uring::Submitter<'_>,
    sq: &mut io_uring::SubmissionQueue<'_>,
    sqe: &squeue::Entry,
) -> io::Result<()> {
    loop {
        // SAFETY: every SQE built here points into a connection's boxed buffer
        // (or at no memory, for accept). A connection is freed only when the
        // completion of its single in-flight operation has been reaped, so the
        // buffer and fd outlive the operation.
        if unsafe { sq.push(sqe) }.is_ok() {
            return Ok(());
        }
        sq.sync();
        submitter.submit()?;
        sq.sync();
    }
}
