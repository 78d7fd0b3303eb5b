//! The `nat` section (SPEC N1–N9): a file with every kind parses to the
//! documented values and defaults, its policy document reads back equal,
//! and one broken file per rule reports the exact line, field and message.

use config::nat::{NatKind, UdpSessions};
use config::{parse, parse_policy, Ipv4Net};
use std::net::Ipv4Addr;

const NODE: &str = "\
node:
  name: n
interfaces:
  - name: inside
    device: net_tap0
    address: 10.0.0.1/24
    security-level: 100
  - name: outside
    device: net_tap1
    address: 192.0.2.1/24
    security-level: 0
";

const CLUSTER: &str = include_str!("../examples/cluster-node.yaml");

/// A NAT section with every kind (from line 12, after `NODE`'s 11).
const NAT: &str = "\
nat:
  pools:
    - name: pat
      addresses: [198.51.100.8/30, 198.51.100.20-198.51.100.21, 198.51.100.30]
    - name: dyn
      addresses: [203.0.113.0/28]
  rules:
    - name: out-pat
      kind: dynamic-pat
      real-interface: inside
      mapped-interface: outside
      source: 10.0.0.0/24
      pool: pat
      block-size: 1024
      max-blocks-per-host: 2
      per-session-udp: all
    - name: lab-nat
      kind: dynamic-nat
      source: 10.0.1.0/24
      pool: dyn
    - name: web
      kind: static-pat
      real-interface: inside
      mapped-interface: outside
      source: 10.0.0.80/32
      mapped: 198.51.100.40
      protocol: tcp
      real-port: 8080
      mapped-port: 80
    - name: db
      kind: static-nat
      source: 10.0.0.64/28
      mapped: 198.51.100.64/28
";

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

#[test]
fn every_kind_parses_with_its_defaults() {
    let c = parse(&format!("{NODE}{NAT}"), "n.yaml").unwrap_or_else(|e| panic!("{e}"));
    let n = &c.nat;
    let pat = n.pool("pat").unwrap();
    let want: Vec<Ipv4Addr> = [
        "198.51.100.8",
        "198.51.100.9",
        "198.51.100.10",
        "198.51.100.11",
        "198.51.100.20",
        "198.51.100.21",
        "198.51.100.30",
    ]
    .map(ip)
    .to_vec();
    assert_eq!(pat.addresses, want, "prefix, range and address, ascending");
    assert_eq!(n.pool("dyn").unwrap().addresses.len(), 16);
    let r = &n.rules[0];
    assert_eq!(
        (r.kind, r.block_size, r.include_reserved_ports, r.max_blocks_per_host),
        (NatKind::DynamicPat, 1024, false, Some(2))
    );
    assert_eq!((r.per_session_tcp, r.per_session_udp), (true, UdpSessions::All));
    assert_eq!((r.real_interface.as_deref(), r.mapped_interface.as_deref()), (Some("inside"), Some("outside")));
    let r = &n.rules[1];
    assert_eq!((r.kind, r.real_interface.as_deref(), r.pool.as_deref()), (NatKind::DynamicNat, None, Some("dyn")));
    assert_eq!(r.block_size, 512, "the default, unused outside PAT");
    assert_eq!(r.max_blocks_per_host, None, "plain PAT unless asked");
    let r = &n.rules[2];
    assert_eq!((r.protocol, r.real_port, r.mapped_port), (Some(6), Some(8080), Some(80)));
    assert_eq!(r.mapped, Some(Ipv4Net::new(ip("198.51.100.40"), 32).unwrap()));
    assert_eq!(r.per_session_udp, UdpSessions::Dns, "the reference's default");
    assert_eq!(n.rules[3].mapped.map(|m| m.len), Some(28));
    // The replicated document carries it and reads back equal.
    let p = c.policy();
    let y = p.to_yaml();
    let back = parse_policy(&y, "replicated", &c.interfaces).unwrap_or_else(|e| panic!("{e}\n{y}"));
    assert_eq!(back, p);
    assert_eq!(c.with_policy(&back).nat, c.nat);
    // Without a nat section: empty, and the document has none.
    let c = parse(NODE, "n.yaml").unwrap();
    assert!(c.nat.is_empty());
    assert!(!c.policy().to_yaml().contains("nat:"));
}

