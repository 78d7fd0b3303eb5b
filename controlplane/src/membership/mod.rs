//! Cluster membership as a sans-IO state machine (SPEC P2, P3, M1): the
//! time and decoded control messages go in, [`Action`]s come out. The
//! node's control lcore (`node/src/ccl.rs`) and the simulator
//! (`testbed/src/sim/membership.rs`) drive this same code.
//!
//! What it does today — no more than the driver did before it moved here:
//! broadcast a [`Heartbeat`] every [`Config::heartbeat_interval`] (100 ms),
//! and keep, per configured node, when it was last heard, how many
//! heartbeats it sent and its incarnation, for `show cluster`. The member
//! set is the configuration's, at epoch 1, and never changes; the
//! election, hold time and join of issue 10 grow from here (states, a
//! member table replacing [`Config::members`], more message kinds).
//!
//! ```text
//!   driver                         Membership                  driver
//!   tick(now) ───────────────────▶ heartbeat due? ──▶ poll_action: Broadcast
//!   ControlLink::receive ─ open ─▶ on_message(now, Envelope, &Message)
//!                                  (member set changed) ──▶ Members(MemberSet)
//!   snapshot(now) ◀─────────────── per-node state for `show cluster`
//! ```
//!
//! Invariants:
//! - **No I/O, no clock.** Nothing here reads a clock, sleeps, opens a
//!   socket or knows DPDK (`controlplane` depends on `dataplane` only, for
//!   its value types and the CCL codec). Time is the [`Timestamp`] passed
//!   in; every effect is an [`Action`] the driver carries out.
//! - **Heartbeat schedule.** The first [`Membership::tick`] queues a
//!   heartbeat; after that a tick queues one when
//!   [`Membership::next_heartbeat`] has come, and the next one is due one
//!   interval after that tick. So at most one heartbeat per tick, never two
//!   for one instant, and a late tick delays the schedule rather than
//!   bursting catch-up heartbeats (the node's behaviour before the move).
//! - **Per-node state moves forward only.** A node's last-heard time never
//!   decreases, its heartbeat count only grows, its incarnation never goes
//!   down (the `Opener` already drops a previous boot's messages as
//!   `ccl-stale-incarnation`; the machine does not rely on it).
//! - **Hostile input is counted, never trusted, never a panic.** Every
//!   message given to [`Membership::on_message`] is counted under exactly
//!   one [`Received`] outcome; a sender that is not a configured node, a
//!   message claiming to come from this node, a stale incarnation or a
//!   kind membership does not handle changes no state.
//! - **Member-set changes are epoch'd.** The member set only changes by an
//!   [`Action::Members`] carrying the new set, whose epoch is higher than
//!   the previous one; heartbeats carry the current set's epoch and bitmap.
//!   With today's static set it is never emitted.
//!
//! Sealing and opening: the state machine works on decoded messages so it
//! can be tested without bytes; [`ControlLink`] is the thin byte layer
//! (one `Sealer` on the control channel, one `Opener` with the control
//! lcore's own replay windows) that both drivers use, so the node and the
//! simulator put identical heartbeats on their CCLs.

mod link;
mod peer;
#[cfg(test)]
mod tests;

pub use link::{ControlLink, MAX_CONTROL_FRAME};
pub use peer::MemberView;

use dataplane::ccl::{Heartbeat, Message, Opened};
use dataplane::cluster::MemberSet;
use dataplane::{Duration, Epoch, NodeId, Timestamp};
use peer::Peer;
use std::collections::VecDeque;
use std::net::Ipv4Addr;

/// Heartbeat period until the configuration names one (issue 10).
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
/// The `state` byte of today's heartbeats: a plain member. The states of
/// issue 10 (joining, syncing, data, control, ...) get their own values.
pub const HEARTBEAT_STATE_MEMBER: u8 = 0;

/// A configured cluster node, as `show cluster` names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeConfig {
    pub id: NodeId,
    pub name: String,
    pub ccl_address: Ipv4Addr,
}

