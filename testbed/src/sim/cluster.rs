//! Everything the simulator knows about the dataplane's cluster API, in one
//! place: building the node's cluster configuration, end-of-burst flush,
//! the cluster counters, flow roles, and the director of a tuple; and the
//! node's membership machine and control-channel link (`super::membership`
//! drives them).
//!
//! Without a cluster (`cluster: false`) every node is an independent
//! single-node firewall: each flow a node holds counts as owned by it.

use super::net;
use controlplane::membership::{self, ControlLink, Membership, NodeConfig};
use dataplane::ccl::{CclKey, FramePath, Placement};
use dataplane::cluster::{flow_hash, DirectorTable, MemberSet};
use dataplane::stats::flatten;
use dataplane::pipeline::ClusterSpec;
use dataplane::pipeline::{Pipeline, PipelineConfig};
use dataplane::types::{Duration, Epoch, FiveTuple, NodeId, Timestamp};
use std::collections::BTreeMap;

/// Whether this dataplane has the cluster API.
pub const AVAILABLE: bool = true;

/// Cluster name and key every simulated node shares.
pub const CLUSTER_NAME: &str = "sim";
pub const CLUSTER_KEY: &str = "clusterfw-sim shared key";

/// A node's role for one flow, as the node reports it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum Role {
    Owner,
    Director,
    Backup,
    Forwarder,
    Other,
}

/// One flow as a node reports it.
#[derive(Clone, Debug)]
pub struct FlowRole {
    pub tuple: FiveTuple,
    pub role: Role,
    /// The owner the node believes in (for the owner: itself).
    pub owner: Option<usize>,
}

/// What the cluster part of a node's configuration needs.
#[derive(Clone, Debug)]
pub struct ClusterParams {
    pub node: usize,
    pub nodes: usize,
    pub seq_randomization: bool,
    pub backups: u8,
    /// Director localization (R12).
    pub localization: bool,
    pub random_seed: u64,
    /// Membership-driven (fault scenarios): the pipeline starts as the
    /// node's does — a member set of itself at epoch 0, fenced (lease 0)
    /// — and follows its membership machine's orders. Otherwise the static
    /// set of every node and no fence.
    pub driven: bool,
}

/// The static member set of an `nodes`-node cluster (ids 0..nodes).
pub fn members(nodes: usize) -> Result<MemberSet, String> {
    MemberSet::from_nodes(Epoch(1), (0..nodes).map(|n| NodeId(n as u8))).map_err(|e| e.to_string())
}

/// The CCL incarnation of node `n` after `restarts` restarts: distinct
/// per node, strictly growing across restarts (replay protection).
pub fn incarnation(n: usize, restarts: u32) -> u32 {
    1000 + n as u32 + 100 * restarts
}

/// Node `node`'s membership machine: every node configured (equal
/// priority: the lowest id is the control node), the test bed's timers
/// (100 ms interval, 300 ms hold time), the node's first incarnation; the
/// contract's defaults otherwise. It starts joining: the member set forms
/// over the CCL (election, admissions, a new epoch each).
pub fn membership(node: usize, nodes: usize, quorum: bool, place: Placement) -> Result<Membership, String> {
    membership_with(node, nodes, incarnation(node, 0), quorum, place)
}

/// `membership` with the incarnation of a restarted node.
pub fn membership_with(
    node: usize,
    nodes: usize,
    incarnation: u32,
    quorum: bool,
    place: Placement,
) -> Result<Membership, String> {
    let configured = (0..nodes)
        .map(|n| NodeConfig {
            id: NodeId(n as u8),
            name: format!("node{n}"),
            ccl_address: net::node_addr(n, net::CCL),
        })
        .collect();
    Membership::new(membership::Config {
        heartbeat_interval: Duration::from_millis(super::membership::HEARTBEAT_INTERVAL_MS),
        hold_time: Duration::from_millis(super::membership::HOLD_TIME_MS),
        split_brain: if quorum { membership::SplitBrain::Quorum } else { membership::SplitBrain::Elect },
        place,
        ..membership::Config::new(NodeId(node as u8), incarnation, configured)
    })
    .map_err(|e| format!("node{node}: membership: {e}"))
}

/// Node `node`'s control-channel link: the cluster key, its incarnation,
/// broadcasts from its CCL MAC and address to the CCL subnet's broadcast.
pub fn control_link(node: usize) -> Result<ControlLink, String> {
    control_link_with(node, incarnation(node, 0))
}

/// `control_link` with the incarnation of a restarted node.
pub fn control_link_with(node: usize, incarnation: u32) -> Result<ControlLink, String> {
    let key = CclKey::new(CLUSTER_NAME, CLUSTER_KEY).map_err(|e| e.to_string())?;
    let broadcast = FramePath {
        src_mac: net::node_mac(node, net::CCL),
        dst_mac: [0xff; 6],
        src_ip: net::node_addr(node, net::CCL),
        dst_ip: net::CCL_BROADCAST,
    };
    ControlLink::new(&key, NodeId(node as u8), incarnation, broadcast)
        .map_err(|e| format!("node{node}: control link: {e}"))
}

