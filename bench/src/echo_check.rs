//! Correctness checker for TCP echo servers.
//!
//! [`check_echo`] opens `conns` connections at once: all connects are issued
//! first and no data moves until every one of them is established, so all
//! `conns` are open at the same time. It then sends each a unique deterministic pseudo-random
//! payload, reads the echo back while still writing (payloads may be far larger
//! than the socket buffers), verifies every byte, half-closes the write side and
//! expects the server to close in turn (EOF). Everything runs on the calling
//! thread with one `mio` poller, under an overall deadline: it never hangs.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

/// Size of the per-call scratch buffers (write staging, read, expected bytes).
const CHUNK: usize = 64 * 1024;

/// What a successful check measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EchoReport {
    /// Connections that echoed their whole payload correctly and then closed.
    pub connections_ok: usize,
    /// Payload bytes echoed back and verified (sum over connections).
    pub bytes_echoed: u64,
    /// Most connections established at the same time (client view).
    pub peak_open: usize,
    /// Wall time of the whole check.
    pub elapsed: Duration,
}

/// The phase a connection was in (used in error reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// TCP handshake not yet confirmed.
    Connecting,
    /// Writing the payload and/or reading the echo.
    Transfer,
    /// Payload fully echoed, write side shut down, waiting for the server's EOF.
    AwaitEof,
    /// Finished successfully.
    Done,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Connecting => "connecting",
            Phase::Transfer => "transferring",
            Phase::AwaitEof => "awaiting EOF",
            Phase::Done => "done",
        })
    }
}

/// Why a check failed. Every per-connection variant names the connection index
/// (`0..conns`, the index that also seeds its payload).
#[derive(Debug, thiserror::Error)]
pub enum EchoCheckError {
    /// The arguments cannot describe a check (e.g. `sizes` empty).
    #[error("invalid arguments: {0}")]
    InvalidArgs(&'static str),
    /// Creating the poller failed.
    #[error("poller setup failed: {0}")]
    Setup(#[source] io::Error),
    /// A socket operation failed (connect refused, reset, ...).
    #[error(
        "connection {conn}: {op} failed after sending {written} and receiving {received} bytes: {source}"
    )]
    Io {
        conn: usize,
        op: &'static str,
        written: u64,
        received: u64,
        #[source]
        source: io::Error,
    },
    /// The echoed data differs from what was sent; first differing byte.
    #[error(
        "connection {conn}: echoed byte at offset {offset} (of {size}) is {actual:#04x}, expected {expected:#04x}"
    )]
    Mismatch {
        conn: usize,
        offset: u64,
        size: u64,
        expected: u8,
        actual: u8,
    },
    /// The server closed before echoing the whole payload.
    #[error("connection {conn}: server closed (EOF) after echoing only {received} of {size} bytes")]
    PrematureEof {
        conn: usize,
        received: u64,
        size: u64,
    },
    /// The server sent more bytes than were sent to it.
    #[error("connection {conn}: server sent {extra} byte(s) beyond the {size}-byte payload")]
    ExtraData { conn: usize, size: u64, extra: u64 },
    /// The overall deadline passed; describes the first unfinished connection.
    #[error(
        "timed out after {elapsed:?}: {pending} of {total} connections unfinished; first is connection {conn} ({phase}, sent {written}/{size}, received {received}/{size})"
    )]
    Timeout {
        elapsed: Duration,
        pending: usize,
        total: usize,
        conn: usize,
        phase: Phase,
        written: u64,
        received: u64,
        size: u64,
    },
}

impl EchoCheckError {
    /// The connection index the error is about, if any.
    pub fn conn(&self) -> Option<usize> {
        match self {
            EchoCheckError::InvalidArgs(_) | EchoCheckError::Setup(_) => None,
            EchoCheckError::Io { conn, .. }
            | EchoCheckError::Mismatch { conn, .. }
            | EchoCheckError::PrematureEof { conn, .. }
            | EchoCheckError::ExtraData { conn, .. }
            | EchoCheckError::Timeout { conn, .. } => Some(*conn),
        }
    }
}

/// splitmix64 finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// Payload seed of connection `conn`.
fn seed_for(conn: usize) -> u64 {
    mix((conn as u64) ^ 0xEBB_F10E_C40C_0FFE)
}

/// Fills `buf` with the payload bytes of connection `conn` starting at byte
/// `offset`. The pattern is counter-based (splitmix64 of the word index), so
/// any range can be produced without keeping the payload in memory.
pub fn fill_pattern(conn: usize, offset: u64, buf: &mut [u8]) {
    let seed = seed_for(conn);
    let mut pos = 0;
    let mut off = offset;
    while pos < buf.len() {
        let word = mix(seed.wrapping_add((off / 8).wrapping_add(1).wrapping_mul(GOLDEN)));
        let bytes = word.to_le_bytes();
        let start = (off % 8) as usize;
        let n = (8 - start).min(buf.len() - pos);
        buf[pos..pos + n].copy_from_slice(&bytes[start..start + n]);
        pos += n;
        off += n as u64;
    }
}

