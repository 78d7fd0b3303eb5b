//! Connection limits through a whole pipeline (issue 15 item 3, SPEC L1;
//! docs/flood.md): a permit rule's per-client embryonic limit and the
//! global connection limit refuse new connections with their own drop
//! reasons, a completed handshake gives its embryonic place back, the rest
//! of the cluster's counts (`set_remote_limits`) count against the limit,
//! and a policy change carries the counts over.

mod common;

use common::*;
use dataplane::buf::VecBuf;
use dataplane::conntrack::limits::{Count, Remote};
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::conntrack::{LimitSet, LimitSpec};
use dataplane::pipeline::{Pipeline, Policy, Verdict};
use dataplane::wire::build::PacketBuilder;
use dataplane::{DropReason, Timestamp};
use std::net::{IpAddr, Ipv4Addr};

const T: Timestamp = Timestamp::from_millis(5);

fn node() -> Pipeline {
    let mut cfg = config();
    cfg.static_neighbors = vec![(GW, GW_MAC), (HOST, HOST_MAC)];
    Pipeline::new(cfg).unwrap()
}

/// An outside client's SYN to the inside host's port 80 (rule web-in).
fn syn_in(p: &mut Pipeline, client: Ipv4Addr, sport: u16) -> Verdict {
    let f = PacketBuilder::new(GW_MAC, OUT_MAC, client, HOST).tcp(sport, 80, 1, 0, SYN, 64240, &SYN_OPTS, b"");
    p.process(T, OUT_PORT, &mut VecBuf::new(&f))
}

/// The inside host's SYN to an outside server (the security-level default).
fn syn_out(p: &mut Pipeline, sport: u16) -> Verdict {
    let f = PacketBuilder::new(HOST_MAC, IN_MAC, HOST, SERVER).tcp(sport, 443, 1, 0, SYN, 64240, &SYN_OPTS, b"");
    p.process(T, IN_PORT, &mut VecBuf::new(&f))
}

/// The inside host answers an outside client's SYN, the client ACKs.
fn handshake_in(p: &mut Pipeline, client: Ipv4Addr, sport: u16) {
    let sa = PacketBuilder::new(HOST_MAC, IN_MAC, HOST, client).tcp(80, sport, 5000, 2, SYN | ACK, 64240, &SYN_OPTS, b"");
    assert_eq!(p.process(T, IN_PORT, &mut VecBuf::new(&sa)), Verdict::Forward(OUT_PORT));
    let a = PacketBuilder::new(GW_MAC, OUT_MAC, client, HOST).tcp(sport, 80, 2, 5001, ACK, 502, &[], b"");
    assert_eq!(p.process(T, OUT_PORT, &mut VecBuf::new(&a)), Verdict::Forward(IN_PORT));
}

/// The view of a node alone: no other place admits.
fn alone() -> Remote {
    Remote { places: 1, ..Remote::default() }
}

fn spec() -> LimitSpec {
    LimitSpec {
        global: LimitSet { max_conns: Some(4), ..LimitSet::default() },
        // Refused, not answered by the SYN proxy (tests/syn_proxy.rs).
        rules: vec![("web-in".into(), LimitSet { per_client_embryonic_max: Some(2), max_embryonic: Some(3), syn_proxy: false, ..LimitSet::default() })],
    }
}

#[test]
fn limits_refuse_new_connections_by_their_own_reasons() {
    let mut p = node();
    p.set_limits(&spec());
    p.set_remote_limits(&alone());
    let a = Ipv4Addr::new(192, 0, 2, 7);
    let b = Ipv4Addr::new(192, 0, 2, 8);
    let fwd = Verdict::Forward(IN_PORT);
    // Client a: two half-open connections, the third refused.
    assert_eq!(syn_in(&mut p, a, 1000), fwd);
    assert_eq!(syn_in(&mut p, a, 1001), fwd);
    assert_eq!(syn_in(&mut p, a, 1002), Verdict::Drop(DropReason::ClientEmbryonicLimit));
    // Client b: the rule's embryonic limit (3) stops its second.
    assert_eq!(syn_in(&mut p, b, 1000), fwd);
    assert_eq!(syn_in(&mut p, b, 1001), Verdict::Drop(DropReason::EmbryonicLimit));
    // a's first handshake completes: one embryonic place each is free.
    handshake_in(&mut p, a, 1000);
    assert_eq!(syn_in(&mut p, b, 1001), fwd);
    // Four connections: the global limit holds the inside host's too.
    assert_eq!(syn_out(&mut p, 2000), Verdict::Drop(DropReason::ConnLimit));
    let c = p.counters();
    assert_eq!(
        (c.drop_count(DropReason::ClientEmbryonicLimit), c.drop_count(DropReason::EmbryonicLimit), c.drop_count(DropReason::ConnLimit)),
        (1, 1, 1)
    );
    let l = p.limits().unwrap();
    let classes = l.classes();
    assert_eq!((classes[0].name.as_str(), classes[0].local), ("global", Count { conns: 4, embryonic: 3 }));
    assert_eq!((classes[1].name.as_str(), classes[1].local, classes[1].refused), ("web-in", Count { conns: 4, embryonic: 3 }, [0, 1, 0, 1]));
    assert_eq!(l.client(1, IpAddr::V4(a)), Count { conns: 2, embryonic: 1 });
    let report = l.report();
    assert_eq!(report.classes.len(), 2);
    assert!(report.clients.iter().any(|&(_, addr, n)| addr == IpAddr::V4(a) && n.embryonic == 1));
}

