//! Property tests over the whole pipeline: any bytes, on any port, in any
//! order, never panic, never modify a frame they drop, and are always
//! accounted for:
//! `packets == forwarded + arp_replies + icmp_echo_replies + Σ drops`.

mod common;

use common::*;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::tcp_flags::{ACK, SYN};
use dataplane::pipeline::{Pipeline, Verdict};
use dataplane::{PortId, Timestamp};
use proptest::prelude::*;
use std::net::Ipv4Addr;

/// Valid frames of every kind the pipeline handles.
fn seeds() -> Vec<(PortId, Vec<u8>)> {
    let syn = from_host(SERVER).tcp(40000, 80, 1000, 0, SYN, 64240, &SYN_OPTS, b"");
    vec![
        (
            IN_PORT,
            arp_request(HOST_MAC, None, HOST_MAC, HOST, IN_ADDR),
        ),
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
            from_host(SERVER).tcp(
                40000,
                80,
                1001,
                5001,
                ACK,
                502,
                &[],
                b"GET / HTTP/1.0\r\n\r\n",
            ),
        ),
        (
            IN_PORT,
            from_host(IN_ADDR).icmp(8, 0, (1, 2), b"0123456789"),
        ),
        (IN_PORT, from_host(SERVER).udp(5353, 53, b"query")),
        (
            OUT_PORT,
            from_outside(Ipv4Addr::new(192, 0, 2, 1), HOST).icmp(11, 0, (0, 0), &syn[14..42]),
        ),
        (DMZ_PORT, from_dmz(SERVER).udp(999, 53, b"q")),
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
        (IN_PORT, {
            let mut f = vec![
                0x02, 0, 0, 0, 0x01, 0x01, 0x02, 0, 0, 0, 0x01, 0x0a, 0x86, 0xdd,
            ];
            f.extend_from_slice(&[0x60, 0, 0, 0, 0, 16, 0, 64]);
            f.extend_from_slice(&[0u8; 32]);
            f.extend_from_slice(&[58, 0, 1, 4, 0, 0, 0, 0, 128, 0, 0, 0, 0, 1, 0, 1]);
            f
        }),
    ]
}

fn check_one(
    p: &mut Pipeline,
    now: Timestamp,
    port: PortId,
    frame: &[u8],
) -> Result<(), TestCaseError> {
    let mut buf = VecBuf::new(frame);
    let v = p.process(now, port, &mut buf);
    if let Verdict::Drop(r) = v {
        prop_assert_eq!(buf.data(), frame, "dropped ({}) frame modified", r);
    }
    p.drain_generated(|_, f| assert!(f.len() >= 60));
    let c = p.counters();
    // Consumed: a later fragment held for its datagram (a corrupted
    // offset makes one of any seed), or a frame held for ARP.
    prop_assert_eq!(c.packets, c.emitted() + c.dropped() + c.consumed);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Arbitrary bytes on arbitrary ports.
    #[test]
    fn any_bytes(frames in proptest::collection::vec((0u16..4, proptest::collection::vec(any::<u8>(), 0..128)), 1..16)) {
        let mut p = pipeline();
        for (i, (port, f)) in frames.iter().enumerate() {
            check_one(&mut p, Timestamp::from_millis(i as u64), PortId(*port), f)?;
        }
        prop_assert_eq!(p.counters().packets, frames.len() as u64);
    }

    /// Every truncation of every seed frame, after a random corruption.
    #[test]
    fn truncated_and_corrupted(flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4)) {
        let mut p = pipeline();
        let mut n = 0u64;
        // Learn the neighbours so corrupted frames go deep into the pipeline.
        for (port, f) in seeds().iter().take(2) {
            check_one(&mut p, Timestamp::ZERO, *port, f)?;
            n += 1;
        }
        for (port, mut f) in seeds() {
            for &(i, x) in &flips {
                let at = i % f.len();
                f[at] ^= x;
            }
            for len in 0..=f.len() {
                check_one(&mut p, Timestamp::from_millis(len as u64), port, &f[..len])?;
                n += 1;
            }
        }
        prop_assert_eq!(p.counters().packets, n);
    }

    /// Plausible traffic with random TCP flags, seq/ack, hosts and ports.
    #[test]
    fn random_flows(pkts in proptest::collection::vec((0u8..3, any::<u8>(), 0u16..4, any::<u32>(), any::<u32>(), 0u64..5000), 1..64)) {
        let mut p = pipeline();
        for (port, f) in seeds().iter().take(2) {
            check_one(&mut p, Timestamp::ZERO, *port, f)?;
        }
        let mut now = 0;
        for (dir, flags, sport, seq, ack, dt) in pkts {
            now += dt;
            let (port, f) = match dir {
                0 => (IN_PORT, from_host(SERVER).tcp(40000 + sport, 80, seq, ack, flags, 1000, &[], b"x")),
                1 => (OUT_PORT, from_outside(SERVER, HOST).tcp(80, 40000 + sport, seq, ack, flags, 1000, &[], b"")),
                _ => (IN_PORT, from_host(SERVER).udp(sport, 53, b"")),
            };
            check_one(&mut p, Timestamp::from_millis(now), port, &f)?;
            if now % 7 == 0 {
                p.poll_timers(Timestamp::from_millis(now));
            }
        }
    }
}

