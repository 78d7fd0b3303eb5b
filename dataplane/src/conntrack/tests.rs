//! Golden segment tables, expiry boundaries, capacity and reservation tests,
//! and property tests (arbitrary input never panics; an honest simulated TCP
//! conversation is never dropped).

use super::tcp_flags::*;
use super::*;
use crate::types::{ip_proto, Direction::*, DropReason as D};
use proptest::prelude::*;
use std::cell::Cell;

const MS: u64 = 1_000_000;

fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(a, b, c, d))
}

fn tuple(src: IpAddr, sp: u16, dst: IpAddr, dp: u16, proto: u8) -> FiveTuple {
    FiveTuple { src, dst, proto, src_port: sp, dst_port: dp }
}

/// Client 10.0.0.1:40000 → server 192.0.2.10:80.
fn client_tuple() -> FiveTuple {
    tuple(v4(10, 0, 0, 1), 40000, v4(192, 0, 2, 10), 80, ip_proto::TCP)
}

fn seg(flags: u8, seq: u32, ack: u32, window: u16) -> TcpSeg {
    TcpSeg { flags, seq, ack, window, payload_len: 0, wscale: None, sack_permitted: false }
}

fn syn(flags: u8, seq: u32, ack: u32, window: u16, ws: Option<u8>) -> TcpSeg {
    TcpSeg { flags, seq, ack, window, payload_len: 0, wscale: ws, sack_permitted: true }
}

/// Self-check of the table's internal bookkeeping.
fn check_invariants(t: &ConnTable) {
    let live = t.slots.iter().filter(|s| s.live).count();
    assert_eq!(live, t.len());
    assert_eq!(t.index.entries(), t.len());
    assert_eq!(t.free.len() + t.len(), t.capacity());
    assert!(t.len() <= t.capacity());
    for s in t.slots.iter().filter(|s| s.live) {
        let h = s.key.hash(&t.seed);
        assert!(t.find(h, &s.key).is_some());
    }
}

#[derive(Copy, Clone, Debug, PartialEq)]
enum Exp {
    /// Accepted on the existing flow.
    Ok,
    /// Accepted and created a flow (admit called).
    New,
    Err(DropReason),
}

/// One row of a golden table: a segment in a direction, the expected
/// verdict and the expected TCP state afterwards (of the flow, if any).
struct Row {
    what: &'static str,
    dir: Direction,
    seg: TcpSeg,
    exp: Exp,
    state: Option<TcpState>,
}

fn row(what: &'static str, dir: Direction, seg: TcpSeg, exp: Exp, state: Option<TcpState>) -> Row {
    Row { what, dir, seg, exp, state }
}

/// Runs `rows` on one tuple, 1 ms apart; returns the table.
fn run_rows(fwd: FiveTuple, rows: &[Row]) -> ConnTable {
    let mut t = ConnTable::new(16, Timeouts::default());
    let mut now = Timestamp::from_secs(1);
    let mut handle = None;
    for (n, r) in rows.iter().enumerate() {
        now = Timestamp(now.0 + MS);
        let tup = if r.dir == Original { fwd } else { fwd.reversed() };
        let admitted = Cell::new(0);
        let got = t.track(now, &tup, &L4Info::Tcp(r.seg), 60 + r.seg.payload_len, || {
            admitted.set(admitted.get() + 1);
            true
        });
        let ctx = format!("row {n} ({}): {:?}", r.what, got);
        match r.exp {
            Exp::Ok => {
                let tr = got.expect(&ctx);
                assert!(!tr.created, "{ctx}");
                assert_eq!(admitted.get(), 0, "{ctx}");
                // The direction is relative to the flow's initiator; the
                // golden tables' flows are all opened by `fwd`'s source
                // except after a reopen from the reply side.
                handle = Some(tr.handle);
            }
            Exp::New => {
                let tr = got.expect(&ctx);
                assert!(tr.created, "{ctx}");
                assert_eq!(tr.dir, Original, "{ctx}");
                assert_eq!(admitted.get(), 1, "{ctx}");
                handle = Some(tr.handle);
            }
            Exp::Err(e) => {
                assert_eq!(got.map(|_| ()), Err(e), "{ctx}");
                if e != D::AclDenied {
                    assert_eq!(admitted.get(), 0, "{ctx}");
                }
            }
        }
        let st = handle.and_then(|h| t.tcp_state(h));
        assert_eq!(st, r.state, "state after {ctx}");
        check_invariants(&t);
    }
    t
}

use TcpState::*;

// Initial sequence numbers close to the wrap so that every golden table also
// exercises modulo-2^32 comparisons.
const C: u32 = 0xFFFF_FF00;
const S: u32 = 0x7FFF_FFF0;

fn c(off: u32) -> u32 {
    C.wrapping_add(off)
}
fn s(off: u32) -> u32 {
    S.wrapping_add(off)
}

/// The three-way handshake with wscale 7 on both sides.
fn handshake() -> Vec<Row> {
    vec![
        row("SYN", Original, syn(SYN, C, 0, 64240, Some(7)), Exp::New, Some(SynSent)),
        row("SYN retransmission", Original, syn(SYN, C, 0, 64240, Some(7)), Exp::Ok, Some(SynSent)),
        row("SYN-ACK", Reply, syn(SYN | ACK, S, c(1), 65160, Some(7)), Exp::Ok, Some(SynReceived)),
        row("SYN-ACK retransmission", Reply, syn(SYN | ACK, S, c(1), 65160, Some(7)), Exp::Ok, Some(SynReceived)),
        row("ACK", Original, seg(ACK, c(1), s(1), 502), Exp::Ok, Some(Established)),
    ]
}

// `seg` with payload: shorthand.
fn data(flags: u8, seq: u32, ack: u32, window: u16, len: u32) -> TcpSeg {
    TcpSeg { payload_len: len, ..seg(flags, seq, ack, window) }
}

#[test]
fn golden_handshake_data_fin_fin_reopen() {
    let mut rows = handshake();
    rows.extend([
        row("GET", Original, data(PSH | ACK, c(1), s(1), 502, 100), Exp::Ok, Some(Established)),
        row("ACK of GET", Reply, data(ACK, s(1), c(101), 509, 0), Exp::Ok, Some(Established)),
        // 64 KiB window from the client (502 << 7): the server may send
        // 45 segments before an ACK.
        row("response 1", Reply, data(ACK, s(1), c(101), 509, 1448), Exp::Ok, Some(Established)),
        row("response 2", Reply, data(ACK, s(1449), c(101), 509, 1448), Exp::Ok, Some(Established)),
        row(
            "response far in window",
            Reply,
            data(ACK, s(1 + 40 * 1448), c(101), 509, 1448),
            Exp::Ok,
            Some(Established),
        ),
        row("client ACK with window update", Original, seg(ACK, c(101), s(2897), 2000), Exp::Ok, Some(Established)),
        row("dup ACK (SACK-style)", Original, seg(ACK, c(101), s(2897), 2000), Exp::Ok, Some(Established)),
        row("retransmission of hole", Reply, data(ACK, s(2897), c(101), 509, 1448), Exp::Ok, Some(Established)),
        row("retransmission of old segment", Reply, data(ACK, s(1), c(101), 509, 1448), Exp::Ok, Some(Established)),
        row("keepalive", Original, seg(ACK, c(100), s(2897), 2000), Exp::Ok, Some(Established)),
        row("client ACK all", Original, seg(ACK, c(101), s(1 + 41 * 1448), 2000), Exp::Ok, Some(Established)),
        row("client FIN", Original, seg(FIN | ACK, c(101), s(1 + 41 * 1448), 2000), Exp::Ok, Some(FinWait)),
        row("server ACKs FIN", Reply, seg(ACK, s(1 + 41 * 1448), c(102), 509), Exp::Ok, Some(FinWait)),
        row(
            "server data after FIN (half close)",
            Reply,
            data(PSH | ACK, s(1 + 41 * 1448), c(102), 509, 10),
            Exp::Ok,
            Some(FinWait),
        ),
        row("client ACKs data", Original, seg(ACK, c(102), s(11 + 41 * 1448), 2000), Exp::Ok, Some(FinWait)),
        row("server FIN", Reply, seg(FIN | ACK, s(11 + 41 * 1448), c(102), 509), Exp::Ok, Some(Closing)),
        row("last ACK", Original, seg(ACK, c(102), s(12 + 41 * 1448), 2000), Exp::Ok, Some(TimeWait)),
        row(
            "server FIN retransmission",
            Reply,
            seg(FIN | ACK, s(11 + 41 * 1448), c(102), 509),
            Exp::Ok,
            Some(TimeWait),
        ),
        row("client re-ACK", Original, seg(ACK, c(102), s(12 + 41 * 1448), 2000), Exp::Ok, Some(TimeWait)),
        row(
            "data in TIME_WAIT out of window",
            Original,
            data(ACK, c(900_000), s(12 + 41 * 1448), 2000, 10),
            Exp::Err(D::TcpOutOfWindow),
            Some(TimeWait),
        ),
        row("new SYN reuses the port", Original, syn(SYN, c(1_000_000), 0, 64240, Some(7)), Exp::New, Some(SynSent)),
        row("new SYN-ACK", Reply, syn(SYN | ACK, 42, c(1_000_001), 65160, None), Exp::Ok, Some(SynReceived)),
    ]);
    let t = run_rows(client_tuple(), &rows);
    assert_eq!(t.len(), 1);
    assert_eq!(t.stats().reopened, 1);
    assert_eq!(t.stats().created, 2);
}

#[test]
fn golden_server_closes_first_and_simultaneous_close() {
    let mut rows = handshake();
    rows.extend([
        row("server FIN", Reply, seg(FIN | ACK, s(1), c(1), 509), Exp::Ok, Some(FinWait)),
        row("client ACK+FIN", Original, seg(FIN | ACK, c(1), s(2), 502), Exp::Ok, Some(Closing)),
        row("server last ACK", Reply, seg(ACK, s(2), c(2), 509), Exp::Ok, Some(TimeWait)),
    ]);
    run_rows(client_tuple(), &rows);

    let mut rows = handshake();
    rows.extend([
        row("client FIN", Original, seg(FIN | ACK, c(1), s(1), 502), Exp::Ok, Some(FinWait)),
        row("server FIN crosses it", Reply, seg(FIN | ACK, s(1), c(1), 509), Exp::Ok, Some(Closing)),
        row("client ACKs server FIN", Original, seg(ACK, c(2), s(2), 502), Exp::Ok, Some(Closing)),
        row("server ACKs client FIN", Reply, seg(ACK, s(2), c(2), 509), Exp::Ok, Some(TimeWait)),
    ]);
    run_rows(client_tuple(), &rows);
}

#[test]
fn golden_rst() {
    // In-window RST closes; out-of-window RST is dropped and changes nothing.
    let mut rows = handshake();
    rows.extend([
        row(
            "RST far beyond window",
            Reply,
            seg(RST, s(10_000_000), 0, 0),
            Exp::Err(D::TcpOutOfWindow),
            Some(Established),
        ),
        row(
            "RST far behind",
            Reply,
            seg(RST, s(0).wrapping_sub(10_000_000), 0, 0),
            Exp::Err(D::TcpOutOfWindow),
            Some(Established),
        ),
        row("RST in window", Reply, seg(RST | ACK, s(1), c(1), 0), Exp::Ok, Some(Closed)),
        row("late ACK after RST", Original, seg(ACK, c(1), s(1), 502), Exp::Ok, Some(Closed)),
        row("SYN reopens a CLOSED flow", Original, syn(SYN, c(5000), 0, 64240, None), Exp::New, Some(SynSent)),
    ]);
    run_rows(client_tuple(), &rows);

    // Connection refused: RST+ACK answering the SYN (RFC 9293 §3.10.7.3).
    run_rows(
        client_tuple(),
        &[
            row("SYN", Original, syn(SYN, C, 0, 64240, Some(7)), Exp::New, Some(SynSent)),
            row("RST without ACK", Reply, seg(RST, 0, 0, 0), Exp::Err(D::TcpOutOfWindow), Some(SynSent)),
            row(
                "RST+ACK acking the wrong seq",
                Reply,
                seg(RST | ACK, 0, c(2), 0),
                Exp::Err(D::TcpOutOfWindow),
                Some(SynSent),
            ),
            row("RST+ACK refusing", Reply, seg(RST | ACK, 0, c(1), 0), Exp::Ok, Some(Closed)),
        ],
    );

    // The client aborts its own SYN.
    run_rows(
        client_tuple(),
        &[
            row("SYN", Original, syn(SYN, C, 0, 64240, Some(7)), Exp::New, Some(SynSent)),
            row("client RST", Original, seg(RST, c(1), 0, 0), Exp::Ok, Some(Closed)),
        ],
    );
}

#[test]
fn golden_window_violations_do_not_change_state() {
    let mut rows = handshake();
    rows.extend([
        // Client advertised 502 << 7 = 64256 bytes (max so far 65160 is the
        // server's; the server's right edge is s(1) + 64256).
        row(
            "server data beyond the client's window",
            Reply,
            data(ACK, s(1 + 64256 + 1), c(1), 509, 100),
            Exp::Err(D::TcpOutOfWindow),
            Some(Established),
        ),
        row(
            "ACK of data never sent",
            Original,
            seg(ACK, c(1), s(1 + 5000), 502),
            Exp::Err(D::TcpOutOfWindow),
            Some(Established),
        ),
        row("server data at the right edge", Reply, data(ACK, s(1 + 64256), c(1), 509, 0), Exp::Ok, Some(Established)),
        row(
            "ACK too far behind (pf MAXACKWINDOW)",
            Original,
            seg(ACK, c(1), s(1).wrapping_sub(70_000), 502),
            Exp::Err(D::TcpOutOfWindow),
            Some(Established),
        ),
        row(
            "client data far behind",
            Original,
            data(ACK, c(1).wrapping_sub(200_000), s(1), 502, 100),
            Exp::Err(D::TcpOutOfWindow),
            Some(Established),
        ),
        row(
            "FIN out of window is not recorded",
            Original,
            seg(FIN | ACK, c(1_000_000), s(1), 502),
            Exp::Err(D::TcpOutOfWindow),
            Some(Established),
        ),
        row("still fine", Original, data(PSH | ACK, c(1), s(1), 502, 10), Exp::Ok, Some(Established)),
    ]);
    run_rows(client_tuple(), &rows);
}

