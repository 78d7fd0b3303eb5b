//! The cluster half of `Pipeline`: role decision, CCL input, wrapping
//! frames for the owner, the pending table, flow records, timers.
//! See the module documentation in `mod.rs` and docs/cluster-design.md.

use super::pool::{SlotBuf, SlotState, SLOT_HEADROOM};
use super::{
    canonical, next_random, ClusterCountersSnapshot, OpenBatch, OwnerExtra, Record, Resend, Role, Update, Version,
    BATCH_FRAME_MAX, BATCH_PAYLOAD_MAX, MAX_UPDATES, PENDING_TIMEOUT, RECORD_SWEEP, RESENDS, RESEND_DELAY, SLOT_LEN,
    STATE_NOT_TCP,
};
use crate::arp::Resolve;
use crate::buf::PacketBuf;
use crate::ccl::{
    BatchWriter, FlowBatch, FlowKey, FlowOp, FlowRecord, ForwardedBatch, ForwardedPacket, FramePath, Message,
    MessageKind, OwnerQuery, OwnerReply, RelayToOwner, BATCH_MAX_FRAMES, CCL_UDP_PORT, FRAME_OVERHEAD, TAG_LEN,
};
use crate::cluster::{flow_hash, DirectorTable, MemberSet, SeqDelta};
use crate::conntrack::{tcp_flags, ConnInfo, FlowHandle, L4Info, TcpState, Timeouts, Tracked};
use crate::fragpath::FragNote;
use crate::pipeline::{transit_l4, Outcome, Pipeline, Transit};
use crate::route::IfIndex;
use crate::types::{ip_proto, Direction, DropReason, Duration, FiveTuple, NodeId, PortId, Timestamp};
use crate::wire::ethernet::{ethertype, EthernetFrame, BROADCAST};
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::udp::UdpPacket;

/// How a frame reached `classify`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// Received on a port.
    Port,
    /// Unwrapped from a CCL `ForwardedPacket`/`RelayToOwner`: process as
    /// received on this interface.
    Ccl(IfIndex),
}

/// Context of one `classify` call.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Rx {
    pub via: Via,
    /// The owner question is settled (an owner reply named this node):
    /// run conntrack here.
    pub force_own: bool,
    /// A fragment the reassembler has already accounted for, with its
    /// datagram's L4 header and 5-tuple (a held fragment released after
    /// the first one arrived, or a parked fragment released by an owner
    /// reply): it is not inserted again (`fragpath`).
    pub frag: Option<FragNote>,
    /// A fragment the fragment owner sent to this node as the flow owner
    /// (R10): it came over the CCL and this node is not its fragment owner,
    /// or its `ForwardedPacket` carried a flow hint. It is decided as at
    /// the owner (a local flow or a drop), never sent back.
    pub hinted: bool,
}

impl Rx {
    pub const PORT: Rx = Rx { via: Via::Port, force_own: false, frag: None, hinted: false };
    pub const fn ccl(ifx: IfIndex) -> Rx {
        Rx { via: Via::Ccl(ifx), force_own: false, frag: None, hinted: false }
    }
}

/// What the cluster makes of a transit packet.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Plan {
    /// Run conntrack here (owner, or no cluster question).
    Own,
    /// Wrap in a `ForwardedPacket` to this owner.
    Forward(NodeId),
    /// Wrap in a `RelayToOwner` to this director (R7).
    Relay(NodeId),
    /// Ask this director and park the frame.
    Query { director: NodeId, elect: bool },
    Drop(DropReason),
}

/// Sequence translation for one owner packet (R6).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Xlate {
    pub dir: Direction,
    pub delta: SeqDelta,
}

