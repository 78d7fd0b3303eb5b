//! The flow log: what a worker tells its node's exporters (syslog, IPFIX)
//! about the connections it owns — built, ended, denied — as compact
//! fixed-size records, never formatted here.
//!
//! A [`FlowLog`] is off until [`super::ConnTable::log_flows`] turns it on
//! (the node does when an exporter is configured); off, the table pays one
//! `Option` check per flow removal and nothing per packet. On, it keeps per
//! slot a [`FlowMeta`] (start time, interfaces, the rule that admitted the
//! flow, what `Active` records reported: in a vector of its own, so the
//! 128-byte slot stays two cache lines and established packets never
//! touch it) and two bounded queues of [`FlowRecord`]s,
//! reserved when turned on: one for built and ended connections, a smaller
//! one for denied ones, so a flood of denied attempts never crowds out the
//! records of real connections.
//!
//! Invariants:
//! - Nothing allocates after `log_flows`; a record that finds its queue
//!   full is counted (`FlowLogCounters::lost`, `denied_lost`), never
//!   queued by dropping an older one.
//! - A flow has an ended record iff it was marked **logged** (`log_built`,
//!   or `log_adopted` for a connection this node took over as owner) and it
//!   is removed, exactly once, whichever way it goes (expiry, a reopening
//!   SYN, `remove_flow`, `remove_marked`, `clear`). Flows only tracked here
//!   for another owner are never logged.
//! - Packet and byte counts of an ended record are the slot's own: what
//!   this node saw of the connection since it became its owner.
//! - With an active timeout, a logged flow alive that long since its
//!   start or its last `Active` record gets another `Active` record (found
//!   by `ConnTable::expire`'s walk, so within one walk of the table after
//!   it is due); each record says what earlier ones reported
//!   (`reported_*`), so deltas add up to the ended record's totals.
//! - Address translation (`FlowRecord::nat`) is the NAT stage's to fill
//!   in, from the slot's **mark** each record carries (a `Built` record
//!   takes its flow's mark when the flow is marked right after, as the
//!   NAT stage does for a connection's first packet, so a pass made in
//!   between holds that record back): it annotates every record queued
//!   since its last pass ([`super::ConnTable::annotate_flow_log`]) before
//!   it lets go of the xlates of ended flows, so the mark still names the
//!   xlate the connection used.

use super::tcp::TcpState;
use crate::route::IfIndex;
use crate::types::{FiveTuple, Timestamp};
use std::net::Ipv4Addr;

/// Records of built and ended connections a worker's log holds between
/// two drains.
pub const FLOW_RECORDS: usize = 4096;
/// Records of denied connections it holds between two drains.
pub const DENY_RECORDS: usize = 256;

/// An interface the log does not know (a connection taken over).
pub const UNKNOWN_IF: IfIndex = IfIndex(u16::MAX);

/// The rule that decided a new connection: its index in the running
/// policy's rule list, or the security-level default.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RuleRef {
    Rule(u32),
    SecurityLevel,
}

/// Why a connection's flow ended on this node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum EndReason {
    /// Idle beyond its state's timeout.
    Idle,
    /// Closed by FINs (TCP: both sides sent FIN, or the flow expired in a
    /// closing state).
    Fin,
    /// Closed by a TCP reset.
    Reset,
    /// Another node owns the connection now (handed over at a member-set
    /// change); the connection goes on there.
    HandedOver,
    /// This node dropped every flow (it left the cluster, or a reset).
    Cleared,
    /// Embryonic, evicted for a new connection in a full table.
    Evicted,
}

impl EndReason {
    /// The syslog spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            EndReason::Idle => "idle-timeout",
            EndReason::Fin => "tcp-fins",
            EndReason::Reset => "tcp-reset",
            EndReason::HandedOver => "handed-over",
            EndReason::Cleared => "cleared",
            EndReason::Evicted => "evicted-embryonic",
        }
    }

    /// IPFIX `flowEndReason` (IE 136, RFC 5102 §5.11.3): 0x01 idle
    /// timeout, 0x03 end of flow detected, 0x04 forced end, 0x05 lack of
    /// resources.
    pub const fn ipfix(self) -> u8 {
        match self {
            EndReason::Idle => 0x01,
            EndReason::Fin | EndReason::Reset => 0x03,
            EndReason::HandedOver | EndReason::Cleared => 0x04,
            EndReason::Evicted => 0x05,
        }
    }
}

