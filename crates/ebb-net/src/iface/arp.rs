//! ARP (RFC 826): resolution with retries through the neighbour cache (`arp_cache`), the bounded queue of
//! packets waiting for a resolution, replies, and gratuitous announcements.
//!
//! An entry is either **resolved** (a MAC, used until `entry_lifetime` after it was last
//! confirmed, then removed; the next packet resolves it again) or **pending** (requests
//! sent, `retry_interval` apart, up to `max_requests`, then given up: the waiting
//! packets are dropped and counted as [`TxDropReason::ArpFailed`]).
//!
//! Bounds: at most `arp_cache_entries` entries (a full cache evicts the resolved entry
//! closest to expiry; if all are pending, a new destination is refused), at most
//! `arp_pending_per_destination` packets waiting on one address and
//! `arp_pending_total` on all; a packet beyond either is dropped and counted as
//! [`TxDropReason::ArpQueueFull`] (`OutputError::Pending`).
//!
//! Learning follows RFC 826's merge rule: a packet from a sender we already know
//! refreshes its entry (and releases what waits on it); a sender we do not know is
//! learnt only if the packet is addressed to us.

use alloc::collections::VecDeque;
use alloc::vec;
use core::net::Ipv4Addr;

use ebb_core::{IOBuf, IOBufChain};

use super::arp_cache::Entry;
use super::counters::{RxDropReason, TxDropReason, bump};
use super::output::{ETH_LEN, IpOutput, set_dst_mac};
use crate::transport::OutputError;
use crate::wire::{
    ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame, EthernetRepr,
    WireError,
};

impl IpOutput {
    /// Sends `frame` to `ip` once its link address is known: at once if it is cached,
    /// otherwise parked in the wait queue (asking with a request if this is the first).
    pub(super) fn resolve_and_send(
        &mut self,
        ip: Ipv4Addr,
        mut frame: IOBufChain,
    ) -> Result<(), OutputError> {
        let (per_dest, total) = (
            self.limits.arp_pending_per_destination,
            self.limits.arp_pending_total,
        );
        let room_in_total = self.arp.waiting_total < total;
        match self.arp.entries_mut().get_mut(&ip) {
            Some(Entry::Resolved { mac, .. }) => {
                set_dst_mac(&mut frame, *mac);
                self.enqueue_tx(frame)
            }
            Some(Entry::Pending { waiting, .. }) => {
                if waiting.len() >= per_dest || !room_in_total {
                    return Err(self.fail(OutputError::Pending));
                }
                waiting.push_back(frame);
                self.arp.waiting_total += 1;
                Ok(())
            }
            None => {
                if per_dest == 0 || !room_in_total || !self.make_room_in_cache() {
                    return Err(self.fail(OutputError::Pending));
                }
                let mut waiting = VecDeque::new();
                waiting.push_back(frame);
                self.arp.waiting_total += 1;
                self.arp.entries_mut().insert(
                    ip,
                    Entry::Pending {
                        waiting,
                        requests_sent: 1,
                        next_request_at: self.now + self.arp_config.retry_interval,
                    },
                );
                self.send_arp_request(ip);
                Ok(())
            }
        }
    }

    /// Frees a slot for a new entry if the cache is full, by evicting the resolved
    /// entry closest to expiry; false if every entry is pending.
    fn make_room_in_cache(&mut self) -> bool {
        if self.arp.entries.len() < self.limits.arp_cache_entries {
            return true;
        }
        let victim = self
            .arp
            .entries
            .iter()
            .filter_map(|(ip, e)| match e {
                Entry::Resolved { expires_at, .. } => Some((*expires_at, *ip)),
                Entry::Pending { .. } => None,
            })
            .min();
        match victim {
            Some((_, ip)) => {
                self.arp.entries_mut().remove(&ip);
                true
            }
            None => false,
        }
    }

    /// Records that `ip` is at `mac` (refreshing its lifetime) and sends whatever waited.
    fn learn(&mut self, ip: Ipv4Addr, mac: EthernetAddress) {
        let expires_at = self.now + self.arp_config.entry_lifetime;
        let previous = self
            .arp
            .entries_mut()
            .insert(ip, Entry::Resolved { mac, expires_at });
        if let Some(Entry::Pending { waiting, .. }) = previous {
            self.arp.waiting_total -= waiting.len();
            for mut frame in waiting {
                set_dst_mac(&mut frame, mac);
                // A full transmit queue counts the drop inside.
                let _ = self.enqueue_tx(frame);
            }
        }
    }

