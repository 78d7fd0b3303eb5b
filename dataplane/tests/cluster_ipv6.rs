//! IPv6 connections in the cluster (issue 16; docs/ipv6.md "In a
//! cluster"): three `Pipeline`s wired through their CCL ports
//! (`cluster_bed`), each with its own IPv6 addresses on the inside and
//! outside segments. The roles are IPv4's: the owner puts its cookie in
//! the ISN and translates sequence numbers for the life of the connection,
//! a SYN-ACK landing elsewhere is forwarded to the owner the cookie names,
//! the director knows the owner, a backup takes over when the owner dies,
//! an ICMPv6 error about the connection reaches the owner and leaves with
//! its quote translated back. The CCL itself stays IPv4: it carries the
//! IPv6 frames and the IPv6 flow records.

mod cluster_bed;
mod v6util;

use cluster_bed::*;
use dataplane::ccl::MessageKind;
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::pipeline::{Ipv6Spec, Role, Route6Spec, Verdict};
use dataplane::wire::icmpv6::{self, msg_type};
use dataplane::{DropReason, FiveTuple, NodeId, PortId};
use std::net::{IpAddr, Ipv6Addr};
use v6util::*;

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;

fn in6(n: usize) -> Ipv6Addr {
    a(&format!("2001:db8:1::{}", n + 1))
}
fn out6(n: usize) -> Ipv6Addr {
    a(&format!("2001:db8:2::{}", n + 1))
}
fn host6() -> Ipv6Addr {
    a("2001:db8:1::100")
}
fn gw6() -> Ipv6Addr {
    a("2001:db8:2::fe")
}
fn server6() -> Ipv6Addr {
    a("2001:db8:99::80")
}

fn spec(n: usize) -> Ipv6Spec {
    Ipv6Spec {
        addresses: vec![("inside".into(), in6(n), 64), ("outside".into(), out6(n), 64)],
        routes: vec![Route6Spec { destination: Ipv6Addr::UNSPECIFIED, prefix_len: 0, via: gw6() }],
    }
}

fn tuple6(sp: u16, dp: u16) -> FiveTuple {
    FiveTuple { src: IpAddr::V6(host6()), dst: IpAddr::V6(server6()), proto: 6, src_port: sp, dst_port: dp }
}

/// A three-node bed speaking IPv6: every node has learnt the host and the
/// gateway by their solicitations (answered, so the neighbours are
/// reachable), as a real segment would teach it.
fn bed6() -> Bed {
    let mut bed = Bed::new(3, true);
    for n in 0..3 {
        bed.nodes[n].set_ipv6(&spec(n)).unwrap();
    }
    for n in 0..3 {
        for (port, from, mac, target) in [(IN, host6(), HOST_MAC, in6(n)), (OUT, gw6(), GW_MAC, out6(n))] {
            let out = bed.send(n, port, ns(from, mac, target));
            let (m, p, f) = one(&out);
            assert_eq!((m, p), (n, port), "node {n} advertises itself");
            assert_eq!(ip6(&f).4[0], msg_type::NEIGHBOR_ADVERT);
        }
    }
    bed
}

/// A client port whose connection has `want` as its director.
fn cport_for(want: usize) -> u16 {
    (40_000..).find(|&p| director(&tuple6(p, 80), 3) == want).unwrap()
}

fn client(at: usize, seq: u32, ack: u32, flags: u8, cport: u16) -> Vec<u8> {
    frame(HOST_MAC, in_mac(at), host6(), server6(), 64, 6, &tcp(host6(), server6(), cport, 80, seq, ack, flags))
}

fn server(at: usize, seq: u32, ack: u32, flags: u8, cport: u16) -> Vec<u8> {
    frame(GW_MAC, out_mac(at), server6(), host6(), 64, 6, &tcp(server6(), host6(), 80, cport, seq, ack, flags))
}

