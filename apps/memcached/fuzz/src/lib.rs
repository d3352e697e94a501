//! The memcached protocol fuzz harness, shared by the `text` and `binary` targets and by
//! the seed test (`tests/seeds.rs`), so seeds are checked against exactly what the
//! targets run.
//!
//! # Input format
//!
//! ```text
//! input   = limits u8, split u8, seed u8, stream*
//! limits  = bits 0-2: item_size_max = 256 << n (256 B .. 32 KiB);
//!           bits 3-7: max_get_line = 2049 + 256 * n
//! split   = segments are 1 ..= 2^(split % 12) bytes long (so 0 feeds byte by byte),
//!           lengths drawn from a xorshift seeded by split and seed
//! stream  = the bytes a client sends (the `binary` target puts 0x80 in front, so the
//!           connection speaks the binary protocol)
//! ```
//!
//! # What is checked
//!
//! The stream is fed to a [`Parser`] segment by segment, as a connection receives it,
//! parsing after each segment until the parser needs more or closes. Nothing may panic;
//! each call must consume input or return `Incomplete` (or a closing error), and
//! `Incomplete` must leave the input untouched but for bytes being swallowed; a value
//! must share storage with the received buffers (zero copy). The natural replies of each
//! request (and every other reply kind) are encoded; binary output must be well-formed
//! packets. Finally the same stream fed as one segment must give the same outcomes and
//! leave the same bytes: segmentation must not matter.

use ebb_core::iobuf::{IOBuf, IOBufChain};
use memcached::protocol::{
    Command, Limits, MetaItem, MetaOutcome, Parsed, Parser, ReplyTo, Request, Response, encode,
    encode_meta,
};

/// The fixed input bytes before the stream.
pub const PREFIX: usize = 3;

/// What one run produced.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Every parse result other than `Incomplete`, in order (a closing error last).
    pub parsed: Vec<Parsed>,
    /// The bytes left unparsed.
    pub rest: Vec<u8>,
    /// Every reply encoded.
    pub replies: Vec<u8>,
}

/// The limits an input asks for.
pub fn limits(b: u8) -> Limits {
    Limits {
        item_size_max: 256 << (b & 7),
        max_get_line: 2049 + 256 * usize::from(b >> 3),
    }
}

#[path = "../../../../crates/ebb-testkit/src/stream_cuts.rs"]
mod stream_cuts;
/// Cuts `stream` into segments as the `split` and `seed` bytes say.
pub use stream_cuts::segments;

/// Runs one input; `binary` prefixes the stream with the binary magic.
pub fn run(data: &[u8], binary: bool) -> Outcome {
    let Some((&[l, split, seed], stream)) = data.split_first_chunk::<PREFIX>() else {
        return Outcome::default();
    };
    let owned;
    let stream = if binary {
        owned = [&[0x80][..], stream].concat();
        &owned[..]
    } else {
        stream
    };
    let limits = limits(l);
    let segmented = feed(limits, &segments(stream, split, seed));
    let whole = feed(limits, &[stream]);
    assert_eq!(
        segmented.parsed, whole.parsed,
        "segmentation changed the outcome"
    );
    // After a close the rest is whatever had arrived: only compare it otherwise.
    let closed = matches!(whole.parsed.last(), Some(Parsed::Error(e)) if e.close);
    assert!(
        closed || segmented.rest == whole.rest,
        "segmentation changed what is left"
    );
    segmented
}

/// Feeds `segments` to a fresh parser as a connection would, checking as it goes.
pub fn feed(limits: Limits, segments: &[&[u8]]) -> Outcome {
    let mut p = Parser::new(limits);
    let mut input = IOBufChain::new();
    let mut received: Vec<IOBuf> = Vec::new();
    let mut out = Outcome::default();
    let mut replies = IOBufChain::new();
    'segments: for seg in segments {
        let buf = IOBuf::copy_from_slice(seg);
        received.push(buf.clone());
        input.push_back(buf);
        loop {
            let before = input.len();
            let swallowing = p.swallowing();
            // Bounded: a full copy per call would make byte-by-byte feeds quadratic
            // (the length is checked always, the bytes when they are few segments).
            let snapshot = (before <= 512 && input.segment_count() <= 8 && swallowing == 0)
                .then(|| input.to_vec());
            let parsed = p.parse(&mut input);
            match &parsed {
                Parsed::Incomplete => {
                    assert_eq!(
                        before - input.len(),
                        swallowing.min(before),
                        "Incomplete consumed bytes it was not swallowing"
                    );
                    if let Some(snapshot) = snapshot {
                        assert_eq!(input.to_vec(), snapshot, "Incomplete changed the input");
                    }
                    break;
                }
                Parsed::Error(e) => {
                    replies.append(&mut e.reply.clone());
                    if e.close {
                        out.parsed.push(parsed);
                        break 'segments;
                    }
                    assert!(input.len() < before, "an error consumed nothing");
                }
                Parsed::Request(cmd) => {
                    assert!(input.len() < before, "a request consumed nothing");
                    check_zero_copy(cmd, &received);
                    natural_replies(cmd, &mut replies);
                }
            }
            out.parsed.push(parsed);
        }
    }
    out.rest = input.to_vec();
    out.replies = replies.to_vec();
    if p.protocol() == Some(memcached::protocol::Protocol::Binary) {
        check_binary_replies(&out.replies);
    }
    out
}

