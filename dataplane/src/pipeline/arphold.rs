//! Frames waiting for their next hop's ARP reply: the egress stage's hold
//! queue (`pipeline::egress` owns it).
//!
//! RFC 1122 §2.3.2.2: "The link layer SHOULD save (rather than discard) at
//! least one (the latest) packet of each set of packets destined to the
//! same unresolved IP address, and transmit the saved packet when the
//! address has been resolved." Linux keeps a per-neighbour queue
//! (`unres_qlen_bytes`) and drops its oldest frame when it overflows; this
//! is the same with fixed memory:
//!
//! - a routed frame whose next hop is unresolved (the ARP request is out or
//!   was sent less than a retry interval ago) is copied, fully rewritten
//!   but for the destination MAC, into one of `HOLD_SLOTS` frame slots
//!   (`Verdict::Consumed`, `ArpHoldCounters::held`);
//! - at most `HOLD_PER_HOP` frames per next hop: one more replaces that hop's
//!   oldest (`replaced`), so the latest are kept;
//! - with every slot taken, or a frame too long for a slot, the frame is
//!   dropped as before (`arp-unresolved`);
//! - any ARP packet that stores a mapping for a next hop with frames held
//!   releases them, in arrival order, with the learnt MAC (`released`);
//!   `drain` hands them to the driver;
//! - a frame still held when its next hop's pending entry would be given up
//!   (`PENDING_RETRIES` retry intervals, the ARP cache's own limit) is
//!   dropped by `expire` (`expired`).
//!
//! A frame ends in exactly one of released, replaced, expired. Nothing here
//! allocates after `ArpHold::new`; per frame it is one slot scan (64 slots)
//! on the unresolved path only, never on the resolved one.

use crate::slots::{FramePool, SLOT_HEADROOM};
use crate::types::{Duration, PortId, Timestamp};
use crate::wire::ethernet::EthernetFrame;
use std::net::IpAddr;

/// Frame slots for held frames (2 KiB each: 128 KiB per worker).
pub const HOLD_SLOTS: usize = 64;
/// Frames held per next hop, at most.
pub const HOLD_PER_HOP: usize = 8;

/// What happened to held frames (`Counters`, `show stats`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ArpHoldCounters {
    /// Frames copied into the hold queue (`Verdict::Consumed`).
    pub held: u64,
    /// Sent once their next hop was resolved.
    pub released: u64,
    /// Dropped because their next hop stayed unresolved.
    pub expired: u64,
    /// Dropped to make room for a later frame to the same next hop.
    pub replaced: u64,
}

crate::impl_stats!(ArpHoldCounters { counter held, counter released, counter expired, counter replaced });

/// A held frame: waiting for `next_hop`'s MAC, to leave on `port`; `seq`
/// orders the held frames by arrival.
#[derive(Copy, Clone, Debug)]
struct Held {
    /// An IPv4 next hop (ARP) or an IPv6 one (Neighbor Discovery).
    next_hop: IpAddr,
    port: PortId,
    deadline: Timestamp,
    seq: u64,
}

pub(crate) struct ArpHold {
    /// Held frames are the pool's parked slots.
    pool: FramePool<Held>,
    /// Arrival order of held frames (oldest = smallest).
    seq: u64,
}

/// Outcome of `ArpHold::hold`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Hold {
    Held,
    /// Held, and the next hop's oldest frame was dropped for it.
    Replaced,
    /// No room: the caller drops the frame.
    Refused,
}

impl ArpHold {
    /// `slot_len`: bytes per held frame's slot (`slots::slot_len_for`).
    pub fn new(slot_len: usize) -> Self {
        ArpHold { pool: FramePool::new(HOLD_SLOTS, slot_len), seq: 0 }
    }

    /// Frames held now.
    pub fn len(&self) -> usize {
        self.pool.parked()
    }

