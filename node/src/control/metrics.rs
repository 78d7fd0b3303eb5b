//! The node's metrics in Prometheus' text format (`show metrics`, the
//! HTTP endpoint's body).

use super::{Control, NicStats};
use crate::shared::{Query, Reply};
use controlplane::membership::State;
use controlplane::metrics::Exposition;
use std::sync::atomic::Ordering;

impl Control {
    /// The node's metrics in Prometheus' text format (`/metrics`, issue
    /// 14): every counter of `show stats` (the workers' added up), the
    /// driver's per-worker queues, the NICs' own counters, and with a
    /// cluster the membership state and every counter of `show cluster`.
    /// Names: `controlplane::metrics`.
    pub(super) fn metrics(&self) -> Result<String, String> {
        let mut e = Exposition::new();
        for (w, r) in self.ask_all(|| Query::Counters)?.into_iter().enumerate() {
            let Reply::Counters(c, frag) = r else { return Err("unexpected reply".into()) };
            e.stats("", &[], &*c);
            e.stats("fragments", &[], &*frag);
            let ws = &self.shared.workers[w];
            let wl = w.to_string();
            e.stats("worker", &[("worker", &wl)], &ws.driver_counters());
            let bounds: Vec<f64> = crate::shared::BURST_BOUNDS_NS.iter().map(|&b| b as f64 / 1e9).collect();
            let counts: Vec<u64> = ws.burst_counts.iter().map(|a| a.load(Ordering::Relaxed)).collect();
            e.histogram(
                "worker_busy_loop_seconds",
                "durations of a worker's loops that found work: every queue polled, the bursts processed and sent",
                &[("worker", &wl)],
                &bounds,
                &counts,
                ws.burst_ns.load(Ordering::Relaxed) as f64 / 1e9,
            );
        }
        let rings = dpdk_sys::afpacket::ring_totals();
        for p in &self.ports {
            let Ok(s) = p.port.stats() else { continue };
            e.stats("nic", &[("port", p.interfaces.as_str()), ("device", p.device.as_str())], &NicStats(s, p.ring_drops(&rings)));
        }
        e.gauge("uptime_seconds", "seconds since the node started", &[], self.started.elapsed().as_secs());
        if let Some(x) = &self.export {
            e.stats("export", &[], &x.stats(&self.shared));
        }
        if let Some(ccl) = &self.ccl {
            let now = self.clock.now();
            let m = &ccl.membership;
            let st = m.status();
            for s in State::ALL {
                e.gauge("cluster_state", "1 for this node's membership state", &[("state", s.as_str())], u64::from(st.state == s));
            }
            e.gauge("cluster_member", "1 while this node is in the member set", &[], u64::from(st.members.contains(m.me())));
            e.gauge("cluster_ready", "1 once this node's bulk sync is done", &[], u64::from(st.ready));
            e.gauge("cluster_epoch", "the epoch of the member set in force", &[], st.members.epoch().0);
            e.gauge("cluster_members", "nodes in the member set", &[], st.members.iter().count() as u64);
            e.gauge("cluster_node_id", "this node's id", &[], u64::from(m.me().0));
            if let Some(c) = st.control {
                e.gauge("cluster_control_node_id", "the control node's id", &[], u64::from(c.0));
            }
            e.gauge("cluster_rejoin_failures", "consecutive failed rejoin attempts", &[], u64::from(st.failures));
            if let Some(lag) = m.replica_lag() {
                e.gauge("cluster_replica_versions_behind", "replicated-state versions this node lacks against its control node's", &[], lag);
                e.gauge_f64("cluster_replica_lag_seconds", "how long this node's replicated state has been behind its control node's (0: caught up)", &[], self.behind_secs());
            }
            for v in m.snapshot(now).iter().filter(|v| !v.this_node) {
                e.counter("cluster_peer_heartbeats", "heartbeats received from a peer", &[("peer", &v.name)], v.heartbeats);
                e.gauge("cluster_peer_member", "1 while the peer is in the member set", &[("peer", &v.name)], u64::from(v.member));
            }
            e.stats("cluster_membership", &[], m.counters());
            let mut ccl_counters = ccl.counters();
            for s in self.cluster_snapshots()? {
                ccl_counters.add(&s.ccl);
                e.stats("cluster", &[], &s.counters);
                for d in dataplane::DropReason::ALL {
                    let n = s.batch_drops.get(d.index()).copied().unwrap_or(0);
                    e.counter("cluster_batch_drops", "frames of received flow-record batches dropped, by reason", &[("reason", d.as_str())], n);
                    let n = s.release_drops.get(d.index()).copied().unwrap_or(0);
                    e.counter("cluster_release_drops", "parked frames dropped when their owner reply released them, by reason", &[("reason", d.as_str())], n);
                }
            }
            e.stats("ccl", &[], &ccl_counters);
            let sh = &self.shared.ccl;
            e.counter("ccl_to_worker_frames", "CCL frames the control lcore passed to a worker", &[], sh.to_worker_frames.load(Ordering::Relaxed));
            e.counter("ccl_to_worker_drops", "CCL frames dropped because a worker's ring was full", &[], sh.to_worker_drops.load(Ordering::Relaxed));
        }
        if e.conflicts > 0 {
            log::warn!("metrics: {} value(s) under a name already used with another type", e.conflicts);
        }
        Ok(e.render())
    }
}
