//! The pending table: frames waiting for the director's answer to an
//! owner query (R5, R8). A frame is copied into a parked pool slot (bounded
//! by `MAX_PENDING`: full is `ClusterPendingFull`), a second frame of the
//! same flow joins the query already out, an answer releases them in slot
//! order (`take_parked` / `finish_parked`, driven by the pipeline), and
//! `PENDING_TIMEOUT` drops the rest (`expire_pending`).

use super::{canonical, ClusterPath, Link, Pending, MAX_PENDING, PENDING_TIMEOUT};
use crate::cluster::flow_hash;
use crate::buf::PacketBuf;
use crate::ccl::{FlowKey, Message, OwnerQuery, FRAME_OVERHEAD, TAG_LEN};
use crate::pipeline::context::{Outcome, Rx};
use crate::route::IfIndex;
use crate::slots::{SlotMem, SLOT_HEADROOM};
use crate::types::{DropReason, FiveTuple, NodeId, PortId, Timestamp};

/// A parked frame taken out of its slot for release.
pub(crate) struct Parked {
    pub slot: u16,
    pub meta: Pending,
    pub mem: SlotMem,
    pub start: usize,
    pub end: usize,
}

impl ClusterPath {
    /// No room to park a frame (and send the query that goes with it).
    fn pending_full(&self) -> bool {
        self.pool.parked() >= MAX_PENDING || self.pool.free_slots() < 2
    }

    /// The query pending for `key`, if any.
    pub(super) fn pending_query(&self, key: &FiveTuple) -> Option<u32> {
        if self.pool.parked() == 0 {
            return None;
        }
        let tag = key_tag(key);
        self.pool.tagged(1, tag, 0).find_map(|i| self.pool.parked_meta(i).filter(|p| p.key == *key).map(|p| p.query_id))
    }

