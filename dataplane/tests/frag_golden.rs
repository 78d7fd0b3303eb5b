//! Single-node fragments (docs/fragments.md, "On the packet path"): the
//! first fragment decides policy on the datagram's 5-tuple, every fragment
//! leaves on its own (TTL decremented, header checksum right, nothing
//! else changed), fragments that arrive before the first are held and
//! released through `drain_generated`. Each step checks the exact bytes
//! and the counter deltas.

mod common;
mod frag_util;

use common::*;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::tcp_flags::{ACK, PSH, SYN};
use dataplane::pipeline::{Pipeline, Verdict};
use dataplane::wire::build::PacketBuilder;
use dataplane::{DropReason, PortId, Timestamp};
use frag_util::*;
use std::collections::BTreeMap;

struct Node {
    p: Pipeline,
    now_ms: u64,
}

/// Every counter that matters here, by name.
fn snap(p: &Pipeline) -> BTreeMap<String, u64> {
    let c = p.counters();
    let f = p.frag_counters();
    let r = p.reasm_counters();
    let mut m = BTreeMap::new();
    for (k, v) in [
        ("packets", c.packets),
        ("forwarded", c.forwarded),
        ("consumed", c.consumed),
        ("flows_created", c.flows_created),
        ("frag.inserted", f.inserted),
        ("frag.held", f.held),
        ("frag.released", f.released),
        ("frag.release_drops", f.release_drops),
        ("frag.local", f.local),
        ("reasm.datagrams", r.datagrams),
        ("reasm.first_seen", r.first_seen),
        ("reasm.forwarded", r.forwarded),
        ("reasm.taken", r.taken),
        ("reasm.forwarded_datagrams", r.forwarded_datagrams),
        ("reasm.datagrams_dropped", r.datagrams_dropped),
    ] {
        m.insert(k.to_string(), v);
    }
    for &d in DropReason::ALL {
        m.insert(format!("drop:{}", d.as_str()), c.drop_count(d));
        m.insert(format!("reasm-drop:{}", d.as_str()), r.dropped(d));
        m.insert(format!("release-drop:{}", d.as_str()), p.frag_release_drops(d));
    }
    m
}

impl Node {
    fn new() -> Self {
        let mut n = Node { p: pipeline(), now_ms: 1_000 };
        // Learn the gateway and the host.
        n.send(OUT_PORT, &arp_request(GW_MAC, None, GW_MAC, GW, OUT_ADDR));
        n.send(IN_PORT, &arp_request(HOST_MAC, None, HOST_MAC, HOST, IN_ADDR));
        n.gen();
        n
    }
    fn send(&mut self, port: PortId, f: &[u8]) -> (Verdict, Vec<u8>) {
        self.now_ms += 1;
        let mut b = VecBuf::new(f);
        let v = self.p.process(Timestamp::from_millis(self.now_ms), port, &mut b);
        (v, b.data().to_vec())
    }
    fn gen(&mut self) -> Vec<(PortId, Vec<u8>)> {
        let mut g = vec![];
        self.p.drain_generated(|port, f| g.push((port, f.to_vec())));
        g
    }
    /// Run `f`, then check that exactly the `want` counters moved, by
    /// exactly those amounts, and that every packet is accounted for.
    fn step<T>(&mut self, want: &[(&str, u64)], f: impl FnOnce(&mut Self) -> T) -> T {
        let before = snap(&self.p);
        let r = f(self);
        let after = snap(&self.p);
        let want: BTreeMap<&str, u64> = want.iter().copied().collect();
        for k in want.keys() {
            assert!(after.contains_key(*k), "unknown counter {k}");
        }
        for (k, a) in &after {
            assert_eq!(a - before[k], want.get(k.as_str()).copied().unwrap_or(0), "counter {k}");
        }
        let c = self.p.counters();
        assert_eq!(c.packets, c.emitted() + c.consumed + c.dropped(), "every packet accounted for");
        assert!(self.p.reasm_counters().accounted(self.p.frag_in_progress().1), "reassembler conservation");
        r
    }
}

/// A UDP datagram from the inside host, 8 + 56 bytes of UDP: 3 fragments
/// of 24, 24 and 16 bytes.
fn inside_udp(sport: u16, ident: u16) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let payload: Vec<u8> = (0..56u8).collect();
    let b = PacketBuilder { dont_frag: false, ident, ..from_host(SERVER) };
    let out = PacketBuilder { dont_frag: false, ident, ..PacketBuilder::new(OUT_MAC, GW_MAC, HOST, SERVER).ttl(63) };
    (fragments(&b.udp(sport, 5000, &payload), 24), fragments(&out.udp(sport, 5000, &payload), 24))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
}