/// The frame left node `n` on `port`, to the right neighbour, from the
/// node's MAC, one hop further.
fn left(out: &[(usize, PortId, Vec<u8>)], n: usize, port: PortId) -> Vec<u8> {
    let (m, p, f) = one(&out.to_vec());
    assert_eq!((m, p), (n, port), "left node {n} on port {port:?}");
    let (dst_mac, src_mac) = if port == OUT { (GW_MAC, out_mac(n)) } else { (HOST_MAC, in_mac(n)) };
    assert_eq!((&f[0..6], &f[6..12]), (&dst_mac[..], &src_mac[..]));
    assert_eq!(ip6(&f).2, 63, "hop limit decremented once");
    f
}

/// Every frame each node processed ended in one counter, and none was
/// dropped but for the reasons allowed.
fn accounted(bed: &Bed, allowed: &[DropReason]) {
    for (n, p) in bed.nodes.iter().enumerate() {
        let c = p.counters();
        assert_eq!(c.packets, c.emitted() + c.consumed + c.dropped(), "node {n}: every packet accounted for");
        for (i, &k) in c.drops.iter().enumerate() {
            let r = DropReason::ALL[i];
            assert!(k == 0 || allowed.contains(&r), "node {n} dropped {k} frames for {r:?}");
        }
    }
}

/// SYN on A (owner, cookie ISN), SYN-ACK on B (forwarded to A by the
/// cookie), ACK on B (forwarded on B's record). Returns the client port
/// and the owner's delta.
fn handshake(bed: &mut Bed) -> (u16, u32) {
    let cport = cport_for(C);
    let t = tuple6(cport, 80);
    let f = left(&bed.send(A, IN, client(A, C_ISN, 0, SYN, cport)), A, OUT);
    let (isn, _, flags, ok) = tcp6(&f);
    assert!(ok, "checksum right after the ISN changed");
    assert_eq!(flags, SYN);
    assert_ne!(isn, C_ISN, "the ISN is replaced");
    assert_eq!(cookies().decode(isn), Some(NodeId(A as u8)), "the cookie names A");
    assert_eq!(bed.ccl_count(A, C, MessageKind::FlowRegister), 1, "A registers the IPv6 flow with its director");
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(A as u8))));

    let f = left(&bed.send(B, OUT, server(B, S_ISN, isn.wrapping_add(1), SYN | ACK, cport)), A, IN);
    assert_eq!(tcp6(&f), (S_ISN, C_ISN + 1, SYN | ACK, true), "ack back in the client's space");
    let b = bed.cluster(B).counters;
    assert_eq!((b.synack_cookie_decoded, b.director_queries_sent, b.forwarded_to_owner), (1, 0, 1));
    assert_eq!(bed.nodes[B].cluster_role(bed.now(), &t), Some((Role::Forwarder, NodeId(A as u8))));

    let f = left(&bed.send(B, IN, client(B, C_ISN + 1, S_ISN + 1, ACK, cport)), A, OUT);
    assert_eq!(tcp6(&f), (isn.wrapping_add(1), S_ISN + 1, ACK, true));
    assert_eq!(bed.owners(&t), vec![A]);
    (cport, isn.wrapping_sub(C_ISN))
}

#[test]
fn an_ipv6_connection_has_one_owner_whatever_node_its_packets_land_on() {
    let mut bed = bed6();
    let (cport, delta) = handshake(&mut bed);
    // The server's segment on C, the director: forwarded to A.
    let f = left(&bed.send(C, OUT, server(C, S_ISN + 1, C_ISN + 1 + delta, ACK, cport)), A, IN);
    assert_eq!(tcp6(&f), (S_ISN + 1, C_ISN + 1, ACK, true));
    // The client's segment on A itself.
    let f = left(&bed.send(A, IN, client(A, C_ISN + 1, S_ISN + 1, ACK, cport)), A, OUT);
    assert_eq!(tcp6(&f).0, C_ISN + 1 + delta);
    assert!(bed.cluster(A).counters.forwarded_received >= 3, "frames came to A over the CCL");
    accounted(&bed, &[]);
}

