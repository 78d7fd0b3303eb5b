//! The `cluster:` section from its raw form: [`RawCluster`] mirrors the
//! YAML, [`Checker::cluster`] checks it against the rules listed in
//! [`crate::cluster`] and builds the [`ClusterConfig`]. Also the redaction
//! of the key in the source text kept for `show config`.

use std::net::Ipv4Addr;
use std::str::FromStr;

use serde::Deserialize;

use super::Checker;
use crate::error::{ErrorKind, FieldPath};
use crate::locate::Locator;
use crate::model::cluster::{
    CclConfig, ClusterConfig, MemberConfig, Secret, SplitBrain, CCL_INTERFACE, CCL_OVERHEAD, DEFAULT_DEBOUNCE_MS,
    DEFAULT_HEARTBEAT_MS, DEFAULT_HOLD_MS, DEFAULT_SYNC_TIMEOUT_MS, HOLD_HEARTBEATS, MAX_DEBOUNCE_MS,
    MAX_HEARTBEAT_MS, MAX_HOLD_MS, MAX_NODE_ID, MAX_PRIORITY, MAX_SYNC_TIMEOUT_MS, MIN_HEARTBEAT_MS,
    MIN_HOLD_MS, MIN_KEY_LEN, MIN_PRIORITY, MIN_QUORUM_MEMBERS, MIN_SYNC_TIMEOUT_MS, REDACTED,
};
use crate::model::{InterfaceConfig, DEFAULT_MTU, MAX_MTU, MIN_MTU};
use crate::net::Ipv4Net;

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a cluster mapping (name, key, node-id, priority, site-id, chassis-id, tcp-sequence-randomization, ccl, members, heartbeat-interval, hold-time, backups, split-brain, director-localization, site-redundancy, interface-debounce, sync-timeout)"
)]
pub(crate) struct RawCluster {
    name: String,
    key: String,
    node_id: u64,
    priority: u64,
    #[serde(default)]
    site_id: Option<u64>,
    #[serde(default)]
    chassis_id: Option<u64>,
    #[serde(default)]
    tcp_sequence_randomization: Option<bool>,
    ccl: RawCcl,
    members: Option<Vec<RawMember>>,
    #[serde(default)]
    heartbeat_interval: Option<u64>,
    #[serde(default)]
    hold_time: Option<u64>,
    #[serde(default)]
    backups: Option<u64>,
    #[serde(default)]
    split_brain: Option<String>,
    #[serde(default)]
    director_localization: Option<bool>,
    #[serde(default)]
    site_redundancy: Option<bool>,
    #[serde(default)]
    interface_debounce: Option<u64>,
    #[serde(default)]
    sync_timeout: Option<u64>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a ccl mapping (device, address)"
)]
struct RawCcl {
    device: String,
    address: String,
    #[serde(default)]
    mtu: Option<u64>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a member mapping (id, name, ccl-address)"
)]
struct RawMember {
    id: u64,
    name: String,
    ccl_address: String,
}

