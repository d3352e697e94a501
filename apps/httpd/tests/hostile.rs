//! `httpd::Http` against hostile and careless clients, over the scripted connection in
//! `common/conn.rs`: what each bad input is answered with, and that nothing a client
//! does makes the server hold more than a bounded amount.

#[path = "common/conn.rs"]
mod conn;

use conn::Conn;
use httpd::Http;

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";

/// Every answer to `request`, sent in one piece, with the client reading; then its FIN.
fn answers(request: &[u8]) -> Conn {
    let conn = Conn::new(1 << 20);
    let mut http = Http::default();
    assert!(conn.converse(&mut http, &[request], true));
    conn
}

#[test]
fn a_client_that_never_reads_its_answers_is_not_queued_for_without_bound() {
    // The socket buffer takes 16 KiB of answers, then the client reads nothing.
    let conn = Conn::new(16 << 10);
    let mut http = Http::default();
    let requests = GET.repeat(20_000);
    let segments: Vec<&[u8]> = requests.chunks(1460).collect();
    let delivered = conn.deliver(&mut http, &segments);
    assert!(
        conn.max_queued.get() <= 256 << 10,
        "{} bytes of answers queued for a client that reads nothing ({delivered} of {} segments read)",
        conn.max_queued.get(),
        segments.len()
    );
    assert!(!conn.receive_open.get(), "it kept reading");
    // Once the client reads, every request is answered, in order, and nothing is lost.
    assert!(conn.converse(&mut http, &segments[delivered..], true));
    let statuses = conn.statuses();
    assert_eq!(statuses.len(), 20_000);
    assert!(statuses.iter().all(|&s| s == 200));
    assert!(conn.closed.get());
}

#[test]
fn a_head_over_the_limit_is_refused_even_in_one_piece() {
    let mut long = b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 20_000));
    long.extend_from_slice(b"\r\n\r\n");
    // Whole, as one read returns it; and byte by byte, as a slow client sends it.
    let whole = answers(&long);
    assert_eq!(whole.statuses(), [431]);
    assert!(whole.closed.get());
    let conn = Conn::new(1 << 20);
    let mut http = Http::default();
    let bytes: Vec<&[u8]> = long.chunks(1).collect();
    conn.converse(&mut http, &bytes, false);
    assert_eq!(conn.statuses(), [431]);
    assert!(conn.closed.get());
    // A request line that long: 414.
    let mut line = b"GET /".to_vec();
    line.extend(std::iter::repeat_n(b'a', 20_000));
    line.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(answers(&line).statuses(), [414]);
}

