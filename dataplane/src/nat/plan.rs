//! A node's NAT configuration as its workers share it (SPEC N1–N6; issue
//! 13; docs/nat.md): the compiled rules, each PAT pool's block map dealt
//! over the node's workers and each dynamic-NAT address's worker — built
//! once, read-only, held by every worker's NAT stage
//! (`pipeline::Pipeline::set_nat_plan`) and by the driver's steering
//! (`steer::steer_nat`), which asks it where a datagram to a mapped
//! address is decided ([`NatPlan::inbound`]).
//!
//! Invariants (`dataplane/tests/nat_workers.rs`): every block and every
//! dynamic-NAT address has exactly one worker below the plan's count;
//! `inbound` answers for a mapped endpoint the worker that allocates it,
//! or for a static rule's mapped address the real endpoint the stage
//! translates it to (the same `static_real`); it never allocates and
//! never panics on any input.

use crate::cluster::MemberSet;
use crate::nat::{BlockError, BlockMap, Geometry, Holder, PortClass, RuleKind, RuleSpec, RuleTable};
use crate::route::IfIndex;
use crate::types::{Duration, Epoch, NodeId, WorkerId};
use std::net::Ipv4Addr;
use std::sync::Arc;

/// The NAT configuration of a pipeline (`Pipeline::set_nat`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatSpec {
    /// In order; `pool` indexes `pools`.
    pub rules: Vec<RuleSpec>,
    pub pools: Vec<PoolSpec>,
    /// Most xlates at once.
    pub xlate_capacity: usize,
    /// Multi-session xlates idle this long with no connection are reaped.
    pub xlate_timeout: Duration,
    /// Port block allocation: most inside hosts holding blocks at once.
    pub host_capacity: usize,
}

/// One pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSpec {
    pub addresses: Vec<Ipv4Addr>,
    /// `Some`: a PAT pool; `None`: dynamic NAT (whole addresses).
    pub pat: Option<PatSpec>,
}

/// A PAT pool's block settings.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PatSpec {
    pub block_size: u16,
    pub reserved_ports: bool,
    pub max_per_host: Option<u16>,
}

/// Why a NAT configuration cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NatSpecError {
    #[error("pool {0}: {1}")]
    Pool(usize, BlockError),
    #[error("rule {0} names pool {1}, which does not exist")]
    NoPool(usize, u16),
    #[error("address {0} is in two pools")]
    SharedAddress(Ipv4Addr),
    #[error("a NAT plan for {plan_workers} worker(s) and {plan_ifaces} interface(s) given to worker {me} of {workers} with {ifaces} interface(s)")]
    PlanMismatch { plan_workers: u16, plan_ifaces: usize, me: u16, workers: u16, ifaces: usize },
}

/// One pool in the plan.
#[derive(Clone)]
pub(crate) enum PlanPool {
    /// Its block map dealt over the node's workers.
    Pat { map: BlockMap, pat: PatSpec },
    /// Dynamic NAT: its addresses, each with its worker.
    Nat { addresses: Vec<(Ipv4Addr, WorkerId)> },
}

/// What every worker of a node shares of a NAT configuration, read-only
/// (module essay, several workers): built once, handed to each worker's
/// pipeline (`Pipeline::set_nat_plan`) and to the driver's steering
/// (`steer::steer_nat`).
#[derive(Clone)]
pub struct NatPlan {
    pub(crate) rules: RuleTable,
    pub(crate) pools: Vec<PlanPool>,
    /// Every pool address, ascending, with its pool and its index there.
    pub(crate) addrs: Vec<(Ipv4Addr, u16, u32)>,
    pub(crate) workers: u16,
    /// This node (`NodeId(0)` alone) and whether the blocks are dealt
    /// over a cluster's members.
    pub(crate) me: NodeId,
    pub(crate) cluster: bool,
    /// A cluster's configured nodes (`for_cluster`).
    nodes: Option<MemberSet>,
    pub(crate) ifaces: usize,
    pub(crate) xlate_capacity: usize,
    pub(crate) xlate_timeout: Duration,
    pub(crate) host_capacity: usize,
    /// The pools as configured (`same_pools`).
    pool_specs: Vec<PoolSpec>,
    /// Per pool, the PAT map as dealt over the configured nodes (the
    /// single node's, or `for_cluster`'s): `for_members` starts from it.
    dealt: Vec<Option<BlockMap>>,
    /// Per interface: a rule's mapped side is there (its mapped interface,
    /// or any): traffic to mapped addresses can arrive on it.
    mapped_side: Vec<bool>,
}

