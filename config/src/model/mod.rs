//! The validated configuration handed to the node. The types of the
//! `cluster` and `neighbors` sections are in `cluster.rs` and `neighbors.rs`
//! here, public as [`crate::cluster`] and [`crate::neighbors`].
//!
//! Invariants (established by [`crate::parse`], relied on by consumers):
//! there is at least one interface; interface names are unique, match
//! `[a-z0-9_-]+` and are not `any`; interface subnets do not overlap; every
//! route's `via` lies in exactly one interface subnet and is not an interface
//! address; the same holds for IPv6: an interface's `address6` is a global
//! unicast host address with a prefix length of 1-128, no two interfaces'
//! IPv6 subnets overlap, and every [`Route6Config`]'s `via` lies in exactly
//! one interface's IPv6 subnet and is not an interface address; route
//! destinations (IPv4 and IPv6 each) are unique; every access rule's
//! `interface` names a configured interface; an access rule's `source`
//! and `destination`, where both are given, are of one family, and its
//! protocol is not the other family's ICMP (`icmp` on an IPv6 rule,
//! `icmp6` on an IPv4 one);
//! port ranges other than [`PortRange::ANY`] appear only on tcp/udp rules;
//! every number lies in the range documented on its field. Values built in
//! code (e.g. by a simulator) with `Default` satisfy the same ranges.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::net::{IpNet, Ipv4Net, Ipv6Host, Ipv6Net, PortRange, Protocol};

pub(crate) mod cluster;
pub mod export;
pub(crate) mod nat;
pub(crate) mod neighbors;
pub(crate) mod policy;

use cluster::ClusterConfig;
use nat::NatConfig;
use neighbors::NeighborConfig;

/// Default `dpdk.mbufs`.
pub const DEFAULT_MBUFS: u32 = 8191;
/// Default `dpdk.rx-descriptors` and `dpdk.tx-descriptors`.
pub const DEFAULT_DESCRIPTORS: u16 = 1024;
/// Default `dpdk.burst`.
pub const DEFAULT_BURST: u16 = 32;
/// Largest `dpdk.burst`.
pub const MAX_BURST: u16 = 256;
/// Default `dpdk.idle-sleep-us`.
pub const DEFAULT_IDLE_SLEEP_US: u32 = 200;
/// Largest `dpdk.workers`.
pub const MAX_WORKERS: u16 = 64;
/// Largest `dpdk.workers` of a cluster member: one CCL channel each
/// (`dataplane::ccl::MAX_WORKER_CHANNELS`).
pub const MAX_CLUSTER_WORKERS: u16 = 32;

/// Most workers of a node with NAT rules (a PAT pool's block map is dealt
/// over the workers: `dataplane::nat::blocks::MAX_WORKERS`).
pub const MAX_NAT_WORKERS: u16 = 32;
/// Default `flow-table.capacity` (flows per worker).
pub const DEFAULT_FLOW_CAPACITY: u32 = 262_144;
/// Smallest `flow-table.capacity`.
pub const MIN_FLOW_CAPACITY: u32 = 16;
/// Largest `flow-table.capacity` (16 Mi).
pub const MAX_FLOW_CAPACITY: u32 = 16 * 1024 * 1024;
/// Default `arp.capacity`.
pub const DEFAULT_ARP_CAPACITY: u32 = 4096;
/// Default `arp.timeout`, seconds.
pub const DEFAULT_ARP_TIMEOUT: u64 = 300;
/// Default `arp.retry`, seconds (RFC 1122 §2.3.2.1 asks for at most one
/// request per second per destination).
pub const DEFAULT_ARP_RETRY: u64 = 1;
/// Largest `security-level`.
pub const MAX_SECURITY_LEVEL: u8 = 100;
/// Default `interfaces[].mtu` (Ethernet, RFC 894).
pub const DEFAULT_MTU: u16 = 1500;
/// Smallest `interfaces[].mtu`: every IPv4 host accepts 576-byte datagrams
/// (RFC 1122 §3.3.3).
pub const MIN_MTU: u16 = 576;
/// Smallest `interfaces[].mtu` of an interface with an `address6`: every
/// IPv6 link carries 1280-byte packets (RFC 8200 §5).
pub const MIN_MTU6: u16 = 1280;
/// Largest `interfaces[].mtu` (jumbo frames).
pub const MAX_MTU: u16 = 9000;
/// Default `icmp-errors.rate` (errors per second per worker).
pub const DEFAULT_ICMP_ERROR_RATE: u32 = 100;
/// Default `icmp-errors.burst`.
pub const DEFAULT_ICMP_ERROR_BURST: u32 = 50;
/// Largest VLAN ID (IEEE 802.1Q: 0 and 4095 are reserved).
pub const MAX_VLAN: u16 = 4094;

