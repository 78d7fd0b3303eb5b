//! IPv6 on a single node (issue 16, first part; docs/ipv6.md): the
//! interfaces' IPv6 addresses, static routes with longest-prefix match,
//! Neighbor Discovery (RFC 4861) for our addresses and our next hops,
//! ICMPv6 echo to our addresses, and forwarding — hop limit, the
//! extension-header chain walked with a bound, routing header type 0
//! dropped (RFC 5095), connection tracking and the access policy as for
//! IPv4 (`Flows::track`: the same state machine, timeouts and security
//! levels; rules without addresses apply, rules with IPv4 prefixes do not),
//! ICMPv6 errors (time exceeded, no route, packet too big: routers never
//! fragment IPv6, so path-MTU discovery depends on it) under the IPv4
//! errors' rate limit, and ICMPv6 errors in transit matched to their
//! connection.
//!
//! Not here yet (docs/ipv6.md): IPv6 fragments (dropped, counted
//! `ipv6-fragment`), IPv6 in a cluster (dropped, `ipv6-not-forwarded`),
//! anti-spoofing of IPv6 sources, NAT, access rules with IPv6 prefixes,
//! DAD (our addresses are configured, not autoconfigured: a duplicate is
//! the operator's to see in the neighbour's logs).
//!
//! Invariants: `Ipv6Path::new` allocates everything (the neighbour cache,
//! the generated-frame queue of `GEN_QUEUE` frames); nothing on the packet
//! path allocates. A frame is answered or turned into an error only after
//! every check on it passed; a frame dropped is unchanged. ND learns only
//! from messages with hop limit 255 and a valid checksum (RFC 4861 §7.1.1,
//! §7.1.2), creates an entry only for a solicitation addressed to us with
//! a source link-layer address, and updates one from an advertisement
//! only when it exists (an unsolicited advertisement for an unknown
//! target is ignored, counted).

use super::iface::{Iface, Interfaces};
use crate::arp::{NdCache, Resolve};
use crate::conntrack::L4Info;
use crate::route::IfIndex;
use crate::stats::Stats;
use crate::types::{ip_proto, DropReason, Duration, FiveTuple, PortId, Timestamp};
use crate::wire::ethernet;
use crate::wire::icmpv6::{self, msg_type, Nd};
use crate::wire::ipv6::{self, Ipv6Packet};
use crate::wire::tcp::TcpPacket;
use crate::wire::udp::UdpPacket;
use std::net::{IpAddr, Ipv6Addr};

/// Generated frames (solicitations, errors) queued between two
/// `drain_generated` calls at most; more are counted and dropped.
pub const GEN_QUEUE: usize = 16;
/// Room for one generated frame: an error of `icmpv6::MIN_MTU` bytes in a
/// tagged Ethernet frame.
const GEN_FRAME: usize = ethernet::HEADER_LEN + ethernet::TAG_LEN + icmpv6::MIN_MTU;
/// Hop limit of the packets this node originates (RFC 8200 §3: 64 is
/// common; ND messages use 255).
const HOP_LIMIT: u8 = 64;
const ND_HOP_LIMIT: u8 = 255;

/// An interface's IPv6 addresses and a static IPv6 route as configured
/// (`PipelineConfig::ipv6`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ipv6Spec {
    /// By interface name: the global address and its prefix length. An
    /// interface without one does not speak IPv6.
    pub addresses: Vec<(String, Ipv6Addr, u8)>,
    pub routes: Vec<Route6Spec>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route6Spec {
    pub destination: Ipv6Addr,
    pub prefix_len: u8,
    pub via: Ipv6Addr,
}

/// Why `Ipv6Spec` is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Ipv6SpecError {
    #[error("ipv6: unknown interface {0:?}")]
    UnknownInterface(String),
    #[error("ipv6: interface {0}: address {1}/{2} is not a global unicast address with a prefix length of 1-128")]
    BadAddress(String, Ipv6Addr, u8),
    #[error("ipv6: interfaces {0} and {1} have overlapping subnets")]
    Overlap(String, String),
    #[error("ipv6: route {0}/{1}: prefix length above 128 or host bits set")]
    BadRoute(Ipv6Addr, u8),
    #[error("ipv6: route {0}/{1}: next hop {2} is not in a connected IPv6 subnet")]
    NextHopNotConnected(Ipv6Addr, u8, Ipv6Addr),
}

/// One interface's IPv6 side.
#[derive(Copy, Clone, Debug)]
struct If6 {
    global: Ipv6Addr,
    prefix_len: u8,
    link_local: Ipv6Addr,
}

