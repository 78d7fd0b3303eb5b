//! The membership machine on decoded messages: one test (or a few) per
//! rule of issue 10, on a small in-process cluster (`Mini`: machines,
//! instant delivery with cuts, a fake dataplane that reports its sync at
//! once), then through `ControlLink` on real bytes. The randomized,
//! seeded multi-node sweep is `tests/cluster_sim.rs`.

use super::*;
use dataplane::ccl::{CclKey, FramePath};
use dataplane::stats::flatten;
use proptest::prelude::*;
use std::net::Ipv4Addr;

const MS: u64 = 1_000_000;
const STEP: u64 = 5 * MS;

fn at(ms: u64) -> Timestamp {
    Timestamp(ms * MS)
}

fn nodes(n: u8) -> Vec<NodeConfig> {
    (0..n).map(|i| NodeConfig { id: NodeId(i), name: format!("n{i}"), ccl_address: Ipv4Addr::new(10, 99, 0, 1 + i) }).collect()
}

/// Node `me` of `n`, 100 ms / 300 ms timers, priority = 10 + id.
fn cfg(me: u8, n: u8) -> Config {
    Config {
        priority: 10 + me,
        heartbeat_interval: Duration::from_millis(100),
        hold_time: Duration::from_millis(300),
        sync_timeout: Duration::from_millis(1000),
        ..Config::new(NodeId(me), 1000 + u32::from(me), nodes(n))
    }
}

fn machine(me: u8, n: u8) -> Membership {
    Membership::new(cfg(me, n)).unwrap()
}

fn drain(m: &mut Membership) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

/// A few machines on a perfect, instant CCL with cuts and kills.
pub(crate) struct Mini {
    pub(crate) ms: Vec<Membership>,
    pub(crate) now: Timestamp,
    alive: Vec<bool>,
    /// `cut[a][b]`: messages from a to b are lost.
    cut: Vec<Vec<bool>>,
    /// Non-message actions of each node, in order.
    log: Vec<Vec<Action>>,
    /// Report the dataplane's sync as done when a syncing node gets a set.
    auto_sync: bool,
    /// Drop every k-th sync chunk (0: none).
    chunk_loss: u64,
    chunks: u64,
}

impl Mini {
    fn new(ms: Vec<Membership>) -> Mini {
        let n = ms.len();
        Mini {
            ms,
            now: Timestamp(0),
            alive: vec![true; n],
            cut: vec![vec![false; n]; n],
            log: vec![Vec::new(); n],
            auto_sync: true,
            chunk_loss: 0,
            chunks: 0,
        }
    }
    pub(crate) fn of(n: u8) -> Mini {
        Mini::new((0..n).map(|i| machine(i, n)).collect())
    }
    fn partition(&mut self, group: &[usize]) {
        let n = self.ms.len();
        for a in 0..n {
            for b in 0..n {
                self.cut[a][b] = group.contains(&a) != group.contains(&b);
            }
        }
    }
    fn heal(&mut self) {
        for row in &mut self.cut {
            row.iter_mut().for_each(|c| *c = false);
        }
    }
    /// Deliver every action of node `n` (and what it causes) now.
    fn pump(&mut self, n: usize) {
        let mut queue = vec![n];
        while let Some(n) = queue.pop() {
            while let Some(a) = self.ms[n].poll_action() {
                let (to, epoch, msg) = match &a {
                    Action::Broadcast { epoch, msg } => (None, *epoch, msg.clone()),
                    Action::Send { to, epoch, msg } => (Some(to.index()), *epoch, msg.clone()),
                    Action::Members(s) => {
                        if self.auto_sync && self.ms[n].state() == State::Syncing {
                            let s = *s;
                            let (now, me) = (self.now, self.ms[n].me());
                            self.ms[n].on_sync(now, s.epoch(), s.bits() & !(1 << me.index()), true);
                        }
                        self.log[n].push(a);
                        continue;
                    }
                    _ => {
                        self.log[n].push(a);
                        continue;
                    }
                };
                if matches!(msg, Outgoing::SyncChunk(_) | Outgoing::QueryChunk(_)) && self.chunk_loss > 0 {
                    self.chunks += 1;
                    if self.chunks % self.chunk_loss == 0 {
                        continue;
                    }
                }
                let from = Envelope { sender: self.ms[n].me(), incarnation: self.ms[n].cfg.incarnation, epoch };
                for t in 0..self.ms.len() {
                    if t == n || to.is_some_and(|x| x != t) || !self.alive[t] || self.cut[n][t] {
                        continue;
                    }
                    let now = self.now;
                    self.ms[t].on_message(now, from, &msg.message());
                    queue.push(t);
                }
            }
        }
    }
    pub(crate) fn run(&mut self, ms: u64) {
        let end = self.now.0 + ms * MS;
        while self.now.0 < end {
            self.now = Timestamp(self.now.0 + STEP);
            for n in 0..self.ms.len() {
                if self.alive[n] {
                    let now = self.now;
                    self.ms[n].tick(now);
                    self.pump(n);
                }
            }
        }
    }
    pub(crate) fn states(&self) -> Vec<State> {
        self.ms.iter().map(Membership::state).collect()
    }
    fn controls(&self) -> Vec<usize> {
        (0..self.ms.len()).filter(|&n| self.alive[n] && self.ms[n].state() == State::Control).collect()
    }
    fn resets(&self, n: usize) -> usize {
        self.log[n].iter().filter(|a| **a == Action::Reset).count()
    }
    fn texts(&self, n: usize) -> Vec<String> {
        self.ms[n].history().map(|e| e.text.clone()).collect()
    }
}

// --- Configuration. ---

#[test]
fn configurations_it_cannot_run_are_refused() {
    let err = |f: &dyn Fn(&mut Config)| {
        let mut c = cfg(0, 3);
        f(&mut c);
        Membership::new(c).err()
    };
    assert_eq!(err(&|_| {}), None);
    assert_eq!(err(&|c| c.heartbeat_interval = Duration::from_millis(49)), Some(MembershipError::IntervalTooShort { ms: 49 }));
    assert_eq!(
        err(&|c| {
            c.heartbeat_interval = Duration::from_millis(50);
            c.hold_time = Duration::from_millis(149);
        }),
        Some(MembershipError::HoldTooShort { ms: 149 })
    );
    assert_eq!(
        err(&|c| c.hold_time = Duration::from_millis(299)),
        Some(MembershipError::HoldBelowThreeIntervals { hold_ms: 299, interval_ms: 100 })
    );
    assert_eq!(err(&|c| c.me = NodeId(9)), Some(MembershipError::MeNotConfigured(NodeId(9))));
    assert_eq!(err(&|c| c.nodes[2].id = NodeId(1)), Some(MembershipError::DuplicateNode(NodeId(1))));
    assert_eq!(err(&|c| c.nodes[2].id = NodeId(16)), Some(MembershipError::NodeOutOfRange(16)));
    assert!(matches!(err(&|c| c.nodes[2].ccl_address = c.nodes[0].ccl_address), Some(MembershipError::DuplicateAddress { .. })));
    assert_eq!(
        err(&|c| {
            c.nodes.pop();
            c.split_brain = SplitBrain::Quorum;
        }),
        Some(MembershipError::QuorumNeedsThree(2))
    );
    assert!(matches!(err(&|c| c.rejoin.attempts = 0), Some(MembershipError::BadRejoin { .. })));
    assert!(matches!(err(&|c| c.config = Some(ConfigBlob { version: 1, bytes: vec![0; (1 << 20) + 1] })), Some(MembershipError::ConfigTooLarge { .. })));
    assert_eq!(err(&|c| c.place.site = Some(255)), Some(MembershipError::PlacementReserved("site")));
    // The smallest timers the issue asks for are accepted.
    assert_eq!(
        err(&|c| {
            c.heartbeat_interval = Duration::from_millis(50);
            c.hold_time = Duration::from_millis(150);
        }),
        None
    );
    // Messages a person can act on.
    let e = err(&|c| c.hold_time = Duration::from_millis(299)).unwrap().to_string();
    assert!(e.contains("hold-time (299 ms)") && e.contains("3 × cluster.heartbeat-interval (100 ms)"), "{e}");
}

// --- Heartbeats (M1). ---

#[test]
fn heartbeats_every_interval_carrying_what_peers_need() {
    let mut c = cfg(1, 3);
    c.place = Placement { site: Some(2), chassis: Some(5) };
    c.config = Some(ConfigBlob { version: 4, bytes: b"policy".to_vec() });
    let mut m = Membership::new(c).unwrap();
    let mut hbs = Vec::new();
    for t in (0..1000).step_by(5) {
        m.tick(at(t));
        for a in drain(&mut m) {
            if let Action::Broadcast { epoch, msg: Outgoing::Heartbeat(h) } = a {
                hbs.push((t, epoch, h));
            }
        }
    }
    assert_eq!(hbs.len(), 10, "one at the first tick and one per 100 ms");
    assert!(hbs.windows(2).all(|w| w[1].0 - w[0].0 == 100));
    let (_, epoch, h) = hbs[0];
    assert_eq!((epoch, h.state, h.priority, h.follows, h.member_bitmap), (Epoch(0), State::Joining.code(), 11, None, 0));
    assert_eq!((h.place.site, h.place.chassis, h.ccl_address, h.config_version), (Some(2), Some(5), Ipv4Addr::new(10, 99, 0, 2), 4));
    assert!(hbs.windows(2).all(|w| w[1].2.seq == w[0].2.seq + 1), "sequence numbers for the echo");
    assert_eq!(m.counters().heartbeats_queued, 10);
}

// --- Election (M2). ---