/// `metrics`: where the node serves its counters to Prometheus.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct MetricsConfig {
    /// `metrics.listen`: `a.b.c.d:port` of the HTTP endpoint (`GET
    /// /metrics`, text format 0.0.4); none (the default): not served.
    pub listen: Option<std::net::SocketAddrV4>,
}

/// A whole node configuration. Field names mirror the YAML keys (kebab-case
/// in YAML and in the JSON produced by `Serialize`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Config {
    /// `node`: identity of this node.
    pub node: NodeConfig,
    /// `logging`.
    pub logging: LoggingConfig,
    /// `control-socket`: Unix socket of the control interface; default
    /// `/run/clusterfw/<node name>.sock`.
    pub control_socket: PathBuf,
    /// `metrics`: the Prometheus endpoint (node-local, like the control
    /// socket).
    pub metrics: MetricsConfig,
    /// `flow-export`: the IPFIX collector (none: no export; node-local).
    pub flow_export: Option<export::FlowExportConfig>,
    /// `dpdk`: EAL and port settings.
    pub dpdk: DpdkConfig,
    /// `interfaces`: at least one.
    pub interfaces: Vec<InterfaceConfig>,
    /// `routes` with an IPv4 destination: static routes; connected subnets
    /// are implicit.
    pub routes: Vec<RouteConfig>,
    /// `routes` with an IPv6 destination, in the order written (the IPv4
    /// and IPv6 entries of `routes` are split, each keeping its order).
    /// Omitted from the serialized form when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub routes6: Vec<Route6Config>,
    /// `access-rules`: ordered, first match wins.
    pub access_rules: Vec<AccessRule>,
    /// `timeouts`: idle timeouts of flows, seconds.
    pub timeouts: Timeouts,
    /// `limits`: connection limits over every connection through the
    /// firewall, cluster-wide (L1; docs/flood.md).
    pub limits: Limits,
    /// `flow-table`.
    pub flow_table: FlowTableConfig,
    /// `arp`.
    pub arp: ArpConfig,
    /// `neighbors`: static ARP entries (optional, default none).
    pub neighbors: Vec<NeighborConfig>,
    /// `icmp-errors`: the ICMP errors the node sends.
    pub icmp_errors: IcmpErrorsConfig,
    /// `cluster`: cluster bootstrap settings; `None` for a single node.
    pub cluster: Option<ClusterConfig>,
    /// `nat`: address pools and translation rules (replicated policy).
    pub nat: NatConfig,
    /// The file name the configuration was parsed from (as given).
    pub source_file: PathBuf,
    /// The original YAML text, for `show config`, with the value of
    /// `cluster.key` replaced by `<redacted>`. Not serialized.
    #[serde(skip)]
    pub source_text: String,
}

impl Config {
    /// The largest MTU of the data interfaces.
    pub fn max_mtu(&self) -> u16 {
        self.interfaces.iter().map(|i| i.mtu).max().unwrap_or(DEFAULT_MTU)
    }

    /// The interface called `name`.
    pub fn interface(&self, name: &str) -> Option<&InterfaceConfig> {
        self.interfaces.iter().find(|i| i.name == name)
    }

    /// Position of the interface called `name` in [`Config::interfaces`].
    pub fn interface_index(&self, name: &str) -> Option<usize> {
        self.interfaces.iter().position(|i| i.name == name)
    }

    /// The interface whose subnet holds `ip` (subnets do not overlap).
    pub fn connected_interface(&self, ip: Ipv4Addr) -> Option<&InterfaceConfig> {
        self.interfaces.iter().find(|i| i.subnet().contains(ip))
    }

    /// The interface whose IPv6 subnet holds `ip` (IPv6 subnets do not
    /// overlap); `None` also for an interface without `address6`.
    pub fn connected_interface6(&self, ip: Ipv6Addr) -> Option<&InterfaceConfig> {
        self.interfaces
            .iter()
            .find(|i| i.subnet6().is_some_and(|s| s.contains(ip)))
    }
}

