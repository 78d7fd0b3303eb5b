//! CCL datagrams to this node's CCL address (docs/cluster-design.md, "CCL
//! input"): opened in place, control messages handled here, frames handed
//! back to the pipeline (`CclNext`) to be decided as at their ingress.

use super::send::Wrap;
use super::{canonical, idle_for, live, ClusterPath, Link, Record, Role, Version, STATE_NOT_TCP};
use crate::buf::PacketBuf;
use crate::ccl::{FlowBatch, FlowOp, ForwardedBatch, Message, OwnerQuery, OwnerReply, FLAG_ORPHAN};
use crate::conntrack::{ConnTable, FlowState};
use crate::pipeline::context::{Outcome, Rx};
use crate::pipeline::ipv4::{transit_l4, Transit};
use crate::route::IfIndex;
use crate::slots::SlotMem;
use crate::types::{DropReason, Duration, FiveTuple, NodeId, Timestamp};
use crate::wire::ethernet::{ethertype, EthernetFrame};
use crate::wire::ipv4::Ipv4Packet;
use crate::wire::ipv6::Ipv6Packet;
use crate::pipeline::transit6::{self, Transit6};

/// What the pipeline does after `ccl_in` opened a datagram.
#[derive(Copy, Clone, Debug)]
pub(crate) enum CclNext {
    /// Nothing more: the datagram was handled (`Consumed`) or its frame was
    /// wrapped again in place for its owner (`Forward`).
    Done(Outcome),
    /// The buffer now holds a `ForwardedPacket`'s frame: decide it with
    /// `rx` (the fast path first), then `keep_order`.
    Forwarded(Rx),
    /// The buffer now holds a relayed frame of a flow this node owns:
    /// decide it with `rx` (the general path), then `keep_order`.
    RelayedOwn(Rx),
    /// The frames of a `ForwardedBatch` wait in pool slots: decide each
    /// (`take_received` / `finish_received`); the datagram is `Consumed`.
    Batch,
    /// An owner reply (or a flow transfer, then `owner` is this node) for
    /// the frames parked under `query_id`: release them (`take_parked` /
    /// `finish_parked`); the datagram is `Consumed`.
    Release { query_id: u32, owner: Option<NodeId> },
}

