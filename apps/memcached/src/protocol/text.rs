//! The text protocol: one command line (ended by `"\n"`, usually `"\r\n"`), plus a data
//! block of `bytes + 2` bytes for storage commands.
//!
//! Mirrors memcached 1.6.45: `try_read_command_ascii` (finding the line, the 2048-byte
//! rule), `process_request` in `proto_parser.c` (recognising the command by its first
//! token's length and bytes, the `mcmc` tokenizer: at most 23 space-separated tokens,
//! `noreply` as the last of them), and the `process_*_command` functions (argument
//! checks, in the same order, with the same replies).
//!
//! # Invariants
//!
//! * The input is only modified once the outcome is known: a line is consumed together
//!   with its data block, or not at all (`Incomplete`), except when refusing a request
//!   whose data block is then swallowed.
//! * The data block is split off without copying; the line is read in place (copied
//!   only when it straddles segments) and keys are copied out of it.
//! * Every byte offset used below is within the copied line: tokens are computed from
//!   it, and slices are taken with `get`.

use alloc::borrow::Cow;

use ebb::{IOBuf, IOBufChain};

use super::line::{
    Line, Tokens, body_end, c_strtol_i32, c_strtoul_u32, mcmc_i32, mcmc_u32, mcmc_u64, split_spaces,
};
use super::meta_parse;
use super::{
    Command, ErrorKind, KEY_MAX_LENGTH, Key, Keys, ParseError, Parsed, Parser, ReplyTo, Request,
    StoreMode,
};

/// memcached closes a connection that sent this many bytes without a newline, unless
/// they begin a `get`/`gets` (`try_read_command_ascii`).
const LINE_MAX_WITHOUT_NEWLINE: usize = 2048;
/// ... and when more than this many leading spaces precede that `get`.
const MAX_LEADING_SPACES: usize = 100;
const ERROR: &[u8] = b"ERROR\r\n";
const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const BAD_DATA_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
const INVALID_EXPTIME: &[u8] = b"CLIENT_ERROR invalid exptime argument\r\n";
const INVALID_DELTA: &[u8] = b"CLIENT_ERROR invalid numeric delta argument\r\n";
const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
const NO_MEMORY_FOR_GET: &[u8] = b"SERVER_ERROR out of memory writing get response\r\n";
const SHUTDOWN_DISABLED: &[u8] = b"SERVER_ERROR: shutdown not enabled\r\n";

/// Parses one text request off the front of `input`.
pub(super) fn parse(p: &mut Parser, input: &mut IOBufChain) -> Parsed {
    // The first segment, looked up once (a call into ebb-core each time): it holds the
    // whole line nearly always.
    let front = input.front().map_or(&[][..], |seg| seg.as_slice());
    let Some(nl) = find_newline(input, front, p.scanned) else {
        let scanned_before = p.scanned;
        p.scanned = input.len();
        // The prefix test is made once, when the line first passes the limit: if it
        // passed then, the same bytes pass now.
        if input.len() > LINE_MAX_WITHOUT_NEWLINE
            && (input.len() > p.limits.max_get_line
                || (scanned_before <= LINE_MAX_WITHOUT_NEWLINE && !starts_multiget(input)))
        {
            return close(ErrorKind::LineTooLong);
        }
        return Parsed::Incomplete;
    };
    // The same rule, applied to a line that arrived whole, so the outcome does not depend
    // on how the bytes were segmented (memcached's does: it checks what one read brought).
    if nl > LINE_MAX_WITHOUT_NEWLINE && (!starts_multiget(input) || nl > p.limits.max_get_line) {
        return close(ErrorKind::LineTooLong);
    }
    let line_len = nl + 1;
    // Borrowed when the line lies in the first segment (the usual case: taken from it
    // directly, without a cursor), copied otherwise.
    let line = match front.get(..line_len) {
        Some(line) => Cow::Borrowed(line),
        None => match input.cursor().read_bytes(line_len) {
            Ok(line) => line,
            Err(_) => return Parsed::Incomplete, // Unreachable: the newline is in the input.
        },
    };
    let t = Tokens::new(&line);
    let outcome = process_line(&t, p);
    if let Line::Get {
        cas,
        touch,
        key_token,
    } = outcome
    {
        // The keys are collected here, and moved only into the request returned.
        let mut keys = Keys::new();
        let collected = collect_keys(&t, key_token, &mut keys);
        drop(line);
        let _ = input.trim_front(line_len);
        return match collected {
            Ok(()) => Parsed::Request(Command {
                request: Request::Get { keys, cas, touch },
                reply_to: ReplyTo::Text {
                    noreply: false,
                    cas,
                },
            }),
            Err((kind, reply)) => Parsed::Error(refusal(kind, reply, false, None)),
        };
    }
    drop(line);
    match outcome {
        Line::Request(command) => {
            let _ = input.trim_front(line_len);
            Parsed::Request(command)
        }
        Line::Get { .. } => Parsed::Incomplete, // Unreachable: taken above.
        Line::Refused {
            kind,
            reply,
            noreply,
            swallow,
            unlink,
        } => {
            let _ = input.trim_front(line_len);
            p.swallow(input, swallow);
            let Some(reply) = reply else {
                return close(kind);
            };
            Parsed::Error(refusal(kind, reply, noreply, unlink))
        }
        Line::Store {
            mode,
            key,
            flags,
            exptime,
            cas,
            vlen,
            noreply,
            meta,
        } => {
            let Some(total) = line_len.checked_add(vlen).and_then(|n| n.checked_add(2)) else {
                // Unreachable: `vlen` is at most `i32::MAX - 2`.
                return close(ErrorKind::BadFormat);
            };
            if input.len() < total {
                p.need = total;
                return Parsed::Incomplete;
            }
            let _ = input.trim_front(line_len);
            let Ok(value) = input.split_to(vlen) else {
                return Parsed::Incomplete; // Unreachable: checked `total` above.
            };
            let end = input.cursor().read_array::<2>().unwrap_or_default();
            let _ = input.trim_front(2);
            if &end != b"\r\n" {
                // complete_nread_ascii: the block is consumed, the item dropped, and the
                // next request starts right after it.
                return Parsed::Error(refusal(
                    ErrorKind::BadDataChunk,
                    BAD_DATA_CHUNK,
                    noreply,
                    None,
                ));
            }
            let request = match meta {
                Some(meta) => Request::MetaSet {
                    mode,
                    key,
                    client_flags: flags,
                    exptime,
                    cas,
                    value,
                    flags: meta,
                },
                None => Request::Store {
                    mode,
                    key,
                    flags,
                    exptime,
                    cas,
                    value,
                },
            };
            Parsed::Request(Command {
                request,
                reply_to: ReplyTo::Text {
                    noreply,
                    cas: false,
                },
            })
        }
    }
}

