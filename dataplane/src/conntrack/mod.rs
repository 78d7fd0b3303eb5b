//! Per-worker connection tracking: one table entry per connection, serving
//! both directions, with a TCP state machine and sequence-window check
//! ([`tcp`]) and idle-timer pseudo-flows for UDP, ICMP echo and other
//! protocols.
//!
//! Layout. Flow state lives in a slab (`Vec<Slot>`, `capacity` slots of
//! two cache lines, a free-index stack) and an index ([`index`], a
//! bucketized cuckoo hash of one-cache-line buckets of eight (signature,
//! slot) pairs) maps a canonical key to a slot. The key orders the two
//! endpoints so that the smaller `(family, address, port)` comes first; the
//! slot records which endpoint initiated, so a packet's [`Direction`] falls
//! out of the same single lookup in either direction. The key lives only in
//! the slab, which keeps the index at 8 bytes per entry. A lookup that hits
//! touches one index line and the slot; [`ConnTable::prefetch_bucket`] and
//! [`ConnTable::prefetch_slot`] let a caller start those loads for a whole
//! burst before processing its first packet.
//!
//! Invariants:
//! - `len() <= capacity()`; a new flow is refused with
//!   [`DropReason::FlowTableFull`] when `len() == capacity()` (or, not
//!   expected at ≤ 50 % index load, when the index finds no room).
//! - Nothing allocates after [`ConnTable::new`]: the slab, free stack and
//!   index are sized for `capacity` at construction and never grow.
//! - A slot is in the index iff it is `live`; a free slot's index is on the
//!   free stack exactly once.
//! - A flow idle for at least its state's timeout is dead: `track` treats it
//!   as absent (removing it on the spot), `expire` reclaims it, `snapshot`
//!   hides it. `lookup` has no clock and may still report such a flow until it
//!   is reclaimed.
//! - A rejected packet (`Err`) changes no flow state and does not refresh the
//!   idle timer.
//! - No panics on the `track` path: slot accesses go through `get`/`get_mut`.
//! - `export` then `install` of the same tuple re-creates the flow exactly
//!   (protocol state, idle age); packet and byte counters start from zero
//!   (they are statistics, not state). `install` is bounded like `track`'s
//!   creation step: no allocation, a full table is `FlowTableFull`.
//! - A flow may carry a caller's **mark** (a `u32`, kept in the slot's
//!   padding: the slot stays two cache lines): with [`ConnTable::log_ended`]
//!   on, every marked flow's mark is reported exactly once when the flow is
//!   removed, whichever way it goes ([`ConnTable::drain_ended`]; the log
//!   holds one entry per slot, reserved when turned on). An `install` over
//!   a live flow keeps its mark. The NAT stage marks a flow with the xlate
//!   it holds and lets go of it when the flow ends.
//! - With the flow log on ([`ConnTable::log_flows`], [`flowlog`]), every
//!   flow marked logged yields exactly one `Ended` record when it is
//!   removed, whichever way it goes.

pub mod flowlog;
mod index;
pub mod limits;
mod splice;
pub mod synproxy;
mod state;
pub mod tcp;

#[cfg(test)]
mod tests;

use crate::route::IfIndex;
use crate::types::{Direction, DropReason, Duration, FiveTuple, Timestamp};
use core::hash::BuildHasher;
use index::Index;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use flowlog::{FlowLog, FlowMeta};
pub use flowlog::{EndReason, FlowEvent, FlowNat, FlowLogCounters, FlowRecord, RuleRef};
pub use state::{FlowState, FlowStateError};
pub use tcp::{SeqNumber, TcpState};
pub use limits::{LimitSet, LimitSpec, Limits};
pub use splice::{proxy_syn, Splice};
pub use tcp::ProxyStage;

/// What the admission check of a new flow decided (`ConnTable::track`'s
/// `admit`): permitted or not, and by which access rule (its index in the
/// ACL; `None`: the default rule), for the connection limits. A `bool`
/// converts to a decision without a rule.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    pub permit: bool,
    pub rule: Option<usize>,
}

impl From<bool> for Admission {
    fn from(permit: bool) -> Admission {
        Admission { permit, rule: None }
    }
}

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
    /// A connection the SYN proxy spliced: what the packet needs.
    pub splice: Splice,
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
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Flows created (including reopened ones).
    pub created: u64,
    /// Flows removed because they were idle beyond their timeout (by
    /// `expire`, or found dead by `track`).
    pub expired: u64,
    /// TIME_WAIT / CLOSED TCP flows replaced by a new SYN on the same tuple.
    pub reopened: u64,
    /// Flows created by `install` (a connection taken over, R11).
    pub installed: u64,
    /// Embryonic flows evicted to make room for a new one in a full table
    /// (`EARLY_DROP_SCAN`).
    pub evicted_embryonic: u64,
    /// Connections the SYN proxy opened for a client that returned a
    /// valid cookie (`open_proxied`).
    pub proxied: u64,
}

crate::impl_stats!(ConnStats { counter created, counter expired, counter reopened, counter installed, counter evicted_embryonic, counter proxied });

/// Slots a full table inspects, from a rotating cursor, for an embryonic
/// flow to evict in favour of a new one (Linux conntrack's early drop):
/// bounded work per refused-or-admitted new flow, whatever the table holds.
pub const EARLY_DROP_SCAN: usize = 64;

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

/// Canonical, direction-free flow key in five 64-bit words, so that
/// comparing and hashing it are a handful of word operations:
/// `w[0..2]` the `lo` endpoint's address, `w[2..4]` the `hi` endpoint's
/// (an IPv4 address is its big-endian value in the first word, the second
/// word 0; IPv6 is the 128-bit big-endian value, high word first), and
/// `w[4] = lo_port | hi_port << 16 | proto << 32 | meta << 40`. `lo` is the
/// endpoint with the smaller (family, address, port).
#[derive(Copy, Clone, Debug, Default, Eq)]
struct Key {
    w: [u64; 5],
}

