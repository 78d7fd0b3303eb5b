//! IPv6 frames for the generator (issue 16): UDP flows with a payload
//! stamp, and the neighbour discovery a generator needs on a link with a
//! router (resolve the gateway, answer for its own addresses), on plain
//! byte buffers through the dataplane's wire views.
//!
//! Frames are untagged Ethernet II, an IPv6 header without extension
//! headers, hop limit 64 (255 for ND, RFC 4861 §7.1). UDP over IPv6 must
//! carry a checksum (RFC 8200 §8.1): [`stamp_udp6`] rewrites it with the
//! stamp. The stamp is [`super::packet::Stamp`], at the start of the UDP
//! payload, so the smallest stamped frame is 14 + 40 + 8 + 16 = 78 bytes
//! (`--size` is clamped up to it).

use super::packet::{Stamp, MAX_FRAME, STAMP_LEN};
use dataplane::types::ip_proto;
use dataplane::wire::checksum;
use dataplane::wire::ethernet::{self, ethertype, EthernetFrame};
use dataplane::wire::icmpv6::{self, msg_type};
use dataplane::wire::ipv6::{self, Ipv6Packet};
use dataplane::wire::udp::UdpPacket;
use std::net::Ipv6Addr;

/// Ethernet + IPv6 (no extension headers).
pub const L3_OFFSET6: usize = 14;
pub const L4_OFFSET6: usize = L3_OFFSET6 + ipv6::HEADER_LEN;
/// The smallest stamped UDP/IPv6 frame.
pub const MIN_FRAME6: usize = L4_OFFSET6 + 8 + STAMP_LEN;
const HOP_LIMIT: u8 = 64;
const ND_HOP_LIMIT: u8 = 255;

/// Addresses of one direction of IPv6 traffic.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Endpoints6 {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
}

/// Ethernet and IPv6 headers for `payload_len` bytes of `next_header`.
fn headers(src_mac: [u8; 6], dst_mac: [u8; 6], src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, hop_limit: u8, payload_len: usize) -> Vec<u8> {
    let mut f = vec![0u8; L4_OFFSET6 + payload_len];
    ethernet::emit_header(&mut f, dst_mac, src_mac, None, ethertype::IPV6);
    let mut ip = Ipv6Packet::new_unchecked(&mut f[L3_OFFSET6..]);
    ip.set_ver_tc_flow(0, 0);
    ip.set_payload_len(payload_len as u16);
    ip.set_next_header(next_header);
    ip.set_hop_limit(hop_limit);
    ip.set_src(src);
    ip.set_dst(dst);
    f
}

/// A UDP/IPv6 frame of `frame_len` bytes (clamped to `MIN_FRAME6..=1514`)
/// with a zero stamp and its checksum; patch the stamp with
/// [`stamp_udp6`].
pub fn udp6_frame(ep: &Endpoints6, sport: u16, dport: u16, frame_len: usize) -> Vec<u8> {
    let len = frame_len.clamp(MIN_FRAME6, MAX_FRAME);
    let udp_len = len - L4_OFFSET6;
    let mut f = headers(ep.src_mac, ep.dst_mac, ep.src, ep.dst, ip_proto::UDP, HOP_LIMIT, udp_len);
    let mut u = UdpPacket::new_unchecked(&mut f[L4_OFFSET6..]);
    u.set_src_port(sport);
    u.set_dst_port(dport);
    u.set_len(udp_len as u16);
    stamp_udp6(&mut f, Stamp { seq: 0, tsc: 0 });
    f
}

/// Writes a stamp into a frame made by [`udp6_frame`] and its UDP
/// checksum (over the pseudo-header, RFC 8200 §8.1; 0 is sent as 0xffff).
pub fn stamp_udp6(frame: &mut [u8], stamp: Stamp) {
    stamp.write(&mut frame[L4_OFFSET6 + 8..]);
    let (src, dst) = {
        let ip = Ipv6Packet::new_unchecked(&mut frame[L3_OFFSET6..]);
        (ip.src(), ip.dst())
    };
    let seg = &mut frame[L4_OFFSET6..];
    seg[6..8].copy_from_slice(&[0, 0]);
    let c = !checksum::fold(checksum::sum(icmpv6::pseudo_header(src, dst, seg.len(), ip_proto::UDP), seg));
    seg[6..8].copy_from_slice(&if c == 0 { 0xffff } else { c }.to_be_bytes());
}

