//! The meta commands `mg`, `ms`, `md`, `ma` (`mn` is in `text`): their flags and their
//! replies (their command lines are parsed in `meta_parse`).
//!
//! Mirrors memcached 1.6.18's `proto_text.c` (`_meta_flag_preparse`,
//! `process_mget_command`, `process_mset_command`, `process_mdelete_command`,
//! `process_marithmetic_command`, `_finalize_mset`): the same checks in the same order
//! with the same error lines, the same flags accepted, and the returned flags echoed in
//! the order the request gave them. The differences are listed in the module
//! documentation of `protocol` ("Meta commands").
//!
//! # Invariants
//!
//! * Flags are parsed from the copied command line: opaque tokens are copied (at most 32
//!   bytes each), nothing else is kept but numbers and the order of the flags to echo.
//! * An `ms` data block is read by `text` exactly as a `set` data block: split off the
//!   input, never copied.
//! * Every token is at least one byte (the tokenizer makes no empty tokens); every
//!   slice is taken with `get`.

use alloc::vec::Vec;

use ebb::{IOBuf, IOBufChain};

/// memcached's `MFLAG_MAX_OPAQUE_LENGTH`: the longest `O` token, the `O` included.
const MAX_OPAQUE: usize = 32;

/// Which meta command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCmd {
    /// `mg`
    Get,
    /// `ms`
    Set,
    /// `md`
    Delete,
    /// `ma`
    Arith,
}

/// A flag that shows in the reply, or changes what a later one shows; kept in request
/// order, since memcached echoes them in that order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaToken {
    /// `s`: the value's size.
    Size,
    /// `t`: seconds of TTL left, `-1` for none.
    Ttl,
    /// `c`: the CAS id.
    Cas,
    /// `f`: the client flags.
    Flags,
    /// `l`: seconds since the last access.
    LastAccess,
    /// `h`: whether the item had been fetched before (`0`/`1`).
    Hit,
    /// `k`: the key (base64 and ` b` when the request's key was).
    Key,
    /// `O...`: the opaque token, echoed whole.
    Opaque(Vec<u8>),
    /// `T`: the new TTL is set here (a `t` after it shows the new one).
    SetTtl,
    /// `N`: an item created by `ma` gets its TTL here.
    Vivify,
}

/// A meta command's flags, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaFlags {
    /// Which command.
    pub cmd: MetaCmd,
    /// `b`: the key was sent base64-encoded (the request's key is decoded).
    pub base64: bool,
    /// `q`: quiet: `mg` hides `EN`, `ms` and `md` hide `HD`, `ma` hides the reply to
    /// an update (not to an item created by `N`).
    pub quiet: bool,
    /// `v`: return the value (`mg`, `ma`).
    pub value: bool,
    /// `u`: `mg` does not mark the item fetched.
    pub no_bump: bool,
    /// `T`: the raw new TTL.
    pub ttl: Option<i64>,
    /// `N`: `ma` creates a missing item with this raw TTL.
    pub vivify: Option<i64>,
    /// `F`: `ms` client flags.
    pub client_flags: u32,
    /// `C`: compare this CAS id.
    pub cas: Option<u64>,
    /// `M`: the mode character, if given.
    pub mode: Option<u8>,
    /// `J`: `ma` initial value (0 unless given).
    pub initial: u64,
    /// `D`: `ma` delta (1 unless given).
    pub delta: u64,
    /// `I`: invalidate (accepted by `ms` without `C` only, where it does nothing).
    pub invalidate: bool,
    /// The flags to echo, in request order.
    pub tokens: Vec<MetaToken>,
}

impl MetaFlags {
    pub(super) fn new(cmd: MetaCmd) -> Self {
        Self {
            cmd,
            base64: false,
            quiet: false,
            value: false,
            no_bump: false,
            ttl: None,
            vivify: None,
            client_flags: 0,
            cas: None,
            mode: None,
            initial: 0,
            delta: 1,
            invalidate: false,
            tokens: Vec::new(),
        }
    }

    /// `ma`: increment (`MI`, `M+`, no `M`) or decrement (`MD`, `M-`).
    pub fn incr(&self) -> bool {
        !matches!(self.mode, Some(b'D' | b'-'))
    }

    pub(super) fn opaque_too_long(&self) -> bool {
        self.tokens
            .iter()
            .any(|t| matches!(t, MetaToken::Opaque(o) if o.len() > MAX_OPAQUE))
    }
}

