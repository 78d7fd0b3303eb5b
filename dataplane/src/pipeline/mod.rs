//! One worker's run-to-completion packet pipeline, sans-IO.
//!
//! `Pipeline::process(now, in_port, buf)` takes one received frame, edits it
//! in place and returns a `Verdict`: `Forward(port)` (send the buffer out of
//! that port — the egress port for routed packets, the ingress port for the
//! ARP and ICMP echo replies we answer ourselves, the CCL port for a frame
//! wrapped for its owner), `Drop(reason)` or `Consumed`. Frames the pipeline
//! originates or releases later (ARP requests, CCL messages, held frames)
//! are handed to the driver by `drain_generated`. docs/packet-path.md walks
//! one frame through the stages.
//!
//! `Pipeline` is the composition of stages, each a struct in its own file
//! that owns its state and counters and is lent the neighbours it needs;
//! only this file holds `&mut Pipeline` and sequences them:
//!
//! | stage | file | owns |
//! |---|---|---|
//! | fast path | `fast.rs` | its switch and counter |
//! | ingress: L2, ARP, local delivery | `ingress.rs` | L2 counters |
//! | IPv4 checks and classification | `ipv4.rs` | nothing (steps) |
//! | fragments (R10) | `frag.rs` | reassembler, released-fragment slots |
//! | cluster roles (R1–R9) | `cluster/` | records, pending table, CCL endpoint |
//! | conntrack and ACL | `flows.rs` | flow table, rules |
//! | egress: neighbour, ARP hold, rewrite | `egress.rs`, `arphold.rs` | ARP cache, hold queue, generated frames |
//!
//! Shared vocabulary (`Rx`, `Outcome`, `Verdict`, ...) is in `context.rs`,
//! the interface table in `iface.rs`, the configuration and its checks in
//! `config.rs`, the accounting in `counters.rs`.
//!
//! The order of one frame (each step's drop reasons are listed in its
//! file): `process` counts it and offers it to the fast path; otherwise
//! `classify` runs ingress (L2, interface, ARP / IPv4 / IPv6), then
//! `ipv4_in`: `ipv4::parse`, `check_source`, `destination` (local: echo
//! reply or CCL input), TTL and route, the fragment step, the cluster plan
//! (who runs conntrack), conntrack, and egress. Frames that come back out of
//! a stage to be decided again — a forwarded or relayed frame unwrapped from
//! the CCL, the frames of a received batch, frames an owner reply releases,
//! fragments released by their first fragment, a proxied connection's
//! early client segments released by the server's SYN-ACK, a host's first
//! packets released by its dynamic-NAT translation (a cluster member, N4)
//! — are run through the stages here (`ccl`, `release_parked`,
//! `batch_frames`, `release_fragments`, `release_held`,
//! `release_nat_held`; the holds' mechanism is `hold::FrameHold`), so the
//! stages never call each other back.
//!
//! Invariants:
//! - `process` never allocates, locks, logs or panics (slice accesses are
//!   behind `new_checked` views or `get`), and every call ends in exactly one
//!   of: a drop counter, `forwarded`, `consumed`, `arp_replies`,
//!   `icmp_echo_replies`. So `packets == forwarded + consumed + arp_replies +
//!   icmp_echo_replies + Σ drops`.
//! - All memory (flow table, ARP cache, generated-frame queue, slots,
//!   counters) is reserved by `Pipeline::new`.
//! - The pipeline mutates the frame only once it has decided to emit it; a
//!   dropped frame is byte-for-byte unchanged (a failed `prepend` leaves the
//!   buffer untouched, so `NoHeadroom` too). Exception: a datagram received
//!   on the CCL port that carried a forwarded frame is dropped as its inner
//!   frame (the outer headers were already trimmed).

mod arphold;
pub mod cluster;
mod config;
pub(crate) mod context;
mod counters;
mod egress;
mod fast;
mod flows;
mod hold;
pub mod frag;
mod icmperr;
mod iface;
mod ingress;
pub(crate) mod ipv4;
pub(crate) mod ipv6;
mod transit6;
mod nat;
mod synproxy;
pub mod trace;

pub use arphold::ArpHoldCounters;
pub use cluster::{
    ClusterCounters, ClusterCountersSnapshot, ClusterSpec, ClusterSpecError, Role, SyncProgress,
    DEFAULT_DIRECTOR_HOLD, DEFAULT_SYN_GUARD, MAX_HELD, MAX_PENDING, POOL_SLOTS, SYN_GUARD_PENDING, SYNC_MARKER_EVERY,
    SYNC_MARKER_FOR, SYNC_WAIT,
};
pub use config::{
    InterfaceSpec, PipelineConfig, PipelineError, Policy, RouteSpec, RuleSpec, DEFAULT_MTU, MAX_MTU, MIN_MTU,
};
pub use iface::ReversePath;
pub use ipv6::{Ipv6PathCounters, Ipv6Spec, Ipv6SpecError, Route6Spec};
pub use context::{FragNote, HandoffNote, Verdict};
pub use counters::{Counters, Ipv6Counters, PortCounters};
pub use egress::MAX_GENERATED;
pub use frag::{FragConfig, FragCounters, FragSnapshot};
pub use icmperr::{IcmpErrorConfig, IcmpErrorCounters};
pub use nat::{
    NatCounters, NatInbound, NatPlan, NatSpec, NatSpecError, PatSpec, PoolInfo, PoolSpec, SharedRequest,
    PENDING_HOLD_PER_HOST, PENDING_HOLD_SLOTS, PENDING_HOLD_TIMEOUT, SHARED_REQUESTS,
};

use crate::acl::RuleInfo;
use crate::arp::{ArpCache, ArpInfo};
use crate::buf::PacketBuf;
use crate::cluster::MemberSet;
use crate::conntrack::{ConnInfo, ConnTable};
use crate::frag::ReasmCounters;
use crate::route::{IfIndex, RouteInfo, RouteTable};
use crate::slots::SlotBuf;
use crate::types::{DropReason, Duration, Epoch, FiveTuple, NodeId, PortId, Timestamp, WorkerId};
use crate::wire::ethernet::{ethertype, EthernetFrame};
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::tcp::TcpPacket;
use crate::wire::udp::UdpPacket;
use cluster::ccl_in::CclNext;
use cluster::plan::Plan;
use cluster::send::Wrap;
use cluster::{ClusterPath, Link};
use context::{Outcome, Rx, Via};
use counters::Accounting;
use egress::{Egress, Route};
use fast::{Fast, FastPath, Parts};
use flows::Flows;
use frag::{frag_track, Admit, FragPath, FragTrack, Release};
use icmperr::{Back, ErrorKind, IcmpErrors};
use iface::{Iface, Interfaces};
use ingress::Ingress;
use ipv4::{Destination, Transit};
use nat::nat_pending;
use std::net::{IpAddr, Ipv4Addr};
use crate::cluster::SeqDelta;
use crate::conntrack::{tcp_flags, Splice};
use crate::types::Direction;
use crate::wire::synproxy::Segment;
use context::Xlate;
use synproxy::ProxyStep;
pub use synproxy::{SynProxyCounters, HOLD_PER_CONN, HOLD_SLOTS, HOLD_TIMEOUT};

/// The window the SYN proxy's SYN-ACK offers the client (unscaled): what
/// Linux offers without window scaling (44 segments of 1460 bytes). Until
/// the server answers the proxy holds the client's first few segments
/// (`synproxy::HOLD_PER_CONN`) and drops the rest (it retransmits).
const PROXY_WINDOW: u16 = 64_240;

/// Budget of flow slots inspected per `poll_timers` call.
pub const EXPIRE_BUDGET: usize = 1024;

/// Below this many flows `Pipeline::prefetch_burst` does nothing: 8192
/// slots of 128 bytes plus their index are about 1.1 MiB, within a core's
/// L2 cache on current server CPUs (2 MiB on the bench host's EPYC).
pub const PREFETCH_MIN_FLOWS: usize = 8192;


/// N3: the control node, when a packet of `tuple` (received on `ifx`,
/// routed out of `egress`) that opens a multi-session PAT translation and
/// has no flow here must go there (`None`: this node is the control node,
/// none is known, or the packet is not such).
#[cold]
#[inline(never)]
fn to_control(
    cl: &ClusterPath,
    n: &nat::NatPath,
    flows: &ConnTable,
    ifx: IfIndex,
    egress: IfIndex,
    tuple: &FiveTuple,
) -> Option<NodeId> {
    let c = cl.control_elsewhere()?;
    (n.multi_session_out(ifx, egress, tuple) && flows.lookup(tuple).is_none()).then_some(c)
}

/// One worker's pipeline state: its stages.
pub struct Pipeline {
    ifaces: Interfaces,
    routes: RouteTable,
    flows: Flows,
    egress: Egress,
    fast: FastPath,
    ingress: Ingress,
    acct: Accounting,
    /// Reassembler and released-fragment slots.
    frag: Box<FragPath>,
    /// Cluster roles; `None` in single-node mode.
    cluster: Option<Box<ClusterPath>>,
    /// The ICMP errors this node sends (`icmperr`).
    icmp: Box<IcmpErrors>,
    /// NAT (`set_nat`); `None`: no translation, and the fast path runs.
    nat: Option<Box<nat::NatPath>>,
    /// Dynamic NAT on a cluster member (N4): a host's first packets, held
    /// while the control node is asked for its translation, keyed by the
    /// host (`nat::pending_hold`); `None` off a cluster or without NAT.
    nat_hold: Option<Box<hold::FrameHold<Ipv4Addr>>>,
    /// IPv6 forwarding (`set_ipv6`; single node, issue 16).
    ipv6: Option<Box<ipv6::Ipv6Path>>,
    /// Bytes per frame slot of the stages' frame pools.
    slot_len: usize,
    /// This pipeline is worker `worker` of `workers` (`set_worker`).
    worker: WorkerId,
    workers: u16,
    /// What the last `Handoff` verdict's frame carries to its worker.
    handoff: Option<HandoffNote>,
    /// A running per-connection trace (`trace_start`); `None`: off, and
    /// `process` takes the untraced path. A finished one waits in
    /// `trace_done` for `trace_events`.
    trace: Option<Box<trace::Tracer>>,
    trace_done: Option<Box<trace::Tracer>>,
}

/// Where the IPv4 stage's decision leads.
enum Step {
    /// Route it from here (after conntrack ran, as owner or single node).
    /// `dnat`: a fragment to a pool address, translated to its real
    /// endpoint (`NatPath::fragment_in`).
    Route {
        route: Route,
        icmp_error: bool,
        xlate: Option<context::Xlate>,
        snat: Option<nat::Snat>,
        dnat: Option<nat::Snat>,
    },
    /// Another node owns it, or we must ask first.
    Cluster(Plan, FiveTuple, Rx),
    /// A fragment whose fragment owner is this other node (R10).
    FragOwner(NodeId),
    /// A fragment whose connection another worker of this node owns: it
    /// goes there with what this worker's reassembler learnt (`steer`).
    Handoff(WorkerId, HandoffNote),
    /// The SYN proxy sends this segment in the frame's place (`synproxy`),
    /// with the owner's sequence translation and, through NAT, from the
    /// sender's mapped endpoint; then, for the server's SYN-ACK, the
    /// segments held for the client's tuple (`release_held`).
    Proxy(ProxyStep, Option<context::Xlate>, Option<nat::Snat>, Option<FiveTuple>),
}

/// What `ipv4_in` was told about the frame by ingress.
#[derive(Copy, Clone)]
struct Arrival {
    in_port: PortId,
    ifx: IfIndex,
    ing: Iface,
    l2: usize,
    tags: u8,
    l2_broadcast: bool,
}

