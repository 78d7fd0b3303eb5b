//! A per-connection trace (issue 14, item 5, beyond the reference): for a
//! bounded time, every frame matching a filter gets one [`TraceEvent`] —
//! where it came from (a port, or a member over the CCL), what this node
//! is to its connection (owner, director, backup, forwarder) and what the
//! pipeline did with it (out of a port, over the CCL to a member, parked
//! or held, dropped and why). Every member of a cluster records its own;
//! `clusterfw-ctl cluster show trace` merges them into one timeline, so an
//! operator sees why one connection failed across nodes.
//!
//! Invariants:
//! - **Off costs one branch per frame**: `Pipeline::trace` is `None`
//!   unless a trace runs, and the untraced path is the same code as before
//!   (`Pipeline::process` tests `trace.is_some()` once; the cluster stage
//!   notes the sender of each CCL message and the member each wrapped
//!   frame goes to, a store each, which only a trace reads).
//! - **Bounded**: the events live in a vector reserved when the trace
//!   starts (`TRACE_EVENTS`), nothing is allocated per frame; beyond it
//!   events are counted (`lost`), never stored. The trace ends by itself
//!   at its deadline (at most `TRACE_MAX_SECS`).
//! - A frame that cannot be read as IPv4 is never traced (the filter
//!   names addresses); the filter matches either direction of a
//!   connection, so one filter follows both halves.

use super::ipv4::{transit_l4, Transit};
use crate::conntrack::L4Info;
use crate::types::{DropReason, FiveTuple, NodeId, PortId, Timestamp, WorkerId};
use crate::wire::ethernet::{ethertype, EthernetFrame};
use crate::wire::ipv4::Ipv4Packet;
use core::fmt;
use std::net::{IpAddr, Ipv4Addr};

/// Events one worker keeps per trace.
pub const TRACE_EVENTS: usize = 4096;
/// Longest trace.
pub const TRACE_MAX_SECS: u64 = 300;

/// Which frames a trace records: those between `host` and `peer` (any
/// peer when `None`), on `port` at either end (any when `None`), of
/// `proto` (any when `None`), in either direction.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TraceFilter {
    pub host: Ipv4Addr,
    pub peer: Option<Ipv4Addr>,
    pub port: Option<u16>,
    pub proto: Option<u8>,
}

/// Why a filter's text was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterError(pub String);

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TraceFilter {
    /// `HOST [PEER] [port N] [proto tcp|udp|icmp|N]`, e.g.
    /// `198.18.10.2 198.18.20.2 port 8080`.
    pub fn parse(text: &str) -> Result<TraceFilter, FilterError> {
        let bad = |m: String| Err(FilterError(m));
        let mut hosts = Vec::new();
        let (mut port, mut proto) = (None, None);
        let mut words = text.split_whitespace();
        while let Some(w) = words.next() {
            match w {
                "port" => {
                    let v = words.next().unwrap_or("");
                    match v.parse::<u16>() {
                        Ok(p) if p > 0 => port = Some(p),
                        _ => return bad(format!("port {v:?}: 1-65535")),
                    }
                }
                "proto" => {
                    let v = words.next().unwrap_or("");
                    proto = Some(match v {
                        "tcp" => crate::types::ip_proto::TCP,
                        "udp" => crate::types::ip_proto::UDP,
                        "icmp" => crate::types::ip_proto::ICMP,
                        n => match n.parse::<u8>() {
                            Ok(n) => n,
                            Err(_) => return bad(format!("proto {v:?}: tcp, udp, icmp or a number")),
                        },
                    });
                }
                a => match a.parse::<Ipv4Addr>() {
                    Ok(ip) if hosts.len() < 2 => hosts.push(ip),
                    Ok(_) => return bad("at most two addresses".into()),
                    Err(_) => return bad(format!("{a:?} is not an IPv4 address, `port N` or `proto P`")),
                },
            }
        }
        let Some(&host) = hosts.first() else { return bad("a trace needs an address".into()) };
        Ok(TraceFilter { host, peer: hosts.get(1).copied(), port, proto })
    }

    /// Does a frame with this tuple match (either direction)?
    pub fn matches(&self, t: &FiveTuple) -> bool {
        let (IpAddr::V4(s), IpAddr::V4(d)) = (t.src, t.dst) else { return false };
        let ends = |a: Ipv4Addr, b: Ipv4Addr| a == self.host && self.peer.is_none_or(|p| p == b);
        (ends(s, d) || ends(d, s))
            && self.port.is_none_or(|p| t.src_port == p || t.dst_port == p)
            && self.proto.is_none_or(|p| t.proto == p)
    }
}

