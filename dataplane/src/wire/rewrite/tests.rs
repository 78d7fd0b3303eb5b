use super::*;
use crate::wire::build::{ipv4_offset, PacketBuilder};
use proptest::prelude::*;

const INSIDE: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const SERVER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 80);
const MAPPED: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
const ROUTER: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

fn b(src: Ipv4Addr, dst: Ipv4Addr) -> PacketBuilder {
    PacketBuilder::new([2; 6], [4; 6], src, dst)
}

/// The IPv4 packet of a built frame.
fn l3(frame: Vec<u8>) -> Vec<u8> {
    let o = ipv4_offset(&frame).unwrap();
    frame[o..].to_vec()
}

/// Every checksum of an IPv4 packet checked by a full recompute: the IP
/// header, TCP / UDP with the pseudo-header (UDP 0: none), ICMP over the
/// message and, for an ICMP error quoting a whole packet, that packet's.
fn checksums_ok(ip: &[u8]) -> bool {
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    if !checksum::verify(0, &ip[..ihl]) {
        return false;
    }
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let l4 = &ip[ihl..total];
    let (src, dst) = (&ip[12..16], &ip[16..20]);
    let pseudo = |proto: u8| {
        checksum::pseudo_header_v4(src.try_into().unwrap(), dst.try_into().unwrap(), proto, l4.len() as u16)
    };
    match ip[9] {
        6 => checksum::verify(pseudo(6), l4),
        17 => l4[6..8] == [0, 0] || checksum::verify(pseudo(17), l4),
        1 => checksum::verify(0, l4) && (!matches!(l4[0], 3 | 11) || l4.len() < 8 + 20 || checksums_ok(&l4[8..])),
        _ => true,
    }
}

fn addr(ip: &[u8], ep: Endpoint) -> Ipv4Addr {
    let o = ep.offsets().0;
    Ipv4Addr::new(ip[o], ip[o + 1], ip[o + 2], ip[o + 3])
}

#[test]
fn pat_outbound_tcp_and_back() {
    let orig = l3(b(INSIDE, SERVER).tcp(40000, 443, 1, 0, 0x02, 65535, &[2, 4, 5, 180], b""));
    let mut p = orig.clone();
    rewrite(&mut p, Endpoint::Source, MAPPED, Some(1030)).unwrap();
    assert_eq!(addr(&p, Endpoint::Source), MAPPED);
    assert_eq!(u16::from_be_bytes([p[20], p[21]]), 1030);
    assert_eq!(&p[40..44], &[2, 4, 5, 180], "MSS untouched");
    assert!(checksums_ok(&p));
    rewrite(&mut p, Endpoint::Source, INSIDE, Some(40000)).unwrap();
    assert_eq!(p, orig, "undone byte for byte");
    // The reply to the mapped port comes back to the inside host.
    let mut r = l3(b(SERVER, MAPPED).tcp(443, 1030, 9, 2, 0x12, 65535, &[], b"x"));
    rewrite(&mut r, Endpoint::Destination, INSIDE, Some(40000)).unwrap();
    assert_eq!(addr(&r, Endpoint::Destination), INSIDE);
    assert_eq!(u16::from_be_bytes([r[22], r[23]]), 40000);
    assert!(checksums_ok(&r));
}

#[test]
fn udp_zero_checksum_stays_zero() {
    let mut p = l3(b(INSIDE, SERVER).udp(5353, 53, b"query"));
    assert!(checksums_ok(&p));
    let c = u16::from_be_bytes([p[26], p[27]]);
    assert_ne!(c, 0);
    rewrite(&mut p, Endpoint::Source, MAPPED, Some(2000)).unwrap();
    assert!(checksums_ok(&p));
    // Without a checksum: 0 stays 0, the port still changes.
    let mut z = l3(b(INSIDE, SERVER).udp(5353, 53, b"query"));
    z[26] = 0;
    z[27] = 0;
    rewrite(&mut z, Endpoint::Source, MAPPED, Some(2000)).unwrap();
    assert_eq!(&z[26..28], &[0, 0]);
    assert_eq!(u16::from_be_bytes([z[20], z[21]]), 2000);
    assert!(checksums_ok(&z));
}

#[test]
fn icmp_echo_identifier_is_the_port() {
    let mut p = l3(b(INSIDE, SERVER).icmp(8, 0, (0x1234, 1), b"ping"));
    rewrite(&mut p, Endpoint::Source, MAPPED, Some(0x0400)).unwrap();
    assert_eq!(&p[24..26], &[0x04, 0x00]);
    assert!(checksums_ok(&p));
    let mut r = l3(b(SERVER, MAPPED).icmp(0, 0, (0x0400, 1), b"ping"));
    rewrite(&mut r, Endpoint::Destination, INSIDE, Some(0x1234)).unwrap();
    assert_eq!(&r[24..26], &[0x12, 0x34]);
    assert!(checksums_ok(&r));
}

