//! The TCP segments a SYN proxy originates (SYN-ACK with the cookie to the
//! client, SYN to the server, ACKs and RSTs), written by rewriting a
//! received IPv4 + TCP datagram in place: no buffer is allocated, the
//! mbuf that carried the client's segment carries the answer. The cookie
//! itself is `conntrack::synproxy`; this module only writes bytes.
//!
//! What `write_segment` produces, from an IPv4 header of `ihl` bytes:
//!
//! | part | value |
//! |---|---|
//! | IPv4 options | kept as received (IHL unchanged) |
//! | addresses, ports | swapped if `reverse`, else unchanged |
//! | TTL | 64 (`ipv4::DEFAULT_TTL`) if `reverse` (the node originates it), else unchanged |
//! | total length | `segment_len(ihl, mss)` = the buffer's length |
//! | flags / fragment offset | DF kept, MF and offset cleared |
//! | DSCP / ECN | DSCP kept, ECN cleared (RFC 3168 §6.1.1: SYNs, SYN-ACKs and pure ACKs are not ECN-capable) |
//! | identification | kept |
//! | TCP | seq, ack, flags, window from the `Segment`; data offset 5 (6 with MSS); urgent 0; no payload |
//! | TCP options | only MSS (kind 2, length 4, RFC 9293 §3.2) when asked |
//! | checksums | IPv4 header and TCP (with the pseudo-header) recomputed in full |
//!
//! Invariants (`tests`):
//! - on `Ok`, the datagram parses with the wire views, both checksums
//!   verify, and it equals byte for byte what `build::PacketBuilder`
//!   builds for the same fields;
//! - on `Err`, not one byte has changed: everything is checked before the
//!   first write;
//! - total: any byte string and any `Segment` give `Ok` or `Err`, never a
//!   panic.
//!
//! The input is a whole datagram whose TCP header starts right after the
//! IPv4 header (not a non-first fragment: the pipeline has parsed it as a
//! TCP segment before it asks for a rewrite); the caller has already
//! resized it to `segment_len`, which is never longer than what arrived
//! for the segments a proxy answers (a SYN carries at least as many
//! option bytes as the MSS option, and the ACK/data segments it turns into
//! a SYN are at least 20 bytes of TCP header).

use super::ipv4::{self, Ipv4Packet, DEFAULT_TTL, FLAG_DF};
use super::tcp::{option_kind, OptionIter, TcpOption, TcpPacket, MIN_HEADER_LEN as TCP_HEADER_LEN};
use crate::types::ip_proto;

/// Bytes of the MSS option (kind, length, 16-bit value; RFC 9293 §3.2).
pub const MSS_OPTION_LEN: usize = 4;
/// The ECN field of the DSCP/ECN byte (RFC 3168 §5).
const ECN_MASK: u8 = 0b11;

/// What to write.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub seq: u32,
    pub ack: u32,
    /// TCP flag bits (`tcp::flags`).
    pub flags: u8,
    pub window: u16,
    /// The MSS option to carry, if any.
    pub mss: Option<u16>,
}

/// Why a datagram was not rewritten (it is unchanged).
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("fewer bytes than the IPv4 header")]
    Truncated,
    #[error("not an IPv4 header (version is not 4)")]
    NotIpv4,
    #[error("the IPv4 datagram does not carry TCP")]
    NotTcp,
    #[error("IPv4 IHL below 5")]
    BadHeaderLen,
    #[error("the buffer is not segment_len(ihl, mss) bytes long")]
    LengthMismatch,
}

impl From<ipv4::Error> for Error {
    fn from(e: ipv4::Error) -> Self {
        match e {
            ipv4::Error::Truncated => Error::Truncated,
            ipv4::Error::BadVersion => Error::NotIpv4,
            ipv4::Error::BadHeaderLen => Error::BadHeaderLen,
            ipv4::Error::BadTotalLen => Error::LengthMismatch,
        }
    }
}

/// Bytes the rewritten IPv4 datagram occupies: the existing IPv4 header
/// (its IHL, options kept) + 20-byte TCP header + 4 if `mss`.
#[inline]
pub fn segment_len(ip_header_len: usize, mss: bool) -> usize {
    let tcp = TCP_HEADER_LEN + if mss { MSS_OPTION_LEN } else { 0 };
    ip_header_len.saturating_add(tcp)
}

