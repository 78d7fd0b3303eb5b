use super::*;
use proptest::prelude::*;

/// The reference: the rules scanned in order.
fn scan_out(rules: &[RuleSpec], ifaces: usize, iface: IfIndex, src: Ipv4Addr, proto: u8, sport: u16) -> Option<u32> {
    rules
        .iter()
        .position(|r| usable(r, ifaces) && r.real_iface.is_none_or(|x| x == iface) && matches_out(r, src, proto, sport))
        .map(|i| i as u32)
}

fn scan_in(rules: &[RuleSpec], ifaces: usize, dst: Ipv4Addr, proto: u8, dport: u16) -> Option<u32> {
    rules
        .iter()
        .position(|r| {
            usable(r, ifaces)
                && match (r.kind, r.mapped, r.ports) {
                    (RuleKind::StaticNat, Some(m), _) => within(dst, m),
                    (RuleKind::StaticPat, Some(m), Some((p, _, mp))) => dst == m.0 && proto == p && dport == mp,
                    _ => false,
                }
        })
        .map(|i| i as u32)
}

fn usable(r: &RuleSpec, ifaces: usize) -> bool {
    r.real_iface.is_none_or(|x| usize::from(x.0) < ifaces)
}

fn within(a: Ipv4Addr, (net, len): (Ipv4Addr, u8)) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
    u32::from(a) & mask == u32::from(net) & mask
}

fn matches_out(r: &RuleSpec, src: Ipv4Addr, proto: u8, sport: u16) -> bool {
    match (r.kind, r.ports) {
        (RuleKind::StaticPat, Some((p, rp, _))) => src == r.source.0 && proto == p && sport == rp,
        (RuleKind::StaticPat, None) => false,
        _ => within(src, r.source),
    }
}

fn net(a: u32, len: u8) -> (Ipv4Addr, u8) {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
    (Ipv4Addr::from(a & mask), len)
}

/// Rules over a small address space (10.0.0.0/20) so prefixes overlap.
fn rule() -> impl Strategy<Value = RuleSpec> {
    (
        0u8..4,
        proptest::option::of(0u16..4),
        0u32..4096,
        16u8..=32,
        0u32..4096,
        prop_oneof![Just(6u8), Just(17u8)],
        1u16..4,
        1u16..4,
    )
        .prop_map(|(k, iface, s, len, m, proto, rp, mp)| {
            let kind =
                [RuleKind::StaticNat, RuleKind::StaticPat, RuleKind::DynamicNat, RuleKind::DynamicPat][usize::from(k)];
            let source = if kind == RuleKind::StaticPat { net(0x0a00_0000 + s, 32) } else { net(0x0a00_0000 + s, len) };
            let mapped = match kind {
                RuleKind::StaticNat => Some(net(0xc633_6000 + m, source.1)),
                RuleKind::StaticPat => Some(net(0xc633_6000 + m, 32)),
                _ => None,
            };
            RuleSpec {
                kind,
                real_iface: iface.map(IfIndex),
                mapped_iface: None,
                source,
                mapped,
                ports: (kind == RuleKind::StaticPat).then_some((proto, rp, mp)),
                pool: kind.ne(&RuleKind::StaticNat).then_some(0),
                per_session: Default::default(),
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn lookups_agree_with_a_scan_in_rule_order(
        rules in proptest::collection::vec(rule(), 0..40),
        probes in proptest::collection::vec((0u16..4, 0u32..4096, prop_oneof![Just(6u8), Just(17u8), Just(1u8)], 0u16..5), 64),
    ) {
        let ifaces = 3; // rules naming interface 3 never match
        let t = RuleTable::build(rules.clone(), ifaces);
        for (iface, a, proto, port) in probes {
            let src = Ipv4Addr::from(0x0a00_0000 + a);
            prop_assert_eq!(t.outbound(IfIndex(iface), src, proto, port), scan_out(&rules, ifaces, IfIndex(iface), src, proto, port));
            let dst = Ipv4Addr::from(0xc633_6000 + a);
            prop_assert_eq!(t.inbound(dst, proto, port), scan_in(&rules, ifaces, dst, proto, port));
        }
    }
}

#[test]
fn first_match_wins_across_interface_and_any() {
    let any = |s: (Ipv4Addr, u8)| RuleSpec {
        kind: RuleKind::DynamicPat,
        real_iface: None,
        mapped_iface: None,
        source: s,
        mapped: None,
        ports: None,
        pool: Some(0),
        per_session: Default::default(),
    };
    let on0 = |s| RuleSpec { real_iface: Some(IfIndex(0)), ..any(s) };
    let t = RuleTable::build(vec![on0(net(0x0a00_0000, 24)), any(net(0x0a00_0000, 8)), on0(net(0x0a00_0000, 8))], 2);
    let a = Ipv4Addr::new(10, 0, 0, 9);
    assert_eq!(t.outbound(IfIndex(0), a, 6, 1), Some(0));
    assert_eq!(t.outbound(IfIndex(1), a, 6, 1), Some(1), "rule 0 is for interface 0 only");
    assert_eq!(t.outbound(IfIndex(0), Ipv4Addr::new(10, 9, 0, 1), 6, 1), Some(1), "the any rule comes first");
    assert_eq!(t.outbound(IfIndex(0), Ipv4Addr::new(11, 0, 0, 1), 6, 1), None);
    assert_eq!(t.inbound(a, 6, 1), None, "dynamic rules have no inbound side");
}

/// 10 000 rules (N9): the compiled table answers like the scan.
#[test]
fn ten_thousand_rules_answer_like_the_scan() {
    let rules: Vec<RuleSpec> = (0..10_000u32)
        .map(|i| RuleSpec {
            kind: if i % 10 == 0 { RuleKind::StaticNat } else { RuleKind::DynamicPat },
            real_iface: (i % 3 != 0).then_some(IfIndex((i % 2) as u16)),
            mapped_iface: None,
            source: net(0x0a00_0000 + i * 256, 24 + (i % 9) as u8),
            mapped: (i % 10 == 0).then(|| net(0xc000_0000 + i * 256, 24 + (i % 9) as u8)),
            ports: None,
            pool: (i % 10 != 0).then_some(0),
            per_session: Default::default(),
        })
        .collect();
    let t = RuleTable::build(rules.clone(), 2);
    assert_eq!(t.len(), 10_000);
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..5_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let a = Ipv4Addr::from(0x0a00_0000 + (x as u32 % (10_000 * 256)));
        let iface = IfIndex((x >> 40) as u16 % 2);
        assert_eq!(t.outbound(iface, a, 6, 80), scan_out(&rules, 2, iface, a, 6, 80), "{a}");
        let d = Ipv4Addr::from(0xc000_0000 + (x as u32 % (10_000 * 256)));
        assert_eq!(t.inbound(d, 6, 80), scan_in(&rules, 2, d, 6, 80), "{d}");
    }
}
