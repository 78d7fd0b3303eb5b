//! The replicated policy (SPEC M6, `config::policy`): the document a control
//! node replicates reads back to the same policy, byte for byte the same
//! for the same policy; a policy checked against a node with other
//! interfaces, or broken, is an error naming the document, line and field;
//! `local_changes` tells a reloadable file from one that needs a restart.

use config::policy::{Policy, POLICY_HEADER};
use config::{parse, parse_policy, AccessRule, Action, IpNet, Ipv4Net, Ipv6Net, Limits, PortRange, Protocol, Timeouts};
use proptest::prelude::*;

const EXAMPLES: [(&str, &str); 2] = [
    ("node.yaml", include_str!("../examples/node.yaml")),
    ("cluster-node.yaml", include_str!("../examples/cluster-node.yaml")),
];

#[test]
fn the_examples_policies_read_back_equal() {
    for (name, text) in EXAMPLES {
        let c = parse(text, name).unwrap();
        let p = c.policy();
        assert_eq!(p.security_levels.len(), c.interfaces.len());
        assert!(!p.access_rules.is_empty(), "{name} has rules to carry");
        let y = p.to_yaml();
        assert!(y.starts_with(POLICY_HEADER), "{y}");
        let back = parse_policy(&y, "replicated", &c.interfaces).unwrap_or_else(|e| panic!("{name}: {e}\n{y}"));
        assert_eq!(back, p, "{name}:\n{y}");
        assert_eq!(back.to_yaml(), y, "deterministic");
        assert_eq!(c.with_policy(&back), c, "a node running its own policy runs its file");
    }
}

#[test]
fn a_policy_for_other_interfaces_is_refused_naming_the_field() {
    let c = parse(EXAMPLES[0].1, "node.yaml").unwrap();
    let y = c.policy().to_yaml();
    // A node without the `outside` interface: the policy names it.
    let fewer: Vec<_> = c.interfaces.iter().filter(|i| i.name != "outside").cloned().collect();
    let e = parse_policy(&y, "replicated configuration v3 from n1", &fewer).unwrap_err();
    assert!(e.to_string().starts_with("replicated configuration v3 from n1:"), "{e}");
    assert!(e.field().starts_with("interfaces[") && e.field().ends_with("].name"), "{e}");
    assert!(e.to_string().contains("unknown interface \"outside\""), "{e}");
    // A node with one more interface than the policy names.
    let mut more = c.interfaces.clone();
    let mut dmz = more[0].clone();
    dmz.name = "dmz".into();
    more.push(dmz);
    let e = parse_policy(&y, "replicated", &more).unwrap_err();
    assert_eq!(e.field(), "interfaces", "{e}");
    assert!(e.to_string().contains("no security level for this node's interface \"dmz\""), "{e}");
}

#[test]
fn broken_policy_documents_report_line_and_field() {
    let c = parse(EXAMPLES[0].1, "node.yaml").unwrap();
    let ifs = &c.interfaces;
    let levels = "interfaces:\n  - name: inside\n    security-level: 100\n  - name: outside\n    security-level: 0\n";
    let cases: [(String, usize, &str, &str); 5] = [
        (
            format!("{levels}access-rules:\n  - name: a\n    action: permit\n    interface: dmz\n"),
            9,
            "access-rules[0].interface",
            "unknown interface \"dmz\"",
        ),
        (format!("{levels}timeouts:\n  udp: 0\n"), 7, "timeouts.udp", "value 0 out of range"),
        (
            "interfaces:\n  - name: inside\n    security-level: 101\n".to_string(),
            3,
            "interfaces[0].security-level",
            "value 101 out of range",
        ),
        (format!("{levels}  - name: inside\n    security-level: 1\n"), 6, "interfaces[2].name", "duplicate interface name"),
        (
            format!("{levels}nat:\n  rules:\n    - name: r\n      kind: dynamic-pat\n      source: 10.0.0.0/8\n      pool: none\n"),
            11,
            "nat.rules[0].pool",
            "unknown pool \"none\"",
        ),
    ];
    for (src, line, field, msg) in cases {
        let e = parse_policy(&src, "p.yaml", ifs).expect_err(&src);
        assert_eq!((e.line(), e.field()), (line, field), "{e}\n{src}");
        assert!(e.to_string().contains(msg), "{e}");
    }
}

#[test]
fn local_changes_name_the_sections_a_reload_cannot_apply() {
    let text = EXAMPLES[1].1;
    let c = parse(text, "n.yaml").unwrap();
    assert!(c.local_changes(&c).is_empty());
    // Policy only: a security level, a rule, a timeout.
    let policy_only = text
        .replacen("security-level: 100", "security-level: 90", 1)
        .replacen("tcp-syn: 30", "tcp-syn: 20", 1)
        .replacen("destination-port: 23", "destination-port: 24", 1);
    let p = parse(&policy_only, "n.yaml").unwrap();
    assert_ne!(p.policy(), c.policy());
    assert!(c.local_changes(&p).is_empty(), "{:?}", c.local_changes(&p));
    // An address and a cluster timer: local.
    let local = text
        .replacen("heartbeat-interval: 1000", "heartbeat-interval: 500", 1)
        .replacen("198.18.64.11/24", "198.18.64.12/24", 1);
    let l = parse(&local, "n.yaml").unwrap();
    assert_eq!(c.local_changes(&l), ["interfaces", "cluster"]);
}

