//! The binary protocol: a 24-byte header (magic 0x80, opcode, key length, extras
//! length, body length, opaque, CAS), then extras, key and value.
//!
//! Mirrors memcached 1.6.45's `proto_bin.c`: `try_read_command_binary` (magic, waiting
//! for header + extras + key) and `dispatch_bin_command` (length checks per opcode, in
//! the same order, with the same status and whether the connection is closed).
//!
//! # Invariants
//!
//! * The header is read through a cursor (it may straddle segments); every length in it
//!   is checked against the others and against the bytes present before anything is
//!   split off.
//! * A request is consumed as memcached consumes it: header + extras + key, plus the
//!   value for storage opcodes (extra body bytes after a `GAT`/`TOUCH`/`STAT` key are
//!   read as the next request, as in memcached).
//! * The value is split off without copying.

use alloc::vec::Vec;

use ebb::{IOBuf, IOBufChain};

use super::{
    BinaryMeta, Command, ErrorKind, KEY_MAX_LENGTH, Key, ParseError, Parsed, Parser, ReplyTo,
    Request, StoreMode,
};

/// Magic byte of a request.
pub(super) const REQ_MAGIC: u8 = 0x80;
/// Magic byte of a response.
pub(super) const RES_MAGIC: u8 = 0x81;
/// Length of a request or response header.
pub(super) const HEADER_LEN: usize = 24;
/// memcached's `ITEM_SIZE_MAX_UPPER_LIMIT`: a larger body closes the connection.
const BODY_MAX: usize = 1024 * 1024 * 1024;

/// The binary opcodes memcached 1.6 knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[allow(missing_docs)] // The names are the protocol's.
pub enum Opcode {
    Get = 0x00,
    Set = 0x01,
    Add = 0x02,
    Replace = 0x03,
    Delete = 0x04,
    Increment = 0x05,
    Decrement = 0x06,
    Quit = 0x07,
    Flush = 0x08,
    GetQ = 0x09,
    Noop = 0x0a,
    Version = 0x0b,
    GetK = 0x0c,
    GetKQ = 0x0d,
    Append = 0x0e,
    Prepend = 0x0f,
    Stat = 0x10,
    SetQ = 0x11,
    AddQ = 0x12,
    ReplaceQ = 0x13,
    DeleteQ = 0x14,
    IncrementQ = 0x15,
    DecrementQ = 0x16,
    QuitQ = 0x17,
    FlushQ = 0x18,
    AppendQ = 0x19,
    PrependQ = 0x1a,
    Touch = 0x1c,
    Gat = 0x1d,
    GatQ = 0x1e,
    SaslListMechs = 0x20,
    SaslAuth = 0x21,
    SaslStep = 0x22,
    GatK = 0x23,
    GatKQ = 0x24,
}

impl Opcode {
    /// The opcode with this value, if memcached handles it.
    pub fn from_u8(v: u8) -> Option<Self> {
        use Opcode::*;
        Some(match v {
            0x00 => Get,
            0x01 => Set,
            0x02 => Add,
            0x03 => Replace,
            0x04 => Delete,
            0x05 => Increment,
            0x06 => Decrement,
            0x07 => Quit,
            0x08 => Flush,
            0x09 => GetQ,
            0x0a => Noop,
            0x0b => Version,
            0x0c => GetK,
            0x0d => GetKQ,
            0x0e => Append,
            0x0f => Prepend,
            0x10 => Stat,
            0x11 => SetQ,
            0x12 => AddQ,
            0x13 => ReplaceQ,
            0x14 => DeleteQ,
            0x15 => IncrementQ,
            0x16 => DecrementQ,
            0x17 => QuitQ,
            0x18 => FlushQ,
            0x19 => AppendQ,
            0x1a => PrependQ,
            0x1c => Touch,
            0x1d => Gat,
            0x1e => GatQ,
            0x20 => SaslListMechs,
            0x21 => SaslAuth,
            0x22 => SaslStep,
            0x23 => GatK,
            0x24 => GatKQ,
            _ => return None,
        })
    }

    /// Quiet: success (and a get miss) is not answered.
    pub fn is_quiet(self) -> bool {
        use Opcode::*;
        matches!(
            self,
            GetQ | GetKQ
                | SetQ
                | AddQ
                | ReplaceQ
                | DeleteQ
                | IncrementQ
                | DecrementQ
                | QuitQ
                | FlushQ
                | AppendQ
                | PrependQ
                | GatQ
                | GatKQ
        )
    }

