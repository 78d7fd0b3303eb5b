//! Access rules: which *new* connections may be created.
//!
//! The ACL is consulted only when conntrack is about to create a flow (the
//! `admit` callback of `ConnTable::track`); packets of existing flows, in
//! either direction, never reach it.
//!
//! Semantics (matching `config/examples/node.yaml`):
//! - Rules are ordered; the **first** rule that matches decides, and its
//!   hit counter is incremented.
//! - A rule matches on: ingress interface (or any), IP protocol (or any),
//!   source and destination prefix, source and destination port ranges.
//!   A rule with a port range narrower than 0-65535 matches only TCP and UDP
//!   packets (ports mean nothing for other protocols; ICMP's echo identifier
//!   is not a port for this purpose).
//! - **Address families.** A rule's prefixes are IPv4 or IPv6, never one of
//!   each (`Policy::build` refuses that). A rule with an IPv4 prefix
//!   matches only IPv4 packets, one with an IPv6 prefix only IPv6 packets
//!   (`0.0.0.0/0` is "every IPv4 address", `::/0` "every IPv6 address");
//!   a rule without addresses (`None`) matches both families.
//! - **Default** when no rule matches: permit if the ingress interface's
//!   security level is strictly greater than the egress interface's, deny
//!   otherwise (equal levels are denied, including hairpinning back out of
//!   the ingress interface). The two defaults have their own hit counters.
//!
//! The compiled table (`Acl::new`): one 36-byte `Compiled` per rule, scanned
//! in order, holding the IPv4 test as host-order net/mask pairs, and an
//! index into a side table of `Compiled6` (four `u128`s, 64 bytes) for the
//! rules with IPv6 prefixes, so IPv6 prefixes do not spread the IPv4 scan
//! over more cache lines. `evaluate` looks at the tuple's family once and
//! scans with that family's test: an IPv4 tuple costs two and-compares of
//! `u32`s per rule whatever the rule's family (an IPv6 rule's IPv4 pair is
//! `NEVER4`, which no address passes), an IPv6 tuple one compare of the
//! index per IPv4 rule and, per IPv6 rule, one load from the side table and
//! two 128-bit and-compares. Measured (`examples/acl_profile.rs` under
//! callgrind, 16 non-matching IPv4 rules, one `evaluate`): an IPv4 tuple 252 instructions before IPv6
//! rules existed, 177 now (the family tested once, not per rule), plus 8
//! for each IPv6 rule in the table; an IPv6 tuple 178, plus 21 for each
//! IPv6 rule it is tested against.
//!
//! Invariants: `check` does not allocate; rules are compiled once into
//! host-order masks; the rule list is immutable after `Acl::new` (a new
//! policy is a new `Acl`, `Pipeline::set_policy`).

use crate::route::{mask, IfIndex};
use crate::types::{ip_proto, FiveTuple};
use std::net::IpAddr;

/// An access rule's source or destination: a prefix of either family, or
/// `None` for any address of both.
pub type RulePrefix = Option<(IpAddr, u8)>;

/// One rule, with interface names already resolved to indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclRule {
    pub name: String,
    pub permit: bool,
    pub iface: Option<IfIndex>,
    pub protocol: Option<u8>,
    pub src: RulePrefix,
    pub dst: RulePrefix,
    pub src_ports: (u16, u16),
    pub dst_ports: (u16, u16),
}

/// `Compiled::v6` of a rule without addresses: any IPv6 tuple passes.
const V6_ANY: u32 = u32::MAX;
/// `Compiled::v6` of an IPv4 rule: no IPv6 tuple passes.
const V6_NONE: u32 = u32::MAX - 1;
/// The IPv4 (net, mask) of an IPv6 rule: `a & 0 == 0 != 1` for every `a`.
const NEVER4: (u32, u32) = (1, 0);

