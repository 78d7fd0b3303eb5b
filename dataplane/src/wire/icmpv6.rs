//! ICMPv6 (RFC 4443) and the Neighbor Discovery messages (RFC 4861) the
//! node reads and writes: echo, the four error types, neighbour
//! solicitation and advertisement; the addresses ND derives (solicited-node
//! multicast, its Ethernet group, the EUI-64 link-local address).
//!
//! Invariants: every parser checks lengths before reading and walks at most
//! `MAX_ND_OPTIONS` options, refusing an option of length 0 (RFC 4861
//! §4.6), so hostile bytes cost bounded work and never panic; every
//! `emit_*` writes only into the slice it is given and returns `None` when
//! it does not fit; checksums always cover the IPv6 pseudo-header (RFC 8200
//! §8.1).

use super::checksum;
use std::net::Ipv6Addr;

/// ICMPv6 message types (IANA "ICMPv6 Parameters").
pub mod msg_type {
    pub const DEST_UNREACHABLE: u8 = 1;
    pub const PACKET_TOO_BIG: u8 = 2;
    pub const TIME_EXCEEDED: u8 = 3;
    pub const PARAM_PROBLEM: u8 = 4;
    pub const ECHO_REQUEST: u8 = 128;
    pub const ECHO_REPLY: u8 = 129;
    pub const ROUTER_SOLICIT: u8 = 133;
    pub const ROUTER_ADVERT: u8 = 134;
    pub const NEIGHBOR_SOLICIT: u8 = 135;
    pub const NEIGHBOR_ADVERT: u8 = 136;
    pub const REDIRECT: u8 = 137;
}

/// Destination-unreachable codes (RFC 4443 §3.1).
pub mod unreach_code {
    pub const NO_ROUTE: u8 = 0;
    pub const ADMIN_PROHIBITED: u8 = 1;
    pub const ADDRESS: u8 = 3;
    pub const PORT: u8 = 4;
}

/// ICMPv6 header: type, code, checksum, 4 bytes of message body.
pub const HEADER_LEN: usize = 8;
/// The IPv6 minimum link MTU (RFC 8200 §5): an error never exceeds it.
pub const MIN_MTU: usize = 1280;
/// Bytes of a neighbour solicitation or advertisement before its options.
pub const ND_LEN: usize = 24;
/// Options read from one ND message at most.
pub const MAX_ND_OPTIONS: usize = 8;
/// ND option types (RFC 4861 §4.6).
const OPT_SOURCE_LLADDR: u8 = 1;
const OPT_TARGET_LLADDR: u8 = 2;
/// NA flags (RFC 4861 §4.4).
pub const NA_ROUTER: u8 = 0x80;
pub const NA_SOLICITED: u8 = 0x40;
pub const NA_OVERRIDE: u8 = 0x20;

/// The all-nodes link-local multicast address.
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

/// The ICMPv6 checksum of `body` (type on) from `src` to `dst`, with the
/// checksum field taken as zero.
pub fn checksum(src: Ipv6Addr, dst: Ipv6Addr, body: &[u8]) -> u16 {
    let mut acc = pseudo_header(src, dst, body.len(), crate::types::ip_proto::ICMPV6);
    acc = checksum::sum(acc, body.get(..2).unwrap_or(&[]));
    acc = checksum::sum(acc, body.get(4..).unwrap_or(&[]));
    !checksum::fold(acc)
}

/// Does `body` carry a correct ICMPv6 checksum?
pub fn verify(src: Ipv6Addr, dst: Ipv6Addr, body: &[u8]) -> bool {
    let acc = pseudo_header(src, dst, body.len(), crate::types::ip_proto::ICMPV6);
    checksum::verify(acc, body)
}

/// The unfolded sum of the IPv6 pseudo-header (RFC 8200 §8.1).
pub fn pseudo_header(src: Ipv6Addr, dst: Ipv6Addr, len: usize, next_header: u8) -> u32 {
    let mut acc = checksum::sum(0, &src.octets());
    acc = checksum::sum(acc, &dst.octets());
    let l = len as u32;
    acc = checksum::sum(acc, &l.to_be_bytes());
    checksum::sum(acc, &[0, 0, 0, next_header])
}

/// Write the checksum of `body` (type on) into its bytes 2-3.
pub fn fill_checksum(src: Ipv6Addr, dst: Ipv6Addr, body: &mut [u8]) {
    let c = checksum(src, dst, body);
    if let Some(f) = body.get_mut(2..4) {
        f.copy_from_slice(&c.to_be_bytes());
    }
}

/// The solicited-node multicast address of `a` (RFC 4291 §2.7.1).
pub fn solicited_node(a: Ipv6Addr) -> Ipv6Addr {
    let o = a.octets();
    Ipv6Addr::from([0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, o[13], o[14], o[15]])
}

