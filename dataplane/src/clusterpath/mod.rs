//! The cluster packet path: connection roles (SPEC R1–R9) on one worker,
//! inside `Pipeline` (docs/cluster-design.md).
//!
//! With `PipelineConfig::cluster` set, `Pipeline::process` parses, checks
//! and routes every frame exactly as the single-node pipeline does; the
//! cluster decides only *who* runs conntrack on a transit packet
//! (`path.rs`, `Pipeline::cluster_plan`):
//!
//! - **owner** (a local conntrack flow, or a new TCP SYN, or the director
//!   deciding for itself): conntrack as before, with sequence translation
//!   for cookie ISNs (R6) and flow records for the director/backups queued
//!   per burst (`flush`);
//! - **forwarder** (a record names another owner, or the SYN-ACK's cookie
//!   does): the frame becomes a CCL `ForwardedPacket` in place and leaves on
//!   the CCL port;
//! - short-lived replies (DNS from port 53, ICMP echo replies, ICMP errors)
//!   without a record go to the director as `RelayToOwner` (R7);
//! - anything else asks the director (`OwnerQuery`, R5/R8) and waits in
//!   the pending table (`Verdict::Consumed`).
//!
//! CCL datagrams arriving on the CCL interface (IPv4/UDP to our CCL address,
//! port `CCL_UDP_PORT`) are opened in place: forwarded and relayed frames
//! are unwrapped and processed as if received on their ingress interface
//! (no L2 destination check, no ARP learning); queries, replies and flow
//! records update the tables and are `Consumed`.
//!
//! Invariants:
//! - nothing here allocates after `ClusterState::new`: the record table is
//!   a hashbrown map reserved for twice its capacity (in-place rehash, as
//!   in conntrack), frames waiting for an owner reply and generated CCL
//!   frames live in a fixed pool of `POOL_SLOTS` boxed 2 KiB slots (a slot's
//!   box is moved out and back while its frame is processed, never freed),
//!   flow records wait in a fixed-capacity queue until `flush`;
//! - per owner flow the extras (sequence delta) live in an array indexed by
//!   `FlowHandle::index()`, reset whenever conntrack creates the flow;
//! - every frame `process` sees ends in one counter, as before
//!   (`packets == forwarded + consumed + replies + drops`); a frame that
//!   leaves the pending table later is counted in `ClusterCounters`
//!   (`pending_released`, `pending_timeouts`, `pending_no_owner`,
//!   `pending_release_drops`);
//! - the CCL is authenticated: a datagram the `Opener` rejects is dropped
//!   (`DropReason::CclMalformed`) and counted by its `CclDrop` reason.

mod path;
pub(crate) mod pool;

use crate::ccl::{CclCounters, CclDrop, CclKey, ForwardedBatch, MessageKind, Opener, Sealer, MAX_PAYLOAD_MTU1500};
use crate::cluster::{CookieCodec, DirectorTable, MemberSet};
use crate::route::IfIndex;
use crate::types::{DropReason, Duration, FiveTuple, NodeId, PortId, Timestamp};
use hashbrown::HashMap;
use std::net::Ipv4Addr;

pub(crate) use path::{Plan, Rx, Via, Wrap, Xlate};
use pool::FramePool;

/// The cluster identity of one node's pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSpec {
    pub node: NodeId,
    pub members: MemberSet,
    pub cluster_name: String,
    /// The shared cluster secret (CCL MAC key and cookie key derive from it).
    pub key: String,
    /// Boot time, seconds; goes in CCL headers (replay protection).
    pub incarnation: u32,
    /// R6: owners put a cookie ISN in new TCP connections; `false` makes
    /// forwarders query the director for SYN-ACKs too.
    pub seq_randomization: bool,
    /// Name of the `InterfaceSpec` that is the CCL port; its address is
    /// this node's CCL address.
    pub ccl_iface: String,
    /// CCL addresses of the other members (MACs learnt by ARP on the CCL
    /// interface, or from `PipelineConfig::static_neighbors`).
    pub peers: Vec<(NodeId, Ipv4Addr)>,
    /// Seeds the worker's PRNG (cookie randomness, query ids).
    pub random_seed: u64,
}

