//! IPFIX export of the node's flow records (RFC 7011 protocol, RFC 7012
//! information elements), sans-IO: [`FlowRecord`]s go in
//! ([`IpfixEncoder::push`]), complete IPFIX messages come out as bytes
//! ([`IpfixEncoder::flush`]); the caller owns the UDP socket and the
//! clock.
//!
//! **Two uniflow records per connection.** A connection ends as one
//! [`FlowRecord`] with counts for both directions; it is exported as one
//! record for the original direction (`src → dst`, `packets[0]`,
//! `bytes[0]`) and one for the reply direction (`dst → src`, ports and
//! interfaces swapped, `packets[1]`, `bytes[1]`). nfdump and most
//! collectors read uniflows; RFC 5103 biflows need the reverse
//! information elements (enterprise 29305), which many collectors drop or
//! store without the reverse counts. Both records carry the connection's
//! start, last packet, TCP flags and end reason (the log keeps them per
//! connection, not per direction).
//!
//! What is exported:
//! - only [`FlowEvent::Ended`] and [`FlowEvent::Active`] records (the
//!   latter for connections alive another active timeout, flowEndReason
//!   2; each record carries the packets and bytes since the connection's
//!   previous record, `reported_*`); built and denied connections are
//!   the syslog exporter's business; `flowEndReason` is
//!   [`dataplane::conntrack::EndReason::ipfix`] or 2;
//! - a direction that saw no packet is not exported;
//! - interfaces as `IfIndex + 1`: `ingressInterface`/`egressInterface`
//!   carry an ifIndex, which starts at 1 (RFC 2863), so 0 says unknown;
//!   [`UNKNOWN_IF`] is exported as 0. The reply record swaps them;
//! - times as Unix milliseconds: `(timestamp + unix_ns_at_zero) / 10^6`,
//!   where the caller's `unix_ns_at_zero` is the wall-clock time of the
//!   node's `Timestamp(0)`.
//!
//! **Translated connections (RFC 8158's NAT fields).** A connection the
//! NAT stage translated (`FlowRecord::nat`, the tuple as the other side
//! saw it) is exported with template [`V4_NAT_TEMPLATE`] (258): the IPv4
//! fields and `postNATSourceIPv4Address`, `postNATDestinationIPv4Address`,
//! `postNAPTSourceTransportPort`, `postNAPTDestinationTransportPort`
//! (225–228). Each uniflow reads as its packets crossed the firewall:
//! source and destination as they arrived, the post-NAT fields as they
//! left — so the sender's address is its real one before and its mapped
//! one after, the receiver's its mapped one before and its real one after.
//! Outbound PAT's original direction is `real → server` becoming
//! `mapped → server`; its reply `server → mapped` becoming `server →
//! real`. Untranslated connections keep template 256.
//!
//! Templates ([`V4_TEMPLATE`] 256, [`V6_TEMPLATE`] 257, [`V4_NAT_TEMPLATE`]
//! 258; field lists in [`V4_FIELDS`], [`V6_FIELDS`], [`V4_NAT_FIELDS`])
//! travel in one template set at the head
//! of the first message of a flush, on the first flush and again once
//! `template_refresh_secs` have passed since they were last sent
//! (RFC 7011 §8.4, UDP transport) — with or without data records, so a
//! collector that restarts while the node is idle learns them again.
//!
//! Invariants (tests below, and a real nfcapd/nfdump in
//! `tests/ipfix_nfcapd.rs`):
//! - Every message is at most `max_message` bytes (clamped to
//!   [`MIN_MESSAGE`]..=[`MAX_MESSAGE`], so a message always has room for
//!   the templates and one record) and its header length is its length.
//! - A message's sequence number is the number of data records sent
//!   before it in this observation domain, modulo 2^32 (RFC 7011 §3.1).
//! - Bounded: at most [`PENDING_RECORDS`] data records wait between two
//!   flushes, reserved at construction; a connection whose records do not
//!   fit is counted `dropped` (both of its directions), never queued by
//!   dropping an older one. Records are sent in the order pushed.
//! - No input panics: a tuple whose addresses are of two families is
//!   counted `invalid`; times saturate instead of overflowing.

use dataplane::conntrack::flowlog::{FLOW_RECORDS, UNKNOWN_IF};
use dataplane::conntrack::{FlowEvent, FlowRecord};
use dataplane::route::IfIndex;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IPFIX version number (RFC 7011 §3.1).
pub const VERSION: u16 = 10;
/// Message header: version, length, export time, sequence number,
/// observation domain (RFC 7011 §3.1).
pub const HEADER_LEN: usize = 16;
/// Set header: set id, length (RFC 7011 §3.3.2).
pub const SET_HEADER_LEN: usize = 4;
/// Set id of a template set (RFC 7011 §3.3.2).
pub const TEMPLATE_SET_ID: u16 = 2;
/// Template ids of the two record shapes (≥ 256, RFC 7011 §3.4.1).
pub const V4_TEMPLATE: u16 = 256;
pub const V6_TEMPLATE: u16 = 257;
pub const V4_NAT_TEMPLATE: u16 = 258;
/// A message's length field is 16 bits (RFC 7011 §3.1).
pub const MAX_MESSAGE: usize = u16::MAX as usize;
/// Data records that wait between two flushes: one full drain of a
/// worker's flow log, two directions per connection.
pub const PENDING_RECORDS: usize = 2 * FLOW_RECORDS;

/// Information element ids (RFC 7012 §5, IANA "IPFIX Information
/// Elements").
pub mod ie {
    pub const OCTET_DELTA_COUNT: u16 = 1;
    pub const PACKET_DELTA_COUNT: u16 = 2;
    pub const PROTOCOL_IDENTIFIER: u16 = 4;
    pub const TCP_CONTROL_BITS: u16 = 6;
    pub const SOURCE_TRANSPORT_PORT: u16 = 7;
    pub const SOURCE_IPV4_ADDRESS: u16 = 8;
    pub const INGRESS_INTERFACE: u16 = 10;
    pub const DESTINATION_TRANSPORT_PORT: u16 = 11;
    pub const DESTINATION_IPV4_ADDRESS: u16 = 12;
    pub const EGRESS_INTERFACE: u16 = 14;
    pub const SOURCE_IPV6_ADDRESS: u16 = 27;
    pub const DESTINATION_IPV6_ADDRESS: u16 = 28;
    pub const FLOW_END_REASON: u16 = 136;
    pub const POST_NAT_SOURCE_IPV4_ADDRESS: u16 = 225;
    pub const POST_NAT_DESTINATION_IPV4_ADDRESS: u16 = 226;
    pub const POST_NAPT_SOURCE_TRANSPORT_PORT: u16 = 227;
    pub const POST_NAPT_DESTINATION_TRANSPORT_PORT: u16 = 228;
    pub const FLOW_START_MILLISECONDS: u16 = 152;
    pub const FLOW_END_MILLISECONDS: u16 = 153;
    pub const DROPPED_PACKET_DELTA_COUNT: u16 = 133;
    pub const NAT_EVENT: u16 = 230;
    pub const OBSERVATION_TIME_MILLISECONDS: u16 = 323;
    pub const NAT_QUOTA_EXCEEDED_EVENT: u16 = 466;
    pub const MAX_SESSION_ENTRIES: u16 = 471;
    pub const MAX_ENTRIES_PER_USER: u16 = 473;
}

/// Template of the connection-limit events (`IpfixEncoder::limit_message`).
pub const LIMIT_TEMPLATE: u16 = 259;

/// A limit event's fields (RFC 8158 §4.4's quota-exceeded event):
/// `observationTimeMilliseconds`, `natEvent` (13, quota exceeded),
/// `natQuotaExceededEvent` (1: maximum session entries — `max-conns`,
/// `max-embryonic`; 3: maximum entries per user — the per-client limits),
/// `maxSessionEntries` or `maxEntriesPerUser` (the limit; the other 0),
/// `droppedPacketDeltaCount` (the new connections the limit refused since
/// the last event: each one's packet was dropped).
pub const LIMIT_FIELDS: [FieldSpec; 6] = [
    f(ie::OBSERVATION_TIME_MILLISECONDS, 8),
    f(ie::NAT_EVENT, 1),
    f(ie::NAT_QUOTA_EXCEEDED_EVENT, 4),
    f(ie::MAX_SESSION_ENTRIES, 4),
    f(ie::MAX_ENTRIES_PER_USER, 4),
    f(ie::DROPPED_PACKET_DELTA_COUNT, 8),
];
/// Bytes of one limit event record.
pub const LIMIT_RECORD_LEN: usize = record_len(&LIMIT_FIELDS);

