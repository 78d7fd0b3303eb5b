//! Reassembly tests: DPDK's reassembly test list (app/test/test_reassembly.c)
//! as table rows — each row a fresh reassembler, a list of fragments with
//! the expected result of each, and the expected counters at the end —
//! then shallow mode, classification through the wire views, and
//! properties (no panic, fixed memory, conservation, any permutation
//! reassembles to the original bytes).

use super::*;
use crate::types::{ip_proto, DropReason as R, Duration, Timestamp};
use crate::wire::ipv4::{Ipv4Packet, FLAG_MF};
use crate::wire::ipv6::Ipv6Packet;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The test configuration: small table and fragment limit, smallest arena.
fn cfg() -> ReasmConfig {
    ReasmConfig {
        max_contexts: 4,
        max_frags_per_datagram: 8,
        arena_bytes: MAX_DATAGRAM + 8 * BLOCK_SIZE,
        timeout: Duration::from_secs(2),
        mode: ReasmMode::Full,
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Fam {
    V4,
    V6,
}

fn key(fam: Fam, id: u32, proto: u8) -> FragKey {
    match fam {
        Fam::V4 => FragKey { src: Ipv4Addr::new(10, 0, 0, 1).into(), dst: Ipv4Addr::new(10, 0, 1, 2).into(), ident: id, proto },
        Fam::V6 => FragKey {
            src: "2001:db8::1".parse::<Ipv6Addr>().unwrap().into(),
            dst: "2001:db8:1::2".parse::<Ipv6Addr>().unwrap().into(),
            ident: 0xdead_0000 | id,
            proto,
        },
    }
}

/// Byte `pos` of datagram `id`: a valid L4 header, then a pattern that is
/// not periodic at 8 or 256 (a misplaced fragment shows).
fn byte(id: u32, proto: u8, doff: u8, pos: usize) -> u8 {
    let sport = (1000 + id as u16).to_be_bytes();
    match (proto, pos) {
        (ip_proto::TCP, 12) => doff << 4,
        (ip_proto::ICMP, 0) => 8, // echo request
        (ip_proto::ICMPV6, 0) => 128,
        (_, 0) => sport[0],
        (_, 1) => sport[1],
        (_, 2) => 0,
        (_, 3) => 53,
        _ => (pos as u32).wrapping_mul(2_654_435_761).wrapping_add(id).rotate_right(13) as u8,
    }
}

fn bytes(id: u32, proto: u8, doff: u8, range: core::ops::Range<usize>) -> Vec<u8> {
    range.map(|p| byte(id, proto, doff, p)).collect()
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum E {
    Pending,
    First,
    Fwd,
    /// Complete with this many bytes (content checked).
    Done(usize),
    Unfrag,
    Drop(R),
}

/// One fragment: datagram id, offset, length, more, arrival (ms), expected.
type F = (u32, u16, usize, bool, u64, E);

struct Case {
    name: &'static str,
    fam: Fam,
    proto: u8,
    /// TCP data offset in words written at byte 12 of the TCP header.
    doff: u8,
    frags: &'static [F],
    /// Every drop counter that must be non-zero at the end; all others 0.
    drops: &'static [(R, u64)],
    /// Contexts left, datagrams completed.
    live: usize,
    completed: u64,
}

const U: u8 = ip_proto::UDP;
const T: u8 = ip_proto::TCP;
const M: bool = true; // more fragments
const L: bool = false; // last

fn row(name: &'static str, frags: &'static [F], drops: &'static [(R, u64)], live: usize, completed: u64) -> Case {
    Case { name, fam: Fam::V4, proto: U, doff: 5, frags, drops, live, completed }
}

fn cases() -> Vec<Case> {
    use E::*;
    vec![
        row("in order", &[(1, 0, 64, M, 0, First), (1, 64, 64, M, 0, Pending), (1, 128, 40, L, 0, Done(168))], &[], 0, 1),
        row("reversed", &[(1, 128, 40, L, 0, Pending), (1, 64, 64, M, 0, Pending), (1, 0, 64, M, 0, Done(168))], &[], 0, 1),
        row(
            "odd then even",
            &[
                (1, 64, 64, M, 0, Pending),
                (1, 192, 64, M, 0, Pending),
                (1, 0, 64, M, 0, First),
                (1, 128, 64, M, 0, Pending),
                (1, 256, 1, L, 0, Done(257)),
            ],
            &[],
            0,
            1,
        ),
        row(
            "interleaved, two datagrams",
            &[
                (1, 64, 64, M, 0, Pending),
                (2, 0, 64, M, 0, First),
                (1, 0, 64, M, 0, First),
                (2, 128, 16, L, 0, Pending),
                (1, 128, 8, L, 0, Done(136)),
                (2, 64, 64, M, 0, Done(144)),
            ],
            &[],
            0,
            2,
        ),
        row(
            "duplicate of a middle fragment (DPDK: tolerated, reordered)",
            &[
                (1, 64, 64, M, 0, Pending),
                (1, 192, 64, L, 0, Pending),
                (1, 64, 64, M, 0, Drop(R::FragDuplicate)),
                (1, 0, 64, M, 0, First),
                (1, 128, 64, M, 0, Done(256)),
            ],
            &[(R::FragDuplicate, 1)],
            0,
            1,
        ),
        row(
            "duplicate first and last",
            &[
                (1, 0, 64, M, 0, First),
                (1, 0, 64, M, 0, Drop(R::FragDuplicate)),
                (1, 64, 8, L, 0, Done(72)),
                // The datagram is gone: a late copy opens a new one.
                (1, 64, 8, L, 0, Pending),
                (1, 64, 8, L, 0, Drop(R::FragDuplicate)),
            ],
            &[(R::FragDuplicate, 2)],
            1,
            1,
        ),
        row(
            "overlap, trailing (overlapping fragment second)",
            &[(1, 0, 600, M, 0, First), (1, 296, 600, M, 0, Drop(R::FragOverlap))],
            &[(R::FragOverlap, 2)],
            0,
            0,
        ),
        row(
            "overlap, leading (overlapping fragment first)",
            &[(1, 296, 600, M, 0, Pending), (1, 0, 600, M, 0, Drop(R::FragOverlap))],
            &[(R::FragOverlap, 2)],
            0,
            0,
        ),
        row(
            "overlap, contained",
            &[(1, 0, 600, M, 0, First), (1, 200, 200, M, 0, Drop(R::FragOverlap))],
            &[(R::FragOverlap, 2)],
            0,
            0,
        ),
        row(
            "overlap, containing",
            &[(1, 200, 200, M, 0, Pending), (1, 0, 600, M, 0, Drop(R::FragOverlap))],
            &[(R::FragOverlap, 2)],
            0,
            0,
        ),
        row(
            "overlap, same offset longer (teardrop-like), whole datagram goes",
            &[
                (1, 0, 64, M, 0, First),
                (1, 64, 64, M, 0, Pending),
                (1, 64, 128, M, 0, Drop(R::FragOverlap)),
                // What follows starts a new datagram and never completes.
                (1, 128, 8, L, 0, Pending),
            ],
            &[(R::FragOverlap, 3)],
            1,
            0,
        ),
        row(
            "overlap with the last fragment",
            &[(1, 0, 64, M, 0, First), (1, 56, 16, L, 0, Drop(R::FragOverlap))],
            &[(R::FragOverlap, 2)],
            0,
            0,
        ),
        row(
            "exactly the maximum number of fragments (8)",
            &[
                (1, 0, 8, M, 0, First),
                (1, 8, 8, M, 0, Pending),
                (1, 16, 8, M, 0, Pending),
                (1, 24, 8, M, 0, Pending),
                (1, 32, 8, M, 0, Pending),
                (1, 40, 8, M, 0, Pending),
                (1, 48, 8, M, 0, Pending),
                (1, 56, 3, L, 0, Done(59)),
            ],
            &[],
            0,
            1,
        ),
        row(
            "one fragment more than the maximum",
            &[
                (1, 0, 8, M, 0, First),
                (1, 8, 8, M, 0, Pending),
                (1, 16, 8, M, 0, Pending),
                (1, 24, 8, M, 0, Pending),
                (1, 32, 8, M, 0, Pending),
                (1, 40, 8, M, 0, Pending),
                (1, 48, 8, M, 0, Pending),
                (1, 56, 8, M, 0, Pending),
                (1, 64, 8, L, 0, Drop(R::FragTooMany)),
            ],
            &[(R::FragTooMany, 9)],
            0,
            0,
        ),
        row("timeout: just before", &[(1, 0, 64, M, 0, First), (1, 64, 8, L, 1999, Done(72))], &[], 0, 1),
        row(
            "timeout: at the deadline (expired; the fragment opens a new datagram)",
            &[(1, 0, 64, M, 0, First), (1, 64, 8, L, 2000, Pending)],
            &[(R::FragTimeout, 1)],
            1,
            0,
        ),
        row(
            "timeout: after",
            &[(1, 64, 8, M, 0, Pending), (1, 72, 8, L, 100, Pending), (1, 0, 64, M, 60_000, First)],
            &[(R::FragTimeout, 2)],
            1,
            0,
        ),
        row(
            "zero length",
            &[(1, 0, 0, M, 0, Drop(R::FragBadLength)), (1, 64, 0, L, 0, Drop(R::FragBadLength))],
            &[(R::FragBadLength, 2)],
            0,
            0,
        ),
        row(
            "non-last length not a multiple of 8; last may be any length",
            &[(1, 0, 60, M, 0, Drop(R::FragBadLength)), (1, 64, 61, L, 0, Pending)],
            &[(R::FragBadLength, 1)],
            1,
            0,
        ),
        row(
            "oversize: offset + length > 65535",
            &[
                (1, 65528, 64, L, 0, Drop(R::FragTooBig)),
                (1, 65528, 8, L, 0, Drop(R::FragTooBig)),
                (1, 65528, 7, L, 0, Pending),
            ],
            &[(R::FragTooBig, 2)],
            1,
            0,
        ),
        row(
            "largest datagram, 65535 bytes",
            &[
                (1, 0, 9000, M, 0, First),
                (1, 9000, 9000, M, 0, Pending),
                (1, 18000, 9000, M, 0, Pending),
                (1, 27000, 9000, M, 0, Pending),
                (1, 36000, 9000, M, 0, Pending),
                (1, 45000, 9000, M, 0, Pending),
                (1, 54000, 9000, M, 0, Pending),
                (1, 63000, 2535, L, 0, Done(65535)),
            ],
            &[],
            0,
            1,
        ),
        row(
            "last-fragment conflicts",
            &[
                // Two last fragments with different ends.
                (1, 0, 64, M, 0, First),
                (1, 128, 8, L, 0, Pending),
                (1, 64, 8, L, 0, Drop(R::FragLastConflict)),
                // A last fragment ending before data already held.
                (2, 128, 64, M, 0, Pending),
                (2, 64, 8, L, 0, Drop(R::FragLastConflict)),
                // A fragment beyond the end a last fragment set.
                (3, 64, 8, L, 0, Pending),
                (3, 128, 64, M, 0, Drop(R::FragLastConflict)),
            ],
            &[(R::FragLastConflict, 7)],
            0,
            0,
        ),
        row(
            "table full: the new datagram is refused, live ones kept",
            &[
                (1, 0, 64, M, 0, First),
                (2, 0, 64, M, 0, First),
                (3, 0, 64, M, 0, First),
                (4, 0, 64, M, 0, First),
                (5, 0, 64, M, 0, Drop(R::FragTableFull)),
                (1, 64, 8, L, 0, Done(72)),
                (5, 0, 64, M, 100, First),
                (6, 64, 8, L, 100, Drop(R::FragTableFull)),
                // At 2 s the oldest (2) has expired: reclaimed for 7.
                (7, 64, 8, L, 2000, Pending),
                (8, 64, 8, L, 2000, Pending),
                (9, 64, 8, L, 2000, Pending),
                (10, 64, 8, L, 2000, Drop(R::FragTableFull)),
            ],
            &[(R::FragTableFull, 3), (R::FragTimeout, 3)],
            4,
            1,
        ),
        row("atomic fragment (RFC 6946)", &[(1, 0, 64, L, 0, Unfrag)], &[], 0, 0),
        Case {
            name: "tiny first fragment, TCP",
            proto: T,
            frags: &[
                (1, 0, 16, M, 0, Drop(R::FragTinyFirst)),
                // RFC 1858 §3: TCP at offset 8 could rewrite the flags.
                (1, 8, 16, M, 0, Drop(R::FragTinyFirst)),
                (2, 0, 24, M, 0, First),
                (2, 24, 8, L, 0, Done(32)),
            ],
            drops: &[(R::FragTinyFirst, 2)],
            live: 0,
            completed: 1,
            ..row("", &[], &[], 0, 0)
        },
        Case {
            name: "tiny first fragment, TCP options cut",
            proto: T,
            doff: 15,
            frags: &[(1, 0, 56, M, 0, Drop(R::FragTinyFirst)), (2, 0, 64, M, 0, First)],
            drops: &[(R::FragTinyFirst, 1)],
            live: 1,
            completed: 0,
            ..row("", &[], &[], 0, 0)
        },
        Case {
            name: "TCP data offset below 5",
            proto: T,
            doff: 4,
            frags: &[(1, 0, 64, M, 0, Drop(R::TcpBadHeaderLen))],
            drops: &[(R::TcpBadHeaderLen, 1)],
            live: 0,
            completed: 0,
            ..row("", &[], &[], 0, 0)
        },
        Case {
            name: "ICMP: first fragment shorter than 8 bytes cannot happen (non-last is 8k); last-as-first 4 bytes",
            proto: ip_proto::ICMP,
            frags: &[(1, 0, 4, L, 0, Unfrag), (2, 64, 8, L, 0, Pending), (2, 0, 64, M, 0, Done(72))],
            drops: &[],
            live: 0,
            completed: 1,
            ..row("", &[], &[], 0, 0)
        },
        Case {
            name: "IPv6: reversed, interleaved, 32-bit identification",
            fam: Fam::V6,
            frags: &[
                (1, 1448, 100, L, 0, Pending),
                (2, 0, 1448, M, 0, First),
                (1, 0, 1448, M, 0, Done(1548)),
                (2, 1448, 8, L, 0, Done(1456)),
            ],
            drops: &[],
            live: 0,
            completed: 2,
            ..row("", &[], &[], 0, 0)
        },
        Case {
            name: "IPv6: overlap and oversize",
            fam: Fam::V6,
            frags: &[
                (1, 0, 1448, M, 0, First),
                (1, 1440, 16, L, 0, Drop(R::FragOverlap)),
                (2, 65528, 16, L, 0, Drop(R::FragTooBig)),
            ],
            drops: &[(R::FragOverlap, 2), (R::FragTooBig, 1)],
            live: 0,
            completed: 0,
            ..row("", &[], &[], 0, 0)
        },
    ]
}

fn run_case(c: &Case) {
    let mut r = Reassembler::new(cfg()).unwrap();
    for (n, &(id, off, len, more, ms, want)) in c.frags.iter().enumerate() {
        let info = FragInfo { key: key(c.fam, id, c.proto), offset: off, more };
        let data = bytes(id, c.proto, c.doff, usize::from(off)..usize::from(off) + len);
        let got = match r.insert(Timestamp::from_millis(ms), &info, &data) {
            FragResult::Pending => E::Pending,
            FragResult::FirstSeen { l4 } => {
                assert_eq!(l4.proto, c.proto);
                if c.proto != ip_proto::ICMP {
                    assert_eq!((l4.src_port, l4.dst_port), (1000 + id as u16, 53), "{}", c.name);
                }
                E::First
            }
            FragResult::Forward { .. } => E::Fwd,
            FragResult::Complete { l4, data } => {
                assert_eq!(data, bytes(id, c.proto, c.doff, 0..data.len()), "{}: bytes of datagram {id}", c.name);
                assert!(data.starts_with(l4.bytes()) && !l4.bytes().is_empty());
                E::Done(data.len())
            }
            FragResult::Unfragmented => E::Unfrag,
            FragResult::Drop(d) => E::Drop(d),
        };
        assert_eq!(got, want, "{}: fragment #{n} {:?}", c.name, (id, off, len, more, ms));
        assert!(r.counters().accounted(r.held_fragments()), "{}: conservation after #{n}", c.name);
    }
    let k = r.counters();
    for &reason in R::ALL {
        let want = c.drops.iter().find(|d| d.0 == reason).map_or(0, |d| d.1);
        assert_eq!(k.dropped(reason), want, "{}: drops of {reason}", c.name);
    }
    assert_eq!((r.len(), k.completed), (c.live, c.completed), "{}: (live, completed)", c.name);
    assert_eq!(k.fragments, c.frags.len() as u64);
}

#[test]
fn table() {
    let cs = cases();
    for c in &cs {
        run_case(c);
    }
    println!("reassembly table: {} cases", cs.len());
}

fn ins<'a>(r: &'a mut Reassembler, t: u64, k: FragKey, off: u16, len: usize, more: bool) -> FragResult<'a> {
    let data = bytes(k.ident, k.proto, 5, usize::from(off)..usize::from(off) + len);
    r.insert(Timestamp::from_millis(t), &FragInfo { key: k, offset: off, more }, &data)
}

#[test]
fn expire_is_bounded_and_frees_everything() {
    let mut r = Reassembler::new(cfg()).unwrap();
    for id in 1..=4 {
        assert!(matches!(ins(&mut r, u64::from(id), key(Fam::V4, id, U), 64, 64, M), FragResult::Pending));
        assert!(matches!(ins(&mut r, u64::from(id), key(Fam::V4, id, U), 128, 64, M), FragResult::Pending));
    }
    assert_eq!((r.len(), r.held_fragments()), (4, 8));
    assert_eq!(r.expire(Timestamp::from_millis(2000), 10), 0, "before the deadline");
    assert_eq!(r.expire(Timestamp::from_millis(2002), 10), 2, "ids 1 and 2, at and after their deadline");
    assert_eq!(r.expire(Timestamp::from_secs(100), 1), 1, "budget");
    assert_eq!(r.expire(Timestamp::from_secs(100), 0), 0);
    assert_eq!(r.expire(Timestamp::from_secs(100), 10), 1);
    assert_eq!((r.len(), r.held_fragments(), r.held_bytes()), (0, 0, 0));
    let k = r.counters();
    assert_eq!((k.dropped(R::FragTimeout), k.datagrams_dropped), (8, 4));
    assert!(k.accounted(0));
}

#[test]
fn shallow_holds_until_first_then_forwards() {
    let mut r = Reassembler::new(cfg().shallow()).unwrap();
    let k = key(Fam::V4, 7, U);
    assert_eq!(r.take_held(&k), None, "no datagram");
    assert!(matches!(ins(&mut r, 0, k, 64, 64, M), FragResult::Pending));
    assert_eq!(r.take_held(&k), None, "first fragment not seen yet");
    assert!(matches!(ins(&mut r, 0, k, 192, 16, L), FragResult::Pending));
    match ins(&mut r, 0, k, 0, 64, M) {
        FragResult::FirstSeen { l4 } => assert_eq!(l4.five_tuple(&k).src_port, 1007),
        other => panic!("{other:?}"),
    }
    // Drained lowest offset first, bytes intact.
    let mut got = vec![];
    while let Some(h) = r.take_held(&k) {
        assert_eq!(h.data, bytes(7, U, 5, usize::from(h.offset)..usize::from(h.offset) + h.data.len()));
        got.push((h.offset, h.more, h.data.len()));
    }
    assert_eq!(got, vec![(0, true, 64), (64, true, 64), (192, false, 16)]);
    assert_eq!((r.len(), r.held_fragments()), (1, 0), "the gap 128..192 is still to come");
    // Later fragments are checked, not held.
    assert!(matches!(ins(&mut r, 0, k, 120, 16, M), FragResult::Drop(R::FragOverlap)));
    assert!(matches!(ins(&mut r, 0, k, 128, 64, M), FragResult::Pending), "a new datagram after the discard");
    let c = r.counters();
    assert_eq!((c.taken, c.forwarded, c.dropped(R::FragOverlap)), (3, 0, 1));

    // Complete while forwarding: the context is released by the last piece.
    let mut r = Reassembler::new(cfg().shallow()).unwrap();
    assert!(matches!(ins(&mut r, 0, k, 0, 64, M), FragResult::FirstSeen { .. }));
    assert!(matches!(ins(&mut r, 0, k, 64, 64, M), FragResult::Forward { .. }));
    assert_eq!(r.take_held(&k).map(|h| h.offset), Some(0));
    assert!(matches!(ins(&mut r, 0, k, 64, 64, M), FragResult::Drop(R::FragDuplicate)));
    assert!(matches!(ins(&mut r, 0, k, 128, 1, L), FragResult::Forward { .. }));
    assert!(r.is_empty());
    let c = r.counters();
    assert_eq!((c.taken, c.forwarded, c.forwarded_datagrams, c.completed), (1, 2, 1, 0));
    assert!(c.accounted(0));

    // First fragment completes the datagram in shallow mode: FirstSeen,
    // then everything is taken.
    let mut r = Reassembler::new(cfg().shallow()).unwrap();
    assert!(matches!(ins(&mut r, 0, k, 64, 8, L), FragResult::Pending));
    assert!(matches!(ins(&mut r, 0, k, 0, 64, M), FragResult::FirstSeen { .. }));
    assert_eq!(r.take_held(&k).map(|h| h.offset), Some(0));
    assert_eq!(r.take_held(&k).map(|h| (h.offset, h.more)), Some((64, false)));
    assert!(r.is_empty() && r.take_held(&k).is_none());
}

#[test]
fn full_mode_switches_to_forwarding_on_take() {
    let mut r = Reassembler::new(cfg()).unwrap();
    let k = key(Fam::V4, 9, U);
    assert!(matches!(ins(&mut r, 0, k, 0, 64, M), FragResult::FirstSeen { .. }));
    assert!(matches!(ins(&mut r, 0, k, 64, 64, M), FragResult::Pending), "full mode keeps holding");
    assert_eq!(r.take_held(&k).map(|h| h.offset), Some(0));
    assert!(matches!(ins(&mut r, 0, k, 128, 8, L), FragResult::Forward { .. }));
    assert_eq!(r.take_held(&k).map(|h| h.offset), Some(64));
    assert!(r.is_empty());
}

#[test]
fn discard_on_policy() {
    let mut r = Reassembler::new(cfg()).unwrap();
    let k = key(Fam::V4, 3, U);
    assert!(matches!(ins(&mut r, 0, k, 64, 64, M), FragResult::Pending));
    assert!(matches!(ins(&mut r, 0, k, 0, 64, M), FragResult::FirstSeen { .. }));
    assert_eq!(r.discard(&k, R::AclDenied), Some(2));
    assert_eq!(r.discard(&k, R::AclDenied), None);
    assert_eq!((r.len(), r.counters().dropped(R::AclDenied)), (0, 2));
    assert!(r.counters().accounted(0));
}

#[test]
fn arena_exhaustion_is_counted() {
    // Arena for one maximum datagram: a second large one does not fit.
    let mut r = Reassembler::new(cfg()).unwrap();
    let (a, b) = (key(Fam::V4, 1, U), key(Fam::V4, 2, U));
    for i in 0..7u16 {
        assert!(matches!(ins(&mut r, 0, a, i * 9000, 9000, M), FragResult::FirstSeen { .. } | FragResult::Pending));
    }
    assert!(matches!(ins(&mut r, 0, b, 0, 9000, M), FragResult::Drop(R::FragNoBuffer)));
    assert_eq!(r.counters().dropped(R::FragNoBuffer), 1);
    assert!(matches!(ins(&mut r, 0, a, 63000, 2535, L), FragResult::Complete { .. }));
    assert_eq!(r.held_bytes(), 0);
}

#[test]
fn config_limits() {
    assert!(Reassembler::new(ReasmConfig::default()).is_ok());
    let bad = [
        ReasmConfig { max_contexts: 0, ..cfg() },
        ReasmConfig { max_frags_per_datagram: 0, ..cfg() },
        ReasmConfig { max_frags_per_datagram: 9000, ..cfg() },
        ReasmConfig { arena_bytes: 65535, ..cfg() },
        ReasmConfig { timeout: Duration(0), ..cfg() },
    ];
    for c in bad {
        let e = Reassembler::new(c).err().expect("rejected");
        assert!(!e.to_string().is_empty());
    }
    let r = Reassembler::new(ReasmConfig::default()).unwrap();
    let mib = r.memory_bytes() as f64 / (1 << 20) as f64;
    println!("reassembler memory with the defaults: {} bytes ({mib:.2} MiB)", r.memory_bytes());
    assert!(r.memory_bytes() < (5 << 20) + (512 << 10), "{}", r.memory_bytes());
    let r = Reassembler::new(cfg()).unwrap();
    println!("reassembler memory, test config: {} bytes", r.memory_bytes());
}

// --- classification through the wire views ---

fn ipv4_frag(id: u16, off: u16, more: bool, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 20 + data.len()];
    let mut ip = Ipv4Packet::new_unchecked(&mut b[..]);
    ip.set_version_ihl(20);
    ip.set_total_len((20 + data.len()) as u16);
    ip.set_ident(id);
    ip.set_flags_frag(if more { FLAG_MF } else { 0 }, off);
    ip.set_ttl(64);
    ip.set_protocol(U);
    ip.set_src(Ipv4Addr::new(10, 0, 0, 1));
    ip.set_dst(Ipv4Addr::new(10, 0, 1, 2));
    ip.fill_checksum();
    b[20..].copy_from_slice(data);
    b
}