    /// A get whose reply carries the key.
    pub fn returns_key(self) -> bool {
        matches!(
            self,
            Opcode::GetK | Opcode::GetKQ | Opcode::GatK | Opcode::GatKQ
        )
    }
}

/// Response status codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Status {
    /// Success.
    Success = 0x00,
    /// Key not found.
    KeyNotFound = 0x01,
    /// Key exists (or CAS mismatch).
    KeyExists = 0x02,
    /// Value too large.
    TooLarge = 0x03,
    /// Invalid arguments.
    InvalidArguments = 0x04,
    /// Item not stored.
    NotStored = 0x05,
    /// Incr/decr on a non-numeric value.
    NonNumeric = 0x06,
    /// Authentication error (also a refused flush).
    AuthError = 0x20,
    /// Unknown command.
    UnknownCommand = 0x81,
    /// Out of memory.
    OutOfMemory = 0x82,
}

impl Status {
    /// The body memcached's `write_bin_error` sends with this status.
    pub fn message(self) -> &'static [u8] {
        match self {
            Status::Success => b"",
            Status::KeyNotFound => b"Not found",
            Status::KeyExists => b"Data exists for key.",
            Status::TooLarge => b"Too large.",
            Status::InvalidArguments => b"Invalid arguments",
            Status::NotStored => b"Not stored.",
            Status::NonNumeric => b"Non-numeric server-side value for incr or decr",
            Status::AuthError => b"Auth failure.",
            Status::UnknownCommand => b"Unknown command",
            Status::OutOfMemory => b"Out of memory",
        }
    }
}

/// A response header.
pub(super) fn response_header(
    meta: &BinaryMeta,
    status: Status,
    extlen: u8,
    keylen: u16,
    bodylen: u32,
    cas: u64,
) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0] = RES_MAGIC;
    h[1] = meta.opcode;
    h[2..4].copy_from_slice(&keylen.to_be_bytes());
    h[4] = extlen;
    // h[5]: data type, always raw bytes (0).
    h[6..8].copy_from_slice(&(status as u16).to_be_bytes());
    h[8..12].copy_from_slice(&bodylen.to_be_bytes());
    h[12..16].copy_from_slice(&meta.opaque.to_be_bytes());
    h[16..24].copy_from_slice(&cas.to_be_bytes());
    h
}

/// An error response as `write_bin_error` builds it: the status's message as the body.
pub(super) fn error_packet(meta: &BinaryMeta, status: Status, out: &mut IOBufChain) {
    let msg = status.message();
    // Messages are short constants.
    let header = response_header(meta, status, 0, 0, msg.len() as u32, 0);
    let mut buf = IOBuf::with_capacity(HEADER_LEN + msg.len());
    let _ = buf.extend_from_slice(&header);
    let _ = buf.extend_from_slice(msg);
    out.push_back(buf);
}

/// The fields of a request header.
struct Header {
    opcode: u8,
    extlen: usize,
    keylen: usize,
    bodylen: usize,
    opaque: u32,
    cas: u64,
}

fn read_header(input: &IOBufChain) -> Option<(u8, Header)> {
    let h: [u8; HEADER_LEN] = input.cursor().read_array().ok()?;
    let [
        magic,
        opcode,
        k0,
        k1,
        extlen,
        _datatype,
        _v0,
        _v1,
        b0,
        b1,
        b2,
        b3,
        o0,
        o1,
        o2,
        o3,
        c @ ..,
    ] = h;
    Some((
        magic,
        Header {
            opcode,
            extlen: usize::from(extlen),
            keylen: usize::from(u16::from_be_bytes([k0, k1])),
            bodylen: u32::from_be_bytes([b0, b1, b2, b3]) as usize,
            opaque: u32::from_be_bytes([o0, o1, o2, o3]),
            cas: u64::from_be_bytes(c),
        },
    ))
}

