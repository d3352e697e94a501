//! Replies: a protocol-neutral [`Response`] encoded for the request's [`ReplyTo`], so
//! `noreply`, quiet opcodes and the binary header are handled in one place.
//!
//! # Invariants
//!
//! * A value's own buffers are pushed onto the output (sharing their storage: a
//!   reference-count bump each), never copied — except a text get's value of at most
//!   [`COPY_VALUE_MAX`] bytes, copied with its `VALUE` line and terminator into one
//!   buffer, where the `END` follows in place. Fixed strings are pushed as static
//!   buffers; only the small variable parts (a `VALUE` line, a binary header, a number)
//!   are written into a fresh buffer.
//! * Text `noreply` suppresses every reply of the request (memcached's `out_string`);
//!   binary quiet opcodes suppress success replies and get misses, never errors
//!   (memcached's `write_bin_response` and `write_bin_error`).

use alloc::vec::Vec;

use ebb::{IOBuf, IOBufChain};

use super::binary::{HEADER_LEN, Opcode, Status, error_packet, response_header};
use super::{BinaryMeta, ReplyTo};

/// A reply, as the server glue knows it after executing a request.
#[derive(Clone, Copy, Debug)]
pub enum Response<'a> {
    /// A get hit: text `VALUE <key> <flags> <bytes>[ <cas>]` + data + `"\r\n"`; binary
    /// flags extras, the key for `GETK`/`GATK`, the data, CAS in the header.
    Value {
        /// The key.
        key: &'a [u8],
        /// The item's flags.
        flags: u32,
        /// The item's CAS id (text shows it for `gets`/`gats` only).
        cas: u64,
        /// The value's buffers, in order (without any `"\r\n"`): borrowed from the
        /// stored item (`Store::get_with`) or from a chain
        /// ([`IOBufChain::make_contiguous`]).
        data: &'a [IOBuf],
        /// The get's last key: text writes its `END` right behind the value, in the
        /// same buffer, and the caller encodes no [`Response::End`] after it. Binary
        /// has no end marker: ignored.
        end: bool,
    },
    /// A get miss: text nothing; binary `NOT_FOUND` (with the key for `GETK`), nothing if
    /// quiet.
    Miss {
        /// The key.
        key: &'a [u8],
    },
    /// The end of a get: text `END`; binary nothing.
    End,
    /// `STORED` / success with the new item's CAS id.
    Stored {
        /// The stored item's CAS id (binary header).
        cas: u64,
    },
    /// `NOT_STORED`; in binary, as memcached: `ADD` → key exists, `REPLACE` → not
    /// found, others (or any with a CAS) → not stored.
    NotStored,
    /// `EXISTS` (CAS mismatch; binary also a failed `ADD`).
    Exists,
    /// `NOT_FOUND`.
    NotFound,
    /// `DELETED` / success.
    Deleted,
    /// `TOUCHED`; binary `TOUCH` returns the flags and CAS.
    Touched {
        /// The item's flags.
        flags: u32,
        /// The item's CAS id.
        cas: u64,
    },
    /// An `incr`/`decr` result.
    Number {
        /// The new value.
        value: u64,
        /// The item's CAS id (binary header).
        cas: u64,
    },
    /// `OK` (`flush_all`, `verbosity`) / success.
    Ok,
    /// `VERSION <v>` / the version as the body.
    Version(&'a str),
    /// `STAT <name> <value>` / a `STAT` packet.
    Stat {
        /// The statistic's name.
        name: &'a [u8],
        /// Its value.
        value: &'a [u8],
    },
    /// The end of a stats listing: `END` / an empty `STAT` packet.
    StatsEnd,
    /// `stats reset` done: `RESET` / an empty `STAT` packet.
    Reset,
    /// An unknown stats group: `ERROR` / `NOT_FOUND`.
    UnknownStats,
    /// `incr`/`decr` of a non-numeric value.
    NonNumeric,
    /// The store refused a value as too large.
    TooLarge,
    /// The store ran out of memory: text `SERVER_ERROR <msg>`; binary `ENOMEM` with
    /// `msg` as the body. memcached's messages: `out of memory storing object` (a
    /// store), `out of memory` (text `incr`).
    OutOfMemory(&'a str),
    /// `MN` / `NOOP` success (never quiet): the glue flushes its output.
    Noop,
    /// Text nothing; binary success unless `QUITQ`. The glue closes after flushing.
    Quit,
}

/// Appends the reply to `to` for `resp` onto `out`.
pub fn encode(to: &ReplyTo, resp: &Response<'_>, out: &mut IOBufChain) {
    encode_reusing(to, resp, out, &mut IOBuf::new());
}

/// [`encode`], taking the buffer a copied reply starts in from `spare` when that is a
/// buffer of [`REPLY_BUFFER`] bytes no one else holds any more (see
/// [`IOBuf::recycle`]) — a connection keeps a clone of the one its last reply went out
/// in — instead of allocating one. `spare` is left empty when taken.
pub fn encode_reusing(to: &ReplyTo, resp: &Response<'_>, out: &mut IOBufChain, spare: &mut IOBuf) {
    match to {
        ReplyTo::Text { noreply, cas } => {
            if !*noreply {
                text(*cas, resp, out, spare);
            }
        }
        ReplyTo::Binary(meta) => binary(meta, resp, out),
    }
}

/// The buffer a copied reply of `total` bytes starts in: `spare` recycled, or a new one
/// of [`REPLY_BUFFER`] bytes (more for a larger reply).
fn reply_buffer(spare: &mut IOBuf, total: usize) -> IOBuf {
    let mut buf = core::mem::take(spare);
    if buf.recycle() && buf.tailroom() >= total {
        buf
    } else {
        IOBuf::with_capacity(total.max(REPLY_BUFFER))
    }
}

fn push_static(out: &mut IOBufChain, s: &'static [u8]) {
    out.push_back(IOBuf::from_static(s));
}

/// Text values up to this size are copied into the reply; larger ones go out from the
/// stored buffers themselves. Copying a value this small costs less than sending it as
/// a segment of its own (a reference count taken and dropped, a chain slot, an iovec,
/// and a header line in a buffer of its own), and the reply leaves as one buffer.
pub const COPY_VALUE_MAX: usize = 2048;

/// The bytes a reply buffer is made with when a copied value starts one: a 4 KiB
/// allocation with the region's header, so the next replies of a pipeline (or a
/// multi-get's next hits) follow in it.
pub const REPLY_BUFFER: usize = 4096 - ebb::iobuf::REGION_OVERHEAD;

/// A text value's terminator, and the end of a get. Statics, not consts: `push_end`
/// recognises the terminator by its address, which a const does not promise to keep.
static VALUE_END: &[u8] = b"\r\n";
static END: &[u8] = b"END\r\n";
/// Both at once: what a get's last value and its end marker go out as.
static VALUE_END_END: &[u8] = b"\r\nEND\r\n";

/// The end of a text get: joined onto the last value's terminator when that is the
/// chain's last buffer, so a one-key hit goes out as three buffers (header line, value,
/// `\r\nEND\r\n`) instead of four: with ebb-net's header in front, four, which a chain
/// holds without allocating.
fn push_end(out: &mut IOBufChain) {
    // After a copied value: in place, behind it (one buffer for the whole reply).
    if out.try_extend_back(END) {
        return;
    }
    let terminator = IOBuf::from_static(VALUE_END);
    if out
        .back()
        .is_some_and(|b| b.shares_storage_with(&terminator))
    {
        out.pop_back();
        push_static(out, VALUE_END_END);
    } else {
        push_static(out, END);
    }
}

/// The number of decimal digits of `v`.
fn decimal_len(v: u64) -> usize {
    v.checked_ilog10().map_or(1, |l| l as usize + 1)
}

/// "00" to "99": two digits a step when writing a number.
static DIGIT_PAIRS: [[u8; 2]; 100] = {
    let mut pairs = [[0; 2]; 100];
    let mut i = 0;
    while i < 100 {
        pairs[i] = [b'0' + (i / 10) as u8, b'0' + (i % 10) as u8];
        i += 1;
    }
    pairs
};

/// Writes `v` in decimal into the whole of `dst`, which is [`decimal_len`] bytes long.
fn put_decimal(dst: &mut [u8], mut v: u64) {
    let mut end = dst.len();
    while end >= 2 {
        let pair = dst
            .get_mut(end - 2..end)
            .and_then(|p| <&mut [u8; 2]>::try_from(p).ok());
        if let (Some(pair), Some(digits)) = (pair, DIGIT_PAIRS.get((v % 100) as usize)) {
            *pair = *digits;
        }
        v /= 100;
        end -= 2;
    }
    if end == 1
        && let Some(d) = dst.first_mut()
    {
        *d = b'0' + (v % 10) as u8;
    }
}

/// A text `VALUE` line with the value and its terminator, written straight into the
/// reply's buffer: `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
struct ValueLine<'a> {
    key: &'a [u8],
    /// Flags, length and (for `gets`) CAS id ...
    numbers: [u64; 3],
    /// ... and their decimal lengths; only the first `shown` are written.
    lengths: [usize; 3],
    shown: usize,
    data: &'a [IOBuf],
}

