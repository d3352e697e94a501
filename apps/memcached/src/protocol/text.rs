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

use ebb::{IOBuf, IOBufChain};

use alloc::boxed::Box;

use super::meta::{self, MetaFlags};
use super::{
    Command, ErrorKind, KEY_MAX_LENGTH, Key, Keys, ParseError, Parsed, Parser, ReplyTo, Request,
    StoreMode,
};

/// memcached closes a connection that sent this many bytes without a newline, unless
/// they begin a `get`/`gets` (`try_read_command_ascii`).
const LINE_MAX_WITHOUT_NEWLINE: usize = 2048;
/// ... and when more than this many leading spaces precede that `get`.
const MAX_LEADING_SPACES: usize = 100;
/// The tokenizer's limit (`MCMC_PARSER_MAX_TOKENS - 1`): later tokens are not split off
/// (so a `noreply` beyond the 23rd token is not seen, as in memcached).
const MAX_TOKENS: usize = 23;
/// The tokenizer only looks at this many bytes of a line (`TOKENIZER_MAXLEN`).
const TOKENIZER_MAXLEN: usize = u16::MAX as usize - 1;

const ERROR: &[u8] = b"ERROR\r\n";
const BAD_FORMAT: &[u8] = b"CLIENT_ERROR bad command line format\r\n";
const BAD_DATA_CHUNK: &[u8] = b"CLIENT_ERROR bad data chunk\r\n";
const INVALID_EXPTIME: &[u8] = b"CLIENT_ERROR invalid exptime argument\r\n";
const INVALID_DELTA: &[u8] = b"CLIENT_ERROR invalid numeric delta argument\r\n";
const TOO_LARGE: &[u8] = b"SERVER_ERROR object too large for cache\r\n";
const NO_MEMORY_FOR_GET: &[u8] = b"SERVER_ERROR out of memory writing get response\r\n";
const SHUTDOWN_DISABLED: &[u8] = b"SERVER_ERROR: shutdown not enabled\r\n";

/// What a command line asks for, before its data block (if any) is read.
pub(super) enum Line {
    /// A complete request.
    Request(Request, ReplyTo),
    /// A storage command whose data block (`vlen` bytes + `"\r\n"`) follows.
    Store {
        mode: StoreMode,
        key: Key,
        flags: u32,
        exptime: i64,
        cas: u64,
        vlen: usize,
        noreply: bool,
        /// `ms`: its flags (the request is a [`Request::MetaSet`]).
        meta: Option<Box<MetaFlags>>,
    },
    /// A refused line.
    Refused {
        kind: ErrorKind,
        /// The reply; `None` to close without one.
        reply: Option<&'static [u8]>,
        noreply: bool,
        /// Bytes after the line to swallow (a storage command's data block).
        swallow: usize,
        unlink: Option<Key>,
    },
}

impl Line {
    pub(super) fn refused(kind: ErrorKind, reply: &'static [u8], noreply: bool) -> Self {
        Line::Refused {
            kind,
            reply: Some(reply),
            noreply,
            swallow: 0,
            unlink: None,
        }
    }
}

