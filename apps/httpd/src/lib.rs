//! A small HTTP/1.1 responder, written once against `ebb::net` so it runs over every
//! backend — Linux sockets, ebb-net on TAP, ebb-net on virtio-net natively — unchanged.
//!
//! * `GET /bytes/N` answers N bytes of the pattern stream (`ebb_bytestream::pattern`: a 1 MiB
//!   pseudo-random block repeated) with `Content-Length: N`. The body is never copied:
//!   it goes out as `IOBuf` slices of the one static pattern block, offered with
//!   `try_send` as the send window allows and resumed on `send_window_increased`
//!   (`ebb_bytestream::send_pattern`), so a 100 MB answer holds at most one 256 KiB chunk beyond
//!   what the connection accepted.
//! * `GET /` answers a small HTML page. `HEAD` answers what `GET` would, without the body.
//! * Keep-alive: HTTP/1.1 connections stay open (unless `Connection: close`), HTTP/1.0
//!   ones close unless they ask for keep-alive (and the answer then says
//!   `Connection: keep-alive`). Pipelined requests are answered in order.
//! * Bounded per connection whatever the client does: at most [`MAX_BUFFERED`] request
//!   bytes wait (then the receive window closes), and once answers queue past
//!   [`MAX_QUEUED_REPLY`] because the client does not read them, no further request is
//!   answered until the queue drains. The buffers are reserved fallibly: a request the
//!   node has no memory for gets `503` and the connection closes.
//! * Timeouts ([`Timeouts`], watched by [`watch`] beside the handler): a connection
//!   that makes no progress — no request bytes arrive, the client takes no answer bytes —
//!   for the idle timeout is closed (reset if it still holds unsent answers after another
//!   one), and a request head not complete within the head timeout of its first byte gets
//!   `408` and the connection closes, however slowly its bytes keep coming.
//! * Refusals (see [`Request`]): a malformed head gets `400`, a request body `413`, a
//!   request line over [`MAX_HEAD`] bytes `414`, a longer head `431`, a transfer coding
//!   or an unknown method `501`, another HTTP version `505`; each but the `501` for a
//!   method closes the connection (the bytes after it cannot be trusted). A known method
//!   other than `GET`/`HEAD` gets `405` with `Allow`, another path `404` (keep-alive).

#![no_std]

extern crate alloc;

use alloc::rc::Rc;
use alloc::vec::Vec;
use core::cell::Cell;
use core::time::Duration;
use ebb::Instant;
use ebb::net::{CloseReason, IOBuf, IOBufChain, TcpConnection, TcpHandler};
use ebb_bytestream::pattern::Pattern;
use ebb_bytestream::send_pattern;

/// Longest request head (request line and headers, without the blank line) accepted.
pub const MAX_HEAD: usize = 16 * 1024;
/// Request bytes buffered (pipelined behind the answer in progress) before reading stops.
pub const MAX_BUFFERED: usize = 64 * 1024;
/// Answer bytes queued on a connection (after a send the window refused) beyond which no
/// further request is answered until the queue drains.
pub const MAX_QUEUED_REPLY: usize = 64 * 1024;
/// Largest `/bytes/N` served (1 TiB; only to refuse absurd numbers).
pub const MAX_BYTES: u64 = 1 << 40;

const INDEX: &str = "<!doctype html>\n<html><head><title>Ebbflow httpd</title></head>\n\
<body><h1>Ebbflow httpd</h1>\n<p>GET /bytes/N returns N bytes of the test pattern.</p>\n\
</body></html>\n";

/// The answer when the node has no memory for a request: built without allocating.
const OUT_OF_MEMORY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\n\
Content-Length: 14\r\nConnection: close\r\n\r\nout of memory\n";

/// The answer to a request head that took too long: built without allocating.
const HEAD_TIMED_OUT: &[u8] = b"HTTP/1.1 408 Request Timeout\r\nContent-Type: text/plain\r\n\
Content-Length: 16\r\nConnection: close\r\n\r\nrequest timeout\n";

/// The methods RFC 9110 defines that are not served here (`405`, not `501`).
const KNOWN_METHODS: [&[u8]; 6] = [b"POST", b"PUT", b"DELETE", b"CONNECT", b"OPTIONS", b"TRACE"];

