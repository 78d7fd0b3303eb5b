//! Cluster membership as a sans-IO state machine (SPEC M1–M9, P2, P3;
//! issue 10): the time, decoded control-channel messages and a few driver
//! inputs (port carrier, the dataplane's sync progress) go in, [`Action`]s
//! come out. The node's control lcore and the simulator drive this same
//! code; `docs/membership.md` is the design note (states diagram, timers,
//! the lease rule, split brain, join and sync, replicated tables).
//!
//! ```text
//!   driver                                Membership                       driver
//!   tick(now) ─────────────────────────▶ timers: heartbeat, hold time, ──▶ Broadcast / Send (seal, CCL)
//!   ControlLink::receive ── open ──────▶ on_message(now, Envelope, msg)    Members(set)   → workers
//!   link polling ──────────────────────▶ on_port(now, port, up)            Lease(until)   → workers
//!   Pipeline::sync_progress ───────────▶ on_sync(now, epoch, done, sent)   Reset          → workers
//!   control plane (NAT later) ─────────▶ table_upsert / table_delete       DataPorts{up}  → ports
//!                                        set_config                        Event(..)      → log, history
//!   show cluster ◀────────────────────── snapshot(now), status, history    Replica(..)    → config, tables
//! ```
//!
//! States: joining → syncing → data (↔ control), inactive (left; rejoins
//! after a backoff), disabled (gave up). The control node removes a member
//! not heard within the hold time and admits joiners, each change a new
//! epoch; members follow it; with no control node heard for a hold time
//! the members elect one (lowest priority number, then lowest node id); on
//! a split brain's heal the better control node keeps the role and the
//! other side resets and rejoins it.
//!
//! Invariants:
//! - **No I/O, no clock.** Time is the [`Timestamp`] passed in (never
//!   taken backwards: an earlier time than the last input counts as the
//!   last input's); every effect is an [`Action`].
//! - **One control node believed.** `control` is one `Option<NodeId>`:
//!   this node itself when it is the control node.
//! - **Epochs only grow.** A set is adopted only at a higher epoch than
//!   this node's; a control node creates `max(every epoch it heard) + 1`;
//!   leaving keeps the epoch (an empty set at the same epoch).
//! - **Lease before removal.** A member's lease ([`Action::Lease`]) is
//!   never later than `s + hold` (s: when it sent the heartbeat the
//!   control node last echoed back; the control node's own: the echo of
//!   a follower), so it has expired before the control node can have
//!   gone a hold time without hearing it (nor a follower without hearing
//!   the control node, for the control node's own); a node that was not
//!   run for longer than the hold time leaves (Reset) on its first input.
//!   (The issue-10 contract's tighter `t + hold − 2 × interval`, t the
//!   last heartbeat heard from the control node, left one interval of
//!   margin: any jitter fenced every node for a moment, and a control
//!   node's death fenced all of them until the election.)
//! - **Bounded.** Peers are the configured nodes; queues, history,
//!   transfers and tables are bounded by `Limits`; nothing received grows
//!   a structure without bound.
//! - **Hostile input is counted, never trusted, never a panic.** Every
//!   message ends as exactly one [`Received`] outcome with its counter;
//!   refusals name the peer in an event (at most one per peer and reason
//!   per hold time).

mod config;
mod events;
mod link;
mod peer;
mod query;
mod replica;
mod transfer;
#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod tests_support {
    pub(crate) use super::tests::Mini;
}

pub use config::{
    Config, ConfigBlob, Limits, MembershipError, NodeConfig, Rejoin, SplitBrain, DEFAULT_HEARTBEAT_INTERVAL,
    DEFAULT_HOLD_TIME, DEFAULT_INTERFACE_DEBOUNCE, DEFAULT_SYNC_TIMEOUT, MIN_HEARTBEAT_INTERVAL, MIN_HOLD_TIME,
};
pub use events::{Counters, EventKind, MembershipEvent, Reason, Received, State};
pub use link::{ControlLink, MAX_CONTROL_FRAME};
pub use peer::MemberView;
pub use query::{Answers, ANSWERS_KEPT, QUERY_MAX_BYTES, RENDERS_PER_SECOND};
pub use replica::{ReplicaChange, StreamError, TableError};

use dataplane::ccl::{
    ClassCount, ClientCount, ControlMessage, LimitReport, EMPTY_LIMIT_REPORT, Heartbeat, JoinReply, JoinRequest, JoinVerdict, OpenedControl, Placement, QueryRequest, SyncChunk,
    SyncRequest, TableOp, TableUpdate, XlateRequest, HB_FLAG_QUORUM, HB_FLAG_RESUMED, NODE_SLOTS,
};
use dataplane::cluster::{MemberInfo, MemberSet};
use dataplane::{Duration, Epoch, NodeId, Timestamp};
use events::{History, Names};
use peer::{MemberRec, Peer};
use replica::{Applied, Replica};
use std::collections::VecDeque;
pub use transfer::ChunkOut;
use transfer::{Pull, PullEvent, Serving};

/// A message for the driver to seal and send, owning its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outgoing {
    Heartbeat(Heartbeat),
    JoinRequest(JoinRequest),
    JoinReply(JoinReply),
    SyncRequest(SyncRequest),
    SyncChunk(ChunkOut),
    TableUpdate { version: u64, table: u8, key: Vec<u8>, value: Option<Vec<u8>> },
    XlateRequest(XlateRequest),
    QueryRequest(QueryRequest),
    QueryChunk(ChunkOut),
    /// A `LimitReport` payload, encoded (`LimitReport::encode`).
    LimitReport(Vec<u8>),
}

impl Outgoing {
    /// The message as the codec sees it (`ControlLink` seals this).
    pub fn message(&self) -> ControlMessage<'_> {
        match self {
            Outgoing::Heartbeat(h) => ControlMessage::Heartbeat(*h),
            Outgoing::JoinRequest(r) => ControlMessage::JoinRequest(*r),
            Outgoing::JoinReply(r) => ControlMessage::JoinReply(*r),
            Outgoing::SyncRequest(r) => ControlMessage::SyncRequest(*r),
            Outgoing::SyncChunk(c) => ControlMessage::SyncChunk(c.view()),
            Outgoing::TableUpdate { version, table, key, value } => ControlMessage::TableUpdate(TableUpdate {
                version: *version,
                table: *table,
                key,
                op: value.as_deref().map_or(TableOp::Delete, TableOp::Upsert),
            }),
            Outgoing::XlateRequest(r) => ControlMessage::XlateRequest(*r),
            Outgoing::QueryRequest(r) => ControlMessage::QueryRequest(*r),
            Outgoing::QueryChunk(c) => ControlMessage::QueryChunk(c.view()),
            // Encoded by `broadcast_limits`, which refuses what does not parse.
            Outgoing::LimitReport(b) => match LimitReport::parse(b) {
                Ok(r) => ControlMessage::LimitReport(r),
                Err(_) => ControlMessage::LimitReport(EMPTY_LIMIT_REPORT),
            },
        }
    }
}

/// What the driver must do (the contract's table, docs/membership.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Seal `msg` on the control channel with `epoch` in its header and
    /// broadcast it on the CCL.
    Broadcast { epoch: Epoch, msg: Outgoing },
    /// Seal `msg` and send it to node `to` (a broadcast frame also works:
    /// the payload names its addressee).
    Send { to: NodeId, epoch: Epoch, msg: Outgoing },
    /// The member set changed: hand it to every worker (between bursts).
    /// It names its control node (`MemberSet::control`).
    Members(MemberSet),
    /// The pipeline is fenced while `now >= until` (`Timestamp(0)`:
    /// fenced now).
    Lease(Timestamp),
    /// Drop every flow, record, parked frame: this node left.
    Reset,
    /// Data ports link up or down.
    DataPorts { up: bool },
    /// Log it (and `show cluster history` lists it).
    Event(MembershipEvent),
    /// The replicated configuration or a table entry changed.
    Replica(ReplicaChange),
    /// This node is the control node: a member (`from`, possibly this
    /// node) asks for the dynamic-NAT translation of `real` in `pool`, or
    /// renews the one it holds (N4). The NAT share answers through a
    /// replicated table (`controlplane::natshare`).
    XlateRequest { from: NodeId, pool: u16, real: std::net::Ipv4Addr, held: Option<std::net::Ipv4Addr> },
    /// Node `from` (boot `incarnation`) asks for this node's answer on
    /// `topic` (with the topic's argument `arg`) to its cluster-wide query
    /// `query` (L5): render it and hand the bytes to
    /// [`Membership::answer`].
    Query { from: NodeId, incarnation: u32, query: u32, topic: u8, arg: Vec<u8> },
    /// Member `from` reports its connection counts (L1): its report `seq`,
    /// classes (id, connections, embryonic) and busiest clients (class id,
    /// address, connections, embryonic); for `controlplane::limits`.
    LimitReport { from: NodeId, seq: u32, classes: Vec<ClassCount>, clients: Vec<ClientCount> },
}

/// Where a received message came from: the authenticated header fields
/// membership reads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    pub sender: NodeId,
    pub incarnation: u32,
    pub epoch: Epoch,
}

impl From<&OpenedControl<'_>> for Envelope {
    fn from(o: &OpenedControl<'_>) -> Envelope {
        Envelope { sender: o.sender, incarnation: o.incarnation, epoch: o.epoch }
    }
}

/// This node's membership, for `show cluster`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub state: State,
    pub members: MemberSet,
    pub control: Option<NodeId>,
    pub ready: bool,
    /// The data ports are open by this node's order (from the first lease
    /// after becoming ready).
    pub ports_open: bool,
    /// The last lease handed to the workers.
    pub lease: Timestamp,
    /// Consecutive failed rejoin attempts.
    pub failures: u32,
    pub retry_at: Option<Timestamp>,
    /// Why this node is disabled (its log line).
    pub disabled: Option<String>,
    pub config_version: u64,
    pub state_version: u64,
    /// The control node is fetching a newer replicated state.
    pub catching_up: bool,
    /// Live replicated-table entries and tombstones held.
    pub table_entries: usize,
    pub tombstones: usize,
    /// Transfers this node serves now.
    pub serving: usize,
}

/// Most ports `on_port` tracks (further ports are ignored).
pub const MAX_PORTS: usize = 64;
/// Heartbeat send times kept for the lease's echo (64 intervals).
const SENT_RING: usize = 64;

#[derive(Copy, Clone, Debug)]
struct PortState {
    port: u16,
    up: bool,
    since: Timestamp,
}

#[derive(Copy, Clone, Debug)]
struct Join {
    started: Timestamp,
    target: Option<NodeId>,
    target_since: Timestamp,
    last_request: Option<Timestamp>,
}

#[derive(Copy, Clone, Debug)]
struct SyncWait {
    epoch: Epoch,
    bits: u16,
    started: Timestamp,
    replica_done: bool,
    dataplane_done: bool,
}