#[test]
fn an_icmpv6_error_about_the_connection_reaches_the_owner_with_its_quote_translated_back() {
    let mut bed = bed6();
    let (cport, delta) = handshake(&mut bed);
    // A router beyond the gateway says the client's segment (as the
    // server's side saw it: seq translated) was too big; it lands on B.
    let router = a("2001:db8:99::1");
    let seg = tcp(host6(), server6(), cport, 80, C_ISN + 1 + delta, S_ISN + 1, ACK);
    let quoted = frame([0; 6], [0; 6], host6(), server6(), 60, 6, &seg)[14..].to_vec();
    let mut body = vec![msg_type::PACKET_TOO_BIG, 0, 0, 0, 0, 0, 0x05, 0x00];
    body.extend_from_slice(&quoted);
    let err = frame(GW_MAC, out_mac(B), router, host6(), 64, 58, &icmp(router, host6(), body));
    let f = left(&bed.send(B, OUT, err), A, IN);
    let (src, dst, _, nh, body) = ip6(&f);
    assert_eq!((src, dst, nh), (router, host6(), 58));
    assert!(icmpv6::verify(src, dst, body), "ICMPv6 checksum computed anew");
    let q_seq = u32::from_be_bytes(body[8 + 40 + 4..8 + 40 + 8].try_into().unwrap());
    assert_eq!(q_seq, C_ISN + 1, "the quoted seq is the client's again");
    accounted(&bed, &[]);
}

#[test]
fn an_ipv6_connection_survives_its_owner() {
    let mut bed = bed6();
    let (cport, delta) = handshake(&mut bed);
    let t = tuple6(cport, 80);
    // A dies. The client's next segment lands on B, whose forwarder record
    // names A: B asks C (the director holding A's state) and takes over.
    bed.kill(A, 2);
    let f = left(&bed.send(B, IN, client(B, C_ISN + 1, S_ISN + 1, ACK, cport)), B, OUT);
    assert_eq!(tcp6(&f), (C_ISN + 1 + delta, S_ISN + 1, ACK, true), "the same translation at the new owner");
    let b = bed.cluster(B).counters;
    assert_eq!((b.dead_owner_records, b.takeovers), (1, 1));
    assert_eq!(bed.ccl_count(C, B, MessageKind::FlowTransfer), 1, "the IPv6 flow record crossed the CCL");
    assert_eq!(bed.owners_up(&t), vec![B]);
    // The server's answer lands on C: forwarded to B, ack translated back.
    let f = left(&bed.send(C, OUT, server(C, S_ISN + 1, C_ISN + 1 + delta, ACK, cport)), B, IN);
    assert_eq!(tcp6(&f), (S_ISN + 1, C_ISN + 1, ACK, true));
    accounted(&bed, &[]);
}

