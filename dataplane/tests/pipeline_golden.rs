//! Golden packet table for `Pipeline::process` (STYLE.md point 9).
//!
//! The rows run in order against one pipeline (state carries over: the ARP
//! cache learns, flows open). Each row states the input frame, the ingress
//! port, the verdict, the expected output bytes (a dropped frame must come
//! back unchanged), the frames the pipeline generated, and the counter
//! deltas. Deltas are checked exactly: every counter not named must stay
//! put, except the implied ones (`packets` +1, rx on the ingress port, the
//! row's drop reason, tx on the egress port and on generated frames' ports).

mod common;

use common::*;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::tcp_flags::{ACK, RST, SYN};
use dataplane::pipeline::{Counters, Pipeline, Verdict};
use dataplane::wire::arp::Operation;
use dataplane::wire::build::{self, PacketBuilder};
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::{DropReason, PortId, Timestamp};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

enum Out {
    /// Dropped frames: must be byte-identical to the input.
    Unchanged,
    Bytes(Vec<u8>),
    Check(fn(&[u8])),
}

struct Row {
    desc: &'static str,
    port: PortId,
    frame: Vec<u8>,
    at_ms: Option<u64>,
    verdict: Verdict,
    out: Out,
    deltas: Vec<(&'static str, u64)>,
    generated: Vec<(PortId, Vec<u8>)>,
}

fn row(desc: &'static str, port: PortId, frame: Vec<u8>, verdict: Verdict) -> Row {
    Row {
        desc,
        port,
        frame,
        at_ms: None,
        verdict,
        out: Out::Unchanged,
        deltas: vec![],
        generated: vec![],
    }
}
fn drop(desc: &'static str, port: PortId, frame: Vec<u8>, r: DropReason) -> Row {
    row(desc, port, frame, Verdict::Drop(r))
}
/// Held for an unresolved next hop (`arphold`): the buffer is the driver's
/// to free, its bytes do not matter; the frame comes out when the ARP reply
/// arrives (a later row's `generated`).
fn held(desc: &'static str, port: PortId, frame: Vec<u8>) -> Row {
    row(desc, port, frame, Verdict::Consumed).check(|_| {}).delta("arp_held", 1)
}
impl Row {
    fn bytes(mut self, b: Vec<u8>) -> Self {
        self.out = Out::Bytes(b);
        self
    }
    fn check(mut self, f: fn(&[u8])) -> Self {
        self.out = Out::Check(f);
        self
    }
    fn delta(mut self, name: &'static str, n: u64) -> Self {
        self.deltas.push((name, n));
        self
    }
    fn generated(mut self, port: PortId, b: Vec<u8>) -> Self {
        self.generated.push((port, b));
        self
    }
    fn at_ms(mut self, t: u64) -> Self {
        self.at_ms = Some(t);
        self
    }
}

/// Every counter, flattened by name.
fn flat(c: &Counters) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for (k, v) in [
        ("packets", c.packets),
        ("forwarded", c.forwarded),
        ("consumed", c.consumed),
        ("arp_replies", c.arp_replies),
        ("icmp_echo_replies", c.icmp_echo_replies),
        ("icmp_errors_forwarded", c.icmp_errors_forwarded),
        ("flows_created", c.flows_created),
        ("arp_requests", c.arp_requests),
        ("generated_dropped", c.generated_dropped),
        ("vlan_tagged", c.vlan_tagged),
        ("arp_held", c.arp_hold.held),
        ("arp_hold_released", c.arp_hold.released),
        ("arp_hold_expired", c.arp_hold.expired),
        ("arp_hold_replaced", c.arp_hold.replaced),
        ("fragmented", c.fragmented),
        ("fragments_out", c.fragments_out),
        ("icmp_time_exceeded", c.icmp_errors.time_exceeded),
        ("icmp_net_unreachable", c.icmp_errors.net_unreachable),
        ("icmp_port_unreachable", c.icmp_errors.port_unreachable),
        ("icmp_protocol_unreachable", c.icmp_errors.protocol_unreachable),
        ("icmp_frag_needed", c.icmp_errors.frag_needed),
        ("icmp_admin_prohibited", c.icmp_errors.admin_prohibited),
        ("icmp_suppressed", c.icmp_errors.suppressed),
        ("icmp_not_sent", c.icmp_errors.not_sent),
        ("icmp_no_neighbor", c.icmp_errors.no_neighbor),
        ("ipv6", c.ipv6.packets),
        ("ipv6_icmp", c.ipv6.icmpv6),
        ("rx_unknown_port", c.rx_unknown_port),
    ] {
        m.insert(k.to_string(), v);
    }
    for &r in DropReason::ALL {
        m.insert(r.as_str().to_string(), c.drop_count(r));
    }
    for (i, p) in c.ports.iter().enumerate() {
        m.insert(format!("rx:{i}"), p.rx_packets);
        m.insert(format!("tx:{i}"), p.tx_packets);
    }
    m
}

