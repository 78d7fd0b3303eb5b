//! The cluster stage: connection roles (SPEC R1–R9) on one worker
//! (docs/cluster-design.md). It exists only in cluster mode: `Pipeline`
//! holds `Option<Box<ClusterPath>>` and asks it once per transit packet,
//! and every method here is the cluster's own, on its own state.
//!
//! With `PipelineConfig::cluster` set, `Pipeline::process` parses, checks
//! and routes every frame exactly as the single-node pipeline does; the
//! cluster decides only *who* runs conntrack on a transit packet
//! (`plan.rs`, `ClusterPath::plan`):
//!
//! - **owner** (a local conntrack flow, or a new TCP SYN, or the director
//!   deciding for itself): conntrack as before, with sequence translation
//!   for cookie ISNs (R6) and flow records for the director/backups queued
//!   per burst (`records.rs`, `flush`);
//! - **forwarder** (a record names another owner, or the SYN-ACK's cookie
//!   does): the frame joins a `ForwardedBatch` to the owner or becomes a
//!   CCL `ForwardedPacket` in place and leaves on the CCL port (`send.rs`);
//! - short-lived replies (DNS from port 53, ICMP echo replies, ICMP errors)
//!   without a record go to the director as `RelayToOwner` (R7);
//! - anything else asks the director (`OwnerQuery`, R5/R8) and waits in
//!   the pending table (`pending.rs`, `Verdict::Consumed`).
//!
//! CCL datagrams arriving on the CCL interface (IPv4/UDP to our CCL address,
//! port `CCL_UDP_PORT`) are opened in place (`ccl_in.rs`): queries, replies
//! and flow records update the tables; a forwarded or relayed frame, the
//! frames of a batch and the frames an owner reply releases are handed back
//! to `Pipeline` (`CclNext`), which decides them as if received on their
//! ingress interface (no L2 destination check, no ARP learning) and files
//! the outcome here. The cluster stage never runs the other stages itself.
//!
//! Invariants:
//! - nothing here allocates after `ClusterPath::new`: the record table is
//!   a hashbrown map reserved for twice its capacity (in-place rehash, as
//!   in conntrack), frames waiting for an owner reply and generated CCL
//!   frames live in a fixed pool of `POOL_SLOTS` boxed 2 KiB slots
//!   (`slots::FramePool`; a slot's box is moved out and back while its
//!   frame is processed, never freed), flow records wait in a
//!   fixed-capacity queue until `flush`;
//! - per owner flow the extras (sequence delta) live in an array indexed by
//!   `FlowHandle::index()`, reset whenever conntrack creates the flow;
//! - every frame `process` sees ends in one counter, as before
//!   (`packets == forwarded + consumed + replies + drops`); a frame that
//!   leaves the pending table later is counted in `ClusterCounters`
//!   (`pending_released`, `pending_timeouts`, `pending_no_owner`,
//!   `pending_release_drops`);
//! - the CCL is authenticated: a datagram the `Opener` rejects is dropped
//!   (`DropReason::CclMalformed`) and counted by its `CclDrop` reason.
//!
//! Failover (`failover.rs`, docs/failover.md): every flow record carries
//! the owner's flow state; a record naming a node that is not in the
//! member set is never followed — its flow is taken over through the
//! director (R11); a member-set change re-registers the owned flows whose
//! director or backups moved (bounded scan in `poll_timers`, then
//! `SyncDone`); the lease fences the node; a SYN guard after every change
//! and the director's short hold keep one owner per connection.

pub(crate) mod ccl_in;
mod failover;
mod pending;
pub(crate) mod plan;
pub(crate) mod records;
pub(crate) mod send;

use super::context::{FragNote, Via};
use super::egress::Egress;
use super::iface::Interfaces;
use crate::ccl::{
    CclCounters, CclDrop, CclKey, ForwardedBatch, MessageKind, Opener, Sealer, BATCH_MAX_FRAMES, MAX_PAYLOAD_MTU1500,
};
use crate::cluster::{flow_hash, CookieCodec, DirectorTable, MemberSet};
use crate::conntrack::{ConnInfo, ConnTable, FlowState, TcpState, Timeouts};
use crate::frag::{fragment_owner, FragKey};
use crate::route::IfIndex;
use crate::slots::FramePool;
use crate::types::{ip_proto, DropReason, Duration, Epoch, FiveTuple, NodeId, PortId, Timestamp};
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::udp::UdpPacket;
use crate::ccl::CCL_UDP_PORT;
use hashbrown::HashMap;
use std::net::Ipv4Addr;

/// The neighbours the cluster stage sends through: the egress stage (CCL
/// peers' MACs, ARP requests for them) and the interface table.
pub(crate) struct Link<'a> {
    pub egress: &'a mut Egress,
    pub ifaces: &'a Interfaces,
}

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
    /// The membership lease at start: while `now >= lease` the pipeline is
    /// fenced (docs/failover.md; `Pipeline::set_lease` moves it). The node
    /// passes `Timestamp::ZERO` (fenced until membership grants a lease);
    /// tests, benches and the simulator `Timestamp::MAX` (never fenced).
    pub lease: Timestamp,
    /// Backup owners per flow, 1 or 2 (`cluster.backups`; R4 and beyond:
    /// with 2 any two simultaneous failures leave a holder of the state).
    pub backups: u8,
    /// How long after every member-set change a SYN without a record at a
    /// node that is not its director asks the director first (elect, R8)
    /// instead of owning the connection at once (R1): the SYN guard
    /// (docs/failover.md). `DEFAULT_SYN_GUARD`.
    pub syn_guard: Duration,
    /// How long a director holds an owner query (elect false) about a
    /// flow it has no record of, for a registration in flight, before it
    /// answers "none" (docs/failover.md, "Director hold");
    /// `DEFAULT_DIRECTOR_HOLD`. `Duration::ZERO` answers at once (the
    /// behaviour before issue 10; the golden tests' bed keeps it).
    pub director_hold: Duration,
    /// Director localization (R12, `cluster.director-localization`): a
    /// flow's record is also held by the local director at its owner's
    /// site, and a node asks the local director of its own site before the
    /// global one (docs/failover.md, "Director localization"). Needs site
    /// ids; members without one use the global director only.
    pub director_localization: bool,
    /// Site redundancy (R4, `cluster.site-redundancy`): a flow whose
    /// backups all sit at its owner's site gets one at another site too.
    pub site_redundancy: bool,
}

