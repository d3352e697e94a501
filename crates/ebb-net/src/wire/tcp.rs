//! TCP segments (RFC 9293) with the options the stack negotiates: maximum segment size,
//! window scale and timestamps (RFC 7323), SACK-permitted and SACK blocks (RFC 2018).
//!
//! Options are read by [`Options`], an iterator that never panics: unknown options are
//! skipped by their length; a length below two or past the options area, or a known
//! option with the wrong length, ends the iteration with [`WireError::Malformed`].

use core::cmp::Ordering;
use core::net::Ipv4Addr;
use core::ops::{Add, AddAssign, Sub};

use super::bytes::{get_u16, get_u32, set_u16, set_u32};
use super::checksum::{self, ChecksumCapabilities};
use super::ipv4::Protocol;
use super::{Result, WireError};

/// A TCP sequence number: arithmetic wraps modulo 2³², and comparisons are by signed
/// distance, so `a < b` means `b` is less than 2³¹ ahead of `a` (RFC 1982 serial number
/// arithmetic). The order is not transitive across more than half the space; the stack
/// only compares numbers inside a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNumber(pub u32);

impl SeqNumber {
    /// The later of two sequence numbers.
    pub fn max(self, other: SeqNumber) -> SeqNumber {
        if self > other { self } else { other }
    }

    /// The earlier of two sequence numbers.
    pub fn min(self, other: SeqNumber) -> SeqNumber {
        if self < other { self } else { other }
    }
}

impl Add<u32> for SeqNumber {
    type Output = SeqNumber;
    fn add(self, rhs: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(rhs))
    }
}

impl Add<usize> for SeqNumber {
    type Output = SeqNumber;
    fn add(self, rhs: usize) -> SeqNumber {
        // Sequence space is modulo 2^32, so truncating the length is the right wrap.
        SeqNumber(self.0.wrapping_add(rhs as u32))
    }
}

impl AddAssign<u32> for SeqNumber {
    fn add_assign(&mut self, rhs: u32) {
        *self = *self + rhs;
    }
}

impl Sub<u32> for SeqNumber {
    type Output = SeqNumber;
    fn sub(self, rhs: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_sub(rhs))
    }
}

/// The signed distance from `rhs` to `self`: positive when `self` is ahead.
impl Sub<SeqNumber> for SeqNumber {
    type Output = i32;
    fn sub(self, rhs: SeqNumber) -> i32 {
        self.0.wrapping_sub(rhs.0) as i32
    }
}

// The comparison operators compare the signed distance with zero directly: through
// `partial_cmp` each became an `Ordering` compared again (the TCP paths compare
// sequence numbers a few dozen times a segment).
impl PartialOrd for SeqNumber {
    #[inline]
    fn partial_cmp(&self, other: &SeqNumber) -> Option<Ordering> {
        Some((*self - *other).cmp(&0))
    }
    #[inline]
    fn lt(&self, other: &SeqNumber) -> bool {
        (*self - *other) < 0
    }
    #[inline]
    fn le(&self, other: &SeqNumber) -> bool {
        (*self - *other) <= 0
    }
    #[inline]
    fn gt(&self, other: &SeqNumber) -> bool {
        (*self - *other) > 0
    }
    #[inline]
    fn ge(&self, other: &SeqNumber) -> bool {
        (*self - *other) >= 0
    }
}

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;
/// Largest header (data offset 15).
pub const MAX_HEADER_LEN: usize = 60;
/// Most SACK blocks one option can carry.
pub const MAX_SACK_BLOCKS: usize = 4;

