//! The simulator's own checks, without a cluster.
//!
//! - Symmetric routers (both directions of a flow reach the same node) make
//!   independent single-node firewalls correct: every invariant holds. This
//!   validates the host models, routers and observers.
//! - Asymmetric routers (SPEC §1: the two directions hash differently) make
//!   them fail: replies reach a node without the flow (`tcp-no-flow`,
//!   `acl-denied`) and flows never complete. The invariants must say so —
//!   proof that they can fail.

use testbed::sim::{self, net::CclLink, SimConfig};

#[test]
fn symmetric_single_node_firewalls_pass() {
    for (seed, nodes) in [(1, 3), (2, 5)] {
        let cfg = SimConfig::new(seed, nodes)
            .flows(2000, 500)
            .cluster(false)
            .symmetric(true);
        let r = sim::run(cfg).unwrap();
        println!("{}", r.summary());
        assert!(r.ok(), "seed {seed}: {}", r.summary());
        assert_eq!((r.tcp_completed, r.udp_completed), (2000, 500));
        // A quarter of them over IPv6 (a single-node firewall speaks it too).
        assert_eq!((r.ipv6.tcp_completed, r.ipv6.udp_completed), (500, 125), "{:?}", r.ipv6);
        assert_eq!(r.split_flows, 0);
        assert_eq!(r.totals.ccl_tx, 0);
        // Every node carried traffic.
        assert!(
            r.per_node.iter().all(|n| n.host_tx > 1000),
            "{}",
            r.summary()
        );
    }
}

#[test]
fn asymmetric_single_node_firewalls_fail() {
    let cfg = SimConfig::new(3, 3)
        .flows(500, 200)
        .cluster(false)
        .ccl(CclLink::default());
    let r = sim::run(cfg).unwrap();
    println!("{}", r.summary());
    assert!(
        !r.ok(),
        "independent nodes behind asymmetric ECMP must fail:\n{}",
        r.summary()
    );
    assert_eq!(r.invariant("flows-complete").unwrap().ok, Some(false));
    assert!(
        r.totals.drops.get("tcp-no-flow").copied().unwrap_or(0) > 0,
        "{}",
        r.summary()
    );
    assert!(
        r.totals.drops.get("acl-denied").copied().unwrap_or(0) > 0,
        "{}",
        r.summary()
    );
    // About a third of the flows enter one node both ways and do complete.
    assert!(
        r.split_flows > 350 && r.tcp_completed > 50 && r.tcp_completed < 400,
        "{}",
        r.summary()
    );
    assert!(!r.failures.is_empty());
}
