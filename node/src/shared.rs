//! What the control thread and the workers share: a stop flag, and per
//! worker a few counters it publishes and three bounded lock-free queues:
//! queries and commands (control → worker), the queries' answers (worker →
//! control), and the frames other workers hand to it (`Handoff`). A worker
//! takes queries between bursts (`worker::between_bursts`), so nothing on
//! its packet path waits for the control thread.
//!
//! Invariant: every query gets exactly one reply, a command none (the
//! control thread waits for one reply per query it sent).

use crate::ccl::CclShared;
use crossbeam_queue::ArrayQueue;
use dataplane::conntrack::ConnInfo;
use dataplane::acl::RuleInfo;
use dataplane::arp::ArpInfo;
use dataplane::cluster::MemberSet;
use dataplane::pipeline::{ClusterCountersSnapshot, Counters, FragSnapshot, HandoffNote, Policy};
use dataplane::PortId;
use dpdk_sys::{Mbuf, RingProducer};
use dataplane::route::RouteInfo;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::collections::VecDeque;
use std::sync::Arc;

pub enum Query {
    /// Command: the member set changed (the membership machine's
    /// `Action::Members`); the worker applies it with
    /// `Pipeline::set_members`. No reply.
    SetMembers(MemberSet),
    /// Command: this node left the cluster (the membership machine's
    /// `Action::Reset`); the worker drops every flow and record with
    /// `Pipeline::reset`. No reply. Queued behind any earlier member set,
    /// so the two apply in the order the machine gave them.
    Reset,
    /// Command: run this policy (a reload, a replicated configuration;
    /// `crate::policy`); the worker swaps it in with
    /// `Pipeline::set_policy`, frees the old one and publishes
    /// `generation` in `Shared::policy_applied`. No reply.
    SetPolicy { generation: u64, policy: Box<Policy> },
    Counters,
    Conns { max: usize },
    Routes,
    Arp,
    /// The IPv6 neighbour cache.
    Nd,
    Rules,
    Cluster,
    /// Up to `max` NAT translations and the NAT counters.
    Xlates { max: usize },
    /// The NAT pools' use.
    NatPools,
    /// Command: the control node's dynamic-NAT table translates `real` in
    /// `pool` to `mapped` now (`None`: no longer; N4,
    /// `Pipeline::set_shared_xlate`). No reply.
    SharedXlate { pool: u16, real: std::net::Ipv4Addr, mapped: Option<std::net::Ipv4Addr> },
    /// Trace the frames `filter` matches until `until`
    /// (`Pipeline::trace_start`); replies `Traced(None)`.
    TraceStart { filter: dataplane::pipeline::trace::TraceFilter, until: dataplane::Timestamp },
    /// The current or last trace (`Pipeline::trace_events`).
    Trace,
    /// Command: the rest of the cluster's connection counts as the limit
    /// estimate has them for this worker (`controlplane::limits`;
    /// `Pipeline::set_remote_limits`). No reply.
    RemoteLimits(Box<dataplane::conntrack::limits::Remote>),
    /// The connection limits' classes and the worker's clients with a
    /// count (`show limits`).
    Limits,
}

pub enum Reply {
    /// The pipeline counters and the fragment path's counters.
    Counters(Box<Counters>, Box<FragSnapshot>),
    Conns(Vec<ConnInfo>, usize),
    Routes(Vec<RouteInfo>),
    Arp(Vec<ArpInfo>),
    Nd(Vec<ArpInfo<std::net::Ipv6Addr>>),
    Rules(Vec<RuleInfo>),
    /// `None` in single-node mode.
    Cluster(Option<Box<ClusterCountersSnapshot>>),
    /// `None` without NAT.
    Xlates(Vec<dataplane::nat::XlateInfo>, Option<dataplane::pipeline::NatCounters>),
    NatPools(Vec<dataplane::pipeline::PoolInfo>),
    /// A trace's filter, deadline, events and events lost (`None`: no
    /// trace, or one just started).
    Traced(Option<Box<TraceSnapshot>>),
    /// `None`: no limits configured.
    Limits(Option<Box<LimitsSnapshot>>),
}

/// A worker's connection limits for `show limits`: its classes, its
/// clients with a count (class, address, count), connections admitted
/// without a per-client count.
pub type LimitsSnapshot = (
    Vec<dataplane::conntrack::limits::ClassInfo>,
    Vec<(u16, std::net::IpAddr, dataplane::conntrack::limits::Count)>,
    u64,
);