impl<'a> ValueLine<'a> {
    fn new(key: &'a [u8], numbers: [u64; 3], shown: usize, data: &'a [IOBuf]) -> Self {
        let mut lengths = [0; 3];
        for (len, &v) in lengths.iter_mut().zip(&numbers).take(shown) {
            *len = decimal_len(v);
        }
        Self {
            key,
            numbers,
            lengths,
            shown,
            data,
        }
    }

    /// The bytes of the header line (through its `\r\n`).
    fn header_len(&self) -> usize {
        // "VALUE ", the key, a space and the digits of each number shown, "\r\n".
        6 + self.key.len() + self.shown + self.lengths.iter().sum::<usize>() + 2
    }

    /// Writes the header line into the start of `dst`; returns what follows it.
    fn put_header<'d>(&self, dst: &'d mut [u8]) -> &'d mut [u8] {
        let mut rest = put_const(dst, b"VALUE ");
        rest = put(rest, self.key);
        for (&v, &len) in self.numbers.iter().zip(&self.lengths).take(self.shown) {
            rest = put_const(rest, b" ");
            let (digits, after) = split(rest, len);
            put_decimal(digits, v);
            rest = after;
        }
        put_const(rest, b"\r\n")
    }
}

/// `dst` split at `at` (the tail empty when `dst` is shorter: the lengths written
/// are computed beforehand from the same pieces, so that does not happen).
fn split(dst: &mut [u8], at: usize) -> (&mut [u8], &mut [u8]) {
    let at = at.min(dst.len());
    dst.split_at_mut(at)
}