/// What a complete request head asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `GET /`.
    Index,
    /// `GET /bytes/N`.
    Bytes(u64),
    /// Another path: `404`.
    NotFound,
    /// A method RFC 9110 defines but this server does not serve (`POST`, `PUT`, ...):
    /// `405` with `Allow: GET, HEAD`.
    MethodNotAllowed,
    /// An unknown method, or a `Transfer-Encoding` (no request bodies here): `501`.
    NotImplemented,
    /// A request with a body (`Content-Length` above 0): `413`.
    BodyTooLarge,
    /// A request line longer than [`MAX_HEAD`]: `414`.
    UriTooLong,
    /// A head longer than [`MAX_HEAD`]: `431`.
    HeadTooLarge,
    /// An HTTP version other than 1.0 and 1.1: `505`.
    VersionNotSupported,
    /// Malformed (request line, header syntax, bare CR or LF, control bytes, no or two
    /// `Host` in HTTP/1.1, both `Content-Length` and `Transfer-Encoding`, an unreadable
    /// `Content-Length`, a bad `/bytes/N`): `400`.
    Bad,
}

/// A parsed request head: what it asks for and whether the connection stays open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// What to answer.
    pub request: Request,
    /// Keep the connection open after the answer (never after a refusal that leaves
    /// bytes we cannot frame).
    pub keep_alive: bool,
    /// A `HEAD` request: the answer's header only.
    pub head_only: bool,
    /// An HTTP/1.0 request (a kept-alive answer then says `Connection: keep-alive`).
    pub http10: bool,
}

impl Head {
    fn refused(request: Request) -> Self {
        Self {
            request,
            keep_alive: false,
            head_only: false,
            http10: false,
        }
    }
}

/// RFC 9110 `tchar`: the bytes of a method or a header name.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A header value's bytes: visible ASCII, space, tab and obs-text (no CR, LF, NUL or
/// other control).
fn is_value_byte(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Splits at the first CRLF (the rest after it), or the whole input.
fn split_line(s: &[u8]) -> (&[u8], Option<&[u8]>) {
    match s.windows(2).position(|w| w == b"\r\n") {
        Some(at) => (&s[..at], Some(&s[at + 2..])),
        None => (s, None),
    }
}

/// Parses one request head (without the blank line that ends it).
pub fn parse_head(head: &[u8]) -> Head {
    let bad = Head::refused(Request::Bad);
    let (request_line, mut rest) = split_line(head);
    if request_line.len() > MAX_HEAD {
        return Head::refused(Request::UriTooLong);
    }
    if head.len() > MAX_HEAD {
        return Head::refused(Request::HeadTooLarge);
    }
    // method SP request-target SP HTTP-version, each separated by exactly one space.
    let mut parts = request_line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return bad;
    };
    if method.is_empty() || !method.iter().all(|&b| is_tchar(b)) {
        return bad;
    }
    // Origin form: a path of visible ASCII.
    if target.first() != Some(&b'/') || !target.iter().all(|b| b.is_ascii_graphic()) {
        return bad;
    }
    let http10 = match version {
        b"HTTP/1.1" => false,
        b"HTTP/1.0" => true,
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            return Head::refused(Request::VersionNotSupported);
        }
        _ => return bad,
    };
    let mut keep_alive = !http10;
    let mut close = false;
    let mut hosts = 0usize;
    let mut content_length: Option<&[u8]> = None;
    let mut transfer_encoding = false;
    while let Some(remaining) = rest {
        let (line, next) = split_line(remaining);
        rest = next;
        // No whitespace before the colon, no obs-fold (a line starting with space or
        // tab): a name must be a token (RFC 9112 5.1, 5.2).
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return bad;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
            return bad;
        }
        // A bare CR or LF, NUL or another control byte (RFC 9110 5.5).
        if !value.iter().all(|&b| is_value_byte(b)) {
            return bad;
        }
        let value = trim_ows(value);
        if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
        } else if name.eq_ignore_ascii_case(b"connection") {
            for option in value.split(|&b| b == b',').map(trim_ows) {
                if option.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if option.eq_ignore_ascii_case(b"keep-alive") {
                    keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
                return bad;
            }
            if content_length.is_some_and(|first| first != value) {
                return bad; // two different lengths
            }
            content_length = Some(value);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer_encoding = true;
        }
    }
    // HTTP/1.1 needs exactly one Host; two are refused in either version (RFC 9112 3.2).
    if hosts > 1 || (!http10 && hosts == 0) {
        return bad;
    }
    if transfer_encoding {
        // With a Content-Length as well: the framing is ambiguous (RFC 9112 6.3).
        return Head::refused(if content_length.is_some() {
            Request::Bad
        } else {
            Request::NotImplemented
        });
    }
    if content_length.is_some_and(|n| n.iter().any(|&d| d != b'0')) {
        return Head::refused(Request::BodyTooLarge);
    }
    let head_only = method == b"HEAD";
    let request = if method != b"GET" && !head_only {
        if KNOWN_METHODS.contains(&method) {
            Request::MethodNotAllowed
        } else {
            Request::NotImplemented
        }
    } else if target == b"/" {
        Request::Index
    } else if let Some(n) = target.strip_prefix(b"/bytes/") {
        match parse_decimal(n) {
            Some(n_bytes) if n_bytes <= MAX_BYTES => Request::Bytes(n_bytes),
            _ => return bad,
        }
    } else {
        Request::NotFound
    };
    Head {
        request,
        keep_alive: keep_alive && !close,
        head_only,
        http10,
    }
}