fn valid_name(s: &str) -> bool {
    s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

impl Checker<'_> {
    pub(crate) fn cluster(
        &self,
        p: &FieldPath,
        raw: RawCluster,
        node_name: &str,
        ifaces: &[InterfaceConfig],
    ) -> Result<ClusterConfig, crate::ConfigError> {
        let np = p.key("name");
        if raw.name.is_empty() {
            return Err(self.err(&np, ErrorKind::Empty));
        }
        if !valid_name(&raw.name) {
            return Err(self.err(
                &np,
                ErrorKind::InvalidName {
                    found: raw.name,
                    expected: "letters, digits, '_', '-' or '.'",
                },
            ));
        }
        let key_len = raw.key.chars().count();
        if key_len < MIN_KEY_LEN {
            return Err(self.err(
                &p.key("key"),
                ErrorKind::KeyTooShort {
                    length: key_len,
                    min: MIN_KEY_LEN,
                },
            ));
        }
        let node_id = self.range(&p.key("node-id"), Some(raw.node_id), 0, 0, MAX_NODE_ID.into())? as u8;
        let priority = self.range(
            &p.key("priority"),
            Some(raw.priority),
            0,
            MIN_PRIORITY.into(),
            MAX_PRIORITY.into(),
        )? as u8;
        let site_id = match raw.site_id {
            None => None,
            v => Some(self.range(&p.key("site-id"), v, 1, 1, 255)? as u8),
        };
        let chassis_id = match raw.chassis_id {
            None => None,
            v => Some(self.range(&p.key("chassis-id"), v, 1, 1, 255)? as u8),
        };

        // The CCL port.
        let cp = p.key("ccl");
        if raw.ccl.device.trim().is_empty() {
            return Err(self.err(&cp.key("device"), ErrorKind::Empty));
        }
        let ap = cp.key("address");
        let (address, prefix_len) = Ipv4Net::parse_host(&raw.ccl.address).map_err(|reason| {
            self.err(
                &ap,
                ErrorKind::InvalidPrefix {
                    found: raw.ccl.address.clone(),
                    reason,
                },
            )
        })?;
        if let Some(reason) = host_problem(address, prefix_len) {
            return Err(self.err(
                &ap,
                ErrorKind::InvalidHostAddress {
                    found: raw.ccl.address.clone(),
                    reason,
                },
            ));
        }
        // The CCL carries whole data frames wrapped in its headers.
        let need = u64::from(ifaces.iter().map(|i| i.mtu).max().unwrap_or(DEFAULT_MTU)) + u64::from(CCL_OVERHEAD);
        let mp = cp.key("mtu");
        let mtu = self.range(&mp, raw.ccl.mtu, need, u64::from(MIN_MTU), u64::from(MAX_MTU) + u64::from(CCL_OVERHEAD))?;
        if mtu < need {
            return Err(self.err(
                &mp,
                ErrorKind::CclMtuTooSmall { found: mtu, need, data_mtu: need - u64::from(CCL_OVERHEAD) },
            ));
        }
        let ccl = CclConfig {
            device: raw.ccl.device,
            address,
            prefix_len,
            mtu: mtu as u16,
        };
        let subnet = ccl.subnet();
        if let Some(o) = ifaces.iter().find(|o| o.subnet().overlaps(&subnet)) {
            return Err(self.err(
                &ap,
                ErrorKind::OverlappingSubnets {
                    subnet,
                    other: o.subnet(),
                    other_interface: o.name.clone(),
                },
            ));
        }
        if let Some(o) = ifaces.iter().find(|o| o.device_name() == ccl.device_name()) {
            return Err(self.err(
                &cp.key("device"),
                ErrorKind::DuplicateDevice {
                    device: ccl.device_name().to_string(),
                    vlan: String::new(),
                    other_interface: o.name.clone(),
                },
            ));
        }
        if let Some(i) = ifaces.iter().position(|o| o.name == CCL_INTERFACE) {
            return Err(self.err(
                &FieldPath::root().key("interfaces").index(i).key("name"),
                ErrorKind::ReservedName {
                    name: CCL_INTERFACE,
                    why: "the node gives this name to the CCL port when a cluster is configured",
                },
            ));
        }

        // Members.
        let mp = p.key("members");
        let raw_members = raw.members.unwrap_or_default();
        if raw_members.is_empty() {
            return Err(self.err(&mp, ErrorKind::NoEntries { what: "member" }));
        }
        let mut members: Vec<MemberConfig> = Vec::with_capacity(raw_members.len());
        for (i, r) in raw_members.into_iter().enumerate() {
            let ep = mp.index(i);
            let idp = ep.key("id");
            let id = self.range(&idp, Some(r.id), 0, 0, MAX_NODE_ID.into())? as u8;
            if let Some(j) = members.iter().position(|m| m.id == id) {
                return Err(self.err(
                    &idp,
                    ErrorKind::Duplicate {
                        what: "member id",
                        name: id.to_string(),
                        first_line: self.line_of(&mp.index(j).key("id")),
                    },
                ));
            }
            let enp = ep.key("name");
            if r.name.is_empty() {
                return Err(self.err(&enp, ErrorKind::Empty));
            }
            if !valid_name(&r.name) {
                return Err(self.err(
                    &enp,
                    ErrorKind::InvalidName {
                        found: r.name,
                        expected: "letters, digits, '_', '-' or '.'",
                    },
                ));
            }
            if let Some(j) = members.iter().position(|m| m.name == r.name) {
                return Err(self.err(
                    &enp,
                    ErrorKind::Duplicate {
                        what: "member name",
                        name: r.name,
                        first_line: self.line_of(&mp.index(j).key("name")),
                    },
                ));
            }
            let cap = ep.key("ccl-address");
            let ccl_address = Ipv4Addr::from_str(&r.ccl_address).map_err(|_| {
                self.err(
                    &cap,
                    ErrorKind::InvalidAddress {
                        found: r.ccl_address.clone(),
                    },
                )
            })?;
            if !subnet.contains(ccl_address) {
                return Err(self.err(
                    &cap,
                    ErrorKind::NotInCclSubnet {
                        addr: ccl_address,
                        subnet,
                    },
                ));
            }
            if let Some(reason) = host_problem(ccl_address, prefix_len) {
                return Err(self.err(
                    &cap,
                    ErrorKind::InvalidHostAddress {
                        found: r.ccl_address.clone(),
                        reason,
                    },
                ));
            }
            if let Some(j) = members.iter().position(|m| m.ccl_address == ccl_address) {
                return Err(self.err(
                    &cap,
                    ErrorKind::Duplicate {
                        what: "member ccl-address",
                        name: ccl_address.to_string(),
                        first_line: self.line_of(&mp.index(j).key("ccl-address")),
                    },
                ));
            }
            if id == node_id && ccl_address != ccl.address {
                return Err(self.err(
                    &cap,
                    ErrorKind::SelfMemberMismatch {
                        what: "ccl-address",
                        found: ccl_address.to_string(),
                        expected: format!("{} (cluster.ccl.address)", ccl.address),
                    },
                ));
            }
            if id == node_id && r.name != node_name {
                return Err(self.err(
                    &enp,
                    ErrorKind::SelfMemberMismatch {
                        what: "name",
                        found: r.name,
                        expected: format!("{node_name} (node.name)"),
                    },
                ));
            }
            if id != node_id && ccl_address == ccl.address {
                return Err(self.err(
                    &cap,
                    ErrorKind::CclAddressOfThisNode {
                        addr: ccl_address,
                        node_id,
                        id,
                    },
                ));
            }
            members.push(MemberConfig {
                id,
                name: r.name,
                ccl_address,
            });
        }
        if !members.iter().any(|m| m.id == node_id) {
            let ids = members
                .iter()
                .map(|m| m.id.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(self.err(&mp, ErrorKind::SelfNotAMember { node_id, ids }));
        }

        // Membership timers and failover settings.
        let heartbeat_interval_ms = self.range(
            &p.key("heartbeat-interval"),
            raw.heartbeat_interval,
            DEFAULT_HEARTBEAT_MS,
            MIN_HEARTBEAT_MS,
            MAX_HEARTBEAT_MS,
        )?;
        let hp = p.key("hold-time");
        let hold_time_ms = self.range(&hp, raw.hold_time, DEFAULT_HOLD_MS, MIN_HOLD_MS, MAX_HOLD_MS)?;
        if hold_time_ms < HOLD_HEARTBEATS * heartbeat_interval_ms {
            return Err(self.err(
                &hp,
                ErrorKind::HoldTimeTooShort {
                    hold_ms: hold_time_ms,
                    heartbeats: HOLD_HEARTBEATS,
                    interval_ms: heartbeat_interval_ms,
                },
            ));
        }
        let backups = self.range(&p.key("backups"), raw.backups, 1, 1, 2)? as u8;
        let sp = p.key("split-brain");
        let split_brain = match raw.split_brain.as_deref() {
            None | Some("elect") => SplitBrain::Elect,
            Some("quorum") => SplitBrain::Quorum,
            Some(other) => {
                return Err(self.err(
                    &sp,
                    ErrorKind::InvalidChoice { found: other.to_string(), expected: "elect or quorum" },
                ))
            }
        };
        if split_brain == SplitBrain::Quorum && members.len() < MIN_QUORUM_MEMBERS {
            return Err(self.err(
                &sp,
                ErrorKind::QuorumTooFewMembers { members: members.len(), min: MIN_QUORUM_MEMBERS },
            ));
        }
        // Director localization (R12) and site redundancy (R4) rest on
        // site ids: this node must have one (the others' arrive with the
        // member set; a member without one uses the global director only).
        let director_localization = raw.director_localization.unwrap_or(false);
        let site_redundancy = raw.site_redundancy.unwrap_or(false);
        let sited = [
            (director_localization, "director-localization", "cluster.director-localization"),
            (site_redundancy, "site-redundancy", "cluster.site-redundancy"),
        ];
        if let Some(&(_, key, setting)) = sited.iter().find(|s| s.0 && site_id.is_none()) {
            return Err(self.err(&p.key(key), ErrorKind::NeedsSiteId { setting }));
        }
        let interface_debounce_ms =
            self.range(&p.key("interface-debounce"), raw.interface_debounce, DEFAULT_DEBOUNCE_MS, 0, MAX_DEBOUNCE_MS)?;
        let sync_timeout_ms = self.range(
            &p.key("sync-timeout"),
            raw.sync_timeout,
            DEFAULT_SYNC_TIMEOUT_MS,
            MIN_SYNC_TIMEOUT_MS,
            MAX_SYNC_TIMEOUT_MS,
        )?;

        Ok(ClusterConfig {
            name: raw.name,
            key: Secret::new(raw.key),
            node_id,
            priority,
            site_id,
            chassis_id,
            tcp_sequence_randomization: raw.tcp_sequence_randomization.unwrap_or(true),
            ccl,
            members,
            heartbeat_interval_ms,
            hold_time_ms,
            backups,
            split_brain,
            director_localization,
            site_redundancy,
            interface_debounce_ms,
            sync_timeout_ms,
        })
    }
}

/// Why `addr` in a `/len` subnet is not a usable host address, if it is not.
pub(crate) fn host_problem(addr: Ipv4Addr, len: u8) -> Option<&'static str> {
    if addr.is_unspecified() || addr.is_broadcast() || addr.is_multicast() {
        return Some("not a unicast address");
    }
    let subnet = Ipv4Net::containing(addr, len);
    if len <= 30 && addr == subnet.addr {
        return Some("this is the subnet's network address");
    }
    if len <= 30 && addr == subnet.broadcast() {
        return Some("this is the subnet's broadcast address");
    }
    None
}

