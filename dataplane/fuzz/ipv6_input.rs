//! The input shape and checks of the `ipv6_packet` fuzz target, shared with
//! the proptest `dataplane/tests/ipv6_fuzz_input.rs` (which includes this
//! file by path) so that the ordinary test suite builds and exercises the
//! same harness on every run while `cargo fuzz` explores it at length.
//!
//! Input: a sequence of records `[ctl: u8][len: u8][len bytes]`, each one
//! frame received at an increasing time (timers polled every 16 frames),
//! so the fuzzer can build state — neighbours, flows, held frames — and
//! then attack it. `ctl & 7` picks the port (0 inside or 1 outside, both
//! with IPv6 addresses, three times in four; 2 a VLAN interface without;
//! 3 no interface). Every frame is an Ethernet header with the IPv6
//! EtherType (to the port's MAC or, with `ctl & 0x80`, to an IPv6
//! multicast MAC), then:
//!
//! - `ctl & 0x18 == 0`: the record's bytes, raw (any IPv6 header or none);
//! - `ctl & 0x18 == 0x18`: neighbour discovery as a neighbour sends it
//!   (hop limit 255, valid checksum, link-layer address option): a
//!   solicitation for our address on that port from a host, or an
//!   advertisement of the host's own address to ours — so that the fuzzer
//!   resolves neighbours, releases held frames and reaches forwarding;
//! - otherwise a well-formed IPv6 header (the payload length right unless
//!   `ctl & 0x20`) whose source and destination are picked from addresses
//!   the pipeline treats differently (hosts inside and outside, more often;
//!   ours, link-local, multicast, solicited-node, unspecified, loopback), then
//!   an extension-header chain the bytes describe — hop-by-hop, routing
//!   (any type, any segments left), fragment (any offset, M flag and
//!   identification), destination options, AH, ESP, no next header, or an
//!   unknown number, up to 12 headers of any length — and an upper layer:
//!   TCP, UDP or ICMPv6 (any type; echo, ND and errors are common) with a
//!   valid checksum unless `ctl & 0x40`.
//!
//! Checked for every input: no panic; each frame gets one verdict and the
//! counters agree with the verdicts (`Forward` = forwarded + ARP/ND
//! replies + echo replies, `Consumed` = consumed, each `Drop(reason)` =
//! that reason's counter, never `Handoff` with one worker); and the
//! accounting invariant `packets == forwarded + consumed + arp_replies +
//! icmp_echo_replies + Σ drops`. Generated frames (solicitations, ICMPv6
//! errors, released held frames) are drained after every frame and carry
//! at least an Ethernet and an IPv6 header: frames the pipeline makes are
//! padded to the Ethernet minimum, a held frame leaves as long as it came
//! (as any forwarded frame: a 54-byte IPv6 packet without payload is 54
//! bytes out, the NIC pads it).

use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::Timeouts;
use dataplane::pipeline::{
    InterfaceSpec, Ipv6Spec, Pipeline, PipelineConfig, ReversePath, Route6Spec, RouteSpec, RuleSpec, Verdict,
};
use dataplane::wire::{checksum, icmpv6};
use dataplane::{DropReason, Duration, PortId, Timestamp};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const IN_MAC: [u8; 6] = [2, 0, 0, 0, 1, 1];
const OUT_MAC: [u8; 6] = [2, 0, 0, 0, 2, 1];
const DMZ_MAC: [u8; 6] = [2, 0, 0, 0, 3, 1];
const PEER_MAC: [u8; 6] = [2, 0, 0, 0, 9, 9];

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap_or(Ipv6Addr::UNSPECIFIED)
}

/// The port of a record's `ctl`.
pub fn port(ctl: u8) -> u16 {
    [0, 1, 0, 1, 0, 1, 2, 3][usize::from(ctl & 7)]
}

/// An address from a byte: a host (half the time) or any of `addresses`.
fn pick(v: u8) -> Ipv6Addr {
    let t = addresses();
    if v & 0x80 == 0 {
        [t[2], t[3], t[4], t[5], t[6], t[7], t[15]][usize::from(v) % 7]
    } else {
        t[usize::from(v) % t.len()]
    }
}

