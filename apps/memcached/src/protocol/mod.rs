//! The memcached text and binary protocols: requests parsed incrementally off a
//! connection's received bytes, replies encoded onto its output chain.
//!
//! Behaviour follows memcached 1.6 as of 1.6.45 (`proto_text.c`, `proto_parser.c`,
//! `proto_bin.c`, the vendored `mcmc.c` tokenizer): the same replies, the same bytes
//! swallowed after an error, the same connections closed. Where a deliberate difference
//! exists it is documented at the place it is made.
//!
//! # Which memcached 1.6
//!
//! The parser follows the current 1.6 sources (1.6.45, whose text parser was rewritten
//! in 1.6.40). Checked against the memcached 1.6.18 of Debian 12 (the `memcached` on
//! this machine), these refusals differ; everything else compared alike (replies, the
//! item size rule, swallowing of too-large values, the 2048-byte rule, binary statuses
//! and closes):
//!
//! | input                          | 1.6.45 (here)                          | 1.6.18 |
//! |--------------------------------|----------------------------------------|--------|
//! | `get`, `touch k`, `verbosity`  | `CLIENT_ERROR bad command line format` | `ERROR` |
//! | a line under 4 bytes (`\r\n`) | `CLIENT_ERROR bad command line format` | `ERROR` (`mn\n`: `MN`) |
//! | `gat 10` (no key)              | `CLIENT_ERROR bad command line format` | `END` |
//! | `set k x 0 3` (bad flags)      | bad format, data block swallowed       | bad format, block read as commands |
//! | `cas k 0 0 1` (no CAS)         | bad format, data block swallowed       | `ERROR`, block read as commands |
//! | `delete` with tokens after the key other than `0`, `noreply`, `0 noreply` (`delete k 1`, `delete a b c d`) | deletes the key (the rest ignored; `noreply` if the last token is) | `CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]` (silent if the last token is `noreply`) |
//! | `shutdown`                     | `SERVER_ERROR: shutdown not enabled`   | `ERROR: shutdown not enabled` |
//! | `touch`/`gat` with an exptime beyond `i32` (`touch k 4294967297`) | `CLIENT_ERROR invalid exptime argument` | truncated to 32 bits (`safe_strtol` into an `int32_t`) |
//!
//! Deliberate differences from both: a line longer than 2048 bytes is judged by its
//! content, not by how it was segmented (see `text`); an unknown binary opcode swallows
//! exactly the rest of its packet (memcached swallows `bodylen` more bytes after the key,
//! eating `extlen + keylen` bytes of the next request, checked on 1.6.18).
//!
//! # Meta commands
//!
//! `mg`, `ms`, `md`, `ma` and `mn` follow memcached **1.6.18** (`meta`, `meta_parse`),
//! not 1.6.45: the same checks in the same order with the same error lines, the returned
//! flags echoed in request order, the same quiet rules. Flags:
//!
//! | cmd | flags                                                                       |
//! |-----|-----------------------------------------------------------------------------|
//! | all | `b` (base64 key), `k` (return key), `O` (opaque, ≤ 32 bytes), `q`, `P`/`L` (ignored) |
//! | mg  | `v` `s` `f` `c` `t` (TTL left, -1 none) `h` (fetched before) `l` `u` (no bump) `T` (touch) |
//! | ms  | `c` `T` `F` `C` (compare CAS) `M` (`S` set, `E` add, `A` append, `P` prepend, `R` replace) `I` without `C` (a no-op, as in 1.6.18) |
//! | md  | `C` `T` (ignored, as in 1.6.18 without `I`)                                |
//! | ma  | `v` `c` `t` `T` `N` (vivify) `J` (initial) `D` (delta) `M` (`I`/`+` incr, `D`/`-` decr) `C` |
//!
//! Quiet (`q`), as 1.6.18: `mg` hides `EN`; `ms` and `md` hide `HD`; `ma` hides the reply
//! to an update of an existing item (not `NF`, `EX`, nor the reply for an item `N`
//! created). Errors are never hidden. Newer 1.6 releases also hide `NF` of `md` and
//! add flags (`E`, `x`, ...) that 1.6.18 refuses as invalid, as here.
//!
//! Differences from 1.6.18, each deliberate (the differential test avoids them):
//!
//! | input                                   | here                          | 1.6.18 |
//! |-----------------------------------------|-------------------------------|--------|
//! | `mg k N30`, `mg k R30` (vivify/recache: win, stale tokens `W` `X` `Z`) | `CLIENT_ERROR invalid flag` | vivifies, answers `W`/`Z`/`X` |
//! | `md k I` (mark stale), `ms k 2 C5 I` (store stale) | `CLIENT_ERROR invalid or duplicate flag`, `CLIENT_ERROR invalid flag` | marks the item stale |
//! | `me k` (meta debug)                     | `ERROR`                        | `ME k exp=.. la=.. cas=.. fetch=.. cls=.. size=..` |
//! | `mg k k` of an item `ms` stored with `b` (or `mg k b k` of one stored without) | the key as the request gave it | as the *item* was stored (`ITEM_KEY_BINARY`), which an append or an `incr` that reallocates forgets |
//! | `mg k l`                                | seconds since the item was stored | since its last access (updated at most once a minute) |
//! | `ma k T30` of an existing item          | the TTL is set                | set only if the `incr` was done in place (else on the old, replaced item: lost) |
//! | `mg`/`ma` with an `O` over 32 bytes     | refused before anything is done | `mg` sets `T` and `ma` does the arithmetic, then refuses |
//! | `t` after a `T`/`N` that expires the item (`T-1`) | `2^32 - now` wrapped | `2^32 - (its uptime)` wrapped |
//! | `h` after an `incr`/`ma` that kept the length | 0 (a new item)        | 0 or 1: in place or a new item, by its threads' references |
//! | a meta line holding a NUL byte          | tokenized whole (1.6.45's tokenizer) | tokenized up to the NUL (`strlen`) |
//!
//! # Use
//!
//! A connection owns a [`Parser`] and an [`IOBufChain`] of received bytes. After each
//! receive it calls [`Parser::parse`] until that returns [`Parsed::Incomplete`] (or an
//! error with [`ParseError::close`]); each [`Parsed::Request`] is executed against the
//! store and answered with [`encode`], passing the request's [`ReplyTo`] so quiet and
//! `noreply` semantics and the binary header (opcode, opaque) are applied in one place.
//!
//! # Invariants
//!
//! * No input can make the parser panic: every length from the wire is checked before
//!   it is used, numbers are parsed with overflow checks, nothing indexes unchecked.
//! * Progress: every call of [`Parser::parse`] either removes at least one byte from the
//!   input or returns [`Parsed::Incomplete`] or a closing error. On `Incomplete` the input
//!   holds exactly the bytes it held before, minus any bytes the parser was swallowing
//!   (the data block of a request already refused).
//! * Values are never copied: a `set`/`ms` data block or binary value is split off the input
//!   with [`IOBufChain::split_to`] and shares the received buffers' storage. Command
//!   lines, headers and keys are copied into small owned buffers.
//! * The outcome of parsing does not depend on how the bytes were segmented: any
//!   split of the same byte stream yields the same sequence of results.

