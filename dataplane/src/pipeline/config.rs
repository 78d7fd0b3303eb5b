//! What a pipeline is built from (`PipelineConfig`) and the checks
//! `Pipeline::new` runs on it once, before reserving any memory: every
//! configuration error is found here, so nothing on the packet path has to
//! handle a bad configuration.

use super::cluster::{ClusterSpec, ClusterSpecError};
use super::iface::{Iface, Interfaces, ReversePath};
use super::ipv4::martian_source;
use crate::acl::{Acl, AclRule, RulePrefix};
use crate::conntrack::Timeouts;
use crate::frag::ReasmConfigError;
use crate::route::{contains, IfIndex, RouteError, RouteTable};
use crate::types::{Duration, PortId};
use crate::wire::ethernet;
use std::net::Ipv4Addr;

/// One configured interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceSpec {
    pub name: String,
    pub port: PortId,
    pub mac: [u8; 6],
    pub addr: Ipv4Addr,
    pub prefix_len: u8,
    pub security_level: u8,
    pub vlan: Option<u16>,
    /// The link's MTU: the largest IPv4 datagram it carries, `MIN_MTU` to
    /// `MAX_MTU` (`DEFAULT_MTU` on Ethernet).
    pub mtu: u16,
    /// Anti-spoofing of what it receives.
    pub reverse_path: ReversePath,
}

/// The Ethernet MTU (RFC 894).
pub const DEFAULT_MTU: u16 = 1500;
/// The smallest MTU an interface may have: every IPv4 host must accept a
/// 576-byte datagram (RFC 791, RFC 1122 §3.3.3), so no link below it.
pub const MIN_MTU: u16 = 576;
/// The largest MTU an interface may have (jumbo frames).
pub const MAX_MTU: u16 = 9216;

/// A static route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteSpec {
    pub destination: Ipv4Addr,
    pub prefix_len: u8,
    pub via: Ipv4Addr,
}

/// An access rule as configured (`interface` by name, `None` = any).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleSpec {
    pub name: String,
    pub permit: bool,
    pub interface: Option<String>,
    pub protocol: Option<u8>,
    /// An IPv4 or IPv6 prefix (an IPv4 one matches only IPv4 packets, an
    /// IPv6 one only IPv6 packets), `None` for any address of both; the
    /// source and destination of one rule are of one family.
    pub src: RulePrefix,
    pub dst: RulePrefix,
    pub src_ports: (u16, u16),
    pub dst_ports: (u16, u16),
}

#[derive(Clone, Debug)]
pub struct PipelineConfig {
    pub interfaces: Vec<InterfaceSpec>,
    pub routes: Vec<RouteSpec>,
    pub rules: Vec<RuleSpec>,
    pub timeouts: Timeouts,
    pub flow_capacity: usize,
    pub arp_capacity: usize,
    pub arp_timeout: Duration,
    pub arp_retry: Duration,
    /// Static neighbour entries (IPv4 → MAC), consulted before the ARP
    /// cache and never aged: next hops on links without ARP (pcap vdevs in
    /// benches) and CCL peers with fixed MACs.
    pub static_neighbors: Vec<(Ipv4Addr, [u8; 6])>,
    /// Cluster membership of this node; `None` runs the single-node
    /// pipeline (docs/cluster-design.md).
    pub cluster: Option<ClusterSpec>,
    /// The ICMP errors this node sends (rate, administratively
    /// prohibited).
    pub icmp_errors: super::icmperr::IcmpErrorConfig,
}

/// Configuration errors, found once by `Pipeline::new`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    #[error("no interfaces configured")]
    NoInterfaces,
    #[error("too many interfaces ({0}; at most 65535)")]
    TooManyInterfaces(usize),
    #[error("interface name {0:?} used twice")]
    DuplicateName(String),
    #[error("interface {name}: prefix length {prefix_len} is above 32")]
    BadPrefixLen { name: String, prefix_len: u8 },
    #[error("interface {name}: address {addr} is not a unicast host address")]
    BadAddress { name: String, addr: Ipv4Addr },
    #[error("interface {name}: VLAN {vlan} is outside 1-4094")]
    BadVlan { name: String, vlan: u16 },
    #[error("interface {name}: MTU {mtu} is outside {MIN_MTU}-{MAX_MTU}")]
    BadMtu { name: String, mtu: u16 },
    #[error("interfaces {a} and {b} share port and VLAN")]
    DuplicatePortVlan { a: String, b: String },
    #[error("interfaces {a} and {b} have overlapping subnets")]
    OverlappingSubnets { a: String, b: String },
    #[error("route {destination}/{prefix_len}: next hop {via} is one of our addresses")]
    NextHopIsLocal { destination: Ipv4Addr, prefix_len: u8, via: Ipv4Addr },
    #[error("{0}")]
    Route(RouteError),
    #[error("access rule {rule}: unknown interface {interface:?}")]
    UnknownRuleInterface { rule: String, interface: String },
    #[error("access rule {rule}: bad prefix length, source and destination of two address families, or port range (low above high)")]
    BadRule { rule: String },
    #[error("{0} must be above zero")]
    ZeroCapacity(&'static str),
    #[error("{0}")]
    Cluster(ClusterSpecError),
    #[error("{0}")]
    Fragments(ReasmConfigError),
    #[error("worker {me} of {count}: needs 0 <= worker < count (a cluster node: count <= 32, one CCL channel each)")]
    Workers { me: u16, count: u16 },
}

