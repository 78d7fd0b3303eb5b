//! The simulated nodes' control lcores: one real
//! `controlplane::membership::Membership` per node (joining, election,
//! admission, removal, leases, replicated state), driven by the virtual
//! clock, its messages sealed and opened by the real `ControlLink` and
//! carried over the simulated CCL to the other nodes' machines — the code
//! the DPDK node's control lcore runs (SPEC P3).
//!
//! Each node's machine runs with the test bed's timers (100 ms heartbeat
//! interval, 300 ms hold time: [`HEARTBEAT_INTERVAL_MS`], [`HOLD_TIME_MS`])
//! and the node's first CCL incarnation (`cluster::incarnation(n, 0)`).
//! What the driver does with each [`Action`]:
//! - `Broadcast` / `Send`: sealed with `ControlLink::seal_action` (a
//!   broadcast frame either way), a `Broadcast` to every other node, a
//!   `Send` to its addressee only, each copy through the scenario's
//!   `CclLink` and `CclCut`;
//! - `Members`, `Reset`, `Lease`, `DataPorts`: recorded and handed to the
//!   caller as [`Order`]s (`take_orders`). In fault scenarios the
//!   simulator carries them out on the node (`faults.rs`, `carry_out`) and
//!   reports the pipeline's real sync progress back (`sync`); without
//!   faults it ignores them, and each `Members` is answered — like the
//!   node's dataplane, whose re-registration ends with every peer's
//!   `SyncDone` — by `on_sync(epoch, every other member, sent)`
//!   [`SYNC_DELAY_NS`] later;
//! - `Event`, `Replica`: counted per node, for the report.
//!
//! Faults (`kill`, `pause`/`resume`, `restart`, `set_partition`,
//! `set_loss_burst`, `port`) reach the control lcores as on the test bed: a
//! dead one gets no ticks and loses its frames, a frozen one queues them
//! ([`PAUSED_QUEUE`]) and goes on from where it was on resume, a restarted
//! one is a fresh machine with the next incarnation.
//!
//! Invariants:
//! - **Outside the data-plane run.** The control lcores have their own
//!   event queue, their own seeded stream for the CCL impairments and
//!   their own counters; nothing here touches the traffic or CCL streams,
//!   the main event queue, the trace hash or the pipelines (a member-set
//!   change is handed back to the caller, which decides). So the control
//!   plane changes no scenario's trace, and a run with the same seed
//!   repeats its events exactly.
//! - **The same link.** Control frames meet the scenario's `CclLink`
//!   (loss, latency, jitter, reorder) and `CclCut`, like data-plane CCL
//!   frames, drawn from the control stream.
//! - **Time order.** [`ControlPlanes::run_until`] handles every control
//!   event due at or before the given time, in (time, insertion) order;
//!   the simulator calls it before each data-plane event, so both worlds
//!   share one virtual clock. Each machine is ticked at its
//!   `next_wakeup()` (and at once when an input leaves work queued).
//! - **Every copy accounted.** A frame copy is cut, partitioned, lost,
//!   lost at a dead or full frozen node, delivered (when it reaches its
//!   node) or still in flight (a frozen node's queue included); every
//!   delivered copy is counted by the receiving opener (a drop) or machine
//!   (an outcome).

use dataplane::ccl::Placement;
use super::cluster;
use super::net::{self, CclCut, CclLink, Fate, Partition};
use super::SimConfig;
use controlplane::membership::{Action, ControlLink, Counters, Membership, Outgoing, State, MAX_CONTROL_FRAME};
use dataplane::cluster::MemberSet;
use dataplane::types::{Epoch, Timestamp};
use rand::rngs::ChaCha8Rng;
use rand::SeedableRng;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};

/// The simulated nodes' heartbeat interval and hold time: the test bed's.
pub const HEARTBEAT_INTERVAL_MS: u64 = crate::topology::BED_HEARTBEAT_MS;
pub const HOLD_TIME_MS: u64 = crate::topology::BED_HOLD_MS;
/// A new member set is answered with the peers' sync this long after it
/// was emitted (the fake dataplane's re-registration).
pub const SYNC_DELAY_NS: u64 = 20_000_000;