mod binary;
mod line;
mod meta;
mod meta_parse;
mod reply;
#[cfg(test)]
mod tests;
mod text;

use alloc::vec::Vec;
use core::fmt;
use core::ops::Deref;

use ebb::IOBufChain;
use smallvec::SmallVec;

pub use binary::{Opcode, Status};
pub use meta::{
    MetaCmd, MetaFlags, MetaItem, MetaOutcome, MetaToken, base64_decode, base64_encode, encode_meta,
};
pub use reply::{COPY_VALUE_MAX, REPLY_BUFFER, Response, encode, encode_reusing};

/// The longest key memcached accepts (`KEY_MAX_LENGTH`).
pub const KEY_MAX_LENGTH: usize = 250;

/// memcached's `REALTIME_MAXDELTA`: an expiry time up to this many seconds (30 days) is
/// relative to now; a larger one is an absolute Unix time.
pub const REALTIME_MAXDELTA: i64 = 60 * 60 * 24 * 30;

/// The limits the parser enforces, from the server's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// memcached's `-I` (`item_size_max`), default 1 MiB: a value whose item would not fit
    /// (see [`Limits::item_fits`]) is refused and its bytes swallowed.
    pub item_size_max: usize,
    /// The longest `get`/`gets` line accepted (memcached has no bound; its buffer just
    /// grows). A longer one closes the connection. 32 KiB: a thousand keys, and a
    /// bound on what one line makes a node hold (its keys are ~80 bytes each once
    /// parsed: a 4 MiB line of one-byte keys was 168 MB, more than a native node has).
    pub max_get_line: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            item_size_max: 1024 * 1024,
            max_get_line: 32 * 1024,
        }
    }
}

