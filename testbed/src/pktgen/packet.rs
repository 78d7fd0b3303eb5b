//! Frames the generator sends and the parse of what it receives, on plain
//! byte buffers (no DPDK), through the dataplane's wire views.
//!
//! Every generated IPv4 packet carries a 16-byte [`Stamp`] at the start of
//! its L4 payload (UDP, TCP data, or the first fragment of a fragmented
//! datagram): magic, sequence number and the TSC at transmission. The
//! receiver finds it again with [`parse`] and turns it into a latency.
//! UDP checksums are 0 ("none", RFC 768) so a stamp can be written into a
//! prebuilt template without touching the checksum; TCP checksums are
//! recomputed whenever a segment is patched ([`patch_tcp`]).
//!
//! Frames are untagged Ethernet II, IPv4 without options; `frame_len` is
//! the Ethernet frame length without FCS (60..=1514 for one segment).

use dataplane::conntrack::tcp_flags;
use dataplane::types::ip_proto;
use dataplane::wire::arp::{ArpPacket, ArpRepr, Operation};
use dataplane::wire::build::{self, PacketBuilder};
use dataplane::wire::ethernet::{self, ethertype, EthernetFrame};
use dataplane::wire::ipv4::{Ipv4Packet, FLAG_MF};
use dataplane::wire::tcp::TcpPacket;
use dataplane::wire::udp::UdpPacket;
use std::net::Ipv4Addr;

/// "CFWP" in ASCII: marks a payload stamp.
pub const STAMP_MAGIC: u32 = 0x4346_5750;
/// Bytes of a stamp.
pub const STAMP_LEN: usize = 16;
/// Ethernet + IPv4 (no options).
pub const L3_OFFSET: usize = 14;
pub const L4_OFFSET: usize = 34;
/// Smallest frame the generator makes (Ethernet minimum without FCS).
pub const MIN_FRAME: usize = ethernet::MIN_FRAME_LEN;
/// Largest single-segment frame (1500-byte IP MTU).
pub const MAX_FRAME: usize = 1514;

/// The payload stamp.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub seq: u32,
    pub tsc: u64,
}

impl Stamp {
    pub fn write(&self, buf: &mut [u8]) {
        buf[0..4].copy_from_slice(&STAMP_MAGIC.to_be_bytes());
        buf[4..8].copy_from_slice(&self.seq.to_be_bytes());
        buf[8..16].copy_from_slice(&self.tsc.to_le_bytes());
    }
    pub fn read(buf: &[u8]) -> Option<Stamp> {
        if buf.len() < STAMP_LEN || buf[0..4] != STAMP_MAGIC.to_be_bytes() {
            return None;
        }
        Some(Stamp {
            seq: u32::from_be_bytes(buf[4..8].try_into().ok()?),
            tsc: u64::from_le_bytes(buf[8..16].try_into().ok()?),
        })
    }
}

/// Addresses of one direction of traffic.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Endpoints {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
}

impl Endpoints {
    fn builder(&self) -> PacketBuilder {
        PacketBuilder::new(self.src_mac, self.dst_mac, self.src, self.dst)
    }
}

/// Clamp a requested frame length to what one segment can be, leaving room
/// for a stamp after `l4_header` bytes.
pub fn clamp_frame_len(frame_len: usize, l4_header: usize) -> usize {
    frame_len.clamp(MIN_FRAME.max(L4_OFFSET + l4_header + STAMP_LEN), MAX_FRAME)
}

/// A UDP frame of `frame_len` bytes (clamped) with a zero stamp and no UDP
/// checksum; patch the stamp with [`stamp_udp`].
pub fn udp_frame(ep: &Endpoints, sport: u16, dport: u16, frame_len: usize) -> Vec<u8> {
    let len = clamp_frame_len(frame_len, 8);
    let payload = vec![0u8; len - L4_OFFSET - 8];
    let mut f = ep.builder().udp(sport, dport, &payload);
    UdpPacket::new_unchecked(&mut f[L4_OFFSET..]).set_checksum(0);
    Stamp { seq: 0, tsc: 0 }.write(&mut f[L4_OFFSET + 8..]);
    f
}

