//! Dynamic NAT on a cluster member with several workers (issue 13, SPEC
//! N4): the control node hands a host one pool address (the replicated
//! table, which every worker of every member holds); a host's connections
//! live on the workers of their real tuples, so the return traffic to the
//! one mapped address must be steered by the real tuple the table
//! translates it to (`steer::steer_nat`'s `real_of`), not by the address.
//! Each frame is received by the queue of the other worker than the
//! connection's, so every delivery here went through the steering.

mod cluster_bed;
mod workers_util;

use cluster_bed::*;
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::nat::RuleKind;
use dataplane::pipeline::{NatSpec, Pipeline, PoolSpec};
use dataplane::steer::{steer_nat, worker_of_tuple, Steer};
use dataplane::wire::build::PacketBuilder;
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::tcp::TcpPacket;
use dataplane::{DropReason, NodeId, Timestamp, WorkerId};
use std::net::Ipv4Addr;
use workers_util::Workers;

const DYN_A: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 50);
const DYN_B: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 51);
const ROUTER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 1);
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;

fn spec() -> NatSpec {
    one_rule_nat(RuleKind::DynamicNat, PoolSpec { addresses: vec![DYN_A, DYN_B], pat: None })
}

/// Node 0, the control node of a one-member cluster, with `n` workers
/// sharing one NAT plan.
fn member(n: u16, now: Timestamp) -> Workers {
    let cfg = config(0, 1, false);
    let mut w: Vec<Pipeline> = (0..n)
        .map(|i| {
            let mut p = Pipeline::new(cfg.clone()).unwrap();
            p.set_worker(WorkerId(i), n).unwrap();
            p
        })
        .collect();
    w[0].set_nat(&spec()).unwrap();
    let plan = w[0].nat_plan().unwrap();
    assert!(plan.is_cluster());
    for p in &mut w[1..] {
        p.set_nat_plan(plan.clone()).unwrap();
    }
    let set = members(1).with_control(Some(NodeId(0)));
    for p in &mut w {
        p.set_members(now, set);
    }
    Workers::of(w, Some(plan))
}

fn tcp_of(frame: &[u8]) -> (Ipv4Addr, u16, Ipv4Addr, u16, u32) {
    let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
    assert!(ip.verify_checksum());
    let t = TcpPacket::new_checked(ip.payload()).unwrap();
    (ip.src(), t.src_port(), ip.dst(), t.dst_port(), t.seq())
}

#[test]
fn return_traffic_to_a_dynamic_address_reaches_the_worker_of_each_connection() {
    let now = Timestamp::from_secs(10);
    let mut node = member(2, now);
    // Client ports whose connections live on worker 0 and on worker 1.
    let worker = |sport| worker_of_tuple(&tuple(HOST, sport, SERVER, 80, 6), 2).0 as usize;
    let mut ports = vec![];
    for want in [0, 1] {
        ports.extend((40_000u16..).filter(|&p| worker(p) == want).take(3));
    }
    // The host's first SYN: no translation yet, held where it belongs,
    // asked for once.
    let syn = |sport| from_host(0, SERVER).tcp(sport, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, &[]);
    let w0 = worker(ports[0]);
    assert!(node.receive(now, IN, &syn(ports[0]), 1 - w0).is_empty());
    assert_eq!(node.w[w0].counters().drop_count(DropReason::NatPending), 0);
    assert_eq!(node.w[w0].nat_counters().unwrap().pending_held, 1);
    let mut asked = vec![];
    for p in &mut node.w {
        p.take_xlate_requests(|r| asked.push(r));
    }
    assert_eq!(asked.len(), 1, "{asked:?}");
    // The control node's answer, installed on every worker: the held SYN
    // leaves its worker translated.
    for p in &mut node.w {
        p.set_shared_xlate(now, 0, HOST, Some(DYN_B));
    }
    let released = node.tick(now);
    assert_eq!(released.len(), 1, "the held SYN");
    let (src, sp, dst, _, _) = tcp_of(&released[0].1);
    assert_eq!((released[0].0, src, sp, dst), (OUT, DYN_B, ports[0], SERVER));
    assert_eq!(node.w[w0].nat_counters().unwrap().pending_released, 1);
    for &sport in &ports {
        let w = worker(sport);
        let out = node.receive(now, IN, &syn(sport), 1 - w);
        assert_eq!(out.len(), 1, "the SYN from port {sport}");
        let (src, sp, dst, _, isn) = tcp_of(&out[0].1);
        assert_eq!((out[0].0, src, sp, dst), (OUT, DYN_B, sport, SERVER));
        // The SYN-ACK to the mapped address, received by either queue:
        // the worker of the connection translates it back.
        for rx in [1 - w, w] {
            let synack = PacketBuilder::new(GW_MAC, out_mac(0), SERVER, DYN_B).tcp(
                80,
                sport,
                S_ISN,
                isn.wrapping_add(1),
                SYN | ACK,
                65160,
                &SYN_OPTS,
                &[],
            );
            let rxw = &node.w[rx];
            let steered = steer_nat(&synack, 2, rxw.nat_plan().as_deref(), |a| rxw.shared_real_of(a));
            assert_eq!(steered, Steer::Worker(WorkerId(w as u16)), "port {sport} at worker {rx}");
            let out = node.receive(now, OUT, &synack, rx);
            assert_eq!(out.len(), 1, "the SYN-ACK to port {sport} at worker {rx}");
            let (src, _, dst, dp, _) = tcp_of(&out[0].1);
            assert_eq!((out[0].0, src, dst, dp), (IN, SERVER, HOST, sport));
        }
        // An ICMP error from a router about the translated SYN: by the
        // packet it quotes, to the same worker, quote translated back.
        let quoted = PacketBuilder::new(GW_MAC, out_mac(0), DYN_B, SERVER).tcp(sport, 80, C_ISN, 0, SYN, 64240, &[], &[]);
        let err = PacketBuilder::new(GW_MAC, out_mac(0), ROUTER, DYN_B).icmp(3, 4, (0, 1400), &quoted[14..42]);
        let rxw = &node.w[1 - w];
        let steered = steer_nat(&err, 2, rxw.nat_plan().as_deref(), |a| rxw.shared_real_of(a));
        assert_eq!(steered, Steer::Worker(WorkerId(w as u16)), "the error about port {sport}");
        let out = node.receive(now, OUT, &err, 1 - w);
        assert_eq!(out.len(), 1, "the error about port {sport}");
        let ip = Ipv4Packet::new_checked(&out[0].1[14..]).unwrap();
        assert_eq!((out[0].0, ip.dst()), (IN, HOST));
        let q = Ipv4Packet::new_checked_header(&ip.payload()[8..]).unwrap();
        assert_eq!(q.src(), HOST, "the quote's source translated back");
    }
    // Another address in the table: the steering follows it.
    for p in &mut node.w {
        p.set_shared_xlate(now, 0, HOST, Some(DYN_A));
    }
    assert!(node.w.iter().all(|p| p.shared_real_of(DYN_A) == Some(HOST) && p.shared_real_of(DYN_B).is_none()));
    // Traffic to a pool address nobody holds: dropped where it lands,
    // counted.
    let probe = PacketBuilder::new(GW_MAC, out_mac(0), SERVER, DYN_B).tcp(80, ports[0], 1, 0, SYN, 1024, &[], &[]);
    assert!(node.receive(now, OUT, &probe, 0).is_empty());
    let dropped: u64 = node.w.iter().map(|p| p.counters().drop_count(DropReason::NatNoXlate)).sum();
    assert_eq!(dropped, 1);
}
