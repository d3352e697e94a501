//! Transmit back-pressure: one TCP poll may want to send more segments than the
//! interface's transmit queue holds (1024 frames). Those segments must wait for room, not
//! be refused and later retransmitted: on a clean link a bulk transfer shows no output
//! errors, no transmit-queue drops and no retransmissions.
//!
//! The link is as deep as a TAP device's kernel queue (100 000 frames), so only the
//! interface's own queue can fill; the receiver's 4 MiB window lets the sender's
//! congestion window grow far past 1024 segments. Public API only (found by the TAP
//! interop tests: a clean 100 MB curl saw up to 2 207 retransmissions).

use std::cell::Cell;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;
use std::time::Duration;

use ebb_core::net::{CloseReason, TcpConnection, TcpHandler};
use ebb_core::{IOBuf, IOBufChain, Instant};
use ebb_net::iface::{InterfaceConfig, Ipv4Cidr};
use ebb_net::stack::Stack;
use ebb_net::tcp::{TcpConfig, TcpLayer};
use ebb_net::wire::EthernetAddress;
use ebb_net_driver::Link;

/// Counts received bytes.
struct CountBytes(Rc<Cell<usize>>);

impl TcpHandler for CountBytes {
    fn receive(&mut self, _: &dyn TcpConnection, data: IOBuf) {
        self.0.set(self.0.get() + data.len());
    }
    fn closed(&mut self, _: CloseReason) {}
}

/// Ignores everything (the sender expects nothing back).
struct Quiet;

impl TcpHandler for Quiet {
    fn receive(&mut self, _: &dyn TcpConnection, _: IOBuf) {}
    fn closed(&mut self, _: CloseReason) {}
}

fn interface(mac: u8, ip: Ipv4Addr) -> InterfaceConfig {
    let cidr = Ipv4Cidr::new(ip, 24).expect("a /24 is a valid prefix");
    InterfaceConfig::new_static(EthernetAddress([2, 0, 0, 0, 0, mac]), cidr, None)
}

#[test]
fn clean_link_bulk_transfer_has_no_output_errors() {
    const LEN: usize = 20 << 20;
    let ip_a = Ipv4Addr::new(192, 168, 7, 1);
    let ip_b = Ipv4Addr::new(192, 168, 7, 2);
    let (device_a, device_b) = Link::new().with_capacity(100_000).connect();
    let layer_a = TcpLayer::new(TcpConfig {
        isn_seed: [1, 2],
        ..TcpConfig::default()
    });
    let layer_b = TcpLayer::new(TcpConfig {
        isn_seed: [3, 4],
        receive_window: 4 << 20,
        ..TcpConfig::default()
    });
    let mut a = Stack::new(device_a, interface(0xa, ip_a), layer_a.clone());
    let mut b = Stack::new(device_b, interface(0xb, ip_b), layer_b.clone());

    let received = Rc::new(Cell::new(0));
    let counter = received.clone();
    layer_b
        .listen(
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80),
            4,
            move |conn| conn.set_handler(CountBytes(counter.clone())),
        )
        .expect("port 80 is free");
    layer_a
        .connect(
            SocketAddrV4::new(ip_a, 0),
            SocketAddrV4::new(ip_b, 80),
            |result| {
                let conn = result.expect("the handshake completes on a clean link");
                conn.set_handler(Quiet);
                conn.send(IOBufChain::from(IOBuf::from_vec(vec![7u8; LEN])))
                    .expect("a fresh connection accepts data");
            },
        )
        .expect("connect starts");

    let mut now = Instant::ZERO;
    for _ in 0..200_000 {
        a.poll(now);
        b.poll(now);
        now = now + Duration::from_micros(20);
        if received.get() == LEN {
            break;
        }
    }
    assert_eq!(received.get(), LEN);
    let tcp = layer_a.counters();
    println!("sender TCP: {tcp:?}");
    assert_eq!(
        tcp.output_errors, 0,
        "segments refused by a full interface queue on a clean link"
    );
    assert_eq!(tcp.retransmissions, 0);
    assert!(
        tcp.transmit_blocked > 0,
        "the window outgrew the transmit queue, so back-pressure must have been met"
    );
    assert_eq!(a.iface().counters().tx_dropped.tx_queue_full, 0);
}