impl fmt::Display for TraceFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.host)?;
        if let Some(p) = self.peer {
            write!(f, " {p}")?;
        }
        if let Some(p) = self.port {
            write!(f, " port {p}")?;
        }
        if let Some(p) = self.proto {
            write!(f, " proto {p}")?;
        }
        Ok(())
    }
}

/// Where a traced frame came from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TraceFrom {
    Port(PortId),
    /// Unwrapped from a CCL message of this member.
    Member(NodeId),
    /// Released here after waiting for an owner reply (it was recorded
    /// `Kept` when it arrived).
    Parked,
    /// Handed over by another worker of this node (a fragment whose
    /// datagram this worker reassembles; it was recorded `Worker` there),
    /// as received on this port.
    Handoff(PortId),
}

/// What became of a traced frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TraceVerdict {
    /// Sent out of this port.
    Port(PortId),
    /// Sent over the CCL to this member (alone or in a batch).
    Member(NodeId),
    Drop(DropReason),
    /// Kept: parked for an owner reply, held for ARP or a fragment, or a
    /// message consumed.
    Kept,
    /// Handed to another worker of this node.
    Worker(WorkerId),
}

/// One traced frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    pub at: Timestamp,
    pub worker: WorkerId,
    pub tuple: FiveTuple,
    pub len: u16,
    /// TCP flags (0 for other protocols).
    pub tcp_flags: u8,
    pub from: TraceFrom,
    /// This node's role for the connection after the decision, and its
    /// owner (`None`: no flow or record here).
    pub role: Option<(&'static str, NodeId)>,
    pub verdict: TraceVerdict,
}

/// A running (or finished) trace of one worker.
#[derive(Clone, Debug)]
pub struct Tracer {
    pub filter: TraceFilter,
    pub until: Timestamp,
    events: Vec<TraceEvent>,
    pub lost: u64,
}

impl Tracer {
    pub fn new(filter: TraceFilter, until: Timestamp) -> Tracer {
        Tracer { filter, until, events: Vec::with_capacity(TRACE_EVENTS), lost: 0 }
    }

    /// The frame's tuple and TCP flags if the trace is on at `now` and
    /// the frame matches.
    pub fn wants(&self, now: Timestamp, frame: &[u8]) -> Option<(FiveTuple, u8)> {
        if now >= self.until {
            return None;
        }
        let (t, flags) = frame_tuple(frame)?;
        self.filter.matches(&t).then_some((t, flags))
    }

    pub fn record(&mut self, e: TraceEvent) {
        if self.events.len() < self.events.capacity() {
            self.events.push(e);
        } else {
            self.lost += 1;
        }
    }

    pub fn events(&self) -> &[TraceEvent] {
        &self.events
    }

    pub fn active(&self, now: Timestamp) -> bool {
        now < self.until
    }
}

/// TCP flags as tcpdump writes them: `S`, `F`, `R`, `P`, `U`, `E`, `W`,
/// then `.` for ACK (`S.` a SYN-ACK); empty for none.
pub fn flag_letters(f: u8) -> String {
    use crate::conntrack::tcp_flags::{ACK, CWR, ECE, FIN, PSH, RST, SYN, URG};
    let mut s: String = [(SYN, 'S'), (FIN, 'F'), (RST, 'R'), (PSH, 'P'), (URG, 'U'), (ECE, 'E'), (CWR, 'W')]
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, c)| *c)
        .collect();
    if f & ACK != 0 {
        s.push('.');
    }
    s
}

