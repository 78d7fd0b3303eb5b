//! The `nat` section (SPEC N1–N9): raw form and checks, shared by a node's
//! file and the replicated policy document.
//!
//! Checks, each an error naming the field: names unique and not empty;
//! pool entries are addresses, prefixes or `a-b` ranges, at most
//! 65 536 addresses, none in two pools; a rule's keys fit its kind
//! (`pool` for dynamic kinds, `mapped` for static ones, ports for static
//! PAT only, block settings for dynamic PAT only); interfaces known or
//! "any"; rules sharing a pool all name specific interfaces or all use
//! "any" (N1), agree on the pool's kind and, for PAT, on block size and
//! reserved ports (one block map per pool). In a cluster, the features
//! N8 excludes are refused by name; outside one, clusterfw does not have
//! them either and says so.

use serde::Deserialize;

use super::{Checker, IntOrStr, R};
use crate::error::{ErrorKind, FieldPath};
use crate::model::nat::*;
use crate::model::InterfaceConfig;
use crate::net::{Ipv4Net, Protocol};
use std::net::Ipv4Addr;
use std::str::FromStr;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a nat mapping (pools, rules)")]
pub(super) struct RawNat {
    #[serde(default, deserialize_with = "super::null_default")]
    pools: Vec<RawPool>,
    #[serde(default, deserialize_with = "super::null_default")]
    rules: Vec<RawNatRule>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a pool mapping (name, addresses)")]
struct RawPool {
    name: String,
    #[serde(default, deserialize_with = "super::null_default")]
    addresses: Vec<String>,
    /// N8: refused (named so the error can say why).
    #[serde(default)]
    round_robin: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
enum RawKind {
    StaticNat,
    StaticPat,
    DynamicNat,
    DynamicPat,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
enum RawUdpSessions {
    Dns,
    All,
    None,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a nat rule mapping")]
struct RawNatRule {
    name: String,
    kind: RawKind,
    real_interface: Option<String>,
    mapped_interface: Option<String>,
    source: Option<String>,
    pool: Option<String>,
    mapped: Option<String>,
    protocol: Option<IntOrStr>,
    real_port: Option<u64>,
    mapped_port: Option<u64>,
    block_size: Option<u64>,
    include_reserved_ports: Option<bool>,
    max_blocks_per_host: Option<u64>,
    per_session_tcp: Option<bool>,
    per_session_udp: Option<RawUdpSessions>,
    /// N8: refused.
    #[serde(default)]
    extended: bool,
    /// N8: refused.
    #[serde(default)]
    interface_pat: bool,
    /// N8 (static PAT with these inspections): refused.
    #[serde(default, deserialize_with = "super::null_default")]
    inspect: Vec<String>,
}

/// One pool entry: an address, a prefix (every address in it) or `a-b`.
fn entry_addresses(s: &str) -> Option<(u32, u32)> {
    if let Some((a, b)) = s.split_once('-') {
        let (a, b) = (Ipv4Addr::from_str(a.trim()).ok()?, Ipv4Addr::from_str(b.trim()).ok()?);
        return (a <= b).then(|| (u32::from(a), u32::from(b)));
    }
    if s.contains('/') {
        let n = Ipv4Net::from_str(s).ok()?;
        let lo = u32::from(n.addr);
        let size = 1u64 << (32 - u32::from(n.len));
        return Some((lo, (u64::from(lo) + size - 1) as u32));
    }
    Ipv4Addr::from_str(s).ok().map(|a| (u32::from(a), u32::from(a)))
}

impl Checker<'_> {
    fn nat_interface(&self, path: &FieldPath, v: Option<String>, ifaces: &[InterfaceConfig]) -> R<Option<String>> {
        match v {
            None => Ok(None),
            Some(n) if n == "any" => Ok(None),
            Some(n) if ifaces.iter().any(|o| o.name == n) => Ok(Some(n)),
            Some(n) => {
                let known = ifaces.iter().map(|o| o.name.as_str()).collect::<Vec<_>>().join(", ");
                Err(self.err(path, ErrorKind::UnknownInterface { found: n, known }))
            }
        }
    }

