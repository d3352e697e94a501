//! The Messenger's wire format: frames of a fixed header and a payload.
//!
//! ```text
//!  0      2       3      4          8             12     14         16        20        24
//!  | "Eb" | ver 1 | class | source   | destination | kind | reserved | call id | length  | payload ...
//!  |      |       |       | node u32 | EbbId u32   | u16  | 0 u16    | u32     | u32     |
//! ```
//!
//! All numbers little-endian. *class* says what the frame is ([`FrameClass`]): a one-way
//! message, a call's request, its reply or its failure, or the Messenger's own control
//! traffic (joining). *kind* is a number the destination Ebb registered for this message
//! — never derived from a type's name or hash, so builds with different compilers agree.
//! *call id* pairs a reply with its request (zero exactly for one-way messages and
//! control frames). *length* is the payload's, at most [`MAX_PAYLOAD`].
//!
//! Decoding is incremental and zero-copy: [`FrameDecoder`] takes the IOBufs a connection
//! delivers and hands out [`Frame`]s whose payload chains share those buffers.

use core::fmt;

use ebb::{EbbId, IOBuf, IOBufChain};

use crate::node::NodeId;

/// The first two bytes of every frame.
pub const MAGIC: [u8; 2] = *b"Eb";
/// The version this build speaks; a frame of another version is refused.
pub const VERSION: u8 = 1;
/// Bytes in a header.
pub const HEADER_LEN: usize = 24;
/// The largest payload a frame may carry (16 MiB): a decoder holds at most this much of
/// one frame before delivering it.
pub const MAX_PAYLOAD: u32 = 16 << 20;

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameClass {
    /// A one-way message to an Ebb.
    Message = 0,
    /// A call: the destination Ebb answers with a [`Reply`](Self::Reply) or
    /// [`Failure`](Self::Failure) carrying the same call id.
    Request = 1,
    /// A call's answer.
    Reply = 2,
    /// A call that could not be answered (no such Ebb or kind, or the Ebb refused it);
    /// the payload is a UTF-8 reason.
    Failure = 3,
    /// The Messenger's own traffic (joining, heartbeats); `destination` is ignored.
    Control = 4,
}

impl FrameClass {
    fn from_u8(b: u8) -> Option<FrameClass> {
        Some(match b {
            0 => FrameClass::Message,
            1 => FrameClass::Request,
            2 => FrameClass::Reply,
            3 => FrameClass::Failure,
            4 => FrameClass::Control,
            _ => return None,
        })
    }

    /// Whether frames of this class carry a non-zero call id.
    pub fn has_call_id(self) -> bool {
        matches!(
            self,
            FrameClass::Request | FrameClass::Reply | FrameClass::Failure
        )
    }
}

/// A frame's header, decoded and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What the frame is.
    pub class: FrameClass,
    /// The sending node.
    pub source: NodeId,
    /// The Ebb it is for.
    pub destination: EbbId,
    /// The message kind the destination registered.
    pub kind: u16,
    /// The call this frame belongs to (zero for messages and control frames).
    pub call: u32,
    /// Payload bytes that follow.
    pub len: u32,
}

/// Why bytes from a peer are not a frame. The connection they came on is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The first two bytes are not [`MAGIC`]: not a Messenger peer, or a lost frame
    /// boundary.
    #[error("not a Messenger frame (magic {0:#06x})")]
    BadMagic(u16),
    /// A version this build does not speak.
    #[error("Messenger wire version {0} (this build speaks {VERSION})")]
    UnsupportedVersion(u8),
    /// An unknown frame class.
    #[error("unknown frame class {0}")]
    UnknownClass(u8),
    /// The reserved field is not zero.
    #[error("reserved header field is {0:#06x}, not zero")]
    ReservedNotZero(u16),
    /// The destination is not an Ebb id of the per-core table.
    #[error("destination {0} is not an Ebb id")]
    BadDestination(u32),
    /// A call id where none belongs, or none where one must be.
    #[error("{class:?} frame with call id {call}")]
    BadCallId {
        /// The frame's class.
        class: FrameClass,
        /// Its call id.
        call: u32,
    },
    /// The payload is longer than [`MAX_PAYLOAD`] (or a sender's own limit).
    #[error("payload of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// The announced length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// Memory for a header could not be had.
    #[error("no memory for a frame header")]
    OutOfMemory,
}

