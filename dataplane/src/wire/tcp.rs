//! TCP headers and options (RFC 9293 §3.1; window scale and timestamps
//! RFC 7323; SACK RFC 2018).
//!
//! Invariant: `TcpPacket::new_checked` guarantees `20 <= header_len() <=
//! buffer.len()`, so getters, `options()` and `payload()` are panic-free.
//! The option parser never reads past the option bytes and tolerates
//! unknown kinds; a malformed option (length < 2 or past the end) ends the
//! walk with an error, leaving what was parsed before it.

use super::checksum;
use core::fmt;
use std::net::Ipv4Addr;

pub const MIN_HEADER_LEN: usize = 20;
/// Largest window-scale shift (RFC 7323 §2.3).
pub const MAX_WSCALE: u8 = 14;
/// SACK blocks that fit in 40 option bytes (RFC 2018 §3).
pub const MAX_SACK_BLOCKS: usize = 4;

/// Flag bits of byte 13 (RFC 9293 §3.1, RFC 3168).
pub mod flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
    pub const URG: u8 = 0x20;
    pub const ECE: u8 = 0x40;
    pub const CWR: u8 = 0x80;
}

/// Option kinds (IANA "TCP Option Kind Numbers").
pub mod option_kind {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WSCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMP: u8 = 8;
}

mod field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const SEQ: Range<usize> = 4..8;
    pub const ACK: Range<usize> = 8..12;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: Range<usize> = 14..16;
    pub const CHECKSUM: Range<usize> = 16..18;
    pub const URGENT: Range<usize> = 18..20;
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Fewer than 20 bytes, or fewer than the data offset claims.
    Truncated,
    /// Data offset below 5.
    BadHeaderLen,
    /// An option with length < 2 or running past the header.
    BadOption,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "tcp header truncated",
            Error::BadHeaderLen => "tcp data offset below 5",
            Error::BadOption => "malformed tcp option",
        })
    }
}

#[derive(Debug, Clone)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

