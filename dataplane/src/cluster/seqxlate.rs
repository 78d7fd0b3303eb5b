//! Sequence-number translation for cookie ISNs (SPEC R6).
//!
//! The owner replaced the client's ISN by ISN' (`cookie`), so the client
//! numbers its bytes from ISN and the server from ISN'. For the life of the
//! connection the owner rewrites every segment by `delta = ISN' - ISN`
//! (mod 2^32, RFC 9293 §3.4 sequence arithmetic):
//!
//! | direction | field | rewrite |
//! |---|---|---|
//! | original (client → server) | `seq` | `+= delta` |
//! | original | `ack`, SACK blocks | untouched: they are in the server's space |
//! | reply (server → client) | `ack` (only if ACK is set) | `-= delta` |
//! | reply | every SACK block, left and right edge (RFC 2018 §3; D-SACK, RFC 2883, is the same option) | `-= delta` |
//! | reply | `seq` | untouched |
//!
//! Invariants:
//! - the TCP checksum is updated incrementally (RFC 1624 eqn. 3, via
//!   `wire::checksum`) and equals a full recompute whenever the incoming
//!   checksum was correct; SACK edges at odd offsets (after a lone NOP)
//!   are updated in the byte-swapped domain, which RFC 1071 §2(B) allows;
//! - `ack` is rewritten only when the ACK flag is set: without it the
//!   field carries no meaning (RFC 9293 §3.1) and is left as the sender
//!   wrote it;
//! - the option walk is `wire::tcp::OptionIter` — bounded by the 40 option
//!   bytes, never reads past them. A malformed option ends the walk: SACK
//!   blocks before it are translated, nothing after it is touched, seq/ack
//!   are still translated, and the result says `malformed_options` (the
//!   pipeline decides whether to drop). A kind-5 option whose length is
//!   not 2 + 8n is left as it is and also reported;
//! - no allocation, no panic, on any input; translating with `delta` and
//!   then with `delta.inverse()` in the same direction restores the
//!   segment byte for byte (checksum included, when it was correct).

use crate::types::Direction;
use crate::wire::checksum;
use crate::wire::tcp::{self, flags, OptionIter, SackEdges, TcpOption, TcpPacket, MAX_SACK_BLOCKS, MIN_HEADER_LEN};

/// `ISN' - ISN` modulo 2^32: what the owner adds to client sequence
/// numbers on the way to the server.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SeqDelta(pub u32);

impl SeqDelta {
    pub const ZERO: SeqDelta = SeqDelta(0);
    /// The delta that turns the client's `isn` into the cookie `isn_prime`.
    #[inline]
    pub const fn between(isn: u32, isn_prime: u32) -> Self {
        SeqDelta(isn_prime.wrapping_sub(isn))
    }
    /// The delta that undoes this one.
    #[inline]
    pub const fn inverse(self) -> Self {
        SeqDelta(self.0.wrapping_neg())
    }
    /// Client sequence space → server's view of it (original direction `seq`).
    #[inline]
    pub const fn to_server(self, client_seq: u32) -> u32 {
        client_seq.wrapping_add(self.0)
    }
    /// Server's view → client sequence space (reply `ack`, SACK edges).
    #[inline]
    pub const fn to_client(self, server_view: u32) -> u32 {
        server_view.wrapping_sub(self.0)
    }
}

/// The segment could not be translated; it was not modified.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum XlateError {
    /// Shorter than 20 bytes or than its data offset.
    Truncated,
    /// Data offset below 5.
    BadHeaderLen,
}

impl From<tcp::Error> for XlateError {
    fn from(e: tcp::Error) -> Self {
        match e {
            tcp::Error::BadHeaderLen => XlateError::BadHeaderLen,
            tcp::Error::Truncated | tcp::Error::BadOption => XlateError::Truncated,
        }
    }
}

impl core::fmt::Display for XlateError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            XlateError::Truncated => "tcp segment truncated",
            XlateError::BadHeaderLen => "tcp data offset below 5",
        })
    }
}

