//! The driver side of the cluster control link (CCL): which queue gets
//! what, the hand-off between the worker and the control lcore, and the
//! control lcore's I/O for membership. I/O only: the membership logic
//! (heartbeat schedule, per-peer state) is `controlplane::membership`, its
//! frames are sealed and opened by `membership::ControlLink`; this module
//! moves mbufs and hands the machine the node's `Clock` time.
//!
//! The CCL port has two RX/TX queue pairs where the device offers them
//! (af_packet: `qpairs=2`). Queue 0 is the worker's: it polls it like a data
//! port and runs every frame through `Pipeline::process` (forwarded packets,
//! owner queries and replies, flow records, ARP on the CCL). Queue 1 is the
//! control lcore's (SPEC P2). A NIC or af_packet spreads received frames
//! over the two queues by a flow hash, not by message kind, so each side
//! passes on what belongs to the other:
//!
//! - control-channel messages (UDP source port `CCL_UDP_PORT + 255`: the
//!   heartbeats) go to the control lcore, which opens them with its own
//!   `Opener` (its own replay windows for channel 255);
//! - everything else goes to the worker.
//!
//! The hand-off queues are bounded lock-free `ArrayQueue`s of mbufs; a full
//! queue frees the mbuf and counts a drop. With one queue pair the worker
//! receives everything, and the control lcore's heartbeats reach the wire
//! through the worker's TX (queue `tx_via_worker`). A new member set or a
//! reset from the membership machine waits in [`CclControl`] until the
//! control thread puts it on the worker's query queue
//! (`crate::shared::offer_commands`); the lease goes through an atomic.
//!
//! Invariant: the worker never blocks on, and never allocates for, the
//! hand-off; the control lcore only touches queue 1 of the CCL port.

use crossbeam_queue::ArrayQueue;
use crate::links::{Change, Links};
use crate::shared::{push_command, Query};
use controlplane::membership::{Action, ControlLink, Membership, ReplicaChange, TableError, MAX_CONTROL_FRAME};
use controlplane::natshare::{self, NatShare};
use dataplane::ccl::{CclCounters, CCL_UDP_PORT, CONTROL_CHANNEL};
use dataplane::wire::ethernet::{ethertype, EthernetFrame};
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::udp;
use dataplane::{ip_proto, Timestamp};
use dpdk_sys::{Mbuf, MbufBurst, Mempool, Port};
use std::sync::atomic::{AtomicU64, Ordering};
use std::collections::VecDeque;
use std::sync::Arc;

/// Capacity of each hand-off queue (mbufs).
pub const HANDOFF_CAPACITY: usize = 2048;
/// Frames the worker takes from `to_worker` per loop, at most: all it
/// can hold. Frames there were already received (and copied) once, by the
/// control lcore; a frame left behind is a frame lost when the queue
/// fills (a query, a reply, a forwarded packet), and one burst (then four)
/// a loop let it overflow under floods on a starved bed
/// (`to_worker_drops`, flood_kinds). Bounded by the queue's capacity, so
/// a loop is too.
pub const HANDOFF_DRAIN: usize = HANDOFF_CAPACITY;
/// Capacity of the queue of frames the control lcore sends through the
/// worker when the CCL port has one queue (mbufs).
pub const TX_VIA_WORKER_CAPACITY: usize = 64;
/// The UDP source port of control-channel messages.
pub const CONTROL_SRC_PORT: u16 = CCL_UDP_PORT + CONTROL_CHANNEL as u16;

/// What the worker and the control lcore share about the CCL.
pub struct CclShared {
    /// Frames the control lcore received on queue 1 that are the worker's.
    pub to_worker: ArrayQueue<Mbuf>,
    /// Control-channel frames the worker received on queue 0.
    pub to_control: ArrayQueue<Mbuf>,
    /// Frames the control lcore wants sent when the port has one queue.
    pub tx_via_worker: ArrayQueue<Mbuf>,
    pub to_worker_drops: AtomicU64,
    pub to_control_drops: AtomicU64,
    pub tx_via_worker_drops: AtomicU64,
    /// Frames handed over, per direction.
    pub to_worker_frames: AtomicU64,
    pub to_control_frames: AtomicU64,
    /// The membership lease (ns of the node's clock) the worker applies
    /// with `Pipeline::set_lease` (it reads this once per loop): 0 fenced.
    pub lease_ns: AtomicU64,
    /// Each worker's re-registration progress for its current member set
    /// (`pack_sync`), published once per timer tick; the control lcore
    /// hands the node's (`SyncProgress::of_workers`) to `on_sync`.
    pub sync: Box<[AtomicU64]>,
    /// Bumped when the data ports come up: the worker announces the node
    /// (gratuitous ARPs, `Pipeline::announce`).
    pub announce: AtomicU64,
}

