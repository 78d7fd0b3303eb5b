//! Failover on one worker (SPEC R11, R4; docs/failover.md): taking a
//! connection over when its owner left, re-registering owned flows when the
//! member set changes, the director's hold for a registration in flight,
//! fencing by lease and the reset.
//!
//! Takeover. A record (forwarder, director or backup) naming a node that is
//! not in the member set is never followed. The director of the flow under
//! the current member set, if it holds the record with the owner's state,
//! is the only node that decides: a packet reaching it makes it the owner
//! (`take_over`, `Plan::TakeOver`), an owner query from another member
//! makes the querier the owner (`grant`: a `FlowTransfer` with the state,
//! the record now names the querier). The new owner installs the flow with
//! `FlowState::resync` (the record may be older than the connection),
//! keeps the sequence delta, starts a new generation of the record version
//! and registers with its director and backups. With rendezvous ranking
//! the new director already holds the state after every single failure
//! (`cluster::director` properties), and after every double failure with
//! `backups: 2`.
//!
//! Re-registration. `set_members` keeps the table every owned flow is
//! registered under (`synced`) and starts a scan of the flow table,
//! `SYNC_BUDGET` slots per `poll_timers`: a flow whose backups (director
//! included) differ between `synced` and the new table is registered with
//! the nodes it did not have, with its state. When the scan ends the
//! queued records are flushed and a `SyncDone { epoch }` goes to every
//! other member, behind them on the same channel, and again every
//! `SYNC_MARKER_EVERY` for `SYNC_MARKER_FOR` (one lost on the CCL, or
//! one that could not be sent — the peer's CCL MAC not resolved yet —
//! would leave the joiner to its sync timeout). A
//! change during a scan restarts it from `synced` (some flows are sent
//! twice; none is missed). A scan whose set gained nodes first waits for
//! their `SyncDone` of the epoch (at most `SYNC_WAIT` plus the time a scan
//! of a table like ours takes — the joiner's marker follows its own scan
//! of its empty table): records reaching a joiner before its worker
//! applied the set would be dropped there as from a non-member.
//!
//! Invariants:
//! - at most one owner: a grant or a local takeover happens only at the
//!   flow's director under this node's member set, only for a record whose
//!   owner is not a member, and turns the record into one naming the new
//!   owner, so a second query is answered with that owner; records and
//!   queries from non-members are ignored (counted), so a node that was
//!   removed (paused, partitioned) cannot claim a flow back;
//! - a transfer is installed only for a query this worker has pending for
//!   that flow, addressed to this node, with a valid state; anything else
//!   is counted (`transfers_refused`) and changes nothing;
//! - the scan and the hold table are bounded (`SYNC_BUDGET`, `MAX_HELD`)
//!   and allocate nothing; nothing here runs per packet except `fenced`
//!   (one compare) and the take-over of a packet's own flow.

use super::{
    canonical, live, ClusterPath, HeldQuery, Link, OwnerExtra, Received, Role, SyncProgress, Version, MAX_HELD, SYNC_AGAIN_MAX,
    SYNC_BUDGET, SYNC_EPOCHS,
};
use crate::ccl::{
    FlowKey, FlowOp, FlowRecord, FlowTransfer, Message, NatBinding, OwnerQuery, OwnerReply, SyncAgain, SyncDone, FLAG_ORPHAN,
    OPAQUE_LEN,
};
use crate::cluster::flow_hash;
use crate::conntrack::{ConnTable, FlowState, Timeouts};
use crate::types::{DropReason, Duration, Epoch, FiveTuple, NodeId, Timestamp};

/// Regrants of translated orphans sent per timer call (bounded work).
const NAT_REGRANTS_PER_TICK: usize = 256;
/// `FlowHandOver` batches sent per timer call (16 records each).
const HANDOVER_BATCHES: usize = 32;

impl ClusterPath {
    // --- Fencing and reset. ---

    /// Is the lease over (docs/failover.md, "Fencing")?
    #[inline(always)]
    pub fn fenced(&self, now: Timestamp) -> bool {
        now >= self.lease
    }

    /// A new lease from membership.
    pub fn set_lease(&mut self, until: Timestamp) {
        self.lease = until;
    }

    /// This node left the cluster: forget every record, parked frame,
    /// queued message, open batch, held query and re-send (the caller
    /// clears the flow table). Counters and the CCL endpoint stay.
    pub fn reset(&mut self, now: Timestamp) {
        // Alone until membership hands over the next set: a node that left
        // must not answer owner queries as a director with its records gone
        // (it would elect a second owner of a live flow; the simulator's
        // sweep, seed 1135: a node leaving after a link went down, still
        // asked before the others removed it).
        if let Ok(alone) = crate::cluster::MemberSet::from_nodes(self.members.epoch(), [self.me]) {
            if let Ok(t) = crate::cluster::DirectorTable::new(&alone) {
                self.members = alone;
                self.directors = self.directors.same_rules(t);
            }
        }
        self.records.clear();
        self.candidates.clear();
        self.pool.clear();
        self.fwd_batches = [None; NodeId::MAX_NODES];
        self.updates.clear();
        self.resends.clear();
        self.held.clear();
        self.handovers.clear();
        self.local_len = 0;
        self.received_len = 0;
        self.pooled_out = false;
        self.synced = self.directors;
        self.sync.running = false;
        self.sync.sent = true;
        self.sync.started = now;
        self.sync.awaiting = 0;
        self.sync.unsent = 0;
        self.done_from = [(Epoch(0), 0); SYNC_EPOCHS];
        self.records_in = [Received::EMPTY; SYNC_EPOCHS];
        self.sent_to = [0; NodeId::MAX_NODES];
        self.round_to = [0; NodeId::MAX_NODES];
        self.counters.resets += 1;
    }

