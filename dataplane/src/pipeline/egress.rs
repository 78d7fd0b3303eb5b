//! Egress: from a routing decision to a frame on the wire.
//!
//! - **Neighbour** (RFC 826): the next hop's MAC from a static neighbour or
//!   the ARP cache; at most one request per next hop per retry interval
//!   (`ArpCacheFull` when the cache has no room); an expired entry keeps
//!   forwarding while a unicast request re-confirms it. The fast path asks
//!   `fresh_neighbor`, memoized until the ARP cache changes.
//! - **Hold**: a frame whose next hop is not resolved yet is rewritten all
//!   the same and held until the ARP reply (`arphold`: `Consumed`, sent by
//!   `drain_held`); `ArpUnresolved` when the hold queue has no room — asked
//!   before anything is rewritten, so a refused frame is dropped unchanged.
//! - **Rewrite**, through the wire views: VLAN tag added, removed or
//!   rewritten for the egress interface (the only step that can fail:
//!   `NoHeadroom`), then the owner's sequence translation (R6, cluster),
//!   TTL decrement with an RFC 1624 incremental checksum update, MACs.
//! - **Generated frames**: ARP requests (for next hops, and for CCL peers on
//!   behalf of the cluster path) wait in a fixed queue for `drain_requests`;
//!   a full queue drops the request (`generated_dropped`), the retry
//!   interval brings it back.
//!
//! Invariants: nothing here allocates after `Egress::new`; a frame is
//! changed only once it is certain to leave (forwarded or held).

use super::arphold::{ArpHold, ArpHoldCounters, Hold};
use crate::frag::split::{self, Split, SplitError};
use super::context::{Outcome, Xlate};
use crate::cluster::SeqDelta;
use super::iface::{Iface, Interfaces};
use crate::arp::{ArpCache, ArpInfo, Resolve};
use crate::buf::PacketBuf;
use crate::route::IfIndex;
use crate::types::{DropReason, PortId, Timestamp};
use crate::wire::arp::{ArpRepr, Operation};
use crate::wire::ethernet::{self, ethertype, EthernetFrame, BROADCAST, TAG_LEN};
use crate::wire::icmp::Icmpv4Packet;
use crate::wire::ipv4::{self, Ipv4Packet};
use std::net::Ipv4Addr;

/// Frames queued by the pipeline between two `drain_generated` calls; more
/// are not queued (counted in `generated_dropped`), the ARP retry interval
/// brings them back.
pub const MAX_GENERATED: usize = 64;
/// Room for a generated frame: a tagged ARP request padded to the minimum
/// Ethernet frame size (IEEE 802.3 §4.4.2).
const GENERATED_LEN: usize = 64;
/// Bytes of egress fragments (all but each datagram's first, which leaves
/// in its own buffer) queued between two `drain_generated` calls: a burst
/// of 32 full 9000-byte datagrams split for MTU 1500 fits.
pub const FRAGMENT_QUEUE_BYTES: usize = 320 << 10;
/// Egress fragments queued at most between two `drain_generated` calls.
pub const FRAGMENT_QUEUE_FRAMES: usize = 512;

/// Egress counters (`Counters`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct EgressCounters {
    /// ARP requests queued for transmission.
    pub arp_requests: u64,
    /// Generated frames not queued because the queue was full.
    pub generated_dropped: u64,
    pub arp_hold: ArpHoldCounters,
    /// Datagrams split for a smaller egress MTU, and the fragments made
    /// (each datagram's first included).
    pub fragmented: u64,
    pub fragments: u64,
}

struct Generated {
    port: PortId,
    len: usize,
    frame: [u8; GENERATED_LEN],
}

/// `Egress::fresh_neighbor`'s last answer.
#[derive(Copy, Clone, Debug)]
struct NextHopMemo {
    ip: Ipv4Addr,
    mac: [u8; 6],
    /// `None`: a static neighbour (never expires).
    expires: Option<Timestamp>,
    generation: u64,
}

