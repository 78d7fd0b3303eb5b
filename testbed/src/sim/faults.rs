//! Faults in the simulator (issue 10): nodes that die, freeze, come back,
//! lose a link; a CCL that splits or loses a burst of frames — the test
//! bed's `clusterfw-testbed kill|pause|resume|restart|link-down|partition`
//! on the virtual clock, for seeded fault schedules.
//!
//! What each does to the simulated world:
//! - **kill**: the node stops for good (its queued frames are gone, frames
//!   to it are lost); like the test bed's harness (BFD's part) both routers
//!   withdraw it at once;
//! - **pause / resume**: the node stops processing (frames queue up to a
//!   ring's worth, `PAUSED_RING`; its timers wait), the routers withdraw it;
//!   on resume it goes on from where it was, the routers send to it again
//!   (unless it shut its ports itself);
//! - **restart**: a killed (or live) node starts again: a new pipeline, a
//!   new incarnation, an empty ring;
//! - **link-down / link-up**: the router on that side withdraws / restores
//!   the node;
//! - **partition / heal**: CCL frames cross only within a group;
//! - **CCL loss burst**: the CCL's loss probability is raised for a while.
//!
//! The routers pick among their live next hops with Linux's hash-threshold
//! (`net::hash_threshold`) once a scenario has faults, so a withdrawal also
//! moves flows between survivors. A scenario without faults is untouched:
//! modulo hashing, no checks here, the same trace.

use super::membership::{Lcore, Order};
use super::net::{CclLink, Partition, Side};
use super::report::Invariant;
use super::{Ev, Sim};
use crate::sim::cluster;
use controlplane::membership::State as MState;
use dataplane::pipeline::SyncProgress;
use dataplane::types::{Epoch, Timestamp};

/// Frames a frozen node's ring holds; more are lost (a NIC ring).
pub const PAUSED_RING: usize = 1024;

/// Deliberate driver defects, to prove the fault scenarios' checks bite
/// (`SimConfig::inject`; tests only).
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Inject {
    /// `Reset` orders are ignored: a node that left keeps its flows and
    /// owns them again once it is back (a second owner).
    NoReset,
    /// `Members` orders are ignored: the pipelines never learn a new
    /// member set, so nothing is taken over.
    NoMembers,
    /// The checks ignore partition sides (two sides' control nodes and
    /// owners count as one side's).
    OneSide,
}

/// One fault.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub enum FaultKind {
    Kill(usize),
    Pause(usize),
    Resume(usize),
    Restart(usize),
    /// Node `n` goes to group `group[n]` (absent: group 0).
    Partition(Vec<u8>),
    Heal,
    LinkDown(usize, Side),
    LinkUp(usize, Side),
    /// The CCL loses frames with probability `loss` until `until_ns`.
    CclLoss { loss: f64, until_ns: u64 },
}

/// A fault at a virtual time.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FaultAt {
    pub at_ns: u64,
    pub fault: FaultKind,
}

/// A node's state in a fault scenario.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Life {
    pub state: State,
    /// The router-side link of each side (`Side as usize`) is up.
    pub links: [bool; 2],
    /// The node holds its data ports up (it shuts them when it leaves the
    /// cluster; membership-driven scenarios).
    pub ports_up: bool,
    /// Restarts so far (the incarnation grows with them).
    pub restarts: u32,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum State {
    Running,
    Paused,
    Dead,
}

impl Default for Life {
    fn default() -> Self {
        Life { state: State::Running, links: [true; 2], ports_up: true, restarts: 0 }
    }
}

impl Life {
    pub fn running(&self) -> bool {
        self.state == State::Running
    }
    pub fn paused(&self) -> bool {
        self.state == State::Paused
    }
    pub fn dead(&self) -> bool {
        self.state == State::Dead
    }
    /// Whether the router on `side` sends to the node.
    pub fn routed(&self, side: Side) -> bool {
        self.links[side as usize] && self.ports_up
    }
}

/// What is in force and what happened.
#[derive(Clone, Debug, Default)]
pub struct FaultState {
    pub partition: Partition,
    /// `(loss, until_ns)` of a CCL loss burst.
    pub loss_burst: Option<(f64, u64)>,
    /// Host frames the router had no live next hop for.
    pub no_next_hop: u64,
    /// Frames to a dead node, or beyond a frozen node's ring.
    pub lost_at_node: u64,
    /// CCL frame copies stopped by a partition.
    pub ccl_partitioned: u64,
    /// Frames a node sent out of a port whose link is down.
    pub lost_at_link: u64,
    /// Faults applied, in order, with their time (for reports).
    pub applied: Vec<(u64, String)>,
}

impl FaultState {
    /// The CCL link model in force at `now` (a loss burst raises `loss`).
    pub fn ccl_link(&self, base: &CclLink, now: u64) -> CclLink {
        match self.loss_burst {
            Some((loss, until)) if now < until => CclLink { loss: loss.max(base.loss), ..base.clone() },
            _ => base.clone(),
        }
    }
}

impl Sim {
    pub(super) fn schedule_faults(&mut self) {
        for i in 0..self.cfg.faults.len() {
            let at = self.cfg.faults[i].at_ns;
            self.schedule(at, Ev::Fault(i));
        }
    }

    /// Whether a frame arriving for `node` is taken (a dead node's are lost,
    /// a frozen node's ring overflows).
    pub(super) fn node_receives(&mut self, node: usize) -> bool {
        let n = &self.nodes[node];
        let ok = match n.life.state {
            State::Running => true,
            State::Paused => n.rxq.len() < PAUSED_RING,
            State::Dead => false,
        };
        if !ok {
            self.faulted.lost_at_node += 1;
        }
        ok
    }

    /// Per node: whether the router on `side` sends to it.
    pub(super) fn router_live(&self, side: Side) -> Vec<bool> {
        self.nodes.iter().map(|n| n.life.routed(side)).collect()
    }

