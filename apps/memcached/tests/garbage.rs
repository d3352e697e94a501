//! Hostile and odd input: seeded random bytes and malformed commands (text and binary)
//! on 1,000 fresh connections never bring the server down, and a normal client works
//! afterwards; many requests pipelined in one write, and requests written one byte at a
//! time, are answered exactly. Each hosted and natively (one vCPU, under KVM, through
//! passt).

mod common;

use common::{Client, Ours, Rng, ServerProcess, wait_for};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Malformed or unusual requests, sent whole or cut anywhere.
const MALFORMED: &[&[u8]] = &[
    b"set k 0 0 -1\r\n",
    b"set k 0 0 99999999999999999999\r\n",
    b"set k 0 0 4294967296\r\nab\r\n",
    b"set k 0 0 2147483647\r\n",
    b"set k abc 0 1\r\nx\r\n",
    b"set k 0 0 5\r\nabcdefghij\r\n",
    b"set k 0 0 1 noreply extra tokens here\r\nx\r\n",
    b"set  k  0  0  1\r\nx\r\n",
    b"cas k 0 0 1 x\r\nx\r\n",
    b"cas k 0 0 1\r\nx\r\n",
    b"incr k\r\n",
    b"incr k -1\r\n",
    b"decr k 99999999999999999999999\r\n",
    b"touch k abc\r\n",
    b"gat\r\n",
    b"gat abc k\r\n",
    b"gets\r\n",
    b"get\r\n",
    b"get \r\n",
    b"get a\0b\r\n",
    b"delete k 0 noreply extra\r\n",
    b"flush_all -1\r\n",
    b"flush_all abc\r\n",
    b"verbosity\r\n",
    b"verbosity 99999999999\r\n",
    b"stats detail dump\r\n",
    b"stats cachedump 1 1\r\n",
    b"stats \xff\xfe\r\n",
    b"shutdown\r\n",
    b"quit extra\r\n",
    b"mg k v\r\n",
    b"ms k 2\r\nhi\r\n",
    b"ms k -5\r\n",
    b"md k q\r\n",
    b"ma k\r\n",
    b"me k\r\n",
    b"mn\r\n",
    b"\r\n\r\n\r\n",
    b"\n\n\n",
    b"\0\0\0\0",
    b"GET K\r\n",
    b"set k 0 0 1\nx\n",
    b"get k\rget k\r\n",
];

/// A binary request header with the given opcode and lengths (possibly inconsistent).
fn binary_header(opcode: u8, keylen: u16, extlen: u8, bodylen: u32) -> Vec<u8> {
    let mut h = vec![0x80, opcode];
    h.extend_from_slice(&keylen.to_be_bytes());
    h.push(extlen);
    h.push(0);
    h.extend_from_slice(&[0, 0]);
    h.extend_from_slice(&bodylen.to_be_bytes());
    h.extend_from_slice(&[0; 12]);
    h
}

fn garbage(rng: &mut Rng) -> Vec<u8> {
    match rng.below(6) {
        // Random bytes.
        0 => {
            let n = rng.range(1, 4096);
            rng.bytes(n)
        }
        // Random bytes after a binary magic.
        1 => {
            let n = rng.range(1, 200);
            let mut v = vec![0x80];
            v.extend(rng.bytes(n));
            v
        }
        // A binary header with arbitrary lengths and a little body.
        2 => {
            let op = rng.below(0x40) as u8;
            let keylen = *rng.pick(&[0u16, 1, 250, 251, 0xffff]);
            let extlen = *rng.pick(&[0u8, 4, 8, 20, 255]);
            let bodylen = *rng.pick(&[0u32, 1, 10, 300, 1 << 20, u32::MAX]);
            let mut v = binary_header(op, keylen, extlen, bodylen);
            let n = rng.range(0, 64);
            v.extend(rng.bytes(n));
            v
        }
        // Malformed commands, several, maybe cut short.
        3 => {
            let mut v = Vec::new();
            for _ in 0..rng.range(1, 5) {
                let m = rng.pick::<&[u8]>(MALFORMED);
                v.extend_from_slice(m);
            }
            let cut = rng.range(1, v.len());
            v.truncate(cut);
            v
        }
        // Words of the protocol in random order.
        4 => {
            const WORDS: &[&str] = &[
                "set",
                "get",
                "gets",
                "cas",
                "incr",
                "decr",
                "touch",
                "gat",
                "delete",
                "k",
                "0",
                "1",
                "-1",
                "100",
                "noreply",
                "\r\n",
                " ",
                "\n",
                "999999999999",
            ];
            let mut v = Vec::new();
            for _ in 0..rng.range(1, 40) {
                v.extend_from_slice(rng.pick(WORDS).as_bytes());
                if rng.chance(1, 2) {
                    v.push(b' ');
                }
            }
            v
        }
        // A line far longer than any command.
        _ => {
            let mut v = b"get ".to_vec();
            let n = rng.range(2048, 70_000);
            v.extend(std::iter::repeat_n(b'k', n));
            if rng.chance(1, 2) {
                v.extend_from_slice(b"\r\n");
            }
            v
        }
    }
}

