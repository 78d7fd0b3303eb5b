//! IPv4 headers (RFC 791).
//!
//! Invariant: `Ipv4Packet::new_checked` guarantees `20 <= header_len() <=
//! total_len() <= buffer.len()` and version 4, so getters, `options()` and
//! `payload()` are panic-free; bytes past `total_len()` (Ethernet padding)
//! are outside `payload()`. The header checksum is *not* checked at
//! construction — `verify_checksum` is a separate, counted decision.
//! `new_checked_header` is the looser check used for the header embedded in
//! an ICMP error (RFC 792), whose total length describes the original
//! datagram rather than the bytes we hold.

use super::checksum;
use core::fmt;
use std::net::Ipv4Addr;

/// Minimum header length (RFC 791 §3.1: IHL >= 5 words).
pub const MIN_HEADER_LEN: usize = 20;
/// "More fragments" flag bit in the flags/fragment-offset word (RFC 791 §3.1).
pub const FLAG_MF: u16 = 0x2000;
/// "Don't fragment" flag bit (RFC 791 §3.1).
pub const FLAG_DF: u16 = 0x4000;
/// TTL of datagrams we originate (RFC 1700 / IANA default TTL).
pub const DEFAULT_TTL: u8 = 64;

mod field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const TOTAL_LEN: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLAGS_FRAG: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

/// Byte offsets of the TTL/protocol word and the checksum, for callers
/// that patch headers in place through `update_u16`.
pub const TTL_PROTO_OFFSET: usize = field::TTL;
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM.start;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// Fewer than 20 bytes, or fewer than IHL × 4.
    Truncated,
    BadVersion,
    /// IHL < 5.
    BadHeaderLen,
    /// Total length < header length, or > bytes present.
    BadTotalLen,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "ipv4 header truncated",
            Error::BadVersion => "ipv4 version is not 4",
            Error::BadHeaderLen => "ipv4 IHL below 5",
            Error::BadTotalLen => "ipv4 total length inconsistent with header or buffer",
        })
    }
}

#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

#[inline]
fn be16(b: &[u8], r: core::ops::Range<usize>) -> u16 {
    u16::from_be_bytes([b[r.start], b[r.start + 1]])
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Check the header only (version, IHL, header present); the total
    /// length is not compared with the buffer. `payload()` then covers
    /// `min(total_len, buffer)`.
    #[inline]
    pub fn new_checked_header(buffer: T) -> Result<Self, Error> {
        let b = buffer.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b[field::VER_IHL] >> 4 != 4 {
            return Err(Error::BadVersion);
        }
        let hl = usize::from(b[field::VER_IHL] & 0x0f) * 4;
        if hl < MIN_HEADER_LEN {
            return Err(Error::BadHeaderLen);
        }
        if hl > b.len() {
            return Err(Error::Truncated);
        }
        Ok(Ipv4Packet { buffer })
    }

    /// Full check: header as above and `header_len <= total_len <= len`.
    #[inline]
    pub fn new_checked(buffer: T) -> Result<Self, Error> {
        let p = Self::new_checked_header(buffer)?;
        let tl = usize::from(p.total_len());
        if tl < p.header_len() || tl > p.buffer.as_ref().len() {
            return Err(Error::BadTotalLen);
        }
        Ok(p)
    }

    #[inline]
    pub fn into_inner(self) -> T {
        self.buffer
    }
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }
    #[inline]
    pub fn dscp_ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN]
    }
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::TOTAL_LEN)
    }
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT)
    }
    #[inline]
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & FLAG_DF != 0
    }
    #[inline]
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & FLAG_MF != 0
    }
    /// Fragment offset in bytes.
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLAGS_FRAG) & 0x1fff) << 3
    }
    /// MF set or offset non-zero.
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLAGS_FRAG) & (FLAG_MF | 0x1fff) != 0
    }
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
    #[inline]
    pub fn src(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }
    #[inline]
    pub fn dst(&self) -> Ipv4Addr {
        let b = self.buffer.as_ref();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }
    #[inline]
    pub fn verify_checksum(&self) -> bool {
        checksum::verify(0, &self.buffer.as_ref()[..self.header_len()])
    }
    /// Option bytes (walked only for the source-route check, see
    /// `scan_options`).
    #[inline]
    pub fn options(&self) -> &[u8] {
        &self.buffer.as_ref()[MIN_HEADER_LEN..self.header_len()]
    }
    /// The payload up to the total length (or the buffer end, whichever is
    /// first: the latter only for `new_checked_header` views).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = usize::from(self.total_len()).min(b.len());
        let start = self.header_len().min(end);
        &b[start..end]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Wrap a buffer without checks, for emitting a header. Getters may
    /// panic until a valid header has been written; use `new_checked` on
    /// untrusted input.
    #[inline]
    pub fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }
    #[inline]
    pub fn set_version_ihl(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }
    #[inline]
    pub fn set_dscp_ecn(&mut self, v: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = v;
    }
    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        self.buffer.as_mut()[field::TOTAL_LEN].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        self.buffer.as_mut()[field::IDENT].copy_from_slice(&v.to_be_bytes());
    }
    /// Flags (DF/MF bits) and offset in bytes (must be a multiple of 8).
    #[inline]
    pub fn set_flags_frag(&mut self, flags: u16, offset_bytes: u16) {
        let v = (flags & (FLAG_DF | FLAG_MF)) | ((offset_bytes >> 3) & 0x1fff);
        self.buffer.as_mut()[field::FLAGS_FRAG].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v;
    }
    #[inline]
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v;
    }
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&v.to_be_bytes());
    }
    #[inline]
    pub fn set_src(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.octets());
    }
    #[inline]
    pub fn set_dst(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.octets());
    }
    /// Recompute the header checksum from scratch.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len().min(self.buffer.as_ref().len());
        let c = checksum::checksum(&self.buffer.as_ref()[..hl]);
        self.set_checksum(c);
    }
    /// Decrement the TTL by one, patching the checksum incrementally
    /// (RFC 1624 eqn. 3 on the TTL/protocol word; RFC 1812 §5.3.1).
    #[inline]
    pub fn decrement_ttl(&mut self) {
        let ttl = self.ttl();
        let proto = self.protocol();
        let old = u16::from_be_bytes([ttl, proto]);
        let new = u16::from_be_bytes([ttl.wrapping_sub(1), proto]);
        let c = checksum::update_u16(self.checksum(), old, new);
        self.set_ttl(ttl.wrapping_sub(1));
        self.set_checksum(c);
    }
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = usize::from(self.total_len()).min(self.buffer.as_ref().len());
        let start = self.header_len().min(end);
        &mut self.buffer.as_mut()[start..end]
    }
}