/// Where a routed frame goes: the route's answer and what the frame looks
/// like now.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Route {
    pub next_hop: Ipv4Addr,
    pub egress: IfIndex,
    /// VLAN tags on the frame (0 or 1) and its L2 header length.
    pub tags: u8,
    pub l2: usize,
}

pub(crate) struct Egress {
    arp: ArpCache,
    /// `PipelineConfig::static_neighbors`, searched linearly (a handful).
    static_neighbors: Vec<(Ipv4Addr, [u8; 6])>,
    hold: Box<ArpHold>,
    generated: Vec<Generated>,
    /// Egress fragments after each datagram's first (`FragmentQueue`).
    fragments: FragmentQueue,
    memo: Option<NextHopMemo>,
    pub counters: EgressCounters,
}

/// A fixed byte arena of frames waiting for `drain_generated`.
struct FragmentQueue {
    bytes: Box<[u8]>,
    used: usize,
    /// (port, start, len) in `bytes`, in order.
    frames: Vec<(PortId, usize, usize)>,
}

impl FragmentQueue {
    fn new() -> Self {
        FragmentQueue {
            bytes: vec![0u8; FRAGMENT_QUEUE_BYTES].into_boxed_slice(),
            used: 0,
            frames: Vec::with_capacity(FRAGMENT_QUEUE_FRAMES),
        }
    }
    /// Room for `n` more frames of `bytes` in total?
    fn room(&self, n: usize, bytes: usize) -> bool {
        self.frames.len() + n <= FRAGMENT_QUEUE_FRAMES && self.used + bytes <= self.bytes.len()
    }
    fn drain(&mut self, f: &mut impl FnMut(PortId, &[u8])) {
        for &(port, start, len) in &self.frames {
            if let Some(b) = self.bytes.get(start..start + len) {
                f(port, b);
            }
        }
        self.frames.clear();
        self.used = 0;
    }
}

impl Egress {
    /// `slot_len`: bytes per ARP-held frame's slot.
    pub fn new(arp: ArpCache, static_neighbors: Vec<(Ipv4Addr, [u8; 6])>, slot_len: usize) -> Self {
        Egress {
            arp,
            static_neighbors,
            hold: Box::new(ArpHold::new(slot_len)),
            generated: Vec::with_capacity(MAX_GENERATED),
            fragments: FragmentQueue::new(),
            memo: None,
            counters: EgressCounters::default(),
        }
    }

    /// The MAC of `ip` behind interface `ifx`: a static neighbour, else the
    /// ARP cache.
    pub fn neighbor(&mut self, now: Timestamp, ip: Ipv4Addr, ifx: IfIndex) -> Resolve {
        match self.static_neighbor(ip) {
            Some(mac) => Resolve::Mac(mac),
            None => self.arp.resolve(now, ip, ifx),
        }
    }

    /// The MAC of `ip` if it is a static neighbour.
    #[inline]
    fn static_neighbor(&self, ip: Ipv4Addr) -> Option<[u8; 6]> {
        self.static_neighbors.iter().find(|(a, _)| *a == ip).map(|&(_, mac)| mac)
    }

    /// The next hop's MAC if it is known without any ARP action now (a
    /// static neighbour, or a resolved entry that has not expired); the
    /// general path's `neighbor` answers the same without a change then.
    /// The last answer is memoized until the ARP cache changes
    /// (`ArpCache::generation`), the entry expires or another next hop is
    /// asked for.
    #[inline(always)]
    pub fn fresh_neighbor(&mut self, now: Timestamp, ip: Ipv4Addr) -> Option<[u8; 6]> {
        let generation = self.arp.generation();
        if let Some(m) = self.memo {
            if m.ip == ip && m.generation == generation && m.expires.is_none_or(|e| now < e) {
                return Some(m.mac);
            }
        }
        let (mac, expires) = match self.static_neighbor(ip) {
            Some(mac) => (mac, None),
            None => {
                let (mac, e) = self.arp.fresh(now, ip)?;
                (mac, Some(e))
            }
        };
        self.memo = Some(NextHopMemo { ip, mac, expires, generation });
        Some(mac)
    }