impl Limits {
    /// Size of memcached's item header (`sizeof(item)` on a 64-bit build).
    pub const ITEM_HEADER: usize = 48;
    /// The CAS id stored in each item (memcached's default `use_cas`).
    pub const ITEM_CAS: usize = 8;

    /// Whether an item of this key, flags and value would fit, by memcached's
    /// `item_size_ok`: header + key + NUL + flags (4 bytes, only if nonzero) + value +
    /// `"\r\n"` + CAS must not exceed `item_size_max`.
    pub fn item_fits(&self, key_len: usize, flags: u32, value_len: usize) -> bool {
        let suffix = if flags == 0 { 0 } else { 4 };
        let total = Self::ITEM_HEADER
            .saturating_add(key_len)
            .saturating_add(1)
            .saturating_add(suffix)
            .saturating_add(value_len)
            .saturating_add(2)
            .saturating_add(Self::ITEM_CAS);
        total <= self.item_size_max
    }
}

/// Key bytes kept in place, without an allocation: every key of the ETC workload (20
/// to 70 bytes) and most real ones fit; longer keys (up to [`KEY_MAX_LENGTH`]) go to
/// the heap.
pub const KEY_INLINE: usize = 72;

/// A key: 1 to [`KEY_MAX_LENGTH`] bytes, copied out of the request.
///
/// Text keys contain no space or newline (they are separated by spaces). Like memcached,
/// the parser does not refuse other control characters in text keys; binary keys may be
/// any bytes.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(SmallVec<[u8; KEY_INLINE]>);

/// A get's keys: one in place (a binary get, and nearly every text get), more on the heap.
pub type Keys = SmallVec<[Key; 1]>;

impl Key {
    /// A key from bytes already checked by the parser (or a test).
    pub fn new(bytes: &[u8]) -> Self {
        Self(SmallVec::from_slice(bytes))
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl Deref for Key {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?})", self.0.escape_ascii())
    }
}

/// How a storage command treats an existing item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreMode {
    /// Store unconditionally.
    Set,
    /// Store only if the key is absent.
    Add,
    /// Store only if the key is present.
    Replace,
    /// Append to an existing value (flags and expiry of the request are ignored).
    Append,
    /// Prepend to an existing value (flags and expiry of the request are ignored).
    Prepend,
    /// Store only if the item's CAS id equals [`Request::Store::cas`] (`EXISTS` if it
    /// differs, `NOT_FOUND` if the key is absent).
    Cas,
}