    // --- Member-set changes: SYN guard, re-registration, sync markers. ---

    /// `set_members` has installed the new table (`joined`: the nodes new
    /// in it): open the SYN guard and (re)start the scan.
    pub(super) fn start_sync(&mut self, now: Timestamp, joined: u16) {
        // `synced` stays: the table of the last finished scan (every owned
        // flow is registered under it), also when a scan is cut short.
        // Nodes still awaited by a scan cut short stay awaited: they must
        // show this epoch too.
        // (`joined` never holds this node; neither do carried bits.)
        let (carried, fresh) = if self.sync.running { (self.sync.awaiting, self.sync.fresh) } else { (0, 0) };
        self.sync.awaiting = (carried | joined) & self.members.bits();
        self.sync.fresh = (fresh | joined) & self.members.bits();
        self.sync.waited = false;
        self.guard_until = now.saturating_add(self.syn_guard);
        if self.sync.epoch != self.members.epoch() {
            self.round_to = [0; NodeId::MAX_NODES];
        }
        self.sync.epoch = self.members.epoch();
        self.sync.cursor = 0;
        self.sync.running = true;
        self.sync.sent = false;
        self.sync.started = now;
    }

    /// Within the SYN guard window (a SYN at a non-director asks first)?
    #[inline]
    pub(super) fn syn_guarded(&self, now: Timestamp) -> bool {
        now < self.guard_until
    }

    /// One step of the re-registration scan (from `timers`): up to
    /// `SYNC_BUDGET` slots; at the end, flush and send `SyncDone`.
    pub(super) fn sync_step(&mut self, now: Timestamp, link: &mut Link<'_>, conn: &ConnTable) {
        if !self.sync.running {
            let tries_end = self.sync.started.saturating_add(self.sync.took).saturating_add(super::SYNC_MARKER_FOR);
            // Every marker again (one lost on the CCL would leave the joiner
            // to its sync timeout); one that could not be sent is in there.
            if now >= self.sync.next_marker && now < tries_end {
                self.sync.next_marker = now.saturating_add(super::SYNC_MARKER_EVERY);
                let n = self.send_markers(now, link, u16::MAX);
                self.counters.sync_done_repeated += n;
            }
            return;
        }
        if self.sync.cursor == 0 && !self.sync_may_start(now, conn) {
            return;
        }
        if self.sync.handoffs != 0 {
            self.handoff_step(now, link);
        }
        if !self.handovers.is_empty() {
            self.handover_step(now, link);
        }
        let cap = conn.capacity();
        let end = self.sync.cursor.saturating_add(SYNC_BUDGET).min(cap);
        for i in self.sync.cursor..end {
            let Some((h, orig)) = conn.slot(i) else { continue };
            self.counters.sync_scanned += 1;
            let hash = flow_hash(&orig);
            let (old, new) = (self.synced.backups(hash, self.me), self.directors.backups(hash, self.me));
            let fresh = self.sync.fresh;
            if old == new && (fresh == 0 || new.iter().all(|n| fresh >> n.0 & 1 == 0)) {
                continue;
            }
            let mut to = crate::cluster::Backups::default();
            for n in new.iter().filter(|&n| !old.contains(n) || fresh >> n.0 & 1 != 0) {
                to.push(n);
            }
            if to.is_empty() {
                continue; // only a holder less: nothing to send
            }
            let Some(record) = self.owner_record(now, conn, h, &orig) else { continue };
            self.counters.reregistered += 1;
            self.queue_to(now, link, record, true, to);
        }
        self.sync.cursor = end;
        // The markers follow the hand-offs and the NAT hand-overs too
        // (more than a scan has ticks: the scan's end waits).
        if end < cap || self.sync.handoffs != 0 || !self.handovers.is_empty() {
            return;
        }
        // Done: the records first, then the markers on the same channel.
        self.flush(now, link);
        self.synced = self.directors;
        self.sync.running = false;
        self.sync.sent = true;
        self.sync.took = now.since(self.sync.started);
        self.sync.next_marker = now.saturating_add(super::SYNC_MARKER_EVERY);
        let n = self.send_markers(now, link, u16::MAX);
        self.counters.sync_done_sent += n;
    }

    /// `SyncDone` for the last finished scan's epoch to the other members
    /// in `to` (bits); how many left. Those that could not be sent (the
    /// peer's CCL MAC not resolved yet, `ccl_unresolved`; no pool slot)
    /// stay in `sync.unsent` for the next try.
    fn send_markers(&mut self, now: Timestamp, link: &mut Link<'_>, to: u16) -> u64 {
        let (members, me, epoch) = (self.members, self.me, self.sync.epoch);
        let mut sent = 0;
        self.sync.unsent = 0;
        for n in members.iter().filter(|&n| n != me && to >> n.0 & 1 != 0) {
            let records = if self.sent_epoch == epoch { self.sent_to[n.index()] } else { 0 };
            let m = Message::SyncDone(SyncDone { epoch, records, round: self.round_to[n.index()] });
            if self.send_ccl(now, link, n, &m) {
                sent += 1;
            } else {
                self.sync.unsent |= 1 << n.0;
            }
        }
        sent
    }

