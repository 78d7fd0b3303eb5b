//! Per-worker connection tracking: one table entry per connection, serving
//! both directions, with a TCP state machine and sequence-window check
//! ([`tcp`]) and idle-timer pseudo-flows for UDP, ICMP echo and other
//! protocols.
//!
//! Layout. Flow state lives in a slab (`Vec<Slot>`, `capacity` slots, a
//! free-index stack) and an index `hashbrown::HashTable<u32>` maps a
//! canonical key to a slot. The key orders the two endpoints so that the
//! smaller `(family, address, port)` comes first; the slot records which
//! endpoint initiated, so a packet's [`Direction`] falls out of the same single
//! hash lookup in either direction. The key lives only in the slab (the index
//! stores 4-byte slot numbers and compares keys through the slab), which keeps
//! the index at a few bytes per flow.
//!
//! Invariants:
//! - `len() <= capacity()`; a new flow is refused with
//!   [`DropReason::FlowTableFull`] when `len() == capacity()`.
//! - Nothing allocates after [`ConnTable::new`]. The index is reserved for
//!   `2 * capacity` entries: hashbrown re-uses tombstones by rehashing in
//!   place (no allocation) only while `items + 1 <= usable / 2`, and grows
//!   otherwise; reserving twice the flow limit makes every insert fall on the
//!   in-place side, however much churn has left tombstones behind.
//! - A slot is in the index iff it is `live`; a free slot's index is on the
//!   free stack exactly once.
//! - A flow idle for at least its state's timeout is dead: `track` treats it
//!   as absent (removing it on the spot), `expire` reclaims it, `snapshot`
//!   hides it. `lookup` has no clock and may still report such a flow until it
//!   is reclaimed.
//! - A rejected packet (`Err`) changes no flow state and does not refresh the
//!   idle timer.
//! - No panics on the `track` path: slot accesses go through `get`/`get_mut`.

pub mod tcp;

#[cfg(test)]
mod tests;

use crate::types::{Direction, DropReason, Duration, FiveTuple, Timestamp};
use core::hash::{BuildHasher, Hash, Hasher};
use hashbrown::{DefaultHashBuilder, HashTable};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use tcp::{SeqNumber, TcpState};

/// Idle timeouts per state. A flow whose last accepted packet is at least
/// this old is removed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// SYN_SENT / SYN_RECV (half-open; keep short against SYN floods).
    pub tcp_syn: Duration,
    pub tcp_established: Duration,
    /// One or both FINs seen.
    pub tcp_closing: Duration,
    /// TIME_WAIT (both FINs acked) and CLOSED (RST).
    pub tcp_closed: Duration,
    pub udp: Duration,
    /// ICMP echo pseudo-flows.
    pub icmp: Duration,
    /// Any other protocol.
    pub other: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            tcp_syn: Duration::from_secs(30),
            tcp_established: Duration::from_secs(3600),
            tcp_closing: Duration::from_secs(120),
            tcp_closed: Duration::from_secs(10),
            udp: Duration::from_secs(120),
            icmp: Duration::from_secs(10),
            other: Duration::from_secs(60),
        }
    }
}

/// TCP header flag bits (RFC 9293 §3.1, RFC 3168 §6.1 for ECE/CWR).
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// The TCP header fields conntrack needs, already parsed.
#[derive(Copy, Clone, Debug)]
pub struct TcpSeg {
    pub flags: u8,
    pub seq: u32,
    pub ack: u32,
    /// Raw (unscaled) window field.
    pub window: u16,
    pub payload_len: u32,
    /// Window-scale option (SYN / SYN-ACK only).
    pub wscale: Option<u8>,
    pub sack_permitted: bool,
}

/// Layer-4 summary of a packet.
#[derive(Copy, Clone, Debug)]
pub enum L4Info {
    Tcp(TcpSeg),
    Udp,
    IcmpEchoRequest,
    IcmpEchoReply,
    /// ICMP errors and anything else, stateless-by-ACL
    Other,
}

/// Names one flow slot. Valid until the flow is removed; slots are reused.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowHandle(u32);

impl FlowHandle {
    pub const fn index(self) -> u32 {
        self.0
    }
}

/// Outcome of tracking one accepted packet.
#[derive(Copy, Clone, Debug)]
pub struct Tracked {
    pub handle: FlowHandle,
    /// The packet's direction relative to the flow's initiator.
    pub dir: Direction,
    /// This packet created the flow.
    pub created: bool,
}

