//! The NAT stage (SPEC N1–N7; issue 13): translations on one node with one
//! worker. Cluster members and several workers are refused by the node
//! until return traffic is steered by the block map (docs/nat.md).
//!
//! Where it sits in `ipv4_decide`:
//! - **inbound**, right after the IPv4 checks and before the route: a
//!   datagram to a mapped address is translated back to the real one, so
//!   routing, conntrack and the access rules see real addresses (the
//!   reference's "real IP" policy). Return traffic finds its xlate by the
//!   mapped (address, port); a static rule's mapped address or endpoint
//!   maps by the rule alone; an ICMP error quoting a translated packet
//!   gets its outer destination and its quote translated back. A datagram
//!   to a pool address without an xlate is dropped (`nat-no-xlate`:
//!   hostile or expired return traffic, never guessed), as is a later
//!   fragment to a PAT address (`nat-fragment`: its port is in the first
//!   fragment; not translated yet).
//! - **outbound**, after conntrack admitted the packet (the flow exists,
//!   the ACL saw the real tuple): a packet from a real endpoint with an
//!   xlate, or matching a rule whose mapped interface is the egress (or
//!   any), leaves with its source translated; a dynamic rule allocates
//!   first (PAT: a port from the worker's blocks, `nat::alloc`; dynamic
//!   NAT: a pool address). Exhaustion is a counted drop
//!   (`nat-exhausted`), never a reused port; a protocol without ports
//!   cannot be PAT'ed (`nat-protocol`).
//!
//! Xlates are reaped when idle beyond the xlate timeout (the node sets it
//! above every flow timeout). Every xlate is kept as multi-session for
//! now: the per-session removal at the connection's end needs conntrack's
//! end-of-flow events (to come with the cluster part).

use crate::nat::{
    self, BlockMap, Endpoint as Side, Geometry, PortAllocator, PortClass, RuleKind, RuleSpec, RuleTable, Sessions,
    Xlate, XlateInfo, XlateTable,
};
use crate::route::IfIndex;
use crate::types::{DropReason, Duration, Epoch, FiveTuple, NodeId, Timestamp};
use crate::wire::rewrite::{endpoints, icmp_quote};
use std::net::{IpAddr, Ipv4Addr};

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
    Pool(usize, nat::BlockError),
    #[error("rule {0} names pool {1}, which does not exist")]
    NoPool(usize, u16),
    #[error("address {0} is in two pools")]
    SharedAddress(Ipv4Addr),
}

enum Pool {
    Pat(Box<PortAllocator>),
    Nat { free: Vec<Ipv4Addr> },
}

/// One pool as `show nat pool` lists it (this worker's share).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PoolInfo {
    /// The pool's index in the configuration's `nat.pools`.
    pub pool: u16,
    pub kind: &'static str,
    pub addresses: usize,
    /// PAT: blocks this worker holds, of them without a host (port block
    /// allocation) or without a port in use, and ports in use.
    pub blocks: usize,
    pub free_blocks: usize,
    pub ports_in_use: u64,
    /// Dynamic NAT: addresses not handed out.
    pub free_addresses: usize,
}

/// Counters of the NAT stage (`show stats`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct NatCounters {
    /// Packets whose source was translated (outbound).
    pub translated_out: u64,
    /// Packets whose destination was translated back (inbound).
    pub translated_in: u64,
    /// ICMP errors whose quote was translated back.
    pub icmp_errors_in: u64,
    pub xlates_created: u64,
    pub xlates_reaped: u64,
    pub no_xlate: u64,
    pub exhausted: u64,
    pub fragments: u64,
    pub protocol: u64,
}

/// The stage (module essay).
pub(crate) struct NatPath {
    rules: RuleTable,
    pools: Vec<Pool>,
    /// Every pool address, ascending, with its pool.
    addrs: Vec<(Ipv4Addr, u16)>,
    xlates: XlateTable,
    pub counters: NatCounters,
}

/// The source translation `outbound` decided: address and, for PAT or
/// static PAT, port.
pub(crate) type Snat = (Ipv4Addr, Option<u16>);