impl Pipeline {
    /// Validate the configuration and reserve all memory, with the default
    /// fragment limits (`FragConfig::default()`, ≈ 5.1 MiB).
    pub fn new(cfg: PipelineConfig) -> Result<Self, PipelineError> {
        Self::with_fragments(cfg, FragConfig::default())
    }

    /// `new` with explicit fragment limits (docs/fragments.md).
    pub fn with_fragments(cfg: PipelineConfig, frags: FragConfig) -> Result<Self, PipelineError> {
        let built = config::build(&cfg)?;
        // Every frame pool's slots hold the longest frame wrapped in a CCL
        // datagram (2 KiB up to MTU 1500).
        let slot_len = crate::slots::slot_len_for(
            config::max_frame(&cfg),
            2 * crate::ccl::FRAME_OVERHEAD,
        );
        let cluster = match &cfg.cluster {
            None => None,
            Some(c) => {
                let ccl = config::ccl_iface(&cfg, c)?;
                Some(Box::new(ClusterPath::new(c, ccl, cfg.flow_capacity, slot_len).map_err(PipelineError::Cluster)?))
            }
        };
        let frag = Box::new(FragPath::new(&frags, slot_len).map_err(PipelineError::Fragments)?);
        let arp = ArpCache::new(cfg.arp_capacity, cfg.arp_timeout, cfg.arp_retry);
        let mut flows = Flows::new(ConnTable::new(cfg.flow_capacity, cfg.timeouts), built.acl, slot_len);
        if let Some(c) = &cfg.cluster {
            // Any member validates any member's SYN-proxy cookie.
            flows.proxy.share(synproxy::proxy_key(&c.key));
        }
        Ok(Pipeline {
            ifaces: built.ifaces,
            routes: built.routes,
            flows,
            egress: Egress::new(arp, cfg.static_neighbors.clone(), slot_len),
            fast: FastPath::new(),
            ingress: Ingress::new(),
            acct: Accounting::new(built.max_port),
            frag,
            cluster,
            icmp: Box::new(IcmpErrors::new(cfg.icmp_errors)),
            nat: None,
            nat_hold: None,
            ipv6: None,
            slot_len,
            worker: WorkerId(0),
            workers: 1,
            handoff: None,
            trace: None,
            trace_done: None,
        })
    }

    /// Process one received frame. No allocation, no panic, no logging.
    pub fn process<B: PacketBuf>(&mut self, now: Timestamp, in_port: PortId, buf: &mut B) -> Verdict {
        if self.trace.is_some() {
            return self.process_traced(now, in_port, buf);
        }
        self.process_frame(now, in_port, buf)
    }

    /// `process` while a trace runs: the frame's event if it matches.
    #[cold]
    #[inline(never)]
    fn process_traced<B: PacketBuf>(&mut self, now: Timestamp, in_port: PortId, buf: &mut B) -> Verdict {
        let Some(want) = self.trace_wants(now, buf.data()) else {
            return self.process_frame(now, in_port, buf);
        };
        let len = buf.data().len();
        let v = self.process_frame(now, in_port, buf);
        let outcome = match v {
            Verdict::Forward(p) => Outcome::Forward(p),
            Verdict::Drop(r) => Outcome::Drop(r),
            Verdict::Consumed => Outcome::Consumed,
            Verdict::Handoff(w) => Outcome::Handoff(w),
        };
        self.trace_record(now, want, len, trace::TraceFrom::Port(in_port), outcome);
        v
    }

    /// A trace's interest in a frame: its tuple and TCP flags, the
    /// cluster's hop note cleared.
    fn trace_wants(&mut self, now: Timestamp, frame: &[u8]) -> Option<(FiveTuple, u8)> {
        let want = self.trace.as_deref()?.wants(now, frame)?;
        if let Some(cl) = self.cluster.as_deref_mut() {
            cl.trace_to = None;
        }
        Some(want)
    }

    fn trace_record(&mut self, now: Timestamp, (tuple, tcp_flags): (FiveTuple, u8), len: usize, from: trace::TraceFrom, o: Outcome) {
        use trace::TraceVerdict as V;
        let hop = self.cluster.as_deref().and_then(|cl| cl.trace_to.map(|to| (cl.ccl_port(), to)));
        let verdict = match o {
            Outcome::Forward(p) | Outcome::ArpReply(p) | Outcome::EchoReply(p) => match hop {
                Some((ccl, to)) if ccl == p => V::Member(to),
                _ => V::Port(p),
            },
            Outcome::Consumed => hop.map_or(V::Kept, |(_, to)| V::Member(to)),
            Outcome::Drop(r) => V::Drop(r),
            Outcome::Handoff(w) => V::Worker(w),
        };
        let role = self.cluster_role(now, &tuple).map(|(r, o)| (r.as_str(), o));
        let e = trace::TraceEvent { at: now, worker: self.worker, tuple, len: len.min(usize::from(u16::MAX)) as u16, tcp_flags, from, role, verdict };
        if let Some(t) = self.trace.as_deref_mut() {
            t.record(e);
        }
    }

    /// Start a trace of the frames `filter` matches until `until`
    /// (replacing any trace and its events; reserves its event store).
    pub fn trace_start(&mut self, filter: trace::TraceFilter, until: Timestamp) {
        self.trace_done = None;
        self.trace = Some(Box::new(trace::Tracer::new(filter, until)));
    }

    /// The current or last trace: filter, deadline, events, events lost.
    pub fn trace_events(&self) -> Option<(trace::TraceFilter, Timestamp, Vec<trace::TraceEvent>, u64)> {
        let t = self.trace.as_deref().or(self.trace_done.as_deref())?;
        Some((t.filter, t.until, t.events().to_vec(), t.lost))
    }

    /// The frame's processing, traced or not: one copy (never inlined), so
    /// the stages it inlines (the fast path's, `classify`) keep a single
    /// call site and stay inlined as before the trace existed.
    #[inline(never)]
    fn process_frame<B: PacketBuf>(&mut self, now: Timestamp, in_port: PortId, buf: &mut B) -> Verdict {
        self.acct.rx(in_port, buf.data().len());
        if self.fast.enabled {
            let parts = Parts {
                ifaces: &self.ifaces,
                routes: &self.routes,
                egress: &mut self.egress,
                flows: &mut self.flows,
                cluster: self.cluster.as_deref_mut(),
                nat: self.nat.as_deref_mut(),
            };
            if let Some(f) = self.fast.forward(parts, now, in_port, buf) {
                let outcome = self.fast_done(now, in_port, f, buf);
                return self.account(outcome, buf);
            }
        }
        let outcome = self.classify(now, in_port, buf, Rx::PORT);
        self.account(outcome, buf)
    }

