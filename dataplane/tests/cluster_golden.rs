//! Cluster golden tests (docs/cluster-design.md): three `Pipeline`s wired
//! by hand through their CCL ports (`cluster_bed`). Node A = 0, B = 1,
//! C = 2; flows are chosen so that C is the director. Each step sends one
//! frame to one node, lets the cluster settle, and checks the bytes that
//! left the cluster on data ports, the CCL messages exchanged and the
//! counters.

mod cluster_bed;

use cluster_bed::*;
use dataplane::buf::VecBuf;
use dataplane::ccl::{
    CclDrop, CclKey, FlowKey, ForwardedBatch, ForwardedPacket, FramePath, Message, MessageKind, OwnerQuery, Sealer,
};
use dataplane::conntrack::tcp_flags::{ACK, FIN, PSH, SYN};
use dataplane::pipeline::{Role, Verdict};
use dataplane::wire::build::PacketBuilder;
use dataplane::{DropReason, Epoch, NodeId, Timestamp};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;

fn one(out: &[(usize, dataplane::PortId, Vec<u8>)]) -> (usize, dataplane::PortId, Vec<u8>) {
    assert_eq!(out.len(), 1, "exactly one frame leaves the cluster: {out:?}");
    out[0].clone()
}

fn accounted(bed: &Bed) {
    for (n, p) in bed.nodes.iter().enumerate() {
        let c = p.counters();
        assert_eq!(c.packets, c.emitted() + c.consumed + c.dropped(), "node {n}: every packet accounted for");
        assert!(c.fast_path <= c.packets, "node {n}: the fast path counts frames given to process");
    }
}

/// SYN on A, SYN-ACK on B (cookie), ACK on B. Returns (client port, delta).
fn handshake(bed: &mut Bed) -> (u16, u32) {
    let cport = port_with_director(SERVER, 80, 6, 3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);

    // 1. SYN lands on A: A owns it, puts a cookie ISN in, registers with C.
    let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, OUT));
    let (isn, _, _, _) = tcp_fields(&f);
    assert_ne!(isn, C_ISN, "the ISN is replaced");
    assert_eq!(cookies().decode(isn), Some(NodeId(A as u8)), "the cookie names A");
    assert_eq!(hex(&f), hex(&to_gw(A, SERVER).tcp(cport, 80, isn, 0, SYN, 64240, &SYN_OPTS, b"")));
    let delta = isn.wrapping_sub(C_ISN);
    assert_eq!(bed.ccl_count(A, C, MessageKind::FlowRegister), 1);
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(A as u8))));
    assert_eq!(bed.cluster(A).counters.owner_packets, 1);

    // 2. SYN-ACK lands on B: the owner comes from the cookie, no query.
    let synack = from_outside(B, SERVER).tcp(80, cport, S_ISN, isn.wrapping_add(1), SYN | ACK, 65535, &SYN_OPTS, b"");
    let out = bed.send(B, OUT, synack);
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, IN));
    assert_eq!(
        hex(&f),
        hex(&to_host(A, SERVER).tcp(80, cport, S_ISN, C_ISN + 1, SYN | ACK, 65535, &SYN_OPTS, b"")),
        "ack translated back to the client's ISN + 1"
    );
    let b = bed.cluster(B);
    assert_eq!((b.counters.synack_cookie_decoded, b.counters.director_queries_sent), (1, 0));
    assert_eq!(b.counters.forwarded_to_owner, 1);
    assert_eq!(bed.cluster(A).counters.forwarded_received, 1);
    assert_eq!(bed.nodes[B].cluster_role(bed.now(), &t), Some((Role::Forwarder, NodeId(A as u8))));

    // 3. The client's ACK lands on B: forwarded on the record, seq translated.
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], b""));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, OUT));
    assert_eq!(
        hex(&f),
        hex(&to_gw(A, SERVER).tcp(cport, 80, isn.wrapping_add(1), S_ISN + 1, ACK, 502, &[], b""))
    );
    (cport, delta)
}

/// A forwarder's record made from a SYN-ACK (the owner decoded from the
/// cookie) idles out as a half-open connection (`tcp-syn`), not as an
/// established one: SYN-ACKs to the spoofed sources of a SYN flood at a
/// permitted server must not hold the record table for an hour against
/// legitimate connections (issue 15). After a longer silence a packet
/// there finds the owner through the director, whose record the owner
/// keeps.
#[test]
fn a_synack_forwarder_record_idles_out_as_half_open() {
    let mut bed = Bed::new(3, true);
    let (cport, delta) = handshake(&mut bed);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let tcp_syn = dataplane::conntrack::Timeouts::default().tcp_syn.0 / 1_000_000;
    let forwarder = Some((Role::Forwarder, NodeId(A as u8)));

    // The client's ACK at B (the handshake's last step) refreshed it.
    bed.now_ms += tcp_syn - 10;
    assert_eq!(bed.nodes[B].cluster_role(bed.now(), &t), forwarder, "live until tcp-syn");
    bed.now_ms += 20;
    assert_eq!(bed.nodes[B].cluster_role(bed.now(), &t), None, "idle past tcp-syn");
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(A as u8))));

    // Client data at B: asked of C, forwarded to A, a record again.
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK | PSH, 502, &[], b"later"));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, OUT));
    let isn = C_ISN.wrapping_add(delta);
    assert_eq!(hex(&f), hex(&to_gw(A, SERVER).tcp(cport, 80, isn.wrapping_add(1), S_ISN + 1, ACK | PSH, 502, &[], b"later")));
    assert_eq!(bed.cluster(B).counters.director_queries_sent, 1);
    assert_eq!(bed.nodes[B].cluster_role(bed.now(), &t), forwarder);
    accounted(&bed);
}