    /// The MAC of a CCL peer at `ip` on the CCL interface `ifx`; a miss
    /// sends a request (rate-limited by the ARP cache) and is
    /// `ClusterPeerUnresolved`.
    pub fn peer_mac(
        &mut self,
        now: Timestamp,
        ifaces: &Interfaces,
        ip: Ipv4Addr,
        ifx: IfIndex,
    ) -> Result<[u8; 6], DropReason> {
        let eg = ifaces.get(ifx).ok_or(DropReason::ClusterOwnerUnknown)?;
        match self.neighbor(now, ip, ifx) {
            Resolve::Mac(m) => Ok(m),
            Resolve::Refresh(m) => {
                self.queue_arp_request(eg, ip, m);
                Ok(m)
            }
            Resolve::SendRequest => {
                self.queue_arp_request(eg, ip, BROADCAST);
                Err(DropReason::ClusterPeerUnresolved)
            }
            Resolve::Wait => Err(DropReason::ClusterPeerUnresolved),
            Resolve::Full => Err(DropReason::ArpCacheFull),
        }
    }

    /// Keep a CCL peer resolved (timers): ask when the cache says so.
    pub fn refresh_peer(&mut self, now: Timestamp, eg: Iface, ip: Ipv4Addr, ifx: IfIndex) {
        match self.neighbor(now, ip, ifx) {
            Resolve::SendRequest => self.queue_arp_request(eg, ip, BROADCAST),
            Resolve::Refresh(m) => self.queue_arp_request(eg, ip, m),
            _ => {}
        }
    }

    /// An ARP packet on `ifx` says `ip` is at `mac` (`create`: it was
    /// addressed to us). Frames held for `ip` leave with the MAC.
    pub fn learn(&mut self, now: Timestamp, ip: Ipv4Addr, mac: [u8; 6], ifx: IfIndex, create: bool) {
        if self.arp.learn(now, ip, mac, ifx, create) && self.hold.len() > 0 {
            self.counters.arp_hold.released += self.hold.release(ip, mac);
        }
    }