impl std::error::Error for RouteError {}

/// The checked, built pieces of a configuration.
pub(super) struct Built {
    pub ifaces: Interfaces,
    pub routes: RouteTable,
    pub acl: Acl,
    pub max_port: usize,
}

/// Check `cfg` (everything but the cluster and fragment settings, which
/// their stages check) and build the interface, route and rule tables.
pub(super) fn build(cfg: &PipelineConfig) -> Result<Built, PipelineError> {
    if cfg.interfaces.is_empty() {
        return Err(PipelineError::NoInterfaces);
    }
    if cfg.interfaces.len() > usize::from(u16::MAX) {
        return Err(PipelineError::TooManyInterfaces(cfg.interfaces.len()));
    }
    if cfg.flow_capacity == 0 {
        return Err(PipelineError::ZeroCapacity("flow-table capacity"));
    }
    if cfg.arp_capacity == 0 {
        return Err(PipelineError::ZeroCapacity("arp capacity"));
    }
    let specs = &cfg.interfaces;
    for (i, s) in specs.iter().enumerate() {
        if s.prefix_len > 32 {
            return Err(PipelineError::BadPrefixLen { name: s.name.clone(), prefix_len: s.prefix_len });
        }
        if martian_source(s.addr) {
            return Err(PipelineError::BadAddress { name: s.name.clone(), addr: s.addr });
        }
        if !(MIN_MTU..=MAX_MTU).contains(&s.mtu) {
            return Err(PipelineError::BadMtu { name: s.name.clone(), mtu: s.mtu });
        }
        if let Some(v) = s.vlan {
            if v == 0 || v > ethernet::VLAN_ID_MAX {
                return Err(PipelineError::BadVlan { name: s.name.clone(), vlan: v });
            }
        }
        for t in &specs[..i] {
            if t.name == s.name {
                return Err(PipelineError::DuplicateName(s.name.clone()));
            }
            if t.port == s.port && t.vlan == s.vlan {
                return Err(PipelineError::DuplicatePortVlan { a: t.name.clone(), b: s.name.clone() });
            }
            let p = s.prefix_len.min(t.prefix_len);
            if contains(s.addr, p, t.addr) {
                return Err(PipelineError::OverlappingSubnets { a: t.name.clone(), b: s.name.clone() });
            }
        }
    }
    let connected: Vec<(Ipv4Addr, u8)> = specs.iter().map(|s| (s.addr, s.prefix_len)).collect();
    for r in &cfg.routes {
        if specs.iter().any(|s| s.addr == r.via) {
            return Err(PipelineError::NextHopIsLocal {
                destination: r.destination,
                prefix_len: r.prefix_len,
                via: r.via,
            });
        }
    }
    let statics: Vec<_> = cfg.routes.iter().map(|r| (r.destination, r.prefix_len, r.via)).collect();
    let routes = RouteTable::new(&connected, &statics).map_err(PipelineError::Route)?;

    let policy = Policy::build(specs, &cfg.rules, cfg.timeouts)?;
    let max_port = specs.iter().map(|s| usize::from(s.port.0)).max().unwrap_or(0);
    let list = specs
        .iter()
        .map(|s| Iface {
            port: s.port,
            mac: s.mac,
            addr: s.addr,
            prefix_len: s.prefix_len,
            vlan: s.vlan,
            mtu: s.mtu,
            reverse_path: s.reverse_path,
        })
        .collect();
    let ifaces = Interfaces::new(list, specs.iter().map(|s| s.name.clone()).collect(), max_port);
    Ok(Built { ifaces, routes, acl: policy.acl, max_port })
}