#[inline]
fn be16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}
#[inline]
fn be32(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    u32::from_be_bytes([b[r.start], b[r.start + 1], b[r.start + 2], b[r.start + 3]])
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let b = buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = usize::from(b[field::DATA_OFF] >> 4) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(Error::BadHeaderLen);
        }
        if hl > b.len() {
            return Err(Error::Truncated);
        }
        Ok(TcpPacket { buffer })
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
    pub fn seq(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ)
    }
    #[inline]
    pub fn ack(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK)
    }
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::DATA_OFF] >> 4) * 4
    }
    /// The eight flag bits (CWR..FIN); see `flags`.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    #[inline]
    pub fn window(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW)
    }
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    #[inline]
    pub fn urgent(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT)
    }
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
    /// Verify the checksum over the whole buffer (header + payload) with
    /// the IPv4 pseudo-header.
    #[inline]
    pub fn verify_checksum(&self, src: Ipv4Addr, dst: Ipv4Addr) -> bool {
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v4(src.octets(), dst.octets(), 6, b.len() as u16);
        checksum::verify(ph, b)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        TcpPacket { buffer }
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
    pub fn set_seq(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_ack(&mut self, v: u32) {
        self.buffer.as_mut()[field::ACK].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_header_len(&mut self, len: usize) {
        self.buffer.as_mut()[field::DATA_OFF] = ((len / 4) as u8) << 4;
    }
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    #[inline]
    pub fn set_window(&mut self, v: u16) {
        self.buffer.as_mut()[field::WINDOW].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_urgent(&mut self, v: u16) {
        self.buffer.as_mut()[field::URGENT].copy_from_slice(&v.to_be_bytes());
    }
    /// The option bytes, writable in place (SYN-cookie SACK translation);
    /// walk them with `OptionIter` on `options()` first.
    #[inline]
    pub fn options_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[MIN_HEADER_LEN..hl]
    }
    /// Recompute the checksum over the whole buffer.
    #[inline]
    pub fn fill_checksum(&mut self, src: Ipv4Addr, dst: Ipv4Addr) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let ph = checksum::pseudo_header_v4(src.octets(), dst.octets(), 6, b.len() as u16);
        let c = !checksum::fold(checksum::sum(ph, b));
        self.set_checksum(c);
    }
}

/// The start of a TCP header as an ICMP error quotes it: at least the
/// ports and the sequence number (8 bytes, RFC 792), the acknowledgment
/// number and the checksum when quoted too. Getters and setters for the
/// fields that are there.
#[derive(Debug)]
pub struct QuotedTcp<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> QuotedTcp<T> {
    /// At least 8 bytes, or `None`.
    pub fn new_checked(buffer: T) -> Option<Self> {
        (buffer.as_ref().len() >= field::ACK.start).then_some(QuotedTcp { buffer })
    }
    pub fn seq(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ)
    }
    /// The acknowledgment number with the ACK flag set, if quoted.
    pub fn ack(&self) -> Option<u32> {
        let b = self.buffer.as_ref();
        let flags = *b.get(field::FLAGS)?;
        (flags & flags::ACK != 0).then(|| be32(b, field::ACK))
    }
    /// The TCP checksum, if quoted.
    pub fn checksum(&self) -> Option<u16> {
        let b = self.buffer.as_ref();
        (b.len() >= field::CHECKSUM.end).then(|| be16(b, field::CHECKSUM))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> QuotedTcp<T> {
    pub fn set_seq(&mut self, v: u32) {
        self.buffer.as_mut()[field::SEQ].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the acknowledgment number if it is quoted.
    pub fn set_ack(&mut self, v: u32) {
        if let Some(b) = self.buffer.as_mut().get_mut(field::ACK) {
            b.copy_from_slice(&v.to_be_bytes());
        }
    }
    /// Sets the checksum if it is quoted.
    pub fn set_checksum(&mut self, v: u16) {
        if let Some(b) = self.buffer.as_mut().get_mut(field::CHECKSUM) {
            b.copy_from_slice(&v.to_be_bytes());
        }
    }
}

/// The 32-bit edges of one SACK option's blocks in a segment's option
/// bytes (RFC 2018 §3: `blocks` left/right pairs starting `body` bytes into
/// the options), read and written in place: edge `2b` is block `b`'s left
/// edge, `2b + 1` its right edge.
pub struct SackEdges<'a> {
    opts: &'a mut [u8],
    body: usize,
}

impl<'a> SackEdges<'a> {
    /// Edge bytes are 4 each; a block is 8.
    const EDGE_LEN: usize = 4;

    pub fn new(opts: &'a mut [u8], body: usize) -> Self {
        SackEdges { opts, body }
    }
    /// Offset of edge `k` within the option bytes.
    #[inline]
    pub fn offset(&self, k: usize) -> usize {
        self.body + Self::EDGE_LEN * k
    }
    /// Edge `k`, `None` past the option bytes.
    #[inline]
    pub fn get(&self, k: usize) -> Option<u32> {
        let at = self.offset(k);
        let b = self.opts.get(at..at + Self::EDGE_LEN)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// Set edge `k` (ignored past the option bytes).
    #[inline]
    pub fn set(&mut self, k: usize, v: u32) {
        let at = self.offset(k);
        if let Some(b) = self.opts.get_mut(at..at + Self::EDGE_LEN) {
            b.copy_from_slice(&v.to_be_bytes());
        }
    }
}

/// One TCP option.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TcpOption<'a> {
    Mss(u16),
    WindowScale(u8),
    SackPermitted,
    /// Raw SACK blocks (8 bytes each).
    Sack(&'a [u8]),
    Timestamp {
        tsval: u32,
        tsecr: u32,
    },
    Unknown {
        kind: u8,
        data: &'a [u8],
    },
}

/// Iterator over options; NOPs are skipped, End stops it.
pub struct OptionIter<'a> {
    data: &'a [u8],
}

impl<'a> OptionIter<'a> {
    #[inline]
    pub fn new(data: &'a [u8]) -> Self {
        OptionIter { data }
    }
    /// The bytes not yet walked: after `next()` returned an option,
    /// `options.len() - remaining().len()` is the offset just past it.
    #[inline]
    pub fn remaining(&self) -> &'a [u8] {
        self.data
    }
}

impl<'a> Iterator for OptionIter<'a> {
    type Item = Result<TcpOption<'a>, Error>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (&kind, rest) = self.data.split_first()?;
            match kind {
                option_kind::END => {
                    self.data = &[];
                    return None;
                }
                option_kind::NOP => {
                    self.data = rest;
                    continue;
                }
                _ => {}
            }
            let len = match rest.first() {
                Some(&l) if l >= 2 && usize::from(l) <= self.data.len() => usize::from(l),
                _ => {
                    self.data = &[];
                    return Some(Err(Error::BadOption));
                }
            };
            let body = &self.data[2..len];
            self.data = &self.data[len..];
            let opt = match (kind, body.len()) {
                (option_kind::MSS, 2) => TcpOption::Mss(u16::from_be_bytes([body[0], body[1]])),
                (option_kind::WSCALE, 1) => TcpOption::WindowScale(body[0]),
                (option_kind::SACK_PERMITTED, 0) => TcpOption::SackPermitted,
                (option_kind::SACK, n) if n % 8 == 0 => TcpOption::Sack(body),
                (option_kind::TIMESTAMP, 8) => TcpOption::Timestamp {
                    tsval: u32::from_be_bytes([body[0], body[1], body[2], body[3]]),
                    tsecr: u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
                },
                (kind, _) => TcpOption::Unknown { kind, data: body },
            };
            return Some(Ok(opt));
        }
    }
}

/// The options the dataplane cares about, gathered in one pass.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpOptions {
    pub mss: Option<u16>,
    /// Shift clamped to `MAX_WSCALE` (RFC 7323 §2.3).
    pub wscale: Option<u8>,
    pub sack_permitted: bool,
    pub timestamp: Option<(u32, u32)>,
    pub sack_blocks: [(u32, u32); MAX_SACK_BLOCKS],
    pub sack_count: u8,
    /// A malformed option ended parsing early.
    pub malformed: bool,
}

