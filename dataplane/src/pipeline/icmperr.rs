//! The ICMP errors this node originates (RFC 792; RFC 1812 §4.3; RFC 1122
//! §3.2.2), so that traceroute shows each node, path-MTU discovery works
//! through the cluster (RFC 1191) and an unroutable destination is told
//! so:
//!
//! | dropped as | error sent |
//! |---|---|
//! | `ttl-exceeded` | time exceeded in transit (11/0) |
//! | `no-route` | net unreachable (3/0) |
//! | `frag-needed` (DF, larger than the egress MTU) | fragmentation needed (3/4) with the egress MTU |
//! | `local-unhandled`, UDP to an interface address | port unreachable (3/3) |
//! | `local-unhandled`, another protocol than ICMP, TCP, UDP to an interface address | protocol unreachable (3/2) |
//! | `acl-denied`, only with `IcmpErrorConfig::admin_prohibited` | administratively prohibited (3/13) |
//!
//! A denied connection gets nothing by default, as firewalls do; TCP to the
//! node's own address gets nothing either (no service, no RST).
//!
//! Never sent (RFC 1122 §3.2.2, RFC 1812 §4.3.2.7), counted in `not_sent`:
//! about an ICMP error (any type that is not a query or reply), a datagram
//! to a broadcast or multicast address or received as a link-layer
//! broadcast, a non-first fragment, a datagram whose source is not one
//! unicast host (0/8, 127/8, multicast, class E, broadcast, one of this
//! node's addresses or directed broadcasts). Rate: a token bucket per
//! worker (`rate` per second, `burst` deep); an error without a token is
//! counted in `suppressed`, never queued.
//!
//! The error goes back to the offending datagram's source along this
//! node's route to it, from the address of the interface it leaves on
//! (RFC 1812 §4.3.2.4: in a cluster, the node that decided the datagram's
//! fate, from its own address), quoting the datagram as received — IP
//! header, options and as much of the payload as keeps the error within
//! 576 bytes (RFC 1812 §4.3.2.3). If the next hop's MAC is not known the
//! ARP request goes out and the error is not sent (`no_neighbor`).
//!
//! Invariants: nothing allocates after `IcmpErrors::new` (a fixed queue of
//! `QUEUE` frames, drained by `drain_generated`); an error is only ever
//! built from a frame the pipeline is dropping, which is unchanged.

use super::iface::Interfaces;
use super::ipv4::martian_source;
use crate::stats::{Stats, Visitor};
use crate::types::{PortId, Timestamp};
use crate::wire::ethernet::{self, ethertype};
use crate::wire::icmp::{self, msg_type, unreach_code, IcmpErrorRepr, MAX_ERROR_DATAGRAM};
use crate::wire::ipv4::{Ipv4Packet, Ipv4Repr, DEFAULT_TTL, MIN_HEADER_LEN};
use std::net::Ipv4Addr;

/// Errors queued between two `drain_generated` calls at most.
pub const QUEUE: usize = 32;
/// Room for one error frame: Ethernet, a VLAN tag, 576 bytes of IPv4.
const FRAME: usize = ethernet::HEADER_LEN + ethernet::TAG_LEN + MAX_ERROR_DATAGRAM;

/// The node's ICMP error policy (per worker).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IcmpErrorConfig {
    /// Errors per second at most (token refill); 0 sends none.
    pub rate: u32,
    /// Errors sent back to back at most (bucket depth, at least 1).
    pub burst: u32,
    /// Answer a connection denied by policy with "administratively
    /// prohibited" (default: drop silently).
    pub admin_prohibited: bool,
}

impl Default for IcmpErrorConfig {
    /// 100 per second, bursts of 50, denials silent: traceroute and PMTUD
    /// work, a scan of unroutable addresses cannot turn the node into an
    /// amplifier.
    fn default() -> Self {
        IcmpErrorConfig { rate: 100, burst: 50, admin_prohibited: false }
    }
}

/// The errors this node sends.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    TimeExceeded,
    NetUnreachable,
    ProtocolUnreachable,
    PortUnreachable,
    /// With the next-hop MTU.
    FragNeeded(u16),
    AdminProhibited,
}