/// A neighbour solicitation from `my_ip` for `target`, to its
/// solicited-node group, with our link-layer address.
pub fn nd_solicit(my_mac: [u8; 6], my_ip: Ipv6Addr, target: Ipv6Addr) -> Vec<u8> {
    let group = icmpv6::solicited_node(target);
    let mut body = [0u8; 32];
    let n = icmpv6::emit_ns(&mut body, my_ip, group, target, my_mac).unwrap_or(0);
    let mut f = headers(my_mac, icmpv6::multicast_mac(group), my_ip, group, ip_proto::ICMPV6, ND_HOP_LIMIT, n);
    f[L4_OFFSET6..].copy_from_slice(&body[..n]);
    f
}

/// What a received IPv6 frame is, as far as the generator cares.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Parsed6 {
    Udp { src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, stamp: Option<Stamp> },
    /// A well-formed solicitation or advertisement (checksum verified,
    /// hop limit 255) from `src`.
    Nd { src: Ipv6Addr, nd: icmpv6::Nd },
    Other,
}

/// Parses a received frame (untagged Ethernet, IPv6).
pub fn parse6(frame: &[u8]) -> Parsed6 {
    let Ok(eth) = EthernetFrame::new_checked(frame) else { return Parsed6::Other };
    if eth.ethertype() != ethertype::IPV6 {
        return Parsed6::Other;
    }
    let Ok(ip) = Ipv6Packet::new_checked(eth.payload()) else { return Parsed6::Other };
    let Ok(u) = ip.upper_layer() else { return Parsed6::Other };
    let (src, dst) = (ip.src(), ip.dst());
    let Some(l4) = ip.payload().get(u.offset..) else { return Parsed6::Other };
    match u.protocol {
        ip_proto::UDP if u.fragment.is_none() => match UdpPacket::new_checked(l4) {
            Ok(p) => Parsed6::Udp {
                src,
                dst,
                sport: p.src_port(),
                dport: p.dst_port(),
                stamp: Stamp::read(l4.get(8..).unwrap_or(&[])),
            },
            Err(_) => Parsed6::Other,
        },
        ip_proto::ICMPV6 if ip.hop_limit() == ND_HOP_LIMIT && icmpv6::verify(src, dst, l4) => match icmpv6::parse_nd(l4) {
            Ok(nd) => Parsed6::Nd { src, nd },
            Err(_) => Parsed6::Other,
        },
        _ => Parsed6::Other,
    }
}

/// The advertisement answering a solicitation for any of the `count`
/// addresses from `first` (one host standing in for many), or `None`: to
/// the solicitation's source, or to all nodes for DAD's unspecified one.
pub fn nd_answer(frame: &[u8], my_mac: [u8; 6], first: Ipv6Addr, count: u32) -> Option<Vec<u8>> {
    let Parsed6::Nd { src, nd } = parse6(frame) else { return None };
    let offset = u128::from(nd.target).wrapping_sub(u128::from(first));
    if nd.msg_type != msg_type::NEIGHBOR_SOLICIT || offset >= u128::from(count.max(1)) {
        return None;
    }
    let (to, to_mac, flags) = match nd.lladdr {
        _ if src.is_unspecified() => (icmpv6::ALL_NODES, icmpv6::multicast_mac(icmpv6::ALL_NODES), icmpv6::NA_OVERRIDE),
        Some(mac) => (src, mac, icmpv6::NA_SOLICITED | icmpv6::NA_OVERRIDE),
        // No link-layer address to answer to: the Ethernet source.
        None => (src, EthernetFrame::new_checked(frame).ok()?.src(), icmpv6::NA_SOLICITED | icmpv6::NA_OVERRIDE),
    };
    let mut body = [0u8; 32];
    let n = icmpv6::emit_na(&mut body, nd.target, to, nd.target, my_mac, flags)?;
    let mut f = headers(my_mac, to_mac, nd.target, to, ip_proto::ICMPV6, ND_HOP_LIMIT, n);
    f[L4_OFFSET6..].copy_from_slice(&body[..n]);
    Some(f)
}