#[test]
fn udp_in_order_each_fragment_forwarded() {
    let mut n = Node::new();
    let (frags, want) = inside_udp(40000, 0x1111);
    assert_eq!(frags.len(), 3);
    // First fragment: conntrack creates the flow (ACL on creation).
    let (v, out) = n.step(
        &[
            ("packets", 1),
            ("forwarded", 1),
            ("flows_created", 1),
            ("frag.inserted", 1),
            ("reasm.datagrams", 1),
            ("reasm.first_seen", 1),
            ("reasm.taken", 1),
        ],
        |n| n.send(IN_PORT, &frags[0]),
    );
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    assert_eq!(hex(&out), hex(&want[0]));
    check_ip(&out, 63);
    assert!(n.gen().is_empty());
    // The others pass as they come, unchanged but for TTL and MACs.
    let (v, out) = n.step(
        &[("packets", 1), ("forwarded", 1), ("frag.inserted", 1), ("reasm.forwarded", 1)],
        |n| n.send(IN_PORT, &frags[1]),
    );
    assert_eq!((v, hex(&out)), (Verdict::Forward(OUT_PORT), hex(&want[1])));
    let (v, out) = n.step(
        &[
            ("packets", 1),
            ("forwarded", 1),
            ("frag.inserted", 1),
            ("reasm.forwarded", 1),
            ("reasm.forwarded_datagrams", 1),
        ],
        |n| n.send(IN_PORT, &frags[2]),
    );
    assert_eq!((v, hex(&out)), (Verdict::Forward(OUT_PORT), hex(&want[2])));
    assert_eq!(n.p.frag_in_progress(), (0, 0), "context freed");
    assert_eq!(reassemble_udp(&want), (0..56u8).collect::<Vec<_>>());
}

#[test]
fn udp_reversed_held_then_released() {
    let mut n = Node::new();
    let (frags, want) = inside_udp(40001, 0x2222);
    // Last and middle arrive first: held (copies), nothing leaves.
    for i in [2, 1] {
        let (v, _) = n.step(
            &[
                ("packets", 1),
                ("consumed", 1),
                ("frag.inserted", 1),
                ("frag.held", 1),
                ("reasm.datagrams", u64::from(i == 2)),
            ],
            |n| n.send(IN_PORT, &frags[i]),
        );
        assert_eq!(v, Verdict::Consumed);
        assert!(n.gen().is_empty());
    }
    assert_eq!(n.p.frag_in_progress(), (1, 2));
    // The first: forwarded itself, the held ones released behind it.
    let (v, out) = n.step(
        &[
            ("packets", 1),
            ("forwarded", 1),
            ("flows_created", 1),
            ("frag.inserted", 1),
            ("frag.released", 2),
            ("reasm.first_seen", 1),
            ("reasm.taken", 3),
            ("reasm.forwarded_datagrams", 1),
        ],
        |n| n.send(IN_PORT, &frags[0]),
    );
    assert_eq!((v, hex(&out)), (Verdict::Forward(OUT_PORT), hex(&want[0])));
    let g = n.gen();
    assert_eq!(g.len(), 2);
    assert_eq!((g[0].0, hex(&g[0].1)), (OUT_PORT, hex(&want[1])), "lowest offset first");
    assert_eq!((g[1].0, hex(&g[1].1)), (OUT_PORT, hex(&want[2])));
    for (_, f) in &g {
        check_ip(f, 63);
    }
    assert_eq!(n.p.frag_in_progress(), (0, 0));
    let all = vec![out, g[0].1.clone(), g[1].1.clone()];
    assert_eq!(reassemble_udp(&all), (0..56u8).collect::<Vec<_>>());
    // Three fragments and the ARP reply to the gateway.
    assert_eq!(n.p.counters().ports[OUT_PORT.0 as usize].tx_packets, 4);
}

