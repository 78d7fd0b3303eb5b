//! A hand-wired cluster of `Pipeline`s for the cluster golden tests: every
//! node has an inside, an outside and a CCL interface; frames a node sends
//! on its CCL port are delivered to the node whose CCL MAC they are
//! addressed to, until the cluster is quiet. Individual interface mode:
//! each node has its own addresses and MACs on every segment.
#![allow(dead_code)]

use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::ccl::{CclPacket, MessageKind, CCL_UDP_PORT};
use dataplane::cluster::{flow_hash, CookieCodec, DirectorTable, MemberSet};
use dataplane::pipeline::cluster::cookie_key;
use dataplane::conntrack::Timeouts;
use dataplane::pipeline::{
    ClusterSpec, InterfaceSpec, Pipeline, PipelineConfig, RouteSpec, Verdict,
};
use dataplane::wire::build::PacketBuilder;
use dataplane::wire::ethernet::EthernetFrame;
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::tcp::{TcpOptions, TcpPacket};
use dataplane::wire::udp::UdpPacket;
use dataplane::{DropReason, Duration, Epoch, FiveTuple, NodeId, PortId, Timestamp};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};

pub const NAME: &str = "lab";
pub const KEY: &str = "lab-secret-0123456789";
pub const IN: PortId = PortId(0);
pub const OUT: PortId = PortId(1);
pub const CCL: PortId = PortId(2);

pub const HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 10);
pub const HOST_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x0a];
pub const GW: Ipv4Addr = Ipv4Addr::new(198, 18, 2, 254);
pub const GW_MAC: [u8; 6] = [0x02, 0, 0, 0, 0x02, 0xfe];
/// Linux-like SYN options: MSS 1460, SACK-permitted, NOP, window scale 7.
pub const SYN_OPTS: [u8; 12] = [2, 4, 0x05, 0xb4, 4, 2, 1, 1, 1, 3, 3, 7];
pub const SERVER: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);
pub const DNS: Ipv4Addr = Ipv4Addr::new(9, 9, 9, 9);

pub fn in_mac(n: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x01, 1 + n as u8]
}
pub fn out_mac(n: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x02, 1 + n as u8]
}
pub fn ccl_mac(n: usize) -> [u8; 6] {
    [0x02, 0, 0, 0, 0x99, 1 + n as u8]
}
pub fn in_addr(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 1, 1 + n as u8)
}
pub fn out_addr(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 18, 2, 1 + n as u8)
}
pub fn ccl_addr(n: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 99, 0, 1 + n as u8)
}

pub fn members(nodes: usize) -> MemberSet {
    MemberSet::from_nodes(Epoch(1), (0..nodes as u8).map(NodeId)).unwrap()
}

pub fn config(n: usize, nodes: usize, seq_randomization: bool) -> PipelineConfig {
    let iface = |name: &str, port, mac, addr, level| InterfaceSpec {
        name: name.into(),
        port,
        mac,
        addr,
        prefix_len: 24,
        security_level: level,
        vlan: None,
        mtu: 1500,
        reverse_path: dataplane::pipeline::ReversePath::Strict,
    };
    let mut static_neighbors = vec![(GW, GW_MAC), (HOST, HOST_MAC)];
    static_neighbors.extend((0..nodes).filter(|&m| m != n).map(|m| (ccl_addr(m), ccl_mac(m))));
    PipelineConfig {
        interfaces: vec![
            iface("inside", IN, in_mac(n), in_addr(n), 100),
            iface("outside", OUT, out_mac(n), out_addr(n), 0),
            iface("ccl", CCL, ccl_mac(n), ccl_addr(n), 100),
        ],
        routes: vec![RouteSpec { destination: Ipv4Addr::UNSPECIFIED, prefix_len: 0, via: GW }],
        rules: vec![],
        timeouts: Timeouts::default(),
        flow_capacity: 256,
        arp_capacity: 64,
        arp_timeout: Duration::from_secs(300),
        arp_retry: Duration::from_secs(1),
        static_neighbors,
        icmp_errors: Default::default(),
        cluster: Some(ClusterSpec {
            node: NodeId(n as u8),
            members: members(nodes),
            cluster_name: NAME.into(),
            key: KEY.into(),
            incarnation: 1000 + n as u32,
            seq_randomization,
            ccl_iface: "ccl".into(),
            peers: (0..nodes).filter(|&m| m != n).map(|m| (NodeId(m as u8), ccl_addr(m))).collect(),
            random_seed: 0x5eed + n as u64,
            lease: Timestamp::MAX,
            backups: 1,
            syn_guard: dataplane::pipeline::DEFAULT_SYN_GUARD,
            // No director hold: the golden tests assert the immediate
            // "none" of before issue 10; failover tests set it.
            director_hold: Duration::ZERO,
            director_localization: false,
            site_redundancy: false,
        }),
    }
}

