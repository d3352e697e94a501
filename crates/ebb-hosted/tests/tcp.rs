//! The hosted TCP interface against real Linux peers (std sockets on other threads):
//! connecting, receiving, back-pressure, the receive window, graceful close and reset.

use ebb_core::event::{self, sleep};
use ebb_core::future::{Promise, promise};
use ebb_core::iobuf::{IOBuf, IOBufChain};
use ebb_core::net::{CloseReason, TcpConnection, TcpErrorKind, TcpHandler};
use ebb_hosted::{Config, tcp};
use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;
use std::time::Duration;

fn one_core() -> Config {
    Config {
        idle_poll: Duration::ZERO,
        ..Config::with_cores(1)
    }
}

/// Records everything a connection reports.
#[derive(Default)]
struct Log {
    received: Vec<u8>,
    receive_calls: usize,
    window_increased: usize,
    peer_closed: bool,
    closed: Option<CloseReason>,
}

struct Recorder {
    log: Rc<RefCell<Log>>,
    on_close: Option<Promise<CloseReason>>,
}

impl TcpHandler for Recorder {
    fn receive(&mut self, _conn: &dyn TcpConnection, data: IOBuf) {
        let mut log = self.log.borrow_mut();
        log.received.extend_from_slice(&data);
        log.receive_calls += 1;
    }
    fn send_window_increased(&mut self, _conn: &dyn TcpConnection) {
        self.log.borrow_mut().window_increased += 1;
    }
    fn peer_closed(&mut self, conn: &dyn TcpConnection) {
        self.log.borrow_mut().peer_closed = true;
        conn.close();
    }
    fn closed(&mut self, reason: CloseReason) {
        self.log.borrow_mut().closed = Some(reason);
        if let Some(p) = self.on_close.take() {
            let _ = p.set(reason);
        }
    }
}

fn peer() -> (TcpListener, SocketAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

async fn wait_until(mut done: impl FnMut() -> bool) {
    for _ in 0..5000 {
        if done() {
            return;
        }
        sleep(Duration::from_millis(1)).await;
    }
    panic!("condition not reached within 5 s");
}

#[test]
fn connect_exchange_and_graceful_close() {
    let (listener, addr) = peer();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).unwrap();
        s.write_all(b"world").unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        s.read_to_end(&mut rest).unwrap(); // our FIN ends this
        buf
    });
    let (log, reason) = ebb_hosted::run(one_core(), move || async move {
        let conn = tcp::connect(addr).await.expect("connect");
        assert_eq!(conn.peer_addr(), addr);
        let log = Rc::new(RefCell::new(Log::default()));
        let (p, closed) = promise();
        conn.set_handler(Recorder {
            log: log.clone(),
            on_close: Some(p),
        });
        conn.send(IOBuf::from_static(b"hello").into()).unwrap();
        let reason = closed.await.unwrap();
        let log = Rc::try_unwrap(log).ok().unwrap().into_inner();
        (log.received, reason)
    })
    .unwrap();
    assert_eq!(&peer.join().unwrap(), b"hello");
    assert_eq!(log, b"world");
    assert_eq!(reason, CloseReason::Normal);
}

#[test]
fn a_reset_is_reported_as_reset() {
    let (listener, addr) = peer();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        // Reset only once our side is established and has its handler.
        ready_rx.recv().unwrap();
        // Linger 0 makes close send RST.
        drop(linger_zero(s));
    });
    let reason = ebb_hosted::run(one_core(), move || async move {
        let conn = tcp::connect(addr).await.expect("connect");
        let (p, closed) = promise();
        conn.set_handler(Recorder {
            log: Default::default(),
            on_close: Some(p),
        });
        ready_tx.send(()).unwrap();
        closed.await.unwrap()
    })
    .unwrap();
    peer.join().unwrap();
    assert_eq!(reason, CloseReason::Reset);
}

/// Sets SO_LINGER to zero through rustix (std has no setter) and returns the stream.
fn linger_zero(s: TcpStream) -> TcpStream {
    rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO)).unwrap();
    s
}

#[test]
fn connecting_to_a_closed_port_is_refused() {
    let (listener, addr) = peer();
    drop(listener);
    let result = ebb_hosted::run(one_core(), move || async move {
        tcp::connect(addr).await.map(|_| ())
    })
    .unwrap();
    assert_eq!(result, Err(TcpErrorKind::ConnectionRefused));
}

#[test]
fn back_pressure_is_reported_and_nothing_is_dropped() {
    const TOTAL: usize = 32 << 20;
    let (listener, addr) = peer();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        go_rx.recv().unwrap(); // do not read until the sender has hit a full window
        let mut got = Vec::with_capacity(TOTAL);
        s.read_to_end(&mut got).unwrap();
        got
    });
    let (rest_len, queued, increased) = ebb_hosted::run(one_core(), move || async move {
        let conn = tcp::connect(addr).await.expect("connect");
        let log = Rc::new(RefCell::new(Log::default()));
        conn.set_handler(Recorder {
            log: log.clone(),
            on_close: None,
        });
        let data: Vec<u8> = (0..TOTAL).map(|i| (i % 251) as u8).collect();
        // try_send takes what fits and hands back the rest.
        let rest = conn.try_send(IOBuf::from_vec(data).into()).unwrap();
        let rest_len = rest.len();
        assert!(rest_len > 0, "32 MiB cannot fit in the socket buffer");
        assert_eq!(conn.send_window(), 0, "a full socket has no window");
        // send queues the rest on the connection; it drains once the peer reads.
        conn.send(rest).unwrap();
        let queued = conn.queued_bytes();
        go_tx.send(()).unwrap();
        wait_until(|| conn.queued_bytes() == 0).await;
        conn.close();
        (rest_len, queued, log.borrow().window_increased)
    })
    .unwrap();
    let got = peer.join().unwrap();
    assert_eq!(got.len(), TOTAL);
    assert!(
        got.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8),
        "bytes arrive intact, in order"
    );
    assert_eq!(
        queued, rest_len,
        "send queued exactly what try_send could not take"
    );
    assert!(increased > 0, "the handler heard the window open");
}

