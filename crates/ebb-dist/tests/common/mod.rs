//! What the hosted ebb-dist test suites share: a two-core runtime, Linux sockets, the
//! Messenger configuration they run with, and payload helpers. (Each suite is its own
//! crate and uses part of it.)
#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

use ebb::net::{NetConfig, Network};
use ebb::{IOBuf, IOBufChain};
use ebb_dist::messenger::MessengerConfig;

/// Runs `main` on a fresh two-core hosted runtime (unpinned: tests share the machine).
pub fn run<T: Send + 'static, F: Future<Output = T> + 'static>(
    main: impl FnOnce() -> F + Send,
) -> T {
    let config = ebb::Config {
        pin: false,
        ..ebb::Config::with_cores(2)
    };
    ebb::run(config, main).expect("the hosted runtime runs")
}

/// `bytes` as one buffer.
pub fn chain(bytes: &[u8]) -> IOBufChain {
    IOBufChain::from(IOBuf::copy_from_slice(bytes))
}

/// The default configuration with a generous silence limit: these tests run beside
/// others on a loaded machine, where a core may be starved for a second (tests of the
/// heartbeat use a short limit on purpose).
pub fn tolerant() -> MessengerConfig {
    MessengerConfig {
        silence_limit: Some(Duration::from_secs(10)),
        ..MessengerConfig::default()
    }
}

/// Linux sockets.
pub async fn network() -> Network {
    ebb::net::start(NetConfig::default())
        .await
        .expect("Linux sockets start")
}

/// `len` bytes no two runs of which look alike, varied by `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}
