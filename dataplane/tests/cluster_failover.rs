//! Failover golden tests (docs/failover.md) on the in-process cluster bed:
//! a node "fails" when its frames stop and the survivors get the member set
//! without it (`Bed::kill`, what membership does after the hold time).
//! Node A = 0, B = 1, C = 2 (D = 3 in four-node beds); flows are chosen so
//! that C is the director, A the owner (its SYN) and B the forwarder (the
//! SYN-ACK's cookie). Each test checks the frames that leave the cluster,
//! the CCL messages and the counters, and that exactly one node that is up
//! owns the connection.

mod cluster_bed;

use cluster_bed::*;
use dataplane::ccl::MessageKind;
use dataplane::cluster::{flow_hash, DirectorTable, MemberInfo, MemberSet};
use dataplane::conntrack::tcp_flags::{ACK, PSH, RST, SYN};
use dataplane::pipeline::{PipelineConfig, Role, Verdict, DEFAULT_DIRECTOR_HOLD};
use dataplane::{DropReason, Duration, Epoch, FiveTuple, NodeId, Timestamp};
use proptest::prelude::*;

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;
const D: usize = 3;
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;


fn accounted(bed: &Bed) {
    for (n, p) in bed.nodes.iter().enumerate() {
        let c = p.counters();
        assert_eq!(c.packets, c.emitted() + c.consumed + c.dropped(), "node {n}: every packet accounted for");
    }
}

/// Drops on node `n`, all reasons (data-port verdicts, then batch frames).
fn no_drops(bed: &Bed, n: usize) {
    let c = bed.nodes[n].counters();
    let drops: Vec<(&str, u64)> =
        DropReason::ALL.iter().map(|r| (r.as_str(), c.drop_count(*r))).filter(|d| d.1 != 0).collect();
    assert!(drops.is_empty(), "node {n} dropped {drops:?}");
    let cl = bed.cluster(n).counters;
    assert_eq!((cl.batch_frame_drops, cl.pending_no_owner, cl.pending_timeouts), (0, 0, 0), "node {n}");
}

/// Client port whose flow has director `want` among `nodes` members.
fn cport_for(nodes: usize, want: usize) -> u16 {
    port_with_director(SERVER, 80, 6, nodes, want)
}

/// The connection of `cport`: SYN on `owner`, SYN-ACK on `fwd` (cookie),
/// ACK on `owner`, then one data segment each way. Returns the delta.
fn connect(bed: &mut Bed, cport: u16, owner: usize, fwd: usize) -> u32 {
    let delta = handshake(bed, cport, 80, owner, fwd);
    // 100 bytes of request, 1000 of answer: the director's record (sent at
    // ESTABLISHED) has not seen them.
    let out = bed.send(owner, IN, from_host(owner, SERVER).tcp(cport, 80, C_ISN + 1, S_ISN + 1, ACK | PSH, 502, &[], &[b'q'; 100]));
    assert_eq!(one(&out).0, owner);
    let out = bed.send(
        owner,
        OUT,
        from_outside(owner, SERVER).tcp(80, cport, S_ISN + 1, (C_ISN + 101).wrapping_add(delta), ACK | PSH, 509, &[], &[b'r'; 1000]),
    );
    assert_eq!(one(&out).0, owner);
    delta
}

/// The handshake of `cport` -> server port `sport`: SYN and ACK on
/// `owner`, SYN-ACK on `fwd` (cookie). Returns the sequence delta.
fn handshake(bed: &mut Bed, cport: u16, sport: u16, owner: usize, fwd: usize) -> u32 {
    let out = bed.send(owner, IN, from_host(owner, SERVER).tcp(cport, sport, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    let isn = tcp_fields(&one(&out).2).0;
    let out = bed.send(
        fwd,
        OUT,
        from_outside(fwd, SERVER).tcp(sport, cport, S_ISN, isn.wrapping_add(1), SYN | ACK, 65535, &SYN_OPTS, b""),
    );
    assert_eq!(one(&out).0, owner);
    let out = bed.send(owner, IN, from_host(owner, SERVER).tcp(cport, sport, C_ISN + 1, S_ISN + 1, ACK, 502, &[], b""));
    assert_eq!(one(&out).0, owner);
    isn.wrapping_sub(C_ISN)
}

/// The client's next segment (after 100 bytes sent, 1000 received), on
/// node `n`, and what must leave towards the server from node `owner`.
fn client_seg(n: usize, owner: usize, cport: u16, delta: u32, data: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let seq = C_ISN + 101;
    (
        from_host(n, SERVER).tcp(cport, 80, seq, S_ISN + 1001, ACK | PSH, 502, &[], data),
        to_gw(owner, SERVER).tcp(cport, 80, seq.wrapping_add(delta), S_ISN + 1001, ACK | PSH, 502, &[], data),
    )
}

/// The server's next segment on node `n` (acking the client's 100 + `acked`
/// bytes), and what must reach the client from node `owner`.
fn server_seg(n: usize, owner: usize, cport: u16, delta: u32, acked: u32) -> (Vec<u8>, Vec<u8>) {
    let ack = C_ISN + 101 + acked;
    (
        from_outside(n, SERVER).tcp(80, cport, S_ISN + 1001, ack.wrapping_add(delta), ACK, 509, &[], b""),
        to_host(owner, SERVER).tcp(80, cport, S_ISN + 1001, ack, ACK, 509, &[], b""),
    )
}

#[test]
fn owner_killed_forwarder_takes_over_through_the_director() {
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, A, B);
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(A as u8))));

    // A dies. The client's next segment lands on B, whose forwarder record
    // names A: B asks C, C holds A's state and elects B, B installs the
    // flow and sends the segment on as owner (sequence translated).
    bed.kill(A, 2);
    let (seg, want) = client_seg(B, B, cport, delta, b"more");
    let out = bed.send(B, IN, seg);
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (B, OUT));
    assert_eq!(hex(&f), hex(&want));
    let (b, c) = (bed.cluster(B).counters, bed.cluster(C).counters);
    assert_eq!((b.dead_owner_records, b.director_queries_sent, b.takeovers, b.pending_released), (1, 1, 1, 1));
    assert_eq!((c.takeovers_granted, c.takeovers_local), (1, 0));
    assert_eq!(bed.ccl_count(B, C, MessageKind::OwnerQuery), 1);
    assert_eq!(bed.ccl_count(C, B, MessageKind::FlowTransfer), 1);
    assert_eq!(bed.ccl_count(B, C, MessageKind::FlowRegister), 1, "the new owner registers");
    assert_eq!(bed.owners_up(&t), vec![B]);
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(B as u8))));
    assert_eq!(bed.nodes[B].conntrack().stats().installed, 1);

    // The server's answer lands on C (forwarded to B) and on B itself.
    for at in [C, B] {
        let (seg, want) = server_seg(at, B, cport, delta, 4);
        let out = bed.send(at, OUT, seg);
        let (n, port, f) = one(&out);
        assert_eq!((n, port), (B, IN));
        assert_eq!(hex(&f), hex(&want));
    }
    // More client data on C: forwarded to B.
    let (seg, _) = client_seg(C, B, cport, delta, b"");
    let (seg2, want) = {
        let seq = C_ISN + 105;
        (
            from_host(C, SERVER).tcp(cport, 80, seq, S_ISN + 1001, ACK | PSH, 502, &[], b"again"),
            to_gw(B, SERVER).tcp(cport, 80, seq.wrapping_add(delta), S_ISN + 1001, ACK | PSH, 502, &[], b"again"),
        )
    };
    drop(seg);
    let out = bed.send(C, IN, seg2);
    assert_eq!(hex(&one(&out).2), hex(&want));
    for n in [B, C] {
        no_drops(&bed, n);
    }
    assert_eq!(bed.owners_up(&t), vec![B]);
    accounted(&bed);
}

