//! The access-rule scan alone, for callgrind: `Acl::evaluate` of a tuple
//! that matches none of 16 IPv4 rules (each a /16 source, a /32
//! destination, TCP port 80), with N IPv6 rules (/48 sources) in front.
//!
//! ```sh
//! cargo build --release -p dataplane --example acl_profile
//! valgrind --tool=callgrind --toggle-collect='*hot_acl*' \
//!     target/release/examples/acl_profile N [6]     # 6: IPv6 tuples
//! ```
//!
//! Instructions per `evaluate` = the collected count / 100 000 (docs/ipv6.md,
//! "Access rules").

use dataplane::acl::{Acl, AclRule};
use dataplane::route::IfIndex;
use dataplane::types::FiveTuple;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const EVALUATIONS: usize = 100_000;

fn rules(v6: usize) -> Vec<AclRule> {
    let rule = |name: String, src, dst| AclRule {
        name,
        permit: true,
        iface: None,
        protocol: Some(6),
        src,
        dst,
        src_ports: (0, 65535),
        dst_ports: (80, 80),
    };
    let mut r: Vec<AclRule> = (0..v6 as u16)
        .map(|i| rule(format!("v6-{i}"), Some((IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, i, 0, 0, 0, 0, 0)), 48)), None))
        .collect();
    r.extend((0..16u32).map(|i| {
        let src = Some((IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + (i << 16))), 16));
        rule(format!("v4-{i}"), src, Some((IpAddr::V4(Ipv4Addr::new(198, 18, 1, 10)), 32)))
    }));
    r
}

#[inline(never)]
fn hot_acl(acl: &Acl, tuples: &[FiveTuple], n: usize) -> usize {
    let mut permits = 0;
    for i in 0..n {
        if acl.evaluate(IfIndex(0), IfIndex(1), black_box(&tuples[i % tuples.len()])).permit() {
            permits += 1;
        }
    }
    permits
}

fn main() {
    let mut args = std::env::args().skip(1);
    let v6: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let ipv6 = args.next().is_some_and(|a| a == "6");
    let acl = Acl::new(rules(v6), vec![0, 0]);
    let tuples: Vec<FiveTuple> = (0..8u16)
        .map(|i| {
            let (src, dst) = if ipv6 {
                (IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, i)), IpAddr::V6(Ipv6Addr::LOCALHOST))
            } else {
                (IpAddr::V4(Ipv4Addr::new(192, 0, 2, i as u8)), IpAddr::V4(Ipv4Addr::new(198, 18, 1, 10)))
            };
            FiveTuple { src, dst, proto: 6, src_port: 1000, dst_port: 80 }
        })
        .collect();
    let permits = hot_acl(&acl, &tuples, EVALUATIONS);
    assert_eq!(permits, 0, "no rule matches: every evaluation scans the whole table");
    println!("{EVALUATIONS} evaluations, {} rules ({v6} IPv6), {} tuples", acl.rule_names().len(), if ipv6 { "IPv6" } else { "IPv4" });
}