#[test]
fn static_nat_changes_the_address_only() {
    let mut p = l3(b(SERVER, MAPPED).tcp(50000, 80, 1, 0, 0x02, 1000, &[], b""));
    rewrite(&mut p, Endpoint::Destination, INSIDE, None).unwrap();
    assert_eq!(addr(&p, Endpoint::Destination), INSIDE);
    assert_eq!(u16::from_be_bytes([p[22], p[23]]), 80);
    assert!(checksums_ok(&p));
    // GRE has no ports: the address only, a port is refused.
    let mut g = l3(b(INSIDE, SERVER).ip(47, &[0, 0, 0x08, 0]));
    let before = g.clone();
    assert_eq!(rewrite(&mut g, Endpoint::Source, MAPPED, Some(7)), Err(RewriteError::NoPorts));
    assert_eq!(g, before, "an error leaves the packet as it was");
    rewrite(&mut g, Endpoint::Source, MAPPED, None).unwrap();
    assert!(checksums_ok(&g));
}

#[test]
fn a_later_fragment_gets_the_address_only() {
    let mut p = l3(b(INSIDE, SERVER).udp(5353, 53, &[7; 64]));
    // Offset 8 (×8 bytes): no UDP header here.
    p[6] = 0;
    p[7] = 8;
    let c = checksum::checksum(&{
        let mut h = p[..20].to_vec();
        h[10] = 0;
        h[11] = 0;
        h
    });
    p[10..12].copy_from_slice(&c.to_be_bytes());
    let body = p[20..].to_vec();
    rewrite(&mut p, Endpoint::Source, MAPPED, Some(2000)).unwrap();
    assert_eq!(&p[20..], &body[..], "payload untouched");
    assert!(checksum::verify(0, &p[..20]));
}