#[test]
fn tcp_cookie_owner_forwarders_and_director() {
    let mut bed = Bed::new(3, true);
    let (cport, delta) = handshake(&mut bed);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let c_seq = |n: u32| C_ISN.wrapping_add(n);
    let s_view = |n: u32| C_ISN.wrapping_add(n).wrapping_add(delta);

    // 4. Client data lands on C, the director: it forwards to the owner.
    let out = bed.send(C, IN, from_host(C, SERVER).tcp(cport, 80, c_seq(1), S_ISN + 1, ACK | PSH, 502, &[], b"hello"));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, OUT));
    assert_eq!(hex(&f), hex(&to_gw(A, SERVER).tcp(cport, 80, s_view(1), S_ISN + 1, ACK | PSH, 502, &[], b"hello")));
    assert_eq!(bed.cluster(C).counters.forwarded_to_owner, 1);

    // 5. Server data lands on A, the owner: ack translated.
    let out = bed.send(A, OUT, from_outside(A, SERVER).tcp(80, cport, S_ISN + 1, s_view(6), ACK | PSH, 509, &[], b"world"));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, IN));
    assert_eq!(hex(&f), hex(&to_host(A, SERVER).tcp(80, cport, S_ISN + 1, c_seq(6), ACK | PSH, 509, &[], b"world")));

    // An active flow without state changes refreshes the director's record
    // after half its idle timeout (ESTABLISHED: 3600 s).
    let updates = bed.ccl_count(A, C, MessageKind::StateUpdate);
    bed.now_ms += 1_800_000;
    let out = bed.send(A, OUT, from_outside(A, SERVER).tcp(80, cport, S_ISN + 6, s_view(6), ACK, 509, &[], b""));
    assert_eq!(one(&out).0, A);
    assert_eq!(bed.ccl_count(A, C, MessageKind::StateUpdate), updates + 1, "refresh");
    let out = bed.send(A, OUT, from_outside(A, SERVER).tcp(80, cport, S_ISN + 6, s_view(6), ACK, 509, &[], b""));
    assert_eq!(one(&out).0, A);
    assert_eq!(bed.ccl_count(A, C, MessageKind::StateUpdate), updates + 1, "no second refresh");

    // 6. Client FIN on B, server FIN on C, last ACK on A.
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, c_seq(6), S_ISN + 6, FIN | ACK, 502, &[], b""));
    let (n, _, f) = one(&out);
    assert_eq!(n, A);
    assert_eq!(hex(&f), hex(&to_gw(A, SERVER).tcp(cport, 80, s_view(6), S_ISN + 6, FIN | ACK, 502, &[], b"")));
    let out = bed.send(C, OUT, from_outside(C, SERVER).tcp(80, cport, S_ISN + 6, s_view(7), FIN | ACK, 509, &[], b""));
    let (n, _, f) = one(&out);
    assert_eq!(n, A);
    assert_eq!(hex(&f), hex(&to_host(A, SERVER).tcp(80, cport, S_ISN + 6, c_seq(7), FIN | ACK, 509, &[], b"")));
    let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, c_seq(7), S_ISN + 7, ACK, 502, &[], b""));
    let (n, _, f) = one(&out);
    assert_eq!(n, A);
    assert_eq!(hex(&f), hex(&to_gw(A, SERVER).tcp(cport, 80, s_view(7), S_ISN + 7, ACK, 502, &[], b"")));

    // Exactly one owner; the director's record names it, with the state
    // the owner's updates carried.
    assert_eq!(bed.owners(&t), vec![A]);
    assert_eq!(bed.nodes[A].cluster_role(bed.now(), &t), Some((Role::Owner, NodeId(0))));
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(0))));
    assert_eq!(bed.nodes[B].cluster_role(bed.now(), &t), Some((Role::Forwarder, NodeId(0))));
    let now = bed.now();
    let conns = bed.nodes[C].conns(now, 16);
    let d = conns.iter().find(|c| c.tuple == t).expect("director record in show conn");
    assert_eq!((d.role, d.owner, d.state), (Some("director"), Some(NodeId(0)), "TIME_WAIT"));
    let conns = bed.nodes[A].conns(now, 16);
    let o = conns.iter().find(|c| c.tuple == t).unwrap();
    assert_eq!((o.role, o.owner, o.state), (Some("owner"), Some(NodeId(0)), "TIME_WAIT"));
    let conns = bed.nodes[B].conns(now, 16);
    assert_eq!(conns.iter().find(|c| c.tuple.proto == 6).and_then(|c| c.role), Some("forwarder"));

    // Counters: A owned 10 packets, C saw every state change (and one
    // refresh) as an update. No query but B's FIN after the half hour's
    // silence: its record from the SYN-ACK had idled out as a half-open
    // connection's (tcp-syn), C's record answered.
    let a = bed.cluster(A);
    assert_eq!(a.counters.owner_packets, 10);
    assert_eq!(a.counters.forwarded_received, 5);
    for (n, queries) in [(A, 0), (B, 1), (C, 0)] {
        assert_eq!(bed.cluster(n).counters.director_queries_sent, queries, "node {n}");
        assert_eq!(bed.cluster(n).ccl.total_drops(), 0, "node {n}");
    }
    assert_eq!(bed.ccl_count(A, C, MessageKind::FlowRegister), 1);
    // SYN_RECV, ESTABLISHED, refresh, FIN_WAIT, CLOSING, TIME_WAIT.
    assert_eq!(bed.ccl_count(A, C, MessageKind::StateUpdate), 6);
    assert_eq!(bed.cluster(C).ccl_rx(MessageKind::StateUpdate), 6);
    // B's first two segments each went to A in a batch of one (one burst
    // each); its FIN, released from the pending table by C's answer, alone.
    for k in [MessageKind::ForwardedPacket, MessageKind::ForwardedBatch] {
        assert_eq!(bed.cluster(A).ccl_tx(k), 0);
    }
    assert_eq!(bed.cluster(B).ccl_tx(MessageKind::ForwardedPacket), 1);
    assert_eq!(bed.cluster(B).ccl_tx(MessageKind::ForwardedBatch), 2);
    assert_eq!(bed.cluster(B).counters.batched_frames, 2);
    // A received every other forwarded frame (B's and C's) in a batch of one.
    assert_eq!(bed.cluster(A).counters.batches_received + 1, a.counters.forwarded_received);
    accounted(&bed);
}