    /// A feature clusterfw refuses: in a cluster by N8's name for it.
    fn unsupported(&self, path: &FieldPath, feature: &'static str, cluster: bool) -> ConfigErr {
        if cluster {
            self.err(path, ErrorKind::NotInCluster { feature })
        } else {
            self.err(path, ErrorKind::Unsupported { feature })
        }
    }

    pub(super) fn nat(&self, p: &FieldPath, raw: RawNat, ifaces: &[InterfaceConfig], cluster: bool) -> R<NatConfig> {
        let pools = self.nat_pools(&p.key("pools"), raw.pools, cluster)?;
        let rp = p.key("rules");
        let mut rules: Vec<NatRule> = Vec::with_capacity(raw.rules.len());
        for (i, r) in raw.rules.into_iter().enumerate() {
            let rule = self.nat_rule(&rp.index(i), r, ifaces, &pools, cluster)?;
            if let Some(j) = rules.iter().position(|o| o.name == rule.name) {
                return Err(self.err(
                    &rp.index(i).key("name"),
                    ErrorKind::Duplicate {
                        what: "nat rule name",
                        name: rule.name,
                        first_line: self.line_of(&rp.index(j).key("name")),
                    },
                ));
            }
            // Rules sharing a pool (N1, one block map per pool).
            if let Some(pool) = &rule.pool {
                if let Some((j, first)) = rules.iter().enumerate().find(|(_, o)| o.pool.as_ref() == Some(pool)) {
                    let first_line = self.line_of(&rp.index(j).key("name"));
                    // At the rule's `pool`: what differs may be a default.
                    let mismatch = |what: &'static str| {
                        self.err(
                            &rp.index(i).key("pool"),
                            ErrorKind::NatPoolShared { pool: pool.clone(), rule: first.name.clone(), first_line, what },
                        )
                    };
                    if first.specific_interfaces() != rule.specific_interfaces() {
                        return Err(mismatch(
                            "interfaces: rules sharing a pool must all name specific interfaces or all use \"any\" (SPEC N1)",
                        ));
                    }
                    if first.kind != rule.kind {
                        return Err(mismatch("its kind: a pool is for dynamic NAT or for dynamic PAT"));
                    }
                    if first.block_size != rule.block_size {
                        return Err(mismatch("block-size: one pool, one block size"));
                    }
                    if first.include_reserved_ports != rule.include_reserved_ports {
                        return Err(mismatch("include-reserved-ports: one pool, one port range"));
                    }
                }
            }
            rules.push(rule);
        }
        Ok(NatConfig { pools, rules })
    }

    fn nat_pools(&self, p: &FieldPath, raw: Vec<RawPool>, cluster: bool) -> R<Vec<NatPool>> {
        let mut out: Vec<NatPool> = Vec::with_capacity(raw.len());
        for (i, r) in raw.into_iter().enumerate() {
            let pp = p.index(i);
            if r.name.trim().is_empty() {
                return Err(self.err(&pp.key("name"), ErrorKind::Empty));
            }
            if let Some(j) = out.iter().position(|o| o.name == r.name) {
                return Err(self.err(
                    &pp.key("name"),
                    ErrorKind::Duplicate {
                        what: "pool name",
                        name: r.name,
                        first_line: self.line_of(&p.index(j).key("name")),
                    },
                ));
            }
            if r.round_robin {
                return Err(self.unsupported(&pp.key("round-robin"), "PAT pool round-robin", cluster));
            }
            if r.addresses.is_empty() {
                return Err(self.err(&pp.key("addresses"), ErrorKind::NoEntries { what: "pool address" }));
            }
            let mut addresses: Vec<Ipv4Addr> = Vec::new();
            for (k, e) in r.addresses.iter().enumerate() {
                let ep = pp.key("addresses").index(k);
                let Some((lo, hi)) = entry_addresses(e.trim()) else {
                    return Err(self.err(
                        &ep,
                        ErrorKind::InvalidChoice {
                            found: e.clone(),
                            expected: "an address a.b.c.d, a prefix a.b.c.d/len or a range a.b.c.d-e.f.g.h",
                        },
                    ));
                };
                if u64::from(hi - lo) + 1 + addresses.len() as u64 > MAX_POOL_ADDRESSES as u64 {
                    return Err(self.err(
                        &ep,
                        ErrorKind::OutOfRange {
                            found: u64::from(hi - lo) + 1 + addresses.len() as u64,
                            min: 1,
                            max: MAX_POOL_ADDRESSES as u64,
                        },
                    ));
                }
                addresses.extend((lo..=hi).map(Ipv4Addr::from));
            }
            addresses.sort_unstable();
            let dup = addresses.windows(2).find(|w| w[0] == w[1]).map(|w| w[0]);
            let elsewhere = out.iter().find_map(|o| {
                addresses.iter().find(|a| o.addresses.binary_search(a).is_ok()).map(|a| (o.name.clone(), *a))
            });
            if let Some(a) = dup {
                return Err(self.err(
                    &pp.key("addresses"),
                    ErrorKind::Duplicate {
                        what: "pool address",
                        name: a.to_string(),
                        first_line: self.line_of(&pp.key("addresses")),
                    },
                ));
            }
            if let Some((other, a)) = elsewhere {
                let j = out.iter().position(|o| o.name == other).unwrap_or(0);
                return Err(self.err(
                    &pp.key("addresses"),
                    ErrorKind::Duplicate {
                        what: "pool address (in two pools)",
                        name: a.to_string(),
                        first_line: self.line_of(&p.index(j).key("addresses")),
                    },
                ));
            }
            out.push(NatPool { name: r.name, addresses, entries: r.addresses });
        }
        Ok(out)
    }