/// Addresses the IPv6 path tells apart.
fn addresses() -> [Ipv6Addr; 16] {
    [
        v6("2001:db8:1::1"),  // ours, inside
        v6("2001:db8:2::1"),  // ours, outside
        v6("2001:db8:1::10"), // inside host
        v6("2001:db8:1::80"), // inside web server (rules)
        v6("2001:db8:2::fe"), // outside gateway
        v6("2001:db8:77::5"), // permitted outside network
        v6("2001:db8:66::5"), // denied outside network
        v6("2001:db8:9::9"),  // behind the inside router (static route)
        icmpv6::link_local(IN_MAC),
        v6("fe80::10"),
        v6("ff02::1"),
        icmpv6::solicited_node(v6("2001:db8:1::1")),
        icmpv6::solicited_node(v6("2001:db8:2::fe")),
        Ipv6Addr::UNSPECIFIED,
        Ipv6Addr::LOCALHOST,
        v6("2001:db8:1::ff"), // inside, unknown neighbour
    ]
}

/// The pipeline under test: inside (level 100) and outside (level 0, MTU
/// 1280, so packet too big is reachable) with IPv6 addresses, a DMZ on a
/// VLAN without; IPv6 routes (default via the gateway, a /48 via an
/// inside router); access rules with IPv6 prefixes, an IPv4 one and one
/// without addresses.
pub fn pipeline() -> Pipeline {
    let iface = |name: &str, port, mac, net, level, vlan, mtu| InterfaceSpec {
        name: name.into(),
        port: PortId(port),
        mac,
        addr: Ipv4Addr::new(198, 18, net, 1),
        prefix_len: 24,
        security_level: level,
        vlan,
        mtu,
        reverse_path: ReversePath::Strict,
    };
    let rule = |name: &str, permit, src: Option<(&str, u8)>, dst: Option<(&str, u8)>, ports: (u16, u16)| RuleSpec {
        name: name.into(),
        permit,
        interface: None,
        protocol: Some(6),
        src: src.and_then(|(a, l)| a.parse::<IpAddr>().ok().map(|a| (a, l))),
        dst: dst.and_then(|(a, l)| a.parse::<IpAddr>().ok().map(|a| (a, l))),
        src_ports: (0, 65535),
        dst_ports: ports,
    };
    let mut p = Pipeline::new(PipelineConfig {
        interfaces: vec![
            iface("inside", 0, IN_MAC, 1, 100, None, 1500),
            iface("outside", 1, OUT_MAC, 2, 0, None, 1280),
            iface("dmz", 2, DMZ_MAC, 3, 50, Some(10), 1500),
        ],
        routes: vec![RouteSpec { destination: Ipv4Addr::UNSPECIFIED, prefix_len: 0, via: Ipv4Addr::new(198, 18, 2, 254) }],
        rules: vec![
            rule("bad6", false, Some(("2001:db8:66::", 48)), None, (0, 65535)),
            rule("web6", true, Some(("2001:db8:77::", 48)), Some(("2001:db8:1::80", 128)), (443, 443)),
            rule("web4", true, None, Some(("198.18.1.10", 32)), (80, 80)),
            rule("no-telnet", false, None, None, (23, 23)),
        ],
        timeouts: Timeouts::default(),
        flow_capacity: 64,
        arp_capacity: 8,
        arp_timeout: Duration::from_secs(300),
        arp_retry: Duration::from_secs(1),
        static_neighbors: vec![],
        cluster: None,
        icmp_errors: Default::default(),
    })
    .expect("valid config");
    p.set_ipv6(&Ipv6Spec {
        addresses: vec![("inside".into(), v6("2001:db8:1::1"), 64), ("outside".into(), v6("2001:db8:2::1"), 64)],
        routes: vec![
            Route6Spec { destination: Ipv6Addr::UNSPECIFIED, prefix_len: 0, via: v6("2001:db8:2::fe") },
            Route6Spec { destination: v6("2001:db8:9::"), prefix_len: 48, via: v6("2001:db8:1::fe") },
        ],
    })
    .expect("valid IPv6 spec");
    p
}

/// Reads bytes front to back; zeros once they run out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((b, rest)) => {
                self.0 = rest;
                *b
            }
            None => 0,
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }
    fn take(&mut self, n: usize) -> Vec<u8> {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        let mut v = a.to_vec();
        v.resize(n, 0);
        v
    }
    fn rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.0).to_vec()
    }
}

/// Extension headers and upper layers the chain draws from.
const NEXT: [u8; 12] = [0, 43, 44, 60, 51, 50, 59, 6, 17, 58, 0xfd, 6];
const ICMP_TYPES: [u8; 10] = [128, 129, 135, 136, 133, 134, 137, 1, 2, 3];
const PORTS: [u16; 6] = [443, 80, 22, 23, 8080, 53];