/// Rewrite the IPv4 datagram `l3` (a valid IPv4 header carrying TCP,
/// already resized so that `l3.len() == segment_len(ihl,
/// seg.mss.is_some())`) into `seg`; see the module table for every field.
/// `reverse`: a reply the node originates (addresses and ports swapped,
/// TTL 64). On `Err` nothing is modified.
pub fn write_segment(l3: &mut [u8], reverse: bool, seg: &Segment) -> Result<(), Error> {
    // Every check first: nothing is written until all have passed.
    let ip = Ipv4Packet::new_checked_header(&*l3)?;
    if ip.protocol() != ip_proto::TCP {
        return Err(Error::NotTcp);
    }
    let ihl = ip.header_len();
    let (src, dst, dont_frag, dscp) = (ip.src(), ip.dst(), ip.dont_frag(), ip.dscp_ecn() & !ECN_MASK);
    if l3.len() != segment_len(ihl, seg.mss.is_some()) {
        return Err(Error::LengthMismatch);
    }
    let total = u16::try_from(l3.len()).map_err(|_| Error::LengthMismatch)?;
    let (ip_bytes, tcp_bytes) = l3.split_at_mut_checked(ihl).ok_or(Error::Truncated)?;
    let (src, dst) = if reverse { (dst, src) } else { (src, dst) };

    let mut ip = Ipv4Packet::new_unchecked(ip_bytes);
    if reverse {
        ip.set_src(src);
        ip.set_dst(dst);
        ip.set_ttl(DEFAULT_TTL);
    }
    ip.set_dscp_ecn(dscp);
    ip.set_total_len(total);
    ip.set_flags_frag(if dont_frag { FLAG_DF } else { 0 }, 0);
    ip.fill_checksum();

    // `tcp_bytes` is 20 or 24 bytes (the length check above): the setters
    // stay inside it.
    let mut tcp = TcpPacket::new_unchecked(tcp_bytes);
    if reverse {
        let (sport, dport) = (tcp.src_port(), tcp.dst_port());
        tcp.set_src_port(dport);
        tcp.set_dst_port(sport);
    }
    tcp.set_seq(seg.seq);
    tcp.set_ack(seg.ack);
    tcp.set_header_len(segment_len(0, seg.mss.is_some()));
    tcp.set_flags(seg.flags);
    tcp.set_window(seg.window);
    tcp.set_urgent(0);
    if let Some(mss) = seg.mss {
        let [hi, lo] = mss.to_be_bytes();
        let opt = [option_kind::MSS, MSS_OPTION_LEN as u8, hi, lo];
        for (d, s) in tcp.options_mut().iter_mut().zip(opt) {
            *d = s;
        }
    }
    tcp.fill_checksum(src, dst);
    Ok(())
}

