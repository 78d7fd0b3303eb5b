//! From YAML text to a validated [`Config`].
//!
//! Two phases. First `serde_yaml` (wrapped in `serde_path_to_error`)
//! deserializes into `Raw*` structs that mirror the YAML exactly: kebab-case
//! keys, unknown keys rejected, numbers as `u64`, addresses and ports as
//! text. Its errors carry a position and a path. Second, [`Checker`] turns
//! the raw values into typed ones and checks ranges and cross references; its
//! errors get their position from [`Locator`], which is only built when an
//! error is reported, so a valid file is parsed once. The `cluster` and
//! `neighbors` sections have their raw types and checks in `cluster.rs` and
//! `neighbors.rs` here, as methods of the same [`Checker`].
//!
//! Invariant: the first error found is returned; no input makes either phase
//! panic (no indexing or unwrapping of user-controlled values).

use std::cell::OnceCell;
use std::collections::HashMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use crate::error::{ConfigError, ErrorKind, FieldPath};
use crate::locate::Locator;
use crate::model::*;
use crate::net::{IpNet, Ipv4Net, Ipv6Host, Ipv6Net, PortRange, Protocol};

mod cluster;
mod export;
mod nat;
mod neighbors;
mod policy;

pub(crate) use policy::parse_policy;

// ---------------------------------------------------------------------------
// Phase 1: the raw document.

/// Accepts `null` (a key with no value) as the default.
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a mapping of configuration sections"
)]
struct RawConfig {
    node: RawNode,
    #[serde(default, deserialize_with = "null_default")]
    logging: RawLogging,
    #[serde(default)]
    control_socket: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    metrics: RawMetrics,
    #[serde(default)]
    flow_export: Option<export::RawFlowExport>,
    #[serde(default, deserialize_with = "null_default")]
    dpdk: RawDpdk,
    interfaces: Option<Vec<RawInterface>>,
    #[serde(default, deserialize_with = "null_default")]
    routes: Vec<RawRoute>,
    #[serde(default, deserialize_with = "null_default")]
    access_rules: Vec<RawRule>,
    #[serde(default, deserialize_with = "null_default")]
    timeouts: RawTimeouts,
    #[serde(default, deserialize_with = "null_default")]
    limits: RawLimits,
    #[serde(default, deserialize_with = "null_default")]
    flow_table: RawFlowTable,
    #[serde(default, deserialize_with = "null_default")]
    arp: RawArp,
    #[serde(default, deserialize_with = "null_default")]
    neighbors: Vec<neighbors::RawNeighbor>,
    #[serde(default, deserialize_with = "null_default")]
    icmp_errors: RawIcmpErrors,
    #[serde(default)]
    cluster: Option<cluster::RawCluster>,
    #[serde(default, deserialize_with = "null_default")]
    nat: nat::RawNat,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a mapping of icmp-errors settings (rate, burst, unreachable-on-deny)"
)]
struct RawIcmpErrors {
    rate: Option<u64>,
    burst: Option<u64>,
    #[serde(default)]
    unreachable_on_deny: bool,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a mapping with key `name`"
)]
struct RawNode {
    name: String,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a mapping of logging settings (level, syslog, deny-rate)"
)]
struct RawLogging {
    #[serde(default)]
    level: LogLevel,
    #[serde(default, deserialize_with = "null_default")]
    syslog: Vec<export::RawSyslog>,
    deny_rate: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", expecting = "a mapping of metrics settings")]
struct RawMetrics {
    #[serde(default)]
    listen: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a mapping of dpdk settings"
)]
struct RawDpdk {
    #[serde(default, deserialize_with = "null_default")]
    eal_args: Vec<String>,
    mbufs: Option<u64>,
    rx_descriptors: Option<u64>,
    tx_descriptors: Option<u64>,
    burst: Option<u64>,
    idle_sleep_us: Option<u64>,
    workers: Option<u64>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "an interface mapping (name, device, address, address6, security-level, vlan, mtu, reverse-path)"
)]
struct RawInterface {
    name: String,
    device: String,
    address: String,
    #[serde(default)]
    address6: Option<String>,
    security_level: u64,
    #[serde(default)]
    vlan: Option<u64>,
    #[serde(default)]
    mtu: Option<u64>,
    #[serde(default)]
    reverse_path: ReversePath,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a route mapping (destination, via)"
)]
struct RawRoute {
    destination: String,
    via: String,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "an access rule mapping (name, action, interface, protocol, source, destination, source-port, destination-port, limits)"
)]
struct RawRule {
    name: String,
    action: Action,
    #[serde(default)]
    interface: Option<String>,
    #[serde(default)]
    protocol: Option<IntOrStr>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    destination: Option<String>,
    #[serde(default)]
    source_port: Option<IntOrStr>,
    #[serde(default)]
    destination_port: Option<IntOrStr>,
    #[serde(default, deserialize_with = "null_default")]
    limits: RawLimits,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a mapping of connection limits (max-conns, max-embryonic, per-client-max, per-client-embryonic-max, syn-proxy)"
)]
pub(crate) struct RawLimits {
    max_conns: Option<u64>,
    max_embryonic: Option<u64>,
    per_client_max: Option<u64>,
    per_client_embryonic_max: Option<u64>,
    syn_proxy: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a mapping of timeouts in seconds"
)]
struct RawTimeouts {
    tcp_syn: Option<u64>,
    tcp_established: Option<u64>,
    tcp_closing: Option<u64>,
    tcp_closed: Option<u64>,
    udp: Option<u64>,
    icmp: Option<u64>,
    other: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a mapping with key `capacity`"
)]
struct RawFlowTable {
    capacity: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(
    deny_unknown_fields,
    rename_all = "kebab-case",
    expecting = "a mapping of arp settings (capacity, timeout, retry)"
)]
struct RawArp {
    capacity: Option<u64>,
    timeout: Option<u64>,
    retry: Option<u64>,
}