/// `src` with the value of `cluster.key` replaced by [`REDACTED`]: the line
/// of the key (block style) loses its value and any continuation lines, and
/// every literal occurrence of the key elsewhere is replaced too.
pub(crate) fn redact(src: &str, key: &str, locator: &Locator) -> String {
    let mut text = src.to_string();
    let path = FieldPath::root().key("cluster");
    if let Some(pos) = locator.locate_key(&path, "key", 0) {
        let lines: Vec<&str> = src.split_inclusive('\n').collect();
        if let Some(line) = lines.get(pos.line.wrapping_sub(1)) {
            let indent: usize = pos.column.saturating_sub(1);
            let body: String = line.chars().skip(indent).collect();
            let head: String = line.chars().take(indent).collect();
            if body.starts_with("key:") && head.trim().is_empty() {
                let eol = if line.ends_with("\r\n") {
                    "\r\n"
                } else if line.ends_with('\n') {
                    "\n"
                } else {
                    ""
                };
                let mut out = String::with_capacity(src.len());
                for l in &lines[..pos.line - 1] {
                    out.push_str(l);
                }
                out.push_str(&format!("{head}key: \"{REDACTED}\"{eol}"));
                // Continuation lines of a multi-line value are more indented
                // than the key (blank lines included).
                let rest = &lines[pos.line..];
                let mut skip = 0;
                for (i, l) in rest.iter().enumerate() {
                    let t = l.trim_end_matches(['\r', '\n']);
                    if t.trim().is_empty() {
                        continue;
                    }
                    if t.chars().take_while(|c| *c == ' ').count() > indent {
                        skip = i + 1;
                    } else {
                        break;
                    }
                }
                for l in &rest[skip..] {
                    out.push_str(l);
                }
                text = out;
            }
        }
    }
    if !key.is_empty() {
        text = text.replace(key, REDACTED);
    }
    text
}