/// The MAC `frame` advertises for `target`, if it is an advertisement of
/// it (resolving a gateway).
pub fn nd_advertised(frame: &[u8], target: Ipv6Addr) -> Option<[u8; 6]> {
    match parse6(frame) {
        Parsed6::Nd { nd, .. } if nd.msg_type == msg_type::NEIGHBOR_ADVERT && nd.target == target => nd.lladdr,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }
    const ME: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const PEER: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn ep() -> Endpoints6 {
        Endpoints6 { src_mac: ME, dst_mac: PEER, src: a("2001:db8:1::10"), dst: a("2001:db8:2::10") }
    }

    /// The UDP checksum of a frame, verified over the pseudo-header.
    fn udp_ok(f: &[u8]) -> bool {
        let ip = Ipv6Packet::new_checked(&f[L3_OFFSET6..]).unwrap();
        let seg = ip.payload();
        checksum::fold(checksum::sum(icmpv6::pseudo_header(ip.src(), ip.dst(), seg.len(), ip_proto::UDP), seg)) == 0xffff
    }

    #[test]
    fn udp6_frames_have_the_asked_length_a_valid_checksum_and_a_stamp() {
        for want in [0, 62, 78, 128, 1514, 9000] {
            let mut f = udp6_frame(&ep(), 1234, 9, want);
            assert_eq!(f.len(), want.clamp(MIN_FRAME6, 1514), "asked {want}");
            let ip = Ipv6Packet::new_checked(&f[L3_OFFSET6..]).unwrap();
            assert_eq!((ip.payload_len() as usize, ip.next_header(), ip.hop_limit()), (f.len() - 54, 17, 64));
            assert!(udp_ok(&f), "checksum of the template");
            stamp_udp6(&mut f, Stamp { seq: 7, tsc: 0x1122_3344_5566 });
            assert!(udp_ok(&f), "checksum after the stamp");
            assert_eq!(
                parse6(&f),
                Parsed6::Udp { src: ep().src, dst: ep().dst, sport: 1234, dport: 9, stamp: Some(Stamp { seq: 7, tsc: 0x1122_3344_5566 }) }
            );
        }
    }

    /// Every truncation of a stamped frame parses to something, never
    /// panics, and is never taken for a stamped datagram it is not.
    #[test]
    fn truncations_parse_without_panic() {
        let f = udp6_frame(&ep(), 1, 2, 100);
        for n in 0..f.len() {
            assert!(!matches!(parse6(&f[..n]), Parsed6::Udp { stamp: Some(_), .. }), "{n}");
        }
    }

    #[test]
    fn a_solicitation_for_one_of_ours_is_answered_and_resolves() {
        let gw = a("2001:db8:1::1");
        let ns = nd_solicit(PEER, gw, a("2001:db8:1::12"));
        assert_eq!(ns[0..6], icmpv6::multicast_mac(icmpv6::solicited_node(a("2001:db8:1::12"))));
        match parse6(&ns) {
            Parsed6::Nd { src, nd } => assert_eq!((src, nd.msg_type, nd.target, nd.lladdr), (gw, 135, a("2001:db8:1::12"), Some(PEER))),
            other => panic!("{other:?}"),
        }
        // We stand for 2001:db8:1::10 .. ::13: ::12 is ours, ::14 is not.
        let na = nd_answer(&ns, ME, a("2001:db8:1::10"), 4).expect("answered");
        assert!(nd_answer(&nd_solicit(PEER, gw, a("2001:db8:1::14")), ME, a("2001:db8:1::10"), 4).is_none());
        assert_eq!((na[0..6].to_vec(), na[6..12].to_vec()), (PEER.to_vec(), ME.to_vec()));
        let ip = Ipv6Packet::new_checked(&na[L3_OFFSET6..]).unwrap();
        assert_eq!((ip.src(), ip.dst(), ip.hop_limit()), (a("2001:db8:1::12"), gw, 255));
        assert!(icmpv6::verify(ip.src(), ip.dst(), ip.payload()));
        // The gateway's side: the advertisement names the MAC.
        assert_eq!(nd_advertised(&na, a("2001:db8:1::12")), Some(ME));
        assert_eq!(nd_advertised(&na, a("2001:db8:1::13")), None);
        assert_eq!(nd_advertised(&ns, a("2001:db8:1::12")), None, "a solicitation advertises nothing");
        // A solicitation with a broken checksum or a forwarded one (hop
        // limit below 255) is not answered.
        let mut bad = ns.clone();
        bad[L4_OFFSET6 + 2] ^= 1;
        assert!(nd_answer(&bad, ME, a("2001:db8:1::10"), 4).is_none());
        let mut hop = ns.clone();
        hop[L3_OFFSET6 + 7] = 64;
        assert!(nd_answer(&hop, ME, a("2001:db8:1::10"), 4).is_none());
    }
}
