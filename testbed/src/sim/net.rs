//! The simulated network around the nodes: the addressing plan, the two
//! upstream routers (ECMP by an L4 hash, SPEC §1) and the CCL segment.
//!
//! The network is dual-stack (issue 16): every host, router and node
//! link has an IPv4 address and an IPv6 one, the routers spread IPv6 by
//! the same L4 hash, and answer the nodes' neighbour solicitations as they
//! answer ARP (`Side::router_ip6`; the CCL stays IPv4, as the nodes' does).
//! Frames of either family are built and read here (`frame_ip`,
//! `tcp_frame`, …), so the rest of the simulator handles a flow's frames
//! without asking which family it is.
//!
//! Invariants: every address lies in 198.18.0.0/15 (RFC 2544 benchmarking
//! space) or 2001:db8::/32 (RFC 3849 documentation space), so nothing the
//! simulator builds could name a real host; an IPv4 frame is built
//! exactly as before IPv6 existed (`dataplane::wire::build`), so an IPv4
//! scenario replays bit for bit; the
//! router hash is a pure function of (seed, tuple) so a run is reproducible;
//! the two routers hash with different seeds, so the two directions of one
//! connection usually reach different nodes — the case the cluster exists
//! for. In `symmetric` mode both routers use one seed and an
//! order-independent hash, so both directions reach the same node (the
//! "cluster tax" baseline).

use dataplane::types::{ip_proto, FiveTuple, PortId};
use dataplane::wire::build::PacketBuilder;
use dataplane::wire::checksum;
use dataplane::wire::ethernet::{emit_header, ethertype, EthernetFrame, HEADER_LEN as ETH_HLEN};
use dataplane::wire::icmp::{msg_type, Icmpv4Packet};
use dataplane::wire::icmpv6::{self, msg_type as msg6};
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::ipv6::{self, Ipv6Packet};
use dataplane::wire::tcp::TcpPacket;
use dataplane::wire::udp::UdpPacket;
use rand::rngs::ChaCha8Rng;
use rand::RngExt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Node port facing the inside (client) router.
pub const INSIDE: PortId = PortId(0);
/// Node port facing the outside (server) router.
pub const OUTSIDE: PortId = PortId(1);
/// Node port on the cluster control link.
pub const CCL: PortId = PortId(2);

/// The inside router's address: the nodes' next hop towards the clients.
pub const INSIDE_ROUTER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
/// The outside router's address: the nodes' next hop towards the servers.
pub const OUTSIDE_ROUTER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 1);
/// Client hosts live here, behind the inside router.
pub const CLIENT_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 64, 0), 24);
/// Server hosts live here, behind the outside router.
pub const SERVER_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 128, 0), 24);
/// Distinct client addresses used (198.18.64.1 ..).
pub const CLIENT_HOSTS: u32 = 250;
/// Distinct server addresses used (198.18.128.1 ..).
pub const SERVER_HOSTS: u32 = 50;

/// The inside router's IPv6 address (2001:db8:1::/64, the inside link).
pub const INSIDE_ROUTER_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
/// The outside router's IPv6 address (2001:db8:2::/64, the outside link).
pub const OUTSIDE_ROUTER_IP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 1);
/// IPv6 client hosts, behind the inside router.
pub const CLIENT_NET6: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, 0, 0), 64);
/// IPv6 server hosts, behind the outside router.
pub const SERVER_NET6: (Ipv6Addr, u8) = (Ipv6Addr::new(0x2001, 0xdb8, 0x128, 0, 0, 0, 0, 0), 64);
/// Prefix length of the nodes' IPv6 links.
pub const LINK6_PREFIX: u8 = 64;

/// Which router.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Side {
    Inside,
    Outside,
}

impl Side {
    pub fn port(self) -> PortId {
        match self {
            Side::Inside => INSIDE,
            Side::Outside => OUTSIDE,
        }
    }
    pub fn router_ip(self) -> Ipv4Addr {
        match self {
            Side::Inside => INSIDE_ROUTER_IP,
            Side::Outside => OUTSIDE_ROUTER_IP,
        }
    }
    pub fn router_ip6(self) -> Ipv6Addr {
        match self {
            Side::Inside => INSIDE_ROUTER_IP6,
            Side::Outside => OUTSIDE_ROUTER_IP6,
        }
    }
    pub fn router_mac(self) -> [u8; 6] {
        [0x02, 0xcf, 0xff, 0x00, self as u8, 0x01]
    }
    /// The host network behind this router.
    pub fn host_net(self) -> (Ipv4Addr, u8) {
        match self {
            Side::Inside => CLIENT_NET,
            Side::Outside => SERVER_NET,
        }
    }
    /// The IPv6 host network behind this router.
    pub fn host_net6(self) -> (Ipv6Addr, u8) {
        match self {
            Side::Inside => CLIENT_NET6,
            Side::Outside => SERVER_NET6,
        }
    }
    /// Whether `a` is on a host network behind this router (either family).
    pub fn hosts(self, a: IpAddr) -> bool {
        match a {
            IpAddr::V4(a) => in_net(a, self.host_net()),
            IpAddr::V6(a) => in_net6(a, self.host_net6()),
        }
    }
    pub fn from_port(p: PortId) -> Option<Side> {
        match p {
            INSIDE => Some(Side::Inside),
            OUTSIDE => Some(Side::Outside),
            _ => None,
        }
    }
}

/// MAC of node `n`'s port `p` (locally administered).
pub fn node_mac(n: usize, p: PortId) -> [u8; 6] {
    [0x02, 0xcf, 0x00, n as u8, p.0 as u8, 0x01]
}

