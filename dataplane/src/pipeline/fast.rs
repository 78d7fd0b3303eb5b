//! The fast path: a packet of an established flow that needs nothing but
//! the flow check and an L3 rewrite, handled in one straight pass.
//!
//! Eligible: an untagged IPv4 frame to the receiving interface's MAC (or
//! unwrapped from a CCL `ForwardedPacket` at the owner) with a 20-byte
//! header, a good checksum, not a fragment, and a unicast source that is
//! neither martian nor one of ours. A CCL datagram to this node's CCL
//! address then goes straight to the cluster stage's `ccl_in`
//! (`Fast::Ccl`), as the general path's local-delivery branch would send
//! it. Otherwise: TTL > 1; a destination that is neither martian nor one of
//! ours; TCP without SYN, or UDP; a route out of an untagged interface
//! whose next hop has a fresh ARP entry (or a static neighbour); in
//! single-node mode, a live flow in the table. Everything else — and every
//! packet that fails a check, so that the drop reason is the general
//! path's — returns `None` *before anything is changed* and goes through
//! the general path (`Pipeline::classify`).
//!
//! Single-node mode: the one state change, `ConnTable::track_existing`, is
//! the same code the general path's `track` runs for an existing flow, and
//! it declines when there is no live flow (having removed a dead one, as
//! `track` would have). Cluster mode: once the checks pass, the fast path
//! makes the general path's own decision calls (`ClusterPath::plan`, then
//! `ClusterPath::act` or `Flows::track` and the egress rewrite's
//! `apply_xlate`) with the same arguments. So for every packet the fast
//! path either does exactly what the general path would do, or nothing.
//! (A client segment conntrack refuses while the SYN proxy connects,
//! `syn-proxy-pending`, is held as the general path holds it,
//! `SynProxy::hold_early`; the NAT fast path declines it instead.)
//! `tests/fastpath_equivalence.rs` checks that on random traffic against a
//! pipeline with the fast path off (`Pipeline::set_fast_path`), for a
//! single node and for a three-node cluster.
//!
//! NAT (single node): `nat_forward` takes an established translated flow
//! — its conntrack mark names its PAT or dynamic-NAT xlate — and return
//! traffic to an xlate's mapped endpoint, routed and tracked on the real
//! destination, with the xlate touched and counted as the general path's
//! NAT steps do; `NatPath::fast_in` / `fast_out` decline (nothing
//! changed) for static rules and flows that may need a new translation.
//! `tests/nat_workers.rs` compares one pipeline with the fast path on and
//! off on random NAT traffic, frame by frame. A cluster member
//! (`nat_member`) takes the packets of flows it owns, with the cluster's
//! conntrack (`Flows::track`): outbound ones (the binding kept in the
//! flow's records) and return traffic to a mapped endpoint whose xlate it
//! holds (received, or handed over by the member it landed on, N5).
//! `tests/fastpath_cluster_equivalence.rs` runs its random cluster traffic
//! with PAT on every member too.
//!
//! Why it exists: the general path runs ~1,750 instructions per
//! established packet (cluster, fragment, VLAN and ICMP branches, a 40-byte
//! tuple and L4 summary moved through several enums); this one about 600
//! (docs/benchmarks.md, "Where the time goes").

use super::cluster::plan::Plan;
use super::cluster::{ClusterPath, Link};
use super::context::{Outcome, Rx, Via, Xlate};
use super::egress::{apply_xlate, Egress};
use super::flows::Flows;
use super::iface::Interfaces;
use super::ipv4::{martian_source, reverse_path_ok, tcp_seg};
use super::nat::{FastNat, NatPath};
use crate::buf::PacketBuf;
use crate::conntrack::{tcp_flags, L4Info, Splice};
use crate::route::{IfIndex, RouteTable};
use crate::types::{ip_proto, Direction, DropReason, FiveTuple, PortId, Timestamp};
use crate::wire::ethernet::{self, ethertype, EthernetFrame, HEADER_LEN};
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::tcp::TcpPacket;
use crate::wire::rewrite::{rewrite_transport, Endpoint};
use crate::wire::udp::UdpPacket;
use std::net::{IpAddr, Ipv4Addr};

/// What the fast path did with a frame it took.
pub(crate) enum Fast {
    Done(Outcome),
    /// A CCL datagram to our CCL address: the cluster stage's to open.
    Ccl,
}