#[test]
fn tcp_sack_blocks_translated() {
    let mut bed = Bed::new(3, true);
    let (cport, delta) = handshake(&mut bed);
    let s_view = |n: u32| C_ISN.wrapping_add(n).wrapping_add(delta);
    let sack = |l: u32, r: u32| {
        let mut o = vec![1, 1, 5, 10];
        o.extend_from_slice(&l.to_be_bytes());
        o.extend_from_slice(&r.to_be_bytes());
        o
    };
    // A duplicate ACK from the server, with a SACK block, lands on B.
    let opts = sack(s_view(101), s_view(201));
    let out = bed.send(B, OUT, from_outside(B, SERVER).tcp(80, cport, S_ISN + 1, s_view(1), ACK, 509, &opts, b""));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, IN));
    let (_, ack, _, blocks) = tcp_fields(&f);
    assert_eq!(ack, C_ISN + 1);
    assert_eq!(blocks, vec![(C_ISN + 101, C_ISN + 201)]);
    let want = to_host(A, SERVER).tcp(80, cport, S_ISN + 1, C_ISN + 1, ACK, 509, &sack(C_ISN + 101, C_ISN + 201), b"");
    assert_eq!(hex(&f), hex(&want));
    accounted(&bed);
}

#[test]
fn tcp_without_seq_randomization_queries_the_director() {
    let mut bed = Bed::new(3, false);
    let cport = port_with_director(SERVER, 80, 6, 3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    let (_, _, f) = one(&out);
    assert_eq!(hex(&f), hex(&to_gw(A, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b"")), "ISN kept");

    // SYN-ACK on B: B parks it and asks C, C answers A, B forwards.
    let out = bed.send(B, OUT, from_outside(B, SERVER).tcp(80, cport, S_ISN, C_ISN + 1, SYN | ACK, 65535, &SYN_OPTS, b""));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, IN));
    assert_eq!(hex(&f), hex(&to_host(A, SERVER).tcp(80, cport, S_ISN, C_ISN + 1, SYN | ACK, 65535, &SYN_OPTS, b"")));
    assert_eq!(bed.verdicts.iter().find(|(n, _)| *n == B).map(|v| v.1), Some(Verdict::Consumed));
    let b = bed.cluster(B).counters;
    assert_eq!(
        (b.synack_cookie_decoded, b.director_queries_sent, b.pending_queued, b.pending_released, b.forwarded_to_owner),
        (0, 1, 1, 1, 1)
    );
    assert_eq!(bed.ccl_count(B, C, MessageKind::OwnerQuery), 1);
    assert_eq!(bed.ccl_count(C, B, MessageKind::OwnerReply), 1);
    assert_eq!(bed.cluster(C).counters.queries_answered, 1);
    assert_eq!(bed.cluster(C).counters.elections, 0);

    // The ACK on B goes straight to A on the record the reply installed.
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], b""));
    let (n, _, f) = one(&out);
    assert_eq!(n, A);
    assert_eq!(hex(&f), hex(&to_gw(A, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], b"")));
    assert_eq!(bed.cluster(B).counters.director_queries_sent, 1);
    assert_eq!(bed.owners(&t), vec![A]);
    accounted(&bed);
}

#[test]
fn udp_director_elects_first_receiver() {
    let mut bed = Bed::new(3, true);
    let cport = port_with_director(SERVER, 5000, 17, 3, C);
    let t = tuple(HOST, cport, SERVER, 5000, 17);

    // First packet on B: B asks C, C elects B (R8), B owns and forwards.
    let out = bed.send(B, IN, from_host(B, SERVER).udp(cport, 5000, b"ping"));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (B, OUT));
    assert_eq!(hex(&f), hex(&to_gw(B, SERVER).udp(cport, 5000, b"ping")));
    assert_eq!(bed.cluster(C).counters.elections, 1);
    assert_eq!(bed.ccl_count(B, C, MessageKind::OwnerQuery), 1);
    assert_eq!(bed.ccl_count(B, C, MessageKind::FlowRegister), 1, "the owner registers (R8)");
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(B as u8))));

    // The reply lands on A: A asks C, C names B, A forwards to B.
    let out = bed.send(A, OUT, from_outside(A, SERVER).udp(5000, cport, b"pong"));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (B, IN));
    assert_eq!(hex(&f), hex(&to_host(B, SERVER).udp(5000, cport, b"pong")));
    assert_eq!(bed.ccl_count(A, C, MessageKind::OwnerQuery), 1);
    assert_eq!(bed.ccl_count(A, B, MessageKind::ForwardedPacket), 1);
    assert_eq!(bed.cluster(C).counters.elections, 1, "no second election");
    assert_eq!(bed.nodes[A].cluster_role(bed.now(), &t), Some((Role::Forwarder, NodeId(B as u8))));
    assert_eq!(bed.owners(&t), vec![B]);

    // More replies on A go straight to B.
    let out = bed.send(A, OUT, from_outside(A, SERVER).udp(5000, cport, b"pong2"));
    assert_eq!(one(&out).0, B);
    assert_eq!(bed.cluster(A).counters.director_queries_sent, 1);
    accounted(&bed);
}