/// Address of node `n` on port `p`: inside 198.18.1.(10+n)/24, outside
/// 198.18.2.(10+n)/24, CCL 198.19.0.(1+n)/24.
pub fn node_addr(n: usize, p: PortId) -> Ipv4Addr {
    match p {
        INSIDE => Ipv4Addr::new(198, 18, 1, 10 + n as u8),
        OUTSIDE => Ipv4Addr::new(198, 18, 2, 10 + n as u8),
        _ => Ipv4Addr::new(198, 19, 0, 1 + n as u8),
    }
}

/// IPv6 address of node `n` on the link to the router of `side`:
/// 2001:db8:1::(10+n)/64 inside, 2001:db8:2::(10+n)/64 outside (hex
/// groups: node 0 is 2001:db8:1::10). The CCL has none (it stays IPv4).
pub fn node_addr6(n: usize, side: Side) -> Ipv6Addr {
    let net = match side {
        Side::Inside => 1,
        Side::Outside => 2,
    };
    Ipv6Addr::new(0x2001, 0xdb8, net, 0, 0, 0, 0, 0x10 + n as u16)
}

/// The broadcast address of the CCL subnet 198.19.0.0/24.
pub const CCL_BROADCAST: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 255);

/// Which node owns the CCL address / MAC, if any.
pub fn ccl_node_by_mac(mac: [u8; 6], nodes: usize) -> Option<usize> {
    (0..nodes).find(|&n| node_mac(n, CCL) == mac)
}

pub fn client_addr(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(CLIENT_NET.0) + 1 + i % CLIENT_HOSTS)
}

pub fn server_addr(i: u32) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(SERVER_NET.0) + 1 + i % SERVER_HOSTS)
}

/// IPv6 client `i` (2001:db8:64::1 ..), the twin of `client_addr(i)`.
pub fn client_addr6(i: u32) -> Ipv6Addr {
    let o = CLIENT_NET6.0.octets();
    Ipv6Addr::from(u128::from_be_bytes(o) + 1 + u128::from(i % CLIENT_HOSTS))
}

/// IPv6 server `i` (2001:db8:128::1 ..), the twin of `server_addr(i)`.
pub fn server_addr6(i: u32) -> Ipv6Addr {
    let o = SERVER_NET6.0.octets();
    Ipv6Addr::from(u128::from_be_bytes(o) + 1 + u128::from(i % SERVER_HOSTS))
}

pub fn in_net6(a: Ipv6Addr, net: (Ipv6Addr, u8)) -> bool {
    let m = if net.1 == 0 { 0 } else { u128::MAX << (128 - u32::from(net.1.min(128))) };
    u128::from(a) & m == u128::from(net.0) & m
}

pub fn in_net(a: Ipv4Addr, net: (Ipv4Addr, u8)) -> bool {
    let m = if net.1 == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(net.1))
    };
    u32::from(a) & m == u32::from(net.0) & m
}

/// splitmix64's finaliser: a fast, well-mixed 64-bit permutation.
pub fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// An address as the routers' hash takes it: an IPv4 address as is, an
/// IPv6 one folded (its four 32-bit words xored: every bit counts, as in
/// Linux's IPv6 multipath hash).
fn ip_u32(a: IpAddr) -> u32 {
    match a {
        IpAddr::V4(v) => u32::from(v),
        IpAddr::V6(v) => {
            let x = u128::from(v);
            (x as u32) ^ ((x >> 32) as u32) ^ ((x >> 64) as u32) ^ ((x >> 96) as u32)
        }
    }
}

/// The ECMP hash of a router: ordered (a different value for each
/// direction) unless `symmetric`.
pub fn ecmp_hash(seed: u64, t: &FiveTuple, symmetric: bool) -> u64 {
    let a = (u64::from(ip_u32(t.src)) << 16) | u64::from(t.src_port);
    let b = (u64::from(ip_u32(t.dst)) << 16) | u64::from(t.dst_port);
    let (a, b) = if symmetric && b < a { (b, a) } else { (a, b) };
    let mut h = mix64(seed);
    h = mix64(h ^ a);
    h = mix64(h ^ b);
    mix64(h ^ u64::from(t.proto))
}

/// An upstream router: spreads the frames of its hosts over the nodes.
#[derive(Clone, Debug)]
pub struct Router {
    pub side: Side,
    pub seed: u64,
    pub symmetric: bool,
    /// Test knob: hash every IPv4 fragment on (src, dst, proto, ident,
    /// offset), so the fragments of one datagram land on different nodes
    /// on purpose. Off: fragments are hashed like real routers do.
    pub spread_fragments: bool,
    /// Cluster-tax knob (`SimConfig::split_return`): send every packet to a
    /// node other than the one the symmetric hash picks (the node the
    /// other router, using the same seed symmetrically, sends the flow's
    /// opposite direction to).
    pub elsewhere: bool,
}

/// A fragment as a router sees it: header fields only (a later fragment
/// has no ports). IPv4's identification is 16 bits, IPv6's (in the
/// Fragment header) 32.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct FragHeader {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// The upper-layer protocol (IPv6: the Fragment header's next header).
    pub proto: u8,
    pub ident: u32,
    /// Offset of the fragment's data, in bytes.
    pub offset: u16,
    pub more: bool,
}

/// Linux's hash-threshold ECMP (`fib_select_multipath`): the 31-bit hash
/// space is cut into equal regions, one per live next hop in list order;
/// a dead next hop's region is shared out by moving every boundary, so
/// flows also move between survivors. `None` when no next hop is live.
pub fn hash_threshold(h: u64, live: &[bool]) -> Option<usize> {
    let n = live.iter().filter(|&&l| l).count() as u64;
    if n == 0 {
        return None;
    }
    let k = ((h & 0x7fff_ffff) * n) >> 31;
    live.iter().enumerate().filter(|(_, &l)| l).map(|(i, _)| i).nth(k as usize)
}