/// The Ethernet group of IPv6 multicast address `a` (RFC 2464 §7).
pub fn multicast_mac(a: Ipv6Addr) -> [u8; 6] {
    let o = a.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// Is `mac` an IPv6 multicast group (33:33:xx:xx:xx:xx)?
pub fn is_multicast_mac(mac: [u8; 6]) -> bool {
    mac[0] == 0x33 && mac[1] == 0x33
}

/// The link-local address of an interface with MAC `mac`: fe80::/64 and
/// the modified EUI-64 interface identifier (RFC 4291 appendix A).
pub fn link_local(mac: [u8; 6]) -> Ipv6Addr {
    Ipv6Addr::from([
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5],
    ])
}

/// A neighbour solicitation or advertisement (RFC 4861 §4.3, §4.4).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Nd {
    pub msg_type: u8,
    /// The NA's R/S/O flags (0 for an NS).
    pub flags: u8,
    pub target: Ipv6Addr,
    /// The source (NS) or target (NA) link-layer address option.
    pub lladdr: Option<[u8; 6]>,
}

/// Why an ND message is refused (RFC 4861 §7.1: silently discarded,
/// counted by the caller).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NdError {
    /// Shorter than the fixed part, or an option runs past the end.
    Truncated,
    /// Code not 0, an option of length 0, more than `MAX_ND_OPTIONS`
    /// options, a multicast target, or not an NS/NA at all.
    Invalid,
}

/// Parse a neighbour solicitation or advertisement (`body`: the ICMPv6
/// message from its type on; checksum and hop limit are the caller's).
pub fn parse_nd(body: &[u8]) -> Result<Nd, NdError> {
    let fixed = body.get(..ND_LEN).ok_or(NdError::Truncated)?;
    let msg_type = fixed[0];
    if !matches!(msg_type, msg_type::NEIGHBOR_SOLICIT | msg_type::NEIGHBOR_ADVERT) || fixed[1] != 0 {
        return Err(NdError::Invalid);
    }
    let mut t = [0u8; 16];
    t.copy_from_slice(&fixed[8..24]);
    let target = Ipv6Addr::from(t);
    if target.is_multicast() {
        return Err(NdError::Invalid);
    }
    let flags = if msg_type == msg_type::NEIGHBOR_ADVERT { fixed[4] & (NA_ROUTER | NA_SOLICITED | NA_OVERRIDE) } else { 0 };
    let want = if msg_type == msg_type::NEIGHBOR_SOLICIT { OPT_SOURCE_LLADDR } else { OPT_TARGET_LLADDR };
    let mut lladdr = None;
    let mut off = ND_LEN;
    let mut n = 0;
    while off < body.len() {
        n += 1;
        if n > MAX_ND_OPTIONS {
            return Err(NdError::Invalid);
        }
        let (kind, len) = match body.get(off..off + 2) {
            Some(h) => (h[0], usize::from(h[1]) * 8),
            None => return Err(NdError::Truncated),
        };
        if len == 0 {
            return Err(NdError::Invalid);
        }
        let opt = body.get(off..off + len).ok_or(NdError::Truncated)?;
        if kind == want && len == 8 {
            let mut m = [0u8; 6];
            m.copy_from_slice(&opt[2..8]);
            lladdr = Some(m);
        }
        off += len;
    }
    Ok(Nd { msg_type, flags, target, lladdr })
}

/// Write a neighbour solicitation for `target` with our link-layer address
/// `mac` into `out` (ICMPv6 from its type on; checksummed for `src` →
/// `dst`). Returns its length.
pub fn emit_ns(out: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, mac: [u8; 6]) -> Option<usize> {
    emit_nd(out, src, dst, msg_type::NEIGHBOR_SOLICIT, 0, target, OPT_SOURCE_LLADDR, mac)
}

/// Write a neighbour advertisement for `target` (ours, at `mac`) with
/// `flags` into `out`; checksummed for `src` → `dst`. Returns its length.
pub fn emit_na(out: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr, target: Ipv6Addr, mac: [u8; 6], flags: u8) -> Option<usize> {
    emit_nd(out, src, dst, msg_type::NEIGHBOR_ADVERT, flags, target, OPT_TARGET_LLADDR, mac)
}

