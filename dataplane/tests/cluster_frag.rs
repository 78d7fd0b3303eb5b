//! Fragments across the cluster (SPEC R10; docs/fragments.md, "In the
//! cluster"): the fragments of one datagram land on different nodes of the
//! hand-wired 3-node bed (`cluster_bed`); every node sends them to the
//! datagram's fragment owner over the CCL; the fragment owner finds the
//! flow owner once the first fragment is in — itself for a new connection
//! (it registers as owner), another node for an existing one (it forwards
//! every fragment there with the tuple as flow hint). Every fragment
//! leaves the cluster from the owner, TTL decremented once.

mod cluster_bed;
mod frag_util;

use cluster_bed::*;
use dataplane::ccl::MessageKind;
use dataplane::cluster::{DirectorTable, MemberSet};
use dataplane::frag::fragment_owner;
use dataplane::pipeline::Role;
use dataplane::wire::build::PacketBuilder;
use dataplane::{Epoch, NodeId};
use frag_util::*;
use std::net::Ipv4Addr;

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

/// An IPv4 identification whose fragment owner among 3 members is `want`.
fn ident_with_fragment_owner(src: Ipv4Addr, dst: Ipv4Addr, want: usize) -> u16 {
    let t = DirectorTable::new(&MemberSet::from_nodes(Epoch(1), (0..3).map(NodeId)).unwrap()).unwrap();
    (1..u16::MAX).find(|&id| fragment_owner(src.into(), dst.into(), u32::from(id), &t).index() == want).unwrap()
}

fn accounted(bed: &Bed) {
    for (n, p) in bed.nodes.iter().enumerate() {
        let c = p.counters();
        assert_eq!(c.packets, c.emitted() + c.consumed + c.dropped(), "node {n}: every packet accounted for");
        assert!(p.reasm_counters().accounted(p.frag_in_progress().1), "node {n}: reassembler conservation");
    }
}

/// New connection: the fragments of the client's first datagram land on
/// A, C and A (first fragment last); B is the fragment owner, C the
/// director. B collects them, asks C, is elected owner, registers, and
/// sends every fragment out itself.
#[test]
fn new_connection_fragment_owner_becomes_owner() {
    let mut bed = Bed::new(3, true);
    let cport = port_with_director(SERVER, 5000, 17, 3, C);
    let t = tuple(HOST, cport, SERVER, 5000, 17);
    let ident = ident_with_fragment_owner(HOST, SERVER, B);
    let payload: Vec<u8> = (0..200u8).collect();
    let frame = |n: usize| PacketBuilder { dont_frag: false, ident, ..from_host(n, SERVER) }.udp(cport, 5000, &payload);
    let want = fragments(&PacketBuilder { dont_frag: false, ident, ..to_gw(B, SERVER) }.udp(cport, 5000, &payload), 64);
    assert_eq!(want.len(), 4);
    let (fa, fc) = (fragments(&frame(A), 64), fragments(&frame(C), 64));

    // Later fragments first, on A and C: tunnelled to B and held there.
    assert!(bed.send(A, IN, fa[1].clone()).is_empty());
    assert!(bed.send(C, IN, fc[3].clone()).is_empty());
    assert!(bed.send(C, IN, fc[2].clone()).is_empty());
    assert_eq!(bed.nodes[B].frag_in_progress(), (1, 3));
    assert_eq!(bed.nodes[A].frag_counters().to_fragment_owner, 1);
    assert_eq!(bed.nodes[C].frag_counters().to_fragment_owner, 2);
    assert_eq!(bed.ccl_count(A, B, MessageKind::ForwardedPacket), 1);
    assert_eq!(bed.ccl_count(C, B, MessageKind::ForwardedPacket), 2);

    // The first fragment on A: B learns the tuple, asks C (director), is
    // elected, creates the flow, registers, and sends all four out.
    let mut out = bed.send(A, IN, fa[0].clone());
    out.sort_by_key(|(_, _, f)| f.clone());
    assert_eq!(out.len(), 4, "every fragment leaves: {out:?}");
    for (n, port, _) in &out {
        assert_eq!((*n, *port), (B, OUT), "from the owner only");
    }
    let mut got: Vec<String> = out.iter().map(|(_, _, f)| hex(f)).collect();
    let mut exp: Vec<String> = want.iter().map(|f| hex(f)).collect();
    got.sort();
    exp.sort();
    assert_eq!(got, exp, "each fragment as sent, TTL 63, MACs of B's outside");
    for (_, _, f) in &out {
        check_ip(f, 63);
    }
    let frames: Vec<Vec<u8>> = out.iter().map(|(_, _, f)| f.clone()).collect();
    assert_eq!(reassemble_udp(&frames), payload);

    assert_eq!(bed.owners(&t), vec![B], "the fragment owner is the owner");
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(B as u8))));
    assert_eq!(bed.ccl_count(B, C, MessageKind::OwnerQuery), 1);
    assert_eq!(bed.ccl_count(B, C, MessageKind::FlowRegister), 1);
    assert_eq!(bed.cluster(C).counters.elections, 1);
    let fb = *bed.nodes[B].frag_counters();
    assert_eq!((fb.inserted, fb.held, fb.released_parked), (4, 3, 3));
    assert_eq!(bed.nodes[B].frag_in_progress(), (0, 0));
    let cb = bed.cluster(B);
    assert_eq!((cb.counters.pending_queued, cb.counters.pending_released), (4, 4));

    // The server's reply, fragmented, lands on C: it goes to its fragment
    // owner and from there to B, which sends it to the client.
    let rident = ident_with_fragment_owner(SERVER, HOST, A);
    let rep = |n: usize| PacketBuilder { dont_frag: false, ident: rident, ..from_outside(n, SERVER) }.udp(5000, cport, &payload);
    let mut back = vec![];
    for (i, f) in fragments(&rep(C), 64).into_iter().enumerate().rev() {
        let lands = [C, A, B, C][i];
        let f = if lands == C { f } else { fragments(&rep(lands), 64)[i].clone() };
        back.extend(bed.send(lands, OUT, f));
    }
    assert_eq!(back.len(), 4);
    for (n, port, f) in &back {
        assert_eq!((*n, *port), (B, IN), "the client gets every fragment from the owner");
        check_ip(f, 63);
    }
    let frames: Vec<Vec<u8>> = back.iter().map(|(_, _, f)| f.clone()).collect();
    assert_eq!(reassemble_udp(&frames), payload);
    assert_eq!(bed.nodes[B].frag_counters().from_fragment_owner, 4, "A sent them with the flow hint");
    assert_eq!(bed.nodes[B].frag_counters().to_fragment_owner, 1, "B's own landing went to A");
    accounted(&bed);
}

