//! One worker's run-to-completion packet pipeline, sans-IO.
//!
//! `Pipeline::process(now, in_port, buf)` takes one received frame, edits it
//! in place and returns a `Verdict`: `Forward(port)` (send the buffer out of
//! that port — the egress port for routed packets, the ingress port for the
//! ARP and ICMP echo replies we answer ourselves) or `Drop(reason)`. Frames
//! the pipeline originates (ARP requests) are queued and handed to the driver
//! by `drain_generated`.
//!
//! Stages, in order, each with the drop reasons it may produce:
//! 1. **Ethernet**: header and up to two VLAN tags (`EthTruncated`); the
//!    (port, VLAN) pair selects the ingress interface (`NoInterface`; QinQ
//!    frames never match, the configuration cannot express them); the
//!    destination MAC must be the interface's or broadcast (`EthNotForUs`);
//!    EtherType ARP / IPv4 / IPv6 (`EthUnsupportedType`).
//! 2. **ARP** (RFC 826): requests for the ingress interface's address are
//!    turned into replies in place; the sender is learnt when the packet is
//!    addressed to us and the sender is inside the interface subnet; others
//!    only refresh existing entries (`ArpMalformed`, `ArpConsumed`,
//!    `ArpNotForUs`).
//! 3. **IPv4** (RFC 791, RFC 1812 §5.2.2/§5.3.7): version, IHL, total length
//!    against the buffer (Ethernet padding ignored), header checksum, source
//!    sanity (no 0/8, 127/8, 224/4, 240/4, broadcast, or our own address),
//!    options (source routing is dropped, RFC 7126 §4.3–4.4; malformed
//!    options are dropped; others are carried unchanged), destination sanity;
//!    a transit datagram that arrived as a link-layer broadcast is not
//!    forwarded (RFC 1812 §5.3.4, `EthNotForUs`).
//!
//!    **Fragments** (`fragpath`, docs/fragments.md): after TTL and route,
//!    a transit fragment goes to its fragment owner (cluster), or into the
//!    per-worker shallow reassembler (`Frag*` drops): held until its first
//!    fragment arrives (`Consumed`), then decided on the datagram's 5-tuple
//!    like any packet and forwarded on its own; held fragments are released
//!    through `drain_generated`. Fragments to our own addresses are not
//!    reassembled (`Ipv4Fragment`).
//! 4. **Local delivery**: ICMP echo requests to the ingress interface's
//!    address are answered in place (addresses and MACs swapped, TTL 64,
//!    type 0); everything else for us — other protocols, our other
//!    interfaces' addresses, broadcast and multicast — is `LocalUnhandled`.
//! 5. **Transit**: TTL (`TtlExceeded`), route (`NoRoute`), L4 parse
//!    (`L4Truncated`, `TcpBadHeaderLen`), then conntrack `track` with the
//!    ACL as its admission callback (`AclDenied`, `TcpNoFlow`, `NoFlow`,
//!    `TcpOutOfWindow`, ...). ICMP errors (types 3, 11, 12) are not tracked:
//!    they pass only if the datagram they quote belongs to a flow and they
//!    are addressed to that datagram's sender (`NoFlow`).
//!
//!    5b. **Cluster** (`PipelineConfig::cluster`, `clusterpath`): before
//!    conntrack, the packet's connection role decides who tracks it — a
//!    local owner flow or a new SYN is tracked here (with the owner's
//!    sequence translation, R6); a packet another node owns becomes a CCL
//!    `ForwardedPacket` in place (`Forward(ccl port)`); otherwise the
//!    director is asked and the frame waits (`Consumed`). CCL datagrams
//!    to our CCL address are opened here too (`CclMalformed`,
//!    `ClusterNoOwnerFlow`, `ClusterNoRecord`, `ClusterPendingFull`,
//!    `ClusterPeerUnresolved`, `ClusterOwnerUnknown`,
//!    `ClusterRecordTableFull`). See docs/cluster-design.md.
//! 6. **Egress**: ARP resolution of the next hop (at most one request per
//!    next hop per retry interval, `ArpCacheFull`; an expired entry keeps
//!    forwarding while a unicast request re-confirms it), TTL decrement
//!    with an RFC 1624 incremental checksum update, VLAN tag
//!    added/removed/rewritten for the egress interface (`NoHeadroom`), MACs
//!    rewritten. A frame whose next hop is not resolved yet is held, fully
//!    rewritten, until the ARP reply (`arphold`: `Consumed`, sent through
//!    `drain_generated`; `ArpUnresolved` when the hold queue has no room).
//!    The flow is created before the next hop is resolved (as conntrack
//!    precedes neighbour resolution in Linux), so a frame that was not
//!    held, or whose hold expired, finds its flow when the sender
//!    retransmits.
//!
//! Invariants:
//! - `process` never allocates, locks, logs or panics (slice accesses are
//!   behind `new_checked` views or `get`), and every call ends in exactly one
//!   of: a drop counter, `forwarded`, `consumed`, `arp_replies`,
//!   `icmp_echo_replies`. So `packets == forwarded + consumed + arp_replies +
//!   icmp_echo_replies + Σ drops`.
//! - All memory (flow table, ARP cache, generated-frame queue, counters) is
//!   reserved by `Pipeline::new`.
//! - The pipeline mutates the frame only once it has decided to emit it; a
//!   dropped frame is byte-for-byte unchanged (a failed `prepend` leaves the
//!   buffer untouched, so `NoHeadroom` too). Exception: a datagram received
//!   on the CCL port that carried a forwarded frame is dropped as its inner
//!   frame (the outer headers were already trimmed).

use crate::acl::{Acl, AclRule, RuleInfo};
use crate::arp::{ArpCache, ArpInfo, Resolve};
use crate::arphold::{ArpHold, ArpHoldCounters, Hold};
use crate::buf::PacketBuf;
pub use crate::clusterpath::{
    ClusterCounters, ClusterCountersSnapshot, ClusterSpec, ClusterSpecError, Role,
};
use crate::clusterpath::{ClusterState, Plan, Rx, Via, Wrap, Xlate};
use crate::frag::{self, FragResult, ReasmConfigError};
pub use crate::fragpath::{FragConfig, FragCounters, FragNote, FragSnapshot};
use crate::fragpath::{frag_track, FragState, FragTrack, Release};
use crate::conntrack::{ConnInfo, ConnTable, L4Info, TcpSeg, Timeouts};
use crate::route::{contains, mask, IfIndex, RouteError, RouteInfo, RouteTable};
use crate::types::{ip_proto, DropReason, Duration, FiveTuple, PortId, Timestamp};
use crate::wire::arp::{ArpPacket, ArpRepr, Operation};
use crate::wire::checksum;
use crate::wire::ethernet::{self, ethertype, EthernetFrame, BROADCAST, TAG_LEN};
use crate::wire::icmp::{msg_type, Icmpv4Packet};
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::ipv6::{self, Ipv6Packet};
use crate::wire::tcp::{self, TcpOptions, TcpPacket};
use crate::wire::udp::UdpPacket;
use std::net::{IpAddr, Ipv4Addr};

/// Frames queued by the pipeline between two `drain_generated` calls; more
/// are not queued (counted in `generated_dropped`), the ARP retry interval
/// brings them back.
pub const MAX_GENERATED: usize = 64;
/// Budget of flow slots inspected per `poll_timers` call.
pub const EXPIRE_BUDGET: usize = 1024;
/// Room for a generated frame: a tagged ARP request padded to the minimum
/// Ethernet frame size (IEEE 802.3 §4.4.2).
const GENERATED_LEN: usize = 64;

