//! Small value types shared by every dataplane module: identities as
//! newtypes, the virtual clock, the five-tuple, and the drop reasons.
//!
//! Invariant: nothing here allocates, and every type is `Copy`, so the
//! per-packet path can pass them by value.

use core::fmt;
use std::net::IpAddr;

/// A DPDK port number, as seen by the dataplane (0-based, dense).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct PortId(pub u16);

/// Index of a worker (one per polling lcore).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct WorkerId(pub u16);

/// A cluster member's identity, 0..=15 (SPEC: up to 16 nodes). Travels in
/// SYN cookies (4 bits) and CCL headers.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct NodeId(pub u8);

impl NodeId {
    /// Most members a cluster can have.
    pub const MAX_NODES: usize = 16;
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node{}", self.0)
    }
}

/// Version of the member set. Every membership change bumps it; tables
/// derived from the member set (director ranking, fragment owner) carry the
/// epoch they were built for.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Epoch(pub u64);

/// Monotonic time in nanoseconds since an arbitrary origin. The core never
/// reads a clock: drivers pass `Timestamp` in (DPDK: TSC-derived; simulator:
/// virtual clock).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub const ZERO: Timestamp = Timestamp(0);
    /// Never reached (a lease that never runs out).
    pub const MAX: Timestamp = Timestamp(u64::MAX);
    pub const fn from_secs(s: u64) -> Self {
        Timestamp(s * 1_000_000_000)
    }
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms * 1_000_000)
    }
    pub const fn nanos(self) -> u64 {
        self.0
    }
    pub const fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(d.0))
    }
    /// Time elapsed since `earlier` (zero if `earlier` is in the future).
    pub const fn since(self, earlier: Timestamp) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

/// A span of virtual time in nanoseconds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Duration(pub u64);

impl Duration {
    pub const ZERO: Duration = Duration(0);
    pub const fn from_secs(s: u64) -> Self {
        Duration(s * 1_000_000_000)
    }
    pub const fn from_millis(ms: u64) -> Self {
        Duration(ms * 1_000_000)
    }
    pub const fn as_secs(self) -> u64 {
        self.0 / 1_000_000_000
    }
}

/// IP protocol numbers used by the dataplane (IANA "Assigned Internet
/// Protocol Numbers").
pub mod ip_proto {
    pub const ICMP: u8 = 1;
    pub const TCP: u8 = 6;
    pub const UDP: u8 = 17;
    pub const IPV6_FRAG: u8 = 44;
    pub const ICMPV6: u8 = 58;
}

/// The 5-tuple of a packet as it travels (not normalised). For ICMP the
/// ports follow SPEC R3: echo request → (src = identifier, dst = 0), echo
/// reply → (src = 0, dst = identifier), anything else → (0, 0).
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct FiveTuple {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub src_port: u16,
    pub dst_port: u16,
}

impl core::hash::Hash for FiveTuple {
    /// Three words for IPv4 (five for IPv6) instead of the derived
    /// field-by-field writes: the forwarder-record and pending maps hash a
    /// tuple per forwarded packet. Equal tuples hash equally (the families
    /// are in the last word, so an IPv4 address never collides with an
    /// IPv6 one by construction).
    #[inline]
    fn hash<H: core::hash::Hasher>(&self, h: &mut H) {
        let mut fam = 0u64;
        for (i, a) in [&self.src, &self.dst].into_iter().enumerate() {
            match a {
                IpAddr::V4(v) => h.write_u64(u64::from(u32::from(*v))),
                IpAddr::V6(v) => {
                    let x = u128::from(*v);
                    h.write_u64((x >> 64) as u64);
                    h.write_u64(x as u64);
                    fam |= 1 << i;
                }
            }
        }
        h.write_u64(
            u64::from(self.src_port) | u64::from(self.dst_port) << 16 | u64::from(self.proto) << 32 | fam << 40,
        );
    }
}

impl FiveTuple {
    /// The same connection seen from the other direction.
    pub fn reversed(&self) -> Self {
        FiveTuple { src: self.dst, dst: self.src, proto: self.proto, src_port: self.dst_port, dst_port: self.src_port }
    }
}