/// The SYN guard's default window: the half-open timeout (`tcp_syn`, 30 s:
/// after it the first owner's embryonic flow is gone, so a SYN elsewhere
/// cannot make a second owner) plus 5 s for the ECMP change to follow the
/// membership change (a joining node brings its data ports up when it is
/// ready, within `sync-timeout`, 5 s by default).
pub const DEFAULT_SYN_GUARD: Duration = Duration::from_secs(35);
/// The director hold's default (`ClusterSpec::director_hold`): half the
/// querier's `PENDING_TIMEOUT`, far more than a CCL round trip plus a
/// burst, and enough for a re-registration scan of ~25 k flows
/// (`SYNC_BUDGET` per 1 ms timer tick).
pub const DEFAULT_DIRECTOR_HOLD: Duration = Duration::from_millis(50);
/// Owner queries a director holds at most; more are answered "none" at
/// once (`held_full`).
pub const MAX_HELD: usize = 256;
/// Flow-table slots the re-registration scan visits per `poll_timers`.
pub const SYNC_BUDGET: usize = 512;
/// Epochs whose `SyncDone` markers are remembered (`sync_progress`).
pub const SYNC_EPOCHS: usize = 8;
/// How long a re-registration scan waits for the nodes new in the member
/// set to show they applied it (their `SyncDone` for the epoch) before it
/// sends them records anyway (`sync_wait_timeouts`), beyond the duration
/// of a scan of this node's table (capacity / `SYNC_BUDGET` ms): the
/// joiner's marker follows its own scan (its table is empty after its
/// reset, but a scan visits every slot). What this covers is the joiner's
/// control lcore applying the set a few milliseconds after the peers.
pub const SYNC_WAIT: Duration = Duration::from_millis(250);
/// After a scan, its `SyncDone` markers are sent again every
/// `SYNC_MARKER_EVERY` for `SYNC_MARKER_FOR` (while no new scan starts): a
/// marker lost on the CCL, or one that could not be sent (the peer's CCL
/// MAC not resolved yet when a node boots, `ccl_unresolved`), would leave
/// the joiner waiting for its sync timeout with its data ports down. A
/// repeated marker is harmless: it says again that this node's
/// re-registration for that epoch is done.
pub const SYNC_MARKER_EVERY: Duration = Duration::from_millis(50);
pub const SYNC_MARKER_FOR: Duration = Duration::from_secs(3);
/// Re-sends a receiver asks one peer for in one epoch (`SyncAgain`, after
/// a `SyncDone` that counted more flow records than arrived); then a short
/// marker is taken as done (`sync_short_accepted`).
pub const SYNC_AGAIN_MAX: u8 = 3;

/// Frames waiting for an owner reply, at most (the rest of the pool is for
/// generated CCL frames). Sized for floods of packets without a flow (ACK,
/// RST, UDP at a denied address: each asks its director): at 20 k queries
/// a second per member and a 10 ms CCL round trip under that load, 200
/// wait for an answer besides the held ones (`ClusterPath::held_share`);
/// with 256 a spoofed ACK flood kept the table full (flood_kinds). Parked
/// frames are found by tag (`FramePool::tagged`), not by a scan of the
/// pool's slots.
pub const MAX_PENDING: usize = 1024;
/// Within the SYN guard a SYN is parked and asked about only while fewer
/// frames than this wait for answers (and fewer than `MAX_HELD / 2` of
/// the director's own are held): past it, a SYN flood in the window would
/// fill the table and lose the legitimate SYNs with the flood's
/// (`cluster-pending-full`, flood_kinds). The SYNs beyond are owned at
/// once (R1, `syn_guard_skipped`): the guard's protection of a handshake
/// moved by the change is given up for them, their other half stays for
/// every other query (ACKs at non-owners, UDP replies).
pub const SYN_GUARD_PENDING: usize = MAX_PENDING / 2;
const LOCAL_RELEASES: usize = MAX_HELD + SYN_GUARD_PENDING;
/// Frame slots: pending frames plus generated frames between two
/// `drain_generated` calls (CCL messages, forwarded batches being filled,
/// and the frames of received batches: up to `BATCH_MAX_FRAMES` per CCL
/// datagram of a burst).
pub const POOL_SLOTS: usize = 2048;
/// Frames up to this length are batched (`ForwardedBatch`) on their way to
/// the owner; a longer one is wrapped alone, in place, unless a batch to
/// that owner is already open (then it joins the batches, so that frames
/// to one owner leave in the order they arrived).
pub const BATCH_FRAME_MAX: usize = 256;
/// A batch's payload at most: one 1522-byte frame (Ethernet, one VLAN tag)
/// fits alone, so a batch datagram is never longer than a forwarded frame.
pub const BATCH_PAYLOAD_MAX: usize = 1 + ForwardedBatch::ENTRY_HEAD + 1522;
/// How long a frame waits for an owner reply.
pub const PENDING_TIMEOUT: Duration = Duration::from_millis(100);
/// Flow records queued between two `flush` calls; a full queue is
/// flushed on the spot.
pub const MAX_UPDATES: usize = 256;
/// Flows taken over with a NAT binding between two drains by the pipeline
/// (`ClusterPath::take_adopted`; drained after each takeover and after
/// each CCL datagram): a `FlowHandOver` batch's records fit.
const MAX_ADOPTED: usize = crate::ccl::MAX_PAYLOAD_MTU1500 / crate::ccl::FlowRecord::V4_LEN + 1;
/// Delay between the re-sends of a lengthening state change (`Resend`).
pub const RESEND_DELAY: Duration = Duration::from_millis(2000);
/// How many times a lengthening state change is re-sent.
pub const RESENDS: u8 = 3;
/// Most lengthening state changes waiting for a re-send (a full queue
/// skips the re-send, counted in `resends_skipped`).
pub const MAX_RESENDS: usize = 16 * 1024;
/// Early-drop candidates looked at for one new record when the record
/// table is full (`ClusterPath::early_drop`).
pub const EVICT_SCAN: usize = 64;
/// How often `poll_timers` sweeps idle records.
pub const RECORD_SWEEP: Duration = Duration::from_millis(1000);
/// `FlowRecord::tcp_state` of a flow that is not TCP.
pub const STATE_NOT_TCP: u8 = 0xff;

/// What a node is to a connection (docs/cluster-design.md, "Roles").
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
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
    /// The owner's sequence delta (R6), handed to a new owner (R11).
    pub seq_delta: u32,
    pub last_seen: Timestamp,
    pub idle: Duration,
    /// The owner's version of the record, `None` when it carried none (an
    /// election, a forwarder record, a record from an older owner).
    pub version: Option<Version>,
    /// The owner's flow state from its last record (director and backup
    /// records), what a new owner installs (R11); `None` for forwarder
    /// and election records.
    pub state: Option<FlowState>,
    /// The owner left the member set and came back since this record was
    /// learned: a node that rejoins has reset (it owns nothing from
    /// before), so the record's owner is as gone as if it had not come
    /// back (takeover, no conflict with a live owner's registration)
    /// until the flow's live owner registers it again.
    pub owner_left: bool,
    /// To be handed to the flow's director (an orphan whose director is a
    /// node that cannot hold it: `ClusterPath::mark_handoffs`).
    pub handoff: bool,
    /// The flow's PAT binding from the owner's record (R9): a new owner
    /// keeps it, and only the member holding its block may take the flow
    /// over (its return traffic goes there, N5).
    pub binding: Option<crate::ccl::NatBinding>,
}

