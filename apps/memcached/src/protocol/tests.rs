//! Byte-fixture tests of the parsers and encoders, pipelining, every split of every
//! fixture, and zero copy. Expected bytes are memcached 1.6.45's (see the sources cited
//! in the parser modules).

use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use ebb::{IOBuf, IOBufChain};
use proptest::prelude::*;

use super::*;

fn chain(bytes: &[u8]) -> IOBufChain {
    IOBufChain::from(IOBuf::copy_from_slice(bytes))
}

/// A chain's buffers, as a reply's value borrows them.
fn bufs(chain: &IOBufChain) -> Vec<IOBuf> {
    chain.iter().cloned().collect()
}

/// Feeds `segments` one at a time, parsing after each until the parser needs more (or
/// closes), as a connection would.
fn feed(limits: Limits, segments: &[&[u8]]) -> (Vec<Parsed>, IOBufChain) {
    let mut p = Parser::new(limits);
    let mut input = IOBufChain::new();
    let mut out = Vec::new();
    'segments: for seg in segments {
        input.push_back(IOBuf::copy_from_slice(seg));
        loop {
            let before = input.len();
            let parsed = p.parse(&mut input);
            match &parsed {
                Parsed::Incomplete => break,
                Parsed::Error(e) if e.close => {
                    out.push(parsed);
                    break 'segments;
                }
                _ => assert!(input.len() < before, "no progress on {parsed:?}"),
            }
            out.push(parsed);
        }
    }
    (out, input)
}

fn all(bytes: &[u8]) -> Vec<Parsed> {
    feed(Limits::default(), &[bytes]).0
}

fn one(bytes: &[u8]) -> Parsed {
    let mut v = all(bytes);
    assert_eq!(
        v.len(),
        1,
        "expected one outcome from {:?}: {v:?}",
        bytes.escape_ascii()
    );
    v.remove(0)
}

fn req(bytes: &[u8]) -> Command {
    match one(bytes) {
        Parsed::Request(c) => c,
        other => panic!(
            "expected a request from {:?}, got {other:?}",
            bytes.escape_ascii()
        ),
    }
}

fn text_to(noreply: bool) -> ReplyTo {
    ReplyTo::Text {
        noreply,
        cas: false,
    }
}