/// The five-tuple of a frame (for relays, which carry no key); for an ICMP
/// error, the tuple it quotes.
fn frame_tuple(frame: &[u8]) -> Option<FiveTuple> {
    let e = EthernetFrame::new_checked(frame).ok()?;
    match e.ethertype() {
        ethertype::IPV4 => {
            let ip = Ipv4Packet::new_checked(e.payload()).ok()?;
            match transit_l4(&ip).ok()? {
                Transit::Flow(t, _) | Transit::IcmpError(t) => Some(t),
            }
        }
        ethertype::IPV6 => {
            let ip = Ipv6Packet::new_checked(e.payload()).ok()?;
            let u = ip.upper_layer().ok()?;
            match transit6::transit(&ip, u.protocol, u.offset).ok()? {
                Transit6::Flow(t, _) | Transit6::Error(t) => Some(t),
            }
        }
        _ => None,
    }
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

impl ClusterPath {
    /// A datagram to our CCL address on the CCL interface: open it and act.
    pub fn ccl_in<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        link: &mut Link<'_>,
        conn: &mut ConnTable,
        buf: &mut B,
    ) -> Result<CclNext, DropReason> {
        let data = buf.data();
        let total = data.len();
        let opened = self.opener.open_frame(data).map_err(|_| DropReason::CclMalformed)?;
        let from = opened.sender;
        self.trace_from = from;
        if self.own_channel_only && opened.channel != self.sealer.channel() && !matches!(opened.msg, Message::Heartbeat(_)) {
            return Err(DropReason::CclWrongWorker);
        }
        if self.joined_at.get(from.index()).is_some_and(|e| opened.epoch.0 < e.0) {
            return Err(DropReason::CclBeforeRejoin);
        }
        let at = |f: &[u8]| (f.as_ptr() as usize).wrapping_sub(data.as_ptr() as usize);
        let consumed = CclNext::Done(Outcome::Consumed);
        match opened.msg {
            Message::Heartbeat(_) => Ok(consumed),
            Message::SyncDone(m) => {
                self.on_sync_done(now, link, from, m);
                Ok(consumed)
            }
            Message::SyncAgain(m) => {
                self.on_sync_again(from, m);
                Ok(consumed)
            }
            Message::FlowTransfer(x) => Ok(match self.on_transfer(now, link, conn, from, &x) {
                // An unasked transfer (0) has no parked frames.
                Some(query_id) if query_id != 0 => CclNext::Release { query_id, owner: Some(self.me) },
                _ => consumed,
            }),
            Message::FlowHandOver(b) => {
                self.on_handover(now, link, conn, from, &b);
                Ok(consumed)
            }
            Message::OwnerQuery(q) => {
                self.on_query(now, link, conn, from, &q);
                Ok(consumed)
            }
            Message::OwnerReply(r) if !self.members.contains(from) => {
                self.counters.from_nonmembers += 1;
                let _ = r;
                Ok(consumed)
            }
            Message::OwnerReply(r) => Ok(self.on_reply(now, link, conn, &r)),
            Message::FlowRegister(b) => {
                self.count_received(from, opened.epoch, b.len());
                self.on_records(now, link, conn, from, &b, true);
                Ok(consumed)
            }
            Message::StateUpdate(b) => {
                self.count_received(from, opened.epoch, b.len());
                self.on_records(now, link, conn, from, &b, false);
                Ok(consumed)
            }
            Message::ForwardedPacket(f) => {
                let (off, len, iface) = (at(f.frame), f.frame.len(), f.ingress_iface);
                let hinted = f.flow_hint.is_some();
                unwrap_to(buf, off, len, total)?;
                self.counters.forwarded_received += 1;
                Ok(CclNext::Forwarded(Rx { hinted, ..Rx::ccl(IfIndex(u16::from(iface))) }))
            }
            // N3: decided as if received on one of this node's ports
            // (`Rx::to_control`): it may open a connection here, or the
            // director names its owner.
            Message::ToControl(f) => {
                let (off, len, iface) = (at(f.frame), f.frame.len(), f.ingress_iface);
                unwrap_to(buf, off, len, total)?;
                self.counters.to_control_received += 1;
                Ok(CclNext::Forwarded(Rx { to_control: true, ..Rx::ccl(IfIndex(u16::from(iface))) }))
            }
            Message::ForwardedBatch(b) => {
                self.batch_in(&b);
                Ok(CclNext::Batch)
            }
            Message::RelayToOwner(f) => {
                let (off, len, iface) = (at(f.frame), f.frame.len(), f.ingress_iface);
                let tuple = frame_tuple(f.frame);
                unwrap_to(buf, off, len, total)?;
                let tuple = tuple.ok_or(DropReason::CclMalformed)?;
                if conn.lookup(&tuple).is_some() {
                    self.counters.relays_owned += 1;
                    return Ok(CclNext::RelayedOwn(Rx::ccl(IfIndex(u16::from(iface)))));
                }
                let owner = match self.records.get(&canonical(&tuple)) {
                    Some(r) if live(r, now) && r.owner != self.me && self.members.contains(r.owner) && !r.owner_left => r.owner,
                    _ => return Err(DropReason::ClusterNoRecord),
                };
                let port = self.wrap(now, link, buf, Wrap::Forward, iface, owner, None)?;
                self.counters.relays_relayed += 1;
                Ok(CclNext::Done(Outcome::Forward(port)))
            }
        }
    }

    /// Director: who owns the flow? Elect the querier if asked and nobody
    /// does (R8); hand it the flow if its owner left (R11, `grant`); with
    /// no record and no election asked, hold the query for a registration
    /// in flight (`hold`). Queries from non-members are ignored.
    fn on_query(&mut self, now: Timestamp, link: &mut Link<'_>, conn: &mut ConnTable, from: NodeId, q: &OwnerQuery) {
        if !self.members.contains(from) {
            self.counters.from_nonmembers += 1;
            return;
        }
        let t = q.flow.tuple();
        let local = conn.lookup(&t).is_some();
        let timeouts = *conn.timeouts();
        let me = self.me;
        let key = canonical(&t);
        let owner = if local {
            Some(me)
        } else if q.local {
            // R12, a lookup at this node as the querier's local director:
            // an owner only from a live record naming a live member (or
            // this node's own flow); anything else — no record, an orphan,
            // an owner that left — is the global director's to decide.
            self.records
                .get(&key)
                .filter(|r| live(r, now) && !r.owner_left && r.owner != me && self.members.contains(r.owner))
                .map(|r| r.owner)
        } else {
            // `regrant`: granted to the querier, which asks again before
            // registering — the transfer was lost on the CCL. Send it again
            // (the same owner: no second one).
            let held = self.records.get(&key).filter(|r| live(r, now) && (r.owner != me || r.owner_left)).map(|r| {
                let regrant = r.owner == from && !r.owner_left && r.state.is_some() && r.version.is_none();
                (r.owner, r.owner_left, regrant)
            });
            match held {
                Some((_, false, true)) if self.director_of(&t) == me => {
                    if self.grant(now, link, from, q) {
                        self.counters.grants_repeated += 1;
                        self.counters.queries_answered += 1;
                        return;
                    }
                    None
                }
                Some((o, false, _)) if self.members.contains(o) => Some(o),
                Some(_) if self.orphan_here(&t, now) => {
                    // A translated flow is granted only to the member
                    // holding its binding's block; anyone else is sent
                    // there (which then asks, and is granted).
                    let holder = self.records.get(&key).and_then(|r| self.binding_holder(r.binding));
                    match holder.filter(|&h| h != from) {
                        // This director holds the block: it takes the flow
                        // over now and names itself.
                        Some(h) if h == me => {
                            self.counters.nat_takeovers_redirected += 1;
                            self.take_over(now, link, conn, &t).ok().map(|()| me)
                        }
                        // Another member holds it: the flow goes there
                        // (unasked), the querier is sent there too.
                        Some(h) if self.synced(h) => {
                            self.counters.nat_takeovers_redirected += 1;
                            self.grant_to(now, link, h, 0, &key).then_some(h)
                        }
                        // Not before the holder applied the member set
                        // (`nat_regrant_step`): the querier asks again.
                        Some(_) => None,
                        None => {
                            if self.grant(now, link, from, q) {
                                self.counters.queries_answered += 1;
                                return;
                            }
                            None
                        }
                    }
                }
                _ if q.elect_if_absent && self.settling(now, conn) => {
                    // Owners are re-registering after a member change: the
                    // flow may be owned elsewhere, its record on the way.
                    // Hold the query; the deadline elects the querier.
                    self.counters.queries_answered += 1;
                    self.hold(now, link, from, q, &timeouts);
                    return;
                }
                _ if q.elect_if_absent => self.elect(now, from, &t, &timeouts),
                _ => {
                    self.counters.queries_answered += 1;
                    self.hold(now, link, from, q, &timeouts);
                    return;
                }
            }
        };
        if q.local {
            if owner.is_some() {
                self.counters.local_answered += 1;
            } else {
                self.counters.local_unknown += 1;
            }
        }
        self.counters.queries_answered += 1;
        let reply = Message::OwnerReply(OwnerReply { query_id: q.query_id, flow: q.flow, owner });
        self.send_ccl(now, link, from, &reply);
    }

    /// Querier: the director answered. The frames parked for the query are
    /// released by the pipeline (`CclNext::Release`).
    fn on_reply(&mut self, now: Timestamp, link: &mut Link<'_>, conn: &mut ConnTable, r: &OwnerReply) -> CclNext {
        let t = r.flow.tuple();
        let timeouts = *conn.timeouts();
        self.counters.replies_received += 1;
        let me = self.me;
        // An owner outside our member set is no owner (R11).
        let owner = r.owner.filter(|&o| o == me || self.members.contains(o));
        let key = canonical(&t);
        // A record with the owner's state that names the same owner (its
        // registration overtook the reply: a backup asked before the
        // record reached it) stays: a forwarder record in its place would
        // lose the state the next takeover needs (the quorum sweep, seed
        // 93: the flow died with its owner a few seconds later).
        let holds_state = |rec: &Record| rec.state.is_some() && Some(rec.owner) == owner && !rec.owner_left;
        if let Some(rec) = self.records.get_mut(&key).filter(|rec| live(rec, now) && holds_state(rec)) {
            rec.last_seen = now;
        } else if let Some(o) = owner.filter(|&o| o != me) {
            let rec = Record::stateless(Role::Forwarder, o, t, STATE_NOT_TCP, now, idle_for(&timeouts, t.proto));
            if !self.upsert(key, rec) {
                self.counters.record_table_full += 1;
            }
        }
        if owner.is_none() && r.query_id != 0 && self.fall_back(now, link, r.query_id, r.flow) {
            // R12: the local director did not know it; the global one is
            // asked now, the frames stay parked.
            return CclNext::Done(Outcome::Consumed);
        }
        if r.query_id != 0 {
            return CclNext::Release { query_id: r.query_id, owner };
        }
        if owner.is_some_and(|o| o != me) {
            // Unsolicited: our registration lost to an earlier owner (two
            // SYNs of one connection on two nodes). Yield: forward from now.
            if let Some((h, _)) = conn.lookup(&t) {
                conn.remove_flow(h);
                self.counters.ownership_yielded += 1;
            }
        }
        CclNext::Done(Outcome::Consumed)
    }

    /// Director/backup: flow records from an owner (R2, R9), with its flow
    /// state. Records from a non-member, or naming one as owner, are
    /// ignored (a removed node does not claim flows back); a registration
    /// for a flow whose recorded owner left replaces the record (the new
    /// owner after a takeover). Held queries for the flow are answered.
    fn on_records(
        &mut self,
        now: Timestamp,
        link: &mut Link<'_>,
        conn: &ConnTable,
        from: NodeId,
        batch: &FlowBatch<'_>,
        register: bool,
    ) {
        if !self.members.contains(from) {
            self.counters.from_nonmembers += batch.len() as u64;
            return;
        }
        for r in batch.iter() {
            let t = r.flow.tuple();
            let key = canonical(&t);
            self.counters.records_received += 1;
            if r.flags & FLAG_ORPHAN != 0 {
                self.on_handoff(now, link, conn, &r);
                continue;
            }
            if !self.members.contains(r.owner) {
                self.counters.from_nonmembers += 1;
                continue;
            }
            match r.op {
                FlowOp::Delete => {
                    self.records.remove(&key);
                }
                FlowOp::Upsert => {
                    let members = self.members;
                    let conflict = match self.records.get(&key) {
                        Some(ex)
                            if register
                                && live(ex, now)
                                && ex.owner != r.owner
                                && ex.role != Role::Forwarder
                                && members.contains(ex.owner)
                                && !ex.owner_left
                                && r.replaces() != Some(ex.owner) =>
                        {
                            Some(ex.owner)
                        }
                        _ => None,
                    };
                    if let Some(first) = conflict {
                        // Two SYNs of one connection on two nodes: the first
                        // owner stays; tell the latecomer.
                        self.counters.register_conflicts += 1;
                        let m = Message::OwnerReply(OwnerReply { query_id: 0, flow: r.flow, owner: Some(first) });
                        self.send_ccl(now, link, from, &m);
                        continue;
                    }
                    // A record older than the one held for the same owner
                    // (reordered on the CCL) would undo a newer state.
                    let version = Version::from_record(&r);
                    let stale = match (self.records.get(&key), version) {
                        (Some(ex), Some(v)) if live(ex, now) && ex.owner == r.owner && !ex.owner_left => {
                            ex.version.is_some_and(|held| v.older_than(held))
                        }
                        _ => false,
                    };
                    if stale {
                        self.counters.records_stale += 1;
                        continue;
                    }
                    let state = match r.state().map(FlowState::from_bytes) {
                        Some(Ok(s)) => Some(s),
                        Some(Err(_)) => {
                            self.counters.records_bad_state += 1;
                            None
                        }
                        None => None,
                    };
                    let rec = Record {
                        role: self.record_role(&t),
                        owner: r.owner,
                        orig: t,
                        tcp_state: r.tcp_state,
                        seq_delta: r.seq_delta,
                        last_seen: now,
                        idle: Duration::from_secs(u64::from(r.idle_timeout_s)),
                        version,
                        state,
                        owner_left: false,
                        handoff: false,
                        binding: r.binding(),
                    };
                    if !self.upsert(key, rec) {
                        self.counters.record_table_full += 1;
                    } else if !self.held.is_empty() {
                        self.answer_held(now, link, &key, r.owner);
                    }
                }
            }
        }
    }

    /// Owner: copy the frames of a received `ForwardedBatch` into pool
    /// slots (the datagram is borrowed while they are read), for the
    /// pipeline to decide in order (`take_received`).
    fn batch_in(&mut self, b: &ForwardedBatch<'_>) {
        self.received_len = 0;
        self.counters.batches_received += 1;
        for (iface, frame) in b.frames() {
            self.counters.forwarded_received += 1;
            let slot = self.pool.alloc();
            let n = self.received_len;
            match (slot, n < self.received.len()) {
                (Some(i), true) if self.pool.fill(i, frame) => {
                    self.received[n] = (i, iface);
                    self.received_len += 1;
                }
                (i, _) => {
                    if let Some(i) = i {
                        self.pool.give_back(i);
                    }
                    self.counters.pool_full += 1;
                    self.counters.batch_frame_drops += 1;
                }
            }
        }
    }

    /// How many frames of the last received batch wait to be decided.
    pub fn received(&self) -> usize {
        self.received_len
    }

    /// The `k`-th frame of the last received batch, its buffer moved out of
    /// its slot: (slot, ingress interface, buffer, start, end).
    pub fn take_received(&mut self, k: usize) -> Option<(u16, IfIndex, SlotMem, usize, usize)> {
        let (i, iface) = *self.received.get(..self.received_len)?.get(k)?;
        let (mem, start, end) = self.pool.take(i)?;
        Some((i, IfIndex(u16::from(iface)), mem, start, end))
    }

    /// File the outcome of a batch frame from `take_received`, its frame
    /// now at `start..end`: what leaves waits in the pool for
    /// `drain_generated`, after the frames forwarded in place during the
    /// burst (`keep_order`).
    pub fn finish_received(&mut self, i: u16, mem: SlotMem, start: usize, end: usize, outcome: Outcome) {
        self.pool.put_back(i, mem, start, end);
        // A slot from `alloc` is still `Free` in state: `push_out` queues
        // it, `give_back` returns it.
        match outcome {
            Outcome::Forward(p) | Outcome::ArpReply(p) | Outcome::EchoReply(p) => {
                self.pooled_out = true;
                self.pool.push_out(i, p);
            }
            Outcome::Consumed => self.pool.give_back(i),
            // A cluster node runs one worker (`Pipeline::set_worker`): no
            // batch frame is handed to another; counted as a drop if ever.
            Outcome::Handoff(_) => {
                self.counters.batch_frame_drops += 1;
                self.pool.give_back(i);
            }
            Outcome::Drop(r) => {
                self.counters.batch_frame_drops += 1;
                if let Some(c) = self.batch_drops.get_mut(r.index()) {
                    *c += 1;
                }
                self.pool.give_back(i);
            }
        }
    }

    /// Owner: a frame forwarded to us that is to leave while frames of an
    /// earlier batch wait in the pool (`pooled_out`) is copied there behind
    /// them, so that a flow's frames leave in the order they arrived.
    /// Without a free slot it leaves as decided.
    pub fn keep_order<B: PacketBuf>(&mut self, o: Outcome, buf: &B) -> Outcome {
        let Outcome::Forward(port) = o else {
            return o;
        };
        if !self.pooled_out {
            return o;
        }
        let Some(i) = self.pool.alloc() else {
            self.counters.pool_full += 1;
            return o;
        };
        if !self.pool.fill(i, buf.data()) {
            self.pool.give_back(i);
            return o;
        }
        self.pool.push_out(i, port);
        Outcome::Consumed
    }
}