impl Record {
    /// An early-drop candidate (`ClusterPath::early_drop`): every record
    /// but the director's and backups' of a TCP connection past its
    /// handshake and not closed (`ESTABLISHED`, `FIN_WAIT`, `CLOSING`),
    /// what Linux conntrack calls assured. So: a connection in its
    /// handshake or done with it (a flood's SYNs, answered by the server
    /// and reset by the spoofed host, end in `CLOSED`), an election whose
    /// owner has not registered the flow (denied there, or a flood's), any
    /// UDP, ICMP or other flow (a director cannot tell a flood's
    /// one-packet flows from a live one: a spoofed ICMP flood at a
    /// permitted host filled the table with them, flood_kinds), and
    /// forwarder records (a cache: an evicted one costs its next packet a
    /// query). Never a translated flow's (its binding says where its
    /// return traffic goes and who may take it over, N5; a second owner
    /// elected for it would map it anew). The price: a UDP flow whose
    /// director record was evicted is elected anew where a packet of it
    /// next meets no forwarder record (its reply direction at another
    /// node, denied there if policy admits it only as a reply).
    pub(crate) fn evictable(&self) -> bool {
        const ASSURED: [u8; 3] = [TcpState::Established as u8, TcpState::FinWait as u8, TcpState::Closing as u8];
        self.binding.is_none() && (self.role == Role::Forwarder || !ASSURED.contains(&self.tcp_state))
    }

    /// A record without the owner's state or version (a forwarder record,
    /// an election), learned `now`.
    pub(crate) fn stateless(role: Role, owner: NodeId, orig: FiveTuple, tcp_state: u8, now: Timestamp, idle: Duration) -> Record {
        Record {
            role,
            owner,
            orig,
            tcp_state,
            seq_delta: 0,
            last_seen: now,
            idle,
            version: None,
            state: None,
            owner_left: false,
            handoff: false,
            binding: None,
        }
    }
}

const _: () = assert!(MAX_HELD * 4 <= MAX_PENDING, "the directors hold at most a quarter of a querier's pending table");
const _: () = assert!(MAX_PENDING < POOL_SLOTS, "pending frames leave pool slots for generated frames");
const _: () = assert!(FlowState::LEN == crate::ccl::STATE_LEN, "the record's state bytes are conntrack's FlowState");

pub use crate::ccl::FLAG_VERSIONED;

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
        r.version().map(|(generation, seq)| Version { generation, seq })
    }

    /// Write into a record's flags and opaque bytes.
    pub fn write(self, r: &mut crate::ccl::FlowRecord) {
        r.set_version(self.generation, self.seq);
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
    /// The flow's PAT binding, carried in its records (R9).
    pub binding: Option<crate::ccl::NatBinding>,
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
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
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
    /// Evictable records (`Record::evictable`: a connection in or done
    /// with its handshake, an election its owner has not confirmed)
    /// evicted, oldest first, for a new record when the table was full
    /// (`ClusterPath::early_drop`).
    pub records_evicted: u64,
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
    /// Failover (docs/failover.md). Flows taken over: by a `FlowTransfer`
    /// from the director, and locally (this node is the director holding
    /// the state).
    pub takeovers: u64,
    pub takeovers_local: u64,
    /// Director: queries about a flow whose owner left, answered with a
    /// `FlowTransfer` electing the querier.
    pub takeovers_granted: u64,
    /// Director: a grant sent again — its querier asked once more before
    /// registering (the `FlowTransfer` was lost on the CCL).
    pub grants_repeated: u64,
    /// Transfers refused: no query pending for them, not addressed to us,
    /// a bad state, the flow table full.
    pub transfers_refused: u64,
    /// Packets that met a record naming a node outside the member set
    /// (not followed, R11).
    pub dead_owner_records: u64,
    /// CCL messages (records, queries, replies) from nodes outside the
    /// member set, ignored; records naming such an owner, ignored.
    pub from_nonmembers: u64,
    /// Records whose flow state did not decode (kept without state).
    pub records_bad_state: u64,
    /// Orphan hand-off (docs/failover.md, "Orphans"): records of flows
    /// whose owner left, sent with their state to the flow's director when
    /// it is a node that (re)joined and cannot hold them; received and
    /// kept as the director's (the takeover decides there), received and
    /// ignored (this node owns the flow, or holds a live owner's record).
    pub handoffs_sent: u64,
    pub handoffs_received: u64,
    pub handoffs_ignored: u64,
    /// Re-registration after member-set changes: owned flows visited, and
    /// re-registered because their director or backups moved.
    pub sync_scanned: u64,
    pub reregistered: u64,
    /// `SyncDone` markers sent and received.
    pub sync_done_sent: u64,
    pub sync_done_received: u64,
    /// Re-registration scans that waited for a joiner's `SyncDone`, and
    /// those whose wait ran out (`SYNC_WAIT`) and sent anyway.
    pub sync_waits: u64,
    pub sync_wait_timeouts: u64,
    /// `SyncDone` markers sent on a later try (`SYNC_MARKER_EVERY`).
    pub sync_done_repeated: u64,
    /// Lost re-registrations (docs/failover.md): markers that counted
    /// more flow records than had arrived (`sync_short`); `SyncAgain`s
    /// sent for them (again for a marker of an older round: the request
    /// may be lost); re-sends done for peers' `SyncAgain`; short markers
    /// taken as done after `SYNC_AGAIN_MAX` requests.
    pub sync_short: u64,
    pub sync_again_sent: u64,
    pub sync_again_received: u64,
    pub sync_short_accepted: u64,
    /// SYNs parked and asked about within the SYN guard window.
    pub syn_guard_queries: u64,
    /// SYNs within the window owned at once because the pending table (or
    /// the director's hold) was half full: a SYN flood in the window
    /// (`SYN_GUARD_PENDING`).
    pub syn_guard_skipped: u64,
    /// SYNs the guard asked about whose query went unanswered
    /// (`PENDING_TIMEOUT`), owned then instead of dropped.
    pub guard_timeouts_owned: u64,
    /// RST|ACKs whose owner came from the cookie (ack − 1, R6).
    pub rst_cookie_decoded: u64,
    /// Director hold: queries held for a registration in flight, answered
    /// when it came, answered "none" at the deadline, refused (table full).
    pub queries_held: u64,
    pub held_answered: u64,
    pub held_timeouts: u64,
    pub held_full: u64,
    /// ... answered at once because the asking peer had its share held
    /// (`held_share`: a flood of queries from one member).
    pub held_share_full: u64,
    /// Parked frames dropped because the node was fenced.
    pub fenced_drops: u64,
    /// `Pipeline::reset` calls.
    pub resets: u64,
    /// Director/backup/forwarder records now.
    pub records: u64,
    /// Frames waiting for an owner reply now.
    pub pending: u64,
    /// R12, querier: owner queries sent to the local director of this
    /// node's site first, and those it did not know (asked the global
    /// director next).
    pub local_queries_sent: u64,
    pub local_fallbacks: u64,
    /// R12, local director: lookups answered with an owner, and answered
    /// "none" at once.
    pub local_answered: u64,
    pub local_unknown: u64,
    /// NAT (R11, N5): takeovers of translated flows sent to the member
    /// holding their binding's block (queries answered with it, packets
    /// forwarded to it), and takeovers refused because the bindings
    /// waiting for the NAT stage were too many.
    pub nat_takeovers_redirected: u64,
    pub bindings_overflow: u64,
    /// NAT: translated flows handed to the member their binding's block
    /// went back to (it came back): records sent in `FlowHandOver`
    /// batches, and such records taken over here.
    pub nat_handovers: u64,
    pub nat_handovers_received: u64,
    /// N3: frames of new multi-session PAT connections sent to the
    /// control node (`ToControl`), and such frames received there.
    pub to_control_sent: u64,
    pub to_control_received: u64,
    /// ... hand-overs dropped because their member left before they were
    /// sent, and hand-over records refused here (not this node's block,
    /// the sender not a member, a bad state, the flow already here).
    pub nat_handovers_failed: u64,
    pub nat_handovers_refused: u64,
    /// NAT: translated orphans this director handed to their block's
    /// holder after a member change, before any packet asked.
    pub nat_regrants: u64,
}