impl Header {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&MAGIC);
        b[2] = VERSION;
        b[3] = self.class as u8;
        b[4..8].copy_from_slice(&self.source.0.to_le_bytes());
        b[8..12].copy_from_slice(&self.destination.as_u32().to_le_bytes());
        b[12..14].copy_from_slice(&self.kind.to_le_bytes());
        // b[14..16]: reserved, zero.
        b[16..20].copy_from_slice(&self.call.to_le_bytes());
        b[20..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Decodes and checks a header; `max_payload` bounds its length.
    pub fn decode(b: &[u8; HEADER_LEN], max_payload: u32) -> Result<Header, WireError> {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if b[0..2] != MAGIC {
            return Err(WireError::BadMagic(u16::from_be_bytes([b[0], b[1]])));
        }
        if b[2] != VERSION {
            return Err(WireError::UnsupportedVersion(b[2]));
        }
        let class = FrameClass::from_u8(b[3]).ok_or(WireError::UnknownClass(b[3]))?;
        let reserved = u16_at(14);
        if reserved != 0 {
            return Err(WireError::ReservedNotZero(reserved));
        }
        let destination = EbbId::from_u32(u32_at(8)).ok_or(WireError::BadDestination(u32_at(8)))?;
        let call = u32_at(16);
        if class.has_call_id() != (call != 0) {
            return Err(WireError::BadCallId { class, call });
        }
        let len = u32_at(20);
        if len > max_payload {
            return Err(WireError::TooLong {
                len,
                max: max_payload,
            });
        }
        Ok(Header {
            class,
            source: NodeId(u32_at(4)),
            destination,
            kind: u16_at(12),
            call,
            len,
        })
    }
}

/// One decoded frame: its header and its payload (sharing the received buffers).
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// The header.
    pub header: Header,
    /// Exactly `header.len` bytes.
    pub payload: IOBufChain,
}

/// Makes the bytes of a frame: `header` (whose `len` is replaced by the payload's) in
/// front of `payload`, which is not copied.
pub fn encode(mut header: Header, mut payload: IOBufChain) -> Result<IOBufChain, WireError> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&l| l <= MAX_PAYLOAD)
        .ok_or(WireError::TooLong {
            len: u32::try_from(payload.len()).unwrap_or(u32::MAX),
            max: MAX_PAYLOAD,
        })?;
    header.len = len;
    let mut head = IOBuf::try_with_capacity(HEADER_LEN).map_err(|_| WireError::OutOfMemory)?;
    head.extend_from_slice(&header.encode())
        .map_err(|_| WireError::OutOfMemory)?;
    payload.push_front(head);
    Ok(payload)
}

/// Splits a connection's byte stream into frames, zero copy.
///
/// Feed it every buffer the connection delivers ([`push`](Self::push)), then take frames
/// until [`next_frame`](Self::next_frame) says `Ok(None)`. An error is final: the stream
/// has no trustworthy frame boundary after it, and the connection should be closed.
///
/// What it holds occupies about what it has received: a buffer that continues a partial
/// frame and keeps alive much more memory than its bytes (a few bytes read into a 2 KiB
/// buffer, a small segment in a frame buffer) is copied into the tail of the piece
/// before it or a small buffer of its own, so a peer sending a frame a byte at a time
/// cannot make a 16 MiB payload pin gigabytes (only a partial frame's first piece is
/// kept as it came, whatever it occupies). The copy is fallible: without memory the
/// piece is kept as it came.
#[derive(Debug)]
pub struct FrameDecoder {
    pending: IOBufChain,
    header: Option<Header>,
    max_payload: u32,
    failed: Option<WireError>,
}

/// The smallest buffer small pieces are copied into (a 2 KiB allocation with its region
/// header).
const COMPACT_CHUNK: usize = 2048 - ebb::iobuf::REGION_OVERHEAD;