/// What the machine starts from.
#[derive(Clone, Debug)]
pub struct Config {
    /// This node.
    pub me: NodeId,
    /// This node's priority (heartbeats carry it; the election of issue 10
    /// uses it: lower is better).
    pub priority: u8,
    /// Every configured node, this one included, in the order `show
    /// cluster` lists them. Only these are tracked as peers.
    pub nodes: Vec<NodeConfig>,
    /// The member set the workers start with (a subset of `nodes`).
    pub members: MemberSet,
    pub heartbeat_interval: Duration,
}

/// A configuration the machine cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    #[error("heartbeat interval must be above zero")]
    ZeroInterval,
    #[error("node id {0} out of range (cluster nodes are 0..=15)")]
    NodeOutOfRange(u8),
    #[error("node {0} is configured twice")]
    DuplicateNode(NodeId),
    #[error("this node ({0}) is not among the configured nodes")]
    MeNotConfigured(NodeId),
    #[error("member {0} is not among the configured nodes")]
    MemberNotConfigured(NodeId),
}

/// What the driver must do.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Seal `msg` on the control channel with `epoch` in its header and
    /// broadcast it on the CCL.
    Broadcast { epoch: Epoch, msg: Message<'static> },
    /// The member set changed: hand it to every worker (a command on its
    /// lock-free queue, applied between bursts). Not emitted while the set
    /// is static.
    Members(MemberSet),
}

/// Where a received message came from: the authenticated header fields
/// that membership reads (what `Opener` returns, without the bytes).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    pub sender: NodeId,
    pub incarnation: u32,
    pub epoch: Epoch,
}

impl From<&Opened<'_>> for Envelope {
    fn from(o: &Opened<'_>) -> Envelope {
        Envelope { sender: o.sender, incarnation: o.incarnation, epoch: o.epoch }
    }
}

/// What [`Membership::on_message`] made of a message (each outcome has a
/// counter in [`Counters`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Received {
    /// A heartbeat of a configured peer: recorded.
    Heartbeat,
    /// The sender is not a configured node: ignored.
    UnknownSender,
    /// The message claims to come from this node: ignored.
    FromSelf,
    /// An incarnation below the one already heard from the sender (a
    /// previous boot): ignored.
    StaleIncarnation,
    /// A kind membership does not handle (yet): ignored.
    OtherKind,
}

/// Counters of the machine (heartbeats out and in, ignored messages).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Heartbeats queued as `Action::Broadcast` (the driver counts what
    /// actually reached the wire).
    pub heartbeats_queued: u64,
    /// Heartbeats of configured peers recorded.
    pub heartbeats_rx: u64,
    pub unknown_sender: u64,
    pub from_self: u64,
    pub stale_incarnation: u64,
    /// Control-channel messages that were not heartbeats.
    pub other_messages: u64,
}

/// The membership of one node. See the module essay for its invariants.
#[derive(Debug)]
pub struct Membership {
    me: NodeId,
    priority: u8,
    interval: Duration,
    members: MemberSet,
    /// In configuration order.
    peers: Vec<Peer>,
    /// `peers` index by node id.
    index: [Option<u8>; NodeId::MAX_NODES],
    /// `None` until the first tick: the first heartbeat goes out then.
    next_heartbeat: Option<Timestamp>,
    actions: VecDeque<Action>,
    counters: Counters,
}

