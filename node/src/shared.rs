//! What the control thread and the worker share: a stop flag, a few
//! counters the worker publishes, and two bounded lock-free queues for
//! snapshot queries (control → worker) and their answers (worker → control).

use crate::ccl::CclShared;
use crossbeam_queue::ArrayQueue;
use dataplane::conntrack::ConnInfo;
use dataplane::acl::RuleInfo;
use dataplane::arp::ArpInfo;
use dataplane::pipeline::{ClusterCountersSnapshot, CountersSnapshot};
use dataplane::route::RouteInfo;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

pub enum Query {
    Counters,
    Conns { max: usize },
    Routes,
    Arp,
    Rules,
    Cluster,
}

pub enum Reply {
    /// The pipeline counters and the fragment path's counters.
    Counters(Box<CountersSnapshot>, Box<dataplane::pipeline::FragSnapshot>),
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