/// IPv6 with `ext` (next-header, 8-byte header) pairs before the Fragment header.
fn ipv6_frag(ident: u32, off: u16, more: bool, ext: &[u8], data: &[u8]) -> Vec<u8> {
    let exts = ext.len() * 8;
    let mut b = vec![0u8; 40 + exts + 8 + data.len()];
    let mut ip = Ipv6Packet::new_unchecked(&mut b[..]);
    ip.set_ver_tc_flow(0, 0);
    ip.set_payload_len((exts + 8 + data.len()) as u16);
    ip.set_next_header(ext.first().copied().unwrap_or(ip_proto::IPV6_FRAG));
    ip.set_hop_limit(64);
    ip.set_src("2001:db8::1".parse().unwrap());
    ip.set_dst("2001:db8::2".parse().unwrap());
    for i in 0..ext.len() {
        b[40 + i * 8] = ext.get(i + 1).copied().unwrap_or(ip_proto::IPV6_FRAG);
    }
    let f = 40 + exts;
    b[f] = U;
    b[f + 2..f + 4].copy_from_slice(&(off | u16::from(more)).to_be_bytes());
    b[f + 4..f + 8].copy_from_slice(&ident.to_be_bytes());
    b[f + 8..].copy_from_slice(data);
    b
}

#[test]
fn classify_ipv4() {
    let d = bytes(1, U, 5, 0..64);
    let p = ipv4_frag(0x1234, 0, true, &d);
    let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
    let f = ipv4_fragment(&ip).unwrap().unwrap();
    assert_eq!((f.key.ident, f.key.proto, f.offset, f.more), (0x1234, U, 0, true));
    assert_eq!(ip.payload(), &d[..]);
    let whole = ipv4_frag(1, 0, false, &d);
    assert_eq!(ipv4_fragment(&Ipv4Packet::new_checked(&whole[..]).unwrap()), Ok(None));
    // 65520 + 8 data + 20 header > 65535 (fine as payload, not as a packet).
    let p = ipv4_frag(1, 65520, false, &[0; 8]);
    assert_eq!(ipv4_fragment(&Ipv4Packet::new_checked(&p[..]).unwrap()), Err(R::FragTooBig));
    // End to end: fragments from the wire reassemble.
    let mut r = Reassembler::new(cfg()).unwrap();
    let data = bytes(5, U, 5, 0..100);
    let mut out = None;
    for (off, more) in [(64u16, false), (0, true)] {
        let p = ipv4_frag(5, off, more, &data[usize::from(off)..if more { 64 } else { 100 }]);
        let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
        let f = ipv4_fragment(&ip).unwrap().unwrap();
        if let FragResult::Complete { data, .. } = r.insert(Timestamp::ZERO, &f, ip.payload()) {
            out = Some(data.to_vec());
        }
    }
    assert_eq!(out.as_deref(), Some(&data[..]));
}