/// A parsed request. Expiry times are memcached's raw values; see [`expiry_to_absolute`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `get`/`gets`/`gat`/`gats` (text, any number of keys) or binary
    /// `GET[K][Q]`/`GAT[K][Q]` (one key). Answer each hit with [`Response::Value`], each
    /// miss with [`Response::Miss`], then [`Response::End`].
    Get {
        /// The keys, in request order (duplicates kept: memcached answers each).
        keys: Keys,
        /// Whether the text reply shows CAS ids (`gets`, `gats`).
        cas: bool,
        /// `gat`: the new raw expiry to set on each hit.
        touch: Option<i64>,
    },
    /// `set`/`add`/`replace`/`append`/`prepend`/`cas` or binary `SET`/`ADD`/`REPLACE`/
    /// `APPEND`/`PREPEND` (and quiet forms).
    Store {
        /// What to do with an existing item.
        mode: StoreMode,
        /// The key.
        key: Key,
        /// The client's opaque flags.
        flags: u32,
        /// Raw expiry.
        exptime: i64,
        /// The CAS id the client sent (0: none). [`StoreMode::Cas`] compares it; a binary
        /// `APPEND`/`PREPEND` with a nonzero CAS must match too (memcached sets it on the
        /// new item and `do_store_item` checks it).
        cas: u64,
        /// The data block, without the text protocol's trailing `"\r\n"`: the received
        /// buffers themselves, not a copy.
        value: IOBufChain,
    },
    /// `delete` or binary `DELETE[Q]`. Answer [`Response::Deleted`] or
    /// [`Response::NotFound`] (binary with a CAS that differs: [`Response::Exists`]).
    Delete {
        /// The key.
        key: Key,
        /// Binary only: delete only if the item's CAS id is this (0: any).
        cas: u64,
    },
    /// `incr`/`decr` or binary `INCREMENT[Q]`/`DECREMENT[Q]`. Answer [`Response::Number`].
    Arith {
        /// The key.
        key: Key,
        /// Increment (else decrement, saturating at 0; increments wrap at 2^64).
        incr: bool,
        /// The amount.
        delta: u64,
        /// Binary only: on a miss, create the item with this value (and `exptime`) instead
        /// of answering `NOT_FOUND`. `None` for text, and for binary when the request's
        /// expiry is `0xffffffff`.
        initial: Option<u64>,
        /// Binary only: raw expiry of an item created from `initial`.
        exptime: i64,
        /// Binary only: CAS id the item must have (0: any); a mismatch is
        /// [`Response::Exists`].
        cas: u64,
    },
    /// `touch` or binary `TOUCH`. Answer [`Response::Touched`] or [`Response::NotFound`].
    Touch {
        /// The key.
        key: Key,
        /// The new raw expiry.
        exptime: i64,
    },
    /// `flush_all [delay]` or binary `FLUSH[Q]`. As memcached: a `delay > 0` invalidates
    /// items older than `realtime(delay) - 1` (the expiry rule applies to the delay), a
    /// delay `<= 0` everything stored before now. Answer [`Response::Ok`].
    FlushAll {
        /// Raw delay.
        delay: i64,
    },
    /// `version` or binary `VERSION`. Answer [`Response::Version`].
    Version,
    /// `stats [args...]` or binary `STAT` (the key, split at spaces, is the arguments).
    /// Answer [`Response::Stat`] lines then [`Response::StatsEnd`], or
    /// [`Response::UnknownStats`]. memcached matches the first argument by prefix
    /// (`strncmp` with the argument's length): `items`, `slabs`, `sizes`, `settings`,
    /// `conns`, `reset` (text answer [`Response::Reset`]), `detail`, `cachedump`.
    Stats {
        /// The arguments after `stats`.
        args: Vec<Vec<u8>>,
    },
    /// `verbosity N` (text only: memcached 1.6 has no binary `VERBOSITY`). Answer
    /// [`Response::Ok`].
    Verbosity {
        /// The level (memcached clamps it to its maximum).
        level: u32,
    },
    /// `quit` or binary `QUIT[Q]`: encode [`Response::Quit`], flush, close.
    Quit,
    /// Binary `NOOP` or meta `mn`: encode [`Response::Noop`] and flush the output now.
    Noop,
    /// `mg <key> <flags>*`. Answer with [`encode_meta`]: [`MetaOutcome::Item`] or
    /// [`MetaOutcome::Miss`]. With [`MetaFlags::ttl`] the hit's expiry is set (a touch).
    MetaGet {
        /// The key (decoded, for `b`).
        key: Key,
        /// The flags.
        flags: MetaFlags,
    },
    /// `ms <key> <datalen> <flags>*`. Answer with [`encode_meta`]:
    /// [`MetaOutcome::Done`] (stored), `NotStored`, `Exists`, `NotFound`.
    MetaSet {
        /// `Set`, `Add`, `Replace`, `Append`, `Prepend`, or `Cas` (a `C` flag with mode
        /// set or replace).
        mode: StoreMode,
        /// The key (decoded, for `b`).
        key: Key,
        /// `F`.
        client_flags: u32,
        /// `T`, raw (0 without).
        exptime: i64,
        /// `C`: compared by `Cas`, and by `Append`/`Prepend` when nonzero; 0 otherwise.
        cas: u64,
        /// The data block, without its `"\r\n"`: the received buffers, not a copy.
        value: IOBufChain,
        /// The flags (boxed: they would double the size of every request).
        flags: alloc::boxed::Box<MetaFlags>,
    },
    /// `md <key> <flags>*`. Answer [`MetaOutcome::Done`], `NotFound` or `Exists` (a `C`
    /// that differs; `C0` differs from every item).
    MetaDelete {
        /// The key (decoded, for `b`).
        key: Key,
        /// The flags.
        flags: MetaFlags,
    },
    /// `ma <key> <flags>*`: incr/decr by [`MetaFlags::delta`]; with `N`, a miss creates
    /// the item from [`MetaFlags::initial`]. Answer [`MetaOutcome::Item`] (the value's
    /// digits), `NotFound` or `Exists`, or the text errors of `incr`.
    MetaArith {
        /// The key (decoded, for `b`).
        key: Key,
        /// The flags.
        flags: MetaFlags,
    },
}