impl If6 {
    fn owns(&self, a: Ipv6Addr) -> bool {
        a == self.global || a == self.link_local
    }
}

fn mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

fn contains(net: Ipv6Addr, len: u8, a: Ipv6Addr) -> bool {
    (u128::from(net) ^ u128::from(a)) & mask(len) == 0
}

/// A route: `(network, length, interface, next hop or None for on-link)`,
/// longest prefix first (a firewall's handful: a linear scan).
type Route6 = (u128, u8, IfIndex, Option<Ipv6Addr>);

/// IPv6 counters (`show stats`, group `ipv6`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Ipv6PathCounters {
    pub forwarded: u64,
    pub local: u64,
    pub echo_replies: u64,
    pub solicitations_received: u64,
    pub advertisements_received: u64,
    pub solicitations_sent: u64,
    pub advertisements_sent: u64,
    /// ND messages refused (hop limit not 255, bad checksum, malformed,
    /// target not ours) or ignored (an advertisement nobody asked for).
    pub nd_invalid: u64,
    pub nd_ignored: u64,
    /// Router advertisements and solicitations, redirects: ignored.
    pub router_messages_ignored: u64,
    pub time_exceeded_sent: u64,
    pub unreachable_sent: u64,
    pub too_big_sent: u64,
    /// Errors not sent: no token, an error about an error or a multicast,
    /// no route or neighbour back, the queue full.
    pub errors_not_sent: u64,
    pub errors_forwarded: u64,
    pub held: u64,
    pub generated_dropped: u64,
}

crate::impl_stats!(Ipv6PathCounters {
    counter forwarded, counter local, counter echo_replies, counter solicitations_received, counter advertisements_received,
    counter solicitations_sent, counter advertisements_sent, counter nd_invalid, counter nd_ignored, counter router_messages_ignored,
    counter time_exceeded_sent, counter unreachable_sent, counter too_big_sent, counter errors_not_sent,
    counter errors_forwarded, counter held, counter generated_dropped
});

struct Gen {
    port: PortId,
    len: usize,
    frame: Box<[u8; GEN_FRAME]>,
}

/// The IPv6 stage of one worker.
pub(crate) struct Ipv6Path {
    ifs: Vec<Option<If6>>,
    routes: Vec<Route6>,
    pub nd: NdCache,
    gen: Vec<Gen>,
    gen_len: usize,
    pub counters: Ipv6PathCounters,
}

/// What the stage decided for a transit packet: track `tuple` with `l4`,
/// or forward an ICMPv6 error whose quoted connection exists.
pub(crate) enum Transit6 {
    Flow(FiveTuple, L4Info),
    Error(FiveTuple),
}

/// The answer `local_in` decided: from our address `from` to `to` at
/// `to_mac`; an advertisement (`na`) or an echo reply.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Answer {
    pub from: Ipv6Addr,
    pub to: Ipv6Addr,
    pub to_mac: [u8; 6],
    pub na: bool,
}

/// What `local_in` did.
pub(crate) struct Local6 {
    pub answer: Result<Answer, DropReason>,
    pub learnt: Option<(Ipv6Addr, [u8; 6])>,
}

/// Where a transit packet goes.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Route6To {
    pub egress: IfIndex,
    pub next_hop: Ipv6Addr,
}