/// Flag bits in byte 13.
mod flag {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// Option kinds.
mod kind {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WINDOW_SCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMP: u8 = 8;
}

/// A zero-copy view of a TCP segment (the whole IP payload).
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

macro_rules! flag_accessors {
    ($($get:ident, $set:ident, $bit:expr, $doc:literal;)+) => {
        impl<T: AsRef<[u8]>> Packet<T> {
            $(
                #[doc = concat!("The ", $doc, " flag.")]
                pub fn $get(&self) -> bool {
                    self.buffer.as_ref()[13] & $bit != 0
                }
            )+
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
            $(
                #[doc = concat!("Sets or clears the ", $doc, " flag.")]
                pub fn $set(&mut self, value: bool) {
                    let b = &mut self.buffer.as_mut()[13];
                    *b = if value { *b | $bit } else { *b & !$bit };
                }
            )+
        }
    };
}

flag_accessors! {
    fin, set_fin, flag::FIN, "FIN";
    syn, set_syn, flag::SYN, "SYN";
    rst, set_rst, flag::RST, "RST";
    psh, set_psh, flag::PSH, "PSH";
    ack, set_ack, flag::ACK, "ACK";
    urg, set_urg, flag::URG, "URG";
    ece, set_ece, flag::ECE, "ECE";
    cwr, set_cwr, flag::CWR, "CWR";
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking it; accessors may panic if it is too short.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps `buffer` after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the fixed header and that the header length (data
    /// offset) is at least 20 and within the buffer; then no accessor can panic.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let header_len = usize::from(self.header_len());
        super::check_declared_len(header_len, HEADER_LEN, len)?;
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The source port.
    pub fn src_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 0)
    }

    /// The destination port.
    pub fn dst_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 2)
    }

    /// The sequence number.
    pub fn seq_number(&self) -> SeqNumber {
        SeqNumber(get_u32(self.buffer.as_ref(), 4))
    }

    /// The acknowledgement number (meaningful only with ACK set).
    pub fn ack_number(&self) -> SeqNumber {
        SeqNumber(get_u32(self.buffer.as_ref(), 8))
    }

    /// The header length in bytes (data offset × 4).
    pub fn header_len(&self) -> u8 {
        (self.buffer.as_ref()[12] >> 4) * 4
    }

    /// The window field, unscaled.
    pub fn window_len(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 14)
    }

    /// The checksum as stored.
    pub fn checksum(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 16)
    }

    /// The urgent pointer (meaningful only with URG set).
    pub fn urgent_at(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 18)
    }

    /// The options area (0–40 bytes), raw; [`Options`] reads it.
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.header_len())]
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[usize::from(self.header_len())..]
    }

    /// How much sequence space the segment occupies: payload plus one each for SYN and
    /// FIN.
    pub fn segment_len(&self) -> usize {
        self.payload().len() + usize::from(self.syn()) + usize::from(self.fin())
    }

    /// Whether the checksum over the pseudo-header and the whole buffer is correct.
    pub fn verify_checksum(&self, src_addr: Ipv4Addr, dst_addr: Ipv4Addr) -> bool {
        let data = self.buffer.as_ref();
        let Ok(len) = u16::try_from(data.len()) else {
            return false;
        };
        let sum = checksum::combine(&[
            checksum::pseudo_header(src_addr, dst_addr, Protocol::Tcp.into(), len),
            checksum::data(data),
        ]);
        sum == 0xffff
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    pub fn set_src_port(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 0, value);
    }

    /// Sets the destination port.
    pub fn set_dst_port(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 2, value);
    }

    /// Sets the sequence number.
    pub fn set_seq_number(&mut self, value: SeqNumber) {
        set_u32(self.buffer.as_mut(), 4, value.0);
    }

    /// Sets the acknowledgement number.
    pub fn set_ack_number(&mut self, value: SeqNumber) {
        set_u32(self.buffer.as_mut(), 8, value.0);
    }

    /// Sets the header length in bytes (rounded down to a multiple of 4, at most 60); the
    /// reserved bits are cleared.
    pub fn set_header_len(&mut self, value: u8) {
        self.buffer.as_mut()[12] = ((value / 4) & 0x0f) << 4;
    }

    /// Clears all flags.
    pub fn clear_flags(&mut self) {
        self.buffer.as_mut()[13] = 0;
    }

    /// Sets the window field.
    pub fn set_window_len(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 14, value);
    }

    /// Sets the stored checksum.
    pub fn set_checksum(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 16, value);
    }

    /// Sets the urgent pointer.
    pub fn set_urgent_at(&mut self, value: u16) {
        set_u16(self.buffer.as_mut(), 18, value);
    }

    /// The options area, writable (the header length must be set).
    pub fn options_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.header_len());
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }

    /// The bytes after the header, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = usize::from(self.header_len());
        &mut self.buffer.as_mut()[start..]
    }

    /// Computes and stores the checksum over the pseudo-header and the whole buffer.
    pub fn fill_checksum(&mut self, src_addr: Ipv4Addr, dst_addr: Ipv4Addr) {
        self.set_checksum(0);
        let data = self.buffer.as_ref();
        let len = u16::try_from(data.len()).unwrap_or(u16::MAX);
        let sum = checksum::combine(&[
            checksum::pseudo_header(src_addr, dst_addr, Protocol::Tcp.into(), len),
            checksum::data(data),
        ]);
        self.set_checksum(!sum);
    }
}