/// What `Pipeline::trace_events` gives.
pub type TraceSnapshot =
    (dataplane::pipeline::trace::TraceFilter, dataplane::Timestamp, Vec<dataplane::pipeline::trace::TraceEvent>, u64);

/// What one worker passes to another besides the frames steered on
/// receipt (those go in bursts on the receiver's `steer` ring): a fragment
/// whose connection that worker owns, with what the first worker's
/// reassembler learnt (`note`), or an ARP frame to learn from.
pub enum Handoff {
    Fragment { m: Mbuf, in_port: PortId, note: HandoffNote },
    /// A copy of an ARP frame another worker received and answered: learn
    /// from it (`Pipeline::arp_learn`).
    Learn { m: Mbuf, in_port: PortId },
}

/// What the control thread and one worker share.
pub struct WorkerShared {
    pub queries: ArrayQueue<Query>,
    pub replies: ArrayQueue<Reply>,
    /// Frames other workers steer to this one on receipt, in bursts, the
    /// receiving port index in the mbuf's `port` (`None` with one worker;
    /// full: the sender frees what did not fit and counts it in its
    /// `handoff_drops`). The consuming end is the worker's own.
    pub steer: Option<RingProducer>,
    /// Fragments and ARP copies other workers pass to this one (bounded;
    /// full: as above).
    pub handoff: ArrayQueue<Handoff>,
    /// Packets that could not be queued for TX (full TX ring), published by
    /// the worker once per timer tick.
    pub tx_full_drops: AtomicU64,
    /// The generation of the last policy the worker applied
    /// (`Query::SetPolicy`; 0: the one it started with).
    pub policy_applied: AtomicU64,
    /// Frames this worker received and passed to the worker that owns
    /// them, frames it passed on from its own pipeline (fragments), and
    /// frames it could not pass (the other's ring was full: dropped);
    /// published once per timer tick.
    pub steered_out: AtomicU64,
    pub handed_out: AtomicU64,
    pub handoff_drops: AtomicU64,
    /// Dynamic NAT on a cluster member (N4): the worker's requests for the
    /// control node (`Pipeline::take_xlate_requests`), for the control
    /// lcore; full: dropped and counted (the worker asks again).
    pub xlate_requests: ArrayQueue<dataplane::pipeline::SharedRequest>,
    pub xlate_request_drops: AtomicU64,
    /// The node clock when the worker last began a loop (0: not yet):
    /// the control lcore tells a stalled worker, whose CCL queue may
    /// hold heartbeats unread, from a silent member.
    pub loop_ns: AtomicU64,
    /// The worker's busy loops by duration (`BurstTimes`), published once
    /// per timer tick: counts per bucket of `BURST_BOUNDS_NS` (the last:
    /// longer), their total nanoseconds.
    pub burst_counts: [AtomicU64; BURST_BUCKETS],
    pub burst_ns: AtomicU64,
    /// The flow log's records for the export thread (`crate::export`;
    /// `None`: no exporter configured); full: dropped and counted.
    pub flow_records: Option<ArrayQueue<dataplane::conntrack::FlowRecord>>,
    pub flow_record_drops: AtomicU64,
    /// The worker's connection counts for the limit estimate, every
    /// `controlplane::limits::REPORT_INTERVAL` while limits are
    /// configured; full: the older report stays (the next one replaces).
    pub limit_reports: ArrayQueue<dataplane::conntrack::limits::LimitReport>,
}

/// A worker's driver counters (`WorkerShared::driver_counters`), as
/// `show stats` and the metrics name them.
pub struct DriverCounters {
    pub steered_out: u64,
    pub handed_out: u64,
    pub handoff_drops: u64,
    pub tx_full_drops: u64,
}

dataplane::impl_stats!(DriverCounters {
    counter steered_out,
    counter handed_out,
    counter handoff_drops,
    counter tx_full_drops,
});

impl WorkerShared {
    /// What the worker published at its last timer tick.
    pub fn driver_counters(&self) -> DriverCounters {
        DriverCounters {
            steered_out: self.steered_out.load(Ordering::Relaxed),
            handed_out: self.handed_out.load(Ordering::Relaxed),
            handoff_drops: self.handoff_drops.load(Ordering::Relaxed),
            tx_full_drops: self.tx_full_drops.load(Ordering::Relaxed),
        }
    }
}

/// Upper bounds (ns) of the buckets of a worker's loop durations: one
/// poll of every queue that found work, its processing and transmission.
pub const BURST_BOUNDS_NS: [u64; 13] =
    [1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000];
