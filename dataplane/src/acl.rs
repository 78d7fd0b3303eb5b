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
//! - **Default** when no rule matches: permit if the ingress interface's
//!   security level is strictly greater than the egress interface's, deny
//!   otherwise (equal levels are denied, including hairpinning back out of
//!   the ingress interface). The two defaults have their own hit counters.
//!
//! Invariants: `check` does not allocate; rules are compiled once into
//! host-order masks; the rule list is immutable after `Acl::new` (a new
//! policy is a new `Acl`, `Pipeline::set_policy`).

use crate::route::{mask, IfIndex};
use crate::types::{ip_proto, FiveTuple};
use std::net::{IpAddr, Ipv4Addr};

/// One rule, with interface names already resolved to indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclRule {
    pub name: String,
    pub permit: bool,
    pub iface: Option<IfIndex>,
    pub protocol: Option<u8>,
    pub src: (Ipv4Addr, u8),
    pub dst: (Ipv4Addr, u8),
    pub src_ports: (u16, u16),
    pub dst_ports: (u16, u16),
}

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
}

impl Compiled {
    #[inline]
    fn matches(&self, ingress: IfIndex, t: &FiveTuple) -> bool {
        if self.iface.is_some_and(|i| i != ingress) {
            return false;
        }
        if self.protocol.is_some_and(|p| p != t.proto) {
            return false;
        }
        let (src, dst) = match (t.src, t.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (u32::from(s), u32::from(d)),
            // IPv6: a rule without addresses applies (its protocol and
            // ports as for IPv4); one with IPv4 prefixes does not.
            _ if self.src_mask == 0 && self.dst_mask == 0 => (0, 0),
            _ => return false,
        };
        if src & self.src_mask != self.src_net || dst & self.dst_mask != self.dst_net {
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
    pub fn new(rules: Vec<AclRule>, levels: Vec<u8>) -> Self {
        let compiled = rules
            .iter()
            .map(|r| {
                let (sm, dm) = (mask(r.src.1), mask(r.dst.1));
                Compiled {
                    permit: r.permit,
                    iface: r.iface,
                    protocol: r.protocol,
                    src_net: u32::from(r.src.0) & sm,
                    src_mask: sm,
                    dst_net: u32::from(r.dst.0) & dm,
                    dst_mask: dm,
                    src_ports: r.src_ports,
                    dst_ports: r.dst_ports,
                    ports_any: r.src_ports == (0, u16::MAX) && r.dst_ports == (0, u16::MAX),
                }
            })
            .collect();
        let hits = vec![0; rules.len()];
        Acl {
            compiled,
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
        for (index, r) in self.compiled.iter().enumerate() {
            if r.matches(ingress, t) {
                return Decision::Rule {
                    index,
                    permit: r.permit,
                };
            }
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
                source: format!("{}/{}", r.src.0, r.src.1),
                destination: format!("{}/{}", r.dst.0, r.dst.1),
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

    fn a(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }
    fn t(src: &str, dst: &str, proto: u8, sp: u16, dp: u16) -> FiveTuple {
        FiveTuple {
            src: IpAddr::V4(a(src)),
            dst: IpAddr::V4(a(dst)),
            proto,
            src_port: sp,
            dst_port: dp,
        }
    }
    const ANY: (u16, u16) = (0, u16::MAX);

    /// The rules of config/examples/node.yaml; inside = 0 (100), outside = 1 (0).
    fn example() -> Acl {
        Acl::new(
            vec![
                AclRule {
                    name: "web-in".into(),
                    permit: true,
                    iface: Some(IfIndex(1)),
                    protocol: Some(6),
                    src: (a("0.0.0.0"), 0),
                    dst: (a("198.18.1.10"), 32),
                    src_ports: ANY,
                    dst_ports: (80, 80),
                },
                AclRule {
                    name: "no-telnet".into(),
                    permit: false,
                    iface: None,
                    protocol: Some(6),
                    src: (a("0.0.0.0"), 0),
                    dst: (a("0.0.0.0"), 0),
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
    }

    #[test]
    fn port_rules_skip_icmp() {
        let acl = Acl::new(
            vec![AclRule {
                name: "r".into(),
                permit: true,
                iface: None,
                protocol: None,
                src: (a("0.0.0.0"), 0),
                dst: (a("0.0.0.0"), 0),
                src_ports: ANY,
                dst_ports: (0, 10),
            }],
            vec![0, 0],
        );
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
    }
}
