//! An HTTP server's timeouts as a client sees them, over real TCP: the same checks for
//! httpd hosted (its own tests) and native (`ebb-cli`'s), so the two runtimes are held to
//! one behaviour. The server must run with an idle and a head timeout well under
//! `bound` (the tests use fractions of a second).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

/// Checks, in order: a kept-alive connection answered once and then left idle is closed
/// within `bound`; a request head that trickles in a byte every 50 ms is answered with
/// 408 and closed within `bound`, long before its last byte; the server still answers a
/// fresh connection afterwards. The first failure, in words.
pub fn check(addr: SocketAddr, bound: Duration) -> Result<(), String> {
    let connect = || TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"));
    // Kept alive after an answer, then idle: closed.
    let mut idle = connect()?;
    idle.write_all(GET)
        .map_err(|e| format!("sending a request: {e}"))?;
    let (got, took) = read_to_close(&mut idle, bound)?;
    let text = String::from_utf8_lossy(&got);
    if !text.starts_with("HTTP/1.1 200 OK") {
        return Err(format!("the request was not answered with 200: {text:?}"));
    }
    if took >= bound {
        return Err(format!("an idle connection was closed after {took:?}"));
    }
    // A head that trickles in: 408, closed, long before its end (60 bytes, 3 s).
    let slow = connect()?;
    let mut writer_side = slow
        .try_clone()
        .map_err(|e| format!("a second handle: {e}"))?;
    let writer = std::thread::spawn(move || {
        let head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        for byte in head {
            if writer_side.write_all(&[*byte]).is_err() {
                return; // closed under it
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let mut slow = slow;
    let (got, took) = read_to_close(&mut slow, bound)?;
    let _ = writer.join();
    let text = String::from_utf8_lossy(&got);
    if !text.starts_with("HTTP/1.1 408 Request Timeout") {
        return Err(format!("a slow head was not answered with 408: {text:?}"));
    }
    if took >= bound {
        return Err(format!(
            "a slow head's connection was closed after {took:?}"
        ));
    }
    // Still serving.
    let mut fresh = connect()?;
    fresh
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("sending a request: {e}"))?;
    let (got, _) = read_to_close(&mut fresh, bound)?;
    if !String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200 OK") {
        return Err("the server stopped answering after the timeouts".into());
    }
    Ok(())
}

/// Reads until the server closes (a reset counts as closed); what it sent and how long
/// that took. An error when it has not closed within twice `bound`.
fn read_to_close(stream: &mut TcpStream, bound: Duration) -> Result<(Vec<u8>, Duration), String> {
    let started = Instant::now();
    stream
        .set_read_timeout(Some(2 * bound))
        .map_err(|e| format!("a read timeout: {e}"))?;
    let mut got = Vec::new();
    match stream.read_to_end(&mut got) {
        Ok(_) => {}
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => {
            return Err(format!(
                "the server did not close within {:?} ({e}); it sent {:?}",
                2 * bound,
                String::from_utf8_lossy(&got)
            ));
        }
    }
    Ok((got, started.elapsed()))
}