/// `BURST_BOUNDS_NS` and one for longer.
pub const BURST_BUCKETS: usize = BURST_BOUNDS_NS.len() + 1;

/// A worker's own histogram of its busy loops' durations (plain counts: it
/// is the only writer; `publish` copies them to its `WorkerShared`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BurstTimes {
    pub counts: [u64; BURST_BUCKETS],
    pub sum_ns: u64,
}

impl BurstTimes {
    /// One loop of `ns` nanoseconds: the first bucket whose bound holds it.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let i = BURST_BOUNDS_NS.iter().position(|&b| ns <= b).unwrap_or(BURST_BOUNDS_NS.len());
        if let Some(c) = self.counts.get_mut(i) {
            *c += 1;
        }
        self.sum_ns = self.sum_ns.wrapping_add(ns);
    }

    pub fn publish(&self, to: &WorkerShared) {
        for (a, &c) in to.burst_counts.iter().zip(&self.counts) {
            a.store(c, Ordering::Relaxed);
        }
        to.burst_ns.store(self.sum_ns, Ordering::Relaxed);
    }
}

/// Frames a worker's steering ring holds (a power of two).
pub const STEER_RING: u32 = 4096;
/// Fragments and ARP copies a worker's handoff queue holds.
pub const HANDOFF_RING: usize = 1024;

impl WorkerShared {
    fn new(steer: Option<RingProducer>) -> WorkerShared {
        WorkerShared {
            queries: ArrayQueue::new(4),
            replies: ArrayQueue::new(4),
            steer,
            handoff: ArrayQueue::new(HANDOFF_RING),
            tx_full_drops: AtomicU64::new(0),
            policy_applied: AtomicU64::new(0),
            steered_out: AtomicU64::new(0),
            handed_out: AtomicU64::new(0),
            handoff_drops: AtomicU64::new(0),
            xlate_requests: ArrayQueue::new(dataplane::pipeline::SHARED_REQUESTS),
            xlate_request_drops: AtomicU64::new(0),
            loop_ns: AtomicU64::new(0),
            burst_counts: std::array::from_fn(|_| AtomicU64::new(0)),
            burst_ns: AtomicU64::new(0),
            flow_records: None,
            flow_record_drops: AtomicU64::new(0),
            limit_reports: ArrayQueue::new(2),
        }
    }
}

pub struct Shared {
    pub stop: AtomicBool,
    /// One per worker, in worker order.
    pub workers: Vec<WorkerShared>,
    /// CCL hand-off between the worker and the control lcore (unused in
    /// single-node mode).
    pub ccl: Arc<CclShared>,
}

impl Shared {
    /// Free the frames still on the handoff queues and the CCL queues (the
    /// workers and the control lcore have stopped): before the mempool and
    /// the EAL go. (What is left on a steering ring stays there: rings, like
    /// pools, are never freed.)
    pub fn drain_frames(&self) {
        for w in &self.workers {
            while w.handoff.pop().is_some() {}
        }
        for q in [&self.ccl.to_worker, &self.ccl.to_control, &self.ccl.tx_via_worker] {
            while q.pop().is_some() {}
        }
    }

    /// Shared state for one worker per entry of `steer` (its steering
    /// ring's producing end; `None` with one worker).
    pub fn new(steer: Vec<Option<RingProducer>>) -> Shared {
        let steer = if steer.is_empty() { vec![None] } else { steer };
        let n = steer.len();
        Shared {
            stop: AtomicBool::new(false),
            workers: steer.into_iter().map(WorkerShared::new).collect(),
            ccl: Arc::new(CclShared::new(n)),
        }
    }
}

/// Put the pending commands (member sets, resets) on the worker's queue,
/// oldest first; what a full queue does not take stays pending, in order,
/// for the next try. Returns how many were queued.
pub fn offer_commands(queries: &ArrayQueue<Query>, pending: &mut VecDeque<Query>) -> usize {
    let mut n = 0;
    while let Some(q) = pending.pop_front() {
        match queries.push(q) {
            Ok(()) => n += 1,
            Err(q) => {
                pending.push_front(q);
                break;
            }
        }
    }
    n
}

/// Queue `q` behind the pending commands; a member set replaces a pending
/// member set that no reset separates it from (only the latest one
/// matters), so the pending list stays short.
pub fn push_command(pending: &mut VecDeque<Query>, q: Query) {
    if let (Query::SetMembers(_), Some(Query::SetMembers(_))) = (&q, pending.back()) {
        pending.pop_back();
    }
    pending.push_back(q);
}