#[derive(Copy, Clone, Debug)]
struct Pending {
    incarnation: u32,
    epoch: Epoch,
    place: Placement,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Purpose {
    Join,
    Lag,
    CatchUp,
}

enum Vote {
    Win { include: u16, candidates: u8 },
    Wait,
    NoQuorum { heard: u8, of: u8 },
}

/// The membership of one node. See the module essay for its invariants.
#[derive(Debug)]
pub struct Membership {
    cfg: Config,
    peers: Vec<Peer>,
    index: [Option<u8>; NodeId::MAX_NODES],
    configured: u16,
    state: State,
    booted: bool,
    set: MemberSet,
    control: Option<NodeId>,
    /// Incarnation of the control node followed.
    ctrl_inc: u32,
    /// Last heartbeat of the followed control node as control (any epoch).
    ctrl_seen: Timestamp,
    /// Last heartbeat of the followed control node at this node's epoch.
    ctrl_heard: Option<Timestamp>,
    /// Send time of this node's heartbeat the control node last echoed.
    ctrl_echo: Option<Timestamp>,
    /// Quorum mode: the latest bound the control node's grant puts on
    /// this node's lease.
    ctrl_grant: Option<Timestamp>,
    /// Quorum mode, control node: the grant its last heartbeat carried
    /// (`None`: it had none to give), and whether a heartbeat since the
    /// last timed one was a grant update (at most one per interval;
    /// `on_heartbeat`).
    grant_sent: Option<Timestamp>,
    grant_update: bool,
    ctrl_lost_logged: bool,
    ready: bool,
    ready_at: Option<Timestamp>,
    lease: Timestamp,
    next_hb: Option<Timestamp>,
    hb_seq: u32,
    sent: VecDeque<(u32, Timestamp)>,
    hb_now: bool,
    last_input: Option<Timestamp>,
    awake_since: Timestamp,
    /// End of the last receive-path stall the driver reported
    /// (`rx_stalled`): until an interval after it, silence is no proof.
    rx_resumed: Option<Timestamp>,
    /// Back from a pause past the hold time as a member (the start and
    /// the length of the gap), not yet confirmed: the lease ran out
    /// during the pause, so the node is fenced, and it stays a member
    /// only if the others did not move on without it (`resume`).
    resumed: Option<(Timestamp, Duration)>,
    /// The last such resume: silence is counted from no earlier than it
    /// (heartbeats sent during a pause of the whole host were not lost,
    /// only late).
    resumed_at: Timestamp,
    join: Join,
    retry_at: Option<Timestamp>,
    failures: u32,
    sync: Option<SyncWait>,
    pending: [Option<Pending>; NODE_SLOTS],
    quorum_at: Timestamp,
    catching_up: Option<u64>,
    /// The replicated configuration version the driver says it runs
    /// (`config_applied`; 0: none yet).
    config_running: u64,
    lag_since: Option<Timestamp>,
    replica: Replica,
    pull: Option<(Purpose, Pull)>,
    serving: Serving,
    next_xfer: u32,
    /// Cluster-wide queries (`query`): the one this node asks, and the
    /// answers it gives.
    asking: Option<query::Asking>,
    answering: query::Answering,
    ports: Vec<PortState>,
    /// The data ports are open by this node's order (`DataPorts { up:
    /// true }`): from the first lease after becoming ready until it stops.
    ports_open: bool,
    ports_up_at: Timestamp,
    history: History,
    counters: Counters,
    actions: VecDeque<Action>,
    bad_at: Vec<[Option<Timestamp>; NODE_SLOTS]>,
    disabled: Option<String>,
}

impl Membership {
    pub fn new(c: Config) -> Result<Membership, MembershipError> {
        c.validate()?;
        let mut index = [None; NodeId::MAX_NODES];
        let mut configured = 0u16;
        for (i, n) in c.nodes.iter().enumerate() {
            // Validated: ids are distinct and below 16, so `i` fits.
            index[n.id.index()] = Some(i as u8);
            configured |= 1 << n.id.index();
        }
        Ok(Membership {
            peers: c.nodes.iter().cloned().map(Peer::new).collect(),
            index,
            configured,
            state: State::Joining,
            booted: false,
            set: MemberSet::empty(Epoch(0)),
            control: None,
            ctrl_inc: 0,
            ctrl_seen: Timestamp::ZERO,
            ctrl_heard: None,
            ctrl_echo: None,
            ctrl_grant: None,
            ctrl_lost_logged: false,
            ready: false,
            ready_at: None,
            lease: Timestamp::ZERO,
            next_hb: None,
            hb_seq: 0,
            sent: VecDeque::with_capacity(SENT_RING),
            hb_now: false,
            grant_sent: None,
            grant_update: false,
            last_input: None,
            awake_since: Timestamp::ZERO,
            rx_resumed: None,
            resumed: None,
            resumed_at: Timestamp::ZERO,
            join: Join { started: Timestamp::ZERO, target: None, target_since: Timestamp::ZERO, last_request: None },
            retry_at: None,
            failures: 0,
            sync: None,
            pending: [None; NODE_SLOTS],
            quorum_at: Timestamp::ZERO,
            catching_up: None,
            config_running: 0,
            lag_since: None,
            replica: Replica::new(c.limits, c.config.clone()),
            pull: None,
            serving: Serving::default(),
            next_xfer: c.incarnation.rotate_left(16),
            asking: None,
            answering: query::Answering::default(),
            ports: Vec::new(),
            ports_open: false,
            ports_up_at: Timestamp::ZERO,
            history: History::new(c.limits.history),
            counters: Counters::default(),
            actions: VecDeque::with_capacity(16),
            bad_at: vec![[None; NODE_SLOTS]; Received::COUNT],
            disabled: None,
            cfg: c,
        })
    }

    // --- Reading. ---

    #[inline]
    pub fn me(&self) -> NodeId {
        self.cfg.me
    }
    #[inline]
    pub fn state(&self) -> State {
        self.state
    }
    #[inline]
    pub fn members(&self) -> MemberSet {
        self.set
    }
    #[inline]
    pub fn epoch(&self) -> Epoch {
        self.set.epoch()
    }
    /// The control node this node follows (itself when control).
    #[inline]
    pub fn control(&self) -> Option<NodeId> {
        self.control
    }
    #[inline]
    pub fn ready(&self) -> bool {
        self.ready
    }
    /// The last lease handed out (`Action::Lease`).
    #[inline]
    pub fn lease(&self) -> Timestamp {
        self.lease
    }
    #[inline]
    pub fn heartbeat_interval(&self) -> Duration {
        self.cfg.heartbeat_interval
    }
    #[inline]
    pub fn hold_time(&self) -> Duration {
        self.cfg.hold_time
    }
    #[inline]
    pub fn counters(&self) -> &Counters {
        &self.counters
    }
    /// When the next heartbeat is due (`None`: at the first tick).
    #[inline]
    pub fn next_heartbeat(&self) -> Option<Timestamp> {
        self.next_hb
    }
    /// When `tick` should run next at the latest: the next heartbeat, and
    /// at least every quarter interval (the resolution of hold-time
    /// expiry and retransmissions); at once while admissions wait. After
    /// a `tick` it is always later than that tick's time, so a driver
    /// that sleeps until it never spins.
    pub fn next_wakeup(&self) -> Timestamp {
        let Some(last) = self.last_input else { return Timestamp::ZERO };
        if self.pending.iter().any(Option::is_some) || self.hb_now {
            return last;
        }
        let res = last.saturating_add(self.resolution());
        if self.state == State::Disabled {
            // Silent: no heartbeat is due.
            return res;
        }
        self.next_hb.map_or(res, |h| h.min(res))
    }
    fn resolution(&self) -> Duration {
        Duration(self.cfg.heartbeat_interval.0 / 4)
    }

    pub fn status(&self) -> Status {
        Status {
            state: self.state,
            members: self.set,
            control: self.control,
            ready: self.ready,
            ports_open: self.ports_open,
            lease: self.lease,
            failures: self.failures,
            retry_at: self.retry_at.filter(|_| self.state == State::Inactive),
            disabled: self.disabled.clone(),
            config_version: self.replica.config_version(),
            state_version: self.replica.version(),
            catching_up: self.catching_up.is_some(),
            table_entries: self.replica.live(),
            tombstones: self.replica.tombstones(),
            serving: self.serving.len(),
        }
    }

    /// Every state transition and membership event, oldest first (at most
    /// `Limits::history`).
    pub fn history(&self) -> impl Iterator<Item = &MembershipEvent> {
        self.history.iter()
    }

    /// Every configured node as `show cluster` lists it, ages as of `now`.
    pub fn snapshot(&self, now: Timestamp) -> Vec<MemberView> {
        self.peers.iter().map(|p| self.view(p, now)).collect()
    }

    /// One node's view (`None` for a node that is not configured).
    pub fn member(&self, id: NodeId, now: Timestamp) -> Option<MemberView> {
        self.peer_index(id).map(|i| self.view(&self.peers[i], now))
    }

    fn view(&self, p: &Peer, now: Timestamp) -> MemberView {
        let me = p.id == self.cfg.me;
        let hb = p.hb.as_ref();
        MemberView {
            id: p.id,
            name: p.name.clone(),
            ccl_address: p.ccl_address,
            this_node: me,
            state: if me { Some(self.state) } else { hb.map(|h| h.state) },
            priority: if me { Some(self.cfg.priority) } else { hb.map(|h| h.priority) },
            last_heard: if me { None } else { p.last_heard.map(|t| now.since(t)) },
            heartbeats: p.heartbeats,
            longest_gap: (!me && p.heartbeats > 1).then_some(p.longest_gap),
            incarnation: if me { self.cfg.incarnation } else { p.incarnation },
            epoch: if me { Some(self.set.epoch()) } else { hb.map(|h| h.epoch) },
            control: if me { self.control } else { hb.and_then(|h| h.follows) },
            ready: if me { self.ready } else { hb.is_some_and(|h| matches!(h.state, State::Data | State::Control)) },
            member: self.set.contains(p.id),
            site: if me { self.cfg.place.site } else { hb.and_then(|h| h.place.site) },
            chassis: if me { self.cfg.place.chassis } else { hb.and_then(|h| h.place.chassis) },
        }
    }

    /// The replicated configuration held (the control node's, once joined).
    pub fn config(&self) -> Option<&ConfigBlob> {
        self.replica.config()
    }
    pub fn table_get(&self, table: u8, key: &[u8]) -> Option<&[u8]> {
        self.replica.get(table, key).map(|(_, v)| v)
    }
    /// An entry with its version.
    pub fn table_entry(&self, table: u8, key: &[u8]) -> Option<(u64, &[u8])> {
        self.replica.get(table, key)
    }
    /// Live entries of `table` in key order: (key, value, version).
    pub fn table_iter(&self, table: u8) -> impl Iterator<Item = (&[u8], &[u8], u64)> {
        self.replica.iter(table)
    }
    pub fn table_version(&self, table: u8) -> u64 {
        self.replica.table_version(table)
    }
    /// The cluster-wide version of the replicated tables held.
    pub fn state_version(&self) -> u64 {
        self.replica.version()
    }
    /// Replication lag: how many versions of the replicated state this
    /// node lacks against its control node's, as the control node's last
    /// heartbeat said (0: caught up). `None` on the control node itself or
    /// while no control node's heartbeat has been heard.
    pub fn replica_lag(&self) -> Option<u64> {
        let c = self.control.filter(|&c| c != self.cfg.me)?;
        let h = self.peer(c)?.hb.as_ref()?;
        Some(h.state_version.saturating_sub(self.replica.version()))
    }

