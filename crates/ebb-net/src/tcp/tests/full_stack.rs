//! The whole stack: two [`Stack`]s (interface + this TCP) over `ebb_net_driver::Link`, through the
//! fault-injecting device wrapper — ARP, IPv4, checksums and TCP together.

use super::transfer::{Bulk, Progress, stream};
use super::*;
use crate::iface::{InterfaceConfig, Ipv4Cidr};
use crate::stack::Stack;
use crate::wire::EthernetAddress;
use ebb_net_driver::{FaultConfig, FaultInjector, Link, NetDevice, Probability};

const MAC_A: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0xa]);
const MAC_B: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 0xb]);
const IP_A: Ipv4Addr = Ipv4Addr::new(192, 168, 7, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(192, 168, 7, 2);

fn iface(mac: EthernetAddress, ip: Ipv4Addr) -> InterfaceConfig {
    InterfaceConfig::new_static(mac, Ipv4Cidr::new(ip, 24).expect("cidr"), None)
}

/// A listens on :80, B connects; each sends `len` bytes, B closes first. Returns the
/// simulated time taken and both stacks (their devices' counters).
fn transfer<D: NetDevice>(
    a_dev: D,
    b_dev: D,
    len: usize,
) -> (Duration, Stack<D, TcpLayer>, Stack<D, TcpLayer>) {
    let la = TcpLayer::new(TcpConfig {
        isn_seed: [5, 6],
        ..TcpConfig::default()
    });
    let lb = TcpLayer::new(TcpConfig {
        isn_seed: [7, 8],
        ..TcpConfig::default()
    });
    let mut a = Stack::new(a_dev, iface(MAC_A, IP_A), la.clone());
    let mut b = Stack::new(b_dev, iface(MAC_B, IP_B), lb.clone());
    let pa: Rc<Progress> = Rc::default();
    let pb: Rc<Progress> = Rc::default();
    {
        let pa = pa.clone();
        la.listen(
            SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 80),
            4,
            move |conn| {
                conn.set_handler(Bulk {
                    peer: 2,
                    progress: pa.clone(),
                });
                conn.send(stream(1, len)).expect("send");
            },
        )
        .expect("listen");
    }
    {
        let pb = pb.clone();
        lb.connect(
            SocketAddrV4::new(IP_B, 0),
            SocketAddrV4::new(IP_A, 80),
            move |result| {
                let conn = result.expect("connected");
                conn.set_handler(Bulk {
                    peer: 1,
                    progress: pb.clone(),
                });
                conn.send(stream(2, len)).expect("send");
                conn.close();
            },
        )
        .expect("connect");
    }
    let mut now = Instant::ZERO;
    let limit = Instant::ZERO + Duration::from_secs(600);
    let mut spins = 0;
    while now < limit && (pa.closed.get().is_none() || pb.closed.get().is_none()) {
        let next_a = a.poll(now);
        let next_b = b.poll(now);
        let next = [next_a, next_b].into_iter().flatten().min();
        let step = now + Duration::from_millis(1);
        match next {
            Some(t) if t <= now && spins < 10_000 => spins += 1,
            Some(t) => {
                now = t.clamp(now + Duration::from_micros(10), step);
                spins = 0;
            }
            None => {
                now = step;
                spins = 0;
            }
        }
    }
    assert!(!pa.corrupt.get() && !pb.corrupt.get(), "bytes differ");
    assert_eq!((pa.received.get(), pb.received.get()), (len, len));
    assert_eq!(pa.closed.get(), Some(CloseReason::Normal));
    assert_eq!(pb.closed.get(), Some(CloseReason::Normal));
    (now - Instant::ZERO, a, b)
}

#[test]
fn two_megabytes_each_way_over_a_link() {
    let (a, b) = Link::new().connect();
    let (took, _, _) = transfer(a, b, 2_000_000);
    std::eprintln!("clean link: {took:?} simulated");
}

#[test]
fn two_megabytes_each_way_through_faults() {
    let faults = FaultConfig::NONE
        .with_drop(Probability::from_percent(2))
        .with_corrupt(Probability::from_percent(1))
        .with_duplicate(Probability::from_percent(1))
        .with_reorder(Probability::from_percent(2), Duration::from_millis(5));
    let (a, b) = Link::new().connect();
    let a = FaultInjector::new(a, 1).with_rx_faults(faults);
    let b = FaultInjector::new(b, 2).with_rx_faults(faults);
    let (took, a, b) = transfer(a, b, 2_000_000);
    let (fa, fb) = (a.device().stats().rx, b.device().stats().rx);
    std::eprintln!(
        "2% drop, 1% corrupt, 1% dup, 2% reorder: {took:?} simulated; faults {fa:?} {fb:?}"
    );
    // The transfer above passes over a clean link too: it shows the faults were survived
    // only if they were made — on both sides, of every kind asked for.
    for f in [fa, fb] {
        assert!(
            f.dropped > 0 && f.corrupted > 0 && f.duplicated > 0 && f.reordered > 0,
            "the injector did not make every fault asked for: {f:?}"
        );
    }
}