#[derive(Clone, Debug)]
struct Compiled {
    permit: bool,
    iface: Option<IfIndex>,
    protocol: Option<u8>,
    src_net: u32,
    src_mask: u32,
    dst_net: u32,
    dst_mask: u32,
    src_ports: (u16, u16),
    dst_ports: (u16, u16),
    ports_any: bool,
    /// `V6_ANY`, `V6_NONE`, or the index of this rule's IPv6 prefixes in
    /// `Acl::v6`.
    v6: u32,
}

/// An IPv6 rule's prefixes (a missing one: net and mask 0).
#[derive(Clone, Debug)]
struct Compiled6 {
    src_net: u128,
    src_mask: u128,
    dst_net: u128,
    dst_mask: u128,
}

fn mask6(len: u8) -> u128 {
    match len {
        0 => 0,
        l if l >= 128 => u128::MAX,
        l => u128::MAX << (128 - u32::from(l)),
    }
}

impl Compiled {
    /// Interface, protocol and ports: the tests of either family.
    #[inline(always)]
    fn matches_l4(&self, ingress: IfIndex, t: &FiveTuple) -> bool {
        if self.iface.is_some_and(|i| i != ingress) {
            return false;
        }
        if self.protocol.is_some_and(|p| p != t.proto) {
            return false;
        }
        if !self.ports_any {
            if t.proto != ip_proto::TCP && t.proto != ip_proto::UDP {
                return false;
            }
            if t.src_port < self.src_ports.0
                || t.src_port > self.src_ports.1
                || t.dst_port < self.dst_ports.0
                || t.dst_port > self.dst_ports.1
            {
                return false;
            }
        }
        true
    }

    /// An IPv4 tuple's addresses (host order): two and-compares, the same
    /// for every rule (an IPv6 rule's pair is `NEVER4`).
    #[inline(always)]
    fn matches4(&self, ingress: IfIndex, t: &FiveTuple, src: u32, dst: u32) -> bool {
        src & self.src_mask == self.src_net && dst & self.dst_mask == self.dst_net && self.matches_l4(ingress, t)
    }

    /// An IPv6 tuple's addresses: any (a rule without addresses), none (an
    /// IPv4 rule), or the rule's prefixes in the side table.
    #[inline(always)]
    fn matches6(&self, ingress: IfIndex, t: &FiveTuple, src: u128, dst: u128, v6: &[Compiled6]) -> bool {
        let addresses = match self.v6 {
            V6_ANY => true,
            V6_NONE => false,
            i => v6.get(i as usize).is_some_and(|p| src & p.src_mask == p.src_net && dst & p.dst_mask == p.dst_net),
        };
        addresses && self.matches_l4(ingress, t)
    }
}

/// The decision and what made it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Rule at this index matched.
    Rule { index: usize, permit: bool },
    /// No rule matched; security-level default.
    Default { permit: bool },
}

impl Decision {
    pub fn permit(self) -> bool {
        match self {
            Decision::Rule { permit, .. } | Decision::Default { permit } => permit,
        }
    }
}

/// A rule as shown by `show access-rules`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RuleInfo {
    pub name: String,
    pub action: &'static str,
    /// Ingress interface name, or "any".
    pub interface: String,
    pub protocol: Option<u8>,
    pub source: String,
    pub destination: String,
    pub source_ports: String,
    pub destination_ports: String,
    pub hits: u64,
}

pub struct Acl {
    compiled: Vec<Compiled>,
    /// The IPv6 prefixes of the rules that have them (`Compiled::v6`).
    v6: Vec<Compiled6>,
    rules: Vec<AclRule>,
    hits: Vec<u64>,
    /// Security level per interface index.
    levels: Vec<u8>,
    default_permits: u64,
    default_denies: u64,
    /// What the last `check` decided (the flow log names the rule).
    last: Decision,
}