fn works(server: &ServerProcess, tag: &str) {
    let mut c = server.client();
    assert_eq!(c.set("sane", 1, 0, tag.as_bytes()), "STORED", "{tag}");
    assert_eq!(c.get("sane"), Some((1, tag.as_bytes().to_vec())), "{tag}");
}

#[test]
fn garbage_never_brings_the_server_down() {
    garbage_connections("garbage_never_brings_the_server_down", Ours::Hosted(1));
}

#[test]
fn garbage_never_brings_the_server_down_natively() {
    let test = "garbage_never_brings_the_server_down_natively";
    garbage_connections(test, Ours::Native(1));
}

/// 1,000 connections of seeded garbage, a sane client every 100.
fn garbage_connections(test: &'static str, ours: Ours) {
    common::bounded(test, Duration::from_secs(180), move || {
        let start = Instant::now();
        let Some(mut server) = ours.start(test, &[]) else {
            return;
        };
        let mut stats = server.client();
        let baseline = stats.stat("curr_connections");
        let mut rng = Rng::new(0x6a5b_a6e5);
        for i in 0..1_000 {
            let bytes = garbage(&mut rng);
            let mut s = TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
            s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
            // The server may close first (a binary error, a long line): that is fine.
            let _ = s.write_all(&bytes);
            if i % 10 == 0 {
                // Sometimes wait a little for whatever the server answers.
                s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
                let mut sink = [0u8; 65536];
                let _ = s.read(&mut sink);
            }
            drop(s);
            if i % 100 == 99 {
                server.assert_alive();
                works(&server, &format!("after {} garbage connections", i + 1));
            }
        }
        // Every garbage connection goes away.
        let mut last = 0;
        let settled = wait_for(Duration::from_secs(15), || {
            last = stats.stat("curr_connections");
            last == baseline
        });
        assert!(settled, "curr_connections {last}, baseline {baseline}");
        works(&server, "at the end");
        server.assert_alive();
        println!(
            "1,000 garbage connections to {} in {:?}",
            server.name,
            start.elapsed()
        );
    });
}

#[test]
fn pipelined_requests_in_one_write() {
    pipelined("pipelined_requests_in_one_write", Ours::Hosted(1));
}

#[test]
fn pipelined_requests_in_one_write_natively() {
    pipelined("pipelined_requests_in_one_write_natively", Ours::Native(1));
}