#[test]
fn golden_bad_flags_bad_state_and_no_flow() {
    let bad = [
        0u8,
        SYN | FIN,
        SYN | RST,
        FIN,
        FIN | PSH | URG,
        RST | FIN,
        RST | FIN | ACK,
        SYN | FIN | RST | PSH | ACK | URG,
    ];
    for f in bad {
        run_rows(
            client_tuple(),
            &[row("bad flags, no flow", Original, data(f, 1, 0, 100, 0), Exp::Err(D::TcpBadFlags), None)],
        );
    }
    run_rows(
        client_tuple(),
        &[
            row("unsolicited ACK", Original, data(ACK, 1, 1, 100, 0), Exp::Err(D::TcpNoFlow), None),
            row("unsolicited SYN-ACK", Original, syn(SYN | ACK, 1, 1, 100, None), Exp::Err(D::TcpNoFlow), None),
            row("unsolicited RST", Original, data(RST, 1, 0, 0, 0), Exp::Err(D::TcpNoFlow), None),
            row("unsolicited FIN", Original, data(FIN | ACK, 1, 1, 100, 0), Exp::Err(D::TcpNoFlow), None),
            row("ECN SYN opens", Original, syn(SYN | ECE | CWR, C, 0, 64240, Some(7)), Exp::New, Some(SynSent)),
            row(
                "SYN-ACK in original direction",
                Original,
                syn(SYN | ACK, C, 1, 64240, None),
                Exp::Err(D::TcpBadState),
                Some(SynSent),
            ),
            row(
                "client data before SYN-ACK",
                Original,
                data(ACK, c(1), 1, 502, 10),
                Exp::Err(D::TcpBadState),
                Some(SynSent),
            ),
            row("server ACK without SYN", Reply, data(ACK, S, c(1), 502, 0), Exp::Err(D::TcpBadState), Some(SynSent)),
            row(
                "SYN-ACK acking the wrong seq",
                Reply,
                syn(SYN | ACK, S, c(7), 65160, Some(7)),
                Exp::Err(D::TcpOutOfWindow),
                Some(SynSent),
            ),
            row("NULL on a flow", Reply, data(0, S, 0, 0, 0), Exp::Err(D::TcpBadFlags), Some(SynSent)),
            row("SYN-ACK", Reply, syn(SYN | ACK, S, c(1), 65160, Some(7)), Exp::Ok, Some(SynReceived)),
            row(
                "SYN-ACK from the client",
                Original,
                syn(SYN | ACK, C, s(1), 64240, Some(7)),
                Exp::Err(D::TcpBadState),
                Some(SynReceived),
            ),
            row(
                "ACK + FIN completes handshake and closes",
                Original,
                data(FIN | ACK, c(1), s(1), 502, 0),
                Exp::Ok,
                Some(FinWait),
            ),
            row(
                "SYN on a FIN_WAIT flow",
                Original,
                syn(SYN, c(100), 0, 64240, None),
                Exp::Err(D::TcpBadState),
                Some(FinWait),
            ),
        ],
    );
    let mut rows = handshake();
    rows.extend([
        row(
            "SYN on an established flow",
            Original,
            syn(SYN, C, 0, 64240, Some(7)),
            Exp::Err(D::TcpBadState),
            Some(Established),
        ),
        row("SYN from the server", Reply, syn(SYN, S, 0, 64240, Some(7)), Exp::Err(D::TcpBadState), Some(Established)),
        row(
            "server retransmits SYN-ACK (lost ACK)",
            Reply,
            syn(SYN | ACK, S, c(1), 65160, Some(7)),
            Exp::Ok,
            Some(Established),
        ),
        row(
            "XMAS on a flow",
            Original,
            data(FIN | PSH | URG, c(1), 0, 0, 0),
            Exp::Err(D::TcpBadFlags),
            Some(Established),
        ),
    ]);
    run_rows(client_tuple(), &rows);
}

#[test]
fn golden_simultaneous_open_and_syn_restart() {
    run_rows(
        client_tuple(),
        &[
            row("SYN", Original, syn(SYN, C, 0, 64240, Some(7)), Exp::New, Some(SynSent)),
            row("crossing SYN", Reply, syn(SYN, S, 0, 65160, Some(7)), Exp::Ok, Some(SynReceived)),
            row("SYN-ACK from A", Original, syn(SYN | ACK, C, s(1), 64240, Some(7)), Exp::Ok, Some(SynReceived)),
            row("SYN-ACK from B", Reply, syn(SYN | ACK, S, c(1), 65160, Some(7)), Exp::Ok, Some(SynReceived)),
            row("ACK", Reply, data(ACK, s(1), c(1), 500, 0), Exp::Ok, Some(Established)),
        ],
    );
    run_rows(
        client_tuple(),
        &[
            row("SYN", Original, syn(SYN, C, 0, 64240, Some(7)), Exp::New, Some(SynSent)),
            row("SYN-ACK", Reply, syn(SYN | ACK, S, c(1), 65160, Some(7)), Exp::Ok, Some(SynReceived)),
            row("client SYN retransmission", Original, syn(SYN, C, 0, 64240, Some(7)), Exp::Ok, Some(SynReceived)),
            row("client restarts with a new ISN", Original, syn(SYN, 77, 0, 64240, Some(7)), Exp::Ok, Some(SynSent)),
            row(
                "old SYN-ACK is now wrong",
                Reply,
                syn(SYN | ACK, S, c(1), 65160, Some(7)),
                Exp::Err(D::TcpOutOfWindow),
                Some(SynSent),
            ),
            row("SYN-ACK for the new ISN", Reply, syn(SYN | ACK, S, 78, 65160, Some(7)), Exp::Ok, Some(SynReceived)),
            row("ACK", Original, data(ACK, 78, s(1), 502, 0), Exp::Ok, Some(Established)),
        ],
    );
}

#[test]
fn golden_fast_open_and_reuse_after_lost_last_ack() {
    // TFO: a SYN with 100 bytes of data; the server may acknowledge the data
    // or only the SYN (RFC 7413 §4.2).
    for acked in [c(1), c(101)] {
        run_rows(
            client_tuple(),
            &[
                row(
                    "SYN + data",
                    Original,
                    TcpSeg { payload_len: 100, ..syn(SYN, C, 0, 64240, Some(7)) },
                    Exp::New,
                    Some(SynSent),
                ),
                row(
                    "SYN-ACK acking past the data",
                    Reply,
                    syn(SYN | ACK, S, c(102), 65160, Some(7)),
                    Exp::Err(D::TcpOutOfWindow),
                    Some(SynSent),
                ),
                row(
                    "SYN-ACK acking the ISS",
                    Reply,
                    syn(SYN | ACK, S, c(0), 65160, Some(7)),
                    Exp::Err(D::TcpOutOfWindow),
                    Some(SynSent),
                ),
                row("SYN-ACK", Reply, syn(SYN | ACK, S, acked, 65160, Some(7)), Exp::Ok, Some(SynReceived)),
                row(
                    "ACK (+ data retransmitted if it was not taken)",
                    Original,
                    data(ACK, acked, s(1), 502, c(101).wrapping_sub(acked)),
                    Exp::Ok,
                    Some(Established),
                ),
            ],
        );
    }
    // Both FINs seen, the final ACK lost beyond us: the client's next SYN
    // on the same ports replaces the flow (pf's state reuse).
    let mut rows = handshake();
    rows.extend([
        row("client FIN", Original, seg(FIN | ACK, c(1), s(1), 502), Exp::Ok, Some(FinWait)),
        row("server FIN", Reply, seg(FIN | ACK, s(1), c(2), 509), Exp::Ok, Some(Closing)),
        row("new SYN", Original, syn(SYN, c(100_000), 0, 64240, Some(7)), Exp::New, Some(SynSent)),
    ]);
    run_rows(client_tuple(), &rows);
}

#[test]
fn window_scaling_needs_both_sides() {
    // The server does not scale: the client's 502 means 502 bytes, so
    // server data past s(1) + 65160 (its SYN-ACK's own window does not
    // matter) ... the client's edge is s(1) + 502.
    let rows = [
        row("SYN ws7", Original, syn(SYN, C, 0, 64240, Some(7)), Exp::New, Some(SynSent)),
        row("SYN-ACK no ws", Reply, syn(SYN | ACK, S, c(1), 65160, None), Exp::Ok, Some(SynReceived)),
        row("ACK win 502 unscaled", Original, data(ACK, c(1), s(1), 502, 0), Exp::Ok, Some(Established)),
        // Edge: max(ack + win) over the client's segments = s(1) + 502.
        row(
            "server data beyond 502 (+1 for the max over the SYN's window)",
            Reply,
            data(ACK, s(1 + 64240 + 1), c(1), 65160, 10),
            Exp::Err(D::TcpOutOfWindow),
            Some(Established),
        ),
        row("server data within", Reply, data(ACK, s(1), c(1), 65160, 502), Exp::Ok, Some(Established)),
    ];
    let t = run_rows(client_tuple(), &rows);
    let tr = t.lookup(&client_tuple()).unwrap();
    match t.slots[tr.0 .0 as usize].kind {
        FlowKind::Tcp(cn) => {
            assert_eq!(cn.peers[0].scale, 0);
            assert_eq!(cn.peers[1].scale, 0);
            // The client's window never grew beyond its SYN's 64240.
            assert_eq!(cn.peers[0].maxwin, 64240);
        }
        _ => panic!("not tcp"),
    }
}

#[test]
fn both_directions_share_one_entry_ipv4_and_ipv6() {
    let v6a: IpAddr = "2001:db8::1".parse().unwrap();
    let v6b: IpAddr = "2001:db8::2".parse().unwrap();
    for fwd in [client_tuple(), tuple(v6b, 50000, v6a, 443, ip_proto::TCP)] {
        let t = run_rows(fwd, &handshake());
        assert_eq!(t.len(), 1);
        let (h1, d1) = t.lookup(&fwd).unwrap();
        let (h2, d2) = t.lookup(&fwd.reversed()).unwrap();
        assert_eq!(h1, h2);
        assert_eq!((d1, d2), (Original, Reply));
        let mut out = Vec::new();
        t.snapshot(Timestamp::from_secs(2), 10, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].tuple, fwd);
        assert_eq!(out[0].state, "ESTABLISHED");
        assert_eq!(out[0].packets, [3, 2]);
        assert_eq!(out[0].bytes, [180, 120]);
    }
}

#[test]
fn ipv4_and_ipv6_never_collide() {
    // ::a00:1 has the same first bytes as nothing v4, but make sure the
    // family is part of the key: a v6 address whose first 4 bytes equal
    // the v4 address with the rest zero.
    let v4a = v4(10, 0, 0, 1);
    let v6a: IpAddr = "a00:1::".parse().unwrap();
    let v4b = v4(10, 0, 0, 2);
    let v6b: IpAddr = "a00:2::".parse().unwrap();
    let mut t = ConnTable::new(8, Timeouts::default());
    let now = Timestamp::from_secs(1);
    let a = t.track(now, &tuple(v4a, 1, v4b, 2, ip_proto::UDP), &L4Info::Udp, 10, || true).unwrap();
    let b = t.track(now, &tuple(v6a, 1, v6b, 2, ip_proto::UDP), &L4Info::Udp, 10, || true).unwrap();
    assert!(a.created && b.created);
    assert_ne!(a.handle, b.handle);
    let mut out = Vec::new();
    t.snapshot(now, 10, &mut out);
    assert!(out.iter().any(|c| c.tuple.src == v6a && c.tuple.dst == v6b));
    assert!(out.iter().any(|c| c.tuple.src == v4a && c.tuple.dst == v4b));
}

#[test]
fn udp_icmp_other_pseudo_flows() {
    let mut t = ConnTable::new(8, Timeouts::default());
    let now = Timestamp::from_secs(1);
    let (a, b) = (v4(10, 0, 0, 1), v4(8, 8, 8, 8));
    let udp = tuple(a, 5353, b, 53, ip_proto::UDP);

    assert_eq!(t.track(now, &udp, &L4Info::Udp, 60, || false).map(|_| ()), Err(D::AclDenied));
    assert!(t.is_empty());
    let first = t.track(now, &udp, &L4Info::Udp, 60, || true).unwrap();
    assert!(first.created);
    let back = t.track(now, &udp.reversed(), &L4Info::Udp, 120, || -> bool { panic!("no admit for a reply") }).unwrap();
    assert_eq!((back.created, back.dir, back.handle), (false, Reply, first.handle));
    let again = t.track(now, &udp, &L4Info::Udp, 60, || -> bool { panic!("no admit") }).unwrap();
    assert_eq!((again.created, again.dir), (false, Original));

    // ICMP echo: id 77. Reply first: no flow.
    let req = tuple(a, 77, b, 0, ip_proto::ICMP);
    let rep = tuple(b, 0, a, 77, ip_proto::ICMP);
    assert_eq!(t.track(now, &rep, &L4Info::IcmpEchoReply, 84, || true).map(|_| ()), Err(D::NoFlow));
    let r1 = t.track(now, &req, &L4Info::IcmpEchoRequest, 84, || true).unwrap();
    assert!(r1.created);
    let r2 = t.track(now, &rep, &L4Info::IcmpEchoReply, 84, || -> bool { panic!() }).unwrap();
    assert_eq!((r2.created, r2.dir, r2.handle), (false, Reply, r1.handle));
    // An ICMP error with ports (0, 0) between the same hosts is a separate
    // "other" pseudo-flow, never the echo flow.
    let err = tuple(b, 0, a, 0, ip_proto::ICMP);
    let e = t.track(now, &err, &L4Info::Other, 56, || true).unwrap();
    assert!(e.created);
    assert_ne!(e.handle, r1.handle);

    // Other protocol (GRE).
    let gre = tuple(a, 0, b, 0, 47);
    assert!(t.track(now, &gre, &L4Info::Other, 100, || true).unwrap().created);
    assert_eq!(t.track(now, &gre.reversed(), &L4Info::Other, 100, || -> bool { panic!() }).unwrap().dir, Reply);
    assert_eq!(t.len(), 4);
    assert_eq!(t.lookup(&udp.reversed()).map(|x| x.1), Some(Reply));
    assert_eq!(t.lookup(&req).map(|x| x.0), Some(r1.handle));
    check_invariants(&t);

    let mut out = Vec::new();
    t.snapshot(now, 10, &mut out);
    let u = out.iter().find(|c| c.tuple == udp).unwrap();
    assert_eq!((u.state, u.packets, u.bytes), ("UDP", [2, 1], [120, 120]));
    assert_eq!(u.expires_in_ms, 120_000);
    out.clear();
    t.snapshot(now, 2, &mut out);
    assert_eq!(out.len(), 2);
}