/// IPv4 option types (IANA "IP Option Numbers").
pub mod option {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    /// Loose Source and Record Route (RFC 791 §3.1).
    pub const LSRR: u8 = 131;
    /// Strict Source and Record Route (RFC 791 §3.1).
    pub const SSRR: u8 = 137;
}

/// What `scan_options` found.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OptionScan {
    /// Well-formed, no source routing.
    Clean,
    /// An LSRR or SSRR option is present (RFC 7126 §4.3–4.4: drop).
    SourceRoute,
    /// An option's length byte is missing, below 2 or past the header.
    Malformed,
}

/// Walk IPv4 options (type-length-value; End and NOP are single bytes).
/// At most 40 bytes, so bounded.
pub fn scan_options(opts: &[u8]) -> OptionScan {
    let mut i = 0;
    let mut found = OptionScan::Clean;
    while let Some(&kind) = opts.get(i) {
        match kind {
            option::END => break,
            option::NOP => i += 1,
            _ => {
                let len = match opts.get(i + 1) {
                    Some(&l) if l >= 2 && i + usize::from(l) <= opts.len() => usize::from(l),
                    _ => return OptionScan::Malformed,
                };
                if kind == option::LSRR || kind == option::SSRR {
                    found = OptionScan::SourceRoute;
                }
                i += len;
            }
        }
    }
    found
}

/// Value form of an option-less IPv4 header.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub protocol: u8,
    pub ttl: u8,
    pub ident: u16,
    pub dont_frag: bool,
    /// Length of the payload (the header adds 20).
    pub payload_len: u16,
}

impl Ipv4Repr {
    #[inline]
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Self {
        Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            ttl: p.ttl(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            payload_len: p.payload().len() as u16,
        }
    }
    /// Emit a 20-byte header with a valid checksum into `buf[..20]`.
    #[inline]
    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = Ipv4Packet::new_unchecked(&mut buf[..MIN_HEADER_LEN]);
        p.set_version_ihl(MIN_HEADER_LEN);
        p.set_dscp_ecn(0);
        p.set_total_len(self.payload_len.saturating_add(MIN_HEADER_LEN as u16));
        p.set_ident(self.ident);
        p.set_flags_frag(if self.dont_frag { FLAG_DF } else { 0 }, 0);
        p.set_ttl(self.ttl);
        p.set_protocol(self.protocol);
        p.set_src(self.src);
        p.set_dst(self.dst);
        p.fill_checksum();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A Linux TCP SYN 10.0.0.2:50000 → 93.184.216.34:80 with MSS 1460,
    /// SACK-permitted, timestamps, window scale 7.
    pub(crate) const TCP_SYN: [u8; 60] = [
        0x45, 0x00, 0x00, 0x3c, 0xab, 0xcd, 0x40, 0x00, 0x40, 0x06, 0x4f, 0x12, 0x0a, 0x00, 0x00,
        0x02, 0x5d, 0xb8, 0xd8, 0x22, 0xc3, 0x50, 0x00, 0x50, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00,
        0x00, 0x00, 0xa0, 0x02, 0xfa, 0xf0, 0xb5, 0x8f, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04,
        0x02, 0x08, 0x0a, 0x00, 0x1a, 0x2b, 0x3c, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x07,
    ];

