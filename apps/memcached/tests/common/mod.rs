//! Helpers shared by the integration tests that run the hosted server as a process:
//! start it (or Debian's memcached) on a free port and kill it on drop, a tiny
//! text-protocol client over `TcpStream` with timeouts, a seeded RNG and a checksum.
//!
//! Each test file includes this with `mod common;` and uses part of it.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, mpsc};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// The server processes alive, by the thread that started them: when [`bounded`] gives
/// up on a thread it kills that thread's servers (their `Drop` will never run).
static STARTED: Mutex<Vec<(ThreadId, u32)>> = Mutex::new(Vec::new());

fn register(pid: u32) {
    let me = std::thread::current().id();
    STARTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((me, pid));
}

fn unregister(pid: u32) {
    STARTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&(_, p)| p != pid);
}

fn kill_started_by(thread: ThreadId) {
    let pids: Vec<u32> = STARTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|&&(t, _)| t == thread)
        .map(|&(_, p)| p)
        .collect();
    for pid in pids {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
}

/// How long any single read or write of a test client may block.
pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// A port nobody listens on right now (the OS's choice; a race with other processes is
/// possible, so starting retries).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

/// A server process on 127.0.0.1, killed when dropped.
pub struct ServerProcess {
    child: Child,
    /// The port it listens on.
    pub port: u16,
    /// What it is, for messages.
    pub name: &'static str,
}

impl ServerProcess {
    /// Our server (`EBB_CPUS=1 memcached -p PORT ARGS...`), once it printed its banner.
    pub fn ours(args: &[&str]) -> ServerProcess {
        Self::ours_on(1, args)
    }

