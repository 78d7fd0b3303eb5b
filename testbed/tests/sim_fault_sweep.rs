//! Seeded fault schedules in the simulator (issue 10, "Simulator"): real
//! pipelines and the real membership machines see every fault —
//! kill/restart, pause/resume, partition/heal, link down/up, CCL loss
//! bursts, a restart of a live node — with long-lived TCP downloads and UDP
//! exchanges running through. `SimConfig::fault_sweep(seed, 3)` draws 3 or
//! 4 nodes and three single failures, each with its recovery and a quiet
//! interval (`faults::schedule`); the invariants are the simulator's
//! (`faults.rs` module essay and docs/simulator.md): one owner per
//! connection among live, unfenced nodes of one side (every frame to a host
//! and every checkpoint), one control node per connected partition (bound
//! `DUAL_CONTROL_BOUND_NS`), settled after each fault within its quiet
//! interval and after a heal within `HEAL_BOUND_NS`, every transfer
//! complete with intact data. A quarter of the flows are IPv6
//! (`sim::DEFAULT_IPV6_SHARE`: 4 of the 16 downloads, 1 of the 6 UDP
//! flows), every run checks they are there (`dual_stack`), and the sweep
//! that IPv6 flows were taken over and completed. `CFW_SIM_IPV6_SHARE`
//! (0-1) runs the sweeps with another share (1: IPv6 only, 0: IPv4 only).
//!
//! Seeds: `CFW_SIM_SEEDS` (`1,2,3`, `100..150`, `1000+60`), default 1..=100.
//! Known cases are `Verdict`s with their signature (a multiple failure,
//! an open case); a run that fails otherwise fails the sweep. Reproduce one seed:
//! `CFW_SIM_SEEDS=9 cargo test --release -p testbed --test sim_fault_sweep fault_sweep -- --nocapture`
//! (`CFW_SIM_TRACE_FLOW=n` traces flow n's frames on stderr).

use testbed::sim::faults::{schedule, FaultAt, FaultKind, Inject, HEAL_BOUND_NS};
use testbed::sim::membership::{HEARTBEAT_INTERVAL_MS, HOLD_TIME_MS};
use testbed::sim::report::Report;
use testbed::sim::{self, SimConfig};

const MS: u64 = 1_000_000;
const INTERVAL: u64 = HEARTBEAT_INTERVAL_MS * MS;
const HOLD: u64 = HOLD_TIME_MS * MS;

/// Invariants a lost flow fails (and nothing else).
const FLOW_LOSS: [&str; 4] = ["flows-complete", "flows-timely", "director-knows-owner", "one-owner-at-end"];

/// What a failing run is.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Ok,
    /// OPEN CASE (not analysed): a UDP flow (either family: the same seeds
    /// 41 and 91 with IPv6 only) whose packets enter the node
    /// cut off by a partition of 1.5 s or more goes unanswered until the
    /// UDP client gives up (8 tries, 2 s): the cut node leaves and elects
    /// itself rather than serving the flow as its own side's.
    PartitionedUdp,
    /// An episode made two or more nodes lose their state (a CCL loss
    /// burst that got several nodes removed): a multiple failure, not a
    /// single one; lost flows are expected with `backups: 1`.
    MultipleFailure,
    Unknown(String),
}

/// Node `n` restarted at `at` and every member set a surviving node
/// adopted from then until `n` was ready again contains `n`.
fn restarted_within_one_set(r: &Report, n: usize, at: u64) -> bool {
    let Some(m) = r.membership.as_ref() else { return false };
    let Some(me) = m.per_node.get(n) else { return false };
    let ready = me
        .transitions
        .iter()
        .find(|t| t.at_ns >= at && matches!(t.to, controlplane::membership::State::Data | controlplane::membership::State::Control))
        .map_or(u64::MAX, |t| t.at_ns);
    m.per_node
        .iter()
        .filter(|o| o.node != n)
        .all(|o| o.member_sets.iter().filter(|s| s.at_ns >= at && s.at_ns <= ready).all(|s| s.contains(n)))
}