/// `NODE` + `nat` text; errors carry (line, field, message part).
fn err(nat: &str) -> (usize, String, String) {
    let src = format!("{NODE}{nat}");
    let e = parse(&src, "n.yaml").expect_err(&src);
    (e.line(), e.field().to_string(), e.to_string())
}

fn rule(body: &str) -> String {
    format!("nat:\n  pools:\n    - name: pat\n      addresses: [198.51.100.1]\n  rules:\n    - name: r\n{body}")
}

#[test]
fn broken_nat_sections_name_line_and_field() {
    // (nat text, line, field, message part). `rule` puts the rule's first
    // key on line 18.
    let cases: Vec<(String, usize, &str, &str)> = vec![
        (rule("      kind: dynamic-pat\n      source: 10.0.0.0/8\n      pool: nope\n"), 20, "nat.rules[0].pool", "unknown pool \"nope\": expected one of pat"),
        (rule("      kind: dynamic-pat\n      source: 10.0.0.0/8\n"), 17, "nat.rules[0]", "a dynamic-pat rule needs `pool`"),
        (rule("      kind: static-nat\n      source: 10.0.0.5/32\n"), 17, "nat.rules[0]", "a static-nat rule needs `mapped`"),
        (rule("      kind: dynamic-pat\n      source: 10.0.0.0/8\n      pool: pat\n      mapped: 1.2.3.4\n"), 21, "nat.rules[0].mapped", "`mapped` does not apply to a dynamic-pat rule"),
        (rule("      kind: dynamic-nat\n      source: 10.0.0.0/8\n      pool: pat\n      block-size: 256\n"), 21, "nat.rules[0].block-size", "`block-size` does not apply to a dynamic-nat rule"),
        (rule("      kind: dynamic-pat\n      source: 10.0.0.0/8\n      pool: pat\n      block-size: 16\n"), 21, "nat.rules[0].block-size", "value 16 out of range: expected 32-4096"),
        (rule("      kind: dynamic-pat\n      source: 10.0.0.0/8\n      pool: pat\n      max-blocks-per-host: 9\n"), 21, "nat.rules[0].max-blocks-per-host", "value 9 out of range: expected 1-8"),
        (rule("      kind: dynamic-pat\n      real-interface: dmz\n      source: 10.0.0.0/8\n      pool: pat\n"), 19, "nat.rules[0].real-interface", "unknown interface \"dmz\""),
        (rule("      kind: static-nat\n      source: 10.0.0.0/28\n      mapped: 198.51.100.0/29\n"), 20, "nat.rules[0].mapped", "prefix length /29: expected /28"),
        (rule("      kind: static-pat\n      source: 10.0.0.5/32\n      mapped: 198.51.100.9\n      protocol: icmp\n      real-port: 1\n      mapped-port: 1\n"), 21, "nat.rules[0].protocol", "expected tcp or udp"),
        (rule("      kind: static-pat\n      source: 10.0.0.5/32\n      mapped: 198.51.100.9\n      protocol: tcp\n      real-port: 1\n"), 17, "nat.rules[0]", "a static-pat rule needs `mapped-port`"),
        (rule("      kind: static-nat\n      source: 10.0.0.5/32\n      mapped: 198.51.100.9\n      real-port: 1\n"), 21, "nat.rules[0].real-port", "`real-port` does not apply to a static-nat rule"),
        (rule("      kind: dynamic-pat\n      source: 10.0.0.0/8\n      pool: pat\n      extended: true\n"), 21, "nat.rules[0].extended", "extended PAT is not supported by clusterfw"),
        (rule("      kind: static-pat\n      source: 10.0.0.5/32\n      mapped: 198.51.100.9\n      inspect: [ftp]\n"), 21, "nat.rules[0].inspect[0]", "static PAT with FTP, PPTP, RSH, SQLNET, TFTP, XDMCP or SIP inspection is not supported by clusterfw"),
        (rule("      kind: dynamic-pat\n      source: 10.0.0.0/8\n      pool: pat\n      per-session-udp: some\n"), 21, "nat.rules[0].per-session-udp", "unknown variant `some`, expected one of `dns`, `all`, `none`"),
        (rule("      kind: twice-nat\n"), 18, "nat.rules[0].kind", "unknown variant `twice-nat`"),
        (rule("      kind: dynamic-pat\n      source: 10.0.0.0/8\n      pool: pat\n    - name: r\n      kind: dynamic-pat\n      source: 10.0.1.0/24\n      pool: pat\n"), 21, "nat.rules[1].name", "duplicate nat rule name \"r\" (first at line 17)"),
        // N1: a pool shared by a rule with specific interfaces and one with "any".
        (rule("      kind: dynamic-pat\n      real-interface: inside\n      mapped-interface: outside\n      source: 10.0.0.0/8\n      pool: pat\n    - name: r2\n      kind: dynamic-pat\n      source: 10.1.0.0/16\n      pool: pat\n"), 26, "nat.rules[1].pool", "pool \"pat\" is also used by rule \"r\" (line 17), which differs in interfaces: rules sharing a pool must all name specific interfaces or all use \"any\" (SPEC N1)"),
        (rule("      kind: dynamic-pat\n      source: 10.0.0.0/8\n      pool: pat\n    - name: r2\n      kind: dynamic-pat\n      source: 10.1.0.0/16\n      pool: pat\n      block-size: 256\n"), 24, "nat.rules[1].pool", "which differs in block-size"),
        (rule("      kind: dynamic-pat\n      source: 10.0.0.0/8\n      pool: pat\n    - name: r2\n      kind: dynamic-nat\n      source: 10.1.0.0/16\n      pool: pat\n"), 24, "nat.rules[1].pool", "which differs in its kind"),
        // Pools.
        ("nat:\n  pools:\n    - name: p\n      addresses: [198.51.100.0/33]\n".to_string(), 15, "nat.pools[0].addresses[0]", "invalid value \"198.51.100.0/33\""),
        ("nat:\n  pools:\n    - name: p\n      addresses: [10.0.0.9-10.0.0.1]\n".to_string(), 15, "nat.pools[0].addresses[0]", "a range a.b.c.d-e.f.g.h"),
        ("nat:\n  pools:\n    - name: p\n      addresses: [10.0.0.0/15]\n".to_string(), 15, "nat.pools[0].addresses[0]", "value 131072 out of range: expected 1-65536"),
        ("nat:\n  pools:\n    - name: p\n      addresses: [10.0.0.1, 10.0.0.0/30]\n".to_string(), 15, "nat.pools[0].addresses", "duplicate pool address \"10.0.0.1\""),
        ("nat:\n  pools:\n    - name: p\n      addresses: [10.0.0.1]\n    - name: q\n      addresses: [10.0.0.0/30]\n".to_string(), 17, "nat.pools[1].addresses", "duplicate pool address (in two pools) \"10.0.0.1\" (first at line 15)"),
        ("nat:\n  pools:\n    - name: p\n      addresses: []\n".to_string(), 15, "nat.pools[0].addresses", "at least one pool address is required"),
        ("nat:\n  pools:\n    - name: p\n      addresses: [10.0.0.1]\n    - name: p\n      addresses: [10.0.0.2]\n".to_string(), 16, "nat.pools[1].name", "duplicate pool name \"p\" (first at line 14)"),
        ("nat:\n  pools:\n    - name: p\n      addresses: [10.0.0.1]\n      round-robin: true\n".to_string(), 16, "nat.pools[0].round-robin", "PAT pool round-robin is not supported by clusterfw"),
    ];
    for (nat, line, field, msg) in cases {
        let (l, f, m) = err(&nat);
        assert_eq!((l, f.as_str()), (line, field), "{m}\n{nat}");
        assert!(m.contains(msg), "{m}\nwanted: {msg}\n{nat}");
    }
}

