//! IPv6 (issue 16; docs/ipv6.md): the interfaces' IPv6 addresses, static
//! routes with longest-prefix match, Neighbor Discovery (RFC 4861) for
//! our addresses and our next hops, ICMPv6 echo to our addresses, and
//! forwarding — hop limit, the extension-header chain walked once with a
//! bound (by the classification, `ingress::upper_layer`), routing header
//! type 0 dropped (RFC 5095), anti-spoofing by the interface's mode as for
//! IPv4, fragments, the cluster's roles, connection tracking and the access
//! policy as for IPv4 (`Flows::track`: the same state machine, timeouts
//! and security levels), ICMPv6 errors (time exceeded, no route, packet
//! too big: routers never fragment IPv6, so path-MTU discovery depends on
//! it) under the IPv4 errors' rate limit, and ICMPv6 errors in transit
//! matched to their connection.
//!
//! Fragments (RFC 8200 §4.5) go the IPv4 fragments' way (`frag.rs`): the
//! fragment owner over (source, destination, 32-bit identification) in a
//! cluster, the shallow reassembler (overlaps drop the datagram, RFC 5722;
//! a first fragment must hold the whole upper-layer header, RFC 7112, and
//! carry it right after its Fragment header), held fragments released
//! behind their first one, each decided with the datagram's ports; an
//! atomic fragment (RFC 6946) is a packet. Released fragments are rebuilt
//! without the unfragmentable extension headers the first one had.
//!
//! In a cluster (docs/ipv6.md "In a cluster") an IPv6 connection has the
//! roles of an IPv4 one (`ClusterPath::plan_known`, `plan_new`, `act`):
//! cookie ISN and sequence translation at the owner (`apply_xlate6`),
//! SYN-ACKs forwarded by their cookie, the director, backups, takeover;
//! the CCL (IPv4 itself) carries the IPv6 frames and flow records.
//!
//! Not here: NAT and the SYN proxy (IPv4 only: an IPv6 SYN the proxy
//! would answer is refused as over the embryonic limit), fragments to the
//! node itself, DAD (our addresses are configured, not autoconfigured: a
//! duplicate is the operator's to see in the neighbour's logs).
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