/// Which protocol a connection speaks, fixed by its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// The text protocol.
    Text,
    /// The binary protocol: the connection's first byte was `0x80`.
    Binary,
}

/// What a binary reply needs from its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BinaryMeta {
    /// The request's opcode, echoed (quiet opcodes included).
    pub opcode: u8,
    /// The request's opaque, echoed.
    pub opaque: u32,
    /// The request's CAS field.
    pub cas: u64,
}

impl BinaryMeta {
    /// Whether the opcode is a quiet one (successes and get misses not answered).
    pub fn quiet(&self) -> bool {
        Opcode::from_u8(self.opcode).is_some_and(Opcode::is_quiet)
    }

    /// Whether a get reply carries the key (`GETK`, `GETKQ`, `GATK`, `GATKQ`).
    pub fn with_key(&self) -> bool {
        Opcode::from_u8(self.opcode).is_some_and(Opcode::returns_key)
    }
}

/// How to answer a request: what [`encode`] needs besides the response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyTo {
    /// A text request.
    Text {
        /// `noreply` was given: memcached sends nothing for the request (not even an
        /// error), except the lines of a `get`.
        noreply: bool,
        /// `gets`/`gats`: `VALUE` lines show the CAS id.
        cas: bool,
    },
    /// A binary request.
    Binary(BinaryMeta),
}

/// A complete request and how to answer it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// The request.
    pub request: Request,
    /// Where and how its reply goes.
    pub reply_to: ReplyTo,
}

/// Why a request was refused (for statistics and tests; the reply is in
/// [`ParseError::reply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// Text: unknown command (`ERROR`).
    #[error("unknown command")]
    UnknownCommand,
    /// Text: malformed command line (`CLIENT_ERROR bad command line format`).
    #[error("bad command line format")]
    BadFormat,
    /// Text: the data block was not followed by `"\r\n"`.
    #[error("bad data chunk")]
    BadDataChunk,
    /// Text: an expiry that is not a number.
    #[error("invalid exptime argument")]
    InvalidExptime,
    /// Text: an `incr`/`decr` delta that is not a number.
    #[error("invalid numeric delta argument")]
    InvalidDelta,
    /// The value would make an item larger than `item_size_max`.
    #[error("object too large for cache")]
    TooLarge,
    /// Text: more than 2048 bytes without a newline, not a `get`/`gets` (or a `get`
    /// longer than [`Limits::max_get_line`]): memcached closes without a reply.
    #[error("line too long")]
    LineTooLong,
    /// Text: an HTTP request line: memcached closes without a reply.
    #[error("HTTP request")]
    Http,
    /// Text: a command memcached knows but this server does not offer.
    #[error("command not supported")]
    Unsupported,
    /// Binary: the magic byte is not 0x80: closed without a reply.
    #[error("bad magic")]
    BadMagic,
    /// Binary: key or extras longer than the body: `UNKNOWN_COMMAND`, then closed.
    #[error("inconsistent lengths")]
    BadLengths,
    /// Binary: lengths not valid for the opcode, a key over 250 bytes, or a body over
    /// 1 GiB: `EINVAL`, then closed.
    #[error("invalid arguments")]
    InvalidArguments,
    /// Binary: an opcode memcached does not handle: `UNKNOWN_COMMAND`, body swallowed.
    #[error("unknown opcode")]
    UnknownOpcode,
    /// Text: no memory for a `get`'s list of keys (`SERVER_ERROR out of memory writing
    /// get response`, memcached's answer when it cannot build a get's reply).
    #[error("out of memory")]
    OutOfMemory,
    /// The parser already asked for the connection to be closed.
    #[error("connection closed")]
    Closed,
}

/// A refused request: send `reply` (possibly empty), then close the connection if
/// `close`. Any bytes memcached would swallow are swallowed by the parser itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// Why.
    pub kind: ErrorKind,
    /// The bytes to send (empty for `noreply`, or when memcached just closes).
    pub reply: IOBufChain,
    /// Close the connection once `reply` is written.
    pub close: bool,
    /// memcached drops this key's current item: a `set` refused as too large must not
    /// leave the old value readable (`process_update_cmd_start`). Delete it.
    pub unlink: Option<Key>,
}

