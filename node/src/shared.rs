//! What the control thread and the worker share: a stop flag, a few
//! counters the worker publishes, and two bounded lock-free queues: queries
//! and commands (control → worker) and the queries' answers (worker →
//! control). The worker takes them between bursts (`worker::between_bursts`),
//! so nothing on its packet path waits for the control thread.
//!
//! Invariant: every query gets exactly one reply, a command none (the
//! control thread waits for one reply per query it sent).

use crate::ccl::CclShared;
use crossbeam_queue::ArrayQueue;
use dataplane::conntrack::ConnInfo;
use dataplane::acl::RuleInfo;
use dataplane::arp::ArpInfo;
use dataplane::cluster::MemberSet;
use dataplane::pipeline::{ClusterCountersSnapshot, Counters, FragSnapshot, Policy};
use dataplane::route::RouteInfo;
use std::sync::atomic::{AtomicBool, AtomicU64};
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
    Rules,
    Cluster,
}

pub enum Reply {
    /// The pipeline counters and the fragment path's counters.
    Counters(Box<Counters>, Box<FragSnapshot>),
    Conns(Vec<ConnInfo>, usize),
    Routes(Vec<RouteInfo>),
    Arp(Vec<ArpInfo>),
    Rules(Vec<RuleInfo>),
    /// `None` in single-node mode.
    Cluster(Option<Box<ClusterCountersSnapshot>>),
}

pub struct Shared {
    pub stop: AtomicBool,
    /// Packets that could not be queued for TX (full TX ring), published by
    /// the worker once per timer tick.
    pub tx_full_drops: AtomicU64,
    /// The generation of the last policy the worker applied
    /// (`Query::SetPolicy`; 0: the one it started with).
    pub policy_applied: AtomicU64,
    pub queries: ArrayQueue<Query>,
    pub replies: ArrayQueue<Reply>,
    /// CCL hand-off between the worker and the control lcore (unused in
    /// single-node mode).
    pub ccl: Arc<CclShared>,
}

impl Shared {
    pub fn new() -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            tx_full_drops: AtomicU64::new(0),
            policy_applied: AtomicU64::new(0),
            queries: ArrayQueue::new(4),
            replies: ArrayQueue::new(4),
            ccl: Arc::new(CclShared::new()),
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

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::{Epoch, NodeId};

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