#[test]
fn unsolicited_outside_datagram_dropped_every_fragment() {
    let mut n = Node::new();
    let b = PacketBuilder { dont_frag: false, ident: 0x3333, ..from_outside(SERVER, HOST) };
    let frags = fragments(&b.udp(53, 40002, &[7u8; 56]), 24);
    // Middle first: held.
    let (v, _) = n.step(
        &[("packets", 1), ("consumed", 1), ("frag.inserted", 1), ("frag.held", 1), ("reasm.datagrams", 1)],
        |n| n.send(OUT_PORT, &frags[1]),
    );
    assert_eq!(v, Verdict::Consumed);
    // The first: denied by the ACL (security levels), and the held
    // fragment released into the same verdict.
    let (v, out) = n.step(
        &[
            ("packets", 1),
            ("drop:acl-denied", 1),
            ("frag.inserted", 1),
            ("frag.release_drops", 1),
            ("release-drop:acl-denied", 1),
            ("reasm.first_seen", 1),
            ("reasm.taken", 2),
        ],
        |n| n.send(OUT_PORT, &frags[0]),
    );
    assert_eq!(v, Verdict::Drop(DropReason::AclDenied));
    assert_eq!(out, frags[0], "a dropped frame is unchanged");
    assert!(n.gen().is_empty(), "nothing released");
    // The last: denied on its own.
    let (v, _) = n.step(
        &[
            ("packets", 1),
            ("drop:acl-denied", 1),
            ("frag.inserted", 1),
            ("reasm.forwarded", 1),
            ("reasm.forwarded_datagrams", 1),
        ],
        |n| n.send(OUT_PORT, &frags[2]),
    );
    assert_eq!(v, Verdict::Drop(DropReason::AclDenied));
    assert_eq!(n.p.flow_count(), 0);
    assert_eq!(n.p.frag_in_progress(), (0, 0));
}

#[test]
fn overlapping_fragments_drop_the_datagram() {
    let mut n = Node::new();
    let b = PacketBuilder { dont_frag: false, ident: 0x4444, ..from_host(SERVER) };
    let frame = b.udp(40003, 5000, &[1u8; 56]);
    // [24, 48) held, then [16, 40) overlaps it: both dropped (teardrop).
    n.step(&[("packets", 1), ("consumed", 1), ("frag.inserted", 1), ("frag.held", 1), ("reasm.datagrams", 1)], |n| {
        n.send(IN_PORT, &raw_fragment(&frame, 24, 24, true))
    });
    let (v, _) = n.step(
        &[
            ("packets", 1),
            ("drop:frag-overlap", 1),
            ("frag.inserted", 1),
            ("reasm-drop:frag-overlap", 2),
            ("reasm.datagrams_dropped", 1),
        ],
        |n| n.send(IN_PORT, &raw_fragment(&frame, 16, 24, true)),
    );
    assert_eq!(v, Verdict::Drop(DropReason::FragOverlap));
    assert_eq!(n.p.frag_in_progress(), (0, 0));
    assert!(n.gen().is_empty());
    // Overlap after the first fragment passed: the overlapping one is
    // dropped, so no overlapping bytes ever leave.
    let frags = fragments(&frame, 24);
    assert!(matches!(n.send(IN_PORT, &frags[0]).0, Verdict::Forward(_)));
    let (v, _) = n.step(
        &[
            ("packets", 1),
            ("drop:frag-overlap", 1),
            ("frag.inserted", 1),
            ("reasm-drop:frag-overlap", 1),
            ("reasm.datagrams_dropped", 1),
        ],
        |n| n.send(IN_PORT, &raw_fragment(&frame, 16, 16, true)),
    );
    assert_eq!(v, Verdict::Drop(DropReason::FragOverlap));
}

#[test]
fn oversize_and_malformed_fragments_dropped() {
    let mut n = Node::new();
    let b = PacketBuilder { dont_frag: false, ident: 0x5555, ..from_host(SERVER) };
    let frame = b.udp(40004, 5000, &[1u8; 56]);
    // Offset 65528 + 16 bytes + header > 65535: the ping of death.
    let (v, _) = n.step(&[("packets", 1), ("drop:frag-too-big", 1)], |n| {
        n.send(IN_PORT, &raw_fragment(&frame, 65528, 16, false))
    });
    assert_eq!(v, Verdict::Drop(DropReason::FragTooBig));
    // A non-last fragment of 12 bytes.
    let (v, _) = n.step(
        &[("packets", 1), ("drop:frag-bad-length", 1), ("frag.inserted", 1), ("reasm-drop:frag-bad-length", 1)],
        |n| n.send(IN_PORT, &raw_fragment(&frame, 24, 12, true)),
    );
    assert_eq!(v, Verdict::Drop(DropReason::FragBadLength));
    // A zero-length first fragment.
    let tiny = raw_fragment(&frame, 0, 0, true);
    let (v, _) = n.step(
        &[("packets", 1), ("drop:frag-bad-length", 1), ("frag.inserted", 1), ("reasm-drop:frag-bad-length", 1)],
        |n| n.send(IN_PORT, &tiny),
    );
    assert_eq!(v, Verdict::Drop(DropReason::FragBadLength));
    assert_eq!(n.p.frag_in_progress(), (0, 0));
}