    /// A digest of the replicated state held (copies compare equal).
    pub fn replica_fingerprint(&self) -> u64 {
        self.replica.fingerprint()
    }

    /// The next action for the driver, oldest first.
    #[inline]
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    // --- Inputs. ---

    /// The time has come to `now`: heartbeats, hold-time expiry, elections,
    /// admissions and removals, retransmissions, rejoin.
    pub fn tick(&mut self, now: Timestamp) {
        let now = self.begin(now);
        self.ports_tick(now);
        match self.state {
            State::Joining => self.joining_tick(now),
            State::Syncing => self.syncing_tick(now),
            State::Data => self.data_tick(now),
            State::Control => self.control_tick(now),
            State::Inactive => self.inactive_tick(now),
            State::Disabled => {}
        }
        self.replica_tick(now);
        self.query_tick(now);
        if self.ready && self.ready_at.is_some_and(|t| now.since(t) >= self.cfg.rejoin.max) {
            self.failures = 0;
        }
        if self.next_hb.is_none_or(|due| now >= due) {
            self.hb_now = true;
            self.grant_update = false;
        }
        self.end(now);
    }

    /// The driver's receive path (the worker that polls the CCL queue
    /// the heartbeats may land in, or the control lcore itself) did not
    /// run until `now`: heartbeats may wait in it, unread. For one
    /// heartbeat interval from `now` the control node removes no member
    /// for silence (it hears what waited first); the driver reports a
    /// stall that lasts only while it is short of a few hold times, so
    /// a hung worker does not stop removals for good. Safety does not
    /// rest on removals: a silent member's own lease runs out.
    pub fn rx_stalled(&mut self, now: Timestamp) {
        let now = self.begin(now);
        self.counters.rx_stalls += 1;
        self.rx_resumed = Some(self.rx_resumed.map_or(now, |r| r.max(now)));
        self.end(now);
    }

    /// A control-channel message arrived at `now` (authenticated and
    /// fresh: opened with [`ControlLink`] or `Opener::open_control`).
    pub fn on_message(&mut self, now: Timestamp, from: Envelope, msg: &ControlMessage<'_>) -> Received {
        let now = self.begin(now);
        let r = self.receive(now, from, msg);
        self.counters.received[r.index()] += 1;
        self.end(now);
        r
    }

    /// Port carrier from the driver's link polling (`cfg.ccl_port` is the
    /// CCL port, every other port a data port). Debounced: a change counts
    /// once it has lasted `interface_debounce`.
    pub fn on_port(&mut self, now: Timestamp, port: u16, up: bool) {
        let now = self.begin(now);
        match self.ports.iter().position(|p| p.port == port) {
            Some(i) => {
                let p = &mut self.ports[i];
                if p.up != up {
                    p.up = up;
                    p.since = now;
                }
            }
            None if self.ports.len() < MAX_PORTS => self.ports.push(PortState { port, up, since: now }),
            None => {}
        }
        self.ports_tick(now);
        self.end(now);
    }

    /// The dataplane's sync progress (`Pipeline::sync_progress`): bitmap of
    /// peers whose `SyncDone` for `epoch` arrived. A syncing node is ready
    /// once every other member of its join epoch (still a member) is in it.
    /// `sent` (this node's own re-registration) is not waited for: a
    /// joiner owns no flows yet.
    pub fn on_sync(&mut self, now: Timestamp, epoch: Epoch, done_from: u16, _sent: bool) {
        let now = self.begin(now);
        if let (State::Syncing, Some(s)) = (self.state, self.sync.as_mut()) {
            let me = !(1u16 << self.cfg.me.index());
            let need = if epoch == self.set.epoch() {
                Some(self.set.bits() & me)
            } else if epoch == s.epoch {
                Some(s.bits & self.set.bits() & me)
            } else {
                None
            };
            if need.is_some_and(|n| done_from & n == n) {
                s.dataplane_done = true;
                self.syncing_tick(now);
            }
        }
        self.end(now);
    }

    /// The driver runs replicated configuration `version` now (with
    /// `Config::confirm_config`, a joiner's readiness gate waits for the
    /// version it received: it takes traffic under the cluster's policy,
    /// never under its own file's).
    pub fn config_applied(&mut self, now: Timestamp, version: u64) {
        let now = self.begin(now);
        self.config_running = version;
        if self.state == State::Syncing {
            self.syncing_tick(now);
        }
        self.end(now);
    }

    /// Leave `disabled`: start over (inactive, rejoin at once).
    pub fn enable(&mut self, now: Timestamp) {
        let now = self.begin(now);
        if self.state == State::Disabled {
            self.failures = 0;
            self.disabled = None;
            self.retry_at = Some(now);
            self.transition(now, State::Inactive, Reason::Enabled);
        }
        self.end(now);
    }

    /// Set a replicated-table entry (control node only). Returns its
    /// version; every member receives it (`Action::Replica` there and here).
    pub fn table_upsert(&mut self, now: Timestamp, table: u8, key: &[u8], value: &[u8]) -> Result<u64, TableError> {
        self.table_change(now, table, key, Some(value))
    }

    /// Ask the control node for the dynamic-NAT translation of `real` in
    /// `pool`, or renew the one this node holds (`held`: its mapped
    /// address; N4): an `Action::XlateRequest` here when this node is the
    /// control node, else an `XlateRequest` message to it. `false`: no
    /// control node to ask (not a member, or none known).
    pub fn request_xlate(
        &mut self,
        now: Timestamp,
        pool: u16,
        real: std::net::Ipv4Addr,
        held: Option<std::net::Ipv4Addr>,
    ) -> bool {
        let now = self.begin(now);
        let me = self.cfg.me;
        let sent = match (self.state, self.control) {
            (State::Control, _) => {
                self.actions.push_back(Action::XlateRequest { from: me, pool, real, held });
                true
            }
            (State::Data | State::Syncing, Some(c)) if c != me => {
                self.send(c, Outgoing::XlateRequest(XlateRequest { to: c, pool, real, held }));
                true
            }
            _ => false,
        };
        self.end(now);
        sent
    }

    /// Broadcast this node's connection counts to the members (L1;
    /// `controlplane::limits`): `payload` as `LimitReport::encode` makes
    /// it. `false`: not a member, or `payload` does not parse (not sent).
    pub fn broadcast_limits(&mut self, now: Timestamp, payload: Vec<u8>) -> bool {
        let now = self.begin(now);
        let ok = matches!(self.state, State::Control | State::Data | State::Syncing) && LimitReport::parse(&payload).is_ok();
        if ok {
            self.broadcast(Outgoing::LimitReport(payload));
        }
        self.end(now);
        ok
    }

    /// Delete an entry (control node only); `Ok(None)` when absent.
    pub fn table_delete(&mut self, now: Timestamp, table: u8, key: &[u8]) -> Result<Option<u64>, TableError> {
        self.writable()?;
        if self.replica.get(table, key).is_none() {
            return Ok(None);
        }
        self.table_change(now, table, key, None).map(Some)
    }

    /// Replace the replicated configuration (control node only); returns
    /// its new version (the current one, unchanged, when `bytes` are what
    /// it holds). Members fetch it when their heartbeats show them behind.
    pub fn set_config(&mut self, now: Timestamp, bytes: Vec<u8>) -> Result<u64, TableError> {
        self.writable()?;
        if let Some(c) = self.replica.config().filter(|c| c.bytes == bytes) {
            return Ok(c.version);
        }
        let now = self.begin(now);
        let v = self.publish_config(bytes);
        self.end(now);
        v
    }

    /// The driver cannot run the replicated configuration `version` it
    /// was handed (`Action::Replica`; e.g. it names an interface this node
    /// lacks): a node that cannot run the cluster's policy must not take
    /// the cluster's traffic. It leaves as after a failed join (`Reset`,
    /// data ports down, `ConfigRejected`), rejoins after the backoff and,
    /// rejecting again, ends disabled after `rejoin.attempts`. Ignored
    /// when this node no longer holds `version` or is not a member.
    pub fn reject_config(&mut self, now: Timestamp, version: u64) {
        let now = self.begin(now);
        if self.state.is_member() && self.replica.config_version() == version {
            self.counters.configs_rejected += 1;
            self.fail(now, Reason::ConfigRejected { version });
        }
        self.end(now);
    }

    fn publish_config(&mut self, bytes: Vec<u8>) -> Result<u64, TableError> {
        let v = self.replica.set_config(bytes)?;
        self.counters.configs_published += 1;
        self.actions.push_back(Action::Replica(ReplicaChange::Config { version: v }));
        self.hb_now = true;
        Ok(v)
    }

    /// A control node that holds no replicated configuration, and is not
    /// fetching a member's, publishes its own (`Config::publish`).
    fn publish_own_config(&mut self) {
        if self.replica.config().is_some() || self.catching_up.is_some() {
            return;
        }
        if let Some(bytes) = self.cfg.publish.clone() {
            // Its size was checked by `Config::validate`.
            let _ = self.publish_config(bytes);
        }
    }

    fn writable(&self) -> Result<(), TableError> {
        if self.state != State::Control {
            return Err(TableError::NotControl { control: self.control });
        }
        if let Some(want) = self.catching_up {
            return Err(TableError::CatchingUp { want });
        }
        Ok(())
    }

    fn table_change(&mut self, now: Timestamp, table: u8, key: &[u8], value: Option<&[u8]>) -> Result<u64, TableError> {
        self.writable()?;
        let now = self.begin(now);
        let v = self.replica.local_change(table, key, value)?;
        self.counters.table_changes += 1;
        self.actions.push_back(Action::Replica(ReplicaChange::Entry {
            table,
            key: key.to_vec(),
            version: v,
            deleted: value.is_none(),
        }));
        let msg = Outgoing::TableUpdate { version: v, table, key: key.to_vec(), value: value.map(<[u8]>::to_vec) };
        self.broadcast(msg);
        self.end(now);
        Ok(v)
    }

    // --- Input bracket. ---

    fn begin(&mut self, now: Timestamp) -> Timestamp {
        let now = self.last_input.map_or(now, |l| now.max(l));
        if !self.booted {
            self.booted = true;
            self.awake_since = now;
            self.join.started = now;
            self.actions.push_back(Action::DataPorts { up: false });
            self.actions.push_back(Action::Lease(Timestamp::ZERO));
            self.event(now, EventKind::State { from: State::Joining, to: State::Joining, reason: Reason::Boot });
        }
        if let Some(last) = self.last_input {
            let gap = now.since(last);
            if gap > self.cfg.heartbeat_interval.times(2) {
                self.awake_since = now;
            }
            if gap > self.cfg.hold_time && self.state.is_member() {
                self.last_input = Some(now);
                if matches!(self.state, State::Data | State::Control) && self.ready {
                    self.resume(now, gap);
                } else {
                    self.leave(now, Reason::Paused { gap }, self.recent_rejoin(now));
                }
            }
        }
        self.last_input = Some(now);
        now
    }

