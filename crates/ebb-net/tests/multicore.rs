//! Connection ownership across cores, as far as it is ebb-net's own: the
//! `FlowDirectory`'s claims. A core's TCP layer, given the directory's claims for its
//! core, must not open a connection whose tuple another core already holds — a SYN it
//! reaches through a steering decision made before the claim was visible is dropped and
//! counted, not doubled.
//!
//! The rest of multi-core operation (steering frames between cores' stacks, placement,
//! handlers on the owning core, the directory emptied after TIME-WAIT) is the runtime's
//! and is tested on the real runtime, in virtual time, by
//! `crates/ebb-netstack/tests/multicore.rs`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::rc::Rc;
use std::sync::Arc;

use ebb_core::iobuf::IOBuf;
use ebb_core::net::{CloseReason, TcpConnection, TcpHandler};
use ebb_core::rcu::RcuDomain;
use ebb_core::{CoreId, Instant};
use ebb_net::iface::{InterfaceConfig, Ipv4Cidr};
use ebb_net::stack::Stack;
use ebb_net::steering::FlowDirectory;
use ebb_net::tcp::{ConnectionDirectory, FourTuple, TcpConfig, TcpLayer};
use ebb_net::wire::EthernetAddress;
use ebb_net_driver::{Link, RxFrame};

const US: Ipv4Addr = Ipv4Addr::new(10, 9, 1, 1);
const PEER: Ipv4Addr = Ipv4Addr::new(10, 9, 1, 2);
const OUR_PORT: u16 = 80;

fn mac(last: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 0, 9, 1, last])
}

/// Accepts nothing it should not: any connection is a failure of the test.
struct Unexpected;

impl TcpHandler for Unexpected {
    fn receive(&mut self, _: &dyn TcpConnection, _: IOBuf) {}
    fn closed(&mut self, _: CloseReason) {}
}

#[test]
fn a_syn_for_a_connection_another_core_holds_is_dropped_not_doubled() {
    let directory = Arc::new(FlowDirectory::new(
        Arc::new(RcuDomain::new(2)),
        vec![CoreId(0), CoreId(1)],
    ));
    // Core 1's stack, listening on our port as every core of a multi-core stack does.
    let tcp = TcpLayer::new(TcpConfig {
        isn_seed: [11, !11],
        ..TcpConfig::default()
    });
    tcp.set_directory(Rc::new(directory.claims_for(CoreId(1))));
    let (ours, _theirs) = Link::new().connect();
    let cidr = Ipv4Cidr::new(US, 24).expect("valid /24");
    let mut stack = Stack::new(
        ours,
        InterfaceConfig::new_static(mac(1), cidr, None),
        tcp.clone(),
    );
    tcp.listen(
        SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, OUR_PORT),
        64,
        |conn| conn.set_handler(Unexpected),
    )
    .expect("listen");

    let tuple = FourTuple {
        local: SocketAddrV4::new(US, OUR_PORT),
        remote: SocketAddrV4::new(PEER, 40_000),
    };
    // Core 0 holds the tuple (as if it had just accepted the first copy of the SYN).
    assert!(directory.claims_for(CoreId(0)).claim(&tuple));
    // A copy of that SYN reaches core 1's layer directly (a steering decision made
    // before the claim was visible).
    stack.inject([RxFrame::new(syn_frame(40_000))]);
    stack.poll(Instant::ZERO);
    let c = tcp.counters();
    assert_eq!(c.dropped_owned_elsewhere, 1, "{c:?}");
    assert_eq!(tcp.connection_count(), 0);
    assert_eq!(directory.owner(&tuple), Some(CoreId(0)), "still core 0's");
}

/// A SYN from the peer's port `port` to our port, as the peer's stack would send it.
fn syn_frame(port: u16) -> IOBuf {
    ebb_net::testing::syn_frame(
        mac(2),
        mac(1),
        SocketAddrV4::new(PEER, port),
        SocketAddrV4::new(US, OUR_PORT),
    )
}