/// `config` with the director hold at its default (`DEFAULT_DIRECTOR_HOLD`;
/// `config` has none, for the golden tests' immediate "none").
pub fn with_hold(nodes: usize, seq_randomization: bool) -> impl Fn(usize) -> PipelineConfig {
    move |n| {
        let mut c = config(n, nodes, seq_randomization);
        if let Some(cl) = c.cluster.as_mut() {
            cl.director_hold = dataplane::pipeline::DEFAULT_DIRECTOR_HOLD;
        }
        c
    }
}

/// What left the cluster on data ports: `(node, port, frame)`.
pub type Out = Vec<(usize, PortId, Vec<u8>)>;

/// The one frame that left the cluster.
pub fn one(out: &Out) -> (usize, PortId, Vec<u8>) {
    assert_eq!(out.len(), 1, "exactly one frame leaves the cluster: {out:?}");
    out[0].clone()
}

/// One CCL datagram seen on the CCL segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CclSeen {
    pub from: usize,
    pub to: usize,
    pub kind: MessageKind,
}

pub struct Bed {
    pub nodes: Vec<Pipeline>,
    pub now_ms: u64,
    /// Verdict of every `process` call, with the node.
    pub verdicts: Vec<(usize, Verdict)>,
    /// CCL messages delivered, in order.
    pub ccl: Vec<CclSeen>,
    /// Generated CCL messages of this kind are not delivered but kept in
    /// `held` (a lost or delayed message; `release_held` delivers them).
    pub hold: Option<MessageKind>,
    /// `(from, to, frame)` of the messages `hold` caught, in order.
    pub held: Vec<(usize, usize, Vec<u8>)>,
    /// Nodes that are down (killed or paused): nothing is delivered to
    /// them, their timers do not run, they send nothing.
    pub down: Vec<bool>,
}

/// The CCL kind of a frame (outer headers untagged), if it is one.
pub fn ccl_kind(frame: &[u8]) -> Option<MessageKind> {
    let d = frame.get(42..)?;
    let p = CclPacket::new_checked(d).ok()?;
    MessageKind::from_u8(p.kind())
}

impl Bed {
    pub fn new(nodes: usize, seq_randomization: bool) -> Self {
        Self::with(nodes, |n| config(n, nodes, seq_randomization))
    }

    /// A bed whose node `n` has the configuration `cfg(n)`.
    pub fn with(nodes: usize, cfg: impl Fn(usize) -> PipelineConfig) -> Self {
        Bed {
            nodes: (0..nodes).map(|n| Pipeline::new(cfg(n)).unwrap()).collect(),
            now_ms: 1_000,
            verdicts: vec![],
            ccl: vec![],
            hold: None,
            held: vec![],
            down: vec![false; nodes],
        }
    }

    /// The member set every node up holds now (the first node's epoch).
    pub fn members_up(&self, epoch: u64) -> MemberSet {
        MemberSet::from_nodes(Epoch(epoch), (0..self.nodes.len()).filter(|&n| !self.down[n]).map(|n| NodeId(n as u8)))
            .unwrap()
    }

    /// Give every node that is up the member set `set` (what the membership
    /// machine does on a change), at the current time.
    pub fn set_members_up(&mut self, set: MemberSet) {
        let now = self.now();
        for (n, p) in self.nodes.iter_mut().enumerate() {
            if !self.down[n] {
                p.set_members(now, set);
            }
        }
    }

    /// Node `n` fails (or pauses): its frames stop, and the survivors get
    /// the member set without it at epoch `epoch`.
    pub fn kill(&mut self, n: usize, epoch: u64) {
        self.down[n] = true;
        let set = self.members_up(epoch);
        self.set_members_up(set);
    }

    /// Node `n`, killed earlier, comes back a second later: membership
    /// reset it, and every node (it included) gets the member set with it
    /// at epoch `epoch`; the timers run once.
    pub fn rejoin(&mut self, n: usize, epoch: u64) {
        self.now_ms += 1_000;
        let now = self.now();
        self.nodes[n].reset(now);
        self.down[n] = false;
        let set = self.members_up(epoch);
        self.set_members_up(set);
        self.tick(1);
    }