impl Router {
    /// The live node a packet with this tuple is sent to (fault scenarios:
    /// hash-threshold over the live next hops, `hash_threshold`).
    pub fn pick_live(&self, t: &FiveTuple, live: &[bool]) -> Option<usize> {
        let h = ecmp_hash(self.seed, t, self.symmetric);
        let h = if self.elsewhere { mix64(h) } else { h };
        hash_threshold(h, live)
    }

    /// The node a packet with this tuple is sent to.
    pub fn pick(&self, t: &FiveTuple, nodes: usize) -> usize {
        let h = ecmp_hash(self.seed, t, self.symmetric);
        let base = (h % nodes as u64) as usize;
        if self.elsewhere && nodes > 1 {
            let off = 1 + (mix64(h) % (nodes as u64 - 1)) as usize;
            (base + off) % nodes
        } else {
            base
        }
    }
    /// The node a fragment is sent to. Default: a hash of (src, dst, proto)
    /// only — every fragment of a datagram (first and later alike; a later
    /// one has no ports) goes to one node, which need not be the node its
    /// connection's unfragmented packets reach. With `spread_fragments`
    /// the identification and offset are hashed too: each fragment of a
    /// datagram picks its own node.
    pub fn pick_fragment(&self, f: &FragHeader, nodes: usize) -> usize {
        let (mut a, mut b) = (u64::from(ip_u32(f.src)), u64::from(ip_u32(f.dst)));
        if self.symmetric && b < a {
            std::mem::swap(&mut a, &mut b);
        }
        let mut h = mix64(self.seed ^ 0xf4a6);
        h = mix64(h ^ a);
        h = mix64(h ^ b);
        h = mix64(h ^ u64::from(f.proto));
        if self.spread_fragments {
            h = mix64(h ^ (u64::from(f.ident) << 16 | u64::from(f.offset)));
        }
        (h % nodes as u64) as usize
    }
}

/// The IP layer of an Ethernet frame, either family (`frame_ip`).
#[derive(Copy, Clone, Debug)]
pub struct IpFrame<'a> {
    pub src: IpAddr,
    pub dst: IpAddr,
    /// The upper-layer protocol (IPv6: past the extension headers).
    pub proto: u8,
    /// The upper-layer bytes (of a fragment: its share of the datagram).
    pub l4: &'a [u8],
    /// Where `l4` starts in the frame.
    pub l4_at: usize,
    /// Where the IP header starts in the frame.
    pub l3_at: usize,
    /// The IP packet's length, header(s) included.
    pub ip_len: usize,
    /// A fragment (IPv4: MF or an offset; IPv6: a Fragment header that is
    /// not atomic).
    pub fragment: Option<FragHeader>,
    /// IPv4 only: whether the header checksum is right (always true for
    /// IPv6, which has none).
    pub header_ok: bool,
}

impl IpFrame<'_> {
    pub fn is_v6(&self) -> bool {
        self.src.is_ipv6()
    }
}

/// The IP layer of an Ethernet/IPv4 or Ethernet/IPv6 frame (`None` for
/// anything else or a malformed header).
pub fn frame_ip(frame: &[u8]) -> Option<IpFrame<'_>> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let l3_at = eth.header_len();
    match eth.ethertype() {
        ethertype::IPV4 => {
            let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
            let l4_at = l3_at + ip.header_len();
            let l4 = frame.get(l4_at..l4_at + ip.payload().len())?;
            Some(IpFrame {
                src: IpAddr::V4(ip.src()),
                dst: IpAddr::V4(ip.dst()),
                proto: ip.protocol(),
                l4,
                l4_at,
                l3_at,
                ip_len: usize::from(ip.total_len()),
                fragment: ip.is_fragment().then(|| FragHeader {
                    src: IpAddr::V4(ip.src()),
                    dst: IpAddr::V4(ip.dst()),
                    proto: ip.protocol(),
                    ident: u32::from(ip.ident()),
                    offset: ip.frag_offset(),
                    more: ip.more_frags(),
                }),
                header_ok: ip.verify_checksum(),
            })
        }
        ethertype::IPV6 => {
            let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
            let ul = ip.upper_layer().ok()?;
            let (src, dst) = (IpAddr::V6(ip.src()), IpAddr::V6(ip.dst()));
            let l4_at = l3_at + ipv6::HEADER_LEN + ul.offset;
            let l4 = frame.get(l4_at..l3_at + ipv6::HEADER_LEN + ip.payload().len())?;
            Some(IpFrame {
                src,
                dst,
                proto: ul.protocol,
                l4,
                l4_at,
                l3_at,
                ip_len: ipv6::HEADER_LEN + usize::from(ip.payload_len()),
                // An atomic fragment (offset 0, M clear; RFC 6946) is a
                // whole packet.
                fragment: ul.fragment.filter(|&(o, m, _)| o != 0 || m).map(|(offset, more, ident)| FragHeader {
                    src,
                    dst,
                    proto: ul.protocol,
                    ident,
                    offset,
                    more,
                }),
                header_ok: true,
            })
        }
        _ => None,
    }
}

/// The fragment header fields of an Ethernet/IP frame that is a fragment
/// (IPv4: MF set or offset non-zero; IPv6: a Fragment header that is not
/// atomic), else `None`.
pub fn frame_fragment(frame: &[u8]) -> Option<FragHeader> {
    frame_ip(frame)?.fragment
}

