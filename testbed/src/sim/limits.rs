//! Cluster-wide connection limits by estimate, measured (issue 15 item 3,
//! SPEC L1; docs/flood.md): how far each node's estimate of the cluster's
//! count is from the truth, under balanced and skewed load, how fast it
//! catches up after a burst, and how far a limit is overshot.
//!
//! Each simulated node is what the real node runs for limits: one
//! worker's `ConnTable` with `conntrack::limits::Limits`, and a control
//! lcore with `controlplane::limits::Estimator`. Reports travel as the
//! real `LimitReport` wire bytes over a CCL with latency and loss; the
//! worker reports every `REPORT_INTERVAL` at its own phase, the control
//! lcore broadcasts and hands the worker its remote view every interval at
//! another phase — the two stages a real node has. Connections are TCP
//! handshakes through the real conntrack (SYN, SYN-ACK, ACK, and a RST at
//! the end of their lifetime), spread over the nodes by weight (the
//! routers' ECMP); a share of them never get past the SYN (half-open).
//!
//! Virtual time in 1 ms steps; all randomness from one ChaCha stream of
//! the seed. Nothing here reads a clock.

use controlplane::limits::{Estimator, REPORT_INTERVAL};
use dataplane::ccl::LimitReport;
use dataplane::conntrack::limits::Count;
use dataplane::conntrack::tcp_flags::{ACK, RST, SYN};
use dataplane::conntrack::{Admission, ConnTable, L4Info, LimitSpec, Limits, TcpSeg, Timeouts};
use dataplane::types::{ip_proto, Duration, FiveTuple, NodeId, Timestamp};
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

const MS: u64 = 1_000_000;

/// One scenario.
#[derive(Clone, Debug)]
pub struct LimitSimConfig {
    pub seed: u64,
    /// Relative share of new connections per node (the routers' hash;
    /// all equal: balanced).
    pub weights: Vec<u32>,
    /// New connections per second, cluster-wide, in steady state.
    pub rate: u32,
    /// Mean connection lifetime (exponential), ms.
    pub mean_life_ms: u64,
    /// Share of connections that stay half-open (never answered) until
    /// the SYN timeout.
    pub half_open: f64,
    pub duration_ms: u64,
    /// Extra connections: (start ms, count, over ms, node: `None` = by
    /// weight). Measured: the time until every estimate is back within
    /// tolerance after it.
    pub burst: Option<(u64, u32, u64, Option<usize>)>,
    /// Clients the connections come from (uniformly); client 0 can be
    /// made heavier with `heavy_share`.
    pub clients: u32,
    pub heavy_share: f64,
    /// CCL one-way latency range (µs) and loss.
    pub latency_us: (u64, u64),
    pub loss: f64,
    pub limits: LimitSpec,
    /// The SYN timeout (half-open connections end after it).
    pub syn_timeout_ms: u64,
    /// Errors are sampled from here on (the load has built up).
    pub sample_from_ms: u64,
}

impl LimitSimConfig {
    /// Steady load over `nodes` nodes, no limit reached (the counts are
    /// what is measured), CCL 0.1-1 ms, no loss.
    pub fn steady(seed: u64, weights: Vec<u32>) -> LimitSimConfig {
        LimitSimConfig {
            seed,
            weights,
            rate: 4000,
            mean_life_ms: 2000,
            half_open: 0.1,
            duration_ms: 9000,
            burst: None,
            clients: 500,
            heavy_share: 0.0,
            latency_us: (100, 1000),
            loss: 0.0,
            limits: LimitSpec {
                global: dataplane::conntrack::LimitSet { max_conns: Some(u32::MAX - 1), max_embryonic: Some(u32::MAX - 1), ..Default::default() },
                rules: vec![],
            },
            syn_timeout_ms: 2000,
            sample_from_ms: 4000,
        }
    }
}