impl ErrorKind {
    fn repr(self) -> IcmpErrorRepr {
        let unreach = |code| IcmpErrorRepr { msg_type: msg_type::DEST_UNREACHABLE, code, next_hop_mtu: 0 };
        match self {
            ErrorKind::TimeExceeded => IcmpErrorRepr {
                msg_type: msg_type::TIME_EXCEEDED,
                code: icmp::TTL_EXCEEDED_IN_TRANSIT,
                next_hop_mtu: 0,
            },
            ErrorKind::NetUnreachable => unreach(unreach_code::NET),
            ErrorKind::ProtocolUnreachable => unreach(unreach_code::PROTOCOL),
            ErrorKind::PortUnreachable => unreach(unreach_code::PORT),
            ErrorKind::FragNeeded(mtu) => IcmpErrorRepr { next_hop_mtu: mtu, ..unreach(unreach_code::FRAG_NEEDED) },
            ErrorKind::AdminProhibited => unreach(unreach_code::ADMIN_PROHIBITED),
        }
    }
}

/// ICMP errors of one worker (`Counters::icmp_errors`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct IcmpErrorCounters {
    pub time_exceeded: u64,
    pub net_unreachable: u64,
    pub protocol_unreachable: u64,
    pub port_unreachable: u64,
    pub frag_needed: u64,
    pub admin_prohibited: u64,
    /// Not sent: no token (the rate limit).
    pub suppressed: u64,
    /// Not sent: a never-send rule (an error about an error, a broadcast,
    /// a later fragment, a source that is not one host).
    pub not_sent: u64,
    /// Not sent: no route back to the source, or its next hop's MAC is
    /// unknown (an ARP request went out).
    pub no_route: u64,
    pub no_neighbor: u64,
    /// Not sent: the queue was full.
    pub queue_full: u64,
}

impl IcmpErrorCounters {
    /// Errors sent, every kind.
    pub fn sent(&self) -> u64 {
        self.time_exceeded
            + self.net_unreachable
            + self.protocol_unreachable
            + self.port_unreachable
            + self.frag_needed
            + self.admin_prohibited
    }
}

crate::impl_stats!(IcmpErrorCounters {
    counter time_exceeded,
    counter net_unreachable,
    counter protocol_unreachable,
    counter port_unreachable,
    counter frag_needed,
    counter admin_prohibited,
    counter suppressed,
    counter not_sent,
    counter no_route,
    counter no_neighbor,
    counter queue_full,
});

/// Where an error leaves: the egress interface's port, MACs, VLAN and
/// address (this node's side of the route back to the source).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Back {
    pub port: PortId,
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub vlan: Option<u16>,
    pub addr: Ipv4Addr,
}

/// The source to send an error to about the datagram at `l3`, or `None`
/// when a never-send rule applies (RFC 1122 §3.2.2, module docs).
pub(crate) fn may_answer(l3: &[u8], l2_broadcast: bool, ifaces: &Interfaces) -> Option<Ipv4Addr> {
    let ip = Ipv4Packet::new_checked_header(l3).ok()?;
    let (src, dst) = (ip.src(), ip.dst());
    let src_ok = !martian_source(src) && !ifaces.is_own(src);
    let dst_ok = !dst.is_multicast() && !dst.is_broadcast() && !ifaces.is_directed_broadcast(dst);
    if l2_broadcast || !src_ok || !dst_ok || ip.frag_offset() != 0 {
        return None;
    }
    if ip.protocol() == crate::types::ip_proto::ICMP && !icmp::is_query(*ip.payload().first()?) {
        return None;
    }
    Some(src)
}

struct Queued {
    port: PortId,
    len: usize,
    frame: [u8; FRAME],
}

/// One worker's error generator.
pub(crate) struct IcmpErrors {
    cfg: IcmpErrorConfig,
    /// Token bucket credit in nanoseconds of refill (`burst` tokens are
    /// `burst × 1e9 / rate` ns).
    credit_ns: u64,
    last: Timestamp,
    queue: Vec<Queued>,
    pub counters: IcmpErrorCounters,
}

impl IcmpErrors {
    pub fn new(cfg: IcmpErrorConfig) -> Self {
        let mut e = IcmpErrors {
            cfg,
            credit_ns: 0,
            last: Timestamp::ZERO,
            queue: Vec::with_capacity(QUEUE),
            counters: IcmpErrorCounters::default(),
        };
        e.credit_ns = e.max_credit();
        e
    }