fn classify(r: &Report) -> Verdict {
    let failed = r.failed_invariants();
    if failed.is_empty() {
        return Verdict::Ok;
    }
    let why = || format!("{failed:?}\n{}", r.summary());
    const OWNERS: [&str; 2] = ["single-transmitter", "one-owner-while-running"];
    if !failed.iter().all(|f| FLOW_LOSS.contains(f) || OWNERS.contains(f)) {
        return Verdict::Unknown(why());
    }
    if failed.iter().any(|f| OWNERS.contains(f)) {
        return Verdict::Unknown(why());
    }
    let lost: Vec<&String> = r.failures.iter().filter(|f| f.starts_with("flow ")).collect();
    let long_partition = r.faults.as_ref().is_some_and(|f| {
        f.episodes.iter().any(|e| e.kind == "partition" && e.recover_ns - e.at_ns >= 1500 * MS)
    });
    if failed == ["flows-complete"] && long_partition && !lost.is_empty() && lost.iter().all(|f| (f.contains("(udp ") || f.contains("(udp6 ")) && f.contains("unanswered")) {
        return Verdict::PartitionedUdp;
    }
    let faults = r.faults.as_ref().expect("a fault scenario reports its faults");
    if faults.episodes.iter().any(|e| e.lost_state.len() >= 2) {
        return Verdict::MultipleFailure;
    }
    Verdict::Unknown(why())
}

/// The sweeps' share of IPv6 flows: `CFW_SIM_IPV6_SHARE`, else the
/// default (a quarter).
fn ipv6_share() -> f64 {
    std::env::var("CFW_SIM_IPV6_SHARE").ok().and_then(|v| v.parse().ok()).unwrap_or(sim::DEFAULT_IPV6_SHARE)
}

/// The run's IPv6 share is there: by default 4 of the 16 downloads and 1
/// of the 6 UDP flows (`SimConfig::fault_scenario`), and frames reached
/// their hosts.
fn dual_stack(r: &Report) {
    let s = r.config.ipv6_share;
    let of = |n: usize| (0..n).filter(|&k| sim::ipv6_flow(k, s)).count();
    assert_eq!((r.ipv6.tcp_flows, r.ipv6.udp_flows), (of(16), of(6)), "seed {}: {:?}", r.seed, r.ipv6);
    assert!(r.ipv6.host_packets > 0 || s == 0.0, "seed {}: {:?}", r.seed, r.ipv6);
}

/// IPv6 flows of the runs: completed of all, taken over and completed of
/// those taken over.
#[derive(Default, Debug)]
struct V6 {
    flows: usize,
    completed: usize,
    taken_over: u64,
    taken_over_completed: u64,
}

impl V6 {
    fn add(&mut self, r: &Report) {
        dual_stack(r);
        self.flows += r.ipv6.flows();
        self.completed += r.ipv6.completed();
        if let Some(f) = &r.faults {
            self.taken_over += f.ipv6_flows_taken_over;
            self.taken_over_completed += f.ipv6_flows_taken_over_completed;
        }
    }
}

/// Seeds from `var` (`1,2,3`, `100..150`, `1000+60`), default 1..=30.
fn seeds_from(var: &str) -> Vec<u64> {
    match std::env::var(var) {
        Ok(v) => sim::parse_seeds(&v).unwrap_or_else(|| panic!("{var}={v:?}: expected `1,2,3`, `100..150` or `1000+60`")),
        Err(_) => (1..=30).collect(),
    }
}

/// Runs of the sweep's schedules for `seeds`, each configured by `tweak`
/// and looked at by `look`, classified.
#[derive(Default)]
struct Tally {
    ok: usize,
    multiple: Vec<u64>,
    open: Vec<u64>,
    unknown: Vec<String>,
}

fn tally(seeds: &[u64], tweak: impl Fn(&mut SimConfig), mut look: impl FnMut(&Report)) -> Tally {
    let mut t = Tally::default();
    for &seed in seeds {
        let mut cfg = SimConfig::fault_sweep(seed, 3).ipv6_share(ipv6_share());
        tweak(&mut cfg);
        cfg.trace_flow = trace_flow();
        let r = sim::run(cfg).expect("scenario builds");
        look(&r);
        dual_stack(&r);
        match classify(&r) {
            Verdict::Ok => t.ok += 1,
            Verdict::PartitionedUdp => t.open.push(seed),
            Verdict::MultipleFailure => t.multiple.push(seed),
            Verdict::Unknown(why) => t.unknown.push(format!("seed {seed}: {why}")),
        }
    }
    for u in &t.unknown {
        println!("UNKNOWN FAILURE {u}");
    }
    t
}

fn trace_flow() -> Option<u32> {
    std::env::var("CFW_SIM_TRACE_FLOW").ok().and_then(|v| v.parse().ok())
}