/// One step of parsing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A complete request, removed from the input.
    Request(Command),
    /// The input holds no complete request; call again when more bytes arrive.
    Incomplete,
    /// A refused request, removed from the input.
    Error(ParseError),
}

/// The per-connection parser: protocol detection, limits, and the count of bytes still
/// to swallow after a refused request.
#[derive(Clone, Debug)]
pub struct Parser {
    limits: Limits,
    protocol: Option<Protocol>,
    /// Bytes of a refused request's data still to discard as they arrive.
    swallow: usize,
    /// Text: how many leading input bytes are known to hold no newline, so a long line
    /// arriving in many segments is scanned once.
    scanned: usize,
    /// The input length below which the pending request is known to be incomplete
    /// (a data block or binary body still arriving), so waiting for a large value costs
    /// O(1) per call however many segments it arrives in.
    need: usize,
    /// A closing error was returned; nothing more is parsed.
    closed: bool,
}

impl Parser {
    /// A parser for a new connection.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            protocol: None,
            swallow: 0,
            scanned: 0,
            need: 0,
            closed: false,
        }
    }

    /// The connection's protocol, once its first byte has been seen.
    pub fn protocol(&self) -> Option<Protocol> {
        self.protocol
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// How many bytes of a refused request are still to be discarded as they arrive
    /// (for statistics and tests).
    pub fn swallowing(&self) -> usize {
        self.swallow
    }

    /// Takes the next complete request off the front of `input`.
    ///
    /// Returns [`Parsed::Incomplete`] when `input` holds only part of a request (it is
    /// left as it was, but for swallowed bytes), and [`Parsed::Error`] for a refused
    /// request, which is removed from `input`.
    ///
    /// Between calls the connection may only append to `input` (the parser remembers how
    /// far it has searched a long line for its newline).
    pub fn parse(&mut self, input: &mut IOBufChain) -> Parsed {
        if self.closed {
            return Parsed::Error(ParseError {
                kind: ErrorKind::Closed,
                reply: IOBufChain::new(),
                close: true,
                unlink: None,
            });
        }
        if self.swallow > 0 {
            let n = self.swallow.min(input.len());
            // Cannot fail: `n <= input.len()`.
            let _ = input.trim_front(n);
            self.swallow -= n;
            self.scanned = 0;
            if self.swallow > 0 {
                return Parsed::Incomplete;
            }
        }
        if input.len() < self.need {
            return Parsed::Incomplete;
        }
        self.need = 0;
        if input.is_empty() {
            return Parsed::Incomplete;
        }
        // The first byte is looked at once per connection, not per request.
        let protocol = match self.protocol {
            Some(protocol) => protocol,
            None => {
                // The chain holds no empty segments, so the first byte is in the first one.
                let first = input.front().and_then(|seg| seg.first()).copied();
                *self.protocol.insert(if first == Some(binary::REQ_MAGIC) {
                    Protocol::Binary
                } else {
                    Protocol::Text
                })
            }
        };
        let parsed = match protocol {
            Protocol::Text => text::parse(self, input),
            Protocol::Binary => binary::parse(self, input),
        };
        if let Parsed::Error(e) = &parsed {
            self.closed = e.close;
        }
        if !matches!(parsed, Parsed::Incomplete) {
            self.scanned = 0;
        }
        parsed
    }

    /// Removes up to `n` bytes from `input` now and the rest as they arrive.
    fn swallow(&mut self, input: &mut IOBufChain, n: usize) {
        let now = n.min(input.len());
        // Cannot fail: `now <= input.len()`.
        let _ = input.trim_front(now);
        self.swallow = n - now;
    }
}

/// memcached's rule for a raw expiry time, as an absolute Unix time:
///
/// * `0`: never expires (`None`);
/// * negative: already expired (`Some(0)`; memcached makes it a time before it started);
/// * up to [`REALTIME_MAXDELTA`] (30 days): relative, `now + raw`;
/// * larger: an absolute Unix time (one not in the future means already expired).
///
/// An item is expired once `now >= t` (memcached: `exptime <= current_time`).
pub fn expiry_to_absolute(raw: i64, now_unix: u64) -> Option<u64> {
    if raw == 0 {
        None
    } else if raw < 0 {
        Some(0)
    } else if raw <= REALTIME_MAXDELTA {
        // `raw` is positive and small here.
        Some(now_unix.saturating_add(raw.unsigned_abs()))
    } else {
        Some(raw.unsigned_abs())
    }
}
