//! The SYN proxy through a whole single-node pipeline (issue 15 item 4,
//! docs/flood.md "SYN proxy"): over a rule's embryonic limit an outside
//! client's SYN is answered by the node with a cookie SYN-ACK and the inside
//! server sees nothing; the client's ACK of the cookie becomes the SYN to
//! the server; the server's SYN-ACK becomes the handshake's last ACK back
//! to the server; from then on both sequence spaces are translated, every
//! checksum stays right. Forged ACKs open nothing.

mod common;

use common::*;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::limits::Remote;
use dataplane::conntrack::tcp_flags::{ACK, PSH, RST, SYN};
use dataplane::conntrack::{LimitSet, LimitSpec};
use dataplane::pipeline::{Pipeline, Verdict};
use dataplane::wire::build::PacketBuilder;
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::synproxy::syn_mss;
use dataplane::wire::tcp::TcpPacket;
use dataplane::{DropReason, Timestamp};
use std::net::Ipv4Addr;

const T: Timestamp = Timestamp::from_millis(5);
const CLIENT: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 8);

fn node() -> Pipeline {
    let mut cfg = config();
    cfg.static_neighbors = vec![(GW, GW_MAC), (HOST, HOST_MAC)];
    let mut p = Pipeline::new(cfg).unwrap();
    p.set_limits(&LimitSpec { global: LimitSet::default(), rules: vec![("web-in".into(), LimitSet { max_embryonic: Some(1), ..LimitSet::default() })] });
    p.set_remote_limits(&Remote { places: 1, ..Remote::default() });
    p
}

/// The frame `process` left, parsed: IPv4 source, destination, and the TCP
/// segment's (sport, dport, seq, ack, flags, window, MSS option, payload
/// length); both checksums checked.
#[derive(Debug, PartialEq, Eq)]
struct Seg {
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ports: (u16, u16),
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    mss: Option<u16>,
    len: usize,
}

fn parse(b: &VecBuf) -> Seg {
    let ip = Ipv4Packet::new_checked(&b.data()[14..]).unwrap();
    assert!(ip.verify_checksum(), "IPv4 checksum");
    assert_eq!(usize::from(ip.total_len()), b.data().len() - 14, "total length = frame");
    let tcp = TcpPacket::new_checked(ip.payload()).unwrap();
    assert!(tcp.verify_checksum(ip.src(), ip.dst()), "TCP checksum");
    Seg {
        src: ip.src(),
        dst: ip.dst(),
        ports: (tcp.src_port(), tcp.dst_port()),
        seq: tcp.seq(),
        ack: tcp.ack(),
        flags: tcp.flags(),
        window: tcp.window(),
        mss: syn_mss(tcp.options()),
        len: tcp.payload().len(),
    }
}