#[test]
fn classify_ipv6() {
    let d = bytes(1, U, 5, 0..64);
    let p = ipv6_frag(0xdead_beef, 0, true, &[], &d);
    let ip = Ipv6Packet::new_checked(&p[..]).unwrap();
    let (f, at) = ipv6_fragment(&ip).unwrap().unwrap();
    assert_eq!((f.key.ident, f.key.proto, f.offset, f.more, at), (0xdead_beef, U, 0, true, 8));
    assert_eq!(&ip.payload()[at..], &d[..]);
    // Behind a Hop-by-Hop and a Destination Options header, non-first.
    let p = ipv6_frag(7, 1448, false, &[0, 60], &d);
    let ip = Ipv6Packet::new_checked(&p[..]).unwrap();
    let (f, at) = ipv6_fragment(&ip).unwrap().unwrap();
    assert_eq!((f.key.ident, f.key.proto, f.offset, f.more, at), (7, U, 1448, false, 24));
    assert_eq!(&ip.payload()[at..], &d[..]);
    // Not a fragment; a broken chain.
    let mut p = ipv6_frag(7, 0, true, &[], &d);
    p[6] = U;
    assert_eq!(ipv6_fragment(&Ipv6Packet::new_checked(&p[..]).unwrap()), Ok(None));
    let mut p = ipv6_frag(7, 0, true, &[60], &d);
    p[41] = 200; // Destination Options length runs past the payload
    assert_eq!(ipv6_fragment(&Ipv6Packet::new_checked(&p[..]).unwrap()), Err(R::Ipv6Malformed));
}