/// The membership machine's commands (member sets, resets, the dynamic-NAT
/// table's changes) queued for
/// the node, copied into every worker's pending queue in order (each
/// worker holds its own connections' share of the cluster state and
/// applies every command); `from` ends empty. Other queries are not
/// commands of the machine and are dropped.
pub fn fan_out(from: &mut VecDeque<Query>, workers: &mut [VecDeque<Query>]) {
    while let Some(q) = from.pop_front() {
        for pending in workers.iter_mut() {
            match &q {
                Query::SetMembers(m) => push_command(pending, Query::SetMembers(*m)),
                Query::Reset => push_command(pending, Query::Reset),
                &Query::SharedXlate { pool, real, mapped } => {
                    push_command(pending, Query::SharedXlate { pool, real, mapped })
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::{Epoch, NodeId};

    #[test]
    fn burst_times_fall_in_the_first_bucket_that_holds_them() {
        let mut t = BurstTimes::default();
        for ns in [0, 1_000, 1_001, 9_999, 10_000_000, 10_000_001, u64::MAX / 2] {
            t.record(ns);
        }
        let mut want = [0u64; BURST_BUCKETS];
        want[0] = 2; // 0 and 1 000 (bounds are inclusive)
        want[1] = 1; // 1 001
        want[3] = 1; // 9 999
        want[12] = 1; // 10 ms
        want[13] = 2; // beyond the last bound
        assert_eq!(t.counts, want);
        assert_eq!(t.sum_ns, 1_000 + 1_001 + 9_999 + 10_000_000 + 10_000_001 + u64::MAX / 2);
        let w = WorkerShared::new(None);
        t.publish(&w);
        assert_eq!(w.burst_counts[13].load(Ordering::Relaxed), 2);
        assert_eq!(w.burst_ns.load(Ordering::Relaxed), t.sum_ns);
    }

    #[test]
    fn every_worker_gets_every_command_in_order() {
        let set = |e: u64| MemberSet::from_nodes(Epoch(e), [NodeId(0), NodeId(1)]).unwrap();
        let mut from = VecDeque::new();
        push_command(&mut from, Query::SetMembers(set(2)));
        push_command(&mut from, Query::Reset);
        push_command(&mut from, Query::SetMembers(set(3)));
        let mut workers = vec![VecDeque::new(), VecDeque::new()];
        // Worker 1 still holds an older set: the new one coalesces with it.
        push_command(&mut workers[1], Query::SetMembers(set(1)));
        fan_out(&mut from, &mut workers);
        assert!(from.is_empty());
        for w in &workers {
            let kinds: Vec<String> = w
                .iter()
                .map(|q| match q {
                    Query::SetMembers(m) => format!("set {}", m.epoch().0),
                    Query::Reset => "reset".into(),
                    _ => "other".into(),
                })
                .collect();
            assert_eq!(kinds, ["set 2", "reset", "set 3"]);
        }
    }

    #[test]
    fn commands_wait_for_room_on_the_queue_in_order() {
        let q = ArrayQueue::new(2);
        let set = |e| MemberSet::from_nodes(Epoch(e), [NodeId(0), NodeId(1)]).unwrap();
        let mut pending = VecDeque::new();
        assert_eq!(offer_commands(&q, &mut pending), 0, "nothing pending");
        assert!(q.is_empty());
        q.push(Query::Counters).ok();
        push_command(&mut pending, Query::SetMembers(set(2)));
        push_command(&mut pending, Query::SetMembers(set(3)));
        push_command(&mut pending, Query::Reset);
        push_command(&mut pending, Query::SetMembers(set(4)));
        assert_eq!(pending.len(), 3, "set 2 replaced by set 3; the reset separates set 4");
        assert_eq!(offer_commands(&q, &mut pending), 1, "one free slot");
        assert_eq!(pending.len(), 2, "kept for the next try");
        assert!(matches!(q.pop(), Some(Query::Counters)));
        assert!(matches!(q.pop(), Some(Query::SetMembers(m)) if m.epoch() == Epoch(3)));
        assert_eq!(offer_commands(&q, &mut pending), 2);
        assert!(pending.is_empty());
        assert!(matches!(q.pop(), Some(Query::Reset)));
        assert!(matches!(q.pop(), Some(Query::SetMembers(m)) if m.epoch() == Epoch(4)));
    }
}