#[test]
fn fault_sweep() {
    let seeds = sim::seeds_from_env(1, 100);
    let t0 = std::time::Instant::now();
    let (mut ok, mut multiple, mut unknown, mut open) = (0, Vec::new(), Vec::new(), Vec::new());
    let (mut det, mut take, mut settle_heal, mut stalls) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut episodes = 0;
    let mut kinds = std::collections::BTreeMap::new();
    let mut v6 = V6::default();
    let mut v4 = (0, 0);
    for &seed in &seeds {
        let mut cfg = SimConfig::fault_sweep(seed, 3).ipv6_share(ipv6_share());
        cfg.trace_flow = trace_flow();
        let r = sim::run(cfg).expect("scenario builds");
        v6.add(&r);
        v4 = (v4.0 + r.ipv4.completed(), v4.1 + r.ipv4.flows());
        let f = r.faults.as_ref().unwrap();
        for e in &f.episodes {
            episodes += 1;
            *kinds.entry(e.kind).or_insert(0) += 1;
            if let Some(d) = e.detection_ms().filter(|_| matches!(e.kind, "kill" | "pause" | "partition")) {
                det.push(d);
            }
            if let Some(t) = e.takeover_ms() {
                take.push(t);
            }
            if e.kind == "partition" {
                if let Some(s) = e.settle_ms() {
                    settle_heal.push(s);
                }
            }
        }
        stalls.push(f.stall_median_worst().1);
        if seeds.len() <= 3 {
            println!("{}", r.summary());
        }
        match classify(&r) {
            Verdict::Ok => ok += 1,
            Verdict::PartitionedUdp => open.push(seed),
            Verdict::MultipleFailure => multiple.push(seed),
            Verdict::Unknown(why) => unknown.push(format!("seed {seed}: {why}")),
        }
    }
    let stat = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return "n=0".to_string();
        }
        format!("n={} median {:.0} ms, p95 {:.0} ms, max {:.0} ms", v.len(), v[v.len() / 2], v[v.len() * 95 / 100], v[v.len() - 1])
    };
    println!(
        "fault sweep: {} seeds, {episodes} episodes {kinds:?}, {:.1} s wall",
        seeds.len(),
        t0.elapsed().as_secs_f64()
    );
    println!("  detection (fault -> new epoch; kill, pause, partition): {}", stat(&mut det));
    println!("  takeover (fault -> first packet of a taken-over flow): {}", stat(&mut take));
    println!("  heal -> settled: {}", stat(&mut settle_heal));
    println!("  worst stall per run: {}", stat(&mut stalls));
    println!(
        "  flows completed: IPv4 {}/{}, IPv6 {}/{}; IPv6 flows taken over {} ({} of them completed)",
        v4.0, v4.1, v6.completed, v6.flows, v6.taken_over, v6.taken_over_completed
    );
    println!("  clean {ok}; multiple failures (several nodes reset in one episode, flows may be lost) {multiple:?}");
    println!("  OPEN CASE partitioned UDP flow unanswered: {open:?}");
    for u in &unknown {
        println!("UNKNOWN FAILURE {u}");
    }
    assert!(unknown.is_empty(), "{} runs failed outside the known cases: {:?}", unknown.len(), unknown.iter().map(|u| u.lines().next()).collect::<Vec<_>>());
    // The sweep must mostly be clean: a generator gone degenerate (every
    // run a known case) would test nothing.
    assert!(ok * 2 >= seeds.len() || seeds.len() < 20, "only {ok} of {} runs clean", seeds.len());
    // Failover for IPv6 flows as for IPv4's: some were taken over, and
    // (outside the known cases' lost flows) they completed.
    let few = seeds.len() < 20 || ipv6_share() == 0.0;
    assert!(v6.taken_over > 0 || few, "no IPv6 flow was taken over: {v6:?}");
    assert!(v6.taken_over_completed > 0 || few, "{v6:?}");
}