/// The payload size used for connection `conn` (`sizes` cycles over connections).
pub fn size_for(conn: usize, sizes: &[usize]) -> usize {
    sizes[conn % sizes.len()]
}

struct Conn {
    stream: Option<TcpStream>,
    size: u64,
    written: u64,
    received: u64,
    phase: Phase,
}

struct Scratch {
    out: Vec<u8>,
    inp: Vec<u8>,
    expect: Vec<u8>,
}

/// Checks the echo server at `addr`; see the [module docs](self).
///
/// `sizes` cycles over the connections (connection `i` sends
/// `sizes[i % sizes.len()]` bytes; 0 is allowed and checks connect + EOF only).
/// Fails fast on the first problem, reporting the connection and what went
/// wrong. The soft open-file limit is raised if `conns` needs it.
pub fn check_echo(
    addr: SocketAddr,
    conns: usize,
    sizes: &[usize],
    timeout: Duration,
) -> Result<EchoReport, EchoCheckError> {
    if conns > 0 && sizes.is_empty() {
        return Err(EchoCheckError::InvalidArgs("`sizes` is empty"));
    }
    let start = Instant::now();
    let deadline = start + timeout;
    // Best effort: an insufficient limit shows up as a connect error below.
    let _ = crate::sys::raise_fd_limit(conns as u64 + 256);

    let mut poll = Poll::new().map_err(EchoCheckError::Setup)?;
    let mut table: Vec<Conn> = Vec::with_capacity(conns);
    for i in 0..conns {
        let size = size_for(i, sizes) as u64;
        let io_err = |op, source| EchoCheckError::Io {
            conn: i,
            op,
            written: 0,
            received: 0,
            source,
        };
        let mut stream = TcpStream::connect(addr).map_err(|e| io_err("connect", e))?;
        poll.registry()
            .register(
                &mut stream,
                Token(i),
                Interest::READABLE | Interest::WRITABLE,
            )
            .map_err(|e| io_err("register", e))?;
        table.push(Conn {
            stream: Some(stream),
            size,
            written: 0,
            received: 0,
            phase: Phase::Connecting,
        });
    }

    let mut scratch = Scratch {
        out: vec![0; CHUNK],
        inp: vec![0; CHUNK],
        expect: vec![0; CHUNK],
    };
    let mut events = Events::with_capacity(1024);
    let mut pending = conns;
    let mut open = 0usize;
    let mut peak_open = 0usize;
    let mut bytes_echoed = 0u64;
    let mut started = false;
    let mut ready: Vec<usize> = Vec::with_capacity(1024);

    while pending > 0 {
        let now = Instant::now();
        if now >= deadline {
            return Err(timeout_error(&table, start, pending));
        }
        if let Err(e) = poll.poll(&mut events, Some(deadline - now)) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(EchoCheckError::Setup(e));
        }
        ready.clear();
        for ev in events.iter() {
            let i = ev.token().0;
            let c = &mut table[i];
            if c.phase == Phase::Connecting {
                if !connect_finished(i, c)? {
                    continue;
                }
                c.phase = Phase::Transfer;
                open += 1;
                peak_open = peak_open.max(open);
                if open == conns {
                    // Barrier: every connection is established at the same
                    // time. Only now start them all (nothing was sent before).
                    started = true;
                    ready.extend(0..conns);
                    continue;
                }
            }
            if started {
                ready.push(i);
            }
        }
        for &i in &ready {
            let c = &mut table[i];
            if c.phase == Phase::Done {
                continue;
            }
            drive(i, c, &mut scratch)?;
            if c.phase == Phase::Done {
                if let Some(mut s) = c.stream.take() {
                    let _ = poll.registry().deregister(&mut s);
                }
                bytes_echoed += c.size;
                open -= 1;
                pending -= 1;
            }
        }
    }

    Ok(EchoReport {
        connections_ok: conns,
        bytes_echoed,
        peak_open,
        elapsed: start.elapsed(),
    })
}

fn io_error(i: usize, c: &Conn, op: &'static str, source: io::Error) -> EchoCheckError {
    EchoCheckError::Io {
        conn: i,
        op,
        written: c.written,
        received: c.received,
        source,
    }
}