#[test]
fn refusals_say_why() {
    for (request, status, stays_open) in [
        (
            &b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"[..],
            413,
            false,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
            413,
            false,
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            501,
            false,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
            false,
        ),
        (b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n", 405, true),
        (b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n", 501, true),
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, false),
        (b"GET / HTTP/1.1\r\n\r\n", 400, false),
        (b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, false),
        (
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
            400,
            false,
        ),
    ] {
        let what = String::from_utf8_lossy(request);
        let conn = Conn::new(1 << 20);
        let mut http = Http::default();
        // Followed by a good request: answered only if the connection stays open.
        conn.converse(&mut http, &[request, GET], false);
        let mut expected = vec![status];
        if stays_open {
            expected.push(200);
        }
        assert_eq!(conn.statuses(), expected, "{what}");
        assert_eq!(conn.closed.get(), !stays_open, "{what}");
        let head = &conn.heads()[0];
        if status == 405 {
            assert!(head.contains("\r\nAllow: GET, HEAD\r\n"), "{head}");
        }
        if !stays_open {
            assert!(head.contains("\r\nConnection: close\r\n"), "{head}");
        }
    }
}

#[test]
fn smuggling_shaped_heads_are_refused_and_what_follows_is_not_run() {
    let smuggled = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    for header in [
        &b"Content-Length : 35"[..],    // space before the colon
        b"Transfer-Encoding : chunked", // the same
        b"X: y\r\n Content-Length: 35", // obs-fold
        b"X: y\nContent-Length: 35",    // a bare LF
        b"X: y\rContent-Length: 35",    // a bare CR
        b"X: y\0",                      // NUL
        b"Content-Length: 35\r\nContent-Length: 0",
        b"Content-Length: 35\r\nTransfer-Encoding: chunked",
    ] {
        let mut request = b"GET / HTTP/1.1\r\nHost: x\r\n".to_vec();
        request.extend_from_slice(header);
        request.extend_from_slice(b"\r\n\r\n");
        request.extend_from_slice(smuggled);
        let conn = answers(&request);
        let what = String::from_utf8_lossy(header);
        assert_eq!(conn.statuses(), [400], "{what}");
        assert!(conn.closed.get(), "{what}");
    }
}

#[test]
fn http10_keep_alive_and_closing_answers_say_so() {
    let conn = answers(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n");
    let heads = conn.heads();
    assert_eq!(conn.statuses(), [200, 200]);
    assert!(
        heads[0].contains("\r\nConnection: keep-alive\r\n"),
        "{}",
        heads[0]
    );
    assert!(
        heads[1].contains("\r\nConnection: close\r\n"),
        "{}",
        heads[1]
    );
    let conn = answers(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    assert!(conn.heads()[0].contains("\r\nConnection: close\r\n"));
}

#[test]
fn head_is_answered_without_a_body() {
    let conn = answers(
        b"HEAD /bytes/1000 HTTP/1.1\r\nHost: x\r\n\r\nHEAD / HTTP/1.1\r\nHost: x\r\n\r\nGET /bytes/3 HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    assert_eq!(conn.statuses(), [200, 200, 200]);
    let heads = conn.heads();
    assert!(
        heads[0].contains("\r\nContent-Length: 1000\r\n"),
        "{}",
        heads[0]
    );
    let out = conn.out.borrow();
    // The three heads, the last one's 3 body bytes, nothing else.
    let total: usize = heads.iter().map(String::len).sum();
    assert_eq!(out.len(), total + 3);
}

#[test]
fn a_half_close_answers_every_request_already_received() {
    // The client sends two requests and its FIN while the first answer's body streams.
    let conn = Conn::new(64 << 10);
    let mut http = Http::default();
    let requests =
        b"GET /bytes/1000000 HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert!(conn.converse(&mut http, &[&requests[..]], true));
    assert_eq!(conn.statuses(), [200, 200]);
    assert!(conn.closed.get());
}

#[test]
fn pipelined_requests_split_anywhere_get_the_same_answers() {
    let stream = [
        &b"GET /bytes/70000 HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", // after the close: not answered
    ]
    .concat();
    let whole = answers(&stream);
    assert_eq!(whole.statuses(), [200, 404, 200, 200]);
    for size in [1, 2, 3, 7, 100, 1460] {
        let conn = Conn::new(4096);
        let mut http = Http::default();
        let segments: Vec<&[u8]> = stream.chunks(size).collect();
        conn.converse(&mut http, &segments, true);
        assert_eq!(
            *conn.out.borrow(),
            *whole.out.borrow(),
            "{size}-byte segments"
        );
    }
}

#[test]
fn input_arriving_during_a_body_the_client_does_not_read_queues_no_more_of_it() {
    // A big body the client does not read, and more bytes from it, one per segment: each
    // arrival must not queue another piece of the body.
    let conn = Conn::new(16 << 10);
    let mut http = Http::default();
    conn.deliver(
        &mut http,
        &[b"GET /bytes/1000000000 HTTP/1.1\r\nHost: x\r\n\r\n"],
    );
    let queued = conn.queued.get();
    let trickle = GET.repeat(40);
    let bytes: Vec<&[u8]> = trickle.chunks(1).collect();
    conn.deliver(&mut http, &bytes);
    assert_eq!(
        conn.queued.get(),
        queued,
        "{} bytes queued after {} one-byte segments (was {queued})",
        conn.queued.get(),
        bytes.len()
    );
}