/// `SyncProgress` in one word: epoch (47 bits), sent (1), done_from (16).
pub fn pack_sync(p: &dataplane::pipeline::SyncProgress) -> u64 {
    ((p.epoch.0 & ((1 << 47) - 1)) << 17) | (u64::from(p.sent) << 16) | u64::from(p.done_from)
}

/// The inverse of [`pack_sync`]: (epoch, done_from, sent).
pub fn unpack_sync(w: u64) -> (dataplane::Epoch, u16, bool) {
    (dataplane::Epoch(w >> 17), w as u16, w & (1 << 16) != 0)
}

impl CclShared {
    /// For `workers` workers.
    pub fn new(workers: usize) -> CclShared {
        CclShared {
            to_worker: ArrayQueue::new(HANDOFF_CAPACITY),
            to_control: ArrayQueue::new(HANDOFF_CAPACITY),
            tx_via_worker: ArrayQueue::new(TX_VIA_WORKER_CAPACITY),
            to_worker_drops: AtomicU64::new(0),
            to_control_drops: AtomicU64::new(0),
            tx_via_worker_drops: AtomicU64::new(0),
            to_worker_frames: AtomicU64::new(0),
            to_control_frames: AtomicU64::new(0),
            lease_ns: AtomicU64::new(0),
            sync: (0..workers.max(1)).map(|_| AtomicU64::new(0)).collect(),
            announce: AtomicU64::new(0),
        }
    }
}

/// Whether `frame` is a control-channel CCL message (Ethernet, up to two
/// VLAN tags, IPv4, UDP from `CONTROL_SRC_PORT` to `CCL_UDP_PORT`), read
/// through the wire views. Only the headers up to the UDP ports must be
/// present (this only routes the frame; the `Opener` checks it); a frame
/// too short to tell is not (the worker's pipeline then counts it).
pub fn is_control_frame(frame: &[u8]) -> bool {
    let Ok(eth) = EthernetFrame::new_checked(frame) else { return false };
    if eth.ethertype() != ethertype::IPV4 {
        return false;
    }
    let Ok(ip) = Ipv4Packet::new_checked_header(eth.payload()) else { return false };
    if ip.protocol() != ip_proto::UDP {
        return false;
    }
    udp::ports(ip.payload()) == Some((CONTROL_SRC_PORT, CCL_UDP_PORT))
}

/// The control lcore's CCL endpoint: queue 1 of the CCL port (or the
/// worker's queue through `tx_via_worker`), the membership machine, the
/// link that seals and opens its frames, and the node's links (carrier in,
/// shut/open orders out). It carries out the machine's actions: frames on
/// the CCL, member sets and resets as commands to the worker (in order),
/// the lease through an atomic the worker reads every loop, the data
/// ports' link state, events as log lines.
pub struct CclControl {
    port: Port,
    /// The control queue (the last: one after the workers'); `None`: one
    /// queue, the worker's.
    queue: Option<u16>,
    pool: Arc<Mempool>,
    shared: Arc<CclShared>,
    link: ControlLink,
    pub membership: Membership,
    links: Links,
    /// Control-channel frames handed to the port (or to the worker's TX).
    pub frames_sent: u64,
    /// Frames not sealed, not allocated or not taken by the port.
    pub send_failures: u64,
    /// Commands (member sets, resets) the worker's queue has not taken yet.
    pub pending: VecDeque<Query>,
    /// Data-port orders carried out (shut, open).
    pub ports_shut: u64,
    pub ports_opened: u64,
    /// The last sync progress handed to the machine.
    last_sync: u64,
    /// The replicated configuration changed since `take_replica_change`
    /// (`Action::Replica`): the node checks which policy to run.
    replica_changed: bool,
    /// Dynamic NAT in the cluster (N4): the control node's side, acting
    /// while this node is the control node.
    pub natshare: NatShare,
    changes: Vec<Change>,
    rx: MbufBurst,
    tx: MbufBurst,
    /// The previous `poll` (this lcore's own stalls).
    last_poll: Option<Timestamp>,
    stalled: bool,
    /// Membership events for the syslog exporter (`take_events`; at most
    /// `EVENTS_KEPT`, the oldest dropped beyond).
    events: VecDeque<controlplane::membership::MembershipEvent>,
    /// Members' cluster-wide queries for this node to answer
    /// (`take_queries`; the machine bounds them, `ANSWERS_KEPT`).
    queries: VecDeque<QueryAsked>,
    /// Members' connection counts (`Action::LimitReport`) for the limit
    /// estimate (`Control`), oldest first; bounded.
    limit_reports: VecDeque<LimitReportIn>,
}