/// One configured interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceSpec {
    pub name: String,
    pub port: PortId,
    pub mac: [u8; 6],
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    pub security_level: u8,
    pub vlan: Option<u16>,
}

/// A static route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteSpec {
    pub destination: Ipv4Addr,
    pub prefix_len: u8,
    pub via: Ipv4Addr,
}

/// An access rule as configured (`interface` by name, `None` = any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSpec {
    pub name: String,
    pub permit: bool,
    pub interface: Option<String>,
    pub protocol: Option<u8>,
    pub src: (Ipv4Addr, u8),
    pub dst: (Ipv4Addr, u8),
    pub src_ports: (u16, u16),
    pub dst_ports: (u16, u16),
}

#[derive(Clone, Debug)]
pub struct PipelineConfig {
    pub interfaces: Vec<InterfaceSpec>,
    pub routes: Vec<RouteSpec>,
    pub rules: Vec<RuleSpec>,
    pub timeouts: Timeouts,
    pub flow_capacity: usize,
    pub arp_capacity: usize,
    pub arp_timeout: Duration,
    pub arp_retry: Duration,
    /// Static neighbour entries (IPv4 → MAC), consulted before the ARP
    /// cache and never aged: next hops on links without ARP (pcap vdevs in
    /// benches) and CCL peers with fixed MACs.
    pub static_neighbors: Vec<(Ipv4Addr, [u8; 6])>,
    /// Cluster membership of this node; `None` runs the single-node
    /// pipeline (docs/cluster-design.md).
    pub cluster: Option<ClusterSpec>,
}

/// Configuration errors, found once by `Pipeline::new`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    #[error("no interfaces configured")]
    NoInterfaces,
    #[error("too many interfaces ({0}; at most 65535)")]
    TooManyInterfaces(usize),
    #[error("interface name {0:?} used twice")]
    DuplicateName(String),
    #[error("interface {name}: prefix length {prefix_len} is above 32")]
    BadPrefixLen { name: String, prefix_len: u8 },
    #[error("interface {name}: address {addr} is not a unicast host address")]
    BadAddress { name: String, addr: Ipv4Addr },
    #[error("interface {name}: VLAN {vlan} is outside 1-4094")]
    BadVlan { name: String, vlan: u16 },
    #[error("interfaces {a} and {b} share port and VLAN")]
    DuplicatePortVlan { a: String, b: String },
    #[error("interfaces {a} and {b} have overlapping subnets")]
    OverlappingSubnets { a: String, b: String },
    #[error("route {destination}/{prefix_len}: next hop {via} is one of our addresses")]
    NextHopIsLocal {
        destination: Ipv4Addr,
        prefix_len: u8,
        via: Ipv4Addr,
    },
    #[error("{0}")]
    Route(RouteError),
    #[error("access rule {rule}: unknown interface {interface:?}")]
    UnknownRuleInterface { rule: String, interface: String },
    #[error("access rule {rule}: bad prefix length or port range (low above high)")]
    BadRule { rule: String },
    #[error("{0} must be above zero")]
    ZeroCapacity(&'static str),
    #[error("{0}")]
    Cluster(ClusterSpecError),
    #[error("{0}")]
    Fragments(ReasmConfigError),
}

impl std::error::Error for RouteError {}

/// What to do with the buffer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Transmit the (rewritten) buffer on this port.
    Forward(PortId),
    Drop(DropReason),
    /// The pipeline is done with the buffer and keeps nothing pointing to
    /// it: free it. A routed frame was copied to wait for its next hop's
    /// ARP reply (`arphold`); a fragment was copied into the reassembler to
    /// wait for its datagram's first fragment; or (cluster mode) a CCL control
    /// message was handled, or the frame was copied into the pending table
    /// to wait for an owner reply (counted in `Counters::consumed`).
    Consumed,
}

/// Per-port packet and byte counts.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PortCounters {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
}

/// IPv6 classification counts (IPv6 is parsed but not forwarded).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Ipv6Counters {
    pub packets: u64,
    pub tcp: u64,
    pub udp: u64,
    pub icmpv6: u64,
    pub fragments: u64,
    pub other: u64,
}

/// The pipeline's counters. Invariant: `packets == forwarded + consumed +
/// arp_replies + icmp_echo_replies + drops.iter().sum()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters {
    /// Frames passed to `process`.
    pub packets: u64,
    /// Per `DropReason::index()`.
    pub drops: [u64; DropReason::COUNT],
    /// Routed to an egress port.
    pub forwarded: u64,
    /// `Verdict::Consumed` (frames held for ARP resolution, fragments held
    /// for their first fragment; cluster mode: CCL control messages
    /// handled, frames parked in the pending table).
    pub consumed: u64,
    /// ARP requests answered.
    pub arp_replies: u64,
    /// ICMP echo requests answered.
    pub icmp_echo_replies: u64,
    /// ICMP errors passed because they quote a live flow (also in `forwarded`).
    pub icmp_errors_forwarded: u64,
    /// Flows created by `process` (conntrack has its own stats too).
    pub flows_created: u64,
    /// ARP requests queued for transmission.
    pub arp_requests: u64,
    /// Generated frames not queued because the queue was full.
    pub generated_dropped: u64,
    /// Frames received with an 802.1Q tag.
    pub vlan_tagged: u64,
    /// Frames `process` was given that the fast path handled
    /// (`dataplane::fastpath`; also in `forwarded`, `consumed` or `drops`;
    /// a CCL datagram counts once, whatever it carried).
    pub fast_path: u64,
    /// Frames held for an unresolved next hop (`arphold`; `held` is also
    /// in `consumed`).
    pub arp_hold: ArpHoldCounters,
    pub ipv6: Ipv6Counters,
    /// Indexed by `PortId.0`, for every port up to the highest configured.
    pub ports: Vec<PortCounters>,
    /// Frames received on a port beyond the configured ones.
    pub rx_unknown_port: u64,
}

impl Counters {
    fn new(max_port: usize) -> Self {
        Counters {
            packets: 0,
            drops: [0; DropReason::COUNT],
            forwarded: 0,
            consumed: 0,
            arp_replies: 0,
            icmp_echo_replies: 0,
            icmp_errors_forwarded: 0,
            flows_created: 0,
            arp_requests: 0,
            generated_dropped: 0,
            vlan_tagged: 0,
            fast_path: 0,
            arp_hold: ArpHoldCounters::default(),
            ipv6: Ipv6Counters::default(),
            ports: vec![PortCounters::default(); max_port + 1],
            rx_unknown_port: 0,
        }
    }
    pub fn drop_count(&self, r: DropReason) -> u64 {
        self.drops.get(r.index()).copied().unwrap_or(0)
    }
    pub fn dropped(&self) -> u64 {
        self.drops.iter().sum()
    }
    /// Frames that left `process` with a `Forward` verdict.
    pub fn emitted(&self) -> u64 {
        self.forwarded + self.arp_replies + self.icmp_echo_replies
    }
    /// A serialisable copy (drop reasons by name, all of them).
    pub fn snapshot(&self) -> CountersSnapshot {
        CountersSnapshot {
            packets: self.packets,
            forwarded: self.forwarded,
            consumed: self.consumed,
            arp_replies: self.arp_replies,
            icmp_echo_replies: self.icmp_echo_replies,
            icmp_errors_forwarded: self.icmp_errors_forwarded,
            flows_created: self.flows_created,
            arp_requests: self.arp_requests,
            generated_dropped: self.generated_dropped,
            vlan_tagged: self.vlan_tagged,
            fast_path: self.fast_path,
            arp_hold: self.arp_hold,
            ipv6: self.ipv6,
            dropped: self.dropped(),
            drops: DropReason::ALL
                .iter()
                .map(|&r| (r.as_str(), self.drop_count(r)))
                .collect(),
            ports: self.ports.clone(),
            rx_unknown_port: self.rx_unknown_port,
        }
    }
}