    /// How many frames wait for `next_hop`, and the slot of the oldest.
    fn for_hop(&self, next_hop: IpAddr) -> (usize, Option<u16>) {
        let mut n = 0;
        let mut oldest: Option<(u64, u16)> = None;
        for (i, h) in self.pool.parked_slots() {
            if h.next_hop == next_hop {
                n += 1;
                if oldest.is_none_or(|(q, _)| h.seq < q) {
                    oldest = Some((h.seq, i));
                }
            }
        }
        (n, oldest.map(|(_, i)| i))
    }

    /// Whether `hold` will take a frame of up to `len` bytes for
    /// `next_hop` (asked before the frame is rewritten, so that a refused
    /// frame is dropped unchanged).
    pub fn can_hold(&self, next_hop: impl Into<IpAddr>, len: usize) -> bool {
        if SLOT_HEADROOM + len > self.pool.slot_len() {
            return false;
        }
        self.pool.parked() < self.pool.len() || self.for_hop(next_hop.into()).0 >= HOLD_PER_HOP
    }

    /// Copy `frame` (everything rewritten but the destination MAC) to wait
    /// for `next_hop`, to leave on `port`; `wait` is how long it may wait.
    pub fn hold(&mut self, now: Timestamp, next_hop: impl Into<IpAddr>, port: PortId, wait: Duration, frame: &[u8]) -> Hold {
        if SLOT_HEADROOM + frame.len() > self.pool.slot_len() {
            return Hold::Refused;
        }
        let next_hop = next_hop.into();
        let (n, oldest) = self.for_hop(next_hop);
        let mut done = Hold::Held;
        if let Some(i) = oldest.filter(|_| n >= HOLD_PER_HOP) {
            done = Hold::Replaced;
            self.pool.release(i);
        }
        let Some(i) = self.pool.alloc() else {
            return Hold::Refused;
        };
        if !self.pool.fill(i, frame) {
            self.pool.give_back(i);
            return Hold::Refused;
        }
        self.pool.park(i, Held { next_hop, port, deadline: now.saturating_add(wait), seq: self.seq });
        self.seq += 1;
        done
    }

    /// `next_hop` is at `mac` now: queue its frames for output, oldest
    /// first. Returns how many.
    pub fn release(&mut self, next_hop: impl Into<IpAddr>, mac: [u8; 6]) -> u64 {
        let next_hop = next_hop.into();
        let mut n = 0;
        while let (_, Some(i)) = self.for_hop(next_hop) {
            let Some(h) = self.pool.parked_meta(i) else {
                break;
            };
            if let Some(mut eth) = self.pool.frame_mut(i).and_then(|f| EthernetFrame::new_checked(f).ok()) {
                eth.set_dst(mac);
            }
            n += 1;
            self.pool.push_out(i, h.port);
        }
        n
    }

    /// Drop the frames whose wait is over. Returns how many.
    pub fn expire(&mut self, now: Timestamp) -> u64 {
        let mut n = 0;
        if self.pool.parked() == 0 {
            return n;
        }
        for i in 0..self.pool.len() as u16 {
            if self.pool.parked_meta(i).is_some_and(|h| h.deadline <= now) {
                n += 1;
                self.pool.release(i);
            }
        }
        n
    }