    /// A hint before processing a received burst: start loading the flow
    /// table entries its IPv4 TCP/UDP frames will look up, in two passes
    /// over up to 64 frames at a time (every frame's index bucket, then
    /// every matching slot; with NAT a third, the xlate each matching
    /// slot's mark names), so that the cache misses of the whole burst
    /// overlap instead of stalling packet after packet. Reads only; changes
    /// nothing; a frame it cannot read is skipped (its `process` call will
    /// say why).
    ///
    /// Skipped while the table holds fewer than `PREFETCH_MIN_FLOWS` flows:
    /// then slots and index fit in the L2 cache and the prefetches would
    /// only cost (about 8 ns per packet with 1024 flows on the DPDK bench).
    #[inline]
    pub fn prefetch_burst<'a>(&self, frames: impl Iterator<Item = &'a [u8]>) {
        const CHUNK: usize = 64;
        let conn = &self.flows.table;
        if conn.len() < PREFETCH_MIN_FLOWS {
            return;
        }
        let mut frames = frames.peekable();
        while frames.peek().is_some() {
            let mut hashes = [0u64; CHUNK];
            let mut n = 0;
            for f in frames.by_ref().take(CHUNK) {
                if let Some(t) = hint_tuple(f) {
                    let h = conn.prefetch_hash(&t);
                    conn.prefetch_bucket(h);
                    hashes[n] = h;
                    n += 1;
                }
            }
            for &h in &hashes[..n] {
                conn.prefetch_slot(h);
            }
            // NAT: the xlates the flows name (their marks).
            if let Some(nat) = self.nat.as_deref() {
                for &h in &hashes[..n] {
                    conn.slot_marks(h, |m| nat.prefetch_xlate(m));
                }
            }
        }
    }

    /// Map an outcome to counters and a verdict.
    fn account<B: PacketBuf>(&mut self, outcome: Outcome, buf: &B) -> Verdict {
        let c = &mut self.acct;
        let port = match outcome {
            Outcome::Drop(r) => {
                if let Some(d) = c.drops.get_mut(r.index()) {
                    *d += 1;
                }
                return Verdict::Drop(r);
            }
            Outcome::Forward(p) => {
                c.forwarded += 1;
                p
            }
            Outcome::Consumed => {
                c.consumed += 1;
                return Verdict::Consumed;
            }
            Outcome::Handoff(w) => {
                c.handed_off += 1;
                return Verdict::Handoff(w);
            }
            Outcome::ArpReply(p) => {
                c.arp_replies += 1;
                p
            }
            Outcome::EchoReply(p) => {
                c.icmp_echo_replies += 1;
                p
            }
        };
        c.tx(port, buf.data().len());
        Verdict::Forward(port)
    }

    /// The general path for one frame. `rx` says how the frame came: from
    /// a port (normal), or unwrapped from a CCL message (processed as
    /// received on the named interface: no L2 destination check, no ARP,
    /// IPv4 or IPv6).
    fn classify<B: PacketBuf>(&mut self, now: Timestamp, in_port: PortId, buf: &mut B, rx: Rx) -> Outcome {
        if let Some(cl) = self.cluster.as_deref() {
            // Fenced (the lease ran out): no data-port frame, before any
            // state changes (the fast path declines fenced frames); CCL
            // datagrams are still opened, their frames dropped in
            // `ipv4_decide`.
            if rx.via == Via::Port && cl.fenced(now) && in_port != cl.ccl_port() {
                return DropReason::ClusterFenced.into();
            }
        }
        let l2 = match self.ingress.l2(buf.data()) {
            Ok(l2) => l2,
            Err(r) => return r.into(),
        };
        if let Via::Ccl(ifx) = rx.via {
            // A frame unwrapped from the CCL: it was addressed to the
            // forwarder's MAC; it is processed as received on `ifx`.
            let Some(ing) = self.ifaces.get(ifx) else {
                return DropReason::CclMalformed.into();
            };
            let at = Arrival { in_port, ifx, ing, l2: l2.len, tags: l2.tags, l2_broadcast: false };
            return match l2.ethertype {
                ethertype::IPV4 => self.ipv4_in(now, at, rx, buf),
                // (Checked again: the sender's checks are not trusted.)
                ethertype::IPV6 => transit6::upper_layer(buf.data().get(l2.len..).unwrap_or(&[]))
                    .and_then(|u| self.ipv6_in(now, at, rx, u, buf)),
                _ => Err(DropReason::CclMalformed),
            }
            .unwrap_or_else(Outcome::Drop);
        }
        let Some((ifx, ing)) = self.ifaces.by_port(in_port, l2.vlan) else {
            return DropReason::NoInterface.into();
        };
        // IPv6 multicast groups (33:33:…): ND's solicited-node and
        // all-nodes groups, for an interface that speaks IPv6.
        let v6_group = l2.ethertype == ethertype::IPV6
            && crate::wire::icmpv6::is_multicast_mac(l2.dst)
            && self.ipv6.as_deref().is_some_and(|v| v.on(ifx));
        if l2.dst != ing.mac && !l2.broadcast() && !v6_group {
            return DropReason::EthNotForUs.into();
        }
        match l2.ethertype {
            ethertype::ARP => self.ingress.arp_in(now, &mut self.egress, in_port, ifx, ing, l2.len, buf),
            ethertype::IPV4 => {
                let at = Arrival { in_port, ifx, ing, l2: l2.len, tags: l2.tags, l2_broadcast: l2.broadcast() };
                self.ipv4_in(now, at, rx, buf).unwrap_or_else(Outcome::Drop)
            }
            ethertype::IPV6 => {
                // Classified and counted; checked far enough for the
                // IPv6 stage (header, payload length, the bounded walk).
                let u = match self.ingress.ipv6_in(buf.data().get(l2.len..).unwrap_or(&[])) {
                    Ok(u) => u,
                    Err(r) => return r.into(),
                };
                let at = Arrival { in_port, ifx, ing, l2: l2.len, tags: l2.tags, l2_broadcast: l2.broadcast() };
                self.ipv6_in(now, at, rx, u, buf).unwrap_or_else(Outcome::Drop)
            }
            _ => DropReason::EthUnsupportedType.into(),
        }
    }

    /// IPv4 input; then, if this frame was the first fragment of a
    /// datagram with fragments held, release them.
    fn ipv4_in<B: PacketBuf>(&mut self, now: Timestamp, at: Arrival, rx: Rx, buf: &mut B) -> Result<Outcome, DropReason> {
        if rx.via == Via::Port && rx.frag.is_none() {
            let l3 = buf.data().get(at.l2..).unwrap_or(&[]);
            if Ipv4Packet::new_checked_header(l3).is_ok_and(|ip| ip.total_len() > at.ing.mtu) {
                return self.split_oversize(now, at, rx, buf);
            }
        }
        let mut release = None;
        let r = self.ipv4_decide(now, at, rx, buf, &mut release);
        if let Some(rel) = release {
            self.release_fragments(now, &rel);
        }
        if let Err(reason) = r {
            self.icmp_error(now, &at, rx, reason, buf);
        }
        r
    }

    /// A datagram larger than its ingress interface's MTU. Without DF and
    /// not itself a fragment, it is what a port hands over after the
    /// kernel reassembled its fragments (DPDK's af_packet PMD joins its
    /// fanout group with `PACKET_FANOUT_FLAG_DEFRAG`): it is split back
    /// into fragments of the ingress MTU, as they were on the wire, and
    /// each is decided as received — the first in `buf`, the others from
    /// the fragment path's slots — so the cluster and the fragment path
    /// see what any other port would give them. Anything else that large
    /// is dropped (`Ipv4OverMtu`).
    #[cold]
    fn split_oversize<B: PacketBuf>(&mut self, now: Timestamp, at: Arrival, rx: Rx, buf: &mut B) -> Result<Outcome, DropReason> {
        let s = {
            let l3 = buf.data().get(at.l2..).unwrap_or(&[]);
            let ip = ipv4::parse(l3)?;
            if ip.dont_frag() || ip.is_fragment() {
                return Err(DropReason::Ipv4OverMtu);
            }
            crate::frag::split::plan(buf.data(), at.l2, usize::from(at.ing.mtu)).map_err(|_| DropReason::Ipv4OverMtu)?
        };
        if !self.frag.stage_split(buf.data(), &s) {
            return Err(DropReason::FragNoBuffer);
        }
        let len = buf.data().len();
        let first = crate::frag::split::cut_first(buf.data_mut(), &s).unwrap_or(len);
        buf.trim_back(len - first);
        let outcome = self.ipv4_in(now, at, rx, buf);
        // The first piece's handoff note outlives the later pieces'.
        let first_note = self.handoff.take();
        while let Some((i, mut mem, start, end)) = self.frag.next_staged() {
            let mut sb = SlotBuf::over(&mut mem, start, end);
            let o = self.classify(now, at.in_port, &mut sb, rx);
            let (start, end) = (sb.start, sb.end);
            let handed = self.handoff.take().map(|n| (at.in_port, n));
            self.frag.finish_released(i, mem, start, end, o, handed);
        }
        self.handoff = first_note;
        outcome
    }

    /// A datagram dropped for `reason` (and unchanged): send the ICMP
    /// error it earns, if any (`icmperr`: which drops, the never-send
    /// rules, the rate limit).
    #[cold]
    fn icmp_error<B: PacketBuf>(&mut self, now: Timestamp, at: &Arrival, rx: Rx, reason: DropReason, buf: &B) {
        use DropReason::{AclDenied, FragNeeded, LocalUnhandled, NoRoute, TtlExceeded};
        if !matches!(reason, TtlExceeded | NoRoute | FragNeeded | AclDenied | LocalUnhandled) {
            return;
        }
        let Some(l3) = buf.data().get(at.l2..) else { return };
        let Ok(ip) = Ipv4Packet::new_checked_header(l3) else { return };
        let kind = match reason {
            DropReason::TtlExceeded => ErrorKind::TimeExceeded,
            DropReason::NoRoute => ErrorKind::NetUnreachable,
            DropReason::FragNeeded => {
                let Some(eg) = self.routes.lookup(ip.dst()).and_then(|r| self.ifaces.get(r.iface)) else { return };
                ErrorKind::FragNeeded(eg.mtu)
            }
            DropReason::AclDenied if self.icmp.config().admin_prohibited => ErrorKind::AdminProhibited,
            DropReason::LocalUnhandled if rx.via == Via::Port && ip.dst() == at.ing.addr => match ip.protocol() {
                crate::types::ip_proto::UDP => ErrorKind::PortUnreachable,
                crate::types::ip_proto::TCP | crate::types::ip_proto::ICMP => return,
                _ => ErrorKind::ProtocolUnreachable,
            },
            _ => return,
        };
        let Some(to) = icmperr::may_answer(l3, at.l2_broadcast, &self.ifaces) else {
            self.icmp.refuse();
            return;
        };
        let Some((ifx, next_hop)) = self.routes.lookup(to).map(|r| (r.iface, r.next_hop)) else {
            self.icmp.counters.no_route += 1;
            return;
        };
        let Some(eg) = self.ifaces.get(ifx) else { return };
        let Ok(Some(mac)) = self.egress.resolve(now, eg, next_hop, ifx) else {
            self.icmp.counters.no_neighbor += 1;
            return;
        };
        let back = Back { port: eg.port, dst_mac: mac, src_mac: eg.mac, vlan: eg.vlan, addr: eg.addr };
        self.icmp.send(now, kind, l3, to, back);
    }

    /// The IPv4 stage's steps in order (`ipv4.rs`), then the fragment
    /// step, the cluster plan, conntrack, egress.
    fn ipv4_decide<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        at: Arrival,
        rx: Rx,
        buf: &mut B,
        release: &mut Option<Release>,
    ) -> Result<Outcome, DropReason> {
        let Arrival { in_port, ifx, ing, l2, tags, l2_broadcast } = at;
        // A cluster member: a datagram to a PAT port whose block another
        // member holds goes there as it is (N5; no query, no record).
        if let (Some(n), Some(cl), Via::Port, None) = (self.nat.as_deref(), self.cluster.as_deref_mut(), rx.via, rx.frag) {
            let l3 = buf.data().get(l2..).unwrap_or(&[]);
            // (Fragments go to their fragment owner, which learns the
            // datagram's port: `NatPath::fragment_in`.)
            if let Some(node) = ipv4::parse(l3).ok().filter(|ip| !ip.is_fragment()).and_then(|_| n.holder_elsewhere(ifx, l3)) {
                let iface = u8::try_from(ifx.0).map_err(|_| DropReason::CclMalformed)?;
                let mut link = Link { egress: &mut self.egress, ifaces: &self.ifaces };
                let port = cl.wrap(now, &mut link, buf, Wrap::Forward, iface, node, None)?;
                if let Some(n) = self.nat.as_deref_mut() {
                    n.counters.to_holder += 1;
                }
                return Ok(Outcome::Forward(port));
            }
        }
        // NAT inbound: a datagram to a mapped address becomes one to the
        // real address before anything else looks at it (`nat.rs`); a
        // frame handed on or released went through it on arrival. One
        // from the CCL was not translated by its sender (a datagram to a
        // mapped endpoint is sent on untranslated, N5; any other's
        // destination is real already).
        let mut rx = rx;
        if let (Some(n), false, None) = (self.nat.as_deref_mut(), rx.nat_in, rx.frag) {
            if let Some(l3) = buf.data_mut().get_mut(l2..) {
                // Only a datagram that passes the IPv4 checks below (the
                // others are dropped there, untranslated, no xlate touched),
                // without the link's padding.
                if let Ok((total, frag)) = ipv4::parse(l3).map(|ip| (usize::from(ip.total_len()), ip.is_fragment())) {
                    rx.nat_in = n.inbound(now, ifx, &mut l3[..total], frag)?;
                }
            }
        }
        // --- Parse and decide, holding only a shared borrow of the frame. ---
        let mut frag_dnat = None;
        let step = 'decide: {
            let ip = ipv4::parse(buf.data().get(l2..).unwrap_or(&[]))?;
            ipv4::check_source(&ip, &self.ifaces)?;
            let is_frag = ip.is_fragment();
            if ipv4::destination(&ip, &ing, &self.ifaces, l2_broadcast)? == Destination::Local {
                // Fragments to the node itself are not reassembled.
                if is_frag {
                    return Err(self.frag.local());
                }
                if rx.via != Via::Port {
                    return Err(DropReason::LocalUnhandled);
                }
                if self.cluster.as_deref().is_some_and(|cl| cl.is_ccl_datagram(ifx, &ip)) {
                    return self.ccl(now, in_port, buf);
                }
                return ingress::local_in(in_port, ing, l2, buf);
            }
            // A frame from the CCL, released or held while fenced: dropped
            // before the cluster or conntrack see it (data ports are
            // fenced in `process`).
            if self.cluster.as_deref().is_some_and(|cl| cl.fenced(now)) {
                return Err(DropReason::ClusterFenced);
            }
            let (src, dst) = (ip.src(), ip.dst());
            // A fragment to a pool address is routed once translated
            // (below): its mapped destination needs no route.
            let pooled_frag = is_frag && self.nat.as_deref().is_some_and(|n| n.plan().pool_of(dst).is_some());
            let route = match self.routes.lookup(dst) {
                Some(r) => r,
                None if pooled_frag => crate::route::RouteResult { iface: ifx, next_hop: dst },
                None => return Err(DropReason::NoRoute),
            };
            let egress = route.iface;
            // Fragments: find the datagram's L4 header.
            let mut note = rx.frag;
            let mut piece = None;
            if is_frag {
                let Some(info) = crate::frag::ipv4_fragment(&ip)? else {
                    return Err(DropReason::Ipv4Fragment);
                };
                piece = Some((info.offset, info.more));
                if note.is_none() {
                    // R10: a fragment received on a port goes to its
                    // fragment owner; one from the CCL is ours to handle.
                    if let Some(fo) = self.cluster.as_deref().and_then(|cl| cl.other_fragment_owner(&info.key)) {
                        if rx.via == Via::Port {
                            break 'decide Step::FragOwner(fo);
                        }
                        // From the CCL and not ours as fragment owner: the
                        // fragment owner sent it to us as the flow owner (it
                        // never goes back: no loop).
                        rx.hinted = true;
                    }
                    match self.frag.admit(now, &info, ip.payload(), rx.hinted)? {
                        Admit::Held => return Ok(Outcome::Consumed),
                        Admit::First(n) => {
                            *release = Release::new(info.key, n, in_port, rx, buf.data(), l2);
                            note = Some(n);
                        }
                        Admit::Later(n) => note = Some(n),
                    }
                }
            }
            // Several workers: a fragment's datagram is decided by the
            // worker that owns its connection (this one collected it as the
            // fragment worker, `steer`).
            if let (Some(n), true) = (note, self.workers > 1) {
                // With NAT: the worker holding the translation of a
                // datagram to a mapped address (`steer`).
                let w = self.datagram_worker(&n.tuple);
                if w != self.worker {
                    break 'decide Step::Handoff(w, HandoffNote { rx: Rx { frag: Some(n), ..rx } });
                }
            }
            let mut egress = egress;
            let mut next_hop = route.next_hop;
            let (tuple, l4, lookup_only) = match note {
                Some(n) => {
                    let (off, more) = piece.unwrap_or((0, false));
                    let t = frag_track(&n.l4, off, ip.payload().len(), more)?;
                    let mut tuple = n.tuple;
                    // A fragment to a pool address: its datagram's real
                    // endpoint, now that its ports are known; routed there.
                    if let (Some(nat), false) = (self.nat.as_deref_mut(), rx.nat_in) {
                        match nat.fragment_in(now, ifx, &n.tuple)? {
                            nat::FragNat::None => {}
                            nat::FragNat::To(real, port) => {
                                tuple.dst = IpAddr::V4(real);
                                tuple.dst_port = port.unwrap_or(tuple.dst_port);
                                let r = self.routes.lookup(real).ok_or(DropReason::NoRoute)?;
                                (egress, next_hop) = (r.iface, r.next_hop);
                                frag_dnat = Some((real, port));
                                rx.nat_in = true;
                            }
                            // A cluster member: the block's holder
                            // translates it (its flow owner; it admits the
                            // piece as such, never sends it back).
                            nat::FragNat::Holder(h) => {
                                break 'decide Step::Cluster(Plan::Forward(h), tuple, Rx { frag: Some(n), ..rx });
                            }
                        }
                    }
                    if pooled_frag && !rx.nat_in {
                        // Not translated (a static rule's address is
                        // translated on arrival): routed as it is.
                        let r = self.routes.lookup(dst).ok_or(DropReason::NoRoute)?;
                        (egress, next_hop) = (r.iface, r.next_hop);
                    }
                    (tuple, Some(*t.l4()), matches!(t, FragTrack::Lookup(_)))
                }
                None => match ipv4::transit_l4(&ip)? {
                    Transit::Flow(t, l4) => (t, Some(l4), false),
                    Transit::IcmpError(t) => (t, None, false),
                },
            };
            // Cluster roles: who runs conntrack on this packet?
            if let Some(cl) = self.cluster.as_deref_mut().filter(|_| !rx.force_own) {
                // A fragment at its fragment owner (from a port or the
                // CCL) is decided as if received on a port; one the
                // fragment owner sent here with a hint, as at the owner.
                // A frame a data node sent to this control node (N3), as
                // if received here.
                let as_port = (note.is_some() && !rx.hinted) || rx.to_control;
                let prx = if as_port { Rx { via: Via::Port, ..rx } } else { rx };
                let arx = Rx { frag: note, ..rx };
                let mut plan = match cl.plan_known(now, &self.flows.table, &tuple, l4.as_ref(), prx) {
                    Some(plan) => plan,
                    None if prx.via == Via::Port && fast::spoofed_source(&self.ifaces, &self.routes, ifx, src) => {
                        Plan::Drop(DropReason::ReversePath)
                    }
                    // A client's ACK returning a SYN-proxy cookie (the
                    // cluster's: this member's or another's): its
                    // connection opens where the director says
                    // (`Flows::track` here, if elected).
                    None if note.is_none() && l4.as_ref().is_some_and(|l| self.flows.proxy.valid(now, &tuple, l)) => {
                        cl.plan_opening(now, &self.flows.table, &tuple)
                    }
                    None => cl.plan_new(now, &self.flows.table, &tuple, l4.as_ref()),
                };
                // N3: a new connection under multi-session PAT received
                // on a port of a data node goes to the control node, which
                // owns it — before any election here. (A record here, or
                // a flow, says otherwise: followed as planned.)
                // A fragment at its fragment owner (decided as received on
                // a port) goes there too, as to its flow owner (the control
                // node admits it as such and never sends it back).
                if let Some(n) = self.nat.as_deref() {
                    let may = matches!(plan, Plan::Own | Plan::Query { elect: true, .. })
                        && prx.via == Via::Port
                        && !rx.hinted
                        && !rx.to_control;
                    if may {
                        if let Some(c) = to_control(cl, n, &self.flows.table, ifx, egress, &tuple) {
                            plan = if note.is_some() { Plan::Forward(c) } else { Plan::ToControl(c) };
                        }
                    }
                }
                match plan {
                    Plan::Own => {}
                    Plan::TakeOver => {
                        let mut link = Link { egress: &mut self.egress, ifaces: &self.ifaces };
                        cl.take_over(now, &mut link, &mut self.flows.table, &tuple)?;
                        self.settle_adopted(now);
                    }
                    Plan::Drop(r) => return Err(r),
                    // A relayed later fragment would carry no ports for
                    // the director to read: ask it instead.
                    Plan::Relay(director) if note.is_some() => {
                        break 'decide Step::Cluster(Plan::Query { director, elect: false }, tuple, arx)
                    }
                    plan => break 'decide Step::Cluster(plan, tuple, arx),
                }
            }
            let icmp_error = l4.is_none();
            let mut xlate = None;
            let mut snat = None;
            let mut opened = None;
            match l4 {
                // The error must quote a flow and go back to its sender.
                None => {
                    let Some((h, dir)) = self.flows.table.lookup(&tuple).filter(|_| tuple.src == IpAddr::V4(dst)) else {
                        return Err(DropReason::NoFlow);
                    };
                    // A quoted TCP segment goes back to its sender's
                    // sequence space: the owner's delta (R6), and the
                    // server-side one of a connection the SYN proxy spliced.
                    if tuple.proto == crate::types::ip_proto::TCP {
                        let delta = self.cluster.as_deref().map_or(0, |cl| cl.quoted_delta(h));
                        let server = self.flows.table.proxy_delta(h).unwrap_or(0);
                        xlate = (delta != 0 || server != 0).then_some(Xlate { dir, delta: SeqDelta(delta), quoted: true, server: SeqDelta(server) });
                    }
                    // About a packet that came in translated: the error
                    // leaves with the mapped endpoint (not for an error
                    // that came in to a mapped address: translated back
                    // already).
                    if let (Some(n), false) = (self.nat.as_deref(), rx.nat_in) {
                        snat = n.icmp_error_out(ifx, egress, &tuple);
                    }
                }
                // A later piece of a TCP segment without ACK: its flow
                // must exist, nothing to track.
                Some(_) if lookup_only => {
                    if self.flows.table.lookup(&tuple).is_none() {
                        return Err(DropReason::TcpNoFlow);
                    }
                }
                Some(l4) => {
                    let len = u32::from(ip.total_len());
                    let mut link = Link { egress: &mut self.egress, ifaces: &self.ifaces };
                    let cl = self.cluster.as_deref_mut();
                    let tracked;
                    // Anti-spoofing for a new flow (a cluster member's
                    // plan checked it where the frame entered).
                    let (routes, ifaces, single) = (&self.routes, &self.ifaces, cl.is_none());
                    let passes = || !single || rx.via != Via::Port || !fast::spoofed_source(ifaces, routes, ifx, src);
                    let r = self.flows.track(cl, &mut link, now, &tuple, l4, len, ifx, egress, passes);
                    (xlate, tracked) = match r {
                        Ok(v) => v,
                        // The SYN proxy answers (not for a fragment:
                        // refused as over the limit). A SYN that came in
                        // translated is answered from its mapped endpoint.
                        Err(DropReason::SynProxyCookie) if note.is_none() => {
                            let snat = match (self.nat.as_deref(), rx.nat_in) {
                                (Some(n), true) => Some(n.icmp_error_out(egress, ifx, &tuple).ok_or(DropReason::EmbryonicLimit)?),
                                _ => None,
                            };
                            break 'decide Step::Proxy(self.syn_cookie(now, &ip, &tuple, &l4, tags, l2, egress)?, None, snat, None);
                        }
                        Err(DropReason::SynProxyCookie) => return Err(DropReason::EmbryonicLimit),
                        // The client's request while the proxy connects:
                        // held for the splice (`synproxy`).
                        Err(DropReason::SynProxyPending) if note.is_none() => {
                            return match self.flows.proxy.hold_early(now, &tuple, in_port, rx, buf.data()) {
                                Outcome::Drop(r) => Err(r),
                                o => Ok(o),
                            };
                        }
                        Err(e) => return Err(e),
                    };
                    if let Splice::Answered { seq, ack, window, .. } = tracked.splice {
                        // Back to the server, as an original-direction
                        // packet: the cluster's delta moves its seq; a
                        // client behind PAT (the SYN-ACK came in
                        // translated) leaves from its mapped endpoint.
                        let r = self.routes.lookup(src).ok_or(DropReason::NoRoute)?;
                        let route = Route { next_hop: r.next_hop, egress: r.iface, tags, l2 };
                        let seg = Segment { seq, ack, flags: tcp_flags::ACK, window, mss: None };
                        let x = xlate.map(|x| Xlate { dir: Direction::Original, server: SeqDelta::ZERO, ..x });
                        let snat = match (self.nat.as_deref(), rx.nat_in) {
                            (Some(n), true) => n.icmp_error_out(ifx, r.iface, &tuple),
                            _ => None,
                        };
                        self.flows.proxy.counters.spliced += 1;
                        // The client's segments held meanwhile follow it.
                        let held = (self.flows.proxy.hold.len() > 0).then(|| tuple.reversed());
                        break 'decide Step::Proxy(ProxyStep { route, seg, back: true }, x, snat, held);
                    }
                    if let Splice::Opened { isn, window, mss } = tracked.splice {
                        opened = Some(Segment { seq: isn, ack: 0, flags: tcp_flags::SYN, window, mss: Some(mss) });
                    }
                    // Only the first fragment carries the TCP header.
                    if piece.is_some_and(|(off, _)| off != 0) {
                        xlate = None;
                    }
                    if let Some(n) = self.nat.as_deref_mut() {
                        // A reopening SYN may have replaced a flow.
                        n.flows_ended(now, &mut self.flows.table);
                        // NAT outbound: the flow is admitted on its real tuple.
                        if !rx.nat_in {
                            snat = match n.outbound(now, ifx, egress, &tuple, &mut self.flows.table, tracked) {
                                // Dynamic NAT on a member, the control
                                // node asked: held for the answer.
                                Err(DropReason::NatPending) if note.is_none() => {
                                    return nat_pending(n, self.nat_hold.as_deref_mut(), now, &tuple, in_port, rx, buf.data());
                                }
                                r => r?,
                            };
                            // A cluster member's flow records carry its binding.
                            if let (Some(cl), Some(_)) = (self.cluster.as_deref_mut(), snat) {
                                if let Some(b) = n.binding(self.flows.table.mark(tracked.handle)) {
                                    let orig = if tracked.dir == crate::types::Direction::Original { tuple } else { tuple.reversed() };
                                    cl.set_binding(tracked.handle, &orig, b);
                                }
                            }
                        }
                    }
                }
            }
            // The client's ACK of a SYN-proxy cookie opened the connection:
            // the server gets the SYN (translated as the flow is).
            if let Some(seg) = opened {
                break 'decide Step::Proxy(ProxyStep { route: Route { next_hop, egress, tags, l2 }, seg, back: false }, xlate, snat, None);
            }
            Step::Route { route: Route { next_hop, egress, tags, l2 }, icmp_error, xlate, snat, dnat: frag_dnat }
        };
        match step {
            Step::Route { route, icmp_error, xlate, snat, dnat } => {
                if let Some((addr, port)) = dnat {
                    let l3 = buf.data_mut().get_mut(l2..).unwrap_or(&mut []);
                    crate::nat::rewrite(l3, crate::nat::Endpoint::Destination, addr, port)
                        .map_err(|_| DropReason::L4Truncated)?;
                }
                if let Some((addr, port)) = snat {
                    let l3 = buf.data_mut().get_mut(l2..).unwrap_or(&mut []);
                    if icmp_error {
                        crate::nat::rewrite_icmp_error_out(l3, addr, port)
                    } else {
                        crate::nat::rewrite(l3, crate::nat::Endpoint::Source, addr, port)
                    }
                    .map_err(|_| DropReason::L4Truncated)?;
                    if let Some(n) = self.nat.as_deref_mut() {
                        n.counters.translated_out += 1;
                        n.counters.icmp_errors_out += u64::from(icmp_error);
                    }
                }
                let outcome = self.egress.forward(now, &self.ifaces, route, xlate, buf)?;
                if icmp_error {
                    self.acct.icmp_errors_forwarded += 1;
                }
                Ok(outcome)
            }
            Step::Cluster(plan, tuple, rx) => {
                let Some(cl) = self.cluster.as_deref_mut() else {
                    return Err(DropReason::ClusterOwnerUnknown);
                };
                let mut link = Link { egress: &mut self.egress, ifaces: &self.ifaces };
                let outcome = cl.act(now, &mut link, in_port, ifx, rx, plan, &tuple, buf)?;
                if matches!(plan, Plan::Forward(_)) && rx.frag.is_some() {
                    self.frag.counters.to_flow_owner += 1;
                }
                Ok(outcome)
            }
            Step::Handoff(w, n) => {
                self.handoff = Some(n);
                Ok(Outcome::Handoff(w))
            }
            Step::Proxy(p, xlate, snat, held) => {
                let sent = self.proxy_send(now, l2, p, xlate, snat, buf);
                // Behind the handshake's last ACK (this frame's verdict):
                // the client's held segments, now spliced.
                if let Some(client) = held {
                    self.release_held(now, &client);
                }
                sent
            }
            Step::FragOwner(fo) => {
                let Some(cl) = self.cluster.as_deref_mut() else {
                    return Err(DropReason::ClusterOwnerUnknown);
                };
                let iface = u8::try_from(ifx.0).map_err(|_| DropReason::CclMalformed)?;
                let mut link = Link { egress: &mut self.egress, ifaces: &self.ifaces };
                let port = cl.wrap(now, &mut link, buf, Wrap::Forward, iface, fo, None)?;
                self.frag.counters.to_fragment_owner += 1;
                Ok(Outcome::Forward(port))
            }
        }
    }

    /// Send the SYN proxy's segment in the frame's place: rewritten, from
    /// the sender's mapped endpoint through NAT (`snat`), out of egress
    /// with the owner's sequence translation.
    fn proxy_send<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        l2: usize,
        p: ProxyStep,
        xlate: Option<Xlate>,
        snat: Option<nat::Snat>,
        buf: &mut B,
    ) -> Result<Outcome, DropReason> {
        p.rewrite(l2, buf)?;
        if let Some((addr, port)) = snat {
            let l3 = buf.data_mut().get_mut(l2..).unwrap_or(&mut []);
            crate::nat::rewrite(l3, crate::nat::Endpoint::Source, addr, port).map_err(|_| DropReason::L4Truncated)?;
        }
        self.egress.forward(now, &self.ifaces, p.route, xlate, buf)
    }

    /// The server's SYN-ACK spliced the connection of `client` (its
    /// client's tuple): decide the client's segments held meanwhile
    /// (`synproxy::ProxyHold`), oldest first, as they were received — each
    /// is now tracked and translated like any later segment of the
    /// connection (the server-side delta, the cluster's, NAT) — and queue
    /// them for `drain_generated`, behind the handshake's last ACK.
    #[cold]
    #[inline(never)]
    fn release_held(&mut self, now: Timestamp, client: &FiveTuple) {
        let before = self.flows.proxy.hold.next_seq();
        while let Some(mut t) = self.flows.proxy.hold.take(client, before) {
            let rx = Rx { force_own: true, ..t.rx };
            let (outcome, start, end) = self.decide_held(now, &mut t, rx);
            self.flows.proxy.finish_held(t.slot, t.mem, start, end, outcome);
        }
    }

    /// A held frame taken out of its hold (`hold::Taken`), decided again
    /// as received with `rx`: its outcome and where its bytes are now.
    fn decide_held(&mut self, now: Timestamp, t: &mut hold::Taken, rx: Rx) -> (Outcome, usize, usize) {
        let in_port = t.in_port;
        let mut sb = SlotBuf::over(&mut t.mem, t.start, t.end);
        let outcome = if self.trace.is_some() {
            self.traced(now, trace::TraceFrom::Parked, &mut sb, |p, b| p.classify(now, in_port, b, rx))
        } else {
            self.classify(now, in_port, &mut sb, rx)
        };
        (outcome, sb.start, sb.end)
    }

    /// A SYN over its class's embryonic limit (`SynProxyCookie`): the
    /// cookie SYN-ACK that answers it, back to the client (`synproxy`).
    /// It offers the MSS the interface towards the server carries, no
    /// window scaling, SACK or timestamps (a cookie has no room for them).
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn syn_cookie(
        &mut self,
        now: Timestamp,
        ip: &Ipv4Packet<&[u8]>,
        tuple: &FiveTuple,
        l4: &crate::conntrack::L4Info,
        tags: u8,
        l2: usize,
        toward: IfIndex,
    ) -> Result<ProxyStep, DropReason> {
        let crate::conntrack::L4Info::Tcp(syn) = l4 else { return Err(DropReason::EmbryonicLimit) };
        let tcp = TcpPacket::new_checked(ip.payload()).map_err(|_| DropReason::L4Truncated)?;
        let mss = crate::wire::synproxy::syn_mss(tcp.options());
        let back = self.routes.lookup(ip.src()).ok_or(DropReason::SynProxyCookie)?;
        let (cookie, _) = self.flows.proxy.cookie(now, tuple, syn.seq, mss);
        let ours = self.ifaces.get(toward).map_or(536, |i| i.mtu.saturating_sub(40)).max(536);
        let seg = Segment { seq: cookie, ack: syn.seq.wrapping_add(1), flags: tcp_flags::SYN | tcp_flags::ACK, window: PROXY_WINDOW, mss: Some(ours) };
        Ok(ProxyStep { route: Route { next_hop: back.next_hop, egress: back.iface, tags, l2 }, seg, back: true })
    }

    /// What the fast path took: done, or a CCL datagram to open.
    fn fast_done<B: PacketBuf>(&mut self, now: Timestamp, in_port: PortId, f: Fast, buf: &mut B) -> Outcome {
        match f {
            Fast::Done(o) => o,
            Fast::Ccl => self.ccl(now, in_port, buf).unwrap_or_else(Outcome::Drop),
        }
    }

    /// A frame unwrapped from the CCL (or from a batch), as at its ingress
    /// interface `ifx`: the fast path if it takes it, else the general path.
    fn unwrapped<B: PacketBuf>(&mut self, now: Timestamp, in_port: PortId, ifx: IfIndex, rx: Rx, buf: &mut B) -> Outcome {
        if self.trace.is_some() {
            return self.unwrapped_traced(now, in_port, ifx, rx, buf);
        }
        self.unwrapped_frame(now, in_port, ifx, rx, buf)
    }

    #[cold]
    #[inline(never)]
    fn unwrapped_traced<B: PacketBuf>(&mut self, now: Timestamp, in_port: PortId, ifx: IfIndex, rx: Rx, buf: &mut B) -> Outcome {
        let from = self.cluster.as_deref().map_or(trace::TraceFrom::Port(in_port), |cl| trace::TraceFrom::Member(cl.trace_from));
        self.traced(now, from, buf, |p, b| p.unwrapped_frame(now, in_port, ifx, rx, b))
    }

    /// `decide(self, buf)`, recorded `from` if the trace wants the frame.
    #[cold]
    #[inline(never)]
    fn traced<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        from: trace::TraceFrom,
        buf: &mut B,
        decide: impl FnOnce(&mut Self, &mut B) -> Outcome,
    ) -> Outcome {
        let Some(want) = self.trace_wants(now, buf.data()) else {
            return decide(self, buf);
        };
        let len = buf.data().len();
        let o = decide(self, buf);
        self.trace_record(now, want, len, from, o);
        o
    }

    /// As `process_frame`: one copy for both paths.
    #[inline(never)]
    fn unwrapped_frame<B: PacketBuf>(&mut self, now: Timestamp, in_port: PortId, ifx: IfIndex, rx: Rx, buf: &mut B) -> Outcome {
        // (Fenced: the fast path declines, the general path drops it.)
        let parts = Parts {
            ifaces: &self.ifaces,
            routes: &self.routes,
            egress: &mut self.egress,
            flows: &mut self.flows,
            cluster: self.cluster.as_deref_mut(),
            nat: self.nat.as_deref_mut(),
        };
        match self.fast.ipv4(parts, now, in_port, ifx, rx, buf) {
            Some(f) => self.fast_done(now, in_port, f, buf),
            None => self.classify(now, in_port, buf, rx),
        }
    }

    /// A CCL datagram to our CCL address: the cluster stage opens it, and
    /// what it hands back is decided here.
    fn ccl<B: PacketBuf>(&mut self, now: Timestamp, in_port: PortId, buf: &mut B) -> Result<Outcome, DropReason> {
        let Some(cl) = self.cluster.as_deref_mut() else {
            return Err(DropReason::LocalUnhandled);
        };
        let mut link = Link { egress: &mut self.egress, ifaces: &self.ifaces };
        let next = cl.ccl_in(now, &mut link, &mut self.flows.table, buf);
        // A flow transfer may have brought a NAT binding.
        self.settle_adopted(now);
        let Some(cl) = self.cluster.as_deref_mut() else {
            return Err(DropReason::LocalUnhandled);
        };
        // A record may have answered queries this node held for itself.
        if cl.has_local_release() {
            self.release_local(now);
        }
        Ok(match next? {
            CclNext::Done(o) => o,
            CclNext::Forwarded(rx) => {
                let Via::Ccl(ifx) = rx.via else {
                    return Err(DropReason::CclMalformed);
                };
                let o = self.unwrapped(now, in_port, ifx, rx, buf);
                self.keep_order(o, buf)
            }
            CclNext::RelayedOwn(rx) => {
                let o = if self.trace.is_some() {
                    let from = self.cluster.as_deref().map_or(trace::TraceFrom::Port(in_port), |cl| trace::TraceFrom::Member(cl.trace_from));
                    self.traced(now, from, buf, |p, b| p.classify(now, in_port, b, rx))
                } else {
                    self.classify(now, in_port, buf, rx)
                };
                self.keep_order(o, buf)
            }
            CclNext::Batch => {
                self.batch_frames(now, in_port);
                Outcome::Consumed
            }
            CclNext::Release { query_id, owner } => {
                self.release_parked(now, query_id, owner);
                Outcome::Consumed
            }
        })
    }

    /// Owner: a forwarded frame leaves behind the batch frames waiting in
    /// the cluster's pool (`ClusterPath::keep_order`).
    fn keep_order<B: PacketBuf>(&mut self, o: Outcome, buf: &B) -> Outcome {
        match self.cluster.as_deref_mut() {
            Some(cl) => cl.keep_order(o, buf),
            None => o,
        }
    }

    /// Decide the frames of a received `ForwardedBatch`, in order, each in
    /// its pool slot, like a `ForwardedPacket`'s frame.
    fn batch_frames(&mut self, now: Timestamp, in_port: PortId) {
        let n = self.cluster.as_deref().map_or(0, |cl| cl.received());
        for k in 0..n {
            let Some((i, ifx, mut mem, start, end)) = self.cluster.as_deref_mut().and_then(|cl| cl.take_received(k))
            else {
                continue;
            };
            let mut sb = SlotBuf::over(&mut mem, start, end);
            let outcome = self.unwrapped(now, in_port, ifx, Rx::ccl(ifx), &mut sb);
            let (start, end) = (sb.start, sb.end);
            if let Some(cl) = self.cluster.as_deref_mut() {
                cl.finish_received(i, mem, start, end, outcome);
            }
        }
    }

    /// Send on (or drop) every frame parked under `query_id`, now that the
    /// director named `owner` (`None`: nobody owns the flow).
    fn release_parked(&mut self, now: Timestamp, query_id: u32, owner: Option<NodeId>) {
        let mut from = 0;
        loop {
            let Some(cl) = self.cluster.as_deref_mut() else {
                return;
            };
            let Some(mut p) = cl.take_parked(query_id, &mut from) else {
                return;
            };
            let me = cl.me();
            let fenced = cl.fenced(now);
            let mut sb = SlotBuf::over(&mut p.mem, p.start, p.end);
            // A trace: the released frame's event (a cold path already).
            let want = self.trace.as_deref().and_then(|t| t.wants(now, sb.data()));
            if want.is_some() {
                cl.trace_to = None;
            }
            let len = sb.data().len();
            // What became of it, for the trace.
            let mut outcome = Outcome::Drop(DropReason::ClusterOwnerUnknown);
            // Some(Some(port)): send it; Some(None): the pipeline kept a
            // copy (held for the next hop's ARP reply); None: dropped.
            let sent = match owner {
                _ if fenced => {
                    cl.counters.fenced_drops += 1;
                    outcome = Outcome::Drop(DropReason::ClusterFenced);
                    None
                }
                None => {
                    cl.counters.pending_no_owner += 1;
                    None
                }
                Some(o) if o == me => {
                    let rx = Rx { via: p.meta.via, force_own: true, frag: p.meta.frag, hinted: false, nat_in: false, to_control: false };
                    outcome = self.classify(now, p.meta.in_port, &mut sb, rx);
                    match outcome {
                        Outcome::Consumed => Some(None),
                        o => o.port().map(Some),
                    }
                }
                Some(o) => {
                    let iface = u8::try_from(p.meta.ifx.0).unwrap_or(u8::MAX);
                    let mut link = Link { egress: &mut self.egress, ifaces: &self.ifaces };
                    // No flow hint on the wire (see `ClusterPath::act`).
                    match cl.wrap(now, &mut link, &mut sb, Wrap::Forward, iface, o, None) {
                        Ok(port) => {
                            cl.counters.forwarded_to_owner += 1;
                            if p.meta.frag.is_some() {
                                self.frag.counters.to_flow_owner += 1;
                            }
                            outcome = Outcome::Forward(port);
                            Some(Some(port))
                        }
                        Err(e) => {
                            outcome = Outcome::Drop(e);
                            None
                        }
                    }
                }
            };
            if let Some(w) = want {
                self.trace_record(now, w, len, trace::TraceFrom::Parked, outcome);
            }
            let (start, end) = (sb.start, sb.end);
            if let Some(cl) = self.cluster.as_deref_mut() {
                if let (None, Some(_), false, Outcome::Drop(r)) = (sent, owner, fenced, outcome) {
                    cl.release_dropped(r);
                }
                cl.finish_parked(p.slot, p.mem, start, end, sent, owner.is_some());
            }
        }
    }

    /// Release the frames of this node's own held queries that a record
    /// (or the hold's deadline) answered (`ClusterPath::next_local_release`).
    #[cold]
    fn release_local(&mut self, now: Timestamp) {
        while let Some((query_id, owner)) = self.cluster.as_deref_mut().and_then(|cl| cl.next_local_release()) {
            self.release_parked(now, query_id, owner);
        }
    }

    /// Release the fragments held for the datagram of `r` (its first
    /// fragment has just been decided): each is rebuilt in a slot and
    /// decided like a packet (`classify` with `Rx::frag`).
    fn release_fragments(&mut self, now: Timestamp, r: &Release) {
        // The first fragment's handoff note (its `Verdict::Handoff`)
        // outlives the released ones'.
        let first_note = self.handoff.take();
        while let Some((i, mut mem, start, end)) = self.frag.next_released(r) {
            let mut sb = SlotBuf::over(&mut mem, start, end);
            let rx = Rx { frag: Some(r.note), force_own: false, ..r.rx };
            let outcome = self.classify(now, r.in_port, &mut sb, rx);
            let (start, end) = (sb.start, sb.end);
            let handed = self.handoff.take().map(|n| (r.in_port, n));
            self.frag.finish_released(i, mem, start, end, outcome, handed);
        }
        self.handoff = first_note;
    }

    /// Queue a gratuitous ARP (a who-has for its own address, broadcast)
    /// on every interface but the CCL, and resolve every route's gateway
    /// not resolved yet, for `drain_generated`: the node announces itself
    /// when its data ports come up (after a join or rejoin), so neighbours
    /// refresh their entries at once, and the first burst of new
    /// connections does not wait for ARP (the hold keeps only
    /// `HOLD_PER_HOP` frames per next hop). Off the packet path; returns
    /// how many frames were queued.
    pub fn announce(&mut self, now: Timestamp) -> usize {
        let ccl = self.cluster.as_deref().map(|cl| cl.ccl_port());
        let before = self.egress.generated_len();
        let list: Vec<_> = self.ifaces.iter().filter(|i| Some(i.port) != ccl).collect();
        for i in list {
            self.egress.queue_arp_request(i, i.addr, [0xff; 6]);
        }
        let gateways: Vec<std::net::Ipv4Addr> = self.routes.entries(self.ifaces.names()).iter().filter_map(|r| r.via).collect();
        for gw in gateways {
            let Some(r) = self.routes.lookup(gw) else { continue };
            let Some(eg) = self.ifaces.get(r.iface) else { continue };
            if Some(eg.port) != ccl && r.next_hop == gw {
                self.egress.refresh_peer(now, eg, gw, r.iface);
            }
        }
        self.egress.generated_len() - before
    }

    /// Hand every frame generated since the last call to `f`, in order: ARP
    /// requests, then (cluster) the burst's sealed CCL frames and released
    /// pending frames, the SYN proxy's released held segments, released
    /// fragments, egress fragments (each
    /// datagram's but the first), ICMP errors, frames released by ARP
    /// replies.
    /// Each is counted as transmitted on its port.
    pub fn drain_generated(&mut self, mut f: impl FnMut(PortId, &[u8])) {
        let acct = &mut self.acct;
        let mut out = |port: PortId, frame: &[u8]| {
            acct.tx(port, frame.len());
            f(port, frame);
        };
        self.egress.drain_requests(&mut out);
        if let Some(cl) = self.cluster.as_deref_mut() {
            cl.end_burst();
            cl.drain(&mut out);
        }
        self.flows.proxy.hold.drain(&mut out);
        if let Some(h) = self.nat_hold.as_deref_mut() {
            h.drain(&mut out);
        }
        self.frag.drain(&mut out);
        self.egress.drain_fragments(&mut out);
        self.icmp.drain(&mut out);
        if let Some(v) = self.ipv6.as_deref_mut() {
            v.drain(&mut out);
        }
        self.egress.drain_held(&mut out);
    }

    /// End of a burst (cluster mode): seal the queued flow records, one
    /// `FlowRegister` and one `StateUpdate` batch per destination, into
    /// generated frames.
    pub fn flush(&mut self, now: Timestamp) {
        if let Some(cl) = self.cluster.as_deref_mut() {
            cl.flush(now, &mut Link { egress: &mut self.egress, ifaces: &self.ifaces });
        }
    }

    /// Periodic work, bounded: expire up to `EXPIRE_BUDGET` flow slots and
    /// the SYN proxy's held segments, age the ARP cache and the hold queue,
    /// the cluster's and the fragment path's timers.
    pub fn poll_timers(&mut self, now: Timestamp) {
        self.flows.table.expire(now, EXPIRE_BUDGET);
        self.flows.expire_held(now);
        // A trace past its deadline: off the packet path, its events kept.
        if self.trace.as_deref().is_some_and(|t| !t.active(now)) {
            self.trace_done = self.trace.take();
        }
        if let Some(n) = self.nat.as_deref_mut() {
            n.flows_ended(now, &mut self.flows.table);
            n.timers(now);
        }
        self.nat_held_dropped(|h| h.expire(now, |_| true));
        self.egress.timers(now);
        if let Some(v) = self.ipv6.as_deref_mut() {
            v.timers(now);
        }
        if let Some(cl) = self.cluster.as_deref_mut() {
            cl.timers(now, &mut Link { egress: &mut self.egress, ifaces: &self.ifaces }, &self.flows.table);
        }
        if self.cluster.as_deref().is_some_and(|cl| cl.has_local_release()) {
            self.release_local(now);
        }
        self.frag.timers(now);
    }

    /// A new member set (epoch-stamped): the director ranking follows it,
    /// the SYN guard opens for `ClusterSpec::syn_guard`, and the owned
    /// flows whose director or backups moved are re-registered by a scan
    /// in `poll_timers` (then `SyncDone` to every other member;
    /// docs/failover.md).
    pub fn set_members(&mut self, now: Timestamp, members: MemberSet) {
        if let Some(cl) = self.cluster.as_deref_mut() {
            cl.set_members(now, members);
            // NAT: the blocks of members that left go to their heirs; a
            // node that came back holds its own again.
            if let Some(n) = self.nat.as_deref_mut() {
                if let Some(plan) = n.plan().for_members(&members) {
                    cl.set_nat_plan(Some(plan.clone()));
                    // Connections translated in blocks that went back to
                    // their node go there with their state and binding.
                    let moving = n.adopt_plan(plan, &self.flows.table);
                    for (h, orig, to) in moving {
                        cl.hand_over(now, &self.flows.table, h, &orig, to);
                    }
                    n.end_lost(now, &mut self.flows.table);
                }
                // Orphans of a member that left or came back go to their
                // block's holder (`poll_timers` sends them); this node
                // takes those of its own blocks over now.
                let mine = cl.queue_nat_regrants(now);
                let mut link = Link { egress: &mut self.egress, ifaces: &self.ifaces };
                for t in &mine {
                    if cl.take_over(now, &mut link, &mut self.flows.table, t).is_ok() {
                        cl.count_nat_regrant();
                    }
                    // Drained at every takeover (the queue holds a few).
                    let table = &mut self.flows.table;
                    cl.take_adopted(|h, orig, b| {
                        if !n.adopt_binding(now, table, h, orig, b) {
                            table.remove_flow(h);
                        }
                    });
                }
            }
        }
    }

    /// The Unix time, ns, of the origin of the `now` the driver passes:
    /// the SYN proxy counts its cookie periods on the system clock, so
    /// that cluster members validate each other's cookies (their clocks
    /// agreeing within a period, 64 s). 0 (the default) counts from the
    /// driver's origin: enough for one node, or for members sharing it.
    pub fn set_wall_clock(&mut self, origin_unix_ns: u64) {
        self.flows.proxy.set_wall_clock(origin_unix_ns);
    }

    /// A new membership lease: while `now >= until` the pipeline is fenced
    /// (data frames dropped as `ClusterFenced`, CCL messages still
    /// handled). Single-node mode: no effect, never fenced.
    pub fn set_lease(&mut self, until: Timestamp) {
        if let Some(cl) = self.cluster.as_deref_mut() {
            cl.set_lease(until);
        }
    }

    /// IPv6 on this node (issue 16; docs/ipv6.md): the interfaces'
    /// global addresses (link-local ones derived from their MACs) and
    /// static routes. Without any address IPv6 stays dropped, counted.
    /// A cluster member runs its roles for IPv6 connections as for IPv4's
    /// (the CCL, itself IPv4, carries IPv6 frames and records).
    pub fn set_ipv6(&mut self, spec: &Ipv6Spec) -> Result<(), Ipv6SpecError> {
        let nd = self.egress.arp().same_settings();
        self.ipv6 = ipv6::Ipv6Path::new(spec, &self.ifaces, nd)?.map(Box::new);
        Ok(())
    }

    /// The IPv6 neighbour cache (`show nd`).
    pub fn nd_entries(&self, now: Timestamp) -> Vec<crate::arp::ArpInfo<std::net::Ipv6Addr>> {
        self.ipv6.as_deref().map(|v| v.entries(now, self.ifaces.names())).unwrap_or_default()
    }

    /// Translate with `spec` from now on, with this worker's share of it
    /// (after `set_worker`). A cluster member deals the PAT blocks over
    /// its member set (`NatPlan::for_cluster`; docs/nat.md). Xlates of a
    /// previous configuration are dropped. The node's workers share one
    /// plan instead: `set_nat_plan`.
    pub fn set_nat(&mut self, spec: &NatSpec) -> Result<(), NatSpecError> {
        let ifaces = self.ifaces.names().len();
        let plan = match self.cluster.as_deref() {
            Some(cl) => NatPlan::for_cluster(spec, ifaces, self.workers, cl.me(), &cl.configured())?,
            None => NatPlan::new(spec, ifaces, self.workers)?,
        };
        self.set_nat_plan(plan)
    }

    /// Translate with this worker's share of `plan` (built for this node's
    /// worker count and interfaces; the driver steers with the same plan,
    /// `steer::steer_nat`).
    pub fn set_nat_plan(&mut self, plan: std::sync::Arc<NatPlan>) -> Result<(), NatSpecError> {
        let ifaces = self.ifaces.names().len();
        let me = self.cluster.as_deref().map(|cl| cl.me());
        let node_fits = match me {
            Some(me) => plan.is_cluster() && plan.me() == me,
            None => !plan.is_cluster(),
        };
        if plan.workers() != self.workers || plan.ifaces() != ifaces || !node_fits {
            return Err(NatSpecError::PlanMismatch {
                plan_workers: plan.workers(),
                plan_ifaces: plan.ifaces(),
                me: self.worker.0,
                workers: self.workers,
                ifaces,
            });
        }
        // Flows marked by a previous configuration's xlates hold none of
        // the new one's (their records learn the old translations first).
        if let Some(n) = self.nat.as_deref() {
            n.annotate(&mut self.flows.table, false);
        }
        self.flows.table.drain_ended(|_| {});
        self.flows.table.clear_marks();
        self.flows.table.log_ended();
        let mut plan = plan;
        if let Some(cl) = self.cluster.as_deref_mut() {
            // Members that left before: their blocks are their heirs'.
            if let Some(p) = plan.for_members(&cl.members()) {
                plan = p;
            }
            cl.set_nat_plan(Some(plan.clone()));
        }
        self.nat_held_dropped(|h| h.clear());
        self.nat_hold = plan.cluster.then(|| Box::new(nat::pending_hold(self.slot_len)));
        self.nat = Some(Box::new(nat::NatPath::new(plan, self.worker)));
        Ok(())
    }

    /// Count the held first packets `f` freed unsent (`nat_hold`).
    fn nat_held_dropped(&mut self, f: impl FnOnce(&mut hold::FrameHold<Ipv4Addr>) -> u64) {
        if let (Some(h), Some(n)) = (self.nat_hold.as_deref_mut(), self.nat.as_deref_mut()) {
            n.counters.pending_dropped += f(h);
        }
    }

    /// Decide again, oldest first, the first packets of host `real` held
    /// while its translation was asked for (`nat_hold`): its translation
    /// is here now. Each goes on as the client's retransmission would
    /// (its flow was created when it was held), queued for
    /// `drain_generated`.
    #[cold]
    #[inline(never)]
    fn release_nat_held(&mut self, now: Timestamp, real: Ipv4Addr) {
        let Some(before) = self.nat_hold.as_deref().filter(|h| h.len() > 0).map(|h| h.next_seq()) else { return };
        while let Some(mut t) = self.nat_hold.as_deref_mut().and_then(|h| h.take(&real, before)) {
            let rx = t.rx;
            let (outcome, start, end) = self.decide_held(now, &mut t, rx);
            let sent = self.nat_hold.as_deref_mut().is_some_and(|h| h.finish(t.slot, t.mem, start, end, outcome));
            if let Some(n) = self.nat.as_deref_mut() {
                if sent {
                    n.counters.pending_released += 1;
                } else {
                    n.counters.pending_dropped += 1;
                }
            }
        }
    }

    /// Flows taken over with a NAT binding keep it (R11): the NAT stage
    /// reserves its mapped port and marks the flow; a flow whose binding
    /// cannot be kept here is removed, so none of its packets leaves
    /// untranslated.
    fn settle_adopted(&mut self, now: Timestamp) {
        let Some(cl) = self.cluster.as_deref_mut() else { return };
        let table = &mut self.flows.table;
        let mut nat = self.nat.as_deref_mut();
        cl.take_adopted(|h, orig, b| {
            let kept = nat.as_deref_mut().is_some_and(|n| n.adopt_binding(now, table, h, orig, b));
            if !kept {
                table.remove_flow(h);
            }
        });
    }

    /// The NAT plan this worker translates with (to share with the other
    /// workers and the driver's steering).
    pub fn nat_plan(&self) -> Option<std::sync::Arc<NatPlan>> {
        self.nat.as_deref().map(|n| n.plan().clone())
    }

    /// The NAT stage's counters (`None` without NAT).
    pub fn nat_counters(&self) -> Option<NatCounters> {
        self.nat.as_deref().map(|n| n.counters)
    }

    /// Up to `max` xlates (`show xlate`).
    pub fn xlates(&self, now: Timestamp, max: usize) -> Vec<crate::nat::XlateInfo> {
        self.nat.as_deref().map_or_else(Vec::new, |n| n.xlates(now, max))
    }

    /// Dynamic NAT on a cluster member (N4): the requests for the control
    /// node gathered since the last call (new translations, renewals);
    /// the driver sends them (`Membership::request_xlate`). Between bursts.
    pub fn take_xlate_requests(&mut self, f: impl FnMut(SharedRequest)) {
        if let Some(n) = self.nat.as_deref_mut() {
            n.take_requests(f);
        }
    }

    /// The worker deciding a reassembled datagram received with tuple `t`
    /// (several workers; `steer::nat_worker_of`). Out of line: fragments
    /// are rare and the decision function's hot path stays as it was.
    #[cold]
    #[inline(never)]
    fn datagram_worker(&self, t: &FiveTuple) -> WorkerId {
        let plan = self.nat.as_deref().map(|n| &**n.plan());
        crate::steer::nat_worker_of(t, plan, self.workers, |a| self.shared_real_of(a))
    }

    /// Dynamic NAT on a cluster member (N4): the real address this
    /// worker's copy of the control node's table hands `mapped` to (the
    /// driver's steering: `steer::steer_nat`'s `real_of`).
    pub fn shared_real_of(&self, mapped: Ipv4Addr) -> Option<Ipv4Addr> {
        self.nat.as_deref().and_then(|n| n.shared_real_of(mapped))
    }

    /// Dynamic NAT on a cluster member (N4): the control node's table now
    /// translates `real` in `pool` to `mapped` (`None`: no longer).
    /// Between bursts (`NatPath::shared_xlate`).
    pub fn set_shared_xlate(&mut self, now: Timestamp, pool: u16, real: Ipv4Addr, mapped: Option<Ipv4Addr>) {
        if let Some(n) = self.nat.as_deref_mut() {
            n.shared_xlate(now, &mut self.flows.table, pool, real, mapped);
        }
        if mapped.is_some() {
            self.release_nat_held(now, real);
        }
    }

    /// The pools' use on this worker (`show nat pool`).
    pub fn nat_pools(&self) -> Vec<PoolInfo> {
        self.nat.as_deref().map_or_else(Vec::new, |n| n.pools())
    }

    /// Replace the policy — access rules, security levels, idle timeouts
    /// — between bursts (a reload, a replicated configuration); returns
    /// the policy it replaced, so that the caller frees it off the packet
    /// path. A rule of the new policy equal to one of the old (same name,
    /// same match, same action) keeps its hit count, as do the
    /// security-level defaults. Connections already admitted stay: the
    /// rules decide new connections only, as always. The new timeouts
    /// apply to every flow from now on, the existing ones included.
    /// `Err` gives `policy` back when it was built for another number of
    /// interfaces than this pipeline has.
    pub fn set_policy(&mut self, mut policy: Box<Policy>) -> Result<Box<Policy>, Box<Policy>> {
        if policy.interfaces != self.ifaces.names().len() {
            return Err(policy);
        }
        // New NAT rules: over the same pools (blocks, addresses and the
        // xlates on them stay), for the same workers, or nothing changes.
        if let Some(plan) = policy.nat.take() {
            let fits = self.nat.as_deref().is_some_and(|n| n.plan().same_pools(&plan))
                && plan.workers() == self.workers
                && plan.ifaces() == self.ifaces.names().len();
            match self.nat.as_deref_mut() {
                Some(n) if fits => {
                    // A cluster member keeps the maps in force (the member
                    // set's), with the new rules.
                    let plan = if n.plan().is_cluster() { plan.with_pools_of(n.plan()) } else { plan };
                    policy.nat = Some(n.swap_plan(plan));
                    if let Some(cl) = self.cluster.as_deref_mut() {
                        cl.set_nat_plan(Some(n.plan().clone()));
                    }
                }
                _ => {
                    policy.nat = Some(plan);
                    return Err(policy);
                }
            }
        }
        self.flows.swap_acl(&mut policy.acl);
        policy.timeouts = self.flows.table.set_timeouts(policy.timeouts);
        if let Some(limits) = policy.limits.take() {
            policy.limits = Some(self.flows.table.set_limits(limits));
        }
        Ok(policy)
    }

    /// Run connection limits `spec` over the running access rules (at
    /// start; a policy change carries its own, `Policy::with_limits`).
    /// Allocates the per-client counts: not for the packet path.
    pub fn set_limits(&mut self, spec: &crate::conntrack::LimitSpec) {
        let limits = (!spec.is_empty()).then(|| {
            let names = self.flows.rule_names();
            Box::new(crate::conntrack::Limits::new(spec, &names, self.flows.table.capacity()))
        });
        self.flows.table.set_limits(limits);
    }

    /// The connection limits and their counts (`None`: none configured).
    pub fn limits(&self) -> Option<&crate::conntrack::Limits> {
        self.flows.table.limits()
    }

    /// The rest of the cluster's connection counts, as the control lcore
    /// estimates them for this worker (`controlplane::limits`).
    pub fn set_remote_limits(&mut self, remote: &crate::conntrack::limits::Remote) {
        if let Some(l) = self.flows.table.limits_mut() {
            l.set_remote(remote);
        }
    }

    /// This node left the cluster (membership `Reset`): drop every flow,
    /// record, parked frame, queued message and open batch; other members
    /// may own these connections now.
    pub fn reset(&mut self, now: Timestamp) {
        self.flows.table.clear();
        self.flows.proxy.clear_held();
        self.nat_held_dropped(|h| h.clear());
        if let Some(cl) = self.cluster.as_deref_mut() {
            cl.reset(now);
            // NAT: no xlate survives (every flow is gone); the blocks
            // follow the next member set.
            if let Some(n) = self.nat.as_deref_mut() {
                n.annotate(&mut self.flows.table, false);
                self.flows.table.drain_ended(|_| {});
                *n = nat::NatPath::new(n.plan().clone(), self.worker);
            }
        }
    }

    /// The re-registration for `epoch` (issue 10 contract): which peers'
    /// `SyncDone` arrived, and whether this worker's own scan is done.
    /// Single-node mode: nothing to wait for (`sent`, no peers).
    pub fn sync_progress(&self, epoch: Epoch) -> SyncProgress {
        match self.cluster.as_deref() {
            Some(cl) => cl.sync_progress(epoch),
            None => SyncProgress { epoch, done_from: 0, sent: true },
        }
    }

    /// Is the re-registration scan running, and how long did the last one
    /// take (from `set_members` to its `SyncDone`s)?
    pub fn sync_state(&self) -> Option<(bool, Duration)> {
        self.cluster.as_deref().map(|cl| cl.sync_state())
    }

    /// This pipeline is worker `me` of `count` on its node (default: 0 of
    /// 1). With several workers the driver steers every received frame to
    /// its worker (`steer::steer`) and this pipeline hands on the fragments
    /// it collected to the worker that owns their connection
    /// (`Verdict::Handoff`, `drain_handoffs`). In a cluster the worker
    /// seals on CCL channel `me` and takes only that channel's data
    /// messages: the driver steers CCL datagrams by channel
    /// (`steer::steer_ccl`), every member running `count` workers
    /// (docs/workers.md). Before any traffic and before `set_nat`.
    pub fn set_worker(&mut self, me: WorkerId, count: u16) -> Result<(), PipelineError> {
        // NAT's share is dealt by worker: `set_nat` comes after.
        if count == 0 || me.0 >= count || self.nat.is_some() {
            return Err(PipelineError::Workers { me: me.0, count });
        }
        if let Some(cl) = self.cluster.as_deref_mut().filter(|_| count > 1) {
            let channel = u8::try_from(me.0).map_err(|_| PipelineError::Workers { me: me.0, count })?;
            cl.set_channel(channel).map_err(|_| PipelineError::Workers { me: me.0, count })?;
        }
        self.worker = me;
        self.workers = count;
        Ok(())
    }

    /// What the frame of the last `Verdict::Handoff` carries to its
    /// worker: its datagram's five-tuple and L4 header, as this worker's
    /// reassembler learnt them. The receiving worker passes it to
    /// `process_handoff`.
    pub fn handoff_note(&mut self) -> Option<HandoffNote> {
        self.handoff.take()
    }

    /// A frame another worker of this node handed to this one
    /// (`Verdict::Handoff`, `drain_handoffs`), with its `note`: decided as
    /// received on `in_port`, the fragment already accounted for.
    pub fn process_handoff<B: PacketBuf>(&mut self, now: Timestamp, in_port: PortId, buf: &mut B, note: HandoffNote) -> Verdict {
        self.acct.rx(in_port, buf.data().len());
        self.acct.handoffs_in += 1;
        let outcome = if self.trace.is_some() {
            self.traced(now, trace::TraceFrom::Handoff(in_port), buf, |p, b| p.classify(now, in_port, b, note.rx))
        } else {
            self.classify(now, in_port, buf, note.rx)
        };
        self.account(outcome, buf)
    }

    /// Hand the fragments queued for other workers since the last call to
    /// `f` (worker, the port they arrived on, their note, the frame), in
    /// order. After each burst, with `drain_generated`.
    pub fn drain_handoffs(&mut self, mut f: impl FnMut(WorkerId, PortId, &HandoffNote, &[u8])) {
        self.frag.drain_handoffs(&mut |h: &frag::Handed, frame: &[u8]| f(h.worker, h.in_port, &h.note, frame));
    }

    /// An ARP frame another worker received (and answered): learn from it
    /// what this worker's own neighbour cache needs (and release the frames
    /// held for it), answer nothing. Not counted as a packet.
    pub fn arp_learn(&mut self, now: Timestamp, in_port: PortId, frame: &[u8]) {
        let Ok(l2) = self.ingress.l2(frame) else { return };
        let Some((ifx, ing)) = self.ifaces.by_port(in_port, l2.vlan) else { return };
        if l2.ethertype == ethertype::ARP {
            // A malformed one was counted by the worker that received it.
            let _ = ingress::arp_learn(now, &mut self.egress, ifx, ing, frame.get(l2.len..).unwrap_or(&[]));
        }
        // A neighbour solicitation or advertisement (several workers: each
        // keeps its own neighbour cache).
        if l2.ethertype == ethertype::IPV6 {
            if let Some((ip, mac)) = self.ipv6.as_deref_mut().and_then(|v| v.learn_copy(now, ifx, l2.len, frame)) {
                self.egress.release_v6(ip, mac);
            }
        }
    }

    /// Turn the fast path on or off (on by default). Off, every packet
    /// takes the general path: for the equivalence test and for comparing
    /// the two in benchmarks.
    pub fn set_fast_path(&mut self, on: bool) {
        self.fast.enabled = on;
    }

    // --- Off the packet path (allocate freely). ---

    /// This worker's counters, gathered from the stages.
    pub fn counters(&self) -> Counters {
        let (a, e, i) = (&self.acct, &self.egress.counters, &self.ingress.counters);
        Counters {
            packets: a.packets,
            drops: a.drops,
            forwarded: a.forwarded,
            consumed: a.consumed,
            arp_replies: a.arp_replies,
            icmp_echo_replies: a.icmp_echo_replies,
            icmp_errors_forwarded: a.icmp_errors_forwarded,
            handed_off: a.handed_off,
            handoffs_in: a.handoffs_in,
            flows_created: self.flows.created,
            flows_evicted_embryonic: self.flows.table.stats().evicted_embryonic,
            flows: self.flows.table.len() as u64,
            flow_capacity: self.flows.table.capacity() as u64,
            arp_requests: e.arp_requests,
            generated_dropped: e.generated_dropped,
            vlan_tagged: i.vlan_tagged,
            fast_path: self.fast.count,
            arp_hold: e.arp_hold,
            fragmented: e.fragmented,
            fragments_out: e.fragments,
            icmp_errors: self.icmp.counters,
            ipv6: Ipv6Counters { path: self.ipv6.as_deref().map(|v| v.counters).unwrap_or_default(), ..i.ipv6 },
            flow_log: self.flows.table.flow_log_counters().unwrap_or_default(),
            syn_proxy: self.flows.proxy.counters,
            ports: a.ports.clone(),
            rx_unknown_port: a.rx_unknown_port,
        }
    }
    /// Flows in the table.
    pub fn flow_count(&self) -> usize {
        self.flows.table.len()
    }
    pub fn conntrack(&self) -> &ConnTable {
        &self.flows.table
    }
    /// Turn the flow log on (`conntrack::flowlog`): built, ended and
    /// denied connections of this worker, for the node's exporters.
    /// With `active_timeout`, long connections also get `Active` records
    /// (for flow export) every that long.
    pub fn log_flows(&mut self, active_timeout: Option<Duration>) {
        self.flows.table.log_flows(active_timeout);
    }
    /// The flow log's records since the last call, oldest first (built
    /// and ended, then denied). Never allocates.
    pub fn drain_flow_log(&mut self, f: impl FnMut(&crate::conntrack::FlowRecord)) {
        if let Some(n) = self.nat.as_deref() {
            n.annotate(&mut self.flows.table, false);
        }
        self.flows.table.drain_flow_log(f);
    }
    /// Records waiting for `drain_flow_log`.
    #[inline]
    pub fn flow_log_pending(&self) -> usize {
        self.flows.table.flow_log_pending()
    }
    pub fn interface_names(&self) -> &[String] {
        self.ifaces.names()
    }
    /// Connections (cluster mode: owner flows with roles, then director,
    /// backup and forwarder records), at most `max`.
    pub fn conns(&self, now: Timestamp, max: usize) -> Vec<ConnInfo> {
        let mut v = Vec::new();
        self.flows.table.snapshot(now, max, &mut v);
        if let Some(cl) = self.cluster.as_deref() {
            cl.conns(now, max, &mut v);
        }
        v
    }
    pub fn routes(&self) -> Vec<RouteInfo> {
        self.routes.entries(self.ifaces.names())
    }
    pub fn arp_entries(&self, now: Timestamp) -> Vec<ArpInfo> {
        self.egress.arp_entries(now, self.ifaces.names())
    }
    pub fn rules(&self) -> Vec<RuleInfo> {
        self.flows.rules(self.ifaces.names())
    }
    /// (default permits, default denies) of the security-level rule.
    pub fn default_rule_hits(&self) -> (u64, u64) {
        self.flows.default_rule_hits()
    }
    /// `show cluster`; `None` in single-node mode.
    pub fn cluster_counters(&self) -> Option<ClusterCountersSnapshot> {
        self.cluster.as_deref().map(|cl| cl.snapshot())
    }
    /// The role and owner of a connection on this node, for tests and
    /// diagnostics: `Owner` for a local flow, else the record's role.
    /// Records past their idle timeout but not yet swept count as absent
    /// (as in `conns`).
    pub fn cluster_role(&self, now: Timestamp, tuple: &FiveTuple) -> Option<(Role, NodeId)> {
        self.cluster.as_deref()?.role(&self.flows.table, now, tuple)
    }
    /// The fragment path's counters.
    pub fn frag_counters(&self) -> &FragCounters {
        &self.frag.counters
    }
    /// The reassembler's counters (drops by reason, conservation).
    pub fn reasm_counters(&self) -> &ReasmCounters {
        self.frag.reasm_counters()
    }
    /// Datagrams in reassembly and fragments held now.
    pub fn frag_in_progress(&self) -> (usize, usize) {
        self.frag.in_progress()
    }
    /// Released held fragments dropped for `r`.
    pub fn frag_release_drops(&self, r: DropReason) -> u64 {
        self.frag.release_drops(r)
    }
    /// Bytes reserved for fragment handling: constant after `new`.
    pub fn frag_memory_bytes(&self) -> usize {
        self.frag.memory_bytes()
    }
    /// `show stats` for fragments.
    pub fn frag_snapshot(&self) -> FragSnapshot {
        self.frag.snapshot()
    }
}

/// The five-tuple of an unfragmented IPv4 TCP or UDP frame (untagged or
/// with one 802.1Q tag), read through the wire views without checksums:
/// only a prefetch hint.
#[inline]
fn hint_tuple(f: &[u8]) -> Option<FiveTuple> {
    let eth = EthernetFrame::new_checked(f).ok()?;
    if eth.tag_count() > 1 || eth.ethertype() != ethertype::IPV4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.is_fragment() {
        return None;
    }
    let (src_port, dst_port) = match ip.protocol() {
        crate::types::ip_proto::TCP => {
            let t = TcpPacket::new_checked(ip.payload()).ok()?;
            (t.src_port(), t.dst_port())
        }
        crate::types::ip_proto::UDP => {
            let u = UdpPacket::new_checked(ip.payload()).ok()?;
            (u.src_port(), u.dst_port())
        }
        _ => return None,
    };
    let (src, dst) = (IpAddr::V4(ip.src()), IpAddr::V4(ip.dst()));
    Some(FiveTuple { src, dst, proto: ip.protocol(), src_port, dst_port })
}
