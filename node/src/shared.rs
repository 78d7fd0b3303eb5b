//! What the control thread and the worker share: a stop flag, a few
//! counters the worker publishes, and two bounded lock-free queues for
//! snapshot queries (control → worker) and their answers (worker → control).

use crossbeam_queue::ArrayQueue;
use dataplane::conntrack::ConnInfo;
use dataplane::acl::RuleInfo;
use dataplane::arp::ArpInfo;
use dataplane::pipeline::CountersSnapshot;
use dataplane::route::RouteInfo;
use std::sync::atomic::{AtomicBool, AtomicU64};

pub enum Query {
    Counters,
    Conns { max: usize },
    Routes,
    Arp,
    Rules,
}

pub enum Reply {
    Counters(Box<CountersSnapshot>),
    Conns(Vec<ConnInfo>, usize),
    Routes(Vec<RouteInfo>),
    Arp(Vec<ArpInfo>),
    Rules(Vec<RuleInfo>),
}

pub struct Shared {
    pub stop: AtomicBool,
    /// Packets that could not be queued for TX (full TX ring), published by
    /// the worker once per timer tick.
    pub tx_full_drops: AtomicU64,
    pub queries: ArrayQueue<Query>,
    pub replies: ArrayQueue<Reply>,
}

impl Shared {
    pub fn new() -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            tx_full_drops: AtomicU64::new(0),
            queries: ArrayQueue::new(4),
            replies: ArrayQueue::new(4),
        }
    }
}