/// Where inbound traffic to a mapped address is decided (`NatPlan::inbound`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NatInbound {
    /// By this worker: it holds the block or the address (and so the
    /// xlate, if there is one).
    Worker(WorkerId),
    /// By the worker of the datagram once translated to this real address
    /// (and port, for static PAT): a static rule's.
    Real(Ipv4Addr, Option<u16>),
    /// By the worker of the datagram once translated through the
    /// replicated dynamic-NAT table (a cluster member's dynamic NAT, N4:
    /// the control node hands the address to a host; every worker holds
    /// the table, `NatPath::shared_real_of`): the caller looks the
    /// address up.
    Shared,
}

impl NatPlan {
    /// The plan of `spec` for a node with `workers` workers and `ifaces`
    /// interfaces (the pipeline's configured interfaces).
    pub fn new(spec: &NatSpec, ifaces: usize, workers: u16) -> Result<Arc<Self>, NatSpecError> {
        Self::build(spec, ifaces, workers, None)
    }

    /// The plan of `spec` for node `me` of a cluster whose configured
    /// nodes are `nodes`: each PAT pool's blocks dealt over them, each
    /// node's share over its `workers` (every member runs as many); the
    /// maps in force follow the member set (`for_members`). Dynamic NAT's
    /// addresses are the control node's to hand out (N4, `NatPath::
    /// shared_xlate`): the plan deals them as on one node, unused; traffic
    /// to them is steered through the table (`NatInbound::Shared`).
    pub fn for_cluster(
        spec: &NatSpec,
        ifaces: usize,
        workers: u16,
        me: NodeId,
        nodes: &MemberSet,
    ) -> Result<Arc<Self>, NatSpecError> {
        Self::build(spec, ifaces, workers, Some((me, nodes)))
    }