/// 500 requests of every kind in one write: the replies are exactly memcached's.
fn pipelined(test: &'static str, ours: Ours) {
    common::bounded(test, Duration::from_secs(60), move || {
        let Some(server) = ours.start(test, &[]) else {
            return;
        };
        let mut c = server.client();
        let mut req = Vec::new();
        let mut want = Vec::new();
        for i in 0..500 {
            let key = format!("p{}", i % 17);
            match i % 5 {
                0 => {
                    let value = format!("v{i}\r\n{i}");
                    req.extend(format!("set {key} {i} 0 {}\r\n{value}\r\n", value.len()).bytes());
                    want.extend(b"STORED\r\n");
                    req.extend(format!("get {key}\r\n").bytes());
                    want.extend(
                        format!("VALUE {key} {i} {}\r\n{value}\r\nEND\r\n", value.len()).bytes(),
                    );
                }
                1 => {
                    req.extend(format!("set n{i} 0 0 1 noreply\r\n7\r\nincr n{i} 5\r\n").bytes());
                    want.extend(b"12\r\n");
                }
                2 => {
                    req.extend(format!("delete nothere{i}\r\n").bytes());
                    want.extend(b"NOT_FOUND\r\n");
                }
                3 => {
                    req.extend(b"bogus command\r\n");
                    want.extend(b"ERROR\r\n");
                }
                _ => {
                    // p0 exists from the first request on.
                    req.extend(b"add p0 0 0 1\r\nx\r\n");
                    want.extend(b"NOT_STORED\r\n");
                }
            }
        }
        req.extend(b"mn\r\n");
        want.extend(b"MN\r\n");
        c.send(&req);
        let mut got = Vec::new();
        loop {
            let line = c.line();
            got.extend_from_slice(&line);
            got.extend_from_slice(b"\r\n");
            if line == b"MN" {
                break;
            }
        }
        assert!(
            got == want,
            "pipelined replies differ:\n got {:?}\nwant {:?}",
            got.escape_ascii().to_string(),
            want.escape_ascii().to_string()
        );
    });
}

/// Writes `bytes` one byte per write (TCP_NODELAY, a pause after each).
fn dribble(c: &mut Client, bytes: &[u8]) {
    let mut s = c.stream().try_clone().unwrap();
    for b in bytes {
        s.write_all(&[*b]).unwrap();
        s.flush().unwrap();
        std::thread::sleep(Duration::from_micros(300));
    }
}

#[test]
fn one_byte_writes() {
    one_byte_at_a_time("one_byte_writes", Ours::Hosted(1));
}

#[test]
fn one_byte_writes_natively() {
    one_byte_at_a_time("one_byte_writes_natively", Ours::Native(1));
}

/// Text and binary requests written one byte per segment.
fn one_byte_at_a_time(test: &'static str, ours: Ours) {
    common::bounded(test, Duration::from_secs(60), move || {
        let Some(server) = ours.start(test, &[]) else {
            return;
        };
        // Text.
        let mut c = server.client();
        dribble(
            &mut c,
            b"set drip 5 0 12\r\nsplit\r\nvalue\r\nget drip\r\nincr nope 1\r\nbogus\r\n",
        );
        assert_eq!(c.line_str(), "STORED");
        assert_eq!(
            c.read_values(),
            vec![("drip".to_string(), 5, b"split\r\nvalue".to_vec())]
        );
        assert_eq!(c.line_str(), "NOT_FOUND");
        assert_eq!(c.line_str(), "ERROR");
        // Binary: SET then GETK, byte by byte.
        let mut b = server.client();
        let mut set = binary_header(0x01, 4, 8, 8 + 4 + 3);
        set.extend_from_slice(&7u32.to_be_bytes());
        set.extend_from_slice(&0u32.to_be_bytes());
        set.extend_from_slice(b"bkey");
        set.extend_from_slice(b"v\r\n");
        let mut getk = binary_header(0x0c, 4, 0, 4);
        getk.extend_from_slice(b"bkey");
        set.extend(getk);
        dribble(&mut b, &set);
        let h = b.read_exact(24);
        assert_eq!(&h[..2], &[0x81, 0x01], "SET response");
        assert_eq!(&h[6..8], &[0, 0], "SET status");
        assert_eq!(&h[8..12], &[0, 0, 0, 0], "SET body length");
        let h = b.read_exact(24);
        assert_eq!(&h[..2], &[0x81, 0x0c], "GETK response");
        assert_eq!(&h[6..8], &[0, 0], "GETK status");
        let body_len = u32::from_be_bytes(h[8..12].try_into().unwrap()) as usize;
        let body = b.read_exact(body_len);
        assert_eq!(body, b"\0\0\0\x07bkeyv\r\n", "GETK body: flags, key, value");
    });
}