/// One limit's refusals since the last event, as exported.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LimitEvent {
    /// Unix milliseconds.
    pub time_ms: u64,
    /// A per-client limit (`per-client-max`, `per-client-embryonic-max`).
    pub per_client: bool,
    /// The limit's value.
    pub limit: u32,
    /// New connections refused since the last event.
    pub refused: u64,
}

impl LimitEvent {
    fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.time_ms.to_be_bytes());
        // natEvent 13: quota exceeded (RFC 8158 §4.4, IANA "NAT Event Type").
        out.push(13);
        let (quota, per_session, per_user) = if self.per_client { (3u32, 0, self.limit) } else { (1u32, self.limit, 0) };
        out.extend_from_slice(&quota.to_be_bytes());
        out.extend_from_slice(&per_session.to_be_bytes());
        out.extend_from_slice(&per_user.to_be_bytes());
        out.extend_from_slice(&self.refused.to_be_bytes());
    }
}

/// One field of a template: information element id and length in octets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct FieldSpec {
    pub ie: u16,
    pub len: u16,
}

const fn f(ie: u16, len: u16) -> FieldSpec {
    FieldSpec { ie, len }
}

/// The fields after the addresses, the same in both templates.
/// `tcpControlBits` is 2 octets (RFC 7125); the interfaces 4, the counters
/// and times 8.
const COMMON_FIELDS: [FieldSpec; 11] = [
    f(ie::SOURCE_TRANSPORT_PORT, 2),
    f(ie::DESTINATION_TRANSPORT_PORT, 2),
    f(ie::PROTOCOL_IDENTIFIER, 1),
    f(ie::TCP_CONTROL_BITS, 2),
    f(ie::INGRESS_INTERFACE, 4),
    f(ie::EGRESS_INTERFACE, 4),
    f(ie::PACKET_DELTA_COUNT, 8),
    f(ie::OCTET_DELTA_COUNT, 8),
    f(ie::FLOW_START_MILLISECONDS, 8),
    f(ie::FLOW_END_MILLISECONDS, 8),
    f(ie::FLOW_END_REASON, 1),
];

/// Source and destination address, then `COMMON_FIELDS`.
const fn template(src: FieldSpec, dst: FieldSpec) -> [FieldSpec; 13] {
    let mut out = [src; 13];
    out[1] = dst;
    let mut i = 0;
    while i < COMMON_FIELDS.len() {
        out[i + 2] = COMMON_FIELDS[i];
        i += 1;
    }
    out
}

/// The IPv4 template's fields, in record order.
pub const V4_FIELDS: [FieldSpec; 13] = template(f(ie::SOURCE_IPV4_ADDRESS, 4), f(ie::DESTINATION_IPV4_ADDRESS, 4));

/// The IPv6 template: the IPv4 one with IPv6 addresses.
pub const V6_FIELDS: [FieldSpec; 13] = template(f(ie::SOURCE_IPV6_ADDRESS, 16), f(ie::DESTINATION_IPV6_ADDRESS, 16));

/// The translated IPv4 template: the IPv4 one, then the post-NAT fields.
pub const V4_NAT_FIELDS: [FieldSpec; 17] = {
    let mut out = [V4_FIELDS[0]; 17];
    let mut i = 0;
    while i < V4_FIELDS.len() {
        out[i] = V4_FIELDS[i];
        i += 1;
    }
    out[13] = f(ie::POST_NAT_SOURCE_IPV4_ADDRESS, 4);
    out[14] = f(ie::POST_NAT_DESTINATION_IPV4_ADDRESS, 4);
    out[15] = f(ie::POST_NAPT_SOURCE_TRANSPORT_PORT, 2);
    out[16] = f(ie::POST_NAPT_DESTINATION_TRANSPORT_PORT, 2);
    out
};

const fn record_len(fields: &[FieldSpec]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < fields.len() {
        n += fields[i].len as usize;
        i += 1;
    }
    n
}

/// Bytes of one data record of each template.
pub const V4_RECORD_LEN: usize = record_len(&V4_FIELDS);
pub const V6_RECORD_LEN: usize = record_len(&V6_FIELDS);
pub const V4_NAT_RECORD_LEN: usize = record_len(&V4_NAT_FIELDS);
/// The templates in the order they are sent.
const TEMPLATES: [(u16, &[FieldSpec]); 3] = [(V4_TEMPLATE, &V4_FIELDS), (V6_TEMPLATE, &V6_FIELDS), (V4_NAT_TEMPLATE, &V4_NAT_FIELDS)];
/// The template set: its header, then per template its id, field count
/// and 4 bytes per field (RFC 7011 §3.4.1).
pub const TEMPLATE_SET_LEN: usize =
    SET_HEADER_LEN + 4 + 4 * V4_FIELDS.len() + 4 + 4 * V6_FIELDS.len() + 4 + 4 * V4_NAT_FIELDS.len();
/// The smallest `max_message`: a header, the templates and one IPv6 data
/// record in its set.
pub const MIN_MESSAGE: usize = HEADER_LEN + TEMPLATE_SET_LEN + SET_HEADER_LEN + V6_RECORD_LEN;

/// The addresses of a data record, of one family by construction.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Addrs {
    V4 { src: Ipv4Addr, dst: Ipv4Addr },
    V6 { src: Ipv6Addr, dst: Ipv6Addr },
}

impl Addrs {
    /// `None`: two families.
    pub fn new(src: IpAddr, dst: IpAddr) -> Option<Addrs> {
        match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => Some(Addrs::V4 { src, dst }),
            (IpAddr::V6(src), IpAddr::V6(dst)) => Some(Addrs::V6 { src, dst }),
            _ => None,
        }
    }

    fn reversed(self) -> Addrs {
        match self {
            Addrs::V4 { src, dst } => Addrs::V4 { src: dst, dst: src },
            Addrs::V6 { src, dst } => Addrs::V6 { src: dst, dst: src },
        }
    }
}

/// The post-NAT fields of a translated IPv4 uniflow (RFC 8158).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PostNat {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
}

/// One uniflow data record, as exported (the values of the template's
/// fields).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IpfixRecord {
    pub addrs: Addrs,
    pub src_port: u16,
    pub dst_port: u16,
    pub proto: u8,
    pub tcp_flags: u16,
    /// `IfIndex + 1`; 0: unknown.
    pub ingress: u32,
    pub egress: u32,
    pub packets: u64,
    pub bytes: u64,
    /// Unix milliseconds.
    pub start_ms: u64,
    pub end_ms: u64,
    pub end_reason: u8,
    /// A translated IPv4 connection's uniflow: as it left the firewall.
    pub nat: Option<PostNat>,
}

/// Why a flow record yields no data record.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Built or denied: not an IPFIX flow.
    NotEnded,
    /// Source and destination of two families.
    MixedFamily,
}

/// The exported interface number of `i` (an ifIndex starts at 1, RFC
/// 2863; 0: unknown).
pub fn if_number(i: IfIndex) -> u32 {
    if i == UNKNOWN_IF {
        0
    } else {
        u32::from(i.0) + 1
    }
}

/// Unix milliseconds of a node timestamp (nanoseconds), saturating.
pub fn unix_ms(ts_ns: u64, unix_ns_at_zero: u64) -> u64 {
    ts_ns.saturating_add(unix_ns_at_zero) / 1_000_000
}

