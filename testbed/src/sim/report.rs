//! What a simulation run reports: per-node counters, the CCL, the hosts'
//! verdicts and the invariants, as one serialisable value.

use super::net::CclStats;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One node's share of the run.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NodeReport {
    pub node: usize,
    /// Frames given to `Pipeline::process`.
    pub packets: u64,
    /// Frames the node sent to the routers (towards hosts).
    pub host_tx: u64,
    pub ccl_tx: u64,
    pub ccl_rx: u64,
    /// `Verdict::Consumed` (the frame went into a CCL message).
    pub consumed: u64,
    /// Non-zero drop counters by reason.
    pub drops: BTreeMap<String, u64>,
    pub flows_created: u64,
    /// Frames each worker decided (its `packets` net of handoffs), in
    /// worker order (`SimConfig::workers`).
    pub worker_packets: Vec<u64>,
    /// The pipeline's cluster counters, by name (None without a cluster).
    pub cluster: Option<BTreeMap<String, u64>>,
    /// Wall-clock nanoseconds spent in `process`/`flush`/`poll_timers`
    /// (not deterministic; not part of the trace).
    pub cpu_ns: u64,
}

/// One address family's flows (`Report::ipv4`, `Report::ipv6`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FamilyCounts {
    /// TCP flows (reused tuples included) and those complete and verified.
    pub tcp_flows: usize,
    pub tcp_completed: usize,
    /// UDP and ICMP echo flows (fragmented ones included), and those
    /// complete and verified.
    pub udp_flows: usize,
    pub udp_completed: usize,
    /// Of `udp_flows`, ICMP (ICMPv6) echo flows.
    pub icmp_flows: usize,
    /// Frames delivered to the family's hosts.
    pub host_packets: u64,
}

impl FamilyCounts {
    pub fn flows(&self) -> usize {
        self.tcp_flows + self.udp_flows
    }
    pub fn completed(&self) -> usize {
        self.tcp_completed + self.udp_completed
    }
    /// Every flow of the family completed.
    pub fn all_completed(&self) -> bool {
        self.completed() == self.flows()
    }
}

/// One invariant's verdict.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Invariant {
    pub name: &'static str,
    /// `None`: not applicable to this run (skipped).
    pub ok: Option<bool>,
    pub detail: String,
}

/// The outcome of a run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    /// The scenario, as run.
    pub config: super::SimConfig,
    pub seed: u64,
    pub nodes: usize,
    pub cluster: bool,
    pub symmetric: bool,
    /// TCP flows, follow-up connections on reused tuples included.
    pub tcp_flows: usize,
    /// UDP and ICMP echo flows.
    pub udp_flows: usize,
    pub tcp_completed: usize,
    pub udp_completed: usize,
    /// The IPv4 and the IPv6 flows apart (`SimConfig::ipv6_share`).
    pub ipv4: FamilyCounts,
    pub ipv6: FamilyCounts,
    /// Neighbour discovery between the routers and the nodes.
    pub nd: super::NdStats,
    /// Flows whose two directions entered at different nodes.
    pub split_flows: usize,
    pub tcp_retransmissions: u64,
    pub udp_retransmissions: u64,
    pub sacks_sent: u64,
    /// Virtual time at the end of the run.
    pub virtual_ms: u64,
    /// Events processed.
    pub events: u64,
    /// Hash of every event, frame and verdict, in order: equal for equal
    /// seeds, bit for bit.
    pub trace_hash: String,
    pub per_node: Vec<NodeReport>,
    pub totals: NodeReport,
    pub ccl: CclStats,
    pub invariants: Vec<Invariant>,
    /// The first host failures and invariant violations, with the flow.
    pub failures: Vec<String>,
    /// Delivered host packets per wall-clock CPU microsecond of the nodes
    /// (for the cluster-tax benchmark).
    pub host_packets: u64,
    /// The three slowest completed flows and their retransmissions.
    pub slowest: Vec<String>,
    /// The fragmented flows (`super::frag`; zero without them).
    pub fragments: super::frag::FragReport,
    /// Every node's membership at the end (cluster scenarios; not part of
    /// the trace hash).
    pub membership: Option<super::membership::MembershipReport>,
    /// Fault scenarios: the episodes, their detection, takeover and
    /// convergence times (`super::faults`).
    pub faults: Option<super::faults::FaultReport>,
}

