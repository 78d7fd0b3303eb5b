//! The replicated part of a configuration (SPEC M6): what every member of a
//! cluster runs as the control node has it, public as [`crate::policy`]
//! (whose module essay says what is replicated and what stays local); the
//! checks that build a [`Policy`] from its own YAML document are in
//! `validate/policy.rs`.

use std::fmt::Write;

use super::nat::{NatConfig, NatKind};
use super::{AccessRule, Action, Config, InterfaceConfig, Limits, Timeouts};
use crate::net::{PortRange, Protocol};

/// The cluster-wide policy: each interface's security level (by interface
/// name), the ordered access rules, the idle timeouts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    /// `interfaces[].security-level` by interface name, in the order of
    /// the interfaces of the node that wrote it.
    pub security_levels: Vec<(String, u8)>,
    /// `access-rules`, in order.
    pub access_rules: Vec<AccessRule>,
    /// `timeouts`.
    pub timeouts: Timeouts,
    /// `limits` (the global connection limits; a rule's are in the rule).
    pub limits: Limits,
    /// `nat`.
    pub nat: NatConfig,
}

/// The first line of every policy document [`Policy::to_yaml`] writes.
pub const POLICY_HEADER: &str = "# clusterfw replicated configuration: security levels, access rules, timeouts";

/// A string as a YAML double-quoted scalar (JSON's escaping is YAML's).
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl Policy {
    /// The policy as the YAML document that replicates it: `interfaces`
    /// (name and security level only), `access-rules` (fields at their
    /// default left out), `timeouts` (all seven). The same policy always
    /// gives the same bytes (its digest identifies it), and
    /// [`crate::parse_policy`] reads it back to an equal `Policy`.
    pub fn to_yaml(&self) -> String {
        let mut y = String::new();
        y.push_str(POLICY_HEADER);
        y.push_str("\ninterfaces:\n");
        for (name, level) in &self.security_levels {
            let _ = writeln!(y, "  - name: {}\n    security-level: {level}", quoted(name));
        }
        if self.access_rules.is_empty() {
            y.push_str("access-rules: []\n");
        } else {
            y.push_str("access-rules:\n");
        }
        for r in &self.access_rules {
            let action = match r.action {
                Action::Permit => "permit",
                Action::Deny => "deny",
            };
            let _ = writeln!(y, "  - name: {}\n    action: {action}", quoted(&r.name));
            if let Some(i) = &r.interface {
                let _ = writeln!(y, "    interface: {}", quoted(i));
            }
            if r.protocol != Protocol::Any {
                let _ = writeln!(y, "    protocol: {}", quoted(&r.protocol.to_string()));
            }
            for (key, net) in [("source", r.source), ("destination", r.destination)] {
                if let Some(net) = net {
                    let _ = writeln!(y, "    {key}: {}", quoted(&net.to_string()));
                }
            }
            for (key, ports) in [("source-port", r.source_port), ("destination-port", r.destination_port)] {
                if ports != PortRange::ANY {
                    let _ = writeln!(y, "    {key}: {}", quoted(&ports.to_string()));
                }
            }
            limits_yaml(&mut y, "    ", &r.limits);
        }
        let t = &self.timeouts;
        let _ = write!(
            y,
            "timeouts:\n  tcp-syn: {}\n  tcp-established: {}\n  tcp-closing: {}\n  tcp-closed: {}\n  \
             udp: {}\n  icmp: {}\n  other: {}\n",
            t.tcp_syn, t.tcp_established, t.tcp_closing, t.tcp_closed, t.udp, t.icmp, t.other
        );
        limits_yaml(&mut y, "", &self.limits);
        if !self.nat.is_empty() {
            nat_yaml(&mut y, &self.nat);
        }
        y
    }

    /// The security level this policy gives interface `name`.
    pub fn security_level(&self, name: &str) -> Option<u8> {
        self.security_levels.iter().find(|(n, _)| n == name).map(|&(_, l)| l)
    }
}

impl Config {
    /// The replicated part of this configuration.
    pub fn policy(&self) -> Policy {
        Policy {
            security_levels: self.interfaces.iter().map(|i| (i.name.clone(), i.security_level)).collect(),
            access_rules: self.access_rules.clone(),
            timeouts: self.timeouts,
            limits: self.limits,
            nat: self.nat.clone(),
        }
    }

    /// This configuration running `policy` instead of its own (the
    /// interfaces' security levels, the access rules and the timeouts
    /// replaced; an interface `policy` does not name keeps its level).
    pub fn with_policy(&self, policy: &Policy) -> Config {
        let mut c = self.clone();
        for i in &mut c.interfaces {
            if let Some(l) = policy.security_level(&i.name) {
                i.security_level = l;
            }
        }
        c.access_rules = policy.access_rules.clone();
        c.timeouts = policy.timeouts;
        c.limits = policy.limits;
        c.nat = policy.nat.clone();
        c
    }