    /// Copy the frame into the pending table and ask the director (unless
    /// a query for this flow is already out).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn park<B: PacketBuf>(
        &mut self,
        now: Timestamp,
        link: &mut Link<'_>,
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
        if self.pending_full() || SLOT_HEADROOM + len + TAG_LEN + FRAME_OVERHEAD > self.pool.slot_len() {
            return Err(DropReason::ClusterPendingFull);
        }
        let mut fallback = None;
        let query_id = match self.pending_query(&key) {
            Some(q) => {
                self.counters.queries_coalesced += 1;
                q
            }
            None => {
                let flow = FlowKey::new(*tuple).map_err(|_| DropReason::CclMalformed)?;
                let query_id = self.query_id();
                if director == self.me {
                    // This node is the director and has no record yet: it
                    // holds its own query for the registration in flight
                    // (`failover.rs`, "Director hold").
                    if !self.hold_local(now, query_id, flow, key, elect) {
                        return Err(DropReason::ClusterPendingFull);
                    }
                } else {
                    // R12: the local director of this node's site first,
                    // when it is neither the global director nor this node
                    // (which knows no owner: it would be asking itself).
                    let local = self
                        .directors
                        .site_of(self.me)
                        .and_then(|site| self.directors.local_director(flow_hash(tuple), site))
                        .filter(|&l| l != director && l != self.me);
                    let (to, q) = match local {
                        Some(l) => {
                            fallback = Some((director, elect));
                            (l, OwnerQuery { query_id, flow, elect_if_absent: false, local: true })
                        }
                        None => (director, OwnerQuery { query_id, flow, elect_if_absent: elect, local: false }),
                    };
                    if !self.send_ccl(now, link, to, &Message::OwnerQuery(q)) {
                        return Err(DropReason::ClusterPeerUnresolved);
                    }
                    self.counters.director_queries_sent += 1;
                    if local.is_some() {
                        self.counters.local_queries_sent += 1;
                    }
                }
                query_id
            }
        };
        let Some(i) = self.pool.alloc() else {
            return Err(DropReason::ClusterPendingFull);
        };
        let copied = self.pool.fill(i, buf.data());
        let p = Pending {
            query_id,
            key,
            deadline: now.saturating_add(PENDING_TIMEOUT),
            in_port,
            via: rx.via,
            ifx,
            frag: rx.frag,
            fallback,
            guard_syn: elect && key.proto == crate::ip_proto::TCP,
        };
        self.pool.park_tagged(i, p, [query_id, key_tag(&key)]);
        if !copied {
            self.pool.release(i);
            return Err(DropReason::ClusterPendingFull);
        }
        self.counters.pending_queued += 1;
        Ok(Outcome::Consumed)
    }

    /// R12: the local director did not know the flow of `query_id`: ask
    /// the global director (with the election flag the first query would
    /// have carried), the frames staying parked with a fresh deadline.
    /// False when the query had no fallback or it could not be sent (the
    /// frames are then released without an owner, as before).
    pub(super) fn fall_back(&mut self, now: Timestamp, link: &mut Link<'_>, query_id: u32, flow: FlowKey) -> bool {
        if self.pool.parked() == 0 {
            return false;
        }
        let mut target = None;
        let mut from = 0;
        loop {
            let Some(i) = self.pool.tagged(0, query_id, from).next() else { break };
            from = usize::from(i) + 1;
            if let Some(mut p) = self.pool.parked_meta(i).filter(|p| p.query_id == query_id) {
                target = target.or(p.fallback);
                p.fallback = None;
                p.deadline = now.saturating_add(PENDING_TIMEOUT);
                self.pool.park_tagged(i, p, [query_id, key_tag(&p.key)]);
            }
        }
        let Some((director, elect)) = target else { return false };
        let q = Message::OwnerQuery(OwnerQuery { query_id, flow, elect_if_absent: elect, local: false });
        if !self.send_ccl(now, link, director, &q) {
            return false;
        }
        self.counters.local_fallbacks += 1;
        self.counters.director_queries_sent += 1;
        true
    }

    /// The next frame parked under `query_id`, from slot `*from` on, its
    /// buffer moved out of the slot; `*from` moves past it. A slot whose
    /// buffer is out (never: nothing else takes parked slots) is freed.
    pub fn take_parked(&mut self, query_id: u32, from: &mut usize) -> Option<Parked> {
        while *from < self.pool.len() {
            let Some(i) = self.pool.tagged(0, query_id, *from).next() else {
                *from = self.pool.len();
                return None;
            };
            *from = usize::from(i) + 1;
            let Some(meta) = self.pool.parked_meta(i).filter(|p| p.query_id == query_id) else {
                continue;
            };
            match self.pool.take(i) {
                Some((mem, start, end)) => return Some(Parked { slot: i, meta, mem, start, end }),
                None => self.pool.release(i),
            }
        }
        None
    }

    /// File the fate of a frame from `take_parked`, its frame now at
    /// `start..end` of `mem`: `Some(Some(port))` sent on, `Some(None)` kept
    /// by the pipeline (held for its next hop), `None` dropped (counted as
    /// a release drop when the director had named an owner).
    pub fn finish_parked(
        &mut self,
        slot: u16,
        mem: SlotMem,
        start: usize,
        end: usize,
        sent: Option<Option<PortId>>,
        owner_known: bool,
    ) {
        self.pool.put_back(slot, mem, start, end);
        match sent {
            Some(Some(p)) => {
                self.counters.pending_released += 1;
                self.pool.push_out(slot, p);
            }
            Some(None) => {
                self.counters.pending_released += 1;
                self.pool.release(slot);
            }
            None => {
                if owner_known {
                    self.counters.pending_release_drops += 1;
                }
                self.pool.release(slot);
            }
        }
    }

    /// Drop the frames whose query went unanswered for `PENDING_TIMEOUT`.
    ///
    /// A SYN the guard asked about is owned instead (R1, as outside the
    /// guard; `guard_timeouts_owned`): its director did not answer in
    /// time, most likely because the CCL lost the query or the reply under
    /// load, and the flow is most likely new; dropped, the client would
    /// retransmit it a second later. Its frames (all of its query's) are
    /// released by the pipeline (`next_local_release`, owner: this node).
    pub(super) fn expire_pending(&mut self, now: Timestamp) {
        if self.pool.parked() == 0 {
            return;
        }
        for i in 0..self.pool.len() as u16 {
            let Some(p) = self.pool.parked_meta(i).filter(|p| p.deadline <= now) else { continue };
            if p.guard_syn && self.release_own(p.query_id) {
                self.counters.guard_timeouts_owned += 1;
                continue;
            }
            self.pool.release(i);
            self.counters.pending_timeouts += 1;
        }
    }

    /// Queue the frames parked under `query_id` for release as this
    /// node's (their deadlines pushed out meanwhile); false when the
    /// release queue is full.
    fn release_own(&mut self, query_id: u32) -> bool {
        if !self.push_local_release(query_id, Some(self.me)) {
            return false;
        }
        let mut from = 0;
        loop {
            let Some(i) = self.pool.tagged(0, query_id, from).next() else { return true };
            from = usize::from(i) + 1;
            if let Some(mut p) = self.pool.parked_meta(i).filter(|p| p.query_id == query_id) {
                p.deadline = Timestamp::MAX;
                self.pool.park_tagged(i, p, [query_id, key_tag(&p.key)]);
            }
        }
    }
}

/// The parked slot tag of a flow (`FramePool::park_tagged`'s second tag):
/// its hash folded to 32 bits, never 0.
fn key_tag(key: &FiveTuple) -> u32 {
    let h = flow_hash(key);
    ((h ^ (h >> 32)) as u32) | 1
}
