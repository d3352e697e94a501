#!/usr/bin/env bash
# AF_XDP probe (research for issue 23; docs/notes/af-xdp-research.md): a UDP echo over a
# veth pair, served three ways in the same run, alternated round by round:
#   udp-block - a kernel UDP socket, blocking recv
#   udp-spin  - a kernel UDP socket, non-blocking recv in a loop (busy, like xsk-spin)
#   xsk-spin  - an AF_XDP socket on the veth's root end (native XDP, copy mode), its
#               rings polled in a loop, one TX kick (sendto) per batch; the frame is
#               echoed from its own UMEM chunk (addresses and ports swapped in place)
#   xsk-poll  - the same, sleeping in poll() when the RX ring is empty
# The client is a kernel UDP socket in a namespace (CPU 0), one 64-byte datagram in
# flight; servers run on CPU 1. Prints round trips per second, latency and CPU per round
# trip from /proc/stat (user, system, softirq on each CPU; a spinning server's CPU is
# 100% busy by construction, so compare its system + softirq time).
#
# The probe is built in a scratch folder from the listing below: xdpilone (rings, UMEM;
# pure Rust) and aya (loads and attaches the redirect program through a bpf_link, which
# the kernel detaches when the process dies); the program is six BPF instructions,
# compiled here with clang. Needs root, clang, cargo, `ip`, `ethtool`; prints SKIPPED
# otherwise. Creates veth xdpp0 / namespace xdpp (xdpp1 inside) and removes them on exit.
#
# Usage: bench/scripts/af-xdp-probe.sh   (env: ROUNDS=3 SECS=5 WORK=/tmp/af-xdp-probe)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
WORK=${WORK:-/tmp/af-xdp-probe}
skip() { echo "SKIPPED: af-xdp-probe: $1"; exit 0; }

[ "$(id -u)" = 0 ] || skip "needs root (veth, namespace, XDP attach, AF_XDP socket)"
for t in ip ethtool clang cargo taskset; do
  command -v "$t" >/dev/null || skip "$t is not installed (apt-get install iproute2 ethtool clang)"
done
[ "$(nproc)" -ge 2 ] || skip "needs two CPUs (server and client pinned apart)"
[ -e /usr/include/bpf/bpf_helpers.h ] || skip "no bpf/bpf_helpers.h (apt-get install libbpf-dev)"