/// Up to four SACK blocks, each `(left edge, right edge)`; filled from the front.
pub type SackBlocks = [Option<(SeqNumber, SeqNumber)>; MAX_SACK_BLOCKS];

/// One TCP option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpOption<'a> {
    /// End of the option list; the rest of the area is padding.
    EndOfList,
    /// Padding between options.
    NoOperation,
    /// Maximum segment size (SYN only).
    MaxSegmentSize(u16),
    /// Window scale shift (SYN only).
    WindowScale(u8),
    /// SACK may be used (SYN only).
    SackPermitted,
    /// Selectively acknowledged blocks, 1–4 of them.
    SackRange(SackBlocks),
    /// Timestamps: the sender's clock and the echoed peer clock.
    Timestamp {
        /// Timestamp value.
        tsval: u32,
        /// Timestamp echo reply.
        tsecr: u32,
    },
    /// An option this stack does not interpret, skipped by its length.
    Unknown {
        /// Option kind.
        kind: u8,
        /// Option data (after kind and length).
        data: &'a [u8],
    },
}

impl<'a> TcpOption<'a> {
    /// Reads one option from the front of `bytes` (which must not be empty), returning
    /// it and the rest.
    fn parse(bytes: &'a [u8]) -> Result<(TcpOption<'a>, &'a [u8])> {
        let (&kind, rest) = bytes.split_first().ok_or(WireError::Truncated)?;
        match kind {
            kind::END => return Ok((TcpOption::EndOfList, &[])),
            kind::NOP => return Ok((TcpOption::NoOperation, rest)),
            _ => {}
        }
        let len = usize::from(*rest.first().ok_or(WireError::Malformed)?);
        if len < 2 || len > bytes.len() {
            return Err(WireError::Malformed);
        }
        let data = &bytes[2..len];
        let rest = &bytes[len..];
        let option = match (kind, data.len()) {
            (kind::MSS, 2) => TcpOption::MaxSegmentSize(get_u16(data, 0)),
            (kind::WINDOW_SCALE, 1) => TcpOption::WindowScale(data[0]),
            (kind::SACK_PERMITTED, 0) => TcpOption::SackPermitted,
            (kind::TIMESTAMP, 8) => TcpOption::Timestamp {
                tsval: get_u32(data, 0),
                tsecr: get_u32(data, 4),
            },
            (kind::SACK, n) if n > 0 && n.is_multiple_of(8) && n / 8 <= MAX_SACK_BLOCKS => {
                let mut blocks: SackBlocks = [None; MAX_SACK_BLOCKS];
                for (slot, edges) in blocks.iter_mut().zip(data.chunks_exact(8)) {
                    *slot = Some((SeqNumber(get_u32(edges, 0)), SeqNumber(get_u32(edges, 4))));
                }
                TcpOption::SackRange(blocks)
            }
            (
                kind::MSS
                | kind::WINDOW_SCALE
                | kind::SACK_PERMITTED
                | kind::TIMESTAMP
                | kind::SACK,
                _,
            ) => return Err(WireError::Malformed),
            _ => TcpOption::Unknown { kind, data },
        };
        Ok((option, rest))
    }

