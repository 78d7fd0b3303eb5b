//! The IPv4 stage's checks and classifications, as small steps that
//! `Pipeline::ipv4_in` (pipeline/mod.rs) runs in order (RFC 791, RFC 1812
//! §5.2.2/§5.3.7; RFC 1122 §3.2.1.3):
//!
//! 1. `parse`: version, IHL, total length against the buffer (Ethernet
//!    padding ignored), header checksum;
//! 2. `check_source`: no martian source, none of our addresses; options
//!    (source routing dropped, RFC 7126 §4.3–4.4; malformed dropped; others
//!    carried unchanged); then, for a transit datagram received on a port,
//!    `reverse_path_ok` (the ingress interface's anti-spoofing, RFC 3704);
//! 3. `destination`: martian destinations dropped, our interface address
//!    is local, other local addresses and broadcasts are not handled, a
//!    transit datagram received as a link-layer broadcast is not forwarded
//!    (RFC 1812 §5.3.4), TTL must stay above zero after decrement
//!    (RFC 1812 §5.3.1);
//! 4. `transit_l4`: the five-tuple and L4 summary conntrack and the cluster
//!    decide on (ICMP ports per SPEC R3; an ICMP error yields the tuple it
//!    quotes).
//!
//! Each step reads the packet through the `wire` views and returns a drop
//! reason or what the next step needs; none changes anything. The order of
//! the steps is the order of the drop reasons a frame can get, which the
//! golden tables pin.

use super::iface::{Iface, Interfaces, ReversePath};
use crate::route::{IfIndex, RouteTable};
use crate::conntrack::{L4Info, TcpSeg};
use crate::types::{ip_proto, DropReason, FiveTuple};
use crate::wire::icmp::{msg_type, Icmpv4Packet};
use crate::wire::ipv4::{self, Ipv4Packet};
use crate::wire::tcp::{self, TcpOptions, TcpPacket};
use crate::wire::udp::UdpPacket;
use std::net::{IpAddr, Ipv4Addr};

/// RFC 1122 §3.2.1.3 / RFC 1812 §5.3.7: addresses that are never a valid
/// source: "this network" 0/8, loopback 127/8, multicast 224/4, reserved
/// 240/4 and limited broadcast.
#[inline(always)]
pub(crate) fn martian_source(a: Ipv4Addr) -> bool {
    let o = a.octets()[0];
    o == 0 || o == 127 || o >= 224
}

/// RFC 1812 §5.3.7: destinations a router must not forward (0/8, 127/8,
/// 240/4 other than limited broadcast).
fn martian_destination(a: Ipv4Addr) -> bool {
    let o = a.octets()[0];
    o == 0 || o == 127 || (o >= 240 && a != Ipv4Addr::BROADCAST)
}

/// Step 1: the IPv4 header at the start of `l3`, with a good checksum.
#[inline]
pub(crate) fn parse(l3: &[u8]) -> Result<Ipv4Packet<&[u8]>, DropReason> {
    let ip = Ipv4Packet::new_checked(l3).map_err(|e| match e {
        ipv4::Error::Truncated => DropReason::Ipv4Truncated,
        ipv4::Error::BadVersion => DropReason::Ipv4BadVersion,
        ipv4::Error::BadHeaderLen => DropReason::Ipv4BadHeaderLen,
        ipv4::Error::BadTotalLen => DropReason::Ipv4BadTotalLen,
    })?;
    if !ip.verify_checksum() {
        return Err(DropReason::Ipv4BadChecksum);
    }
    Ok(ip)
}

/// Step 2: a plausible source, and options we carry.
#[inline]
pub(crate) fn check_source(ip: &Ipv4Packet<&[u8]>, ifaces: &Interfaces) -> Result<(), DropReason> {
    let src = ip.src();
    if martian_source(src) || ifaces.is_own(src) {
        return Err(DropReason::Ipv4BadSource);
    }
    if ip.header_len() > ipv4::MIN_HEADER_LEN {
        match ipv4::scan_options(ip.options()) {
            ipv4::OptionScan::Clean => {}
            ipv4::OptionScan::SourceRoute => return Err(DropReason::Ipv4SourceRoute),
            ipv4::OptionScan::Malformed => return Err(DropReason::Ipv4BadOptions),
        }
    }
    Ok(())
}

/// Anti-spoofing (RFC 3704): may a datagram from `src` arrive on `ifx`
/// (`ing`)? Strict: the route back to `src` leaves by `ifx` — a source on
/// the interface's own subnet passes without a lookup; loose: some route
/// leads back. The route table has one path per prefix (no ECMP): with
/// equal-cost paths, any of them leaving by `ifx` would pass. Out of
/// line: asked only for a connection's first packets.
#[cold]
#[inline(never)]
pub(crate) fn reverse_path_ok(routes: &RouteTable, ing: &Iface, ifx: IfIndex, src: Ipv4Addr) -> bool {
    match ing.reverse_path {
        ReversePath::Off => true,
        ReversePath::Strict => ing.in_subnet(src) || routes.lookup(src).is_some_and(|r| r.iface == ifx),
        ReversePath::Loose => routes.lookup(src).is_some(),
    }
}

