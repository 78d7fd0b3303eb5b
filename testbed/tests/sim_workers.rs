//! Cluster nodes with several workers in the simulator (issue 12, "Failover
//! and membership hold with N workers"; docs/workers.md): every node runs
//! N pipelines, frames steered to them as the node's driver does (data
//! frames by the symmetric flow hash, CCL datagrams by their channel, ARP
//! to every worker, fragments via the fragment worker's handoff).
//!
//! (a) mixed traffic over a jittery CCL, 3 nodes × 2 and 4 × 3 workers:
//!     every invariant holds, every worker of every node decides frames,
//!     no CCL datagram reaches the wrong worker, and no flow lives on a
//!     worker other than its own (the checkpoints' check);
//! (b) fragments spread over the nodes, new and existing connections;
//! (c) the fault sweep's first seeds with 2 workers per node give the same
//!     verdicts (failed invariants) as with one.

use testbed::sim::{self, net::CclLink, report::Report, SimConfig};

fn run(cfg: SimConfig, what: &str) -> Report {
    let r = sim::run(cfg).unwrap();
    println!("{what}: {}", r.summary().lines().take(2).collect::<Vec<_>>().join(" |"));
    r
}

fn check_workers(r: &Report, workers: usize, what: &str) {
    assert!(r.ok(), "{what}: invariants failed ({:?})\n{}", r.failed_invariants(), r.summary());
    // The IPv6 quarter of the flows ran and completed over the workers.
    assert!(r.ipv6.tcp_flows > 0 && r.ipv6.udp_flows > 0 && r.ipv6.all_completed(), "{what}: {:?}", r.ipv6);
    for n in &r.per_node {
        assert_eq!(n.worker_packets.len(), workers, "{what}: node{}", n.node);
        assert!(n.worker_packets.iter().all(|&p| p > 0), "{what}: node{} workers' packets {:?}", n.node, n.worker_packets);
        assert_eq!(n.drops.get("ccl-wrong-worker"), None, "{what}: node{}", n.node);
        println!("  node{}: packets per worker {:?}", n.node, n.worker_packets);
    }
}

#[test]
fn mixed_traffic_over_several_workers() {
    for (nodes, workers) in [(3usize, 2u16), (4, 3)] {
        let mut cfg = SimConfig::new(31, nodes).flows(400, 100).mixed().ccl(CclLink::jittery());
        cfg.workers = workers;
        let what = format!("{nodes} nodes x {workers} workers");
        let r = run(cfg, &what);
        check_workers(&r, usize::from(workers), &what);
        let i = r.invariant("one-owner-while-running").expect("checkpoints");
        assert!(i.ok == Some(true), "{what}: {}", i.detail);
    }
}

#[test]
fn fragments_over_several_workers() {
    for exchanges in [&[(4000u32, 8000u32), (8000, 4000)][..], &[(100, 200), (8000, 4000), (4000, 8000)][..]] {
        let mut cfg = SimConfig::new(5, 3).flows(100, 30).ccl(CclLink::jittery()).fragmented(60, exchanges).spread_fragments(true);
        cfg.workers = 2;
        let what = format!("fragments {exchanges:?}");
        let r = run(cfg, &what);
        check_workers(&r, 2, &what);
        for name in ["fragments-valid", "fragments-from-owner", "fragment-owner-owns-new-flow"] {
            let i = r.invariant(name).unwrap_or_else(|| panic!("{what}: no {name}"));
            assert_eq!(i.ok, Some(true), "{what}: {name}: {}", i.detail);
        }
        // A quarter of the fragmented flows are IPv6 (Fragment headers).
        let f = &r.fragments;
        assert!(f.ipv6_datagrams_sent > 0 && f.ipv6_datagrams_reassembled == f.ipv6_datagrams_sent, "{what}: {f:?}");
    }
}

#[test]
fn fault_sweep_verdicts_do_not_depend_on_the_workers() {
    let seeds: Vec<u64> = match std::env::var("CFW_SIM_SEEDS") {
        Ok(s) => s.split(',').filter_map(|x| x.trim().parse().ok()).collect(),
        Err(_) => (1..=6).collect(),
    };
    for seed in seeds {
        let one = run(SimConfig::fault_sweep(seed, 3), &format!("seed {seed}, 1 worker"));
        let mut cfg = SimConfig::fault_sweep(seed, 3);
        cfg.workers = 2;
        let two = run(cfg, &format!("seed {seed}, 2 workers"));
        assert_eq!(
            two.failed_invariants(),
            one.failed_invariants(),
            "seed {seed}: 2 workers\n{}\n1 worker\n{}",
            two.summary(),
            one.summary()
        );
        for n in &two.per_node {
            assert_eq!(n.drops.get("ccl-wrong-worker"), None, "seed {seed}: node{}", n.node);
        }
    }
}