#[test]
fn dns_reply_on_non_owner_is_relayed_by_the_director() {
    let mut bed = Bed::new(3, true);
    let cport = port_with_director(DNS, 53, 17, 3, C);
    let t = tuple(HOST, cport, DNS, 53, 17);
    let out = bed.send(A, IN, from_host(A, DNS).udp(cport, 53, b"query"));
    assert_eq!(one(&out).0, A);
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(A as u8))));

    // The answer lands on B: no query, a relay to C, which forwards to A.
    let out = bed.send(B, OUT, from_outside(B, DNS).udp(53, cport, b"answer"));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, IN));
    assert_eq!(hex(&f), hex(&to_host(A, DNS).udp(53, cport, b"answer")));
    assert_eq!(bed.cluster(B).counters.relays_sent, 1);
    assert_eq!(bed.cluster(B).counters.director_queries_sent, 0);
    assert_eq!(bed.ccl_count(B, C, MessageKind::RelayToOwner), 1);
    assert_eq!(bed.ccl_count(C, A, MessageKind::ForwardedPacket), 1);
    assert_eq!(bed.cluster(C).counters.relays_relayed, 1);
    assert_eq!(bed.owners(&t), vec![A]);

    // A relay for a flow the director does not know is dropped there.
    let out = bed.send(B, OUT, from_outside(B, DNS).udp(53, cport + 1, b"stray"));
    assert!(out.is_empty());
    let stray = tuple(HOST, cport + 1, DNS, 53, 17);
    let d = director(&stray, 3);
    if d != B {
        assert_eq!(bed.drops(d, DropReason::ClusterNoRecord), 1);
    }
    accounted(&bed);
}

/// A CCL frame from "node 1" to node A, sealed with `key`.
fn ccl_frame(key: &str, channel: u8, msg: &Message<'_>) -> Vec<u8> {
    let k = CclKey::new(NAME, key).unwrap();
    let mut s = Sealer::new(&k, NodeId(1), channel, 1001).unwrap();
    let path = FramePath { src_mac: ccl_mac(1), dst_mac: ccl_mac(0), src_ip: ccl_addr(1), dst_ip: ccl_addr(0) };
    let mut out = vec![0u8; 2048];
    let n = s.seal_frame(&path, Epoch(1), msg, &mut out).unwrap();
    out.truncate(n);
    out
}

/// A CCL frame into node A at t = 2 s.
fn send_to_a(bed: &mut Bed, f: Vec<u8>) -> Verdict {
    let mut b = VecBuf::new(&f);
    bed.nodes[A].process(Timestamp::from_secs(2), CCL, &mut b)
}

/// An owner query about HOST:1234 -> SERVER:80 (TCP).
fn host_query() -> Message<'static> {
    Message::OwnerQuery(OwnerQuery {
        query_id: 7,
        flow: FlowKey::new(tuple(HOST, 1234, SERVER, 80, 6)).unwrap(),
        elect_if_absent: false,
        local: false,
    })
}

/// One worker of several takes only its own channel's data messages (the
/// node steers by channel, docs/workers.md); a lone worker takes any.
#[test]
fn a_worker_of_several_takes_its_own_channel_only() {
    let q = host_query();
    let send = send_to_a;
    let mut bed = Bed::new(3, true);
    bed.nodes[A].set_worker(dataplane::WorkerId(1), 2).unwrap();
    assert_eq!(send(&mut bed, ccl_frame(KEY, 0, &q)), Verdict::Drop(DropReason::CclWrongWorker));
    assert_eq!(bed.drops(A, DropReason::CclWrongWorker), 1);
    assert_eq!(send(&mut bed, ccl_frame(KEY, 1, &q)), Verdict::Consumed);
    assert_eq!(bed.cluster(A).ccl_rx(MessageKind::OwnerQuery), 2, "opened both, took one");
    let mut lone = Bed::new(3, true);
    assert_eq!(send(&mut lone, ccl_frame(KEY, 3, &q)), Verdict::Consumed);
    assert_eq!(lone.drops(A, DropReason::CclWrongWorker), 0);
}

#[test]
fn bad_ccl_is_dropped_and_counted() {
    let mut bed = Bed::new(3, true);
    let q = host_query();
    let send_one = send_to_a;

    // Wrong key.
    let v = send_one(&mut bed, ccl_frame("not-the-key", 5, &q));
    assert_eq!(v, Verdict::Drop(DropReason::CclMalformed));
    assert_eq!(bed.cluster(A).ccl_drop(CclDrop::BadMac), 1);

    // Good, then replayed.
    let good = ccl_frame(KEY, 5, &q);
    assert_eq!(send_one(&mut bed, good.clone()), Verdict::Consumed);
    assert_eq!(bed.cluster(A).ccl_rx(MessageKind::OwnerQuery), 1);
    assert_eq!(send_one(&mut bed, good.clone()), Verdict::Drop(DropReason::CclMalformed));
    assert_eq!(bed.cluster(A).ccl_drop(CclDrop::Replay), 1);

    // Truncated: the CCL datagram cut short inside well-formed UDP/IPv4.
    let ccl = &good[42..];
    let udp = |payload: &[u8]| {
        PacketBuilder::new(ccl_mac(1), ccl_mac(0), ccl_addr(1), ccl_addr(0)).udp(31300, 31300, payload)
    };
    assert_eq!(send_one(&mut bed, udp(&ccl[..ccl.len() - 5])), Verdict::Drop(DropReason::CclMalformed));
    assert_eq!(bed.cluster(A).ccl_drop(CclDrop::BadLength), 1);
    assert_eq!(send_one(&mut bed, udp(&ccl[..20])), Verdict::Drop(DropReason::CclMalformed));
    assert_eq!(bed.cluster(A).ccl_drop(CclDrop::Truncated), 1);
    // Flipped payload byte (of a fresh message, or it would be a replay):
    // fails the MAC.
    let fresh = ccl_frame(KEY, 6, &q);
    let mut flipped = fresh[42..].to_vec();
    flipped[40] ^= 1;
    assert_eq!(send_one(&mut bed, udp(&flipped)), Verdict::Drop(DropReason::CclMalformed));
    assert_eq!(bed.cluster(A).ccl_drop(CclDrop::BadMac), 2);

    assert_eq!(bed.drops(A, DropReason::CclMalformed), 5);
    assert_eq!(bed.cluster(A).counters.queries_answered, 1);
    accounted(&bed);
}