    pub(super) fn apply_fault(&mut self, i: usize) {
        let Some(f) = self.cfg.faults.get(i).map(|f| f.fault.clone()) else {
            return;
        };
        self.faulted.applied.push((self.now, format!("{f:?}")));
        self.watch_fault(i);
        let now = self.now;
        match f {
            FaultKind::Kill(n) if n < self.nodes.len() => {
                let node = &mut self.nodes[n];
                node.life.state = State::Dead;
                node.life.links = [false; 2];
                node.rxq.clear();
                node.poll_pending = false;
                node.drv.lost_state_at = Some(now);
                if let Some(c) = self.control.as_mut() {
                    c.kill(n);
                }
                self.note_lost_state(n);
            }
            FaultKind::Pause(n) if n < self.nodes.len() => {
                let node = &mut self.nodes[n];
                if node.life.running() {
                    node.life.state = State::Paused;
                    node.life.links = [false; 2];
                    if let Some(c) = self.control.as_mut() {
                        c.pause(n);
                    }
                }
            }
            FaultKind::Resume(n) if n < self.nodes.len() => {
                let node = &mut self.nodes[n];
                if node.life.paused() {
                    node.life.state = State::Running;
                    node.life.links = [true; 2];
                    if !node.rxq.is_empty() && !node.poll_pending {
                        node.poll_pending = true;
                        self.schedule(self.now + super::POLL_DELAY_NS, Ev::NodePoll(n));
                    }
                    // Its control lcore goes on where it was: its first
                    // input sees the gap (`Paused` past the hold time).
                    if let Some(c) = self.control.as_mut() {
                        c.resume(n, now);
                    }
                    self.watch.excuse_until = self.watch.excuse_until.max(now);
                    self.control_flush();
                }
            }
            FaultKind::Restart(n) if n < self.nodes.len() => {
                self.restart_node(n);
                self.note_lost_state(n);
                let restarts = self.nodes[n].life.restarts;
                if let Some(c) = self.control.as_mut() {
                    if let Err(e) = c.restart(n, now, restarts) {
                        self.violation(format!("node{n} restart: {e}"));
                    }
                }
                self.control_flush();
            }
            FaultKind::Partition(group) => {
                let p = Partition { group };
                if self.cfg.inject != Some(Inject::OneSide) {
                    self.watch.groups = p.clone();
                }
                if let Some(c) = self.control.as_mut() {
                    c.set_partition(p.clone());
                }
                self.faulted.partition = p;
            }
            FaultKind::Heal => {
                // The owner and control-node checks keep the old sides
                // until the heal has settled (`Watch::groups`).
                self.faulted.partition = Partition::default();
                if let Some(c) = self.control.as_mut() {
                    c.set_partition(Partition::default());
                }
                self.watch.excuse_until = self.watch.excuse_until.max(now);
            }
            FaultKind::LinkDown(n, side) | FaultKind::LinkUp(n, side) if n < self.nodes.len() => {
                let up = matches!(f, FaultKind::LinkUp(..));
                self.nodes[n].life.links[side as usize] = up;
                if !self.nodes[n].life.dead() {
                    if let Some(c) = self.control.as_mut() {
                        c.port(n, now, usize::from(side.port().0), up);
                    }
                    self.control_flush();
                }
            }
            FaultKind::CclLoss { loss, until_ns } => {
                self.faulted.loss_burst = Some((loss, until_ns));
                if let Some(c) = self.control.as_mut() {
                    c.set_loss_burst(Some((loss, until_ns)));
                }
                self.watch.excuse_until = self.watch.excuse_until.max(until_ns);
            }
            _ => {}
        }
    }

    /// Node `n` starts again: a new pipeline with a higher incarnation.
    fn restart_node(&mut self, n: usize) {
        let restarts = self.nodes[n].life.restarts + 1;
        let workers = match super::node_config(&self.cfg, n).and_then(|mut pc| {
            if let Some(c) = pc.cluster.as_mut() {
                c.incarnation = cluster::incarnation(n, restarts);
            }
            super::node_workers(&self.cfg, n, pc)
        }) {
            Ok(p) => p,
            Err(e) => {
                self.violation(format!("node{n} restart: {e}"));
                return;
            }
        };
        let was_dead = self.nodes[n].life.dead();
        let node = &mut self.nodes[n];
        node.workers = workers;
        node.rxq.clear();
        node.poll_pending = false;
        node.life = super::faults::Life { restarts, ports_up: false, ..Default::default() };
        node.drv = Driver { lost_state_at: Some(self.now), ..Driver::default() };
        if was_dead {
            self.schedule(self.now + self.timer_period(), Ev::NodeTimers(n));
        }
    }
}

/// `poll_timers` period of membership-driven scenarios: the node's (the
/// re-registration scan's `SYNC_BUDGET` per tick sets the scan's pace).
pub const DRIVEN_TIMER_PERIOD_NS: u64 = 1_000_000;
/// The worker announces the node twice when its data ports come up
/// (`node/src/worker.rs`, `ANNOUNCE_AGAIN_NS`).
pub const ANNOUNCE_AGAIN_NS: u64 = 20_000_000;

const MS: u64 = 1_000_000;
/// Heartbeat interval and hold time of the simulated machines.
const INTERVAL_NS: u64 = super::membership::HEARTBEAT_INTERVAL_MS * MS;
const HOLD_NS: u64 = super::membership::HOLD_TIME_MS * MS;

