//! ebb-net's stack over a real TAP device, against Linux: ping, UDP, DHCP and TCP.
//!
//! Each test creates a network namespace (unique name, deleted on drop even when the
//! test fails), creates a TAP device in this process, moves it into the namespace and
//! configures the Linux side there; the ebb-net `Stack` runs over the TAP device in the
//! test process. Needs root, `/dev/net/tun` and `ip` (iproute2); the ping tests need
//! `ping` (iputils-ping), the UDP test `python3` or `nc` (netcat-openbsd), the DHCP test
//! `dnsmasq` (dnsmasq-base), the TCP echo test (Linux's TCP against ebb-net's
//! `TcpLayer`) `python3`. Without them a test prints `SKIPPED: <test>: <reason>`.
//!
//! Run: `sudo -E cargo test -p ebbflow-tests --test tap -- --nocapture`.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant as StdInstant};

use ebb_core::net::{CloseReason, TcpConnection, TcpHandler};
use ebb_core::{IOBuf, IOBufChain, Instant};
use ebb_net::iface::{DhcpEvent, InterfaceConfig, Ipv4Cidr};
use ebb_net::stack::Stack;
use ebb_net::tcp::{TcpConfig, TcpLayer};
use ebb_net::transport::{TcpInput, TcpOutput};
use ebb_net::wire::EthernetAddress;
use ebb_net_driver::NetDevice;
use ebb_tap::{TapConfig, TapDevice, TapError};

mod common;
use common::{Netns, Reaped, have, namespace, need_namespace_and_tap, unique_name};
use ebb_testkit::{Capability, skip};

/// TCP is not exercised here: segments are counted and dropped.
#[derive(Default)]
struct NoTcp {
    segments: usize,
}

impl TcpInput for NoTcp {
    fn receive(&mut self, _: Instant, _: Ipv4Addr, _: Ipv4Addr, _: IOBuf, _: &mut dyn TcpOutput) {
        self.segments += 1;
    }
    fn poll(&mut self, _: Instant, _: &mut dyn TcpOutput) {}
    fn poll_at(&self) -> Option<Instant> {
        None
    }
}

const EBB_MAC: EthernetAddress = EthernetAddress([0x02, 0xeb, 0xb0, 0, 0, 1]);

/// A namespace with the TAP device's Linux side in it, at `10.199.{net}.1/24`.
struct Setup {
    ns: Netns,
    tap: TapDevice,
    net: u8,
}

impl Setup {
    fn linux_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 199, self.net, 1)
    }

    /// `ip netns exec NS args...`
    fn exec(&self, args: &[&str]) -> Command {
        self.ns.exec(args)
    }
}

/// Creates the namespace and the TAP device, or says why the test must be skipped.
fn setup(test: &str, net: u8, tools: &[&str]) -> Option<Setup> {
    need_namespace_and_tap(test, tools)?;
    let id = unique_name("");
    let tap = match TapDevice::open(&TapConfig::new(format!("ebt{id}"))) {
        Ok(tap) => tap,
        Err(e @ (TapError::NoTunDevice | TapError::PermissionDenied { .. })) => {
            return skip(test, Capability::Tap, &e.to_string());
        }
        Err(e) => panic!("{e}"),
    };
    let ns = namespace(test, format!("ebbtest{id}"));
    let dev = tap.name().to_string();
    ns.adopt(&dev, &format!("10.199.{net}.1/24"));
    Some(Setup { ns, tap, net })
}

/// The stack's clock: nanoseconds since the test started.
struct Clock(StdInstant);

impl Clock {
    fn now(&self) -> Instant {
        Instant::from_nanos(self.0.elapsed().as_nanos() as u64)
    }
}

