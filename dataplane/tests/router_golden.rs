//! Router duties (issue 11, SPEC B5): per-interface MTU, egress
//! fragmentation, "fragmentation needed" for DF datagrams, the datagrams a
//! port hands over reassembled split back on ingress, every ICMP error kind
//! with its exact bytes, the never-send rules and the rate limit; and a
//! property: any frame through a pipeline whose egress MTU is smaller never
//! panics and never leaves in a frame larger than that MTU.
//!
//! The expected fragments are cut here by a second, plain implementation
//! of RFC 791 (`cut`), not by the code under test.

mod common;

use common::*;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::pipeline::{IcmpErrorConfig, Pipeline, PipelineConfig, Verdict};
use dataplane::wire::build::PacketBuilder;
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::{DropReason, PortId, Timestamp};
use proptest::prelude::*;
use std::net::Ipv4Addr;

const OUT_MTU: u16 = 1400;

/// The example interfaces, the outside link's MTU lowered to `OUT_MTU`,
/// neighbours static (no ARP on the way).
fn cfg_small_outside() -> PipelineConfig {
    let mut c = config();
    c.interfaces[1].mtu = OUT_MTU;
    c.static_neighbors = vec![(HOST, HOST_MAC), (GW, GW_MAC), (DMZ_HOST, DMZ_HOST_MAC)];
    c
}

fn send(p: &mut Pipeline, t: Timestamp, port: PortId, frame: &[u8]) -> (Verdict, Vec<u8>, Vec<(PortId, Vec<u8>)>) {
    let mut b = VecBuf::new(frame);
    let v = p.process(t, port, &mut b);
    let mut gen = Vec::new();
    p.drain_generated(|port, f| gen.push((port, f.to_vec())));
    (v, b.data().to_vec(), gen)
}

/// RFC 791 fragmentation of an option-less, untagged frame's datagram into
/// fragments of at most `mtu` bytes (the test's own implementation).
fn cut(frame: &[u8], mtu: usize) -> Vec<Vec<u8>> {
    let ip = Ipv4Packet::new_checked(&frame[14..]).unwrap();
    assert_eq!(ip.header_len(), 20);
    let payload = ip.payload().to_vec();
    let chunk = (mtu - 20) / 8 * 8;
    let mut out = Vec::new();
    let mut off = 0;
    while off < payload.len() {
        let end = (off + chunk).min(payload.len());
        let mut f = frame[..34].to_vec();
        f.extend_from_slice(&payload[off..end]);
        let mut h = Ipv4Packet::new_unchecked(&mut f[14..]);
        h.set_total_len((20 + end - off) as u16);
        h.set_flags_frag(if end < payload.len() { dataplane::wire::ipv4::FLAG_MF } else { 0 }, off as u16);
        h.fill_checksum();
        out.push(f);
        off = end;
    }
    out
}

fn no_df(b: PacketBuilder) -> PacketBuilder {
    PacketBuilder { dont_frag: false, ..b }
}

fn bytes(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7) as u8).collect()
}

#[test]
fn df_too_big_gets_fragmentation_needed_with_the_egress_mtu() {
    let mut p = Pipeline::new(cfg_small_outside()).unwrap();
    let t = Timestamp::from_secs(1);
    // 1500 bytes of IPv4 with DF (Linux's default): too big for 1400.
    let big = from_host(SERVER).udp(5000, 9000, &bytes(1472));
    let (v, out, gen) = send(&mut p, t, IN_PORT, &big);
    assert_eq!(v, Verdict::Drop(DropReason::FragNeeded));
    assert_eq!(out, big, "dropped unchanged");
    let want = icmp_error_frame(&big, IN_MAC, IN_ADDR, HOST_MAC, 3, 4, OUT_MTU);
    assert_eq!(gen, vec![(IN_PORT, want.clone())]);
    // The error quotes the first 548 bytes: 576 in all.
    assert_eq!(want.len(), 14 + 576);
    let c = p.counters();
    assert_eq!((c.icmp_errors.frag_needed, c.drop_count(DropReason::FragNeeded)), (1, 1));
    // Exactly the MTU passes whole; one byte less than too big too.
    let fits = from_host(SERVER).udp(5000, 9000, &bytes(1372));
    let (v, out, gen) = send(&mut p, t, IN_PORT, &fits);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    assert_eq!(out, PacketBuilder::new(OUT_MAC, GW_MAC, HOST, SERVER).ttl(63).udp(5000, 9000, &bytes(1372)));
    assert!(gen.is_empty());
}

