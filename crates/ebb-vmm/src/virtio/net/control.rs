//! The control queue: the driver's commands (only `VQ_PAIRS_SET` of the MQ class).

use crate::guest::GuestMem;
use crate::virtio::queue::Chain;
use ebb_abi::virtio::{NET_CTRL_MQ, NET_CTRL_MQ_VQ_PAIRS_SET, NET_ERR, NET_OK};

/// Handles one control command; returns the ack byte.
pub(super) fn control_command(
    mem: &GuestMem,
    chain: &Chain,
    max_pairs: u16,
    active: &mut usize,
) -> u8 {
    let mut bytes = Vec::new();
    for buf in &chain.readable {
        match mem.read_bytes(buf.addr, u64::from(buf.len).min(64)) {
            Some(b) => bytes.extend(b),
            None => return NET_ERR,
        }
    }
    match bytes.as_slice() {
        [class, cmd, lo, hi, ..] if *class == NET_CTRL_MQ && *cmd == NET_CTRL_MQ_VQ_PAIRS_SET => {
            let n = u16::from_le_bytes([*lo, *hi]);
            if (1..=max_pairs).contains(&n) {
                *active = usize::from(n);
                NET_OK
            } else {
                NET_ERR
            }
        }
        _ => NET_ERR,
    }
}