/// Two control nodes in one connected partition may coexist this long
/// (after the last heal, resume or loss burst, whichever is later): the
/// worse one leaves when the better one's next heartbeat reaches it — at
/// most one heartbeat interval, a tick (interval / 4) and the CCL latency
/// later; one interval more covers a heartbeat lost on a lossy CCL and
/// the checkpoint period.
pub const DUAL_CONTROL_BOUND_NS: u64 = 2 * INTERVAL_NS + INTERVAL_NS / 4;
/// After a heal, one control node, one epoch, every live node a ready
/// member, within this bound: the worse control node hears the better
/// one's heartbeat within an interval (+ a tick) and rejoins at once (a
/// heal is no fault of its own: no backoff); the join request is answered
/// at the control node's next tick (interval / 4), admissions of several
/// nodes share one epoch; the replicated state arrives in a few CCL round
/// trips and the dataplane's `SyncDone`s follow the owners'
/// re-registration scans (capacity / 512 ticks of 1 ms); the other members
/// adopt the new epoch with the next heartbeat (an interval). That is
/// 2.5 intervals plus the scan; a hold time of margin (300 ms) covers a
/// second round when the first admission crossed a set change: hold + 3 ×
/// interval = 600 ms with the test bed's 100 ms / 300 ms.
pub const HEAL_BOUND_NS: u64 = HOLD_NS + 3 * INTERVAL_NS;

/// What the node's driver keeps beside the pipeline (membership-driven
/// scenarios): the member set's epoch it runs, the lease, the sync
/// progress last published, when it last lost its flows.
#[derive(Copy, Clone, Debug, Default)]
pub struct Driver {
    pub epoch: Epoch,
    /// `Timestamp(0)`: fenced (the start, like the node's).
    pub lease: Timestamp,
    pub last_sync: Option<SyncProgress>,
    /// Last reset, kill or restart (its flows are gone).
    pub lost_state_at: Option<u64>,
    pub announce_again: Option<u64>,
}

/// One failure and its recovery (`SimConfig::faults`, paired).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Episode {
    pub kind: &'static str,
    pub node: Option<usize>,
    pub at_ns: u64,
    /// The recovery (restart, resume, heal, link up, end of the burst).
    pub recover_ns: u64,
    /// First new epoch applied anywhere after the fault.
    pub new_epoch_ns: Option<u64>,
    /// First frame of a taken-over flow (one whose transmitter changed)
    /// sent to a host after the fault.
    pub takeover_ns: Option<u64>,
    /// First checkpoint after the recovery with the cluster settled (one
    /// control node, one epoch, every live node a ready member).
    pub settled_ns: Option<u64>,
    /// Nodes that lost their flows (reset, kill, restart) during the
    /// episode: more than one makes it a multiple failure.
    pub lost_state: Vec<usize>,
    /// The next episode's start (or the schedule's end): it must have
    /// settled by then.
    pub quiet_until_ns: u64,
    /// The next episode began before this one recovered (a double
    /// failure): they settle together — the later one's settling (its
    /// recovery the later of both) stands for this one.
    pub overlapped: bool,
    /// The epoch before the fault.
    #[serde(skip)]
    epoch_before: u64,
    /// Index of the fault that begins it.
    #[serde(skip)]
    start: usize,
}

impl Episode {
    fn ms(t: Option<u64>, from: u64) -> Option<f64> {
        t.map(|t| t.saturating_sub(from) as f64 / 1e6)
    }
    /// Fault → new epoch (ms).
    pub fn detection_ms(&self) -> Option<f64> {
        Self::ms(self.new_epoch_ns, self.at_ns)
    }
    /// Fault → first packet of a taken-over flow forwarded (ms).
    pub fn takeover_ms(&self) -> Option<f64> {
        Self::ms(self.takeover_ns, self.at_ns)
    }
    /// Recovery → settled (ms).
    pub fn settle_ms(&self) -> Option<f64> {
        Self::ms(self.settled_ns, self.recover_ns)
    }
}

/// The episodes of a schedule: each failure paired with its recovery.
pub fn episodes(faults: &[FaultAt], end_ns: u64) -> Vec<Episode> {
    let mut out = Vec::new();
    for (i, f) in faults.iter().enumerate() {
        let later = &faults[i + 1..];
        let find = |want: &dyn Fn(&FaultKind) -> bool| later.iter().find(|g| want(&g.fault)).map(|g| g.at_ns);
        let (kind, node, recover) = match &f.fault {
            FaultKind::Kill(n) => ("kill", Some(*n), find(&|g| *g == FaultKind::Restart(*n))),
            FaultKind::Pause(n) => ("pause", Some(*n), find(&|g| *g == FaultKind::Resume(*n))),
            FaultKind::Partition(_) => ("partition", None, find(&|g| *g == FaultKind::Heal)),
            FaultKind::LinkDown(n, s) => ("link-down", Some(*n), find(&|g| *g == FaultKind::LinkUp(*n, *s))),
            FaultKind::CclLoss { until_ns, .. } => ("ccl-loss", None, Some(*until_ns)),
            FaultKind::Restart(n) => {
                // A restart of a live node (not the end of a kill).
                let killed = faults[..i].iter().rev().find(|g| matches!(g.fault, FaultKind::Kill(m) | FaultKind::Restart(m) if m == *n));
                if matches!(killed.map(|g| &g.fault), Some(FaultKind::Kill(_))) {
                    continue;
                }
                ("restart", Some(*n), Some(f.at_ns))
            }
            _ => continue,
        };
        out.push(Episode {
            kind,
            node,
            at_ns: f.at_ns,
            recover_ns: recover.unwrap_or(u64::MAX),
            new_epoch_ns: None,
            takeover_ns: None,
            settled_ns: None,
            lost_state: Vec::new(),
            quiet_until_ns: u64::MAX,
            overlapped: false,
            epoch_before: 0,
            start: i,
        });
    }
    for i in 0..out.len() {
        out[i].quiet_until_ns = out.get(i + 1).map_or(end_ns, |e| e.at_ns);
        if out[i].quiet_until_ns < out[i].recover_ns && i + 1 < out.len() {
            out[i].overlapped = true;
            out[i + 1].recover_ns = out[i + 1].recover_ns.max(out[i].recover_ns);
        }
    }
    out
}

