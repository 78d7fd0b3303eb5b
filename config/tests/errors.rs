//! One broken configuration per validation rule, each asserting the exact
//! position, field path and message of the error.
//!
//! Most cases edit one line of the shipped example, so the line numbers
//! below are the example's (`cat -n config/examples/node.yaml`).

use config::{parse, ConfigError};

const EXAMPLE: &str = include_str!("../examples/node.yaml");

/// The example with line `n` (1-based) replaced by `text` (which may hold
/// several lines or none).
fn edit(n: usize, text: &str) -> String {
    let mut lines: Vec<&str> = EXAMPLE.lines().collect();
    lines[n - 1] = text;
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// MINIMAL with one `neighbors` entry: address on line 9 (column 14), mac
/// on line 10 (column 10).
fn neighbor(address: &str, mac: &str) -> String {
    format!("{MINIMAL}neighbors:\n  - address: {address}\n    mac: {mac}\n")
}

const MINIMAL: &str = "\
node:
  name: n
interfaces:
  - name: lan
    device: net_tap0
    address: 10.0.0.1/24
    security-level: 50
";

/// A dual-stack file: `address6` on lines 7 and 12 (column 15), IPv6
/// routes with destinations on lines 15 and 17 (column 18) and `via` on
/// lines 16 and 18 (column 10).
const DUAL: &str = "\
node:
  name: n
interfaces:
  - name: lan
    device: net_tap0
    address: 10.0.0.1/24
    address6: 2001:db8:1::1/64
    security-level: 50
  - name: wan
    device: net_tap1
    address: 10.0.1.1/24
    address6: 2001:db8:2::1/64
    security-level: 0
routes:
  - destination: ::/0
    via: 2001:db8:2::fe
  - destination: 2001:db8:9::/48
    via: 2001:db8:1::fe
";

/// DUAL with line `n` (1-based) replaced by `text`.
fn dual(n: usize, text: &str) -> String {
    let mut lines: Vec<&str> = DUAL.lines().collect();
    lines[n - 1] = text;
    let mut s = lines.join("\n");
    s.push('\n');
    s
}

/// DUAL with `interfaces[0].address6` (line 7, column 15) set to `a`.
fn address6(a: &str) -> String {
    dual(7, &format!("    address6: {a}"))
}

struct Case {
    what: &'static str,
    src: String,
    line: usize,
    column: usize,
    field: &'static str,
    /// The message after `file:line:col: field: `.
    message: &'static str,
}

fn case(
    what: &'static str,
    src: String,
    line: usize,
    column: usize,
    field: &'static str,
    message: &'static str,
) -> Case {
    Case {
        what,
        src,
        line,
        column,
        field,
        message,
    }
}

fn cases() -> Vec<Case> {
    vec![
        // --- YAML shape ----------------------------------------------------
        case("syntax: unclosed flow sequence", edit(14, "  eal-args: [\"--no-huge\""), 15, 3, "",
             "YAML syntax error: did not find expected ',' or ']', while parsing a flow sequence at line 14 column 13"),
        case("syntax: tab indentation", edit(4, "\tname: node1"), 4, 1, "",
             "YAML syntax error: found character that cannot start any token, while scanning for the next token"),
        case("empty file", String::new(), 1, 1, "", "missing field `node`"),
        case("two documents", format!("{EXAMPLE}---\nnode: {{name: x}}\n"), 88, 1, "",
             "expected a single YAML document, found more than one"),
        case("unknown top-level key", edit(9, "control-sockets: /x"), 9, 1, "control-sockets",
             "unknown field `control-sockets`, expected one of `node`, `logging`, `control-socket`, `metrics`, `flow-export`, `dpdk`, `interfaces`, `routes`, `access-rules`, `timeouts`, `limits`, `flow-table`, `arp`, `neighbors`, `icmp-errors`, `cluster`, `nat`"),
        case("unknown interface key (typo)", edit(26, "    security-levle: 100"), 26, 5, "interfaces[0].security-levle",
             "unknown field `security-levle`, expected one of `name`, `device`, `address`, `address6`, `security-level`, `vlan`, `mtu`, `reverse-path`"),
        case("missing interface device", edit(24, "    # no device"), 22, 5, "interfaces[0]", "missing field `device`"),
        case("missing rule action", edit(52, "    # no action"), 51, 5, "access-rules[1]", "missing field `action`"),
        case("missing node name", edit(4, "  {}"), 4, 3, "node", "missing field `name`"),
        case("node without a value", edit(4, ""), 3, 6, "node",
             "missing field `name`"),
        case("interface as a scalar", edit(22, "  - 5").lines().take(22).collect::<Vec<_>>().join("\n"), 22, 5, "interfaces[0]",
             "invalid type: integer `5`, expected an interface mapping (name, device, address, address6, security-level, vlan, mtu, reverse-path)"),
        case("duplicate key", edit(19, "  burst: 64"), 19, 3, "dpdk.burst", "duplicate field `burst`"),
        case("string for a number", edit(18, "  burst: many"), 18, 10, "dpdk.burst",
             "invalid type: string \"many\", expected u64"),
        case("negative number", edit(15, "  mbufs: -1"), 15, 10, "dpdk.mbufs",
             "invalid type: integer `-1`, expected u64"),
        case("eal-args not a list", edit(14, "  eal-args: --no-huge"), 14, 13, "dpdk.eal-args",
             "invalid type: string \"--no-huge\", expected a sequence"),
        case("unknown log level", edit(7, "  level: verbose"), 7, 10, "logging.level",
             "unknown variant `verbose`, expected one of `error`, `warn`, `info`, `debug`, `trace`"),
        case("unknown action", edit(52, "    action: drop"), 52, 13, "access-rules[1].action",
             "unknown variant `drop`, expected `permit` or `deny`"),
        // --- node -------------------------------------------------------------
        case("empty node name", edit(4, "  name: \"\""), 4, 9, "node.name", "must not be empty"),
        case("node name with slash", edit(4, "  name: a/b"), 4, 9, "node.name",
             "invalid name \"a/b\": expected letters, digits, '_', '-' or '.'"),
        case("empty control socket", edit(9, "control-socket: \"\""), 9, 17, "control-socket", "must not be empty"),
        // --- metrics -----------------------------------------------------------
        case("metrics listen without a port", format!("{MINIMAL}metrics:\n  listen: 127.0.0.1\n"), 9, 11, "metrics.listen",
             "invalid address \"127.0.0.1\": expected a.b.c.d:port with a port from 1 to 65535"),
        case("metrics listen on port 0", format!("{MINIMAL}metrics:\n  listen: 0.0.0.0:0\n"), 9, 11, "metrics.listen",
             "invalid address \"0.0.0.0:0\": expected a.b.c.d:port with a port from 1 to 65535"),
        case("metrics: unknown key", format!("{MINIMAL}metrics:\n  port: 9105\n"), 9, 3, "metrics.port",
             "unknown field `port`, expected `listen`"),
        // --- exporters ---------------------------------------------------------
        case("syslog server without a port", format!("{MINIMAL}logging:\n  syslog:\n    - server: 192.0.2.1\n"), 10, 15,
             "logging.syslog[0].server", "invalid address \"192.0.2.1\": expected a.b.c.d:port with a port from 1 to 65535"),
        case("syslog transport unknown", format!("{MINIMAL}logging:\n  syslog:\n    - server: 192.0.2.1:514\n      transport: quic\n"),
             11, 18, "logging.syslog[0].transport", "unknown variant `quic`, expected `udp` or `tcp`"),
        case("syslog device-id unknown", format!("{MINIMAL}logging:\n  syslog:\n    - server: 192.0.2.1:514\n      device-id: host\n"),
             11, 18, "logging.syslog[0].device-id", "unknown variant `host`, expected `node` or `cluster`"),
        case("deny-rate too high", format!("{MINIMAL}logging:\n  deny-rate: 1000000\n"), 9, 14, "logging.deny-rate",
             "value 1000000 out of range: expected 0-100000"),
        case("flow-export template refresh 0", format!("{MINIMAL}flow-export:\n  collector: 192.0.2.1:4739\n  template-refresh: 0\n"),
             10, 21, "flow-export.template-refresh", "value 0 out of range: expected 1-3600"),
        case("flow-export collector not an address", format!("{MINIMAL}flow-export:\n  collector: collector:4739\n"), 9, 14,
             "flow-export.collector", "invalid address \"collector:4739\": expected a.b.c.d:port with a port from 1 to 65535"),
        // --- dpdk ------------------------------------------------------------
        case("burst too large", edit(18, "  burst: 300"), 18, 10, "dpdk.burst", "value 300 out of range: expected 1-256"),
        case("burst zero", edit(18, "  burst: 0"), 18, 10, "dpdk.burst", "value 0 out of range: expected 1-256"),
        case("mbufs zero", edit(15, "  mbufs: 0"), 15, 10, "dpdk.mbufs", "value 0 out of range: expected 1-4294967295"),
        case("mbufs beyond u32", edit(15, "  mbufs: 4294967296"), 15, 10, "dpdk.mbufs",
             "value 4294967296 out of range: expected 1-4294967295"),
        case("rx descriptors beyond u16", edit(16, "  rx-descriptors: 65536"), 16, 19, "dpdk.rx-descriptors",
             "value 65536 out of range: expected 1-65535"),
        case("tx descriptors zero", edit(17, "  tx-descriptors: 0"), 17, 19, "dpdk.tx-descriptors",
             "value 0 out of range: expected 1-65535"),
        // --- interfaces ------------------------------------------------------
        case("no interfaces", edit(21, "interfaces: []").lines().take(21).collect::<Vec<_>>().join("\n"), 21, 13, "interfaces",
             "at least one interface is required"),
        case("interfaces key missing", "node: {name: n}\n".into(), 1, 1, "interfaces", "at least one interface is required"),
        case("prefix length 33", edit(29, "    address: 198.18.1.1/33"), 29, 14, "interfaces[1].address",
             "invalid IPv4 prefix \"198.18.1.1/33\": prefix length must be 0-32"),
        case("address without length", edit(25, "    address: 198.18.1.1"), 25, 14, "interfaces[0].address",
             "invalid IPv4 prefix \"198.18.1.1\": expected \"a.b.c.d/len\""),
        case("address with leading zero", edit(25, "    address: 198.018.1.1/24"), 25, 14, "interfaces[0].address",
             "invalid IPv4 prefix \"198.018.1.1/24\": invalid IPv4 address \"198.018.1.1\""),
        case("network address as interface address", edit(25, "    address: 198.18.1.0/24"), 25, 14, "interfaces[0].address",
             "invalid interface address \"198.18.1.0/24\": this is the subnet's network address"),
        case("broadcast address as interface address", edit(25, "    address: 198.18.1.255/24"), 25, 14, "interfaces[0].address",
             "invalid interface address \"198.18.1.255/24\": this is the subnet's broadcast address"),
        case("multicast interface address", edit(25, "    address: 224.0.0.1/24"), 25, 14, "interfaces[0].address",
             "invalid interface address \"224.0.0.1/24\": not a unicast address"),
        case("overlapping subnets", edit(29, "    address: 198.18.1.2/16"), 29, 14, "interfaces[1].address",
             "subnet 198.18.0.0/16 overlaps 198.18.1.0/24 of interface \"inside\""),
        case("security level 101", edit(26, "    security-level: 101"), 26, 21, "interfaces[0].security-level",
             "value 101 out of range: expected 0-100"),
        case("vlan 4095", edit(31, "    vlan: 4095"), 31, 11, "interfaces[1].vlan", "value 4095 out of range: expected 1-4094"),
        case("vlan 0", edit(31, "    vlan: 0"), 31, 11, "interfaces[1].vlan", "value 0 out of range: expected 1-4094"),
        case("reverse-path not a mode", edit(31, "    reverse-path: sometimes"), 31, 19, "interfaces[1].reverse-path",
             "unknown variant `sometimes`, expected one of `strict`, `loose`, `off`"),
        case("duplicate interface name", edit(27, "  - name: inside"), 27, 11, "interfaces[1].name",
             "duplicate interface name \"inside\" (first at line 22)"),
        case("interface named any", edit(27, "  - name: any"), 27, 11, "interfaces[1].name",
             "invalid name \"any\": expected lowercase letters, digits, '_' or '-', and not \"any\""),
        case("interface name with capitals", edit(27, "  - name: Outside"), 27, 11, "interfaces[1].name",
             "invalid name \"Outside\": expected lowercase letters, digits, '_' or '-', and not \"any\""),
        case("empty interface name", edit(27, "  - name: ''"), 27, 11, "interfaces[1].name", "must not be empty"),
        case("empty device", edit(28, "    device: \"\""), 28, 13, "interfaces[1].device", "must not be empty"),
        case("same device twice", edit(28, "    device: \"net_af_packet0,iface=other\""), 28, 13, "interfaces[1].device",
             "device \"net_af_packet0\" is already used by interface \"inside\""),
        // --- routes ----------------------------------------------------------
        case("route via not connected", edit(37, "    via: 10.9.9.9"), 37, 10, "routes[1].via",
             "next hop 10.9.9.9 is not in a connected subnet (connected: 198.18.1.0/24, 198.18.2.0/24)"),
        case("route via own address", edit(37, "    via: 198.18.1.1"), 37, 10, "routes[1].via",
             "next hop 198.18.1.1 is the address of interface \"inside\""),
        case("route via not an address", edit(35, "    via: 198.18.2"), 35, 10, "routes[0].via",
             "invalid IPv4 address \"198.18.2\": expected a.b.c.d"),
        case("route destination host bits", edit(36, "  - destination: 203.0.113.1/24"), 36, 18, "routes[1].destination",
             "invalid IPv4 prefix \"203.0.113.1/24\": host bits are set (did you mean 203.0.113.0/24?)"),
        case("duplicate route", edit(36, "  - destination: 0.0.0.0/0"), 36, 18, "routes[1].destination",
             "duplicate route destination \"0.0.0.0/0\" (first at line 34)"),
        case("route missing via", edit(37, ""), 36, 5, "routes[1]", "missing field `via`"),
        // --- access rules ----------------------------------------------------
        case("rule on unknown interface", edit(45, "    interface: dmz"), 45, 16, "access-rules[0].interface",
             "unknown interface \"dmz\": expected \"any\" or one of inside, outside"),
        case("bad protocol name", edit(46, "    protocol: tcpx"), 46, 15, "access-rules[0].protocol",
             "invalid protocol \"tcpx\": expected tcp, udp, icmp, icmp6, any or a number 0-255"),
        case("protocol 256", edit(53, "    protocol: 256"), 53, 15, "access-rules[1].protocol",
             "invalid protocol \"256\": expected tcp, udp, icmp, icmp6, any or a number 0-255"),
        case("rule destination host bits", edit(48, "    destination: 198.18.1.10/24"), 48, 18, "access-rules[0].destination",
             "invalid IPv4 prefix \"198.18.1.10/24\": host bits are set (did you mean 198.18.1.0/24?)"),
        case("rule source bad prefix", edit(47, "    source: 0.0.0.0/"), 47, 13, "access-rules[0].source",
             "invalid IPv4 prefix \"0.0.0.0/\": prefix length \"\" is not a number"),
        case("reversed port range", edit(49, "    destination-port: \"90-80\""), 49, 23, "access-rules[0].destination-port",
             "invalid port range \"90-80\": low port 90 is above high port 80"),
        case("port 65536", edit(54, "    destination-port: 65536"), 54, 23, "access-rules[1].destination-port",
             "invalid port range \"65536\": expected a port 0-65535 or a range \"lo-hi\""),
        case("source port garbage", edit(50, "    source-port: http"), 50, 18, "access-rules[0].source-port",
             "invalid port range \"http\": expected a port 0-65535 or a range \"lo-hi\""),
        case("ports on icmp", edit(53, "    protocol: icmp"), 54, 23, "access-rules[1].destination-port",
             "a port range needs protocol tcp or udp, found protocol icmp"),
        case("ports with protocol any", edit(53, ""), 54, 23, "access-rules[1].destination-port",
             "a port range needs protocol tcp or udp, found protocol any"),
        case("source port on protocol 47", edit(46, "    protocol: 47\n    source-port: 1-2"), 47, 18, "access-rules[0].source-port",
             "a port range needs protocol tcp or udp, found protocol 47"),
        // --- access rules with IPv6 prefixes (issue 16) -----------------------
        case("rule of two families", edit(47, "    source: 2001:db8::/32"), 48, 18, "access-rules[0].destination",
             "source 2001:db8::/32 is IPv6 but destination 198.18.1.10/32 is IPv4: a rule's addresses must be of one family (leave one out to match any address)"),
        case("rule of two families, IPv4 everything", format!("{DUAL}access-rules:\n  - name: r\n    action: deny\n    source: ::/0\n    destination: 0.0.0.0/0\n"),
             23, 18, "access-rules[0].destination",
             "source ::/0 is IPv6 but destination 0.0.0.0/0 is IPv4: a rule's addresses must be of one family (leave one out to match any address)"),
        case("rule IPv6 destination host bits", edit(48, "    destination: 2001:db8:1::80/64"), 48, 18, "access-rules[0].destination",
             "invalid IPv6 prefix \"2001:db8:1::80/64\": host bits are set (did you mean 2001:db8:1::/64?)"),
        case("rule IPv6 source length 129", edit(47, "    source: 2001:db8::/129"), 47, 13, "access-rules[0].source",
             "invalid IPv6 prefix \"2001:db8::/129\": prefix length must be 0-128"),
        case("rule IPv6 host without length", edit(48, "    destination: 2001:db8:1::80"), 48, 18, "access-rules[0].destination",
             "invalid IPv6 prefix \"2001:db8:1::80\": expected \"address/len\", like 2001:db8::/32"),
        case("rule IPv6 source not an address", edit(47, "    source: 2001:db8:::/48"), 47, 13, "access-rules[0].source",
             "invalid IPv6 prefix \"2001:db8:::/48\": invalid IPv6 address \"2001:db8:::\""),
        case("rule IPv6 zone index", edit(47, "    source: fe80::1%eth0/128"), 47, 13, "access-rules[0].source",
             "invalid IPv6 prefix \"fe80::1%eth0/128\": invalid IPv6 address \"fe80::1%eth0\""),
        case("icmp on an IPv6 rule", edit(53, "    protocol: icmp\n    source: 2001:db8::/32"), 53, 15, "access-rules[1].protocol",
             "protocol icmp is IPv4's ICMP but the rule's addresses are IPv6: use icmp6 (58)"),
        case("icmp6 on an IPv4 rule", edit(46, "    protocol: icmp6"), 46, 15, "access-rules[0].protocol",
             "protocol icmp6 is IPv6's ICMP but the rule's addresses are IPv4: use icmp (1)"),
        // --- IPv6 minimum MTU (RFC 8200 §5) ------------------------------------
        case("address6 on a link below 1280", dual(8, "    security-level: 50\n    mtu: 1279"), 9, 10, "interfaces[0].mtu",
             "MTU 1279 is below 1280, the smallest link MTU IPv6 allows (RFC 8200 §5), and this interface has an address6"),
        case("address6 on a 576-byte link", dual(13, "    mtu: 576\n    security-level: 0"), 13, 10, "interfaces[1].mtu",
             "MTU 576 is below 1280, the smallest link MTU IPv6 allows (RFC 8200 §5), and this interface has an address6"),
        case("duplicate rule name", edit(51, "  - name: web-in"), 51, 11, "access-rules[1].name",
             "duplicate rule name \"web-in\" (first at line 43)"),
        case("empty rule name", edit(51, "  - name: \"\""), 51, 11, "access-rules[1].name", "must not be empty"),
        // --- timeouts, tables ------------------------------------------------
        case("timeout zero", edit(60, "  tcp-closed: 0"), 60, 15, "timeouts.tcp-closed", "value 0 out of range: expected 1-18446744073709551615"),
        case("unknown timeout", edit(63, "  gre: 60"), 63, 3, "timeouts.gre",
             "unknown field `gre`, expected one of `tcp-syn`, `tcp-established`, `tcp-closing`, `tcp-closed`, `udp`, `icmp`, `other`"),
        case("flow table too small", edit(66, "  capacity: 8"), 66, 13, "flow-table.capacity",
             "value 8 out of range: expected 16-16777216"),
        case("flow table too large", edit(66, "  capacity: 16777217"), 66, 13, "flow-table.capacity",
             "value 16777217 out of range: expected 16-16777216"),
        case("arp capacity zero", edit(69, "  capacity: 0"), 69, 13, "arp.capacity", "value 0 out of range: expected 1-4294967295"),
        case("arp timeout zero", edit(70, "  timeout: 0"), 70, 12, "arp.timeout", "value 0 out of range: expected 1-18446744073709551615"),
        case("arp retry zero", edit(71, "  retry: 0"), 71, 10, "arp.retry", "value 0 out of range: expected 1-18446744073709551615"),
        // --- encodings of the same file -----------------------------------
        case("CRLF line endings", edit(37, "    via: 10.9.9.9").replace('\n', "\r\n"), 37, 10, "routes[1].via",
             "next hop 10.9.9.9 is not in a connected subnet (connected: 198.18.1.0/24, 198.18.2.0/24)"),
        case("byte order mark", format!("\u{feff}{}", edit(66, "  capacity: 8")), 66, 13, "flow-table.capacity",
             "value 8 out of range: expected 16-16777216"),
        case("non-ASCII before the value", edit(28, "    device: \"ñ\" # é\n    vlan: 0").lines().collect::<Vec<_>>().join("\n"), 29, 11, "interfaces[1].vlan",
             "value 0 out of range: expected 1-4094"),
        // --- neighbors -------------------------------------------------------
        case("neighbor not connected", neighbor("10.9.9.9", "02:00:00:00:00:fe"), 9, 14, "neighbors[0].address",
             "next hop 10.9.9.9 is not in a connected subnet (connected: 10.0.0.0/24)"),
        case("neighbor is our address", neighbor("10.0.0.1", "02:00:00:00:00:fe"), 9, 14, "neighbors[0].address",
             "next hop 10.0.0.1 is the address of interface \"lan\""),
        case("neighbor not an address", neighbor("10.0.0", "02:00:00:00:00:fe"), 9, 14, "neighbors[0].address",
             "invalid IPv4 address \"10.0.0\": expected a.b.c.d"),
        case("neighbor MAC too short", neighbor("10.0.0.254", "02:00:00:00:00"), 10, 10, "neighbors[0].mac",
             "invalid MAC address \"02:00:00:00:00\": expected six hex bytes like 02:00:00:00:00:01"),
        case("neighbor MAC broadcast", neighbor("10.0.0.254", "ff:ff:ff:ff:ff:ff"), 10, 10, "neighbors[0].mac",
             "invalid MAC address \"ff:ff:ff:ff:ff:ff\": a multicast/broadcast address is not a host"),
        case("duplicate neighbor", format!("{}  - address: 10.0.0.254\n    mac: 02:00:00:00:00:01\n", neighbor("10.0.0.254", "02:00:00:00:00:fe")),
             11, 14, "neighbors[1].address", "duplicate neighbor address \"10.0.0.254\" (first at line 9)"),
        case("neighbor unknown key", format!("{MINIMAL}neighbors:\n  - address: 10.0.0.254\n    macc: 02:00:00:00:00:01\n"),
             10, 5, "neighbors[0].macc", "unknown field `macc`, expected `address` or `mac`"),
        // --- IPv6: interfaces[].address6 ------------------------------------
        case("address6 prefix length 129", address6("2001:db8:1::1/129"), 7, 15, "interfaces[0].address6",
             "invalid IPv6 prefix \"2001:db8:1::1/129\": prefix length must be 0-128"),
        case("address6 without length", address6("2001:db8:1::1"), 7, 15, "interfaces[0].address6",
             "invalid IPv6 prefix \"2001:db8:1::1\": expected \"address/len\", like 2001:db8::/32"),
        case("address6 is IPv4", address6("10.0.0.1/24"), 7, 15, "interfaces[0].address6",
             "invalid IPv6 prefix \"10.0.0.1/24\": invalid IPv6 address \"10.0.0.1\""),
        case("address6 with a zone index", address6("\"fe80::1%eth0/64\""), 7, 15, "interfaces[0].address6",
             "invalid IPv6 prefix \"fe80::1%eth0/64\": invalid IPv6 address \"fe80::1%eth0\""),
        case("address6 prefix length 0", address6("2001:db8:1::1/0"), 7, 15, "interfaces[0].address6",
             "invalid interface address \"2001:db8:1::1/0\": prefix length must be 1-128"),
        case("address6 unspecified", address6("::/128"), 7, 15, "interfaces[0].address6",
             "invalid interface address \"::/128\": not a unicast address"),
        case("address6 loopback", address6("::1/128"), 7, 15, "interfaces[0].address6",
             "invalid interface address \"::1/128\": the loopback address ::1 is not an interface address"),
        case("address6 multicast", address6("ff02::1/64"), 7, 15, "interfaces[0].address6",
             "invalid interface address \"ff02::1/64\": not a unicast address"),
        case("address6 link-local", address6("fe80::1/64"), 7, 15, "interfaces[0].address6",
             "invalid interface address \"fe80::1/64\": a link-local address (fe80::/10) is not configured: the interface's link-local address is derived from its port's MAC (EUI-64)"),
        case("address6 link-local, upper end of fe80::/10", address6("febf::1/64"), 7, 15, "interfaces[0].address6",
             "invalid interface address \"febf::1/64\": a link-local address (fe80::/10) is not configured: the interface's link-local address is derived from its port's MAC (EUI-64)"),
        case("address6 IPv4-mapped", address6("::ffff:10.0.0.1/120"), 7, 15, "interfaces[0].address6",
             "invalid interface address \"::ffff:10.0.0.1/120\": an IPv4-mapped address (::ffff:0:0/96) is not an IPv6 interface address"),
        case("address6 subnet-router anycast", address6("2001:db8:1::/64"), 7, 15, "interfaces[0].address6",
             "invalid interface address \"2001:db8:1::/64\": this is the subnet-router anycast address (host bits all zero)"),
        case("address6 subnet-router anycast of a /126", address6("2001:db8:1::4/126"), 7, 15, "interfaces[0].address6",
             "invalid interface address \"2001:db8:1::4/126\": this is the subnet-router anycast address (host bits all zero)"),
        case("address6 used twice", dual(12, "    address6: 2001:db8:1::1/64"), 12, 15, "interfaces[1].address6",
             "duplicate interface address6 \"2001:db8:1::1\" (first at line 7)"),
        case("address6 used twice, written differently", dual(12, "    address6: 2001:DB8:1:0::1/80"), 12, 15, "interfaces[1].address6",
             "duplicate interface address6 \"2001:db8:1::1\" (first at line 7)"),
        case("overlapping IPv6 subnets", dual(12, "    address6: 2001:db8:1::2/48"), 12, 15, "interfaces[1].address6",
             "subnet 2001:db8:1::/48 overlaps 2001:db8:1::/64 of interface \"lan\""),
        case("address6 not a string", address6("[1, 2]"), 7, 15, "interfaces[0].address6",
             "invalid type: sequence, expected a string"),
        // --- IPv6: routes ------------------------------------------------------
        case("IPv6 route destination host bits", dual(17, "  - destination: 2001:db8:9::1/48"), 17, 18, "routes[1].destination",
             "invalid IPv6 prefix \"2001:db8:9::1/48\": host bits are set (did you mean 2001:db8:9::/48?)"),
        case("IPv6 route destination length 129", dual(17, "  - destination: 2001:db8:9::/129"), 17, 18, "routes[1].destination",
             "invalid IPv6 prefix \"2001:db8:9::/129\": prefix length must be 0-128"),
        case("IPv6 route destination not an address", dual(17, "  - destination: 2001:db8:9:::/48"), 17, 18, "routes[1].destination",
             "invalid IPv6 prefix \"2001:db8:9:::/48\": invalid IPv6 address \"2001:db8:9:::\""),
        case("duplicate IPv6 route", dual(17, "  - destination: 0:0::0/0"), 17, 18, "routes[1].destination",
             "duplicate route destination \"::/0\" (first at line 15)"),
        case("IPv6 route via an IPv4 address", dual(16, "    via: 10.0.1.254"), 16, 10, "routes[0].via",
             "next hop 10.0.1.254 is IPv4 but destination ::/0 is IPv6: a route's next hop must be of its destination's family"),
        case("IPv4 route via an IPv6 address", format!("{DUAL}  - destination: 0.0.0.0/0\n    via: 2001:db8:2::fe\n"), 20, 10, "routes[2].via",
             "next hop 2001:db8:2::fe is IPv6 but destination 0.0.0.0/0 is IPv4: a route's next hop must be of its destination's family"),
        case("IPv6 route via not an address", dual(16, "    via: 2001:db8:2::zz"), 16, 10, "routes[0].via",
             "invalid IPv6 address \"2001:db8:2::zz\": expected an address like 2001:db8::1"),
        case("IPv6 route via not connected", dual(16, "    via: 2001:db8:3::fe"), 16, 10, "routes[0].via",
             "next hop 2001:db8:3::fe is not in a connected IPv6 subnet (connected: 2001:db8:1::/64, 2001:db8:2::/64)"),
        case("IPv6 route via a link-local address", dual(18, "    via: fe80::1"), 18, 10, "routes[1].via",
             "next hop fe80::1 is not in a connected IPv6 subnet (connected: 2001:db8:1::/64, 2001:db8:2::/64)"),
        case("IPv6 route via own address", dual(16, "    via: 2001:db8:2::1"), 16, 10, "routes[0].via",
             "next hop 2001:db8:2::1 is the address of interface \"wan\""),
        case("IPv6 route without any address6", format!("{MINIMAL}routes:\n  - destination: ::/0\n    via: 2001:db8::1\n"), 10, 10, "routes[0].via",
             "next hop 2001:db8::1 is not in a connected IPv6 subnet (connected: none, no interface has an address6)"),
        case("flow-style IPv6 route", format!("{MINIMAL}routes: [{{destination: \"2001:db8::/32\", via: \"10.0.0.254\"}}]\n"), 8, 46, "routes[0].via",
             "next hop 10.0.0.254 is IPv4 but destination 2001:db8::/32 is IPv6: a route's next hop must be of its destination's family"),
        // --- the minimal file's own positions -------------------------------
        case("flow-style interface", format!("{MINIMAL}  - {{name: wan, device: net_tap1, address: 10.0.0.9/24, security-level: 0}}\n"),
             8, 44, "interfaces[1].address", "subnet 10.0.0.0/24 overlaps 10.0.0.0/24 of interface \"lan\""),
    ]
}

#[test]
fn broken_configs_report_line_field_and_message() {
    let mut failures = Vec::new();
    for c in cases() {
        match parse(&c.src, "node.yaml") {
            Ok(_) => failures.push(format!("{}: parsed without error", c.what)),
            Err(e) => {
                let got = (e.line(), e.column(), e.field().to_string(), message(&e));
                let want = (c.line, c.column, c.field.to_string(), c.message.to_string());
                if got != want {
                    failures.push(format!("{}:\n   got {:?}\n  want {:?}", c.what, got, want));
                }
                assert_eq!(e.file(), "node.yaml");
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases().len(),
        failures.join("\n")
    );
}

/// The Display text after the `file:line:col: field: ` prefix, checking
/// that prefix on the way.
fn message(e: &ConfigError) -> String {
    let text = e.to_string();
    let mut prefix = format!("{}:{}:{}: ", e.file(), e.line(), e.column());
    if !e.field().is_empty() {
        prefix.push_str(e.field());
        prefix.push_str(": ");
    }
    text.strip_prefix(&prefix)
        .map(str::to_string)
        .unwrap_or_else(|| format!("BAD PREFIX: {text}"))
}

#[test]
fn display_matches_the_documented_form() {
    let e = parse(&edit(29, "    address: 198.18.1.1/33"), "node.yaml").unwrap_err();
    assert_eq!(
        e.to_string(),
        "node.yaml:29:14: interfaces[1].address: invalid IPv4 prefix \"198.18.1.1/33\": prefix length must be 0-32"
    );
}

#[test]
fn every_edit_of_the_example_is_a_distinct_case() {
    // Guards the table against two cases silently testing the same thing.
    let mut srcs: Vec<String> = cases().into_iter().map(|c| c.src).collect();
    let n = srcs.len();
    srcs.sort();
    srcs.dedup();
    assert_eq!(srcs.len(), n);
}

#[test]
fn kinds_are_structured_for_programs() {
    use config::ErrorKind;
    let e = parse(&edit(18, "  burst: 300"), "node.yaml").unwrap_err();
    assert!(
        matches!(
            e.kind(),
            ErrorKind::OutOfRange {
                found: 300,
                min: 1,
                max: 256
            }
        ),
        "{e:?}"
    );
    let e = parse(&edit(27, "  - name: inside"), "node.yaml").unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Duplicate { first_line: 22, .. }),
        "{e:?}"
    );
    let e = parse(&edit(37, "    via: 10.9.9.9"), "node.yaml").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::NotConnected { .. }), "{e:?}");
    let e = parse(&dual(16, "    via: 2001:db8:3::fe"), "node.yaml").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::NotConnected6 { .. }), "{e:?}");
    let e = parse(&dual(12, "    address6: 2001:db8:1::2/48"), "node.yaml").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::OverlappingSubnets6 { .. }), "{e:?}");
    let e = parse(&dual(16, "    via: 10.0.1.254"), "node.yaml").unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::RouteFamilyMismatch { via_family: "IPv4", destination_family: "IPv6", .. }),
        "{e:?}"
    );
    let e = parse(&edit(4, "\tname: x"), "node.yaml").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Syntax(_)), "{e:?}");
    let e = parse(&edit(9, "control-sockets: /x"), "node.yaml").unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::Schema(_)), "{e:?}");
    // The kind is the error's source, for error-chain printers.
    let src = std::error::Error::source(&e).map(|s| s.to_string());
    assert_eq!(src, Some(e.kind().to_string()));
}
