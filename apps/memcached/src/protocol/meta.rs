//! The meta commands `mg`, `ms`, `md`, `ma` (`mn` is in `text`): their command lines,
//! their flags, and their replies.
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

use super::text::{Line, Tokens, c_strtol_i32, c_strtoul_u32, c_strtoull_u64};
use super::{ErrorKind, KEY_MAX_LENGTH, Key, ReplyTo, Request, StoreMode};

const ERROR: &[u8] = b"ERROR\r\n";
const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const FLAGS_TOO_LONG_MG: &[u8] = b"CLIENT_ERROR options flags are too long\r\n";
const FLAGS_TOO_LONG: &[u8] = b"CLIENT_ERROR options flags too long\r\n";
const DUPLICATE_FLAG: &[u8] = b"CLIENT_ERROR duplicate flag\r\n";
const INVALID_FLAG: &[u8] = b"CLIENT_ERROR invalid flag\r\n";
const INVALID_OR_DUPLICATE: &[u8] = b"CLIENT_ERROR invalid or duplicate flag\r\n";
const DECODING_KEY: &[u8] = b"CLIENT_ERROR error decoding key\r\n";
const BAD_TOKEN: &[u8] = b"CLIENT_ERROR bad token in command line format\r\n";
const M_LENGTH: &[u8] = b"CLIENT_ERROR incorrect length for M token\r\n";
const BAD_INITIAL: &[u8] = b"CLIENT_ERROR invalid numeric initial value\r\n";
const BAD_DELTA: &[u8] = b"CLIENT_ERROR invalid numeric delta value\r\n";
const OPAQUE_TOO_LONG: &[u8] = b"CLIENT_ERROR opaque token too long\r\n";
const MS_MODE: &[u8] = b"CLIENT_ERROR invalid mode for ms M token\r\n";
const MA_MODE: &[u8] = b"CLIENT_ERROR invalid mode for ma M token\r\n";
const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";

/// memcached's `MFLAG_MAX_OPT_LENGTH`: a line of more tokens (counting its terminal
/// empty token) is refused.
const MAX_OPT_TOKENS: usize = 20;
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
    fn new(cmd: MetaCmd) -> Self {
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

    fn opaque_too_long(&self) -> bool {
        self.tokens
            .iter()
            .any(|t| matches!(t, MetaToken::Opaque(o) if o.len() > MAX_OPAQUE))
    }
}

fn refused(reply: &'static [u8]) -> Line {
    Line::refused(ErrorKind::BadFormat, reply, false)
}

fn meta_request(request: Request) -> Line {
    Line::Request(
        request,
        ReplyTo::Text {
            noreply: false,
            cas: false,
        },
    )
}