/// The five-tuple of an Ethernet/IP frame (ICMP and ICMPv6 echo ports as
/// SPEC R3); `None` for fragments.
pub fn frame_tuple(frame: &[u8]) -> Option<FiveTuple> {
    let ip = frame_ip(frame)?;
    // A fragment has no five-tuple of its own (a later one has no ports; a
    // first one's L4 header does not describe its payload): `frame_fragment`.
    if ip.fragment.is_some() {
        return None;
    }
    let (sp, dp) = match ip.proto {
        ip_proto::TCP => {
            let t = TcpPacket::new_checked(ip.l4).ok()?;
            (t.src_port(), t.dst_port())
        }
        ip_proto::UDP => {
            let u = UdpPacket::new_checked(ip.l4).ok()?;
            (u.src_port(), u.dst_port())
        }
        ip_proto::ICMP if !ip.is_v6() => {
            let i = Icmpv4Packet::new_checked(ip.l4).ok()?;
            match i.msg_type() {
                msg_type::ECHO_REQUEST => (i.echo_ident(), 0),
                msg_type::ECHO_REPLY => (0, i.echo_ident()),
                _ => (0, 0),
            }
        }
        ip_proto::ICMPV6 if ip.is_v6() => match icmpv6::type_and_ident(ip.l4)? {
            (msg6::ECHO_REQUEST, id) => (id, 0),
            (msg6::ECHO_REPLY, id) => (0, id),
            _ => (0, 0),
        },
        _ => (0, 0),
    };
    Some(FiveTuple {
        src: ip.src,
        dst: ip.dst,
        proto: ip.proto,
        src_port: sp,
        dst_port: dp,
    })
}

/// The unfolded pseudo-header sum of an upper-layer header of `len` bytes
/// (RFC 793 / RFC 8200 §8.1; mixed families: none).
fn pseudo_header(src: IpAddr, dst: IpAddr, proto: u8, len: usize) -> Option<u32> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some(checksum::pseudo_header_v4(s.octets(), d.octets(), proto, len as u16)),
        (IpAddr::V6(s), IpAddr::V6(d)) => Some(icmpv6::pseudo_header(s, d, len, proto)),
        _ => None,
    }
}

/// Whether the TCP, UDP or ICMPv6 checksum of `l4` is right (ICMPv4:
/// over the message alone).
pub fn l4_checksum_ok(src: IpAddr, dst: IpAddr, proto: u8, l4: &[u8]) -> bool {
    if proto == ip_proto::ICMP {
        return Icmpv4Packet::new_checked(l4).is_ok_and(|i| i.verify_checksum());
    }
    pseudo_header(src, dst, proto, l4.len()).is_some_and(|acc| checksum::verify(acc, l4))
}

/// Write the checksum of the TCP, UDP or ICMPv6 header `l4` (the field at
/// `at`) for `src` → `dst`.
fn fill_l4_checksum(src: IpAddr, dst: IpAddr, proto: u8, l4: &mut [u8], at: usize) {
    l4[at..at + 2].fill(0);
    let acc = pseudo_header(src, dst, proto, l4.len()).unwrap_or(0);
    let mut c = !checksum::fold(checksum::sum(acc, l4));
    if proto == ip_proto::UDP && c == 0 {
        c = 0xffff;
    }
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// Fix the TCP checksum of a frame after its segment changed (either
/// family).
pub fn refill_tcp_checksum(frame: &mut [u8]) {
    let Some((src, dst, at, end)) = frame_ip(frame)
        .filter(|ip| ip.proto == ip_proto::TCP && ip.fragment.is_none())
        .map(|ip| (ip.src, ip.dst, ip.l4_at, ip.l4_at + ip.l4.len()))
    else {
        return;
    };
    fill_l4_checksum(src, dst, ip_proto::TCP, &mut frame[at..end], 16);
}

/// Hop limit of the hosts' IPv6 packets (IPv4's TTL is the builder's 64).
pub const HOST_HOP_LIMIT: u8 = 64;

/// Ethernet + IPv6 header (no extension header) around `l4`, MACs zero
/// (the routers fill them in).
pub fn ipv6_frame(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, hop_limit: u8, l4: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; ETH_HLEN + ipv6::HEADER_LEN + l4.len()];
    let l2 = emit_header(&mut v, [0; 6], [0; 6], None, ethertype::IPV6);
    let mut ip = Ipv6Packet::new_unchecked(&mut v[l2..]);
    ip.set_ver_tc_flow(0, 0);
    ip.set_payload_len(l4.len() as u16);
    ip.set_next_header(next_header);
    ip.set_hop_limit(hop_limit);
    ip.set_src(src);
    ip.set_dst(dst);
    v[l2 + ipv6::HEADER_LEN..].copy_from_slice(l4);
    v
}

/// A host's IPv6 frame around an upper-layer header whose checksum is
/// filled here (the field at `csum_at` of `l4`).
fn host_frame6(src: IpAddr, dst: IpAddr, proto: u8, mut l4: Vec<u8>, csum_at: usize) -> Vec<u8> {
    let (IpAddr::V6(s), IpAddr::V6(d)) = (src, dst) else {
        return Vec::new();
    };
    fill_l4_checksum(src, dst, proto, &mut l4, csum_at);
    ipv6_frame(s, d, proto, HOST_HOP_LIMIT, &l4)
}

/// A host's TCP segment (`options` a multiple of 4 bytes), MACs zero.
#[allow(clippy::too_many_arguments)]
pub fn tcp_frame(
    local: (IpAddr, u16),
    remote: (IpAddr, u16),
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    if let (IpAddr::V4(s), IpAddr::V4(d)) = (local.0, remote.0) {
        // IPv4 as it always was (bit for bit).
        return PacketBuilder::new([0; 6], [0; 6], s, d).tcp(local.1, remote.1, seq, ack, flags, window, options, payload);
    }
    let hl = 20 + options.len();
    let mut seg = vec![0u8; hl + payload.len()];
    seg[20..hl].copy_from_slice(options);
    seg[hl..].copy_from_slice(payload);
    let mut t = TcpPacket::new_unchecked(&mut seg[..]);
    t.set_src_port(local.1);
    t.set_dst_port(remote.1);
    t.set_seq(seq);
    t.set_ack(ack);
    t.set_header_len(hl);
    t.set_flags(flags);
    t.set_window(window);
    host_frame6(local.0, remote.0, ip_proto::TCP, seg, 16)
}

