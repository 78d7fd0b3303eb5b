//! The simulated nodes' control lcores: one real
//! `controlplane::membership::Membership` per node, driven by the virtual
//! clock, its heartbeats sealed and opened by the real `ControlLink` and
//! carried over the simulated CCL to the other nodes' machines — the code
//! the DPDK node's control lcore runs (SPEC P3).
//!
//! Invariants:
//! - **Outside the data-plane run.** The control lcores have their own
//!   event queue, their own seeded stream for the CCL impairments and
//!   their own counters; nothing here touches the traffic or CCL streams,
//!   the main event queue, the trace hash or the pipelines (a member-set
//!   change is handed back to the caller, which applies it). So adding
//!   them changed no existing scenario's trace, and a run with the same
//!   seed repeats their events exactly.
//! - **The same link.** Heartbeat copies meet the scenario's `CclLink`
//!   (loss, latency, jitter, reorder) and `CclCut`, like data-plane CCL
//!   frames, drawn from the heartbeat stream.
//! - **Time order.** [`ControlPlanes::run_until`] handles every control
//!   event due at or before the given time, in (time, insertion) order;
//!   the simulator calls it before each data-plane event, so both worlds
//!   share one virtual clock.

use super::cluster;
use super::net::{self, CclCut, CclLink, Fate};
use super::SimConfig;
use controlplane::membership::{Action, ControlLink, Counters, Membership, MAX_CONTROL_FRAME};
use dataplane::cluster::MemberSet;
use dataplane::types::Timestamp;
use rand::rngs::ChaCha8Rng;
use rand::SeedableRng;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};

/// Node `n`'s control lcore starts (first heartbeat) this long after the
/// start, so the nodes' heartbeats do not all coincide.
const START_STAGGER_NS: u64 = 1_000;

enum Ev {
    /// The node's membership machine's clock: heartbeats due.
    Tick(usize),
    /// A heartbeat frame reaches node `to`'s control queue.
    Deliver { to: usize, frame: Vec<u8> },
}

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

struct ControlNode {
    membership: Membership,
    link: ControlLink,
    heartbeats_sent: u64,
    send_failures: u64,
}

/// What the heartbeats met on the CCL.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HeartbeatLinkStats {
    /// Heartbeat frames broadcast.
    pub frames: u64,
    /// Copies delivered to another node's control lcore.
    pub delivered: u64,
    pub lost: u64,
    pub reordered: u64,
    /// Copies lost to a cut CCL port.
    pub cut: u64,
}

/// One peer as a node's membership sees it at the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PeerReport {
    pub id: u8,
    pub this_node: bool,
    pub last_heard_ms: Option<u64>,
    pub heartbeats: u64,
    pub incarnation: u32,
}

/// One node's membership at the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct NodeMembership {
    pub node: usize,
    pub epoch: u64,
    pub heartbeats_sent: u64,
    pub send_failures: u64,
    pub counters: Counters,
    /// Control-channel frames the opener dropped, non-zero reasons.
    pub ccl_drops: BTreeMap<String, u64>,
    pub peers: Vec<PeerReport>,
}

impl NodeMembership {
    /// How this node sees `peer` (`None`: not a configured node).
    pub fn peer(&self, peer: usize) -> Option<&PeerReport> {
        self.peers.iter().find(|p| usize::from(p.id) == peer)
    }
}

/// Membership across the simulated cluster, at the end of the run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MembershipReport {
    pub per_node: Vec<NodeMembership>,
    pub link: HeartbeatLinkStats,
}