impl Ipv6Path {
    /// `None` when no interface has an IPv6 address (the node drops IPv6,
    /// counted, as before).
    pub fn new(spec: &Ipv6Spec, ifaces: &Interfaces, nd: NdCache) -> Result<Option<Self>, Ipv6SpecError> {
        if spec.addresses.is_empty() {
            return Ok(None);
        }
        let names = ifaces.names();
        let mut ifs: Vec<Option<If6>> = vec![None; names.len()];
        for (name, addr, len) in &spec.addresses {
            let i = names.iter().position(|n| n == name).ok_or_else(|| Ipv6SpecError::UnknownInterface(name.clone()))?;
            let bad = *len == 0
                || *len > 128
                || addr.is_unspecified()
                || addr.is_loopback()
                || addr.is_multicast()
                || (addr.segments()[0] & 0xffc0) == 0xfe80;
            if bad {
                return Err(Ipv6SpecError::BadAddress(name.clone(), *addr, *len));
            }
            for (j, o) in ifs.iter().enumerate() {
                if let Some(o) = o {
                    if contains(o.global, o.prefix_len.min(*len), *addr) {
                        return Err(Ipv6SpecError::Overlap(names[j].clone(), name.clone()));
                    }
                }
            }
            let mac = ifaces.get(IfIndex(i as u16)).map(|f| f.mac).unwrap_or_default();
            ifs[i] = Some(If6 { global: *addr, prefix_len: *len, link_local: icmpv6::link_local(mac) });
        }
        let mut routes: Vec<Route6> = Vec::new();
        for (i, f) in ifs.iter().enumerate() {
            if let Some(f) = f {
                routes.push((u128::from(f.global) & mask(f.prefix_len), f.prefix_len, IfIndex(i as u16), None));
            }
        }
        for r in &spec.routes {
            if r.prefix_len > 128 || u128::from(r.destination) & !mask(r.prefix_len) != 0 {
                return Err(Ipv6SpecError::BadRoute(r.destination, r.prefix_len));
            }
            let via = ifs
                .iter()
                .enumerate()
                .find_map(|(i, f)| f.filter(|f| contains(f.global, f.prefix_len, r.via) && !f.owns(r.via)).map(|_| i))
                .ok_or(Ipv6SpecError::NextHopNotConnected(r.destination, r.prefix_len, r.via))?;
            routes.push((u128::from(r.destination), r.prefix_len, IfIndex(via as u16), Some(r.via)));
        }
        // Longest first; connected before static at equal length.
        routes.sort_by_key(|r| std::cmp::Reverse(r.1));
        let gen = (0..GEN_QUEUE).map(|_| Gen { port: PortId(0), len: 0, frame: Box::new([0u8; GEN_FRAME]) }).collect();
        Ok(Some(Ipv6Path { ifs, routes, nd, gen, gen_len: 0, counters: Ipv6PathCounters::default() }))
    }

    /// Does interface `ifx` speak IPv6?
    pub fn on(&self, ifx: IfIndex) -> bool {
        self.ifs.get(usize::from(ifx.0)).is_some_and(|f| f.is_some())
    }

    fn iface(&self, ifx: IfIndex) -> Option<If6> {
        self.ifs.get(usize::from(ifx.0)).copied().flatten()
    }

    /// One of our addresses on any interface?
    pub fn is_own(&self, a: Ipv6Addr) -> bool {
        self.ifs.iter().flatten().any(|f| f.owns(a))
    }

    /// Is `dst` for this node on `ifx`: one of its addresses there, the
    /// all-nodes group or the solicited-node group of one of them?
    pub fn local(&self, ifx: IfIndex, dst: Ipv6Addr) -> bool {
        let Some(f) = self.iface(ifx) else { return false };
        f.owns(dst)
            || dst == icmpv6::ALL_NODES
            || dst == icmpv6::solicited_node(f.global)
            || dst == icmpv6::solicited_node(f.link_local)
    }

    /// The route to `dst` (longest prefix).
    pub fn lookup(&self, dst: Ipv6Addr) -> Option<Route6To> {
        let d = u128::from(dst);
        self.routes.iter().find(|r| d & mask(r.1) == r.0).map(|r| Route6To { egress: r.2, next_hop: r.3.unwrap_or(dst) })
    }

    /// The source address of what this node sends out of `ifx` to `to`:
    /// the link-local one to a link-local destination, else the global.
    fn source_for(&self, ifx: IfIndex, to: Ipv6Addr) -> Option<Ipv6Addr> {
        let f = self.iface(ifx)?;
        Some(if (to.segments()[0] & 0xffc0) == 0xfe80 { f.link_local } else { f.global })
    }

    /// The conntrack view of a transit packet whose upper-layer header is
    /// at `off` in the payload.
    pub fn transit(p: &Ipv6Packet<&[u8]>, proto: u8, off: usize) -> Result<Transit6, DropReason> {
        let (src, dst) = (IpAddr::V6(p.src()), IpAddr::V6(p.dst()));
        let tuple = |sp, dp| FiveTuple { src, dst, proto, src_port: sp, dst_port: dp };
        let l4 = p.payload().get(off..).unwrap_or(&[]);
        Ok(match proto {
            ip_proto::TCP => {
                let t = TcpPacket::new_checked(l4).map_err(|e| match e {
                    crate::wire::tcp::Error::BadHeaderLen => DropReason::TcpBadHeaderLen,
                    _ => DropReason::L4Truncated,
                })?;
                Transit6::Flow(tuple(t.src_port(), t.dst_port()), L4Info::Tcp(super::ipv4::tcp_seg(&t)))
            }
            ip_proto::UDP => {
                let u = UdpPacket::new_checked(l4).map_err(|_| DropReason::L4Truncated)?;
                Transit6::Flow(tuple(u.src_port(), u.dst_port()), L4Info::Udp)
            }
            ip_proto::ICMPV6 => {
                let (t, id) = icmpv6::type_and_ident(l4).ok_or(DropReason::L4Truncated)?;
                match t {
                    msg_type::ECHO_REQUEST => Transit6::Flow(tuple(id, 0), L4Info::IcmpEchoRequest),
                    msg_type::ECHO_REPLY => Transit6::Flow(tuple(0, id), L4Info::IcmpEchoReply),
                    t if icmpv6::is_error(t) => Transit6::Error(icmpv6::quoted_tuple(l4).ok_or(DropReason::L4Truncated)?),
                    _ => Transit6::Flow(tuple(0, 0), L4Info::Other),
                }
            }
            _ => Transit6::Flow(tuple(0, 0), L4Info::Other),
        })
    }

