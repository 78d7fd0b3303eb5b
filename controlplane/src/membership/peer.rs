//! What membership knows about one configured node.
//!
//! Invariant: `last_heard` never moves back, `heartbeats` only grows, and
//! `incarnation` is set only by [`Peer::heard`], which the machine calls
//! only with an incarnation at least the current one.

use super::NodeConfig;
use dataplane::{Duration, NodeId, Timestamp};
use std::net::Ipv4Addr;

#[derive(Clone, Debug)]
pub(super) struct Peer {
    pub(super) id: NodeId,
    name: String,
    ccl_address: Ipv4Addr,
    last_heard: Option<Timestamp>,
    heartbeats: u64,
    /// Of the last heartbeat (changes when the peer restarts); 0 until
    /// one is heard.
    pub(super) incarnation: u32,
}

impl Peer {
    pub(super) fn new(n: NodeConfig) -> Peer {
        Peer { id: n.id, name: n.name, ccl_address: n.ccl_address, last_heard: None, heartbeats: 0, incarnation: 0 }
    }

    /// A heartbeat of incarnation `incarnation` arrived at `now`.
    pub(super) fn heard(&mut self, now: Timestamp, incarnation: u32) {
        self.last_heard = Some(self.last_heard.map_or(now, |t| t.max(now)));
        self.heartbeats += 1;
        self.incarnation = incarnation;
    }

    pub(super) fn view(&self, now: Timestamp, this_node: bool) -> MemberView {
        MemberView {
            id: self.id,
            name: self.name.clone(),
            ccl_address: self.ccl_address,
            this_node,
            last_heard: self.last_heard.map(|t| now.since(t)),
            heartbeats: self.heartbeats,
            incarnation: self.incarnation,
        }
    }
}

/// One configured node as `show cluster` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    pub id: NodeId,
    pub name: String,
    pub ccl_address: Ipv4Addr,
    pub this_node: bool,
    /// How long ago its last heartbeat arrived (`None`: never; always
    /// `None` for this node).
    pub last_heard: Option<Duration>,
    /// Heartbeats received from it.
    pub heartbeats: u64,
    /// Incarnation of its last heartbeat (0: none heard).
    pub incarnation: u32,
}

impl MemberView {
    /// `last_heard` in whole milliseconds (truncated), as `show cluster`
    /// prints it.
    pub fn last_heard_ms(&self) -> Option<u64> {
        self.last_heard.map(|d| d.0 / 1_000_000)
    }
}