/// The stages the fast path reads and updates, lent by `Pipeline`.
pub(crate) struct Parts<'a> {
    pub ifaces: &'a Interfaces,
    pub routes: &'a RouteTable,
    pub egress: &'a mut Egress,
    pub flows: &'a mut Flows,
    pub cluster: Option<&'a mut ClusterPath>,
    pub nat: Option<&'a mut NatPath>,
}

/// The fast path's switch and counter.
pub(crate) struct FastPath {
    /// On by default; off for the equivalence tests and benchmarks.
    pub enabled: bool,
    /// Frames `process` was given that the fast path handled (also in
    /// `forwarded`, `consumed` or `drops`; a CCL datagram counts once,
    /// whatever it carried).
    pub count: u64,
}

/// Tuple and L4 summary of an eligible TCP (no SYN) or UDP datagram, as
/// `ipv4::transit_l4` builds them; `None` for anything else.
#[inline(always)]
fn fast_l4(ip: &Ipv4Packet<&[u8]>, src: Ipv4Addr, dst: Ipv4Addr) -> Option<(FiveTuple, L4Info)> {
    let proto = ip.protocol();
    let payload = ip.payload();
    let (sp, dp, l4) = match proto {
        ip_proto::TCP => {
            let t = TcpPacket::new_checked(payload).ok()?;
            if t.flags() & tcp_flags::SYN != 0 {
                return None;
            }
            (t.src_port(), t.dst_port(), L4Info::Tcp(tcp_seg(&t)))
        }
        ip_proto::UDP => {
            let u = UdpPacket::new_checked(payload).ok()?;
            (u.src_port(), u.dst_port(), L4Info::Udp)
        }
        _ => return None,
    };
    Some((FiveTuple { src: IpAddr::V4(src), dst: IpAddr::V4(dst), proto, src_port: sp, dst_port: dp }, l4))
}

/// Not martian as source or destination, not multicast or broadcast, not
/// one of our addresses or directed broadcasts.
#[inline(always)]
fn plain_unicast(ifaces: &Interfaces, a: Ipv4Addr) -> bool {
    // `martian_source` covers 0/8, 127/8 and 224/3 (multicast, reserved,
    // limited broadcast): a superset of the destinations the general path
    // refuses or keeps.
    !(martian_source(a) || ifaces.is_own(a))
}

/// `Plan::TakeOver` in the fast path: the general path's call, kept out of
/// line (once per connection taken over, R11).
#[cold]
#[inline(never)]
fn take_over(
    cl: &mut ClusterPath,
    now: Timestamp,
    link: &mut Link<'_>,
    flows: &mut Flows,
    tuple: &FiveTuple,
) -> Result<(), crate::types::DropReason> {
    cl.take_over(now, link, &mut flows.table, tuple)
}

impl FastPath {
    pub fn new() -> Self {
        FastPath { enabled: true, count: 0 }
    }

    /// Handle a frame received on a port if it is eligible (module docs);
    /// `None`: nothing was changed, run the general path.
    #[inline]
    pub fn forward<B: PacketBuf>(
        &mut self,
        p: Parts<'_>,
        now: Timestamp,
        in_port: PortId,
        buf: &mut B,
    ) -> Option<Fast> {
        let (ifx, ing) = p.ifaces.untagged(in_port)?;
        self.checked(p, now, in_port, ifx, Rx::PORT, Some(ing.mac), buf)
    }

    /// The IPv4 part of the fast path, for a frame received on a port (its
    /// L2 destination checked) or unwrapped from a `ForwardedPacket` at the
    /// owner (`rx` says which, as for `classify`). In cluster mode the
    /// decision is the general path's own calls on the same inputs: the
    /// fast path only replaces the parsing and validation in front of them,
    /// so what it changes it changes exactly as the general path would.
    #[inline]
    pub fn ipv4<B: PacketBuf>(
        &mut self,
        p: Parts<'_>,
        now: Timestamp,
        in_port: PortId,
        ifx: IfIndex,
        rx: Rx,
        buf: &mut B,
    ) -> Option<Fast> {
        self.checked(p, now, in_port, ifx, rx, None, buf)
    }

