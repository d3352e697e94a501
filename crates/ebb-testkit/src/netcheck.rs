//! Talking to a network service under test from the host: a free port to forward, and a
//! byte-for-byte echo check.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// A free TCP port on 127.0.0.1 (bound and released: the caller's server binds it next).
///
/// # Panics
///
/// If no port can be bound (a test helper).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// `len` pseudo-random bytes (xorshift from `seed`): the same seed, the same bytes.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Sends `len` pseudo-random bytes on a fresh connection to `addr` and checks that the
/// same bytes come back; every step bounded by `timeout`. The bytes are written from
/// another thread, since the echo comes back while they are still being sent and no
/// buffer on the way holds them all.
pub fn echo(addr: SocketAddr, len: usize, seed: u64, timeout: Duration) -> Result<(), String> {
    let timeout = timeout.max(Duration::from_millis(100));
    let mut stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    let data = random_bytes(len, seed);
    let writer = {
        let mut s = stream.try_clone().map_err(|e| e.to_string())?;
        let data = data.clone();
        std::thread::spawn(move || s.write_all(&data))
    };
    let mut got = vec![0u8; len];
    let read = stream.read_exact(&mut got);
    // Unblocks the writer if the read failed.
    let _ = stream.shutdown(Shutdown::Both);
    let written = writer.join().map_err(|_| "writer panicked".to_string())?;
    read.map_err(|e| format!("reading the echo (a stall?): {e}"))?;
    written.map_err(|e| format!("write: {e}"))?;
    if got != data {
        let at = got.iter().zip(&data).position(|(a, b)| a != b);
        return Err(format!("echo differs from byte {at:?}"));
    }
    Ok(())
}