    /// May the scan start? Not while a node new in the member set has not
    /// shown it applied it (its `SyncDone` for the epoch, which follows its
    /// own scan of its reset table), unless there is nothing to send or
    /// the wait (`SYNC_WAIT` beyond a scan's duration) is over. The wait is what lets a
    /// rejoining director or backup receive its records: sent earlier, they
    /// meet a pipeline that does not count this node as a member yet and
    /// are dropped (`from_nonmembers` there), and the flow is lost to it.
    fn sync_may_start(&mut self, now: Timestamp, conn: &ConnTable) -> bool {
        if self.sync.awaiting == 0 {
            return true;
        }
        if conn.is_empty() && self.sync.handoffs == 0 && self.handovers.is_empty() {
            self.sync.awaiting = 0;
            return true;
        }
        self.sync.awaiting &= !self.sync_progress(self.sync.epoch).done_from;
        if self.sync.awaiting == 0 {
            return true;
        }
        if now >= self.sync_wait_end(conn) {
            self.counters.sync_wait_timeouts += 1;
            self.sync.awaiting = 0;
            return true;
        }
        if !self.sync.waited {
            self.sync.waited = true;
            self.counters.sync_waits += 1;
        }
        false
    }

    /// Flow records sent to `to` in a message stamped with this node's
    /// epoch (what the next `SyncDone` to it counts).
    pub(super) fn count_sent(&mut self, to: NodeId, records: usize) {
        let epoch = self.members.epoch();
        if self.sent_epoch != epoch {
            self.sent_epoch = epoch;
            self.sent_to = [0; NodeId::MAX_NODES];
        }
        if let Some(c) = self.sent_to.get_mut(to.index()) {
            *c = c.saturating_add(records as u32);
        }
    }

    /// The `received` entry of `epoch`, made (over the oldest) if absent.
    fn received_of(&mut self, epoch: Epoch) -> &mut Received {
        let i = match self.records_in.iter().position(|r| r.epoch == epoch) {
            Some(i) => i,
            None => {
                let i = self.records_in_next;
                self.records_in_next = (i + 1) % SYNC_EPOCHS;
                self.records_in[i] = Received { epoch, ..Received::EMPTY };
                i
            }
        };
        &mut self.records_in[i]
    }

    /// Flow records from `from` in a message stamped `epoch`.
    pub(super) fn count_received(&mut self, from: NodeId, epoch: Epoch, records: usize) {
        if let Some(c) = self.received_of(epoch).records.get_mut(from.index()) {
            *c = c.saturating_add(records as u32);
        }
    }

    /// A peer's `SyncDone` (docs/failover.md, "Lost re-registrations"):
    /// done for its epoch when every flow record it counts has arrived;
    /// otherwise ask for the re-registration again (`SyncAgain`), at most
    /// `SYNC_AGAIN_MAX` times per epoch, and start counting afresh. A
    /// marker of a round before the one asked for is from before the
    /// request reached the peer — or the request was lost: ask again (the
    /// peer ignores a round it already started; the markers' repetition
    /// bounds these).
    pub(super) fn on_sync_done(&mut self, now: Timestamp, link: &mut Link<'_>, from: NodeId, m: SyncDone) {
        self.counters.sync_done_received += 1;
        let i = from.index();
        if i >= NodeId::MAX_NODES {
            return;
        }
        let r = self.received_of(m.epoch);
        let (got, asked, asks) = (r.records[i], r.round[i], r.asks[i]);
        if m.round < asked {
            self.send_sync_again(now, link, from, m.epoch, asked);
            return;
        }
        if got < m.records {
            self.counters.sync_short += 1;
            if asks < SYNC_AGAIN_MAX {
                let round = m.round.saturating_add(1);
                let r = self.received_of(m.epoch);
                r.asks[i] += 1;
                r.round[i] = round;
                r.records[i] = 0;
                self.send_sync_again(now, link, from, m.epoch, round);
                return;
            }
            self.counters.sync_short_accepted += 1;
        }
        self.mark_done(from, m.epoch);
    }

    fn send_sync_again(&mut self, now: Timestamp, link: &mut Link<'_>, to: NodeId, epoch: Epoch, round: u32) {
        if self.send_ccl(now, link, to, &Message::SyncAgain(SyncAgain { epoch, round })) {
            self.counters.sync_again_sent += 1;
        }
    }

    /// A peer's `SyncAgain`: it counted fewer of our records than our
    /// marker said. Register with it again every owned flow it directs or
    /// backs up (it is `fresh` for a scan from the first slot), once per
    /// round; markers follow as after any scan.
    pub(super) fn on_sync_again(&mut self, from: NodeId, m: SyncAgain) {
        let i = from.index();
        if m.epoch != self.sync.epoch || !self.members.contains(from) || i >= NodeId::MAX_NODES || from == self.me {
            return;
        }
        if m.round <= self.round_to[i] {
            return;
        }
        self.counters.sync_again_received += 1;
        self.round_to[i] = m.round;
        if self.sent_epoch == m.epoch {
            self.sent_to[i] = 0;
        }
        self.sync.fresh |= 1 << i;
        self.sync.cursor = 0;
        if !self.sync.running {
            self.sync.running = true;
            self.sync.awaiting = 0;
        }
    }

    /// Remember `from`'s marker under its epoch.
    fn mark_done(&mut self, from: NodeId, epoch: Epoch) {
        let bit = 1u16.checked_shl(u32::from(from.0)).unwrap_or(0);
        if let Some(e) = self.done_from.iter_mut().find(|e| e.0 == epoch && e.1 != 0) {
            e.1 |= bit;
            return;
        }
        if let Some(e) = self.done_from.get_mut(self.done_next) {
            *e = (epoch, bit);
        }
        self.done_next = (self.done_next + 1) % SYNC_EPOCHS;
    }

    /// `Pipeline::sync_progress` (contract).
    pub fn sync_progress(&self, epoch: Epoch) -> SyncProgress {
        let done_from = self.done_from.iter().filter(|e| e.0 == epoch).fold(0, |a, e| a | e.1);
        SyncProgress { epoch, done_from, sent: self.sync.sent && self.sync.epoch.0 >= epoch.0 }
    }