/// Parses one binary request off the front of `input`.
pub(super) fn parse(p: &mut Parser, input: &mut IOBufChain) -> Parsed {
    let Some((magic, h)) = read_header(input) else {
        p.need = HEADER_LEN;
        return Parsed::Incomplete;
    };
    if magic != REQ_MAGIC {
        return Parsed::Error(ParseError {
            kind: ErrorKind::BadMagic,
            reply: IOBufChain::new(),
            close: true,
            unlink: None,
        });
    }
    // memcached waits for extras and key before looking at the lengths.
    let head_len = HEADER_LEN + h.extlen + h.keylen;
    if input.len() < head_len {
        p.need = head_len;
        return Parsed::Incomplete;
    }
    let meta = BinaryMeta {
        opcode: h.opcode,
        opaque: h.opaque,
        cas: h.cas,
    };
    let fail = |kind, status| {
        let mut reply = IOBufChain::new();
        error_packet(&meta, status, &mut reply);
        Parsed::Error(ParseError {
            kind,
            reply,
            close: true,
            unlink: None,
        })
    };
    if h.keylen > h.bodylen || h.keylen + h.extlen > h.bodylen {
        return fail(ErrorKind::BadLengths, Status::UnknownCommand);
    }
    if h.bodylen > BODY_MAX || h.keylen > KEY_MAX_LENGTH {
        return fail(ErrorKind::InvalidArguments, Status::InvalidArguments);
    }
    let invalid = || fail(ErrorKind::InvalidArguments, Status::InvalidArguments);

    // Extras and key, copied (at most 255 + 250 bytes).
    let mut cursor = input.cursor();
    let _ = cursor.skip(HEADER_LEN);
    let extras = cursor
        .read_bytes(h.extlen)
        .map(|b| b.into_owned())
        .unwrap_or_default();
    let key_bytes = cursor
        .read_bytes(h.keylen)
        .map(|b| b.into_owned())
        .unwrap_or_default();
    let key = Key::new(&key_bytes);
    let ext_u32 = |at: usize| -> u32 {
        extras
            .get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, u32::from_be_bytes)
    };
    let ext_u64 = |at: usize| -> u64 {
        extras
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map_or(0, u64::from_be_bytes)
    };
    let rest = h.bodylen - h.keylen - h.extlen;
    let (ext, klen, body) = (h.extlen, h.keylen, h.bodylen);

    let Some(op) = Opcode::from_u8(h.opcode) else {
        return unknown(p, input, &meta, head_len, rest);
    };
    use Opcode::*;
    let request = match op {
        Version => {
            if ext != 0 || klen != 0 || body != 0 {
                return invalid();
            }
            Request::Version
        }
        Flush | FlushQ => {
            if klen != 0 || body != ext || (ext != 0 && ext != 4) {
                return invalid();
            }
            let delay = if ext == 4 { ext_u32(0) } else { 0 };
            Request::FlushAll {
                delay: i64::from(delay),
            }
        }
        Noop => {
            if ext != 0 || klen != 0 || body != 0 {
                return invalid();
            }
            Request::Noop
        }
        Set | SetQ | Add | AddQ | Replace | ReplaceQ => {
            if ext != 8 || klen == 0 || body < klen + 8 {
                return invalid();
            }
            let flags = ext_u32(0);
            let mode = if h.cas != 0 {
                StoreMode::Cas
            } else {
                match op {
                    Set | SetQ => StoreMode::Set,
                    Add | AddQ => StoreMode::Add,
                    _ => StoreMode::Replace,
                }
            };
            let unlink = matches!(op, Set | SetQ).then(|| key.clone());
            return store(
                p,
                input,
                meta,
                head_len,
                rest,
                Request::Store {
                    mode,
                    key,
                    flags,
                    exptime: i64::from(ext_u32(4)),
                    cas: h.cas,
                    value: IOBufChain::new(),
                },
                unlink,
            );
        }
        Append | AppendQ | Prepend | PrependQ => {
            if klen == 0 || ext != 0 {
                return invalid();
            }
            let mode = if matches!(op, Append | AppendQ) {
                StoreMode::Append
            } else {
                StoreMode::Prepend
            };
            return store(
                p,
                input,
                meta,
                head_len,
                rest,
                Request::Store {
                    mode,
                    key,
                    flags: 0,
                    exptime: 0,
                    cas: h.cas,
                    value: IOBufChain::new(),
                },
                None,
            );
        }
        Get | GetQ | GetK | GetKQ => {
            if ext != 0 || body != klen || klen == 0 {
                return invalid();
            }
            Request::Get {
                keys: smallvec::smallvec![key],
                cas: false,
                touch: None,
            }
        }
        Delete | DeleteQ => {
            if klen == 0 || ext != 0 || body != klen {
                return invalid();
            }
            Request::Delete { key, cas: h.cas }
        }
        Increment | IncrementQ | Decrement | DecrementQ => {
            if klen == 0 || ext != 20 || body != klen + ext {
                return invalid();
            }
            let expiration = ext_u32(16);
            Request::Arith {
                key,
                incr: matches!(op, Increment | IncrementQ),
                delta: ext_u64(0),
                // An expiry of all ones means "do not create".
                initial: (expiration != u32::MAX).then(|| ext_u64(8)),
                exptime: i64::from(expiration),
                cas: h.cas,
            }
        }
        Stat => {
            if ext != 0 {
                return invalid();
            }
            Request::Stats {
                args: key_bytes
                    .split(|&b| b == b' ')
                    .filter(|a| !a.is_empty())
                    .map(<[u8]>::to_vec)
                    .collect::<Vec<_>>(),
            }
        }
        Quit | QuitQ => {
            if klen != 0 || ext != 0 || body != 0 {
                return invalid();
            }
            Request::Quit
        }
        // SASL is not enabled (memcached without -S): its opcodes are unknown, once
        // their lengths pass the checks.
        SaslListMechs => {
            if ext != 0 || klen != 0 || body != 0 {
                return invalid();
            }
            return unknown(p, input, &meta, head_len, rest);
        }
        SaslAuth | SaslStep => {
            if ext != 0 || klen == 0 {
                return invalid();
            }
            return unknown(p, input, &meta, head_len, rest);
        }
        Touch | Gat | GatQ | GatK | GatKQ => {
            if ext != 4 || klen == 0 {
                return invalid();
            }
            let exptime = i64::from(ext_u32(0));
            if op == Touch {
                Request::Touch { key, exptime }
            } else {
                Request::Get {
                    keys: smallvec::smallvec![key],
                    cas: false,
                    touch: Some(exptime),
                }
            }
        }
    };
    let _ = input.trim_front(head_len);
    Parsed::Request(Command {
        request,
        reply_to: ReplyTo::Binary(meta),
    })
}