crate::impl_stats!(ClusterCounters {
    counter owner_packets,
    counter forwarded_to_owner,
    counter forwarded_received,
    counter batches_sent,
    counter batched_frames,
    counter batches_received,
    counter batch_frame_drops,
    counter synack_cookie_decoded,
    counter director_queries_sent,
    counter queries_coalesced,
    counter queries_answered,
    counter replies_received,
    counter elections,
    counter relays_sent,
    counter relays_relayed,
    counter relays_owned,
    counter pending_queued,
    counter pending_released,
    counter pending_timeouts,
    counter pending_no_owner,
    counter pending_release_drops,
    counter registers_sent,
    counter updates_sent,
    counter records_received,
    counter register_conflicts,
    counter ownership_yielded,
    counter record_table_full,
    counter records_expired,
    counter records_evicted,
    counter records_stale,
    counter registers_resent,
    counter updates_resent,
    counter resends_skipped,
    counter ccl_unresolved,
    counter pool_full,
    counter takeovers,
    counter takeovers_local,
    counter takeovers_granted,
    counter grants_repeated,
    counter transfers_refused,
    counter dead_owner_records,
    counter from_nonmembers,
    counter records_bad_state,
    counter handoffs_sent,
    counter handoffs_received,
    counter handoffs_ignored,
    counter sync_scanned,
    counter reregistered,
    counter sync_done_sent,
    counter sync_done_received,
    counter sync_waits,
    counter sync_wait_timeouts,
    counter sync_done_repeated,
    counter sync_short,
    counter sync_again_sent,
    counter sync_again_received,
    counter sync_short_accepted,
    counter syn_guard_queries,
    counter syn_guard_skipped,
    counter guard_timeouts_owned,
    counter rst_cookie_decoded,
    counter queries_held,
    counter held_answered,
    counter held_timeouts,
    counter held_full,
    counter held_share_full,
    counter fenced_drops,
    counter resets,
    gauge records,
    gauge pending,
    counter local_queries_sent,
    counter local_fallbacks,
    counter local_answered,
    counter local_unknown,
    counter nat_takeovers_redirected,
    counter bindings_overflow,
    counter nat_handovers,
    counter nat_handovers_failed,
    counter nat_handovers_received,
    counter nat_handovers_refused,
    counter to_control_sent,
    counter to_control_received,
    counter nat_regrants,
});

/// `Pipeline::sync_progress` (issue 10 contract): the re-registration for
/// one epoch, as the membership machine's readiness gate reads it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncProgress {
    pub epoch: Epoch,
    /// Bit n: node n's `SyncDone` for `epoch` arrived.
    pub done_from: u16,
    /// This worker finished its own re-registration for `epoch` (or a
    /// later one) and sent its `SyncDone`s.
    pub sent: bool,
}

impl SyncProgress {
    /// A node's progress from its workers' (each re-registers its own
    /// flows and hears its own channel's `SyncDone`s): a peer is done when
    /// it is done on every worker, the node's scan when every worker's is.
    /// Workers on different epochs (a member set on its way to them) have
    /// nothing done yet, at the older epoch.
    pub fn of_workers(mut workers: impl Iterator<Item = SyncProgress>) -> Option<SyncProgress> {
        let first = workers.next()?;
        Some(workers.fold(first, |a, b| {
            if a.epoch != b.epoch {
                SyncProgress { epoch: a.epoch.min(b.epoch), done_from: 0, sent: false }
            } else {
                SyncProgress { epoch: a.epoch, done_from: a.done_from & b.done_from, sent: a.sent && b.sent }
            }
        }))
    }
}

/// `show cluster` (a copy, off the packet path): identity, the cluster
/// counters, the worker's CCL counters by kind and drop reason, the frames
/// of received batches dropped by reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterCountersSnapshot {
    pub node: NodeId,
    pub epoch: u64,
    pub members: Vec<NodeId>,
    pub counters: ClusterCounters,
    pub ccl: CclCounters,
    /// By `DropReason::index()`.
    pub batch_drops: [u64; DropReason::COUNT],
    /// Parked frames dropped when their owner reply released them (a SYN
    /// the SYN guard held, then denied by policy here), by reason: they
    /// were counted `consumed` when parked, so not in the drops.
    pub release_drops: [u64; DropReason::COUNT],
}

impl ClusterCountersSnapshot {
    pub fn ccl_rx(&self, k: MessageKind) -> u64 {
        self.ccl.rx(k)
    }
    pub fn ccl_tx(&self, k: MessageKind) -> u64 {
        self.ccl.tx(k)
    }
    pub fn ccl_drop(&self, r: CclDrop) -> u64 {
        self.ccl.drop(r)
    }
}

impl crate::stats::Stats for ClusterCountersSnapshot {
    /// The cluster counters, then `ccl` (messages by kind, drops by reason,
    /// bytes), `batch_drops` by reason, and the member set's epoch and size.
    fn visit(&self, v: &mut dyn crate::stats::Visitor) {
        self.counters.visit(v);
        v.group("ccl", None, &self.ccl);
        let b = &self.batch_drops;
        v.family("batch_drops", "reason", &mut DropReason::ALL.iter().map(|&d| (d.as_str(), b.get(d.index()).copied().unwrap_or(0))));
        let r = &self.release_drops;
        v.family("release_drops", "reason", &mut DropReason::ALL.iter().map(|&d| (d.as_str(), r.get(d.index()).copied().unwrap_or(0))));
        v.gauge("epoch", self.epoch);
        v.gauge("members", self.members.len() as u64);
    }
}