/// Add the cluster configuration (members, CCL interface, peers) to `cfg`.
pub fn configure(cfg: &mut PipelineConfig, p: &ClusterParams) -> Result<(), String> {
    cfg.cluster = Some(ClusterSpec {
        node: NodeId(p.node as u8),
        members: if p.driven {
            MemberSet::from_nodes(Epoch(0), [NodeId(p.node as u8)]).map_err(|e| e.to_string())?
        } else {
            members(p.nodes)?
        },
        cluster_name: CLUSTER_NAME.into(),
        key: CLUSTER_KEY.into(),
        incarnation: incarnation(p.node, 0),
        seq_randomization: p.seq_randomization,
        ccl_iface: "ccl".into(),
        peers: (0..p.nodes)
            .filter(|&m| m != p.node)
            .map(|m| (NodeId(m as u8), net::node_addr(m, net::CCL)))
            .collect(),
        random_seed: p.random_seed,
        lease: if p.driven { dataplane::Timestamp::ZERO } else { dataplane::Timestamp::MAX },
        backups: p.backups,
        syn_guard: dataplane::pipeline::DEFAULT_SYN_GUARD,
        director_hold: dataplane::pipeline::DEFAULT_DIRECTOR_HOLD,
        director_localization: p.localization,
        site_redundancy: false,
    });
    Ok(())
}

/// End of a burst: let the pipeline batch its CCL messages out.
pub fn flush(p: &mut Pipeline, now: Timestamp) {
    p.flush(now);
}

/// The node's cluster counters by name (None without a cluster): the
/// `ClusterCounters` fields, `ccl_rx_<kind>` / `ccl_tx_<kind>` per CCL
/// message kind, `ccl_drop_<reason>` when non-zero, CCL bytes.
pub fn counters(p: &Pipeline) -> Option<BTreeMap<String, u64>> {
    let snap = p.cluster_counters()?;
    // The cluster counters under their own names, the CCL's under the
    // report's (`ccl_rx_<kind>`, `ccl_tx_<kind>`, `ccl_drop_<reason>` when
    // non-zero, `ccl_rx_bytes`).
    let mut m = BTreeMap::new();
    for (k, v) in flatten(&snap.counters) {
        m.insert(k, v);
    }
    for (k, v) in flatten(&snap.ccl) {
        let name = match k.split_once('.') {
            Some(("rx", kind)) => format!("ccl_rx_{kind}"),
            Some(("tx", kind)) => format!("ccl_tx_{kind}"),
            Some(("drops", _)) if v == 0 => continue,
            Some(("drops", reason)) => format!("ccl_drop_{reason}"),
            _ => format!("ccl_{k}"),
        };
        m.insert(name, v);
    }
    Some(m)
}

/// A node's cluster counters: its workers' summed (`counters`).
pub fn counters_of(workers: &[Pipeline]) -> Option<BTreeMap<String, u64>> {
    let mut sum: Option<BTreeMap<String, u64>> = None;
    for m in workers.iter().filter_map(counters) {
        let s = sum.get_or_insert_with(BTreeMap::new);
        for (k, v) in m {
            *s.entry(k).or_insert(0) += v;
        }
    }
    sum
}

/// Every flow the node holds, with its role. Single-node pipelines report
/// no roles: their flows count as owned by the node.
pub fn roles(p: &Pipeline, node: usize, now: Timestamp) -> Vec<FlowRole> {
    p.conns(now, usize::MAX)
        .into_iter()
        .map(|c| {
            let role = match c.role {
                None | Some("owner") => Role::Owner,
                Some("director") => Role::Director,
                Some("backup") => Role::Backup,
                Some("forwarder") => Role::Forwarder,
                Some(_) => Role::Other,
            };
            let owner = match c.owner {
                Some(o) => Some(o.index()),
                None => Some(node),
            };
            FlowRole {
                tuple: c.tuple,
                role,
                owner,
            }
        })
        .collect()
}

/// Whether the node owns the connection of `t` (either direction): it holds
/// the conntrack flow. In cluster mode only the owner does
/// (`Pipeline::cluster_role` says `Owner` exactly then); a single-node
/// pipeline owns every flow it tracks. A cheap lookup, for checkpoints.
pub fn is_owner(p: &Pipeline, t: &FiveTuple) -> bool {
    p.conntrack().lookup(t).is_some()
}

/// The node's role for the connection of `t` and the owner it names
/// (`Pipeline::cluster_role`; a single-node pipeline owns what it tracks).
pub fn role_at(p: &Pipeline, node: usize, t: &FiveTuple, now: Timestamp) -> Option<(Role, usize)> {
    use dataplane::pipeline::Role as R;
    match p.cluster_role(now, t) {
        Some((r, o)) => {
            let role = match r {
                R::Owner => Role::Owner,
                R::Director => Role::Director,
                R::Backup => Role::Backup,
                R::Forwarder => Role::Forwarder,
            };
            Some((role, o.index()))
        }
        None => is_owner(p, t).then_some((Role::Owner, node)),
    }
}

/// The director node of a tuple, as every member computes it: rendezvous
/// ranking of the symmetric flow hash over the static member set.
pub fn director(t: &FiveTuple, nodes: usize) -> Option<usize> {
    let set = members(nodes).ok()?;
    let table = DirectorTable::new(&set).ok()?;
    Some(table.director(flow_hash(t)).index())
}

/// The director of a tuple under member set `set` (`None`: an empty set).
pub fn director_in(t: &FiveTuple, set: &MemberSet) -> Option<usize> {
    let table = DirectorTable::new(set).ok()?;
    Some(table.director(flow_hash(t)).index())
}

/// Counter names the invariants read.
pub mod names {
    pub const SYNACK_COOKIE_DECODED: &str = "synack_cookie_decoded";
    pub const OWNER_PACKETS: &str = "owner_packets";
    pub const FORWARDED_TO_OWNER: &str = "forwarded_to_owner";
    pub const DIRECTOR_QUERIES_SENT: &str = "director_queries_sent";
}