impl Default for FrameDecoder {
    fn default() -> Self {
        FrameDecoder::new(MAX_PAYLOAD)
    }
}

impl FrameDecoder {
    /// A decoder refusing payloads above `max_payload` (at most [`MAX_PAYLOAD`]).
    pub fn new(max_payload: u32) -> FrameDecoder {
        FrameDecoder {
            pending: IOBufChain::default(),
            header: None,
            max_payload: max_payload.min(MAX_PAYLOAD),
            failed: None,
        }
    }

    /// Changes the largest payload it accepts (at most [`MAX_PAYLOAD`]) for the frames
    /// not yet begun: the Messenger accepts only control-sized frames from a connection
    /// until it has joined.
    pub fn set_max_payload(&mut self, max_payload: u32) {
        self.max_payload = max_payload.min(MAX_PAYLOAD);
    }

    /// Adds received bytes (compactly: see the type's docs).
    pub fn push(&mut self, data: IOBuf) {
        if self.failed.is_some() || data.is_empty() {
            return;
        }
        // A piece that starts no partial frame is taken as it is: the common case, a
        // frame or more in one buffer, is handed out before the next push and holds
        // nothing. Copying starts with the second piece of a partial frame.
        if self.pending.is_empty() || !data.wasteful() {
            self.pending.push_back(data);
            return;
        }
        if let Some(mut last) = self.pending.back_mut()
            && last.is_unique()
            && last.tailroom() >= data.len()
            && last.extend_from_slice(data.as_slice()).is_ok()
        {
            return;
        }
        // A buffer of its own, with room for the small pieces that may follow.
        let copy = IOBuf::try_with_capacity(data.len().max(COMPACT_CHUNK))
            .ok()
            .and_then(|mut copy| copy.extend_from_slice(data.as_slice()).ok().map(|_| copy));
        self.pending.push_back(copy.unwrap_or(data));
    }

    /// The memory the bytes it holds keep alive: each piece's whole buffer.
    pub fn occupied(&self) -> usize {
        self.pending.iter().map(IOBuf::occupied).sum()
    }

    /// Whether a frame's header was taken and its payload is still awaited (its
    /// header's bytes no longer count in [`buffered`](Self::buffered)).
    pub fn header_pending(&self) -> bool {
        self.header.is_some()
    }

    /// Bytes received and not yet handed out as frames.
    pub fn buffered(&self) -> usize {
        self.pending.len()
    }

    /// The next whole frame, `Ok(None)` if more bytes are needed, or the error that ended
    /// the stream (again on every later call).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, WireError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        let header = match self.header {
            Some(h) => h,
            None => {
                if self.pending.len() < HEADER_LEN {
                    return Ok(None);
                }
                let mut bytes = [0u8; HEADER_LEN];
                let decoded = self
                    .pending
                    .cursor()
                    .read_into(&mut bytes)
                    .map_err(|_| WireError::OutOfMemory)
                    .and_then(|()| Header::decode(&bytes, self.max_payload));
                let h = match decoded {
                    Ok(h) => h,
                    Err(e) => return Err(self.fail(e)),
                };
                if self.pending.trim_front(HEADER_LEN).is_err() {
                    return Err(self.fail(WireError::OutOfMemory));
                }
                self.header = Some(h);
                h
            }
        };
        if self.pending.len() < header.len as usize {
            return Ok(None);
        }
        let payload = match self.pending.split_to(header.len as usize) {
            Ok(p) => p,
            Err(_) => return Err(self.fail(WireError::OutOfMemory)),
        };
        self.header = None;
        Ok(Some(Frame { header, payload }))
    }

    fn fail(&mut self, e: WireError) -> WireError {
        self.failed = Some(e);
        self.pending = IOBufChain::default();
        self.header = None;
        e
    }
}

impl fmt::Display for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} from {} to {} kind {} call {} ({} bytes)",
            self.class, self.source, self.destination, self.kind, self.call, self.len
        )
    }
}

#[cfg(test)]
mod tests;
