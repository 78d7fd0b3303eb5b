//! IPv6 in the simulated cluster (issue 16, "Simulator: the cluster sweeps
//! run with a share of IPv6 connections, the invariants hold"). The other
//! sim tests run the default share (`sim::DEFAULT_IPV6_SHARE`, a quarter of
//! each kind of flow) and assert that their IPv6 flows ran and completed;
//! here every connection is IPv6 (`ipv6_share` 1), so nothing IPv4 can
//! carry a verdict:
//!
//! (a) mixed traffic (TCP with reused tuples and idle periods, UDP and DNS,
//!     ICMPv6 echo) over 3 and 5 nodes behind asymmetric ECMP, on a clean,
//!     a jittery and a lossy CCL, one and two workers per node: every
//!     invariant, every flow complete, the cluster's roles at work (cookie
//!     SYN-ACKs, forwarding to the owner, director queries), neighbour
//!     discovery done (every router solicitation answered);
//! (b) failover: the owner of live IPv6 downloads killed and restarted —
//!     its IPv6 flows taken over and completed; the nodes resolve their
//!     routers by their own solicitations (a membership-driven node starts
//!     with its ports down, so the routers' warm-up solicitations are
//!     lost, as their ARP requests are), and the routers answer;
//! (c) `ipv6_share` 0 is the IPv4-only simulator: no IPv6 flow, no
//!     neighbour discovery.
//!
//! Rerun one with `clusterfw-sim --ipv6-share 1 …` (the message says how).

use testbed::sim::faults::{FaultAt, FaultKind};
use testbed::sim::{self, cluster, net::CclLink, report::Report, SimConfig};

const MS: u64 = 1_000_000;

fn check_all_ipv6(r: &Report, what: &str) {
    check_ipv6_flows(r, what);
    // Each router solicited each node once; every node answered.
    let nodes = r.nodes as u64;
    assert_eq!(r.nd.router_solicitations, 2 * nodes, "{what}: {:?}", r.nd);
    assert_eq!(r.nd.node_advertisements, 2 * nodes, "{what}: {:?}", r.nd);
}

fn check_ipv6_flows(r: &Report, what: &str) {
    assert!(r.ok(), "{what}: invariants failed ({:?})\n{}", r.failed_invariants(), r.summary());
    assert_eq!(r.ipv4.flows(), 0, "{what}: every flow IPv6");
    assert!(r.ipv6.tcp_flows > 0 && r.ipv6.udp_flows > 0, "{what}\n{}", r.summary());
    assert!(r.ipv6.all_completed(), "{what}\n{}", r.summary());
    assert_eq!((r.ipv6.tcp_flows, r.ipv6.udp_flows), (r.tcp_flows, r.udp_flows), "{what}");
    assert!(r.ipv6.host_packets > 0 && r.ipv6.host_packets == r.host_packets, "{what}");
    assert_eq!(r.nd.unexpected, 0, "{what}: {:?}", r.nd);
    // The nodes forwarded only IPv6 to the hosts: every frame they sent
    // there is one of the IPv6 hosts' frames.
    assert_eq!(r.totals.host_tx, r.ipv6.host_packets, "{what}");
}

#[test]
fn ipv6_only_clusters_keep_every_invariant() {
    for (nodes, workers, link, flags) in [
        (3usize, 1u16, CclLink::default(), ""),
        (5, 1, CclLink::jittery(), "--jitter-us 30 --reorder 0.05"),
        (3, 1, CclLink::lossy(0.01), "--jitter-us 30 --reorder 0.05 --loss 0.01"),
        (3, 2, CclLink::jittery(), "--jitter-us 30 --reorder 0.05 --workers 2"),
    ] {
        for seed in [1, 2] {
            let mut cfg = SimConfig::new(seed, nodes).flows(600, 160).mixed().ccl(link.clone()).ipv6_share(1.0);
            cfg.workers = workers;
            let what = format!("clusterfw-sim --ipv6-share 1 --nodes {nodes} --flows 600 --udp-flows 160 --mixed --seed {seed} {flags}");
            let r = sim::run(cfg).unwrap();
            println!("{what}: {}", r.summary().lines().take(2).collect::<Vec<_>>().join(" |"));
            check_all_ipv6(&r, &what);
            assert!(r.ipv6.icmp_flows == 40, "{what}: ICMPv6 echo flows ran: {:?}", r.ipv6);
            assert!(r.split_flows > r.ipv6.flows() / 2, "{what}: most flows split over two nodes");
            assert!(r.cluster_total(cluster::names::FORWARDED_TO_OWNER) > 0, "{what}");
            assert!(r.cluster_total(cluster::names::SYNACK_COOKIE_DECODED) > 0, "{what}");
            assert!(r.cluster_total(cluster::names::DIRECTOR_QUERIES_SENT) > 0, "{what}");
            assert_eq!(r.cluster_total(cluster::names::OWNER_PACKETS), r.totals.host_tx, "{what}");
            if link.loss > 0.0 {
                assert!(r.ccl.lost > 0 && r.tcp_retransmissions > 0, "{what}: the loss was recovered");
            }
        }
    }
}

#[test]
fn ipv6_flows_are_taken_over_when_their_owner_dies() {
    // node0 (the control node) dies at 2 s with the downloads running and
    // comes back at 3.5 s (the fault sweep's golden case, IPv6 only).
    let faults = vec![FaultAt { at_ns: 2000 * MS, fault: FaultKind::Kill(0) }, FaultAt { at_ns: 3500 * MS, fault: FaultKind::Restart(0) }];
    let cfg = SimConfig::fault_scenario(7, 3, faults, 7500 * MS).ipv6_share(1.0);
    let r = sim::run(cfg).unwrap();
    println!("{}", r.summary());
    check_ipv6_flows(&r, "kill and restart node0");
    let f = r.faults.as_ref().unwrap();
    assert!(f.takeovers_ipv6 > 0 && f.takeovers_ipv6 == f.takeovers, "{}", r.summary());
    assert!(f.ipv6_flows_taken_over > 0, "{}", r.summary());
    assert_eq!(f.ipv6_flows_taken_over_completed, f.ipv6_flows_taken_over, "{}", r.summary());
    // The warm-up solicitations found the ports down: the nodes solicited
    // their routers when they had IPv6 to forward, and were answered.
    assert_eq!(r.nd.node_advertisements, 0, "{:?}", r.nd);
    assert!(r.nd.node_solicitations > 0, "{:?}", r.nd);
    assert_eq!(r.nd.router_advertisements, r.nd.node_solicitations, "{:?}", r.nd);
}

#[test]
fn share_zero_is_the_ipv4_only_simulator() {
    let r = sim::run(SimConfig::new(3, 3).flows(200, 50).mixed().ipv6_share(0.0)).unwrap();
    assert!(r.ok(), "{}", r.summary());
    assert_eq!(r.ipv6.flows(), 0);
    assert!(r.ipv4.all_completed() && r.ipv4.flows() == r.tcp_flows + r.udp_flows);
    assert_eq!(r.nd, sim::NdStats::default(), "no neighbour discovery without IPv6 traffic");
}