fn run(p: &mut Pipeline, rows: Vec<Row>) {
    let mut now_ms = 1_000u64;
    for r in rows {
        now_ms = r.at_ms.unwrap_or(now_ms + 1);
        let before = flat(&p.counters());
        let mut buf = VecBuf::new(&r.frame);
        let v = p.process(Timestamp::from_millis(now_ms), r.port, &mut buf);
        assert_eq!(v, r.verdict, "{}: verdict", r.desc);
        if let Out::Unchanged = r.out {
            assert!(
                matches!(r.verdict, Verdict::Drop(_)),
                "{}: forward rows state their output",
                r.desc
            );
        }
        match &r.out {
            Out::Unchanged => assert_eq!(
                buf.data(),
                &r.frame[..],
                "{}: dropped frame modified",
                r.desc
            ),
            Out::Bytes(b) => assert_eq!(hex(buf.data()), hex(b), "{}: output bytes", r.desc),
            Out::Check(f) => f(buf.data()),
        }
        let mut gen = Vec::new();
        p.drain_generated(|port, f| gen.push((port, f.to_vec())));
        assert_eq!(
            gen.len(),
            r.generated.len(),
            "{}: generated frame count",
            r.desc
        );
        for ((gp, gf), (ep, ef)) in gen.iter().zip(&r.generated) {
            assert_eq!(gp, ep, "{}: generated port", r.desc);
            assert_eq!(hex(gf), hex(ef), "{}: generated bytes", r.desc);
        }
        // Expected deltas: explicit + implied.
        let mut want: BTreeMap<String, u64> = BTreeMap::new();
        let mut add = |k: String, n: u64| *want.entry(k).or_default() += n;
        add("packets".into(), 1);
        add(format!("rx:{}", r.port.0), 1);
        match r.verdict {
            Verdict::Drop(d) => add(d.as_str().into(), 1),
            Verdict::Forward(o) => add(format!("tx:{}", o.0), 1),
            Verdict::Consumed => add("consumed".into(), 1),
            Verdict::Handoff(_) => add("handed_off".into(), 1),
        }
        for (gp, _) in &r.generated {
            add(format!("tx:{}", gp.0), 1);
        }
        for &(k, n) in &r.deltas {
            add(k.into(), n);
        }
        let after = flat(&p.counters());
        for (k, a) in &after {
            let d = a - before[k];
            assert_eq!(
                d,
                want.get(k).copied().unwrap_or(0),
                "{}: counter {k}",
                r.desc
            );
        }
        let c = p.counters();
        assert_eq!(
            c.packets,
            c.emitted() + c.consumed + c.dropped(),
            "{}: every packet accounted for",
            r.desc
        );
    }
}

