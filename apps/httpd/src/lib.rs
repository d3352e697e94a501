//! A small HTTP/1.1 responder, written once against `ebb::net` so it runs over every
//! backend — Linux sockets, ebb-net on TAP, ebb-net on virtio-net natively — unchanged.
//!
//! * `GET /bytes/N` answers N bytes of the pattern stream (`ebb_bytestream::pattern`: a 1 MiB
//!   pseudo-random block repeated) with `Content-Length: N`. The body is never copied:
//!   it goes out as `IOBuf` slices of the one static pattern block, offered with
//!   `try_send` as the send window allows and resumed on `send_window_increased`
//!   (`ebb_bytestream::send_pattern`), so a 100 MB answer holds at most one 256 KiB chunk beyond
//!   what the connection accepted.
//! * `GET /` answers a small HTML page.
//! * Keep-alive: HTTP/1.1 connections stay open (unless `Connection: close`), HTTP/1.0
//!   ones close unless they ask for keep-alive. Pipelined requests are answered in order;
//!   while a body is being sent the receive window closes once [`MAX_BUFFERED`] request
//!   bytes wait, so a client cannot make the server buffer without bound.
//! * A malformed request, a request head over [`MAX_HEAD`] bytes, a request with a body,
//!   or a bad `/bytes/N` gets `400 Bad Request` and the connection closes; other
//!   methods get `405`, other paths `404` (keep-alive).

#![no_std]

extern crate alloc;

use alloc::format;
use alloc::vec::Vec;
use ebb::net::{CloseReason, IOBuf, IOBufChain, TcpConnection, TcpHandler};
use ebb_bytestream::pattern::Pattern;
use ebb_bytestream::send_pattern;

/// Longest request head (request line and headers) accepted.
pub const MAX_HEAD: usize = 16 * 1024;
/// Request bytes buffered while a response is in progress before reading stops.
pub const MAX_BUFFERED: usize = 64 * 1024;
/// Largest `/bytes/N` served (1 TiB; only to refuse absurd numbers).
pub const MAX_BYTES: u64 = 1 << 40;

const INDEX: &str = "<!doctype html>\n<html><head><title>Ebbflow httpd</title></head>\n\
<body><h1>Ebbflow httpd</h1>\n<p>GET /bytes/N returns N bytes of the test pattern.</p>\n\
</body></html>\n";

/// What a complete request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// `GET /`.
    Index,
    /// `GET /bytes/N`.
    Bytes(u64),
    /// Another path.
    NotFound,
    /// Another method.
    MethodNotAllowed,
    /// Malformed, or something this server does not do.
    Bad,
}

/// A parsed request head: what it asks for and whether the connection stays open.
#[derive(Debug, PartialEq, Eq)]
pub struct Head {
    /// What to answer.
    pub request: Request,
    /// Keep the connection open after the answer.
    pub keep_alive: bool,
}

/// Parses one request head (without the blank line that ends it).
pub fn parse_head(head: &[u8]) -> Head {
    let bad = Head {
        request: Request::Bad,
        keep_alive: false,
    };
    let Ok(text) = core::str::from_utf8(head) else {
        return bad;
    };
    let mut lines = text.split("\r\n");
    let Some(request_line) = lines.next() else {
        return bad;
    };
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return bad;
    };
    let mut keep_alive = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => return bad,
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return bad;
    }
    if !target.starts_with('/') {
        return bad;
    }
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return bad;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("connection") {
            if value.eq_ignore_ascii_case("close") {
                keep_alive = false;
            } else if value.eq_ignore_ascii_case("keep-alive") {
                keep_alive = true;
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            if value != "0" {
                return bad; // no request bodies here
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return bad;
        }
    }
    let request = if method != "GET" {
        Request::MethodNotAllowed
    } else if target == "/" {
        Request::Index
    } else if let Some(n) = target.strip_prefix("/bytes/") {
        // Digits only: `u64::from_str` would also take a leading `+`.
        match n.parse::<u64>() {
            Ok(n_bytes) if n.bytes().all(|b| b.is_ascii_digit()) && n_bytes <= MAX_BYTES => {
                Request::Bytes(n_bytes)
            }
            _ => Request::Bad,
        }
    } else {
        Request::NotFound
    };
    if request == Request::Bad {
        keep_alive = false;
    }
    Head {
        request,
        keep_alive,
    }
}

/// The position of the blank line ending a request head, and the head's length with it.
fn find_head_end(buf: &[u8]) -> Option<(usize, usize)> {
    buf.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| (at, at + 4))
}

/// One connection's HTTP handler.
pub struct Http {
    pattern: Pattern,
    /// Received request bytes not yet answered.
    pending: Vec<u8>,
    /// The body in progress: next offset and end.
    body: Option<(u64, u64)>,
    /// Close once the current answer is sent.
    close_after: bool,
    /// We closed the receive window (too much pipelined input).
    reading_paused: bool,
    closed: bool,
}