// ---------------------------------------------------------------- replies

/// What a meta reply reports about an item.
#[derive(Clone, Copy, Debug)]
pub struct MetaItem<'a> {
    /// The client flags.
    pub flags: u32,
    /// The CAS id.
    pub cas: u64,
    /// The value (`mg`) or the number's digits (`ma`), sent for `v`.
    pub value: &'a IOBufChain,
    /// `t` before any `T` or `N` in the request: `-1` for none, else the seconds left
    /// (memcached computes it as an unsigned 32-bit difference).
    pub ttl: i64,
    /// `t` after `T`.
    pub ttl_touched: i64,
    /// `t` after `N`, for an item `ma` created.
    pub ttl_vivified: i64,
    /// `ma` created the item (so `N` applies).
    pub created: bool,
    /// `l`: seconds since the last access.
    pub last_access: u64,
    /// `h`: fetched before.
    pub fetched: bool,
}

/// The outcome of a meta command, as the server glue knows it.
#[derive(Clone, Copy, Debug)]
pub enum MetaOutcome<'a> {
    /// `mg`/`ma` found (or created) the item: `HD`, or `VA` with `v`.
    Item(MetaItem<'a>),
    /// `ms` stored, with the new CAS id; `md` deleted (CAS 0): `HD`.
    Done {
        /// The stored item's CAS id.
        cas: u64,
    },
    /// `ms`: `NS`.
    NotStored,
    /// CAS mismatch: `EX`.
    Exists,
    /// `NF`: `ms` cas/`md`/`ma` on a missing key.
    NotFound,
    /// `mg` miss: `EN`.
    Miss,
}

/// Appends `v` in decimal.
fn push_num(buf: &mut Vec<u8>, v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut v = v;
    loop {
        i -= 1;
        if let Some(d) = digits.get_mut(i) {
            *d = b'0' + (v % 10) as u8;
        }
        v /= 10;
        if v == 0 || i == 0 {
            break;
        }
    }
    buf.extend_from_slice(digits.get(i..).unwrap_or_default());
}

fn push_signed(buf: &mut Vec<u8>, v: i64) {
    if v < 0 {
        buf.push(b'-');
    }
    push_num(buf, v.unsigned_abs());
}

/// Appends the reply of a meta command to `out`: the status line with the requested
/// flags in request order, then the value for `VA`. Nothing for what `q` hides.
pub fn encode_meta(flags: &MetaFlags, key: &[u8], outcome: &MetaOutcome<'_>, out: &mut IOBufChain) {
    let cmd = flags.cmd;
    let quiet = flags.quiet
        && match outcome {
            MetaOutcome::Miss => cmd == MetaCmd::Get,
            MetaOutcome::Done { .. } => true,
            // ma: only an existing item's update (memcached's `OK` case), not an item
            // N created.
            MetaOutcome::Item(i) => cmd == MetaCmd::Arith && !i.created,
            _ => false,
        };
    if quiet {
        return;
    }
    let mut line = Vec::with_capacity(64);
    let item = match outcome {
        MetaOutcome::Item(item) => Some(item),
        _ => None,
    };
    match outcome {
        MetaOutcome::Item(item) if flags.value => {
            line.extend_from_slice(b"VA ");
            push_num(&mut line, item.value.len() as u64);
        }
        MetaOutcome::Item(_) | MetaOutcome::Done { .. } => line.extend_from_slice(b"HD"),
        MetaOutcome::NotStored => line.extend_from_slice(b"NS"),
        MetaOutcome::Exists => line.extend_from_slice(b"EX"),
        MetaOutcome::NotFound => line.extend_from_slice(b"NF"),
        MetaOutcome::Miss => line.extend_from_slice(b"EN"),
    }
    let mut ttl = item.map_or(-1, |i| i.ttl);
    for token in &flags.tokens {
        // What each command echoes: mg a hit's s t c f l h, ma a value's c t, ms c
        // (0 unless stored), and all of them O and k.
        match (token, item, cmd) {
            (MetaToken::Opaque(o), _, _) => {
                line.push(b' ');
                line.extend_from_slice(o);
            }
            (MetaToken::Key, _, _) => {
                line.extend_from_slice(b" k");
                if flags.base64 {
                    base64_encode(key, &mut line);
                    line.extend_from_slice(b" b");
                } else {
                    line.extend_from_slice(key);
                }
            }
            (MetaToken::Cas, _, MetaCmd::Set) => {
                line.extend_from_slice(b" c");
                let cas = match outcome {
                    MetaOutcome::Done { cas } => *cas,
                    _ => 0,
                };
                push_num(&mut line, cas);
            }
            (_, None, _) | (_, _, MetaCmd::Set | MetaCmd::Delete) => {}
            (MetaToken::SetTtl, Some(i), _) => ttl = i.ttl_touched,
            (MetaToken::Vivify, Some(i), _) if i.created => ttl = i.ttl_vivified,
            (MetaToken::Ttl, Some(_), _) => {
                line.extend_from_slice(b" t");
                push_signed(&mut line, ttl);
            }
            (MetaToken::Cas, Some(i), _) => {
                line.extend_from_slice(b" c");
                push_num(&mut line, i.cas);
            }
            (MetaToken::Size, Some(i), MetaCmd::Get) => {
                line.extend_from_slice(b" s");
                push_num(&mut line, i.value.len() as u64);
            }
            (MetaToken::Flags, Some(i), MetaCmd::Get) => {
                line.extend_from_slice(b" f");
                push_num(&mut line, u64::from(i.flags));
            }
            (MetaToken::LastAccess, Some(i), MetaCmd::Get) => {
                line.extend_from_slice(b" l");
                push_num(&mut line, i.last_access);
            }
            (MetaToken::Hit, Some(i), MetaCmd::Get) => {
                line.extend_from_slice(if i.fetched { b" h1" } else { b" h0" });
            }
            _ => {}
        }
    }
    line.extend_from_slice(b"\r\n");
    out.push_back(IOBuf::from_vec(line));
    if let Some(item) = item
        && flags.value
    {
        // The stored buffers themselves, not a copy.
        for seg in item.value {
            out.push_back(seg.clone());
        }
        out.push_back(IOBuf::from_static(b"\r\n"));
    }
}

