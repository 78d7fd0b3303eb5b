//! IPv6 on a single node (issue 16; docs/ipv6.md): Neighbor Discovery for
//! our addresses and next hops, echo, forwarding with connection tracking
//! and the security levels, hop limit, ICMPv6 errors (time exceeded, no
//! route, packet too big), and the hostile cases the stage drops, counted.
//! Frames are built byte by byte here and checked byte by byte.

mod common;
mod v6util;

use common::*;
use v6util::*;
use dataplane::buf::VecBuf;
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::pipeline::{Ipv6Spec, Pipeline, PipelineConfig, Route6Spec, Verdict};
use dataplane::wire::icmpv6::{self, msg_type};
use dataplane::{DropReason, PortId, Timestamp};
use proptest::prelude::*;
use std::net::Ipv6Addr;


fn in6() -> Ipv6Addr {
    a("2001:db8:1::1")
}
fn out6() -> Ipv6Addr {
    a("2001:db8:2::1")
}
fn host6() -> Ipv6Addr {
    a("2001:db8:1::10")
}
fn gw6() -> Ipv6Addr {
    a("2001:db8:2::fe")
}
fn server6() -> Ipv6Addr {
    a("2001:db8:99::80")
}

fn spec() -> Ipv6Spec {
    Ipv6Spec {
        addresses: vec![("inside".into(), in6(), 64), ("outside".into(), out6(), 64)],
        routes: vec![Route6Spec { destination: Ipv6Addr::UNSPECIFIED, prefix_len: 0, via: gw6() }],
    }
}

fn v6_pipeline(cfg: PipelineConfig, spec: &Ipv6Spec) -> Pipeline {
    let mut p = Pipeline::new(cfg).unwrap();
    p.set_ipv6(spec).unwrap();
    p
}

fn run(p: &mut Pipeline, port: PortId, f: &[u8]) -> (Verdict, Vec<u8>) {
    let mut b = VecBuf::with_room(f, 64, 64);
    let v = p.process(Timestamp::from_secs(10), port, &mut b);
    (v, b.to_vec())
}

fn generated(p: &mut Pipeline) -> Vec<(PortId, Vec<u8>)> {
    let mut g = vec![];
    p.drain_generated(|port, f| g.push((port, f.to_vec())));
    g
}

#[test]
fn a_solicitation_for_our_address_is_answered_and_teaches_its_sender() {
    let mut p = v6_pipeline(config(), &spec());
    let (v, out) = run(&mut p, IN_PORT, &ns(host6(), HOST_MAC, in6()));
    assert_eq!(v, Verdict::Forward(IN_PORT));
    assert_eq!((out[0..6].to_vec(), out[6..12].to_vec()), (HOST_MAC.to_vec(), IN_MAC.to_vec()));
    let (src, dst, hlim, nh, body) = ip6(&out);
    assert_eq!((src, dst, hlim, nh), (in6(), host6(), 255, 58));
    assert!(icmpv6::verify(src, dst, body));
    let nd = icmpv6::parse_nd(body).unwrap();
    assert_eq!(
        nd,
        icmpv6::Nd {
            msg_type: msg_type::NEIGHBOR_ADVERT,
            flags: icmpv6::NA_SOLICITED | icmpv6::NA_OVERRIDE,
            target: in6(),
            lladdr: Some(IN_MAC)
        }
    );
    // The link-local address answers too (derived from the MAC).
    let ll = icmpv6::link_local(IN_MAC);
    let (v, out) = run(&mut p, IN_PORT, &ns(a("fe80::10"), HOST_MAC, ll));
    assert_eq!(v, Verdict::Forward(IN_PORT));
    assert_eq!(ip6(&out).0, ll);
    let nd = p.nd_entries(Timestamp::from_secs(10));
    assert!(nd.iter().any(|e| e.ip == host6() && e.state == "resolved"), "{nd:?}");
    let c = p.counters().ipv6.path;
    assert_eq!((c.solicitations_received, c.advertisements_sent), (2, 2));
}

