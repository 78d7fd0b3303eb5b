//! The shipped example parses to the expected values; omitted sections get
//! their defaults; the parsed struct serializes for `show config`.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use config::*;

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/node.yaml")
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn net(s: &str) -> Ipv4Net {
    s.parse().unwrap()
}

#[test]
fn example_parses_with_expected_values() {
    let c = load(&example_path()).unwrap();
    assert_eq!(c.node.name, "node1");
    assert_eq!(c.logging.level, LogLevel::Info);
    assert_eq!(c.control_socket, PathBuf::from("/run/clusterfw/node1.sock"));
    assert_eq!(
        c.dpdk,
        DpdkConfig {
            eal_args: [
                "--no-huge",
                "-m",
                "512",
                "--no-pci",
                "--file-prefix",
                "cfw-node1",
                "-l",
                "0,1"
            ]
            .map(String::from)
            .to_vec(),
            mbufs: 8191,
            rx_descriptors: 1024,
            tx_descriptors: 1024,
            burst: 32,
            idle_sleep_us: 200,
            workers: 1,
        }
    );
    assert_eq!(
        c.interfaces,
        vec![
            InterfaceConfig {
                name: "inside".into(),
                device: "net_af_packet0,iface=n1-in".into(),
                address: ip("198.18.1.1"),
                prefix_len: 24,
                security_level: 100,
                vlan: None,
                mtu: 1500,
                reverse_path: ReversePath::Strict,
                address6: None,
            },
            InterfaceConfig {
                name: "outside".into(),
                device: "net_af_packet1,iface=n1-out".into(),
                address: ip("198.18.2.1"),
                prefix_len: 24,
                security_level: 0,
                vlan: None,
                mtu: 1500,
                reverse_path: ReversePath::Strict,
                address6: None,
            },
        ]
    );
    assert!(c.interfaces[0].is_vdev());
    assert_eq!(c.interfaces[1].device_name(), "net_af_packet1");
    assert_eq!(
        c.routes,
        vec![
            RouteConfig {
                destination: Ipv4Net::ANY,
                via: ip("198.18.2.254")
            },
            RouteConfig {
                destination: net("203.0.113.0/24"),
                via: ip("198.18.1.254")
            },
        ]
    );
    assert_eq!(
        c.access_rules,
        vec![
            AccessRule {
                name: "web-in".into(),
                action: Action::Permit,
                interface: Some("outside".into()),
                protocol: Protocol::TCP,
                source: Some(IpNet::V4(Ipv4Net::ANY)),
                destination: Some(net("198.18.1.10/32").into()),
                source_port: PortRange::ANY,
                destination_port: PortRange::single(80),
                limits: Limits::default(),
            },
            AccessRule {
                name: "no-telnet".into(),
                action: Action::Deny,
                interface: None,
                protocol: Protocol::Number(6),
                source: None,
                destination: None,
                source_port: PortRange::ANY,
                destination_port: PortRange { lo: 23, hi: 23 },
                limits: Limits::default(),
            },
        ]
    );
    assert_eq!(
        c.timeouts,
        Timeouts {
            tcp_syn: 30,
            tcp_established: 3600,
            tcp_closing: 120,
            tcp_closed: 10,
            udp: 120,
            icmp: 10,
            other: 60
        }
    );
    assert_eq!(
        c.limits,
        Limits { max_embryonic: Some(100000), per_client_embryonic_max: Some(1000), ..Limits::default() }
    );
    assert_eq!(c.flow_table.capacity, 262144);
    assert_eq!(
        c.arp,
        ArpConfig {
            capacity: 4096,
            timeout: 300,
            retry: 1
        }
    );
    assert_eq!(c.source_file, example_path());
    assert_eq!(
        c.source_text,
        std::fs::read_to_string(example_path()).unwrap()
    );
    assert_eq!(
        c.connected_interface(ip("198.18.2.254"))
            .map(|i| i.name.as_str()),
        Some("outside")
    );
    assert_eq!(c.interface_index("outside"), Some(1));
}

const MINIMAL: &str = "\
node:
  name: edge-7
interfaces:
  - name: lan
    device: 0000:03:00.0
    address: 10.0.0.1/24
    security-level: 50
";