    /// The last scan: running, and how long the last finished one took.
    pub fn sync_state(&self) -> (bool, Duration) {
        (self.sync.running, self.sync.took)
    }

    // --- Orphans: records whose director cannot hold them. ---

    /// After `set_members` (`before`: the director table it replaced,
    /// `fresh`: the nodes that lost their state): mark for the hand-off
    /// every orphan record with state (its owner left, or is gone) whose
    /// director is now another node that cannot hold it — a fresh node, or
    /// one that was not the director before. Without it the flow's state
    /// sits at a backup while its director, the only node that decides a
    /// takeover, knows nothing of it: the flow is lost (a node restarted
    /// and readmitted within one member set directs again the flows it
    /// owned and directed; a node that rejoins directs again the orphans
    /// no packet reached while it was gone).
    pub(super) fn mark_handoffs(&mut self, now: Timestamp, before: &crate::cluster::DirectorTable, fresh: u16) {
        let (me, members, directors) = (self.me, self.members, self.directors);
        let mut n = 0;
        for r in self.records.values_mut() {
            if !orphan_with_state(r, &members, now) {
                continue;
            }
            let hash = flow_hash(&r.orig);
            let d = directors.director(hash);
            if d != me && (fresh >> (d.0 & 15) & 1 != 0 || before.director(hash) != d) {
                r.handoff = true;
            }
            n += usize::from(r.handoff);
        }
        self.sync.handoffs = n;
    }

    /// Send up to `SYNC_BUDGET` marked orphan records to their director
    /// (`FLAG_ORPHAN`, with the owner's state): from the scan, once the
    /// fresh nodes applied the set, before the scan's records and markers
    /// on the same channel.
    fn handoff_step(&mut self, now: Timestamp, link: &mut Link<'_>) {
        let (me, members) = (self.me, self.members);
        let mut batch = [None; SYNC_BUDGET / 2];
        let mut k = 0;
        for r in self.records.values_mut().filter(|r| r.handoff) {
            if k == batch.len() {
                break;
            }
            r.handoff = false;
            if orphan_with_state(r, &members, now) {
                batch[k] = Some(*r);
                k += 1;
            }
        }
        // Fewer than a batch found: none left (the sweep may have removed
        // marked records); else at least one more pass.
        self.sync.handoffs = if k < batch.len() { 0 } else { self.sync.handoffs.saturating_sub(k).max(1) };
        for r in batch.iter().flatten() {
            let d = self.director_of(&r.orig);
            if d == me || !members.contains(d) {
                continue;
            }
            let Some(mut record) = held_record(r, r.owner) else { continue };
            record.flags |= FLAG_ORPHAN;
            if let Some(v) = r.version {
                v.write(&mut record);
            }
            let mut to = crate::cluster::Backups::default();
            to.push(d);
            self.counters.handoffs_sent += 1;
            self.queue_to(now, link, record, true, to);
        }
    }

    /// Director: an orphan hand-off (`FLAG_ORPHAN`). Kept as an orphan
    /// record with its state — this node then decides the takeover
    /// (`orphan_here`) — unless this node owns the flow or holds a live
    /// owner's record of it (a takeover already happened: the hand-off is
    /// late), counted `handoffs_ignored`. Queries held for the flow are
    /// granted to the first peer asking.
    pub(super) fn on_handoff(&mut self, now: Timestamp, link: &mut Link<'_>, conn: &ConnTable, r: &FlowRecord) {
        let t = r.flow.tuple();
        let key = canonical(&t);
        let state = r.state().and_then(|b| FlowState::from_bytes(b).ok());
        let held_live = self
            .records
            .get(&key)
            .is_some_and(|ex| live(ex, now) && self.members.contains(ex.owner) && !ex.owner_left && ex.owner != self.me);
        let Some(state) = state.filter(|_| r.op == FlowOp::Upsert && !held_live && conn.lookup(&t).is_none()) else {
            self.counters.handoffs_ignored += 1;
            return;
        };
        let rec = super::Record {
            role: self.record_role(&t),
            owner: r.owner,
            orig: t,
            tcp_state: r.tcp_state,
            seq_delta: r.seq_delta,
            last_seen: now,
            idle: Duration::from_secs(u64::from(r.idle_timeout_s.max(1))),
            version: Version::from_record(r),
            state: Some(state),
            owner_left: true,
            handoff: false,
            binding: r.binding(),
        };
        if !self.upsert(key, rec) {
            self.counters.record_table_full += 1;
            return;
        }
        self.counters.handoffs_received += 1;
        if self.director_of(&t) != self.me {
            return;
        }
        // Queries held for it: the first peer's is granted, the others
        // learn that owner.
        let mut owner = None;
        let mut i = 0;
        while i < self.held.len() {
            let Some(h) = self.held.get(i).copied() else { break };
            if h.key != key || (owner.is_none() && h.from == self.me) {
                i += 1;
                continue;
            }
            self.held.swap_remove(i);
            self.counters.held_answered += 1;
            match owner {
                Some(o) => self.answer(now, link, h, Some(o)),
                None => {
                    let q = OwnerQuery { query_id: h.query_id, flow: h.flow, elect_if_absent: false, local: false };
                    if self.grant(now, link, h.from, &q) {
                        self.counters.queries_answered += 1;
                        owner = Some(h.from);
                    } else {
                        self.answer(now, link, h, None);
                    }
                }
            }
        }
    }

    // --- Takeover. ---

