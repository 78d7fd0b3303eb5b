//! The `cluster:` section: the example parses to the documented values,
//! the key is never printed back, and one broken file per validation rule
//! reports the exact line, column, field and message.
//!
//! Cases edit one line of `config/examples/cluster-node.yaml`
//! (`cat -n` it to follow the line numbers).

use config::{parse, ConfigError, ErrorKind};
use std::net::Ipv4Addr;

const EXAMPLE: &str = include_str!("../examples/cluster-node.yaml");
const KEY: &str = "change-me-to-a-long-random-secret";

fn edit(n: usize, text: &str) -> String {
    let mut lines: Vec<&str> = EXAMPLE.lines().collect();
    lines[n - 1] = text;
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

#[test]
fn example_parses_with_defaults() {
    let c = parse(EXAMPLE, "cluster-node.yaml").unwrap_or_else(|e| panic!("{e}"));
    let cl = c.cluster.as_ref().expect("cluster section");
    assert_eq!(cl.name, "cfw-demo");
    assert_eq!(cl.key.expose(), KEY);
    assert_eq!(cl.node_id, 1);
    assert_eq!(cl.priority, 10);
    assert_eq!(cl.site_id, None);
    assert_eq!(cl.chassis_id, None);
    assert!(cl.tcp_sequence_randomization);
    assert_eq!(cl.ccl.device_name(), "net_af_packet2");
    assert!(cl.ccl.is_vdev());
    assert_eq!(cl.ccl.address, ip("198.19.0.11"));
    assert_eq!(cl.ccl.prefix_len, 24);
    assert_eq!(cl.ccl.subnet().to_string(), "198.19.0.0/24");
    assert_eq!(cl.members.len(), 3);
    assert_eq!(cl.this_member().map(|m| m.name.as_str()), Some("n1"));
    let peers: Vec<(u8, Ipv4Addr)> = cl.peers().map(|m| (m.id, m.ccl_address)).collect();
    assert_eq!(peers, [(2, ip("198.19.0.12")), (3, ip("198.19.0.13"))]);

    // Optional fields and defaults.
    let src = EXAMPLE
        .replace("  # site-id: 1                # optional, 1-255", "  site-id: 2")
        .replace("  # chassis-id: 1             # optional, 1-255", "  chassis-id: 7")
        .replace("  tcp-sequence-randomization: true\n", "");
    let c = parse(&src, "x.yaml").unwrap_or_else(|e| panic!("{e}"));
    let cl = c.cluster.unwrap();
    assert_eq!((cl.site_id, cl.chassis_id), (Some(2), Some(7)));
    assert!(cl.tcp_sequence_randomization, "default true");
    let c = parse(&edit(38, "  tcp-sequence-randomization: false"), "x.yaml").unwrap();
    assert!(!c.cluster.unwrap().tcp_sequence_randomization);
    let c = parse(&src.replace("  split-brain: elect", "  split-brain: elect\n  director-localization: true\n  site-redundancy: true"), "x.yaml").unwrap();
    let cl = c.cluster.unwrap();
    assert!(cl.director_localization && cl.site_redundancy);
}

#[test]
fn membership_settings_and_their_defaults() {
    let cl = parse(EXAMPLE, "x.yaml").unwrap().cluster.unwrap();
    assert_eq!((cl.heartbeat_interval_ms, cl.hold_time_ms), (1000, 3000));
    assert_eq!((cl.backups, cl.split_brain), (1, config::SplitBrain::Elect));
    assert_eq!((cl.interface_debounce_ms, cl.sync_timeout_ms), (500, 5000));
    // Without the lines: the same defaults.
    let bare: String = EXAMPLE.lines().take(53).map(|l| format!("{l}\n")).collect();
    let d = parse(&bare, "x.yaml").unwrap().cluster.unwrap();
    assert_eq!(
        (d.heartbeat_interval_ms, d.hold_time_ms, d.backups, d.split_brain, d.interface_debounce_ms, d.sync_timeout_ms),
        (1000, 3000, 1, config::SplitBrain::Elect, 500, 5000)
    );
    // The test bed's fast timers and the other choices.
    let src = edit(59, "  heartbeat-interval: 100");
    let src = src.replace("  hold-time: 3000             # ms, 150-60000", "  hold-time: 300");
    let src = src.replace("  backups: 1                  # 1 or 2", "  backups: 2");
    let src = src.replace("  split-brain: elect          # elect | quorum (3 or more members)", "  split-brain: quorum");
    let f = parse(&src, "x.yaml").unwrap_or_else(|e| panic!("{e}")).cluster.unwrap();
    assert_eq!((f.heartbeat_interval_ms, f.hold_time_ms, f.backups, f.split_brain), (100, 300, 2, config::SplitBrain::Quorum));
}

#[test]
fn no_cluster_section_is_a_single_node() {
    let c = parse(include_str!("../examples/node.yaml"), "node.yaml").unwrap();
    assert!(c.cluster.is_none());
}

#[test]
fn the_key_is_never_printed_back() {
    let c = parse(EXAMPLE, "cluster-node.yaml").unwrap();
    let json = serde_json::to_string(&c).unwrap();
    let debug = format!("{c:?}");
    for (what, text) in [("json", &json), ("debug", &debug), ("source_text", &c.source_text)] {
        assert!(!text.contains(KEY), "{what} shows the key: {text}");
        assert!(text.contains("<redacted>"), "{what}: {text}");
    }
    // Only the key's line changed in the text `show config` prints.
    let changed: Vec<(&str, &str)> = EXAMPLE
        .lines()
        .zip(c.source_text.lines())
        .filter(|(a, b)| a != b)
        .collect();
    assert_eq!(changed, [(format!("  key: \"{KEY}\"").as_str(), "  key: \"<redacted>\"")]);
    assert_eq!(EXAMPLE.lines().count(), c.source_text.lines().count());

    // Other spellings: plain, single-quoted, a block scalar, flow style.
    let secret = "0123456789abcdefXYZ";
    for (how, src) in [
        ("plain", edit(33, &format!("  key: {secret}"))),
        ("single-quoted", edit(33, &format!("  key: '{secret}'   # comment"))),
        ("block scalar", edit(33, &format!("  key: |\n    {secret}\n    more-{secret}"))),
        ("folded over lines", edit(33, &format!("  key:\n    {secret}\n\n    {secret}"))),
    ] {
        let c = parse(&src, "x.yaml").unwrap_or_else(|e| panic!("{how}: {e}"));
        assert!(!c.source_text.contains(secret), "{how}: {}", c.source_text);
        assert!(c.source_text.contains("  node-id: 1"), "{how}: {}", c.source_text);
        assert!(c.cluster.unwrap().key.expose().contains(secret), "{how}");
    }
    let flow = format!(
        "node: {{name: n1}}\ninterfaces: [{{name: a, device: x, address: 10.0.0.1/24, security-level: 0}}]\n\
         cluster: {{name: c, key: \"{secret}\", node-id: 0, priority: 1, ccl: {{device: y, address: 10.9.0.1/24}}, \
         members: [{{id: 0, name: n1, ccl-address: 10.9.0.1}}]}}\n"
    );
    let c = parse(&flow, "flow.yaml").unwrap_or_else(|e| panic!("{e}"));
    assert!(!c.source_text.contains(secret), "{}", c.source_text);
    assert!(c.source_text.contains("members: [{id: 0"), "{}", c.source_text);
    // A short key is an error that does not show the key either.
    let e = parse(&edit(33, "  key: short-secret"), "x.yaml").unwrap_err();
    assert!(!e.to_string().contains("short-secret"), "{e}");
}

struct Case {
    what: &'static str,
    src: String,
    line: usize,
    column: usize,
    field: &'static str,
    message: &'static str,
}

fn case(what: &'static str, src: String, line: usize, column: usize, field: &'static str, message: &'static str) -> Case {
    Case { what, src, line, column, field, message }
}

#[rustfmt::skip]
fn cases() -> Vec<Case> {
    vec![
        case("unknown cluster key", edit(38, "  tcp-sequence-random: true"), 38, 3, "cluster.tcp-sequence-random",
             "unknown field `tcp-sequence-random`, expected one of `name`, `key`, `node-id`, `priority`, `site-id`, `chassis-id`, `tcp-sequence-randomization`, `ccl`, `members`, `heartbeat-interval`, `hold-time`, `backups`, `split-brain`, `director-localization`, `site-redundancy`, `interface-debounce`, `sync-timeout`"),
        case("missing key", edit(33, ""), 30, 3, "cluster", "missing field `key`"),
        case("missing ccl", EXAMPLE.lines().enumerate().filter(|(i, _)| !(38..43).contains(i)).map(|(_, l)| format!("{l}\n")).collect(),
             30, 3, "cluster", "missing field `ccl`"),
        case("randomization not a bool", edit(38, "  tcp-sequence-randomization: maybe"), 38, 31, "cluster.tcp-sequence-randomization",
             "invalid type: string \"maybe\", expected a boolean"),
        case("empty cluster name", edit(30, "  name: \"\""), 30, 9, "cluster.name", "must not be empty"),
        case("cluster name with space", edit(30, "  name: \"my cluster\""), 30, 9, "cluster.name",
             "invalid name \"my cluster\": expected letters, digits, '_', '-' or '.'"),
        case("key too short", edit(33, "  key: fifteen-chars!!"), 33, 8, "cluster.key",
             "the cluster key is too short: 15 characters, at least 16 required"),
        case("node id 16", edit(34, "  node-id: 16"), 34, 12, "cluster.node-id", "value 16 out of range: expected 0-15"),
        case("priority 0", edit(35, "  priority: 0"), 35, 13, "cluster.priority", "value 0 out of range: expected 1-100"),
        case("priority 101", edit(35, "  priority: 101"), 35, 13, "cluster.priority", "value 101 out of range: expected 1-100"),
        case("site id 0", edit(36, "  site-id: 0"), 36, 12, "cluster.site-id", "value 0 out of range: expected 1-255"),
        case("chassis id 256", edit(37, "  chassis-id: 256"), 37, 15, "cluster.chassis-id", "value 256 out of range: expected 1-255"),
        case("empty ccl device", edit(42, "    device: \"\""), 42, 13, "cluster.ccl.device", "must not be empty"),
        case("ccl device of a data interface", edit(42, "    device: \"net_af_packet1,iface=x\""), 42, 13, "cluster.ccl.device",
             "device \"net_af_packet1\" is already used by interface \"outside\""),
        case("ccl address without length", edit(43, "    address: 198.19.0.11"), 43, 14, "cluster.ccl.address",
             "invalid IPv4 prefix \"198.19.0.11\": expected \"a.b.c.d/len\""),
        case("ccl address is the network", edit(43, "    address: 198.19.0.0/24"), 43, 14, "cluster.ccl.address",
             "invalid interface address \"198.19.0.0/24\": this is the subnet's network address"),
        case("ccl subnet overlaps inside", edit(43, "    address: 198.18.64.99/16"), 43, 14, "cluster.ccl.address",
             "subnet 198.18.0.0/16 overlaps 198.18.64.0/24 of interface \"inside\""),
        case("data interface named ccl", edit(14, "  - name: ccl"), 14, 11, "interfaces[0].name",
             "the name \"ccl\" is reserved: the node gives this name to the CCL port when a cluster is configured"),
        case("no members", edit(44, "  members: []").lines().take(44).collect::<Vec<_>>().join("\n"), 44, 12, "cluster.members",
             "at least one member is required"),
        case("member id 16", edit(48, "    - id: 16"), 48, 11, "cluster.members[1].id", "value 16 out of range: expected 0-15"),
        case("duplicate member id", edit(51, "    - id: 2"), 51, 11, "cluster.members[2].id", "duplicate member id \"2\" (first at line 48)"),
        case("duplicate member name", edit(52, "      name: n2"), 52, 13, "cluster.members[2].name", "duplicate member name \"n2\" (first at line 49)"),
        case("bad member name", edit(52, "      name: n/3"), 52, 13, "cluster.members[2].name",
             "invalid name \"n/3\": expected letters, digits, '_', '-' or '.'"),
        case("member address not an address", edit(53, "      ccl-address: 198.19.0.13/24"), 53, 20, "cluster.members[2].ccl-address",
             "invalid IPv4 address \"198.19.0.13/24\": expected a.b.c.d"),
        case("member address outside the ccl subnet", edit(53, "      ccl-address: 198.19.1.13"), 53, 20, "cluster.members[2].ccl-address",
             "198.19.1.13 is not in the CCL subnet 198.19.0.0/24 (cluster.ccl.address)"),
        case("member address is the ccl broadcast", edit(53, "      ccl-address: 198.19.0.255"), 53, 20, "cluster.members[2].ccl-address",
             "invalid interface address \"198.19.0.255\": this is the subnet's broadcast address"),
        case("duplicate member address", edit(53, "      ccl-address: 198.19.0.12"), 53, 20, "cluster.members[2].ccl-address",
             "duplicate member ccl-address \"198.19.0.12\" (first at line 50)"),
        case("this node's entry with another address", edit(47, "      ccl-address: 198.19.0.21"), 47, 20, "cluster.members[0].ccl-address",
             "this node's member entry: ccl-address is 198.19.0.21, expected 198.19.0.11 (cluster.ccl.address)"),
        case("this node's entry with another name", edit(46, "      name: n9"), 46, 13, "cluster.members[0].name",
             "this node's member entry: name is n9, expected n1 (node.name)"),
        case("heartbeat interval 49 ms", edit(59, "  heartbeat-interval: 49"), 59, 23, "cluster.heartbeat-interval",
             "value 49 out of range: expected 50-10000"),
        case("hold time 100 ms", edit(60, "  hold-time: 100"), 60, 14, "cluster.hold-time", "value 100 out of range: expected 150-60000"),
        case("hold time under three heartbeats", edit(60, "  hold-time: 2999"), 60, 14, "cluster.hold-time",
             "hold time 2999 ms is shorter than 3 heartbeat intervals (1000 ms each, cluster.heartbeat-interval)"),
        case("three backups", edit(61, "  backups: 3"), 61, 12, "cluster.backups", "value 3 out of range: expected 1-2"),
        case("split brain choice", edit(62, "  split-brain: vote"), 62, 16, "cluster.split-brain",
             "invalid value \"vote\": expected elect or quorum"),
        case("quorum with two members", edit(62, "  split-brain: quorum").replace("    - id: 3\n      name: n3\n      ccl-address: 198.19.0.13\n", ""),
             59, 16, "cluster.split-brain", "split-brain quorum needs at least 3 members (cluster.members has 2)"),
        case("director localization without a site id", edit(62, "  director-localization: true"), 62, 26, "cluster.director-localization",
             "cluster.director-localization needs cluster.site-id (this node's site)"),
        case("site redundancy without a site id", edit(62, "  site-redundancy: true"), 62, 20, "cluster.site-redundancy",
             "cluster.site-redundancy needs cluster.site-id (this node's site)"),
        case("debounce over a minute", edit(63, "  interface-debounce: 60001"), 63, 23, "cluster.interface-debounce",
             "value 60001 out of range: expected 0-60000"),
        case("sync timeout 99 ms", edit(64, "  sync-timeout: 99"), 64, 17, "cluster.sync-timeout", "value 99 out of range: expected 100-600000"),
        case("this node missing", edit(34, "  node-id: 4").replace("address: 198.19.0.11/24", "address: 198.19.0.14/24"), 45, 5, "cluster.members",
             "the member list must include this node (node-id 4); member ids are 1, 2, 3"),
    ]
}

#[test]
fn broken_cluster_sections_report_line_field_and_message() {
    let mut failures = Vec::new();
    let all = cases();
    for c in &all {
        match parse(&c.src, "n1.yaml") {
            Ok(_) => failures.push(format!("{}: parsed without error", c.what)),
            Err(e) => {
                let got = (e.line(), e.column(), e.field().to_string(), message(&e));
                let want = (c.line, c.column, c.field.to_string(), c.message.to_string());
                if got != want {
                    failures.push(format!("{}:\n   got {:?}\n  want {:?}", c.what, got, want));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), all.len(), failures.join("\n"));
    let mut srcs: Vec<&String> = all.iter().map(|c| &c.src).collect();
    srcs.sort();
    srcs.dedup();
    assert_eq!(srcs.len(), all.len(), "two cases test the same file");
}

#[test]
fn another_member_claiming_this_nodes_address() {
    // Member 2 (listed before this node) uses this node's CCL address.
    let src = EXAMPLE.replace(
        "    - id: 1\n      name: n1\n      ccl-address: 198.19.0.11\n    - id: 2\n      name: n2\n      ccl-address: 198.19.0.12\n",
        "    - id: 2\n      name: n2\n      ccl-address: 198.19.0.11\n    - id: 1\n      name: n1\n      ccl-address: 198.19.0.12\n",
    );
    let e = parse(&src, "n1.yaml").unwrap_err();
    assert_eq!((e.line(), e.column(), e.field()), (47, 20, "cluster.members[0].ccl-address"), "{e}");
    assert!(matches!(e.kind(), ErrorKind::CclAddressOfThisNode { node_id: 1, id: 2, .. }), "{e}");
    assert_eq!(message(&e), "198.19.0.11 is this node's CCL address (cluster.ccl.address, node-id 1), not member 2's");
}

fn message(e: &ConfigError) -> String {
    let text = e.to_string();
    let mut prefix = format!("{}:{}:{}: ", e.file(), e.line(), e.column());
    if !e.field().is_empty() {
        prefix.push_str(e.field());
        prefix.push_str(": ");
    }
    text.strip_prefix(&prefix).map(str::to_string).unwrap_or_else(|| format!("BAD PREFIX: {text}"))
}

#[test]
fn a_member_runs_up_to_32_workers() {
    let with = |n: u16| EXAMPLE.replace("\"0,1\"]\n", &format!("\"0,1\"]\n  workers: {n}\n"));
    assert_eq!(parse(&with(2), "x.yaml").unwrap().dpdk.workers, 2);
    assert_eq!(parse(&with(32), "x.yaml").unwrap().dpdk.workers, 32);
    let e = parse(&with(33), "x.yaml").unwrap_err();
    assert_eq!((e.line(), e.field()), (12, "dpdk.workers"), "{e}");
    assert!(matches!(e.kind(), ErrorKind::ClusterWorkers { workers: 33, max: 32 }), "{e}");
    assert_eq!(message(&e), "33 workers: a cluster member runs at most 32 (one CCL channel each; docs/workers.md)");
}
