//! ICMPv4 messages (RFC 792, RFC 1122 §3.2.2).
//!
//! Invariant: `Icmpv4Packet::new_checked` guarantees the 8-byte header, so
//! type/code/checksum/echo fields are panic-free; the body of an error
//! message (embedded IP header + at least 8 bytes, RFC 792) is parsed on
//! request by `embedded`, which validates it like any untrusted input.

use super::checksum;
use super::ipv4::{self, Ipv4Packet};
use core::fmt;
use crate::types::ip_proto;
use std::net::Ipv4Addr;

pub const HEADER_LEN: usize = 8;

/// ICMP types (IANA "ICMP Type Numbers").
pub mod msg_type {
    pub const ECHO_REPLY: u8 = 0;
    pub const DEST_UNREACHABLE: u8 = 3;
    pub const REDIRECT: u8 = 5;
    pub const ECHO_REQUEST: u8 = 8;
    pub const TIME_EXCEEDED: u8 = 11;
    pub const PARAMETER_PROBLEM: u8 = 12;
}

mod field {
    use core::ops::Range;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: Range<usize> = 2..4;
    pub const ECHO_IDENT: Range<usize> = 4..6;
    pub const ECHO_SEQ: Range<usize> = 6..8;
    pub const BODY: usize = 8;
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Error {
    Truncated,
    /// Not an error message, or its embedded header is unusable.
    BadEmbedded,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "icmp message truncated",
            Error::BadEmbedded => "icmp error without a usable embedded header",
        })
    }
}

/// The datagram quoted in an ICMP error: its header fields and the first
/// 8 bytes of its payload (ports, or ICMP type/code/id).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Embedded {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    /// First 8 bytes of the original payload.
    pub l4: [u8; 8],
}

impl Embedded {
    /// The quoted datagram's ports as a `FiveTuple` holds them (SPEC R3):
    /// TCP and UDP ports; an ICMP echo request (identifier, 0), an echo
    /// reply (0, identifier); anything else (0, 0).
    pub fn ports(&self) -> (u16, u16) {
        let be16 = |at: usize| u16::from_be_bytes([self.l4[at], self.l4[at + 1]]);
        match self.protocol {
            ip_proto::TCP | ip_proto::UDP => (be16(0), be16(2)),
            ip_proto::ICMP => match self.l4[0] {
                msg_type::ECHO_REQUEST => (be16(4), 0),
                msg_type::ECHO_REPLY => (0, be16(4)),
                _ => (0, 0),
            },
            _ => (0, 0),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Icmpv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv4Packet<T> {
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        if buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Icmpv4Packet { buffer })
    }
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }
    #[inline]
    pub fn checksum(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[2], b[3]])
    }
    #[inline]
    pub fn echo_ident(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[4], b[5]])
    }
    #[inline]
    pub fn echo_seq(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[6], b[7]])
    }
    /// Bytes after the 8-byte header (echo data, or the quoted datagram).
    #[inline]
    pub fn body(&self) -> &[u8] {
        &self.buffer.as_ref()[field::BODY..]
    }
    /// Destination unreachable, time exceeded, parameter problem: the
    /// error types that quote a datagram of an existing flow.
    #[inline]
    pub fn is_error(&self) -> bool {
        matches!(
            self.msg_type(),
            msg_type::DEST_UNREACHABLE | msg_type::TIME_EXCEEDED | msg_type::PARAMETER_PROBLEM
        )
    }
    /// The whole message sums to 0xffff.
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(0, self.buffer.as_ref())
    }
    /// The quoted datagram of an error message: an IPv4 header (options
    /// skipped) and its first 8 payload bytes must be present.
    #[inline]
    pub fn embedded(&self) -> Result<Embedded, Error> {
        if !self.is_error() {
            return Err(Error::BadEmbedded);
        }
        let ip = Ipv4Packet::new_checked_header(self.body()).map_err(|_| Error::BadEmbedded)?;
        let rest = &self.body()[ip.header_len()..];
        let mut l4 = [0u8; 8];
        l4.copy_from_slice(rest.get(..8).ok_or(Error::BadEmbedded)?);
        Ok(Embedded {
            src: ip.src(),
            dst: ip.dst(),
            protocol: ip.protocol(),
            l4,
        })
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        Icmpv4Packet { buffer }
    }
    #[inline]
    pub fn set_msg_type(&mut self, v: u8) {
        self.buffer.as_mut()[field::TYPE] = v;
    }
    #[inline]
    pub fn set_code(&mut self, v: u8) {
        self.buffer.as_mut()[field::CODE] = v;
    }
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_echo_ident(&mut self, v: u16) {
        self.buffer.as_mut()[field::ECHO_IDENT].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_echo_seq(&mut self, v: u16) {
        self.buffer.as_mut()[field::ECHO_SEQ].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let c = checksum::checksum(self.buffer.as_ref());
        self.set_checksum(c);
    }
    #[inline]
    pub fn body_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::BODY..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv4Packet<T> {
    /// The quoted datagram's L4 bytes (after its IP header) of an error
    /// message, mutable, with its protocol; `None` if no IP header is
    /// quoted.
    pub fn embedded_l4_mut(&mut self) -> Option<(u8, &mut [u8])> {
        if !self.is_error() {
            return None;
        }
        let body = self.buffer.as_mut().get_mut(field::BODY..)?;
        let (hl, proto) = {
            let ip = Ipv4Packet::new_checked_header(&*body).ok()?;
            (ip.header_len(), ip.protocol())
        };
        Some((proto, body.get_mut(hl..)?))
    }
}

/// Codes of "destination unreachable" (RFC 792; RFC 1812 §5.2.7.1).
pub mod unreach_code {
    pub const NET: u8 = 0;
    pub const HOST: u8 = 1;
    pub const PROTOCOL: u8 = 2;
    pub const PORT: u8 = 3;
    /// Fragmentation needed and DF set (RFC 1191: the next-hop MTU goes in
    /// the header's second word).
    pub const FRAG_NEEDED: u8 = 4;
    /// Communication administratively prohibited (RFC 1812 §5.2.7.1).
    pub const ADMIN_PROHIBITED: u8 = 13;
}

/// Code of "time exceeded" for a TTL that ran out in transit (RFC 792).
pub const TTL_EXCEEDED_IN_TRANSIT: u8 = 0;

/// The largest ICMP error datagram a router sends: the IP header, the ICMP
/// header and as much of the offending datagram as fits (RFC 1812
/// §4.3.2.3).
pub const MAX_ERROR_DATAGRAM: usize = 576;

/// Whether an ICMP message of `msg_type` is a query or a reply (echo,
/// timestamp, information, address mask: RFC 792, RFC 950). Every other
/// type counts as an error for RFC 1122 §3.2.2: no error is ever sent
/// about it.
#[inline]
pub fn is_query(msg_type: u8) -> bool {
    matches!(msg_type, 0 | 8 | 13 | 14 | 15 | 16 | 17 | 18)
}

/// An ICMP error message this node originates (value form).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct IcmpErrorRepr {
    pub msg_type: u8,
    pub code: u8,
    /// The low half of the second header word: the next-hop MTU of a
    /// "fragmentation needed" (RFC 1191 §4), else 0 (unused).
    pub next_hop_mtu: u16,
}