/// The fault scenarios' checks as the run goes (`Sim::watch_*`).
#[derive(Clone, Debug, Default)]
pub struct Watch {
    pub episodes: Vec<Episode>,
    /// Episodes begun (index of the next one to begin).
    begun: usize,
    /// The sides the owner and control-node checks use: the partition in
    /// force, kept after a heal until it settled (or `HEAL_BOUND_NS`).
    pub groups: Partition,
    /// Dual control nodes and settling are excused until then (a heal,
    /// resume or loss burst's end).
    pub excuse_until: u64,
    dual_since: Option<u64>,
    /// Last node that sent each flow's frames to a host.
    last_tx: Vec<Option<u8>>,
    pub takeovers_seen: u64,
    /// Of them, frames of IPv6 flows.
    pub takeovers_seen_ipv6: u64,
    /// IPv6 flows whose transmitter changed (taken over), by flow.
    taken_over_ipv6: std::collections::BTreeSet<usize>,
    pub double_owner_frames: u64,
    pub double_owner_examples: Vec<String>,
    pub non_owner_frames: u64,
    pub non_owner_examples: Vec<String>,
    /// Checkpoint flow checks that found owners on two sides of a
    /// partition (split brain, `split-brain: elect`), and flows so at
    /// their end check.
    pub split_owned_checks: u64,
    pub split_owned_at_end: u64,
    pub control_violations: Vec<String>,
    pub settle_violations: Vec<String>,
    max_epoch: u64,
}

/// What the fault scenario did and measured (`Report::faults`).
#[derive(Clone, Debug, serde::Serialize)]
pub struct FaultReport {
    pub episodes: Vec<Episode>,
    pub takeovers: u64,
    /// IPv6 flows (`SimConfig::ipv6_share`) among them: transmitter
    /// changes of IPv6 frames, and the distinct IPv6 flows taken over and
    /// how many of those completed.
    pub takeovers_ipv6: u64,
    pub ipv6_flows_taken_over: u64,
    pub ipv6_flows_taken_over_completed: u64,
    pub split_owned_checks: u64,
    pub lost_at_link: u64,
    pub lost_at_node: u64,
    pub no_next_hop: u64,
    pub ccl_partitioned: u64,
    /// Per TCP flow, the longest stall of the download (client side: time
    /// between two in-order data arrivals), ms, ascending; and the worst
    /// one's flow and start (ms).
    pub stalls_ms: Vec<f64>,
    pub worst_stall: Option<(u32, f64)>,
    /// Flows that started and were not complete at the end: with one
    /// owner that may own (live, unfenced), none, several.
    pub open_owned_at_end: (u64, u64, u64),
}

impl FaultReport {
    /// Median and worst per-flow longest stall (ms).
    pub fn stall_median_worst(&self) -> (f64, f64) {
        let n = self.stalls_ms.len();
        if n == 0 {
            return (0.0, 0.0);
        }
        (self.stalls_ms[n / 2], self.stalls_ms[n - 1])
    }

    /// One line per episode: kind, node, detection, takeover, settling.
    pub fn lines(&self) -> Vec<String> {
        let f = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1} ms"));
        self.episodes
            .iter()
            .map(|e| {
                format!(
                    "{} {} at {} ms (recovery {}): new epoch {}, takeover {}, settled {} after recovery; lost state {:?}",
                    e.kind,
                    e.node.map_or("-".to_string(), |n| format!("node{n}")),
                    e.at_ns / MS,
                    // A fault never recovered has `u64::MAX`.
                    if e.recover_ns == u64::MAX {
                        "never".to_string()
                    } else {
                        format!("+{} ms", e.recover_ns.saturating_sub(e.at_ns) / MS)
                    },
                    f(e.detection_ms()),
                    f(e.takeover_ms()),
                    f(e.settle_ms()),
                    e.lost_state
                )
            })
            .collect()
    }
}

impl Sim {
    /// Carry out the machines' orders, as `node/src/ccl.rs` does: member
    /// sets and resets to the pipeline, the lease to its fence, the data
    /// ports to the routers (withdraw / restore) with the worker's
    /// announcements.
    pub(super) fn carry_out(&mut self, orders: Vec<(usize, u64, Order)>) {
        for (n, at, order) in orders {
            if at > self.now {
                self.now = at;
            }
            let ts = Timestamp(self.now);
            match order {
                Order::Members(_) if self.cfg.inject == Some(Inject::NoMembers) => {}
                Order::Reset if self.cfg.inject == Some(Inject::NoReset) => {}
                Order::Members(m) => {
                    self.nodes[n].workers.each(|p| p.set_members(ts, m));
                    self.nodes[n].drv.epoch = m.epoch();
                    self.watch_epoch(m.epoch().0);
                }
                Order::Reset => {
                    self.nodes[n].workers.each(|p| p.reset(ts));
                    self.nodes[n].drv.lost_state_at = Some(self.now);
                    self.note_lost_state(n);
                }
                Order::Lease(until) => {
                    self.nodes[n].workers.each(|p| p.set_lease(until));
                    self.nodes[n].drv.lease = until;
                }
                Order::DataPorts(up) => {
                    self.nodes[n].life.ports_up = up;
                    if up {
                        self.nodes[n].workers.each(|p| {
                            p.announce(ts);
                        });
                        self.nodes[n].drv.announce_again = Some(self.now + ANNOUNCE_AGAIN_NS);
                        self.drain_node(n);
                    }
                }
            }
        }
    }

    /// Orders the control planes gave outside `control_until` (a fault,
    /// a sync report), carried out now.
    pub(super) fn control_flush(&mut self) {
        if let Some(c) = self.control.as_mut() {
            let o = c.take_orders();
            self.carry_out(o);
        }
    }