fn close(kind: ErrorKind) -> Parsed {
    Parsed::Error(ParseError {
        kind,
        reply: IOBufChain::new(),
        close: true,
        unlink: None,
    })
}

fn refusal(
    kind: ErrorKind,
    reply: &'static [u8],
    noreply: bool,
    unlink: Option<Key>,
) -> ParseError {
    let mut out = IOBufChain::new();
    // memcached's out_string: with noreply nothing is sent, errors included.
    if !noreply {
        out.push_back(IOBuf::from_static(reply));
    }
    ParseError {
        kind,
        reply: out,
        close: false,
        unlink,
    }
}

/// The offset of the first `'\n'` in `input`, whose first segment is `front`,
/// searching from `from` (bytes before it are known to hold none).
fn find_newline(input: &IOBufChain, front: &[u8], from: usize) -> Option<usize> {
    // The first segment (`front`) alone, without the segment iterator.
    if let Some(rest) = front.get(from..)
        && let Some(i) = memchr::memchr(b'\n', rest)
    {
        return Some(from + i);
    }
    let mut offset = front.len();
    for seg in input.segments().skip(1) {
        let seg_end = offset + seg.len();
        if seg_end > from {
            let skip = from.saturating_sub(offset);
            if let Some(rest) = seg.get(skip..)
                && let Some(i) = memchr::memchr(b'\n', rest)
            {
                return Some(offset + skip + i);
            }
        }
        offset = seg_end;
    }
    None
}

/// Whether a line too long to be anything else starts like a multiget: at most 100
/// leading spaces, then `"get "` or `"gets "`.
fn starts_multiget(input: &IOBufChain) -> bool {
    let n = input.len().min(MAX_LEADING_SPACES + 1 + 5);
    let Ok(head) = input.cursor().read_bytes(n) else {
        return false;
    };
    let spaces = head.iter().take_while(|&&b| b == b' ').count();
    if spaces > MAX_LEADING_SPACES {
        return false;
    }
    let rest = head.get(spaces..).unwrap_or_default();
    rest.starts_with(b"get ") || rest.starts_with(b"gets ")
}