    /// Resolve the next hop, rewrite the frame for the egress interface and
    /// send it (`Forward`) or hold it for the ARP reply (`Consumed`). `xlate`
    /// is the owner's sequence translation (cluster mode). On error the
    /// frame is unchanged.
    pub fn forward<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        ifaces: &Interfaces,
        r: Route,
        xlate: Option<Xlate>,
        buf: &mut B,
    ) -> Result<Outcome, DropReason> {
        let eg = ifaces.get(r.egress).ok_or(DropReason::NoRoute)?;
        // Larger than the egress MTU: split (RFC 1812 §5.2.6), or refused
        // with DF (the caller sends "fragmentation needed").
        let split = match split::plan(buf.data(), r.l2, usize::from(eg.mtu)) {
            Ok(s) if s.count > 1 => Some(s),
            Ok(_) => None,
            Err(SplitError::DontFragment) => return Err(DropReason::FragNeeded),
            Err(SplitError::MtuTooSmall) => return Err(DropReason::FragNeeded),
            Err(SplitError::BadHeader) => return Err(DropReason::Ipv4Truncated),
        };
        if let Some(s) = &split {
            if !self.fragments.room(s.count - 1, s.rest_bytes() + (s.count - 1) * TAG_LEN) {
                return Err(DropReason::FragNoBuffer);
            }
        }
        // Unresolved: rewrite all the same and hold the frame.
        let mac = self.resolve(now, eg, r.next_hop, r.egress)?;
        // A datagram to be split is not held (its fragments would need a
        // slot each): the ARP request went out, the sender retries.
        if mac.is_none() && (split.is_some() || !self.hold.can_hold(r.next_hop, buf.data().len() + TAG_LEN)) {
            return Err(DropReason::ArpUnresolved);
        }
        let l2 = retag(buf, r.tags, r.l2, eg.vlan)?;
        if let Some(x) = xlate {
            if x.quoted {
                apply_quoted(l2, x, buf)?;
            } else {
                apply_xlate(l2, x, buf)?;
            }
        }
        let d = buf.data_mut();
        let Some(l3) = d.get_mut(l2..) else {
            return Err(DropReason::EthTruncated);
        };
        if l3.len() < ipv4::MIN_HEADER_LEN {
            return Err(DropReason::Ipv4Truncated);
        }
        Ipv4Packet::new_unchecked(l3).decrement_ttl();
        ethernet::write_macs(d, mac.unwrap_or([0; 6]), eg.mac);
        if split.is_some() {
            // Split the rewritten frame (its L2 header may have changed).
            self.split(l2, eg, buf)?;
        }
        match mac {
            Some(_) => Ok(Outcome::Forward(eg.port)),
            None => {
                let wait = self.arp.give_up_after();
                self.hold_frame(now, r.next_hop.into(), eg.port, wait, buf.data(), DropReason::ArpUnresolved)
            }
        }
    }

    /// Hold `frame` for `next_hop` (counted); `refused` when there is no
    /// room.
    fn hold_frame(
        &mut self,
        now: Timestamp,
        next_hop: std::net::IpAddr,
        port: PortId,
        wait: crate::types::Duration,
        frame: &[u8],
        refused: DropReason,
    ) -> Result<Outcome, DropReason> {
        let c = &mut self.counters.arp_hold;
        match self.hold.hold(now, next_hop, port, wait, frame) {
            Hold::Held => c.held += 1,
            Hold::Replaced => {
                c.held += 1;
                c.replaced += 1;
            }
            Hold::Refused => return Err(refused),
        }
        Ok(Outcome::Consumed)
    }

    /// Split the rewritten datagram in `buf` (L2 header of `l2` bytes) for
    /// `eg`'s MTU: fragments 2.. into the queue, the first stays in `buf`.
    /// Room was checked by `forward`.
    fn split<B: PacketBuf>(&mut self, l2: usize, eg: Iface, buf: &mut B) -> Result<(), DropReason> {
        let s: Split = split::plan(buf.data(), l2, usize::from(eg.mtu)).map_err(|_| DropReason::FragNoBuffer)?;
        let q = &mut self.fragments;
        let (frames, used) = (q.frames.len(), q.used);
        for k in 1..s.count {
            let start = q.used;
            let out = q.bytes.get_mut(start..).unwrap_or(&mut []);
            let Some(n) = split::write_fragment(buf.data(), &s, k, out).filter(|_| q.frames.len() < FRAGMENT_QUEUE_FRAMES)
            else {
                // Never after `forward`'s room check; none of it goes out.
                q.frames.truncate(frames);
                q.used = used;
                return Err(DropReason::FragNoBuffer);
            };
            q.frames.push((eg.port, start, n));
            q.used += n;
        }
        let len = buf.data().len();
        let first = split::cut_first(buf.data_mut(), &s).ok_or(DropReason::FragNoBuffer)?;
        buf.trim_back(len - first);
        self.counters.fragmented += 1;
        self.counters.fragments += s.count as u64;
        Ok(())
    }

    /// The ARP cache (the ND cache copies its settings).
    pub fn arp(&self) -> &ArpCache {
        &self.arp
    }

    /// Hold `frame` (rewritten but for its destination MAC) for an IPv6
    /// next hop being solicited (the ARP hold, shared); `Consumed`, or
    /// `NdUnresolved` without room.
    pub fn hold_v6(&mut self, now: Timestamp, next_hop: std::net::Ipv6Addr, port: PortId, wait: crate::types::Duration, frame: &[u8]) -> Result<Outcome, DropReason> {
        self.hold_frame(now, next_hop.into(), port, wait, frame, DropReason::NdUnresolved)
    }

    /// An IPv6 neighbour is known now: its held frames leave.
    pub fn release_v6(&mut self, ip: std::net::Ipv6Addr, mac: [u8; 6]) {
        if self.hold.len() > 0 {
            self.counters.arp_hold.released += self.hold.release(ip, mac);
        }
    }

    /// Hand the queued egress fragments to `f`, in order.
    pub fn drain_fragments(&mut self, f: &mut impl FnMut(PortId, &[u8])) {
        self.fragments.drain(f);
    }

    /// The MAC to send to `next_hop` on `ifx` (out of `eg`) now, if
    /// known; a who-has goes out when it is not (or a re-confirmation of a
    /// stale entry, which is still used). `ArpCacheFull` when the cache has
    /// no room for a pending entry.
    pub fn resolve(&mut self, now: Timestamp, eg: Iface, next_hop: Ipv4Addr, ifx: IfIndex) -> Result<Option<[u8; 6]>, DropReason> {
        Ok(match self.neighbor(now, next_hop, ifx) {
            Resolve::Mac(m) => Some(m),
            Resolve::Refresh(m) => {
                self.queue_arp_request(eg, next_hop, m);
                Some(m)
            }
            Resolve::SendRequest => {
                self.queue_arp_request(eg, next_hop, BROADCAST);
                None
            }
            Resolve::Wait => None,
            Resolve::Full => return Err(DropReason::ArpCacheFull),
        })
    }

    /// Queue a who-has for `target` out of `eg`, to `dst` (broadcast, or
    /// the known MAC when re-confirming a stale entry).
    pub fn queue_arp_request(&mut self, eg: Iface, target: Ipv4Addr, dst: [u8; 6]) {
        if self.generated.len() >= MAX_GENERATED {
            self.counters.generated_dropped += 1;
            return;
        }
        let mut frame = [0u8; GENERATED_LEN];
        let l2 = ethernet::emit_header(&mut frame, dst, eg.mac, eg.vlan, ethertype::ARP);
        let Some(body) = frame.get_mut(l2..) else {
            return;
        };
        ArpRepr { operation: Operation::Request, sender_mac: eg.mac, sender_ip: eg.addr, target_mac: [0; 6], target_ip: target }
            .emit(body);
        let len = (l2 + crate::wire::arp::PACKET_LEN).max(ethernet::MIN_FRAME_LEN);
        self.generated.push(Generated { port: eg.port, len, frame });
        self.counters.arp_requests += 1;
    }

    /// Frames queued for `drain_requests`.
    pub fn generated_len(&self) -> usize {
        self.generated.len()
    }

    /// Hand the queued ARP requests to `f`, in order, and empty the queue.
    pub fn drain_requests(&mut self, f: &mut impl FnMut(PortId, &[u8])) {
        for g in self.generated.drain(..) {
            f(g.port, g.frame.get(..g.len).unwrap_or(&g.frame));
        }
    }

    /// Hand the held frames released by ARP replies to `f`.
    pub fn drain_held(&mut self, f: &mut impl FnMut(PortId, &[u8])) {
        self.hold.drain(f);
    }

    /// Age the ARP cache and drop held frames whose next hop stayed
    /// unresolved.
    pub fn timers(&mut self, now: Timestamp) {
        self.arp.age(now);
        self.counters.arp_hold.expired += self.hold.expire(now);
    }

    pub fn arp_entries(&self, now: Timestamp, names: &[String]) -> Vec<ArpInfo> {
        self.arp.entries(now, names)
    }
}