    /// `ipv4`, with the frame's destination MAC checked against `dst_mac`
    /// (a frame received on a port) or not (unwrapped from the CCL).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn checked<B: PacketBuf>(
        &mut self,
        p: Parts<'_>,
        now: Timestamp,
        in_port: PortId,
        ifx: IfIndex,
        rx: Rx,
        dst_mac: Option<[u8; 6]>,
        buf: &mut B,
    ) -> Option<Fast> {
        if !self.enabled || rx.force_own || rx.hinted || rx.frag.is_some() {
            return None;
        }
        // (An unknown ingress interface in a forwarded packet is the
        // general path's `CclMalformed`.)
        let ing = p.ifaces.get(ifx)?;
        let eth = EthernetFrame::new_checked(buf.data()).ok()?;
        if dst_mac.is_some_and(|m| eth.dst() != m) || eth.outer_ethertype() != ethertype::IPV4 {
            return None;
        }
        let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
        if ip.header_len() != ipv4::MIN_HEADER_LEN || ip.is_fragment() || !ip.verify_checksum() {
            return None;
        }
        let (src, dst) = (ip.src(), ip.dst());
        if !plain_unicast(p.ifaces, src) {
            return None;
        }
        let Parts { ifaces, routes, egress, flows, cluster, nat } = p;
        // A CCL datagram to this node's CCL address, received on a port:
        // where the general path's local-delivery branch would take it.
        if rx.via == Via::Port && ing.addr == dst && cluster.as_deref().is_some_and(|cl| cl.is_ccl_datagram(ifx, &ip)) {
            self.count += 1;
            return Some(Fast::Ccl);
        }
        if ip.ttl() <= 1 || !plain_unicast(ifaces, dst) {
            return None;
        }
        if let Some(n) = nat {
            // A cluster member: the packets of its translated flows.
            if let Some(cl) = cluster {
                let (mut tuple, l4) = fast_l4(&ip, src, dst)?;
                let total = ip.total_len();
                let o = nat_member(cl, n, Parts2 { ifaces, routes, egress, flows }, now, (in_port, ifx, ing.mtu, rx), (&mut tuple, &l4, total), buf)?;
                // A frame from the CCL was counted with its datagram.
                if rx.via == Via::Port {
                    self.count += 1;
                }
                return Some(Fast::Done(o));
            }
            let (mut tuple, l4) = fast_l4(&ip, src, dst)?;
            let total = ip.total_len();
            let o = nat_forward(n, ifaces, routes, egress, flows, now, (ifx, ing.mtu), (&mut tuple, &l4, total), buf)?;
            self.count += 1;
            return Some(Fast::Done(o));
        }
        let route = routes.lookup(dst)?;
        let eg = ifaces.get(route.iface)?;
        // A tagged egress, or a datagram to split (or refuse): the general
        // path's.
        if eg.vlan.is_some() || ip.total_len() > eg.mtu.min(ing.mtu) {
            return None;
        }
        let mac = egress.fresh_neighbor(now, route.next_hop)?;
        let (tuple, l4) = fast_l4(&ip, src, dst)?;
        let len = u32::from(ip.total_len());
        match cluster {
            Some(cl) => {
                if cl.fenced(now) {
                    return None; // the general path drops it (`ClusterFenced`)
                }
                // A frame from the CCL was counted with its datagram.
                if rx.via == Via::Port {
                    self.count += 1;
                }
                let plan = match cl.plan_known(now, &flows.table, &tuple, Some(&l4), rx) {
                    Some(plan) => plan,
                    None if rx.via == Via::Port && spoofed_source(ifaces, routes, ifx, src) => Plan::Drop(DropReason::ReversePath),
                    // A SYN-proxy cookie's ACK: rewritten into a SYN by
                    // the general path.
                    None if flows.proxy.valid(now, &tuple, &l4) => return None,
                    None => cl.plan_new(now, &flows.table, &tuple, Some(&l4)),
                };
                let mut link = Link { egress, ifaces };
                match plan {
                    Plan::Own => {}
                    Plan::TakeOver => {
                        if let Err(r) = take_over(cl, now, &mut link, flows, &tuple) {
                            return Some(Fast::Done(Outcome::Drop(r)));
                        }
                    }
                    Plan::Drop(r) => return Some(Fast::Done(Outcome::Drop(r))),
                    plan => {
                        let o = cl.act(now, &mut link, in_port, ifx, rx, plan, &tuple, buf);
                        return Some(Fast::Done(o.unwrap_or_else(Outcome::Drop)));
                    }
                }
                match flows.track(Some(cl), &mut link, now, &tuple, l4, len, ifx, route.iface, || true) {
                    Ok((None, _)) => {}
                    Ok((Some(x), _)) => {
                        if let Err(r) = apply_xlate(HEADER_LEN, x, buf) {
                            return Some(Fast::Done(Outcome::Drop(r)));
                        }
                    }
                    // The client's request while the SYN proxy connects:
                    // held for the splice, as by the general path.
                    Err(DropReason::SynProxyPending) => {
                        return Some(Fast::Done(flows.proxy.hold_early(now, &tuple, in_port, rx, buf.data())));
                    }
                    Err(r) => return Some(Fast::Done(Outcome::Drop(r))),
                }
            }
            None => {
                let tracked = flows.table.track_existing(now, &tuple, &l4, len)?;
                self.count += 1;
                match tracked {
                    Err(DropReason::SynProxyPending) => {
                        return Some(Fast::Done(flows.proxy.hold_early(now, &tuple, in_port, rx, buf.data())));
                    }
                    Err(r) => return Some(Fast::Done(Outcome::Drop(r))),
                    // A connection the SYN proxy spliced.
                    Ok(t) if t.splice != Splice::None => {
                        if let Err(r) = spliced(&t, buf) {
                            return Some(Fast::Done(Outcome::Drop(r)));
                        }
                    }
                    Ok(_) => {}
                }
            }
        }
        Some(Fast::Done(out(buf, mac, eg.mac, eg.port)))
    }
}

