//! The harnesses of ebb-dist's fuzz targets (also run on the checked-in seeds by
//! `cargo test`).
//!
//! * [`frames`]: byte 0 picks the decoder's payload limit (`(b & 15) << (b >> 4)`
//!   bytes, so tiny and large limits both occur); byte 1 seeds the sizes of the pieces the
//!   rest is cut into, as a connection delivers it. The same bytes are also decoded in
//!   one piece: the frames and the error must not depend on how the stream was cut.
//! * [`control`]: the bytes are a control payload (postcard) as a connection that has not
//!   joined sends it; decoding returns a [`Control`] or an error and never panics, and
//!   what decodes encodes back to a payload no larger than
//!   [`MAX_CONTROL_PAYLOAD`](ebb_dist::messenger::MAX_CONTROL_PAYLOAD) allows it to be
//!   received in the first place.

use ebb_core::{IOBuf, IOBufChain};
use ebb_dist::messenger::Control;
use ebb_dist::wire::{Frame, FrameDecoder, HEADER_LEN, MAX_PAYLOAD, WireError};

/// What [`frames`] saw, for the seeds test (every outcome reached).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Whole frames decoded.
    pub frames: usize,
    /// The error that ended the stream, if any.
    pub error: Option<WireError>,
    /// Bytes left over, waiting for more.
    pub incomplete: usize,
}

/// Decodes `data` as a byte stream (see the crate docs); asserts the decoder's promises
/// and returns what it saw.
pub fn frames(data: &[u8]) -> Outcome {
    let Some((&[limit, cut], stream)) = data.split_first_chunk::<2>() else {
        return Outcome::default();
    };
    let max_payload = (u32::from(limit & 15) << (limit >> 4)).min(MAX_PAYLOAD);
    let pieces = cut_pieces(stream, cut);
    let whole = decode(&[stream], max_payload);
    let cut_up = decode(&pieces, max_payload);
    assert_eq!(whole.0, cut_up.0, "the frames depend on how the stream was cut");
    assert_eq!(whole.1, cut_up.1, "the outcome depends on how the stream was cut");
    let (frames, outcome) = cut_up;
    let mut consumed = 0;
    for frame in &frames {
        assert_eq!(frame.payload.len(), frame.header.len as usize);
        assert!(frame.header.len <= max_payload);
        assert_eq!(frame.header.class.has_call_id(), frame.header.call != 0);
        // The payload is the stream's bytes after the header, uncopied in meaning.
        let start = consumed + HEADER_LEN;
        assert_eq!(
            frame.payload.to_vec(),
            &stream[start..start + frame.header.len as usize]
        );
        assert_eq!(&frame.header.encode()[..], &stream[consumed..start]);
        consumed = start + frame.header.len as usize;
    }
    if outcome.error.is_none() {
        assert_eq!(consumed + outcome.incomplete, stream.len());
    }
    outcome
}

/// Splits `stream` into pieces whose sizes follow a small generator seeded by `seed`.
fn cut_pieces(stream: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut pieces = Vec::new();
    let mut state = u32::from(seed) | 1;
    let mut rest = stream;
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let n = (1 + state as usize % 40).min(rest.len());
        let (piece, tail) = rest.split_at(n);
        pieces.push(piece);
        rest = tail;
    }
    pieces
}

fn decode(pieces: &[&[u8]], max_payload: u32) -> (Vec<Frame>, Outcome) {
    let mut decoder = FrameDecoder::new(max_payload);
    let mut frames = Vec::new();
    let mut outcome = Outcome::default();
    'stream: for piece in pieces {
        decoder.push(IOBuf::copy_from_slice(piece));
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(e) => {
                    // Final: asked again, the same error, and nothing is kept.
                    assert_eq!(decoder.next_frame(), Err(e));
                    assert_eq!(decoder.buffered(), 0);
                    outcome.error = Some(e);
                    break 'stream;
                }
            }
        }
        // What it holds is at most one frame (header and payload) short of complete.
        assert!(decoder.buffered() < HEADER_LEN + max_payload as usize + piece.len());
    }
    outcome.frames = frames.len();
    if outcome.error.is_none() {
        outcome.incomplete =
            decoder.buffered() + if decoder.header_pending() { HEADER_LEN } else { 0 };
    }
    (frames, outcome)
}

/// Decodes `data` as a control payload; returns it if it decoded.
pub fn control(data: &[u8]) -> Option<Control> {
    let control: Control = postcard::from_bytes(data).ok()?;
    let again = postcard::to_allocvec(&control).expect("a decoded control message encodes");
    let back: Control = postcard::from_bytes(&again).expect("and decodes again");
    assert_eq!(back, control);
    let _ = IOBufChain::from(IOBuf::from_vec(again));
    Some(control)
}