    /// How many bytes [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        match self {
            TcpOption::EndOfList | TcpOption::NoOperation => 1,
            TcpOption::MaxSegmentSize(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::SackRange(blocks) => 2 + 8 * blocks.iter().flatten().count(),
            TcpOption::Timestamp { .. } => 10,
            TcpOption::Unknown { data, .. } => 2 + data.len().min(253),
        }
    }

    /// Writes the option at the front of `buffer` (at least
    /// [`buffer_len`](Self::buffer_len) bytes) and returns the bytes written. Unknown
    /// option data beyond 253 bytes is cut.
    pub fn emit(&self, buffer: &mut [u8]) -> usize {
        let len = self.buffer_len();
        match *self {
            TcpOption::EndOfList => buffer[0] = kind::END,
            TcpOption::NoOperation => buffer[0] = kind::NOP,
            TcpOption::MaxSegmentSize(mss) => {
                buffer[..2].copy_from_slice(&[kind::MSS, 4]);
                set_u16(buffer, 2, mss);
            }
            TcpOption::WindowScale(shift) => {
                buffer[..3].copy_from_slice(&[kind::WINDOW_SCALE, 3, shift]);
            }
            TcpOption::SackPermitted => buffer[..2].copy_from_slice(&[kind::SACK_PERMITTED, 2]),
            TcpOption::SackRange(blocks) => {
                buffer[..2].copy_from_slice(&[kind::SACK, len as u8]);
                for (i, (left, right)) in blocks.iter().flatten().enumerate() {
                    set_u32(buffer, 2 + 8 * i, left.0);
                    set_u32(buffer, 6 + 8 * i, right.0);
                }
            }
            TcpOption::Timestamp { tsval, tsecr } => {
                buffer[..2].copy_from_slice(&[kind::TIMESTAMP, 10]);
                set_u32(buffer, 2, tsval);
                set_u32(buffer, 6, tsecr);
            }
            TcpOption::Unknown { kind, data } => {
                buffer[..2].copy_from_slice(&[kind, len as u8]);
                buffer[2..len].copy_from_slice(&data[..len - 2]);
            }
        }
        len
    }
}

/// An iterator over the options in an options area. It yields `Err` at most once and
/// then stops; it stops after [`TcpOption::EndOfList`] too.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    rest: &'a [u8],
}

