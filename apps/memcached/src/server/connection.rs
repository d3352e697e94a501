//! [`McConnection`]: one connection's handler — what arrives is parsed and executed
//! (`execute`), the replies sent in batches, a `get` answered a piece at a time, the
//! connection paused while its replies wait, and its unparsed input kept within bounds.

use alloc::sync::Arc;
use core::net::SocketAddr;
use core::sync::atomic::Ordering;

use ebb::net::{CloseReason, IOBuf, IOBufChain, TcpConnection, TcpHandler};

use super::input::{COMPACT_SLACK, INPUT_ALLOWANCE, OUT_OF_MEMORY_READING, compact, footprint};
use super::{Registration, Server, core_index, now_unix};
use crate::protocol::{
    Keys, Limits, Parsed, Parser, Protocol, REPLY_BUFFER, ReplyTo, Response, encode, encode_reusing,
};
use crate::store::Ctx;

/// Reply bytes queued on a connection beyond which it stops reading (after a refused
/// send).
pub const MAX_QUEUED_REPLY: usize = 4 << 20;

/// Replies collected beyond this are sent before more requests run (a long pipeline of
/// gets is answered in pieces, so the connection can push back in between).
const FLUSH_AT: usize = 256 << 10;

impl Server {
    /// The handler for a newly accepted connection from `peer` to our `local` address,
    /// or `None` when `-c` is reached (the caller sends memcached's refusal and closes).
    pub fn accept(self: &Arc<Self>, peer: SocketAddr, local: SocketAddr) -> Option<McConnection> {
        let open = self.connections.curr.fetch_add(1, Ordering::Relaxed) + 1;
        if open > self.settings.max_connections {
            self.connections.curr.fetch_sub(1, Ordering::Relaxed);
            self.connections.rejected.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.connections.total.fetch_add(1, Ordering::Relaxed);
        Some(McConnection {
            server: self.clone(),
            parser: Parser::new(Limits {
                item_size_max: self.settings.item_size_max,
                ..Limits::default()
            }),
            input: IOBufChain::new(),
            input_footprint: 0,
            charged: 0,
            paused: false,
            closing: false,
            counted: true,
            pending_get: None,
            reply_buffer: IOBuf::new(),
            registration: self.register(peer, local, now_unix()),
        })
    }
}

/// One connection's handler.
pub struct McConnection {
    pub(super) server: Arc<Server>,
    pub(super) parser: Parser,
    /// Received bytes not parsed yet.
    pub(super) input: IOBufChain,
    /// The memory `input`'s buffers occupy ([`footprint`]), kept as segments arrive and
    /// recomputed only when requests consumed some, so waiting for a large value costs
    /// O(1) per receive.
    pub(super) input_footprint: usize,
    /// The footprint of `input` counted in the server's `read_buf_bytes`.
    pub(super) charged: usize,
    /// Reading and executing stopped until the send window opens.
    pub(super) paused: bool,
    /// A reply asked for the connection to close once sent.
    pub(super) closing: bool,
    /// Counted in `curr_connections`: until the server closes its side, as memcached
    /// counts a connection until it closes the socket — not until TCP has finished, which
    /// a peer that never acknowledges our FIN (passt, at times) delays by minutes.
    pub(super) counted: bool,
    /// A `get` answered in part: the rest goes out as the connection takes it.
    pub(super) pending_get: Option<PendingGet>,
    /// A clone of the buffer the last reply was copied into (see `encode_reusing`): once
    /// the connection has sent it and let go, the next reply is copied into the same
    /// region — no allocation — as the socket layer does with its receive buffers.
    pub(super) reply_buffer: IOBuf,
    /// Its entry in `stats conns`, removed when the handler goes.
    pub(super) registration: Registration,
}

/// A `get` whose reply is being built: its keys, and the next one to answer.
pub(super) struct PendingGet {
    pub(super) keys: Keys,
    pub(super) next: usize,
    pub(super) touch: Option<i64>,
    pub(super) reply_to: ReplyTo,
}

impl McConnection {
    /// Executes what `input` holds, stopping at a pause or a close; sends the replies.
    fn process(&mut self, conn: &dyn TcpConnection) {
        let mut out = IOBufChain::new();
        let cx = Ctx::new(now_unix(), core_index());
        // `secs_since_last_cmd`: once per batch, a relaxed store to this connection's
        // own entry.
        self.registration
            .entry
            .last_cmd
            .store(cx.now, Ordering::Relaxed);
        while !self.closing {
            if self.pending_get.is_some() {
                if self.continue_get(cx, &mut out) && self.flush(conn, &mut out) {
                    break;
                }
                continue;
            }
            match self.parser.parse(&mut self.input) {
                Parsed::Incomplete => break,
                Parsed::Request(command) => {
                    let must_flush = self.execute(cx, command, &mut out);
                    if (must_flush || out.len() >= FLUSH_AT) && self.flush(conn, &mut out) {
                        break;
                    }
                }
                Parsed::Error(e) => {
                    let mut reply = e.reply;
                    out.append(&mut reply);
                    if let Some(key) = e.unlink {
                        self.server.store.delete(cx, &key, 0);
                    }
                    if e.close {
                        self.closing = true;
                    }
                }
            }
        }
        self.flush(conn, &mut out);
        if self.closing {
            self.close(conn);
        }
    }