/// Whether the nonblocking connect of `c` has completed (error if it failed).
fn connect_finished(i: usize, c: &mut Conn) -> Result<bool, EchoCheckError> {
    let Some(stream) = c.stream.as_ref() else {
        return Ok(false);
    };
    match stream.take_error() {
        Ok(Some(e)) | Err(e) => return Err(io_error(i, c, "connect", e)),
        Ok(None) => {}
    }
    match stream.peer_addr() {
        Ok(_) => {
            let _ = stream.set_nodelay(true);
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
        Err(e) => Err(io_error(i, c, "connect", e)),
    }
}

/// Moves data on connection `i` until both directions would block (the poller
/// is edge-triggered) or the connection is done.
fn drive(i: usize, c: &mut Conn, s: &mut Scratch) -> Result<(), EchoCheckError> {
    loop {
        let mut progress = false;
        let Some(stream) = c.stream.as_mut() else {
            return Ok(());
        };

        // Write as much of the remaining payload as the socket takes.
        if c.phase == Phase::Transfer && c.written < c.size {
            let n = ((c.size - c.written) as usize).min(CHUNK);
            fill_pattern(i, c.written, &mut s.out[..n]);
            match stream.write(&s.out[..n]) {
                Ok(0) => {
                    let e = io::Error::new(io::ErrorKind::WriteZero, "write returned 0");
                    return Err(io_error(i, c, "write", e));
                }
                Ok(k) => {
                    c.written += k as u64;
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => progress = true,
                Err(e) => return Err(io_error(i, c, "write", e)),
            }
        }

        // Read whatever has been echoed and verify it.
        match stream.read(&mut s.inp) {
            Ok(0) => {
                if c.phase == Phase::AwaitEof {
                    c.phase = Phase::Done;
                    return Ok(());
                }
                return Err(EchoCheckError::PrematureEof {
                    conn: i,
                    received: c.received,
                    size: c.size,
                });
            }
            Ok(k) => {
                let remaining = c.size - c.received;
                if k as u64 > remaining {
                    return Err(EchoCheckError::ExtraData {
                        conn: i,
                        size: c.size,
                        extra: k as u64 - remaining,
                    });
                }
                let got = &s.inp[..k];
                let expect = &mut s.expect[..k];
                fill_pattern(i, c.received, expect);
                if got != &expect[..] {
                    let at = got.iter().zip(expect.iter()).position(|(a, b)| a != b);
                    let at = at.unwrap_or(0);
                    return Err(EchoCheckError::Mismatch {
                        conn: i,
                        offset: c.received + at as u64,
                        size: c.size,
                        expected: expect[at],
                        actual: got[at],
                    });
                }
                c.received += k as u64;
                progress = true;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => progress = true,
            Err(e) => return Err(io_error(i, c, "read", e)),
        }

        // Whole payload echoed: half-close and wait for the server's EOF.
        if c.phase == Phase::Transfer && c.written == c.size && c.received == c.size {
            if let Err(e) = stream.shutdown(Shutdown::Write) {
                return Err(io_error(i, c, "shutdown(write)", e));
            }
            c.phase = Phase::AwaitEof;
            progress = true;
        }

        if !progress {
            return Ok(());
        }
    }
}

fn timeout_error(table: &[Conn], start: Instant, pending: usize) -> EchoCheckError {
    // Prefer a connection that never got established (it holds up the rest).
    let (conn, c) = table
        .iter()
        .enumerate()
        .find(|(_, c)| c.phase == Phase::Connecting)
        .or_else(|| {
            table
                .iter()
                .enumerate()
                .find(|(_, c)| c.phase != Phase::Done)
        })
        .expect("pending > 0 implies an unfinished connection");
    EchoCheckError::Timeout {
        elapsed: start.elapsed(),
        pending,
        total: table.len(),
        conn,
        phase: c.phase,
        written: c.written,
        received: c.received,
        size: c.size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_offset_consistent_and_unique() {
        let mut whole = vec![0u8; 1000];
        fill_pattern(7, 0, &mut whole);
        for (off, len) in [(0usize, 1usize), (3, 17), (8, 8), (13, 500), (999, 1)] {
            let mut part = vec![0u8; len];
            fill_pattern(7, off as u64, &mut part);
            assert_eq!(part, whole[off..off + len]);
        }
        let mut other = vec![0u8; 1000];
        fill_pattern(8, 0, &mut other);
        assert_ne!(whole, other);
        assert!(whole.iter().any(|&b| b != whole[0]));
    }

    #[test]
    fn empty_sizes_rejected() {
        let addr = "127.0.0.1:9".parse().unwrap();
        let err = check_echo(addr, 1, &[], Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, EchoCheckError::InvalidArgs(_)));
    }

    #[test]
    fn refused_connection_names_conn() {
        // Bind then drop to get a (very likely) closed port.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let err = check_echo(addr, 3, &[10], Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(err, EchoCheckError::Io { op: "connect", .. }),
            "{err}"
        );
        assert!(err.conn().is_some());
    }
}
