//! Cluster-wide connection limits by estimate in the simulator (issue 15
//! item 3, SPEC L1; `testbed::sim::limits`, docs/flood.md): the real
//! conntrack limits and the real estimate, reports as real wire bytes over
//! a CCL with latency.
//!
//! (a) steady load, balanced over 3 nodes and skewed 6:3:1: each node's
//!     estimate of the cluster-wide count against the truth;
//! (b) a burst of 3000 connections in 50 ms at one node: the time until
//!     every node's estimate is back within 2 %;
//! (c) enforcement: one client's half-open connections through all nodes
//!     under a per-client embryonic limit of 100, and a cluster-wide
//!     embryonic limit of 1000 under a spoofed-looking SYN flood: the
//!     overshoot;
//! (d) 10 % loss on the CCL: the estimate still holds.
//!
//! Virtual time: the figures are the same on every machine for a seed.

use dataplane::conntrack::{LimitSet, LimitSpec};
use testbed::sim::limits::{run, LimitSimConfig, LimitSimReport};

fn show(what: &str, r: &LimitSimReport) {
    println!(
        "{what}: {} samples, true conns mean {:.0} peak {}; error mean {:.2} % p99 {:.2} % max {:.2} %; embryonic error mean {:.1} max {}; \
         converge {:?} ms; peaks embryonic {} client {:?}; admitted {} refused {:?}; reports {} lost {}",
        r.samples, r.mean_true, r.peak_true, r.mean_err_pct, r.p99_err_pct, r.max_err_pct, r.mean_emb_err, r.max_emb_err,
        r.converge_ms, r.peak_true_embryonic, r.peak_client, r.admitted, r.refused, r.reports_sent, r.reports_lost
    );
}

#[test]
fn the_estimate_tracks_the_cluster_under_balanced_and_skewed_load() {
    for (what, weights) in [("balanced 1:1:1", vec![1, 1, 1]), ("skewed 6:3:1", vec![6, 3, 1]), ("balanced 16 nodes", vec![1; 16])] {
        let r = run(&LimitSimConfig::steady(7, weights));
        show(what, &r);
        assert!(r.samples > 1000 && r.mean_true > 5000.0, "{what}: the load did not build up");
        // Two report stages of 100 ms against 2 s lifetimes: a few percent.
        assert!(r.mean_err_pct < 3.0 && r.max_err_pct < 10.0, "{what}: mean {:.2} % max {:.2} %", r.mean_err_pct, r.max_err_pct);
        assert!(r.refused.is_empty(), "{what}: {:?}", r.refused);
    }
}

#[test]
fn after_a_burst_every_estimate_converges_within_a_few_intervals() {
    for node in [Some(0), None] {
        let mut cfg = LimitSimConfig::steady(11, vec![1, 1, 1]);
        cfg.burst = Some((5000, 3000, 50, node));
        let r = run(&cfg);
        show(&format!("burst of 3000 in 50 ms at {node:?}"), &r);
        let c = r.converge_ms.expect("converged");
        // A worker report, a broadcast and the CCL: two 100 ms intervals.
        assert!(c <= 250, "converged after {c} ms");
    }
}

#[test]
fn limits_hold_near_their_value_across_the_cluster() {
    // One client's half-open connections, spread over 3 nodes.
    let mut cfg = LimitSimConfig::steady(3, vec![1, 1, 1]);
    cfg.limits = LimitSpec { global: LimitSet { per_client_embryonic_max: Some(100), ..LimitSet::default() }, rules: vec![] };
    (cfg.rate, cfg.half_open, cfg.heavy_share, cfg.duration_ms, cfg.syn_timeout_ms, cfg.sample_from_ms) = (3000, 1.0, 1.0, 5000, 2000, 1000);
    let r = run(&cfg);
    show("one client's SYNs under per-client-embryonic-max 100", &r);
    let (_, emb) = r.peak_client;
    assert!(emb >= 100, "the client never reached its limit ({emb})");
    println!("  overshoot: {} half-open connections over the limit of 100 ({} %)", emb - 100, emb - 100);
    assert!(emb <= 125, "held at {emb}");
    assert!(r.refused.get("per-client-embryonic-limit").is_some_and(|&n| n > 1000));

    // A flood of half-open connections from many clients under a
    // cluster-wide embryonic limit of 1000, over 3 and 8 nodes.
    for weights in [vec![1, 1, 1], vec![1; 8]] {
        let n = weights.len();
        let mut cfg = LimitSimConfig::steady(5, weights);
        cfg.limits = LimitSpec { global: LimitSet { max_embryonic: Some(1000), ..LimitSet::default() }, rules: vec![] };
        (cfg.rate, cfg.half_open, cfg.duration_ms, cfg.sample_from_ms) = (20_000, 1.0, 4000, 1000);
        let r = run(&cfg);
        show(&format!("SYN flood 20000/s over {n} nodes under max-embryonic 1000"), &r);
        let over = r.peak_true_embryonic.saturating_sub(1000);
        println!("  overshoot: {over} ({:.1} %)", f64::from(over) / 10.0);
        assert!(r.peak_true_embryonic >= 1000 && over <= 150, "peak {}", r.peak_true_embryonic);
    }
}

#[test]
fn a_lossy_ccl_costs_the_estimate_little() {
    let mut cfg = LimitSimConfig::steady(13, vec![1, 1, 1]);
    cfg.loss = 0.1;
    let r = run(&cfg);
    show("10 % CCL loss", &r);
    assert!(r.reports_lost > 0);
    assert!(r.mean_err_pct < 5.0, "mean {:.2} %", r.mean_err_pct);
}