/// What the owner knew of the flow before conntrack ran.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Pre {
    handle: FlowHandle,
    state: Option<TcpState>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wrap {
    Forward,
    Relay,
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

fn live(r: &Record, now: Timestamp) -> bool {
    now.since(r.last_seen) < r.idle
}

/// The five-tuple of a frame (for relays, which carry no key); for an ICMP
/// error, the tuple it quotes.
fn frame_tuple(frame: &[u8]) -> Option<FiveTuple> {
    let e = EthernetFrame::new_checked(frame).ok()?;
    if e.ethertype() != ethertype::IPV4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(e.payload()).ok()?;
    match transit_l4(&ip).ok()? {
        Transit::Flow(t, _) | Transit::IcmpError(t) => Some(t),
    }
}

/// Could this packet open a flow at its owner? A TCP SYN, an echo request,
/// UDP other than a DNS answer, another IP protocol.
fn may_open(tuple: &FiveTuple, l4: Option<&L4Info>) -> bool {
    match l4 {
        Some(L4Info::Tcp(seg)) => seg.flags & (tcp_flags::SYN | tcp_flags::ACK) == tcp_flags::SYN,
        Some(L4Info::Udp) => tuple.src_port != 53,
        Some(L4Info::IcmpEchoRequest | L4Info::Other) => true,
        Some(L4Info::IcmpEchoReply) | None => false,
    }
}

impl Pipeline {
    /// Is this IPv4 datagram (to our address on `ifx`) a CCL message?
    pub(crate) fn is_ccl_datagram<T: AsRef<[u8]>>(&self, ifx: IfIndex, ip: &Ipv4Packet<T>) -> bool {
        match self.cluster.as_deref() {
            Some(cl) if cl.ccl_ifx == ifx && ip.protocol() == ip_proto::UDP => {
                UdpPacket::new_checked(ip.payload()).is_ok_and(|u| u.dst_port() == CCL_UDP_PORT)
            }
            _ => false,
        }
    }

    /// Decide who runs conntrack on a transit packet (docs/cluster-design.md,
    /// "Packet path"). `l4` is `None` for an ICMP error quoting `tuple`.
    pub(crate) fn cluster_plan(
        &mut self,
        now: Timestamp,
        tuple: &FiveTuple,
        l4: Option<&L4Info>,
        rx: Rx,
    ) -> Plan {
        // 1. We own it.
        if self.conntrack.lookup(tuple).is_some() {
            return Plan::Own;
        }
        let timeouts = *self.conntrack.timeouts();
        let Some(cl) = self.cluster.as_deref_mut() else {
            return Plan::Own;
        };
        // Frames unwrapped from the CCL were sent here as to the owner. If
        // the packet may open a flow, adopt it: the director named us owner
        // (R8) but its reply to us was lost, so the sender learnt the owner
        // and we did not. Owning it goes through the ACL and registers with
        // the director like any new flow. Anything else is dropped.
        if rx.via != Via::Port {
            return if may_open(tuple, l4) { Plan::Own } else { Plan::Drop(DropReason::ClusterNoOwnerFlow) };
        }
        let me = cl.me;
        let key = canonical(tuple);
        // 2. A record names another owner.
        if let Some(r) = cl.records.get_mut(&key) {
            if live(r, now) && r.owner != me {
                if r.role == Role::Forwarder {
                    r.last_seen = now;
                }
                return Plan::Forward(r.owner);
            }
        }
        // 3. No record.
        let director = cl.directors.director(flow_hash(tuple));
        let local = director == me;
        let Some(l4) = l4 else {
            // An ICMP error about a flow we know nothing of: the director
            // knows its owner (R7).
            return if local { Plan::Drop(DropReason::NoFlow) } else { Plan::Relay(director) };
        };
        match l4 {
            L4Info::Tcp(seg) => {
                let (syn, ack) = (seg.flags & tcp_flags::SYN != 0, seg.flags & tcp_flags::ACK != 0);
                if syn && !ack {
                    return Plan::Own; // R1: the SYN's receiver owns the connection.
                }
                if syn && ack && cl.seq_randomization {
                    if let Some(o) = cl.cookies.owner_from_synack_ack(seg.ack) {
                        if o == me {
                            return Plan::Drop(DropReason::ClusterNoOwnerFlow);
                        }
                        if cl.members.contains(o) {
                            let rec = Record {
                                role: Role::Forwarder,
                                owner: o,
                                orig: tuple.reversed(),
                                tcp_state: TcpState::SynReceived as u8,
                                seq_delta: 0,
                                last_seen: now,
                                idle: timeouts.tcp_established,
                                version: None,
                            };
                            if !upsert(&mut cl.records, cl.record_capacity, key, rec) {
                                return Plan::Drop(DropReason::ClusterRecordTableFull);
                            }
                            cl.counters.synack_cookie_decoded += 1;
                            return Plan::Forward(o);
                        }
                    }
                }
                if local {
                    Plan::Own
                } else {
                    Plan::Query { director, elect: false }
                }
            }
            // Short-lived replies (R7): DNS answers and echo replies go to
            // the director, which relays them to the owner.
            L4Info::Udp if tuple.src_port == 53 => {
                if local {
                    Plan::Own
                } else {
                    Plan::Relay(director)
                }
            }
            L4Info::IcmpEchoReply => {
                if local {
                    Plan::Own
                } else {
                    Plan::Relay(director)
                }
            }
            // May open a flow (R8): the director decides, electing the
            // querier if nobody owns it.
            L4Info::Udp | L4Info::IcmpEchoRequest | L4Info::Other => {
                if local {
                    Plan::Own
                } else {
                    Plan::Query { director, elect: true }
                }
            }
        }
    }

    /// Carry out a plan other than `Own`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn cluster_act<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        in_port: PortId,
        ifx: IfIndex,
        rx: Rx,
        plan: Plan,
        tuple: &FiveTuple,
        buf: &mut B,
    ) -> Result<Outcome, DropReason> {
        let iface = u8::try_from(ifx.0).map_err(|_| DropReason::CclMalformed)?;
        match plan {
            Plan::Forward(owner) => {
                // A fragment from its fragment owner to the flow owner goes
                // without the flow hint (13 bytes would push a full-size
                // fragment past a 1600-byte CCL MTU): the owner tells it
                // from `fragment_owner` and never sends it back. Fragments
                // go alone; other frames join the burst's batch to the
                // owner (`batch_forward`).
                let outcome = if rx.frag.is_none() && self.batch_forward(now, iface, owner, buf.data()) {
                    Outcome::Consumed
                } else {
                    Outcome::Forward(self.wrap(now, buf, Wrap::Forward, iface, owner, None)?)
                };
                if rx.frag.is_some() {
                    self.frag.counters.to_flow_owner += 1;
                }
                if let Some(cl) = self.cluster.as_deref_mut() {
                    cl.counters.forwarded_to_owner += 1;
                }
                Ok(outcome)
            }
            Plan::Relay(director) => {
                let port = self.wrap(now, buf, Wrap::Relay, iface, director, None)?;
                if let Some(cl) = self.cluster.as_deref_mut() {
                    cl.counters.relays_sent += 1;
                }
                Ok(Outcome::Forward(port))
            }
            Plan::Query { director, elect } => self.park(now, in_port, ifx, rx, tuple, buf, director, elect),
            Plan::Drop(r) => Err(r),
            Plan::Own => Err(DropReason::ClusterNoOwnerFlow),
        }
    }

    /// The CCL MAC of `node`: static neighbour or ARP on the CCL interface
    /// (a miss sends a request, rate-limited by the ARP cache).
    fn peer_mac(&mut self, now: Timestamp, node: NodeId) -> Result<([u8; 6], FramePath), DropReason> {
        let Some(cl) = self.cluster.as_deref() else {
            return Err(DropReason::ClusterOwnerUnknown);
        };
        let ip = cl.peers.get(node.index()).copied().flatten().ok_or(DropReason::ClusterOwnerUnknown)?;
        let (ifx, src_mac, src_ip) = (cl.ccl_ifx, cl.ccl_mac, cl.ccl_addr);
        let eg = *self.ifaces.get(usize::from(ifx.0)).ok_or(DropReason::ClusterOwnerUnknown)?;
        let mac = match self.neighbor(now, ip, ifx) {
            Resolve::Mac(m) => m,
            Resolve::Refresh(m) => {
                self.queue_arp_request(eg, ip, m);
                m
            }
            Resolve::SendRequest => {
                self.queue_arp_request(eg, ip, BROADCAST);
                return Err(DropReason::ClusterPeerUnresolved);
            }
            Resolve::Wait => return Err(DropReason::ClusterPeerUnresolved),
            Resolve::Full => return Err(DropReason::ArpCacheFull),
        };
        Ok((mac, FramePath { src_mac, dst_mac: mac, src_ip, dst_ip: ip }))
    }

    /// Turn the frame in `buf` into a CCL datagram to `to`, in place: outer
    /// Ethernet/IPv4/UDP and CCL header in front, the tag behind. Returns
    /// the CCL port. On error the frame is unchanged.
    pub(crate) fn wrap<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        buf: &mut B,
        kind: Wrap,
        iface: u8,
        to: NodeId,
        hint: Option<FiveTuple>,
    ) -> Result<PortId, DropReason> {
        let (_, path) = self.peer_mac(now, to)?;
        let Some(cl) = self.cluster.as_deref_mut() else {
            return Err(DropReason::ClusterOwnerUnknown);
        };
        let len = buf.data().len();
        // The frame stays where it is: the headers go in front of it (into
        // the headroom), the tag behind it, and the MAC covers it in place.
        let key = hint.and_then(|t| FlowKey::new(t).ok());
        let (kind, head_len) = match kind {
            Wrap::Forward => (MessageKind::ForwardedPacket, ForwardedPacket::head_len(key.as_ref())),
            Wrap::Relay => (MessageKind::RelayToOwner, RelayToOwner::HEAD_LEN),
        };
        let front = FRAME_OVERHEAD - TAG_LEN + head_len;
        if !buf.prepend(front) {
            return Err(DropReason::NoHeadroom);
        }
        if !buf.append(TAG_LEN) {
            buf.trim_front(front);
            return Err(DropReason::NoHeadroom);
        }
        let head = |out: &mut [u8]| match kind {
            MessageKind::ForwardedPacket => ForwardedPacket::emit_head(iface, key.as_ref(), out),
            _ => RelayToOwner::emit_head(iface, out),
        };
        match cl.sealer.seal_frame_in_place(&path, cl.members.epoch(), kind, head_len, len, head, buf.data_mut()) {
            Ok(_) => Ok(cl.ccl_port),
            Err(_) => {
                buf.trim_front(front);
                buf.trim_back(TAG_LEN);
                Err(DropReason::CclMalformed)
            }
        }
    }

    /// Copy `frame` into the `ForwardedBatch` being filled for `to` (a new
    /// one in a pool slot if none is open or it is full). `false`: the frame
    /// is to be wrapped alone, in place — it is longer than
    /// `BATCH_FRAME_MAX` and no batch to `to` is open (one that is open
    /// takes every frame to `to`, so that they leave in order), or there is
    /// no slot, or the peer is unresolved (`wrap` then says so).
    fn batch_forward(&mut self, now: Timestamp, iface: u8, to: NodeId, frame: &[u8]) -> bool {
        let Some(open) = self.cluster.as_deref().and_then(|cl| cl.fwd_batches.get(to.index()).copied()) else {
            return false;
        };
        // Too long to open a batch, or for any batch at all.
        if (open.is_none() && frame.len() > BATCH_FRAME_MAX)
            || 1 + ForwardedBatch::ENTRY_HEAD + frame.len() > BATCH_PAYLOAD_MAX
        {
            return false;
        }
        let path = match open {
            Some(b) => b.path,
            None => match self.peer_mac(now, to) {
                Ok((_, p)) => p,
                Err(_) => return false,
            },
        };
        let Some(cl) = self.cluster.as_deref_mut() else {
            return false;
        };
        let at = FRAME_OVERHEAD - TAG_LEN;
        // The open batch, or, when it is full, a new one: a frame that fits
        // `BATCH_PAYLOAD_MAX` always fits an empty batch.
        for _ in 0..2 {
            let b = match cl.fwd_batches[to.index()] {
                Some(b) => b,
                None => {
                    let Some(slot) = cl.pool.alloc() else {
                        cl.counters.pool_full += 1;
                        return false;
                    };
                    OpenBatch { slot, used: 0, path }
                }
            };
            let pushed = cl
                .pool
                .slots
                .get_mut(usize::from(b.slot))
                .and_then(|s| s.buf.as_deref_mut()?.get_mut(at..at + BATCH_PAYLOAD_MAX))
                .and_then(|p| ForwardedBatch::push(p, b.used, iface, frame).ok());
            match pushed {
                Some(used) => {
                    cl.fwd_batches[to.index()] = Some(OpenBatch { used, ..b });
                    cl.counters.batched_frames += 1;
                    return true;
                }
                // Full (bytes or frames): send it and start another.
                None if b.used > 0 => {
                    cl.fwd_batches[to.index()] = None;
                    seal_batch(cl, b);
                }
                None => {
                    cl.pool.give_back(b.slot);
                    return false;
                }
            }
        }
        false
    }

    /// Seal `msg` to `to` into a pool slot queued for the CCL port. `false`
    /// (counted) when the peer is unresolved or the pool is full.
    fn send_ccl(&mut self, now: Timestamp, to: NodeId, msg: &Message<'_>) -> bool {
        let path = match self.peer_mac(now, to) {
            Ok((_, p)) => p,
            Err(_) => {
                if let Some(cl) = self.cluster.as_deref_mut() {
                    cl.counters.ccl_unresolved += 1;
                }
                return false;
            }
        };
        let Some(cl) = self.cluster.as_deref_mut() else {
            return false;
        };
        let Some(i) = cl.pool.alloc() else {
            cl.counters.pool_full += 1;
            return false;
        };
        let epoch = cl.members.epoch();
        let sealed = match cl.pool.slots.get_mut(usize::from(i)) {
            Some(slot) => match slot.buf.as_deref_mut() {
                Some(b) => match cl.sealer.seal_frame(&path, epoch, msg, &mut b[..]) {
                    Ok(n) => {
                        slot.start = 0;
                        slot.len = n;
                        true
                    }
                    Err(_) => false,
                },
                None => false,
            },
            None => false,
        };
        if sealed {
            cl.pool.push_out(i, cl.ccl_port);
        } else {
            cl.pool.give_back(i);
        }
        sealed
    }

    /// Copy the frame into the pending table and ask the director (unless
    /// a query for this flow is already out).
    #[allow(clippy::too_many_arguments)]
    fn park<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        in_port: PortId,
        ifx: IfIndex,
        rx: Rx,
        tuple: &FiveTuple,
        buf: &mut B,
        director: NodeId,
        elect: bool,
    ) -> Result<Outcome, DropReason> {
        let key = canonical(tuple);
        let len = buf.data().len();
        let existing = {
            let Some(cl) = self.cluster.as_deref_mut() else {
                return Err(DropReason::ClusterOwnerUnknown);
            };
            if cl.pool.pending_full() || SLOT_HEADROOM + len + TAG_LEN + FRAME_OVERHEAD > SLOT_LEN {
                return Err(DropReason::ClusterPendingFull);
            }
            cl.pool.pending_query(&key)
        };
        let query_id = match existing {
            Some(q) => {
                if let Some(cl) = self.cluster.as_deref_mut() {
                    cl.counters.queries_coalesced += 1;
                }
                q
            }
            None => {
                let flow = FlowKey::new(*tuple).map_err(|_| DropReason::CclMalformed)?;
                let query_id = match self.cluster.as_deref_mut() {
                    Some(cl) => cl.query_id(),
                    None => return Err(DropReason::ClusterOwnerUnknown),
                };
                let q = Message::OwnerQuery(OwnerQuery { query_id, flow, elect_if_absent: elect });
                if !self.send_ccl(now, director, &q) {
                    return Err(DropReason::ClusterPeerUnresolved);
                }
                if let Some(cl) = self.cluster.as_deref_mut() {
                    cl.counters.director_queries_sent += 1;
                }
                query_id
            }
        };
        let Some(cl) = self.cluster.as_deref_mut() else {
            return Err(DropReason::ClusterOwnerUnknown);
        };
        let Some(i) = cl.pool.alloc() else {
            return Err(DropReason::ClusterPendingFull);
        };
        let copied = cl.pool.fill(i, buf.data());
        let st = SlotState::Pending {
            query_id,
            key,
            deadline: now.saturating_add(PENDING_TIMEOUT),
            in_port,
            via: rx.via,
            ifx,
            frag: rx.frag,
        };
        cl.pool.set_pending(i, st);
        if !copied {
            cl.pool.release(i);
            return Err(DropReason::ClusterPendingFull);
        }
        cl.counters.pending_queued += 1;
        Ok(Outcome::Consumed)
    }

    /// A datagram to our CCL address on the CCL interface: open it and act.
    pub(crate) fn ccl_in<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        in_port: PortId,
        buf: &mut B,
    ) -> Result<Outcome, DropReason> {
        let data = buf.data();
        let total = data.len();
        let opened = match self.cluster.as_deref_mut() {
            Some(cl) => cl.opener.open_frame(data).map_err(|_| DropReason::CclMalformed)?,
            None => return Err(DropReason::LocalUnhandled),
        };
        let from = opened.sender;
        let at = |f: &[u8]| (f.as_ptr() as usize).wrapping_sub(data.as_ptr() as usize);
        match opened.msg {
            Message::Heartbeat(_) => Ok(Outcome::Consumed),
            Message::OwnerQuery(q) => {
                self.on_query(now, from, &q);
                Ok(Outcome::Consumed)
            }
            Message::OwnerReply(r) => {
                self.on_reply(now, &r);
                Ok(Outcome::Consumed)
            }
            Message::FlowRegister(b) => {
                self.on_records(now, from, &b, true);
                Ok(Outcome::Consumed)
            }
            Message::StateUpdate(b) => {
                self.on_records(now, from, &b, false);
                Ok(Outcome::Consumed)
            }
            Message::ForwardedPacket(f) => {
                let (off, len, iface) = (at(f.frame), f.frame.len(), f.ingress_iface);
                let hinted = f.flow_hint.is_some();
                unwrap_to(buf, off, len, total)?;
                if let Some(cl) = self.cluster.as_deref_mut() {
                    cl.counters.forwarded_received += 1;
                }
                let rx = Rx { hinted, ..Rx::ccl(IfIndex(u16::from(iface))) };
                let o = match self.fast_ipv4(now, in_port, IfIndex(u16::from(iface)), rx, buf) {
                    Some(o) => o,
                    None => self.classify(now, in_port, buf, rx),
                };
                Ok(self.keep_order(o, buf))
            }
            Message::ForwardedBatch(b) => {
                self.batch_in(now, in_port, &b);
                Ok(Outcome::Consumed)
            }
            Message::RelayToOwner(f) => {
                let (off, len, iface) = (at(f.frame), f.frame.len(), f.ingress_iface);
                let tuple = frame_tuple(f.frame);
                unwrap_to(buf, off, len, total)?;
                let tuple = tuple.ok_or(DropReason::CclMalformed)?;
                if self.conntrack.lookup(&tuple).is_some() {
                    if let Some(cl) = self.cluster.as_deref_mut() {
                        cl.counters.relays_owned += 1;
                    }
                    let o = self.classify(now, in_port, buf, Rx::ccl(IfIndex(u16::from(iface))));
                    return Ok(self.keep_order(o, buf));
                }
                let owner = match self.cluster.as_deref() {
                    Some(cl) => match cl.records.get(&canonical(&tuple)) {
                        Some(r) if live(r, now) && r.owner != cl.me => r.owner,
                        _ => return Err(DropReason::ClusterNoRecord),
                    },
                    None => return Err(DropReason::ClusterNoRecord),
                };
                let port = self.wrap(now, buf, Wrap::Forward, iface, owner, None)?;
                if let Some(cl) = self.cluster.as_deref_mut() {
                    cl.counters.relays_relayed += 1;
                }
                Ok(Outcome::Forward(port))
            }
        }
    }

    /// Director: who owns the flow? Elect the querier if asked and nobody
    /// does (R8).
    fn on_query(&mut self, now: Timestamp, from: NodeId, q: &OwnerQuery) {
        let t = q.flow.tuple();
        let local = self.conntrack.lookup(&t).is_some();
        let timeouts = *self.conntrack.timeouts();
        let Some(cl) = self.cluster.as_deref_mut() else {
            return;
        };
        let me = cl.me;
        let key = canonical(&t);
        let owner = if local {
            Some(me)
        } else {
            match cl.records.get(&key) {
                Some(r) if live(r, now) && r.owner != me => Some(r.owner),
                _ if q.elect_if_absent => {
                    let role = if cl.directors.director(flow_hash(&t)) == me { Role::Director } else { Role::Backup };
                    let rec = Record {
                        role,
                        owner: from,
                        orig: t,
                        tcp_state: STATE_NOT_TCP,
                        seq_delta: 0,
                        last_seen: now,
                        idle: idle_for(&timeouts, t.proto),
                        version: None,
                    };
                    if upsert(&mut cl.records, cl.record_capacity, key, rec) {
                        cl.counters.elections += 1;
                        Some(from)
                    } else {
                        cl.counters.record_table_full += 1;
                        None
                    }
                }
                _ => None,
            }
        };
        cl.counters.queries_answered += 1;
        let reply = Message::OwnerReply(OwnerReply { query_id: q.query_id, flow: q.flow, owner });
        self.send_ccl(now, from, &reply);
    }

    /// Querier: the director answered. Release the frames parked for it.
    fn on_reply(&mut self, now: Timestamp, r: &OwnerReply) {
        let t = r.flow.tuple();
        let timeouts = *self.conntrack.timeouts();
        let Some(cl) = self.cluster.as_deref_mut() else {
            return;
        };
        cl.counters.replies_received += 1;
        let me = cl.me;
        if let Some(o) = r.owner.filter(|&o| o != me) {
            let rec = Record {
                role: Role::Forwarder,
                owner: o,
                orig: t,
                tcp_state: STATE_NOT_TCP,
                seq_delta: 0,
                last_seen: now,
                idle: idle_for(&timeouts, t.proto),
                version: None,
            };
            if !upsert(&mut cl.records, cl.record_capacity, canonical(&t), rec) {
                cl.counters.record_table_full += 1;
            }
        }
        if r.query_id != 0 {
            self.release_pending(now, r.query_id, r.owner);
        } else if r.owner.is_some_and(|o| o != me) {
            // Unsolicited: our registration lost to an earlier owner (two
            // SYNs of one connection on two nodes). Yield: forward from now.
            if let Some((h, _)) = self.conntrack.lookup(&t) {
                self.conntrack.remove_flow(h);
                if let Some(cl) = self.cluster.as_deref_mut() {
                    cl.counters.ownership_yielded += 1;
                }
            }
        }
    }

    /// Send on (or drop) every frame parked under `query_id`.
    fn release_pending(&mut self, now: Timestamp, query_id: u32, owner: Option<NodeId>) {
        let n = match self.cluster.as_deref() {
            Some(cl) => cl.pool.slots.len(),
            None => return,
        };
        for i in 0..n {
            let Some(cl) = self.cluster.as_deref_mut() else {
                return;
            };
            let me = cl.me;
            let ccl_port = cl.ccl_port;
            let Some(slot) = cl.pool.slots.get_mut(i) else {
                continue;
            };
            let (in_port, via, ifx, frag) = match slot.state {
                SlotState::Pending { query_id: q, in_port, via, ifx, frag, .. } if q == query_id => {
                    (in_port, via, ifx, frag)
                }
                _ => continue,
            };
            let i = i as u16;
            let Some((mut frame, start, end)) = cl.pool.take(i) else {
                cl.pool.release(i);
                continue;
            };
            let mut sb = SlotBuf { mem: &mut frame[..], start, end };
            // Some(Some(port)): send it; Some(None): the pipeline kept a
            // copy (held for the next hop's ARP reply); None: dropped.
            let sent = match owner {
                None => {
                    cl.counters.pending_no_owner += 1;
                    None
                }
                Some(o) if o == me => {
                    match self.classify(now, in_port, &mut sb, Rx { via, force_own: true, frag, hinted: false }) {
                        Outcome::Forward(p) | Outcome::ArpReply(p) | Outcome::EchoReply(p) => Some(Some(p)),
                        Outcome::Consumed => Some(None),
                        Outcome::Drop(_) => None,
                    }
                }
                Some(o) => {
                    let iface = u8::try_from(ifx.0).unwrap_or(u8::MAX);
                    // No flow hint on the wire (see `cluster_act`).
                    let hint = frag.map(|f| f.tuple);
                    match self.wrap(now, &mut sb, Wrap::Forward, iface, o, None) {
                        Ok(_) => {
                            if let Some(cl) = self.cluster.as_deref_mut() {
                                cl.counters.forwarded_to_owner += 1;
                            }
                            if hint.is_some() {
                                self.frag.counters.to_flow_owner += 1;
                            }
                            Some(Some(ccl_port))
                        }
                        Err(_) => None,
                    }
                }
            };
            let (start, end) = (sb.start, sb.end);
            let Some(cl) = self.cluster.as_deref_mut() else {
                return;
            };
            cl.pool.put_back(i, frame, start, end);
            match sent {
                Some(Some(p)) => {
                    cl.counters.pending_released += 1;
                    cl.pool.push_out(i, p);
                }
                Some(None) => {
                    cl.counters.pending_released += 1;
                    cl.pool.release(i);
                }
                None => {
                    if owner.is_some() {
                        cl.counters.pending_release_drops += 1;
                    }
                    cl.pool.release(i);
                }
            }
        }
    }

    /// Director/backup: flow records from an owner (R2, R9).
    fn on_records(&mut self, now: Timestamp, from: NodeId, batch: &FlowBatch<'_>, register: bool) {
        for r in batch.iter() {
            let t = r.flow.tuple();
            let key = canonical(&t);
            let Some(cl) = self.cluster.as_deref_mut() else {
                return;
            };
            cl.counters.records_received += 1;
            match r.op {
                FlowOp::Delete => {
                    cl.records.remove(&key);
                }
                FlowOp::Upsert => {
                    let conflict = match cl.records.get(&key) {
                        Some(ex) if register && live(ex, now) && ex.owner != r.owner && ex.role != Role::Forwarder => {
                            Some(ex.owner)
                        }
                        _ => None,
                    };
                    if let Some(first) = conflict {
                        // Two SYNs of one connection on two nodes: the first
                        // owner stays; tell the latecomer.
                        cl.counters.register_conflicts += 1;
                        let m = Message::OwnerReply(OwnerReply { query_id: 0, flow: r.flow, owner: Some(first) });
                        self.send_ccl(now, from, &m);
                        continue;
                    }
                    // A record older than the one held for the same owner
                    // (reordered on the CCL) would undo a newer state.
                    let version = Version::from_record(&r);
                    let stale = match (cl.records.get(&key), version) {
                        (Some(ex), Some(v)) if live(ex, now) && ex.owner == r.owner => {
                            ex.version.is_some_and(|held| v.older_than(held))
                        }
                        _ => false,
                    };
                    if stale {
                        cl.counters.records_stale += 1;
                        continue;
                    }
                    let role = if cl.directors.director(flow_hash(&t)) == cl.me { Role::Director } else { Role::Backup };
                    let rec = Record {
                        role,
                        owner: r.owner,
                        orig: t,
                        tcp_state: r.tcp_state,
                        seq_delta: r.seq_delta,
                        last_seen: now,
                        idle: Duration::from_secs(u64::from(r.idle_timeout_s)),
                        version,
                    };
                    if !upsert(&mut cl.records, cl.record_capacity, key, rec) {
                        cl.counters.record_table_full += 1;
                    }
                }
            }
        }
    }

    /// Before conntrack, for a packet this node will process as owner: the
    /// flow as it was, and the reply-direction `ack` taken back into the
    /// client's sequence space (conntrack tracks the client's space, R6).
    pub(crate) fn owner_pre(&self, tuple: &FiveTuple, seen: &mut L4Info) -> Option<Pre> {
        let cl = self.cluster.as_deref()?;
        let (handle, dir) = self.conntrack.lookup(tuple)?;
        let delta = cl.extras.get(handle.index() as usize).map_or(0, |e| e.delta);
        if let (L4Info::Tcp(seg), Direction::Reply) = (seen, dir) {
            if seg.flags & tcp_flags::ACK != 0 {
                seg.ack = SeqDelta(delta).to_client(seg.ack);
            }
        }
        Some(Pre { handle, state: self.conntrack.tcp_state(handle) })
    }

    /// After conntrack accepted an owner packet: a new flow gets its cookie
    /// ISN (R6) and is registered with the director and backups (R2); a
    /// state change is sent to them (R9). Returns the translation to apply.
    pub(crate) fn owner_post(
        &mut self,
        now: Timestamp,
        tuple: &FiveTuple,
        l4: &L4Info,
        tracked: Tracked,
        pre: Option<Pre>,
    ) -> Option<Xlate> {
        let state = self.conntrack.tcp_state(tracked.handle);
        let timeouts = *self.conntrack.timeouts();
        let cl = self.cluster.as_deref_mut()?;
        cl.counters.owner_packets += 1;
        let idx = tracked.handle.index() as usize;
        let timeout = state_timeout(&timeouts, state, tuple.proto);
        let stale = cl.extras.get(idx).is_some_and(|e| now.since(e.sent).0 >= timeout.0 / 2);
        // A retransmitted SYN of a flow still in its handshake: the first
        // registration (or the SYN-ACK's query) may have been lost, and
        // without cookies (R6) nobody else can find this owner. Register
        // again (cheap: once per client retransmission).
        let resyn = !tracked.created
            && tracked.dir == Direction::Original
            && matches!(state, Some(TcpState::SynSent | TcpState::SynReceived))
            && matches!(l4, L4Info::Tcp(seg) if seg.flags & (tcp_flags::SYN | tcp_flags::ACK) == tcp_flags::SYN)
            && pre.is_some_and(|p| p.handle == tracked.handle);
        let changed = match pre {
            _ if tracked.created || resyn => true,
            Some(p) => p.handle != tracked.handle || p.state != state || stale,
            None => true,
        };
        if tracked.created {
            let mut delta = 0;
            if let L4Info::Tcp(seg) = l4 {
                if cl.seq_randomization && seg.flags & tcp_flags::SYN != 0 && seg.flags & tcp_flags::ACK == 0 {
                    let isn = cl.cookies.encode(cl.me, next_random(&mut cl.rng) as u32);
                    delta = SeqDelta::between(seg.seq, isn).0;
                }
            }
            let version = Version { generation: cl.next_generation, seq: 0 };
            cl.next_generation = cl.next_generation.wrapping_add(1);
            if let Some(e) = cl.extras.get_mut(idx) {
                *e = OwnerExtra { delta, sent: now, version, sent_idle: timeout };
            }
        }
        let delta = cl.extras.get(idx).map_or(0, |e| e.delta);
        if changed {
            let orig = match tracked.dir {
                Direction::Original => *tuple,
                Direction::Reply => tuple.reversed(),
            };
            let mut version = None;
            let mut lengthened = false;
            if let Some(e) = cl.extras.get_mut(idx) {
                e.sent = now;
                if !tracked.created {
                    e.version.seq = e.version.seq.wrapping_add(1);
                    lengthened = timeout > e.sent_idle;
                }
                e.sent_idle = timeout;
                version = Some(e.version);
            }
            if let (true, Some(v)) = (lengthened, version) {
                let r = Resend { orig, generation: v.generation, due: now.saturating_add(RESEND_DELAY), left: RESENDS };
                if cl.resends.len() < cl.resends.capacity() {
                    cl.resends.push_back(r);
                } else {
                    cl.counters.resends_skipped += 1;
                }
            }
            if resyn {
                cl.counters.registers_resent += 1;
            }
            if let Ok(flow) = FlowKey::new(orig) {
                let mut record = FlowRecord {
                    flow,
                    owner: cl.me,
                    op: FlowOp::Upsert,
                    tcp_state: state.map_or(STATE_NOT_TCP, |s| s as u8),
                    flags: 0,
                    seq_delta: delta,
                    idle_timeout_s: timeout.as_secs().min(u64::from(u32::MAX)) as u32,
                    opaque: [0; crate::ccl::OPAQUE_LEN],
                };
                if let Some(v) = version {
                    v.write(&mut record);
                }
                self.queue_record(now, &orig, record, tracked.created || resyn);
            }
        }
        (delta != 0 && matches!(l4, L4Info::Tcp(_))).then_some(Xlate { dir: tracked.dir, delta: SeqDelta(delta) })
    }

    /// Queue `record` for the flow's director and backups (flushed by `flush`).
    fn queue_record(&mut self, now: Timestamp, orig: &FiveTuple, record: FlowRecord, register: bool) {
        let full = self.cluster.as_deref().is_some_and(|cl| cl.updates.len() + crate::cluster::MAX_BACKUPS > MAX_UPDATES);
        if full {
            self.flush(now);
        }
        let Some(cl) = self.cluster.as_deref_mut() else {
            return;
        };
        let backups = cl.directors.backups(flow_hash(orig), cl.me);
        for to in backups.iter() {
            if cl.updates.len() < MAX_UPDATES {
                cl.updates.push(Update { to, register, record });
                if register {
                    cl.counters.registers_sent += 1;
                } else {
                    cl.counters.updates_sent += 1;
                }
            }
        }
    }

    /// Apply the owner's sequence translation to the TCP segment at `l2`.
    pub(crate) fn apply_xlate<B: PacketBuf>(&self, l2: usize, x: Xlate, buf: &mut B) -> Result<(), DropReason> {
        let l3 = buf.data_mut().get_mut(l2..).ok_or(DropReason::EthTruncated)?;
        let mut ip = Ipv4Packet::new_checked(l3).map_err(|_| DropReason::Ipv4Truncated)?;
        crate::cluster::translate(ip.payload_mut(), x.dir, x.delta).map_err(|_| DropReason::L4Truncated)?;
        Ok(())
    }

    // --- Driver-facing cluster API. ---

    /// End of a burst: seal the queued flow records, one `FlowRegister` and
    /// one `StateUpdate` batch per destination (more if a batch fills a
    /// datagram), into generated frames.
    pub fn flush(&mut self, now: Timestamp) {
        let Some(cl) = self.cluster.as_deref_mut() else {
            return;
        };
        if cl.updates.is_empty() {
            return;
        }
        let Some(mut payload) = cl.batch.take() else {
            return;
        };
        for to in 0..NodeId::MAX_NODES as u8 {
            for register in [true, false] {
                let wanted = |u: &Update| u.to == NodeId(to) && u.register == register;
                let any = self.cluster.as_deref().is_some_and(|cl| cl.updates.iter().any(wanted));
                if !any {
                    continue;
                }
                let Ok(mut w) = BatchWriter::new(&mut payload[..]) else {
                    continue;
                };
                let n = self.cluster.as_deref().map_or(0, |cl| cl.updates.len());
                for k in 0..n {
                    let Some(u) = self.cluster.as_deref().and_then(|cl| cl.updates.get(k).copied()) else {
                        break;
                    };
                    if !wanted(&u) {
                        continue;
                    }
                    if w.push(&u.record).is_err() {
                        send_batch(self, now, NodeId(to), register, w.as_batch());
                        w.reset();
                        let _ = w.push(&u.record);
                    }
                }
                if !w.is_empty() {
                    send_batch(self, now, NodeId(to), register, w.as_batch());
                }
            }
        }
        if let Some(cl) = self.cluster.as_deref_mut() {
            cl.updates.clear();
            cl.batch = Some(payload);
        }
    }

    /// Cluster timers: pending-query timeouts, idle records, ARP for CCL
    /// peers not yet resolved.
    pub(crate) fn cluster_timers(&mut self, now: Timestamp) {
        let Some(cl) = self.cluster.as_deref_mut() else {
            return;
        };
        for i in 0..cl.pool.slots.len() {
            let expired = matches!(
                cl.pool.slots.get(i).map(|s| s.state),
                Some(SlotState::Pending { deadline, .. }) if deadline <= now
            );
            if expired {
                cl.pool.release(i as u16);
                cl.counters.pending_timeouts += 1;
            }
        }
        let resent = self.resend_due(now);
        let Some(cl) = self.cluster.as_deref_mut() else {
            return;
        };
        if now >= cl.next_sweep {
            let before = cl.records.len();
            cl.records.retain(|_, r| live(r, now));
            cl.counters.records_expired += (before - cl.records.len()) as u64;
            cl.next_sweep = now.saturating_add(RECORD_SWEEP);
        }
        let (me, members, ifx) = (cl.me, cl.members, cl.ccl_ifx);
        let peers = cl.peers;
        if resent {
            self.flush(now);
        }
        let Some(eg) = self.ifaces.get(usize::from(ifx.0)).copied() else {
            return;
        };
        for n in members.iter().filter(|&n| n != me) {
            let Some(ip) = peers.get(n.index()).copied().flatten() else {
                continue;
            };
            match self.neighbor(now, ip, ifx) {
                Resolve::SendRequest => self.queue_arp_request(eg, ip, BROADCAST),
                Resolve::Refresh(m) => self.queue_arp_request(eg, ip, m),
                _ => {}
            }
        }
    }

    /// Re-send the lengthening state changes that are due (`Resend`): the
    /// flow's current record, if the flow still lives in the same
    /// generation. `true` if records were queued.
    fn resend_due(&mut self, now: Timestamp) -> bool {
        let timeouts = *self.conntrack.timeouts();
        let mut queued = false;
        loop {
            let Some(cl) = self.cluster.as_deref_mut() else {
                return queued;
            };
            let r = match cl.resends.front() {
                Some(r) if r.due <= now => *r,
                _ => return queued,
            };
            cl.resends.pop_front();
            let Some((h, _)) = self.conntrack.lookup(&r.orig) else {
                continue;
            };
            let state = self.conntrack.tcp_state(h);
            let Some(cl) = self.cluster.as_deref_mut() else {
                return queued;
            };
            let me = cl.me;
            let Some(e) = cl.extras.get_mut(h.index() as usize) else {
                continue;
            };
            if e.version.generation != r.generation {
                continue;
            }
            let timeout = state_timeout(&timeouts, state, r.orig.proto);
            e.version.seq = e.version.seq.wrapping_add(1);
            e.sent = now;
            e.sent_idle = timeout;
            let (version, delta) = (e.version, e.delta);
            if r.left > 1 {
                cl.resends.push_back(Resend { due: now.saturating_add(RESEND_DELAY), left: r.left - 1, ..r });
            }
            cl.counters.updates_resent += 1;
            let Ok(flow) = FlowKey::new(r.orig) else {
                continue;
            };
            let mut record = FlowRecord {
                flow,
                owner: me,
                op: FlowOp::Upsert,
                tcp_state: state.map_or(STATE_NOT_TCP, |s| s as u8),
                flags: 0,
                seq_delta: delta,
                idle_timeout_s: timeout.as_secs().min(u64::from(u32::MAX)) as u32,
                opaque: [0; crate::ccl::OPAQUE_LEN],
            };
            version.write(&mut record);
            self.queue_record(now, &r.orig, record, false);
            queued = true;
        }
    }

    /// Seal the open forwarded batches, then hand the queued CCL frames
    /// and released pending frames to `f`.
    pub(crate) fn cluster_drain(&mut self, f: &mut impl FnMut(PortId, &[u8])) {
        if let Some(cl) = self.cluster.as_deref_mut() {
            cl.pooled_out = false;
            for n in 0..cl.fwd_batches.len() {
                if let Some(b) = cl.fwd_batches.get_mut(n).and_then(Option::take) {
                    seal_batch(cl, b);
                }
            }
            cl.pool.drain(&mut self.counters.ports, f);
        }
    }

    /// Owner: a frame forwarded to us that is to leave while frames of an
    /// earlier batch wait in the pool (`ClusterState::pooled_out`) is
    /// copied there behind them, so that a flow's frames leave in the order
    /// they arrived. Without a free slot it leaves as decided.
    fn keep_order<B: PacketBuf>(&mut self, o: Outcome, buf: &B) -> Outcome {
        let Outcome::Forward(port) = o else {
            return o;
        };
        let Some(cl) = self.cluster.as_deref_mut().filter(|cl| cl.pooled_out) else {
            return o;
        };
        let Some(i) = cl.pool.alloc() else {
            cl.counters.pool_full += 1;
            return o;
        };
        if !cl.pool.fill(i, buf.data()) {
            cl.pool.give_back(i);
            return o;
        }
        cl.pool.push_out(i, port);
        Outcome::Consumed
    }

    /// Owner: decide the frames of a received `ForwardedBatch`, in order.
    /// Each is copied into a pool slot first (the datagram is borrowed
    /// while they are read), then processed there like a `ForwardedPacket`'s
    /// frame; what passes leaves through `drain_generated`, after the
    /// frames forwarded in place during the burst.
    fn batch_in(&mut self, now: Timestamp, in_port: PortId, b: &ForwardedBatch<'_>) {
        let mut taken = [(0u16, 0u8); BATCH_MAX_FRAMES];
        let mut n = 0;
        let Some(cl) = self.cluster.as_deref_mut() else {
            return;
        };
        cl.counters.batches_received += 1;
        for (iface, frame) in b.frames() {
            cl.counters.forwarded_received += 1;
            let slot = cl.pool.alloc();
            match (slot, taken.get_mut(n)) {
                (Some(i), Some(t)) if cl.pool.fill(i, frame) => {
                    *t = (i, iface);
                    n += 1;
                }
                (i, _) => {
                    if let Some(i) = i {
                        cl.pool.give_back(i);
                    }
                    cl.counters.pool_full += 1;
                    cl.counters.batch_frame_drops += 1;
                }
            }
        }
        for &(i, iface) in taken.get(..n).unwrap_or(&[]) {
            let Some((mut mem, start, end)) = self.cluster.as_deref_mut().and_then(|cl| cl.pool.take(i)) else {
                continue;
            };
            let mut sb = SlotBuf { mem: &mut mem[..], start, end };
            let ifx = IfIndex(u16::from(iface));
            let rx = Rx::ccl(ifx);
            let outcome = match self.fast_ipv4(now, in_port, ifx, rx, &mut sb) {
                Some(o) => o,
                None => self.classify(now, in_port, &mut sb, rx),
            };
            let (start, end) = (sb.start, sb.end);
            let Some(cl) = self.cluster.as_deref_mut() else {
                return;
            };
            cl.pool.put_back(i, mem, start, end);
            // A slot from `alloc` is still `Free` in state: `push_out`
            // queues it, `give_back` returns it.
            match outcome {
                Outcome::Forward(p) | Outcome::ArpReply(p) | Outcome::EchoReply(p) => {
                    cl.pooled_out = true;
                    cl.pool.push_out(i, p);
                }
                Outcome::Consumed => cl.pool.give_back(i),
                Outcome::Drop(r) => {
                    cl.counters.batch_frame_drops += 1;
                    if let Some(c) = cl.batch_drops.get_mut(r.index()) {
                        *c += 1;
                    }
                    cl.pool.give_back(i);
                }
            }
        }
    }

    /// A new member set (epoch-stamped): the director ranking follows it.
    /// Records are kept; re-registration with moved directors is a later
    /// issue (docs/cluster-design.md, "Member set").
    pub fn set_members(&mut self, _now: Timestamp, members: MemberSet) {
        if let Some(cl) = self.cluster.as_deref_mut() {
            if let Ok(t) = DirectorTable::new(&members) {
                cl.members = members;
                cl.directors = t;
            }
        }
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
        let cl = self.cluster.as_deref()?;
        if self.conntrack.lookup(tuple).is_some() {
            return Some((Role::Owner, cl.me));
        }
        cl.records.get(&canonical(tuple)).filter(|r| live(r, now)).map(|r| (r.role, r.owner))
    }

    /// Owner flows annotated with role and owner, then director, backup and
    /// forwarder records (off the packet path).
    pub(crate) fn cluster_conns(&self, now: Timestamp, max: usize, out: &mut Vec<ConnInfo>) {
        let Some(cl) = self.cluster.as_deref() else {
            return;
        };
        for c in out.iter_mut() {
            c.role = Some(Role::Owner.as_str());
            c.owner = Some(cl.me);
        }
        let mut recs: Vec<&Record> = cl.records.values().filter(|r| live(r, now)).collect();
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
}

