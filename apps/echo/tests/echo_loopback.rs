//! `apps/echo` against a real client over loopback: 1,000 concurrent connections, each
//! getting back exactly the bytes it sent, including messages far larger than the socket
//! buffers (which exercises back-pressure: the server stops reading while its queue drains).

use ebb_bench::echo_check::check_echo;
use ebb_bench::server::ServerProcess;
use std::time::Duration;

const MIB: usize = 1024 * 1024;

fn start_echo(cores: usize) -> ServerProcess {
    ServerProcess::spawn_with_env(
        env!("CARGO_BIN_EXE_echo"),
        &["--port", "0"],
        &[(ebb::CPUS_ENV, &cores.to_string())],
        "echo: listening on ",
    )
}

#[test]
fn a_thousand_concurrent_connections_get_their_bytes_back() {
    let server = start_echo(2);
    // Mostly small messages, some of 1 MiB and 8 MiB: larger than the socket buffers.
    let mut sizes = vec![1usize, 64, 1000, 4096, 65_536, 100_000];
    sizes.extend(std::iter::repeat_n(512, 115));
    sizes.extend([MIB, 8 * MIB]);
    let report = check_echo(server.addr, 1000, &sizes, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("echo check failed: {e}"));
    assert_eq!(report.connections_ok, 1000, "{report:?}");
    assert_eq!(
        report.peak_open, 1000,
        "all connections were open at once: {report:?}"
    );
}

#[test]
fn one_core_serves_large_messages() {
    let server = start_echo(1);
    let report = check_echo(
        server.addr,
        8,
        &[16 * MIB, 3, 1 << 20],
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("echo check failed: {e}"));
    assert_eq!(report.connections_ok, 8, "{report:?}");
}