/// `Counters` for `show stats` (off the packet path).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CountersSnapshot {
    pub packets: u64,
    pub forwarded: u64,
    pub consumed: u64,
    pub arp_replies: u64,
    pub icmp_echo_replies: u64,
    pub icmp_errors_forwarded: u64,
    pub flows_created: u64,
    pub arp_requests: u64,
    pub generated_dropped: u64,
    pub vlan_tagged: u64,
    pub fast_path: u64,
    pub arp_hold: ArpHoldCounters,
    pub ipv6: Ipv6Counters,
    pub dropped: u64,
    pub drops: Vec<(&'static str, u64)>,
    pub ports: Vec<PortCounters>,
    pub rx_unknown_port: u64,
}

/// An interface as the packet path sees it (Copy; the name lives apart).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Iface {
    pub(crate) port: PortId,
    pub(crate) mac: [u8; 6],
    pub(crate) addr: Ipv4Addr,
    pub(crate) prefix_len: u8,
    pub(crate) vlan: Option<u16>,
}

impl Iface {
    /// The subnet-directed broadcast address; none on /31 (RFC 3021) and
    /// /32 links.
    fn directed_broadcast(&self) -> Option<Ipv4Addr> {
        (self.prefix_len <= 30)
            .then(|| Ipv4Addr::from(u32::from(self.addr) | !mask(self.prefix_len)))
    }
    fn in_subnet(&self, a: Ipv4Addr) -> bool {
        contains(self.addr, self.prefix_len, a)
    }
}

struct Generated {
    port: PortId,
    len: usize,
    frame: [u8; GENERATED_LEN],
}

/// Internal result of `classify`, mapped to counters by `process`.
pub(crate) enum Outcome {
    Forward(PortId),
    Consumed,
    ArpReply(PortId),
    EchoReply(PortId),
    Drop(DropReason),
}

impl From<DropReason> for Outcome {
    fn from(r: DropReason) -> Self {
        Outcome::Drop(r)
    }
}

/// One worker's pipeline state.
pub struct Pipeline {
    pub(crate) ifaces: Vec<Iface>,
    names: Vec<String>,
    pub(crate) routes: RouteTable,
    acl: Acl,
    pub(crate) conntrack: ConnTable,
    pub(crate) arp: ArpCache,
    /// `PipelineConfig::static_neighbors`, searched linearly (a handful).
    static_neighbors: Vec<(Ipv4Addr, [u8; 6])>,
    generated: Vec<Generated>,
    pub(crate) counters: Counters,
    /// Cluster roles (`clusterpath`); `None` in single-node mode.
    pub(crate) cluster: Option<Box<ClusterState>>,
    /// Reassembler and released-fragment slots (`fragpath`).
    pub(crate) frag: Box<FragState>,
    /// Frames waiting for their next hop's ARP reply (`arphold`).
    arp_hold: Box<ArpHold>,
    /// Per port: the untagged interface on it, if any (`fastpath`).
    pub(crate) untagged_iface: Vec<Option<u16>>,
    /// `fastpath` enabled (the default).
    pub(crate) fast_path: bool,
    /// Every interface address and directed broadcast (from `ifaces`).
    pub(crate) own_addrs: Vec<Ipv4Addr>,
    /// The fast path's last next-hop answer (`fastpath`).
    pub(crate) nh_memo: Option<crate::fastpath::NextHopMemo>,
}

/// RFC 1122 §3.2.1.3 / RFC 1812 §5.3.7: addresses that are never a valid
/// source: "this network" 0/8, loopback 127/8, multicast 224/4, reserved
/// 240/4 and limited broadcast.
pub(crate) fn martian_source(a: Ipv4Addr) -> bool {
    let o = a.octets()[0];
    o == 0 || o == 127 || o >= 224
}

/// RFC 1812 §5.3.7: destinations a router must not forward (0/8, 127/8,
/// 240/4 other than limited broadcast).
fn martian_destination(a: Ipv4Addr) -> bool {
    let o = a.octets()[0];
    o == 0 || o == 127 || (o >= 240 && a != Ipv4Addr::BROADCAST)
}

fn is_multicast_mac(m: &[u8; 6]) -> bool {
    m[0] & 1 != 0
}

impl Pipeline {
    /// Validate the configuration and reserve all memory, with the default
    /// fragment limits (`FragConfig::default()`, ≈ 5.1 MiB).
    pub fn new(cfg: PipelineConfig) -> Result<Self, PipelineError> {
        Self::with_fragments(cfg, FragConfig::default())
    }

