//! The NAT stage (SPEC N1–N7; issue 13): translations on one node, with
//! one worker or several, and on cluster members (PAT blocks dealt over
//! the members, return traffic sent to the block's holder, multi-session
//! PAT at the control node: docs/nat.md, "The cluster"; the pipeline and
//! the cluster stage do the steering, this stage answers their questions:
//! `holder_elsewhere`, `multi_session_out`, `adopt_binding`).
//!
//! Where it sits in `ipv4_decide`:
//! - **inbound**, right after the IPv4 checks and before the route, on a
//!   rule's mapped interface (or any interface for a rule with "any"): a
//!   datagram to a mapped address is translated back to the real one, so
//!   routing, conntrack and the access rules see real addresses (the
//!   reference's "real IP" policy). Return traffic finds its xlate by the
//!   mapped (address, port); a static rule's mapped address or endpoint
//!   maps by the rule alone; an ICMP error quoting a translated packet
//!   gets its outer destination and its quote translated back. A datagram
//!   to a pool address without an xlate is dropped (`nat-no-xlate`:
//!   hostile or expired return traffic, never guessed). A fragment to a
//!   pool address waits for the reassembler (a later fragment carries no
//!   port): once its datagram's first fragment is known, every piece is
//!   translated to the real endpoint (`fragment_in`; the first one's port
//!   and transport checksum, the others' address), at the worker holding
//!   the translation, and routed there (a cluster member sends them to
//!   the block's holder first, `FragNat::Holder`). A frame handed on by
//!   another worker, or released by the reassembler, went through this
//!   step when it arrived (`Rx::nat_in`): never twice.
//! - **outbound**, after conntrack admitted the packet (the flow exists,
//!   the ACL saw the real tuple): a packet from a real endpoint with an
//!   xlate, or matching a rule whose mapped interface is the egress (or
//!   any), leaves with its source translated; a dynamic rule allocates
//!   first (PAT: a port from the worker's blocks, `nat::alloc`; dynamic
//!   NAT: a pool address). Exhaustion is a counted drop
//!   (`nat-exhausted`), never a reused port; a protocol without ports
//!   cannot be PAT'ed (`nat-protocol`).
//!
//! **Several workers** share one read-only [`NatPlan`]: the compiled
//! rules, each PAT pool's block map dealt over the node's workers, and
//! each dynamic-NAT address's worker. A worker allocates only from its
//! own blocks and addresses (no lock), and its xlates live in its own
//! table. An outbound connection is decided by the worker of its real
//! tuple (`steer`), which allocates from its share; the return traffic to
//! the mapped (address, port) is steered by the plan to the block's (or
//! the address's) worker — the same worker, which holds the connection
//! and the xlate. Traffic to a static rule's mapped address is steered by
//! the real tuple it translates to, where the inside host's replies meet
//! it. What this costs: a dynamic-NAT address serves the hosts of one
//! worker, so a pool needs an address per worker before every worker can
//! translate (`NatPlan::idle_workers`), and a host talking through
//! several workers holds an xlate (and, with port block allocation, a
//! block) on each.
//!
//! **Xlate lifecycle (N3, N7).** Every flow that uses a dynamic xlate
//! holds a reference on it, recorded as the flow's conntrack mark (the
//! xlate's slot + 1). Conntrack reports the marks of the flows it removes,
//! however they go (`ConnTable::drain_ended`), and the stage lets go of
//! them (`flows_ended`): a per-session xlate (PAT for TCP and DNS by
//! default, the rule's `per-session-*` settings) goes at once and its
//! port returns to the pool; a multi-session one (other UDP, ICMP,
//! dynamic NAT) stays until idle beyond the xlate timeout with no
//! connection (stale, visible in `show xlate`, then reaped). A dynamic
//! translation is made only for a flow's initiator: the responder of a
//! connection to its real address answers from it.
//!
//! **The fast path** (`fast.rs`, `nat_forward`) does these steps for an
//! established translated flow and its return traffic (`fast_in`,
//! `fast_out`: what they would do, or a decline before anything changes).
//! **New rules** (a reload, N9) replace the plan between bursts
//! (`swap_plan`, through `Pipeline::set_policy`) when the pools stay the
//! same (N6); blocks, addresses and xlates stay.

use crate::nat::plan::{class_of, nat_class, static_mapped, static_real, PlanPool};
pub use crate::nat::plan::{NatInbound, NatPlan, NatSpec, NatSpecError, PatSpec, PoolSpec};
use crate::ccl::NatBinding;
use crate::conntrack::{ConnTable, FlowHandle, FlowNat, FlowRecord, Tracked};
use crate::nat::{
    self, BlockRef, Endpoint as Side, Holder, PortAllocator, PortClass, RuleKind, Sessions, Xlate, XlateId, XlateInfo,
    XlateTable,
};
use crate::route::IfIndex;
use crate::types::{Direction, DropReason, Duration, FiveTuple, NodeId, PortId, Timestamp, WorkerId};
use super::context::{Outcome, Rx};
use super::hold::{FrameHold, HoldLimits};
use crate::wire::rewrite::{endpoints, icmp_quote};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

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
    /// ICMP errors from the real side about translated traffic, sent with
    /// the mapped endpoint (`icmp_error_out`).
    pub icmp_errors_out: u64,
    pub xlates_created: u64,
    /// Per-session xlates removed when their last connection ended.
    pub xlates_removed: u64,
    pub xlates_reaped: u64,
    pub no_xlate: u64,
    pub exhausted: u64,
    /// Fragments to a pool address translated (`fragment_in`).
    pub fragments_in: u64,
    pub protocol: u64,
    /// Cluster (N5): datagrams to a PAT port whose block another member
    /// holds, sent there untranslated.
    pub to_holder: u64,
    /// Cluster (R11): bindings of flows taken over kept here, and those
    /// that could not be (the flow was removed).
    pub bindings_adopted: u64,
    pub bindings_refused: u64,
    /// Cluster: connections that left here because the block of their
    /// binding went back to its node when it came back (handed over to it
    /// first, `nat_handovers`).
    pub bindings_returned: u64,
    /// Dynamic NAT on a cluster member (N4): packets dropped while the
    /// control node was asked for their host's translation, the requests
    /// and renewals handed to the driver, those that did not fit its
    /// queue, translations the replicated table brought or took, and the
    /// connections ended because their translation went or changed.
    pub pending: u64,
    /// Of those, held for the answer (`Pipeline::nat_hold`); each ends in
    /// `pending_released` (decided again when the translation came) or
    /// `pending_dropped` (no answer within `PENDING_HOLD_TIMEOUT`, freed
    /// by a reset or reload, or dropped when decided again). The rest
    /// found no room and were dropped (`nat-pending`).
    pub pending_held: u64,
    pub pending_released: u64,
    pub pending_dropped: u64,
    pub shared_requests: u64,
    pub shared_renewals: u64,
    pub shared_requests_dropped: u64,
    pub shared_installed: u64,
    pub shared_removed: u64,
    pub shared_conns_ended: u64,
}

