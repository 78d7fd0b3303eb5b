//! Membership in the simulator (SPEC P3, M1): every simulated node runs the
//! real `controlplane::membership` machine on the virtual clock, and its
//! heartbeats, sealed by the real codec, cross the simulated CCL to the
//! other nodes' machines. They are kept out of the data-plane run: the
//! trace hash of a scenario is the one it had before membership ran here.

use testbed::sim::membership::MembershipReport;
use testbed::sim::net::{CclCut, CclLink};
use testbed::sim::{self, SimConfig};

const MS: u64 = 1_000_000;

/// `nodes` nodes, no traffic, at least `ms` of virtual time.
fn idle(seed: u64, nodes: usize, ms: u64) -> SimConfig {
    let mut c = SimConfig::new(seed, nodes).flows(0, 0);
    c.min_run_ns = ms * MS;
    c
}

fn membership(cfg: SimConfig) -> (MembershipReport, u64) {
    let r = sim::run(cfg).unwrap();
    assert!(r.ok(), "{}", r.summary());
    (r.membership.clone().expect("a cluster run reports membership"), r.virtual_ms)
}

#[test]
fn after_a_second_every_node_has_heard_every_other() {
    let (m, virtual_ms) = membership(idle(1, 4, 1000));
    // The run stops at the first data-plane event from 1 s on (a timer,
    // at most 10 ms later).
    assert!((1000..=1010).contains(&virtual_ms), "{virtual_ms}");
    assert_eq!(m.per_node.len(), 4);
    for (n, node) in m.per_node.iter().enumerate() {
        // One heartbeat at the start and one per 100 ms: 10 in [0, 1 s).
        assert!((10..=11).contains(&node.heartbeats_sent), "node{n}: {node:?}");
        assert_eq!(node.send_failures, 0);
        assert_eq!(node.epoch, 1);
        assert_eq!(node.peers.len(), 4);
        let c = node.counters;
        assert_eq!((c.unknown_sender, c.from_self, c.stale_incarnation, c.other_messages), (0, 0, 0, 0));
        assert!(node.ccl_drops.is_empty(), "node{n}: {:?}", node.ccl_drops);
        for p in &node.peers {
            if usize::from(p.id) == n {
                assert!(p.this_node && p.last_heard_ms.is_none() && p.heartbeats == 0, "{p:?}");
                continue;
            }
            let sent = m.per_node[usize::from(p.id)].heartbeats_sent;
            // A clean CCL: every heartbeat arrives 20 µs after it left.
            assert_eq!(p.heartbeats, sent, "node{n} about node{}: {p:?}", p.id);
            assert!(p.last_heard_ms.is_some_and(|a| a <= 100), "node{n} about node{}: {p:?}", p.id);
            assert_eq!(p.incarnation, 1000 + u32::from(p.id));
        }
    }
    let l = &m.link;
    assert_eq!(l.frames, m.per_node.iter().map(|n| n.heartbeats_sent).sum::<u64>());
    assert_eq!((l.delivered, l.lost, l.cut), (3 * l.frames, 0, 0));
}

#[test]
fn a_lossy_ccl_loses_heartbeats_from_their_own_stream() {
    let mut cfg = idle(3, 3, 2000);
    cfg.ccl = CclLink::lossy(0.1);
    let (m, _) = membership(cfg.clone());
    let l = &m.link;
    assert!(l.lost > 0 && l.delivered > 0 && l.reordered > 0, "{l:?}");
    assert_eq!(l.lost + l.delivered, 2 * l.frames);
    let heard: u64 = m.per_node.iter().flat_map(|n| &n.peers).map(|p| p.heartbeats).sum();
    assert_eq!(heard, l.delivered, "every delivered copy opened and counted");
    // Same seed, same heartbeats, lost and all.
    assert_eq!(membership(cfg).0, m);
}

#[test]
fn a_cut_nodes_last_heard_age_grows() {
    let cut = |ms| {
        let mut c = idle(2, 3, ms);
        c.ccl_cut = Some(CclCut { node: 2, from_ns: 1000 * MS, until_ns: u64::MAX });
        membership(c)
    };
    let (early, t1) = cut(1500);
    let (late, t2) = cut(2500);
    for m in [&early, &late] {
        let a = m.view(0, 2).unwrap();
        // Heard until the cut: heartbeats at 0, 100, ..., 900 ms.
        assert_eq!(a.heartbeats, 10, "{a:?}");
        // And the cut node hears no one either.
        assert_eq!(m.view(2, 0).unwrap().heartbeats, 10);
        assert_eq!(m.view(2, 1).unwrap().heartbeats, 10);
        // The two others keep hearing each other.
        let b = m.view(0, 1).unwrap();
        assert!(b.last_heard_ms.is_some_and(|a| a <= 100) && b.heartbeats >= 15, "{b:?}");
        assert!(m.link.cut > 0);
    }
    let age = |m: &MembershipReport, n, p| m.view(n, p).unwrap().last_heard_ms.unwrap();
    // Last heard at 900 ms (and a few µs): the age is the time since.
    assert!(age(&early, 0, 2).abs_diff(t1 - 900) <= 2, "{} at {t1}", age(&early, 0, 2));
    assert!(age(&late, 0, 2).abs_diff(t2 - 900) <= 2, "{} at {t2}", age(&late, 0, 2));
    assert!(age(&late, 0, 2) >= age(&early, 0, 2) + 990, "the age grows with the cut");
    assert!(age(&late, 2, 1) >= 1500);
}

#[test]
fn a_healed_ccl_is_heard_again() {
    let mut c = idle(4, 3, 2000);
    c.ccl_cut = Some(CclCut { node: 1, from_ns: 500 * MS, until_ns: 1200 * MS });
    let (m, _) = membership(c);
    for (n, p) in [(0, 1), (1, 0), (2, 1)] {
        let v = m.view(n, p).unwrap();
        assert!(v.last_heard_ms.is_some_and(|a| a <= 100), "node{n} about node{p}: {v:?}");
        // 20 heartbeats in 2 s, 7 of them (500..1100 ms) lost to the cut.
        assert!((13..=14).contains(&v.heartbeats), "node{n} about node{p}: {v:?}");
    }
    assert_eq!(m.link.cut, 2 * 7 + 2 * 7, "node1's 7 to two peers, two peers' 7 to node1");
}

/// The trace hash of a lossy 3-node scenario (sim_determinism's), pinned
/// before membership ran in the simulator (commit 9682ff6): heartbeats
/// draw from their own stream, travel their own queue and reach no
/// pipeline. A change here means something of them leaked into the
/// data-plane run — or the data plane itself changed behaviour.
#[test]
fn heartbeats_stay_out_of_the_trace() {
    let cfg = SimConfig::new(11, 3).flows(300, 100).ccl(CclLink::lossy(0.01));
    let r = sim::run(cfg).unwrap();
    let m = r.membership.as_ref().unwrap();
    assert!(m.link.delivered > 0 && m.link.lost > 0, "{:?}", m.link);
    assert_eq!(r.trace_hash, "449ef11ae6687cca", "{}", r.summary());
}
