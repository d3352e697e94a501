//! The `text` and `binary` targets' seeds: every command and every refusal the parsers
//! know, pipelined, under a few segmentations and limits, so the fuzzer starts past the
//! command names and the binary length checks. `seeds_run_clean` replays each seed
//! through the targets' harness (on stable: CI checks the seeds without nightly) and
//! checks it parses as intended; `seed_files_are_current` checks `seeds/<target>/` holds
//! exactly these bytes, and `WRITE_SEEDS=1 cargo test --test seeds` rewrites them.

use std::path::{Path, PathBuf};

use memcached::protocol::{ErrorKind, Parsed};
use memcached_fuzz::run;

#[path = "../../../../crates/ebb-testkit/src/seed_files.rs"]
mod seed_files;

/// The 3-byte prefix: limits (item_size_max 2 KiB, max_get_line 4353), split, seed.
fn prefix(split: u8) -> Vec<u8> {
    vec![3 | (9 << 3), split, 0x42]
}

fn text_commands() -> Vec<u8> {
    [
        &b"get foo\r\ngets a b  c\r\ngat 10 a\r\ngats 0 a b\r\n"[..],
        b"set foo 5 100 3\r\nbar\r\nadd k 0 0 2 noreply\r\nhi\r\n",
        b"replace k 0 0 1\r\nx\r\nappend k 0 0 1\r\ny\r\nprepend k 0 0 1\r\nz\r\n",
        b"cas k 1 2 0 77\r\n\r\nset k 0 0 4\n\r\n\r\n\r\n",
        b"incr k 5\r\ndecr k 1 noreply\r\ntouch k 10\r\ndelete k\r\ndelete k noreply\r\n",
        b"flush_all\r\nflush_all 10 noreply\r\nversion\r\nverbosity 1\r\nstats\r\nstats items\r\n",
        b"mg foo v c f t s k h l u O123 q T30\r\nmg Zm9v b k v\r\nmg foo\r\n",
        b"ms foo 3 T0 F5 c k O1 q MS\r\nbar\r\nms Zm9v 1 b MA C7 I\r\nx\r\n",
        b"ms k 0 ME\r\n\r\nms k 1 MP\r\ny\r\nms k 1 MR C0\r\nz\r\n",
        b"md foo q C5 k O2 T10\r\nmd Zm9v b\r\n",
        b"ma n N0 J42 D7 MD v t c k O3 T5 q\r\nma n M+\r\nma Zm9v b MI C1\r\n",
        b"mn\r\nquit\r\n",
    ]
    .concat()
}

fn text_errors() -> Vec<u8> {
    let mut s = [
        &b"set k 0 0 3\r\nabcde\r\nset k x 0 3\r\nabc\r\nset k 0 0 -1\r\n"[..],
        b"set k 0 0 5000\r\n",
        &[b'z'; 5002],
        b"incr k x\r\ntouch k x\r\ngat x k\r\nget\r\nbogus\r\nbogus noreply\r\n\r\n",
        b"cas k 0 0 1\r\nx\r\nverbosity\r\nflush_all x\r\nshutdown\r\nme k\r\n",
        b"mg k v v\r\nmg k x\r\nmg k Tx\r\nmg Zm9v= b\r\nmg k N30\r\nmd k I\r\n",
        b"ma k MX\r\nma k Dx\r\nms k 2 MX\r\nhi\r\nms k 2 q q\r\nhi\r\nms k -1\r\n",
        b"ms k 3000 T0\r\n",
        &[b'm'; 3002],
        b"ms k 2\r\nhixx\r\nmg\r\n",
        b"get ",
    ]
    .concat();
    s.extend(std::iter::repeat_n(b'k', 251));
    s.extend_from_slice(b"\r\nGET / HTTP/1.1\r\n");
    s
}

fn text_long_get() -> Vec<u8> {
    let mut s = b"get ".to_vec();
    for i in 0..400 {
        s.extend_from_slice(format!("key{i} ").as_bytes());
    }
    s.extend_from_slice(b"\r\nincr ");
    s.extend(std::iter::repeat_n(b' ', 2100));
    s
}

fn bin(opcode: u8, key: &[u8], extras: &[u8], value: &[u8], opaque: u32, cas: u64) -> Vec<u8> {
    let mut b = vec![0x80, opcode];
    b.extend_from_slice(&(key.len() as u16).to_be_bytes());
    b.push(extras.len() as u8);
    b.extend_from_slice(&[0, 0, 0]);
    b.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    b.extend_from_slice(&opaque.to_be_bytes());
    b.extend_from_slice(&cas.to_be_bytes());
    b.extend_from_slice(extras);
    b.extend_from_slice(key);
    b.extend_from_slice(value);
    b
}

/// A binary stream without its first byte (the harness supplies the 0x80).
fn binary(packets: &[Vec<u8>]) -> Vec<u8> {
    packets.concat()[1..].to_vec()
}