#[test]
fn hostile_neighbour_discovery_is_dropped_and_counted() {
    let mut p = v6_pipeline(config(), &spec());
    // Hop limit not 255 (from off the link).
    let mut f = ns(host6(), HOST_MAC, in6());
    f[21] = 64;
    assert_eq!(run(&mut p, IN_PORT, &f).0, Verdict::Drop(DropReason::NdInvalid));
    // A target that is not ours: to its own group, not ours (another
    // host's business), or to ours.
    assert_eq!(
        run(&mut p, IN_PORT, &ns(host6(), HOST_MAC, a("2001:db8:1::99"))).0,
        Verdict::Drop(DropReason::Ipv6BadDestination)
    );
    let mut f = ns(host6(), HOST_MAC, a("2001:db8:1::99"));
    f[0..6].copy_from_slice(&IN_MAC);
    let mut g = f.clone();
    // Sent to our solicited-node group with a foreign target inside.
    g[38..54].copy_from_slice(&icmpv6::solicited_node(in6()).octets());
    let body = icmp(host6(), icmpv6::solicited_node(in6()), g[54..].to_vec());
    g[54..].copy_from_slice(&body);
    assert_eq!(run(&mut p, IN_PORT, &g).0, Verdict::Drop(DropReason::NdInvalid));
    // A bad checksum.
    let mut f = ns(host6(), HOST_MAC, in6());
    f[60] ^= 1;
    assert_eq!(run(&mut p, IN_PORT, &f).0, Verdict::Drop(DropReason::IcmpBadChecksum));
    // An unsolicited advertisement for a neighbour nobody asked about
    // creates nothing.
    let (v, _) = run(&mut p, OUT_PORT, &na(a("2001:db8:2::77"), [2, 0, 0, 0, 2, 0x77], out6(), OUT_MAC));
    assert_eq!(v, Verdict::Drop(DropReason::NdConsumed));
    assert!(p.nd_entries(Timestamp::from_secs(10)).is_empty());
    let c = p.counters().ipv6.path;
    assert_eq!((c.nd_invalid, c.nd_ignored), (3, 1));
}

#[test]
fn echo_to_our_address_is_answered() {
    let mut p = v6_pipeline(config(), &spec());
    let body = icmp(host6(), in6(), echo(7, 1, b"abcdefgh"));
    let (v, out) = run(&mut p, IN_PORT, &frame(HOST_MAC, IN_MAC, host6(), in6(), 64, 58, &body));
    assert_eq!(v, Verdict::Forward(IN_PORT));
    let (src, dst, _, nh, b) = ip6(&out);
    assert_eq!((src, dst, nh, b[0]), (in6(), host6(), 58, msg_type::ECHO_REPLY));
    assert!(icmpv6::verify(src, dst, b));
    assert_eq!(&b[4..], &[0, 7, 0, 1, b'a', b'b', b'c', b'd', b'e', b'f', b'g', b'h']);
}

