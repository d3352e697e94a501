//! Segment-level tests of the TCP layer: a recording [`TcpOutput`], hand-built peer
//! segments fed at chosen instants, and assertions on the exact segments sent.

mod data;
mod fast_path;
mod full_stack;
mod fuzz;
mod icmp;
mod states;
mod timers;
mod transfer;

use alloc::boxed::Box;
use alloc::rc::Rc;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::net::{Ipv4Addr, SocketAddrV4};
use core::time::Duration;

use ebb_core::Instant;
use ebb_core::iobuf::IOBuf;
use ebb_core::net::{CloseReason, TcpConnection, TcpErrorKind, TcpHandler};

use super::{TcpConfig, TcpConn, TcpLayer};
use crate::transport::{OutputError, TcpInput, TcpOutput, TcpSegment};
use crate::wire::checksum::ChecksumCapabilities;
use crate::wire::tcp::{Control, Packet, Repr, SeqNumber};

/// Our address.
pub(super) const US: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// The peer's address.
pub(super) const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub(super) const US_PORT: u16 = 80;
pub(super) const PEER_PORT: u16 = 40000;
/// The MSS the recording output reports (IP MTU 1500 - 40).
pub(super) const MSS: usize = 1460;
/// The peer's initial sequence number in every test.
pub(super) const PEER_ISS: u32 = 1_000_000;

/// Records every segment; can be told to refuse.
#[derive(Default)]
pub(super) struct Recorder {
    pub(super) segments: Vec<TcpSegment>,
    pub(super) refuse: bool,
}

impl TcpOutput for Recorder {
    fn send_tcp(&mut self, segment: TcpSegment) -> Result<(), OutputError> {
        if self.refuse {
            return Err(OutputError::Busy);
        }
        self.segments.push(segment);
        Ok(())
    }

    fn max_segment_size(&self, _dst: Ipv4Addr) -> usize {
        MSS
    }
}

/// What a recording handler saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ev {
    Receive(Vec<u8>),
    PeerClosed,
    WindowIncreased,
    Closed(CloseReason),
}

pub(super) type Log = Rc<RefCell<Vec<Ev>>>;

/// A handler that logs every event and does nothing else (it does not close on FIN).
pub(super) struct Logger(pub(super) Log);

impl TcpHandler for Logger {
    fn receive(&mut self, _conn: &dyn TcpConnection, data: IOBuf) {
        self.0
            .borrow_mut()
            .push(Ev::Receive(data.as_slice().to_vec()));
    }
    fn send_window_increased(&mut self, _conn: &dyn TcpConnection) {
        self.0.borrow_mut().push(Ev::WindowIncreased);
    }
    fn peer_closed(&mut self, _conn: &dyn TcpConnection) {
        self.0.borrow_mut().push(Ev::PeerClosed);
    }
    fn closed(&mut self, reason: CloseReason) {
        self.0.borrow_mut().push(Ev::Closed(reason));
    }
}

/// Instant `ms` milliseconds after the epoch.
pub(super) fn ms(ms: u64) -> Instant {
    Instant::from_nanos(ms * 1_000_000)
}

/// A segment from the peer, no options.
pub(super) fn peer_seg(
    seq: u32,
    ack: Option<u32>,
    control: Control,
    payload: &'static [u8],
) -> Repr<'static> {
    Repr {
        src_port: PEER_PORT,
        dst_port: US_PORT,
        control,
        push: false,
        seq_number: SeqNumber(seq),
        ack_number: ack.map(SeqNumber),
        window_len: 65535,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 4],
        timestamp: None,
        payload,
    }
}

/// The peer's SYN with MSS 1460, window scale 7 and SACK-permitted (like Linux).
pub(super) fn peer_syn() -> Repr<'static> {
    Repr {
        window_scale: Some(7),
        max_seg_size: Some(1460),
        sack_permitted: true,
        ..peer_seg(PEER_ISS, None, Control::Syn, &[])
    }
}

/// Serializes a segment (no checksum: the layer's input is past checksum checks).
pub(super) fn bytes_of(repr: &Repr<'_>) -> IOBuf {
    let mut v = alloc::vec![0u8; repr.buffer_len()];
    let mut packet = Packet::new_unchecked(&mut v[..]);
    repr.emit(&mut packet, PEER, US, &ChecksumCapabilities::ALL);
    IOBuf::from_vec(v)
}

/// A sent segment's header and payload, as one buffer the other side can parse.
pub(super) fn wire_bytes(segment: &TcpSegment) -> IOBuf {
    let payload = segment.payload.to_vec();
    let repr = Repr {
        payload: &payload,
        ..segment.header
    };
    let mut v = alloc::vec![0u8; repr.buffer_len()];
    let mut packet = Packet::new_unchecked(&mut v[..]);
    repr.emit(
        &mut packet,
        segment.src,
        segment.dst,
        &ChecksumCapabilities::ALL,
    );
    IOBuf::from_vec(v)
}

/// One layer under test, the clock, and what it sent.
pub(super) struct Harness {
    pub(super) layer: TcpLayer,
    pub(super) out: Recorder,
    pub(super) now: Instant,
    pub(super) log: Log,
    /// Connections accepted (or connected) so far.
    pub(super) conns: Rc<RefCell<Vec<TcpConn>>>,
    pub(super) connect_results: Rc<RefCell<Vec<Result<(), TcpErrorKind>>>>,
}

impl Harness {
    pub(super) fn new(config: TcpConfig) -> Harness {
        Harness {
            layer: TcpLayer::new(config),
            out: Recorder::default(),
            now: Instant::ZERO,
            log: Rc::default(),
            conns: Rc::default(),
            connect_results: Rc::default(),
        }
    }