/// Digits only (`u64::from_str` would also take a leading `+`), without overflow.
fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &d| {
        if !d.is_ascii_digit() {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// Where the blank line ending a request head is in `buf`, looking no further than a head
/// of [`MAX_HEAD`] bytes could reach and starting at `from` (what an earlier search
/// already ruled out): the head's length, and with the blank line.
fn find_head_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let window = &buf[..buf.len().min(MAX_HEAD + 4)];
    let from = from.min(window.len());
    window[from..]
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| (from + at, from + at + 4))
}

/// `n` in decimal, in `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// One connection's HTTP handler.
pub struct Http {
    pattern: Pattern,
    /// Received request bytes; those before `start` are answered.
    pending: Vec<u8>,
    start: usize,
    /// How far past `start` the search for the end of a head has looked (so a head that
    /// arrives byte by byte is searched once, not once per byte).
    scanned: usize,
    /// The body in progress: next offset and end.
    body: Option<(u64, u64)>,
    /// Close once the current answer is sent.
    close_after: bool,
    /// The peer sent FIN: close once every complete request has been answered.
    peer_done: bool,
    /// A send went past the send window, so `send_window_increased` will follow.
    promised: bool,
    /// We closed the receive window (too much pipelined input).
    reading_paused: bool,
    closed: bool,
    /// What the connection's [`watch`] sees of it.
    activity: Rc<Activity>,
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
            start: 0,
            scanned: 0,
            body: None,
            close_after: false,
            peer_done: false,
            promised: false,
            reading_paused: false,
            closed: false,
            activity: Rc::new(Activity::default()),
        }
    }

    /// What [`watch`] needs to watch this connection's progress.
    pub fn activity(&self) -> Rc<Activity> {
        self.activity.clone()
    }

    /// Request bytes received and not yet answered (at most [`MAX_BUFFERED`] plus one
    /// receive).
    pub fn buffered_bytes(&self) -> usize {
        self.pending.len() - self.start
    }

    /// Sends `data`, noting whether the window refused part of it.
    fn send(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        if data.len() > conn.send_window() {
            self.promised = true;
        }
        // An error means the connection is failing: `closed` follows.
        let _ = conn.send(IOBufChain::from(data));
    }

    /// Sends the answer's head (and `body`, unless the request was `HEAD`), built in one
    /// fallibly allocated buffer; out of memory, sends the fixed `503` and closes.
    fn respond(
        &mut self,
        conn: &dyn TcpConnection,
        head: &Head,
        status: &str,
        content_type: &str,
        content_length: u64,
        body: &str,
    ) -> bool {
        let mut digits = [0u8; 20];
        let length = decimal(content_length, &mut digits);
        let connection: &[u8] = if !head.keep_alive {
            b"Connection: close\r\n"
        } else if head.http10 {
            b"Connection: keep-alive\r\n"
        } else {
            b""
        };
        let allow: &[u8] = if head.request == Request::MethodNotAllowed {
            b"Allow: GET, HEAD\r\n"
        } else {
            b""
        };
        let body = if head.head_only { "" } else { body };
        let parts: [&[u8]; 11] = [
            b"HTTP/1.1 ",
            status.as_bytes(),
            b"\r\nContent-Type: ",
            content_type.as_bytes(),
            b"\r\nContent-Length: ",
            length,
            b"\r\n",
            allow,
            connection,
            b"\r\n",
            body.as_bytes(),
        ];
        let len = parts.iter().map(|p| p.len()).sum();
        let Ok(mut buf) = IOBuf::try_with_capacity(len) else {
            self.out_of_memory(conn);
            return false;
        };
        // A fresh unique buffer with room for `len` bytes takes them.
        let _ = buf.extend_from_slices(&parts);
        self.send(conn, buf);
        true
    }

    /// No memory for what a request needs: the fixed `503` (unless an answer is still
    /// being sent, which must not be cut into), then close.
    fn out_of_memory(&mut self, conn: &dyn TcpConnection) {
        if self.body.is_none() {
            self.send(conn, IOBuf::from_static(OUT_OF_MEMORY));
        }
        self.close_after = true;
    }

    fn answer(&mut self, conn: &dyn TcpConnection, head: &Head) {
        let text = "text/plain";
        let small = |this: &mut Self, status: &str, body: &str| {
            let _ = this.respond(conn, head, status, text, body.len() as u64, body);
        };
        match head.request {
            Request::Index => {
                let _ = self.respond(conn, head, "200 OK", "text/html", INDEX.len() as u64, INDEX);
            }
            Request::Bytes(n) => {
                let sent = self.respond(conn, head, "200 OK", "application/octet-stream", n, "");
                if sent && !head.head_only {
                    self.body = Some((0, n));
                }
            }
            Request::NotFound => small(self, "404 Not Found", "not found\n"),
            Request::MethodNotAllowed => {
                small(self, "405 Method Not Allowed", "only GET and HEAD\n")
            }
            Request::NotImplemented => small(self, "501 Not Implemented", "not implemented\n"),
            Request::BodyTooLarge => small(
                self,
                "413 Content Too Large",
                "request bodies are not accepted\n",
            ),
            Request::UriTooLong => small(self, "414 URI Too Long", "request line too long\n"),
            Request::HeadTooLarge => small(
                self,
                "431 Request Header Fields Too Large",
                "request head too large\n",
            ),
            Request::VersionNotSupported => small(
                self,
                "505 HTTP Version Not Supported",
                "only HTTP/1.0 and HTTP/1.1\n",
            ),
            Request::Bad => small(self, "400 Bad Request", "bad request\n"),
        }
    }

    /// Sends body bytes as the connection takes them (`ebb_bytestream::send_pattern`: at most one
    /// chunk queued); true when the whole body was accepted.
    ///
    /// Not while a window event is owed: the window has not opened, and each call would
    /// queue another chunk (a client trickling bytes during a body it does not read
    /// queued 256 KiB of body per byte).
    fn pump(&mut self, conn: &dyn TcpConnection) -> bool {
        let Some((mut offset, end)) = self.body else {
            return true;
        };
        if self.promised {
            return false;
        }
        // More than the window takes is queued past it (`send_pattern` stops early only
        // then): an event is owed.
        if end - offset > conn.send_window() as u64 {
            self.promised = true;
        }
        let done = send_pattern(conn, &self.pattern, &mut offset, end);
        self.body = (!done).then_some((offset, end));
        done
    }

    /// Answers every complete request it can, in order.
    fn process(&mut self, conn: &dyn TcpConnection) {
        let mut incomplete_head = false;
        loop {
            if self.closed || !self.pump(conn) {
                break;
            }
            if self.close_after {
                self.closed = true;
                conn.close();
                break;
            }
            if self.promised && conn.queued_bytes() > MAX_QUEUED_REPLY {
                // The client is not reading: answer the rest once the queue drains.
                break;
            }
            let buf = &self.pending[self.start..];
            let Some((head_len, consumed)) = find_head_end(buf, self.scanned) else {
                self.scanned = buf.len().saturating_sub(3);
                if buf.len() >= MAX_HEAD + 4 {
                    let line_ends = buf[..MAX_HEAD + 2].windows(2).any(|w| w == b"\r\n");
                    let request = if line_ends {
                        Request::HeadTooLarge
                    } else {
                        Request::UriTooLong
                    };
                    self.close_after = true;
                    self.answer(conn, &Head::refused(request));
                    continue;
                }
                if self.peer_done {
                    // Nothing complete is left to answer; a partial head never will be.
                    self.close_after = true;
                    continue;
                }
                // At a request boundary, with part of the next head (or none) received.
                incomplete_head = !buf.is_empty();
                break;
            };
            let head = parse_head(&buf[..head_len]);
            self.activity.heads.set(self.activity.heads.get() + 1);
            self.start += consumed;
            self.scanned = 0;
            self.close_after = !head.keep_alive;
            self.answer(conn, &head);
        }
        if self.start > 0 {
            self.pending.drain(..self.start);
            self.start = 0;
        }
        if self.reading_paused && self.pending.len() < MAX_BUFFERED && !self.closed {
            self.reading_paused = false;
            conn.set_receive_window_open(true);
        }
        self.activity
            .head_incomplete
            .set(incomplete_head && !self.closed);
    }
}

