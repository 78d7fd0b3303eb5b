//! The node YAML the bed hands to `clusterfw --config`.
//!
//! Written by hand rather than through a YAML serializer: the layout follows
//! `config/examples/node.yaml` section by section so the two can be compared
//! by eye. Every string goes out as a JSON string, which is a valid YAML
//! double-quoted scalar, so no value can break the document.

use crate::topology::{NodeSpec, BED_HEARTBEAT_MS, BED_HOLD_MS, FLOW_TABLE_CAPACITY};
use std::fmt::Write;

fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a string always serializes")
}

/// EAL arguments of a test-bed node: no hugepages, no PCI, a per-node
/// file prefix so nodes and other DPDK users never share runtime files, and
/// two lcores that both float over the two cores (`--lcores (0,1)@(0,1)`).
/// Several nodes share the two cores, so pinning buys nothing and costs
/// heartbeats: with `-l 0,1` every node's control lcore (and the worker
/// threads, which inherit its affinity) queued on core 0 behind a starting
/// node's EAL initialisation, control lcores went unscheduled for 100-130 ms
/// at a time and heartbeats arrived up to 276 ms apart against the bed's
/// 300 ms hold time (a member was removed in CI). Floating: at most 109 ms
/// apart over a 3-node, 2-worker `up`; under the full traffic of
/// `cluster_three_nodes` (control lcore then at nice -10, now real-time, `node/src/main.rs`)
/// the longest gaps of three runs were 131-206 ms.
pub fn eal_args(node: &NodeSpec) -> Vec<String> {
    [
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--file-prefix",
        &node.dpdk_prefix(),
        "--lcores",
        "(0,1)@(0,1)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The DPDK device of a data port: af_packet, or with
/// `CFW_TESTBED_DATA_PMD=pcap` the libpcap PMD. DPDK's af_packet PMD joins a
/// `PACKET_FANOUT` group with `PACKET_FANOUT_FLAG_DEFRAG`, so the kernel
/// reassembles IPv4 fragments before the node sees them (and a datagram
/// beyond the 2048-byte ring frame arrives truncated); tests of the node's
/// own fragment handling need a PMD that delivers fragments as they are.
pub fn data_device(port: usize, ifname: &str) -> String {
    match std::env::var("CFW_TESTBED_DATA_PMD").as_deref() {
        Ok("pcap") => format!("net_pcap{port},iface={ifname},phy_mac=1"),
        _ => format!("net_af_packet{port},iface={ifname},framecnt=2048"),
    }
}

/// The config file of `node`, its control socket at `socket`.
/// `up --nat`: PAT of the inside network to 198.51.100.7, the inside
/// host's port 8080 reachable at 198.51.100.80:80 (static PAT; the access
/// rule names the real address and port: the node checks policy on real
/// addresses).
pub const NAT_SECTION: &str = "
# up --nat: the inside network leaves as 198.51.100.7 (PAT); the outside
# reaches the inside host's port 8080 at 198.51.100.80:80 (static PAT).
access-rules:
  - name: web-in
    action: permit
    interface: outside
    protocol: tcp
    destination: 198.18.1.2/32
    destination-port: 8080

nat:
  pools:
    - name: pat
      addresses: [198.51.100.7]
  rules:
    - name: web
      kind: static-pat
      real-interface: inside
      mapped-interface: outside
      source: 198.18.1.2/32
      mapped: 198.51.100.80
      protocol: tcp
      real-port: 8080
      mapped-port: 80
    - name: out-pat
      kind: dynamic-pat
      real-interface: inside
      mapped-interface: outside
      source: 198.18.1.0/24
      pool: pat
";

/// `up --dynamic-nat`: `section` with its PAT rule a dynamic-NAT rule over
/// three pool addresses.
pub fn dynamic_nat(section: &str) -> String {
    section
        .replace("# up --nat: the inside network leaves as 198.51.100.7 (PAT);", "# up --dynamic-nat: each inside host leaves as one of 198.51.100.7-9;")
        .replace("addresses: [198.51.100.7]", "addresses: [198.51.100.7, 198.51.100.8, 198.51.100.9]")
        .replace("name: out-pat\n      kind: dynamic-pat", "name: out-nat\n      kind: dynamic-nat")
}

/// `up --nat` on a cluster: `NAT_SECTION` for the cluster's client
/// (`topology::cluster_addr::CLIENT`) and network.
pub fn cluster_nat_section() -> String {
    cluster_nat(NAT_SECTION)
}

/// A NAT section for the cluster's client and network.
fn cluster_nat(section: &str) -> String {
    use crate::topology::cluster_addr as a;
    section
        .replace("198.18.1.2/32", &format!("{}/32", a::CLIENT))
        .replace("198.18.1.0/24", a::CLIENT_NET)
        .replace("inside network", "client network")
        .replace("inside host", "client host")
}

/// Where every bed node serves Prometheus' `/metrics`: its own
/// namespace's loopback (`ip netns exec cfw-nK curl http://127.0.0.1:9105/metrics`).
pub const METRICS_LISTEN: &str = "127.0.0.1:9105";

/// A cluster bed node's syslog collectors, on the management segment
/// (`topology::MGMT_NAMESPACE`): rsyslog over UDP with the node's name in
/// the header and over TCP with the cluster's (`device-id`).
fn cluster_syslog() -> String {
    use crate::topology::cluster_addr as a;
    format!(
        "  syslog:\n    - server: {c}:{p}\n      transport: udp\n      device-id: node\n    \
         - server: {c}:{p}\n      transport: tcp\n      device-id: cluster\n",
        c = a::COLLECTOR,
        p = a::SYSLOG_PORT
    )
}

/// A cluster bed node's IPFIX collector (nfcapd on the management segment).
fn cluster_flow_export() -> String {
    use crate::topology::cluster_addr as a;
    format!("\nflow-export:\n  collector: {}:{}\n  template-refresh: 2\n  active-timeout: 1\n", a::COLLECTOR, a::IPFIX_PORT)
}

pub fn node_yaml(node: &NodeSpec, socket: &str) -> String {
    let mut y = String::new();
    let eal: Vec<String> = eal_args(node).iter().map(|a| q(a)).collect();
    // `write!` into a String cannot fail.
    let _ = write!(
        y,
        "# Generated by clusterfw-testbed for node {name}; rewritten by every `up`.\n\
         node:\n  name: {qname}\n\n\
         logging:\n  level: info\n{syslog}\n\
         control-socket: {socket}\n\n\
         metrics:\n  listen: {METRICS_LISTEN}\n\n\
         dpdk:\n  eal-args: [{eal}]\n  mbufs: 8191\n  rx-descriptors: 1024\n  \
         tx-descriptors: 1024\n  burst: 32\n  idle-sleep-us: 200\n",
        name = node.name,
        qname = q(&node.name),
        socket = q(socket),
        eal = eal.join(", "),
        syslog = if node.cluster.is_some() { cluster_syslog() } else { String::new() },
    );
    if node.workers > 1 {
        let _ = writeln!(y, "  workers: {}", node.workers);
    }
    y.push_str("\ninterfaces:\n");
    for (port, i) in node.interfaces.iter().enumerate() {
        let device = data_device(port, &i.ifname);
        let _ = write!(
            y,
            "  - name: {}\n    device: {}\n    address: {}\n    security-level: {}\n",
            q(&i.name),
            q(&device),
            i.address,
            i.security_level
        );
        if i.mtu != 1500 {
            let _ = writeln!(y, "    mtu: {}", i.mtu);
        }
        if let Some(a6) = &i.address6 {
            let _ = writeln!(y, "    address6: {a6}");
        }
    }
    if node.routes.is_empty() && node.routes6.is_empty() {
        y.push_str("\n# Connected networks only.\nroutes: []\n");
    } else {
        y.push_str("\nroutes:\n");
        for (dst, via) in node.routes.iter().chain(&node.routes6) {
            let _ = write!(y, "  - destination: {dst}\n    via: {via}\n");
        }
    }
    let section = match node.nat {
        crate::topology::BedNat::Off => None,
        crate::topology::BedNat::Pat => Some(NAT_SECTION.to_string()),
        crate::topology::BedNat::DynamicNat => Some(dynamic_nat(NAT_SECTION)),
    };
    if let Some(s) = section {
        y.push_str(&if node.cluster.is_some() { cluster_nat(&s) } else { s });
    } else {
        y.push_str(
            "\n# None: the default applies (higher to lower security level permitted,\n\
             # lower to higher denied).\naccess-rules: []\n",
        );
    }
    let _ = write!(
        y,
        "\n\
         timeouts:\n  tcp-syn: 30\n  tcp-established: 3600\n  tcp-closing: 120\n  \
         tcp-closed: 10\n  udp: 120\n  icmp: 10\n  other: 60\n\n\
         flow-table:\n  capacity: {FLOW_TABLE_CAPACITY}\n\n\
         arp:\n  capacity: 4096\n  timeout: 300\n  retry: 1\n"
    );
    if node.cluster.is_some() {
        y.push_str(&cluster_flow_export());
    }
    if let Some(c) = &node.cluster {
        // A queue pair per worker and the control lcore's.
        let device = format!(
            "net_af_packet{},iface={},framecnt=2048,qpairs={}",
            node.interfaces.len(),
            c.ccl_ifname,
            node.workers.max(1) + 1
        );
        let _ = write!(
            y,
            "\ncluster:\n  name: {}\n  key: {}\n  node-id: {}\n  priority: {}\n  \
             tcp-sequence-randomization: true\n  ccl:\n    device: {}\n    address: {}\n  members:\n",
            q(&c.cluster_name),
            q(&c.key),
            c.node_id,
            c.priority,
            q(&device),
            c.ccl_address
        );
        for m in &c.members {
            let _ = write!(
                y,
                "    - id: {}\n      name: {}\n      ccl-address: {}\n",
                m.id,
                q(&m.name),
                m.ccl_address
            );
        }
        // The bed's fast membership timers (issue 10's evidence runs with
        // 100 ms heartbeats and a 300 ms hold time), unless the bed runs
        // the product's defaults.
        if c.timers == crate::topology::BedTimers::Fast {
            let _ = write!(
                y,
                "  heartbeat-interval: {BED_HEARTBEAT_MS}\n  hold-time: {BED_HOLD_MS}\n"
            );
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::Topology;

    #[test]
    fn single_node_yaml_has_the_contracted_fields() {
        let t = Topology::single_node();
        let y = node_yaml(&t.nodes[0], "/tmp/cfw-testbed/n1.sock");
        for want in [
            "control-socket: \"/tmp/cfw-testbed/n1.sock\"",
            "eal-args: [\"--no-huge\", \"-m\", \"256\", \"--no-pci\", \"--file-prefix\", \"cfw-tb-n1\", \"--lcores\", \"(0,1)@(0,1)\"]",
            "  - name: \"inside\"\n    device: \"net_af_packet0,iface=n1-in,framecnt=2048\"\n    address: 198.18.1.1/24\n    security-level: 100\n    address6: 2001:db8:1::1/64\n",
            "  - name: \"outside\"\n    device: \"net_af_packet1,iface=n1-out,framecnt=2048\"\n    address: 198.18.2.1/24\n    security-level: 0\n    address6: 2001:db8:2::1/64\n",
            "access-rules: []",
            "flow-table:\n  capacity: 65536\n",
            "logging:\n  level: info\n",
            "metrics:\n  listen: 127.0.0.1:9105\n",
        ] {
            assert!(y.contains(want), "missing {want:?} in\n{y}");
        }
        // No tabs; every top-level key once.
        assert!(!y.contains('\t'));
        for key in [
            "node:",
            "dpdk:",
            "interfaces:",
            "routes:",
            "timeouts:",
            "arp:",
        ] {
            assert_eq!(
                y.lines()
                    .filter(|l| *l == key || l.starts_with(&format!("{key} ")))
                    .count(),
                1,
                "{key}"
            );
        }
    }

    #[test]
    fn node_config_accepts_the_generated_yaml() {
        let t = Topology::single_node();
        let y = node_yaml(&t.nodes[0], "/tmp/cfw-testbed/n1.sock");
        let c = config::parse(&y, "n1.yaml").unwrap_or_else(|e| panic!("{e}\n{y}"));
        assert_eq!(c.node.name, "n1");
        assert_eq!(
            c.control_socket,
            std::path::Path::new("/tmp/cfw-testbed/n1.sock")
        );
        assert_eq!(c.dpdk.eal_args, eal_args(&t.nodes[0]));
        assert_eq!(c.interfaces.len(), 2);
        assert_eq!(c.interfaces[0].name, "inside");
        assert_eq!(c.interfaces[0].security_level, 100);
        assert_eq!(c.interfaces[1].device_name(), "net_af_packet1");
        assert!(c.access_rules.is_empty() && c.routes.is_empty());
        assert_eq!(c.flow_table.capacity, FLOW_TABLE_CAPACITY);
    }

    #[test]
    fn the_nat_bed_config_parses_with_its_rules() {
        let t = Topology::single_node().with_nat(crate::topology::BedNat::Pat).unwrap();
        let y = node_yaml(&t.nodes[0], "/tmp/cfw-testbed/n1.sock");
        let c = config::parse(&y, "n1.yaml").unwrap_or_else(|e| panic!("{e}\n{y}"));
        assert_eq!(c.nat.rules.len(), 2);
        assert_eq!(c.nat.pools[0].addresses, [std::net::Ipv4Addr::new(198, 51, 100, 7)]);
        assert_eq!(c.access_rules.len(), 1);
        // A cluster: the same rules for its client network, and the outside
        // router spreads the pool's network over the members.
        let t = Topology::new(3).unwrap().with_nat(crate::topology::BedNat::Pat).unwrap();
        for node in &t.nodes {
            let y = node_yaml(node, "/tmp/x.sock");
            let c = config::parse(&y, "n.yaml").unwrap_or_else(|e| panic!("{e}\n{y}"));
            assert!(c.cluster.is_some() && c.nat.rules.len() == 2, "{y}");
            assert!(y.contains("source: 198.18.10.0/24") && y.contains("destination: 198.18.10.2/32"), "{y}");
        }
        let pool = t.routes.iter().find(|r| r.destination == crate::topology::NAT_POOL_NET).expect("pool route");
        assert!(pool.namespace.ends_with("rout") && pool.nexthops.len() == 3, "{pool:?}");
        // Dynamic NAT: three pool addresses, the client network's rule.
        let t = Topology::new(3).unwrap().with_nat(crate::topology::BedNat::DynamicNat).unwrap();
        let y = node_yaml(&t.nodes[0], "/tmp/x.sock");
        let c = config::parse(&y, "n.yaml").unwrap_or_else(|e| panic!("{e}\n{y}"));
        assert_eq!(c.nat.pools[0].addresses.len(), 3, "{y}");
        assert!(c.nat.rules.iter().any(|r| r.kind == config::nat::NatKind::DynamicNat), "{y}");
        assert!(y.contains("source: 198.18.10.0/24"), "{y}");
    }

    #[test]
    fn cluster_node_yaml_parses_with_its_cluster_section() {
        let t = Topology::new(3).unwrap();
        for (k, node) in t.nodes.iter().enumerate() {
            let y = node_yaml(node, "/tmp/x.sock");
            let c = config::parse(&y, "n.yaml").unwrap_or_else(|e| panic!("{e}\n{y}"));
            let cl = c.cluster.as_ref().expect("cluster section");
            assert_eq!(cl.node_id as usize, k + 1);
            assert_eq!(cl.members.len(), 3);
            assert_eq!(
                cl.ccl.device,
                format!("net_af_packet2,iface=n{}-ccl,framecnt=2048,qpairs=2", k + 1)
            );
            assert_eq!(cl.ccl.address.to_string(), format!("198.19.0.{}", 11 + k));
            assert_eq!(c.routes.len(), 2);
            assert!(!c.source_text.contains(crate::topology::cluster_addr::CLUSTER_KEY));
            // Dual-stack: both data interfaces have an IPv6 address, and the
            // node routes the client network and the rest over IPv6 as it
            // does over IPv4; the CCL stays IPv4.
            let a6: Vec<String> = c.interfaces.iter().filter_map(|i| i.address6.map(|a| a.to_string())).collect();
            assert_eq!(a6, [format!("2001:db8:{}::2/64", 11 + k), format!("2001:db8:{}::2/64", 21 + k)], "{y}");
            let r6: Vec<String> = c.routes6.iter().map(|r| format!("{} via {}", r.destination, r.via)).collect();
            assert_eq!(r6, [format!("2001:db8:10::/64 via 2001:db8:{}::1", 11 + k), format!("::/0 via 2001:db8:{}::1", 21 + k)], "{y}");
        }
        // The single-node file has no cluster section.
        let y = node_yaml(&Topology::single_node().nodes[0], "/tmp/x.sock");
        assert!(!y.contains("cluster:"));
    }

    #[test]
    fn strings_are_quoted_safely() {
        let mut node = Topology::single_node().nodes.remove(0);
        node.name = "we\"ird: name".into();
        let y = node_yaml(&node, "/tmp/a b/#x.sock");
        assert!(y.contains(r#"name: "we\"ird: name""#), "{y}");
        assert!(y.contains(r#"control-socket: "/tmp/a b/#x.sock""#), "{y}");
    }
}