/// What a running pipeline can replace (`Pipeline::set_policy`): the
/// access rules compiled against the interfaces with their security
/// levels, and the idle timeouts. Built aside (off the worker: it
/// allocates) and swapped in between bursts (SPEC N9's transactional
/// commit: the packet path sees the old policy or the new one, whole).
pub struct Policy {
    pub(super) acl: Acl,
    pub(super) timeouts: Timeouts,
    /// How many interfaces the rules were resolved against.
    pub(super) interfaces: usize,
    /// New NAT rules over the running pools (`with_nat`), swapped in with
    /// the access rules (N9).
    pub(super) nat: Option<std::sync::Arc<super::NatPlan>>,
    /// Connection limits over these rules (`with_limits`; `None`: the
    /// running ones stay). Built here, on the caller's thread: the worker
    /// only swaps them in.
    pub(super) limits: Option<Option<Box<crate::conntrack::Limits>>>,
}

impl Policy {
    /// Resolve `rules` against the interfaces `specs` (their names and security
    /// levels, in the pipeline's interface order) with the same checks as
    /// `Pipeline::new`.
    pub fn build(specs: &[InterfaceSpec], rules: &[RuleSpec], timeouts: Timeouts) -> Result<Policy, PipelineError> {
        let mut acl_rules = Vec::with_capacity(rules.len());
        for r in rules {
            let iface = match &r.interface {
                None => None,
                Some(n) => Some(IfIndex(specs.iter().position(|s| &s.name == n).ok_or_else(|| {
                    PipelineError::UnknownRuleInterface { rule: r.name.clone(), interface: n.clone() }
                })? as u16)),
            };
            let too_long = |p: RulePrefix| p.is_some_and(|(a, len)| len > if a.is_ipv6() { 128 } else { 32 });
            let mixed = matches!((r.src, r.dst), (Some((s, _)), Some((d, _))) if s.is_ipv6() != d.is_ipv6());
            if too_long(r.src) || too_long(r.dst) || mixed || r.src_ports.0 > r.src_ports.1 || r.dst_ports.0 > r.dst_ports.1 {
                return Err(PipelineError::BadRule { rule: r.name.clone() });
            }
            acl_rules.push(AclRule {
                name: r.name.clone(),
                permit: r.permit,
                iface,
                protocol: r.protocol,
                src: r.src,
                dst: r.dst,
                src_ports: r.src_ports,
                dst_ports: r.dst_ports,
            });
        }
        let acl = Acl::new(acl_rules, specs.iter().map(|s| s.security_level).collect());
        Ok(Policy { acl, timeouts, interfaces: specs.len(), nat: None, limits: None })
    }

    /// The NAT rules of `plan` go in with this policy (`set_policy`): the
    /// plan must keep the running pools (`NatPlan::same_pools`).
    pub fn with_nat(mut self, plan: std::sync::Arc<super::NatPlan>) -> Policy {
        self.nat = Some(plan);
        self
    }

    /// Connection limits `spec` go in with this policy (`set_policy`),
    /// over its access rules, with room for `max_clients` per-client
    /// counts (the flow table's capacity). An empty spec removes the
    /// running limits.
    pub fn with_limits(mut self, spec: &crate::conntrack::LimitSpec, max_clients: usize) -> Policy {
        self.limits = Some(
            (!spec.is_empty())
                .then(|| Box::new(crate::conntrack::Limits::new(spec, &self.acl.rule_names(), max_clients))),
        );
        self
    }

    /// The NAT plan this policy carries (`with_nat`; after `set_policy`
    /// returned it: the replaced one).
    pub fn nat_plan(&self) -> Option<std::sync::Arc<super::NatPlan>> {
        self.nat.clone()
    }
}

/// The longest frame any interface of `cfg` sends or receives: its MTU,
/// an Ethernet header and one VLAN tag (QinQ frames are dropped).
pub(super) fn max_frame(cfg: &PipelineConfig) -> usize {
    let mtu = cfg.interfaces.iter().map(|s| s.mtu).max().unwrap_or(DEFAULT_MTU);
    usize::from(mtu) + ethernet::HEADER_LEN + ethernet::TAG_LEN
}

/// The CCL interface of a cluster spec: `(index, port, mac, address)`.
pub(super) fn ccl_iface(
    cfg: &PipelineConfig,
    spec: &ClusterSpec,
) -> Result<(IfIndex, PortId, [u8; 6], Ipv4Addr), PipelineError> {
    let (i, s) = cfg
        .interfaces
        .iter()
        .enumerate()
        .find(|(_, s)| s.name == spec.ccl_iface)
        .ok_or_else(|| PipelineError::Cluster(ClusterSpecError::UnknownCclIface(spec.ccl_iface.clone())))?;
    if s.vlan.is_some() {
        return Err(PipelineError::Cluster(ClusterSpecError::TaggedCclIface(spec.ccl_iface.clone())));
    }
    Ok((IfIndex(i as u16), s.port, s.mac, s.addr))
}
