//! Multi-core steering: `FlowDirectory::steer` reads the headers of any frame a queue
//! receives. Whatever the bytes, it must not panic, and its answer must be consistent
//! with the directory: an owned four-tuple goes to its owner, a frame steered to another
//! core names a core of the stack, and asking from the chosen core answers `Here`.
#![no_main]

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use ebb_core::CoreId;
use ebb_core::rcu::RcuDomain;
use ebb_net::steering::{FlowDirectory, Placement, Steer};
use ebb_net::tcp::{ConnectionDirectory, FourTuple};
use libfuzzer_sys::fuzz_target;

const CORES: u32 = 3;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the receiving core and the port 80 policy; the rest is the
    // frame.
    let Some((&control, frame)) = data.split_first() else {
        return;
    };
    let here = CoreId(u32::from(control) % CORES);
    let directory = Arc::new(FlowDirectory::new(
        Arc::new(RcuDomain::new(CORES as usize)),
        (0..CORES).map(CoreId).collect(),
    ));
    let placement = match control >> 4 {
        0 => Placement::AcceptingCore,
        1 => Placement::Hashed,
        2 => Placement::Core(CoreId(u32::from(control >> 2) % (CORES + 1))),
        _ => Placement::Chosen(|tuple, cores| usize::from(tuple.remote.port()) % cores),
    };
    directory.set_placement(80, placement);
    // Own whatever four-tuple the frame would have if it is TCP/IPv4 from offset 14
    // (claimed by core 2), so the owner path is exercised too.
    let tuple = (frame.len() >= 38).then(|| FourTuple {
        local: SocketAddrV4::new(
            Ipv4Addr::new(frame[30], frame[31], frame[32], frame[33]),
            u16::from_be_bytes([frame[36], frame[37]]),
        ),
        remote: SocketAddrV4::new(
            Ipv4Addr::new(frame[26], frame[27], frame[28], frame[29]),
            u16::from_be_bytes([frame[34], frame[35]]),
        ),
    });
    let owner = CoreId(2);
    if control & 1 == 1
        && let Some(tuple) = &tuple
    {
        assert!(directory.claims_for(owner).claim(tuple));
    }
    match directory.steer(here, frame) {
        Steer::Here | Steer::Everywhere => {}
        Steer::To(core) => {
            assert_ne!(core, here, "steered to itself");
            assert!(directory.cores().contains(&core), "steered outside the stack");
            assert_eq!(
                directory.steer(core, frame),
                Steer::Here,
                "the chosen core keeps it"
            );
        }
    }
});