/// Frames waiting for an owner reply, at most (the rest of the pool is for
/// generated CCL frames).
pub const MAX_PENDING: usize = 256;
/// Frame slots: pending frames plus generated frames between two
/// `drain_generated` calls (CCL messages, forwarded batches being filled,
/// and the frames of received batches: up to `BATCH_MAX_FRAMES` per CCL
/// datagram of a burst).
pub const POOL_SLOTS: usize = 1024;
/// Frames up to this length are batched (`ForwardedBatch`) on their way to
/// the owner; a longer one is wrapped alone, in place, unless a batch to
/// that owner is already open (then it joins the batches, so that frames
/// to one owner leave in the order they arrived).
pub const BATCH_FRAME_MAX: usize = 256;
/// A batch's payload at most: one 1522-byte frame (Ethernet, one VLAN tag)
/// fits alone, so a batch datagram is never longer than a forwarded frame.
pub const BATCH_PAYLOAD_MAX: usize = 1 + ForwardedBatch::ENTRY_HEAD + 1522;
/// Bytes per slot: a 1522-byte frame wrapped in a CCL datagram fits.
pub const SLOT_LEN: usize = 2048;
/// How long a frame waits for an owner reply.
pub const PENDING_TIMEOUT: Duration = Duration::from_millis(100);
/// Flow records queued between two `flush` calls; a full queue is
/// flushed on the spot.
pub const MAX_UPDATES: usize = 256;
/// Delay between the re-sends of a lengthening state change (`Resend`).
pub const RESEND_DELAY: Duration = Duration::from_millis(2000);
/// How many times a lengthening state change is re-sent.
pub const RESENDS: u8 = 3;
/// Most lengthening state changes waiting for a re-send (a full queue
/// skips the re-send, counted in `resends_skipped`).
pub const MAX_RESENDS: usize = 16 * 1024;
/// How often `poll_timers` sweeps idle records.
pub const RECORD_SWEEP: Duration = Duration::from_millis(1000);
/// The worker's CCL channel (one worker per node for now).
pub const WORKER_CHANNEL: u8 = 0;
/// `FlowRecord::tcp_state` of a flow that is not TCP.
pub const STATE_NOT_TCP: u8 = 0xff;

/// What a node is to a connection (docs/cluster-design.md, "Roles").
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Role {
    Owner,
    Director,
    Backup,
    Forwarder,
}

impl Role {
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Owner => "owner",
            Role::Director => "director",
            Role::Backup => "backup",
            Role::Forwarder => "forwarder",
        }
    }
}

/// A director, backup or forwarder record.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Record {
    pub role: Role,
    pub owner: NodeId,
    /// The connection in its original direction (as the owner registered
    /// it, or as first seen here).
    pub orig: FiveTuple,
    pub tcp_state: u8,
    /// Replicated for failover (R11, a later issue); not used on the path.
    #[allow(dead_code)]
    pub seq_delta: u32,
    pub last_seen: Timestamp,
    pub idle: Duration,
    /// The owner's version of the record, `None` when it carried none (an
    /// election, a forwarder record, a record from an older owner).
    pub version: Option<Version>,
}

/// `FlowRecord::flags` bit: `opaque[0..8]` holds the record's `Version`.
pub const FLAG_VERSIONED: u8 = 0x01;

/// The version of a flow record (docs/ccl-protocol.md, "Flow record
/// versions"): `generation` numbers the flow's creations on its owner (a
/// per-node counter, started from the incarnation so that a restarted
/// owner counts on from a higher value), `seq` the records sent for that
/// creation (0 for the registration). Compared with wrapping arithmetic.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Version {
    pub generation: u32,
    pub seq: u32,
}

impl Version {
    /// Read from a record (`None` without `FLAG_VERSIONED`).
    pub fn from_record(r: &crate::ccl::FlowRecord) -> Option<Version> {
        if r.flags & FLAG_VERSIONED == 0 {
            return None;
        }
        let g = r.opaque.get(0..4)?;
        let s = r.opaque.get(4..8)?;
        Some(Version {
            generation: u32::from_be_bytes([g[0], g[1], g[2], g[3]]),
            seq: u32::from_be_bytes([s[0], s[1], s[2], s[3]]),
        })
    }

    /// Write into a record's flags and opaque bytes.
    pub fn write(self, r: &mut crate::ccl::FlowRecord) {
        r.flags |= FLAG_VERSIONED;
        if let Some(o) = r.opaque.get_mut(0..8) {
            o[..4].copy_from_slice(&self.generation.to_be_bytes());
            o[4..].copy_from_slice(&self.seq.to_be_bytes());
        }
    }

    /// Is `self` older than `held` (the same owner's record already held)?
    /// A later generation wins over any record of an earlier one; within a
    /// generation the higher `seq` wins; equal versions are not older (a
    /// duplicate refreshes the record). Wrapping comparisons.
    pub fn older_than(self, held: Version) -> bool {
        if self.generation != held.generation {
            (self.generation.wrapping_sub(held.generation) as i32) < 0
        } else {
            (self.seq.wrapping_sub(held.seq) as i32) < 0
        }
    }
}