    fn nat_rule(
        &self,
        rp: &FieldPath,
        r: RawNatRule,
        ifaces: &[InterfaceConfig],
        pools: &[NatPool],
        cluster: bool,
    ) -> R<NatRule> {
        let kind = match r.kind {
            RawKind::StaticNat => NatKind::StaticNat,
            RawKind::StaticPat => NatKind::StaticPat,
            RawKind::DynamicNat => NatKind::DynamicNat,
            RawKind::DynamicPat => NatKind::DynamicPat,
        };
        if r.name.trim().is_empty() {
            return Err(self.err(&rp.key("name"), ErrorKind::Empty));
        }
        // The features N8 excludes, by name, before anything else.
        if r.extended {
            return Err(self.unsupported(&rp.key("extended"), "extended PAT", cluster));
        }
        if r.interface_pat {
            return Err(self.unsupported(&rp.key("interface-pat"), "interface PAT on individual interfaces", cluster));
        }
        if let Some(name) = r.inspect.first() {
            let n = name.to_ascii_lowercase();
            let listed = ["ftp", "pptp", "rsh", "sqlnet", "tftp", "xdmcp", "sip"].contains(&n.as_str());
            let path = rp.key("inspect").index(0);
            return Err(if kind == NatKind::StaticPat && listed {
                self.unsupported(
                    &path,
                    "static PAT with FTP, PPTP, RSH, SQLNET, TFTP, XDMCP or SIP inspection",
                    cluster,
                )
            } else {
                self.err(&path, ErrorKind::Unsupported { feature: "application inspection" })
            });
        }
        let needs = |key: &'static str| self.err(rp, ErrorKind::NatNeeds { kind: kind.as_str(), key });
        let not_for = |key: &'static str| self.err(&rp.key(key), ErrorKind::NatNotFor { kind: kind.as_str(), key });
        // The first key present that the rule's kind does not use.
        let refuse = |keys: &[(bool, &'static str)]| match keys.iter().find(|(present, _)| *present) {
            Some(&(_, key)) => Err(not_for(key)),
            None => Ok(()),
        };
        let real_interface = self.nat_interface(&rp.key("real-interface"), r.real_interface, ifaces)?;
        let mapped_interface = self.nat_interface(&rp.key("mapped-interface"), r.mapped_interface, ifaces)?;
        let source = match r.source.as_deref() {
            None => return Err(needs("source")),
            Some(s) => self.prefix(&rp.key("source"), Some(s))?,
        };
        let (pool, mapped) = if kind.is_dynamic() {
            if r.mapped.is_some() {
                return Err(not_for("mapped"));
            }
            let Some(name) = r.pool else {
                return Err(needs("pool"));
            };
            if !pools.iter().any(|p| p.name == name) {
                let known = pools.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ");
                return Err(self.err(&rp.key("pool"), ErrorKind::UnknownPool { found: name, known }));
            }
            (Some(name), None)
        } else {
            if r.pool.is_some() {
                return Err(not_for("pool"));
            }
            let Some(m) = r.mapped.as_deref() else {
                return Err(needs("mapped"));
            };
            let m = if m.contains('/') {
                self.prefix(&rp.key("mapped"), Some(m))?
            } else {
                let a = Ipv4Addr::from_str(m)
                    .map_err(|_| self.err(&rp.key("mapped"), ErrorKind::InvalidAddress { found: m.to_string() }))?;
                Ipv4Net::new(a, 32).map_err(|reason| {
                    self.err(&rp.key("mapped"), ErrorKind::InvalidPrefix { found: m.to_string(), reason })
                })?
            };
            if kind == NatKind::StaticPat && source.len != 32 {
                return Err(self.err(&rp.key("source"), ErrorKind::NatPrefixLength { found: source.len, expected: 32 }));
            }
            if m.len != source.len {
                return Err(
                    self.err(&rp.key("mapped"), ErrorKind::NatPrefixLength { found: m.len, expected: source.len })
                );
            }
            (None, Some(m))
        };
        // Static PAT: protocol and both ports; nobody else has them.
        let (protocol, real_port, mapped_port) = if kind == NatKind::StaticPat {
            let proto = match &r.protocol {
                None => return Err(needs("protocol")),
                Some(IntOrStr(s)) => Protocol::from_str(s).map_err(|reason| {
                    self.err(&rp.key("protocol"), ErrorKind::InvalidProtocol { found: s.clone(), reason })
                })?,
            };
            let number = match proto {
                Protocol::Number(n @ (6 | 17)) => n,
                _ => {
                    return Err(self.err(
                        &rp.key("protocol"),
                        ErrorKind::InvalidChoice {
                            found: proto.to_string(),
                            expected: "tcp or udp (static PAT maps a port)",
                        },
                    ))
                }
            };
            let Some(rport) = r.real_port else {
                return Err(needs("real-port"));
            };
            let Some(mport) = r.mapped_port else {
                return Err(needs("mapped-port"));
            };
            let rport = self.range(&rp.key("real-port"), Some(rport), 0, 1, 65_535)? as u16;
            let mport = self.range(&rp.key("mapped-port"), Some(mport), 0, 1, 65_535)? as u16;
            (Some(number), Some(rport), Some(mport))
        } else {
            refuse(&[
                (r.protocol.is_some(), "protocol"),
                (r.real_port.is_some(), "real-port"),
                (r.mapped_port.is_some(), "mapped-port"),
            ])?;
            (None, None, None)
        };
        // Block settings: dynamic PAT only.
        if kind != NatKind::DynamicPat {
            refuse(&[
                (r.block_size.is_some(), "block-size"),
                (r.include_reserved_ports.is_some(), "include-reserved-ports"),
                (r.max_blocks_per_host.is_some(), "max-blocks-per-host"),
            ])?;
        }
        if !matches!(kind, NatKind::DynamicPat | NatKind::StaticPat) {
            refuse(&[
                (r.per_session_tcp.is_some(), "per-session-tcp"),
                (r.per_session_udp.is_some(), "per-session-udp"),
            ])?;
        }
        let block_size = self.range(
            &rp.key("block-size"),
            r.block_size,
            DEFAULT_BLOCK_SIZE.into(),
            MIN_BLOCK_SIZE.into(),
            MAX_BLOCK_SIZE.into(),
        )? as u16;
        let max_blocks_per_host = match r.max_blocks_per_host {
            None => None,
            Some(v) => {
                Some(self.range(&rp.key("max-blocks-per-host"), Some(v), 0, 1, MAX_BLOCKS_PER_HOST.into())? as u16)
            }
        };
        Ok(NatRule {
            name: r.name,
            kind,
            real_interface,
            mapped_interface,
            source,
            pool,
            mapped,
            protocol,
            real_port,
            mapped_port,
            block_size,
            include_reserved_ports: r.include_reserved_ports.unwrap_or(false),
            max_blocks_per_host,
            per_session_tcp: r.per_session_tcp.unwrap_or(true),
            per_session_udp: match r.per_session_udp {
                None | Some(RawUdpSessions::Dns) => UdpSessions::Dns,
                Some(RawUdpSessions::All) => UdpSessions::All,
                Some(RawUdpSessions::None) => UdpSessions::None,
            },
        })
    }
}

type ConfigErr = crate::ConfigError;