/// The IPv6 payload (extension chain and upper layer) the bytes describe,
/// and the first next header.
fn chain(b: &mut Bytes, src: Ipv6Addr, dst: Ipv6Addr, fill: bool) -> (u8, Vec<u8>) {
    let n = usize::from(b.u8() % 13);
    let mut kinds: Vec<u8> = (0..n).map(|_| NEXT[usize::from(b.u8()) % NEXT.len()]).collect();
    // The upper layer, if the chain did not end in one.
    if !matches!(kinds.last(), Some(6 | 17 | 58 | 59 | 50 | 0xfd)) {
        kinds.push([6, 17, 58][usize::from(b.u8() % 3)]);
    }
    let mut out = Vec::new();
    for (i, &k) in kinds.iter().enumerate() {
        let next = kinds.get(i + 1).copied().unwrap_or(59);
        match k {
            // Hop-by-hop, destination options, routing: 8-byte units.
            0 | 60 | 43 => {
                let units = usize::from(b.u8() % 4);
                let mut h = vec![next, units as u8];
                if k == 43 {
                    h.push(b.u8() % 5); // routing type (0 is dropped, RFC 5095)
                    h.push(b.u8() % 3); // segments left
                }
                h.extend(b.take(8 + units * 8 - h.len()));
                out.extend(h);
            }
            44 => {
                let off = b.u16() & 0xfff9; // offset and M, reserved bits clear
                out.extend([next, 0]);
                out.extend(off.to_be_bytes());
                out.extend(b.take(4));
            }
            // AH: length in 4-byte units minus 2.
            51 => {
                let len = 1 + usize::from(b.u8() % 4);
                out.extend([next, len as u8]);
                out.extend(b.take((len + 2) * 4 - 2));
            }
            6 => {
                let mut t = vec![0u8; 20];
                t[0..2].copy_from_slice(&PORTS[usize::from(b.u8()) % PORTS.len()].to_be_bytes());
                t[2..4].copy_from_slice(&PORTS[usize::from(b.u8()) % PORTS.len()].to_be_bytes());
                t[4..12].copy_from_slice(&b.take(8));
                t[12] = 5 << 4;
                let f = b.u8();
                t[13] = [0x02, 0x12, 0x10, 0x11, 0x04, 0x18, f][usize::from(f) % 7];
                t[14..16].copy_from_slice(&8192u16.to_be_bytes());
                t.extend(b.rest());
                if fill {
                    let c = !checksum::fold(checksum::sum(icmpv6::pseudo_header(src, dst, t.len(), 6), &t));
                    t[16..18].copy_from_slice(&c.to_be_bytes());
                }
                out.extend(t);
            }
            17 => {
                let mut u = vec![0u8; 8];
                u[0..2].copy_from_slice(&b.u16().to_be_bytes());
                u[2..4].copy_from_slice(&PORTS[usize::from(b.u8()) % PORTS.len()].to_be_bytes());
                u.extend(b.rest());
                let len = u.len() as u16;
                u[4..6].copy_from_slice(&len.to_be_bytes());
                if fill {
                    let c = !checksum::fold(checksum::sum(icmpv6::pseudo_header(src, dst, u.len(), 17), &u));
                    u[6..8].copy_from_slice(&c.to_be_bytes());
                }
                out.extend(u);
            }
            58 => {
                let ty = ICMP_TYPES[usize::from(b.u8()) % ICMP_TYPES.len()];
                let mut m = vec![ty, b.u8() % 4, 0, 0];
                // Neighbour discovery mostly well formed (so that the
                // fuzzer resolves neighbours and reaches forwarding): a
                // solicitation for one of ours or another target, an
                // advertisement of the sender's own address, each with
                // its link-layer address option.
                let v = b.u8();
                let t = addresses();
                match ty {
                    135 => {
                        m.extend([0, 0, 0, 0]);
                        m.extend([t[0], t[1], pick(v)][usize::from(v) % 3].octets());
                        m.extend([1, 1]);
                        m.extend(PEER_MAC);
                    }
                    136 => {
                        m.extend([0x60, 0, 0, 0]);
                        m.extend(if v & 1 == 0 { src } else { pick(v) }.octets());
                        m.extend([2, 1]);
                        m.extend(PEER_MAC);
                    }
                    _ => m.push(v),
                }
                m.extend(b.rest());
                if m.len() < 8 {
                    m.resize(8, 0);
                }
                if fill {
                    icmpv6::fill_checksum(src, dst, &mut m);
                }
                out.extend(m);
            }
            // ESP, no next header, an unknown protocol: the rest as is.
            _ => out.extend(b.rest()),
        }
        if matches!(k, 6 | 17 | 58 | 59 | 50 | 0xfd) {
            break;
        }
    }
    (kinds.first().copied().unwrap_or(59), out)
}