impl<'a> Options<'a> {
    /// Iterates over the options in `area` (for example [`Packet::options`]).
    pub fn new(area: &'a [u8]) -> Options<'a> {
        Options { rest: area }
    }
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<TcpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match TcpOption::parse(self.rest) {
            Ok((option, rest)) => {
                self.rest = rest;
                Some(Ok(option))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

/// The SYN, FIN or RST carried by a segment (at most one of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Control {
    /// None of SYN, FIN, RST.
    #[default]
    None,
    /// SYN.
    Syn,
    /// FIN.
    Fin,
    /// RST.
    Rst,
}

/// The timestamps option's two clocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timestamp {
    /// The sender's timestamp value.
    pub tsval: u32,
    /// The echoed timestamp of the peer.
    pub tsecr: u32,
}

/// The meaning of a TCP segment. URG, ECE, CWR and the urgent pointer are not
/// represented: parsing ignores them and emitting writes zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr<'a> {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// SYN, FIN, RST or none.
    pub control: Control,
    /// The PSH flag.
    pub push: bool,
    /// Sequence number.
    pub seq_number: SeqNumber,
    /// Acknowledgement number; `Some` exactly when ACK is set.
    pub ack_number: Option<SeqNumber>,
    /// Window field, unscaled.
    pub window_len: u16,
    /// Window scale option.
    pub window_scale: Option<u8>,
    /// Maximum segment size option.
    pub max_seg_size: Option<u16>,
    /// SACK-permitted option.
    pub sack_permitted: bool,
    /// SACK option blocks, filled from the front; `[None; 4]` for no SACK option.
    pub sack_ranges: SackBlocks,
    /// Timestamps option.
    pub timestamp: Option<Timestamp>,
    /// The payload.
    pub payload: &'a [u8],
}

/// Rounds `n` up to a multiple of four.
const fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

impl<'a> Repr<'a> {
    /// A segment without options or payload: the shape most segments built by hand
    /// (tests, probes) start from; set the other fields with struct update syntax.
    pub fn plain(
        src_port: u16,
        dst_port: u16,
        control: Control,
        seq_number: SeqNumber,
        ack_number: Option<SeqNumber>,
        window_len: u16,
    ) -> Self {
        Repr {
            src_port,
            dst_port,
            control,
            push: false,
            seq_number,
            ack_number,
            window_len,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; MAX_SACK_BLOCKS],
            timestamp: None,
            payload: &[],
        }
    }

