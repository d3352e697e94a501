//! Executing one parsed command against the store: [`McConnection::execute`] picks the
//! command's function, which runs it and appends its reply. A `get` is answered a piece at
//! a time by the connection (`continue_get`); everything else is answered whole here.
//!
//! Each function takes the store, the request's fields and where the reply goes; none
//! touches the connection, so what a command does is read in one place.

use alloc::vec::Vec;
use core::fmt::Write as _;

use ebb::net::{IOBuf, IOBufChain};

use super::VERSION;
use super::connection::{McConnection, PendingGet};
use crate::protocol::{
    Command, Key, MetaFlags, MetaItem, MetaOutcome, MetaToken, ReplyTo, Request, Response,
    StoreMode, encode, encode_meta,
};
use crate::store::{
    Arith, ArithOutcome, Ctx, DeleteOutcome, Mode, Store, StoreError, StoreOutcome, UnixTime,
    absolute_expiry,
};

impl McConnection {
    /// Runs one command, appending its replies to `out`; true when the output must be
    /// flushed now (`noop`, `quit`).
    pub(super) fn execute(&mut self, cx: Ctx, command: Command, out: &mut IOBufChain) -> bool {
        // A `get` is taken apart straight from the command (no move of the whole request
        // first: it is most of the traffic).
        let command = match command {
            Command {
                request: Request::Get { keys, touch, .. },
                reply_to,
            } => {
                self.pending_get = Some(PendingGet {
                    keys,
                    next: 0,
                    touch,
                    reply_to,
                });
                return self.continue_get(cx, out);
            }
            other => other,
        };
        let store = &self.server.store;
        let to = &command.reply_to;
        match command.request {
            // Answered by `continue_get`, above.
            Request::Get { .. } => {}
            Request::Store {
                mode,
                key,
                flags,
                exptime,
                cas,
                value,
            } => {
                let item = StoreRequest {
                    mode: store_mode(mode, cas),
                    key: &key,
                    flags,
                    exptime,
                    cas,
                    value,
                };
                store_item(store, cx, item, to, out);
            }
            Request::Delete { key, cas } => delete(store, cx, &key, cas, to, out),
            Request::Arith {
                key,
                incr,
                delta,
                initial,
                exptime,
                cas,
            } => {
                let op = Arith {
                    incr,
                    delta,
                    initial: initial.map(|v| (v, exptime)),
                    cas,
                };
                arith(store, cx, &key, op, to, out);
            }
            Request::Touch { key, exptime } => touch(store, cx, &key, exptime, to, out),
            Request::FlushAll { delay } => {
                store.flush_all(cx, delay);
                encode(to, &Response::Ok, out);
            }
            Request::Version => encode(to, &Response::Version(VERSION), out),
            Request::Stats { args } => {
                let asking = &self.registration.entry;
                self.server.stats(&args, asking, to, out)
            }
            Request::Verbosity { .. } => encode(to, &Response::Ok, out),
            Request::Quit => {
                encode(to, &Response::Quit, out);
                self.closing = true;
                return true;
            }
            Request::Noop => {
                encode(to, &Response::Noop, out);
                return true;
            }
            Request::MetaGet { key, flags } => meta_get(store, cx, &key, &flags, out),
            Request::MetaSet {
                mode,
                key,
                client_flags,
                exptime,
                cas,
                value,
                flags,
            } => {
                let item = StoreRequest {
                    mode: store_mode(mode, cas),
                    key: &key,
                    flags: client_flags,
                    exptime,
                    cas,
                    value,
                };
                meta_set(store, cx, item, &flags, to, out);
            }
            Request::MetaDelete { key, flags } => meta_delete(store, cx, &key, &flags, out),
            Request::MetaArith { key, flags } => meta_arith(store, cx, &key, &flags, to, out),
        }
        false
    }
}

/// A store request's fields, as the store takes them.
struct StoreRequest<'a> {
    mode: Mode,
    key: &'a Key,
    flags: u32,
    exptime: i64,
    cas: u64,
    value: IOBufChain,
}