impl PartialEq for Key {
    /// Five word compares without a branch each (the derived `==` on
    /// `[u64; 5]` calls `memcmp`).
    #[inline(always)]
    fn eq(&self, o: &Key) -> bool {
        let (a, b) = (&self.w, &o.w);
        ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])) == 0
    }
}

/// Per-table random seed of the key hash (so a sender cannot predict
/// buckets).
#[derive(Copy, Clone, Debug)]
struct Seed([u64; 4]);

impl Seed {
    fn random() -> Seed {
        use std::collections::hash_map::RandomState;
        let rs = RandomState::new();
        Seed([rs.hash_one(1u8), rs.hash_one(2u8), rs.hash_one(3u8), rs.hash_one(4u8)])
    }
}

/// The 64x64→128 multiply folded to 64 bits (foldhash's and wyhash's
/// mixing step).
#[inline(always)]
fn folded_multiply(x: u64, y: u64) -> u64 {
    let p = u128::from(x) * u128::from(y);
    (p as u64) ^ ((p >> 64) as u64)
}

/// (is IPv6, high word, low word) of an address.
#[inline(always)]
fn addr_words(a: &IpAddr) -> (bool, u64, u64) {
    match a {
        IpAddr::V4(v4) => (false, u64::from(u32::from(*v4)), 0),
        IpAddr::V6(v6) => {
            let x = u128::from(*v6);
            (true, (x >> 64) as u64, x as u64)
        }
    }
}

fn words_addr(v6: bool, hi: u64, lo: u64) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from((u128::from(hi) << 64) | u128::from(lo)))
    } else {
        IpAddr::V4(Ipv4Addr::from(hi as u32))
    }
}

impl Key {
    /// The canonical key of `t`, and whether the packet travels from the
    /// key's `lo` endpoint to its `hi` endpoint.
    #[inline(always)]
    fn new(t: &FiveTuple, class: Class) -> (Key, bool) {
        if let (IpAddr::V4(s), IpAddr::V4(d)) = (&t.src, &t.dst) {
            // The common case without the family juggling (same result).
            let (s, d) = (u32::from(*s), u32::from(*d));
            let from_lo = (s, t.src_port) <= (d, t.dst_port);
            let (l, lp, h, hp) = if from_lo { (s, t.src_port, d, t.dst_port) } else { (d, t.dst_port, s, t.src_port) };
            let w4 = Key::last_word(lp, hp, t.proto, (class as u8) << META_CLASS_SHIFT);
            return (Key { w: [u64::from(l), 0, u64::from(h), 0, w4] }, from_lo);
        }
        let s = addr_words(&t.src);
        let d = addr_words(&t.dst);
        let from_lo = (s.0, s.1, s.2, t.src_port) <= (d.0, d.1, d.2, t.dst_port);
        let ((l, lp), (h, hp)) = if from_lo { ((s, t.src_port), (d, t.dst_port)) } else { ((d, t.dst_port), (s, t.src_port)) };
        let meta = ((class as u8) << META_CLASS_SHIFT) | if l.0 { META_LO_V6 } else { 0 } | if h.0 { META_HI_V6 } else { 0 };
        (Key { w: [l.1, l.2, h.1, h.2, Key::last_word(lp, hp, t.proto, meta)] }, from_lo)
    }

    /// `w[4]`: ports, protocol and meta.
    #[inline(always)]
    fn last_word(lo_port: u16, hi_port: u16, proto: u8, meta: u8) -> u64 {
        u64::from(lo_port) | u64::from(hi_port) << 16 | u64::from(proto) << 32 | u64::from(meta) << 40
    }

    #[inline(always)]
    fn hash(&self, seed: &Seed) -> u64 {
        let [a0, a1, b0, b1, x] = self.w;
        let [s0, s1, s2, s3] = seed.0;
        let m = folded_multiply(a0 ^ s0, b0 ^ s1) ^ folded_multiply(a1 ^ s2, b1 ^ s3);
        folded_multiply(m ^ x, s0 ^ s3 ^ 0x2d35_8dcc_aa6c_78a5)
    }

    fn proto(&self) -> u8 {
        (self.w[4] >> 32) as u8
    }

    fn meta(&self) -> u8 {
        (self.w[4] >> 40) as u8
    }

    /// The tuple as sent by the `lo` endpoint.
    fn tuple_from_lo(&self) -> FiveTuple {
        let meta = self.meta();
        FiveTuple {
            src: words_addr(meta & META_LO_V6 != 0, self.w[0], self.w[1]),
            dst: words_addr(meta & META_HI_V6 != 0, self.w[2], self.w[3]),
            proto: self.proto(),
            src_port: self.w[4] as u16,
            dst_port: (self.w[4] >> 16) as u16,
        }
    }
}

/// Per-flow protocol state.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum FlowKind {
    Tcp(tcp::TcpConn),
    Udp,
    IcmpEcho,
    Other,
}

/// One slab entry: two cache lines, in this order (`repr(C)`): the key,
/// idle time and liveness in the first, the protocol state and counters in
/// the second. A tracked packet touches both; `prefetch` loads both.
#[derive(Copy, Clone, Debug)]
#[repr(C, align(64))]
struct Slot {
    key: Key,
    last_seen: Timestamp,
    live: bool,
    /// The initiator is the key's `lo` endpoint.
    orig_is_lo: bool,
    /// Which connection-limit counts hold this flow (`limits::tag`; 0:
    /// none).
    limit: u16,
    kind: FlowKind,
    /// The caller's mark (`set_mark`; 0: none), reported when the flow
    /// ends (`drain_ended`).
    mark: u32,
    packets: [u64; 2],
    bytes: [u64; 2],
}

