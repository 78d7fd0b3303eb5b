//! Interface MTUs, the CCL MTU derived from them, and the `icmp-errors`
//! section (issue 11): defaults, ranges, and errors naming file, line and
//! field.

use config::cluster::CCL_OVERHEAD;
use config::parse;

const NODE: &str = include_str!("../examples/node.yaml");
const CLUSTER: &str = include_str!("../examples/cluster-node.yaml");

fn err(src: &str) -> String {
    parse(src, "n.yaml").map(|_| ()).expect_err("must not parse").to_string()
}

#[test]
fn defaults_and_jumbo() {
    let c = parse(NODE, "n.yaml").unwrap();
    assert!(c.interfaces.iter().all(|i| i.mtu == 1500));
    assert_eq!((c.icmp_errors.rate, c.icmp_errors.burst, c.icmp_errors.unreachable_on_deny), (100, 50, false));
    let cl = parse(CLUSTER, "n.yaml").unwrap();
    assert_eq!(cl.cluster.unwrap().ccl.mtu, 1500 + CCL_OVERHEAD, "derived from the data MTU");
    let jumbo = CLUSTER.replace("    security-level: 0\n", "    security-level: 0\n    mtu: 9000\n");
    let j = parse(&jumbo, "n.yaml").unwrap();
    assert_eq!((j.max_mtu(), j.cluster.unwrap().ccl.mtu), (9000, 9096));
}

#[test]
fn out_of_range_and_too_small_name_the_field() {
    let e = err(&NODE.replacen("    security-level: 0\n", "    security-level: 0\n    mtu: 9001\n", 1));
    assert!(e.starts_with("n.yaml:31:10: interfaces[1].mtu: value 9001 out of range: expected 576-9000"), "{e}");
    let e = err(&NODE.replacen("    security-level: 0\n", "    security-level: 0\n    mtu: 500\n", 1));
    assert!(e.contains("interfaces[1].mtu: value 500 out of range"), "{e}");
    let small = CLUSTER.replace("    address: 198.19.0.11/24\n", "    address: 198.19.0.11/24\n    mtu: 1500\n");
    let e = err(&small);
    assert!(e.contains("cluster.ccl.mtu: CCL MTU 1500 cannot carry the data interfaces' frames: their largest MTU is 1500"), "{e}");
    assert!(e.contains("at least 1596 required"), "{e}");
    let e = err(&NODE.replace("  rate: 100 ", "  rate: 2000000 "));
    assert!(e.contains("icmp-errors.rate: value 2000000 out of range: expected 0-1000000"), "{e}");
    let e = err(&NODE.replace("  burst: 50", "  burst: 0"));
    assert!(e.contains("icmp-errors.burst: value 0 out of range"), "{e}");
    let e = err(&NODE.replace("  unreachable-on-deny: false", "  unreachable-on-deny: maybe"));
    assert!(e.contains("icmp-errors.unreachable-on-deny"), "{e}");
}

/// IPv6 needs 1280-byte links (RFC 8200 §5): an interface with `address6`
/// takes an MTU of 1280 or more; one without keeps IPv4's 576 floor.
#[test]
fn ipv6_interfaces_need_1280() {
    let dual = NODE.replacen("    address: 198.18.2.1/24\n", "    address: 198.18.2.1/24\n    address6: 2001:db8:2::1/64\n", 1);
    let with = |mtu: u16| dual.replacen("    security-level: 0\n", &format!("    security-level: 0\n    mtu: {mtu}\n"), 1);
    let c = parse(&with(1280), "n.yaml").unwrap();
    assert_eq!((c.interfaces[1].mtu, c.interfaces[1].address6.is_some()), (1280, true));
    let e = err(&with(1279));
    assert!(e.starts_with("n.yaml:32:10: interfaces[1].mtu: MTU 1279 is below 1280"), "{e}");
    // The IPv4-only interface next to it may stay small.
    let small4 = with(1280).replacen("    security-level: 100\n", "    security-level: 100\n    mtu: 576\n", 1);
    let c = parse(&small4, "n.yaml").unwrap();
    assert_eq!((c.interfaces[0].mtu, c.interfaces[0].address6), (576, None));
}
