//! ebb-net's stack over an AF_XDP device (ebb-xdp) on a veth pair, against Linux in a
//! namespace on the other end: ping and a TCP echo.
//!
//! The veth's Linux end has its transmit checksum offload off (ebb-testkit's
//! `VethPair`): through XDP a partial checksum is not flagged. Needs root, `ip`,
//! `ethtool`, and `ping` / `python3`; without them a test prints
//! `SKIPPED: <test>: <reason>`.
//!
//! Run: `sudo -E cargo test -p ebbflow-tests --test xdp -- --nocapture`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant as StdInstant};

use ebb_core::net::{CloseReason, TcpConnection, TcpHandler};
use ebb_core::{IOBuf, IOBufChain, Instant};
use ebb_net::iface::{InterfaceConfig, Ipv4Cidr};
use ebb_net::stack::Stack;
use ebb_net::tcp::{TcpConfig, TcpLayer};
use ebb_net::transport::TcpInput;
use ebb_net::wire::EthernetAddress;
use ebb_testkit::veth::{VethPair, need_veth};
use ebb_xdp::{XdpConfig, XdpDevice};

mod common;
use common::Reaped;

const EBB_MAC: EthernetAddress = EthernetAddress([0x02, 0xeb, 0xb0, 0, 0, 2]);

/// A veth pair, Linux at `10.198.{net}.1/24`, and the device on our end; ebb-net at
/// `10.198.{net}.2`.
fn setup(test: &str, net: u8, tools: &[&str]) -> Option<(VethPair, XdpDevice)> {
    need_veth(test, tools)?;
    let veth = VethPair::create(test, "ex", &format!("10.198.{net}.1/24"));
    let mut config = XdpConfig::new(veth.device.clone());
    // EBB_XDP_COPY=1: received frames copied, not lent (to compare the two).
    config.lend_received = std::env::var_os("EBB_XDP_COPY").is_none();
    let device = XdpDevice::open(&config).unwrap_or_else(|e| panic!("{test}: {e}"));
    Some((veth, device))
}

fn config(net: u8) -> InterfaceConfig {
    let ip = Ipv4Addr::new(10, 198, net, 2);
    InterfaceConfig::new_static(EBB_MAC, Ipv4Cidr::new(ip, 24).unwrap(), None)
}

/// Polls the stack until `child` exits (busy while there is work, 100 µs naps when
/// idle); whether it succeeded, and its output.
fn drive_until_exit<T: TcpInput>(
    stack: &mut Stack<XdpDevice, T>,
    child: Child,
    timeout: Duration,
) -> (bool, String) {
    let start = StdInstant::now();
    let now = || Instant::from_nanos(start.elapsed().as_nanos() as u64);
    let mut child = Reaped(child);
    let status = loop {
        let next = stack.poll(now());
        if let Some(status) = child.0.try_wait().expect("wait for child") {
            break Some(status);
        }
        if start.elapsed() > timeout {
            break None;
        }
        if next.is_none_or(|at| at > now()) && !stack.device().has_received() {
            std::thread::sleep(Duration::from_micros(100));
        }
    };
    use std::io::Read;
    let mut output = String::new();
    if let Some(mut out) = child.0.stdout.take() {
        let _ = out.read_to_string(&mut output);
    }
    if let Some(mut err) = child.0.stderr.take() {
        let _ = err.read_to_string(&mut output);
    }
    (status.is_some_and(|s| s.success()), output)
}

/// Ignores TCP (the ping test).
struct NoTcp;

impl TcpInput for NoTcp {
    fn receive(
        &mut self,
        _: Instant,
        _: Ipv4Addr,
        _: Ipv4Addr,
        _: IOBuf,
        _: &mut dyn ebb_net::transport::TcpOutput,
    ) {
    }
    fn poll(&mut self, _: Instant, _: &mut dyn ebb_net::transport::TcpOutput) {}
    fn poll_at(&self) -> Option<Instant> {
        None
    }
}