fn hex(b: &[u8]) -> String {
    b.chunks(16)
        .map(|c| {
            c.iter()
                .map(|x| format!("{x:02x}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Apply `f` to the IPv4 header of `frame` (untagged) and fix the checksum.
fn patch_ip(mut frame: Vec<u8>, f: impl FnOnce(&mut Ipv4Packet<&mut [u8]>)) -> Vec<u8> {
    let mut ip = Ipv4Packet::new_unchecked(&mut frame[14..]);
    f(&mut ip);
    ip.fill_checksum();
    frame
}
/// Poke raw bytes without fixing anything.
fn poke(mut frame: Vec<u8>, at: usize, bytes: &[u8]) -> Vec<u8> {
    frame[at..at + bytes.len()].copy_from_slice(bytes);
    frame
}

/// Insert IPv4 options (a multiple of 4 bytes) into an untagged frame,
/// fixing IHL, total length and the header checksum.
fn with_ip_options(mut frame: Vec<u8>, opts: &[u8]) -> Vec<u8> {
    frame.splice(34..34, opts.iter().copied());
    let mut ip = Ipv4Packet::new_unchecked(&mut frame[14..]);
    ip.set_version_ihl(20 + opts.len());
    let tl = ip.total_len() + opts.len() as u16;
    ip.set_total_len(tl);
    ip.fill_checksum();
    frame
}

fn padded(mut v: Vec<u8>) -> Vec<u8> {
    v.resize(v.len().max(60), 0);
    v
}

/// What a routed packet looks like leaving towards the inside host.
fn to_host(src: Ipv4Addr) -> PacketBuilder {
    PacketBuilder::new(IN_MAC, HOST_MAC, src, HOST).ttl(63)
}
/// ... and leaving towards the outside gateway.
fn to_gw(src: Ipv4Addr, dst: Ipv4Addr) -> PacketBuilder {
    PacketBuilder::new(OUT_MAC, GW_MAC, src, dst).ttl(63)
}

fn fwd(p: u16) -> Verdict {
    Verdict::Forward(PortId(p))
}

const CPORT: u16 = 40000;
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;

#[test]
fn golden_table() {
    use DropReason::*;
    let mut p = pipeline();
    let syn = from_host(SERVER).tcp(CPORT, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b"");
    let syn_out = PacketBuilder::new(OUT_MAC, GW_MAC, HOST, SERVER)
        .ttl(63)
        .tcp(CPORT, 80, C_ISN, 0, SYN, 64240, &SYN_OPTS, b"");
    let synack = from_outside(SERVER, HOST).tcp(
        80,
        CPORT,
        S_ISN,
        C_ISN + 1,
        SYN | ACK,
        65535,
        &SYN_OPTS,
        b"",
    );
    let ack = from_host(SERVER).tcp(CPORT, 80, C_ISN + 1, S_ISN + 1, ACK, 502, &[], b"");
    let udp_in = from_host(SERVER).udp(5353, 53, b"query");
    let gw_arp_request = padded(build::arp(
        OUT_MAC,
        [0xff; 6],
        None,
        Operation::Request,
        OUT_MAC,
        OUT_ADDR,
        [0; 6],
        GW,
    ));
    let rows = vec![
        // ---- ARP ----
        row(
            "ARP request for our inside address → reply in place",
            IN_PORT,
            arp_request(HOST_MAC, None, HOST_MAC, HOST, IN_ADDR),
            fwd(0),
        )
        .bytes(build::arp(
            IN_MAC,
            HOST_MAC,
            None,
            Operation::Reply,
            IN_MAC,
            IN_ADDR,
            HOST_MAC,
            HOST,
        ))
        .delta("arp_replies", 1),
        drop(
            "ARP request for someone else",
            IN_PORT,
            arp_request(
                HOST_MAC,
                None,
                HOST_MAC,
                HOST,
                Ipv4Addr::new(198, 18, 1, 77),
            ),
            ArpNotForUs,
        ),
        drop(
            "ARP request for the outside address arriving inside",
            IN_PORT,
            arp_request(HOST_MAC, None, HOST_MAC, HOST, OUT_ADDR),
            ArpNotForUs,
        ),
        drop(
            "ARP with a non-IPv4 protocol type",
            IN_PORT,
            poke(
                arp_request(HOST_MAC, None, HOST_MAC, HOST, IN_ADDR),
                16,
                &[0x86, 0xdd],
            ),
            ArpMalformed,
        ),
        drop(
            "ARP truncated",
            IN_PORT,
            arp_request(HOST_MAC, None, HOST_MAC, HOST, IN_ADDR)[..40].to_vec(),
            ArpMalformed,
        ),
        drop(
            "ARP with a broadcast sender MAC",
            IN_PORT,
            arp_request(HOST_MAC, None, [0xff; 6], HOST, IN_ADDR),
            ArpMalformed,
        ),
        // ---- Ethernet ----
        drop("runt frame", IN_PORT, vec![0; 13], EthTruncated),
        drop(
            "unicast to another MAC",
            IN_PORT,
            PacketBuilder::new(HOST_MAC, [2, 9, 9, 9, 9, 9], HOST, SERVER).udp(1, 2, b""),
            EthNotForUs,
        ),
        drop(
            "transit IPv4 sent to the broadcast MAC (RFC 1812 §5.3.4)",
            IN_PORT,
            PacketBuilder::new(HOST_MAC, [0xff; 6], HOST, SERVER).udp(1, 2, b""),
            EthNotForUs,
        ),
        drop(
            "LLDP ethertype",
            IN_PORT,
            poke(from_host(SERVER).udp(1, 2, b""), 12, &[0x88, 0xcc]),
            EthUnsupportedType,
        ),
        drop(
            "port with no interface",
            PortId(7),
            from_host(SERVER).udp(1, 2, b""),
            NoInterface,
        )
        .delta("rx_unknown_port", 1),
        drop(
            "tagged frame on an untagged port",
            IN_PORT,
            from_host(SERVER).vlan(Some(5)).udp(1, 2, b""),
            NoInterface,
        )
        .delta("vlan_tagged", 1),
        drop(
            "untagged frame on the DMZ port (VLAN 10 only)",
            DMZ_PORT,
            PacketBuilder::new(DMZ_HOST_MAC, DMZ_MAC, DMZ_HOST, SERVER).udp(1, 2, b""),
            NoInterface,
        ),
        drop(
            "QinQ frame",
            DMZ_PORT,
            {
                let mut f = from_dmz(SERVER).udp(1, 2, b"");
                f.splice(12..12, [0x88, 0xa8, 0x00, 0x0a]);
                f
            },
            NoInterface,
        )
        .delta("vlan_tagged", 1),
        // ---- local ----
        row(
            "echo request to our inside address → exact reply",
            IN_PORT,
            from_host(IN_ADDR).icmp(8, 0, (0x1234, 1), b"ping-payload-0123"),
            fwd(0),
        )
        .bytes(PacketBuilder::new(IN_MAC, HOST_MAC, IN_ADDR, HOST).icmp(
            0,
            0,
            (0x1234, 1),
            b"ping-payload-0123",
        ))
        .delta("icmp_echo_replies", 1),
        drop(
            "echo request with a bad ICMP checksum",
            IN_PORT,
            poke(from_host(IN_ADDR).icmp(8, 0, (1, 1), b"x"), 36, &[0, 0]),
            IcmpBadChecksum,
        ),
        drop(
            "echo request to the outside address from inside",
            IN_PORT,
            from_host(OUT_ADDR).icmp(8, 0, (1, 1), b""),
            LocalUnhandled,
        ),
        drop(
            "UDP to our address: port unreachable",
            IN_PORT,
            from_host(IN_ADDR).udp(1000, 161, b"snmp"),
            LocalUnhandled,
        )
        .generated(IN_PORT, icmp_error_frame(&from_host(IN_ADDR).udp(1000, 161, b"snmp"), IN_MAC, IN_ADDR, HOST_MAC, 3, 3, 0))
        .delta("icmp_port_unreachable", 1),
        drop(
            "echo reply to our address",
            IN_PORT,
            from_host(IN_ADDR).icmp(0, 0, (1, 1), b""),
            LocalUnhandled,
        ),
        drop(
            "limited broadcast",
            IN_PORT,
            PacketBuilder::new(HOST_MAC, [0xff; 6], HOST, Ipv4Addr::BROADCAST).udp(68, 67, b"dhcp"),
            LocalUnhandled,
        ),
        drop(
            "subnet-directed broadcast",
            IN_PORT,
            from_host(Ipv4Addr::new(198, 18, 1, 255)).udp(137, 137, b""),
            LocalUnhandled,
        ),
        drop(
            "multicast",
            IN_PORT,
            from_host(Ipv4Addr::new(224, 0, 0, 251)).udp(5353, 5353, b""),
            LocalUnhandled,
        ),
        // ---- IPv4 validation ----
        drop(
            "IPv4 header cut at 19 bytes",
            IN_PORT,
            from_host(SERVER).udp(1, 2, b"")[..14 + 19].to_vec(),
            Ipv4Truncated,
        ),
        drop(
            "IPv4 version 5",
            IN_PORT,
            poke(from_host(SERVER).udp(1, 2, b""), 14, &[0x55]),
            Ipv4BadVersion,
        ),
        drop(
            "IPv4 IHL 4",
            IN_PORT,
            poke(from_host(SERVER).udp(1, 2, b""), 14, &[0x44]),
            Ipv4BadHeaderLen,
        ),
        drop(
            "IPv4 IHL beyond the frame",
            IN_PORT,
            from_host(SERVER).udp(1, 2, b"")[..14 + 20]
                .to_vec()
                .into_iter()
                .enumerate()
                .map(|(i, b)| if i == 14 { 0x46 } else { b })
                .collect(),
            Ipv4Truncated,
        ),
        drop(
            "IPv4 total length beyond the frame",
            IN_PORT,
            poke(from_host(SERVER).udp(1, 2, b""), 16, &[0x01, 0x00]),
            Ipv4BadTotalLen,
        ),
        drop(
            "IPv4 total length below the header",
            IN_PORT,
            poke(from_host(SERVER).udp(1, 2, b""), 16, &[0x00, 0x10]),
            Ipv4BadTotalLen,
        ),
        drop(
            "IPv4 bad header checksum",
            IN_PORT,
            poke(from_host(SERVER).udp(1, 2, b""), 24, &[0xde, 0xad]),
            Ipv4BadChecksum,
        ),
        drop(
            "source 127.0.0.1",
            IN_PORT,
            patch_ip(from_host(SERVER).udp(1, 2, b""), |ip| {
                ip.set_src(Ipv4Addr::LOCALHOST)
            }),
            Ipv4BadSource,
        ),
        drop(
            "source 0.0.0.0",
            IN_PORT,
            patch_ip(from_host(SERVER).udp(1, 2, b""), |ip| {
                ip.set_src(Ipv4Addr::UNSPECIFIED)
            }),
            Ipv4BadSource,
        ),
        drop(
            "multicast source",
            IN_PORT,
            patch_ip(from_host(SERVER).udp(1, 2, b""), |ip| {
                ip.set_src(Ipv4Addr::new(224, 0, 0, 1))
            }),
            Ipv4BadSource,
        ),
        drop(
            "our own address as source",
            OUT_PORT,
            from_outside(IN_ADDR, HOST).udp(1, 2, b""),
            Ipv4BadSource,
        ),
        // Transit fragments are reassembled far enough for policy
        // (tests/frag_golden.rs); a first fragment whose length is not a
        // multiple of 8 is malformed.
        drop(
            "fragment: MF set, 12 bytes",
            IN_PORT,
            patch_ip(from_host(SERVER).udp(1, 2, b"frag"), |ip| {
                ip.set_flags_frag(0x2000, 0)
            }),
            FragBadLength,
        ),
        // Fragments to the node itself are not reassembled.
        drop(
            "fragment to our address: offset 8",
            IN_PORT,
            patch_ip(from_host(IN_ADDR).udp(1, 2, b"frag"), |ip| {
                ip.set_flags_frag(0, 8)
            }),
            Ipv4Fragment,
        ),
        drop(
            "destination 127.0.0.1",
            IN_PORT,
            from_host(Ipv4Addr::LOCALHOST).udp(1, 2, b""),
            Ipv4BadDestination,
        ),
        drop(
            "destination 240.0.0.1",
            IN_PORT,
            from_host(Ipv4Addr::new(240, 0, 0, 1)).udp(1, 2, b""),
            Ipv4BadDestination,
        ),
        drop(
            "TTL 1: time exceeded",
            IN_PORT,
            from_host(SERVER).ttl(1).udp(1, 2, b""),
            TtlExceeded,
        )
        .generated(IN_PORT, icmp_error_frame(&from_host(SERVER).ttl(1).udp(1, 2, b""), IN_MAC, IN_ADDR, HOST_MAC, 11, 0, 0))
        .delta("icmp_time_exceeded", 1),
        drop(
            "TTL 0: time exceeded",
            IN_PORT,
            from_host(SERVER).ttl(0).udp(1, 2, b""),
            TtlExceeded,
        )
        .generated(IN_PORT, icmp_error_frame(&from_host(SERVER).ttl(0).udp(1, 2, b""), IN_MAC, IN_ADDR, HOST_MAC, 11, 0, 0))
        .delta("icmp_time_exceeded", 1),
        drop(
            "TCP data offset 4",
            IN_PORT,
            poke(
                from_host(SERVER).tcp(1, 2, 0, 0, SYN, 0, &[], b""),
                14 + 20 + 12,
                &[0x40],
            ),
            TcpBadHeaderLen,
        ),
        drop(
            "TCP header cut short",
            IN_PORT,
            patch_ip(
                from_host(SERVER).tcp(1, 2, 0, 0, SYN, 0, &[], b"")[..14 + 20 + 10].to_vec(),
                |ip| ip.set_total_len(30),
            ),
            L4Truncated,
        ),
        drop(
            "UDP length beyond the datagram",
            IN_PORT,
            poke(from_host(SERVER).udp(1, 2, b"abc"), 14 + 20 + 4, &[0, 99]),
            L4Truncated,
        ),
        // ---- IPv6 ----
        drop(
            "IPv6 ICMPv6 is classified, not forwarded",
            IN_PORT,
            {
                let mut f = vec![
                    0x02, 0, 0, 0, 0x01, 0x01, 0x02, 0, 0, 0, 0x01, 0x0a, 0x86, 0xdd,
                ];
                f.extend_from_slice(&[0x60, 0, 0, 0, 0, 8, 58, 64]);
                f.extend_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
                f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
                f.extend_from_slice(&[128, 0, 0, 0, 0, 1, 0, 1]);
                f
            },
            Ipv6NotForwarded,
        )
        .delta("ipv6", 1)
        .delta("ipv6_icmp", 1),
        drop(
            "IPv6 truncated",
            IN_PORT,
            poke(from_host(SERVER).udp(1, 2, b""), 12, &[0x86, 0xdd]),
            Ipv6Truncated,
        )
        .delta("ipv6", 1),
        // ---- TCP handshake inside → outside ----
        held(
            "SYN inside → outside: permitted, next hop unresolved → ARP request, SYN held",
            IN_PORT,
            syn.clone(),
        )
        .delta("flows_created", 1)
        .delta("arp_requests", 1)
        .generated(OUT_PORT, gw_arp_request.clone()),
        held(
            "retransmitted SYN within the retry interval: no second request, held too",
            IN_PORT,
            syn.clone(),
        ),
        drop(
            "ARP reply from the gateway is learnt: both held SYNs leave, TTL 63, MACs rewritten",
            OUT_PORT,
            arp_reply(GW_MAC, OUT_MAC, None, GW, OUT_MAC, OUT_ADDR),
            ArpConsumed,
        )
        .delta("arp_hold_released", 2)
        .generated(OUT_PORT, syn_out.clone())
        .generated(OUT_PORT, syn_out.clone()),
        row(
            "SYN again: forwarded, TTL 63, MACs rewritten",
            IN_PORT,
            syn.clone(),
            fwd(1),
        )
        .bytes(syn_out.clone())
        .delta("forwarded", 1),
        row(
            "SYN-ACK from outside passes (reply direction)",
            OUT_PORT,
            synack.clone(),
            fwd(0),
        )
        .bytes(
            PacketBuilder::new(IN_MAC, HOST_MAC, SERVER, HOST)
                .ttl(63)
                .tcp(
                    80,
                    CPORT,
                    S_ISN,
                    C_ISN + 1,
                    SYN | ACK,
                    65535,
                    &SYN_OPTS,
                    b"",
                ),
        )
        .delta("forwarded", 1),
        row("ACK inside → outside", IN_PORT, ack.clone(), fwd(1))
            .check(|f| {
                let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
                assert!(ip.verify_checksum());
                assert_eq!(ip.ttl(), 63);
                assert_eq!(&f[..12], &[GW_MAC, OUT_MAC].concat()[..]);
            })
            .delta("forwarded", 1),
        row(
            "ICMP time-exceeded quoting the live flow, to its sender",
            OUT_PORT,
            from_outside(Ipv4Addr::new(192, 0, 2, 1), HOST).icmp(11, 0, (0, 0), &syn[14..14 + 28]),
            fwd(0),
        )
        .bytes(
            PacketBuilder::new(IN_MAC, HOST_MAC, Ipv4Addr::new(192, 0, 2, 1), HOST)
                .ttl(63)
                .icmp(11, 0, (0, 0), &syn[14..14 + 28]),
        )
        .delta("forwarded", 1)
        .delta("icmp_errors_forwarded", 1),
        drop(
            "ICMP unreachable quoting an unknown flow",
            OUT_PORT,
            from_outside(Ipv4Addr::new(192, 0, 2, 1), HOST).icmp(
                3,
                3,
                (0, 0),
                &from_host(SERVER).udp(9, 9, b"")[14..14 + 28],
            ),
            NoFlow,
        ),
        drop(
            "ICMP error with a cut quote",
            OUT_PORT,
            from_outside(Ipv4Addr::new(192, 0, 2, 1), HOST).icmp(3, 3, (0, 0), &syn[14..14 + 24]),
            L4Truncated,
        ),
        // ---- policy ----
        drop(
            "unsolicited SYN from outside (default deny, lower → higher)",
            OUT_PORT,
            from_outside(Ipv4Addr::new(192, 0, 2, 50), HOST).tcp(
                33000,
                22,
                1,
                0,
                SYN,
                1024,
                &[],
                b"",
            ),
            AclDenied,
        ),
        drop(
            "unsolicited ACK from outside",
            OUT_PORT,
            from_outside(Ipv4Addr::new(192, 0, 2, 50), HOST).tcp(
                33000,
                22,
                1,
                1,
                ACK,
                1024,
                &[],
                b"",
            ),
            TcpNoFlow,
        ),
        drop(
            "SYN+RST is a bad flag combination",
            OUT_PORT,
            from_outside(Ipv4Addr::new(192, 0, 2, 50), HOST).tcp(
                33000,
                22,
                1,
                1,
                SYN | RST,
                1024,
                &[],
                b"",
            ),
            TcpBadFlags,
        ),
        drop(
            "unsolicited echo reply",
            OUT_PORT,
            from_outside(Ipv4Addr::new(192, 0, 2, 50), HOST).icmp(0, 0, (77, 1), b""),
            NoFlow,
        ),
        row(
            "rule web-in lets outside → inside:80",
            OUT_PORT,
            from_outside(Ipv4Addr::new(192, 0, 2, 50), HOST).tcp(
                33001,
                80,
                1,
                0,
                SYN,
                1024,
                &[],
                b"",
            ),
            fwd(0),
        )
        .bytes(to_host(Ipv4Addr::new(192, 0, 2, 50)).tcp(33001, 80, 1, 0, SYN, 1024, &[], b""))
        .delta("forwarded", 1)
        .delta("flows_created", 1),
        drop(
            "rule no-telnet beats the inside → outside default",
            IN_PORT,
            from_host(SERVER).tcp(40001, 23, 1, 0, SYN, 1024, &[], b""),
            AclDenied,
        ),
        drop(
            "hairpin inside → inside is denied (equal levels)",
            IN_PORT,
            from_host(Ipv4Addr::new(198, 18, 1, 20)).udp(1, 2, b""),
            AclDenied,
        ),
        row("UDP inside → outside", IN_PORT, udp_in.clone(), fwd(1))
            .bytes(to_gw(HOST, SERVER).udp(5353, 53, b"query"))
            .delta("forwarded", 1)
            .delta("flows_created", 1),
        drop(
            "loose source route option (RFC 7126)",
            IN_PORT,
            with_ip_options(
                from_host(SERVER).udp(5353, 53, b""),
                &[1, 131, 7, 4, 10, 0, 0, 1],
            ),
            Ipv4SourceRoute,
        ),
        drop(
            "malformed IPv4 option length",
            IN_PORT,
            with_ip_options(from_host(SERVER).udp(5353, 53, b""), &[0x94, 9, 0, 0]),
            Ipv4BadOptions,
        ),
        row(
            "router-alert option is carried unchanged",
            IN_PORT,
            with_ip_options(from_host(SERVER).udp(5353, 53, b"query"), &[0x94, 4, 0, 0]),
            fwd(1),
        )
        .bytes(with_ip_options(
            to_gw(HOST, SERVER).udp(5353, 53, b"query"),
            &[0x94, 4, 0, 0],
        ))
        .delta("forwarded", 1),
        row(
            "UDP reply passes",
            OUT_PORT,
            from_outside(SERVER, HOST).udp(53, 5353, b"answer"),
            fwd(0),
        )
        .bytes(to_host(SERVER).udp(53, 5353, b"answer"))
        .delta("forwarded", 1),
        row(
            "echo request inside → outside",
            IN_PORT,
            from_host(SERVER).icmp(8, 0, (9, 1), b"hi"),
            fwd(1),
        )
        .bytes(to_gw(HOST, SERVER).icmp(8, 0, (9, 1), b"hi"))
        .delta("forwarded", 1)
        .delta("flows_created", 1),
        row(
            "echo reply back",
            OUT_PORT,
            from_outside(SERVER, HOST).icmp(0, 0, (9, 1), b"hi"),
            fwd(0),
        )
        .bytes(to_host(SERVER).icmp(0, 0, (9, 1), b"hi"))
        .delta("forwarded", 1),
        // ---- ARP retry interval ----
        held(
            "new next hop 198.18.2.77: request",
            IN_PORT,
            from_host(Ipv4Addr::new(198, 18, 2, 77)).udp(1, 7, b""),
        )
        .at_ms(10_000)
        .delta("flows_created", 1)
        .delta("arp_requests", 1)
        .generated(
            OUT_PORT,
            padded(build::arp(
                OUT_MAC,
                [0xff; 6],
                None,
                Operation::Request,
                OUT_MAC,
                OUT_ADDR,
                [0; 6],
                Ipv4Addr::new(198, 18, 2, 77),
            )),
        ),
        held(
            "same next hop 999 ms later: no request",
            IN_PORT,
            from_host(Ipv4Addr::new(198, 18, 2, 77)).udp(2, 7, b""),
        )
        .at_ms(10_999)
        .delta("flows_created", 1),
        held(
            "same next hop 1 s later: one more request",
            IN_PORT,
            from_host(Ipv4Addr::new(198, 18, 2, 77)).udp(3, 7, b""),
        )
        .at_ms(11_000)
        .delta("flows_created", 1)
        .delta("arp_requests", 1)
        .generated(
            OUT_PORT,
            padded(build::arp(
                OUT_MAC,
                [0xff; 6],
                None,
                Operation::Request,
                OUT_MAC,
                OUT_ADDR,
                [0; 6],
                Ipv4Addr::new(198, 18, 2, 77),
            )),
        ),
        // ---- VLAN ----
        row(
            "tagged ARP request on the DMZ VLAN → tagged reply",
            DMZ_PORT,
            arp_request(
                DMZ_HOST_MAC,
                Some(DMZ_VLAN),
                DMZ_HOST_MAC,
                DMZ_HOST,
                DMZ_ADDR,
            ),
            fwd(2),
        )
        .bytes(build::arp(
            DMZ_MAC,
            DMZ_HOST_MAC,
            Some(DMZ_VLAN),
            Operation::Reply,
            DMZ_MAC,
            DMZ_ADDR,
            DMZ_HOST_MAC,
            DMZ_HOST,
        ))
        .delta("arp_replies", 1)
        .delta("vlan_tagged", 1)
        .at_ms(12_000),
        row(
            "inside → DMZ: tag added",
            IN_PORT,
            from_host(DMZ_HOST).tcp(40002, 443, 7, 0, SYN, 1024, &[], b""),
            fwd(2),
        )
        .bytes(
            PacketBuilder::new(DMZ_MAC, DMZ_HOST_MAC, HOST, DMZ_HOST)
                .vlan(Some(DMZ_VLAN))
                .ttl(63)
                .tcp(40002, 443, 7, 0, SYN, 1024, &[], b""),
        )
        .delta("forwarded", 1)
        .delta("flows_created", 1),
        row(
            "DMZ → outside: tag removed",
            DMZ_PORT,
            from_dmz(SERVER).udp(999, 53, b"q"),
            fwd(1),
        )
        .bytes(
            PacketBuilder::new(OUT_MAC, GW_MAC, DMZ_HOST, SERVER)
                .ttl(63)
                .udp(999, 53, b"q"),
        )
        .delta("forwarded", 1)
        .delta("flows_created", 1)
        .delta("vlan_tagged", 1),
        drop(
            "DMZ → inside: default deny (50 < 100)",
            DMZ_PORT,
            from_dmz(HOST).udp(1, 2, b""),
            AclDenied,
        )
        .delta("vlan_tagged", 1),
        // ---- padding ----
        row(
            "Ethernet padding after the IPv4 datagram is ignored (and kept)",
            IN_PORT,
            padded(ack.clone()[..].to_vec()),
            fwd(1),
        )
        .check(|f| {
            assert_eq!(f.len(), 60);
            assert!(Ipv4Packet::new_checked(&f[14..]).unwrap().verify_checksum());
        })
        .delta("forwarded", 1),
    ];
    run(&mut p, rows);
    let c = p.counters();
    assert_eq!(
        c.packets,
        c.forwarded + c.consumed + c.arp_replies + c.icmp_echo_replies + c.dropped()
    );
}

#[test]
fn no_route_without_default() {
    let mut cfg = config();
    cfg.routes.clear();
    let mut p = Pipeline::new(cfg).unwrap();
    let query = from_host(Ipv4Addr::new(8, 8, 8, 8)).udp(1, 53, b"");
    run(
        &mut p,
        vec![
            // The host's MAC unknown: the error's ARP request goes out
            // instead of the error.
            drop("no route, host unresolved", IN_PORT, query.clone(), DropReason::NoRoute)
                .generated(IN_PORT, padded(arp_request(IN_MAC, None, IN_MAC, IN_ADDR, HOST)))
                .delta("arp_requests", 1)
                .delta("icmp_no_neighbor", 1),
            row("learn the host", IN_PORT, arp_request(HOST_MAC, None, HOST_MAC, HOST, IN_ADDR), fwd(0))
                .check(|_| {})
                .delta("arp_replies", 1),
            drop("no route: net unreachable", IN_PORT, query.clone(), DropReason::NoRoute)
                .generated(IN_PORT, icmp_error_frame(&query, IN_MAC, IN_ADDR, HOST_MAC, 3, 0, 0))
                .delta("icmp_net_unreachable", 1),
        ],
    );
}

#[test]
fn no_headroom_for_tag() {
    let mut p = pipeline();
    run(
        &mut p,
        vec![row(
            "learn the DMZ host",
            DMZ_PORT,
            arp_request(
                DMZ_HOST_MAC,
                Some(DMZ_VLAN),
                DMZ_HOST_MAC,
                DMZ_HOST,
                DMZ_ADDR,
            ),
            fwd(2),
        )
        .check(|_| {})
        .delta("arp_replies", 1)
        .delta("vlan_tagged", 1)],
    );
    let f = from_host(DMZ_HOST).udp(1, 2, b"");
    let mut buf = VecBuf::with_headroom(&f, 0);
    let v = p.process(Timestamp::from_secs(2), IN_PORT, &mut buf);
    assert_eq!(v, Verdict::Drop(DropReason::NoHeadroom));
    assert_eq!(buf.data(), &f[..], "a NoHeadroom drop leaves the frame untouched");
}

#[test]
fn arp_cache_full_and_expiry() {
    let mut cfg = config();
    cfg.arp_capacity = 1;
    let mut p = Pipeline::new(cfg).unwrap();
    let t = Timestamp::from_secs(1);
    let mut b = VecBuf::new(&from_host(SERVER).udp(1, 2, b""));
    assert_eq!(p.process(t, IN_PORT, &mut b), Verdict::Consumed, "held for the gateway");
    let mut b = VecBuf::new(&from_host(Ipv4Addr::new(198, 18, 2, 9)).udp(1, 2, b""));
    assert_eq!(
        p.process(t, IN_PORT, &mut b),
        Verdict::Drop(DropReason::ArpCacheFull)
    );
    assert_eq!(p.arp_entries(t).len(), 1);
    assert_eq!(p.arp_entries(t)[0].state, "pending");
    // Pending entries age out after three retry intervals, and the frame
    // held for it with them, never sent.
    p.poll_timers(Timestamp::from_millis(3999));
    assert_eq!(p.counters().arp_hold.expired, 0);
    p.poll_timers(Timestamp::from_secs(4));
    assert!(p.arp_entries(Timestamp::from_secs(4)).is_empty());
    assert_eq!(p.counters().arp_hold.expired, 1);
    let mut sent = 0;
    p.drain_generated(|_, f| sent += usize::from(f[12] == 0x08 && f[13] == 0x00));
    assert_eq!(sent, 0, "an expired frame is never sent");
}

#[test]
fn show_commands() {
    let mut p = pipeline();
    let t = Timestamp::from_secs(1);
    let mut b = VecBuf::new(&arp_request(HOST_MAC, None, HOST_MAC, HOST, IN_ADDR));
    p.process(t, IN_PORT, &mut b);
    let mut b = VecBuf::new(&from_outside(Ipv4Addr::new(192, 0, 2, 50), HOST).tcp(
        33001,
        80,
        1,
        0,
        SYN,
        1024,
        &[],
        b"",
    ));
    assert_eq!(p.process(t, OUT_PORT, &mut b), Verdict::Forward(IN_PORT));
    let arp = p.arp_entries(t);
    assert_eq!(arp.len(), 1);
    assert_eq!(arp[0].mac.as_deref(), Some("02:00:00:00:01:0a"));
    assert_eq!(arp[0].interface, "inside");
    let rules = p.rules();
    assert_eq!((rules[0].name.as_str(), rules[0].hits), ("web-in", 1));
    assert_eq!(rules[1].hits, 0);
    let routes = p.routes();
    assert_eq!(routes.len(), 5);
    assert_eq!(routes.last().unwrap().via, Some(GW));
    let conns = p.conns(t, 10);
    assert_eq!(conns.len(), 1);
    assert_eq!(conns[0].tuple.dst_port, 80);
    assert_eq!(p.flow_count(), 1);
    let snap = dataplane::stats::flatten(&p.counters());
    assert_eq!(snap["forwarded"], 1);
    assert!(snap.contains_key("drops.acl-denied"));
}

#[test]
fn config_errors() {
    use dataplane::pipeline::PipelineError;
    let mut c = config();
    c.interfaces[1].addr = Ipv4Addr::new(198, 18, 1, 2);
    assert!(matches!(
        Pipeline::new(c),
        Err(PipelineError::OverlappingSubnets { .. })
    ));
    let mut c = config();
    c.rules[0].interface = Some("nope".into());
    assert!(matches!(
        Pipeline::new(c),
        Err(PipelineError::UnknownRuleInterface { .. })
    ));
    let mut c = config();
    c.routes[0].via = Ipv4Addr::new(10, 9, 9, 9);
    assert!(matches!(Pipeline::new(c), Err(PipelineError::Route(_))));
    let mut c = config();
    c.interfaces[2].vlan = Some(4095);
    assert!(matches!(
        Pipeline::new(c),
        Err(PipelineError::BadVlan { .. })
    ));
    let mut c = config();
    c.interfaces[2].port = IN_PORT;
    c.interfaces[2].vlan = None;
    assert!(matches!(
        Pipeline::new(c),
        Err(PipelineError::DuplicatePortVlan { .. })
    ));
    let mut c = config();
    c.flow_capacity = 0;
    assert!(matches!(
        Pipeline::new(c),
        Err(PipelineError::ZeroCapacity(_))
    ));
    let e = {
        let mut c = config();
        c.rules[1].dst_ports = (30, 20);
        Pipeline::new(c).err().unwrap()
    };
    assert!(e.to_string().contains("no-telnet"));
}

/// RFC 3021: on a /31 link both addresses are hosts; neither is a
/// broadcast address, so the peer is a valid source and ARP sender.
#[test]
fn slash31_link() {
    let mut cfg = config();
    cfg.interfaces[1].addr = Ipv4Addr::new(198, 18, 2, 1);
    cfg.interfaces[1].prefix_len = 31;
    let peer = Ipv4Addr::new(198, 18, 2, 0);
    cfg.routes = vec![dataplane::pipeline::RouteSpec {
        destination: Ipv4Addr::UNSPECIFIED,
        prefix_len: 0,
        via: peer,
    }];
    let mut p = Pipeline::new(cfg).unwrap();
    run(
        &mut p,
        vec![
            drop(
                "ARP reply from the /31 peer is learnt",
                OUT_PORT,
                arp_reply(GW_MAC, OUT_MAC, None, peer, OUT_MAC, OUT_ADDR),
                DropReason::ArpConsumed,
            ),
            drop(
                "the /31 peer is a valid source (policy decides)",
                OUT_PORT,
                from_outside(peer, HOST).udp(1, 2, b""),
                DropReason::AclDenied,
            ),
            row(
                "inside → outside via the /31 peer",
                IN_PORT,
                from_host(SERVER).udp(7, 53, b""),
                fwd(1),
            )
            .bytes(to_gw(HOST, SERVER).udp(7, 53, b""))
            .delta("forwarded", 1)
            .delta("flows_created", 1),
        ],
    );
    assert_eq!(p.arp_entries(Timestamp::from_secs(2))[0].ip, peer);
}

/// An expired next hop keeps forwarding while a unicast who-has re-confirms
/// it (once per retry interval); unconfirmed for three intervals, it is a
/// miss again and broadcast requests resume.
#[test]
fn arp_refresh_without_drops() {
    use dataplane::DropReason::*;
    let mut p = pipeline();
    let who_has_gw = |dst: [u8; 6]| {
        padded(build::arp(
            OUT_MAC,
            dst,
            None,
            Operation::Request,
            OUT_MAC,
            OUT_ADDR,
            [0; 6],
            GW,
        ))
    };
    let udp = |sport: u16| from_host(SERVER).udp(sport, 53, b"");
    let out = |sport: u16| to_gw(HOST, SERVER).udp(sport, 53, b"");
    run(
        &mut p,
        vec![
            drop(
                "gateway announces itself to us",
                OUT_PORT,
                arp_reply(GW_MAC, OUT_MAC, None, GW, OUT_MAC, OUT_ADDR),
                ArpConsumed,
            )
            .at_ms(1_000),
            row("fresh entry", IN_PORT, udp(1), fwd(1))
                .bytes(out(1))
                .delta("forwarded", 1)
                .delta("flows_created", 1)
                .at_ms(2_000),
            row(
                "expired: forwarded + unicast who-has",
                IN_PORT,
                udp(2),
                fwd(1),
            )
            .bytes(out(2))
            .delta("forwarded", 1)
            .delta("flows_created", 1)
            .delta("arp_requests", 1)
            .generated(OUT_PORT, who_has_gw(GW_MAC))
            .at_ms(301_000),
            row(
                "stale, within the retry interval: no request",
                IN_PORT,
                udp(3),
                fwd(1),
            )
            .bytes(out(3))
            .delta("forwarded", 1)
            .delta("flows_created", 1)
            .at_ms(301_500),
            row(
                "stale, next interval: another unicast who-has",
                IN_PORT,
                udp(4),
                fwd(1),
            )
            .bytes(out(4))
            .delta("forwarded", 1)
            .delta("flows_created", 1)
            .delta("arp_requests", 1)
            .generated(OUT_PORT, who_has_gw(GW_MAC))
            .at_ms(302_000),
            held(
                "never confirmed: a miss, broadcast who-has, held",
                IN_PORT,
                udp(5),
            )
            .delta("flows_created", 1)
            .delta("arp_requests", 1)
            .generated(OUT_PORT, who_has_gw([0xff; 6]))
            .at_ms(304_000),
        ],
    );
}

/// `announce`: one gratuitous ARP per interface (who-has its own address,
/// from its MAC, broadcast, tagged on a VLAN interface), and a who-has for
/// each gateway not resolved yet — once: a second announcement while the
/// gateway's request is pending does not repeat it.
#[test]
fn announce_sends_one_gratuitous_arp_per_interface_and_resolves_gateways() {
    let mut p = pipeline();
    let t = Timestamp::from_secs(1);
    let gateways: Vec<Ipv4Addr> = p.routes().iter().filter_map(|r| r.via).collect();
    assert!(!gateways.is_empty(), "the test config routes via a gateway");
    let n = p.announce(t);
    assert_eq!(n, 3 + gateways.len());
    let mut got = Vec::new();
    p.drain_generated(|port, f| got.push((port, f.to_vec())));
    assert_eq!(got.len(), n);
    // The gateways' requests: ARP, target the gateway, sender our address.
    for gw in &gateways {
        assert!(
            got.iter().any(|(_, f)| f[12..14] == [0x08, 0x06] && f[14 + 24..14 + 28] == gw.octets()),
            "who-has {gw}"
        );
    }
    assert_eq!(p.arp_entries(t).iter().filter(|e| e.state == "pending").count(), gateways.len());
    assert_eq!(p.announce(t), 3, "pending gateways are not asked again at once");
    p.drain_generated(|_, _| {});
    let got: Vec<_> = got.into_iter().filter(|(_, f)| {
        let arp = if f[12..14] == [0x81, 0x00] { &f[18..] } else { &f[14..] };
        arp[14..18] == arp[24..28]
    }).collect();
    assert_eq!(got.len(), 3);
    for (port, mac, addr, vlan) in
        [(IN_PORT, IN_MAC, IN_ADDR, None), (OUT_PORT, OUT_MAC, OUT_ADDR, None), (DMZ_PORT, DMZ_MAC, DMZ_ADDR, Some(DMZ_VLAN))]
    {
        let (_, f) = got.iter().find(|(p, _)| *p == port).expect("one frame per interface");
        assert_eq!(&f[..6], &[0xff; 6], "broadcast");
        assert_eq!(&f[6..12], &mac, "from the interface's MAC");
        let arp = match vlan {
            Some(v) => {
                assert_eq!((&f[12..14], u16::from_be_bytes([f[14], f[15]]) & 0x0fff), (&[0x81, 0x00][..], v));
                &f[18..]
            }
            None => &f[14..],
        };
        assert_eq!(&f[12 + if vlan.is_some() { 4 } else { 0 }..][..2], &[0x08, 0x06], "ARP");
        assert_eq!(u16::from_be_bytes([arp[6], arp[7]]), 1, "a request");
        assert_eq!(&arp[14..18], &addr.octets(), "sender: its own address");
        assert_eq!(&arp[24..28], &addr.octets(), "target: its own address");
    }
    let mut again = 0;
    p.drain_generated(|_, _| again += 1);
    assert_eq!(again, 0, "drained");
}