    /// `new` with explicit fragment limits (docs/fragments.md).
    pub fn with_fragments(cfg: PipelineConfig, frags: FragConfig) -> Result<Self, PipelineError> {
        if cfg.interfaces.is_empty() {
            return Err(PipelineError::NoInterfaces);
        }
        if cfg.interfaces.len() > usize::from(u16::MAX) {
            return Err(PipelineError::TooManyInterfaces(cfg.interfaces.len()));
        }
        if cfg.flow_capacity == 0 {
            return Err(PipelineError::ZeroCapacity("flow-table capacity"));
        }
        if cfg.arp_capacity == 0 {
            return Err(PipelineError::ZeroCapacity("arp capacity"));
        }
        let specs = &cfg.interfaces;
        for (i, s) in specs.iter().enumerate() {
            if s.prefix_len > 32 {
                return Err(PipelineError::BadPrefixLen {
                    name: s.name.clone(),
                    prefix_len: s.prefix_len,
                });
            }
            if martian_source(s.addr) {
                return Err(PipelineError::BadAddress {
                    name: s.name.clone(),
                    addr: s.addr,
                });
            }
            if let Some(v) = s.vlan {
                if v == 0 || v > ethernet::VLAN_ID_MAX {
                    return Err(PipelineError::BadVlan {
                        name: s.name.clone(),
                        vlan: v,
                    });
                }
            }
            for t in &specs[..i] {
                if t.name == s.name {
                    return Err(PipelineError::DuplicateName(s.name.clone()));
                }
                if t.port == s.port && t.vlan == s.vlan {
                    return Err(PipelineError::DuplicatePortVlan {
                        a: t.name.clone(),
                        b: s.name.clone(),
                    });
                }
                let p = s.prefix_len.min(t.prefix_len);
                if contains(s.addr, p, t.addr) {
                    return Err(PipelineError::OverlappingSubnets {
                        a: t.name.clone(),
                        b: s.name.clone(),
                    });
                }
            }
        }
        let connected: Vec<(Ipv4Addr, u8)> = specs.iter().map(|s| (s.addr, s.prefix_len)).collect();
        for r in &cfg.routes {
            if specs.iter().any(|s| s.addr == r.via) {
                return Err(PipelineError::NextHopIsLocal {
                    destination: r.destination,
                    prefix_len: r.prefix_len,
                    via: r.via,
                });
            }
        }
        let statics: Vec<_> = cfg
            .routes
            .iter()
            .map(|r| (r.destination, r.prefix_len, r.via))
            .collect();
        let routes = RouteTable::new(&connected, &statics).map_err(PipelineError::Route)?;

        let mut rules = Vec::with_capacity(cfg.rules.len());
        for r in &cfg.rules {
            let iface = match &r.interface {
                None => None,
                Some(n) => Some(IfIndex(specs.iter().position(|s| &s.name == n).ok_or_else(
                    || PipelineError::UnknownRuleInterface {
                        rule: r.name.clone(),
                        interface: n.clone(),
                    },
                )? as u16)),
            };
            if r.src.1 > 32
                || r.dst.1 > 32
                || r.src_ports.0 > r.src_ports.1
                || r.dst_ports.0 > r.dst_ports.1
            {
                return Err(PipelineError::BadRule {
                    rule: r.name.clone(),
                });
            }
            rules.push(AclRule {
                name: r.name.clone(),
                permit: r.permit,
                iface,
                protocol: r.protocol,
                src: r.src,
                dst: r.dst,
                src_ports: r.src_ports,
                dst_ports: r.dst_ports,
            });
        }
        let acl = Acl::new(rules, specs.iter().map(|s| s.security_level).collect());
        let max_port = specs
            .iter()
            .map(|s| usize::from(s.port.0))
            .max()
            .unwrap_or(0);
        let cluster = match &cfg.cluster {
            None => None,
            Some(c) => {
                let (i, s) = specs
                    .iter()
                    .enumerate()
                    .find(|(_, s)| s.name == c.ccl_iface)
                    .ok_or_else(|| {
                        PipelineError::Cluster(ClusterSpecError::UnknownCclIface(c.ccl_iface.clone()))
                    })?;
                if s.vlan.is_some() {
                    return Err(PipelineError::Cluster(ClusterSpecError::TaggedCclIface(
                        c.ccl_iface.clone(),
                    )));
                }
                let ccl = (IfIndex(i as u16), s.port, s.mac, s.addr);
                Some(Box::new(
                    ClusterState::new(c, ccl, cfg.flow_capacity).map_err(PipelineError::Cluster)?,
                ))
            }
        };
        let ifaces: Vec<Iface> = specs
            .iter()
            .map(|s| Iface {
                port: s.port,
                mac: s.mac,
                addr: s.addr,
                prefix_len: s.prefix_len,
                vlan: s.vlan,
            })
            .collect();
        let untagged_iface = (0..=max_port)
            .map(|p| ifaces.iter().position(|i| usize::from(i.port.0) == p && i.vlan.is_none()).map(|i| i as u16))
            .collect();
        let own_addrs = ifaces.iter().flat_map(|i| [Some(i.addr), i.directed_broadcast()]).flatten().collect();
        Ok(Pipeline {
            ifaces,
            names: specs.iter().map(|s| s.name.clone()).collect(),
            routes,
            acl,
            conntrack: ConnTable::new(cfg.flow_capacity, cfg.timeouts),
            arp: ArpCache::new(cfg.arp_capacity, cfg.arp_timeout, cfg.arp_retry),
            static_neighbors: cfg.static_neighbors.clone(),
            generated: Vec::with_capacity(MAX_GENERATED),
            counters: Counters::new(max_port),
            cluster,
            frag: Box::new(FragState::new(&frags).map_err(PipelineError::Fragments)?),
            arp_hold: Box::new(ArpHold::new()),
            untagged_iface,
            fast_path: true,
            own_addrs,
            nh_memo: None,
        })
    }

