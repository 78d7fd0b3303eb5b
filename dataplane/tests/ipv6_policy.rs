//! Access rules with IPv6 prefixes through the whole pipeline (issue 16,
//! item 4; docs/ipv6.md, docs/config.md "access-rules"): a rule permitting
//! an IPv6 prefix lets a connection in against the security levels and the
//! connection then carries traffic both ways; a rule denying an IPv6
//! prefix drops a connection the levels would permit (`acl-denied`);
//! IPv4 rules — even `0.0.0.0/0` — never decide an IPv6 connection and
//! IPv6 rules never an IPv4 one; a rule without addresses decides both.
//! Frames are built byte by byte (`v6util`).

mod common;
mod v6util;

use common::*;
use v6util::{a, frame, ns, tcp};
use dataplane::buf::VecBuf;
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::pipeline::{Ipv6Spec, Pipeline, PipelineConfig, Policy, Route6Spec, RuleSpec, Verdict};
use dataplane::{DropReason, PortId, Timestamp};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};


const IN6: &str = "2001:db8:1::1";
const OUT6: &str = "2001:db8:2::1";
/// Inside hosts: the web server (published by `web6-in`) and a host the
/// rules do not name.
const WEB6: &str = "2001:db8:1::80";
const HOST6: &str = "2001:db8:1::10";
const WEB6_MAC: [u8; 6] = [2, 0, 0, 0, 1, 0x80];
/// The outside gateway and hosts beyond it: a client in the permitted
/// network, one in the denied one.
const GW6: &str = "2001:db8:2::fe";
const CLIENT6: &str = "2001:db8:77::5";
const BAD6: &str = "2001:db8:66::5";

fn spec() -> Ipv6Spec {
    Ipv6Spec {
        addresses: vec![("inside".into(), a(IN6), 64), ("outside".into(), a(OUT6), 64)],
        routes: vec![Route6Spec { destination: Ipv6Addr::UNSPECIFIED, prefix_len: 0, via: a(GW6) }],
    }
}

fn rule(name: &str, permit: bool, iface: Option<&str>, src: Option<(&str, u8)>, dst: Option<(&str, u8)>, port: u16) -> RuleSpec {
    let p = |x: Option<(&str, u8)>| x.map(|(s, l)| (s.parse::<IpAddr>().unwrap(), l));
    RuleSpec {
        name: name.into(),
        permit,
        interface: iface.map(str::to_string),
        protocol: Some(6),
        src: p(src),
        dst: p(dst),
        src_ports: (0, 65535),
        dst_ports: if port == 0 { (0, 65535) } else { (port, port) },
    }
}

/// The example's interfaces and IPv4 rules (`web-in`, `no-telnet`) after
/// the IPv6 rules: the permitted client network may reach the inside web
/// server on port 443 (in against the levels: outside 0 → inside 100), the
/// denied network's connections go nowhere, and an inside host's SSH out
/// (permitted by the levels) is denied to one IPv6 /48; an IPv4 rule for
/// the whole IPv4 space on port 8080 permits IPv4 only.
fn policy_config() -> PipelineConfig {
    let mut c = config();
    let ipv4 = std::mem::take(&mut c.rules);
    c.rules = vec![
        rule("bad6-out", false, Some("outside"), Some((BAD6, 48)), None, 0),
        rule("web6-in", true, Some("outside"), Some(("2001:db8:77::", 48)), Some((WEB6, 128)), 443),
        rule("ssh6-denied", false, Some("inside"), None, Some(("2001:db8:99::", 48)), 22),
        rule("all4-8080", true, Some("outside"), Some(("0.0.0.0", 0)), None, 8080),
    ];
    c.rules.extend(ipv4);
    c
}

fn pipeline6() -> Pipeline {
    let mut p = Pipeline::new(policy_config()).unwrap();
    p.set_ipv6(&spec()).unwrap();
    // Every neighbour known up front: the gateway, the inside hosts.
    for (port, ip, mac) in [(OUT_PORT, GW6, GW_MAC), (IN_PORT, WEB6, WEB6_MAC), (IN_PORT, HOST6, HOST_MAC)] {
        let own = if port == OUT_PORT { OUT6 } else { IN6 };
        assert_eq!(run(&mut p, port, &ns(a(ip), mac, a(own))).0, Verdict::Forward(port), "{ip} solicits us");
    }
    p
}

/// A TCP segment from outside (through the gateway) to an inside host.
fn seg_in(src: &str, dst: &str, sport: u16, dport: u16, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    frame(GW_MAC, OUT_MAC, a(src), a(dst), 64, 6, &tcp(a(src), a(dst), sport, dport, seq, ack, flags))
}

/// A TCP segment from an inside host (`mac`) to anywhere.
#[allow(clippy::too_many_arguments)]
fn seg_out(mac: [u8; 6], src: &str, dst: &str, sport: u16, dport: u16, seq: u32, ack: u32, flags: u8) -> Vec<u8> {
    frame(mac, IN_MAC, a(src), a(dst), 64, 6, &tcp(a(src), a(dst), sport, dport, seq, ack, flags))
}

