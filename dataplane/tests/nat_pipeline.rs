//! NAT through the pipeline (issue 13, single node): PAT, dynamic NAT,
//! static NAT and static PAT, both directions, ICMP echo and errors,
//! hostile return traffic, exhaustion — every frame out checked field by
//! field and by full checksum recompute, and the flow table keyed by the
//! real addresses (conntrack and the access rules see real addresses).

mod common;
mod frag_util;

use common::*;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::tcp_flags::{ACK, RST, SYN};
use dataplane::nat::{RuleKind, RuleSpec as NatRule};
use dataplane::pipeline::{NatSpec, PatSpec, Pipeline, PoolSpec, Verdict};
use dataplane::route::IfIndex;
use dataplane::wire::build::{ipv4_offset, PacketBuilder};
use dataplane::wire::checksum;
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::{DropReason, Duration, PortId, Timestamp};
use std::net::Ipv4Addr;

const PAT_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 7);
const NAT_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 100);
const WEB_MAPPED: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 80);
const DB_MAPPED: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 200);
const DMZ_DB: Ipv4Addr = Ipv4Addr::new(198, 18, 3, 20);
/// An inside host reachable from outside on its real address (ssh-in).
const SSH_HOST: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 12);
const INSIDE: IfIndex = IfIndex(0);
const OUTSIDE: IfIndex = IfIndex(1);

fn rule(kind: RuleKind, source: (Ipv4Addr, u8)) -> NatRule {
    NatRule {
        kind,
        real_iface: Some(INSIDE),
        mapped_iface: Some(OUTSIDE),
        source,
        mapped: None,
        ports: None,
        pool: None,
        per_session: Default::default(),
    }
}

/// inside 198.18.1.0/24 → PAT on 192.0.2.7; host .11 by dynamic NAT
/// (192.0.2.100, first in rule order); static PAT 192.0.2.80:8080 →
/// HOST:80; static NAT of the DMZ host .20 to 192.0.2.200 (any
/// interface).
fn nat_config() -> dataplane::pipeline::PipelineConfig {
    let mut cfg = config();
    cfg.static_neighbors = vec![(GW, GW_MAC), (HOST, HOST_MAC), (DMZ_DB, DMZ_HOST_MAC), (SSH_HOST, HOST_MAC)];
    cfg.flow_capacity = 8192;
    // The access rules admit what the tests send.
    cfg.rules.insert(
        0,
        dataplane::pipeline::RuleSpec {
            name: "db-in".into(),
            permit: true,
            interface: Some("outside".into()),
            protocol: Some(6),
            src: None,
            dst: Some((DMZ_DB.into(), 32)),
            src_ports: (0, 65535),
            dst_ports: (5432, 5432),
        },
    );
    cfg.rules.insert(
        0,
        dataplane::pipeline::RuleSpec {
            name: "ssh-in".into(),
            permit: true,
            interface: Some("outside".into()),
            protocol: Some(6),
            src: None,
            dst: Some((SSH_HOST.into(), 32)),
            src_ports: (0, 65535),
            dst_ports: (22, 22),
        },
    );
    cfg
}

fn spec(max_per_host: Option<u16>) -> NatSpec {
    NatSpec {
        rules: vec![
            NatRule { pool: Some(1), ..rule(RuleKind::DynamicNat, (Ipv4Addr::new(198, 18, 1, 11), 32)) },
            NatRule {
                mapped: Some((WEB_MAPPED, 32)),
                ports: Some((6, 80, 8080)),
                ..rule(RuleKind::StaticPat, (HOST, 32))
            },
            NatRule { pool: Some(0), ..rule(RuleKind::DynamicPat, (Ipv4Addr::new(198, 18, 1, 0), 24)) },
            NatRule {
                real_iface: None,
                mapped_iface: None,
                mapped: Some((DB_MAPPED, 32)),
                ..rule(RuleKind::StaticNat, (DMZ_DB, 32))
            },
        ],
        pools: vec![
            PoolSpec {
                addresses: vec![PAT_ADDR],
                pat: Some(PatSpec { block_size: 4096, reserved_ports: false, max_per_host }),
            },
            PoolSpec { addresses: vec![NAT_ADDR], pat: None },
        ],
        xlate_capacity: 8192,
        xlate_timeout: Duration::from_secs(60),
        host_capacity: 16,
    }
}

fn pipeline(max_per_host: Option<u16>) -> Pipeline {
    let mut p = Pipeline::new(nat_config()).unwrap();
    p.set_nat(&spec(max_per_host)).unwrap();
    p
}

fn run(p: &mut Pipeline, ms: u64, port: PortId, frame: &[u8]) -> (Verdict, Vec<u8>) {
    let mut b = VecBuf::with_headroom(frame, 64);
    let v = p.process(Timestamp::from_millis(ms), port, &mut b);
    (v, b.data().to_vec())
}

struct Ip<'a>(&'a [u8]);
impl Ip<'_> {
    fn l3(&self) -> &[u8] {
        &self.0[ipv4_offset(self.0).unwrap()..]
    }
    fn src(&self) -> Ipv4Addr {
        let l = self.l3();
        Ipv4Addr::new(l[12], l[13], l[14], l[15])
    }
    fn dst(&self) -> Ipv4Addr {
        let l = self.l3();
        Ipv4Addr::new(l[16], l[17], l[18], l[19])
    }
    fn ports(&self) -> (u16, u16) {
        let l = &self.l3()[20..];
        (u16::from_be_bytes([l[0], l[1]]), u16::from_be_bytes([l[2], l[3]]))
    }
    fn echo_id(&self) -> u16 {
        let l = &self.l3()[20..];
        u16::from_be_bytes([l[4], l[5]])
    }
    /// IPv4, TCP / UDP (pseudo-header) and ICMP checksums by full
    /// recompute.
    fn checksums_ok(&self) -> bool {
        let l = self.l3();
        let total = usize::from(u16::from_be_bytes([l[2], l[3]]));
        let l4 = &l[20..total];
        let src: [u8; 4] = l[12..16].try_into().unwrap();
        let dst: [u8; 4] = l[16..20].try_into().unwrap();
        checksum::verify(0, &l[..20])
            && match l[9] {
                6 | 17 => checksum::verify(checksum::pseudo_header_v4(src, dst, l[9], l4.len() as u16), l4),
                1 => checksum::verify(0, l4),
                _ => true,
            }
    }
}