/// Existing connection owned by A; the fragments of a server reply land
/// on C, A and B; B is the fragment owner. B forwards every fragment to A
/// with the flow hint; A does not send them back to B; the client gets
/// every fragment from A.
#[test]
fn existing_connection_fragments_forwarded_to_owner() {
    let mut bed = Bed::new(3, true);
    let cport = port_with_director(SERVER, 5001, 17, 3, C);
    let t = tuple(HOST, cport, SERVER, 5001, 17);
    // The flow starts unfragmented on A: A asks C, is elected owner.
    let out = bed.send(A, IN, from_host(A, SERVER).udp(cport, 5001, b"hello"));
    assert_eq!(out.len(), 1);
    assert_eq!(bed.owners(&t), vec![A]);

    let ident = ident_with_fragment_owner(SERVER, HOST, B);
    let payload: Vec<u8> = (0..=255u8).cycle().take(1400).collect();
    let rep = |n: usize| PacketBuilder { dont_frag: false, ident, ..from_outside(n, SERVER) }.udp(5001, cport, &payload);
    let want = fragments(&PacketBuilder { dont_frag: false, ident, ..to_host(A, SERVER) }.udp(5001, cport, &payload), 512);
    assert_eq!(want.len(), 3);
    let f = |n: usize, i: usize| fragments(&rep(n), 512)[i].clone();

    // The last fragment on C: to B, held.
    assert!(bed.send(C, OUT, f(C, 2)).is_empty());
    // The first on A: A is not the fragment owner, so it goes to B too;
    // B forwards it and the held one to A with the hint; A sends both.
    let mut out = bed.send(A, OUT, f(A, 0));
    // The middle one on B, the fragment owner: straight to A.
    out.extend(bed.send(B, OUT, f(B, 1)));
    assert_eq!(out.len(), 3);
    for (n, port, _) in &out {
        assert_eq!((*n, *port), (A, IN), "from the owner only");
    }
    let mut got: Vec<String> = out.iter().map(|(_, _, f)| hex(f)).collect();
    let mut exp: Vec<String> = want.iter().map(|f| hex(f)).collect();
    got.sort();
    exp.sort();
    assert_eq!(got, exp);
    let frames: Vec<Vec<u8>> = out.iter().map(|(_, _, f)| f.clone()).collect();
    assert_eq!(reassemble_udp(&frames), payload);

    let (fa, fb, fc) = (*bed.nodes[A].frag_counters(), *bed.nodes[B].frag_counters(), *bed.nodes[C].frag_counters());
    assert_eq!((fc.to_fragment_owner, fa.to_fragment_owner, fb.to_fragment_owner), (1, 1, 0));
    assert_eq!(fb.inserted, 3, "B collected all three");
    assert_eq!(fb.to_flow_owner, 3, "and forwarded all three to A");
    assert_eq!(fa.from_fragment_owner, 3);
    assert_eq!(bed.ccl_count(A, B, MessageKind::ForwardedPacket), 1, "A never sent B's fragments back");
    assert_eq!(bed.ccl_count(B, A, MessageKind::ForwardedPacket), 3);
    assert_eq!(bed.owners(&t), vec![A], "still one owner");
    for n in [A, B, C] {
        assert_eq!(bed.nodes[n].frag_in_progress(), (0, 0), "node {n}: nothing left in reassembly");
    }
    accounted(&bed);
}