const FREE_SLOT: Slot = Slot {
    key: Key { w: [0; 5] },
    live: false,
    orig_is_lo: true,
    limit: 0,
    mark: 0,
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

    fn tcp_state(&self) -> Option<TcpState> {
        match &self.kind {
            FlowKind::Tcp(c) => Some(c.state),
            _ => None,
        }
    }

    /// Embryonic: a TCP connection whose handshake has not completed (the
    /// reference's half-open connection), another flow that its initiator
    /// sent to here and that has seen no reply (a flow installed from
    /// another node's state, counters at zero, is not). Only such a flow
    /// is ever evicted for a new one.
    fn embryonic(&self) -> bool {
        match &self.kind {
            FlowKind::Tcp(c) => matches!(c.state, TcpState::SynSent | TcpState::SynReceived),
            _ => self.packets[0] > 0 && self.packets[1] == 0,
        }
    }

    /// Embryonic for the connection limits: a TCP connection short of its
    /// handshake (SYN-SENT, SYN-RECEIVED).
    #[inline]
    fn limits_embryonic(&self) -> bool {
        matches!(&self.kind, FlowKind::Tcp(c) if matches!(c.state, TcpState::SynSent | TcpState::SynReceived))
    }

    /// Why the flow ends when it leaves the table `how`.
    fn end_reason(&self, how: Removal) -> EndReason {
        match (how, self.tcp_state()) {
            (Removal::Evicted, _) => EndReason::Evicted,
            (Removal::HandedOver, _) => EndReason::HandedOver,
            (Removal::Cleared, _) => EndReason::Cleared,
            (Removal::Expired, Some(TcpState::Closed)) => EndReason::Reset,
            (Removal::Expired, Some(TcpState::FinWait | TcpState::Closing | TcpState::TimeWait)) => EndReason::Fin,
            (Removal::Expired, _) => EndReason::Idle,
        }
    }

    /// The flow's tuple in its original direction (the initiator is `src`).
    fn orig_tuple(&self) -> FiveTuple {
        let from_lo = self.key.tuple_from_lo();
        if self.orig_is_lo {
            from_lo
        } else {
            from_lo.reversed()
        }
    }

    /// The flow log's record of this (live) slot.
    fn record(&self, event: FlowEvent, meta: &FlowMeta) -> FlowRecord {
        FlowRecord {
            event,
            tuple: self.orig_tuple(),
            start: meta.start,
            last: self.last_seen,
            packets: self.packets,
            bytes: self.bytes,
            reported_packets: meta.reported_packets,
            reported_bytes: meta.reported_bytes,
            tcp_flags: flowlog::implied_flags(self.tcp_state()),
            ingress: meta.ingress,
            egress: meta.egress,
            rule: meta.rule,
            adopted: meta.adopted,
            mark: self.mark,
            nat: None,
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

/// A flow `ConnTable::find_existing` found for a packet: its slot and the
/// packet's direction on the key.
#[derive(Copy, Clone, Debug)]
pub struct Found {
    i: u32,
    from_lo: bool,
}

/// One worker's connection table. See the module documentation.
pub struct ConnTable {
    slots: Vec<Slot>,
    free: Vec<u32>,
    index: Index,
    seed: Seed,
    timeouts: Timeouts,
    len: usize,
    cursor: usize,
    /// Where the next early-drop scan starts.
    drop_cursor: usize,
    stats: ConnStats,
    /// Marks of flows removed since the last `drain_ended` (only with
    /// `log_ended`; sized to the capacity when enabled).
    ended: Vec<u32>,
    log_ended: bool,
    /// Marks that did not fit `ended` (never expected: it holds one per
    /// flow slot).
    pub ended_lost: u64,
    /// The exporters' records (`log_flows`; `None`: off).
    flow_log: Option<Box<FlowLog>>,
    /// Connection limits (`set_limits`; `None`: none configured).
    limits: Option<Box<Limits>>,
    /// Per slot, for a connection the SYN proxy opened (`TcpConn::proxy`
    /// not `None`; meaningless otherwise): the cookie the client was sent
    /// (connecting), then the server-side sequence delta (spliced).
    proxy_seq: Vec<u32>,
}

/// How a slot leaves the table (`ConnTable::remove`), for the flow log.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Removal {
    /// Dead (idle past its timeout) or replaced by a reopening SYN.
    Expired,
    /// Embryonic, evicted for a new flow in a full table.
    Evicted,
    /// Another node owns the connection now.
    HandedOver,
    /// `clear`.
    Cleared,
}

/// Slot `i` (`s`) leaves the table `how`: its `Ended` record if the flow
/// log followed it.
fn log_flow_end(log: &mut FlowLog, i: u32, s: &Slot, how: Removal) {
    if let Some(meta) = log.take_logged(i) {
        log.queue(s.record(FlowEvent::Ended(s.end_reason(how)), &meta));
    }
}

/// Record an ended flow's mark, within the log's reserved room (`lost`
/// counts what did not fit: never expected, one entry per slot).
#[inline]
fn log_end(ended: &mut Vec<u32>, lost: &mut u64, mark: u32) {
    if ended.len() < ended.capacity() {
        ended.push(mark);
    } else {
        *lost += 1;
    }
}

impl ConnTable {
    /// A table for up to `capacity` flows (at most `u32::MAX`), with all
    /// memory reserved now.
    pub fn new(capacity: usize, timeouts: Timeouts) -> Self {
        let capacity = capacity.min(u32::MAX as usize);
        let slots = vec![FREE_SLOT; capacity];
        let mut free = Vec::with_capacity(capacity);
        free.extend((0..capacity as u32).rev());
        let index = Index::new(capacity);
        ConnTable {
            slots,
            free,
            index,
            seed: Seed::random(),
            timeouts,
            len: 0,
            cursor: 0,
            drop_cursor: 0,
            stats: ConnStats::default(),
            ended: Vec::new(),
            log_ended: false,
            ended_lost: 0,
            flow_log: None,
            limits: None,
            proxy_seq: vec![0; capacity],
        }
    }

    /// Run connection limits `limits` (`None`: none), in place of the
    /// current ones: every live flow is counted again under them — in the
    /// rule class of the same name if it had one, else globally — and the
    /// refusal counters of classes both have carry over. Counting never
    /// refuses a flow the table holds. Returns the replaced limits.
    pub fn set_limits(&mut self, limits: Option<Box<Limits>>) -> Option<Box<Limits>> {
        let mut old = std::mem::replace(&mut self.limits, limits);
        if let (Some(new), Some(old)) = (self.limits.as_deref_mut(), old.as_deref()) {
            new.carry_refused(old);
        }
        for s in self.slots.iter_mut().filter(|s| s.live) {
            let class = match (self.limits.as_deref(), old.as_deref()) {
                (Some(new), Some(old)) => new.retag_class(old, s.limit).unwrap_or(0),
                _ => 0,
            };
            s.limit = match self.limits.as_deref_mut() {
                Some(l) => l.recount(class, s.orig_tuple().src, s.limits_embryonic()),
                None => 0,
            };
        }
        if let Some(o) = old.as_deref_mut() {
            o.clear_counts();
        }
        old
    }

    /// The connection limits with their counts (`None`: none).
    pub fn limits(&self) -> Option<&Limits> {
        self.limits.as_deref()
    }

    /// The connection limits, to set the rest of the cluster's counts
    /// (`Limits::set_remote`).
    pub fn limits_mut(&mut self) -> Option<&mut Limits> {
        self.limits.as_deref_mut()
    }

    /// Report the marks of removed flows (`set_mark`, `drain_ended`): for
    /// a stage that holds something per flow (NAT: an xlate reference).
    /// Reserves one entry per flow slot now.
    pub fn log_ended(&mut self) {
        if !self.log_ended {
            self.ended = Vec::with_capacity(self.slots.len());
            self.log_ended = true;
        }
    }

    /// Turn the flow log on ([`flowlog`]): reserves its per-slot meta and
    /// record queues now.
    /// With `active_timeout`, a connection alive that long gets an
    /// `Active` record each time (from `expire`'s walk).
    pub fn log_flows(&mut self, active_timeout: Option<Duration>) {
        match self.flow_log.as_deref_mut() {
            None => self.flow_log = Some(Box::new(FlowLog::new(self.slots.len(), active_timeout))),
            Some(log) => log.active_timeout = active_timeout,
        }
    }

    /// The flow log is on.
    #[inline]
    pub fn logging_flows(&self) -> bool {
        self.flow_log.is_some()
    }

    /// Flow `h`, just created by `track` for a connection this node owns:
    /// queue its `Built` record and log its end. No-op with the log off.
    pub fn log_built(&mut self, now: Timestamp, h: FlowHandle, ingress: IfIndex, egress: IfIndex, rule: RuleRef) {
        let (Some(log), Some(s)) = (self.flow_log.as_deref_mut(), self.slots.get(h.0 as usize).filter(|s| s.live)) else {
            return;
        };
        let meta = FlowMeta::new(now, ingress, egress, rule, false);
        log.built(h.0, meta, s.record(FlowEvent::Built, &meta));
    }

    /// Flow `h` is a connection this node took over as its owner: log its
    /// end here (its builder logged `Built`). No-op with the log off.
    /// Its interfaces and rule are not known here (`flowlog::UNKNOWN_IF`,
    /// `RuleRef::SecurityLevel`).
    pub fn log_adopted(&mut self, now: Timestamp, h: FlowHandle) {
        let live = self.slots.get(h.0 as usize).is_some_and(|s| s.live);
        if let (Some(log), true) = (self.flow_log.as_deref_mut(), live) {
            let (ingress, egress, rule) = (flowlog::UNKNOWN_IF, flowlog::UNKNOWN_IF, RuleRef::SecurityLevel);
            log.adopted(h.0, FlowMeta::new(now, ingress, egress, rule, true));
        }
    }

    /// A new connection `tuple` (`len` bytes) refused by `rule`: queue its
    /// `Denied` record. No-op with the log off.
    pub fn log_denied(&mut self, now: Timestamp, tuple: &FiveTuple, len: u32, ingress: IfIndex, egress: IfIndex, rule: RuleRef) {
        if let Some(log) = self.flow_log.as_deref_mut() {
            log.denied(FlowRecord {
                event: FlowEvent::Denied,
                tuple: *tuple,
                start: now,
                last: now,
                packets: [1, 0],
                bytes: [u64::from(len), 0],
                reported_packets: [0; 2],
                reported_bytes: [0; 2],
                tcp_flags: 0,
                ingress,
                egress,
                rule,
                adopted: false,
                mark: 0,
                nat: None,
            });
        }
    }

    /// The records queued since the last call (`flowlog::FlowLog::drain`).
    /// Never allocates.
    pub fn drain_flow_log(&mut self, f: impl FnMut(&FlowRecord)) {
        if let Some(log) = self.flow_log.as_deref_mut() {
            log.drain(f);
        }
    }

    /// Records queued since the last pass wait for `annotate_flow_log`
    /// (`flowlog`'s essay).
    #[inline]
    pub fn flow_log_unannotated(&self) -> bool {
        self.flow_log.as_deref().is_some_and(FlowLog::unannotated)
    }

    /// Fill in the address translation of every record queued since the
    /// last pass (`FlowRecord::nat`, from its `mark`); with `hold_built`,
    /// a `Built` record whose flow may still be marked waits for the next
    /// pass (`flowlog`'s essay). Never allocates.
    pub fn annotate_flow_log(&mut self, hold_built: bool, f: impl FnMut(&FlowRecord) -> Option<flowlog::FlowNat>) {
        if let Some(log) = self.flow_log.as_deref_mut() {
            log.annotate(hold_built, f);
        }
    }

    /// Records waiting for `drain_flow_log`.
    pub fn flow_log_pending(&self) -> usize {
        self.flow_log.as_deref().map_or(0, FlowLog::pending)
    }

    /// `None` with the log off.
    pub fn flow_log_counters(&self) -> Option<FlowLogCounters> {
        self.flow_log.as_deref().map(|l| l.counters)
    }

    /// Mark flow `h` with `mark` (non-zero; replaces an earlier mark):
    /// reported by `drain_ended` when the flow is removed, however that
    /// happens (expiry, a reopening SYN, `remove_flow`, `clear`). No-op for
    /// a stale handle.
    pub fn set_mark(&mut self, h: FlowHandle, mark: u32) {
        if let Some(s) = self.slots.get_mut(h.0 as usize).filter(|s| s.live) {
            s.mark = mark;
            if let Some(log) = self.flow_log.as_deref_mut() {
                log.marked(h.0, mark);
            }
        }
    }

    /// Remove every live flow whose mark `doomed` says so (reported by
    /// `drain_ended` as any removal); returns how many. A walk of the
    /// table: off the packet path (a member-set change).
    pub fn remove_marked(&mut self, mut doomed: impl FnMut(u32) -> bool) -> usize {
        let victims: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&i| {
                let s = &self.slots[i as usize];
                s.live && s.mark != 0 && doomed(s.mark)
            })
            .collect();
        for &i in &victims {
            self.remove(i, Removal::HandedOver);
        }
        victims.len()
    }

    /// Forget every flow's mark (nothing is reported for them).
    pub fn clear_marks(&mut self) {
        for s in &mut self.slots {
            s.mark = 0;
        }
    }

    /// `track_existing` in two halves, for a caller that decides by the
    /// flow's mark between them (the NAT fast path): first the flow a
    /// packet of `tuple` would be tracked on and its mark, nothing changed
    /// — `None` where `track_existing` returns `None` before changing
    /// anything (a SYN, invalid flags, no flow) —; then `track_found`.
    #[inline(always)]
    pub fn find_existing(&self, tuple: &FiveTuple, l4: &L4Info) -> Option<(Found, u32)> {
        if let L4Info::Tcp(seg) = l4 {
            if !tcp::flags_valid(seg.flags) || seg.flags & tcp_flags::SYN != 0 {
                return None;
            }
        }
        let (key, from_lo) = Key::new(tuple, Class::of(l4));
        let i = self.find(key.hash(&self.seed), &key)?;
        Some((Found { i, from_lo }, self.slots.get(i as usize).map_or(0, |s| s.mark)))
    }

    /// The packet `find_existing` found the flow of, tracked on it (as
    /// `track_existing`), the table not changed in between.
    #[inline(always)]
    pub fn track_found(&mut self, f: Found, now: Timestamp, l4: &L4Info, len_bytes: u32) -> Option<Result<Tracked, DropReason>> {
        self.existing_at(f.i, now, f.from_lo, l4, len_bytes)
    }

    /// The mark of flow `h` (0: none or no flow).
    pub fn mark(&self, h: FlowHandle) -> u32 {
        self.slots.get(h.0 as usize).filter(|s| s.live).map_or(0, |s| s.mark)
    }

    /// The marks of the flows removed since the last call, in order.
    /// Never allocates.
    pub fn drain_ended(&mut self, mut f: impl FnMut(u32)) {
        for m in self.ended.drain(..) {
            f(m);
        }
    }

    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// New idle timeouts, for every flow from now on (a flow's expiry is
    /// computed from its last packet and these at each check); returns
    /// the old ones.
    pub fn set_timeouts(&mut self, t: Timeouts) -> Timeouts {
        std::mem::replace(&mut self.timeouts, t)
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
    #[inline]
    pub fn track<A: Into<Admission>>(
        &mut self,
        now: Timestamp,
        tuple: &FiveTuple,
        l4: &L4Info,
        len_bytes: u32,
        admit: impl FnOnce() -> A,
    ) -> Result<Tracked, DropReason> {
        if let L4Info::Tcp(seg) = l4 {
            if !tcp::flags_valid(seg.flags) {
                return Err(DropReason::TcpBadFlags);
            }
        }
        let (key, from_lo) = Key::new(tuple, Class::of(l4));
        let hash = key.hash(&self.seed);
        if let Some(r) = self.existing(hash, &key, now, from_lo, l4, len_bytes) {
            return r;
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
        let admission: Admission = admit().into();
        if !admission.permit {
            return Err(DropReason::AclDenied);
        }
        self.create(now, hash, key, from_lo, tuple, l4, len_bytes, admission.rule, false)
    }

    /// Open the connection of a client that returned a valid SYN-proxy
    /// cookie (`synproxy`): `ack` is its ACK-carrying segment (`tuple`: its
    /// own tuple, client → server; `ack.ack - 1` the cookie it was sent,
    /// which carried `mss`), admitted by `admit` (the ACL) and the connection limits but for
    /// `max_embryonic`. The flow starts as the SYN the proxy now sends the
    /// server (the client's ISN, its window, no window scaling or SACK:
    /// the proxy's SYN-ACK offered neither), in `ProxyStage::Connecting`.
    /// `Err(TcpNoFlow)` if a flow of the tuple exists.
    #[allow(clippy::too_many_arguments)]
    pub fn open_proxied<A: Into<Admission>>(
        &mut self,
        now: Timestamp,
        tuple: &FiveTuple,
        ack: &TcpSeg,
        mss: u16,
        len_bytes: u32,
        admit: impl FnOnce() -> A,
    ) -> Result<Tracked, DropReason> {
        let syn = L4Info::Tcp(splice::proxy_syn(ack));
        let (key, from_lo) = Key::new(tuple, Class::Tcp);
        let hash = key.hash(&self.seed);
        if self.find(hash, &key).is_some() {
            return Err(DropReason::TcpNoFlow);
        }
        let admission: Admission = admit().into();
        if !admission.permit {
            return Err(DropReason::AclDenied);
        }
        let mut t = self.create(now, hash, key, from_lo, tuple, &syn, len_bytes, admission.rule, true)?;
        t.splice = Splice::Opened { isn: ack.seq.wrapping_sub(1), window: ack.window, mss };
        let i = t.handle.0 as usize;
        if let Some(Slot { kind: FlowKind::Tcp(c), .. }) = self.slots.get_mut(i) {
            c.proxy = tcp::ProxyStage::Connecting;
        }
        if let Some(p) = self.proxy_seq.get_mut(i) {
            *p = ack.ack.wrapping_sub(1);
        }
        self.stats.proxied += 1;
        Ok(t)
    }

    /// Create the flow of a packet that may open one and was admitted by
    /// access rule `rule`: connection limits, room (early drop), slot.
    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        now: Timestamp,
        hash: u64,
        key: Key,
        from_lo: bool,
        tuple: &FiveTuple,
        l4: &L4Info,
        len_bytes: u32,
        rule: Option<usize>,
        proxied: bool,
    ) -> Result<Tracked, DropReason> {
        let limit = match self.limits.as_deref_mut() {
            Some(l) => l
                .admit(rule, tuple.src, matches!(l4, L4Info::Tcp(_)), proxied)
                .map_err(limits::Refusal::drop_reason)?,
            None => 0,
        };
        if self.len >= self.slots.len() && !self.early_drop(now) {
            self.unlimit(limit, tuple.src);
            return Err(DropReason::FlowTableFull);
        }
        let Some(i) = self.free.pop() else {
            self.unlimit(limit, tuple.src);
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
            self.unlimit(limit, tuple.src);
            return Err(DropReason::FlowTableFull);
        };
        *slot = Slot { key, live: true, orig_is_lo: from_lo, kind, limit, ..FREE_SLOT };
        slot.count(now, Direction::Original, len_bytes);
        if !self.index.insert(hash, i) {
            *slot = FREE_SLOT;
            self.free.push(i);
            self.unlimit(limit, tuple.src);
            return Err(DropReason::FlowTableFull);
        }
        self.len += 1;
        self.stats.created += 1;
        Ok(Tracked { handle: FlowHandle(i), dir: Direction::Original, created: true, splice: Splice::None })
    }

    /// Undo a limit count of a flow that was not created after all.
    #[cold]
    fn unlimit(&mut self, limit: u16, client: IpAddr) {
        if let (Some(l), true) = (self.limits.as_deref_mut(), limit != 0) {
            l.ended(limit, client);
        }
    }

    /// The class a tuple is tracked under, from its protocol alone (what
    /// `lookup` tries first).
    fn class_of_proto(proto: u8) -> Class {
        use crate::types::ip_proto;
        match proto {
            ip_proto::TCP => Class::Tcp,
            ip_proto::UDP => Class::Udp,
            ip_proto::ICMP | ip_proto::ICMPV6 => Class::IcmpEcho,
            _ => Class::Other,
        }
    }

    /// The index hash of `tuple` under the class its protocol implies
    /// (TCP, UDP; what `lookup` tries first), for the burst prefetch.
    #[inline]
    pub fn prefetch_hash(&self, tuple: &FiveTuple) -> u64 {
        let (key, _) = Key::new(tuple, Self::class_of_proto(tuple.proto));
        key.hash(&self.seed)
    }

    /// Burst stage 1: start loading the index bucket of a `prefetch_hash`
    /// (a hint only: no state changes).
    #[inline]
    pub fn prefetch_bucket(&self, hash: u64) {
        self.index.prefetch(hash);
    }

    /// Burst stage 2 (after stage 1 for the whole burst): start loading
    /// both cache lines of the slots whose signature matches.
    #[inline]
    pub fn prefetch_slot(&self, hash: u64) {
        let slots = &self.slots;
        self.index.candidates(hash, |i| {
            if let Some(s) = slots.get(i as usize) {
                // The first line holds the key, the last field (`bytes`,
                // offset 112) is in the second.
                crate::prefetch::prefetch(s);
                crate::prefetch::prefetch(&s.bytes);
            }
        });
    }

    /// Burst stage 3 (after stage 2): the marks of the slots whose
    /// signature matches, for a caller that prefetches what they name.
    #[inline]
    pub fn slot_marks(&self, hash: u64, mut f: impl FnMut(u32)) {
        let slots = &self.slots;
        self.index.candidates(hash, |i| {
            if let Some(s) = slots.get(i as usize).filter(|s| s.mark != 0) {
                f(s.mark);
            }
        });
    }

    /// `track` for a packet of an existing, live flow that cannot open or
    /// reopen one (not a TCP SYN): the same checks and updates as `track`.
    /// `None` when the packet is a SYN or has invalid flags (nothing
    /// changed), or there is no live flow (a dead one has been removed, as
    /// `track` would have); `track` then decides.
    #[inline]
    pub fn track_existing(
        &mut self,
        now: Timestamp,
        tuple: &FiveTuple,
        l4: &L4Info,
        len_bytes: u32,
    ) -> Option<Result<Tracked, DropReason>> {
        if let L4Info::Tcp(seg) = l4 {
            if !tcp::flags_valid(seg.flags) || seg.flags & tcp_flags::SYN != 0 {
                return None;
            }
        }
        let (key, from_lo) = Key::new(tuple, Class::of(l4));
        self.existing(key.hash(&self.seed), &key, now, from_lo, l4, len_bytes)
    }

    /// The existing-flow step of `track`: `Some` when a live flow took the
    /// packet (accepted or refused), `None` when there is no flow or it
    /// is gone (dead, or replaced by a reopening SYN: removed and counted).
    #[inline(always)]
    fn existing(
        &mut self,
        hash: u64,
        key: &Key,
        now: Timestamp,
        from_lo: bool,
        l4: &L4Info,
        len_bytes: u32,
    ) -> Option<Result<Tracked, DropReason>> {
        let i = self.find(hash, key)?;
        self.existing_at(i, now, from_lo, l4, len_bytes)
    }

    #[inline(always)]
    fn existing_at(
        &mut self,
        i: u32,
        now: Timestamp,
        from_lo: bool,
        l4: &L4Info,
        len_bytes: u32,
    ) -> Option<Result<Tracked, DropReason>> {
        match self.on_existing(i, now, from_lo, l4, len_bytes) {
            Ok(Existing::Tracked(t)) => Some(Ok(t)),
            Ok(Existing::Gone { reopen }) => {
                if reopen {
                    self.stats.reopened += 1;
                } else {
                    self.stats.expired += 1;
                }
                None
            }
            Err(r) => Some(Err(r)),
        }
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
            self.remove(i, Removal::Expired);
            return Ok(Existing::Gone { reopen: false });
        }
        let dir = slot.dir_of(from_lo);
        let mut splice = Splice::None;
        if let (FlowKind::Tcp(conn), L4Info::Tcp(seg)) = (&mut slot.kind, l4) {
            let accept = if conn.proxy == tcp::ProxyStage::None {
                conn.on_segment(dir, seg)?
            } else {
                let mut seq = self.proxy_seq.get(i as usize).copied().unwrap_or(0);
                let (a, sp) = splice::segment(conn, dir, seg, &mut seq)?;
                if let Some(p) = self.proxy_seq.get_mut(i as usize) {
                    *p = seq;
                }
                splice = sp;
                a
            };
            if accept == tcp::Accept::Reopen {
                self.remove(i, Removal::Expired);
                return Ok(Existing::Gone { reopen: true });
            }
            if slot.limit & limits::tag::EMBRYONIC != 0 && !slot.limits_embryonic() {
                if let Some(l) = self.limits.as_deref_mut() {
                    slot.limit = l.established(slot.limit, slot.orig_tuple().src);
                }
            }
        }
        slot.count(now, dir, len_bytes);
        Ok(Existing::Tracked(Tracked { handle: FlowHandle(i), dir, created: false, splice }))
    }

    #[inline(always)]
    fn find(&self, hash: u64, key: &Key) -> Option<u32> {
        let slots = &self.slots;
        self.index.find(hash, |j| slots.get(j as usize).is_some_and(|s| s.key == *key))
    }

    /// Forget slot `i` (no-op if it is not live).
    /// The table is full: make room by removing a dead flow or evicting the
    /// embryonic flow idle longest among the next `EARLY_DROP_SCAN` slots
    /// (established flows are never evicted). `true`: a slot is free.
    #[cold]
    #[inline(never)]
    fn early_drop(&mut self, now: Timestamp) -> bool {
        let cap = self.slots.len();
        if cap == 0 {
            return false;
        }
        let start = self.drop_cursor % cap;
        self.drop_cursor = (start + EARLY_DROP_SCAN) % cap;
        let mut oldest: Option<(u32, Timestamp)> = None;
        for k in 0..EARLY_DROP_SCAN.min(cap) {
            let i = (start + k) % cap;
            let Some(s) = self.slots.get(i).filter(|s| s.live) else { continue };
            if s.is_dead(now, &self.timeouts) {
                self.remove(i as u32, Removal::Expired);
                self.stats.expired += 1;
                return true;
            }
            if s.embryonic() && oldest.is_none_or(|(_, t)| s.last_seen < t) {
                oldest = Some((i as u32, s.last_seen));
            }
        }
        let Some((i, _)) = oldest else { return false };
        self.remove(i, Removal::Evicted);
        self.stats.evicted_embryonic += 1;
        true
    }

    fn remove(&mut self, i: u32, how: Removal) {
        let Some(slot) = self.slots.get_mut(i as usize) else { return };
        if !slot.live {
            return;
        }
        let hash = slot.key.hash(&self.seed);
        if slot.mark != 0 && self.log_ended {
            log_end(&mut self.ended, &mut self.ended_lost, slot.mark);
        }
        if let Some(log) = self.flow_log.as_deref_mut() {
            log_flow_end(log, i, slot, how);
        }
        if slot.limit != 0 {
            if let Some(l) = self.limits.as_deref_mut() {
                l.ended(slot.limit, slot.orig_tuple().src);
            }
        }
        self.index.remove(hash, i);
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
        let class = Self::class_of_proto(tuple.proto);
        let try_class = |class: Class| {
            let (key, from_lo) = Key::new(tuple, class);
            let i = self.find(key.hash(&self.seed), &key)?;
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
        // An empty table has nothing to expire: an idle worker does not
        // walk its (cold) slab every timer tick.
        if cap == 0 || self.len == 0 {
            return 0;
        }
        let timeouts = self.timeouts;
        let mut removed = 0;
        for _ in 0..budget.min(cap) {
            let i = if self.cursor < cap { self.cursor } else { 0 };
            self.cursor = if i + 1 < cap { i + 1 } else { 0 };
            let dead = self.slots.get(i).is_some_and(|s| s.live && s.is_dead(now, &timeouts));
            if dead {
                self.remove(i as u32, Removal::Expired);
                removed += 1;
            } else if let (Some(log), Some(s)) = (self.flow_log.as_deref_mut(), self.slots.get(i).filter(|s| s.live)) {
                if let Some(m) = log.active_due(i as u32, now) {
                    let r = s.record(FlowEvent::Active, m);
                    (m.reported_packets, m.reported_bytes) = (s.packets, s.bytes);
                    log.queue(r);
                }
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
            let (tuple, packets, bytes) = (s.orig_tuple(), s.packets, s.bytes);
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
        if self.log_ended {
            for s in self.slots.iter().filter(|s| s.live && s.mark != 0) {
                log_end(&mut self.ended, &mut self.ended_lost, s.mark);
            }
        }
        if let Some(log) = self.flow_log.as_deref_mut() {
            // Every logged flow's meta goes with its record: none is left.
            for (i, s) in self.slots.iter().enumerate().filter(|(_, s)| s.live) {
                log_flow_end(log, i as u32, s, Removal::Cleared);
            }
        }
        if let Some(l) = self.limits.as_deref_mut() {
            l.clear_counts();
        }
        self.index.clear();
        self.slots.fill(FREE_SLOT);
        self.free.clear();
        self.free.extend((0..self.slots.len() as u32).rev());
        self.len = 0;
        self.cursor = 0;
    }

    /// Bytes reserved per flow slot: the slab, the free stack and the
    /// index's whole allocation, divided by the capacity, rounded up. On
    /// x86_64: a 128-byte slot (two cache lines) + 4 (free stack) + 4 (the
    /// SYN proxy's sequence value) + 16..32 (index: 8 bytes per entry, room
    /// for twice the flows rounded up to a power of two buckets) =
    /// 152..168 bytes.
    pub fn bytes_per_flow(&self) -> usize {
        let total = self.slots.capacity() * core::mem::size_of::<Slot>()
            + self.free.capacity() * core::mem::size_of::<u32>()
            + self.proxy_seq.capacity() * core::mem::size_of::<u32>()
            + self.index.allocation_size();
        total.div_ceil(self.slots.len().max(1))
    }

    /// Forget a flow (cluster: this node learnt that another node owns the
    /// connection). No-op for a stale handle. Never allocates.
    pub fn remove_flow(&mut self, h: FlowHandle) {
        self.remove(h.0, Removal::HandedOver);
    }

    /// The flow's state, for handing it to another node (`state.rs`);
    /// `None` for a handle that names no live flow.
    pub fn export(&self, now: Timestamp, h: FlowHandle) -> Option<FlowState> {
        let s = self.slots.get(h.0 as usize).filter(|s| s.live)?;
        let proxied = matches!(&s.kind, FlowKind::Tcp(c) if c.proxy != tcp::ProxyStage::None);
        let proxy_seq = if proxied { self.proxy_seq.get(h.0 as usize).copied().unwrap_or(0) } else { 0 };
        Some(FlowState { kind: s.kind, idle: now.since(s.last_seen), proxy_seq })
    }

    /// Create the flow of `tuple` (its original direction: the initiator
    /// is `tuple.src`) with `state`, or replace the state of the flow that
    /// is there. Its idle timer reads as `state.idle()` old at `now`.
    /// Errors: `FlowTableFull` (nothing changed), `ProtoUnsupported` when
    /// the state's class does not fit `tuple.proto` (TCP state for a
    /// non-TCP tuple, ...). Never allocates, never panics.
    pub fn install(&mut self, now: Timestamp, tuple: &FiveTuple, state: FlowState) -> Result<FlowHandle, DropReason> {
        use crate::types::ip_proto;
        let class = state.class();
        let fits = match class {
            Class::Tcp => tuple.proto == ip_proto::TCP,
            Class::Udp => tuple.proto == ip_proto::UDP,
            Class::IcmpEcho => matches!(tuple.proto, ip_proto::ICMP | ip_proto::ICMPV6),
            Class::Other => !matches!(tuple.proto, ip_proto::TCP | ip_proto::UDP),
        };
        if !fits {
            return Err(DropReason::ProtoUnsupported);
        }
        let (key, from_lo) = Key::new(tuple, class);
        let hash = key.hash(&self.seed);
        let last_seen = Timestamp(now.0.saturating_sub(state.idle.0));
        if let Some(i) = self.find(hash, &key) {
            if let Some(slot) = self.slots.get_mut(i as usize) {
                // The same flow, new state: it keeps its mark, and its
                // limit counts follow the new state.
                let (mark, limit) = (slot.mark, slot.limit);
                *slot = Slot { key, live: true, orig_is_lo: from_lo, kind: state.kind, last_seen, mark, ..FREE_SLOT };
                if let Some(p) = self.proxy_seq.get_mut(i as usize) {
                    *p = state.proxy_seq;
                }
                if let (Some(l), true) = (self.limits.as_deref_mut(), limit != 0) {
                    let client = slot.orig_tuple().src;
                    l.ended(limit, client);
                    slot.limit = l.recount(limit & limits::tag::CLASS_MASK, client, slot.limits_embryonic());
                }
                return Ok(FlowHandle(i));
            }
        }
        if self.len >= self.slots.len() && !self.early_drop(now) {
            return Err(DropReason::FlowTableFull);
        }
        let Some(i) = self.free.pop() else {
            return Err(DropReason::FlowTableFull);
        };
        let Some(slot) = self.slots.get_mut(i as usize) else {
            self.free.push(i);
            return Err(DropReason::FlowTableFull);
        };
        *slot = Slot { key, live: true, orig_is_lo: from_lo, kind: state.kind, last_seen, ..FREE_SLOT };
        if let Some(p) = self.proxy_seq.get_mut(i as usize) {
            *p = state.proxy_seq;
        }
        if !self.index.insert(hash, i) {
            *slot = FREE_SLOT;
            self.free.push(i);
            return Err(DropReason::FlowTableFull);
        }
        if let Some(l) = self.limits.as_deref_mut() {
            // A connection taken over is counted, globally (its rule is
            // not part of the state handed over), and never refused.
            slot.limit = l.recount(0, slot.orig_tuple().src, slot.limits_embryonic());
        }
        self.len += 1;
        self.stats.installed += 1;
        Ok(FlowHandle(i))
    }

    /// The live flow in slot `i` with its tuple in the original direction,
    /// for a bounded scan over the table (`i < capacity()`); `None` for a
    /// free slot.
    pub fn slot(&self, i: usize) -> Option<(FlowHandle, FiveTuple)> {
        let s = self.slots.get(i).filter(|s| s.live)?;
        Some((FlowHandle(i as u32), s.orig_tuple()))
    }

    /// The server-side sequence delta of a connection the SYN proxy
    /// spliced (`splice`); `None` for any other flow or a stale handle.
    pub fn proxy_delta(&self, h: FlowHandle) -> Option<u32> {
        match self.slots.get(h.0 as usize) {
            Some(Slot { live: true, kind: FlowKind::Tcp(c), .. }) if c.proxy == tcp::ProxyStage::Spliced => self.proxy_seq.get(h.0 as usize).copied(),
            _ => None,
        }
    }

    /// Whether `tuple`'s flow is a connection the SYN proxy opened that
    /// still waits for the server's answer (`ProxyStage::Connecting`):
    /// live, not reset, not idle past its timeout.
    pub fn proxy_connecting(&self, now: Timestamp, tuple: &FiveTuple) -> bool {
        let Some((h, _)) = self.lookup(tuple) else { return false };
        match self.slots.get(h.0 as usize) {
            Some(s @ Slot { live: true, kind: FlowKind::Tcp(c), .. }) => {
                c.proxy == tcp::ProxyStage::Connecting && c.state != TcpState::Closed && !s.is_dead(now, &self.timeouts)
            }
            _ => false,
        }
    }

    /// The TCP state of a flow (for tests and diagnostics).
    pub fn tcp_state(&self, h: FlowHandle) -> Option<TcpState> {
        match self.slots.get(h.0 as usize) {
            Some(Slot { live: true, kind: FlowKind::Tcp(c), .. }) => Some(c.state),
            _ => None,
        }
    }
}