    /// Is this a record of a flow whose owner left and whose state this
    /// node holds as the flow's director (it decides the takeover)?
    pub(super) fn orphan_here(&self, t: &FiveTuple, now: Timestamp) -> bool {
        match self.records.get(&canonical(t)) {
            Some(r) if (r.owner != self.me || r.owner_left) && orphan_with_state(r, &self.members, now) => {
                self.director_of(t) == self.me
            }
            _ => false,
        }
    }

    /// `Plan::TakeOver`: this node, the director holding the state of a
    /// flow whose owner left, becomes its owner for the packet at hand.
    pub fn take_over(&mut self, now: Timestamp, link: &mut Link<'_>, conn: &mut ConnTable, t: &FiveTuple) -> Result<(), DropReason> {
        let key = canonical(t);
        let (orig, state, delta, binding) = match self.records.get(&key) {
            Some(r) if self.orphan_here(t, now) => match r.state {
                Some(s) => (r.orig, s, r.seq_delta, r.binding),
                None => return Err(DropReason::ClusterNoRecord),
            },
            _ => return Err(DropReason::ClusterNoRecord),
        };
        let replaced = self.records.get(&key).map(|r| r.owner);
        self.adopt(now, link, conn, &orig, state, delta, replaced, binding)?;
        self.counters.takeovers_local += 1;
        Ok(())
    }

    /// Install a flow taken over and register it (both takeover paths).
    #[allow(clippy::too_many_arguments)]
    fn adopt(
        &mut self,
        now: Timestamp,
        link: &mut Link<'_>,
        conn: &mut ConnTable,
        orig: &FiveTuple,
        state: FlowState,
        delta: u32,
        replaced: Option<NodeId>,
        binding: Option<NatBinding>,
    ) -> Result<(), DropReason> {
        if binding.is_some() && self.adopted.len() >= self.adopted.capacity() {
            self.counters.bindings_overflow += 1;
            return Err(DropReason::NatExhausted);
        }
        let h = conn.install(now, orig, state.resync())?;
        conn.log_adopted(now, h);
        // The owner keeps no record of its own flows.
        self.records.remove(&canonical(orig));
        let version = Version { generation: self.next_generation, seq: 0 };
        self.next_generation = self.next_generation.wrapping_add(1);
        let timeout = super::state_timeout(conn.timeouts(), state.tcp_state(), orig.proto);
        if let Some(e) = self.extras.get_mut(h.index() as usize) {
            *e = OwnerExtra { delta, sent: now, version, sent_idle: timeout, binding };
        }
        if let Some(b) = binding {
            // The NAT stage keeps the binding (`Pipeline::settle_adopted`)
            // before any packet of the flow is processed here (room was
            // checked above).
            self.adopted.push((h, *orig, b));
        }
        if let Some(mut record) = self.owner_record(now, conn, h, orig) {
            // Named, so that a holder still counting that owner a member
            // lets this registration replace its record.
            if let Some(o) = replaced {
                record.set_replaces(o);
            }
            let to = self.directors.backups(flow_hash(orig), self.me);
            self.queue_to(now, link, record, true, to);
        }
        Ok(())
    }

    /// Director: the querier asked about a flow whose owner left, and this
    /// node holds its state: elect the querier, send it the flow. `false`
    /// when the transfer could not be sent (the record is unchanged).
    pub(super) fn grant(&mut self, now: Timestamp, link: &mut Link<'_>, from: NodeId, q: &OwnerQuery) -> bool {
        self.grant_to(now, link, from, q.query_id, &canonical(&q.flow.tuple()))
    }

    /// `grant` of the flow `key` to `from`, in a transfer answering its
    /// query `query_id` — 0: unasked, the holder of a translated flow's
    /// block (another member asked; `on_transfer` takes it there).
    pub(super) fn grant_to(
        &mut self,
        now: Timestamp,
        link: &mut Link<'_>,
        from: NodeId,
        query_id: u32,
        key: &FiveTuple,
    ) -> bool {
        let key = *key;
        let Some(r) = self.records.get(&key).copied() else { return false };
        let Some(mut record) = held_record(&r, from) else { return false };
        // The querier's registration names the owner it replaces.
        record.set_replaces(r.owner);
        let mut bytes = [0u8; FlowRecord::V6_LEN];
        let Ok(n) = record.emit(&mut bytes) else { return false };
        let Ok(x) = FlowTransfer::new(query_id, bytes.get(..n).unwrap_or(&[])) else { return false };
        if !self.send_ccl(now, link, from, &Message::FlowTransfer(x)) {
            return false;
        }
        if let Some(r) = self.records.get_mut(&key) {
            // The querier is the owner now; its registration (a new
            // generation of its own) replaces this record.
            r.owner = from;
            // A live member's now: a second query arriving before its
            // registration is answered with it, not granted again.
            r.owner_left = false;
            r.version = None;
            r.last_seen = now;
            r.role = if self.directors.director(flow_hash(&r.orig)) == self.me { Role::Director } else { Role::Backup };
        }
        self.counters.takeovers_granted += 1;
        true
    }

    /// NAT, after a member-set change (and the plan's): the translated
    /// flows whose owner left and whose state this node holds as their
    /// director go to the member holding their binding's block now — the
    /// heir after a failure, the block's node when it came back — before
    /// any of their packets asks (`nat_regrant_step`): their return
    /// traffic, which goes there, finds the translation at once, and a
    /// node that came back reserves their ports before it hands any out.
    /// Returns those whose block this node holds: the caller takes them
    /// over here at once (`take_over`).
    pub fn queue_nat_regrants(&mut self, now: Timestamp) -> Vec<FiveTuple> {
        self.nat_regrants.clear();
        if self.nat.is_none() {
            return Vec::new();
        }
        let me = self.me;
        let mut local = Vec::new();
        for (k, r) in &self.records {
            if r.binding.is_none() || !orphan_with_state(r, &self.members, now) || self.director_of(&r.orig) != me {
                continue;
            }
            match self.binding_holder(r.binding) {
                Some(h) if h == me => local.push(r.orig),
                Some(_) => self.nat_regrants.push(*k),
                None => {}
            }
        }
        // In the tuples' order, not the record map's (its hash seed is
        // the process's): every run of a member change takes the same
        // connections over in the same order.
        let order = |t: &FiveTuple| (t.src, t.dst, t.proto, t.src_port, t.dst_port);
        local.sort_unstable_by_key(order);
        self.nat_regrants.sort_unstable_by_key(order);
        local
    }