/// Copies `src` into the start of `dst`; returns the rest of `dst`.
#[inline(always)]
fn put<'d>(dst: &'d mut [u8], src: &[u8]) -> &'d mut [u8] {
    let (head, rest) = split(dst, src.len());
    if let Some(src) = src.get(..head.len()) {
        head.copy_from_slice(src);
    }
    rest
}

/// [`put`] of a piece whose length is known at compile time: a few moves, no `memcpy`
/// call.
#[inline(always)]
fn put_const<'d, const N: usize>(dst: &'d mut [u8], src: &[u8; N]) -> &'d mut [u8] {
    match dst.split_first_chunk_mut::<N>() {
        Some((head, rest)) => {
            *head = *src;
            rest
        }
        None => &mut [],
    }
}

/// The bytes of a value's buffers.
fn value_len(data: &[IOBuf]) -> usize {
    data.iter().map(IOBuf::len).sum()
}

/// Appends `v` in decimal.
fn push_u64(buf: &mut Vec<u8>, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
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

/// Pushes a value's segments: shared, not copied.
fn push_value(out: &mut IOBufChain, data: &[IOBuf]) {
    for seg in data {
        out.push_back(seg.clone());
    }
}

fn text(show_cas: bool, resp: &Response<'_>, out: &mut IOBufChain, spare: &mut IOBuf) {
    match resp {
        Response::Value {
            key,
            flags,
            cas,
            data,
            end,
        } => {
            let len = value_len(data);
            let terminator = if *end { VALUE_END_END } else { VALUE_END };
            let numbers = [u64::from(*flags), len as u64, *cas];
            let line = ValueLine::new(key, numbers, if show_cas { 3 } else { 2 }, data);
            let header = line.header_len();
            if len > COPY_VALUE_MAX {
                let mut buf = IOBuf::with_capacity(header);
                if let Ok(dst) = buf.append_for_overwrite(header) {
                    line.put_header(dst);
                }
                out.push_back(buf);
                push_value(out, data);
                push_static(out, terminator);
                return;
            }
            // Header line, value and terminator formatted straight into one buffer, with
            // room for the `END` (or the next hit) behind them: one allocation at most (a
            // `Vec` adopted by `IOBuf::from_vec` is two, the `Vec` and the region's
            // header), and no staging copy.
            let total = header + len + terminator.len();
            let fresh = |_| reply_buffer(spare, header + len + VALUE_END_END.len());
            out.append_with(total, fresh, |dst| {
                let mut rest = line.put_header(dst);
                for segment in line.data {
                    rest = put(rest, segment.as_slice());
                }
                if *end {
                    put_const(rest, b"\r\nEND\r\n");
                } else {
                    put_const(rest, b"\r\n");
                }
            });
        }
        Response::Miss { .. } | Response::Quit => {}
        Response::End => push_end(out),
        Response::StatsEnd => push_static(out, END),
        Response::Stored { .. } => push_static(out, b"STORED\r\n"),
        Response::NotStored => push_static(out, b"NOT_STORED\r\n"),
        Response::Exists => push_static(out, b"EXISTS\r\n"),
        Response::NotFound => push_static(out, b"NOT_FOUND\r\n"),
        Response::Deleted => push_static(out, b"DELETED\r\n"),
        Response::Touched { .. } => push_static(out, b"TOUCHED\r\n"),
        Response::Number { value, .. } => {
            let mut line = Vec::with_capacity(22);
            push_u64(&mut line, *value);
            line.extend_from_slice(b"\r\n");
            out.push_back(IOBuf::from_vec(line));
        }
        Response::Ok => push_static(out, b"OK\r\n"),
        Response::Version(v) => {
            let mut line = Vec::with_capacity(10 + v.len());
            line.extend_from_slice(b"VERSION ");
            line.extend_from_slice(v.as_bytes());
            line.extend_from_slice(b"\r\n");
            out.push_back(IOBuf::from_vec(line));
        }
        Response::Stat { name, value } => {
            // append_ascii_stats: a stat without a value is just its name.
            let mut line = Vec::with_capacity(8 + name.len() + value.len());
            line.extend_from_slice(b"STAT ");
            line.extend_from_slice(name);
            if !value.is_empty() {
                line.push(b' ');
                line.extend_from_slice(value);
            }
            line.extend_from_slice(b"\r\n");
            out.push_back(IOBuf::from_vec(line));
        }
        Response::Reset => push_static(out, b"RESET\r\n"),
        Response::UnknownStats => push_static(out, b"ERROR\r\n"),
        Response::NonNumeric => push_static(
            out,
            b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
        ),
        Response::TooLarge => push_static(out, b"SERVER_ERROR object too large for cache\r\n"),
        Response::OutOfMemory(msg) => {
            let mut line = Vec::with_capacity(15 + msg.len());
            line.extend_from_slice(b"SERVER_ERROR ");
            line.extend_from_slice(msg.as_bytes());
            line.extend_from_slice(b"\r\n");
            out.push_back(IOBuf::from_vec(line));
        }
        Response::Noop => push_static(out, b"MN\r\n"),
    }
}

/// A response header, extras, key and `tail` (copied: short), in one fresh buffer; the
/// body length also counts `value_len` bytes of value the caller pushes after it.
fn packet(
    meta: &BinaryMeta,
    status: Status,
    extras: &[u8],
    key: &[u8],
    tail: &[u8],
    value_len: usize,
    cas: u64,
) -> IOBuf {
    // Keys are at most 250 bytes and extras 4 here; a value's length fits a u32 because
    // it came in a binary body or through the store's size limit; saturate regardless.
    let head = extras.len() + key.len() + tail.len();
    let bodylen = u32::try_from(head.saturating_add(value_len)).unwrap_or(u32::MAX);
    let keylen = u16::try_from(key.len()).unwrap_or(u16::MAX);
    let extlen = u8::try_from(extras.len()).unwrap_or(u8::MAX);
    let header = response_header(meta, status, extlen, keylen, bodylen, cas);
    let mut buf = IOBuf::with_capacity(HEADER_LEN + head);
    // Cannot fail: the buffer is fresh and sized for all four.
    let _ = buf.extend_from_slice(&header);
    let _ = buf.extend_from_slice(extras);
    let _ = buf.extend_from_slice(key);
    let _ = buf.extend_from_slice(tail);
    buf
}

fn binary(meta: &BinaryMeta, resp: &Response<'_>, out: &mut IOBufChain) {
    let quiet = meta.quiet();
    let success = |out: &mut IOBufChain, cas: u64| {
        if !quiet {
            out.push_back(packet(meta, Status::Success, &[], &[], &[], 0, cas));
        }
    };
    match resp {
        Response::Value {
            key,
            flags,
            cas,
            data,
            end: _,
        } => {
            if meta.opcode == Opcode::Touch as u8 {
                // A binary TOUCH hit carries the flags but no value.
                out.push_back(packet(
                    meta,
                    Status::Success,
                    &flags.to_be_bytes(),
                    &[],
                    &[],
                    0,
                    *cas,
                ));
                return;
            }
            // Hits are sent even for quiet gets: that is what quiet gets are for.
            let key: &[u8] = if meta.with_key() { key } else { &[] };
            out.push_back(packet(
                meta,
                Status::Success,
                &flags.to_be_bytes(),
                key,
                &[],
                value_len(data),
                *cas,
            ));
            push_value(out, data);
        }
        Response::Miss { key } => {
            if quiet {
                return;
            }
            if meta.with_key() {
                // write_bin_miss_response: the key instead of a message.
                out.push_back(packet(meta, Status::KeyNotFound, &[], key, &[], 0, 0));
            } else {
                error_packet(meta, Status::KeyNotFound, out);
            }
        }
        Response::End => {}
        Response::Stored { cas } => success(out, *cas),
        Response::NotStored => {
            let op = Opcode::from_u8(meta.opcode);
            let status = match op {
                Some(Opcode::Add | Opcode::AddQ) if meta.cas == 0 => Status::KeyExists,
                Some(Opcode::Replace | Opcode::ReplaceQ) if meta.cas == 0 => Status::KeyNotFound,
                _ => Status::NotStored,
            };
            error_packet(meta, status, out);
        }
        Response::Exists => error_packet(meta, Status::KeyExists, out),
        Response::NotFound | Response::UnknownStats => {
            error_packet(meta, Status::KeyNotFound, out);
        }
        Response::Deleted | Response::Ok | Response::Quit => success(out, 0),
        Response::Touched { flags, cas } => {
            out.push_back(packet(
                meta,
                Status::Success,
                &flags.to_be_bytes(),
                &[],
                &[],
                0,
                *cas,
            ));
        }
        Response::Number { value, cas } => {
            if !quiet {
                let value = value.to_be_bytes();
                out.push_back(packet(meta, Status::Success, &[], &[], &value, 0, *cas));
            }
        }
        Response::Version(v) => {
            let v = v.as_bytes();
            out.push_back(packet(meta, Status::Success, &[], &[], v, 0, 0));
        }
        Response::Stat { name, value } => {
            // append_bin_stats: always the STAT opcode, CAS 0.
            let stat = BinaryMeta {
                opcode: Opcode::Stat as u8,
                ..*meta
            };
            out.push_back(packet(&stat, Status::Success, &[], name, value, 0, 0));
        }
        Response::StatsEnd | Response::Reset => {
            let stat = BinaryMeta {
                opcode: Opcode::Stat as u8,
                ..*meta
            };
            out.push_back(packet(&stat, Status::Success, &[], &[], &[], 0, 0));
        }
        Response::NonNumeric => error_packet(meta, Status::NonNumeric, out),
        Response::TooLarge => error_packet(meta, Status::TooLarge, out),
        Response::OutOfMemory(msg) => {
            let msg = msg.as_bytes();
            out.push_back(packet(meta, Status::OutOfMemory, &[], &[], msg, 0, 0));
        }
        Response::Noop => out.push_back(packet(meta, Status::Success, &[], &[], &[], 0, 0)),
    }
}

#[cfg(test)]
mod decimal_tests {
    use super::{decimal_len, put_decimal};

    #[test]
    fn numbers_are_written_as_decimal_at_every_length() {
        let mut v = 1u64;
        let mut checked = alloc::vec![0, u64::MAX, u64::MAX / 10];
        while let Some(next) = v.checked_mul(10) {
            checked.extend([v - 1, v, v + 1]);
            v = next;
        }
        for v in checked {
            let want = alloc::format!("{v}");
            assert_eq!(decimal_len(v), want.len(), "{v}");
            let mut got = alloc::vec![b'x'; want.len()];
            put_decimal(&mut got, v);
            assert_eq!(got, want.as_bytes());
        }
    }
}