/// `_meta_flag_preparse`: the flags from token `start` on, and the key (decoded for
/// `b`). The error is memcached's `errstr` (the caller may replace it).
fn preparse(t: &Tokens<'_>, start: usize, cmd: MetaCmd) -> Result<(MetaFlags, Key), &'static [u8]> {
    let mut f = MetaFlags::new(cmd);
    let raw_key = t.get(1).unwrap_or_default();
    let mut key = Key::new(raw_key);
    let mut seen = [false; 127];
    // A failed flag sets the error and parsing goes on (a later one may replace the
    // message); unknown and repeated flags stop at once.
    let mut error: Option<&'static [u8]> = None;
    let mut fail = |e: Option<&'static [u8]>| {
        error = Some(e.or(error).unwrap_or(BAD_FORMAT));
    };
    for i in start..t.len() {
        let tok = t.get(i).unwrap_or_default();
        let Some(&o) = tok.first() else { continue };
        let arg = tok.get(1..).unwrap_or_default();
        match seen.get_mut(usize::from(o)) {
            Some(s) if !*s => *s = true,
            _ => return Err(DUPLICATE_FLAG),
        }
        match o {
            b'b' => {
                f.base64 = true;
                match base64_decode(raw_key) {
                    Some(k) => key = Key::new(&k),
                    None => fail(Some(DECODING_KEY)),
                }
            }
            // Vivify on a miss and recache (the win/stale tokens of mg) are not
            // offered: refused as flags memcached would not know.
            b'N' | b'R' if cmd == MetaCmd::Get => return Err(INVALID_FLAG),
            // Marking an item stale instead of deleting it: not offered either.
            b'I' if cmd == MetaCmd::Delete => return Err(INVALID_FLAG),
            b'N' | b'T' | b'R' => match c_strtol_i32(arg) {
                None => fail(Some(BAD_TOKEN)),
                Some(v) if o == b'N' => {
                    f.vivify = Some(i64::from(v));
                    f.tokens.push(MetaToken::Vivify);
                }
                Some(v) if o == b'T' => {
                    f.ttl = Some(i64::from(v));
                    f.tokens.push(MetaToken::SetTtl);
                }
                Some(_) => {}
            },
            b'l' => f.tokens.push(MetaToken::LastAccess),
            b'O' => f.tokens.push(MetaToken::Opaque(tok.to_vec())),
            b'P' | b'L' => {}
            b'k' => f.tokens.push(MetaToken::Key),
            b's' => f.tokens.push(MetaToken::Size),
            b't' => f.tokens.push(MetaToken::Ttl),
            b'c' => f.tokens.push(MetaToken::Cas),
            b'f' => f.tokens.push(MetaToken::Flags),
            b'h' => f.tokens.push(MetaToken::Hit),
            b'v' => f.value = true,
            b'u' => f.no_bump = true,
            b'q' => f.quiet = true,
            b'F' => match c_strtoul_u32(arg) {
                Some(v) => f.client_flags = v,
                None => fail(None),
            },
            b'C' => match c_strtoull_u64(arg) {
                Some(v) => f.cas = Some(v),
                None => fail(Some(BAD_TOKEN)),
            },
            b'M' => match tok {
                &[_, m] => f.mode = Some(m),
                _ => fail(Some(M_LENGTH)),
            },
            b'J' => match c_strtoull_u64(arg) {
                Some(v) => f.initial = v,
                None => fail(Some(BAD_INITIAL)),
            },
            b'D' => match c_strtoull_u64(arg) {
                Some(v) => f.delta = v,
                None => fail(Some(BAD_DELTA)),
            },
            b'I' => f.invalidate = true,
            _ => return Err(INVALID_FLAG),
        }
    }
    match error {
        Some(e) => Err(e),
        None => Ok((f, key)),
    }
}

/// The checks every meta command but `mn` starts with; `Err` is the refusal.
fn common(t: &Tokens<'_>) -> Result<(), (ErrorKind, &'static [u8])> {
    // WANT_TOKENS_MIN(ntokens, 3): memcached counts a terminal empty token.
    if t.len() < 2 {
        return Err((ErrorKind::UnknownCommand, ERROR));
    }
    if t.get(1).unwrap_or_default().len() > KEY_MAX_LENGTH {
        return Err((ErrorKind::BadFormat, BAD_FORMAT));
    }
    Ok(())
}

/// `mg <key> <flags>*` (process_mget_command).
pub(super) fn get(t: &Tokens<'_>) -> Line {
    if let Err((kind, reply)) = common(t) {
        return Line::refused(kind, reply, false);
    }
    if t.len() + 1 > MAX_OPT_TOKENS {
        return refused(FLAGS_TOO_LONG_MG);
    }
    let (flags, key) = match preparse(t, 2, MetaCmd::Get) {
        Ok(parsed) => parsed,
        Err(e) => return refused(e),
    };
    if flags.opaque_too_long() {
        return refused(OPAQUE_TOO_LONG);
    }
    meta_request(Request::MetaGet { key, flags })
}

/// `md <key> <flags>*` (process_mdelete_command).
pub(super) fn delete(t: &Tokens<'_>) -> Line {
    if let Err((kind, reply)) = common(t) {
        return Line::refused(kind, reply, false);
    }
    if t.len() + 1 > MAX_OPT_TOKENS {
        return refused(FLAGS_TOO_LONG);
    }
    let (flags, key) = match preparse(t, 2, MetaCmd::Delete) {
        Ok(parsed) => parsed,
        Err(_) => return refused(INVALID_OR_DUPLICATE),
    };
    if flags.opaque_too_long() {
        return refused(OPAQUE_TOO_LONG);
    }
    meta_request(Request::MetaDelete { key, flags })
}