impl TcpHandler for Http {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        self.activity.progress();
        if self.closed || self.close_after || self.activity.timed_out.get() {
            return; // after a refusal or a timeout: what follows is not read
        }
        if self.pending.try_reserve(data.len()).is_err() {
            self.pending = Vec::new();
            self.out_of_memory(conn);
            self.process(conn);
            return;
        }
        self.pending.extend_from_slice(data.as_slice());
        if self.pending.len() - self.start >= MAX_BUFFERED && !self.reading_paused {
            self.reading_paused = true;
            conn.set_receive_window_open(false);
        }
        self.process(conn);
    }

    fn send_window_increased(&mut self, conn: &dyn TcpConnection) {
        self.activity.progress();
        self.promised = false;
        if !self.activity.timed_out.get() {
            self.process(conn);
        }
    }

    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        // Answer every complete request received, then close.
        self.peer_done = true;
        if !self.activity.timed_out.get() {
            self.process(conn);
        }
    }

    fn closed(&mut self, _reason: CloseReason) {
        self.closed = true;
        self.body = None;
        self.pending = Vec::new();
        self.activity.closed.set(true);
        self.activity.head_incomplete.set(false);
    }
}

/// How long a connection may make no progress, and how long a request head may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// No request bytes received and no answer bytes taken by the client for this long:
    /// the connection is closed (an idle keep-alive connection too).
    pub idle: Duration,
    /// A request head not complete this long after its first byte (as the watchdog saw
    /// it) gets `408` and the connection closes.
    pub head: Duration,
}

