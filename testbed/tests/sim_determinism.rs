//! Same seed, same run — bit for bit (STYLE 11): the event trace hash and
//! every counter of two runs with one seed are equal; another seed gives
//! another trace.

use testbed::sim::{self, cluster, net::CclLink, SimConfig};

fn scenario(seed: u64) -> SimConfig {
    // Loss and reordering on the CCL, so the seeded impairments and the
    // hosts' retransmissions are part of what must repeat.
    SimConfig::new(seed, 3)
        .flows(300, 100)
        .ccl(CclLink::lossy(0.01))
        .cluster(cluster::AVAILABLE)
        .symmetric(!cluster::AVAILABLE)
}

#[test]
fn same_seed_same_run() {
    let a = sim::run(scenario(11)).unwrap();
    let b = sim::run(scenario(11)).unwrap();
    assert!(a.events > 10_000, "{}", a.summary());
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.fingerprint(), b.fingerprint());
}

#[test]
fn other_seed_other_run() {
    let a = sim::run(scenario(11)).unwrap();
    let b = sim::run(scenario(12)).unwrap();
    assert_ne!(a.trace_hash, b.trace_hash);
}

#[test]
fn failing_runs_repeat_too() {
    // Independent single-node firewalls behind asymmetric routers: flows
    // fail, hosts retransmit until they give up — still deterministic.
    let cfg = SimConfig::new(5, 3).flows(100, 30).cluster(false);
    let a = sim::run(cfg.clone()).unwrap();
    let b = sim::run(cfg).unwrap();
    assert!(!a.ok());
    assert_eq!(a.fingerprint(), b.fingerprint());
}