/// What a record says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FlowEvent {
    /// A new connection this node owns.
    Built,
    /// A connection alive for another active timeout (`log_flows`'s
    /// `active_timeout`): its counts so far, for flow export (RFC 5102
    /// flowEndReason 2).
    Active,
    /// A connection this node owned ended here.
    Ended(EndReason),
    /// A new connection refused by the policy (no flow was made).
    Denied,
}

/// A translated connection as the other side of the firewall sees it
/// (IPv4 only: NAT is IPv4's): the record's tuple with every translated
/// endpoint replaced by its mapped one — the initiator's source for
/// outbound NAT, the responder's destination for a connection to a static
/// rule's mapped address. Ports are the tuple's where not translated (an
/// echo identifier sits where the tuple has it).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowNat {
    pub src: Ipv4Addr,
    pub src_port: u16,
    pub dst: Ipv4Addr,
    pub dst_port: u16,
}

/// One record for the exporters. `Copy`, fixed size: it crosses to the
/// control lcore as it is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FlowRecord {
    pub event: FlowEvent,
    /// In the original direction (the initiator is `src`).
    pub tuple: FiveTuple,
    /// The first packet (for an adopted connection: the take-over).
    pub start: Timestamp,
    /// The last packet seen (`Built`, `Denied`: the first).
    pub last: Timestamp,
    /// `[original, reply]`, this node's counts.
    pub packets: [u64; 2],
    pub bytes: [u64; 2],
    /// Of those, what earlier `Active` records of the connection already
    /// reported (0 without any): an exporter of deltas sends the rest.
    pub reported_packets: [u64; 2],
    pub reported_bytes: [u64; 2],
    /// TCP flags the connection's state implies (SYN; ACK once answered;
    /// FIN, RST as the state machine saw them; 0 for other protocols): the
    /// log keeps no per-packet flag union, which would cost a store on
    /// every packet.
    pub tcp_flags: u8,
    pub ingress: IfIndex,
    pub egress: IfIndex,
    pub rule: RuleRef,
    /// The connection was taken over from another owner (its `start` is
    /// the take-over).
    pub adopted: bool,
    /// The flow's conntrack mark when the record was made (0: none).
    pub mark: u32,
    /// Its address translation, if it had one (module essay).
    pub nat: Option<FlowNat>,
}

/// Per slot: what the record needs beyond the slot.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) struct FlowMeta {
    pub start: Timestamp,
    pub ingress: IfIndex,
    pub egress: IfIndex,
    pub rule: RuleRef,
    pub logged: bool,
    pub adopted: bool,
    /// The last `Active` record (or the start), and the counts it carried.
    pub active_at: Timestamp,
    pub reported_packets: [u64; 2],
    pub reported_bytes: [u64; 2],
}

impl FlowMeta {
    pub fn new(start: Timestamp, ingress: IfIndex, egress: IfIndex, rule: RuleRef, adopted: bool) -> FlowMeta {
        FlowMeta { start, ingress, egress, rule, logged: true, adopted, active_at: start, ..NO_META }
    }
}

const NO_META: FlowMeta = FlowMeta {
    start: Timestamp::ZERO,
    ingress: IfIndex(0),
    egress: IfIndex(0),
    rule: RuleRef::SecurityLevel,
    logged: false,
    adopted: false,
    active_at: Timestamp::ZERO,
    reported_packets: [0; 2],
    reported_bytes: [0; 2],
};

/// The log's counters.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct FlowLogCounters {
    /// Records queued (built, ended) and denied records queued.
    pub records: u64,
    pub denied: u64,
    /// Records that found their queue full.
    pub lost: u64,
    pub denied_lost: u64,
}

crate::impl_stats!(FlowLogCounters { counter records, counter denied, counter lost, counter denied_lost });

/// See the module documentation.
pub(super) struct FlowLog {
    meta: Vec<FlowMeta>,
    /// `Active` records every this long of a connection's life (`None`:
    /// only built and ended).
    pub active_timeout: Option<crate::types::Duration>,
    records: Vec<FlowRecord>,
    denied: Vec<FlowRecord>,
    /// `records[..annotated]` went through `annotate`.
    annotated: usize,
    /// The newest record is slot `.0`'s `Built` (`marked`).
    built: Option<u32>,
    pub counters: FlowLogCounters,
}