#[test]
fn pat_outbound_and_its_return_traffic() {
    let mut p = pipeline(None);
    let syn = from_host(SERVER).tcp(40000, 443, 100, 0, SYN, 64240, &SYN_OPTS, b"");
    let (v, out) = run(&mut p, 0, IN_PORT, &syn);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    let o = Ip(&out);
    assert_eq!(o.src(), PAT_ADDR, "the outside sees the pool address only");
    let (mapped_port, dport) = o.ports();
    assert!((1024..1024 + 4096).contains(&mapped_port), "from block 0: {mapped_port}");
    assert_eq!(dport, 443);
    assert!(o.checksums_ok());
    // The SYN-ACK to the mapped endpoint reaches the host's real one.
    let synack = from_outside(SERVER, PAT_ADDR).tcp(443, mapped_port, 5000, 101, SYN | ACK, 65535, &SYN_OPTS, b"");
    let (v, back) = run(&mut p, 1, OUT_PORT, &synack);
    assert_eq!(v, Verdict::Forward(IN_PORT));
    let b = Ip(&back);
    assert_eq!((b.dst(), b.ports()), (HOST, (443, 40000)));
    assert!(b.checksums_ok());
    // The connection is tracked on its real addresses.
    let conns = p.conns(Timestamp::from_millis(1), 16);
    assert!(conns.iter().any(|c| c.tuple.src == std::net::IpAddr::V4(HOST) && c.tuple.src_port == 40000), "{conns:?}");
    // The next segment keeps the same mapping.
    let ack = from_host(SERVER).tcp(40000, 443, 101, 5001, ACK, 64240, &[], b"GET /");
    let (v, out) = run(&mut p, 2, IN_PORT, &ack);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    assert_eq!((Ip(&out).src(), Ip(&out).ports().0), (PAT_ADDR, mapped_port));
    let x = p.xlates(Timestamp::from_millis(2), 16);
    assert_eq!(x.len(), 1);
    assert_eq!(x[0].real, format!("{HOST}:40000"));
    assert_eq!(x[0].mapped, format!("{PAT_ADDR}:{mapped_port}"));
    let c = p.nat_counters().unwrap();
    assert_eq!((c.translated_out, c.translated_in, c.xlates_created), (2, 1, 1));
    // show nat pool: the PAT pool's 16 blocks on the one worker, one port in
    // use; the dynamic NAT pool's address still free.
    let pools = p.nat_pools();
    assert_eq!(
        (pools[0].kind, pools[0].blocks, pools[0].free_blocks, pools[0].ports_in_use),
        ("dynamic-pat", 16, 15, 1)
    );
    assert_eq!((pools[1].kind, pools[1].addresses, pools[1].free_addresses), ("dynamic-nat", 1, 1));
}

#[test]
fn return_traffic_without_a_translation_is_dropped_and_counted() {
    let mut p = pipeline(None);
    for (port, desc) in [(2000u16, "an unmapped port"), (80, "below the blocks")] {
        let probe = from_outside(SERVER, PAT_ADDR).tcp(443, port, 1, 0, SYN, 1000, &[], b"");
        let (v, out) = run(&mut p, 0, OUT_PORT, &probe);
        assert_eq!(v, Verdict::Drop(DropReason::NatNoXlate), "{desc}");
        assert_eq!(out, probe, "a dropped frame is unchanged");
    }
    let udp = from_outside(SERVER, NAT_ADDR).udp(53, 5353, b"x");
    assert_eq!(run(&mut p, 0, OUT_PORT, &udp).0, Verdict::Drop(DropReason::NatNoXlate));
    assert_eq!(p.nat_counters().unwrap().no_xlate, 3);
    assert!(p.xlates(Timestamp::ZERO, 16).is_empty(), "no xlate made by return traffic");
}

#[test]
fn udp_and_ping_through_pat() {
    let mut p = pipeline(None);
    let q = from_host(SERVER).udp(5353, 53, b"query");
    let (v, out) = run(&mut p, 0, IN_PORT, &q);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    let (mport, _) = Ip(&out).ports();
    assert!(Ip(&out).checksums_ok());
    let a = from_outside(SERVER, PAT_ADDR).udp(53, mport, b"answer");
    let (v, back) = run(&mut p, 1, OUT_PORT, &a);
    assert_eq!(v, Verdict::Forward(IN_PORT));
    assert_eq!((Ip(&back).dst(), Ip(&back).ports().1), (HOST, 5353));
    assert!(Ip(&back).checksums_ok());
    // Echo: the identifier is the port.
    let ping = from_host(SERVER).icmp(8, 0, (0x4242, 1), b"ping");
    let (v, out) = run(&mut p, 2, IN_PORT, &ping);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    let mid = Ip(&out).echo_id();
    assert_eq!(Ip(&out).src(), PAT_ADDR);
    assert!(Ip(&out).checksums_ok());
    let pong = from_outside(SERVER, PAT_ADDR).icmp(0, 0, (mid, 1), b"ping");
    let (v, back) = run(&mut p, 3, OUT_PORT, &pong);
    assert_eq!(v, Verdict::Forward(IN_PORT));
    assert_eq!((Ip(&back).dst(), Ip(&back).echo_id()), (HOST, 0x4242));
    assert!(Ip(&back).checksums_ok());
}