    /// After a node's `poll_timers` (membership-driven): the second
    /// announcement, and the pipeline's sync progress for the member set
    /// it runs, reported to its machine when it changed (the worker's
    /// `CclShared::sync`, read by the control lcore).
    pub(super) fn driver_tick(&mut self, n: usize) {
        let now = self.now;
        if self.nodes[n].drv.announce_again.is_some_and(|t| now >= t) {
            self.nodes[n].drv.announce_again = None;
            self.nodes[n].workers.each(|p| {
                p.announce(Timestamp(now));
            });
            self.drain_node(n);
        }
        let p = self.nodes[n].workers.sync_progress(self.nodes[n].drv.epoch);
        if self.nodes[n].drv.last_sync != Some(p) {
            self.nodes[n].drv.last_sync = Some(p);
            if let Some(c) = self.control.as_mut() {
                c.sync(n, now, p.epoch, p.done_from, p.sent);
            }
            self.control_flush();
        }
    }

    /// Node `n` lost its flows during the current episode.
    pub(super) fn note_lost_state(&mut self, n: usize) {
        if let Some(e) = self.current_episode() {
            if !e.lost_state.contains(&n) {
                e.lost_state.push(n);
            }
        }
    }

    /// Node `n` could act as an owner now: not dead, its lease running.
    pub(super) fn may_own(&self, n: usize) -> bool {
        if !self.driven() {
            return true;
        }
        let node = &self.nodes[n];
        !node.life.dead() && node.drv.lease.0 > self.now
    }

    /// Two of `owners` in one connected partition (fault scenarios: the
    /// sides of `Watch::groups`; otherwise any two).
    pub(super) fn conflicting(&self, owners: &[usize]) -> bool {
        if !self.driven() {
            return owners.len() > 1;
        }
        owners.iter().enumerate().any(|(i, &a)| owners[i + 1..].iter().any(|&b| !self.watch.groups.separates(a, b)))
    }

    /// Flow `f` completed, then a node that sent its frames lost its
    /// state (reset, kill, restart): it may rightly have no owner.
    pub(super) fn state_lost_since_done(&self, f: usize) -> bool {
        let fl = &self.flows[f];
        let done = match &fl.kind {
            super::FlowKind::Tcp { c, s } => c.done_at.max(s.done_at),
            super::FlowKind::Udp { c, .. } => c.done_at,
        };
        let Some(done) = done else { return false };
        (0..self.nodes.len()).any(|n| {
            fl.tx_nodes & (1 << n) != 0 && (self.nodes[n].life.dead() || self.nodes[n].drv.lost_state_at.is_some_and(|t| t >= done))
        })
    }

    fn current_episode(&mut self) -> Option<&mut Episode> {
        let i = self.watch.begun.checked_sub(1)?;
        self.watch.episodes.get_mut(i)
    }

    /// Fault `i` is applied: a failure begins an episode (the previous one
    /// must have settled by now).
    fn watch_fault(&mut self, i: usize) {
        if self.watch.episodes.get(self.watch.begun).is_none_or(|e| e.start != i) {
            return;
        }
        self.settle_due();
        let max = self.watch.max_epoch;
        self.watch.begun += 1;
        if let Some(e) = self.current_episode() {
            e.epoch_before = max;
        }
    }

    /// The current episode must have settled (called when the next one
    /// begins and at the end).
    fn settle_due(&mut self) {
        let now = self.now;
        let Some(e) = self.current_episode().cloned() else { return };
        if e.settled_ns.is_none() && !e.overlapped {
            let v = format!(
                "t={}ms {} {} at {} ms (recovered at {} ms) not settled within its quiet interval; {}",
                now / MS,
                e.kind,
                e.node.map_or("-".to_string(), |n| format!("node{n}")),
                e.at_ns / MS,
                e.recover_ns / MS,
                self.cluster_line()
            );
            self.watch.settle_violations.push(v);
        }
    }

    fn watch_epoch(&mut self, epoch: u64) {
        let now = self.now;
        if let Some(e) = self.current_episode() {
            if e.new_epoch_ns.is_none() && epoch > e.epoch_before && now >= e.at_ns {
                e.new_epoch_ns = Some(now);
            }
        }
        self.watch.max_epoch = self.watch.max_epoch.max(epoch);
    }

    /// Node `n` sent a frame of flow `f` towards a host: it holds the
    /// flow and may own it (not fenced), and no other node of its side
    /// that may own does.
    pub(super) fn watch_tx(&mut self, n: usize, f: usize) {
        let t = self.flows[f].tuple;
        let now = self.now;
        if !self.may_own(n) || !self.nodes[n].workers.holds(&t) {
            self.watch.non_owner_frames += 1;
            if self.watch.non_owner_examples.len() < 5 {
                let d = self.flow_desc(f);
                let why = if self.may_own(n) { "does not hold it" } else { "is fenced or dead" };
                self.watch.non_owner_examples.push(format!("t={}µs node{n} sent a frame of {d} but {why}", now / 1000));
            }
        }
        let others: Vec<usize> = (0..self.nodes.len())
            .filter(|&m| m != n && !self.watch.groups.separates(m, n) && self.may_own(m))
            .filter(|&m| self.nodes[m].workers.holds(&t))
            .collect();
        if !others.is_empty() {
            self.watch.double_owner_frames += 1;
            if self.watch.double_owner_examples.len() < 5 {
                let d = self.flow_desc(f);
                self.watch
                    .double_owner_examples
                    .push(format!("t={}µs node{n} sent a frame of {d} while nodes {others:?} held it too", now / 1000));
            }
        }
        if self.watch.last_tx.len() < self.flows.len() {
            self.watch.last_tx.resize(self.flows.len(), None);
        }
        let prev = self.watch.last_tx[f].replace(n as u8);
        if prev.is_some_and(|p| usize::from(p) != n) {
            self.watch.takeovers_seen += 1;
            if self.flows[f].v6() {
                self.watch.takeovers_seen_ipv6 += 1;
                self.watch.taken_over_ipv6.insert(f);
            }
            if let Some(e) = self.current_episode() {
                if e.takeover_ns.is_none() && now >= e.at_ns {
                    e.takeover_ns = Some(now);
                }
            }
        }
    }