/// TCP flags a state implies (`FlowRecord::tcp_flags`).
pub(super) fn implied_flags(state: Option<TcpState>) -> u8 {
    use crate::conntrack::tcp_flags::{ACK, FIN, RST, SYN};
    match state {
        None => 0,
        Some(TcpState::SynSent) => SYN,
        Some(TcpState::SynReceived | TcpState::Established) => SYN | ACK,
        Some(TcpState::FinWait | TcpState::Closing | TcpState::TimeWait) => SYN | ACK | FIN,
        Some(TcpState::Closed) => SYN | ACK | RST,
    }
}

/// Push within the reserved room; `false`: full.
fn push(q: &mut Vec<FlowRecord>, r: FlowRecord) -> bool {
    if q.len() < q.capacity() {
        q.push(r);
        true
    } else {
        false
    }
}

impl FlowLog {
    pub fn new(slots: usize, active_timeout: Option<crate::types::Duration>) -> FlowLog {
        FlowLog {
            meta: vec![NO_META; slots],
            active_timeout,
            records: Vec::with_capacity(FLOW_RECORDS),
            denied: Vec::with_capacity(DENY_RECORDS),
            annotated: 0,
            built: None,
            counters: FlowLogCounters::default(),
        }
    }

    pub fn queue(&mut self, r: FlowRecord) {
        self.built = None;
        if push(&mut self.records, r) {
            self.counters.records += 1;
        } else {
            self.counters.lost += 1;
        }
    }

    /// Slot `i` holds a new flow this node owns: remember it, queue
    /// `Built`.
    pub fn built(&mut self, i: u32, meta: FlowMeta, record: FlowRecord) {
        if let Some(m) = self.meta.get_mut(i as usize) {
            *m = meta;
            let n = self.records.len();
            self.queue(record);
            if self.records.len() > n {
                self.built = Some(i);
            }
        }
    }

    /// Slot `i` was marked `mark`: its `Built` record, if it is the newest,
    /// takes the mark (a flow is marked right after it is built).
    pub fn marked(&mut self, i: u32, mark: u32) {
        if self.built == Some(i) {
            if let Some(r) = self.records.last_mut() {
                r.mark = mark;
            }
        }
    }

    /// Records queued since the last pass not annotated yet.
    pub fn unannotated(&self) -> bool {
        self.annotated < self.records.len()
    }

    /// Fill in `nat` of every record queued since the last pass; with
    /// `hold_built`, not of the newest record if it is a `Built` one (its
    /// flow may be marked still: the next pass takes it).
    pub fn annotate(&mut self, hold_built: bool, mut f: impl FnMut(&FlowRecord) -> Option<FlowNat>) {
        let end = self.records.len() - usize::from(hold_built && self.built.is_some());
        for r in self.records.get_mut(self.annotated..end).unwrap_or_default() {
            r.nat = f(r);
        }
        self.annotated = self.annotated.max(end);
        if !hold_built {
            self.built = None;
        }
    }

    /// Slot `i` holds a connection taken over as owner: remember it, no
    /// record (its builder logged it).
    pub fn adopted(&mut self, i: u32, meta: FlowMeta) {
        if let Some(m) = self.meta.get_mut(i as usize) {
            *m = meta;
        }
    }

    pub fn denied(&mut self, record: FlowRecord) {
        if push(&mut self.denied, record) {
            self.counters.denied += 1;
        } else {
            self.counters.denied_lost += 1;
        }
    }

    /// Slot `i`'s meta if it is logged and due for an `Active` record at
    /// `now` (its `active_at` moved to `now`).
    pub fn active_due(&mut self, i: u32, now: Timestamp) -> Option<&mut FlowMeta> {
        let t = self.active_timeout?;
        let m = self.meta.get_mut(i as usize).filter(|m| m.logged)?;
        (now.since(m.active_at) >= t).then(move || {
            m.active_at = now;
            m
        })
    }

    /// Slot `i` is going: its meta if it was logged (the caller queues
    /// its `Ended` record), forgotten either way.
    pub fn take_logged(&mut self, i: u32) -> Option<FlowMeta> {
        let m = self.meta.get_mut(i as usize)?;
        let meta = std::mem::replace(m, NO_META);
        meta.logged.then_some(meta)
    }

    /// Every record queued since the last drain, built and ended first,
    /// then denied ones, oldest first. Never allocates.
    pub fn drain(&mut self, mut f: impl FnMut(&FlowRecord)) {
        self.annotated = 0;
        self.built = None;
        for r in self.records.drain(..).chain(self.denied.drain(..)) {
            f(&r);
        }
    }

    pub fn pending(&self) -> usize {
        self.records.len() + self.denied.len()
    }
}
