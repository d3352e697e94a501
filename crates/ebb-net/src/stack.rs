//! [`Stack`]: the driver a runtime polls. It owns one device queue, the [`Interface`]
//! on it and the TCP layer, and moves frames between them in [`Stack::poll`].
//!
//! One `poll(now)`:
//!
//! 1. receives up to [`StackConfig::rx_batches`] batches of
//!    [`max_burst`](ebb_net_driver::DeviceCapabilities::max_burst) frames from the device and
//!    hands each to the interface (which hands TCP segments to TCP);
//! 2. runs the interface's timers (ARP, DHCP) and TCP's (`TcpInput::poll`, when frames
//!    arrived or its `poll_at` is due — which TCP makes `ZERO` after the application
//!    acted on a connection);
//! 3. gives the transmit queue to the device, which takes what it can;
//! 4. returns when it wants to be called again: the earliest of the interface's, TCP's
//!    and the device's deadlines, or `now` if work is left over (more frames waiting
//!    in the device, frames the device could not take yet, TCP output held back).
//!
//! **Transmit back-pressure.** The interface's transmit queue is bounded; TCP checks its
//! room ([`TcpOutput::transmit_room`](crate::transport::TcpOutput::transmit_room)) before
//! each segment and stops when it is full instead of having segments refused and treated
//! as lost ([`TcpInput::transmit_blocked`]). The stack then polls TCP again as soon as the
//! device has taken frames: within the same `poll` while the device takes everything (up
//! to `rx_batches` extra rounds), else on the next `poll`, which it asks for by returning
//! `now`.
//!
//! A runtime calls it from an idle handler (busy polling) or when the device's fd is
//! readable, and at the deadline it returns. The receive `Vec` is reused from poll to
//! poll, so the steady state allocates nothing here.
//!
//! Generic over the device and over TCP, so it runs with the real TCP layer and with a
//! test double.

use alloc::boxed::Box;
use alloc::vec::Vec;

use ebb_core::Instant;
use ebb_net_driver::{NetDevice, RxFrame};

use crate::iface::{Interface, InterfaceConfig};
use crate::transport::TcpInput;

/// How much one [`Stack::poll`] does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StackConfig {
    /// Receive batches per poll before timers and transmission get their turn (at
    /// least 1); more waiting makes `poll` return `now`.
    pub rx_batches: usize,
}

impl Default for StackConfig {
    fn default() -> Self {
        Self { rx_batches: 4 }
    }
}

/// Multi-core stacks: decides, for each frame the device received, whether this core
/// processes it (see [`crate::steering`]). Frames for other cores are taken out of the
/// batch (and handed to them, which is the implementation's business); frames to be
/// processed here as well as elsewhere are copied (an `IOBuf` clone shares the bytes).
/// A frame keeps its [`FrameChecksum`](ebb_net_driver::FrameChecksum) wherever it goes, so a frame the device verified
/// is not verified again on the core that processes it.
pub trait FrameSteering {
    /// Leaves in `frames` exactly the frames to process here, in their order.
    fn steer(&mut self, frames: &mut Vec<RxFrame>);
}

/// The optional steering hook (a newtype so the stack stays `Debug`).
struct Steering(Option<Box<dyn FrameSteering>>);

impl core::fmt::Debug for Steering {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

/// A device, the interface on it and the TCP layer: see the module docs.
#[derive(Debug)]
pub struct Stack<D: NetDevice, T: TcpInput> {
    device: D,
    iface: Interface,
    tcp: T,
    rx: Vec<RxFrame>,
    /// Frames other cores steered here, processed at the start of the next poll.
    injected: Vec<RxFrame>,
    steering: Steering,
    config: StackConfig,
    /// The device's `max_burst` (at least 1), read once like the rest of its
    /// capabilities (the interface keeps those): asking the device every poll copied the
    /// whole struct through a dynamic call.
    burst: usize,
}

impl<D: NetDevice, T: TcpInput> Stack<D, T> {
    /// A stack on `device` with an interface configured by `config` and `tcp` above it.
    pub fn new(device: D, config: InterfaceConfig, tcp: T) -> Self {
        let caps = device.capabilities();
        Self {
            iface: Interface::new(config, caps),
            rx: Vec::with_capacity(caps.max_burst.max(1)),
            injected: Vec::new(),
            steering: Steering(None),
            device,
            tcp,
            config: StackConfig::default(),
            burst: caps.max_burst.max(1),
        }
    }

