//! The error of the network options (its own file: both platforms' option parsers
//! return it).

use alloc::string::String;

/// A bad network option.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NetConfigError {
    /// An option that takes a value came last.
    #[error("{0} needs a value")]
    MissingValue(String),
    /// A value that does not parse.
    #[error("bad {option} {value:?}: expected {expected}")]
    BadValue {
        /// The option.
        option: String,
        /// Its value.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// An ebb-net option without ebb-net (hosted, without `--tap` or `--xdp`).
    #[error("{0} applies to ebb-net: add --tap NAME or --xdp IFACE")]
    NeedsEbbNet(&'static str),
    /// `--tap` and `--xdp` together.
    #[error("--tap and --xdp are two devices for ebb-net: give one")]
    TapAndXdp,
    /// A TAP-only option with `--xdp`.
    #[error("{0} applies to --tap only")]
    TapOnly(&'static str),
    /// A Linux-sockets option with ebb-net.
    #[error("{0} applies to Linux sockets only (ebb-net's address is --ip A/P or --dhcp)")]
    SocketsOnly(&'static str),
    /// `--xdp` without `--ip` or `--dhcp`.
    #[error("{0} needs --ip A/P or --dhcp")]
    NeedsAddress(&'static str),
    /// `--gateway` without `--ip`.
    #[error("--gateway goes with --ip A/P")]
    GatewayWithoutIp,
    /// `--tap` without `--ip` or `--dhcp`.
    #[error("--tap needs --ip A/P or --dhcp")]
    TapNeedsAddress,
    /// A hosted-only option in a native image.
    #[error("{0} does not apply natively: the monitor attaches the network (ebb run --net)")]
    HostedOnly(&'static str),
}