/// Node `n`'s control lcore starts (first tick) this long after the
/// start, so the nodes' heartbeats do not all coincide.
const START_STAGGER_NS: u64 = 1_000;

enum Ev {
    /// The node's membership machine's clock (`gen`: stale when older than
    /// the node's latest scheduled tick).
    Tick { node: usize, gen: u64 },
    /// A control frame reaches node `to`'s control queue.
    Deliver { to: usize, frame: Vec<u8> },
    /// The fake dataplane's sync progress for a member set the node
    /// emitted (scenarios without faults only).
    Sync { node: usize, epoch: Epoch, done_from: u16 },
}

/// What a node's control lcore is doing (fault scenarios).
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Lcore {
    Running,
    /// Frozen (`pause`): no ticks; frames wait in its queue.
    Paused,
    /// Killed: no ticks, frames to it are lost, until a restart.
    Dead,
}

/// A machine's order to its node's dataplane, as the node's driver
/// carries it out (`node/src/ccl.rs`, `CclControl::act`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Order {
    /// `Pipeline::set_members`.
    Members(MemberSet),
    /// `Pipeline::reset`.
    Reset,
    /// `Pipeline::set_lease`.
    Lease(Timestamp),
    /// Data ports raised or shut (the routers restore or withdraw the node).
    DataPorts(bool),
}

/// Control frames a frozen control lcore's queue holds; more are lost.
pub const PAUSED_QUEUE: usize = 1024;

struct Queued {
    at: u64,
    seq: u64,
    ev: Ev,
}
impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    // Reversed: BinaryHeap is a max-heap, the earliest comes first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// What the driver did with a node's actions, by kind.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ActionCounts {
    /// `Broadcast` and `Send` actions sealed (and put on the CCL).
    pub sent: u64,
    pub members: u64,
    pub leases: u64,
    pub resets: u64,
    pub data_ports: u64,
    pub events: u64,
    pub replica: u64,
}

/// A member set a node adopted or created (`Action::Members`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemberSetChange {
    pub at_ns: u64,
    pub epoch: u64,
    /// Member node ids, ascending.
    pub members: Vec<u8>,
}

impl MemberSetChange {
    pub fn contains(&self, node: usize) -> bool {
        self.members.iter().any(|&m| usize::from(m) == node)
    }
}

/// A state transition of a node's machine (from its events).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Transition {
    pub at_ns: u64,
    pub from: State,
    pub to: State,
}

struct ControlNode {
    membership: Membership,
    link: ControlLink,
    /// The latest scheduled tick: its generation and time.
    tick_gen: u64,
    tick_at: u64,
    heartbeats_sent: u64,
    messages_sent: u64,
    send_failures: u64,
    actions: ActionCounts,
    last_lease: Option<Timestamp>,
    data_ports_up: bool,
    member_sets: Vec<MemberSetChange>,
    transitions: Vec<Transition>,
    /// Copies this node's control lcore received (opened or dropped).
    received: u64,
    lcore: Lcore,
    /// Frames that arrived while frozen, delivered on resume.
    held: Vec<Vec<u8>>,
    /// Data-port carrier as last reported to the machine (`on_port`), and
    /// as the links are (reported on resume if they changed meanwhile).
    ports_reported: [bool; 2],
    ports_now: [bool; 2],
    /// Restarts so far (the incarnation).
    restarts: u32,
}

/// What the control frames met on the CCL.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ControlLinkStats {
    /// Control frames sealed and put on the CCL (a broadcast is one frame).
    pub frames: u64,
    /// Heartbeat frames among them.
    pub heartbeats: u64,
    /// Frame copies towards another node (a broadcast: one per other node;
    /// a `Send`: one); each ends cut, lost, delivered or in flight.
    pub copies: u64,
    /// Copies that reached another node's control lcore.
    pub delivered: u64,
    pub lost: u64,
    pub reordered: u64,
    /// Copies lost to a cut CCL port.
    pub cut: u64,
    /// Copies still on the wire at the end of the run.
    pub in_flight: u64,
    /// Copies stopped by a CCL partition (fault scenarios).
    pub partitioned: u64,
    /// Copies that reached a dead control lcore or a frozen one's full
    /// queue (fault scenarios).
    pub lost_at_node: u64,
}