/// One worker's cluster stage (`Pipeline::cluster`): its state is private
/// to `pipeline::cluster`; the rest of the pipeline sees methods.
pub(crate) struct ClusterPath {
    me: NodeId,
    /// For a trace (`pipeline::trace`): the sender of the last CCL
    /// message opened, and the member the last wrapped or batched frame
    /// went to (a store each; only a running trace reads them).
    pub(crate) trace_from: NodeId,
    pub(crate) trace_to: Option<NodeId>,
    /// The NAT plan when the node translates (`set_nat_plan`): where a
    /// binding's block is, for the takeover of a translated flow.
    nat: Option<std::sync::Arc<crate::nat::plan::NatPlan>>,
    /// Flows taken over with a binding, for the NAT stage to keep
    /// (`take_adopted`), at most `MAX_ADOPTED` between two drains.
    adopted: Vec<(crate::conntrack::FlowHandle, FiveTuple, crate::ccl::NatBinding)>,
    /// Translated orphans to hand to their block's holder
    /// (`queue_nat_regrants`).
    nat_regrants: Vec<FiveTuple>,
    /// Translated flows going to the member that holds their block again
    /// (`hand_over`): their records, sent in `FlowHandOver` batches by the
    /// re-registration scan (`handover_step`), ahead of its markers.
    handovers: Vec<(NodeId, crate::ccl::FlowRecord)>,
    members: MemberSet,
    directors: DirectorTable,
    seq_randomization: bool,
    ccl_ifx: IfIndex,
    ccl_port: PortId,
    ccl_mac: [u8; 6],
    ccl_addr: Ipv4Addr,
    /// CCL address per node id.
    peers: [Option<Ipv4Addr>; NodeId::MAX_NODES],
    sealer: Sealer,
    /// Several workers: data messages of other channels are not ours
    /// (`set_channel`).
    own_channel_only: bool,
    opener: Opener,
    cookies: CookieCodec,
    rng: u64,
    next_query_id: u32,
    records: HashMap<FiveTuple, Record>,
    record_capacity: usize,
    /// Keys of records that were evictable when learned or became so,
    /// oldest first: the early drop's candidates (`early_drop`). Bounded
    /// by the record capacity; a key whose record grew up, went or was
    /// replaced is skipped when it comes up.
    candidates: std::collections::VecDeque<FiveTuple>,
    /// Generation of the next owner flow created here (`Version`).
    next_generation: u32,
    next_sweep: Timestamp,
    extras: Vec<OwnerExtra>,
    /// Pending frames are the parked slots; generated CCL frames and
    /// released frames are queued for output.
    pool: FramePool<Pending>,
    updates: Vec<Update>,
    /// Re-sends due, in due order (every entry waits `RESEND_DELAY`).
    resends: std::collections::VecDeque<Resend>,
    /// Payload of a flow-record batch being written; `None` while in use.
    batch: Option<Box<[u8; MAX_PAYLOAD_MTU1500]>>,
    /// Per owner: the `ForwardedBatch` being filled this burst (sealed by
    /// `drain_generated`).
    fwd_batches: [Option<OpenBatch>; NodeId::MAX_NODES],
    /// Frames of a received batch wait in the pool for `drain_generated`:
    /// until then, forwarded frames decided later in the burst go there
    /// too (behind them), not out with the burst (`keep_order`).
    pooled_out: bool,
    /// The frames of the batch being received, copied into pool slots
    /// (slot, ingress interface), for the pipeline to decide in order.
    received: [(u16, u8); BATCH_MAX_FRAMES],
    received_len: usize,
    /// Frames of received batches dropped, by `DropReason::index()` (the
    /// carrying datagram is `consumed`; its frames are counted here).
    batch_drops: [u64; DropReason::COUNT],
    /// Released parked frames dropped, by reason (`release_dropped`).
    release_drops: [u64; DropReason::COUNT],
    /// Failover state (`failover.rs`).
    lease: Timestamp,
    syn_guard: Duration,
    director_hold: Duration,
    /// SYNs take the guard until then (`set_members` + `syn_guard`).
    guard_until: Timestamp,
    /// The table every owned flow is registered under; the scan moves
    /// flows from it to `directors`.
    synced: DirectorTable,
    sync: SyncScan,
    /// `SyncDone` bitmaps of recent epochs (a ring).
    done_from: [(Epoch, u16); SYNC_EPOCHS],
    done_next: usize,
    /// Flow records this worker sent each node in messages stamped
    /// `sent_epoch` (what its `SyncDone` counts), and the re-send round
    /// each node asked for in `sync.epoch` (`SyncAgain`).
    sent_epoch: Epoch,
    sent_to: [u32; NodeId::MAX_NODES],
    round_to: [u32; NodeId::MAX_NODES],
    /// Flow records received from each node, by the epoch their messages
    /// carried (a ring, like `done_from`).
    records_in: [Received; SYNC_EPOCHS],
    records_in_next: usize,
    /// Per peer: the epoch of the member set it last (re)joined in, here.
    /// Its datagrams sealed at an older epoch are from before it left
    /// (`DropReason::CclBeforeRejoin`): a control node admits a node at an
    /// epoch above every epoch it heard from it (docs/membership.md), so
    /// nothing the peer sent after its reset is older.
    joined_at: [Epoch; NodeId::MAX_NODES],
    /// Owner queries held by this director (`MAX_HELD`, reserved).
    held: Vec<HeldQuery>,
    /// Answers to this node's own held queries, for the pipeline to
    /// release (`next_local_release`).
    /// Answers for this node's own parked frames, released by the
    /// pipeline (`next_local_release`): its held queries' (at most
    /// `MAX_HELD`) and its guard SYNs' whose query timed out (at most
    /// `SYN_GUARD_PENDING`).
    local_releases: [(u32, Option<NodeId>); LOCAL_RELEASES],
    local_len: usize,
    pub counters: ClusterCounters,
}

/// The re-registration scan after a member-set change.
#[derive(Copy, Clone, Debug)]
pub(crate) struct SyncScan {
    pub epoch: Epoch,
    /// Next flow-table slot to visit; the scan is over at `capacity`.
    pub cursor: usize,
    pub running: bool,
    /// The scan for `epoch` finished and its `SyncDone`s were sent.
    pub sent: bool,
    pub started: Timestamp,
    /// How long the last finished scan took (from `set_members`).
    pub took: Duration,
    /// Bit n: node n is new in the member set (joined or rejoined) and its
    /// `SyncDone` for `epoch` has not arrived: records to it would meet a
    /// pipeline that does not count us as members yet and be dropped, so
    /// the scan waits for it (`SYNC_WAIT` after `started`, beyond a scan).
    pub awaiting: u16,
    /// This scan waited (counted once in `sync_waits`).
    pub waited: bool,
    /// Bit n: node n lost its state since the last finished scan (new in
    /// the set, or readmitted after a restart: `MemberSet::fresh_since`):
    /// owned flows it backs up or directs are registered with it whether
    /// or not the tables moved.
    pub fresh: u16,
    /// Orphan records marked for the hand-off (`Record::handoff`), sent
    /// before the scan once the fresh nodes applied the set.
    pub handoffs: usize,
    /// Bit n: the finished scan's marker to node n could not be sent; it
    /// is tried at `next_marker`, until `SYNC_MARKER_FOR` after the scan
    /// ended (`started + took`).
    pub unsent: u16,
    pub next_marker: Timestamp,
}