/// Per owner flow, indexed by `FlowHandle::index()`.
#[derive(Copy, Clone, Debug, Default)]
pub(crate) struct OwnerExtra {
    /// Cookie ISN minus the client's ISN (0: no translation).
    pub delta: u32,
    /// When the last flow record for this flow was queued: an active flow
    /// without state changes is re-sent after half its idle timeout, so the
    /// director's and backups' records do not expire under it.
    pub sent: Timestamp,
    /// Version of the last flow record queued for this flow.
    pub version: Version,
    /// Idle timeout the last flow record carried.
    pub sent_idle: Duration,
}

/// A state change that lengthened a flow's record timeout (SYN → ESTABLISHED):
/// if that `StateUpdate` was lost the director and backups still hold the
/// short-lived record and drop it under an idle connection, so the owner
/// sends the record again `RESEND_DELAY` later, `RESENDS` times (no acks on
/// the CCL).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Resend {
    pub orig: FiveTuple,
    pub generation: u32,
    pub due: Timestamp,
    pub left: u8,
}


/// A flow record waiting for `flush`.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Update {
    pub to: NodeId,
    pub register: bool,
    pub record: crate::ccl::FlowRecord,
}

/// Cluster counters (docs/cluster-design.md, "Counters").
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClusterCounters {
    /// Packets this node processed as the owner (conntrack ran here).
    pub owner_packets: u64,
    /// Frames sent to another owner (`ForwardedPacket` or in a
    /// `ForwardedBatch`).
    pub forwarded_to_owner: u64,
    /// Forwarded frames received and processed as owner.
    pub forwarded_received: u64,
    /// `ForwardedBatch` messages sent, and the frames they carried (also in
    /// `forwarded_to_owner`).
    pub batches_sent: u64,
    pub batched_frames: u64,
    /// `ForwardedBatch` messages received; their frames dropped here (by
    /// reason in `batch_drops`) or lost for want of a pool slot.
    pub batches_received: u64,
    pub batch_frame_drops: u64,
    /// SYN-ACKs whose owner came from the cookie (R6).
    pub synack_cookie_decoded: u64,
    pub director_queries_sent: u64,
    /// Packets that joined a query already pending for their flow.
    pub queries_coalesced: u64,
    pub queries_answered: u64,
    /// Owner replies received.
    pub replies_received: u64,
    /// Director records created by electing the querier (R8).
    pub elections: u64,
    /// Frames sent to the director as `RelayToOwner` (R7).
    pub relays_sent: u64,
    /// Relays this director passed on to the owner.
    pub relays_relayed: u64,
    /// Relays this director processed itself (it owns the flow).
    pub relays_owned: u64,
    /// Frames parked waiting for an owner reply.
    pub pending_queued: u64,
    /// Parked frames released by an owner reply and sent on.
    pub pending_released: u64,
    /// Parked frames dropped: no reply in `PENDING_TIMEOUT`.
    pub pending_timeouts: u64,
    /// Parked frames dropped: the director knows no owner.
    pub pending_no_owner: u64,
    /// Parked frames dropped when released (policy, ARP, ...).
    pub pending_release_drops: u64,
    /// Flow records queued: registrations and state updates.
    pub registers_sent: u64,
    pub updates_sent: u64,
    /// Flow records received.
    pub records_received: u64,
    /// A second registration named another owner: the latecomer was told
    /// the first owner.
    pub register_conflicts: u64,
    /// Owner flows given up because the director named an earlier owner.
    pub ownership_yielded: u64,
    /// Records refused because the record table was full (control path).
    pub record_table_full: u64,
    /// Records removed by their idle timeout.
    pub records_expired: u64,
    /// Flow records ignored: older than the version held (reordered).
    pub records_stale: u64,
    /// Registrations re-sent for a retransmitted SYN (the first may have
    /// been lost).
    pub registers_resent: u64,
    /// Lengthening state changes re-sent (`Resend`), and re-sends skipped
    /// because the queue was full.
    pub updates_resent: u64,
    pub resends_skipped: u64,
    /// CCL messages not sent: peer MAC unresolved or unknown peer.
    pub ccl_unresolved: u64,
    /// Generated frames not queued: the frame pool was full.
    pub pool_full: u64,
    /// Director/backup/forwarder records now.
    pub records: u64,
    /// Frames waiting for an owner reply now.
    pub pending: u64,
}