    /// A frame for this node (`local`): an echo request to one of our
    /// addresses or a neighbour solicitation for one is to be answered
    /// (`Answer`, by `answer_in_place`); an advertisement is learnt from;
    /// anything else is dropped, counted.
    /// A neighbour learnt from the message (a solicitation's sender, an
    /// advertised target) is returned too, for the frames held for it.
    pub fn local_in(&mut self, now: Timestamp, ifx: IfIndex, l2: usize, data: &[u8]) -> Local6 {
        let mut learnt = None;
        let r = self.local_inner(now, ifx, l2, data, &mut learnt);
        Local6 { answer: r, learnt }
    }

    fn local_inner(
        &mut self,
        now: Timestamp,
        ifx: IfIndex,
        l2: usize,
        data: &[u8],
        learnt: &mut Option<(Ipv6Addr, [u8; 6])>,
    ) -> Result<Answer, DropReason> {
        self.counters.local += 1;
        let f = self.iface(ifx).ok_or(DropReason::Ipv6NotForwarded)?;
        let eth_src = ethernet::EthernetFrame::new_checked(data).map(|e| e.src()).map_err(|_| DropReason::EthTruncated)?;
        let p = Ipv6Packet::new_checked(data.get(l2..).unwrap_or(&[])).map_err(|_| DropReason::Ipv6Truncated)?;
        let (src, dst, hlim) = (p.src(), p.dst(), p.hop_limit());
        let u = p.upper_layer().map_err(|_| DropReason::Ipv6Malformed)?;
        if u.protocol != ip_proto::ICMPV6 || u.fragment.is_some() {
            return Err(DropReason::LocalUnhandled);
        }
        let body = p.payload().get(u.offset..).unwrap_or(&[]);
        if !icmpv6::verify(src, dst, body) {
            if matches!(body.first(), Some(&(msg_type::NEIGHBOR_SOLICIT | msg_type::NEIGHBOR_ADVERT))) {
                self.counters.nd_invalid += 1;
            }
            return Err(DropReason::IcmpBadChecksum);
        }
        match body.first().copied() {
            Some(msg_type::ECHO_REQUEST) if f.owns(dst) && !src.is_unspecified() => {
                self.counters.echo_replies += 1;
                Ok(Answer { from: dst, to: src, to_mac: eth_src, na: false })
            }
            Some(msg_type::NEIGHBOR_SOLICIT) => {
                self.counters.solicitations_received += 1;
                let nd = match icmpv6::parse_nd(body) {
                    Ok(nd) if hlim == ND_HOP_LIMIT && f.owns(nd.target) => nd,
                    _ => {
                        self.counters.nd_invalid += 1;
                        return Err(DropReason::NdInvalid);
                    }
                };
                // A solicitation with a source address teaches its sender
                // (RFC 4861 §7.2.3); DAD's (unspecified source) does not.
                if !src.is_unspecified() {
                    if let Some(mac) = nd.lladdr {
                        if self.nd.learn(now, src, mac, ifx, true) {
                            *learnt = Some((src, mac));
                        }
                    }
                }
                // DAD's goes to all nodes (RFC 4861 §7.2.4).
                let to = if src.is_unspecified() { icmpv6::ALL_NODES } else { src };
                let to_mac = if src.is_unspecified() { icmpv6::multicast_mac(to) } else { nd.lladdr.unwrap_or(eth_src) };
                self.counters.advertisements_sent += 1;
                Ok(Answer { from: nd.target, to, to_mac, na: true })
            }
            Some(msg_type::NEIGHBOR_ADVERT) => {
                self.counters.advertisements_received += 1;
                let nd: Nd = match icmpv6::parse_nd(body) {
                    Ok(nd) if hlim == ND_HOP_LIMIT => nd,
                    _ => {
                        self.counters.nd_invalid += 1;
                        return Err(DropReason::NdInvalid);
                    }
                };
                match nd.lladdr {
                    Some(mac) if self.nd.learn(now, nd.target, mac, ifx, false) => {
                        *learnt = Some((nd.target, mac));
                        Err(DropReason::NdConsumed)
                    }
                    _ => {
                        self.counters.nd_ignored += 1;
                        Err(DropReason::NdConsumed)
                    }
                }
            }
            Some(msg_type::ROUTER_SOLICIT | msg_type::ROUTER_ADVERT | msg_type::REDIRECT) => {
                self.counters.router_messages_ignored += 1;
                Err(DropReason::LocalUnhandled)
            }
            _ => Err(DropReason::LocalUnhandled),
        }
    }