/// The store's mode for a protocol's store command (`cas` is the compare-and-swap id).
#[inline]
fn store_mode(mode: StoreMode, cas: u64) -> Mode {
    match mode {
        StoreMode::Set => Mode::Set,
        StoreMode::Add => Mode::Add,
        StoreMode::Replace => Mode::Replace,
        StoreMode::Append => Mode::Append,
        StoreMode::Prepend => Mode::Prepend,
        StoreMode::Cas => Mode::Cas(cas),
    }
}

/// `set`, `add`, `replace`, `append`, `prepend`, `cas` (text or binary).
#[inline]
fn store_item(store: &Store, cx: Ctx, item: StoreRequest<'_>, to: &ReplyTo, out: &mut IOBufChain) {
    let StoreRequest {
        mode,
        key,
        flags,
        exptime,
        cas,
        value,
    } = item;
    let result = if matches!(to, ReplyTo::Binary(_)) {
        store.store_with_cas(cx, mode, key, flags, exptime, value, cas)
    } else {
        store.store(cx, mode, key, flags, exptime, value)
    };
    let response = match result {
        Ok(StoreOutcome::Stored { cas }) => Response::Stored { cas },
        Ok(StoreOutcome::NotStored) => Response::NotStored,
        Ok(StoreOutcome::Exists) => Response::Exists,
        Ok(StoreOutcome::NotFound) => Response::NotFound,
        Err(StoreError::TooLarge) => Response::TooLarge,
        Err(StoreError::OutOfMemory) => Response::OutOfMemory("out of memory storing object"),
        // The parser checks keys; a key the store refuses is not stored.
        Err(StoreError::BadKey) => Response::NotStored,
    };
    encode(to, &response, out);
}

/// `delete`.
fn delete(store: &Store, cx: Ctx, key: &Key, cas: u64, to: &ReplyTo, out: &mut IOBufChain) {
    let response = match store.delete(cx, key, cas) {
        DeleteOutcome::Deleted => Response::Deleted,
        DeleteOutcome::NotFound => Response::NotFound,
        DeleteOutcome::Exists => Response::Exists,
    };
    encode(to, &response, out);
}

/// `incr` and `decr`.
fn arith(store: &Store, cx: Ctx, key: &Key, op: Arith, to: &ReplyTo, out: &mut IOBufChain) {
    let response = match store.arith(cx, key, op) {
        Ok(ArithOutcome::Value { value, cas }) => Response::Number { value, cas },
        Ok(ArithOutcome::NotFound) => Response::NotFound,
        Ok(ArithOutcome::NonNumeric) => Response::NonNumeric,
        Ok(ArithOutcome::Exists) => Response::Exists,
        Err(StoreError::TooLarge) => Response::TooLarge,
        Err(StoreError::OutOfMemory | StoreError::BadKey) => Response::OutOfMemory("out of memory"),
    };
    encode(to, &response, out);
}

/// `touch`.
fn touch(store: &Store, cx: Ctx, key: &Key, exptime: i64, to: &ReplyTo, out: &mut IOBufChain) {
    let response = match store.gat(cx, key, exptime) {
        Some(hit) => Response::Touched {
            flags: hit.flags,
            cas: hit.cas,
        },
        None => Response::NotFound,
    };
    encode(to, &response, out);
}

/// `mg`.
#[inline]
fn meta_get(store: &Store, cx: Ctx, key: &Key, flags: &MetaFlags, out: &mut IOBufChain) {
    let found = store.meta_get(cx, key, flags.ttl, !flags.no_bump);
    let outcome = match &found {
        Some(m) => MetaOutcome::Item(MetaItem {
            flags: m.hit.flags,
            cas: m.hit.cas,
            value: &m.hit.value,
            ttl: ttl(m.exptime, cx.now),
            ttl_touched: flags
                .ttl
                .map_or(-1, |t| ttl(absolute_expiry(t, cx.now), cx.now)),
            ttl_vivified: -1,
            created: false,
            last_access: u64::from(cx.now.saturating_sub(m.time)),
            fetched: m.fetched,
        }),
        None => MetaOutcome::Miss,
    };
    encode_meta(flags, key, &outcome, out);
}