/// `show cluster`: the cluster counters and the CCL counters by kind and
/// drop reason.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ClusterCountersSnapshot {
    pub node: NodeId,
    pub epoch: u64,
    pub members: Vec<NodeId>,
    #[serde(flatten)]
    pub counters: ClusterCounters,
    /// `(kind, rx, tx)`.
    pub ccl: Vec<(&'static str, u64, u64)>,
    /// `(reason, count)`, every `CclDrop`.
    pub ccl_drops: Vec<(&'static str, u64)>,
    /// Frames of received batches dropped, non-zero reasons.
    pub batch_drops: Vec<(&'static str, u64)>,
    pub ccl_rx_bytes: u64,
    pub ccl_tx_bytes: u64,
}

impl ClusterCountersSnapshot {
    pub fn ccl_rx(&self, k: MessageKind) -> u64 {
        self.ccl.iter().find(|(n, _, _)| *n == k.as_str()).map_or(0, |c| c.1)
    }
    pub fn ccl_tx(&self, k: MessageKind) -> u64 {
        self.ccl.iter().find(|(n, _, _)| *n == k.as_str()).map_or(0, |c| c.2)
    }
    pub fn ccl_drop(&self, r: CclDrop) -> u64 {
        self.ccl_drops.iter().find(|(n, _)| *n == r.as_str()).map_or(0, |c| c.1)
    }
}

/// One worker's cluster state (`Pipeline::cluster`).
pub(crate) struct ClusterState {
    pub me: NodeId,
    pub members: MemberSet,
    pub directors: DirectorTable,
    pub seq_randomization: bool,
    pub ccl_ifx: IfIndex,
    pub ccl_port: PortId,
    pub ccl_mac: [u8; 6],
    pub ccl_addr: Ipv4Addr,
    /// CCL address per node id.
    pub peers: [Option<Ipv4Addr>; NodeId::MAX_NODES],
    pub sealer: Sealer,
    pub opener: Opener,
    pub cookies: CookieCodec,
    pub rng: u64,
    pub next_query_id: u32,
    pub records: HashMap<FiveTuple, Record>,
    pub record_capacity: usize,
    /// Generation of the next owner flow created here (`Version`).
    pub next_generation: u32,
    pub next_sweep: Timestamp,
    pub extras: Vec<OwnerExtra>,
    pub pool: FramePool,
    pub updates: Vec<Update>,
    /// Re-sends due, in due order (every entry waits `RESEND_DELAY`).
    pub resends: std::collections::VecDeque<Resend>,
    /// Payload of a flow-record batch being written; `None` while in use.
    pub batch: Option<Box<[u8; MAX_PAYLOAD_MTU1500]>>,
    /// Per owner: the `ForwardedBatch` being filled this burst (sealed by
    /// `drain_generated`).
    pub fwd_batches: [Option<OpenBatch>; NodeId::MAX_NODES],
    /// Frames of a received batch wait in the pool for `drain_generated`:
    /// until then, forwarded frames decided later in the burst go there
    /// too (behind them), not out with the burst (`keep_order`).
    pub pooled_out: bool,
    /// Frames of received batches dropped, by `DropReason::index()` (the
    /// carrying datagram is `consumed`; its frames are counted here).
    pub batch_drops: [u64; DropReason::COUNT],
    pub counters: ClusterCounters,
}

/// A `ForwardedBatch` being filled in a pool slot: its payload starts at
/// `FRAME_OVERHEAD - TAG_LEN` and is `used` bytes long.
#[derive(Copy, Clone, Debug)]
pub(crate) struct OpenBatch {
    pub slot: u16,
    pub used: usize,
    pub path: crate::ccl::FramePath,
}

/// Errors in `ClusterSpec`, reported by `Pipeline::new`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClusterSpecError {
    #[error("cluster: CCL interface {0:?} is not configured")]
    UnknownCclIface(String),
    #[error("cluster: CCL interface {0:?} must be untagged")]
    TaggedCclIface(String),
    #[error("cluster: node {0} is not in the member set")]
    NotAMember(NodeId),
    #[error("cluster: node id {0} out of range (0..=15)")]
    BadNode(NodeId),
    #[error("cluster: CCL key: {0}")]
    Key(crate::ccl::CclError),
}

/// splitmix64 step.
pub(crate) fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The direction-free key of a connection: the endpoint that sorts first
/// is the source.
pub(crate) fn canonical(t: &FiveTuple) -> FiveTuple {
    if (t.src, t.src_port) <= (t.dst, t.dst_port) {
        *t
    } else {
        t.reversed()
    }
}

/// The cookie key (`CookieCodec::new`): 16 bytes derived from the cluster
/// secret, distinct from the CCL MAC key.
pub fn cookie_key(secret: &str) -> [u8; 16] {
    let k = blake3::derive_key("clusterfw cookie isn v1", secret.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&k[..16]);
    out
}

impl ClusterState {
    /// `ifx`/`port`/`mac`/`addr`: the CCL interface. Reserves everything.
    pub fn new(
        spec: &ClusterSpec,
        ccl: (IfIndex, PortId, [u8; 6], Ipv4Addr),
        flow_capacity: usize,
    ) -> Result<Self, ClusterSpecError> {
        if spec.node.index() >= NodeId::MAX_NODES {
            return Err(ClusterSpecError::BadNode(spec.node));
        }
        if !spec.members.contains(spec.node) {
            return Err(ClusterSpecError::NotAMember(spec.node));
        }
        let key = CclKey::new(&spec.cluster_name, &spec.key).map_err(ClusterSpecError::Key)?;
        let sealer =
            Sealer::new(&key, spec.node, WORKER_CHANNEL, spec.incarnation).map_err(ClusterSpecError::Key)?;
        let opener = Opener::new(&key, spec.node);
        let directors = DirectorTable::new(&spec.members).map_err(|_| ClusterSpecError::NotAMember(spec.node))?;
        let mut peers = [None; NodeId::MAX_NODES];
        for &(n, a) in &spec.peers {
            if n.index() >= NodeId::MAX_NODES {
                return Err(ClusterSpecError::BadNode(n));
            }
            peers[n.index()] = Some(a);
        }
        let mut rng = spec.random_seed;
        let next_query_id = (next_random(&mut rng) as u32).max(1);
        let (ccl_ifx, ccl_port, ccl_mac, ccl_addr) = ccl;
        Ok(ClusterState {
            me: spec.node,
            members: spec.members,
            directors,
            seq_randomization: spec.seq_randomization,
            ccl_ifx,
            ccl_port,
            ccl_mac,
            ccl_addr,
            peers,
            sealer,
            opener,
            cookies: CookieCodec::new(cookie_key(&spec.key)),
            rng,
            next_query_id,
            records: HashMap::with_capacity(flow_capacity.saturating_mul(2)),
            record_capacity: flow_capacity,
            // Seconds since boot × 2^16: a restarted owner's generations
            // compare newer than the ones it used before.
            next_generation: spec.incarnation.wrapping_shl(16),
            next_sweep: Timestamp::ZERO,
            extras: vec![OwnerExtra::default(); flow_capacity],
            pool: FramePool::new(POOL_SLOTS),
            updates: Vec::with_capacity(MAX_UPDATES),
            resends: std::collections::VecDeque::with_capacity(MAX_RESENDS.min(flow_capacity.max(64))),
            batch: Some(Box::new([0u8; MAX_PAYLOAD_MTU1500])),
            fwd_batches: [None; NodeId::MAX_NODES],
            pooled_out: false,
            batch_drops: [0; DropReason::COUNT],
            counters: ClusterCounters::default(),
        })
    }

    /// The CCL counters of this worker: the sealer's tx and the opener's rx
    /// and drops.
    pub fn ccl_counters(&self) -> CclCounters {
        let mut c = *self.opener.counters();
        c.add(self.sealer.counters());
        c
    }

    pub fn snapshot(&self) -> ClusterCountersSnapshot {
        let c = self.ccl_counters();
        let mut counters = self.counters;
        counters.records = self.records.len() as u64;
        counters.pending = self.pool.pending() as u64;
        ClusterCountersSnapshot {
            node: self.me,
            epoch: self.members.epoch().0,
            members: self.members.iter().collect(),
            counters,
            ccl: c.by_kind().collect(),
            ccl_drops: c.by_drop().collect(),
            batch_drops: DropReason::ALL
                .iter()
                .map(|&d| (d.as_str(), self.batch_drops.get(d.index()).copied().unwrap_or(0)))
                .filter(|&(_, n)| n != 0)
                .collect(),
            ccl_rx_bytes: c.rx_bytes,
            ccl_tx_bytes: c.tx_bytes,
        }
    }

    /// A fresh query id (never 0: 0 marks an unsolicited reply).
    pub fn query_id(&mut self) -> u32 {
        let id = self.next_query_id;
        self.next_query_id = self.next_query_id.wrapping_add(1).max(1);
        id
    }
}