mkdir -p "$WORK/src"
cat > "$WORK/xsk_redirect.c" <<'EOF'
/* Frames on a queue with a bound AF_XDP socket go to it; others to the kernel. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");
SEC("xdp")
int xsk_redirect(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}
char _license[] SEC("license") = "Dual BSD/GPL";
EOF
clang -O2 -g -target bpf -I/usr/include/"$(uname -m)"-linux-gnu \
  -c "$WORK/xsk_redirect.c" -o "$WORK/xsk_redirect.o" || skip "clang could not build the BPF object"

cat > "$WORK/Cargo.toml" <<'EOF'
[package]
name = "af-xdp-probe"
version = "0.1.0"
edition = "2021"
[dependencies]
xdpilone = "=1.3.0"
aya = { version = "=0.14.0", default-features = false }
libc = "0.2"
[profile.release]
debug = false
EOF
cat > "$WORK/src/main.rs" <<'EOF'
use std::net::UdpSocket;
use std::os::fd::BorrowedFd;
use std::{num::NonZeroU32, ptr::NonNull, time::{Duration, Instant}};
use aya::{maps::XskMap, programs::{Xdp, XdpMode}, Ebpf};
use xdpilone::{xdp::XdpDesc, BufIdx, IfInfo, Socket, SocketConfig, Umem, UmemConfig};

static PROG: &[u8] = include_bytes!("../xsk_redirect.o");
const PORT: u16 = 9000;

/// Makes an Ethernet/IPv4/UDP frame to PORT its own reply: swapping MAC and IP addresses
/// and ports leaves both checksums valid.
fn echo_in_place(f: &mut [u8]) -> bool {
    if f.len() < 42 || f[12..14] != [8, 0] || f[14] != 0x45 || f[23] != 17 { return false; }
    if u16::from_be_bytes([f[36], f[37]]) != PORT { return false; }
    for i in 0..6 { f.swap(i, 6 + i); }
    for i in 0..4 { f.swap(26 + i, 30 + i); }
    for i in 0..2 { f.swap(34 + i, 36 + i); }
    true
}

fn xsk(iface: &str, secs: u64, sleep: bool) -> Result<(), String> {
    let mut bpf = Ebpf::load(PROG).map_err(|e| format!("load object: {e}"))?;
    let prog: &mut Xdp = bpf.program_mut("xsk_redirect").unwrap().try_into().unwrap();
    prog.load().map_err(|e| format!("verifier: {e}"))?;
    prog.attach(iface, XdpMode::Driver).map_err(|e| format!("attach (native): {e:?}"))?;
    let mut xsks: XskMap<_> = XskMap::try_from(bpf.take_map("xsks").unwrap()).unwrap();
    // UMEM: 4096 chunks of 2 KiB (a 1514-byte frame and the kernel's 256-byte headroom).
    const CHUNK: u32 = 2048;
    const CHUNKS: u32 = 4096;
    let len = (CHUNK * CHUNKS) as usize;
    // SAFETY: a fresh private anonymous mapping, checked below, never unmapped.
    let area = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE, -1, 0) };
    if area == libc::MAP_FAILED { return Err("mmap".into()); }
    let area = NonNull::slice_from_raw_parts(NonNull::new(area as *mut u8).unwrap(), len);
    let cfg = UmemConfig { fill_size: 2048, complete_size: 2048, frame_size: CHUNK, headroom: 0, flags: 0 };
    // SAFETY: the area is page-aligned, ours alone, and outlives the socket (leaked).
    let umem = unsafe { Umem::new(cfg, area) }.map_err(|e| format!("umem: errno {}", e.get_raw()))?;
    let mut info = IfInfo::invalid();
    info.from_name(&std::ffi::CString::new(iface).unwrap()).map_err(|_| "no such interface")?;
    info.set_queue(0);
    let sock = Socket::with_shared(&info, &umem).map_err(|e| format!("AF_XDP socket: errno {}", e.get_raw()))?;
    let mut dev = umem.fq_cq(&sock).map_err(|e| format!("fill/completion rings: errno {}", e.get_raw()))?;
    let user = umem.rx_tx(&sock, &SocketConfig { rx_size: NonZeroU32::new(2048),
        tx_size: NonZeroU32::new(2048), bind_flags: SocketConfig::XDP_BIND_NEED_WAKEUP })
        .map_err(|e| format!("rx/tx rings: errno {}", e.get_raw()))?;
    let (mut rx, mut tx) = (user.map_rx().unwrap(), user.map_tx().unwrap());
    umem.bind(&user).map_err(|e| format!("bind: errno {}", e.get_raw()))?;
    let fd = user.as_raw_fd();
    // SAFETY: `fd` is the bound socket, open for the rest of the process.
    xsks.set(0, unsafe { BorrowedFd::borrow_raw(fd) }, 0).map_err(|e| format!("xskmap: {e}"))?;
    { let mut w = dev.fill(2048); w.insert((0..2048).map(|i| umem.frame(BufIdx(i)).unwrap().offset)); w.commit(); }
    eprintln!("xsk bound on {iface} queue 0 (native XDP, copy mode)");
    let mem = area.as_ptr() as *mut u8;
    let (mut out, mut back) = (Vec::<XdpDesc>::with_capacity(64), Vec::<u64>::with_capacity(128));
    let (mut echoes, mut kicks, mut polls) = (0u64, 0u64, 0u64);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut spins = 0u64;
    loop {
        let mut got = 0;
        { let mut r = rx.receive(64);
          while let Some(d) = r.read() {
              got += 1;
              // SAFETY: the kernel handed this chunk to us; it lies inside the UMEM.
              let f = unsafe { std::slice::from_raw_parts_mut(mem.add(d.addr as usize), d.len as usize) };
              if echo_in_place(f) { out.push(d) } else { back.push(d.addr) }
          }
          r.release(); }
        if !out.is_empty() {
            let mut w = tx.transmit(out.len() as u32);
            let n = w.insert(out.iter().copied()); w.commit(); drop(w);
            echoes += n as u64;
            back.extend(out.drain(n as usize..).map(|d| d.addr));
            out.clear();
            if tx.needs_wakeup() { tx.wake(); kicks += 1; }
        }
        { let mut c = dev.complete(64); while let Some(a) = c.read() { back.push(a) } c.release(); }
        if !back.is_empty() {
            let mut w = dev.fill(back.len() as u32); let n = w.insert(back.iter().copied()); w.commit(); drop(w);
            back.drain(..n as usize);
        }
        if got == 0 {
            spins += 1;
            if sleep {
                let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut p, 1, 100) };
                polls += 1;
            }
            if (sleep || spins & 0xffff == 0) && Instant::now() > end { break; }
        }
    }
    println!("server: {echoes} echoes, {:.2} kicks and {:.2} polls per echo",
        kicks as f64 / echoes.max(1) as f64, polls as f64 / echoes.max(1) as f64);
    Ok(())
}

fn udp(addr: &str, secs: u64, spin: bool) {
    let s = UdpSocket::bind(addr).unwrap();
    if spin { s.set_nonblocking(true).unwrap() } else { s.set_read_timeout(Some(Duration::from_millis(100))).unwrap() }
    let (mut buf, mut n) = ([0u8; 2048], 0u64);
    let end = Instant::now() + Duration::from_secs(secs);
    let mut i = 0u64;
    loop {
        if let Ok((len, from)) = s.recv_from(&mut buf) { s.send_to(&buf[..len], from).unwrap(); n += 1; }
        i += 1;
        if i & 0xff == 0 && Instant::now() > end { break; }
    }
    println!("server: {n} echoes");
}

fn client(target: &str, secs: u64) {
    let s = UdpSocket::bind("0.0.0.0:0").unwrap();
    s.connect(target).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let (msg, mut buf) = ([0x5au8; 64], [0u8; 2048]);
    for _ in 0..1000 { s.send(&msg).unwrap(); let _ = s.recv(&mut buf); }
    let start = Instant::now();
    let end = start + Duration::from_secs(secs);
    let (mut n, mut lost, mut lat) = (0u64, 0u64, Vec::with_capacity(1 << 20));
    while Instant::now() < end {
        let t = Instant::now();
        s.send(&msg).unwrap();
        match s.recv(&mut buf) { Ok(_) => { n += 1; lat.push(t.elapsed().as_nanos() as u64) } Err(_) => lost += 1 }
    }
    let el = start.elapsed().as_secs_f64();
    lat.sort_unstable();
    let p = |q: f64| lat.get((lat.len() as f64 * q) as usize).copied().unwrap_or(0) as f64 / 1e3;
    println!("rt {n} rate {:.0} lost {lost} p50 {:.1} p99 {:.1}", n as f64 / el, p(0.5), p(0.99));
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let secs = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(5);
    match a.get(1).map(String::as_str) {
        Some("xsk-spin") | Some("xsk-poll") => if let Err(e) = xsk(&a[2], secs, a[1] == "xsk-poll") {
            println!("SKIPPED: af-xdp-probe: {e}"); std::process::exit(2) },
        Some("udp-spin") => udp(&a[2], secs, true),
        Some("udp-block") => udp(&a[2], secs, false),
        Some("client") => client(&a[2], secs),
        _ => eprintln!("usage: af-xdp-probe xsk-spin|xsk-poll IFACE SECS | udp-spin|udp-block ADDR SECS | client ADDR SECS"),
    }
}
EOF
(cd "$WORK" && CARGO_TARGET_DIR="$WORK/target" cargo build --release -j 2 -q) || skip "the probe did not build (crates.io reachable?)"
BIN=$WORK/target/release/af-xdp-probe

cleanup() { ip netns del xdpp 2>/dev/null || true; ip link del xdpp0 2>/dev/null || true; }
trap cleanup EXIT
cleanup
# One queue each way: a veth has one RX queue per CPU by default, and a frame arrives on
# the queue its sender's TX queue picked, so a socket on queue 0 alone would miss some.
ip netns add xdpp || skip "cannot create a network namespace"
ip link add xdpp0 numtxqueues 1 numrxqueues 1 type veth peer name xdpp1 numtxqueues 1 numrxqueues 1
ip link set xdpp1 netns xdpp
ip addr add 10.78.0.1/24 dev xdpp0
ip link set xdpp0 up
ip -n xdpp addr add 10.78.0.2/24 dev xdpp1
ip -n xdpp link set xdpp1 up
# The AF_XDP socket takes every frame on the queue, ARP too: a static entry instead.
ip -n xdpp neigh replace 10.78.0.1 lladdr "$(cat /sys/class/net/xdpp0/address)" dev xdpp1 nud permanent
# A local sender leaves its UDP checksum partial for the "hardware"; XDP hands the frame
# over as it is, with no flag saying so. The sender completes it itself instead.
ip netns exec xdpp ethtool -K xdpp1 tx-checksumming off >/dev/null

snap() { awk '/^cpu[01] /{print $1,$2,$4,$5,$8}' /proc/stat; }
HZ=$(getconf CLK_TCK)
run() { # run NAME SERVER-ARGS...
  local name=$1; shift
  taskset -c 1 "$BIN" "$@" $((SECS + 3)) > "$WORK/server.out" &
  local sp=$!
  sleep 1.5
  if grep -q SKIPPED "$WORK/server.out"; then cat "$WORK/server.out"; exit 0; fi
  local b a out
  b=$(snap)
  out=$(ip netns exec xdpp taskset -c 0 "$BIN" client 10.78.0.1:9000 "$SECS")
  a=$(snap)
  wait "$sp" || true
  paste <(echo "$b") <(echo "$a") | awk -v name="$name" -v out="$out" -v hz="$HZ" -v s="$SECS" '
    BEGIN { split(out, f, " "); rt = f[2]; printf "%-10s %8.0f/s p50 %5.1f us p99 %5.1f us", name, f[4], f[8], f[10] }
    { printf " | %s usr %5.2f sys %5.2f si %5.2f us/rt busy %3.0f%%", $1, ($7-$2)*1e6/hz/rt, ($8-$3)*1e6/hz/rt,
        ($10-$5)*1e6/hz/rt, 100-($9-$4)*100/hz/s }
    END { print "" }'
}
echo "# $ROUNDS rounds of $SECS s; server CPU 1, client CPU 0 (namespace xdpp)"
for r in $(seq "$ROUNDS"); do
  run udp-block udp-block 10.78.0.1:9000
  run udp-spin udp-spin 10.78.0.1:9000
  run xsk-spin xsk-spin xdpp0
  run xsk-poll xsk-poll xdpp0
done