/// Writes a stamp into a frame made by [`udp_frame`].
#[inline]
pub fn stamp_udp(frame: &mut [u8], stamp: Stamp) {
    stamp.write(&mut frame[L4_OFFSET + 8..]);
}

/// A TCP segment with `payload_len` bytes of payload (a stamp first when
/// it fits), correct checksum, padded to the Ethernet minimum.
#[allow(clippy::too_many_arguments)]
pub fn tcp_frame(
    ep: &Endpoints,
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    payload_len: usize,
    stamp: Option<Stamp>,
) -> Vec<u8> {
    let mut payload = vec![0u8; payload_len];
    if let Some(s) = stamp {
        if payload_len >= STAMP_LEN {
            s.write(&mut payload);
        }
    }
    let mut f = ep.builder().tcp(sport, dport, seq, ack, flags, window, &[], &payload);
    if f.len() < MIN_FRAME {
        f.resize(MIN_FRAME, 0);
    }
    f
}

/// TCP payload bytes that make a frame of `frame_len` (clamped), for data
/// segments.
pub fn tcp_payload_for(frame_len: usize) -> usize {
    clamp_frame_len(frame_len, 20) - L4_OFFSET - 20
}

/// Rewrites seq, ack, flags and (if the payload has room) the stamp of a
/// TCP frame made by [`tcp_frame`], and recomputes its checksum.
pub fn patch_tcp(frame: &mut [u8], seq: u32, ack: u32, flags: u8, stamp: Option<Stamp>) {
    let (src, dst, ip_len) = {
        let ip = Ipv4Packet::new_unchecked(&mut frame[L3_OFFSET..]);
        (ip.src(), ip.dst(), ip.total_len() as usize)
    };
    let seg_end = (L3_OFFSET + ip_len).min(frame.len());
    let mut t = TcpPacket::new_unchecked(&mut frame[L4_OFFSET..seg_end]);
    t.set_seq(seq);
    t.set_ack(ack);
    t.set_flags(flags);
    if let Some(s) = stamp {
        let hl = t.header_len();
        let seg = &mut frame[L4_OFFSET..seg_end];
        if seg.len() >= hl + STAMP_LEN {
            s.write(&mut seg[hl..]);
        }
    }
    TcpPacket::new_unchecked(&mut frame[L4_OFFSET..seg_end]).fill_checksum(src, dst);
}

/// The fragments of one UDP datagram of `datagram_len` bytes of UDP
/// payload (stamp first), each fragment carrying at most `frag_payload`
/// bytes of IP payload (rounded down to a multiple of 8, at least 8).
/// The UDP checksum is 0; the stamp sits in the first fragment.
pub fn udp_fragments(
    ep: &Endpoints,
    sport: u16,
    dport: u16,
    ident: u16,
    datagram_len: usize,
    frag_payload: usize,
    stamp: Stamp,
) -> Vec<Vec<u8>> {
    let mut payload = vec![0u8; datagram_len.max(STAMP_LEN)];
    stamp.write(&mut payload);
    let whole = ep.builder().udp(sport, dport, &payload);
    let l4 = &whole[L4_OFFSET..];
    let mut l4 = l4.to_vec();
    UdpPacket::new_unchecked(&mut l4[..]).set_checksum(0);
    let step = (frag_payload / 8).max(1) * 8;
    let mut out = Vec::new();
    let mut off = 0usize;
    while off < l4.len() {
        let end = (off + step).min(l4.len());
        let mut f = ep.builder().ip(ip_proto::UDP, &l4[off..end]);
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut f[L3_OFFSET..]);
            ip.set_ident(ident);
            ip.set_flags_frag(if end < l4.len() { FLAG_MF } else { 0 }, off as u16);
            ip.fill_checksum();
        }
        if f.len() < MIN_FRAME {
            f.resize(MIN_FRAME, 0);
        }
        out.push(f);
        off = end;
    }
    out
}