impl std::ops::AddAssign for NatCounters {
    /// A node's counters are its workers' summed.
    fn add_assign(&mut self, o: NatCounters) {
        let NatCounters {
            translated_out,
            translated_in,
            icmp_errors_in,
            icmp_errors_out,
            xlates_created,
            xlates_removed,
            xlates_reaped,
            no_xlate,
            exhausted,
            fragments_in,
            protocol,
            to_holder,
            bindings_adopted,
            bindings_refused,
            bindings_returned,
            pending,
            pending_held,
            pending_released,
            pending_dropped,
            shared_requests,
            shared_renewals,
            shared_requests_dropped,
            shared_installed,
            shared_removed,
            shared_conns_ended,
        } = o;
        self.pending += pending;
        self.pending_held += pending_held;
        self.pending_released += pending_released;
        self.pending_dropped += pending_dropped;
        self.shared_requests += shared_requests;
        self.shared_renewals += shared_renewals;
        self.shared_requests_dropped += shared_requests_dropped;
        self.shared_installed += shared_installed;
        self.shared_removed += shared_removed;
        self.shared_conns_ended += shared_conns_ended;
        self.bindings_returned += bindings_returned;
        self.to_holder += to_holder;
        self.bindings_adopted += bindings_adopted;
        self.bindings_refused += bindings_refused;
        self.translated_out += translated_out;
        self.translated_in += translated_in;
        self.icmp_errors_in += icmp_errors_in;
        self.icmp_errors_out += icmp_errors_out;
        self.xlates_created += xlates_created;
        self.xlates_removed += xlates_removed;
        self.xlates_reaped += xlates_reaped;
        self.no_xlate += no_xlate;
        self.exhausted += exhausted;
        self.fragments_in += fragments_in;
        self.protocol += protocol;
    }
}

/// Worker `me`'s blocks of PAT pool `pool` (map `map` of `plan`) that
/// `alloc` does not hold yet: allocated from when dealt to this node, else
/// (inherited from a member that left) held for the bindings taken over.
fn hold_blocks(plan: &NatPlan, pool: u16, map: &crate::nat::BlockMap, me: WorkerId, alloc: &mut PortAllocator) {
    let dealt = plan.dealt_map(pool);
    for (r, h) in map.blocks_of(plan.me) {
        let Some(a) = map.address(r).filter(|_| u16::from(h.worker) == me.0 && alloc.holds(r).is_none()) else {
            continue;
        };
        if dealt.and_then(|d| d.holder(r)).is_none_or(|d| d.node == plan.me) {
            alloc.add_block(r, a);
        } else {
            alloc.add_inherited_block(r, a);
        }
    }
}

/// Dynamic NAT on a cluster member (N4): frame slots for the first
/// packets of hosts whose translation the control node was asked for
/// (2 KiB each: 128 KiB per worker, made only on a cluster member with
/// NAT). The control node answers within a CCL round trip.
pub const PENDING_HOLD_SLOTS: usize = 64;
/// Packets held per host, at most: a host's first connections' first
/// packets (SYNs, a DNS query); the rest is dropped as before and
/// retransmitted.
pub const PENDING_HOLD_PER_HOST: usize = 8;
/// How long a held packet waits for its host's translation: the initial
/// retransmission timeout (RFC 6298 §2.1), after which the client has
/// sent it again anyway.
pub const PENDING_HOLD_TIMEOUT: Duration = Duration::from_millis(1000);

/// The hold of a cluster member's NAT stage (`Pipeline::nat_hold`).
pub(crate) fn pending_hold(slot_len: usize) -> FrameHold<Ipv4Addr> {
    let limits = HoldLimits { slots: PENDING_HOLD_SLOTS, per_key: PENDING_HOLD_PER_HOST, timeout: PENDING_HOLD_TIMEOUT };
    FrameHold::new(limits, slot_len, |a| u32::from(*a) | 1)
}

/// A packet whose host's dynamic-NAT translation was just asked for
/// (`NatPending`; its flow is created): held in `hold` until the answer
/// (`Pipeline::release_nat_held`) — `Consumed` — or, without room,
/// dropped as before.
#[cold]
#[inline(never)]
pub(crate) fn nat_pending(
    n: &mut NatPath,
    hold: Option<&mut FrameHold<Ipv4Addr>>,
    now: Timestamp,
    tuple: &FiveTuple,
    in_port: PortId,
    rx: Rx,
    frame: &[u8],
) -> Result<Outcome, DropReason> {
    let IpAddr::V4(real) = tuple.src else { return Err(DropReason::NatPending) };
    if !hold.is_some_and(|h| h.hold(now, &real, in_port, rx, frame)) {
        return Err(DropReason::NatPending);
    }
    n.counters.pending_held += 1;
    Ok(Outcome::Consumed)
}