/// The last step of a forwarded frame: TTL, MAC addresses, the port out.
#[inline(always)]
fn out<B: PacketBuf>(buf: &mut B, to: [u8; 6], from: [u8; 6], port: PortId) -> Outcome {
    out_frame(buf.data_mut(), to, from, port)
}

/// `out` on the frame's bytes.
#[inline(always)]
fn out_frame(d: &mut [u8], to: [u8; 6], from: [u8; 6], port: PortId) -> Outcome {
    if let Some(l3) = d.get_mut(HEADER_LEN..) {
        Ipv4Packet::new_unchecked(l3).decrement_ttl();
    }
    ethernet::write_macs(d, to, from);
    Outcome::Forward(port)
}

/// The fast path of a single node with NAT, from the route on (the frame
/// passed the checks in front of it): what the general path's NAT steps
/// would do when that is simple (`NatPath::fast_in`, `fast_out`) — return traffic
/// translated back, then routed and tracked on its real destination, as
/// after `inbound`; a source translated only for a packet conntrack
/// passed, as by `outbound`. `None`: nothing changed, the general path's.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn nat_forward<B: PacketBuf>(
    n: &mut NatPath,
    ifaces: &Interfaces,
    routes: &RouteTable,
    egress: &mut Egress,
    flows: &mut Flows,
    now: Timestamp,
    (ifx, in_mtu): (IfIndex, u16),
    (tuple, l4, total): (&mut FiveTuple, &L4Info, u16),
    buf: &mut B,
) -> Option<Outcome> {
    let inbound = to_real(n, ifaces, ifx, tuple)?;
    let (_, eg, mac) = resolved(ifaces, routes, egress, now, tuple.dst, (total, in_mtu))?;
    let (len, proto) = (u32::from(total), tuple.proto);
    let (what, tracked) = match inbound {
        Some((id, real, port)) => (FastNat::In(id, real, port), flows.table.track_existing(now, tuple, l4, len)?),
        None => {
            // One lookup: the flow's mark decides before it is updated.
            let (found, mark) = flows.table.find_existing(tuple, l4)?;
            let what = n.fast_out(ifx, tuple, mark)?;
            (what, flows.table.track_found(found, now, l4, len)?)
        }
    };
    let t = match tracked {
        Ok(t) => t,
        // The client's request while the SYN proxy connects: the general
        // path holds it (nothing changed yet).
        Err(DropReason::SynProxyPending) => return None,
        // Refused: dropped translated back, as by the general path (whose
        // NAT inbound step comes first).
        Err(r) => {
            if let FastNat::In(id, real, port) = what {
                refused_in(n, now, id, real, port, buf.data_mut().get_mut(HEADER_LEN..).unwrap_or(&mut []));
            }
            return Some(Outcome::Drop(r));
        }
    };
    // One call site: `rewrite_transport` is inlined once.
    let rewrite = match what {
        FastNat::In(id, real, port) => {
            n.fast_done(now, id, true);
            Some((Endpoint::Destination, real, port))
        }
        FastNat::Out(id, mapped, port) => {
            n.fast_done(now, id, false);
            Some((Endpoint::Source, mapped, port))
        }
        FastNat::None => None,
    };
    let d = buf.data_mut();
    if let Some((ep, addr, port)) = rewrite {
        let l3 = d.get_mut(HEADER_LEN..).unwrap_or(&mut []);
        if rewrite_transport(l3, ipv4::MIN_HEADER_LEN, proto, ep, addr, port).is_err() {
            return Some(Outcome::Drop(DropReason::L4Truncated));
        }
    }
    if t.splice == Splice::None {
        return Some(out_frame(d, mac, eg.mac, eg.port));
    }
    if let Err(r) = spliced(&t, buf) {
        return Some(Outcome::Drop(r));
    }
    Some(out(buf, mac, eg.mac, eg.port))
}

