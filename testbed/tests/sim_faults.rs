//! The simulator's checks bite: routers that damage frames on purpose
//! (`sim::Fault`) must make the run fail, with the host's diagnosis — for
//! the IPv6 flows (a quarter, `sim::DEFAULT_IPV6_SHARE`) as for IPv4's.

use testbed::sim::{self, Fault, SimConfig};

fn run_with(fault: Fault, jittery: bool) -> sim::report::Report {
    let mut cfg = SimConfig::new(21, 3)
        .flows(200, 0)
        .cluster(false)
        .symmetric(true);
    if jittery {
        // Reordering only exists on the CCL: use the cluster so that the
        // forwarded segments overtake each other and the hosts send SACKs.
        cfg = SimConfig::new(21, 3)
            .flows(300, 0)
            .ccl(sim::net::CclLink::jittery());
    }
    cfg.fault = Some(fault);
    sim::run(cfg).unwrap()
}

#[test]
fn untranslated_synack_ack_is_caught() {
    let r = run_with(Fault::SynAckAckOffByOne, false);
    assert!(!r.ok());
    assert!(
        r.failures.iter().any(|f| f.contains("not translated back")),
        "{}",
        r.summary()
    );
    assert!(ipv6_caught(&r, "not translated back"), "{}", r.summary());
}

/// An IPv6 TCP flow failed with `diagnosis` (flow descriptions name the
/// kind: "(tcp6 …").
fn ipv6_caught(r: &sim::report::Report, diagnosis: &str) -> bool {
    r.ipv6.tcp_completed < r.ipv6.tcp_flows && r.failures.iter().any(|f| f.contains("(tcp6 ") && f.contains(diagnosis))
}

#[test]
fn corrupted_payload_is_caught() {
    let r = run_with(Fault::FlipServerPayload, false);
    assert!(!r.ok());
    assert!(
        r.failures.iter().any(|f| f.contains("payload corrupted")),
        "{}",
        r.summary()
    );
    assert!(ipv6_caught(&r, "payload corrupted"), "{}", r.summary());
}

#[test]
fn untranslated_sack_is_caught() {
    let r = run_with(Fault::ShiftServerSack, true);
    assert!(r.sacks_sent > 0, "{}", r.summary());
    assert!(!r.ok());
    assert!(
        r.failures.iter().any(|f| f.contains("SACK not translated")),
        "{}",
        r.summary()
    );
    assert!(ipv6_caught(&r, "SACK not translated"), "{}", r.summary());
}