    /// Process one received frame. No allocation, no panic, no logging.
    pub fn process<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        in_port: PortId,
        buf: &mut B,
    ) -> Verdict {
        let c = &mut self.counters;
        c.packets += 1;
        match c.ports.get_mut(usize::from(in_port.0)) {
            Some(p) => {
                p.rx_packets += 1;
                p.rx_bytes += buf.data().len() as u64;
            }
            None => c.rx_unknown_port += 1,
        }
        if self.fast_path {
            if let Some(outcome) = self.fast_forward(now, in_port, buf) {
                return self.account(outcome, buf);
            }
        }
        let outcome = self.classify(now, in_port, buf, Rx::PORT);
        self.account(outcome, buf)
    }

    /// A hint before processing a received burst: start loading the flow
    /// table entries its IPv4 TCP/UDP frames will look up, in two passes
    /// over up to 64 frames at a time (every frame's index bucket, then
    /// every matching slot), so that the cache misses of the whole burst
    /// overlap instead of stalling packet after packet. Reads only; changes
    /// nothing; a frame it cannot read is skipped (its `process` call will
    /// say why).
    ///
    /// Skipped while the table holds fewer than `PREFETCH_MIN_FLOWS` flows:
    /// then slots and index fit in the L2 cache and the prefetches would
    /// only cost (about 8 ns per packet with 1024 flows on the DPDK bench).
    #[inline]
    pub fn prefetch_burst<'a>(&self, frames: impl Iterator<Item = &'a [u8]>) {
        const CHUNK: usize = 64;
        if self.conntrack.len() < PREFETCH_MIN_FLOWS {
            return;
        }
        let mut frames = frames.peekable();
        while frames.peek().is_some() {
            let mut hashes = [0u64; CHUNK];
            let mut n = 0;
            for f in frames.by_ref().take(CHUNK) {
                if let Some(t) = hint_tuple(f) {
                    let h = self.conntrack.prefetch_hash(&t);
                    self.conntrack.prefetch_bucket(h);
                    hashes[n] = h;
                    n += 1;
                }
            }
            for &h in &hashes[..n] {
                self.conntrack.prefetch_slot(h);
            }
        }
    }

    /// Map an outcome to counters and a verdict.
    fn account<B: PacketBuf>(&mut self, outcome: Outcome, buf: &B) -> Verdict {
        let c = &mut self.counters;
        let port = match outcome {
            Outcome::Drop(r) => {
                if let Some(d) = c.drops.get_mut(r.index()) {
                    *d += 1;
                }
                return Verdict::Drop(r);
            }
            Outcome::Forward(p) => {
                c.forwarded += 1;
                p
            }
            Outcome::Consumed => {
                c.consumed += 1;
                return Verdict::Consumed;
            }
            Outcome::ArpReply(p) => {
                c.arp_replies += 1;
                p
            }
            Outcome::EchoReply(p) => {
                c.icmp_echo_replies += 1;
                p
            }
        };
        if let Some(pc) = c.ports.get_mut(usize::from(port.0)) {
            pc.tx_packets += 1;
            pc.tx_bytes += buf.data().len() as u64;
        }
        Verdict::Forward(port)
    }

    fn iface_for(&self, port: PortId, vlan: Option<u16>) -> Option<(IfIndex, Iface)> {
        self.ifaces
            .iter()
            .enumerate()
            .find(|(_, i)| i.port == port && i.vlan == vlan)
            .map(|(n, i)| (IfIndex(n as u16), *i))
    }

    /// `rx` says how the frame came: from a port (normal), or unwrapped
    /// from a CCL message (processed as received on the named interface:
    /// no L2 destination check, no ARP, IPv4 only).
    pub(crate) fn classify<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        in_port: PortId,
        buf: &mut B,
        rx: Rx,
    ) -> Outcome {
        let (l2, tags, vlan, ethertype, dst) = match EthernetFrame::new_checked(buf.data()) {
            Ok(e) => (
                e.header_len(),
                e.tag_count(),
                e.vlan(),
                e.ethertype(),
                e.dst(),
            ),
            Err(_) => return DropReason::EthTruncated.into(),
        };
        if tags > 0 {
            self.counters.vlan_tagged += 1;
        }
        if tags > 1 {
            return DropReason::NoInterface.into();
        }
        if let Via::Ccl(ifx) = rx.via {
            // A frame unwrapped from the CCL: it was addressed to the
            // forwarder's MAC; it is processed as received on `ifx`.
            let Some(ing) = self.ifaces.get(usize::from(ifx.0)).copied() else {
                return DropReason::CclMalformed.into();
            };
            if ethertype != ethertype::IPV4 {
                return DropReason::CclMalformed.into();
            }
            return match self.ipv4_in(now, in_port, ifx, ing, l2, tags, false, rx, buf) {
                Ok(o) => o,
                Err(r) => Outcome::Drop(r),
            };
        }
        let Some((ifx, ing)) = self.iface_for(in_port, vlan) else {
            return DropReason::NoInterface.into();
        };
        if dst != ing.mac && dst != BROADCAST {
            return DropReason::EthNotForUs.into();
        }
        match ethertype {
            ethertype::ARP => self.arp_in(now, in_port, ifx, ing, l2, buf),
            ethertype::IPV4 => {
                match self.ipv4_in(now, in_port, ifx, ing, l2, tags, dst == BROADCAST, rx, buf) {
                    Ok(o) => o,
                    Err(r) => Outcome::Drop(r),
                }
            }
            ethertype::IPV6 => self.ipv6_in(l2, buf).into(),
            _ => DropReason::EthUnsupportedType.into(),
        }
    }

    fn ipv6_in<B: PacketBuf>(&mut self, l2: usize, buf: &B) -> DropReason {
        let c = &mut self.counters.ipv6;
        c.packets += 1;
        let p = match Ipv6Packet::new_checked(buf.data().get(l2..).unwrap_or(&[])) {
            Ok(p) => p,
            Err(ipv6::Error::Truncated) | Err(ipv6::Error::BadPayloadLen) => {
                return DropReason::Ipv6Truncated
            }
            Err(_) => return DropReason::Ipv6Malformed,
        };
        match p.upper_layer() {
            Ok(u) => {
                if u.fragment.is_some() {
                    c.fragments += 1;
                }
                match u.protocol {
                    ip_proto::TCP => c.tcp += 1,
                    ip_proto::UDP => c.udp += 1,
                    ip_proto::ICMPV6 => c.icmpv6 += 1,
                    _ => c.other += 1,
                }
                DropReason::Ipv6NotForwarded
            }
            Err(_) => DropReason::Ipv6Malformed,
        }
    }

    fn arp_in<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        in_port: PortId,
        ifx: IfIndex,
        ing: Iface,
        l2: usize,
        buf: &mut B,
    ) -> Outcome {
        let repr = match ArpPacket::new_checked(buf.data().get(l2..).unwrap_or(&[])) {
            Ok(p) => ArpRepr::parse(&p),
            Err(_) => return DropReason::ArpMalformed.into(),
        };
        if is_multicast_mac(&repr.sender_mac) || repr.sender_mac == [0; 6] {
            return DropReason::ArpMalformed.into();
        }
        // Learn only plausible neighbours: inside the subnet, not us, not
        // the probe address 0.0.0.0 (RFC 5227).
        let plausible = ing.in_subnet(repr.sender_ip)
            && repr.sender_ip != ing.addr
            && Some(repr.sender_ip) != ing.directed_broadcast()
            && !martian_source(repr.sender_ip);
        let for_us = repr.target_ip == ing.addr;
        if plausible
            && self.arp.learn(now, repr.sender_ip, repr.sender_mac, ifx, for_us)
            && self.arp_hold.len() > 0
        {
            self.counters.arp_hold.released += self.arp_hold.release(repr.sender_ip, repr.sender_mac);
        }
        if !for_us {
            return DropReason::ArpNotForUs.into();
        }
        match repr.operation {
            Operation::Request => {
                let data = buf.data_mut();
                let Ok(mut eth) = EthernetFrame::new_checked(&mut data[..]) else {
                    return DropReason::EthTruncated.into();
                };
                eth.set_dst(repr.sender_mac);
                eth.set_src(ing.mac);
                let Some(body) = data.get_mut(l2..) else {
                    return DropReason::ArpMalformed.into();
                };
                let Ok(mut a) = ArpPacket::new_checked(body) else {
                    return DropReason::ArpMalformed.into();
                };
                a.set_operation(Operation::Reply);
                a.set_target_mac(repr.sender_mac);
                a.set_target_ip(repr.sender_ip);
                a.set_sender_mac(ing.mac);
                a.set_sender_ip(ing.addr);
                Outcome::ArpReply(in_port)
            }
            Operation::Reply => DropReason::ArpConsumed.into(),
            Operation::Other(_) => DropReason::ArpMalformed.into(),
        }
    }

    /// IPv4 input; then, if this frame was the first fragment of a
    /// datagram with fragments held, release them (`fragpath`).
    #[allow(clippy::too_many_arguments)]
    fn ipv4_in<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        in_port: PortId,
        ifx: IfIndex,
        ing: Iface,
        l2: usize,
        tags: u8,
        l2_broadcast: bool,
        rx: Rx,
        buf: &mut B,
    ) -> Result<Outcome, DropReason> {
        let mut release = None;
        let r = self.ipv4_decide(now, in_port, ifx, ing, l2, tags, l2_broadcast, rx, buf, &mut release);
        if let Some(rel) = release {
            self.frag_release_held(now, &rel);
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn ipv4_decide<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        in_port: PortId,
        ifx: IfIndex,
        ing: Iface,
        l2: usize,
        tags: u8,
        l2_broadcast: bool,
        rx: Rx,
        buf: &mut B,
        release: &mut Option<Release>,
    ) -> Result<Outcome, DropReason> {
        // --- Parse and decide, holding only a shared borrow of the frame. ---
        let step = 'decide: {
            let ip =
                Ipv4Packet::new_checked(buf.data().get(l2..).unwrap_or(&[])).map_err(
                    |e| match e {
                        ipv4::Error::Truncated => DropReason::Ipv4Truncated,
                        ipv4::Error::BadVersion => DropReason::Ipv4BadVersion,
                        ipv4::Error::BadHeaderLen => DropReason::Ipv4BadHeaderLen,
                        ipv4::Error::BadTotalLen => DropReason::Ipv4BadTotalLen,
                    },
                )?;
            if !ip.verify_checksum() {
                return Err(DropReason::Ipv4BadChecksum);
            }
            let (src, dst) = (ip.src(), ip.dst());
            if martian_source(src) || self.own_addrs.contains(&src) {
                return Err(DropReason::Ipv4BadSource);
            }
            if ip.header_len() > ipv4::MIN_HEADER_LEN {
                match ipv4::scan_options(ip.options()) {
                    ipv4::OptionScan::Clean => {}
                    ipv4::OptionScan::SourceRoute => return Err(DropReason::Ipv4SourceRoute),
                    ipv4::OptionScan::Malformed => return Err(DropReason::Ipv4BadOptions),
                }
            }
            let is_frag = ip.is_fragment();
            if martian_destination(dst) {
                return Err(DropReason::Ipv4BadDestination);
            }
            if dst == ing.addr {
                // Fragments to the node itself are not reassembled.
                if is_frag {
                    self.frag.counters.local += 1;
                    return Err(DropReason::Ipv4Fragment);
                }
                if rx.via != Via::Port {
                    return Err(DropReason::LocalUnhandled);
                }
                if self.is_ccl_datagram(ifx, &ip) {
                    return self.ccl_in(now, in_port, buf);
                }
                return self.local_in(in_port, ing, l2, buf);
            }
            if dst.is_multicast() || dst == Ipv4Addr::BROADCAST || self.own_addrs.contains(&dst) {
                return Err(DropReason::LocalUnhandled);
            }
            // RFC 1812 §5.3.4: a datagram received as a link-layer
            // broadcast is not forwarded.
            if l2_broadcast {
                return Err(DropReason::EthNotForUs);
            }
            // RFC 1812 §5.3.1: a router must not forward with TTL 0 after
            // decrement.
            if ip.ttl() <= 1 {
                return Err(DropReason::TtlExceeded);
            }
            let route = self.routes.lookup(dst).ok_or(DropReason::NoRoute)?;
            let egress = route.iface;
            // Fragments (fragpath): find the datagram's L4 header.
            let mut note = rx.frag;
            let mut piece = None;
            let mut rx = rx;
            if is_frag {
                let Some(info) = frag::ipv4_fragment(&ip)? else {
                    return Err(DropReason::Ipv4Fragment);
                };
                piece = Some((info.offset, info.more));
                if note.is_none() {
                    // R10: a fragment received on a port goes to its
                    // fragment owner; one from the CCL is ours to handle.
                    if let Some(cl) = self.cluster.as_deref() {
                        let k = &info.key;
                        let fo = frag::fragment_owner(k.src, k.dst, k.ident, &cl.directors);
                        if fo != cl.me {
                            if rx.via == Via::Port {
                                break 'decide Step::FragOwner(fo);
                            }
                            // From the CCL and not ours as fragment owner:
                            // the fragment owner sent it to us as the flow
                            // owner (it never goes back: no loop).
                            rx.hinted = true;
                        }
                    }
                    let st = &mut *self.frag;
                    st.counters.inserted += 1;
                    if rx.hinted {
                        st.counters.from_fragment_owner += 1;
                    }
                    match st.reasm.insert(now, &info, ip.payload()) {
                        FragResult::Pending => {
                            st.counters.held += 1;
                            return Ok(Outcome::Consumed);
                        }
                        FragResult::FirstSeen { l4 } => {
                            let n = FragNote { l4, tuple: l4.five_tuple(&info.key) };
                            *release = Release::new(info.key, n, in_port, rx, buf.data(), l2);
                            note = Some(n);
                        }
                        FragResult::Forward { l4 } => note = Some(FragNote { l4, tuple: l4.five_tuple(&info.key) }),
                        // Shallow mode never completes a datagram, and an
                        // IPv4 fragment is never atomic.
                        FragResult::Complete { .. } | FragResult::Unfragmented => {
                            return Err(DropReason::Ipv4Fragment)
                        }
                        FragResult::Drop(r) => return Err(r),
                    }
                }
            }
            let (tuple, l4, lookup_only) = match note {
                Some(n) => {
                    let (off, more) = piece.unwrap_or((0, false));
                    let t = frag_track(&n.l4, off, ip.payload().len(), more)?;
                    (n.tuple, Some(*t.l4()), matches!(t, FragTrack::Lookup(_)))
                }
                None => match transit_l4(&ip)? {
                    Transit::Flow(t, l4) => (t, Some(l4), false),
                    Transit::IcmpError(t) => (t, None, false),
                },
            };
            // Cluster roles: who runs conntrack on this packet?
            if self.cluster.is_some() && !rx.force_own {
                // A fragment at its fragment owner (from a port or the
                // CCL) is decided as if received on a port; one the
                // fragment owner sent here with a hint, as at the owner.
                let prx = if note.is_some() && !rx.hinted { Rx { via: Via::Port, ..rx } } else { rx };
                let arx = Rx { frag: note, ..rx };
                match self.cluster_plan(now, &tuple, l4.as_ref(), prx) {
                    Plan::Own => {}
                    Plan::Drop(r) => return Err(r),
                    // A relayed later fragment would carry no ports for
                    // the director to read: ask it instead.
                    Plan::Relay(director) if note.is_some() => {
                        break 'decide Step::Cluster(Plan::Query { director, elect: false }, tuple, arx)
                    }
                    plan => break 'decide Step::Cluster(plan, tuple, arx),
                }
            }
            let icmp_error = l4.is_none();
            let mut xlate = None;
            match l4 {
                // The error must quote a flow and go back to its sender.
                None => {
                    if self.conntrack.lookup(&tuple).is_none() || tuple.src != IpAddr::V4(dst) {
                        return Err(DropReason::NoFlow);
                    }
                }
                // A later piece of a TCP segment without ACK: its flow
                // must exist, nothing to track.
                Some(_) if lookup_only => {
                    if self.conntrack.lookup(&tuple).is_none() {
                        return Err(DropReason::TcpNoFlow);
                    }
                }
                Some(l4) => {
                    let len = u32::from(ip.total_len());
                    xlate = self.track(now, &tuple, l4, len, ifx, egress)?;
                    // Only the first fragment carries the TCP header.
                    if piece.is_some_and(|(off, _)| off != 0) {
                        xlate = None;
                    }
                }
            }
            Step::Route {
                next_hop: route.next_hop,
                egress,
                icmp_error,
                xlate,
            }
        };
        let (next_hop, egress, icmp_error, xlate) = match step {
            Step::Route {
                next_hop,
                egress,
                icmp_error,
                xlate,
            } => (next_hop, egress, icmp_error, xlate),
            Step::Cluster(plan, tuple, rx) => {
                return self.cluster_act(now, in_port, ifx, rx, plan, &tuple, buf)
            }
            Step::FragOwner(fo) => {
                let iface = u8::try_from(ifx.0).map_err(|_| DropReason::CclMalformed)?;
                let port = self.wrap(now, buf, Wrap::Forward, iface, fo, None)?;
                self.frag.counters.to_fragment_owner += 1;
                return Ok(Outcome::Forward(port));
            }
        };

        // --- Resolve the next hop. ---
        let eg = *self
            .ifaces
            .get(usize::from(egress.0))
            .ok_or(DropReason::NoRoute)?;
        // Unresolved: rewrite all the same and hold the frame (`arphold`).
        let mac = match self.neighbor(now, next_hop, egress) {
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
        };
        if mac.is_none() && !self.arp_hold.can_hold(next_hop, buf.data().len() + TAG_LEN) {
            return Err(DropReason::ArpUnresolved);
        }

        // --- Rewrite: VLAN tag first (it may move the front and is the
        // only step that can fail), then sequence translation (R6), TTL,
        // MACs. ---
        let l2 = match (tags, eg.vlan) {
            (0, None) => l2,
            (0, Some(v)) => {
                if !buf.prepend(TAG_LEN) {
                    return Err(DropReason::NoHeadroom);
                }
                let d = buf.data_mut();
                let tag = d.get_mut(12..16).ok_or(DropReason::EthTruncated)?;
                tag[..2].copy_from_slice(&ethertype::VLAN.to_be_bytes());
                tag[2..].copy_from_slice(&(v & 0x0fff).to_be_bytes());
                l2 + TAG_LEN
            }
            (_, None) => {
                if !buf.trim_front(TAG_LEN) {
                    return Err(DropReason::EthTruncated);
                }
                l2 - TAG_LEN
            }
            (_, Some(v)) => {
                let d = buf.data_mut();
                let tci = d.get_mut(14..16).ok_or(DropReason::EthTruncated)?;
                let pcp = u16::from_be_bytes([tci[0], tci[1]]) & 0xf000;
                tci.copy_from_slice(&(pcp | (v & 0x0fff)).to_be_bytes());
                l2
            }
        };
        if let Some(x) = xlate {
            self.apply_xlate(l2, x, buf)?;
        }
        let d = buf.data_mut();
        let Some(l3) = d.get_mut(l2..) else {
            return Err(DropReason::EthTruncated);
        };
        if l3.len() < ipv4::MIN_HEADER_LEN {
            return Err(DropReason::Ipv4Truncated);
        }
        Ipv4Packet::new_unchecked(l3).decrement_ttl();
        if let Some(h) = d.get_mut(0..12) {
            h[..6].copy_from_slice(&mac.unwrap_or([0; 6]));
            h[6..].copy_from_slice(&eg.mac);
        }
        let outcome = match mac {
            Some(_) => Outcome::Forward(eg.port),
            None => {
                let wait = self.arp.give_up_after();
                let c = &mut self.counters.arp_hold;
                match self.arp_hold.hold(now, next_hop, eg.port, wait, buf.data()) {
                    Hold::Held => c.held += 1,
                    Hold::Replaced => {
                        c.held += 1;
                        c.replaced += 1;
                    }
                    Hold::Refused => return Err(DropReason::ArpUnresolved),
                }
                Outcome::Consumed
            }
        };
        if icmp_error {
            self.counters.icmp_errors_forwarded += 1;
        }
        Ok(outcome)
    }

    /// Run conntrack for a packet this node owns, with the ACL as the
    /// admission check; in cluster mode with the owner's sequence
    /// translation and flow records around it (`clusterpath`).
    pub(crate) fn track(
        &mut self,
        now: Timestamp,
        tuple: &FiveTuple,
        l4: L4Info,
        len: u32,
        ifx: IfIndex,
        egress: IfIndex,
    ) -> Result<Option<Xlate>, DropReason> {
        let mut seen = l4;
        let pre = self.owner_pre(tuple, &mut seen);
        let acl = &mut self.acl;
        let tracked = self
            .conntrack
            .track(now, tuple, &seen, len, || acl.check(ifx, egress, tuple))?;
        if tracked.created {
            self.counters.flows_created += 1;
        }
        Ok(self.owner_post(now, tuple, &l4, tracked, pre))
    }

    /// Answer an ICMP echo request to the ingress interface's address.
    fn local_in<B: PacketBuf>(
        &mut self,
        in_port: PortId,
        ing: Iface,
        l2: usize,
        buf: &mut B,
    ) -> Result<Outcome, DropReason> {
        let (src, dst, eth_src) = {
            let data = buf.data();
            let ip = Ipv4Packet::new_checked(data.get(l2..).unwrap_or(&[]))
                .map_err(|_| DropReason::Ipv4Truncated)?;
            if ip.protocol() != ip_proto::ICMP {
                return Err(DropReason::LocalUnhandled);
            }
            let icmp =
                Icmpv4Packet::new_checked(ip.payload()).map_err(|_| DropReason::L4Truncated)?;
            if icmp.msg_type() != msg_type::ECHO_REQUEST || icmp.code() != 0 {
                return Err(DropReason::LocalUnhandled);
            }
            if !icmp.verify_checksum() {
                return Err(DropReason::IcmpBadChecksum);
            }
            let eth_src = EthernetFrame::new_checked(data)
                .map(|e| e.src())
                .map_err(|_| DropReason::EthTruncated)?;
            (ip.src(), ip.dst(), eth_src)
        };
        let data = buf.data_mut();
        if let Some(h) = data.get_mut(0..12) {
            h[..6].copy_from_slice(&eth_src);
            h[6..].copy_from_slice(&ing.mac);
        }
        let l3 = data.get_mut(l2..).ok_or(DropReason::Ipv4Truncated)?;
        let mut ip = Ipv4Packet::new_checked(l3).map_err(|_| DropReason::Ipv4Truncated)?;
        ip.set_src(dst);
        ip.set_dst(src);
        ip.set_ttl(ipv4::DEFAULT_TTL);
        ip.fill_checksum();
        let mut icmp =
            Icmpv4Packet::new_checked(ip.payload_mut()).map_err(|_| DropReason::L4Truncated)?;
        // Type 8 → 0 changes only the type/code word: RFC 1624 update.
        let c = checksum::update_u16(icmp.checksum(), u16::from(msg_type::ECHO_REQUEST) << 8, 0);
        icmp.set_msg_type(msg_type::ECHO_REPLY);
        icmp.set_checksum(c);
        Ok(Outcome::EchoReply(in_port))
    }

    /// The MAC of `ip` behind interface `ifx`: a static neighbour, else the
    /// ARP cache.
    pub(crate) fn neighbor(&mut self, now: Timestamp, ip: Ipv4Addr, ifx: IfIndex) -> Resolve {
        match self.static_neighbor(ip) {
            Some(mac) => Resolve::Mac(mac),
            None => self.arp.resolve(now, ip, ifx),
        }
    }

    /// The MAC of `ip` if it is a static neighbour.
    #[inline]
    pub(crate) fn static_neighbor(&self, ip: Ipv4Addr) -> Option<[u8; 6]> {
        self.static_neighbors.iter().find(|(a, _)| *a == ip).map(|&(_, mac)| mac)
    }

    /// Queue a who-has for `target` out of `eg`, to `dst` (broadcast, or
    /// the known MAC when re-confirming a stale entry).
    pub(crate) fn queue_arp_request(&mut self, eg: Iface, target: Ipv4Addr, dst: [u8; 6]) {
        if self.generated.len() >= MAX_GENERATED {
            self.counters.generated_dropped += 1;
            return;
        }
        let mut frame = [0u8; GENERATED_LEN];
        let l2 = ethernet::emit_header(&mut frame, dst, eg.mac, eg.vlan, ethertype::ARP);
        let Some(body) = frame.get_mut(l2..) else {
            return;
        };
        ArpRepr {
            operation: Operation::Request,
            sender_mac: eg.mac,
            sender_ip: eg.addr,
            target_mac: [0; 6],
            target_ip: target,
        }
        .emit(body);
        let len = (l2 + crate::wire::arp::PACKET_LEN).max(ethernet::MIN_FRAME_LEN);
        self.generated.push(Generated {
            port: eg.port,
            len,
            frame,
        });
        self.counters.arp_requests += 1;
    }

    /// Hand every queued generated frame (ARP requests) to `f`, in order,
    /// and empty the queue. Counted as transmitted on their port.
    pub fn drain_generated(&mut self, mut f: impl FnMut(PortId, &[u8])) {
        for g in self.generated.drain(..) {
            if let Some(pc) = self.counters.ports.get_mut(usize::from(g.port.0)) {
                pc.tx_packets += 1;
                pc.tx_bytes += g.len as u64;
            }
            f(g.port, g.frame.get(..g.len).unwrap_or(&g.frame));
        }
        self.cluster_drain(&mut f);
        self.frag_drain(&mut f);
        self.arp_hold.drain(&mut self.counters.ports, &mut f);
    }

    /// Periodic work, bounded: expire up to `EXPIRE_BUDGET` flow slots and
    /// age the ARP cache.
    pub fn poll_timers(&mut self, now: Timestamp) {
        self.conntrack.expire(now, EXPIRE_BUDGET);
        self.arp.age(now);
        self.counters.arp_hold.expired += self.arp_hold.expire(now);
        self.cluster_timers(now);
        self.frag_timers(now);
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// Flows in the table.
    pub fn flow_count(&self) -> usize {
        self.conntrack.len()
    }
    pub fn conntrack(&self) -> &ConnTable {
        &self.conntrack
    }
    pub fn interface_names(&self) -> &[String] {
        &self.names
    }

    // --- Off the packet path (allocate freely). ---

    pub fn conns(&self, now: Timestamp, max: usize) -> Vec<ConnInfo> {
        let mut v = Vec::new();
        self.conntrack.snapshot(now, max, &mut v);
        self.cluster_conns(now, max, &mut v);
        v
    }
    pub fn routes(&self) -> Vec<RouteInfo> {
        self.routes.entries(&self.names)
    }
    pub fn arp_entries(&self, now: Timestamp) -> Vec<ArpInfo> {
        self.arp.entries(now, &self.names)
    }
    pub fn rules(&self) -> Vec<RuleInfo> {
        self.acl.rules(&self.names)
    }
    /// (default permits, default denies) of the security-level rule.
    pub fn default_rule_hits(&self) -> (u64, u64) {
        self.acl.default_hits()
    }
}