/// A member's query this node answers (`Action::Query`).
#[derive(Clone, Debug)]
pub struct QueryAsked {
    pub from: dataplane::NodeId,
    pub incarnation: u32,
    pub query: u32,
    pub topic: u8,
    pub arg: Vec<u8>,
}

/// A member's connection counts: (member, its report sequence, classes,
/// clients), as `Action::LimitReport` gives them.
pub type LimitReportIn = (dataplane::NodeId, u32, Vec<dataplane::ccl::ClassCount>, Vec<dataplane::ccl::ClientCount>);

/// Members' limit reports kept between two control rounds (16 members,
/// a few rounds of each).
const LIMIT_REPORTS_KEPT: usize = 64;

/// Membership events kept for the exporter between two control rounds.
const EVENTS_KEPT: usize = 256;

pub struct CclControlConfig {
    pub port: Port,
    /// The control lcore's queue of the CCL port (`None`: the port has
    /// one queue pair, the worker's).
    pub control_queue: Option<u16>,
    pub pool: Arc<Mempool>,
    pub shared: Arc<CclShared>,
    pub link: ControlLink,
    pub membership: Membership,
    /// Every port the node polls (data ports and the CCL port).
    pub links: Links,
    /// Dynamic-NAT pools (index in the configuration's pools, addresses)
    /// and the xlate timeout (N4).
    pub nat_pools: Vec<(u16, Vec<std::net::Ipv4Addr>)>,
    pub xlate_timeout: dataplane::Duration,
}

impl CclControl {
    pub fn new(c: CclControlConfig) -> CclControl {
        CclControl {
            port: c.port,
            queue: c.control_queue,
            pool: c.pool,
            shared: c.shared,
            link: c.link,
            membership: c.membership,
            links: c.links,
            frames_sent: 0,
            send_failures: 0,
            pending: VecDeque::new(),
            ports_shut: 0,
            ports_opened: 0,
            last_sync: u64::MAX,
            replica_changed: false,
            natshare: NatShare::new(c.nat_pools, c.xlate_timeout),
            changes: Vec::new(),
            rx: MbufBurst::new(),
            tx: MbufBurst::new(),
            last_poll: None,
            stalled: false,
            events: VecDeque::new(),
            queries: VecDeque::new(),
            limit_reports: VecDeque::new(),
        }
    }

    /// Members' queries to answer, oldest first.
    pub fn take_queries(&mut self) -> Vec<QueryAsked> {
        self.queries.drain(..).collect()
    }

    /// Members' limit reports, oldest first, and the member set now.
    pub fn take_limit_reports(&mut self) -> (Vec<LimitReportIn>, dataplane::cluster::MemberSet) {
        (self.limit_reports.drain(..).collect(), self.membership.members())
    }

    /// Broadcast this node's connection counts (`LimitReport::encode`).
    pub fn broadcast_limits(&mut self, now: Timestamp, payload: Vec<u8>) -> bool {
        let sent = self.membership.broadcast_limits(now, payload);
        self.act_all(now);
        sent
    }

    /// This node's answer to a member's query (`take_queries`).
    pub fn answer_query(&mut self, now: Timestamp, q: QueryAsked, bytes: Vec<u8>) {
        self.membership.answer(now, q.from, q.incarnation, q.query, bytes);
        self.act_all(now);
    }

    /// Ask every other configured node (`Membership::ask`).
    pub fn ask(&mut self, now: Timestamp, topic: u8, arg: &[u8]) -> Option<u32> {
        let id = self.membership.ask(now, topic, arg);
        self.act_all(now);
        id
    }

