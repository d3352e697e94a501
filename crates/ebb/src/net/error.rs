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
    /// An ebb-net option without ebb-net (hosted, without `--tap`).
    #[error("{0} applies to ebb-net: add --tap NAME")]
    NeedsEbbNet(&'static str),
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
