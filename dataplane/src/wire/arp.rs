//! ARP packets for IPv4 over Ethernet (RFC 826).
//!
//! Invariant: `ArpPacket::new_checked` accepts only the Ethernet/IPv4 form
//! (htype 1, ptype 0x0800, hlen 6, plen 4) with all 28 bytes present, so the
//! fixed-offset getters are panic-free. Trailing padding is ignored.

use core::fmt;
use std::net::Ipv4Addr;

/// Length of an Ethernet/IPv4 ARP packet (RFC 826).
pub const PACKET_LEN: usize = 28;
/// Hardware type Ethernet (RFC 826; IANA "ARP Parameters").
pub const HTYPE_ETHERNET: u16 = 1;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Operation {
    Request,
    Reply,
    Other(u16),
}

impl From<u16> for Operation {
    fn from(v: u16) -> Self {
        match v {
            1 => Operation::Request,
            2 => Operation::Reply,
            o => Operation::Other(o),
        }
    }
}
impl From<Operation> for u16 {
    fn from(o: Operation) -> u16 {
        match o {
            Operation::Request => 1,
            Operation::Reply => 2,
            Operation::Other(v) => v,
        }
    }
}

mod field {
    use core::ops::Range;
    pub const HTYPE: Range<usize> = 0..2;
    pub const PTYPE: Range<usize> = 2..4;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: Range<usize> = 6..8;
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Error {
    Truncated,
    /// Not Ethernet/IPv4 ARP.
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => f.write_str("arp packet truncated"),
            Error::Unsupported => f.write_str("arp packet not ethernet/ipv4"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

fn mac(b: &[u8], r: core::ops::Range<usize>) -> [u8; 6] {
    let mut m = [0; 6];
    m.copy_from_slice(&b[r]);
    m
}
fn ip(b: &[u8], r: core::ops::Range<usize>) -> Ipv4Addr {
    Ipv4Addr::new(b[r.start], b[r.start + 1], b[r.start + 2], b[r.start + 3])
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let b = buffer.as_ref();
        if b.len() < PACKET_LEN {
            return Err(Error::Truncated);
        }
        if b[field::HTYPE] != HTYPE_ETHERNET.to_be_bytes()
            || b[field::PTYPE] != super::ethernet::ethertype::IPV4.to_be_bytes()
            || b[field::HLEN] != 6
            || b[field::PLEN] != 4
        {
            return Err(Error::Unsupported);
        }
        Ok(ArpPacket { buffer })
    }
    #[inline]
    pub fn operation(&self) -> Operation {
        let b = self.buffer.as_ref();
        Operation::from(u16::from_be_bytes([b[6], b[7]]))
    }
    #[inline]
    pub fn sender_mac(&self) -> [u8; 6] {
        mac(self.buffer.as_ref(), field::SHA)
    }
    #[inline]
    pub fn sender_ip(&self) -> Ipv4Addr {
        ip(self.buffer.as_ref(), field::SPA)
    }
    #[inline]
    pub fn target_mac(&self) -> [u8; 6] {
        mac(self.buffer.as_ref(), field::THA)
    }
    #[inline]
    pub fn target_ip(&self) -> Ipv4Addr {
        ip(self.buffer.as_ref(), field::TPA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    #[inline]
    pub fn set_operation(&mut self, op: Operation) {
        self.buffer.as_mut()[field::OPER].copy_from_slice(&u16::from(op).to_be_bytes());
    }
    #[inline]
    pub fn set_sender_mac(&mut self, m: [u8; 6]) {
        self.buffer.as_mut()[field::SHA].copy_from_slice(&m);
    }
    #[inline]
    pub fn set_sender_ip(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SPA].copy_from_slice(&a.octets());
    }
    #[inline]
    pub fn set_target_mac(&mut self, m: [u8; 6]) {
        self.buffer.as_mut()[field::THA].copy_from_slice(&m);
    }
    #[inline]
    pub fn set_target_ip(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::TPA].copy_from_slice(&a.octets());
    }
}

/// Value form of an Ethernet/IPv4 ARP packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ArpRepr {
    pub operation: Operation,
    pub sender_mac: [u8; 6],
    pub sender_ip: Ipv4Addr,
    pub target_mac: [u8; 6],
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Self {
        ArpRepr {
            operation: p.operation(),
            sender_mac: p.sender_mac(),
            sender_ip: p.sender_ip(),
            target_mac: p.target_mac(),
            target_ip: p.target_ip(),
        }
    }
    /// Write the 28 bytes into `buf` (which must hold at least that many).
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) {
        buf[field::HTYPE].copy_from_slice(&HTYPE_ETHERNET.to_be_bytes());
        buf[field::PTYPE].copy_from_slice(&super::ethernet::ethertype::IPV4.to_be_bytes());
        buf[field::HLEN] = 6;
        buf[field::PLEN] = 4;
        let mut p = ArpPacket {
            buffer: &mut buf[..PACKET_LEN],
        };
        p.set_operation(self.operation);
        p.set_sender_mac(self.sender_mac);
        p.set_sender_ip(self.sender_ip);
        p.set_target_mac(self.target_mac);
        p.set_target_ip(self.target_ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The ARP body of a captured request: who-has 192.168.1.1 tell 192.168.1.10.
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x00, 0x1b, 0x21, 0x3a, 0x4f, 0x5c, 0xc0,
        0xa8, 0x01, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0xa8, 0x01, 0x01,
    ];

    #[test]
    fn parse_request() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        let r = ArpRepr::parse(&p);
        assert_eq!(r.operation, Operation::Request);
        assert_eq!(r.sender_mac, [0x00, 0x1b, 0x21, 0x3a, 0x4f, 0x5c]);
        assert_eq!(r.sender_ip, Ipv4Addr::new(192, 168, 1, 10));
        assert_eq!(r.target_mac, [0; 6]);
        assert_eq!(r.target_ip, Ipv4Addr::new(192, 168, 1, 1));
    }

    #[test]
    fn emit_roundtrip() {
        let r = ArpPacket::new_checked(&REQUEST[..])
            .map(|p| ArpRepr::parse(&p))
            .unwrap();
        let mut out = [0u8; 28];
        r.emit(&mut out);
        assert_eq!(out, REQUEST);
    }

    #[test]
    fn rejects_non_ipv4() {
        let mut b = REQUEST;
        b[3] = 0xdd;
        assert_eq!(
            ArpPacket::new_checked(&b[..]).unwrap_err(),
            Error::Unsupported
        );
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[..27]).unwrap_err(),
            Error::Truncated
        );
    }

    proptest! {
        #[test]
        fn never_panics(i in 0usize..28, x in any::<u8>()) {
            let mut b = REQUEST;
            b[i] ^= x;
            for n in 0..=b.len() {
                if let Ok(p) = ArpPacket::new_checked(&b[..n]) { let _ = ArpRepr::parse(&p); }
            }
        }
    }
}
