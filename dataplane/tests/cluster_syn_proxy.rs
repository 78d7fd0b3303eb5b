//! The SYN proxy on cluster members (issue 15 item 4; docs/flood.md "SYN
//! proxy") on the in-process cluster bed: the owner answers a SYN over the
//! embryonic limit with its cookie, opens the connection to the server on
//! the client's ACK with the cluster's owner-encoded ISN' (so the server's
//! SYN-ACK, landing on another member, goes to the owner by its cookie),
//! splices the two halves with both sequence deltas; and when the owner
//! dies, the node that takes the connection over keeps the splice (the
//! proxy stage and the server-side delta ride in the flow state).
//! Node A = 0, B = 1, C = 2.

mod cluster_bed;

use cluster_bed::*;
use dataplane::conntrack::limits::Remote;
use dataplane::conntrack::tcp_flags::{ACK, PSH, SYN};
use dataplane::conntrack::{LimitSet, LimitSpec};
use dataplane::pipeline::Role;
use dataplane::{DropReason, NodeId};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;
const C_ISN: u32 = 1000;
const S_ISN: u32 = 5000;


/// A 3-node bed whose members allow one embryonic connection each (the
/// rest of the cluster counting nothing: every node alone).
fn bed() -> Bed {
    let mut bed = Bed::new(3, true);
    for p in bed.nodes.iter_mut() {
        p.set_limits(&LimitSpec { global: LimitSet { max_embryonic: Some(1), ..LimitSet::default() }, rules: vec![] });
        p.set_remote_limits(&Remote { places: 1, ..Remote::default() });
    }
    bed
}

/// A's embryonic place taken by a half-open connection, then a SYN at A
/// from the client's port `cport` to the server's `dport` (a connection C
/// directs), which A answers itself: the cookie of its SYN-ACK.
fn cookie_at_a(bed: &mut Bed, cport: u16, dport: u16) -> u32 {
    let out = bed.send(A, IN, from_host(A, SERVER).tcp(999, 80, 1, 0, SYN, 64240, &SYN_OPTS, b""));
    assert_eq!(one(&out).1, OUT, "the first SYN passes (or is the one already passed)");
    let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, dport, C_ISN, 0, SYN, 64240, &SYN_OPTS, b""));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, IN), "the SYN-ACK goes back to the client");
    let (cookie, ack, flags, _) = tcp_fields(&f);
    assert_eq!((ack, flags), (C_ISN + 1, SYN | ACK));
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &tuple(HOST, cport, SERVER, dport, 6)), None, "nothing registered for a cookie");
    cookie
}