/// One line of `show conn`.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ConnInfo {
    /// In the original direction.
    pub tuple: FiveTuple,
    pub state: &'static str,
    pub idle_ms: u64,
    pub expires_in_ms: u64,
    /// `[original, reply]`.
    pub packets: [u64; 2],
    /// `[original, reply]`.
    pub bytes: [u64; 2],
    /// Cluster mode: this node's role for the connection (owner,
    /// director, backup, forwarder).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// Cluster mode: the owner's node id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<crate::types::NodeId>,
}

/// Table counters (drops are counted by the caller through `DropReason`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConnStats {
    /// Flows created (including reopened ones).
    pub created: u64,
    /// Flows removed because they were idle beyond their timeout (by
    /// `expire`, or found dead by `track`).
    pub expired: u64,
    /// TIME_WAIT / CLOSED TCP flows replaced by a new SYN on the same tuple.
    pub reopened: u64,
}

/// Which state machine a flow runs; part of the key so that, e.g., an ICMP
/// error with ports (0, 0) never lands on an echo flow with identifier 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Class {
    Tcp = 0,
    Udp = 1,
    IcmpEcho = 2,
    Other = 3,
}

impl Class {
    fn of(l4: &L4Info) -> Class {
        match l4 {
            L4Info::Tcp(_) => Class::Tcp,
            L4Info::Udp => Class::Udp,
            L4Info::IcmpEchoRequest | L4Info::IcmpEchoReply => Class::IcmpEcho,
            L4Info::Other => Class::Other,
        }
    }
}

const META_LO_V6: u8 = 0x01;
const META_HI_V6: u8 = 0x02;
const META_CLASS_SHIFT: u32 = 2;

/// Canonical, direction-free flow key: 38 bytes (an `IpAddr` five-tuple is
/// 40, and would not be canonical). IPv4 addresses occupy the first 4 bytes;
/// the family of each endpoint is in `meta`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
struct Key {
    lo: [u8; 16],
    hi: [u8; 16],
    lo_port: u16,
    hi_port: u16,
    proto: u8,
    /// bit 0: `lo` is IPv6; bit 1: `hi` is IPv6; bits 2-3: [`Class`].
    meta: u8,
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let w = |b: &[u8; 16], at: usize| {
            let mut x = [0u8; 8];
            if let Some(s) = b.get(at..at + 8) {
                x.copy_from_slice(s);
            }
            u64::from_ne_bytes(x)
        };
        h.write_u64(w(&self.lo, 0));
        h.write_u64(w(&self.lo, 8));
        h.write_u64(w(&self.hi, 0));
        h.write_u64(w(&self.hi, 8));
        h.write_u64(
            u64::from(self.lo_port)
                | u64::from(self.hi_port) << 16
                | u64::from(self.proto) << 32
                | u64::from(self.meta) << 40,
        );
    }
}

fn addr_bytes(a: &IpAddr) -> (bool, [u8; 16]) {
    match a {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            let o = v4.octets();
            b[0] = o[0];
            b[1] = o[1];
            b[2] = o[2];
            b[3] = o[3];
            (false, b)
        }
        IpAddr::V6(v6) => (true, v6.octets()),
    }
}

fn bytes_addr(v6: bool, b: &[u8; 16]) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(*b))
    } else {
        IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    }
}

impl Key {
    /// The canonical key of `t`, and whether the packet travels from the
    /// key's `lo` endpoint to its `hi` endpoint.
    fn new(t: &FiveTuple, class: Class) -> (Key, bool) {
        let (sv6, sa) = addr_bytes(&t.src);
        let (dv6, da) = addr_bytes(&t.dst);
        let from_lo = (sv6, sa, t.src_port) <= (dv6, da, t.dst_port);
        let ((lv6, la, lp), (hv6, ha, hp)) = if from_lo {
            ((sv6, sa, t.src_port), (dv6, da, t.dst_port))
        } else {
            ((dv6, da, t.dst_port), (sv6, sa, t.src_port))
        };
        let mut meta = (class as u8) << META_CLASS_SHIFT;
        if lv6 {
            meta |= META_LO_V6;
        }
        if hv6 {
            meta |= META_HI_V6;
        }
        (Key { lo: la, hi: ha, lo_port: lp, hi_port: hp, proto: t.proto, meta }, from_lo)
    }

    /// The tuple as sent by the `lo` endpoint.
    fn tuple_from_lo(&self) -> FiveTuple {
        FiveTuple {
            src: bytes_addr(self.meta & META_LO_V6 != 0, &self.lo),
            dst: bytes_addr(self.meta & META_HI_V6 != 0, &self.hi),
            proto: self.proto,
            src_port: self.lo_port,
            dst_port: self.hi_port,
        }
    }
}