#[test]
fn linux_pings_ebb_net_over_af_xdp() {
    let test = "linux_pings_ebb_net_over_af_xdp";
    let Some((veth, device)) = setup(test, 1, &["ping"]) else {
        return;
    };
    let mut stack = Stack::new(device, config(1), NoTcp);
    let mut ping = veth
        .ns
        .exec(&["ping", "-c", "20", "-i", "0.05", "-W", "2", "10.198.1.2"]);
    ping.stdout(Stdio::piped()).stderr(Stdio::piped());
    let (ok, output) = drive_until_exit(&mut stack, ping.spawn().unwrap(), Duration::from_secs(20));
    println!("{output}");
    let stats = stack.device_mut().stats();
    println!("xdp: {stats:?}");
    assert!(ok, "{test}: ping failed:\n{output}");
    assert!(output.contains("20 received"), "{output}");
    assert_eq!(stats.bad_descriptors, 0);
    if std::env::var_os("EBB_XDP_COPY").is_none() {
        assert!(stats.rx_lent > 0, "{stats:?}");
    }
}

/// Echoes every byte back on the same connection.
struct Echo;

impl TcpHandler for Echo {
    fn receive(&mut self, conn: &dyn TcpConnection, data: IOBuf) {
        conn.send(IOBufChain::from(data)).expect("echo send");
    }
    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        conn.close();
    }
    fn closed(&mut self, _reason: CloseReason) {}
}

#[test]
fn tcp_echo_with_linux_over_af_xdp() {
    let test = "tcp_echo_with_linux_over_af_xdp";
    let Some((veth, device)) = setup(test, 2, &["python3"]) else {
        return;
    };
    let ebb_ip = Ipv4Addr::new(10, 198, 2, 2);
    const BYTES: usize = 4 << 20;
    // Linux's TCP sends 4 MiB and reads the echo back concurrently, then checks it. Its
    // socket timeout (50 s) stays under the drive's 60 s bound: 20 s failed once in 16
    // runs on a machine busy building.
    let script = format!(
        "import socket,sys,threading\n\
         data=bytes((i*7+i//251)&255 for i in range({BYTES}))\n\
         s=socket.create_connection(('{ebb_ip}',7),timeout=50)\n\
         def send():\n\
         \x20   s.sendall(data); s.shutdown(socket.SHUT_WR)\n\
         t=threading.Thread(target=send); t.start()\n\
         got=bytearray()\n\
         while True:\n\
         \x20   b=s.recv(65536)\n\
         \x20   if not b: break\n\
         \x20   got+=b\n\
         t.join()\n\
         print('received', len(got), 'equal', bytes(got)==data)\n\
         sys.exit(0 if bytes(got)==data else 1)\n"
    );
    let mut client = veth.ns.exec(&["python3", "-c", &script]);
    client.stdout(Stdio::piped()).stderr(Stdio::piped());
    let tcp = TcpLayer::new(TcpConfig::default());
    tcp.listen(SocketAddrV4::new(ebb_ip, 7), 8, |conn| {
        conn.set_handler(Echo)
    })
    .expect("listen");
    let mut stack = Stack::new(device, config(2), tcp);
    let started = StdInstant::now();
    let (ok, output) =
        drive_until_exit(&mut stack, client.spawn().unwrap(), Duration::from_secs(60));
    let elapsed = started.elapsed();
    println!("{output}");
    println!("4 MiB echoed in {elapsed:?}");
    println!("tcp: {:?}", stack.tcp().counters());
    let stats = stack.device_mut().stats();
    println!("xdp: {stats:?}");
    assert!(ok, "{test}: echo failed: {output}");
    assert!(
        output.contains(&format!("received {BYTES} equal True")),
        "{output}"
    );
    assert_eq!(stats.bad_descriptors, 0);
    if std::env::var_os("EBB_XDP_COPY").is_none() {
        assert!(stats.rx_lent > 0, "{stats:?}");
    }
}