    /// The membership events since the last call, oldest first.
    pub fn take_events(&mut self) -> impl Iterator<Item = controlplane::membership::MembershipEvent> + '_ {
        self.events.drain(..)
    }

    /// Queue pairs of the CCL port (the workers' and the control lcore's).
    pub fn queues(&self) -> u16 {
        self.queue.map_or(1, |q| q + 1)
    }

    /// Counters of the control channel (messages out and in, drops).
    pub fn counters(&self) -> CclCounters {
        self.link.counters()
    }

    /// Whether the node holds its data ports down (not ready, left).
    pub fn data_ports_held(&self) -> bool {
        self.links.data_held_down()
    }

    /// One round at `now` (the node's `Clock`, the worker's time base):
    /// receive on the control queue, take what the worker passed on, feed
    /// link changes and the worker's sync progress, let the membership
    /// machine's clock advance, carry out its actions. Returns how many
    /// frames it passed on to the worker (data-plane CCL traffic waiting
    /// on this lcore: the caller polls faster while there is some).
    pub fn poll(&mut self, now: Timestamp, workers_ran: Timestamp) -> usize {
        self.watch_stalls(now, workers_ran);
        let mut handled = 0;
        if let Some(q) = self.queue {
            // Drain the queue (bounded: a few bursts per round).
            for _ in 0..64 {
                let n = self.port.rx_burst(q, &mut self.rx);
                if n == 0 {
                    break;
                }
                let mut rx = std::mem::replace(&mut self.rx, MbufBurst::new());
                for m in rx.drain() {
                    if is_control_frame(m.data()) {
                        self.receive(now, &m);
                    } else {
                        handled += 1;
                        match self.shared.to_worker.push(m) {
                            Ok(()) => {
                                self.shared.to_worker_frames.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(m) => {
                                self.shared.to_worker_drops.fetch_add(1, Ordering::Relaxed);
                                drop(m);
                            }
                        }
                    }
                }
                self.rx = rx;
            }
        }
        while let Some(m) = self.shared.to_control.pop() {
            self.receive(now, &m);
        }
        self.links.poll(now.nanos(), &mut self.changes);
        for c in std::mem::take(&mut self.changes) {
            log::info!("port {} ({}) link {}", c.index, if c.ccl { "ccl" } else { "data" }, if c.up { "up" } else { "down" });
            self.membership.on_port(now, c.index, c.up);
        }
        let sync = self.node_sync();
        if sync != self.last_sync {
            self.last_sync = sync;
            let (epoch, done_from, sent) = unpack_sync(sync);
            self.membership.on_sync(now, epoch, done_from, sent);
        }
        self.membership.tick(now);
        self.natshare.tick(now, &mut self.membership);
        self.act_all(now);
        handled
    }

    /// Stalls of the receive path (SPEC M1): after this lcore went
    /// unscheduled for more than half a heartbeat interval, or while a
    /// worker (`workers_ran`: the oldest start of a worker loop) has not
    /// run for that long, heartbeats may wait unread in a queue: the
    /// membership machine removes nobody for silence until an interval
    /// after the stall (`Membership::rx_stalled`). A worker silent for
    /// four hold times is hung, not stalled: no longer reported, so
    /// removals go on.
    fn watch_stalls(&mut self, now: Timestamp, workers_ran: Timestamp) {
        let limit = self.membership.heartbeat_interval().0 / 2;
        let hung = self.membership.hold_time().0.saturating_mul(4);
        let own = self.last_poll.map_or(0, |l| now.nanos().saturating_sub(l.nanos()));
        let worker = if workers_ran.nanos() == 0 { 0 } else { now.nanos().saturating_sub(workers_ran.nanos()) };
        self.last_poll = Some(now);
        if own > limit || (worker > limit && worker < hung) {
            if !self.stalled {
                log::info!(
                    "receive path stalled (control lcore not run for {} ms, a worker for {} ms): heartbeats may be late; \
                     no member is removed for silence until an interval after it",
                    own / 1_000_000,
                    worker / 1_000_000
                );
            }
            self.stalled = true;
            self.membership.rx_stalled(now);
        } else {
            self.stalled = false;
        }
    }

    /// Dynamic NAT (N4): the workers' requests for the control node
    /// (new translations, renewals), sent there (or handled here on the
    /// control node). A request with no control node to ask is dropped:
    /// the worker asks again.
    pub fn request_xlates(&mut self, now: Timestamp, reqs: impl IntoIterator<Item = dataplane::pipeline::SharedRequest>) {
        for r in reqs {
            self.membership.request_xlate(now, r.pool, r.real, r.held);
        }
        self.act_all(now);
    }

    /// The node's re-registration progress, packed: every worker's
    /// (`SyncProgress::of_workers`).
    fn node_sync(&self) -> u64 {
        let each = self.shared.sync.iter().map(|w| {
            let (epoch, done_from, sent) = unpack_sync(w.load(Ordering::Relaxed));
            dataplane::pipeline::SyncProgress { epoch, done_from, sent }
        });
        dataplane::pipeline::SyncProgress::of_workers(each).map_or(0, |p| pack_sync(&p))
    }

    /// Whether the replicated configuration changed since the last call.
    pub fn take_replica_change(&mut self) -> bool {
        std::mem::take(&mut self.replica_changed)
    }

    /// The worker runs replicated configuration `version` now.
    pub fn config_applied(&mut self, now: Timestamp, version: u64) {
        self.membership.config_applied(now, version);
        self.act_all(now);
    }

    /// This node cannot run replicated configuration `version`: it leaves.
    pub fn reject_config(&mut self, now: Timestamp, version: u64) {
        self.membership.reject_config(now, version);
        self.act_all(now);
    }

    /// Publish a new replicated configuration (the control node's reload).
    pub fn publish_config(&mut self, now: Timestamp, bytes: Vec<u8>) -> Result<u64, TableError> {
        let v = self.membership.set_config(now, bytes);
        self.act_all(now);
        v
    }

    fn act_all(&mut self, now: Timestamp) {
        while let Some(a) = self.membership.poll_action() {
            self.act(now, a);
        }
    }

    /// Carry out one action of the membership machine.
    fn act(&mut self, now: Timestamp, a: Action) {
        match a {
            Action::Broadcast { .. } | Action::Send { .. } => {
                let mut buf = [0u8; MAX_CONTROL_FRAME];
                match self.link.seal_action(&a, &mut buf) {
                    Some(Ok(len)) => {
                        if self.send(&buf[..len]) {
                            self.frames_sent += 1;
                        } else {
                            self.send_failures += 1;
                        }
                    }
                    Some(Err(e)) => {
                        log::warn!("control message not sealed: {e}");
                        self.send_failures += 1;
                    }
                    None => {}
                }
            }
            Action::Members(m) => {
                log::info!("member set now epoch {}: {m:?}", m.epoch().0);
                push_command(&mut self.pending, Query::SetMembers(m));
            }
            Action::Reset => {
                log::warn!("left the cluster: dropping every flow and record (other members own them now)");
                push_command(&mut self.pending, Query::Reset);
            }
            Action::Lease(until) => self.shared.lease_ns.store(until.nanos(), Ordering::Relaxed),
            Action::DataPorts { up } => {
                let n = self.links.set_data_ports(up);
                if up {
                    self.ports_opened += 1;
                    self.shared.announce.fetch_add(1, Ordering::Relaxed);
                    log::info!("data ports up ({n} opened): taking traffic");
                } else {
                    self.ports_shut += 1;
                    log::info!("data ports down ({n} shut): not taking traffic");
                }
            }
            Action::Event(e) => {
                log::info!("cluster: {}", e.text);
                if self.events.len() >= EVENTS_KEPT {
                    self.events.pop_front();
                }
                self.events.push_back(e);
            }
            Action::Replica(r) => {
                log::debug!("replicated state: {r:?}");
                if matches!(r, ReplicaChange::Config { .. } | ReplicaChange::Replaced { .. }) {
                    self.replica_changed = true;
                }
                self.nat_table_changed(&r);
            }
            Action::Query { from, incarnation, query, topic, arg } => {
                if self.queries.len() >= 2 * controlplane::membership::ANSWERS_KEPT {
                    self.queries.pop_front();
                }
                self.queries.push_back(QueryAsked { from, incarnation, query, topic, arg });
            }
            Action::LimitReport { from, seq, classes, clients } => {
                if self.limit_reports.len() >= LIMIT_REPORTS_KEPT {
                    self.limit_reports.pop_front();
                }
                self.limit_reports.push_back((from, seq, classes, clients));
            }
            Action::XlateRequest { from, pool, real, held } => {
                log::debug!("dynamic NAT: n{} asks for {real} in pool {pool} (holds {held:?})", from.0);
                self.natshare.on_request(now, &mut self.membership, pool, real, held);
            }
        }
    }

    /// The dynamic-NAT table changed (N4): every worker installs or drops
    /// the translation (after a whole-state transfer, every entry).
    fn nat_table_changed(&mut self, r: &ReplicaChange) {
        let m = &self.membership;
        let mut push = |pool, real, mapped| push_command(&mut self.pending, Query::SharedXlate { pool, real, mapped });
        match r {
            ReplicaChange::Entry { table, key, .. } if *table == natshare::NAT_TABLE => {
                let value = m.table_get(natshare::NAT_TABLE, key);
                match value.map(|v| natshare::decode(key, v)) {
                    Some(Some(x)) => push(x.pool, x.real, Some(x.mapped)),
                    Some(None) => log::warn!("dynamic NAT: table entry {key:02x?} of another layout ignored"),
                    None => {
                        if let Some((pool, real)) = natshare::decode_key(key) {
                            push(pool, real, None);
                        }
                    }
                }
            }
            ReplicaChange::Replaced { .. } => {
                for x in m.table_iter(natshare::NAT_TABLE).filter_map(|(k, v, _)| natshare::decode(k, v)) {
                    push(x.pool, x.real, Some(x.mapped));
                }
            }
            _ => {}
        }
    }

    /// Open a control-channel frame (the opener counts drops) and hand it
    /// to the membership machine (which counts what it made of it).
    fn receive(&mut self, now: Timestamp, m: &Mbuf) {
        let _ = self.link.receive(&mut self.membership, now, m.data());
    }

    /// Put a sealed frame on the wire; false when any step failed (the
    /// frame is gone).
    fn send(&mut self, frame: &[u8]) -> bool {
        let Some(m) = self.pool.alloc_from_slice(frame) else {
            return false;
        };
        match self.queue {
            Some(q) => {
                if self.tx.push(m).is_err() {
                    return false;
                }
                if self.port.tx_burst(q, &mut self.tx) == 0 {
                    self.tx.clear();
                    return false;
                }
            }
            None => {
                if let Err(m) = self.shared.tx_via_worker.push(m) {
                    self.shared.tx_via_worker_drops.fetch_add(1, Ordering::Relaxed);
                    drop(m);
                    return false;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(src_port: u16, dst_port: u16, vlan: bool) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        if vlan {
            f.extend_from_slice(&[0x81, 0x00, 0, 5]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        let mut ip = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 198, 19, 0, 11, 198, 19, 0, 255];
        f.append(&mut ip);
        f.extend_from_slice(&src_port.to_be_bytes());
        f.extend_from_slice(&dst_port.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    #[test]
    fn control_frames_are_told_apart() {
        assert!(is_control_frame(&frame(31555, 31300, false)));
        assert!(is_control_frame(&frame(31555, 31300, true)));
        assert!(!is_control_frame(&frame(31300, 31300, false)), "worker channel 0");
        assert!(!is_control_frame(&frame(31555, 53, false)));
        let mut tcp = frame(31555, 31300, false);
        tcp[14 + 9] = 6;
        assert!(!is_control_frame(&tcp));
        let mut arp = frame(31555, 31300, false);
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert!(!is_control_frame(&arp));
        let f = frame(31555, 31300, false);
        for n in 0..f.len() {
            // Too short to tell: not a control frame, never a panic.
            let _ = is_control_frame(&f[..n]);
        }
        assert!(!is_control_frame(&f[..14 + 20 + 3]));
        assert!(is_control_frame(&f[..14 + 20 + 4]));
    }

    #[test]
    fn control_frames_behind_two_tags_or_ip_options() {
        // QinQ: an S-tag, then a C-tag.
        let mut f = frame(31555, 31300, true);
        f.splice(12..12, [0x88, 0xa8, 0, 9]);
        assert!(is_control_frame(&f));
        // IPv4 with 4 bytes of options (IHL 6): the ports move with it.
        let mut f = frame(31555, 31300, false);
        f[14] = 0x46;
        f.splice(14 + 20..14 + 20, [1, 1, 1, 0]);
        assert!(is_control_frame(&f));
        // An IHL below 5 is no IPv4 header.
        let mut f = frame(31555, 31300, false);
        f[14] = 0x44;
        assert!(!is_control_frame(&f));
    }
}