fn run(p: &mut Pipeline, port: PortId, f: &[u8]) -> (Verdict, Vec<u8>) {
    let mut b = VecBuf::with_room(f, 64, 64);
    let v = p.process(Timestamp::from_secs(10), port, &mut b);
    (v, b.to_vec())
}

/// The inside host and the gateway ask for our IPv4 addresses: both
/// resolved.
fn arp_learn(p: &mut Pipeline) {
    assert_eq!(run(p, IN_PORT, &arp_request(HOST_MAC, None, HOST_MAC, HOST, IN_ADDR)).0, Verdict::Forward(IN_PORT));
    assert_eq!(run(p, OUT_PORT, &arp_request(GW_MAC, None, GW_MAC, GW, OUT_ADDR)).0, Verdict::Forward(OUT_PORT));
}

fn hits(p: &Pipeline, name: &str) -> u64 {
    p.rules().into_iter().find(|r| r.name == name).map(|r| r.hits).unwrap()
}

/// The permitted prefix: the SYN in is forwarded to the web server (its
/// MAC, hop limit one less), the SYN-ACK and the ACK find the connection.
/// A client outside the /48, or another port, or another inside host,
/// is refused by the security levels' default.
#[test]
fn a_permitted_ipv6_prefix_lets_a_connection_in() {
    let mut p = pipeline6();
    let (v, out) = run(&mut p, OUT_PORT, &seg_in(CLIENT6, WEB6, 50000, 443, 100, 0, SYN));
    assert_eq!(v, Verdict::Forward(IN_PORT));
    assert_eq!((&out[0..6], &out[6..12], out[21]), (&WEB6_MAC[..], &IN_MAC[..], 63));
    assert_eq!(&out[54..], &tcp(a(CLIENT6), a(WEB6), 50000, 443, 100, 0, SYN)[..], "the segment unchanged");
    let synack = seg_out(WEB6_MAC, WEB6, CLIENT6, 443, 50000, 7000, 101, SYN | ACK);
    assert_eq!(run(&mut p, IN_PORT, &synack).0, Verdict::Forward(OUT_PORT));
    assert_eq!(run(&mut p, OUT_PORT, &seg_in(CLIENT6, WEB6, 50000, 443, 101, 7001, ACK)).0, Verdict::Forward(IN_PORT));
    assert_eq!(p.flow_count(), 1);
    assert_eq!(hits(&p, "web6-in"), 1);
    // Outside the rule: another /48, another port, another inside host.
    for (src, dst, port) in [("2001:db8:78::5", WEB6, 443), (CLIENT6, WEB6, 444), (CLIENT6, HOST6, 443)] {
        assert_eq!(
            run(&mut p, OUT_PORT, &seg_in(src, dst, 50001, port, 1, 0, SYN)).0,
            Verdict::Drop(DropReason::AclDenied),
            "{src} -> {dst}:{port}"
        );
    }
    assert_eq!(hits(&p, "web6-in"), 1);
    assert_eq!(p.flow_count(), 1);
}

/// The denied prefix: its SYN is dropped `acl-denied` by its rule (not the
/// default), even to the published server; an inside host's SSH to the
/// denied /48 is dropped though the levels permit it, and SSH elsewhere
/// leaves.
#[test]
fn a_denied_ipv6_prefix_is_dropped() {
    let mut p = pipeline6();
    let denied_before = p.counters().drop_count(DropReason::AclDenied);
    assert_eq!(run(&mut p, OUT_PORT, &seg_in(BAD6, WEB6, 40000, 443, 1, 0, SYN)).0, Verdict::Drop(DropReason::AclDenied));
    assert_eq!(hits(&p, "bad6-out"), 1);
    let ssh = |dst: &str| seg_out(HOST_MAC, HOST6, dst, 40001, 22, 1, 0, SYN);
    assert_eq!(run(&mut p, IN_PORT, &ssh("2001:db8:99:1::22")).0, Verdict::Drop(DropReason::AclDenied));
    assert_eq!(hits(&p, "ssh6-denied"), 1);
    assert_eq!(run(&mut p, IN_PORT, &ssh("2001:db8:98::22")).0, Verdict::Forward(OUT_PORT), "the default permits");
    assert_eq!(hits(&p, "ssh6-denied"), 1);
    assert_eq!(p.counters().drop_count(DropReason::AclDenied) - denied_before, 2);
    assert_eq!(p.flow_count(), 1);
}