impl Acl {
    /// Compile `rules` (their prefixes' host bits are ignored). A rule
    /// whose prefixes are of two families (which `Policy::build` refuses)
    /// compiles to one that matches nothing.
    pub fn new(rules: Vec<AclRule>, levels: Vec<u8>) -> Self {
        let mut v6 = Vec::new();
        let compiled = rules
            .iter()
            .map(|r| {
                let v4 = |p: RulePrefix| match p {
                    Some((IpAddr::V4(a), len)) => (u32::from(a) & mask(len), mask(len)),
                    _ => (0, 0),
                };
                let v6_of = |p: RulePrefix| match p {
                    Some((IpAddr::V6(a), len)) => (u128::from(a) & mask6(len), mask6(len)),
                    _ => (0, 0),
                };
                let family = |p: RulePrefix| p.map(|(a, _)| a.is_ipv6());
                let ((src_net, src_mask), (dst_net, dst_mask), v6_index) = match (family(r.src), family(r.dst)) {
                    (None, None) => ((0, 0), (0, 0), V6_ANY),
                    (Some(false), None) | (None, Some(false)) | (Some(false), Some(false)) => (v4(r.src), v4(r.dst), V6_NONE),
                    (Some(true), None) | (None, Some(true)) | (Some(true), Some(true)) => {
                        let ((sn, sm), (dn, dm)) = (v6_of(r.src), v6_of(r.dst));
                        v6.push(Compiled6 { src_net: sn, src_mask: sm, dst_net: dn, dst_mask: dm });
                        (NEVER4, (0, 0), (v6.len() - 1) as u32)
                    }
                    // Of two families: neither test passes.
                    (Some(_), Some(_)) => (NEVER4, (0, 0), V6_NONE),
                };
                Compiled {
                    permit: r.permit,
                    iface: r.iface,
                    protocol: r.protocol,
                    src_net,
                    src_mask,
                    dst_net,
                    dst_mask,
                    src_ports: r.src_ports,
                    dst_ports: r.dst_ports,
                    ports_any: r.src_ports == (0, u16::MAX) && r.dst_ports == (0, u16::MAX),
                    v6: v6_index,
                }
            })
            .collect();
        let hits = vec![0; rules.len()];
        Acl {
            compiled,
            v6,
            rules,
            hits,
            levels,
            default_permits: 0,
            default_denies: 0,
            last: Decision::Default { permit: false },
        }
    }

    /// The rules' names, in order.
    pub fn rule_names(&self) -> Vec<String> {
        self.rules.iter().map(|r| r.name.clone()).collect()
    }

