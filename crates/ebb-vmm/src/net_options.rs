//! The network options of a VM as a user writes them — `--net user|tap=NAME|xdp=IFACE`,
//! `-p [ADDR:]HOST:GUEST`, `--net-faults SPEC` — turned into a [`VmNetwork`]. Shared by
//! the `ebb-vmm` binary and the `ebb` command, so both accept and refuse the same things.

use crate::virtio::PortForward;
use crate::vm::{HostLinkConfig, VmNetwork};

/// The guest's MAC address on every backend (locally administered, unicast).
pub const GUEST_MAC: [u8; 6] = [0x02, 0xeb, 0xb0, 0, 0, 2];

/// A bad network option.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NetOptionError {
    /// `--net` is neither `user`, `tap=NAME` nor `xdp=IFACE`.
    #[error("--net {0:?}: expected user, tap=NAME or xdp=IFACE")]
    UnknownBackend(String),
    /// `tap=` without a name.
    #[error("--net tap= needs a device name (tap=NAME)")]
    NoTapName,
    /// `xdp=` without an interface.
    #[error("--net xdp= needs an interface name (xdp=IFACE)")]
    NoXdpInterface,
    /// Port forwards with a TAP device or an AF_XDP interface.
    #[error(
        "-p forwards ports of --net user; a TAP device or an AF_XDP interface is reached directly at the guest's address"
    )]
    ForwardsWithTap,
    /// A fault spec that does not parse.
    #[error(
        "--net-faults: bad item {0:?} (expected drop|reorder|duplicate|corrupt|delay=FRACTION or seed=N)"
    )]
    BadFaults(String),
}

/// Parses an `on|off` switch (`--net-offload`, `--huge-pages`); clap names the option in
/// its error.
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("{s:?}: expected on or off")),
    }
}

/// `--net` (`None`: not given), the `-p` forwards and `--net-faults`: a device with the
/// given backend; `-p` or `--net-faults` alone imply `--net user`; nothing at all is no
/// device (`Ok(None)`).
pub fn net_config(
    net: Option<&str>,
    forwards: &[PortForward],
    faults: Option<&str>,
) -> Result<Option<VmNetwork>, NetOptionError> {
    let faults = faults
        .map(|spec| ebb_net_driver::parse_fault_spec(spec).map_err(NetOptionError::BadFaults))
        .transpose()?;
    let link = match net {
        None if forwards.is_empty() && faults.is_none() => return Ok(None),
        None | Some("user") => HostLinkConfig::User(forwards.to_vec()),
        Some(tap) if tap.starts_with("tap=") => {
            let name = &tap["tap=".len()..];
            if name.is_empty() {
                return Err(NetOptionError::NoTapName);
            }
            if !forwards.is_empty() {
                return Err(NetOptionError::ForwardsWithTap);
            }
            HostLinkConfig::Tap(name.to_string())
        }
        Some(xdp) if xdp.starts_with("xdp=") => {
            let name = &xdp["xdp=".len()..];
            if name.is_empty() {
                return Err(NetOptionError::NoXdpInterface);
            }
            if !forwards.is_empty() {
                return Err(NetOptionError::ForwardsWithTap);
            }
            HostLinkConfig::Xdp(name.to_string())
        }
        Some(other) => return Err(NetOptionError::UnknownBackend(other.to_string())),
    };
    Ok(Some(VmNetwork {
        link,
        mac: GUEST_MAC,
        faults,
        offload: true,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_become_a_device_or_a_clear_error() {
        let fwd: PortForward = "8080:80".parse().unwrap();
        assert!(net_config(None, &[], None).unwrap().is_none());
        let user = net_config(None, &[fwd], None).unwrap().unwrap();
        assert!(matches!(user.link, HostLinkConfig::User(ref f) if f == &[fwd]));
        let tap = net_config(Some("tap=ebb0"), &[], Some("drop=0.5,seed=9"))
            .unwrap()
            .unwrap();
        assert!(matches!(tap.link, HostLinkConfig::Tap(ref n) if n == "ebb0"));
        assert_eq!(tap.faults.map(|f| f.1), Some(9));
        assert!(matches!(
            net_config(None, &[], Some("seed=2")).unwrap().unwrap().link,
            HostLinkConfig::User(_)
        ));
        assert_eq!(
            net_config(Some("tap=x"), &[fwd], None).unwrap_err(),
            NetOptionError::ForwardsWithTap
        );
        assert_eq!(
            net_config(Some("tap="), &[], None).unwrap_err(),
            NetOptionError::NoTapName
        );
        let xdp = net_config(Some("xdp=veth1"), &[], None).unwrap().unwrap();
        assert!(matches!(xdp.link, HostLinkConfig::Xdp(ref n) if n == "veth1"));
        assert_eq!(
            (xdp.checksum_offload(), xdp.segmentation_offload()),
            (false, false),
            "AF_XDP carries no checksum state"
        );
        assert_eq!(
            net_config(Some("xdp="), &[], None).unwrap_err(),
            NetOptionError::NoXdpInterface
        );
        assert_eq!(
            net_config(Some("xdp=v"), &[fwd], None).unwrap_err(),
            NetOptionError::ForwardsWithTap
        );
        assert!(matches!(
            net_config(Some("bridge"), &[], None),
            Err(NetOptionError::UnknownBackend(_))
        ));
        assert!(matches!(
            net_config(None, &[], Some("lose=1")),
            Err(NetOptionError::BadFaults(_))
        ));
    }

    #[test]
    fn segmentation_offload_needs_checksum_offload_a_tap_and_no_fault_injector() {
        let fwd: PortForward = "8080:80".parse().unwrap();
        let config = |net, forwards: &[PortForward], faults, offload| VmNetwork {
            offload,
            ..net_config(net, forwards, faults).unwrap().unwrap()
        };
        let offloads = |c: VmNetwork| {
            let device = c.device_offload();
            // Segmentation both ways or not at all: the same path carries both.
            assert_eq!(device.tso4, c.segmentation_offload());
            assert_eq!(device.guest_tso4, c.segmentation_offload());
            assert_eq!(device.checksum, c.checksum_offload());
            (c.checksum_offload(), c.segmentation_offload())
        };
        let tap = Some("tap=ebb0");
        assert_eq!(offloads(config(tap, &[], None, true)), (true, true));
        assert_eq!(
            offloads(config(tap, &[], Some("seed=1"), true)),
            (true, false)
        );
        assert_eq!(offloads(config(tap, &[], None, false)), (false, false));
        assert_eq!(
            offloads(config(Some("user"), &[fwd], None, true)),
            (false, false)
        );
    }
}