/// What a received frame is, as far as the generator cares.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    Arp {
        operation: Operation,
        sender_mac: [u8; 6],
        sender_ip: Ipv4Addr,
        target_ip: Ipv4Addr,
    },
    Udp {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        sport: u16,
        dport: u16,
        stamp: Option<Stamp>,
    },
    /// A non-first fragment (no L4 header).
    Fragment,
    Tcp {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        sport: u16,
        dport: u16,
        seq: u32,
        ack: u32,
        flags: u8,
        payload_len: u32,
        stamp: Option<Stamp>,
    },
    Other,
}

/// Parses a received frame (untagged Ethernet, IPv4 or ARP).
pub fn parse(frame: &[u8]) -> Parsed {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return Parsed::Other;
    };
    match eth.ethertype() {
        ethertype::ARP => match ArpPacket::new_checked(eth.payload()) {
            Ok(a) => {
                let r = ArpRepr::parse(&a);
                Parsed::Arp {
                    operation: r.operation,
                    sender_mac: r.sender_mac,
                    sender_ip: r.sender_ip,
                    target_ip: r.target_ip,
                }
            }
            Err(_) => Parsed::Other,
        },
        ethertype::IPV4 => {
            let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
                return Parsed::Other;
            };
            if ip.frag_offset() != 0 {
                return Parsed::Fragment;
            }
            let (src, dst) = (ip.src(), ip.dst());
            match ip.protocol() {
                // A first fragment holds less than its UDP length says:
                // read its header (8 bytes present) without the length check.
                ip_proto::UDP if ip.more_frags() && ip.payload().len() >= 8 => {
                    let mut h = [0u8; 8];
                    h.copy_from_slice(&ip.payload()[..8]);
                    let u = UdpPacket::new_unchecked(&mut h[..]);
                    Parsed::Udp {
                        src,
                        dst,
                        sport: u.src_port(),
                        dport: u.dst_port(),
                        stamp: Stamp::read(&ip.payload()[8..]),
                    }
                }
                ip_proto::UDP => match UdpPacket::new_checked(ip.payload()) {
                    Ok(u) => Parsed::Udp {
                        src,
                        dst,
                        sport: u.src_port(),
                        dport: u.dst_port(),
                        stamp: Stamp::read(ip.payload().get(8..).unwrap_or(&[])),
                    },
                    Err(_) => Parsed::Other,
                },
                ip_proto::TCP => match TcpPacket::new_checked(ip.payload()) {
                    Ok(t) => Parsed::Tcp {
                        src,
                        dst,
                        sport: t.src_port(),
                        dport: t.dst_port(),
                        seq: t.seq(),
                        ack: t.ack(),
                        flags: t.flags(),
                        payload_len: t.payload().len() as u32,
                        stamp: Stamp::read(t.payload()),
                    },
                    Err(_) => Parsed::Other,
                },
                _ => Parsed::Other,
            }
        }
        _ => Parsed::Other,
    }
}

/// An ARP request from `me` for `target`.
pub fn arp_request(my_mac: [u8; 6], my_ip: Ipv4Addr, target: Ipv4Addr) -> Vec<u8> {
    let mut f = build::arp(
        my_mac,
        ethernet::BROADCAST,
        None,
        Operation::Request,
        my_mac,
        my_ip,
        [0; 6],
        target,
    );
    f.resize(MIN_FRAME, 0);
    f
}

/// The reply to an ARP request for `my_ip`, or `None` if `frame` is not one.
pub fn arp_reply(frame: &[u8], my_mac: [u8; 6], my_ip: Ipv4Addr) -> Option<Vec<u8>> {
    arp_reply_range(frame, my_mac, my_ip, 1)
}

/// The reply to an ARP request for any of the `count` addresses from
/// `first` (a responder standing in for many servers), or `None`.
pub fn arp_reply_range(frame: &[u8], my_mac: [u8; 6], first: Ipv4Addr, count: u32) -> Option<Vec<u8>> {
    match parse(frame) {
        Parsed::Arp {
            operation: Operation::Request,
            sender_mac,
            sender_ip,
            target_ip,
        } if u32::from(target_ip).wrapping_sub(u32::from(first)) < count.max(1) => {
            let my_ip = target_ip;
            let mut f = build::arp(
                my_mac,
                sender_mac,
                None,
                Operation::Reply,
                my_mac,
                my_ip,
                sender_mac,
                sender_ip,
            );
            f.resize(MIN_FRAME, 0);
            Some(f)
        }
        _ => None,
    }
}

