//! The owner's side of flow records (R2, R9): what conntrack's verdict on
//! an owner packet means for the director and backups, the re-sends that
//! repair a lost lengthening update (docs/cluster-design.md, "Lost flow
//! records"), and the cluster stage's timers.

use super::{
    live, next_random, state_timeout, ClusterPath, Link, OwnerExtra, Resend, Update, Version, MAX_UPDATES,
    RECORD_SWEEP, RESENDS, RESEND_DELAY, STATE_NOT_TCP,
};
use crate::ccl::{FlowKey, FlowOp, FlowRecord};
use crate::cluster::{flow_hash, Backups, SeqDelta};
use crate::conntrack::{tcp_flags, ConnTable, FlowHandle, L4Info, TcpState, Tracked};
use crate::pipeline::context::Xlate;
use crate::types::{Direction, FiveTuple, Timestamp};

/// What the owner knew of the flow before conntrack ran.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Pre {
    handle: FlowHandle,
    state: Option<TcpState>,
}

impl ClusterPath {
    /// The sequence delta (R6) of this owner's flow `h` (0: none), for an
    /// ICMP error it sends on quoting a TCP segment of the flow: the quoted
    /// header goes back to the segment's sender's space (`Xlate::quoted`),
    /// so its TCP accepts the error (PMTUD).
    pub fn quoted_delta(&self, h: FlowHandle) -> u32 {
        self.extras.get(h.index() as usize).map_or(0, |e| e.delta)
    }

    /// Before conntrack, for a packet this node will process as owner: the
    /// flow as it was, and the reply-direction `ack` taken back into the
    /// client's sequence space (conntrack tracks the client's space, R6).
    pub fn owner_pre(&self, conn: &ConnTable, tuple: &FiveTuple, seen: &mut L4Info) -> Option<Pre> {
        let (handle, dir) = conn.lookup(tuple)?;
        let delta = self.extras.get(handle.index() as usize).map_or(0, |e| e.delta);
        if let (L4Info::Tcp(seg), Direction::Reply) = (seen, dir) {
            if seg.flags & tcp_flags::ACK != 0 {
                seg.ack = SeqDelta(delta).to_client(seg.ack);
            }
        }
        Some(Pre { handle, state: conn.tcp_state(handle) })
    }