#[test]
fn expiry_at_exactly_the_timeout_boundary_per_state() {
    let to = Timeouts {
        tcp_syn: Duration::from_secs(3),
        tcp_established: Duration::from_secs(5),
        tcp_closing: Duration::from_secs(7),
        tcp_closed: Duration::from_secs(11),
        udp: Duration::from_secs(13),
        icmp: Duration::from_secs(17),
        other: Duration::from_secs(19),
    };
    let hs = handshake();
    // (prefix of segments to reach the state, expected state, timeout)
    type Case = (Vec<(Direction, TcpSeg)>, TcpState, Duration);
    let mut cases: Vec<Case> = Vec::new();
    let seq = |rows: &[Row]| rows.iter().map(|r| (r.dir, r.seg)).collect::<Vec<_>>();
    cases.push((seq(&hs[..1]), SynSent, to.tcp_syn));
    cases.push((seq(&hs[..3]), SynReceived, to.tcp_syn));
    cases.push((seq(&hs), Established, to.tcp_established));
    let mut fw = seq(&hs);
    fw.push((Original, data(FIN | ACK, c(1), s(1), 502, 0)));
    cases.push((fw.clone(), FinWait, to.tcp_closing));
    fw.push((Reply, data(FIN | ACK, s(1), c(2), 509, 0)));
    cases.push((fw.clone(), Closing, to.tcp_closing));
    fw.push((Original, data(ACK, c(2), s(2), 502, 0)));
    cases.push((fw.clone(), TimeWait, to.tcp_closed));
    let mut rst = seq(&hs);
    rst.push((Reply, data(RST, s(1), 0, 0, 0)));
    cases.push((rst, Closed, to.tcp_closed));

    for (segs, state, timeout) in cases {
        for via_expire in [true, false] {
            let mut t = ConnTable::new(4, to);
            let t0 = Timestamp::from_secs(100);
            let mut h = None;
            for (d, sg) in &segs {
                let tup = if *d == Original { client_tuple() } else { client_tuple().reversed() };
                h = Some(t.track(t0, &tup, &L4Info::Tcp(*sg), 60, || true).unwrap().handle);
            }
            let h = h.unwrap();
            assert_eq!(t.tcp_state(h), Some(state));
            let just_before = Timestamp(t0.0 + timeout.0 - 1);
            let at = t0.saturating_add(timeout);
            assert_eq!(t.expire(just_before, 100), 0, "{state:?}");
            let mut out = Vec::new();
            t.snapshot(just_before, 10, &mut out);
            assert_eq!(out[0].expires_in_ms, 0);
            assert_eq!(out[0].state, state.as_str());
            if via_expire {
                assert_eq!(t.expire(at, 100), 1, "{state:?}");
                assert!(t.is_empty());
            } else {
                // Found dead by track: an ACK now has no flow.
                let ack = data(ACK, c(1), s(1), 502, 0);
                assert_eq!(t.track(at, &client_tuple(), &L4Info::Tcp(ack), 60, || true).map(|_| ()), Err(D::TcpNoFlow));
                assert!(t.is_empty());
            }
            assert_eq!(t.stats().expired, 1);
            check_invariants(&t);
        }
    }

    for (l4, tup, timeout) in [
        (L4Info::Udp, tuple(v4(1, 1, 1, 1), 1, v4(2, 2, 2, 2), 2, ip_proto::UDP), to.udp),
        (L4Info::IcmpEchoRequest, tuple(v4(1, 1, 1, 1), 9, v4(2, 2, 2, 2), 0, ip_proto::ICMP), to.icmp),
        (L4Info::Other, tuple(v4(1, 1, 1, 1), 0, v4(2, 2, 2, 2), 0, 50), to.other),
    ] {
        let mut t = ConnTable::new(4, to);
        let t0 = Timestamp::from_secs(100);
        assert!(t.track(t0, &tup, &l4, 1, || true).unwrap().created);
        // Refreshing the timer half-way moves the deadline.
        let mid = Timestamp(t0.0 + timeout.0 / 2);
        assert!(!t.track(mid, &tup, &l4, 1, || true).unwrap().created);
        assert_eq!(t.expire(Timestamp(mid.0 + timeout.0 - 1), 10), 0);
        // At the boundary the flow is dead: the next packet creates anew.
        let again = t.track(mid.saturating_add(timeout), &tup, &l4, 1, || true).unwrap();
        assert!(again.created);
        assert_eq!(t.len(), 1);
        assert_eq!(t.stats().expired, 1);
    }
}

#[test]
fn expire_is_bounded_and_incremental() {
    let to = Timeouts::default();
    let mut t = ConnTable::new(100, to);
    let t0 = Timestamp::from_secs(1);
    for p in 0..100u16 {
        let tup = tuple(v4(10, 0, 0, 1), p, v4(10, 0, 0, 2), 53, ip_proto::UDP);
        t.track(t0, &tup, &L4Info::Udp, 1, || true).unwrap();
    }
    let late = t0.saturating_add(to.udp);
    let mut total = 0;
    for _ in 0..10 {
        let n = t.expire(late, 7);
        assert!(n <= 7);
        total += n;
    }
    assert_eq!(total, 70);
    // A budget beyond the capacity inspects each slot once.
    assert_eq!(t.expire(late, 1_000_000), 30);
    assert!(t.is_empty());
    assert_eq!(t.expire(late, 10), 0);
    check_invariants(&t);
    assert_eq!(ConnTable::new(0, to).expire(late, 10), 0);
}

#[test]
fn table_full() {
    let mut t = ConnTable::new(3, Timeouts::default());
    let now = Timestamp::from_secs(1);
    let u = |p| tuple(v4(10, 0, 0, 1), p, v4(10, 0, 0, 2), 53, ip_proto::UDP);
    // Answered flows: none may be evicted for a new one (early drop).
    for p in 0..3 {
        assert!(t.track(now, &u(p), &L4Info::Udp, 1, || true).unwrap().created);
        assert!(!t.track(now, &u(p).reversed(), &L4Info::Udp, 1, || true).unwrap().created);
    }
    assert_eq!(t.track(now, &u(3), &L4Info::Udp, 1, || true).map(|_| ()), Err(D::FlowTableFull));
    let syn0 = L4Info::Tcp(syn(SYN, 1, 0, 1000, None));
    assert_eq!(t.track(now, &client_tuple(), &syn0, 1, || true).map(|_| ()), Err(D::FlowTableFull));
    // Denied traffic is reported as denied, full or not.
    assert_eq!(t.track(now, &u(3), &L4Info::Udp, 1, || false).map(|_| ()), Err(D::AclDenied));
    // Existing flows keep working.
    assert!(!t.track(now, &u(1).reversed(), &L4Info::Udp, 1, || true).unwrap().created);
    assert_eq!(t.len(), 3);
    let mut t0 = ConnTable::new(0, Timeouts::default());
    assert_eq!(t0.track(now, &u(3), &L4Info::Udp, 1, || true).map(|_| ()), Err(D::FlowTableFull));
    t.clear();
    assert!(t.is_empty());
    check_invariants(&t);
    for p in 10..13 {
        assert!(t.track(now, &u(p), &L4Info::Udp, 1, || true).unwrap().created);
    }
    check_invariants(&t);
}

#[test]
fn new_reserves_everything_and_churn_never_grows_the_index() {
    for cap in [1usize, 7, 100, 1000, 4096] {
        let to = Timeouts { udp: Duration(10), ..Timeouts::default() };
        let mut t = ConnTable::new(cap, to);
        let index_bytes = t.index.allocation_size();
        let slots_ptr = t.slots.as_ptr();
        let free_cap = t.free.capacity();
        assert!(t.index.capacity() >= 2 * cap);

        let mut now = 0u64;
        let mut port = 0u32;
        // Fill, then churn 20 generations: each flow dies (idle) and is
        // replaced by one with a different key, leaving tombstones behind.
        for _gen in 0..20 {
            now += 100;
            for _ in 0..cap {
                port += 1;
                let tup = tuple(v4(10, (port >> 16) as u8, 0, 1), port as u16, v4(10, 0, 0, 2), 53, ip_proto::UDP);
                let r = t.track(Timestamp(now), &tup, &L4Info::Udp, 1, || true).unwrap();
                assert!(r.created);
            }
            assert_eq!(t.len(), cap);
            assert_eq!(t.index.allocation_size(), index_bytes);
            // Everything dies; reclaim in two sweeps.
            now += 100;
            let n = t.expire(Timestamp(now), cap / 2) + t.expire(Timestamp(now), cap);
            assert_eq!(n, cap);
        }
        // Drain the rest.
        t.expire(Timestamp(now + 100), cap);
        assert!(t.is_empty());
        assert_eq!(t.index.allocation_size(), index_bytes);
        // Refill after a clear: the allocation must not change.
        t.clear();
        for _ in 0..cap {
            port += 1;
            let tup = tuple(v4(11, (port >> 16) as u8, 0, 1), port as u16, v4(10, 0, 0, 2), 53, ip_proto::UDP);
            assert!(t.track(Timestamp(now), &tup, &L4Info::Udp, 1, || true).unwrap().created);
        }
        assert_eq!(t.index.allocation_size(), index_bytes);
        assert_eq!(t.slots.as_ptr(), slots_ptr);
        assert_eq!(t.free.capacity(), free_cap);
        check_invariants(&t);
    }
}

#[test]
fn bytes_per_flow_is_within_budget() {
    assert_eq!(core::mem::size_of::<Key>(), 40);
    assert_eq!(core::mem::size_of::<Slot>(), 128, "two cache lines");
    for cap in [1000usize, 65_536, 100_000, 1_000_000] {
        let t = ConnTable::new(cap, Timeouts::default());
        let b = t.bytes_per_flow();
        eprintln!("capacity {cap}: slot {} B, bytes_per_flow {b}", core::mem::size_of::<Slot>());
        assert!(b <= 256, "{cap}: {b}");
        assert!(b >= core::mem::size_of::<Slot>() + 4);
    }
}

#[test]
fn seq_number_wraps() {
    let a = SeqNumber(0xFFFF_FFF0);
    let b = a + 0x20;
    assert_eq!(b, SeqNumber(0x10));
    assert!(a.lt(b) && b.gt(a) && a.le(a) && a.ge(a));
    assert_eq!(b - 0x20, a);
    assert_eq!(b.diff(a), 0x20);
    assert_eq!(a.max(b), b);
}

// ---------------------------------------------------------------------------
// Property tests.

fn arb_l4() -> impl Strategy<Value = L4Info> {
    let tcp = (any::<u8>(), 0u32..8, 0u32..8, any::<u16>(), 0u32..3000, proptest::option::of(0u8..20), any::<bool>())
        .prop_map(|(flags, seq, ack, window, len, ws, sp)| {
            // Small sequence space near the wrap so hits are frequent.
            L4Info::Tcp(TcpSeg {
                flags,
                seq: (seq * 1000).wrapping_sub(4000),
                ack: (ack * 1000).wrapping_sub(4000),
                window,
                payload_len: len,
                wscale: ws,
                sack_permitted: sp,
            })
        });
    prop_oneof![
        4 => tcp,
        1 => Just(L4Info::Udp),
        1 => Just(L4Info::IcmpEchoRequest),
        1 => Just(L4Info::IcmpEchoReply),
        1 => Just(L4Info::Other),
    ]
}

#[derive(Clone, Debug)]
enum Op {
    Pkt { src: u8, dst: u8, sp: u8, dp: u8, proto: u8, l4: L4Info, dt: u64, allow: bool },
    Expire { dt: u64, budget: usize },
    Clear,
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (0u8..3, 0u8..3, 0u8..2, 0u8..2, prop_oneof![Just(6u8), Just(17), Just(1), Just(58), Just(47)], arb_l4(), 0u64..20_000_000_000, any::<bool>())
            .prop_map(|(src, dst, sp, dp, proto, l4, dt, allow)| Op::Pkt { src, dst, sp, dp, proto, l4, dt, allow }),
        2 => (0u64..200_000_000_000, 0usize..10).prop_map(|(dt, budget)| Op::Expire { dt, budget }),
        1 => Just(Op::Clear),
    ]
}

