//! `--bench`: the Messenger between the front end and a native node, beside plain Linux
//! TCP between two processes on loopback, in the same run, rounds alternating.
//!
//! * round trip: 64-byte calls (request and reply frames), and one-way message
//!   ping-pong (the raw Messenger), against a blocking 64-byte TCP ping-pong with an echo
//!   process;
//! * throughput: 1 MiB messages to the node until 64 MiB arrived, against 64 MiB written
//!   to a sink process.
//!
//! The node is behind its monitor's user-mode network (a guest-to-host forward), so its
//! figures include that hop: guest ebb-net ↔ virtio ↔ the monitor's ebb-net endpoint ↔
//! a host socket ↔ the front end.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ebb::future::{Promise, promise};
use ebb::{IOBuf, IOBufChain};
use ebb_dist::messenger::Messenger;
use ebb_dist::node::NodeId;
use ebb_dist::remote::encode;

use crate::protocol::{ECHO_KIND, NODE, PING_KIND, PONG_KIND, SINK_KIND, SINK_TOTAL_KIND};

const SAMPLES: usize = 2000;
const MESSAGE: usize = 1 << 20;
const TOTAL: usize = 64 << 20;

type Waiter = Arc<spin::Mutex<Option<Promise<()>>>>;

/// Round trips in µs: median and 99th percentile.
fn summary(mut us: Vec<f64>) -> (f64, f64) {
    us.sort_by(f64::total_cmp);
    (us[us.len() / 2], us[us.len() * 99 / 100])
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `rounds` alternating rounds; the report.
pub async fn run(messenger: &Messenger, node: NodeId, rounds: u32) -> Result<String, String> {
    let waiter: Waiter = Arc::default();
    {
        let w = waiter.clone();
        messenger.on_message(NODE, PONG_KIND, move |_from, _payload| {
            if let Some(p) = w.lock().take() {
                let _ = p.set(());
            }
        });
    }
    let mut peer = TcpPeer::start()?;
    let mut out = String::new();
    let (mut call_ratios, mut msg_ratios, mut tput_ratios, mut call_vs_msg) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        let call = summary(call_rtts(messenger, node).await?);
        let msg = summary(message_rtts(messenger, node, &waiter).await?);
        let tcp = summary(peer.rtts()?);
        let ours_tput = throughput(messenger, node, &waiter).await?;
        let tcp_tput = peer.throughput()?;
        out.push_str(&format!(
            "bench round {round}: 64 B round trip median/p99 µs: call {:.1}/{:.1}, message {:.1}/{:.1}, Linux TCP {:.1}/{:.1}; 1 MiB messages {:.0} MB/s, Linux TCP {:.0} MB/s\n",
            call.0, call.1, msg.0, msg.1, tcp.0, tcp.1, ours_tput, tcp_tput
        ));
        call_ratios.push(call.0 / tcp.0);
        msg_ratios.push(msg.0 / tcp.0);
        tput_ratios.push(ours_tput / tcp_tput);
        call_vs_msg.push(call.0 / msg.0);
    }
    peer.stop();
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        format!("{:.2}x [{lo:.2}-{hi:.2}]", median(v.to_vec()))
    };
    out.push_str(&format!(
        "bench summary ({rounds} rounds, front end ↔ {node} through user-mode forwards; Linux TCP between two processes on loopback): call round trip {} Linux TCP's; message round trip {}; throughput {}; a call against a raw message round trip {}",
        range(&call_ratios),
        range(&msg_ratios),
        range(&tput_ratios),
        range(&call_vs_msg)
    ));
    Ok(out)
}

async fn call_rtts(messenger: &Messenger, node: NodeId) -> Result<Vec<f64>, String> {
    let payload = IOBufChain::from(IOBuf::copy_from_slice(&[7u8; 64]));
    let mut us = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let t = Instant::now();
        messenger
            .call(node, NODE, ECHO_KIND, payload.clone())
            .await
            .map_err(|e| e.to_string())?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(us)
}

async fn message_rtts(
    messenger: &Messenger,
    node: NodeId,
    waiter: &Waiter,
) -> Result<Vec<f64>, String> {
    let payload = IOBufChain::from(IOBuf::copy_from_slice(&[7u8; 64]));
    let mut us = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let (p, answered) = promise();
        *waiter.lock() = Some(p);
        let t = Instant::now();
        messenger
            .send(node, NODE, PING_KIND, payload.clone())
            .map_err(|e| e.to_string())?;
        ebb::timeout(Duration::from_secs(5), answered)
            .await
            .map_err(|_| "no pong in 5 s")?
            .map_err(|_| "the pong was dropped")?;
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(us)
}