/// The TCP flags a SYN flood sends.
pub const SYN: u8 = tcp_flags::SYN;

/// Flows per source address of a sequential SYN flood: source ports
/// 1024..51024 of one address, then the next address.
pub const SYN_FLOOD_PORTS: usize = 50_000;

/// Where the SYNs of `--mode synflood` come from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FloodSource {
    /// Flow `i` from `ep.src + i / SYN_FLOOD_PORTS`, port `1024 + i %
    /// SYN_FLOOD_PORTS`: addresses a firewall may well route behind the
    /// sending interface (not spoofed, or spoofed within the network).
    Sequential,
    /// Flow `i` from an address and port drawn from `seed` and `i`
    /// (splitmix64), anywhere in unicast space but 0/8 and 127/8, as
    /// `hping3 --rand-source` does: a spoofed flood whose sources no
    /// reverse-path check of an inside interface lets through.
    Random { seed: u64 },
}

/// SplitMix64's output function (Steele, Lea, Flood 2014): a stateless,
/// well-mixed 64-bit hash of `x`.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Source address and port of flow `i` of a random-source flood: a pure
/// function of `(seed, i)`, so a run repeats.
pub fn random_source(seed: u64, i: usize) -> (Ipv4Addr, u16) {
    let mut k = 0u64;
    loop {
        let h = splitmix64(seed ^ splitmix64(i as u64) ^ k);
        let a = Ipv4Addr::from((h >> 32) as u32);
        let first = a.octets()[0];
        // Unicast (below 224/4), neither "this network" nor loopback.
        if first != 0 && first != 127 && first < 224 {
            return (a, 1024 + (h as u16 % (65535 - 1024)));
        }
        k += 1;
    }
}