/// An outside router's "port unreachable" about a PAT'ed UDP datagram,
/// addressed to the mapped address: the outer destination and the quoted
/// source go back to the inside host, every checksum stays right.
#[test]
fn icmp_error_about_a_translated_datagram() {
    let mut sent = l3(b(INSIDE, SERVER).udp(5353, 9999, b"hello"));
    rewrite(&mut sent, Endpoint::Source, MAPPED, Some(1500)).unwrap();
    let mut err = l3(b(ROUTER, MAPPED).icmp(3, 3, (0, 0), &sent));
    assert!(checksums_ok(&err));
    rewrite_icmp_error(&mut err, Endpoint::Destination, INSIDE, Some(5353)).unwrap();
    assert_eq!(addr(&err, Endpoint::Destination), INSIDE);
    let q = &err[28..];
    assert_eq!(addr(q, Endpoint::Source), INSIDE);
    assert_eq!(u16::from_be_bytes([q[20], q[21]]), 5353);
    assert!(checksums_ok(&err));
    let original = l3(b(INSIDE, SERVER).udp(5353, 9999, b"hello"));
    assert_eq!(q, &original[..], "the quote is what the host sent");
    // TCP quoted with its first 8 bytes only (the checksum not quoted).
    let mut seg = l3(b(INSIDE, SERVER).tcp(40000, 443, 5, 0, 0x02, 100, &[], b""));
    rewrite(&mut seg, Endpoint::Source, MAPPED, Some(1030)).unwrap();
    let mut ttl = l3(b(ROUTER, MAPPED).icmp(11, 0, (0, 0), &seg[..28]));
    rewrite_icmp_error(&mut ttl, Endpoint::Destination, INSIDE, Some(40000)).unwrap();
    assert!(checksum::verify(0, &ttl[20..]));
    assert!(checksum::verify(0, &ttl[28..48]), "quoted IP header");
    assert_eq!(u16::from_be_bytes([ttl[48], ttl[49]]), 40000);
    // Not an error message.
    let mut echo = l3(b(ROUTER, MAPPED).icmp(0, 0, (1, 1), b""));
    assert_eq!(rewrite_icmp_error(&mut echo, Endpoint::Destination, INSIDE, None), Err(RewriteError::NotIcmpError));
    assert_eq!(rewrite(&mut err, Endpoint::Destination, INSIDE, Some(1)), Err(RewriteError::NoPorts));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_rewrites_keep_checksums_and_undo(
        proto in prop_oneof![Just(6u8), Just(17u8), Just(1u8)],
        src in any::<u32>(), dst in any::<u32>(), sport in 1u16.., dport in 1u16..,
        new_addr in any::<u32>(), new_port in any::<u16>(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        dest_side in any::<bool>(),
    ) {
        let pb = b(Ipv4Addr::from(src), Ipv4Addr::from(dst));
        let orig = l3(match proto {
            6 => pb.tcp(sport, dport, 1, 2, 0x10, 100, &[], &payload),
            17 => pb.udp(sport, dport, &payload),
            _ => pb.icmp(8, 0, (sport, dport), &payload),
        });
        prop_assume!(checksums_ok(&orig));
        let ep = if dest_side { Endpoint::Destination } else { Endpoint::Source };
        let old_addr = addr(&orig, ep);
        let old_port = match (proto, ep) {
            (1, _) => sport,
            (_, Endpoint::Source) => sport,
            _ => dport,
        };
        let mut p = orig.clone();
        rewrite(&mut p, ep, Ipv4Addr::from(new_addr), Some(new_port)).unwrap();
        prop_assert!(checksums_ok(&p));
        prop_assert_eq!(addr(&p, ep), Ipv4Addr::from(new_addr));
        rewrite(&mut p, ep, old_addr, Some(old_port)).unwrap();
        if proto == 17 && orig[26..28] == [0, 0] {
            return Ok(());
        }
        prop_assert_eq!(p, orig);
    }

    /// The fast path's `rewrite_transport` writes exactly what `rewrite`
    /// writes, for any TCP or UDP datagram, either endpoint, with or
    /// without a port (a UDP checksum 0 included).
    #[test]
    fn rewrite_transport_is_rewrite(
        tcp in any::<bool>(), src in any::<u32>(), dst in any::<u32>(), sport in any::<u16>(), dport in any::<u16>(),
        new_addr in any::<u32>(), new_port in proptest::option::of(any::<u16>()),
        payload in proptest::collection::vec(any::<u8>(), 0..40), dest_side in any::<bool>(), zero_udp in any::<bool>(),
    ) {
        let pb = b(Ipv4Addr::from(src), Ipv4Addr::from(dst));
        let mut orig = l3(if tcp { pb.tcp(sport, dport, 1, 2, 0x10, 100, &[], &payload) } else { pb.udp(sport, dport, &payload) });
        if !tcp && zero_udp {
            orig[26] = 0;
            orig[27] = 0;
        }
        let ep = if dest_side { Endpoint::Destination } else { Endpoint::Source };
        let (mut a, mut b) = (orig.clone(), orig.clone());
        rewrite(&mut a, ep, Ipv4Addr::from(new_addr), new_port).unwrap();
        rewrite_transport(&mut b, 20, if tcp { 6 } else { 17 }, ep, Ipv4Addr::from(new_addr), new_port).unwrap();
        prop_assert_eq!(a, b);
        // Too short for its headers, or no ports: refused, unchanged.
        let mut short = orig[..27].to_vec();
        prop_assert!(rewrite_transport(&mut short, 20, 6, ep, Ipv4Addr::from(new_addr), new_port).is_err());
        prop_assert_eq!(&short[..], &orig[..27]);
        prop_assert!(rewrite_transport(&mut orig.clone(), 20, 1, ep, Ipv4Addr::from(new_addr), new_port).is_err());
    }

    #[test]
    fn any_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..120), port in proptest::option::of(any::<u16>())) {
        if let Some(v) = bytes.first_mut() {
            *v = 0x45; // mostly IPv4 with a 20-byte header
        }
        let before = bytes.clone();
        if rewrite(&mut bytes, Endpoint::Source, MAPPED, port).is_err() {
            prop_assert_eq!(&bytes, &before);
        }
        let before = bytes.clone();
        if rewrite_icmp_error(&mut bytes, Endpoint::Destination, INSIDE, port).is_err() {
            prop_assert_eq!(&bytes, &before);
        }
    }
}

#[test]
fn endpoints_of_each_kind() {
    let t = l3(b(INSIDE, SERVER).tcp(40000, 443, 1, 0, 0x02, 100, &[], b""));
    let e = endpoints(&t).unwrap();
    assert_eq!(
        (e.src, e.dst, e.proto, e.sport, e.dport, e.icmp_type, e.later_fragment),
        (INSIDE, SERVER, 6, 40000, 443, None, false)
    );
    let p = l3(b(INSIDE, SERVER).icmp(8, 0, (0x1234, 9), b""));
    let e = endpoints(&p).unwrap();
    assert_eq!((e.sport, e.dport, e.icmp_type), (0x1234, 0x1234, Some(8)));
    let mut f = l3(b(INSIDE, SERVER).udp(1, 2, &[0; 16]));
    f[7] = 1; // offset 8 bytes: a later fragment
    let e = endpoints(&f).unwrap();
    assert_eq!((e.sport, e.dport, e.later_fragment), (0, 0, true));
    assert_eq!(endpoints(&t[..19]), None);
    // An ICMP error's quote.
    let err = l3(b(ROUTER, MAPPED).icmp(3, 3, (0, 0), &t[..28]));
    let q = icmp_quote(&err).unwrap();
    assert_eq!(endpoints(q).map(|e| (e.src, e.sport)), Some((INSIDE, 40000)));
    assert_eq!(icmp_quote(&p), None, "an echo quotes nothing");
    assert_eq!(icmp_quote(&t), None);
}