/// Add, remove or rewrite the VLAN tag for an egress interface with VLAN
/// `vlan`; returns the new L2 header length. The only rewrite step that can
/// fail, and it fails before anything changed.
pub(crate) fn retag<B: PacketBuf>(buf: &mut B, tags: u8, l2: usize, vlan: Option<u16>) -> Result<usize, DropReason> {
    match (tags, vlan) {
        (0, None) => Ok(l2),
        (0, Some(v)) => {
            if !buf.prepend(TAG_LEN) {
                return Err(DropReason::NoHeadroom);
            }
            // The MACs now sit 4 bytes early; they are rewritten last.
            if !ethernet::write_tag(buf.data_mut(), v) {
                return Err(DropReason::EthTruncated);
            }
            Ok(l2 + TAG_LEN)
        }
        (_, None) => {
            if !buf.trim_front(TAG_LEN) {
                return Err(DropReason::EthTruncated);
            }
            Ok(l2 - TAG_LEN)
        }
        (_, Some(v)) => {
            let mut eth = EthernetFrame::new_checked(buf.data_mut()).map_err(|_| DropReason::EthTruncated)?;
            eth.set_vlan(v);
            Ok(l2)
        }
    }
}

/// Apply the owner's sequence translation to the TCP segment at `l2`.
pub(crate) fn apply_xlate<B: PacketBuf>(l2: usize, x: Xlate, buf: &mut B) -> Result<(), DropReason> {
    let l3 = buf.data_mut().get_mut(l2..).ok_or(DropReason::EthTruncated)?;
    let mut ip = Ipv4Packet::new_checked(l3).map_err(|_| DropReason::Ipv4Truncated)?;
    if x.delta != SeqDelta::ZERO {
        crate::cluster::translate(ip.payload_mut(), x.dir, x.delta).map_err(|_| DropReason::L4Truncated)?;
    }
    if x.server != SeqDelta::ZERO {
        crate::cluster::translate(ip.payload_mut(), x.dir.opposite(), x.server).map_err(|_| DropReason::L4Truncated)?;
    }
    Ok(())
}