    /// Reads a checked segment sent from `src_addr` to `dst_addr`, verifying the checksum
    /// if `caps.tcp` says to. Port zero, more than one of SYN/FIN/RST, and malformed
    /// options are [`WireError::Malformed`]. When an option appears twice, the last wins.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        src_addr: Ipv4Addr,
        dst_addr: Ipv4Addr,
        caps: &ChecksumCapabilities,
    ) -> Result<Repr<'a>> {
        packet.check_len()?;
        if packet.src_port() == 0 || packet.dst_port() == 0 {
            return Err(WireError::Malformed);
        }
        if caps.tcp.software_verifies() && !packet.verify_checksum(src_addr, dst_addr) {
            return Err(WireError::BadChecksum);
        }
        let control = match (packet.syn(), packet.fin(), packet.rst()) {
            (false, false, false) => Control::None,
            (true, false, false) => Control::Syn,
            (false, true, false) => Control::Fin,
            (false, false, true) => Control::Rst,
            _ => return Err(WireError::Malformed),
        };
        let buffer: &'a [u8] = packet.buffer.as_ref();
        let header_len = usize::from(packet.header_len());
        let mut repr = Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            control,
            push: packet.psh(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack().then(|| packet.ack_number()),
            window_len: packet.window_len(),
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; MAX_SACK_BLOCKS],
            timestamp: None,
            payload: &buffer[header_len..],
        };
        for option in Options::new(&buffer[HEADER_LEN..header_len]) {
            match option? {
                TcpOption::EndOfList | TcpOption::NoOperation | TcpOption::Unknown { .. } => {}
                TcpOption::MaxSegmentSize(mss) => repr.max_seg_size = Some(mss),
                TcpOption::WindowScale(shift) => repr.window_scale = Some(shift),
                TcpOption::SackPermitted => repr.sack_permitted = true,
                TcpOption::SackRange(blocks) => repr.sack_ranges = blocks,
                TcpOption::Timestamp { tsval, tsecr } => {
                    repr.timestamp = Some(Timestamp { tsval, tsecr })
                }
            }
        }
        Ok(repr)
    }

    /// Option bytes other than SACK.
    fn fixed_options_len(&self) -> usize {
        self.max_seg_size.map_or(0, |_| 4)
            + self.window_scale.map_or(0, |_| 3)
            + if self.sack_permitted { 2 } else { 0 }
            + self.timestamp.map_or(0, |_| 10)
    }

    /// How many SACK blocks fit beside the other options in 40 bytes.
    fn sack_blocks_emitted(&self) -> usize {
        let wanted = self.sack_ranges.iter().flatten().count();
        let room = (MAX_HEADER_LEN - HEADER_LEN).saturating_sub(self.fixed_options_len());
        wanted.min(room.saturating_sub(2) / 8)
    }

    /// The header length `emit` writes: 20 plus the options, padded to four bytes. SACK
    /// blocks that do not fit in the 40-byte options area are left out (at least two
    /// always fit).
    pub fn header_len(&self) -> usize {
        let sack = match self.sack_blocks_emitted() {
            0 => 0,
            n => 2 + 8 * n,
        };
        HEADER_LEN + pad4(self.fixed_options_len() + sack)
    }

    /// Header plus payload: the exact segment length `emit` needs.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len()
    }

    /// How much sequence space the segment occupies.
    pub fn segment_len(&self) -> usize {
        self.payload.len() + usize::from(matches!(self.control, Control::Syn | Control::Fin))
    }

    /// Writes the segment into `packet`, which must be exactly
    /// [`buffer_len`](Self::buffer_len) bytes since the checksum covers all of it. Options
    /// are written back to back (MSS, window scale, SACK-permitted, timestamps, SACK) and
    /// zero-padded. Fills the checksum if `caps.tcp` says to, and writes zero otherwise.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
        src_addr: Ipv4Addr,
        dst_addr: Ipv4Addr,
        caps: &ChecksumCapabilities,
    ) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_seq_number(self.seq_number);
        packet.set_ack_number(self.ack_number.unwrap_or_default());
        packet.set_window_len(self.window_len);
        packet.set_header_len(self.header_len() as u8);
        packet.clear_flags();
        match self.control {
            Control::None => {}
            Control::Syn => packet.set_syn(true),
            Control::Fin => packet.set_fin(true),
            Control::Rst => packet.set_rst(true),
        }
        packet.set_psh(self.push);
        packet.set_ack(self.ack_number.is_some());
        packet.set_urgent_at(0);

        // The options in this order: MSS, window scale, SACK permitted, timestamps, SACK
        // blocks (as many as fit); each written only if present, so a segment without
        // options (most of them) builds none.
        let area = packet.options_mut();
        let mut at = 0;
        if let Some(mss) = self.max_seg_size {
            at += TcpOption::MaxSegmentSize(mss).emit(&mut area[at..]);
        }
        if let Some(shift) = self.window_scale {
            at += TcpOption::WindowScale(shift).emit(&mut area[at..]);
        }
        if self.sack_permitted {
            at += TcpOption::SackPermitted.emit(&mut area[at..]);
        }
        if let Some(ts) = self.timestamp {
            let option = TcpOption::Timestamp {
                tsval: ts.tsval,
                tsecr: ts.tsecr,
            };
            at += option.emit(&mut area[at..]);
        }
        let kept = self.sack_blocks_emitted();
        if kept > 0 {
            let mut sack: SackBlocks = [None; MAX_SACK_BLOCKS];
            for (slot, block) in sack
                .iter_mut()
                .zip(self.sack_ranges.iter().flatten().take(kept))
            {
                *slot = Some(*block);
            }
            at += TcpOption::SackRange(sack).emit(&mut area[at..]);
        }
        area[at..].fill(kind::END);

        packet.payload_mut()[..self.payload.len()].copy_from_slice(self.payload);
        if caps.tcp.software_fills() {
            packet.fill_checksum(src_addr, dst_addr);
        } else if caps.tcp.software_leaves_partial() {
            let len = u16::try_from(self.buffer_len()).unwrap_or(u16::MAX);
            packet.set_checksum(super::checksum::pseudo_header(
                src_addr,
                dst_addr,
                super::IpProtocol::Tcp.into(),
                len,
            ));
        } else {
            packet.set_checksum(0);
        }
    }
}