    /// The same stack with `config`.
    pub fn with_config(self, config: StackConfig) -> Self {
        Self { config, ..self }
    }

    /// Makes this one core's stack of a multi-core stack: every frame the device
    /// receives passes `steering` before the interface sees it.
    pub fn set_steering(&mut self, steering: Box<dyn FrameSteering>) {
        self.steering = Steering(Some(steering));
    }

    /// Frames another core's steering sent here, with what their device said of their
    /// checksums: processed, without steering them again, at the start of the next
    /// [`poll`](Self::poll) (call it soon).
    pub fn inject(&mut self, frames: impl IntoIterator<Item = RxFrame>) {
        self.injected.extend(frames);
    }

    /// Whether injected frames wait for a poll.
    pub fn has_injected(&self) -> bool {
        !self.injected.is_empty()
    }

    /// The interface (addresses, counters, UDP sockets, DHCP state).
    pub fn iface(&self) -> &Interface {
        &self.iface
    }

    /// The interface, mutably (to bind and use UDP sockets).
    pub fn iface_mut(&mut self) -> &mut Interface {
        &mut self.iface
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// The TCP layer.
    pub fn tcp(&self) -> &T {
        &self.tcp
    }

    /// The TCP layer, mutably.
    pub fn tcp_mut(&mut self) -> &mut T {
        &mut self.tcp
    }

    /// The TCP layer and the interface's output together, for acting on a connection
    /// outside `poll` (the application sending data) without waiting for the next poll.
    pub fn tcp_and_output(&mut self) -> (&mut T, &mut crate::iface::IpOutput) {
        (&mut self.tcp, self.iface.output())
    }

    /// Does everything due at `now` (see the module docs) and returns when to call
    /// again (`None`: only when the device has frames).
    pub fn poll(&mut self, now: Instant) -> Option<Instant> {
        let burst = self.burst;
        let mut more_rx = false;
        let mut received = self.injected.len();
        if received > 0 {
            self.iface
                .receive_batch(now, &mut self.injected, &mut self.tcp);
        }
        for _ in 0..self.config.rx_batches.max(1) {
            let n = self.device.receive(now, &mut self.rx, burst);
            if let Some(steering) = self.steering.0.as_mut() {
                // Frames for other cores leave with their `FrameChecksum`.
                steering.steer(&mut self.rx);
            }
            self.iface.receive_batch(now, &mut self.rx, &mut self.tcp);
            received += n;
            more_rx = n >= burst;
            if !more_rx {
                break;
            }
        }
        self.iface.poll(now);
        // TCP's poll visits connections: only after input, when it asked for it, or when
        // output stopped on a full transmit queue (back-pressure) last time.
        if received > 0
            || self.tcp.transmit_blocked()
            || self.tcp.poll_at().is_some_and(|at| at <= now)
        {
            self.tcp.poll(now, self.iface.output());
        }
        self.transmit(now);
        // TCP filled the queue and the device took it all: let TCP go on in this same poll
        // rather than a whole round later (bounded, so receive gets its turn).
        for _ in 0..self.config.rx_batches {
            if !self.tcp.transmit_blocked() || !self.iface.transmit_queue().is_empty() {
                break;
            }
            self.tcp.poll(now, self.iface.output());
            self.transmit(now);
        }

        if more_rx || !self.iface.transmit_queue().is_empty() || self.tcp.transmit_blocked() {
            return Some(now);
        }
        // Plain comparisons: an array's `flatten().min()` cost about 50 instructions a
        // poll (one a request at one connection).
        earliest(
            earliest(self.iface.poll_at(), self.tcp.poll_at()),
            self.device.poll_at(),
        )
    }

    /// Hands the transmit queue to the device, which takes what it can; each frame
    /// carries the state of its checksum (see [`TxFrame`](ebb_net_driver::TxFrame)).
    fn transmit(&mut self, now: Instant) {
        self.device.transmit(now, self.iface.transmit_queue());
    }
}

/// The earlier of two optional deadlines (`None`: no deadline).
#[inline]
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    //! Two stacks joined by an in-memory link (directly and through a fault injector),
    //! with a TCP double: ARP, ping and UDP both ways.

    use core::net::{Ipv4Addr, SocketAddrV4};
    use core::time::Duration;

    use ebb_core::{IOBuf, IOBufChain, Instant};