/// A router's "time exceeded" about a PAT'ed datagram, sent to the mapped
/// address, reaches the host with its quote translated back.
#[test]
fn an_icmp_error_about_a_translated_datagram_comes_back_translated() {
    let mut p = pipeline(None);
    let q = from_host(SERVER).udp(6000, 33434, b"trace");
    let (_, out) = run(&mut p, 0, IN_PORT, &q);
    let sent = Ip(&out).l3().to_vec();
    let (mport, _) = Ip(&out).ports();
    let err = from_outside(Ipv4Addr::new(198, 18, 2, 254), PAT_ADDR).icmp(11, 0, (0, 0), &sent);
    let (v, back) = run(&mut p, 1, OUT_PORT, &err);
    assert_eq!(v, Verdict::Forward(IN_PORT), "{mport}");
    let b = Ip(&back);
    assert_eq!(b.dst(), HOST);
    assert!(b.checksums_ok(), "outer and ICMP");
    let quote = &b.l3()[28..];
    assert_eq!(Ipv4Addr::new(quote[12], quote[13], quote[14], quote[15]), HOST);
    assert_eq!(u16::from_be_bytes([quote[20], quote[21]]), 6000);
    assert!(checksum::verify(0, &quote[..20]), "quoted header");
    assert_eq!(p.nat_counters().unwrap().icmp_errors_in, 1);
}

/// The quoted packet's (source, destination, source port, destination
/// port) of an ICMP error (from its IP header on).
fn quote_of(l3: &[u8]) -> (Ipv4Addr, Ipv4Addr, u16, u16) {
    let q = &l3[28..];
    let ihl = usize::from(q[0] & 15) * 4;
    (
        Ipv4Addr::new(q[12], q[13], q[14], q[15]),
        Ipv4Addr::new(q[16], q[17], q[18], q[19]),
        u16::from_be_bytes([q[ihl], q[ihl + 1]]),
        u16::from_be_bytes([q[ihl + 2], q[ihl + 3]]),
    )
}

#[test]
fn an_icmp_error_from_the_real_side_leaves_with_the_mapped_endpoint() {
    let mut p = pipeline(None);
    // PAT: the host's datagram out, the server's answer in (translated
    // back), the host's port unreachable about it: it leaves as the pool
    // address, quoting the mapped endpoint — never the host's address.
    let (_, out) = run(&mut p, 0, IN_PORT, &from_host(SERVER).udp(6000, 4000, b"q"));
    let (mport, _) = Ip(&out).ports();
    let answer = from_outside(SERVER, PAT_ADDR).udp(4000, mport, b"answer");
    let (v, inn) = run(&mut p, 1, OUT_PORT, &answer);
    assert_eq!((v, Ip(&inn).dst(), Ip(&inn).ports().1), (Verdict::Forward(IN_PORT), HOST, 6000));
    let unreachable = from_host(SERVER).icmp(3, 3, (0, 0), Ip(&inn).l3());
    let (v, err) = run(&mut p, 2, IN_PORT, &unreachable);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    let e = Ip(&err);
    assert_eq!((e.src(), e.dst()), (PAT_ADDR, SERVER));
    assert_eq!(quote_of(e.l3()), (SERVER, PAT_ADDR, 4000, mport));
    assert!(e.checksums_ok(), "outer and ICMP");
    assert!(checksum::verify(0, &e.l3()[28..48]), "quoted header");
    assert!(!err.windows(4).any(|w| w == HOST.octets()), "the host's address left");
    // Static NAT: an error about the database's inbound connection from a
    // router on its side keeps the router's address, quotes the mapped
    // one.
    let db = from_outside(SERVER, DB_MAPPED).tcp(50001, 5432, 7, 0, SYN, 1000, &SYN_OPTS, b"");
    let (v, inn) = run(&mut p, 3, OUT_PORT, &db);
    assert_eq!(v, Verdict::Forward(DMZ_PORT));
    let router = Ipv4Addr::new(198, 18, 3, 254);
    let l3 = Ip(&inn).l3().to_vec();
    let err = PacketBuilder::new(DMZ_HOST_MAC, DMZ_MAC, router, SERVER).vlan(Some(DMZ_VLAN)).icmp(3, 1, (0, 0), &l3);
    let (v, out) = run(&mut p, 4, DMZ_PORT, &err);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    let e = Ip(&out);
    assert_eq!((e.src(), e.dst()), (router, SERVER), "a router's own error keeps its address");
    assert_eq!(quote_of(e.l3()), (SERVER, DB_MAPPED, 50001, 5432));
    assert!(e.checksums_ok());
    assert!(!out.windows(4).any(|w| w == DMZ_DB.octets()), "the database's address left");
    assert_eq!(p.nat_counters().unwrap().icmp_errors_out, 2);
}

/// Frames a burst of `frames` makes leave (forwarded at once, or held and
/// released through the generated queue).
fn run_all(p: &mut Pipeline, ms: u64, port: PortId, frames: &[Vec<u8>]) -> Vec<(PortId, Vec<u8>)> {
    let mut out = vec![];
    for (i, f) in frames.iter().enumerate() {
        if let (Verdict::Forward(to), o) = run(p, ms + i as u64, port, f) {
            out.push((to, o));
        }
    }
    p.drain_generated(|to, f| out.push((to, f.to_vec())));
    out
}

