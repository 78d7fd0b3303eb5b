//! What membership tells the outside: its states, the reasons of every
//! transition, the events the driver logs (and `show cluster history`
//! lists), the outcome of every received message and the counters.
//!
//! Invariants: every message given to `on_message` ends as exactly one
//! [`Received`] outcome and increments exactly its counter (so the
//! outcomes add up to the messages received); the history is a ring of at
//! most `Limits::history` entries, oldest dropped first; an event's text
//! is rendered once, when it happens, with the node names of the
//! configuration.

use dataplane::ccl::JoinVerdict;
use dataplane::stats::{Stats, Visitor};
use dataplane::{Duration, Epoch, NodeId, Timestamp};
use std::collections::VecDeque;
use std::fmt;

/// A node's membership state (docs/membership.md has the diagram).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum State {
    /// Looking for a control node, asking it to admit this node (or,
    /// hearing none for a hold time, electing one).
    Joining,
    /// Admitted: receiving the replicated state, waiting for the
    /// dataplane's bulk sync (readiness gate). Data ports down.
    Syncing,
    /// A member taking traffic, following the control node.
    Data,
    /// The control node (also takes traffic once ready).
    Control,
    /// Left the cluster (flows reset, data ports down); rejoins after a
    /// backoff.
    Inactive,
    /// Gave up (or was refused for good): data ports stay down, nothing
    /// sent on the CCL; management stays up. `enable` starts over.
    Disabled,
}

impl State {
    pub const ALL: [State; 6] =
        [State::Joining, State::Syncing, State::Data, State::Control, State::Inactive, State::Disabled];
    /// Heartbeat `state` byte.
    pub const fn code(self) -> u8 {
        match self {
            State::Joining => 0,
            State::Syncing => 1,
            State::Data => 2,
            State::Control => 3,
            State::Inactive => 4,
            State::Disabled => 5,
        }
    }
    pub fn from_code(c: u8) -> Option<State> {
        State::ALL.get(usize::from(c)).copied()
    }
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Joining => "joining",
            State::Syncing => "syncing",
            State::Data => "data",
            State::Control => "control",
            State::Inactive => "inactive",
            State::Disabled => "disabled",
        }
    }
    /// In a member set as far as this node is concerned.
    pub const fn is_member(self) -> bool {
        matches!(self, State::Syncing | State::Data | State::Control)
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why something happened.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    Boot,
    /// Won an election among `candidates` nodes heard (this one included).
    Elected { candidates: u8 },
    /// Admitted by the control node.
    Admitted { control: NodeId },
    /// The readiness gate opened: replicated state and dataplane sync done.
    Synced { waited: Duration },
    /// The readiness gate opened on `sync_timeout` (dataplane sync incomplete).
    SyncTimeout { waited: Duration },
    /// The replicated state did not arrive within `sync_timeout`.
    ReplicaTimeout { waited: Duration },
    /// The control node followed was not heard for `silent`.
    ControlLost { control: NodeId, silent: Duration },
    /// Removal: a member not heard within the hold time.
    NoHeartbeat { silent: Duration },
    /// Removal: the member announced it is no longer one.
    Left { state: State },
    /// Removal: admitted but never followed this control node.
    NeverFollowed,
    /// This node heard a newer member set without itself.
    Removed { control: NodeId, epoch: Epoch },
    /// A new control node's set does not include this node.
    NotIncluded { control: NodeId },
    /// Split brain healed: a better control node keeps the role.
    BetterControl { control: NodeId },
    /// The control node followed stepped down.
    SteppedDown { control: NodeId },
    /// No control node renewed the lease for this long past its expiry.
    LeaseExpired { by: Duration },
    /// The machine was not run for this long (paused longer than the hold time).
    Paused { gap: Duration },
    /// Back from such a pause as a member: fenced until confirmed.
    Resumed { gap: Duration },
    /// A resumed member's lease renewed after `fenced`: the others did not
    /// move on.
    Confirmed { fenced: Duration },
    PortDown { port: u16 },
    CclDown,
    /// Quorum mode: `heard` of `of` nodes of the last member set.
    NoQuorum { heard: u8, of: u8 },
    /// This node's join was refused.
    JoinRefused { by: NodeId, verdict: JoinVerdict, detail: u64 },
    /// No admission within two hold times.
    JoinTimeout { control: NodeId },
    TooManyAttempts { attempts: u32 },
    /// The driver could not run replicated configuration `version`
    /// (`Membership::reject_config`).
    ConfigRejected { version: u64 },
    /// The backoff after leaving is over.
    RetryDue,
    /// `enable` was called.
    Enabled,
}