/// One peer as a node's membership sees it at the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PeerReport {
    pub id: u8,
    pub this_node: bool,
    pub last_heard_ms: Option<u64>,
    pub heartbeats: u64,
    pub incarnation: u32,
    /// Its state, epoch and control node as its last heartbeat said (this
    /// node: its own).
    pub state: Option<State>,
    pub epoch: Option<u64>,
    pub control: Option<u8>,
    /// In this node's member set.
    pub member: bool,
}

/// One node's membership at the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NodeMembership {
    pub node: usize,
    pub state: State,
    pub epoch: u64,
    /// Member node ids of its set, ascending.
    pub members: Vec<u8>,
    /// The control node it follows (itself when control).
    pub control: Option<u8>,
    pub ready: bool,
    /// Heartbeat frames and other control messages it put on the CCL.
    pub heartbeats_sent: u64,
    pub messages_sent: u64,
    pub send_failures: u64,
    pub actions: ActionCounts,
    /// The last `Action::Lease` (ns; 0: fenced now; `None`: none yet).
    pub last_lease_ns: Option<u64>,
    /// The data ports as the last `Action::DataPorts` left them.
    pub data_ports_up: bool,
    /// Every member set it adopted or created, oldest first.
    pub member_sets: Vec<MemberSetChange>,
    /// Every state transition, oldest first.
    pub transitions: Vec<Transition>,
    /// Control frame copies that reached it (opened or dropped).
    pub received: u64,
    pub counters: Counters,
    /// Control-channel frames the opener dropped, non-zero reasons.
    pub ccl_drops: BTreeMap<String, u64>,
    pub peers: Vec<PeerReport>,
    /// The machine's history (`show cluster history`): "<ms> ms <text>".
    pub history: Vec<String>,
}

impl NodeMembership {
    /// How this node sees `peer` (`None`: not a configured node).
    pub fn peer(&self, peer: usize) -> Option<&PeerReport> {
        self.peers.iter().find(|p| usize::from(p.id) == peer)
    }
    /// In the cluster as far as this node is concerned (syncing, data or
    /// control).
    pub fn is_member(&self) -> bool {
        self.state.is_member()
    }
    /// The first member set at or after `after_ns` without `node`.
    pub fn set_without(&self, node: usize, after_ns: u64) -> Option<&MemberSetChange> {
        self.member_sets.iter().find(|s| s.at_ns >= after_ns && !s.contains(node))
    }
    /// The first member set at or after `after_ns` with `node`.
    pub fn set_with(&self, node: usize, after_ns: u64) -> Option<&MemberSetChange> {
        self.member_sets.iter().find(|s| s.at_ns >= after_ns && s.contains(node))
    }
    /// When it first went to `to` at or after `after_ns`.
    pub fn reached(&self, to: State, after_ns: u64) -> Option<u64> {
        self.transitions.iter().find(|t| t.at_ns >= after_ns && t.to == to).map(|t| t.at_ns)
    }
    /// Copies it received that the opener dropped.
    pub fn dropped(&self) -> u64 {
        self.ccl_drops.values().sum()
    }
}

/// Membership across the simulated cluster, at the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MembershipReport {
    pub per_node: Vec<NodeMembership>,
    pub link: ControlLinkStats,
}

impl MembershipReport {
    /// Node `node`'s view of `peer`.
    pub fn view(&self, node: usize, peer: usize) -> Option<&PeerReport> {
        self.per_node.get(node)?.peer(peer)
    }
    /// The nodes in the control state.
    pub fn control_nodes(&self) -> Vec<usize> {
        self.per_node.iter().filter(|n| n.state == State::Control).map(|n| n.node).collect()
    }
    /// One line: every node's state, epoch, control node and set.
    pub fn states(&self) -> String {
        let v: Vec<String> = self
            .per_node
            .iter()
            .map(|n| {
                let ctl = n.control.map_or_else(|| "-".to_string(), |c| format!("node{c}"));
                let set: Vec<String> = n.members.iter().map(u8::to_string).collect();
                format!("node{} {} e{} ctl {ctl} {{{}}}", n.node, n.state, n.epoch, set.join(","))
            })
            .collect();
        v.join("; ")
    }
}