#[test]
fn fragments_to_a_pat_address_are_translated_in_any_order() {
    let mut p = pipeline(None);
    let (_, out) = run(&mut p, 0, IN_PORT, &from_host(SERVER).udp(6000, 4000, b"q"));
    let (mport, _) = Ip(&out).ports();
    let big: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    for (k, order) in [[0usize, 1, 2], [2, 1, 0], [1, 2, 0]].iter().enumerate() {
        let mut b = from_outside(SERVER, PAT_ADDR);
        b.ident = 100 + k as u16;
        let frags = frag_util::fragments(&b.udp(4000, mport, &big), 1480);
        assert_eq!(frags.len(), 3);
        let sent: Vec<Vec<u8>> = order.iter().map(|&i| frags[i].clone()).collect();
        let got = run_all(&mut p, 10 + 10 * k as u64, OUT_PORT, &sent);
        assert_eq!(got.len(), 3, "order {order:?}: every piece leaves");
        assert!(got.iter().all(|(to, f)| *to == IN_PORT && Ip(f).dst() == HOST && Ip(f).src() == SERVER));
        let pieces: Vec<Vec<u8>> = got.into_iter().map(|(_, f)| f).collect();
        for f in &pieces {
            frag_util::check_ip(f, 63);
        }
        // The datagram as the host gets it: its port, a UDP checksum right
        // over the whole of it, the payload intact.
        let first = pieces.iter().find(|f| Ipv4Packet::new_checked(&f[14..]).unwrap().frag_offset() == 0).unwrap();
        assert_eq!(Ip(first).ports(), (4000, 6000));
        assert_eq!(frag_util::reassemble_udp(&pieces), big, "order {order:?}");
    }
    let c = p.nat_counters().unwrap();
    assert_eq!(c.fragments_in, 9);
    // Fragments to a mapped port nobody holds: dropped, counted.
    let stray = frag_util::fragments(&from_outside(SERVER, PAT_ADDR).udp(4000, mport ^ 1, &big), 1480);
    assert!(run_all(&mut p, 100, OUT_PORT, &stray).is_empty());
    assert!(p.nat_counters().unwrap().no_xlate > 0);
    // An 8000-byte echo reply (ping -s 8000 through PAT).
    let request = frag_util::fragments(&from_host(SERVER).icmp(8, 0, (0x77, 1), &[0xa5; 8000]), 1480);
    let out = run_all(&mut p, 200, IN_PORT, &request);
    assert_eq!(out.len(), request.len(), "the request's pieces leave");
    let first = out.iter().find(|(_, f)| Ipv4Packet::new_checked(&f[14..]).unwrap().frag_offset() == 0).unwrap();
    let id = Ip(&first.1).echo_id();
    assert_ne!(id, 0x77, "translated");
    let reply = frag_util::fragments(&from_outside(SERVER, PAT_ADDR).icmp(0, 0, (id, 1), &[0xa5; 8000]), 1480);
    let got = run_all(&mut p, 300, OUT_PORT, &reply);
    assert_eq!(got.len(), reply.len());
    let pieces: Vec<Vec<u8>> = got.into_iter().map(|(_, f)| f).collect();
    let (src, dst, icmp) = frag_util::reassemble(&pieces);
    assert_eq!((src, dst), (SERVER, HOST));
    assert_eq!(u16::from_be_bytes([icmp[4], icmp[5]]), 0x77, "the host's identifier");
    assert!(checksum::verify(0, &icmp), "ICMP checksum over the whole reply");
}

#[test]
fn dynamic_nat_static_pat_and_static_nat() {
    let mut p = pipeline(None);
    // Host .11 gets the dynamic NAT address, ports untouched.
    let from11 = dataplane::wire::build::PacketBuilder::new(HOST_MAC, IN_MAC, Ipv4Addr::new(198, 18, 1, 11), SERVER)
        .tcp(41000, 443, 1, 0, SYN, 1000, &[], b"");
    let (v, out) = run(&mut p, 0, IN_PORT, &from11);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    assert_eq!((Ip(&out).src(), Ip(&out).ports().0), (NAT_ADDR, 41000));
    assert!(Ip(&out).checksums_ok());
    // Static PAT: the outside reaches HOST:80 at 192.0.2.80:8080.
    let syn = from_outside(SERVER, WEB_MAPPED).tcp(50000, 8080, 7, 0, SYN, 1000, &SYN_OPTS, b"");
    let (v, inn) = run(&mut p, 1, OUT_PORT, &syn);
    assert_eq!(v, Verdict::Forward(IN_PORT));
    assert_eq!((Ip(&inn).dst(), Ip(&inn).ports().1), (HOST, 80));
    assert!(Ip(&inn).checksums_ok());
    let synack = from_host(SERVER).tcp(80, 50000, 900, 8, SYN | ACK, 1000, &SYN_OPTS, b"");
    let (v, out) = run(&mut p, 2, IN_PORT, &synack);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    assert_eq!((Ip(&out).src(), Ip(&out).ports().0), (WEB_MAPPED, 8080), "the reply leaves as the mapped endpoint");
    // Another port of the static PAT address is not mapped.
    let other = from_outside(SERVER, WEB_MAPPED).tcp(50000, 22, 7, 0, SYN, 1000, &[], b"");
    let (v, _) = run(&mut p, 3, OUT_PORT, &other);
    assert!(matches!(v, Verdict::Drop(_)), "{v:?}");
    // Static NAT: the DMZ database at 192.0.2.200 (access rule on the
    // real address).
    let db = from_outside(SERVER, DB_MAPPED).tcp(50001, 5432, 7, 0, SYN, 1000, &SYN_OPTS, b"");
    let (v, inn) = run(&mut p, 4, OUT_PORT, &db);
    assert_eq!(v, Verdict::Forward(DMZ_PORT));
    assert_eq!((Ip(&inn).dst(), Ip(&inn).ports().1), (DMZ_DB, 5432));
    assert!(Ip(&inn).checksums_ok());
}