/// `node`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeConfig {
    /// `name`: `[A-Za-z0-9_.-]+`, required.
    pub name: String,
}

/// `logging`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct LoggingConfig {
    /// `level`: default `info`.
    pub level: LogLevel,
    /// `syslog`: collectors (none by default).
    pub syslog: Vec<export::SyslogConfig>,
    /// `deny-rate`: denied-connection messages per access rule per second
    /// (0-100000, default 10; 0: none, only the per-second summaries).
    pub deny_rate: u32,
}

impl Default for LoggingConfig {
    fn default() -> Self {
        LoggingConfig { level: LogLevel::default(), syslog: Vec::new(), deny_rate: export::DEFAULT_DENY_RATE }
    }
}

/// A log level, lowest volume first.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// Informational messages (default).
    #[default]
    Info,
    /// Debugging messages.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The YAML spelling: `error`, `warn`, `info`, `debug` or `trace`.
    pub fn as_str(&self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

impl std::fmt::Display for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LogLevel {
    type Err = ();

    fn from_str(s: &str) -> Result<LogLevel, ()> {
        Ok(match s {
            "error" => LogLevel::Error,
            "warn" => LogLevel::Warn,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            "trace" => LogLevel::Trace,
            _ => return Err(()),
        })
    }
}

/// `dpdk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct DpdkConfig {
    /// `eal-args`: passed to `rte_eal_init` unchanged; default empty.
    pub eal_args: Vec<String>,
    /// `mbufs`: mbufs in the packet pool, >= 1; default 8191.
    pub mbufs: u32,
    /// `rx-descriptors`: per RX queue, >= 1; default 1024.
    pub rx_descriptors: u16,
    /// `tx-descriptors`: per TX queue, >= 1; default 1024.
    pub tx_descriptors: u16,
    /// `burst`: packets per RX/TX burst, 1-256; default 32.
    pub burst: u16,
    /// `idle-sleep-us`: longest sleep between empty polls; default 200.
    pub idle_sleep_us: u32,
    /// `workers`: worker lcores polling the ports, 1-64; default 1.
    pub workers: u16,
}

impl Default for DpdkConfig {
    fn default() -> DpdkConfig {
        DpdkConfig {
            eal_args: Vec::new(),
            mbufs: DEFAULT_MBUFS,
            rx_descriptors: DEFAULT_DESCRIPTORS,
            tx_descriptors: DEFAULT_DESCRIPTORS,
            burst: DEFAULT_BURST,
            idle_sleep_us: DEFAULT_IDLE_SLEEP_US,
            workers: 1,
        }
    }
}

/// `interfaces[].reverse-path`: anti-spoofing of what the interface
/// receives (unicast reverse-path forwarding, RFC 3704).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReversePath {
    /// A transit datagram's source must be routed back out of the
    /// interface it arrived on (the default route counts).
    #[default]
    Strict,
    /// Some route must lead back to the source.
    Loose,
    /// Not checked.
    Off,
}

/// One entry of `interfaces`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct InterfaceConfig {
    /// `name`: `[a-z0-9_-]+`, unique, not `any`.
    pub name: String,
    /// `device`: PCI address or vdev string, non-empty.
    pub device: String,
    /// The host address of `address: a.b.c.d/len`.
    pub address: Ipv4Addr,
    /// The prefix length of `address`, 0-32.
    pub prefix_len: u8,
    /// `security-level`: 0-100.
    pub security_level: u8,
    /// `vlan`: 802.1Q VLAN ID 1-4094, or `None` for untagged.
    pub vlan: Option<u16>,
    /// `mtu`: the largest IPv4 datagram the link carries, 576-9000;
    /// default 1500.
    pub mtu: u16,
    /// `reverse-path`: `strict` (default), `loose` or `off`.
    pub reverse_path: ReversePath,
    /// `address6: 2001:db8:1::1/64`: the interface's global IPv6 address
    /// and on-link prefix length (1-128), or `None` (the default): the
    /// interface does not speak IPv6. Its link-local address is not
    /// configured; it is derived from the port's MAC (EUI-64). Omitted from
    /// the serialized form when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address6: Option<Ipv6Host>,
}

impl InterfaceConfig {
    /// Whether `device` is a DPDK virtual device (`net_*` or `eth_*`), to be
    /// passed as `--vdev`, rather than a PCI address.
    pub fn is_vdev(&self) -> bool {
        self.device.starts_with("net_") || self.device.starts_with("eth_")
    }