/// The reply bytes of an error, and whether it closes.
fn err(p: &Parsed) -> (ErrorKind, Vec<u8>, bool) {
    match p {
        Parsed::Error(e) => (e.kind, e.reply.to_vec(), e.close),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn key(s: &str) -> Key {
    Key::new(s.as_bytes())
}

const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";

// ---------------------------------------------------------------- text requests

#[test]
fn text_get_family() {
    assert_eq!(
        req(b"get foo\r\n"),
        Command {
            request: Request::Get {
                keys: smallvec::smallvec![key("foo")],
                cas: false,
                touch: None
            },
            reply_to: text_to(false),
        }
    );
    assert_eq!(
        req(b"gets a  b c\r\n").request,
        Request::Get {
            keys: smallvec::smallvec![key("a"), key("b"), key("c")],
            cas: true,
            touch: None
        }
    );
    assert_eq!(
        req(b"gets a\r\n").reply_to,
        ReplyTo::Text {
            noreply: false,
            cas: true
        }
    );
    assert_eq!(
        req(b"gat 100 a b\n").request,
        Request::Get {
            keys: smallvec::smallvec![key("a"), key("b")],
            cas: false,
            touch: Some(100)
        }
    );
    assert_eq!(
        req(b"gats -1 a\r\n").request,
        Request::Get {
            keys: smallvec::smallvec![key("a")],
            cas: true,
            touch: Some(-1)
        }
    );
    // More keys than the tokenizer's 23 tokens: all are read.
    let mut line = b"get".to_vec();
    for i in 0..40 {
        line.extend_from_slice(alloc::format!(" k{i}").as_bytes());
    }
    line.extend_from_slice(b"\r\n");
    let Request::Get { keys, .. } = req(&line).request else {
        panic!()
    };
    assert_eq!(keys.len(), 40);
    // `noreply` is just a key to get.
    assert_eq!(
        req(b"get a noreply\r\n").request,
        Request::Get {
            keys: smallvec::smallvec![key("a"), key("noreply")],
            cas: false,
            touch: None
        }
    );
}

#[test]
fn text_get_errors() {
    assert_eq!(err(&one(b"get\r\n")).1, BAD_FORMAT);
    assert_eq!(err(&one(b"get    \r\n")).1, BAD_FORMAT);
    let long = [b'k'; 251];
    let mut line = b"get a ".to_vec();
    line.extend_from_slice(&long);
    line.extend_from_slice(b"\r\n");
    assert_eq!(
        err(&one(&line)),
        (ErrorKind::BadFormat, BAD_FORMAT.to_vec(), false)
    );
    let mut ok = b"get ".to_vec();
    ok.extend_from_slice(&long[..250]);
    ok.extend_from_slice(b"\r\n");
    assert!(matches!(one(&ok), Parsed::Request(_)));
    assert_eq!(
        err(&one(b"gat abc k\r\n")).1,
        b"CLIENT_ERROR invalid exptime argument\r\n"
    );
    assert_eq!(err(&one(b"gat 10\r\n")).1, BAD_FORMAT);
}

#[test]
fn text_storage_commands() {
    let c = req(b"set foo 5 100 3\r\nbar\r\n");
    assert_eq!(
        c.request,
        Request::Store {
            mode: StoreMode::Set,
            key: key("foo"),
            flags: 5,
            exptime: 100,
            cas: 0,
            value: chain(b"bar"),
        }
    );
    assert_eq!(c.reply_to, text_to(false));
    for (cmd, mode) in [
        ("add", StoreMode::Add),
        ("replace", StoreMode::Replace),
        ("append", StoreMode::Append),
        ("prepend", StoreMode::Prepend),
    ] {
        let line = alloc::format!("{cmd} k 0 0 2 noreply\r\nhi\r\n");
        let c = req(line.as_bytes());
        assert_eq!(c.reply_to, text_to(true), "{cmd}");
        let Request::Store { mode: m, value, .. } = c.request else {
            panic!()
        };
        assert_eq!((m, value.to_vec()), (mode, b"hi".to_vec()));
    }
    let c = req(b"cas k 1 2 0 77 noreply\r\n\r\n");
    assert_eq!(
        c.request,
        Request::Store {
            mode: StoreMode::Cas,
            key: key("k"),
            flags: 1,
            exptime: 2,
            cas: 77,
            value: IOBufChain::new(),
        }
    );
    assert_eq!(c.reply_to, text_to(true));
    // A value holding "\r\n" itself; a bare "\n" command terminator.
    let Request::Store { value, .. } = req(b"set k 0 0 4\n\r\n\r\n\r\n").request else {
        panic!()
    };
    assert_eq!(value.to_vec(), b"\r\n\r\n");
    // strtol/strtoul quirks: a sign, flags truncated to 32 bits, negative exptime.
    let Request::Store { flags, exptime, .. } = req(b"set k +7 -1 1\r\nx\r\n").request else {
        panic!()
    };
    assert_eq!((flags, exptime), (7, -1));
    let Request::Store { flags, .. } = req(b"set k 4294967297 0 1\r\nx\r\n").request else {
        panic!()
    };
    assert_eq!(flags, 1);
}

#[test]
fn text_storage_errors() {
    // Refused by process_request: nothing swallowed, the data line is read as a command.
    let v = all(b"set k 0 0\r\nset k 0 0 -1\r\nset k 0 0 x\r\nxyz\r\n");
    let replies: Vec<_> = v.iter().map(|p| err(p).1).collect();
    assert_eq!(
        replies,
        vec![
            BAD_FORMAT.to_vec(),
            BAD_FORMAT.to_vec(),
            BAD_FORMAT.to_vec(),
            b"ERROR\r\n".to_vec()
        ]
    );
    // Refused after: the data block is swallowed.
    let long = "k".repeat(251);
    for line in [
        alloc::format!("set {long} 0 0 3\r\nabc\r\nget a\r\n"),
        "set k x 0 3\r\nabc\r\nget a\r\n".into(),
        "set k -1 0 3\r\nabc\r\nget a\r\n".into(),
        "set k 0 1.5 3\r\nabc\r\nget a\r\n".into(),
        "cas k 0 0 3\r\nabc\r\nget a\r\n".into(),
        "cas k 0 0 3 -5\r\nabc\r\nget a\r\n".into(),
    ] {
        let v = all(line.as_bytes());
        assert_eq!(v.len(), 2, "{line}: {v:?}");
        assert_eq!(err(&v[0]).1, BAD_FORMAT, "{line}");
        assert!(matches!(v[1], Parsed::Request(_)), "{line}");
    }
    // noreply silences the error, swallowing still happens.
    let v = all(b"set k x 0 3 noreply\r\nabc\r\n");
    assert_eq!(err(&v[0]), (ErrorKind::BadFormat, vec![], false));
    assert_eq!(v.len(), 1);
}

#[test]
fn text_bad_data_chunk() {
    // The block is bytes + 2 long, whatever it holds; the next command follows it.
    let v = all(b"set k 0 0 3\r\nabcde\r\nget k\r\n");
    assert_eq!(
        err(&v[0]),
        (
            ErrorKind::BadDataChunk,
            b"CLIENT_ERROR bad data chunk\r\n".to_vec(),
            false
        )
    );
    assert_eq!(
        err(&v[1]).1,
        BAD_FORMAT,
        "\"e\\r\\n\" read as a (too short) command"
    );
    assert!(matches!(v[2], Parsed::Request(_)));
    assert_eq!(v.len(), 3);
    let v = all(b"set k 0 0 1 noreply\r\nabc\r\n");
    assert_eq!(err(&v[0]).1, b"");
}

#[test]
fn text_too_large() {
    let limits = Limits {
        item_size_max: 1024,
        ..Limits::default()
    };
    // 48 + 1 + 1 + 0 + value + 2 + 8 <= 1024: the largest value with key "k" is 964.
    let fits = |n: usize| {
        let mut b = alloc::format!("set k 0 0 {n}\r\n").into_bytes();
        b.extend(core::iter::repeat_n(b'v', n));
        b.extend_from_slice(b"\r\nget k\r\n");
        feed(limits, &[&b]).0
    };
    assert!(matches!(fits(964)[0], Parsed::Request(_)));
    let v = fits(965);
    assert_eq!(
        v[0],
        Parsed::Error(ParseError {
            kind: ErrorKind::TooLarge,
            reply: chain(b"SERVER_ERROR object too large for cache\r\n"),
            close: false,
            unlink: Some(key("k")),
        })
    );
    assert!(matches!(v[1], Parsed::Request(_)), "swallowed exactly");
    // Only a set drops the old item.
    let v = feed(limits, &[b"add k 0 0 2000 noreply\r\n"]).0;
    assert_eq!(
        v[0],
        Parsed::Error(ParseError {
            kind: ErrorKind::TooLarge,
            reply: IOBufChain::new(),
            close: false,
            unlink: None,
        })
    );
    // The swallowing continues over later segments.
    let mut big = vec![b'x'; 3000];
    big.extend_from_slice(b"\r\n");
    let (v, rest) = feed(
        limits,
        &[
            b"set k 0 0 3000\r\n",
            &big[..1000],
            &big[1000..],
            b"version\r\n",
        ],
    );
    assert_eq!(v.len(), 2);
    assert_eq!(v[1], req(b"version\r\n").into_parsed());
    assert!(rest.is_empty());
}

impl Command {
    fn into_parsed(self) -> Parsed {
        Parsed::Request(self)
    }
}

#[test]
fn text_arith_touch_delete() {
    assert_eq!(
        req(b"incr k 5\r\n").request,
        Request::Arith {
            key: key("k"),
            incr: true,
            delta: 5,
            initial: None,
            exptime: 0,
            cas: 0
        }
    );
    let c = req(b"decr k 18446744073709551615 noreply\r\n");
    assert_eq!(c.reply_to, text_to(true));
    assert!(matches!(
        c.request,
        Request::Arith {
            incr: false,
            delta: u64::MAX,
            ..
        }
    ));
    let delta_err = b"CLIENT_ERROR invalid numeric delta argument\r\n";
    assert_eq!(err(&one(b"incr k -1\r\n")).1, delta_err);
    assert_eq!(err(&one(b"incr k 18446744073709551616\r\n")).1, delta_err);
    assert_eq!(err(&one(b"incr k abc\r\n")).1, delta_err);
    assert_eq!(
        err(&one(b"incr k noreply\r\n")).1,
        b"",
        "noreply taken as the delta"
    );
    assert_eq!(err(&one(b"incr k\r\n")).1, BAD_FORMAT);

    assert_eq!(
        req(b"touch k 10\r\n").request,
        Request::Touch {
            key: key("k"),
            exptime: 10
        }
    );
    assert_eq!(
        err(&one(b"touch k x\r\n")).1,
        b"CLIENT_ERROR invalid exptime argument\r\n"
    );
    assert_eq!(err(&one(b"touch k\r\n")).1, BAD_FORMAT);

    let c = req(b"delete k noreply\r\n");
    assert_eq!(
        (c.request, c.reply_to),
        (
            Request::Delete {
                key: key("k"),
                cas: 0
            },
            text_to(true)
        )
    );
    // 1.6.45 (process_delete_cmd after _process_request_simple(pr, 2)): every token
    // after the key is ignored; noreply is the last token's being `noreply`.
    let deletes: &[(&[u8], &str, bool)] = &[
        (b"delete k\r\n", "k", false),
        (b"delete k 0\r\n", "k", false),
        (b"delete k 1\r\n", "k", false),
        (b"delete k 0 noreply\r\n", "k", true),
        (b"delete a b c d\r\n", "a", false),
        (b"delete a b c d e\r\n", "a", false),
        (b"delete k noreply x\r\n", "k", false),
        (b"delete k x y noreply\r\n", "k", true),
        (b"delete noreply\r\n", "noreply", true),
    ];
    for &(line, k, noreply) in deletes {
        let c = req(line);
        assert_eq!(
            (c.request, c.reply_to),
            (
                Request::Delete {
                    key: key(k),
                    cas: 0
                },
                text_to(noreply)
            ),
            "{:?}",
            line.escape_ascii().to_string()
        );
    }
    assert_eq!(err(&one(b"delete\r\n")).1, BAD_FORMAT);
    let mut long = b"delete ".to_vec();
    long.extend_from_slice(&[b'k'; 251]);
    long.extend_from_slice(b" noreply\r\n");
    assert_eq!(err(&one(&long)), (ErrorKind::BadFormat, vec![], false));
}

#[test]
fn text_admin_commands() {
    assert_eq!(
        req(b"flush_all\r\n").request,
        Request::FlushAll { delay: 0 }
    );
    let c = req(b"flush_all noreply\r\n");
    assert_eq!(
        (c.request, c.reply_to),
        (Request::FlushAll { delay: 0 }, text_to(true))
    );
    assert_eq!(
        req(b"flush_all 30\r\n").request,
        Request::FlushAll { delay: 30 }
    );
    let c = req(b"flush_all -5 noreply\r\n");
    assert_eq!(
        (c.request, c.reply_to),
        (Request::FlushAll { delay: -5 }, text_to(true))
    );
    assert_eq!(
        err(&one(b"flush_all x\r\n")).1,
        b"CLIENT_ERROR invalid exptime argument\r\n"
    );
    assert_eq!(req(b"version\r\n").request, Request::Version);
    assert_eq!(req(b"quit\r\n").request, Request::Quit);
    assert_eq!(req(b"mn\r\n").request, Request::Noop);
    assert_eq!(req(b"stats\r\n").request, Request::Stats { args: vec![] });
    assert_eq!(
        req(b"stats detail on\r\n").request,
        Request::Stats {
            args: vec![b"detail".to_vec(), b"on".to_vec()]
        }
    );
    assert_eq!(
        req(b"verbosity 1\r\n").request,
        Request::Verbosity { level: 1 }
    );
    assert_eq!(req(b"verbosity 1 noreply\r\n").reply_to, text_to(true));
    assert_eq!(err(&one(b"verbosity\r\n")).1, BAD_FORMAT);
    assert_eq!(
        err(&one(b"shutdown\r\n")).1,
        b"SERVER_ERROR: shutdown not enabled\r\n"
    );
}

#[test]
fn text_unknown_and_malformed() {
    assert_eq!(
        err(&one(b"bogus\r\n")),
        (ErrorKind::UnknownCommand, b"ERROR\r\n".to_vec(), false)
    );
    assert_eq!(err(&one(b"bogus noreply\r\n")).1, b"");
    assert_eq!(err(&one(b" get a\r\n")).1, b"ERROR\r\n", "a leading space");
    assert_eq!(
        err(&one(b"GET a\r\n")).1,
        b"ERROR\r\n",
        "commands are lower case"
    );
    assert_eq!(err(&one(b"\r\n")).1, BAD_FORMAT, "shorter than 4 bytes");
    assert_eq!(err(&one(b"mn\n")).1, BAD_FORMAT, "shorter than 4 bytes");
    assert_eq!(
        err(&one(b"me k\r\n")).1,
        b"ERROR\r\n",
        "meta debug not offered"
    );
    assert_eq!(
        err(&one(b"GET / HTTP/1.1\r\n")),
        (ErrorKind::Http, vec![], true)
    );
}

#[test]
fn text_long_lines() {
    // Over 2048 bytes without a newline: closed, unless it is a get.
    let mut incr = b"incr ".to_vec();
    incr.extend(core::iter::repeat_n(b' ', 2048));
    assert_eq!(err(&one(&incr)), (ErrorKind::LineTooLong, vec![], true));
    let mut get = b"get ".to_vec();
    get.extend(core::iter::repeat_n(b' ', 2048));
    get.extend_from_slice(b" manyspaces");
    let (v, rest) = feed(Limits::default(), &[&get]);
    assert!(v.is_empty());
    assert_eq!(rest.len(), get.len(), "left intact");
    get.extend_from_slice(b"\r\n");
    assert_eq!(
        req(&get).request,
        Request::Get {
            keys: smallvec::smallvec![key("manyspaces")],
            cas: false,
            touch: None
        }
    );
    // The same line arriving whole is treated alike.
    incr.extend_from_slice(b"k 1\r\n");
    assert_eq!(err(&one(&incr)).0, ErrorKind::LineTooLong);
    // More than 100 leading spaces.
    let mut spaced = vec![b' '; 101];
    spaced.extend_from_slice(b"get ");
    spaced.extend(core::iter::repeat_n(b'a', 2000));
    assert_eq!(err(&one(&spaced)).0, ErrorKind::LineTooLong);
    // A get longer than max_get_line.
    let limits = Limits {
        max_get_line: 4000,
        ..Limits::default()
    };
    let mut huge = b"get ".to_vec();
    huge.extend(core::iter::repeat_n(b'a', 4001));
    assert_eq!(err(&feed(limits, &[&huge]).0[0]).0, ErrorKind::LineTooLong);
}

#[test]
fn text_incomplete_leaves_input() {
    for partial in [
        &b"get foo"[..],
        b"set k 0 0 5\r\nab",
        b"set k 0 0 5\r\nabcde\r",
        b"set k 0 0 5",
    ] {
        let mut p = Parser::new(Limits::default());
        let mut input = chain(partial);
        assert_eq!(p.parse(&mut input), Parsed::Incomplete);
        assert_eq!(input.to_vec(), partial);
    }
}

#[test]
fn text_pipelined_in_one_segment() {
    let mut stream = Vec::new();
    for i in 0..100 {
        stream.extend_from_slice(
            alloc::format!("set k{i} 0 0 1\r\n{}\r\nget k{i}\r\n", i % 10).as_bytes(),
        );
    }
    let v = all(&stream);
    assert_eq!(v.len(), 200);
    assert!(v.iter().all(|p| matches!(p, Parsed::Request(_))));
}

#[test]
fn text_value_is_not_copied() {
    let buf = IOBuf::copy_from_slice(b"set k 0 0 5\r\nhello\r\n");
    let mut input = IOBufChain::from(buf.clone());
    let mut p = Parser::new(Limits::default());
    let Parsed::Request(Command {
        request: Request::Store { value, .. },
        ..
    }) = p.parse(&mut input)
    else {
        panic!()
    };
    assert_eq!(value.to_vec(), b"hello");
    assert!(value.iter().all(|seg| seg.shares_storage_with(&buf)));
}

// ---------------------------------------------------------------- meta commands

fn meta_flags(r: &Request) -> &MetaFlags {
    match r {
        Request::MetaGet { flags, .. }
        | Request::MetaDelete { flags, .. }
        | Request::MetaArith { flags, .. } => flags,
        Request::MetaSet { flags, .. } => flags,
        other => panic!("not a meta request: {other:?}"),
    }
}

#[test]
fn meta_get_flags() {
    let r = req(b"mg foo v k O123 T30 q s t c f h l u\r\n").request;
    let Request::MetaGet { key: k, flags } = &r else {
        panic!("{r:?}")
    };
    assert_eq!(*k, key("foo"));
    assert_eq!(flags.cmd, MetaCmd::Get);
    assert!(flags.value && flags.quiet && flags.no_bump && !flags.base64);
    assert_eq!(flags.ttl, Some(30));
    assert_eq!(
        flags.tokens,
        vec![
            MetaToken::Key,
            MetaToken::Opaque(b"O123".to_vec()),
            MetaToken::SetTtl,
            MetaToken::Size,
            MetaToken::Ttl,
            MetaToken::Cas,
            MetaToken::Flags,
            MetaToken::Hit,
            MetaToken::LastAccess,
        ]
    );
    // No flags at all; the proxy flags P and L are accepted and ignored.
    let r = req(b"mg foo\r\n").request;
    assert!(meta_flags(&r).tokens.is_empty());
    assert!(
        meta_flags(&req(b"mg foo P L\r\n").request)
            .tokens
            .is_empty()
    );
    // b: the key is base64, decoded here.
    let r = req(b"mg Zm9v b k\r\n").request;
    assert!(matches!(&r, Request::MetaGet { key: k, flags } if *k == key("foo") && flags.base64));
}

#[test]
fn meta_errors() {
    // As memcached 1.6.18 answered each line.
    let long_key = [b"mg ".as_slice(), &[b'k'; 251], b" v\r\n"].concat();
    let cases: &[(&[u8], &[u8])] = &[
        (b"mg\r\n", b"ERROR\r\n"),
        (b"md\r\n", b"ERROR\r\n"),
        (b"ma\r\n", b"ERROR\r\n"),
        (b"mz foo\r\n", b"ERROR\r\n"),
        (b"me foo\r\n", b"ERROR\r\n"),
        (&long_key, BAD_FORMAT),
        (b"mg foo x\r\n", b"CLIENT_ERROR invalid flag\r\n"),
        (b"mg foo v v\r\n", b"CLIENT_ERROR duplicate flag\r\n"),
        (b"mg foo t T30 t\r\n", b"CLIENT_ERROR duplicate flag\r\n"),
        (b"mg foo \xff\r\n", b"CLIENT_ERROR duplicate flag\r\n"),
        (
            b"mg foo Tx\r\n",
            b"CLIENT_ERROR bad token in command line format\r\n",
        ),
        (
            b"mg foo T\r\n",
            b"CLIENT_ERROR bad token in command line format\r\n",
        ),
        // A failed flag lets parsing go on: a later unknown flag has the last word.
        (b"mg foo Tx z\r\n", b"CLIENT_ERROR invalid flag\r\n"),
        (b"mg Zm9v= b\r\n", b"CLIENT_ERROR error decoding key\r\n"),
        (b"mg !!!! b\r\n", b"CLIENT_ERROR error decoding key\r\n"),
        (
            b"mg foo Oabcdefghijabcdefghijabcdefghijab\r\n",
            b"CLIENT_ERROR opaque token too long\r\n",
        ),
        (
            b"mg foo a b c d e f g h i j k l m n o p q r\r\n",
            b"CLIENT_ERROR options flags are too long\r\n",
        ),
        (
            b"md foo a b c d e f g h i j k l m n o p q r\r\n",
            b"CLIENT_ERROR options flags too long\r\n",
        ),
        // Not offered here (memcached 1.6.18 takes them): refused as unknown flags.
        (b"mg foo N30\r\n", b"CLIENT_ERROR invalid flag\r\n"),
        (b"mg foo R30\r\n", b"CLIENT_ERROR invalid flag\r\n"),
        (
            b"md foo I\r\n",
            b"CLIENT_ERROR invalid or duplicate flag\r\n",
        ),
        (
            b"md foo Y\r\n",
            b"CLIENT_ERROR invalid or duplicate flag\r\n",
        ),
        (
            b"md foo q q\r\n",
            b"CLIENT_ERROR invalid or duplicate flag\r\n",
        ),
        (
            b"ma foo D-1\r\n",
            b"CLIENT_ERROR invalid or duplicate flag\r\n",
        ),
        (
            b"ma foo Dx\r\n",
            b"CLIENT_ERROR invalid or duplicate flag\r\n",
        ),
        (
            b"ma foo J\r\n",
            b"CLIENT_ERROR invalid or duplicate flag\r\n",
        ),
        (
            b"ma foo MX\r\n",
            b"CLIENT_ERROR invalid mode for ma M token\r\n",
        ),
        (
            b"ma foo MII\r\n",
            b"CLIENT_ERROR invalid or duplicate flag\r\n",
        ),
        (b"ms foo\r\n", BAD_FORMAT),
        (b"ms foo -1\r\n", BAD_FORMAT),
        (b"ms foo x\r\n", BAD_FORMAT),
    ];
    for (line, want) in cases {
        let v = all(line);
        assert_eq!(v.len(), 1, "{}", line.escape_ascii());
        let (_, reply, close) = err(&v[0]);
        assert_eq!(
            reply.escape_ascii().to_string(),
            want.escape_ascii().to_string(),
            "{}",
            line.escape_ascii()
        );
        assert!(!close);
    }
    // q never hides an error.
    assert_eq!(
        err(&one(b"mg foo q x\r\n")).1,
        b"CLIENT_ERROR invalid flag\r\n"
    );
}

#[test]
fn meta_set_reads_its_block() {
    let r = req(b"ms foo 2 T30 F5 c k MA C7\r\nhi\r\n").request;
    let Request::MetaSet {
        mode,
        key: k,
        client_flags,
        exptime,
        cas,
        value,
        flags,
    } = &r
    else {
        panic!("{r:?}")
    };
    assert_eq!(
        (*mode, k, *client_flags, *exptime, *cas),
        (StoreMode::Append, &key("foo"), 5, 30, 7)
    );
    assert_eq!(value.to_vec(), b"hi");
    assert_eq!(
        flags.tokens,
        vec![MetaToken::SetTtl, MetaToken::Cas, MetaToken::Key]
    );
    // Modes, and what a C does to each.
    for (line, want) in [
        (&b"ms k 1\r\nx\r\n"[..], (StoreMode::Set, 0)),
        (b"ms k 1 MS C3\r\nx\r\n", (StoreMode::Cas, 3)),
        (b"ms k 1 MR C0\r\nx\r\n", (StoreMode::Cas, 0)),
        (b"ms k 1 MR\r\nx\r\n", (StoreMode::Replace, 0)),
        (b"ms k 1 ME C3\r\nx\r\n", (StoreMode::Add, 0)),
        (b"ms k 1 MP C3\r\nx\r\n", (StoreMode::Prepend, 3)),
        (b"ms k 1 I\r\nx\r\n", (StoreMode::Set, 0)),
    ] {
        let r = req(line).request;
        let Request::MetaSet { mode, cas, .. } = r else {
            panic!("{r:?}")
        };
        assert_eq!((mode, cas), want, "{}", line.escape_ascii());
    }
    // A refused ms swallows its block once its length is known; before, it does not
    // (1.6.18 then reads the block as a command).
    for (input, want) in [
        (
            &b"ms k 2 Zbad\r\nhi\r\nmn\r\n"[..],
            &b"CLIENT_ERROR invalid flag\r\n"[..],
        ),
        (
            b"ms k 2 MX\r\nhi\r\nmn\r\n",
            b"CLIENT_ERROR invalid mode for ms M token\r\n",
        ),
        (
            b"ms k 2 q q\r\nhi\r\nmn\r\n",
            b"CLIENT_ERROR duplicate flag\r\n",
        ),
        (b"ms k 2 F-1\r\nhi\r\nmn\r\n", BAD_FORMAT),
        (
            b"ms k 2 C1 I\r\nhi\r\nmn\r\n",
            b"CLIENT_ERROR invalid flag\r\n",
        ),
    ] {
        let v = all(input);
        assert_eq!(v.len(), 2, "{}", input.escape_ascii());
        assert_eq!(err(&v[0]).1, want, "{}", input.escape_ascii());
        assert_eq!(v[1], Parsed::Request(req(b"mn\r\n")));
    }
    let v = all(b"ms k\r\nhi\r\n");
    assert_eq!(err(&v[0]).1, BAD_FORMAT);
    assert_eq!(err(&v[1]).1, b"ERROR\r\n", "the block read as a command");
    // A bad chunk is reported even with q.
    let v = all(b"ms k 2 q\r\nhixx\r\n");
    assert_eq!(err(&v[0]).1, b"CLIENT_ERROR bad data chunk\r\n");
    // Too large: refused, swallowed, the key's item dropped whatever the mode.
    let limits = Limits {
        item_size_max: 1024,
        ..Limits::default()
    };
    let mut input = [b"ms big 2000 ME q\r\n".as_slice(), &[b'x'; 2002], b"mn\r\n"].concat();
    let (v, rest) = feed(limits, &[&input]);
    assert!(rest.is_empty());
    let Parsed::Error(e) = &v[0] else { panic!() };
    assert_eq!(
        e.reply.to_vec(),
        b"SERVER_ERROR object too large for cache\r\n"
    );
    assert_eq!(e.unlink, Some(key("big")));
    assert_eq!(v[1], Parsed::Request(req(b"mn\r\n")));
    input.truncate(30);
    let (v, _) = feed(limits, &[&input]);
    assert_eq!(v.len(), 1, "the error is known before the block arrives");
}

#[test]
fn meta_set_value_is_not_copied() {
    let buf = IOBuf::copy_from_slice(b"ms k 5 T0\r\nhello\r\n");
    let mut input = IOBufChain::from(buf.clone());
    let mut p = Parser::new(Limits::default());
    let Parsed::Request(Command {
        request: Request::MetaSet { value, .. },
        ..
    }) = p.parse(&mut input)
    else {
        panic!()
    };
    assert_eq!(value.to_vec(), b"hello");
    assert!(value.iter().all(|seg| seg.shares_storage_with(&buf)));
}

#[test]
fn meta_delete_and_arith_flags() {
    let r = req(b"md foo C5 q k O1 T10\r\n").request;
    let f = meta_flags(&r);
    assert_eq!((f.cas, f.quiet, f.ttl), (Some(5), true, Some(10)));
    let r = req(b"ma foo N0 J42 D7 MD v t c\r\n").request;
    let f = meta_flags(&r);
    assert_eq!(
        (f.vivify, f.initial, f.delta, f.incr(), f.value),
        (Some(0), 42, 7, false, true)
    );
    let f = meta_flags(&req(b"ma foo\r\n").request).clone();
    assert_eq!((f.delta, f.incr(), f.vivify), (1, true, None));
    assert!(!meta_flags(&req(b"ma foo M-\r\n").request).incr());
    assert!(meta_flags(&req(b"ma foo M+\r\n").request).incr());
}

#[test]
fn meta_base64_as_memcached() {
    for (input, want) in [
        (&b"Zm9v"[..], Some(&b"foo"[..])),
        (b"Zm8=", Some(b"fo")),
        (b"Zg==", Some(b"f")),
        (b"Z!m9v", Some(b"foo")),
        (b"Zg==Zm9v", Some(b"f")),
        (b"Zm9v=", None),
        (b"Zm9", None),
        (b"!!!!", None),
        (b"Z===", None),
        (b"", None),
    ] {
        assert_eq!(
            base64_decode(input).as_deref(),
            want,
            "{}",
            input.escape_ascii()
        );
    }
    for (input, want) in [
        (&b"foo"[..], &b"Zm9v"[..]),
        (b"fo", b"Zm8="),
        (b"f", b"Zg=="),
        (b"", b""),
    ] {
        let mut out = Vec::new();
        base64_encode(input, &mut out);
        assert_eq!(out, want);
    }
    proptest!(|(bytes in proptest::collection::vec(any::<u8>(), 1..300))| {
        let mut enc = Vec::new();
        base64_encode(&bytes, &mut enc);
        prop_assert_eq!(base64_decode(&enc), Some(bytes));
    });
}

fn meta_reply(line: &[u8], outcome: &MetaOutcome<'_>) -> Vec<u8> {
    let r = req(line).request;
    let (key, flags) = match &r {
        Request::MetaGet { key, flags }
        | Request::MetaDelete { key, flags }
        | Request::MetaArith { key, flags } => (key.clone(), flags.clone()),
        Request::MetaSet { key, flags, .. } => (key.clone(), (**flags).clone()),
        other => panic!("{other:?}"),
    };
    let mut out = IOBufChain::new();
    encode_meta(&flags, &key, outcome, &mut out);
    out.to_vec()
}

#[test]
fn meta_replies() {
    let data = chain(b"hi");
    let item = MetaItem {
        flags: 5,
        cas: 7,
        value: &data,
        ttl: -1,
        ttl_touched: 100,
        ttl_vivified: 50,
        created: false,
        last_access: 3,
        fetched: true,
    };
    let hit = MetaOutcome::Item(item);
    // As 1.6.18 answered: flags in request order, v not echoed, q no help on a hit.
    assert_eq!(
        meta_reply(b"mg foo v f t c s k\r\n", &hit),
        b"VA 2 f5 t-1 c7 s2 kfoo\r\nhi\r\n"
    );
    assert_eq!(
        meta_reply(b"mg foo h l O123 q\r\n", &hit),
        b"HD h1 l3 O123\r\n"
    );
    assert_eq!(meta_reply(b"mg foo t T30 c\r\n", &hit), b"HD t-1 c7\r\n");
    assert_eq!(meta_reply(b"mg foo T30 t\r\n", &hit), b"HD t100\r\n");
    assert_eq!(
        meta_reply(b"mg Zm9v b k v\r\n", &hit),
        b"VA 2 kZm9v b\r\nhi\r\n"
    );
    assert_eq!(
        meta_reply(b"mg nokey k O9\r\n", &MetaOutcome::Miss),
        b"EN knokey O9\r\n"
    );
    assert_eq!(meta_reply(b"mg nokey q k\r\n", &MetaOutcome::Miss), b"");
    // ms: c is 0 unless stored; q hides HD only.
    let stored = MetaOutcome::Done { cas: 9 };
    assert_eq!(
        meta_reply(b"ms foo 2 c k O1 T5 s\r\nhi\r\n", &stored),
        b"HD c9 kfoo O1\r\n"
    );
    assert_eq!(
        meta_reply(b"ms foo 2 c k O1\r\nhi\r\n", &MetaOutcome::NotStored),
        b"NS c0 kfoo O1\r\n"
    );
    assert_eq!(meta_reply(b"ms foo 2 q\r\nhi\r\n", &stored), b"");
    assert_eq!(
        meta_reply(b"ms foo 2 q\r\nhi\r\n", &MetaOutcome::Exists),
        b"EX\r\n"
    );
    assert_eq!(
        meta_reply(b"ms foo 2 q MR\r\nhi\r\n", &MetaOutcome::NotStored),
        b"NS\r\n"
    );
    // md: q hides HD, not NF.
    let deleted = MetaOutcome::Done { cas: 0 };
    assert_eq!(meta_reply(b"md foo q\r\n", &deleted), b"");
    assert_eq!(meta_reply(b"md foo k c\r\n", &deleted), b"HD kfoo\r\n");
    assert_eq!(
        meta_reply(b"md foo q\r\n", &MetaOutcome::NotFound),
        b"NF\r\n"
    );
    // ma: the number's digits; q hides success, not NF.
    let digits = chain(b"42");
    let created = MetaOutcome::Item(MetaItem {
        value: &digits,
        created: true,
        ..item
    });
    // A created item is immortal until its N (or T) in request order.
    assert_eq!(
        meta_reply(b"ma zz J42 v t c N0\r\n", &created),
        b"VA 2 t-1 c7\r\n42\r\n"
    );
    assert_eq!(
        meta_reply(b"ma zz N50 t T100 s f\r\n", &created),
        b"HD t50\r\n"
    );
    assert_eq!(
        meta_reply(b"ma zz q N0\r\n", &created),
        b"HD\r\n",
        "q: not when created"
    );
    let updated = MetaOutcome::Item(MetaItem {
        value: &digits,
        ..item
    });
    assert_eq!(meta_reply(b"ma zz q v\r\n", &updated), b"");
    assert_eq!(
        meta_reply(b"ma zz q\r\n", &MetaOutcome::NotFound),
        b"NF\r\n"
    );
}

#[test]
fn meta_value_reply_is_zero_copy() {
    let data = IOBufChain::from(IOBuf::copy_from_slice(b"hello"));
    let item = MetaItem {
        flags: 0,
        cas: 1,
        value: &data,
        ttl: -1,
        ttl_touched: -1,
        ttl_vivified: -1,
        created: false,
        last_access: 0,
        fetched: false,
    };
    let flags = meta_flags(&req(b"mg k v\r\n").request).clone();
    let mut out = IOBufChain::new();
    encode_meta(&flags, b"k", &MetaOutcome::Item(item), &mut out);
    assert_eq!(out.to_vec(), b"VA 5\r\nhello\r\n");
    let front = data.front().unwrap();
    assert!(out.iter().any(|seg| seg.shares_storage_with(front)));
}

// ---------------------------------------------------------------- binary requests

/// A binary request.
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

fn meta(opcode: Opcode, opaque: u32, cas: u64) -> ReplyTo {
    ReplyTo::Binary(BinaryMeta {
        opcode: opcode as u8,
        opaque,
        cas,
    })
}

/// A binary response: header, then body.
fn res(
    opcode: u8,
    status: u16,
    extras: &[u8],
    key: &[u8],
    value: &[u8],
    opaque: u32,
    cas: u64,
) -> Vec<u8> {
    let mut b = vec![0x81, opcode];
    b.extend_from_slice(&(key.len() as u16).to_be_bytes());
    b.push(extras.len() as u8);
    b.push(0);
    b.extend_from_slice(&status.to_be_bytes());
    b.extend_from_slice(&((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    b.extend_from_slice(&opaque.to_be_bytes());
    b.extend_from_slice(&cas.to_be_bytes());
    b.extend_from_slice(extras);
    b.extend_from_slice(key);
    b.extend_from_slice(value);
    b
}

fn set_extras(flags: u32, exptime: u32) -> Vec<u8> {
    let mut e = flags.to_be_bytes().to_vec();
    e.extend_from_slice(&exptime.to_be_bytes());
    e
}

#[test]
fn binary_requests() {
    for (op, opcode) in [
        (0x00, Opcode::Get),
        (0x09, Opcode::GetQ),
        (0x0c, Opcode::GetK),
        (0x0d, Opcode::GetKQ),
    ] {
        let c = req(&bin(op, b"foo", &[], &[], 7, 0));
        assert_eq!(
            c,
            Command {
                request: Request::Get {
                    keys: smallvec::smallvec![key("foo")],
                    cas: false,
                    touch: None
                },
                reply_to: meta(opcode, 7, 0),
            }
        );
    }
    let c = req(&bin(0x01, b"k", &set_extras(0xdead, 300), b"value", 1, 0));
    assert_eq!(
        c.request,
        Request::Store {
            mode: StoreMode::Set,
            key: key("k"),
            flags: 0xdead,
            exptime: 300,
            cas: 0,
            value: chain(b"value"),
        }
    );
    // A nonzero CAS makes any set/add/replace a CAS store.
    let c = req(&bin(0x12, b"k", &set_extras(0, 0), b"", 1, 99));
    assert!(matches!(
        c.request,
        Request::Store {
            mode: StoreMode::Cas,
            cas: 99,
            ..
        }
    ));
    assert_eq!(c.reply_to, meta(Opcode::AddQ, 1, 99));
    let c = req(&bin(0x19, b"k", &[], b"tail", 1, 0));
    assert!(matches!(
        c.request,
        Request::Store {
            mode: StoreMode::Append,
            ..
        }
    ));
    assert_eq!(
        req(&bin(0x04, b"k", &[], &[], 0, 5)).request,
        Request::Delete {
            key: key("k"),
            cas: 5
        }
    );
    let mut incr = 10u64.to_be_bytes().to_vec();
    incr.extend_from_slice(&3u64.to_be_bytes());
    incr.extend_from_slice(&60u32.to_be_bytes());
    assert_eq!(
        req(&bin(0x05, b"n", &incr, &[], 0, 0)).request,
        Request::Arith {
            key: key("n"),
            incr: true,
            delta: 10,
            initial: Some(3),
            exptime: 60,
            cas: 0
        }
    );
    incr[16..].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(matches!(
        req(&bin(0x16, b"n", &incr, &[], 0, 0)).request,
        Request::Arith {
            incr: false,
            initial: None,
            ..
        }
    ));
    assert_eq!(
        req(&bin(0x1c, b"k", &9u32.to_be_bytes(), &[], 0, 0)).request,
        Request::Touch {
            key: key("k"),
            exptime: 9
        }
    );
    assert_eq!(
        req(&bin(0x23, b"k", &9u32.to_be_bytes(), &[], 0, 0)).request,
        Request::Get {
            keys: smallvec::smallvec![key("k")],
            cas: false,
            touch: Some(9)
        }
    );
    assert_eq!(
        req(&bin(0x08, b"", &[], &[], 0, 0)).request,
        Request::FlushAll { delay: 0 }
    );
    assert_eq!(
        req(&bin(0x18, b"", &5u32.to_be_bytes(), &[], 0, 0)).request,
        Request::FlushAll { delay: 5 }
    );
    assert_eq!(req(&bin(0x0a, b"", &[], &[], 0, 0)).request, Request::Noop);
    assert_eq!(
        req(&bin(0x0b, b"", &[], &[], 0, 0)).request,
        Request::Version
    );
    assert_eq!(req(&bin(0x07, b"", &[], &[], 0, 0)).request, Request::Quit);
    assert_eq!(
        req(&bin(0x10, b"detail dump", &[], &[], 0, 0)).request,
        Request::Stats {
            args: vec![b"detail".to_vec(), b"dump".to_vec()]
        }
    );
    assert_eq!(
        req(&bin(0x10, b"", &[], &[], 0, 0)).request,
        Request::Stats { args: vec![] }
    );
}

#[test]
fn binary_errors() {
    let einval =
        |opcode: u8, opaque: u32| res(opcode, 4, &[], &[], b"Invalid arguments", opaque, 0);
    // Bad magic (after the first request fixed the protocol): closed silently.
    let mut stream = bin(0x0a, b"", &[], &[], 0, 0);
    stream.extend_from_slice(&[0x81; 24]);
    let v = all(&stream);
    assert_eq!(err(&v[1]), (ErrorKind::BadMagic, vec![], true));
    // Key longer than the body: UNKNOWN_COMMAND, closed.
    let mut b = bin(0x00, b"abc", &[], &[], 3, 0);
    b[8..12].copy_from_slice(&2u32.to_be_bytes());
    assert_eq!(
        err(&one(&b)),
        (
            ErrorKind::BadLengths,
            res(0x00, 0x81, &[], &[], b"Unknown command", 3, 0),
            true
        )
    );
    // Lengths wrong for the opcode: EINVAL, closed.
    for (b, opcode) in [
        (bin(0x00, b"", &[], &[], 9, 0), 0x00),
        (bin(0x00, b"k", &[1, 2, 3, 4], &[], 9, 0), 0x00),
        (bin(0x01, b"k", &[0; 4], b"v", 9, 0), 0x01),
        (bin(0x0a, b"k", &[], &[], 9, 0), 0x0a),
        (bin(0x05, b"k", &[0; 8], &[], 9, 0), 0x05),
        (bin(0x08, b"", &[0; 2], &[], 9, 0), 0x08),
        (bin(0x0e, b"k", &[0; 8], b"v", 9, 0), 0x0e),
        (bin(0x1d, b"k", &[], &[], 9, 0), 0x1d),
        (bin(0x20, b"k", &[], &[], 9, 0), 0x20),
    ] {
        assert_eq!(
            err(&one(&b)),
            (ErrorKind::InvalidArguments, einval(opcode, 9), true),
            "{opcode:#x}"
        );
    }
    // A key over 250 bytes.
    assert_eq!(
        err(&one(&bin(0x00, &[b'x'; 251], &[], &[], 1, 0))),
        (ErrorKind::InvalidArguments, einval(0x00, 1), true)
    );
    // A body over 1 GiB.
    let mut b = bin(0x01, b"k", &set_extras(0, 0), &[], 1, 0);
    b[8..12].copy_from_slice(&(1u32 << 30 | 1).to_be_bytes());
    assert_eq!(err(&one(&b)).0, ErrorKind::InvalidArguments);
    // Unknown opcode (VERBOSITY is unknown to memcached 1.6): body swallowed, go on.
    let mut b = bin(0x1b, b"", &7u32.to_be_bytes(), &[], 5, 0);
    b.extend_from_slice(&bin(0x0a, b"", &[], &[], 6, 0));
    let v = all(&b);
    assert_eq!(
        err(&v[0]),
        (
            ErrorKind::UnknownOpcode,
            res(0x1b, 0x81, &[], &[], b"Unknown command", 5, 0),
            false
        )
    );
    assert_eq!(v[1], req(&bin(0x0a, b"", &[], &[], 6, 0)).into_parsed());
    // SASL without SASL enabled: unknown, the mechanism's data swallowed.
    let mut b = bin(0x21, b"PLAIN", &[], b"\0user\0pass", 5, 0);
    b.extend_from_slice(&bin(0x0a, b"", &[], &[], 6, 0));
    let v = all(&b);
    assert_eq!(err(&v[0]).0, ErrorKind::UnknownOpcode);
    assert_eq!(v.len(), 2);
}

#[test]
fn binary_too_large() {
    let limits = Limits {
        item_size_max: 1024,
        ..Limits::default()
    };
    // flags nonzero: 4 more bytes of item.
    let mut b = bin(0x11, b"k", &set_extras(1, 0), &[b'v'; 960], 2, 0);
    b.extend_from_slice(&bin(0x0a, b"", &[], &[], 3, 0));
    let v = feed(limits, &[&b]).0;
    assert!(matches!(v[0], Parsed::Request(_)));
    let mut b = bin(0x11, b"k", &set_extras(1, 0), &[b'v'; 961], 2, 0);
    b.extend_from_slice(&bin(0x0a, b"", &[], &[], 3, 0));
    let v = feed(limits, &[&b]).0;
    assert_eq!(
        v[0],
        Parsed::Error(ParseError {
            kind: ErrorKind::TooLarge,
            reply: chain(&res(0x11, 3, &[], &[], b"Too large.", 2, 0)),
            close: false,
            unlink: Some(key("k")),
        })
    );
    assert!(matches!(v[1], Parsed::Request(_)));
    let v = feed(limits, &[&bin(0x0f, b"k", &[], &[b'v'; 2000], 2, 0)]).0;
    assert!(matches!(
        &v[0],
        Parsed::Error(ParseError {
            kind: ErrorKind::TooLarge,
            unlink: None,
            ..
        })
    ));
}

#[test]
fn binary_value_is_not_copied_and_waits() {
    let b = bin(0x01, b"key", &set_extras(0, 0), b"0123456789", 1, 0);
    let (head, tail) = b.split_at(30);
    let mut p = Parser::new(Limits::default());
    let mut input = chain(head);
    assert_eq!(p.parse(&mut input), Parsed::Incomplete);
    assert_eq!(input.to_vec(), head);
    let tail_buf = IOBuf::copy_from_slice(tail);
    input.push_back(tail_buf.clone());
    let Parsed::Request(Command {
        request: Request::Store { value, .. },
        ..
    }) = p.parse(&mut input)
    else {
        panic!()
    };
    assert_eq!(value.to_vec(), b"0123456789");
    assert!(
        value
            .back()
            .is_some_and(|s| s.shares_storage_with(&tail_buf))
    );
    assert!(input.is_empty());
}

// ---------------------------------------------------------------- replies

fn encoded(to: ReplyTo, responses: &[Response<'_>]) -> Vec<u8> {
    let mut out = IOBufChain::new();
    for r in responses {
        encode(&to, r, &mut out);
    }
    out.to_vec()
}

#[test]
fn one_key_hit_of_a_small_value_is_one_buffer() {
    // Header line, the copied value, "\r\nEND\r\n": one buffer, one iovec.
    let data = chain(b"hello");
    let value = Response::Value {
        key: b"k",
        flags: 0,
        cas: 0,
        data: &bufs(&data),
        end: false,
    };
    let mut out = IOBufChain::new();
    encode(&text_to(false), &value, &mut out);
    encode(&text_to(false), &Response::End, &mut out);
    assert_eq!(out.segment_count(), 1);
    assert_eq!(out.to_vec(), b"VALUE k 0 5\r\nhello\r\nEND\r\n");
    // Two hits and the end: still one.
    let mut out = IOBufChain::new();
    for r in [&value, &value, &Response::End] {
        encode(&text_to(false), r, &mut out);
    }
    assert_eq!(out.segment_count(), 1);
    assert_eq!(
        out.to_vec(),
        b"VALUE k 0 5\r\nhello\r\nVALUE k 0 5\r\nhello\r\nEND\r\n"
    );
}

#[test]
fn a_last_value_carries_the_end_as_value_then_end_would() {
    // `end: true` (a get's last key) writes the `END` itself: the same bytes and
    // buffers as the value followed by `Response::End`, small and large, with and
    // without CAS ids.
    for size in [5, COPY_VALUE_MAX + 1] {
        let data = bufs(&chain(&vec![b'v'; size]));
        for show_cas in [false, true] {
            let value = |end| Response::Value {
                key: b"key",
                flags: 4_294_967_295,
                cas: 1234,
                data: &data,
                end,
            };
            let to = ReplyTo::Text {
                noreply: false,
                cas: show_cas,
            };
            let mut apart = IOBufChain::new();
            encode(&to, &value(false), &mut apart);
            encode(&to, &Response::End, &mut apart);
            let mut together = IOBufChain::new();
            encode(&to, &value(true), &mut together);
            assert_eq!(together.to_vec(), apart.to_vec());
            assert_eq!(together.segment_count(), apart.segment_count());
        }
    }
}

#[test]
fn one_key_hit_of_a_large_value_fits_a_chain_without_spilling() {
    // Header line, the value's one buffer, "\r\nEND\r\n": three buffers, so that with
    // the header buffer ebb-net puts in front the frame is four, which a chain holds in
    // place (a fifth would move them to the heap, once per request).
    let big = vec![b'v'; COPY_VALUE_MAX + 1];
    let data = chain(&big);
    let value = Response::Value {
        key: b"k",
        flags: 0,
        cas: 0,
        data: &bufs(&data),
        end: false,
    };
    let mut out = IOBufChain::new();
    encode(&text_to(false), &value, &mut out);
    encode(&text_to(false), &Response::End, &mut out);
    assert_eq!(out.segment_count(), 3);
    let mut want = b"VALUE k 0 2049\r\n".to_vec();
    want.extend_from_slice(&big);
    want.extend_from_slice(b"\r\nEND\r\n");
    assert_eq!(out.to_vec(), want);
    // A miss alone, and two hits, still end the same way.
    let mut out = IOBufChain::new();
    encode(&text_to(false), &Response::End, &mut out);
    assert_eq!(out.to_vec(), b"END\r\n");
    let mut out = IOBufChain::new();
    for r in [&value, &value, &Response::End] {
        encode(&text_to(false), r, &mut out);
    }
    assert_eq!(out.len(), 2 * (16 + big.len() + 2) + 5);
}

#[test]
fn text_replies() {
    let data = chain(b"hello");
    let value = Response::Value {
        key: b"k",
        flags: 3,
        cas: 42,
        data: &bufs(&data),
        end: false,
    };
    assert_eq!(
        encoded(
            text_to(false),
            &[value, Response::Miss { key: b"x" }, Response::End]
        ),
        b"VALUE k 3 5\r\nhello\r\nEND\r\n"
    );
    assert_eq!(
        encoded(
            ReplyTo::Text {
                noreply: false,
                cas: true
            },
            &[value, Response::End]
        ),
        b"VALUE k 3 5 42\r\nhello\r\nEND\r\n"
    );
    let cases: &[(Response<'_>, &[u8])] = &[
        (Response::Stored { cas: 1 }, b"STORED\r\n"),
        (Response::NotStored, b"NOT_STORED\r\n"),
        (Response::Exists, b"EXISTS\r\n"),
        (Response::NotFound, b"NOT_FOUND\r\n"),
        (Response::Deleted, b"DELETED\r\n"),
        (Response::Touched { flags: 0, cas: 0 }, b"TOUCHED\r\n"),
        (
            Response::Number {
                value: 18446744073709551615,
                cas: 0,
            },
            b"18446744073709551615\r\n",
        ),
        (Response::Number { value: 0, cas: 0 }, b"0\r\n"),
        (Response::Ok, b"OK\r\n"),
        (Response::Version("1.6.45"), b"VERSION 1.6.45\r\n"),
        (
            Response::Stat {
                name: b"pid",
                value: b"1",
            },
            b"STAT pid 1\r\n",
        ),
        (
            Response::Stat {
                name: b"x",
                value: b"",
            },
            b"STAT x\r\n",
        ),
        (Response::StatsEnd, b"END\r\n"),
        (Response::Reset, b"RESET\r\n"),
        (Response::UnknownStats, b"ERROR\r\n"),
        (
            Response::NonNumeric,
            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
        ),
        (
            Response::TooLarge,
            b"SERVER_ERROR object too large for cache\r\n",
        ),
        (
            Response::OutOfMemory("out of memory storing object"),
            b"SERVER_ERROR out of memory storing object\r\n",
        ),
        (Response::Noop, b"MN\r\n"),
        (Response::Quit, b""),
    ];
    for (r, bytes) in cases {
        assert_eq!(encoded(text_to(false), &[*r]), *bytes, "{r:?}");
        assert_eq!(encoded(text_to(true), &[*r]), b"", "noreply {r:?}");
    }
}

#[test]
fn text_value_reply_is_zero_copy_above_the_copy_limit() {
    // A value of two segments: copied (in order) up to the limit, shared beyond it.
    for size in [10, COPY_VALUE_MAX + 10] {
        let bytes: Vec<u8> = (0..size).map(|i| b'0' + (i % 10) as u8).collect();
        let stored = IOBuf::copy_from_slice(&bytes);
        let mut data = IOBufChain::from(stored.clone());
        let second = data.split_off(4).unwrap();
        data.append(&mut second.clone());
        let mut out = IOBufChain::new();
        encode(
            &text_to(false),
            &Response::Value {
                key: b"k",
                flags: 0,
                cas: 0,
                data: &bufs(&data),
                end: false,
            },
            &mut out,
        );
        let mut want = alloc::format!("VALUE k 0 {size}\r\n").into_bytes();
        want.extend_from_slice(&bytes);
        want.extend_from_slice(b"\r\n");
        assert_eq!(out.to_vec(), want);
        let shared = out
            .iter()
            .filter(|s| s.shares_storage_with(&stored))
            .count();
        if size <= COPY_VALUE_MAX {
            assert_eq!(out.segment_count(), 1, "copied into one buffer");
        } else {
            assert_eq!(shared, 2, "both value segments pushed as they are");
        }
    }
}

#[test]
fn binary_replies() {
    let data = bufs(&chain(b"val"));
    let hit = |k: &'static [u8]| Response::Value {
        key: k,
        flags: 7,
        cas: 9,
        data: &data,
        end: false,
    };
    let f = 7u32.to_be_bytes();
    assert_eq!(
        encoded(meta(Opcode::Get, 1, 0), &[hit(b"k"), Response::End]),
        res(0x00, 0, &f, b"", b"val", 1, 9)
    );
    assert_eq!(
        encoded(meta(Opcode::GetQ, 1, 0), &[hit(b"k")]),
        res(0x09, 0, &f, b"", b"val", 1, 9)
    );
    assert_eq!(
        encoded(meta(Opcode::GetK, 1, 0), &[hit(b"k")]),
        res(0x0c, 0, &f, b"k", b"val", 1, 9)
    );
    assert_eq!(
        encoded(meta(Opcode::GatKQ, 1, 0), &[hit(b"k")]),
        res(0x24, 0, &f, b"k", b"val", 1, 9)
    );
    assert_eq!(
        encoded(
            meta(Opcode::Touch, 1, 0),
            &[Response::Touched { flags: 7, cas: 9 }]
        ),
        res(0x1c, 0, &f, b"", b"", 1, 9)
    );
    // Misses.
    let miss = Response::Miss { key: b"k" };
    assert_eq!(
        encoded(meta(Opcode::Get, 2, 0), &[miss, Response::End]),
        res(0x00, 1, &[], b"", b"Not found", 2, 0)
    );
    assert_eq!(
        encoded(meta(Opcode::GetK, 2, 0), &[miss]),
        res(0x0c, 1, &[], b"k", b"", 2, 0)
    );
    assert_eq!(encoded(meta(Opcode::GetQ, 2, 0), &[miss]), b"");
    assert_eq!(encoded(meta(Opcode::GetKQ, 2, 0), &[miss]), b"");
    // Stores.
    assert_eq!(
        encoded(meta(Opcode::Set, 3, 0), &[Response::Stored { cas: 5 }]),
        res(0x01, 0, &[], b"", b"", 3, 5)
    );
    assert_eq!(
        encoded(meta(Opcode::SetQ, 3, 0), &[Response::Stored { cas: 5 }]),
        b""
    );
    assert_eq!(
        encoded(meta(Opcode::SetQ, 3, 0), &[Response::Exists]),
        res(0x11, 2, &[], b"", b"Data exists for key.", 3, 0)
    );
    assert_eq!(
        encoded(meta(Opcode::Add, 3, 0), &[Response::NotStored]),
        res(0x02, 2, &[], b"", b"Data exists for key.", 3, 0)
    );
    assert_eq!(
        encoded(meta(Opcode::ReplaceQ, 3, 0), &[Response::NotStored]),
        res(0x13, 1, &[], b"", b"Not found", 3, 0)
    );
    assert_eq!(
        encoded(meta(Opcode::Add, 3, 8), &[Response::NotStored]),
        res(0x02, 5, &[], b"", b"Not stored.", 3, 0)
    );
    assert_eq!(
        encoded(meta(Opcode::Append, 3, 0), &[Response::NotStored]),
        res(0x0e, 5, &[], b"", b"Not stored.", 3, 0)
    );
    assert_eq!(
        encoded(meta(Opcode::Set, 3, 0), &[Response::TooLarge]),
        res(0x01, 3, &[], b"", b"Too large.", 3, 0)
    );
    assert_eq!(
        encoded(
            meta(Opcode::Set, 3, 0),
            &[Response::OutOfMemory("Out of memory allocating item")]
        ),
        res(0x01, 0x82, &[], b"", b"Out of memory allocating item", 3, 0)
    );
    // Delete, arithmetic, flush, noop, quit, version.
    assert_eq!(
        encoded(meta(Opcode::Delete, 4, 0), &[Response::Deleted]),
        res(0x04, 0, &[], b"", b"", 4, 0)
    );
    assert_eq!(
        encoded(meta(Opcode::DeleteQ, 4, 0), &[Response::Deleted]),
        b""
    );
    assert_eq!(
        encoded(meta(Opcode::DeleteQ, 4, 0), &[Response::NotFound]),
        res(0x14, 1, &[], b"", b"Not found", 4, 0)
    );
    assert_eq!(
        encoded(
            meta(Opcode::Increment, 4, 0),
            &[Response::Number { value: 258, cas: 6 }]
        ),
        res(0x05, 0, &[], b"", &258u64.to_be_bytes(), 4, 6)
    );
    assert_eq!(
        encoded(
            meta(Opcode::IncrementQ, 4, 0),
            &[Response::Number { value: 1, cas: 6 }]
        ),
        b""
    );
    assert_eq!(
        encoded(meta(Opcode::Decrement, 4, 0), &[Response::NonNumeric]),
        res(
            0x06,
            6,
            &[],
            b"",
            b"Non-numeric server-side value for incr or decr",
            4,
            0
        )
    );
    assert_eq!(
        encoded(meta(Opcode::Flush, 4, 0), &[Response::Ok]),
        res(0x08, 0, &[], b"", b"", 4, 0)
    );
    assert_eq!(encoded(meta(Opcode::FlushQ, 4, 0), &[Response::Ok]), b"");
    assert_eq!(
        encoded(meta(Opcode::Noop, 4, 0), &[Response::Noop]),
        res(0x0a, 0, &[], b"", b"", 4, 0)
    );
    assert_eq!(
        encoded(meta(Opcode::Quit, 4, 0), &[Response::Quit]),
        res(0x07, 0, &[], b"", b"", 4, 0)
    );
    assert_eq!(encoded(meta(Opcode::QuitQ, 4, 0), &[Response::Quit]), b"");
    assert_eq!(
        encoded(meta(Opcode::Version, 4, 0), &[Response::Version("1.6.45")]),
        res(0x0b, 0, &[], b"", b"1.6.45", 4, 0)
    );
    // Stats.
    let mut want = res(0x10, 0, &[], b"pid", b"12", 4, 0);
    want.extend(res(0x10, 0, &[], b"", b"", 4, 0));
    assert_eq!(
        encoded(
            meta(Opcode::Stat, 4, 0),
            &[
                Response::Stat {
                    name: b"pid",
                    value: b"12"
                },
                Response::StatsEnd
            ]
        ),
        want
    );
    assert_eq!(
        encoded(meta(Opcode::Stat, 4, 0), &[Response::UnknownStats]),
        res(0x10, 1, &[], b"", b"Not found", 4, 0)
    );
}

#[test]
fn binary_value_reply_is_zero_copy() {
    let stored = IOBuf::copy_from_slice(b"payload");
    let data = IOBufChain::from(stored.clone());
    let mut out = IOBufChain::new();
    encode(
        &meta(Opcode::GetK, 0, 0),
        &Response::Value {
            key: b"k",
            flags: 0,
            cas: 1,
            data: &bufs(&data),
            end: false,
        },
        &mut out,
    );
    assert!(out.iter().any(|s| s.shares_storage_with(&stored)));
}

#[test]
fn expiry_rule() {
    let now = 1_700_000_000;
    assert_eq!(expiry_to_absolute(0, now), None);
    assert_eq!(expiry_to_absolute(-1, now), Some(0));
    assert_eq!(expiry_to_absolute(1, now), Some(now + 1));
    assert_eq!(
        expiry_to_absolute(REALTIME_MAXDELTA, now),
        Some(now + 2_592_000)
    );
    assert_eq!(
        expiry_to_absolute(REALTIME_MAXDELTA + 1, now),
        Some(2_592_001)
    );
    assert_eq!(expiry_to_absolute(1_800_000_000, now), Some(1_800_000_000));
}

// ---------------------------------------------------------------- segmentation

/// Every text fixture above, pipelined.
fn text_stream() -> Vec<u8> {
    let mut s = Vec::new();
    for line in [
        &b"get foo\r\n"[..],
        b"gets a b  c\r\n",
        b"gat 10 a\r\n",
        b"set foo 5 100 3\r\nbar\r\n",
        b"add k 0 0 2 noreply\r\nhi\r\n",
        b"cas k 1 2 0 77\r\n\r\n",
        b"set k 0 0 4\n\r\n\r\n\r\n",
        b"set k 0 0 3\r\nabcde\r\n",
        b"set k x 0 3\r\nabc\r\n",
        b"set k 0 0 -1\r\n",
        b"append k 0 0 3000\r\n",
        &[b'z'; 3002],
        b"incr k 5\r\ndecr k 1 noreply\r\nincr k x\r\n",
        b"touch k 10\r\ndelete k\r\ndelete k noreply\r\n",
        b"flush_all\r\nflush_all 10 noreply\r\nversion\r\nverbosity 1\r\nstats items\r\n",
        b"mg k v c f t s k O1 q\r\nmg Zm9v b k\r\nmg k x\r\n",
        b"ms k 2 T0 F5 c k\r\nhi\r\nms k 2 MX\r\nhi\r\nms k\r\nms k 3 q\r\nhixxx\r\n",
        b"md k q C1\r\nma k N0 J5 D2 MD v t\r\nma k Y\r\n",
        b"ms big 2000 ME\r\n",
        &[b'y'; 2002],
        b"bogus\r\n\r\nmn\r\nms k 2\r\nhi\r\nquit\n",
    ] {
        s.extend_from_slice(line);
    }
    s
}

fn binary_stream() -> Vec<u8> {
    let mut incr = 10u64.to_be_bytes().to_vec();
    incr.extend_from_slice(&3u64.to_be_bytes());
    incr.extend_from_slice(&60u32.to_be_bytes());
    let mut s = Vec::new();
    for p in [
        bin(0x00, b"foo", &[], &[], 1, 0),
        bin(0x0d, b"foo", &[], &[], 2, 0),
        bin(0x01, b"k", &set_extras(1, 2), b"value", 3, 0),
        bin(0x12, b"k", &set_extras(0, 0), &[b'x'; 2000], 4, 7),
        bin(0x0e, b"k", &[], b"more", 5, 0),
        bin(0x05, b"n", &incr, &[], 6, 0),
        bin(0x1d, b"k", &9u32.to_be_bytes(), &[], 7, 0),
        bin(0x1b, b"", &1u32.to_be_bytes(), &[], 8, 0),
        bin(0x04, b"k", &[], &[], 9, 0),
        bin(0x18, b"", &5u32.to_be_bytes(), &[], 10, 0),
        bin(0x10, b"items", &[], &[], 11, 0),
        bin(0x0a, b"", &[], &[], 12, 0),
        bin(0x0b, b"", &[], &[], 13, 0),
        bin(0x17, b"", &[], &[], 14, 0),
    ] {
        s.extend_from_slice(&p);
    }
    s
}

fn small_limits() -> Limits {
    Limits {
        item_size_max: 1500,
        ..Limits::default()
    }
}

#[test]
fn every_two_segment_split_parses_alike() {
    for stream in [text_stream(), binary_stream()] {
        let (whole, rest) = feed(small_limits(), &[&stream]);
        assert!(rest.is_empty());
        assert!(whole.len() > 10);
        for at in 0..=stream.len() {
            let (a, b) = stream.split_at(at);
            let (split, rest) = feed(small_limits(), &[a, b]);
            assert_eq!(split, whole, "split at {at}");
            assert!(rest.is_empty());
        }
    }
}

#[test]
fn byte_at_a_time_parses_alike() {
    for stream in [text_stream(), binary_stream()] {
        let whole = feed(small_limits(), &[&stream]).0;
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(feed(small_limits(), &bytes).0, whole);
    }
}

proptest! {
    #[test]
    fn any_segmentation_parses_alike(cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..40), binary in any::<bool>()) {
        let stream = if binary { binary_stream() } else { text_stream() };
        let whole = feed(small_limits(), &[&stream]).0;
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        points.sort_unstable();
        let mut segments = Vec::new();
        let mut last = 0;
        for p in points {
            segments.push(&stream[last..p]);
            last = p;
        }
        segments.push(&stream[last..]);
        prop_assert_eq!(feed(small_limits(), &segments).0, whole);
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_progress(data in proptest::collection::vec(any::<u8>(), 0..600), cut in any::<prop::sample::Index>()) {
        let at = cut.index(data.len() + 1);
        let (a, b) = data.split_at(at);
        // `feed` asserts progress.
        let split = feed(small_limits(), &[a, b]).0;
        prop_assert_eq!(split, feed(small_limits(), &[&data]).0);
    }
}

// ---------------------------------------------------------------- end to end

/// A toy store executing requests the way the server glue will, to show the API in use
/// and check whole conversations against what memcached 1.6.18 answered to the same
/// bytes (recorded from the `memcached` on this machine; these conversations avoid the
/// refusals where 1.6.18 and 1.6.45 differ).
#[derive(Default)]
struct Toy {
    items: alloc::collections::BTreeMap<Vec<u8>, (u32, IOBufChain, u64)>,
    next_cas: u64,
}

impl Toy {
    fn cas(&mut self) -> u64 {
        self.next_cas += 1;
        self.next_cas
    }

    fn execute(&mut self, cmd: &Command, out: &mut IOBufChain) {
        let to = &cmd.reply_to;
        match &cmd.request {
            Request::Get { keys, .. } => {
                for k in keys {
                    match self.items.get(k.as_bytes()) {
                        Some((flags, data, cas)) => encode(
                            to,
                            &Response::Value {
                                key: k,
                                flags: *flags,
                                cas: *cas,
                                data: &bufs(data),
                                end: false,
                            },
                            out,
                        ),
                        None => encode(to, &Response::Miss { key: k }, out),
                    }
                }
                encode(to, &Response::End, out);
            }
            Request::Store {
                mode,
                key,
                flags,
                cas,
                value,
                ..
            } => {
                let existing = self.items.get(key.as_bytes()).cloned();
                let new = match (mode, existing) {
                    (StoreMode::Add, Some(_)) | (StoreMode::Replace, None) => None,
                    (StoreMode::Append | StoreMode::Prepend, None) => None,
                    (StoreMode::Cas, None) => return encode(to, &Response::NotFound, out),
                    (StoreMode::Cas, Some((_, _, c))) if c != *cas => {
                        return encode(to, &Response::Exists, out);
                    }
                    (StoreMode::Append, Some((f, mut old, _))) => {
                        old.append(&mut value.clone());
                        Some((f, old))
                    }
                    (StoreMode::Prepend, Some((f, old, _))) => {
                        let mut v = value.clone();
                        v.append(&mut old.clone());
                        Some((f, v))
                    }
                    _ => Some((*flags, value.clone())),
                };
                match new {
                    Some((f, v)) => {
                        let cas = self.cas();
                        self.items.insert(key.to_vec(), (f, v, cas));
                        encode(to, &Response::Stored { cas }, out);
                    }
                    None => encode(to, &Response::NotStored, out),
                }
            }
            Request::Delete { key, .. } => {
                let r = match self.items.remove(key.as_bytes()) {
                    Some(_) => Response::Deleted,
                    None => Response::NotFound,
                };
                encode(to, &r, out);
            }
            Request::Arith {
                key, incr, delta, ..
            } => {
                let cas = self.cas();
                let Some((_, data, c)) = self.items.get_mut(key.as_bytes()) else {
                    return encode(to, &Response::NotFound, out);
                };
                let text = data.to_vec();
                let Some(n) = core::str::from_utf8(&text)
                    .ok()
                    .and_then(|s| s.parse::<u64>().ok())
                else {
                    return encode(to, &Response::NonNumeric, out);
                };
                let n = if *incr {
                    n.wrapping_add(*delta)
                } else {
                    n.saturating_sub(*delta)
                };
                *data = chain(alloc::format!("{n}").as_bytes());
                *c = cas;
                encode(to, &Response::Number { value: n, cas }, out);
            }
            Request::Touch { key, .. } => {
                let r = match self.items.get(key.as_bytes()) {
                    Some((flags, _, cas)) => Response::Touched {
                        flags: *flags,
                        cas: *cas,
                    },
                    None => Response::NotFound,
                };
                encode(to, &r, out);
            }
            Request::FlushAll { .. } | Request::Verbosity { .. } => encode(to, &Response::Ok, out),
            Request::Version => encode(to, &Response::Version("1.6.18"), out),
            Request::Stats { .. } => encode(to, &Response::StatsEnd, out),
            Request::Quit => encode(to, &Response::Quit, out),
            Request::Noop => encode(to, &Response::Noop, out),
            Request::MetaGet { key, flags } => {
                let found = self.items.get(key.as_bytes()).cloned();
                let outcome = match &found {
                    Some((f, data, cas)) => MetaOutcome::Item(MetaItem {
                        flags: *f,
                        cas: *cas,
                        value: data,
                        ttl: -1,
                        ttl_touched: -1,
                        ttl_vivified: -1,
                        created: false,
                        last_access: 0,
                        fetched: false,
                    }),
                    None => MetaOutcome::Miss,
                };
                encode_meta(flags, key, &outcome, out);
            }
            Request::MetaSet {
                mode,
                key,
                client_flags,
                value,
                flags,
                ..
            } => {
                let exists = self.items.contains_key(key.as_bytes());
                let outcome = match mode {
                    StoreMode::Add if exists => MetaOutcome::NotStored,
                    StoreMode::Replace if !exists => MetaOutcome::NotStored,
                    _ => {
                        let cas = self.cas();
                        self.items
                            .insert(key.to_vec(), (*client_flags, value.clone(), cas));
                        MetaOutcome::Done { cas }
                    }
                };
                encode_meta(flags, key, &outcome, out);
            }
            Request::MetaDelete { key, flags } => {
                let outcome = match self.items.remove(key.as_bytes()) {
                    Some(_) => MetaOutcome::Done { cas: 0 },
                    None => MetaOutcome::NotFound,
                };
                encode_meta(flags, key, &outcome, out);
            }
            Request::MetaArith { key, flags } => {
                encode_meta(flags, key, &MetaOutcome::NotFound, out);
            }
        }
    }

    /// Runs a conversation; the output and whether the connection ends.
    fn converse(&mut self, bytes: &[u8]) -> (Vec<u8>, bool) {
        let mut p = Parser::new(Limits::default());
        let mut input = chain(bytes);
        let mut out = IOBufChain::new();
        loop {
            match p.parse(&mut input) {
                Parsed::Incomplete => return (out.to_vec(), false),
                Parsed::Request(cmd) => {
                    self.execute(&cmd, &mut out);
                    if cmd.request == Request::Quit {
                        return (out.to_vec(), true);
                    }
                }
                Parsed::Error(mut e) => {
                    if let Some(k) = &e.unlink {
                        self.items.remove(k.as_bytes());
                    }
                    out.append(&mut e.reply);
                    if e.close {
                        return (out.to_vec(), true);
                    }
                }
            }
        }
    }
}

#[test]
fn conversations_match_memcached() {
    let cases: &[(&[u8], &[u8], bool)] = &[
        (
            b"set k 0 0 1\r\nx\r\nset k2 7 0 0\r\n\r\nget k k2 nope\r\n",
            b"STORED\r\nSTORED\r\nVALUE k 0 1\r\nx\r\nVALUE k2 7 0\r\n\r\nEND\r\n",
            false,
        ),
        (
            b"set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 100\r\nincr n 18446744073709551615\r\n",
            b"STORED\r\n15\r\n0\r\n18446744073709551615\r\n",
            false,
        ),
        (
            b"set k 0 0 3\r\nabcde\r\n",
            b"CLIENT_ERROR bad data chunk\r\nERROR\r\n",
            false,
        ),
        (
            b"incr k x\r\nincr k -1\r\nincr k 18446744073709551616\r\n",
            b"CLIENT_ERROR invalid numeric delta argument\r\n\
              CLIENT_ERROR invalid numeric delta argument\r\n\
              CLIENT_ERROR invalid numeric delta argument\r\n",
            false,
        ),
        (
            b"flush_all 0 noreply\r\nflush_all noreply\r\nversion\r\n",
            b"VERSION 1.6.18\r\n",
            false,
        ),
        (
            b"verbosity 1 noreply\r\nverbosity x\r\n",
            b"CLIENT_ERROR bad command line format\r\n",
            false,
        ),
        (b"incr k noreply\r\nget a noreply\r\n", b"END\r\n", false),
        (
            b"ms foo 2 T0 F5 c\r\nhi\r\nmg foo v f t s k\r\nmg nokey q\r\nmg nokey k O9\r\n\
              ms foo 2 ME q\r\nhi\r\nmd foo q\r\nmd foo q\r\nma foo\r\nmn\r\n",
            b"HD c1\r\nVA 2 f5 t-1 s2 kfoo\r\nhi\r\nEN knokey O9\r\nNS\r\nNF\r\nNF\r\nMN\r\n",
            false,
        ),
        (b"quit\r\nversion\r\n", b"", true),
        (b"GET / HTTP/1.1\r\n", b"", true),
    ];
    for (input, want, closed) in cases {
        let (got, ended) = Toy::default().converse(input);
        // "e\r\n" after a bad chunk: 1.6.18 says ERROR, 1.6.45 (here) bad format.
        let want: Vec<u8> = if input.starts_with(b"set k 0 0 3\r\nabcde") {
            [&b"CLIENT_ERROR bad data chunk\r\n"[..], BAD_FORMAT].concat()
        } else {
            want.to_vec()
        };
        assert_eq!(
            (got.escape_ascii().to_string(), ended),
            (want.escape_ascii().to_string(), *closed),
            "{}",
            input.escape_ascii()
        );
    }
    // Too large (key "big", the default 1 MiB): the largest value memcached stores is
    // 1048514 bytes (1048510 with nonzero flags).
    for (n, flags, want) in [
        (1_048_514, 0, &b"STORED\r\n"[..]),
        (1_048_514, 1, b"SERVER_ERROR object too large for cache\r\n"),
        (1_048_515, 0, b"SERVER_ERROR object too large for cache\r\n"),
    ] {
        let mut bytes = alloc::format!("set big {flags} 0 {n}\r\n").into_bytes();
        bytes.resize(bytes.len() + n, b'x');
        bytes.extend_from_slice(b"\r\nversion\r\n");
        let (got, _) = Toy::default().converse(&bytes);
        assert_eq!(got, [want, b"VERSION 1.6.18\r\n"].concat(), "{n} {flags}");
    }
}

#[test]
fn binary_conversations_match_memcached() {
    // As memcached 1.6.18 answered, but for the CAS ids (the toy store counts from 1).
    let noop = bin(0x0a, b"", &[], &[], 0x99, 0);
    let noop_reply = res(0x0a, 0, &[], b"", b"", 0x99, 0);
    let mut toy = Toy::default();
    let (got, _) = toy.converse(
        &[
            bin(0x00, b"nokey", &[], &[], 1, 0),
            bin(0x0c, b"nokey", &[], &[], 1, 0),
            bin(0x09, b"nokey", &[], &[], 1, 0),
            noop.clone(),
        ]
        .concat(),
    );
    assert_eq!(
        got,
        [
            res(0x00, 1, &[], b"", b"Not found", 1, 0),
            res(0x0c, 1, &[], b"nokey", b"", 1, 0),
            noop_reply.clone()
        ]
        .concat()
    );
    let (got, _) = toy.converse(
        &[
            bin(0x11, b"k", &set_extras(5, 0), b"val", 2, 0),
            bin(0x00, b"k", &[], &[], 3, 0),
            bin(0x02, b"k", &set_extras(5, 0), b"val", 2, 0),
            bin(0x1c, b"k", &10u32.to_be_bytes(), &[], 11, 0),
        ]
        .concat(),
    );
    assert_eq!(
        got,
        [
            res(0x00, 0, &5u32.to_be_bytes(), b"", b"val", 3, 1),
            res(0x02, 2, &[], b"", b"Data exists for key.", 2, 0),
            res(0x1c, 0, &5u32.to_be_bytes(), b"", b"", 11, 1),
        ]
        .concat()
    );
    let mut too_large = bin(0x01, b"big", &set_extras(0, 0), &[b'x'; 1 << 20], 9, 0);
    too_large.extend_from_slice(&noop);
    let (got, _) = toy.converse(&too_large);
    assert_eq!(
        got,
        [res(0x01, 3, &[], b"", b"Too large.", 9, 0), noop_reply].concat()
    );
}

proptest::proptest! {
    #[test]
    fn split_spaces_is_slice_split(bytes in proptest::collection::vec(
        proptest::prop_oneof![proptest::strategy::Just(b' '), proptest::prelude::any::<u8>()], 0..40)) {
        let ours: Vec<&[u8]> = super::line::split_spaces(&bytes).collect();
        let std: Vec<&[u8]> = bytes.split(|&b| b == b' ').collect();
        proptest::prop_assert_eq!(ours, std);
    }
}