/// A host's UDP datagram, MACs zero.
pub fn udp_frame(src: IpAddr, dst: IpAddr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    if let (IpAddr::V4(s), IpAddr::V4(d)) = (src, dst) {
        return PacketBuilder::new([0; 6], [0; 6], s, d).udp(sport, dport, payload);
    }
    let mut d = vec![0u8; 8 + payload.len()];
    d[8..].copy_from_slice(payload);
    let mut u = UdpPacket::new_unchecked(&mut d[..]);
    u.set_src_port(sport);
    u.set_dst_port(dport);
    u.set_len((8 + payload.len()) as u16);
    host_frame6(src, dst, ip_proto::UDP, d, 6)
}

/// A host's echo request or reply (ICMP for IPv4, ICMPv6 for IPv6), MACs
/// zero.
pub fn echo_frame(src: IpAddr, dst: IpAddr, request: bool, ident: u16, seq: u16, payload: &[u8]) -> Vec<u8> {
    if let (IpAddr::V4(s), IpAddr::V4(d)) = (src, dst) {
        let t = if request { msg_type::ECHO_REQUEST } else { msg_type::ECHO_REPLY };
        return PacketBuilder::new([0; 6], [0; 6], s, d).icmp(t, 0, (ident, seq), payload);
    }
    let mut m = vec![0u8; icmpv6::HEADER_LEN + payload.len()];
    m[0] = if request { msg6::ECHO_REQUEST } else { msg6::ECHO_REPLY };
    m[4..6].copy_from_slice(&ident.to_be_bytes());
    m[6..8].copy_from_slice(&seq.to_be_bytes());
    m[icmpv6::HEADER_LEN..].copy_from_slice(payload);
    host_frame6(src, dst, ip_proto::ICMPV6, m, 2)
}

/// An ICMPv6 echo (`frame_ip(..).l4`): (type, ident, seq, data), if it is
/// one with a right checksum for `src` → `dst`.
pub fn echo6(src: IpAddr, dst: IpAddr, l4: &[u8]) -> Option<(u8, u16, u16, &[u8])> {
    let (IpAddr::V6(s), IpAddr::V6(d)) = (src, dst) else { return None };
    if !icmpv6::verify(s, d, l4) {
        return None;
    }
    let (t, ident) = icmpv6::type_and_ident(l4)?;
    let seq = l4.get(6..8).map(|b| u16::from_be_bytes([b[0], b[1]]))?;
    Some((t, ident, seq, l4.get(icmpv6::HEADER_LEN..)?))
}

/// A neighbour solicitation from `mac` / `from` for `target`, to its
/// solicited-node group (RFC 4861 §7.2.2), with the source link-layer
/// address option: as a router sends it for a node's address.
pub fn neighbor_solicitation(mac: [u8; 6], from: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let group = icmpv6::solicited_node(target);
    let mut b = vec![0u8; icmpv6::ND_LEN + 8];
    let _ = icmpv6::emit_ns(&mut b, from, group, target, mac);
    let mut f = ipv6_frame(from, group, ip_proto::ICMPV6, 255, &b);
    f[0..6].copy_from_slice(&icmpv6::multicast_mac(group));
    f[6..12].copy_from_slice(&mac);
    f
}

/// The solicited advertisement of `target` (ours, at `mac`) to `to` /
/// `to_mac`, router flag set (RFC 4861 §7.2.4): a router's answer.
pub fn neighbor_advertisement(mac: [u8; 6], target: Ipv6Addr, to_mac: [u8; 6], to: Ipv6Addr) -> Vec<u8> {
    let mut b = vec![0u8; icmpv6::ND_LEN + 8];
    let flags = icmpv6::NA_ROUTER | icmpv6::NA_SOLICITED | icmpv6::NA_OVERRIDE;
    let _ = icmpv6::emit_na(&mut b, target, to, target, mac, flags);
    let mut f = ipv6_frame(target, to, ip_proto::ICMPV6, 255, &b);
    f[0..6].copy_from_slice(&to_mac);
    f[6..12].copy_from_slice(&mac);
    f
}

/// A neighbour solicitation or advertisement in an Ethernet/IPv6 frame,
/// with its IPv6 source, if it is a valid one (hop limit 255, checksum,
/// RFC 4861 §7.1).
pub fn frame_nd(frame: &[u8]) -> Option<(Ipv6Addr, icmpv6::Nd)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != ethertype::IPV6 {
        return None;
    }
    let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
    if ip.next_header() != ip_proto::ICMPV6 || ip.hop_limit() != 255 || !icmpv6::verify(ip.src(), ip.dst(), ip.payload()) {
        return None;
    }
    let nd = icmpv6::parse_nd(ip.payload()).ok()?;
    Some((ip.src(), nd))
}

/// Impairments of the CCL segment, all drawn from a seeded RNG
/// ([`CclLink::fate`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CclLink {
    /// One-way latency of every frame.
    pub latency_ns: u64,
    /// Uniform extra latency in `[0, jitter_ns]`.
    pub jitter_ns: u64,
    /// Probability that a frame is lost.
    pub loss: f64,
    /// Probability that a frame is held back by up to `reorder_ns` more
    /// (so later frames overtake it).
    pub reorder: f64,
    pub reorder_ns: u64,
}

impl Default for CclLink {
    fn default() -> Self {
        CclLink {
            latency_ns: 20_000,
            jitter_ns: 0,
            loss: 0.0,
            reorder: 0.0,
            reorder_ns: 0,
        }
    }
}

impl CclLink {
    /// Latency and jitter, reordering: the impaired-but-lossless link.
    pub fn jittery() -> Self {
        CclLink {
            latency_ns: 20_000,
            jitter_ns: 30_000,
            loss: 0.0,
            reorder: 0.05,
            reorder_ns: 300_000,
        }
    }
    /// `jittery` plus `loss`.
    pub fn lossy(loss: f64) -> Self {
        CclLink {
            loss,
            ..CclLink::jittery()
        }
    }
}