/// Port block allocation with one block per host: when the host's block
/// is full, its next connection is a counted drop, never a reused port.
#[test]
fn exhaustion_is_a_counted_drop() {
    let mut p = pipeline(Some(1));
    let mut seen = std::collections::HashSet::new();
    let mut last = None;
    for i in 0..5000u16 {
        let s = from_host(SERVER).udp(10000 + i, 53, b"q");
        let (v, out) = run(&mut p, 0, IN_PORT, &s);
        if v != Verdict::Forward(OUT_PORT) {
            last = Some(v);
            break;
        }
        assert!(seen.insert(Ip(&out).ports().0), "a port handed out twice");
    }
    assert_eq!(last, Some(Verdict::Drop(DropReason::NatExhausted)));
    // Every port came from one block, all of it: 4096 ports, or 3072 in
    // the last block (62464-65535).
    let blocks: std::collections::HashSet<u16> = seen.iter().map(|p| (p - 1024) / 4096).collect();
    assert_eq!(blocks.len(), 1);
    let b = *blocks.iter().next().unwrap();
    assert_eq!(seen.len(), if b == 15 { 3072 } else { 4096 });
    assert_eq!(p.nat_counters().unwrap().exhausted, 1);
}

/// Multi-session xlates (UDP other than DNS, ICMP, dynamic NAT) outlive
/// their connections: released when the flow expires, stale once idle
/// beyond the xlate timeout (visible), then reaped and their port back.
#[test]
fn multi_session_xlates_are_reaped_when_idle() {
    let mut p = pipeline(None);
    let q = from_host(SERVER).udp(5353, 123, b"q");
    run(&mut p, 0, IN_PORT, &q);
    let x = p.xlates(Timestamp::from_secs(1), 8);
    assert_eq!((x.len(), x[0].refcnt, x[0].sessions), (1, 1, dataplane::nat::Sessions::MultiSession));
    // The UDP flow (120 s) expires: the xlate is released, not removed.
    let tick = |p: &mut Pipeline, from_ms: u64| {
        for ms in 0..300 {
            p.poll_timers(Timestamp::from_millis(from_ms + ms));
        }
    };
    tick(&mut p, 121_000);
    let x = p.xlates(Timestamp::from_secs(122), 8);
    assert_eq!((x.len(), x[0].refcnt, x[0].stale), (1, 0, false), "{x:?}");
    // Idle 60 s more with no connection: stale, listed, then reaped.
    let t = Timestamp::from_millis(121_300 + 60_000);
    assert!(p.xlates(t, 8)[0].stale, "idle beyond the timeout, not reaped yet");
    tick(&mut p, 121_300 + 60_000);
    assert!(p.xlates(t, 8).is_empty());
    let c = p.nat_counters().unwrap();
    assert_eq!((c.xlates_reaped, c.xlates_removed), (1, 0));
    assert_eq!(p.nat_pools()[0].ports_in_use, 0);
}

/// Per-session xlates (TCP and DNS by default, N3) go with their
/// connection: removed the moment conntrack removes the flow, their port
/// back in the pool; two connections from one real endpoint share one
/// xlate, which goes with the second.
#[test]
fn per_session_xlates_go_with_their_connection() {
    let mut p = pipeline(None);
    // A DNS query: per-session; the flow expires after 120 s idle.
    run(&mut p, 0, IN_PORT, &from_host(SERVER).udp(5353, 53, b"q"));
    let x = p.xlates(Timestamp::from_secs(1), 8);
    assert_eq!((x[0].refcnt, x[0].sessions), (1, dataplane::nat::Sessions::PerSession));
    // Two TCP connections from one endpoint to two servers: one xlate.
    let other = Ipv4Addr::new(93, 184, 216, 35);
    for (i, srv) in [SERVER, other].into_iter().enumerate() {
        let syn = from_host(srv).tcp(40000, 443, 100, 0, SYN, 64240, &SYN_OPTS, b"");
        assert_eq!(run(&mut p, 1 + i as u64, IN_PORT, &syn).0, Verdict::Forward(OUT_PORT));
    }
    let tcp: Vec<_> = p.xlates(Timestamp::from_secs(1), 8).into_iter().filter(|x| x.proto == "tcp").collect();
    assert_eq!((tcp.len(), tcp[0].refcnt), (1, 2), "{tcp:?}");
    assert_eq!(p.nat_pools()[0].ports_in_use, 2);
    // The first connection is reset; it lingers closed for 10 s, then goes.
    let rst = from_host(SERVER).tcp(40000, 443, 101, 0, RST, 0, &[], b"");
    run(&mut p, 3, IN_PORT, &rst);
    for ms in (10_000..12_000).step_by(10) {
        p.poll_timers(Timestamp::from_millis(ms));
    }
    let tcp: Vec<_> = p.xlates(Timestamp::from_secs(12), 8).into_iter().filter(|x| x.proto == "tcp").collect();
    assert_eq!((tcp.len(), tcp[0].refcnt), (1, 1), "the other connection holds it: {tcp:?}");
    // The second one's SYN times out (30 s): the xlate goes at once.
    for ms in (30_000..32_000).step_by(10) {
        p.poll_timers(Timestamp::from_millis(ms));
    }
    let x = p.xlates(Timestamp::from_secs(32), 8);
    assert!(x.iter().all(|x| x.proto != "tcp"), "{x:?}");
    assert_eq!(p.nat_counters().unwrap().xlates_removed, 1);
    assert_eq!(p.nat_pools()[0].ports_in_use, 1, "the DNS query's port only");
    // The DNS flow expires (120 s): its xlate goes too.
    for ms in (120_000..122_000).step_by(10) {
        p.poll_timers(Timestamp::from_millis(ms));
    }
    assert!(p.xlates(Timestamp::from_secs(122), 8).is_empty());
    let c = p.nat_counters().unwrap();
    assert_eq!((c.xlates_removed, c.xlates_reaped), (2, 0));
    assert_eq!(p.nat_pools()[0].ports_in_use, 0);
}