    /// The device name without arguments: the part of `device` before the
    /// first comma (`net_af_packet0,iface=x` gives `net_af_packet0`).
    pub fn device_name(&self) -> &str {
        self.device.split(',').next().unwrap_or("")
    }

    /// The connected subnet (address with host bits cleared).
    pub fn subnet(&self) -> Ipv4Net {
        Ipv4Net::containing(self.address, self.prefix_len)
    }

    /// The connected IPv6 subnet of `address6`, if any.
    pub fn subnet6(&self) -> Option<Ipv6Net> {
        self.address6.map(|a| a.subnet())
    }
}

/// One entry of `routes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RouteConfig {
    /// `destination`: a prefix with host bits zero.
    pub destination: Ipv4Net,
    /// `via`: next hop, inside a connected subnet.
    pub via: Ipv4Addr,
}

/// One entry of `routes` whose destination is an IPv6 prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Route6Config {
    /// `destination`: an IPv6 prefix with host bits zero (`::/0` is the
    /// default route).
    pub destination: Ipv6Net,
    /// `via`: next hop, inside the IPv6 subnet of an interface's
    /// `address6`.
    pub via: Ipv6Addr,
}

/// What a matching access rule does to a new connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Allow the connection (a flow is created).
    Permit,
    /// Drop the packet.
    Deny,
}

/// One entry of `access-rules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct AccessRule {
    /// `name`: unique, non-empty; used in counters and logs.
    pub name: String,
    /// `action`: required.
    pub action: Action,
    /// `interface`: ingress interface; `None` (written `any` or omitted)
    /// matches every interface.
    pub interface: Option<String>,
    /// `protocol`: default any.
    pub protocol: Protocol,
    /// `source`: an IPv4 or IPv6 prefix; `None` (left out or written
    /// `any`) matches any address of either family.
    #[serde(serialize_with = "any_or_prefix")]
    pub source: Option<IpNet>,
    /// `destination`: as `source`.
    #[serde(serialize_with = "any_or_prefix")]
    pub destination: Option<IpNet>,
    /// `source-port`: default any; only for tcp/udp.
    pub source_port: PortRange,
    /// `destination-port`: default any; only for tcp/udp.
    pub destination_port: PortRange,
    /// `limits`: connection limits over the connections this rule
    /// permits (permit rules only).
    pub limits: Limits,
}

impl AccessRule {
    /// The family the rule's addresses restrict it to: `None` for a rule
    /// without addresses (it matches IPv4 and IPv6 packets alike).
    pub fn family(&self) -> Option<&'static str> {
        self.source.or(self.destination).map(|n| n.family())
    }
}

/// An access rule's address as `show config` prints it: `"any"` for none.
fn any_or_prefix<S: serde::Serializer>(net: &Option<IpNet>, s: S) -> Result<S::Ok, S::Error> {
    match net {
        None => s.serialize_str("any"),
        Some(n) => n.serialize(s),
    }
}

/// `limits` (globally, or of one permit rule): connection limits that hold
/// cluster-wide by estimate (SPEC L1; docs/flood.md). Each is optional (no
/// limit) and at least 1. Embryonic: a TCP connection whose handshake has
/// not completed; a client: a connection's initiating address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Limits {
    /// `max-conns`: connections at once.
    pub max_conns: Option<u32>,
    /// `max-embryonic`: embryonic connections at once.
    pub max_embryonic: Option<u32>,
    /// `per-client-max`: connections at once per client.
    pub per_client_max: Option<u32>,
    /// `per-client-embryonic-max`: embryonic connections at once per client.
    pub per_client_embryonic_max: Option<u32>,
    /// `syn-proxy`: a SYN over `max-embryonic` is answered by the SYN proxy
    /// (TCP intercept: a cookie SYN-ACK; the server sees the connection
    /// only once the client completed its handshake) instead of dropped.
    /// Default true.
    pub syn_proxy: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_conns: None, max_embryonic: None, per_client_max: None, per_client_embryonic_max: None, syn_proxy: true }
    }
}

impl Limits {
    /// No limit set (`syn-proxy` alone limits nothing).
    pub fn is_empty(&self) -> bool {
        Limits { syn_proxy: true, ..*self } == Limits::default()
    }