/// What a run measured. Errors are of a node's estimate (its own count
/// now plus its remote view) against the true cluster-wide count, sampled
/// every 10 ms from `sample_from_ms`, over all nodes.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct LimitSimReport {
    pub samples: u64,
    /// True cluster-wide connections: mean and peak.
    pub mean_true: f64,
    pub peak_true: u32,
    /// |estimate − truth| / truth: mean, 99th percentile, max (connections).
    pub mean_err_pct: f64,
    pub p99_err_pct: f64,
    pub max_err_pct: f64,
    /// The same for the embryonic count (absolute, connections).
    pub mean_emb_err: f64,
    pub max_emb_err: u32,
    /// After the burst: ms from its end until every node's estimate is
    /// within 2 % of the truth (`None`: no burst, or never).
    pub converge_ms: Option<u64>,
    /// Peaks of the true counts, cluster-wide: embryonic, and of the
    /// heaviest client (connections, embryonic).
    pub peak_true_embryonic: u32,
    pub peak_client: (u32, u32),
    pub admitted: u64,
    pub refused: BTreeMap<String, u64>,
    pub reports_sent: u64,
    pub reports_lost: u64,
}

struct Node {
    table: ConnTable,
    estimator: Estimator,
    ids: Vec<u32>,
    /// Phases (ns) of the worker's report and the control lcore's round.
    worker_phase: u64,
    control_phase: u64,
}

enum Ev {
    SynAck { node: usize, t: FiveTuple },
    Ack { node: usize, t: FiveTuple },
    End { node: usize, t: FiveTuple },
    Report { to: usize, from: usize, bytes: Vec<u8> },
}

/// Events by (time, insertion number).
#[derive(Default)]
struct Queue {
    map: BTreeMap<(u64, u64), Ev>,
    seq: u64,
}

impl Queue {
    fn push(&mut self, at: u64, e: Ev) {
        self.seq += 1;
        self.map.insert((at, self.seq), e);
    }
    /// The next event due at or before `now`.
    fn pop_due(&mut self, now: u64) -> Option<(u64, Ev)> {
        let entry = self.map.first_entry()?;
        if entry.key().0 > now {
            return None;
        }
        let at = entry.key().0;
        Some((at, entry.remove()))
    }
}

/// A new connection from a client to the server at `node`.
#[allow(clippy::too_many_arguments)]
fn open(cfg: &LimitSimConfig, now: u64, node: usize, sport: u32, rng: &mut ChaCha8Rng, nodes: &mut [Node], events: &mut Queue, rep: &mut LimitSimReport) {
    let client = if rng.random_bool(cfg.heavy_share.clamp(0.0, 1.0)) { 0 } else { rng.random_range(0..cfg.clients.max(1)) };
    let t = FiveTuple {
        src: client_addr(client),
        dst: IpAddr::V4(Ipv4Addr::new(198, 18, 128, 10)),
        proto: ip_proto::TCP,
        src_port: 1024 + (sport % 60000) as u16,
        dst_port: 80 + (sport / 60000) as u16,
    };
    match nodes[node].table.track(Timestamp(now), &t, &seg(SYN, 1000, 0), 60, || Admission { permit: true, rule: None }) {
        Ok(x) if x.created => {
            rep.admitted += 1;
            if !rng.random_bool(cfg.half_open.clamp(0.0, 1.0)) {
                let rtt = rng.random_range(MS / 2..5 * MS);
                events.push(now + rtt / 2, Ev::SynAck { node, t });
                events.push(now + rtt, Ev::Ack { node, t });
                let life = (-(1.0 - rng.random::<f64>()).ln() * cfg.mean_life_ms as f64 * MS as f64) as u64;
                events.push(now + rtt + life.max(MS), Ev::End { node, t });
            }
        }
        Ok(_) => {}
        Err(e) => *rep.refused.entry(e.as_str().to_string()).or_default() += 1,
    }
}

/// Client `i`'s address (client 0 is the heavy one).
fn client_addr(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0xc612_4000 + i))
}