#[test]
fn owner_killed_director_takes_over_locally() {
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, A, B);
    bed.kill(A, 2);
    // The server's segment reaches C, the director holding A's state: C
    // becomes the owner on the spot, no CCL message needed.
    let (seg, want) = server_seg(C, C, cport, delta, 0);
    let out = bed.send(C, OUT, seg);
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (C, IN));
    assert_eq!(hex(&f), hex(&want));
    assert_eq!(bed.cluster(C).counters.takeovers_local, 1);
    assert_eq!(bed.owners_up(&t), vec![C]);
    // C registers with its backup (it is director and owner now).
    let backup = DirectorTable::new(&bed.members_up(2)).unwrap().backup(flow_hash(&t), NodeId(C as u8)).unwrap();
    assert_eq!(backup, NodeId(B as u8));
    assert_eq!(bed.ccl_count(C, B, MessageKind::FlowRegister), 1);
    assert_eq!(bed.nodes[B].cluster_role(bed.now(), &t), Some((Role::Backup, NodeId(C as u8))));
    // The client's segment on B: B's record (now a backup record) names C.
    let (seg, want) = client_seg(B, C, cport, delta, b"data");
    let out = bed.send(B, IN, seg);
    assert_eq!(hex(&one(&out).2), hex(&want));
    for n in [B, C] {
        no_drops(&bed, n);
    }
    accounted(&bed);
}

#[test]
fn owner_killed_node_without_record_asks_the_director() {
    // Four nodes: D never saw the connection (ECMP moved it there).
    let mut bed = Bed::new(4, true);
    let cport = cport_for(4, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, A, B);
    bed.kill(A, 2);
    let (seg, want) = client_seg(D, D, cport, delta, b"moved");
    let out = bed.send(D, IN, seg);
    let (n, _, f) = one(&out);
    assert_eq!(n, D);
    assert_eq!(hex(&f), hex(&want));
    assert_eq!(bed.cluster(D).counters.takeovers, 1);
    assert_eq!(bed.cluster(D).counters.dead_owner_records, 0, "D had no record");
    // B (forwarder record naming A) asks C, which names D now.
    let (seg, want) = server_seg(B, D, cport, delta, 5);
    let out = bed.send(B, OUT, seg);
    assert_eq!(hex(&one(&out).2), hex(&want));
    assert_eq!(bed.cluster(C).counters.takeovers_granted, 1, "one grant: the second query got D");
    assert_eq!(bed.owners_up(&t), vec![D]);
    for n in [B, C, D] {
        no_drops(&bed, n);
    }
    accounted(&bed);
}

#[test]
fn director_killed_owner_reregisters_and_new_director_answers() {
    let mut bed = Bed::new(4, true);
    let cport = cport_for(4, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, A, B);
    bed.kill(C, 2);
    let left = bed.members_up(2);
    let table = DirectorTable::new(&left).unwrap();
    let newdir = table.director(flow_hash(&t)).index();
    let holders: Vec<usize> = table.backups(flow_hash(&t), NodeId(A as u8)).iter().map(|n| n.index()).collect();
    // The owner's scan runs in its timers: the flow's director moved, so A
    // registers it with the node(s) it did not have, then sends SyncDone to
    // every other member.
    let regs = bed.ccl_count(A, newdir, MessageKind::FlowRegister);
    bed.tick(1);
    assert_eq!(bed.cluster(A).counters.reregistered, 1);
    for &h in &holders {
        assert_eq!(bed.nodes[h].cluster_role(bed.now(), &t).map(|r| r.1), Some(NodeId(A as u8)), "holder {h}");
    }
    assert!(bed.ccl_count(A, holders[0], MessageKind::FlowRegister) > if holders[0] == newdir { regs } else { 0 });
    for n in [A, B, D] {
        for m in [A, B, D].into_iter().filter(|&m| m != n) {
            assert_eq!(bed.ccl_count(n, m, MessageKind::SyncDone), 1, "{n} -> {m}");
        }
        let p = bed.nodes[n].sync_progress(Epoch(2));
        assert!(p.sent, "node {n}");
        let others: u16 = [A, B, D].iter().filter(|&&m| m != n).map(|&m| 1u16 << m).sum();
        assert_eq!(p.done_from, others, "node {n}");
    }
    assert_eq!(bed.nodes[A].sync_progress(Epoch(1)).done_from, 0);
    // A node without a record (D, unless it is the new director) asks the
    // new director, which answers A.
    let asker = if newdir == D { B } else { D };
    let rec_before = bed.nodes[asker].cluster_role(bed.now(), &t);
    let (seg, want) = client_seg(asker, A, cport, delta, b"hi");
    let out = bed.send(asker, IN, seg);
    assert_eq!(hex(&one(&out).2), hex(&want));
    if rec_before.is_none() {
        assert_eq!(bed.ccl_count(asker, newdir, MessageKind::OwnerQuery), 1);
    }
    assert_eq!(bed.owners_up(&t), vec![A]);
    for n in [A, B, D] {
        no_drops(&bed, n);
    }
    accounted(&bed);
}

#[test]
fn reregistration_of_many_flows_is_bounded_and_measured() {
    // 2000 connections owned by A; the director of some is D. D dies: A
    // re-registers exactly the flows whose director or backup moved, in
    // scan steps of SYNC_BUDGET slots per timer tick.
    const FLOWS: usize = 2000;
    let mut bed = Bed::with(4, |n| {
        let mut c = config(n, 4, true);
        c.flow_capacity = 4096;
        c
    });
    let mut moved = 0;
    let after = MemberSet::from_nodes(Epoch(2), [0u8, 1, 2].map(NodeId)).unwrap();
    let (t0, t1) = (DirectorTable::new(&members(4)).unwrap(), DirectorTable::new(&after).unwrap());
    for i in 0..FLOWS {
        let cport = 10_000 + i as u16;
        let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
        assert_eq!(one(&out).0, A);
        let h = flow_hash(&tuple(HOST, cport, SERVER, 80, 6));
        if t0.backups(h, NodeId(0)) != t1.backups(h, NodeId(0)) {
            moved += 1;
        }
    }
    let registers_before = bed.cluster(A).counters.registers_sent;
    let ccl_before = bed.cluster(A).ccl.tx(MessageKind::FlowRegister);
    bed.kill(D, 2);
    let mut ticks = 0;
    while bed.nodes[A].sync_state().unwrap().0 {
        bed.tick(1);
        ticks += 1;
        assert!(ticks < 100);
    }
    let a = bed.cluster(A);
    let records = a.counters.registers_sent - registers_before;
    let datagrams = a.ccl.tx(MessageKind::FlowRegister) - ccl_before;
    let took = bed.nodes[A].sync_state().unwrap().1;
    println!(
        "re-protection: {FLOWS} flows, {moved} with a moved director/backup, re-registered {} ({records} records in {datagrams} FlowRegister datagrams), scan {ticks} timer ticks ({} ms virtual)",
        a.counters.reregistered,
        took.0 / 1_000_000
    );
    assert_eq!(a.counters.reregistered as usize, moved);
    assert_eq!(a.counters.sync_scanned as usize, FLOWS);
    // 4096 slots, SYNC_BUDGET (512) per tick.
    assert_eq!(ticks, 4096 / dataplane::pipeline::cluster::SYNC_BUDGET);
    // Batched: 16 IPv4 records (86 bytes, CCL v9) per datagram at most;
    // a few more datagrams for the flushes at tick ends (one per director).
    assert!(datagrams as usize <= moved.div_ceil(16) + 4, "{datagrams}");
    // Every moved flow is known to its new director again.
    for i in 0..FLOWS {
        let t = tuple(HOST, 10_000 + i as u16, SERVER, 80, 6);
        let d = t1.director(flow_hash(&t)).index();
        if d != A {
            assert_eq!(bed.nodes[d].cluster_role(bed.now(), &t).map(|r| r.1), Some(NodeId(0)), "flow {i}");
        }
    }
}

#[test]
fn backups_two_survive_every_double_failure() {
    for pair in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)] {
        let mut bed = Bed::with(4, |n| {
            let mut c = config(n, 4, true);
            if let Some(cl) = c.cluster.as_mut() {
                cl.backups = 2;
            }
            c
        });
        let cport = cport_for(4, C);
        let t = tuple(HOST, cport, SERVER, 80, 6);
        let delta = connect(&mut bed, cport, A, B);
        let holders = DirectorTable::new(&members(4)).unwrap().with_backups(2).backups(flow_hash(&t), NodeId(0));
        assert_eq!(holders.len(), 2);
        for &h in holders.as_slice() {
            assert_eq!(bed.nodes[h.index()].cluster_role(bed.now(), &t).map(|r| r.1), Some(NodeId(0)));
        }
        bed.down[pair.0] = true;
        bed.down[pair.1] = true;
        let set = bed.members_up(2);
        bed.set_members_up(set);
        bed.tick(5); // re-registration, if the owner survived
        // A client segment and the server's answer at each survivor.
        let survivors: Vec<usize> = (0..4).filter(|n| !bed.down[*n]).collect();
        let mut acked = 0;
        for &at in &survivors {
            let data = [b'x'; 3];
            let seq = C_ISN + 101 + acked;
            let out = bed.send(at, IN, from_host(at, SERVER).tcp(cport, 80, seq, S_ISN + 1001, ACK | PSH, 502, &[], &data));
            let (n, port, f) = one(&out);
            assert_eq!(port, OUT, "failed {pair:?}, at {at}");
            assert_eq!(tcp_fields(&f).0, seq.wrapping_add(delta));
            acked += 3;
            let (seg, _) = server_seg(at, n, cport, delta, acked);
            let out = bed.send(at, OUT, seg);
            assert_eq!(one(&out).1, IN, "failed {pair:?}, at {at}");
            assert_eq!(bed.owners_up(&t), vec![n], "failed {pair:?}: one owner");
        }
        for &n in &survivors {
            no_drops(&bed, n);
        }
        accounted(&bed);
    }
}