    /// Send the queued regrants (`queue_nat_regrants`), at most
    /// `NAT_REGRANTS_PER_TICK` per call; true if any was sent.
    pub(super) fn nat_regrant_step(&mut self, now: Timestamp, link: &mut Link<'_>) -> bool {
        let mut sent = false;
        let mut later = 0;
        for _ in 0..NAT_REGRANTS_PER_TICK {
            let Some(key) = self.nat_regrants.pop() else { break };
            let holder = match self.records.get(&key) {
                Some(r) if orphan_with_state(r, &self.members, now) => self.binding_holder(r.binding),
                _ => None,
            };
            if let Some(h) = holder.filter(|&h| h != self.me) {
                // Not before the holder applied this member set: with the
                // old one it does not hold the block yet and refuses the
                // flow (which would then be lost). Its sync marker says.
                if !self.synced(h) {
                    self.nat_regrants.insert(0, key);
                    later += 1;
                    if later >= self.nat_regrants.len() {
                        break;
                    }
                    continue;
                }
                if self.grant_to(now, link, h, 0, &key) {
                    self.counters.nat_regrants += 1;
                    sent = true;
                }
            }
        }
        sent
    }

    /// Has member `n` applied this node's member set (its `SyncDone` of
    /// the epoch, on this worker's channel, came)? Unasked transfers wait
    /// for it.
    pub(super) fn synced(&self, n: NodeId) -> bool {
        self.sync_progress(self.members.epoch()).done_from >> (n.0 & 15) & 1 != 0
    }

    /// A translated flow this node owns whose binding's block went back to
    /// node `to` (it came back; NAT, docs/nat.md): its record — state and
    /// binding, owner `to`, a takeover from this node — is queued for a
    /// `FlowHandOver` batch to `to` (`handover_step`); the caller then
    /// ends it here. However many go at one member change, every one is
    /// sent: the scan sends them once `to` applied the member set, as many
    /// a tick as the frame pool takes, and its markers, which let `to`
    /// become ready, follow them on the same channel.
    pub fn hand_over(&mut self, now: Timestamp, conn: &ConnTable, h: crate::conntrack::FlowHandle, orig: &FiveTuple, to: NodeId) {
        let Some(mut record) = self.owner_record(now, conn, h, orig) else { return };
        if record.binding().is_none() || to == self.me {
            return;
        }
        record.owner = to;
        record.set_replaces(self.me);
        self.handovers.push((to, record));
    }

    /// Send queued hand-overs (from the scan, once the nodes new in the
    /// set applied it): one `FlowHandOver` batch per destination at a
    /// time, up to `HANDOVER_BATCHES` a tick, in the order queued; a batch
    /// the frame pool cannot take stays queued for the next tick.
    fn handover_step(&mut self, now: Timestamp, link: &mut Link<'_>) {
        let Some(mut payload) = self.batch.take() else { return };
        for _ in 0..HANDOVER_BATCHES {
            let Some(&(to, _)) = self.handovers.first() else { break };
            let Ok(mut w) = crate::ccl::BatchWriter::new(&mut payload[..]) else { break };
            // The first `n` records queued for `to`.
            let mut n = 0usize;
            for (_, r) in self.handovers.iter().filter(|(t, _)| *t == to) {
                if w.push(r).is_err() {
                    break;
                }
                n += 1;
            }
            if n == 0 || !self.send_ccl(now, link, to, &Message::FlowHandOver(w.as_batch())) {
                break;
            }
            self.counters.nat_handovers += n as u64;
            let mut left = n;
            self.handovers.retain(|(t, _)| {
                let sent = *t == to && left > 0;
                left -= usize::from(sent);
                !sent
            });
        }
        self.batch = Some(payload);
    }

    /// A `FlowHandOver` from `from`: each record a translated flow whose
    /// block this node holds again, which `from` owned. Installed as a
    /// takeover from `from` (the binding reserved in the block by the NAT
    /// stage, `Pipeline::settle_adopted`, before any packet of it is
    /// decided here) unless the sender is not a member, the record does
    /// not name this node as owner and `from` as the owner it replaces,
    /// its binding's block is not this node's, its state does not decode
    /// or the flow is here already: counted `nat_handovers_refused`.
    pub(super) fn on_handover(
        &mut self,
        now: Timestamp,
        link: &mut Link<'_>,
        conn: &mut ConnTable,
        from: NodeId,
        batch: &crate::ccl::FlowBatch<'_>,
    ) {
        for r in batch.iter() {
            let orig = r.flow.tuple();
            let state = r.state().and_then(|b| FlowState::from_bytes(b).ok());
            let ok = self.members.contains(from)
                && from != self.me
                && r.owner == self.me
                && r.op == FlowOp::Upsert
                && r.replaces() == Some(from)
                && r.binding().is_some()
                && self.binding_holder(r.binding()) == Some(self.me)
                && conn.lookup(&orig).is_none();
            let (true, Some(state)) = (ok, state) else {
                self.counters.nat_handovers_refused += 1;
                continue;
            };
            if self.adopt(now, link, conn, &orig, state, r.seq_delta, Some(from), r.binding()).is_err() {
                self.counters.nat_handovers_refused += 1;
                continue;
            }
            self.counters.nat_handovers_received += 1;
            self.counters.takeovers += 1;
        }
    }

