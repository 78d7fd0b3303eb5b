//! IPv6 fixed header (RFC 8200 §3) and a bounded walk over extension
//! headers (RFC 8200 §4) far enough to find a Fragment header and the
//! upper-layer protocol.
//!
//! Invariant: `Ipv6Packet::new_checked` guarantees 40 header bytes, version
//! 6 and `40 + payload_len <= buffer.len()`; the walk in `upper_layer`
//! visits at most `MAX_EXT_HEADERS` headers and never reads past the
//! payload, so a hostile chain costs a bounded amount of work.

use core::fmt;
use std::net::Ipv6Addr;

pub const HEADER_LEN: usize = 40;
/// Extension headers visited before giving up (RFC 8200 does not bound the
/// chain; RFC 7112 asks that the whole chain sit in the first fragment).
pub const MAX_EXT_HEADERS: usize = 8;

/// Next Header values (IANA "Assigned Internet Protocol Numbers").
pub mod next_header {
    pub const HOP_BY_HOP: u8 = 0;
    pub const ROUTING: u8 = 43;
    pub const FRAGMENT: u8 = 44;
    pub const ESP: u8 = 50;
    pub const AH: u8 = 51;
    pub const NO_NEXT: u8 = 59;
    pub const DEST_OPTS: u8 = 60;
    pub const MOBILITY: u8 = 135;
}

mod field {
    use core::ops::Range;
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Error {
    Truncated,
    BadVersion,
    /// Payload length larger than the bytes present (jumbograms included).
    BadPayloadLen,
    /// An extension header runs past the payload.
    ExtTruncated,
    /// More than `MAX_EXT_HEADERS` extension headers.
    TooManyExtHeaders,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "ipv6 header truncated",
            Error::BadVersion => "ipv6 version is not 6",
            Error::BadPayloadLen => "ipv6 payload length exceeds buffer",
            Error::ExtTruncated => "ipv6 extension header truncated",
            Error::TooManyExtHeaders => "too many ipv6 extension headers",
        })
    }
}

/// Length of a Fragment header (RFC 8200 §4.5).
pub const FRAGMENT_HEADER_LEN: usize = 8;

/// Write a Fragment header into the first 8 bytes of `out` (shorter:
/// nothing): `next_header`, the fragment's `offset` in bytes (a multiple
/// of 8), the M flag, the datagram's identification.
pub fn emit_fragment_header(out: &mut [u8], next_header: u8, offset: u16, more: bool, ident: u32) {
    let Some(h) = out.get_mut(..FRAGMENT_HEADER_LEN) else { return };
    h[0] = next_header;
    h[1] = 0;
    h[2..4].copy_from_slice(&((offset & 0xfff8) | u16::from(more)).to_be_bytes());
    h[4..8].copy_from_slice(&ident.to_be_bytes());
}

/// Result of the extension-header walk.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct UpperLayer {
    /// Upper-layer protocol (or ESP / No Next Header, where the walk stops).
    pub protocol: u8,
    /// Offset of the upper-layer header within `payload()`.
    pub offset: usize,
    /// `(offset in bytes, more fragments, identification)` from a Fragment header.
    pub fragment: Option<(u16, bool, u32)>,
    /// `(routing type, segments left)` of the first Routing header.
    pub routing: Option<(u8, u8)>,
}