fn process_line(t: &Tokens<'_>, p: &Parser) -> Line {
    // process_request: the shortest command is two letters and "\r\n".
    if t.line().len() < 4 {
        return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, false);
    }
    match t.command() {
        b"mn" => text_request(Request::Noop, false),
        b"ms" => meta_parse::set(t, |k, f, v| p.limits.item_fits(k, f, v)),
        b"mg" => meta_parse::get(t),
        b"md" => meta_parse::delete(t),
        b"ma" => meta_parse::arith(t),
        // Meta debug: not offered.
        b"me" => Line::refused(ErrorKind::Unsupported, ERROR, false),
        b"get" => get(t, false, false),
        b"gets" => get(t, true, false),
        b"gat" => get(t, false, true),
        b"gats" => get(t, true, true),
        b"set" => storage(t, StoreMode::Set, p),
        b"add" => storage(t, StoreMode::Add, p),
        b"replace" => storage(t, StoreMode::Replace, p),
        b"append" => storage(t, StoreMode::Append, p),
        b"prepend" => storage(t, StoreMode::Prepend, p),
        b"cas" => storage(t, StoreMode::Cas, p),
        b"incr" => arith(t, true),
        b"decr" => arith(t, false),
        b"touch" => touch(t),
        b"delete" => delete(t),
        b"quit" => text_request(Request::Quit, false),
        b"version" => text_request(Request::Version, false),
        b"stats" => text_request(
            Request::Stats {
                args: (1..t.len())
                    .filter_map(|i| t.get(i))
                    .map(<[u8]>::to_vec)
                    .collect(),
            },
            false,
        ),
        // Recognised by memcached, not offered here (log watchers).
        b"watch" => Line::refused(ErrorKind::Unsupported, ERROR, false),
        _ => unknown(t),
    }
}

fn text_request(request: Request, noreply: bool) -> Line {
    Line::Request(Command {
        request,
        reply_to: ReplyTo::Text {
            noreply,
            cas: false,
        },
    })
}

/// Commands process_request does not know: the `text_cmd_entries` table, then `ERROR`.
fn unknown(t: &Tokens<'_>) -> Line {
    let noreply = t.noreply();
    match t.get(0) {
        Some(b"flush_all") => {
            // process_flush_all_command: an argument other than `noreply` is the delay.
            let mut delay = 0;
            if t.len() != if noreply { 2 } else { 1 } {
                match t.get(1).and_then(mcmc_i32) {
                    Some(d) => delay = i64::from(d),
                    None => {
                        return Line::refused(ErrorKind::InvalidExptime, INVALID_EXPTIME, noreply);
                    }
                }
            }
            return text_request(Request::FlushAll { delay }, noreply);
        }
        Some(b"verbosity") => {
            return match t.get(1).and_then(mcmc_u32) {
                Some(level) => text_request(Request::Verbosity { level }, noreply),
                None => Line::refused(ErrorKind::BadFormat, BAD_FORMAT, noreply),
            };
        }
        // memcached's default (no -A): shutdown refused.
        Some(b"shutdown") => {
            return Line::refused(ErrorKind::Unsupported, SHUTDOWN_DISABLED, noreply);
        }
        _ => {}
    }
    // An HTTP request line: memcached closes without a word.
    if t.len() > 1
        && let Some(last) = t.get(t.len() - 1)
        && last.starts_with(b"HTTP/")
    {
        return Line::Refused {
            kind: ErrorKind::Http,
            reply: None,
            noreply,
            swallow: 0,
            unlink: None,
        };
    }
    Line::refused(ErrorKind::UnknownCommand, ERROR, noreply)
}

/// `get`/`gets` `<key>*`, `gat`/`gats` `<exptime> <key>*` (process_get_command).
fn get(t: &Tokens<'_>, cas: bool, touch: bool) -> Line {
    let key_token = if touch { 2 } else { 1 };
    if t.len() <= key_token {
        return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, false);
    }
    let mut exptime = None;
    if touch {
        match t.get(1).and_then(mcmc_i32) {
            Some(e) => exptime = Some(i64::from(e)),
            None => return Line::refused(ErrorKind::InvalidExptime, INVALID_EXPTIME, false),
        }
    }
    Line::Get {
        cas,
        touch: exptime,
        key_token,
    }
}

/// A get's keys, from token `key_token` to the end of the line, into `keys`; or why
/// the get is refused (its replies are then those of the refusal alone).
fn collect_keys(
    t: &Tokens<'_>,
    key_token: usize,
    keys: &mut Keys,
) -> Result<(), (ErrorKind, &'static [u8])> {
    if t.complete() {
        // The tokens are every word of the line: the keys are already split.
        (key_token..t.len()).try_for_each(|i| add_key(keys, t.get(i).unwrap_or_default()))
    } else {
        // Keys run to the end of the line, beyond the tokenizer's 23 tokens.
        let line = t.line();
        let body = line.get(..body_end(line)).unwrap_or_default();
        let start = t.span_start(key_token).unwrap_or(body.len());
        split_spaces(body.get(start..).unwrap_or_default())
            .filter(|key| !key.is_empty())
            .try_for_each(|key| add_key(keys, key))
    }
}