/// What happened, as a value (the text is in [`MembershipEvent::text`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// This node changed state.
    State { from: State, to: State, reason: Reason },
    /// This node adopted or created member set `epoch`.
    Members { epoch: Epoch, control: NodeId, bits: u16 },
    /// The control node (this one) removed `node`.
    Removed { node: NodeId, epoch: Epoch, reason: Reason },
    /// The control node (this one) admitted `node`.
    Admitted { node: NodeId, epoch: Epoch },
    /// A message from `peer` was refused or dropped as bad input.
    Refused { peer: NodeId, what: Received, detail: u64 },
    /// The control node heard a member with a newer replicated state and
    /// fetches it before it changes anything (`from`, `version`).
    CatchUp { from: NodeId, version: u64 },
    /// This joining node dropped its replicated configuration `version`,
    /// refused by `control` (`verdict`: config-ahead or config-diverged),
    /// to join with none and take the control node's.
    ConfigDropped { control: NodeId, version: u64, verdict: JoinVerdict },
}

/// One event: when, what, and the log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipEvent {
    pub at: Timestamp,
    pub kind: EventKind,
    pub text: String,
}

pub(super) fn ms(d: Duration) -> u64 {
    d.0 / 1_000_000
}

/// Renders events with node names.
pub(super) struct Names<'a>(pub(super) &'a dyn Fn(NodeId) -> String);