impl Default for Timeouts {
    /// 60 s idle, 30 s for a head (nginx's keep-alive and header timeouts are 75 s and
    /// 60 s).
    fn default() -> Self {
        Self {
            idle: Duration::from_secs(60),
            head: Duration::from_secs(30),
        }
    }
}

/// What a connection's handler shows its [`Watchdog`]: counters and flags, no clock (the
/// handler runs wherever its events are delivered; the watchdog reads the time).
#[derive(Debug, Default)]
pub struct Activity {
    /// Bumped by every request byte received and every window increase (the client took
    /// answer bytes).
    progressed: Cell<u64>,
    /// Request heads completed so far: tells one incomplete head from the next.
    heads: Cell<u64>,
    /// The connection is at a request boundary with part of the next head received.
    head_incomplete: Cell<bool>,
    /// The connection is closed: the watchdog stops.
    closed: Cell<bool>,
    /// The watchdog closed the connection: the handler answers nothing more.
    timed_out: Cell<bool>,
}

impl Activity {
    fn progress(&self) {
        self.progressed.set(self.progressed.get().wrapping_add(1));
    }

    /// Whether the connection has closed.
    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }
}

impl Timeouts {
    /// Takes `--idle-timeout SECONDS` and `--head-timeout SECONDS` (decimals allowed,
    /// above zero) out of `args`: the timeouts (the defaults for those not given) and the
    /// other arguments, in order.
    pub fn from_args(
        args: &[alloc::string::String],
    ) -> Result<(Self, Vec<alloc::string::String>), alloc::string::String> {
        let mut timeouts = Self::default();
        let mut rest = Vec::new();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let (name, value) = match arg.split_once('=') {
                Some((name, value)) => (name, Some(value.into())),
                None => (arg.as_str(), None),
            };
            let field = match name {
                "--idle-timeout" => &mut timeouts.idle,
                "--head-timeout" => &mut timeouts.head,
                _ => {
                    rest.push(arg.clone());
                    continue;
                }
            };
            let value: alloc::string::String = value
                .or_else(|| args.next().cloned())
                .ok_or_else(|| alloc::format!("{name} needs a number of seconds"))?;
            *field = value
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e9)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| {
                    alloc::format!("bad {name} {value:?}: a number of seconds above 0")
                })?;
        }
        Ok((timeouts, rest))
    }
}