/// The inside host's connection out: the gateway is solicited and the SYN
/// waits for it; the SYN-ACK finds the connection and waits for the host
/// in turn; an outside host's own SYN in is denied (security levels).
#[test]
fn a_connection_out_is_forwarded_after_neighbour_discovery_and_one_in_is_denied() {
    let mut p = v6_pipeline(config(), &spec());
    let syn = frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 6, &tcp(host6(), server6(), 40000, 80, 1000, 0, SYN));
    assert_eq!(run(&mut p, IN_PORT, &syn).0, Verdict::Consumed, "held for the gateway");
    let g = generated(&mut p);
    assert_eq!(g.len(), 1, "one solicitation");
    let (port, f) = &g[0];
    assert_eq!(*port, OUT_PORT);
    assert_eq!(f[0..6], icmpv6::multicast_mac(icmpv6::solicited_node(gw6())));
    let (src, dst, hlim, _, body) = ip6(f);
    assert_eq!((src, dst, hlim), (out6(), icmpv6::solicited_node(gw6()), 255));
    assert_eq!(icmpv6::parse_nd(body).unwrap().target, gw6());
    // The gateway answers: the SYN leaves, its hop limit one less.
    assert_eq!(run(&mut p, OUT_PORT, &na(gw6(), GW_MAC, out6(), OUT_MAC)).0, Verdict::Drop(DropReason::NdConsumed));
    let g = generated(&mut p);
    assert_eq!(g.len(), 1, "the held SYN");
    let (port, f) = &g[0];
    assert_eq!((*port, f[0..6].to_vec(), f[6..12].to_vec()), (OUT_PORT, GW_MAC.to_vec(), OUT_MAC.to_vec()));
    let (src, dst, hlim, nh, seg) = ip6(f);
    assert_eq!((src, dst, hlim, nh), (host6(), server6(), 63, 6));
    assert_eq!(seg, &tcp(host6(), server6(), 40000, 80, 1000, 0, SYN)[..]);
    // The SYN-ACK: tracked, held for the host, which is solicited.
    let synack = frame(GW_MAC, OUT_MAC, server6(), host6(), 60, 6, &tcp(server6(), host6(), 80, 40000, 5000, 1001, SYN | ACK));
    assert_eq!(run(&mut p, OUT_PORT, &synack).0, Verdict::Consumed);
    let g = generated(&mut p);
    assert_eq!((g.len(), g[0].0), (1, IN_PORT));
    assert_eq!(run(&mut p, IN_PORT, &na(host6(), HOST_MAC, in6(), IN_MAC)).0, Verdict::Drop(DropReason::NdConsumed));
    let g = generated(&mut p);
    assert_eq!(ip6(&g[0].1).2, 59, "the SYN-ACK reaches the host");
    // Both resolved now: the ACK goes straight out.
    let ack = frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 6, &tcp(host6(), server6(), 40000, 80, 1001, 5001, ACK));
    assert_eq!(run(&mut p, IN_PORT, &ack).0, Verdict::Forward(OUT_PORT));
    assert_eq!(p.flow_count(), 1);
    // From outside, a connection of its own: denied.
    let syn_in = frame(GW_MAC, OUT_MAC, server6(), host6(), 60, 6, &tcp(server6(), host6(), 5555, 22, 1, 0, SYN));
    assert_eq!(run(&mut p, OUT_PORT, &syn_in).0, Verdict::Drop(DropReason::AclDenied));
    // A segment of no connection: dropped.
    let stray = frame(GW_MAC, OUT_MAC, server6(), host6(), 60, 6, &tcp(server6(), host6(), 80, 40001, 1, 1, ACK));
    assert_eq!(run(&mut p, OUT_PORT, &stray).0, Verdict::Drop(DropReason::TcpNoFlow));
    // An all-address rule with ports applies to IPv6 too (no-telnet).
    let telnet = frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 6, &tcp(host6(), server6(), 40002, 23, 1, 0, SYN));
    assert_eq!(run(&mut p, IN_PORT, &telnet).0, Verdict::Drop(DropReason::AclDenied));
    let c = p.counters();
    assert_eq!((c.ipv6.path.forwarded, c.ipv6.path.held, c.arp_hold.released), (1, 2, 2));
}