#[test]
fn second_syn_on_another_node_yields_to_the_first_owner() {
    let mut bed = Bed::new(3, true);
    let cport = port_with_director(SERVER, 80, 6, 3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    // The same SYN (a retransmission on another path) lands on B: B takes
    // it, registers, C keeps A and tells B, B becomes a forwarder.
    bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    assert_eq!(bed.cluster(C).counters.register_conflicts, 1);
    assert_eq!(bed.cluster(B).counters.ownership_yielded, 1);
    assert_eq!(bed.owners(&t), vec![A]);
    assert_eq!(bed.nodes[B].cluster_role(bed.now(), &t), Some((Role::Forwarder, NodeId(A as u8))));
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(A as u8))));
    // The next SYN on B goes to A.
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    assert_eq!(one(&out).0, A);
    accounted(&bed);
}

#[test]
fn owner_that_is_director_registers_with_a_backup() {
    let mut bed = Bed::new(3, true);
    let cport = port_with_director(SERVER, 80, 6, 3, A);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    let backup = (0..3).find(|&n| n != A && bed.ccl_count(A, n, MessageKind::FlowRegister) == 1).expect("a backup");
    assert_eq!(bed.ccl.len(), 1, "one registration, to the backup only");
    assert_eq!(bed.nodes[backup].cluster_role(bed.now(), &t), Some((Role::Backup, NodeId(A as u8))));
    // The SYN-ACK on the backup goes to A (cookie), the one on the third
    // node too.
    let isn = tcp_fields(&bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""))[0].2).0;
    let other = 3 - backup - A;
    let out = bed.send(other, OUT, from_outside(other, SERVER).tcp(80, cport, S_ISN, isn.wrapping_add(1), SYN | ACK, 65535, &SYN_OPTS, b""));
    assert_eq!(one(&out).0, A);
    assert_eq!(bed.owners(&t), vec![A]);
    accounted(&bed);
}

#[test]
fn icmp_echo_request_elects_reply_is_relayed() {
    let mut bed = Bed::new(3, true);
    // Echo request (id, 0) and reply (0, id) hash alike (R3).
    let id = (1u16..).find(|&i| director(&tuple(HOST, i, SERVER, 0, 1), 3) == C).unwrap();
    let out = bed.send(A, IN, from_host(A, SERVER).icmp(8, 0, (id, 1), b"ping"));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, OUT));
    assert_eq!(hex(&f), hex(&to_gw(A, SERVER).icmp(8, 0, (id, 1), b"ping")));
    assert_eq!(bed.cluster(C).counters.elections, 1);
    let out = bed.send(B, OUT, from_outside(B, SERVER).icmp(0, 0, (id, 1), b"ping"));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, IN));
    assert_eq!(hex(&f), hex(&to_host(A, SERVER).icmp(0, 0, (id, 1), b"ping")));
    assert_eq!(bed.cluster(B).counters.relays_sent, 1);
    assert_eq!(bed.cluster(C).counters.relays_relayed, 1);
    accounted(&bed);
}

#[test]
fn ccl_peers_resolved_by_arp() {
    let mut bed = Bed::with_arp(3);
    let cport = port_with_director(SERVER, 5000, 17, 3, C);
    // Before any ARP: the query cannot leave, the frame is dropped (and a
    // who-has goes out on the CCL segment).
    let out = bed.send(B, IN, from_host(B, SERVER).udp(cport, 5000, b"early"));
    assert!(out.is_empty());
    assert_eq!(bed.drops(B, DropReason::ClusterPeerUnresolved), 1);
    // Timers ask for every peer; the answers are learnt.
    bed.tick(1_000);
    for n in 0..3 {
        let now = bed.now();
        let learnt = bed.nodes[n].arp_entries(now).iter().filter(|e| e.interface == "ccl" && e.mac.is_some()).count();
        assert_eq!(learnt, 2, "node {n} knows both peers");
    }
    let out = bed.send(B, IN, from_host(B, SERVER).udp(cport, 5000, b"later"));
    assert_eq!(one(&out).0, B);
    let out = bed.send(A, OUT, from_outside(A, SERVER).udp(5000, cport, b"reply"));
    assert_eq!(one(&out).0, B);
    accounted(&bed);
}

#[test]
fn burst_to_one_owner_goes_in_batches_in_order() {
    // B forwards a burst of 20 client segments of A's connection: they
    // reach A in two `ForwardedBatch`es (16 frames at most per batch) and
    // leave A in the order they arrived, the 400-byte one (too long to
    // start a batch) included, since a batch to A was open.
    let mut bed = Bed::new(3, true);
    let (cport, delta) = handshake(&mut bed);
    let isn = C_ISN.wrapping_add(delta);
    let mut off = 1u32;
    let (mut sent, mut want) = (vec![], vec![]);
    for k in 0..20u8 {
        let data = vec![b'a' + k; if k == 17 { 400 } else { 10 }];
        sent.push(from_host(B, SERVER).tcp(cport, 80, C_ISN + off, S_ISN + 1, ACK, 502, &[], &data));
        want.push(hex(&to_gw(A, SERVER).tcp(cport, 80, isn.wrapping_add(off), S_ISN + 1, ACK, 502, &[], &data)));
        off += data.len() as u32;
    }
    let (batches, packets) =
        (bed.ccl_count(B, A, MessageKind::ForwardedBatch), bed.ccl_count(B, A, MessageKind::ForwardedPacket));
    let sent_before = bed.cluster(B).counters.batches_sent;
    let out = bed.send_burst(B, IN, sent);
    let got: Vec<String> = out.iter().map(|(n, p, f)| {
        assert_eq!((*n, *p), (A, OUT));
        hex(f)
    }).collect();
    assert_eq!(got, want, "every segment, in order");
    assert_eq!(bed.ccl_count(B, A, MessageKind::ForwardedBatch) - batches, 2);
    assert_eq!(bed.ccl_count(B, A, MessageKind::ForwardedPacket) - packets, 0);
    let (a, b) = (bed.cluster(A), bed.cluster(B));
    assert_eq!(b.counters.batches_sent - sent_before, 2);
    assert_eq!(a.counters.batch_frame_drops, 0);
    assert_eq!(a.ccl.total_drops(), 0);
    accounted(&bed);
}