/// Flow records received from each peer in messages stamped `epoch`, since
/// the round each peer's re-registration is in (`SyncAgain` restarts the
/// count), and the requests sent to each.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Received {
    pub epoch: Epoch,
    pub records: [u32; NodeId::MAX_NODES],
    pub round: [u32; NodeId::MAX_NODES],
    pub asks: [u8; NodeId::MAX_NODES],
}

impl Received {
    const EMPTY: Received =
        Received { epoch: Epoch(0), records: [0; NodeId::MAX_NODES], round: [0; NodeId::MAX_NODES], asks: [0; NodeId::MAX_NODES] };
}

/// An owner query a director holds (`DIRECTOR_HOLD`).
#[derive(Copy, Clone, Debug)]
pub(crate) struct HeldQuery {
    pub query_id: u32,
    pub from: NodeId,
    pub flow: crate::ccl::FlowKey,
    pub key: FiveTuple,
    pub deadline: Timestamp,
    /// The asker may own the flow (`elect_if_absent`): at the deadline,
    /// with no registration seen, it is elected (R8) instead of told
    /// "none" (`ClusterPath::settling`).
    pub elect: bool,
}

/// A frame waiting for an owner reply (a parked slot of the pool).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Pending {
    pub query_id: u32,
    /// Canonical flow key (queries are coalesced by flow).
    pub key: FiveTuple,
    pub deadline: Timestamp,
    pub in_port: PortId,
    pub via: Via,
    /// Ingress interface (for wrapping the frame).
    pub ifx: IfIndex,
    /// A fragment already accounted for by the reassembler, with its
    /// datagram's L4 header and tuple (`Rx::frag`).
    pub frag: Option<FragNote>,
    /// R12: the query went to this node's local director; on "none" ask
    /// this global director, with this election flag.
    pub fallback: Option<(NodeId, bool)>,
    /// A SYN the guard asked about (a TCP election): unanswered at its
    /// deadline it is owned here rather than dropped (`expire_pending`).
    pub guard_syn: bool,
}

/// A `ForwardedBatch` being filled in a pool slot: its payload starts at
/// `FRAME_OVERHEAD - TAG_LEN` and is `used` bytes long, with `frames`
/// frames in it.
#[derive(Copy, Clone, Debug)]
pub(crate) struct OpenBatch {
    pub slot: u16,
    pub used: usize,
    pub frames: u8,
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
    #[error("cluster: backups must be 1 or 2, not {0}")]
    BadBackups(u8),
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
pub fn cookie_key(secret: &str) -> [u8; COOKIE_KEY_LEN] {
    let k = blake3::derive_key("clusterfw cookie isn v1", secret.as_bytes());
    let mut out = [0u8; COOKIE_KEY_LEN];
    out.copy_from_slice(&k[..COOKIE_KEY_LEN]);
    out
}

/// Bytes of the cookie key (SipHash-2-4's 128-bit key).
pub const COOKIE_KEY_LEN: usize = 16;

impl ClusterPath {
    /// `ccl`: the CCL interface (index, port, MAC, address); `slot_len`:
    /// bytes per pool slot. Reserves everything.
    pub fn new(
        spec: &ClusterSpec,
        ccl: (IfIndex, PortId, [u8; 6], Ipv4Addr),
        flow_capacity: usize,
        slot_len: usize,
    ) -> Result<Self, ClusterSpecError> {
        if spec.node.index() >= NodeId::MAX_NODES {
            return Err(ClusterSpecError::BadNode(spec.node));
        }
        if !spec.members.contains(spec.node) {
            return Err(ClusterSpecError::NotAMember(spec.node));
        }
        let key = CclKey::new(&spec.cluster_name, &spec.key).map_err(ClusterSpecError::Key)?;
        let sealer =
            Sealer::new(&key, spec.node, 0, spec.incarnation).map_err(ClusterSpecError::Key)?;
        let opener = Opener::new(&key, spec.node);
        if !(1..=crate::cluster::MAX_BACKUP_OWNERS).contains(&spec.backups) {
            return Err(ClusterSpecError::BadBackups(spec.backups));
        }
        let directors = DirectorTable::new(&spec.members)
            .map_err(|_| ClusterSpecError::NotAMember(spec.node))?
            .with_backups(spec.backups)
            .with_localization(spec.director_localization)
            .with_site_redundancy(spec.site_redundancy);
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
        Ok(ClusterPath {
            me: spec.node,
            trace_from: spec.node,
            trace_to: None,
            members: spec.members,
            nat: None,
            adopted: Vec::with_capacity(MAX_ADOPTED),
            nat_regrants: Vec::new(),
            handovers: Vec::new(),
            directors,
            seq_randomization: spec.seq_randomization,
            ccl_ifx,
            ccl_port,
            ccl_mac,
            ccl_addr,
            peers,
            sealer,
            own_channel_only: false,
            opener,
            cookies: CookieCodec::new(cookie_key(&spec.key)),
            rng,
            next_query_id,
            records: HashMap::with_capacity(flow_capacity.saturating_mul(2)),
            record_capacity: flow_capacity,
            candidates: std::collections::VecDeque::with_capacity(flow_capacity.max(1)),
            // Seconds since boot × 2^16: a restarted owner's generations
            // compare newer than the ones it used before.
            next_generation: spec.incarnation.wrapping_shl(16),
            next_sweep: Timestamp::ZERO,
            extras: vec![OwnerExtra::default(); flow_capacity],
            pool: FramePool::new(POOL_SLOTS, slot_len),
            updates: Vec::with_capacity(MAX_UPDATES),
            resends: std::collections::VecDeque::with_capacity(MAX_RESENDS.min(flow_capacity.max(64))),
            batch: Some(Box::new([0u8; MAX_PAYLOAD_MTU1500])),
            fwd_batches: [None; NodeId::MAX_NODES],
            pooled_out: false,
            received: [(0, 0); BATCH_MAX_FRAMES],
            received_len: 0,
            batch_drops: [0; DropReason::COUNT],
            release_drops: [0; DropReason::COUNT],
            lease: spec.lease,
            syn_guard: spec.syn_guard,
            director_hold: spec.director_hold,
            guard_until: Timestamp::ZERO,
            synced: directors,
            sync: SyncScan {
                epoch: spec.members.epoch(),
                cursor: 0,
                running: false,
                sent: true,
                started: Timestamp::ZERO,
                took: Duration::ZERO,
                awaiting: 0,
                waited: false,
                unsent: 0,
                next_marker: Timestamp::ZERO,
                fresh: 0,
                handoffs: 0,
            },
            done_from: [(Epoch(0), 0); SYNC_EPOCHS],
            done_next: 0,
            sent_epoch: spec.members.epoch(),
            sent_to: [0; NodeId::MAX_NODES],
            round_to: [0; NodeId::MAX_NODES],
            records_in: [Received::EMPTY; SYNC_EPOCHS],
            records_in_next: 0,
            joined_at: [Epoch(0); NodeId::MAX_NODES],
            held: Vec::with_capacity(MAX_HELD),
            local_releases: [(0, None); LOCAL_RELEASES],
            local_len: 0,
            counters: ClusterCounters::default(),
        })
    }