    pub fn config(&self) -> &IcmpErrorConfig {
        &self.cfg
    }

    fn token_ns(&self) -> u64 {
        1_000_000_000 / u64::from(self.cfg.rate.max(1))
    }

    fn max_credit(&self) -> u64 {
        self.token_ns().saturating_mul(u64::from(self.cfg.burst.max(1)))
    }

    /// Take a token at `now` (refilled since the last take); `false`: none.
    pub(crate) fn take_token(&mut self, now: Timestamp) -> bool {
        if self.cfg.rate == 0 {
            return false;
        }
        let elapsed = now.nanos().saturating_sub(self.last.nanos());
        self.last = Timestamp(self.last.nanos().max(now.nanos()));
        self.credit_ns = self.credit_ns.saturating_add(elapsed).min(self.max_credit());
        let t = self.token_ns();
        if self.credit_ns < t {
            return false;
        }
        self.credit_ns -= t;
        true
    }

    /// Count a never-send case.
    pub fn refuse(&mut self) {
        self.counters.not_sent += 1;
    }

    /// Rate limit, then build `kind` quoting `l3` (the offending datagram
    /// from its IP header on) to `to`, leaving by `back`, into the queue.
    pub fn send(&mut self, now: Timestamp, kind: ErrorKind, l3: &[u8], to: Ipv4Addr, back: Back) {
        if self.queue.len() >= QUEUE {
            self.counters.queue_full += 1;
            return;
        }
        if !self.take_token(now) {
            self.counters.suppressed += 1;
            return;
        }
        let quoted_len = Ipv4Packet::new_checked_header(l3)
            .map(|ip| usize::from(ip.total_len()))
            .unwrap_or(0)
            .min(l3.len())
            .min(MAX_ERROR_DATAGRAM - MIN_HEADER_LEN - icmp::HEADER_LEN);
        let Some(quoted) = l3.get(..quoted_len) else { return };
        let mut q = Queued { port: back.port, len: 0, frame: [0u8; FRAME] };
        let l2 = ethernet::emit_header(&mut q.frame, back.dst_mac, back.src_mac, back.vlan, ethertype::IPV4);
        let Some(body) = q.frame.get_mut(l2 + MIN_HEADER_LEN..) else { return };
        let Some(n) = kind.repr().emit(quoted, body) else { return };
        // At most 576 bytes, which every link carries: an atomic datagram
        // (DF, identification 0; RFC 6864 §4.1).
        let ip = Ipv4Repr {
            src: back.addr,
            dst: to,
            protocol: crate::types::ip_proto::ICMP,
            ttl: DEFAULT_TTL,
            ident: 0,
            dont_frag: true,
            payload_len: n as u16,
        };
        let Some(hdr) = q.frame.get_mut(l2..) else { return };
        ip.emit(hdr);
        q.len = (l2 + MIN_HEADER_LEN + n).max(ethernet::MIN_FRAME_LEN);
        self.queue.push(q);
        let c = &mut self.counters;
        match kind {
            ErrorKind::TimeExceeded => c.time_exceeded += 1,
            ErrorKind::NetUnreachable => c.net_unreachable += 1,
            ErrorKind::ProtocolUnreachable => c.protocol_unreachable += 1,
            ErrorKind::PortUnreachable => c.port_unreachable += 1,
            ErrorKind::FragNeeded(_) => c.frag_needed += 1,
            ErrorKind::AdminProhibited => c.admin_prohibited += 1,
        }
    }

    /// Hand the queued errors to `f`, in order, and empty the queue.
    pub fn drain(&mut self, f: &mut impl FnMut(PortId, &[u8])) {
        for q in self.queue.drain(..) {
            f(q.port, q.frame.get(..q.len).unwrap_or(&q.frame));
        }
    }
}