impl MembershipReport {
    /// Node `node`'s view of `peer`.
    pub fn view(&self, node: usize, peer: usize) -> Option<&PeerReport> {
        self.per_node.get(node)?.peer(peer)
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
    stats: HeartbeatLinkStats,
    /// Member sets the machines emitted, for the caller to apply.
    members: Vec<(usize, MemberSet)>,
}

impl ControlPlanes {
    /// One control lcore per node of a cluster scenario.
    pub fn new(cfg: &SimConfig) -> Result<ControlPlanes, String> {
        let mut nodes = Vec::with_capacity(cfg.nodes);
        for n in 0..cfg.nodes {
            nodes.push(ControlNode {
                membership: cluster::membership(n, cfg.nodes)?,
                link: cluster::control_link(n)?,
                heartbeats_sent: 0,
                send_failures: 0,
            });
        }
        let mut c = ControlPlanes {
            nodes,
            queue: BinaryHeap::new(),
            seq: 0,
            // Its own stream: heartbeats never shift the CCL stream of the
            // data-plane frames.
            rng: ChaCha8Rng::seed_from_u64(net::mix64(cfg.seed ^ 0x6862_6561_7473)),
            link: cfg.ccl.clone(),
            cut: cfg.ccl_cut,
            stats: HeartbeatLinkStats::default(),
            members: Vec::new(),
        };
        for n in 0..cfg.nodes {
            c.schedule(START_STAGGER_NS * n as u64, Ev::Tick(n));
        }
        Ok(c)
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Queued { at, seq: self.seq, ev });
    }

    /// Handle every control event due at or before `t`.
    pub fn run_until(&mut self, t: u64) {
        while self.queue.peek().is_some_and(|q| q.at <= t) {
            let Some(q) = self.queue.pop() else { break };
            match q.ev {
                Ev::Tick(n) => self.tick(n, q.at),
                Ev::Deliver { to, frame } => {
                    let c = &mut self.nodes[to];
                    // The opener and the machine count what they make of it.
                    let _ = c.link.receive(&mut c.membership, Timestamp(q.at), &frame);
                    self.actions(to, q.at);
                }
            }
        }
    }

    /// Member sets emitted since the last call (node, set), oldest first.
    pub fn take_members(&mut self) -> Vec<(usize, MemberSet)> {
        std::mem::take(&mut self.members)
    }

    fn tick(&mut self, n: usize, now: u64) {
        self.nodes[n].membership.tick(Timestamp(now));
        self.actions(n, now);
        if let Some(next) = self.nodes[n].membership.next_heartbeat() {
            self.schedule(next.nanos().max(now + 1), Ev::Tick(n));
        }
    }

    /// Carry out node `n`'s pending actions at `now`.
    fn actions(&mut self, n: usize, now: u64) {
        while let Some(a) = self.nodes[n].membership.poll_action() {
            match a {
                Action::Broadcast { epoch, msg } => {
                    let mut buf = [0u8; MAX_CONTROL_FRAME];
                    match self.nodes[n].link.seal_broadcast(epoch, &msg, &mut buf) {
                        Ok(len) => {
                            self.nodes[n].heartbeats_sent += 1;
                            self.broadcast(n, now, &buf[..len]);
                        }
                        Err(_) => self.nodes[n].send_failures += 1,
                    }
                }
                Action::Members(m) => self.members.push((n, m)),
            }
        }
    }

    /// A frame from node `from` to every other node, through the link model.
    fn broadcast(&mut self, from: usize, now: u64, frame: &[u8]) {
        self.stats.frames += 1;
        for to in (0..self.nodes.len()).filter(|&to| to != from) {
            if self.cut.is_some_and(|c| c.cuts(from, to, now)) {
                self.stats.cut += 1;
                continue;
            }
            match self.link.fate(&mut self.rng) {
                Fate::Lost => self.stats.lost += 1,
                Fate::Delivered { delay_ns, reordered } => {
                    self.stats.delivered += 1;
                    self.stats.reordered += u64::from(reordered);
                    self.schedule(now + delay_ns, Ev::Deliver { to, frame: frame.to_vec() });
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
            .map(|(node, c)| NodeMembership {
                node,
                epoch: c.membership.epoch().0,
                heartbeats_sent: c.heartbeats_sent,
                send_failures: c.send_failures,
                counters: *c.membership.counters(),
                ccl_drops: c
                    .link
                    .counters()
                    .by_drop()
                    .filter(|(_, n)| *n > 0)
                    .map(|(r, n)| (r.to_string(), n))
                    .collect(),
                peers: c
                    .membership
                    .snapshot(Timestamp(now))
                    .iter()
                    .map(|m| PeerReport {
                        id: m.id.0,
                        this_node: m.this_node,
                        last_heard_ms: m.last_heard_ms(),
                        heartbeats: m.heartbeats,
                        incarnation: m.incarnation,
                    })
                    .collect(),
            })
            .collect();
        MembershipReport { per_node, link: self.stats.clone() }
    }
}