/// A scalar written either as an integer or a string (ports, protocols),
/// kept as text.
struct IntOrStr(String);

impl<'de> Deserialize<'de> for IntOrStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<IntOrStr, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = IntOrStr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an integer or a string")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IntOrStr, E> {
                Ok(IntOrStr(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IntOrStr, E> {
                Ok(IntOrStr(v.to_string()))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<IntOrStr, E> {
                Ok(IntOrStr(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// Messages that `serde` itself produces for shape errors; any other error
/// at the document root comes from the YAML parser.
const SCHEMA_PHRASES: &[&str] = &[
    "missing field",
    "unknown field",
    "duplicate field",
    "invalid type",
    "invalid value",
    "invalid length",
    "unknown variant",
    "an integer or a string",
];

fn serde_error(
    src: &str,
    file: &str,
    e: serde_path_to_error::Error<serde_yaml::Error>,
) -> ConfigError {
    let mut path = FieldPath::from_serde(e.path());
    let inner = e.into_inner();
    let mut msg = inner.to_string();
    let mut pos = inner.location().map(|l| (l.line(), l.column()));
    if let Some((line, column)) = pos {
        // serde_yaml appends the position (mid-message for parser errors
        // that add context); we report it separately.
        let at = format!(" at line {line} column {column}");
        msg = match msg.strip_suffix(&at) {
            Some(m) => m.to_string(),
            None => msg.replacen(&format!("{at}, "), ", ", 1),
        };
    }
    // serde_yaml prefixes its own path (the same or an ancestor of ours).
    for r in path.renderings() {
        if let Some(rest) = msg.strip_prefix(&format!("{r}: ")) {
            msg = rest.to_string();
            break;
        }
    }
    let locator = OnceCell::new();
    let locator = || locator.get_or_init(|| Locator::new(src));
    if let Some(key) = msg
        .strip_prefix("duplicate field `")
        .and_then(|r| r.strip_suffix('`'))
    {
        // Point at the second occurrence rather than at the mapping.
        if let Some(p) = locator().locate_key(&path, key, 1) {
            pos = Some((p.line, p.column));
            path = path.key(key);
        }
    }
    if msg.contains("more than one document") {
        if let Some(p) = locator().second_document() {
            pos = Some((p.line, p.column));
        }
        msg = "expected a single YAML document, found more than one".to_string();
    }
    let (line, column) = pos.unwrap_or_else(|| {
        let p = locator().locate(&path);
        (p.line, p.column)
    });
    let is_schema = SCHEMA_PHRASES.iter().any(|p| msg.starts_with(p))
        || msg.starts_with("expected a single YAML document");
    let kind = if is_schema {
        ErrorKind::Schema(msg)
    } else {
        // The deserializer's path says where it was when the text broke, not
        // what is wrong; the position is what matters.
        path = FieldPath::root();
        ErrorKind::Syntax(msg)
    };
    ConfigError::new(file, line, column, &path, kind)
}

// ---------------------------------------------------------------------------
// Phase 2: typed values and cross checks.

pub(crate) struct Checker<'a> {
    src: &'a str,
    file: &'a str,
    locator: OnceCell<Locator>,
}

type R<T> = Result<T, ConfigError>;

impl Checker<'_> {
    fn locator(&self) -> &Locator {
        self.locator.get_or_init(|| Locator::new(self.src))
    }

    pub(crate) fn err(&self, path: &FieldPath, kind: ErrorKind) -> ConfigError {
        let p = self.locator().locate(path);
        ConfigError::new(self.file, p.line, p.column, path, kind)
    }

    pub(crate) fn line_of(&self, path: &FieldPath) -> usize {
        self.locator().locate(path).line
    }

    /// `v` (or `default` if absent) checked against `min..=max`.
    pub(crate) fn range(
        &self,
        path: &FieldPath,
        v: Option<u64>,
        default: u64,
        min: u64,
        max: u64,
    ) -> R<u64> {
        let v = v.unwrap_or(default);
        if v < min || v > max {
            return Err(self.err(path, ErrorKind::OutOfRange { found: v, min, max }));
        }
        Ok(v)
    }

    fn prefix(&self, path: &FieldPath, s: Option<&str>) -> R<Ipv4Net> {
        match s {
            None => Ok(Ipv4Net::ANY),
            Some(s) => Ipv4Net::from_str(s).map_err(|reason| {
                self.err(
                    path,
                    ErrorKind::InvalidPrefix {
                        found: s.to_string(),
                        reason,
                    },
                )
            }),
        }
    }

    /// An access rule's `source` or `destination`: left out or `any` is
    /// `None` (any address of either family); with a `:` an IPv6 prefix,
    /// else an IPv4 one; host bits zero.
    fn rule_prefix(&self, path: &FieldPath, s: Option<&str>) -> R<Option<IpNet>> {
        match s {
            None | Some("any") => Ok(None),
            Some(s) if s.contains(':') => Ipv6Net::from_str(s).map(|n| Some(IpNet::V6(n))).map_err(|reason| {
                self.err(
                    path,
                    ErrorKind::InvalidPrefix6 {
                        found: s.to_string(),
                        reason,
                    },
                )
            }),
            Some(s) => self.prefix(path, Some(s)).map(|n| Some(IpNet::V4(n))),
        }
    }

    fn ports(&self, path: &FieldPath, s: Option<&IntOrStr>) -> R<PortRange> {
        match s {
            None => Ok(PortRange::ANY),
            Some(IntOrStr(s)) => PortRange::from_str(s).map_err(|reason| {
                self.err(
                    path,
                    ErrorKind::InvalidPortRange {
                        found: s.clone(),
                        reason,
                    },
                )
            }),
        }
    }

    fn check(&self, raw: RawConfig) -> R<Config> {
        let root = FieldPath::root();

        let name_path = root.key("node").key("name");
        let name = raw.node.name;
        if name.is_empty() {
            return Err(self.err(&name_path, ErrorKind::Empty));
        }
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            return Err(self.err(
                &name_path,
                ErrorKind::InvalidName {
                    found: name,
                    expected: "letters, digits, '_', '-' or '.'",
                },
            ));
        }

        let control_socket = match raw.control_socket {
            Some(s) if s.is_empty() => {
                return Err(self.err(&root.key("control-socket"), ErrorKind::Empty));
            }
            Some(s) => PathBuf::from(s),
            None => PathBuf::from(format!("/run/clusterfw/{name}.sock")),
        };

        let metrics = MetricsConfig { listen: self.listen_address(&root.key("metrics").key("listen"), raw.metrics.listen)? };
        let lp = root.key("logging");
        let logging = LoggingConfig {
            level: raw.logging.level,
            syslog: self.syslog(&lp.key("syslog"), raw.logging.syslog)?,
            deny_rate: self.range(
                &lp.key("deny-rate"),
                raw.logging.deny_rate,
                crate::model::export::DEFAULT_DENY_RATE.into(),
                0,
                100_000,
            )? as u32,
        };
        let flow_export = self.flow_export(&root.key("flow-export"), raw.flow_export)?;
        let dpdk = self.dpdk(&root.key("dpdk"), raw.dpdk)?;
        let interfaces = self.interfaces(&root.key("interfaces"), raw.interfaces)?;
        let (routes, routes6) = self.routes(&root.key("routes"), raw.routes, &interfaces)?;
        let access_rules = self.rules(&root.key("access-rules"), raw.access_rules, &interfaces)?;
        let neighbors = self.neighbors(&root.key("neighbors"), raw.neighbors, &interfaces)?;
        let ep = root.key("icmp-errors");
        let icmp_errors = IcmpErrorsConfig {
            rate: self.range(&ep.key("rate"), raw.icmp_errors.rate, DEFAULT_ICMP_ERROR_RATE.into(), 0, 1_000_000)? as u32,
            burst: self.range(&ep.key("burst"), raw.icmp_errors.burst, DEFAULT_ICMP_ERROR_BURST.into(), 1, 1_000_000)?
                as u32,
            unreachable_on_deny: raw.icmp_errors.unreachable_on_deny,
        };
        let nat = self.nat(&root.key("nat"), raw.nat, &interfaces, raw.cluster.is_some())?;
        let cluster = match raw.cluster {
            None => None,
            Some(c) => Some(self.cluster(&root.key("cluster"), c, &name, &interfaces)?),
        };
        if cluster.is_some() && dpdk.workers > crate::model::MAX_CLUSTER_WORKERS {
            return Err(self.err(
                &root.key("dpdk").key("workers"),
                ErrorKind::ClusterWorkers { workers: dpdk.workers, max: crate::model::MAX_CLUSTER_WORKERS },
            ));
        }

        if !nat.rules.is_empty() && dpdk.workers > crate::model::MAX_NAT_WORKERS {
            return Err(self.err(
                &root.key("dpdk").key("workers"),
                ErrorKind::NatWorkers { workers: dpdk.workers, max: crate::model::MAX_NAT_WORKERS },
            ));
        }
        let timeouts = self.timeouts(&root.key("timeouts"), raw.timeouts)?;
        let limits = self.limits(&root.key("limits"), raw.limits)?;

        let flow_table = FlowTableConfig {
            capacity: self.range(
                &root.key("flow-table").key("capacity"),
                raw.flow_table.capacity,
                DEFAULT_FLOW_CAPACITY.into(),
                MIN_FLOW_CAPACITY.into(),
                MAX_FLOW_CAPACITY.into(),
            )? as u32,
        };

        let ap = root.key("arp");
        let arp = ArpConfig {
            capacity: self.range(
                &ap.key("capacity"),
                raw.arp.capacity,
                DEFAULT_ARP_CAPACITY.into(),
                1,
                u32::MAX.into(),
            )? as u32,
            timeout: self.range(
                &ap.key("timeout"),
                raw.arp.timeout,
                DEFAULT_ARP_TIMEOUT,
                1,
                u64::MAX,
            )?,
            retry: self.range(
                &ap.key("retry"),
                raw.arp.retry,
                DEFAULT_ARP_RETRY,
                1,
                u64::MAX,
            )?,
        };

        Ok(Config {
            node: NodeConfig { name },
            logging,
            control_socket,
            metrics,
            flow_export,
            dpdk,
            interfaces,
            routes,
            routes6,
            access_rules,
            timeouts,
            limits,
            flow_table,
            arp,
            neighbors,
            icmp_errors,
            source_file: PathBuf::from(self.file),
            source_text: match &cluster {
                Some(c) => cluster::redact(self.src, c.key.expose(), self.locator()),
                None => self.src.to_string(),
            },
            cluster,
            nat,
        })
    }

    fn timeouts(&self, tp: &FieldPath, t: RawTimeouts) -> R<Timeouts> {
        let d = Timeouts::default();
        let secs = |k: &str, v: Option<u64>, def: u64| self.range(&tp.key(k), v, def, 1, u64::MAX);
        Ok(Timeouts {
            tcp_syn: secs("tcp-syn", t.tcp_syn, d.tcp_syn)?,
            tcp_established: secs("tcp-established", t.tcp_established, d.tcp_established)?,
            tcp_closing: secs("tcp-closing", t.tcp_closing, d.tcp_closing)?,
            tcp_closed: secs("tcp-closed", t.tcp_closed, d.tcp_closed)?,
            udp: secs("udp", t.udp, d.udp)?,
            icmp: secs("icmp", t.icmp, d.icmp)?,
            other: secs("other", t.other, d.other)?,
        })
    }

    /// `limits` (global or a rule's): each absent or 1..=2^32-1.
    pub(crate) fn limits(&self, p: &FieldPath, raw: RawLimits) -> R<Limits> {
        let one = |k: &str, v: Option<u64>| -> R<Option<u32>> {
            v.map(|v| self.range(&p.key(k), Some(v), 0, 1, u64::from(u32::MAX)).map(|v| v as u32)).transpose()
        };
        Ok(Limits {
            max_conns: one("max-conns", raw.max_conns)?,
            max_embryonic: one("max-embryonic", raw.max_embryonic)?,
            per_client_max: one("per-client-max", raw.per_client_max)?,
            per_client_embryonic_max: one("per-client-embryonic-max", raw.per_client_embryonic_max)?,
            syn_proxy: raw.syn_proxy.unwrap_or(true),
        })
    }

    /// `a.b.c.d:port` (port 1-65535), or nothing.
    fn listen_address(&self, p: &FieldPath, raw: Option<String>) -> R<Option<std::net::SocketAddrV4>> {
        raw.map(|text| self.socket_address(p, text)).transpose()
    }

    /// `a.b.c.d:port` (port 1-65535).
    fn socket_address(&self, p: &FieldPath, text: String) -> R<std::net::SocketAddrV4> {
        match text.trim().parse::<std::net::SocketAddrV4>() {
            Ok(a) if a.port() != 0 => Ok(a),
            _ => Err(self.err(p, ErrorKind::InvalidSocketAddress { found: text })),
        }
    }

    fn dpdk(&self, p: &FieldPath, raw: RawDpdk) -> R<DpdkConfig> {
        Ok(DpdkConfig {
            eal_args: raw.eal_args,
            mbufs: self.range(
                &p.key("mbufs"),
                raw.mbufs,
                DEFAULT_MBUFS.into(),
                1,
                u32::MAX.into(),
            )? as u32,
            rx_descriptors: self.range(
                &p.key("rx-descriptors"),
                raw.rx_descriptors,
                DEFAULT_DESCRIPTORS.into(),
                1,
                u16::MAX.into(),
            )? as u16,
            tx_descriptors: self.range(
                &p.key("tx-descriptors"),
                raw.tx_descriptors,
                DEFAULT_DESCRIPTORS.into(),
                1,
                u16::MAX.into(),
            )? as u16,
            burst: self.range(
                &p.key("burst"),
                raw.burst,
                DEFAULT_BURST.into(),
                1,
                MAX_BURST.into(),
            )? as u16,
            idle_sleep_us: self.range(
                &p.key("idle-sleep-us"),
                raw.idle_sleep_us,
                DEFAULT_IDLE_SLEEP_US.into(),
                0,
                u32::MAX.into(),
            )? as u32,
            workers: self.range(&p.key("workers"), raw.workers, 1, 1, MAX_WORKERS.into())? as u16,
        })
    }

    fn interfaces(&self, p: &FieldPath, raw: Option<Vec<RawInterface>>) -> R<Vec<InterfaceConfig>> {
        let raw = raw.unwrap_or_default();
        if raw.is_empty() {
            return Err(self.err(p, ErrorKind::NoEntries { what: "interface" }));
        }
        let mut out: Vec<InterfaceConfig> = Vec::with_capacity(raw.len());
        for (i, r) in raw.into_iter().enumerate() {
            let ip = p.index(i);
            let np = ip.key("name");
            if r.name.is_empty() {
                return Err(self.err(&np, ErrorKind::Empty));
            }
            if r.name == "any"
                || !r
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
            {
                return Err(self.err(
                    &np,
                    ErrorKind::InvalidName {
                        found: r.name,
                        expected: "lowercase letters, digits, '_' or '-', and not \"any\"",
                    },
                ));
            }
            if let Some(j) = out.iter().position(|o| o.name == r.name) {
                return Err(self.err(
                    &np,
                    ErrorKind::Duplicate {
                        what: "interface name",
                        name: r.name,
                        first_line: self.line_of(&p.index(j).key("name")),
                    },
                ));
            }
            if r.device.trim().is_empty() {
                return Err(self.err(&ip.key("device"), ErrorKind::Empty));
            }
            let ap = ip.key("address");
            let (address, prefix_len) = Ipv4Net::parse_host(&r.address).map_err(|reason| {
                self.err(
                    &ap,
                    ErrorKind::InvalidPrefix {
                        found: r.address.clone(),
                        reason,
                    },
                )
            })?;
            let host_err = |reason| {
                self.err(
                    &ap,
                    ErrorKind::InvalidHostAddress {
                        found: r.address.clone(),
                        reason,
                    },
                )
            };
            if address.is_unspecified() || address.is_broadcast() || address.is_multicast() {
                return Err(host_err("not a unicast address"));
            }
            let subnet = Ipv4Net::containing(address, prefix_len);
            if prefix_len <= 30 && address == subnet.addr {
                return Err(host_err("this is the subnet's network address"));
            }
            if prefix_len <= 30 && address == subnet.broadcast() {
                return Err(host_err("this is the subnet's broadcast address"));
            }
            if let Some(o) = out.iter().find(|o| o.subnet().overlaps(&subnet)) {
                return Err(self.err(
                    &ap,
                    ErrorKind::OverlappingSubnets {
                        subnet,
                        other: o.subnet(),
                        other_interface: o.name.clone(),
                    },
                ));
            }
            let address6 = match &r.address6 {
                None => None,
                Some(text) => Some(self.interface_address6(&ip.key("address6"), text, p, &out)?),
            };
            let security_level = self.range(
                &ip.key("security-level"),
                Some(r.security_level),
                0,
                0,
                MAX_SECURITY_LEVEL.into(),
            )? as u8;
            let vlan = match r.vlan {
                None => None,
                v => Some(self.range(&ip.key("vlan"), v, 1, 1, MAX_VLAN.into())? as u16),
            };
            let mtu = self.range(&ip.key("mtu"), r.mtu, DEFAULT_MTU.into(), MIN_MTU.into(), MAX_MTU.into())? as u16;
            if address6.is_some() && mtu < MIN_MTU6 {
                return Err(self.err(&ip.key("mtu"), ErrorKind::Ipv6MtuTooSmall { mtu, min: MIN_MTU6 }));
            }
            let iface = InterfaceConfig {
                name: r.name,
                device: r.device,
                address,
                prefix_len,
                security_level,
                vlan,
                mtu,
                reverse_path: r.reverse_path,
                address6,
            };
            if let Some(o) = out
                .iter()
                .find(|o| o.device_name() == iface.device_name() && o.vlan == iface.vlan)
            {
                return Err(self.err(
                    &ip.key("device"),
                    ErrorKind::DuplicateDevice {
                        device: iface.device_name().to_string(),
                        vlan: iface.vlan.map(|v| format!(" vlan {v}")).unwrap_or_default(),
                        other_interface: o.name.clone(),
                    },
                ));
            }
            out.push(iface);
        }
        Ok(out)
    }

    /// `interfaces[i].address6` (at `ap`), checked against the interfaces
    /// before it (`earlier`, listed at `list`): a global unicast host
    /// address, and neither it nor its subnet taken by another interface.
    fn interface_address6(
        &self,
        ap: &FieldPath,
        text: &str,
        list: &FieldPath,
        earlier: &[InterfaceConfig],
    ) -> R<Ipv6Host> {
        let host = Ipv6Host::from_str(text).map_err(|reason| {
            self.err(
                ap,
                ErrorKind::InvalidPrefix6 {
                    found: text.to_string(),
                    reason,
                },
            )
        })?;
        if let Some(reason) = host6_problem(host.addr, host.len) {
            return Err(self.err(
                ap,
                ErrorKind::InvalidHostAddress {
                    found: text.to_string(),
                    reason,
                },
            ));
        }
        if let Some(j) = earlier
            .iter()
            .position(|o| o.address6.is_some_and(|a| a.addr == host.addr))
        {
            return Err(self.err(
                ap,
                ErrorKind::Duplicate {
                    what: "interface address6",
                    name: host.addr.to_string(),
                    first_line: self.line_of(&list.index(j).key("address6")),
                },
            ));
        }
        let subnet = host.subnet();
        if let Some((o, other)) = earlier
            .iter()
            .filter_map(|o| o.subnet6().map(|s| (o, s)))
            .find(|(_, s)| s.overlaps(&subnet))
        {
            return Err(self.err(
                ap,
                ErrorKind::OverlappingSubnets6 {
                    subnet,
                    other,
                    other_interface: o.name.clone(),
                },
            ));
        }
        Ok(host)
    }

    /// `routes`, split by the destination's family (a destination with a
    /// `:` is IPv6), each keeping the order written.
    fn routes(
        &self,
        p: &FieldPath,
        raw: Vec<RawRoute>,
        ifaces: &[InterfaceConfig],
    ) -> R<(Vec<RouteConfig>, Vec<Route6Config>)> {
        let mut out: Vec<RouteConfig> = Vec::with_capacity(raw.len());
        let mut out6: Vec<Route6Config> = Vec::new();
        let mut seen: HashMap<Ipv4Net, usize> = HashMap::new();
        let mut seen6: HashMap<Ipv6Net, usize> = HashMap::new();
        for (i, r) in raw.into_iter().enumerate() {
            let rp = p.index(i);
            let dp = rp.key("destination");
            let vp = rp.key("via");
            // The same destination as route `j`'s.
            let dup = |j: usize, name: String| {
                self.err(
                    &dp,
                    ErrorKind::Duplicate {
                        what: "route destination",
                        name,
                        first_line: self.line_of(&p.index(j).key("destination")),
                    },
                )
            };
            let mismatch = |via_family, destination_family| {
                self.err(
                    &vp,
                    ErrorKind::RouteFamilyMismatch {
                        via: r.via.clone(),
                        via_family,
                        destination: r.destination.clone(),
                        destination_family,
                    },
                )
            };
            if r.destination.contains(':') {
                let destination = Ipv6Net::from_str(&r.destination).map_err(|reason| {
                    self.err(
                        &dp,
                        ErrorKind::InvalidPrefix6 {
                            found: r.destination.clone(),
                            reason,
                        },
                    )
                })?;
                if let Some(&j) = seen6.get(&destination) {
                    return Err(dup(j, destination.to_string()));
                }
                seen6.insert(destination, i);
                let via = match Ipv6Addr::from_str(&r.via) {
                    Ok(v) => v,
                    Err(_) if Ipv4Addr::from_str(&r.via).is_ok() => return Err(mismatch("IPv4", "IPv6")),
                    Err(_) => {
                        return Err(self.err(
                            &vp,
                            ErrorKind::InvalidAddress6 {
                                found: r.via.clone(),
                            },
                        ))
                    }
                };
                if let Some(o) = ifaces
                    .iter()
                    .find(|o| o.address6.is_some_and(|a| a.addr == via))
                {
                    return Err(self.err(
                        &vp,
                        ErrorKind::NextHopIsLocal6 {
                            via,
                            interface: o.name.clone(),
                        },
                    ));
                }
                if !ifaces
                    .iter()
                    .any(|o| o.subnet6().is_some_and(|s| s.contains(via)))
                {
                    let mut connected = ifaces
                        .iter()
                        .filter_map(|o| o.subnet6().map(|s| s.to_string()))
                        .collect::<Vec<_>>()
                        .join(", ");
                    if connected.is_empty() {
                        connected = "none, no interface has an address6".to_string();
                    }
                    return Err(self.err(&vp, ErrorKind::NotConnected6 { via, connected }));
                }
                out6.push(Route6Config { destination, via });
                continue;
            }
            let destination = self.prefix(&dp, Some(&r.destination))?;
            if let Some(&j) = seen.get(&destination) {
                return Err(dup(j, destination.to_string()));
            }
            seen.insert(destination, i);
            let via = match Ipv4Addr::from_str(&r.via) {
                Ok(v) => v,
                Err(_) if Ipv6Addr::from_str(&r.via).is_ok() => return Err(mismatch("IPv6", "IPv4")),
                Err(_) => {
                    return Err(self.err(
                        &vp,
                        ErrorKind::InvalidAddress {
                            found: r.via.clone(),
                        },
                    ))
                }
            };
            if let Some(o) = ifaces.iter().find(|o| o.address == via) {
                return Err(self.err(
                    &vp,
                    ErrorKind::NextHopIsLocal {
                        via,
                        interface: o.name.clone(),
                    },
                ));
            }
            if !ifaces.iter().any(|o| o.subnet().contains(via)) {
                let connected = ifaces
                    .iter()
                    .map(|o| o.subnet().to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(self.err(&vp, ErrorKind::NotConnected { via, connected }));
            }
            out.push(RouteConfig { destination, via });
        }
        Ok((out, out6))
    }

    fn rules(
        &self,
        p: &FieldPath,
        raw: Vec<RawRule>,
        ifaces: &[InterfaceConfig],
    ) -> R<Vec<AccessRule>> {
        let mut out: Vec<AccessRule> = Vec::with_capacity(raw.len());
        for (i, r) in raw.into_iter().enumerate() {
            let rp = p.index(i);
            let np = rp.key("name");
            if r.name.trim().is_empty() {
                return Err(self.err(&np, ErrorKind::Empty));
            }
            if let Some(j) = out.iter().position(|o| o.name == r.name) {
                return Err(self.err(
                    &np,
                    ErrorKind::Duplicate {
                        what: "rule name",
                        name: r.name,
                        first_line: self.line_of(&p.index(j).key("name")),
                    },
                ));
            }
            let interface = match r.interface {
                None => None,
                Some(n) if n == "any" => None,
                Some(n) if ifaces.iter().any(|o| o.name == n) => Some(n),
                Some(n) => {
                    let known = ifaces
                        .iter()
                        .map(|o| o.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(self.err(
                        &rp.key("interface"),
                        ErrorKind::UnknownInterface { found: n, known },
                    ));
                }
            };
            let protocol = match &r.protocol {
                None => Protocol::Any,
                Some(IntOrStr(s)) => Protocol::from_str(s).map_err(|reason| {
                    self.err(
                        &rp.key("protocol"),
                        ErrorKind::InvalidProtocol {
                            found: s.clone(),
                            reason,
                        },
                    )
                })?,
            };
            let source = self.rule_prefix(&rp.key("source"), r.source.as_deref())?;
            let dp = rp.key("destination");
            let destination = self.rule_prefix(&dp, r.destination.as_deref())?;
            if let (Some(s), Some(d)) = (source, destination) {
                if s.family() != d.family() {
                    return Err(self.err(
                        &dp,
                        ErrorKind::RuleFamilyMismatch {
                            src: r.source.clone().unwrap_or_default(),
                            source_family: s.family(),
                            destination: r.destination.clone().unwrap_or_default(),
                            destination_family: d.family(),
                        },
                    ));
                }
            }
            let family = source.or(destination).map(|n| n.family());
            let icmp = match (protocol, family) {
                (Protocol::ICMP, Some("IPv6")) => Some(("icmp", "IPv4", "IPv6", "icmp6 (58)")),
                (Protocol::ICMP6, Some("IPv4")) => Some(("icmp6", "IPv6", "IPv4", "icmp (1)")),
                _ => None,
            };
            if let Some((protocol, protocol_family, family, instead)) = icmp {
                return Err(self.err(
                    &rp.key("protocol"),
                    ErrorKind::RuleIcmpFamily { protocol, protocol_family, family, instead },
                ));
            }
            let spp = rp.key("source-port");
            let dpp = rp.key("destination-port");
            let source_port = self.ports(&spp, r.source_port.as_ref())?;
            let destination_port = self.ports(&dpp, r.destination_port.as_ref())?;
            if !protocol.has_ports() {
                for (present, path) in [
                    (r.source_port.is_some(), &spp),
                    (r.destination_port.is_some(), &dpp),
                ] {
                    if present {
                        return Err(self.err(
                            path,
                            ErrorKind::PortsWithoutTransport {
                                protocol: protocol.to_string(),
                            },
                        ));
                    }
                }
            }
            let lp = rp.key("limits");
            let limits = self.limits(&lp, r.limits)?;
            if !limits.is_empty() && r.action == Action::Deny {
                return Err(self.err(&lp, ErrorKind::LimitsOnDeny));
            }
            out.push(AccessRule {
                name: r.name,
                action: r.action,
                interface,
                protocol,
                source,
                destination,
                source_port,
                destination_port,
                limits,
            });
        }
        Ok(out)
    }
}

/// Why `addr/len` is not usable as an interface's IPv6 address, if it is
/// not: the length must be 1-128 and the address global unicast (not
/// unspecified, loopback, multicast, link-local or IPv4-mapped), and for
/// lengths up to /126 not the subnet-router anycast address (RFC 4291
/// §2.6.1: the subnet prefix with the host bits zero).
pub(crate) fn host6_problem(addr: Ipv6Addr, len: u8) -> Option<&'static str> {
    if len == 0 {
        return Some("prefix length must be 1-128");
    }
    if addr.is_unspecified() || addr.is_multicast() {
        return Some("not a unicast address");
    }
    if addr.is_loopback() {
        return Some("the loopback address ::1 is not an interface address");
    }
    if Ipv6Net::containing(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10).contains(addr) {
        return Some("a link-local address (fe80::/10) is not configured: the interface's link-local address is derived from its port's MAC (EUI-64)");
    }
    if Ipv6Net::containing(Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96).contains(addr) {
        return Some("an IPv4-mapped address (::ffff:0:0/96) is not an IPv6 interface address");
    }
    if len <= 126 && Ipv6Net::containing(addr, len).addr == addr {
        return Some("this is the subnet-router anycast address (host bits all zero)");
    }
    None
}

/// See [`crate::parse`].
pub(crate) fn parse(src: &str, file: &str) -> Result<Config, ConfigError> {
    let de = serde_yaml::Deserializer::from_str(src);
    let raw: RawConfig =
        serde_path_to_error::deserialize(de).map_err(|e| serde_error(src, file, e))?;
    Checker {
        src,
        file,
        locator: OnceCell::new(),
    }
    .check(raw)
}