impl IpfixRecord {
    /// The data records of an ended connection: `[original, reply]`, a
    /// direction without packets `None`.
    pub fn uniflows(r: &FlowRecord, unix_ns_at_zero: u64) -> Result<[Option<IpfixRecord>; 2], Skip> {
        let end_reason = match r.event {
            FlowEvent::Ended(reason) => reason.ipfix(),
            // flowEndReason 2: active timeout (RFC 5102 §5.11.3).
            FlowEvent::Active => 0x02,
            FlowEvent::Built | FlowEvent::Denied => return Err(Skip::NotEnded),
        };
        let t = &r.tuple;
        let real = Addrs::new(t.src, t.dst).ok_or(Skip::MixedFamily)?;
        // Translated (module essay): each direction arrives with its
        // sender's real and its receiver's mapped endpoint and leaves with
        // the sender's mapped and the receiver's real one.
        // (The ports as the other side saw them: the receivers' before.)
        let (addrs, nat, reply_addrs, reply_nat, (mapped_sport, mapped_dport)) = match (real, r.nat) {
            (Addrs::V4 { src, dst }, Some(m)) => (
                Addrs::V4 { src, dst: m.dst },
                Some(PostNat { src: m.src, dst, src_port: m.src_port, dst_port: t.dst_port }),
                Addrs::V4 { src: dst, dst: m.src },
                Some(PostNat { src: m.dst, dst: src, src_port: m.dst_port, dst_port: t.src_port }),
                (m.src_port, m.dst_port),
            ),
            _ => (real, None, real.reversed(), None, (t.src_port, t.dst_port)),
        };
        let original = IpfixRecord {
            addrs,
            src_port: t.src_port,
            dst_port: mapped_dport,
            proto: r.tuple.proto,
            tcp_flags: u16::from(r.tcp_flags),
            ingress: if_number(r.ingress),
            egress: if_number(r.egress),
            packets: r.packets[0].saturating_sub(r.reported_packets[0]),
            bytes: r.bytes[0].saturating_sub(r.reported_bytes[0]),
            start_ms: unix_ms(r.start.0, unix_ns_at_zero),
            end_ms: unix_ms(r.last.0, unix_ns_at_zero),
            end_reason,
            nat,
        };
        let reply = IpfixRecord {
            addrs: reply_addrs,
            src_port: t.dst_port,
            dst_port: mapped_sport,
            nat: reply_nat,
            ingress: original.egress,
            egress: original.ingress,
            packets: r.packets[1].saturating_sub(r.reported_packets[1]),
            bytes: r.bytes[1].saturating_sub(r.reported_bytes[1]),
            ..original
        };
        Ok([original, reply].map(|u| (u.packets > 0).then_some(u)))
    }

    /// The template that carries this record.
    pub const fn template(&self) -> u16 {
        match (self.addrs, self.nat) {
            (Addrs::V4 { .. }, None) => V4_TEMPLATE,
            (Addrs::V4 { .. }, Some(_)) => V4_NAT_TEMPLATE,
            (Addrs::V6 { .. }, _) => V6_TEMPLATE,
        }
    }

    /// Bytes of this record in its data set.
    pub const fn wire_len(&self) -> usize {
        match self.template() {
            V4_TEMPLATE => V4_RECORD_LEN,
            V4_NAT_TEMPLATE => V4_NAT_RECORD_LEN,
            _ => V6_RECORD_LEN,
        }
    }

    /// Appends the record in its template's field order ([`V4_FIELDS`],
    /// [`V6_FIELDS`]).
    pub fn emit(&self, out: &mut Vec<u8>) {
        match self.addrs {
            Addrs::V4 { src, dst } => {
                out.extend_from_slice(&src.octets());
                out.extend_from_slice(&dst.octets());
            }
            Addrs::V6 { src, dst } => {
                out.extend_from_slice(&src.octets());
                out.extend_from_slice(&dst.octets());
            }
        }
        out.extend_from_slice(&self.src_port.to_be_bytes());
        out.extend_from_slice(&self.dst_port.to_be_bytes());
        out.push(self.proto);
        out.extend_from_slice(&self.tcp_flags.to_be_bytes());
        out.extend_from_slice(&self.ingress.to_be_bytes());
        out.extend_from_slice(&self.egress.to_be_bytes());
        out.extend_from_slice(&self.packets.to_be_bytes());
        out.extend_from_slice(&self.bytes.to_be_bytes());
        out.extend_from_slice(&self.start_ms.to_be_bytes());
        out.extend_from_slice(&self.end_ms.to_be_bytes());
        out.push(self.end_reason);
        if let (Addrs::V4 { .. }, Some(n)) = (self.addrs, self.nat) {
            out.extend_from_slice(&n.src.octets());
            out.extend_from_slice(&n.dst.octets());
            out.extend_from_slice(&n.src_port.to_be_bytes());
            out.extend_from_slice(&n.dst_port.to_be_bytes());
        }
    }
}

/// The encoder's counters.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct IpfixCounters {
    /// Data records sent (two per connection with traffic both ways).
    pub records: u64,
    /// Messages made.
    pub messages: u64,
    /// Times the template set was sent.
    pub templates_sent: u64,
    /// Data records that found the pending queue full.
    pub dropped: u64,
    /// Ended flow records that could not be exported (mixed families).
    pub invalid: u64,
}

dataplane::impl_stats!(IpfixCounters {
    counter records,
    counter messages,
    counter templates_sent,
    counter dropped,
    counter invalid,
});

/// See the module documentation.
pub struct IpfixEncoder {
    domain: u32,
    refresh_secs: u32,
    max_message: usize,
    pending: Vec<IpfixRecord>,
    /// Data records sent so far (the next message's sequence number).
    sequence: u32,
    /// Export time of the last template set; `None`: never sent.
    templates_at: Option<u32>,
    pub counters: IpfixCounters,
}

impl IpfixEncoder {
    /// An encoder for one observation domain. `max_message` is clamped to
    /// [`MIN_MESSAGE`]..=[`MAX_MESSAGE`]. Over UDP a message should fit
    /// the path MTU (RFC 7011 §10.3.3): 1400 leaves room for the IP and
    /// UDP headers on Ethernet.
    pub fn new(observation_domain: u32, template_refresh_secs: u32, max_message: usize) -> IpfixEncoder {
        IpfixEncoder {
            domain: observation_domain,
            refresh_secs: template_refresh_secs,
            max_message: max_message.clamp(MIN_MESSAGE, MAX_MESSAGE),
            pending: Vec::with_capacity(PENDING_RECORDS),
            sequence: 0,
            templates_at: None,
            counters: IpfixCounters::default(),
        }
    }

    /// The largest message this encoder makes.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// Data records waiting for the next flush.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Queues the data records of `r` if it is an ended connection (see
    /// the module documentation). `unix_ns_at_zero`: the Unix time in
    /// nanoseconds of the node's `Timestamp(0)`. Never allocates.
    pub fn push(&mut self, r: &FlowRecord, unix_ns_at_zero: u64) {
        let flows = match IpfixRecord::uniflows(r, unix_ns_at_zero) {
            Ok(flows) => flows,
            Err(Skip::NotEnded) => return,
            Err(Skip::MixedFamily) => {
                self.counters.invalid += 1;
                return;
            }
        };
        let n = flows.iter().flatten().count();
        if self.pending.len() + n > self.pending.capacity() {
            self.counters.dropped += n as u64;
            return;
        }
        self.pending.extend(flows.into_iter().flatten());
    }

    fn templates_due(&self, now_unix_secs: u32) -> bool {
        // A clock that went back wraps to a large age: resend.
        self.templates_at.is_none_or(|t| now_unix_secs.wrapping_sub(t) >= self.refresh_secs)
    }

    /// Appends to `out` the messages carrying every pending record, the
    /// first one led by the template set when it is due; nothing when
    /// there is neither. `now_unix_secs` is the messages' export time.
    pub fn flush(&mut self, now_unix_secs: u32, out: &mut Vec<Vec<u8>>) {
        let mut templates = self.templates_due(now_unix_secs);
        let mut next = 0;
        while templates || next < self.pending.len() {
            let mut msg = Vec::with_capacity(self.max_message);
            msg.resize(HEADER_LEN, 0);
            if templates {
                emit_templates(&mut msg);
                self.templates_at = Some(now_unix_secs);
                self.counters.templates_sent += 1;
                templates = false;
            }
            let first = next;
            // (start of the open data set, its template)
            let mut set: Option<(usize, u16)> = None;
            for r in &self.pending[next..] {
                let id = r.template();
                let opens = set.is_none_or(|(_, open)| open != id);
                let need = r.wire_len() + if opens { SET_HEADER_LEN } else { 0 };
                if msg.len() + need > self.max_message {
                    break;
                }
                if opens {
                    if let Some((start, _)) = set {
                        close_set(&mut msg, start);
                    }
                    set = Some((msg.len(), id));
                    msg.extend_from_slice(&id.to_be_bytes());
                    msg.extend_from_slice(&[0, 0]);
                }
                r.emit(&mut msg);
                next += 1;
            }
            if let Some((start, _)) = set {
                close_set(&mut msg, start);
            }
            let sent = (next - first) as u32;
            if sent == 0 && msg.len() == HEADER_LEN {
                // Unreachable with `max_message >= MIN_MESSAGE`; never loop.
                self.counters.dropped += (self.pending.len() - next) as u64;
                break;
            }
            let len = msg.len() as u16; // ≤ max_message ≤ MAX_MESSAGE
            msg[0..2].copy_from_slice(&VERSION.to_be_bytes());
            msg[2..4].copy_from_slice(&len.to_be_bytes());
            msg[4..8].copy_from_slice(&now_unix_secs.to_be_bytes());
            msg[8..12].copy_from_slice(&self.sequence.to_be_bytes());
            msg[12..16].copy_from_slice(&self.domain.to_be_bytes());
            self.sequence = self.sequence.wrapping_add(sent);
            self.counters.records += u64::from(sent);
            self.counters.messages += 1;
            out.push(msg);
        }
        self.pending.clear();
    }
}

