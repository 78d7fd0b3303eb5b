//! A steady-state loop over the benchmark's established flows, for
//! profilers: `perf record` or
//! `valgrind --tool=callgrind --toggle-collect='*hot_loop*'`, so that only
//! the forwarding of established flows is counted (not the handshakes).
//!
//! `cargo run --release -p dataplane --example pipeline_profile -- FLOWS PACKETS [pat|general|log|limits|ipv6]`
//! (defaults 1000 and 1000000; `pat`: through PAT, `support::pipeline_pat`;
//! `general`: without NAT, the fast path off; `log`: without NAT, the flow
//! log on, as with a syslog or IPFIX exporter; `limits`: every connection
//! limit set, none reached, `support::pipeline_limited`; `ipv6`: the same
//! established TCP flows over IPv6 — `support::pipeline` plus
//! `Pipeline::set_ipv6` (inside 2001:db8:1::1/64, outside
//! 2001:db8:2::1/64, default route via 2001:db8:2::fe), both neighbours
//! learnt from their solicitations, flow i 2001:db8:1::10:(1024 + i) →
//! 2001:db8:99::(i / 60000):443, 74-byte pure ACKs); `CFW_NO_PREFETCH=1` skips
//! `Pipeline::prefetch_burst`. Prints ns/packet (wall clock, for a rough
//! look; the criterion bench is the measurement).

#[path = "../benches/support/mod.rs"]
mod support;

use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::pipeline::{Ipv6Spec, Pipeline, Route6Spec, Verdict};
use dataplane::wire::{checksum, icmpv6};
use dataplane::{PortId, Timestamp};
use support::*;
use std::hint::black_box;
use std::net::Ipv6Addr;

#[inline(never)]
fn hot_loop<const N: usize>(p: &mut Pipeline, stream: &[[u8; N]], packets: usize, prefetch: bool) -> usize {
    let t = Timestamp::from_secs(2);
    let mut bufs: Vec<VecBuf> = (0..BURST).map(|_| VecBuf::new(&stream[0])).collect();
    let mut forwarded = 0;
    let mut next = 0usize;
    for _ in 0..packets / BURST {
        for buf in bufs.iter_mut() {
            buf.reset(&stream[next], 128);
            next = if next + 1 == stream.len() { 0 } else { next + 1 };
        }
        if prefetch {
            p.prefetch_burst(bufs.iter().map(|b| b.data()));
        }
        for buf in bufs.iter_mut() {
            if matches!(black_box(p.process(t, PortId(0), buf)), Verdict::Forward(_)) {
                forwarded += 1;
            }
        }
    }
    forwarded
}

/// Ethernet + IPv6 + a 20-byte TCP header.
const FRAME6_LEN: usize = 74;
const IN6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 1);
const OUT6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 1);
const HOST6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x10);
const GW6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0xfe);

