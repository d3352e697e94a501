//! Integration tests for `ebb_bench::echo_check` against the real `tokio-echo`
//! binary and against deliberately broken echo servers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use ebb_bench::echo_check::{EchoCheckError, Phase, check_echo, size_for};
use ebb_bench::server::ServerProcess;

const MIB: usize = 1024 * 1024;

fn start_tokio_echo(workers: usize) -> ServerProcess {
    ServerProcess::spawn(
        env!("CARGO_BIN_EXE_tokio-echo"),
        &["--port", "0", "--workers", &workers.to_string()],
        "tokio-echo: listening on ",
    )
}

#[test]
fn tokio_echo_passes_1000_concurrent_connections_with_8mib_payloads() {
    let server = start_tokio_echo(2);
    // 250 sizes cycled over 1,000 connections: 4 connections each of 8 MiB,
    // 1 MiB and 256 KiB+3, the rest small (0 = connect + EOF only).
    let mut sizes: Vec<usize> = (0..250).map(|i| (i * 37) % 4000 + 1).collect();
    sizes[0] = 8 * MIB;
    sizes[1] = MIB;
    sizes[2] = 256 * 1024 + 3;
    sizes[3] = 65_536;
    sizes[4] = 0;
    let conns = 1000;
    let expected_bytes: u64 = (0..conns).map(|i| size_for(i, &sizes) as u64).sum();

    let t0 = Instant::now();
    let report = check_echo(server.addr, conns, &sizes, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("check_echo failed: {e}"));
    eprintln!("{report:?} in {:?}", t0.elapsed());
    assert_eq!(report.connections_ok, conns);
    assert_eq!(report.bytes_echoed, expected_bytes);
    assert_eq!(report.peak_open, conns, "all connections open at once");
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Flip the lowest bit of the byte at this offset.
    FlipBit(u64),
    /// Never echo the byte at this offset.
    DropByte(u64),
    /// Close the connection once this many bytes were echoed.
    CloseAfter(u64),
    /// Echo one extra byte after the first chunk.
    ExtraByte,
    /// Echo correctly but keep the socket open after the client's EOF.
    NeverClose,
}

/// An echo server (thread per connection) that applies `fault` to the
/// `victim`-th accepted connection (0-based) and echoes the others correctly.
fn broken_server(fault: Fault, victim: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(conn) = conn else { continue };
            let fault = (n == victim).then_some(fault);
            thread::spawn(move || serve_one(conn, fault));
        }
    });
    addr
}

fn serve_one(mut s: TcpStream, fault: Option<Fault>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut offset = 0u64; // bytes received so far
    let mut extra_sent = false;
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let range = offset..offset + n as u64;
        let mut out = buf[..n].to_vec();
        match fault {
            Some(Fault::FlipBit(at)) if range.contains(&at) => {
                out[(at - offset) as usize] ^= 1;
            }
            Some(Fault::DropByte(at)) if range.contains(&at) => {
                out.remove((at - offset) as usize);
            }
            Some(Fault::CloseAfter(limit)) if range.end > limit => {
                out.truncate((limit - offset) as usize);
                let _ = s.write_all(&out);
                return; // drop = close
            }
            Some(Fault::ExtraByte) if !extra_sent => {
                out.push(0xAA);
                extra_sent = true;
            }
            _ => {}
        }
        offset = range.end;
        if s.write_all(&out).is_err() {
            return;
        }
    }
    if let Some(Fault::NeverClose) = fault {
        thread::sleep(Duration::from_secs(10));
    }
}

#[test]
fn flipped_bit_deep_in_an_8mib_payload_is_reported_with_its_offset() {
    let addr = broken_server(Fault::FlipBit(5_000_001), 7);
    let sizes = [8 * MIB];
    let err = check_echo(addr, 12, &sizes, Duration::from_secs(60)).unwrap_err();
    match err {
        EchoCheckError::Mismatch {
            offset,
            size,
            expected,
            actual,
            ..
        } => {
            assert_eq!(offset, 5_000_001);
            assert_eq!(size, 8 * MIB as u64);
            assert_eq!(expected ^ actual, 1);
        }
        other => panic!("expected Mismatch, got {other}"),
    }
}

#[test]
fn flipped_bit_on_one_small_connection_among_many_fails() {
    let addr = broken_server(Fault::FlipBit(0), 150);
    let err = check_echo(addr, 300, &[100, 1, 2000], Duration::from_secs(30)).unwrap_err();
    assert!(
        matches!(err, EchoCheckError::Mismatch { offset: 0, .. }),
        "{err}"
    );
    assert!(err.conn().unwrap() < 300);
}

#[test]
fn dropped_byte_fails() {
    let addr = broken_server(Fault::DropByte(1000), 0);
    let err = check_echo(addr, 1, &[10_000], Duration::from_secs(10)).unwrap_err();
    // The echo is shifted from offset 1000 on (or, by chance, later).
    match err {
        EchoCheckError::Mismatch { conn, offset, .. } => {
            assert_eq!(conn, 0);
            assert!(offset >= 1000, "{offset}");
        }
        other => panic!("expected Mismatch, got {other}"),
    }
}

#[test]
fn early_close_is_premature_eof() {
    let addr = broken_server(Fault::CloseAfter(300_000), 0);
    let err = check_echo(addr, 1, &[MIB], Duration::from_secs(10)).unwrap_err();
    // The client may see the FIN (PrematureEof) or, if the kernel resets the
    // connection because unread data was discarded, a read/write error.
    match err {
        EchoCheckError::PrematureEof {
            conn,
            received,
            size,
        } => {
            assert_eq!((conn, received, size), (0, 300_000, MIB as u64));
        }
        EchoCheckError::Io { conn: 0, .. } => {}
        other => panic!("expected PrematureEof, got {other}"),
    }
}

#[test]
fn extra_data_fails() {
    let addr = broken_server(Fault::ExtraByte, 0);
    let err = check_echo(addr, 1, &[100], Duration::from_secs(10)).unwrap_err();
    assert!(
        matches!(
            err,
            EchoCheckError::ExtraData {
                conn: 0,
                extra: 1,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn server_that_never_closes_times_out_instead_of_hanging() {
    let addr = broken_server(Fault::NeverClose, 2);
    let t0 = Instant::now();
    let err = check_echo(addr, 5, &[1000], Duration::from_millis(1500)).unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(5));
    match err {
        EchoCheckError::Timeout {
            pending,
            phase,
            written,
            received,
            ..
        } => {
            assert_eq!(pending, 1);
            assert_eq!(phase, Phase::AwaitEof);
            assert_eq!((written, received), (1000, 1000));
        }
        other => panic!("expected Timeout, got {other}"),
    }
}