impl fmt::Display for FiveTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}:{} -> {}:{}", self.proto, self.src, self.src_port, self.dst, self.dst_port)
    }
}

/// Direction of a packet relative to the connection's initiator.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Direction {
    /// Same direction as the packet that created the flow.
    Original,
    /// The return direction.
    Reply,
}

impl Direction {
    /// The other direction.
    #[inline]
    pub const fn opposite(self) -> Direction {
        match self {
            Direction::Original => Direction::Reply,
            Direction::Reply => Direction::Original,
        }
    }
}

macro_rules! drop_reasons {
    ($( $(#[$doc:meta])* $name:ident => $text:literal, )*) => {
        /// Why a packet was dropped. One counter per reason; the text is
        /// the stable name shown by `clusterfw-ctl show stats`.
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason { $( $(#[$doc])* $name, )* }

        impl DropReason {
            pub const ALL: &'static [DropReason] = &[ $( DropReason::$name, )* ];
            pub const COUNT: usize = DropReason::ALL.len();
            pub const fn as_str(self) -> &'static str {
                match self { $( DropReason::$name => $text, )* }
            }
            pub const fn index(self) -> usize { self as usize }
        }
    };
}

drop_reasons! {
    // --- L2 ---
    /// Frame shorter than an Ethernet header, or a truncated VLAN tag.
    EthTruncated => "eth-truncated",
    /// Destination MAC is neither ours nor broadcast/multicast we handle.
    EthNotForUs => "eth-not-for-us",
    /// EtherType we do not handle (neither IPv4, IPv6, ARP).
    EthUnsupportedType => "eth-unsupported-ethertype",
    /// Frame arrived on a port/VLAN with no configured interface.
    NoInterface => "no-interface",
    // --- ARP ---
    ArpMalformed => "arp-malformed",
    /// ARP not for one of our addresses (not an error, but not forwarded).
    ArpNotForUs => "arp-not-for-us",
    /// ARP packet consumed (reply learnt); counted as a drop of the frame.
    ArpConsumed => "arp-consumed",
    /// Next hop unresolved; ARP request sent, packet dropped.
    ArpUnresolved => "arp-unresolved",
    /// ARP cache full; could not create a pending entry.
    ArpCacheFull => "arp-cache-full",
    // --- IPv4 ---
    Ipv4Truncated => "ipv4-truncated",
    Ipv4BadVersion => "ipv4-bad-version",
    Ipv4BadHeaderLen => "ipv4-bad-ihl",
    Ipv4BadTotalLen => "ipv4-bad-total-length",
    Ipv4BadChecksum => "ipv4-bad-checksum",
    Ipv4BadSource => "ipv4-bad-source",
    /// TTL would reach zero.
    TtlExceeded => "ttl-exceeded",
    /// A fragment addressed to the node itself (local reassembly is not
    /// implemented), or a fragment the shallow reassembler cannot place.
    Ipv4Fragment => "ipv4-fragment",
    /// Packet for one of our addresses that we do not answer.
    LocalUnhandled => "local-unhandled",
    NoRoute => "no-route",
    /// Larger than the egress MTU with Don't Fragment set (an ICMP
    /// "fragmentation needed" goes back, RFC 1191).
    FragNeeded => "frag-needed",
    /// Larger than the ingress interface's MTU and not something a port
    /// reassembled (DF set, or a fragment): nothing sane sends it.
    Ipv4OverMtu => "ipv4-over-mtu",
    // --- IPv6 (classified only) ---
    Ipv6Truncated => "ipv6-truncated",
    Ipv6NotForwarded => "ipv6-not-forwarded",
    // --- L4 ---
    L4Truncated => "l4-truncated",
    TcpBadHeaderLen => "tcp-bad-header-len",
    // --- policy and state ---
    /// An access rule (or the security-level default) denied a new flow.
    AclDenied => "acl-denied",
    /// Non-SYN TCP segment with no flow (unsolicited).
    TcpNoFlow => "tcp-no-flow",
    /// TCP segment with an invalid flag combination.
    TcpBadFlags => "tcp-bad-flags",
    /// TCP segment not valid in the flow's state (e.g. data before handshake).
    TcpBadState => "tcp-bad-state",
    /// TCP sequence/ack outside the tracked window.
    TcpOutOfWindow => "tcp-out-of-window",
    /// Reply-direction packet of a pseudo-flow that does not exist (ICMP echo reply etc.).
    NoFlow => "no-flow",
    /// Flow table full.
    FlowTableFull => "flow-table-full",
    /// IP protocol not handled statefully and not permitted.
    ProtoUnsupported => "proto-unsupported",
    // --- added by the pipeline ---
    /// IPv6 header or extension-header chain malformed (not just short).
    Ipv6Malformed => "ipv6-malformed",
    /// ICMP echo request to us with a bad ICMP checksum (RFC 792).
    IcmpBadChecksum => "icmp-bad-checksum",
    /// Destination that must never be routed (0/8, 127/8, 240/4; RFC 1812 §5.3.7).
    Ipv4BadDestination => "ipv4-bad-destination",
    /// No headroom to add the egress interface's 802.1Q tag.
    NoHeadroom => "no-headroom",
    /// Loose or strict source route option (RFC 7126 §4.3-4.4).
    Ipv4SourceRoute => "ipv4-source-route",
    /// IPv4 option with a bad length.
    Ipv4BadOptions => "ipv4-bad-options",
    // --- cluster packet path (docs/cluster-design.md) ---
    /// A packet waiting for an owner reply found the pending table full.
    ClusterPendingFull => "cluster-pending-full",
    /// A frame forwarded or relayed to this node as owner, with no owner
    /// flow here.
    ClusterNoOwnerFlow => "cluster-no-owner-flow",
    /// A relay reached the director, which has no record of the flow.
    ClusterNoRecord => "cluster-no-record",
    /// The director/backup/forwarder record table is full.
    ClusterRecordTableFull => "cluster-record-table-full",
    /// A datagram to the CCL port that the CCL opener rejected (the reason
    /// is counted among the CCL drops), or an authentic message that does
    /// not make sense here (e.g. a forwarded frame that does not parse).
    CclMalformed => "ccl-malformed",
    /// The CCL address of the peer to send to is not resolved yet (an ARP
    /// request went out on the CCL interface).
    ClusterPeerUnresolved => "cluster-peer-unresolved",
    /// The owner a packet should go to is not a member (or not a
    /// configured peer).
    ClusterOwnerUnknown => "cluster-owner-unknown",
    // --- fragments (frag::Reassembler; docs/fragments.md) ---
    /// A fragment overlaps one already held: the whole datagram is
    /// discarded (RFC 5722 for IPv6, applied to IPv4 too: teardrop).
    FragOverlap => "frag-overlap",
    /// An exact duplicate of a fragment already held (same offset and
    /// length): only the copy is discarded, the datagram goes on.
    FragDuplicate => "frag-duplicate",
    /// More fragments than `max_frags_per_datagram`: datagram discarded.
    FragTooMany => "frag-too-many",
    /// Offset + length beyond the 65535-byte datagram limit (RFC 791 §3.1,
    /// RFC 8200 §4.5; the "ping of death").
    FragTooBig => "frag-too-big",
    /// A zero-length fragment, a non-last fragment whose length is not a
    /// multiple of 8, or an offset that is not (RFC 791 §3.2).
    FragBadLength => "frag-bad-length",
    /// First fragment too short for the whole L4 header, or a TCP fragment
    /// at offset 8 (RFC 1858 §3, the tiny-fragment attack).
    FragTinyFirst => "frag-tiny-first",
    /// A last fragment whose end differs from an earlier last fragment's,
    /// or data beyond the end a last fragment set: datagram discarded.
    FragLastConflict => "frag-last-conflict",
    /// The datagram was not complete within the reassembly timeout.
    FragTimeout => "frag-timeout",
    /// Every reassembly context is in use: the new datagram is refused.
    FragTableFull => "frag-table-full",
    /// The fragment byte arena is exhausted: the datagram is discarded
    /// (reassembly, or the egress fragments' queue).
    FragNoBuffer => "frag-no-buffer",
    /// Cluster: this node's membership lease ran out (it may have been
    /// removed and its flows taken over): no data frame is processed
    /// until a new lease or a reset (docs/failover.md, "Fencing").
    ClusterFenced => "cluster-fenced",
    /// Cluster: a CCL datagram a peer sealed at an epoch older than the one
    /// it (re)joined this node's member set in — sent before it left and
    /// delivered late (an af_packet TX ring flushed when the CCL carrier
    /// returns), from a state the peer has since reset (docs/failover.md).
    CclBeforeRejoin => "ccl-before-rejoin",
    /// Cluster, several workers: a data-channel CCL datagram sealed by
    /// another channel than this worker's (the node steers by the channel,
    /// docs/workers.md: a steering fault, or a member that runs another
    /// number of workers).
    CclWrongWorker => "ccl-wrong-worker",
    // --- NAT (pipeline/nat.rs, docs/nat.md) ---
    /// A datagram to a pool address with no translation: hostile or
    /// expired return traffic, never guessed.
    NatNoXlate => "nat-no-xlate",
    /// No mapped port or address left (pool, per-host maximum, or the
    /// xlate table): never a reused port.
    NatExhausted => "nat-exhausted",
    /// A protocol without ports or identifiers cannot be PAT'ed.
    NatProtocol => "nat-protocol",
    /// Dynamic NAT on a cluster member: the control node has not given
    /// this host a translation yet (asked; N4). The client's retransmit
    /// finds it.
    NatPending => "nat-pending",
    // --- flood resistance (docs/flood.md) ---
    /// Anti-spoofing: the source would not be routed back out of the
    /// interface the datagram arrived on (strict), or not at all (loose;
    /// RFC 3704, the interface's `reverse-path`).
    ReversePath => "reverse-path",
    /// A new connection would pass the cluster-wide connection limit of
    /// its class (`limits.max-conns`, globally or its rule's; SPEC L1).
    ConnLimit => "conn-limit",
    /// A new TCP connection would pass its class's embryonic limit
    /// (`limits.max-embryonic`).
    EmbryonicLimit => "embryonic-limit",
    /// A new connection would pass its client's connection limit
    /// (`limits.per-client-max`).
    ClientLimit => "per-client-limit",
    /// A new TCP connection would pass its client's embryonic limit
    /// (`limits.per-client-embryonic-max`).
    ClientEmbryonicLimit => "per-client-embryonic-limit",
    /// A SYN over its class's embryonic limit that the SYN proxy would
    /// answer with a cookie SYN-ACK (`conntrack::synproxy`) but could not
    /// (no route back to the client, a frame that cannot be rewritten).
    SynProxyCookie => "syn-proxy-cookie",
    /// A client segment of a proxied connection before the server answered
    /// the proxy's SYN that the SYN proxy could not hold (its connection's
    /// `HOLD_PER_CONN` or the worker's `HOLD_SLOTS` reached, a fragment;
    /// its retransmission goes through once spliced), or a server segment
    /// other than SYN-ACK or RST then.
    SynProxyPending => "syn-proxy-pending",
    // --- IPv6 (issue 16; docs/ipv6.md) ---
    /// A neighbour solicitation or advertisement refused (hop limit not
    /// 255, malformed, a target that is not ours; RFC 4861 §7.1).
    NdInvalid => "nd-invalid",
    /// A neighbour advertisement read (learnt or ignored): consumed.
    NdConsumed => "nd-consumed",
    /// The neighbour cache has no room for the next hop.
    NdUnresolved => "nd-unresolved",
    /// An IPv6 fragment: not reassembled on this node yet.
    Ipv6Fragment => "ipv6-fragment",
    /// A routing header of type 0 (RFC 5095: deprecated, dropped).
    Ipv6RoutingType0 => "ipv6-routing-type0",
    /// A multicast or unspecified IPv6 source, or one of our addresses.
    Ipv6BadSource => "ipv6-bad-source",
    /// A multicast (not ours), link-local or otherwise unroutable IPv6
    /// destination.
    Ipv6BadDestination => "ipv6-bad-destination",
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