#[test]
fn an_ipv6_connection_in_is_denied_and_a_spoofed_source_dropped() {
    let mut bed = bed6();
    // Outside → inside, a new connection: nothing leaves the cluster.
    let syn = frame(GW_MAC, out_mac(B), server6(), host6(), 64, 6, &tcp(server6(), host6(), 443, 22, 77, 0, SYN));
    assert!(bed.send(B, OUT, syn).is_empty());
    let denied: u64 = (0..3).map(|n| bed.drops(n, DropReason::AclDenied)).sum();
    assert_eq!(denied, 1);
    // An outside address as the source of a SYN from the inside: the
    // route back leaves by the outside (strict anti-spoofing).
    let spoof = frame(HOST_MAC, in_mac(C), server6(), a("2001:db8:98::1"), 64, 6, &tcp(server6(), a("2001:db8:98::1"), 1, 2, 3, 0, SYN));
    assert!(bed.send(C, IN, spoof).is_empty());
    assert_eq!(bed.drops(C, DropReason::ReversePath), 1);
    assert_eq!(bed.last_verdict(C), Some(Verdict::Drop(DropReason::ReversePath)));
    accounted(&bed, &[DropReason::AclDenied, DropReason::ReversePath]);

    // After a member change the SYN guard holds a SYN at a node that is
    // not its director for the director's word; elected, the node denies
    // it: counted in `show cluster` release drops (it was `consumed`
    // when parked).
    bed.set_members_up(bed.members_up(2));
    let denied_before = bed.drops(B, DropReason::AclDenied);
    let t = FiveTuple { src: IpAddr::V6(server6()), dst: IpAddr::V6(host6()), proto: 6, src_port: 0, dst_port: 22 };
    let sport = (1024..).find(|&p| director(&FiveTuple { src_port: p, ..t }, 3) == A).unwrap();
    let syn = frame(GW_MAC, out_mac(B), server6(), host6(), 64, 6, &tcp(server6(), host6(), sport, 22, 77, 0, SYN));
    assert!(bed.send(B, OUT, syn).is_empty());
    let b = bed.cluster(B);
    assert_eq!(b.counters.director_queries_sent, 1, "the SYN guard asked the director");
    assert_eq!(b.release_drops[DropReason::AclDenied.index()], 1);
    assert_eq!(bed.drops(B, DropReason::AclDenied), denied_before, "not a drop of `process`: consumed when parked");
}

/// The fragments of an IPv6 datagram landing on three nodes meet at its
/// fragment owner (a hash of source, destination and the 32-bit
/// identification, R10), which learns the datagram's ports from the first
/// one and sends each on to the connection's owner: they all leave from
/// one node, each once, byte for byte.
#[test]
fn the_fragments_of_an_ipv6_datagram_meet_at_one_owner_wherever_they_land() {
    let mut bed = bed6();
    let data: Vec<u8> = (0..1200u32).map(|i| i as u8).collect();
    let dgram = udp(host6(), server6(), 40000, 53, &data);
    let pieces = fragments(17, 0x1234_5678, &dgram, &[0, 512, 1024]);
    let mut out = vec![];
    for (k, at) in [(2, A), (1, B), (0, C)] {
        out.extend(bed.send(at, IN, frame(HOST_MAC, in_mac(at), host6(), server6(), 64, 44, &pieces[k])));
    }
    assert_eq!(out.len(), 3, "every fragment leaves once: {out:?}");
    let owner = out[0].0;
    let mut whole = vec![0u8; dgram.len()];
    for (n, port, f) in &out {
        assert_eq!((*n, *port), (owner, OUT), "all from the owner");
        let (src, dst, hlim, nh, pl) = ip6(f);
        assert_eq!((src, dst, hlim, nh), (host6(), server6(), 63, 44));
        let off = usize::from(u16::from_be_bytes([pl[2], pl[3]]) & 0xfff8);
        whole[off..off + pl.len() - 8].copy_from_slice(&pl[8..]);
    }
    assert_eq!(whole, dgram);
    let t = FiveTuple { src: IpAddr::V6(host6()), dst: IpAddr::V6(server6()), proto: 17, src_port: 40000, dst_port: 53 };
    assert_eq!(bed.owners(&t), vec![owner]);
    let to_fo: u64 = (0..3).map(|n| bed.nodes[n].frag_counters().to_fragment_owner).sum();
    assert!(to_fo >= 1, "fragments crossed the CCL to their fragment owner");
    // The answer, not fragmented, lands on another node: to the host.
    let other = (owner + 1) % 3;
    let answer = frame(GW_MAC, out_mac(other), server6(), host6(), 64, 17, &udp(server6(), host6(), 53, 40000, b"ok"));
    let f = left(&bed.send(other, OUT, answer), owner, IN);
    assert_eq!(ip6(&f).4[8..], b"ok"[..]);
    accounted(&bed, &[]);
}