#[test]
fn backups_one_loses_the_flow_when_owner_and_director_fail_together() {
    // The limit `backups: 2` lifts: with one backup, the owner and the
    // director failing together leave nobody with the state.
    let mut bed = Bed::new(4, true);
    let cport = cport_for(4, C);
    let delta = connect(&mut bed, cport, A, B);
    bed.down[A] = true;
    bed.down[C] = true;
    let set = bed.members_up(2);
    bed.set_members_up(set);
    let (seg, _) = client_seg(D, D, cport, delta, b"x");
    assert!(bed.send(D, IN, seg).is_empty());
    // D asked the new director (B: "none"), or is it and knows nothing.
    assert_eq!(bed.cluster(D).counters.pending_no_owner + bed.drops(D, DropReason::TcpNoFlow), 1);
}

#[test]
fn paused_owner_is_fenced_reset_and_never_a_second_owner() {
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, A, B);
    // A pauses: its lease (granted until 200 ms from now) runs out while
    // the others remove it and B takes the connection over.
    let lease = Timestamp::from_millis(bed.now_ms + 200);
    bed.nodes[A].set_lease(lease);
    bed.kill(A, 2);
    let (seg, _) = client_seg(B, B, cport, delta, b"1");
    assert_eq!(one(&bed.send(B, IN, seg)).0, B);
    bed.now_ms += 3_000;
    // A resumes, still believing it owns the flow: every data frame is
    // dropped before conntrack, nothing leaves A.
    bed.down[A] = false;
    let before = bed.nodes[A].conntrack().stats();
    let (seg, _) = server_seg(A, A, cport, delta, 1);
    let out = bed.send(A, OUT, seg);
    assert!(out.is_empty());
    assert_eq!(bed.last_verdict(A), Some(Verdict::Drop(DropReason::ClusterFenced)));
    assert_eq!(bed.drops(A, DropReason::ClusterFenced), 1);
    assert_eq!(bed.nodes[A].conntrack().stats(), before);
    // Its timers still send records (a refresh, re-sends): the others
    // ignore a node outside their member set.
    bed.now_ms += 1_800_000;
    bed.tick(1);
    let ignored = bed.cluster(B).counters.from_nonmembers + bed.cluster(C).counters.from_nonmembers;
    assert!(ignored > 0, "A's records were ignored");
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t).map(|r| r.1), Some(NodeId(B as u8)));
    // Membership resets A; it rejoins (a new epoch with it) and gets a lease.
    let now = bed.now();
    bed.nodes[A].reset(now);
    assert_eq!(bed.nodes[A].flow_count(), 0);
    assert_eq!(bed.cluster(A).counters.records, 0);
    let set = members(3).without(NodeId(7)).without(NodeId(7)); // epoch 3, all three
    bed.set_members_up(set);
    bed.nodes[A].set_lease(Timestamp::MAX);
    bed.tick(1);
    // The server's segment on A now: A asks C, C names B, A forwards.
    let (seg, want) = server_seg(A, B, cport, delta, 1);
    let out = bed.send(A, OUT, seg);
    assert_eq!(hex(&one(&out).2), hex(&want));
    assert_eq!(bed.owners_up(&t), vec![B]);
    accounted(&bed);
}

#[test]
fn fenced_node_opens_ccl_but_forwards_nothing() {
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    let delta = connect(&mut bed, cport, A, B);
    let flows = bed.nodes[A].flow_count();
    bed.nodes[A].set_lease(Timestamp::ZERO);
    // A frame forwarded by B reaches A over the CCL: the datagram is opened,
    // its frame dropped as fenced, no new flow.
    let (seg, _) = client_seg(B, A, cport, delta, b"y");
    assert!(bed.send(B, IN, seg).is_empty());
    let a = bed.cluster(A);
    assert_eq!(a.batch_drops[DropReason::ClusterFenced.index()], 1);
    assert_eq!(bed.nodes[A].flow_count(), flows);
    // A new SYN on A: dropped too.
    let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport + 1, 80, 1, 0, SYN, 64240, &[], b""));
    assert!(out.is_empty());
    assert_eq!(bed.nodes[A].flow_count(), flows);
    // A new lease: back to work.
    bed.nodes[A].set_lease(Timestamp::MAX);
    let (seg, want) = client_seg(A, A, cport, delta, b"y");
    assert_eq!(hex(&one(&bed.send(A, IN, seg)).2), hex(&want));
    accounted(&bed);
}

#[test]
fn syn_guard_sends_a_moved_syn_to_its_owner() {
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let syn = |n: usize| from_host(n, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b"");
    let isn = tcp_fields(&one(&bed.send(A, IN, syn(A))).2).0;
    // A member-set change (here: a new epoch, same members), and ECMP
    // moves the client's retransmitted SYN to B. Within the guard B asks
    // C, which names A: B forwards, A sends the same cookie ISN again.
    bed.set_members_up(members(3).without(NodeId(9)));
    let out = bed.send(B, IN, syn(B));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, OUT));
    assert_eq!(tcp_fields(&f).0, isn, "one ISN towards the server");
    let b = bed.cluster(B).counters;
    assert_eq!((b.syn_guard_queries, b.director_queries_sent, b.forwarded_to_owner), (1, 1, 1));
    assert_eq!(bed.owners(&t), vec![A]);
    assert_eq!(bed.cluster(C).counters.register_conflicts, 0);
    // A new connection's SYN on B within the guard: C elects B (R8).
    let cport2 = port_with_director(SERVER, 443, 6, 3, C);
    let t2 = tuple(HOST, cport2, SERVER, 443, 6);
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport2, 443, 9, 0, SYN, 64240, &SYN_OPTS, b""));
    assert_eq!(one(&out).0, B);
    assert_eq!(bed.cluster(C).counters.elections, 1);
    assert_eq!(bed.owners(&t2), vec![B]);
    // After the guard: R1 as before, no query.
    bed.now_ms += dataplane::pipeline::DEFAULT_SYN_GUARD.0 / 1_000_000;
    let q = bed.cluster(B).counters.director_queries_sent;
    let cport3 = port_with_director(SERVER, 8080, 6, 3, C);
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport3, 8080, 9, 0, SYN, 64240, &SYN_OPTS, b""));
    assert_eq!(one(&out).0, B);
    assert_eq!(bed.cluster(B).counters.director_queries_sent, q);
    accounted(&bed);
}

#[test]
fn rst_ack_cookie_reaches_the_owner_before_its_registration() {
    // An nmap SYN scan of a closed port: the RST|ACK lands on B before A's
    // FlowRegister reached the director. The ack is the cookie ISN + 1.
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    bed.hold = Some(MessageKind::FlowRegister);
    let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, 81, C_ISN, 0, SYN, 1024, &[], b""));
    let isn = tcp_fields(&one(&out).2).0;
    let rst = from_outside(B, SERVER).tcp(81, cport, 0, isn.wrapping_add(1), RST | ACK, 0, &[], b"");
    let out = bed.send(B, OUT, rst);
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, IN));
    assert_eq!(hex(&f), hex(&to_host(A, SERVER).tcp(81, cport, 0, C_ISN + 1, RST | ACK, 0, &[], b"")));
    let b = bed.cluster(B).counters;
    assert_eq!((b.rst_cookie_decoded, b.director_queries_sent, b.pending_no_owner), (1, 0, 0));
    assert_eq!(bed.drops(B, DropReason::TcpNoFlow), 0);
    accounted(&bed);
}