/// Requests for the control node (dynamic NAT on a cluster member, N4)
/// waiting for the driver, at most.
pub const SHARED_REQUESTS: usize = 1024;
/// Hosts asked for recently, remembered so that a burst of one host's
/// packets asks once.
const ASKED: usize = 64;
/// A host asked for is asked again after this long without an answer.
const ASK_AGAIN: Duration = Duration::from_millis(250);

/// A request for the control node (`NatPath::take_requests`): the
/// translation of `real` in `pool`, or the renewal of `held`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SharedRequest {
    pub pool: u16,
    pub real: Ipv4Addr,
    pub held: Option<Ipv4Addr>,
}

/// The stage (module essay): one worker's share of the plan.
pub(crate) struct NatPath {
    plan: Arc<NatPlan>,
    worker: WorkerId,
    /// Dynamic NAT on a cluster member: requests for the driver (capacity
    /// `SHARED_REQUESTS`, never grown), hosts asked for recently (a ring
    /// of `ASKED`), when the renewals are due.
    requests: Vec<SharedRequest>,
    asked: [(u16, Ipv4Addr, Timestamp); ASKED],
    asked_next: usize,
    next_renewal: Timestamp,
    /// Blocks `adopt_plan` found lost, until `end_lost`: (pool, block).
    lost: Vec<(u16, BlockRef)>,
    pools: Vec<Pool>,
    xlates: XlateTable,
    pub counters: NatCounters,
}

/// The source translation `outbound` decided: address and, for PAT or
/// static PAT, port.
pub(crate) type Snat = (Ipv4Addr, Option<u16>);

/// What becomes of a fragment to a pool address (`NatPath::fragment_in`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum FragNat {
    /// Not NAT's.
    None,
    /// Translated to this real endpoint.
    To(Ipv4Addr, Option<u16>),
    /// Another cluster member holds its PAT block: sent there as it is.
    Holder(NodeId),
}

/// What the fast path may do about NAT (`NatPath::fast`).
#[derive(Copy, Clone, Debug)]
pub(crate) enum FastNat {
    /// Nothing to translate.
    None,
    /// Return traffic: destination to this real address (and port).
    In(XlateId, Ipv4Addr, Option<u16>),
    /// Source to this mapped address (and port).
    Out(XlateId, Ipv4Addr, Option<u16>),
}

impl NatPath {
    /// Worker `me`'s share of `plan`: the blocks and addresses dealt to it.
    pub fn new(plan: Arc<NatPlan>, me: WorkerId) -> Self {
        let pools = (0u16..)
            .zip(plan.pools.iter())
            .map(|(i, p)| match p {
                PlanPool::Pat { map, pat } => {
                    let mut alloc = PortAllocator::new(map.geometry(), pat.max_per_host, plan.host_capacity);
                    hold_blocks(&plan, i, map, me, &mut alloc);
                    Pool::Pat(Box::new(alloc))
                }
                PlanPool::Nat { addresses } => {
                    Pool::Nat { free: addresses.iter().rev().filter(|(_, w)| *w == me).map(|&(a, _)| a).collect() }
                }
            })
            .collect();
        NatPath {
            xlates: XlateTable::new(plan.xlate_capacity, plan.xlate_timeout),
            pools,
            plan,
            worker: me,
            requests: Vec::with_capacity(SHARED_REQUESTS),
            asked: [(u16::MAX, Ipv4Addr::UNSPECIFIED, Timestamp::ZERO); ASKED],
            asked_next: 0,
            next_renewal: Timestamp::ZERO,
            lost: Vec::new(),
            counters: NatCounters::default(),
        }
    }

    /// A cluster member's plan for a new member set
    /// (`NatPlan::for_members`, from `Pipeline::set_members`). Blocks it
    /// gains for this worker: its own dealt blocks are allocated from
    /// again, another node's (inherited from a member that left) only
    /// hold the bindings taken over in them
    /// (`PortAllocator::add_inherited_block`). Blocks it loses (a node
    /// that came back holds its dealt blocks again) are given up by
    /// `end_lost`; returned here, before that, are the connections
    /// translated in them with the member that holds their block now, for
    /// the cluster stage to hand them over (docs/nat.md, "Join and
    /// rejoin"). Off the packet path.
    pub fn adopt_plan(&mut self, plan: Arc<NatPlan>, flows: &ConnTable) -> Vec<(FlowHandle, FiveTuple, NodeId)> {
        let mine = Holder { node: plan.me, worker: self.worker.0 as u8 };
        self.lost.clear();
        for (i, (p, pool)) in (0u16..).zip(plan.pools.iter().zip(self.pools.iter_mut())) {
            let (PlanPool::Pat { map, .. }, Pool::Pat(alloc)) = (p, pool) else { continue };
            self.lost.extend(alloc.block_refs().filter(|&r| map.holder(r) != Some(mine)).map(|r| (i, r)));
            hold_blocks(&plan, i, map, self.worker, alloc);
        }
        self.plan = plan;
        let mut moving = Vec::new();
        if self.lost.is_empty() {
            return moving;
        }
        for i in 0..flows.capacity() {
            let Some((h, orig)) = flows.slot(i) else { continue };
            let Some(x) = flows.mark(h).checked_sub(1).and_then(|id| self.xlates.get(XlateId(id))) else { continue };
            if self.in_lost(x) {
                if let Some(to) = self.plan.holder(x.mapped.0, Some(x.class), x.mapped.1) {
                    moving.push((h, orig, to.node));
                }
            }
        }
        moving
    }

    /// Is `x`'s mapping in a block `adopt_plan` found lost?
    fn in_lost(&self, x: &Xlate) -> bool {
        x.block.is_some_and(|b| self.plan.pool_of(x.mapped.0).is_some_and(|p| self.lost.contains(&(p, b))))
    }