    /// Handles a received ARP packet (the Ethernet payload).
    pub(super) fn receive_arp(&mut self, bytes: &[u8]) {
        let repr = match ArpPacket::new_checked(bytes).and_then(|p| ArpRepr::parse(&p)) {
            Ok(repr) => repr,
            Err(WireError::Unsupported) => {
                return self
                    .counters
                    .rx_dropped
                    .record(RxDropReason::ArpUnsupported);
            }
            Err(_) => return self.counters.rx_dropped.record(RxDropReason::ArpMalformed),
        };
        bump(&mut self.counters.rx_arp);
        let sender = repr.source_protocol_addr;
        let sender_mac = repr.source_hardware_addr;
        if sender_mac == self.mac || !sender_mac.is_unicast() {
            // Our own announcement looped back, or nonsense.
            return;
        }
        let ours = self.address();
        let for_us = ours.is_some() && ours == Some(repr.target_protocol_addr);
        // A probe (sender 0.0.0.0, RFC 5227) teaches nothing.
        if !sender.is_unspecified() && (self.arp.entries.contains_key(&sender) || for_us) {
            self.learn(sender, sender_mac);
        }
        if for_us && repr.operation == ArpOperation::Request {
            self.send_arp(ArpRepr {
                operation: ArpOperation::Reply,
                source_hardware_addr: self.mac,
                source_protocol_addr: repr.target_protocol_addr,
                target_hardware_addr: sender_mac,
                target_protocol_addr: sender,
            });
            bump(&mut self.counters.tx_arp_replies);
        }
    }

    /// Asks who has `ip`.
    fn send_arp_request(&mut self, ip: Ipv4Addr) {
        let Some(ours) = self.address() else { return };
        self.send_arp(ArpRepr {
            operation: ArpOperation::Request,
            source_hardware_addr: self.mac,
            source_protocol_addr: ours,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: ip,
        });
        bump(&mut self.counters.tx_arp_requests);
    }

    /// Announces our address (a request for it, from it, broadcast), so neighbours
    /// update caches that may hold an older owner's MAC.
    pub(super) fn send_gratuitous_arp(&mut self) {
        let Some(ours) = self.address() else { return };
        self.send_arp(ArpRepr {
            operation: ArpOperation::Request,
            source_hardware_addr: self.mac,
            source_protocol_addr: ours,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: ours,
        });
        bump(&mut self.counters.tx_arp_gratuitous);
    }

    /// Sends an ARP packet: replies to their asker, everything else broadcast.
    fn send_arp(&mut self, repr: ArpRepr) {
        let dst = if repr.operation == ArpOperation::Reply {
            repr.target_hardware_addr
        } else {
            EthernetAddress::BROADCAST
        };
        let mut bytes = vec![0u8; ETH_LEN + repr.buffer_len()];
        EthernetRepr {
            src_addr: self.mac,
            dst_addr: dst,
            ethertype: EtherType::Arp,
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut bytes[..ETH_LEN]));
        repr.emit(&mut ArpPacket::new_unchecked(&mut bytes[ETH_LEN..]));
        // A full transmit queue counts the drop inside; a retry or the peer's own
        // retry covers it.
        let _ = self.enqueue_tx(IOBufChain::from(IOBuf::from_vec(bytes)));
    }

    /// Timers: retries, give-ups and expiries due at `self.now`.
    pub(super) fn poll_arp(&mut self) {
        let now = self.now;
        let due: alloc::vec::Vec<Ipv4Addr> = self
            .arp
            .entries
            .iter()
            .filter(|(_, e)| match e {
                Entry::Resolved { expires_at, .. } => *expires_at <= now,
                Entry::Pending {
                    next_request_at, ..
                } => *next_request_at <= now,
            })
            .map(|(ip, _)| *ip)
            .collect();
        for ip in due {
            let max_requests = self.arp_config.max_requests;
            let retry_at = now + self.arp_config.retry_interval;
            match self.arp.entries_mut().get_mut(&ip) {
                Some(Entry::Resolved { .. }) => {
                    self.arp.entries_mut().remove(&ip);
                    bump(&mut self.counters.arp_expired);
                }
                Some(Entry::Pending {
                    requests_sent,
                    next_request_at,
                    ..
                }) if *requests_sent < max_requests => {
                    *requests_sent += 1;
                    *next_request_at = retry_at;
                    self.send_arp_request(ip);
                }
                Some(Entry::Pending { .. }) => {
                    if let Some(Entry::Pending { waiting, .. }) = self.arp.entries_mut().remove(&ip)
                    {
                        self.arp.waiting_total -= waiting.len();
                        self.counters
                            .tx_dropped
                            .record_n(TxDropReason::ArpFailed, waiting.len() as u64);
                    }
                    bump(&mut self.counters.arp_resolution_failures);
                }
                None => {}
            }
        }
    }

    /// Forgets every neighbour and drops what waits (the address changed).
    pub(super) fn flush_arp(&mut self) {
        let entries = core::mem::take(self.arp.entries_mut());
        for entry in entries.into_values() {
            if let Entry::Pending { waiting, .. } = entry {
                self.counters
                    .tx_dropped
                    .record_n(TxDropReason::Unreachable, waiting.len() as u64);
            }
        }
        self.arp.waiting_total = 0;
    }
}