#[test]
fn director_holds_a_query_for_the_registration_in_flight() {
    // Without cookies the SYN-ACK asks the director; the owner's
    // registration is still on its way.
    let mut bed = Bed::with(3, with_hold(3, false));
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    bed.hold = Some(MessageKind::FlowRegister);
    assert_eq!(one(&bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""))).0, A);
    bed.hold = None;
    let synack = from_outside(B, SERVER).tcp(80, cport, S_ISN, C_ISN + 1, SYN | ACK, 65535, &SYN_OPTS, b"");
    assert!(bed.send(B, OUT, synack).is_empty());
    assert_eq!(bed.cluster(C).counters.queries_held, 1);
    // The registration arrives: C answers the held query, B forwards.
    let to_c: Vec<usize> = (0..bed.held.len()).filter(|&i| bed.held[i].1 == C).collect();
    let out = bed.release_held(&to_c);
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, IN));
    assert_eq!(hex(&f), hex(&to_host(A, SERVER).tcp(80, cport, S_ISN, C_ISN + 1, SYN | ACK, 65535, &SYN_OPTS, b"")));
    let c = bed.cluster(C).counters;
    assert_eq!((c.held_answered, c.held_timeouts), (1, 0));
    assert_eq!(bed.cluster(B).counters.pending_no_owner, 0);
    assert_eq!(bed.owners(&t), vec![A]);

    // A registration that never comes: "none" at the hold's deadline.
    let cport2 = port_with_director(SERVER, 81, 6, 3, C);
    bed.hold = Some(MessageKind::FlowRegister);
    bed.send(A, IN, from_host(A, SERVER).tcp(cport2, 81, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    bed.held.clear();
    bed.hold = None;
    let synack = from_outside(B, SERVER).tcp(81, cport2, S_ISN, C_ISN + 1, SYN | ACK, 65535, &SYN_OPTS, b"");
    assert!(bed.send(B, OUT, synack).is_empty());
    bed.tick(DEFAULT_DIRECTOR_HOLD.0 / 1_000_000 - 2);
    assert_eq!(bed.cluster(C).counters.held_timeouts, 0);
    bed.tick(2);
    assert_eq!(bed.cluster(C).counters.held_timeouts, 1);
    assert_eq!(bed.cluster(B).counters.pending_no_owner, 1);
    accounted(&bed);
}

#[test]
fn hostile_transfers_and_records_change_nothing() {
    use dataplane::buf::VecBuf;
    use dataplane::ccl::{CclKey, FlowKey, FlowOp, FlowRecord, FlowTransfer, FramePath, Message, Sealer, OPAQUE_LEN};
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    connect(&mut bed, cport, A, B);
    let k = CclKey::new(NAME, KEY).unwrap();
    let mut s = Sealer::new(&k, NodeId(2), 9, 5000).unwrap();
    let path = FramePath { src_mac: ccl_mac(2), dst_mac: ccl_mac(1), src_ip: ccl_addr(2), dst_ip: ccl_addr(1) };
    let mut record = FlowRecord {
        flow: FlowKey::new(t).unwrap(),
        owner: NodeId(1),
        op: FlowOp::Upsert,
        tcp_state: 2,
        flags: 0,
        seq_delta: 0,
        idle_timeout_s: 60,
        opaque: [0; OPAQUE_LEN],
    };
    let transfer = |q: u32, r: &FlowRecord, buf: &mut [u8; 128]| {
        let n = r.emit(buf).unwrap();
        (q, n)
    };
    let mut send = |bed: &mut Bed, m: &Message<'_>| {
        let mut out = vec![0u8; 2048];
        let n = s.seal_frame(&path, Epoch(1), m, &mut out).unwrap();
        let mut b = VecBuf::new(&out[..n]);
        let now = bed.now();
        bed.nodes[B].process(now, CCL, &mut b)
    };
    // A transfer for a query B never sent, one without state, one with a
    // state that does not decode.
    let mut buf = [0u8; 128];
    let (q, n) = transfer(77, &record, &mut buf);
    assert_eq!(send(&mut bed, &Message::FlowTransfer(FlowTransfer::new(q, &buf[..n]).unwrap())), Verdict::Consumed);
    record.set_state(&[0xee; dataplane::ccl::STATE_LEN]);
    let (q, n) = transfer(78, &record, &mut buf);
    assert_eq!(send(&mut bed, &Message::FlowTransfer(FlowTransfer::new(q, &buf[..n]).unwrap())), Verdict::Consumed);
    let b = bed.cluster(B).counters;
    assert_eq!((b.transfers_refused, b.takeovers), (2, 0));
    assert_eq!(bed.owners(&t), vec![A]);
    assert_eq!(bed.nodes[B].conntrack().stats().installed, 0);
    accounted(&bed);
}

/// What left at once, or — for a frame parked at a director holding its
/// query while the owner's re-registration is due — at the next timer tick
/// (1 ms: the scan registers, the hold answers, the frame is released).
fn later(bed: &mut Bed, out: Out) -> Out {
    if out.is_empty() {
        bed.tick(1)
    } else {
        out
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Any single failure, any connection, the next segments landing on any
    /// survivors: the connection goes on with one owner and no drop.
    #[test]
    fn any_single_failure_keeps_the_connection(
        director in 0usize..4, owner in 0usize..4, fwd in 0usize..4, dead in 0usize..4,
        at in proptest::collection::vec((0usize..3, any::<bool>()), 1..6),
    ) {
        prop_assume!(owner != fwd);
        let mut bed = Bed::with(4, with_hold(4, true));
        let cport = cport_for(4, director);
        let t = tuple(HOST, cport, SERVER, 80, 6);
        let delta = connect(&mut bed, cport, owner, fwd);
        bed.kill(dead, 2);
        let survivors: Vec<usize> = (0..4).filter(|&n| n != dead).collect();
        let (mut sent, mut acked) = (0u32, 0u32);
        for (k, (pick, reply)) in at.into_iter().enumerate() {
            let n = survivors[pick];
            if k == 1 {
                bed.tick(1); // the re-registration scan, between segments
            }
            if reply {
                let (seg, _) = server_seg(n, n, cport, delta, acked);
                let out = bed.send(n, OUT, seg);
                let out = later(&mut bed, out);
                prop_assert_eq!(out.len(), 1, "reply at {} (dead {})", n, dead);
                prop_assert_eq!(out[0].1, IN);
            } else {
                let seq = C_ISN + 101 + sent;
                let out = bed.send(n, IN, from_host(n, SERVER).tcp(cport, 80, seq, S_ISN + 1001, ACK | PSH, 502, &[], b"ab"));
                let out = later(&mut bed, out);
                prop_assert_eq!(out.len(), 1, "data at {} (dead {})", n, dead);
                prop_assert_eq!(tcp_fields(&out[0].2).0, seq.wrapping_add(delta));
                sent += 2;
                acked = sent;
            }
            prop_assert_eq!(bed.owners_up(&t).len(), 1);
        }
        for &n in &survivors {
            no_drops(&bed, n);
        }
    }
}

#[test]
fn set_members_without_change_of_director_reregisters_nothing() {
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    connect(&mut bed, cport, A, B);
    let regs = bed.cluster(A).counters.registers_sent;
    bed.set_members_up(members(3).without(NodeId(9)));
    bed.tick(1);
    assert_eq!(bed.cluster(A).counters.reregistered, 0);
    assert_eq!(bed.cluster(A).counters.registers_sent, regs);
    assert!(bed.nodes[A].sync_progress(Epoch(2)).sent);
    let _ = Duration::ZERO;
}

#[test]
fn takeover_updates_every_backup_then_a_second_failure_keeps_the_owner() {
    // backups: 2; A owns, C directs. A dies, B takes over; its registration
    // must replace A's record at both holders, or the second holder would
    // hand the flow to someone else when C dies next.
    let mut bed = Bed::with(4, |n| {
        let mut c = with_hold(4, true)(n);
        if let Some(cl) = c.cluster.as_mut() {
            cl.backups = 2;
        }
        c
    });
    let cport = cport_for(4, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, A, B);
    bed.kill(A, 2);
    let (seg, want) = client_seg(B, B, cport, delta, b"1");
    assert_eq!(hex(&one(&bed.send(B, IN, seg)).2), hex(&want));
    for n in [C, D] {
        if let Some((role, owner)) = bed.nodes[n].cluster_role(bed.now(), &t) {
            assert_ne!(role, Role::Forwarder, "node {n}");
            assert_eq!(owner, NodeId(B as u8), "node {n} holds a record naming the new owner");
        }
    }
    assert_eq!(bed.cluster(D).counters.register_conflicts + bed.cluster(C).counters.register_conflicts, 0);
    bed.kill(C, 3);
    bed.tick(1);
    let (seg, want) = server_seg(D, B, cport, delta, 1);
    let out = bed.send(D, OUT, seg);
    let out = later(&mut bed, out);
    assert_eq!(hex(&one(&out).2), hex(&want));
    assert_eq!(bed.owners_up(&t), vec![B]);
    for n in [B, D] {
        no_drops(&bed, n);
    }
    accounted(&bed);
}

/// A node that left and came back has reset: the records that still name
/// it as a flow's owner are from before. A (owner) is cut off and removed,
/// no packet of the flow arrives meanwhile (nobody takes it over), A resets
/// and rejoins. The next packet, at B (whose forwarder record names A):
/// B asks the director C, C hands B the flow's state (its record's owner
/// came back empty-handed), and B forwards the packet as the new owner —
/// not to A, which would have dropped it for good.
#[test]
fn records_naming_a_rejoined_node_are_orphans() {
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, A, B);
    bed.kill(A, 2);
    bed.rejoin(A, 3);
    assert_eq!(bed.owners_up(&t), Vec::<usize>::new(), "A owns nothing after its reset");
    let (seg, want) = client_seg(B, B, cport, delta, b"after");
    let out = bed.send(B, IN, seg);
    let (n, port, frame) = one(&out);
    assert_eq!((n, port), (B, OUT));
    assert_eq!(hex(&frame), hex(&want));
    assert_eq!(bed.owners_up(&t), vec![B]);
    assert_eq!(bed.cluster(C).counters.takeovers_granted, 1);
    // The server's answer on A (the routers sent it there): A asks C, C
    // names B now.
    let (seg, want) = server_seg(A, B, cport, delta, 5);
    let out = bed.send(A, OUT, seg);
    assert_eq!(hex(&one(&out).2), hex(&want));
    assert_eq!(bed.owners_up(&t), vec![B]);
    accounted(&bed);
}