    /// After `adopt_plan` (and the hand-overs): the connections translated
    /// in the lost blocks end here, their xlates go and the blocks are
    /// given up — their node may hand those ports out again, and their
    /// return traffic goes there. Returns the connections ended.
    pub fn end_lost(&mut self, now: Timestamp, flows: &mut ConnTable) -> usize {
        if self.lost.is_empty() {
            return 0;
        }
        // Pending ends first, as after any packet; then the connections in
        // the lost blocks, whose ends are not reported (their xlates are
        // removed right here, whatever their references).
        self.flows_ended(now, flows);
        let xlates = &self.xlates;
        let this = &*self;
        let ended = flows.remove_marked(|m| {
            m.checked_sub(1).and_then(|id| xlates.get(XlateId(id))).is_some_and(|x| this.in_lost(x))
        });
        self.annotate(flows, true);
        flows.drain_ended(|_| {});
        let lost = std::mem::take(&mut self.lost);
        let mut freed = Vec::new();
        let plan = self.plan.clone();
        self.xlates.remove_where(
            |x| x.block.is_some_and(|b| plan.pool_of(x.mapped.0).is_some_and(|p| lost.contains(&(p, b)))),
            |x| freed.push(x),
        );
        for x in freed {
            self.give_back(x);
            self.counters.xlates_removed += 1;
        }
        for (p, r) in lost {
            if let Some(Pool::Pat(alloc)) = self.pools.get_mut(usize::from(p)) {
                alloc.remove_block(r);
            }
        }
        self.counters.bindings_returned += ended as u64;
        ended
    }

    /// N3, on a cluster member: would a packet of `tuple` received on
    /// `ifx` and routed out of `egress` open a multi-session PAT
    /// translation (a dynamic PAT rule matches its real source, and the
    /// rule's per-session settings leave its protocol and port out: other
    /// UDP than DNS and ICMP by default)? Such a connection belongs to the
    /// control node.
    pub fn multi_session_out(&self, ifx: IfIndex, egress: IfIndex, tuple: &FiveTuple) -> bool {
        let (true, IpAddr::V4(src), Some(class)) = (self.plan.cluster, tuple.src, nat_class(tuple.proto)) else {
            return false;
        };
        let sport = if class == PortClass::Icmp { tuple.src_port | tuple.dst_port } else { tuple.src_port };
        let rules = &self.plan.rules;
        rules.outbound(ifx, src, tuple.proto, sport).and_then(|i| rules.rule(i)).is_some_and(|r| {
            r.kind == RuleKind::DynamicPat
                && r.mapped_iface.is_none_or(|m| m == egress)
                && !r.per_session.applies(tuple.proto, tuple.dst_port)
        })
    }

    /// N5, on a cluster member: the member holding the block of the PAT
    /// port a datagram received on `ifx` is addressed to (an ICMP error:
    /// the port its quote was sent from), when that is another member —
    /// the datagram goes there untranslated, without a director query or
    /// a forwarding record. `None`: not a PAT pool's, or ours.
    pub fn holder_elsewhere(&self, ifx: IfIndex, l3: &[u8]) -> Option<NodeId> {
        if !self.plan.cluster || !self.plan.mapped_side(ifx) {
            return None;
        }
        let e = endpoints(l3)?;
        if e.later_fragment || self.plan.rules.inbound(e.dst, e.proto, e.dport).is_some() {
            return None;
        }
        let (class, port) = if e.proto == 1 && e.icmp_type.is_some_and(|t| !matches!(t, 0 | 8)) {
            let q = icmp_quote(l3).and_then(endpoints).filter(|q| q.src == e.dst)?;
            (class_of(q.proto, q.icmp_type), q.sport)
        } else {
            (class_of(e.proto, e.icmp_type), e.dport)
        };
        let h = self.plan.holder(e.dst, class, port)?;
        (h.node != self.plan.me).then_some(h.node)
    }

    /// The PAT binding of the flow `mark` names, for its flow records
    /// (R9: a new owner keeps the mapped address and port).
    pub fn binding(&self, mark: u32) -> Option<NatBinding> {
        let x = self.xlates.get(XlateId(mark.checked_sub(1)?))?;
        x.block?;
        Some(NatBinding {
            addr: x.mapped.0,
            port: x.mapped.1,
            class: x.class as u8,
            multi_session: x.sessions == Sessions::MultiSession,
        })
    }

    /// A flow taken over (R11) with the binding `b` of its previous owner:
    /// the flow `h` (original direction `orig`, from the real endpoint)
    /// holds the same mapped address and port here — an xlate of that
    /// mapping if one exists for the same real endpoint, else a new one,
    /// its port reserved in the block this worker holds (dealt or
    /// inherited). `false` (counted) when it cannot be: the block is not
    /// ours, the port is bound to another endpoint, or the table is full;
    /// the caller removes the flow, so no packet of it leaves
    /// untranslated.
    pub fn adopt_binding(&mut self, now: Timestamp, flows: &mut ConnTable, h: FlowHandle, orig: &FiveTuple, b: NatBinding) -> bool {
        let ok = self.try_adopt(now, flows, h, orig, b);
        if ok {
            self.counters.bindings_adopted += 1;
        } else {
            self.counters.bindings_refused += 1;
        }
        ok
    }

    fn try_adopt(&mut self, now: Timestamp, flows: &mut ConnTable, h: FlowHandle, orig: &FiveTuple, b: NatBinding) -> bool {
        let IpAddr::V4(src) = orig.src else { return false };
        let class = PortClass::from_code(b.class);
        if nat_class(orig.proto) != Some(class) || flows.mark(h) != 0 {
            return false;
        }
        let sport = if class == PortClass::Icmp { orig.src_port | orig.dst_port } else { orig.src_port };
        let real = (src, sport);
        if let Some(id) = self.xlates.by_mapped(class, (b.addr, b.port)) {
            let same = self.xlates.get(id).is_some_and(|x| x.real == real);
            if same && self.xlates.acquire(now, id) {
                flows.set_mark(h, id.0.wrapping_add(1));
            }
            return same;
        }
        let Some(p) = self.pool_of(b.addr) else { return false };
        let Some(r) = self.plan.block_map(p).and_then(|m| m.block(b.addr, b.port)) else { return false };
        let Some(Pool::Pat(alloc)) = self.pools.get_mut(usize::from(p)) else { return false };
        if !alloc.reserve(class, r, b.port, src) {
            return false;
        }
        let sessions = if b.multi_session { Sessions::MultiSession } else { Sessions::PerSession };
        let x = Xlate { class, real, mapped: (b.addr, b.port), sessions, block: Some(r) };
        match self.xlates.insert(now, x) {
            Ok(id) => {
                flows.set_mark(h, id.0.wrapping_add(1));
                self.counters.xlates_created += 1;
                true
            }
            Err(_) => {
                self.give_back(x);
                false
            }
        }
    }