/// What `translate` changed.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Xlated {
    /// `seq` rewritten (original direction).
    pub seq: bool,
    /// `ack` rewritten (reply direction with ACK set).
    pub ack: bool,
    /// SACK blocks rewritten (reply direction), ≤ `MAX_SACK_BLOCKS`.
    pub sack_blocks: u8,
    /// The option walk met a malformed option (or a SACK option of bad
    /// length); options from there on were left untouched.
    pub malformed_options: bool,
}

/// Translate one TCP segment (header + payload, as it sits after the IP
/// header) in place. See the module documentation for what changes.
#[inline]
pub fn translate(segment: &mut [u8], dir: Direction, delta: SeqDelta) -> Result<Xlated, XlateError> {
    let mut tcp = TcpPacket::new_checked(segment)?;
    Ok(translate_packet(&mut tcp, dir, delta))
}

/// `translate` over an already checked TCP view.
#[inline]
pub fn translate_packet<T: AsRef<[u8]> + AsMut<[u8]>>(
    tcp: &mut TcpPacket<T>,
    dir: Direction,
    delta: SeqDelta,
) -> Xlated {
    let mut out = Xlated::default();
    let mut csum = tcp.checksum();
    match dir {
        Direction::Original => {
            let old = tcp.seq();
            let new = delta.to_server(old);
            tcp.set_seq(new);
            csum = checksum::update_u32(csum, old, new);
            out.seq = true;
        }
        Direction::Reply => {
            if tcp.flags() & flags::ACK != 0 {
                let old = tcp.ack();
                let new = delta.to_client(old);
                tcp.set_ack(new);
                csum = checksum::update_u32(csum, old, new);
                out.ack = true;
            }
            // Locate the SACK blocks first (immutable walk), then rewrite.
            // Each non-empty SACK option takes ≥ 10 of the 40 option bytes,
            // so at most MAX_SACK_BLOCKS (4) options carry blocks.
            let mut found = [(0usize, 0usize); MAX_SACK_BLOCKS];
            let mut nfound = 0;
            let opts = tcp.options();
            let mut it = OptionIter::new(opts);
            while let Some(opt) = it.next() {
                match opt {
                    Ok(TcpOption::Sack(body)) if !body.is_empty() && nfound < MAX_SACK_BLOCKS => {
                        let end = opts.len() - it.remaining().len();
                        found[nfound] = (end - body.len(), body.len() / 8);
                        nfound += 1;
                    }
                    Ok(TcpOption::Unknown { kind: tcp::option_kind::SACK, .. }) | Err(_) => {
                        out.malformed_options = true;
                    }
                    Ok(_) => {}
                }
            }
            let opts = tcp.options_mut();
            for &(start, blocks) in &found[..nfound] {
                let mut edges = SackEdges::new(opts, start);
                for b in 0..blocks {
                    for k in [2 * b, 2 * b + 1] {
                        let Some(old) = edges.get(k) else { continue };
                        let new = delta.to_client(old);
                        edges.set(k, new);
                        // Offset within the segment decides the word alignment.
                        csum = update_u32_at(csum, (MIN_HEADER_LEN + edges.offset(k)) % 2 == 1, old, new);
                    }
                    out.sack_blocks = out.sack_blocks.saturating_add(1);
                }
            }
        }
    }
    tcp.set_checksum(csum);
    out
}

/// Translate the TCP header an ICMP error quotes (at least its first 8
/// bytes) on its way to the endpoint that sent the quoted segment, in
/// place. `dir` is the quoted segment's direction in its flow: a
/// client-to-server segment (`Original`) was sent on with its `seq` in the
/// server's view and goes back to the client, so its `seq` returns to the
/// client's space (RFC 5927 §4.1: hosts check it against their send
/// window); a server-to-client one (`Reply`) goes back to the server, its
/// `ack` (if quoted) returns to the server's view. The quoted checksum,
/// if quoted, is updated too. `false` when fewer than 8 bytes are quoted
/// (nothing changed). The caller recomputes the ICMP checksum.
pub fn translate_quoted(quoted: &mut [u8], dir: Direction, delta: SeqDelta) -> bool {
    let Some(mut t) = tcp::QuotedTcp::new_checked(quoted) else { return false };
    let csum = t.checksum();
    let (old, new) = match dir {
        Direction::Original => {
            let old = t.seq();
            let new = delta.to_client(old);
            t.set_seq(new);
            (old, new)
        }
        Direction::Reply => match t.ack() {
            Some(old) => {
                let new = delta.to_server(old);
                t.set_ack(new);
                (old, new)
            }
            None => return true,
        },
    };
    if let Some(c) = csum {
        t.set_checksum(checksum::update_u32(c, old, new));
    }
    true
}

