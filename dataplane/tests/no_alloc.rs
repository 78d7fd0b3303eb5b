//! `Pipeline::process`, `drain_generated` and `poll_timers` never allocate:
//! a counting global allocator watches this thread while a mix of traffic
//! (ARP, new and established flows, replies, drops of every stage, VLAN
//! retagging, generated ARP requests, ARP cache filling up) goes through.
//! All memory is reserved by `Pipeline::new`.

mod common;
mod frag_util;

use common::*;
use dataplane::buf::VecBuf;
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::{PortId, Timestamp};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::Ipv4Addr;

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(|c| c.get())
}

#[test]
fn packet_path_does_not_allocate() {
    let mut cfg = config();
    cfg.arp_capacity = 4;
    cfg.flow_capacity = 64;
    let mut p = dataplane::pipeline::Pipeline::new(cfg).unwrap();
    let syn = from_host(SERVER).tcp(40000, 80, 1000, 0, SYN, 64240, &SYN_OPTS, b"");
    let mut frames: Vec<(PortId, Vec<u8>)> = vec![
        (
            IN_PORT,
            arp_request(HOST_MAC, None, HOST_MAC, HOST, IN_ADDR),
        ),
        (IN_PORT, syn.clone()),
        (
            OUT_PORT,
            arp_reply(GW_MAC, OUT_MAC, None, GW, OUT_MAC, OUT_ADDR),
        ),
        (IN_PORT, syn.clone()),
        (
            OUT_PORT,
            from_outside(SERVER, HOST).tcp(80, 40000, 5000, 1001, SYN | ACK, 65535, &SYN_OPTS, b""),
        ),
        (
            IN_PORT,
            from_host(SERVER).tcp(40000, 80, 1001, 5001, ACK, 502, &[], b"data"),
        ),
        (IN_PORT, from_host(IN_ADDR).icmp(8, 0, (1, 1), b"ping")),
        (
            OUT_PORT,
            from_outside(SERVER, HOST).tcp(1, 2, 3, 4, ACK, 5, &[], b""),
        ),
        (
            DMZ_PORT,
            arp_request(
                DMZ_HOST_MAC,
                Some(DMZ_VLAN),
                DMZ_HOST_MAC,
                DMZ_HOST,
                DMZ_ADDR,
            ),
        ),
        (IN_PORT, from_host(DMZ_HOST).udp(1, 2, b"tag me")),
        (DMZ_PORT, from_dmz(SERVER).udp(3, 53, b"untag me")),
        (IN_PORT, vec![0; 20]),
        (IN_PORT, from_host(SERVER).ttl(1).udp(1, 2, b"")),
    ];
    // Fragments: a datagram in reverse (held, then released through
    // drain_generated), an unsolicited one (denied), an overlap, an
    // oversize one, and one left to time out in poll_timers.
    let dg = |ident, b: dataplane::wire::build::PacketBuilder| {
        dataplane::wire::build::PacketBuilder { dont_frag: false, ident, ..b }
    };
    let out_udp = dg(0x0a0a, from_host(SERVER)).udp(40100, 5000, &[4u8; 200]);
    frames.extend(frag_util::fragments(&out_udp, 64).into_iter().rev().map(|f| (IN_PORT, f)));
    let in_udp = dg(0x0b0b, from_outside(SERVER, HOST)).udp(5000, 40101, &[5u8; 200]);
    frames.extend(frag_util::fragments(&in_udp, 64).into_iter().rev().map(|f| (OUT_PORT, f)));
    frames.push((IN_PORT, frag_util::raw_fragment(&out_udp, 24, 24, true)));
    frames.push((IN_PORT, frag_util::raw_fragment(&out_udp, 16, 24, true)));
    frames.push((IN_PORT, frag_util::raw_fragment(&out_udp, 65528, 16, false)));
    frames.push((IN_PORT, frag_util::raw_fragment(&dg(0x0c0c, from_host(SERVER)).udp(1, 2, &[0; 64]), 64, 8, false)));
    // Many unresolved next hops: fills the ARP cache and the generated queue.
    for i in 0..80u8 {
        frames.push((
            IN_PORT,
            from_host(Ipv4Addr::new(198, 18, 2, 10 + i)).udp(1, 2, b""),
        ));
    }
    let mut bufs: Vec<VecBuf> = frames.iter().map(|(_, f)| VecBuf::new(f)).collect();
    let mut seen = 0usize;
    let before = allocs();
    for (i, ((port, _), buf)) in frames.iter().zip(bufs.iter_mut()).enumerate() {
        p.process(Timestamp::from_millis(i as u64), *port, buf);
    }
    p.drain_generated(|_, f| seen += f.len());
    p.poll_timers(Timestamp::from_secs(3600));
    let after = allocs();
    assert_eq!(after - before, 0, "allocations on the packet path");
    assert!(seen > 0);
    let c = p.counters();
    assert!(c.forwarded >= 4 && c.arp_replies == 2 && c.icmp_echo_replies == 1);
    assert!(c.drop_count(dataplane::DropReason::ArpCacheFull) > 0);
    assert_eq!(p.frag_counters().released, 3, "the reversed datagram's held fragments");
    assert!(c.drop_count(dataplane::DropReason::AclDenied) >= 1);
    assert_eq!(c.drop_count(dataplane::DropReason::FragOverlap), 1);
    assert_eq!(c.drop_count(dataplane::DropReason::FragTooBig), 1);
    assert_eq!(p.reasm_counters().dropped(dataplane::DropReason::FragTimeout), 1);
    // Control: the counter does see allocations on this thread.
    let b = allocs();
    let v = std::hint::black_box(vec![0u8; 16]);
    assert!(allocs() > b && v.len() == 16);
}