    /// Hand the released frames to `f` (from `drain_generated`).
    pub fn drain(&mut self, f: &mut impl FnMut(PortId, &[u8])) {
        self.pool.drain(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use crate::slots::SLOT_LEN;

    const HOP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
    const WAIT: Duration = Duration::from_millis(3000);

    fn frame(tag: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[20] = tag;
        f
    }

    fn drained(h: &mut ArpHold) -> Vec<(PortId, Vec<u8>)> {
        let mut v = Vec::new();
        h.drain(&mut |p, f| v.push((p, f.to_vec())));
        v
    }

    #[test]
    fn released_in_order_with_the_mac() {
        let mut h = ArpHold::new(SLOT_LEN);
        let t = Timestamp::from_secs(1);
        for k in 0..3 {
            assert_eq!(h.hold(t, HOP, PortId(1), WAIT, &frame(k)), Hold::Held);
        }
        assert_eq!(h.hold(t, Ipv4Addr::new(10, 0, 0, 2), PortId(2), WAIT, &frame(9)), Hold::Held);
        assert!(drained(&mut h).is_empty(), "nothing leaves before the reply");
        assert_eq!(h.release(HOP, MAC), 3);
        let out = drained(&mut h);
        assert_eq!(out.len(), 3);
        for (k, (p, f)) in out.iter().enumerate() {
            assert_eq!(*p, PortId(1));
            assert_eq!(f[..6], MAC);
            assert_eq!(f[6..], frame(k as u8)[6..]);
        }
        assert_eq!(h.len(), 1, "the other hop's frame stays");
        assert_eq!(h.release(HOP, MAC), 0);
    }

    #[test]
    fn per_hop_limit_keeps_the_latest() {
        let mut h = ArpHold::new(SLOT_LEN);
        let t = Timestamp::from_secs(1);
        let n = HOLD_PER_HOP as u8;
        for k in 0..n + 2 {
            let want = if k < n { Hold::Held } else { Hold::Replaced };
            assert_eq!(h.hold(t, HOP, PortId(1), WAIT, &frame(k)), want);
        }
        assert_eq!(h.len(), HOLD_PER_HOP);
        assert_eq!(h.release(HOP, MAC), u64::from(n));
        let tags: Vec<u8> = drained(&mut h).iter().map(|(_, f)| f[20]).collect();
        assert_eq!(tags, (2..n + 2).collect::<Vec<_>>());
    }

    #[test]
    fn full_pool_refuses_and_expiry_frees() {
        let mut h = ArpHold::new(SLOT_LEN);
        let t = Timestamp::from_secs(1);
        for n in 0..HOLD_SLOTS / HOLD_PER_HOP {
            for k in 0..HOLD_PER_HOP {
                let hop = Ipv4Addr::new(10, 1, n as u8, 1);
                assert_eq!(h.hold(t, hop, PortId(1), WAIT, &frame(k as u8)), Hold::Held);
            }
        }
        assert!(!h.can_hold(HOP, 60));
        assert_eq!(h.hold(t, HOP, PortId(1), WAIT, &frame(0)), Hold::Refused, "no slot left");
        let full_hop = Ipv4Addr::new(10, 1, 0, 1);
        assert!(h.can_hold(full_hop, 60), "a full hop replaces its oldest");
        assert_eq!(h.hold(t, full_hop, PortId(1), WAIT, &frame(0)), Hold::Replaced);
        assert_eq!(h.expire(t.saturating_add(Duration::from_millis(2999))), 0);
        assert_eq!(h.len(), HOLD_SLOTS);
        assert_eq!(h.expire(t.saturating_add(WAIT)), HOLD_SLOTS as u64);
        assert_eq!(h.len(), 0);
        assert!(drained(&mut h).is_empty(), "expired frames never leave");
        assert_eq!(h.hold(t, HOP, PortId(1), WAIT, &frame(0)), Hold::Held);
        assert_eq!(h.release(HOP, MAC), 1);
        assert_eq!(drained(&mut h).len(), 1);
    }

    #[test]
    fn too_long_for_a_slot_is_refused() {
        let mut h = ArpHold::new(SLOT_LEN);
        let big = vec![0u8; SLOT_LEN - SLOT_HEADROOM + 1];
        assert!(!h.can_hold(HOP, big.len()));
        assert_eq!(h.hold(Timestamp::from_secs(1), HOP, PortId(1), WAIT, &big), Hold::Refused);
        assert_eq!(h.len(), 0);
        let fits = vec![0u8; SLOT_LEN - SLOT_HEADROOM];
        assert_eq!(h.hold(Timestamp::from_secs(1), HOP, PortId(1), WAIT, &fits), Hold::Held);
    }
}
