//! The `http_head` and `http_stream` targets' seeds: every request the server serves and
//! every refusal, alone and pipelined, under a few segmentations and paces, so the fuzzer
//! starts past the request line's syntax. `seeds_run_clean` replays each seed through
//! the targets' harness (on stable: CI checks the seeds without nightly) and checks the
//! answers it is meant to get; `seed_files_are_current` checks `seeds/<target>/` holds
//! exactly these bytes, and `WRITE_SEEDS=1 cargo test --test seeds` rewrites them.

use std::path::{Path, PathBuf};

use httpd::{MAX_HEAD, Request};
use httpd_fuzz::{run_head, run_stream, status_of};

#[path = "../../../../crates/ebb-testkit/src/seed_files.rs"]
mod seed_files;

/// A seed: target, file name, bytes, the statuses its answers must have (in order).
type Seed = (&'static str, &'static str, Vec<u8>, Vec<u16>);

fn long_header() -> Vec<u8> {
    let mut s = b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: ".to_vec();
    s.extend(std::iter::repeat_n(b'a', MAX_HEAD));
    s
}

fn long_line() -> Vec<u8> {
    let mut s = b"GET /".to_vec();
    s.extend(std::iter::repeat_n(b'a', MAX_HEAD));
    s.extend_from_slice(b" HTTP/1.1\r\nHost: x");
    s
}

fn heads() -> Vec<(&'static str, Vec<u8>, Request)> {
    use Request::*;
    let h = |s: &str| s.as_bytes().to_vec();
    vec![
        (
            "index",
            h("GET / HTTP/1.1\r\nHost: example.com\r\nUser-Agent: curl/8.5.0\r\nAccept: */*"),
            Index,
        ),
        (
            "bytes",
            h("GET /bytes/1048576 HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, Upgrade"),
            Bytes(1 << 20),
        ),
        ("head", h("HEAD /bytes/10 HTTP/1.1\r\nhost: x"), Bytes(10)),
        (
            "http10",
            h("GET / HTTP/1.0\r\nConnection: keep-alive"),
            Index,
        ),
        (
            "not-found",
            h("GET /index.html?q=1 HTTP/1.1\r\nHost: x"),
            NotFound,
        ),
        (
            "post",
            h("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0"),
            MethodNotAllowed,
        ),
        (
            "unknown-method",
            h("BREW / HTTP/1.1\r\nHost: x"),
            NotImplemented,
        ),
        (
            "body",
            h("PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 12"),
            BodyTooLarge,
        ),
        (
            "chunked",
            h("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"),
            NotImplemented,
        ),
        (
            "cl-and-te",
            h("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nTransfer-Encoding: chunked"),
            Bad,
        ),
        (
            "version",
            h("GET / HTTP/2.0\r\nHost: x"),
            VersionNotSupported,
        ),
        ("no-host", h("GET / HTTP/1.1"), Bad),
        (
            "space-before-colon",
            h("GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 5"),
            Bad,
        ),
        (
            "obs-fold",
            h("GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n\tb"),
            Bad,
        ),
        ("bare-lf", h("GET / HTTP/1.1\r\nHost: x\nX: y"), Bad),
        ("bad-bytes", h("GET /bytes/+5 HTTP/1.1\r\nHost: x"), Bad),
        ("long-header", long_header(), HeadTooLarge),
        ("long-line", long_line(), UriTooLong),
    ]
}

/// The 3-byte prefix: flags (window index, FIN), split, seed.
fn prefix(window: u8, fin: bool, split: u8) -> Vec<u8> {
    vec![window | if fin { 4 } else { 0 }, split, 0x42]
}

fn pipelined() -> Vec<u8> {
    [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"GET /bytes/70000 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"HEAD /bytes/5 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /missing HTTP/1.1\r\nHost: x\r\n\r\n",
        b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"BREW / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /bytes/3 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    ]
    .concat()
}

const PIPELINED: [u16; 8] = [200, 200, 200, 404, 405, 501, 200, 200];

fn seeds() -> Vec<Seed> {
    let mut seeds: Vec<Seed> = heads()
        .into_iter()
        .map(|(name, bytes, request)| ("http_head", name, bytes, vec![status_of(request)]))
        .collect();
    let with = |window: u8, fin: bool, split: u8, stream: &[u8]| {
        [prefix(window, fin, split), stream.to_vec()].concat()
    };
    let get = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    let smuggle = b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 35\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut long = long_header();
    long.extend_from_slice(b"\r\n\r\n");
    long.extend_from_slice(get);
    let half_close =
        b"GET /bytes/300000 HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n";
    let trickle = [
        &b"GET /bytes/927303 HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        &get.repeat(3),
    ]
    .concat();
    seeds.extend([
        (
            "http_stream",
            "pipelined",
            with(2, false, 5, &pipelined()),
            PIPELINED.to_vec(),
        ),
        (
            "http_stream",
            "pipelined-bytewise",
            with(3, true, 0, &pipelined()),
            PIPELINED.to_vec(),
        ),
        (
            "http_stream",
            "body",
            with(
                0,
                false,
                4,
                &[
                    &b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"[..],
                    get,
                ]
                .concat(),
            ),
            vec![413],
        ),
        (
            "http_stream",
            "smuggle",
            with(1, true, 3, smuggle),
            vec![400],
        ),
        (
            "http_stream",
            "long-head",
            with(0, false, 11, &long),
            vec![431],
        ),
        (
            "http_stream",
            "unread",
            with(3, true, 11, &get.repeat(600)),
            vec![200; 600],
        ),
        // Bytes arriving one at a time while a body the client does not read is queued
        // (the first fuzz run's crash: each arrival queued another chunk of the body).
        (
            "http_stream",
            "trickle-during-body",
            with(1, true, 0, &trickle),
            vec![200; 4],
        ),
        (
            "http_stream",
            "half-close",
            with(1, true, 6, half_close),
            vec![200, 200],
        ),
    ]);
    seeds
}

#[test]
fn seeds_run_clean() {
    for (target, name, bytes, statuses) in seeds() {
        let got = if target == "http_head" {
            vec![status_of(run_head(&bytes).request)]
        } else {
            run_stream(&bytes).statuses
        };
        assert_eq!(got, statuses, "{target}/{name}");
    }
}

#[test]
fn seed_files_are_current() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let seeds = seeds().into_iter();
    seed_files::check(
        &root,
        seeds.map(|(target, name, bytes, _)| (Path::new(target).join(name), bytes)),
    );
}