/// Double failures with `backups: 2` (issue 10, "Simulator": no
/// established connection lost on any double failure with `backups: 2`):
/// 4 nodes, two episodes of two nodes killed or paused together, every
/// run must pass every invariant — no `MultipleFailure` excuse.
/// `CFW_SIM_DOUBLE_SEEDS` (default 1..=30).
#[test]
fn double_fault_sweep_with_two_backups() {
    let seeds = seeds_from("CFW_SIM_DOUBLE_SEEDS");
    let t0 = std::time::Instant::now();
    let (mut ok, mut failed, mut take, mut lost_two) = (0, Vec::new(), Vec::new(), 0);
    let mut v6 = V6::default();
    for &seed in &seeds {
        let mut cfg = SimConfig::double_fault_sweep(seed, 2).ipv6_share(ipv6_share());
        cfg.trace_flow = trace_flow();
        let r = sim::run(cfg).expect("scenario builds");
        v6.add(&r);
        let f = r.faults.as_ref().unwrap();
        for e in &f.episodes {
            lost_two += usize::from(e.lost_state.len() >= 2);
            if let Some(t) = e.takeover_ms() {
                take.push(t);
            }
        }
        if r.ok() {
            ok += 1;
        } else {
            failed.push(format!("seed {seed}: {:?}\n{}", r.failed_invariants(), r.summary()));
        }
    }
    take.sort_by(f64::total_cmp);
    let med = take.get(take.len() / 2).copied().unwrap_or(0.0);
    println!(
        "double-fault sweep (backups: 2): {} seeds, {ok} clean, {lost_two} episodes with two nodes reset, takeover median {med:.0} ms, {:.1} s wall",
        seeds.len(),
        t0.elapsed().as_secs_f64()
    );
    println!("  IPv6: {v6:?}");
    for f in &failed {
        println!("FAILURE {f}");
    }
    assert!(lost_two > 0, "the schedules made no double failure");
    assert!(failed.is_empty(), "{} runs failed: {:?}", failed.len(), failed.iter().map(|f| f.lines().next()).collect::<Vec<_>>());
    // Every run passes every invariant: every IPv6 flow completed, those
    // taken over among them.
    assert!(v6.completed == v6.flows && v6.taken_over_completed == v6.taken_over, "{v6:?}");
    assert!(v6.taken_over > 0 || seeds.len() < 10 || ipv6_share() == 0.0, "no IPv6 flow was taken over: {v6:?}");
}

/// The sweep's schedules with `split-brain: quorum`: the same invariants
/// (the same known cases), and no flow is ever owned on two sides of a
/// partition (`split_owned_checks` 0): a side without a majority of the
/// last member set shuts its data ports instead of electing its own
/// control node. `CFW_SIM_QUORUM_SEEDS` (default 1..=30).
///
/// Found by this sweep and fixed: 4-node clusters lost most flows after a
/// single failure, members fenced (the followers' echo lagged by up to an
/// interval: they now answer the control node's heartbeat at once in
/// quorum mode), and a second owner elected at a new director before the
/// owner's re-registration arrived (seed 124; `settling`), and a backup's
/// state overwritten by a reply that the registration overtook (seed 93).
/// 200 seeds: 184 clean, 16 multiple failures, none unexplained.
#[test]
fn fault_sweep_in_quorum_mode() {
    let seeds = seeds_from("CFW_SIM_QUORUM_SEEDS");
    let t0 = std::time::Instant::now();
    let (mut split, mut partitions) = (0, 0);
    let t = tally(&seeds, |c| c.quorum = true, |r| {
        let f = r.faults.as_ref().unwrap();
        split += f.split_owned_checks;
        partitions += f.episodes.iter().filter(|e| e.kind == "partition").count();
    });
    println!(
        "quorum-mode sweep: {} seeds, {partitions} partitions, {} clean, multiple failures {:?}, partitioned UDP {:?}, checks with owners on two sides {split}, {:.1} s wall",
        seeds.len(),
        t.ok,
        t.multiple,
        t.open,
        t0.elapsed().as_secs_f64()
    );
    assert!(partitions > 0, "no partition drawn");
    assert_eq!(split, 0, "a flow owned on two sides of a partition in quorum mode");
    assert!(t.unknown.is_empty(), "{} runs failed outside the known cases: {:?}", t.unknown.len(), t.unknown.iter().map(|u| u.lines().next()).collect::<Vec<_>>());
}

/// A golden scenario: 3 nodes, `faults`, quiet until `end`.
fn golden(faults: Vec<FaultAt>, end_ms: u64) -> Report {
    let mut cfg = SimConfig::fault_scenario(7, 3, faults, end_ms * MS);
    cfg.trace_flow = trace_flow();
    let r = sim::run(cfg).unwrap();
    println!("{}", r.summary());
    r
}

fn at(ms: u64, fault: FaultKind) -> FaultAt {
    FaultAt { at_ns: ms * MS, fault }
}

fn history(r: &Report, n: usize) -> String {
    r.membership.as_ref().unwrap().per_node[n].history.join("\n")
}

