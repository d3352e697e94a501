//! The httpd fuzz harness, shared by the `http_head` and `http_stream` targets and by the
//! seed test (`tests/seeds.rs`), so seeds are checked against exactly what the targets
//! run. The connection is the scripted one the crate's own tests use
//! (`../tests/common/conn.rs`): no sockets.
//!
//! # `http_head`: arbitrary bytes as a request head
//!
//! [`run_head`] parses them with `httpd::parse_head` and checks the result against the
//! bytes: a refusal never keeps the connection; an accepted request's head is at most
//! `MAX_HEAD` bytes, has a request line of three parts, no NUL, bare CR or bare LF, the
//! method `GET` or `HEAD` when served, the path `/` for the index and `/bytes/N` (N in
//! decimal, at most `MAX_BYTES`) for bytes, and HTTP/1.1 exactly one `Host`; one more
//! harmless header changes nothing; and the same head sent on a connection is answered
//! with the status the parse implies.
//!
//! # `http_stream`: a client's byte stream
//!
//! ```text
//! input   = flags u8, split u8, seed u8, stream*
//! flags   = bits 0-1: the send window the client's reads keep open
//!           (1 MiB, 16 KiB, 1 KiB, 64 bytes); bit 2: the client sends FIN at the end
//! split   = segments are 1 ..= 2^(split % 12) bytes long (so 0 feeds byte by byte),
//!           lengths drawn from a xorshift seeded by split and seed
//! stream  = the bytes the client sends
//! ```
//!
//! [`run_stream`] delivers the segments while the server reads, the client reading
//! answers whenever the server stops reading, then the FIN, then reads until nothing is
//! owed; once, and again as one segment to a client that always keeps up. It checks:
//! nothing panics; the server never stops reading without an event owed to resume it
//! (no stall); it holds at most `MAX_BUFFERED` bytes of input plus one segment and
//! queues at most `MAX_QUEUED_REPLY` plus one body chunk and one answer; the output is a
//! sequence of whole answers (a known status, `Content-Length`, the body that length or
//! none for `HEAD`, bodies the pattern's bytes at their offsets); an answer saying
//! `Connection: close` is the last and the connection closes; and segmentation and pace
//! do not matter: both runs send the same bytes.

#[path = "../../tests/common/conn.rs"]
pub mod conn;

use conn::Conn;
use ebb::net::{CloseReason, IOBuf, TcpHandler};
use ebb_bytestream::pattern::Pattern;
use httpd::{Http, MAX_BUFFERED, MAX_BYTES, MAX_HEAD, MAX_QUEUED_REPLY, Request, parse_head};

/// The fixed input bytes before the stream.
pub const PREFIX: usize = 3;

/// Bodies are cut off (the connection "resets") past this many bytes sent, so a
/// `/bytes/1099511627776` costs a run a bounded time.
pub const SEND_LIMIT: usize = 1 << 20;

/// The status every answer may have.
pub const STATUSES: [u16; 10] = [200, 400, 404, 405, 413, 414, 431, 501, 503, 505];

/// The status an answer to `request` has.
pub fn status_of(request: Request) -> u16 {
    match request {
        Request::Index | Request::Bytes(_) => 200,
        Request::NotFound => 404,
        Request::MethodNotAllowed => 405,
        Request::NotImplemented => 501,
        Request::BodyTooLarge => 413,
        Request::UriTooLong => 414,
        Request::HeadTooLarge => 431,
        Request::VersionNotSupported => 505,
        Request::Bad => 400,
    }
}

/// Runs one `http_head` input.
pub fn run_head(data: &[u8]) -> httpd::Head {
    let head = parse_head(data);
    let served = matches!(
        head.request,
        Request::Index | Request::Bytes(_) | Request::NotFound
    );
    // `501` is also the answer to a `Transfer-Encoding`, which closes; an unknown
    // method's keeps the connection (unless it asked to close).
    let refused = !served
        && head.request != Request::MethodNotAllowed
        && !(head.request == Request::NotImplemented && head.keep_alive);
    if refused {
        assert!(!head.keep_alive, "a refusal keeps the connection");
    }
    if !refused {
        check_accepted(data, &head);
        // Another header of no meaning changes nothing (while it fits).
        if data.len() + 20 <= MAX_HEAD {
            let more = [data, b"\r\nX-Fuzz: harmless"].concat();
            assert_eq!(
                parse_head(&more),
                head,
                "a harmless header changed the outcome"
            );
        }
    }
    // The same head on a connection, as one read: the status the parse implies (a head
    // over the limit is refused by the connection before any parse, alike).
    let request = [data, b"\r\n\r\n"].concat();
    if request.windows(4).position(|w| w == b"\r\n\r\n") == Some(data.len()) {
        let conn = Conn::new(1 << 20);
        let mut http = Http::default();
        http.receive(&conn, IOBuf::copy_from_slice(&request));
        let statuses = conn.statuses();
        assert_eq!(statuses.first(), Some(&status_of(head.request)), "{head:?}");
    }
    head
}

