//! Cluster-wide connection limits by estimate (SPEC L1; docs/flood.md,
//! "Connection limits"): the control lcore's half. Sans-IO: the workers'
//! reports, the members' reports and the time go in; this node's report
//! (for `Membership::broadcast_limits`) and each worker's view of the rest
//! of the cluster (`dataplane::conntrack::limits::Remote`) come out.
//!
//! ```text
//!  worker w ──report (every REPORT_INTERVAL)──▶ Estimator ──LimitReport (CCL broadcast)──▶ members
//!  worker w ◀──Remote = Σ other workers + Σ members' last reports──┘ ◀──their LimitReports──┘
//! ```
//!
//! The reference: "each node has an estimate of the cluster-wide counter
//! values based on broadcast messages … the configured connection limit
//! across the cluster might not be enforced exactly at the limit number …
//! each node may overestimate or underestimate". Here a worker sees its
//! own flows exactly and everyone else as of their last report, so the
//! estimate lags a burst by at most a report interval plus the CCL's
//! latency (two intervals end to end: the worker's report, then the
//! broadcast), and a burst spread over N places can overshoot a limit by
//! what N places admit in that time (`testbed::sim::limits` measures it).
//!
//! - A member's report is kept until a newer one (a higher sequence, or
//!   any after `PEER_STALE` without one: the sender restarted) replaces
//!   it; it is forgotten after `PEER_STALE` without a report or when the
//!   member leaves the set.
//! - Per-client counts travel only for the busiest clients (each worker
//!   reports those holding ≥ 1/32 of a per-client limit, a node at most
//!   `LIMIT_REPORT_CLIENTS`): a client spread thinly over many places is
//!   limited per place, not cluster-wide.
//!
//! Invariant (tests): a worker's remote count of a class is the sum of the
//! other workers' and the fresh members' last counts of it, never its own.

use dataplane::ccl::{ClassCount, ClientCount, LimitReport as Wire, LIMIT_REPORT_CLIENTS};
use dataplane::cluster::MemberSet;
use dataplane::conntrack::limits::{Count, LimitReport, Remote};
use dataplane::{Duration, NodeId, Timestamp};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

/// How often workers report and the node broadcasts its counts.
pub const REPORT_INTERVAL: Duration = Duration::from_millis(100);

/// Refusals are summed into one limit event per class at most this often.
pub const EVENT_INTERVAL: Duration = Duration::from_secs(1);

/// A member's report older than this is forgotten.
pub const PEER_STALE: Duration = Duration::from_millis(1000);

/// Clients a worker's view of the rest of the cluster holds at most.
pub const REMOTE_CLIENTS: usize = 1024;

#[derive(Clone, Debug, Default)]
struct PeerReport {
    seq: u32,
    at: Timestamp,
    classes: Vec<ClassCount>,
    clients: Vec<ClientCount>,
}

/// What the estimate did.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct EstimateCounters {
    pub reports_sent: u64,
    pub reports_taken: u64,
    /// Members' reports older than one already taken.
    pub reports_stale: u64,
    /// Members' reports forgotten (silent for `PEER_STALE`, or left).
    pub peers_forgotten: u64,
}

/// One class as `show limits` shows the estimate.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ClassEstimate {
    pub id: u32,
    /// This node: its workers' last reports.
    pub local: Count,
    /// Each member's last report (fresh ones).
    pub members: BTreeMap<u8, Count>,
    /// local + members.
    pub estimate: Count,
}

/// The estimate. See the module documentation.
#[derive(Clone, Debug)]
pub struct Estimator {
    seq: u32,
    next_report: Timestamp,
    workers: Vec<Option<LimitReport>>,
    peers: BTreeMap<NodeId, PeerReport>,
    /// Nodes in the member set (`members`; 1: alone).
    nodes: usize,
    /// Refusals: each worker's last totals per class id, and what they
    /// grew by since the last limit event, per class id.
    refused_seen: BTreeMap<(usize, u32), [u64; 4]>,
    refused_new: BTreeMap<u32, [u64; 4]>,
    next_event: Timestamp,
    pub counters: EstimateCounters,
}

fn add_count(c: Count, conns: u32, embryonic: u32) -> Count {
    c.add(Count { conns, embryonic })
}