/// The MSS option of a SYN's option bytes, if any: the first well-formed
/// MSS option (kind 2, length 4) before the End option or a malformed
/// option, which ends the walk (what was parsed before it stands, as in
/// `TcpOptions::parse`).
pub fn syn_mss(tcp_options: &[u8]) -> Option<u16> {
    OptionIter::new(tcp_options).map_while(Result::ok).find_map(|o| match o {
        TcpOption::Mss(m) => Some(m),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::build::{ipv4_offset, PacketBuilder};
    use crate::wire::ipv4::tests::TCP_SYN;
    use crate::wire::tcp::flags;
    use proptest::prelude::*;
    use std::net::Ipv4Addr;

    const CLIENT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 7);
    const SERVER: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 80);
    const CPORT: u16 = 50_000;
    const SPORT: u16 = 443;
    const ISN: u32 = 0x1234_5678;
    const COOKIE: u32 = 0xc0ff_ee00;
    /// MSS 1460, SACK-permitted, timestamps, NOP, window scale 7 (Linux).
    const SYN_OPTS: [u8; 20] = [2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0x1a, 0x2b, 0x3c, 0, 0, 0, 0, 1, 3, 3, 7];

    fn builder(src: Ipv4Addr, dst: Ipv4Addr, ttl: u8) -> PacketBuilder {
        PacketBuilder::new([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], src, dst).ttl(ttl)
    }

    /// The IPv4 datagram of a built frame.
    fn l3(frame: Vec<u8>) -> Vec<u8> {
        let off = ipv4_offset(&frame).expect("builder frames are IPv4");
        frame[off..].to_vec()
    }

    /// The client's SYN as received (TTL 57 after a few hops).
    fn client_syn() -> Vec<u8> {
        l3(builder(CLIENT, SERVER, 57).tcp(CPORT, SPORT, ISN, 0, flags::SYN, 64240, &SYN_OPTS, &[]))
    }

    /// Checks both checksums and the lengths, returns the views.
    fn parse(b: &[u8]) -> (Ipv4Packet<&[u8]>, TcpPacket<&[u8]>) {
        let ip = Ipv4Packet::new_checked(b).expect("valid IPv4");
        assert!(ip.verify_checksum(), "IPv4 checksum");
        assert_eq!(usize::from(ip.total_len()), b.len(), "total length");
        let tcp = TcpPacket::new_checked(b.get(ip.header_len()..).expect("header present")).expect("valid TCP");
        assert!(tcp.verify_checksum(ip.src(), ip.dst()), "TCP checksum");
        (ip, tcp)
    }

    #[test]
    fn syn_to_syn_ack_with_mss() {
        let mut b = client_syn();
        assert_eq!(b.len(), 60);
        let (ident, ttl) = {
            let ip = Ipv4Packet::new_checked(&b[..]).unwrap();
            (ip.ident(), ip.ttl())
        };
        assert_eq!(ttl, 57);
        b.truncate(segment_len(20, true));
        let seg = Segment { seq: COOKIE, ack: ISN.wrapping_add(1), flags: flags::SYN | flags::ACK, window: 65535, mss: Some(1460) };
        write_segment(&mut b, true, &seg).unwrap();
        let (ip, tcp) = parse(&b);
        assert_eq!((ip.version(), ip.header_len(), ip.total_len()), (4, 20, 44));
        assert_eq!((ip.src(), ip.dst()), (SERVER, CLIENT));
        assert_eq!((ip.ttl(), ip.protocol(), ip.ident()), (DEFAULT_TTL, ip_proto::TCP, ident));
        assert!(ip.dont_frag() && !ip.is_fragment());
        assert_eq!((tcp.src_port(), tcp.dst_port()), (SPORT, CPORT));
        assert_eq!((tcp.seq(), tcp.ack()), (COOKIE, ISN.wrapping_add(1)));
        assert_eq!((tcp.header_len(), tcp.flags(), tcp.window(), tcp.urgent()), (24, 0x12, 65535, 0));
        assert_eq!(tcp.options(), &[2, 4, 0x05, 0xb4]);
        assert_eq!(syn_mss(tcp.options()), Some(1460));
        assert!(tcp.payload().is_empty());
        // Byte for byte what the builder makes of the same fields.
        let want = l3(builder(SERVER, CLIENT, 64).tcp(SPORT, CPORT, COOKIE, ISN.wrapping_add(1), 0x12, 65535, &[2, 4, 5, 0xb4], &[]));
        assert_eq!(b, want);
    }

    /// The client's first ACK (with data) becomes the proxy's SYN to the
    /// server: same direction, same addresses and TTL, payload cut off.
    #[test]
    fn ack_with_payload_to_forward_syn() {
        let payload = [0xab; 100];
        let mut b = l3(builder(CLIENT, SERVER, 57).tcp(CPORT, SPORT, ISN.wrapping_add(1), COOKIE.wrapping_add(1), flags::ACK | flags::PSH, 502, &[], &payload));
        assert_eq!(b.len(), 140);
        b.truncate(segment_len(20, true));
        let seg = Segment { seq: ISN, ack: 0, flags: flags::SYN, window: 64240, mss: Some(1220) };
        write_segment(&mut b, false, &seg).unwrap();
        let (ip, tcp) = parse(&b);
        assert_eq!((ip.src(), ip.dst(), ip.ttl(), ip.total_len()), (CLIENT, SERVER, 57, 44));
        assert_eq!((tcp.src_port(), tcp.dst_port(), tcp.seq(), tcp.ack()), (CPORT, SPORT, ISN, 0));
        assert_eq!((tcp.header_len(), tcp.flags(), tcp.window()), (24, flags::SYN, 64240));
        assert_eq!(syn_mss(tcp.options()), Some(1220));
        assert!(tcp.payload().is_empty());
        let want = l3(builder(CLIENT, SERVER, 57).tcp(CPORT, SPORT, ISN, 0, flags::SYN, 64240, &[2, 4, 0x04, 0xc4], &[]));
        assert_eq!(b, want);
    }

    /// The server's SYN-ACK answered by the proxy's ACK: no options.
    #[test]
    fn without_mss() {
        let server_isn = 0x0bad_f00d;
        let mut b = l3(builder(SERVER, CLIENT, 61).tcp(SPORT, CPORT, server_isn, ISN.wrapping_add(1), 0x12, 29200, &SYN_OPTS, &[]));
        b.truncate(segment_len(20, false));
        let seg = Segment { seq: ISN.wrapping_add(1), ack: server_isn.wrapping_add(1), flags: flags::ACK, window: 502, mss: None };
        write_segment(&mut b, true, &seg).unwrap();
        let (ip, tcp) = parse(&b);
        assert_eq!((ip.src(), ip.dst(), ip.ttl(), ip.total_len()), (CLIENT, SERVER, 64, 40));
        assert_eq!((tcp.src_port(), tcp.dst_port()), (CPORT, SPORT));
        assert_eq!((tcp.header_len(), tcp.flags(), tcp.window(), tcp.urgent()), (20, flags::ACK, 502, 0));
        assert!(tcp.options().is_empty() && tcp.payload().is_empty());
        let want = l3(builder(CLIENT, SERVER, 64).tcp(CPORT, SPORT, ISN.wrapping_add(1), server_isn.wrapping_add(1), flags::ACK, 502, &[], &[]));
        assert_eq!(b, want);
    }

    /// Inserts IPv4 options after the 20-byte header (IHL grows).
    fn with_ip_options(mut b: Vec<u8>, opts: &[u8]) -> Vec<u8> {
        let tail = b.split_off(20);
        b.extend_from_slice(opts);
        b.extend_from_slice(&tail);
        let len = b.len() as u16;
        let mut ip = Ipv4Packet::new_unchecked(&mut b[..]);
        ip.set_version_ihl(20 + opts.len());
        ip.set_total_len(len);
        ip.fill_checksum();
        b
    }

    #[test]
    fn ip_options_kept() {
        let router_alert = [0x94, 4, 0, 0];
        let mut b = with_ip_options(client_syn(), &router_alert);
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap().header_len(), 24);
        b.truncate(segment_len(24, true));
        let seg = Segment { seq: COOKIE, ack: ISN.wrapping_add(1), flags: 0x12, window: 8192, mss: Some(536) };
        write_segment(&mut b, true, &seg).unwrap();
        let (ip, tcp) = parse(&b);
        assert_eq!((ip.header_len(), ip.total_len()), (24, 48));
        assert_eq!(ip.options(), &router_alert);
        assert_eq!((ip.src(), ip.dst()), (SERVER, CLIENT));
        assert_eq!((tcp.src_port(), tcp.dst_port(), tcp.seq(), tcp.ack()), (SPORT, CPORT, COOKIE, ISN.wrapping_add(1)));
        assert_eq!(tcp.options(), &[2, 4, 0x02, 0x18]);
    }

    /// MF and the offset are cleared, DF is kept as it was (here: clear),
    /// ECN is cleared and DSCP kept.
    #[test]
    fn fragment_bits_and_ecn() {
        let mut b = client_syn();
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut b[..]);
            ip.set_flags_frag(ipv4::FLAG_MF, 0);
            ip.set_dscp_ecn(0xb8 | 0b10);
            ip.fill_checksum();
        }
        b.truncate(segment_len(20, true));
        let seg = Segment { seq: 1, ack: 2, flags: 0x12, window: 1, mss: Some(1460) };
        write_segment(&mut b, true, &seg).unwrap();
        let (ip, _) = parse(&b);
        assert!(!ip.more_frags() && !ip.dont_frag() && ip.frag_offset() == 0);
        assert_eq!(ip.dscp_ecn(), 0xb8);
    }

    #[test]
    fn errors_leave_bytes_unchanged() {
        let seg = Segment { seq: COOKIE, ack: 1, flags: 0x12, window: 1, mss: Some(1460) };
        let mut full = client_syn();
        full.truncate(segment_len(20, true));
        let try_it = |b: &[u8], reverse: bool, seg: &Segment| {
            let mut c = b.to_vec();
            let r = write_segment(&mut c, reverse, seg);
            assert_eq!(c, b, "bytes changed on {r:?}");
            r
        };
        // Every truncation.
        for n in 0..full.len() {
            for reverse in [false, true] {
                let want = if n < 20 { Error::Truncated } else { Error::LengthMismatch };
                assert_eq!(try_it(&full[..n], reverse, &seg), Err(want), "{n} bytes");
            }
        }
        // One byte too many; sized for no MSS but asked for one, and back.
        let mut long = full.clone();
        long.push(0);
        assert_eq!(try_it(&long, true, &seg), Err(Error::LengthMismatch));
        assert_eq!(try_it(&full[..40], true, &seg), Err(Error::LengthMismatch));
        assert_eq!(try_it(&full, true, &Segment { mss: None, ..seg }), Err(Error::LengthMismatch));
        // Not IPv4, not TCP, IHL below 5, IHL past the buffer.
        let mut b = full.clone();
        b[0] = 0x65;
        assert_eq!(try_it(&b, true, &seg), Err(Error::NotIpv4));
        let mut b = full.clone();
        b[9] = ip_proto::UDP;
        assert_eq!(try_it(&b, true, &seg), Err(Error::NotTcp));
        let mut b = full.clone();
        b[0] = 0x44;
        assert_eq!(try_it(&b, true, &seg), Err(Error::BadHeaderLen));
        let mut b = full.clone();
        b[0] = 0x4f;
        assert_eq!(try_it(&b, true, &seg), Err(Error::Truncated));
        // And the untouched buffer is accepted.
        let mut b = full.clone();
        assert_eq!(write_segment(&mut b, true, &seg), Ok(()));
    }

    #[test]
    fn segment_len_table() {
        assert_eq!(segment_len(20, false), 40);
        assert_eq!(segment_len(20, true), 44);
        assert_eq!(segment_len(24, true), 48);
        assert_eq!(segment_len(60, true), 84);
        assert_eq!(segment_len(usize::MAX, true), usize::MAX);
    }

    /// (description, option bytes, MSS found).
    #[test]
    fn syn_mss_golden() {
        let table: &[(&str, &[u8], Option<u16>)] = &[
            ("no options", &[], None),
            ("MSS only", &[2, 4, 5, 0xb4], Some(1460)),
            ("Linux SYN (fixture)", &TCP_SYN[40..60], Some(1460)),
            ("after NOPs and a wscale", &[1, 3, 3, 7, 1, 1, 2, 4, 0x05, 0x8c], Some(1420)),
            ("after SACK-permitted and timestamps", &SYN_OPTS[4..], None),
            ("wscale only", &[1, 3, 3, 7], None),
            ("MSS 0", &[2, 4, 0, 0], Some(0)),
            ("the first of two", &[2, 4, 0, 100, 2, 4, 5, 0xb4], Some(100)),
            ("malformed length 1", &[2, 1, 5, 0xb4], None),
            ("malformed length 0 before MSS", &[3, 0, 2, 4, 5, 0xb4], None),
            ("length past the end before MSS", &[8, 10, 2, 4, 5, 0xb4], None),
            ("malformed after MSS", &[2, 4, 5, 0xb4, 3, 0], Some(1460)),
            ("MSS of length 3 (not an MSS)", &[2, 3, 5, 1, 1, 1], None),
            ("MSS of length 6 (not an MSS)", &[2, 6, 5, 0xb4, 0, 0], None),
            ("truncated: kind only", &[2], None),
            ("truncated: kind and length", &[2, 4], None),
            ("truncated: one value byte", &[2, 4, 5], None),
            ("End before MSS", &[0, 2, 4, 5, 0xb4], None),
            ("NOPs only", &[1, 1, 1, 1], None),
        ];
        for &(what, opts, want) in table {
            assert_eq!(syn_mss(opts), want, "{what}");
        }
    }

    proptest! {
        /// Any bytes, any segment: no panic; `Err` leaves them as they
        /// were, `Ok` gives a datagram whose checksums verify.
        #[test]
        fn total(
            bytes in proptest::collection::vec(any::<u8>(), 0..100),
            reverse in any::<bool>(), seq in any::<u32>(), ack in any::<u32>(),
            fl in any::<u8>(), window in any::<u16>(), mss in any::<Option<u16>>(),
            ihl in 5u8..16, valid in any::<bool>(),
        ) {
            let mut b = bytes.clone();
            if valid && b.len() >= 20 {
                // Make the header plausible so the Ok path is exercised.
                b[0] = 0x40 | ihl;
                b[9] = ip_proto::TCP;
                b.resize(segment_len(usize::from(ihl) * 4, mss.is_some()), 0);
            }
            let before = b.clone();
            let seg = Segment { seq, ack, flags: fl, window, mss };
            match write_segment(&mut b, reverse, &seg) {
                Err(_) => prop_assert_eq!(b, before),
                Ok(()) => {
                    let (ip, tcp) = parse(&b);
                    prop_assert_eq!((tcp.seq(), tcp.ack(), tcp.flags(), tcp.window()), (seq, ack, fl, window));
                    prop_assert_eq!(syn_mss(tcp.options()), mss);
                    prop_assert_eq!(ip.options(), &before[20..ip.header_len()]);
                }
            }
        }

        #[test]
        fn syn_mss_never_panics(opts in proptest::collection::vec(any::<u8>(), 0..60)) {
            let _ = syn_mss(&opts);
        }
    }
}