/// MB/s of 1 MiB messages until [`TOTAL`] bytes arrived at the node.
async fn throughput(messenger: &Messenger, node: NodeId, waiter: &Waiter) -> Result<f64, String> {
    let block = IOBuf::from_vec(vec![0x5a; MESSAGE]);
    let (p, done) = promise();
    *waiter.lock() = Some(p);
    let total = encode(&(TOTAL as u64)).map_err(|e| e.to_string())?;
    messenger
        .send_when_ready(node, NODE, SINK_TOTAL_KIND, total)
        .await
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    for _ in 0..TOTAL / MESSAGE {
        messenger
            .send_when_ready(node, NODE, SINK_KIND, IOBufChain::from(block.clone()))
            .await
            .map_err(|e| e.to_string())?;
    }
    ebb::timeout(Duration::from_secs(60), done)
        .await
        .map_err(|_| "the node did not count 64 MiB in 60 s")?
        .map_err(|_| "dropped")?;
    Ok(TOTAL as f64 / t.elapsed().as_secs_f64() / 1e6)
}

/// The peer: this executable as a plain TCP server in another process.
struct TcpPeer {
    child: Child,
    port: u16,
}

impl TcpPeer {
    fn start() -> Result<TcpPeer, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .arg("--tcp-peer")
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the TCP peer: {e}"))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().ok_or("no stdout")?)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let port = line
            .trim()
            .parse()
            .map_err(|_| format!("the TCP peer said {line:?}"))?;
        Ok(TcpPeer { child, port })
    }

    fn connect(&self, mode: u8) -> Result<TcpStream, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.write_all(&[mode]).map_err(|e| e.to_string())?;
        Ok(s)
    }

    fn rtts(&mut self) -> Result<Vec<f64>, String> {
        let mut s = self.connect(b'e')?;
        let (ping, mut pong) = ([7u8; 64], [0u8; 64]);
        let mut us = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let t = Instant::now();
            s.write_all(&ping).map_err(|e| e.to_string())?;
            s.read_exact(&mut pong).map_err(|e| e.to_string())?;
            us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(us)
    }

    fn throughput(&mut self) -> Result<f64, String> {
        let mut s = self.connect(b's')?;
        let block = vec![0x5au8; MESSAGE];
        let t = Instant::now();
        for _ in 0..TOTAL / MESSAGE {
            s.write_all(&block).map_err(|e| e.to_string())?;
        }
        s.shutdown(std::net::Shutdown::Write)
            .map_err(|e| e.to_string())?;
        let mut ack = [0u8; 8];
        s.read_exact(&mut ack).map_err(|e| e.to_string())?;
        if u64::from_le_bytes(ack) != TOTAL as u64 {
            return Err("the sink counted another total".into());
        }
        Ok(TOTAL as f64 / t.elapsed().as_secs_f64() / 1e6)
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `--tcp-peer`: listens on 127.0.0.1, prints the port, and serves each connection by
/// its first byte: `e` echoes, `s` counts until EOF and answers the count.
pub fn tcp_peer() -> i32 {
    let listener = match TcpListener::bind("127.0.0.1:0") {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cluster --tcp-peer: {e}");
            return 1;
        }
    };
    println!("{}", listener.local_addr().map_or(0, |a| a.port()));
    let _ = std::io::stdout().flush();
    for conn in listener.incoming().flatten() {
        std::thread::spawn(move || serve(conn));
    }
    0
}

fn serve(mut s: TcpStream) {
    let _ = s.set_nodelay(true);
    let mut mode = [0u8; 1];
    if s.read_exact(&mut mode).is_err() {
        return;
    }
    let mut buf = vec![0u8; 1 << 20];
    match mode[0] {
        b'e' => {
            let mut ping = [0u8; 64];
            while s.read_exact(&mut ping).is_ok() {
                if s.write_all(&ping).is_err() {
                    return;
                }
            }
        }
        _ => {
            let mut total = 0u64;
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => total += n as u64,
                }
            }
            let _ = s.write_all(&total.to_le_bytes());
        }
    }
}
