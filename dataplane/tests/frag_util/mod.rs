//! Cutting test frames into IPv4 fragments, the way a sending host does,
//! and putting them back together.
#![allow(dead_code)]

use dataplane::wire::ipv4::{Ipv4Packet, FLAG_MF};
use dataplane::wire::udp::UdpPacket;

/// The fragments of `frame`'s IPv4 datagram, `size` bytes of payload each
/// (a multiple of 8; the last one takes the rest), DF cleared, in order.
pub fn fragments(frame: &[u8], size: usize) -> Vec<Vec<u8>> {
    assert_eq!(size % 8, 0);
    let l2 = dataplane::wire::ethernet::EthernetFrame::new_checked(frame).unwrap().header_len();
    let ip = Ipv4Packet::new_checked(&frame[l2..]).unwrap();
    let payload = ip.payload().to_vec();
    let hdr = frame[..l2 + ip.header_len()].to_vec();
    let n = payload.len().div_ceil(size);
    (0..n)
        .map(|i| {
            let (off, end) = (i * size, ((i + 1) * size).min(payload.len()));
            let mut f = hdr.clone();
            f.extend_from_slice(&payload[off..end]);
            let mut ip = Ipv4Packet::new_unchecked(&mut f[l2..]);
            ip.set_total_len((ip.header_len() + end - off) as u16);
            ip.set_flags_frag(if end < payload.len() { FLAG_MF } else { 0 }, off as u16);
            ip.fill_checksum();
            f
        })
        .collect()
}

/// One fragment at any offset, length and MF flag, with `frame`'s headers
/// and zero bytes of data (for attacks: overlaps, oversize).
pub fn raw_fragment(frame: &[u8], offset: u16, len: usize, more: bool) -> Vec<u8> {
    let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
    let mut f = frame[..14 + ip.header_len()].to_vec();
    f.resize(f.len() + len, 0xab);
    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
    ip.set_total_len((ip.header_len() + len) as u16);
    ip.set_flags_frag(if more { FLAG_MF } else { 0 }, offset);
    ip.fill_checksum();
    f
}

/// Header checksum right, TTL as expected; panics otherwise.
pub fn check_ip(frame: &[u8], ttl: u8) {
    let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
    assert!(ip.verify_checksum(), "IPv4 header checksum");
    assert_eq!(ip.ttl(), ttl, "TTL");
}

/// Reassemble untagged fragments (any order) and check the UDP checksum of
/// the datagram; returns the UDP payload.
pub fn reassemble_udp(frags: &[Vec<u8>]) -> Vec<u8> {
    let mut parts: Vec<(usize, Vec<u8>, bool)> = frags
        .iter()
        .map(|f| {
            let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
            (usize::from(ip.frag_offset()), ip.payload().to_vec(), ip.more_frags())
        })
        .collect();
    parts.sort_by_key(|p| p.0);
    let mut data = vec![];
    for (off, d, _) in &parts {
        assert_eq!(*off, data.len(), "contiguous fragments");
        data.extend_from_slice(d);
    }
    assert!(!parts.last().unwrap().2, "last fragment has MF clear");
    let ip = Ipv4Packet::new_checked(&frags[0][14..]).unwrap();
    let u = UdpPacket::new_checked(&data[..]).unwrap();
    assert!(u.verify_checksum(ip.src(), ip.dst()), "UDP checksum of the reassembled datagram");
    u.payload().to_vec()
}

/// Reassemble untagged fragments (any order): (source, destination, L4
/// bytes of the datagram).
pub fn reassemble(frags: &[Vec<u8>]) -> (std::net::Ipv4Addr, std::net::Ipv4Addr, Vec<u8>) {
    let mut parts: Vec<(usize, Vec<u8>)> = frags
        .iter()
        .map(|f| {
            let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
            (usize::from(ip.frag_offset()), ip.payload().to_vec())
        })
        .collect();
    parts.sort_by_key(|p| p.0);
    let mut data = vec![];
    for (off, d) in &parts {
        assert_eq!(*off, data.len(), "contiguous fragments");
        data.extend_from_slice(d);
    }
    let ip = Ipv4Packet::new_checked(&frags[0][14..]).unwrap();
    (ip.src(), ip.dst(), data)
}