    /// After conntrack accepted an owner packet: a new flow gets its cookie
    /// ISN (R6) and is registered with the director and backups (R2); a
    /// state change is sent to them (R9). Returns the translation to apply.
    #[allow(clippy::too_many_arguments)]
    pub fn owner_post(
        &mut self,
        now: Timestamp,
        link: &mut Link<'_>,
        conn: &ConnTable,
        tuple: &FiveTuple,
        l4: &L4Info,
        tracked: Tracked,
        pre: Option<Pre>,
    ) -> Option<Xlate> {
        let state = conn.tcp_state(tracked.handle);
        let timeouts = *conn.timeouts();
        self.counters.owner_packets += 1;
        let idx = tracked.handle.index() as usize;
        let timeout = state_timeout(&timeouts, state, tuple.proto);
        let stale = self.extras.get(idx).is_some_and(|e| now.since(e.sent).0 >= timeout.0 / 2);
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
                if self.seq_randomization && seg.flags & tcp_flags::SYN != 0 && seg.flags & tcp_flags::ACK == 0 {
                    let isn = self.cookies.encode(self.me, next_random(&mut self.rng) as u32);
                    delta = SeqDelta::between(seg.seq, isn).0;
                }
            }
            let version = Version { generation: self.next_generation, seq: 0 };
            self.next_generation = self.next_generation.wrapping_add(1);
            if let Some(e) = self.extras.get_mut(idx) {
                *e = OwnerExtra { delta, sent: now, version, sent_idle: timeout, binding: None };
            }
        }
        let delta = self.extras.get(idx).map_or(0, |e| e.delta);
        if changed {
            let orig = match tracked.dir {
                Direction::Original => *tuple,
                Direction::Reply => tuple.reversed(),
            };
            let mut version: Option<Version> = None;
            let mut lengthened = false;
            if let Some(e) = self.extras.get_mut(idx) {
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
                if self.resends.len() < self.resends.capacity() {
                    self.resends.push_back(r);
                } else {
                    self.counters.resends_skipped += 1;
                }
            }
            if resyn {
                self.counters.registers_resent += 1;
            }
            if let Some(record) = self.owner_record(now, conn, tracked.handle, &orig) {
                self.queue_record(now, link, &orig, record, tracked.created || resyn);
            }
        }
        if !matches!(l4, L4Info::Tcp(_)) {
            return None;
        }
        Xlate::of(tracked.dir, delta, tracked.splice)
    }

    /// The record the owner sends now for its flow `h` (`orig`: the
    /// original direction): TCP state, idle timeout, sequence delta and
    /// version from the flow's extras, and the flow state (`FLAG_STATE`,
    /// R9), so that a director or backup can hand the flow on (R11).
    pub(super) fn owner_record(&self, now: Timestamp, conn: &ConnTable, h: FlowHandle, orig: &FiveTuple) -> Option<FlowRecord> {
        let flow = FlowKey::new(*orig).ok()?;
        let e = self.extras.get(h.index() as usize)?;
        let state = conn.tcp_state(h);
        let timeout = state_timeout(conn.timeouts(), state, orig.proto);
        let mut record = FlowRecord {
            flow,
            owner: self.me,
            op: FlowOp::Upsert,
            tcp_state: state.map_or(STATE_NOT_TCP, |s| s as u8),
            flags: 0,
            seq_delta: e.delta,
            idle_timeout_s: timeout.as_secs().min(u64::from(u32::MAX)) as u32,
            opaque: [0; crate::ccl::OPAQUE_LEN],
        };
        e.version.write(&mut record);
        if let Some(st) = conn.export(now, h) {
            record.set_state(&st.to_bytes());
        }
        record.set_binding(e.binding);
        Some(record)
    }

    /// Queue `record` for the flow's director and backups (sent by `flush`).
    fn queue_record(&mut self, now: Timestamp, link: &mut Link<'_>, orig: &FiveTuple, record: FlowRecord, register: bool) {
        let backups = self.directors.backups(flow_hash(orig), self.me);
        self.queue_to(now, link, record, register, backups);
    }

    /// Queue `record` for the nodes `to` (sent by `flush`; a queue about
    /// to overflow is flushed first).
    pub(super) fn queue_to(&mut self, now: Timestamp, link: &mut Link<'_>, record: FlowRecord, register: bool, to: Backups) {
        if self.updates.len() + crate::cluster::MAX_BACKUPS > MAX_UPDATES {
            self.flush(now, link);
        }
        for to in to.iter() {
            if self.updates.len() < MAX_UPDATES {
                self.updates.push(Update { to, register, record });
                if register {
                    self.counters.registers_sent += 1;
                } else {
                    self.counters.updates_sent += 1;
                }
            }
        }
    }

    /// Cluster timers: pending-query timeouts, held queries, re-sends, the
    /// re-registration scan, idle records, ARP for CCL peers not yet
    /// resolved.
    pub fn timers(&mut self, now: Timestamp, link: &mut Link<'_>, conn: &ConnTable) {
        self.expire_pending(now);
        self.expire_held(now, link, conn.timeouts());
        self.sync_step(now, link, conn);
        self.nat_regrant_step(now, link);
        let resent = self.resend_due(now, link, conn);
        if now >= self.next_sweep {
            let before = self.records.len();
            self.records.retain(|_, r| live(r, now));
            self.counters.records_expired += (before - self.records.len()) as u64;
            self.next_sweep = now.saturating_add(RECORD_SWEEP);
        }
        if resent {
            self.flush(now, link);
        }
        let Some(eg) = link.ifaces.get(self.ccl_ifx) else {
            return;
        };
        for n in self.members.iter().filter(|&n| n != self.me) {
            let Some(ip) = self.peers.get(n.index()).copied().flatten() else {
                continue;
            };
            link.egress.refresh_peer(now, eg, ip, self.ccl_ifx);
        }
    }

    /// Re-send the lengthening state changes that are due (`Resend`): the
    /// flow's current record, if the flow still lives in the same
    /// generation. `true` if records were queued.
    fn resend_due(&mut self, now: Timestamp, link: &mut Link<'_>, conn: &ConnTable) -> bool {
        let timeouts = *conn.timeouts();
        let mut queued = false;
        loop {
            let r = match self.resends.front() {
                Some(r) if r.due <= now => *r,
                _ => return queued,
            };
            self.resends.pop_front();
            let Some((h, _)) = conn.lookup(&r.orig) else {
                continue;
            };
            let state = conn.tcp_state(h);
            let Some(e) = self.extras.get_mut(h.index() as usize) else {
                continue;
            };
            if e.version.generation != r.generation {
                continue;
            }
            let timeout = state_timeout(&timeouts, state, r.orig.proto);
            e.version.seq = e.version.seq.wrapping_add(1);
            e.sent = now;
            e.sent_idle = timeout;
            if r.left > 1 {
                self.resends.push_back(Resend { due: now.saturating_add(RESEND_DELAY), left: r.left - 1, ..r });
            }
            self.counters.updates_resent += 1;
            if let Some(record) = self.owner_record(now, conn, h, &r.orig) {
                self.queue_record(now, link, &r.orig, record, false);
                queued = true;
            }
        }
    }

    /// End of a burst, before the pool drains: seal the open forwarded
    /// batches; frames received in batches stop holding back later ones.
    pub fn end_burst(&mut self) {
        self.pooled_out = false;
        self.seal_open_batches();
    }

    /// Hand the queued CCL frames and released frames to `f`.
    pub fn drain(&mut self, f: &mut impl FnMut(crate::types::PortId, &[u8])) {
        self.pool.drain(f);
    }
}
