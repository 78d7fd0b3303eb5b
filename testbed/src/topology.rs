//! What the test bed is made of, as data.
//!
//! `up` walks a [`Topology`] and `down` walks the [`crate::state::State`]
//! recorded from it; neither knows the single-node layout. A larger bed (three
//! nodes behind ECMP routers, a CCL bridge) is another constructor here that
//! fills in more namespaces, links, routes and bridges.
//!
//! Invariants: every namespace name starts with [`NS_PREFIX`] (so `up` can
//! find and remove leftovers of a crashed run); every veth lives inside a
//! namespace the bed made, never in the root namespace; an interface name is
//! unique within its namespace.

use anyhow::{bail, Context, Result};

/// Prefix of every namespace the test bed makes.
pub const NS_PREFIX: &str = "cfw-";
/// Prefix of the DPDK `--file-prefix` of every node (its runtime directory is
/// `/var/run/dpdk/<prefix>`).
pub const DPDK_PREFIX: &str = "cfw-tb-";
/// Flow-table capacity given to test-bed nodes (small: the bed runs without
/// hugepages in 256 MB).
pub const FLOW_TABLE_CAPACITY: u32 = 65536;
/// Heartbeat interval and hold time of the cluster bed's nodes, ms.
pub const BED_HEARTBEAT_MS: u64 = 100;
pub const BED_HOLD_MS: u64 = 300;
/// Most nodes of a cluster bed (the /24 link numbering has room for 9).
pub const MAX_BED_NODES: usize = 8;
/// The mapped addresses of `up --nat` (`nodeconf::NAT_SECTION`).
pub const NAT_POOL_NET: &str = "198.51.100.0/24";

/// A network namespace and its per-namespace sysctls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceSpec {
    pub name: String,
    /// `net.ipv4.ip_forward`. Always set explicitly: a new namespace inherits
    /// the root namespace's IPv4 value.
    pub ip_forward: bool,
    /// Further sysctls, set right after the namespace is made (before any
    /// interface exists, so `conf.default.*` applies to all of them).
    pub sysctls: Vec<Sysctl>,
}

/// One sysctl of a namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sysctl {
    pub key: String,
    pub value: String,
    /// Kernels without the key skip it (e.g. `fib_multipath_hash_seed`,
    /// Linux 6.11+); otherwise a failure fails `up`.
    pub optional: bool,
}

/// One end of a veth pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub namespace: String,
    pub ifname: String,
    /// Kernel address (CIDR) for the interface; `None` for interfaces a DPDK
    /// node drives (the kernel must stay silent there).
    pub address: Option<String>,
    /// Set `net.ipv6.conf.<ifname>.disable_ipv6=1` before the link goes up,
    /// so the kernel sends no router solicitations, DAD or MLD on it.
    pub disable_ipv6: bool,
    /// Link MTU; `None` keeps the kernel's 1500.
    pub mtu: Option<u32>,
    /// Kernel IPv6 address (CIDR; added without DAD): the hosts' and the
    /// routers' ends (both beds are dual-stack).
    pub address6: Option<String>,
}

/// A veth pair between two namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VethSpec {
    pub a: Endpoint,
    pub b: Endpoint,
}

/// A Linux bridge inside a namespace (a shared segment such as the CCL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeSpec {
    pub namespace: String,
    pub name: String,
    /// Interfaces (in the same namespace) enslaved to the bridge.
    pub members: Vec<String>,
    /// A kernel address (CIDR) on the bridge itself (the management
    /// segment's collectors listen there).
    pub address: Option<String>,
}

/// A kernel route; more than one next hop makes an ECMP route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    pub namespace: String,
    /// `default` or a CIDR.
    pub destination: String,
    pub nexthops: Vec<String>,
}

/// What a [`HostSpec`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum HostKind {
    /// A client or server host (traffic ends here).
    #[default]
    Host,
    /// An ECMP router in front of the nodes (multi-node beds).
    Router,
}

/// A host with a real kernel TCP/IP stack that sends or serves test
/// traffic, or a router of the bed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSpec {
    pub name: String,
    pub namespace: String,
    /// Address (without prefix length) other hosts use to reach it; for a
    /// router, its address on the host side.
    pub address: String,
    /// Its IPv6 address (without prefix length; the router's on the host
    /// side): both beds are dual-stack (issue 16).
    pub address6: Option<String>,
    pub kind: HostKind,
}

/// A data interface of a firewall node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIface {
    /// Interface name in the node config (`inside`, `outside`).
    pub name: String,
    /// The veth end in the node's namespace the DPDK port opens.
    pub ifname: String,
    /// The node's address on this interface (CIDR).
    pub address: String,
    pub security_level: u8,
    /// The link's MTU (the node's `interfaces[].mtu`).
    pub mtu: u16,
    /// The node's IPv6 address on it (CIDR, `interfaces[].address6`).
    pub address6: Option<String>,
}

/// A member of the cluster as every node's config lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSpec {
    pub id: u8,
    pub name: String,
    /// CCL address without prefix length.
    pub ccl_address: String,
}

/// The `cluster:` section of a node of a multi-node bed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCluster {
    pub cluster_name: String,
    pub key: String,
    pub node_id: u8,
    pub priority: u8,
    /// The veth end in the node's namespace the CCL port opens.
    pub ccl_ifname: String,
    /// The node's CCL address (CIDR).
    pub ccl_address: String,
    pub members: Vec<MemberSpec>,
    /// The membership timers the node runs (`up --default-timers`).
    pub timers: BedTimers,
}

/// Which membership timers the bed's cluster nodes run.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum BedTimers {
    /// `BED_HEARTBEAT_MS` / `BED_HOLD_MS` (100 / 300 ms): the failover
    /// tests' fast detection (issue 10's evidence).
    #[default]
    Fast,
    /// The configuration's defaults (no `heartbeat-interval` or
    /// `hold-time` in the YAML: 1 000 / 3 000 ms), what an operator gets.
    Product,
}

/// A firewall node: one `clusterfw` process in its own namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub namespace: String,
    pub interfaces: Vec<NodeIface>,
    /// Static routes of the node: (destination CIDR, next hop).
    pub routes: Vec<(String, String)>,
    /// Static IPv6 routes of the node, the same way (written into the
    /// YAML's `routes:` after the IPv4 ones).
    pub routes6: Vec<(String, String)>,
    /// `None` for the single-node bed.
    pub cluster: Option<NodeCluster>,
    /// `dpdk.workers` (`up --workers`).
    pub workers: u16,
    /// The node translates (`up --nat`, `--dynamic-nat`;
    /// `nodeconf::NAT_SECTION`).
    pub nat: BedNat,
}