    pub fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.now_ms)
    }

    fn ccl_dest(&self, frame: &[u8], from: usize) -> Vec<usize> {
        let Ok(e) = EthernetFrame::new_checked(frame) else { return vec![] };
        let dst = e.dst();
        (0..self.nodes.len()).filter(|&m| m != from && (dst == ccl_mac(m) || dst == [0xff; 6])).collect()
    }

    /// A bed whose CCL peers are not static neighbours: their MACs are
    /// learnt by ARP on the CCL segment.
    pub fn with_arp(nodes: usize) -> Self {
        let cfg = |n| {
            let mut c = config(n, nodes, true);
            c.static_neighbors.retain(|(a, _)| a.octets()[0] != 10);
            c
        };
        Self::with(nodes, cfg)
    }

    /// Run every node's timers, then deliver what they generated until the
    /// cluster is quiet.
    pub fn tick(&mut self, ms: u64) -> Vec<(usize, PortId, Vec<u8>)> {
        self.now_ms += ms;
        let now = self.now();
        for (n, p) in self.nodes.iter_mut().enumerate() {
            if !self.down[n] {
                p.poll_timers(now);
            }
        }
        self.run(VecDeque::new())
    }

    /// Deliver `frame` to node `n` on `port`, then keep delivering CCL
    /// frames (process verdicts and generated frames, after a `flush` of
    /// every node) until the cluster is quiet. Returns what left on data
    /// ports: `(node, port, frame)`.
    pub fn send(&mut self, n: usize, port: PortId, frame: Vec<u8>) -> Vec<(usize, PortId, Vec<u8>)> {
        self.now_ms += 1;
        self.run(VecDeque::from([(n, port, frame)]))
    }

    /// `send` of several frames to node `n` on `port` as one burst: all are
    /// processed before any node drains what it generated.
    pub fn send_burst(&mut self, n: usize, port: PortId, frames: Vec<Vec<u8>>) -> Vec<(usize, PortId, Vec<u8>)> {
        self.now_ms += 1;
        self.run(frames.into_iter().map(|f| (n, port, f)).collect())
    }

    fn run(&mut self, mut queue: VecDeque<(usize, PortId, Vec<u8>)>) -> Vec<(usize, PortId, Vec<u8>)> {
        let now = self.now();
        let mut out = vec![];
        loop {
            while let Some((n, port, frame)) = queue.pop_front() {
                if self.down[n] {
                    continue;
                }
                let mut buf = VecBuf::new(&frame);
                let v = self.nodes[n].process(now, port, &mut buf);
                self.verdicts.push((n, v));
                match v {
                    Verdict::Forward(p) if p == CCL => {
                        for m in self.ccl_dest(buf.data(), n) {
                            if let Some(kind) = ccl_kind(buf.data()) {
                                self.ccl.push(CclSeen { from: n, to: m, kind });
                            }
                            queue.push_back((m, CCL, buf.to_vec()));
                        }
                    }
                    Verdict::Forward(p) => out.push((n, p, buf.to_vec())),
                    Verdict::Drop(_) | Verdict::Consumed => {}
                    Verdict::Handoff(w) => panic!("node {n} handed a frame to worker {w:?}: cluster nodes run one worker"),
                }
            }
            let mut generated = vec![];
            for (n, p) in self.nodes.iter_mut().enumerate() {
                if self.down[n] {
                    continue;
                }
                p.flush(now);
                p.drain_generated(|port, f| generated.push((n, port, f.to_vec())));
            }
            if generated.is_empty() {
                break;
            }
            for (n, port, f) in generated {
                if port == CCL {
                    for m in self.ccl_dest(&f, n) {
                        if self.hold.is_some() && ccl_kind(&f) == self.hold {
                            self.held.push((n, m, f.clone()));
                            continue;
                        }
                        if let Some(kind) = ccl_kind(&f) {
                            self.ccl.push(CclSeen { from: n, to: m, kind });
                        }
                        queue.push_back((m, CCL, f.clone()));
                    }
                } else {
                    out.push((n, port, f));
                }
            }
        }
        out
    }

    /// Deliver the held messages at these indices of `held`, in this
    /// order (the rest are lost), then let the cluster settle.
    pub fn release_held(&mut self, order: &[usize]) -> Vec<(usize, PortId, Vec<u8>)> {
        let held = std::mem::take(&mut self.held);
        let mut queue = VecDeque::new();
        for &i in order {
            let (from, to, f) = held[i].clone();
            if let Some(kind) = ccl_kind(&f) {
                self.ccl.push(CclSeen { from, to, kind });
            }
            queue.push_back((to, CCL, f));
        }
        self.now_ms += 1;
        self.run(queue)
    }

    /// The last verdict node `n` returned.
    pub fn last_verdict(&self, n: usize) -> Option<Verdict> {
        self.verdicts.iter().rev().find(|(m, _)| *m == n).map(|(_, v)| *v)
    }

    /// Drops of reason `r` on node `n`.
    pub fn drops(&self, n: usize, r: DropReason) -> u64 {
        self.nodes[n].counters().drop_count(r)
    }

    pub fn cluster(&self, n: usize) -> dataplane::pipeline::ClusterCountersSnapshot {
        self.nodes[n].cluster_counters().unwrap()
    }

    /// Nodes with a conntrack flow for `t`.
    pub fn owners(&self, t: &FiveTuple) -> Vec<usize> {
        (0..self.nodes.len()).filter(|&n| self.nodes[n].conntrack().lookup(t).is_some()).collect()
    }

    /// Nodes up with a conntrack flow for `t`.
    pub fn owners_up(&self, t: &FiveTuple) -> Vec<usize> {
        self.owners(t).into_iter().filter(|&n| !self.down[n]).collect()
    }

    pub fn ccl_count(&self, from: usize, to: usize, kind: MessageKind) -> usize {
        self.ccl.iter().filter(|c| c.from == from && c.to == to && c.kind == kind).count()
    }
}

