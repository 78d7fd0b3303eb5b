//! The SYN proxy through a whole single-node pipeline (issue 15 item 4,
//! docs/flood.md "SYN proxy"): over a rule's embryonic limit an outside
//! client's SYN is answered by the node with a cookie SYN-ACK and the inside
//! server sees nothing; the client's ACK of the cookie becomes the SYN to
//! the server; the server's SYN-ACK becomes the handshake's last ACK back
//! to the server; from then on both sequence spaces are translated, every
//! checksum stays right. Forged ACKs open nothing. The client's segments
//! sent before the server answered are held and follow the last ACK,
//! translated; a hold is bounded per connection and freed (counted) when
//! the connection never splices.

mod common;

use common::*;
use dataplane::buf::{PacketBuf, VecBuf};
use dataplane::conntrack::limits::Remote;
use dataplane::conntrack::tcp_flags::{ACK, PSH, RST, SYN};
use dataplane::conntrack::{LimitSet, LimitSpec};
use dataplane::pipeline::{Pipeline, Verdict, HOLD_PER_CONN, HOLD_TIMEOUT};
use dataplane::wire::build::PacketBuilder;
use dataplane::wire::ipv4::Ipv4Packet;
use dataplane::wire::synproxy::syn_mss;
use dataplane::wire::tcp::TcpPacket;
use dataplane::{DropReason, PortId, Timestamp};
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
    from_client_at(p, T, sport, seq, ack, flags, payload)
}