#[test]
fn held_fragments_time_out_in_poll_timers() {
    let mut n = Node::new();
    let (frags, _) = inside_udp(40005, 0x6666);
    n.send(IN_PORT, &frags[2]);
    n.send(IN_PORT, &frags[1]);
    assert_eq!(n.p.frag_in_progress(), (1, 2));
    n.step(&[], |n| n.p.poll_timers(Timestamp::from_millis(n.now_ms + 1_000)));
    assert_eq!(n.p.frag_in_progress(), (1, 2), "not yet");
    n.step(&[("reasm-drop:frag-timeout", 2), ("reasm.datagrams_dropped", 1)], |n| {
        n.p.poll_timers(Timestamp::from_millis(n.now_ms + 2_000))
    });
    assert_eq!(n.p.frag_in_progress(), (0, 0));
    assert!(n.gen().is_empty());
}

#[test]
fn fragments_to_the_node_itself_are_counted_and_dropped() {
    let mut n = Node::new();
    // ping -s 8000 to the inside address: not reassembled locally.
    let b = PacketBuilder { dont_frag: false, ident: 0x7777, ..from_host(IN_ADDR) };
    let frags = fragments(&b.icmp(8, 0, (1, 1), &[0u8; 8000]), 1480);
    assert_eq!(frags.len(), 6);
    for f in &frags {
        let (v, _) = n.step(&[("packets", 1), ("drop:ipv4-fragment", 1), ("frag.local", 1)], |n| n.send(IN_PORT, f));
        assert_eq!(v, Verdict::Drop(DropReason::Ipv4Fragment));
    }
}

#[test]
fn ping_8000_through_both_ways() {
    let mut n = Node::new();
    let req = PacketBuilder { dont_frag: false, ident: 0x0101, ..from_host(SERVER) }.icmp(8, 0, (7, 1), &[9u8; 8000]);
    let frags = fragments(&req, 1480);
    let mut out = vec![];
    for f in frags.iter().rev() {
        if let (Verdict::Forward(p), o) = n.send(IN_PORT, f) {
            assert_eq!(p, OUT_PORT);
            out.push(o);
        }
    }
    out.extend(n.gen().into_iter().map(|(_, f)| f));
    assert_eq!(out.len(), 6, "every fragment of the request leaves");
    let rep = PacketBuilder { dont_frag: false, ident: 0x0202, ..from_outside(SERVER, HOST) }.icmp(0, 0, (7, 1), &[9u8; 8000]);
    let mut back = 0;
    for f in fragments(&rep, 1480) {
        if let (Verdict::Forward(p), _) = n.send(OUT_PORT, &f) {
            assert_eq!(p, IN_PORT);
            back += 1;
        }
    }
    assert_eq!(back, 6, "every fragment of the reply comes back");
    assert_eq!(n.p.flow_count(), 1);
}

/// A TCP segment that arrives in fragments is tracked piece by piece (each
/// fragment's sequence range), so the peer's ACK of the whole segment is in
/// window.
#[test]
fn fragmented_tcp_segment_tracked_whole() {
    let mut n = Node::new();
    let (c, s) = (1000u32, 5000u32);
    let opts = SYN_OPTS;
    let go = |n: &mut Node, port, f: Vec<u8>| n.send(port, &f).0;
    assert!(matches!(go(&mut n, IN_PORT, from_host(SERVER).tcp(40006, 80, c, 0, SYN, 64240, &opts, b"")), Verdict::Forward(_)));
    let synack = from_outside(SERVER, HOST).tcp(80, 40006, s, c + 1, SYN | ACK, 65535, &opts, b"");
    assert!(matches!(go(&mut n, OUT_PORT, synack), Verdict::Forward(_)));
    assert!(matches!(
        go(&mut n, IN_PORT, from_host(SERVER).tcp(40006, 80, c + 1, s + 1, ACK, 502, &[], b"")),
        Verdict::Forward(_)
    ));
    // 300 bytes of data in fragments of 48 bytes of IP payload.
    let data = PacketBuilder { dont_frag: false, ident: 0x0303, ..from_host(SERVER) }
        .tcp(40006, 80, c + 1, s + 1, ACK | PSH, 502, &[], &[5u8; 300]);
    let frags = fragments(&data, 48);
    assert_eq!(frags.len(), 7);
    for f in frags.iter().rev() {
        n.send(IN_PORT, f);
    }
    let released = n.gen();
    assert_eq!(released.len(), 6);
    assert_eq!(n.p.frag_release_drops(DropReason::TcpOutOfWindow), 0);
    // The server acknowledges all 300 bytes: in window.
    let ack = from_outside(SERVER, HOST).tcp(80, 40006, s + 1, c + 301, ACK, 509, &[], b"");
    assert_eq!(go(&mut n, OUT_PORT, ack), Verdict::Forward(IN_PORT));
}

mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        /// Any order of the fragments of a permitted datagram (any size,
        /// any fragment size, with duplicates): every fragment leaves (in
        /// hand or released; exactly once without duplicates), unchanged
        /// but for TTL and MACs, and the pieces reassemble to the datagram.
        #[test]
        fn any_order_every_fragment_leaves_once(
            len in 1usize..6000,
            size8 in 1usize..186,
            seed in any::<u64>(),
            dups in 0usize..3,
        ) {
            let mut n = Node::new();
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let b = PacketBuilder { dont_frag: false, ident: (seed >> 48) as u16, ..from_host(SERVER) };
            let frags = fragments(&b.udp(41000, 5000, &payload), size8 * 8);
            // Within the per-datagram limit (64 by default; beyond it is
            // `frag-too-many`, covered by the reassembler's tests).
            prop_assume!(frags.len() <= 64);
            let mut order: Vec<usize> = (0..frags.len()).collect();
            let mut s = seed;
            for i in (1..order.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                order.swap(i, (s >> 33) as usize % (i + 1));
            }
            for d in 0..dups.min(order.len()) {
                let k = order[d];
                order.push(k);
            }
            let mut out = vec![];
            for &i in &order {
                if let (Verdict::Forward(p), f) = n.send(IN_PORT, &frags[i]) {
                    prop_assert_eq!(p, OUT_PORT);
                    out.push(f);
                }
                out.extend(n.gen().into_iter().map(|(_, f)| f));
            }
            for f in &out {
                check_ip(f, 63);
            }
            // A duplicate within a live datagram is dropped; one that
            // comes after the datagram went through opens a new context
            // and passes again (harmless: identical bytes).
            let mut distinct = out.clone();
            distinct.sort();
            distinct.dedup();
            prop_assert_eq!(distinct.len(), frags.len(), "every fragment leaves");
            if dups == 0 {
                prop_assert_eq!(out.len(), frags.len(), "exactly once");
            }
            prop_assert_eq!(reassemble_udp(&distinct), payload);
            let c = n.p.counters();
            prop_assert_eq!(c.packets, c.emitted() + c.consumed + c.dropped());
            prop_assert_eq!(n.p.frag_counters().release_drops, 0);
        }
    }
}

/// A tagged datagram from the DMZ (VLAN 10), last fragment first: the
/// held fragment is rebuilt from the tagged first fragment and leaves
/// untagged on the outside like the others.
#[test]
fn tagged_fragments_released_untagged() {
    let mut n = Node::new();
    n.send(DMZ_PORT, &arp_request(DMZ_HOST_MAC, Some(DMZ_VLAN), DMZ_HOST_MAC, DMZ_HOST, DMZ_ADDR));
    n.gen();
    let payload = [6u8; 100];
    let b = PacketBuilder { dont_frag: false, ident: 0x0404, ..from_dmz(SERVER) };
    let frags = fragments(&b.udp(41500, 5000, &payload), 56);
    let out = PacketBuilder { dont_frag: false, ident: 0x0404, ..PacketBuilder::new(OUT_MAC, GW_MAC, DMZ_HOST, SERVER).ttl(63) };
    let want = fragments(&out.udp(41500, 5000, &payload), 56);
    assert_eq!(frags.len(), 2);
    assert_eq!(n.send(DMZ_PORT, &frags[1]).0, Verdict::Consumed);
    let (v, first) = n.send(DMZ_PORT, &frags[0]);
    assert_eq!((v, hex(&first)), (Verdict::Forward(OUT_PORT), hex(&want[0])));
    let g = n.gen();
    assert_eq!(g.len(), 1);
    assert_eq!((g[0].0, hex(&g[0].1)), (OUT_PORT, hex(&want[1])));
}
