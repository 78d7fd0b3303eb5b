//! The fast path: a packet of an established flow that needs nothing but
//! the flow check and an L3 rewrite, handled in one straight pass.
//!
//! Eligible: an untagged IPv4 frame to the receiving interface's MAC (or
//! unwrapped from a CCL `ForwardedPacket` at the owner) with a 20-byte
//! header, a good checksum, not a fragment, and a unicast source that is
//! neither martian nor one of ours. A CCL datagram to this node's CCL
//! address then goes straight to `ccl_in`, as the general path's
//! local-delivery branch would send it. Otherwise: TTL > 1; a destination
//! that is neither martian nor one of ours; TCP without SYN, or UDP; a route out of an untagged interface
//! whose next hop has a fresh ARP entry (or a static neighbour); in
//! single-node mode, a live flow in the table. Everything else — and every
//! packet that fails a check, so that the drop reason is the general
//! path's — returns `None` *before anything is changed* and goes through
//! `Pipeline::classify`.
//!
//! Single-node mode: the one state change, `ConnTable::track_existing`, is
//! the same code the general path's `track` runs for an existing flow, and
//! it declines when there is no live flow (having removed a dead one, as
//! `track` would have). Cluster
//! mode: once the checks pass, the fast path makes the general path's own
//! decision calls (`cluster_plan`, then `cluster_act` or `track` and
//! `apply_xlate`) with the same arguments. So for every packet the fast
//! path either does exactly what the general path would do, or nothing.
//! `tests/fastpath_equivalence.rs` checks that on random traffic against a
//! pipeline with the fast path off (`Pipeline::set_fast_path`), for a
//! single node and for a three-node cluster.
//!
//! Why it exists: the general path runs ~1,750 instructions per
//! established packet (cluster, fragment, VLAN and ICMP branches, a 40-byte
//! tuple and L4 summary moved through several enums); this one about 600
//! (docs/benchmarks.md, "Where the time goes").

use crate::buf::PacketBuf;
use crate::clusterpath::{Plan, Rx, Via};
use crate::conntrack::{tcp_flags, L4Info};
use crate::pipeline::{martian_source, tcp_seg, Outcome, Pipeline};
use crate::route::IfIndex;
use crate::types::{ip_proto, FiveTuple, PortId, Timestamp};
use crate::wire::ethernet::ethertype;
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::tcp::TcpPacket;
use crate::wire::udp::UdpPacket;
use std::net::{IpAddr, Ipv4Addr};

const ETH_LEN: usize = 14;

/// `Pipeline::fresh_neighbor`'s last answer.
#[derive(Copy, Clone, Debug)]
pub(crate) struct NextHopMemo {
    ip: Ipv4Addr,
    mac: [u8; 6],
    /// `None`: a static neighbour (never expires).
    expires: Option<Timestamp>,
    generation: u64,
}

/// Tuple and L4 summary of an eligible TCP (no SYN) or UDP datagram, as
/// `pipeline::transit_l4` builds them; `None` for anything else.
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