    pub fn plan(&self) -> &Arc<NatPlan> {
        &self.plan
    }

    /// New rules over the same pools (N9; the caller checked
    /// `NatPlan::same_pools`): the blocks, addresses and xlates stay — a
    /// translation made under a rule that is gone lives until its
    /// connections end, as the reference's existing xlates do — and new
    /// connections meet the new rules. Returns the old plan (freed by the
    /// caller, off the packet path).
    pub fn swap_plan(&mut self, plan: Arc<NatPlan>) -> Arc<NatPlan> {
        std::mem::replace(&mut self.plan, plan)
    }

    fn pool_of(&self, a: Ipv4Addr) -> Option<u16> {
        self.plan.pool_of(a)
    }

    /// The xlate of mapped `(dst, port)` in `class`, else of address `dst`
    /// alone (dynamic NAT); `true`: found with its port.
    #[inline]
    fn by_mapped(&self, class: Option<PortClass>, dst: Ipv4Addr, port: u16) -> Option<(XlateId, bool)> {
        class
            .and_then(|c| self.xlates.by_mapped(c, (dst, port)).map(|id| (id, true)))
            .or_else(|| self.xlates.by_mapped(PortClass::Tcp, (dst, 0)).map(|id| (id, false)))
    }

    /// The xlate of real `(src, sport)` in `class`, else of address `src`
    /// alone (dynamic NAT); `true`: found with its port.
    #[inline]
    fn by_real(&self, class: Option<PortClass>, src: Ipv4Addr, sport: u16) -> Option<(XlateId, bool)> {
        class
            .and_then(|c| self.xlates.by_real(c, (src, sport)).map(|id| (id, true)))
            .or_else(|| self.xlates.by_real(PortClass::Tcp, (src, 0)).map(|id| (id, false)))
    }

    /// The xlate a flow's `mark` names, if a packet from `(src, sport)` of
    /// `class` is from its real endpoint: its id and the source to write.
    #[inline(always)]
    fn marked(&self, mark: u32, class: Option<PortClass>, src: Ipv4Addr, sport: u16) -> Option<(XlateId, Snat)> {
        let id = XlateId(mark.checked_sub(1)?);
        let x = self.xlates.get(id)?;
        let own = x.real.0 == src && (x.block.is_none() || (Some(x.class) == class && x.real.1 == sport));
        own.then(|| (id, (x.mapped.0, x.block.map(|_| x.mapped.1))))
    }

