//! The meta commands' command lines (`mg`, `ms`, `md`, `ma`): the flags parsed in
//! memcached's order with its checks and error lines (`_meta_flag_preparse`,
//! `process_mget_command`, ...), each line turned into a [`Line`] for `text` to finish
//! (an `ms` data block is read by `text` exactly as a `set` data block).

use super::line::{Line, Tokens, c_strtol_i32, c_strtoul_u32, c_strtoull_u64};
use super::meta::{MetaCmd, MetaFlags, MetaToken, base64_decode};
use super::{Command, ErrorKind, KEY_MAX_LENGTH, Key, ReplyTo, Request, StoreMode};

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
fn refused(reply: &'static [u8]) -> Line {
    Line::refused(ErrorKind::BadFormat, reply, false)
}

fn meta_request(request: Request) -> Line {
    Line::Request(Command {
        request,
        reply_to: ReplyTo::Text {
            noreply: false,
            cas: false,
        },
    })
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