#[test]
fn golden_kill_the_control_node() {
    // node0 (control: equal priorities, lowest id) dies at 2 s, comes back
    // at 3.5 s. node1 is elected a hold time (+ a tick) after node0's last
    // heartbeat, the flows node0 owned are taken over, node0 rejoins as a
    // data node (node1 keeps the role: a joiner does not take over).
    let r = golden(vec![at(2000, FaultKind::Kill(0)), at(3500, FaultKind::Restart(0))], 7500);
    assert!(r.ok(), "{}", r.summary());
    let f = r.faults.as_ref().unwrap();
    let e = &f.episodes[0];
    assert_eq!((e.kind, e.node, e.lost_state.as_slice()), ("kill", Some(0), &[0][..]));
    let d = e.new_epoch_ns.unwrap() - e.at_ns;
    assert!((HOLD - INTERVAL..=HOLD + INTERVAL).contains(&d), "detection {} ms", d / MS);
    let t = e.takeover_ns.unwrap() - e.at_ns;
    assert!(t >= d && t <= d + 2 * INTERVAL, "takeover {} ms after detection {} ms", t / MS, d / MS);
    assert!(f.takeovers > 0);
    let m = r.membership.as_ref().unwrap();
    assert_eq!(m.control_nodes(), vec![1], "{}", m.states());
    assert!(m.per_node.iter().all(|n| n.epoch == m.per_node[1].epoch && n.members == vec![0, 1, 2]), "{}", m.states());
    assert!(history(&r, 1).contains("data -> control"), "{}", history(&r, 1));
    assert!(e.settle_ms().unwrap() <= 1000.0, "{:?}", e.settle_ms());
    assert_eq!(f.open_owned_at_end, (0, 0, 0));
}

#[test]
fn golden_pause_a_data_node_past_the_hold_time() {
    // node2 frozen 2.0-3.0 s (routers withdraw it, as BFD would): removed
    // a hold time after its last heartbeat; on resume its machine sees the
    // gap, leaves (`Paused`: reset, ports down — fenced since its lease ran
    // out), rejoins after the 1 s backoff and takes traffic again.
    let r = golden(vec![at(2000, FaultKind::Pause(2)), at(3000, FaultKind::Resume(2))], 8000);
    assert!(r.ok(), "{}", r.summary());
    let e = &r.faults.as_ref().unwrap().episodes[0];
    let d = e.new_epoch_ns.unwrap() - e.at_ns;
    assert!((HOLD - INTERVAL..=HOLD + INTERVAL).contains(&d), "detection {} ms", d / MS);
    assert_eq!(e.lost_state, vec![2]);
    let h = history(&r, 2);
    assert!(h.contains("not run for") || h.contains("paused") || h.contains("Paused") || h.contains("inactive"), "{h}");
    let m = r.membership.as_ref().unwrap();
    assert_eq!(m.control_nodes(), vec![0], "{}", m.states());
    // Back within the backoff (1 s) and a join.
    let s = e.settle_ms().unwrap();
    assert!((1000.0..=2000.0).contains(&s), "settled {s} ms after the resume");
    assert!(m.per_node[2].actions.resets >= 1);
}

#[test]
fn golden_pause_of_the_control_node_past_the_hold_time() {
    // node0 (control, the best rank) frozen 2.0-3.0 s: node1 is elected
    // and takes node0's flows over; node0 comes back claiming the control
    // role of its old epoch (marked resumed): node1 keeps the role and the
    // flows, node0 leaves (`Paused`) and rejoins.
    let r = golden(vec![at(2000, FaultKind::Pause(0)), at(3000, FaultKind::Resume(0))], 8000);
    assert!(r.ok(), "{}", r.summary());
    let m = r.membership.as_ref().unwrap();
    assert_eq!(m.control_nodes(), vec![1], "{}", m.states());
    assert!(history(&r, 0).contains("control -> inactive: not run for"), "{}", history(&r, 0));
    assert_eq!((m.per_node[1].actions.resets, m.per_node[2].actions.resets), (0, 0), "{}", m.states());
}

#[test]
fn golden_a_stall_of_the_whole_host_costs_no_flow() {
    // Every node frozen 2.0-3.0 s, resumed a few ms apart (a stalled
    // host): nobody is removed, nobody resets, no new epoch; each resumes
    // fenced and is confirmed by the others' next heartbeats.
    let pauses = (0..3).map(|n| at(2000, FaultKind::Pause(n)));
    let resumes = [(2, 3000), (1, 3004), (0, 3008)].map(|(n, t)| at(t, FaultKind::Resume(n)));
    let r = golden(pauses.chain(resumes).collect(), 7000);
    assert!(r.ok(), "{}", r.summary());
    let m = r.membership.as_ref().unwrap();
    assert_eq!(m.control_nodes(), vec![0], "{}", m.states());
    for n in 0..3 {
        assert_eq!(m.per_node[n].actions.resets, 0, "node{n}: {}", history(&r, n));
        assert_eq!(m.per_node[n].member_sets.len(), m.per_node[0].member_sets.len(), "{}", m.states());
        assert!(history(&r, n).contains("fenced"), "{}", history(&r, n));
    }
    for e in &r.faults.as_ref().unwrap().episodes {
        assert_eq!((e.new_epoch_ns, e.lost_state.len()), (None, 0), "{e:?}");
    }
}