/// The control lcores of all simulated nodes.
pub struct ControlPlanes {
    nodes: Vec<ControlNode>,
    queue: BinaryHeap<Queued>,
    seq: u64,
    rng: ChaCha8Rng,
    link: CclLink,
    cut: Option<CclCut>,
    stats: ControlLinkStats,
    /// The machines' dataplane orders, for the caller: (node, time, order),
    /// oldest first.
    orders: Vec<(usize, u64, Order)>,
    buf: Vec<u8>,
    /// Fault scenario: the simulator carries out every order and feeds the
    /// pipelines' real sync progress (no fake `Sync`).
    driven: bool,
    nodes_total: usize,
    quorum: bool,
    /// Each node's site and chassis (`SimConfig::placement`).
    places: Vec<Placement>,
    partition: Partition,
    loss_burst: Option<(f64, u64)>,
}

impl ControlPlanes {
    /// One control lcore per node of a cluster scenario.
    pub fn new(cfg: &SimConfig) -> Result<ControlPlanes, String> {
        let mut nodes = Vec::with_capacity(cfg.nodes);
        for n in 0..cfg.nodes {
            nodes.push(ControlNode {
                membership: cluster::membership(n, cfg.nodes, cfg.quorum, cfg.place(n))?,
                link: cluster::control_link(n)?,
                tick_gen: 0,
                tick_at: u64::MAX,
                heartbeats_sent: 0,
                messages_sent: 0,
                send_failures: 0,
                actions: ActionCounts::default(),
                last_lease: None,
                data_ports_up: false,
                member_sets: Vec::new(),
                transitions: Vec::new(),
                received: 0,
                lcore: Lcore::Running,
                held: Vec::new(),
                ports_reported: [true; 2],
                ports_now: [true; 2],
                restarts: 0,
            });
        }
        let mut c = ControlPlanes {
            nodes,
            queue: BinaryHeap::new(),
            seq: 0,
            // Its own stream: control frames never shift the CCL stream of
            // the data-plane frames.
            rng: ChaCha8Rng::seed_from_u64(net::mix64(cfg.seed ^ 0x6862_6561_7473)),
            link: cfg.ccl.clone(),
            cut: cfg.ccl_cut,
            stats: ControlLinkStats::default(),
            orders: Vec::new(),
            buf: vec![0u8; MAX_CONTROL_FRAME],
            driven: !cfg.faults.is_empty(),
            nodes_total: cfg.nodes,
            quorum: cfg.quorum,
            places: (0..cfg.nodes).map(|n| cfg.place(n)).collect(),
            partition: Partition::default(),
            loss_burst: None,
        };
        for n in 0..cfg.nodes {
            c.schedule_tick(n, START_STAGGER_NS * n as u64);
        }
        Ok(c)
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Queued { at, seq: self.seq, ev });
    }

    /// Tick node `n` at `at`, unless a tick no later than that is already
    /// due (a later one is superseded).
    fn schedule_tick(&mut self, n: usize, at: u64) {
        let node = &mut self.nodes[n];
        if node.tick_at <= at && node.tick_at != u64::MAX {
            return;
        }
        node.tick_gen += 1;
        node.tick_at = at;
        let gen = node.tick_gen;
        self.schedule(at, Ev::Tick { node: n, gen });
    }

    /// Handle every control event due at or before `t`.
    pub fn run_until(&mut self, t: u64) {
        while self.queue.peek().is_some_and(|q| q.at <= t) {
            let Some(q) = self.queue.pop() else { break };
            match q.ev {
                Ev::Tick { node, gen } => {
                    if gen == self.nodes[node].tick_gen && self.nodes[node].lcore == Lcore::Running {
                        self.nodes[node].tick_at = u64::MAX;
                        self.nodes[node].membership.tick(Timestamp(q.at));
                        // After a tick the next wakeup is later (the
                        // machine's contract); never spin on it anyway.
                        self.actions(node, q.at, q.at + 1);
                    }
                }
                Ev::Deliver { to, frame } => {
                    match self.nodes[to].lcore {
                        Lcore::Running => {}
                        Lcore::Paused if self.nodes[to].held.len() < PAUSED_QUEUE => {
                            self.nodes[to].held.push(frame);
                            continue;
                        }
                        Lcore::Paused | Lcore::Dead => {
                            self.stats.lost_at_node += 1;
                            continue;
                        }
                    }
                    self.stats.delivered += 1;
                    let c = &mut self.nodes[to];
                    c.received += 1;
                    // The opener and the machine count what they make of it.
                    let _ = c.link.receive(&mut c.membership, Timestamp(q.at), &frame);
                    self.actions(to, q.at, q.at);
                }
                Ev::Sync { node, epoch, done_from } => {
                    self.nodes[node].membership.on_sync(Timestamp(q.at), epoch, done_from, true);
                    self.actions(node, q.at, q.at);
                }
            }
        }
    }

    /// Orders given since the last call (node, time, order), oldest first.
    pub fn take_orders(&mut self) -> Vec<(usize, u64, Order)> {
        std::mem::take(&mut self.orders)
    }

    /// Node `n`'s machine: state, epoch, control node followed, ready.
    pub fn machine(&self, n: usize) -> Option<(State, Epoch, Option<usize>, bool)> {
        let m = &self.nodes.get(n)?.membership;
        Some((m.state(), m.epoch(), m.control().map(|c| c.index()), m.ready()))
    }

    /// Node `n`'s machine's member set.
    pub fn members(&self, n: usize) -> MemberSet {
        self.nodes.get(n).map_or(MemberSet::empty(Epoch(0)), |c| c.membership.members())
    }

    /// Node `n`'s control lcore.
    pub fn lcore(&self, n: usize) -> Option<Lcore> {
        self.nodes.get(n).map(|c| c.lcore)
    }

    /// Node `n`'s incarnation (restarts so far).
    pub fn restarts(&self, n: usize) -> u32 {
        self.nodes.get(n).map_or(0, |c| c.restarts)
    }

    // --- Faults (`faults.rs` calls these when it applies one). ---

    /// Kill: the machine stops, frames to it are lost.
    pub fn kill(&mut self, n: usize) {
        if let Some(c) = self.nodes.get_mut(n) {
            c.lcore = Lcore::Dead;
            c.held.clear();
            c.tick_gen += 1;
            c.tick_at = u64::MAX;
        }
    }

    /// Pause: the machine is frozen (frames queue up).
    pub fn pause(&mut self, n: usize) {
        if let Some(c) = self.nodes.get_mut(n).filter(|c| c.lcore == Lcore::Running) {
            c.lcore = Lcore::Paused;
            c.tick_gen += 1;
            c.tick_at = u64::MAX;
        }
    }

    /// Resume at `now`: the machine goes on from where it was (its clock
    /// jumps): a tick, the ports that changed meanwhile, the queued frames.
    pub fn resume(&mut self, n: usize, now: u64) {
        if self.nodes.get(n).is_none_or(|c| c.lcore != Lcore::Paused) {
            return;
        }
        self.nodes[n].lcore = Lcore::Running;
        self.nodes[n].membership.tick(Timestamp(now));
        self.actions(n, now, now + 1);
        self.report_ports(n, now);
        for frame in std::mem::take(&mut self.nodes[n].held) {
            self.stats.delivered += 1;
            let c = &mut self.nodes[n];
            c.received += 1;
            let _ = c.link.receive(&mut c.membership, Timestamp(now), &frame);
            self.actions(n, now, now);
        }
    }

    /// Restart at `now` (killed or not): a fresh machine and link with the
    /// next incarnation (`cluster::incarnation(n, restarts)`), joining.
    pub fn restart(&mut self, n: usize, now: u64, restarts: u32) -> Result<(), String> {
        if n >= self.nodes.len() {
            return Err(format!("node{n}: no such node"));
        }
        let inc = cluster::incarnation(n, restarts);
        let membership = cluster::membership_with(n, self.nodes_total, inc, self.quorum, self.places[n])?;
        let link = cluster::control_link_with(n, inc)?;
        let c = &mut self.nodes[n];
        c.membership = membership;
        c.link = link;
        c.lcore = Lcore::Running;
        c.held.clear();
        c.restarts = restarts;
        c.ports_reported = [true; 2];
        c.tick_gen += 1;
        c.tick_at = u64::MAX;
        self.schedule_tick(n, now);
        Ok(())
    }

    /// The CCL partition in force (control frames cross only within a
    /// group, as data-plane CCL frames do).
    pub fn set_partition(&mut self, p: Partition) {
        self.partition = p;
    }

    /// A CCL loss burst: `(loss, until_ns)`.
    pub fn set_loss_burst(&mut self, b: Option<(f64, u64)>) {
        self.loss_burst = b;
    }

    /// Data port `port` (0 inside, 1 outside) of node `n` has carrier or
    /// not (a link-down / link-up): reported to a running machine at once,
    /// to a frozen one on resume, to a dead one never.
    pub fn port(&mut self, n: usize, now: u64, port: usize, up: bool) {
        let Some(c) = self.nodes.get_mut(n) else { return };
        if let Some(p) = c.ports_now.get_mut(port) {
            *p = up;
        }
        if c.lcore == Lcore::Running {
            self.report_ports(n, now);
        }
    }

    fn report_ports(&mut self, n: usize, now: u64) {
        for port in 0..2 {
            let c = &mut self.nodes[n];
            if c.ports_now[port] != c.ports_reported[port] {
                c.ports_reported[port] = c.ports_now[port];
                c.membership.on_port(Timestamp(now), port as u16, c.ports_now[port]);
                self.actions(n, now, now);
            }
        }
    }

    /// The pipeline's re-registration progress (`Pipeline::sync_progress`
    /// for the member set it runs), as the node's worker publishes it.
    pub fn sync(&mut self, n: usize, now: u64, epoch: Epoch, done_from: u16, sent: bool) {
        if self.nodes.get(n).is_some_and(|c| c.lcore == Lcore::Running) {
            self.nodes[n].membership.on_sync(Timestamp(now), epoch, done_from, sent);
            self.actions(n, now, now);
        }
    }

    /// Carry out node `n`'s pending actions at `now`, then schedule its
    /// next tick at its `next_wakeup()` (no earlier than `earliest`).
    fn actions(&mut self, n: usize, now: u64, earliest: u64) {
        while let Some(a) = self.nodes[n].membership.poll_action() {
            match &a {
                Action::Broadcast { msg, .. } | Action::Send { msg, .. } => {
                    let to = match &a {
                        Action::Send { to, .. } => Some(to.index()),
                        _ => None,
                    };
                    let heartbeat = matches!(msg, Outgoing::Heartbeat(_));
                    let c = &mut self.nodes[n];
                    c.actions.sent += 1;
                    match c.link.seal_action(&a, &mut self.buf) {
                        Some(Ok(len)) => {
                            if heartbeat {
                                c.heartbeats_sent += 1;
                            } else {
                                c.messages_sent += 1;
                            }
                            let frame = self.buf[..len].to_vec();
                            self.transmit(n, to, now, heartbeat, frame);
                        }
                        _ => c.send_failures += 1,
                    }
                }
                Action::Members(set) => {
                    let c = &mut self.nodes[n];
                    c.actions.members += 1;
                    c.member_sets.push(MemberSetChange {
                        at_ns: now,
                        epoch: set.epoch().0,
                        members: ids(set.bits()),
                    });
                    let done_from = set.bits() & !(1u16 << n);
                    self.orders.push((n, now, Order::Members(*set)));
                    if !self.driven {
                        self.schedule(now + SYNC_DELAY_NS, Ev::Sync { node: n, epoch: set.epoch(), done_from });
                    }
                }
                Action::Lease(until) => {
                    let c = &mut self.nodes[n];
                    c.actions.leases += 1;
                    c.last_lease = Some(*until);
                    self.orders.push((n, now, Order::Lease(*until)));
                }
                Action::Reset => {
                    self.nodes[n].actions.resets += 1;
                    self.orders.push((n, now, Order::Reset));
                }
                Action::DataPorts { up } => {
                    let c = &mut self.nodes[n];
                    c.actions.data_ports += 1;
                    c.data_ports_up = *up;
                    self.orders.push((n, now, Order::DataPorts(*up)));
                }
                Action::Event(e) => {
                    let c = &mut self.nodes[n];
                    c.actions.events += 1;
                    if let controlplane::membership::EventKind::State { from, to, .. } = e.kind {
                        if from != to {
                            c.transitions.push(Transition { at_ns: e.at.0, from, to });
                        }
                    }
                }
                Action::Replica(_) => self.nodes[n].actions.replica += 1,
                // The simulated nodes run no NAT: nothing asks for a
                // dynamic-NAT translation.
                Action::XlateRequest { .. } | Action::Query { .. } | Action::LimitReport { .. } => {}
            }
        }
        let w = self.nodes[n].membership.next_wakeup().0.max(earliest);
        self.schedule_tick(n, w);
    }

    /// A frame from node `from` to `to` (`None`: every other node), through
    /// the link model.
    fn transmit(&mut self, from: usize, to: Option<usize>, now: u64, heartbeat: bool, frame: Vec<u8>) {
        self.stats.frames += 1;
        self.stats.heartbeats += u64::from(heartbeat);
        let link = match self.loss_burst {
            Some((loss, until)) if now < until => CclLink { loss: loss.max(self.link.loss), ..self.link.clone() },
            _ => self.link.clone(),
        };
        for t in (0..self.nodes.len()).filter(|&t| t != from && to.is_none_or(|x| x == t)) {
            self.stats.copies += 1;
            if self.cut.is_some_and(|c| c.cuts(from, t, now)) {
                self.stats.cut += 1;
                continue;
            }
            if self.partition.separates(from, t) {
                self.stats.partitioned += 1;
                continue;
            }
            match link.fate(&mut self.rng) {
                Fate::Lost => self.stats.lost += 1,
                Fate::Delivered { delay_ns, reordered } => {
                    self.stats.reordered += u64::from(reordered);
                    self.schedule(now + delay_ns, Ev::Deliver { to: t, frame: frame.clone() });
                }
            }
        }
    }

    /// Every node's membership as of `now`.
    pub fn report(&self, now: u64) -> MembershipReport {
        let per_node = self
            .nodes
            .iter()
            .enumerate()
            .map(|(node, c)| {
                let m = &c.membership;
                NodeMembership {
                    node,
                    state: m.state(),
                    epoch: m.epoch().0,
                    members: ids(m.members().bits()),
                    control: m.control().map(|c| c.0),
                    ready: m.ready(),
                    heartbeats_sent: c.heartbeats_sent,
                    messages_sent: c.messages_sent,
                    send_failures: c.send_failures,
                    actions: c.actions,
                    last_lease_ns: c.last_lease.map(|t| t.0),
                    data_ports_up: c.data_ports_up,
                    member_sets: c.member_sets.clone(),
                    transitions: c.transitions.clone(),
                    received: c.received,
                    counters: *m.counters(),
                    ccl_drops: c
                        .link
                        .counters()
                        .by_drop()
                        .filter(|(_, n)| *n > 0)
                        .map(|(r, n)| (r.to_string(), n))
                        .collect(),
                    peers: m
                        .snapshot(Timestamp(now))
                        .iter()
                        .map(|p| PeerReport {
                            id: p.id.0,
                            this_node: p.this_node,
                            last_heard_ms: p.last_heard_ms(),
                            heartbeats: p.heartbeats,
                            incarnation: p.incarnation,
                            state: p.state,
                            epoch: p.epoch.map(|e| e.0),
                            control: p.control.map(|c| c.0),
                            member: p.member,
                        })
                        .collect(),
                    history: m.history().map(|e| format!("{} ms {}", e.at.0 / 1_000_000, e.text)).collect(),
                }
            })
            .collect();
        let in_flight = self.queue.iter().filter(|q| matches!(q.ev, Ev::Deliver { .. })).count() as u64
            + self.nodes.iter().map(|c| c.held.len() as u64).sum::<u64>();
        MembershipReport { per_node, link: ControlLinkStats { in_flight, ..self.stats.clone() } }
    }
}

/// The node ids of a member bitmap, ascending.
fn ids(bits: u16) -> Vec<u8> {
    (0..16u8).filter(|i| bits & (1 << i) != 0).collect()
}