/// Hop limit, no route and packet too big: dropped with their ICMPv6
/// error back to the source (whose neighbour is known), from our address
/// on the way back, quoting the packet.
#[test]
fn errors_go_back_for_hop_limit_no_route_and_packet_too_big() {
    let mut cfg = config();
    cfg.interfaces[1].mtu = 1280;
    let mut s = spec();
    s.routes.clear();
    s.routes.push(Route6Spec { destination: a("2001:db8:99::"), prefix_len: 48, via: gw6() });
    let mut p = v6_pipeline(cfg, &s);
    run(&mut p, IN_PORT, &ns(host6(), HOST_MAC, in6()));
    generated(&mut p);
    let payload = tcp(host6(), server6(), 40000, 80, 1000, 0, SYN);
    let mut syn = frame(HOST_MAC, IN_MAC, host6(), server6(), 1, 6, &payload);
    assert_eq!(run(&mut p, IN_PORT, &syn).0, Verdict::Drop(DropReason::TtlExceeded));
    syn[21] = 64;
    syn[38..54].copy_from_slice(&a("2001:db8:77::1").octets());
    assert_eq!(run(&mut p, IN_PORT, &syn).0, Verdict::Drop(DropReason::NoRoute));
    let big = frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 17, &vec![0u8; 1300]);
    assert_eq!(run(&mut p, IN_PORT, &big).0, Verdict::Drop(DropReason::FragNeeded));
    let g = generated(&mut p);
    let kinds: Vec<(u8, u8, u32)> = g
        .iter()
        .map(|(port, f)| {
            assert_eq!((*port, f[0..6].to_vec()), (IN_PORT, HOST_MAC.to_vec()));
            let (src, dst, _, nh, b) = ip6(f);
            assert_eq!((src, dst, nh), (in6(), host6(), 58));
            assert!(icmpv6::verify(src, dst, b));
            assert!(b.len() + 40 <= icmpv6::MIN_MTU);
            (b[0], b[1], u32::from_be_bytes([b[4], b[5], b[6], b[7]]))
        })
        .collect();
    assert_eq!(kinds, vec![(msg_type::TIME_EXCEEDED, 0, 0), (msg_type::DEST_UNREACHABLE, 0, 0), (msg_type::PACKET_TOO_BIG, 0, 1280)]);
    // The quote: the offending packet from its IPv6 header, cut to fit.
    assert_eq!(&g[2].1[54 + 8..54 + 8 + 40], &big[14..54]);
    let c = p.counters().ipv6.path;
    assert_eq!((c.time_exceeded_sent, c.unreachable_sent, c.too_big_sent), (1, 1, 1));
}

/// An error the node does not send (here: about an ICMPv6 error, RFC
/// 4443 §2.4 (e)) spends no token of the shared rate limit: the
/// never-send rules come first, as for IPv4.
#[test]
fn an_error_not_sent_spends_no_token() {
    let mut cfg = config();
    cfg.icmp_errors = dataplane::pipeline::IcmpErrorConfig { rate: 1, burst: 1, admin_prohibited: false };
    let mut p = v6_pipeline(cfg, &spec());
    run(&mut p, IN_PORT, &ns(host6(), HOST_MAC, in6()));
    generated(&mut p);
    // A packet too big in transit, its hop limit used up.
    let mut body = vec![msg_type::PACKET_TOO_BIG, 0, 0, 0, 0, 0, 5, 0];
    body.extend_from_slice(&[0u8; 48]);
    let about_error = frame(HOST_MAC, IN_MAC, host6(), server6(), 1, 58, &icmp(host6(), server6(), body));
    assert_eq!(run(&mut p, IN_PORT, &about_error).0, Verdict::Drop(DropReason::TtlExceeded));
    assert!(generated(&mut p).is_empty(), "no error about an error");
    assert_eq!(p.counters().ipv6.path.errors_not_sent, 1);
    let expiring = frame(HOST_MAC, IN_MAC, host6(), server6(), 1, 17, &[0x9c, 0x40, 0, 53, 0, 8, 0, 0]);
    // The one token of the bucket is still there.
    assert_eq!(run(&mut p, IN_PORT, &expiring).0, Verdict::Drop(DropReason::TtlExceeded));
    let g = generated(&mut p);
    assert_eq!(g.len(), 1);
    assert_eq!(ip6(&g[0].1).4[0], msg_type::TIME_EXCEEDED);
    // And now it is spent.
    run(&mut p, IN_PORT, &expiring);
    assert!(generated(&mut p).is_empty());
    assert_eq!(p.counters().ipv6.path.errors_not_sent, 2);
}