/// A node that rejoins applies the new member set a little after its peers
/// (its control lcore hears the admission, then its worker applies the
/// set; the peers' workers got it from theirs at once). C, the flow's
/// director, was cut off: the survivors moved the flow's record to a
/// director among themselves, C reset and formed a cluster of its own.
/// On its return A and B apply the set with C first; A's re-registration
/// for C (director again) must not be sent before C counts A as a member
/// (C's `SyncDone` for the epoch shows that), or C drops it
/// (`from_nonmembers`) and a packet of the flow reaching C finds no owner.
#[test]
fn a_rejoining_director_gets_its_records_after_it_applied_the_set() {
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, A, B);
    bed.kill(C, 2);
    bed.tick(1);
    bed.now_ms += 1_000;
    let now = bed.now();
    bed.nodes[C].reset(now);
    bed.nodes[C].set_members(now, MemberSet::from_nodes(Epoch(2), [NodeId(C as u8)]).unwrap());
    bed.down[C] = false;
    bed.tick(1);
    // The admission: A and B apply the set with C; C is a few ticks late.
    let back = bed.members_up(3);
    for n in [A, B] {
        bed.nodes[n].set_members(now, back);
    }
    for _ in 0..3 {
        bed.tick(1);
    }
    let now = bed.now();
    bed.nodes[C].set_members(now, back);
    // C's scan of its (empty) table, then A's: capacity / SYNC_BUDGET
    // ticks each.
    for _ in 0..40 {
        bed.tick(1);
    }
    assert_eq!(bed.cluster(C).counters.from_nonmembers, 0, "nothing reached C before it applied the set");
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(A as u8))));
    let a = bed.cluster(A).counters;
    assert_eq!((a.sync_waits, a.sync_wait_timeouts), (1, 0));
    let p = bed.nodes[C].sync_progress(Epoch(3));
    assert_eq!(p.done_from, (1 << A) | (1 << B), "C is ready: both peers' markers came after their records");
    // The server's answer lands on C: forwarded to A, the owner.
    let (seg, want) = server_seg(C, A, cport, delta, 0);
    let out = bed.send(C, OUT, seg);
    assert_eq!(hex(&one(&out).2), hex(&want));
    assert_eq!(bed.owners_up(&t), vec![A]);
    no_drops(&bed, C);
    accounted(&bed);
}

/// C restarts (a crash and a fast reboot) and the control node readmits it
/// before its hold time ran out: the survivors never apply a set without
/// it, {A, B, C}@1 → {A, B, C}@2, and only C's admission epoch
/// (`MemberInfo::since`) says it lost its state. Its flows are orphans: the
/// one it owned and directed has its state at its backup alone.
fn restart_within_one_set(bed: &mut Bed) -> (u16, FiveTuple, u32, usize) {
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(bed, cport, C, A);
    let backup = [A, B]
        .into_iter()
        .find(|&n| bed.nodes[n].cluster_role(bed.now(), &t) == Some((Role::Backup, NodeId(C as u8))))
        .expect("one backup");
    bed.now_ms += 500;
    let now = bed.now();
    bed.nodes[C].reset(now);
    bed.nodes[C].set_members(now, MemberSet::from_nodes(Epoch(0), [NodeId(C as u8)]).unwrap());
    bed.tick(1);
    let m = |since| MemberInfo { since: Epoch(since), ..MemberInfo::NONE };
    let back = MemberSet::from_members(Epoch(2), [(NodeId(A as u8), m(1)), (NodeId(B as u8), m(1)), (NodeId(C as u8), m(2))])
        .unwrap();
    bed.set_members_up(back);
    // The scans (C's of its empty table, then the others') and the hand-off.
    for _ in 0..40 {
        bed.tick(1);
    }
    let b = bed.cluster(backup).counters;
    assert_eq!(b.handoffs_sent, 1, "the backup hands the orphan to its director");
    let c = bed.cluster(C).counters;
    assert_eq!((c.handoffs_received, c.handoffs_ignored, c.from_nonmembers), (1, 0, 0));
    assert_eq!(bed.cluster(C).ccl.total_drops(), 0, "no datagram of C's new incarnation dropped");
    (cport, t, delta, backup)
}

#[test]
fn a_node_restarted_within_one_member_set_takes_back_the_orphan_it_directs() {
    let mut bed = Bed::new(3, true);
    let (cport, t, delta, backup) = restart_within_one_set(&mut bed);
    // The client's next segment reaches C again: C, the director holding
    // the state, takes the flow over and translates as before.
    let (seg, want) = client_seg(C, C, cport, delta, b"x");
    assert_eq!(hex(&one(&bed.send(C, IN, seg)).2), hex(&want));
    assert_eq!(bed.cluster(C).counters.takeovers_local, 1);
    assert_eq!(bed.owners_up(&t), vec![C]);
    bed.tick(1);
    // The backup follows the new incarnation's registration.
    assert_eq!(bed.nodes[backup].cluster_role(bed.now(), &t), Some((Role::Backup, NodeId(C as u8))));
    no_drops(&bed, C);
    accounted(&bed);
}

#[test]
fn a_node_restarted_within_one_member_set_grants_its_orphan_to_a_querier() {
    let mut bed = Bed::new(3, true);
    let (cport, t, delta, _) = restart_within_one_set(&mut bed);
    // The server's answer lands on B: B asks C, which grants it the flow.
    let (seg, want) = server_seg(B, B, cport, delta, 0);
    let out = bed.send(B, OUT, seg);
    assert_eq!(hex(&one(&out).2), hex(&want));
    assert_eq!((bed.cluster(C).counters.takeovers_granted, bed.cluster(B).counters.takeovers), (1, 1));
    assert_eq!(bed.owners_up(&t), vec![B]);
    no_drops(&bed, B);
    accounted(&bed);
}

/// The director granted the orphan to B; A asks about the flow before B's
/// registration reached the director: A learns that B owns it — a second
/// grant would make two owners (the simulator's sweep, seeds 21, 35, 94).
#[test]
fn a_query_before_the_granted_owners_registration_is_answered_not_granted() {
    let mut bed = Bed::new(3, true);
    let (cport, t, delta, _) = restart_within_one_set(&mut bed);
    bed.hold = Some(MessageKind::FlowRegister);
    let (seg, want) = server_seg(B, B, cport, delta, 0);
    assert_eq!(hex(&one(&bed.send(B, OUT, seg)).2), hex(&want));
    let (seg, want) = client_seg(A, B, cport, delta, b"x");
    assert_eq!(hex(&one(&bed.send(A, IN, seg)).2), hex(&want), "A forwards to B");
    assert_eq!(bed.cluster(C).counters.takeovers_granted, 1);
    assert_eq!(bed.owners_up(&t), vec![B]);
    bed.hold = None;
    let n = bed.held.len();
    bed.release_held(&(0..n).collect::<Vec<_>>());
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(B as u8))));
    accounted(&bed);
}