#[test]
fn golden_pause_below_the_hold_time_changes_nothing() {
    // 150 ms frozen: not removed, no reset, no new epoch.
    let r = golden(vec![at(2000, FaultKind::Pause(1)), at(2150, FaultKind::Resume(1))], 6200);
    assert!(r.ok(), "{}", r.summary());
    let e = &r.faults.as_ref().unwrap().episodes[0];
    assert_eq!((e.new_epoch_ns, e.lost_state.len()), (None, 0), "{e:?}");
}

#[test]
fn golden_partition_one_node_away_then_heal() {
    // node2 cut off on the CCL 2.0-3.5 s: each side elects its own control
    // node (split-brain `elect`); after the heal node0 keeps the role and
    // node2 rejoins within HEAL_BOUND_NS.
    let r = golden(vec![at(2000, FaultKind::Partition(vec![0, 0, 1])), at(3500, FaultKind::Heal)], 7500);
    assert!(r.ok(), "{}", r.summary());
    let e = &r.faults.as_ref().unwrap().episodes[0];
    assert!(history(&r, 2).contains("-> control"), "{}", history(&r, 2));
    let s = e.settled_ns.unwrap() - e.recover_ns;
    assert!(s <= HEAL_BOUND_NS, "settled {} ms after the heal", s / MS);
    let m = r.membership.as_ref().unwrap();
    assert_eq!(m.control_nodes(), vec![0], "{}", m.states());
    assert!(history(&r, 2).contains("node0 keeps the control role"), "{}", history(&r, 2));
}

#[test]
fn golden_link_down_then_up() {
    // node1's outside link down 2.0-3.5 s: after the 500 ms debounce the
    // machine leaves (`PortDown`), the others take its flows; link up, it
    // rejoins after the backoff.
    let r = golden(vec![at(2000, FaultKind::LinkDown(1, sim::net::Side::Outside)), at(3500, FaultKind::LinkUp(1, sim::net::Side::Outside))], 8500);
    assert!(r.ok(), "{}", r.summary());
    let e = &r.faults.as_ref().unwrap().episodes[0];
    let d = e.new_epoch_ns.unwrap() - e.at_ns;
    // Debounce (500 ms), then the leave is heard at once (its heartbeat
    // says inactive) — within an interval.
    assert!((500 * MS..=500 * MS + 2 * INTERVAL).contains(&d), "detection {} ms", d / MS);
    assert_eq!(e.lost_state, vec![1]);
}

#[test]
fn golden_kill_and_restart_after_removal() {
    // A data node killed, restarted after it was removed: a clean rejoin.
    let r = golden(vec![at(2000, FaultKind::Kill(2)), at(3000, FaultKind::Restart(2))], 7000);
    assert!(r.ok(), "{}", r.summary());
    let e = &r.faults.as_ref().unwrap().episodes[0];
    assert!(e.settle_ms().unwrap() <= 1000.0, "{:?}", e.settle_ms());
}

/// A restart readmitted within one member set (fixed: it was the sweep's
/// known bug 1, one run in four): the survivors never apply a set without
/// the node, {0,1,2}@1 -> {0,1,2}@2, and only its admission epoch
/// (`MemberInfo::since`, carried in the member tables) tells their
/// pipelines that it lost its state; its orphans are handed to it where it
/// directs them (docs/failover.md, "Orphans").
fn restart_within_one_set(faults: Vec<FaultAt>, node: usize) {
    let r = golden(faults, 6000);
    assert!(r.ok(), "{}", r.summary());
    assert!(restarted_within_one_set(&r, node, 2000 * MS), "the scenario is a readmission within one set");
    let m = r.membership.as_ref().unwrap();
    let other = (node + 1) % 3;
    let sets: Vec<_> = m.per_node[other].member_sets.iter().map(|s| (s.epoch, s.members.clone())).collect();
    assert!(sets.iter().all(|(_, s)| s == &vec![0, 1, 2]), "{sets:?}");
    assert!(sets.len() >= 2, "a new epoch for the readmission: {sets:?}");
}

#[test]
fn golden_restart_of_the_control_node_within_one_member_set() {
    // node0 (control) restarts at 2 s; its new machine is heard joining
    // while the others elect node1 a hold time later, and node1's first
    // set already includes it.
    restart_within_one_set(vec![at(2000, FaultKind::Restart(0))], 0);
}