/// An error to a source whose next hop this worker has not resolved (with
/// several workers each has its own neighbour cache): the neighbour is
/// solicited and the error waits in the ARP hold, then leaves with the
/// advertisement — the first packet too big of a path-MTU discovery is
/// not lost.
#[test]
fn an_error_to_an_unknown_neighbour_waits_for_its_advertisement() {
    let mut cfg = config();
    cfg.interfaces[1].mtu = 1280;
    let mut p = v6_pipeline(cfg, &spec());
    let big = frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 17, &vec![0u8; 1300]);
    assert_eq!(run(&mut p, IN_PORT, &big).0, Verdict::Drop(DropReason::FragNeeded));
    let g = generated(&mut p);
    assert_eq!(g.len(), 1, "a solicitation, the error held: {g:?}");
    let (port, f) = &g[0];
    assert_eq!(*port, IN_PORT);
    let (_, dst, _, _, body) = ip6(f);
    assert_eq!(dst, icmpv6::solicited_node(host6()));
    assert_eq!(icmpv6::parse_nd(body).unwrap().target, host6());
    assert_eq!(p.counters().arp_hold.held, 1);
    assert_eq!(run(&mut p, IN_PORT, &na(host6(), HOST_MAC, in6(), IN_MAC)).0, Verdict::Drop(DropReason::NdConsumed));
    let g = generated(&mut p);
    assert_eq!(g.len(), 1, "the held error: {g:?}");
    let (port, f) = &g[0];
    assert_eq!((*port, f[0..6].to_vec(), f[6..12].to_vec()), (IN_PORT, HOST_MAC.to_vec(), IN_MAC.to_vec()));
    let (src, dst, _, nh, b) = ip6(f);
    assert_eq!((src, dst, nh), (in6(), host6(), 58));
    assert!(icmpv6::verify(src, dst, b));
    assert_eq!((b[0], u32::from_be_bytes([b[4], b[5], b[6], b[7]])), (msg_type::PACKET_TOO_BIG, 1280));
    let c = p.counters();
    assert_eq!((c.ipv6.path.too_big_sent, c.ipv6.path.errors_not_sent, c.arp_hold.released), (1, 0, 1));
}

/// Strict anti-spoofing (RFC 3704) for IPv6 as for IPv4: a new
/// connection whose source's route back leaves by another interface is
/// dropped; an established one is not asked again.
#[test]
fn a_source_whose_route_back_is_elsewhere_is_dropped() {
    let mut p = v6_pipeline(config(), &spec());
    run(&mut p, IN_PORT, &ns(host6(), HOST_MAC, in6()));
    generated(&mut p);
    let spoofed = frame(HOST_MAC, IN_MAC, server6(), a("2001:db8:98::1"), 64, 6, &tcp(server6(), a("2001:db8:98::1"), 80, 40000, 1, 0, SYN));
    assert_eq!(run(&mut p, IN_PORT, &spoofed).0, Verdict::Drop(DropReason::ReversePath));
    assert_eq!(p.flow_count(), 0);
    let fine = frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 6, &tcp(host6(), server6(), 40000, 80, 1, 0, SYN));
    assert!(matches!(run(&mut p, IN_PORT, &fine).0, Verdict::Forward(_) | Verdict::Consumed));
}