/// `ma <key> <flags>*` (process_marithmetic_command).
pub(super) fn arith(t: &Tokens<'_>) -> Line {
    if let Err((kind, reply)) = common(t) {
        return Line::refused(kind, reply, false);
    }
    if t.len() + 1 > MAX_OPT_TOKENS {
        return refused(FLAGS_TOO_LONG);
    }
    let (flags, key) = match preparse(t, 2, MetaCmd::Arith) {
        Ok(parsed) => parsed,
        Err(_) => return refused(INVALID_OR_DUPLICATE),
    };
    if !matches!(flags.mode, None | Some(b'I' | b'+' | b'D' | b'-')) {
        return refused(MA_MODE);
    }
    // memcached checks the opaque's length only while writing the reply, after the
    // arithmetic is done; refused before it here.
    if flags.opaque_too_long() {
        return refused(OPAQUE_TOO_LONG);
    }
    meta_request(Request::MetaArith { key, flags })
}

/// `ms <key> <datalen> <flags>*` (process_mset_command): the line; `text` reads the
/// data block.
pub(super) fn set(t: &Tokens<'_>, item_fits: impl Fn(usize, u32, usize) -> bool) -> Line {
    if let Err((kind, reply)) = common(t) {
        return Line::refused(kind, reply, false);
    }
    if t.len() == 2 {
        return refused(BAD_FORMAT);
    }
    if t.len() + 1 > MAX_OPT_TOKENS {
        return refused(FLAGS_TOO_LONG);
    }
    // safe_strtol over the token alone (the tokenizer ends it with a NUL).
    let vlen = match t.get(2).and_then(c_strtol_i32) {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => v.unsigned_abs() as usize,
        _ => return refused(BAD_FORMAT),
    };
    // From here on the data block is swallowed when the command is refused.
    let refuse = |reply: &'static [u8], unlink| Line::Refused {
        kind: if reply == TOO_LARGE {
            ErrorKind::TooLarge
        } else {
            ErrorKind::BadFormat
        },
        reply: Some(reply),
        noreply: false,
        swallow: vlen + 2,
        unlink,
    };
    let (flags, key) = match preparse(t, 3, MetaCmd::Set) {
        Ok(parsed) => parsed,
        Err(e) => return refuse(e, None),
    };
    let mode = match flags.mode {
        None | Some(b'S') => StoreMode::Set,
        Some(b'E') => StoreMode::Add,
        Some(b'A') => StoreMode::Append,
        Some(b'P') => StoreMode::Prepend,
        Some(b'R') => StoreMode::Replace,
        Some(_) => return refuse(MS_MODE, None),
    };
    if flags.opaque_too_long() {
        return refuse(OPAQUE_TOO_LONG, None);
    }
    // A CAS turns set and replace into cas; add ignores it; append and prepend check
    // a nonzero one (do_store_item).
    let (mode, cas) = match (mode, flags.cas) {
        (StoreMode::Set | StoreMode::Replace, Some(c)) => (StoreMode::Cas, c),
        (StoreMode::Append | StoreMode::Prepend, Some(c)) => (mode, c),
        (mode, _) => (mode, 0),
    };
    // Storing a stale value (I with a CAS) is not offered.
    if flags.invalidate && mode == StoreMode::Cas {
        return refuse(INVALID_FLAG, None);
    }
    if !item_fits(key.len(), flags.client_flags, vlen) {
        // memcached unlinks the key's item whatever the mode.
        return refuse(TOO_LARGE, Some(key));
    }
    Line::Store {
        mode,
        exptime: flags.ttl.unwrap_or(0),
        key,
        flags: flags.client_flags,
        cas,
        vlen,
        noreply: false,
        meta: Some(alloc::boxed::Box::new(flags)),
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