/// Polls the stack (every 200 µs when idle) until `done` says so or `timeout` passes.
fn drive<T: TcpInput>(
    stack: &mut Stack<TapDevice, T>,
    clock: &Clock,
    timeout: Duration,
    mut done: impl FnMut(&mut Stack<TapDevice, T>, Instant) -> bool,
) -> bool {
    let start = StdInstant::now();
    loop {
        let now = clock.now();
        let next = stack.poll(now);
        if done(stack, now) {
            return true;
        }
        if start.elapsed() > timeout {
            return false;
        }
        // Sleep only when idle; with work left over, poll again at once.
        if next.is_none_or(|at| at > clock.now()) {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Runs the stack until `child` exits; returns whether it succeeded, and its output.
fn drive_until_exit<T: TcpInput>(
    stack: &mut Stack<TapDevice, T>,
    clock: &Clock,
    child: Child,
    timeout: Duration,
) -> (bool, String) {
    let mut child = Reaped(child);
    let mut status = None;
    drive(stack, clock, timeout, |_, _| {
        status = child.0.try_wait().expect("wait for child");
        status.is_some()
    });
    let mut output = String::new();
    if let Some(mut out) = child.0.stdout.take() {
        use std::io::Read;
        let _ = out.read_to_string(&mut output);
    }
    (status.is_some_and(|s| s.success()), output)
}

fn static_stack(setup: Setup) -> (Netns, Stack<TapDevice, NoTcp>, Ipv4Addr, Ipv4Addr) {
    let ebb_ip = Ipv4Addr::new(10, 199, setup.net, 2);
    let linux_ip = setup.linux_ip();
    let config = InterfaceConfig::new_static(EBB_MAC, Ipv4Cidr::new(ebb_ip, 24).unwrap(), None);
    let Setup { ns, tap, .. } = setup;
    (
        ns,
        Stack::new(tap, config, NoTcp::default()),
        ebb_ip,
        linux_ip,
    )
}

#[test]
fn linux_pings_ebb_and_ebb_pings_linux() {
    let Some(setup) = setup("linux_pings_ebb_and_ebb_pings_linux", 1, &["ping"]) else {
        return;
    };
    let ping = setup
        .exec(&["ping", "-c", "3", "-i", "0.2", "-W", "2"])
        .arg(Ipv4Addr::new(10, 199, setup.net, 2).to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ping");
    let (_ns, mut stack, _ebb_ip, linux_ip) = static_stack(setup);
    let clock = Clock(StdInstant::now());
    let (ok, output) = drive_until_exit(&mut stack, &clock, ping, Duration::from_secs(20));
    assert!(
        ok,
        "ping from the namespace failed:\n{output}\n{:?}",
        stack.iface().counters()
    );
    assert!(output.contains("3 received"), "{output}");
    assert!(stack.iface().counters().tx_icmp_echo_replies >= 3);

    // And the other way: the ebb stack pings Linux.
    let mut seq = 0u16;
    let mut last_sent = None;
    let answered = drive(&mut stack, &clock, Duration::from_secs(10), |stack, now| {
        if last_sent
            .is_none_or(|t: Instant| now.saturating_duration_since(t) > Duration::from_millis(200))
        {
            seq += 1;
            let _ = stack
                .iface_mut()
                .send_ping(now, linux_ip, 0xebb, seq, b"ping from ebb");
            last_sent = Some(now);
        }
        std::iter::from_fn(|| stack.iface_mut().next_echo_reply())
            .any(|r| r.src == linux_ip && r.ident == 0xebb)
    });
    assert!(
        answered,
        "no echo reply from Linux: {:?}",
        stack.iface().counters()
    );
    println!("counters: {:?}", stack.iface().counters());
    println!("device: {:?}", stack.device().counters());
    // Every frame was read into (or copied into) a frame-sized buffer from the pool;
    // once the stack dropped a frame, its buffer came back instead of a fresh one.
    let pool = stack.device().frame_buffer_counts();
    let frames = stack.device().counters().rx_frames;
    println!("frame buffers: {pool:?} for {frames} frames");
    assert!(pool.recycled > 0, "{pool:?}");
    assert!(pool.allocated < frames, "{pool:?} for {frames} frames");
}

/// A UDP client in the namespace: sends `hello ebb` and prints the reply.
fn udp_client(setup: &Setup, dst: Ipv4Addr, port: u16) -> Option<Command> {
    if have("python3") {
        let script = format!(
            "import socket,sys\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             s.settimeout(1.0)\n\
             for _ in range(10):\n\
             \x20   s.sendto(b'hello ebb',('{dst}',{port}))\n\
             \x20   try:\n\
             \x20       data,src=s.recvfrom(2048)\n\
             \x20       print(data.decode(), src[0], src[1]); sys.exit(0)\n\
             \x20   except socket.timeout:\n\
             \x20       pass\n\
             sys.exit(1)\n"
        );
        let mut c = setup.exec(&["python3", "-c", &script]);
        c.stdout(Stdio::piped());
        Some(c)
    } else if have("nc") {
        let mut c = setup.exec(&[
            "sh",
            "-c",
            &format!("printf 'hello ebb' | nc -u -w 3 {dst} {port}"),
        ]);
        c.stdout(Stdio::piped());
        Some(c)
    } else {
        None
    }
}

#[test]
fn udp_datagram_from_linux_is_answered() {
    let test = "udp_datagram_from_linux_is_answered";
    let Some(setup) = setup(test, 2, &[]) else {
        return;
    };
    let ebb_ip = Ipv4Addr::new(10, 199, setup.net, 2);
    let Some(mut client) = udp_client(&setup, ebb_ip, 7777) else {
        skip::<()>(
            test,
            Capability::tool("python3"),
            "neither `python3` nor `nc` is installed",
        );
        return;
    };
    let child = client.spawn().expect("spawn UDP client");
    let (_ns, mut stack, _, linux_ip) = static_stack(setup);
    let socket = stack.iface_mut().udp_bind(7777).unwrap();
    let clock = Clock(StdInstant::now());
    let mut child = Reaped(child);
    let mut requests = 0;
    let mut status = None;
    drive(&mut stack, &clock, Duration::from_secs(20), |stack, now| {
        while let Ok(Some(d)) = stack.iface_mut().udp_recv(socket) {
            assert_eq!(d.payload.as_slice(), b"hello ebb");
            assert_eq!(*d.src.ip(), linux_ip);
            requests += 1;
            let mut reply: Vec<u8> = d.payload.as_slice().to_vec();
            reply.reverse();
            let chain: IOBufChain = [IOBuf::copy_from_slice(b"echo: "), IOBuf::from_vec(reply)]
                .into_iter()
                .collect();
            stack
                .iface_mut()
                .udp_send_to(now, socket, d.src, chain)
                .unwrap();
        }
        status = child.0.try_wait().unwrap();
        status.is_some()
    });
    let mut output = String::new();
    if let Some(mut out) = child.0.stdout.take() {
        use std::io::Read;
        let _ = out.read_to_string(&mut output);
    }
    assert!(
        requests >= 1,
        "no datagram reached the ebb socket: {:?}",
        stack.iface().counters()
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "client failed: {output}"
    );
    assert!(
        output.contains("echo: bbe olleh"),
        "reply not received: {output:?}"
    );
}

#[test]
fn dhcp_lease_from_dnsmasq_then_ping() {
    let test = "dhcp_lease_from_dnsmasq_then_ping";
    let Some(setup) = setup(test, 3, &["dnsmasq", "ping"]) else {
        return;
    };
    let dev = setup.tap.name().to_string();
    let net = setup.net;
    let lease_file = format!("/tmp/{}.leases", setup.ns.name);
    let dnsmasq = setup
        .exec(&[
            "dnsmasq",
            "--no-daemon",
            "--conf-file=/dev/null",
            "--port=0",
            "--bind-interfaces",
            &format!("--interface={dev}"),
            &format!("--dhcp-range=10.199.{net}.50,10.199.{net}.60,255.255.255.0,2m"),
            &format!("--dhcp-option=option:router,10.199.{net}.1"),
            &format!("--dhcp-leasefile={lease_file}"),
            "--pid-file=",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn dnsmasq");
    let mut dnsmasq = Reaped(dnsmasq);
    let Setup { ns, tap, .. } = setup;
    let mut stack = Stack::new(tap, InterfaceConfig::new_dhcp(EBB_MAC), NoTcp::default());
    let clock = Clock(StdInstant::now());
    let mut lease = None;
    let bound = drive(&mut stack, &clock, Duration::from_secs(30), |stack, _| {
        while let Some(event) = stack.iface_mut().next_dhcp_event() {
            if let DhcpEvent::Bound(l) = event {
                lease = Some(l);
            }
        }
        lease.is_some()
    });
    if !bound {
        let _ = dnsmasq.0.kill();
        let mut err = String::new();
        if let Some(mut e) = dnsmasq.0.stderr.take() {
            use std::io::Read;
            let _ = e.read_to_string(&mut err);
        }
        panic!(
            "no lease: state {:?}, counters {:?}\ndnsmasq: {err}",
            stack.iface().dhcp_state(),
            stack.iface().counters()
        );
    }
    let lease = lease.unwrap();
    let addr = lease.cidr.address();
    assert!(
        (50..=60).contains(&addr.octets()[3]) && addr.octets()[..3] == [10, 199, net],
        "{lease:?}"
    );
    assert_eq!(lease.cidr.prefix_len(), 24);
    assert_eq!(lease.router, Some(Ipv4Addr::new(10, 199, net, 1)));
    assert_eq!(stack.iface().ipv4_address(), Some(addr));
    println!("leased {} from {}", lease.cidr, lease.server);

    let mut ping = Command::new("ip");
    ping.args([
        "netns", "exec", &ns.name, "ping", "-c", "2", "-i", "0.2", "-W", "2",
    ])
    .arg(addr.to_string())
    .stdout(Stdio::piped());
    let (ok, output) = drive_until_exit(
        &mut stack,
        &clock,
        ping.spawn().unwrap(),
        Duration::from_secs(20),
    );
    assert!(ok, "ping of the leased address failed:\n{output}");
    let _ = std::fs::remove_file(&lease_file);
    drop(dnsmasq);
    drop(ns);
}

/// Echoes every byte back on the same connection, zero copy: the received slice of the
/// frame is what is sent.
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
fn tcp_echo_with_linux_over_tap() {
    let test = "tcp_echo_with_linux_over_tap";
    let Some(setup) = setup(test, 4, &["python3"]) else {
        return;
    };
    let ebb_ip = Ipv4Addr::new(10, 199, setup.net, 2);
    const BYTES: usize = 1 << 20;
    // Linux's TCP sends 1 MiB and reads the echo back concurrently, then checks it.
    let script = format!(
        "import socket,sys,threading\n\
         data=bytes((i*7+i//251)&255 for i in range({BYTES}))\n\
         s=socket.create_connection(('{ebb_ip}',7),timeout=20)\n\
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
    let mut client = setup.exec(&["python3", "-c", &script]);
    client.stdout(Stdio::piped()).stderr(Stdio::piped());
    let linux_ip = setup.linux_ip();
    let config = InterfaceConfig::new_static(EBB_MAC, Ipv4Cidr::new(ebb_ip, 24).unwrap(), None);
    let Setup { ns: _ns, tap, .. } = setup;
    let tcp = TcpLayer::new(TcpConfig::default());
    tcp.listen(SocketAddrV4::new(ebb_ip, 7), 8, |conn| {
        conn.set_handler(Echo)
    })
    .expect("listen");
    let mut stack = Stack::new(tap, config, tcp);
    let clock = Clock(StdInstant::now());
    let started = StdInstant::now();
    let (ok, output) = drive_until_exit(
        &mut stack,
        &clock,
        client.spawn().unwrap(),
        Duration::from_secs(60),
    );
    let elapsed = started.elapsed();
    println!("{output}");
    println!("1 MiB echoed in {elapsed:?} with {linux_ip}");
    println!("tcp: {:?}", stack.tcp().counters());
    println!("iface: {:?}", stack.iface().counters());
    assert!(ok, "echo through the ebb TCP stack failed: {output}");
    assert!(
        output.contains(&format!("received {BYTES} equal True")),
        "{output}"
    );
}