#[test]
fn owner_keeps_batch_then_single_in_order() {
    // One burst at the owner A: a batch carrying segment 1, then segment 2
    // wrapped alone. Segment 1 waits in the pool for `drain_generated`, so
    // segment 2 must wait behind it rather than leave with the burst.
    let mut bed = Bed::new(3, true);
    let (cport, delta) = handshake(&mut bed);
    let isn = C_ISN.wrapping_add(delta);
    let seg = |off: u32, data: &[u8]| from_host(B, SERVER).tcp(cport, 80, C_ISN + off, S_ISN + 1, ACK, 502, &[], data);
    let (one_, two) = (seg(1, b"first"), seg(6, b"second"));
    let mut payload = vec![0u8; 256];
    let used = ForwardedBatch::push(&mut payload, 0, 0, &one_).unwrap();
    let batch = ForwardedBatch::parse(&payload[..used]).unwrap();
    let fp = ForwardedPacket { ingress_iface: 0, flow_hint: None, frame: &two };
    // Two channels of node B: each sealer starts at sequence 1.
    let frames = vec![ccl_frame(KEY, 7, &Message::ForwardedBatch(batch)), ccl_frame(KEY, 8, &Message::ForwardedPacket(fp))];
    let out = bed.send_burst(A, CCL, frames);
    let got: Vec<String> = out.iter().map(|(n, p, f)| {
        assert_eq!((*n, *p), (A, OUT));
        hex(f)
    }).collect();
    let want: Vec<String> = [(1u32, &b"first"[..]), (6, &b"second"[..])]
        .iter()
        .map(|&(off, d)| hex(&to_gw(A, SERVER).tcp(cport, 80, isn.wrapping_add(off), S_ISN + 1, ACK, 502, &[], d)))
        .collect();
    assert_eq!(got, want, "segment 1 leaves before segment 2");
    accounted(&bed);
}

#[test]
fn forwarded_frame_without_owner_flow_is_dropped() {
    // C has a record naming A, but A lost the flow: the forwarded frame is
    // dropped at A and counted.
    let mut bed = Bed::new(3, true);
    let (cport, _) = handshake(&mut bed);
    bed.nodes[A] = dataplane::pipeline::Pipeline::new(config(A, 3, true)).unwrap();
    let out = bed.send(C, IN, from_host(C, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], b"x"));
    assert!(out.is_empty());
    // It came in a batch: the datagram was consumed, its frame's drop is
    // counted with the batch's frames (`show cluster`).
    let a = bed.cluster(A);
    assert_eq!(a.counters.batch_frame_drops, 1);
    let nonzero: Vec<(&str, u64)> =
        DropReason::ALL.iter().map(|r| (r.as_str(), a.batch_drops[r.index()])).filter(|d| d.1 != 0).collect();
    assert_eq!(nonzero, vec![(DropReason::ClusterNoOwnerFlow.as_str(), 1)]);
    // A frame too long to be batched goes alone and is dropped as the
    // datagram's verdict.
    let big = vec![0x61u8; 400];
    let out = bed.send(C, IN, from_host(C, SERVER).tcp(cport, 80, C_ISN + 2, S_ISN + 1, ACK, 502, &[], &big));
    assert!(out.is_empty());
    assert_eq!(bed.drops(A, DropReason::ClusterNoOwnerFlow), 1);
    accounted(&bed);
}

#[test]
fn pending_query_times_out() {
    // Only A and B are up, but A does not hear B's replies: a frame waiting
    // for the director is dropped after the timeout, counted.
    let mut bed = Bed::new(2, true);
    let cport = port_with_director(SERVER, 5000, 17, 2, B);
    let now = Timestamp::from_secs(5);
    let mut buf = VecBuf::new(&from_host(A, SERVER).udp(cport, 5000, b"x"));
    assert_eq!(bed.nodes[A].process(now, IN, &mut buf), Verdict::Consumed);
    let mut buf = VecBuf::new(&from_host(A, SERVER).udp(cport, 5000, b"y"));
    assert_eq!(bed.nodes[A].process(now, IN, &mut buf), Verdict::Consumed);
    let c = bed.cluster(A).counters;
    assert_eq!((c.director_queries_sent, c.queries_coalesced, c.pending), (1, 1, 2));
    bed.nodes[A].poll_timers(Timestamp(now.0 + 50_000_000));
    assert_eq!(bed.cluster(A).counters.pending, 2);
    bed.nodes[A].poll_timers(Timestamp(now.0 + 100_000_000));
    let c = bed.cluster(A).counters;
    assert_eq!((c.pending, c.pending_timeouts), (0, 2));
}

