//! Floods against the cluster's own tables (issue 15, item 6) on the
//! in-process cluster bed: the director's record table under a SYN flood
//! (early drop of embryonic records, never of an established one), and the
//! director's hold under a flood of packets without a flow (one peer gets
//! its share, the rest are answered at once). Node A = 0, B = 1, C = 2.

mod cluster_bed;

use cluster_bed::*;
use dataplane::conntrack::tcp_flags::{ACK, PSH, SYN};
use dataplane::ccl::MessageKind;
use dataplane::pipeline::{Role, DEFAULT_DIRECTOR_HOLD, MAX_HELD, SYN_GUARD_PENDING};
use dataplane::{DropReason, NodeId};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;

/// Client ports from `from` up whose flow to the server's port 80 has `want`
/// as director among 3 members.
fn ports_directed_by(want: usize, from: u16, n: usize) -> Vec<u16> {
    (from..u16::MAX).filter(|&p| director(&tuple(HOST, p, SERVER, 80, 6), 3) == want).take(n).collect()
}

/// An established connection from the client's port `cport`: SYN and ACK
/// on `owner`, the SYN-ACK on `fwd` (its cookie names the owner).
fn establish(bed: &mut Bed, cport: u16, owner: usize, fwd: usize) {
    let out = bed.send(owner, IN, from_host(owner, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    assert_eq!(out.len(), 1, "the SYN leaves");
    let isn = tcp_fields(&out[0].2).0;
    let synack = from_outside(fwd, SERVER).tcp(80, cport, S_ISN, isn.wrapping_add(1), SYN | ACK, 65535, &SYN_OPTS, b"");
    assert_eq!(bed.send(fwd, OUT, synack).len(), 1, "the SYN-ACK reaches the client");
    let ack = from_host(owner, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK | PSH, 502, &[], b"GET /");
    assert_eq!(bed.send(owner, IN, ack).len(), 1, "the request leaves");
}

fn role_at(bed: &Bed, n: usize, cport: u16) -> Option<(Role, NodeId)> {
    bed.nodes[n].cluster_role(bed.now(), &tuple(HOST, cport, SERVER, 80, 6))
}

#[test]
fn a_syn_flood_evicts_embryonic_records_never_an_established_one() {
    let mut bed = Bed::new(3, true);
    // Capacity 256 records per node (the flow capacity). Two established
    // connections directed by C, owned by A and by B.
    let est = ports_directed_by(C, 30000, 2);
    establish(&mut bed, est[0], A, B);
    establish(&mut bed, est[1], B, A);
    assert_eq!(role_at(&bed, C, est[0]), Some((Role::Director, NodeId(A as u8))));
    assert_eq!(role_at(&bed, C, est[1]), Some((Role::Director, NodeId(B as u8))));

    // A SYN flood through A and B whose flows C directs: 3 × its capacity
    // of half-open registrations (A's and B's own tables early-drop theirs).
    let flood = ports_directed_by(C, 40000, 768);
    for (i, &p) in flood.iter().enumerate() {
        let n = if i % 2 == 0 { A } else { B };
        bed.tick(1);
        let out = bed.send(n, IN, from_host(n, SERVER).tcp(p, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
        assert_eq!(out.len(), 1, "SYN {i} leaves");
    }
    let c = bed.cluster(C).counters;
    assert_eq!(c.record_table_full, 0, "no registration refused");
    assert!(c.records_evicted >= 768 - 256, "evicted {}", c.records_evicted);
    assert!(c.records <= 256, "records {}", c.records);
    // The established connections' records survived, the newest flood
    // flows have theirs, the oldest went first.
    assert_eq!(role_at(&bed, C, est[0]), Some((Role::Director, NodeId(A as u8))));
    assert_eq!(role_at(&bed, C, est[1]), Some((Role::Director, NodeId(B as u8))));
    let last = *flood.last().unwrap();
    assert_eq!(role_at(&bed, C, last), Some((Role::Director, NodeId(B as u8))));
    assert_eq!(role_at(&bed, C, flood[0]), None, "the oldest half-open record went first");

    // A new connection through the full table: its SYN-ACK (at B, cookie)
    // and its records work as before.
    let fresh = ports_directed_by(C, 20000, 1)[0];
    establish(&mut bed, fresh, A, B);
    assert_eq!(role_at(&bed, C, fresh), Some((Role::Director, NodeId(A as u8))));
    assert_eq!(bed.drops(B, DropReason::ClusterRecordTableFull), 0);
}

#[test]
fn a_table_of_established_records_refuses_rather_than_evicts() {
    let mut bed = Bed::new(3, true);
    // Fill C's records with established connections only.
    let est = ports_directed_by(C, 30000, 256);
    for (i, &p) in est.iter().enumerate() {
        bed.tick(1);
        if i % 2 == 0 {
            establish(&mut bed, p, A, B);
        } else {
            establish(&mut bed, p, B, A);
        }
    }
    assert_eq!(bed.cluster(C).counters.records, 256);
    // One more connection finds nothing to evict at C: its registration is
    // refused, counted; its SYN-ACK arriving at C (no room for the
    // forwarder record either) still goes to the owner its cookie names,
    // and the connection works (its owner has it; the director does not).
    let extra = ports_directed_by(C, 20000, 1)[0];
    establish(&mut bed, extra, A, C);
    let c = bed.cluster(C).counters;
    assert_eq!(c.records_evicted, 0);
    assert!(c.record_table_full >= 2, "registration and forwarder record refused: {}", c.record_table_full);
    assert_eq!(bed.drops(C, DropReason::ClusterRecordTableFull), 0);
    assert_eq!(role_at(&bed, C, extra), None);
    for &p in &est {
        assert!(role_at(&bed, C, p).is_some(), "established record of port {p} kept");
    }
}

/// C's record table is full (256) of evictable records: a new connection
/// it directs (owner B) evicts exactly one and has its record.
fn one_connection_evicts_one_record(bed: &mut Bed) {
    assert_eq!(bed.cluster(C).counters.records, 256);
    let fresh = ports_directed_by(C, 20000, 1)[0];
    establish(bed, fresh, B, A);
    let c = bed.cluster(C).counters;
    assert_eq!((c.record_table_full, c.records_evicted), (0, 1));
    assert_eq!(role_at(bed, C, fresh), Some((Role::Director, NodeId(B as u8))));
}

#[test]
fn closed_connections_records_are_evicted_too() {
    let mut bed = Bed::new(3, true);
    // 256 connections directed by C that the server refused (SYN, then
    // the server's RST|ACK: CLOSED), then one established connection.
    let refused = ports_directed_by(C, 30000, 256);
    for &p in &refused {
        bed.tick(1);
        let out = bed.send(A, IN, from_host(A, SERVER).tcp(p, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
        let isn = tcp_fields(&out[0].2).0;
        let rst = from_outside(A, SERVER).tcp(80, p, 0, isn.wrapping_add(1), dataplane::conntrack::tcp_flags::RST | ACK, 0, &[], b"");
        assert_eq!(bed.send(A, OUT, rst).len(), 1, "the RST reaches the client");
    }
    one_connection_evicts_one_record(&mut bed);
    assert_eq!(role_at(&bed, C, refused[0]), None, "the oldest closed one went");
}

#[test]
fn a_flood_of_packets_without_a_flow_is_held_up_to_one_peers_share() {
    let mut bed = Bed::with(3, with_hold(3, true));
    // 200 ACKs of connections nobody has, at B, all directed by C: B asks
    // C about each; C holds a share, answers the rest "none" at once.
    let ports = ports_directed_by(C, 40000, 200);
    for &p in &ports {
        let ack = from_host(B, SERVER).tcp(p, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], b"");
        assert!(bed.send(B, IN, ack).is_empty());
    }
    let share = MAX_HELD / 2;
    let c = bed.cluster(C).counters;
    assert_eq!(c.queries_held, share as u64, "C holds B's share");
    assert_eq!(c.held_share_full, (200 - share) as u64);
    let b = bed.cluster(B).counters;
    assert_eq!(b.pending, share as u64, "B waits only for the held ones");
    assert_eq!(b.pending_no_owner, (200 - share) as u64);
    assert_eq!(bed.drops(B, DropReason::ClusterPendingFull), 0);

    // A FIN without ACK belongs to no connection: dropped where it
    // arrives, nobody asked.
    let asked = bed.cluster(B).counters.director_queries_sent;
    let fin = from_host(B, SERVER).tcp(ports[0], 80, C_ISN + 1, 0, dataplane::conntrack::tcp_flags::FIN, 502, &[], b"");
    assert!(bed.send(B, IN, fin).is_empty());
    assert_eq!(bed.drops(B, DropReason::TcpBadFlags), 1);
    assert_eq!(bed.cluster(B).counters.director_queries_sent, asked);

    // A connection racing its registration meanwhile still gets held at C
    // from A (A's share is untouched) and completes.
    let cport = ports_directed_by(C, 20000, 1)[0];
    establish(&mut bed, cport, A, B);

    // The hold passes: the held ones are answered (or B gave up on them
    // first: the bed's clock moved 1 ms a frame without timers), nothing is
    // left anywhere.
    bed.tick(DEFAULT_DIRECTOR_HOLD.0 / 1_000_000 + 1);
    let b = bed.cluster(B).counters;
    assert_eq!(b.pending, 0);
    assert_eq!(b.pending_no_owner + b.pending_timeouts, 200);
    assert_eq!(bed.cluster(C).counters.held_timeouts, share as u64);
}

#[test]
fn udp_flows_records_make_room_for_a_tcp_connection() {
    let mut bed = Bed::new(3, true);
    // 256 UDP flows directed by C, owned by A (a permitted flood of
    // one-packet flows: C cannot tell them from live ones).
    let udp: Vec<u16> =
        (1024..u16::MAX).filter(|&p| director(&tuple(HOST, p, SERVER, 5000, 17), 3) == C).take(256).collect();
    for &p in &udp {
        bed.tick(1);
        assert_eq!(bed.send(A, IN, from_host(A, SERVER).udp(p, 5000, b"x")).len(), 1);
    }
    one_connection_evicts_one_record(&mut bed);
    let oldest = tuple(HOST, udp[0], SERVER, 5000, 17);
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &oldest), None, "the oldest UDP record went");
    // The UDP flow lives on at its owner.
    assert_eq!(bed.owners(&oldest), vec![A]);
}

#[test]
fn translated_flows_records_are_never_evicted() {
    use dataplane::nat::RuleKind;
    use dataplane::pipeline::{PatSpec, PoolSpec};
    let pool = std::net::Ipv4Addr::new(192, 0, 2, 7);
    let pat = Some(PatSpec { block_size: 4096, reserved_ports: false, max_per_host: None });
    let spec = one_rule_nat(RuleKind::DynamicPat, PoolSpec { addresses: vec![pool], pat });
    let mut bed = Bed::new(3, true);
    for p in &mut bed.nodes {
        p.set_nat(&spec).unwrap();
    }
    // 300 half-open connections through PAT (per-session for TCP) directed
    // by C, 150 owned by A, 150 by B: C's table is full of records with
    // bindings after 256; the rest are refused, none evicted (a second
    // owner elected for one of them would map it anew).
    let ports = ports_directed_by(C, 30000, 300);
    for (i, &p) in ports.iter().enumerate() {
        let n = if i % 2 == 0 { A } else { B };
        bed.tick(1);
        assert_eq!(bed.send(n, IN, from_host(n, SERVER).tcp(p, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b"")).len(), 1);
    }
    let c = bed.cluster(C).counters;
    assert_eq!(c.records, 256);
    assert_eq!((c.records_evicted, c.record_table_full), (0, 300 - 256));
    assert_eq!(role_at(&bed, C, ports[0]), Some((Role::Director, NodeId(A as u8))));
}

#[test]
fn a_syn_flood_within_the_syn_guard_asks_about_half_a_table_then_owns() {
    let mut bed = Bed::new(3, true);
    // A member-set change opens the SYN guard; the director's answers are
    // slow (here: never delivered), as under a flood on a loaded CCL.
    bed.set_members_up(members(3).without(NodeId(9)));
    bed.hold = Some(MessageKind::OwnerQuery);
    let flood = ports_directed_by(C, 40000, 1000);
    let mut left = 0;
    for &p in &flood {
        left += bed.send(B, IN, from_host(B, SERVER).tcp(p, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b"")).len();
    }
    let b = bed.cluster(B).counters;
    assert_eq!(b.syn_guard_queries, SYN_GUARD_PENDING as u64, "B asks while half its pending table is free");
    assert_eq!(b.syn_guard_skipped, (1000 - SYN_GUARD_PENDING) as u64, "then owns the SYNs at once (R1)");
    assert_eq!(left, 1000 - SYN_GUARD_PENDING, "the owned SYNs leave");
    assert_eq!(b.pending, SYN_GUARD_PENDING as u64);
    assert_eq!(bed.drops(B, DropReason::ClusterPendingFull), 0, "no SYN lost to a full table");

    // A legitimate client's SYN in the middle of it leaves at once.
    let cport = ports_directed_by(C, 20000, 1)[0];
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    assert_eq!(one(&out).0, B);

    // The other half is there for queries that have no other way: an ACK
    // of a connection B does not know is still parked and asked about.
    let ack_port = ports_directed_by(C, 60000, 1)[0];
    let ack = from_host(B, SERVER).tcp(ack_port, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], b"");
    assert!(bed.send(B, IN, ack).is_empty());
    assert_eq!(bed.cluster(B).counters.pending, SYN_GUARD_PENDING as u64 + 1);

    // The answers never come: at the pending timeout the SYNs the guard
    // asked about are owned by B (R1) and leave, rather than being
    // dropped for their clients to retransmit a second later; the ACK is
    // dropped (`pending_timeouts`).
    bed.hold = None;
    let out = bed.tick(1_000);
    assert_eq!(out.len(), SYN_GUARD_PENDING, "every parked SYN leaves");
    assert!(out.iter().all(|(n, port, _)| (*n, *port) == (B, OUT)));
    let b = bed.cluster(B).counters;
    assert_eq!((b.guard_timeouts_owned, b.pending_timeouts, b.pending), (SYN_GUARD_PENDING as u64, 1, 0));
    for &p in flood.iter().take(3) {
        assert_eq!(bed.owners(&tuple(HOST, p, SERVER, 80, 6)), vec![B]);
    }

    // Queries flow again.
    let cport = ports_directed_by(C, 21000, 1)[0];
    let before = bed.cluster(B).counters.syn_guard_queries;
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    assert_eq!(one(&out).0, B, "C elects B (R8)");
    assert_eq!(bed.cluster(B).counters.syn_guard_queries, before + 1);
}

#[test]
fn a_syn_flood_at_a_settling_director_holds_half_its_hold_then_owns() {
    let mut bed = Bed::with(3, with_hold(3, true));
    // A member-set change: until the others' `SyncDone` arrive (their
    // timers have not run), C's own SYNs wait in its hold (`settling`).
    bed.set_members_up(members(3).without(NodeId(9)));
    let flood = ports_directed_by(C, 40000, 300);
    let syns = flood.iter().map(|&p| from_host(C, SERVER).tcp(p, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b"")).collect();
    let mut left = bed.send_burst(C, IN, syns).len();
    assert_eq!(left, 300 - MAX_HELD / 2, "the owned SYNs leave at once");
    let c = bed.cluster(C).counters;
    assert_eq!(c.syn_guard_queries, (MAX_HELD / 2) as u64, "C holds its own SYNs up to half its hold");
    assert_eq!(c.syn_guard_skipped, (300 - MAX_HELD / 2) as u64, "then owns them at once");
    assert_eq!(bed.drops(C, DropReason::ClusterPendingFull), 0);
    assert_eq!(c.held_full, 0);
    // Every SYN leaves: the owned ones at once, the held ones when their
    // hold ends (the others' markers or the deadline elect C).
    left += bed.tick(DEFAULT_DIRECTOR_HOLD.0 / 1_000_000 + 1).len();
    assert_eq!(left, 300);
}