#[test]
fn defaults_apply_to_omitted_sections() {
    let c = parse(MINIMAL, "min.yaml").unwrap();
    assert_eq!(c.node.name, "edge-7");
    assert_eq!(c.logging, LoggingConfig::default());
    assert_eq!(c.logging.level, LogLevel::Info);
    assert_eq!(
        c.control_socket,
        PathBuf::from("/run/clusterfw/edge-7.sock")
    );
    assert_eq!(c.dpdk, DpdkConfig::default());
    assert!(c.dpdk.eal_args.is_empty());
    assert_eq!(
        (c.dpdk.mbufs, c.dpdk.rx_descriptors, c.dpdk.tx_descriptors),
        (8191, 1024, 1024)
    );
    assert_eq!((c.dpdk.burst, c.dpdk.idle_sleep_us), (32, 200));
    assert_eq!(c.interfaces.len(), 1);
    assert!(!c.interfaces[0].is_vdev());
    assert!(c.routes.is_empty());
    assert!(c.access_rules.is_empty());
    assert_eq!(c.timeouts, Timeouts::default());
    assert!(c.limits.is_empty());
    assert_eq!(
        (
            c.timeouts.tcp_syn,
            c.timeouts.tcp_established,
            c.timeouts.tcp_closing,
            c.timeouts.tcp_closed
        ),
        (30, 3600, 120, 10)
    );
    assert_eq!(
        (c.timeouts.udp, c.timeouts.icmp, c.timeouts.other),
        (120, 10, 60)
    );
    assert_eq!(c.flow_table, FlowTableConfig { capacity: 262144 });
    assert_eq!(
        c.arp,
        ArpConfig {
            capacity: 4096,
            timeout: 300,
            retry: 1
        }
    );
    assert_eq!(c.source_file, PathBuf::from("min.yaml"));
}

#[test]
fn partial_sections_and_empty_values_take_defaults() {
    let src = format!(
        "{MINIMAL}logging:\ndpdk:\n  burst: 64\nroutes:\naccess-rules:\ntimeouts:\n  udp: 30\narp: {{retry: 2}}\n"
    );
    let c = parse(&src, "p.yaml").unwrap();
    assert_eq!(c.logging.level, LogLevel::Info);
    assert_eq!(c.dpdk.burst, 64);
    assert_eq!(c.dpdk.mbufs, 8191);
    assert_eq!(c.timeouts.udp, 30);
    assert_eq!(c.timeouts.tcp_syn, 30);
    assert_eq!(
        c.arp,
        ArpConfig {
            capacity: 4096,
            timeout: 300,
            retry: 2
        }
    );
}

#[test]
fn rule_field_forms() {
    let src = format!(
        "{MINIMAL}access-rules:
  - name: a
    action: permit
    interface: any
    protocol: 17
    source: 10.0.0.0/8
    source-port: 1024-65535
    destination-port: \"53\"
  - name: b
    action: deny
    protocol: \"47\"
  - name: c
    action: permit
    interface: lan
    protocol: icmp
  - name: d
    action: permit
    protocol: any
  - name: e
    action: deny
    protocol: udp
    destination-port: 0-65535
"
    );
    let c = parse(&src, "r.yaml").unwrap();
    let r = &c.access_rules;
    assert_eq!(r[0].interface, None);
    assert_eq!(r[0].protocol, Protocol::UDP);
    assert_eq!(r[0].source, Some(net("10.0.0.0/8").into()));
    assert_eq!((r[0].destination, r[0].family()), (None, Some("IPv4")));
    assert_eq!(r[1].family(), None);
    assert_eq!(
        r[0].source_port,
        PortRange {
            lo: 1024,
            hi: 65535
        }
    );
    assert!(r[0].source_port.contains(1024) && !r[0].source_port.contains(1023));
    assert_eq!(r[0].destination_port, PortRange::single(53));
    assert_eq!(r[1].protocol, Protocol::Number(47));
    assert_eq!(r[2].interface.as_deref(), Some("lan"));
    assert_eq!(r[2].protocol, Protocol::ICMP);
    assert_eq!(r[3].protocol, Protocol::Any);
    assert!(r[4].destination_port.is_any());
}

