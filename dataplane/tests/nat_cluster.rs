//! PAT on cluster members (issue 13; SPEC N2, N5, R9, R11) on the
//! in-process cluster bed (`cluster_bed`): the blocks of the pool are dealt
//! over the members; the first receiver of a SYN owns the connection and
//! translates it from its own blocks; return traffic to a mapped port that
//! lands on another member goes straight to the block's holder (no director
//! query, no forwarding record); the binding rides in the flow records, and
//! when the owner fails the member that inherits the block (its heir) takes
//! the connection over with the same mapped address and port.

mod cluster_bed;

use cluster_bed::*;
use dataplane::ccl::MessageKind;
use dataplane::conntrack::tcp_flags::{ACK, PSH, SYN};
use dataplane::nat::{PortClass, RuleKind, RuleSpec as NatRule};
use dataplane::pipeline::{NatSpec, PatSpec, PoolSpec};
use dataplane::route::IfIndex;
use dataplane::wire::build::PacketBuilder;
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::tcp::TcpPacket;
use dataplane::{DropReason, Duration, NodeId, PortId};
use std::net::Ipv4Addr;

const POOL: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;

type Out = Vec<(usize, PortId, Vec<u8>)>;

fn nat_spec() -> NatSpec {
    NatSpec {
        rules: vec![NatRule {
            kind: RuleKind::DynamicPat,
            real_iface: Some(IfIndex(0)),
            mapped_iface: Some(IfIndex(1)),
            source: (Ipv4Addr::new(198, 18, 1, 0), 24),
            mapped: None,
            ports: None,
            pool: Some(0),
            per_session: Default::default(),
        }],
        pools: vec![PoolSpec {
            addresses: vec![POOL],
            pat: Some(PatSpec { block_size: 4096, reserved_ports: false, max_per_host: None }),
        }],
        xlate_capacity: 1024,
        xlate_timeout: Duration::from_secs(30),
        host_capacity: 64,
    }
}

fn nat_bed(nodes: usize) -> Bed {
    let mut bed = Bed::new(nodes, true);
    for p in &mut bed.nodes {
        p.set_nat(&nat_spec()).unwrap();
    }
    bed
}

/// What the server sends to the mapped endpoint, arriving at node `n`.
fn from_server(n: usize) -> PacketBuilder {
    PacketBuilder::new(GW_MAC, out_mac(n), SERVER, POOL)
}

/// (source address, source port, seq, ack, flags) of a TCP frame.
fn tcp_of(frame: &[u8]) -> (Ipv4Addr, u16, Ipv4Addr, u16, u32, u32, u8) {
    let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
    let t = TcpPacket::new_checked(ip.payload()).unwrap();
    assert!(t.verify_checksum(ip.src(), ip.dst()), "tcp checksum");
    (ip.src(), t.src_port(), ip.dst(), t.dst_port(), t.seq(), t.ack(), t.flags())
}

fn one(out: &Out) -> (usize, PortId, Vec<u8>) {
    assert_eq!(out.len(), 1, "exactly one frame leaves the cluster: {out:?}");
    out[0].clone()
}

/// The member holding mapped port `port`'s block, as every node's plan
/// says (they agree).
fn holder(bed: &Bed, port: u16) -> usize {
    let hs: Vec<NodeId> = (0..bed.nodes.len())
        .filter(|&n| !bed.down[n])
        .map(|n| bed.nodes[n].nat_plan().unwrap().holder(POOL, Some(PortClass::Tcp), port).unwrap().node)
        .collect();
    assert!(hs.windows(2).all(|w| w[0] == w[1]), "the members' maps agree: {hs:?}");
    hs[0].index()
}

fn queries(bed: &Bed) -> usize {
    bed.ccl.iter().filter(|c| c.kind == MessageKind::OwnerQuery).count()
}

/// A connection from HOST:`cport` opened at `owner` (its SYN), answered by
/// the server at `synack_at`: returns the mapped port and the ISN the
/// server saw.
fn open(bed: &mut Bed, cport: u16, owner: usize, synack_at: usize) -> (u16, u32) {
    let syn = from_host(owner, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, &[]);
    let (n, port, f) = one(&bed.send(owner, IN, syn));
    let (src, mport, dst, dport, isn, _, flags) = tcp_of(&f);
    assert_eq!((n, port, src, dst, dport, flags), (owner, OUT, POOL, SERVER, 80, SYN), "the SYN leaves translated");
    assert_eq!(holder(bed, mport), owner, "the owner translates from its own blocks");
    let q = queries(bed);
    let synack = from_server(synack_at).tcp(80, mport, S_ISN, isn.wrapping_add(1), SYN | ACK, 65160, &SYN_OPTS, &[]);
    let (n, port, f) = one(&bed.send(synack_at, OUT, synack));
    let (src, sport, dst, dport, seq, ack, _) = tcp_of(&f);
    assert_eq!(
        (n, port, src, sport, dst, dport),
        (owner, IN, SERVER, 80, HOST, cport),
        "the SYN-ACK reaches the client"
    );
    assert_eq!((seq, ack), (S_ISN, C_ISN + 1), "in the client's sequence space");
    assert_eq!(queries(bed), q, "return traffic to a mapped port asks no director (N5)");
    (mport, isn)
}

