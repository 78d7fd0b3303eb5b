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

use super::net::{CclLink, Partition, Side};
use super::{Ev, Sim};
use crate::sim::cluster;
use dataplane::pipeline::Pipeline;

/// Frames a frozen node's ring holds; more are lost (a NIC ring).
pub const PAUSED_RING: usize = 1024;

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
        match f {
            FaultKind::Kill(n) if n < self.nodes.len() => {
                let node = &mut self.nodes[n];
                node.life.state = State::Dead;
                node.life.links = [false; 2];
                node.rxq.clear();
                node.poll_pending = false;
            }
            FaultKind::Pause(n) if n < self.nodes.len() => {
                let node = &mut self.nodes[n];
                if node.life.running() {
                    node.life.state = State::Paused;
                    node.life.links = [false; 2];
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
                }
            }
            FaultKind::Restart(n) if n < self.nodes.len() => self.restart_node(n),
            FaultKind::Partition(group) => self.faulted.partition = Partition { group },
            FaultKind::Heal => self.faulted.partition = Partition::default(),
            FaultKind::LinkDown(n, side) if n < self.nodes.len() => self.nodes[n].life.links[side as usize] = false,
            FaultKind::LinkUp(n, side) if n < self.nodes.len() => self.nodes[n].life.links[side as usize] = true,
            FaultKind::CclLoss { loss, until_ns } => self.faulted.loss_burst = Some((loss, until_ns)),
            _ => {}
        }
    }

    /// Node `n` starts again: a new pipeline with a higher incarnation.
    fn restart_node(&mut self, n: usize) {
        let restarts = self.nodes[n].life.restarts + 1;
        let pipeline = match super::node_config(&self.cfg, n).and_then(|mut pc| {
            if let Some(c) = pc.cluster.as_mut() {
                c.incarnation = cluster::incarnation(n, restarts);
            }
            Pipeline::new(pc).map_err(|e| e.to_string())
        }) {
            Ok(p) => p,
            Err(e) => {
                self.violation(format!("node{n} restart: {e}"));
                return;
            }
        };
        let was_dead = self.nodes[n].life.dead();
        let node = &mut self.nodes[n];
        node.pipeline = pipeline;
        node.rxq.clear();
        node.poll_pending = false;
        node.life = super::faults::Life { restarts, ..Default::default() };
        if was_dead {
            self.schedule(self.now + super::TIMER_PERIOD_NS, Ev::NodeTimers(n));
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
