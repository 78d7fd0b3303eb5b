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
use dataplane::pipeline::{ClusterCountersSnapshot, Counters, FragSnapshot};
use dataplane::route::RouteInfo;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

pub enum Query {
    /// Command: the member set changed (the membership machine's
    /// `Action::Members`); the worker applies it with
    /// `Pipeline::set_members`. No reply.
    SetMembers(MemberSet),
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
            queries: ArrayQueue::new(4),
            replies: ArrayQueue::new(4),
            ccl: Arc::new(CclShared::new()),
        }
    }
}

/// Put the pending member set (if any) on the worker's queue as a
/// `SetMembers` command; a full queue keeps it pending for the next try
/// (only the latest set matters: the caller overwrites `pending` with any
/// newer one). Returns whether one was queued.
pub fn offer_members(queries: &ArrayQueue<Query>, pending: &mut Option<MemberSet>) -> bool {
    let Some(m) = pending.take() else { return false };
    match queries.push(Query::SetMembers(m)) {
        Ok(()) => true,
        Err(Query::SetMembers(m)) => {
            *pending = Some(m);
            false
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::{Epoch, NodeId};

    #[test]
    fn member_sets_wait_for_room_on_the_queue() {
        let q = ArrayQueue::new(2);
        let set = |e| MemberSet::from_nodes(Epoch(e), [NodeId(0), NodeId(1)]).unwrap();
        let mut pending = None;
        assert!(!offer_members(&q, &mut pending), "nothing pending");
        assert!(q.is_empty());
        q.push(Query::Counters).ok();
        q.push(Query::Routes).ok();
        pending = Some(set(2));
        assert!(!offer_members(&q, &mut pending), "queue full");
        assert_eq!(pending, Some(set(2)), "kept for the next try");
        let _ = q.pop();
        assert!(offer_members(&q, &mut pending));
        assert_eq!(pending, None);
        assert!(matches!(q.pop(), Some(Query::Routes)));
        assert!(matches!(q.pop(), Some(Query::SetMembers(m)) if m.epoch() == Epoch(2)));
    }
}