    /// Answers the keys of the `get` under way, until its reply has grown past
    /// [`FLUSH_AT`]: true when keys are left (the caller flushes, and pauses if the
    /// connection must). A get of many keys, or of large values, so never builds more than
    /// about `FLUSH_AT` plus one value of reply before the connection can push back — a
    /// thousand keys of a 1 MiB value are 65,000 buffers, which built at once made a reply
    /// chain of megabytes (review of issue 21).
    pub(super) fn continue_get(&mut self, cx: Ctx, out: &mut IOBufChain) -> bool {
        let store = &self.server.store;
        let Some(get) = self.pending_get.as_mut() else {
            return false;
        };
        // Whether the last key's hit wrote the `END` behind its value already.
        let mut ended = false;
        while let Some(key) = get.keys.get(get.next) {
            get.next += 1;
            let last = get.next == get.keys.len();
            let reply_to = &get.reply_to;
            let spare = &mut self.reply_buffer;
            let hit = |flags, cas, data: &[IOBuf], out: &mut IOBufChain, spare: &mut IOBuf| {
                let response = Response::Value {
                    key,
                    flags,
                    cas,
                    data,
                    end: last,
                };
                encode_reusing(reply_to, &response, out, spare);
            };
            let found = match get.touch {
                // A get reads the item in place: its reply is copied (or its buffers
                // cloned) straight from it.
                None => store
                    .get_with(cx, key, |item| {
                        hit(item.flags, item.cas, item.value, out, spare)
                    })
                    .is_some(),
                Some(exptime) => match store.gat(cx, key, exptime) {
                    Some(mut found) => {
                        hit(
                            found.flags,
                            found.cas,
                            found.value.make_contiguous(),
                            out,
                            spare,
                        );
                        true
                    }
                    None => false,
                },
            };
            if found {
                ended = last;
            } else {
                encode_reusing(reply_to, &Response::Miss { key }, out, spare);
            }
            if out.len() >= FLUSH_AT && get.next < get.keys.len() {
                return true;
            }
        }
        if !ended {
            encode(&get.reply_to, &Response::End, out);
        }
        self.pending_get = None;
        false
    }

    /// Closes our side (queued replies still go out) and stops counting the connection.
    fn close(&mut self, conn: &dyn TcpConnection) {
        conn.close();
        self.uncount();
    }