#[test]
fn without_df_it_is_fragmented_for_the_egress() {
    // A jumbo inside: a 3028-byte datagram arrives whole.
    let mut c = cfg_small_outside();
    c.interfaces[0].mtu = 9000;
    let mut p = Pipeline::new(c).unwrap();
    let t = Timestamp::from_secs(1);
    let data = bytes(3000);
    let dgram = no_df(from_host(SERVER)).udp(5000, 9000, &data);
    let (v, first, gen) = send(&mut p, t, IN_PORT, &dgram);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    // What leaves: the routed datagram (TTL 63, our MACs) cut for 1400.
    let routed = no_df(PacketBuilder::new(OUT_MAC, GW_MAC, HOST, SERVER).ttl(63)).udp(5000, 9000, &data);
    let want = cut(&routed, usize::from(OUT_MTU));
    assert_eq!(want.len(), 3);
    assert_eq!(first, want[0], "the first fragment leaves in the buffer");
    let rest: Vec<_> = gen.into_iter().map(|(port, f)| (port, f)).collect();
    assert_eq!(rest, vec![(OUT_PORT, want[1].clone()), (OUT_PORT, want[2].clone())]);
    for f in &want {
        assert!(f.len() - 14 <= usize::from(OUT_MTU));
    }
    let c = p.counters();
    assert_eq!((c.fragmented, c.fragments_out, c.forwarded), (1, 3, 1));
    assert_eq!(c.ports[1].tx_packets, 3, "every fragment counted out");
}

#[test]
fn a_datagram_a_port_reassembled_is_split_back_and_each_piece_decided() {
    let mut c = config();
    c.static_neighbors = vec![(HOST, HOST_MAC), (GW, GW_MAC)];
    let mut p = Pipeline::new(c).unwrap();
    let t = Timestamp::from_secs(1);
    // 8000 bytes of UDP in one 8042-byte frame on a 1500-MTU port, as
    // af_packet delivers a datagram the kernel reassembled.
    let data = bytes(8000);
    let dgram = no_df(from_host(SERVER)).udp(5000, 9000, &data);
    let (v, first, gen) = send(&mut p, t, IN_PORT, &dgram);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    let routed = no_df(PacketBuilder::new(OUT_MAC, GW_MAC, HOST, SERVER).ttl(63)).udp(5000, 9000, &data);
    let want = cut(&routed, 1500);
    assert_eq!(want.len(), 6);
    assert_eq!(first, want[0]);
    let got: Vec<_> = gen.iter().map(|(port, f)| (*port, f.clone())).collect();
    let rest: Vec<_> = want[1..].iter().map(|f| (OUT_PORT, f.clone())).collect();
    assert_eq!(got, rest);
    let f = p.frag_counters();
    assert_eq!((f.split_datagrams, f.split_fragments, f.released), (1, 6, 5));
    assert_eq!(p.counters().flows_created, 1, "one flow for the datagram");
    // DF set, or already a fragment, and over the ingress MTU: nothing sane
    // sends it.
    let df = from_host(SERVER).udp(5000, 9000, &data);
    assert_eq!(send(&mut p, t, IN_PORT, &df).0, Verdict::Drop(DropReason::Ipv4OverMtu));
    let mut frag = dgram.clone();
    Ipv4Packet::new_unchecked(&mut frag[14..]).set_flags_frag(dataplane::wire::ipv4::FLAG_MF, 0);
    Ipv4Packet::new_unchecked(&mut frag[14..]).fill_checksum();
    assert_eq!(send(&mut p, t, IN_PORT, &frag).0, Verdict::Drop(DropReason::Ipv4OverMtu));
}