/// Access rules with IPv6 prefixes (issue 16): a /64, a host (/128), in
/// any RFC 4291 form; `any` or no address; `icmp6`. The family of a rule
/// is its addresses'; `show config` prints the canonical forms and `any`.
#[test]
fn ipv6_rule_forms() {
    let src = format!(
        "{MINIMAL}access-rules:
  - name: v6-net
    action: permit
    source: 2001:DB8:1:0::/64
    destination: \"2001:db8:2::80/128\"
    protocol: tcp
    destination-port: 443
  - name: v6-only
    action: deny
    source: ::/0
  - name: v4-only
    action: deny
    destination: 0.0.0.0/0
  - name: both
    action: permit
    source: any
    destination: any
    protocol: icmp6
  - name: mapped
    action: deny
    source: ::ffff:192.0.2.0/120
"
    );
    let c = parse(&src, "r.yaml").unwrap();
    let r = &c.access_rules;
    let n6 = |s: &str| Some(IpNet::V6(s.parse().unwrap()));
    assert_eq!((r[0].source, r[0].destination), (n6("2001:db8:1::/64"), n6("2001:db8:2::80/128")));
    assert_eq!(r[0].family(), Some("IPv6"));
    assert_eq!((r[1].source, r[1].destination, r[1].family()), (n6("::/0"), None, Some("IPv6")));
    assert_eq!((r[2].source, r[2].family()), (None, Some("IPv4")));
    assert_eq!((r[3].source, r[3].destination, r[3].family(), r[3].protocol), (None, None, None, Protocol::ICMP6));
    assert_eq!(r[4].source, n6("::ffff:192.0.2.0/120"));
    let j: serde_json::Value = serde_json::to_value(&c).unwrap();
    assert_eq!(j["access-rules"][0]["source"], "2001:db8:1::/64");
    assert_eq!(j["access-rules"][0]["destination"], "2001:db8:2::80/128");
    assert_eq!(j["access-rules"][1]["destination"], "any");
    assert_eq!(j["access-rules"][2]["destination"], "0.0.0.0/0");
    assert_eq!(j["access-rules"][3]["protocol"], "icmp6");
    // The replicated document carries them and reads back equal.
    let p = c.policy();
    let y = p.to_yaml();
    assert!(y.contains("    source: \"2001:db8:1::/64\"\n") && y.contains("    destination: \"0.0.0.0/0\"\n"), "{y}");
    assert_eq!(config::parse_policy(&y, "replicated", &c.interfaces).unwrap(), p);
}