    /// Inbound (module essay): translate a datagram to a mapped address
    /// back, in place. `Ok(true)` if it was translated, `Ok(false)` if it
    /// is not NAT's.
    pub fn inbound(&mut self, now: Timestamp, ifx: IfIndex, l3: &mut [u8], fragment: bool) -> Result<bool, DropReason> {
        // Traffic to mapped addresses arrives on a rule's mapped interface.
        if !self.plan.mapped_side(ifx) {
            return Ok(false);
        }
        let Some(e) = endpoints(l3) else { return Ok(false) };
        let (dst, proto, dport, icmp_type, later) = (e.dst, e.proto, e.dport, e.icmp_type, e.later_fragment);
        let pooled = self.pool_of(dst).is_some();
        let statics = self.plan.rules.inbound(dst, proto, dport);
        if !pooled && statics.is_none() {
            return Ok(false);
        }
        if fragment && pooled && statics.is_none() {
            // A later fragment carries no port: every piece is translated
            // once the reassembler knows its datagram (`fragment_in`).
            return Ok(false);
        }
        if !later && proto == 1 && icmp_type.is_some_and(|t| !matches!(t, 0 | 8)) {
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
        if let Some(rule) = statics.and_then(|i| self.plan.rules.rule(i)) {
            return Ok(static_real(rule, dst));
        }
        let found = self.by_mapped(class, dst, port);
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
    /// `tuple` that arrived on `ifx` and leaves by `egress` (its flow
    /// `tracked` in `flows`), allocating an xlate for a dynamic rule when
    /// the packet is its flow's initiator; `None` when no rule applies.
    /// The flow holds a reference on the xlate it uses (its mark), given
    /// back when it ends (`flows_ended`).
    #[allow(clippy::too_many_arguments)]
    pub fn outbound(
        &mut self,
        now: Timestamp,
        ifx: IfIndex,
        egress: IfIndex,
        tuple: &FiveTuple,
        flows: &mut ConnTable,
        tracked: Tracked,
    ) -> Result<Option<Snat>, DropReason> {
        let IpAddr::V4(src) = tuple.src else { return Ok(None) };
        // A tracked ICMP flow is an echo (errors are not flows).
        let class = nat_class(tuple.proto);
        // The echo identifier is the "port" both ways (R3 puts it in one
        // of the two tuple ports).
        let sport = if class == Some(PortClass::Icmp) { tuple.src_port | tuple.dst_port } else { tuple.src_port };
        // An established flow names its xlate (its mark): no index lookup.
        let mark = flows.mark(tracked.handle);
        if let Some((id, m)) = self.marked(mark, class, src, sport) {
            self.xlates.touch(now, id);
            return Ok(Some(m));
        }
        if let Some((id, with_port)) = self.by_real(class, src, sport) {
            let Some(x) = self.xlates.get(id).copied() else { return Ok(None) };
            if mark == 0 {
                self.xlates.acquire(now, id);
                flows.set_mark(tracked.handle, id.0.wrapping_add(1));
            } else {
                self.xlates.touch(now, id);
            }
            return Ok(Some((x.mapped.0, with_port.then_some(x.mapped.1))));
        }
        let Some(i) = self.plan.rules.outbound(ifx, src, tuple.proto, sport) else { return Ok(None) };
        let Some(rule) = self.plan.rules.rule(i).cloned() else { return Ok(None) };
        if rule.mapped_iface.is_some_and(|m| m != egress) {
            return Ok(None);
        }
        match rule.kind {
            RuleKind::StaticNat | RuleKind::StaticPat => Ok(static_mapped(&rule, src)),
            // A dynamic translation is made for the connection's initiator
            // only: the responder of a connection to its real address
            // answers from it.
            _ if tracked.dir != Direction::Original => Ok(None),
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
                let sessions = if rule.per_session.applies(tuple.proto, tuple.dst_port) {
                    Sessions::PerSession
                } else {
                    Sessions::MultiSession
                };
                let x = Xlate { class, real: (src, sport), mapped: (m.addr, m.port), sessions, block: Some(m.block) };
                self.bind(now, x, flows, tracked)?;
                Ok(Some((m.addr, Some(m.port))))
            }
            // A cluster member: the control node's table says (N4).
            RuleKind::DynamicNat if self.plan.cluster => {
                let Some(p) = rule.pool else { return Ok(None) };
                self.ask(now, p, src);
                self.counters.pending += 1;
                Err(DropReason::NatPending)
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
                self.bind(now, x, flows, tracked)?;
                Ok(Some((a, None)))
            }
        }
    }

    /// Dynamic NAT on a cluster member: ask the control node for `real`'s
    /// translation in `pool`, unless asked within `ASK_AGAIN`. No
    /// allocation: the request queue's capacity was reserved.
    fn ask(&mut self, now: Timestamp, pool: u16, real: Ipv4Addr) {
        if self.asked.iter().any(|&(p, r, at)| p == pool && r == real && now.since(at) < ASK_AGAIN) {
            return;
        }
        if self.requests.len() >= SHARED_REQUESTS {
            self.counters.shared_requests_dropped += 1;
            return;
        }
        self.requests.push(SharedRequest { pool, real, held: None });
        self.counters.shared_requests += 1;
        self.asked[self.asked_next] = (pool, real, now);
        self.asked_next = (self.asked_next + 1) % ASKED;
    }

    /// The requests for the control node gathered since the last call
    /// (the driver sends them: `Membership::request_xlate`).
    pub fn take_requests(&mut self, mut f: impl FnMut(SharedRequest)) {
        for r in self.requests.drain(..) {
            f(r);
        }
    }

    /// The real address the control node's table hands `mapped` to, as
    /// this worker holds the table (every worker of a member holds all of
    /// it): where return traffic to `mapped` is steered
    /// (`steer::steer_nat`'s `real_of`). No allocation.
    pub fn shared_real_of(&self, mapped: Ipv4Addr) -> Option<Ipv4Addr> {
        let x = self.xlates.get(self.xlates.by_mapped(PortClass::Tcp, (mapped, 0))?)?;
        (x.sessions == Sessions::Cluster).then_some(x.real.0)
    }

    /// The control node's table changed (between bursts): `real` in
    /// `pool` is now translated to `mapped`, or not at all (`None`).
    /// A translation this worker holds for the host, or another host's
    /// for the address, that the table contradicts goes, and the
    /// connections using it end (their packets would leave with an address
    /// another host now has). A deletion of a translation connections
    /// still use keeps it and renews it at once (a renewal was lost; the
    /// control node puts the entry back while its address is free).
    pub fn shared_xlate(&mut self, now: Timestamp, flows: &mut ConnTable, pool: u16, real: Ipv4Addr, mapped: Option<Ipv4Addr>) {
        let mine = self.xlates.by_real(PortClass::Tcp, (real, 0));
        match mapped {
            None => {
                let Some(id) = mine else { return };
                if self.xlates.refs(id) > 0 {
                    if let Some(x) = self.xlates.get(id).copied() {
                        self.renew(pool, &x);
                    }
                    return;
                }
                if self.xlates.take(id).is_some() {
                    self.counters.shared_removed += 1;
                }
            }
            Some(a) => {
                if mine.is_some_and(|id| self.xlates.get(id).is_some_and(|x| x.mapped.0 == a)) {
                    return;
                }
                let other = self.xlates.by_mapped(PortClass::Tcp, (a, 0));
                for id in [mine, other].into_iter().flatten() {
                    self.end_xlate(flows, id);
                }
                let x = Xlate { class: PortClass::Tcp, real: (real, 0), mapped: (a, 0), sessions: Sessions::Cluster, block: None };
                if self.xlates.insert(now, x).is_ok() {
                    self.counters.shared_installed += 1;
                    self.asked.iter_mut().filter(|e| e.0 == pool && e.1 == real).for_each(|e| e.0 = u16::MAX);
                } else {
                    self.counters.exhausted += 1;
                }
            }
        }
    }

    /// Remove xlate `id` and end the connections holding it.
    fn end_xlate(&mut self, flows: &mut ConnTable, id: XlateId) {
        self.flows_ended_quietly(flows);
        let mark = id.0.wrapping_add(1);
        let ended = flows.remove_marked(|m| m == mark);
        self.annotate(flows, true);
        flows.drain_ended(|_| {});
        if let Some(x) = self.xlates.take(id) {
            self.counters.shared_removed += 1;
            if x.sessions != Sessions::Cluster {
                self.give_back(x);
            }
        }
        self.counters.shared_conns_ended += ended as u64;
    }

    /// Release the references of flows that ended before a forced removal
    /// (as `flows_ended`, without a time: the xlates they release stay).
    fn flows_ended_quietly(&mut self, flows: &mut ConnTable) {
        self.annotate(flows, true);
        let xl = &mut self.xlates;
        let mut freed = Vec::new();
        flows.drain_ended(|mark| {
            if let Some(x) = xl.release(Timestamp::ZERO, XlateId(mark.wrapping_sub(1))) {
                freed.push(x);
            }
        });
        for x in freed {
            self.counters.xlates_removed += 1;
            self.give_back(x);
        }
    }

    fn renew(&mut self, pool: u16, x: &Xlate) {
        if self.requests.len() >= SHARED_REQUESTS {
            self.counters.shared_requests_dropped += 1;
            return;
        }
        self.requests.push(SharedRequest { pool, real: x.real.0, held: Some(x.mapped.0) });
        self.counters.shared_renewals += 1;
    }

    /// Dynamic NAT on a cluster member: every third of the xlate timeout,
    /// renew the translations in use here (held by a connection, or used
    /// within the timeout) at the control node, which deletes those no
    /// member renews (controlplane::natshare). Off the packet path.
    fn renewals(&mut self, now: Timestamp) {
        if !self.plan.cluster || now < self.next_renewal {
            return;
        }
        let timeout = self.plan.xlate_timeout;
        self.next_renewal = now.saturating_add(Duration(timeout.0 / 3));
        let mut due = Vec::new();
        self.xlates.each(|_, x, refs, last| {
            if x.sessions == Sessions::Cluster && (refs > 0 || now.since(last) < timeout) {
                due.push(*x);
            }
        });
        for x in due {
            if let Some(p) = self.plan.pool_of(x.mapped.0) {
                self.renew(p, &x);
            }
        }
    }

    /// A fragment to a pool address, once the reassembler knows its
    /// datagram (`tuple`, from the first fragment, as received): the real
    /// endpoint every piece goes to — the first one's port and transport
    /// checksum rewritten, the others' address only (`FragNat::To`). On a
    /// cluster member whose PAT block another member holds: that member,
    /// where the pieces go untranslated (`FragNat::Holder`, N5 for
    /// fragments; the fragment owner learnt the port). `None`: not to a
    /// pool address (or a static rule's, translated on arrival). A pool
    /// address without a translation: `nat-no-xlate`.
    pub fn fragment_in(&mut self, now: Timestamp, ifx: IfIndex, tuple: &FiveTuple) -> Result<FragNat, DropReason> {
        let IpAddr::V4(dst) = tuple.dst else { return Ok(FragNat::None) };
        if !self.plan.mapped_side(ifx)
            || self.pool_of(dst).is_none()
            || self.plan.rules.inbound(dst, tuple.proto, tuple.dst_port).is_some()
        {
            return Ok(FragNat::None);
        }
        let class = nat_class(tuple.proto);
        let port = if class == Some(PortClass::Icmp) { tuple.src_port | tuple.dst_port } else { tuple.dst_port };
        if let Some(h) = self.plan.holder(dst, class, port).filter(|h| self.plan.cluster && h.node != self.plan.me) {
            self.counters.to_holder += 1;
            return Ok(FragNat::Holder(h.node));
        }
        let (real, rport) = self.real_of(now, None, class, dst, port)?;
        self.counters.fragments_in += 1;
        self.counters.translated_in += 1;
        Ok(FragNat::To(real, rport))
    }

    /// Outbound ICMP error: an error the real side sends about a packet
    /// that came in translated (its quote's destination, `tuple.dst`, is a
    /// real endpoint with a translation: an xlate, a static rule) leaves
    /// with the mapped address (and port) in the quote, and as its source
    /// when the real endpoint sent it (`rewrite_icmp_error_out`): the real
    /// addresses stay inside. `None`: that endpoint has no translation.
    pub fn icmp_error_out(&self, ifx: IfIndex, egress: IfIndex, tuple: &FiveTuple) -> Option<Snat> {
        let IpAddr::V4(real) = tuple.dst else { return None };
        let class = nat_class(tuple.proto);
        let port = if class == Some(PortClass::Icmp) { tuple.src_port | tuple.dst_port } else { tuple.dst_port };
        if let Some((id, with_port)) = self.by_real(class, real, port) {
            let x = self.xlates.get(id)?;
            return Some((x.mapped.0, with_port.then_some(x.mapped.1)));
        }
        self.static_out(ifx, egress, real, tuple.proto, port)
    }

    /// The mapping a static rule gives real source `(real, port)` of
    /// protocol `proto` arriving on `ifx` and leaving by `egress` (the
    /// first rule that matches must be static and allow that egress).
    fn static_out(&self, ifx: IfIndex, egress: IfIndex, real: Ipv4Addr, proto: u8, port: u16) -> Option<Snat> {
        let rule = self.plan.rules.outbound(ifx, real, proto, port).and_then(|i| self.plan.rules.rule(i))?;
        if rule.mapped_iface.is_some_and(|m| m != egress) {
            return None;
        }
        static_mapped(rule, real)
    }

    /// Insert `x`, held by the flow `tracked` (its mark); on failure its
    /// mapping goes back to its pool.
    fn bind(&mut self, now: Timestamp, x: Xlate, flows: &mut ConnTable, tracked: Tracked) -> Result<(), DropReason> {
        match self.xlates.insert(now, x) {
            Ok(id) => {
                if flows.mark(tracked.handle) == 0 {
                    flows.set_mark(tracked.handle, id.0.wrapping_add(1));
                } else if let Some(x) = self.xlates.release(now, id) {
                    // The flow holds another xlate already (it cannot: the
                    // lookup above found none for its endpoint); never
                    // leave this one without a holder.
                    self.give_back(x);
                }
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

    /// The fast path's questions (`fast.rs`) about an eligible TCP/UDP
    /// datagram of `tuple` received on `ifx`: what the general path's NAT
    /// steps would do with it, when that is simple. First `fast_in`:
    /// `Some(Some(..))` for return traffic to a PAT or dynamic-NAT xlate's
    /// mapped endpoint (translated to the real one, as by `inbound`),
    /// `Some(None)` when no inbound translation applies, `None` (decline:
    /// the general path decides) for a static rule's address or a pool
    /// address without an xlate. Changes nothing.
    #[inline(always)]
    pub fn fast_in(&self, ifx: IfIndex, tuple: &FiveTuple) -> Option<Option<(XlateId, Ipv4Addr, Option<u16>)>> {
        let IpAddr::V4(dst) = tuple.dst else { return None };
        // Not a mapped side: `fast_out` decides (and declines a protocol
        // without ports, as below).
        if !self.plan.mapped_side(ifx) {
            return Some(None);
        }
        let class = nat_class(tuple.proto)?;
        if self.plan.rules.inbound(dst, tuple.proto, tuple.dst_port).is_some() {
            return None;
        }
        if self.pool_of(dst).is_none() {
            return Some(None);
        }
        // As `real_of`.
        let (id, with_port) = self.by_mapped(Some(class), dst, tuple.dst_port)?;
        let x = self.xlates.get(id)?;
        Some(Some((id, x.real.0, with_port.then_some(x.real.1))))
    }

    /// Then, for a packet `fast_in` left alone, with the `mark` of its
    /// flow: `Out` — from the real endpoint of the flow's xlate, its
    /// source translated (as by `outbound`); `None` (the variant) — no
    /// xlate or rule is its source's, untranslated; `None` (decline) —
    /// anything else (a flow without a mark that a rule may translate).
    #[inline(always)]
    pub fn fast_out(&self, ifx: IfIndex, tuple: &FiveTuple, mark: u32) -> Option<FastNat> {
        let IpAddr::V4(src) = tuple.src else { return None };
        let class = nat_class(tuple.proto)?;
        if mark == 0 {
            // `outbound` would find no xlate and no rule: untranslated.
            let untouched = self.by_real(Some(class), src, tuple.src_port).is_none()
                && self.plan.rules.outbound(ifx, src, tuple.proto, tuple.src_port).is_none();
            return untouched.then_some(FastNat::None);
        }
        let (id, (mapped, port)) = self.marked(mark, Some(class), src, tuple.src_port)?;
        Some(FastNat::Out(id, mapped, port))
    }

    /// Start loading the xlate a flow's `mark` names (`prefetch_burst`).
    #[inline]
    pub fn prefetch_xlate(&self, mark: u32) {
        self.xlates.prefetch(XlateId(mark.wrapping_sub(1)));
    }

    /// The fast path translated a packet with xlate `id` (`inbound`:
    /// return traffic): as the general path counts and touches.
    #[inline]
    pub fn fast_done(&mut self, now: Timestamp, id: XlateId, inbound: bool) {
        self.xlates.touch(now, id);
        if inbound {
            self.counters.translated_in += 1;
        } else {
            self.counters.translated_out += 1;
        }
    }

    /// The flows of `flows` removed since the last call let go of their
    /// xlates: a per-session xlate left without connections goes at once
    /// and its port back to the pool (N3); a multi-session one waits for
    /// the xlate timeout. Call after anything that may remove flows.
    pub fn flows_ended(&mut self, now: Timestamp, flows: &mut ConnTable) {
        self.annotate(flows, true);
        flows.drain_ended(|mark| {
            if let Some(x) = self.xlates.release(now, XlateId(mark.wrapping_sub(1))) {
                self.counters.xlates_removed += 1;
                self.give_back(x);
            }
        });
    }

    /// The flow log's records since the last pass learn their
    /// translation (`flow_nat`) while their marks still name the xlates
    /// they used: called before any xlate is let go of (`hold_built`: a
    /// connection's first packet may be between its `Built` record and
    /// its mark), and with `hold_built` off before the log is drained.
    /// One check when there is nothing to do.
    #[inline]
    pub fn annotate(&self, flows: &mut ConnTable, hold_built: bool) {
        if flows.flow_log_unannotated() {
            flows.annotate_flow_log(hold_built, |r| self.flow_nat(r));
        }
    }

    /// How the other side of the firewall saw the connection of record
    /// `r` (`FlowNat`; `None`: untranslated): its xlate (the record's
    /// mark, which the initiator or the responder holds), else a static
    /// rule translating its initiator (outbound) or its responder (a
    /// connection to the rule's mapped address).
    pub fn flow_nat(&self, r: &FlowRecord) -> Option<FlowNat> {
        let t = &r.tuple;
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (t.src, t.dst) else { return None };
        let class = nat_class(t.proto);
        let icmp = class == Some(PortClass::Icmp);
        // An echo's identifier is both ends' "port" (in one tuple port).
        let (sport, dport) = if icmp { (t.src_port | t.dst_port, t.src_port | t.dst_port) } else { (t.src_port, t.dst_port) };
        let mut m = FlowNat { src, src_port: t.src_port, dst, dst_port: t.dst_port };
        let port = |mine: u16, id: u16| if icmp && mine == 0 { 0 } else { id };
        let map_src = |m: &mut FlowNat, (a, p): Snat| {
            m.src = a;
            if let Some(p) = p {
                m.src_port = port(t.src_port, p);
                if icmp && t.dst_port != 0 {
                    m.dst_port = p;
                }
            }
        };
        let map_dst = |m: &mut FlowNat, (a, p): Snat| {
            m.dst = a;
            if let Some(p) = p {
                m.dst_port = p;
            }
        };
        // The xlate the record's mark names, held by either end.
        if let Some((_, s)) = self.marked(r.mark, class, src, sport) {
            map_src(&mut m, s);
        } else if let Some((_, d)) = self.marked(r.mark, class, dst, dport) {
            map_dst(&mut m, d);
        } else if let Some(s) = self.static_out(r.ingress, r.egress, src, t.proto, sport) {
            map_src(&mut m, s);
        } else {
            map_dst(&mut m, self.static_out(r.egress, r.ingress, dst, t.proto, dport)?);
        }
        Some(m)
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

    /// Reap idle xlates (bounded), returning their mappings to the pools;
    /// renew the cluster's dynamic-NAT translations in use.
    pub fn timers(&mut self, now: Timestamp) {
        self.renewals(now);
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
                let addresses = self.plan.addrs.iter().filter(|a| usize::from(a.1) == i).count();
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