/// Per-flow protocol state.
#[derive(Copy, Clone, Debug)]
enum FlowKind {
    Tcp(tcp::TcpConn),
    Udp,
    IcmpEcho,
    Other,
}

/// One slab entry.
#[derive(Copy, Clone, Debug)]
struct Slot {
    key: Key,
    live: bool,
    /// The initiator is the key's `lo` endpoint.
    orig_is_lo: bool,
    kind: FlowKind,
    last_seen: Timestamp,
    packets: [u64; 2],
    bytes: [u64; 2],
}

const FREE_SLOT: Slot = Slot {
    key: Key { lo: [0; 16], hi: [0; 16], lo_port: 0, hi_port: 0, proto: 0, meta: 0 },
    live: false,
    orig_is_lo: true,
    kind: FlowKind::Other,
    last_seen: Timestamp::ZERO,
    packets: [0; 2],
    bytes: [0; 2],
};

impl Slot {
    fn timeout(&self, t: &Timeouts) -> Duration {
        match &self.kind {
            FlowKind::Tcp(c) => match c.state {
                TcpState::SynSent | TcpState::SynReceived => t.tcp_syn,
                TcpState::Established => t.tcp_established,
                TcpState::FinWait | TcpState::Closing => t.tcp_closing,
                TcpState::TimeWait | TcpState::Closed => t.tcp_closed,
            },
            FlowKind::Udp => t.udp,
            FlowKind::IcmpEcho => t.icmp,
            FlowKind::Other => t.other,
        }
    }

    /// Idle for at least the state's timeout.
    fn is_dead(&self, now: Timestamp, t: &Timeouts) -> bool {
        now.since(self.last_seen) >= self.timeout(t)
    }

    fn state_name(&self) -> &'static str {
        match &self.kind {
            FlowKind::Tcp(c) => c.state.as_str(),
            FlowKind::Udp => "UDP",
            FlowKind::IcmpEcho => "ICMP_ECHO",
            FlowKind::Other => "OTHER",
        }
    }

    fn dir_of(&self, from_lo: bool) -> Direction {
        if from_lo == self.orig_is_lo {
            Direction::Original
        } else {
            Direction::Reply
        }
    }

    fn count(&mut self, now: Timestamp, dir: Direction, len_bytes: u32) {
        let i = match dir {
            Direction::Original => 0,
            Direction::Reply => 1,
        };
        self.last_seen = now;
        if let Some(p) = self.packets.get_mut(i) {
            *p = p.wrapping_add(1);
        }
        if let Some(b) = self.bytes.get_mut(i) {
            *b = b.wrapping_add(u64::from(len_bytes));
        }
    }
}

/// What `track` decided about an existing entry.
enum Existing {
    Tracked(Tracked),
    /// The entry was removed (dead, or a TCP reopen); treat as no flow.
    Gone {
        reopen: bool,
    },
}

/// One worker's connection table. See the module documentation.
pub struct ConnTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    timeouts: Timeouts,
    len: usize,
    cursor: usize,
    stats: ConnStats,
}