/// Router duties (issue 11): egress fragmentation, "fragmentation needed",
/// a datagram a port reassembled split back, ICMP errors of every kind and
/// the rate limit, allocate nothing.
#[test]
fn router_duties_do_not_allocate() {
    let mut cfg = config();
    cfg.interfaces[0].mtu = 9000;
    cfg.interfaces[1].mtu = 1400;
    cfg.interfaces[2].mtu = 1500;
    cfg.static_neighbors = vec![(HOST, HOST_MAC), (GW, GW_MAC), (DMZ_HOST, DMZ_HOST_MAC)];
    cfg.icmp_errors.rate = 10;
    cfg.icmp_errors.burst = 4;
    let mut p = dataplane::pipeline::Pipeline::new(cfg).unwrap();
    let nodf = |b: dataplane::wire::build::PacketBuilder| dataplane::wire::build::PacketBuilder { dont_frag: false, ..b };
    let mut frames: Vec<(PortId, Vec<u8>)> = vec![
        (IN_PORT, nodf(from_host(SERVER)).udp(5000, 53, &[1u8; 7000])),
        (IN_PORT, from_host(SERVER).udp(5000, 53, &[2u8; 3000])),
        (DMZ_PORT, nodf(from_dmz(SERVER)).udp(6000, 53, &[3u8; 4000])),
        (IN_PORT, from_host(IN_ADDR).udp(1000, 161, b"snmp")),
        (IN_PORT, from_host(IN_ADDR).ip(47, &[0, 0, 8, 0])),
    ];
    for _ in 0..20 {
        frames.push((IN_PORT, from_host(SERVER).ttl(1).udp(1, 2, b"trace")));
    }
    let mut bufs: Vec<VecBuf> = frames.iter().map(|(_, f)| VecBuf::new(f)).collect();
    let mut seen = 0usize;
    let before = allocs();
    for ((port, _), buf) in frames.iter().zip(bufs.iter_mut()) {
        p.process(Timestamp::from_secs(1), *port, buf);
    }
    p.drain_generated(|_, f| seen += f.len());
    p.poll_timers(Timestamp::from_secs(3600));
    let after = allocs();
    assert_eq!(after - before, 0, "allocations on the packet path");
    let c = p.counters();
    // The 7028-byte datagram, and two of the DMZ datagram's 1500-byte
    // pieces, split for the 1400-byte outside.
    assert_eq!(c.fragmented, 3);
    assert_eq!(p.frag_counters().split_datagrams, 1, "the DMZ datagram over its MTU split back");
    assert_eq!((c.icmp_errors.frag_needed, c.icmp_errors.port_unreachable, c.icmp_errors.protocol_unreachable), (1, 1, 1));
    assert_eq!((c.icmp_errors.time_exceeded, c.icmp_errors.suppressed), (1, 19), "the bucket held 4");
    assert!(seen > 0);
}