/// In a cluster the features N8 excludes are refused by N8's name, in a
/// node file and in a replicated policy document.
#[test]
fn a_cluster_refuses_what_n8_excludes() {
    let nat = "nat:\n  pools:\n    - name: p\n      addresses: [198.51.100.1]\n      round-robin: true\n";
    let src = format!("{CLUSTER}{nat}");
    let e = parse(&src, "c.yaml").expect_err("round-robin");
    assert_eq!(e.field(), "nat.pools[0].round-robin");
    assert!(e.to_string().ends_with("PAT pool round-robin is not supported in a cluster (SPEC N8)"), "{e}");
    for (key, feature) in
        [("extended: true", "extended PAT"), ("interface-pat: true", "interface PAT on individual interfaces")]
    {
        let src = format!(
            "{CLUSTER}nat:\n  pools:\n    - name: p\n      addresses: [198.51.100.1]\n  rules:\n    - name: r\n      kind: dynamic-pat\n      source: 10.0.0.0/8\n      pool: p\n      {key}\n"
        );
        let e = parse(&src, "c.yaml").expect_err(key);
        assert!(e.to_string().ends_with(&format!("{feature} is not supported in a cluster (SPEC N8)")), "{e}");
    }
    let c = parse(CLUSTER, "c.yaml").unwrap();
    let levels = "interfaces:\n  - name: inside\n    security-level: 100\n  - name: outside\n    security-level: 0\n";
    let doc = format!(
        "{levels}nat:\n  rules:\n    - name: web\n      kind: static-pat\n      source: 10.0.0.5/32\n      mapped: 198.51.100.9\n      protocol: udp\n      real-port: 69\n      mapped-port: 69\n      inspect: [tftp]\n"
    );
    let e = parse_policy(&doc, "replicated", &c.interfaces).expect_err("tftp");
    assert_eq!((e.line(), e.field()), (15, "nat.rules[0].inspect[0]"));
    assert!(e.to_string().ends_with("is not supported in a cluster (SPEC N8)"), "{e}");
}