    /// Back as a member from a pause longer than the hold time. The
    /// others may have removed this node and taken its flows over, or
    /// they may have been paused with it (a stall of the whole host):
    /// leaving at once would cost every flow in the second case, so the
    /// node stays a member, fenced (its lease ran out during the pause
    /// and only a post-pause echo renews it), and listens. A heartbeat of
    /// a newer epoch — a control node elected meanwhile, or one that
    /// removed this node — makes it leave (`on_heartbeat`); its control
    /// node renewing its lease confirms it (`update_lease`: an echo of a
    /// heartbeat sent after the pause, at its epoch: a queued heartbeat
    /// from before the others moved on cannot renew it); a control node
    /// not confirmed within a hold time leaves as before. Until then a
    /// resumed control node marks its heartbeats (`HB_FLAG_RESUMED`): a
    /// control node elected meanwhile, or that one's members, must not
    /// step down for its better rank (`BetterControl`) and lose the
    /// flows they took over.
    fn resume(&mut self, now: Timestamp, gap: Duration) {
        self.resumed_at = now;
        self.resumed = Some((now, gap));
        self.same_state_event(now, Reason::Resumed { gap }, "");
    }

    /// An event that keeps the state (the text names the node and the
    /// reason, then `then`, not a transition).
    fn same_state_event(&mut self, now: Timestamp, reason: Reason, then: &str) {
        let s = self.state;
        let names = |id: NodeId| self.name(id);
        let text = Names(&names).reason(&reason);
        let e = MembershipEvent {
            at: now,
            kind: EventKind::State { from: s, to: s, reason },
            text: format!("{}: {text}{then}", self.name(self.cfg.me)),
        };
        self.history.push(e.clone());
        self.actions.push_back(Action::Event(e));
    }

    fn end(&mut self, now: Timestamp) {
        if self.hb_now && self.state != State::Disabled {
            self.send_heartbeat(now);
        }
        self.hb_now = false;
        self.update_lease(now);
    }

    // --- Helpers. ---

    /// A transfer's (or a query's) retransmission timeout: a quarter
    /// heartbeat interval.
    fn pull_rto(&self) -> Duration {
        Duration((self.cfg.heartbeat_interval.0 / 4).max(1))
    }

    fn peer_index(&self, id: NodeId) -> Option<usize> {
        self.index.get(id.index()).copied().flatten().map(usize::from)
    }
    fn peer(&self, id: NodeId) -> Option<&Peer> {
        self.peer_index(id).map(|i| &self.peers[i])
    }
    fn peer_mut(&mut self, id: NodeId) -> Option<&mut Peer> {
        self.peer_index(id).map(|i| &mut self.peers[i])
    }
    fn name(&self, id: NodeId) -> String {
        self.peer(id).map_or_else(|| id.to_string(), |p| p.name.clone())
    }
    fn hold(&self) -> Duration {
        self.cfg.hold_time
    }
    fn quorum_mode(&self) -> bool {
        self.cfg.split_brain == SplitBrain::Quorum
    }
    /// Quorum mode's reference: the configured nodes (a static quorum).
    fn configured_count(&self) -> usize {
        self.configured.count_ones() as usize
    }
    /// (priority, id) of `id` as last heard (this node: configured).
    fn rank(&self, id: NodeId) -> (u8, u8) {
        if id == self.cfg.me {
            return (self.cfg.priority, id.0);
        }
        (self.peer(id).and_then(|p| p.hb.as_ref()).map_or(u8::MAX, |h| h.priority), id.0)
    }

    fn event(&mut self, now: Timestamp, kind: EventKind) {
        let names = |id: NodeId| self.name(id);
        let text = Names(&names).kind(self.cfg.me, &kind);
        let text = match kind {
            EventKind::State { reason: Reason::Boot, .. } => format!("{} started (joining)", self.name(self.cfg.me)),
            _ => text,
        };
        let e = MembershipEvent { at: now, kind, text };
        self.history.push(e.clone());
        self.actions.push_back(Action::Event(e));
    }

    fn transition(&mut self, now: Timestamp, to: State, reason: Reason) {
        let from = self.state;
        self.state = to;
        self.hb_now = true;
        self.event(now, EventKind::State { from, to, reason });
    }

    /// A refused or bad message: an event at most once per hold time per
    /// peer and outcome.
    fn bad(&mut self, now: Timestamp, peer: NodeId, what: Received, detail: u64) {
        let Some(slot) = self.bad_at.get_mut(what.index()).and_then(|a| a.get_mut(peer.index())) else { return };
        if slot.is_some_and(|t| now.since(t) < self.cfg.hold_time) {
            return;
        }
        *slot = Some(now);
        self.event(now, EventKind::Refused { peer, what, detail });
    }

    fn broadcast(&mut self, msg: Outgoing) {
        if matches!(msg, Outgoing::Heartbeat(_)) {
            self.counters.heartbeats_queued += 1;
        } else {
            self.counters.messages_queued += 1;
        }
        self.actions.push_back(Action::Broadcast { epoch: self.set.epoch(), msg });
    }

    fn send(&mut self, to: NodeId, msg: Outgoing) {
        self.counters.messages_queued += 1;
        self.actions.push_back(Action::Send { to, epoch: self.set.epoch(), msg });
    }

    fn set_members(&mut self, now: Timestamp, set: MemberSet, control: NodeId) {
        self.set = set;
        // The set's users learn the control node with it (N3).
        self.actions.push_back(Action::Members(set.with_control(Some(control))));
        self.hb_now = true;
        self.event(now, EventKind::Members { epoch: set.epoch(), control, bits: set.bits() });
    }

    /// The member set of a heartbeat or reply.
    fn set_from(epoch: Epoch, bits: u16, place: &[Placement; NODE_SLOTS], since: &[Epoch; NODE_SLOTS]) -> MemberSet {
        let members = (0..NODE_SLOTS as u8).filter(|i| bits & (1 << i) != 0).map(|i| {
            let (p, since) = (place[usize::from(i)], since[usize::from(i)]);
            (NodeId(i), MemberInfo { site: p.site, chassis: p.chassis, since })
        });
        // Node ids below 16 only: `from_members` cannot fail here.
        MemberSet::from_members(epoch, members).unwrap_or(MemberSet::empty(epoch))
    }

    fn sent_time(&self, seq: u32) -> Option<Timestamp> {
        self.sent.iter().find(|(s, _)| *s == seq).map(|(_, t)| *t)
    }

    fn send_heartbeat(&mut self, now: Timestamp) {
        self.hb_seq = self.hb_seq.wrapping_add(1).max(1);
        if self.sent.len() >= SENT_RING {
            self.sent.pop_front();
        }
        self.sent.push_back((self.hb_seq, now));
        let me = self.cfg.me;
        let follows = match self.state {
            State::Control => Some(me),
            State::Data | State::Syncing if !self.control_lost(now) => self.control,
            _ => None,
        };
        let member_bitmap = if self.state.is_member() { self.set.bits() } else { 0 };
        let mut h = Heartbeat {
            priority: self.cfg.priority,
            state: self.state.code(),
            follows,
            flags: if self.quorum_mode() { HB_FLAG_QUORUM } else { 0 }
                | if self.state == State::Control && self.resumed.is_some() { HB_FLAG_RESUMED } else { 0 },
            place: self.cfg.place,
            ccl_address: self.peer(me).map_or(std::net::Ipv4Addr::UNSPECIFIED, |p| p.ccl_address),
            seq: self.hb_seq,
            config_version: self.replica.config_version(),
            state_version: self.replica.version(),
            grant_us: self.grant(now).map_or(0, |g| u32::try_from(g.since(now).0 / 1000).unwrap_or(u32::MAX)),
            member_bitmap,
            ..Heartbeat::default()
        };
        self.grant_sent = self.grant(now).filter(|_| h.grant_us > 0);
        for n in self.set.iter() {
            let i = self.set.info(n).unwrap_or_default();
            h.member_place[n.index()] = Placement { site: i.site, chassis: i.chassis };
            h.member_since[n.index()] = i.since;
        }
        let echo_for: u16 = match self.state {
            State::Control => self.set.bits() & !(1 << me.index()),
            State::Data | State::Syncing => self.control.map_or(0, |c| 1 << c.index()),
            _ => 0,
        };
        let control = self.state == State::Control;
        for p in &self.peers {
            // A control node echoes only heartbeats that followed it: the
            // member's lease rests on them (see `member_lease`).
            let seq = if control { p.follow_seq } else { p.rx_seq };
            if echo_for & (1 << p.id.index()) != 0 && seq > 0 {
                h.echo_bitmap |= 1 << p.id.index();
                h.echoes[p.id.index()] = seq;
            }
        }
        self.broadcast(Outgoing::Heartbeat(h));
        self.next_hb = Some(now.saturating_add(self.cfg.heartbeat_interval));
    }

    // --- Leases. ---

    fn update_lease(&mut self, now: Timestamp) {
        let l = match self.state {
            _ if !self.ready => Timestamp::ZERO,
            // No CCL carrier (not debounced yet): this node can neither
            // tell its peers what it does nor hear them, so it stops at
            // once; the flows' last synced state stays the state, and the
            // others take them over once it is removed. A flap shorter
            // than the debounce costs a pause, not a reset.
            _ if self.ccl_carrier_lost() => Timestamp::ZERO,
            State::Data => self.member_lease(),
            State::Control => self.control_lease(now),
            _ => Timestamp::ZERO,
        };
        if let (true, Some((at, _))) = (l > now, self.resumed) {
            self.resumed = None;
            self.same_state_event(now, Reason::Confirmed { fenced: now.since(at) }, "");
        }
        if l != self.lease {
            self.lease = l;
            self.counters.lease_updates += 1;
            self.actions.push_back(Action::Lease(l));
        }
        if self.ready && !self.ports_open && l > now {
            self.ports_open = true;
            self.ports_up_at = now;
            self.actions.push_back(Action::DataPorts { up: true });
        }
    }

    /// `hold − 2 × interval`: a lone control node's lease step (no follower
    /// to echo it), and the reference point of the lease-expired reason.
    fn lease_span(&self) -> Duration {
        Duration(self.cfg.hold_time.0.saturating_sub(self.cfg.heartbeat_interval.0.saturating_mul(2)))
    }

    fn member_lease(&self) -> Timestamp {
        let l = match (self.ctrl_heard, self.ctrl_echo) {
            (Some(_), Some(e)) => e.saturating_add(self.hold()),
            _ => return Timestamp::ZERO,
        };
        if self.quorum_mode() {
            // Never past the control node's own quorum-backed lease: a
            // majority elsewhere cannot elect before it runs out.
            return self.ctrl_grant.map_or(Timestamp::ZERO, |g| l.min(g));
        }
        l
    }

    /// Quorum mode, control node: until when no majority without it can
    /// elect — the echoes of enough followers for a majority with itself
    /// (each of them blocks an election until a hold time after it heard
    /// this node, and every majority contains one of them).
    fn grant(&self, now: Timestamp) -> Option<Timestamp> {
        if !self.quorum_mode() || self.state != State::Control || !self.ready {
            return None;
        }
        let me = self.cfg.me;
        let need = self.configured_count() / 2;
        if need == 0 {
            return None;
        }
        let mut echoes: Vec<Timestamp> = self
            .set
            .iter()
            .filter(|&n| n != me)
            .filter_map(|n| self.peer(n).and_then(|p| p.member).and_then(|m| m.echo_sent))
            .collect();
        echoes.sort_unstable_by(|a, b| b.cmp(a));
        echoes.get(need - 1).map(|e| e.saturating_add(self.hold())).filter(|g| *g > now)
    }

