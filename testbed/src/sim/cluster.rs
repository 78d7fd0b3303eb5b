//! Everything the simulator knows about the dataplane's cluster API, in one
//! place: building the node's cluster configuration, end-of-burst flush,
//! the cluster counters, flow roles, and the director of a tuple.
//!
//! Without a cluster (`cluster: false`) every node is an independent
//! single-node firewall: each flow a node holds counts as owned by it.

use super::net;
use dataplane::cluster::{flow_hash, DirectorTable, MemberSet};
use dataplane::pipeline::{Pipeline, PipelineConfig};
use dataplane::types::{Epoch, FiveTuple, NodeId, Timestamp};
use std::collections::BTreeMap;

/// Whether this dataplane has the cluster API.
pub const AVAILABLE: bool = false;

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
    pub random_seed: u64,
}

/// Add the cluster configuration (members, CCL interface, peers) to `cfg`.
pub fn configure(_cfg: &mut PipelineConfig, _p: &ClusterParams) -> Result<(), String> {
    Err("this dataplane has no cluster API yet (PipelineConfig::cluster)".into())
}

/// End of a burst: let the pipeline batch its CCL messages out.
pub fn flush(_p: &mut Pipeline, _now: Timestamp) {}

/// The node's cluster counters by name (None without a cluster).
pub fn counters(_p: &Pipeline) -> Option<BTreeMap<String, u64>> {
    None
}

/// Every flow the node holds, with its role.
pub fn roles(p: &Pipeline, node: usize, now: Timestamp) -> Vec<FlowRole> {
    p.conns(now, usize::MAX)
        .into_iter()
        .map(|c| FlowRole {
            tuple: c.tuple,
            role: Role::Owner,
            owner: Some(node),
        })
        .collect()
}

/// The director node of a tuple, as every member computes it: rendezvous
/// ranking of the symmetric flow hash over the static member set.
pub fn director(t: &FiveTuple, nodes: usize) -> Option<usize> {
    let set = MemberSet::from_nodes(Epoch(1), (0..nodes).map(|n| NodeId(n as u8))).ok()?;
    let table = DirectorTable::new(&set).ok()?;
    Some(table.director(flow_hash(t)).index())
}

/// Static neighbours for the node (the routers and CCL peers), when the
/// pipeline takes them; otherwise ARP does the work.
pub fn neighbors(_node: usize, _nodes: usize) -> Vec<(std::net::Ipv4Addr, [u8; 6])> {
    let _ = net::INSIDE_ROUTER_IP;
    Vec::new()
}

/// Counter names the invariants read.
pub mod names {
    pub const SYNACK_COOKIE_DECODED: &str = "synack_cookie_decoded";
    pub const OWNER_PACKETS: &str = "owner_packets";
    pub const FORWARDED_TO_OWNER: &str = "forwarded_to_owner";
    pub const DIRECTOR_QUERIES_SENT: &str = "director_queries_sent";
}