impl IcmpErrorRepr {
    /// Emit the message — header and `quoted` (the start of the offending
    /// datagram) — into `buf` with its checksum; returns its length, `None`
    /// when `buf` is too short.
    pub fn emit(&self, quoted: &[u8], buf: &mut [u8]) -> Option<usize> {
        let n = HEADER_LEN + quoted.len();
        let b = buf.get_mut(..n)?;
        b[field::TYPE] = self.msg_type;
        b[field::CODE] = self.code;
        b[field::ECHO_IDENT].copy_from_slice(&[0, 0]);
        b[field::ECHO_SEQ].copy_from_slice(&self.next_hop_mtu.to_be_bytes());
        b[field::BODY..].copy_from_slice(quoted);
        Icmpv4Packet::new_unchecked(b).fill_checksum();
        Some(n)
    }
}

/// Length of an ICMP error carrying `ip_header_len` + 8 quoted bytes.
pub const fn error_len(ip_header_len: usize) -> usize {
    HEADER_LEN + ip_header_len + 8
}

/// Re-exported for callers building quoted datagrams.
pub use ipv4::MIN_HEADER_LEN as QUOTED_MIN_HEADER_LEN;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::tests::TCP_SYN;
    use proptest::prelude::*;

    /// Echo request id 0x1234 seq 1, 16 bytes of data "a".."p".
    const ECHO: [u8; 24] = [
        0x08, 0x00, 0xa2, 0x7f, 0x12, 0x34, 0x00, 0x01, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67,
        0x68, 0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70,
    ];

    fn port_unreachable() -> Vec<u8> {
        // Type 3 code 3 quoting the TCP SYN fixture's header + 8 bytes.
        let mut v = vec![3, 3, 0, 0, 0, 0, 0, 0];
        v.extend_from_slice(&TCP_SYN[..28]);
        let c = checksum::checksum(&v);
        v[2..4].copy_from_slice(&c.to_be_bytes());
        v
    }

    #[test]
    fn emit_error_golden() {
        // Fragmentation needed, next-hop MTU 1400, quoting the SYN fixture's
        // header and first 8 bytes: the same bytes as `port_unreachable`
        // but for type/code, the MTU word and the checksum.
        let repr = IcmpErrorRepr { msg_type: msg_type::DEST_UNREACHABLE, code: unreach_code::FRAG_NEEDED, next_hop_mtu: 1400 };
        let mut buf = [0u8; 64];
        let n = repr.emit(&TCP_SYN[..28], &mut buf).unwrap();
        assert_eq!(n, 36);
        let want_head = [3, 4, 0, 0, 0, 0, 0x05, 0x78];
        assert_eq!(&buf[4..8], &want_head[4..]);
        assert_eq!(&buf[..2], &want_head[..2]);
        assert_eq!(&buf[8..36], &TCP_SYN[..28]);
        let p = Icmpv4Packet::new_checked(&buf[..n]).unwrap();
        assert!(p.verify_checksum() && p.is_error());
        assert_eq!(p.embedded().unwrap().ports(), (50000, 80));
        assert!(repr.emit(&TCP_SYN[..28], &mut [0u8; 35]).is_none(), "too short: nothing");
        assert!(is_query(8) && is_query(0) && !is_query(3) && !is_query(11) && !is_query(5) && !is_query(200));
    }

    #[test]
    fn parse_echo() {
        let p = Icmpv4Packet::new_checked(&ECHO[..]).unwrap();
        assert_eq!(
            (p.msg_type(), p.code(), p.echo_ident(), p.echo_seq()),
            (8, 0, 0x1234, 1)
        );
        assert!(p.verify_checksum());
        assert!(!p.is_error());
        assert_eq!(p.embedded(), Err(Error::BadEmbedded));
        assert_eq!(p.body(), b"abcdefghijklmnop");
    }

    #[test]
    fn emit_echo_reply() {
        let mut b = ECHO;
        let mut p = Icmpv4Packet::new_unchecked(&mut b[..]);
        p.set_msg_type(msg_type::ECHO_REPLY);
        let c = checksum::update_u16(p.checksum(), 0x0800, 0x0000);
        p.set_checksum(c);
        assert!(Icmpv4Packet::new_checked(&b[..]).unwrap().verify_checksum());
        let mut full = b;
        Icmpv4Packet::new_unchecked(&mut full[..]).fill_checksum();
        assert_eq!(full, b);
        assert_eq!(&b[2..4], &[0xaa, 0x7f]);
    }

    #[test]
    fn parse_error_embedded() {
        let v = port_unreachable();
        let p = Icmpv4Packet::new_checked(&v[..]).unwrap();
        assert!(p.is_error() && p.verify_checksum());
        let e = p.embedded().unwrap();
        assert_eq!(e.src, Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(e.dst, Ipv4Addr::new(93, 184, 216, 34));
        assert_eq!(e.protocol, 6);
        assert_eq!(&e.l4[..4], &[0xc3, 0x50, 0x00, 0x50]);
        assert_eq!(e.ports(), (0xc350, 80), "TCP ports of the quoted segment");
        assert_eq!(
            Icmpv4Packet::new_checked(&v[..35]).unwrap().embedded(),
            Err(Error::BadEmbedded)
        );
        assert_eq!(
            Icmpv4Packet::new_checked(&v[..7]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn embedded_ports_follow_the_hash_rule() {
        // SPEC R3: echo request (id, 0), echo reply (0, id), others (0, 0).
        let e = |protocol: u8, l4: [u8; 8]| Embedded { src: Ipv4Addr::LOCALHOST, dst: Ipv4Addr::LOCALHOST, protocol, l4 };
        assert_eq!(e(17, [0, 53, 0x30, 0x39, 0, 0, 0, 0]).ports(), (53, 12345));
        assert_eq!(e(1, [msg_type::ECHO_REQUEST, 0, 0, 0, 0x12, 0x34, 0, 1]).ports(), (0x1234, 0));
        assert_eq!(e(1, [msg_type::ECHO_REPLY, 0, 0, 0, 0x12, 0x34, 0, 1]).ports(), (0, 0x1234));
        assert_eq!(e(1, [msg_type::TIME_EXCEEDED, 0, 0, 0, 0x12, 0x34, 0, 1]).ports(), (0, 0));
        assert_eq!(e(47, [1; 8]).ports(), (0, 0), "GRE: no ports");
    }

    proptest! {
        #[test]
        fn never_panics(i in 0usize..36, x in any::<u8>()) {
            let mut v = port_unreachable();
            v[i] ^= x;
            for n in 0..=v.len() {
                if let Ok(p) = Icmpv4Packet::new_checked(&v[..n]) {
                    let _ = (p.embedded(), p.verify_checksum(), p.echo_ident(), p.body().len());
                }
            }
        }
    }
}
