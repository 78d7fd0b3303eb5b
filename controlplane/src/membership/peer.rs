//! What membership knows about one configured node: when it was last
//! heard, what its last heartbeat said, and — while this node is the
//! control node and the peer a member — the member record the control
//! node keeps (admitted incarnation, liveness, the echo of this node's
//! heartbeats that renews the control node's lease).
//!
//! Invariants: `last_heard` never moves back, `heartbeats` only grows,
//! `incarnation` never goes down (the machine refuses a lower one before
//! calling in here); a new incarnation forgets the old one's heartbeat
//! and sequence (a restarted peer is heard afresh); the member record is
//! touched only by messages of the admitted incarnation.

use super::config::NodeConfig;
use super::events::State;
use dataplane::ccl::{Heartbeat, Placement};
use dataplane::{Duration, Epoch, NodeId, Timestamp};
use std::net::Ipv4Addr;

/// The last heartbeat of a peer, as membership reads it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct Heard {
    pub(super) at: Timestamp,
    pub(super) epoch: Epoch,
    pub(super) state: State,
    pub(super) priority: u8,
    pub(super) follows: Option<NodeId>,
    pub(super) members: u16,
    pub(super) place: Placement,
    pub(super) member_place: [Placement; 16],
    pub(super) config_version: u64,
    pub(super) state_version: u64,
    /// The highest of this node's heartbeat sequences the peer echoed.
    pub(super) echo_of_me: Option<u32>,
}

/// The control node's record of a member.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct MemberRec {
    pub(super) incarnation: u32,
    pub(super) admitted: Timestamp,
    /// Last message of `incarnation`.
    pub(super) heard: Timestamp,
    /// Last heartbeat following this control node at its epoch.
    pub(super) following: Option<Timestamp>,
    /// Send time of this node's heartbeat the member echoed last.
    pub(super) echo_sent: Option<Timestamp>,
    /// Seen following this control node since admitted.
    pub(super) confirmed: bool,
}

#[derive(Clone, Debug)]
pub(super) struct Peer {
    pub(super) id: NodeId,
    pub(super) name: String,
    pub(super) ccl_address: Ipv4Addr,
    pub(super) last_heard: Option<Timestamp>,
    pub(super) heartbeats: u64,
    /// Longest time between two heartbeats of one incarnation received
    /// in order (jitter, lost heartbeats, stalls on either side).
    pub(super) longest_gap: Duration,
    /// Highest seen (0: none).
    pub(super) incarnation: u32,
    pub(super) hb: Option<Heard>,
    /// Highest heartbeat sequence heard from `incarnation` (echoed back).
    pub(super) rx_seq: u32,
    /// Highest sequence of a heartbeat of `incarnation` that followed this
    /// (control) node at its epoch: what a control node echoes, so a
    /// member's lease rests on a heartbeat the control node counts as
    /// following, never on one from its join or an older epoch.
    pub(super) follow_seq: u32,
    pub(super) member: Option<MemberRec>,
}

impl Peer {
    pub(super) fn new(n: NodeConfig) -> Peer {
        Peer {
            id: n.id,
            name: n.name,
            ccl_address: n.ccl_address,
            last_heard: None,
            heartbeats: 0,
            longest_gap: Duration(0),
            incarnation: 0,
            hb: None,
            rx_seq: 0,
            follow_seq: 0,
            member: None,
        }
    }

    /// Any accepted message of incarnation `inc` (≥ the current one) at `now`.
    pub(super) fn heard(&mut self, now: Timestamp, inc: u32) {
        if inc > self.incarnation {
            self.incarnation = inc;
            self.hb = None;
            self.rx_seq = 0;
            self.follow_seq = 0;
        }
        self.last_heard = Some(self.last_heard.map_or(now, |t| t.max(now)));
        if let Some(m) = self.member.as_mut().filter(|m| m.incarnation == inc) {
            m.heard = m.heard.max(now);
        }
    }

    /// Record a heartbeat; `false` (nothing recorded) for one older than
    /// a heartbeat already heard from this incarnation (reordered).
    pub(super) fn heartbeat(&mut self, now: Timestamp, epoch: Epoch, h: &Heartbeat, me: NodeId) -> bool {
        if self.hb.is_some() && h.seq < self.rx_seq {
            return false;
        }
        self.heartbeats += 1;
        if let Some(last) = &self.hb {
            self.longest_gap = self.longest_gap.max(now.since(last.at));
        }
        self.rx_seq = self.rx_seq.max(h.seq);
        let echo_of_me = (h.echo_bitmap & (1 << me.index()) != 0).then(|| h.echoes[me.index()]);
        let state = State::from_code(h.state).unwrap_or(State::Inactive);
        self.hb = Some(Heard {
            at: now,
            epoch,
            state,
            priority: h.priority,
            follows: h.follows,
            members: h.member_bitmap,
            place: h.place,
            member_place: h.member_place,
            config_version: h.config_version,
            state_version: h.state_version,
            echo_of_me,
        });
        true
    }

    /// The last heartbeat, if heard within `hold` of `now`.
    pub(super) fn fresh(&self, now: Timestamp, hold: Duration) -> Option<&Heard> {
        self.hb.as_ref().filter(|h| now.since(h.at) < hold)
    }
}

/// One configured node as `show cluster` lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemberView {
    pub id: NodeId,
    pub name: String,
    pub ccl_address: Ipv4Addr,
    pub this_node: bool,
    /// Its state: this node's own, or what the peer's last heartbeat said.
    pub state: Option<State>,
    pub priority: Option<u8>,
    /// How long ago its last heartbeat arrived (`None`: never; always
    /// `None` for this node).
    pub last_heard: Option<Duration>,
    /// Heartbeats received from it.
    pub heartbeats: u64,
    /// Longest time between two of its heartbeats, in order, of one
    /// incarnation (`None` for this node).
    pub longest_gap: Option<Duration>,
    /// Incarnation of its last message (0: none heard).
    pub incarnation: u32,
    /// Its member-set epoch (as its last heartbeat said).
    pub epoch: Option<Epoch>,
    /// The control node it follows.
    pub control: Option<NodeId>,
    /// Taking traffic: data or control, readiness gate passed.
    pub ready: bool,
    /// In this node's current member set.
    pub member: bool,
    pub site: Option<u8>,
    pub chassis: Option<u8>,
}

impl MemberView {
    /// `last_heard` in whole milliseconds (truncated), as `show cluster`
    /// prints it.
    pub fn last_heard_ms(&self) -> Option<u64> {
        self.last_heard.map(|d| d.0 / 1_000_000)
    }
}