fn seg(flags: u8, seq: u32, ack: u32) -> L4Info {
    L4Info::Tcp(TcpSeg { flags, seq, ack, window: 64240, payload_len: 0, wscale: None, sack_permitted: false })
}

fn pct(err: f64, truth: f64) -> f64 {
    if truth <= 0.0 {
        0.0
    } else {
        100.0 * err / truth
    }
}

/// Run one scenario.
pub fn run(cfg: &LimitSimConfig) -> LimitSimReport {
    let n = cfg.weights.len().max(1);
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let timeouts = Timeouts {
        tcp_syn: Duration::from_millis(cfg.syn_timeout_ms),
        tcp_closed: Duration::from_millis(1),
        ..Timeouts::default()
    };
    let capacity = 1 << 15;
    let members = dataplane::cluster::MemberSet::from_nodes(dataplane::types::Epoch(1), (0..n).map(|i| NodeId(i as u8)))
        .unwrap_or(dataplane::cluster::MemberSet::empty(dataplane::types::Epoch(1)));
    let mut nodes: Vec<Node> = (0..n)
        .map(|_| {
            let mut table = ConnTable::new(capacity, timeouts);
            table.set_limits(Some(Box::new(Limits::new(&cfg.limits, &[], capacity))));
            let ids = table.limits().map(|l| l.ids().to_vec()).unwrap_or_default();
            let mut estimator = Estimator::new(1);
            estimator.members(members);
            Node {
                table,
                estimator,
                ids,
                worker_phase: rng.random_range(0..REPORT_INTERVAL.0),
                control_phase: rng.random_range(0..REPORT_INTERVAL.0),
            }
        })
        .collect();
    let mut events = Queue::default();
    let total_w: u32 = cfg.weights.iter().sum::<u32>().max(1);
    let pick_node = |rng: &mut ChaCha8Rng| {
        let mut x = rng.random_range(0..total_w);
        for (i, &w) in cfg.weights.iter().enumerate() {
            if x < w {
                return i;
            }
            x -= w;
        }
        0
    };
    let mut sport = 0u32;
    let mut rep = LimitSimReport::default();
    let (mut err_sum, mut emb_err_sum, mut true_sum) = (0.0, 0.0, 0.0);
    let mut errs: Vec<f64> = Vec::new();
    let burst_end = cfg.burst.map(|(at, _, over, _)| at + over);
    let mut converged_at: Option<u64> = None;
    let per_ms = f64::from(cfg.rate) / 1000.0;
    for ms in 0..cfg.duration_ms {
        let now = ms * MS;
        // Events due by now.
        while let Some((at, ev)) = events.pop_due(now) {
            let ts = Timestamp(at);
            match ev {
                Ev::SynAck { node, t } => {
                    let _ = nodes[node].table.track(ts, &t.reversed(), &seg(SYN | ACK, 5000, 1001), 60, || false);
                }
                Ev::Ack { node, t } => {
                    let _ = nodes[node].table.track(ts, &t, &seg(ACK, 1001, 5001), 60, || false);
                }
                Ev::End { node, t } => {
                    let _ = nodes[node].table.track(ts, &t, &seg(RST | ACK, 1001, 5001), 60, || false);
                }
                Ev::Report { to, from, bytes } => {
                    if let Ok(r) = LimitReport::parse(&bytes) {
                        nodes[to].estimator.on_peer(ts, NodeId(from as u8), r.seq, r.classes().collect(), r.clients().collect());
                    }
                }
            }
        }
        // New connections: steady arrivals (Poisson by Bernoulli per
        // tenth of a ms), and the burst.
        let mut arrivals = Vec::new();
        for _ in 0..10 {
            if rng.random_bool((per_ms / 10.0).min(1.0)) {
                arrivals.push(pick_node(&mut rng));
            }
        }
        if let Some((at, count, over, node)) = cfg.burst {
            if ms >= at && ms < at + over.max(1) {
                let k = count / over.max(1) as u32 + u32::from(ms - at < u64::from(count % over.max(1) as u32));
                for _ in 0..k {
                    arrivals.push(node.unwrap_or_else(|| pick_node(&mut rng)));
                }
            }
        }
        for node in arrivals {
            sport = sport.wrapping_add(1);
            open(cfg, now, node, sport, &mut rng, &mut nodes, &mut events, &mut rep);
        }
        // Timers: expiry, the worker's report, the control lcore's round.
        for i in 0..n {
            nodes[i].table.expire(Timestamp(now), capacity / 8);
            let nd = &mut nodes[i];
            if now % REPORT_INTERVAL.0 / MS == nd.worker_phase / MS {
                if let Some(l) = nd.table.limits() {
                    nd.estimator.on_worker(0, l.report());
                }
            }
            if now % REPORT_INTERVAL.0 / MS == nd.control_phase / MS && nd.estimator.due(Timestamp(now)) {
                let bytes = nd.estimator.node_report();
                rep.reports_sent += 1;
                for to in (0..n).filter(|&t| t != i) {
                    if rng.random_bool(cfg.loss.clamp(0.0, 1.0)) {
                        rep.reports_lost += 1;
                        continue;
                    }
                    let lat = rng.random_range(cfg.latency_us.0..=cfg.latency_us.1.max(cfg.latency_us.0)) * 1000;
                    events.push(now + lat, Ev::Report { to, from: i, bytes: bytes.clone() });
                }
                let nd = &mut nodes[i];
                let remote = nd.estimator.remote_for(0, &nd.ids);
                if let Some(l) = nd.table.limits_mut() {
                    l.set_remote(&remote);
                }
            }
        }
        // Samples.
        let local: Vec<Count> = nodes.iter().map(|nd| nd.table.limits().and_then(|l| l.local().first().copied()).unwrap_or_default()).collect();
        let truth = local.iter().fold(Count::default(), |a, &b| a.add(b));
        rep.peak_true = rep.peak_true.max(truth.conns);
        rep.peak_true_embryonic = rep.peak_true_embryonic.max(truth.embryonic);
        let heavy = client_addr(0);
        let client = nodes.iter().fold(Count::default(), |a, nd| a.add(nd.table.limits().map(|l| l.client(0, heavy)).unwrap_or_default()));
        rep.peak_client = (rep.peak_client.0.max(client.conns), rep.peak_client.1.max(client.embryonic));
        if ms % 10 == 0 && ms >= cfg.sample_from_ms {
            let mut all_close = true;
            for (i, nd) in nodes.iter().enumerate() {
                let Some(l) = nd.table.limits() else { continue };
                let remote = l.classes().first().map(|c| c.remote).unwrap_or_default();
                let est = local[i].add(remote);
                let e = (f64::from(est.conns) - f64::from(truth.conns)).abs();
                let ee = (i64::from(est.embryonic) - i64::from(truth.embryonic)).unsigned_abs() as u32;
                let p = pct(e, f64::from(truth.conns));
                if p > 2.0 {
                    all_close = false;
                }
                errs.push(p);
                err_sum += p;
                emb_err_sum += f64::from(ee);
                rep.max_emb_err = rep.max_emb_err.max(ee);
                rep.samples += 1;
            }
            true_sum += f64::from(truth.conns);
            if let Some(end) = burst_end {
                if ms >= end && converged_at.is_none() && all_close {
                    converged_at = Some(ms - end);
                }
            }
        }
    }
    if rep.samples > 0 {
        rep.mean_err_pct = err_sum / rep.samples as f64;
        rep.mean_emb_err = emb_err_sum / rep.samples as f64;
        rep.mean_true = true_sum / (rep.samples as f64 / n as f64);
        errs.sort_by(|a, b| a.total_cmp(b));
        rep.p99_err_pct = errs.get(errs.len() * 99 / 100).copied().unwrap_or(0.0);
        rep.max_err_pct = errs.last().copied().unwrap_or(0.0);
    }
    rep.converge_ms = converged_at;
    rep
}
