//! IPv6 frames for the in-process tests (`ipv6_forward.rs`,
//! `cluster_ipv6.rs`): an Ethernet + IPv6 frame around a payload, ICMPv6
//! bodies with their checksum, TCP segments, neighbour solicitations and
//! advertisements, and the fields of a frame that left a pipeline.
#![allow(dead_code)]

use dataplane::wire::checksum;
use dataplane::wire::icmpv6::{self, msg_type};
use std::net::Ipv6Addr;

pub fn a(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

/// An Ethernet + IPv6 frame around `payload` (next header `nh`).
pub fn frame(src_mac: [u8; 6], dst_mac: [u8; 6], src: Ipv6Addr, dst: Ipv6Addr, hlim: u8, nh: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(54 + payload.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&src_mac);
    f.extend_from_slice(&[0x86, 0xdd]);
    f.extend_from_slice(&[0x60, 0, 0, 0]);
    f.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    f.extend_from_slice(&[nh, hlim]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(payload);
    f
}

/// ICMPv6 `body` (type on) with its checksum for `src` → `dst`.
pub fn icmp(src: Ipv6Addr, dst: Ipv6Addr, mut body: Vec<u8>) -> Vec<u8> {
    icmpv6::fill_checksum(src, dst, &mut body);
    body
}

pub fn echo(id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    let mut b = vec![msg_type::ECHO_REQUEST, 0, 0, 0];
    b.extend_from_slice(&id.to_be_bytes());
    b.extend_from_slice(&seq.to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// A TCP segment (20-byte header) with its checksum.
pub fn tcp(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    let mut t = vec![0u8; 20];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&64240u16.to_be_bytes());
    let acc = icmpv6::pseudo_header(src, dst, t.len(), 6);
    let c = !dataplane::wire::checksum::fold(dataplane::wire::checksum::sum(acc, &t));
    t[16..18].copy_from_slice(&c.to_be_bytes());
    t
}

pub fn ns(from: Ipv6Addr, from_mac: [u8; 6], target: Ipv6Addr) -> Vec<u8> {
    let dst = icmpv6::solicited_node(target);
    let mut b = vec![0u8; 32];
    icmpv6::emit_ns(&mut b, from, dst, target, from_mac).unwrap();
    frame(from_mac, icmpv6::multicast_mac(dst), from, dst, 255, 58, &b)
}

pub fn na(from: Ipv6Addr, from_mac: [u8; 6], to: Ipv6Addr, to_mac: [u8; 6]) -> Vec<u8> {
    let mut b = vec![0u8; 32];
    icmpv6::emit_na(&mut b, from, to, from, from_mac, icmpv6::NA_SOLICITED | icmpv6::NA_OVERRIDE).unwrap();
    frame(from_mac, to_mac, from, to, 255, 58, &b)
}

/// (src, dst, hop limit, next header) of an Ethernet + IPv6 frame, and its
/// payload.
pub fn ip6(f: &[u8]) -> (Ipv6Addr, Ipv6Addr, u8, u8, &[u8]) {
    let addr = |b: &[u8]| Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap());
    assert_eq!(f[12..14], [0x86, 0xdd]);
    let plen = usize::from(u16::from_be_bytes([f[18], f[19]]));
    (addr(&f[22..38]), addr(&f[38..54]), f[21], f[20], &f[54..54 + plen])
}


/// (seq, ack, flags) of the TCP segment an Ethernet + IPv6 frame carries
/// right after its fixed header, and whether its checksum is right.
pub fn tcp6(f: &[u8]) -> (u32, u32, u8, bool) {
    let (src, dst, _, nh, t) = ip6(f);
    assert_eq!(nh, 6, "a TCP segment");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let acc = icmpv6::pseudo_header(src, dst, t.len(), 6);
    (be(&t[4..8]), be(&t[8..12]), t[13], checksum::fold(checksum::sum(acc, t)) == 0xffff)
}

/// The fragments of an IPv6 datagram whose upper layer is `nh` and
/// `payload` (its header included), cut at these data offsets (multiples
/// of 8, ascending, the first 0): Fragment header payloads, each with its
/// offset and M flag, identification `ident`.
pub fn fragments(nh: u8, ident: u32, payload: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut out = vec![];
    for (k, &start) in cuts.iter().enumerate() {
        let end = cuts.get(k + 1).copied().unwrap_or(payload.len());
        let more = k + 1 < cuts.len();
        let mut f = vec![nh, 0];
        f.extend_from_slice(&((start as u16) | u16::from(more)).to_be_bytes());
        f.extend_from_slice(&ident.to_be_bytes());
        f.extend_from_slice(&payload[start..end]);
        out.push(f);
    }
    out
}

/// A UDP datagram (8-byte header, checksum over the pseudo header).
pub fn udp(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, data: &[u8]) -> Vec<u8> {
    let mut u = vec![0u8; 8];
    u[0..2].copy_from_slice(&sport.to_be_bytes());
    u[2..4].copy_from_slice(&dport.to_be_bytes());
    u[4..6].copy_from_slice(&((8 + data.len()) as u16).to_be_bytes());
    u.extend_from_slice(data);
    let acc = icmpv6::pseudo_header(src, dst, u.len(), 17);
    let c = !checksum::fold(checksum::sum(acc, &u));
    u[6..8].copy_from_slice(&c.to_be_bytes());
    u
}