/// `ms`.
#[inline]
fn meta_set(
    store: &Store,
    cx: Ctx,
    item: StoreRequest<'_>,
    flags: &MetaFlags,
    to: &ReplyTo,
    out: &mut IOBufChain,
) {
    let StoreRequest {
        mode,
        key,
        flags: client_flags,
        exptime,
        cas,
        value,
    } = item;
    let outcome = match store.store_with_cas(cx, mode, key, client_flags, exptime, value, cas) {
        Ok(StoreOutcome::Stored { cas }) => MetaOutcome::Done { cas },
        Ok(StoreOutcome::NotStored) | Err(StoreError::BadKey) => MetaOutcome::NotStored,
        Ok(StoreOutcome::Exists) => MetaOutcome::Exists,
        Ok(StoreOutcome::NotFound) => MetaOutcome::NotFound,
        Err(StoreError::TooLarge) => {
            encode(to, &Response::TooLarge, out);
            return;
        }
        Err(StoreError::OutOfMemory) => {
            let oom = Response::OutOfMemory("out of memory storing object");
            encode(to, &oom, out);
            return;
        }
    };
    encode_meta(flags, key, &outcome, out);
}

/// `md`.
fn meta_delete(store: &Store, cx: Ctx, key: &Key, flags: &MetaFlags, out: &mut IOBufChain) {
    let outcome = match store.delete_if(cx, key, flags.cas) {
        DeleteOutcome::Deleted => MetaOutcome::Done { cas: 0 },
        DeleteOutcome::NotFound => MetaOutcome::NotFound,
        DeleteOutcome::Exists => MetaOutcome::Exists,
    };
    encode_meta(flags, key, &outcome, out);
}

/// `ma`.
fn meta_arith(
    store: &Store,
    cx: Ctx,
    key: &Key,
    flags: &MetaFlags,
    to: &ReplyTo,
    out: &mut IOBufChain,
) {
    // A created item starts immortal and takes N then T, or T then N, in request order:
    // the later one is what it keeps.
    let created_exptime = flags
        .tokens
        .iter()
        .filter_map(|t| match t {
            MetaToken::SetTtl => flags.ttl,
            MetaToken::Vivify => flags.vivify,
            _ => None,
        })
        .next_back()
        .unwrap_or(0);
    let op = Arith {
        incr: flags.incr(),
        delta: flags.delta,
        initial: flags.vivify.map(|_| (flags.initial, created_exptime)),
        cas: flags.cas.unwrap_or(0),
    };
    let digits;
    let outcome = match store.meta_arith(cx, key, op, flags.ttl) {
        Ok((ArithOutcome::Value { value, cas }, m)) => {
            let mut text = Vec::with_capacity(20);
            let _ = write!(Digits(&mut text), "{value}");
            digits = IOBufChain::from(IOBuf::from_vec(text));
            let at = |raw: Option<i64>| raw.map_or(-1, |t| ttl(absolute_expiry(t, cx.now), cx.now));
            MetaOutcome::Item(MetaItem {
                flags: 0,
                cas,
                value: &digits,
                ttl: if m.created {
                    -1
                } else {
                    ttl(m.exptime, cx.now)
                },
                ttl_touched: at(flags.ttl),
                ttl_vivified: at(flags.vivify),
                created: m.created,
                last_access: 0,
                fetched: false,
            })
        }
        Ok((ArithOutcome::NotFound, _)) => MetaOutcome::NotFound,
        Ok((ArithOutcome::Exists, _)) => MetaOutcome::Exists,
        Ok((ArithOutcome::NonNumeric, _)) => {
            encode(to, &Response::NonNumeric, out);
            return;
        }
        Err(StoreError::TooLarge | StoreError::OutOfMemory | StoreError::BadKey) => {
            encode(to, &Response::OutOfMemory("out of memory"), out);
            return;
        }
    };
    encode_meta(flags, key, &outcome, out);
}

/// memcached's `t`: `-1` for an item that never expires, else the seconds left as an
/// unsigned 32-bit difference (an expiry in the past wraps, as in memcached).
fn ttl(exptime: UnixTime, now: UnixTime) -> i64 {
    if exptime == 0 {
        -1
    } else {
        i64::from(exptime.wrapping_sub(now))
    }
}

/// A `fmt::Write` into a byte vector.
struct Digits<'a>(&'a mut Vec<u8>);

impl core::fmt::Write for Digits<'_> {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}