    /// The control node renews its lease while it hears members that
    /// follow it (any one; in quorum mode enough for a majority with
    /// itself), or alone when it is the only member.
    fn control_lease(&self, now: Timestamp) -> Timestamp {
        let me = self.cfg.me;
        let others: Vec<MemberRec> =
            self.set.iter().filter(|&n| n != me).filter_map(|n| self.peer(n).and_then(|p| p.member)).collect();
        let need = if self.quorum_mode() { self.configured_count() / 2 } else { usize::from(!others.is_empty()) };
        if need == 0 {
            return now.saturating_add(self.lease_span());
        }
        let kth = |mut v: Vec<Timestamp>| {
            v.sort_unstable_by(|a, b| b.cmp(a));
            v.get(need - 1).copied()
        };
        let follow = kth(others.iter().filter_map(|m| m.following).collect());
        let echo = kth(others.iter().filter_map(|m| m.echo_sent).collect());
        match (follow, echo) {
            (Some(_), Some(e)) => e.saturating_add(self.hold()),
            _ => Timestamp::ZERO,
        }
    }

    // --- Leaving. ---

    /// Ready (taking traffic) since less than `rejoin.max`: leaving now
    /// counts as a failed rejoin.
    fn recent_rejoin(&self, now: Timestamp) -> bool {
        self.ready && self.ready_at.is_some_and(|t| now.since(t) < self.cfg.rejoin.max)
    }

    fn backoff(&self) -> Duration {
        let shift = self.failures.saturating_sub(1).min(30);
        Duration(self.cfg.rejoin.initial.0.saturating_mul(1 << shift).min(self.cfg.rejoin.max.0))
    }

    /// Stop being a member: fence, reset, data ports down; inactive until
    /// the retry (at once for reasons that are no fault of this node, after
    /// the backoff otherwise: `rejoin.initial` doubled per consecutive
    /// failure); `failed` counts towards disabling.
    fn leave(&mut self, now: Timestamp, reason: Reason, failed: bool) {
        if matches!(self.state, State::Inactive | State::Disabled) {
            return;
        }
        // This node's fault (it stalled, its port failed, its join failed,
        // or it was removed while it still heard the control node: its
        // own messages were not getting through) waits out the backoff;
        // the rest (a heal, a partition, a lost or new control node, no
        // quorum, no CCL carrier) rejoins at once.
        let fault = match reason {
            Reason::Removed { .. } => !self.control_lost(now),
            Reason::BetterControl { .. }
            | Reason::NotIncluded { .. }
            | Reason::ControlLost { .. }
            | Reason::LeaseExpired { .. }
            | Reason::CclDown
            | Reason::NoQuorum { .. } => false,
            _ => true,
        };
        self.stop(now);
        if failed {
            self.failures += 1;
            self.counters.rejoin_failures += 1;
        }
        if self.failures >= self.cfg.rejoin.attempts {
            let attempts = self.failures;
            self.transition(now, State::Inactive, reason);
            self.disable(now, Reason::TooManyAttempts { attempts });
            return;
        }
        // Not this node's fault (a heal, a new control node without it,
        // no quorum, the CCL's carrier): rejoin at once, whatever the
        // earlier failures; the CCL case waits for the carrier anyway.
        let delay = if fault { self.backoff() } else { Duration(0) };
        self.retry_at = Some(now.saturating_add(delay));
        self.transition(now, State::Inactive, reason);
    }

    /// A rejoin attempt failed (refused, timed out).
    fn fail(&mut self, now: Timestamp, reason: Reason) {
        self.leave(now, reason, true);
    }

    fn disable(&mut self, now: Timestamp, reason: Reason) {
        self.stop(now);
        let names = |id: NodeId| self.name(id);
        self.disabled = Some(Names(&names).reason(&reason));
        self.retry_at = None;
        self.transition(now, State::Disabled, reason);
    }

    /// Fence, reset and shut the data ports; forget the member set (its
    /// epoch stays) and the control-node duties.
    fn stop(&mut self, now: Timestamp) {
        if self.state.is_member() {
            self.counters.leaves += 1;
            self.actions.push_back(Action::Lease(Timestamp::ZERO));
            self.lease = Timestamp::ZERO;
            self.actions.push_back(Action::Reset);
        }
        if self.ports_open {
            self.actions.push_back(Action::DataPorts { up: false });
        }
        self.ports_open = false;
        self.ready = false;
        self.ready_at = None;
        self.resumed = None;
        self.control = None;
        self.ctrl_heard = None;
        self.ctrl_echo = None;
        self.ctrl_grant = None;
        self.sync = None;
        self.pending = [None; NODE_SLOTS];
        self.catching_up = None;
        self.lag_since = None;
        self.pull = None;
        for p in &mut self.peers {
            p.member = None;
        }
        if !self.set.is_empty() {
            self.set = MemberSet::empty(self.set.epoch());
        }
        self.join = Join { started: now, target: None, target_since: now, last_request: None };
        self.hb_now = true;
    }

    /// Ready: a member with its state in sync. The data ports open with
    /// the first lease (`update_lease`), not here: a data member's lease
    /// waits for its control node's next heartbeat echoing one of its own
    /// (up to an interval and a round trip), and ports open before it
    /// would take traffic only to drop it as fenced.
    fn become_ready(&mut self, now: Timestamp) {
        if !self.ready {
            self.ready = true;
            self.ready_at = Some(now);
        }
    }

    // --- Ports. ---

    fn port_down_for(&self, now: Timestamp, port: u16, from: Timestamp) -> bool {
        self.ports
            .iter()
            .any(|p| p.port == port && !p.up && now.since(p.since.max(from)) >= self.cfg.interface_debounce)
    }

    /// The CCL port reports no carrier (however briefly).
    fn ccl_carrier_lost(&self) -> bool {
        let Some(c) = self.cfg.ccl_port else { return false };
        self.ports.iter().any(|p| p.port == c && !p.up)
    }

    /// The CCL has carrier (debounced), or no CCL reports are configured.
    fn ccl_usable(&self, now: Timestamp) -> bool {
        let Some(c) = self.cfg.ccl_port else { return true };
        self.ports
            .iter()
            .find(|p| p.port == c)
            .is_none_or(|p| p.up && now.since(p.since) >= self.cfg.interface_debounce)
    }

    fn ports_tick(&mut self, now: Timestamp) {
        if let Some(c) = self.cfg.ccl_port {
            if matches!(self.state, State::Joining | State::Syncing | State::Data | State::Control)
                && self.port_down_for(now, c, Timestamp::ZERO)
            {
                self.leave(now, Reason::CclDown, false);
                return;
            }
        }
        if !self.ports_open {
            // Data ports are down by our own order: their reports say so.
            return;
        }
        let ccl = self.cfg.ccl_port;
        let down = self
            .ports
            .iter()
            .find(|p| Some(p.port) != ccl && !p.up && now.since(p.since.max(self.ports_up_at)) >= self.cfg.interface_debounce)
            .map(|p| p.port);
        if let Some(port) = down {
            let failed = self.recent_rejoin(now);
            self.leave(now, Reason::PortDown { port }, failed);
        }
    }

    // --- Per-state timers. ---

    fn inactive_tick(&mut self, now: Timestamp) {
        if !self.ccl_usable(now) {
            return;
        }
        if self.retry_at.is_some_and(|t| now >= t) {
            self.retry_at = None;
            self.counters.rejoin_attempts += 1;
            self.join = Join { started: now, target: None, target_since: now, last_request: None };
            self.transition(now, State::Joining, Reason::RetryDue);
        }
    }

    /// The best control node heard within the hold time (or, failing
    /// that, one a heard node says it follows).
    fn join_target(&self, now: Timestamp) -> Option<NodeId> {
        let hold = self.hold();
        let me = self.cfg.me;
        let direct = self
            .peers
            .iter()
            .filter(|p| p.id != me)
            .filter(|p| p.fresh(now, hold).is_some_and(|h| h.state == State::Control))
            .map(|p| p.id)
            .min_by_key(|&id| self.rank(id));
        direct.or_else(|| {
            self.peers
                .iter()
                .filter(|p| p.id != me)
                .filter_map(|p| p.fresh(now, hold).and_then(|h| h.follows))
                .filter(|&q| q != me && self.configured & (1 << q.index()) != 0)
                .min_by_key(|&q| self.rank(q))
        })
    }

    fn joining_tick(&mut self, now: Timestamp) {
        let target = self.join_target(now);
        if target != self.join.target {
            self.join.target = target;
            self.join.target_since = now;
            self.join.last_request = None;
        }
        match target {
            Some(t) => {
                if now.since(self.join.target_since) >= self.hold().times(2) {
                    self.fail(now, Reason::JoinTimeout { control: t });
                    return;
                }
                if self.join.last_request.is_none_or(|l| now.since(l) >= self.cfg.heartbeat_interval) {
                    self.join.last_request = Some(now);
                    let r = JoinRequest {
                        to: t,
                        priority: self.cfg.priority,
                        place: self.cfg.place,
                        ccl_address: self.peer(self.cfg.me).map_or(std::net::Ipv4Addr::UNSPECIFIED, |p| p.ccl_address),
                        config_version: self.replica.config_version(),
                        config_digest: self.replica.config_digest(),
                        workers: self.cfg.workers,
                    };
                    self.send(t, Outgoing::JoinRequest(r));
                }
            }
            None => {
                let listened = now.since(self.awake_since) >= self.hold() && now.since(self.join.started) >= self.hold();
                if listened {
                    if let Vote::Win { include, candidates } = self.election(now) {
                        self.become_control(now, include, candidates);
                    }
                }
            }
        }
    }

    fn control_silent(&self, now: Timestamp) -> Duration {
        now.since(self.ctrl_seen.max(self.resumed_at))
    }

    fn control_lost(&self, now: Timestamp) -> bool {
        self.control.is_some() && self.control != Some(self.cfg.me) && self.control_silent(now) >= self.hold()
    }

    fn syncing_tick(&mut self, now: Timestamp) {
        if self.control_lost(now) {
            let control = self.control.unwrap_or(self.cfg.me);
            self.leave(now, Reason::ControlLost { control, silent: self.control_silent(now) }, false);
            return;
        }
        let Some(s) = self.sync else { return };
        let waited = now.since(s.started);
        let running = !self.cfg.confirm_config || self.config_running == self.replica.config_version();
        if s.replica_done && s.dataplane_done && running {
            self.become_data(now, Reason::Synced { waited });
        } else if waited >= self.cfg.sync_timeout {
            if s.replica_done {
                self.counters.sync_timeouts += 1;
                self.become_data(now, Reason::SyncTimeout { waited });
            } else {
                self.fail(now, Reason::ReplicaTimeout { waited });
            }
        }
    }

    fn become_data(&mut self, now: Timestamp, reason: Reason) {
        self.sync = None;
        self.become_ready(now);
        self.transition(now, State::Data, reason);
    }