    /// This node.
    #[inline]
    /// One worker of several: seal on channel `channel` (the worker's
    /// index: every message this worker sends concerns connections of its
    /// own worker index, which the receiving node steers by) and take only
    /// that channel's data messages (docs/workers.md). A lone worker seals
    /// on 0 and takes every channel (all connections are its own). Before
    /// any send.
    pub fn set_channel(&mut self, channel: u8) -> Result<(), crate::ccl::CclError> {
        self.sealer = self.sealer.on_channel(channel)?;
        self.own_channel_only = true;
        Ok(())
    }

    pub fn me(&self) -> NodeId {
        self.me
    }

    /// Is this IPv4 datagram (to our address on `ifx`) a CCL message?
    #[inline]
    pub fn is_ccl_datagram<T: AsRef<[u8]>>(&self, ifx: IfIndex, ip: &Ipv4Packet<T>) -> bool {
        self.ccl_ifx == ifx
            && ip.protocol() == ip_proto::UDP
            && UdpPacket::new_checked(ip.payload()).is_ok_and(|u| u.dst_port() == CCL_UDP_PORT)
    }

    /// R10: the fragment owner of a fragment's datagram, when it is another
    /// member.
    #[inline]
    pub fn other_fragment_owner(&self, k: &FragKey) -> Option<NodeId> {
        let fo = fragment_owner(k.src, k.dst, k.ident, &self.directors);
        (fo != self.me).then_some(fo)
    }

    /// The CCL counters of this worker: the sealer's tx and the opener's rx
    /// and drops.
    fn ccl_counters(&self) -> CclCounters {
        let mut c = *self.opener.counters();
        c.add(self.sealer.counters());
        c
    }

    /// `show cluster`: counters, CCL messages and drops (off the packet path).
    pub fn snapshot(&self) -> ClusterCountersSnapshot {
        let mut counters = self.counters;
        counters.records = self.records.len() as u64;
        counters.pending = self.pool.parked() as u64;
        ClusterCountersSnapshot {
            node: self.me,
            epoch: self.members.epoch().0,
            members: self.members.iter().collect(),
            counters,
            ccl: self.ccl_counters(),
            batch_drops: self.batch_drops,
            release_drops: self.release_drops,
        }
    }

    /// A parked frame its owner reply released was dropped here for `r`.
    pub fn release_dropped(&mut self, r: DropReason) {
        if let Some(c) = self.release_drops.get_mut(r.index()) {
            *c += 1;
        }
    }

    /// A fresh query id (never 0: 0 marks an unsolicited reply).
    fn query_id(&mut self) -> u32 {
        let id = self.next_query_id;
        self.next_query_id = self.next_query_id.wrapping_add(1).max(1);
        id
    }

    /// A new member set (epoch-stamped): the director ranking follows it,
    /// the SYN guard opens, and the re-registration scan starts
    /// (`failover.rs`).
    /// The member set in force.
    pub fn members(&self) -> MemberSet {
        self.members
    }

    /// N3: the control node, when it is another member (the member set
    /// names it: `MemberSet::control`).
    #[inline]
    pub fn control_elsewhere(&self) -> Option<NodeId> {
        self.members.control().filter(|&c| c != self.me)
    }

    /// The configured nodes: this one and every CCL peer.
    pub fn configured(&self) -> MemberSet {
        let ids = (0..NodeId::MAX_NODES as u8).map(NodeId).filter(|n| *n == self.me || self.peers[n.index()].is_some());
        MemberSet::from_nodes(self.members.epoch(), ids).unwrap_or(self.members)
    }

    pub fn set_members(&mut self, now: Timestamp, members: MemberSet) {
        if let Ok(t) = DirectorTable::new(&members) {
            // Nodes that (re)joined or were readmitted after a restart:
            // what the records say they own is from before their reset.
            let joined = members.fresh_since(&self.members, self.me);
            for n in members.iter().filter(|n| joined >> n.0 & 1 != 0) {
                if let Some(e) = self.joined_at.get_mut(n.index()) {
                    *e = members.epoch();
                }
            }
            if joined != 0 {
                for r in self.records.values_mut() {
                    if joined >> (r.owner.0 & 15) & 1 != 0 && r.owner != self.me {
                        r.owner_left = true;
                    }
                }
            }
            let before = self.directors;
            self.members = members;
            self.directors = self.directors.same_rules(t);
            self.mark_handoffs(now, &before, joined);
            // Hand-overs to a member that left again go nowhere.
            let queued = self.handovers.len();
            self.handovers.retain(|(to, _)| members.contains(*to));
            self.counters.nat_handovers_failed += (queued - self.handovers.len()) as u64;
            self.start_sync(now, joined);
        }
    }

    /// The role and owner of a connection on this node: `Owner` for a local
    /// flow, else the record's role. Records past their idle timeout but
    /// not yet swept count as absent (as in `conns`).
    pub fn role(&self, conn: &ConnTable, now: Timestamp, tuple: &FiveTuple) -> Option<(Role, NodeId)> {
        if conn.lookup(tuple).is_some() {
            return Some((Role::Owner, self.me));
        }
        self.records.get(&canonical(tuple)).filter(|r| live(r, now)).map(|r| (r.role, r.owner))
    }

    /// Owner flows (already in `out`) annotated with role and owner, then
    /// director, backup and forwarder records (off the packet path).
    pub fn conns(&self, now: Timestamp, max: usize, out: &mut Vec<ConnInfo>) {
        for c in out.iter_mut() {
            c.role = Some(Role::Owner.as_str());
            c.owner = Some(self.me);
        }
        let mut recs: Vec<&Record> = self.records.values().filter(|r| live(r, now)).collect();
        // A cheap key (no string per row): role, then the tuple's fields.
        recs.sort_unstable_by_key(|r| {
            let o = &r.orig;
            (r.role.as_str(), o.src, o.src_port, o.dst, o.dst_port, o.proto)
        });
        for r in recs {
            if out.len() >= max {
                break;
            }
            let idle = now.since(r.last_seen);
            out.push(ConnInfo {
                tuple: r.orig,
                state: state_name(r.tcp_state, r.orig.proto),
                idle_ms: idle.0 / 1_000_000,
                expires_in_ms: r.idle.0.saturating_sub(idle.0) / 1_000_000,
                packets: [0; 2],
                bytes: [0; 2],
                role: Some(r.role.as_str()),
                owner: Some(r.owner),
            });
        }
    }