// --- properties ---

#[derive(Clone, Debug)]
enum Op {
    Frag { id: u32, six: bool, proto: u8, off: u16, len: usize, more: bool, dt: u64 },
    Take { id: u32, six: bool, proto: u8 },
    Expire { dt: u64, budget: usize },
    Discard { id: u32, six: bool, proto: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    let proto = prop::sample::select(vec![U, T, ip_proto::ICMP, ip_proto::ICMPV6, 99]);
    let off = prop_oneof![(0u16..64).prop_map(|w| w * 8), (0u16..8192).prop_map(|w| w * 8), any::<u16>()];
    let len = prop_oneof![(0usize..40).prop_map(|w| w * 8), 0usize..2000, 60000usize..66000];
    prop_oneof![
        8 => (0u32..6, any::<bool>(), proto.clone(), off, len, any::<bool>(), 0u64..700)
            .prop_map(|(id, six, proto, off, len, more, dt)| Op::Frag { id, six, proto, off, len, more, dt }),
        1 => (0u32..6, any::<bool>(), proto.clone()).prop_map(|(id, six, proto)| Op::Take { id, six, proto }),
        1 => (0u64..3000, 0usize..4).prop_map(|(dt, budget)| Op::Expire { dt, budget }),
        1 => (0u32..6, any::<bool>(), proto).prop_map(|(id, six, proto)| Op::Discard { id, six, proto }),
    ]
}

fn fam(six: bool) -> Fam {
    if six {
        Fam::V6
    } else {
        Fam::V4
    }
}

/// A datagram of `len` bytes cut into pieces of `piece` bytes (a multiple
/// of 8): (offset, more, range).
fn cut(len: usize, piece: usize) -> Vec<(u16, bool, core::ops::Range<usize>)> {
    (0..len)
        .step_by(piece)
        .map(|o| (o as u16, o + piece < len, o..(o + piece).min(len)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any sequence of fragments and calls: no panic, memory fixed, bounds
    /// held, every fragment accounted for.
    #[test]
    fn random_sequences_are_bounded(ops in prop::collection::vec(op(), 1..120), shallow in any::<bool>()) {
        let c = if shallow { cfg().shallow() } else { cfg() };
        let mut r = Reassembler::new(c).unwrap();
        let mem = r.memory_bytes();
        let mut now = 0u64;
        for o in ops {
            match o {
                Op::Frag { id, six, proto, off, len, more, dt } => {
                    now += dt;
                    let data = bytes(id, proto, 5, usize::from(off)..usize::from(off) + len);
                    let info = FragInfo { key: key(fam(six), id, proto), offset: off, more };
                    if let FragResult::Complete { data, .. } = r.insert(Timestamp::from_millis(now), &info, &data) {
                        prop_assert!(data.len() <= MAX_DATAGRAM);
                    }
                }
                Op::Take { id, six, proto } => {
                    if let Some(h) = r.take_held(&key(fam(six), id, proto)) {
                        prop_assert!(usize::from(h.offset) + h.data.len() <= MAX_DATAGRAM);
                    }
                }
                Op::Expire { dt, budget } => {
                    now += dt;
                    prop_assert!(r.expire(Timestamp::from_millis(now), budget) <= budget);
                }
                Op::Discard { id, six, proto } => {
                    r.discard(&key(fam(six), id, proto), R::AclDenied);
                }
            }
            prop_assert!(r.len() <= c.max_contexts);
            prop_assert!(r.held_bytes() <= c.arena_bytes.next_multiple_of(BLOCK_SIZE));
            prop_assert!(r.held_fragments() <= c.max_contexts * c.max_frags_per_datagram);
            prop_assert_eq!(r.memory_bytes(), mem);
            prop_assert!(r.counters().accounted(r.held_fragments()));
        }
        r.expire(Timestamp::from_millis(now + 2000), usize::MAX);
        prop_assert_eq!((r.len(), r.held_fragments(), r.held_bytes()), (0, 0, 0));
        prop_assert!(r.counters().accounted(0));
    }

    /// Any order of a valid datagram's fragments (with duplicates thrown
    /// in) reassembles to the original bytes, on the last distinct piece.
    #[test]
    fn any_permutation_reassembles(
        len in 9usize..=MAX_DATAGRAM,
        piece8 in 1usize..=1200,
        six in any::<bool>(),
        dups in prop::collection::vec(any::<prop::sample::Index>(), 0..4),
        seed in any::<u64>(),
    ) {
        let c = ReasmConfig::default();
        // At most 64 pieces of a multiple of 8 bytes.
        let piece = (piece8 * 8).max(len.div_ceil(c.max_frags_per_datagram).next_multiple_of(8));
        let pieces = cut(len, piece);
        let mut order: Vec<usize> = (0..pieces.len()).collect();
        // A seeded Fisher-Yates from the Index (proptest shrinks it).
        let mut s = seed | 1;
        for i in (1..order.len()).rev() {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            order.swap(i, (s % (i as u64 + 1)) as usize);
        }
        // Copies of pieces already sent, never after the last piece.
        let many = order.len() > 1;
        for d in dups.iter().filter(|_| many) {
            let at = d.index(order.len() - 1);
            order.insert(at + 1, order[at]);
        }
        let k = key(fam(six), 42, U);
        let mut r = Reassembler::new(c).unwrap();
        let mut done = None;
        let mut seen = std::collections::HashSet::new();
        for (n, &i) in order.iter().enumerate() {
            let (off, more, ref range) = pieces[i];
            let data = bytes(42, U, 5, range.clone());
            let fresh = seen.insert(i);
            match r.insert(Timestamp::ZERO, &FragInfo { key: k, offset: off, more }, &data) {
                FragResult::Complete { data, .. } => {
                    prop_assert_eq!(seen.len(), pieces.len());
                    prop_assert!(done.is_none());
                    done = Some(data.to_vec());
                }
                FragResult::Drop(R::FragDuplicate) => prop_assert!(!fresh),
                FragResult::Pending | FragResult::FirstSeen { .. } => prop_assert!(fresh && seen.len() < pieces.len()),
                FragResult::Unfragmented => prop_assert_eq!(pieces.len(), 1),
                other => prop_assert!(false, "#{} {:?}: {:?}", n, pieces[i], other),
            }
        }
        if pieces.len() > 1 {
            prop_assert_eq!(done, Some(bytes(42, U, 5, 0..len)));
        }
        prop_assert!(r.counters().accounted(0));
    }

    /// Shallow mode: the taken and forwarded pieces of any order are
    /// exactly the datagram, each byte once.
    #[test]
    fn any_permutation_forwards_once(len in 9usize..=20000, piece8 in 1usize..=200, seed in any::<u64>()) {
        let c = ReasmConfig::default().shallow();
        let piece = (piece8 * 8).max(len.div_ceil(c.max_frags_per_datagram).next_multiple_of(8));
        let pieces = cut(len, piece);
        prop_assume!(pieces.len() > 1);
        let mut order: Vec<usize> = (0..pieces.len()).collect();
        let mut s = seed | 1;
        for i in (1..order.len()).rev() {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            order.swap(i, (s % (i as u64 + 1)) as usize);
        }
        let k = key(Fam::V4, 1, U);
        let mut r = Reassembler::new(c).unwrap();
        let mut out = vec![None::<u8>; len];
        let mut put = |off: usize, d: &[u8]| {
            for (j, &b) in d.iter().enumerate() {
                assert!(out[off + j].replace(b).is_none(), "byte {} twice", off + j);
            }
        };
        for &i in &order {
            let (off, more, ref range) = pieces[i];
            let data = bytes(1, U, 5, range.clone());
            match r.insert(Timestamp::ZERO, &FragInfo { key: k, offset: off, more }, &data) {
                FragResult::Pending => {}
                FragResult::Forward { .. } => put(usize::from(off), &data),
                FragResult::FirstSeen { .. } => {
                    while let Some(h) = r.take_held(&k) {
                        put(usize::from(h.offset), h.data);
                    }
                }
                other => prop_assert!(false, "{:?}", other),
            }
        }
        prop_assert!(r.is_empty());
        let out: Vec<u8> = out.into_iter().map(|b| b.unwrap_or(0)).collect();
        prop_assert_eq!(out, bytes(1, U, 5, 0..len));
        prop_assert_eq!(r.counters().forwarded_datagrams, 1);
    }
}