/// Adds one of a get's keys (not empty), or says why the get is refused.
fn add_key(keys: &mut Keys, key: &[u8]) -> Result<(), (ErrorKind, &'static [u8])> {
    if key.len() > KEY_MAX_LENGTH {
        // memcached drops the replies already built for this get and sends only this.
        return Err((ErrorKind::BadFormat, BAD_FORMAT));
    }
    // The list grows with the line (up to `max_get_line`): fallible, it may be the
    // one allocation a node has no block for.
    if keys.try_reserve(1).is_err() {
        return Err((ErrorKind::OutOfMemory, NO_MEMORY_FOR_GET));
    }
    keys.push(Key::new(key));
    Ok(())
}

/// `<cmd> <key> <flags> <exptime> <bytes> [<cas>] [noreply]`
/// (`_process_request_storage`, then `process_update_cmd_start`).
fn storage(t: &Tokens<'_>, mode: StoreMode, p: &Parser) -> Line {
    if t.len() < 5 {
        return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, false);
    }
    let vlen = match t.get(4).and_then(mcmc_i32) {
        Some(v) if (0..=i32::MAX - 2).contains(&v) => v.unsigned_abs() as usize,
        _ => return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, false),
    };
    let noreply = t.noreply();
    // From here on memcached swallows the data block when it refuses the command.
    let refuse = |kind, reply, unlink| Line::Refused {
        kind,
        reply: Some(reply),
        noreply,
        swallow: vlen + 2,
        unlink,
    };
    let key = t.get(1).unwrap_or_default();
    if key.len() > KEY_MAX_LENGTH {
        return refuse(ErrorKind::BadFormat, BAD_FORMAT, None);
    }
    let (Some(flags), Some(exptime)) = (
        t.from(2).and_then(c_strtoul_u32),
        t.from(3).and_then(c_strtol_i32),
    ) else {
        return refuse(ErrorKind::BadFormat, BAD_FORMAT, None);
    };
    let mut cas = 0;
    if mode == StoreMode::Cas {
        match t.get(5).and_then(mcmc_u64) {
            Some(c) => cas = c,
            None => return refuse(ErrorKind::BadFormat, BAD_FORMAT, None),
        }
    }
    if !p.limits.item_fits(key.len(), flags, vlen) {
        let unlink = (mode == StoreMode::Set).then(|| Key::new(key));
        return refuse(ErrorKind::TooLarge, TOO_LARGE, unlink);
    }
    Line::Store {
        mode,
        key: Key::new(key),
        flags,
        exptime: i64::from(exptime),
        cas,
        vlen,
        noreply,
        meta: None,
    }
}

/// `incr`/`decr <key> <delta> [noreply]` (process_arithmetic_cmd).
fn arith(t: &Tokens<'_>, incr: bool) -> Line {
    if t.len() < 3 {
        return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, false);
    }
    let noreply = t.noreply();
    let key = t.get(1).unwrap_or_default();
    if key.len() > KEY_MAX_LENGTH {
        return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, noreply);
    }
    let Some(delta) = t.get(2).and_then(mcmc_u64) else {
        return Line::refused(ErrorKind::InvalidDelta, INVALID_DELTA, noreply);
    };
    text_request(
        Request::Arith {
            key: Key::new(key),
            incr,
            delta,
            initial: None,
            exptime: 0,
            cas: 0,
        },
        noreply,
    )
}

/// `touch <key> <exptime> [noreply]` (process_touch_cmd).
fn touch(t: &Tokens<'_>) -> Line {
    if t.len() < 3 {
        return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, false);
    }
    let noreply = t.noreply();
    let key = t.get(1).unwrap_or_default();
    if key.len() > KEY_MAX_LENGTH {
        return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, noreply);
    }
    let Some(exptime) = t.get(2).and_then(mcmc_i32) else {
        return Line::refused(ErrorKind::InvalidExptime, INVALID_EXPTIME, noreply);
    };
    text_request(
        Request::Touch {
            key: Key::new(key),
            exptime: i64::from(exptime),
        },
        noreply,
    )
}

/// `delete <key> ...` as memcached 1.6.45 parses it (`proto_parser.c`: the `delete` case
/// is `_process_request_simple(pr, 2)`, then `process_delete_cmd`): at least a key; every
/// further token is ignored (1.6.45 removed the old `delay` argument check, "a
/// compatibility bodge from a decade ago"), and the request is `noreply` when its last
/// token is `noreply` — so `delete a b c d` deletes `a`, `delete k 1` deletes `k`,
/// `delete k noreply x` is answered and `delete noreply` quietly deletes the key
/// `noreply`. 1.6.18 refuses all but `delete <key> [0] [noreply]` with a usage line
/// (the module's table; libmemcached's `memccapable` expects that refusal).
fn delete(t: &Tokens<'_>) -> Line {
    if t.len() < 2 {
        return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, false);
    }
    let noreply = t.noreply();
    let key = t.get(1).unwrap_or_default();
    if key.len() > KEY_MAX_LENGTH {
        return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, noreply);
    }
    text_request(
        Request::Delete {
            key: Key::new(key),
            cas: 0,
        },
        noreply,
    )
}
