//! Anti-spoofing (issue 15 item 1, RFC 3704): an interface's
//! `reverse-path` decides which sources a datagram received on it may
//! carry — strict: the route back to the source leaves by that interface
//! (a default route counts on the interface it leaves by); loose: some
//! route leads back; off: any. A golden table over the example node
//! (inside 198.18.1.0/24 with 203.0.113.0/24 behind a router there,
//! outside with the default route), then a cluster member, where the check
//! runs before the director is asked anything about a spoofed SYN.

mod cluster_bed;
mod common;

use common::*;
use dataplane::buf::VecBuf;
use dataplane::conntrack::tcp_flags::SYN;
use dataplane::pipeline::{Pipeline, ReversePath, Verdict};
use dataplane::wire::build::PacketBuilder;
use dataplane::{DropReason, PortId, Timestamp};
use std::net::Ipv4Addr;

fn node(inside: ReversePath, outside: ReversePath) -> Pipeline {
    let mut cfg = config();
    cfg.interfaces[0].reverse_path = inside;
    cfg.interfaces[1].reverse_path = outside;
    cfg.static_neighbors = vec![(GW, GW_MAC), (HOST, HOST_MAC)];
    Pipeline::new(cfg).unwrap()
}

/// A SYN from `src` received on `port`, to `dst`.
fn syn(p: &mut Pipeline, port: PortId, src: Ipv4Addr, dst: Ipv4Addr) -> Verdict {
    let (from, to) = if port == IN_PORT { (HOST_MAC, IN_MAC) } else { (GW_MAC, OUT_MAC) };
    let f = PacketBuilder::new(from, to, src, dst).tcp(40000, 80, 1, 0, SYN, 64240, &SYN_OPTS, b"");
    let mut b = VecBuf::new(&f);
    p.process(Timestamp::from_millis(1), port, &mut b)
}

#[test]
fn golden_reverse_path_table() {
    use ReversePath::{Loose, Off, Strict};
    let behind_router = Ipv4Addr::new(203, 0, 113, 5);
    let elsewhere = Ipv4Addr::new(10, 1, 2, 3);
    let spoof = DropReason::ReversePath;
    let fwd = Verdict::Forward(OUT_PORT);
    // (inside mode, outside mode, port, source, destination, verdict)
    let rows: &[(ReversePath, ReversePath, PortId, Ipv4Addr, Ipv4Addr, Verdict)] = &[
        // Inside, strict: its subnet and what is routed behind it pass;
        // a source the default route sends outside does not.
        (Strict, Strict, IN_PORT, HOST, SERVER, fwd),
        (Strict, Strict, IN_PORT, behind_router, SERVER, fwd),
        (Strict, Strict, IN_PORT, elsewhere, SERVER, Verdict::Drop(spoof)),
        (Strict, Strict, IN_PORT, SERVER, SERVER, Verdict::Drop(spoof)),
        // Loose: some route (the default) leads back to any of them.
        (Loose, Strict, IN_PORT, elsewhere, SERVER, fwd),
        (Off, Strict, IN_PORT, elsewhere, SERVER, fwd),
        // Outside, strict: the default route's interface takes any source
        // not routed elsewhere (the example's access rules admit this
        // SYN to the host's port 80), but not an inside one.
        (Strict, Strict, OUT_PORT, SERVER, HOST, Verdict::Forward(IN_PORT)),
        (Strict, Strict, OUT_PORT, behind_router, HOST, Verdict::Drop(spoof)),
        (Strict, Strict, OUT_PORT, Ipv4Addr::new(198, 18, 1, 77), HOST, Verdict::Drop(spoof)),
        (Strict, Loose, OUT_PORT, behind_router, HOST, Verdict::Forward(IN_PORT)),
        (Strict, Off, OUT_PORT, Ipv4Addr::new(198, 18, 1, 77), HOST, Verdict::Forward(IN_PORT)),
    ];
    for (i, &(inside, outside, port, src, dst, want)) in rows.iter().enumerate() {
        let mut p = node(inside, outside);
        assert_eq!(syn(&mut p, port, src, dst), want, "row {i}: {inside:?}/{outside:?} {src} on port {}", port.0);
        let counted = p.counters().drop_count(spoof);
        assert_eq!(counted, u64::from(want == Verdict::Drop(spoof)), "row {i}: counted once, under reverse-path");
        assert_eq!(p.conns(Timestamp::from_millis(1), 4).len(), usize::from(matches!(want, Verdict::Forward(_))), "row {i}: a flow only when forwarded");
    }
}

/// A cluster member (the cluster's fast path runs the check too): a SYN
/// with a source routed out of the other interface is dropped where it
/// arrives, before any CCL message; a real client's SYN goes on as before.
#[test]
fn a_cluster_member_drops_a_spoofed_syn_before_asking_anyone() {
    use cluster_bed::*;
    let mut bed = Bed::new(3, true);
    let spoofed = PacketBuilder::new(cluster_bed::HOST_MAC, in_mac(0), Ipv4Addr::new(10, 9, 8, 7), cluster_bed::SERVER)
        .tcp(40000, 80, 1, 0, SYN, 64240, &cluster_bed::SYN_OPTS, b"");
    let out = bed.send(0, IN, spoofed);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(bed.drops(0, DropReason::ReversePath), 1);
    assert!(bed.ccl.is_empty(), "nothing was asked of another member");
    let real = cluster_bed::from_host(0, cluster_bed::SERVER).tcp(40001, 80, 1, 0, SYN, 64240, &cluster_bed::SYN_OPTS, b"");
    let out = bed.send(0, IN, real);
    assert!(!out.is_empty() || !bed.ccl.is_empty(), "the real client's SYN goes on");
    assert_eq!(bed.drops(0, DropReason::ReversePath), 1);
}
