//! The neighbour cache ARP (`arp`) keeps: per address, a resolved MAC with its expiry or
//! a pending resolution with the packets waiting on it.
//!
//! Invariant: `entries` changes only through [`ArpCache::entries_mut`], which forgets the
//! cached earliest deadline and the cached last lookup; `waiting_total` is the number of packets in all pending
//! entries (kept by `arp`, which moves packets in and out).

use alloc::collections::{BTreeMap, VecDeque};
use core::cell::Cell;
use core::net::Ipv4Addr;

use ebb_core::{IOBufChain, Instant};

use crate::wire::EthernetAddress;

/// One neighbour.
#[derive(Debug)]
pub(super) enum Entry {
    Resolved {
        mac: EthernetAddress,
        expires_at: Instant,
    },
    Pending {
        waiting: VecDeque<IOBufChain>,
        requests_sent: u32,
        next_request_at: Instant,
    },
}

/// The neighbour cache.
#[derive(Debug, Default)]
pub(super) struct ArpCache {
    /// Changed only through [`entries_mut`](Self::entries_mut), which forgets
    /// `next_deadline`.
    pub(super) entries: BTreeMap<Ipv4Addr, Entry>,
    /// Packets waiting in all pending entries.
    pub(super) waiting_total: usize,
    /// [`poll_at`](Self::poll_at)'s answer while `entries` is unchanged (`None`: not
    /// known), so polling the interface does not walk the cache every time.
    next_deadline: Cell<Option<Option<Instant>>>,
    /// The last resolved [`lookup`](Self::lookup), while `entries` is unchanged: every
    /// segment sent looks up its next hop, nearly always the same one, and the tree
    /// walk cost about 20 instructions a segment.
    last: Cell<Option<(Ipv4Addr, EthernetAddress)>>,
}

impl ArpCache {
    /// The resolved link address of `ip`.
    pub(super) fn lookup(&self, ip: Ipv4Addr) -> Option<EthernetAddress> {
        if let Some((last_ip, mac)) = self.last.get()
            && last_ip == ip
        {
            return Some(mac);
        }
        match self.entries.get(&ip)? {
            Entry::Resolved { mac, .. } => {
                self.last.set(Some((ip, *mac)));
                Some(*mac)
            }
            Entry::Pending { .. } => None,
        }
    }

    /// How many entries there are, resolved or not.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Packets waiting for resolutions.
    pub(super) fn waiting(&self) -> usize {
        self.waiting_total
    }

    /// The entries, for changing them: forgets the cached earliest deadline.
    pub(super) fn entries_mut(&mut self) -> &mut BTreeMap<Ipv4Addr, Entry> {
        self.next_deadline.set(None);
        self.last.set(None);
        &mut self.entries
    }

    /// The earliest retry or expiry. The cached answer inline, the scan out of line:
    /// every stack poll asks twice, and the scan's register saves cost the cached
    /// answer ~18 instructions a request when they were one function.
    #[inline]
    pub(super) fn poll_at(&self) -> Option<Instant> {
        match self.next_deadline.get() {
            Some(known) => known,
            None => self.find_poll_at(),
        }
    }

    /// [`poll_at`](Self::poll_at) after the entries changed: scans them and caches it.
    #[inline(never)]
    fn find_poll_at(&self) -> Option<Instant> {
        let next = self.earliest_deadline();
        self.next_deadline.set(Some(next));
        next
    }

    /// The earliest retry or expiry, from the entries themselves.
    fn earliest_deadline(&self) -> Option<Instant> {
        self.entries
            .values()
            .map(|e| match e {
                Entry::Resolved { expires_at, .. } => *expires_at,
                Entry::Pending {
                    next_request_at, ..
                } => *next_request_at,
            })
            .min()
    }
}
