//! Join time with 100 k live connections (issue 10, item 4), measured in
//! the simulator: 3 nodes; node2 is killed before any flow starts, 100 000
//! TCP connections are established through node0 and node1 and stay idle
//! (the servers think for 60 s), then node2 restarts and joins. Its
//! readiness gate waits for the replicated state and for every other
//! member's `SyncDone` — the end of each owner's re-registration scan,
//! which sends node2 the records of the flows it now directs (SPEC M7).
//! The figures are virtual time; the assertions are that the join
//! completes through the gate (not by `sync-timeout`) and that every
//! connection still has exactly one owner afterwards.
//!
//! `cargo test --release -p testbed --test sim_join_100k -- --nocapture`

use controlplane::membership::State;
use testbed::sim::faults::{FaultAt, FaultKind};
use testbed::sim::{self, SimConfig};

const MS: u64 = 1_000_000;

#[test]
fn join_with_100k_live_connections() {
    let flows = std::env::var("CFW_SIM_JOIN_FLOWS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000usize);
    let restart = 6_000 * MS;
    let faults = vec![FaultAt { at_ns: 800 * MS, fault: FaultKind::Kill(2) }, FaultAt { at_ns: restart, fault: FaultKind::Restart(2) }];
    let mut cfg = SimConfig::new(3, 3).flows(flows, 0);
    cfg.faults = faults;
    cfg.flow_start_ns = 1_000 * MS;
    cfg.start_window_ns = 3_000 * MS;
    cfg.tcp_request = (100, 200);
    cfg.tcp_response = (100, 200);
    // Established and idle: every server thinks for 60 s before it answers.
    cfg.idle_share = 1.0;
    cfg.idle_ns = (60_000 * MS, 60_000 * MS);
    cfg.min_run_ns = 9_000 * MS;
    cfg.time_limit_ns = 9_000 * MS;
    let t0 = std::time::Instant::now();
    let r = sim::run(cfg).unwrap();
    let m = r.membership.as_ref().unwrap();
    let n2 = &m.per_node[2];
    let admitted = n2.reached(State::Syncing, restart).expect("node2 admitted");
    let ready = n2.reached(State::Data, restart).expect("node2 ready");
    let how = n2.history.iter().rev().find(|h| h.contains("syncing -> data")).cloned().unwrap_or_default();
    let f = r.faults.as_ref().unwrap();
    let records: u64 = r.cluster_total("records");
    println!(
        "join with {flows} live connections: restart -> admitted {:.1} ms, admitted -> ready {:.1} ms ({how}); {:.1} s wall",
        (admitted - restart) as f64 / 1e6,
        (ready - admitted) as f64 / 1e6,
        t0.elapsed().as_secs_f64()
    );
    println!(
        "open connections at the end (one owner, none, several): {:?}, of them IPv6 {}; records held {records}",
        f.open_owned_at_end, r.ipv6.tcp_flows
    );
    for n in &r.per_node {
        println!("node{}: flows created {} cluster {:?}", n.node, n.flows_created, n.cluster.as_ref().map(|c| (c.get("registers_sent"), c.get("sync_scans"))));
    }
    assert!(how.contains("synced in"), "through the readiness gate, not the sync timeout: {how}");
    // A quarter of the connections are IPv6 (`DEFAULT_IPV6_SHARE`).
    assert_eq!(r.ipv6.tcp_flows, flows / 4, "{:?}", r.ipv6);
    let (one, none, many) = f.open_owned_at_end;
    assert_eq!((one, none, many), (flows as u64, 0, 0), "{}", r.summary());
    let established = r.invariant("one-owner-while-running").unwrap();
    assert_eq!(established.ok, Some(true), "{}", r.summary());
    assert!(r.invariant("single-transmitter").unwrap().ok == Some(true));
}