fn binary_commands() -> Vec<u8> {
    let set = [0, 0, 0, 1, 0, 0, 0, 60];
    let mut incr = 10u64.to_be_bytes().to_vec();
    incr.extend_from_slice(&3u64.to_be_bytes());
    incr.extend_from_slice(&60u32.to_be_bytes());
    let exp = 9u32.to_be_bytes();
    binary(&[
        bin(0x00, b"foo", &[], &[], 1, 0),
        bin(0x09, b"foo", &[], &[], 2, 0),
        bin(0x0c, b"foo", &[], &[], 3, 0),
        bin(0x0d, b"foo", &[], &[], 4, 0),
        bin(0x01, b"k", &set, b"value", 5, 0),
        bin(0x11, b"k", &set, b"value", 6, 0),
        bin(0x02, b"k", &set, b"v", 7, 0),
        bin(0x12, b"k", &set, b"v", 8, 99),
        bin(0x03, b"k", &set, b"v", 9, 0),
        bin(0x13, b"k", &set, b"v", 10, 0),
        bin(0x0e, b"k", &[], b"tail", 11, 0),
        bin(0x19, b"k", &[], b"tail", 12, 0),
        bin(0x0f, b"k", &[], b"head", 13, 0),
        bin(0x1a, b"k", &[], b"head", 14, 0),
        bin(0x04, b"k", &[], &[], 15, 0),
        bin(0x14, b"k", &[], &[], 16, 5),
        bin(0x05, b"n", &incr, &[], 17, 0),
        bin(0x15, b"n", &incr, &[], 18, 0),
        bin(0x06, b"n", &incr, &[], 19, 0),
        bin(0x16, b"n", &incr, &[], 20, 0),
        bin(0x1c, b"k", &exp, &[], 21, 0),
        bin(0x1d, b"k", &exp, &[], 22, 0),
        bin(0x1e, b"k", &exp, &[], 23, 0),
        bin(0x23, b"k", &exp, &[], 24, 0),
        bin(0x24, b"k", &exp, &[], 25, 0),
        bin(0x08, b"", &[], &[], 26, 0),
        bin(0x18, b"", &exp, &[], 27, 0),
        bin(0x10, b"", &[], &[], 28, 0),
        bin(0x10, b"items", &[], &[], 29, 0),
        bin(0x0a, b"", &[], &[], 30, 0),
        bin(0x0b, b"", &[], &[], 31, 0),
        bin(0x17, b"", &[], &[], 32, 0),
    ])
}

fn binary_errors() -> Vec<u8> {
    let mut bad_lengths = bin(0x00, b"abc", &[], &[], 40, 0);
    bad_lengths[8..12].copy_from_slice(&2u32.to_be_bytes());
    binary(&[
        bin(0x1b, b"", &1u32.to_be_bytes(), &[], 33, 0),
        bin(0x21, b"PLAIN", &[], b"\0u\0p", 34, 0),
        bin(0x01, b"big", &[0; 8], &[b'x'; 3000], 35, 0),
        bin(0x0e, b"big", &[], &[b'x'; 3000], 36, 0),
        bin(0x0a, b"", &[], &[], 37, 0),
        bin(0x00, b"", &[], &[], 38, 0),
        bad_lengths,
    ])
}

fn binary_bad_magic() -> Vec<u8> {
    let mut s = binary(&[bin(0x0a, b"", &[], &[], 1, 0)]);
    s.extend_from_slice(&[0x81; 24]);
    s
}

/// A seed: target, file name, bytes, the error kinds its run must produce (in order).
type Seed = (&'static str, &'static str, Vec<u8>, Vec<ErrorKind>);

fn seeds() -> Vec<Seed> {
    use ErrorKind::*;
    let with = |split: u8, stream: Vec<u8>| [prefix(split), stream].concat();
    let text_errors_kinds = vec![
        BadDataChunk,
        BadFormat,
        BadFormat,
        BadFormat, // "set k 0 0 -1": not swallowed ...
        TooLarge,  // ... and "set k 0 0 5000" swallowed.
        InvalidDelta,
        InvalidExptime,
        InvalidExptime,
        BadFormat,
        UnknownCommand,
        UnknownCommand,
        BadFormat,
        BadFormat,
        BadFormat,
        InvalidExptime,
        Unsupported,
        Unsupported,
        // The meta refusals.
        BadFormat,
        BadFormat,
        BadFormat,
        BadFormat,
        BadFormat,
        BadFormat,
        BadFormat,
        BadFormat,
        BadFormat,
        BadFormat,
        BadFormat,
        TooLarge,
        BadDataChunk,
        BadFormat, // the "\r\n" after "hixx"
        UnknownCommand,
        BadFormat,
        Http,
    ];
    vec![
        ("text", "commands", with(11, text_commands()), vec![]),
        (
            "text",
            "commands-bytewise",
            with(0, text_commands()),
            vec![],
        ),
        (
            "text",
            "errors",
            with(5, text_errors()),
            text_errors_kinds.clone(),
        ),
        (
            "text",
            "errors-bytewise",
            with(0, text_errors()),
            text_errors_kinds,
        ),
        (
            "text",
            "long-get",
            with(8, text_long_get()),
            vec![LineTooLong],
        ),
        ("binary", "commands", with(11, binary_commands()), vec![]),
        (
            "binary",
            "commands-bytewise",
            with(0, binary_commands()),
            vec![],
        ),
        (
            "binary",
            "errors",
            with(6, binary_errors()),
            vec![
                UnknownOpcode,
                UnknownOpcode,
                TooLarge,
                TooLarge,
                InvalidArguments,
            ],
        ),
        (
            "binary",
            "bad-magic",
            with(3, binary_bad_magic()),
            vec![BadMagic],
        ),
    ]
}

#[test]
fn seeds_run_clean() {
    for (target, name, bytes, kinds) in seeds() {
        let out = run(&bytes, target == "binary");
        let errors: Vec<ErrorKind> = out
            .parsed
            .iter()
            .filter_map(|p| match p {
                Parsed::Error(e) => Some(e.kind),
                _ => None,
            })
            .collect();
        assert_eq!(errors, kinds, "{target}/{name}: {:?}", out.parsed);
        let requests = out
            .parsed
            .iter()
            .filter(|p| matches!(p, Parsed::Request(_)))
            .count();
        assert!(
            requests > 0 || !kinds.is_empty(),
            "{target}/{name} parsed nothing"
        );
        let closed = matches!(out.parsed.last(), Some(Parsed::Error(e)) if e.close);
        assert!(out.rest.is_empty() || closed, "{target}/{name} left bytes");
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