    /// A copy of a neighbour solicitation or advertisement another worker
    /// received (and answered, counted): learn from it as `local_in` does,
    /// nothing else. Returns the neighbour learnt.
    pub fn learn_copy(&mut self, now: Timestamp, ifx: IfIndex, l2: usize, data: &[u8]) -> Option<(Ipv6Addr, [u8; 6])> {
        let f = self.iface(ifx)?;
        let p = Ipv6Packet::new_checked(data.get(l2..)?).ok()?;
        let (src, dst) = (p.src(), p.dst());
        let u = p.upper_layer().ok()?;
        let body = p.payload().get(u.offset..)?;
        if u.protocol != ip_proto::ICMPV6 || p.hop_limit() != ND_HOP_LIMIT || !self.local(ifx, dst) || !icmpv6::verify(src, dst, body) {
            return None;
        }
        let nd = icmpv6::parse_nd(body).ok()?;
        let (ip, mac, create) = match nd.msg_type {
            msg_type::NEIGHBOR_SOLICIT if f.owns(nd.target) && !src.is_unspecified() => (src, nd.lladdr?, true),
            msg_type::NEIGHBOR_ADVERT => (nd.target, nd.lladdr?, false),
            _ => return None,
        };
        self.nd.learn(now, ip, mac, ifx, create).then_some((ip, mac))
    }

    /// Queue a neighbour solicitation for `target` out of `eg` (`ifx`), to
    /// its solicited-node group, or unicast to `mac` to re-confirm a stale
    /// entry.
    pub fn solicit(&mut self, eg: Iface, ifx: IfIndex, target: Ipv6Addr, mac: Option<[u8; 6]>) {
        let Some(src) = self.source_for(ifx, target) else { return };
        let dst = if mac.is_some() { target } else { icmpv6::solicited_node(target) };
        let dst_mac = mac.unwrap_or_else(|| icmpv6::multicast_mac(dst));
        let Some(g) = self.gen_slot() else { return };
        let frame = &mut g.frame[..];
        let l2 = ethernet::emit_header(frame, dst_mac, eg.mac, eg.vlan, ethernet::ethertype::IPV6);
        let Some(n) = frame.get_mut(l2 + ipv6::HEADER_LEN..).and_then(|b| icmpv6::emit_ns(b, src, dst, target, eg.mac)) else {
            return;
        };
        emit_ipv6_header(&mut frame[l2..], src, dst, ND_HOP_LIMIT, n);
        g.port = eg.port;
        g.len = (l2 + ipv6::HEADER_LEN + n).max(ethernet::MIN_FRAME_LEN);
        self.gen_len += 1;
        self.counters.solicitations_sent += 1;
    }