/// Parses one text request off the front of `input`.
pub(super) fn parse(p: &mut Parser, input: &mut IOBufChain) -> Parsed {
    let Some(nl) = find_newline(input, p.scanned) else {
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
    // Borrowed when the line lies in one segment (the usual case), copied otherwise.
    let Ok(line) = input.cursor().read_bytes(line_len) else {
        return Parsed::Incomplete; // Unreachable: the newline is within the input.
    };
    let outcome = process_line(&line, p);
    drop(line);
    match outcome {
        Line::Request(request, reply_to) => {
            let _ = input.trim_front(line_len);
            Parsed::Request(Command { request, reply_to })
        }
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

/// The offset of the first `'\n'` in `input`, searching from `from` (bytes before it
/// are known to hold none).
fn find_newline(input: &IOBufChain, from: usize) -> Option<usize> {
    let mut offset = 0;
    for seg in input.segments() {
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

/// The tokens of a line: `(start, end)` offsets of up to [`MAX_TOKENS`] space-separated
/// words, as memcached's `mcmc_tokenize`.
pub(super) struct Tokens<'a> {
    line: &'a [u8],
    spans: [(usize, usize); MAX_TOKENS],
    count: usize,
}

impl<'a> Tokens<'a> {
    /// Tokenizes `line` (which ends with `"\n"`).
    fn new(line: &'a [u8]) -> Self {
        let len = line.len().min(TOKENIZER_MAXLEN);
        let end = body_end(line.get(..len).unwrap_or_default());
        let mut spans = [(0, 0); MAX_TOKENS];
        let mut count = 0;
        let body = line.get(..end).unwrap_or_default();
        let mut i = 0;
        while i < end && count < MAX_TOKENS {
            if body.get(i) == Some(&b' ') {
                i += 1;
                continue;
            }
            let start = i;
            // The token runs to the next space or the end of the body.
            i = body
                .get(i..)
                .and_then(|rest| memchr::memchr(b' ', rest))
                .map_or(end, |j| i + j);
            if let Some(span) = spans.get_mut(count) {
                *span = (start, i);
            }
            count += 1;
        }
        Self { line, spans, count }
    }

    pub(super) fn len(&self) -> usize {
        self.count
    }

    pub(super) fn get(&self, i: usize) -> Option<&'a [u8]> {
        if i >= self.count {
            return None;
        }
        let &(s, e) = self.spans.get(i)?;
        self.line.get(s..e)
    }

    /// The line from token `i`'s start to the end of its body: what memcached's
    /// `strtol`-based parsers read from.
    fn from(&self, i: usize) -> Option<&'a [u8]> {
        if i >= self.count {
            return None;
        }
        let &(s, _) = self.spans.get(i)?;
        self.line.get(s..body_end(self.line))
    }

    /// The last token is `noreply` (`_process_request_noreply`).
    fn noreply(&self) -> bool {
        self.count > 0 && self.get(self.count - 1) == Some(b"noreply".as_slice())
    }
}

/// The pieces of `bytes` between spaces, exactly as `bytes.split(|&b| b == b' ')` gives
/// them (empty pieces included), found with `memchr`.
pub(super) fn split_spaces(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(bytes);
    core::iter::from_fn(move || {
        let r = rest?;
        match memchr::memchr(b' ', r) {
            Some(i) => {
                rest = r.get(i + 1..);
                r.get(..i)
            }
            None => {
                rest = None;
                Some(r)
            }
        }
    })
}

/// Where a line's body ends: before its `"\r\n"`, or before a bare `"\n"`.
fn body_end(line: &[u8]) -> usize {
    let len = line.len();
    if len >= 2 && line.get(len - 2) == Some(&b'\r') {
        len - 2
    } else {
        len.saturating_sub(1)
    }
}

fn process_line(line: &[u8], p: &Parser) -> Line {
    // process_request: the shortest command is two letters and "\r\n".
    if line.len() < 4 {
        return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, false);
    }
    let end = body_end(line);
    let body = line.get(..end).unwrap_or_default();
    let cl = memchr::memchr(b' ', body).unwrap_or(end);
    let cmd = body.get(..cl).unwrap_or_default();
    let t = Tokens::new(line);
    match cmd {
        b"mn" => text_request(Request::Noop, false),
        b"ms" => meta::set(&t, |k, f, v| p.limits.item_fits(k, f, v)),
        b"mg" => meta::get(&t),
        b"md" => meta::delete(&t),
        b"ma" => meta::arith(&t),
        // Meta debug: not offered.
        b"me" => Line::refused(ErrorKind::Unsupported, ERROR, false),
        b"get" => get(&t, body, false, false),
        b"gets" => get(&t, body, true, false),
        b"gat" => get(&t, body, false, true),
        b"gats" => get(&t, body, true, true),
        b"set" => storage(&t, StoreMode::Set, p),
        b"add" => storage(&t, StoreMode::Add, p),
        b"replace" => storage(&t, StoreMode::Replace, p),
        b"append" => storage(&t, StoreMode::Append, p),
        b"prepend" => storage(&t, StoreMode::Prepend, p),
        b"cas" => storage(&t, StoreMode::Cas, p),
        b"incr" => arith(&t, true),
        b"decr" => arith(&t, false),
        b"touch" => touch(&t),
        b"delete" => delete(&t),
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
        _ => unknown(&t),
    }
}

fn text_request(request: Request, noreply: bool) -> Line {
    Line::Request(
        request,
        ReplyTo::Text {
            noreply,
            cas: false,
        },
    )
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
fn get(t: &Tokens<'_>, body: &[u8], cas: bool, touch: bool) -> Line {
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
    // Keys run to the end of the line, beyond the tokenizer's 23 tokens.
    let start = t.spans.get(key_token).map_or(body.len(), |s| s.0);
    let mut keys = Keys::new();
    for key in split_spaces(body.get(start..).unwrap_or_default()) {
        if key.is_empty() {
            continue;
        }
        if key.len() > KEY_MAX_LENGTH {
            // memcached drops the replies already built for this get and sends only this.
            return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, false);
        }
        // The list grows with the line (up to `max_get_line`): fallible, it may be the
        // one allocation a node has no block for.
        if keys.try_reserve(1).is_err() {
            return Line::refused(ErrorKind::OutOfMemory, NO_MEMORY_FOR_GET, false);
        }
        keys.push(Key::new(key));
    }
    Line::Request(
        Request::Get {
            keys,
            cas,
            touch: exptime,
        },
        ReplyTo::Text {
            noreply: false,
            cas,
        },
    )
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

/// memcached 1.6.18's reply to a `delete` with arguments it does not take.
const DELETE_USAGE: &[u8] =
    b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n";

/// `delete <key> [0] [noreply]`, checked as memcached 1.6.18 does (Debian 12's, and what
/// `memccapable` tests: `delete a b c d e` is refused with a usage line); 1.6.40 and later
/// ignore further arguments instead.
fn delete(t: &Tokens<'_>) -> Line {
    if t.len() < 2 {
        return Line::refused(ErrorKind::BadFormat, BAD_FORMAT, false);
    }
    let noreply = t.noreply();
    if t.len() > 2 {
        let hold_is_zero = t.get(2) == Some(&b"0"[..]);
        let valid = (t.len() == 3 && (hold_is_zero || noreply))
            || (t.len() == 4 && hold_is_zero && noreply);
        if !valid {
            return Line::refused(ErrorKind::BadFormat, DELETE_USAGE, noreply);
        }
    }
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

// Numbers. memcached parses most arguments with mcmc's strict converters (digits only,
// a bounded length, overflow refused) and flags/exptime of storage commands with
// strtoul/strtol (leading whitespace and a sign allowed, the result truncated to 32
// bits). Both are reproduced exactly, quirks included.

/// `mcmc_toktou32`: at most 11 digits, no sign, no overflow.
fn mcmc_u32(tok: &[u8]) -> Option<u32> {
    if tok.len() > 11 {
        return None;
    }
    tok.iter().try_fold(0u32, |sum, &c| {
        let d = u32::from(c.checked_sub(b'0').filter(|d| *d < 10)?);
        sum.checked_mul(10)?.checked_add(d)
    })
}

/// `mcmc_toktou64`: at most 22 digits, no sign, no overflow.
fn mcmc_u64(tok: &[u8]) -> Option<u64> {
    if tok.len() > 22 {
        return None;
    }
    tok.iter().try_fold(0u64, |sum, &c| {
        let d = u64::from(c.checked_sub(b'0').filter(|d| *d < 10)?);
        sum.checked_mul(10)?.checked_add(d)
    })
}

/// `mcmc_tokto32`: at most 11 bytes, an optional `-`, digits (a lone `-` is 0).
fn mcmc_i32(tok: &[u8]) -> Option<i32> {
    if tok.len() > 11 {
        return None;
    }
    let (neg, digits) = match tok.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, tok),
    };
    digits.iter().try_fold(0i32, |sum, &c| {
        let d = i32::from(c.checked_sub(b'0').filter(|d| *d < 10)?);
        let sum = sum.checked_mul(10)?;
        if neg {
            sum.checked_sub(d)
        } else {
            sum.checked_add(d)
        }
    })
}

/// C's `isspace` in the C locale.
fn is_c_space(c: u8) -> bool {
    c == b' ' || (b'\t'..=b'\r').contains(&c)
}

/// `strtoull(s, &end, 10)` followed by memcached's `safe_strto*` checks: whitespace,
/// an optional sign, at least one digit, no overflow, and then whitespace, NUL or the end
/// of the line. Returns the value (negated modulo 2^64 if signed `-`) and whether a `-`
/// was seen; for `strtol` semantics also the unreduced magnitude.
fn c_strtou(s: &[u8]) -> Option<(u64, bool, u128)> {
    let mut i = s.iter().take_while(|&&c| is_c_space(c)).count();
    let mut neg = false;
    match s.get(i) {
        Some(b'-') => {
            neg = true;
            i += 1;
        }
        Some(b'+') => i += 1,
        _ => {}
    }
    let digits = s.get(i..).unwrap_or_default();
    let n = digits.iter().take_while(|c| c.is_ascii_digit()).count();
    if n == 0 {
        return None;
    }
    let mut mag: u128 = 0;
    for &c in digits.get(..n).unwrap_or_default() {
        mag = mag * 10 + u128::from(c - b'0');
        if mag > u128::from(u64::MAX) + 1 {
            // Already out of every range checked below; stop before u128 overflows.
            mag = u128::from(u64::MAX) + 2;
        }
    }
    match digits.get(n) {
        None => {}
        Some(&c) if is_c_space(c) || c == 0 => {}
        Some(_) => return None,
    }
    let m = u64::try_from(mag).ok()?;
    Some((if neg { m.wrapping_neg() } else { m }, neg, mag))
}

/// memcached's `safe_strtoul` into a 32-bit flags field: ERANGE beyond 2^64, a negative
/// number refused only when it reads as negative as a signed long, the result
/// truncated to 32 bits (`*out = l`).
pub(super) fn c_strtoul_u32(s: &[u8]) -> Option<u32> {
    let (v, neg, _) = c_strtou(s)?;
    if neg && (v as i64) < 0 {
        return None;
    }
    Some(v as u32)
}

/// memcached's `safe_strtoull`: ERANGE beyond 2^64, a negative number refused only
/// when it reads as negative as a signed long long.
pub(super) fn c_strtoull_u64(s: &[u8]) -> Option<u64> {
    let (v, neg, _) = c_strtou(s)?;
    if neg && (v as i64) < 0 {
        return None;
    }
    Some(v)
}

/// memcached's `safe_strtol`: `strtol` (a 64-bit long: ERANGE outside it) stored into
/// an `int32_t` (truncated).
pub(super) fn c_strtol_i32(s: &[u8]) -> Option<i32> {
    let (_, neg, mag) = c_strtou(s)?;
    let v: i64 = if neg {
        if mag > 1u128 << 63 {
            return None;
        }
        (mag as u64).wrapping_neg() as i64
    } else {
        i64::try_from(mag).ok()?
    };
    Some(v as i32)
}

#[cfg(test)]
mod number_tests {
    use super::*;

    #[test]
    fn mcmc_numbers() {
        assert_eq!(mcmc_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(mcmc_u32(b"4294967296"), None);
        assert_eq!(mcmc_u32(b"000000000001"), None, "longer than 11");
        assert_eq!(mcmc_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(mcmc_u64(b"18446744073709551616"), None);
        assert_eq!(mcmc_u64(b"-1"), None);
        assert_eq!(mcmc_i32(b"-2147483648"), Some(i32::MIN));
        assert_eq!(mcmc_i32(b"2147483648"), None);
        assert_eq!(mcmc_i32(b"-"), Some(0));
        assert_eq!(mcmc_i32(b"1x"), None);
    }

    #[test]
    fn strto_numbers() {
        assert_eq!(c_strtoul_u32(b"5 0 1"), Some(5));
        assert_eq!(c_strtoul_u32(b"+5"), Some(5));
        assert_eq!(c_strtoul_u32(b"4294967296"), Some(0), "truncated");
        assert_eq!(c_strtoul_u32(b"-1"), None);
        assert_eq!(c_strtoul_u32(b"-0"), Some(0));
        assert_eq!(c_strtoul_u32(b"18446744073709551616"), None, "ERANGE");
        assert_eq!(c_strtoul_u32(b"5x"), None);
        assert_eq!(c_strtoul_u32(b"\t5"), Some(5));
        assert_eq!(c_strtoul_u32(b"x"), None);
        assert_eq!(c_strtol_i32(b"-1"), Some(-1));
        assert_eq!(c_strtol_i32(b"4294967297"), Some(1), "truncated");
        assert_eq!(c_strtol_i32(b"9223372036854775808"), None, "ERANGE");
        assert_eq!(c_strtol_i32(b"-9223372036854775808"), Some(0));
        assert_eq!(c_strtol_i32(b"-9223372036854775809"), None);
    }
}