#[test]
fn cold_start_elects_the_best_priority_and_everyone_follows() {
    let mut c = Mini::of(3);
    c.run(1000);
    assert_eq!(c.states(), vec![State::Control, State::Data, State::Data]);
    let e = c.ms[0].epoch();
    for m in &c.ms {
        assert_eq!((m.epoch(), m.control(), m.members().bits(), m.ready()), (e, Some(NodeId(0)), 0b111, true));
        assert!(m.lease() > c.now, "{:?} leased", m.me());
    }
    // Elected after a hold time of listening (300 ms), the others
    // admitted at once: one epoch for all three.
    assert!(c.texts(0).iter().any(|t| t.contains("n0 joining -> control: elected among 3 node(s) heard")), "{:#?}", c.texts(0));
    assert!(c.texts(1).iter().any(|t| t.contains("n1 syncing -> data: synced in")), "{:#?}", c.texts(1));
    assert_eq!(c.log[1].iter().filter(|a| **a == Action::DataPorts { up: true }).count(), 1);
}

/// Step `c` for `ms` and check, at every step, that a node opens its data
/// ports only while it holds a lease (and only when ready); returns how
/// many steps some node spent ready with its ports still shut.
fn ports_follow_the_lease(c: &mut Mini, ms: u64) -> usize {
    let mut open: Vec<bool> = c.ms.iter().map(|m| m.status().ports_open).collect();
    let mut waited = 0;
    for _ in 0..ms * MS / STEP {
        c.run(STEP / MS);
        for (n, m) in c.ms.iter().enumerate() {
            let st = m.status();
            assert!(!st.ports_open || st.ready, "n{n}: ports open while not ready");
            if st.ports_open && !open[n] {
                assert!(st.lease > c.now, "n{n}: ports opened at {:?} with lease {:?}", c.now, st.lease);
            }
            if st.ready && !st.ports_open && c.alive[n] {
                waited += 1;
            }
            open[n] = st.ports_open;
        }
    }
    waited
}

#[test]
fn data_ports_open_with_the_first_lease_not_when_ready() {
    // The start gap (docs/membership.md, "The lease"): a data member is
    // ready when synced, but leased only by its control node's next
    // heartbeat echoing one of its own. Ports opened at ready took
    // traffic for up to an interval only to drop it as fenced.
    let mut c = Mini::of(3);
    let waited = ports_follow_the_lease(&mut c, 1000);
    assert!(waited > 0, "the members were ready before leased: the gap this test guards");
    for n in 0..3 {
        assert!(c.ms[n].status().ports_open, "n{n}");
        assert_eq!(c.log[n].iter().filter(|a| **a == Action::DataPorts { up: true }).count(), 1, "n{n}");
    }
    restart(&mut c, 2);
    c.log[2].clear();
    ports_follow_the_lease(&mut c, 1000);
    assert!(c.ms[2].status().ports_open);
    assert_eq!(c.log[2].iter().filter(|a| **a == Action::DataPorts { up: true }).count(), 1);
    // Leaving shuts them (a partition: the minority's lease lapses).
    c.partition(&[2]);
    ports_follow_the_lease(&mut c, 2000);
    c.heal();
    assert!(c.log[2].contains(&Action::DataPorts { up: false }));
    ports_follow_the_lease(&mut c, 2000);
    assert!(c.ms.iter().all(|m| m.status().ports_open), "{:?}", c.states());
}

#[test]
fn a_node_alone_becomes_a_one_node_cluster_but_not_in_quorum_mode() {
    let mut m = machine(2, 3);
    for t in (0..=295).step_by(5) {
        m.tick(at(t));
    }
    assert_eq!(m.state(), State::Joining, "not before the hold time");
    m.tick(at(300));
    assert_eq!((m.state(), m.members().bits(), m.ready()), (State::Control, 0b100, true));
    let a = drain(&mut m);
    assert!(a.contains(&Action::DataPorts { up: true }));
    assert!(a.iter().any(|a| matches!(a, Action::Lease(t) if *t > at(300))), "alone: leased");
    let mut q = Membership::new(Config { split_brain: SplitBrain::Quorum, ..cfg(2, 3) }).unwrap();
    for t in (0..5000).step_by(5) {
        q.tick(at(t));
    }
    assert_eq!((q.state(), q.ready()), (State::Joining, false), "quorum: one of three is no majority");
}

#[test]
fn the_control_nodes_death_elects_the_next_best_and_keeps_every_flow() {
    let mut c = Mini::of(4);
    c.run(1000);
    let e = c.ms[1].epoch();
    c.alive[0] = false;
    let killed = c.now;
    c.run(1000);
    assert_eq!(c.controls(), vec![1]);
    for n in 1..4 {
        let m = &c.ms[n];
        assert_eq!((m.control(), m.members().bits(), m.state().is_member()), (Some(NodeId(1)), 0b1110, true));
        assert!(m.epoch() > e);
        assert_eq!(c.resets(n), 0, "survivors keep their flows");
        assert!(m.lease() > c.now);
    }
    // Elected a hold time after the last heartbeat, plus the candidates'
    // own detection (they must all have let go of node 0): < 2 × hold.
    let won = c.ms[1].history().find(|e| e.text.contains("-> control")).unwrap().at;
    assert!(won.since(killed) < Duration::from_millis(600), "{} ms", won.since(killed).0 / MS);
}

/// A node restarts (silent for 250 ms, then a new machine with the next
/// incarnation) and is heard again before its hold time (300 ms) ran out.
fn restart(c: &mut Mini, n: u8) {
    let i = usize::from(n);
    c.alive[i] = false;
    c.run(250);
    let mut cf = cfg(n, c.ms.len() as u8);
    cf.incarnation += 100;
    c.ms[i] = Membership::new(cf).unwrap();
    c.alive[i] = true;
}

#[test]
fn a_member_restarted_within_its_hold_time_is_readmitted_with_a_new_admission_epoch() {
    let mut c = Mini::of(3);
    c.run(1000);
    let before = c.ms[1].members();
    assert_eq!(before.bits(), 0b111);
    restart(&mut c, 2);
    c.run(100);
    let after = c.ms[0].members();
    // The bits do not change: only node 2's admission epoch says that it
    // lost its state — what the pipelines act on (`fresh_since`).
    assert_eq!(after.bits(), 0b111);
    assert!(after.epoch() > before.epoch());
    assert_eq!(after.info(NodeId(2)).unwrap().since, after.epoch());
    for n in [0, 1] {
        assert_eq!(after.info(NodeId(n)).unwrap().since, before.info(NodeId(n)).unwrap().since);
    }
    assert_eq!(c.ms[1].members(), after, "the follower's set carries the admission epochs");
    assert_eq!(after.fresh_since(&before, NodeId(1)), 0b100);
    assert_eq!(c.resets(1), 0);
}

#[test]
fn the_control_node_restarted_within_its_hold_time_is_fresh_in_the_first_set_of_the_next() {
    let mut c = Mini::of(3);
    c.run(1000);
    let before = c.ms[1].members();
    restart(&mut c, 0);
    c.run(1000);
    let after = c.ms[1].members();
    assert_eq!(after.bits(), 0b111);
    // Whoever holds the role now, node 0's state is gone and node 2's is not.
    assert!(after.info(NodeId(0)).unwrap().since > before.epoch());
    assert_eq!(after.info(NodeId(2)).unwrap().since, before.info(NodeId(2)).unwrap().since);
    assert_eq!(after.fresh_since(&before, NodeId(2)), 0b001);
    assert_eq!((c.resets(1), c.resets(2)), (0, 0), "the others keep their flows");
}

#[test]
fn a_joining_node_with_a_better_priority_does_not_take_over() {
    let mut c = Mini::new(vec![
        Membership::new(Config { priority: 50, ..cfg(0, 3) }).unwrap(),
        Membership::new(Config { priority: 60, ..cfg(1, 3) }).unwrap(),
        Membership::new(Config { priority: 1, ..cfg(2, 3) }).unwrap(),
    ]);
    c.alive[2] = false;
    c.run(1000);
    assert_eq!(c.controls(), vec![0]);
    c.alive[2] = true;
    c.run(1000);
    assert_eq!(c.states(), vec![State::Control, State::Data, State::Data]);
    assert_eq!(c.ms[2].control(), Some(NodeId(0)));
}

// --- Removal (M1) and detection. ---

#[test]
fn a_silent_member_is_removed_after_the_hold_time_with_a_new_epoch() {
    let mut c = Mini::of(3);
    c.run(1000);
    let e = c.ms[0].epoch();
    c.alive[2] = false;
    // Its last heartbeat: at most one interval ago.
    let last = c.ms[0].member(NodeId(2), c.now).unwrap().last_heard.unwrap();
    let since = c.now.0 - last.0;
    c.run(600);
    assert_eq!((c.ms[0].members().bits(), c.ms[1].members().bits()), (0b011, 0b011));
    assert_eq!((c.ms[0].epoch(), c.ms[1].epoch()), (Epoch(e.0 + 1), Epoch(e.0 + 1)));
    let removed = c.ms[0].history().find(|e| matches!(e.kind, EventKind::Removed { .. })).unwrap();
    let detect = removed.at.0 - since;
    assert!((300 * MS..=300 * MS + STEP).contains(&detect), "{} ms", detect / MS);
    assert!(removed.text.starts_with("n2 removed: no heartbeat for 30"), "{}", removed.text);
}