    fn data_tick(&mut self, now: Timestamp) {
        if !self.control_lost(now) {
            return;
        }
        let silent = self.control_silent(now);
        if !self.ctrl_lost_logged {
            self.ctrl_lost_logged = true;
            let control = self.control.unwrap_or(self.cfg.me);
            self.same_state_event(now, Reason::ControlLost { control, silent }, "; electing");
            self.hb_now = true;
        }
        if silent >= self.hold().times(2) {
            let by = now.since(self.ctrl_seen.saturating_add(self.lease_span()));
            let failed = self.recent_rejoin(now);
            self.leave(now, Reason::LeaseExpired { by }, failed);
            return;
        }
        if now.since(self.awake_since) < self.hold() {
            return;
        }
        match self.election(now) {
            Vote::Win { include, candidates } => self.become_control(now, include, candidates),
            Vote::NoQuorum { heard, of } => self.leave(now, Reason::NoQuorum { heard, of }, false),
            Vote::Wait => {}
        }
    }

    /// Should this node take the control role now? Candidates are the
    /// nodes heard within the hold time that follow no control node (a
    /// heard control node, or a node still following one, means wait);
    /// members of this node's set (same epoch) come before joiners, so a
    /// joining node never takes over from the members; the best (lowest
    /// priority number, then lowest id) wins.
    fn election(&self, now: Timestamp) -> Vote {
        let hold = self.hold();
        let me = self.cfg.me;
        let member = self.state == State::Data;
        let my_epoch = self.set.epoch();
        let mine = (self.cfg.priority, me.0);
        let mut data: Vec<(u8, u8)> = Vec::new();
        let mut joiners: Vec<(u8, u8)> = Vec::new();
        if member {
            data.push(mine);
        } else {
            joiners.push(mine);
        }
        let mut include = 0u16;
        for p in self.peers.iter().filter(|p| p.id != me) {
            let Some(h) = p.fresh(now, hold) else { continue };
            if h.state == State::Control || h.follows.is_some() {
                return Vote::Wait;
            }
            let bit = 1u16 << p.id.index();
            match h.state {
                State::Data if !member => data.push((h.priority, p.id.0)),
                State::Data if h.epoch == my_epoch && self.set.contains(p.id) => {
                    data.push((h.priority, p.id.0));
                    include |= bit;
                }
                State::Joining => {
                    joiners.push((h.priority, p.id.0));
                    include |= bit;
                }
                _ => {}
            }
        }
        if self.quorum_mode() {
            let reference = self.configured;
            let heard = ((include | (1 << me.index())) & reference).count_ones() as u8;
            let of = reference.count_ones() as u8;
            if u16::from(heard) * 2 <= u16::from(of) {
                return Vote::NoQuorum { heard, of };
            }
        }
        let pool = if data.is_empty() { &joiners } else { &data };
        let winner = pool.iter().min().copied();
        let candidates = (data.len() + joiners.len()) as u8;
        if winner == Some(mine) {
            Vote::Win { include, candidates }
        } else {
            Vote::Wait
        }
    }

    fn become_control(&mut self, now: Timestamp, include: u16, candidates: u8) {
        let me = self.cfg.me;
        let hold = self.hold();
        let top = self.peers.iter().filter_map(|p| p.fresh(now, hold)).map(|h| h.epoch).max().unwrap_or(Epoch(0));
        let epoch = Epoch(self.set.epoch().max(top).0.saturating_add(1));
        // Admission epochs (`MemberInfo::since`): a member of the set this
        // node ran that still runs keeps its own; a node that joins (new,
        // or heard joining: it restarted or left, its state is gone) is
        // admitted now — the members' pipelines then treat it as rejoined
        // even when the set's bits do not change (docs/failover.md).
        let set = self.set;
        let kept = |n: NodeId, joining: bool| match set.info(n) {
            Some(i) if !joining => i.since,
            _ => epoch,
        };
        let mine = kept(me, self.state == State::Joining);
        let mut members = vec![(me, MemberInfo { site: self.cfg.place.site, chassis: self.cfg.place.chassis, since: mine })];
        for p in self.peers.iter_mut().filter(|p| include & (1 << p.id.index()) != 0) {
            let place = p.hb.map(|h| h.place).unwrap_or_default();
            let since = kept(p.id, p.hb.is_none_or(|h| h.state == State::Joining));
            members.push((p.id, MemberInfo { site: place.site, chassis: place.chassis, since }));
            p.member = Some(MemberRec {
                incarnation: p.incarnation,
                admitted: now,
                heard: p.last_heard.unwrap_or(now),
                following: None,
                echo_sent: None,
                confirmed: false,
            });
        }
        let set = MemberSet::from_members(epoch, members).unwrap_or(MemberSet::empty(epoch));
        self.control = Some(me);
        self.ctrl_inc = self.cfg.incarnation;
        self.ctrl_lost_logged = false;
        self.quorum_at = now;
        self.counters.elections_won += 1;
        self.counters.epochs_created += 1;
        self.transition(now, State::Control, Reason::Elected { candidates });
        self.set_members(now, set, me);
        // A node elected from joining has nothing to wait for.
        self.become_ready(now);
        self.update_catch_up(now);
        self.publish_own_config();
    }

    fn control_tick(&mut self, now: Timestamp) {
        if let Some((at, gap)) = self.resumed {
            // Unconfirmed after a pause: no epoch, no configuration, no
            // removal until a member says it still follows this node.
            if now.since(at) >= self.hold() {
                self.leave(now, Reason::Paused { gap }, self.recent_rejoin(now));
            }
            return;
        }
        self.publish_own_config();
        let me = self.cfg.me;
        let hold = self.hold();
        let heard = 1 + self
            .set
            .iter()
            .filter(|&n| n != me)
            .filter(|&n| self.peer(n).and_then(|p| p.member).is_some_and(|m| now.since(m.heard.max(self.resumed_at)) < hold))
            .count();
        let quorum = heard * 2 > self.configured_count();
        if self.quorum_mode() {
            if quorum {
                self.quorum_at = now;
            } else if now.since(self.quorum_at) >= hold {
                let (h, of) = (heard as u8, self.configured_count() as u8);
                self.leave(now, Reason::NoQuorum { heard: h, of }, false);
                return;
            }
        }
        let mut removed: Vec<(NodeId, Reason)> = Vec::new();
        for n in self.set.iter().filter(|&n| n != me) {
            let Some(p) = self.peer(n) else { continue };
            let Some(m) = p.member else {
                removed.push((n, Reason::NeverFollowed));
                continue;
            };
            let silent = now.since(m.heard.max(self.resumed_at));
            let said = p.hb.filter(|h| p.incarnation == m.incarnation && h.at >= m.admitted).map(|h| h.state);
            if silent >= hold && self.rx_resumed.is_some_and(|r| now.since(r) < self.cfg.heartbeat_interval) {
                self.counters.removals_deferred += 1;
            } else if silent >= hold {
                removed.push((n, Reason::NoHeartbeat { silent }));
            } else if let Some(s @ (State::Inactive | State::Disabled)) = said {
                removed.push((n, Reason::Left { state: s }));
            } else if let (true, Some(s @ State::Joining)) = (m.confirmed, said) {
                removed.push((n, Reason::Left { state: s }));
            } else if !m.confirmed && now.since(m.admitted) >= hold.times(2) {
                removed.push((n, Reason::NeverFollowed));
            }
        }
        if self.quorum_mode() && !quorum {
            removed.clear();
        }
        let admit: Vec<(NodeId, Pending)> =
            (0..NODE_SLOTS as u8).filter_map(|i| self.pending[usize::from(i)].map(|p| (NodeId(i), p))).collect();
        self.pending = [None; NODE_SLOTS];
        if !removed.is_empty() || !admit.is_empty() {
            self.change_set(now, &removed, &admit);
        }
    }

    /// A new epoch without `removed` and with `admit`.
    fn change_set(&mut self, now: Timestamp, removed: &[(NodeId, Reason)], admit: &[(NodeId, Pending)]) {
        let me = self.cfg.me;
        let top = admit.iter().map(|(_, p)| p.epoch).max().unwrap_or(Epoch(0));
        let epoch = Epoch(self.set.epoch().max(top).0.saturating_add(1));
        let mut members: Vec<(NodeId, MemberInfo)> = self
            .set
            .iter()
            .filter(|n| !removed.iter().any(|(r, _)| r == n))
            .map(|n| (n, self.set.info(n).unwrap_or_default()))
            .collect();
        for (n, reason) in removed {
            if let Some(p) = self.peer_mut(*n) {
                p.member = None;
            }
            self.counters.members_removed += 1;
            self.event(now, EventKind::Removed { node: *n, epoch, reason: *reason });
        }
        for (n, pend) in admit {
            members.retain(|(m, _)| m != n);
            // Admitted now, also a member readmitted after a restart (its
            // state is gone: `MemberInfo::since`).
            members.push((*n, MemberInfo { site: pend.place.site, chassis: pend.place.chassis, since: epoch }));
            if let Some(p) = self.peer_mut(*n) {
                p.member = Some(MemberRec {
                    incarnation: pend.incarnation,
                    admitted: now,
                    heard: now,
                    following: None,
                    echo_sent: None,
                    confirmed: false,
                });
            }
            self.counters.members_admitted += 1;
            self.event(now, EventKind::Admitted { node: *n, epoch });
        }
        let set = MemberSet::from_members(epoch, members).unwrap_or(MemberSet::empty(epoch));
        self.counters.epochs_created += 1;
        self.set_members(now, set, me);
        for (n, pend) in admit {
            self.reply(*n, pend.incarnation, JoinVerdict::Accepted, 0);
        }
    }

    fn reply(&mut self, to: NodeId, inc: u32, verdict: JoinVerdict, detail: u64) {
        let accepted = verdict == JoinVerdict::Accepted;
        let mut r = JoinReply {
            to,
            to_incarnation: inc,
            verdict,
            detail,
            member_bitmap: if accepted { self.set.bits() } else { 0 },
            member_place: [Placement::default(); NODE_SLOTS],
            member_since: [Epoch(0); NODE_SLOTS],
        };
        if accepted {
            for n in self.set.iter() {
                let i = self.set.info(n).unwrap_or_default();
                r.member_place[n.index()] = Placement { site: i.site, chassis: i.chassis };
                r.member_since[n.index()] = i.since;
            }
            self.send(to, Outgoing::JoinReply(r));
        } else {
            // A refusal is broadcast: a second machine with this node id
            // is not at the configured address a unicast would go to.
            self.counters.joins_refused += 1;
            self.broadcast(Outgoing::JoinReply(r));
        }
    }

    // --- Replicated state. ---

    fn start_pull(&mut self, now: Timestamp, purpose: Purpose, from: NodeId, full: bool) {
        self.next_xfer = self.next_xfer.wrapping_add(1);
        let p = Pull::new(now, from, self.next_xfer, full, self.replica.version(), self.replica.config_version());
        self.pull = Some((purpose, p));
    }

