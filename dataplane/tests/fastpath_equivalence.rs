//! The fast path (`dataplane/src/pipeline/fast.rs`) must do exactly what the general
//! path does, or nothing. Two pipelines with the same configuration, one
//! with the fast path on and one with it off, get the same random traffic —
//! TCP connections with in- and out-of-window segments, FIN/RST, invalid
//! flags, UDP, VLAN-tagged DMZ traffic, frames with TTL 1, a bad checksum,
//! IP options, fragment bits, a wrong destination MAC or a local
//! destination, ARP that expires and is refreshed, and time jumps that
//! expire flows. After every frame the verdicts, the frames' bytes and the
//! generated frames (ARP requests) must be equal; after every step the
//! counters, the flow tables (`show conn`) and the conntrack statistics.

mod common;

use common::*;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::tcp_flags::{ACK, FIN, PSH, RST, SYN, URG};
use dataplane::pipeline::Pipeline;
use dataplane::wire::build::PacketBuilder;
use dataplane::{Duration, PortId, Timestamp};
use proptest::prelude::*;
use std::net::Ipv4Addr;

const FLOWS: usize = 6;

fn pair() -> (Pipeline, Pipeline) {
    let mut cfg = config();
    cfg.arp_timeout = Duration::from_secs(30);
    cfg.timeouts = short_timeouts();
    let fast = Pipeline::new(cfg.clone()).unwrap();
    let mut general = Pipeline::new(cfg).unwrap();
    general.set_fast_path(false);
    (fast, general)
}

/// Per-flow sequence state of the two endpoints, so that most segments
/// are in window (the model follows what was forwarded).
#[derive(Clone, Copy)]
struct FlowModel {
    client: u32,
    server: u32,
}

#[derive(Clone, Debug)]
enum Op {
    /// A TCP segment of flow `flow` (inside host → SERVER:80 + flow, or
    /// the DMZ host for flows ≥ 4), `reply` = server → client.
    Tcp { flow: usize, reply: bool, flags: u8, skew: i32, len: u8 },
    Udp { flow: usize, reply: bool },
    /// An otherwise plain inside → outside TCP ACK of flow `flow`, mangled.
    Mangled { flow: usize, how: u8 },
    /// The gateway (or the inside host) answers ARP / asks for us.
    Arp { gateway: bool },
    Tick { ms: u32 },
}

fn op() -> impl Strategy<Value = Op> {
    let flags = prop::sample::select(vec![
        SYN,
        SYN | ACK,
        ACK,
        ACK,
        ACK,
        ACK | PSH,
        ACK | PSH,
        FIN | ACK,
        RST,
        RST | ACK,
        ACK | URG,
        0,
        FIN,
        SYN | FIN,
    ]);
    let skew = prop_oneof![6 => Just(0i32), 1 => -3000i32..3000, 1 => any::<i32>()];
    prop_oneof![
        10 => (0..FLOWS, any::<bool>(), flags, skew, 0u8..=200).prop_map(|(flow, reply, flags, skew, len)| Op::Tcp { flow, reply, flags, skew, len }),
        2 => (0..FLOWS, any::<bool>()).prop_map(|(flow, reply)| Op::Udp { flow, reply }),
        2 => (0..FLOWS, 0u8..8).prop_map(|(flow, how)| Op::Mangled { flow, how }),
        1 => any::<bool>().prop_map(|gateway| Op::Arp { gateway }),
        2 => prop_oneof![0u32..2_000, 2_000u32..40_000].prop_map(|ms| Op::Tick { ms }),
    ]
}

fn server(flow: usize) -> Ipv4Addr {
    Ipv4Addr::new(93, 184, 216, 30 + flow as u8)
}

/// (client builder, server builder, client port, server port, client port id, server port id)
fn endpoints(flow: usize) -> (PacketBuilder, PacketBuilder, u16, u16, PortId, PortId) {
    let srv = server(flow);
    if flow >= 4 {
        (from_dmz(srv), from_outside(srv, DMZ_HOST), 41000 + flow as u16, 80, DMZ_PORT, OUT_PORT)
    } else {
        (from_host(srv), from_outside(srv, HOST), 40000 + flow as u16, 80, IN_PORT, OUT_PORT)
    }
}

fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in h.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn refresh_ip_checksum(f: &mut [u8]) {
    let ihl = usize::from(f[14] & 0x0f) * 4;
    f[24] = 0;
    f[25] = 0;
    let c = ipv4_checksum(&f[14..14 + ihl]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

fn mangle(mut f: Vec<u8>, how: u8) -> Vec<u8> {
    match how {
        0 => {
            f[22] = 1; // TTL 1
            refresh_ip_checksum(&mut f);
        }
        1 => f[24] ^= 0x55, // bad header checksum
        2 => {
            f[20] |= 0x20; // MF: a first fragment
            refresh_ip_checksum(&mut f);
        }
        3 => f[5] ^= 1, // not our MAC
        4 => {
            f[30..34].copy_from_slice(&OUT_ADDR.octets()); // to us
            refresh_ip_checksum(&mut f);
        }
        5 => {
            // One 4-byte option (NOP NOP NOP EOL): IHL 6.
            f.splice(34..34, [1u8, 1, 1, 0]);
            f[14] = 0x46;
            let tl = u16::from_be_bytes([f[16], f[17]]) + 4;
            f[16..18].copy_from_slice(&tl.to_be_bytes());
            refresh_ip_checksum(&mut f);
        }
        6 => {
            f[26..30].copy_from_slice(&[127, 0, 0, 1]); // martian source
            refresh_ip_checksum(&mut f);
        }
        _ => f.truncate(40), // cut inside the TCP header
    }
    f
}

fn send(a: &mut Pipeline, b: &mut Pipeline, now: Timestamp, port: PortId, frame: &[u8]) -> bool {
    let (mut fa, mut fb) = (VecBuf::new(frame), VecBuf::new(frame));
    a.prefetch_burst(std::iter::once(fa.data()));
    let va = a.process(now, port, &mut fa);
    let vb = b.process(now, port, &mut fb);
    assert_eq!(va, vb, "verdict for {frame:02x?}");
    assert_eq!(fa.data(), fb.data(), "bytes out for {frame:02x?}");
    let (mut ga, mut gb) = (Vec::new(), Vec::new());
    a.drain_generated(|p, f| ga.push((p, f.to_vec())));
    b.drain_generated(|p, f| gb.push((p, f.to_vec())));
    assert_eq!(ga, gb, "generated frames");
    matches!(va, dataplane::pipeline::Verdict::Forward(_))
}

fn compare(a: &Pipeline, b: &Pipeline, now: Timestamp) {
    // Everything but the count of fast-path packets (0 on `b`).
    let (mut sa, sb) = (a.counters(), b.counters());
    assert_eq!(sb.fast_path, 0);
    sa.fast_path = 0;
    assert_eq!(sa, sb);
    assert_eq!(a.conntrack().stats(), b.conntrack().stats());
    let (ca, cb) = (a.conns(now, 100), b.conns(now, 100));
    assert_eq!(format!("{ca:?}"), format!("{cb:?}"));
    assert_eq!(format!("{:?}", a.arp_entries(now)), format!("{:?}", b.arp_entries(now)));
}

/// Runs `ops`; returns the fast pipeline's (forwarded, fast-path) counts.
fn run(ops: &[Op]) -> (u64, u64) {
    let (mut a, mut b) = pair();
    let mut now = Timestamp::from_secs(1);
    let mut model = [FlowModel { client: 1000, server: 5000 }; FLOWS];
    // Resolve both neighbours first, as a running network would have.
    let arp_host = arp_request(HOST_MAC, None, HOST_MAC, HOST, IN_ADDR);
    let arp_gw = arp_reply(GW_MAC, OUT_MAC, None, GW, OUT_MAC, OUT_ADDR);
    let arp_dmz = arp_request(DMZ_HOST_MAC, Some(DMZ_VLAN), DMZ_HOST_MAC, DMZ_HOST, DMZ_ADDR);
    send(&mut a, &mut b, now, IN_PORT, &arp_host);
    send(&mut a, &mut b, now, OUT_PORT, &arp_gw);
    send(&mut a, &mut b, now, DMZ_PORT, &arp_dmz);
    for op in ops {
        match *op {
            Op::Tcp { flow, reply, flags, skew, len } => {
                let (cb, sb, cp, sp, cport, sport) = endpoints(flow);
                let m = &mut model[flow];
                if flags == SYN && !reply {
                    m.client = m.client.wrapping_add(100_000);
                }
                if flags == SYN | ACK && reply {
                    m.server = m.server.wrapping_add(100_000);
                }
                let payload = vec![0x61u8; usize::from(len)];
                let (seq, ack) = if reply { (m.server, m.client) } else { (m.client, m.server) };
                let seq = seq.wrapping_add(skew as u32);
                let opts: &[u8] = if flags & SYN != 0 { &SYN_OPTS } else { &[] };
                let frame = if reply {
                    sb.tcp(sp, cp, seq, ack, flags, 502, opts, &payload)
                } else {
                    cb.tcp(cp, sp, seq, ack, flags, 502, opts, &payload)
                };
                let port = if reply { sport } else { cport };
                if send(&mut a, &mut b, now, port, &frame) && skew == 0 {
                    let adv = u32::from(len) + u32::from(flags & (SYN | FIN) != 0);
                    if reply {
                        m.server = m.server.wrapping_add(adv);
                    } else {
                        m.client = m.client.wrapping_add(adv);
                    }
                }
            }
            Op::Udp { flow, reply } => {
                let (cb, sb, cp, _, cport, sport) = endpoints(flow);
                let (frame, port) = if reply {
                    (sb.udp(53, cp, b"answer"), sport)
                } else {
                    (cb.udp(cp, 53, b"query"), cport)
                };
                send(&mut a, &mut b, now, port, &frame);
            }
            Op::Mangled { flow, how } => {
                let flow = flow % 4;
                let (cb, _, cp, sp, cport, _) = endpoints(flow);
                let m = model[flow];
                let frame = mangle(cb.tcp(cp, sp, m.client, m.server, ACK, 502, &[], b""), how);
                send(&mut a, &mut b, now, cport, &frame);
            }
            Op::Arp { gateway } => {
                if gateway {
                    send(&mut a, &mut b, now, OUT_PORT, &arp_gw);
                } else {
                    send(&mut a, &mut b, now, IN_PORT, &arp_host);
                }
            }
            Op::Tick { ms } => {
                now = Timestamp(now.nanos() + u64::from(ms) * 1_000_000);
                a.poll_timers(now);
                b.poll_timers(now);
                let (mut ga, mut gb) = (Vec::new(), Vec::new());
                a.drain_generated(|p, f| ga.push((p, f.to_vec())));
                b.drain_generated(|p, f| gb.push((p, f.to_vec())));
                assert_eq!(ga, gb, "generated frames after timers");
            }
        }
        compare(&a, &b, now);
    }
    (a.counters().forwarded, a.counters().fast_path)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
    #[test]
    fn fast_path_equals_general_path(ops in prop::collection::vec(op(), 1..250)) {
        run(&ops);
    }
}

/// The equivalence above is only worth something if the fast path takes
/// traffic at all: the data segments of an established connection go
/// through it, the handshake does not.
#[test]
fn established_traffic_takes_the_fast_path() {
    let mut ops = vec![
        Op::Tcp { flow: 0, reply: false, flags: SYN, skew: 0, len: 0 },
        Op::Tcp { flow: 0, reply: true, flags: SYN | ACK, skew: 0, len: 0 },
        Op::Tcp { flow: 0, reply: false, flags: ACK, skew: 0, len: 0 },
    ];
    for _ in 0..20 {
        ops.push(Op::Tcp { flow: 0, reply: false, flags: ACK | PSH, skew: 0, len: 100 });
        ops.push(Op::Tcp { flow: 0, reply: true, flags: ACK, skew: 0, len: 0 });
    }
    // The third segment (SYN_RECV → ESTABLISHED) may take it too: the flow
    // exists and it carries no SYN.
    assert_eq!(run(&ops), (43, 41));
}
