//! The memory behind a connection's unparsed input: how much its buffers occupy
//! ([`footprint`]) and copying it into one buffer when they are mostly waste
//! ([`compact`]); the bounds the connection keeps it under are [`INPUT_ALLOWANCE`] and
//! [`Server::input_limit`](super::Server::input_limit) (see `McConnection::account_input`).

use ebb::net::{IOBuf, IOBufChain};

use crate::store::ItemMemory;

/// Unparsed input a connection may hold whatever the server-wide count says: an
/// ordinary request (ETC's are under 1.2 KB) is never refused for memory.
pub const INPUT_ALLOWANCE: usize = 16 << 10;

/// Input whose buffers occupy more than twice its bytes plus this is compacted.
pub(super) const COMPACT_SLACK: usize = 16 << 10;

/// memcached's reply when it cannot grow a connection's read buffer; it closes the
/// connection after it.
pub const OUT_OF_MEMORY_READING: &[u8] = b"SERVER_ERROR out of memory reading request\r\n";

/// The memory `input`'s buffers occupy: each segment's whole storage, since a few bytes
/// cut from a receive buffer keep all of it alive (segments sharing one are counted
/// each: an upper bound).
pub(super) fn footprint(input: &IOBufChain) -> usize {
    input.iter().map(IOBuf::occupied).sum()
}

/// Copies `input` into one buffer: its first segment when that is this connection's
/// alone, has room for the rest and is not itself mostly waste (a buffer from an
/// earlier compaction), else a new one with room for as many bytes again, from
/// `memory` — if it refuses, the input stays as it is (its footprint is still charged,
/// and the server-wide bound still refuses the connection if it grows).
pub(super) fn compact(input: &mut IOBufChain, memory: &dyn ItemMemory) {
    let len = input.len();
    let mut parts = core::mem::take(input);
    let Some(mut head) = parts.pop_front() else {
        return;
    };
    if head.is_unique()
        && head.tailroom() >= len - head.len()
        && head.occupied() <= 2 * len + COMPACT_SLACK
    {
        for part in parts.segments() {
            // Cannot fail: the storage is unique and the room for all of them checked.
            let grown = head.extend_from_slice(part);
            debug_assert!(grown.is_ok());
        }
        *input = IOBufChain::from(head);
        return;
    }
    let Some(mut bytes) = memory.buffer((2 * len).max(4096)) else {
        parts.push_front(head);
        *input = parts;
        return;
    };
    for part in core::iter::once(head.as_slice()).chain(parts.segments()) {
        // Cannot fail: the buffer is new (unique) with room for twice the bytes.
        let copied = bytes.extend_from_slice(part);
        debug_assert!(copied.is_ok());
    }
    *input = IOBufChain::from(bytes);
}
