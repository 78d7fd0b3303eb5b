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
    // The IPv6 flows are part of what repeats.
    assert!(a.ipv6.tcp_flows == 75 && a.ipv6.udp_flows == 25 && a.ipv6.completed() > 0, "{:?}", a.ipv6);
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

#[test]
fn same_seed_same_run_across_processes() {
    // Per-process hash seeds (hash maps in the dataplane and here) must not
    // leak into the run: two processes, one trace.
    let run = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_clusterfw-sim"))
            .args([
                "--nodes", "5", "--flows", "300", "--mixed", "--seed", "9", "--loss", "0.02",
            ])
            .args(["--jitter-us", "40", "--reorder", "0.1", "--json"])
            .output()
            .expect("clusterfw-sim runs");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON report");
        (
            v["trace_hash"].as_str().unwrap_or_default().to_string(),
            v["events"].as_u64(),
        )
    };
    let (a, b) = (run(), run());
    assert!(!a.0.is_empty());
    assert_eq!(a, b);
}