    /// The sections outside the replicated policy in which `other`
    /// differs from this configuration, by YAML key (`interfaces` for a
    /// change of anything but a security level). The node reads these
    /// only at start, so a reload refuses a file that changes them.
    pub fn local_changes(&self, other: &Config) -> Vec<&'static str> {
        let iface = |i: &InterfaceConfig| InterfaceConfig { security_level: 0, ..i.clone() };
        let mut out = Vec::new();
        let mut differs = |key: &'static str, d: bool| {
            if d {
                out.push(key);
            }
        };
        differs("node", self.node != other.node);
        differs("logging", self.logging != other.logging);
        differs("control-socket", self.control_socket != other.control_socket);
        differs("metrics", self.metrics != other.metrics);
        differs("flow-export", self.flow_export != other.flow_export);
        differs("dpdk", self.dpdk != other.dpdk);
        differs(
            "interfaces",
            self.interfaces.len() != other.interfaces.len()
                || self.interfaces.iter().zip(&other.interfaces).any(|(a, b)| iface(a) != iface(b)),
        );
        differs("routes", self.routes != other.routes || self.routes6 != other.routes6);
        differs("flow-table", self.flow_table != other.flow_table);
        differs("arp", self.arp != other.arp);
        differs("neighbors", self.neighbors != other.neighbors);
        differs("icmp-errors", self.icmp_errors != other.icmp_errors);
        differs("cluster", self.cluster != other.cluster);
        out
    }
}

/// A `limits` mapping at `indent` (nothing when no limit is set; the
/// limits set, in the documented order).
fn limits_yaml(y: &mut String, indent: &str, l: &Limits) {
    if l.is_empty() && l.syn_proxy {
        return;
    }
    let _ = writeln!(y, "{indent}limits:");
    for (key, v) in l.fields() {
        if let Some(v) = v {
            let _ = writeln!(y, "{indent}  {key}: {v}");
        }
    }
    if !l.syn_proxy {
        let _ = writeln!(y, "{indent}  syn-proxy: false");
    }
}

/// The `nat` section as YAML (keys at their default left out, pools with
/// their entries as written).
fn nat_yaml(y: &mut String, nat: &NatConfig) {
    y.push_str("nat:\n  pools:");
    y.push_str(if nat.pools.is_empty() { " []\n" } else { "\n" });
    for p in &nat.pools {
        let _ = writeln!(y, "    - name: {}\n      addresses:", quoted(&p.name));
        for e in &p.entries {
            let _ = writeln!(y, "        - {}", quoted(e));
        }
    }
    y.push_str("  rules:");
    y.push_str(if nat.rules.is_empty() { " []\n" } else { "\n" });
    for r in &nat.rules {
        let _ = writeln!(
            y,
            "    - name: {}\n      kind: {}",
            quoted(&r.name),
            r.kind.as_str()
        );
        for (key, i) in [
            ("real-interface", &r.real_interface),
            ("mapped-interface", &r.mapped_interface),
        ] {
            let _ = writeln!(y, "      {key}: {}", quoted(i.as_deref().unwrap_or("any")));
        }
        let _ = writeln!(y, "      source: {}", quoted(&r.source.to_string()));
        if let Some(p) = &r.pool {
            let _ = writeln!(y, "      pool: {}", quoted(p));
        }
        if let Some(m) = r.mapped {
            let _ = writeln!(y, "      mapped: {}", quoted(&m.to_string()));
        }
        if let (Some(proto), Some(rp), Some(mp)) = (r.protocol, r.real_port, r.mapped_port) {
            let _ = writeln!(
                y,
                "      protocol: {proto}\n      real-port: {rp}\n      mapped-port: {mp}"
            );
        }
        if r.kind == NatKind::DynamicPat {
            let _ = writeln!(
                y,
                "      block-size: {}\n      include-reserved-ports: {}",
                r.block_size, r.include_reserved_ports
            );
            if let Some(m) = r.max_blocks_per_host {
                let _ = writeln!(y, "      max-blocks-per-host: {m}");
            }
        }
        if matches!(r.kind, NatKind::DynamicPat | NatKind::StaticPat) {
            let _ = writeln!(
                y,
                "      per-session-tcp: {}\n      per-session-udp: {}",
                r.per_session_tcp,
                r.per_session_udp.as_str()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_quoted_as_yaml_reads_them() {
        assert_eq!(quoted("inside"), "\"inside\"");
        assert_eq!(quoted("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(quoted("tab\there"), "\"tab\\u0009here\"");
        let v: String = serde_yaml::from_str(&quoted("x: \"y\"\n\u{7f}é")).unwrap();
        assert_eq!(v, "x: \"y\"\n\u{7f}é");
    }
}
