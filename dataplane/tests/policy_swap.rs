//! `Pipeline::set_policy` (a reload, a replicated configuration, SPEC M6):
//! the new rules and security levels decide the next new connection,
//! connections already admitted go on, the new timeouts apply to every
//! flow at once, unchanged rules keep their hit counts, and a policy built
//! for other interfaces is handed back untouched.

mod common;

use common::*;
use dataplane::buf::VecBuf;
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::conntrack::Timeouts;
use dataplane::pipeline::{Pipeline, PipelineConfig, Policy, RuleSpec, Verdict};
use dataplane::{DropReason, Duration, PortId, Timestamp};
use std::net::Ipv4Addr;

const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 50);

fn cfg() -> PipelineConfig {
    let mut c = config();
    // Neighbours known up front: every verdict is about policy, none
    // waits for ARP.
    c.static_neighbors = vec![(HOST, HOST_MAC), (GW, GW_MAC), (DMZ_HOST, DMZ_HOST_MAC)];
    c
}

fn send(p: &mut Pipeline, t: Timestamp, port: PortId, frame: Vec<u8>) -> Verdict {
    p.process(t, port, &mut VecBuf::new(&frame))
}

fn syn_in(sport: u16, dport: u16) -> Vec<u8> {
    from_outside(CLIENT, HOST).tcp(sport, dport, 1000, 0, SYN, 1024, &[], b"")
}

fn hits(p: &Pipeline, name: &str) -> Option<u64> {
    p.rules().into_iter().find(|r| r.name == name).map(|r| r.hits)
}

/// The example's rules with `web-in` replaced by a deny of port 80 and
/// `no-telnet` kept as it was; inside and outside swap security levels;
/// UDP flows idle out after 2 s.
fn new_policy(c: &PipelineConfig) -> Policy {
    let mut ifaces = c.interfaces.clone();
    ifaces[0].security_level = 0; // inside
    ifaces[1].security_level = 100; // outside
    let mut rules: Vec<RuleSpec> = c.rules.iter().filter(|r| r.name != "web-in").cloned().collect();
    rules.insert(
        0,
        RuleSpec {
            name: "web-closed".into(),
            permit: false,
            interface: None,
            protocol: Some(6),
            src: None,
            dst: Some((HOST.into(), 32)),
            src_ports: (0, 65535),
            dst_ports: (80, 80),
        },
    );
    let timeouts = Timeouts { udp: Duration::from_secs(2), ..Timeouts::default() };
    Policy::build(&ifaces, &rules, timeouts).expect("valid policy")
}

#[test]
fn a_new_policy_decides_new_connections_and_leaves_admitted_ones() {
    let c = cfg();
    let mut p = Pipeline::new(c.clone()).unwrap();
    let t = Timestamp::from_secs(1);
    // Admitted under the old policy: web-in, a telnet denial, a UDP flow
    // inside -> outside (security level default).
    assert_eq!(send(&mut p, t, OUT_PORT, syn_in(40000, 80)), Verdict::Forward(IN_PORT));
    let syn_ack = from_host(CLIENT).tcp(80, 40000, 5000, 1001, SYN | ACK, 1024, &[], b"");
    assert_eq!(send(&mut p, t, IN_PORT, syn_ack), Verdict::Forward(OUT_PORT));
    assert_eq!(send(&mut p, t, OUT_PORT, syn_in(40001, 23)), Verdict::Drop(DropReason::AclDenied));
    let udp = |sport| from_host(SERVER).udp(sport, 53, b"q");
    assert_eq!(send(&mut p, t, IN_PORT, udp(5000)), Verdict::Forward(OUT_PORT));
    assert_eq!((hits(&p, "web-in"), hits(&p, "no-telnet")), (Some(1), Some(1)));
    assert_eq!(p.default_rule_hits(), (1, 0));
    assert_eq!(p.conntrack().timeouts().udp, Duration::from_secs(120));

    let old = p.set_policy(Box::new(new_policy(&c))).unwrap_or_else(|_| panic!("same interfaces"));
    drop(old);

    let t = Timestamp::from_secs(2);
    // The admitted connection goes on: its next packet is no new connection.
    let ack = from_outside(CLIENT, HOST).tcp(40000, 80, 1001, 5001, ACK, 1024, &[], b"");
    assert_eq!(send(&mut p, t, OUT_PORT, ack), Verdict::Forward(IN_PORT), "admitted before: stays");
    // A new one to port 80 meets the new rule.
    assert_eq!(send(&mut p, t, OUT_PORT, syn_in(40002, 80)), Verdict::Drop(DropReason::AclDenied));
    assert_eq!(hits(&p, "web-in"), None, "gone");
    assert_eq!(hits(&p, "web-closed"), Some(1));
    assert_eq!(hits(&p, "no-telnet"), Some(1), "an unchanged rule keeps its count");
    // The security levels swapped: inside -> outside is now the denied way
    // by default, outside -> inside the permitted one.
    assert_eq!(send(&mut p, t, IN_PORT, udp(5001)), Verdict::Drop(DropReason::AclDenied));
    assert_eq!(send(&mut p, t, OUT_PORT, syn_in(40003, 443)), Verdict::Forward(IN_PORT));
    assert_eq!(p.default_rule_hits(), (2, 1), "the defaults' counts carried on");
    // The UDP flow admitted before is still there and answered ...
    let reply = from_outside(SERVER, HOST).udp(53, 5000, b"a");
    assert_eq!(send(&mut p, t, OUT_PORT, reply), Verdict::Forward(IN_PORT));
    // ... and idles out after the new 2 s, not the old 120 s; the TCP
    // flows stay.
    assert_eq!(p.conntrack().timeouts().udp, Duration::from_secs(2));
    let udp_flows = |p: &Pipeline, t| p.conns(t, 10).iter().filter(|c| c.tuple.proto == 17).count();
    assert_eq!((p.flow_count(), udp_flows(&p, t)), (3, 1));
    let later = Timestamp::from_secs(5);
    p.poll_timers(later);
    assert_eq!((p.flow_count(), udp_flows(&p, later)), (2, 0), "the UDP flow expired");
}

#[test]
fn a_policy_for_other_interfaces_is_handed_back() {
    let c = cfg();
    let mut p = Pipeline::new(c.clone()).unwrap();
    let fewer = &c.interfaces[..2];
    let rules: Vec<RuleSpec> = c.rules.clone();
    let policy = Policy::build(fewer, &rules, Timeouts::default()).unwrap();
    assert!(p.set_policy(Box::new(policy)).is_err());
    let t = Timestamp::from_secs(1);
    assert_eq!(send(&mut p, t, OUT_PORT, syn_in(40000, 80)), Verdict::Forward(IN_PORT), "old policy in force");
    // Unknown interface names are refused when the policy is built.
    let mut bad = c.rules.clone();
    bad[0].interface = Some("dmz".into());
    assert!(Policy::build(fewer, &bad, Timeouts::default()).is_err());
}