fn class_of(proto: u8, icmp_type: Option<u8>) -> Option<PortClass> {
    match (proto, icmp_type) {
        (6, _) => Some(PortClass::Tcp),
        (17, _) => Some(PortClass::Udp),
        (1, Some(0 | 8)) => Some(PortClass::Icmp),
        _ => None,
    }
}

/// `addr` moved from the prefix `from` into the prefix `to` (same length).
fn shift(addr: Ipv4Addr, from: (Ipv4Addr, u8), to: (Ipv4Addr, u8)) -> Ipv4Addr {
    let host = if from.1 >= 32 { 0 } else { u32::from(addr) & (u32::MAX >> from.1) };
    Ipv4Addr::from(u32::from(to.0) | host)
}

impl NatPath {
    pub fn new(spec: &NatSpec, ifaces: usize) -> Result<Self, NatSpecError> {
        let mut pools = Vec::with_capacity(spec.pools.len());
        let mut addrs = Vec::new();
        for (i, p) in spec.pools.iter().enumerate() {
            for &a in &p.addresses {
                addrs.push((a, i as u16));
            }
            pools.push(match p.pat {
                Some(pat) => {
                    // One node, one worker: the whole map is this worker's.
                    let g = Geometry::new(pat.block_size, pat.reserved_ports).map_err(|e| NatSpecError::Pool(i, e))?;
                    let me = crate::cluster::MemberSet::from_nodes(Epoch(1), [NodeId(0)])
                        .map_err(|_| NatSpecError::Pool(i, nat::BlockError::NoMembers))?;
                    let map = BlockMap::deal(g, &p.addresses, &me, 1).map_err(|e| NatSpecError::Pool(i, e))?;
                    let mut alloc = PortAllocator::new(g, pat.max_per_host, spec.host_capacity);
                    for (r, _) in map.blocks_of(NodeId(0)) {
                        if let Some(a) = map.address(r) {
                            alloc.add_block(r, a);
                        }
                    }
                    Pool::Pat(Box::new(alloc))
                }
                None => Pool::Nat { free: p.addresses.iter().rev().copied().collect() },
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
        Ok(NatPath {
            rules: RuleTable::build(spec.rules.clone(), ifaces),
            pools,
            addrs,
            xlates: XlateTable::new(spec.xlate_capacity, spec.xlate_timeout),
            counters: NatCounters::default(),
        })
    }

    fn pool_of(&self, a: Ipv4Addr) -> Option<u16> {
        self.addrs.binary_search_by_key(&a, |e| e.0).ok().map(|i| self.addrs[i].1)
    }

    /// Inbound (module essay): translate a datagram to a mapped address
    /// back, in place. `Ok(true)` if it was translated, `Ok(false)` if it
    /// is not NAT's.
    pub fn inbound(&mut self, now: Timestamp, l3: &mut [u8]) -> Result<bool, DropReason> {
        let Some(e) = endpoints(l3) else { return Ok(false) };
        let (dst, proto, dport, icmp_type, later) = (e.dst, e.proto, e.dport, e.icmp_type, e.later_fragment);
        let pooled = self.pool_of(dst).is_some();
        let statics = self.rules.inbound(dst, proto, dport);
        if !pooled && statics.is_none() {
            return Ok(false);
        }
        if later {
            if pooled {
                self.counters.fragments += 1;
                return Err(DropReason::NatFragment);
            }
        } else if proto == 1 && icmp_type.is_some_and(|t| !matches!(t, 0 | 8)) {
            return self.icmp_error_in(now, l3, dst, statics);
        }
        let (real, port) = self.real_of(now, statics, class_of(proto, icmp_type), dst, dport)?;
        nat::rewrite(l3, Side::Destination, real, port).map_err(|_| DropReason::L4Truncated)?;
        self.counters.translated_in += 1;
        Ok(true)
    }

    /// The real endpoint behind mapped `(dst, port)`: by its static rule
    /// (they own their mapped addresses), else by its xlate — with the
    /// port (PAT) or the address only (dynamic NAT). No xlate is a counted
    /// drop.
    fn real_of(
        &mut self,
        now: Timestamp,
        statics: Option<u32>,
        class: Option<PortClass>,
        dst: Ipv4Addr,
        port: u16,
    ) -> Result<(Ipv4Addr, Option<u16>), DropReason> {
        if let Some(rule) = statics.and_then(|i| self.rules.rule(i)) {
            return Ok(match (rule.kind, rule.ports) {
                (RuleKind::StaticPat, Some((_, rp, _))) => (rule.source.0, Some(rp)),
                _ => (shift(dst, rule.mapped.unwrap_or(rule.source), rule.source), None),
            });
        }
        let found = class
            .and_then(|c| self.xlates.by_mapped(c, (dst, port)).map(|id| (id, true)))
            .or_else(|| self.xlates.by_mapped(PortClass::Tcp, (dst, 0)).map(|id| (id, false)));
        let Some((id, x, with_port)) = found.and_then(|(id, w)| self.xlates.get(id).map(|x| (id, *x, w))) else {
            self.counters.no_xlate += 1;
            return Err(DropReason::NatNoXlate);
        };
        self.xlates.touch(now, id);
        Ok((x.real.0, with_port.then_some(x.real.1)))
    }

    /// An ICMP error to a mapped address: its quote (a packet the mapped
    /// side sent) names the xlate.
    fn icmp_error_in(
        &mut self,
        now: Timestamp,
        l3: &mut [u8],
        dst: Ipv4Addr,
        statics: Option<u32>,
    ) -> Result<bool, DropReason> {
        let q = icmp_quote(l3).and_then(endpoints).ok_or(DropReason::L4Truncated)?;
        if q.src != dst {
            self.counters.no_xlate += 1;
            return Err(DropReason::NatNoXlate);
        }
        let (real, port) = self.real_of(now, statics, class_of(q.proto, q.icmp_type), dst, q.sport)?;
        nat::rewrite_icmp_error(l3, Side::Destination, real, port).map_err(|_| DropReason::L4Truncated)?;
        self.counters.icmp_errors_in += 1;
        self.counters.translated_in += 1;
        Ok(true)
    }

    /// Outbound (module essay): the source translation of a packet of
    /// `tuple` that arrived on `ifx` and leaves by `egress`, allocating an
    /// xlate for a dynamic rule; `None` when no rule applies.
    pub fn outbound(
        &mut self,
        now: Timestamp,
        ifx: IfIndex,
        egress: IfIndex,
        tuple: &FiveTuple,
    ) -> Result<Option<Snat>, DropReason> {
        let IpAddr::V4(src) = tuple.src else { return Ok(None) };
        // A tracked ICMP flow is an echo (errors are not flows).
        let class = class_of(tuple.proto, Some(8));
        // The echo identifier is the "port" both ways (R3 puts it in one
        // of the two tuple ports).
        let sport = if class == Some(PortClass::Icmp) { tuple.src_port | tuple.dst_port } else { tuple.src_port };
        if let Some(id) = class.and_then(|c| self.xlates.by_real(c, (src, sport))) {
            let x = self.xlates.get(id).copied();
            self.xlates.touch(now, id);
            return Ok(x.map(|x| (x.mapped.0, Some(x.mapped.1))));
        }
        if let Some(id) = self.xlates.by_real(PortClass::Tcp, (src, 0)) {
            let x = self.xlates.get(id).copied();
            self.xlates.touch(now, id);
            return Ok(x.map(|x| (x.mapped.0, None)));
        }
        let Some(i) = self.rules.outbound(ifx, src, tuple.proto, sport) else { return Ok(None) };
        let Some(rule) = self.rules.rule(i).cloned() else { return Ok(None) };
        if rule.mapped_iface.is_some_and(|m| m != egress) {
            return Ok(None);
        }
        match rule.kind {
            RuleKind::StaticNat => Ok(Some((shift(src, rule.source, rule.mapped.unwrap_or(rule.source)), None))),
            RuleKind::StaticPat => Ok(rule.ports.zip(rule.mapped).map(|((_, _, mp), m)| (m.0, Some(mp)))),
            RuleKind::DynamicPat => {
                let Some(class) = class else {
                    self.counters.protocol += 1;
                    return Err(DropReason::NatProtocol);
                };
                let Some(Pool::Pat(alloc)) = rule.pool.and_then(|p| self.pools.get_mut(usize::from(p))) else {
                    return Ok(None);
                };
                let m = alloc.alloc(class, src).map_err(|_| {
                    self.counters.exhausted += 1;
                    DropReason::NatExhausted
                })?;
                let x = Xlate {
                    class,
                    real: (src, sport),
                    mapped: (m.addr, m.port),
                    sessions: Sessions::MultiSession,
                    block: Some(m.block),
                };
                self.bind(now, x)?;
                Ok(Some((m.addr, Some(m.port))))
            }
            RuleKind::DynamicNat => {
                let Some(Pool::Nat { free }) = rule.pool.and_then(|p| self.pools.get_mut(usize::from(p))) else {
                    return Ok(None);
                };
                let Some(a) = free.pop() else {
                    self.counters.exhausted += 1;
                    return Err(DropReason::NatExhausted);
                };
                let x = Xlate {
                    class: PortClass::Tcp,
                    real: (src, 0),
                    mapped: (a, 0),
                    sessions: Sessions::MultiSession,
                    block: None,
                };
                self.bind(now, x)?;
                Ok(Some((a, None)))
            }
        }
    }

    /// Insert `x` with no connection holding it (reaped when idle); on
    /// failure its mapping goes back to its pool.
    fn bind(&mut self, now: Timestamp, x: Xlate) -> Result<(), DropReason> {
        match self.xlates.insert(now, x) {
            Ok(id) => {
                self.xlates.release(now, id);
                self.counters.xlates_created += 1;
                Ok(())
            }
            Err(_) => {
                self.give_back(x);
                self.counters.exhausted += 1;
                Err(DropReason::NatExhausted)
            }
        }
    }

    fn give_back(&mut self, x: Xlate) {
        let Some(p) = self.pool_of(x.mapped.0) else { return };
        match self.pools.get_mut(usize::from(p)) {
            Some(Pool::Pat(alloc)) => {
                if let Some(b) = x.block {
                    alloc.free(x.class, b, x.mapped.1);
                }
            }
            Some(Pool::Nat { free }) => free.push(x.mapped.0),
            None => {}
        }
    }

    /// Reap idle xlates (bounded), returning their mappings to the pools.
    pub fn timers(&mut self, now: Timestamp) {
        // At most as many reaped as slots inspected: all fit.
        let mut reaped = [None; 64];
        let mut n = 0;
        self.xlates.expire(now, reaped.len(), |x| {
            if let Some(slot) = reaped.get_mut(n) {
                *slot = Some(x);
                n += 1;
            }
        });
        for x in reaped.iter().flatten() {
            self.give_back(*x);
        }
        self.counters.xlates_reaped += n as u64;
    }

    /// `show xlate`.
    pub fn xlates(&self, now: Timestamp, max: usize) -> Vec<XlateInfo> {
        self.xlates.snapshot(now, max)
    }

    /// `show nat pool`.
    pub fn pools(&self) -> Vec<PoolInfo> {
        self.pools
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let addresses = self.addrs.iter().filter(|a| usize::from(a.1) == i).count();
                let mut info = PoolInfo {
                    pool: i as u16,
                    kind: "dynamic-nat",
                    addresses,
                    blocks: 0,
                    free_blocks: 0,
                    ports_in_use: 0,
                    free_addresses: 0,
                };
                match p {
                    Pool::Pat(a) => {
                        info.kind = "dynamic-pat";
                        info.blocks = a.blocks();
                        info.free_blocks = a.free_blocks();
                        info.ports_in_use = a.in_use();
                    }
                    Pool::Nat { free } => info.free_addresses = free.len(),
                }
                info
            })
            .collect()
    }
}