    use super::*;
    use crate::iface::Ipv4Cidr;
    use crate::transport::TcpOutput;
    use crate::wire::EthernetAddress;
    use alloc::collections::VecDeque;
    use ebb_net_driver::{FaultConfig, FaultInjector, FrameChecksum, Link, Probability, TxFrame};

    const MAC_A: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0xa]);
    const MAC_B: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0xb]);
    const IP_A: Ipv4Addr = Ipv4Addr::new(192, 168, 7, 1);
    const IP_B: Ipv4Addr = Ipv4Addr::new(192, 168, 7, 2);

    /// TCP that only counts what it is given.
    #[derive(Default)]
    struct CountingTcp {
        segments: usize,
        polls: usize,
    }

    impl TcpInput for CountingTcp {
        fn receive(
            &mut self,
            _: Instant,
            _: Ipv4Addr,
            _: Ipv4Addr,
            _: IOBuf,
            _: &mut dyn TcpOutput,
        ) {
            self.segments += 1;
        }
        fn poll(&mut self, _: Instant, _: &mut dyn TcpOutput) {
            self.polls += 1;
        }
        fn poll_at(&self) -> Option<Instant> {
            None
        }
    }

    fn config(mac: EthernetAddress, ip: Ipv4Addr) -> InterfaceConfig {
        InterfaceConfig::new_static(mac, Ipv4Cidr::new(ip, 24).unwrap(), None)
    }

    fn stacks<D: NetDevice>(a: D, b: D) -> (Stack<D, CountingTcp>, Stack<D, CountingTcp>) {
        (
            Stack::new(a, config(MAC_A, IP_A), CountingTcp::default()),
            Stack::new(b, config(MAC_B, IP_B), CountingTcp::default()),
        )
    }

    /// Polls both stacks every millisecond from `*now` for `ms` milliseconds.
    fn run<D: NetDevice>(
        a: &mut Stack<D, CountingTcp>,
        b: &mut Stack<D, CountingTcp>,
        now: &mut Instant,
        ms: u64,
    ) {
        for _ in 0..ms {
            a.poll(*now);
            b.poll(*now);
            *now = *now + Duration::from_millis(1);
        }
    }

    /// Pings `to` from `from` once every 50 ms until a reply arrives (at most 100
    /// tries); returns the tries it took.
    fn ping_until_answered<D: NetDevice>(
        from: &mut Stack<D, CountingTcp>,
        to: &mut Stack<D, CountingTcp>,
        dst: Ipv4Addr,
        now: &mut Instant,
    ) -> u16 {
        for seq in 1..=100u16 {
            // Unresolved next hop with a full wait queue: try again later.
            let _ = from
                .iface_mut()
                .send_ping(*now, dst, 7, seq, b"ebbflow ping");
            run(from, to, now, 50);
            while let Some(reply) = from.iface_mut().next_echo_reply() {
                if reply.src == dst && reply.ident == 7 {
                    return seq;
                }
            }
        }
        panic!("no echo reply from {dst} in 100 tries");
    }

    #[test]
    fn arp_then_ping_both_ways() {
        let (a, b) = Link::new().connect();
        let (mut a, mut b) = stacks(a, b);
        let mut now = Instant::ZERO;
        run(&mut a, &mut b, &mut now, 1);
        assert_eq!(a.iface().counters().tx_arp_gratuitous, 1);

        assert_eq!(ping_until_answered(&mut a, &mut b, IP_B, &mut now), 1);
        assert_eq!(a.iface().arp_lookup(IP_B), Some(MAC_B));
        assert_eq!(
            b.iface().arp_lookup(IP_A),
            Some(MAC_A),
            "learnt from the request"
        );
        assert_eq!(ping_until_answered(&mut b, &mut a, IP_A, &mut now), 1);
        assert_eq!(b.iface().counters().tx_arp_requests, 0, "already known");
        for s in [&a, &b] {
            let c = s.iface().counters();
            assert_eq!(c.rx_dropped.total(), 0, "{c:?}");
            assert_eq!(c.tx_dropped.total(), 0, "{c:?}");
            assert_eq!((c.tx_icmp_echo_replies, c.rx_icmp_echo_replies), (1, 1));
            assert!(s.tcp().polls > 0, "TCP is polled after input");
        }
        // Idle: the next deadline is the ARP entries' expiry, a minute after learning.
        let next = a.poll(now).unwrap();
        assert!(next > now && next <= now + Duration::from_secs(60));
    }

    #[test]
    fn udp_datagrams_both_ways() {
        let (a, b) = Link::new().connect();
        let (mut a, mut b) = stacks(a, b);
        let sa = a.iface_mut().udp_bind(0).unwrap();
        let sb = b.iface_mut().udp_bind(5000).unwrap();
        let port_a = a.iface_mut().udp_local_port(sa).unwrap();
        let mut now = Instant::ZERO;
        let payload: IOBufChain = [
            IOBuf::copy_from_slice(b"request "),
            IOBuf::copy_from_slice(b"in two pieces"),
        ]
        .into_iter()
        .collect();
        a.iface_mut()
            .udp_send_to(now, sa, SocketAddrV4::new(IP_B, 5000), payload)
            .unwrap();
        run(&mut a, &mut b, &mut now, 5);
        let got = b.iface_mut().udp_recv(sb).unwrap().expect("delivered");
        assert_eq!(got.payload.as_slice(), b"request in two pieces");
        assert_eq!(got.src, SocketAddrV4::new(IP_A, port_a));
        // The reply goes back to where the request came from.
        let reply = IOBufChain::from(IOBuf::copy_from_slice(b"reply"));
        b.iface_mut().udp_send_to(now, sb, got.src, reply).unwrap();
        run(&mut a, &mut b, &mut now, 5);
        let back = a
            .iface_mut()
            .udp_recv(sa)
            .unwrap()
            .expect("reply delivered");
        assert_eq!(back.payload.as_slice(), b"reply");
        assert_eq!(back.src, SocketAddrV4::new(IP_B, 5000));
        assert_eq!(a.tcp().segments + b.tcp().segments, 0);
    }

    #[test]
    fn ping_and_udp_through_a_lossy_link() {
        let faults = FaultConfig::NONE
            .with_drop(Probability::from_percent(20))
            .with_corrupt(Probability::from_percent(10))
            .with_duplicate(Probability::from_percent(5))
            .with_delay(
                Probability::from_percent(30),
                Duration::from_millis(1),
                Duration::from_millis(20),
            )
            .with_reorder(Probability::from_percent(10), Duration::from_millis(5));
        let (a, b) = Link::new().connect();
        let a = FaultInjector::new(a, 1).with_rx_faults(faults);
        let b = FaultInjector::new(b, 2).with_rx_faults(faults);
        let (mut a, mut b) = stacks(a, b);
        let mut now = Instant::ZERO;
        ping_until_answered(&mut a, &mut b, IP_B, &mut now);
        ping_until_answered(&mut b, &mut a, IP_A, &mut now);

        let sa = a.iface_mut().udp_bind(4000).unwrap();
        let sb = b.iface_mut().udp_bind(5000).unwrap();
        let mut delivered = [false; 2];
        for _ in 0..100 {
            if !delivered[0] {
                let msg = IOBufChain::from(IOBuf::copy_from_slice(b"to b"));
                let _ = a
                    .iface_mut()
                    .udp_send_to(now, sa, SocketAddrV4::new(IP_B, 5000), msg);
            }
            if !delivered[1] {
                let msg = IOBufChain::from(IOBuf::copy_from_slice(b"to a"));
                let _ = b
                    .iface_mut()
                    .udp_send_to(now, sb, SocketAddrV4::new(IP_A, 4000), msg);
            }
            run(&mut a, &mut b, &mut now, 30);
            while let Some(d) = b.iface_mut().udp_recv(sb).unwrap() {
                assert_eq!(
                    d.payload.as_slice(),
                    b"to b",
                    "corruption caught by checksums"
                );
                delivered[0] = true;
            }
            while let Some(d) = a.iface_mut().udp_recv(sa).unwrap() {
                assert_eq!(
                    d.payload.as_slice(),
                    b"to a",
                    "corruption caught by checksums"
                );
                delivered[1] = true;
            }
            if delivered == [true, true] {
                break;
            }
        }
        assert_eq!(delivered, [true, true]);
        let injected = a.device().stats().rx.dropped + b.device().stats().rx.dropped;
        assert!(injected > 0, "the link did drop frames");
    }

    /// A NIC with per-frame checksum offload on a link: it completes partial checksums
    /// on transmit (counting them) and marks every received frame verified.
    struct Offloading<D> {
        inner: D,
        completed: usize,
    }

    impl<D: NetDevice> NetDevice for Offloading<D> {
        fn capabilities(&self) -> ebb_net_driver::DeviceCapabilities {
            let mut caps = self.inner.capabilities();
            caps.checksum.tcp = ebb_net_driver::ChecksumOffload::PARTIAL;
            caps.checksum.udp = ebb_net_driver::ChecksumOffload::PARTIAL;
            caps
        }
        fn receive(&mut self, now: Instant, out: &mut Vec<RxFrame>, max: usize) -> usize {
            let from = out.len();
            let n = self.inner.receive(now, out, max);
            for frame in &mut out[from..] {
                frame.checksum = FrameChecksum::Verified;
            }
            n
        }
        fn transmit(&mut self, now: Instant, frames: &mut VecDeque<TxFrame>) -> usize {
            for frame in frames.iter_mut() {
                if matches!(frame.checksum, FrameChecksum::Partial { .. }) {
                    frame.complete();
                    self.completed += 1;
                }
            }
            self.inner.transmit(now, frames)
        }
        fn counters(&self) -> ebb_net_driver::DeviceCounters {
            self.inner.counters()
        }
    }

    fn udp_exchange<D: NetDevice>(
        a: &mut Stack<D, CountingTcp>,
        b: &mut Stack<D, CountingTcp>,
        now: &mut Instant,
        rounds: usize,
    ) -> usize {
        let sa = a.iface_mut().udp_bind(4000).unwrap();
        let sb = b.iface_mut().udp_bind(5000).unwrap();
        let mut delivered = 0;
        for _ in 0..rounds {
            let msg = IOBufChain::from(IOBuf::copy_from_slice(b"offloaded datagram"));
            let _ = a
                .iface_mut()
                .udp_send_to(*now, sa, SocketAddrV4::new(IP_B, 5000), msg);
            run(a, b, now, 5);
            while let Some(d) = b.iface_mut().udp_recv(sb).unwrap() {
                assert_eq!(d.payload.as_slice(), b"offloaded datagram");
                delivered += 1;
            }
        }
        delivered
    }

    #[test]
    fn partial_checksums_go_to_the_device_and_verified_frames_are_trusted() {
        let (a, b) = Link::new().connect();
        let wrap = |inner| Offloading {
            inner,
            completed: 0,
        };
        let (mut a, mut b) = stacks(wrap(a), wrap(b));
        let mut now = Instant::ZERO;
        ping_until_answered(&mut a, &mut b, IP_B, &mut now);
        assert_eq!(udp_exchange(&mut a, &mut b, &mut now, 10), 10);
        assert_eq!(a.device().completed, 10, "only the UDP frames are partial");
        assert_eq!(a.iface().counters().tx_checksum_partial, 10);
        let c = b.iface().counters();
        assert!(c.rx_checksum_trusted >= 10, "{c:?}");
        assert_eq!(c.rx_dropped.total(), 0, "{c:?}");
    }

    /// Steering that sends every UDP frame to another core (`outbox`) and keeps the rest.
    struct UdpToOtherCore(alloc::rc::Rc<core::cell::RefCell<Vec<RxFrame>>>);

    impl FrameSteering for UdpToOtherCore {
        fn steer(&mut self, frames: &mut Vec<RxFrame>) {
            let mut outbox = self.0.borrow_mut();
            frames.retain(|frame| {
                let udp = frame.buf.as_slice().get(23) == Some(&17);
                if udp {
                    outbox.push(frame.clone());
                }
                !udp
            });
        }
    }

    #[test]
    fn steered_frames_keep_what_the_device_said_of_their_checksums() {
        // B's queue verifies checksums (every frame it receives is marked verified) and
        // its steering sends UDP to B2, another core's stack of the same interface. B2
        // trusts those frames as B would have: the mark travels with the frame. (Before
        // frames carried their state, a steering stack took frames through a plain
        // `receive` and every one arrived `Complete`, to be verified again.)
        let (a, b) = Link::new().connect();
        let wrap = |inner| Offloading {
            inner,
            completed: 0,
        };
        let (mut a, mut b) = stacks(wrap(a), wrap(b));
        let (other_queue, _) = Link::new().connect();
        let mut b2 = Stack::new(
            wrap(other_queue),
            config(MAC_B, IP_B),
            CountingTcp::default(),
        );
        let outbox = alloc::rc::Rc::new(core::cell::RefCell::new(Vec::new()));
        b.set_steering(Box::new(UdpToOtherCore(outbox.clone())));
        let mut now = Instant::ZERO;
        ping_until_answered(&mut a, &mut b, IP_B, &mut now);
        let sa = a.iface_mut().udp_bind(4000).unwrap();
        let sb2 = b2.iface_mut().udp_bind(5000).unwrap();
        let trusted_before = b2.iface().counters().rx_checksum_trusted;
        for _ in 0..10 {
            let msg = IOBufChain::from(IOBuf::copy_from_slice(b"steered datagram"));
            a.iface_mut()
                .udp_send_to(now, sa, SocketAddrV4::new(IP_B, 5000), msg)
                .unwrap();
        }
        run(&mut a, &mut b, &mut now, 5);
        let steered: Vec<RxFrame> = outbox.borrow_mut().drain(..).collect();
        assert_eq!(steered.len(), 10);
        assert!(
            steered
                .iter()
                .all(|frame| frame.checksum == FrameChecksum::Verified),
            "steering keeps each frame's checksum state"
        );
        b2.inject(steered);
        b2.poll(now);
        let mut delivered = 0;
        while let Some(d) = b2.iface_mut().udp_recv(sb2).unwrap() {
            assert_eq!(d.payload.as_slice(), b"steered datagram");
            delivered += 1;
        }
        assert_eq!(delivered, 10);
        let c = b2.iface().counters();
        assert_eq!(c.rx_checksum_trusted - trusted_before, 10, "{c:?}");
    }

    #[test]
    fn a_frame_completed_in_software_and_left_queued_is_not_completed_twice() {
        // The injector (no faults) completes the partial checksums of every queued frame
        // and takes one per call (the link's burst); the stack must not mark the rest
        // partial again, or their checksums are completed twice and arrive wrong.
        let (a, b) = Link::new().with_max_burst(1).connect();
        let wrap = |inner, seed| {
            FaultInjector::new(
                Offloading {
                    inner,
                    completed: 0,
                },
                seed,
            )
        };
        let (mut a, mut b) = stacks(wrap(a, 1), wrap(b, 2));
        let mut now = Instant::ZERO;
        ping_until_answered(&mut a, &mut b, IP_B, &mut now);
        let sa = a.iface_mut().udp_bind(4000).unwrap();
        let sb = b.iface_mut().udp_bind(5000).unwrap();
        for _ in 0..10 {
            let msg = IOBufChain::from(IOBuf::copy_from_slice(b"queued behind a burst of 1"));
            a.iface_mut()
                .udp_send_to(now, sa, SocketAddrV4::new(IP_B, 5000), msg)
                .unwrap();
        }
        run(&mut a, &mut b, &mut now, 40);
        let mut delivered = 0;
        while let Some(d) = b.iface_mut().udp_recv(sb).unwrap() {
            assert_eq!(d.payload.as_slice(), b"queued behind a burst of 1");
            delivered += 1;
        }
        let c = b.iface().counters();
        assert_eq!(c.rx_dropped.udp_bad_checksum, 0, "{c:?}");
        assert_eq!(delivered, 10);
    }

    #[test]
    fn corruption_behind_an_offloading_device_is_still_caught() {
        // The injector sits between the stack and the offloading device, as
        // `--net-faults` does: it makes every frame's checksum complete before it
        // faults it, so what it corrupts is never marked verified nor completed over
        // the corrupted bytes.
        // Past the Ethernet and IPv4 headers: every flip lands in the UDP datagram.
        let all = FaultConfig::NONE
            .with_corrupt(Probability::from_percent(100))
            .with_corrupt_offset(34);
        for (rx, tx) in [(true, false), (false, true)] {
            let (a, b) = Link::new().connect();
            let wrap = |inner, seed| {
                let offloading = Offloading {
                    inner,
                    completed: 0,
                };
                FaultInjector::new(offloading, seed)
            };
            let (mut a, mut b) = stacks(wrap(a, 1), wrap(b, 2));
            let mut now = Instant::ZERO;
            ping_until_answered(&mut a, &mut b, IP_B, &mut now);
            // Faults from now on: the stacks were built seeing the device's offload.
            if rx {
                b.device_mut().set_rx_faults(all);
            }
            if tx {
                a.device_mut().set_tx_faults(all);
            }
            assert_eq!(
                udp_exchange(&mut a, &mut b, &mut now, 20),
                0,
                "rx {rx} tx {tx}"
            );
            assert!(a.iface().counters().tx_checksum_partial >= 20);
            assert_eq!(
                a.device().inner().completed,
                0,
                "completed before corruption"
            );
            let c = b.iface().counters();
            assert!(c.rx_dropped.udp_bad_checksum > 0, "{c:?}");
        }
    }
}