    /// Querier: a `FlowTransfer`. Installs the flow and returns the query
    /// whose parked frames to release as owner; `None` (counted) when the
    /// transfer is not for a query of ours or cannot be installed.
    pub(super) fn on_transfer(
        &mut self,
        now: Timestamp,
        link: &mut Link<'_>,
        conn: &mut ConnTable,
        from: NodeId,
        x: &FlowTransfer<'_>,
    ) -> Option<u32> {
        let Ok(r) = x.record() else {
            self.counters.transfers_refused += 1;
            return None;
        };
        let r = &r;
        let orig = r.flow.tuple();
        let pending = self.pending_query(&canonical(&orig));
        let state = r.state().and_then(|b| FlowState::from_bytes(b).ok());
        // Unasked (query id 0): a translated flow whose binding's block
        // this node holds, which the director hands here (NAT, R11).
        let unasked = x.query_id == 0 && pending.is_none() && self.binding_holder(r.binding()) == Some(self.me);
        let ok = r.owner == self.me
            && r.op == FlowOp::Upsert
            && self.members.contains(from)
            && (pending == Some(x.query_id) || unasked);
        let (true, Some(state)) = (ok, state) else {
            self.counters.transfers_refused += 1;
            return None;
        };
        if conn.lookup(&orig).is_none() {
            if self.adopt(now, link, conn, &orig, state, r.seq_delta, r.replaces(), r.binding()).is_err() {
                self.counters.transfers_refused += 1;
                return None;
            }
            self.counters.takeovers += 1;
        }
        Some(x.query_id)
    }

    // --- The director's hold (a registration in flight). ---

    /// Hold `q` for `director_hold` (no record; an election asked only
    /// while `settling`); full, or no hold configured: answer now as the
    /// deadline would.
    pub(super) fn hold(&mut self, now: Timestamp, link: &mut Link<'_>, from: NodeId, q: &OwnerQuery, timeouts: &Timeouts) {
        if self.held.iter().any(|h| h.from == from && h.query_id == q.query_id) {
            return; // a duplicate
        }
        let key = canonical(&q.flow.tuple());
        let h = HeldQuery {
            query_id: q.query_id,
            from,
            flow: q.flow,
            key,
            deadline: now.saturating_add(self.director_hold),
            elect: q.elect_if_absent,
        };
        if self.held.len() >= MAX_HELD || self.director_hold == Duration::ZERO {
            if self.director_hold != Duration::ZERO {
                self.counters.held_full += 1;
            }
            self.unregistered(now, link, h, timeouts);
            return;
        }
        // One peer's share: a flood of packets without a flow (ACK, RST,
        // denied UDP) at a member asks about every one; held here for the
        // whole hold, they would fill its pending table (`MAX_PENDING`)
        // against the legitimate queries. All directors together hold at
        // most a quarter of any peer's table; the rest are answered at
        // once.
        if self.held.iter().filter(|x| x.from == from).count() >= self.held_share() {
            self.counters.held_share_full += 1;
            self.unregistered(now, link, h, timeouts);
            return;
        }
        self.held.push(h);
        self.counters.queries_held += 1;
    }

    /// The queries this director holds for one peer at most: its hold
    /// table (`MAX_HELD`) shared among the other members, at least 4. A
    /// querier then has at most `MAX_HELD` queries held by all directors
    /// together: a quarter of its pending table (`MAX_PENDING`).
    pub(super) fn held_share(&self) -> usize {
        let others = self.members.len().saturating_sub(1).max(1);
        (MAX_HELD / others).max(4)
    }

    /// A held query whose flow nobody registered: "none", or, if it asked
    /// for an election, the asker elected (R8; this node itself when it is
    /// the asker: its frames are released to be owned here).
    fn unregistered(&mut self, now: Timestamp, link: &mut Link<'_>, h: HeldQuery, timeouts: &Timeouts) {
        let owner = match h.elect {
            false => None,
            true if h.from == self.me => Some(self.me),
            true => self.elect(now, h.from, &h.flow.tuple(), timeouts),
        };
        self.answer(now, link, h, owner);
    }

    /// Elect `from` the owner of `t` (R8): a record naming it. `None` when
    /// the record table is full.
    pub(super) fn elect(&mut self, now: Timestamp, from: NodeId, t: &FiveTuple, timeouts: &Timeouts) -> Option<NodeId> {
        let rec = super::Record::stateless(self.record_role(t), from, *t, super::STATE_NOT_TCP, now, super::idle_for(timeouts, t.proto));
        if self.upsert(canonical(t), rec) {
            self.counters.elections += 1;
            Some(from)
        } else {
            self.counters.record_table_full += 1;
            None
        }
    }

    /// Are owners re-registering after a member change, so that a flow
    /// this director has no record of may be owned elsewhere, its record
    /// on the way? From the change until every other member's `SyncDone`
    /// for the epoch has arrived (each follows that member's records on
    /// the same channel), at most `SYNC_WAIT` beyond a scan of a table
    /// like ours. Meanwhile an election (a query with `elect_if_absent`,
    /// or this director's own packet that may open a flow) waits in the
    /// hold instead of making a second owner of a live flow (the quorum
    /// sweep, seed 124: a UDP packet at the new director 30 µs before the
    /// owner's re-registration). Needs a hold (`director_hold`).
    pub(super) fn settling(&self, now: Timestamp, conn: &ConnTable) -> bool {
        if self.director_hold == Duration::ZERO || !self.syn_guarded(now) {
            return false;
        }
        let others = self.members.bits() & !(1u16 << (self.me.0 & 15));
        if others & !self.sync_progress(self.members.epoch()).done_from == 0 {
            return false;
        }
        now < self.sync_wait_end(conn)
    }