#[test]
fn return_traffic_goes_to_the_block_holder_and_both_directions_meet_there() {
    let mut bed = nat_bed(3);
    let delta_isn;
    let (mport, isn) = open(&mut bed, 40_001, 0, 1);
    delta_isn = isn;
    assert!(bed.ccl.iter().any(|c| c.from == 1 && c.to == 0 && c.kind == MessageKind::ForwardedPacket));
    assert_eq!(bed.nodes[1].nat_counters().unwrap().to_holder, 1);
    // The client's ACK and request at node 2, the server's answer at node 1
    // and at node 2: each crosses to the owner once, leaves translated.
    let req =
        from_host(2, SERVER).tcp(40_001, 80, C_ISN + 1, S_ISN + 1, ACK | PSH, 502, &[], b"GET / HTTP/1.1\r\n\r\n");
    let (n, port, f) = one(&bed.send(2, IN, req));
    let (src, sport, _, _, seq, _, _) = tcp_of(&f);
    assert_eq!((n, port, src, sport, seq), (0, OUT, POOL, mport, delta_isn.wrapping_add(1)));
    for at in [1, 2, 0] {
        let data = from_server(at).tcp(80, mport, S_ISN + 1, delta_isn.wrapping_add(19), ACK, 509, &[], &[0x5a; 100]);
        let (n, port, f) = one(&bed.send(at, OUT, data));
        let (_, _, dst, dport, _, ack, _) = tcp_of(&f);
        assert_eq!((n, port, dst, dport, ack), (0, IN, HOST, 40_001, C_ISN + 19), "answer at node {at}");
    }
    assert_eq!(bed.owners(&tuple(HOST, 40_001, SERVER, 80, 6)), vec![0]);
    // The binding rides in the owner's records: the director and backups
    // of the real tuple hold it.
    let c = bed.nodes[0].nat_counters().unwrap();
    assert_eq!((c.xlates_created, c.translated_out, c.translated_in), (1, 2, 4));
    // A probe of an unused port in another member's block goes there and
    // is dropped: no xlate.
    let other = (1024..=65535u16).find(|&p| holder(&bed, p) == 2).unwrap();
    let probe = from_server(0).tcp(80, other, 9, 0, SYN, 1024, &[], &[]);
    assert!(bed.send(0, OUT, probe).is_empty());
    assert_eq!(bed.drops(2, DropReason::NatNoXlate), 1);
    assert_eq!(bed.nodes[0].nat_counters().unwrap().to_holder, 1);
}

#[test]
fn each_member_translates_from_its_own_blocks_and_no_port_is_bound_twice() {
    let mut bed = nat_bed(3);
    let mut seen = std::collections::HashMap::new();
    for k in 0..30u16 {
        let owner = usize::from(k % 3);
        let (mport, _) = open(&mut bed, 41_000 + k, owner, usize::from((k + 1) % 3));
        assert!(seen.insert(mport, k).is_none(), "mapped port {mport} bound twice");
    }
    for n in 0..3 {
        let c = bed.nodes[n].nat_counters().unwrap();
        assert_eq!((c.xlates_created, c.exhausted), (10, 0), "node {n}");
    }
}