/// Why a [`Watchdog`] ends a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expired {
    /// No progress for [`Timeouts::idle`].
    Idle,
    /// A request head took more than [`Timeouts::head`].
    Head,
}

/// Decides, from an [`Activity`] looked at now and then, when a connection has timed out.
/// Its precision is the interval between looks ([`watch`] looks four times a timeout).
#[derive(Debug)]
pub struct Watchdog {
    activity: Rc<Activity>,
    timeouts: Timeouts,
    /// The progress count at the last look, and since when it has not changed.
    quiet: (u64, Instant),
    /// The incomplete head last seen (by the count of heads before it), and since when.
    head: Option<(u64, Instant)>,
}

impl Watchdog {
    /// Watches `activity` from `now` on.
    pub fn new(activity: Rc<Activity>, timeouts: Timeouts, now: Instant) -> Self {
        let quiet = (activity.progressed.get(), now);
        Self {
            activity,
            timeouts,
            quiet,
            head: None,
        }
    }

    /// A look at `now`: whether the connection has timed out (never once it is closed).
    pub fn check(&mut self, now: Instant) -> Option<Expired> {
        let a = &self.activity;
        if a.closed.get() {
            return None;
        }
        let progressed = a.progressed.get();
        if progressed != self.quiet.0 {
            self.quiet = (progressed, now);
        }
        self.head = match (a.head_incomplete.get(), self.head) {
            (false, _) => None,
            (true, Some((heads, since))) if heads == a.heads.get() => Some((heads, since)),
            (true, _) => Some((a.heads.get(), now)),
        };
        if let Some((_, since)) = self.head
            && now.saturating_duration_since(since) >= self.timeouts.head
        {
            return Some(Expired::Head);
        }
        (now.saturating_duration_since(self.quiet.1) >= self.timeouts.idle).then_some(Expired::Idle)
    }
}