/// Regression (simulator seeds 2 and 324): without cookies a lost
/// `FlowRegister` left the director without a record, so every SYN-ACK
/// query was answered "no owner" until the owner's refresh 15 s later.
/// The owner now registers again when the client retransmits its SYN.
#[test]
fn lost_registration_is_resent_on_syn_retransmission() {
    let mut bed = Bed::new(3, false);
    let cport = port_with_director(SERVER, 80, 6, 3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let syn = || from_host(A, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b"");
    let synack = || from_outside(B, SERVER).tcp(80, cport, S_ISN, C_ISN + 1, SYN | ACK, 65535, &SYN_OPTS, b"");

    // The SYN's registration is lost on the CCL.
    bed.hold = Some(MessageKind::FlowRegister);
    let out = bed.send(A, IN, syn());
    assert_eq!(one(&out).0, A);
    assert!(!bed.held.is_empty(), "A registered");
    bed.held.clear();
    bed.hold = None;
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), None);

    // The SYN-ACK on B: C knows no owner, the SYN-ACK is dropped.
    let out = bed.send(B, OUT, synack());
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(bed.cluster(B).counters.pending_no_owner, 1);

    // The client retransmits its SYN to A: A registers again.
    let out = bed.send(A, IN, syn());
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, OUT));
    assert_eq!(hex(&f), hex(&to_gw(A, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b"")));
    assert_eq!(bed.cluster(A).counters.registers_resent, 1);
    assert_eq!(bed.ccl_count(A, C, MessageKind::FlowRegister), 1);
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(A as u8))));

    // The server's retransmitted SYN-ACK on B now finds the owner.
    let out = bed.send(B, OUT, synack());
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, IN));
    assert_eq!(hex(&f), hex(&to_host(A, SERVER).tcp(80, cport, S_ISN, C_ISN + 1, SYN | ACK, 65535, &SYN_OPTS, b"")));
    assert_eq!(bed.owners(&t), vec![A]);
    accounted(&bed);
}

/// Regression (simulator seed 123): flow records carried no version, so
/// the SYN_RECV update (30 s idle) arriving after the ESTABLISHED one
/// (3600 s) at the director undid it, and the director record expired
/// under an idle connection. Versioned records: the older one is ignored.
#[test]
fn reordered_state_updates_keep_the_newer_state() {
    let mut bed = Bed::new(3, true);
    bed.hold = Some(MessageKind::StateUpdate);
    let (cport, _) = handshake(&mut bed);
    bed.hold = None;
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let to_c: Vec<usize> = (0..bed.held.len()).filter(|&i| bed.held[i].1 == C).collect();
    assert_eq!(to_c.len(), 2, "SYN_RECV then ESTABLISHED updates to the director");
    // Deliver them to C in reverse order (the backup's are lost).
    bed.release_held(&[to_c[1], to_c[0]]);
    assert_eq!(bed.cluster(C).counters.records_stale, 1);
    let state = |bed: &Bed| {
        let conns = bed.nodes[C].conns(bed.now(), 100);
        conns.iter().find(|c| c.tuple == t).map(|c| c.state)
    };
    assert_eq!(state(&bed), Some("ESTABLISHED"));
    // Idle past the SYN timeout: the director still knows the owner.
    bed.tick(31_000);
    bed.tick(1_000);
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(A as u8))));
    assert_eq!(bed.cluster(C).counters.records_expired, 0);
    accounted(&bed);
}

/// A record of a newer generation (the flow was created again) wins over
/// the older generation's updates, whatever order they arrive in.
#[test]
fn record_versions_compare_by_generation_then_seq() {
    use dataplane::pipeline::cluster::Version;
    let v = |generation, seq| Version { generation, seq };
    assert!(v(1, 0).older_than(v(1, 1)));
    assert!(!v(1, 1).older_than(v(1, 1)));
    assert!(!v(1, 2).older_than(v(1, 1)));
    assert!(v(1, 9).older_than(v(2, 0)));
    assert!(!v(2, 0).older_than(v(1, 9)));
    // Wrapping.
    assert!(v(u32::MAX, 5).older_than(v(0, 0)));
    assert!(v(3, u32::MAX).older_than(v(3, 1)));
}

/// Regression (simulator seeds 187 and 262): the ESTABLISHED update was
/// lost, the director kept the SYN_RECV record (30 s) and dropped it under
/// an idle connection. The owner re-sends a state change that lengthened
/// the record's timeout, `RESEND_DELAY` later.
#[test]
fn lost_state_update_is_resent() {
    // The handshake's state updates are held; only SYN_RECV reaches C.
    let mut bed = Bed::new(3, true);
    bed.hold = Some(MessageKind::StateUpdate);
    let (cport, _) = handshake(&mut bed);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let to_c: Vec<usize> = (0..bed.held.len()).filter(|&i| bed.held[i].1 == C).collect();
    assert_eq!(to_c.len(), 2);
    bed.release_held(&[to_c[0]]); // SYN_RECV arrives, ESTABLISHED is lost.
    let state = |bed: &Bed| {
        let conns = bed.nodes[C].conns(bed.now(), 100);
        conns.iter().find(|c| c.tuple == t).map(|c| c.state)
    };
    assert_eq!(state(&bed), Some("SYN_RECV"));
    bed.hold = None;
    // After RESEND_DELAY the owner sends the record again.
    bed.tick(2_100);
    assert_eq!(bed.cluster(A).counters.updates_resent, 1);
    assert_eq!(state(&bed), Some("ESTABLISHED"));
    // Idle past the SYN timeout: the director still knows the owner.
    bed.tick(31_000);
    bed.tick(1_000);
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(A as u8))));
    // Two more re-sends, then none.
    bed.tick(10_000);
    assert_eq!(bed.cluster(A).counters.updates_resent, 3);
    accounted(&bed);
}

/// PMTUD through the cluster (issue 11 point 5): a router beyond the
/// gateway answers a client segment with "fragmentation needed"; the error
/// lands on a node that does not own the connection, reaches the owner
/// (a forwarder's record, or the director's relay) and leaves the owner
/// towards the client with the quoted segment's sequence number taken back
/// into the client's space — the client's TCP checks it against its send
/// window (RFC 5927 §4.1) and would ignore the error otherwise.
#[test]
fn frag_needed_for_a_connection_owned_elsewhere_reaches_the_client_in_its_sequence_space() {
    let mut bed = Bed::new(3, true);
    let (cport, delta) = handshake(&mut bed);
    let payload = [0x5au8; 100];
    // The segment as A sent it (server's view of the sequence) and as the
    // client sent it.
    let sent = to_gw(A, SERVER).tcp(cport, 80, (C_ISN + 1).wrapping_add(delta), S_ISN + 1, ACK | PSH, 502, &[], &payload);
    let own = to_gw(A, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK | PSH, 502, &[], &payload);
    let router = std::net::Ipv4Addr::new(203, 0, 113, 1);
    for via in [B, C] {
        let err = from_outside(via, router).icmp(3, 4, (0, 1280), &sent[14..]);
        let out = bed.send(via, OUT, err);
        let (n, port, f) = one(&out);
        assert_eq!((n, port), (A, IN), "via node {via}: out of the owner to the client");
        assert_eq!(hex(&f), hex(&to_host(A, router).icmp(3, 4, (0, 1280), &own[14..])), "via node {via}");
    }
    accounted(&bed);
}