/// A value's segments are views of received buffers, not copies.
fn check_zero_copy(cmd: &Command, received: &[IOBuf]) {
    let (Request::Store { value, .. } | Request::MetaSet { value, .. }) = &cmd.request else {
        return;
    };
    // Bounded work: a 1-byte-segment feed of a big value would be quadratic.
    if value.segment_count().saturating_mul(received.len()) > 200_000 {
        return;
    }
    for seg in value {
        assert!(
            received.iter().any(|r| r.shares_storage_with(seg)),
            "a value segment was copied"
        );
    }
}

/// The replies a server would send for `cmd` (hits and misses alternating), followed
/// by every other reply kind, so each encoder path runs for each protocol and opcode.
fn natural_replies(cmd: &Command, out: &mut IOBufChain) {
    let to: &ReplyTo = &cmd.reply_to;
    let data = [IOBuf::from_static(b"cached value")];
    match &cmd.request {
        Request::Get { keys, .. } => {
            for (i, key) in keys.iter().enumerate() {
                let r = if i % 2 == 0 {
                    Response::Value {
                        key,
                        flags: 7,
                        cas: 9,
                        data: &data,
                        end: false,
                    }
                } else {
                    Response::Miss { key }
                };
                encode(to, &r, out);
            }
            encode(to, &Response::End, out);
        }
        Request::Store { key, value, .. } => {
            encode(to, &Response::Stored { cas: 3 }, out);
            // Serve the stored value straight back, as a get of it would.
            let value = Response::Value {
                key,
                flags: 0,
                cas: 3,
                data: &value.iter().cloned().collect::<Vec<_>>(),
                end: false,
            };
            encode(to, &value, out);
        }
        Request::Delete { .. } => encode(to, &Response::Deleted, out),
        Request::Arith { delta, .. } => encode(
            to,
            &Response::Number {
                value: *delta,
                cas: 4,
            },
            out,
        ),
        Request::Touch { .. } => encode(to, &Response::Touched { flags: 1, cas: 2 }, out),
        Request::FlushAll { .. } | Request::Verbosity { .. } => encode(to, &Response::Ok, out),
        Request::Version => encode(to, &Response::Version("1.6.45"), out),
        Request::Stats { args } => {
            for a in args {
                encode(to, &Response::Stat { name: a, value: a }, out);
            }
            encode(to, &Response::StatsEnd, out);
        }
        Request::Quit => encode(to, &Response::Quit, out),
        Request::Noop => encode(to, &Response::Noop, out),
        Request::MetaGet { key, flags }
        | Request::MetaDelete { key, flags }
        | Request::MetaArith { key, flags } => {
            meta_replies(key, flags, &data.iter().cloned().collect(), out);
        }
        Request::MetaSet {
            key, flags, value, ..
        } => {
            // Every outcome, and the stored value served back as mg would.
            meta_replies(key, flags, value, out);
        }
    }
    for r in [
        Response::NotStored,
        Response::Exists,
        Response::NotFound,
        Response::Reset,
        Response::UnknownStats,
        Response::NonNumeric,
        Response::TooLarge,
        Response::OutOfMemory("out of memory"),
    ] {
        encode(to, &r, out);
    }
}

/// Every meta outcome encoded for a meta request's flags (an item created or not).
fn meta_replies(
    key: &[u8],
    flags: &memcached::protocol::MetaFlags,
    data: &IOBufChain,
    out: &mut IOBufChain,
) {
    for created in [false, true] {
        let item = MetaItem {
            flags: 7,
            cas: 9,
            value: data,
            ttl: -1,
            ttl_touched: 100,
            ttl_vivified: i64::from(u32::MAX),
            created,
            last_access: 3,
            fetched: created,
        };
        encode_meta(flags, key, &MetaOutcome::Item(item), out);
    }
    for o in [
        MetaOutcome::Done { cas: u64::MAX },
        MetaOutcome::NotStored,
        MetaOutcome::Exists,
        MetaOutcome::NotFound,
        MetaOutcome::Miss,
    ] {
        encode_meta(flags, key, &o, out);
    }
}

/// Binary output is a sequence of whole response packets.
fn check_binary_replies(bytes: &[u8]) {
    let mut rest = bytes;
    while !rest.is_empty() {
        let Some((header, body)) = rest.split_first_chunk::<24>() else {
            panic!("a truncated response header");
        };
        assert_eq!(header[0], 0x81, "response magic");
        let keylen = usize::from(u16::from_be_bytes([header[2], header[3]]));
        let extlen = usize::from(header[4]);
        let bodylen = u32::from_be_bytes([header[8], header[9], header[10], header[11]]) as usize;
        assert!(keylen + extlen <= bodylen, "key and extras within the body");
        assert!(body.len() >= bodylen, "a truncated response body");
        rest = &body[bodylen..];
    }
}