    /// Queue an ICMPv6 error (`kind`: type, code, parameter) about the
    /// packet `l3` (received on `ifx`), back to its source along our route
    /// to it, from our address on the interface it leaves by. Not about an
    /// error or a packet to or from a multicast or unspecified address
    /// (RFC 4443 §2.4 (e)); `token` is the shared rate limit's answer.
    /// The next hop's MAC must be known (an error never waits for ND).
    pub fn error(&mut self, now: Timestamp, ifaces: &Interfaces, kind: (u8, u8, u32), l3: &[u8], token: bool) {
        let Ok(p) = Ipv6Packet::new_checked(l3) else { return };
        let (src, dst) = (p.src(), p.dst());
        let about_error = p.upper_layer().is_ok_and(|u| {
            u.protocol == ip_proto::ICMPV6
                && p.payload().get(u.offset).is_some_and(|&t| icmpv6::is_error(t) || t == msg_type::REDIRECT)
        });
        if about_error || src.is_unspecified() || src.is_multicast() || dst.is_multicast() || self.is_own(src) || !token {
            self.counters.errors_not_sent += 1;
            return;
        }
        let Some(r) = self.lookup(src) else {
            self.counters.errors_not_sent += 1;
            return;
        };
        let (Some(eg), Some(from)) = (ifaces.get(r.egress), self.source_for(r.egress, src)) else {
            self.counters.errors_not_sent += 1;
            return;
        };
        let Some(mac) = self.nd.lookup(now, r.next_hop) else {
            self.counters.errors_not_sent += 1;
            return;
        };
        let Some(g) = self.gen_slot() else { return };
        let frame = &mut g.frame[..];
        let l2 = ethernet::emit_header(frame, mac, eg.mac, eg.vlan, ethernet::ethertype::IPV6);
        let quoted = l3.get(..ipv6::HEADER_LEN + usize::from(p.payload_len())).unwrap_or(l3);
        let Some(n) = frame
            .get_mut(l2 + ipv6::HEADER_LEN..)
            .and_then(|b| icmpv6::emit_error(b, from, src, kind.0, kind.1, kind.2, quoted))
        else {
            return;
        };
        emit_ipv6_header(&mut frame[l2..], from, src, HOP_LIMIT, n);
        g.port = eg.port;
        g.len = (l2 + ipv6::HEADER_LEN + n).max(ethernet::MIN_FRAME_LEN);
        self.gen_len += 1;
        match kind.0 {
            msg_type::TIME_EXCEEDED => self.counters.time_exceeded_sent += 1,
            msg_type::PACKET_TOO_BIG => self.counters.too_big_sent += 1,
            _ => self.counters.unreachable_sent += 1,
        }
    }

    /// The next free generated-frame slot, counted as taken by the caller
    /// (`gen_len += 1`) once filled; `None` (counted) when full.
    fn gen_slot(&mut self) -> Option<&mut Gen> {
        if self.gen_len >= self.gen.len() {
            self.counters.generated_dropped += 1;
            return None;
        }
        self.gen.get_mut(self.gen_len)
    }

    /// Hand the queued frames to `f`, in order, and empty the queue.
    pub fn drain(&mut self, f: &mut impl FnMut(PortId, &[u8])) {
        for g in self.gen.iter().take(self.gen_len) {
            f(g.port, g.frame.get(..g.len).unwrap_or(&[]));
        }
        self.gen_len = 0;
    }

    /// Neighbour-cache aging (timers).
    pub fn timers(&mut self, now: Timestamp) {
        self.nd.age(now);
    }

    /// The neighbour cache as `show nd` lists it.
    pub fn entries(&self, now: Timestamp, names: &[String]) -> Vec<crate::arp::ArpInfo<Ipv6Addr>> {
        self.nd.entries(now, names)
    }

    /// The MAC of `next_hop` on `ifx` if known now, asking (a solicitation
    /// queued) when the cache says so.
    pub fn resolve(&mut self, now: Timestamp, eg: Iface, ifx: IfIndex, next_hop: Ipv6Addr) -> Result<Option<[u8; 6]>, DropReason> {
        Ok(match self.nd.resolve(now, next_hop, ifx) {
            Resolve::Mac(m) => Some(m),
            Resolve::Refresh(m) => {
                self.solicit(eg, ifx, next_hop, Some(m));
                Some(m)
            }
            Resolve::SendRequest => {
                self.solicit(eg, ifx, next_hop, None);
                None
            }
            Resolve::Wait => None,
            Resolve::Full => return Err(DropReason::NdUnresolved),
        })
    }

    /// How long a frame may wait for a neighbour.
    pub fn hold_wait(&self) -> Duration {
        self.nd.give_up_after()
    }
}

impl Stats for Ipv6Path {
    fn visit(&self, v: &mut dyn crate::stats::Visitor) {
        self.counters.visit(v);
    }
}

/// Write an IPv6 header for `payload` bytes of ICMPv6.
fn emit_ipv6_header(b: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr, hop_limit: u8, payload: usize) {
    let Some(h) = b.get_mut(..ipv6::HEADER_LEN) else { return };
    let mut p = Ipv6Packet::new_unchecked(h);
    p.set_ver_tc_flow(0, 0);
    p.set_payload_len(payload as u16);
    p.set_next_header(ip_proto::ICMPV6);
    p.set_hop_limit(hop_limit);
    p.set_src(src);
    p.set_dst(dst);
}