/// A trace on every node (issue 14, item 5): the handshake's frames each
/// leave one event where they were decided — the SYN at A (owner, out of
/// OUT), the SYN-ACK at B (forwarder, over the CCL to A) and again at A
/// (from B, owner, out of IN), the ACK at B (to A) and at A (from B).
/// Frames of other connections leave none; a trace past its deadline
/// stops recording and keeps its events.
#[test]
fn a_trace_follows_one_connection_across_the_nodes() {
    use dataplane::pipeline::trace::{TraceFilter, TraceFrom, TraceVerdict};
    let mut bed = Bed::new(3, true);
    let until = Timestamp(bed.now().0 + 60_000_000_000);
    let f = TraceFilter::parse(&format!("{HOST} {SERVER} port 80")).unwrap();
    for p in &mut bed.nodes {
        p.trace_start(f, until);
    }
    let (cport, _) = handshake(&mut bed);
    // Another connection: not traced.
    bed.send(A, IN, from_host(A, SERVER).tcp(cport, 81, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    let ev = |bed: &Bed, n: usize| bed.nodes[n].trace_events().map(|(_, _, e, lost)| (e, lost)).unwrap();
    let summary = |n: usize| -> Vec<(TraceFrom, Option<(&'static str, NodeId)>, TraceVerdict, u8)> {
        ev(&bed, n).0.iter().map(|e| (e.from, e.role, e.verdict, e.tcp_flags)).collect()
    };
    let a = NodeId(A as u8);
    assert_eq!(
        summary(A),
        vec![
            (TraceFrom::Port(IN), Some(("owner", a)), TraceVerdict::Port(OUT), SYN),
            (TraceFrom::Member(NodeId(B as u8)), Some(("owner", a)), TraceVerdict::Port(IN), SYN | ACK),
            (TraceFrom::Member(NodeId(B as u8)), Some(("owner", a)), TraceVerdict::Port(OUT), ACK),
        ]
    );
    assert_eq!(
        summary(B),
        vec![
            (TraceFrom::Port(OUT), Some(("forwarder", a)), TraceVerdict::Member(a), SYN | ACK),
            (TraceFrom::Port(IN), Some(("forwarder", a)), TraceVerdict::Member(a), ACK),
        ]
    );
    assert_eq!(summary(C), vec![], "C only directs: its registrations are no traced frames");
    assert!(ev(&bed, A).0.iter().all(|e| e.tuple.src_port == cport || e.tuple.dst_port == cport));
    // Past the deadline: off the packet path, events kept.
    bed.now_ms += 61_000;
    for p in &mut bed.nodes {
        let now = Timestamp(until.0 + 1_000_000_000);
        p.poll_timers(now);
    }
    bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], b""));
    assert_eq!(ev(&bed, B).0.len(), 2, "no event after the deadline");
    assert_eq!(ev(&bed, A).1, 0, "nothing lost");
}

/// A reply relayed by its director to the owner it names, when the
/// director is that owner (`RelayedOwn`), is traced there too: B relays
/// the answer to A, which decides it as the owner and sends it out.
#[test]
fn a_trace_records_a_relay_that_reaches_its_owner() {
    use dataplane::pipeline::trace::{TraceFilter, TraceFrom, TraceVerdict};
    let mut bed = Bed::new(3, true);
    let until = Timestamp(bed.now().0 + 60_000_000_000);
    let f = TraceFilter::parse(&format!("{HOST} {DNS}")).unwrap();
    for p in &mut bed.nodes {
        p.trace_start(f, until);
    }
    // A query whose director is its owner A, its state kept on C (B
    // holds no record of it, so B relays the answer to the director).
    let mut cport = port_with_director(DNS, 53, 17, 3, A);
    loop {
        let out = bed.send(A, IN, from_host(A, DNS).udp(cport, 53, b"query"));
        assert_eq!(one(&out).0, A);
        if bed.nodes[B].cluster_role(bed.now(), &tuple(HOST, cport, DNS, 53, 17)).is_none() {
            break;
        }
        cport = (cport + 1..65000).find(|&p| director(&tuple(HOST, p, DNS, 53, 17), 3) == A).unwrap();
    }
    for p in &mut bed.nodes {
        p.trace_start(f, until);
    }
    let out = bed.send(B, OUT, from_outside(B, DNS).udp(53, cport, b"answer"));
    assert_eq!((one(&out).0, one(&out).1), (A, IN));
    assert_eq!((bed.ccl_count(B, A, MessageKind::RelayToOwner), bed.cluster(A).counters.relays_owned), (1, 1));
    let ev = |n: usize| -> Vec<(TraceFrom, TraceVerdict)> {
        bed.nodes[n].trace_events().map(|(_, _, e, _)| e.iter().map(|e| (e.from, e.verdict)).collect()).unwrap()
    };
    assert_eq!(ev(A), vec![(TraceFrom::Member(NodeId(B as u8)), TraceVerdict::Port(IN))], "(the trace restarted after the queries)");
    assert_eq!(ev(B), vec![(TraceFrom::Port(OUT), TraceVerdict::Member(NodeId(A as u8)))]);
}