/// Fragments (RFC 8200 §4.5): a datagram whose first fragment comes
/// last is held, then forwarded whole — every fragment as it came (hop
/// limit one less, a Fragment header naming the datagram); overlapping
/// fragments (RFC 5722) drop the datagram; a first fragment without the
/// whole upper-layer header (RFC 7112) is dropped; an atomic fragment
/// (RFC 6946) passes as a packet.
#[test]
fn fragments_are_forwarded_after_their_first_and_hostile_ones_dropped() {
    let mut p = v6_pipeline(config(), &spec());
    run(&mut p, IN_PORT, &ns(host6(), HOST_MAC, in6()));
    run(&mut p, OUT_PORT, &ns(gw6(), GW_MAC, out6()));
    generated(&mut p);
    let data: Vec<u8> = (0..1200u32).map(|i| i as u8).collect();
    let dgram = udp(host6(), server6(), 40000, 53, &data);
    let pieces = fragments(17, 0xabcd, &dgram, &[0, 512, 1024]);
    let frames: Vec<Vec<u8>> = pieces.iter().map(|f| frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 44, f)).collect();
    // The later two first: held.
    assert_eq!(run(&mut p, IN_PORT, &frames[1]).0, Verdict::Consumed);
    assert_eq!(run(&mut p, IN_PORT, &frames[2]).0, Verdict::Consumed);
    let (v, first) = run(&mut p, IN_PORT, &frames[0]);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    let released = generated(&mut p);
    assert_eq!(released.len(), 2, "the held fragments follow their first");
    let mut got = vec![first];
    got.extend(released.into_iter().map(|(port, f)| {
        assert_eq!(port, OUT_PORT);
        f
    }));
    let mut whole = vec![0u8; dgram.len()];
    for f in &got {
        assert_eq!(&f[0..12], &[GW_MAC, OUT_MAC].concat()[..]);
        let (src, dst, hlim, nh, pl) = ip6(f);
        assert_eq!((src, dst, hlim, nh), (host6(), server6(), 63, 44));
        assert_eq!((pl[0], u32::from_be_bytes(pl[4..8].try_into().unwrap())), (17, 0xabcd));
        let off = usize::from(u16::from_be_bytes([pl[2], pl[3]]) & 0xfff8);
        whole[off..off + pl.len() - 8].copy_from_slice(&pl[8..]);
    }
    assert_eq!(whole, dgram, "the datagram's bytes all went through, each at its offset");
    assert_eq!(p.flow_count(), 1);

    // Overlapping fragments: the datagram is dropped (its last fragment
    // is held, the overlapping one drops both).
    let pieces = fragments(17, 7, &dgram, &[0, 512, 1024]);
    let mut lap = pieces[1].clone();
    lap[2..4].copy_from_slice(&((520u16) | 1).to_be_bytes());
    assert_eq!(run(&mut p, IN_PORT, &frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 44, &pieces[2])).0, Verdict::Consumed);
    let v = run(&mut p, IN_PORT, &frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 44, &lap)).0;
    assert_eq!(v, Verdict::Drop(DropReason::FragOverlap));
    // The held last fragment went with it: a first fragment now starts
    // afresh and releases nothing.
    assert_eq!(run(&mut p, IN_PORT, &frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 44, &pieces[0])).0, Verdict::Forward(OUT_PORT));
    assert!(generated(&mut p).is_empty(), "nothing was left to release");

    // A tiny first fragment: 8 bytes of a TCP header.
    let seg = tcp(host6(), server6(), 40001, 80, 1, 0, SYN);
    let tiny = fragments(6, 8, &seg, &[0, 8]);
    let v = run(&mut p, IN_PORT, &frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 44, &tiny[0])).0;
    assert_eq!(v, Verdict::Drop(DropReason::FragTinyFirst));
    // Destination options between the Fragment header and the upper layer.
    let mut opts = vec![60, 0, 0, 1, 0, 0, 0, 9, 17, 0, 1, 4, 0, 0, 0, 0];
    opts.extend_from_slice(&dgram[..504]);
    let v = run(&mut p, IN_PORT, &frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 44, &opts)).0;
    assert_eq!(v, Verdict::Drop(DropReason::Ipv6Fragment));
    // An atomic fragment: a whole packet.
    let mut atomic = vec![6, 0, 0, 0, 0, 0, 0, 10];
    atomic.extend_from_slice(&seg);
    let v = run(&mut p, IN_PORT, &frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 44, &atomic)).0;
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    let c = p.counters();
    assert_eq!(c.packets, c.emitted() + c.consumed + c.dropped());
}