fn from_client_at(p: &mut Pipeline, now: Timestamp, sport: u16, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> (Verdict, VecBuf) {
    let opts: &[u8] = if flags & SYN != 0 { &SYN_OPTS } else { &[] };
    let f = PacketBuilder::new(GW_MAC, OUT_MAC, CLIENT, HOST).tcp(sport, 80, seq, ack, flags, 502, opts, payload);
    let mut b = VecBuf::new(&f);
    (p.process(now, OUT_PORT, &mut b), b)
}

fn from_server(p: &mut Pipeline, dport: u16, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> (Verdict, VecBuf) {
    from_server_at(p, T, dport, seq, ack, flags, payload)
}

fn from_server_at(p: &mut Pipeline, now: Timestamp, dport: u16, seq: u32, ack: u32, flags: u8, payload: &[u8]) -> (Verdict, VecBuf) {
    let f = PacketBuilder::new(HOST_MAC, IN_MAC, HOST, CLIENT).tcp(80, dport, seq, ack, flags, 29200, &[2, 4, 0x05, 0xb4], payload);
    let mut b = VecBuf::new(&f);
    (p.process(now, IN_PORT, &mut b), b)
}

/// The frames the node generated since the last call (released held
/// segments among them), in order.
fn drained(p: &mut Pipeline) -> Vec<(PortId, VecBuf)> {
    let mut v = vec![];
    p.drain_generated(|port, f| v.push((port, VecBuf::new(f))));
    v
}

/// A node with web-in's embryonic place taken and a proxied connection
/// from `sport` (client ISN 100) opened to the server: the cookie.
fn connecting(p: &mut Pipeline, sport: u16) -> u32 {
    assert_eq!(from_client(p, 1000, 1, 0, SYN, b"").0, Verdict::Forward(IN_PORT));
    let (v, b) = from_client(p, sport, 100, 0, SYN, b"");
    assert_eq!(v, Verdict::Forward(OUT_PORT));
    let cookie = parse(&b).seq;
    let (v, b) = from_client(p, sport, 101, cookie.wrapping_add(1), ACK, b"");
    assert_eq!((v, parse(&b).flags), (Verdict::Forward(IN_PORT), SYN));
    cookie
}

/// (held, released, held_dropped) of the SYN proxy.
fn hold_counts(p: &Pipeline) -> (u64, u64, u64) {
    let c = p.counters().syn_proxy;
    (c.held, c.released, c.held_dropped)
}

#[test]
fn over_the_embryonic_limit_the_node_proxies_the_handshake() {
    proxies_the_handshake(true);
}

/// The same with the fast path off: the general path holds and releases.
#[test]
fn the_general_path_proxies_the_handshake_too() {
    proxies_the_handshake(false);
}

fn proxies_the_handshake(fast: bool) {
    let mut p = node();
    p.set_fast_path(fast);
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
    // The client's request before the server answered, in two segments:
    // held (nothing leaves), not dropped.
    assert_eq!(from_client(&mut p, 2000, 101, cookie.wrapping_add(1), ACK, b"GET").0, Verdict::Consumed);
    assert_eq!(from_client(&mut p, 2000, 104, cookie.wrapping_add(1), ACK | PSH, b" /").0, Verdict::Consumed);
    assert!(drained(&mut p).is_empty(), "nothing reaches the server before it answered");
    assert_eq!(hold_counts(&p), (2, 0, 0));
    // The server's SYN-ACK never reaches the client: the server gets the
    // handshake's last ACK (the client's window) instead.
    const S: u32 = 7000;
    let (v, b) = from_server(&mut p, 2000, S, 101, SYN | ACK, b"");
    assert_eq!(v, Verdict::Forward(IN_PORT));
    let last = parse(&b);
    assert_eq!((last.src, last.dst, last.ports, last.seq, last.ack, last.flags, last.window, last.mss), (CLIENT, HOST, (2000, 80), 101, S + 1, ACK, 502, None));
    // Spliced: right behind the last ACK (the SYN-ACK's verdict), the held
    // request reaches the server in arrival order, acknowledging its own
    // ISN, routed like any packet to it.
    let out = drained(&mut p);
    assert_eq!(out.len(), 2);
    for (k, (seq, len, flags)) in [(101, 3, ACK), (104, 2, ACK | PSH)].into_iter().enumerate() {
        let (port, b) = &out[k];
        assert_eq!(*port, IN_PORT);
        assert_eq!(&b.data()[..12], &[HOST_MAC, IN_MAC].concat()[..], "to the server");
        let r = parse(b);
        assert_eq!((r.src, r.dst, r.ports, r.seq, r.ack, r.flags, r.len), (CLIENT, HOST, (2000, 80), seq, S + 1, flags, len));
        assert_eq!(Ipv4Packet::new_checked(&b.data()[14..]).unwrap().ttl(), 63);
    }
    assert_eq!(hold_counts(&p), (2, 2, 0));
    let r_frame = out[1].1.data().to_vec();
    // The answer reaches the client numbered from the cookie.
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
    assert_eq!(u32::from_be_bytes([qt[4], qt[5], qt[6], qt[7]]), 104, "quoted seq: the client's");
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
    assert_eq!(c.drops[DropReason::SynProxyPending.index()], 0);
    assert_eq!(c.packets, c.forwarded + c.consumed + c.arp_replies + c.icmp_echo_replies + c.drops.iter().sum::<u64>());
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

#[test]
fn a_reset_while_connecting_frees_the_hold() {
    for fast in [true, false] {
        // The server refuses: its RST reaches the client numbered from the
        // cookie; the held request is freed (at the next timer tick), counted.
        let mut p = node();
        p.set_fast_path(fast);
        let cookie = connecting(&mut p, 2000);
        assert_eq!(from_client(&mut p, 2000, 101, cookie.wrapping_add(1), ACK | PSH, b"GET /").0, Verdict::Consumed);
        let (v, b) = from_server(&mut p, 2000, 0, 101, RST | ACK, b"");
        assert_eq!(v, Verdict::Forward(OUT_PORT));
        assert_eq!(parse(&b).seq, cookie.wrapping_add(1));
        p.poll_timers(T);
        assert_eq!(hold_counts(&p), (1, 0, 1), "fast path {fast}");
        assert!(drained(&mut p).is_empty(), "the request never reaches the server");
        // The client gives up: its RST goes through, its held segment is freed.
        let cookie = connecting(&mut p, 3000);
        assert_eq!(from_client(&mut p, 3000, 101, cookie.wrapping_add(1), ACK | PSH, b"GET /").0, Verdict::Consumed);
        let (v, b) = from_client(&mut p, 3000, 101, 0, RST, b"");
        assert_eq!(v, Verdict::Forward(IN_PORT));
        assert_eq!(parse(&b).flags, RST);
        p.poll_timers(T);
        assert_eq!(hold_counts(&p), (2, 0, 2));
        assert!(drained(&mut p).is_empty());
        let c = p.counters();
        assert_eq!(c.packets, c.forwarded + c.consumed + c.arp_replies + c.icmp_echo_replies + c.drops.iter().sum::<u64>());
    }
}

#[test]
fn a_connection_holds_a_few_segments_and_drops_the_rest() {
    let mut p = node();
    let cookie = connecting(&mut p, 2000);
    let n = HOLD_PER_CONN as u32;
    for k in 0..n + 2 {
        let want = if k < n { Verdict::Consumed } else { Verdict::Drop(DropReason::SynProxyPending) };
        assert_eq!(from_client(&mut p, 2000, 101 + 10 * k, cookie.wrapping_add(1), ACK, &[b'x'; 10]).0, want, "segment {k}");
    }
    assert_eq!(hold_counts(&p), (u64::from(n), 0, 0));
    assert_eq!(p.counters().drops[DropReason::SynProxyPending.index()], 2);
    // The server answers: the held ones follow the last ACK, in order.
    let (v, b) = from_server(&mut p, 2000, 7000, 101, SYN | ACK, b"");
    assert_eq!((v, parse(&b).flags), (Verdict::Forward(IN_PORT), ACK));
    let seqs: Vec<u32> = drained(&mut p).iter().map(|(_, b)| parse(b).seq).collect();
    assert_eq!(seqs, (0..n).map(|k| 101 + 10 * k).collect::<Vec<_>>());
    assert_eq!(hold_counts(&p), (u64::from(n), u64::from(n), 0));
}

#[test]
fn a_hold_whose_server_stays_silent_times_out() {
    let mut p = node();
    let cookie = connecting(&mut p, 2000);
    assert_eq!(from_client(&mut p, 2000, 101, cookie.wrapping_add(1), ACK | PSH, b"GET /").0, Verdict::Consumed);
    let almost = Timestamp(T.nanos() + HOLD_TIMEOUT.0 - 1);
    p.poll_timers(almost);
    assert_eq!(hold_counts(&p), (1, 0, 0), "still waiting");
    let over = T.saturating_add(HOLD_TIMEOUT);
    p.poll_timers(over);
    assert_eq!(hold_counts(&p), (1, 0, 1), "freed, counted");
    // A late SYN-ACK still splices; nothing is left to follow its ACK.
    let (v, b) = from_server_at(&mut p, over, 2000, 7000, 101, SYN | ACK, b"");
    assert_eq!((v, parse(&b).flags), (Verdict::Forward(IN_PORT), ACK));
    assert!(drained(&mut p).is_empty());
    // The client's retransmission goes straight through now.
    let (v, b) = from_client_at(&mut p, over, 2000, 101, cookie.wrapping_add(1), ACK | PSH, b"GET /");
    assert_eq!(v, Verdict::Forward(IN_PORT));
    assert_eq!((parse(&b).seq, parse(&b).ack), (101, 7001));
}