/// The frame of one record.
pub fn frame(ctl: u8, body: &[u8]) -> Vec<u8> {
    let port = port(ctl);
    let dst_mac = if ctl & 0x80 != 0 {
        icmpv6::multicast_mac(icmpv6::solicited_node(addresses()[usize::from(body.first().copied().unwrap_or(0)) % 16]))
    } else {
        [IN_MAC, OUT_MAC, DMZ_MAC, PEER_MAC][usize::from(port)]
    };
    let mut f = Vec::with_capacity(64 + body.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&PEER_MAC);
    if port == 2 {
        f.extend_from_slice(&[0x81, 0x00, 0, 10]);
    }
    f.extend_from_slice(&[0x86, 0xdd]);
    if ctl & 0x18 == 0 {
        f.extend_from_slice(body);
        return f;
    }
    let mut b = Bytes(body);
    if ctl & 0x18 == 0x18 {
        let v = b.u8();
        let host = pick(b.u8() & 0x7f);
        let ours = addresses()[usize::from(port == 1)];
        let mut m = [0u8; 32];
        let (dst, n) = if v & 1 == 0 {
            let group = icmpv6::solicited_node(ours);
            (group, icmpv6::emit_ns(&mut m, host, group, ours, PEER_MAC))
        } else {
            let flags = icmpv6::NA_SOLICITED | icmpv6::NA_OVERRIDE;
            (ours, icmpv6::emit_na(&mut m, host, ours, host, PEER_MAC, flags))
        };
        let m = m.get(..n.unwrap_or(0)).unwrap_or(&[]);
        f[0..6].copy_from_slice(&icmpv6::multicast_mac(dst));
        f.extend_from_slice(&[0x60, 0, 0, 0]);
        f.extend_from_slice(&(m.len() as u16).to_be_bytes());
        f.extend_from_slice(&[58, 255]);
        f.extend_from_slice(&host.octets());
        f.extend_from_slice(&dst.octets());
        f.extend_from_slice(m);
        return f;
    }
    let src = pick(b.u8());
    let dst = pick(b.u8());
    let hop_limit = [64, 255, 255, 1, 64, 0, 64, 2][usize::from(b.u8() % 8)];
    let flow = b.u16();
    let bad_len = b.u16();
    let (nh, payload) = chain(&mut b, src, dst, ctl & 0x40 == 0);
    let len = if ctl & 0x20 != 0 { bad_len } else { payload.len() as u16 };
    f.extend_from_slice(&[0x60, 0, (flow >> 8) as u8, flow as u8]);
    f.extend_from_slice(&len.to_be_bytes());
    f.extend_from_slice(&[nh, hop_limit]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&payload);
    f
}

fn check_generated(_: PortId, g: &[u8]) {
    assert!(g.len() >= 54, "a generated frame of {} bytes", g.len());
    assert_eq!(g.get(12..14), Some(&[0x86, 0xdd][..]), "only IPv6 comes in, only IPv6 goes out");
}

/// Run one input (see the module essay) through a fresh pipeline and check
/// it. Panics on a broken invariant (the fuzzer's and proptest's failure).
pub fn run(data: &[u8]) {
    let mut p = pipeline();
    let mut rest = data;
    let mut n = 0u64;
    let (mut forward, mut consumed) = (0u64, 0u64);
    let mut drops = vec![0u64; DropReason::COUNT];
    let mut buf = VecBuf::new(&[]);
    while let [ctl, len, tail @ ..] = rest {
        let len = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(len);
        rest = next;
        let f = frame(*ctl, body);
        buf.reset(&f, 64);
        let now = Timestamp::from_millis(n * 250);
        match p.process(now, PortId(port(*ctl)), &mut buf) {
            Verdict::Forward(_) => {
                assert!(buf.data().len() >= 14, "a forwarded frame keeps its Ethernet header");
                forward += 1;
            }
            Verdict::Consumed => consumed += 1,
            Verdict::Drop(r) => drops[r.index()] += 1,
            Verdict::Handoff(w) => panic!("one worker handed a frame to {w:?}"),
        }
        p.drain_generated(check_generated);
        n += 1;
        if n.is_multiple_of(16) {
            p.poll_timers(now);
            p.drain_generated(check_generated);
        }
    }
    let c = p.counters();
    assert_eq!(c.packets, n);
    assert_eq!(c.packets, c.forwarded + c.consumed + c.arp_replies + c.icmp_echo_replies + c.dropped(), "{c:?}");
    assert_eq!((forward, consumed), (c.emitted(), c.consumed));
    assert_eq!(&drops[..], &c.drops[..], "drops by reason: verdicts against counters");
}
