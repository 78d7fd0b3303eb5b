//! Randomised sweep: one scenario per seed (`SimConfig::randomized`: 2-8
//! or 16 nodes, clean / jittery / lossy CCL, burst size, start window,
//! sequence randomisation), 300 TCP and 100 UDP flows each; every invariant
//! must hold for every seed. A quarter of each kind of flow is IPv6
//! (`sim::DEFAULT_IPV6_SHARE`: 75 TCP and their reused tuples, 25 UDP, 7
//! ICMPv6 echo per seed), checked per seed; `CFW_SIM_IPV6_SHARE` (0-1)
//! runs another share (1: IPv6 only).
//!
//! Seeds: `CFW_SIM_SEEDS` (`1,2,3`, `100..150` or `1000+60`), default
//! 1000..1100. Each seed is printed; a failing seed says how to rerun it
//! alone.

use testbed::sim::{self, SimConfig};

#[test]
fn randomized_sweep() {
    let seeds = sim::seeds_from_env(1000, 100);
    let mut failed = Vec::new();
    let mut done = [0usize; 2];
    let share = std::env::var("CFW_SIM_IPV6_SHARE").ok().and_then(|v| v.parse().ok()).unwrap_or(sim::DEFAULT_IPV6_SHARE);
    // Of 300 TCP, 100 UDP and 30 echo flows: by default 75, 25 and 7.
    let of = |n: usize| (0..n).filter(|&k| sim::ipv6_flow(k, share)).count();
    for &seed in &seeds {
        let cfg = SimConfig::randomized(seed).ipv6_share(share);
        let r = sim::run(cfg).unwrap();
        let c = &r.config;
        // The IPv6 share ran: exactly that share of each kind (TCP: and
        // the IPv6 flows' reused tuples).
        let dual = r.ipv6.tcp_flows >= of(300) && r.ipv6.udp_flows == of(100) + of(30) && r.ipv6.icmp_flows == of(30);
        done[0] += r.ipv4.completed();
        done[1] += r.ipv6.completed();
        println!(
            "seed {seed}: {} nodes, loss {:.3}, jitter {} µs, reorder {:.2}, seq-randomization {}, burst {}: {} ({} events, {} ms virtual; completed IPv4 {}/{}, IPv6 {}/{})",
            r.nodes,
            c.ccl.loss,
            c.ccl.jitter_ns / 1000,
            c.ccl.reorder,
            c.seq_randomization,
            c.burst,
            if !dual {
                format!("FAILED: IPv6 flows {:?}", r.ipv6)
            } else if r.ok() {
                "ok".to_string()
            } else {
                format!("FAILED {:?}", r.failed_invariants())
            },
            r.events,
            r.virtual_ms,
            r.ipv4.completed(),
            r.ipv4.flows(),
            r.ipv6.completed(),
            r.ipv6.flows()
        );
        if !r.ok() || !dual {
            println!("{}", r.summary());
            println!(
                "rerun alone: CFW_SIM_SEEDS={seed} cargo test --release -p testbed --test sim_sweep -- --nocapture\n\
                 or: cargo run --release -p testbed --bin clusterfw-sim -- --seed {seed} --randomized"
            );
            failed.push(seed);
        }
    }
    println!("sweep: {} seeds, flows completed: IPv4 {}, IPv6 {}", seeds.len(), done[0], done[1]);
    assert!(failed.is_empty(), "seeds {failed:?} failed; rerun one with CFW_SIM_SEEDS=<seed> cargo test --release -p testbed --test sim_sweep -- --nocapture");
}