/// A hostile or broken section never panics: every truncation and every
/// single-line deletion of a file with a NAT section, and of its policy
/// document, is `Ok` or an error with a position.
#[test]
fn every_truncation_and_line_deletion_of_a_nat_section() {
    let full = format!("{NODE}{NAT}");
    let c = parse(&full, "n.yaml").unwrap();
    let doc = c.policy().to_yaml();
    for (src, policy) in [(full.as_str(), false), (doc.as_str(), true)] {
        let check = |s: &str| {
            let r = if policy { parse_policy(s, "p", &c.interfaces).map(|_| ()) } else { parse(s, "p").map(|_| ()) };
            if let Err(e) = r {
                assert!(e.line() >= 1 && e.column() >= 1, "{e}");
            }
        };
        for n in (0..=src.len()).filter(|&n| src.is_char_boundary(n)) {
            check(&src[..n]);
        }
        let lines: Vec<&str> = src.lines().collect();
        for i in 0..lines.len() {
            let mut v = lines.clone();
            v.remove(i);
            check(&v.join("\n"));
        }
    }
}

/// NAT deals a pool's blocks over the node's workers: at most 32 of them
/// with NAT rules (64 without).
#[test]
fn nat_runs_on_up_to_32_workers() {
    let with = |n: u16, nat: &str| format!("{}dpdk:\n  workers: {n}\n{nat}", NODE);
    let pat = rule("      kind: dynamic-pat\n      source: 10.0.0.0/24\n      pool: pat\n");
    assert_eq!(parse(&with(32, &pat), "n.yaml").unwrap().dpdk.workers, 32);
    assert_eq!(parse(&with(64, ""), "n.yaml").unwrap().dpdk.workers, 64);
    let e = parse(&with(33, &pat), "n.yaml").unwrap_err();
    assert_eq!((e.line(), e.field()), (13, "dpdk.workers"), "{e}");
    assert!(e.to_string().ends_with("33 workers: NAT rules run on at most 32 (a PAT pool's blocks are dealt over the workers; docs/nat.md)"), "{e}");
}