/// The director of `t` among `nodes` members.
pub fn director(t: &FiveTuple, nodes: usize) -> usize {
    DirectorTable::new(&members(nodes)).unwrap().director(flow_hash(t)).index()
}

pub fn tuple(src: Ipv4Addr, sp: u16, dst: Ipv4Addr, dp: u16, proto: u8) -> FiveTuple {
    FiveTuple { src: IpAddr::V4(src), dst: IpAddr::V4(dst), proto, src_port: sp, dst_port: dp }
}

/// A client port (from 40000 up) whose flow to `dst:dport` has `want` as
/// director among `nodes` members.
pub fn port_with_director(dst: Ipv4Addr, dport: u16, proto: u8, nodes: usize, want: usize) -> u16 {
    (40000..65000).find(|&p| director(&tuple(HOST, p, dst, dport, proto), nodes) == want).unwrap()
}

pub fn cookies() -> CookieCodec {
    CookieCodec::new(cookie_key(KEY))
}

/// Client frames arriving at node `n`'s inside interface.
pub fn from_host(n: usize, dst: Ipv4Addr) -> PacketBuilder {
    PacketBuilder::new(HOST_MAC, in_mac(n), HOST, dst)
}
/// Frames from the outside gateway arriving at node `n`.
pub fn from_outside(n: usize, src: Ipv4Addr) -> PacketBuilder {
    PacketBuilder::new(GW_MAC, out_mac(n), src, HOST)
}
/// What node `n` sends to the client.
pub fn to_host(n: usize, src: Ipv4Addr) -> PacketBuilder {
    PacketBuilder::new(in_mac(n), HOST_MAC, src, HOST).ttl(63)
}
/// What node `n` sends towards the gateway.
pub fn to_gw(n: usize, dst: Ipv4Addr) -> PacketBuilder {
    PacketBuilder::new(out_mac(n), GW_MAC, HOST, dst).ttl(63)
}

/// TCP fields of an untagged frame: (seq, ack, flags, SACK blocks).
pub fn tcp_fields(frame: &[u8]) -> (u32, u32, u8, Vec<(u32, u32)>) {
    let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
    let t = TcpPacket::new_checked(ip.payload()).unwrap();
    assert!(t.verify_checksum(ip.src(), ip.dst()), "tcp checksum");
    let o = TcpOptions::parse(t.options());
    (t.seq(), t.ack(), t.flags(), o.sack_blocks().to_vec())
}

/// UDP payload of an untagged frame.
pub fn udp_payload(frame: &[u8]) -> Vec<u8> {
    let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
    UdpPacket::new_checked(ip.payload()).unwrap().payload().to_vec()
}

pub fn is_ccl_udp(frame: &[u8]) -> bool {
    let Ok(ip) = Ipv4Packet::new_checked(&frame[14..]) else { return false };
    UdpPacket::new_checked(ip.payload()).is_ok_and(|u| u.dst_port() == CCL_UDP_PORT)
}

pub fn hex(b: &[u8]) -> String {
    b.chunks(16)
        .map(|c| c.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A NAT configuration of one rule of `kind`: 198.18.1.0/24 on the inside
/// (interface 0) translated through `pool` (pool 0) on the outside
/// (interface 1).
pub fn one_rule_nat(kind: dataplane::nat::RuleKind, pool: dataplane::pipeline::PoolSpec) -> dataplane::pipeline::NatSpec {
    dataplane::pipeline::NatSpec {
        rules: vec![dataplane::nat::RuleSpec {
            kind,
            real_iface: Some(dataplane::route::IfIndex(0)),
            mapped_iface: Some(dataplane::route::IfIndex(1)),
            source: (Ipv4Addr::new(198, 18, 1, 0), 24),
            mapped: None,
            ports: None,
            pool: Some(0),
            per_session: Default::default(),
        }],
        pools: vec![pool],
        xlate_capacity: 1024,
        xlate_timeout: dataplane::Duration::from_secs(30),
        host_capacity: 64,
    }
}