/// What the bed's nodes translate (`up --nat`, `up --dynamic-nat`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum BedNat {
    #[default]
    Off,
    /// The inside network PAT'ed to 198.51.100.7, and a static PAT.
    Pat,
    /// The inside network's hosts each get an address of 198.51.100.7–9
    /// (dynamic NAT; on a cluster the control node's table, N4), and the
    /// same static PAT.
    DynamicNat,
}

impl NodeSpec {
    /// DPDK `--file-prefix` of this node.
    pub fn dpdk_prefix(&self) -> String {
        format!("{DPDK_PREFIX}{}", self.name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Topology {
    pub namespaces: Vec<NamespaceSpec>,
    pub links: Vec<VethSpec>,
    pub bridges: Vec<BridgeSpec>,
    pub routes: Vec<RouteSpec>,
    pub hosts: Vec<HostSpec>,
    pub nodes: Vec<NodeSpec>,
}

fn ns(name: &str, ip_forward: bool) -> NamespaceSpec {
    NamespaceSpec {
        name: name.to_string(),
        ip_forward,
        sysctls: Vec::new(),
    }
}

fn sysctl(key: &str, value: &str, optional: bool) -> Sysctl {
    Sysctl {
        key: key.to_string(),
        value: value.to_string(),
        optional,
    }
}

/// Addresses of the multi-node bed (see [`Topology::cluster`]).
pub mod cluster_addr {
    /// Client host and its router side: 198.18.10.0/24.
    pub const CLIENT: &str = "198.18.10.2";
    pub const CLIENT_NET: &str = "198.18.10.0/24";
    pub const RIN_HOST_SIDE: &str = "198.18.10.1";
    /// Server host and its router side: 198.18.20.0/24.
    pub const SERVER: &str = "198.18.20.2";
    pub const SERVER_NET: &str = "198.18.20.0/24";
    pub const ROUT_HOST_SIDE: &str = "198.18.20.1";
    /// Node K's inside link: 198.18.(10+K).0/24, router .1, node .2.
    pub fn inside_net(k: usize) -> String {
        format!("198.18.{}", 10 + k)
    }
    /// Node K's outside link: 198.18.(20+K).0/24, router .1, node .2.
    pub fn outside_net(k: usize) -> String {
        format!("198.18.{}", 20 + k)
    }
    /// Node K's CCL address: 198.19.0.(10+K) in 198.19.0.0/24.
    pub fn ccl(k: usize) -> String {
        format!("198.19.0.{}", 10 + k)
    }
    pub const CCL_PREFIX_LEN: u8 = 24;
    /// The management segment (TEST-NET-1, RFC 5737): the collectors
    /// (syslog, IPFIX) at .1 on the bridge, node K at .(10+K).
    pub const COLLECTOR: &str = "192.0.2.1";
    pub fn mgmt(k: usize) -> String {
        format!("192.0.2.{}", 10 + k)
    }
    /// Where the collectors listen: syslog (UDP and TCP), IPFIX (UDP).
    pub const SYSLOG_PORT: u16 = 514;
    pub const IPFIX_PORT: u16 = 4739;
    /// The test bed's cluster name and key (test traffic only).
    pub const CLUSTER_NAME: &str = "cfw-testbed";
    pub const CLUSTER_KEY: &str = "clusterfw-testbed-ccl-key-0001";
}

/// IPv6 addresses of the multi-node bed (issue 16; RFC 3849's
/// documentation prefix), numbered as the IPv4 ones: the third group is
/// the IPv4 address's third octet read as hex digits, so 198.18.12.0/24
/// is 2001:db8:12::/64. The CCL and the management segment stay IPv4.
pub mod cluster_addr6 {
    /// Client host and its router side: 2001:db8:10::/64.
    pub const CLIENT: &str = "2001:db8:10::2";
    pub const CLIENT_NET: &str = "2001:db8:10::/64";
    pub const RIN_HOST_SIDE: &str = "2001:db8:10::1";
    /// Server host and its router side: 2001:db8:20::/64.
    pub const SERVER: &str = "2001:db8:20::2";
    pub const SERVER_NET: &str = "2001:db8:20::/64";
    pub const ROUT_HOST_SIDE: &str = "2001:db8:20::1";
    pub const PREFIX_LEN: u8 = 64;
    /// Node K's inside link: 2001:db8:(10+K)::/64, router ::1, node ::2.
    pub fn inside_net(k: usize) -> String {
        format!("2001:db8:{}::", 10 + k)
    }
    /// Node K's outside link: 2001:db8:(20+K)::/64, router ::1, node ::2.
    pub fn outside_net(k: usize) -> String {
        format!("2001:db8:{}::", 20 + k)
    }
    /// Node K's address on its inside link (the inside router's next hop).
    pub fn node_inside(k: usize) -> String {
        format!("{}2", inside_net(k))
    }
    /// Node K's address on its outside link (the outside router's).
    pub fn node_outside(k: usize) -> String {
        format!("{}2", outside_net(k))
    }
}

/// The single-node bed's IPv6 addresses (issue 16; RFC 3849's
/// documentation prefix): the hosts and the node on 2001:db8:1::/64
/// (inside) and 2001:db8:2::/64 (outside).
pub mod single_addr6 {
    pub const INSIDE_HOST: &str = "2001:db8:1::2/64";
    pub const OUTSIDE_HOST: &str = "2001:db8:2::2/64";
    pub const INSIDE_NODE: &str = "2001:db8:1::1";
    pub const OUTSIDE_NODE: &str = "2001:db8:2::1";
}

/// Namespace of the CCL segment (a Linux bridge of the same name).
pub const CCL_NAMESPACE: &str = "cfw-ccl";
/// The CCL bridge in [`CCL_NAMESPACE`].
pub const CCL_BRIDGE: &str = "cfw-ccl";
/// Namespace of the management segment (a Linux bridge of the same name,
/// with the collectors' address): each node's kernel interface `nK-mgmt`,
/// from which it sends syslog and IPFIX, as a real appliance does from its
/// management port.
pub const MGMT_NAMESPACE: &str = "cfw-mgmt";
pub const MGMT_BRIDGE: &str = "cfw-mgmt";

fn end(namespace: &str, ifname: &str, address: Option<&str>, disable_ipv6: bool) -> Endpoint {
    Endpoint {
        namespace: namespace.to_string(),
        ifname: ifname.to_string(),
        address: address.map(str::to_string),
        disable_ipv6,
        mtu: None,
        address6: None,
    }
}

/// MTU of the CCL links: a full 1518-byte data frame (802.1Q tag included)
/// in a CCL datagram (outer IPv4 + UDP 28, CCL header 34, tag 16) needs
/// 1596; the vendor's rule of thumb is data MTU + 100.
pub const CCL_MTU: u32 = 1600;

/// Link MTUs of a bed (`up --mtu`): the hosts' links to their routers
/// (cluster bed), the nodes' inside links and their outside links (in the
/// single-node bed, the hosts' links to the node). The CCL links get
/// `CCL_MTU`, or the largest data MTU + 100 when that is more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BedMtu {
    pub hosts: u16,
    pub inside: u16,
    pub outside: u16,
}

impl Default for BedMtu {
    fn default() -> BedMtu {
        BedMtu { hosts: 1500, inside: 1500, outside: 1500 }
    }
}

impl BedMtu {
    /// Every link at `mtu`.
    pub fn all(mtu: u16) -> BedMtu {
        BedMtu { hosts: mtu, inside: mtu, outside: mtu }
    }

    /// `9000` (every link) or `inside=1400,outside=1500,hosts=1500` (the
    /// ones named; the others 1500). 576-9000 each.
    pub fn parse(s: &str) -> Result<BedMtu> {
        let num = |v: &str| -> Result<u16> {
            let m: u16 = v.parse().map_err(|_| anyhow::anyhow!("--mtu {s}: {v:?} is not a number"))?;
            if !(576..=9000).contains(&m) {
                bail!("--mtu {s}: {m} is outside 576-9000");
            }
            Ok(m)
        };
        if !s.contains('=') {
            return Ok(BedMtu::all(num(s)?));
        }
        let mut m = BedMtu::default();
        for part in s.split(',') {
            let (k, v) = part.split_once('=').ok_or_else(|| anyhow::anyhow!("--mtu {s}: expected name=value"))?;
            match k {
                "hosts" => m.hosts = num(v)?,
                "inside" => m.inside = num(v)?,
                "outside" => m.outside = num(v)?,
                _ => bail!("--mtu {s}: {k:?} is none of hosts, inside, outside"),
            }
        }
        Ok(m)
    }

    /// The CCL links' MTU.
    pub fn ccl(&self) -> u32 {
        CCL_MTU.max(u32::from(self.inside.max(self.outside)) + 100)
    }
}

/// `2001:db8:1::2/64` → `2001:db8:1::2`.
fn host6(cidr: &str) -> String {
    cidr.split('/').next().unwrap_or(cidr).to_string()
}

fn default_route(namespace: &str, via: &str) -> RouteSpec {
    RouteSpec {
        namespace: namespace.to_string(),
        destination: "default".to_string(),
        nexthops: vec![via.to_string()],
    }
}

impl Topology {
    /// The bed for `nodes` firewall nodes: the single-node bed for 1, the
    /// cluster bed for 2-8.
    pub fn new(nodes: usize) -> Result<Topology> {
        match nodes {
            1 => Ok(Topology::single_node()),
            2..=MAX_BED_NODES => Ok(Topology::cluster(nodes)),
            n => bail!("--nodes {n}: the test bed has 1 (single node) or 2-{MAX_BED_NODES} (cluster) nodes"),
        }
    }

    /// `n` clustered nodes behind two ECMP routers, with a CCL bridge.
    ///
    /// ```text
    ///                       cfw-rin (router)              cfw-nK (clusterfw, K = 1..n)          cfw-rout (router)
    /// cfw-inside            eth0    198.18.10.1
    /// eth0 198.18.10.2 ──── rin-nK  198.18.1K.1 ──── nK-in  [inside 198.18.1K.2]
    ///                                                nK-out [outside 198.18.2K.2] ──── rout-nK 198.18.2K.1
    ///                                                nK-ccl [ccl 198.19.0.1K/24]         eth0    198.18.20.1 ──── eth0 198.18.20.2
    ///                                                   │                                                         cfw-outside
    ///                                       cfw-ccl: bridge cfw-ccl (ports ccl-nK)
    /// ```
    ///
    /// `cfw-rin` routes 198.18.20.0/24 and `cfw-rout` routes 198.18.10.0/24
    /// over all nodes (`nexthop via … nexthop via …`) with an L4 hash:
    /// `fib_multipath_hash_policy=1`, refined where the kernel allows to
    /// policy 3 with fields 0x37 (source and destination address, protocol,
    /// source and destination port) so that only header fields count (see
    /// the sysctl list for why). Each router hashes with its
    /// own seed (`fib_multipath_hash_seed`, Linux 6.11+: rin 1, rout 2,
    /// fixed so runs repeat) and lists the next hops in a different order
    /// (rout rotated by one), so the two directions of a connection pick
    /// their node independently — also on kernels whose L4 hash is
    /// symmetric and seeded the same in every namespace.
    ///
    /// Dual-stack (issue 16): every host, router and node data link also
    /// has an IPv6 subnet ([`cluster_addr6`]: 2001:db8:10::/64 for the
    /// client, 2001:db8:1K::/64 for node K's inside link, and so on), the
    /// hosts an IPv6 default route to their router, the routers the same
    /// ECMP routes for IPv6 (`net.ipv6.fib_multipath_hash_policy=1`, 3 with
    /// fields 0x37 where the kernel has it: the flow label is left out of
    /// the hash, as a TCP sender changes it with its hash on a
    /// retransmission timeout), the nodes `address6` on their data
    /// interfaces and IPv6 routes. The CCL and the management segment stay
    /// IPv4 (the CCL carries IPv6 frames inside IPv4 datagrams). The
    /// routers run no DAD (their addresses are planned) and keep their
    /// IPv6 addresses while a link is down (`keep_addr_on_down`: the
    /// harness takes router-side links down and up for its faults).
    pub fn cluster(n: usize) -> Topology {
        use cluster_addr as a;
        use cluster_addr6 as a6;
        let (inside, outside, rin, rout) = ("cfw-inside", "cfw-outside", "cfw-rin", "cfw-rout");
        let router = |name: &str, seed: &str| {
            let mut r = ns(name, true);
            r.sysctls = vec![
                sysctl("net.ipv4.fib_multipath_hash_policy", "1", false),
                // Header fields only (custom policy: addresses, protocol,
                // ports), where the kernel has it (5.12+). Policy 1 takes a
                // forwarded packet's hash from the skb when the sender set
                // one, as a TCP socket on the same host does through a veth,
                // and TCP re-randomises that hash on every retransmission
                // timeout (sk_rethink_txhash): a retransmitted SYN would
                // take another node. Routers hash headers.
                sysctl("net.ipv4.fib_multipath_hash_fields", "0x0037", true),
                sysctl("net.ipv4.fib_multipath_hash_policy", "3", true),
                sysctl("net.ipv4.fib_multipath_hash_seed", seed, true),
                // A next hop whose link has no carrier (a node that shut
                // its data ports, or a link the harness took down) leaves
                // the ECMP routes, as a router with BFD or link loss does.
                sysctl("net.ipv4.conf.all.ignore_routes_with_linkdown", "1", false),
                sysctl("net.ipv4.conf.default.ignore_routes_with_linkdown", "1", false),
                // Replies come back over another node than the request
                // went out: no reverse-path filtering.
                sysctl("net.ipv4.conf.all.rp_filter", "0", false),
                sysctl("net.ipv4.conf.default.rp_filter", "0", false),
                // IPv6: the same router. Set before any interface exists,
                // so `default.*` reaches every one.
                sysctl("net.ipv6.conf.all.disable_ipv6", "0", false),
                sysctl("net.ipv6.conf.default.disable_ipv6", "0", false),
                sysctl("net.ipv6.conf.all.forwarding", "1", false),
                sysctl("net.ipv6.conf.default.forwarding", "1", false),
                sysctl("net.ipv6.conf.all.accept_dad", "0", false),
                sysctl("net.ipv6.conf.default.accept_dad", "0", false),
                sysctl("net.ipv6.conf.all.keep_addr_on_down", "1", false),
                sysctl("net.ipv6.conf.default.keep_addr_on_down", "1", false),
                sysctl("net.ipv6.conf.all.ignore_routes_with_linkdown", "1", false),
                sysctl("net.ipv6.conf.default.ignore_routes_with_linkdown", "1", false),
                // The L4 hash, as for IPv4 (the flow label left out: see
                // above). IPv6 shares IPv4's seed.
                sysctl("net.ipv6.fib_multipath_hash_policy", "1", false),
                sysctl("net.ipv6.fib_multipath_hash_fields", "0x0037", true),
                sysctl("net.ipv6.fib_multipath_hash_policy", "3", true),
            ];
            r
        };
        let mut ccl = ns(CCL_NAMESPACE, false);
        ccl.sysctls = vec![
            sysctl("net.ipv6.conf.all.disable_ipv6", "1", false),
            sysctl("net.ipv6.conf.default.disable_ipv6", "1", false),
        ];
        let mut mgmt = ns(MGMT_NAMESPACE, false);
        mgmt.sysctls = ccl.sysctls.clone();
        let v6 = |e: Endpoint, addr: &str| Endpoint { address6: Some(format!("{addr}/{}", a6::PREFIX_LEN)), ..e };
        let mut t = Topology {
            namespaces: vec![ns(inside, false), ns(outside, false), router(rin, "1"), router(rout, "2"), ccl, mgmt],
            links: vec![
                VethSpec {
                    a: v6(end(inside, "eth0", Some(&format!("{}/24", a::CLIENT)), false), a6::CLIENT),
                    b: v6(end(rin, "eth0", Some(&format!("{}/24", a::RIN_HOST_SIDE)), false), a6::RIN_HOST_SIDE),
                },
                VethSpec {
                    a: v6(end(outside, "eth0", Some(&format!("{}/24", a::SERVER)), false), a6::SERVER),
                    b: v6(end(rout, "eth0", Some(&format!("{}/24", a::ROUT_HOST_SIDE)), false), a6::ROUT_HOST_SIDE),
                },
            ],
            bridges: vec![
                BridgeSpec {
                    namespace: CCL_NAMESPACE.into(),
                    name: CCL_BRIDGE.into(),
                    members: (1..=n).map(|k| format!("ccl-n{k}")).collect(),
                    address: None,
                },
                BridgeSpec {
                    namespace: MGMT_NAMESPACE.into(),
                    name: MGMT_BRIDGE.into(),
                    members: (1..=n).map(|k| format!("mgmt-n{k}")).collect(),
                    address: Some(format!("{}/24", a::COLLECTOR)),
                },
            ],
            routes: vec![
                default_route(inside, a::RIN_HOST_SIDE),
                default_route(outside, a::ROUT_HOST_SIDE),
                RouteSpec {
                    namespace: rin.into(),
                    destination: a::SERVER_NET.into(),
                    nexthops: (1..=n).map(|k| format!("{}.2", a::inside_net(k))).collect(),
                },
                RouteSpec {
                    namespace: rout.into(),
                    destination: a::CLIENT_NET.into(),
                    nexthops: (1..=n).map(|k| format!("{}.2", a::outside_net(k % n + 1))).collect(),
                },
                default_route(inside, a6::RIN_HOST_SIDE),
                default_route(outside, a6::ROUT_HOST_SIDE),
                RouteSpec {
                    namespace: rin.into(),
                    destination: a6::SERVER_NET.into(),
                    nexthops: (1..=n).map(a6::node_inside).collect(),
                },
                RouteSpec {
                    namespace: rout.into(),
                    destination: a6::CLIENT_NET.into(),
                    nexthops: (1..=n).map(|k| a6::node_outside(k % n + 1)).collect(),
                },
            ],
            hosts: vec![
                HostSpec {
                    name: "inside".into(),
                    namespace: inside.into(),
                    address: a::CLIENT.into(),
                    address6: Some(a6::CLIENT.into()),
                    kind: HostKind::Host,
                },
                HostSpec {
                    name: "outside".into(),
                    namespace: outside.into(),
                    address: a::SERVER.into(),
                    address6: Some(a6::SERVER.into()),
                    kind: HostKind::Host,
                },
                HostSpec {
                    name: "rin".into(),
                    namespace: rin.into(),
                    address: a::RIN_HOST_SIDE.into(),
                    address6: Some(a6::RIN_HOST_SIDE.into()),
                    kind: HostKind::Router,
                },
                HostSpec {
                    name: "rout".into(),
                    namespace: rout.into(),
                    address: a::ROUT_HOST_SIDE.into(),
                    address6: Some(a6::ROUT_HOST_SIDE.into()),
                    kind: HostKind::Router,
                },
            ],
            nodes: vec![],
        };
        let members: Vec<MemberSpec> = (1..=n)
            .map(|k| MemberSpec { id: k as u8, name: format!("n{k}"), ccl_address: a::ccl(k) })
            .collect();
        for k in 1..=n {
            let (name, nsn) = (format!("n{k}"), format!("cfw-n{k}"));
            let (inet, onet) = (a::inside_net(k), a::outside_net(k));
            let (inet6, onet6) = (a6::inside_net(k), a6::outside_net(k));
            t.namespaces.push(ns(&nsn, false));
            t.links.push(VethSpec {
                a: v6(end(rin, &format!("rin-n{k}"), Some(&format!("{inet}.1/24")), false), &format!("{inet6}1")),
                b: end(&nsn, &format!("n{k}-in"), None, true),
            });
            t.links.push(VethSpec {
                a: v6(end(rout, &format!("rout-n{k}"), Some(&format!("{onet}.1/24")), false), &format!("{onet6}1")),
                b: end(&nsn, &format!("n{k}-out"), None, true),
            });
            t.links.push(VethSpec {
                a: Endpoint { mtu: Some(CCL_MTU), ..end(CCL_NAMESPACE, &format!("ccl-n{k}"), None, true) },
                b: Endpoint { mtu: Some(CCL_MTU), ..end(&nsn, &format!("n{k}-ccl"), None, true) },
            });
            t.links.push(VethSpec {
                a: end(MGMT_NAMESPACE, &format!("mgmt-n{k}"), None, true),
                b: end(&nsn, &format!("n{k}-mgmt"), Some(&format!("{}/24", a::mgmt(k))), true),
            });
            t.nodes.push(NodeSpec {
                workers: 1,
                nat: BedNat::Off,
                name: name.clone(),
                namespace: nsn,
                interfaces: vec![
                    NodeIface {
                        name: "inside".into(),
                        ifname: format!("n{k}-in"),
                        address: format!("{inet}.2/24"),
                        security_level: 100,
                        mtu: 1500,
                        address6: Some(format!("{}/{}", a6::node_inside(k), a6::PREFIX_LEN)),
                    },
                    NodeIface {
                        name: "outside".into(),
                        ifname: format!("n{k}-out"),
                        address: format!("{onet}.2/24"),
                        security_level: 0,
                        mtu: 1500,
                        address6: Some(format!("{}/{}", a6::node_outside(k), a6::PREFIX_LEN)),
                    },
                ],
                routes: vec![
                    (a::CLIENT_NET.into(), format!("{inet}.1")),
                    ("0.0.0.0/0".into(), format!("{onet}.1")),
                ],
                routes6: vec![
                    (a6::CLIENT_NET.into(), format!("{inet6}1")),
                    ("::/0".into(), format!("{onet6}1")),
                ],
                cluster: Some(NodeCluster {
                    cluster_name: a::CLUSTER_NAME.into(),
                    key: a::CLUSTER_KEY.into(),
                    node_id: k as u8,
                    priority: (10 * k).min(100) as u8,
                    ccl_ifname: format!("n{k}-ccl"),
                    ccl_address: format!("{}/{}", a::ccl(k), a::CCL_PREFIX_LEN),
                    members: members.clone(),
                    timers: BedTimers::Fast,
                }),
            });
        }
        t
    }

    /// Client host `cfw-inside` — node `cfw-n1` — server host `cfw-outside`.
    ///
    /// ```text
    /// cfw-inside            cfw-n1 (clusterfw)            cfw-outside
    /// eth0 198.18.1.2 ──── n1-in  [inside 198.18.1.1]
    ///                       n1-out [outside 198.18.2.1] ──── eth0 198.18.2.2
    /// ```
    pub fn single_node() -> Topology {
        let (inside, outside, n1) = ("cfw-inside", "cfw-outside", "cfw-n1");
        Topology {
            namespaces: vec![ns(inside, false), ns(outside, false), ns(n1, false)],
            links: vec![
                VethSpec {
                    a: Endpoint { address6: Some(single_addr6::INSIDE_HOST.into()), ..end(inside, "eth0", Some("198.18.1.2/24"), false) },
                    b: end(n1, "n1-in", None, true),
                },
                VethSpec {
                    a: Endpoint { address6: Some(single_addr6::OUTSIDE_HOST.into()), ..end(outside, "eth0", Some("198.18.2.2/24"), false) },
                    b: end(n1, "n1-out", None, true),
                },
            ],
            bridges: vec![],
            routes: vec![
                default_route(inside, "198.18.1.1"),
                default_route(outside, "198.18.2.1"),
                default_route(inside, single_addr6::INSIDE_NODE),
                default_route(outside, single_addr6::OUTSIDE_NODE),
            ],
            hosts: vec![
                HostSpec {
                    name: "inside".into(),
                    namespace: inside.into(),
                    address: "198.18.1.2".into(),
                    address6: Some(host6(single_addr6::INSIDE_HOST)),
                    kind: HostKind::Host,
                },
                HostSpec {
                    name: "outside".into(),
                    namespace: outside.into(),
                    address: "198.18.2.2".into(),
                    address6: Some(host6(single_addr6::OUTSIDE_HOST)),
                    kind: HostKind::Host,
                },
            ],
            nodes: vec![NodeSpec {
                workers: 1,
                nat: BedNat::Off,
                name: "n1".into(),
                namespace: n1.into(),
                interfaces: vec![
                    NodeIface {
                        name: "inside".into(),
                        ifname: "n1-in".into(),
                        address: "198.18.1.1/24".into(),
                        security_level: 100,
                        mtu: 1500,
                        address6: Some(format!("{}/64", single_addr6::INSIDE_NODE)),
                    },
                    NodeIface {
                        name: "outside".into(),
                        ifname: "n1-out".into(),
                        address: "198.18.2.1/24".into(),
                        security_level: 0,
                        mtu: 1500,
                        address6: Some(format!("{}/64", single_addr6::OUTSIDE_NODE)),
                    },
                ],
                routes: vec![],
                routes6: vec![],
                cluster: None,
            }],
        }
    }

    /// This topology with the link MTUs of `m` (`BedMtu`): on the veths
    /// (both ends of a link alike) and on the nodes' interfaces.
    pub fn with_mtu(mut self, m: BedMtu) -> Topology {
        let ccl = m.ccl();
        let iface_mtu = |name: &str| if name == "inside" { m.inside } else { m.outside };
        let node_ifs: Vec<(String, String, u16)> = self
            .nodes
            .iter()
            .flat_map(|n| n.interfaces.iter().map(move |i| (n.namespace.clone(), i.ifname.clone(), iface_mtu(&i.name))))
            .collect();
        let ccl_ifs: Vec<(String, String)> = self
            .nodes
            .iter()
            .filter_map(|n| n.cluster.as_ref().map(|c| (n.namespace.clone(), c.ccl_ifname.clone())))
            .collect();
        for l in &mut self.links {
            let is = |e: &Endpoint, ns: &str, ifn: &str| e.namespace == ns && e.ifname == ifn;
            let data = node_ifs.iter().find(|(ns, ifn, _)| is(&l.a, ns, ifn) || is(&l.b, ns, ifn)).map(|x| u32::from(x.2));
            let mtu = if ccl_ifs.iter().any(|(ns, ifn)| is(&l.a, ns, ifn) || is(&l.b, ns, ifn)) {
                ccl
            } else {
                data.unwrap_or(u32::from(m.hosts))
            };
            // 1500: the kernel's own, left alone.
            let mtu = Some(mtu).filter(|&v| v != 1500);
            l.a.mtu = mtu;
            l.b.mtu = mtu;
        }
        for n in &mut self.nodes {
            for i in &mut n.interfaces {
                i.mtu = iface_mtu(&i.name);
            }
        }
        self
    }

    /// Every node with `workers` workers (`up --workers`; issue 12): up to
    /// 64 on the single-node bed, 32 on a cluster member.
    /// `up --nat`: the node(s) PAT the inside (client) network to
    /// 198.51.100.7 and map 198.51.100.80:80 to the inside host's port
    /// 8080 (`nodeconf::NAT_SECTION`, `cluster_nat_section`); the outside
    /// host reaches 198.51.100.0/24 by its default route, through the
    /// node — on a cluster through the outside router, which spreads it
    /// over the members by ECMP as it does the client network.
    /// Every cluster node with the membership timers `timers`.
    pub fn with_timers(mut self, timers: BedTimers) -> Topology {
        for c in self.nodes.iter_mut().filter_map(|n| n.cluster.as_mut()) {
            c.timers = timers;
        }
        self
    }

    pub fn with_nat(mut self, nat: BedNat) -> Result<Topology> {
        for n in &mut self.nodes {
            n.nat = nat;
        }
        if nat != BedNat::Off && self.nodes.len() > 1 {
            let to_clients = self
                .routes
                .iter()
                .find(|r| r.destination == cluster_addr::CLIENT_NET && r.namespace.ends_with("rout"))
                .cloned()
                .context("the outside router's route to the client network")?;
            self.routes.push(RouteSpec { destination: NAT_POOL_NET.into(), ..to_clients });
        }
        Ok(self)
    }

    pub fn with_workers(mut self, workers: u16) -> Result<Topology> {
        let max = if self.nodes.len() > 1 { 32 } else { 64 };
        if !(1..=max).contains(&workers) {
            bail!("--workers {workers}: 1-{max}");
        }
        for n in &mut self.nodes {
            n.workers = workers;
        }
        Ok(self)
    }

    /// Every veth end, in creation order.
    pub fn endpoints(&self) -> impl Iterator<Item = &Endpoint> {
        self.links.iter().flat_map(|l| [&l.a, &l.b])
    }

    /// `/etc/hosts` of every namespace: the hosts and the node interfaces by
    /// name (`inside`, `outside`, `n1-inside`, ...), so that nothing in the
    /// bed needs DNS.
    pub fn hosts_file(&self) -> String {
        let mut out = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost\n");
        for h in &self.hosts {
            out += &format!("{}\t{}\n", h.address, h.name);
        }
        // IPv6 under names of their own (`outside6`): a name with both
        // families would turn the IPv4 tests' `curl http://outside` into
        // IPv6.
        for h in &self.hosts {
            if let Some(a6) = &h.address6 {
                out += &format!("{a6}\t{}6\n", h.name);
            }
        }
        for n in &self.nodes {
            for i in &n.interfaces {
                let addr = i.address.split('/').next().unwrap_or(&i.address);
                out += &format!("{addr}\t{}-{}\n", n.name, i.name);
            }
        }
        out
    }

    /// Checks the invariants in the module comment.
    pub fn validate(&self) -> Result<()> {
        let known = |n: &str| self.namespaces.iter().any(|s| s.name == n);
        for s in &self.namespaces {
            if !s.name.starts_with(NS_PREFIX) {
                bail!("namespace {} does not start with {NS_PREFIX}", s.name);
            }
        }
        let mut seen = std::collections::HashSet::new();
        for e in self.endpoints() {
            if !known(&e.namespace) {
                bail!("veth {} is in unknown namespace {}", e.ifname, e.namespace);
            }
            if !seen.insert((e.namespace.as_str(), e.ifname.as_str())) {
                bail!("interface {} appears twice in {}", e.ifname, e.namespace);
            }
            if e.ifname.len() > 15 {
                bail!("interface name {} is longer than 15 bytes", e.ifname);
            }
        }
        for n in &self.nodes {
            if !known(&n.namespace) {
                bail!("node {} is in unknown namespace {}", n.name, n.namespace);
            }
            let ccl = n.cluster.iter().map(|c| c.ccl_ifname.as_str());
            for ifname in n.interfaces.iter().map(|i| i.ifname.as_str()).chain(ccl) {
                if !seen.contains(&(n.namespace.as_str(), ifname)) {
                    bail!("node {} interface {ifname} has no veth", n.name);
                }
            }
        }
        for h in &self.hosts {
            if !known(&h.namespace) {
                bail!("host {} is in unknown namespace {}", h.name, h.namespace);
            }
        }
        for b in &self.bridges {
            if !known(&b.namespace) {
                bail!("bridge {} is in unknown namespace {}", b.name, b.namespace);
            }
            for m in &b.members {
                if !seen.contains(&(b.namespace.as_str(), m.as_str())) {
                    bail!("bridge {} member {m} has no veth in {}", b.name, b.namespace);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_node_is_valid() {
        let t = Topology::new(1).unwrap();
        t.validate().unwrap();
        assert_eq!(t.nodes.len(), 1);
        assert_eq!(t.nodes[0].dpdk_prefix(), "cfw-tb-n1");
        // Node-side ends carry no kernel address and no IPv6.
        for e in t.endpoints().filter(|e| e.namespace == "cfw-n1") {
            assert!(e.address.is_none() && e.disable_ipv6, "{e:?}");
        }
    }

    #[test]
    fn hosts_file_names_hosts_and_node_interfaces() {
        let h = Topology::single_node().hosts_file();
        assert!(h.starts_with("127.0.0.1\tlocalhost\n"), "{h}");
        for line in [
            "198.18.1.2\tinside\n",
            "198.18.2.2\toutside\n",
            "198.18.1.1\tn1-inside\n",
            "198.18.2.1\tn1-outside\n",
        ] {
            assert!(h.contains(line), "{line:?} missing in {h}");
        }
    }

    #[test]
    fn node_counts() {
        assert!(Topology::new(0).is_err());
        assert!(Topology::new(MAX_BED_NODES + 1).is_err());
        for n in 2..=MAX_BED_NODES {
            Topology::new(n).unwrap().validate().unwrap();
        }
    }

    #[test]
    fn three_node_cluster_bed() {
        let t = Topology::new(3).unwrap();
        let names: Vec<&str> = t.namespaces.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            ["cfw-inside", "cfw-outside", "cfw-rin", "cfw-rout", "cfw-ccl", "cfw-mgmt", "cfw-n1", "cfw-n2", "cfw-n3"]
        );
        let rin = t.routes.iter().find(|r| r.namespace == "cfw-rin").unwrap();
        assert_eq!(rin.destination, "198.18.20.0/24");
        assert_eq!(rin.nexthops, ["198.18.11.2", "198.18.12.2", "198.18.13.2"]);
        let rout = t.routes.iter().find(|r| r.namespace == "cfw-rout").unwrap();
        assert_eq!(rout.destination, "198.18.10.0/24");
        assert_eq!(rout.nexthops, ["198.18.22.2", "198.18.23.2", "198.18.21.2"]);
        for r in ["cfw-rin", "cfw-rout"] {
            let ns = t.namespaces.iter().find(|n| n.name == r).unwrap();
            assert!(ns.ip_forward);
            assert!(ns.sysctls.iter().any(|s| s.key == "net.ipv4.fib_multipath_hash_policy" && s.value == "1" && !s.optional));
            let last = ns.sysctls.iter().rposition(|s| s.key == "net.ipv4.fib_multipath_hash_policy").unwrap();
            let fields = ns.sysctls.iter().position(|s| s.key == "net.ipv4.fib_multipath_hash_fields").unwrap();
            assert!(fields < last && ns.sysctls[last].value == "3", "fields before the custom policy");
        }
        assert_eq!(t.bridges[0].members, ["ccl-n1", "ccl-n2", "ccl-n3"]);
        for e in t.endpoints() {
            let ccl = e.ifname.contains("ccl");
            assert_eq!(e.mtu, ccl.then_some(CCL_MTU), "{e:?}");
        }
        assert_eq!(t.nodes.len(), 3);
        let n2 = &t.nodes[1];
        assert_eq!(n2.dpdk_prefix(), "cfw-tb-n2");
        let c = n2.cluster.as_ref().unwrap();
        assert_eq!((c.node_id, c.ccl_ifname.as_str(), c.ccl_address.as_str()), (2, "n2-ccl", "198.19.0.12/24"));
        assert_eq!(c.members.len(), 3);
        assert_eq!(n2.routes, [("198.18.10.0/24".to_string(), "198.18.12.1".to_string()), ("0.0.0.0/0".to_string(), "198.18.22.1".to_string())]);
        // Node-side ends carry no kernel address and no IPv6, but for the
        // management port, which the node's kernel sockets use.
        for e in t.endpoints().filter(|e| e.namespace.starts_with("cfw-n")) {
            let mgmt = e.ifname.ends_with("-mgmt");
            assert!(e.address.is_some() == mgmt && e.disable_ipv6, "{e:?}");
        }
        assert_eq!(n2.namespace, "cfw-n2");
        let m2 = t.endpoints().find(|e| e.ifname == "n2-mgmt").unwrap();
        assert_eq!(m2.address.as_deref(), Some("192.0.2.12/24"));
        let mgmt = &t.bridges[1];
        assert_eq!((mgmt.namespace.as_str(), mgmt.address.as_deref()), (MGMT_NAMESPACE, Some("192.0.2.1/24")));
        assert_eq!(mgmt.members, ["mgmt-n1", "mgmt-n2", "mgmt-n3"]);
        assert_eq!(t.hosts.iter().filter(|h| h.kind == HostKind::Router).count(), 2);
    }

    #[test]
    fn cluster_bed_is_dual_stack() {
        let t = Topology::new(3).unwrap();
        let end = |ns: &str, ifn: &str| t.endpoints().find(|e| e.namespace == ns && e.ifname == ifn).unwrap();
        // Hosts and routers: an IPv6 address on every data link, IPv6 on.
        for (ns, ifn, want) in [
            ("cfw-inside", "eth0", "2001:db8:10::2/64"),
            ("cfw-rin", "eth0", "2001:db8:10::1/64"),
            ("cfw-outside", "eth0", "2001:db8:20::2/64"),
            ("cfw-rout", "eth0", "2001:db8:20::1/64"),
            ("cfw-rin", "rin-n1", "2001:db8:11::1/64"),
            ("cfw-rin", "rin-n3", "2001:db8:13::1/64"),
            ("cfw-rout", "rout-n2", "2001:db8:22::1/64"),
        ] {
            let e = end(ns, ifn);
            assert_eq!(e.address6.as_deref(), Some(want), "{e:?}");
            assert!(!e.disable_ipv6, "{e:?}");
        }
        // The nodes' ends stay silent (the DPDK port speaks for them); the
        // CCL and the management segment stay IPv4.
        for e in t.endpoints().filter(|e| e.namespace.starts_with("cfw-n") || e.ifname.contains("ccl") || e.ifname.contains("mgmt")) {
            assert!(e.address6.is_none() && e.disable_ipv6, "{e:?}");
        }
        // Default routes of the hosts, ECMP over the nodes on the routers
        // (rout's next hops rotated by one, as for IPv4).
        let route = |ns: &str, dst: &str| {
            t.routes.iter().find(|r| r.namespace == ns && r.destination == dst).map(|r| r.nexthops.clone()).unwrap_or_default()
        };
        let defaults: Vec<&RouteSpec> = t.routes.iter().filter(|r| r.destination == "default").collect();
        assert_eq!(defaults.len(), 4, "{defaults:?}");
        assert!(defaults.iter().any(|r| r.namespace == "cfw-inside" && r.nexthops == ["2001:db8:10::1"]));
        assert!(defaults.iter().any(|r| r.namespace == "cfw-outside" && r.nexthops == ["2001:db8:20::1"]));
        assert_eq!(route("cfw-rin", "2001:db8:20::/64"), ["2001:db8:11::2", "2001:db8:12::2", "2001:db8:13::2"]);
        assert_eq!(route("cfw-rout", "2001:db8:10::/64"), ["2001:db8:22::2", "2001:db8:23::2", "2001:db8:21::2"]);
        // IPv4 exactly as before: the first route of each router.
        assert_eq!(t.routes.iter().find(|r| r.namespace == "cfw-rin").unwrap().destination, "198.18.20.0/24");
        // The routers forward IPv6 and hash it on L4 (policy 1, refined to
        // header fields where the kernel allows), without DAD, keeping
        // their addresses across the harness's link faults.
        for r in ["cfw-rin", "cfw-rout"] {
            let ns = t.namespaces.iter().find(|n| n.name == r).unwrap();
            let val = |k: &str| ns.sysctls.iter().filter(|s| s.key == k).map(|s| (s.value.as_str(), s.optional)).collect::<Vec<_>>();
            assert_eq!(val("net.ipv6.fib_multipath_hash_policy"), [("1", false), ("3", true)]);
            assert_eq!(val("net.ipv6.fib_multipath_hash_fields"), [("0x0037", true)]);
            for k in ["forwarding", "keep_addr_on_down", "ignore_routes_with_linkdown"] {
                assert_eq!(val(&format!("net.ipv6.conf.all.{k}")), [("1", false)], "{k}");
                assert_eq!(val(&format!("net.ipv6.conf.default.{k}")), [("1", false)], "{k}");
            }
            assert_eq!(val("net.ipv6.conf.default.accept_dad"), [("0", false)]);
            assert_eq!(val("net.ipv6.conf.default.disable_ipv6"), [("0", false)]);
        }
        // The nodes: address6 on both data interfaces, IPv6 routes to the
        // client network and by default out.
        let n2 = &t.nodes[1];
        let a6: Vec<Option<&str>> = n2.interfaces.iter().map(|i| i.address6.as_deref()).collect();
        assert_eq!(a6, [Some("2001:db8:12::2/64"), Some("2001:db8:22::2/64")]);
        assert_eq!(
            n2.routes6,
            [("2001:db8:10::/64".to_string(), "2001:db8:12::1".to_string()), ("::/0".to_string(), "2001:db8:22::1".to_string())]
        );
        for n in &t.nodes {
            for i in &n.interfaces {
                let a = i.address6.as_deref().unwrap();
                let k = &n.name[1..];
                let first = if i.name == "inside" { format!("2001:db8:1{k}::") } else { format!("2001:db8:2{k}::") };
                assert!(a.starts_with(&first), "{n:?}");
            }
        }
        // Names: IPv6 under `<host>6`, the IPv4 names unchanged.
        let h = t.hosts_file();
        assert!(h.contains("198.18.20.2\toutside\n") && h.contains("2001:db8:20::2\toutside6\n"), "{h}");
        assert!(!h.contains("2001:db8:20::2\toutside\n"), "{h}");
        // `--nat` adds its IPv4 pool route only.
        let nat = Topology::new(3).unwrap().with_nat(BedNat::Pat).unwrap();
        assert_eq!(nat.routes.len(), t.routes.len() + 1);
        // Any size of cluster: one IPv6 next hop per node on each router.
        for n in 2..=MAX_BED_NODES {
            let t = Topology::new(n).unwrap();
            assert_eq!(t.routes.iter().filter(|r| r.nexthops.len() == n && r.nexthops[0].contains(':')).count(), 2);
        }
    }

    #[test]
    fn single_node_hosts_have_their_ipv6_addresses() {
        let t = Topology::single_node();
        let a6: Vec<Option<&str>> = t.hosts.iter().map(|h| h.address6.as_deref()).collect();
        assert_eq!(a6, [Some("2001:db8:1::2"), Some("2001:db8:2::2")]);
        assert!(t.nodes[0].routes6.is_empty(), "connected networks only");
    }

    #[test]
    fn validate_catches_bad_names() {
        let mut t = Topology::single_node();
        t.namespaces[0].name = "other".into();
        assert!(t.validate().is_err());
        let mut t = Topology::single_node();
        t.nodes[0].interfaces[0].ifname = "nope".into();
        assert!(t.validate().is_err());
    }

    #[test]
    fn link_mtus_reach_the_veths_and_the_node_configs() {
        assert_eq!(BedMtu::parse("9000").unwrap(), BedMtu::all(9000));
        let m = BedMtu::parse("inside=1400,hosts=1480").unwrap();
        assert_eq!(m, BedMtu { hosts: 1480, inside: 1400, outside: 1500 });
        for bad in ["100", "inside=99999", "left=1400", "inside"] {
            assert!(BedMtu::parse(bad).is_err(), "{bad}");
        }
        let t = Topology::new(3).unwrap().with_mtu(m);
        let mtu = |ns: &str, ifn: &str| t.endpoints().find(|e| e.namespace == ns && e.ifname == ifn).unwrap().mtu;
        assert_eq!((mtu("cfw-rin", "rin-n2"), mtu("cfw-n2", "n2-in")), (Some(1400), Some(1400)));
        assert_eq!((mtu("cfw-rout", "rout-n2"), mtu("cfw-n2", "n2-out")), (None, None), "1500: the kernel's");
        assert_eq!((mtu("cfw-inside", "eth0"), mtu("cfw-rin", "eth0")), (Some(1480), Some(1480)));
        assert_eq!(mtu("cfw-ccl", "ccl-n1"), Some(CCL_MTU));
        assert_eq!(t.nodes[1].interfaces.iter().map(|i| i.mtu).collect::<Vec<_>>(), [1400, 1500]);
        let j = Topology::new(2).unwrap().with_mtu(BedMtu::all(9000));
        assert!(j.endpoints().all(|e| e.mtu.is_some_and(|m| m >= 9000)));
        assert_eq!(j.endpoints().find(|e| e.ifname == "n1-ccl").unwrap().mtu, Some(9100));
        let s = Topology::new(1).unwrap().with_mtu(BedMtu { outside: 1400, ..BedMtu::default() });
        assert_eq!(s.endpoints().find(|e| e.ifname == "n1-out").unwrap().mtu, Some(1400));
        assert_eq!(s.endpoints().find(|e| e.namespace == "cfw-outside").unwrap().mtu, Some(1400), "the same link");
    }

}