/// The director's `FlowTransfer` to B is lost on the CCL: B's frames wait
/// out their pending timeout; B's next query about the flow gets the grant
/// again (the record names B, carries the state and no registration of B's
/// yet) rather than the answer "B owns it", which B cannot act on.
#[test]
fn a_grant_lost_on_the_ccl_is_sent_again() {
    let mut bed = Bed::new(3, true);
    let (cport, t, delta, _) = restart_within_one_set(&mut bed);
    bed.hold = Some(MessageKind::FlowTransfer);
    let (seg, _) = server_seg(B, B, cport, delta, 0);
    assert!(bed.send(B, OUT, seg).is_empty(), "parked, waiting for the transfer");
    bed.hold = None;
    bed.held.clear();
    for _ in 0..120 {
        bed.tick(1);
    }
    assert_eq!(bed.cluster(B).counters.pending_timeouts, 1);
    let (seg, want) = server_seg(B, B, cport, delta, 0);
    assert_eq!(hex(&one(&bed.send(B, OUT, seg)).2), hex(&want));
    assert_eq!(bed.cluster(C).counters.grants_repeated, 1);
    assert_eq!(bed.owners_up(&t), vec![B]);
    accounted(&bed);
}

/// A chassis backup (R4) hands the orphan to a new director that holds
/// nothing. Five nodes, chassis 0 = {A, B, E}, chassis 1 = {C, D}; a flow
/// owned by A and directed by B, with E next in the ranking: its backup
/// owners are B and, because B shares A's chassis, C (the first of the
/// ranking on another chassis). A and B fail together; E, the new
/// director, never held the flow, C hands it over, and the next packet is
/// taken over as after a single failure.
#[test]
fn a_chassis_backup_hands_the_orphan_to_a_new_director_that_never_held_it() {
    const E: usize = 4;
    let chassis = |n: usize| if n == C || n == D { 1 } else { 0 };
    let set = |epoch: u64, nodes: &[usize]| {
        MemberSet::from_members(
            Epoch(epoch),
            nodes.iter().map(|&n| (NodeId(n as u8), MemberInfo { chassis: Some(chassis(n)), ..MemberInfo::NONE })),
        )
        .unwrap()
    };
    let all = set(2, &[A, B, C, D, E]);
    let table = DirectorTable::new(&all).unwrap();
    let after = DirectorTable::new(&set(3, &[C, D, E])).unwrap();
    let cport = (20_000u16..60_000)
        .find(|&p| {
            let h = flow_hash(&tuple(HOST, p, SERVER, 80, 6));
            let b: Vec<NodeId> = table.backups(h, NodeId(A as u8)).iter().collect();
            table.director(h) == NodeId(B as u8) && b.contains(&NodeId(C as u8)) && after.director(h) == NodeId(E as u8)
        })
        .expect("a port with that ranking");
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let mut bed = Bed::new(5, true);
    bed.set_members_up(all);
    bed.tick(1);
    let delta = connect(&mut bed, cport, A, D);
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Backup, NodeId(A as u8))));
    assert_eq!(bed.nodes[E].cluster_role(bed.now(), &t), None);
    bed.down[A] = true;
    bed.down[B] = true;
    bed.set_members_up(set(3, &[C, D, E]));
    for _ in 0..5 {
        bed.tick(1);
    }
    assert_eq!(bed.cluster(C).counters.handoffs_sent, 1);
    assert_eq!(bed.cluster(E).counters.handoffs_received, 1);
    // The server's answer lands on D: D asks E, which grants it the flow.
    let (seg, want) = server_seg(D, D, cport, delta, 0);
    assert_eq!(hex(&one(&bed.send(D, OUT, seg)).2), hex(&want));
    assert_eq!(bed.cluster(E).counters.takeovers_granted, 1);
    assert_eq!(bed.owners_up(&t), vec![D]);
    no_drops(&bed, D);
    accounted(&bed);
}

/// A node that left (its membership reset it: a data link down past the
/// debounce) is still counted a member by the others until the control
/// node removes it. It must not answer their owner queries as a director:
/// with its records gone it would elect the asker, a second owner of a live
/// flow (the simulator's sweep, seed 1135).
#[test]
fn a_node_that_left_answers_no_owner_query() {
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, A, B);
    // B forgets its forwarder record (as after an idle sweep), so it asks.
    let mut fresh = Bed::new(3, true);
    std::mem::swap(&mut bed.nodes[B], &mut fresh.nodes[B]);
    let now = bed.now();
    bed.nodes[C].reset(now);
    let (seg, _) = server_seg(B, A, cport, delta, 0);
    assert!(bed.send(B, OUT, seg).is_empty(), "B's frame waits for an answer that does not come");
    assert_eq!(bed.cluster(C).counters.elections, 0);
    assert!(bed.cluster(C).counters.from_nonmembers >= 1);
    assert_eq!(bed.owners_up(&t), vec![A]);
}

/// C leaves and comes back before any packet of a flow it owned and
/// directed arrived: while it was gone the backup directed the orphan; back,
/// C directs it again, and the backup hands it over (without it the flow
/// would be lost: a director with no record decides nothing).
#[test]
fn an_orphan_no_packet_reached_while_its_director_was_gone_is_handed_back() {
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, C, A);
    bed.kill(C, 2);
    bed.tick(1);
    bed.rejoin(C, 3);
    for _ in 0..40 {
        bed.tick(1);
    }
    assert_eq!(bed.cluster(C).counters.handoffs_received, 1);
    let (seg, want) = client_seg(A, A, cport, delta, b"x");
    assert_eq!(hex(&one(&bed.send(A, IN, seg)).2), hex(&want));
    assert_eq!(bed.owners_up(&t), vec![A]);
    no_drops(&bed, A);
    accounted(&bed);
}

/// A takeover registration reaches a holder still at the epoch where the
/// old owner is a member (`backups: 2`): A (owner) is removed, C (director) applies the
/// set first and takes the flow over on the client's next segment, and
/// its registration reaches B (backup) before B applies the set. B must
/// replace A's record with C's, not refuse it as a
/// second SYN's (`register_conflicts`): nothing would send it again, and
/// B's record would keep naming A — a stale state to take over from if C
/// fails next, and a record that wins over the live owner once A rejoins.
/// C's registration names the owner it replaced (`FLAG_TAKEOVER`), and B's
/// record names that owner: it is replaced. (A second takeover of the
/// flow — two directors granting it across a heal — names A too but meets
/// a record naming the first taker: the first-owner rule stands, the
/// latecomer yields; the simulator's sweep, seed 60.)
#[test]
fn a_takeover_registration_replaces_the_record_at_a_holder_behind() {
    // backups: 2, so that B holds a backup record (with one backup the
    // director is the only holder of three).
    let mut bed = Bed::with(3, |n| {
        let mut c = config(n, 3, true);
        if let Some(cl) = c.cluster.as_mut() {
            cl.backups = 2;
        }
        c
    });
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, A, B);
    assert_eq!(bed.nodes[B].cluster_role(bed.now(), &t), Some((Role::Backup, NodeId(A as u8))));
    bed.down[A] = true;
    let without_a = bed.members_up(2);
    let now = bed.now();
    bed.nodes[C].set_members(now, without_a);
    let (seg, want) = client_seg(C, C, cport, delta, b"x");
    assert_eq!(hex(&one(&bed.send(C, IN, seg)).2), hex(&want));
    assert_eq!(bed.cluster(C).counters.takeovers_local, 1);
    assert_eq!(bed.cluster(B).counters.register_conflicts, 0);
    assert_eq!(bed.nodes[B].cluster_role(bed.now(), &t), Some((Role::Backup, NodeId(C as u8))));
    let now = bed.now();
    bed.nodes[B].set_members(now, without_a);
    bed.tick(1);
    assert_eq!(bed.nodes[B].cluster_role(bed.now(), &t), Some((Role::Backup, NodeId(C as u8))));
    // C fails next: B takes over from C's record (not from A's older one).
    bed.kill(C, 3);
    let (seg, want) = server_seg(B, B, cport, delta, 1);
    let out = bed.send(B, OUT, seg);
    assert_eq!(hex(&one(&later(&mut bed, out)).2), hex(&want));
    assert_eq!(bed.owners_up(&t), vec![B]);
    accounted(&bed);
}

