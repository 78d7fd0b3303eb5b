//! Syslog messages (RFC 5424) of a node: its connections (built, teardown,
//! denied) and its cluster and configuration events, sans-IO: records and
//! events in, framed bytes out; the node's export thread owns the sockets.
//!
//! A message is `<PRI>1 TIMESTAMP HOSTNAME clusterfw PROCID MSGID
//! [cfw@32473 ...] text` (RFC 5424 §6): PRI = facility × 8 + severity,
//! the timestamp in UTC with milliseconds (RFC 3339), HOSTNAME the node's
//! or the cluster's name (`device-id`), structured data under the SD-ID
//! `cfw@32473` (32473 is the example enterprise number of RFC 5612: a
//! private SD-ID until the project has its own) with the record's fields
//! for machines, and a short text for people. Over UDP one message is one
//! datagram (RFC 5426); over TCP each is framed as `LEN SP MSG` (RFC 6587
//! §3.4.1, octet counting), which rsyslog and syslog-ng read.
//!
//! MSGIDs and severities:
//!
//! | MSGID | severity | what |
//! |---|---|---|
//! | `conn-built` | informational | a connection this node owns was created |
//! | `conn-teardown` | informational | it ended here (bytes, packets, duration, reason) |
//! | `conn-denied` | warning | a new connection refused by an access rule (rate-limited per rule) |
//! | `conn-denied-suppressed` | warning | how many denied messages the rate limit held back, per rule and second |
//! | `cluster-*` | notice / warning | membership events (join, leave, election, failover, split brain, readiness) |
//! | `config-error` | error | a configuration reload or replicated configuration that was refused |
//! | `export-lost` | warning | records the node's queues could not hold (per interval) |
//!
//! A connection handed to another owner at a member-set change is not torn
//! down (it goes on there): no message; its new owner logs its teardown.
//!
//! Invariants: `render` never panics and always produces one valid RFC 5424
//! message (header fields are printable US-ASCII without spaces — others
//! are replaced by `_` —, SD-PARAM values escape `"`, `\` and `]`); the
//! rate limiter lets at most `rate` denied messages per rule through per
//! second plus a burst of `rate`, and every denied record is either sent
//! or counted in exactly one summary.

use crate::membership::{EventKind, Reason, State};
use dataplane::conntrack::{EndReason, FlowEvent, FlowRecord, RuleRef};
use dataplane::route::IfIndex;
use std::collections::HashMap;
use std::net::IpAddr;
use std::fmt::Write as _;

/// The structured-data ID of every message.
pub const SD_ID: &str = "cfw@32473";
/// The APP-NAME.
pub const APP_NAME: &str = "clusterfw";

/// Severities (RFC 5424 §6.2.1).
pub mod severity {
    pub const ERROR: u8 = 3;
    pub const WARNING: u8 = 4;
    pub const NOTICE: u8 = 5;
    pub const INFORMATIONAL: u8 = 6;
}

/// One message before rendering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub severity: u8,
    pub msgid: &'static str,
    /// SD-PARAMs of the `cfw@32473` element, in order.
    pub params: Vec<(&'static str, String)>,
    pub text: String,
}

/// The header fields every message of a collector shares.
#[derive(Clone, Debug)]
pub struct Header {
    /// 0-23.
    pub facility: u8,
    pub hostname: String,
    pub procid: u32,
}

/// `<PRI>1 TIMESTAMP HOSTNAME APP PROCID MSGID [SD] MSG` at `unix_ms`.
pub fn render(h: &Header, unix_ms: u64, m: &Message) -> Vec<u8> {
    let mut s = String::with_capacity(160 + m.text.len());
    let pri = u16::from(h.facility.min(23)) * 8 + u16::from(m.severity.min(7));
    let _ = write!(s, "<{pri}>1 {} ", rfc3339_ms(unix_ms));
    push_field(&mut s, &h.hostname, 255);
    let _ = write!(s, " {APP_NAME} {} ", h.procid);
    push_field(&mut s, m.msgid, 32);
    if m.params.is_empty() {
        s.push_str(" -");
    } else {
        let _ = write!(s, " [{SD_ID}");
        for (k, v) in &m.params {
            let _ = write!(s, " {k}=\"");
            for c in v.chars() {
                if matches!(c, '"' | '\\' | ']') {
                    s.push('\\');
                }
                s.push(c);
            }
            s.push('"');
        }
        s.push(']');
    }
    if !m.text.is_empty() {
        s.push(' ');
        s.push_str(&m.text);
    }
    s.into_bytes()
}