impl ConnTable {
    /// A table for up to `capacity` flows (at most `u32::MAX`), with all
    /// memory reserved now.
    pub fn new(capacity: usize, timeouts: Timeouts) -> Self {
        let capacity = capacity.min(u32::MAX as usize);
        let slots = vec![FREE_SLOT; capacity];
        let mut free = Vec::with_capacity(capacity);
        free.extend((0..capacity as u32).rev());
        let index = HashTable::with_capacity(capacity.saturating_mul(2));
        ConnTable {
            slots,
            free,
            index,
            hasher: DefaultHashBuilder::default(),
            timeouts,
            len: 0,
            cursor: 0,
            stats: ConnStats::default(),
        }
    }

    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    pub fn stats(&self) -> ConnStats {
        self.stats
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Track one packet. `tuple` is the packet's own 5-tuple (for ICMP echo:
    /// request → (src_port = id, dst_port = 0), reply → (0, id)).
    ///
    /// Existing flow: check and update its state, refresh its idle timer,
    /// return `created: false`. No flow, and the packet may open one (TCP
    /// SYN without ACK/RST/FIN; UDP; ICMP echo request; other): call `admit`
    /// once and create the flow if it allows (`Direction::Original` = this
    /// packet's direction). A SYN on a TIME_WAIT/CLOSED flow replaces it the
    /// same way. `admit` runs before the capacity check, so denied traffic
    /// is reported as `AclDenied` whether or not the table is full; an
    /// admitted flow that does not fit is `FlowTableFull`. Never allocates,
    /// never panics.
    pub fn track(
        &mut self,
        now: Timestamp,
        tuple: &FiveTuple,
        l4: &L4Info,
        len_bytes: u32,
        admit: impl FnOnce() -> bool,
    ) -> Result<Tracked, DropReason> {
        if let L4Info::Tcp(seg) = l4 {
            if !tcp::flags_valid(seg.flags) {
                return Err(DropReason::TcpBadFlags);
            }
        }
        let (key, from_lo) = Key::new(tuple, Class::of(l4));
        let hash = self.hasher.hash_one(key);
        if let Some(i) = self.find(hash, &key) {
            match self.on_existing(i, now, from_lo, l4, len_bytes)? {
                Existing::Tracked(t) => return Ok(t),
                Existing::Gone { reopen } => {
                    if reopen {
                        self.stats.reopened += 1;
                    } else {
                        self.stats.expired += 1;
                    }
                }
            }
        }

        let may_open = match l4 {
            L4Info::Tcp(seg) => tcp::is_opening_syn(seg.flags),
            L4Info::Udp | L4Info::IcmpEchoRequest | L4Info::Other => true,
            L4Info::IcmpEchoReply => false,
        };
        if !may_open {
            return Err(match l4 {
                L4Info::Tcp(_) => DropReason::TcpNoFlow,
                _ => DropReason::NoFlow,
            });
        }
        if !admit() {
            return Err(DropReason::AclDenied);
        }
        if self.len >= self.slots.len() {
            return Err(DropReason::FlowTableFull);
        }
        let Some(i) = self.free.pop() else {
            return Err(DropReason::FlowTableFull);
        };
        let kind = match l4 {
            L4Info::Tcp(seg) => FlowKind::Tcp(tcp::TcpConn::from_syn(seg)),
            L4Info::Udp => FlowKind::Udp,
            L4Info::IcmpEchoRequest | L4Info::IcmpEchoReply => FlowKind::IcmpEcho,
            L4Info::Other => FlowKind::Other,
        };
        let Some(slot) = self.slots.get_mut(i as usize) else {
            self.free.push(i);
            return Err(DropReason::FlowTableFull);
        };
        *slot = Slot { key, live: true, orig_is_lo: from_lo, kind, ..FREE_SLOT };
        slot.count(now, Direction::Original, len_bytes);
        let slots = &self.slots;
        let hasher = &self.hasher;
        self.index.insert_unique(hash, i, |&j| slots.get(j as usize).map_or(0, |s| hasher.hash_one(s.key)));
        self.len += 1;
        self.stats.created += 1;
        Ok(Tracked { handle: FlowHandle(i), dir: Direction::Original, created: true })
    }

    fn on_existing(
        &mut self,
        i: u32,
        now: Timestamp,
        from_lo: bool,
        l4: &L4Info,
        len_bytes: u32,
    ) -> Result<Existing, DropReason> {
        let timeouts = self.timeouts;
        let Some(slot) = self.slots.get_mut(i as usize) else {
            return Err(DropReason::FlowTableFull);
        };
        if slot.is_dead(now, &timeouts) {
            self.remove(i);
            return Ok(Existing::Gone { reopen: false });
        }
        let dir = slot.dir_of(from_lo);
        if let (FlowKind::Tcp(conn), L4Info::Tcp(seg)) = (&mut slot.kind, l4) {
            if conn.on_segment(dir, seg)? == tcp::Accept::Reopen {
                self.remove(i);
                return Ok(Existing::Gone { reopen: true });
            }
        }
        slot.count(now, dir, len_bytes);
        Ok(Existing::Tracked(Tracked { handle: FlowHandle(i), dir, created: false }))
    }

    fn find(&self, hash: u64, key: &Key) -> Option<u32> {
        let slots = &self.slots;
        self.index.find(hash, |&j| slots.get(j as usize).is_some_and(|s| s.key == *key)).copied()
    }

    /// Forget slot `i` (no-op if it is not live).
    fn remove(&mut self, i: u32) {
        let Some(slot) = self.slots.get_mut(i as usize) else { return };
        if !slot.live {
            return;
        }
        let hash = self.hasher.hash_one(slot.key);
        if let Ok(e) = self.index.find_entry(hash, |&j| j == i) {
            e.remove();
        }
        *slot = FREE_SLOT;
        // Cannot exceed capacity: `i` was live, so it is not on the stack.
        self.free.push(i);
        self.len = self.len.saturating_sub(1);
    }

    /// Is there a flow for this tuple (either direction)? For matching ICMP
    /// errors to the connection they quote; tries the TCP/UDP/other classes
    /// by `tuple.proto`. Does not know the time, so it may report a flow that
    /// is past its timeout but not yet reclaimed.
    pub fn lookup(&self, tuple: &FiveTuple) -> Option<(FlowHandle, Direction)> {
        use crate::types::ip_proto;
        let class = match tuple.proto {
            ip_proto::TCP => Class::Tcp,
            ip_proto::UDP => Class::Udp,
            ip_proto::ICMP | ip_proto::ICMPV6 => Class::IcmpEcho,
            _ => Class::Other,
        };
        let try_class = |class: Class| {
            let (key, from_lo) = Key::new(tuple, class);
            let i = self.find(self.hasher.hash_one(key), &key)?;
            let slot = self.slots.get(i as usize)?;
            Some((FlowHandle(i), slot.dir_of(from_lo)))
        };
        try_class(class).or_else(|| if class == Class::IcmpEcho { try_class(Class::Other) } else { None })
    }

    /// Remove flows idle beyond their state's timeout, inspecting at most
    /// `budget` slots from where the previous call stopped. Returns how many
    /// were removed.
    pub fn expire(&mut self, now: Timestamp, budget: usize) -> usize {
        let cap = self.slots.len();
        if cap == 0 {
            return 0;
        }
        let timeouts = self.timeouts;
        let mut removed = 0;
        for _ in 0..budget.min(cap) {
            let i = if self.cursor < cap { self.cursor } else { 0 };
            self.cursor = if i + 1 < cap { i + 1 } else { 0 };
            let dead = self.slots.get(i).is_some_and(|s| s.live && s.is_dead(now, &timeouts));
            if dead {
                self.remove(i as u32);
                removed += 1;
            }
        }
        self.stats.expired += removed as u64;
        removed
    }

    /// Append up to `max` live flows to `out` (off the packet path; may
    /// allocate into `out`).
    pub fn snapshot(&self, now: Timestamp, max: usize, out: &mut Vec<ConnInfo>) {
        let t = &self.timeouts;
        for s in self.slots.iter().filter(|s| s.live && !s.is_dead(now, t)).take(max) {
            let from_lo = s.key.tuple_from_lo();
            let (tuple, packets, bytes) = (if s.orig_is_lo { from_lo } else { from_lo.reversed() }, s.packets, s.bytes);
            let idle = now.since(s.last_seen);
            out.push(ConnInfo {
                tuple,
                state: s.state_name(),
                idle_ms: idle.0 / 1_000_000,
                expires_in_ms: s.timeout(t).0.saturating_sub(idle.0) / 1_000_000,
                packets,
                bytes,
                role: None,
                owner: None,
            });
        }
    }

    /// Remove all flows (keeps the reserved memory).
    pub fn clear(&mut self) {
        self.index.clear();
        self.slots.fill(FREE_SLOT);
        self.free.clear();
        self.free.extend((0..self.slots.len() as u32).rev());
        self.len = 0;
        self.cursor = 0;
    }

    /// Bytes reserved per flow slot: the slab, the free stack and the
    /// index's whole allocation (buckets of `u32` plus control bytes),
    /// divided by the capacity, rounded up. Measured on x86_64: a 120-byte
    /// slot + 4 (free stack) + 14..23 (index reserved for twice the flows,
    /// depending on where the capacity falls between powers of two) =
    /// 138..147 bytes.
    pub fn bytes_per_flow(&self) -> usize {
        let total = self.slots.capacity() * core::mem::size_of::<Slot>()
            + self.free.capacity() * core::mem::size_of::<u32>()
            + self.index.allocation_size();
        total.div_ceil(self.slots.len().max(1))
    }

    /// Forget a flow (cluster: this node learnt that another node owns the
    /// connection). No-op for a stale handle. Never allocates.
    pub fn remove_flow(&mut self, h: FlowHandle) {
        self.remove(h.0);
    }

    /// The TCP state of a flow (for tests and diagnostics).
    pub fn tcp_state(&self, h: FlowHandle) -> Option<TcpState> {
        match self.slots.get(h.0 as usize) {
            Some(Slot { live: true, kind: FlowKind::Tcp(c), .. }) => Some(c.state),
            _ => None,
        }
    }
}