/// A `SyncDone` marker that cannot be sent — the peer's CCL MAC is not
/// resolved yet, as when the nodes boot and form the cluster — is tried
/// again `SYNC_MARKER_EVERY` later (the ARP request went out meanwhile),
/// instead of leaving the joiner to its sync timeout with its data ports
/// down. Markers that were sent are not repeated, and the tries stop after
/// `SYNC_MARKER_FOR`.
#[test]
fn an_unsendable_sync_marker_is_tried_again() {
    use dataplane::pipeline::{SYNC_MARKER_EVERY, SYNC_MARKER_FOR};
    let mut bed = Bed::with_arp(3);
    let set = bed.members_up(2);
    bed.set_members_up(set);
    bed.tick(1);
    for n in 0..3 {
        assert_eq!(bed.nodes[n].sync_progress(Epoch(2)).done_from, 0, "node {n}: no marker could leave");
        assert!(bed.cluster(n).counters.ccl_unresolved >= 2, "node {n}");
    }
    bed.tick(SYNC_MARKER_EVERY.0 / 1_000_000);
    for n in 0..3 {
        let want = 0b111 & !(1 << n);
        assert_eq!(bed.nodes[n].sync_progress(Epoch(2)).done_from, want, "node {n} heard both peers' markers");
        assert_eq!(bed.cluster(n).counters.sync_done_repeated, 2, "node {n}");
    }
    // Markers that left are repeated too (one may be lost on the CCL),
    // until SYNC_MARKER_FOR after the scan.
    let before = bed.ccl_count(A, B, MessageKind::SyncDone);
    bed.tick(SYNC_MARKER_EVERY.0 / 1_000_000);
    assert_eq!(bed.ccl_count(A, B, MessageKind::SyncDone), before + 1, "repeated");
    bed.tick(SYNC_MARKER_FOR.0 / 1_000_000);
    let after = bed.ccl_count(A, B, MessageKind::SyncDone);
    bed.tick(SYNC_MARKER_FOR.0 / 1_000_000);
    assert_eq!(bed.ccl_count(A, B, MessageKind::SyncDone), after, "the repeats stop");
}

/// A `SyncDone` lost on the CCL: the joiner gets the next repeat, an
/// interval later, instead of waiting for its sync timeout.
#[test]
fn a_sync_marker_lost_on_the_ccl_is_repeated() {
    use dataplane::pipeline::SYNC_MARKER_EVERY;
    let mut bed = Bed::new(3, true);
    bed.kill(C, 2);
    bed.tick(1);
    bed.hold = Some(MessageKind::SyncDone);
    bed.rejoin(C, 3);
    for _ in 0..5 {
        bed.tick(1);
    }
    assert_eq!(bed.nodes[C].sync_progress(Epoch(3)).done_from, 0, "every marker to C lost");
    bed.hold = None;
    bed.held.clear();
    bed.tick(SYNC_MARKER_EVERY.0 / 1_000_000);
    assert_eq!(bed.nodes[C].sync_progress(Epoch(3)).done_from, (1 << A) | (1 << B));
}

/// A datagram a node sealed before it left, delivered after it rejoined:
/// on the test bed, the af_packet TX ring of a node whose CCL was cut
/// holds what it sent meanwhile and flushes it when the carrier returns —
/// after the node reset and rejoined. A `StateUpdate` naming it as owner
/// would replace the director's record of the flow's new owner, and the
/// flow would be sent to a node that has no state for it. A (owner)
/// re-sends its record while cut (held here), B takes the flow over
/// through C, A resets and rejoins; then the old datagram reaches C: C
/// drops it (`ccl-before-rejoin`: sealed at an epoch older than the one A
/// rejoined in) and still names B.
#[test]
fn a_datagram_sealed_before_a_rejoin_is_dropped() {
    let mut bed = Bed::new(3, true);
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, A, B);
    bed.hold = Some(MessageKind::StateUpdate);
    bed.tick(2_000);
    let stale: Vec<usize> = (0..bed.held.len()).filter(|&i| bed.held[i].0 == A && bed.held[i].1 == C).collect();
    assert_eq!(stale.len(), 1, "A re-sent its record to C (RESEND_DELAY): {:?}", bed.held.len());
    bed.hold = None;
    bed.kill(A, 2);
    let (seg, want) = client_seg(B, B, cport, delta, b"x");
    assert_eq!(hex(&one(&bed.send(B, IN, seg)).2), hex(&want));
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(B as u8))));
    bed.rejoin(A, 3);
    bed.release_held(&stale);
    assert_eq!(bed.drops(C, DropReason::CclBeforeRejoin), 1);
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(B as u8))));
    let (seg, want) = server_seg(C, B, cport, delta, 1);
    assert_eq!(hex(&one(&bed.send(C, OUT, seg)).2), hex(&want));
    assert_eq!(bed.owners_up(&t), vec![B]);
    accounted(&bed);
}

/// A UDP client port whose flow has director `d4` among 4 members and
/// `d3` among the first 3.
fn udp_port_with_directors(d4: usize, d3: usize) -> u16 {
    (1024u16..)
        .find(|&p| {
            let t = tuple(HOST, p, SERVER, 5000, 17);
            director(&t, 4) == d4 && director(&t, 3) == d3
        })
        .unwrap()
}

#[test]
fn a_new_director_waits_for_the_reregistration_before_electing() {
    // A owns a UDP flow whose director D fails; C directs it now. A packet
    // of the flow reaching C, and one reaching B (which asks C to elect
    // it), before A's re-registration: neither makes a second owner. They
    // wait at C until the record arrives, then go to A (the quorum sweep,
    // seed 124: C owned it 30 µs before A's record came).
    let mut bed = Bed::with(4, with_hold(4, true));
    let cport = udp_port_with_directors(D, C);
    let t = tuple(HOST, cport, SERVER, 5000, 17);
    let out = bed.send(A, IN, from_host(A, SERVER).udp(cport, 5000, b"one"));
    assert_eq!(one(&out).0, A);
    assert_eq!(bed.owners(&t), vec![A]);
    bed.kill(D, 2);
    assert!(bed.send(C, IN, from_host(C, SERVER).udp(cport, 5000, b"two")).is_empty(), "C holds its own packet");
    assert!(bed.send(B, IN, from_host(B, SERVER).udp(cport, 5000, b"three")).is_empty(), "B's election is held");
    assert_eq!(bed.cluster(C).counters.queries_held, 2);
    assert_eq!(bed.owners(&t), vec![A]);
    // A's scan runs: its record reaches C, the held packets go to A.
    let out = bed.tick(1);
    assert_eq!(out.len(), 2, "{out:?}");
    assert!(out.iter().all(|(n, p, _)| (*n, *p) == (A, OUT)), "{out:?}");
    assert_eq!(bed.owners(&t), vec![A]);
    let c = bed.cluster(C).counters;
    assert_eq!((c.held_answered, c.held_timeouts, c.elections), (2, 0, 0));

    // A new flow while C settles: its packets wait the hold out, then C
    // elects as before (B's query), or owns it (its own packet).
    bed.kill(B, 3);
    let (p_b, p_c) = {
        let mut ports = (1024u16..).filter(|&p| director(&tuple(HOST, p, SERVER, 5001, 17), 4) == C && {
            let s = MemberSet::from_nodes(Epoch(3), [NodeId(0), NodeId(2)]).unwrap();
            DirectorTable::new(&s).unwrap().director(flow_hash(&tuple(HOST, p, SERVER, 5001, 17))) == NodeId(2)
        });
        (ports.next().unwrap(), ports.next().unwrap())
    };
    assert!(bed.send(C, IN, from_host(C, SERVER).udp(p_c, 5001, b"new")).is_empty());
    assert!(bed.send(A, IN, from_host(A, SERVER).udp(p_b, 5001, b"new")).is_empty());
    let out = bed.tick(DEFAULT_DIRECTOR_HOLD.0 / 1_000_000);
    let mut from: Vec<usize> = out.iter().map(|o| o.0).collect();
    from.sort();
    assert_eq!(from, vec![A, C], "{out:?}");
    assert_eq!(bed.owners(&tuple(HOST, p_c, SERVER, 5001, 17)), vec![C]);
    assert_eq!(bed.owners(&tuple(HOST, p_b, SERVER, 5001, 17)), vec![A]);
    accounted(&bed);
}