#[test]
fn protocol_unreachable_and_never_send_cases() {
    let mut p = Pipeline::new(cfg_small_outside()).unwrap();
    let t = Timestamp::from_secs(1);
    // GRE to our address: protocol unreachable.
    let gre = from_host(IN_ADDR).ip(47, &[0, 0, 0x08, 0x00]);
    let (v, _, gen) = send(&mut p, t, IN_PORT, &gre);
    assert_eq!(v, Verdict::Drop(DropReason::LocalUnhandled));
    assert_eq!(gen, vec![(IN_PORT, icmp_error_frame(&gre, IN_MAC, IN_ADDR, HOST_MAC, 3, 2, 0))]);
    // TCP to our address: no service, nothing sent.
    let syn = from_host(IN_ADDR).tcp(40000, 22, 1, 0, SYN, 1024, &[], b"");
    assert!(send(&mut p, t, IN_PORT, &syn).2.is_empty());
    // An ICMP error whose TTL runs out: never an error about an error.
    let quoting = from_host(SERVER).tcp(40000, 80, 1, 0, SYN, 1024, &[], b"");
    let err = from_host(SERVER).ttl(1).icmp(3, 3, (0, 0), &quoting[14..]);
    let (v, _, gen) = send(&mut p, t, IN_PORT, &err);
    assert_eq!(v, Verdict::Drop(DropReason::TtlExceeded));
    assert!(gen.is_empty());
    // An echo request whose TTL runs out is a query: answered.
    let ping = from_host(SERVER).ttl(1).icmp(8, 0, (7, 1), b"traceroute -I");
    let (_, _, gen) = send(&mut p, t, IN_PORT, &ping);
    assert_eq!(gen, vec![(IN_PORT, icmp_error_frame(&ping, IN_MAC, IN_ADDR, HOST_MAC, 11, 0, 0))]);
    // A later fragment whose TTL runs out: never.
    let mut later = no_df(from_host(SERVER).ttl(1)).udp(1, 2, b"x");
    Ipv4Packet::new_unchecked(&mut later[14..]).set_flags_frag(0, 1480);
    Ipv4Packet::new_unchecked(&mut later[14..]).fill_checksum();
    let (v, _, gen) = send(&mut p, t, IN_PORT, &later);
    assert_eq!(v, Verdict::Drop(DropReason::TtlExceeded));
    assert!(gen.is_empty());
    let c = p.counters().icmp_errors;
    assert_eq!((c.protocol_unreachable, c.time_exceeded, c.not_sent, c.sent()), (1, 1, 2, 2));
}

#[test]
fn bad_input_on_the_new_paths_is_counted_and_earns_no_error() {
    let mut p = Pipeline::new(cfg_small_outside()).unwrap();
    let t = Timestamp::from_secs(1);
    // A datagram a port reassembled and cut at its ring frame (af_packet
    // with frames smaller than the datagram): the total length says more
    // than the frame holds.
    let whole = no_df(from_host(SERVER)).udp(5000, 9000, &bytes(20_000));
    let cut = &whole[..16352];
    let (v, out, gen) = send(&mut p, t, IN_PORT, cut);
    assert_eq!((v, out.as_slice()), (Verdict::Drop(DropReason::Ipv4BadTotalLen), cut));
    assert!(gen.is_empty());
    // ICMP errors in transit quoting a truncated header, or no flow.
    let syn = from_host(SERVER).tcp(40000, 80, 1, 0, SYN, 1024, &[], b"");
    let short = from_outside(Ipv4Addr::new(192, 0, 2, 9), HOST).icmp(3, 4, (0, 1280), &syn[14..14 + 24]);
    assert_eq!(send(&mut p, t, OUT_PORT, &short).0, Verdict::Drop(DropReason::L4Truncated));
    let stray = from_outside(Ipv4Addr::new(192, 0, 2, 9), HOST).icmp(3, 4, (0, 1280), &syn[14..]);
    let (v, _, gen) = send(&mut p, t, OUT_PORT, &stray);
    assert_eq!(v, Verdict::Drop(DropReason::NoFlow));
    assert!(gen.is_empty(), "no error about an error");
    let c = p.counters();
    assert_eq!(c.icmp_errors.sent(), 0);
    assert_eq!(c.packets, c.emitted() + c.consumed + c.dropped());
}

#[test]
fn administratively_prohibited_only_when_configured() {
    let telnet = from_outside(Ipv4Addr::new(192, 0, 2, 7), HOST).tcp(40000, 23, 1, 0, SYN, 1024, &[], b"");
    for admin in [false, true] {
        let mut c = cfg_small_outside();
        c.icmp_errors = IcmpErrorConfig { admin_prohibited: admin, ..IcmpErrorConfig::default() };
        let mut p = Pipeline::new(c).unwrap();
        let (v, _, gen) = send(&mut p, Timestamp::from_secs(1), OUT_PORT, &telnet);
        assert_eq!(v, Verdict::Drop(DropReason::AclDenied));
        if admin {
            assert_eq!(gen, vec![(OUT_PORT, icmp_error_frame(&telnet, OUT_MAC, OUT_ADDR, GW_MAC, 3, 13, 0))]);
        } else {
            assert!(gen.is_empty(), "a denial is silent by default");
        }
    }
}