/// Turn the echo request or neighbour solicitation in `buf` (IPv6 at `l2`)
/// into its answer in place: an echo reply from `from` to `to`, or a
/// solicited advertisement of `from` (the target) with our `mac`; the
/// Ethernet header to `to_mac` from `mac`. The frame keeps its tags.
pub(crate) fn answer_in_place<B: crate::buf::PacketBuf>(
    buf: &mut B,
    l2: usize,
    from: Ipv6Addr,
    to: Ipv6Addr,
    to_mac: [u8; 6],
    mac: [u8; 6],
    na: bool,
) -> Result<(), DropReason> {
    let (plen, off) = {
        let p = Ipv6Packet::new_checked(buf.data().get(l2..).unwrap_or(&[])).map_err(|_| DropReason::Ipv6Truncated)?;
        let u = p.upper_layer().map_err(|_| DropReason::Ipv6Malformed)?;
        (usize::from(p.payload_len()), u.offset)
    };
    let have = buf.data().len();
    if na {
        // The advertisement replaces everything after the IPv6 header.
        let want = l2 + ipv6::HEADER_LEN + icmpv6::ND_LEN + 8;
        if have < want && !buf.append(want - have) {
            return Err(DropReason::NoHeadroom);
        }
        if buf.data().len() > want {
            buf.trim_back(buf.data().len() - want);
        }
        let d = buf.data_mut();
        let body = d.get_mut(l2 + ipv6::HEADER_LEN..).ok_or(DropReason::Ipv6Truncated)?;
        let n = icmpv6::emit_na(body, from, to, from, mac, icmpv6::NA_SOLICITED | icmpv6::NA_OVERRIDE)
            .ok_or(DropReason::Ipv6Truncated)?;
        emit_ipv6_header(&mut d[l2..], from, to, ND_HOP_LIMIT, n);
    } else {
        // The echo data stays; extension headers go (the reply carries
        // none). Trailing link padding goes too.
        let end = l2 + ipv6::HEADER_LEN + plen;
        if have > end {
            buf.trim_back(have - end);
        }
        let d = buf.data_mut();
        let start = l2 + ipv6::HEADER_LEN;
        if off > 0 {
            d.copy_within(start + off..end, start);
        }
        let n = plen - off;
        let body = d.get_mut(start..start + n).ok_or(DropReason::Ipv6Truncated)?;
        if body.len() < icmpv6::HEADER_LEN {
            return Err(DropReason::L4Truncated);
        }
        body[0] = msg_type::ECHO_REPLY;
        icmpv6::fill_checksum(from, to, body);
        emit_ipv6_header(&mut d[l2..], from, to, HOP_LIMIT, n);
        let len = buf.data().len();
        buf.trim_back(len - (start + n));
    }
    if !ethernet::write_macs(buf.data_mut(), to_mac, mac) {
        return Err(DropReason::EthTruncated);
    }
    Ok(())
}

impl super::Pipeline {
    /// An IPv6 frame on an interface (not from the CCL), past the
    /// classification's checks: for this node (ND, echo), or forwarded —
    /// the checks of the module essay in order, conntrack and the policy,
    /// the neighbour, out. An error goes back for `ttl-exceeded`,
    /// `no-route` and `frag-needed` (packet too big).
    pub(super) fn ipv6_in<B: crate::buf::PacketBuf>(
        &mut self,
        now: Timestamp,
        at: super::Arrival,
        buf: &mut B,
    ) -> Result<super::Outcome, DropReason> {
        let r = self.ipv6_decide(now, at, buf);
        if let Err(reason) = r {
            let kind = match reason {
                DropReason::TtlExceeded => Some((msg_type::TIME_EXCEEDED, 0, 0)),
                DropReason::NoRoute => Some((msg_type::DEST_UNREACHABLE, icmpv6::unreach_code::NO_ROUTE, 0)),
                DropReason::FragNeeded => {
                    let mtu = self.ipv6.as_deref().zip(ipv6_dst(buf.data().get(at.l2..).unwrap_or(&[]))).and_then(|(v, d)| {
                        v.lookup(d).and_then(|r| self.ifaces.get(r.egress)).map(|e| u32::from(e.mtu))
                    });
                    mtu.map(|m| (msg_type::PACKET_TOO_BIG, 0, m))
                }
                _ => None,
            };
            if let (Some(kind), Some(v)) = (kind, self.ipv6.as_deref_mut()) {
                let token = self.icmp.take_token(now);
                v.error(now, &self.ifaces, kind, buf.data().get(at.l2..).unwrap_or(&[]), token);
            }
        }
        r
    }