impl IpfixEncoder {
    /// A message of connection-limit events (`LIMIT_TEMPLATE`, led by its
    /// own template: events are rare, at most one per limit a second, and
    /// the flow templates' refresh does not wait for them). The sequence
    /// number counts them with the flow records. Events beyond one
    /// message's room are dropped and counted; `None` for no event.
    pub fn limit_message(&mut self, now_unix_secs: u32, events: &[LimitEvent]) -> Option<Vec<u8>> {
        if events.is_empty() {
            return None;
        }
        let head = HEADER_LEN + SET_HEADER_LEN + 4 + 4 * LIMIT_FIELDS.len() + SET_HEADER_LEN;
        let room = (self.max_message - head) / LIMIT_RECORD_LEN;
        let sent = events.len().min(room);
        self.counters.dropped += (events.len() - sent) as u64;
        let mut msg = Vec::with_capacity(head + sent * LIMIT_RECORD_LEN);
        msg.resize(HEADER_LEN, 0);
        msg.extend_from_slice(&TEMPLATE_SET_ID.to_be_bytes());
        msg.extend_from_slice(&((SET_HEADER_LEN + 4 + 4 * LIMIT_FIELDS.len()) as u16).to_be_bytes());
        msg.extend_from_slice(&LIMIT_TEMPLATE.to_be_bytes());
        msg.extend_from_slice(&(LIMIT_FIELDS.len() as u16).to_be_bytes());
        for spec in LIMIT_FIELDS {
            msg.extend_from_slice(&spec.ie.to_be_bytes());
            msg.extend_from_slice(&spec.len.to_be_bytes());
        }
        let start = msg.len();
        msg.extend_from_slice(&LIMIT_TEMPLATE.to_be_bytes());
        msg.extend_from_slice(&[0, 0]);
        for e in events.iter().take(sent) {
            e.emit(&mut msg);
        }
        close_set(&mut msg, start);
        let len = msg.len() as u16; // ≤ max_message ≤ MAX_MESSAGE
        msg[0..2].copy_from_slice(&VERSION.to_be_bytes());
        msg[2..4].copy_from_slice(&len.to_be_bytes());
        msg[4..8].copy_from_slice(&now_unix_secs.to_be_bytes());
        msg[8..12].copy_from_slice(&self.sequence.to_be_bytes());
        msg[12..16].copy_from_slice(&self.domain.to_be_bytes());
        self.sequence = self.sequence.wrapping_add(sent as u32);
        self.counters.records += sent as u64;
        self.counters.messages += 1;
        Some(msg)
    }
}

/// Writes the length of the set that starts at `start` and runs to the end
/// of `msg`.
fn close_set(msg: &mut [u8], start: usize) {
    let len = (msg.len() - start) as u16;
    msg[start + 2..start + 4].copy_from_slice(&len.to_be_bytes());
}