    /// Our server on `cores` cores (`EBB_CPUS=cores`).
    pub fn ours_on(cores: usize, args: &[&str]) -> ServerProcess {
        let mut last_err = String::new();
        for _ in 0..5 {
            let port = free_port();
            let mut child = Command::new(env!("CARGO_BIN_EXE_memcached"))
                .env("EBB_CPUS", cores.to_string())
                .arg("-p")
                .arg(port.to_string())
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn our memcached");
            let stdout = child.stdout.take().expect("stdout piped");
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let mut lines = BufReader::new(stdout).lines();
                for line in lines.by_ref() {
                    let Ok(line) = line else { break };
                    let ready = line.starts_with("memcached: listening on");
                    let _ = tx.send(line);
                    if ready {
                        break;
                    }
                }
                // Keep draining so the server never blocks on a full pipe.
                for _ in lines {}
            });
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match rx.recv_timeout(left) {
                    Ok(line) if line.starts_with("memcached: listening on") => {
                        register(child.id());
                        return ServerProcess {
                            child,
                            port,
                            name: "ours",
                        };
                    }
                    Ok(line) => last_err = line,
                    Err(_) => {
                        let _ = child.kill();
                        let status = child.wait();
                        last_err = format!("no banner within 30 s ({status:?}): {last_err}");
                        break;
                    }
                }
            }
        }
        panic!("our memcached did not start: {last_err}");
    }

    /// Debian's memcached (`memcached -p PORT -U 0 -t 1 -l 127.0.0.1 ARGS...`, as
    /// `nobody` when we are root), once it accepts connections.
    pub fn reference(args: &[&str]) -> ServerProcess {
        for _ in 0..5 {
            let port = free_port();
            let mut cmd = Command::new("memcached");
            cmd.args([
                "-p",
                &port.to_string(),
                "-U",
                "0",
                "-t",
                "1",
                "-l",
                "127.0.0.1",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
            if ebb_testkit::is_root() {
                cmd.args(["-u", "nobody"]);
            }
            let mut child = cmd.spawn().expect("spawn memcached");
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break; // port taken, most likely: try another
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    register(child.id());
                    return ServerProcess {
                        child,
                        port,
                        name: "memcached 1.6.18",
                    };
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("Debian's memcached did not start");
    }

    /// The process id (for `/proc`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Panics if the process has exited.
    pub fn assert_alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited: {status}", self.name);
        }
    }

    /// A new client connection.
    pub fn client(&self) -> Client {
        Client::connect(self.port)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        unregister(self.child.id());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A text-protocol client: a `TcpStream` with timeouts and a read buffer.
pub struct Client {
    reader: BufReader<TcpStream>,
}

impl Client {
    /// Connects to 127.0.0.1:`port`.
    pub fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        Self::from_stream(stream)
    }

    /// Wraps a connected stream (sets the timeouts and TCP_NODELAY).
    pub fn from_stream(stream: TcpStream) -> Client {
        stream.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client {
            reader: BufReader::with_capacity(256 << 10, stream),
        }
    }

    /// The socket.
    pub fn stream(&self) -> &TcpStream {
        self.reader.get_ref()
    }

    /// Writes all of `bytes`.
    pub fn send(&mut self, bytes: &[u8]) {
        self.reader.get_mut().write_all(bytes).expect("write");
    }

    /// Shuts down the sending side (the server sees end of input).
    pub fn shutdown_write(&self) {
        self.stream().shutdown(Shutdown::Write).expect("shutdown");
    }

    /// One line without its `"\r\n"` (panics at end of input or on timeout).
    pub fn line(&mut self) -> Vec<u8> {
        self.try_line()
            .unwrap_or_else(|e| panic!("reading a reply line: {e}"))
    }

    /// One line without its `"\r\n"`, or why none came.
    pub fn try_line(&mut self) -> std::io::Result<Vec<u8>> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line)?;
        if !line.ends_with(b"\r\n") {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("incomplete line {:?}", line.escape_ascii().to_string()),
            ));
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }

    /// One line as a string.
    pub fn line_str(&mut self) -> String {
        String::from_utf8_lossy(&self.line()).into_owned()
    }

    /// Exactly `n` bytes.
    pub fn read_exact(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        self.reader.read_exact(&mut buf).expect("read data");
        buf
    }

    /// Exactly `n` bytes, or why not.
    pub fn read_exact_checked(&mut self, n: usize) -> Result<Vec<u8>, String> {
        let mut buf = vec![0; n];
        self.reader
            .read_exact(&mut buf)
            .map_err(|e| format!("reading {n} bytes: {e}"))?;
        Ok(buf)
    }

    /// Reads until the server closes; what came before the close.
    pub fn read_to_end(&mut self) -> std::io::Result<Vec<u8>> {
        let mut rest = Vec::new();
        self.reader.read_to_end(&mut rest)?;
        Ok(rest)
    }

    /// Sends one line (adds `"\r\n"`) and returns the one-line reply.
    pub fn cmd(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n").as_bytes());
        self.line_str()
    }

    /// `set` and its one-line reply.
    pub fn set(&mut self, key: &str, flags: u32, exptime: i64, value: &[u8]) -> String {
        let mut req = format!("set {key} {flags} {exptime} {}\r\n", value.len()).into_bytes();
        req.extend_from_slice(value);
        req.extend_from_slice(b"\r\n");
        self.send(&req);
        self.line_str()
    }

    /// Reads the `VALUE` blocks and the `END` of a get reply: (key, flags, value) each.
    pub fn read_values(&mut self) -> Vec<(String, u32, Vec<u8>)> {
        let mut values = Vec::new();
        loop {
            let line = self.line_str();
            if line == "END" {
                return values;
            }
            let parts: Vec<&str> = line.split(' ').collect();
            assert!(
                parts.len() >= 4 && parts[0] == "VALUE",
                "unexpected get reply line {line:?}"
            );
            let len: usize = parts[3].parse().expect("VALUE length");
            let mut data = self.read_exact(len + 2);
            assert_eq!(
                &data[len..],
                b"\r\n",
                "value of {} not ended by CRLF",
                parts[1]
            );
            data.truncate(len);
            values.push((parts[1].to_string(), parts[2].parse().unwrap(), data));
        }
    }

    /// `get key`: the value and flags, or `None`.
    pub fn get(&mut self, key: &str) -> Option<(u32, Vec<u8>)> {
        self.send(format!("get {key}\r\n").as_bytes());
        let mut values = self.read_values();
        assert!(values.len() <= 1, "one key, {} values", values.len());
        values.pop().map(|(k, flags, data)| {
            assert_eq!(k, key);
            (flags, data)
        })
    }

    /// `stats [group]` as a map.
    pub fn stats(&mut self, group: &str) -> HashMap<String, String> {
        let line = if group.is_empty() {
            "stats\r\n".to_string()
        } else {
            format!("stats {group}\r\n")
        };
        self.send(line.as_bytes());
        let mut map = HashMap::new();
        loop {
            let line = self.line_str();
            if line == "END" {
                return map;
            }
            let mut parts = line.splitn(3, ' ');
            assert_eq!(parts.next(), Some("STAT"), "stats line {line:?}");
            let name = parts.next().expect("stat name").to_string();
            map.insert(name, parts.next().unwrap_or("").to_string());
        }
    }

    /// One general statistic as a number.
    pub fn stat(&mut self, name: &str) -> u64 {
        let stats = self.stats("");
        stats
            .get(name)
            .unwrap_or_else(|| panic!("no stat {name}"))
            .parse()
            .unwrap_or_else(|_| panic!("stat {name} is not a number"))
    }
}

/// A small seeded RNG (SplitMix64): tests replay from their seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below((hi - lo + 1) as u64) as usize
    }

    /// True with probability `num/den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// FNV-1a, 64 bits: the checksum values carry.
pub fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Polls `cond` every 20 ms until it holds or `limit` passes; whether it held.
pub fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `f` on a thread and panics if it takes longer than `limit` (a hung server must
/// fail the test, not hang it), killing the servers that thread started.
pub fn bounded<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            let _ = handle.join();
            v
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the thread sent nothing but returned"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            kill_started_by(handle.thread().id());
            panic!("{what}: not done within {limit:?}")
        }
    }
}
