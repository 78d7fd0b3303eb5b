//! The simulated network around the nodes: the addressing plan, the two
//! upstream routers (ECMP by an L4 hash, SPEC §1) and the CCL segment.
//!
//! Invariants: every address lies in 198.18.0.0/15 (RFC 2544 benchmarking
//! space), so nothing the simulator builds could name a real host; the
//! router hash is a pure function of (seed, tuple) so a run is reproducible;
//! the two routers hash with different seeds, so the two directions of one
//! connection usually reach different nodes — the case the cluster exists
//! for. In `symmetric` mode both routers use one seed and an
//! order-independent hash, so both directions reach the same node (the
//! "cluster tax" baseline).

use dataplane::types::{ip_proto, FiveTuple, PortId};
use dataplane::wire::ethernet::{ethertype, EthernetFrame};
use dataplane::wire::icmp::{msg_type, Icmpv4Packet};
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::tcp::TcpPacket;
use dataplane::wire::udp::UdpPacket;
use rand::rngs::ChaCha8Rng;
use rand::RngExt;
use std::net::{IpAddr, Ipv4Addr};

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

fn ip_u32(a: IpAddr) -> u32 {
    match a {
        IpAddr::V4(v) => u32::from(v),
        IpAddr::V6(v) => {
            let o = v.octets();
            u32::from_be_bytes([o[12], o[13], o[14], o[15]])
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

/// An IPv4 fragment as a router sees it: header fields only (a later
/// fragment has no ports).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct FragHeader {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub proto: u8,
    pub ident: u16,
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
        let (mut a, mut b) = (u64::from(u32::from(f.src)), u64::from(u32::from(f.dst)));
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

/// The fragment header fields of an Ethernet/IPv4 frame that is a
/// fragment (MF set or offset non-zero), else `None`.
pub fn frame_fragment(frame: &[u8]) -> Option<FragHeader> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != ethertype::IPV4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    ip.is_fragment().then(|| FragHeader {
        src: ip.src(),
        dst: ip.dst(),
        proto: ip.protocol(),
        ident: ip.ident(),
        offset: ip.frag_offset(),
        more: ip.more_frags(),
    })
}

/// The five-tuple of an Ethernet/IPv4 frame (ICMP ports as SPEC R3);
/// `None` for fragments.
pub fn frame_tuple(frame: &[u8]) -> Option<FiveTuple> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != ethertype::IPV4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    // A fragment has no five-tuple of its own (a later one has no ports; a
    // first one's L4 header does not describe its payload): `frame_fragment`.
    if ip.is_fragment() {
        return None;
    }
    let (src, dst, proto) = (IpAddr::V4(ip.src()), IpAddr::V4(ip.dst()), ip.protocol());
    let (sp, dp) = match proto {
        ip_proto::TCP => {
            let t = TcpPacket::new_checked(ip.payload()).ok()?;
            (t.src_port(), t.dst_port())
        }
        ip_proto::UDP => {
            let u = UdpPacket::new_checked(ip.payload()).ok()?;
            (u.src_port(), u.dst_port())
        }
        ip_proto::ICMP => {
            let i = Icmpv4Packet::new_checked(ip.payload()).ok()?;
            match i.msg_type() {
                msg_type::ECHO_REQUEST => (i.echo_ident(), 0),
                msg_type::ECHO_REPLY => (0, i.echo_ident()),
                _ => (0, 0),
            }
        }
        _ => (0, 0),
    };
    Some(FiveTuple {
        src,
        dst,
        proto,
        src_port: sp,
        dst_port: dp,
    })
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
        let frag = |ident: u16, offset: u16| FragHeader {
            src: client_addr(3),
            dst: server_addr(4),
            proto: ip_proto::UDP,
            ident,
            offset,
            more: offset < 5920,
        };
        let (plain, spread) = (r(false), r(true));
        let mut spread_datagrams = 0;
        for ident in 0..200u16 {
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
    }
}