    /// The latest a member's `SyncDone` for the current epoch is waited
    /// for: `SYNC_WAIT` beyond a scan like ours since the change (a
    /// joiner's marker follows its own scan of its empty table: capacity /
    /// `SYNC_BUDGET` timer ticks of 1 ms).
    fn sync_wait_end(&self, conn: &ConnTable) -> Timestamp {
        let scan = Duration::from_millis((conn.capacity() / SYNC_BUDGET) as u64);
        self.sync.started.saturating_add(super::SYNC_WAIT).saturating_add(scan)
    }

    /// Does a mid-connection TCP segment with no record at this node, its
    /// director, wait for a registration in flight (a query held here,
    /// `hold_local`) rather than meet conntrack (`tcp-no-flow`)? With a
    /// hold configured, within the window after a member change (owners
    /// are re-registering), or without cookies (a SYN-ACK cannot name its
    /// owner).
    #[inline]
    pub(super) fn local_hold(&self, now: Timestamp) -> bool {
        self.director_hold != Duration::ZERO && (self.syn_guarded(now) || !self.seq_randomization)
    }

    /// The director's own query (`park` with this node as director): held
    /// like a peer's; its answer comes back through `next_local_release`.
    pub(super) fn hold_local(&mut self, now: Timestamp, query_id: u32, flow: FlowKey, key: FiveTuple, elect: bool) -> bool {
        if self.held.len() >= MAX_HELD {
            self.counters.held_full += 1;
            return false;
        }
        self.held.push(HeldQuery { query_id, from: self.me, flow, key, deadline: now.saturating_add(self.director_hold), elect });
        self.counters.queries_held += 1;
        true
    }

    /// The answer to one of this node's own held queries, if any: the frames
    /// parked under the query id are to be released with this owner
    /// (`None`: nobody registered in time). For the pipeline, after a CCL
    /// datagram and after the timers.
    /// Are answers to this node's own held queries waiting?
    #[inline(always)]
    pub fn has_local_release(&self) -> bool {
        self.local_len != 0
    }

    /// Queue an answer for this node's own parked frames (`query_id`);
    /// false when the queue is full.
    pub(super) fn push_local_release(&mut self, query_id: u32, owner: Option<NodeId>) -> bool {
        let Some(slot) = self.local_releases.get_mut(self.local_len) else { return false };
        *slot = (query_id, owner);
        self.local_len += 1;
        true
    }

    #[inline]
    pub fn next_local_release(&mut self) -> Option<(u32, Option<NodeId>)> {
        if self.local_len == 0 {
            return None;
        }
        self.local_len -= 1;
        self.local_releases.get(self.local_len).copied()
    }

    /// Hand the answer of a held query to its asker: a reply to a peer, a
    /// release to ourselves.
    fn answer(&mut self, now: Timestamp, link: &mut Link<'_>, h: HeldQuery, owner: Option<NodeId>) {
        if h.from == self.me {
            // Full (never: room for every held query of ours): the frames
            // wait for their pending timeout.
            self.push_local_release(h.query_id, owner);
            return;
        }
        let reply = Message::OwnerReply(OwnerReply { query_id: h.query_id, flow: h.flow, owner });
        self.send_ccl(now, link, h.from, &reply);
    }

    /// A record for `key` arrived (owner `owner`): answer the queries held
    /// for it.
    pub(super) fn answer_held(&mut self, now: Timestamp, link: &mut Link<'_>, key: &FiveTuple, owner: NodeId) {
        let mut i = 0;
        while i < self.held.len() {
            let Some(h) = self.held.get(i).copied() else { break };
            if h.key != *key {
                i += 1;
                continue;
            }
            self.held.swap_remove(i);
            self.counters.held_answered += 1;
            self.answer(now, link, h, Some(owner));
        }
    }

    /// Answer "none" to the held queries past their deadline.
    pub(super) fn expire_held(&mut self, now: Timestamp, link: &mut Link<'_>, timeouts: &Timeouts) {
        let mut i = 0;
        while i < self.held.len() {
            let Some(h) = self.held.get(i).copied() else { break };
            if h.deadline > now {
                i += 1;
                continue;
            }
            self.held.swap_remove(i);
            self.counters.held_timeouts += 1;
            self.unregistered(now, link, h, timeouts);
        }
    }
}

/// A held record's owner left (or is gone) and it carries the state: what
/// a takeover or a hand-off needs.
fn orphan_with_state(r: &super::Record, members: &crate::cluster::MemberSet, now: Timestamp) -> bool {
    (r.owner_left || !members.contains(r.owner)) && r.state.is_some() && live(r, now)
}

/// The flow record of a held record, naming `owner`, with its state (for a
/// grant's transfer and an orphan hand-off); `None` without state.
fn held_record(r: &super::Record, owner: NodeId) -> Option<FlowRecord> {
    let (state, flow) = (r.state?, FlowKey::new(r.orig).ok()?);
    let mut record = FlowRecord {
        flow,
        owner,
        op: FlowOp::Upsert,
        tcp_state: r.tcp_state,
        flags: 0,
        seq_delta: r.seq_delta,
        idle_timeout_s: r.idle.as_secs().min(u64::from(u32::MAX)) as u32,
        opaque: [0; OPAQUE_LEN],
    };
    record.set_state(&state.to_bytes());
    record.set_binding(r.binding);
    Some(record)
}