/// A fragmented echo (`ping -6 -s 8000`): the request's fragments go out,
/// the reply's come back in, on the echo's connection.
#[test]
fn a_fragmented_echo_goes_out_and_its_reply_comes_back() {
    let mut p = v6_pipeline(config(), &spec());
    run(&mut p, IN_PORT, &ns(host6(), HOST_MAC, in6()));
    run(&mut p, OUT_PORT, &ns(gw6(), GW_MAC, out6()));
    generated(&mut p);
    let payload = vec![0x5a; 3000];
    let req = icmp(host6(), server6(), echo(77, 1, &payload));
    for f in fragments(58, 1, &req, &[0, 1232, 2464]) {
        assert_eq!(run(&mut p, IN_PORT, &frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 44, &f)).0, Verdict::Forward(OUT_PORT));
    }
    let mut rep = echo(77, 1, &payload);
    rep[0] = msg_type::ECHO_REPLY;
    let rep = icmp(server6(), host6(), rep);
    for f in fragments(58, 2, &rep, &[0, 1232, 2464]) {
        assert_eq!(run(&mut p, OUT_PORT, &frame(GW_MAC, OUT_MAC, server6(), host6(), 64, 44, &f)).0, Verdict::Forward(IN_PORT));
    }
    // An unsolicited fragmented echo reply from outside: denied.
    let mut stray = echo(78, 1, &payload);
    stray[0] = msg_type::ECHO_REPLY;
    let stray = icmp(server6(), host6(), stray);
    let first = fragments(58, 3, &stray, &[0, 1232])[0].clone();
    assert!(matches!(run(&mut p, OUT_PORT, &frame(GW_MAC, OUT_MAC, server6(), host6(), 64, 44, &first)).0, Verdict::Drop(_)));
}

#[test]
fn hostile_headers_sources_and_destinations_are_dropped() {
    let mut p = v6_pipeline(config(), &spec());
    let udp = [0x9c, 0x40, 0, 53, 0, 8, 0, 0];
    let send = |p: &mut Pipeline, src: Ipv6Addr, dst: Ipv6Addr, nh: u8, payload: &[u8]| {
        run(p, IN_PORT, &frame(HOST_MAC, IN_MAC, src, dst, 64, nh, payload)).0
    };
    // Routing header type 0 (RFC 5095), segments left 1.
    let mut rh0 = vec![17, 2, 0, 1, 0, 0, 0, 0];
    rh0.extend_from_slice(&server6().octets());
    rh0.extend_from_slice(&udp);
    assert_eq!(send(&mut p, host6(), server6(), 43, &rh0), Verdict::Drop(DropReason::Ipv6RoutingType0));
    // 100 chained destination options headers.
    let mut chain = vec![];
    for _ in 0..99 {
        chain.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
    }
    chain.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
    chain.extend_from_slice(&udp);
    assert_eq!(send(&mut p, host6(), server6(), 60, &chain), Verdict::Drop(DropReason::Ipv6Malformed));
    // Sources: multicast, ours, link-local forwarded; destinations:
    // link-local, multicast not ours.
    assert_eq!(send(&mut p, a("ff02::1"), server6(), 17, &udp), Verdict::Drop(DropReason::Ipv6BadSource));
    assert_eq!(send(&mut p, out6(), server6(), 17, &udp), Verdict::Drop(DropReason::Ipv6BadSource));
    assert_eq!(send(&mut p, a("fe80::10"), server6(), 17, &udp), Verdict::Drop(DropReason::Ipv6BadSource));
    assert_eq!(send(&mut p, host6(), a("fe80::99"), 17, &udp), Verdict::Drop(DropReason::Ipv6BadDestination));
    let mut m = frame(HOST_MAC, [0x33, 0x33, 0, 0, 0, 0x99], host6(), a("ff02::99"), 64, 17, &udp);
    assert_eq!(run(&mut p, IN_PORT, &m).0, Verdict::Drop(DropReason::Ipv6BadDestination));
    // A bad payload length (beyond the frame).
    m[18] = 0x10;
    assert_eq!(run(&mut p, IN_PORT, &m).0, Verdict::Drop(DropReason::Ipv6Truncated));
    assert_eq!(p.flow_count(), 0);
    assert!(generated(&mut p).is_empty(), "no errors about these");
}