impl TcpOptions {
    #[inline]
    pub fn parse(data: &[u8]) -> Self {
        let mut o = TcpOptions::default();
        for opt in OptionIter::new(data) {
            match opt {
                Ok(TcpOption::Mss(m)) => o.mss = Some(m),
                Ok(TcpOption::WindowScale(s)) => o.wscale = Some(s.min(MAX_WSCALE)),
                Ok(TcpOption::SackPermitted) => o.sack_permitted = true,
                Ok(TcpOption::Timestamp { tsval, tsecr }) => o.timestamp = Some((tsval, tsecr)),
                Ok(TcpOption::Sack(blocks)) => {
                    for b in blocks.chunks_exact(8).take(MAX_SACK_BLOCKS) {
                        o.sack_blocks[usize::from(o.sack_count)] = (
                            u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                            u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
                        );
                        o.sack_count += 1;
                        if usize::from(o.sack_count) == MAX_SACK_BLOCKS {
                            break;
                        }
                    }
                }
                Ok(TcpOption::Unknown { .. }) => {}
                Err(_) => o.malformed = true,
            }
        }
        o
    }
    #[inline]
    pub fn sack_blocks(&self) -> &[(u32, u32)] {
        &self.sack_blocks[..usize::from(self.sack_count)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::tests::TCP_SYN;
    use proptest::prelude::*;

    fn seg() -> &'static [u8] {
        &TCP_SYN[20..]
    }

    #[test]
    fn parse_fixture() {
        let t = TcpPacket::new_checked(seg()).unwrap();
        assert_eq!(t.src_port(), 50000);
        assert_eq!(t.dst_port(), 80);
        assert_eq!(t.seq(), 0x12345678);
        assert_eq!(t.ack(), 0);
        assert_eq!(t.header_len(), 40);
        assert_eq!(t.flags(), flags::SYN);
        assert_eq!(t.window(), 64240);
        assert_eq!(t.checksum(), 0xb58f);
        assert!(t.payload().is_empty());
        assert!(t.verify_checksum(Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(93, 184, 216, 34)));
        let o = TcpOptions::parse(t.options());
        assert_eq!(o.mss, Some(1460));
        assert_eq!(o.wscale, Some(7));
        assert!(o.sack_permitted);
        assert_eq!(o.timestamp, Some((0x001a2b3c, 0)));
        assert!(!o.malformed);
    }

    #[test]
    fn sack_blocks_and_bad_options() {
        let opts = [
            1, 1, 5, 18, 0, 0, 0, 1, 0, 0, 0, 9, 0, 0, 0, 20, 0, 0, 0, 30, 3, 3, 200,
        ];
        let o = TcpOptions::parse(&opts);
        assert_eq!(o.sack_blocks(), &[(1, 9), (20, 30)]);
        assert_eq!(o.wscale, Some(MAX_WSCALE));
        let o = TcpOptions::parse(&[2, 4, 5, 0xb4, 8, 1]);
        assert_eq!(o.mss, Some(1460));
        assert!(o.malformed);
        assert!(TcpOptions::parse(&[4, 0]).malformed);
        assert_eq!(TcpOptions::parse(&[0, 4, 2]), TcpOptions::default());
    }

    #[test]
    fn emit_setters() {
        let mut b = TCP_SYN;
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(93, 184, 216, 34));
        let mut t = TcpPacket::new_unchecked(&mut b[20..]);
        t.set_checksum(0);
        t.fill_checksum(src, dst);
        assert_eq!(b, TCP_SYN);
        let mut t = TcpPacket::new_unchecked(&mut b[20..]);
        t.set_src_port(1234);
        t.set_flags(flags::SYN | flags::ACK);
        t.set_ack(7);
        t.fill_checksum(src, dst);
        let t = TcpPacket::new_checked(&b[20..]).unwrap();
        assert_eq!((t.src_port(), t.flags(), t.ack()), (1234, 0x12, 7));
        assert!(t.verify_checksum(src, dst));
    }

    #[test]
    fn errors() {
        assert_eq!(
            TcpPacket::new_checked(&seg()[..19]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            TcpPacket::new_checked(&seg()[..39]).unwrap_err(),
            Error::Truncated
        );
        let mut b = TCP_SYN;
        b[32] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&b[20..]).unwrap_err(),
            Error::BadHeaderLen
        );
    }

    proptest! {
        #[test]
        fn never_panics(i in 0usize..40, x in any::<u8>(), opts in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut b = TCP_SYN;
            b[20 + i] ^= x;
            for n in 0..=40 {
                if let Ok(t) = TcpPacket::new_checked(&b[20..20 + n]) {
                    let o = TcpOptions::parse(t.options());
                    prop_assert!(o.sack_blocks().len() <= MAX_SACK_BLOCKS);
                    let _ = (t.seq(), t.ack(), t.payload().len());
                }
            }
            let _ = TcpOptions::parse(&opts);
            prop_assert!(OptionIter::new(&opts).count() <= opts.len());
        }
    }
}