/// A dynamic translation is made for a connection's initiator only: an
/// inside host answering a connection made to its real address answers
/// from it (no port taken from the pool).
#[test]
fn the_responder_of_a_connection_is_not_translated() {
    let mut p = pipeline(None);
    let syn = from_outside(SERVER, SSH_HOST).tcp(50000, 22, 1, 0, SYN, 64240, &SYN_OPTS, b"");
    assert_eq!(run(&mut p, 0, OUT_PORT, &syn).0, Verdict::Forward(IN_PORT));
    let synack = PacketBuilder::new(HOST_MAC, IN_MAC, SSH_HOST, SERVER).tcp(22, 50000, 9, 2, SYN | ACK, 64240, &SYN_OPTS, b"");
    let (v, out) = run(&mut p, 1, IN_PORT, &synack);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    assert_eq!((Ip(&out).src(), Ip(&out).ports().0), (SSH_HOST, 22));
    assert!(p.xlates(Timestamp::from_secs(1), 8).is_empty());
    assert_eq!(p.nat_pools()[0].ports_in_use, 0);
}

/// New rules over the same pools go in with a policy (N9): the xlates and
/// their ports stay (an existing connection's return traffic still comes
/// back), new connections meet the new rules; a plan over other pools
/// (here another block size) is refused and nothing changes (N6).
#[test]
fn new_rules_swap_in_over_the_same_pools() {
    use dataplane::pipeline::{NatPlan, Policy};
    let mut p = pipeline(None);
    let cfg = nat_config();
    let policy = |plan| Box::new(Policy::build(&cfg.interfaces, &cfg.rules, cfg.timeouts).unwrap().with_nat(plan));
    // A PAT connection under the old rules.
    let syn = from_host(SERVER).tcp(40000, 443, 100, 0, SYN, 64240, &SYN_OPTS, b"");
    let (_, out) = run(&mut p, 0, IN_PORT, &syn);
    let mapped_port = Ip(&out).ports().0;
    // New rules: host .11's dynamic NAT rule gone (it is PAT'ed now).
    let mut new = spec(None);
    new.rules.remove(0);
    let ifaces = cfg.interfaces.len();
    let Ok(old) = p.set_policy(policy(NatPlan::new(&new, ifaces, 1).unwrap())) else { panic!("same pools: taken") };
    assert!(old.nat_plan().is_some(), "the replaced plan comes back");
    let synack = from_outside(SERVER, PAT_ADDR).tcp(443, mapped_port, 5000, 101, SYN | ACK, 65535, &SYN_OPTS, b"");
    assert_eq!(run(&mut p, 1, OUT_PORT, &synack).0, Verdict::Forward(IN_PORT), "the xlate stayed");
    let eleven = PacketBuilder::new(HOST_MAC, IN_MAC, Ipv4Addr::new(198, 18, 1, 11), SERVER).udp(5000, 123, b"t");
    let (v, out) = run(&mut p, 2, IN_PORT, &eleven);
    assert_eq!((v, Ip(&out).src()), (Verdict::Forward(OUT_PORT), PAT_ADDR), "PAT now, not dynamic NAT");
    // Other pools: refused, the running rules stay.
    let mut other = spec(None);
    other.pools[0].pat = Some(PatSpec { block_size: 512, reserved_ports: false, max_per_host: None });
    let refused = p.set_policy(policy(NatPlan::new(&other, ifaces, 1).unwrap()));
    assert!(refused.is_err());
    let twelve = PacketBuilder::new(HOST_MAC, IN_MAC, Ipv4Addr::new(198, 18, 1, 12), SERVER).udp(5001, 123, b"t");
    assert_eq!(Ip(&run(&mut p, 3, IN_PORT, &twelve).1).src(), PAT_ADDR);
}