impl Membership {
    pub fn new(c: Config) -> Result<Membership, MembershipError> {
        if c.heartbeat_interval.0 == 0 {
            return Err(MembershipError::ZeroInterval);
        }
        let mut index = [None; NodeId::MAX_NODES];
        for (i, n) in c.nodes.iter().enumerate() {
            let slot = index.get_mut(n.id.index()).ok_or(MembershipError::NodeOutOfRange(n.id.0))?;
            if slot.is_some() {
                return Err(MembershipError::DuplicateNode(n.id));
            }
            // At most 16 distinct ids, so `i` fits.
            *slot = Some(i as u8);
        }
        if index.get(c.me.index()).copied().flatten().is_none() {
            return Err(MembershipError::MeNotConfigured(c.me));
        }
        if let Some(m) = c.members.iter().find(|m| index[m.index()].is_none()) {
            return Err(MembershipError::MemberNotConfigured(m));
        }
        Ok(Membership {
            me: c.me,
            priority: c.priority,
            interval: c.heartbeat_interval,
            members: c.members,
            peers: c.nodes.into_iter().map(Peer::new).collect(),
            index,
            next_heartbeat: None,
            actions: VecDeque::with_capacity(4),
            counters: Counters::default(),
        })
    }

    #[inline]
    pub fn me(&self) -> NodeId {
        self.me
    }
    #[inline]
    pub fn members(&self) -> MemberSet {
        self.members
    }
    #[inline]
    pub fn epoch(&self) -> Epoch {
        self.members.epoch()
    }
    #[inline]
    pub fn heartbeat_interval(&self) -> Duration {
        self.interval
    }
    #[inline]
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// When the next heartbeat is due (`None`: at the first tick). A driver
    /// that sleeps should call [`Membership::tick`] by then.
    #[inline]
    pub fn next_heartbeat(&self) -> Option<Timestamp> {
        self.next_heartbeat
    }

    /// The time has come to `now`: queue a heartbeat if one is due.
    pub fn tick(&mut self, now: Timestamp) {
        if self.next_heartbeat.is_some_and(|due| now < due) {
            return;
        }
        let hb =
            Heartbeat { priority: self.priority, state: HEARTBEAT_STATE_MEMBER, member_bitmap: self.members.bits(), ..Heartbeat::default() };
        self.actions.push_back(Action::Broadcast { epoch: self.members.epoch(), msg: Message::Heartbeat(hb) });
        self.counters.heartbeats_queued += 1;
        self.next_heartbeat = Some(now.saturating_add(self.interval));
    }

    /// A control-channel message arrived at `now` (authenticated and
    /// fresh: the driver opened it with [`ControlLink`] or an `Opener`).
    pub fn on_message(&mut self, now: Timestamp, from: Envelope, msg: &Message<'_>) -> Received {
        let r = self.receive(now, from, msg);
        let c = &mut self.counters;
        match r {
            Received::Heartbeat => c.heartbeats_rx += 1,
            Received::UnknownSender => c.unknown_sender += 1,
            Received::FromSelf => c.from_self += 1,
            Received::StaleIncarnation => c.stale_incarnation += 1,
            Received::OtherKind => c.other_messages += 1,
        }
        r
    }

    fn receive(&mut self, now: Timestamp, from: Envelope, msg: &Message<'_>) -> Received {
        let Message::Heartbeat(_) = msg else { return Received::OtherKind };
        if from.sender == self.me {
            return Received::FromSelf;
        }
        let Some(i) = self.index.get(from.sender.index()).copied().flatten() else {
            return Received::UnknownSender;
        };
        let peer = &mut self.peers[usize::from(i)];
        if from.incarnation < peer.incarnation {
            return Received::StaleIncarnation;
        }
        peer.heard(now, from.incarnation);
        Received::Heartbeat
    }

    /// The next action for the driver, oldest first; `None` when there is
    /// nothing to do. Drain it after every `tick` and `on_message`.
    #[inline]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Every configured node as `show cluster` lists it, ages as of `now`.
    pub fn snapshot(&self, now: Timestamp) -> Vec<MemberView> {
        self.peers.iter().map(|p| p.view(now, p.id == self.me)).collect()
    }

    /// One node's view (`None` for a node that is not configured).
    pub fn member(&self, id: NodeId, now: Timestamp) -> Option<MemberView> {
        let i = self.index.get(id.index()).copied().flatten()?;
        let p = &self.peers[usize::from(i)];
        Some(p.view(now, p.id == self.me))
    }
}