impl Pipeline {
    /// Handle a frame received on a port if it is eligible (module docs);
    /// `None`: nothing was changed, run the general path.
    #[inline]
    pub(crate) fn fast_forward<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        in_port: PortId,
        buf: &mut B,
    ) -> Option<Outcome> {
        let ifx = self.untagged_iface.get(usize::from(in_port.0)).copied().flatten()?;
        let ing = *self.ifaces.get(usize::from(ifx))?;
        if buf.data().get(0..6)? != ing.mac {
            return None;
        }
        self.fast_ipv4(now, in_port, IfIndex(ifx), Rx::PORT, buf)
    }

    /// The IPv4 part of the fast path, for a frame received on a port (its
    /// L2 destination checked) or unwrapped from a `ForwardedPacket` at the
    /// owner (`rx` says which, as for `classify`). In cluster mode the
    /// decision is the general path's own calls (`cluster_plan`,
    /// `cluster_act`, `track`, `apply_xlate`) on the same inputs: the fast
    /// path only replaces the parsing and validation in front of them, so
    /// what it changes it changes exactly as the general path would.
    #[inline]
    pub(crate) fn fast_ipv4<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        in_port: PortId,
        ifx: IfIndex,
        rx: Rx,
        buf: &mut B,
    ) -> Option<Outcome> {
        if !self.fast_path || rx.force_own || rx.hinted || rx.frag.is_some() {
            return None;
        }
        // (An unknown ingress interface in a forwarded packet is the
        // general path's `CclMalformed`.)
        let ing = *self.ifaces.get(usize::from(ifx.0))?;
        let d = buf.data();
        if d.get(12..14)? != ethertype::IPV4.to_be_bytes() {
            return None;
        }
        let ip = Ipv4Packet::new_checked(d.get(ETH_LEN..)?).ok()?;
        if ip.header_len() != ipv4::MIN_HEADER_LEN || ip.is_fragment() || !ip.verify_checksum() {
            return None;
        }
        let (src, dst) = (ip.src(), ip.dst());
        if !self.plain_unicast(src) {
            return None;
        }
        // A CCL datagram to this node's CCL address, received on a port:
        // where the general path's local-delivery branch would take it.
        if rx.via == Via::Port && ing.addr == dst && self.is_ccl_datagram(ifx, &ip) {
            self.counters.fast_path += 1;
            return Some(self.ccl_in(now, in_port, buf).unwrap_or_else(Outcome::Drop));
        }
        if ip.ttl() <= 1 || !self.plain_unicast(dst) {
            return None;
        }
        let route = self.routes.lookup(dst)?;
        let eg = *self.ifaces.get(usize::from(route.iface.0))?;
        if eg.vlan.is_some() {
            return None;
        }
        let mac = self.fresh_neighbor(now, route.next_hop)?;
        let (tuple, l4) = fast_l4(&ip, src, dst)?;
        let len = u32::from(ip.total_len());
        if self.cluster.is_some() {
            // A frame from the CCL was counted with its datagram.
            if rx.via == Via::Port {
                self.counters.fast_path += 1;
            }
            match self.cluster_plan(now, &tuple, Some(&l4), rx) {
                Plan::Own => {}
                Plan::Drop(r) => return Some(Outcome::Drop(r)),
                plan => {
                    return Some(self.cluster_act(now, in_port, ifx, rx, plan, &tuple, buf).unwrap_or_else(Outcome::Drop))
                }
            }
            match self.track(now, &tuple, l4, len, ifx, route.iface) {
                Ok(None) => {}
                Ok(Some(x)) => {
                    if let Err(r) = self.apply_xlate(ETH_LEN, x, buf) {
                        return Some(Outcome::Drop(r));
                    }
                }
                Err(r) => return Some(Outcome::Drop(r)),
            }
        } else {
            let tracked = self.conntrack.track_existing(now, &tuple, &l4, len)?;
            self.counters.fast_path += 1;
            if let Err(r) = tracked {
                return Some(Outcome::Drop(r));
            }
        }
        let d = buf.data_mut();
        if let Some(l3) = d.get_mut(ETH_LEN..) {
            Ipv4Packet::new_unchecked(l3).decrement_ttl();
        }
        if let Some(h) = d.get_mut(0..12) {
            h[..6].copy_from_slice(&mac);
            h[6..].copy_from_slice(&eg.mac);
        }
        Some(Outcome::Forward(eg.port))
    }
}

impl Pipeline {
    /// Not martian as source or destination, not multicast or broadcast,
    /// not one of our addresses or directed broadcasts.
    #[inline(always)]
    fn plain_unicast(&self, a: Ipv4Addr) -> bool {
        // `martian_source` covers 0/8, 127/8 and 224/3 (multicast,
        // reserved, limited broadcast): a superset of the destinations the
        // general path refuses or keeps.
        !(martian_source(a) || self.own_addrs.contains(&a))
    }

    /// The next hop's MAC if it is known without any ARP action now (a
    /// static neighbour, or a resolved entry that has not expired); the
    /// general path's `neighbor` answers the same without a change then.
    /// The last answer is memoized until the ARP cache changes
    /// (`ArpCache::generation`), the entry expires or another next hop is
    /// asked for.
    #[inline(always)]
    fn fresh_neighbor(&mut self, now: Timestamp, ip: Ipv4Addr) -> Option<[u8; 6]> {
        let generation = self.arp.generation();
        if let Some(m) = self.nh_memo {
            if m.ip == ip && m.generation == generation && m.expires.is_none_or(|e| now < e) {
                return Some(m.mac);
            }
        }
        let (mac, expires) = match self.static_neighbor(ip) {
            Some(mac) => (mac, None),
            None => {
                let (mac, e) = self.arp.fresh(now, ip)?;
                (mac, Some(e))
            }
        };
        self.nh_memo = Some(NextHopMemo { ip, mac, expires, generation });
        Some(mac)
    }

    /// Turn the fast path on or off (on by default). Off, every packet
    /// takes the general path: for the equivalence test and for comparing
    /// the two in benchmarks.
    pub fn set_fast_path(&mut self, on: bool) {
        self.fast_path = on;
    }
}