#[test]
fn a_stalled_receive_path_puts_removals_off_until_it_ran_an_interval() {
    // Node 2's heartbeats wait, unread, in node 0's stalled worker for
    // 400 ms (more than the hold time): modelled as node 0 hearing
    // nothing from node 2 while its driver reports the stall every step.
    let stall = |report: bool| {
        let mut c = Mini::of(3);
        c.run(1000);
        assert_eq!(c.controls(), vec![0]);
        c.cut[2][0] = true;
        for _ in 0..400 * MS / STEP {
            c.run(STEP / MS);
            if report {
                let now = c.now;
                c.ms[0].rx_stalled(now);
                c.pump(0);
            }
        }
        c.cut[2][0] = false;
        c
    };
    // Unreported, the stall removes node 2.
    let mut c = stall(false);
    c.run(500);
    assert_eq!(c.ms[0].counters().members_removed, 1);
    // Reported: what waited is heard first, node 2 stays.
    let mut c = stall(true);
    let e = c.ms[0].epoch();
    c.run(500);
    assert_eq!((c.ms[0].members().bits(), c.ms[0].epoch()), (0b111, e));
    assert_eq!(c.ms[0].counters().members_removed, 0);
    assert!(c.ms[0].counters().removals_deferred > 0);
    assert_eq!(c.ms[0].counters().rx_stalls, 400 * MS / STEP);

    // A member that is gone is still removed, an interval after the
    // stall ended at the latest.
    let mut c = Mini::of(3);
    c.run(1000);
    c.alive[2] = false;
    for _ in 0..400 * MS / STEP {
        c.run(STEP / MS);
        let now = c.now;
        c.ms[0].rx_stalled(now);
        c.pump(0);
    }
    let end = c.now;
    assert_eq!(c.ms[0].members().bits(), 0b111);
    c.run(200);
    assert_eq!(c.ms[0].members().bits(), 0b011);
    let removed = c.ms[0].history().find(|e| matches!(e.kind, EventKind::Removed { .. })).unwrap();
    assert!(removed.at.0 - end.0 <= 100 * MS + STEP, "{} ms after the stall", (removed.at.0 - end.0) / MS);
}

// --- Split brain (M3) and quorum. ---

#[test]
fn split_brain_each_side_elects_and_on_heal_the_better_keeps_the_role() {
    let mut c = Mini::of(4);
    c.run(1000);
    c.partition(&[0, 1]);
    c.run(1500);
    assert_eq!(c.controls(), vec![0, 2], "each side has its own");
    assert_eq!((c.ms[0].members().bits(), c.ms[2].members().bits()), (0b0011, 0b1100));
    let resets_before = c.resets(3);
    c.heal();
    c.run(1000);
    assert_eq!(c.controls(), vec![0]);
    let e = c.ms[0].epoch();
    for m in &c.ms {
        assert_eq!((m.epoch(), m.members().bits(), m.control()), (e, 0b1111, Some(NodeId(0))));
    }
    // The losing side reset its flows and rejoined; the winners kept theirs.
    assert_eq!(c.resets(2), 1);
    assert_eq!(c.resets(3), resets_before + 1);
    assert_eq!((c.resets(0), c.resets(1)), (0, 0));
    assert!(c.texts(2).iter().any(|t| t.contains("split brain healed: n0 keeps the control role")));
}

#[test]
fn quorum_mode_the_minority_goes_inactive_and_the_majority_carries_on() {
    let q = |me| Membership::new(Config { split_brain: SplitBrain::Quorum, ..cfg(me, 5) }).unwrap();
    let mut c = Mini::new((0..5).map(q).collect());
    c.run(1000);
    assert_eq!(c.controls(), vec![0]);
    // The control node ends up in the minority.
    c.partition(&[0, 1]);
    c.run(1500);
    assert_eq!(c.controls(), vec![2]);
    for n in [0, 1] {
        assert_eq!(c.ms[n].state(), State::Joining, "n{n} listens, data ports down");
        assert!(!c.ms[n].ready());
        assert!(c.log[n].contains(&Action::DataPorts { up: false }));
        assert!(c.texts(n).iter().any(|t| t.contains("no quorum")), "{:#?}", c.texts(n));
    }
    assert_eq!(c.ms[2].members().bits(), 0b11100);
    c.heal();
    c.run(1500);
    assert_eq!(c.controls(), vec![2]);
    assert!(c.ms.iter().all(|m| m.members().bits() == 0b11111 && m.ready()));
}

#[test]
fn quorum_mode_leases_of_four_nodes_never_lapse_with_100_300_timers() {
    // With 4 configured nodes the control node's grant rests on its
    // second-newest follower echo. Followers answering on their own phase
    // aged that echo by up to an interval: with hold = 3 x interval the
    // members' leases ran out between two heartbeats and they dropped
    // traffic as fenced (the simulator's quorum sweep, 7 seeds in 30).
    // They now answer the control node's heartbeat at once, and the
    // control node announces the grant those answers move on at once.
    for offsets in [[0u64, 35, 70, 95], [0, 90, 45, 20], [0, 60, 5, 99]] {
        let q = |me: u8| Membership::new(Config { split_brain: SplitBrain::Quorum, ..cfg(me, 4) }).unwrap();
        let mut c = Mini::new((0..4).map(q).collect());
        // Start the nodes out of phase (their heartbeat timers follow).
        for (n, &off) in offsets.iter().enumerate() {
            c.alive[n] = off == 0;
        }
        for step in 0..=100u64 {
            for (n, &off) in offsets.iter().enumerate() {
                if off == step {
                    c.alive[n] = true;
                }
            }
            c.run(1);
        }
        c.run(1500);
        assert_eq!(c.controls().len(), 1, "{:?}", c.states());
        let mut lapses = 0;
        let mut min_margin = u64::MAX;
        for _ in 0..400 {
            c.run(5);
            for n in 0..4 {
                if c.ms[n].ready() && c.ms[n].lease() <= c.now {
                    lapses += 1;
                }
                if c.ms[n].ready() && c.ms[n].state() == State::Data {
                    min_margin = min_margin.min(c.ms[n].lease().0.saturating_sub(c.now.0) / MS);
                }
            }
        }
        assert!(c.ms.iter().all(|m| m.ready()), "{:?}", c.states());
        assert_eq!(lapses, 0, "offsets {offsets:?}: ready members fenced at {lapses} checks");
        // Before: 5 ms (one check step) — a lease renewed just in time,
        // lapsing by the CCL's delay in every interval.
        assert!(min_margin >= 50, "offsets {offsets:?}: a data node's lease came within {min_margin} ms of lapsing");
    }
}

// --- Join, readiness gate, chunked transfer (M6, M7). ---

#[test]
fn a_joiner_syncs_before_taking_traffic_and_the_gate_times_out() {
    let mut c = Mini::of(2);
    c.auto_sync = false;
    c.run(1000);
    assert_eq!(c.states(), vec![State::Control, State::Syncing]);
    assert!(!c.ms[1].ready() && !c.log[1].contains(&Action::DataPorts { up: true }));
    assert_eq!(c.ms[1].lease(), Timestamp::ZERO, "fenced while syncing");
    let e = c.ms[1].epoch();
    let now = c.now;
    c.ms[1].on_sync(now, e, 0, true);
    assert_eq!(c.ms[1].state(), State::Syncing, "node 0's SyncDone missing");
    c.ms[1].on_sync(now, e, 0b01, true);
    assert_eq!(c.ms[1].state(), State::Data);
    c.pump(1);
    assert!(c.log[1].contains(&Action::DataPorts { up: true }));
    // Without the dataplane's report: ready on the timeout (1 s here), logged.
    let mut c = Mini::of(2);
    c.auto_sync = false;
    c.run(800);
    assert_eq!(c.states()[1], State::Syncing);
    c.run(1000);
    assert_eq!(c.states()[1], State::Data);
    assert!(c.texts(1).iter().any(|t| t.contains("sync timeout after 10")), "{:#?}", c.texts(1));
    assert_eq!(c.ms[1].counters().sync_timeouts, 1);
}

#[test]
fn a_large_configuration_arrives_in_chunks_in_spite_of_losses() {
    let blob: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut c0 = cfg(0, 2);
    c0.config = Some(ConfigBlob { version: 3, bytes: blob.clone() });
    let mut c = Mini::new(vec![Membership::new(c0).unwrap(), machine(1, 2)]);
    c.chunk_loss = 7;
    c.alive[1] = false;
    c.run(500);
    assert_eq!(c.controls(), vec![0]);
    for i in 0..50u8 {
        let now = c.now;
        c.ms[0].table_upsert(now, 1, &[i], &[i; 100]).unwrap();
    }
    c.alive[1] = true;
    c.run(1500);
    let m = &c.ms[1];
    assert_eq!(m.state(), State::Data);
    assert_eq!(m.config().map(|b| (b.version, b.bytes.len())), Some((3, blob.len())));
    assert_eq!(m.config().unwrap().bytes, blob);
    assert_eq!(m.replica_fingerprint(), c.ms[0].replica_fingerprint());
    assert_eq!(m.table_get(1, &[7]), Some(&[7u8; 100][..]));
    assert!(c.chunks > 140, "{} chunks (200 kB / 1405 B)", c.chunks);
    assert!(c.ms[0].counters().chunks_sent > c.chunks - c.chunks / 7, "lost chunks were sent again");
    assert_eq!(m.counters().transfers_completed, 1);
}

// --- Leaving, rejoin, disabling (M4, M5). ---