impl Names<'_> {
    fn n(&self, id: NodeId) -> String {
        (self.0)(id)
    }

    pub(super) fn reason(&self, r: &Reason) -> String {
        match *r {
            Reason::Boot => "started".into(),
            Reason::Elected { candidates } => format!("elected among {candidates} node(s) heard"),
            Reason::Admitted { control } => format!("admitted by {}", self.n(control)),
            Reason::Synced { waited } => format!("synced in {} ms", ms(waited)),
            Reason::SyncTimeout { waited } => format!("sync timeout after {} ms (dataplane sync incomplete)", ms(waited)),
            Reason::ReplicaTimeout { waited } => format!("replicated state not received in {} ms", ms(waited)),
            Reason::ControlLost { control, silent } => {
                format!("control node {} not heard for {} ms", self.n(control), ms(silent))
            }
            Reason::NoHeartbeat { silent } => format!("no heartbeat for {} ms", ms(silent)),
            Reason::Left { state } => format!("it announced {state}"),
            Reason::NeverFollowed => "admitted but never followed".into(),
            Reason::Removed { control, epoch } => {
                format!("removed by {} (epoch {} without this node)", self.n(control), epoch.0)
            }
            Reason::NotIncluded { control } => format!("new control node {} did not include this node", self.n(control)),
            Reason::BetterControl { control } => format!("split brain healed: {} keeps the control role", self.n(control)),
            Reason::SteppedDown { control } => format!("control node {} stepped down", self.n(control)),
            Reason::LeaseExpired { by } => format!("lease expired {} ms ago, not renewed", ms(by)),
            Reason::Paused { gap } => format!("not run for {} ms (paused)", ms(gap)),
            Reason::Confirmed { fenced } => format!("still a member after the pause (fenced {} ms)", ms(fenced)),
            Reason::Resumed { gap } => {
                format!("not run for {} ms (paused): fenced until a member confirms the cluster did not move on", ms(gap))
            }
            Reason::PortDown { port } => format!("data port {port} down"),
            Reason::CclDown => "CCL port down".into(),
            Reason::NoQuorum { heard, of } => format!("no quorum: {heard} of {of} nodes heard"),
            Reason::JoinRefused { by, verdict, detail } => {
                format!("join refused by {}: {}", self.n(by), verdict_text(verdict, detail))
            }
            Reason::JoinTimeout { control } => format!("no admission by {} within 2 hold times", self.n(control)),
            Reason::TooManyAttempts { attempts } => format!("{attempts} rejoin attempts failed"),
            Reason::ConfigRejected { version } => {
                format!("cannot run the replicated configuration v{version} (the node's log says why)")
            }
            Reason::RetryDue => "rejoin backoff over".into(),
            Reason::Enabled => "enabled by the operator".into(),
        }
    }

    pub(super) fn kind(&self, me: NodeId, k: &EventKind) -> String {
        match k {
            EventKind::State { from, to, reason } => {
                format!("{} {from} -> {to}: {}", self.n(me), self.reason(reason))
            }
            EventKind::Members { epoch, control, bits } => {
                let names: Vec<String> = (0..16u8).filter(|i| bits & (1 << i) != 0).map(|i| self.n(NodeId(i))).collect();
                format!("epoch {} (control {}): {}", epoch.0, self.n(*control), names.join(" "))
            }
            EventKind::Removed { node, epoch, reason } => {
                format!("{} removed: {} (epoch {})", self.n(*node), self.reason(reason), epoch.0)
            }
            EventKind::Admitted { node, epoch } => format!("{} admitted (epoch {})", self.n(*node), epoch.0),
            EventKind::Refused { peer, what, detail } => {
                format!("{} from {}: {} ({detail})", what.as_str(), self.n(*peer), what.describe())
            }
            EventKind::CatchUp { from, version } => {
                format!("control node catches up: state version {version} from {}", self.n(*from))
            }
            EventKind::ConfigDropped { control, version, verdict } => format!(
                "{} drops its replicated configuration v{version} ({} refused it: {}) and joins to take {}'s",
                self.n(me),
                self.n(*control),
                verdict.as_str(),
                self.n(*control)
            ),
        }
    }
}

fn verdict_text(v: JoinVerdict, detail: u64) -> String {
    match v {
        JoinVerdict::DuplicateId => format!(
            "duplicate-id: this node id is configured for CCL address {}",
            std::net::Ipv4Addr::from(detail as u32)
        ),
        JoinVerdict::IdInUse => format!("id-in-use: a live member has this id (incarnation {detail})"),
        JoinVerdict::ConfigAhead => format!("config-ahead: the control node's configuration is version {detail}"),
        JoinVerdict::ConfigDiverged => format!("config-diverged: same version, control digest {detail:016x}"),
        JoinVerdict::UnknownNode => "unknown-node: this node id is not configured there".into(),
        JoinVerdict::WorkersMismatch => format!("workers-mismatch: the cluster's members run {detail} worker(s) (dpdk.workers)"),
        JoinVerdict::NotControl => format!("not-control (follows node {detail})"),
        JoinVerdict::Accepted => "accepted".into(),
    }
}