fn send_batch(p: &mut Pipeline, now: Timestamp, to: NodeId, register: bool, b: FlowBatch<'_>) {
    let m = if register { Message::FlowRegister(b) } else { Message::StateUpdate(b) };
    p.send_ccl(now, to, &m);
}

/// Insert or replace; `false` when the key is new and the table is full.
fn upsert(
    records: &mut hashbrown::HashMap<FiveTuple, Record>,
    capacity: usize,
    key: FiveTuple,
    rec: Record,
) -> bool {
    if let Some(r) = records.get_mut(&key) {
        *r = rec;
        return true;
    }
    if records.len() >= capacity {
        return false;
    }
    records.insert(key, rec);
    true
}

/// Keep only `[off, off + len)` of the buffer (the inner frame of a CCL
/// message).
fn unwrap_to<B: PacketBuf>(buf: &mut B, off: usize, len: usize, total: usize) -> Result<(), DropReason> {
    let back = total.checked_sub(off).and_then(|r| r.checked_sub(len)).ok_or(DropReason::CclMalformed)?;
    if !buf.trim_front(off) {
        return Err(DropReason::CclMalformed);
    }
    if !buf.trim_back(back) {
        return Err(DropReason::CclMalformed);
    }
    Ok(())
}

/// Seal the batch `b` in its slot and queue it for the CCL port; a batch
/// that cannot be sealed (never: `batch_forward` built it) is counted lost.
fn seal_batch(cl: &mut super::ClusterState, b: OpenBatch) {
    let epoch = cl.members.epoch();
    let sealed = cl
        .pool
        .slots
        .get_mut(usize::from(b.slot))
        .and_then(|s| {
            let n = cl.sealer.seal_batch_in_place(&b.path, epoch, b.used, s.buf.as_deref_mut()?).ok()?;
            s.start = 0;
            s.len = n;
            Some(())
        })
        .is_some();
    if sealed {
        cl.counters.batches_sent += 1;
        cl.pool.push_out(b.slot, cl.ccl_port);
    } else {
        let count = cl
            .pool
            .slots
            .get(usize::from(b.slot))
            .and_then(|s| s.buf.as_deref()?.get(FRAME_OVERHEAD - TAG_LEN).copied())
            .unwrap_or(0);
        cl.counters.batch_frame_drops += u64::from(count);
        cl.pool.give_back(b.slot);
    }
}