#[test]
fn a_data_port_down_past_the_debounce_makes_the_node_leave_and_rejoin() {
    let mut c = Mini::of(3);
    c.run(1000);
    let now = c.now;
    // A flap shorter than the debounce (500 ms) changes nothing.
    c.ms[1].on_port(now, 3, false);
    c.run(300);
    let now = c.now;
    c.ms[1].on_port(now, 3, true);
    c.run(400);
    assert_eq!(c.ms[1].state(), State::Data);
    let now = c.now;
    c.ms[1].on_port(now, 3, false);
    c.run(495);
    assert_eq!(c.ms[1].state(), State::Data);
    c.run(10);
    assert_eq!(c.ms[1].state(), State::Inactive);
    let left: Vec<&Action> = c.log[1].iter().rev().take(3).collect();
    assert!(left.contains(&&Action::Reset) && left.contains(&&Action::DataPorts { up: false }), "{left:?}");
    assert!(c.texts(1).last().unwrap().contains("data port 3 down"));
    // The control node removes it at once (its heartbeat said inactive).
    c.run(20);
    assert_eq!(c.ms[0].members().bits(), 0b101);
    // Rejoins after the backoff (1 s), ports up again.
    let now = c.now;
    c.ms[1].on_port(now, 3, true);
    c.run(1100);
    assert_eq!(c.ms[1].state(), State::Data);
    assert_eq!(c.ms[0].members().bits(), 0b111);
}

#[test]
fn a_node_that_hears_a_newer_set_without_itself_leaves_and_rejoins() {
    let mut c = Mini::of(3);
    c.run(1000);
    // Node 2 hears everyone, but nobody hears it: it is removed.
    c.cut[2][0] = true;
    c.cut[2][1] = true;
    c.run(400);
    assert_eq!(c.ms[0].members().bits(), 0b011);
    assert_eq!(c.ms[2].state(), State::Inactive);
    assert!(c.texts(2).iter().any(|t| t.contains("removed by n0")), "{:#?}", c.texts(2));
    assert_eq!(c.resets(2), 1);
    c.heal();
    c.run(1500);
    assert_eq!(c.ms[2].state(), State::Data);
}

#[test]
fn a_joiner_refused_over_its_configuration_drops_it_and_takes_the_control_nodes() {
    for (theirs, verdict) in [((2, "b"), Received::ConfigAhead), ((1, "b"), Received::ConfigDiverged)] {
        let mut c0 = cfg(0, 2);
        c0.config = Some(ConfigBlob { version: 1, bytes: b"a".to_vec() });
        let mut c1 = cfg(1, 2);
        c1.config = Some(ConfigBlob { version: theirs.0, bytes: theirs.1.as_bytes().to_vec() });
        let mut c = Mini::new(vec![Membership::new(c0).unwrap(), Membership::new(c1).unwrap()]);
        c.alive[1] = false;
        c.run(500);
        c.alive[1] = true;
        c.run(1000);
        assert_eq!(c.states(), vec![State::Control, State::Data], "{verdict:?}");
        assert_eq!(config_of(&c.ms[1]), Some((1, b"a".to_vec())), "{verdict:?}: the control node's");
        // Refused once, counted and named on the control node; no failed
        // attempt on the joiner.
        assert_eq!(c.ms[0].counters().received(verdict), 1);
        assert_eq!((c.ms[1].counters().configs_dropped, c.ms[1].status().failures), (1, 0));
        let dropped = format!("n1 drops its replicated configuration v{} (n0 refused it: {})", theirs.0, verdict.as_str());
        assert!(c.texts(1).iter().any(|t| t.starts_with(&dropped)), "{:#?}", c.texts(1));
        assert!(c.texts(0).iter().any(|t| t.starts_with(&format!("{} from n1", verdict.as_str()))), "{:#?}", c.texts(0));
    }
}

#[test]
fn repeated_refusals_back_off_then_disable_and_enable_starts_over() {
    let mut c = Mini::of(2);
    c.alive[1] = false;
    c.run(500);
    c.alive[1] = true;
    // Node 1 hears the control node, but its join requests are lost: every
    // attempt times out.
    c.cut[1][0] = true;
    let mut attempts = Vec::new();
    for _ in 0..60 {
        c.run(500);
        attempts.push(c.ms[1].status().failures);
        if c.ms[1].state() == State::Disabled {
            break;
        }
    }
    assert_eq!(c.ms[1].state(), State::Disabled, "{attempts:?}");
    let s = c.ms[1].status();
    assert!(s.disabled.as_deref().is_some_and(|d| d.contains("5 rejoin attempts failed")), "{s:?}");
    assert!(c.texts(1).iter().any(|t| t.contains("no admission by n0 within 2 hold times")), "{:#?}", c.texts(1));
    // Attempts of 2 hold times each, waits of 1, 2, 4, 8 s between them:
    // disabled about 18 s after the first request.
    assert!((17_000..20_000).contains(&(c.now.0 / MS)), "{} ms", c.now.0 / MS);
    assert!(!c.ms[1].ready());
    // Disabled: silent.
    c.cut[1][0] = false;
    let before = c.ms[0].counters().messages();
    c.run(1000);
    assert_eq!(c.ms[0].counters().messages(), before);
    let now = c.now;
    c.ms[1].enable(now);
    assert_eq!(c.ms[1].state(), State::Inactive);
}

#[test]
fn a_second_node_with_the_same_id_is_refused_and_disabled() {
    // The impostor: node 1's id, another machine's CCL address.
    let mut imp = cfg(1, 3);
    imp.incarnation = 5000;
    imp.nodes[1].ccl_address = Ipv4Addr::new(10, 99, 0, 77);
    let mut c = Mini::new(vec![machine(0, 3), machine(1, 3), machine(2, 3), Membership::new(imp).unwrap()]);
    c.alive[3] = false;
    c.run(1000);
    // Its messages arrive as node 1's (same sender id): route them so.
    c.alive[3] = true;
    c.run(500);
    assert_eq!(c.ms[3].state(), State::Disabled);
    let why = c.ms[3].status().disabled.unwrap();
    assert!(why.contains("duplicate-id: this node id is configured for CCL address 10.99.0.2"), "{why}");
    assert!(c.texts(0).iter().any(|t| t.contains("duplicate-id from n1")), "{:#?}", c.texts(0));
    assert!(c.ms[0].counters().received(Received::DuplicateId) > 0);
    // The genuine node 1 is untouched.
    assert_eq!((c.ms[1].state(), c.ms[0].members().bits()), (State::Data, 0b111), "{:#?}", c.texts(1));
}

#[test]
fn a_joiner_with_another_worker_count_is_refused_and_disabled() {
    // Two members with 2 workers each form the cluster; the third runs 3.
    let with = |me: u8, workers: u8| Membership::new(Config { workers, ..cfg(me, 3) }).unwrap();
    let mut c = Mini::new(vec![with(0, 2), with(1, 2), with(2, 3)]);
    c.run(1500);
    assert_eq!(c.ms[2].state(), State::Disabled, "{:#?}", c.texts(2));
    let why = c.ms[2].status().disabled.unwrap();
    assert!(why.contains("workers-mismatch: the cluster's members run 2 worker(s)"), "{why}");
    assert!(c.ms[0].counters().received(Received::WorkersMismatch) > 0);
    assert_eq!(c.ms[0].members().bits(), 0b011, "the other two formed the cluster");
    // The same count joins.
    let mut c = Mini::new(vec![with(0, 2), with(1, 2), with(2, 2)]);
    c.run(1500);
    assert_eq!(c.ms[0].members().bits(), 0b111);
}

// --- Lease (fencing). ---

#[test]
fn a_paused_node_is_fenced_on_resume_before_it_can_own_again() {
    let mut c = Mini::of(3);
    c.run(1000);
    let lease = c.ms[2].lease();
    // At most a hold time after its last heartbeat the control node echoed.
    assert!(lease > c.now && lease <= c.now.saturating_add(c.ms[2].hold_time()), "{lease:?} at {:?}", c.now);
    c.alive[2] = false; // paused: no ticks, messages lost
    c.run(800);
    assert_eq!(c.ms[0].members().bits(), 0b011, "removed meanwhile");
    c.alive[2] = true;
    let now = c.now;
    assert!(now >= lease, "the lease ran out during the pause");
    c.log[2].clear();
    // Its first input after the pause: still a member, fenced, listening.
    c.ms[2].tick(now);
    let a: Vec<Action> = drain(&mut c.ms[2]);
    let unfenced = a.iter().any(|a| matches!(a, Action::Lease(t) if *t > now));
    assert!(!unfenced, "{a:?}");
    assert!(!a.contains(&Action::Reset), "{a:?}");
    assert_eq!(c.ms[2].state(), State::Data);
    assert!(c.ms[2].history().last().unwrap().text.contains("fenced"), "{:?}", c.texts(2));
    // The control node's next heartbeat (epoch 2 without it): it leaves.
    c.run(150);
    assert!(c.log[2].contains(&Action::Reset), "{:?}", c.log[2]);
    assert!(!c.log[2].iter().any(|a| matches!(a, Action::Lease(t) if *t > now)), "never unfenced: {:?}", c.log[2]);
    assert!(c.texts(2).iter().any(|t| t.contains("data -> inactive: not run for")), "{:?}", c.texts(2));
}

#[test]
fn a_pause_of_the_whole_host_costs_no_member_and_no_flow() {
    let mut c = Mini::of(3);
    c.run(1000);
    let epoch = c.ms[0].epoch();
    assert_eq!(c.ms[0].members().bits(), 0b111);
    // Every node stopped at once for ten hold times (a stalled host):
    // nobody ticks, nothing is sent.
    c.now = Timestamp(c.now.0 + 10 * c.ms[0].hold_time().0);
    let resumed = c.now;
    c.run(300);
    for n in 0..3 {
        assert_eq!(c.resets(n), 0, "n{n}: {:?}", c.texts(n));
        assert!(c.ms[n].lease() > c.now, "n{n} fenced still: {:?}", c.texts(n));
        assert!(c.texts(n).iter().any(|t| t.contains("fenced until")), "{:?}", c.texts(n));
        assert!(c.texts(n).iter().any(|t| t.contains("still a member after the pause")), "{:?}", c.texts(n));
    }
    assert_eq!(c.ms[0].epoch(), epoch, "no new member set");
    assert_eq!(c.states(), vec![State::Control, State::Data, State::Data]);
    // Confirmed (leased again) within two heartbeat intervals of the resume.
    let renewed = c.log[1]
        .iter()
        .find_map(|a| match a {
            Action::Lease(t) if *t > resumed => Some(*t),
            _ => None,
        })
        .unwrap();
    let bound = c.ms[1].hold_time().0 + 2 * c.ms[1].heartbeat_interval().0;
    assert!(renewed.since(resumed).0 <= bound, "{renewed:?}");
}