#[test]
fn the_rest_of_the_cluster_counts_against_the_limit() {
    let mut p = node();
    p.set_limits(&spec());
    p.set_remote_limits(&alone());
    let a = Ipv4Addr::new(192, 0, 2, 7);
    // Other members hold three connections: one place left globally.
    p.set_remote_limits(&Remote { classes: vec![Count { conns: 3, embryonic: 0 }], clients: vec![], places: 1 });
    assert_eq!(syn_out(&mut p, 2000), Verdict::Forward(OUT_PORT));
    assert_eq!(syn_out(&mut p, 2001), Verdict::Drop(DropReason::ConnLimit));
    // Client a holds two half-open connections elsewhere in rule web-in.
    p.set_remote_limits(&Remote { classes: vec![], clients: vec![(1, IpAddr::V4(a), Count { conns: 2, embryonic: 2 })], places: 1 });
    assert_eq!(syn_in(&mut p, a, 1000), Verdict::Drop(DropReason::ClientEmbryonicLimit));
    assert_eq!(syn_in(&mut p, Ipv4Addr::new(192, 0, 2, 9), 1000), Verdict::Forward(IN_PORT));
}

#[test]
fn a_policy_change_carries_the_counts_and_can_lift_the_limits() {
    let mut p = node();
    p.set_limits(&spec());
    p.set_remote_limits(&alone());
    let a = Ipv4Addr::new(192, 0, 2, 7);
    assert_eq!(syn_in(&mut p, a, 1000), Verdict::Forward(IN_PORT));
    assert_eq!(syn_in(&mut p, a, 1001), Verdict::Forward(IN_PORT));
    let cfg = config();
    let build = || Policy::build(&cfg.interfaces, &cfg.rules, cfg.timeouts).unwrap();
    // The same rules, web-in's per-client limit raised to 3: its two
    // half-open connections still count; the refusals carry over.
    let mut raised = spec();
    raised.rules[0].1.per_client_embryonic_max = Some(3);
    assert_eq!(syn_in(&mut p, a, 1002), Verdict::Drop(DropReason::ClientEmbryonicLimit));
    assert!(p.set_policy(Box::new(build().with_limits(&raised, 64))).is_ok());
    p.set_remote_limits(&alone());
    let l = p.limits().unwrap();
    assert_eq!(l.classes()[1].local, Count { conns: 2, embryonic: 2 });
    assert_eq!(l.classes()[1].refused[3], 1);
    assert_eq!(syn_in(&mut p, a, 1002), Verdict::Forward(IN_PORT));
    assert_eq!(syn_in(&mut p, a, 1003), Verdict::Drop(DropReason::EmbryonicLimit));
    // No limits: nothing refused, nothing counted.
    assert!(p.set_policy(Box::new(build().with_limits(&LimitSpec::default(), 64))).is_ok());
    assert!(p.limits().is_none());
    assert_eq!(syn_in(&mut p, a, 1003), Verdict::Forward(IN_PORT));
}

/// With other places admitting against the same limit, a worker takes at
/// most its share of the room left before its last two views: here three
/// places and a limit of 30 with nothing held: 10 now, then nothing while
/// those 10 are within the last two views, then a third of what is left.
#[test]
fn each_place_takes_its_share_of_the_room_per_view() {
    let mut p = node();
    p.set_limits(&LimitSpec { global: LimitSet { max_conns: Some(30), ..LimitSet::default() }, rules: vec![] });
    p.set_remote_limits(&Remote { classes: vec![Count::default()], clients: vec![], places: 3 });
    let admitted = |p: &mut Pipeline, from: u16| (from..from + 30).filter(|&s| syn_out(p, s) == Verdict::Forward(OUT_PORT)).count();
    assert_eq!(admitted(&mut p, 1000), 10);
    assert_eq!(p.counters().drop_count(DropReason::ConnLimit), 20);
    // The next view: the others hold 10. Its own 10 of the last two
    // intervals already exceed a third of the room before them (20).
    let others = Remote { classes: vec![Count { conns: 10, embryonic: 0 }], clients: vec![], places: 3 };
    p.set_remote_limits(&others);
    assert_eq!(admitted(&mut p, 2000), 0);
    // One view later: a third of the 10 left, rounded up.
    p.set_remote_limits(&others);
    assert_eq!(admitted(&mut p, 2100), 4, "ceil(10 / 3)");
    // Alone (one place): all the room.
    p.set_remote_limits(&Remote { classes: vec![Count { conns: 10, embryonic: 0 }], clients: vec![], places: 1 });
    assert_eq!(admitted(&mut p, 3000), 6);
}

/// Before its first view of the rest of the cluster (at start, after a
/// policy change) a worker does not know how many places share a limit:
/// it takes 1/16 of the room (`UNKNOWN_PLACES`).
#[test]
fn before_the_first_view_a_worker_takes_a_sixteenth() {
    let mut p = node();
    p.set_limits(&LimitSpec { global: LimitSet { max_conns: Some(64), ..LimitSet::default() }, rules: vec![] });
    let ok = (1000..1010).filter(|&s| syn_out(&mut p, s) == Verdict::Forward(OUT_PORT)).count();
    assert_eq!(ok, 4);
}