#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(Error::BadVersion);
        }
        let pl = usize::from(u16::from_be_bytes([b[4], b[5]]));
        if HEADER_LEN + pl > b.len() {
            return Err(Error::BadPayloadLen);
        }
        Ok(Ipv6Packet { buffer })
    }
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    pub fn traffic_class(&self) -> u8 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        (b[0] << 4) | (b[1] >> 4)
    }
    pub fn flow_label(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([0, b[1] & 0x0f, b[2], b[3]])
    }
    pub fn payload_len(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::PAYLOAD_LEN];
        u16::from_be_bytes([b[0], b[1]])
    }
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        Ipv6Addr::from(a)
    }
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        Ipv6Addr::from(a)
    }
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + usize::from(self.payload_len())]
    }

    /// Walk extension headers (Hop-by-Hop, Routing, Fragment, Destination
    /// Options, AH, Mobility) to the upper layer. Stops at ESP (opaque) and
    /// No Next Header; stops at a non-first fragment (its payload is not
    /// the upper-layer header).
    pub fn upper_layer(&self) -> Result<UpperLayer, Error> {
        let p = self.payload();
        let mut nh = self.next_header();
        let mut off = 0usize;
        let mut fragment = None;
        let mut routing = None;
        for _ in 0..=MAX_EXT_HEADERS {
            let len = match nh {
                next_header::HOP_BY_HOP
                | next_header::ROUTING
                | next_header::DEST_OPTS
                | next_header::MOBILITY => {
                    let l = p.get(off + 1).ok_or(Error::ExtTruncated)?;
                    (usize::from(*l) + 1) * 8
                }
                next_header::AH => {
                    // RFC 4302 §2.2: length in 4-octet units, minus 2.
                    let l = p.get(off + 1).ok_or(Error::ExtTruncated)?;
                    (usize::from(*l) + 2) * 4
                }
                next_header::FRAGMENT => {
                    let h = p.get(off..off + 8).ok_or(Error::ExtTruncated)?;
                    let fo = u16::from_be_bytes([h[2], h[3]]);
                    let ident = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
                    fragment = Some((fo & 0xfff8, fo & 1 != 0, ident));
                    if fo & 0xfff8 != 0 {
                        // Non-first fragment: no upper-layer header here.
                        return Ok(UpperLayer {
                            protocol: h[0],
                            offset: off + 8,
                            fragment,
                            routing,
                        });
                    }
                    8
                }
                _ => {
                    return Ok(UpperLayer {
                        protocol: nh,
                        offset: off,
                        fragment,
                        routing,
                    })
                }
            };
            if off + len > p.len() {
                return Err(Error::ExtTruncated);
            }
            if nh == next_header::ROUTING && routing.is_none() {
                routing = Some((p[off + 2], p[off + 3]));
            }
            nh = p[off];
            off += len;
        }
        Err(Error::TooManyExtHeaders)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Wrap a buffer without checks, for emitting a header.
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }
    /// Version 6, traffic class and flow label.
    pub fn set_ver_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let v = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_payload_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::PAYLOAD_LEN].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = v;
    }
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v;
    }
    pub fn set_src(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }
    pub fn set_dst(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }
    /// The payload, mutable (a view from `new_checked`: within the buffer;
    /// one from `new_unchecked` must hold the payload length it says).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + usize::from(u16::from_be_bytes([self.buffer.as_ref()[4], self.buffer.as_ref()[5]]));
        let b = self.buffer.as_mut();
        let end = end.min(b.len());
        b.get_mut(HEADER_LEN..end).unwrap_or(&mut [])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// ICMPv6 echo request fe80::1 → ff02::1 preceded by a Hop-by-Hop header
    /// (PadN) and a first Fragment header (id 0x01020304, M=1).
    const PKT: [u8; 64] = [
        0x60, 0x00, 0x00, 0x00, 0x00, 0x18, 0x00, 0x40, // ver, plen 24, nh HbH, hlim 64
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // src
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // dst
        0x2c, 0x00, 0x01, 0x04, 0x00, 0x00, 0x00, 0x00, // HbH: nh=44, len 0, PadN 4
        0x3a, 0x00, 0x00, 0x01, 0x01, 0x02, 0x03, 0x04, // Frag: nh=58, off 0, M=1
        0x80, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, // ICMPv6 echo request
    ];

    #[test]
    fn parse_and_walk() {
        let p = Ipv6Packet::new_checked(&PKT[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.payload_len(), 24);
        assert_eq!(p.hop_limit(), 64);
        assert_eq!(p.src(), "fe80::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst(), "ff02::1".parse::<Ipv6Addr>().unwrap());
        let u = p.upper_layer().unwrap();
        assert_eq!(
            u,
            UpperLayer {
                protocol: 58,
                offset: 16,
                fragment: Some((0, true, 0x01020304)),
                routing: None,
            }
        );
    }

    #[test]
    fn emit_header() {
        let mut b = [0u8; 40];
        let mut p = Ipv6Packet::new_unchecked(&mut b[..]);
        p.set_ver_tc_flow(0, 0);
        p.set_payload_len(24);
        p.set_next_header(0);
        p.set_hop_limit(64);
        p.set_src("fe80::1".parse().unwrap());
        p.set_dst("ff02::1".parse().unwrap());
        assert_eq!(b[..], PKT[..40]);
        let mut p = Ipv6Packet::new_unchecked(&mut b[..]);
        p.set_ver_tc_flow(0xb8, 0x12345);
        assert_eq!(
            (p.version(), p.traffic_class(), p.flow_label()),
            (6, 0xb8, 0x12345)
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            Ipv6Packet::new_checked(&PKT[..39]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Ipv6Packet::new_checked(&PKT[..63]).unwrap_err(),
            Error::BadPayloadLen
        );
        let mut b = PKT;
        b[41] = 5; // HbH claims 48 bytes
        assert_eq!(
            Ipv6Packet::new_checked(&b[..])
                .unwrap()
                .upper_layer()
                .unwrap_err(),
            Error::ExtTruncated
        );
        // A chain of Destination Options headers longer than the bound.
        let mut v = vec![0x60, 0, 0, 0, 0, 80, 60, 64];
        v.extend_from_slice(&[0; 32]);
        for _ in 0..10 {
            v.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
        }
        assert_eq!(
            Ipv6Packet::new_checked(&v[..])
                .unwrap()
                .upper_layer()
                .unwrap_err(),
            Error::TooManyExtHeaders
        );
    }

    proptest! {
        #[test]
        fn never_panics(i in 0usize..64, x in any::<u8>()) {
            let mut b = PKT;
            b[i] ^= x;
            for n in 0..=b.len() {
                if let Ok(p) = Ipv6Packet::new_checked(&b[..n]) {
                    let _ = (p.src(), p.dst(), p.flow_label(), p.traffic_class(), p.upper_layer());
                }
            }
        }
    }
}