    /// Does a member hold a newer replicated state than this control node?
    fn update_catch_up(&mut self, now: Timestamp) {
        if self.state != State::Control {
            self.catching_up = None;
            return;
        }
        let hold = self.hold();
        let (mine, mine_cfg) = (self.replica.version(), self.replica.config_version());
        let best = self
            .set
            .iter()
            .filter(|&n| n != self.cfg.me)
            .filter_map(|n| self.peer(n))
            .filter(|p| p.member.is_some_and(|m| m.incarnation == p.incarnation))
            .filter_map(|p| p.fresh(now, hold).filter(|h| h.state == State::Data).map(|h| (p.id, h)))
            .filter(|(_, h)| h.state_version > mine || h.config_version > mine_cfg)
            .max_by_key(|(id, h)| (h.state_version, h.config_version, std::cmp::Reverse(id.0)))
            .map(|(id, h)| (id, h.state_version));
        match best {
            None => self.catching_up = None,
            Some((from, want)) => {
                if self.catching_up != Some(want) {
                    self.event(now, EventKind::CatchUp { from, version: want });
                }
                self.catching_up = Some(want);
                if self.pull.is_none() {
                    self.start_pull(now, Purpose::CatchUp, from, false);
                }
            }
        }
    }

    fn replica_tick(&mut self, now: Timestamp) {
        self.serving.expire(now, self.hold().times(2));
        if self.state == State::Control {
            self.update_catch_up(now);
        }
        if let (State::Data | State::Syncing, Some(k), None) = (self.state, self.control, &self.pull) {
            let synced = self.state == State::Data || self.sync.is_some_and(|s| s.replica_done);
            let ahead = self
                .peer(k)
                .and_then(|p| p.fresh(now, self.hold()).filter(|_| p.incarnation == self.ctrl_inc))
                .filter(|h| h.state == State::Control)
                .is_some_and(|h| h.state_version > self.replica.version() || h.config_version > self.replica.config_version());
            if synced && ahead {
                let since = *self.lag_since.get_or_insert(now);
                if now.since(since) >= Duration(self.cfg.heartbeat_interval.0 / 2) {
                    self.lag_since = None;
                    self.start_pull(now, Purpose::Lag, k, false);
                }
            } else {
                self.lag_since = None;
            }
        }
        let rto = self.pull_rto();
        let timeout = self.cfg.sync_timeout;
        let mut req = None;
        let mut abort = false;
        if let Some((_, p)) = self.pull.as_mut() {
            if now.since(p.started) >= timeout {
                abort = true;
            } else {
                req = p.request(now, rto).map(|r| (p.from, r));
            }
        }
        if abort {
            self.counters.transfers_aborted += 1;
            let purpose = self.pull.take().map(|(p, _)| p);
            if purpose == Some(Purpose::Join) {
                if let Some(k) = self.control {
                    self.start_pull(now, Purpose::Join, k, true);
                }
            }
        }
        if let Some((to, r)) = req {
            self.send(to, Outgoing::SyncRequest(r));
        }
    }

    fn pull_done(&mut self, now: Timestamp, purpose: Purpose, bytes: &[u8]) {
        match self.replica.apply_stream(bytes) {
            Ok(changes) => {
                self.counters.transfers_completed += 1;
                for c in changes {
                    self.actions.push_back(Action::Replica(c));
                }
                match purpose {
                    Purpose::Join => {
                        if let Some(s) = self.sync.as_mut() {
                            s.replica_done = true;
                        }
                        self.syncing_tick(now);
                    }
                    Purpose::CatchUp => self.update_catch_up(now),
                    Purpose::Lag => {}
                }
            }
            Err(_) => {
                self.counters.transfers_aborted += 1;
                if purpose == Purpose::Join {
                    if let Some(k) = self.control {
                        self.start_pull(now, Purpose::Join, k, true);
                    }
                }
            }
        }
    }

    // --- Messages. ---

    fn receive(&mut self, now: Timestamp, from: Envelope, msg: &ControlMessage<'_>) -> Received {
        let me = self.cfg.me;
        if from.sender == me {
            return Received::FromSelf;
        }
        let Some(i) = self.peer_index(from.sender) else {
            if from.sender.index() < NODE_SLOTS {
                self.bad(now, from.sender, Received::UnknownSender, 0);
            }
            return Received::UnknownSender;
        };
        if from.incarnation < self.peers[i].incarnation {
            return Received::StaleIncarnation;
        }
        // Cluster-wide queries: answered in every state (a disabled node's
        // `show cluster` says why it is disabled).
        match msg {
            ControlMessage::QueryRequest(r) => {
                self.peers[i].heard(now, from.incarnation);
                return self.on_query_request(now, from, r);
            }
            ControlMessage::QueryChunk(c) => {
                self.peers[i].heard(now, from.incarnation);
                return self.on_query_chunk(now, from, c);
            }
            _ => {}
        }
        if self.state == State::Disabled {
            // Silent and deaf: a disabled node only serves `show cluster`.
            self.peers[i].heard(now, from.incarnation);
            return Received::Ignored;
        }
        match msg {
            ControlMessage::Heartbeat(h) => self.on_heartbeat(now, i, from, h),
            // Heard only once it passes the identity checks: a second
            // machine with this id must not raise the incarnation.
            ControlMessage::JoinRequest(r) => self.on_join_request(now, i, from, r),
            ControlMessage::JoinReply(r) => {
                self.peers[i].heard(now, from.incarnation);
                self.on_join_reply(now, from, r)
            }
            ControlMessage::SyncRequest(r) => {
                self.peers[i].heard(now, from.incarnation);
                self.on_sync_request(now, from, r)
            }
            ControlMessage::SyncChunk(c) => {
                self.peers[i].heard(now, from.incarnation);
                self.on_sync_chunk(now, from, c)
            }
            ControlMessage::TableUpdate(u) => {
                self.peers[i].heard(now, from.incarnation);
                self.on_table_update(now, from, u)
            }
            ControlMessage::XlateRequest(r) => {
                self.peers[i].heard(now, from.incarnation);
                self.on_xlate_request(from, r)
            }
            ControlMessage::LimitReport(r) => {
                self.peers[i].heard(now, from.incarnation);
                self.on_limit_report(from, r)
            }
            ControlMessage::QueryRequest(_) | ControlMessage::QueryChunk(_) => Received::Ignored,
        }
    }

    /// A member's connection counts: handed to the limit estimate; from a
    /// non-member (or to a node that is not one), ignored.
    fn on_limit_report(&mut self, from: Envelope, r: &LimitReport<'_>) -> Received {
        if !self.set.contains(from.sender) || !self.set.contains(self.cfg.me) {
            return Received::Ignored;
        }
        self.actions.push_back(Action::LimitReport {
            from: from.sender,
            seq: r.seq,
            classes: r.classes().collect(),
            clients: r.clients().collect(),
        });
        Received::LimitReport
    }

    fn on_heartbeat(&mut self, now: Timestamp, i: usize, from: Envelope, h: &Heartbeat) -> Received {
        let p = &self.peers[i];
        if h.ccl_address != p.ccl_address {
            let detail = u64::from(u32::from(h.ccl_address));
            self.bad(now, from.sender, Received::DuplicateId, detail);
            return Received::DuplicateId;
        }
        let me = self.cfg.me;
        self.peers[i].heard(now, from.incarnation);
        if !self.peers[i].heartbeat(now, from.epoch, h, me) {
            return Received::Reordered;
        }
        let st = State::from_code(h.state).unwrap_or(State::Inactive);
        let p_id = from.sender;
        let includes_me = h.member_bitmap & (1 << me.index()) != 0;
        let resumed_control = st == State::Control && h.flags & HB_FLAG_RESUMED != 0;
        if let Some((_, gap)) = self.resumed {
            // A member set newer than this node's, from a control node or
            // a node that follows one: the cluster moved on during the
            // pause (a control node elected meanwhile never counts the
            // paused one; a data node counted in a newer set adopts it
            // below).
            let claims = st == State::Control || h.follows.is_some();
            let without_me = self.state == State::Control || !includes_me;
            if claims && from.epoch > self.set.epoch() && without_me {
                self.leave(now, Reason::Paused { gap }, self.recent_rejoin(now));
                return Received::Heartbeat;
            }
        }
        match self.state {
            State::Control => {
                if st == State::Control {
                    if !resumed_control && self.rank(p_id) < self.rank(me) {
                        self.leave(now, Reason::BetterControl { control: p_id }, false);
                    }
                    return Received::Heartbeat;
                }
                let echo = h.echo_bitmap & (1 << me.index()) != 0;
                let echo_sent = if echo { self.sent_time(h.echoes[me.index()]) } else { None };
                let my_epoch = self.set.epoch();
                let peer = &mut self.peers[i];
                if let Some(m) = peer.member.as_mut().filter(|m| m.incarnation == from.incarnation) {
                    if h.follows == Some(me) && from.epoch == my_epoch {
                        m.following = Some(now);
                        // Echoed from now on (`send_heartbeat`): it follows
                        // this control node at its epoch.
                        peer.follow_seq = peer.follow_seq.max(h.seq);
                        if matches!(st, State::Data | State::Syncing) {
                            m.confirmed = true;
                        }
                        if let Some(t) = echo_sent {
                            m.echo_sent = Some(m.echo_sent.map_or(t, |e| e.max(t)));
                        }
                    }
                }
                // Members lease only within a grant: announce a first one
                // now; and when the echoes a grant rests on just moved it
                // on, announce that at once too (once per interval), not an
                // interval later — a member converts the grant to its own
                // clock from its echoed heartbeat's send time, so every
                // moment between that and this node's send is lost to its
                // lease (docs/membership.md, "Quorum leases"). `grant` is
                // `None` outside quorum mode.
                if let Some(g) = self.grant(now) {
                    let moved_on = !self.grant_update && self.grant_sent.is_some_and(|s| g > s);
                    if self.grant_sent.is_none() || moved_on {
                        self.hb_now = true;
                        self.grant_update = true;
                    }
                }
                Received::Heartbeat
            }
            State::Data | State::Syncing => {
                let ours = Some(p_id) == self.control && from.incarnation == self.ctrl_inc;
                if st == State::Control && ours {
                    if from.epoch < self.set.epoch() {
                        return Received::StaleEpoch;
                    }
                    if from.epoch > self.set.epoch() && !includes_me {
                        let failed = self.recent_rejoin(now) && !self.control_lost(now);
                        self.leave(now, Reason::Removed { control: p_id, epoch: from.epoch }, failed);
                        return Received::Heartbeat;
                    }
                    self.ctrl_seen = self.ctrl_seen.max(now);
                    if self.ctrl_lost_logged {
                        self.ctrl_lost_logged = false;
                        self.hb_now = true;
                    }
                    if from.epoch > self.set.epoch() {
                        let set = Self::set_from(from.epoch, h.member_bitmap, &h.member_place, &h.member_since);
                        self.counters.epochs_adopted += 1;
                        self.set_members(now, set, p_id);
                    }
                    self.control_heard(now, h);
                    return Received::Heartbeat;
                }
                // A resumed control node this node does not follow claims
                // nothing here.
                if st == State::Control && !resumed_control {
                    if self.state == State::Data && from.epoch > self.set.epoch() && includes_me {
                        // A new control node (elected after ours was lost)
                        // counts this node among its members.
                        let set = Self::set_from(from.epoch, h.member_bitmap, &h.member_place, &h.member_since);
                        self.control = Some(p_id);
                        self.ctrl_inc = from.incarnation;
                        self.ctrl_seen = now;
                        self.ctrl_echo = None;
                        self.ctrl_grant = None;
                        self.ctrl_lost_logged = false;
                        self.counters.epochs_adopted += 1;
                        self.set_members(now, set, p_id);
                        self.control_heard(now, h);
                    } else if !self.control_lost(now) {
                        if let Some(k) = self.control {
                            if self.rank(p_id) < self.rank(k) {
                                self.leave(now, Reason::BetterControl { control: p_id }, false);
                            }
                        }
                    } else {
                        self.leave(now, Reason::NotIncluded { control: p_id }, false);
                    }
                }
                Received::Heartbeat
            }
            _ => Received::Heartbeat,
        }
    }