#[test]
fn golden_restart_of_a_data_node_within_one_member_set() {
    // node2 crashes and is back 200 ms later (below the 300 ms hold time,
    // as a fast reboot): the control node readmits its new incarnation (the
    // old one silent for two intervals) before the hold time removes it.
    restart_within_one_set(vec![at(2000, FaultKind::Kill(2)), at(2200, FaultKind::Restart(2))], 2);
}

// --- The checks bite. ---

#[test]
fn ignoring_resets_makes_a_second_owner_that_is_caught() {
    // A paused node that keeps its flows (its driver ignores `Reset`)
    // owns them again once readmitted, beside the nodes that took them
    // over.
    let mut cfg = SimConfig::fault_scenario(7, 3, vec![at(2000, FaultKind::Pause(2)), at(3000, FaultKind::Resume(2))], 8000 * MS);
    cfg.inject = Some(Inject::NoReset);
    let r = sim::run(cfg).unwrap();
    let failed = r.failed_invariants();
    assert!(
        failed.contains(&"single-transmitter") || failed.contains(&"one-owner-while-running") || failed.contains(&"one-owner-at-end"),
        "{failed:?}\n{}",
        r.summary()
    );
}

#[test]
fn disabled_takeover_is_caught() {
    // The pipelines never learn a member set: a killed owner's flows are
    // never taken over.
    let mut cfg = SimConfig::fault_scenario(7, 3, vec![at(2000, FaultKind::Kill(1)), at(3000, FaultKind::Restart(1))], 7000 * MS);
    cfg.inject = Some(Inject::NoMembers);
    let r = sim::run(cfg).unwrap();
    let failed = r.failed_invariants();
    assert!(failed.contains(&"flows-complete"), "{failed:?}\n{}", r.summary());
    assert!(failed.contains(&"settles-after-each-fault"), "{failed:?}");
}

#[test]
fn two_control_nodes_on_one_side_are_caught() {
    // With the partition's sides ignored by the checks, the two sides'
    // control nodes count as two on one side.
    let mut cfg = SimConfig::fault_scenario(7, 3, vec![at(2000, FaultKind::Partition(vec![0, 0, 1])), at(3500, FaultKind::Heal)], 7500 * MS);
    cfg.inject = Some(Inject::OneSide);
    let r = sim::run(cfg).unwrap();
    assert!(r.failed_invariants().contains(&"one-control-per-partition"), "{}", r.summary());
}

#[test]
fn schedules_are_seeded_single_failures() {
    let a = SimConfig::fault_sweep(5, 3);
    assert_eq!(a.faults, SimConfig::fault_sweep(5, 3).faults);
    assert_ne!(a.faults, SimConfig::fault_sweep(6, 3).faults);
    let (f, end) = schedule::draw(5, 4, 3);
    assert!(f.windows(2).all(|w| w[0].at_ns <= w[1].at_ns));
    assert!(end >= f.last().unwrap().at_ns + schedule::QUIET_NS);
    // Any node count and episode count builds and never panics.
    for nodes in 1..=5 {
        for e in 0..4 {
            let (f, _) = schedule::draw(nodes as u64, nodes, e);
            assert!(f.iter().all(|f| match &f.fault {
                FaultKind::Kill(n) | FaultKind::Pause(n) | FaultKind::Resume(n) | FaultKind::Restart(n) => *n < nodes,
                FaultKind::LinkDown(n, _) | FaultKind::LinkUp(n, _) => *n < nodes,
                FaultKind::Partition(g) => g.len() == nodes,
                _ => true,
            }));
        }
    }
    // Same seed, same run.
    let cfg = SimConfig::fault_sweep(2, 3);
    assert_eq!(sim::run(cfg.clone()).unwrap().fingerprint(), sim::run(cfg).unwrap().fingerprint());
}