    fn build(
        spec: &NatSpec,
        ifaces: usize,
        workers: u16,
        cluster: Option<(NodeId, &MemberSet)>,
    ) -> Result<Arc<Self>, NatSpecError> {
        let w8 = u8::try_from(workers).map_err(|_| NatSpecError::Pool(0, BlockError::Workers(u8::MAX)))?;
        let mut pools = Vec::with_capacity(spec.pools.len());
        let mut addrs = Vec::new();
        for (i, p) in spec.pools.iter().enumerate() {
            for (k, &a) in (0u32..).zip(&p.addresses) {
                addrs.push((a, i as u16, k));
            }
            pools.push(match p.pat {
                Some(pat) => {
                    // One node: the whole map is dealt over its workers.
                    let g = Geometry::new(pat.block_size, pat.reserved_ports).map_err(|e| NatSpecError::Pool(i, e))?;
                    let alone = MemberSet::from_nodes(Epoch(1), [NodeId(0)])
                        .map_err(|_| NatSpecError::Pool(i, BlockError::NoMembers))?;
                    let members = cluster.map_or(&alone, |(_, m)| m);
                    let map = BlockMap::deal(g, &p.addresses, members, w8).map_err(|e| NatSpecError::Pool(i, e))?;
                    PlanPool::Pat { map, pat }
                }
                None => PlanPool::Nat {
                    addresses: (0..).zip(&p.addresses).map(|(k, &a)| (a, WorkerId(k % workers.max(1)))).collect(),
                },
            });
        }
        addrs.sort_unstable();
        if let Some(w) = addrs.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(NatSpecError::SharedAddress(w[0].0));
        }
        for (i, r) in spec.rules.iter().enumerate() {
            if let Some(p) = r.pool.filter(|&p| usize::from(p) >= pools.len()) {
                return Err(NatSpecError::NoPool(i, p));
            }
        }
        let mut mapped_side = vec![false; ifaces];
        for r in &spec.rules {
            match r.mapped_iface {
                Some(i) => {
                    if let Some(m) = mapped_side.get_mut(usize::from(i.0)) {
                        *m = true;
                    }
                }
                None => mapped_side.fill(true),
            }
        }
        let dealt = pools
            .iter()
            .map(|p| match p {
                PlanPool::Pat { map, .. } => Some(map.clone()),
                PlanPool::Nat { .. } => None,
            })
            .collect();
        Ok(Arc::new(NatPlan {
            dealt,
            pool_specs: spec.pools.clone(),
            mapped_side,
            rules: RuleTable::build(spec.rules.clone(), ifaces),
            pools,
            addrs,
            workers: workers.max(1),
            me: cluster.map_or(NodeId(0), |(me, _)| me),
            cluster: cluster.is_some(),
            nodes: cluster.map(|(_, n)| *n),
            ifaces,
            xlate_capacity: spec.xlate_capacity,
            xlate_timeout: spec.xlate_timeout,
            host_capacity: spec.host_capacity,
        }))
    }

    /// Can traffic to a mapped address arrive on interface `ifx` (a
    /// rule's mapped interface, or any)? Elsewhere inbound translation is
    /// skipped.
    #[inline]
    pub fn mapped_side(&self, ifx: IfIndex) -> bool {
        self.mapped_side.get(usize::from(ifx.0)).copied().unwrap_or(false)
    }

    /// Does `other` translate over the same pools (addresses and block
    /// settings, in the same order)? Only then can its rules replace this
    /// plan's while translations exist (N6, N9): the blocks, their
    /// holders and every xlate stay valid.
    pub fn same_pools(&self, other: &NatPlan) -> bool {
        self.pool_specs == other.pool_specs && self.workers == other.workers
    }

    pub fn workers(&self) -> u16 {
        self.workers
    }

    pub fn ifaces(&self) -> usize {
        self.ifaces
    }

    pub(crate) fn pool_of(&self, a: Ipv4Addr) -> Option<u16> {
        self.addrs.binary_search_by_key(&a, |e| e.0).ok().map(|i| self.addrs[i].1)
    }

    /// Where a datagram to `dst` (protocol, port class and destination
    /// port or echo identifier as received) is decided; `None` when it is
    /// not NAT's, or when no worker holds it (a port outside the pool's
    /// blocks: dropped as `nat-no-xlate` wherever it lands). A static rule
    /// first, as `NatPath::inbound` translates. No allocation.
    pub fn inbound(&self, dst: Ipv4Addr, proto: u8, class: Option<PortClass>, port: u16) -> Option<NatInbound> {
        if let Some(rule) = self.rules.inbound(dst, proto, port).and_then(|i| self.rules.rule(i)) {
            let (a, p) = static_real(rule, dst);
            return Some(NatInbound::Real(a, p));
        }
        match self.pools.get(usize::from(self.pool_of(dst)?))? {
            PlanPool::Pat { map, .. } => {
                class?;
                map.lookup(dst, port).map(|h| NatInbound::Worker(WorkerId(u16::from(h.worker))))
            }
            // A cluster's: the control node's table says whose it is.
            PlanPool::Nat { .. } if self.cluster => Some(NatInbound::Shared),
            // Dealt in pool order: the address's index there.
            PlanPool::Nat { addresses } => {
                let i = self.addrs.binary_search_by_key(&dst, |e| e.0).ok()?;
                addresses.get(self.addrs[i].2 as usize).map(|&(_, w)| NatInbound::Worker(w))
            }
        }
    }

    /// The plan of `spec` for the same node, workers and (in a cluster)
    /// configured nodes as this one (a reload's new rules, N9), with
    /// `ifaces` interfaces.
    pub fn rebuilt(&self, spec: &NatSpec, ifaces: usize) -> Result<Arc<Self>, NatSpecError> {
        match self.nodes {
            Some(nodes) => Self::for_cluster(spec, ifaces, self.workers, self.me, &nodes),
            None => Self::new(spec, ifaces, self.workers),
        }
    }

    /// This node's id (`NodeId(0)` outside a cluster).
    pub fn me(&self) -> NodeId {
        self.me
    }

    /// Are the blocks dealt over a cluster's members (`for_cluster`)?
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// Who holds the block of PAT pool address `dst`'s `port` (N5: the
    /// node and worker return traffic to it goes to); `None` when `dst`
    /// is not a PAT pool address, or the port is below its blocks or of
    /// no port class. No allocation.
    #[inline]
    pub fn holder(&self, dst: Ipv4Addr, class: Option<PortClass>, port: u16) -> Option<Holder> {
        class?;
        match self.pools.get(usize::from(self.pool_of(dst)?))? {
            PlanPool::Pat { map, .. } => map.lookup(dst, port),
            PlanPool::Nat { .. } => None,
        }
    }

    /// The block map of pool `pool` (`None`: no such PAT pool).
    pub fn block_map(&self, pool: u16) -> Option<&BlockMap> {
        match self.pools.get(usize::from(pool))? {
            PlanPool::Pat { map, .. } => Some(map),
            PlanPool::Nat { .. } => None,
        }
    }

    /// A cluster's plan for the member set `members`: each PAT pool's
    /// map is its deal over the configured nodes (`for_cluster`) after
    /// every configured node outside `members` left (`BlockMap::without`,
    /// in id order) — a pure function of the member set, so every member
    /// holds the same maps whatever order the changes came in, and a node
    /// that comes back holds its dealt blocks again. `None` when the maps
    /// are this plan's already. Off the packet path: it allocates.
    pub fn for_members(&self, members: &MemberSet) -> Option<Arc<NatPlan>> {
        let mut next = self.clone();
        let mut changed = false;
        for (p, dealt) in next.pools.iter_mut().zip(&self.dealt) {
            let (PlanPool::Pat { map, .. }, Some(dealt)) = (p, dealt) else { continue };
            let mut m = dealt.clone();
            for n in (0..NodeId::MAX_NODES as u8).map(NodeId) {
                if dealt.members() >> n.0 & 1 == 1 && !members.contains(n) {
                    if let Ok(w) = m.without(n) {
                        m = w;
                    }
                }
            }
            if m != *map {
                *map = m;
                changed = true;
            }
        }
        changed.then(|| Arc::new(next))
    }

    /// Pool `pool`'s map as dealt over the configured nodes.
    pub fn dealt_map(&self, pool: u16) -> Option<&BlockMap> {
        self.dealt.get(usize::from(pool))?.as_ref()
    }

    /// This plan's rules over `running`'s pools and maps (a cluster's
    /// reload, N9: the block maps in force — after leaves — stay).
    pub fn with_pools_of(&self, running: &NatPlan) -> Arc<NatPlan> {
        Arc::new(NatPlan { rules: self.rules.clone(), mapped_side: self.mapped_side.clone(), ..running.clone() })
    }

    /// Workers that hold no address of a dynamic-NAT pool (its hosts
    /// steered there are `nat-exhausted`): (pool, workers), for the
    /// node's start-up warning (a single node's: a cluster member asks the
    /// control node, whatever worker it is on).
    pub fn idle_workers(&self) -> Vec<(u16, u16)> {
        self.pools
            .iter()
            .enumerate()
            .filter_map(|(i, p)| match p {
                PlanPool::Nat { addresses } if !self.cluster && addresses.len() < usize::from(self.workers) => {
                    Some((i as u16, self.workers - addresses.len() as u16))
                }
                _ => None,
            })
            .collect()
    }
}

