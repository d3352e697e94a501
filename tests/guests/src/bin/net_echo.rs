//! A TCP echo server on port 7 over ebb-net on virtio-net: probes the device, runs the
//! network runtime (one queue pair per core) at 10.0.2.15/24 via 10.0.2.2 (QEMU's and
//! passt's user network), and echoes every byte until the VM is stopped.
//!
//! Prints `net_echo: accepted on core N` for every connection (the core that owns it), so
//! a test can tell that both queue pairs served connections. The command line may set
//! `idle_poll_us=N`: how long an idle core polls before it sleeps in the WAIT hypercall
//! (the runtime's default, 50 µs, when absent), and `stats_ms=N`: print every core's
//! stack counters (device, interface drops, TCP, runner) every N ms, for diagnosis.
#![no_std]
#![no_main]

extern crate alloc;

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::net::Ipv4Addr;
use core::time::Duration;
use ebb_core::IOBuf;
use ebb_core::net::{CloseReason, TcpConnection, TcpHandler};
use ebb_native::println;
use ebb_net::iface::Ipv4Cidr;
use ebb_netstack::{AddressConfig, NetStack, NetStackConfig, Placement, SendableDevice};

struct Echo;

impl TcpHandler for Echo {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        let _ = conn.send(data.into());
    }
    fn closed(&mut self, _reason: CloseReason) {}
}

async fn main() -> i32 {
    let cores = ebb_core::event::num_cores() as u16;
    let net = match ebb_native::virtio::open(cores) {
        Ok(net) => net,
        Err(e) => {
            println!("net_echo: {e}");
            return 1;
        }
    };
    let pairs = net.pairs.len();
    let devices: Vec<SendableDevice> = net
        .pairs
        .into_iter()
        .map(|p| Box::new(p) as SendableDevice)
        .collect();
    let address = AddressConfig::Static {
        cidr: Ipv4Cidr::new(Ipv4Addr::new(10, 0, 2, 15), 24).expect("a /24"),
        gateway: Some(Ipv4Addr::new(10, 0, 2, 2)),
    };
    let seed = ebb_native::arch::rdtsc();
    let mut config = NetStackConfig::new(address, [seed, seed.rotate_left(17) ^ 0x5a5a]);
    config.mac.0 = net.mac;
    let stack = match NetStack::start(devices, config) {
        Ok(s) => s,
        Err(e) => {
            println!("net_echo: {e}");
            return 1;
        }
    };
    if let Err(e) = stack.ready().await {
        println!("net_echo: {e}");
        return 1;
    }
    let listening = stack
        .listen_on_every_core(7, Placement::AcceptingCore, |conn| {
            println!(
                "net_echo: accepted on core {}",
                ebb_core::event::core_id().0
            );
            conn.set_handler(Echo)
        })
        .await;
    if let Err(e) = listening {
        println!("net_echo: cannot listen: {e}");
        return 1;
    }
    println!("net_echo: listening on 10.0.2.15:7 ({pairs} queue pairs)");
    let Some(every) = stats_interval() else {
        return core::future::pending::<i32>().await;
    };
    loop {
        ebb_core::event::sleep(every).await;
        for (core, counters) in stack.counters_per_core().await {
            match counters {
                Ok(c) => println!(
                    "net_echo: core {} device rx {} tx {} iface rx {} tx {} drops {:?} \
                     tcp {:?} runner {:?}",
                    core.0,
                    c.device.rx_frames,
                    c.device.tx_frames,
                    c.interface.rx_frames,
                    c.interface.tx_frames,
                    c.interface.rx_dropped,
                    c.tcp,
                    c.runner
                ),
                Err(e) => println!("net_echo: core {}: {e}", core.0),
            }
        }
    }
}

/// `stats_ms=N` from the command line: print every core's counters every N ms.
fn stats_interval() -> Option<Duration> {
    ebb_native::cmdline()
        .split_whitespace()
        .find_map(|arg| arg.strip_prefix("stats_ms="))
        .and_then(|ms| ms.parse().ok())
        .map(Duration::from_millis)
}

/// `idle_poll_us=N` from the command line, if given.
fn idle_poll() -> Option<Duration> {
    ebb_native::cmdline()
        .split_whitespace()
        .find_map(|arg| arg.strip_prefix("idle_poll_us="))
        .and_then(|us| us.parse().ok())
        .map(Duration::from_micros)
}

fn start() -> i32 {
    let mut config = ebb_native::runtime::Config::default();
    if let Some(window) = idle_poll() {
        config.idle_poll = window;
    }
    ebb_native::runtime::run_with(config, main)
}

ebb_native::entry!(start, ebb_native::runtime::secondary);