#[test]
fn a_lost_reregistration_is_sent_again_before_the_director_elects() {
    // A owns a UDP flow whose director D fails; C directs it now. A's
    // re-registration with C is lost on the CCL, its marker arrives: C
    // counts one record fewer than the marker says, asks A again
    // (`SyncAgain`), and A's second registration arrives before B's
    // election — C answers B with A, no second owner (the quorum sweep,
    // seed 7 after the data-port change: a CCL loss burst took the owner's
    // registration, the director elected the querier 16 ms later).
    let mut bed = Bed::with(4, with_hold(4, true));
    let cport = udp_port_with_directors(D, C);
    let t = tuple(HOST, cport, SERVER, 5000, 17);
    let out = bed.send(A, IN, from_host(A, SERVER).udp(cport, 5000, b"one"));
    assert_eq!(one(&out).0, A);
    bed.hold = Some(MessageKind::FlowRegister);
    bed.kill(D, 2);
    bed.tick(1);
    let lost = bed.held.iter().filter(|(f, to, _)| (*f, *to) == (A, C)).count();
    assert!(lost >= 1, "A's re-registration with C was caught: {:?}", bed.held.iter().map(|h| (h.0, h.1)).collect::<Vec<_>>());
    bed.held.clear();
    bed.hold = None;
    let c = bed.cluster(C).counters;
    assert_eq!((c.sync_short, c.sync_again_sent), (1, 1), "C saw the short marker and asked again");
    assert_eq!(bed.cluster(A).counters.sync_again_received, 1);
    // A's scan runs again for C: the record, then a marker that matches.
    bed.tick(1);
    assert_eq!(bed.owners(&t), vec![A]);
    let out = bed.send(B, IN, from_host(B, SERVER).udp(cport, 5000, b"two"));
    assert_eq!(one(&out).0, A, "B's packet goes to A: {out:?}");
    assert_eq!(bed.owners(&t), vec![A]);
    let c = bed.cluster(C).counters;
    assert_eq!((c.elections, c.sync_short, c.sync_short_accepted), (0, 1, 0));
    accounted(&bed);
}

#[test]
fn a_backup_record_overtaking_the_owner_reply_keeps_its_state() {
    // C took A's flow over and registers with its backup B; B asked C
    // who owns it before that record arrived, and the reply comes after
    // it. B keeps the state: when C fails too, B takes the flow over (the
    // quorum sweep, seed 93: the reply's forwarder record replaced the
    // state and the flow died with C).
    let mut bed = Bed::with(3, with_hold(3, true));
    let cport = cport_for(3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let delta = connect(&mut bed, cport, A, B);
    bed.kill(A, 2);
    bed.hold = Some(MessageKind::FlowRegister);
    let (seg, want) = server_seg(C, C, cport, delta, 0);
    let out = bed.send(C, OUT, seg);
    assert_eq!(one(&out).2, want, "C takes over");
    assert_eq!(bed.owners_up(&t), vec![C]);
    let registers = bed.held.len();
    assert!(registers >= 1, "C's registration with B is in flight");
    bed.hold = Some(MessageKind::OwnerReply);
    let (seg, _) = server_seg(B, C, cport, delta, 0);
    assert!(bed.send(B, OUT, seg).is_empty(), "B asks C");
    assert_eq!(bed.held.len(), registers + 1);
    bed.hold = None;
    let order: Vec<usize> = (0..=registers).collect();
    let out = bed.release_held(&order);
    assert_eq!(one(&out).0, C, "B's packet reaches C");
    bed.kill(C, 3);
    let (seg, want) = server_seg(B, B, cport, delta, 0);
    let out = bed.send(B, OUT, seg);
    assert_eq!(one(&out).2, want, "B holds the state and takes over");
    assert_eq!(bed.owners_up(&t), vec![B]);
}

/// Five nodes on two sites (R12): 0, 1, 2 at site 1, 3, 4 at site 2,
/// director localization on; `up` the nodes in the set.
fn sited(epoch: u64, up: &[usize]) -> MemberSet {
    let info = |n: usize| MemberInfo { site: Some(if n < 3 { 1 } else { 2 }), chassis: None, since: Epoch(0) };
    MemberSet::from_members(Epoch(epoch), up.iter().map(|&n| (NodeId(n as u8), info(n)))).unwrap()
}

fn localized(n: usize) -> PipelineConfig {
    let mut c = with_hold(5, true)(n);
    if let Some(cl) = c.cluster.as_mut() {
        cl.members = sited(1, &[0, 1, 2, 3, 4]);
        cl.director_localization = true;
    }
    c
}

/// A client port (server port `sport`) whose flow, among the 5 sited
/// members, has global director `global` and local directors `l1` at
/// site 1 and `l2` at site 2 (the global director is its own site's
/// local director).
fn sited_port(sport: u16, global: usize, l1: usize, l2: usize) -> u16 {
    let t = DirectorTable::new(&sited(1, &[0, 1, 2, 3, 4])).unwrap().with_localization(true);
    (1024u16..u16::MAX)
        .find(|&p| {
            let h = flow_hash(&tuple(HOST, p, SERVER, sport, 6));
            t.director(h) == NodeId(global as u8)
                && t.local_director(h, 1) == Some(NodeId(l1 as u8))
                && t.local_director(h, 2) == Some(NodeId(l2 as u8))
        })
        .unwrap()
}

#[test]
fn director_localization_asks_the_local_director_first() {
    let mut bed = Bed::with(5, localized);
    // Flow X: owned at site 1 (A), directed from site 2 (D = 3), its local
    // director at site 1 is B. A registers with both.
    let x = sited_port(80, D, B, D);
    let tx = tuple(HOST, x, SERVER, 80, 6);
    let delta = connect(&mut bed, x, A, 4);
    assert_eq!(bed.ccl_count(A, B, MessageKind::FlowRegister), 1, "the local director holds the record");
    assert_eq!(bed.ccl_count(A, D, MessageKind::FlowRegister), 1, "so does the global director");
    // C, at site 1, asks B — not D, across the sites — and forwards to A.
    let (seg, want) = client_seg(C, A, x, delta, b"hi");
    let out = bed.send(C, IN, seg);
    let out = later(&mut bed, out);
    assert_eq!(one(&out), (A, OUT, want));
    assert_eq!((bed.ccl_count(C, B, MessageKind::OwnerQuery), bed.ccl_count(C, D, MessageKind::OwnerQuery)), (1, 0));
    assert_eq!(bed.cluster(B).counters.local_answered, 1);
    assert_eq!(bed.cluster(C).counters.local_fallbacks, 0);

    // Flow Y: owned at site 1, directed there too (B); node 3 at site 2
    // asks its local director (4), which does not know it, then B.
    let y = sited_port(81, B, B, 4);
    let ty = tuple(HOST, y, SERVER, 81, 6);
    let dy = handshake(&mut bed, y, 81, A, C);
    let seg = from_host(3, SERVER).tcp(y, 81, C_ISN + 1, S_ISN + 1, ACK | PSH, 502, &[], b"yo");
    let want = to_gw(A, SERVER).tcp(y, 81, (C_ISN + 1).wrapping_add(dy), S_ISN + 1, ACK | PSH, 502, &[], b"yo");
    let out = bed.send(3, IN, seg);
    let out = later(&mut bed, out);
    assert_eq!(one(&out), (A, OUT, want));
    assert_eq!((bed.ccl_count(3, 4, MessageKind::OwnerQuery), bed.ccl_count(3, B, MessageKind::OwnerQuery)), (1, 1));
    assert_eq!(bed.cluster(4).counters.local_unknown, 1);
    assert_eq!(bed.cluster(3).counters.local_fallbacks, 1);
    assert_eq!(bed.owners(&ty), vec![A]);

    // A fails: C's next segment of X asks B, whose record names a node
    // that left ("none": the local director never grants), then the
    // global director D, which holds the state and grants it to C.
    bed.down[A] = true;
    bed.set_members_up(sited(2, &[1, 2, 3, 4]));
    bed.tick(1);
    let (seg, want) = client_seg(C, C, x, delta, b"after");
    let out = bed.send(C, IN, seg);
    let out = later(&mut bed, out);
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (C, OUT));
    assert_eq!(tcp_fields(&f).0, tcp_fields(&want).0);
    assert_eq!(bed.owners_up(&tx), vec![C]);
    assert!(bed.cluster(C).counters.local_fallbacks >= 1);
    accounted(&bed);
}