/// `NatPath::fast_in`, and return traffic's tuple turned to its real
/// destination; `None` (decline) also for a real address that is not
/// plain unicast.
#[inline(always)]
fn to_real(
    n: &NatPath,
    ifaces: &Interfaces,
    ifx: IfIndex,
    tuple: &mut FiveTuple,
) -> Option<Option<(crate::nat::XlateId, Ipv4Addr, Option<u16>)>> {
    let inbound = n.fast_in(ifx, tuple)?;
    if let Some((_, real, port)) = inbound {
        if !plain_unicast(ifaces, real) {
            return None;
        }
        tuple.dst = IpAddr::V4(real);
        tuple.dst_port = port.unwrap_or(tuple.dst_port);
    }
    Some(inbound)
}

/// The stages `nat_member` reads and updates.
struct Parts2<'a> {
    ifaces: &'a Interfaces,
    routes: &'a RouteTable,
    egress: &'a mut Egress,
    flows: &'a mut Flows,
}

/// The fast path of a cluster member with NAT, from the checks on: a
/// packet of a flow this member owns (the cluster's plan for a local flow
/// is `Own`, and no multi-session hand-off to the control node applies to
/// it: `to_control` asks for no flow) —
/// - outbound, translated as its mark says (`NatPath::fast_out`: an
///   xlate, or none and no rule), the binding in the flow's records;
/// - return traffic to a mapped endpoint this member's xlate holds
///   (`NatPath::fast_in`), received on a port or handed to it by another
///   member (N5), translated back and tracked on its real destination —
///
/// as the general path does: conntrack with the cluster's state updates
/// (`Flows::track`), the NAT stage's flows-ended pass, the translation
/// touched and counted, the address rewritten, the owner's sequence
/// translation, TTL and MACs. `None` (nothing changed): a datagram to a
/// mapped endpoint without an xlate here (another member's block: N5), a
/// flow not owned here, one that may need a translation made, a fenced
/// member — the general path's.
#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn nat_member<B: PacketBuf>(
    cl: &mut ClusterPath,
    n: &mut NatPath,
    p: Parts2<'_>,
    now: Timestamp,
    (in_port, ifx, in_mtu, rx): (PortId, IfIndex, u16, Rx),
    (tuple, l4, total): (&mut FiveTuple, &L4Info, u16),
    buf: &mut B,
) -> Option<Outcome> {
    let Parts2 { ifaces, routes, egress, flows } = p;
    if cl.fenced(now) {
        return None;
    }
    // An xlate found here is in a block this member holds (an xlate lives
    // only on its block's holder: `NatPath::end_lost` removes those of the
    // blocks given up at the member change that gives them up), so N5's
    // hand-off to another member (`holder_elsewhere`) does not apply.
    let inbound = to_real(n, ifaces, ifx, tuple)?;
    let tuple = &*tuple;
    let (route, eg, mac) = resolved(ifaces, routes, egress, now, tuple.dst, (total, in_mtu))?;
    let (_, mark) = flows.table.find_existing(tuple, l4)?;
    let what = match inbound {
        Some((id, real, port)) => FastNat::In(id, real, port),
        None => n.fast_out(ifx, tuple, mark)?,
    };
    let mut link = Link { egress, ifaces };
    let (x, tracked) = match flows.track(Some(&mut *cl), &mut link, now, tuple, *l4, u32::from(total), ifx, route.iface, || true) {
        Ok(v) => v,
        Err(DropReason::SynProxyPending) => return Some(flows.proxy.hold_early(now, tuple, in_port, rx, buf.data())),
        Err(r) => {
            // Refused: dropped translated back, as by the general path
            // (whose NAT inbound step comes first).
            if let FastNat::In(id, real, port) = what {
                refused_in(n, now, id, real, port, buf.data_mut().get_mut(HEADER_LEN..).unwrap_or(&mut []));
            }
            return Some(Outcome::Drop(r));
        }
    };
    n.flows_ended(now, &mut flows.table);
    // One call site: `rewrite_transport` is inlined once.
    let rewrite = match what {
        FastNat::Out(id, mapped, port) => {
            n.fast_done(now, id, false);
            if let Some(b) = n.binding(flows.table.mark(tracked.handle)) {
                let orig = if tracked.dir == Direction::Original { *tuple } else { tuple.reversed() };
                cl.set_binding(tracked.handle, &orig, b);
            }
            Some((Endpoint::Source, mapped, port))
        }
        FastNat::In(id, real, port) => {
            n.fast_done(now, id, true);
            Some((Endpoint::Destination, real, port))
        }
        FastNat::None => None,
    };
    if let Some((ep, addr, port)) = rewrite {
        let l3 = buf.data_mut().get_mut(HEADER_LEN..).unwrap_or(&mut []);
        if rewrite_transport(l3, ipv4::MIN_HEADER_LEN, tuple.proto, ep, addr, port).is_err() {
            return Some(Outcome::Drop(DropReason::L4Truncated));
        }
    }
    if let Some(x) = x {
        if let Err(r) = apply_xlate(HEADER_LEN, x, buf) {
            return Some(Outcome::Drop(r));
        }
    }
    Some(out(buf, mac, eg.mac, eg.port))
}