/// RFC 1624 update of a 32-bit field that starts at an even (`odd ==
/// false`) or odd byte offset of the checksummed data. At an odd offset
/// the field's bytes fall in the low/high halves of three words; since
/// one's complement addition commutes with byte swapping (RFC 1071
/// §2(B)), the update is the aligned one applied to the byte-swapped sum.
#[inline]
fn update_u32_at(csum: u16, odd: bool, old: u32, new: u32) -> u16 {
    if odd {
        checksum::update_u32(csum.swap_bytes(), old, new).swap_bytes()
    } else {
        checksum::update_u32(csum, old, new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tcp::{option_kind as k, TcpOptions};
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const SRC: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
    const DST: Ipv4Addr = Ipv4Addr::new(93, 184, 216, 34);

    /// A segment with correct checksum: header fields, options (padded
    /// with END to a multiple of 4), payload.
    fn segment(seq: u32, ack: u32, fl: u8, opts: &[u8], payload: &[u8]) -> Vec<u8> {
        let olen = opts.len().div_ceil(4) * 4;
        let mut b = vec![0u8; 20 + olen + payload.len()];
        let mut t = TcpPacket::new_unchecked(&mut b[..]);
        t.set_src_port(50000);
        t.set_dst_port(443);
        t.set_seq(seq);
        t.set_ack(ack);
        t.set_header_len(20 + olen);
        t.set_flags(fl);
        t.set_window(501);
        t.options_mut()[..opts.len()].copy_from_slice(opts);
        b[20 + olen..].copy_from_slice(payload);
        let mut t = TcpPacket::new_unchecked(&mut b[..]);
        t.fill_checksum(SRC, DST);
        b
    }

    fn sack(blocks: &[(u32, u32)]) -> Vec<u8> {
        let mut o = vec![k::SACK, 2 + 8 * blocks.len() as u8];
        for (l, r) in blocks {
            o.extend_from_slice(&l.to_be_bytes());
            o.extend_from_slice(&r.to_be_bytes());
        }
        o
    }
    const TS: [u8; 10] = [k::TIMESTAMP, 10, 0, 0x1a, 0x2b, 0x3c, 0xde, 0xad, 0xbe, 0xef];

    /// Translate, then check against a full recompute; return the result.
    fn xlate_checked(b: &[u8], dir: Direction, d: SeqDelta) -> (Vec<u8>, Xlated) {
        let mut inc = b.to_vec();
        let x = translate(&mut inc, dir, d).unwrap();
        let mut full = inc.clone();
        TcpPacket::new_unchecked(&mut full[..]).fill_checksum(SRC, DST);
        assert_eq!(inc, full, "incremental checksum differs from a full recompute");
        assert!(TcpPacket::new_checked(&inc[..]).unwrap().verify_checksum(SRC, DST));
        (inc, x)
    }

    fn parse(b: &[u8]) -> (u32, u32, TcpOptions) {
        let t = TcpPacket::new_checked(b).unwrap();
        (t.seq(), t.ack(), TcpOptions::parse(t.options()))
    }

    #[test]
    fn original_direction_seq_only() {
        let d = SeqDelta::between(0x1000_0000, 0x8abc_d123);
        // The client's SYN: seq becomes ISN', ack (ACK unset) untouched.
        let syn = segment(0x1000_0000, 0, flags::SYN, &[k::MSS, 4, 5, 0xb4, k::NOP, k::WSCALE, 3, 7], &[]);
        let (out, x) = xlate_checked(&syn, Direction::Original, d);
        assert_eq!(parse(&out).0, 0x8abc_d123);
        assert_eq!(x, Xlated { seq: true, ..Xlated::default() });
        // Data with ACK and SACK blocks about server data: only seq moves.
        let mut o = vec![k::NOP, k::NOP];
        o.extend_from_slice(&TS);
        o.extend_from_slice(&[k::NOP, k::NOP]);
        o.extend_from_slice(&sack(&[(5000, 6000), (7000, 8000)]));
        let seg = segment(0x1000_0001, 0x4242_0001, flags::ACK | flags::PSH, &o, b"GET / HTTP/1.1\r\n\r\n");
        let (out, x) = xlate_checked(&seg, Direction::Original, d);
        let (seq, ack, opts) = parse(&out);
        assert_eq!((seq, ack), (0x8abc_d124, 0x4242_0001));
        assert_eq!(opts.sack_blocks(), &[(5000, 6000), (7000, 8000)]);
        assert_eq!(opts.timestamp, Some((0x001a_2b3c, 0xdead_beef)));
        assert_eq!((x.seq, x.ack, x.sack_blocks), (true, false, 0));
    }

    #[test]
    fn reply_direction_ack_and_sack() {
        let d = SeqDelta::between(1_000, 0xffff_fff0); // wraps
        // SYN-ACK: ack = ISN' + 1 becomes ISN + 1; seq untouched.
        let synack = segment(0x4242_0000, 0xffff_fff1, flags::SYN | flags::ACK, &[k::MSS, 4, 5, 0xb4], &[]);
        let (out, x) = xlate_checked(&synack, Direction::Reply, d);
        assert_eq!(parse(&out).0, 0x4242_0000);
        assert_eq!(parse(&out).1, 1_001);
        assert_eq!(x, Xlated { ack: true, ..Xlated::default() });
        // Aligned layout: NOP NOP TS NOP NOP SACK(3 blocks), with payload.
        let blocks = [(0xffff_fff5, 0x0000_0005), (0x10, 0x20), (0xffff_fff0, 0xffff_fff2)];
        let mut o = vec![k::NOP, k::NOP];
        o.extend_from_slice(&TS);
        o.extend_from_slice(&[k::NOP, k::NOP]);
        o.extend_from_slice(&sack(&blocks));
        let seg = segment(0x4242_0001, 0x0000_0100, flags::ACK, &o, &[0xaa; 33]);
        let (out, x) = xlate_checked(&seg, Direction::Reply, d);
        let (seq, ack, opts) = parse(&out);
        assert_eq!((seq, ack), (0x4242_0001, d.to_client(0x100)));
        let want: Vec<_> = blocks.iter().map(|&(l, r)| (d.to_client(l), d.to_client(r))).collect();
        assert_eq!(opts.sack_blocks(), &want[..]);
        assert_eq!(opts.timestamp, Some((0x001a_2b3c, 0xdead_beef)), "timestamps are not sequence numbers");
        assert_eq!((x.ack, x.sack_blocks, x.malformed_options), (true, 3, false));
    }

    /// Odd offsets: a lone NOP before SACK puts every edge at an odd byte.
    #[test]
    fn odd_option_layouts() {
        let d = SeqDelta(0x1357_9bdf);
        let layouts: Vec<Vec<u8>> = vec![
            [&[k::NOP][..], &sack(&[(1, 2), (0xffff_ffff, 0x8000_0000)])].concat(),
            [&[k::NOP][..], &sack(&[(11, 22), (33, 44), (55, 66), (77, 88)])[..]].concat()[..30].to_vec(), // truncated
            [&[k::NOP][..], &TS[..], &[k::NOP][..], &sack(&[(100, 200)])[..]].concat(),
            [&sack(&[(9, 10)])[..], &[k::NOP][..], &sack(&[(11, 12)])[..]].concat(), // two SACK options
            [&TS[..], &sack(&[(3, 4), (5, 6)])[..]].concat(),                         // TS at 0, SACK at even
            [&[k::NOP, k::NOP, k::NOP][..], &sack(&[(0, 0xffff_ffff)])[..], &[k::END, 9, 9][..]].concat(),
        ];
        for (i, o) in layouts.iter().enumerate() {
            for payload in [&b""[..], b"x", b"odd length payload!"] {
                for fl in [flags::ACK, flags::ACK | flags::FIN, flags::RST] {
                    let seg = segment(77, 0x2000_0000, fl, o, payload);
                    let (out, x) = xlate_checked(&seg, Direction::Reply, d);
                    let before = TcpOptions::parse(TcpPacket::new_checked(&seg[..]).unwrap().options());
                    let (_, ack, after) = parse(&out);
                    let want: Vec<_> = before.sack_blocks().iter().map(|&(l, r)| (d.to_client(l), d.to_client(r))).collect();
                    assert_eq!(after.sack_blocks(), &want[..], "layout {i}");
                    assert_eq!(usize::from(x.sack_blocks), want.len(), "layout {i}");
                    assert_eq!(x.malformed_options, before.malformed, "layout {i}");
                    if fl & flags::ACK != 0 {
                        assert_eq!(ack, d.to_client(0x2000_0000));
                    } else {
                        assert_eq!(ack, 0x2000_0000, "no ACK flag: ack left alone");
                    }
                    // Inverse restores byte for byte.
                    let (back, _) = xlate_checked(&out, Direction::Reply, d.inverse());
                    assert_eq!(back, seg, "layout {i}");
                }
            }
        }
    }

    #[test]
    fn malformed_options() {
        let d = SeqDelta(0x100);
        // SACK(1 block), then an option with length 1: walk stops there.
        let o = [&sack(&[(0x1000, 0x2000)])[..], &[k::NOP, 0x22, 1, 0, 0, 0][..]].concat();
        let seg = segment(1, 0x5000, flags::ACK, &o, b"");
        let (out, x) = xlate_checked(&seg, Direction::Reply, d);
        assert_eq!(x, Xlated { seq: false, ack: true, sack_blocks: 1, malformed_options: true });
        assert_eq!(parse(&out).2.sack_blocks(), &[(0xf00, 0x1f00)]);
        // A SACK option of bad length (not 2 + 8n) is left alone, reported.
        let o = [k::SACK, 6, 0, 0, 1, 0, k::NOP, k::NOP];
        let seg = segment(1, 0x5000, flags::ACK, &o, b"");
        let (out, x) = xlate_checked(&seg, Direction::Reply, d);
        assert_eq!(TcpPacket::new_checked(&out[..]).unwrap().options(), &o);
        assert_eq!((x.ack, x.sack_blocks, x.malformed_options), (true, 0, true));
        // Broken headers: error, untouched.
        let mut short = segment(1, 2, flags::ACK, &[], b"")[..19].to_vec();
        let copy = short.clone();
        assert_eq!(translate(&mut short, Direction::Original, d), Err(XlateError::Truncated));
        assert_eq!(short, copy);
        let mut bad = segment(1, 2, flags::ACK, &[], b"");
        bad[12] = 0x40;
        assert_eq!(translate(&mut bad, Direction::Original, d), Err(XlateError::BadHeaderLen));
        let mut long = segment(1, 2, flags::ACK, &[], b"");
        long[12] = 0xf0;
        assert_eq!(translate(&mut long, Direction::Reply, d), Err(XlateError::Truncated));
    }

    /// A whole exchange through the owner: the client and server each see
    /// consistent numbers in their own space.
    #[test]
    fn exchange() {
        let (isn, isn_p, srv) = (0xffff_ff00u32, 0x0123_4567u32, 0x7000_0000u32);
        let d = SeqDelta::between(isn, isn_p);
        assert_eq!(d.to_server(isn), isn_p);
        // Client → server SYN.
        let (syn, _) = xlate_checked(&segment(isn, 0, flags::SYN, &[], b""), Direction::Original, d);
        let server_saw_isn = parse(&syn).0;
        assert_eq!(server_saw_isn, isn_p);
        // Server → client SYN-ACK acknowledges ISN' + 1; the client sees ISN + 1.
        let synack = segment(srv, server_saw_isn.wrapping_add(1), flags::SYN | flags::ACK, &[], b"");
        let (synack, _) = xlate_checked(&synack, Direction::Reply, d);
        assert_eq!(parse(&synack).1, isn.wrapping_add(1));
        // Client sends 300 bytes (crossing 2^32 in its space); server SACKs the second half.
        let data = segment(isn.wrapping_add(1), srv + 1, flags::ACK, &[], &[7; 300]);
        let (data, _) = xlate_checked(&data, Direction::Original, d);
        let s = parse(&data).0;
        let ack = segment(srv + 1, s.wrapping_add(100), flags::ACK, &[k::NOP, k::NOP].iter().copied().chain(sack(&[(s.wrapping_add(200), s.wrapping_add(300))])).collect::<Vec<_>>(), b"");
        let (ack, _) = xlate_checked(&ack, Direction::Reply, d);
        let (_, a, o) = parse(&ack);
        assert_eq!(a, isn.wrapping_add(101));
        assert_eq!(o.sack_blocks(), &[(isn.wrapping_add(201), isn.wrapping_add(301))]);
    }

    fn option_strategy() -> impl Strategy<Value = Vec<u8>> {
        let one = prop_oneof![
            Just(vec![k::NOP]),
            Just(TS.to_vec()),
            Just(vec![k::MSS, 4, 5, 0xb4]),
            Just(vec![k::WSCALE, 3, 7]),
            Just(vec![k::SACK_PERMITTED, 2]),
            proptest::collection::vec(any::<(u32, u32)>(), 0..4).prop_map(|b| sack(&b)),
            proptest::collection::vec(any::<u8>(), 0..6),
        ];
        proptest::collection::vec(one, 0..6).prop_map(|v| {
            let mut o: Vec<u8> = v.concat();
            o.truncate(40);
            o
        })
    }

    proptest! {
        #[test]
        fn checksum_and_inverse(seq in any::<u32>(), ack in any::<u32>(), fl in any::<u8>(),
                                opts in option_strategy(), payload in proptest::collection::vec(any::<u8>(), 0..64),
                                delta in any::<u32>(), reply in any::<bool>()) {
            let seg = segment(seq, ack, fl, &opts, &payload);
            let dir = if reply { Direction::Reply } else { Direction::Original };
            let d = SeqDelta(delta);
            let (out, x) = xlate_checked(&seg, dir, d);
            let (s2, a2, o2) = parse(&out);
            let (_, _, o1) = parse(&seg);
            match dir {
                Direction::Original => {
                    prop_assert_eq!(s2, seq.wrapping_add(delta));
                    prop_assert_eq!(a2, ack);
                    prop_assert_eq!(&out[20..], &seg[20..]);
                }
                Direction::Reply => {
                    prop_assert_eq!(s2, seq);
                    prop_assert_eq!(a2, if fl & flags::ACK != 0 { ack.wrapping_sub(delta) } else { ack });
                    prop_assert_eq!(o2.sack_blocks().len(), o1.sack_blocks().len());
                    prop_assert!(usize::from(x.sack_blocks) >= o1.sack_blocks().len());
                    for (b2, b1) in o2.sack_blocks().iter().zip(o1.sack_blocks()) {
                        prop_assert_eq!(*b2, (b1.0.wrapping_sub(delta), b1.1.wrapping_sub(delta)));
                    }
                    prop_assert_eq!(&out[20 + opts.len().div_ceil(4) * 4..], &payload[..]);
                }
            }
            let (back, _) = xlate_checked(&out, dir, d.inverse());
            prop_assert_eq!(back, seg);
        }

        #[test]
        fn never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..80), delta in any::<u32>(), reply in any::<bool>()) {
            let dir = if reply { Direction::Reply } else { Direction::Original };
            let orig = bytes.clone();
            match translate(&mut bytes, dir, SeqDelta(delta)) {
                Ok(_) => prop_assert_eq!(bytes.len(), orig.len()),
                Err(_) => prop_assert_eq!(bytes, orig),
            }
        }
    }
}