/// The IPv4 5-tuple of an Ethernet frame as conntrack keys it
/// (`ipv4::transit_l4`: ICMP echo by its identifier, an ICMP error under
/// the connection it quotes) and its TCP flags; addresses alone (ports 0)
/// for fragments after the first and for an L4 header that cannot be
/// read, so a trace sees those frames too.
pub fn frame_tuple(f: &[u8]) -> Option<(FiveTuple, u8)> {
    let eth = EthernetFrame::new_checked(f).ok()?;
    if eth.tag_count() > 1 || eth.ethertype() != ethertype::IPV4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    let addrs = FiveTuple { src: IpAddr::V4(ip.src()), dst: IpAddr::V4(ip.dst()), proto: ip.protocol(), src_port: 0, dst_port: 0 };
    if ip.is_fragment() && ip.frag_offset() != 0 {
        return Some((addrs, 0));
    }
    Some(match transit_l4(&ip) {
        Ok(Transit::Flow(t, L4Info::Tcp(seg))) => (t, seg.flags),
        Ok(Transit::Flow(t, _) | Transit::IcmpError(t)) => (t, 0),
        Err(_) => (addrs, 0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: [u8; 4], sp: u16, d: [u8; 4], dp: u16, proto: u8) -> FiveTuple {
        FiveTuple { src: IpAddr::from(s), dst: IpAddr::from(d), proto, src_port: sp, dst_port: dp }
    }

    #[test]
    fn filters_parse_and_match_both_directions() {
        let f = TraceFilter::parse("198.18.10.2 198.18.20.2 port 8080 proto tcp").unwrap();
        assert_eq!(f.to_string(), "198.18.10.2 198.18.20.2 port 8080 proto 6");
        assert_eq!(TraceFilter::parse(&f.to_string()), Ok(f));
        let out = t([198, 18, 10, 2], 40000, [198, 18, 20, 2], 8080, 6);
        let back = t([198, 18, 20, 2], 8080, [198, 18, 10, 2], 40000, 6);
        assert!(f.matches(&out) && f.matches(&back));
        assert!(!f.matches(&t([198, 18, 10, 2], 40000, [198, 18, 20, 3], 8080, 6)), "another peer");
        assert!(!f.matches(&t([198, 18, 10, 2], 40000, [198, 18, 20, 2], 8081, 6)), "another port");
        assert!(!f.matches(&t([198, 18, 10, 2], 40000, [198, 18, 20, 2], 8080, 17)), "another protocol");
        let any = TraceFilter::parse("198.18.10.2").unwrap();
        assert!(any.matches(&back) && any.matches(&t([1, 2, 3, 4], 1, [198, 18, 10, 2], 2, 1)));
        assert!(!any.matches(&t([1, 2, 3, 4], 1, [5, 6, 7, 8], 2, 1)));
        for bad in ["", "port 80", "1.2.3.4 port", "1.2.3.4 port 0", "1.2.3.4 proto sctpx", "1.2.3.4 5.6.7.8 9.9.9.9", "host"] {
            assert!(TraceFilter::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn flags_read_as_tcpdump_writes_them() {
        use crate::conntrack::tcp_flags::{ACK, FIN, PSH, SYN};
        assert_eq!(flag_letters(SYN), "S");
        assert_eq!(flag_letters(SYN | ACK), "S.");
        assert_eq!(flag_letters(PSH | ACK), "P.");
        assert_eq!(flag_letters(FIN | ACK), "F.");
        assert_eq!(flag_letters(0), "");
    }

    #[test]
    fn the_event_store_is_bounded_and_ends_at_its_deadline() {
        let f = TraceFilter::parse("10.0.0.1").unwrap();
        let mut tr = Tracer::new(f, Timestamp(100));
        let e = TraceEvent {
            at: Timestamp(1),
            worker: WorkerId(0),
            tuple: t([10, 0, 0, 1], 1, [10, 0, 0, 2], 2, 17),
            len: 60,
            tcp_flags: 0,
            from: TraceFrom::Port(PortId(0)),
            role: None,
            verdict: TraceVerdict::Kept,
        };
        for _ in 0..TRACE_EVENTS + 5 {
            tr.record(e);
        }
        assert_eq!((tr.events().len(), tr.lost), (TRACE_EVENTS, 5));
        assert!(tr.active(Timestamp(99)) && !tr.active(Timestamp(100)));
        // Any bytes: no panic; a frame that is not IPv4 is not traced.
        for n in 0..64 {
            let junk: Vec<u8> = (0..n).map(|i| (i * 37) as u8).collect();
            let _ = tr.wants(Timestamp(1), &junk);
        }
        assert_eq!(tr.wants(Timestamp(1), &[0u8; 60]), None);
    }
}