    /// Evaluate without counting.
    #[inline]
    pub fn evaluate(&self, ingress: IfIndex, egress: IfIndex, t: &FiveTuple) -> Decision {
        // The tuple's family once, then one scan for that family.
        let hit = match (t.src, t.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                let (s, d) = (u32::from(s), u32::from(d));
                self.compiled.iter().position(|r| r.matches4(ingress, t, s, d))
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                let (s, d) = (u128::from(s), u128::from(d));
                self.compiled.iter().position(|r| r.matches6(ingress, t, s, d, &self.v6))
            }
            // A packet's tuple is of one family.
            _ => None,
        };
        if let Some((index, r)) = hit.and_then(|i| self.compiled.get(i).map(|r| (i, r))) {
            return Decision::Rule { index, permit: r.permit };
        }
        let lin = self
            .levels
            .get(usize::from(ingress.0))
            .copied()
            .unwrap_or(0);
        let lout = self
            .levels
            .get(usize::from(egress.0))
            .copied()
            .unwrap_or(u8::MAX);
        Decision::Default { permit: lin > lout }
    }

    /// Evaluate and count the hit. This is the `admit` callback body.
    #[inline]
    pub fn check(&mut self, ingress: IfIndex, egress: IfIndex, t: &FiveTuple) -> bool {
        let d = self.evaluate(ingress, egress, t);
        self.last = d;
        match d {
            Decision::Rule { index, .. } => {
                if let Some(h) = self.hits.get_mut(index) {
                    *h += 1;
                }
            }
            Decision::Default { permit: true } => self.default_permits += 1,
            Decision::Default { permit: false } => self.default_denies += 1,
        }
        d.permit()
    }

    /// The rule that decided the last `check`.
    /// The index of the rule that made the last decision (`None`: the
    /// security-level default).
    pub fn last_index(&self) -> Option<usize> {
        match self.last {
            Decision::Rule { index, .. } => Some(index),
            Decision::Default { .. } => None,
        }
    }

    pub fn last_rule(&self) -> crate::conntrack::RuleRef {
        match self.last {
            Decision::Rule { index, .. } => crate::conntrack::RuleRef::Rule(index as u32),
            Decision::Default { .. } => crate::conntrack::RuleRef::SecurityLevel,
        }
    }

    /// Take over `old`'s hit counts: of every rule equal to one of
    /// `old`'s (the first with its name), and of the security-level
    /// defaults. For a policy replacing `old`.
    pub fn carry_hits(&mut self, old: &Acl) {
        for (r, h) in self.rules.iter().zip(self.hits.iter_mut()) {
            let same = old.rules.iter().zip(&old.hits).find(|(o, _)| o.name == r.name).filter(|(o, _)| *o == r);
            if let Some((_, &hits)) = same {
                *h = hits;
            }
        }
        self.default_permits = old.default_permits;
        self.default_denies = old.default_denies;
    }

    pub fn hits(&self) -> &[u64] {
        &self.hits
    }
    /// (default permits, default denies).
    pub fn default_hits(&self) -> (u64, u64) {
        (self.default_permits, self.default_denies)
    }

    /// Rules with hit counts; `names[i]` names interface `IfIndex(i)`.
    pub fn rules(&self, names: &[String]) -> Vec<RuleInfo> {
        let prefix = |p: RulePrefix| p.map_or_else(|| "any".to_string(), |(a, len)| format!("{a}/{len}"));
        let ports = |p: (u16, u16)| {
            if p.0 == p.1 {
                p.0.to_string()
            } else {
                format!("{}-{}", p.0, p.1)
            }
        };
        self.rules
            .iter()
            .zip(&self.hits)
            .map(|(r, &hits)| RuleInfo {
                name: r.name.clone(),
                action: if r.permit { "permit" } else { "deny" },
                interface: match r.iface {
                    None => "any".to_string(),
                    Some(i) => names.get(usize::from(i.0)).cloned().unwrap_or_default(),
                },
                protocol: r.protocol,
                source: prefix(r.src),
                destination: prefix(r.dst),
                source_ports: ports(r.src_ports),
                destination_ports: ports(r.dst_ports),
                hits,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn a(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }
    fn t(src: &str, dst: &str, proto: u8, sp: u16, dp: u16) -> FiveTuple {
        FiveTuple {
            src: ip(src),
            dst: ip(dst),
            proto,
            src_port: sp,
            dst_port: dp,
        }
    }
    /// `"addr/len"` as a rule's prefix; `"any"`: none.
    fn pfx(s: &str) -> RulePrefix {
        if s == "any" {
            return None;
        }
        let (addr, len) = s.split_once('/').unwrap();
        Some((ip(addr), len.parse().unwrap()))
    }
    const ANY: (u16, u16) = (0, u16::MAX);

    fn rule(name: &str, permit: bool, protocol: Option<u8>, src: &str, dst: &str, dst_ports: (u16, u16)) -> AclRule {
        AclRule {
            name: name.into(),
            permit,
            iface: None,
            protocol,
            src: pfx(src),
            dst: pfx(dst),
            src_ports: ANY,
            dst_ports,
        }
    }

    /// The rules of config/examples/node.yaml; inside = 0 (100), outside = 1 (0).
    fn example() -> Acl {
        Acl::new(
            vec![
                AclRule {
                    name: "web-in".into(),
                    permit: true,
                    iface: Some(IfIndex(1)),
                    protocol: Some(6),
                    src: Some((IpAddr::V4(a("0.0.0.0")), 0)),
                    dst: Some((IpAddr::V4(a("198.18.1.10")), 32)),
                    src_ports: ANY,
                    dst_ports: (80, 80),
                },
                AclRule {
                    name: "no-telnet".into(),
                    permit: false,
                    iface: None,
                    protocol: Some(6),
                    src: None,
                    dst: None,
                    src_ports: ANY,
                    dst_ports: (23, 23),
                },
            ],
            vec![100, 0],
        )
    }

    #[test]
    fn first_match_and_defaults() {
        let mut acl = example();
        let (inside, outside) = (IfIndex(0), IfIndex(1));
        // web-in
        assert!(acl.check(outside, inside, &t("192.0.2.1", "198.18.1.10", 6, 4000, 80)));
        // not port 80: default deny (outside → inside)
        assert!(!acl.check(outside, inside, &t("192.0.2.1", "198.18.1.10", 6, 4000, 81)));
        // UDP to port 80: the tcp rule does not match
        assert!(!acl.check(
            outside,
            inside,
            &t("192.0.2.1", "198.18.1.10", 17, 4000, 80)
        ));
        // no-telnet beats the inside → outside default permit
        assert!(!acl.check(inside, outside, &t("198.18.1.10", "192.0.2.1", 6, 4000, 23)));
        // default permit inside → outside, ICMP too
        assert!(acl.check(inside, outside, &t("198.18.1.10", "192.0.2.1", 1, 7, 0)));
        // equal levels (hairpin): deny
        assert!(!acl.check(inside, inside, &t("198.18.1.10", "198.18.1.11", 6, 1, 2)));
        assert_eq!(acl.hits(), &[1, 1]);
        assert_eq!(acl.default_hits(), (1, 3));
        let info = acl.rules(&["inside".into(), "outside".into()]);
        assert_eq!(info[0].interface, "outside");
        assert_eq!(info[1].interface, "any");
        assert_eq!(info[0].destination_ports, "80");
        assert_eq!(info[1].action, "deny");
        assert_eq!((info[0].source.as_str(), info[0].destination.as_str()), ("0.0.0.0/0", "198.18.1.10/32"));
        assert_eq!((info[1].source.as_str(), info[1].destination.as_str()), ("any", "any"));
    }

    /// The essay's sizes: the index of the IPv6 side table made a compiled
    /// rule 36 bytes (32 before IPv6 rules), an IPv6 rule's prefixes are
    /// 64 bytes beside it.
    #[test]
    fn compiled_sizes() {
        assert_eq!((std::mem::size_of::<Compiled>(), std::mem::size_of::<Compiled6>()), (36, 64));
    }

    #[test]
    fn port_rules_skip_icmp() {
        let acl = Acl::new(vec![rule("r", true, None, "any", "any", (0, 10))], vec![0, 0]);
        assert_eq!(
            acl.evaluate(IfIndex(0), IfIndex(1), &t("1.1.1.1", "2.2.2.2", 1, 0, 0)),
            Decision::Default { permit: false }
        );
        assert_eq!(
            acl.evaluate(IfIndex(0), IfIndex(1), &t("1.1.1.1", "2.2.2.2", 17, 0, 5)),
            Decision::Rule {
                index: 0,
                permit: true
            }
        );
        // ICMPv6 (58) is no port protocol either; UDP over IPv6 is.
        assert_eq!(
            acl.evaluate(IfIndex(0), IfIndex(1), &t("2001:db8::1", "2001:db8::2", 58, 0, 0)),
            Decision::Default { permit: false }
        );
        assert!(acl.evaluate(IfIndex(0), IfIndex(1), &t("2001:db8::1", "2001:db8::2", 17, 0, 5)).permit());
    }

    /// Golden table: each rule alone (permit; the default, from level 0 to
    /// level 0, denies) against packets of both families.
    #[test]
    fn golden_rule_by_packet() {
        let v4 = |src, dst| t(src, dst, 6, 40000, 443);
        let v6 = |src, dst| t(src, dst, 6, 40000, 443);
        #[rustfmt::skip]
        let rows: &[(&str, &str, &str, FiveTuple, bool)] = &[
            // (rule source, rule destination, packet, verdict)
            ("no addresses: both families", "any", "any", v4("192.0.2.1", "198.51.100.1"), true),
            ("no addresses: both families", "any", "any", v6("2001:db8:1::1", "2001:db8:2::1"), true),
            ("IPv4 everything", "0.0.0.0/0", "any", v4("192.0.2.1", "198.51.100.1"), true),
            ("IPv4 everything: not IPv6", "0.0.0.0/0", "any", v6("2001:db8:1::1", "2001:db8:2::1"), false),
            ("IPv4 everything: not IPv6, dst", "any", "0.0.0.0/0", v6("::", "::"), false),
            ("IPv6 everything", "::/0", "any", v6("2001:db8:1::1", "2001:db8:2::1"), true),
            ("IPv6 everything: not IPv4", "::/0", "any", v4("0.0.0.0", "0.0.0.0"), false),
            ("IPv6 everything: not IPv4, dst", "any", "::/0", v4("192.0.2.1", "198.51.100.1"), false),
            ("IPv6 /64 source in", "2001:db8:1::/64", "any", v6("2001:db8:1::ffff", "2001:db8:2::1"), true),
            ("IPv6 /64 source out", "2001:db8:1::/64", "any", v6("2001:db8:1:1::1", "2001:db8:2::1"), false),
            ("IPv6 /64 destination in", "any", "2001:db8:2::/64", v6("2001:db8:1::1", "2001:db8:2::99"), true),
            ("IPv6 /64 destination out", "any", "2001:db8:2::/64", v6("2001:db8:1::1", "2001:db8:3::99"), false),
            ("IPv6 host", "any", "2001:db8:2::80/128", v6("2001:db8:1::1", "2001:db8:2::80"), true),
            ("IPv6 host: the next address", "any", "2001:db8:2::80/128", v6("2001:db8:1::1", "2001:db8:2::81"), false),
            ("IPv6 both prefixes", "2001:db8:1::/48", "2001:db8:2::/48", v6("2001:db8:1:5::1", "2001:db8:2:7::1"), true),
            ("IPv6 both prefixes, source out", "2001:db8:1::/48", "2001:db8:2::/48", v6("2001:db8:9::1", "2001:db8:2:7::1"), false),
            ("IPv6 /1", "8000::/1", "any", v6("ffff::1", "::1"), true),
            ("IPv6 /1 out", "8000::/1", "any", v6("7fff::1", "::1"), false),
            ("IPv6 /127 low bit", "any", "2001:db8::2/127", v6("::1", "2001:db8::3"), true),
            // The same 32 bits as an IPv4 prefix (2001:db8:: starts with
            // 32.1.13.184): never crosses over.
            ("IPv4 prefix of an IPv6 word", "32.1.13.184/32", "any", v6("2001:db8::1", "::1"), false),
            ("IPv6 prefix of an IPv4 word", "2001:db8::/32", "any", v4("32.1.13.184", "1.1.1.1"), false),
            ("IPv4-mapped IPv6 prefix: not IPv4", "::ffff:192.0.2.0/120", "any", v4("192.0.2.1", "1.1.1.1"), false),
            ("IPv4-mapped IPv6 prefix: an IPv6 packet", "::ffff:192.0.2.0/120", "any", v6("::ffff:192.0.2.1", "::1"), true),
            ("IPv4 /24", "192.0.2.0/24", "any", v4("192.0.2.77", "1.1.1.1"), true),
            ("IPv4 /24 out", "192.0.2.0/24", "any", v4("192.0.3.77", "1.1.1.1"), false),
            ("IPv4 host", "any", "198.51.100.7/32", v4("1.1.1.1", "198.51.100.7"), true),
            ("IPv4 host out", "any", "198.51.100.7/32", v4("1.1.1.1", "198.51.100.8"), false),
            ("mixed families match nothing (v4)", "192.0.2.0/24", "2001:db8::/32", v4("192.0.2.1", "1.1.1.1"), false),
            ("mixed families match nothing (v6)", "192.0.2.0/24", "2001:db8::/32", v6("::1", "2001:db8::1"), false),
        ];
        for (what, src, dst, pkt, want) in rows {
            let acl = Acl::new(vec![rule("r", true, None, src, dst, ANY)], vec![0, 0]);
            let got = acl.evaluate(IfIndex(0), IfIndex(1), pkt);
            let want_d = if *want { Decision::Rule { index: 0, permit: true } } else { Decision::Default { permit: false } };
            assert_eq!(got, want_d, "{what}: rule {src} -> {dst}, packet {pkt:?}");
        }
    }

    /// Ordered rules of both families: each family's first match decides,
    /// the other family's rules are stepped over; hits counted per rule.
    #[test]
    fn mixed_table_first_match_per_family() {
        let mut acl = Acl::new(
            vec![
                rule("deny-v6-host", false, Some(6), "2001:db8:1::66/128", "any", ANY),
                rule("deny-v4-net", false, Some(6), "192.0.2.0/24", "any", ANY),
                rule("web6", true, Some(6), "any", "2001:db8:2::80/128", (80, 80)),
                rule("web4", true, Some(6), "any", "198.51.100.80/32", (80, 80)),
                rule("telnet", false, Some(6), "any", "any", (23, 23)),
            ],
            vec![0, 0],
        );
        let (i, o) = (IfIndex(0), IfIndex(1));
        assert!(!acl.check(i, o, &t("2001:db8:1::66", "2001:db8:2::80", 6, 1, 80)), "denied host first");
        assert!(acl.check(i, o, &t("2001:db8:1::67", "2001:db8:2::80", 6, 1, 80)), "web6");
        assert!(!acl.check(i, o, &t("192.0.2.5", "198.51.100.80", 6, 1, 80)), "denied net first");
        assert!(acl.check(i, o, &t("192.0.3.5", "198.51.100.80", 6, 1, 80)), "web4");
        assert!(!acl.check(i, o, &t("2001:db8:1::67", "2001:db8:2::81", 6, 1, 23)), "telnet, IPv6");
        assert!(!acl.check(i, o, &t("192.0.3.5", "198.51.100.81", 6, 1, 23)), "telnet, IPv4");
        assert!(!acl.check(i, o, &t("2001:db8:1::67", "2001:db8:2::81", 6, 1, 22)), "default");
        assert_eq!(acl.hits(), &[1, 1, 1, 1, 2]);
        assert_eq!(acl.default_hits(), (0, 1));
        assert_eq!(acl.last_index(), None);
        let info = acl.rules(&["a".into(), "b".into()]);
        assert_eq!((info[0].source.as_str(), info[2].destination.as_str()), ("2001:db8:1::66/128", "2001:db8:2::80/128"));
    }

    /// The reference: a prefix of `len` bits containing `addr`, bit by bit
    /// (no masks), and only within its own family.
    fn contains(prefix: RulePrefix, addr: IpAddr) -> bool {
        let Some((net, len)) = prefix else { return true };
        let bits = |a: IpAddr| -> Vec<bool> {
            let bytes = match a {
                IpAddr::V4(a) => a.octets().to_vec(),
                IpAddr::V6(a) => a.octets().to_vec(),
            };
            bytes.iter().flat_map(|b| (0..8).rev().map(move |i| b >> i & 1 == 1)).collect()
        };
        net.is_ipv6() == addr.is_ipv6() && bits(net).iter().zip(bits(addr)).take(usize::from(len)).all(|(a, b)| *a == b)
    }

    /// An address of either family, often inside `near`'s first bits so
    /// that matches are common.
    fn addr() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<u32>().prop_map(|a| IpAddr::V4(Ipv4Addr::from(a))),
            any::<u128>().prop_map(|a| IpAddr::V6(Ipv6Addr::from(a))),
        ]
    }

    fn prefix() -> impl Strategy<Value = RulePrefix> {
        prop_oneof![
            1 => Just(None),
            3 => (any::<u32>(), 0u8..=32).prop_map(|(a, l)| Some((IpAddr::V4(Ipv4Addr::from(a)), l))),
            3 => (any::<u128>(), 0u8..=128).prop_map(|(a, l)| Some((IpAddr::V6(Ipv6Addr::from(a)), l))),
        ]
    }

    /// An address that shares `bits` leading bits with `p`'s (or any, for
    /// no prefix), of `p`'s family — or of the other one when `other`.
    fn near(p: RulePrefix, bits: u8, noise: u128, other: bool) -> IpAddr {
        match p {
            Some((IpAddr::V4(a), _)) if !other => {
                let keep = mask(bits.min(32));
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & keep | noise as u32 & !keep))
            }
            Some((IpAddr::V6(a), _)) if !other => {
                let keep = mask6(bits);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & keep | noise & !keep))
            }
            Some((IpAddr::V4(_), _)) => IpAddr::V6(Ipv6Addr::from(noise)),
            Some((IpAddr::V6(_), _)) => IpAddr::V4(Ipv4Addr::from(noise as u32)),
            None if other => IpAddr::V6(Ipv6Addr::from(noise)),
            None => IpAddr::V4(Ipv4Addr::from(noise as u32)),
        }
    }

    proptest! {
        /// For random prefixes (source, destination or both, of either
        /// family) and random tuples, many of them inside the prefixes:
        /// the compiled table matches exactly when the reference says both
        /// addresses are contained, and an IPv4 rule never matches an IPv6
        /// tuple nor an IPv6 rule an IPv4 one.
        #[test]
        fn matching_equals_reference_contains(
            src in prefix(),
            dst in prefix(),
            (sbits, dbits) in (0u8..=128, 0u8..=128),
            (snoise, dnoise) in (any::<u128>(), any::<u128>()),
            other in any::<bool>(),
            random in proptest::option::of((addr(), addr())),
        ) {
            // Policy::build refuses mixed families: keep one family.
            let dst = match (src, dst) {
                (Some((s, _)), Some((d, l))) if s.is_ipv6() != d.is_ipv6() => Some((s, l.min(32))),
                _ => dst,
            };
            let fam = src.or(dst).map(|(a, _)| a);
            let (s, d) = random.unwrap_or_else(|| {
                let other = other && fam.is_some();
                let anchor = |p: RulePrefix| p.or(fam.map(|f| (f, 0)));
                (near(anchor(src), sbits, snoise, other), near(anchor(dst), dbits, dnoise, other))
            });
            let (s, d) = if s.is_ipv6() == d.is_ipv6() { (s, d) } else { (s, s) };
            let tuple = FiveTuple { src: s, dst: d, proto: 6, src_port: 1, dst_port: 2 };
            let acl = Acl::new(vec![AclRule { src, dst, ..rule("r", true, None, "any", "any", ANY) }], vec![0, 0]);
            let matched = acl.evaluate(IfIndex(0), IfIndex(1), &tuple).permit();
            prop_assert_eq!(matched, contains(src, s) && contains(dst, d), "rule {:?} -> {:?}, tuple {} -> {}", src, dst, s, d);
            if let Some(f) = fam {
                if f.is_ipv6() != s.is_ipv6() {
                    prop_assert!(!matched, "across families");
                }
            }
        }
    }
}