/// An accepted head is what its request says.
fn check_accepted(data: &[u8], head: &httpd::Head) {
    assert!(data.len() <= MAX_HEAD, "a head over the limit accepted");
    assert!(!data.contains(&0), "NUL accepted");
    for (i, &b) in data.iter().enumerate() {
        if b == b'\r' {
            assert_eq!(data.get(i + 1), Some(&b'\n'), "a bare CR accepted");
        }
        if b == b'\n' {
            assert!(i > 0 && data[i - 1] == b'\r', "a bare LF accepted");
        }
    }
    let mut lines = data
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next().expect("a request line");
    let parts: Vec<&[u8]> = request_line.split(|&b| b == b' ').collect();
    assert_eq!(parts.len(), 3, "a request line of {} parts", parts.len());
    let (method, target, version) = (parts[0], parts[1], parts[2]);
    assert!(!method.is_empty() && target.starts_with(b"/"));
    assert_eq!(head.http10, version == b"HTTP/1.0");
    assert!(head.http10 || version == b"HTTP/1.1");
    let hosts = lines
        .filter(|l| l.len() >= 5 && l[..5].eq_ignore_ascii_case(b"host:"))
        .count();
    assert!(
        hosts <= 1 && (head.http10 || hosts == 1),
        "{hosts} Host lines"
    );
    match head.request {
        Request::Index | Request::Bytes(_) | Request::NotFound => {
            assert!(method == b"GET" || method == b"HEAD", "served a {method:?}");
            assert_eq!(head.head_only, method == b"HEAD");
        }
        _ => assert!(method != b"GET" && method != b"HEAD"),
    }
    match head.request {
        Request::Index => assert_eq!(target, b"/"),
        Request::Bytes(n) => {
            assert!(n <= MAX_BYTES);
            let digits = target.strip_prefix(b"/bytes/").expect("a /bytes/ path");
            let value = std::str::from_utf8(digits).expect("digits").parse::<u64>();
            assert_eq!(value, Ok(n));
            assert!(digits.iter().all(u8::is_ascii_digit));
        }
        Request::NotFound => assert!(target != b"/" && !target.starts_with(b"/bytes/")),
        _ => {}
    }
}

#[path = "../../../../crates/ebb-testkit/src/stream_cuts.rs"]
mod stream_cuts;
/// Cuts `stream` into segments as the `split` and `seed` bytes say.
pub use stream_cuts::segments;

/// The send window a client's reads keep open, by the flags' low bits.
pub fn window(flags: u8) -> usize {
    [1 << 20, 16 << 10, 1 << 10, 64][usize::from(flags & 3)]
}

/// What one connection did.
#[derive(Debug)]
pub struct Outcome {
    /// Every byte sent.
    pub out: Vec<u8>,
    /// The answers' status codes, in order.
    pub statuses: Vec<u16>,
    /// The server closed the connection.
    pub closed: bool,
    /// The run was cut off at [`SEND_LIMIT`].
    pub cut: bool,
}

/// Runs one `http_stream` input: paced and segmented, then whole to a client keeping up.
pub fn run_stream(data: &[u8]) -> Outcome {
    let Some((&[flags, split, seed], stream)) = data.split_first_chunk::<PREFIX>() else {
        return feed(&[], 1 << 20, false);
    };
    let fin = flags & 4 != 0;
    let paced = feed(&segments(stream, split, seed), window(flags), fin);
    let whole = feed(&[stream], 1 << 20, fin);
    if paced.cut || whole.cut {
        let n = paced.out.len().min(whole.out.len());
        assert!(
            paced.out[..n] == whole.out[..n],
            "segmentation or pace changed what was sent"
        );
    } else {
        assert!(
            paced.out == whole.out,
            "segmentation or pace changed what was sent"
        );
        assert_eq!(paced.closed, whole.closed);
    }
    paced
}