/// RFC 6587 §3.4.1 octet counting: `LEN SP MSG`.
pub fn frame_octet_counted(msg: &[u8]) -> Vec<u8> {
    let mut v = format!("{} ", msg.len()).into_bytes();
    v.extend_from_slice(msg);
    v
}

/// A header field: PRINTUSASCII (33-126), at most `max` characters, `-`
/// for an empty one.
fn push_field(s: &mut String, f: &str, max: usize) {
    if f.is_empty() {
        s.push('-');
        return;
    }
    s.extend(f.chars().take(max).map(|c| if ('!'..='~').contains(&c) { c } else { '_' }));
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` of a Unix time in milliseconds.
pub fn rfc3339_ms(unix_ms: u64) -> String {
    let (secs, ms) = (unix_ms / 1000, unix_ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, mo, d) = civil_from_days(days as i64);
    format!("{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// What the messages of flow records name: interfaces and rules by index.
#[derive(Clone, Debug, Default)]
pub struct Names {
    pub interfaces: Vec<String>,
    pub rules: Vec<String>,
    /// This node's name (an SD-PARAM of every connection message, so a
    /// collector told `device-id: cluster` still sees which node logged).
    pub node: String,
}

impl Names {
    fn iface(&self, i: IfIndex) -> &str {
        self.interfaces.get(usize::from(i.0)).map_or("-", String::as_str)
    }
    fn rule(&self, r: RuleRef) -> String {
        match r {
            RuleRef::Rule(i) => self.rules.get(i as usize).cloned().unwrap_or_else(|| format!("#{i}")),
            RuleRef::SecurityLevel => "security-level".into(),
        }
    }
}

fn proto_name(p: u8) -> String {
    match p {
        1 => "ICMP".into(),
        6 => "TCP".into(),
        17 => "UDP".into(),
        58 => "ICMPv6".into(),
        n => format!("proto-{n}"),
    }
}

/// `h:mm:ss.mmm`.
fn duration(ns: u64) -> String {
    let ms = ns / 1_000_000;
    format!("{}:{:02}:{:02}.{:03}", ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000)
}

/// The message of a flow record (`None`: not logged — a connection handed
/// over goes on at its new owner). Denied records are not rate-limited
/// here (`DenyLimiter`).
pub fn flow_message(r: &FlowRecord, names: &Names) -> Option<Message> {
    let t = &r.tuple;
    let proto = proto_name(t.proto);
    let mut params = vec![
        ("node", names.node.clone()),
        ("proto", proto.to_ascii_lowercase()),
        ("src", t.src.to_string()),
        ("sport", t.src_port.to_string()),
        ("dst", t.dst.to_string()),
        ("dport", t.dst_port.to_string()),
    ];
    let (ingress, egress) = (names.iface(r.ingress), names.iface(r.egress));
    // A translated connection: each end the other side saw differently
    // is followed by that view ("as mapped/port"), and the whole
    // translated tuple is in the parameters.
    let (mut src_as, mut dst_as) = (String::new(), String::new());
    if let Some(m) = r.nat.filter(|_| r.event != FlowEvent::Denied) {
        if (IpAddr::V4(m.src), m.src_port) != (t.src, t.src_port) {
            src_as = format!(" as {}/{}", m.src, m.src_port);
        }
        if (IpAddr::V4(m.dst), m.dst_port) != (t.dst, t.dst_port) {
            dst_as = format!(" as {}/{}", m.dst, m.dst_port);
        }
        params.extend([
            ("mapped-src", m.src.to_string()),
            ("mapped-sport", m.src_port.to_string()),
            ("mapped-dst", m.dst.to_string()),
            ("mapped-dport", m.dst_port.to_string()),
        ]);
    }
    let ends = format!("{}/{}{src_as} ({ingress}) to {}/{}{dst_as} ({egress})", t.src, t.src_port, t.dst, t.dst_port);
    Some(match r.event {
        FlowEvent::Built => {
            let rule = names.rule(r.rule);
            params.extend([("in", ingress.to_string()), ("out", egress.to_string()), ("rule", rule.clone())]);
            Message {
                severity: severity::INFORMATIONAL,
                msgid: "conn-built",
                params,
                text: format!("Built {proto} connection {ends} by rule {rule}"),
            }
        }
        FlowEvent::Ended(EndReason::HandedOver) | FlowEvent::Active => return None,
        FlowEvent::Ended(reason) => {
            let dur = r.last.0.saturating_sub(r.start.0);
            let bytes = r.bytes[0] + r.bytes[1];
            params.extend([
                ("duration-ms", (dur / 1_000_000).to_string()),
                ("packets-out", r.packets[0].to_string()),
                ("packets-in", r.packets[1].to_string()),
                ("bytes-out", r.bytes[0].to_string()),
                ("bytes-in", r.bytes[1].to_string()),
                ("reason", reason.as_str().to_string()),
            ]);
            if r.adopted {
                params.push(("adopted", "true".into()));
            }
            Message {
                severity: severity::INFORMATIONAL,
                msgid: "conn-teardown",
                params,
                text: format!(
                    "Teardown {proto} connection {ends} duration {} bytes {bytes} ({} from the initiator, {} to it) reason {}",
                    duration(dur),
                    r.bytes[0],
                    r.bytes[1],
                    reason.as_str()
                ),
            }
        }
        FlowEvent::Denied => {
            let rule = names.rule(r.rule);
            params.extend([("in", ingress.to_string()), ("rule", rule.clone())]);
            Message {
                severity: severity::WARNING,
                msgid: "conn-denied",
                params,
                text: format!("Deny {proto} connection {ends} by rule {rule}"),
            }
        }
    })
}

/// Per rule: denied messages allowed this second and suppressed ones.
#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    tokens: u32,
    suppressed: u64,
}

/// The per-rule rate limit of denied messages: `rate` per second with a
/// burst of `rate`, refilled every whole second of `now`; `tick` reports
/// what each rule held back since its last report.
#[derive(Debug)]
pub struct DenyLimiter {
    rate: u32,
    second: u64,
    buckets: HashMap<RuleRef, Bucket>,
    /// Denied records sent on / suppressed in all.
    pub passed: u64,
    pub suppressed: u64,
}

impl DenyLimiter {
    pub fn new(rate: u32) -> DenyLimiter {
        DenyLimiter { rate, second: 0, buckets: HashMap::new(), passed: 0, suppressed: 0 }
    }

    /// Denied messages per rule and second.
    pub fn rate(&self) -> u32 {
        self.rate
    }

    /// May a denied message of `rule` go out at `now_ms`?
    pub fn allow(&mut self, rule: RuleRef, now_ms: u64) -> bool {
        self.refill(now_ms);
        let rate = self.rate;
        let b = self.buckets.entry(rule).or_insert(Bucket { tokens: rate, suppressed: 0 });
        if b.tokens > 0 {
            b.tokens -= 1;
            self.passed += 1;
            true
        } else {
            b.suppressed += 1;
            self.suppressed += 1;
            false
        }
    }

    fn refill(&mut self, now_ms: u64) {
        let second = now_ms / 1000;
        if second != self.second {
            self.second = second;
            let rate = self.rate;
            for b in self.buckets.values_mut() {
                b.tokens = rate;
            }
        }
    }

    /// The summaries due at `now_ms`: per rule that suppressed anything
    /// since its last summary, (rule, count); the counts restart at 0.
    /// Rules with nothing to report and a full bucket are forgotten, so
    /// the map holds only recently active rules.
    pub fn tick(&mut self, now_ms: u64) -> Vec<(RuleRef, u64)> {
        self.refill(now_ms);
        let rate = self.rate;
        let mut out: Vec<(RuleRef, u64)> = Vec::new();
        self.buckets.retain(|&rule, b| {
            if b.suppressed > 0 {
                out.push((rule, std::mem::take(&mut b.suppressed)));
            }
            b.tokens < rate
        });
        out.sort_by_key(|&(r, _)| match r {
            RuleRef::Rule(i) => i64::from(i),
            RuleRef::SecurityLevel => -1,
        });
        out
    }
}

/// The summary message of `n` denied messages of `rule` held back.
pub fn suppressed_message(rule: RuleRef, n: u64, rate: u32, names: &Names) -> Message {
    let rule = names.rule(rule);
    Message {
        severity: severity::WARNING,
        msgid: "conn-denied-suppressed",
        params: vec![("node", names.node.clone()), ("rule", rule.clone()), ("suppressed", n.to_string())],
        text: format!("{n} denied connections of rule {rule} not logged (rate limit {rate}/s per rule)"),
    }
}

/// The severity and MSGID of a membership event: `cluster-election` (this
/// node won an election), `cluster-ready` (the readiness gate opened),
/// `cluster-join` / `cluster-leave` (the control node admitted or removed
/// a member: the removed one's connections fail over), `cluster-split-brain`
/// (a better control node took over after a partition), `cluster-state`
/// (any other change of this node's state: warning when it leaves the
/// cluster), `cluster-members` (a new member set), `cluster-refused` (bad or
/// refused input from a peer), `cluster-config` (replicated configuration).
pub fn cluster_event(kind: &EventKind) -> (u8, &'static str) {
    use severity::*;
    match *kind {
        EventKind::State { to: State::Control, reason: Reason::Elected { .. }, .. } => (NOTICE, "cluster-election"),
        EventKind::State { reason: Reason::BetterControl { .. }, .. } => (WARNING, "cluster-split-brain"),
        EventKind::State { reason: Reason::Resumed { .. }, .. } => (WARNING, "cluster-stall"),
        EventKind::State { reason: Reason::Synced { .. } | Reason::SyncTimeout { .. }, .. } => (NOTICE, "cluster-ready"),
        EventKind::State { to: State::Inactive | State::Disabled, .. } => (WARNING, "cluster-state"),
        EventKind::State { .. } => (NOTICE, "cluster-state"),
        EventKind::Members { .. } => (INFORMATIONAL, "cluster-members"),
        EventKind::Admitted { .. } => (NOTICE, "cluster-join"),
        EventKind::Removed { .. } => (WARNING, "cluster-leave"),
        EventKind::Refused { .. } => (WARNING, "cluster-refused"),
        EventKind::CatchUp { .. } | EventKind::ConfigDropped { .. } => (NOTICE, "cluster-config"),
    }
}

/// A plain event message (cluster, configuration, exporter).
pub fn event_message(severity: u8, msgid: &'static str, node: &str, text: String) -> Message {
    Message { severity, msgid, params: vec![("node", node.to_string())], text }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dataplane::conntrack::FlowNat;
    use dataplane::types::FiveTuple;
    use dataplane::Timestamp;
    use proptest::prelude::*;

    fn header() -> Header {
        Header { facility: 20, hostname: "n1".into(), procid: 4242 }
    }

    fn record(event: FlowEvent) -> FlowRecord {
        FlowRecord {
            event,
            tuple: FiveTuple {
                src: "198.18.10.2".parse().unwrap(),
                dst: "198.18.20.2".parse().unwrap(),
                proto: 6,
                src_port: 40000,
                dst_port: 80,
            },
            start: Timestamp(1_000_000_000),
            last: Timestamp(4_123_000_000),
            packets: [10, 12],
            bytes: [1000, 20000],
            reported_packets: [0; 2],
            reported_bytes: [0; 2],
            tcp_flags: 0x13,
            ingress: IfIndex(0),
            egress: IfIndex(1),
            rule: RuleRef::Rule(0),
            adopted: false,
            mark: 0,
            nat: None,
        }
    }

    fn names() -> Names {
        Names { interfaces: vec!["inside".into(), "outside".into()], rules: vec!["web".into()], node: "n1".into() }
    }

    #[test]
    fn golden_messages() {
        // 2026-12-04T05:10:45.123Z
        let t = 1_796_361_045_123;
        let cases: [(FlowEvent, &str); 3] = [
            (
                FlowEvent::Built,
                "<166>1 2026-12-04T05:10:45.123Z n1 clusterfw 4242 conn-built [cfw@32473 node=\"n1\" proto=\"tcp\" \
                 src=\"198.18.10.2\" sport=\"40000\" dst=\"198.18.20.2\" dport=\"80\" in=\"inside\" out=\"outside\" \
                 rule=\"web\"] Built TCP connection 198.18.10.2/40000 (inside) to 198.18.20.2/80 (outside) by rule web",
            ),
            (
                FlowEvent::Ended(EndReason::Fin),
                "<166>1 2026-12-04T05:10:45.123Z n1 clusterfw 4242 conn-teardown [cfw@32473 node=\"n1\" proto=\"tcp\" \
                 src=\"198.18.10.2\" sport=\"40000\" dst=\"198.18.20.2\" dport=\"80\" duration-ms=\"3123\" \
                 packets-out=\"10\" packets-in=\"12\" bytes-out=\"1000\" bytes-in=\"20000\" reason=\"tcp-fins\"] \
                 Teardown TCP connection 198.18.10.2/40000 (inside) to 198.18.20.2/80 (outside) duration 0:00:03.123 \
                 bytes 21000 (1000 from the initiator, 20000 to it) reason tcp-fins",
            ),
            (
                FlowEvent::Denied,
                "<164>1 2026-12-04T05:10:45.123Z n1 clusterfw 4242 conn-denied [cfw@32473 node=\"n1\" proto=\"tcp\" \
                 src=\"198.18.10.2\" sport=\"40000\" dst=\"198.18.20.2\" dport=\"80\" in=\"inside\" rule=\"web\"] \
                 Deny TCP connection 198.18.10.2/40000 (inside) to 198.18.20.2/80 (outside) by rule web",
            ),
        ];
        for (event, want) in cases {
            let m = flow_message(&record(event), &names()).unwrap();
            assert_eq!(String::from_utf8(render(&header(), t, &m)).unwrap(), want);
        }
        assert_eq!(flow_message(&record(FlowEvent::Ended(EndReason::HandedOver)), &names()), None);
    }

    #[test]
    fn golden_translated_messages() {
        let t = 1_796_361_045_123;
        // Outbound PAT: the initiator leaves as 198.18.20.100/1024.
        let pat = FlowNat { src: "198.18.20.100".parse().unwrap(), src_port: 1024, dst: "198.18.20.2".parse().unwrap(), dst_port: 80 };
        let r = FlowRecord { nat: Some(pat), ..record(FlowEvent::Ended(EndReason::Fin)) };
        let want = "<166>1 2026-12-04T05:10:45.123Z n1 clusterfw 4242 conn-teardown [cfw@32473 node=\"n1\" proto=\"tcp\" \
                    src=\"198.18.10.2\" sport=\"40000\" dst=\"198.18.20.2\" dport=\"80\" mapped-src=\"198.18.20.100\" \
                    mapped-sport=\"1024\" mapped-dst=\"198.18.20.2\" mapped-dport=\"80\" duration-ms=\"3123\" \
                    packets-out=\"10\" packets-in=\"12\" bytes-out=\"1000\" bytes-in=\"20000\" reason=\"tcp-fins\"] \
                    Teardown TCP connection 198.18.10.2/40000 as 198.18.20.100/1024 (inside) to 198.18.20.2/80 (outside) \
                    duration 0:00:03.123 bytes 21000 (1000 from the initiator, 20000 to it) reason tcp-fins";
        assert_eq!(String::from_utf8(render(&header(), t, &flow_message(&r, &names()).unwrap())).unwrap(), want);
        // To a static rule's mapped address: the responder was reached as it.
        let inbound = FlowNat { dst: "198.18.20.50".parse().unwrap(), ..FlowNat { src_port: 40000, dst_port: 8080, ..pat } };
        let inbound = FlowNat { src: "198.18.10.2".parse().unwrap(), ..inbound };
        let m = flow_message(&FlowRecord { nat: Some(inbound), ..record(FlowEvent::Built) }, &names()).unwrap();
        assert!(m.text.starts_with("Built TCP connection 198.18.10.2/40000 (inside) to 198.18.20.2/80 as 198.18.20.50/8080 (outside)"), "{}", m.text);
        // A denied attempt never carries one.
        let m = flow_message(&FlowRecord { nat: Some(pat), ..record(FlowEvent::Denied) }, &names()).unwrap();
        assert!(!m.params.iter().any(|(k, _)| k.starts_with("mapped")) && !m.text.contains(" as "), "{m:?}");
    }

    #[test]
    fn timestamps() {
        for (ms, want) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_709_251_199_999, "2024-02-29T23:59:59.999Z"),
            (4_102_444_800_000, "2100-01-01T00:00:00.000Z"),
        ] {
            assert_eq!(rfc3339_ms(ms), want);
        }
    }

    #[test]
    fn header_fields_and_values_are_escaped() {
        let h = Header { facility: 99, hostname: "a b\u{e9}".into(), procid: 1 };
        let m = Message { severity: 9, msgid: "x", params: vec![("k", "a\"b]c\\".into())], text: String::new() };
        let s = String::from_utf8(render(&h, 0, &m)).unwrap();
        assert_eq!(s, "<191>1 1970-01-01T00:00:00.000Z a_b_ clusterfw 1 x [cfw@32473 k=\"a\\\"b\\]c\\\\\"]");
        let h = Header { hostname: String::new(), ..h };
        let m = Message { params: vec![], ..m };
        assert!(String::from_utf8(render(&h, 0, &m)).unwrap().ends_with(" - clusterfw 1 x -"));
    }

    #[test]
    fn cluster_events_by_kind() {
        use dataplane::{Epoch, NodeId};
        let st = |from, to, reason| EventKind::State { from, to, reason };
        let cases = [
            (st(State::Joining, State::Control, Reason::Elected { candidates: 2 }), "cluster-election", 5),
            (st(State::Syncing, State::Data, Reason::Synced { waited: dataplane::Duration(0) }), "cluster-ready", 5),
            (st(State::Data, State::Inactive, Reason::Removed { control: NodeId(1), epoch: Epoch(3) }), "cluster-state", 4),
            (st(State::Control, State::Data, Reason::BetterControl { control: NodeId(1) }), "cluster-split-brain", 4),
            (EventKind::Admitted { node: NodeId(2), epoch: Epoch(4) }, "cluster-join", 5),
            (EventKind::Removed { node: NodeId(2), epoch: Epoch(5), reason: Reason::NoHeartbeat { silent: dataplane::Duration(0) } }, "cluster-leave", 4),
        ];
        for (kind, msgid, sev) in cases {
            assert_eq!(cluster_event(&kind), (sev, msgid), "{kind:?}");
        }
    }

    #[test]
    fn octet_counting() {
        assert_eq!(frame_octet_counted(b"<14>1 - - - - - -"), b"17 <14>1 - - - - - -".to_vec());
    }

    #[test]
    fn deny_limit_per_rule_per_second_and_summaries() {
        let mut l = DenyLimiter::new(3);
        let (a, b) = (RuleRef::Rule(0), RuleRef::SecurityLevel);
        let passed: usize = (0..10).filter(|_| l.allow(a, 5_000)).count();
        assert_eq!(passed, 3);
        assert!(l.allow(b, 5_100), "another rule has its own budget");
        assert_eq!(l.tick(5_900), vec![(a, 7)]);
        assert_eq!(l.tick(5_950), vec![], "reported once");
        assert_eq!((0..10).filter(|_| l.allow(a, 6_000)).count(), 3, "refilled the next second");
        assert_eq!(l.tick(7_000), vec![(a, 7)]);
        assert_eq!((l.passed, l.suppressed), (7, 14));
        assert!(l.tick(8_000).is_empty() && l.buckets.is_empty(), "idle rules are forgotten");
        let mut none = DenyLimiter::new(0);
        assert!(!none.allow(a, 0), "rate 0: summaries only");
    }

    proptest! {
        #[test]
        fn every_denied_record_is_sent_or_summarised(
            rate in 0u32..5,
            events in proptest::collection::vec((0u32..3, 0u64..5_000), 0..200),
        ) {
            let mut l = DenyLimiter::new(rate);
            let mut events = events;
            events.sort_by_key(|e| e.1);
            let (mut sent, mut summarised) = (0u64, 0u64);
            let mut per_second: HashMap<(u32, u64), u32> = HashMap::new();
            for (rule, t) in &events {
                if l.allow(RuleRef::Rule(*rule), *t) {
                    sent += 1;
                    *per_second.entry((*rule, t / 1000)).or_default() += 1;
                }
                if t % 7 == 0 {
                    summarised += l.tick(*t).iter().map(|x| x.1).sum::<u64>();
                }
            }
            summarised += l.tick(10_000).iter().map(|x| x.1).sum::<u64>();
            prop_assert_eq!(sent + summarised, events.len() as u64);
            prop_assert!(per_second.values().all(|&n| n <= rate), "at most `rate` per rule and second");
        }

        #[test]
        fn rendering_any_text_is_one_line_message(host in ".{0,40}", v in ".{0,40}", ms in 0u64..8_000_000_000_000) {
            let h = Header { facility: 20, hostname: host, procid: 7 };
            let m = Message { severity: 6, msgid: "x", params: vec![("k", v)], text: "t".into() };
            let s = String::from_utf8(render(&h, ms, &m)).unwrap();
            let mut it = s.splitn(7, ' ');
            prop_assert!(it.next().unwrap().starts_with("<166>1"));
            prop_assert_eq!(it.next().unwrap().len(), 24);
            let host = it.next().unwrap();
            prop_assert!(host.chars().all(|c| ('!'..='~').contains(&c)));
        }
    }
}