#[allow(clippy::too_many_arguments)]
fn emit_nd(
    out: &mut [u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    msg_type: u8,
    flags: u8,
    target: Ipv6Addr,
    opt: u8,
    mac: [u8; 6],
) -> Option<usize> {
    let len = ND_LEN + 8;
    let b = out.get_mut(..len)?;
    b.fill(0);
    b[0] = msg_type;
    b[4] = flags;
    b[8..24].copy_from_slice(&target.octets());
    b[24] = opt;
    b[25] = 1;
    b[26..32].copy_from_slice(&mac);
    fill_checksum(src, dst, b);
    Some(len)
}

/// Write an ICMPv6 error (`msg_type`, `code`, the 4-byte `param`: the MTU
/// of a packet too big, the pointer of a parameter problem, else 0)
/// quoting as much of `quoted` (the offending packet from its IPv6 header
/// on) as keeps the error's IPv6 packet within `MIN_MTU` (RFC 4443 §2.4
/// (c)); checksummed for `src` → `dst`. Returns its length.
pub fn emit_error(
    out: &mut [u8],
    src: Ipv6Addr,
    dst: Ipv6Addr,
    msg_type: u8,
    code: u8,
    param: u32,
    quoted: &[u8],
) -> Option<usize> {
    let room = MIN_MTU - super::ipv6::HEADER_LEN - HEADER_LEN;
    let q = quoted.get(..quoted.len().min(room))?;
    let len = HEADER_LEN + q.len();
    let b = out.get_mut(..len)?;
    b[0] = msg_type;
    b[1] = code;
    b[2..4].fill(0);
    b[4..8].copy_from_slice(&param.to_be_bytes());
    b[HEADER_LEN..].copy_from_slice(q);
    fill_checksum(src, dst, b);
    Some(len)
}

/// The type of the ICMPv6 message `body` (type on) and bytes 4-5 (an
/// echo's identifier).
pub fn type_and_ident(body: &[u8]) -> Option<(u8, u16)> {
    let h = body.get(..HEADER_LEN)?;
    Some((h[0], u16::from_be_bytes([h[4], h[5]])))
}

/// The five-tuple of the packet the ICMPv6 error `body` (type on) quotes,
/// in the direction it was sent (ports as conntrack keys them: an echo
/// request `(id, 0)`, a reply `(0, id)`); the quote may be cut after the
/// ports. `None` when too short for them.
pub fn quoted_tuple(body: &[u8]) -> Option<crate::types::FiveTuple> {
    use crate::types::ip_proto;
    use std::net::IpAddr;
    let q = body.get(HEADER_LEN..)?;
    let h = q.get(..super::ipv6::HEADER_LEN)?;
    let addr = |b: &[u8]| {
        let mut o = [0u8; 16];
        o.copy_from_slice(b);
        IpAddr::V6(Ipv6Addr::from(o))
    };
    let (src, dst, proto) = (addr(&h[8..24]), addr(&h[24..40]), h[6]);
    let l4 = q.get(super::ipv6::HEADER_LEN..).unwrap_or(&[]);
    let (src_port, dst_port) = match proto {
        ip_proto::TCP | ip_proto::UDP => {
            let p = l4.get(..4)?;
            (u16::from_be_bytes([p[0], p[1]]), u16::from_be_bytes([p[2], p[3]]))
        }
        ip_proto::ICMPV6 => {
            let id = l4.get(4..6).map(|b| u16::from_be_bytes([b[0], b[1]]))?;
            match l4.first() {
                Some(&msg_type::ECHO_REQUEST) => (id, 0),
                Some(&msg_type::ECHO_REPLY) => (0, id),
                _ => (0, 0),
            }
        }
        _ => (0, 0),
    };
    Some(crate::types::FiveTuple { src, dst, proto, src_port, dst_port })
}

/// The quoted packet's TCP header of an ICMPv6 error `body` (from the
/// ICMPv6 header on): present when the quoted IPv6 header's next header is
/// TCP (no extension headers quoted), from the TCP header to the end of
/// the quote.
pub fn quoted_tcp_mut(body: &mut [u8]) -> Option<&mut [u8]> {
    let at = HEADER_LEN + super::ipv6::HEADER_LEN;
    if *body.get(HEADER_LEN + 6)? != crate::types::ip_proto::TCP {
        return None;
    }
    body.get_mut(at..)
}

/// Is `msg_type` an error message (RFC 4443 §2.1: types 0-127)?
pub fn is_error(msg_type: u8) -> bool {
    msg_type < 128
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x01, 0x01];

    fn a(s: &str) -> Ipv6Addr {
        s.parse().unwrap()
    }

    #[test]
    fn derived_addresses() {
        assert_eq!(link_local(MAC), a("fe80::ff:fe00:101"));
        assert_eq!(link_local([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]), a("fe80::5054:ff:fe12:3456"));
        assert_eq!(solicited_node(a("2001:db8:1::1")), a("ff02::1:ff00:1"));
        assert_eq!(solicited_node(a("fe80::ff:fe00:101")), a("ff02::1:ff00:101"));
        assert_eq!(multicast_mac(a("ff02::1:ff00:101")), [0x33, 0x33, 0xff, 0x00, 0x01, 0x01]);
        assert!(is_multicast_mac(multicast_mac(ALL_NODES)));
        assert!(!is_multicast_mac(MAC));
    }

    /// A neighbour solicitation as Linux sends it (fe80::1 asking for
    /// 2001:db8:1::1), checked byte by byte and by its checksum.
    #[test]
    fn ns_golden() {
        let (src, dst, target) = (a("fe80::1"), solicited_node(a("2001:db8:1::1")), a("2001:db8:1::1"));
        let mut b = [0u8; 64];
        let n = emit_ns(&mut b, src, dst, target, [0x02, 0, 0, 0, 0, 0x10]).unwrap();
        assert_eq!(n, 32);
        assert_eq!(b[0..2], [135, 0]);
        assert_eq!(b[8..24], target.octets());
        assert_eq!(b[24..32], [1, 1, 0x02, 0, 0, 0, 0, 0x10]);
        assert!(verify(src, dst, &b[..n]));
        let nd = parse_nd(&b[..n]).unwrap();
        assert_eq!(nd, Nd { msg_type: 135, flags: 0, target, lladdr: Some([0x02, 0, 0, 0, 0, 0x10]) });
        // Any single bit flipped breaks the checksum.
        for i in 0..n * 8 {
            let mut c = b;
            c[i / 8] ^= 1 << (i % 8);
            assert!(!verify(src, dst, &c[..n]), "bit {i}");
        }
    }

    #[test]
    fn na_round_trip_and_refusals() {
        let mut b = [0u8; 64];
        let n = emit_na(&mut b, a("2001:db8:1::1"), a("fe80::1"), a("2001:db8:1::1"), MAC, NA_SOLICITED | NA_OVERRIDE).unwrap();
        let nd = parse_nd(&b[..n]).unwrap();
        assert_eq!((nd.msg_type, nd.flags, nd.lladdr), (136, NA_SOLICITED | NA_OVERRIDE, Some(MAC)));
        // No option: fine, no address.
        assert_eq!(parse_nd(&b[..ND_LEN]).unwrap().lladdr, None);
        // Code not 0; an option of length 0; a cut option; a multicast target.
        let mut c = b;
        c[1] = 1;
        assert_eq!(parse_nd(&c[..n]), Err(NdError::Invalid));
        let mut c = b;
        c[25] = 0;
        assert_eq!(parse_nd(&c[..n]), Err(NdError::Invalid));
        assert_eq!(parse_nd(&b[..n - 1]), Err(NdError::Truncated));
        assert_eq!(parse_nd(&b[..ND_LEN - 1]), Err(NdError::Truncated));
        let mut c = b;
        c[8] = 0xff;
        assert_eq!(parse_nd(&c[..n]), Err(NdError::Invalid));
        // Too many options.
        let mut long = vec![0u8; ND_LEN];
        long[0] = 135;
        for _ in 0..=MAX_ND_OPTIONS {
            long.extend_from_slice(&[14, 1, 0, 0, 0, 0, 0, 0]);
        }
        assert_eq!(parse_nd(&long), Err(NdError::Invalid));
    }

    #[test]
    fn an_error_quotes_at_most_what_fits_1280_bytes() {
        let quoted = vec![0x60u8; 1500];
        let mut out = vec![0u8; 1500];
        let (s, d) = (a("2001:db8:1::1"), a("2001:db8:2::10"));
        let n = emit_error(&mut out, s, d, msg_type::PACKET_TOO_BIG, 0, 1400, &quoted).unwrap();
        assert_eq!(n, MIN_MTU - 40);
        assert_eq!(out[..8], [2, 0, out[2], out[3], 0, 0, 0x05, 0x78]);
        assert!(verify(s, d, &out[..n]));
        let n = emit_error(&mut out, s, d, msg_type::TIME_EXCEEDED, 0, 0, &quoted[..100]).unwrap();
        assert_eq!(n, 108);
        assert!(emit_error(&mut out[..50], s, d, msg_type::TIME_EXCEEDED, 0, 0, &quoted[..100]).is_none());
    }

    proptest! {
        /// Any bytes: no panic, and what parses has a unicast target.
        #[test]
        fn nd_parser_never_panics(b in prop::collection::vec(any::<u8>(), 0..128)) {
            if let Ok(nd) = parse_nd(&b) {
                prop_assert!(!nd.target.is_multicast());
            }
            let _ = verify(Ipv6Addr::UNSPECIFIED, ALL_NODES, &b);
        }
    }
}