/// Watches a connection served by an [`Http`] (whose [`Http::activity`] is `activity`)
/// until it closes, and ends it when it times out: `408` and close for a slow head
/// (appended after whatever answer is queued: the head's connection is at a request
/// boundary), close for an idle one; if it is still open one idle timeout later (a client
/// that reads nothing keeps unsent answers queued), reset. Run it on the connection's core.
pub async fn watch(conn: impl TcpConnection, activity: Rc<Activity>, timeouts: Timeouts) {
    let look = (timeouts.idle.min(timeouts.head) / 4).max(Duration::from_millis(10));
    let mut dog = Watchdog::new(activity.clone(), timeouts, ebb::now());
    loop {
        ebb::sleep(look).await;
        if activity.is_closed() {
            return;
        }
        let Some(expired) = dog.check(ebb::now()) else {
            continue;
        };
        activity.timed_out.set(true);
        if expired == Expired::Head {
            let _ = conn.send(IOBufChain::from(IOBuf::from_static(HEAD_TIMED_OUT)));
        }
        conn.close();
        ebb::sleep(timeouts.idle).await;
        if !activity.is_closed() {
            conn.abort();
        }
        return;
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
                keep_alive: true,
                head_only: false,
                http10: false,
            }
        );
        assert_eq!(head("GET / HTTP/1.0").request, Request::Index);
        assert!(!head("GET / HTTP/1.0").keep_alive);
        assert!(head("GET / HTTP/1.0\r\nConnection: keep-alive").keep_alive);
        assert!(!head("GET / HTTP/1.1\r\nHost: x\r\nConnection: close").keep_alive);
        assert!(!head("GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Close").keep_alive);
        assert_eq!(
            head("GET /nope HTTP/1.1\r\nHost: x").request,
            Request::NotFound
        );
        assert_eq!(head("HEAD / HTTP/1.1\r\nHost: x").request, Request::Index);
        assert!(head("HEAD / HTTP/1.1\r\nHost: x").head_only);
        assert_eq!(
            head("POST / HTTP/1.1\r\nHost: x").request,
            Request::MethodNotAllowed
        );
        // Methods are case-sensitive: `get` is some other method.
        for method in ["BREW", "get"] {
            let h = head(&alloc::format!("{method} / HTTP/1.1\r\nHost: x"));
            assert_eq!(h.request, Request::NotImplemented);
            assert!(h.keep_alive, "no body was sent: the connection can go on");
        }
        assert_eq!(
            head("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\ncontent-length: 0").request,
            Request::Index
        );
        // obs-text in a value is opaque, not an error.
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nHost: x\r\nX: caf\xe9").request,
            Request::Index
        );
        for (refused, request) in [
            (
                "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5",
                Request::BodyTooLarge,
            ),
            (
                "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999",
                Request::BodyTooLarge,
            ),
            (
                "GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked",
                Request::NotImplemented,
            ),
            ("GET / HTTP/2.0", Request::VersionNotSupported),
        ] {
            let h = head(refused);
            assert_eq!(h.request, request, "{refused:?}");
            assert!(!h.keep_alive, "{refused:?}");
        }
        for bad in [
            "GET /bytes/x HTTP/1.1\r\nHost: x",
            "GET /bytes/-1 HTTP/1.1\r\nHost: x",
            "GET /bytes/+5 HTTP/1.1\r\nHost: x",
            "GET /bytes/ HTTP/1.1\r\nHost: x",
            "GET /bytes/1099511627777 HTTP/1.1\r\nHost: x",
            "GET /bytes/99999999999999999999999 HTTP/1.1\r\nHost: x",
            "GET / HTTP/1.1",
            "GET / HTTP/1.1\r\nHost: x\r\nHost: y",
            "GET / HTTP/1.x\r\nHost: x",
            "GET  / HTTP/1.1\r\nHost: x",
            "GET x HTTP/1.1\r\nHost: x",
            "GET / HTTP/1.1\r\nHost: x\r\nbroken header",
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 5",
            "GET / HTTP/1.1\r\nHost: x\r\n Transfer-Encoding: chunked",
            "GET / HTTP/1.1\r\nHost: x\r\n: empty name",
            "GET / HTTP/1.1\r\nHost: x\nContent-Length: 5",
            "GET / HTTP/1.1\r\nHost: x\rContent-Length: 5",
            "GET / HTTP/1.1\r\nHost: x\0",
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 5",
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: +0",
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nTransfer-Encoding: chunked",
            "\u{1}",
            "",
        ] {
            let h = head(bad);
            assert_eq!(h.request, Request::Bad, "{bad:?}");
            assert!(!h.keep_alive);
        }
    }

    #[test]
    fn head_ends_are_found_from_where_the_last_search_stopped() {
        let buf = b"GET / HTTP/1.1\r\nHost: x\r\n\r\nrest";
        for from in 0..=23 {
            assert_eq!(find_head_end(buf, from), Some((23, 27)), "from {from}");
        }
        assert_eq!(find_head_end(buf, 24), None);
        assert_eq!(find_head_end(b"\r\n\r", 0), None);
        assert_eq!(find_head_end(b"", 5), None);
    }

    #[test]
    fn decimals() {
        let mut b = [0u8; 20];
        assert_eq!(decimal(0, &mut b), b"0");
        assert_eq!(decimal(u64::MAX, &mut b), b"18446744073709551615");
        assert_eq!(parse_decimal(b"18446744073709551616"), None);
        assert_eq!(parse_decimal(b"007"), Some(7));
    }
}