/// Where `ipv4_in`'s decision leads.
enum Step {
    /// Route it from here (after conntrack ran, as owner or single node).
    Route {
        next_hop: Ipv4Addr,
        egress: IfIndex,
        icmp_error: bool,
        xlate: Option<Xlate>,
    },
    /// Another node owns it, or we must ask first.
    Cluster(Plan, FiveTuple, Rx),
    /// A fragment whose fragment owner is this other node (R10).
    FragOwner(crate::types::NodeId),
}

/// Below this many flows `Pipeline::prefetch_burst` does nothing: 8192
/// slots of 128 bytes plus their index are about 1.1 MiB, within a core's
/// L2 cache on current server CPUs (2 MiB on the bench host's EPYC).
pub const PREFETCH_MIN_FLOWS: usize = 8192;

/// The five-tuple of an unfragmented IPv4 TCP or UDP frame (untagged or
/// with one 802.1Q tag), read without validation: only a prefetch hint.
#[inline]
fn hint_tuple(f: &[u8]) -> Option<FiveTuple> {
    let be16 = |at: usize| Some(u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]));
    let (l3, et) = match be16(12)? {
        ethertype::VLAN => (18, be16(16)?),
        et => (14, et),
    };
    if et != ethertype::IPV4 {
        return None;
    }
    let ihl = usize::from(*f.get(l3)? & 0x0f) * 4;
    if be16(l3 + 6)? & 0x3fff != 0 {
        return None;
    }
    let proto = *f.get(l3 + 9)?;
    if proto != ip_proto::TCP && proto != ip_proto::UDP {
        return None;
    }
    let addr = |at: usize| -> Option<IpAddr> {
        let b = f.get(at..at + 4)?;
        Some(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])))
    };
    let l4 = l3 + ihl;
    Some(FiveTuple { src: addr(l3 + 12)?, dst: addr(l3 + 16)?, proto, src_port: be16(l4)?, dst_port: be16(l4 + 2)? })
}