/// The owner's sequence translation of an IPv6 packet at `l2` whose
/// upper-layer header is at `off` in its payload (the extension chain was
/// walked on arrival): the TCP segment carried, or (`Xlate::quoted`) the
/// TCP header an ICMPv6 error quotes, whose checksum is then computed anew
/// (RFC 4443 §2.3: it covers the pseudo header).
pub(crate) fn apply_xlate6<B: PacketBuf>(l2: usize, off: usize, x: Xlate, buf: &mut B) -> Result<(), DropReason> {
    use crate::wire::{icmpv6, ipv6::Ipv6Packet};
    let l3 = buf.data_mut().get_mut(l2..).ok_or(DropReason::EthTruncated)?;
    let mut ip = Ipv6Packet::new_checked(l3).map_err(|_| DropReason::Ipv6Truncated)?;
    let (src, dst) = (ip.src(), ip.dst());
    let l4 = ip.payload_mut().get_mut(off..).ok_or(DropReason::L4Truncated)?;
    let steps = [(x.dir, x.delta), (x.dir.opposite(), x.server)];
    if !x.quoted {
        for (dir, delta) in steps.into_iter().filter(|s| s.1 != SeqDelta::ZERO) {
            crate::cluster::translate(l4, dir, delta).map_err(|_| DropReason::L4Truncated)?;
        }
        return Ok(());
    }
    let mut changed = false;
    if let Some(q) = icmpv6::quoted_tcp_mut(l4) {
        for (dir, delta) in steps.into_iter().filter(|s| s.1 != SeqDelta::ZERO) {
            changed |= crate::cluster::translate_quoted(q, dir, delta);
        }
    }
    if changed {
        icmpv6::fill_checksum(src, dst, l4);
    }
    Ok(())
}

/// An ICMP error quoting a translated segment (`Xlate::quoted`): the
/// quoted header goes back to its sender's sequence space (RFC 5927 §4.1),
/// the ICMP checksum is computed anew.
fn apply_quoted<B: PacketBuf>(l2: usize, x: Xlate, buf: &mut B) -> Result<(), DropReason> {
    let l3 = buf.data_mut().get_mut(l2..).ok_or(DropReason::EthTruncated)?;
    let mut ip = Ipv4Packet::new_checked(l3).map_err(|_| DropReason::Ipv4Truncated)?;
    let mut icmp = Icmpv4Packet::new_checked(ip.payload_mut()).map_err(|_| DropReason::L4Truncated)?;
    let (_, l4) = icmp.embedded_l4_mut().ok_or(DropReason::L4Truncated)?;
    let a = x.delta != SeqDelta::ZERO && crate::cluster::translate_quoted(l4, x.dir, x.delta);
    let b = x.server != SeqDelta::ZERO && crate::cluster::translate_quoted(l4, x.dir.opposite(), x.server);
    if a || b {
        icmp.fill_checksum();
    }
    Ok(())
}