/// The route of a datagram to `dst` of `total` bytes (received on an
/// interface of MTU `in_mtu`) that the fast path can send: out of an
/// untagged interface that carries it whole, to a next hop with a fresh
/// ARP entry (or a static neighbour) — the route, the egress interface,
/// the next hop's MAC; `None` for anything else (the general path's).
#[inline(always)]
fn resolved(
    ifaces: &Interfaces,
    routes: &RouteTable,
    egress: &mut Egress,
    now: Timestamp,
    dst: IpAddr,
    (total, in_mtu): (u16, u16),
) -> Option<(crate::route::RouteResult, super::iface::Iface, [u8; 6])> {
    let IpAddr::V4(dst) = dst else { return None };
    let route = routes.lookup(dst)?;
    let eg = ifaces.get(route.iface)?;
    if eg.vlan.is_some() || total > eg.mtu.min(in_mtu) {
        return None;
    }
    let mac = egress.fresh_neighbor(now, route.next_hop)?;
    Some((route, eg, mac))
}

/// Return traffic conntrack refused: translated back and touched, as by
/// the general path's NAT inbound step, before it is dropped. (Out of
/// line: `rewrite_transport` stays inlined in `nat_forward`.)
#[cold]
#[inline(never)]
fn refused_in(n: &mut NatPath, now: Timestamp, id: crate::nat::XlateId, real: Ipv4Addr, port: Option<u16>, l3: &mut [u8]) {
    n.fast_done(now, id, true);
    let _ = crate::nat::rewrite(l3, Endpoint::Destination, real, port);
}

/// A single node's packet of a connection the SYN proxy spliced: its
/// server-side sequence translation (nothing for any other packet).
#[inline(always)]
fn spliced<B: PacketBuf>(t: &crate::conntrack::Tracked, buf: &mut B) -> Result<(), DropReason> {
    match Xlate::of(t.dir, 0, t.splice) {
        Some(x) => apply_xlate(HEADER_LEN, x, buf),
        None => Ok(()),
    }
}

/// Does `src`, received on `ifx`, fail the interface's anti-spoofing
/// check? Out of line: asked only of a connection's first packets.
#[cold]
#[inline(never)]
pub(crate) fn spoofed_source(ifaces: &Interfaces, routes: &RouteTable, ifx: IfIndex, src: Ipv4Addr) -> bool {
    ifaces.get(ifx).is_some_and(|i| !reverse_path_ok(routes, &i, ifx, src))
}