fn emit_templates(msg: &mut Vec<u8>) {
    msg.extend_from_slice(&TEMPLATE_SET_ID.to_be_bytes());
    msg.extend_from_slice(&(TEMPLATE_SET_LEN as u16).to_be_bytes());
    for (id, fields) in TEMPLATES {
        msg.extend_from_slice(&id.to_be_bytes());
        msg.extend_from_slice(&(fields.len() as u16).to_be_bytes());
        for spec in fields {
            msg.extend_from_slice(&spec.ie.to_be_bytes());
            msg.extend_from_slice(&spec.len.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::conntrack::flowlog::RuleRef;
    use dataplane::conntrack::{tcp_flags, EndReason, FlowNat};
    use dataplane::{FiveTuple, Timestamp};
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// 2023-11-14T22:13:20Z, the node's `Timestamp(0)` in the tests.
    const AT_ZERO: u64 = 1_700_000_000 * 1_000_000_000;

    fn ended(src: &str, dst: &str, proto: u8, ports: (u16, u16), packets: [u64; 2], bytes: [u64; 2]) -> FlowRecord {
        FlowRecord {
            event: FlowEvent::Ended(EndReason::Fin),
            tuple: FiveTuple { src: src.parse().unwrap(), dst: dst.parse().unwrap(), proto, src_port: ports.0, dst_port: ports.1 },
            start: Timestamp::from_secs(1),
            last: Timestamp::from_secs(3),
            packets,
            bytes,
            reported_packets: [0; 2],
            reported_bytes: [0; 2],
            tcp_flags: if proto == 6 { tcp_flags::SYN | tcp_flags::ACK | tcp_flags::FIN } else { 0 },
            ingress: IfIndex(0),
            egress: IfIndex(1),
            rule: RuleRef::Rule(0),
            adopted: false,
            mark: 0,
            nat: None,
        }
    }

    fn tcp(packets: [u64; 2], bytes: [u64; 2]) -> FlowRecord {
        ended("198.18.10.2", "198.18.20.2", 6, (40000, 80), packets, bytes)
    }

    // ---- a small collector: any message the encoder makes, back into records ----

    #[derive(Debug, Default)]
    struct Message {
        export_time: u32,
        sequence: u32,
        domain: u32,
        /// Template sets seen in this message.
        template_sets: usize,
        /// Data sets by template id, in order.
        data_sets: Vec<u16>,
        records: Vec<IpfixRecord>,
    }

    /// Keeps the templates it has seen, like a collector (per domain; the
    /// tests use one).
    #[derive(Default)]
    struct Collector {
        templates: HashMap<u16, Vec<FieldSpec>>,
    }

    fn be(b: &[u8]) -> u64 {
        b.iter().fold(0, |acc, x| (acc << 8) | u64::from(*x))
    }

    impl Collector {
        /// Learn the templates of `msg`, skip its data sets.
        fn decode_templates_only(&mut self, msg: &[u8]) -> Result<(), String> {
            let mut rest = msg.get(HEADER_LEN..).ok_or("no header")?;
            while rest.len() >= SET_HEADER_LEN {
                let id = be(&rest[0..2]) as u16;
                let len = be(&rest[2..4]) as usize;
                if len < SET_HEADER_LEN || len > rest.len() {
                    return Err(format!("set {id} of length {len}"));
                }
                if id == TEMPLATE_SET_ID {
                    let body = &rest[SET_HEADER_LEN..len];
                    let tid = be(&body[0..2]) as u16;
                    let n = be(&body[2..4]) as usize;
                    let fields = (0..n).map(|i| FieldSpec { ie: be(&body[4 + 4 * i..6 + 4 * i]) as u16, len: be(&body[6 + 4 * i..8 + 4 * i]) as u16 }).collect();
                    self.templates.insert(tid, fields);
                }
                rest = &rest[len..];
            }
            Ok(())
        }

        fn decode(&mut self, msg: &[u8]) -> Result<Message, String> {
            if msg.len() < HEADER_LEN {
                return Err(format!("{} bytes: no header", msg.len()));
            }
            if be(&msg[0..2]) != u64::from(VERSION) {
                return Err(format!("version {}", be(&msg[0..2])));
            }
            if be(&msg[2..4]) != msg.len() as u64 {
                return Err(format!("header length {} for {} bytes", be(&msg[2..4]), msg.len()));
            }
            let mut m = Message {
                export_time: be(&msg[4..8]) as u32,
                sequence: be(&msg[8..12]) as u32,
                domain: be(&msg[12..16]) as u32,
                ..Message::default()
            };
            let mut rest = &msg[HEADER_LEN..];
            while !rest.is_empty() {
                if rest.len() < SET_HEADER_LEN {
                    return Err("truncated set header".into());
                }
                let id = be(&rest[0..2]) as u16;
                let len = be(&rest[2..4]) as usize;
                if len < SET_HEADER_LEN || len > rest.len() {
                    return Err(format!("set {id} of length {len} in {} bytes", rest.len()));
                }
                let mut body = &rest[SET_HEADER_LEN..len];
                rest = &rest[len..];
                match id {
                    TEMPLATE_SET_ID => {
                        m.template_sets += 1;
                        while body.len() >= 4 {
                            let tid = be(&body[0..2]) as u16;
                            let n = be(&body[2..4]) as usize;
                            if body.len() < 4 + 4 * n {
                                return Err(format!("template {tid} truncated"));
                            }
                            let fields = (0..n)
                                .map(|i| {
                                    let at = 4 + 4 * i;
                                    FieldSpec { ie: be(&body[at..at + 2]) as u16, len: be(&body[at + 2..at + 4]) as u16 }
                                })
                                .collect::<Vec<_>>();
                            if fields.iter().any(|s| s.ie & 0x8000 != 0) {
                                return Err("enterprise field".into());
                            }
                            self.templates.insert(tid, fields);
                            body = &body[4 + 4 * n..];
                        }
                    }
                    256.. => {
                        let fields = self.templates.get(&id).ok_or(format!("data set {id} before its template"))?;
                        let rlen: usize = fields.iter().map(|s| s.len as usize).sum();
                        m.data_sets.push(id);
                        // What is left shorter than a record is padding (RFC 7011 §3.3.1).
                        while body.len() >= rlen {
                            m.records.push(record(fields, &body[..rlen])?);
                            body = &body[rlen..];
                        }
                    }
                    _ => return Err(format!("set id {id}")),
                }
            }
            Ok(m)
        }
    }

    /// A data record by its template's information elements.
    fn record(fields: &[FieldSpec], mut b: &[u8]) -> Result<IpfixRecord, String> {
        let mut v: HashMap<u16, &[u8]> = HashMap::new();
        for s in fields {
            let (x, rest) = b.split_at(s.len as usize);
            v.insert(s.ie, x);
            b = rest;
        }
        let num = |id: u16| v.get(&id).map(|x| be(x)).ok_or(format!("no IE {id}"));
        let v4 = |id: u16| v.get(&id).and_then(|x| <[u8; 4]>::try_from(*x).ok()).map(Ipv4Addr::from);
        let v6 = |id: u16| v.get(&id).and_then(|x| <[u8; 16]>::try_from(*x).ok()).map(Ipv6Addr::from);
        let nat = match (v4(ie::POST_NAT_SOURCE_IPV4_ADDRESS), v4(ie::POST_NAT_DESTINATION_IPV4_ADDRESS)) {
            (Some(src), Some(dst)) => Some(PostNat {
                src,
                dst,
                src_port: num(ie::POST_NAPT_SOURCE_TRANSPORT_PORT)? as u16,
                dst_port: num(ie::POST_NAPT_DESTINATION_TRANSPORT_PORT)? as u16,
            }),
            (None, None) => None,
            other => return Err(format!("post-NAT addresses {other:?}")),
        };
        let addrs =
            match (v4(ie::SOURCE_IPV4_ADDRESS), v4(ie::DESTINATION_IPV4_ADDRESS), v6(ie::SOURCE_IPV6_ADDRESS), v6(ie::DESTINATION_IPV6_ADDRESS)) {
                (Some(src), Some(dst), None, None) => Addrs::V4 { src, dst },
                (None, None, Some(src), Some(dst)) => Addrs::V6 { src, dst },
                other => return Err(format!("addresses {other:?}")),
            };
        Ok(IpfixRecord {
            addrs,
            src_port: num(ie::SOURCE_TRANSPORT_PORT)? as u16,
            dst_port: num(ie::DESTINATION_TRANSPORT_PORT)? as u16,
            proto: num(ie::PROTOCOL_IDENTIFIER)? as u8,
            tcp_flags: num(ie::TCP_CONTROL_BITS)? as u16,
            ingress: num(ie::INGRESS_INTERFACE)? as u32,
            egress: num(ie::EGRESS_INTERFACE)? as u32,
            packets: num(ie::PACKET_DELTA_COUNT)?,
            bytes: num(ie::OCTET_DELTA_COUNT)?,
            start_ms: num(ie::FLOW_START_MILLISECONDS)?,
            end_ms: num(ie::FLOW_END_MILLISECONDS)?,
            end_reason: num(ie::FLOW_END_REASON)? as u8,
            nat,
        })
    }

    /// What a collector should read of `r`, worked out again here without
    /// the encoder's helpers: a record per direction with packets,
    /// original then reply.
    fn expected(r: &FlowRecord, at_zero: u64) -> Vec<IpfixRecord> {
        let end_reason = match r.event {
            FlowEvent::Ended(reason) => reason.ipfix(),
            FlowEvent::Active => 2,
            _ => return vec![],
        };
        let ifn = |i: IfIndex| if i.0 == u16::MAX { 0 } else { i.0 as u32 + 1 };
        let ms = |t: Timestamp| t.0.saturating_add(at_zero) / 1_000_000;
        let mut out = vec![];
        let t = &r.tuple;
        // The other side's view: the tuple itself when not translated (or
        // not IPv4).
        let v4 = matches!((t.src, t.dst), (IpAddr::V4(_), IpAddr::V4(_)));
        let m = r.nat.filter(|_| v4);
        let (m_src, m_dst) = m.map_or((t.src, t.dst), |m| (IpAddr::V4(m.src), IpAddr::V4(m.dst)));
        let (msp, mdp) = m.map_or((t.src_port, t.dst_port), |m| (m.src_port, m.dst_port));
        let v4of = |a: IpAddr| match a {
            IpAddr::V4(a) => a,
            IpAddr::V6(_) => unreachable!(),
        };
        // Sender as it is (real) → receiver as the sender's side sees it;
        // after: sender as the far side sees it → receiver as it is.
        for (dir, (s, d, sp, dp, i, e, post)) in [
            (t.src, m_dst, t.src_port, mdp, r.ingress, r.egress, m.map(|_| PostNat { src: v4of(m_src), dst: v4of(t.dst), src_port: msp, dst_port: t.dst_port })),
            (t.dst, m_src, t.dst_port, msp, r.egress, r.ingress, m.map(|_| PostNat { src: v4of(m_dst), dst: v4of(t.src), src_port: mdp, dst_port: t.src_port })),
        ]
        .into_iter()
        .enumerate()
        {
            let Some(addrs) = Addrs::new(s, d) else { return vec![] };
            let (packets, bytes) = (r.packets[dir] - r.reported_packets[dir], r.bytes[dir] - r.reported_bytes[dir]);
            if packets == 0 {
                continue;
            }
            out.push(IpfixRecord {
                addrs,
                src_port: sp,
                dst_port: dp,
                proto: r.tuple.proto,
                tcp_flags: r.tcp_flags as u16,
                ingress: ifn(i),
                egress: ifn(e),
                packets,
                bytes,
                start_ms: ms(r.start),
                end_ms: ms(r.last),
                end_reason,
                nat: post,
            });
        }
        out
    }

    fn flush(e: &mut IpfixEncoder, now: u32) -> Vec<Vec<u8>> {
        let mut out = vec![];
        e.flush(now, &mut out);
        out
    }

    // ---- golden bytes ----

    #[test]
    fn golden_limit_event_message() {
        let mut e = IpfixEncoder::new(7, 600, 1400);
        // One flow record first: the event's sequence number follows it.
        e.push(&tcp([10, 0], [1000, 0]), AT_ZERO);
        flush(&mut e, 1_700_000_010);
        let events = [
            LimitEvent { time_ms: 1_700_000_011_000, per_client: false, limit: 1000, refused: 148 },
            LimitEvent { time_ms: 1_700_000_011_000, per_client: true, limit: 60, refused: 3 },
        ];
        let m = e.limit_message(1_700_000_011, &events).unwrap();
        #[rustfmt::skip]
        let want: &[u8] = &[
            0x00, 0x0a, 0x00, 0x6e,                         // version 10, length 110
            0x65, 0x53, 0xf1, 0x0b,                         // export time 1_700_000_011
            0x00, 0x00, 0x00, 0x01,                         // sequence: 1 record before
            0x00, 0x00, 0x00, 0x07,                         // observation domain 7
            0x00, 0x02, 0x00, 0x20,                         // template set, 32 bytes
            0x01, 0x03, 0x00, 0x06,                         // template 259, 6 fields
            0x01, 0x43, 0x00, 0x08,                         // observationTimeMilliseconds
            0x00, 0xe6, 0x00, 0x01,                         // natEvent
            0x01, 0xd2, 0x00, 0x04,                         // natQuotaExceededEvent
            0x01, 0xd7, 0x00, 0x04,                         // maxSessionEntries
            0x01, 0xd9, 0x00, 0x04,                         // maxEntriesPerUser
            0x00, 0x85, 0x00, 0x08,                         // droppedPacketDeltaCount
            0x01, 0x03, 0x00, 0x3e,                         // data set 259, 62 bytes
            0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x92, 0xf8, // 1_700_000_011_000 ms
            0x0d,                                           // quota exceeded
            0x00, 0x00, 0x00, 0x01,                         // maximum session entries
            0x00, 0x00, 0x03, 0xe8, 0x00, 0x00, 0x00, 0x00, // 1000, -
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x94, // 148 refused
            0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x92, 0xf8,
            0x0d,
            0x00, 0x00, 0x00, 0x03,                         // maximum entries per user
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3c, // -, 60
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, // 3 refused
        ];
        assert_eq!(m, want, "{m:02x?}");
        // The collector reads the template and skips to the data set's end.
        let mut c = Collector::default();
        assert!(c.decode_templates_only(&m).is_ok());
        assert_eq!(c.templates.get(&LIMIT_TEMPLATE).map(Vec::as_slice), Some(&LIMIT_FIELDS[..]));
        // The next flow message's sequence counts the two events.
        e.push(&tcp([1, 0], [100, 0]), AT_ZERO);
        let next = flush(&mut e, 1_700_000_012);
        assert_eq!(be(&next[0][8..12]), 3);
        assert_eq!(e.limit_message(1_700_000_012, &[]), None);
        // Room for 1400 bytes: (1400 - 52) / 29 = 46 events; the rest counted.
        let many = vec![events[0]; 50];
        let before = e.counters.dropped;
        let m = e.limit_message(1_700_000_013, &many).unwrap();
        assert!(m.len() <= 1400);
        assert_eq!((m.len() - 52) / LIMIT_RECORD_LEN, 46);
        assert_eq!(e.counters.dropped - before, 4);
    }

    #[test]
    fn golden_template_set_and_one_ipv4_record() {
        let mut e = IpfixEncoder::new(7, 600, 1400);
        e.push(&tcp([10, 0], [1000, 0]), AT_ZERO);
        let msgs = flush(&mut e, 1_700_000_010);
        #[rustfmt::skip]
        let want: &[u8] = &[
            // -- message header (RFC 7011 §3.1) --
            0x00, 0x0a,             // version 10
            0x01, 0x08,             // length 264 = 16 + 188 + 60
            0x65, 0x53, 0xf1, 0x0a, // export time 1_700_000_010
            0x00, 0x00, 0x00, 0x00, // sequence number: no record before
            0x00, 0x00, 0x00, 0x07, // observation domain 7
            // -- template set (§3.4.1) --
            0x00, 0x02,             // set id 2: templates
            0x00, 0xbc,             // length 188 = 4 + 2 * (4 + 13 * 4) + 4 + 17 * 4
            0x01, 0x00, 0x00, 0x0d, // template 256, 13 fields
            0x00, 0x08, 0x00, 0x04, // sourceIPv4Address, 4
            0x00, 0x0c, 0x00, 0x04, // destinationIPv4Address, 4
            0x00, 0x07, 0x00, 0x02, // sourceTransportPort, 2
            0x00, 0x0b, 0x00, 0x02, // destinationTransportPort, 2
            0x00, 0x04, 0x00, 0x01, // protocolIdentifier, 1
            0x00, 0x06, 0x00, 0x02, // tcpControlBits, 2
            0x00, 0x0a, 0x00, 0x04, // ingressInterface, 4
            0x00, 0x0e, 0x00, 0x04, // egressInterface, 4
            0x00, 0x02, 0x00, 0x08, // packetDeltaCount, 8
            0x00, 0x01, 0x00, 0x08, // octetDeltaCount, 8
            0x00, 0x98, 0x00, 0x08, // flowStartMilliseconds (152), 8
            0x00, 0x99, 0x00, 0x08, // flowEndMilliseconds (153), 8
            0x00, 0x88, 0x00, 0x01, // flowEndReason (136), 1
            0x01, 0x01, 0x00, 0x0d, // template 257, 13 fields
            0x00, 0x1b, 0x00, 0x10, // sourceIPv6Address (27), 16
            0x00, 0x1c, 0x00, 0x10, // destinationIPv6Address (28), 16
            0x00, 0x07, 0x00, 0x02, // the rest as in 256
            0x00, 0x0b, 0x00, 0x02,
            0x00, 0x04, 0x00, 0x01,
            0x00, 0x06, 0x00, 0x02,
            0x00, 0x0a, 0x00, 0x04,
            0x00, 0x0e, 0x00, 0x04,
            0x00, 0x02, 0x00, 0x08,
            0x00, 0x01, 0x00, 0x08,
            0x00, 0x98, 0x00, 0x08,
            0x00, 0x99, 0x00, 0x08,
            0x00, 0x88, 0x00, 0x01,
            0x01, 0x02, 0x00, 0x11, // template 258, 17 fields: 256's, then
            0x00, 0x08, 0x00, 0x04,
            0x00, 0x0c, 0x00, 0x04,
            0x00, 0x07, 0x00, 0x02,
            0x00, 0x0b, 0x00, 0x02,
            0x00, 0x04, 0x00, 0x01,
            0x00, 0x06, 0x00, 0x02,
            0x00, 0x0a, 0x00, 0x04,
            0x00, 0x0e, 0x00, 0x04,
            0x00, 0x02, 0x00, 0x08,
            0x00, 0x01, 0x00, 0x08,
            0x00, 0x98, 0x00, 0x08,
            0x00, 0x99, 0x00, 0x08,
            0x00, 0x88, 0x00, 0x01,
            0x00, 0xe1, 0x00, 0x04, // postNATSourceIPv4Address (225), 4
            0x00, 0xe2, 0x00, 0x04, // postNATDestinationIPv4Address (226), 4
            0x00, 0xe3, 0x00, 0x02, // postNAPTSourceTransportPort (227), 2
            0x00, 0xe4, 0x00, 0x02, // postNAPTDestinationTransportPort (228), 2
            // -- data set of template 256 (§3.3.2) --
            0x01, 0x00,             // set id 256
            0x00, 0x3c,             // length 60 = 4 + 56
            0xc6, 0x12, 0x0a, 0x02, // 198.18.10.2
            0xc6, 0x12, 0x14, 0x02, // 198.18.20.2
            0x9c, 0x40,             // 40000
            0x00, 0x50,             // 80
            0x06,                   // TCP
            0x00, 0x13,             // SYN | ACK | FIN
            0x00, 0x00, 0x00, 0x01, // ingress IfIndex(0) + 1
            0x00, 0x00, 0x00, 0x02, // egress IfIndex(1) + 1
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, // 10 packets
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe8, // 1000 bytes
            0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x6b, 0xe8, // start 1_700_000_001_000 ms
            0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x73, 0xb8, // end   1_700_000_003_000 ms
            0x03,                   // flowEndReason: end of flow detected (FINs)
        ];
        assert_eq!(msgs, vec![want.to_vec()]);
        assert_eq!((TEMPLATE_SET_LEN, V4_RECORD_LEN, V6_RECORD_LEN, V4_NAT_RECORD_LEN, MIN_MESSAGE), (188, 56, 80, 68, 288));
        assert_eq!(e.counters, IpfixCounters { records: 1, messages: 1, templates_sent: 1, dropped: 0, invalid: 0 });
        let m = Collector::default().decode(&msgs[0]).unwrap();
        assert_eq!(m.records, expected(&tcp([10, 0], [1000, 0]), AT_ZERO));
    }

    #[test]
    fn golden_translated_record() {
        // Outbound PAT: 198.18.10.2:40000 left as 198.18.20.100:1024.
        let nat = FlowNat { src: Ipv4Addr::new(198, 18, 20, 100), src_port: 1024, dst: Ipv4Addr::new(198, 18, 20, 2), dst_port: 80 };
        let r = FlowRecord { nat: Some(nat), ..tcp([10, 12], [1000, 20000]) };
        let mut e = IpfixEncoder::new(7, 600, 1400);
        e.push(&r, AT_ZERO);
        let msgs = flush(&mut e, 1_700_000_010);
        let data = &msgs[0][HEADER_LEN + TEMPLATE_SET_LEN..];
        #[rustfmt::skip]
        let want: &[u8] = &[
            0x01, 0x02,             // set id 258
            0x00, 0x8c,             // length 140 = 4 + 2 * 68
            // the original direction, as it arrived: real source → server
            0xc6, 0x12, 0x0a, 0x02, 0xc6, 0x12, 0x14, 0x02, 0x9c, 0x40, 0x00, 0x50,
            0x06, 0x00, 0x13, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xe8,
            0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x6b, 0xe8, 0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x73, 0xb8, 0x03,
            // … as it left: mapped source 198.18.20.100:1024 → server
            0xc6, 0x12, 0x14, 0x64, 0xc6, 0x12, 0x14, 0x02, 0x04, 0x00, 0x00, 0x50,
            // the reply, as it arrived: server → mapped 198.18.20.100:1024
            0xc6, 0x12, 0x14, 0x02, 0xc6, 0x12, 0x14, 0x64, 0x00, 0x50, 0x04, 0x00,
            0x06, 0x00, 0x13, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x4e, 0x20,
            0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x6b, 0xe8, 0x00, 0x00, 0x01, 0x8b, 0xcf, 0xe5, 0x73, 0xb8, 0x03,
            // … as it left: server → real 198.18.10.2:40000
            0xc6, 0x12, 0x14, 0x02, 0xc6, 0x12, 0x0a, 0x02, 0x00, 0x50, 0x9c, 0x40,
        ];
        assert_eq!(data, want);
        assert_eq!(Collector::default().decode(&msgs[0]).unwrap().records, expected(&r, AT_ZERO));
        // An IPv6 connection never carries NAT fields (NAT is IPv4's).
        let v6 = FlowRecord { nat: Some(nat), ..ended("2001:db8::1", "2001:db8::2", 6, (1, 2), [1, 1], [1, 1]) };
        let [Some(o), Some(p)] = IpfixRecord::uniflows(&v6, AT_ZERO).unwrap() else { panic!() };
        assert_eq!((o.nat, p.nat, o.template(), p.template()), (None, None, V6_TEMPLATE, V6_TEMPLATE));
    }

    // ---- directions, families, interfaces, time ----

    #[test]
    fn two_uniflows_per_connection_and_no_empty_direction() {
        let mut c = Collector::default();
        let mut e = IpfixEncoder::new(1, 600, 1400);
        e.push(&tcp([10, 12], [1000, 20000]), AT_ZERO);
        let m = c.decode(&flush(&mut e, 100)[0]).unwrap();
        let got: Vec<_> = m.records.iter().map(|r| (r.addrs, r.src_port, r.dst_port, r.packets, r.bytes, r.ingress, r.egress)).collect();
        let (a, b) = ("198.18.10.2".parse().unwrap(), "198.18.20.2".parse().unwrap());
        assert_eq!(
            got,
            [(Addrs::V4 { src: a, dst: b }, 40000, 80, 10, 1000, 1, 2), (Addrs::V4 { src: b, dst: a }, 80, 40000, 12, 20000, 2, 1)],
            "original then reply: addresses, ports and interfaces swapped"
        );
        for (packets, want) in [([0, 5], vec![(80, 5)]), ([5, 0], vec![(40000, 5)]), ([0, 0], vec![])] {
            e.push(&tcp(packets, [0, 300]), AT_ZERO);
            let msgs = flush(&mut e, 101);
            let got: Vec<_> = msgs.iter().flat_map(|m| c.decode(m).unwrap().records).map(|r| (r.src_port, r.packets)).collect();
            assert_eq!(got, want, "packets {packets:?}");
            assert_eq!(msgs.len(), usize::from(!want.is_empty()), "nothing to send, no message");
        }
        assert_eq!(e.counters.records, 4);
    }

    #[test]
    fn only_ended_connections_are_flows() {
        let mut c = Collector::default();
        let mut e = IpfixEncoder::new(1, 600, 1400);
        assert_eq!(c.decode(&flush(&mut e, 100)[0]).unwrap().template_sets, 1);
        for event in [FlowEvent::Built, FlowEvent::Denied] {
            e.push(&FlowRecord { event, ..tcp([1, 0], [60, 0]) }, AT_ZERO);
        }
        assert_eq!(e.pending(), 0);
        assert!(flush(&mut e, 101).is_empty());
        for (reason, code) in [(EndReason::Idle, 1), (EndReason::Fin, 3), (EndReason::Reset, 3), (EndReason::HandedOver, 4), (EndReason::Cleared, 4)]
        {
            e.push(&FlowRecord { event: FlowEvent::Ended(reason), ..tcp([1, 0], [60, 0]) }, AT_ZERO);
            let m = c.decode(&flush(&mut e, 102)[0]).unwrap();
            assert_eq!(m.records.iter().map(|r| r.end_reason).collect::<Vec<_>>(), [code], "{reason:?}");
        }
        assert_eq!((e.counters.records, e.counters.invalid), (5, 0));
    }

    #[test]
    fn ipv6_records_use_their_template() {
        let mut c = Collector::default();
        let mut e = IpfixEncoder::new(1, 600, 1400);
        let v6 = ended("2001:db8:10::2", "2001:db8:20::2", 17, (5353, 53), [3, 2], [300, 500]);
        e.push(&tcp([1, 1], [60, 40]), AT_ZERO);
        e.push(&v6, AT_ZERO);
        e.push(&tcp([1, 0], [60, 0]), AT_ZERO);
        let msgs = flush(&mut e, 100);
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].len(), HEADER_LEN + TEMPLATE_SET_LEN + 3 * SET_HEADER_LEN + 3 * V4_RECORD_LEN + 2 * V6_RECORD_LEN);
        let m = c.decode(&msgs[0]).unwrap();
        assert_eq!(m.data_sets, [V4_TEMPLATE, V6_TEMPLATE, V4_TEMPLATE], "a set per run of one family, in push order");
        assert_eq!(m.records[2..4], expected(&v6, AT_ZERO)[..]);
        let Addrs::V6 { src, dst } = m.records[3].addrs else { panic!("{:?}", m.records[3]) };
        assert_eq!(
            (src.to_string(), dst.to_string(), m.records[3].src_port, m.records[3].packets),
            ("2001:db8:20::2".into(), "2001:db8:10::2".into(), 53, 2)
        );
    }

    #[test]
    fn mixed_families_are_invalid() {
        let mut e = IpfixEncoder::new(1, 600, 1400);
        e.push(&ended("198.18.10.2", "2001:db8::1", 6, (1, 2), [1, 1], [1, 1]), AT_ZERO);
        assert_eq!((e.pending(), e.counters.invalid), (0, 1));
    }

    #[test]
    fn interfaces_and_times() {
        assert_eq!([IfIndex(0), IfIndex(7), IfIndex(u16::MAX - 1), UNKNOWN_IF].map(if_number), [1, 8, 65535, 0]);
        assert_eq!(unix_ms(1_999_999, 1_000_000_000), 1001, "truncated to the millisecond");
        assert_eq!(unix_ms(u64::MAX, u64::MAX), u64::MAX / 1_000_000, "saturates");
        let r = FlowRecord { ingress: UNKNOWN_IF, egress: IfIndex(3), ..tcp([1, 1], [1, 1]) };
        let [Some(o), Some(p)] = IpfixRecord::uniflows(&r, AT_ZERO).unwrap() else { panic!() };
        assert_eq!([(o.ingress, o.egress), (p.ingress, p.egress)], [(0, 4), (4, 0)]);
        assert_eq!((o.start_ms, o.end_ms), (1_700_000_001_000, 1_700_000_003_000));
    }

    // ---- templates, sequence, bounds ----

    #[test]
    fn templates_refresh_on_time() {
        let mut c = Collector::default();
        let mut e = IpfixEncoder::new(1, 10, 1400);
        let mut step = |e: &mut IpfixEncoder, now: u32, records: usize| {
            for _ in 0..records {
                e.push(&tcp([1, 0], [60, 0]), AT_ZERO);
            }
            // (template sets, data records) per message
            flush(e, now).iter().map(|m| c.decode(m).map(|d| (d.template_sets, d.records.len()))).collect::<Result<Vec<_>, _>>().unwrap()
        };
        assert_eq!(step(&mut e, 100, 1), [(1, 1)], "the first message carries them");
        assert_eq!(step(&mut e, 105, 1), [(0, 1)]);
        assert_eq!(step(&mut e, 109, 0), [], "idle, not due: nothing");
        assert_eq!(step(&mut e, 110, 0), [(1, 0)], "due while idle: templates alone");
        assert_eq!(step(&mut e, 119, 1), [(0, 1)]);
        // 1400 bytes: 21 IPv4 records after the templates, 24 without.
        assert_eq!(step(&mut e, 120, 40), [(1, 21), (0, 19)], "only the first message of a flush");
        assert_eq!(step(&mut e, 50, 1), [(1, 1)], "the clock went back: resend");
        assert_eq!(e.counters.templates_sent, 4);
        let mut every = IpfixEncoder::new(1, 0, 1400);
        assert_eq!(flush(&mut every, 5).len(), 1);
        assert_eq!(flush(&mut every, 5).len(), 1, "refresh 0: every flush");
    }

    #[test]
    fn pending_is_bounded_and_sequence_counts_records() {
        let mut c = Collector::default();
        let mut e = IpfixEncoder::new(9, 600, 1400);
        for _ in 0..PENDING_RECORDS / 2 {
            e.push(&tcp([1, 1], [60, 40]), AT_ZERO);
        }
        e.push(&tcp([1, 1], [60, 40]), AT_ZERO);
        e.push(&tcp([0, 1], [0, 40]), AT_ZERO);
        assert_eq!((e.pending(), e.counters.dropped), (PENDING_RECORDS, 3), "both directions of a connection that does not fit");
        let msgs = flush(&mut e, 100);
        let per_msg = (1400 - HEADER_LEN - SET_HEADER_LEN) / V4_RECORD_LEN;
        assert_eq!(msgs.len(), 1 + (PENDING_RECORDS - (1400 - HEADER_LEN - TEMPLATE_SET_LEN - SET_HEADER_LEN) / V4_RECORD_LEN).div_ceil(per_msg));
        let mut seen = 0u32;
        for m in &msgs {
            assert!(m.len() <= 1400);
            let d = c.decode(m).unwrap();
            assert_eq!((d.sequence, d.domain, d.export_time), (seen, 9, 100));
            seen += d.records.len() as u32;
        }
        assert_eq!(seen as usize, PENDING_RECORDS);
        assert_eq!(e.counters.records, PENDING_RECORDS as u64);
        assert_eq!(e.counters.messages, msgs.len() as u64);
        e.push(&tcp([1, 0], [60, 0]), AT_ZERO);
        assert_eq!(e.pending(), 1, "room again after a flush");
    }

    #[test]
    fn sequence_wraps() {
        let mut c = Collector::default();
        let mut e = IpfixEncoder::new(1, 600, 0);
        e.sequence = u32::MAX - 1;
        for _ in 0..3 {
            e.push(&tcp([1, 0], [60, 0]), AT_ZERO);
        }
        let seqs: Vec<u32> = flush(&mut e, 1).iter().map(|m| c.decode(m).unwrap().sequence).collect();
        assert_eq!(seqs, [u32::MAX - 1, u32::MAX, 0, 1][..seqs.len()]);
        assert_eq!(e.sequence, 1);
    }

    #[test]
    fn max_message_is_clamped() {
        assert_eq!(IpfixEncoder::new(1, 600, 0).max_message(), MIN_MESSAGE);
        assert_eq!(IpfixEncoder::new(1, 600, 1 << 20).max_message(), MAX_MESSAGE);
        let mut e = IpfixEncoder::new(1, 600, 0);
        e.push(&ended("2001:db8::1", "2001:db8::2", 6, (1, 2), [1, 1], [1, 1]), AT_ZERO);
        let msgs = flush(&mut e, 1);
        assert_eq!(msgs.iter().map(Vec::len).collect::<Vec<_>>(), [MIN_MESSAGE, HEADER_LEN + SET_HEADER_LEN + V6_RECORD_LEN]);
    }

    #[test]
    fn counters_are_stats() {
        let c = IpfixCounters { records: 1, messages: 2, templates_sent: 3, dropped: 4, invalid: 5 };
        let flat = dataplane::stats::flatten(&c);
        let got: Vec<(&str, u64)> = flat.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(got, [("dropped", 4), ("invalid", 5), ("messages", 2), ("records", 1), ("templates_sent", 3)]);
    }

    // ---- every message decodes to what went in ----

    fn addr(family: u8, b: [u8; 16]) -> IpAddr {
        if family == 0 {
            IpAddr::from([b[0], b[1], b[2], b[3]])
        } else {
            IpAddr::from(b)
        }
    }

    fn arb_record() -> impl Strategy<Value = FlowRecord> {
        let count = || prop_oneof![Just(0u64), 1u64..1000, any::<u64>()];
        let event = prop_oneof![
            Just(FlowEvent::Built),
            Just(FlowEvent::Denied),
            Just(FlowEvent::Active),
            Just(FlowEvent::Ended(EndReason::Idle)),
            Just(FlowEvent::Ended(EndReason::Fin)),
            Just(FlowEvent::Ended(EndReason::Reset)),
            Just(FlowEvent::Ended(EndReason::HandedOver)),
            Just(FlowEvent::Ended(EndReason::Cleared)),
        ];
        // Families: mostly IPv4, some IPv6, a few mixed (invalid).
        let families = prop_oneof![6 => Just((0u8, 0u8)), 3 => Just((1, 1)), 1 => Just((0, 1))];
        (
            (event, families, any::<[u8; 16]>(), any::<[u8; 16]>(), any::<u8>(), any::<(u16, u16)>()),
            ([count(), count()], any::<[u64; 2]>(), any::<u8>(), (any::<u16>(), prop_oneof![Just(u16::MAX), any::<u16>()]), any::<(u64, u64)>()),
            // Some translated (an IPv6 tuple ignores it).
            proptest::option::weighted(0.3, any::<([u8; 4], [u8; 4], u16, u16)>()),
        )
            .prop_map(|((event, (fs, fd), s, d, proto, ports), (packets, bytes, flags, (i, o), (start, last)), nat)| FlowRecord {
                event,
                tuple: FiveTuple { src: addr(fs, s), dst: addr(fd, d), proto, src_port: ports.0, dst_port: ports.1 },
                start: Timestamp(start),
                last: Timestamp(last),
                packets,
                bytes,
                // Earlier active records reported some of it (at most all).
                reported_packets: packets.map(|p| p / 3),
                reported_bytes: bytes.map(|b| b / 2),
                tcp_flags: flags,
                ingress: IfIndex(i),
                egress: IfIndex(o),
                rule: RuleRef::SecurityLevel,
                adopted: false,
                mark: 0,
                nat: nat.map(|(a, b, sp, dp)| FlowNat { src: a.into(), dst: b.into(), src_port: sp, dst_port: dp }),
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn collector_reads_back_every_record(
            batches in proptest::collection::vec((proptest::collection::vec(arb_record(), 0..80), 0u32..20), 1..5),
            max in 0usize..3000,
            refresh in 0u32..30,
            domain in any::<u32>(),
            at_zero in prop_oneof![Just(AT_ZERO), any::<u64>()],
        ) {
            let mut e = IpfixEncoder::new(domain, refresh, max);
            let limit = max.clamp(MIN_MESSAGE, MAX_MESSAGE);
            let mut c = Collector::default();
            let (mut now, mut sent, mut messages, mut invalid) = (1_000u32, 0u32, 0u64, 0u64);
            let mut last_templates: Option<u32> = None;
            for (records, step) in &batches {
                now += step;
                let mut want = vec![];
                for r in records {
                    e.push(r, at_zero);
                    want.extend(expected(r, at_zero));
                    invalid += u64::from(matches!(r.event, FlowEvent::Ended(_) | FlowEvent::Active) && Addrs::new(r.tuple.src, r.tuple.dst).is_none());
                }
                let msgs = flush(&mut e, now);
                let due = last_templates.is_none_or(|t| now - t >= refresh);
                prop_assert_eq!(msgs.is_empty(), want.is_empty() && !due);
                let mut got = vec![];
                for (k, m) in msgs.iter().enumerate() {
                    prop_assert!(m.len() <= limit, "{} bytes > {}", m.len(), limit);
                    let d = c.decode(m).map_err(TestCaseError::fail)?;
                    prop_assert_eq!((d.sequence, d.domain, d.export_time), (sent, domain, now));
                    prop_assert_eq!(d.template_sets, usize::from(due && k == 0), "templates: first message, when due");
                    prop_assert!(!d.records.is_empty() || (due && k == 0), "no empty message");
                    sent = sent.wrapping_add(d.records.len() as u32);
                    got.extend(d.records);
                }
                if due {
                    last_templates = Some(now);
                }
                messages += msgs.len() as u64;
                prop_assert_eq!(got, want);
            }
            prop_assert_eq!(e.counters.records, u64::from(sent));
            prop_assert_eq!(e.counters.messages, messages);
            prop_assert_eq!((e.counters.invalid, e.counters.dropped, e.pending()), (invalid, 0, 0));
        }
    }
}