#[test]
fn a_closed_receive_window_stops_delivery_until_reopened() {
    let (listener, addr) = peer();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.write_all(&[7u8; 100_000]).unwrap();
        s
    });
    let (before, after) = ebb_hosted::run(one_core(), move || async move {
        let conn = tcp::connect(addr).await.expect("connect");
        conn.set_receive_window_open(false);
        let log = Rc::new(RefCell::new(Log::default()));
        conn.set_handler(Recorder {
            log: log.clone(),
            on_close: None,
        });
        sleep(Duration::from_millis(100)).await;
        let before = log.borrow().received.len();
        conn.set_receive_window_open(true);
        wait_until(|| log.borrow().received.len() == 100_000).await;
        conn.abort();
        let after = log.borrow().received.len();
        (before, after)
    })
    .unwrap();
    drop(peer.join().unwrap());
    assert_eq!(before, 0, "nothing is delivered while the window is closed");
    assert_eq!(after, 100_000);
}

#[test]
fn listen_accepts_on_the_accepting_core_and_reports_its_address() {
    let result = ebb_hosted::run(Config::with_cores(2), || async {
        let accepted_on = Rc::new(RefCell::new(None::<u32>));
        let (p, on_accept) = promise::<u32>();
        let p = std::sync::Mutex::new(Some(p));
        let listener = tcp::listen("127.0.0.1:0".parse().unwrap(), move |conn| {
            if let Some(p) = p.lock().unwrap().take() {
                let _ = p.set(event::core_id().0);
            }
            conn.abort();
        })
        .expect("listen");
        let addr = listener.local_addr();
        assert_ne!(addr.port(), 0);
        let client = std::thread::spawn(move || TcpStream::connect(addr).map(|_| ()));
        let core = on_accept.await.unwrap();
        *accepted_on.borrow_mut() = Some(core);
        client.join().unwrap().unwrap();
        listener.close();
        core
    })
    .unwrap();
    assert!(result < 2);
}

#[test]
fn sending_after_close_is_an_error_value() {
    let (listener, addr) = peer();
    let peer = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
    let result = ebb_hosted::run(one_core(), move || async move {
        let conn = tcp::connect(addr).await.expect("connect");
        conn.close();
        conn.send(IOBufChain::from(IOBuf::from_static(b"late")))
    })
    .unwrap();
    drop(peer.join());
    assert!(result.is_err());
}

/// Counts `send_window_increased` calls (the H6 probe's handler).
struct CountWindowIncreases(Rc<std::cell::Cell<u32>>);

impl TcpHandler for CountWindowIncreases {
    fn receive(&mut self, _: &dyn TcpConnection, _: IOBuf) {}
    fn send_window_increased(&mut self, _: &dyn TcpConnection) {
        self.0.set(self.0.get() + 1);
    }
    fn closed(&mut self, _: CloseReason) {}
}

/// `try_send` hands back what a full socket did not take; once the peer drains the
/// socket, `send_window_increased` fires — exactly once, as nothing else was offered
/// (the rule of `TcpHandler::send_window_increased`, as in ebb-net).
#[test]
fn try_send_leftover_is_followed_by_send_window_increased() {
    let (listener, addr) = peer();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink);
    });
    let fired = ebb_hosted::run(one_core(), move || async move {
        let conn = tcp::connect(addr).await.unwrap();
        let n = Rc::new(std::cell::Cell::new(0));
        conn.set_handler(CountWindowIncreases(n.clone()));
        let rest = conn
            .try_send(IOBuf::from_vec(vec![1u8; 32 << 20]).into())
            .unwrap();
        assert!(!rest.is_empty(), "32 MiB fit in the socket buffer");
        // The peer starts draining after 300 ms; by 2 s the socket has room again.
        event::sleep(Duration::from_secs(2)).await;
        let fired = n.get();
        conn.abort();
        fired
    })
    .unwrap();
    let _ = peer.join();
    assert_eq!(
        fired, 1,
        "try_send handed back data and the socket drained: send_window_increased must fire once"
    );
}

/// A `try_send` the socket takes whole leaves nobody waiting: no `send_window_increased`
/// follows, however many writable edges the socket reports.
#[test]
fn try_send_that_takes_everything_fires_no_send_window_increased() {
    let (listener, addr) = peer();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        got
    });
    let got_window = ebb_hosted::run(one_core(), move || async move {
        let conn = tcp::connect(addr).await.unwrap();
        let n = Rc::new(std::cell::Cell::new(0));
        conn.set_handler(CountWindowIncreases(n.clone()));
        let rest = conn
            .try_send(IOBufChain::from(IOBuf::from_static(b"hello")))
            .unwrap();
        assert!(rest.is_empty());
        sleep(Duration::from_millis(100)).await;
        let fired = n.get();
        conn.close();
        fired
    })
    .unwrap();
    assert_eq!(peer.join().unwrap(), b"hello");
    assert_eq!(got_window, 0, "no rest handed back: no spurious call");
}