fn limits() -> impl Strategy<Value = Limits> {
    let one = || prop_oneof![Just(None), (1u32..=u32::MAX).prop_map(Some)];
    (one(), one(), one(), one(), any::<bool>()).prop_map(|(a, b, c, d, e)| Limits {
        max_conns: a,
        max_embryonic: b,
        per_client_max: c,
        per_client_embryonic_max: d,
        syn_proxy: e,
    })
}

fn rule() -> impl Strategy<Value = AccessRule> {
    let proto = prop_oneof![
        Just(Protocol::Any),
        Just(Protocol::TCP),
        Just(Protocol::UDP),
        Just(Protocol::ICMP),
        Just(Protocol::ICMP6),
        (0u8..=255).prop_map(Protocol::Number)
    ];
    // A rule's addresses: none, IPv4 or IPv6 (one family per rule), each
    // of the two present or not.
    let nets = (0u8..3, any::<bool>(), any::<bool>(), any::<(u32, u32, u128, u128)>(), 0u8..=128, 0u8..=128).prop_map(
        |(family, has_src, has_dst, (s4, d4, s6, d6), sl, dl)| {
            let v4 = |a: u32, l: u8| IpNet::V4(Ipv4Net::containing(a.into(), l.min(32)));
            let v6 = |a: u128, l: u8| IpNet::V6(Ipv6Net::containing(a.into(), l));
            match family {
                0 => (None, None),
                1 => (has_src.then(|| v4(s4, sl)), has_dst.then(|| v4(d4, dl))),
                _ => (has_src.then(|| v6(s6, sl)), has_dst.then(|| v6(d6, dl))),
            }
        },
    );
    let ports = (any::<u16>(), any::<u16>()).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b)).parse::<PortRange>().unwrap());
    (
        "[a-zA-Z0-9 _\"\\\\:#é-]{1,12}",
        any::<bool>(),
        prop_oneof![Just(None), Just(Some("inside".to_string())), Just(Some("outside".to_string()))],
        proto,
        nets,
        ports.clone(),
        ports,
        limits(),
    )
        .prop_map(|(name, permit, interface, protocol, (source, destination), sp, dp, limits)| {
            let l4 = protocol.has_ports();
            // The other family's ICMP is refused: swap it for this one's.
            let family = source.or(destination).map(|n| n.family());
            let protocol = match (protocol, family) {
                (Protocol::ICMP, Some("IPv6")) => Protocol::ICMP6,
                (Protocol::ICMP6, Some("IPv4")) => Protocol::ICMP,
                (p, _) => p,
            };
            AccessRule {
                name,
                action: if permit { Action::Permit } else { Action::Deny },
                interface,
                protocol,
                source,
                destination,
                source_port: if l4 { sp } else { PortRange::ANY },
                destination_port: if l4 { dp } else { PortRange::ANY },
                limits: if permit { limits } else { Limits::default() },
            }
        })
}

proptest! {
    /// Any policy a node file can hold reads back equal from its document.
    #[test]
    fn any_policy_reads_back_equal(
        rules in proptest::collection::vec(rule(), 0..6),
        levels in (0u8..=100, 0u8..=100),
        t in proptest::array::uniform7(1u64..=u64::MAX),
        global in limits(),
    ) {
        let c = parse(EXAMPLES[0].1, "node.yaml").unwrap();
        let mut rules = rules;
        // Rule names are unique in a valid configuration.
        for (i, r) in rules.iter_mut().enumerate() {
            r.name = format!("{i}{}", r.name);
        }
        let p = Policy {
            security_levels: vec![("inside".into(), levels.0), ("outside".into(), levels.1)],
            access_rules: rules,
            timeouts: Timeouts { tcp_syn: t[0], tcp_established: t[1], tcp_closing: t[2], tcp_closed: t[3], udp: t[4], icmp: t[5], other: t[6] },
            limits: global,
            nat: Default::default(),
        };
        let y = p.to_yaml();
        let back = parse_policy(&y, "replicated", &c.interfaces);
        prop_assert!(back.is_ok(), "{:?}\n{}", back.err().map(|e| e.to_string()), y);
        prop_assert_eq!(back.unwrap(), p);
    }
}

/// The policy parser sees what a peer sends (house style point 10): every
/// truncation and single-line deletion of a document returns `Ok` or an
/// error with a position, never a panic.
#[test]
fn every_truncation_and_line_deletion_of_a_policy_document() {
    let c = parse(EXAMPLES[0].1, "node.yaml").unwrap();
    let doc = c.policy().to_yaml();
    let check = |src: &str| match parse_policy(src, "p", &c.interfaces) {
        Ok(p) => p.security_levels.len() == c.interfaces.len(),
        Err(e) => {
            assert!(e.line() >= 1 && e.column() >= 1, "{e}");
            assert!(e.to_string().starts_with("p:"), "{e}");
            false
        }
    };
    let ok = (0..=doc.len()).filter(|&n| doc.is_char_boundary(n) && check(&doc[..n])).count();
    assert!(ok > 10, "{ok} truncations parsed");
    let lines: Vec<&str> = doc.lines().collect();
    for i in 0..lines.len() {
        let mut v = lines.clone();
        v.remove(i);
        check(&v.join("\n"));
    }
}