/// What the link model does with one frame copy.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    Lost,
    /// Delivered after `delay_ns`; `reordered`: held back by the reorder
    /// model (later frames may overtake it).
    Delivered { delay_ns: u64, reordered: bool },
}

impl CclLink {
    /// The fate of one frame copy, drawn from `rng` in a fixed order (loss,
    /// jitter, reorder; each only when its knob is on), so one seed gives
    /// one sequence of fates.
    pub fn fate(&self, rng: &mut ChaCha8Rng) -> Fate {
        if self.loss > 0.0 && rng.random_bool(self.loss) {
            return Fate::Lost;
        }
        let mut delay_ns = self.latency_ns;
        if self.jitter_ns > 0 {
            delay_ns += rng.random_range(0..=self.jitter_ns);
        }
        let mut reordered = false;
        if self.reorder > 0.0 && rng.random_bool(self.reorder) {
            delay_ns += rng.random_range(0..=self.reorder_ns);
            reordered = true;
        }
        Fate::Delivered { delay_ns, reordered }
    }
}

/// A node's CCL port loses its link from `from_ns` until `until_ns`
/// (virtual time; `u64::MAX`: for good): every frame it sends on the CCL
/// and every frame sent to it meanwhile is lost — data-plane CCL messages
/// and its control lcore's heartbeats alike. Decided when a frame is sent.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CclCut {
    pub node: usize,
    pub from_ns: u64,
    pub until_ns: u64,
}

impl CclCut {
    /// Whether a frame from `from` to `to` sent at `now` is cut off.
    pub fn cuts(&self, from: usize, to: usize, now: u64) -> bool {
        (from == self.node || to == self.node) && (self.from_ns..self.until_ns).contains(&now)
    }
}

/// CCL partitions (fault scenarios): node `n` is in group `group[n]`; a
/// frame crosses only within a group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Partition {
    pub group: Vec<u8>,
}

impl Partition {
    /// Whether `from` and `to` are on different sides.
    pub fn separates(&self, from: usize, to: usize) -> bool {
        self.group.get(from).copied().unwrap_or(0) != self.group.get(to).copied().unwrap_or(0)
    }
}

/// What the CCL segment saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CclStats {
    /// Frames the nodes transmitted on the CCL.
    pub frames: u64,
    pub bytes: u64,
    /// Broadcast frames (each delivered to every other node).
    pub broadcasts: u64,
    /// Frame copies delivered.
    pub delivered: u64,
    /// Frame copies lost by the loss model.
    pub lost: u64,
    /// Frame copies held back by the reorder model.
    pub reordered: u64,
    /// Unicast frames to a MAC no node has.
    pub unknown_dst: u64,
    /// Frame copies lost to a cut CCL port (`CclCut`).
    pub cut: u64,
    /// Frame copies lost, by CCL message kind (`arp`, `other` for the rest).
    pub lost_by_kind: std::collections::BTreeMap<String, u64>,
}

/// The flow records (register / state update) of a CCL frame that concern
/// `t` (either direction): "op state idle" per record, for flow traces.
pub fn ccl_records_for(frame: &[u8], t: &FiveTuple) -> Vec<String> {
    use dataplane::ccl::{CclPacket, FlowBatch, MessageKind};
    let mut out = Vec::new();
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return out;
    };
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
        return out;
    };
    let Ok(u) = UdpPacket::new_checked(ip.payload()) else {
        return out;
    };
    let Ok(c) = CclPacket::new_checked(u.payload()) else {
        return out;
    };
    let kind = MessageKind::from_u8(c.kind());
    let ours = |ft: FiveTuple| ft == *t || ft == t.reversed();
    match dataplane::ccl::Message::parse(c.kind(), c.payload()) {
        Ok(dataplane::ccl::Message::OwnerQuery(q)) if ours(q.flow.tuple()) => {
            out.push(format!("query {} elect {}", q.query_id, q.elect_if_absent));
            return out;
        }
        Ok(dataplane::ccl::Message::OwnerReply(r)) if ours(r.flow.tuple()) => {
            out.push(format!("reply {} owner {:?}", r.query_id, r.owner));
            return out;
        }
        Ok(dataplane::ccl::Message::FlowTransfer(x)) => {
            if let Ok(r) = x.record() {
                if ours(r.flow.tuple()) {
                    out.push(format!("transfer {} owner {} flags {:#x}", x.query_id, r.owner, r.flags));
                }
            }
            return out;
        }
        _ => {}
    }
    if !matches!(
        kind,
        Some(MessageKind::FlowRegister | MessageKind::StateUpdate)
    ) {
        return out;
    }
    let Ok(b) = FlowBatch::parse(c.payload()) else {
        return out;
    };
    for r in b.iter() {
        let ft = r.flow.tuple();
        if ft == *t || ft == t.reversed() {
            out.push(format!(
                "{:?} owner {} tcp-state {} idle {} s",
                r.op, r.owner, r.tcp_state, r.idle_timeout_s
            ));
        }
    }
    out
}