fn addr_of(i: u8) -> IpAddr {
    match i {
        0 => v4(10, 0, 0, 1),
        1 => v4(10, 0, 0, 2),
        _ => "2001:db8::7".parse().unwrap(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_input_never_panics(cap in 0usize..6, ops in proptest::collection::vec(arb_op(), 1..200)) {
        let mut t = ConnTable::new(cap, Timeouts::default());
        let index_cap = t.index.allocation_size();
        let mut now = 0u64;
        for op in ops {
            match op {
                Op::Pkt { src, dst, sp, dp, proto, l4, dt, allow } => {
                    now += dt;
                    let tup = tuple(addr_of(src), 1000 + u16::from(sp), addr_of(dst), 1000 + u16::from(dp), proto);
                    let calls = Cell::new(0);
                    let r = t.track(Timestamp(now), &tup, &l4, 100, || { calls.set(calls.get() + 1); allow });
                    prop_assert!(calls.get() <= 1);
                    if let Ok(tr) = r {
                        if tr.created { prop_assert_eq!(calls.get(), 1); prop_assert!(allow); }
                        let same_class = matches!((proto, &l4), (6, L4Info::Tcp(_)) | (17, L4Info::Udp));
                        prop_assert!(t.lookup(&tup).is_some() || !same_class);
                    }
                }
                Op::Expire { dt, budget } => { now += dt; let n = t.expire(Timestamp(now), budget); prop_assert!(n <= budget); }
                Op::Clear => t.clear(),
            }
            prop_assert!(t.len() <= t.capacity());
            prop_assert_eq!(t.index.allocation_size(), index_cap);
            check_invariants(&t);
        }
        let mut out = Vec::new();
        t.snapshot(Timestamp(now), usize::MAX, &mut out);
        prop_assert!(out.len() <= t.len());
    }
}

// An honest TCP conversation: two endpoints that obey the windows they are
// given, lose and reorder segments, retransmit (any sub-range of unacked
// data, as SACK recovery does), send keepalives and window updates, and close
// from either side or both at once. The firewall sits between them and must
// never drop anything.

#[derive(Clone, Debug)]
struct Ep {
    /// Direction of the segments this endpoint sends.
    dir: Direction,
    snd_una: u32,
    snd_nxt: u32,
    /// Right edge the peer granted (never moves left: honest receivers do
    /// not shrink the window).
    snd_edge: u32,
    rcv_nxt: u32,
    /// Right edge we advertised.
    rcv_edge: u32,
    /// Shift applied to the windows we advertise / that the peer
    /// advertises.
    scale: u8,
    peer_scale: u8,
    /// Window we would like to advertise (bytes).
    want_wnd: u32,
    fin_seq: Option<u32>,
}

fn sgt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

impl Ep {
    /// The window field to send now, keeping our right edge monotonic
    /// (RFC 9293 §3.8.6, "shrinking the window is strongly discouraged";
    /// Linux rounds up rather than shrink).
    fn adv(&mut self) -> u16 {
        let keep = self.rcv_edge.wrapping_sub(self.rcv_nxt);
        let wnd = self.want_wnd.max(if (keep as i32) > 0 { keep } else { 0 });
        let unit = 1u32 << self.scale;
        let field = (wnd.div_ceil(unit)).min(65535);
        self.rcv_edge = self.rcv_nxt.wrapping_add(field << self.scale);
        field as u16
    }
    fn segment(&mut self, flags: u8, seq: u32, len: u32) -> TcpSeg {
        let window = self.adv();
        TcpSeg { flags, seq, ack: self.rcv_nxt, window, payload_len: len, wscale: None, sack_permitted: false }
    }
    fn data_end(&self) -> u32 {
        self.fin_seq.unwrap_or(self.snd_nxt)
    }
}

#[derive(Clone, Debug)]
enum SimOp {
    Send { from: bool, len: u32, lost_before_fw: bool },
    Deliver { to: bool, pick: usize, lost: bool, ack: bool },
    Retransmit { from: bool, off: u32, len: u32 },
    WindowUpdate { from: bool, wnd: u32 },
    Keepalive { from: bool },
    Fin { from: bool },
    Rst { from: bool },
}

/// Small windows (where the lower-bound check bites) as often as large ones.
fn arb_wnd() -> impl Strategy<Value = u32> {
    prop_oneof![0u32..6000, 0u32..4_000_000]
}

fn arb_sim_op() -> impl Strategy<Value = SimOp> {
    prop_oneof![
        10 => (any::<bool>(), 1u32..3000, proptest::bool::weighted(0.05)).prop_map(|(from, len, lost_before_fw)| SimOp::Send { from, len, lost_before_fw }),
        12 => (any::<bool>(), any::<usize>(), proptest::bool::weighted(0.1), proptest::bool::weighted(0.7)).prop_map(|(to, pick, lost, ack)| SimOp::Deliver { to, pick, lost, ack }),
        3 => (any::<bool>(), prop_oneof![Just(0u32), any::<u32>()], 1u32..3000).prop_map(|(from, off, len)| SimOp::Retransmit { from, off, len }),
        2 => (any::<bool>(), arb_wnd()).prop_map(|(from, wnd)| SimOp::WindowUpdate { from, wnd }),
        1 => any::<bool>().prop_map(|from| SimOp::Keepalive { from }),
        1 => any::<bool>().prop_map(|from| SimOp::Fin { from }),
        1 => (any::<bool>(), proptest::bool::weighted(0.1)).prop_map(|(from, rst)| if rst { SimOp::Rst { from } } else { SimOp::Keepalive { from } }),
    ]
}

struct Sim {
    t: ConnTable,
    now: u64,
    eps: [Ep; 2],
    /// Segments in flight towards endpoint 0 / 1 (already past the firewall).
    net: [Vec<TcpSeg>; 2],
}

impl Sim {
    /// Pass a segment from endpoint `from` through the firewall; it must be
    /// accepted. Then put it on the wire towards the other endpoint.
    fn through_fw(&mut self, from: usize, sg: TcpSeg) -> Result<(), TestCaseError> {
        self.now += 1000;
        let tup = if self.eps[from].dir == Original { client_tuple() } else { client_tuple().reversed() };
        let r = self.t.track(Timestamp(self.now), &tup, &L4Info::Tcp(sg), 40 + sg.payload_len, || true);
        prop_assert!(
            r.is_ok(),
            "honest segment dropped: {:?} from {} {:?}\neps {:?}\nconn {:?}",
            r,
            from,
            sg,
            self.eps,
            self.t.slots.iter().find(|s| s.live).map(|s| s.kind)
        );
        self.net[1 - from].push(sg);
        Ok(())
    }

    /// Endpoint `to` processes one segment; maybe acknowledges.
    fn receive(&mut self, to: usize, sg: TcpSeg, ack: bool) -> Result<(), TestCaseError> {
        let ep = &mut self.eps[to];
        if sg.flags & ACK != 0 && !sgt(sg.ack, ep.snd_nxt) {
            if sgt(sg.ack, ep.snd_una) {
                ep.snd_una = sg.ack;
            }
            let edge = sg.ack.wrapping_add(u32::from(sg.window) << ep.peer_scale);
            if sgt(edge, ep.snd_edge) {
                ep.snd_edge = edge;
            }
        }
        let fin = u32::from(sg.flags & FIN != 0);
        let end = sg.seq.wrapping_add(sg.payload_len).wrapping_add(fin);
        let occupies = sg.payload_len + fin > 0;
        if occupies && !sgt(sg.seq, ep.rcv_nxt) && sgt(end, ep.rcv_nxt) {
            ep.rcv_nxt = end;
        }
        if occupies && ack {
            let seq = ep.snd_nxt;
            let a = ep.segment(ACK, seq, 0);
            self.through_fw(to, a)?;
        }
        Ok(())
    }

    /// Run `ops`, then close both sides.
    fn run(&mut self, ops: &[SimOp]) -> Result<(), TestCaseError> {
        if self.run_ops(ops)? {
            self.close()?;
        }
        Ok(())
    }

    /// Run `ops`; false if a RST ended the conversation.
    fn run_ops(&mut self, ops: &[SimOp]) -> Result<bool, TestCaseError> {
        for op in ops {
            match *op {
                SimOp::Send { from, len, lost_before_fw } => {
                    let f = usize::from(from);
                    let ep = &mut self.eps[f];
                    if ep.fin_seq.is_some() {
                        continue;
                    }
                    let usable = ep.snd_edge.wrapping_sub(ep.snd_nxt) as i32;
                    if usable <= 0 {
                        continue;
                    }
                    let l = len.min(usable as u32).min(1448);
                    let seq = ep.snd_nxt;
                    let sg = ep.segment(PSH | ACK, seq, l);
                    ep.snd_nxt = seq.wrapping_add(l);
                    if !lost_before_fw {
                        self.through_fw(f, sg)?;
                    }
                }
                SimOp::Deliver { to, pick, lost, ack } => {
                    let tq = usize::from(to);
                    if self.net[tq].is_empty() {
                        continue;
                    }
                    let sg = self.net[tq].remove(pick % self.net[tq].len());
                    if !lost {
                        self.receive(tq, sg, ack)?;
                    }
                }
                SimOp::Retransmit { from, off, len } => {
                    let f = usize::from(from);
                    let ep = &mut self.eps[f];
                    let outstanding = ep.data_end().wrapping_sub(ep.snd_una);
                    if (outstanding as i32) <= 0 {
                        // Maybe the FIN is unacked.
                        if let Some(fs) = ep.fin_seq {
                            if !sgt(ep.snd_una, fs) {
                                let sg = ep.segment(FIN | ACK, fs, 0);
                                self.through_fw(f, sg)?;
                            }
                        }
                        continue;
                    }
                    let start = ep.snd_una.wrapping_add(off % outstanding);
                    let l = len.min(ep.data_end().wrapping_sub(start)).min(1448);
                    let sg = ep.segment(ACK, start, l);
                    self.through_fw(f, sg)?;
                }
                SimOp::WindowUpdate { from, wnd } => {
                    let f = usize::from(from);
                    let ep = &mut self.eps[f];
                    ep.want_wnd = wnd.min(65535u32 << ep.scale);
                    let seq = ep.snd_nxt;
                    let sg = ep.segment(ACK, seq, 0);
                    self.through_fw(f, sg)?;
                }
                SimOp::Keepalive { from } => {
                    let f = usize::from(from);
                    let ep = &mut self.eps[f];
                    if ep.snd_una != ep.snd_nxt || ep.fin_seq.is_some() {
                        continue;
                    }
                    let seq = ep.snd_una.wrapping_sub(1);
                    let sg = ep.segment(ACK, seq, 0);
                    self.through_fw(f, sg)?;
                }
                SimOp::Fin { from } => {
                    let f = usize::from(from);
                    let ep = &mut self.eps[f];
                    if ep.fin_seq.is_some() {
                        continue;
                    }
                    let seq = ep.snd_nxt;
                    let sg = ep.segment(FIN | ACK, seq, 0);
                    ep.fin_seq = Some(seq);
                    ep.snd_nxt = seq.wrapping_add(1);
                    self.through_fw(f, sg)?;
                }
                SimOp::Rst { from } => {
                    let f = usize::from(from);
                    let ep = &mut self.eps[f];
                    let seq = ep.snd_nxt;
                    let sg = TcpSeg {
                        flags: RST,
                        seq,
                        ack: 0,
                        window: 0,
                        payload_len: 0,
                        wscale: None,
                        sack_permitted: false,
                    };
                    self.through_fw(f, sg)?;
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    fn close(&mut self) -> Result<(), TestCaseError> {
        // Close cleanly: both send FIN, everything is delivered and acked.
        for f in 0..2 {
            if self.eps[f].fin_seq.is_none() {
                // Send what remains unsent? Not needed: FIN after the data
                // sent so far.
                let ep = &mut self.eps[f];
                let seq = ep.snd_nxt;
                let sg = ep.segment(FIN | ACK, seq, 0);
                ep.fin_seq = Some(seq);
                ep.snd_nxt = seq.wrapping_add(1);
                self.through_fw(f, sg)?;
            }
        }
        Ok(())
    }
}

/// Three-way handshake between the simulated endpoints, through the
/// firewall (windows of SYNs are unscaled).
#[allow(clippy::too_many_arguments)]
fn connect(
    isn_c: u32,
    isn_s: u32,
    ws_c: Option<u8>,
    ws_s: Option<u8>,
    win_c: u16,
    win_s: u16,
    want_c: u32,
    want_s: u32,
) -> Result<(Sim, Option<FlowHandle>), TestCaseError> {
    let scaled = ws_c.is_some() && ws_s.is_some();
    let sc = if scaled { ws_c.unwrap_or(0) } else { 0 };
    let ss = if scaled { ws_s.unwrap_or(0) } else { 0 };
    let (c1, s1) = (isn_c.wrapping_add(1), isn_s.wrapping_add(1));
    let mut sim = Sim {
        t: ConnTable::new(4, Timeouts::default()),
        now: 1_000_000_000,
        eps: [
            Ep {
                dir: Original,
                snd_una: c1,
                snd_nxt: c1,
                snd_edge: c1.wrapping_add(u32::from(win_s)),
                rcv_nxt: s1,
                rcv_edge: s1,
                scale: sc,
                peer_scale: ss,
                want_wnd: want_c.min(65535u32 << sc),
                fin_seq: None,
            },
            Ep {
                dir: Reply,
                snd_una: s1,
                snd_nxt: s1,
                snd_edge: s1,
                rcv_nxt: c1,
                rcv_edge: c1.wrapping_add(u32::from(win_s)),
                scale: ss,
                peer_scale: sc,
                want_wnd: want_s.min(65535u32 << ss),
                fin_seq: None,
            },
        ],
        net: [Vec::new(), Vec::new()],
    };
    // Handshake (windows of SYNs are unscaled).
    let syn_c =
        TcpSeg { flags: SYN, seq: isn_c, ack: 0, window: win_c, payload_len: 0, wscale: ws_c, sack_permitted: true };
    let r = sim.t.track(Timestamp(sim.now), &client_tuple(), &L4Info::Tcp(syn_c), 60, || true);
    prop_assert!(r.is_ok_and(|x| x.created));
    let synack = TcpSeg {
        flags: SYN | ACK,
        seq: isn_s,
        ack: c1,
        window: win_s,
        payload_len: 0,
        wscale: ws_s,
        sack_permitted: true,
    };
    let r = sim.t.track(Timestamp(sim.now), &client_tuple().reversed(), &L4Info::Tcp(synack), 60, || true);
    prop_assert!(r.is_ok());
    // The third segment; the server's send edge follows from it.
    let ack = sim.eps[0].segment(ACK, c1, 0);
    sim.eps[1].snd_edge = ack.ack.wrapping_add(u32::from(ack.window) << sc);
    let r = sim.t.track(Timestamp(sim.now), &client_tuple(), &L4Info::Tcp(ack), 60, || true);
    prop_assert!(r.is_ok());
    let h = r.map(|x| x.handle).ok();
    prop_assert_eq!(h.and_then(|h| sim.t.tcp_state(h)), Some(Established));
    Ok((sim, h))
}

/// A 20 MB download in the shape of Linux-to-Linux HTTP: wscale 7 both
/// ways, the receive window auto-tuned from 64 KiB to 6 MiB, an ACK every
/// second segment, 1% of segments lost beyond the firewall and recovered
/// by retransmission, reordering within each flight, FIN from the server
/// first, then the client.
#[test]
fn bulk_download_20mb_with_window_growth() {
    let (mut sim, h) = connect(0x1234_5678, 0xFFFF_0000, Some(7), Some(7), 64240, 65160, 64256, 64256).unwrap();
    let h = h.unwrap();
    let total: u32 = 20 * 1024 * 1024;
    let start = sim.eps[1].snd_una;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut rounds = 0;
    // Client request.
    sim.run_ops(&[
        SimOp::Send { from: false, len: 300, lost_before_fw: false },
        SimOp::Deliver { to: true, pick: 0, lost: false, ack: true },
        SimOp::Deliver { to: false, pick: 0, lost: false, ack: false },
    ])
    .unwrap();
    while sim.eps[1].snd_una.wrapping_sub(start) < total {
        rounds += 1;
        assert!(rounds < 100_000, "stalled");
        // Auto-tuning: the client's window grows with the data received.
        let got = sim.eps[0].rcv_nxt.wrapping_sub(start);
        sim.eps[0].want_wnd = (64256 + got / 2).min(6 << 20);
        // Fill the window (the sender's edge) with full segments.
        let mut ops = Vec::new();
        loop {
            let e = &sim.eps[1];
            let sent = e.snd_nxt.wrapping_sub(start);
            let usable = e.snd_edge.wrapping_sub(e.snd_nxt) as i32;
            if usable <= 0 || sent >= total || ops.len() > 4000 {
                break;
            }
            let len = (total - sent).min(1448).min(usable as u32);
            sim.run_ops(&[SimOp::Send { from: true, len, lost_before_fw: false }]).unwrap();
            ops.push(());
        }
        // Deliver the flight, slightly reordered, 1% lost; ACK every second.
        let mut n = 0;
        while !sim.net[0].is_empty() {
            let pick = (next() % 3) as usize;
            let lost = next() % 100 == 0;
            n += 1;
            sim.run_ops(&[SimOp::Deliver { to: false, pick, lost, ack: n % 2 == 0 || sim.net[0].len() == 1 }]).unwrap();
        }
        // ACKs back to the server (some lost too).
        while !sim.net[1].is_empty() {
            let lost = next() % 50 == 0;
            sim.run_ops(&[SimOp::Deliver { to: true, pick: 0, lost, ack: false }]).unwrap();
        }
        // Recovery: retransmit from snd_una (what SACK would point at), and
        // a window update from the client if it has nothing to ACK.
        if sim.eps[1].snd_una != sim.eps[1].snd_nxt {
            sim.run_ops(&[SimOp::Retransmit { from: true, off: 0, len: 1448 }]).unwrap();
        } else {
            sim.run_ops(&[SimOp::WindowUpdate { from: false, wnd: sim.eps[0].want_wnd }]).unwrap();
        }
        while !sim.net[0].is_empty() {
            sim.run_ops(&[SimOp::Deliver { to: false, pick: 0, lost: false, ack: true }]).unwrap();
        }
        while !sim.net[1].is_empty() {
            sim.run_ops(&[SimOp::Deliver { to: true, pick: 0, lost: false, ack: false }]).unwrap();
        }
    }
    assert_eq!(sim.t.tcp_state(h), Some(Established));
    // The firewall saw the window grow to megabytes.
    match sim.t.slots[h.index() as usize].kind {
        FlowKind::Tcp(cn) => assert!(cn.peers[0].maxwin > 4 << 20, "{:?}", cn.peers[0]),
        _ => panic!("not tcp"),
    }
    // Server closes, then the client; all delivered and acknowledged.
    let close = [
        SimOp::Fin { from: true },
        SimOp::Deliver { to: false, pick: 0, lost: false, ack: true },
        SimOp::Deliver { to: true, pick: 0, lost: false, ack: false },
    ];
    sim.run_ops(&close).unwrap();
    assert_eq!(sim.t.tcp_state(h), Some(FinWait));
    let close = [
        SimOp::Fin { from: false },
        SimOp::Deliver { to: true, pick: 0, lost: false, ack: true },
        SimOp::Deliver { to: false, pick: 0, lost: false, ack: false },
    ];
    sim.run_ops(&close).unwrap();
    assert_eq!(sim.t.tcp_state(h), Some(TimeWait));
    let mut out = Vec::new();
    sim.t.snapshot(Timestamp(sim.now), 1, &mut out);
    assert!(out[0].bytes[1] > u64::from(total));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn honest_conversation_is_never_dropped(
        isn_c in any::<u32>(),
        isn_s in any::<u32>(),
        ws_c in proptest::option::of(0u8..=14),
        ws_s in proptest::option::of(0u8..=14),
        win_c in 1u16..=65535,
        win_s in 1u16..=65535,
        want_c in arb_wnd(),
        want_s in arb_wnd(),
        ops in proptest::collection::vec(arb_sim_op(), 0..300),
    ) {
        let (mut sim, h) = connect(isn_c, isn_s, ws_c, ws_s, win_c, win_s, want_c, want_s)?;
        sim.run(&ops)?;
        // Whatever happened, the firewall is in a sensible state.
        let st = h.and_then(|h| sim.t.tcp_state(h));
        prop_assert!(st.is_some());
    }
}

/// `prefetch_slot` loads the line at the slot's start and the line of
/// `bytes`: the key must be in the first, `bytes` in the second.
#[test]
fn slot_layout_matches_the_prefetch() {
    assert_eq!(core::mem::offset_of!(Slot, key), 0);
    assert!(core::mem::offset_of!(Slot, last_seen) + 8 <= 64);
    assert!(core::mem::offset_of!(Slot, live) < 64);
    assert!(core::mem::offset_of!(Slot, bytes) >= 64);
    assert_eq!(core::mem::align_of::<Slot>(), 64);
}

// --- Flow state export / install (state.rs, R11) ---

/// A segment relative to the flow's current edges (as in `tcp.rs`'s
/// shortcut property), for driving two tables with the same input.
#[allow(clippy::too_many_arguments)]
fn rel_seg(t: &ConnTable, h: FlowHandle, reply: bool, flags: u8, dseq: i32, dack: i32, window: u16, len: u32) -> TcpSeg {
    let (s, r) = if reply { (1, 0) } else { (0, 1) };
    let c = match t.slots[h.index() as usize].kind {
        FlowKind::Tcp(c) => c,
        _ => panic!("not tcp"),
    };
    TcpSeg {
        flags,
        seq: c.peers[s].end.0.wrapping_add(dseq as u32),
        ack: c.peers[r].end.0.wrapping_add(dack as u32),
        window,
        payload_len: len,
        wscale: None,
        sack_permitted: false,
    }
}

fn arb_raw_seg() -> impl Strategy<Value = (bool, u8, i32, i32, u16, u32)> {
    (
        any::<bool>(),
        prop::sample::select(vec![ACK, ACK | PSH, FIN | ACK, RST, RST | ACK, SYN, SYN | ACK, ACK | URG, 0, FIN]),
        prop_oneof![4 => -3000i32..3000, 1 => any::<i32>()],
        prop_oneof![4 => -3000i32..3000, 1 => any::<i32>()],
        any::<u16>(),
        0u32..2000,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// An exact install (the wire form and back, into another table) of an
    /// exported flow gives the same verdict as the original for every
    /// segment that follows — honest or not, every flag combination — and
    /// the two flows stay equal.
    #[test]
    fn export_install_same_verdicts(
        isn_c in any::<u32>(), isn_s in any::<u32>(),
        ws_c in proptest::option::of(0u8..=14), ws_s in proptest::option::of(0u8..=14),
        win_c in 1u16..=65535, win_s in 1u16..=65535,
        want_c in arb_wnd(), want_s in arb_wnd(),
        prefix in proptest::collection::vec(arb_sim_op(), 0..80),
        segs in proptest::collection::vec(arb_raw_seg(), 1..60),
    ) {
        let (mut sim, h) = connect(isn_c, isn_s, ws_c, ws_s, win_c, win_s, want_c, want_s)?;
        let h = h.unwrap();
        sim.run_ops(&prefix)?;
        let now = Timestamp(sim.now + 5 * MS);
        let Some(st) = sim.t.export(now, h) else { return Ok(()) };
        let bytes = st.to_bytes();
        let back = FlowState::from_bytes(&bytes).unwrap();
        prop_assert_eq!(back, st);
        prop_assert_eq!(st.idle(), Duration(5 * MS));
        let mut t2 = ConnTable::new(4, Timeouts::default());
        let h2 = t2.install(now, &client_tuple(), back).unwrap();
        prop_assert_eq!(t2.export(now, h2), Some(st));
        prop_assert_eq!(t2.lookup(&client_tuple().reversed()), Some((h2, Reply)));
        check_invariants(&t2);
        let mut now = now;
        for (reply, flags, dseq, dack, window, len) in segs {
            now = Timestamp(now.0 + MS);
            let tup = if reply { client_tuple().reversed() } else { client_tuple() };
            let Some(sg) = (sim.t.slots[h.index() as usize].live).then(|| rel_seg(&sim.t, h, reply, flags, dseq, dack, window, len)) else { break };
            let a = sim.t.track(now, &tup, &L4Info::Tcp(sg), 60, || true).map(|x| (x.dir, x.created));
            let b = t2.track(now, &tup, &L4Info::Tcp(sg), 60, || true).map(|x| (x.dir, x.created));
            prop_assert_eq!(a, b, "{:?}", sg);
            let (ha, hb) = (sim.t.lookup(&tup), t2.lookup(&tup));
            prop_assert_eq!(ha.is_some(), hb.is_some());
            if let (Some((ha, _)), Some((hb, _))) = (ha, hb) {
                prop_assert_eq!(sim.t.export(now, ha), t2.export(now, hb));
                if ha != h { break; } // reopened: a new flow in another slot
            }
        }
    }

    /// A stale record is enough: the flow exported at some point, then the
    /// connection goes on through the old owner (which dies), then the flow
    /// is installed from the old export with `resync` at another node — and
    /// every segment of the honest conversation that follows (retransmissions,
    /// reordering, losses, window changes, FINs) is accepted there.
    #[test]
    fn stale_install_accepts_honest_traffic(
        isn_c in any::<u32>(), isn_s in any::<u32>(),
        ws_c in proptest::option::of(0u8..=14), ws_s in proptest::option::of(0u8..=14),
        win_c in 1u16..=65535, win_s in 1u16..=65535,
        want_c in arb_wnd(), want_s in arb_wnd(),
        prefix in proptest::collection::vec(arb_sim_op(), 0..100),
        middle in proptest::collection::vec(arb_sim_op(), 0..200),
        suffix in proptest::collection::vec(arb_sim_op(), 0..200),
    ) {
        let (mut sim, h) = connect(isn_c, isn_s, ws_c, ws_s, win_c, win_s, want_c, want_s)?;
        let h = h.unwrap();
        if !sim.run_ops(&prefix)? {
            return Ok(());
        }
        let old = sim.t.export(Timestamp(sim.now), h).unwrap();
        if !sim.run_ops(&middle)? {
            return Ok(());
        }
        let mut t2 = ConnTable::new(4, Timeouts::default());
        t2.install(Timestamp(sim.now), &client_tuple(), old.resync()).unwrap();
        sim.t = t2;
        sim.run(&suffix)?;
    }
}

/// The bulk download of `bulk_download_20mb_with_window_growth`, with the
/// owner lost twice mid-transfer: each time the flow is installed from the
/// record of the handshake (64 KiB windows, the megabytes of data since
/// unseen) and not one segment is dropped.
#[test]
fn stale_install_mid_bulk_transfer() {
    let (mut sim, h) = connect(0x1234_5678, 0xFFFF_0000, Some(7), Some(7), 64240, 65160, 64256, 64256).unwrap();
    let h = h.unwrap();
    let record = sim.t.export(Timestamp(sim.now), h).unwrap();
    let start = sim.eps[1].snd_una;
    let total: u32 = 8 * 1024 * 1024;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut takeovers = 0;
    let mut rounds = 0;
    while sim.eps[1].snd_una.wrapping_sub(start) < total {
        rounds += 1;
        assert!(rounds < 100_000, "stalled");
        let got = sim.eps[0].rcv_nxt.wrapping_sub(start);
        sim.eps[0].want_wnd = (64256 + got / 2).min(6 << 20);
        if (got > total / 3 && takeovers == 0) || (got > 2 * (total / 3) && takeovers == 1) {
            // The owner dies: the flight in the network is lost with it
            // (never acknowledged), the new owner has only the old record.
            sim.net[0].clear();
            sim.net[1].clear();
            let mut t2 = ConnTable::new(4, Timeouts::default());
            t2.install(Timestamp(sim.now), &client_tuple(), record.resync()).unwrap();
            sim.t = t2;
            takeovers += 1;
            // The server's retransmission timer fires: go back to snd_una.
            sim.run_ops(&[SimOp::Retransmit { from: true, off: 0, len: 1448 }]).unwrap();
        }
        loop {
            let e = &sim.eps[1];
            let sent = e.snd_nxt.wrapping_sub(start);
            let usable = e.snd_edge.wrapping_sub(e.snd_nxt) as i32;
            if usable <= 0 || sent >= total {
                break;
            }
            let len = (total - sent).min(1448).min(usable as u32);
            sim.run_ops(&[SimOp::Send { from: true, len, lost_before_fw: false }]).unwrap();
        }
        let mut n = 0;
        while !sim.net[0].is_empty() {
            let pick = (next() % 3) as usize;
            let lost = next() % 100 == 0;
            n += 1;
            sim.run_ops(&[SimOp::Deliver { to: false, pick, lost, ack: n % 2 == 0 || sim.net[0].len() == 1 }]).unwrap();
        }
        while !sim.net[1].is_empty() {
            sim.run_ops(&[SimOp::Deliver { to: true, pick: 0, lost: next() % 50 == 0, ack: false }]).unwrap();
        }
        if sim.eps[1].snd_una != sim.eps[1].snd_nxt {
            sim.run_ops(&[SimOp::Retransmit { from: true, off: 0, len: 1448 }]).unwrap();
        } else {
            sim.run_ops(&[SimOp::WindowUpdate { from: false, wnd: sim.eps[0].want_wnd }]).unwrap();
        }
        while !sim.net[0].is_empty() {
            sim.run_ops(&[SimOp::Deliver { to: false, pick: 0, lost: false, ack: true }]).unwrap();
        }
        while !sim.net[1].is_empty() {
            sim.run_ops(&[SimOp::Deliver { to: true, pick: 0, lost: false, ack: false }]).unwrap();
        }
    }
    assert_eq!(takeovers, 2);
    // The close after the takeovers reaches TIME_WAIT: the FINs are seen
    // and acknowledged (the acks of data sent before an install raised
    // the peers' `end`, so the FIN's ack matches it).
    let h = sim.t.lookup(&client_tuple()).unwrap().0;
    for from in [true, false] {
        let ops = [
            SimOp::Fin { from },
            SimOp::Deliver { to: !from, pick: 0, lost: false, ack: true },
            SimOp::Deliver { to: from, pick: 0, lost: false, ack: false },
        ];
        sim.run_ops(&ops).unwrap();
    }
    assert_eq!(sim.t.tcp_state(h), Some(TimeWait));
}

#[test]
fn install_limits_classes_and_replacement() {
    let now = Timestamp::from_secs(10);
    let mut t = ConnTable::new(2, Timeouts::default());
    let udp = tuple(v4(10, 0, 0, 1), 5000, v4(192, 0, 2, 10), 53, ip_proto::UDP);
    let r = t.track(now, &udp, &L4Info::Udp, 60, || true).unwrap();
    let st = t.export(Timestamp(now.0 + 7 * MS), r.handle).unwrap();
    assert_eq!((st.tcp_state(), st.idle()), (None, Duration(7 * MS)));
    assert_eq!(FlowState::from_bytes(&st.to_bytes()), Ok(st));
    // A TCP state does not fit a UDP tuple, and the reverse.
    let (mut tc, _) = connect(1, 2, None, None, 1000, 1000, 1000, 1000).unwrap();
    let tcp_st = tc.t.export(now, FlowHandle(tc.t.slots.iter().position(|s| s.live).unwrap() as u32)).unwrap();
    assert_eq!(t.install(now, &udp, tcp_st), Err(D::ProtoUnsupported));
    assert_eq!(tc.t.install(now, &client_tuple(), st), Err(D::ProtoUnsupported));
    // Installing over an existing flow replaces it in place; the idle age
    // carries over.
    let h = t.install(now, &udp, st).unwrap();
    assert_eq!((h, t.len()), (r.handle, 1));
    assert_eq!(t.export(now, h).map(|s| s.idle()), Some(Duration(7 * MS)));
    // Full table: an error, nothing changed.
    let other = tuple(v4(10, 0, 0, 2), 5000, v4(192, 0, 2, 10), 53, ip_proto::UDP);
    t.install(now, &other, st).unwrap();
    let third = tuple(v4(10, 0, 0, 3), 5000, v4(192, 0, 2, 10), 53, ip_proto::UDP);
    assert_eq!(t.install(now, &third, st), Err(D::FlowTableFull));
    assert_eq!((t.len(), t.stats().installed), (2, 1));
    check_invariants(&t);
    // Past its timeout (measured from the exported idle age) it is dead.
    assert!(t.track(Timestamp(now.0 + 120_000 * MS - 7 * MS), &other, &L4Info::Udp, 60, || false).is_err());
    // Stale handles export nothing; `slot` lists live flows only.
    assert_eq!(t.export(now, FlowHandle(9)), None);
    assert!((0..t.capacity()).filter_map(|i| t.slot(i)).all(|(_, tu)| tu == udp));
}

#[test]
fn flow_state_bytes_are_validated() {
    let (sim, h) = connect(7, 9, Some(3), Some(14), 1000, 2000, 50_000, 70_000).unwrap();
    let st = sim.t.export(Timestamp(sim.now), h.unwrap()).unwrap().resync();
    let b = st.to_bytes();
    assert_eq!(b.len(), FlowState::LEN);
    assert_eq!(FlowState::from_bytes(&b), Ok(st));
    assert!(FlowState::from_bytes(&b[..39]).is_err());
    // Every single-byte change either is refused or decodes to a state
    // that encodes back to exactly those bytes (one meaning per datagram).
    for i in 0..FlowState::LEN {
        for x in [1u8, 0x80, 0xff] {
            let mut c = b;
            c[i] ^= x;
            if let Ok(s) = FlowState::from_bytes(&c) {
                assert_eq!(s.to_bytes(), c, "byte {i} ^ {x:#x}");
            }
        }
    }
    let mut bad = b;
    bad[0] = 4;
    assert_eq!(FlowState::from_bytes(&bad), Err(FlowStateError::Field("class")));
    let mut bad = b;
    bad[1] = 9;
    assert_eq!(FlowState::from_bytes(&bad), Err(FlowStateError::Field("TCP state")));
    let mut bad = b;
    bad[12 + 12] = 15;
    assert_eq!(FlowState::from_bytes(&bad), Err(FlowStateError::Field("window scale")));
    // A UDP state with TCP bytes set is refused.
    let mut udp = [0u8; FlowState::LEN];
    udp[0] = 1;
    assert!(FlowState::from_bytes(&udp).is_ok());
    udp[20] = 1;
    assert!(FlowState::from_bytes(&udp).is_err());
}

/// `FlowState` stays a small `Copy` value (it rides in every director and
/// backup record): at most one cache line in memory, 44 bytes on the wire.
#[test]
fn flow_state_is_small() {
    println!("FlowState: {} bytes in memory, {} on the wire", core::mem::size_of::<FlowState>(), FlowState::LEN);
    assert!(core::mem::size_of::<FlowState>() <= 64);
    assert_eq!(FlowState::LEN, 44);
}

/// A flow's mark is reported once when the flow is removed, however it
/// goes (expiry, a replacing dead entry, `remove_flow`, `clear`); an
/// `install` over a live flow keeps it; unmarked flows and a table without
/// the log report nothing.
#[test]
fn marks_are_reported_when_their_flow_ends() {
    let to = Timeouts::default();
    let t0 = Timestamp::from_secs(1);
    let udp = |p: u16| tuple(v4(10, 0, 0, 1), p, v4(10, 0, 0, 2), 53, ip_proto::UDP);
    let drained = |t: &mut ConnTable| {
        let mut v = vec![];
        t.drain_ended(|m| v.push(m));
        v
    };
    let mut t = ConnTable::new(8, to);
    t.log_ended();
    let h: Vec<FlowHandle> = (1..=4).map(|p| t.track(t0, &udp(p), &L4Info::Udp, 1, || true).unwrap().handle).collect();
    for (i, &f) in h.iter().enumerate().take(3) {
        t.set_mark(f, 10 + i as u32);
    }
    assert_eq!(t.mark(h[0]), 10);
    // A new state for a live flow: the same flow, the same mark.
    let st = t.export(t0, h[2]).unwrap();
    assert_eq!(t.install(t0, &udp(3), st).unwrap(), h[2]);
    assert_eq!(t.mark(h[2]), 12);
    t.remove_flow(h[1]);
    assert_eq!(drained(&mut t), [11]);
    assert_eq!(drained(&mut t), [] as [u32; 0], "once");
    // Expiry: flow 1 (marked) and flow 4 (not).
    let late = t0.saturating_add(to.udp);
    let keep = Timestamp(late.nanos() - 1_000 * MS);
    assert!(!t.track(keep, &udp(3), &L4Info::Udp, 1, || true).unwrap().created);
    assert_eq!(t.expire(late, 100), 2);
    assert_eq!(drained(&mut t), [10]);
    // A dead flow replaced by a new packet of its tuple.
    let later = late.saturating_add(to.udp);
    let again = t.track(later, &udp(3), &L4Info::Udp, 1, || true).unwrap();
    assert!(again.created);
    assert_eq!(t.mark(again.handle), 0, "a new flow starts unmarked");
    assert_eq!(drained(&mut t), [12]);
    t.set_mark(again.handle, 99);
    t.clear();
    assert_eq!(drained(&mut t), [99]);
    assert_eq!(t.ended_lost, 0);
    check_invariants(&t);
    // Without the log: nothing is kept.
    let mut t = ConnTable::new(8, to);
    let f = t.track(t0, &udp(1), &L4Info::Udp, 1, || true).unwrap().handle;
    t.set_mark(f, 5);
    t.remove_flow(f);
    assert_eq!(drained(&mut t), [] as [u32; 0]);
}

// --- The flow log (`flowlog`). ---

fn udp_tuple(sp: u16) -> FiveTuple {
    tuple(v4(10, 0, 0, 1), sp, v4(192, 0, 2, 10), 53, ip_proto::UDP)
}

/// The records queued so far.
fn drained(t: &mut ConnTable) -> Vec<FlowRecord> {
    let mut v = Vec::new();
    t.drain_flow_log(|r| v.push(*r));
    v
}

/// A UDP flow made by `track` and logged as built at `at` ms.
fn logged_udp(t: &mut ConnTable, sp: u16, at: u64) -> FlowHandle {
    let tr = t.track(Timestamp(at * MS), &udp_tuple(sp), &L4Info::Udp, 100, || true).unwrap();
    t.log_built(Timestamp(at * MS), tr.handle, IfIndex(0), IfIndex(1), RuleRef::Rule(3));
    tr.handle
}

#[test]
fn flow_log_off_costs_nothing_and_records_nothing() {
    let mut t = ConnTable::new(16, Timeouts::default());
    let h = t.track(Timestamp(0), &udp_tuple(1), &L4Info::Udp, 100, || true).unwrap().handle;
    t.log_built(Timestamp(0), h, IfIndex(0), IfIndex(1), RuleRef::SecurityLevel);
    t.log_denied(Timestamp(0), &udp_tuple(2), 60, IfIndex(0), IfIndex(1), RuleRef::SecurityLevel);
    t.remove_flow(h);
    assert!(!t.logging_flows() && t.flow_log_pending() == 0 && t.flow_log_counters().is_none());
    assert!(drained(&mut t).is_empty());
}

#[test]
fn flow_log_built_then_ended_with_counts_and_reason() {
    let to = Timeouts { udp: Duration(10 * 1000 * MS), ..Timeouts::default() };
    let mut t = ConnTable::new(16, to);
    t.log_flows(None);
    let h = logged_udp(&mut t, 1, 0);
    // A reply and another request.
    t.track(Timestamp(5 * MS), &udp_tuple(1).reversed(), &L4Info::Udp, 300, || true).unwrap();
    t.track(Timestamp(7 * MS), &udp_tuple(1), &L4Info::Udp, 100, || true).unwrap();
    let built = drained(&mut t);
    assert_eq!(built.len(), 1);
    assert_eq!((built[0].event, built[0].packets, built[0].rule), (FlowEvent::Built, [1, 0], RuleRef::Rule(3)));
    // Idle past the timeout: expired, one Ended(Idle) with every count.
    assert_eq!(t.expire(Timestamp(20_000 * MS), 64), 1);
    let ended = drained(&mut t);
    assert_eq!(ended.len(), 1, "{ended:?}");
    let e = ended[0];
    assert_eq!(e.event, FlowEvent::Ended(EndReason::Idle));
    assert_eq!((e.packets, e.bytes), ([2, 1], [200, 300]));
    assert_eq!((e.start, e.last), (Timestamp(0), Timestamp(7 * MS)));
    assert_eq!((e.tuple, e.ingress, e.egress, e.tcp_flags), (udp_tuple(1), IfIndex(0), IfIndex(1), 0));
    assert!(t.slot(h.index() as usize).is_none());
    assert!(drained(&mut t).is_empty(), "reported once");
    assert_eq!(t.flow_log_counters().map(|c| (c.records, c.lost)), Some((2, 0)));
}

#[test]
fn flow_log_end_reasons_by_how_the_flow_goes() {
    let mut t = ConnTable::new(64, Timeouts::default());
    t.log_flows(None);
    // TCP: a handshake, then a reset.
    let c = client_tuple();
    let now = Timestamp(MS);
    let h = t.track(now, &c, &L4Info::Tcp(syn(SYN, 100, 0, 1000, None)), 60, || true).unwrap().handle;
    t.log_built(now, h, IfIndex(0), IfIndex(1), RuleRef::SecurityLevel);
    t.track(now, &c.reversed(), &L4Info::Tcp(syn(SYN | ACK, 500, 101, 1000, None)), 60, || true).unwrap();
    t.track(now, &c, &L4Info::Tcp(seg(RST, 101, 0, 0)), 40, || true).unwrap();
    t.expire(Timestamp(3600 * 1000 * MS), 64);
    // A flow handed over, one cleared, one never logged (another owner's).
    let a = logged_udp(&mut t, 10, 0);
    logged_udp(&mut t, 11, 0);
    t.track(Timestamp(0), &udp_tuple(12), &L4Info::Udp, 100, || true).unwrap();
    t.remove_flow(a);
    t.clear();
    let ends: Vec<FlowEvent> = drained(&mut t).iter().map(|r| r.event).filter(|e| *e != FlowEvent::Built).collect();
    assert_eq!(
        ends,
        [
            FlowEvent::Ended(EndReason::Reset),
            FlowEvent::Ended(EndReason::HandedOver),
            FlowEvent::Ended(EndReason::Cleared)
        ]
    );
}

#[test]
fn flow_log_queues_are_bounded_and_denied_ones_apart() {
    let n = flowlog::FLOW_RECORDS + 10;
    let mut t = ConnTable::new(n, Timeouts::default());
    t.log_flows(None);
    for i in 0..n {
        logged_udp(&mut t, i as u16, 0);
    }
    for i in 0..flowlog::DENY_RECORDS + 5 {
        t.log_denied(Timestamp(0), &udp_tuple(i as u16), 60, IfIndex(1), IfIndex(0), RuleRef::Rule(0));
    }
    let c = t.flow_log_counters().unwrap();
    assert_eq!((c.records, c.lost, c.denied, c.denied_lost), (flowlog::FLOW_RECORDS as u64, 10, flowlog::DENY_RECORDS as u64, 5));
    let all = drained(&mut t);
    assert_eq!(all.len(), flowlog::FLOW_RECORDS + flowlog::DENY_RECORDS, "a full built queue leaves the denied one its room");
    assert_eq!(all.iter().filter(|r| r.event == FlowEvent::Denied).count(), flowlog::DENY_RECORDS);
}

proptest! {
    /// Whatever happens to the flows, each logged one ends exactly once
    /// (nothing is lost while the queue is drained in time), unlogged ones
    /// never.
    #[test]
    fn every_logged_flow_ends_exactly_once(ops in proptest::collection::vec((0u8..5, 0u16..24), 0..200)) {
        let to = Timeouts { udp: Duration(50 * MS), ..Timeouts::default() };
        let mut t = ConnTable::new(32, to);
        t.log_flows(None);
        let (mut built, mut ended) = (std::collections::HashMap::<u16, i32>::new(), std::collections::HashMap::<u16, i32>::new());
        let mut now = 0u64;
        for (op, sp) in ops {
            now += 10;
            match op {
                0 | 1 => {
                    if let Ok(tr) = t.track(Timestamp(now * MS), &udp_tuple(sp), &L4Info::Udp, 100, || true) {
                        if tr.created && op == 0 {
                            t.log_built(Timestamp(now * MS), tr.handle, IfIndex(0), IfIndex(1), RuleRef::SecurityLevel);
                        }
                    }
                }
                2 => {
                    if let Some((h, _)) = t.lookup(&udp_tuple(sp)) {
                        t.remove_flow(h);
                    }
                }
                3 => { t.expire(Timestamp(now * MS), 8); }
                _ => { if sp == 0 { t.clear(); } }
            }
            t.drain_flow_log(|r| {
                let m = if r.event == FlowEvent::Built { &mut built } else { &mut ended };
                *m.entry(r.tuple.src_port).or_default() += 1;
            });
            check_invariants(&t);
            // Never more ended than built per tuple, at most one more built.
            for (sp, b) in &built {
                let e = ended.get(sp).copied().unwrap_or(0);
                prop_assert!(e == *b || e + 1 == *b, "port {sp}: built {b}, ended {e}");
            }
        }
        t.clear();
        t.drain_flow_log(|r| *ended.entry(r.tuple.src_port).or_default() += i32::from(r.event != FlowEvent::Built));
        prop_assert_eq!(&built, &ended);
        prop_assert_eq!(t.flow_log_counters().map(|c| c.lost), Some(0));
    }
}

#[test]
fn flow_log_active_records_report_what_is_new() {
    let to = Timeouts { udp: Duration(100 * 1000 * MS), ..Timeouts::default() };
    let mut t = ConnTable::new(16, to);
    t.log_flows(Some(Duration(1000 * MS)));
    let h = logged_udp(&mut t, 1, 0);
    assert_eq!(drained(&mut t).len(), 1, "built");
    t.expire(Timestamp(999 * MS), 64);
    assert!(drained(&mut t).is_empty(), "not due yet");
    t.track(Timestamp(1000 * MS), &udp_tuple(1), &L4Info::Udp, 100, || true).unwrap();
    t.expire(Timestamp(1500 * MS), 64);
    let a = drained(&mut t);
    assert_eq!(a.len(), 1);
    assert_eq!((a[0].event, a[0].packets, a[0].reported_packets, a[0].bytes), (FlowEvent::Active, [2, 0], [0, 0], [200, 0]));
    t.expire(Timestamp(2000 * MS), 64);
    assert!(drained(&mut t).is_empty(), "the next one a timeout after the last");
    t.track(Timestamp(2100 * MS), &udp_tuple(1).reversed(), &L4Info::Udp, 50, || true).unwrap();
    t.remove_flow(h);
    let e = drained(&mut t);
    assert_eq!(e.len(), 1);
    assert_eq!((e[0].event, e[0].packets, e[0].reported_packets), (FlowEvent::Ended(EndReason::HandedOver), [2, 1], [2, 0]));
    assert_eq!((e[0].bytes, e[0].reported_bytes), ([200, 50], [200, 0]));
}

/// Records carry their flow's mark (a `Built` record the mark set right
/// after it), and an annotation pass fills in `nat` once per record,
/// holding back a `Built` record whose flow may still be marked.
#[test]
fn flow_log_marks_and_annotation_passes() {
    let mut t = ConnTable::new(16, Timeouts::default());
    t.log_flows(None);
    let nat = |r: &FlowRecord| Some(FlowNat { src: Ipv4Addr::new(192, 0, 2, 1), src_port: r.mark as u16, dst: Ipv4Addr::LOCALHOST, dst_port: 0 });
    let h1 = logged_udp(&mut t, 1, 0);
    // A pass between the Built record and the mark holds it back.
    let mut seen = 0;
    t.annotate_flow_log(true, |r| {
        seen += 1;
        nat(r)
    });
    assert_eq!(seen, 0);
    t.set_mark(h1, 7);
    let h2 = logged_udp(&mut t, 2, 0);
    t.set_mark(h2, 9);
    t.annotate_flow_log(true, |r| {
        seen += 1;
        nat(r)
    });
    assert_eq!(seen, 1, "the first only: the second may be marked again");
    assert!(t.flow_log_unannotated());
    t.annotate_flow_log(false, |r| {
        seen += 1;
        nat(r)
    });
    assert_eq!(seen, 2);
    assert!(!t.flow_log_unannotated());
    t.annotate_flow_log(false, |_| panic!("annotated twice"));
    // The ended record of a marked flow carries its mark.
    t.remove_flow(h1);
    let got: Vec<(FlowEvent, u32, Option<u16>)> = drained(&mut t).iter().map(|r| (r.event, r.mark, r.nat.map(|n| n.src_port))).collect();
    assert_eq!(
        got,
        [(FlowEvent::Built, 7, Some(7)), (FlowEvent::Built, 9, Some(9)), (FlowEvent::Ended(EndReason::HandedOver), 7, None)],
        "the ended record was queued after the last pass"
    );
}

/// A full table (issue 15, item 2): a new flow evicts the embryonic flow
/// idle longest among the scanned slots — TCP short of its handshake,
/// other flows without a reply — and never an established one; with
/// nothing to evict it is refused. Counted, and logged as evicted.
#[test]
fn early_drop_evicts_the_oldest_embryonic_flow_only() {
    let t_syn = |sp: u16| tuple(v4(10, 0, 0, 1), sp, v4(192, 0, 2, 10), 80, ip_proto::TCP);
    let opening = L4Info::Tcp(syn(SYN, 1000, 0, 64240, None));
    let ms = |n: u64| Timestamp(n * MS);
    let mut t = ConnTable::new(4, Timeouts::default());
    t.log_flows(None);
    // `track`, a new flow logged as built.
    let track = |t: &mut ConnTable, now: Timestamp, tu: &FiveTuple, l4: &L4Info| {
        let r = t.track(now, tu, l4, 60, || true);
        if let Some(x) = r.as_ref().ok().filter(|x| x.created) {
            t.log_built(now, x.handle, IfIndex(0), IfIndex(1), RuleRef::Rule(0));
        }
        r
    };
    // Slot contents: an established TCP connection, a UDP flow with a
    // reply, a half-open SYN at 2 ms and a UDP flow without reply at 3 ms.
    track(&mut t, ms(0), &t_syn(1), &opening).unwrap();
    track(&mut t, ms(0), &t_syn(1).reversed(), &L4Info::Tcp(syn(SYN | ACK, 5000, 1001, 64240, None))).unwrap();
    track(&mut t, ms(1), &t_syn(1), &L4Info::Tcp(seg(ACK, 1001, 5001, 502))).unwrap();
    track(&mut t, ms(1), &udp_tuple(2), &L4Info::Udp).unwrap();
    track(&mut t, ms(1), &udp_tuple(2).reversed(), &L4Info::Udp).unwrap();
    track(&mut t, ms(2), &t_syn(3), &opening).unwrap();
    track(&mut t, ms(3), &udp_tuple(4), &L4Info::Udp).unwrap();
    assert_eq!(t.len(), 4);
    drained(&mut t);
    // Full: the half-open SYN (idle since 2 ms) goes first, then the
    // unanswered UDP flow.
    let created = track(&mut t, ms(10), &t_syn(5), &opening).unwrap();
    assert!(created.created);
    assert!(t.lookup(&t_syn(3)).is_none() && t.lookup(&udp_tuple(4)).is_some());
    track(&mut t, ms(11), &udp_tuple(6), &L4Info::Udp).unwrap();
    assert!(t.lookup(&udp_tuple(4)).is_none());
    // The flows of 5 and 6 are embryonic too: 5 (older) goes next.
    track(&mut t, ms(12), &udp_tuple(7), &L4Info::Udp).unwrap();
    assert!(t.lookup(&t_syn(5)).is_none() && t.lookup(&udp_tuple(6)).is_some());
    assert_eq!(t.stats().evicted_embryonic, 3);
    let ended: Vec<(FlowEvent, u16)> = drained(&mut t).iter().filter(|r| r.event != FlowEvent::Built).map(|r| (r.event, r.tuple.src_port)).collect();
    assert_eq!(ended, [3, 4, 5].map(|p| (FlowEvent::Ended(EndReason::Evicted), p)));
    // Established and answered flows stay: answer the embryonic ones, and
    // a new flow is refused.
    track(&mut t, ms(13), &udp_tuple(6).reversed(), &L4Info::Udp).unwrap();
    track(&mut t, ms(13), &udp_tuple(7).reversed(), &L4Info::Udp).unwrap();
    assert_eq!(track(&mut t, ms(14), &udp_tuple(8), &L4Info::Udp).unwrap_err(), D::FlowTableFull);
    assert!([t_syn(1), udp_tuple(2), udp_tuple(6), udp_tuple(7)].iter().all(|x| t.lookup(x).is_some()));
    assert_eq!(t.stats().evicted_embryonic, 3);
    check_invariants(&t);
}

proptest! {
    /// A table kept full by random traffic never evicts an established
    /// flow, and evicts only when a new flow would otherwise be refused.
    #[test]
    fn early_drop_never_evicts_an_established_flow(ops in proptest::collection::vec((0u16..40, any::<bool>(), 0u8..3), 1..300)) {
        let t_of = |sp: u16| tuple(v4(10, 0, 0, 1), 1000 + sp, v4(192, 0, 2, 10), 80, ip_proto::TCP);
        let mut t = ConnTable::new(8, Timeouts::default());
        let mut established: std::collections::HashSet<u16> = Default::default();
        for (k, &(sp, reply, step)) in ops.iter().enumerate() {
            let now = Timestamp(k as u64 * MS);
            let before = t.stats().evicted_embryonic;
            let full = t.len() == 8;
            let seg_ = match (reply, step) {
                (false, 0) => L4Info::Tcp(syn(SYN, 1000, 0, 64240, None)),
                (true, _) => L4Info::Tcp(syn(SYN | ACK, 5000, 1001, 64240, None)),
                (false, _) => L4Info::Tcp(seg(ACK, 1001, 5001, 502)),
            };
            let tu = if reply { t_of(sp).reversed() } else { t_of(sp) };
            let r = t.track(now, &tu, &seg_, 60, || true);
            if t.stats().evicted_embryonic > before {
                prop_assert!(full && r.as_ref().is_ok_and(|x| x.created), "evicted only for a new flow in a full table");
            }
            for &e in &established {
                prop_assert!(t.lookup(&t_of(e)).is_some(), "established flow {} evicted", e);
            }
            if let Ok(x) = r {
                let est = t.tcp_state(x.handle) == Some(TcpState::Established);
                if est { established.insert(sp); }
            }
        }
        check_invariants(&t);
    }
}

// ---- connection limits (limits.rs) ----

/// The limit counts agree with the table: per class, the live flows tagged
/// with it (embryonic: those still short of their handshake), per client
/// likewise.
fn check_limit_counts(t: &ConnTable) {
    use limits::{tag, Count};
    let Some(l) = t.limits() else { return };
    let mut want = vec![Count::default(); l.local().len()];
    let mut clients: std::collections::BTreeMap<(u16, String), Count> = Default::default();
    for s in t.slots.iter().filter(|s| s.live) {
        let emb = s.limit & tag::EMBRYONIC != 0;
        assert_eq!(emb, s.limits_embryonic(), "embryonic tag of {:?}", s.kind);
        let d = Count { conns: 1, embryonic: u32::from(emb) };
        let class = s.limit & tag::CLASS_MASK;
        let src = s.orig_tuple().src.to_string();
        if s.limit & tag::GLOBAL != 0 {
            want[0] = want[0].add(d);
        }
        if s.limit & tag::RULE != 0 {
            want[usize::from(class)] = want[usize::from(class)].add(d);
        }
        for (bit, c) in [(tag::GLOBAL_CLIENT, 0), (tag::RULE_CLIENT, class)] {
            if s.limit & bit != 0 {
                let e = clients.entry((c, src.clone())).or_default();
                *e = e.add(d);
            }
        }
    }
    assert_eq!(l.local(), &want[..]);
    let got: std::collections::BTreeMap<(u16, String), Count> = l.clients().map(|(c, a, n)| ((c, a.to_string()), n)).collect();
    assert_eq!(got, clients);
}

fn limited_table(spec: &LimitSpec, rules: &[&str]) -> ConnTable {
    let mut t = ConnTable::new(64, Timeouts::default());
    let names: Vec<String> = rules.iter().map(|s| s.to_string()).collect();
    t.set_limits(Some(Box::new(Limits::new(spec, &names, 64))));
    // A view of the rest of the cluster: nobody else admits.
    t.limits_mut().unwrap().set_remote(&limits::Remote { places: 1, ..Default::default() });
    t
}

/// Golden: a rule's per-client embryonic limit, the global embryonic
/// limit, a completed handshake freeing its embryonic place, the rest of
/// the cluster's counts taking the room, flows leaving giving it back.
#[test]
fn limits_refuse_at_local_plus_remote_and_follow_the_handshake() {
    let spec = LimitSpec {
        // Refused, not proxied: `syn_proxy_*` below has the proxy.
        global: LimitSet { max_embryonic: Some(2), max_conns: Some(3), syn_proxy: false, ..LimitSet::default() },
        rules: vec![("web".into(), LimitSet { per_client_embryonic_max: Some(1), ..LimitSet::default() })],
    };
    let mut t = limited_table(&spec, &["ssh", "web"]);
    let opening = L4Info::Tcp(syn(SYN, 1000, 0, 64240, None));
    let from = |c: u8, sp: u16| tuple(v4(10, 0, 0, c), sp, v4(192, 0, 2, 10), 80, ip_proto::TCP);
    let web = || Admission { permit: true, rule: Some(1) };
    let now = Timestamp::from_secs(1);
    assert!(t.track(now, &from(1, 1), &opening, 60, web).unwrap().created);
    assert_eq!(t.track(now, &from(1, 2), &opening, 60, web).unwrap_err(), D::ClientEmbryonicLimit);
    assert!(t.track(now, &from(2, 1), &opening, 60, web).is_ok());
    // Two embryonic connections: the global limit holds for any rule.
    assert_eq!(t.track(now, &from(3, 1), &opening, 60, || true).unwrap_err(), D::EmbryonicLimit);
    check_limit_counts(&t);
    // Client 1's handshake completes: one embryonic place is free again,
    // and client 1 may open another.
    t.track(now, &from(1, 1).reversed(), &L4Info::Tcp(syn(SYN | ACK, 5000, 1001, 64240, None)), 60, || true).unwrap();
    t.track(now, &from(1, 1), &L4Info::Tcp(seg(ACK, 1001, 5001, 502)), 60, || true).unwrap();
    check_limit_counts(&t);
    assert_eq!(t.limits().unwrap().local()[0], limits::Count { conns: 2, embryonic: 1 });
    assert!(t.track(now, &from(1, 2), &opening, 60, web).is_ok());
    // Three connections: max-conns holds a UDP flow too.
    assert_eq!(t.track(now, &udp_tuple(9), &L4Info::Udp, 60, || true).unwrap_err(), D::ConnLimit);
    let c = &t.limits().unwrap().classes();
    assert_eq!((c[0].refused, c[1].refused), ([1, 1, 0, 0], [0, 0, 0, 1]));
    assert_eq!((c[1].name.as_str(), c[1].local), ("web", limits::Count { conns: 3, embryonic: 2 }));
    // The half-open ones time out: their places come back.
    let later = Timestamp(now.0 + 31 * 1_000 * MS);
    t.expire(later, 64);
    check_limit_counts(&t);
    assert_eq!(t.limits().unwrap().local()[0], limits::Count { conns: 1, embryonic: 0 });
    // The rest of the cluster holds two embryonic connections: no room.
    let remote = limits::Remote { classes: vec![limits::Count { conns: 2, embryonic: 2 }], clients: vec![], places: 1 };
    t.limits_mut().unwrap().set_remote(&remote);
    assert_eq!(t.track(later, &from(4, 1), &opening, 60, || true).unwrap_err(), D::ConnLimit);
    // Another member's count for client 5 in "web" holds that client back.
    let remote = limits::Remote { classes: vec![], clients: vec![(1, v4(10, 0, 0, 5), limits::Count { conns: 1, embryonic: 1 })], places: 1 };
    t.limits_mut().unwrap().set_remote(&remote);
    assert_eq!(t.track(later, &from(5, 1), &opening, 60, web).unwrap_err(), D::ClientEmbryonicLimit);
    assert!(t.track(later, &from(6, 1), &opening, 60, web).is_ok());
    check_limit_counts(&t);
    t.clear();
    check_limit_counts(&t);
    assert_eq!(t.limits().unwrap().local()[0], limits::Count::default());
}

proptest! {
    /// Any sequence of new connections (two rules and the default,
    /// several clients), handshakes, resets, timeouts, take-overs and
    /// limit changes keeps the counts equal to the table's flows; no limit
    /// is exceeded by local flows while the remote counts are zero.
    #[test]
    fn limit_counts_follow_the_table(ops in proptest::collection::vec((0u8..7, 0u8..4, 0u16..6, 0u8..3), 1..250)) {
        let spec = |k: u32| LimitSpec {
            global: LimitSet { max_conns: Some(12 + k), max_embryonic: Some(6), per_client_max: Some(5), ..LimitSet::default() },
            rules: vec![("b".into(), LimitSet { per_client_embryonic_max: Some(2), max_conns: Some(4 + k), ..LimitSet::default() })],
        };
        let mut t = limited_table(&spec(0), &["a", "b"]);
        let mut now = Timestamp::from_secs(1);
        for &(op, client, sp, rule) in &ops {
            now = Timestamp(now.0 + MS);
            let tu = tuple(v4(10, 0, 0, client), 1000 + sp, v4(192, 0, 2, 10), 80, ip_proto::TCP);
            let adm = Admission { permit: true, rule: [None, Some(0), Some(1)][usize::from(rule)] };
            match op {
                0 => { let _ = t.track(now, &tu, &L4Info::Tcp(syn(SYN, 1000, 0, 64240, None)), 60, || adm); }
                1 => { let _ = t.track(now, &tu.reversed(), &L4Info::Tcp(syn(SYN | ACK, 5000, 1001, 64240, None)), 60, || true); }
                2 => { let _ = t.track(now, &tu, &L4Info::Tcp(seg(ACK, 1001, 5001, 502)), 60, || true); }
                3 => { let _ = t.track(now, &tu, &L4Info::Tcp(seg(RST, 1001, 0, 0)), 60, || true); }
                4 => { now = Timestamp(now.0 + u64::from(sp) * 10 * 1_000 * MS); t.expire(now, 64); }
                5 => {
                    if let Some(s) = t.lookup(&tu).and_then(|(h, _)| t.export(now, h)) {
                        let _ = t.install(now, &tu, s);
                    } else {
                        let _ = t.track(now, &udp_tuple(sp), &L4Info::Udp, 60, || adm);
                    }
                }
                _ => {
                    let names = vec!["b".to_string(), "a".to_string()];
                    t.set_limits(Some(Box::new(Limits::new(&spec(u32::from(sp)), &names, 64))));
                }
            }
            check_limit_counts(&t);
            check_invariants(&t);
        }
        let l = t.limits().unwrap();
        prop_assert!(l.local()[0].embryonic <= 6 && l.clients().all(|(c, _, n)| c != 0 || n.conns <= 5));
    }
}

/// The SYN proxy's conntrack side, golden: a SYN over `max-embryonic` is
/// `SynProxyCookie` (counted as a cookie, not refused); the client's ACK
/// of the cookie opens the connection although the embryonic limit is
/// reached; nothing passes while the server has not answered but a client
/// RST (the client's data is refused: the pipeline holds it); the server's SYN-ACK splices (`Answered`: the delta, the last ACK
/// of the server's handshake); later segments translate both ways and are
/// window-checked in the client's view; the state survives export/install.
#[test]
fn syn_proxy_opens_splices_and_translates() {
    let spec = LimitSpec { global: LimitSet { max_embryonic: Some(1), ..LimitSet::default() }, rules: vec![] };
    let mut t = limited_table(&spec, &[]);
    let now = Timestamp::from_secs(1);
    let from = |c: u8| tuple(v4(10, 0, 0, c), 40_000, v4(192, 0, 2, 10), 80, ip_proto::TCP);
    let opening = L4Info::Tcp(syn(SYN, 1000, 0, 64240, Some(7)));
    assert!(t.track(now, &from(1), &opening, 60, || true).unwrap().created);
    assert_eq!(t.track(now, &from(2), &opening, 60, || true).unwrap_err(), D::SynProxyCookie);
    let c = t.limits().unwrap().classes();
    assert_eq!((c[0].refused, c[0].syn_proxy), ([0; 4], [1, 0]));
    assert_eq!(t.len(), 1, "a cookie keeps no state");
    // Client 2 returns cookie C = 0x9000_0000 (isn 5000).
    const C: u32 = 0x9000_0000;
    let ack = seg(ACK, 5001, C.wrapping_add(1), 502);
    let o = t.open_proxied(now, &from(2), &ack, 1460, 54, || true).unwrap();
    assert!(o.created);
    assert_eq!(o.splice, Splice::Opened { isn: 5000, window: 502, mss: 1460 });
    assert_eq!(t.limits().unwrap().local()[0], limits::Count { conns: 2, embryonic: 2 }, "over max-embryonic: the client is real");
    assert_eq!(t.limits().unwrap().classes()[0].syn_proxy, [1, 1]);
    assert_eq!(t.open_proxied(now, &from(2), &ack, 1460, 54, || true).unwrap_err(), D::TcpNoFlow, "one flow per tuple");
    check_limit_counts(&t);
    // Connecting: the client's data and anything but SYN-ACK/RST from the
    // server are refused, nothing changes (the pipeline holds the client's
    // first segments for the splice, `pipeline::synproxy`; the server
    // retransmits).
    let data = TcpSeg { payload_len: 100, ..seg(ACK | PSH, 5001, C + 1, 502) };
    assert_eq!(t.track(now, &from(2), &L4Info::Tcp(data), 154, || true).unwrap_err(), D::SynProxyPending);
    const S: u32 = 0x1234_0000;
    let early = seg(ACK, S + 1, 5001, 1000);
    assert_eq!(t.track(now, &from(2).reversed(), &L4Info::Tcp(early), 54, || true).unwrap_err(), D::SynProxyPending);
    assert_eq!(t.tcp_state(o.handle), Some(SynSent));
    // The server answers the proxy's SYN (its ack in the client's space,
    // as the cluster's owner hands it over).
    let synack = L4Info::Tcp(syn(SYN | ACK, S, 5001, 29200, None));
    let a = t.track(now, &from(2).reversed(), &synack, 60, || true).unwrap();
    let delta = C.wrapping_sub(S);
    assert_eq!((a.dir, a.splice), (Reply, Splice::Answered { delta, seq: 5001, ack: S + 1, window: 502 }));
    assert_eq!(t.tcp_state(o.handle), Some(Established));
    assert_eq!(t.limits().unwrap().local()[0], limits::Count { conns: 2, embryonic: 1 });
    check_limit_counts(&t);
    // Spliced: the client's retransmitted data, the server's reply (in its
    // own space: seq S + 1 is the client's C + 1), each with the delta.
    let d = t.track(now, &from(2), &L4Info::Tcp(data), 154, || true).unwrap();
    assert_eq!((d.dir, d.splice), (Original, Splice::Xlate(delta)));
    let reply = TcpSeg { payload_len: 500, ..seg(ACK | PSH, S + 1, 5101, 1000) };
    let r = t.track(now, &from(2).reversed(), &L4Info::Tcp(reply), 554, || true).unwrap();
    assert_eq!((r.dir, r.splice), (Reply, Splice::Xlate(delta)));
    // Out of the server's window in the client's view: refused as ever.
    let wild = TcpSeg { payload_len: 10, ..seg(ACK, S.wrapping_add(0x4000_0000), 5101, 1000) };
    assert!(t.track(now, &from(2).reversed(), &L4Info::Tcp(wild), 64, || true).is_err());
    // Export and install elsewhere: the splice goes with the state.
    let st = t.export(now, o.handle).unwrap();
    assert_eq!(FlowState::from_bytes(&st.to_bytes()), Ok(st));
    let mut u = ConnTable::new(16, Timeouts::default());
    let h = u.install(now, &from(2), st).unwrap();
    let more = TcpSeg { payload_len: 500, ..seg(ACK | PSH, S + 501, 5101, 1000) };
    let r = u.track(now, &from(2).reversed(), &L4Info::Tcp(more), 554, || true).unwrap();
    assert_eq!((r.handle, r.splice), (h, Splice::Xlate(delta)));
    // A server that refuses: its RST reaches the client numbered from C + 1.
    let ack3 = seg(ACK, 7001, C.wrapping_add(1), 502);
    let o3 = t.open_proxied(now, &from(3), &ack3, 536, 54, || true).unwrap();
    let rst = L4Info::Tcp(seg(RST | ACK, 0, 7001, 0));
    let x = t.track(now, &from(3).reversed(), &rst, 54, || true).unwrap();
    assert_eq!(x.splice, Splice::Xlate(C.wrapping_add(1)));
    assert_eq!(t.tcp_state(o3.handle), Some(Closed));
    check_limit_counts(&t);
    // A client that gives up while connecting, after its request (held by
    // the pipeline, refused here): its RST is numbered past the request
    // and resets the connection; one beyond the proxy's window does not.
    let ack4 = seg(ACK, 9001, C.wrapping_add(1), 502);
    let o4 = t.open_proxied(now, &from(4), &ack4, 1460, 54, || true).unwrap();
    let req = TcpSeg { payload_len: 300, ..seg(ACK | PSH, 9001, C + 1, 502) };
    assert_eq!(t.track(now, &from(4), &L4Info::Tcp(req), 354, || true).unwrap_err(), D::SynProxyPending);
    let wild = L4Info::Tcp(seg(RST, 9001 + 70_000, 0, 0));
    assert!(t.track(now, &from(4), &wild, 54, || true).is_err(), "a RST beyond the window");
    assert_eq!(t.tcp_state(o4.handle), Some(SynSent));
    let rst = L4Info::Tcp(seg(RST, 9301, 0, 0));
    let x = t.track(now, &from(4), &rst, 54, || true).unwrap();
    assert_eq!((x.dir, x.splice), (Original, Splice::None));
    assert_eq!(t.tcp_state(o4.handle), Some(Closed));
    check_limit_counts(&t);
}

/// A proxied connection's flow state on the wire: the stage in the flags,
/// the sequence value after the peers; both stages at once, or a sequence
/// value without a proxied connection, are refused.
#[test]
fn flow_state_carries_the_proxy_stage() {
    let spec = LimitSpec { global: LimitSet { max_embryonic: Some(1), ..LimitSet::default() }, rules: vec![] };
    let mut t = limited_table(&spec, &[]);
    let now = Timestamp::from_secs(1);
    let tu = tuple(v4(10, 0, 0, 2), 40_000, v4(192, 0, 2, 10), 80, ip_proto::TCP);
    let o = t.open_proxied(now, &tu, &seg(ACK, 5001, 0xabcd_0001, 502), 1460, 54, || true).unwrap();
    let b = t.export(now, o.handle).unwrap().to_bytes();
    assert_eq!((b[2], &b[40..44]), (0x02, &[0xab, 0xcd, 0, 0][..]));
    let mut both = b;
    both[2] = 0x06;
    assert!(FlowState::from_bytes(&both).is_err());
    let mut stray = b;
    stray[2] = 0;
    assert!(FlowState::from_bytes(&stray).is_err(), "a sequence value without a proxied connection");
    let plain = t.track(now, &tuple(v4(10, 0, 0, 3), 1, v4(192, 0, 2, 10), 80, ip_proto::TCP), &L4Info::Tcp(syn(SYN, 1, 0, 100, None)), 60, || true);
    assert_eq!(plain.unwrap_err(), D::SynProxyCookie);
}