impl Stats for IcmpErrors {
    fn visit(&self, v: &mut dyn Visitor) {
        self.counters.visit(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn back() -> Back {
        Back { port: PortId(0), dst_mac: [2, 0, 0, 0, 0, 1], src_mac: [2, 0, 0, 0, 0, 2], vlan: None, addr: Ipv4Addr::new(198, 18, 1, 1) }
    }

    #[test]
    fn the_bucket_gives_burst_then_rate() {
        let mut e = IcmpErrors::new(IcmpErrorConfig { rate: 10, burst: 3, admin_prohibited: false });
        let l3 = crate::wire::ipv4::tests::TCP_SYN;
        let to = Ipv4Addr::new(10, 0, 0, 2);
        let t0 = Timestamp::from_secs(5);
        for _ in 0..5 {
            e.send(t0, ErrorKind::NetUnreachable, &l3, to, back());
        }
        assert_eq!((e.counters.net_unreachable, e.counters.suppressed), (3, 2), "a burst of 3");
        // 100 ms later: one token back (10/s).
        e.send(Timestamp(t0.nanos() + 99_000_000), ErrorKind::NetUnreachable, &l3, to, back());
        assert_eq!(e.counters.suppressed, 3);
        e.send(Timestamp(t0.nanos() + 100_000_000), ErrorKind::NetUnreachable, &l3, to, back());
        assert_eq!(e.counters.net_unreachable, 4);
        // A long pause refills only up to the burst.
        let later = Timestamp::from_secs(60);
        for _ in 0..10 {
            e.send(later, ErrorKind::TimeExceeded, &l3, to, back());
        }
        assert_eq!(e.counters.time_exceeded, 3);
        let mut n = 0;
        e.drain(&mut |_, _| n += 1);
        assert_eq!(n, 7);
        let mut off = IcmpErrors::new(IcmpErrorConfig { rate: 0, ..IcmpErrorConfig::default() });
        off.send(t0, ErrorKind::TimeExceeded, &l3, to, back());
        assert_eq!((off.counters.sent(), off.counters.suppressed), (0, 1), "rate 0: none");
    }

    #[test]
    fn never_about_errors_broadcasts_later_fragments_or_bad_sources() {
        use super::super::iface::Iface;
        let iface = Iface {
            port: PortId(0),
            mac: [2, 0, 0, 0, 0, 2],
            addr: Ipv4Addr::new(198, 18, 1, 1),
            prefix_len: 24,
            vlan: None,
            mtu: 1500,
            reverse_path: crate::pipeline::ReversePath::Strict,
        };
        let ifaces = Interfaces::new(vec![iface], vec!["inside".into()], 0);
        let mut syn = crate::wire::ipv4::tests::TCP_SYN;
        assert_eq!(may_answer(&syn, false, &ifaces), Some(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(may_answer(&syn, true, &ifaces), None, "link-layer broadcast");
        let set = |b: &mut [u8; 60], at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
        let mut later = syn;
        set(&mut later, 6, &[0x20, 0x10]);
        assert_eq!(may_answer(&later, false, &ifaces), None, "non-first fragment");
        let mut first = syn;
        set(&mut first, 6, &[0x20, 0x00]);
        assert!(may_answer(&first, false, &ifaces).is_some(), "a first fragment is answered");
        for src in [[0, 1, 2, 3], [127, 0, 0, 1], [224, 0, 0, 1], [255, 255, 255, 255], [198, 18, 1, 1], [198, 18, 1, 255]] {
            let mut b = syn;
            set(&mut b, 12, &src);
            assert_eq!(may_answer(&b, false, &ifaces), None, "source {src:?}");
        }
        for dst in [[224, 0, 0, 5], [255, 255, 255, 255], [198, 18, 1, 255]] {
            let mut b = syn;
            set(&mut b, 16, &dst);
            assert_eq!(may_answer(&b, false, &ifaces), None, "destination {dst:?}");
        }
        let mut to_us = syn;
        set(&mut to_us, 16, &[198, 18, 1, 1]);
        assert!(may_answer(&to_us, false, &ifaces).is_some(), "to our interface address: answered");
        // ICMP: a query is answered, an error or an unknown type is not.
        syn[9] = 1;
        for (t, ok) in [(8u8, true), (0, true), (13, true), (3, false), (11, false), (5, false), (42, false)] {
            syn[20] = t;
            assert_eq!(may_answer(&syn, false, &ifaces).is_some(), ok, "ICMP type {t}");
        }
        assert_eq!(may_answer(&syn[..10], false, &ifaces), None, "truncated");
    }
}
