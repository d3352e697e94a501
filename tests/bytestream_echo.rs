//! `ebb_bytestream::Echo` over Linux sockets: a client on another thread sends 32 MiB and starts
//! reading only 300 ms later — more than the four socket buffers on the way hold, so the
//! echo meets back-pressure (its queue bound closes the receive window,
//! `send_window_increased` reopens it). Every byte must come back, in order.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use ebb_bytestream::Echo;
use ebb_core::future::promise;
use ebb_hosted::{Config, tcp};

#[test]
fn echo_returns_every_byte_in_order_under_back_pressure() {
    const LEN: usize = 32 << 20;
    let sent: Vec<u8> = (0..LEN).map(|i| (i * 7 + i / 4093) as u8).collect();
    let expected = sent.clone();
    let config = Config {
        idle_poll: Duration::ZERO,
        ..Config::with_cores(1)
    };
    let echoed = ebb_hosted::run(config, move || async move {
        let listener = tcp::listen("127.0.0.1:0".parse().unwrap(), |conn| {
            conn.set_handler(Echo::default())
        })
        .expect("listen");
        let addr = listener.local_addr();
        let (done, finished) = promise::<Vec<u8>>();
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut reader = s.try_clone().unwrap();
            let back = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                let mut got = vec![0u8; LEN];
                reader.read_exact(&mut got).map(|()| got)
            });
            s.write_all(&sent).expect("write");
            let _ = done.set(back.join().unwrap().expect("read the echo"));
        });
        finished.await.expect("client finished")
    })
    .unwrap();
    assert!(echoed == expected, "the echo differs from what was sent");
}