impl Default for Http {
    fn default() -> Self {
        Self::new(Pattern::get())
    }
}

impl Http {
    /// A handler serving `pattern`.
    pub fn new(pattern: Pattern) -> Self {
        Self {
            pattern,
            pending: Vec::new(),
            body: None,
            close_after: false,
            reading_paused: false,
            closed: false,
        }
    }

    fn respond_small(conn: &dyn TcpConnection, status: &str, content_type: &str, body: &str) {
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let _ = conn.send(IOBufChain::from(IOBuf::from_vec(response.into_bytes())));
    }

    /// Sends body bytes as the connection takes them (`ebb_bytestream::send_pattern`: at most one
    /// chunk queued); true when the whole body was accepted.
    fn pump(&mut self, conn: &dyn TcpConnection) -> bool {
        let Some((mut offset, end)) = self.body else {
            return true;
        };
        let done = send_pattern(conn, &self.pattern, &mut offset, end);
        self.body = (!done).then_some((offset, end));
        done
    }

    /// Answers every complete request it can, in order.
    fn process(&mut self, conn: &dyn TcpConnection) {
        loop {
            if self.closed || !self.pump(conn) {
                return;
            }
            if self.close_after {
                self.closed = true;
                conn.close();
                return;
            }
            let Some((head_len, consumed)) = find_head_end(&self.pending) else {
                if self.pending.len() > MAX_HEAD {
                    Self::respond_small(conn, "400 Bad Request", "text/plain", "bad request\n");
                    self.close_after = true;
                    continue;
                }
                break;
            };
            let head = parse_head(&self.pending[..head_len]);
            self.pending.drain(..consumed);
            self.close_after = !head.keep_alive;
            match head.request {
                Request::Index => Self::respond_small(conn, "200 OK", "text/html", INDEX),
                Request::Bytes(n) => {
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {n}\r\n\r\n"
                    );
                    let _ = conn.send(IOBufChain::from(IOBuf::from_vec(response.into_bytes())));
                    self.body = Some((0, n));
                }
                Request::NotFound => {
                    Self::respond_small(conn, "404 Not Found", "text/plain", "not found\n")
                }
                Request::MethodNotAllowed => {
                    Self::respond_small(conn, "405 Method Not Allowed", "text/plain", "only GET\n")
                }
                Request::Bad => {
                    Self::respond_small(conn, "400 Bad Request", "text/plain", "bad request\n")
                }
            }
        }
        if self.reading_paused && self.pending.len() < MAX_BUFFERED {
            self.reading_paused = false;
            conn.set_receive_window_open(true);
        }
    }
}

impl TcpHandler for Http {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        if self.closed {
            return;
        }
        self.pending.extend_from_slice(data.as_slice());
        if self.body.is_some() && self.pending.len() >= MAX_BUFFERED && !self.reading_paused {
            self.reading_paused = true;
            conn.set_receive_window_open(false);
        }
        self.process(conn);
    }

    fn send_window_increased(&mut self, conn: &dyn TcpConnection) {
        self.process(conn);
    }

    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        // Answer what was asked, then close.
        self.close_after = true;
        self.process(conn);
    }

    fn closed(&mut self, _reason: CloseReason) {
        self.closed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(s: &str) -> Head {
        parse_head(s.as_bytes())
    }

    #[test]
    fn request_heads_parse() {
        assert_eq!(
            head("GET /bytes/100 HTTP/1.1\r\nHost: x"),
            Head {
                request: Request::Bytes(100),
                keep_alive: true
            }
        );
        assert_eq!(head("GET / HTTP/1.0").request, Request::Index);
        assert!(!head("GET / HTTP/1.0").keep_alive);
        assert!(head("GET / HTTP/1.0\r\nConnection: keep-alive").keep_alive);
        assert!(!head("GET / HTTP/1.1\r\nConnection: close").keep_alive);
        assert_eq!(head("GET /nope HTTP/1.1").request, Request::NotFound);
        assert_eq!(head("POST / HTTP/1.1").request, Request::MethodNotAllowed);
        for bad in [
            "GET /bytes/x HTTP/1.1",
            "GET /bytes/-1 HTTP/1.1",
            "GET /bytes/+5 HTTP/1.1",
            "GET / HTTP/2.0",
            "GET  / HTTP/1.1",
            "get / HTTP/1.1",
            "GET / HTTP/1.1\r\nbroken header",
            "GET / HTTP/1.1\r\nContent-Length: 5",
            "GET / HTTP/1.1\r\nTransfer-Encoding: chunked",
            "\u{1}",
        ] {
            let h = head(bad);
            assert_eq!(h.request, Request::Bad, "{bad:?}");
            assert!(!h.keep_alive);
        }
    }
}