/// IPv4 traffic through the same table: the IPv6 rules never decide it,
/// the IPv4 rules still do (`web-in`, `all4-8080`, `no-telnet`); and
/// `all4-8080` (`0.0.0.0/0`) never admits an IPv6 connection to 8080,
/// while `no-telnet` (no addresses) denies IPv6 telnet as IPv4's.
#[test]
fn ipv4_rules_are_unaffected_and_do_not_match_ipv6() {
    let mut p = pipeline6();
    arp_learn(&mut p);
    let web = from_outside(Ipv4Addr::new(192, 0, 2, 9), HOST).tcp(40000, 80, 1, 0, SYN, 64240, &[], b"");
    assert_eq!(run(&mut p, OUT_PORT, &web).0, Verdict::Forward(IN_PORT), "web-in");
    let alt = from_outside(Ipv4Addr::new(192, 0, 2, 9), HOST).tcp(40001, 8080, 1, 0, SYN, 64240, &[], b"");
    assert_eq!(run(&mut p, OUT_PORT, &alt).0, Verdict::Forward(IN_PORT), "all4-8080");
    let ssh = from_outside(Ipv4Addr::new(192, 0, 2, 9), HOST).tcp(40002, 22, 1, 0, SYN, 64240, &[], b"");
    assert_eq!(run(&mut p, OUT_PORT, &ssh).0, Verdict::Drop(DropReason::AclDenied), "the default");
    // The IPv6 rules' first words as IPv4 addresses (2001:db8:66:: is
    // 32.1.13.184): nothing of IPv6 applies.
    let lookalike = from_outside(Ipv4Addr::new(32, 1, 13, 184), HOST).tcp(40003, 443, 1, 0, SYN, 64240, &[], b"");
    assert_eq!(run(&mut p, OUT_PORT, &lookalike).0, Verdict::Drop(DropReason::AclDenied), "the default, not bad6-out");
    let telnet4 = from_host(SERVER).tcp(40004, 23, 1, 0, SYN, 64240, &[], b"");
    assert_eq!(run(&mut p, IN_PORT, &telnet4).0, Verdict::Drop(DropReason::AclDenied), "no-telnet");
    assert_eq!((hits(&p, "web-in"), hits(&p, "all4-8080"), hits(&p, "no-telnet")), (1, 1, 1));
    assert_eq!((hits(&p, "bad6-out"), hits(&p, "web6-in"), hits(&p, "ssh6-denied")), (0, 0, 0));
    // IPv6 to 8080 from anywhere: not all4-8080's (IPv4 only).
    assert_eq!(run(&mut p, OUT_PORT, &seg_in(CLIENT6, WEB6, 40005, 8080, 1, 0, SYN)).0, Verdict::Drop(DropReason::AclDenied));
    assert_eq!(hits(&p, "all4-8080"), 1);
    let telnet6 = seg_out(HOST_MAC, HOST6, "2001:db8:55::23", 40006, 23, 1, 0, SYN);
    assert_eq!(run(&mut p, IN_PORT, &telnet6).0, Verdict::Drop(DropReason::AclDenied));
    assert_eq!(hits(&p, "no-telnet"), 2, "no addresses: both families");
    assert_eq!(p.flow_count(), 2);
}

/// A policy swap (`Pipeline::set_policy`, as a reload) that turns the
/// IPv6 permit into a deny: the established connection carries on (rules
/// decide new connections only), a new one from the same prefix is
/// refused; the rule keeps its place and its name, not its hits (it
/// changed).
#[test]
fn a_reloaded_ipv6_rule_decides_new_connections_only() {
    let mut p = pipeline6();
    assert_eq!(run(&mut p, OUT_PORT, &seg_in(CLIENT6, WEB6, 50000, 443, 100, 0, SYN)).0, Verdict::Forward(IN_PORT));
    let synack = seg_out(WEB6_MAC, WEB6, CLIENT6, 443, 50000, 7000, 101, SYN | ACK);
    assert_eq!(run(&mut p, IN_PORT, &synack).0, Verdict::Forward(OUT_PORT));
    let mut c = policy_config();
    c.rules[1].permit = false;
    let policy = Policy::build(&c.interfaces, &c.rules, c.timeouts).unwrap();
    assert!(p.set_policy(Box::new(policy)).is_ok());
    assert_eq!(run(&mut p, OUT_PORT, &seg_in(CLIENT6, WEB6, 50000, 443, 101, 7001, ACK)).0, Verdict::Forward(IN_PORT));
    assert_eq!(run(&mut p, OUT_PORT, &seg_in(CLIENT6, WEB6, 50002, 443, 1, 0, SYN)).0, Verdict::Drop(DropReason::AclDenied));
    assert_eq!(hits(&p, "web6-in"), 1);
}

/// `Policy::build` refuses what the configuration refuses: a rule whose
/// source and destination are of two families, an IPv6 prefix longer
/// than 128, an IPv4 one longer than 32.
#[test]
fn rules_the_pipeline_refuses() {
    let c = policy_config();
    for bad in [
        rule("mixed", true, None, Some(("192.0.2.0", 24)), Some(("2001:db8::", 32)), 0),
        rule("long6", true, None, Some(("2001:db8::", 129)), None, 0),
        rule("long4", true, None, None, Some(("192.0.2.0", 33)), 0),
    ] {
        let name = bad.name.clone();
        assert!(Policy::build(&c.interfaces, &[bad], c.timeouts).is_err(), "{name}");
    }
}