impl Estimator {
    pub fn new(workers: usize) -> Estimator {
        Estimator {
            seq: 0,
            next_report: Timestamp::ZERO,
            workers: vec![None; workers],
            peers: BTreeMap::new(),
            nodes: 1,
            refused_seen: BTreeMap::new(),
            refused_new: BTreeMap::new(),
            next_event: Timestamp::ZERO,
            counters: EstimateCounters::default(),
        }
    }

    /// Worker `w`'s latest counts.
    pub fn on_worker(&mut self, w: usize, r: LimitReport) {
        for &(id, totals) in &r.refused {
            let seen = self.refused_seen.entry((w, id)).or_default();
            let new = self.refused_new.entry(id).or_default();
            for i in 0..4 {
                // Totals that went down started over (new limits): all new.
                let grew = if totals[i] >= seen[i] { totals[i] - seen[i] } else { totals[i] };
                new[i] += grew;
            }
            *seen = totals;
        }
        if let Some(slot) = self.workers.get_mut(w) {
            *slot = Some(r);
        }
    }

    /// A member's report (`Action::LimitReport`). `false`: stale, dropped.
    pub fn on_peer(&mut self, now: Timestamp, from: NodeId, seq: u32, classes: Vec<ClassCount>, clients: Vec<ClientCount>) -> bool {
        if let Some(p) = self.peers.get(&from) {
            let newer = seq.wrapping_sub(p.seq) as i32 > 0;
            if !newer && now.since(p.at) < PEER_STALE {
                self.counters.reports_stale += 1;
                return false;
            }
        }
        self.counters.reports_taken += 1;
        self.peers.insert(from, PeerReport { seq, at: now, classes, clients });
        true
    }

    /// The member set changed: members that left are forgotten.
    pub fn members(&mut self, set: MemberSet) {
        self.nodes = set.len().max(1);
        let before = self.peers.len();
        self.peers.retain(|id, _| set.contains(*id));
        self.counters.peers_forgotten += (before - self.peers.len()) as u64;
    }

    /// Forget members silent for `PEER_STALE`.
    fn expire(&mut self, now: Timestamp) {
        let before = self.peers.len();
        self.peers.retain(|_, p| now.since(p.at) < PEER_STALE);
        self.counters.peers_forgotten += (before - self.peers.len()) as u64;
    }

    /// Is a report due (every `REPORT_INTERVAL`)? Schedules the next one.
    pub fn due(&mut self, now: Timestamp) -> bool {
        if now < self.next_report {
            return false;
        }
        self.next_report = Timestamp(now.0 + REPORT_INTERVAL.0);
        self.expire(now);
        true
    }

    /// This node's report for the members: its workers' counts added, per
    /// class and per client (the busiest `LIMIT_REPORT_CLIENTS`), encoded.
    pub fn node_report(&mut self) -> Vec<u8> {
        let mut classes: Vec<ClassCount> = Vec::new();
        let mut clients: HashMap<(u32, IpAddr), (u32, u32)> = HashMap::new();
        for r in self.workers.iter().flatten() {
            for &(id, c) in &r.classes {
                match classes.iter_mut().find(|x| x.0 == id) {
                    Some(x) => (x.1, x.2) = (x.1.saturating_add(c.conns), x.2.saturating_add(c.embryonic)),
                    None => classes.push((id, c.conns, c.embryonic)),
                }
            }
            for &(id, addr, c) in &r.clients {
                let e = clients.entry((id, addr)).or_default();
                *e = (e.0.saturating_add(c.conns), e.1.saturating_add(c.embryonic));
            }
        }
        let mut busy: Vec<ClientCount> = clients.into_iter().map(|((id, a), (c, e))| (id, a, c, e)).collect();
        busy.sort_unstable_by(|a, b| (b.2.max(b.3), b.0, b.1).cmp(&(a.2.max(a.3), a.0, a.1)));
        busy.truncate(LIMIT_REPORT_CLIENTS);
        self.seq = self.seq.wrapping_add(1);
        self.counters.reports_sent += 1;
        Wire::encode(self.seq, &classes, &busy)
    }