/// One connection: `segments` delivered while the server reads, the client reading when
/// it stops, then FIN (if `fin`), then the client reads until nothing is owed.
pub fn feed(segments: &[&[u8]], window: usize, fin: bool) -> Outcome {
    let mut conn = Conn::new(window);
    conn.send_limit = SEND_LIMIT;
    let mut http = Http::default();
    let mut at = 0;
    while at < segments.len() && !conn.closed.get() && !conn.failed.get() {
        if conn.receive_open.get() {
            let seg = segments[at];
            http.receive(&conn, IOBuf::copy_from_slice(seg));
            at += 1;
            assert!(
                http.buffered_bytes() <= MAX_BUFFERED + seg.len(),
                "{} bytes buffered",
                http.buffered_bytes()
            );
        } else {
            assert!(
                conn.client_reads(&mut http),
                "the server stopped reading with no event owed: a stall"
            );
        }
    }
    if fin && !conn.closed.get() && !conn.failed.get() {
        http.peer_closed(&conn);
    }
    while conn.client_reads(&mut http) {}
    if conn.failed.get() {
        http.closed(CloseReason::Reset);
    }
    let cut = conn.failed.get();
    assert!(
        conn.max_queued.get() <= MAX_QUEUED_REPLY + (256 << 10) + 1024,
        "{} bytes queued",
        conn.max_queued.get()
    );
    let (statuses, close_said) = check_answers(&conn, cut);
    if close_said && !cut {
        assert!(
            conn.closed.get(),
            "an answer said close; the connection stayed open"
        );
    }
    if conn.closed.get() && !fin && !cut {
        assert!(close_said, "closed without saying so");
    }
    Outcome {
        statuses,
        closed: conn.closed.get(),
        cut,
        out: conn.out.into_inner(),
    }
}

/// Walks the output: whole answers, each with its body or none, bodies of pattern bytes.
/// Returns the statuses and whether the last answer said `Connection: close`.
fn check_answers(conn: &Conn, cut: bool) -> (Vec<u16>, bool) {
    let out = conn.out.borrow();
    let pieces = conn.pieces.borrow();
    let pattern = Pattern::get();
    let mut statuses = Vec::new();
    let mut close_said = false;
    // The body in progress: bytes announced, bytes seen.
    let mut body: Option<(u64, u64)> = None;
    for piece in pieces.iter() {
        let bytes = &out[piece.start..piece.start + piece.len];
        if piece.pattern {
            let (announced, seen) = body.as_mut().expect("body bytes without an answer");
            assert!(pattern.matches(*seen, bytes), "body bytes off the pattern");
            *seen += bytes.len() as u64;
            assert!(*seen <= *announced, "a body longer than announced");
            continue;
        }
        if let Some((announced, seen)) = body.take() {
            assert!(
                seen == 0 || seen == announced,
                "a body cut short ({seen} of {announced})"
            );
        }
        assert!(!close_said, "an answer after one that said close");
        let end = bytes
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("an answer's head ends")
            + 4;
        let head = std::str::from_utf8(&bytes[..end]).expect("an ASCII head");
        let status: u16 = head
            .strip_prefix("HTTP/1.1 ")
            .and_then(|s| s.get(..3))
            .and_then(|s| s.parse().ok())
            .expect("a status line");
        assert!(STATUSES.contains(&status), "status {status}");
        let length: u64 = head
            .split("\r\n")
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .expect("a Content-Length")
            .parse()
            .expect("a decimal length");
        close_said = head.contains("\r\nConnection: close\r\n");
        let rest = (bytes.len() - end) as u64;
        if head.contains("\r\nContent-Type: application/octet-stream\r\n") {
            assert_eq!(rest, 0);
            body = Some((length, 0));
        } else {
            assert!(
                rest == length || rest == 0,
                "a body of {rest}, announced {length}"
            );
        }
        statuses.push(status);
    }
    if let Some((announced, seen)) = body {
        assert!(
            cut || seen == 0 || seen == announced,
            "the last body cut short"
        );
    }
    (statuses, close_said)
}