    /// `(YAML key, value)` of each limit, in the documented order.
    pub fn fields(&self) -> [(&'static str, Option<u32>); 4] {
        [
            ("max-conns", self.max_conns),
            ("max-embryonic", self.max_embryonic),
            ("per-client-max", self.per_client_max),
            ("per-client-embryonic-max", self.per_client_embryonic_max),
        ]
    }
}

/// `timeouts`: idle timeouts in seconds, each >= 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Timeouts {
    /// `tcp-syn`: half-open TCP; default 30.
    pub tcp_syn: u64,
    /// `tcp-established`: default 3600.
    pub tcp_established: u64,
    /// `tcp-closing`: after the first FIN; default 120.
    pub tcp_closing: u64,
    /// `tcp-closed`: after both FINs or a RST; default 10.
    pub tcp_closed: u64,
    /// `udp`: default 120.
    pub udp: u64,
    /// `icmp`: default 10.
    pub icmp: u64,
    /// `other`: other protocols; default 60.
    pub other: u64,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            tcp_syn: 30,
            tcp_established: 3600,
            tcp_closing: 120,
            tcp_closed: 10,
            udp: 120,
            icmp: 10,
            other: 60,
        }
    }
}

/// `icmp-errors`: the ICMP errors the node originates (time exceeded,
/// unreachable, fragmentation needed), per worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct IcmpErrorsConfig {
    /// `rate`: errors per second at most, 0-1000000 (0: none); default 100.
    pub rate: u32,
    /// `burst`: errors back to back at most, 1-1000000; default 50.
    pub burst: u32,
    /// `unreachable-on-deny`: answer a connection denied by policy with
    /// "administratively prohibited" (default false: drop silently).
    pub unreachable_on_deny: bool,
}

impl Default for IcmpErrorsConfig {
    fn default() -> IcmpErrorsConfig {
        IcmpErrorsConfig {
            rate: DEFAULT_ICMP_ERROR_RATE,
            burst: DEFAULT_ICMP_ERROR_BURST,
            unreachable_on_deny: false,
        }
    }
}

/// `flow-table`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FlowTableConfig {
    /// `capacity`: flows per worker, reserved at start; 16-16777216,
    /// default 262144.
    pub capacity: u32,
}

impl Default for FlowTableConfig {
    fn default() -> FlowTableConfig {
        FlowTableConfig {
            capacity: DEFAULT_FLOW_CAPACITY,
        }
    }
}

/// `arp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ArpConfig {
    /// `capacity`: entries, >= 1; default 4096.
    pub capacity: u32,
    /// `timeout`: seconds a resolved entry lives, >= 1; default 300.
    pub timeout: u64,
    /// `retry`: seconds between requests for a pending entry, >= 1;
    /// default 1.
    pub retry: u64,
}

impl Default for ArpConfig {
    fn default() -> ArpConfig {
        ArpConfig {
            capacity: DEFAULT_ARP_CAPACITY,
            timeout: DEFAULT_ARP_TIMEOUT,
            retry: DEFAULT_ARP_RETRY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(device: &str) -> InterfaceConfig {
        InterfaceConfig {
            name: "x".into(),
            device: device.into(),
            address: Ipv4Addr::new(10, 0, 0, 1),
            prefix_len: 24,
            security_level: 0,
            vlan: None,
            mtu: DEFAULT_MTU,
            reverse_path: ReversePath::Strict,
            address6: None,
        }
    }

    #[test]
    fn device_helpers() {
        let v = iface("net_af_packet0,iface=veth0");
        assert!(v.is_vdev());
        assert_eq!(v.device_name(), "net_af_packet0");
        assert!(iface("eth_ring0").is_vdev());
        let p = iface("0000:03:00.0");
        assert!(!p.is_vdev());
        assert_eq!(p.device_name(), "0000:03:00.0");
        assert_eq!(p.subnet().to_string(), "10.0.0.0/24");
        assert_eq!(p.subnet6(), None);
        let d = InterfaceConfig { address6: Some("2001:db8:1::1/64".parse().unwrap()), ..p };
        assert_eq!(d.subnet6().map(|s| s.to_string()).as_deref(), Some("2001:db8:1::/64"));
    }

    #[test]
    fn log_levels() {
        for l in [
            LogLevel::Error,
            LogLevel::Warn,
            LogLevel::Info,
            LogLevel::Debug,
            LogLevel::Trace,
        ] {
            assert_eq!(l.as_str().parse::<LogLevel>(), Ok(l));
        }
        assert_eq!(LogLevel::default(), LogLevel::Info);
    }
}