/// A TCP segment (no options, no payload) in Ethernet and IPv6, with its
/// checksum.
#[allow(clippy::too_many_arguments)]
fn tcp6(src_mac: [u8; 6], dst_mac: [u8; 6], src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, seq: u32, ack: u32, flags: u8) -> [u8; FRAME6_LEN] {
    let mut f = [0u8; FRAME6_LEN];
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    f[14] = 0x60;
    f[18..20].copy_from_slice(&20u16.to_be_bytes());
    f[20] = 6;
    f[21] = 64;
    f[22..38].copy_from_slice(&src.octets());
    f[38..54].copy_from_slice(&dst.octets());
    let t = &mut f[54..];
    t[0..2].copy_from_slice(&sport.to_be_bytes());
    t[2..4].copy_from_slice(&dport.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = 5 << 4;
    t[13] = flags;
    t[14..16].copy_from_slice(&64240u16.to_be_bytes());
    let c = !checksum::fold(checksum::sum(icmpv6::pseudo_header(src, dst, 20, 6), t));
    t[16..18].copy_from_slice(&c.to_be_bytes());
    f
}

/// `pipeline(capacity)` speaking IPv6 too, the inside host and the outside
/// gateway resolved (each solicits our address: answered and learnt).
fn pipeline6(capacity: usize) -> Pipeline {
    let mut p = pipeline(capacity);
    p.set_ipv6(&Ipv6Spec {
        addresses: vec![("inside".into(), IN6, 64), ("outside".into(), OUT6, 64)],
        routes: vec![Route6Spec { destination: Ipv6Addr::UNSPECIFIED, prefix_len: 0, via: GW6 }],
    })
    .unwrap();
    for (port, ip, mac, ours) in [(0u16, HOST6, HOST_MAC, IN6), (1, GW6, GW_MAC, OUT6)] {
        let group = icmpv6::solicited_node(ours);
        let mut f = vec![0u8; 54 + 32];
        f[0..6].copy_from_slice(&icmpv6::multicast_mac(group));
        f[6..12].copy_from_slice(&mac);
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[14] = 0x60;
        f[18..20].copy_from_slice(&32u16.to_be_bytes());
        f[20] = 58;
        f[21] = 255;
        f[22..38].copy_from_slice(&ip.octets());
        f[38..54].copy_from_slice(&group.octets());
        icmpv6::emit_ns(&mut f[54..], ip, group, ours, mac).unwrap();
        let v = p.process(Timestamp::from_secs(1), PortId(port), &mut VecBuf::new(&f));
        assert!(matches!(v, Verdict::Forward(_)), "solicitation from {ip}: {v:?}");
    }
    p.drain_generated(|_, _| {});
    p
}

/// Flow i over IPv6: the host's port 1024 + i % 60000 to
/// 2001:db8:99::(i / 60000), port 443.
fn flow6(i: usize) -> (u16, Ipv6Addr) {
    (1024 + (i % 60_000) as u16, Ipv6Addr::new(0x2001, 0xdb8, 0x99, 0, 0, 0, 0, (i / 60_000) as u16))
}

/// Open `n` IPv6 flows (full handshakes); one established ACK per flow.
fn established6(p: &mut Pipeline, n: usize) -> Vec<[u8; FRAME6_LEN]> {
    let t = Timestamp::from_secs(1);
    let mut frames = Vec::with_capacity(n);
    for i in 0..n {
        let (sport, dst) = flow6(i);
        for (port, f) in [
            (0, tcp6(HOST_MAC, IN_MAC, HOST6, dst, sport, 443, 1000, 0, SYN)),
            (1, tcp6(GW_MAC, OUT_MAC, dst, HOST6, 443, sport, 9000, 1001, SYN | ACK)),
            (0, tcp6(HOST_MAC, IN_MAC, HOST6, dst, sport, 443, 1001, 9001, ACK)),
        ] {
            let v = p.process(t, PortId(port), &mut VecBuf::new(&f));
            assert!(matches!(v, Verdict::Forward(_)), "handshake of IPv6 flow {i}: {v:?}");
        }
        frames.push(tcp6(HOST_MAC, IN_MAC, HOST6, dst, sport, 443, 1001, 9001, ACK));
    }
    assert_eq!(p.flow_count(), n);
    frames
}

fn main() {
    let mut args = std::env::args().skip(1);
    let flows: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1000);
    let packets: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let mode = args.next().unwrap_or_default();
    let prefetch = std::env::var_os("CFW_NO_PREFETCH").is_none();
    if mode == "ipv6" {
        let mut p = pipeline6(flows + flows / 4);
        let frames = established6(&mut p, flows);
        let stream: Vec<[u8; FRAME6_LEN]> = shuffled(frames.len()).into_iter().map(|i| frames[i as usize]).collect();
        let start = std::time::Instant::now();
        let fwd = hot_loop(&mut p, &stream, packets, prefetch);
        let ns = start.elapsed().as_nanos() as f64 / packets as f64;
        println!("ipv6 flows {flows} packets {packets} forwarded {fwd}: {ns:.1} ns/packet ({:.2} Mpps)", 1e3 / ns);
        assert_eq!(fwd, packets / BURST * BURST, "every IPv6 packet forwarded");
        return;
    }
    let mut p = match mode.as_str() {
        "pat" => pipeline_pat(flows + flows / 4),
        "limits" => pipeline_limited(flows + flows / 4),
        _ => pipeline(flows + flows / 4),
    };
    if mode == "general" {
        p.set_fast_path(false);
    }
    // The flow log on (an exporter configured): established packets make
    // no records, so this must cost them nothing.
    if mode == "log" {
        p.log_flows(Some(dataplane::Duration::from_secs(60)));
    }
    let frames = established(&mut p, flows);
    let stream = arrival_stream(&frames);
    let start = std::time::Instant::now();
    let fwd = hot_loop(&mut p, &stream, packets, prefetch);
    let ns = start.elapsed().as_nanos() as f64 / packets as f64;
    println!("flows {flows} packets {packets} forwarded {fwd}: {ns:.1} ns/packet ({:.2} Mpps)", 1e3 / ns);
}