    /// Default config but with delayed ACKs off, so every ACK is immediate.
    pub(super) fn quick_acks() -> Harness {
        Harness::new(TcpConfig {
            delayed_ack: None,
            ..TcpConfig::default()
        })
    }

    /// Listens on port 80; accepted connections get a [`Logger`].
    pub(super) fn listen(&mut self, backlog: usize) {
        let log = self.log.clone();
        let conns = self.conns.clone();
        self.layer
            .listen(SocketAddrV4::new(US, US_PORT), backlog, move |conn| {
                conn.set_handler(Logger(log.clone()));
                conns.borrow_mut().push(conn);
            })
            .expect("listen");
    }

    /// Connects from port 80 to the peer; the connection gets a [`Logger`].
    pub(super) fn connect(&mut self) {
        let log = self.log.clone();
        let conns = self.conns.clone();
        let results = self.connect_results.clone();
        self.layer
            .connect(
                SocketAddrV4::new(US, US_PORT),
                SocketAddrV4::new(PEER, PEER_PORT),
                move |result| match result {
                    Ok(conn) => {
                        conn.set_handler(Logger(log.clone()));
                        conns.borrow_mut().push(conn);
                        results.borrow_mut().push(Ok(()));
                    }
                    Err(e) => results.borrow_mut().push(Err(e)),
                },
            )
            .expect("connect");
    }

    /// Feeds a peer segment at the current time.
    pub(super) fn input(&mut self, repr: Repr<'_>) {
        let buf = bytes_of(&repr);
        self.input_buf(buf);
    }

    /// Hands `buf` to the layer and polls after it, as the stack driver does after each
    /// batch of received segments (acknowledgements of delivered data go out then, and
    /// whatever the application's callbacks asked for).
    pub(super) fn input_buf(&mut self, buf: IOBuf) {
        self.layer.receive(self.now, PEER, US, buf, &mut self.out);
        self.poll();
    }

    /// Polls at the current time.
    pub(super) fn poll(&mut self) {
        self.layer.poll(self.now, &mut self.out);
    }

    /// Moves the clock to `t` and polls if anything is due by then (repeatedly, as a
    /// driver would).
    pub(super) fn advance_to(&mut self, t: Instant) {
        while let Some(due) = self.layer.poll_at() {
            if due > t {
                break;
            }
            self.now = self.now.max(due);
            self.poll();
        }
        self.now = t;
    }

    pub(super) fn advance(&mut self, d: Duration) {
        let t = self.now + d;
        self.advance_to(t);
    }

    /// Takes the segments sent so far.
    pub(super) fn take(&mut self) -> Vec<TcpSegment> {
        core::mem::take(&mut self.out.segments)
    }

    /// Takes exactly one sent segment.
    pub(super) fn take_one(&mut self) -> TcpSegment {
        let mut segments = self.take();
        assert_eq!(segments.len(), 1, "expected one segment, got {segments:#?}");
        segments.remove(0)
    }

    pub(super) fn events(&self) -> Vec<Ev> {
        core::mem::take(&mut *self.log.borrow_mut())
    }

    pub(super) fn conn(&self) -> TcpConn {
        self.conns.borrow().last().cloned().expect("a connection")
    }

    /// Passive open with the peer's SYN (options as Linux): returns our ISS.
    pub(super) fn accept_connection(&mut self) -> u32 {
        self.listen(8);
        self.accept_connection_on_existing_listener()
    }

    /// The handshake with a listener already in place: returns our ISS.
    pub(super) fn accept_connection_on_existing_listener(&mut self) -> u32 {
        self.input(peer_syn());
        let syn_ack = self.take_one();
        let iss = syn_ack.header.seq_number.0;
        self.input(peer_seg(PEER_ISS + 1, Some(iss + 1), Control::None, &[]));
        assert!(self.take().is_empty(), "no answer to the handshake's ACK");
        iss
    }
}

/// Asserts a segment's control, sequence and acknowledgement numbers and payload length.
#[track_caller]
pub(super) fn check(
    segment: &TcpSegment,
    control: Control,
    seq: u32,
    ack: Option<u32>,
    len: usize,
) {
    let h = &segment.header;
    assert_eq!(
        (
            h.control,
            h.seq_number.0,
            h.ack_number.map(|a| a.0),
            segment.payload.len()
        ),
        (control, seq, ack, len),
        "segment {segment:#?}"
    );
    assert_eq!((h.src_port, h.dst_port), (US_PORT, PEER_PORT));
    assert_eq!((segment.src, segment.dst), (US, PEER));
}

type OnReceive = Box<dyn FnMut(&dyn TcpConnection, IOBuf)>;
type OnConn = Box<dyn FnMut(&dyn TcpConnection)>;

/// A boxed handler from closures, for tests that act inside callbacks.
pub(super) struct FnHandler {
    pub(super) on_receive: OnReceive,
    pub(super) on_window: OnConn,
    pub(super) on_peer_closed: OnConn,
    pub(super) on_closed: Box<dyn FnMut(CloseReason)>,
}

impl FnHandler {
    pub(super) fn new() -> FnHandler {
        FnHandler {
            on_receive: Box::new(|_, _| {}),
            on_window: Box::new(|_| {}),
            on_peer_closed: Box::new(|c| c.close()),
            on_closed: Box::new(|_| {}),
        }
    }
}

impl TcpHandler for FnHandler {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        (self.on_receive)(conn, data)
    }
    fn send_window_increased(&mut self, conn: &dyn TcpConnection) {
        (self.on_window)(conn)
    }
    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        (self.on_peer_closed)(conn)
    }
    fn closed(&mut self, reason: CloseReason) {
        (self.on_closed)(reason)
    }
}