/// Frame `i` of a SYN flood at `ep.dst:dport` from `source` (a checksummed
/// SYN, Ethernet minimum length; `ep.src` is the sequential base).
pub fn syn_flood_frame(ep: &Endpoints, i: usize, dport: u16, source: FloodSource) -> Vec<u8> {
    let (src, sport) = match source {
        FloodSource::Sequential => (
            Ipv4Addr::from(u32::from(ep.src).wrapping_add((i / SYN_FLOOD_PORTS) as u32)),
            1024 + (i % SYN_FLOOD_PORTS) as u16,
        ),
        FloodSource::Random { seed } => random_source(seed, i),
    };
    let seq = (i as u32).wrapping_mul(7919);
    tcp_frame(&Endpoints { src, ..*ep }, sport, dport, seq, 0, SYN, 64240, 0, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::wire::checksum;

    fn ep() -> Endpoints {
        Endpoints {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: Ipv4Addr::new(198, 18, 1, 10),
            dst: Ipv4Addr::new(198, 19, 0, 1),
        }
    }

    fn ip_ok(f: &[u8]) -> Ipv4Packet<&[u8]> {
        let ip = Ipv4Packet::new_checked(&f[L3_OFFSET..]).expect("ipv4");
        assert!(ip.verify_checksum());
        ip
    }

    #[test]
    fn udp_frames_have_the_asked_length_and_carry_a_stamp() {
        for want in [0, 60, 64, 128, 512, 1024, 1514, 9000] {
            let mut f = udp_frame(&ep(), 1234, 9, want);
            assert_eq!(f.len(), want.clamp(60, 1514), "asked {want}");
            let ip = ip_ok(&f);
            assert_eq!(ip.total_len() as usize, f.len() - 14);
            stamp_udp(&mut f, Stamp { seq: 7, tsc: 0x1122_3344_5566 });
            match parse(&f) {
                Parsed::Udp { src, dst, sport, dport, stamp } => {
                    assert_eq!((src, dst, sport, dport), (ep().src, ep().dst, 1234, 9));
                    assert_eq!(stamp, Some(Stamp { seq: 7, tsc: 0x1122_3344_5566 }));
                }
                p => panic!("{p:?}"),
            }
            // Checksum "none" stays valid whatever the stamp.
            assert_eq!(UdpPacket::new_checked(&f[L4_OFFSET..]).unwrap().checksum(), 0);
        }
    }

    #[test]
    fn patched_tcp_segments_keep_a_valid_checksum() {
        let mut f = tcp_frame(&ep(), 40000, 80, 1, 0, SYN, 65535, 0, None);
        assert_eq!(f.len(), 60);
        patch_tcp(&mut f, 100, 200, tcp_flags::ACK, None);
        let ip = ip_ok(&f);
        let t = TcpPacket::new_checked(ip.payload()).unwrap();
        assert!(t.verify_checksum(ep().src, ep().dst));
        assert_eq!((t.seq(), t.ack(), t.flags()), (100, 200, tcp_flags::ACK));

        let n = tcp_payload_for(256);
        assert_eq!(n, 256 - 54);
        let mut d = tcp_frame(&ep(), 40000, 80, 1, 1, tcp_flags::ACK, 65535, n, None);
        assert_eq!(d.len(), 256);
        let s = Stamp { seq: 3, tsc: 99 };
        patch_tcp(&mut d, 5000, 6000, tcp_flags::ACK | tcp_flags::PSH, Some(s));
        match parse(&d) {
            Parsed::Tcp { seq, ack, payload_len, stamp, .. } => {
                assert_eq!((seq, ack, payload_len, stamp), (5000, 6000, n as u32, Some(s)));
            }
            p => panic!("{p:?}"),
        }
        let ip = ip_ok(&d);
        assert!(TcpPacket::new_checked(ip.payload()).unwrap().verify_checksum(ep().src, ep().dst));
    }

    #[test]
    fn fragments_reassemble_to_the_datagram() {
        let s = Stamp { seq: 1, tsc: 42 };
        for (len, fp) in [(3000usize, 1480usize), (100, 8), (1472, 1480), (4000, 1000), (16, 1480)] {
            let frags = udp_fragments(&ep(), 5000, 6000, 77, len, fp, s);
            let mut l4 = Vec::new();
            for (i, f) in frags.iter().enumerate() {
                let ip = ip_ok(f);
                assert_eq!(ip.ident(), 77);
                assert_eq!(ip.frag_offset() as usize, l4.len(), "fragment {i}");
                assert_eq!(ip.more_frags(), i + 1 < frags.len());
                assert!(ip.payload().len() <= (fp / 8).max(1) * 8);
                if i + 1 < frags.len() {
                    assert_eq!(ip.payload().len() % 8, 0);
                }
                l4.extend_from_slice(ip.payload());
                assert!(f.len() >= 60 && f.len() <= 1514);
            }
            assert_eq!(l4.len(), 8 + len.max(STAMP_LEN));
            let u = UdpPacket::new_checked(&l4[..]).unwrap();
            assert_eq!(u.len() as usize, l4.len());
            assert_eq!(Stamp::read(u.payload()), Some(s));
            // The first fragment alone shows the stamp; the others are fragments.
            // (A first fragment of 8 bytes holds the UDP header only.)
            let want = (fp >= 8 + STAMP_LEN).then_some(s);
            assert!(matches!(parse(&frags[0]), Parsed::Udp { stamp, sport: 5000, .. } if stamp == want));
            for f in &frags[1..] {
                assert_eq!(parse(f), Parsed::Fragment);
            }
        }
    }

    #[test]
    fn answers_arp_for_its_own_address_only() {
        let me = Ipv4Addr::new(198, 18, 1, 10);
        let mac = [2, 0, 0, 0, 0, 9];
        let req = arp_request([2, 0, 0, 0, 0, 1], Ipv4Addr::new(198, 18, 1, 1), me);
        let rep = arp_reply(&req, mac, me).expect("reply");
        match parse(&rep) {
            Parsed::Arp { operation, sender_mac, sender_ip, target_ip } => {
                assert_eq!(operation, Operation::Reply);
                assert_eq!((sender_mac, sender_ip), (mac, me));
                assert_eq!(target_ip, Ipv4Addr::new(198, 18, 1, 1));
            }
            p => panic!("{p:?}"),
        }
        assert_eq!(&rep[0..6], &[2, 0, 0, 0, 0, 1]);
        assert!(arp_reply(&req, mac, Ipv4Addr::new(198, 18, 1, 11)).is_none());
        assert!(arp_reply(&rep, mac, me).is_none());
        // A range: .10 is answered within .8-.11 but not .8-.9 or from .11.
        let base = Ipv4Addr::new(198, 18, 1, 8);
        assert!(arp_reply_range(&req, mac, base, 4).is_some());
        assert!(arp_reply_range(&req, mac, base, 2).is_none());
        assert!(arp_reply_range(&req, mac, Ipv4Addr::new(198, 18, 1, 11), 100).is_none());
    }

    #[test]
    fn stamps_need_their_magic_and_length() {
        let mut b = [0u8; 16];
        assert!(Stamp::read(&b).is_none());
        Stamp { seq: 1, tsc: 2 }.write(&mut b);
        assert!(Stamp::read(&b[..15]).is_none());
        assert_eq!(Stamp::read(&b), Some(Stamp { seq: 1, tsc: 2 }));
        let _ = checksum::checksum(&b);
    }

    fn syn_of(f: &[u8]) -> (Ipv4Addr, u16) {
        assert_eq!(f.len(), MIN_FRAME);
        let ip = ip_ok(f);
        let t = TcpPacket::new_checked(ip.payload()).expect("tcp");
        assert!(t.verify_checksum(ip.src(), ip.dst()));
        match parse(f) {
            Parsed::Tcp { src, dst, sport, dport, flags, payload_len: 0, .. } => {
                assert_eq!((dst, dport, flags), (ep().dst, 8080, SYN));
                (src, sport)
            }
            p => panic!("{p:?}"),
        }
    }

    #[test]
    fn sequential_syn_flood_walks_ports_then_addresses() {
        for (i, want) in [
            (0, (Ipv4Addr::new(198, 18, 1, 10), 1024)),
            (49_999, (Ipv4Addr::new(198, 18, 1, 10), 51_023)),
            (50_000, (Ipv4Addr::new(198, 18, 1, 11), 1024)),
            (120_001, (Ipv4Addr::new(198, 18, 1, 12), 21_025)),
        ] {
            assert_eq!(syn_of(&syn_flood_frame(&ep(), i, 8080, FloodSource::Sequential)), want, "flow {i}");
        }
    }

    #[test]
    fn random_syn_flood_spoofs_unicast_sources_and_repeats_per_seed() {
        let src = FloodSource::Random { seed: 15 };
        let mut addrs = std::collections::HashSet::new();
        let mut slash8 = std::collections::HashSet::new();
        for i in 0..4096 {
            let f = syn_flood_frame(&ep(), i, 8080, src);
            let (a, p) = syn_of(&f);
            let o = a.octets();
            assert!(o[0] != 0 && o[0] != 127 && o[0] < 224, "flow {i}: {a}");
            assert!(p >= 1024, "flow {i}: port {p}");
            assert_eq!(f, syn_flood_frame(&ep(), i, 8080, src), "flow {i} not repeatable");
            addrs.insert(a);
            slash8.insert(o[0]);
        }
        // Spread over the space (4096 draws of 2^32: collisions are rare),
        // hardly ever in the sender's own network.
        assert!(addrs.len() > 4090, "{} distinct sources", addrs.len());
        assert!(slash8.len() > 200, "{} distinct /8s", slash8.len());
        let own = addrs.iter().filter(|a| a.octets()[..3] == ep().src.octets()[..3]).count();
        assert!(own <= 1, "{own} sources in the sender's /24");
        // Another seed, other sources.
        let other = syn_flood_frame(&ep(), 0, 8080, FloodSource::Random { seed: 16 });
        assert_ne!(syn_of(&other), syn_of(&syn_flood_frame(&ep(), 0, 8080, src)));
    }

    #[test]
    fn parse_never_panics_on_truncations() {
        let f = tcp_frame(&ep(), 1, 2, 3, 4, SYN, 5, 64, Some(Stamp { seq: 1, tsc: 1 }));
        for n in 0..=f.len() {
            let _ = parse(&f[..n]);
        }
    }
}
