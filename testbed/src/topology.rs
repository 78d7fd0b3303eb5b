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

use anyhow::{bail, Result};

/// Prefix of every namespace the test bed makes.
pub const NS_PREFIX: &str = "cfw-";
/// Prefix of the DPDK `--file-prefix` of every node (its runtime directory is
/// `/var/run/dpdk/<prefix>`).
pub const DPDK_PREFIX: &str = "cfw-tb-";
/// Flow-table capacity given to test-bed nodes (small: the bed runs without
/// hugepages in 256 MB).
pub const FLOW_TABLE_CAPACITY: u32 = 65536;

/// A network namespace and its per-namespace sysctls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceSpec {
    pub name: String,
    /// `net.ipv4.ip_forward`. Always set explicitly: a new namespace inherits
    /// the root namespace's IPv4 value.
    pub ip_forward: bool,
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
}

/// A kernel route; more than one next hop makes an ECMP route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    pub namespace: String,
    /// `default` or a CIDR.
    pub destination: String,
    pub nexthops: Vec<String>,
}

/// A host with a real kernel TCP/IP stack that sends or serves test traffic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSpec {
    pub name: String,
    pub namespace: String,
    /// Address (without prefix length) other hosts use to reach it.
    pub address: String,
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
}

/// A firewall node: one `clusterfw` process in its own namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    pub name: String,
    pub namespace: String,
    pub interfaces: Vec<NodeIface>,
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
    }
}

fn end(namespace: &str, ifname: &str, address: Option<&str>, disable_ipv6: bool) -> Endpoint {
    Endpoint {
        namespace: namespace.to_string(),
        ifname: ifname.to_string(),
        address: address.map(str::to_string),
        disable_ipv6,
    }
}

fn default_route(namespace: &str, via: &str) -> RouteSpec {
    RouteSpec {
        namespace: namespace.to_string(),
        destination: "default".to_string(),
        nexthops: vec![via.to_string()],
    }
}

impl Topology {
    /// The bed for `nodes` firewall nodes. Only one node is built so far.
    pub fn new(nodes: usize) -> Result<Topology> {
        match nodes {
            1 => Ok(Topology::single_node()),
            n => bail!("--nodes {n}: only a single-node test bed (--nodes 1) exists so far"),
        }
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
                    a: end(inside, "eth0", Some("198.18.1.2/24"), false),
                    b: end(n1, "n1-in", None, true),
                },
                VethSpec {
                    a: end(outside, "eth0", Some("198.18.2.2/24"), false),
                    b: end(n1, "n1-out", None, true),
                },
            ],
            bridges: vec![],
            routes: vec![
                default_route(inside, "198.18.1.1"),
                default_route(outside, "198.18.2.1"),
            ],
            hosts: vec![
                HostSpec {
                    name: "inside".into(),
                    namespace: inside.into(),
                    address: "198.18.1.2".into(),
                },
                HostSpec {
                    name: "outside".into(),
                    namespace: outside.into(),
                    address: "198.18.2.2".into(),
                },
            ],
            nodes: vec![NodeSpec {
                name: "n1".into(),
                namespace: n1.into(),
                interfaces: vec![
                    NodeIface {
                        name: "inside".into(),
                        ifname: "n1-in".into(),
                        address: "198.18.1.1/24".into(),
                        security_level: 100,
                    },
                    NodeIface {
                        name: "outside".into(),
                        ifname: "n1-out".into(),
                        address: "198.18.2.1/24".into(),
                        security_level: 0,
                    },
                ],
            }],
        }
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
            for i in &n.interfaces {
                if !seen.contains(&(n.namespace.as_str(), i.ifname.as_str())) {
                    bail!(
                        "node {} interface {} has no veth {}",
                        n.name,
                        i.name,
                        i.ifname
                    );
                }
            }
        }
        for h in &self.hosts {
            if !known(&h.namespace) {
                bail!("host {} is in unknown namespace {}", h.name, h.namespace);
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
    fn more_nodes_are_refused_for_now() {
        assert!(Topology::new(3).is_err());
        assert!(Topology::new(0).is_err());
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
}