/// The fields conntrack needs from a TCP header (also the fast path's).
#[inline(always)]
pub(crate) fn tcp_seg<T: AsRef<[u8]>>(t: &TcpPacket<T>) -> TcpSeg {
    let flags = t.flags();
    // Window scale and SACK-permitted are only meaningful on SYNs
    // (RFC 7323 §2.2, RFC 2018 §2): skip the option walk otherwise.
    let opts = if flags & tcp::flags::SYN != 0 { TcpOptions::parse(t.options()) } else { TcpOptions::default() };
    TcpSeg {
        flags,
        seq: t.seq(),
        ack: t.ack(),
        window: t.window(),
        payload_len: t.payload().len() as u32,
        wscale: opts.wscale,
        sack_permitted: opts.sack_permitted,
    }
}

/// What a transit packet is to conntrack.
pub(crate) enum Transit {
    /// Track this tuple with this L4 summary.
    Flow(FiveTuple, L4Info),
    /// An ICMP error quoting this (original-direction) tuple.
    IcmpError(FiveTuple),
}

/// Build the five-tuple and L4 summary of a transit datagram. ICMP ports
/// follow types.rs (SPEC R3): echo request (id, 0), echo reply (0, id),
/// anything else (0, 0).
pub(crate) fn transit_l4<T: AsRef<[u8]>>(ip: &Ipv4Packet<T>) -> Result<Transit, DropReason> {
    let (src, dst, proto) = (IpAddr::V4(ip.src()), IpAddr::V4(ip.dst()), ip.protocol());
    let tuple = |sp, dp| FiveTuple {
        src,
        dst,
        proto,
        src_port: sp,
        dst_port: dp,
    };
    let payload = ip.payload();
    Ok(match proto {
        ip_proto::TCP => {
            let t = TcpPacket::new_checked(payload).map_err(|e| match e {
                tcp::Error::BadHeaderLen => DropReason::TcpBadHeaderLen,
                _ => DropReason::L4Truncated,
            })?;
            Transit::Flow(tuple(t.src_port(), t.dst_port()), L4Info::Tcp(tcp_seg(&t)))
        }
        ip_proto::UDP => {
            let u = UdpPacket::new_checked(payload).map_err(|_| DropReason::L4Truncated)?;
            Transit::Flow(tuple(u.src_port(), u.dst_port()), L4Info::Udp)
        }
        ip_proto::ICMP => {
            let i = Icmpv4Packet::new_checked(payload).map_err(|_| DropReason::L4Truncated)?;
            match i.msg_type() {
                msg_type::ECHO_REQUEST => {
                    Transit::Flow(tuple(i.echo_ident(), 0), L4Info::IcmpEchoRequest)
                }
                msg_type::ECHO_REPLY => {
                    Transit::Flow(tuple(0, i.echo_ident()), L4Info::IcmpEchoReply)
                }
                _ if i.is_error() => {
                    let e = i.embedded().map_err(|_| DropReason::L4Truncated)?;
                    let (sp, dp) = match e.protocol {
                        ip_proto::TCP | ip_proto::UDP => (
                            u16::from_be_bytes([e.l4[0], e.l4[1]]),
                            u16::from_be_bytes([e.l4[2], e.l4[3]]),
                        ),
                        ip_proto::ICMP => {
                            let id = u16::from_be_bytes([e.l4[4], e.l4[5]]);
                            match e.l4[0] {
                                msg_type::ECHO_REQUEST => (id, 0),
                                msg_type::ECHO_REPLY => (0, id),
                                _ => (0, 0),
                            }
                        }
                        _ => (0, 0),
                    };
                    Transit::IcmpError(FiveTuple {
                        src: IpAddr::V4(e.src),
                        dst: IpAddr::V4(e.dst),
                        proto: e.protocol,
                        src_port: sp,
                        dst_port: dp,
                    })
                }
                _ => Transit::Flow(tuple(0, 0), L4Info::Other),
            }
        }
        _ => Transit::Flow(tuple(0, 0), L4Info::Other),
    })
}