#[test]
fn the_owner_proxies_and_a_takeover_keeps_the_splice() {
    let mut bed = bed();
    let cport = port_with_director(SERVER, 80, 6, 3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let cookie = cookie_at_a(&mut bed, cport, 80);
    // The client's ACK: the SYN to the server leaves A with A's owner ISN'.
    let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN + 1, cookie.wrapping_add(1), ACK, 502, &[], b""));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, OUT));
    let (isn, _, flags, _) = tcp_fields(&f);
    assert_eq!(flags, SYN);
    assert_eq!(cookies().decode(isn), Some(NodeId(A as u8)), "the server-side ISN names the owner");
    let delta = isn.wrapping_sub(C_ISN);
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(A as u8))), "registered on opening");
    // The server's SYN-ACK lands on B: sent to A by its cookie; A answers
    // the server with the handshake's last ACK (nothing reaches the client).
    let synack = from_outside(B, SERVER).tcp(80, cport, S_ISN, isn.wrapping_add(1), SYN | ACK, 29200, &SYN_OPTS, b"");
    let out = bed.send(B, OUT, synack);
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, OUT));
    assert_eq!(f, to_gw(A, SERVER).ttl(63).tcp(cport, 80, isn.wrapping_add(1), S_ISN + 1, ACK, 502, &[], b""), "the last ACK of the server's handshake");
    let server = cookie.wrapping_sub(S_ISN); // the server-side delta
    // Spliced: a request and its answer, both spaces translated.
    let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN + 1, cookie.wrapping_add(1), ACK | PSH, 502, &[], &[b'q'; 100]));
    assert_eq!(one(&out).2, to_gw(A, SERVER).tcp(cport, 80, (C_ISN + 1).wrapping_add(delta), S_ISN + 1, ACK | PSH, 502, &[], &[b'q'; 100]));
    let out = bed.send(B, OUT, from_outside(B, SERVER).tcp(80, cport, S_ISN + 1, (C_ISN + 101).wrapping_add(delta), ACK | PSH, 509, &[], &[b'r'; 1000]));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (A, IN));
    assert_eq!(f, to_host(A, SERVER).tcp(80, cport, (S_ISN + 1).wrapping_add(server), C_ISN + 101, ACK | PSH, 509, &[], &[b'r'; 1000]));

    // A dies. The client's next segment lands on B: B takes the connection
    // over through C (which holds A's state) and keeps both translations.
    bed.kill(A, 2);
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, C_ISN + 101, cookie.wrapping_add(1001), ACK | PSH, 502, &[], b"more"));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (B, OUT));
    assert_eq!(f, to_gw(B, SERVER).tcp(cport, 80, (C_ISN + 101).wrapping_add(delta), S_ISN + 1001, ACK | PSH, 502, &[], b"more"));
    assert_eq!(bed.owners_up(&t), vec![B]);
    // The server's answer, on C: to B, numbered from the cookie.
    let out = bed.send(C, OUT, from_outside(C, SERVER).tcp(80, cport, S_ISN + 1001, (C_ISN + 105).wrapping_add(delta), ACK, 509, &[], b""));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (B, IN));
    assert_eq!(f, to_host(B, SERVER).tcp(80, cport, (S_ISN + 1001).wrapping_add(server), C_ISN + 105, ACK, 509, &[], b""));
    let a = bed.nodes[A].counters().syn_proxy;
    assert_eq!((a.cookies_sent, a.opened, a.spliced), (1, 1, 1));
    for n in [B, C] {
        assert_eq!(bed.drops(n, DropReason::SynProxyPending), 0);
    }
}

/// The client's request sent before the server answered — one segment
/// reaching the owner, one another member (sent to the owner) — is held
/// by the owner and follows the handshake's last ACK to the server once
/// the server's SYN-ACK (landing on a third member) splices the
/// connection, in arrival order, with both deltas applied.
#[test]
fn the_owner_holds_the_early_request_until_the_splice() {
    let mut bed = bed();
    let cport = port_with_director(SERVER, 80, 6, 3, C);
    let cookie = cookie_at_a(&mut bed, cport, 80);
    let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN + 1, cookie.wrapping_add(1), ACK, 502, &[], b""));
    let (isn, _, flags, _) = tcp_fields(&one(&out).2);
    assert_eq!(flags, SYN);
    let delta = isn.wrapping_sub(C_ISN);
    // The request, in two segments: nothing reaches the server yet.
    let out = bed.send(A, IN, from_host(A, SERVER).tcp(cport, 80, C_ISN + 1, cookie.wrapping_add(1), ACK, 502, &[], b"GET"));
    assert!(out.is_empty(), "held at the owner: {out:?}");
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, C_ISN + 4, cookie.wrapping_add(1), ACK | PSH, 502, &[], b" /"));
    assert!(out.is_empty(), "sent to the owner and held there: {out:?}");
    assert_eq!(bed.nodes[A].counters().syn_proxy.held, 2);
    // The server's SYN-ACK lands on C: the last ACK, then the request.
    let synack = from_outside(C, SERVER).tcp(80, cport, S_ISN, isn.wrapping_add(1), SYN | ACK, 29200, &SYN_OPTS, b"");
    let out = bed.send(C, OUT, synack);
    assert_eq!(out.len(), 3, "{out:?}");
    assert!(out.iter().all(|(n, p, _)| (*n, *p) == (A, OUT)));
    assert_eq!(out[0].2, to_gw(A, SERVER).ttl(63).tcp(cport, 80, isn.wrapping_add(1), S_ISN + 1, ACK, 502, &[], b""), "the last ACK first");
    assert_eq!(out[1].2, to_gw(A, SERVER).tcp(cport, 80, (C_ISN + 1).wrapping_add(delta), S_ISN + 1, ACK, 502, &[], b"GET"));
    assert_eq!(out[2].2, to_gw(A, SERVER).tcp(cport, 80, (C_ISN + 4).wrapping_add(delta), S_ISN + 1, ACK | PSH, 502, &[], b" /"));
    let a = bed.nodes[A].counters().syn_proxy;
    assert_eq!((a.opened, a.spliced, a.held, a.released, a.held_dropped), (1, 1, 2, 2, 0));
    for n in [A, B, C] {
        assert_eq!(bed.drops(n, DropReason::SynProxyPending), 0);
    }
}