macro_rules! outcomes {
    ($( $(#[$doc:meta])* $name:ident => $text:literal, $desc:literal, )*) => {
        /// What `on_message` made of a message (one counter each).
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum Received { $( $(#[$doc])* $name, )* }

        impl Received {
            pub const ALL: &'static [Received] = &[ $( Received::$name, )* ];
            pub const COUNT: usize = Received::ALL.len();
            pub const fn as_str(self) -> &'static str {
                match self { $( Received::$name => $text, )* }
            }
            pub const fn describe(self) -> &'static str {
                match self { $( Received::$name => $desc, )* }
            }
            pub const fn index(self) -> usize { self as usize }
        }
    };
}

outcomes! {
    /// A heartbeat of a configured peer: recorded.
    Heartbeat => "heartbeat", "recorded",
    /// A join request handled (queued for admission or answered again).
    JoinRequest => "join-request", "handled",
    /// This node's join was accepted.
    JoinAccepted => "join-accepted", "admitted",
    /// This node's join was refused.
    JoinRefused => "join-refused", "this node was refused",
    /// A transfer request served.
    SyncRequest => "sync-request", "served",
    /// A transfer chunk stored.
    SyncChunk => "sync-chunk", "stored",
    /// A replicated-table change applied.
    TableUpdate => "table-update", "applied",
    /// The sender is not a configured node.
    UnknownSender => "unknown-sender", "not a configured node",
    /// The message claims to come from this node.
    FromSelf => "from-self", "claims to be this node",
    /// An incarnation below the one already heard from the sender.
    StaleIncarnation => "stale-incarnation", "previous boot",
    /// Addressed to another node (or another incarnation of this id).
    NotForMe => "not-for-me", "addressed elsewhere",
    /// The sender's CCL address is not the one configured for its id: a
    /// second machine with this node id. Refused.
    DuplicateId => "duplicate-id", "CCL address differs from the configured one",
    /// A join from a node id a live member holds with another incarnation.
    IdInUse => "id-in-use", "a live member has this id",
    /// A join with a newer replicated configuration than this control node's.
    ConfigAhead => "config-ahead", "configuration newer than the control node's",
    /// A join with the same configuration version and other contents.
    ConfigDiverged => "config-diverged", "configuration differs at the same version",
    /// A join sent to a node that is not the control node.
    NotControl => "not-control", "this node is not the control node",
    /// A join from a node running another number of workers than this
    /// control node (docs/workers.md). Refused.
    WorkersMismatch => "workers-mismatch", "runs another number of workers",
    /// A heartbeat older than one already heard from the sender (reordered
    /// on the CCL): not recorded.
    Reordered => "reordered", "older than a heartbeat already heard",
    /// A membership message of an older epoch than this node's.
    StaleEpoch => "stale-epoch", "older epoch",
    /// A table change already applied.
    TableDuplicate => "table-duplicate", "already applied",
    /// A table change out of order (a missed one is fetched).
    TableGap => "table-gap", "out of order",
    /// A dynamic-NAT translation request handed to the NAT share
    /// (`Action::XlateRequest`; N4).
    XlateRequest => "xlate-request", "handed to NAT",
    /// A member's connection counts handed to the limit estimate
    /// (`Action::LimitReport`; L1).
    LimitReport => "limit-report", "handed to the limit estimate",
    /// A transfer request refused: serving as many as the limit allows.
    ServeBusy => "serve-busy", "too many transfers",
    /// A member's cluster-wide query answered (or handed to the driver to
    /// render: `Action::Query`).
    QueryRequest => "query-request", "answered",
    /// A chunk of a member's answer to this node's query stored.
    QueryChunk => "query-chunk", "stored",
    /// A new query refused: this node renders at most
    /// `query::RENDERS_PER_SECOND` answers a second.
    QueryBusy => "query-busy", "too many queries to answer",
    /// Authentic and addressed here but of no use in this state (a reply
    /// to no request, a chunk of no transfer, a change from a node that is
    /// not this node's control node).
    Ignored => "ignored", "nothing to do with it now",
}

/// Counters of the machine. `received` holds one counter per
/// [`Received`] outcome.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    pub received: [u64; Received::COUNT],
    /// Heartbeats queued (`Action::Broadcast`).
    pub heartbeats_queued: u64,
    /// Other messages queued (join, sync, table).
    pub messages_queued: u64,
    pub elections_won: u64,
    /// Member sets this node created as control node.
    pub epochs_created: u64,
    /// Member sets adopted from a control node.
    pub epochs_adopted: u64,
    pub members_admitted: u64,
    pub members_removed: u64,
    /// Joins this node refused (as control node).
    pub joins_refused: u64,
    /// Times this node left (Reset, data ports down).
    pub leaves: u64,
    pub rejoin_attempts: u64,
    /// Rejoin attempts that failed (counted towards disabling).
    pub rejoin_failures: u64,
    pub transfers_served: u64,
    pub chunks_sent: u64,
    pub transfers_completed: u64,
    pub transfers_aborted: u64,
    pub table_changes: u64,
    pub sync_timeouts: u64,
    pub lease_updates: u64,
    /// Replicated configurations published (`set_config`, and this
    /// node's own when it formed the cluster).
    pub configs_published: u64,
    /// Replicated configurations the driver could not run.
    pub configs_rejected: u64,
    /// Copies this node dropped because a control node refused its join
    /// over them (config-ahead, config-diverged).
    pub configs_dropped: u64,
    /// Receive-path stalls the driver reported (`rx_stalled`).
    pub rx_stalls: u64,
    /// Removals put off because this node's receive path had stalled
    /// within a heartbeat interval (the member's heartbeats may wait in
    /// it, unread): one per member and tick.
    pub removals_deferred: u64,
    /// Cluster-wide queries this node started (`Membership::ask`), and
    /// answers to them complete, aborted or missing at the deadline.
    pub queries_asked: u64,
    pub query_answers: u64,
    pub query_answers_aborted: u64,
    pub query_answers_missing: u64,
    /// Answers this node rendered for members (`Action::Query`).
    pub queries_answered: u64,
}

impl Counters {
    pub fn received(&self, r: Received) -> u64 {
        self.received[r.index()]
    }
    /// Every message `on_message` was given.
    pub fn messages(&self) -> u64 {
        self.received.iter().sum()
    }
}

impl Stats for Counters {
    fn visit(&self, v: &mut dyn Visitor) {
        v.family("received", "outcome", &mut Received::ALL.iter().map(|&r| (r.as_str(), self.received(r))));
        let c = [
            ("heartbeats_queued", self.heartbeats_queued),
            ("messages_queued", self.messages_queued),
            ("elections_won", self.elections_won),
            ("epochs_created", self.epochs_created),
            ("epochs_adopted", self.epochs_adopted),
            ("members_admitted", self.members_admitted),
            ("members_removed", self.members_removed),
            ("joins_refused", self.joins_refused),
            ("leaves", self.leaves),
            ("rejoin_attempts", self.rejoin_attempts),
            ("rejoin_failures", self.rejoin_failures),
            ("transfers_served", self.transfers_served),
            ("chunks_sent", self.chunks_sent),
            ("transfers_completed", self.transfers_completed),
            ("transfers_aborted", self.transfers_aborted),
            ("table_changes", self.table_changes),
            ("sync_timeouts", self.sync_timeouts),
            ("lease_updates", self.lease_updates),
            ("configs_published", self.configs_published),
            ("configs_rejected", self.configs_rejected),
            ("configs_dropped", self.configs_dropped),
            ("rx_stalls", self.rx_stalls),
            ("removals_deferred", self.removals_deferred),
            ("queries_asked", self.queries_asked),
            ("query_answers", self.query_answers),
            ("query_answers_aborted", self.query_answers_aborted),
            ("query_answers_missing", self.query_answers_missing),
            ("queries_answered", self.queries_answered),
        ];
        for (name, value) in c {
            v.counter(name, value);
        }
    }
}

/// The bounded ring of `history()`.
#[derive(Clone, Debug)]
pub(super) struct History {
    cap: usize,
    ring: VecDeque<MembershipEvent>,
}

impl History {
    pub(super) fn new(cap: usize) -> History {
        History { cap, ring: VecDeque::with_capacity(cap.min(64)) }
    }
    pub(super) fn push(&mut self, e: MembershipEvent) {
        if self.ring.len() >= self.cap {
            self.ring.pop_front();
        }
        self.ring.push_back(e);
    }
    pub(super) fn iter(&self) -> impl Iterator<Item = &MembershipEvent> {
        self.ring.iter()
    }
}