    /// A heartbeat of the followed control node at this node's epoch:
    /// the lease's two inputs.
    fn control_heard(&mut self, now: Timestamp, h: &Heartbeat) {
        let me = self.cfg.me;
        self.ctrl_heard = Some(now);
        if self.quorum_mode() && self.next_hb.is_none_or(|due| due <= now.saturating_add(Duration(self.cfg.heartbeat_interval.0 / 2))) {
            // Answer the control node's timed heartbeat at once (the timer
            // restarts from here, so the rate stays one per interval; its
            // grant update half an interval later gets no answer): the
            // grant rests on the followers' echoes, and a follower
            // answering on its own phase would age them by up to an
            // interval, which with hold = 3 × interval leaves no margin
            // (docs/membership.md, "Quorum leases").
            self.hb_now = true;
        }
        if h.echo_bitmap & (1 << me.index()) != 0 {
            if let Some(t) = self.sent_time(h.echoes[me.index()]) {
                self.ctrl_echo = Some(self.ctrl_echo.map_or(t, |e| e.max(t)));
                // The grant was reckoned when the control node sent this
                // heartbeat, after it received ours (sent at `t`): from `t`
                // it is a bound that errs on the safe side.
                if h.grant_us > 0 {
                    let g = t.saturating_add(Duration(u64::from(h.grant_us) * 1000));
                    self.ctrl_grant = Some(self.ctrl_grant.map_or(g, |c| c.max(g)));
                }
            }
        }
    }

    fn on_join_request(&mut self, now: Timestamp, i: usize, from: Envelope, r: &JoinRequest) -> Received {
        let me = self.cfg.me;
        let (n, inc) = (from.sender, from.incarnation);
        if r.to != me {
            return Received::NotForMe;
        }
        if r.ccl_address == self.peers[i].ccl_address && self.peers[i].member.is_none_or(|m| m.incarnation == inc) {
            self.peers[i].heard(now, inc);
        }
        if self.state != State::Control {
            let detail = self.control.map_or(u64::from(dataplane::ccl::NO_NODE), |c| u64::from(c.0));
            self.reply(n, inc, JoinVerdict::NotControl, detail);
            return Received::NotControl;
        }
        let Some(p) = self.peer(n) else { return Received::UnknownSender };
        if r.ccl_address != p.ccl_address {
            let detail = u64::from(u32::from(p.ccl_address));
            self.reply(n, inc, JoinVerdict::DuplicateId, detail);
            self.bad(now, n, Received::DuplicateId, u64::from(u32::from(r.ccl_address)));
            return Received::DuplicateId;
        }
        if r.workers != self.cfg.workers {
            self.reply(n, inc, JoinVerdict::WorkersMismatch, u64::from(self.cfg.workers));
            self.bad(now, n, Received::WorkersMismatch, u64::from(r.workers));
            return Received::WorkersMismatch;
        }
        if let Some(m) = p.member {
            if m.incarnation == inc {
                self.reply(n, inc, JoinVerdict::Accepted, 0);
                return Received::JoinRequest;
            }
            if now.since(m.heard) < self.cfg.heartbeat_interval.times(2) {
                self.reply(n, inc, JoinVerdict::IdInUse, u64::from(m.incarnation));
                self.bad(now, n, Received::IdInUse, u64::from(inc));
                return Received::IdInUse;
            }
            // The old incarnation went quiet: the node restarted. It
            // leaves with this change and comes back as the new one.
            self.peers[i].heard(now, inc);
        }
        let (mine, digest) = (self.replica.config_version(), self.replica.config_digest());
        if r.config_version > mine {
            self.reply(n, inc, JoinVerdict::ConfigAhead, mine);
            self.bad(now, n, Received::ConfigAhead, r.config_version);
            return Received::ConfigAhead;
        }
        if r.config_version == mine && mine != 0 && r.config_digest != digest {
            self.reply(n, inc, JoinVerdict::ConfigDiverged, digest);
            self.bad(now, n, Received::ConfigDiverged, r.config_digest);
            return Received::ConfigDiverged;
        }
        self.pending[n.index()] = Some(Pending { incarnation: inc, epoch: from.epoch, place: r.place });
        Received::JoinRequest
    }

    fn on_join_reply(&mut self, now: Timestamp, from: Envelope, r: &JoinReply) -> Received {
        let me = self.cfg.me;
        if r.to != me || r.to_incarnation != self.cfg.incarnation {
            return Received::NotForMe;
        }
        if self.state != State::Joining {
            return Received::Ignored;
        }
        let by = from.sender;
        match r.verdict {
            JoinVerdict::Accepted => {
                if from.epoch <= self.set.epoch() {
                    return Received::StaleEpoch;
                }
                if r.member_bitmap & (1 << me.index()) == 0 {
                    return Received::Ignored;
                }
                let set = Self::set_from(from.epoch, r.member_bitmap, &r.member_place, &r.member_since);
                self.control = Some(by);
                self.ctrl_inc = from.incarnation;
                self.ctrl_seen = now;
                // The lease waits for the control node's first heartbeat
                // at this epoch (and its echo).
                self.ctrl_heard = None;
                self.ctrl_echo = None;
                self.ctrl_grant = None;
                self.ctrl_lost_logged = false;
                self.sync = Some(SyncWait {
                    epoch: from.epoch,
                    bits: r.member_bitmap,
                    started: now,
                    replica_done: false,
                    dataplane_done: false,
                });
                self.counters.epochs_adopted += 1;
                self.transition(now, State::Syncing, Reason::Admitted { control: by });
                self.set_members(now, set, by);
                self.start_pull(now, Purpose::Join, by, true);
                Received::JoinAccepted
            }
            JoinVerdict::NotControl => {
                let q = NodeId(r.detail.min(255) as u8);
                if r.detail < NODE_SLOTS as u64 && q != me && self.peer(q).is_some() {
                    self.join.target = Some(q);
                    self.join.target_since = now;
                    self.join.last_request = None;
                }
                Received::JoinRefused
            }
            v @ (JoinVerdict::DuplicateId | JoinVerdict::UnknownNode | JoinVerdict::WorkersMismatch) => {
                self.disable(now, Reason::JoinRefused { by, verdict: v, detail: r.detail });
                Received::JoinRefused
            }
            v @ (JoinVerdict::ConfigAhead | JoinVerdict::ConfigDiverged) if self.replica.config().is_some() => {
                // The control node's configuration wins (SPEC M3: the
                // other side rejoins it; a split brain's two lineages, an
                // isolated boot that published its own file): drop this
                // node's copy and ask again at once, with none. The join
                // then brings the cluster's.
                let version = self.replica.config_version();
                self.replica.drop_config();
                self.counters.configs_dropped += 1;
                self.event(now, EventKind::ConfigDropped { control: by, version, verdict: v });
                self.join.last_request = None;
                Received::JoinRefused
            }
            v @ (JoinVerdict::IdInUse | JoinVerdict::ConfigAhead | JoinVerdict::ConfigDiverged) => {
                self.fail(now, Reason::JoinRefused { by, verdict: v, detail: r.detail });
                Received::JoinRefused
            }
        }
    }

    fn on_sync_request(&mut self, now: Timestamp, from: Envelope, r: &SyncRequest) -> Received {
        if r.to != self.cfg.me {
            return Received::NotForMe;
        }
        let idle = self.hold().times(2);
        let limit = self.cfg.limits.serving;
        let replica = &self.replica;
        let (full, since, cfgv) = (r.full, r.since, r.config_version);
        let Some((new, chunks)) =
            self.serving.on_request(now, from.sender, from.incarnation, r.into(), limit, idle, || replica.encode(full, since, cfgv))
        else {
            return Received::ServeBusy;
        };
        if new {
            self.counters.transfers_served += 1;
        }
        for c in chunks {
            self.counters.chunks_sent += 1;
            self.send(c.to, Outgoing::SyncChunk(c));
        }
        Received::SyncRequest
    }

    fn on_sync_chunk(&mut self, now: Timestamp, from: Envelope, c: &SyncChunk<'_>) -> Received {
        if c.to != self.cfg.me || c.to_incarnation != self.cfg.incarnation {
            return Received::NotForMe;
        }
        let (max, rto) = (self.cfg.limits.transfer_bytes, self.pull_rto());
        let Some((purpose, p)) = self.pull.as_mut() else { return Received::Ignored };
        if p.from != from.sender || p.xfer != c.xfer {
            return Received::Ignored;
        }
        let purpose = *purpose;
        match p.on_chunk(c, max) {
            PullEvent::Stored => {
                if let Some(r) = p.request(now, rto) {
                    let to = p.from;
                    self.send(to, Outgoing::SyncRequest(r));
                }
                Received::SyncChunk
            }
            PullEvent::Complete(bytes) => {
                self.pull = None;
                self.pull_done(now, purpose, &bytes);
                Received::SyncChunk
            }
            PullEvent::Ignored => Received::Ignored,
            PullEvent::Abort => {
                self.pull = None;
                self.counters.transfers_aborted += 1;
                Received::Ignored
            }
        }
    }

    /// A member's dynamic-NAT request: the control node hands it on;
    /// anyone else, or a request from a non-member, has nothing to do
    /// with it.
    fn on_xlate_request(&mut self, from: Envelope, r: &XlateRequest) -> Received {
        if r.to != self.cfg.me {
            return Received::NotForMe;
        }
        if self.state != State::Control {
            return Received::NotControl;
        }
        if !self.set.contains(from.sender) {
            return Received::Ignored;
        }
        self.actions.push_back(Action::XlateRequest { from: from.sender, pool: r.pool, real: r.real, held: r.held });
        Received::XlateRequest
    }

    fn on_table_update(&mut self, _now: Timestamp, from: Envelope, u: &TableUpdate<'_>) -> Received {
        let ours = Some(from.sender) == self.control && from.incarnation == self.ctrl_inc;
        let synced = self.state == State::Data || self.sync.is_some_and(|s| s.replica_done);
        if !ours || !synced || !matches!(self.state, State::Data | State::Syncing) {
            return Received::Ignored;
        }
        let value = match u.op {
            TableOp::Upsert(v) => Some(v),
            TableOp::Delete => None,
        };
        match self.replica.apply(u.version, u.table, u.key, value) {
            Applied::Change(c) => {
                self.counters.table_changes += 1;
                self.actions.push_back(Action::Replica(c));
                Received::TableUpdate
            }
            Applied::Duplicate => Received::TableDuplicate,
            Applied::Gap | Applied::Full => Received::TableGap,
        }
    }
}

trait Times {
    fn times(self, n: u64) -> Duration;
}

impl Times for Duration {
    fn times(self, n: u64) -> Duration {
        Duration(self.0.saturating_mul(n))
    }
}