/// The flow log's records carry each connection's translation (RFC 8158's
/// NAT fields for IPFIX, the mapped endpoints in syslog): outbound PAT and
/// dynamic NAT by their xlates — still right after a per-session xlate
/// went with its connection, before the log was drained —, connections to
/// static PAT and static NAT addresses by their rules, an echo by its
/// identifier; an untranslated connection carries none.
#[test]
fn flow_records_carry_their_translation() {
    use dataplane::conntrack::{EndReason, FlowEvent, FlowNat, FlowRecord};
    use std::net::IpAddr;
    let mut p = pipeline(None);
    p.log_flows(None);
    // Outbound PAT, reset at 3 ms: it ends 10 s later.
    let syn = from_host(SERVER).tcp(40000, 443, 100, 0, SYN, 64240, &SYN_OPTS, b"");
    let (_, out) = run(&mut p, 0, IN_PORT, &syn);
    let mport = Ip(&out).ports().0;
    run(&mut p, 1, OUT_PORT, &from_outside(SERVER, PAT_ADDR).tcp(443, mport, 5000, 101, SYN | ACK, 65535, &SYN_OPTS, b""));
    run(&mut p, 3, IN_PORT, &from_host(SERVER).tcp(40000, 443, 101, 0, RST, 0, &[], b""));
    // Dynamic NAT (host .11), static PAT and static NAT inbound, a ping,
    // and ssh to an inside host's real address.
    let host11 = Ipv4Addr::new(198, 18, 1, 11);
    let from11 = PacketBuilder::new(HOST_MAC, IN_MAC, host11, SERVER).tcp(41000, 443, 1, 0, SYN, 1000, &[], b"");
    assert_eq!(run(&mut p, 4, IN_PORT, &from11).0, Verdict::Forward(OUT_PORT));
    let web = from_outside(SERVER, WEB_MAPPED).tcp(50000, 8080, 7, 0, SYN, 1000, &SYN_OPTS, b"");
    assert_eq!(run(&mut p, 5, OUT_PORT, &web).0, Verdict::Forward(IN_PORT));
    let db = from_outside(SERVER, DB_MAPPED).tcp(50001, 5432, 7, 0, SYN, 1000, &SYN_OPTS, b"");
    assert_eq!(run(&mut p, 6, OUT_PORT, &db).0, Verdict::Forward(DMZ_PORT));
    let (v, out) = run(&mut p, 7, IN_PORT, &from_host(SERVER).icmp(8, 0, (0x4242, 1), b"ping"));
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    let echo_id = Ip(&out).echo_id();
    let ssh = from_outside(SERVER, SSH_HOST).tcp(50002, 22, 7, 0, SYN, 1000, &SYN_OPTS, b"");
    assert_eq!(run(&mut p, 8, OUT_PORT, &ssh).0, Verdict::Forward(IN_PORT));
    for ms in (10_000..12_000).step_by(10) {
        p.poll_timers(Timestamp::from_millis(ms));
    }
    assert!(p.xlates(Timestamp::from_secs(12), 16).iter().all(|x| x.real != format!("{HOST}:40000")), "the PAT xlate is gone");
    let mut records: Vec<FlowRecord> = vec![];
    p.drain_flow_log(|r| records.push(*r));
    let nat_of = |event: FlowEvent, src: Ipv4Addr, sport: u16| {
        let r = records.iter().find(|r| r.event == event && r.tuple.src == IpAddr::V4(src) && r.tuple.src_port == sport);
        r.unwrap_or_else(|| panic!("no {event:?} record of {src}:{sport} in {records:#?}")).nat
    };
    let pat = Some(FlowNat { src: PAT_ADDR, src_port: mport, dst: SERVER, dst_port: 443 });
    assert_eq!(nat_of(FlowEvent::Built, HOST, 40000), pat);
    assert_eq!(nat_of(FlowEvent::Ended(EndReason::Reset), HOST, 40000), pat, "annotated before its xlate went");
    assert_eq!(nat_of(FlowEvent::Built, host11, 41000), Some(FlowNat { src: NAT_ADDR, src_port: 41000, dst: SERVER, dst_port: 443 }));
    assert_eq!(nat_of(FlowEvent::Built, SERVER, 50000), Some(FlowNat { src: SERVER, src_port: 50000, dst: WEB_MAPPED, dst_port: 8080 }));
    assert_eq!(nat_of(FlowEvent::Built, SERVER, 50001), Some(FlowNat { src: SERVER, src_port: 50001, dst: DB_MAPPED, dst_port: 5432 }));
    assert_eq!(nat_of(FlowEvent::Built, SERVER, 50002), None, "ssh to a real address: untranslated");
    let ping = records.iter().find(|r| r.event == FlowEvent::Built && r.tuple.proto == 1).expect("the ping's record");
    let m = ping.nat.expect("the ping is translated");
    assert_eq!(m.src, PAT_ADDR);
    assert_eq!((m.src_port | m.dst_port, ping.tuple.src_port | ping.tuple.dst_port), (echo_id, 0x4242), "the identifier where the tuple has it");
}

/// (seq, ack, flags) of a TCP frame.
fn seq_ack(frame: &[u8]) -> (u32, u32, u8) {
    let l = Ip(frame).l3()[20..].to_vec();
    (u32::from_be_bytes([l[4], l[5], l[6], l[7]]), u32::from_be_bytes([l[8], l[9], l[10], l[11]]), l[13])
}