    /// What worker `w` (whose classes are `ids`, in order) should count as
    /// the rest of the cluster: the other workers' and the fresh members'
    /// last counts, per class and for the busiest clients.
    pub fn remote_for(&self, w: usize, ids: &[u32]) -> Remote {
        let mut classes = vec![Count::default(); ids.len()];
        let mut clients: HashMap<(u16, IpAddr), Count> = HashMap::new();
        let index = |id: u32| ids.iter().position(|&x| x == id);
        for (v, r) in self.workers.iter().enumerate() {
            let Some(r) = r.as_ref().filter(|_| v != w) else { continue };
            for &(id, c) in &r.classes {
                if let Some(i) = index(id) {
                    classes[i] = classes[i].add(c);
                }
            }
            for &(id, addr, c) in &r.clients {
                if let Some(i) = index(id) {
                    let e = clients.entry((i as u16, addr)).or_default();
                    *e = e.add(c);
                }
            }
        }
        for p in self.peers.values() {
            for &(id, c, e) in &p.classes {
                if let Some(i) = index(id) {
                    classes[i] = add_count(classes[i], c, e);
                }
            }
            for &(id, addr, c, e) in &p.clients {
                if let Some(i) = index(id) {
                    let x = clients.entry((i as u16, addr)).or_default();
                    *x = add_count(*x, c, e);
                }
            }
        }
        let mut clients: Vec<(u16, IpAddr, Count)> = clients.into_iter().map(|((c, a), n)| (c, a, n)).collect();
        clients.sort_unstable_by(|a, b| (b.2.conns.max(b.2.embryonic), b.0, b.1).cmp(&(a.2.conns.max(a.2.embryonic), a.0, a.1)));
        clients.truncate(REMOTE_CLIENTS);
        // Every member runs as many workers as this node (the join checks
        // it): each member is that many places, whether it reported yet
        // or not.
        let workers = self.workers.len().max(1);
        let places = (workers * self.nodes.max(1 + self.peers.len())) as u32;
        Remote { classes, clients, places }
    }

    /// The estimate per class id, for `show limits`.
    pub fn classes(&self) -> Vec<ClassEstimate> {
        let mut out: BTreeMap<u32, ClassEstimate> = BTreeMap::new();
        let fresh = |id: u32| ClassEstimate { id, local: Count::default(), members: BTreeMap::new(), estimate: Count::default() };
        for r in self.workers.iter().flatten() {
            for &(id, c) in &r.classes {
                let e = out.entry(id).or_insert_with(|| fresh(id));
                e.local = e.local.add(c);
                e.estimate = e.estimate.add(c);
            }
        }
        for (node, p) in &self.peers {
            for &(id, c, em) in &p.classes {
                let e = out.entry(id).or_insert_with(|| fresh(id));
                let m = e.members.entry(node.0).or_default();
                *m = add_count(*m, c, em);
                e.estimate = add_count(e.estimate, c, em);
            }
        }
        out.into_values().collect()
    }

    /// The members' last per-client counts, added, by (class id, client).
    pub fn member_clients(&self) -> BTreeMap<(u32, IpAddr), Count> {
        let mut m: BTreeMap<(u32, IpAddr), Count> = BTreeMap::new();
        for p in self.peers.values() {
            for &(id, a, c, em) in &p.clients {
                let e = m.entry((id, a)).or_default();
                *e = add_count(*e, c, em);
            }
        }
        m
    }

    /// The limit events due (at most one per class every
    /// `EVENT_INTERVAL`): per class id with refusals since the last, how
    /// many each limit refused (`Hit` order). For syslog (L1: "syslog
    /// events for limit hits").
    pub fn take_events(&mut self, now: Timestamp) -> Vec<(u32, [u64; 4])> {
        if now < self.next_event {
            return Vec::new();
        }
        self.next_event = now.saturating_add(EVENT_INTERVAL);
        let out = self.refused_new.iter().filter(|(_, r)| r.iter().any(|&n| n > 0)).map(|(&id, &r)| (id, r)).collect();
        self.refused_new.clear();
        out
    }