// ---------------------------------------------------------------- base64

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The value of a base64 character (`=` is 0, as memcached's table has it).
fn base64_value(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        b'=' => Some(0),
        _ => None,
    }
}

/// memcached's `base64_decode`: other characters are skipped; the rest must be a
/// nonzero multiple of 4; decoding stops after the first block with padding (1 or 2
/// `=`, more is an error). `None` when memcached returns 0 (a failure).
pub fn base64_decode(src: &[u8]) -> Option<Vec<u8>> {
    let count = src.iter().filter(|&&c| base64_value(c).is_some()).count();
    if count == 0 || count % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(count / 4 * 3);
    let mut block = [0u8; 4];
    let mut n = 0;
    let mut pad = 0;
    for &c in src {
        let Some(v) = base64_value(c) else { continue };
        if c == b'=' {
            pad += 1;
        }
        if let Some(b) = block.get_mut(n) {
            *b = v;
        }
        n += 1;
        if n == 4 {
            let [b0, b1, b2, b3] = block;
            out.extend_from_slice(&[(b0 << 2) | (b1 >> 4), (b1 << 4) | (b2 >> 2), (b2 << 6) | b3]);
            n = 0;
            if pad > 0 {
                match pad {
                    1 => out.truncate(out.len() - 1),
                    2 => out.truncate(out.len() - 2),
                    _ => return None,
                }
                break;
            }
        }
    }
    (!out.is_empty()).then_some(out)
}

/// memcached's `base64_encode` (standard alphabet, `=` padding), appended to `out`.
pub fn base64_encode(src: &[u8], out: &mut Vec<u8>) {
    let char_of = |v: u8| BASE64.get(usize::from(v & 0x3f)).copied().unwrap_or(b'=');
    for chunk in src.chunks(3) {
        match *chunk {
            [a, b, c] => out.extend_from_slice(&[
                char_of(a >> 2),
                char_of(((a & 3) << 4) | (b >> 4)),
                char_of(((b & 0x0f) << 2) | (c >> 6)),
                char_of(c),
            ]),
            [a, b] => out.extend_from_slice(&[
                char_of(a >> 2),
                char_of(((a & 3) << 4) | (b >> 4)),
                char_of((b & 0x0f) << 2),
                b'=',
            ]),
            [a] => out.extend_from_slice(&[char_of(a >> 2), char_of((a & 3) << 4), b'=', b'=']),
            _ => {}
        }
    }
}