/// An opcode memcached does not handle: `UNKNOWN_COMMAND`, and the rest of the body
/// swallowed.
///
/// memcached 1.6 swallows `bodylen` bytes counted from after the key (it has already
/// consumed extras and key by then), which eats `extlen + keylen` bytes of the next
/// request; this parser swallows exactly the rest of the packet, which is what that code
/// means to do and keeps the stream in step.
fn unknown(
    p: &mut Parser,
    input: &mut IOBufChain,
    meta: &BinaryMeta,
    head_len: usize,
    rest: usize,
) -> Parsed {
    let _ = input.trim_front(head_len);
    p.swallow(input, rest);
    let mut reply = IOBufChain::new();
    error_packet(meta, Status::UnknownCommand, &mut reply);
    Parsed::Error(ParseError {
        kind: ErrorKind::UnknownOpcode,
        reply,
        close: false,
        unlink: None,
    })
}

/// A storage request: refuse a value too large (`E2BIG`, swallowed, no close), else wait
/// for all of it and split it off.
fn store(
    p: &mut Parser,
    input: &mut IOBufChain,
    meta: BinaryMeta,
    head_len: usize,
    vlen: usize,
    mut request: Request,
    unlink: Option<Key>,
) -> Parsed {
    let Request::Store {
        ref key,
        flags,
        ref mut value,
        ..
    } = request
    else {
        return Parsed::Incomplete; // Unreachable: callers pass a Store.
    };
    if !p.limits.item_fits(key.len(), flags, vlen) {
        let _ = input.trim_front(head_len);
        p.swallow(input, vlen);
        let mut reply = IOBufChain::new();
        error_packet(&meta, Status::TooLarge, &mut reply);
        return Parsed::Error(ParseError {
            kind: ErrorKind::TooLarge,
            reply,
            close: false,
            unlink,
        });
    }
    if input.len() < head_len + vlen {
        p.need = head_len + vlen;
        return Parsed::Incomplete;
    }
    let _ = input.trim_front(head_len);
    match input.split_to(vlen) {
        Ok(v) => *value = v,
        Err(_) => return Parsed::Incomplete, // Unreachable: length checked above.
    }
    Parsed::Request(Command {
        request,
        reply_to: ReplyTo::Binary(meta),
    })
}