/// The CCL message kind of a frame on the CCL segment (`arp` for ARP,
/// `other` for anything that is not a CCL datagram).
pub fn ccl_kind(frame: &[u8]) -> &'static str {
    use dataplane::ccl::{CclPacket, MessageKind, CCL_UDP_PORT};
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return "other";
    };
    if eth.ethertype() == ethertype::ARP {
        return "arp";
    }
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
        return "other";
    };
    if ip.protocol() != ip_proto::UDP {
        return "other";
    }
    let Ok(u) = UdpPacket::new_checked(ip.payload()) else {
        return "other";
    };
    if u.dst_port() < CCL_UDP_PORT || u.dst_port() > CCL_UDP_PORT + 15 {
        return "other";
    }
    match CclPacket::new_checked(u.payload()) {
        Ok(c) => MessageKind::from_u8(c.kind()).map_or("other", |k| k.as_str()),
        Err(_) => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_threshold_moves_only_what_it_must_and_some_between_survivors() {
        // The first of three goes: [0, 1/3) is shared out, and the
        // boundary between the other two moves from 2/3 to 1/2.
        let all = [true; 3];
        let less = [false, true, true];
        let (mut kept, mut moved_between, mut total) = (0, 0, 0);
        for i in 0..10_000u64 {
            let h = mix64(i);
            let a = hash_threshold(h, &all).unwrap();
            let b = hash_threshold(h, &less).unwrap();
            assert_ne!(b, 0, "nothing goes to a dead next hop");
            if a == 0 {
                continue;
            }
            total += 1;
            if a == b {
                kept += 1;
            } else if a != 0 {
                moved_between += 1;
            }
        }
        assert!(kept > total / 2, "most of the survivors' flows stay ({kept}/{total})");
        assert!(moved_between > 0, "hash-threshold also moves flows between survivors");
        assert_eq!(hash_threshold(1, &[false, false]), None);
    }

    fn t(sp: u16, dp: u16) -> FiveTuple {
        FiveTuple {
            src: IpAddr::V4(client_addr(3)),
            dst: IpAddr::V4(server_addr(4)),
            proto: ip_proto::TCP,
            src_port: sp,
            dst_port: dp,
        }
    }

    #[test]
    fn symmetric_hash_ignores_direction() {
        for p in 1000..1100 {
            let x = t(p, 80);
            assert_eq!(ecmp_hash(9, &x, true), ecmp_hash(9, &x.reversed(), true));
        }
    }

    #[test]
    fn asymmetric_routers_split_directions() {
        let a = Router {
            side: Side::Inside,
            seed: 1,
            symmetric: false,
            spread_fragments: false,
            elsewhere: false,
        };
        let b = Router {
            side: Side::Outside,
            seed: 2,
            symmetric: false,
            spread_fragments: false,
            elsewhere: false,
        };
        let differ = (1000..2000)
            .filter(|&p| a.pick(&t(p, 80), 3) != b.pick(&t(p, 80).reversed(), 3))
            .count();
        // About 2/3 of the flows should be split over two nodes.
        assert!((550..780).contains(&differ), "{differ}");
    }

    #[test]
    fn fragments_hash_on_the_header_unless_spread() {
        let r = |spread| Router {
            side: Side::Inside,
            seed: 5,
            symmetric: false,
            spread_fragments: spread,
            elsewhere: false,
        };
        let frag = |ident: u32, offset: u16| FragHeader {
            src: IpAddr::V4(client_addr(3)),
            dst: IpAddr::V4(server_addr(4)),
            proto: ip_proto::UDP,
            ident,
            offset,
            more: offset < 5920,
        };
        let (plain, spread) = (r(false), r(true));
        let mut spread_datagrams = 0;
        for ident in 0..200u32 {
            let offsets = (0..6u16).map(|i| i * 1480);
            let a: Vec<usize> = offsets
                .clone()
                .map(|o| plain.pick_fragment(&frag(ident, o), 5))
                .collect();
            assert!(a.iter().all(|&n| n == a[0]), "{a:?}");
            let b: Vec<usize> = offsets
                .map(|o| spread.pick_fragment(&frag(ident, o), 5))
                .collect();
            if b.iter().any(|&n| n != b[0]) {
                spread_datagrams += 1;
            }
        }
        // Six fragments over five nodes: nearly always more than one node.
        assert!(spread_datagrams > 190, "{spread_datagrams}");
    }

    #[test]
    fn frame_tuple_ignores_fragments() {
        use dataplane::wire::build::PacketBuilder;
        let b = PacketBuilder::new([0; 6], [0; 6], client_addr(1), server_addr(1));
        let mut f = b.udp(1234, 7000, &[7u8; 100]);
        assert!(frame_tuple(&f).is_some() && frame_fragment(&f).is_none());
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
            ip.set_flags_frag(0x2000, 0);
            ip.fill_checksum();
        }
        assert!(frame_tuple(&f).is_none());
        let h = frame_fragment(&f).unwrap();
        assert!(h.more && h.offset == 0 && h.proto == ip_proto::UDP);
    }

    #[test]
    fn addressing_plan() {
        assert_eq!(node_addr(2, INSIDE), Ipv4Addr::new(198, 18, 1, 12));
        assert_eq!(node_addr(2, CCL), Ipv4Addr::new(198, 19, 0, 3));
        assert!(in_net(client_addr(249), CLIENT_NET));
        assert!(in_net(server_addr(77), SERVER_NET));
        assert_eq!(ccl_node_by_mac(node_mac(4, CCL), 5), Some(4));
        assert_eq!(node_addr6(2, Side::Outside), "2001:db8:2::12".parse::<Ipv6Addr>().unwrap());
        assert_eq!(client_addr6(0), "2001:db8:64::1".parse::<Ipv6Addr>().unwrap());
        assert!(in_net6(client_addr6(249), CLIENT_NET6) && !in_net6(client_addr6(1), SERVER_NET6));
        assert!(in_net6(server_addr6(77), SERVER_NET6));
        assert!(Side::Inside.hosts(IpAddr::V6(client_addr6(3))) && !Side::Inside.hosts(IpAddr::V6(server_addr6(3))));
        // Every address in the documentation range.
        for a in [node_addr6(15, Side::Inside), INSIDE_ROUTER_IP6, OUTSIDE_ROUTER_IP6, client_addr6(7), server_addr6(9)] {
            assert!(in_net6(a, ("2001:db8::".parse().unwrap(), 32)), "{a}");
        }
    }

    fn v6(a: Ipv6Addr) -> IpAddr {
        IpAddr::V6(a)
    }

    #[test]
    fn ipv6_frames_read_back_with_their_tuple_and_checksums() {
        let (c, s) = (v6(client_addr6(3)), v6(server_addr6(4)));
        let f = tcp_frame((c, 40000), (s, 443), 7, 9, 0x12, 1024, &[1, 1, 4, 2], b"hello");
        let ip = frame_ip(&f).unwrap();
        assert_eq!((ip.src, ip.dst, ip.proto, ip.l4.len(), ip.ip_len), (c, s, ip_proto::TCP, 29, 69));
        assert!(l4_checksum_ok(c, s, ip_proto::TCP, ip.l4));
        let t = frame_tuple(&f).unwrap();
        assert_eq!((t.src_port, t.dst_port, t.proto), (40000, 443, ip_proto::TCP));
        // A flipped payload bit is caught, and refilled.
        let mut g = f.clone();
        *g.last_mut().unwrap() ^= 1;
        let ip = frame_ip(&g).unwrap();
        assert!(!l4_checksum_ok(c, s, ip_proto::TCP, ip.l4));
        refill_tcp_checksum(&mut g);
        let ip = frame_ip(&g).unwrap();
        assert!(l4_checksum_ok(c, s, ip_proto::TCP, ip.l4));

        let u = udp_frame(c, s, 5353, 53, &[9u8; 40]);
        let ip = frame_ip(&u).unwrap();
        assert!(l4_checksum_ok(c, s, ip_proto::UDP, ip.l4));
        assert_eq!(frame_tuple(&u).unwrap().dst_port, 53);

        let e = echo_frame(c, s, true, 77, 2, b"ping");
        let ip = frame_ip(&e).unwrap();
        assert_eq!(echo6(ip.src, ip.dst, ip.l4), Some((icmpv6::msg_type::ECHO_REQUEST, 77, 2, &b"ping"[..])));
        let t = frame_tuple(&e).unwrap();
        assert_eq!((t.proto, t.src_port, t.dst_port), (ip_proto::ICMPV6, 77, 0));
        let r = echo_frame(s, c, false, 77, 2, b"ping");
        assert_eq!(frame_tuple(&r).unwrap(), t.reversed());
    }

    #[test]
    fn an_ipv6_fragment_has_no_tuple_but_its_header() {
        let (c, s) = (client_addr6(1), server_addr6(1));
        let mut body = vec![0u8; ipv6::FRAGMENT_HEADER_LEN];
        ipv6::emit_fragment_header(&mut body, ip_proto::UDP, 1448, true, 0x1234_5678);
        body.extend_from_slice(&[7u8; 64]);
        let f = ipv6_frame(c, s, ipv6::next_header::FRAGMENT, 64, &body);
        assert!(frame_tuple(&f).is_none());
        let h = frame_fragment(&f).unwrap();
        assert_eq!((h.proto, h.ident, h.offset, h.more), (ip_proto::UDP, 0x1234_5678, 1448, true));
        // An atomic fragment is a whole packet.
        let whole = udp_frame(IpAddr::V6(c), IpAddr::V6(s), 1, 2, b"x");
        let mut body = vec![0u8; ipv6::FRAGMENT_HEADER_LEN];
        ipv6::emit_fragment_header(&mut body, ip_proto::UDP, 0, false, 1);
        body.extend_from_slice(&whole[ETH_HLEN + ipv6::HEADER_LEN..]);
        let f = ipv6_frame(c, s, ipv6::next_header::FRAGMENT, 64, &body);
        assert!(frame_fragment(&f).is_none());
        assert_eq!(frame_tuple(&f).unwrap().dst_port, 2);
    }

    #[test]
    fn neighbor_discovery_frames() {
        let mac = Side::Outside.router_mac();
        let ns = neighbor_solicitation(mac, OUTSIDE_ROUTER_IP6, node_addr6(1, Side::Outside));
        let (src, nd) = frame_nd(&ns).unwrap();
        assert_eq!((src, nd.msg_type, nd.target, nd.lladdr), (OUTSIDE_ROUTER_IP6, icmpv6::msg_type::NEIGHBOR_SOLICIT, node_addr6(1, Side::Outside), Some(mac)));
        assert!(icmpv6::is_multicast_mac(ns[0..6].try_into().unwrap()));
        let na = neighbor_advertisement(mac, OUTSIDE_ROUTER_IP6, node_mac(1, OUTSIDE), node_addr6(1, Side::Outside));
        let (src, nd) = frame_nd(&na).unwrap();
        assert_eq!((src, nd.msg_type, nd.target, nd.lladdr), (OUTSIDE_ROUTER_IP6, icmpv6::msg_type::NEIGHBOR_ADVERT, OUTSIDE_ROUTER_IP6, Some(mac)));
        assert_eq!(nd.flags & icmpv6::NA_SOLICITED, icmpv6::NA_SOLICITED);
        assert_eq!(na[0..6], node_mac(1, OUTSIDE));
    }

    #[test]
    fn ipv6_addresses_hash_on_every_bit() {
        // Two clients that differ only in the upper words reach different
        // nodes for some ports (the fold keeps every bit).
        let a = Ipv6Addr::new(0x2001, 0xdb8, 0x64, 0, 0, 0, 0, 1);
        let b = Ipv6Addr::new(0x2001, 0xdb8, 0x65, 0, 0, 0, 0, 1);
        let t = |x: Ipv6Addr, p: u16| FiveTuple { src: IpAddr::V6(x), dst: IpAddr::V6(server_addr6(0)), proto: 6, src_port: p, dst_port: 80 };
        assert!((1000..1100).any(|p| ecmp_hash(3, &t(a, p), false) != ecmp_hash(3, &t(b, p), false)));
    }
}