/// A chassis fails (R4): 4 nodes, two per chassis, both nodes of chassis 0
/// (node0 the control node) killed at once, back 2 s later. A flow whose owner and backup
/// owner (its director) share that chassis survives only through the
/// chassis backup, the first member of its ranking on the other chassis:
/// with chassis ids every transfer completes; the same schedule without
/// them loses the flows whose owner and director both sat in chassis 0.
#[test]
fn a_chassis_failure_loses_no_flow_with_chassis_ids() {
    let run = |placement: Vec<(Option<u8>, Option<u8>)>| {
        let mut cfg = SimConfig::fault_scenario(7, 4, vec![
                at(2000, FaultKind::Kill(0)),
                at(2000, FaultKind::Kill(1)),
                at(4000, FaultKind::Restart(0)),
                at(4000, FaultKind::Restart(1)),
            ],
            8000 * MS,
        );
        cfg.placement = placement;
        cfg.trace_flow = trace_flow();
        sim::run(cfg).unwrap()
    };
    let with = run(vec![(None, Some(0)), (None, Some(0)), (None, Some(1)), (None, Some(1))]);
    println!("{}", with.summary());
    assert!(with.ok(), "{}", with.summary());
    let f = with.faults.as_ref().unwrap();
    assert!(f.takeovers > 0, "the flows of chassis 0 were taken over");
    let m = with.membership.as_ref().unwrap();
    assert!(m.per_node.iter().all(|n| n.members == vec![0, 1, 2, 3]), "{}", m.states());
    let without = run(Vec::new());
    let lost = without.failures.iter().filter(|f| f.starts_with("flow ")).count();
    assert!(lost > 0, "without chassis ids a flow owned and directed in chassis 0 is lost: {}", without.summary());
    println!("chassis failure: with chassis ids all flows complete ({} takeovers); without, {lost} flows lost", f.takeovers);
}

/// Director localization (R12): 4 nodes on two sites (0, 1 at site 1;
/// 2, 3 at site 2), a kill and a restart of node 2. Forwarders ask the
/// local director of their site first: the lookups it answers never cross
/// the sites; those it does not know (a flow owned at the other site, an
/// owner that failed) go on to the global director. Every transfer
/// completes, one owner throughout, as without localization.
#[test]
fn director_localization_on_two_sites() {
    let mut cfg = SimConfig::fault_scenario(7, 4, vec![at(2000, FaultKind::Kill(2)), at(3500, FaultKind::Restart(2))], 7500 * MS);
    cfg.placement = vec![(Some(1), None), (Some(1), None), (Some(2), None), (Some(2), None)];
    cfg.localization = true;
    cfg.trace_flow = trace_flow();
    let r = sim::run(cfg).unwrap();
    println!("{}", r.summary());
    assert!(r.ok(), "{}", r.summary());
    let sum = |k: &str| r.per_node.iter().map(|n| n.cluster.as_ref().and_then(|c| c.get(k).copied()).unwrap_or(0)).sum::<u64>();
    let (sent, answered, unknown, fallbacks) =
        (sum("local_queries_sent"), sum("local_answered"), sum("local_unknown"), sum("local_fallbacks"));
    println!(
        "director localization: {sent} lookups at a local director, {answered} answered there, {unknown} not known there ({fallbacks} asked the global director next); {} owner queries in all",
        sum("director_queries_sent")
    );
    assert!(answered > 0 && fallbacks > 0, "both kinds of lookup happened");
    // (Not `answered + unknown <= sent`: node2's restart starts a new
    // pipeline, its counters from before are gone.)
    assert!(sent > 0 && unknown > 0);
    assert!(r.faults.as_ref().unwrap().takeovers > 0);
}

/// The sweep's schedules with two sites and director localization (R12):
/// the same invariants, the same known cases. `CFW_SIM_LOCAL_SEEDS`
/// (default 1..=30).
#[test]
fn fault_sweep_with_director_localization() {
    let seeds = seeds_from("CFW_SIM_LOCAL_SEEDS");
    let t0 = std::time::Instant::now();
    let mut lookups = (0, 0);
    let two_sites = |c: &mut SimConfig| {
        c.placement = (0..c.nodes).map(|n| (Some(1 + (n >= c.nodes / 2) as u8), None)).collect();
        c.localization = true;
    };
    let t = tally(&seeds, two_sites, |r| {
        let sum = |k: &str| r.per_node.iter().map(|n| n.cluster.as_ref().and_then(|c| c.get(k).copied()).unwrap_or(0)).sum::<u64>();
        lookups.0 += sum("local_answered");
        lookups.1 += sum("local_fallbacks");
    });
    println!(
        "localization sweep: {} seeds, {} clean, multiple failures {:?}, partitioned UDP {:?}; lookups answered by a local director {}, sent on to the global one {}, {:.1} s wall",
        seeds.len(),
        t.ok,
        t.multiple,
        t.open,
        lookups.0,
        lookups.1,
        t0.elapsed().as_secs_f64()
    );
    assert!(lookups.0 > 0 && lookups.1 > 0);
    assert!(t.unknown.is_empty(), "{} runs failed outside the known cases: {:?}", t.unknown.len(), t.unknown.iter().map(|u| u.lines().next()).collect::<Vec<_>>());
}
