//! UDP headers (RFC 768).
//!
//! Invariant: `UdpPacket::new_checked` guarantees `8 <= len() <=
//! buffer.len()`, so getters and `payload()` (which ends at `len()`) are
//! panic-free. [`ports`] reads only the two ports, from a header that may
//! be cut short after them (a classifier's view).

use super::checksum;
use core::fmt;
use std::net::Ipv4Addr;

pub const HEADER_LEN: usize = 8;

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LENGTH: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Error {
    Truncated,
    /// Length field below 8 or above the bytes present.
    BadLength,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "udp header truncated",
            Error::BadLength => "udp length inconsistent",
        })
    }
}

#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

fn be16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let b = buffer.as_ref();
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = usize::from(be16(b, field::LENGTH));
        if l < HEADER_LEN || l > b.len() {
            return Err(Error::BadLength);
        }
        Ok(UdpPacket { buffer })
    }
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }
    #[inline]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) == HEADER_LEN
    }
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..usize::from(self.len())]
    }
    /// Zero means "no checksum" (RFC 768) and verifies.
    #[inline]
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let b = &self.buffer.as_ref()[..usize::from(self.len())];
        checksum::verify(
            checksum::pseudo_header_v4(src.octets(), dst.octets(), 17, self.len()),
            b,
        )
    }
}

/// Source and destination port of a UDP header of which at least the first
/// four bytes are present (length and checksum may be cut off: enough to
/// classify a datagram, not to read it). `None` when shorter.
#[inline]
pub fn ports(header: &[u8]) -> Option<(u16, u16)> {
    let b = header.get(..field::DST_PORT.end)?;
    Some((be16(b, field::SRC_PORT), be16(b, field::DST_PORT)))
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }
    /// Compute the checksum over `len()` bytes; a result of 0 is sent as
    /// 0xffff (RFC 768).
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let l = usize::from(self.len()).min(self.buffer.as_ref().len());
        let ph = checksum::pseudo_header_v4(src.octets(), dst.octets(), 17, l as u16);
        let c = !checksum::fold(checksum::sum(ph, &self.buffer.as_ref()[..l]));
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// DNS query for example.com A, 192.168.1.10:53000 → 8.8.8.8:53.
    const DNS: [u8; 37] = [
        0xcf, 0x08, 0x00, 0x35, 0x00, 0x25, 0x7d, 0x02, 0x12, 0x34, 0x01, 0x00, 0x00, 0x01, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x07, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x03, 0x63,
        0x6f, 0x6d, 0x00, 0x00, 0x01, 0x00, 0x01,
    ];
    const SRC: Ipv4Addr = Ipv4Addr::new(192, 168, 1, 10);
    const DST: Ipv4Addr = Ipv4Addr::new(8, 8, 8, 8);

    #[test]
    fn parse_fixture() {
        let u = UdpPacket::new_checked(&DNS[..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port(), u.len()), (53000, 53, 37));
        assert_eq!(u.payload().len(), 29);
        assert!(u.verify_checksum(SRC, DST));
        assert!(!u.verify_checksum(SRC, Ipv4Addr::new(8, 8, 4, 4)));
    }

    #[test]
    fn emit_fixture() {
        let mut b = DNS;
        let mut u = UdpPacket::new_unchecked(&mut b[..]);
        u.set_checksum(0x1111);
        u.fill_checksum(SRC, DST);
        assert_eq!(b, DNS);
    }

    #[test]
    fn errors() {
        assert_eq!(
            UdpPacket::new_checked(&DNS[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            UdpPacket::new_checked(&DNS[..36]).unwrap_err(),
            Error::BadLength
        );
        let mut b = DNS;
        b[5] = 7;
        assert_eq!(
            UdpPacket::new_checked(&b[..]).unwrap_err(),
            Error::BadLength
        );
    }

    #[test]
    fn ports_of_a_cut_header() {
        assert_eq!(ports(&DNS[..]), Some((53000, 53)));
        assert_eq!(ports(&DNS[..4]), Some((53000, 53)));
        assert_eq!(ports(&DNS[..3]), None);
        assert_eq!(ports(&[]), None);
    }

    proptest! {
        #[test]
        fn never_panics(i in 0usize..37, x in any::<u8>()) {
            let mut b = DNS;
            b[i] ^= x;
            for n in 0..=b.len() {
                if let Ok(u) = UdpPacket::new_checked(&b[..n]) {
                    let _ = (u.payload().len(), u.verify_checksum(SRC, DST));
                }
            }
        }
    }
}