/// Where a datagram goes (step 3).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Destination {
    /// The ingress interface's own address.
    Local,
    /// Through us: route it.
    Transit,
}

/// Step 3: local, transit, or a drop.
#[inline]
pub(crate) fn destination(
    ip: &Ipv4Packet<&[u8]>,
    ing: &Iface,
    ifaces: &Interfaces,
    l2_broadcast: bool,
) -> Result<Destination, DropReason> {
    let dst = ip.dst();
    if martian_destination(dst) {
        return Err(DropReason::Ipv4BadDestination);
    }
    if dst == ing.addr {
        return Ok(Destination::Local);
    }
    if dst.is_multicast() || dst == Ipv4Addr::BROADCAST || ifaces.is_own(dst) {
        return Err(DropReason::LocalUnhandled);
    }
    if l2_broadcast {
        return Err(DropReason::EthNotForUs);
    }
    if ip.ttl() <= 1 {
        return Err(DropReason::TtlExceeded);
    }
    Ok(Destination::Transit)
}

/// The fields conntrack needs from a TCP header (also the fast path's).
#[inline(always)]
pub(crate) fn tcp_seg<T: AsRef<[u8]>>(t: &TcpPacket<T>) -> TcpSeg {
    let flags = t.flags();
    // Window scale and SACK-permitted are only meaningful on SYNs
    // (RFC 7323 §2.2, RFC 2018 §2): skip the option walk otherwise.
    let opts = if flags & tcp::flags::SYN != 0 { TcpOptions::parse(t.options()) } else { TcpOptions::default() };
    TcpSeg {
        flags,
        seq: t.seq(),
        ack: t.ack(),
        window: t.window(),
        payload_len: t.payload().len() as u32,
        wscale: opts.wscale,
        sack_permitted: opts.sack_permitted,
    }
}

/// What a transit packet is to conntrack.
pub(crate) enum Transit {
    /// Track this tuple with this L4 summary.
    Flow(FiveTuple, L4Info),
    /// An ICMP error quoting this (original-direction) tuple.
    IcmpError(FiveTuple),
}

/// Step 4: the five-tuple and L4 summary of a transit datagram. ICMP ports
/// follow types.rs (SPEC R3): echo request (id, 0), echo reply (0, id),
/// anything else (0, 0).
pub(crate) fn transit_l4<T: AsRef<[u8]>>(ip: &Ipv4Packet<T>) -> Result<Transit, DropReason> {
    let (src, dst, proto) = (IpAddr::V4(ip.src()), IpAddr::V4(ip.dst()), ip.protocol());
    let tuple = |sp, dp| FiveTuple { src, dst, proto, src_port: sp, dst_port: dp };
    let payload = ip.payload();
    Ok(match proto {
        ip_proto::TCP => {
            let t = TcpPacket::new_checked(payload).map_err(|e| match e {
                tcp::Error::BadHeaderLen => DropReason::TcpBadHeaderLen,
                _ => DropReason::L4Truncated,
            })?;
            Transit::Flow(tuple(t.src_port(), t.dst_port()), L4Info::Tcp(tcp_seg(&t)))
        }
        ip_proto::UDP => {
            let u = UdpPacket::new_checked(payload).map_err(|_| DropReason::L4Truncated)?;
            Transit::Flow(tuple(u.src_port(), u.dst_port()), L4Info::Udp)
        }
        ip_proto::ICMP => {
            let i = Icmpv4Packet::new_checked(payload).map_err(|_| DropReason::L4Truncated)?;
            match i.msg_type() {
                msg_type::ECHO_REQUEST => Transit::Flow(tuple(i.echo_ident(), 0), L4Info::IcmpEchoRequest),
                msg_type::ECHO_REPLY => Transit::Flow(tuple(0, i.echo_ident()), L4Info::IcmpEchoReply),
                _ if i.is_error() => {
                    let e = i.embedded().map_err(|_| DropReason::L4Truncated)?;
                    let (src_port, dst_port) = e.ports();
                    Transit::IcmpError(FiveTuple {
                        src: IpAddr::V4(e.src),
                        dst: IpAddr::V4(e.dst),
                        proto: e.protocol,
                        src_port,
                        dst_port,
                    })
                }
                _ => Transit::Flow(tuple(0, 0), L4Info::Other),
            }
        }
        _ => Transit::Flow(tuple(0, 0), L4Info::Other),
    })
}