    #[test]
    fn parse_fixture() {
        let p = Ipv4Packet::new_checked(&TCP_SYN[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.total_len(), 60);
        assert_eq!(p.ident(), 0xabcd);
        assert!(p.dont_frag());
        assert!(!p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 6);
        assert_eq!(p.checksum(), 0x4f12);
        assert!(p.verify_checksum());
        assert_eq!(p.src(), Ipv4Addr::new(10, 0, 0, 2));
        assert_eq!(p.dst(), Ipv4Addr::new(93, 184, 216, 34));
        assert_eq!(p.payload().len(), 40);
        assert!(p.options().is_empty());
    }

    #[test]
    fn padding_is_outside_payload() {
        let mut b = TCP_SYN.to_vec();
        b.extend_from_slice(&[0xee; 6]);
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 40);
    }

    #[test]
    fn emit_matches_fixture() {
        let r = Ipv4Repr::parse(&Ipv4Packet::new_checked(&TCP_SYN[..]).unwrap());
        let mut out = [0u8; 20];
        r.emit(&mut out);
        assert_eq!(out[..], TCP_SYN[..20]);
    }

    #[test]
    fn ttl_decrement_incremental() {
        let mut b = TCP_SYN;
        let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
        for _ in 0..64 {
            p.decrement_ttl();
            assert!(p.verify_checksum());
        }
        assert_eq!(p.ttl(), 0);
    }

    #[test]
    fn errors() {
        assert_eq!(
            Ipv4Packet::new_checked(&TCP_SYN[..19]).unwrap_err(),
            Error::Truncated
        );
        let mut b = TCP_SYN;
        b[0] = 0x65;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadVersion
        );
        b[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadHeaderLen
        );
        b[0] = 0x4f; // 60-byte header, empty payload: valid
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap().payload().len(), 0);
        assert_eq!(
            Ipv4Packet::new_checked(&b[..50]).unwrap_err(),
            Error::Truncated
        );
        let mut b = TCP_SYN;
        b[3] = 61;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadTotalLen
        );
        b[3] = 19;
        assert_eq!(
            Ipv4Packet::new_checked(&b[..]).unwrap_err(),
            Error::BadTotalLen
        );
        assert!(Ipv4Packet::new_checked_header(&b[..]).is_ok());
    }

    #[test]
    fn options_scan() {
        assert_eq!(scan_options(&[]), OptionScan::Clean);
        // Router Alert (RFC 2113) + padding.
        assert_eq!(scan_options(&[0x94, 4, 0, 0]), OptionScan::Clean);
        // NOP, LSRR with one address, End.
        assert_eq!(
            scan_options(&[1, 131, 7, 4, 10, 0, 0, 1, 0]),
            OptionScan::SourceRoute
        );
        assert_eq!(scan_options(&[137, 3, 4, 0]), OptionScan::SourceRoute);
        assert_eq!(scan_options(&[0x94, 1, 0, 0]), OptionScan::Malformed);
        assert_eq!(scan_options(&[1, 1, 1, 0x94]), OptionScan::Malformed);
        assert_eq!(scan_options(&[7, 39, 4]), OptionScan::Malformed);
    }

    proptest! {
        #[test]
        fn options_never_panic(opts in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = scan_options(&opts);
        }

        #[test]
        fn never_panics(i in 0usize..60, x in any::<u8>()) {
            let mut b = TCP_SYN;
            b[i] ^= x;
            for n in 0..=b.len() {
                if let Ok(p) = Ipv4Packet::new_checked(&b[..n]) {
                    let _ = (Ipv4Repr::parse(&p), p.verify_checksum(), p.options().len(), p.frag_offset());
                    prop_assert!(p.payload().len() + p.header_len() == usize::from(p.total_len()));
                }
                if let Ok(p) = Ipv4Packet::new_checked_header(&b[..n]) {
                    let _ = (p.payload().len(), p.verify_checksum());
                }
            }
        }
    }
}