/// ECMP moves a proxied handshake between the cookie and the client's ACK
/// (a member change): the member the ACK reaches validates the cookie
/// another member sent (the cluster's cookie key and clock), the director
/// elects it, and it opens and splices the connection — its ISN' names it,
/// so the server's SYN-ACK, landing on the member that sent the cookie,
/// finds it. A forged ACK there opens nothing.
#[test]
fn a_cookie_sent_by_one_member_opens_the_connection_at_another() {
    let mut bed = bed();
    let cport = port_with_director(SERVER, 80, 6, 3, C);
    let t = tuple(HOST, cport, SERVER, 80, 6);
    let cookie = cookie_at_a(&mut bed, cport, 80);
    // The client's ACK reaches B, which sent no cookie.
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, C_ISN + 1, cookie.wrapping_add(1), ACK, 502, &[], b""));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (B, OUT), "B opens the connection to the server");
    let (isn, _, flags, _) = tcp_fields(&f);
    assert_eq!(flags, SYN);
    assert_eq!(cookies().decode(isn), Some(NodeId(B as u8)), "the server-side ISN names B");
    assert_eq!(bed.nodes[C].cluster_role(bed.now(), &t), Some((Role::Director, NodeId(B as u8))), "elected by the director");
    assert_eq!(bed.owners(&t), vec![B]);
    // The server's SYN-ACK lands on A: to B by its cookie, which answers
    // the server with the handshake's last ACK.
    let out = bed.send(A, OUT, from_outside(A, SERVER).tcp(80, cport, S_ISN, isn.wrapping_add(1), SYN | ACK, 29200, &SYN_OPTS, b""));
    let (n, port, f) = one(&out);
    assert_eq!((n, port), (B, OUT));
    assert_eq!(f, to_gw(B, SERVER).ttl(63).tcp(cport, 80, isn.wrapping_add(1), S_ISN + 1, ACK, 502, &[], b""));
    // Spliced at B: a request and its answer, both spaces translated.
    let (delta, server) = (isn.wrapping_sub(C_ISN), cookie.wrapping_sub(S_ISN));
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(cport, 80, C_ISN + 1, cookie.wrapping_add(1), ACK | PSH, 502, &[], b"GET"));
    assert_eq!(one(&out), (B, OUT, to_gw(B, SERVER).tcp(cport, 80, (C_ISN + 1).wrapping_add(delta), S_ISN + 1, ACK | PSH, 502, &[], b"GET")));
    let out = bed.send(C, OUT, from_outside(C, SERVER).tcp(80, cport, S_ISN + 1, (C_ISN + 4).wrapping_add(delta), ACK | PSH, 509, &[], b"OK"));
    assert_eq!(one(&out), (B, IN, to_host(B, SERVER).tcp(80, cport, (S_ISN + 1).wrapping_add(server), C_ISN + 4, ACK | PSH, 509, &[], b"OK")));
    let (a, b) = (bed.nodes[A].counters().syn_proxy, bed.nodes[B].counters().syn_proxy);
    assert_eq!((a.cookies_sent, a.opened, b.cookies_sent, b.opened, b.spliced), (1, 0, 0, 1, 1));

    // A forged ACK at B (the cookie of another connection's SYN, off by
    // one): nothing opens, nothing reaches the server.
    let fport = port_with_director(SERVER, 443, 6, 3, C);
    let forged = cookie_at_a(&mut bed, fport, 443);
    let out = bed.send(B, IN, from_host(B, SERVER).tcp(fport, 443, C_ISN + 1, forged.wrapping_add(2), ACK, 502, &[], b""));
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(bed.owners(&tuple(HOST, fport, SERVER, 443, 6)), Vec::<usize>::new());
    assert_eq!(bed.nodes[B].counters().syn_proxy.opened, 1);
}