/// The port space of a tracked flow's protocol (an ICMP flow is an echo);
/// `None` for a protocol without ports.
#[inline]
pub(crate) fn nat_class(proto: u8) -> Option<PortClass> {
    class_of(proto, Some(8))
}

/// The port space of a protocol (and ICMP type); `None` for a protocol
/// without ports.
#[inline]
pub(crate) fn class_of(proto: u8, icmp_type: Option<u8>) -> Option<PortClass> {
    match (proto, icmp_type) {
        (6, _) => Some(PortClass::Tcp),
        (17, _) => Some(PortClass::Udp),
        (1, Some(0 | 8)) => Some(PortClass::Icmp),
        _ => None,
    }
}

/// The real endpoint a static rule maps mapped address `dst` to: the
/// address (static NAT: `dst` moved into the real prefix) and, for static
/// PAT, the real port.
pub(crate) fn static_real(rule: &RuleSpec, dst: Ipv4Addr) -> (Ipv4Addr, Option<u16>) {
    match (rule.kind, rule.ports) {
        (RuleKind::StaticPat, Some((_, rp, _))) => (rule.source.0, Some(rp)),
        _ => (shift(dst, rule.mapped.unwrap_or(rule.source), rule.source), None),
    }
}

/// The mapped endpoint a static rule gives real source `src`: the address
/// (static NAT: `src` moved into the mapped prefix; the port stays) or,
/// for static PAT, the mapped address and port. `None`: not a static rule.
pub(crate) fn static_mapped(rule: &RuleSpec, src: Ipv4Addr) -> Option<(Ipv4Addr, Option<u16>)> {
    match rule.kind {
        RuleKind::StaticNat => Some((shift(src, rule.source, rule.mapped.unwrap_or(rule.source)), None)),
        RuleKind::StaticPat => rule.ports.zip(rule.mapped).map(|((_, _, mp), m)| (m.0, Some(mp))),
        _ => None,
    }
}

/// `addr` moved from the prefix `from` into the prefix `to` (same length).
pub(crate) fn shift(addr: Ipv4Addr, from: (Ipv4Addr, u8), to: (Ipv4Addr, u8)) -> Ipv4Addr {
    let host = if from.1 >= 32 { 0 } else { u32::from(addr) & (u32::MAX >> from.1) };
    Ipv4Addr::from(u32::from(to.0) | host)
}