    /// Members with a fresh report.
    pub fn reporting(&self) -> Vec<NodeId> {
        self.peers.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ms(n: u64) -> Timestamp {
        Timestamp(n * 1_000_000)
    }
    fn c(conns: u32, embryonic: u32) -> Count {
        Count { conns, embryonic }
    }
    fn ip(d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, d))
    }

    /// Two workers here, two members: each worker's remote count is the
    /// other worker plus both members, never itself; the node's report is
    /// its workers' sum and reads back through the wire codec.
    #[test]
    fn remote_counts_are_everyone_else() {
        let mut e = Estimator::new(2);
        e.on_worker(0, LimitReport { classes: vec![(0, c(5, 2)), (77, c(1, 1))], clients: vec![(77, ip(1), c(1, 1))], ..Default::default() });
        e.on_worker(1, LimitReport { classes: vec![(0, c(3, 0)), (77, c(2, 0))], clients: vec![(77, ip(1), c(2, 0))], ..Default::default() });
        assert!(e.on_peer(ms(0), NodeId(2), 1, vec![(0, 10, 4), (99, 1, 1)], vec![(77, ip(1), 4, 4)]));
        assert!(e.on_peer(ms(0), NodeId(3), 9, vec![(0, 1, 1)], vec![]));
        let r = e.remote_for(0, &[0, 77]);
        assert_eq!(r.classes, vec![c(3 + 10 + 1, 0 + 4 + 1), c(2, 0)]);
        assert_eq!(r.clients, vec![(1, ip(1), c(6, 4))]);
        let r = e.remote_for(1, &[77, 0]);
        assert_eq!(r.classes, vec![c(1, 1), c(5 + 10 + 1, 2 + 4 + 1)]);
        let b = e.node_report();
        let w = Wire::parse(&b).unwrap();
        assert_eq!(w.seq, 1);
        assert_eq!(w.classes().collect::<Vec<_>>(), vec![(0, 8, 2), (77, 3, 1)]);
        assert_eq!(w.clients().collect::<Vec<_>>(), vec![(77, ip(1), 3, 1)]);
        let cl = e.classes();
        assert_eq!(cl.iter().map(|x| (x.id, x.estimate)).collect::<Vec<_>>(), vec![(0, c(19, 7)), (77, c(3, 1)), (99, c(1, 1))]);
    }

    /// Reports: an older sequence is stale, unless the sender was silent
    /// for `PEER_STALE` (it restarted); silent members and members that
    /// left are forgotten.
    #[test]
    fn stale_reports_and_silent_members() {
        let mut e = Estimator::new(1);
        assert!(e.on_peer(ms(0), NodeId(2), 5, vec![(0, 10, 0)], vec![]));
        assert!(!e.on_peer(ms(50), NodeId(2), 4, vec![(0, 99, 0)], vec![]));
        assert!(e.on_peer(ms(60), NodeId(2), 6, vec![(0, 7, 0)], vec![]));
        assert_eq!(e.remote_for(0, &[0]).classes, vec![c(7, 0)]);
        assert!(e.on_peer(ms(60 + 1000), NodeId(2), 1, vec![(0, 3, 0)], vec![]), "a restarted sender");
        assert_eq!(e.remote_for(0, &[0]).classes, vec![c(3, 0)]);
        assert!(e.due(ms(1100)));
        assert!(!e.due(ms(1150)));
        assert!(e.due(ms(2100)), "due again after an interval");
        assert!(e.remote_for(0, &[0]).classes == vec![c(0, 0)], "silent for a second: forgotten");
        e.on_peer(ms(2100), NodeId(3), 1, vec![(0, 3, 0)], vec![]);
        e.members(MemberSet::from_nodes(dataplane::Epoch(2), [NodeId(0), NodeId(1)]).unwrap());
        assert!(e.reporting().is_empty());
        assert_eq!(e.counters.reports_stale, 1);
        assert_eq!(e.counters.peers_forgotten, 2);
    }

    /// Refusals become at most one event per class a second, summed over
    /// the workers; totals that start over (new limits) count whole.
    #[test]
    fn refusals_become_one_event_per_class_a_second() {
        let mut e = Estimator::new(2);
        let rep = |r: [u64; 4]| LimitReport { refused: vec![(0, r), (9, [0; 4])], ..Default::default() };
        e.on_worker(0, rep([5, 0, 0, 1]));
        e.on_worker(1, rep([2, 0, 0, 0]));
        assert_eq!(e.take_events(ms(0)), vec![(0, [7, 0, 0, 1])]);
        e.on_worker(0, rep([9, 0, 0, 1]));
        assert!(e.take_events(ms(500)).is_empty(), "within the second");
        assert_eq!(e.take_events(ms(1000)), vec![(0, [4, 0, 0, 0])]);
        e.on_worker(1, rep([1, 0, 0, 0]));
        e.on_worker(0, rep([9, 0, 0, 1]));
        assert_eq!(e.take_events(ms(2000)), vec![(0, [1, 0, 0, 0])], "worker 1 started over");
        assert!(e.take_events(ms(3000)).is_empty());
    }
}