    /// The cluster, settled: every live node running, one control node,
    /// every live node a ready member at one epoch whose set is the live
    /// nodes, its pipeline running that set, its ports up.
    fn settled(&self) -> bool {
        let Some(c) = self.control.as_ref() else { return true };
        let live: Vec<usize> = (0..self.nodes.len()).filter(|&n| !self.nodes[n].life.dead()).collect();
        let bits: u16 = live.iter().fold(0, |b, &n| b | 1 << n);
        let mut epoch = None;
        let mut controls = 0;
        for &n in &live {
            if !self.nodes[n].life.running() || c.lcore(n) != Some(Lcore::Running) || !self.nodes[n].life.ports_up {
                return false;
            }
            let Some((st, e, _, ready)) = c.machine(n) else { return false };
            if !ready || !matches!(st, MState::Data | MState::Control) || *epoch.get_or_insert(e) != e {
                return false;
            }
            controls += usize::from(st == MState::Control);
            if c.members(n).bits() != bits || self.nodes[n].drv.epoch != e || self.nodes[n].drv.lease.0 <= self.now {
                return false;
            }
        }
        controls == 1
    }

    /// "node0 control e5 …" for violation reports.
    fn cluster_line(&self) -> String {
        let Some(c) = self.control.as_ref() else { return String::new() };
        (0..self.nodes.len())
            .map(|n| match c.machine(n) {
                Some((st, e, ctl, ready)) => format!(
                    "node{n} {st} e{} ctl {:?} ready {ready} lcore {:?} ports {} set {:#06b}",
                    e.0,
                    ctl,
                    c.lcore(n).unwrap_or(Lcore::Dead),
                    self.nodes[n].life.ports_up,
                    c.members(n).bits()
                ),
                None => format!("node{n} ?"),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// A checkpoint of a fault scenario: owners per side, control nodes
    /// per side, settling of the current episode.
    pub(super) fn watch_checkpoint(&mut self, owners: &[Vec<usize>]) {
        let now = self.now;
        for (f, o) in owners.iter().enumerate() {
            if o.len() < 2 || self.flows[f].done() {
                continue;
            }
            if self.conflicting(o) {
                let d = self.flow_desc(f);
                self.violation(format!("{d}: owners {o:?} (live, unfenced, one side)"));
            } else {
                self.watch.split_owned_checks += 1;
            }
        }
        // Control nodes per side.
        if let Some(c) = self.control.as_ref() {
            let ctl: Vec<usize> = (0..self.nodes.len())
                .filter(|&n| c.lcore(n) == Some(Lcore::Running) && c.machine(n).is_some_and(|m| m.0 == MState::Control))
                .collect();
            let dual = ctl.iter().enumerate().any(|(i, &a)| ctl[i + 1..].iter().any(|&b| !self.watch.groups.separates(a, b)));
            if dual {
                let since = *self.watch.dual_since.get_or_insert(now);
                if now.saturating_sub(since.max(self.watch.excuse_until)) > DUAL_CONTROL_BOUND_NS {
                    let v = format!("t={}ms control nodes {ctl:?} on one side since {} ms; {}", now / MS, since / MS, self.cluster_line());
                    if self.watch.control_violations.len() < 10 {
                        self.watch.control_violations.push(v);
                    }
                    self.watch.dual_since = Some(now);
                }
            } else {
                self.watch.dual_since = None;
            }
        }
        // Settling.
        let settled = self.settled();
        let Some(e) = self.current_episode().cloned() else { return };
        if e.settled_ns.is_none() && now >= e.recover_ns {
            if settled && now > e.quiet_until_ns {
                let v = format!(
                    "t={}ms {} {} at {} ms settled only {} ms after its recovery, past its quiet interval",
                    now / MS,
                    e.kind,
                    e.node.map_or("-".to_string(), |n| format!("node{n}")),
                    e.at_ns / MS,
                    (now - e.recover_ns) / MS
                );
                self.watch.settle_violations.push(v);
            }
            if settled {
                if let Some(e) = self.current_episode() {
                    e.settled_ns = Some(now);
                }
                if e.kind == "partition" {
                    self.watch.groups = Partition::default();
                    if now - e.recover_ns > HEAL_BOUND_NS {
                        let v = format!(
                            "t={}ms the heal at {} ms settled after {} ms (bound {} ms)",
                            now / MS,
                            e.recover_ns / MS,
                            (now - e.recover_ns) / MS,
                            HEAL_BOUND_NS / MS
                        );
                        self.watch.settle_violations.push(v);
                    }
                }
            } else if e.kind == "partition" && now - e.recover_ns > HEAL_BOUND_NS && self.watch.groups != Partition::default() {
                let v = format!(
                    "t={}ms the heal at {} ms not settled within {} ms: {}",
                    now / MS,
                    e.recover_ns / MS,
                    HEAL_BOUND_NS / MS,
                    self.cluster_line()
                );
                self.watch.settle_violations.push(v);
                self.watch.groups = Partition::default();
            }
        }
    }

    /// The fault scenarios' invariants at the end.
    pub(super) fn watch_finish(&mut self, invariants: &mut Vec<Invariant>, failures: &mut Vec<String>) {
        self.settle_due();
        let cv = std::mem::take(&mut self.watch.control_violations);
        invariants.push(Invariant {
            name: "one-control-per-partition",
            ok: Some(cv.is_empty()),
            detail: format!(
                "{} times two control nodes on one side for longer than {} ms",
                cv.len(),
                DUAL_CONTROL_BOUND_NS / MS
            ),
        });
        failures.extend(cv);
        let sv = std::mem::take(&mut self.watch.settle_violations);
        let n = self.watch.episodes.len();
        let settled = self.watch.episodes.iter().filter(|e| e.settled_ns.is_some() || e.overlapped).count();
        invariants.push(Invariant {
            name: "settles-after-each-fault",
            ok: Some(sv.is_empty() && settled == n),
            detail: format!(
                "{settled}/{n} episodes settled (one control node, one epoch, every live node ready) within their quiet interval; a heal within {} ms",
                HEAL_BOUND_NS / MS
            ),
        });
        failures.extend(sv);
    }

    pub(super) fn fault_report(&self) -> FaultReport {
        FaultReport {
            episodes: self.watch.episodes.clone(),
            takeovers: self.watch.takeovers_seen,
            takeovers_ipv6: self.watch.takeovers_seen_ipv6,
            ipv6_flows_taken_over: self.watch.taken_over_ipv6.len() as u64,
            ipv6_flows_taken_over_completed: self
                .watch
                .taken_over_ipv6
                .iter()
                .filter(|&&f| self.flows[f].done() && self.flows[f].failures().is_empty())
                .count() as u64,
            split_owned_checks: self.watch.split_owned_checks,
            lost_at_link: self.faulted.lost_at_link,
            lost_at_node: self.faulted.lost_at_node,
            no_next_hop: self.faulted.no_next_hop,
            ccl_partitioned: self.faulted.ccl_partitioned,
            stalls_ms: {
                let mut v: Vec<f64> = self.flows.iter().filter_map(|f| match &f.kind {
                    super::FlowKind::Tcp { c, .. } => Some(c.max_stall_ns as f64 / 1e6),
                    _ => None,
                }).collect();
                v.sort_by(f64::total_cmp);
                v
            },
            open_owned_at_end: {
                let (mut one, mut none, mut many) = (0, 0, 0);
                for f in self.flows.iter().filter(|f| f.started && !f.done()) {
                    let o = (0..self.nodes.len())
                        .filter(|&n| self.may_own(n) && self.nodes[n].workers.holds(&f.tuple))
                        .count();
                    match o {
                        0 => none += 1,
                        1 => one += 1,
                        _ => many += 1,
                    }
                }
                (one, none, many)
            },
            worst_stall: self.flows.iter().enumerate().filter_map(|(i, f)| match &f.kind {
                super::FlowKind::Tcp { c, .. } => Some((c.max_stall_ns, i as u32, c.max_stall_at)),
                _ => None,
            }).max().map(|(_, i, at)| (i, at as f64 / 1e6)),
        }
    }
}

/// Seeded fault schedules (issue 10, "Simulator"): single failures, each
/// with its recovery and a quiet interval after it.
pub mod schedule {
    use super::{FaultAt, FaultKind, HOLD_NS, MS};
    use crate::sim::net::{mix64, CclLink, Side};
    use crate::sim::{LongLived, SimConfig};
    use rand::rngs::ChaCha8Rng;
    use rand::{RngExt, SeedableRng};

    /// The cluster forms over the CCL first (an election after a hold
    /// time, then admissions: about 0.5 s); flows start here.
    pub const FLOWS_START_NS: u64 = 1_000 * MS;
    /// The first fault, once every flow is established.
    pub const FIRST_FAULT_NS: u64 = 2_000 * MS;
    /// Quiet interval after each recovery: the rejoin backoff of a node
    /// whose own fault it was (1 s, then 2 s; each episode strikes another
    /// node, so one step here), its join and sync (under a second), with
    /// room to spare; the next fault starts from a settled cluster.
    pub const QUIET_NS: u64 = 4_000 * MS;
    /// Paced downloads: one segment (`host::MSS`) every 25 ms (40 kB/s a
    /// flow).
    pub const PACE: (u32, u64) = (crate::sim::host::MSS, 25 * MS);

    /// What failure an episode is.
    #[derive(Copy, Clone, Debug, PartialEq, Eq)]
    pub enum Kind {
        KillRestart,
        PauseResume,
        PartitionHeal,
        LinkDownUp,
        CclLoss,
        Restart,
    }

    /// `episodes` single failures over `nodes` nodes, drawn from `seed`:
    /// each on another node (while there are nodes), recovery after it,
    /// then `QUIET_NS`. Returns the faults and the end of the last quiet
    /// interval.
    pub fn draw(seed: u64, nodes: usize, episodes: usize) -> (Vec<FaultAt>, u64) {
        let mut r = ChaCha8Rng::seed_from_u64(mix64(seed ^ 0xfa17_5eed));
        let mut order: Vec<usize> = (0..nodes).collect();
        for i in (1..order.len()).rev() {
            let j = r.random_range(0..=i);
            order.swap(i, j);
        }
        let kinds = [Kind::KillRestart, Kind::PauseResume, Kind::PartitionHeal, Kind::LinkDownUp, Kind::CclLoss, Kind::Restart];
        let mut out = Vec::new();
        let mut t = FIRST_FAULT_NS;
        for e in 0..episodes {
            let n = order[e % order.len().max(1)];
            let kind = kinds[r.random_range(0..kinds.len())];
            let ms = |r: &mut ChaCha8Rng, a: u64, b: u64| r.random_range(a..=b) * MS;
            let (first, second, dur) = match kind {
                Kind::KillRestart => {
                    let d = ms(&mut r, 300, 2000);
                    (FaultKind::Kill(n), Some(FaultKind::Restart(n)), d)
                }
                Kind::PauseResume => {
                    // Half below the hold time (the node is not removed),
                    // half past it (removed, then reset on resume).
                    let d = if r.random_bool(0.5) { ms(&mut r, 50, HOLD_NS / MS - 100) } else { ms(&mut r, 400, 1500) };
                    (FaultKind::Pause(n), Some(FaultKind::Resume(n)), d)
                }
                Kind::PartitionHeal => {
                    let mut group = vec![0u8; nodes];
                    group[n] = 1;
                    if nodes >= 4 && r.random_bool(0.3) {
                        // Two against two.
                        group[order[(e + 1) % nodes]] = 1;
                    }
                    (FaultKind::Partition(group), Some(FaultKind::Heal), ms(&mut r, 400, 2000))
                }
                Kind::LinkDownUp => {
                    let side = if r.random_bool(0.5) { Side::Inside } else { Side::Outside };
                    // Some shorter than the 500 ms debounce (a flap).
                    (FaultKind::LinkDown(n, side), Some(FaultKind::LinkUp(n, side)), ms(&mut r, 200, 1500))
                }
                Kind::CclLoss => {
                    // A degraded CCL, not a cut: heavier bursts remove
                    // several nodes at once (a multiple failure).
                    let d = ms(&mut r, 200, 600);
                    let loss = r.random_range(0.1..0.35);
                    (FaultKind::CclLoss { loss, until_ns: t + d }, None, d)
                }
                Kind::Restart => (FaultKind::Restart(n), None, 0),
            };
            out.push(FaultAt { at_ns: t, fault: first });
            if let Some(s) = second {
                out.push(FaultAt { at_ns: t + dur, fault: s });
            }
            t += dur + QUIET_NS;
        }
        (out, t)
    }

    /// `episodes` double failures over 4 nodes, drawn from `seed`: two
    /// nodes killed (or paused past the hold time) 0–150 ms apart, back
    /// after 0.4–2 s (restarted, or resumed and reset), then `QUIET_NS`;
    /// each episode on another pair. What `backups: 2` must survive.
    pub fn draw_double(seed: u64, episodes: usize) -> (Vec<FaultAt>, u64) {
        let mut r = ChaCha8Rng::seed_from_u64(mix64(seed ^ 0xd0b1_e5ed));
        const PAIRS: [(usize, usize); 6] = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)];
        let first = r.random_range(0..PAIRS.len());
        let mut out = Vec::new();
        let mut t = FIRST_FAULT_NS;
        for e in 0..episodes {
            let (a, b) = PAIRS[(first + e * 5) % PAIRS.len()];
            let gap = r.random_range(0..=150u64) * MS;
            let dur = r.random_range(400..=2000u64) * MS;
            let (down, up): (fn(usize) -> FaultKind, fn(usize) -> FaultKind) =
                if r.random_bool(0.5) { (FaultKind::Kill, FaultKind::Restart) } else { (FaultKind::Pause, FaultKind::Resume) };
            out.push(FaultAt { at_ns: t, fault: down(a) });
            out.push(FaultAt { at_ns: t + gap, fault: down(b) });
            out.push(FaultAt { at_ns: t + gap + dur, fault: up(a) });
            out.push(FaultAt { at_ns: t + gap + dur, fault: up(b) });
            t += gap + dur + QUIET_NS;
        }
        (out, t)
    }

    impl SimConfig {
        /// A double-failure schedule (`draw_double`) on 4 nodes with
        /// `backups: 2`: no established connection may be lost.
        pub fn double_fault_sweep(seed: u64, episodes: usize) -> SimConfig {
            let mut r = ChaCha8Rng::seed_from_u64(mix64(seed ^ 0x2bac_c0f5));
            let (faults, end) = draw_double(seed, episodes);
            let mut c = SimConfig::fault_scenario(seed, 4, faults, end);
            c.backups = 2;
            if r.random_bool(0.5) {
                c.ccl = CclLink::jittery();
            }
            c.seq_randomization = r.random_bool(0.8);
            c
        }

        /// A fault scenario: `nodes` nodes whose pipelines follow their
        /// membership machines, `faults` (ending by `end_ns`), long-lived
        /// traffic through it all — 16 paced TCP downloads (their servers
        /// write until about `end_ns`) and 6 UDP flows exchanging every
        /// 400 ms — started once the cluster formed.
        pub fn fault_scenario(seed: u64, nodes: usize, faults: Vec<FaultAt>, end_ns: u64) -> SimConfig {
            let mut c = SimConfig::new(seed, nodes).flows(16, 6);
            c.dns_share = 0.0;
            c.faults = faults;
            c.flow_start_ns = FLOWS_START_NS;
            c.start_window_ns = 200 * MS;
            let steps = end_ns.saturating_sub(FLOWS_START_NS) / PACE.1;
            let resp = (steps as u32).saturating_mul(PACE.0);
            c.tcp_request = (200, 1000);
            c.tcp_response = (resp * 9 / 10, resp);
            let gap = 400 * MS;
            c.long_lived = Some(LongLived {
                tcp_pace: PACE,
                udp_exchanges: (end_ns.saturating_sub(FLOWS_START_NS) / gap).clamp(1, 1000) as u16,
                udp_gap_ns: gap,
            });
            c.min_run_ns = end_ns;
            c.time_limit_ns = end_ns + 60_000 * MS;
            c
        }

        /// A seeded fault schedule (the sweep's): 3 or 4 nodes, a clean or
        /// jittery CCL, `episodes` single failures drawn by `draw`.
        pub fn fault_sweep(seed: u64, episodes: usize) -> SimConfig {
            let mut r = ChaCha8Rng::seed_from_u64(mix64(seed ^ 0x5eef_fa17));
            let nodes = r.random_range(3..=4usize);
            let (faults, end) = draw(seed, nodes, episodes);
            let mut c = SimConfig::fault_scenario(seed, nodes, faults, end);
            if r.random_bool(0.5) {
                c.ccl = CclLink::jittery();
            }
            c.seq_randomization = r.random_bool(0.8);
            c
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routed_needs_the_link_and_the_ports() {
        let mut l = Life::default();
        assert!(l.routed(Side::Inside) && l.routed(Side::Outside));
        l.links[Side::Outside as usize] = false;
        assert!(l.routed(Side::Inside) && !l.routed(Side::Outside));
        l.links = [true; 2];
        l.ports_up = false;
        assert!(!l.routed(Side::Inside));
    }
}