    /// Takes the connection out of `curr_connections`, once.
    fn uncount(&mut self) {
        if core::mem::take(&mut self.counted) {
            self.server.connections.curr.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Executes what `input` holds unless paused, then accounts for what is left.
    fn serve(&mut self, conn: &dyn TcpConnection) {
        let before = self.input.len();
        if !self.paused {
            self.process(conn);
        }
        if self.input.len() != before {
            self.input_footprint = footprint(&self.input);
        }
        self.account_input(conn);
    }

    /// Keeps the memory behind the unparsed input honest, after every receive:
    ///
    /// * compacts it when its buffers are mostly waste — a peer sending a partial request
    ///   in tiny segments would otherwise pin a whole receive buffer per few bytes, and a
    ///   short partial request left at the end of a 64 KiB read would be charged all of
    ///   it (into a buffer of twice the bytes, so a long trickle is copied O(1) times per
    ///   byte);
    /// * charges its footprint to the server-wide `read_buf_bytes`;
    /// * past [`Server::input_limit`], refuses a connection holding more than
    ///   [`INPUT_ALLOWANCE`]: memcached's `SERVER_ERROR out of memory reading request`
    ///   (text; a binary connection is just closed) and close, counted `read_buf_oom`.
    ///   The connection refused is the one whose input grows past the allowance while
    ///   the total is over, not necessarily the one holding most; small requests always
    ///   pass.
    fn account_input(&mut self, conn: &dyn TcpConnection) {
        if self.input_footprint > 2 * self.input.len() + COMPACT_SLACK {
            compact(&mut self.input, &*self.server.memory);
            self.input_footprint = footprint(&self.input);
        }
        let held = self.input_footprint;
        // A request answered whole leaves nothing: no shared counter is touched then.
        if held != self.charged {
            self.charge(held);
        }
        let over = || {
            let total = self
                .server
                .connections
                .read_buf_bytes
                .load(Ordering::Relaxed);
            total > self.server.input_limit as u64
        };
        if held > INPUT_ALLOWANCE && !self.closing && over() {
            let binary = self.parser.protocol() == Some(Protocol::Binary);
            self.input = IOBufChain::new();
            self.input_footprint = 0;
            self.charge(0);
            self.server
                .connections
                .read_buf_oom
                .fetch_add(1, Ordering::Relaxed);
            self.closing = true;
            if !binary {
                let _ = conn.send(IOBufChain::from(IOBuf::from_static(OUT_OF_MEMORY_READING)));
            }
            // What still arrives is answered with a reset (`receive`). The window stays
            // open until then: the network layer would hold what arrives for a closed
            // one, up to a whole window per connection (that ran a 128 MiB guest out of
            // memory).
            self.close(conn);
        }
    }

    /// Sets this connection's charge in `read_buf_bytes` to `held`.
    fn charge(&mut self, held: usize) {
        let counter = &self.server.connections.read_buf_bytes;
        if held >= self.charged {
            counter.fetch_add((held - self.charged) as u64, Ordering::Relaxed);
        } else {
            counter.fetch_sub((self.charged - held) as u64, Ordering::Relaxed);
        }
        self.charged = held;
    }

    /// Sends `out`; true when the connection must pause (the send queued past the
    /// bound).
    fn flush(&mut self, conn: &dyn TcpConnection, out: &mut IOBufChain) -> bool {
        if out.is_empty() {
            return false;
        }
        let len = out.len();
        // A reply buffer of ours (no one else holds it yet): kept, to be recycled.
        if let Some(front) = out.front()
            && front.headroom() + front.len() + front.tailroom() == REPLY_BUFFER
            && front.is_unique()
        {
            self.reply_buffer = front.clone();
        }
        let refused = len > conn.send_window();
        // `send_from` empties `out` in place (no chain moved, no new one made).
        if conn.send_from(out).is_err() {
            self.closing = true;
            return true;
        }
        self.server
            .connections
            .bytes_written
            .fetch_add(len as u64, Ordering::Relaxed);
        if refused && conn.queued_bytes() > MAX_QUEUED_REPLY {
            self.paused = true;
            self.registration
                .entry
                .paused
                .store(true, Ordering::Relaxed);
            conn.set_receive_window_open(false);
            return true;
        }
        false
    }
}

impl TcpHandler for McConnection {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        self.server
            .connections
            .bytes_read
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        if self.closing {
            // Closed by us (`quit`, a refused request): what still arrives gets a reset,
            // as a closed Linux socket answers it (memcached's own behaviour there), once
            // our last reply has left — an abort drops what is still queued, and ebb-net
            // sends only when it polls, after a whole batch of received segments. A peer
            // still sending a refused 1 MB value stops then, instead of streaming all of
            // it to a server that drops it — which, with many such peers, kept the core
            // from serving anyone else.
            if conn.queued_bytes() == 0 {
                conn.abort();
            }
            return;
        }
        self.input_footprint += data.occupied();
        self.input.push_back(data);
        self.serve(conn);
    }

    fn send_window_increased(&mut self, conn: &dyn TcpConnection) {
        if self.paused {
            self.paused = false;
            self.registration
                .entry
                .paused
                .store(false, Ordering::Relaxed);
            conn.set_receive_window_open(true);
            self.serve(conn);
        }
    }

    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        // As memcached: the peer is done, so are we (once our replies have left).
        self.close(conn);
    }

    fn closed(&mut self, _reason: CloseReason) {
        self.input = IOBufChain::new();
        self.input_footprint = 0;
        if self.charged != 0 {
            self.charge(0);
        }
        self.uncount();
    }
}

impl Drop for McConnection {
    /// A handler dropped without `closed` (a connection that ended before its handler
    /// was installed) still gives back its count and its input's charge.
    fn drop(&mut self) {
        self.uncount();
        if self.charged != 0 {
            self.charge(0);
        }
    }
}