#[test]
fn an_error_storm_is_held_to_the_rate() {
    let mut c = cfg_small_outside();
    c.icmp_errors = IcmpErrorConfig { rate: 10, burst: 5, admin_prohibited: false };
    let mut p = Pipeline::new(c).unwrap();
    let expired = from_host(SERVER).ttl(1).udp(1, 2, b"trace");
    let mut sent = 0;
    // 1000 expired datagrams in one second: a burst of 5, then 10 a second.
    for i in 0..1000u64 {
        let (_, _, gen) = send(&mut p, Timestamp(1_000_000_000 + i * 1_000_000), IN_PORT, &expired);
        sent += gen.len();
    }
    assert_eq!(sent, 5 + 9, "5 at once, then one per 100 ms for 999 ms");
    let e = p.counters().icmp_errors;
    assert_eq!((e.time_exceeded, e.suppressed), (14, 986));
}

#[test]
fn jumbo_interfaces_forward_9000_byte_frames_whole() {
    let mut c = config();
    for i in &mut c.interfaces {
        i.mtu = 9000;
    }
    c.static_neighbors = vec![(HOST, HOST_MAC), (GW, GW_MAC)];
    let mut p = Pipeline::new(c).unwrap();
    let t = Timestamp::from_secs(1);
    // A TCP connection: handshake, then a full 9000-byte segment each way.
    let syn = from_host(SERVER).tcp(40000, 80, 1000, 0, SYN, 64240, &SYN_OPTS, b"");
    assert_eq!(send(&mut p, t, IN_PORT, &syn).0, Verdict::Forward(OUT_PORT));
    let synack = from_outside(SERVER, HOST).tcp(80, 40000, 5000, 1001, SYN | ACK, 65535, &SYN_OPTS, b"");
    assert_eq!(send(&mut p, t, OUT_PORT, &synack).0, Verdict::Forward(IN_PORT));
    let data = from_outside(SERVER, HOST).tcp(80, 40000, 5001, 1001, ACK, 65535, &[], &bytes(8960));
    assert_eq!(data.len(), 14 + 9000);
    let (v, out, gen) = send(&mut p, t, OUT_PORT, &data);
    assert_eq!(v, Verdict::Forward(IN_PORT));
    assert_eq!(out.len(), 14 + 9000, "whole");
    assert!(gen.is_empty());
    assert_eq!(p.counters().fragmented, 0);
    // 9001 bytes would not be.
    let over = no_df(from_host(SERVER)).udp(1, 2, &bytes(8974));
    assert_eq!(send(&mut p, t, IN_PORT, &over).2.len(), 1, "split: one more fragment");
}

proptest! {
    /// Random datagrams (sizes, DF, TTL, protocols, options) through a
    /// pipeline whose outside MTU is 1400: never a panic, never a frame
    /// out of the outside port larger than 1400 bytes of IPv4, every
    /// packet accounted for.
    #[test]
    fn nothing_leaves_larger_than_the_egress_mtu(
        frames in proptest::collection::vec((0usize..9000, any::<bool>(), 0u8..4, 1u8..4, any::<u8>()), 1..20)
    ) {
        let mut p = Pipeline::new(cfg_small_outside()).unwrap();
        let t = Timestamp::from_secs(1);
        for (len, df, ttl, kind, byte) in frames {
            let b = PacketBuilder { dont_frag: df, ..from_host(SERVER).ttl(ttl) };
            let payload = vec![byte; len];
            let f = match kind {
                1 => b.udp(5000, 53, &payload),
                2 => b.tcp(40000, 80, 1, 0, SYN, 1024, &[], &payload),
                _ => b.icmp(8, 0, (7, 1), &payload),
            };
            let mut buf = VecBuf::new(&f);
            let v = p.process(t, IN_PORT, &mut buf);
            if v == Verdict::Forward(OUT_PORT) {
                prop_assert!(buf.data().len() - 14 <= usize::from(OUT_MTU));
            }
            let mut bad = None;
            p.drain_generated(|port, g| {
                if port == OUT_PORT && g.len() - 14 > usize::from(OUT_MTU) {
                    bad = Some(g.len());
                }
            });
            prop_assert_eq!(bad, None);
        }
        let c = p.counters();
        prop_assert_eq!(c.packets, c.emitted() + c.consumed + c.dropped());
    }
}