use super::cluster::plan::Plan;
use super::cluster::Link;
use super::cluster::send::Wrap;
use super::context::{HandoffNote, Rx, Via, Xlate};
use super::frag::{frag_track, Admit, FragTrack, Release};
use super::iface::{Iface, Interfaces};
use super::transit6::{self, Transit6};
use crate::arp::{NdCache, Resolve};
use crate::cluster::SeqDelta;
use crate::route::IfIndex;
use crate::stats::Stats;
use crate::types::{ip_proto, DropReason, Duration, PortId, Timestamp};
use crate::wire::ethernet;
use crate::wire::icmpv6::{self, msg_type, Nd};
use crate::wire::ipv6::{self, Ipv6Packet, UpperLayer};
use std::net::Ipv6Addr;

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
    #[error("ipv6: interface {0}: MTU {1} is below IPv6's minimum of 1280 (RFC 8200 §5)")]
    MtuTooSmall(String, u16),
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
            let iface = ifaces.get(IfIndex(i as u16));
            if let Some(f) = iface.filter(|f| usize::from(f.mtu) < icmpv6::MIN_MTU) {
                return Err(Ipv6SpecError::MtuTooSmall(name.clone(), f.mtu));
            }
            let mac = iface.map(|f| f.mac).unwrap_or_default();
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

    /// A frame for this node (`local`; `u`: its extension chain): an echo
    /// request to one of our addresses or a neighbour solicitation for one
    /// is to be answered (`Answer`, by `answer_in_place`); an advertisement
    /// is learnt from; anything else is dropped, counted.
    /// A neighbour learnt from the message (a solicitation's sender, an
    /// advertised target) is returned too, for the frames held for it.
    pub fn local_in(&mut self, now: Timestamp, ifx: IfIndex, l2: usize, u: UpperLayer, data: &[u8]) -> Local6 {
        let mut learnt = None;
        let mut counters = self.counters;
        let r = self.local_inner(now, ifx, l2, u, data, &mut counters, &mut learnt);
        self.counters = counters;
        Local6 { answer: r, learnt }
    }

    /// A copy of a neighbour solicitation or advertisement another worker
    /// received (and answered, counted): learn from it as `local_in` does,
    /// nothing else (nothing counted). Returns the neighbour learnt.
    pub fn learn_copy(&mut self, now: Timestamp, ifx: IfIndex, l2: usize, data: &[u8]) -> Option<(Ipv6Addr, [u8; 6])> {
        let l3 = data.get(l2..)?;
        let u = transit6::upper_layer(l3).ok()?;
        if !ipv6_dst(l3).is_some_and(|d| self.local(ifx, d)) {
            return None;
        }
        let mut learnt = None;
        let _ = self.local_inner(now, ifx, l2, u, data, &mut Ipv6PathCounters::default(), &mut learnt);
        learnt
    }

    /// `local_in`'s checks and learning, counting in `c` (the stage's
    /// counters, or a scratch copy for a copy another worker counted).
    #[allow(clippy::too_many_arguments)]
    fn local_inner(
        &mut self,
        now: Timestamp,
        ifx: IfIndex,
        l2: usize,
        u: UpperLayer,
        data: &[u8],
        c: &mut Ipv6PathCounters,
        learnt: &mut Option<(Ipv6Addr, [u8; 6])>,
    ) -> Result<Answer, DropReason> {
        c.local += 1;
        let f = self.iface(ifx).ok_or(DropReason::Ipv6NotForwarded)?;
        let eth_src = ethernet::EthernetFrame::new_checked(data).map(|e| e.src()).map_err(|_| DropReason::EthTruncated)?;
        let p = Ipv6Packet::new_checked(data.get(l2..).unwrap_or(&[])).map_err(|_| DropReason::Ipv6Truncated)?;
        let (src, dst, hlim) = (p.src(), p.dst(), p.hop_limit());
        if u.protocol != ip_proto::ICMPV6 || u.fragment.is_some() {
            return Err(DropReason::LocalUnhandled);
        }
        let body = p.payload().get(u.offset..).unwrap_or(&[]);
        if !icmpv6::verify(src, dst, body) {
            if matches!(body.first(), Some(&(msg_type::NEIGHBOR_SOLICIT | msg_type::NEIGHBOR_ADVERT))) {
                c.nd_invalid += 1;
            }
            return Err(DropReason::IcmpBadChecksum);
        }
        match body.first().copied() {
            Some(msg_type::ECHO_REQUEST) if f.owns(dst) && !src.is_unspecified() => {
                c.echo_replies += 1;
                Ok(Answer { from: dst, to: src, to_mac: eth_src, na: false })
            }
            Some(msg_type::NEIGHBOR_SOLICIT) => {
                c.solicitations_received += 1;
                let nd = match icmpv6::parse_nd(body) {
                    Ok(nd) if hlim == ND_HOP_LIMIT && f.owns(nd.target) => nd,
                    _ => {
                        c.nd_invalid += 1;
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
                c.advertisements_sent += 1;
                Ok(Answer { from: nd.target, to, to_mac, na: true })
            }
            Some(msg_type::NEIGHBOR_ADVERT) => {
                c.advertisements_received += 1;
                let nd: Nd = match icmpv6::parse_nd(body) {
                    Ok(nd) if hlim == ND_HOP_LIMIT => nd,
                    _ => {
                        c.nd_invalid += 1;
                        return Err(DropReason::NdInvalid);
                    }
                };
                match nd.lladdr {
                    Some(mac) if self.nd.learn(now, nd.target, mac, ifx, false) => {
                        *learnt = Some((nd.target, mac));
                        Err(DropReason::NdConsumed)
                    }
                    _ => {
                        c.nd_ignored += 1;
                        Err(DropReason::NdConsumed)
                    }
                }
            }
            Some(msg_type::ROUTER_SOLICIT | msg_type::ROUTER_ADVERT | msg_type::REDIRECT) => {
                c.router_messages_ignored += 1;
                Err(DropReason::LocalUnhandled)
            }
            _ => Err(DropReason::LocalUnhandled),
        }
    }

    /// Anti-spoofing (RFC 3704) of an IPv6 source arriving on `ifx`
    /// (`ing`), by the interface's mode as for IPv4 (`ipv4::reverse_path_ok`):
    /// strict, the route back to `src` leaves by `ifx` (a connected
    /// subnet's route included); loose, some route leads back. Asked only
    /// for a connection's first packets.
    #[cold]
    #[inline(never)]
    pub fn reverse_path_ok(&self, ing: &Iface, ifx: IfIndex, src: Ipv6Addr) -> bool {
        match ing.reverse_path {
            super::iface::ReversePath::Off => true,
            super::iface::ReversePath::Strict => self.lookup(src).is_some_and(|r| r.egress == ifx),
            super::iface::ReversePath::Loose => self.lookup(src).is_some(),
        }
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
    /// (RFC 4443 §2.4 (e)); `token` takes the shared rate limit's token,
    /// asked only once the error is certain to be sent. An unknown next
    /// hop is solicited and the error waits for it in the ARP hold like a
    /// forwarded frame (`hold`: next hop, port, wait, the frame but for its
    /// destination MAC; false without room): with several workers each
    /// keeps its own neighbour cache, and a worker that never forwarded
    /// towards a source (a fragment's worker goes by the datagram's
    /// identification) would otherwise drop every error to it unsent,
    /// the first packet too big of a path-MTU discovery among them.
    pub fn error(
        &mut self,
        now: Timestamp,
        ifaces: &Interfaces,
        kind: (u8, u8, u32),
        l3: &[u8],
        token: impl FnOnce() -> bool,
        hold: impl FnOnce(Ipv6Addr, PortId, Duration, &[u8]) -> bool,
    ) {
        let Ok(p) = Ipv6Packet::new_checked(l3) else { return };
        let (src, dst) = (p.src(), p.dst());
        let about_error = p.upper_layer().is_ok_and(|u| {
            u.protocol == ip_proto::ICMPV6
                && p.payload().get(u.offset).is_some_and(|&t| icmpv6::is_error(t) || t == msg_type::REDIRECT)
        });
        if about_error || src.is_unspecified() || src.is_multicast() || dst.is_multicast() || self.is_own(src) {
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
        let Ok(mac) = self.resolve(now, eg, r.egress, r.next_hop) else {
            self.counters.errors_not_sent += 1;
            return;
        };
        // The rate limit's token last: a frame no error is sent for
        // spends none (as `IcmpErrors::send`).
        if self.gen_len >= self.gen.len() || !token() {
            self.counters.errors_not_sent += 1;
            return;
        }
        let wait = self.hold_wait();
        let Some(g) = self.gen_slot() else { return };
        let frame = &mut g.frame[..];
        let l2 = ethernet::emit_header(frame, mac.unwrap_or_default(), eg.mac, eg.vlan, ethernet::ethertype::IPV6);
        let quoted = l3.get(..ipv6::HEADER_LEN + usize::from(p.payload_len())).unwrap_or(l3);
        let Some(n) = frame
            .get_mut(l2 + ipv6::HEADER_LEN..)
            .and_then(|b| icmpv6::emit_error(b, from, src, kind.0, kind.1, kind.2, quoted))
        else {
            return;
        };
        emit_ipv6_header(&mut frame[l2..], from, src, HOP_LIMIT, n);
        let len = (l2 + ipv6::HEADER_LEN + n).max(ethernet::MIN_FRAME_LEN);
        if mac.is_some() {
            g.port = eg.port;
            g.len = len;
            self.gen_len += 1;
        } else if !hold(r.next_hop, eg.port, wait, &g.frame[..len]) {
            self.counters.errors_not_sent += 1;
            return;
        }
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
    /// An IPv6 frame past the classification's checks (`u`: its extension
    /// chain, walked once there), from a port or unwrapped from the CCL
    /// (`rx`): for this node (ND, echo), or forwarded — the checks of the
    /// module essay in order, the cluster's roles, conntrack and the
    /// policy, the neighbour, out. An error goes back for `ttl-exceeded`,
    /// `no-route` and `frag-needed` (packet too big).
    pub(super) fn ipv6_in<B: crate::buf::PacketBuf>(
        &mut self,
        now: Timestamp,
        at: super::Arrival,
        rx: Rx,
        u: UpperLayer,
        buf: &mut B,
    ) -> Result<super::Outcome, DropReason> {
        let mut release = None;
        let r = self.ipv6_decide(now, at, rx, u, buf, &mut release);
        if let Some(rel) = release {
            self.release_fragments(now, &rel);
        }
        if let Err(reason) = r {
            self.icmpv6_error(now, &at, reason, buf.data());
        }
        r
    }

    /// The ICMPv6 error a drop for `reason` earns, if any (the never-send
    /// rules before the shared rate limit's token, as for IPv4).
    #[cold]
    fn icmpv6_error(&mut self, now: Timestamp, at: &super::Arrival, reason: DropReason, frame: &[u8]) {
        let l3 = frame.get(at.l2..).unwrap_or(&[]);
        let kind = match reason {
            DropReason::TtlExceeded => (msg_type::TIME_EXCEEDED, 0, 0),
            DropReason::NoRoute => (msg_type::DEST_UNREACHABLE, icmpv6::unreach_code::NO_ROUTE, 0),
            DropReason::FragNeeded => {
                let v = self.ipv6.as_deref();
                let mtu = v.zip(ipv6_dst(l3)).and_then(|(v, d)| v.lookup(d)).and_then(|r| self.ifaces.get(r.egress));
                let Some(eg) = mtu else { return };
                (msg_type::PACKET_TOO_BIG, 0, u32::from(eg.mtu))
            }
            _ => return,
        };
        let Some(v) = self.ipv6.as_deref_mut() else { return };
        let (icmp, egress) = (&mut self.icmp, &mut self.egress);
        let hold = |hop, port, wait, f: &[u8]| egress.hold_v6(now, hop, port, wait, f).is_ok();
        v.error(now, &self.ifaces, kind, l3, || icmp.take_token(now), hold);
    }

    fn ipv6_decide<B: crate::buf::PacketBuf>(
        &mut self,
        now: Timestamp,
        at: super::Arrival,
        mut rx: Rx,
        u: UpperLayer,
        buf: &mut B,
        release: &mut Option<Release>,
    ) -> Result<super::Outcome, DropReason> {
        use super::Outcome;
        let super::Arrival { in_port, ifx, ing, l2, tags, .. } = at;
        let v6 = self.ipv6.as_deref_mut().ok_or(DropReason::Ipv6NotForwarded)?;
        if !v6.on(ifx) {
            return Err(DropReason::Ipv6NotForwarded);
        }
        // The chain was walked on arrival (`u`); the fixed header again.
        let (src, dst, hlim, total) = {
            let p = Ipv6Packet::new_checked(buf.data().get(l2..).unwrap_or(&[])).map_err(|_| DropReason::Ipv6Truncated)?;
            (p.src(), p.dst(), p.hop_limit(), ipv6::HEADER_LEN + usize::from(p.payload_len()))
        };
        if u.routing.is_some_and(|(kind, _)| kind == 0) {
            return Err(DropReason::Ipv6RoutingType0);
        }
        if src.is_multicast() || v6.is_own(src) {
            return Err(DropReason::Ipv6BadSource);
        }
        if v6.local(ifx, dst) {
            // (A frame from the CCL is never for this node.)
            if rx.via != Via::Port {
                return Err(DropReason::LocalUnhandled);
            }
            let l = v6.local_in(now, ifx, l2, u, buf.data());
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
        // A frame from the CCL, released or held while fenced (data ports
        // are fenced in `classify`).
        if self.cluster.as_deref().is_some_and(|cl| cl.fenced(now)) {
            return Err(DropReason::ClusterFenced);
        }
        if hlim <= 1 {
            return Err(DropReason::TtlExceeded);
        }
        let route = v6.lookup(dst).ok_or(DropReason::NoRoute)?;
        let eg = self.ifaces.get(route.egress).ok_or(DropReason::NoRoute)?;
        // Routers never fragment IPv6: packet too big (a fragment too).
        if total > usize::from(eg.mtu) {
            return Err(DropReason::FragNeeded);
        }
        // Fragments (RFC 8200 §4.5; docs/ipv6.md "Fragments"), as IPv4's
        // (`ipv4_decide`): to the fragment owner, into the reassembler,
        // then decided with their datagram's L4 header.
        // (Only a fragment carries a note: `rx.frag`, `Admit`.)
        let mut note = None;
        let mut piece = None;
        if u.fragment.is_some() {
            note = rx.frag;
            let (info, at) = {
                let p = Ipv6Packet::new_checked(buf.data().get(l2..).unwrap_or(&[])).map_err(|_| DropReason::Ipv6Truncated)?;
                crate::frag::ipv6_fragment(&p)?.ok_or(DropReason::Ipv6Malformed)?
            };
            let frag_len = (total - ipv6::HEADER_LEN).saturating_sub(at);
            // An atomic fragment (RFC 6946) is a whole packet.
            if !info.is_atomic() {
                // A first fragment carries the upper-layer header right
                // after the Fragment header (RFC 7112: the whole chain in
                // the first fragment; destination options between the two
                // are not taken), whole (`FragTinyFirst`, by the
                // reassembler).
                if info.offset == 0 && u.protocol != info.key.proto {
                    return Err(DropReason::Ipv6Fragment);
                }
                if usize::from(info.offset) + frag_len > crate::frag::MAX_DATAGRAM {
                    return Err(DropReason::FragTooBig);
                }
                piece = Some((info.offset, info.more, frag_len));
                if note.is_none() {
                    // A fragment received on a port goes to its fragment
                    // owner; one from the CCL is ours to handle (R10).
                    if let Some(fo) = self.cluster.as_deref().and_then(|cl| cl.other_fragment_owner(&info.key)) {
                        if rx.via == Via::Port {
                            let cl = self.cluster.as_deref_mut().ok_or(DropReason::ClusterOwnerUnknown)?;
                            let iface = u8::try_from(ifx.0).map_err(|_| DropReason::CclMalformed)?;
                            let mut link = Link { egress: &mut self.egress, ifaces: &self.ifaces };
                            let port = cl.wrap(now, &mut link, buf, Wrap::Forward, iface, fo, None)?;
                            self.frag.counters.to_fragment_owner += 1;
                            return Ok(Outcome::Forward(port));
                        }
                        rx.hinted = true;
                    }
                    let admitted = {
                        let p = Ipv6Packet::new_checked(buf.data().get(l2..).unwrap_or(&[])).map_err(|_| DropReason::Ipv6Truncated)?;
                        self.frag.admit(now, &info, p.payload().get(at..).unwrap_or(&[]), rx.hinted)?
                    };
                    match admitted {
                        Admit::Held => return Ok(Outcome::Consumed),
                        Admit::First(n) => {
                            *release = Release::new_v6(info.key, n, in_port, rx, buf.data(), l2);
                            note = Some(n);
                        }
                        Admit::Later(n) => note = Some(n),
                    }
                }
                // Several workers: the worker of the datagram's connection
                // decides it (this one collected it as the fragment worker).
                if let (Some(n), true) = (note, self.workers > 1) {
                    let w = self.datagram_worker(&n.tuple);
                    if w != self.worker {
                        self.handoff = Some(HandoffNote { rx: Rx { frag: Some(n), ..rx } });
                        return Ok(Outcome::Handoff(w));
                    }
                }
            }
        }
        let (tuple, l4, lookup_only) = match (note.as_ref(), piece) {
            (Some(n), Some((off, more, len))) => {
                let t = frag_track(&n.l4, off, len, more)?;
                (n.tuple, Some(*t.l4()), matches!(t, FragTrack::Lookup(_)))
            }
            _ => {
                let p = Ipv6Packet::new_checked(buf.data().get(l2..).unwrap_or(&[])).map_err(|_| DropReason::Ipv6Truncated)?;
                match transit6::transit(&p, u.protocol, u.offset)? {
                    Transit6::Flow(t, l4) => (t, Some(l4), false),
                    Transit6::Error(quoted) => (quoted, None, false),
                }
            }
        };
        // Cluster roles: who runs conntrack on this packet? (As for IPv4,
        // `ipv4_decide`; the SYN proxy and NAT are IPv4's only.)
        if let Some(cl) = self.cluster.as_deref_mut().filter(|_| !rx.force_own) {
            // A fragment at its fragment owner (from a port or the CCL) is
            // decided as if received on a port; one the fragment owner
            // sent here with a hint, as at the owner.
            let prx = if note.is_some() && !rx.hinted { Rx { via: Via::Port, ..rx } } else { rx };
            let arx = Rx { frag: note, ..rx };
            let v6 = self.ipv6.as_deref();
            let plan = match cl.plan_known(now, &self.flows.table, &tuple, l4.as_ref(), prx) {
                Some(plan) => plan,
                None if prx.via == Via::Port && v6.is_some_and(|v| !v.reverse_path_ok(&ing, ifx, src)) => {
                    Plan::Drop(DropReason::ReversePath)
                }
                None => cl.plan_new(now, &self.flows.table, &tuple, l4.as_ref()),
            };
            let mut link = Link { egress: &mut self.egress, ifaces: &self.ifaces };
            match plan {
                Plan::Own => {}
                Plan::TakeOver => {
                    cl.take_over(now, &mut link, &mut self.flows.table, &tuple)?;
                    self.settle_adopted(now);
                }
                Plan::Drop(r) => return Err(r),
                plan => {
                    // A relayed later fragment would carry no ports for
                    // the director to read: ask it instead.
                    let plan = match plan {
                        Plan::Relay(director) if note.is_some() => Plan::Query { director, elect: false },
                        plan => plan,
                    };
                    let outcome = cl.act(now, &mut link, in_port, ifx, arx, plan, &tuple, buf)?;
                    if matches!(plan, Plan::Forward(_)) && note.is_some() {
                        self.frag.counters.to_flow_owner += 1;
                    }
                    return Ok(outcome);
                }
            }
        }
        let xlate = match l4 {
            // A later piece of a TCP segment without ACK: its flow must
            // exist, nothing to track.
            Some(_) if lookup_only => {
                self.flows.table.lookup(&tuple).ok_or(DropReason::TcpNoFlow)?;
                None
            }
            Some(l4) => {
                // Anti-spoofing for a new flow (a cluster member's plan
                // checked it where the frame entered).
                let (v6, single) = (self.ipv6.as_deref(), self.cluster.is_none());
                let passes = || !single || rx.via != Via::Port || v6.is_none_or(|v| v.reverse_path_ok(&ing, ifx, src));
                let mut link = Link { egress: &mut self.egress, ifaces: &self.ifaces };
                let cl = self.cluster.as_deref_mut();
                match self.flows.track(cl, &mut link, now, &tuple, l4, total as u32, ifx, route.egress, passes) {
                    // Only the first fragment carries the TCP header.
                    Ok((xlate, _)) => xlate.filter(|_| piece.is_none_or(|(off, _, _)| off == 0)),
                    // The SYN proxy answers IPv4 SYNs only: an IPv6 SYN it
                    // would answer is refused as over the limit.
                    Err(DropReason::SynProxyCookie | DropReason::SynProxyPending) => {
                        return Err(DropReason::EmbryonicLimit);
                    }
                    Err(e) => return Err(e),
                }
            }
            // An error about a connection we pass, in either direction; a
            // quoted TCP segment goes back to its sender's sequence space.
            None => {
                let (h, dir) = self.flows.table.lookup(&tuple).ok_or(DropReason::NoFlow)?;
                if let Some(v) = self.ipv6.as_deref_mut() {
                    v.counters.errors_forwarded += 1;
                }
                let delta = self.cluster.as_deref().map_or(0, |cl| cl.quoted_delta(h));
                let server = self.flows.table.proxy_delta(h).unwrap_or(0);
                (tuple.proto == ip_proto::TCP && (delta != 0 || server != 0))
                    .then_some(Xlate { dir, delta: SeqDelta(delta), quoted: true, server: SeqDelta(server) })
            }
        };
        let v6 = self.ipv6.as_deref_mut().ok_or(DropReason::Ipv6NotForwarded)?;
        let mac = v6.resolve(now, eg, route.egress, route.next_hop)?;
        let l2 = super::egress::retag(buf, tags, l2, eg.vlan)?;
        if let Some(x) = xlate {
            super::egress::apply_xlate6(l2, u.offset, x, buf)?;
        }
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