/// A fragmented datagram the owner's policy denies: a new inbound UDP
/// flow from outside to the inside host (security levels). Its fragments
/// land on every node; none leaves the cluster.
#[test]
fn denied_fragmented_datagram_never_leaves() {
    let mut bed = Bed::new(3, true);
    let ident = ident_with_fragment_owner(SERVER, HOST, C);
    let payload = [3u8; 300];
    let rep = |n: usize| PacketBuilder { dont_frag: false, ident, ..from_outside(n, SERVER) }.udp(5002, 40999, &payload);
    let mut out = vec![];
    for (i, n) in [(2, A), (1, B), (0, C)] {
        out.extend(bed.send(n, OUT, fragments(&rep(n), 128)[i].clone()));
    }
    assert!(out.is_empty(), "{out:?}");
    let denied: u64 = (0..3)
        .map(|n| {
            bed.drops(n, dataplane::DropReason::AclDenied)
                + bed.nodes[n].frag_release_drops(dataplane::DropReason::AclDenied)
                + bed.cluster(n).counters.pending_release_drops
        })
        .sum();
    assert_eq!(denied, 3, "every fragment dropped by policy, counted");
    accounted(&bed);
}

/// A full-size fragment (1480 bytes of IP payload) tunnelled to its
/// fragment owner fits a 1600-byte CCL MTU: the frame gains exactly the
/// 94 bytes of a `ForwardedPacket` (no flow hint on the wire).
#[test]
fn full_size_fragment_fits_the_ccl_mtu() {
    use dataplane::buf::{PacketBuf, VecBuf};
    use dataplane::pipeline::Verdict;
    let mut bed = Bed::new(3, true);
    let ident = ident_with_fragment_owner(HOST, SERVER, B);
    let frame = PacketBuilder { dont_frag: false, ident, ..from_host(A, SERVER) }.udp(40500, 5000, &[0u8; 4000]);
    let frags = fragments(&frame, 1480);
    assert_eq!(frags[0].len(), 1514);
    let mut buf = VecBuf::new(&frags[0]);
    let v = bed.nodes[A].process(dataplane::Timestamp::from_millis(2_000), IN, &mut buf);
    assert_eq!(v, Verdict::Forward(CCL));
    assert_eq!(buf.data().len(), 1514 + 94);
    assert!(buf.data().len() - 14 <= 1600, "outer IPv4 packet within the CCL MTU");
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]
        /// The fragments of a client datagram (new connection) and of the
        /// server's reply land on random nodes in a random order: every
        /// fragment leaves the cluster exactly once, from the single
        /// owner, and reassembles to the datagram.
        #[test]
        fn random_landings_every_fragment_from_the_owner(
            len in 1usize..3000,
            size8 in 8usize..186,
            seed in any::<u64>(),
            director in 0usize..3,
        ) {
            let mut bed = Bed::new(3, true);
            let cport = port_with_director(SERVER, 5100, 17, 3, director);
            let payload: Vec<u8> = (0..len).map(|i| (i * 5 + 1) as u8).collect();
            let mut s = seed;
            let mut next = move || {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (s >> 33) as usize
            };
            let (qid, rid) = (next() as u16, next() as u16);
            let q = |n: usize| PacketBuilder { dont_frag: false, ident: qid, ..from_host(n, SERVER) }.udp(cport, 5100, &payload);
            let r = |n: usize| PacketBuilder { dont_frag: false, ident: rid, ..from_outside(n, SERVER) }.udp(5100, cport, &payload);
            for (mk, port) in [(&q as &dyn Fn(usize) -> Vec<u8>, IN), (&r, OUT)] {
                let count = fragments(&mk(0), size8 * 8).len();
                prop_assume!(count <= 64);
                let mut order: Vec<usize> = (0..count).collect();
                for i in (1..count).rev() {
                    order.swap(i, next() % (i + 1));
                }
                let mut out = vec![];
                for i in order {
                    let n = next() % 3;
                    out.extend(bed.send(n, port, fragments(&mk(n), size8 * 8)[i].clone()));
                }
                prop_assert_eq!(out.len(), count, "every fragment leaves once");
                let owner = out[0].0;
                let egress = if port == IN { OUT } else { IN };
                for (n, p, f) in &out {
                    prop_assert_eq!((*n, *p), (owner, egress), "from the owner only");
                    check_ip(f, 63);
                }
                let frames: Vec<Vec<u8>> = out.iter().map(|(_, _, f)| f.clone()).collect();
                prop_assert_eq!(reassemble_udp(&frames), payload.clone());
            }
            let t = tuple(HOST, cport, SERVER, 5100, 17);
            prop_assert_eq!(bed.owners(&t).len(), 1);
            for n in 0..3 {
                prop_assert_eq!(bed.nodes[n].frag_in_progress(), (0, 0));
            }
            accounted(&bed);
        }
    }
}