#[test]
fn a_resumed_control_node_steps_aside_for_the_one_elected_meanwhile() {
    let mut c = Mini::of(3);
    c.run(1000);
    assert_eq!(c.controls(), vec![0]);
    c.alive[0] = false;
    c.run(1500);
    assert_eq!(c.controls(), vec![1], "elected during the pause");
    let epoch = c.ms[1].epoch();
    let resets = (c.resets(1), c.resets(2));
    c.alive[0] = true;
    c.run(500);
    // The better-ranked control node came back claiming its old epoch:
    // the new control node and its member keep their role and flows.
    assert_eq!((c.resets(1), c.resets(2)), resets, "{:?} {:?}", c.texts(1), c.texts(2));
    assert_eq!(c.ms[1].state(), State::Control);
    assert!(c.ms[1].epoch() >= epoch);
    assert!(c.texts(0).iter().any(|t| t.contains("control -> inactive: not run for")), "{:?}", c.texts(0));
    // And it rejoins them.
    c.run(3000);
    assert_eq!(c.ms[1].members().bits(), 0b111, "{:?}", c.texts(0));
}

/// For any interval and hold time within the validated ranges, any CCL
/// latency below the interval and random heartbeat loss in both
/// directions: the control node removes a member only after that
/// member's lease expired (the member's last `Lease` < removal time).
fn removal_after_lease(interval_ms: u64, hold_x: u64, latency_us: u64, loss: u64, seed: u64, silence_at: u64) -> Result<(), String> {
    let interval = Duration::from_millis(interval_ms);
    let hold = Duration(interval.0 * hold_x / 4).max(MIN_HOLD_TIME);
    let mk = |me: u8| {
        Membership::new(Config { heartbeat_interval: interval, hold_time: hold, ..cfg(me, 2) }).unwrap()
    };
    let mut ms = [mk(0), mk(1)];
    let mut rng = seed | 1;
    let mut rand = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % 100
    };
    // (deliver at, to, from envelope, message)
    let mut wire: Vec<(u64, usize, Envelope, Outgoing)> = Vec::new();
    let mut lease1 = Timestamp::ZERO;
    let silence = silence_at * MS;
    let step = MS;
    let mut t = 0u64;
    while t < silence + 4 * hold.0 {
        t += step;
        let now = Timestamp(t);
        let mut due: Vec<(u64, usize, Envelope, Outgoing)> = Vec::new();
        wire.retain(|w| {
            if w.0 <= t {
                due.push(w.clone());
                false
            } else {
                true
            }
        });
        for (_, to, env, msg) in due {
            if to == 1 && t >= silence {
                continue; // node 1 paused: nothing reaches it
            }
            ms[to].on_message(now, env, &msg.message());
        }
        for n in 0..2 {
            if n == 1 && t >= silence {
                continue;
            }
            ms[n].tick(now);
            while let Some(a) = ms[n].poll_action() {
                match a {
                    Action::Broadcast { epoch, msg } | Action::Send { epoch, msg, .. } => {
                        let lost = matches!(msg, Outgoing::Heartbeat(_)) && rand() < loss;
                        if !lost {
                            let env = Envelope { sender: NodeId(n as u8), incarnation: 1000 + n as u32, epoch };
                            wire.push((t + latency_us * 1000, 1 - n, env, msg));
                        }
                    }
                    Action::Lease(l) if n == 1 => lease1 = l,
                    _ => {}
                }
            }
        }
        if ms[1].state() == State::Data && !ms[0].members().contains(NodeId(1)) && ms[0].state() == State::Control {
            // Removed (or never admitted): the member's lease has expired.
            if lease1 > now {
                return Err(format!("removed at {} ms while leased until {} ms", t / MS, lease1.0 / MS));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn the_control_node_removes_a_member_only_after_its_lease_expired(
        interval_ms in 50u64..400,
        hold_x in 12u64..40,
        latency_pct in 0u64..100,
        loss in 0u64..30,
        seed in any::<u64>(),
        silence_at in 1500u64..3000,
    ) {
        let latency_us = interval_ms * 1000 * latency_pct / 100;
        prop_assert_eq!(removal_after_lease(interval_ms, hold_x, latency_us, loss, seed, silence_at), Ok(()));
    }
}

// --- Replicated tables (M8). ---

#[test]
fn tables_change_on_the_control_node_replicate_and_survive_its_loss() {
    let mut c = Mini::of(3);
    c.run(1000);
    let now = c.now;
    assert_eq!(c.ms[1].table_upsert(now, 1, b"k", b"v"), Err(TableError::NotControl { control: Some(NodeId(0)) }));
    assert_eq!(c.ms[0].table_upsert(now, 1, b"10.0.0.1:1024", b"node1"), Ok(1));
    assert_eq!(c.ms[0].table_upsert(now, 1, b"10.0.0.2:1024", b"node2"), Ok(2));
    assert_eq!(c.ms[0].table_delete(now, 1, b"nope"), Ok(None));
    c.pump(0);
    for m in &c.ms {
        assert_eq!(m.table_get(1, b"10.0.0.1:1024"), Some(&b"node1"[..]));
        assert_eq!((m.state_version(), m.table_version(1)), (2, 2));
    }
    assert!(c.log[2].contains(&Action::Replica(ReplicaChange::Entry {
        table: 1,
        key: b"10.0.0.2:1024".to_vec(),
        version: 2,
        deleted: false
    })));
    // Node 2 misses version 3 (cut from the control node for a moment).
    c.cut[0][2] = true;
    let now = c.now;
    assert_eq!(c.ms[0].table_delete(now, 1, b"10.0.0.1:1024"), Ok(Some(3)));
    c.pump(0);
    c.cut[0][2] = false;
    assert_eq!(c.ms[2].table_get(1, b"10.0.0.1:1024"), Some(&b"node1"[..]));
    c.run(200);
    assert_eq!(c.ms[2].table_get(1, b"10.0.0.1:1024"), None, "fetched what it missed");
    // Node 1 alone gets version 4; then the control node dies: node 1
    // (best) becomes control and continues from the highest version.
    c.cut[0][2] = true;
    let now = c.now;
    c.ms[0].table_upsert(now, 2, b"sgt", b"42").unwrap();
    c.pump(0);
    c.alive[0] = false;
    c.run(1000);
    assert_eq!(c.controls(), vec![1]);
    let now = c.now;
    assert_eq!(c.ms[1].table_upsert(now, 2, b"sgt2", b"43"), Ok(5));
    c.run(300);
    assert_eq!(c.ms[2].table_get(2, b"sgt"), Some(&b"42"[..]));
    assert_eq!(c.ms[2].replica_fingerprint(), c.ms[1].replica_fingerprint());
}

#[test]
fn replica_lag_counts_the_versions_a_member_has_not_fetched() {
    let mut c = Mini::of(3);
    c.run(1000);
    assert_eq!(c.ms[0].control(), Some(NodeId(0)));
    assert_eq!(c.ms[2].replica_lag(), Some(0));
    assert_eq!(c.ms[0].replica_lag(), None, "the control node is the reference");
    // Node 2 misses versions 1 and 2 and, for a while, cannot ask anyone
    // for them; it hears the control node's heartbeats all along.
    c.cut[0][2] = true;
    let now = c.now;
    c.ms[0].table_upsert(now, 1, b"a", b"1").unwrap();
    c.ms[0].table_upsert(now, 1, b"b", b"2").unwrap();
    c.pump(0);
    c.cut[0][2] = false;
    c.cut[2][0] = true;
    c.cut[2][1] = true;
    c.run(150);
    assert_eq!(c.ms[2].replica_lag(), Some(2));
    assert_eq!(c.ms[1].replica_lag(), Some(0));
    c.heal();
    c.run(200);
    assert_eq!(c.ms[2].replica_lag(), Some(0), "fetched");
}

#[test]
fn a_new_control_node_that_is_behind_catches_up_before_changing_anything() {
    let mut c = Mini::new(vec![machine(0, 3), machine(1, 3), machine(2, 3)]);
    c.run(1000);
    // Node 1 (next control) misses versions 1..=3; node 2 has them.
    c.cut[0][1] = true;
    for i in 0..3u8 {
        let now = c.now;
        c.ms[0].table_upsert(now, 0, &[i], b"x").unwrap();
    }
    c.pump(0);
    c.alive[0] = false;
    c.heal();
    c.run(1000);
    assert_eq!(c.controls(), vec![1]);
    assert_eq!(c.ms[1].state_version(), 3, "fetched from node 2");
    assert!(c.texts(1).iter().any(|t| t.contains("catches up: state version 3 from n2")), "{:#?}", c.texts(1));
    let now = c.now;
    assert_eq!(c.ms[1].table_upsert(now, 0, b"next", b"y"), Ok(4));
}

/// Nodes that publish `b"file n<i>"` when they become control with no
/// configuration (`Config::publish`).
fn publishing(n: u8) -> Mini {
    Mini::new(
        (0..n)
            .map(|i| Membership::new(Config { publish: Some(format!("file n{i}").into_bytes()), ..cfg(i, n) }).unwrap())
            .collect(),
    )
}

fn config_of(m: &Membership) -> Option<(u64, Vec<u8>)> {
    m.config().map(|c| (c.version, c.bytes.clone()))
}

#[test]
fn the_first_control_node_publishes_its_file_and_every_member_runs_it() {
    let mut c = publishing(3);
    c.run(1000);
    assert_eq!(c.controls(), vec![0]);
    for (i, m) in c.ms.iter().enumerate() {
        assert_eq!(config_of(m), Some((1, b"file n0".to_vec())), "n{i}");
        assert!(c.log[i].contains(&Action::Replica(ReplicaChange::Config { version: 1 })), "n{i}: {:?}", c.log[i]);
    }
    assert_eq!(c.ms[0].counters().configs_published, 1);
    assert_eq!(c.ms[1].counters().configs_published, 0, "data nodes publish nothing");
    // A change on the control node reaches every member; the same bytes
    // again are no change.
    let now = c.now;
    assert_eq!(c.ms[1].set_config(now, b"edit".to_vec()), Err(TableError::NotControl { control: Some(NodeId(0)) }));
    assert_eq!(c.ms[0].set_config(now, b"edit".to_vec()), Ok(2));
    assert_eq!(c.ms[0].set_config(now, b"edit".to_vec()), Ok(2), "unchanged");
    c.run(300);
    assert!(c.ms.iter().all(|m| config_of(m) == Some((2, b"edit".to_vec()))));
    // The control node dies: the new one keeps the cluster's configuration,
    // not its own file.
    c.alive[0] = false;
    c.run(1000);
    assert_eq!(c.controls(), vec![1]);
    assert_eq!(config_of(&c.ms[1]), Some((2, b"edit".to_vec())));
    assert_eq!(c.ms[1].counters().configs_published, 0);
    // It restarts (nothing replicated, its file at version 0) and joins:
    // it runs the cluster's configuration.
    restart(&mut c, 0);
    c.run(1500);
    assert_eq!(c.ms[0].state(), State::Data);
    assert_eq!(config_of(&c.ms[0]), Some((2, b"edit".to_vec())));
    assert_eq!(c.ms[0].counters().configs_published, 0);
}

#[test]
fn a_node_that_formed_its_own_cluster_takes_the_better_control_nodes_configuration_on_heal() {
    // Node 0 (the best) boots cut off and forms a cluster of its own,
    // running its file; nodes 1 and 2 form another, running node 1's.
    let mut c = publishing(3);
    c.partition(&[0]);
    c.run(1000);
    assert_eq!(c.controls(), vec![0, 1]);
    assert_eq!(config_of(&c.ms[0]), Some((1, b"file n0".to_vec())));
    assert_eq!(config_of(&c.ms[2]), Some((1, b"file n1".to_vec())));
    // On heal node 0 keeps the role; the others rejoin it, are refused
    // once over their diverged copy, drop it and run node 0's.
    c.heal();
    c.run(2000);
    assert_eq!(c.controls(), vec![0]);
    assert_eq!(c.states(), vec![State::Control, State::Data, State::Data]);
    for m in &c.ms {
        assert_eq!(config_of(m), Some((1, b"file n0".to_vec())));
        assert_eq!(m.status().failures, 0);
    }
    assert_eq!(c.ms[0].counters().received(Received::ConfigDiverged), 2);
    assert_eq!(c.ms[1].counters().configs_dropped + c.ms[2].counters().configs_dropped, 2);
}

#[test]
fn a_joiner_that_confirms_its_configuration_takes_traffic_only_once_it_runs_it() {
    let mk = |i: u8| {
        let publish = Some(format!("file n{i}").into_bytes());
        Membership::new(Config { publish, confirm_config: true, ..cfg(i, 2) }).unwrap()
    };
    let mut c = Mini::new(vec![mk(0), mk(1)]);
    c.alive[1] = false;
    c.run(500);
    assert!(c.ms[0].ready(), "a control node runs its own file: nothing to wait for");
    c.alive[1] = true;
    c.run(600);
    assert_eq!(c.ms[1].state(), State::Syncing, "replicated state and dataplane sync in, configuration not confirmed");
    assert_eq!(config_of(&c.ms[1]), Some((1, b"file n0".to_vec())));
    let now = c.now;
    c.ms[1].config_applied(now, 0);
    assert_eq!(c.ms[1].state(), State::Syncing, "another version");
    c.ms[1].config_applied(now, 1);
    assert_eq!(c.ms[1].state(), State::Data);
    c.pump(1);
    assert!(c.log[1].contains(&Action::DataPorts { up: true }));
}

#[test]
fn a_member_that_cannot_run_the_configuration_leaves_and_ends_disabled() {
    let mut c = publishing(2);
    c.run(1000);
    assert_eq!(c.states(), vec![State::Control, State::Data]);
    // The driver of node 1 rejects every version it is handed.
    let mut rejected = 0;
    for _ in 0..400 {
        c.run(100);
        let v = c.ms[1].config().map(|b| b.version);
        if let (Some(v), true) = (v, c.ms[1].state().is_member()) {
            let now = c.now;
            c.ms[1].reject_config(now, v);
            c.pump(1);
            rejected += 1;
        }
        if c.ms[1].state() == State::Disabled {
            break;
        }
    }
    assert_eq!(c.ms[1].state(), State::Disabled, "after {rejected} rejections");
    assert!(!c.ms[1].ready());
    assert_eq!(c.ms[1].counters().configs_rejected, 5);
    assert!(c.log[1].contains(&Action::Reset) && c.log[1].contains(&Action::DataPorts { up: false }));
    assert!(
        c.texts(1).iter().any(|t| t.contains("cannot run the replicated configuration v1")),
        "{:#?}",
        c.texts(1)
    );
    // A stale version, or a node that is no member, is no rejection.
    let now = c.now;
    c.ms[0].reject_config(now, 99);
    assert_eq!(c.ms[0].state(), State::Control);
    assert_eq!(c.ms[0].counters().configs_rejected, 0);
}

// --- Bad input (M9). ---

#[test]
fn bad_input_is_counted_by_reason_and_named() {
    let mut c = Mini::of(2);
    c.run(1000);
    let m = &mut c.ms[0];
    let hb = ControlMessage::Heartbeat(Heartbeat { ccl_address: Ipv4Addr::new(10, 99, 0, 2), ..Heartbeat::default() });
    let now = c.now;
    let env = |s: u8, i: u32| Envelope { sender: NodeId(s), incarnation: i, epoch: Epoch(1) };
    assert_eq!(m.on_message(now, env(5, 1), &hb), Received::UnknownSender);
    assert_eq!(m.on_message(now, env(200, 1), &hb), Received::UnknownSender);
    assert_eq!(m.on_message(now, env(0, 1), &hb), Received::FromSelf);
    assert_eq!(m.on_message(now, env(1, 1), &hb), Received::StaleIncarnation);
    let req = |to| JoinRequest {
        to: NodeId(to),
        priority: 1,
        place: Placement::default(),
        ccl_address: Ipv4Addr::new(10, 99, 0, 2),
        config_version: 0,
        config_digest: 0,
        workers: 1,
    };
    assert_eq!(m.on_message(now, env(1, 1001), &ControlMessage::JoinRequest(req(1))), Received::NotForMe);
    // A live member's id with another incarnation.
    assert_eq!(m.on_message(now, env(1, 1002), &ControlMessage::JoinRequest(req(0))), Received::IdInUse);
    let texts: Vec<String> = m.history().map(|e| e.text.clone()).collect();
    assert!(texts.iter().any(|t| t == "unknown-sender from node5: not a configured node (0)"), "{texts:#?}");
    assert!(texts.iter().any(|t| t.starts_with("id-in-use from n1")), "{texts:#?}");
    let c0 = *m.counters();
    for r in [Received::UnknownSender, Received::FromSelf, Received::StaleIncarnation, Received::NotForMe, Received::IdInUse] {
        assert!(c0.received(r) > 0, "{r:?}");
    }
    assert_eq!(c0.received(Received::UnknownSender), 2);
    let flat = flatten(&c0);
    assert_eq!(flat["received.unknown-sender"], 2);
    assert_eq!(flat.values().count(), Received::COUNT + 28);
}

/// Random decoded messages and times into one machine: no panic, one
/// control node believed at most, epochs never go back, every message
/// counted under one outcome, bounded queues.
fn any_message() -> impl Strategy<Value = (u8, u32, u64, u8, Vec<u8>, u64)> {
    (0u8..20, 0u32..4, 0u64..6, 0u8..9, proptest::collection::vec(any::<u8>(), 0..64), 0u64..400)
}

/// A chunk of transfer `xfer` made of `data`'s bytes.
fn chunk(data: &[u8], xfer: u32) -> ChunkOut {
    let b = |i: usize| data.get(i).copied().unwrap_or(0);
    ChunkOut {
        to: NodeId(b(0) % 4),
        to_incarnation: 1000 + u32::from(b(1) % 4),
        xfer,
        index: 0,
        total: 1 + u32::from(b(3) % 3),
        data: data.get(4..).filter(|d| !d.is_empty()).unwrap_or(&[1]).to_vec(),
    }
}

fn build(kind: u8, data: &[u8]) -> Option<Outgoing> {
    let b = |i: usize| data.get(i).copied().unwrap_or(0);
    Some(match kind {
        0 => Outgoing::Heartbeat(Heartbeat {
            priority: b(0),
            state: b(1) % 6,
            follows: (b(2) < 20).then(|| NodeId(b(2) % 4)),
            ccl_address: Ipv4Addr::new(10, 99, 0, 1 + b(3) % 4),
            seq: u32::from(b(4)),
            config_version: u64::from(b(5) % 3),
            state_version: u64::from(b(6) % 5),
            member_bitmap: u16::from(b(7) & 0x0f),
            echo_bitmap: u16::from(b(8) & 0x0f),
            echoes: [u32::from(b(9)); 16],
            ..Heartbeat::default()
        }),
        1 => Outgoing::JoinRequest(JoinRequest {
            to: NodeId(b(0) % 4),
            priority: b(1),
            place: Placement::default(),
            ccl_address: Ipv4Addr::new(10, 99, 0, 1 + b(2) % 5),
            config_version: u64::from(b(3) % 3),
            config_digest: u64::from(b(4)),
            workers: 1 + b(5) % 2,
        }),
        2 => Outgoing::JoinReply(JoinReply {
            to: NodeId(b(0) % 4),
            to_incarnation: 1000 + u32::from(b(1) % 4),
            verdict: JoinVerdict::ALL[usize::from(b(2)) % JoinVerdict::ALL.len()],
            detail: u64::from(b(3)),
            member_bitmap: if b(2) % 7 == 0 { u16::from(b(4) & 0x0f) } else { 0 },
            member_place: [Placement::default(); NODE_SLOTS],
            member_since: [Epoch(0); NODE_SLOTS],
        }),
        3 => Outgoing::SyncRequest(SyncRequest {
            to: NodeId(b(0) % 4),
            xfer: u32::from(b(1)),
            since: u64::from(b(2)),
            config_version: u64::from(b(3)),
            next: u32::from(b(4)),
            window: 1 + b(5) % 16,
            full: b(6) % 2 == 0,
        }),
        4 => Outgoing::SyncChunk(chunk(data, u32::from(b(2)))),
        6 => Outgoing::QueryRequest(QueryRequest {
            to: NodeId(b(0) % 4),
            query: u32::from(b(1) % 4),
            topic: 1 + b(2) % 15,
            next: u32::from(b(3) % 4),
            window: 1 + b(4) % 16,
            arg: dataplane::ccl::QueryArg::new(data.get(5..).unwrap_or(&[])).unwrap_or(dataplane::ccl::QueryArg::EMPTY),
        }),
        7 => Outgoing::QueryChunk(chunk(data, u32::from(b(2) % 4))),
        8 => Outgoing::LimitReport(dataplane::ccl::LimitReport::encode(
            u32::from(b(0)),
            &[(0, u32::from(b(1)), u32::from(b(2)))],
            &[(u32::from(b(3)), std::net::IpAddr::V4(Ipv4Addr::new(10, 0, 0, b(4))), 1, 1)],
        )),
        _ => Outgoing::TableUpdate {
            version: u64::from(b(0) % 8),
            table: b(1) % 3,
            key: data.get(2..4).unwrap_or(&[]).to_vec(),
            value: (b(4) % 2 == 0).then(|| data.iter().take(8).copied().collect()),
        },
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn random_messages_and_times_keep_the_invariants(
        me in 0u8..4,
        quorum in any::<bool>(),
        inputs in proptest::collection::vec(any_message(), 1..300),
    ) {
        let mut c = cfg(me, 4);
        if quorum {
            c.split_brain = SplitBrain::Quorum;
        }
        let mut m = Membership::new(c).unwrap();
        let mut t = 0u64;
        let mut last_epoch = Epoch(0);
        let mut given = 0u64;
        for (sender, inc, epoch, kind, data, dt) in inputs {
            t += dt * MS / 4;
            let now = Timestamp(t);
            if kind == 5 && data.first().is_some_and(|b| b % 5 == 0) {
                m.on_port(now, u16::from(data[0] % 3), data.get(1).is_some_and(|b| b % 2 == 0));
            } else if let Some(msg) = build(kind, &data) {
                let env = Envelope { sender: NodeId(sender % 6), incarnation: 999 + inc, epoch: Epoch(epoch) };
                let r = m.on_message(now, env, &msg.message());
                given += 1;
                if data.get(5).is_some_and(|b| b % 7 == 0) {
                    let _ = m.ask(now, 1 + data[5] % 15, &data);
                }
                prop_assert!(Received::ALL.contains(&r));
            }
            m.tick(now);
            prop_assert!(m.next_wakeup() > now, "next wakeup {:?} not after the tick at {:?}", m.next_wakeup(), now);
            if data.get(2).is_some_and(|b| b % 9 == 0) {
                m.on_sync(now, m.epoch(), u16::from(data[2]), true);
            }
            if m.state() == State::Control {
                let _ = m.table_upsert(now, 0, &data, b"v");
                prop_assert_eq!(m.control(), Some(m.me()));
            }
            prop_assert!(m.epoch() >= last_epoch, "epoch went back");
            last_epoch = m.epoch();
            prop_assert!(m.control().is_none() || m.state().is_member(), "a control node believed outside membership");
            prop_assert!(!m.ready() || matches!(m.state(), State::Data | State::Control));
            let mut n = 0;
            while let Some(a) = m.poll_action() {
                n += 1;
                if let Action::Query { from, incarnation, query, .. } = a {
                    m.answer(now, from, incarnation, query, data.clone());
                }
            }
            let _ = m.poll_answers(now, Duration::from_secs(2));
            prop_assert!(n < 200, "{} actions from one step", n);
            prop_assert!(m.history().count() <= Limits::default().history);
        }
        prop_assert_eq!(m.counters().messages(), given, "every message counted once");
    }
}

// --- Connection limits (L1). ---

/// A member's counts reach every other member as an action; a report from
/// a node that is not a member, or to a node outside the set, is ignored;
/// a node that is not a member does not send its own.
#[test]
fn limit_reports_reach_every_member_and_only_members() {
    let mut c = Mini::of(3);
    c.run(3000);
    assert!(c.states().iter().all(|s| s.is_member()), "{:?}", c.states());
    let report = dataplane::ccl::LimitReport::encode(4, &[(0, 10, 2)], &[]);
    let now = c.now;
    assert!(c.ms[1].broadcast_limits(now, report.clone()));
    c.pump(1);
    for n in [0, 2] {
        let got: Vec<_> = c.log[n].iter().filter(|a| matches!(a, Action::LimitReport { .. })).collect();
        assert_eq!(got, [&Action::LimitReport { from: NodeId(1), seq: 4, classes: vec![(0, 10, 2)], clients: vec![] }], "n{n}");
    }
    assert!(!c.ms[1].broadcast_limits(now, vec![1, 2, 3]), "not a report");
    // From node 3, configured but not a member: ignored.
    let mut m = machine(0, 4);
    let env = Envelope { sender: NodeId(3), incarnation: 1000, epoch: Epoch(1) };
    let msg = Outgoing::LimitReport(report.clone());
    assert_eq!(m.on_message(now, env, &msg.message()), Received::Ignored);
    assert!(!m.broadcast_limits(now, report), "not a member yet");
}

// --- Cluster-wide queries (L5). ---

/// Run `mini` until node `asker`'s query is answered or `timeout` passed,
/// every node answering a query with `answer(node)`.
fn gather(mini: &mut Mini, asker: usize, timeout: Duration, answer: &dyn Fn(usize) -> Vec<u8>) -> Answers {
    let mut answered = vec![0; mini.ms.len()];
    for _ in 0..2000 {
        mini.run(5);
        for n in 0..mini.ms.len() {
            let asks: Vec<(NodeId, u32, u32)> = mini.log[n][answered[n]..]
                .iter()
                .filter_map(|a| match a {
                    Action::Query { from, incarnation, query, arg, .. } => {
                        assert_eq!(arg, b"arg", "the argument travels with the query");
                        Some((*from, *incarnation, *query))
                    }
                    _ => None,
                })
                .collect();
            answered[n] = mini.log[n].len();
            for (from, inc, q) in asks {
                let now = mini.now;
                mini.ms[n].answer(now, from, inc, q, answer(n));
                mini.pump(n);
            }
        }
        let now = mini.now;
        if let Some(a) = mini.ms[asker].poll_answers(now, timeout) {
            return a;
        }
    }
    panic!("no outcome");
}

#[test]
fn a_query_gathers_every_members_answer_whole_despite_lost_chunks() {
    // Node n answers n × 7000 + 1 bytes of its own pattern: 1 to 15
    // chunks, and with 4 nodes one answer spans two request windows.
    let answer = |n: usize| (0..n * 17_000 + 1).map(|i| (i * 31 + n) as u8).collect::<Vec<u8>>();
    for loss in [0, 3] {
        let mut mini = Mini::of(4);
        mini.run(1500);
        assert!(mini.states().iter().all(|s| s.is_member()), "{:?}", mini.states());
        mini.chunk_loss = loss;
        let now = mini.now;
        assert_eq!(mini.ms[1].ask(now, 0, b""), None, "topic 0");
        assert_eq!(mini.ms[1].ask(now, 16, b""), None, "topic 16");
        assert_eq!(mini.ms[1].ask(now, 3, &[b'x'; 65]), None, "argument too long");
        let id = mini.ms[1].ask(now, 3, b"arg").unwrap();
        let t0 = mini.now;
        let got = gather(&mut mini, 1, Duration::from_secs(5), &answer);
        assert_eq!((got.query, got.topic), (id, 3));
        assert!(got.missing.is_empty() && got.aborted.is_empty(), "loss 1/{loss}: {got:?}");
        let mut from: Vec<usize> = got.answers.iter().map(|(n, _)| n.index()).collect();
        from.sort();
        assert_eq!(from, [0, 2, 3]);
        for (n, bytes) in &got.answers {
            assert!(*bytes == answer(n.index()), "loss 1/{loss}: node {n:?}'s answer differs");
        }
        let took = mini.now.since(t0);
        assert!(took < Duration::from_secs(if loss == 0 { 1 } else { 3 }), "loss 1/{loss}: took {took:?}");
        let c = mini.ms[1].counters();
        assert_eq!((c.queries_asked, c.query_answers, c.query_answers_missing), (1, 3, 0));
        // Each member rendered once, however many windows it served.
        for n in [0, 2, 3] {
            assert_eq!(mini.ms[n].counters().queries_answered, 1, "node {n}");
        }
    }
}

#[test]
fn a_node_that_does_not_answer_is_named_missing_at_the_deadline() {
    let mut mini = Mini::of(3);
    mini.run(1500);
    mini.alive[2] = false;
    let now = mini.now;
    mini.ms[0].ask(now, 1, b"arg").unwrap();
    let t0 = mini.now;
    let got = gather(&mut mini, 0, Duration::from_millis(800), &|n| vec![n as u8; 10]);
    assert_eq!(got.answers, vec![(NodeId(1), vec![1; 10])]);
    assert_eq!(got.missing, vec![NodeId(2)]);
    assert!(mini.now.since(t0) >= Duration::from_millis(800));
    assert_eq!(mini.ms[0].counters().query_answers_missing, 1);
    // The query is over: nothing more to poll.
    let now = mini.now;
    assert_eq!(mini.ms[0].poll_answers(now, Duration::from_millis(800)), None);
}

#[test]
fn query_answers_are_bounded_in_size_and_in_renders() {
    let mut m = machine(0, 3);
    m.tick(at(1));
    let env = |inc: u32| Envelope { sender: NodeId(1), incarnation: inc, epoch: Epoch(0) };
    // Renders: RENDERS_PER_SECOND new queries a second, the next refused.
    let req = |q: u32| QueryRequest { to: NodeId(0), query: q, topic: 1, next: 0, window: 16, arg: dataplane::ccl::QueryArg::EMPTY };
    for q in 0..RENDERS_PER_SECOND {
        assert_eq!(m.on_message(at(10), env(1001), &ControlMessage::QueryRequest(req(q))), Received::QueryRequest);
    }
    assert_eq!(m.on_message(at(10), env(1001), &ControlMessage::QueryRequest(req(99))), Received::QueryBusy);
    let asked: Vec<u32> = drain(&mut m).iter().filter_map(|a| if let Action::Query { query, .. } = a { Some(*query) } else { None }).collect();
    assert_eq!(asked.len(), RENDERS_PER_SECOND as usize);
    // Only the requester's latest query is answered; the others are gone.
    m.answer(at(20), NodeId(1), 1001, 0, vec![1; 10]);
    m.answer(at(20), NodeId(1), 1001, RENDERS_PER_SECOND - 1, vec![7; 3000]);
    let chunks: Vec<(u32, u32)> = drain(&mut m)
        .iter()
        .filter_map(|a| match a {
            Action::Send { msg: Outgoing::QueryChunk(c), .. } => Some((c.xfer, c.index)),
            _ => None,
        })
        .collect();
    assert_eq!(chunks, [(RENDERS_PER_SECOND - 1, 0), (RENDERS_PER_SECOND - 1, 1), (RENDERS_PER_SECOND - 1, 2)]);
    // A second later the budget is back.
    assert_eq!(m.on_message(at(1020), env(1001), &ControlMessage::QueryRequest(req(100))), Received::QueryRequest);
    // Asking: an answer announcing more than QUERY_MAX_BYTES is aborted
    // before anything is kept; chunks of no query, or to another boot,
    // are not taken.
    let id = m.ask(at(1100), 2, b"").unwrap();
    let chunk = |from: u8, inc: u32, xfer: u32, total: u32| {
        let c = SyncChunk { to: NodeId(0), to_incarnation: inc, xfer, index: 0, total, data: &[0; 10] };
        (Envelope { sender: NodeId(from), incarnation: 1000 + u32::from(from), epoch: Epoch(0) }, c)
    };
    let huge = (QUERY_MAX_BYTES / dataplane::ccl::SYNC_CHUNK_DATA) as u32 + 2;
    let (e, c) = chunk(1, 1000, id, huge);
    assert_eq!(m.on_message(at(1110), e, &ControlMessage::QueryChunk(c)), Received::Ignored);
    let (e, c) = chunk(2, 1001, id, 1);
    assert_eq!(m.on_message(at(1110), e, &ControlMessage::QueryChunk(c)), Received::NotForMe);
    let (e, c) = chunk(2, 1000, id + 1, 1);
    assert_eq!(m.on_message(at(1110), e, &ControlMessage::QueryChunk(c)), Received::Ignored);
    let (e, c) = chunk(2, 1000, id, 1);
    assert_eq!(m.on_message(at(1110), e, &ControlMessage::QueryChunk(c)), Received::QueryChunk);
    let got = m.poll_answers(at(1120), Duration::from_secs(1)).expect("every node answered or failed");
    assert_eq!((got.answers, got.aborted, got.missing), (vec![(NodeId(2), vec![0; 10])], vec![NodeId(1)], vec![]));
}

// --- Observability. ---

#[test]
fn snapshot_status_and_history_show_the_cluster() {
    let mut c = Mini::of(3);
    c.run(1000);
    c.alive[2] = false;
    c.run(500);
    let s = c.ms[0].snapshot(c.now);
    assert_eq!(s.len(), 3);
    assert_eq!((s[0].this_node, s[0].state, s[0].ready, s[0].member), (true, Some(State::Control), true, true));
    assert_eq!((s[1].state, s[1].control, s[1].ready, s[1].priority), (Some(State::Data), Some(NodeId(0)), true, Some(11)));
    assert_eq!(s[1].epoch, Some(c.ms[0].epoch()));
    assert!(s[1].last_heard_ms().is_some_and(|a| a <= 100));
    assert!(!s[2].member && s[2].last_heard_ms().is_some_and(|a| a >= 400));
    let st = c.ms[0].status();
    assert_eq!((st.state, st.control, st.members.bits(), st.ready), (State::Control, Some(NodeId(0)), 0b011, true));
    let h = c.texts(0);
    assert!(h.first().unwrap().contains("n0 started"));
    assert!(h.iter().any(|t| t.starts_with("n2 removed: no heartbeat for 3")), "{h:#?}");
    assert!(h.iter().any(|t| t.starts_with("epoch ") && t.ends_with("n0 n1")), "{h:#?}");
    // Every transition is also an event for the driver's log.
    let events = c.log[0].iter().filter(|a| matches!(a, Action::Event(_))).count();
    assert_eq!(events, c.ms[0].history().count());
    // Bounded history.
    let mut m = Membership::new(Config { limits: Limits { history: 4, ..Limits::default() }, ..cfg(0, 3) }).unwrap();
    for t in 0..50 {
        m.on_message(at(t), Envelope { sender: NodeId(9), incarnation: 1, epoch: Epoch(0) }, &ControlMessage::Heartbeat(Heartbeat::default()));
        m.tick(at(t * 400));
    }
    assert!(m.history().count() <= 4);
}

// --- Through the codec. ---

fn key() -> CclKey {
    CclKey::new("lab", "lab-secret-0123456789").unwrap()
}

fn link(me: u8, inc: u32) -> ControlLink {
    let path = FramePath {
        src_mac: [0x02, 0, 0, 0, 0x99, 1 + me],
        dst_mac: [0xff; 6],
        src_ip: Ipv4Addr::new(10, 99, 0, 1 + me),
        dst_ip: Ipv4Addr::new(10, 99, 0, 255),
    };
    ControlLink::new(&key(), NodeId(me), inc, path).unwrap()
}

#[test]
fn a_cluster_forms_over_sealed_frames() {
    let mut ms: Vec<Membership> = (0..3).map(|i| machine(i, 3)).collect();
    let mut ls: Vec<ControlLink> = (0..3).map(|i| link(i, 1000 + u32::from(i))).collect();
    let mut buf = [0u8; MAX_CONTROL_FRAME];
    for t in (0..1500).step_by(5) {
        for n in 0..3 {
            ms[n].tick(at(t));
            let mut frames = Vec::new();
            while let Some(a) = ms[n].poll_action() {
                if let Some(r) = ls[n].seal_action(&a, &mut buf) {
                    frames.push(buf[..r.unwrap()].to_vec());
                }
            }
            for f in frames {
                for o in (0..3).filter(|&o| o != n) {
                    let (m, l) = (&mut ms[o], &mut ls[o]);
                    assert!(l.receive(m, at(t), &f).is_ok());
                }
            }
        }
    }
    assert_eq!(ms.iter().map(Membership::state).collect::<Vec<_>>(), vec![State::Control, State::Data, State::Data]);
    let c = ls[1].counters();
    assert!(c.rx(dataplane::ccl::MessageKind::Heartbeat) > 20 && c.tx(dataplane::ccl::MessageKind::JoinRequest) >= 1);
    assert_eq!(c.total_drops(), 0);
    // A replayed frame is dropped by the opener, never reaches the machine.
    let before = ms[0].counters().messages();
    ms[1].tick(at(1600));
    let a = std::iter::from_fn(|| ms[1].poll_action()).find(|a| matches!(a, Action::Broadcast { .. })).unwrap();
    let n = ls[1].seal_action(&a, &mut buf).unwrap().unwrap();
    assert!(ls[0].receive(&mut ms[0], at(1600), &buf[..n]).is_ok());
    assert_eq!(ls[0].receive(&mut ms[0], at(1601), &buf[..n]), Err(dataplane::ccl::CclDrop::Replay));
    assert_eq!(ms[0].counters().messages(), before + 1);
}