impl Report {
    /// Every applicable invariant holds.
    pub fn ok(&self) -> bool {
        self.invariants.iter().all(|i| i.ok != Some(false))
    }
    pub fn failed_invariants(&self) -> Vec<&'static str> {
        self.invariants
            .iter()
            .filter(|i| i.ok == Some(false))
            .map(|i| i.name)
            .collect()
    }
    pub fn invariant(&self, name: &str) -> Option<&Invariant> {
        self.invariants.iter().find(|i| i.name == name)
    }
    /// Sum of a cluster counter over the nodes.
    pub fn cluster_total(&self, name: &str) -> u64 {
        self.per_node
            .iter()
            .filter_map(|n| n.cluster.as_ref().and_then(|c| c.get(name)))
            .sum()
    }
    /// The whole report as JSON without the wall-clock fields: equal for
    /// two runs of one scenario, bit for bit.
    pub fn fingerprint(&self) -> String {
        let mut r = self.clone();
        r.totals.cpu_ns = 0;
        for n in &mut r.per_node {
            n.cpu_ns = 0;
        }
        serde_json::to_string(&r).unwrap_or_default()
    }
    /// A human summary: one line per node, the CCL, the invariants.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "seed {} nodes {} cluster {} symmetric {}: tcp {}/{} udp {}/{} complete (ipv6 {}/{}), {} split, {} events, {} ms virtual, trace {}",
            self.seed,
            self.nodes,
            self.cluster,
            self.symmetric,
            self.tcp_completed,
            self.tcp_flows,
            self.udp_completed,
            self.udp_flows,
            self.ipv6.completed(),
            self.ipv6.flows(),
            self.split_flows,
            self.events,
            self.virtual_ms,
            self.trace_hash
        );
        let (a, b) = (&self.ipv4, &self.ipv6);
        let _ = writeln!(
            s,
            "  ipv4: tcp {}/{} udp+icmp {}/{} ({} icmp), {} host frames; ipv6: tcp {}/{} udp+icmp {}/{} ({} icmp6), {} host frames; nd: routers solicited {} answered {}, nodes solicited {} answered {}, unexpected {}",
            a.tcp_completed,
            a.tcp_flows,
            a.udp_completed,
            a.udp_flows,
            a.icmp_flows,
            a.host_packets,
            b.tcp_completed,
            b.tcp_flows,
            b.udp_completed,
            b.udp_flows,
            b.icmp_flows,
            b.host_packets,
            self.nd.router_solicitations,
            self.nd.node_advertisements,
            self.nd.node_solicitations,
            self.nd.router_advertisements,
            self.nd.unexpected
        );
        let f = &self.fragments;
        if f.flows > 0 {
            let _ = writeln!(
                s,
                "  fragments: {} flows, {} datagrams ({} IPv6) in {} fragments sent, {} spread over nodes, {} fragments delivered, {} datagrams reassembled ({} IPv6), {} bad, {} in pieces at the end",
                f.flows,
                f.datagrams_sent,
                f.ipv6_datagrams_sent,
                f.fragments_sent,
                f.datagrams_spread,
                f.fragments_delivered,
                f.datagrams_reassembled,
                f.ipv6_datagrams_reassembled,
                f.bad_fragments,
                f.partial_at_end
            );
        }
        for n in self.per_node.iter().chain(std::iter::once(&self.totals)) {
            let name = if n.node == usize::MAX {
                "total".to_string()
            } else {
                format!("node{}", n.node)
            };
            let _ = writeln!(
                s,
                "  {name:>6}: packets {} host-tx {} ccl-tx {} ccl-rx {} consumed {} flows {}",
                n.packets, n.host_tx, n.ccl_tx, n.ccl_rx, n.consumed, n.flows_created
            );
            if let Some(c) = &n.cluster {
                let g = |k: &str| c.get(k).copied().unwrap_or(0);
                let _ = writeln!(
                    s,
                    "          owner-packets {} forwarded-to-owner {} forwarded-received {} cookie-synacks {} director-queries {} relays {} elections {} pending-drops {} records {}",
                    g("owner_packets"),
                    g("forwarded_to_owner"),
                    g("forwarded_received"),
                    g("synack_cookie_decoded"),
                    g("director_queries_sent"),
                    g("relays_sent"),
                    g("elections"),
                    g("pending_timeouts") + g("pending_no_owner") + g("pending_release_drops"),
                    g("records"),
                );
                let kinds: Vec<String> = c
                    .iter()
                    .filter(|(k, v)| {
                        k.starts_with("ccl_tx_") && k.as_str() != "ccl_tx_bytes" && **v > 0
                    })
                    .map(|(k, v)| format!("{} {v}", &k["ccl_tx_".len()..]))
                    .collect();
                if !kinds.is_empty() {
                    let _ = writeln!(s, "          ccl tx: {}", kinds.join(", "));
                }
                let drops: Vec<String> = c
                    .iter()
                    .filter(|(k, v)| k.starts_with("ccl_drop_") && **v > 0)
                    .map(|(k, v)| format!("{} {v}", &k["ccl_drop_".len()..]))
                    .collect();
                if !drops.is_empty() {
                    let _ = writeln!(s, "          ccl drops: {}", drops.join(", "));
                }
            }
            if !n.drops.is_empty() {
                let d: Vec<String> = n.drops.iter().map(|(k, v)| format!("{k} {v}")).collect();
                let _ = writeln!(s, "          drops: {}", d.join(", "));
            }
        }
        let c = &self.ccl;
        let _ = writeln!(
            s,
            "  ccl segment: frames {} bytes {} broadcasts {} delivered {} lost {} {:?} reordered {} unknown-dst {}",
            c.frames, c.bytes, c.broadcasts, c.delivered, c.lost, c.lost_by_kind, c.reordered, c.unknown_dst
        );
        if c.cut > 0 {
            let _ = writeln!(s, "  ccl cut: {} frame copies", c.cut);
        }
        if let Some(m) = &self.membership {
            let l = &m.link;
            // Never heard counts as the oldest.
            let oldest = m
                .per_node
                .iter()
                .flat_map(|n| n.peers.iter().filter(|p| !p.this_node))
                .map(|p| p.last_heard_ms.unwrap_or(u64::MAX))
                .max()
                .map(|a| if a == u64::MAX { "never".to_string() } else { format!("{a} ms") });
            let _ = writeln!(
                s,
                "  membership: control frames {} (heartbeats {}) copies {} delivered {} lost {} cut {}; oldest last-heard {}",
                l.frames,
                l.heartbeats,
                l.copies,
                l.delivered,
                l.lost,
                l.cut,
                oldest.unwrap_or_else(|| "-".into())
            );
            let _ = writeln!(s, "  membership: {}", m.states());
        }
        if let Some(f) = &self.faults {
            let _ = writeln!(
                s,
                "  faults: {} takeovers seen ({} of IPv6 frames: {} IPv6 flows taken over, {} of them completed), owners on two sides {} checks; lost at a down link {}, at a dead/frozen node {}, no next hop {}, CCL partitioned {}",
                f.takeovers, f.takeovers_ipv6, f.ipv6_flows_taken_over, f.ipv6_flows_taken_over_completed, f.split_owned_checks, f.lost_at_link, f.lost_at_node, f.no_next_hop, f.ccl_partitioned
            );
            let (med, worst) = f.stall_median_worst();
            let _ = writeln!(s, "  faults: longest stall per TCP flow: median {med:.0} ms, worst {worst:.0} ms ({:?})", f.worst_stall);
            for l in f.lines() {
                let _ = writeln!(s, "  episode: {l}");
            }
        }
        let _ = writeln!(
            s,
            "  hosts: tcp retransmissions {} udp retries {} SACKs {}",
            self.tcp_retransmissions, self.udp_retransmissions, self.sacks_sent
        );
        for i in &self.invariants {
            let v = match i.ok {
                Some(true) => "ok",
                Some(false) => "FAIL",
                None => "skip",
            };
            let _ = writeln!(s, "  [{v:>4}] {}: {}", i.name, i.detail);
        }
        for f in &self.slowest {
            let _ = writeln!(s, "  slow: {f}");
        }
        for f in &self.failures {
            let _ = writeln!(s, "  ! {f}");
        }
        s
    }
}