#[test]
fn without_addresses_ipv6_stays_dropped() {
    let mut p = pipeline();
    p.set_ipv6(&Ipv6Spec::default()).unwrap();
    let f = frame(HOST_MAC, IN_MAC, host6(), server6(), 64, 17, &[0x9c, 0x40, 0, 53, 0, 8, 0, 0]);
    assert_eq!(run(&mut p, IN_PORT, &f).0, Verdict::Drop(DropReason::Ipv6NotForwarded));
    // A configuration error names what is wrong.
    let mut bad = spec();
    bad.addresses.push(("dmz".into(), a("2001:db8:1:0:1::1"), 80));
    assert!(Pipeline::new(config()).unwrap().set_ipv6(&bad).is_err(), "overlapping subnets");
    let mut bad = spec();
    bad.routes[0].via = a("2001:db8:5::1");
    assert!(Pipeline::new(config()).unwrap().set_ipv6(&bad).is_err(), "next hop off-link");
    let mut small = config();
    small.interfaces[1].mtu = 1279;
    let e = Pipeline::new(small).unwrap().set_ipv6(&spec()).unwrap_err();
    assert!(e.to_string().contains("below IPv6's minimum of 1280"), "{e}");
}

proptest! {
    /// Any bytes after an IPv6 ethertype, on any port: no panic, every
    /// frame accounted for (forwarded, consumed, answered or dropped).
    #[test]
    fn any_ipv6_frame_is_accounted_for(frames in prop::collection::vec((0u16..3, prop::collection::vec(any::<u8>(), 0..200)), 1..40)) {
        let mut p = v6_pipeline(config(), &spec());
        for (port, body) in &frames {
            let mut f = vec![];
            f.extend_from_slice(&IN_MAC);
            f.extend_from_slice(&HOST_MAC);
            f.extend_from_slice(&[0x86, 0xdd]);
            f.extend_from_slice(body);
            if let Some(b) = f.get_mut(14) {
                *b = 0x60 | (*b & 0x0f);
            }
            run(&mut p, PortId(*port), &f);
            generated(&mut p);
        }
        let c = p.counters();
        prop_assert_eq!(c.packets, frames.len() as u64);
        prop_assert_eq!(c.forwarded + c.consumed + c.arp_replies + c.icmp_echo_replies + c.dropped(), c.packets);
    }
}

/// Every counter of `show stats` makes a metric name Prometheus' lint
/// accepts (`promtool check metrics`: no abbreviated unit as a word —
/// `ns_received` read as nanoseconds failed the metrics bed test once).
#[test]
fn counter_names_have_no_abbreviated_units() {
    const UNITS: [&str; 14] = ["s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d"];
    let p = v6_pipeline(config(), &spec());
    let names = dataplane::stats::flatten(&p.counters());
    for name in names.keys().filter(|n| !n.starts_with("drops.") && !n.starts_with("ports.")) {
        for word in name.split(['.', '_']) {
            assert!(!UNITS.contains(&word), "{name}: {word:?} reads as a unit");
        }
    }
    assert!(names.contains_key("ipv6.solicitations_received"));
}