    /// The CCL port (data-port frames are fenced, CCL datagrams not).
    #[inline]
    pub fn ccl_port(&self) -> PortId {
        self.ccl_port
    }

    /// The director of a connection (its symmetric flow hash's first node).
    #[inline]
    fn director_of(&self, t: &FiveTuple) -> NodeId {
        self.directors.director(flow_hash(t))
    }

    /// This node's role for a record it keeps as director or backup.
    fn record_role(&self, t: &FiveTuple) -> Role {
        if self.director_of(t) == self.me {
            Role::Director
        } else {
            Role::Backup
        }
    }

    /// Insert or replace a record; `false` when the key is new and the
    /// table is full.
    /// The NAT plan in force (`Pipeline::set_nat_plan`, after leaves).
    pub fn set_nat_plan(&mut self, plan: Option<std::sync::Arc<crate::nat::plan::NatPlan>>) {
        self.nat = plan;
    }

    /// A translated orphan taken over here at a member change
    /// (`queue_nat_regrants`).
    pub fn count_nat_regrant(&mut self) {
        self.counters.nat_regrants += 1;
    }

    /// The flows taken over with a binding since the last call, for the
    /// NAT stage (`Pipeline::settle_adopted`).
    pub fn take_adopted(&mut self, mut f: impl FnMut(crate::conntrack::FlowHandle, &FiveTuple, crate::ccl::NatBinding)) {
        for (h, t, b) in self.adopted.drain(..) {
            f(h, &t, b);
        }
    }

    /// A translated flow this node owns got its binding (the NAT stage
    /// bound it after conntrack admitted it): it rides in the flow's
    /// records from now on, and in the ones queued for it this burst.
    pub fn set_binding(&mut self, h: crate::conntrack::FlowHandle, orig: &FiveTuple, b: crate::ccl::NatBinding) {
        let Some(e) = self.extras.get_mut(h.index() as usize) else { return };
        if e.binding == Some(b) {
            return;
        }
        e.binding = Some(b);
        // The registration was queued by conntrack's verdict, just before.
        let Ok(key) = crate::ccl::FlowKey::new(*orig) else { return };
        for u in self.updates.iter_mut().rev().take(2 * crate::cluster::MAX_BACKUPS + 2) {
            if u.record.flow == key {
                u.record.set_binding(Some(b));
            }
        }
    }

    /// The member that must own a translated flow taken over (R11): the
    /// holder of its binding's block under the plan in force (after the
    /// leaves, the block's heir), where its return traffic goes (N5).
    /// `None`: no binding, no NAT plan, or the holder is not a member
    /// (taken over as any flow).
    pub(super) fn binding_holder(&self, b: Option<crate::ccl::NatBinding>) -> Option<NodeId> {
        let (b, plan) = (b?, self.nat.as_deref()?);
        let class = crate::nat::PortClass::from_code(b.class);
        let h = plan.holder(b.addr, Some(class), b.port)?.node;
        self.members.contains(h).then_some(h)
    }

    /// Learn `rec` for `key`; a full table first evicts an evictable
    /// record (`early_drop`). `false`: full of records that may not be
    /// evicted (`Record::evictable`).
    fn upsert(&mut self, key: FiveTuple, rec: Record) -> bool {
        let evictable = rec.evictable();
        if let Some(r) = self.records.get_mut(&key) {
            let was = r.evictable();
            *r = rec;
            if evictable && !was {
                self.push_candidate(key);
            }
            return true;
        }
        if self.records.len() >= self.record_capacity && !self.early_drop(rec.last_seen) {
            return false;
        }
        self.records.insert(key, rec);
        if evictable {
            self.push_candidate(key);
        }
        true
    }

    /// Remember an evictable record's key; a full list forgets its oldest.
    fn push_candidate(&mut self, key: FiveTuple) {
        if self.candidates.len() >= self.candidates.capacity() {
            self.candidates.pop_front();
        }
        self.candidates.push_back(key);
    }

    /// Early drop for the record table (issue 15; Linux conntrack's
    /// `early_drop`): the oldest record that is still evictable or has
    /// idled out goes, looking at no more than `EVICT_SCAN` candidates. The
    /// records a failover needs (an assured TCP connection's, a translated
    /// flow's) are never evicted.
    fn early_drop(&mut self, now: Timestamp) -> bool {
        for _ in 0..EVICT_SCAN {
            let Some(key) = self.candidates.pop_front() else {
                return false;
            };
            if self.records.get(&key).is_some_and(|r| r.evictable() || !live(r, now)) {
                self.records.remove(&key);
                self.counters.records_evicted += 1;
                return true;
            }
        }
        false
    }
}

/// Idle timeout of a record for a flow of this protocol, before any state
/// update says otherwise.
fn idle_for(t: &Timeouts, proto: u8) -> Duration {
    match proto {
        ip_proto::TCP => t.tcp_established,
        ip_proto::UDP => t.udp,
        ip_proto::ICMP => t.icmp,
        _ => t.other,
    }
}

/// The idle timeout of a flow in `state` (`None`: not TCP).
fn state_timeout(t: &Timeouts, state: Option<TcpState>, proto: u8) -> Duration {
    match state {
        Some(TcpState::SynSent | TcpState::SynReceived) => t.tcp_syn,
        Some(TcpState::Established) => t.tcp_established,
        Some(TcpState::FinWait | TcpState::Closing) => t.tcp_closing,
        Some(TcpState::TimeWait | TcpState::Closed) => t.tcp_closed,
        None => idle_for(t, proto),
    }
}

/// `FlowRecord::tcp_state` → conntrack's name.
fn state_name(code: u8, proto: u8) -> &'static str {
    const TCP: [TcpState; 7] = [
        TcpState::SynSent,
        TcpState::SynReceived,
        TcpState::Established,
        TcpState::FinWait,
        TcpState::Closing,
        TcpState::TimeWait,
        TcpState::Closed,
    ];
    match TCP.iter().find(|s| **s as u8 == code) {
        Some(s) => s.as_str(),
        None => match proto {
            ip_proto::TCP => "TCP",
            ip_proto::UDP => "UDP",
            ip_proto::ICMP => "ICMP_ECHO",
            _ => "OTHER",
        },
    }
}

/// A record is live until its idle timeout passes.
fn live(r: &Record, now: Timestamp) -> bool {
    now.since(r.last_seen) < r.idle
}