#[test]
fn vlan_interfaces_may_share_a_device() {
    let src = "\
node: {name: v}
interfaces:
  - {name: a, device: net_tap0, address: 10.0.1.1/24, security-level: 0, vlan: 10}
  - {name: b, device: \"net_tap0,iface=x\", address: 10.0.2.1/24, security-level: 10, vlan: 4094}
  - {name: c, device: net_tap0, address: 10.0.3.1/31, security-level: 20}
";
    let c = parse(src, "v.yaml").unwrap();
    assert_eq!(c.interfaces[0].vlan, Some(10));
    assert_eq!(c.interfaces[1].vlan, Some(4094));
    assert_eq!(c.interfaces[2].vlan, None);
}

#[test]
fn serializes_to_json_with_yaml_names() {
    let c = load(&example_path()).unwrap();
    let j: serde_json::Value = serde_json::to_value(&c).unwrap();
    assert_eq!(j["node"]["name"], "node1");
    assert_eq!(j["logging"]["level"], "info");
    assert_eq!(j["control-socket"], "/run/clusterfw/node1.sock");
    assert_eq!(j["dpdk"]["idle-sleep-us"], 200);
    assert_eq!(j["interfaces"][0]["address"], "198.18.1.1");
    assert_eq!(j["interfaces"][0]["prefix-len"], 24);
    assert_eq!(j["interfaces"][0]["security-level"], 100);
    assert_eq!(j["routes"][0]["destination"], "0.0.0.0/0");
    assert_eq!(j["access-rules"][0]["protocol"], "tcp");
    assert_eq!(j["access-rules"][0]["destination-port"], "80");
    assert_eq!(j["access-rules"][0]["source-port"], "0-65535");
    assert_eq!(j["access-rules"][0]["action"], "permit");
    assert_eq!(j["timeouts"]["tcp-established"], 3600);
    assert_eq!(j["flow-table"]["capacity"], 262144);
    assert!(j.get("source-text").is_none());
    // IPv4-only: no IPv6 keys at all.
    assert!(j["interfaces"][0].get("address6").is_none());
    assert!(j.get("routes6").is_none());
    assert!(j["source-file"].as_str().unwrap().ends_with("node.yaml"));
}

#[test]
fn unreadable_file_names_the_file() {
    let e = load(Path::new("/nonexistent/cfw.yaml")).unwrap_err();
    assert_eq!(e.file(), "/nonexistent/cfw.yaml");
    assert_eq!(e.line(), 0);
    assert!(matches!(e.kind(), ErrorKind::Read(_)));
    assert!(
        e.to_string()
            .starts_with("/nonexistent/cfw.yaml: cannot read configuration: "),
        "{e}"
    );
}

#[test]
fn reverse_path_is_strict_unless_set() {
    let text = std::fs::read_to_string(example_path()).unwrap();
    let c = parse(&text, "node.yaml").unwrap();
    assert!(c.interfaces.iter().all(|i| i.reverse_path == ReversePath::Strict));
    for (mode, want) in [("loose", ReversePath::Loose), ("off", ReversePath::Off), ("strict", ReversePath::Strict)] {
        let edited = text.replace("    security-level: 0\n", &format!("    security-level: 0\n    reverse-path: {mode}\n"));
        let c = parse(&edited, "node.yaml").unwrap();
        assert_eq!((c.interfaces[0].reverse_path, c.interfaces[1].reverse_path), (ReversePath::Strict, want));
    }
}

/// A permit rule's `limits`, the global ones, and what is refused: a zero,
/// a value past u32, an unknown key, limits on a deny rule; each error
/// names its line and field. The policy document carries them both ways.
#[test]
fn limits_globally_and_per_rule() {
    let text = std::fs::read_to_string(example_path()).unwrap();
    let with_rule = |limits: &str| {
        text.replace("    # source-port: \"1024-65535\"\n", &format!("    limits:\n{limits}"))
    };
    let c = parse(&with_rule("      max-conns: 500\n      per-client-embryonic-max: 5\n"), "node.yaml").unwrap();
    assert_eq!(
        c.access_rules[0].limits,
        Limits { max_conns: Some(500), per_client_embryonic_max: Some(5), ..Limits::default() }
    );
    assert!(c.access_rules[1].limits.is_empty());
    let p = c.policy();
    let back = parse_policy(&p.to_yaml(), "replicated", &c.interfaces).unwrap();
    assert_eq!(back, p);
    assert_eq!(back.access_rules[0].limits.max_conns, Some(500));
    assert_eq!(back.limits.max_embryonic, Some(100000));

    for (edit, line, field, msg) in [
        ("      max-conns: 0\n", 51, "access-rules[0].limits.max-conns", "value 0 out of range: expected 1-4294967295"),
        ("      max-embryonic: 4294967296\n", 51, "access-rules[0].limits.max-embryonic", "out of range"),
        ("      max-conn: 5\n", 51, "access-rules[0].limits", "unknown field `max-conn`"),
    ] {
        let e = parse(&with_rule(edit), "node.yaml").unwrap_err().to_string();
        assert!(e.contains(&format!("node.yaml:{line}:")) && e.contains(field) && e.contains(msg), "{edit:?}: {e}");
    }
    let deny = text.replace("    destination-port: 23\n", "    destination-port: 23\n    limits:\n      max-conns: 5\n");
    let e = parse(&deny, "node.yaml").unwrap_err().to_string();
    assert!(e.contains("access-rules[1].limits") && e.contains("this rule denies"), "{e}");
    let e = parse(&text.replace("  max-embryonic: 100000 ", "  max-embryonic: -1     "), "node.yaml").unwrap_err().to_string();
    assert!(e.contains("limits.max-embryonic"), "{e}");
}

fn ip6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn net6(s: &str) -> Ipv6Net {
    s.parse().unwrap()
}

/// Issue 16: `address6` on interfaces and IPv6 destinations in `routes`,
/// mixed with IPv4 routes in one list.
const DUAL_STACK: &str = "\
node: {name: ds}
interfaces:
  - name: inside
    device: net_tap0
    address: 10.0.0.1/24
    address6: 2001:db8:1::1/64
    security-level: 100
  - name: outside
    device: net_tap1
    address: 10.0.1.1/24
    address6: \"2001:DB8:2:0::1/64\"
    security-level: 0
  - name: dmz
    device: net_tap2
    address: 10.0.2.1/24
    security-level: 50
  - {name: p2p, device: net_tap3, address: 10.0.3.1/30, address6: 2001:db8:3::1/127, security-level: 10}
  - {name: host, device: net_tap4, address: 10.0.4.1/30, address6: \"2001:db8:4::/128\", security-level: 10}
routes:
  - destination: ::/0
    via: 2001:db8:2::fe
  - destination: 0.0.0.0/0
    via: 10.0.1.254
  - destination: 2001:db8:9::/48
    via: 2001:db8:1::fe
  - destination: 2001:db8:3::/127
    via: \"2001:db8:3::\"   # quoted: a plain YAML scalar cannot end in ':'
";

#[test]
fn dual_stack_parses() {
    let c = parse(DUAL_STACK, "ds.yaml").unwrap_or_else(|e| panic!("{e}"));
    let a6: Vec<Option<Ipv6Host>> = c.interfaces.iter().map(|i| i.address6).collect();
    assert_eq!(
        a6,
        vec![
            Some(Ipv6Host { addr: ip6("2001:db8:1::1"), len: 64 }),
            Some(Ipv6Host { addr: ip6("2001:db8:2::1"), len: 64 }),
            None,
            // /127 (RFC 6164) and /128 have no subnet-router anycast address.
            Some(Ipv6Host { addr: ip6("2001:db8:3::1"), len: 127 }),
            Some(Ipv6Host { addr: ip6("2001:db8:4::"), len: 128 }),
        ]
    );
    assert_eq!(c.interfaces[1].subnet6(), Some(net6("2001:db8:2::/64")));
    assert_eq!(c.interfaces[2].subnet6(), None);
    // The IPv4 routes and the IPv6 ones, each in the order written.
    assert_eq!(
        c.routes,
        vec![RouteConfig { destination: Ipv4Net::ANY, via: ip("10.0.1.254") }]
    );
    assert_eq!(
        c.routes6,
        vec![
            Route6Config { destination: Ipv6Net::ANY, via: ip6("2001:db8:2::fe") },
            Route6Config { destination: net6("2001:db8:9::/48"), via: ip6("2001:db8:1::fe") },
            Route6Config { destination: net6("2001:db8:3::/127"), via: ip6("2001:db8:3::") },
        ]
    );
    assert_eq!(
        c.connected_interface6(ip6("2001:db8:1::fe")).map(|i| i.name.as_str()),
        Some("inside")
    );
    assert!(c.connected_interface6(ip6("2001:db8:9::1")).is_none());

    // `show config`: the canonical text forms; address6 only where set.
    let j: serde_json::Value = serde_json::to_value(&c).unwrap();
    assert_eq!(j["interfaces"][1]["address6"], "2001:db8:2::1/64");
    assert!(j["interfaces"][2].get("address6").is_none());
    assert_eq!(j["routes6"][0]["destination"], "::/0");
    assert_eq!(j["routes6"][0]["via"], "2001:db8:2::fe");
    assert_eq!(j["routes6"][1]["destination"], "2001:db8:9::/48");
    assert_eq!(j["routes"][0]["destination"], "0.0.0.0/0");

    // A reload sees a change of either as a local change.
    let other = parse(&DUAL_STACK.replace("2001:db8:9::/48", "2001:db8:8::/48"), "ds.yaml").unwrap();
    assert_eq!(c.local_changes(&other), vec!["routes"]);
    let other = parse(&DUAL_STACK.replace("2001:db8:1::1/64", "2001:db8:1::2/64"), "ds.yaml").unwrap();
    assert_eq!(c.local_changes(&other), vec!["interfaces"]);
}

#[test]
fn shipped_examples_still_parse() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    for name in ["node.yaml", "cluster-node.yaml"] {
        let c = load(&dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
        assert!(c.interfaces.iter().all(|i| i.address6.is_none()), "{name}");
        assert!(c.routes6.is_empty(), "{name}");
    }
}