fn from_client(p: &mut Pipeline, sport: u16, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> (Verdict, VecBuf) {
    let opts: &[u8] = if flags & SYN != 0 { &SYN_OPTS } else { &[] };
    let f = PacketBuilder::new(GW_MAC, OUT_MAC, CLIENT, HOST).tcp(sport, 80, seq, ack, flags, 502, opts, payload);
    let mut b = VecBuf::new(&f);
    (p.process(T, OUT_PORT, &mut b), b)
}

fn from_server(p: &mut Pipeline, dport: u16, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> (Verdict, VecBuf) {
    let f = PacketBuilder::new(HOST_MAC, IN_MAC, HOST, CLIENT).tcp(80, dport, seq, ack, flags, 29200, &[2, 4, 0x05, 0xb4], payload);
    let mut b = VecBuf::new(&f);
    (p.process(T, IN_PORT, &mut b), b)
}

#[test]
fn over_the_embryonic_limit_the_node_proxies_the_handshake() {
    let mut p = node();
    // The first half-open connection fills web-in's embryonic limit (1).
    assert_eq!(from_client(&mut p, 1000, 1, 0, SYN, b"").0, Verdict::Forward(IN_PORT));
    // The next SYN is answered by the node: a SYN-ACK back to the client,
    // sent from the server's address, MSS of the inside link, nothing kept.
    let (v, b) = from_client(&mut p, 2000, 100, 0, SYN, b"");
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    let sa = parse(&b);
    assert_eq!((sa.src, sa.dst, sa.ports, sa.ack, sa.flags, sa.mss, sa.len), (HOST, CLIENT, (80, 2000), 101, SYN | ACK, Some(1460), 0));
    assert_eq!(&b.data()[..12], &[GW_MAC, OUT_MAC].concat()[..], "to the outside gateway");
    let cookie = sa.seq;
    assert_eq!(p.flow_count(), 1, "the cookie keeps no state");
    // A forged ACK opens nothing.
    assert_eq!(from_client(&mut p, 2001, 101, 0xdead_beef, ACK, b"").0, Verdict::Drop(DropReason::TcpNoFlow));
    // The client's ACK of the cookie: the server gets the SYN, with the
    // client's ISN and MSS and no other option.
    let (v, b) = from_client(&mut p, 2000, 101, cookie.wrapping_add(1), ACK, b"");
    assert_eq!(v, Verdict::Forward(IN_PORT));
    let s = parse(&b);
    assert_eq!((s.src, s.dst, s.ports, s.seq, s.ack, s.flags, s.window, s.mss, s.len), (CLIENT, HOST, (2000, 80), 100, 0, SYN, 502, Some(1460), 0));
    assert_eq!(p.flow_count(), 2);
    // The client's request before the server answered: dropped, it
    // retransmits.
    assert_eq!(from_client(&mut p, 2000, 101, cookie.wrapping_add(1), ACK | PSH, b"GET /").0, Verdict::Drop(DropReason::SynProxyPending));
    // The server's SYN-ACK never reaches the client: the server gets the
    // handshake's last ACK (the client's window) instead.
    const S: u32 = 7000;
    let (v, b) = from_server(&mut p, 2000, S, 101, SYN | ACK, b"");
    assert_eq!(v, Verdict::Forward(IN_PORT));
    let last = parse(&b);
    assert_eq!((last.src, last.dst, last.ports, last.seq, last.ack, last.flags, last.window, last.mss), (CLIENT, HOST, (2000, 80), 101, S + 1, ACK, 502, None));
    // Spliced: the retransmitted request reaches the server acknowledging
    // its own ISN, the answer reaches the client numbered from the cookie.
    let (v, b) = from_client(&mut p, 2000, 101, cookie.wrapping_add(1), ACK | PSH, b"GET /");
    assert_eq!(v, Verdict::Forward(IN_PORT));
    let r_frame = b.data().to_vec();
    let r = parse(&b);
    assert_eq!((r.seq, r.ack, r.len), (101, S + 1, 5));
    let (v, b) = from_server(&mut p, 2000, S + 1, 106, ACK | PSH, b"200 OK");
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    let a = parse(&b);
    assert_eq!((a.src, a.dst, a.seq, a.ack, a.len), (HOST, CLIENT, cookie.wrapping_add(1), 106, 6));
    // A router towards the server cannot pass the request on (PMTUD): its
    // ICMP error quotes the segment as the server side saw it; the client
    // gets it quoting the segment as it sent it (ack in the cookie's space).
    let err = icmp_error_frame(&r_frame, HOST_MAC, Ipv4Addr::new(198, 18, 1, 254), IN_MAC, 3, 4, 1400);
    let mut eb = VecBuf::new(&err);
    assert_eq!(p.process(T, IN_PORT, &mut eb), Verdict::Forward(OUT_PORT));
    let ip = Ipv4Packet::new_checked(&eb.data()[14..]).unwrap();
    let icmp = dataplane::wire::icmp::Icmpv4Packet::new_checked(ip.payload()).unwrap();
    assert!(icmp.verify_checksum(), "ICMP checksum");
    let quoted = Ipv4Packet::new_checked(&ip.payload()[8..]).unwrap();
    let qt = &quoted.payload()[..8];
    assert_eq!(u32::from_be_bytes([qt[4], qt[5], qt[6], qt[7]]), 101, "quoted seq: the client's");
    let qa = &ip.payload()[8 + quoted.header_len() + 8..8 + quoted.header_len() + 12];
    assert_eq!(u32::from_be_bytes([qa[0], qa[1], qa[2], qa[3]]), cookie.wrapping_add(1), "quoted ack: in the cookie's space");
    // The client's FIN and the server's RST are translated too.
    let (v, b) = from_client(&mut p, 2000, 106, cookie.wrapping_add(7), ACK | dataplane::conntrack::tcp_flags::FIN, b"");
    assert_eq!(v, Verdict::Forward(IN_PORT));
    assert_eq!(parse(&b).ack, S + 7);
    let (v, b) = from_server(&mut p, 2000, S + 7, 107, RST | ACK, b"");
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    assert_eq!(parse(&b).seq, cookie.wrapping_add(7));
    let c = p.counters();
    assert_eq!((c.syn_proxy.cookies_sent, c.syn_proxy.opened, c.syn_proxy.spliced, c.syn_proxy.bad_cookies), (1, 1, 1, 1));
    let l = p.limits().unwrap().classes();
    assert_eq!((l[1].name.as_str(), l[1].syn_proxy, l[1].refused), ("web-in", [1, 1], [0; 4]));
}

#[test]
fn without_the_proxy_the_syn_is_refused_and_an_outside_flood_leaves_no_state() {
    let mut p = node();
    assert_eq!(from_client(&mut p, 1000, 1, 0, SYN, b"").0, Verdict::Forward(IN_PORT));
    // 1000 SYNs over the limit: 1000 cookies, one flow still.
    for i in 0..1000u16 {
        assert_eq!(from_client(&mut p, 3000 + i, u32::from(i) * 7, 0, SYN, b"").0, Verdict::Forward(OUT_PORT));
    }
    assert_eq!(p.flow_count(), 1);
    assert_eq!(p.counters().syn_proxy.cookies_sent, 1000);
    // With `syn-proxy: false` the rule refuses instead.
    p.set_limits(&LimitSpec {
        global: LimitSet::default(),
        rules: vec![("web-in".into(), LimitSet { max_embryonic: Some(1), syn_proxy: false, ..LimitSet::default() })],
    });
    p.set_remote_limits(&Remote { places: 1, ..Remote::default() });
    assert_eq!(from_client(&mut p, 5000, 1, 0, SYN, b"").0, Verdict::Drop(DropReason::EmbryonicLimit));
}