/// The header of the common segment, in both directions of an established connection:
/// 20 bytes, no options, no urgent pointer, and flags ACK plus at most PSH and FIN. It is
/// what header prediction (`tcp::state`) reads from a received segment without building
/// a [`Repr`], and what the send path writes from a per-connection template.
///
/// Invariant: `flags` holds [`PlainHeader::ACK`] and nothing outside
/// `ACK | PSH | FIN`; [`parse`](Self::parse) returns only such headers (received, it
/// accepts ACK and PSH only — a FIN goes the general way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlainHeader {
    /// Source port (never 0 when parsed).
    pub src_port: u16,
    /// Destination port (never 0 when parsed).
    pub dst_port: u16,
    /// Sequence number.
    pub seq_number: SeqNumber,
    /// Acknowledgement number (the ACK flag is always set).
    pub ack_number: SeqNumber,
    /// Window field, unscaled.
    pub window_len: u16,
    /// The flags byte.
    pub flags: u8,
}

impl PlainHeader {
    /// The ACK flag.
    pub const ACK: u8 = flag::ACK;
    /// The PSH flag.
    pub const PSH: u8 = flag::PSH;
    /// The FIN flag.
    pub const FIN: u8 = flag::FIN;

    /// The header of `segment` if it is exactly an option-less ACK or ACK+PSH with
    /// nonzero ports (data offset 5, reserved bits and NS clear, no SYN/FIN/RST/URG/ECE/
    /// CWR). Anything else is `None`: the caller parses it as a [`Repr`]. The checksum is
    /// not looked at (the interface checked it). Where it returns `Some`, [`Repr::parse`]
    /// gives the same ports, numbers, window and push flag, `Control::None`, an ACK, and
    /// no options.
    #[inline]
    pub fn parse(segment: &[u8]) -> Option<PlainHeader> {
        let bytes: &[u8; HEADER_LEN] = segment.get(..HEADER_LEN)?.try_into().ok()?;
        let flags = bytes[13];
        if bytes[12] != 0x50 || flags & !flag::PSH != flag::ACK {
            return None;
        }
        let src_port = u16::from_be_bytes([bytes[0], bytes[1]]);
        let dst_port = u16::from_be_bytes([bytes[2], bytes[3]]);
        if src_port == 0 || dst_port == 0 {
            return None;
        }
        Some(PlainHeader {
            src_port,
            dst_port,
            seq_number: SeqNumber(u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]])),
            ack_number: SeqNumber(u32::from_be_bytes([
                bytes[8], bytes[9], bytes[10], bytes[11],
            ])),
            window_len: u16::from_be_bytes([bytes[14], bytes[15]]),
            flags,
        })
    }

    /// Writes the 20 header bytes with a zero checksum: byte for byte what [`Repr::emit`]
    /// writes for [`to_repr`](Self::to_repr) without checksums.
    #[inline]
    pub fn emit(&self, buffer: &mut [u8; HEADER_LEN]) {
        buffer[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        buffer[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        buffer[4..8].copy_from_slice(&self.seq_number.0.to_be_bytes());
        buffer[8..12].copy_from_slice(&self.ack_number.0.to_be_bytes());
        buffer[12] = 0x50;
        buffer[13] = self.flags;
        buffer[14..16].copy_from_slice(&self.window_len.to_be_bytes());
        buffer[16..20].fill(0);
    }

    /// The same header as a [`Repr`] (no options, empty payload).
    pub fn to_repr(&self) -> Repr<'static> {
        Repr {
            src_port: self.src_port,
            dst_port: self.dst_port,
            control: if self.flags & flag::FIN != 0 {
                Control::Fin
            } else {
                Control::None
            },
            push: self.flags & flag::PSH != 0,
            seq_number: self.seq_number,
            ack_number: Some(self.ack_number),
            window_len: self.window_len,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; MAX_SACK_BLOCKS],
            timestamp: None,
            payload: &[],
        }
    }
}

#[cfg(test)]
mod tests;