    fn ipv6_decide<B: crate::buf::PacketBuf>(
        &mut self,
        now: Timestamp,
        at: super::Arrival,
        buf: &mut B,
    ) -> Result<super::Outcome, DropReason> {
        use super::Outcome;
        let super::Arrival { in_port, ifx, ing, l2, tags, .. } = at;
        let v6 = self.ipv6.as_deref_mut().ok_or(DropReason::Ipv6NotForwarded)?;
        if !v6.on(ifx) {
            return Err(DropReason::Ipv6NotForwarded);
        }
        let (src, dst, hlim, total, u) = {
            let p = Ipv6Packet::new_checked(buf.data().get(l2..).unwrap_or(&[])).map_err(|_| DropReason::Ipv6Truncated)?;
            let u = p.upper_layer().map_err(|_| DropReason::Ipv6Malformed)?;
            (p.src(), p.dst(), p.hop_limit(), ipv6::HEADER_LEN + usize::from(p.payload_len()), u)
        };
        if u.routing.is_some_and(|(kind, _)| kind == 0) {
            return Err(DropReason::Ipv6RoutingType0);
        }
        if src.is_multicast() || v6.is_own(src) {
            return Err(DropReason::Ipv6BadSource);
        }
        if v6.local(ifx, dst) {
            let l = v6.local_in(now, ifx, l2, buf.data());
            if let Some((ip, mac)) = l.learnt {
                self.egress.release_v6(ip, mac);
            }
            let a = l.answer?;
            answer_in_place(buf, l2, a.from, a.to, a.to_mac, ing.mac, a.na)?;
            return Ok(if a.na { Outcome::ArpReply(in_port) } else { Outcome::EchoReply(in_port) });
        }
        let link_local = |a: Ipv6Addr| (a.segments()[0] & 0xffc0) == 0xfe80;
        if dst.is_multicast() || dst.is_unspecified() || dst.is_loopback() || link_local(dst) {
            return Err(DropReason::Ipv6BadDestination);
        }
        // A link-local source never leaves its link (RFC 4291 §2.5.6).
        if src.is_unspecified() || link_local(src) {
            return Err(DropReason::Ipv6BadSource);
        }
        if u.fragment.is_some() {
            return Err(DropReason::Ipv6Fragment);
        }
        if hlim <= 1 {
            return Err(DropReason::TtlExceeded);
        }
        let route = v6.lookup(dst).ok_or(DropReason::NoRoute)?;
        let eg = self.ifaces.get(route.egress).ok_or(DropReason::NoRoute)?;
        if total > usize::from(eg.mtu) {
            return Err(DropReason::FragNeeded);
        }
        let transit = {
            let p = Ipv6Packet::new_checked(buf.data().get(l2..).unwrap_or(&[])).map_err(|_| DropReason::Ipv6Truncated)?;
            Ipv6Path::transit(&p, u.protocol, u.offset)?
        };
        match transit {
            Transit6::Flow(tuple, l4) => {
                let mut link = super::cluster::Link { egress: &mut self.egress, ifaces: &self.ifaces };
                self.flows.track(None, &mut link, now, &tuple, l4, total as u32, ifx, route.egress, || true)?;
            }
            Transit6::Error(quoted) => {
                // About a connection we pass, in either direction.
                if self.flows.table.lookup(&quoted).is_none() {
                    return Err(DropReason::NoFlow);
                }
                v6.counters.errors_forwarded += 1;
            }
        }
        let mac = v6.resolve(now, eg, route.egress, route.next_hop)?;
        let l2 = super::egress::retag(buf, tags, l2, eg.vlan)?;
        if let Some(l3) = buf.data_mut().get_mut(l2..) {
            Ipv6Packet::new_unchecked(l3).set_hop_limit(hlim - 1);
        }
        ethernet::write_macs(buf.data_mut(), mac.unwrap_or([0; 6]), eg.mac);
        match mac {
            Some(_) => {
                v6.counters.forwarded += 1;
                Ok(Outcome::Forward(eg.port))
            }
            None => {
                v6.counters.held += 1;
                let wait = v6.hold_wait();
                self.egress.hold_v6(now, route.next_hop, eg.port, wait, buf.data())
            }
        }
    }
}

/// The destination of the IPv6 packet `l3`, if it parses.
fn ipv6_dst(l3: &[u8]) -> Option<Ipv6Addr> {
    Ipv6Packet::new_checked(l3).ok().map(|p| p.dst())
}