/// A TCP connection owned by A with a cookie ISN (R6): the client's
/// 600-byte segment arrives in four fragments on B, C, A, B; C is the
/// fragment owner and forwards them to A, which translates `seq` in the
/// first fragment only (incremental checksum). The segment the server
/// reassembles has the translated sequence number and a valid checksum,
/// and the server's ACK of all 600 bytes is in window and translated back.
#[test]
fn fragmented_tcp_segment_with_sequence_translation() {
    use dataplane::conntrack::tcp_flags::{ACK, PSH, SYN};
    use dataplane::wire::tcp::TcpPacket;
    let mut bed = Bed::new(3, true);
    let cport = port_with_director(SERVER, 80, 6, 3, C);
    let (c_isn, s_isn) = (1000u32, 5000u32);
    let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, c_isn, 0, SYN, 64240, &SYN_OPTS, b""));
    let isn = tcp_fields(&out[0].2).0;
    assert_ne!(isn, c_isn);
    let synack = from_outside(B, SERVER).tcp(80, cport, s_isn, isn.wrapping_add(1), SYN | ACK, 65535, &SYN_OPTS, b"");
    assert_eq!(bed.send(B, OUT, synack).len(), 1);
    assert_eq!(bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, c_isn + 1, s_isn + 1, ACK, 502, &[], b"")).len(), 1);

    let ident = ident_with_fragment_owner(HOST, SERVER, C);
    let payload: Vec<u8> = (0..600u32).map(|i| (i % 251) as u8).collect();
    let seg = |n: usize| {
        PacketBuilder { dont_frag: false, ident, ..from_host(n, SERVER) }
            .tcp(cport, 80, c_isn + 1, s_isn + 1, ACK | PSH, 502, &[], &payload)
    };
    let mut out = vec![];
    for (i, n) in [(2, B), (0, C), (1, A), (3, B)] {
        out.extend(bed.send(n, IN, fragments(&seg(n), 160)[i].clone()));
    }
    assert_eq!(out.len(), 4);
    for (n, p, f) in &out {
        assert_eq!((*n, *p), (A, OUT), "from the owner only");
        check_ip(f, 63);
    }
    let frames: Vec<Vec<u8>> = out.iter().map(|(_, _, f)| f.clone()).collect();
    let (src, dst, data) = reassemble(&frames);
    let t = TcpPacket::new_checked(&data[..]).unwrap();
    assert_eq!(t.seq(), isn.wrapping_add(1), "seq translated into the cookie space");
    assert!(t.verify_checksum(src, dst), "checksum of the whole segment still right");
    assert_eq!(t.payload(), &payload[..]);
    assert_eq!(bed.nodes[C].frag_counters().to_flow_owner, 4);

    // The server acknowledges the 600 bytes (landing on C): in window on
    // A, and translated back into the client's space.
    let ack = from_outside(C, SERVER).tcp(80, cport, s_isn + 1, isn.wrapping_add(601), ACK, 509, &[], b"");
    let out = bed.send(C, OUT, ack);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].0, out[0].1), (A, IN));
    assert_eq!(tcp_fields(&out[0].2).1, c_isn + 601);
    accounted(&bed);
}