/// The SYN proxy through NAT (docs/flood.md, "SYN proxy"): over the
/// embryonic limit, a SYN from outside to a static PAT's mapped endpoint is
/// answered from that mapped endpoint and the server sees only a verified
/// client; an inside host's SYN under PAT is answered from the server's
/// address and the proxy's segments to the server leave from the host's
/// mapped endpoint; both directions translated, every checksum right.
#[test]
fn the_syn_proxy_answers_through_nat() {
    use dataplane::conntrack::limits::Remote;
    use dataplane::conntrack::{LimitSet, LimitSpec};
    let mut p = pipeline(None);
    p.set_limits(&LimitSpec { global: LimitSet { max_embryonic: Some(1), ..LimitSet::default() }, rules: vec![] });
    p.set_remote_limits(&Remote { places: 1, ..Remote::default() });
    // One half-open connection takes the embryonic place.
    let (v, _) = run(&mut p, 0, IN_PORT, &from_host(SERVER).tcp(40000, 443, 100, 0, SYN, 64240, &SYN_OPTS, b""));
    assert_eq!(v, Verdict::Forward(OUT_PORT));

    // Static PAT inbound: 192.0.2.80:8080 is HOST:80.
    let syn = from_outside(SERVER, WEB_MAPPED).tcp(50000, 8080, 7, 0, SYN, 1000, &SYN_OPTS, b"");
    let (v, sa) = run(&mut p, 1, OUT_PORT, &syn);
    assert_eq!(v, Verdict::Forward(OUT_PORT), "answered by the node");
    assert_eq!((Ip(&sa).src(), Ip(&sa).ports(), Ip(&sa).dst()), (WEB_MAPPED, (8080, 50000), SERVER), "from the mapped endpoint");
    assert!(Ip(&sa).checksums_ok());
    let (cookie, ack, flags) = seq_ack(&sa);
    assert_eq!((ack, flags), (8, SYN | ACK));
    let ack = from_outside(SERVER, WEB_MAPPED).tcp(50000, 8080, 8, cookie.wrapping_add(1), ACK, 1000, &[], b"");
    let (v, s) = run(&mut p, 2, OUT_PORT, &ack);
    assert_eq!(v, Verdict::Forward(IN_PORT));
    assert_eq!((Ip(&s).dst(), Ip(&s).ports(), seq_ack(&s).2), (HOST, (50000, 80), SYN), "the SYN to the real server");
    assert!(Ip(&s).checksums_ok());
    // The client's request before the server answered: held (translated
    // in already), then sent behind the last ACK.
    let early = from_outside(SERVER, WEB_MAPPED).tcp(50000, 8080, 8, cookie.wrapping_add(1), ACK, 1000, &[], b"GET");
    assert_eq!(run(&mut p, 2, OUT_PORT, &early).0, Verdict::Consumed);
    let synack = from_host(SERVER).tcp(80, 50000, 900, 8, SYN | ACK, 1000, &SYN_OPTS, b"");
    let (v, last) = run(&mut p, 3, IN_PORT, &synack);
    assert_eq!(v, Verdict::Forward(IN_PORT), "the handshake's last ACK back to the server");
    assert_eq!((Ip(&last).src(), Ip(&last).dst(), seq_ack(&last)), (SERVER, HOST, (8, 901, ACK)));
    assert!(Ip(&last).checksums_ok());
    let mut released = vec![];
    p.drain_generated(|port, f| released.push((port, f.to_vec())));
    assert_eq!(released.len(), 1);
    let (port, r) = &released[0];
    assert_eq!(*port, IN_PORT);
    assert_eq!((Ip(r).src(), Ip(r).dst(), Ip(r).ports(), seq_ack(r)), (SERVER, HOST, (50000, 80), (8, 901, ACK)), "to the real server, in its space");
    assert!(Ip(r).checksums_ok());
    let data = from_host(SERVER).tcp(80, 50000, 901, 8, ACK, 1000, &[], b"hello");
    let (v, out) = run(&mut p, 4, IN_PORT, &data);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    assert_eq!((Ip(&out).src(), Ip(&out).ports().0, seq_ack(&out).0), (WEB_MAPPED, 8080, cookie.wrapping_add(1)));
    assert!(Ip(&out).checksums_ok());

    // PAT outbound: the inside host's SYN is answered from the server.
    let syn = from_host(SERVER).tcp(42000, 443, 500, 0, SYN, 64240, &SYN_OPTS, b"");
    let (v, sa) = run(&mut p, 5, IN_PORT, &syn);
    assert_eq!(v, Verdict::Forward(IN_PORT));
    assert_eq!((Ip(&sa).src(), Ip(&sa).dst(), Ip(&sa).ports()), (SERVER, HOST, (443, 42000)));
    let cookie = seq_ack(&sa).0;
    let ack = from_host(SERVER).tcp(42000, 443, 501, cookie.wrapping_add(1), ACK, 502, &[], b"");
    let (v, s) = run(&mut p, 6, IN_PORT, &ack);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    assert_eq!((Ip(&s).src(), seq_ack(&s)), (PAT_ADDR, (500, 0, SYN)), "the SYN leaves from the pool");
    assert!(Ip(&s).checksums_ok());
    let mapped = Ip(&s).ports().0;
    let early = from_host(SERVER).tcp(42000, 443, 501, cookie.wrapping_add(1), ACK, 502, &[], b"GET");
    assert_eq!(run(&mut p, 6, IN_PORT, &early).0, Verdict::Consumed, "held");
    let synack = from_outside(SERVER, PAT_ADDR).tcp(443, mapped, 7000, 501, SYN | ACK, 29200, &SYN_OPTS, b"");
    let (v, last) = run(&mut p, 7, OUT_PORT, &synack);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    assert_eq!((Ip(&last).src(), Ip(&last).ports(), seq_ack(&last)), (PAT_ADDR, (mapped, 443), (501, 7001, ACK)), "the last ACK from the mapped endpoint");
    assert!(Ip(&last).checksums_ok());
    let mut released = vec![];
    p.drain_generated(|port, f| released.push((port, f.to_vec())));
    assert_eq!(released.len(), 1);
    let (port, r) = &released[0];
    assert_eq!(*port, OUT_PORT);
    assert_eq!((Ip(r).src(), Ip(r).ports(), seq_ack(r)), (PAT_ADDR, (mapped, 443), (501, 7001, ACK)), "from the mapped endpoint, in the server's space");
    assert!(Ip(r).checksums_ok());
    // Spliced through PAT (the NAT fast path): both spaces translated.
    let req = from_host(SERVER).tcp(42000, 443, 501, cookie.wrapping_add(1), ACK, 502, &[], b"GET");
    let (v, out) = run(&mut p, 8, IN_PORT, &req);
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    assert_eq!((Ip(&out).src(), seq_ack(&out).1), (PAT_ADDR, 7001));
    assert!(Ip(&out).checksums_ok());
    let resp = from_outside(SERVER, PAT_ADDR).tcp(443, mapped, 7001, 504, ACK, 29200, &[], b"200");
    let (v, back) = run(&mut p, 9, OUT_PORT, &resp);
    assert_eq!(v, Verdict::Forward(IN_PORT));
    assert_eq!((Ip(&back).dst(), Ip(&back).ports().1, seq_ack(&back).0), (HOST, 42000, cookie.wrapping_add(1)));
    assert!(Ip(&back).checksums_ok());
    assert!(p.counters().fast_path > 0);
    assert_eq!((p.counters().syn_proxy.opened, p.counters().syn_proxy.spliced), (2, 2));
    assert_eq!((p.counters().syn_proxy.held, p.counters().syn_proxy.released), (2, 2));
}