#[test]
fn a_translated_flow_survives_its_owner_with_its_mapped_port() {
    for client_at in [1, 2] {
        let mut bed = nat_bed(3);
        let (mport, isn) = open(&mut bed, 40_123, 0, 2);
        let req = from_host(0, SERVER).tcp(40_123, 80, C_ISN + 1, S_ISN + 1, ACK | PSH, 502, &[], &[0x41; 20]);
        assert_eq!(one(&bed.send(0, IN, req)).1, OUT);
        let block = bed.nodes[1].nat_plan().unwrap().block_map(0).unwrap().block(POOL, mport).unwrap();
        let heir = bed.nodes[1].nat_plan().unwrap().block_map(0).unwrap().heir(block).unwrap().index();
        assert_ne!(heir, 0);
        bed.kill(0, 2);
        assert_eq!(holder(&bed, mport), heir, "the heir holds the block now");
        // The client's next segment, at a survivor: the connection goes to
        // the heir, which keeps the mapped address and port.
        let more =
            from_host(client_at, SERVER).tcp(40_123, 80, C_ISN + 21, S_ISN + 1, ACK | PSH, 502, &[], &[0x42; 20]);
        let (n, port, f) = one(&bed.send(client_at, IN, more));
        let (src, sport, dst, _, seq, _, _) = tcp_of(&f);
        assert_eq!((n, port, src, sport, dst), (heir, OUT, POOL, mport, SERVER), "client at {client_at}");
        assert_eq!(seq, isn.wrapping_add(21), "the sequence translation is kept");
        assert_eq!(bed.owners_up(&tuple(HOST, 40_123, SERVER, 80, 6)), vec![heir]);
        let c = bed.nodes[heir].nat_counters().unwrap();
        assert_eq!((c.bindings_adopted, c.bindings_refused), (1, 0));
        // The server's answer, at every survivor, reaches the client.
        for at in (0..3).filter(|&m| m != 0) {
            let data = from_server(at).tcp(80, mport, S_ISN + 1, isn.wrapping_add(41), ACK, 509, &[], &[0x5a; 50]);
            let (n, port, f) = one(&bed.send(at, OUT, data));
            let (_, _, dst, dport, _, ack, _) = tcp_of(&f);
            assert_eq!((n, port, dst, dport, ack), (heir, IN, HOST, 40_123, C_ISN + 41), "answer at {at}");
        }
        // A new connection at the heir gets a port from its own blocks,
        // never from the inherited one.
        let (m2, _) = open(&mut bed, 40_124, heir, 3 - heir);
        assert_ne!(m2, mport);
        let b2 = bed.nodes[heir].nat_plan().unwrap().block_map(0).unwrap().block(POOL, m2).unwrap();
        assert_ne!(b2, block, "the inherited block only keeps the bindings taken over");
    }
}

/// Every mapped endpoint bound on a member that is up, with its members:
/// none may be bound on two at once.
fn bound_once(bed: &Bed) {
    let mut seen = std::collections::HashMap::new();
    for n in (0..bed.nodes.len()).filter(|&n| !bed.down[n]) {
        for x in bed.nodes[n].xlates(bed.now(), usize::MAX) {
            if let Some(m) = seen.insert((x.proto, x.mapped.clone()), n) {
                panic!("{} {} bound on {m} and {n}", x.proto, x.mapped);
            }
        }
    }
}

#[test]
fn a_member_that_comes_back_holds_its_blocks_again_and_their_taken_over_connections_end() {
    let mut bed = nat_bed(3);
    let (mport, isn) = open(&mut bed, 40_300, 0, 1);
    let map = bed.nodes[1].nat_plan().unwrap();
    let block = map.block_map(0).unwrap().block(POOL, mport).unwrap();
    let heir = map.block_map(0).unwrap().heir(block).unwrap().index();
    bed.kill(0, 2);
    let more = from_host(heir, SERVER).tcp(40_300, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], &[]);
    let (n, _, f) = one(&bed.send(heir, IN, more));
    assert_eq!((n, tcp_of(&f).1), (heir, mport), "taken over with its binding");
    bound_once(&bed);
    // Node 0 comes back: it holds its dealt blocks again (the same map on
    // every member), so the connection taken over in one of them ends at
    // the heir — its return traffic goes to node 0 now, which may hand the
    // port out again.
    bed.rejoin(0, 3);
    assert_eq!(holder(&bed, mport), 0);
    assert_eq!(bed.nodes[heir].nat_counters().unwrap().bindings_returned, 1);
    assert!(bed.owners_up(&tuple(HOST, 40_300, SERVER, 80, 6)).is_empty());
    bound_once(&bed);
    // Its return traffic reaches node 0, which has no xlate for it: dropped,
    // nothing reaches the client.
    let data = from_server(heir).tcp(80, mport, S_ISN + 1, isn.wrapping_add(1), ACK, 509, &[], &[1; 10]);
    assert!(bed.send(heir, OUT, data).is_empty());
    assert_eq!(bed.drops(0, DropReason::NatNoXlate), 1);
    // Every member translates new connections from its own blocks again.
    for (k, owner) in [0usize, 1, 2].into_iter().enumerate() {
        let (m, _) = open(&mut bed, 40_310 + k as u16, owner, (owner + 1) % 3);
        assert_eq!(holder(&bed, m), owner);
        bound_once(&bed);
    }
}
